//! brokerd over time: the audit that cannot be written, clean-up after the answer, shutdown,
//! both preflights and what is kept of them, weaker confinement (docs/design.md#service).

use super::*;

/// An audit log that cannot be written (here /dev/full: every write fails with ENOSPC, even
/// for root): a call answers unavailable and the runner is never called; the daemon serves on.
#[test]
fn unwritable_audit_makes_calls_unavailable() {
    let svc = Service::with(Opts {
        audit: Some(PathBuf::from("/dev/full")),
        ..Opts::default()
    });
    let mut c = svc.connect();
    let cases: Vec<(&str, &str, Value)> = vec![
        ("auto", "shell", json!({"command": "ls"})),
        ("auto", "read_file", json!({"path": "a.txt"})),
        ("auto", "read_file", json!({"path": "/etc/passwd"})),
        (
            "ask",
            "write_file",
            json!({"path": "w.txt", "content": "x"}),
        ),
    ];
    for (i, (grant, tool, args)) in cases.into_iter().enumerate() {
        let a = c.call("s", &format!("c{i}"), grant, tool, args);
        assert_eq!(kind(&a), "unavailable", "{grant} {tool}: {a:?}");
        assert_eq!(message(&a), AUDIT_UNAVAILABLE);
    }
    assert_eq!(svc.runner.calls(), 0, "nothing ran unaudited");
    assert_eq!(c.status().audit_head.seq, 0);
}

/// A runner's clean-up after its answer: the answer arrives at once, but the call keeps its
/// slot and counts as in flight (a shutdown's drain waits for it) until the clean-up is done.
#[test]
fn clean_up_after_the_answer_keeps_the_slot_and_the_drain() {
    let svc = Service::with(Opts {
        max_concurrent_calls: 1,
        ..Opts::default()
    });
    let mut first = svc.connect();
    let a = first.call("s", "tidy", "auto", "shell", json!({"command": "ls TIDY"}));
    assert_eq!(kind(&a), "result", "{a:?}");
    assert!(!svc
        .rt
        .block_on(svc.broker.drain(Duration::from_millis(100))));
    let mut second = svc.connect();
    second.send_raw(
        call_req(
            "s",
            "next",
            "auto",
            "shell",
            &json!({"command": "ls"}),
            None,
        )
        .to_string()
        .as_bytes(),
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        svc.runner.tool_calls(),
        1,
        "the slot is still the first call's"
    );
    svc.runner.release();
    let b = second.answer();
    assert_eq!(kind(&b), "result", "{b:?}");
    assert_eq!(svc.runner.tool_calls(), 2);
    assert!(svc.rt.block_on(svc.broker.drain(Duration::from_secs(30))));
}

/// SIGTERM's path: begin_shutdown refuses new calls with an error, a call in flight finishes
/// and is answered, and drain waits for it.
#[test]
fn shutdown_drains_calls_in_flight() {
    let svc = Service::start();
    // Nothing in flight: drain returns at once.
    assert!(svc.rt.block_on(svc.broker.drain(Duration::from_secs(5))));
    let mut busy = svc.connect();
    busy.send_held("s", "inflight");
    svc.runner.wait_started(1);
    svc.broker.begin_shutdown();
    let mut c = svc.connect();
    let a = c.call("s", "new", "auto", "shell", json!({"command": "ls"}));
    assert_eq!(kind(&a), "error", "{a:?}");
    assert_eq!(
        message(&a),
        ProtocolError::ShuttingDown.to_string(),
        "{a:?}"
    );
    // Held past a short grace: drain says calls remain.
    assert!(!svc
        .rt
        .block_on(svc.broker.drain(Duration::from_millis(100))));
    let broker = svc.broker.clone();
    let handle = svc.rt.handle().clone();
    let drainer =
        std::thread::spawn(move || handle.block_on(broker.drain(Duration::from_secs(30))));
    std::thread::sleep(Duration::from_millis(50));
    svc.runner.release();
    let a = busy.answer();
    assert_eq!(kind(&a), "result", "{a:?}");
    assert!(drainer.join().unwrap(), "drained");
    // Stopping the server: no new connection is served.
    let _ = svc.stop.send(true);
    let deadline = Instant::now() + PATIENCE;
    loop {
        match UnixStream::connect(&svc.socket) {
            Err(_) => break,
            Ok(s) => {
                s.set_read_timeout(Some(Duration::from_millis(200)))
                    .unwrap();
                let mut r = BufReader::new(s);
                let mut l = String::new();
                if matches!(r.read_line(&mut l), Ok(0)) {
                    break;
                }
            }
        }
        assert!(Instant::now() < deadline, "the server kept accepting");
        std::thread::sleep(Duration::from_millis(20));
    }
    let d = svc.decisions();
    assert_eq!(
        d.len(),
        2,
        "the shutting-down error made no decision: {d:?}"
    );
}

