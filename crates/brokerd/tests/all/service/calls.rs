//! What a call gets: each kind of answer, paging a cut output, tickets, refusals and stops,
//! the tools a grant offers, and the session known down (docs/design.md#protocol).

use super::*;

/// Each kind of call answer, with what the runner got and what the audit says.
#[test]
fn call_answers_by_kind() {
    let svc = Service::start();
    let mut c = svc.connect();
    let a_txt = path(&svc.rw, "a.txt");
    // (call, grant, tool, arguments, kind, text the answer contains, runner called)
    let cases: Vec<(&str, &str, &str, Value, &str, String, bool)> = vec![
        (
            "c1",
            "auto",
            "read_file",
            json!({"path": a_txt}),
            "result",
            "ran read_file".into(),
            true,
        ),
        (
            "c2",
            "auto",
            "read_file",
            json!({"path": "a.txt"}),
            "result",
            "ran read_file".into(),
            true,
        ),
        (
            "c3",
            "auto",
            "write_file",
            json!({"path": "new.txt", "content": "x"}),
            "result",
            "ran write_file".into(),
            true,
        ),
        (
            "c4",
            "auto",
            "shell",
            json!({"command": "ls -la"}),
            "result",
            "ran shell".into(),
            true,
        ),
        (
            "c5",
            "auto",
            "http_fetch",
            json!({"url": "https://docs.example.org/x"}),
            "result",
            "ran http_fetch".into(),
            true,
        ),
        (
            "c6",
            "auto",
            "shell",
            json!({"command": "cat FAIL"}),
            "failed",
            Failure::TimedOut.to_string(),
            true,
        ),
        (
            "c7",
            "auto",
            "shell",
            json!({"command": "cat UNAVAIL"}),
            "unavailable",
            Unavailable::RunnerUnavailable.to_string(),
            true,
        ),
        (
            "c8",
            "auto",
            "shell",
            json!({"command": "cat PANIC"}),
            "unavailable",
            Unavailable::RunnerUnavailable.to_string(),
            true,
        ),
        (
            "c9",
            "auto",
            "read_file",
            json!({"path": "/etc/passwd"}),
            "refused",
            "outside the grant's directories".into(),
            false,
        ),
        (
            "c10",
            "auto",
            "http_fetch",
            json!({"url": "https://evil.example.com/"}),
            "refused",
            "not one of the grant's hosts".into(),
            false,
        ),
        (
            "c11",
            "auto",
            "http_fetch",
            json!({"url": "http://docs.example.org/"}),
            "refused",
            "https".into(),
            false,
        ),
        (
            "c12",
            "auto",
            "read_file",
            json!({"nope": 1}),
            "refused",
            "".into(),
            false,
        ),
        (
            "c13",
            "auto",
            "teleport",
            json!({}),
            "refused",
            "".into(),
            false,
        ),
        (
            "c14",
            "readonly",
            "write_file",
            json!({"path": path(&svc.ro, "x"), "content": ""}),
            "refused",
            "".into(),
            false,
        ),
        (
            "c15",
            "safe",
            "shell",
            json!({"command": "rm a.txt"}),
            "refused",
            "safe mode".into(),
            false,
        ),
        (
            "c16",
            "ask",
            "shell",
            json!({"command": "rm a.txt"}),
            "ask",
            "Allow grant ask to".into(),
            false,
        ),
        (
            "c17",
            "auto",
            "shell",
            json!({"command": "rm -rf /"}),
            "ask",
            "dangerous".into(),
            false,
        ),
    ];
    for (i, (call, grant, tool, args, want, text, runs)) in cases.iter().enumerate() {
        let before = svc.runner.tool_calls();
        let session = format!("s{i}");
        let a = c.call(&session, call, grant, tool, args.clone());
        assert_eq!(kind(&a), *want, "{call}: {a:?}");
        assert!(
            message_or_content(&a).contains(text.as_str()),
            "{call}: {a:?} lacks {text:?}"
        );
        assert_eq!(
            svc.runner.tool_calls() - before,
            usize::from(*runs),
            "{call}: runner calls"
        );
        if let Body::Result {
            label,
            result_id,
            truncated,
            ..
        } = &a.body
        {
            assert_eq!(label, &format!("{grant}/{tool}"), "{call}");
            assert!(!result_id.is_empty(), "{call}: a result_id");
            assert!(!truncated);
        }
    }
    // What reached the runner.
    let specs = svc.runner.specs();
    let by_call: BTreeMap<&str, &RunSpec> = specs.iter().map(|s| (s.call.as_str(), s)).collect();
    let input = |c: &str| -> Value { serde_json::from_slice(&by_call[c].input).unwrap() };
    assert_eq!(input("c1")["path"], json!(a_txt));
    assert_eq!(
        input("c2")["path"],
        json!(a_txt),
        "relative to the first directory"
    );
    assert_eq!(input("c3")["path"], json!(path(&svc.rw, "new.txt")));
    assert_eq!(by_call["c1"].tool, ToolName::ReadFile);
    assert!(
        by_call["c1"].mounts.iter().all(|m| !m.write),
        "a read mounts read-only"
    );
    assert!(by_call["c3"].mounts[0].write && !by_call["c3"].mounts[1].write);
    assert_eq!(by_call["c3"].mounts[0].path, svc.rw);
    assert!(by_call["c4"].egress.is_none());
    assert_eq!(
        by_call["c5"].egress.as_ref().map(|e| e.hosts.clone()),
        Some(vec!["docs.example.org".to_string()])
    );
    assert_eq!(by_call["c1"].session.as_str(), "s0");
    // The audit: a decision and an outcome for what ran, a decision for the rest.
    let d = svc.decisions();
    let of = |call: &str| -> Vec<(String, String)> {
        d.iter()
            .filter(|r| r.1 == call)
            .map(|r| (r.2.clone(), r.3.clone()))
            .collect()
    };
    let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
    assert_eq!(of("c1"), vec![pair("allow", ""), pair("ran", "result")]);
    assert_eq!(of("c6"), vec![pair("allow", ""), pair("ran", "failed")]);
    assert_eq!(
        of("c7"),
        vec![pair("allow", ""), pair("ran", "unavailable")]
    );
    assert_eq!(
        of("c8"),
        vec![pair("allow", ""), pair("ran", "unavailable")]
    );
    assert_eq!(of("c9"), vec![pair("refused", "")]);
    assert_eq!(of("c13"), vec![pair("refused", "")]);
    assert_eq!(of("c16"), vec![pair("ask", "")]);
    // The daemon survived the panic.
    assert_eq!(c.status().protocol, 1);
}

