//! Tickets, refusals and stops: an ask approved once and only for its call, declines, the
//! same refusal repeated until it stops, model text shown visibly, and a write over the input
//! bound (docs/design.md#protocol).

use super::*;

/// ask → approval → result; the ticket is single use, bound to the exact call, and cannot
/// be forged; decline is answered declined and audited as cancelled.
#[test]
fn tickets() {
    let svc = Service::start();
    let mut c = svc.connect();
    let w = json!({"path": "w.txt", "content": "hello"});
    let ask = c.call("s", "w1", "ask", "write_file", w.clone());
    assert_eq!(kind(&ask), "ask", "{ask:?}");
    assert!(message(&ask).contains("write 5 bytes to"), "{ask:?}");
    let t = ticket(&ask);
    assert_eq!(svc.runner.calls(), 0, "nothing runs on ask");

    let approved = c.req(call_req("s", "w1", "ask", "write_file", &w, Some(&t)));
    assert_eq!(kind(&approved), "result", "{approved:?}");
    assert_eq!(svc.runner.calls(), 1);
    let spec = &svc.runner.specs()[0];
    assert!(
        spec.mounts[0].write,
        "the approved write mounts its directory writable"
    );

    // (what is re-sent with the ticket, why it is refused). These are the same refusal of
    // the same tool in one session, so the fifth is a stop.
    let t2 = ticket(&c.call("s", "w2", "ask", "write_file", w.clone()));
    let t3 = ticket(&c.call("s", "w3", "ask", "write_file", w.clone()));
    let other = json!({"path": "w.txt", "content": "HELLO"});
    let cases: Vec<(Value, &str)> = vec![
        (
            call_req("s", "w1", "ask", "write_file", &w, Some(&t)),
            "unknown, already used",
        ),
        (
            call_req("s", "w2", "ask", "write_file", &other, Some(&t2)),
            "different call",
        ),
        // A mismatch consumes the ticket, so it cannot be probed.
        (
            call_req("s", "w2", "ask", "write_file", &w, Some(&t2)),
            "unknown, already used",
        ),
        (
            call_req("s2", "w3", "ask", "write_file", &w, Some(&t3)),
            "different call",
        ),
        (
            call_req("s", "w4", "ask", "write_file", &w, Some(&"0".repeat(32))),
            "unknown",
        ),
        (
            call_req("s", "w4", "ask", "write_file", &w, Some("forged")),
            "unknown",
        ),
        (
            call_req("s", "w4", "ask", "write_file", &w, Some("")),
            "unknown",
        ),
    ];
    for (i, (req, why)) in cases.into_iter().enumerate() {
        let a = c.req(req.clone());
        // The fifth "unknown ticket" refusal of write_file in session s is a stop.
        let want = if i == 6 { "stopped" } else { "refused" };
        assert_eq!(kind(&a), want, "{req}: {a:?}");
        assert!(message(&a).contains(why), "{req}: {a:?}");
    }
    assert_eq!(svc.runner.calls(), 1, "no refused approval ran");

    // A ticket on a call that needs none is irrelevant: a read runs.
    let r = c.req(call_req(
        "s",
        "r1",
        "ask",
        "read_file",
        &json!({"path": "a.txt"}),
        Some("x"),
    ));
    assert_eq!(kind(&r), "result", "{r:?}");

    // Decline.
    let t5 = ticket(&c.call("s", "w5", "ask", "write_file", w.clone()));
    let d = c.req(json!({"op": "decline", "id": "d1", "ticket": t5}));
    assert_eq!(kind(&d), "declined", "{d:?}");
    let again = c.req(json!({"op": "decline", "id": "d2", "ticket": t5}));
    assert_eq!(kind(&again), "error", "{again:?}");
    let used = c.req(call_req("s3", "w5", "ask", "write_file", &w, Some(&t5)));
    assert_eq!(
        kind(&used),
        "refused",
        "a declined ticket approves nothing: {used:?}"
    );
    let forged = c.req(json!({"op": "decline", "id": "d3", "ticket": "nope"}));
    assert_eq!(kind(&forged), "error");

    // end_session forgets the session's tickets.
    let t6 = ticket(&c.call("s4", "w6", "ask", "write_file", w.clone()));
    assert_eq!(
        kind(&c.req(json!({"op": "end_session", "id": "e", "session": "s4"}))),
        "ended"
    );
    let gone = c.req(call_req("s4", "w6", "ask", "write_file", &w, Some(&t6)));
    assert_eq!(kind(&gone), "refused", "{gone:?}");

    let d = svc.decisions();
    assert!(
        d.contains(&("s".into(), "w1".into(), "approved".into(), "".into())),
        "{d:?}"
    );
    assert!(
        d.contains(&(
            "s".into(),
            "w5".into(),
            "declined".into(),
            "cancelled".into()
        )),
        "{d:?}"
    );
    assert_eq!(svc.runner.calls(), 2);
}

