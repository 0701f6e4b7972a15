//! SOCKS5: the reply to each kind of greeting and request, and the handshake's byte and time
//! budget.

use super::*;

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