fn message_or_content(a: &Answer) -> String {
    match &a.body {
        Body::Result { content, .. } => content.clone(),
        _ => message(a),
    }
}

/// A long output: a preview within preview_chars, the whole by pages with next_offset.
#[test]
fn result_paging() {
    let svc = Service::start();
    let mut c = svc.connect();
    let a = c.call("s", "big", "auto", "shell", json!({"command": "cat BIG"}));
    let Body::Result {
        content,
        truncated,
        result_id,
        continues_at,
        ..
    } = a.body
    else {
        panic!("{a:?}");
    };
    assert!(truncated, "cut to the preview");
    assert!(content.chars().count() <= 200, "{}", content.len());
    assert!(content.starts_with("abc") && content.contains("characters cut"));
    // The marker and the answer name where the output continues: the preview's head is the
    // output up to there, and a page from there starts with what the preview cut.
    let at = continues_at.expect("the preview names where it continues");
    assert!(
        content.contains(&format!("the output continues at offset {at}:")),
        "{content}"
    );
    let head = content.split("\n[... ").next().unwrap_or_default();
    assert_eq!(head.chars().count(), at, "{content}");
    let p = c.req(json!({"op": "result", "id": "at", "result_id": result_id, "offset": at}));
    let Body::ResultPage { content: page, .. } = p.body else {
        panic!("{p:?}");
    };
    let expected_next: String = "abcdefghijklmnopqrstuvwxyz"
        .chars()
        .cycle()
        .skip(at)
        .take(10)
        .collect();
    assert!(page.starts_with(&expected_next), "{}", &page[..20]);
    let mut whole = String::new();
    let mut offset = Some(0);
    let mut offsets = Vec::new();
    while let Some(o) = offset {
        offsets.push(o);
        let p = c.req(
            json!({"op": "result", "id": format!("p{o}"), "result_id": result_id, "offset": o}),
        );
        let Body::ResultPage {
            content,
            offset: got,
            next_offset,
        } = p.body
        else {
            panic!("{p:?}");
        };
        assert_eq!(got, o);
        whole.push_str(&content);
        offset = next_offset;
    }
    assert_eq!(offsets, vec![0, 50_000, 100_000]);
    assert_eq!(whole.len(), BIG_CHARS);
    assert!(whole.starts_with("abcdefghijklmnopqrstuvwxyzabc"));
    // Without an offset: the first page. Past the end, an unknown id: answers, no crash.
    let p = c.req(json!({"op": "result", "id": "p", "result_id": result_id}));
    assert!(
        matches!(
            p.body,
            Body::ResultPage {
                offset: 0,
                next_offset: Some(50_000),
                ..
            }
        ),
        "{p:?}"
    );
    let p =
        c.req(json!({"op": "result", "id": "past", "result_id": result_id, "offset": 10_000_000}));
    assert!(
        matches!(
            p.kind(),
            proto::broker::Kind::ResultPage | proto::broker::Kind::Error
        ),
        "{p:?}"
    );
    let p = c.req(json!({"op": "result", "id": "u", "result_id": "r-nope"}));
    assert_eq!(p.kind(), "error");
    assert_eq!(
        message(&p),
        ProtocolError::UnknownResult("r-nope".into()).to_string(),
        "{p:?}"
    );
}

