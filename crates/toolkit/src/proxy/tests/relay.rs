//! The relay: bytes both ways with each half-close passed on, the call's byte bound across
//! connections, the idle timeout, and the accept loop's connection bound.

use super::*;

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