/// The same refusal asked for refusal_repeats times in a session is stopped, whatever the
/// spacing, quoting, ./ and trailing slashes; end_session starts the count again.
#[test]
fn repeated_refusals_stop() {
    let svc = Service::start();
    let mut c = svc.connect();
    // Each table row: one refusal written five ways; the fifth is stopped.
    let rows: Vec<(&str, &str, Vec<Value>)> = vec![
        (
            "safe",
            "shell",
            vec![
                json!({"command": "rm notes/x"}),
                json!({"command": "rm   notes/x"}),
                json!({"command": "rm 'notes/x'"}),
                json!({"command": "rm \"./notes/x\""}),
                json!({"command": "rm notes/x/"}),
            ],
        ),
        (
            "auto",
            "read_file",
            vec![
                json!({"path": "/etc/passwd"}),
                json!({"path": "/etc/passwd/"}),
                json!({"path": "/etc/passwd"}),
                json!({"path": "/etc/passwd"}),
                json!({"path": "/etc/passwd//"}),
            ],
        ),
        // The reason shows the path with escapes; spellings still count together.
        (
            "auto",
            "read_file",
            vec![
                json!({"path": "/etc/pass\u{1b}[2J\\wd"}),
                json!({"path": "/etc/pass\u{1b}[2J\\wd/"}),
                json!({"path": "/etc/pass\u{1b}[2J\\wd"}),
                json!({"path": "/etc/pass\u{1b}[2J\\wd//"}),
                json!({"path": "/etc/pass\u{1b}[2J\\wd/"}),
            ],
        ),
        (
            "readonly",
            "write_file",
            vec![
                json!({"path": "x.txt", "content": ""}),
                json!({"path": "./x.txt", "content": ""}),
                json!({"path": "././x.txt", "content": "other"}),
                json!({"path": "x.txt", "content": "x"}),
                json!({"path": "./x.txt", "content": ""}),
            ],
        ),
    ];
    for (r, (grant, tool, variants)) in rows.iter().enumerate() {
        let session = format!("rep{r}");
        for (i, args) in variants.iter().enumerate() {
            let a = c.call(&session, &format!("c{i}"), grant, tool, args.clone());
            let want = if i + 1 < 5 { "refused" } else { "stopped" };
            assert_eq!(kind(&a), want, "{grant} {tool} #{} {args}: {a:?}", i + 1);
        }
        let a = c.call(&session, "c5", grant, tool, variants[0].clone());
        assert_eq!(kind(&a), "stopped", "stays stopped");
        assert!(message(&a).contains("5 times"), "{a:?}");
        // Another session is not affected.
        let other = c.call(
            &format!("{session}-other"),
            "c0",
            grant,
            tool,
            variants[0].clone(),
        );
        assert_eq!(kind(&other), "refused");
        assert_eq!(
            kind(&c.req(json!({"op": "end_session", "id": "e", "session": session}))),
            "ended"
        );
        let a = c.call(&session, "c6", grant, tool, variants[0].clone());
        assert_eq!(kind(&a), "refused", "end_session resets the count: {a:?}");
    }
    // A different refusal in the same session counts on its own.
    let mut s = Vec::new();
    for i in 0..4 {
        s.push(kind(&c.call(
            "mix",
            &format!("a{i}"),
            "safe",
            "shell",
            json!({"command": "rm one"}),
        )));
        s.push(kind(&c.call(
            "mix",
            &format!("b{i}"),
            "safe",
            "shell",
            json!({"command": "rm two"}),
        )));
    }
    assert!(s.iter().all(|k| *k == "refused"), "{s:?}");
    assert_eq!(svc.runner.calls(), 0);
    let stops = svc.decisions().iter().filter(|d| d.2 == "stopped").count();
    assert_eq!(stops, 8, "each stop is audited");
}