/// docs/design.md#output: a result_id is 128 random bits and belongs to the uid whose call made
/// it; any other peer gets the very error an unknown id gets.
#[test]
fn result_ids_are_unguessable_and_bound_to_the_caller() {
    let svc = Service::start();
    let mut c = svc.connect();
    let id_of = |a: Answer| match a.body {
        Body::Result { result_id, .. } => result_id,
        other => panic!("{other:?}"),
    };
    let first = id_of(c.call("s", "r1", "auto", "shell", json!({"command": "cat BIG"})));
    let second = id_of(c.call("s", "r2", "auto", "shell", json!({"command": "cat BIG"})));
    for id in [&first, &second] {
        assert_eq!(id.len(), 32, "{id}");
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
    }
    assert_ne!(first, second);
    let page = |uid: u32, result_id: &str| {
        let req: proto::broker::Request = serde_json::from_value(
            json!({"op": "result", "id": "p", "result_id": result_id, "offset": 0}),
        )
        .expect("request");
        let peer = brokerd::broker::Peer {
            uid,
            pid: None,
            owner: false,
        };
        svc.rt.block_on(svc.broker.handle(req, peer)).body
    };
    assert!(matches!(page(me(), &first), Body::ResultPage { .. }));
    let other = me().wrapping_add(1);
    let theirs = page(other, &first);
    let unknown = page(other, &"0".repeat(32));
    assert!(matches!(theirs, Body::Error { .. }), "{theirs:?}");
    let text = |b: &Body| {
        format!("{b:?}")
            .replace(&first, "ID")
            .replace(&"0".repeat(32), "ID")
    };
    assert_eq!(
        text(&theirs),
        text(&unknown),
        "the same error as an unknown id"
    );
}

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

/// `tools` offers what the grant can use in its mode, with a JSON Schema each.
#[test]
fn tools_per_mode() {
    let svc = Service::start();
    let mut c = svc.connect();
    let cases: Vec<(&str, Vec<&str>)> = vec![
        (
            "auto",
            vec!["read_file", "write_file", "shell", "http_fetch"],
        ),
        (
            "ask",
            vec!["read_file", "write_file", "shell", "http_fetch"],
        ),
        ("safe", vec!["read_file", "shell", "http_fetch"]),
        ("readonly", vec!["read_file", "shell"]),
    ];
    for (grant, want) in cases {
        let a = c.req(json!({"op": "tools", "id": grant, "grant": grant}));
        let Body::Tools { tools, staged } = a.body else {
            panic!("{grant}: {a:?}");
        };
        assert!(!staged, "{grant}: its writes land directly");
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, want, "{grant}");
        for t in &tools {
            assert_eq!(t.parameters["type"], "object", "{grant} {}", t.name);
            assert!(!t.description.is_empty());
        }
    }
    let a = c.req(json!({"op": "tools", "id": "x", "grant": "nope"}));
    assert_eq!(kind(&a), "error");
    assert_eq!(
        message(&a),
        ProtocolError::UnknownGrant("nope".into()).to_string(),
        "{a:?}"
    );
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