/// The preflight runs a sandbox once: when it fails, status says so and every call answers
/// unavailable without reaching the runner; when it passes, calls run.
#[test]
fn preflight() {
    for ok in [true, false] {
        let svc = Service::start();
        svc.runner.preflight_ok.store(ok, Ordering::SeqCst);
        let p = svc.rt.block_on(svc.broker.preflight());
        assert_eq!(p.ok, ok, "{p:?}");
        assert_eq!(svc.runner.calls(), 1);
        let spec = &svc.runner.specs()[0];
        assert_eq!(
            (spec.session.as_str(), spec.tool),
            ("preflight", ToolName::Shell)
        );
        assert!(target_of(spec).contains("pids.max"), "limits are read back");
        // The grants' writable directories (the direct one and the staged one), each mounted
        // writable and tested.
        let rw = svc.dir.path().join("notes");
        assert_eq!(
            spec.mounts,
            vec![
                Mount::at(&rw, true).expect("rw"),
                Mount::at(&svc.staged, true).expect("staged")
            ]
        );
        for dir in [&rw, &svc.staged] {
            assert!(
                target_of(spec).contains(&format!("test -w '{}'", dir.display())),
                "{spec:?}"
            );
        }
        // Cached: a second preflight runs nothing.
        assert_eq!(svc.rt.block_on(svc.broker.preflight()), p);
        assert_eq!(svc.runner.calls(), 1);
        let mut c = svc.connect();
        assert_eq!(c.status().preflight.ok, Some(ok));
        let a = c.call("s", "c", "auto", "shell", json!({"command": "ls"}));
        let want = if ok { "result" } else { "unavailable" };
        assert_eq!(kind(&a), want, "{a:?}");
        assert_eq!(svc.runner.calls(), 1 + usize::from(ok));
    }
}

/// The proxy path is proven once, before the first http_fetch: a fetch of a name the proxy
/// was not given, through a proxy and a tool sandbox, which must come back as the proxy's
/// refusal. Broken, http_fetch answers unavailable without another try; other tools run.
#[test]
fn network_preflight() {
    for broken in [false, true] {
        let svc = Service::start();
        svc.runner.network_broken.store(broken, Ordering::SeqCst);
        let mut c = svc.connect();
        assert_eq!(c.status().preflight.network.map(|n| n.ok), Some(None));
        let fetch = json!({"url": "https://docs.example.org/x"});
        let a = c.call("s1", "c1", "auto", "http_fetch", fetch.clone());
        let want = if broken { "unavailable" } else { "result" };
        assert_eq!(kind(&a), want, "{a:?}");
        let specs = svc.runner.specs();
        let probe = &specs[0];
        assert_eq!(
            (probe.session.as_str(), probe.call.as_str()),
            ("preflight", "network")
        );
        assert_eq!(target_of(probe), brokerd::broker::NETWORK_PREFLIGHT_URL);
        let egress = probe.egress.as_ref().expect("the probe has a proxy");
        assert!(!egress.hosts.iter().any(|h| h == "preflight.invalid"));
        assert!(probe.mounts.is_empty());
        assert_eq!(svc.runner.calls(), 1 + usize::from(!broken));
        let status = c.status();
        assert_eq!(
            status.preflight.network.as_ref().map(|n| n.ok),
            Some(Some(!broken)),
            "{status:?}"
        );
        // Kept: the next fetch does not probe again.
        let a = c.call("s2", "c2", "auto", "http_fetch", fetch);
        assert_eq!(kind(&a), want, "{a:?}");
        let probes = svc
            .runner
            .specs()
            .iter()
            .filter(|s| s.call.as_str() == "network")
            .count();
        assert_eq!(probes, 1);
        let a = c.call("s3", "c3", "auto", "shell", json!({"command": "ls"}));
        assert_eq!(kind(&a), "result", "{a:?}");
    }
}

