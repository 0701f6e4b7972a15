//! The socket: status, every kind of bad frame, peers, clients that vanish, queues and
//! busy, and answers in order (docs/design.md#protocol).

use super::*;

/// `status` reports the protocol, backend, preflight, poisoning and the audit head.
#[test]
fn status_fields() {
    let svc = Service::start();
    let mut c = svc.connect();
    let s = c.status();
    assert_eq!(s.protocol, 1);
    assert_eq!(
        s.backend,
        Some(proto::broker::Backend::Podman),
        "the config's backend"
    );
    assert_eq!(s.version, env!("CARGO_PKG_VERSION"));
    assert!(!s.poisoned);
    assert!(s.enforce_limits);
    assert_eq!(s.preflight.ok, None, "not run yet");
    assert_eq!(s.audit_head.seq, 0);
    assert_eq!(s.audit_head.hash, audit::GENESIS);
    c.call("s", "c1", "auto", "shell", json!({"command": "ls"}));
    c.call(
        "s",
        "c2",
        "auto",
        "read_file",
        json!({"path": "/etc/shadow"}),
    );
    let s = c.status();
    let head = audit::verify(&svc.audit).expect("chain");
    assert_eq!((s.audit_head.seq, s.audit_head.hash), (head.seq, head.hash));
    assert_eq!(s.audit_head.seq, 3, "allow, ran, refused");
    // Status reads no state that a call changes: v:1 is accepted.
    let a = c.req(json!({"op": "status", "id": "v1", "v": 1}));
    assert_eq!(kind(&a), "status");
}