/// After the runner was unavailable in a session, its writes are refused without being
/// attempted; its reads are still attempted; other sessions are unaffected; end_session
/// clears it.
#[test]
fn unavailable_runner_stops_later_writes() {
    let svc = Service::start();
    let mut c = svc.connect();
    let a = c.call("s", "u", "auto", "shell", json!({"command": "cat UNAVAIL"}));
    assert_eq!(kind(&a), "unavailable");
    // (call, tool, arguments, kind)
    let cases: Vec<(&str, &str, Value, &str)> = vec![
        (
            "w1",
            "write_file",
            json!({"path": "w.txt", "content": "x"}),
            "refused",
        ),
        ("w2", "shell", json!({"command": "touch b.txt"}), "refused"),
        ("r1", "read_file", json!({"path": "a.txt"}), "result"),
        ("r2", "shell", json!({"command": "cat a.txt"}), "result"),
    ];
    for (call, tool, args, want) in cases {
        let before = svc.runner.calls();
        let a = c.call("s", call, "auto", tool, args.clone());
        assert_eq!(kind(&a), want, "{call}: {a:?}");
        if want == "refused" {
            assert_eq!(
                message(&a),
                brokerd::policy::Why::UnavailableEarlier { tool: tool.into() }.to_string(),
                "{a:?}"
            );
            assert_eq!(svc.runner.calls(), before, "{call} not attempted");
        } else {
            assert_eq!(svc.runner.calls(), before + 1, "{call} attempted");
        }
    }
    let a = c.call(
        "other",
        "w1",
        "auto",
        "write_file",
        json!({"path": "w.txt", "content": "x"}),
    );
    assert_eq!(kind(&a), "result", "another session writes: {a:?}");
    c.req(json!({"op": "end_session", "id": "e", "session": "s"}));
    let a = c.call(
        "s",
        "w3",
        "auto",
        "write_file",
        json!({"path": "w.txt", "content": "x"}),
    );
    assert_eq!(kind(&a), "result", "after end_session: {a:?}");
}

/// docs/design.md#the-podman-runner, docs/design.md#service: without `[runner]` brokerd serves,
/// decides and audits every call, and refuses each one that would run with the fixed reason; what
/// the grant refuses is refused for its own reason, and status says there is no backend.
#[test]
fn without_a_runner_every_call_that_would_run_is_refused() {
    let svc = Service::with(Opts {
        no_runner: true,
        ..Opts::default()
    });
    assert!(svc.broker.config().runner.is_none());
    let mut c = svc.connect();
    let no_runner = brokerd::policy::Why::NoRunner.to_string();
    let no_runner = no_runner.as_str();
    let not_granted = brokerd::policy::Why::ToolNotGranted {
        tool: ToolName::HttpFetch,
        grant: "readonly".into(),
    }
    .to_string();
    let not_granted = not_granted.as_str();
    let read = json!({"path": "a.txt"});
    let cases = [
        (
            "r1",
            "auto",
            "read_file",
            read.clone(),
            "refused",
            no_runner,
        ),
        (
            "r2",
            "auto",
            "shell",
            json!({"command": "ls"}),
            "refused",
            no_runner,
        ),
        (
            "r3",
            "ask",
            "write_file",
            json!({"path": "w", "content": "x"}),
            "refused",
            no_runner,
        ),
        (
            "r4",
            "readonly",
            "http_fetch",
            json!({"url": "https://docs.example.org/"}),
            "refused",
            not_granted,
        ),
        (
            "r5",
            "auto",
            "read_file",
            json!({"path": "/etc/passwd"}),
            "refused",
            "outside",
        ),
    ];
    for (call, grant, tool, args, want, says) in cases {
        let a = c.call("s", call, grant, tool, args);
        assert_eq!(kind(&a), want, "{call}: {a:?}");
        assert!(message(&a).contains(says), "{call}: {a:?}");
    }
    assert_eq!(svc.runner.calls(), 0, "nothing ran, not even a preflight");
    let decisions = svc.decisions();
    assert_eq!(decisions.len(), 5, "every call audited: {decisions:?}");
    assert!(decisions.iter().all(|d| d.2 == "refused"), "{decisions:?}");
    let status = c.status();
    assert_eq!(status.backend, None, "spelt \"none\"");
    assert_eq!(svc.rt.block_on(svc.broker.preflight()).detail, no_runner);
    assert_eq!(svc.runner.calls(), 0);
}