/// docs/design.md#preflight-and-poisoning: only terminal preflight failures are remembered. A
/// failure for now (of the start-up or the network preflight) is tried again by a later call once
/// its back-off has passed, and status says when; until then calls answer unavailable without
/// probing.
#[test]
fn a_transient_preflight_failure_is_tried_again() {
    const RETRY: Duration = Duration::from_millis(300);
    let svc = Service::with(Opts {
        preflight_retry: Some(RETRY),
        ..Opts::default()
    });
    let p = svc.rt.block_on(svc.broker.preflight());
    assert!(!p.ok && !p.terminal, "{p:?}");
    let mut c = svc.connect();
    let st = c.status().preflight;
    assert_eq!(st.terminal, Some(false), "{st:?}");
    let due = st.next_try_in_ms.expect("a next try");
    assert!(due <= 300, "{st:?}");
    let ls = json!({"command": "ls"});
    assert_eq!(
        kind(&c.call("s", "c1", "auto", "shell", ls.clone())),
        "unavailable"
    );
    assert_eq!(svc.runner.calls(), 1, "not due: no new probe");
    std::thread::sleep(RETRY + Duration::from_millis(50));
    svc.runner.preflight_ok.store(true, Ordering::SeqCst);
    let a = c.call("s", "c2", "auto", "shell", ls.clone());
    assert_eq!(kind(&a), "result", "{a:?}");
    assert_eq!(svc.runner.calls(), 3, "the probe again, then the call");
    let st = c.status().preflight;
    assert_eq!((st.ok, st.next_try_in_ms), (Some(true), None), "{st:?}");

    // The network preflight the same way.
    svc.runner.network_broken.store(true, Ordering::SeqCst);
    let fetch = json!({"url": "https://docs.example.org/x"});
    assert_eq!(
        kind(&c.call("s", "f1", "auto", "http_fetch", fetch.clone())),
        "unavailable"
    );
    assert_eq!(
        kind(&c.call("s", "f2", "auto", "http_fetch", fetch.clone())),
        "unavailable"
    );
    let probes = || {
        svc.runner
            .specs()
            .iter()
            .filter(|s| s.call.as_str() == "network")
            .count()
    };
    assert_eq!(probes(), 1);
    assert!(c
        .status()
        .preflight
        .network
        .is_some_and(|n| n.next_try_in_ms.is_some()));
    std::thread::sleep(RETRY + Duration::from_millis(50));
    svc.runner.network_broken.store(false, Ordering::SeqCst);
    let a = c.call("s", "f3", "auto", "http_fetch", fetch);
    assert_eq!(kind(&a), "result", "{a:?}");
    assert_eq!(probes(), 2);
}

/// A terminal preflight failure (the sandbox program absent) is remembered: no retry.
#[test]
fn a_terminal_preflight_failure_is_remembered() {
    const RETRY: Duration = Duration::from_millis(100);
    let svc = Service::with(Opts {
        preflight_retry: Some(RETRY),
        ..Opts::default()
    });
    *svc.runner.terminal.lock().unwrap() = Some("bwrap is absent: /nope".into());
    let p = svc.rt.block_on(svc.broker.preflight());
    assert!(
        !p.ok && p.terminal && p.detail.contains("bwrap is absent"),
        "{p:?}"
    );
    let mut c = svc.connect();
    let st = c.status().preflight;
    assert_eq!(
        (st.terminal, st.next_try_in_ms),
        (Some(true), None),
        "{st:?}"
    );
    std::thread::sleep(RETRY * 2);
    svc.runner.preflight_ok.store(true, Ordering::SeqCst);
    let a = c.call("s", "c", "auto", "shell", json!({"command": "ls"}));
    assert_eq!(kind(&a), "unavailable", "{a:?}");
    assert_eq!(svc.runner.calls(), 1, "never probed again");
}

/// docs/design.md#limits: a cgroup knob the runner could not set is never silent: audited once as
/// an event and shown by status.
#[test]
fn weaker_confinement_is_audited_and_shown() {
    let svc = Service::start();
    let mut c = svc.connect();
    assert!(c.status().weakened.is_empty());
    let line = "cpu.max cannot be set in sandbox cgroups: absent".to_string();
    svc.runner.weakened.lock().unwrap().push(line.clone());
    for call in ["c1", "c2"] {
        let a = c.call("s", call, "auto", "shell", json!({"command": "ls"}));
        assert_eq!(kind(&a), "result", "{a:?}");
    }
    assert_eq!(c.status().weakened, vec![line.clone()]);
    let events: Vec<String> = svc
        .records()
        .iter()
        .filter(|r| r["kind"] == "event")
        .filter_map(|r| r["reason"].as_str().map(str::to_string))
        .collect();
    assert_eq!(
        events,
        vec![format!("weaker confinement than configured: {line}")],
        "audited once"
    );
}
