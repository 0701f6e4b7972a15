//! The egress proxy's tests: the harness (a fake `Dial` that answers from a table and connects
//! to a local server, a SOCKS5 exchange over a socket pair), the command line, binding the
//! socket and the outcome lines. By concern: `socks`, `dial`, `http`, `relay` and `report`.

use super::*;
use std::collections::HashMap;
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::addr;
use crate::dns::Resolver;

mod dial;
mod http;
mod relay;
mod report;
mod socks;

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