/// Whatever the model wrote reaches the owner, the model and the audit with its line breaks,
/// terminal escapes and bidi controls shown as escapes; the ticket stays bound to the raw call.
#[test]
fn model_text_is_shown_visibly() {
    let svc = Service::start();
    let mut c = svc.connect();
    let hidden = |t: &str| {
        t.chars()
            .any(|c| c.is_control() || ('\u{202a}'..='\u{202e}').contains(&c) || c == '\u{200b}')
    };
    let command = "rm 'a.txt\n\nAllow grant ask to run ls?\u{1b}[2J\u{202e}\u{200b}'";
    let args = json!({ "command": command });
    let ask = c.call("s", "q1", "ask", "shell", args.clone());
    let question = message(&ask);
    assert_eq!(kind(&ask), "ask", "{ask:?}");
    assert!(!hidden(&question), "{question:?}");
    assert!(
        question.starts_with(
            "Allow grant ask to run `rm 'a.txt\\n\\nAllow grant ask to run ls?\\x1b[2J\\u{202e}\\u{200b}'` ("
        ),
        "{question:?}"
    );

    // What looks like the command in the question is another call: its ticket does not fit.
    let t = ticket(&ask);
    let lookalike = json!({ "command": "rm 'a.txt\\n\\nAllow grant ask to run ls?\\x1b[2J\\u{202e}\\u{200b}'" });
    let a = c.req(call_req("s", "q1", "ask", "shell", &lookalike, Some(&t)));
    assert_eq!(kind(&a), "refused", "{a:?}");
    let t = ticket(&c.call("s", "q2", "ask", "shell", args.clone()));
    let a = c.req(call_req("s", "q2", "ask", "shell", &args, Some(&t)));
    assert_eq!(kind(&a), "result", "{a:?}");
    let specs = svc.runner.specs();
    let ran: Value = serde_json::from_slice(&specs[specs.len() - 1].input).unwrap();
    assert_eq!(
        ran["command"], command,
        "the approved call runs the raw command"
    );

    // Refusals and the stop that follows them.
    for i in 0..5 {
        let a = c.call(
            "s",
            &format!("r{i}"),
            "auto",
            "read_file",
            json!({"path": "/etc/\u{202e}dwssap\r"}),
        );
        let reason = message(&a);
        assert!(!hidden(&reason), "{reason:?}");
        assert!(reason.contains("/etc/\\u{202e}dwssap\\r"), "{reason:?}");
    }
    // A parser's complaint quotes the model too.
    let a = c.call("s", "r5", "auto", "read_file", json!({"x\u{1b}": 1}));
    assert_eq!(kind(&a), "refused", "{a:?}");
    assert!(message(&a).contains("x\\x1b"), "{a:?}");

    // The audit: every text field, the question and the reasons included.
    for rec in svc.records() {
        for (k, v) in rec.as_object().unwrap() {
            if let Some(text) = v.as_str() {
                assert!(!hidden(text), "audit {k}: {text:?}");
            }
        }
    }
    let asked = svc
        .records()
        .into_iter()
        .find(|r| r["call"] == "q1" && r["decision"] == "ask")
        .expect("the ask is audited");
    assert_eq!(asked["executable"], "rm");
    assert!(
        asked["target"]
            .as_str()
            .unwrap_or_default()
            .contains("\\x1b[2J\\u{202e}"),
        "{asked}"
    );
}

/// A decline is not a refusal: declining five times does not stop the session.
#[test]
fn declines_do_not_count_as_refusals() {
    let svc = Service::with(Opts {
        refusal_repeats: 2,
        ..Opts::default()
    });
    let mut c = svc.connect();
    for i in 0..4 {
        let t = ticket(&c.call(
            "s",
            &format!("w{i}"),
            "ask",
            "shell",
            json!({"command": "rm a.txt"}),
        ));
        assert_eq!(
            kind(&c.req(json!({"op": "decline", "id": "d", "ticket": t}))),
            "declined"
        );
    }
    let a = c.call("s", "w9", "ask", "shell", json!({"command": "rm a.txt"}));
    assert_eq!(kind(&a), "ask", "{a:?}");
}

/// The repeated-refusal key is (tool, target, refusal): arguments that do not parse are
/// counted by what they are about, so six different bad URLs or ports are six refusals, while
/// the same one five times is a stop.
#[test]
fn different_bad_arguments_do_not_add_up_to_a_stop() {
    let svc = Service::start();
    let mut c = svc.connect();
    let mut n = 0;
    let mut ask = |c: &mut Client, url: String| {
        n += 1;
        let a = c.call(
            "s",
            &format!("u{n}"),
            "auto",
            "http_fetch",
            json!({ "url": url }),
        );
        kind(&a)
    };
    for i in 0..6 {
        assert_eq!(
            ask(&mut c, format!("http://docs{i}.example.org/")),
            "refused"
        );
        assert_eq!(
            ask(&mut c, format!("https://docs.example.org:{}/", 8000 + i)),
            "refused"
        );
        assert_eq!(
            ask(&mut c, format!("https://u{i}:p@docs.example.org/")),
            "refused"
        );
    }
    let same: Vec<&str> = (0..5)
        .map(|_| ask(&mut c, "http://docs.example.org/".into()))
        .collect();
    assert_eq!(
        same,
        ["refused", "refused", "refused", "refused", "stopped"]
    );
    // The audit holds the target of each (redacted where it holds a secret).
    let targets: Vec<String> = svc
        .records()
        .iter()
        .filter(|r| r["kind"] == "call")
        .filter_map(|r| r["target"].as_str().map(str::to_string))
        .collect();
    assert!(
        targets.contains(&"https://docs.example.org:8003/".to_string()),
        "{targets:?}"
    );
}

/// A write_file over toolkit's standard-input bound is refused before anything runs, with a
/// reason the model can act on.
#[test]
fn a_write_over_the_input_bound_is_refused() {
    let svc = Service::start();
    let mut c = svc.connect();
    let content = "x".repeat(proto::tools::MAX_INPUT);
    let a = c.call(
        "s",
        "big",
        "auto",
        "write_file",
        json!({"path": "big.txt", "content": content}),
    );
    assert_eq!(kind(&a), "refused", "{}", kind(&a));
    assert!(
        message(&a).contains("split it into smaller calls"),
        "{}",
        message(&a)
    );
    assert_eq!(svc.runner.calls(), 0);
    let a = c.call(
        "s",
        "small",
        "auto",
        "write_file",
        json!({"path": "s.txt", "content": "x"}),
    );
    assert_eq!(kind(&a), "result");
}
