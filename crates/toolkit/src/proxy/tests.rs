use super::*;
use std::collections::HashMap;
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::addr;
use crate::dns::Resolver;

/// A resolver answering from a table and a connector that records the address it was given
/// and, when a target is set, really connects to that local listener instead.
#[derive(Default)]
struct FakeDial {
    answers: HashMap<&'static str, Vec<&'static str>>,
    target: Option<SocketAddr>,
    resolves: Mutex<Vec<String>>,
    connects: Mutex<Vec<SocketAddr>>,
}

impl FakeDial {
    fn with(answers: &[(&'static str, &[&'static str])]) -> FakeDial {
        FakeDial {
            answers: answers.iter().map(|(h, a)| (*h, a.to_vec())).collect(),
            ..FakeDial::default()
        }
    }
    fn resolves(&self) -> Vec<String> {
        self.resolves.lock().map(|v| v.clone()).unwrap_or_default()
    }
    fn connects(&self) -> Vec<SocketAddr> {
        self.connects.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

impl Dial for FakeDial {
    fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
        if let Ok(mut r) = self.resolves.lock() {
            r.push(host.to_string());
        }
        match self.answers.get(host) {
            Some(ips) => Ok(ips
                .iter()
                .map(|ip| SocketAddr::new(ip.parse().expect("test address"), port))
                .collect()),
            None => Err(io::Error::other("no such name")),
        }
    }
    fn connect(&self, addr: SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
        if let Ok(mut c) = self.connects.lock() {
            c.push(addr);
        }
        match self.target {
            Some(t) => TcpStream::connect_timeout(&t, timeout),
            None => Err(io::ErrorKind::ConnectionRefused.into()),
        }
    }
}

fn policy() -> Policy {
    Policy::new(vec!["example.com".into(), "*.example.org".into()], vec![])
        .expect("policy")
        .with_handshake_timeout(Duration::from_millis(500))
        .with_connect_timeout(Duration::from_secs(2))
}

fn connect_req(name: &[u8], port: u16) -> Vec<u8> {
    let mut r = vec![5, 1, 0, 3, name.len() as u8];
    r.extend_from_slice(name);
    r.extend_from_slice(&port.to_be_bytes());
    r
}

const HELLO: [u8; 3] = [5, 1, 0];
const OK: [u8; 2] = [5, 0];

/// Reads until the proxy closes; a reset after the last byte counts as the close.
fn read_to_close(s: &mut UnixStream) -> Vec<u8> {
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return got,
            Err(e) => panic!("the proxy neither answered nor closed: {e}"),
        }
    }
}

