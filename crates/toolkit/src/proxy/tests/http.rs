//! HTTP CONNECT: the status of each refusal, the head's bounds, and a tunnel that keeps what
//! followed the head for the server.

use super::*;

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
