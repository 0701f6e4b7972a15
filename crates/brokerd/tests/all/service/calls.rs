//! What a call gets: each kind of answer, paging a cut output, result ids bound to their
//! caller, and the tools a grant offers (docs/design.md#protocol). Tickets, refusals and stops
//! are in `refusals`; what the runner behind a call changes is in `runner`.

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