/// The grants of two toolsets, one of which fails its check, beside the base toolset's
/// grants (docs/design.md#toolsets).
const TOOLSETS: &str = r#"
[toolsets.cc]
image = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
[toolsets.broken]
image = "sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"
[grants.cc]
mode = "auto"
tools = ["shell"]
paths = [{ path = "/usr" }]
toolset = "cc"
[grants.gone]
mode = "auto"
tools = ["shell"]
paths = [{ path = "/usr" }]
toolset = "broken"
"#;

/// A call runs on its grant's toolset; a toolset that fails its check makes its own grants'
/// calls unavailable, never runs them elsewhere, and leaves other grants working; `status`,
/// the audit record and the runner's spec name the toolset.
#[test]
fn a_grant_s_toolset_runs_its_calls_or_none() {
    let svc = Service::with(Opts {
        runner_extra: TOOLSETS,
        ..Opts::default()
    });
    let mut c = svc.connect();
    let ok = c.call("s", "t1", "cc", "shell", json!({"command": "ls"}));
    assert_eq!(kind(&ok), "result", "{ok:?}");
    let before = svc.runner.tool_calls();
    let gone = c.call("s", "t2", "gone", "shell", json!({"command": "ls"}));
    assert_eq!(kind(&gone), "unavailable", "{gone:?}");
    assert_eq!(message(&gone), Unavailable::ToolsetUnavailable.to_string());
    assert_eq!(
        svc.runner.tool_calls(),
        before,
        "nothing ran for the broken toolset"
    );
    let base = c.call("s", "t3", "readonly", "shell", json!({"command": "ls"}));
    assert_eq!(kind(&base), "result", "{base:?}");

    let ran: Vec<(String, Option<String>)> = svc
        .runner
        .specs()
        .iter()
        .filter(|s| s.session.as_str() == "s")
        .map(|s| {
            (
                s.call.to_string(),
                s.toolset.as_ref().map(|t| t.name.clone()),
            )
        })
        .collect();
    assert_eq!(
        ran,
        [
            ("t1".to_string(), Some("cc".to_string())),
            ("t3".to_string(), None)
        ]
    );
    let toolsets: Vec<(String, Option<Value>)> = svc
        .records()
        .iter()
        .filter(|r| r["session"] == "s" && r["status"].is_string())
        .map(|r| {
            (
                r["call"].as_str().unwrap_or("").to_string(),
                r.get("toolset").cloned(),
            )
        })
        .collect();
    assert_eq!(
        toolsets,
        [
            ("t1".to_string(), Some(json!("cc"))),
            ("t2".to_string(), Some(json!("broken"))),
            ("t3".to_string(), None),
        ]
    );
    let status = c.status();
    let shown: Vec<(&str, Vec<String>, Option<bool>)> = status
        .toolsets
        .iter()
        .map(|t| (t.name.as_str(), t.grants.clone(), t.check.ok))
        .collect();
    assert_eq!(
        shown,
        [
            ("broken", vec!["gone".to_string()], Some(false)),
            ("cc", vec!["cc".to_string()], Some(true)),
        ]
    );
}

/// A grant's own limits reach its calls' sandboxes: its `shell_ms` is the time limit, its
/// memory, pids and output cap go with the spec; another grant keeps `[runner]`'s
/// (docs/design.md#grantsname).
#[test]
fn a_grant_s_own_limits_reach_its_sandbox() {
    let svc = Service::with(Opts {
        runner_extra: "[grants.small]\nmode = \"auto\"\ntools = [\"shell\"]\npaths = [{ path = \"/usr\" }]\nshell_ms = 5000\nmemory = \"64m\"\npids = 16\noutput_cap = 10\n",
        ..Opts::default()
    });
    let mut c = svc.connect();
    for (call, grant) in [("l1", "small"), ("l2", "readonly")] {
        let a = c.call("s", call, grant, "shell", json!({"command": "ls"}));
        assert_eq!(kind(&a), "result", "{a:?}");
    }
    let got: Vec<(String, Duration, brokerd::config::GrantLimits)> = svc
        .runner
        .specs()
        .iter()
        .filter(|s| s.session.as_str() == "s")
        .map(|s| (s.call.to_string(), s.timeout, s.limits.clone()))
        .collect();
    let small = brokerd::config::GrantLimits {
        memory: Some("64m".into()),
        pids: Some(16),
        shell_ms: Some(5000),
        output_cap: Some(10),
    };
    assert_eq!(
        got,
        [
            ("l1".to_string(), Duration::from_millis(5000), small),
            (
                "l2".to_string(),
                Duration::from_millis(100_000),
                Default::default()
            ),
        ]
    );
}