/// Sends `input` (then, if `eof`, half-closes) and returns what came back before the close
/// and what the proxy says happened.
fn exchange(input: &[u8], eof: bool, policy: &Policy, dial: &FakeDial) -> (Vec<u8>, Outcome) {
    let (mut client, server) = UnixStream::pair().expect("pair");
    std::thread::scope(|s| {
        let handle = s.spawn(|| serve(server, policy, dial));
        // The proxy may close before taking everything; that is its right.
        let _ = client.write_all(input);
        if eof {
            let _ = client.shutdown(Shutdown::Write);
        }
        let got = read_to_close(&mut client);
        let outcome = handle.join().expect("serve does not panic");
        (got, outcome)
    })
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

#[test]
fn replies_table() {
    let dial = FakeDial::with(&[
        ("example.com", &["93.184.216.34"]),
        ("a.example.org", &["93.184.216.35"]),
        ("tailnet.example.org", &["100.100.100.100"]),
        ("loopback.example.org", &["127.0.0.1"]),
        (
            "private.example.org",
            &["10.0.0.1", "169.254.169.254", "::1", "fe80::1"],
        ),
        ("empty.example.org", &[]),
    ]);
    let r = |reply: Reply| reply.bytes().to_vec();
    let p = policy();
    // Without a target server every dial fails: rows that get that far answer 5.
    // (what, bytes sent, bytes answered before the close, reply, reason)
    type Row = (&'static str, Vec<u8>, Vec<u8>, Option<Reply>, Reason);
    let rows: Vec<Row> = vec![
        (
            "no method 0",
            vec![5, 1, 2],
            vec![5, 0xFF],
            None,
            Reason::NoAcceptableMethod,
        ),
        (
            "no methods",
            vec![5, 0],
            vec![5, 0xFF],
            None,
            Reason::NoAcceptableMethod,
        ),
        (
            "SOCKS4",
            vec![4, 1, 0, 80, 1, 2, 3, 4, 0],
            vec![],
            None,
            Reason::NotSocks5,
        ),
        ("empty", vec![], vec![], None, Reason::ClosedEarly),
        ("half greeting", vec![5], vec![], None, Reason::ClosedEarly),
        (
            "short method list",
            vec![5, 3, 0],
            vec![],
            None,
            Reason::ClosedEarly,
        ),
        (
            "BIND",
            cat(&[&HELLO, &[5, 2, 0, 3]]),
            cat(&[&OK, &r(Reply::CommandNotSupported)]),
            Some(Reply::CommandNotSupported),
            Reason::Command(2),
        ),
        (
            "UDP",
            cat(&[&HELLO, &[5, 3, 0, 1]]),
            cat(&[&OK, &r(Reply::CommandNotSupported)]),
            Some(Reply::CommandNotSupported),
            Reason::Command(3),
        ),
        (
            "IPv4 literal",
            cat(&[&HELLO, &[5, 1, 0, 1, 127, 0, 0, 1, 1, 187]]),
            cat(&[&OK, &r(Reply::AddressTypeNotSupported)]),
            Some(Reply::AddressTypeNotSupported),
            Reason::AddressType(1),
        ),
        (
            "IPv6 literal",
            cat(&[&HELLO, &[5, 1, 0, 4], &[0; 16], &[1, 187]]),
            cat(&[&OK, &r(Reply::AddressTypeNotSupported)]),
            Some(Reply::AddressTypeNotSupported),
            Reason::AddressType(4),
        ),
        (
            "address type 9",
            cat(&[&HELLO, &[5, 1, 0, 9]]),
            cat(&[&OK, &r(Reply::AddressTypeNotSupported)]),
            Some(Reply::AddressTypeNotSupported),
            Reason::AddressType(9),
        ),
        (
            "request version 4",
            cat(&[&HELLO, &[4, 1, 0, 3]]),
            OK.to_vec(),
            None,
            Reason::BadRequest,
        ),
        (
            "reserved byte set",
            cat(&[&HELLO, &[5, 1, 1, 3]]),
            OK.to_vec(),
            None,
            Reason::BadRequest,
        ),
        (
            "request cut short",
            cat(&[&HELLO, &[5, 1, 0, 3, 11], b"exam"]),
            OK.to_vec(),
            None,
            Reason::ClosedEarly,
        ),
        (
            "port missing",
            cat(&[&HELLO, &[5, 1, 0, 3, 11], b"example.com", &[1]]),
            OK.to_vec(),
            None,
            Reason::ClosedEarly,
        ),
        (
            "invalid name",
            cat(&[&HELLO, &connect_req(b"exa mple.com", 443)]),
            cat(&[&OK, &r(Reply::NotAllowed)]),
            Some(Reply::NotAllowed),
            Reason::InvalidHost,
        ),
        (
            "one label",
            cat(&[&HELLO, &connect_req(b"localhost", 443)]),
            cat(&[&OK, &r(Reply::NotAllowed)]),
            Some(Reply::NotAllowed),
            Reason::InvalidHost,
        ),
        (
            "IP as a name",
            cat(&[&HELLO, &connect_req(b"127.0.0.1", 443)]),
            cat(&[&OK, &r(Reply::NotAllowed)]),
            Some(Reply::NotAllowed),
            Reason::InvalidHost,
        ),
        (
            "empty name",
            cat(&[&HELLO, &connect_req(b"", 443)]),
            cat(&[&OK, &r(Reply::NotAllowed)]),
            Some(Reply::NotAllowed),
            Reason::InvalidHost,
        ),
        (
            "not UTF-8",
            cat(&[&HELLO, &connect_req(b"ex\xffample.com", 443)]),
            cat(&[&OK, &r(Reply::NotAllowed)]),
            Some(Reply::NotAllowed),
            Reason::NameNotText,
        ),
        (
            "NUL in name",
            cat(&[&HELLO, &connect_req(b"example.com\0", 443)]),
            cat(&[&OK, &r(Reply::NotAllowed)]),
            Some(Reply::NotAllowed),
            Reason::InvalidHost,
        ),
        (
            "not allowed",
            cat(&[&HELLO, &connect_req(b"evil.com", 443)]),
            cat(&[&OK, &r(Reply::NotAllowed)]),
            Some(Reply::NotAllowed),
            Reason::HostNotAllowed,
        ),
        (
            "wildcard base",
            cat(&[&HELLO, &connect_req(b"example.org", 443)]),
            cat(&[&OK, &r(Reply::NotAllowed)]),
            Some(Reply::NotAllowed),
            Reason::HostNotAllowed,
        ),
        (
            "suffix trick",
            cat(&[&HELLO, &connect_req(b"badexample.com", 443)]),
            cat(&[&OK, &r(Reply::NotAllowed)]),
            Some(Reply::NotAllowed),
            Reason::HostNotAllowed,
        ),
        (
            "port 80",
            cat(&[&HELLO, &connect_req(b"example.com", 80)]),
            cat(&[&OK, &r(Reply::NotAllowed)]),
            Some(Reply::NotAllowed),
            Reason::Port(80),
        ),
        (
            "port 0",
            cat(&[&HELLO, &connect_req(b"example.com", 0)]),
            cat(&[&OK, &r(Reply::NotAllowed)]),
            Some(Reply::NotAllowed),
            Reason::Port(0),
        ),
        (
            "no such name",
            cat(&[&HELLO, &connect_req(b"nowhere.example.org", 443)]),
            cat(&[&OK, &r(Reply::HostUnreachable)]),
            Some(Reply::HostUnreachable),
            Reason::ResolveFailed("no such name".into()),
        ),
        (
            "no addresses",
            cat(&[&HELLO, &connect_req(b"empty.example.org", 443)]),
            cat(&[&OK, &r(Reply::HostUnreachable)]),
            Some(Reply::HostUnreachable),
            Reason::NoDialableAddress(vec![]),
        ),
        (
            "tailnet",
            cat(&[&HELLO, &connect_req(b"tailnet.example.org", 443)]),
            cat(&[&OK, &r(Reply::HostUnreachable)]),
            Some(Reply::HostUnreachable),
            Reason::NoDialableAddress(vec!["100.100.100.100".parse().expect("ip")]),
        ),
        (
            "loopback",
            cat(&[&HELLO, &connect_req(b"loopback.example.org", 443)]),
            cat(&[&OK, &r(Reply::HostUnreachable)]),
            Some(Reply::HostUnreachable),
            Reason::NoDialableAddress(vec!["127.0.0.1".parse().expect("ip")]),
        ),
        (
            "private only",
            cat(&[&HELLO, &connect_req(b"private.example.org", 443)]),
            cat(&[&OK, &r(Reply::HostUnreachable)]),
            Some(Reply::HostUnreachable),
            Reason::NoDialableAddress(
                ["10.0.0.1", "169.254.169.254", "::1", "fe80::1"]
                    .iter()
                    .map(|s| s.parse().expect("ip"))
                    .collect(),
            ),
        ),
        (
            "connect fails",
            cat(&[&HELLO, &connect_req(b"example.com", 443)]),
            cat(&[&OK, &r(Reply::ConnectionRefused)]),
            Some(Reply::ConnectionRefused),
            Reason::ConnectFailed(
                "93.184.216.34:443".parse().expect("addr"),
                io::Error::from(io::ErrorKind::ConnectionRefused).to_string(),
            ),
        ),
        (
            "greeting with more methods",
            cat(&[&[5, 3, 2, 1, 0], &connect_req(b"A.Example.ORG.", 443)]),
            cat(&[&OK, &r(Reply::ConnectionRefused)]),
            Some(Reply::ConnectionRefused),
            Reason::ConnectFailed(
                "93.184.216.35:443".parse().expect("addr"),
                io::Error::from(io::ErrorKind::ConnectionRefused).to_string(),
            ),
        ),
    ];
    for (what, input, want, reply, reason) in rows {
        let before = dial.resolves().len();
        let (got, outcome) = exchange(&input, true, &p, &dial);
        assert_eq!(got, want, "{what}: bytes");
        assert_eq!(outcome.reply, reply, "{what}: reply");
        assert_eq!(outcome.reason, reason, "{what}: reason");
        let resolved = dial.resolves().len() - before;
        let expect_resolve = matches!(
            reply,
            Some(Reply::HostUnreachable | Reply::ConnectionRefused)
        );
        assert_eq!(resolved, usize::from(expect_resolve), "{what}: resolutions");
    }
    // The name reaches the resolver normalised: lower case, no trailing dot.
    assert!(dial.resolves().contains(&"a.example.org".to_string()));
}

/// A local TCP server behind the fake Dial; `script` runs on the accepted connection.
fn server(
    script: impl FnOnce(TcpStream) + Send + 'static,
) -> (SocketAddr, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let handle = std::thread::spawn(move || {
        if let Ok((s, _)) = listener.accept() {
            script(s);
        }
    });
    (addr, handle)
}

#[test]
fn dials_the_first_dialable_address_once() {
    let (target, _h) = server(|_s| {});
    let mut dial = FakeDial::with(&[(
        "example.com",
        &[
            "10.0.0.1",
            "127.0.0.1",
            "100.64.0.1",
            "93.184.216.34",
            "1.1.1.1",
        ],
    )]);
    dial.target = Some(target);
    let input = cat(&[&HELLO, &connect_req(b"example.com", 443)]);
    let (got, outcome) = exchange(&input, true, &policy(), &dial);
    assert_eq!(got, cat(&[&OK, &Reply::Succeeded.bytes()]));
    assert_eq!(outcome.reply, Some(Reply::Succeeded));
    assert_eq!(dial.resolves(), vec!["example.com".to_string()]);
    assert_eq!(
        dial.connects(),
        vec!["93.184.216.34:443".parse::<SocketAddr>().expect("addr")]
    );
}

/// Every NAT64 spelling of the tailnet and of loopback is passed over, the local-use
/// prefix 64:ff9b:1::/48 at each RFC 6052 place included, even with everything allowed.
#[test]
fn nat64_spellings_of_forbidden_addresses_are_never_dialed() {
    let (target, _h) = server(|_s| {});
    const NAT64: [&str; 10] = [
        "64:ff9b::6464:6464",
        "64:ff9b::100.100.100.100",
        "64:ff9b:1::6464:6464",
        "64:ff9b:1:6464:64:6400::",
        "64:ff9b:1:64:64:6464::",
        "64:ff9b:1:0:64:6464:6400:0",
        "64:ff9b:1::7f00:1",
        "64:ff9b:1:7f00:0:100::",
        "64:ff9b:1:808:87f:808:808:808",
        "64:ff9b:1::8.8.8.8",
    ];
    let nat64 = NAT64;
    let mut names = nat64.to_vec();
    names.push("64:ff9b:1:808:808:808:808:808");
    let mut dial = FakeDial::with(&[("example.com", names.as_slice())]);
    dial.target = Some(target);
    let (got, _) = exchange(
        &cat(&[&HELLO, &connect_req(b"example.com", 443)]),
        true,
        &policy(),
        &dial,
    );
    assert_eq!(got, cat(&[&OK, &Reply::Succeeded.bytes()]));
    assert_eq!(
        dial.connects(),
        vec!["[64:ff9b:1:808:808:808:808:808]:443"
            .parse::<SocketAddr>()
            .expect("addr")]
    );

    never_dialed_with_everything_allowed("example.com", NAT64.split_at(9).0);
}

/// With an allow list that covers everything (main refuses it; a Policy could still hold
/// it), none of `addrs`, which `host` resolves to, is dialed.
fn never_dialed_with_everything_allowed(host: &'static str, addrs: &'static [&'static str]) {
    let everything: Vec<Cidr> = ["0.0.0.0/0", "::/0"]
        .iter()
        .map(|s| s.parse().expect("cidr"))
        .collect();
    let p = Policy::new(vec![host.into()], everything).expect("policy");
    let dial = FakeDial::with(&[(host, addrs)]);
    let (got, outcome) = exchange(
        &cat(&[&HELLO, &connect_req(host.as_bytes(), 443)]),
        true,
        &p,
        &dial,
    );
    assert_eq!(got, cat(&[&OK, &Reply::HostUnreachable.bytes()]));
    assert!(matches!(outcome.reason, Reason::NoDialableAddress(_)));
    assert!(dial.connects().is_empty());
}

#[test]
fn allow_address_opens_a_range_but_never_the_forbidden_ones() {
    let (target, _h) = server(|_s| {});
    let cidr = |s: &str| addr::parse_allow_address(s).expect("cidr");
    let p = Policy::new(vec!["*.example.org".into()], vec![cidr("192.0.2.0/24")])
        .expect("policy")
        .with_handshake_timeout(Duration::from_millis(500));
    let mut dial = FakeDial::with(&[
        (
            "internal.example.org",
            &["127.0.0.1", "169.254.169.254", "100.64.0.1", "192.0.2.10"],
        ),
        ("outside.example.org", &["198.51.100.1"]),
    ]);
    dial.target = Some(target);
    let (got, _) = exchange(
        &cat(&[&HELLO, &connect_req(b"internal.example.org", 443)]),
        true,
        &p,
        &dial,
    );
    assert_eq!(got, cat(&[&OK, &Reply::Succeeded.bytes()]));
    assert_eq!(
        dial.connects(),
        vec!["192.0.2.10:443".parse::<SocketAddr>().expect("addr")]
    );
    let (got, _) = exchange(
        &cat(&[&HELLO, &connect_req(b"outside.example.org", 443)]),
        true,
        &p,
        &dial,
    );
    assert_eq!(got, cat(&[&OK, &Reply::HostUnreachable.bytes()]));

    // Even a list that covers everything never opens loopback, link-local or the tailnet.
    never_dialed_with_everything_allowed(
        "internal.example.org",
        &[
            "127.0.0.1",
            "169.254.169.254",
            "100.64.0.1",
            "::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "0.0.0.0",
            "224.0.0.1",
        ],
    );
}

fn connected(dial: &FakeDial, p: &Policy) -> (UnixStream, std::thread::JoinHandle<Outcome>) {
    let (mut client, proxy_end) = UnixStream::pair().expect("pair");
    let (p, dial) = (
        p.clone(),
        Arc::new(FakeDial {
            answers: dial.answers.clone(),
            target: dial.target,
            ..FakeDial::default()
        }),
    );
    let handle = std::thread::spawn(move || serve(proxy_end, &p, &*dial));
    client
        .write_all(&cat(&[&HELLO, &connect_req(b"example.com", 443)]))
        .expect("write");
    client
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut reply = [0u8; 12];
    client.read_exact(&mut reply).expect("reply");
    assert_eq!(reply.to_vec(), cat(&[&OK, &Reply::Succeeded.bytes()]));
    (client, handle)
}

#[test]
fn relays_both_ways_and_passes_the_client_half_close_on() {
    // The server answers only once it has seen the end of the request: that end must come
    // through the proxy as a half-close.
    let payload: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let (target, h) = server(|mut s| {
        let mut got = Vec::new();
        s.read_to_end(&mut got).expect("read");
        s.write_all(&(got.len() as u64).to_be_bytes())
            .expect("write");
        s.write_all(&got).expect("write");
    });
    let mut dial = FakeDial::with(&[("example.com", &["93.184.216.34"])]);
    dial.target = Some(target);
    let (mut client, handle) = connected(&dial, &policy());
    // After the handshake no deadline applies.
    std::thread::sleep(Duration::from_millis(600));
    client.write_all(&payload).expect("write");
    client.shutdown(Shutdown::Write).expect("half-close");
    let mut back = Vec::new();
    client.read_to_end(&mut back).expect("read");
    assert_eq!(back[..8], (payload.len() as u64).to_be_bytes());
    assert!(back[8..] == payload[..], "the bytes came back unchanged");
    let outcome = handle.join().expect("serve");
    assert_eq!(
        outcome.reason,
        Reason::Relayed {
            addr: target,
            up: payload.len() as u64,
            down: payload.len() as u64 + 8
        }
    );
    h.join().expect("server");
}

#[test]
fn passes_the_server_half_close_on() {
    let (target, h) = server(|mut s| {
        s.write_all(b"hello").expect("write");
        s.shutdown(Shutdown::Write).expect("half-close");
        let mut got = Vec::new();
        s.read_to_end(&mut got).expect("read");
        assert_eq!(got, b"still talking");
    });
    let mut dial = FakeDial::with(&[("example.com", &["93.184.216.34"])]);
    dial.target = Some(target);
    let (mut client, handle) = connected(&dial, &policy());
    let mut got = Vec::new();
    client.read_to_end(&mut got).expect("read");
    assert_eq!(got, b"hello");
    client
        .write_all(b"still talking")
        .expect("write after the server's half-close");
    client.shutdown(Shutdown::Write).expect("half-close");
    h.join().expect("server saw everything");
    let outcome = handle.join().expect("serve");
    assert!(
        matches!(
            outcome.reason,
            Reason::Relayed {
                up: 13,
                down: 5,
                ..
            }
        ),
        "{outcome}"
    );
}

#[test]
fn handshake_limits() {
    let dial = FakeDial::with(&[("example.com", &["93.184.216.34"])]);
    let p = policy().with_handshake_timeout(Duration::from_millis(200));

    // More than 262 bytes: a greeting of 257 and a request of up to 262 cannot both fit.
    let mut greeting = vec![5, 255];
    greeting.extend(0..=254u8);
    let long = vec![b'a'; 253];
    let input = cat(&[&greeting, &connect_req(&long, 443)]);
    let (got, outcome) = exchange(&input, true, &p, &dial);
    assert_eq!(got, OK.to_vec());
    assert_eq!(outcome.reason, Reason::TooLong);
    assert!(dial.resolves().is_empty());

    // The budget is for greeting and request together: after curl's 3-byte greeting a
    // name of 252 bytes fits exactly (and reaches the checks), 253 does not.
    let input = cat(&[&HELLO, &connect_req(&[b'a'; 252], 443)]);
    assert_eq!(input.len(), MAX_HANDSHAKE_BYTES);
    let (got, outcome) = exchange(&input, true, &p, &dial);
    assert_eq!(got, cat(&[&OK, &Reply::NotAllowed.bytes()]));
    assert_eq!(outcome.reason, Reason::InvalidHost);
    let input = cat(&[&HELLO, &connect_req(&[b'a'; 253], 443)]);
    let (got, outcome) = exchange(&input, true, &p, &dial);
    assert_eq!(got, OK.to_vec());
    assert_eq!(outcome.reason, Reason::TooLong);

    // Two bytes, then nothing: closed once the deadline passes, and not much later.
    for input in [&[5u8, 1][..], &HELLO[..], &cat(&[&HELLO, &[5, 1]])[..]] {
        let started = Instant::now();
        let (_, outcome) = exchange(input, false, &p, &dial);
        assert_eq!(outcome.reason, Reason::HandshakeTimeout, "{input:?}");
        assert!(started.elapsed() >= Duration::from_millis(200));
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}

#[test]
fn a_slow_drip_is_cut_off_by_the_whole_handshake_deadline() {
    let dial = FakeDial::with(&[]);
    let p = policy().with_handshake_timeout(Duration::from_millis(300));
    let (mut client, proxy_end) = UnixStream::pair().expect("pair");
    let started = Instant::now();
    let handle = std::thread::spawn(move || serve(proxy_end, &p, &dial));
    // Each byte arrives well within any per-read timeout, but the whole never does.
    let input = cat(&[&HELLO, &connect_req(b"example.com", 443)]);
    for b in input {
        if client.write_all(&[b]).is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let outcome = handle.join().expect("serve");
    assert_eq!(outcome.reason, Reason::HandshakeTimeout);
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn system_dial_over_a_fake_nameserver() {
    use crate::dns::tests::{a, FakeDns};
    use hickory_proto::rr::RecordType;
    let dns = FakeDns::start(vec![
        (
            ("www.example.org.", RecordType::A),
            crate::dns::tests::Behaviour::Records(vec![("www.example.org.", a("127.0.0.1"))]),
        ),
        (
            ("www.example.org.", RecordType::AAAA),
            crate::dns::tests::Behaviour::Records(vec![]),
        ),
    ]);
    let dial = SystemDial::new(Resolver::new(vec![dns.addr]));
    let got = dial.resolve("www.example.org", 443).expect("resolve");
    assert_eq!(
        got,
        vec!["127.0.0.1:443".parse::<SocketAddr>().expect("addr")]
    );
    assert!(dial.resolve("nowhere.example.org", 443).is_err());

    // The real path refuses a name that resolves to loopback, and never connects.
    let input = cat(&[&HELLO, &connect_req(b"www.example.org", 443)]);
    let (client, proxy_end) = UnixStream::pair().expect("pair");
    let p = policy();
    let handle = std::thread::spawn(move || serve(proxy_end, &p, &dial));
    let mut client = client;
    client.write_all(&input).expect("write");
    let got = read_to_close(&mut client);
    assert_eq!(got, cat(&[&OK, &Reply::HostUnreachable.bytes()]));
    let outcome = handle.join().expect("serve");
    assert_eq!(
        outcome.reason,
        Reason::NoDialableAddress(vec!["127.0.0.1".parse().expect("ip")])
    );

    // connect is a plain TCP connection with the timeout given.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let to = listener.local_addr().expect("addr");
    let dial = SystemDial::new(Resolver::new(vec![dns.addr]));
    let s = dial.connect(to, Duration::from_secs(2)).expect("connect");
    assert_eq!(s.peer_addr().expect("peer"), to);
}

#[test]
fn options_table() {
    let args = |s: &str| s.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    let ok = [
        ("--socket /run/egress/egress.sock --allow example.com", vec!["example.com"], 0),
        ("--allow a.example,*.b.example --socket /s", vec!["a.example", "*.b.example"], 0),
        ("--socket /s --allow a.example --allow c.example --allow-address 192.0.2.0/24 --allow-address 10.0.0.1", vec!["a.example", "c.example"], 2),
    ];
    for (line, allow, n) in ok {
        let o = Options::parse(&args(line)).expect(line);
        assert_eq!(o.policy.allow, allow, "{line}");
        assert_eq!(o.policy.allow_addresses.len(), n, "{line}");
    }
    let bad = [
        ("", "--socket is required"),
        ("--allow example.com", "--socket is required"),
        ("--socket /s", "--allow is required"),
        ("--socket", "--socket needs a value"),
        ("--socket /s --allow", "--allow needs a value"),
        ("--socket /s --socket /t --allow example.com", "--socket given twice"),
        ("--socket /s --allow example.com,", "\"\" is not a host pattern"),
        ("--socket /s --allow *.com", "\"*.com\" is not a host pattern"),
        ("--socket /s --allow 10.0.0.1", "\"10.0.0.1\" is not a host pattern"),
        ("--socket /s --allow example.com --verbose", "unknown argument \"--verbose\""),
        ("--socket /s --allow example.com --allow-address 127.0.0.0/8", "--allow-address 127.0.0.0/8 overlaps 127.0.0.0/8, which is never allowed (loopback, link-local, the tailnet, 0/8, multicast)"),
        ("--socket /s --allow example.com --allow-address 169.254.169.254", "--allow-address 169.254.169.254/32 overlaps 169.254.0.0/16, which is never allowed (loopback, link-local, the tailnet, 0/8, multicast)"),
        ("--socket /s --allow example.com --allow-address 100.64.0.0/10", "--allow-address 100.64.0.0/10 overlaps 100.64.0.0/10, which is never allowed (loopback, link-local, the tailnet, 0/8, multicast)"),
        ("--socket /s --allow example.com --allow-address nonsense", "--allow-address \"nonsense\" is not an address or a CIDR such as 192.0.2.0/24"),
    ];
    for (line, why) in bad {
        let e = Options::parse(&args(line)).expect_err(line);
        assert_eq!(e.to_string(), why, "{line}");
    }
}

#[test]
fn bind_replaces_only_a_stale_socket() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("egress.sock");
    let first = bind(&path).expect("bind");
    drop(first);
    // The file of the closed listener is still there: stale, so it is replaced.
    assert!(path.exists());
    let _second = bind(&path).expect("rebind over a stale socket");
    let file = dir.path().join("not-a-socket");
    std::fs::write(&file, "keep me").expect("write");
    assert!(matches!(bind(&file), Err(StartError::NotASocket(_))));
    assert_eq!(std::fs::read_to_string(&file).expect("read"), "keep me");
}

#[test]
fn outcome_lines_escape_the_name() {
    let o = Outcome {
        protocol: Protocol::Socks5,
        target: Some(("evil\n.example.com".into(), 443)),
        reply: Some(Reply::NotAllowed),
        reason: Reason::InvalidHost,
    };
    assert_eq!(
        o.to_string(),
        "\"evil\\n.example.com\" port 443: reply 2 (not allowed): the name is not a valid host"
    );
    let o = Outcome {
        protocol: Protocol::Socks5,
        target: None,
        reply: None,
        reason: Reason::HandshakeTimeout,
    };
    assert_eq!(
        o.to_string(),
        "-: closed: the handshake did not arrive in time"
    );
}

fn status(s: Status) -> Vec<u8> {
    s.bytes()
}

fn connect_line(target: &[u8]) -> Vec<u8> {
    cat(&[
        b"CONNECT ",
        target,
        b" HTTP/1.1\r\nHost: ",
        target,
        b"\r\n\r\n",
    ])
}

/// HTTP CONNECT: every refusal answers its status, closes, and dials nothing; only a name that
/// passed every check is resolved.
#[test]
fn http_connect_table() {
    let dial = FakeDial::with(&[
        ("example.com", &["93.184.216.34"]),
        ("a.example.org", &["93.184.216.35"]),
        ("loopback.example.org", &["127.0.0.1"]),
    ]);
    let p = policy();
    let long = cat(&[
        &[b'a'; 60],
        b".",
        &[b'b'; 60],
        b".",
        &[b'c'; 60],
        b".",
        &[b'd'; 60],
        b".example.com",
    ]);
    assert!(long.len() > 253);
    // (what, bytes sent, status, reason, resolved)
    type Row = (&'static str, Vec<u8>, Option<Status>, Reason, bool);
    let refused = io::Error::from(io::ErrorKind::ConnectionRefused).to_string();
    let rows: Vec<Row> = vec![
        (
            "plain HTTP",
            b"GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n".to_vec(),
            Some(Status::MethodNotAllowed),
            Reason::Method("GET".into()),
            false,
        ),
        (
            "plain HTTP to 443",
            b"GET http://example.com:443/ HTTP/1.1\r\n\r\n".to_vec(),
            Some(Status::MethodNotAllowed),
            Reason::Method("GET".into()),
            false,
        ),
        (
            "POST",
            b"POST / HTTP/1.1\r\n\r\n".to_vec(),
            Some(Status::MethodNotAllowed),
            Reason::Method("POST".into()),
            false,
        ),
        (
            "lower-case connect",
            b"connect example.com:443 HTTP/1.1\r\n\r\n".to_vec(),
            Some(Status::MethodNotAllowed),
            Reason::Method("connect".into()),
            false,
        ),
        (
            "port 80",
            connect_line(b"example.com:80"),
            Some(Status::Forbidden),
            Reason::Port(80),
            false,
        ),
        (
            "port 8443",
            connect_line(b"example.com:8443"),
            Some(Status::Forbidden),
            Reason::Port(8443),
            false,
        ),
        (
            "port in the host field",
            connect_line(b"example.com:80:443"),
            Some(Status::Forbidden),
            Reason::InvalidHost,
            false,
        ),
        (
            "port 443 in the host field",
            connect_line(b"example.com:443:80"),
            Some(Status::Forbidden),
            Reason::InvalidHost,
            false,
        ),
        (
            "IPv4 literal",
            connect_line(b"93.184.216.34:443"),
            Some(Status::Forbidden),
            Reason::IpLiteral,
            false,
        ),
        (
            "IPv6 literal",
            connect_line(b"[2606:2800:220:1::]:443"),
            Some(Status::Forbidden),
            Reason::IpLiteral,
            false,
        ),
        (
            "IPv6 loopback",
            connect_line(b"[::1]:443"),
            Some(Status::Forbidden),
            Reason::IpLiteral,
            false,
        ),
        (
            "decimal address",
            connect_line(b"1572395042:443"),
            Some(Status::Forbidden),
            Reason::InvalidHost,
            false,
        ),
        (
            "NUL in the name",
            connect_line(b"example.com\0.evil.net:443"),
            Some(Status::Forbidden),
            Reason::InvalidHost,
            false,
        ),
        (
            "NUL at the end",
            connect_line(b"example.com\0:443"),
            Some(Status::Forbidden),
            Reason::InvalidHost,
            false,
        ),
        (
            "control character",
            connect_line(b"example.com\x01:443"),
            Some(Status::Forbidden),
            Reason::InvalidHost,
            false,
        ),
        (
            "tab",
            connect_line(b"exa\tmple.com:443"),
            Some(Status::Forbidden),
            Reason::InvalidHost,
            false,
        ),
        (
            "percent escape",
            connect_line(b"example%2ecom:443"),
            Some(Status::Forbidden),
            Reason::InvalidHost,
            false,
        ),
        (
            "percent NUL",
            connect_line(b"example.com%00.evil.net:443"),
            Some(Status::Forbidden),
            Reason::InvalidHost,
            false,
        ),
        (
            "trailing junk after the name",
            connect_line(b"example.com;evil.net:443"),
            Some(Status::Forbidden),
            Reason::InvalidHost,
            false,
        ),
        (
            "trailing junk after the port",
            connect_line(b"example.com:443x"),
            Some(Status::BadRequest),
            Reason::BadRequest,
            false,
        ),
        (
            "signed port",
            connect_line(b"example.com:+443"),
            Some(Status::BadRequest),
            Reason::BadRequest,
            false,
        ),
        (
            "port too large",
            connect_line(b"example.com:65979"),
            Some(Status::BadRequest),
            Reason::BadRequest,
            false,
        ),
        (
            "no port",
            connect_line(b"example.com"),
            Some(Status::BadRequest),
            Reason::BadRequest,
            false,
        ),
        (
            "user info",
            connect_line(b"user@example.com:443"),
            Some(Status::Forbidden),
            Reason::InvalidHost,
            false,
        ),
        (
            "over 253 bytes",
            connect_line(&cat(&[&long, b":443"])),
            Some(Status::Forbidden),
            Reason::InvalidHost,
            false,
        ),
        (
            "not allowed",
            connect_line(b"evil.com:443"),
            Some(Status::Forbidden),
            Reason::HostNotAllowed,
            false,
        ),
        (
            "suffix trick",
            connect_line(b"badexample.com:443"),
            Some(Status::Forbidden),
            Reason::HostNotAllowed,
            false,
        ),
        (
            "one label",
            connect_line(b"localhost:443"),
            Some(Status::Forbidden),
            Reason::InvalidHost,
            false,
        ),
        (
            "two spaces",
            b"CONNECT  example.com:443 HTTP/1.1\r\n\r\n".to_vec(),
            Some(Status::BadRequest),
            Reason::BadRequest,
            false,
        ),
        (
            "HTTP/2 preface",
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec(),
            Some(Status::BadRequest),
            Reason::BadRequest,
            false,
        ),
        (
            "no version",
            b"CONNECT example.com:443\r\n\r\n".to_vec(),
            Some(Status::BadRequest),
            Reason::BadRequest,
            false,
        ),
        (
            "head cut short",
            b"CONNECT example.com:443 HTTP/1.1\r\nHost: x".to_vec(),
            None,
            Reason::ClosedEarly,
            false,
        ),
        (
            "not SOCKS5 nor HTTP",
            vec![0x16, 3, 1, 0, 0],
            None,
            Reason::NotSocks5,
            false,
        ),
        (
            "resolves to loopback",
            connect_line(b"loopback.example.org:443"),
            Some(Status::BadGateway),
            Reason::NoDialableAddress(vec!["127.0.0.1".parse().expect("ip")]),
            true,
        ),
        (
            "connect fails",
            connect_line(b"example.com:443"),
            Some(Status::BadGateway),
            Reason::ConnectFailed("93.184.216.34:443".parse().expect("addr"), refused.clone()),
            true,
        ),
        (
            "upper case and a trailing dot",
            connect_line(b"A.Example.ORG.:443"),
            Some(Status::BadGateway),
            Reason::ConnectFailed("93.184.216.35:443".parse().expect("addr"), refused.clone()),
            true,
        ),
        (
            "bare LF and HTTP/1.0",
            b"CONNECT example.com:443 HTTP/1.0\n\n".to_vec(),
            Some(Status::BadGateway),
            Reason::ConnectFailed("93.184.216.34:443".parse().expect("addr"), refused),
            true,
        ),
    ];
    for (what, input, want, reason, resolves) in rows {
        let (resolved, connects) = (dial.resolves().len(), dial.connects().len());
        let (got, outcome) = exchange(&input, true, &p, &dial);
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&want.map(status).unwrap_or_default()),
            "{what}: bytes"
        );
        if reason != Reason::NotSocks5 {
            assert_eq!(outcome.protocol, Protocol::Http, "{what}");
        }
        assert_eq!(outcome.reason, reason, "{what}: reason");
        assert_eq!(
            dial.resolves().len() - resolved,
            usize::from(resolves),
            "{what}: resolutions"
        );
        assert_eq!(
            dial.connects().len() - connects,
            usize::from(
                resolves
                    && want == Some(Status::BadGateway)
                    && !matches!(outcome.reason, Reason::NoDialableAddress(_))
            ),
            "{what}: connections"
        );
    }
    assert!(dial.resolves().contains(&"a.example.org".to_string()));
}

#[test]
fn http_head_limits() {
    let dial = FakeDial::with(&[("example.com", &["93.184.216.34"])]);
    let p = policy().with_handshake_timeout(Duration::from_millis(200));
    // A head of more than 4096 bytes is refused with 431, whatever it asks for.
    let filler = cat(&[b"X-Filler: ", &vec![b'x'; 4096], b"\r\n"]);
    let input = cat(&[b"CONNECT example.com:443 HTTP/1.1\r\n", &filler, b"\r\n"]);
    let (got, outcome) = exchange(&input, true, &p, &dial);
    assert_eq!(got, status(Status::HeadTooLarge));
    assert_eq!(outcome.reason, Reason::TooLong);
    // A head that never ends: 408 once the deadline passes, and nothing dialled.
    let started = Instant::now();
    let (got, outcome) = exchange(b"CONNECT example.com:443 HTTP/1.1\r\n", false, &p, &dial);
    assert_eq!(got, status(Status::RequestTimeout));
    assert_eq!(outcome.reason, Reason::HandshakeTimeout);
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(dial.resolves().is_empty() && dial.connects().is_empty());
}

#[test]
fn http_connect_relays_and_leaves_what_follows_the_head_to_the_server() {
    let (target, h) = server(|mut s| {
        let mut got = [0u8; 5];
        s.read_exact(&mut got).expect("read");
        assert_eq!(&got, b"hello");
        s.write_all(b"world").expect("write");
    });
    let mut dial = FakeDial::with(&[("example.com", &["93.184.216.34"])]);
    dial.target = Some(target);
    let (mut client, proxy_end) = UnixStream::pair().expect("pair");
    let p = policy();
    let handle = std::thread::spawn(move || serve(proxy_end, &p, &dial));
    // The first bytes of the tunnel come right behind the head, in the same write.
    let head =
        b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nUser-Agent: t\r\n\r\nhello";
    client.write_all(head).expect("write");
    let established = status(Status::Established);
    let mut got = vec![0u8; established.len()];
    client.read_exact(&mut got).expect("status");
    assert_eq!(got, established);
    let mut back = Vec::new();
    client.read_to_end(&mut back).expect("read");
    assert_eq!(back, b"world");
    client.shutdown(Shutdown::Write).expect("half-close");
    h.join().expect("server");
    let outcome = handle.join().expect("serve");
    assert_eq!(
        outcome.reason,
        Reason::Relayed {
            addr: target,
            up: 5,
            down: 5
        }
    );
    assert_eq!(
        outcome.to_string(),
        format!("\"example.com\" port 443: HTTP 200 (Connection established): relayed via {target}: 5 bytes up, 5 bytes down")
    );
}

/// The call's bytes each way are one bound for all its connections: a download past it is
/// cut, nothing past the bound is passed on, and a later connection gets nothing more.
#[test]
fn the_byte_bound_holds_across_connections() {
    let big: Vec<u8> = vec![7u8; 300_000];
    let mut dial = FakeDial::with(&[("example.com", &["93.184.216.34"])]);
    let p = policy().with_max_bytes(100_000);
    for round in 0..2 {
        let sent = big.clone();
        let (target, h) = server(move |mut s| {
            let _ = s.write_all(&sent);
            // Held open: only the bound can end the relay.
            std::thread::sleep(Duration::from_secs(3));
        });
        dial.target = Some(target);
        let (mut client, handle) = connected(&dial, &p);
        let mut got = Vec::new();
        let _ = client.read_to_end(&mut got);
        let outcome = handle.join().expect("serve");
        match outcome.reason {
            Reason::BytesSpent { down, .. } => {
                assert_eq!(down, got.len() as u64, "round {round}");
                // Exactly up to the bound: nothing past it, nothing under it held back.
                if round == 0 {
                    assert_eq!(down, 100_000, "round {round}: {down} bytes, not the bound");
                }
                if round == 1 {
                    assert_eq!(down, 0, "the second connection got more than the bound");
                }
            }
            other => panic!("round {round}: {other:?}"),
        }
        h.join().expect("server");
    }
}

#[test]
fn an_idle_connection_is_closed() {
    let (target, h) = server(|s| {
        std::thread::sleep(Duration::from_secs(3));
        drop(s);
    });
    let mut dial = FakeDial::with(&[("example.com", &["93.184.216.34"])]);
    dial.target = Some(target);
    let p = policy().with_idle_timeout(Duration::from_millis(300));
    let started = Instant::now();
    let (mut client, handle) = connected(&dial, &p);
    // One byte each way keeps it alive past one idle period.
    std::thread::sleep(Duration::from_millis(200));
    client.write_all(b"x").expect("write");
    let outcome = handle.join().expect("serve");
    assert!(
        matches!(outcome.reason, Reason::Idle { up: 1, .. }),
        "{outcome}"
    );
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(500), "{took:?}");
    assert!(took < Duration::from_secs(2), "{took:?}");
    h.join().expect("server");
}

/// `--max-connections`: the accept loop serves that many in all, then closes each new one
/// at once without a reply.
#[test]
fn the_connection_bound_counts_every_connection() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("egress.sock");
    let listener = bind(&path).expect("bind");
    let dial: Arc<dyn Dial> = Arc::new(FakeDial::with(&[]));
    let p = Arc::new(policy());
    let limits = Limits {
        open: 8,
        total: Some(3),
    };
    std::thread::spawn(move || run(listener, p, dial, limits));
    for n in 0..5 {
        let mut c = UnixStream::connect(&path).expect("connect");
        let _ = c.write_all(&cat(&[&HELLO, &connect_req(b"example.com", 443)]));
        let got = read_to_close(&mut c);
        let want = match n < 3 {
            true => cat(&[&OK, &Reply::HostUnreachable.bytes()]),
            false => Vec::new(),
        };
        assert_eq!(got, want, "connection {n}");
    }
}

fn report_lines(path: &std::path::Path) -> Vec<proto::egress::ReportLine> {
    std::fs::read_to_string(path)
        .expect("report")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a report line"))
        .collect()
}

/// A policy that reports to `path`, and a fake dial whose `example.com` is a local server
/// that reads `ask` bytes and answers `answer`.
fn reporting(
    path: &std::path::Path,
    ask: usize,
    answer: &'static [u8],
) -> (FakeDial, Policy, std::thread::JoinHandle<()>) {
    let (target, h) = server(move |mut s| {
        let mut got = vec![0u8; ask];
        s.read_exact(&mut got).expect("read");
        s.write_all(answer).expect("write");
    });
    let mut dial = FakeDial::with(&[("example.com", &["93.184.216.34"])]);
    dial.target = Some(target);
    let p = policy().with_report(Report::create(path).expect("report"));
    (dial, p, h)
}

/// `--report`: each connection's opening and end, numbered, with bytes each way for a relayed
/// one, the reason for a refused one, no host the model spelled invalidly, and the accept
/// loop's closures too; an existing file or a link is never written through.
#[test]
fn the_report_says_what_each_connection_did() {
    use proto::egress::ReportEvent;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("connections.jsonl");
    let (dial, p, h) = reporting(&path, 5, b"hello, world");
    let (mut client, handle) = connected(&dial, &p);
    client.write_all(b"12345").expect("write");
    client.shutdown(Shutdown::Write).expect("half-close");
    let _ = read_to_close(&mut client);
    handle.join().expect("serve");
    h.join().expect("server");
    // Refused: a name with a NUL (left out of the report), then a host not allowed.
    let _ = exchange(
        &cat(&[&HELLO, &connect_req(b"example.com\0.evil", 443)]),
        true,
        &p,
        &dial,
    );
    let _ = exchange(
        &cat(&[&HELLO, &connect_req(b"other.test", 443)]),
        true,
        &p,
        &dial,
    );
    let lines = report_lines(&path);
    let shown: Vec<_> = lines
        .iter()
        .map(|l| (l.n, l.event, l.host.as_deref(), l.up, l.down, l.relayed))
        .collect();
    assert_eq!(
        shown,
        [
            (1, ReportEvent::Open, Some("example.com"), 0, 0, false),
            (1, ReportEvent::End, Some("example.com"), 5, 12, true),
            (2, ReportEvent::End, None, 0, 0, false),
            (3, ReportEvent::End, Some("other.test"), 0, 0, false),
        ]
    );
    let target = dial.target.map(|t| t.to_string());
    assert_eq!(lines[0].addr, target);
    assert_eq!(lines[3].reason, Reason::HostNotAllowed.to_string());
    // Never through what is already there.
    assert!(Report::create(&path).is_err());
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(dir.path().join("elsewhere"), &link).expect("symlink");
    assert!(Report::create(&link).is_err());
    assert!(!dir.path().join("elsewhere").exists());
}

/// The report stops at `REPORT_MAX_LINES` lines, however many connections come, and the
/// accept loop's closures past `--max-connections` are in it until then.
#[test]
fn the_report_is_bounded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("egress.sock");
    let path = dir.path().join("connections.jsonl");
    let listener = bind(&socket).expect("bind");
    let dial: Arc<dyn Dial> = Arc::new(FakeDial::with(&[]));
    let p = Arc::new(policy().with_report(Report::create(&path).expect("report")));
    let limits = Limits {
        open: 8,
        total: Some(2),
    };
    std::thread::spawn(move || run(listener, p, dial, limits));
    let max = proto::egress::REPORT_MAX_LINES;
    for _ in 0..max + 10 {
        let mut c = UnixStream::connect(&socket).expect("connect");
        let _ = c.write_all(&cat(&[&HELLO, &connect_req(b"example.com", 443)]));
        let _ = read_to_close(&mut c);
    }
    // The last closures are written after the client saw its close: wait for the count.
    let deadline = Instant::now() + Duration::from_secs(5);
    let lines = loop {
        let lines = report_lines(&path);
        if lines.len() as u64 >= max || Instant::now() > deadline {
            break lines;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(lines.len() as u64, max);
    // The third connection on is closed unserved (its line may come before the second's end).
    let closed = lines
        .iter()
        .filter(|l| l.reason.contains("the call's 2 connections are used"))
        .count() as u64;
    assert_eq!(closed, max - 2, "{:?}", &lines[..4]);
    assert!(lines.iter().all(|l| l.up == 0 && l.down == 0));
}

/// A flood of refusals past the report's bound cannot hide a tunnel: the lines of a relayed
/// connection, its opening and its end with the bytes, are written whatever came before.
#[test]
fn a_flood_of_refusals_cannot_hide_a_tunnel() {
    use proto::egress::{ReportEvent, Summary, REPORT_MAX_LINES};
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("connections.jsonl");
    let (dial, p, h) = reporting(&path, 3, b"back");
    let (mut client, handle) = connected(&dial, &p);
    for _ in 0..REPORT_MAX_LINES + 5 {
        let _ = exchange(
            &cat(&[&HELLO, &connect_req(b"other.test", 443)]),
            true,
            &p,
            &dial,
        );
    }
    client.write_all(b"abc").expect("write");
    client.shutdown(Shutdown::Write).expect("half-close");
    let _ = read_to_close(&mut client);
    handle.join().expect("serve");
    h.join().expect("server");
    let lines = report_lines(&path);
    let end = lines
        .iter()
        .find(|l| l.n == 1 && l.event == ReportEvent::End)
        .expect("the tunnel's end");
    assert_eq!((end.up, end.down, end.relayed), (3, 4, true));
    let s = Summary::of_report(&std::fs::read(&path).expect("read"));
    assert_eq!(
        (s.connections, s.up, s.down, s.open_at_end),
        (1, 3, 4, 0),
        "{s:?}"
    );
    assert!(s.incomplete.is_some(), "{s:?}");
}