/// Malformed requests: an error each, echoing the id when it can be read, no decision made,
/// and the connection keeps working.
#[test]
fn protocol_errors() {
    let svc = Service::start();
    let mut c = svc.connect();
    let long = "a".repeat(65);
    let call = |session: &str, call: &str, grant: &str| {
        json!({"op": "call", "id": "q", "session": session, "call": call, "grant": grant,
               "tool": "shell", "arguments": "{\"command\":\"ls\"}"})
        .to_string()
    };
    // (line, id echoed, what the message starts with: brokerd's own sentences)
    let bad = FrameError::BadRequest(String::new()).to_string();
    let bad = bad.as_str();
    let utf8 = FrameError::NotUtf8.to_string();
    let version = FrameError::Version(2).to_string();
    let session = ProtocolError::BadIdent("session").to_string();
    let session = session.as_str();
    let call_id = ProtocolError::BadIdent("call").to_string();
    let call_id = call_id.as_str();
    let nope = ProtocolError::UnknownGrant("nope".into()).to_string();
    let empty = ProtocolError::UnknownGrant(String::new()).to_string();
    let cases: Vec<(Vec<u8>, Option<&str>, &str)> = vec![
        (b"not json".to_vec(), None, bad),
        (b"{".to_vec(), None, bad),
        (b"[]".to_vec(), None, bad),
        (b"\xff\xfe{}".to_vec(), None, &utf8),
        (br#"{"op":"launch","id":"7"}"#.to_vec(), Some("7"), bad),
        (br#"{"op":"status"}"#.to_vec(), None, bad),
        (br#"{"op":"status","id":5}"#.to_vec(), None, bad),
        (br#"{"op":"status","id":"8","extra":1}"#.to_vec(), Some("8"), bad),
        (br#"{"op":"status","id":"9","v":2}"#.to_vec(), Some("9"), &version),
        (br#"{"op":"call","id":"10","v":2,"session":"s","call":"c","grant":"auto","tool":"shell","arguments":"{}"}"#.to_vec(), Some("10"), &version),
        (br#"{"op":"call","id":"11","session":"s","call":"c","grant":"auto","tool":"shell","arguments":{"command":"ls"}}"#.to_vec(), Some("11"), bad),
        (br#"{"op":"call","id":"12","session":"s","grant":"auto","tool":"shell","arguments":"{}"}"#.to_vec(), Some("12"), bad),
        (call(&long, "c", "auto").into_bytes(), Some("q"), session),
        (call("s", &long, "auto").into_bytes(), Some("q"), call_id),
        (call("..", "c", "auto").into_bytes(), Some("q"), session),
        (call(".", "c", "auto").into_bytes(), Some("q"), session),
        (call("s", "..", "auto").into_bytes(), Some("q"), call_id),
        (call("a/b", "c", "auto").into_bytes(), Some("q"), session),
        (call("s", "a/b", "auto").into_bytes(), Some("q"), call_id),
        (call("", "c", "auto").into_bytes(), Some("q"), session),
        (call("s p", "c", "auto").into_bytes(), Some("q"), session),
        (call("s", "c", "nope").into_bytes(), Some("q"), &nope),
        (call("s", "c", "").into_bytes(), Some("q"), &empty),
        (br#"{"op":"end_session","id":"13","session":"../x"}"#.to_vec(), Some("13"), session),
        (br#"{"op":"result","id":"14","result_id":"r1","offset":-1}"#.to_vec(), Some("14"), bad),
    ];
    for (line, id, msg) in &cases {
        let a = c.raw(line);
        let shown = String::from_utf8_lossy(line);
        assert_eq!(kind(&a), "error", "{shown}: {a:?}");
        assert_eq!(a.id.as_deref(), *id, "{shown}");
        assert!(
            message(&a).starts_with(msg),
            "{shown}: {a:?} does not start {msg:?}"
        );
    }
    // Empty lines are skipped, not answered; the next request is answered in order.
    c.send_raw(b"");
    c.send_raw(b"   ");
    assert_eq!(c.status().protocol, 1);
    assert_eq!(svc.runner.calls(), 0);
    assert!(
        svc.decisions().is_empty(),
        "no decision was made on a malformed request"
    );
    // Arguments that do not parse are a decision: refused and audited.
    let a = c.raw(
        json!({"op":"call","id":"p","session":"s","call":"c","grant":"auto","tool":"shell","arguments":"{not json"})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(kind(&a), "refused", "{a:?}");
    assert_eq!(svc.decisions().len(), 1);
}

/// A line over 4 MiB is answered with an error (id null) and skipped; the connection still
/// works, and so does a line of exactly the limit's size that holds a valid request.
#[test]
fn over_long_line() {
    let svc = Service::start();
    let mut c = svc.connect();
    let mut big = br#"{"op":"status","id":"big","pad":""#.to_vec();
    big.resize(proto::broker::MAX_LINE + 1, b'x');
    // Written from a thread: the server answers after reading the whole line.
    let mut w = c.w.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        w.write_all(&big).unwrap();
        w.write_all(b"\n").unwrap();
    });
    let a = c.answer();
    writer.join().unwrap();
    assert_eq!(kind(&a), "error");
    assert_eq!(a.id, None);
    assert_eq!(message(&a), FrameError::TooLong.to_string(), "{a:?}");
    assert_eq!(c.status().protocol, 1, "the connection is still in step");

    // A call whose line is just under the limit is read and decided.
    let content = "y".repeat(proto::broker::MAX_LINE - 400);
    let req = call_req(
        "s",
        "w",
        "auto",
        "write_file",
        &json!({"path": "big.txt", "content": content}),
        None,
    );
    let line = req.to_string();
    assert!(line.len() <= proto::broker::MAX_LINE, "{}", line.len());
    let mut w = c.w.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        w.write_all(line.as_bytes()).unwrap();
        w.write_all(b"\n").unwrap();
    });
    let a = c.answer();
    writer.join().unwrap();
    // Decided: more than toolkit reads, so refused before anything runs.
    assert_eq!(kind(&a), "refused", "{}", message(&a));
    assert!(message(&a).contains("split it into smaller calls"));
    assert_eq!(svc.runner.calls(), 0);
}

/// A peer not in `clients` gets one error line and is closed; nothing is decided.
#[test]
fn peer_not_in_clients() {
    let svc = Service::with(Opts {
        clients: Some(Clients::of_uids([me().wrapping_add(4242)])),
        ..Opts::default()
    });
    for _ in 0..3 {
        let mut c = svc.connect();
        // Whatever it sends, it gets the refusal and a close.
        let _ = c.w.write_all(b"{\"op\":\"status\",\"id\":\"1\"}\n");
        let a = c.answer();
        assert_eq!(kind(&a), "error");
        assert_eq!(a.id, None);
        assert_eq!(message(&a), FrameError::PeerNotAllowed.to_string(), "{a:?}");
        assert!(c.closed(), "closed after the error line");
    }
    assert!(!svc.audit.exists() || svc.decisions().is_empty());
}

/// A client that vanishes mid-call: the call still finishes and is audited, and the daemon
/// keeps serving. A client that connects and says nothing does not block anyone.
#[test]
fn client_vanishes_mid_call() {
    let svc = Service::start();
    let silent = svc.connect();
    {
        let mut c = svc.connect();
        c.send_held("s", "gone");
        svc.runner.wait_started(1);
        // Drop both halves: the client is gone.
    }
    svc.runner.release();
    svc.wait_records(2);
    let d = svc.decisions();
    assert_eq!(
        d,
        vec![
            ("s".into(), "gone".into(), "allow".into(), "".into()),
            ("s".into(), "gone".into(), "ran".into(), "result".into()),
        ]
    );
    let mut c = svc.connect();
    assert_eq!(
        kind(&c.call("s", "next", "auto", "shell", json!({"command": "ls"}))),
        "result"
    );
    // A half-written line from a vanished client is not a request.
    {
        let mut half = svc.connect();
        half.w
            .write_all(br#"{"op":"call","id":"h","session":"s","#)
            .unwrap();
    }
    assert_eq!(c.status().protocol, 1);
    drop(silent);
}

/// 20,000 new session ids, each with a refusal: every one is answered, the daemon keeps
/// serving, and the oldest sessions' counts are forgotten (session state is bounded).
#[test]
fn flood_of_sessions_stays_bounded() {
    // Audit on tmpfs when there is one: 20,000 synced records on a disk take minutes.
    let dir = match Path::new("/dev/shm").is_dir() {
        true => tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap()),
        false => tempfile::tempdir().unwrap(),
    };
    let svc = Service::in_dir(dir, Opts::default());
    let mut c = svc.connect();
    let refused = json!({"command": "rm x"});
    for i in 0..4 {
        assert_eq!(
            kind(&c.call("first", &format!("c{i}"), "safe", "shell", refused.clone())),
            "refused"
        );
    }
    let started = Instant::now();
    const N: usize = 20_000;
    const THREADS: usize = 8;
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let mut c = svc.connect();
            let refused = refused.clone();
            std::thread::spawn(move || {
                for i in (t..N).step_by(THREADS) {
                    let a = c.call(&format!("flood-{i}"), "c", "safe", "shell", refused.clone());
                    assert_eq!(kind(&a), "refused", "{a:?}");
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("flood worker");
    }
    let took = started.elapsed();
    assert!(took < Duration::from_secs(300), "the flood took {took:?}");
    // "first" was the least recently used: its four refusals are forgotten, so a fifth is a
    // refusal again, not a stop.
    let a = c.call("first", "c4", "safe", "shell", refused.clone());
    assert_eq!(kind(&a), "refused", "{a:?}");
    // A recent session is still remembered.
    let recent = format!("flood-{}", N - 1);
    for i in 0..3 {
        assert_eq!(
            kind(&c.call(&recent, &format!("r{i}"), "safe", "shell", refused.clone())),
            "refused"
        );
    }
    assert_eq!(
        kind(&c.call(&recent, "r3", "safe", "shell", refused.clone())),
        "stopped"
    );
    assert_eq!(c.status().audit_head.seq as usize, 4 + N + 1 + 4);
    assert_eq!(svc.runner.calls(), 0);
    eprintln!("flood of {N} sessions: {took:?}");
}

/// With every slot taken and the queue full, a new call is answered busy (and audited);
/// the queued calls still run once the slots free up.
#[test]
fn busy_when_the_queue_is_full() {
    let svc = Service::with(Opts {
        max_concurrent_calls: 1,
        ..Opts::default()
    });
    let queue = brokerd::broker::QUEUE_PER_SLOT;
    let mut held: Vec<Client> = (0..=queue).map(|_| svc.connect()).collect();
    for (i, c) in held.iter_mut().enumerate() {
        c.send_held("s", &format!("h{i}"));
    }
    svc.runner.wait_started(1);
    // Each call audits its decision before it queues; then give it a moment to queue.
    svc.wait_records(queue + 1);
    std::thread::sleep(Duration::from_millis(300));
    let mut late = svc.connect();
    let a = late.call("s", "late", "auto", "shell", json!({"command": "ls"}));
    assert_eq!(kind(&a), "error", "{a:?}");
    assert_eq!(message(&a), ProtocolError::Busy.to_string(), "{a:?}");
    // Reads that need no slot are still answered at once.
    assert_eq!(late.status().protocol, 1);
    assert_eq!(svc.runner.calls(), 1, "only the first is running");
    svc.runner.release();
    for c in held.iter_mut() {
        let a = c.answer();
        assert_eq!(kind(&a), "result", "{a:?}");
    }
    assert_eq!(svc.runner.calls(), queue + 1);
    let d = svc.decisions();
    assert!(
        d.contains(&("s".into(), "late".into(), "not_run".into(), "busy".into())),
        "{d:?}"
    );
}

/// A call that waited for its slot past what is left of loopd's timeout (its limit and the
/// stop budget no longer fit) answers busy instead of starting; one that did not wait runs.
#[test]
fn a_call_that_waited_too_long_answers_busy() {
    // 30 s of loopd's patience, 12 s of shell and 16 s to kill and remove: 2 s to wait.
    let svc = Service::with(Opts {
        max_concurrent_calls: 1,
        broker_extra: "timeout_ms = 30000",
        runner_extra: "shell_ms = 12000\nread_file_ms = 2000\nwrite_file_ms = 2000\nhttp_fetch_ms = 1000\negress_start_ms = 500",
        ..Opts::default()
    });
    let mut first = svc.connect();
    first.send_held("s", "h");
    svc.runner.wait_started(1);
    let mut second = svc.connect();
    second.send(call_req(
        "s",
        "w",
        "auto",
        "shell",
        &json!({"command": "ls"}),
        None,
    ));
    svc.wait_records(2);
    std::thread::sleep(Duration::from_millis(2500));
    svc.runner.release();
    assert_eq!(kind(&first.answer()), "result");
    let a = second.answer();
    assert_eq!(kind(&a), "error", "{a:?}");
    assert_eq!(message(&a), ProtocolError::Busy.to_string(), "{a:?}");
    assert_eq!(svc.runner.calls(), 1, "the waiting call never started");
    let a = second.call("s", "now", "auto", "shell", json!({"command": "ls"}));
    assert_eq!(kind(&a), "result", "{a:?}");
    let d = svc.decisions();
    assert!(
        d.contains(&("s".into(), "w".into(), "not_run".into(), "busy".into())),
        "{d:?}"
    );
}

/// Many connections at once, each answered in order.
#[test]
fn concurrent_connections_answer_in_order() {
    let svc = Service::start();
    let workers: Vec<_> = (0..16)
        .map(|t| {
            let mut c = svc.connect();
            std::thread::spawn(move || {
                for i in 0..20 {
                    let a = c.call(
                        &format!("s{t}"),
                        &format!("c{i}"),
                        "auto",
                        "shell",
                        json!({"command": "ls"}),
                    );
                    assert_eq!(a.id.as_deref(), Some(format!("id-c{i}").as_str()));
                    assert_eq!(kind(&a), "result");
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    assert_eq!(svc.runner.calls(), 320);
    assert_eq!(svc.decisions().len(), 640);
}
