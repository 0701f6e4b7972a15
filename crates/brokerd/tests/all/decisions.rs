//! What brokerd tells its operator of each decision, and which failures make a session "known
//! down" (docs/design.md#service, docs/design.md#preflight-and-poisoning).

use std::sync::atomic::Ordering;

use serde_json::json;

use crate::common;
use crate::service::{call_req, kind, message, ticket, Service};

/// The refusal of a write in a session that saw the sandbox missing.
fn known_down(tool: &str) -> String {
    brokerd::policy::Why::UnavailableEarlier { tool: tool.into() }.to_string()
}

/// The decision lines of one session in the captured log: each as its `field=value` pairs.
/// The log is shared by every test of this binary, so each test uses sessions of its own.
fn decision_lines(log: &str, session: &str) -> Vec<Vec<(String, String)>> {
    log.lines()
        .filter(|l| l.contains(" decision "))
        .map(|l| {
            l.split_whitespace()
                .filter_map(|w| w.split_once('='))
                .map(|(k, v)| (k.to_string(), v.trim_matches('"').to_string()))
                .collect::<Vec<_>>()
        })
        .filter(|fields| fields.iter().any(|(k, v)| k == "session" && v == session))
        .collect()
}

fn get<'a>(fields: &'a [(String, String)], key: &str) -> &'a str {
    fields
        .iter()
        .find(|(k, _)| k == key)
        .map_or("", |(_, v)| v.as_str())
}

/// Every decision about a call is one journal line with its session, call, grant, tool,
/// decision, status and duration, a refusal with its kind: allowed and run, refused, asked,
/// approved, declined, stopped, failed, unavailable. The model's text (a path, a made-up tool
/// name, a refusal's reason) is in none of them.
#[test]
fn every_decision_is_one_journal_line_without_the_models_text() {
    let log = common::captured_log();
    let svc = Service::start();
    let mut c = svc.connect();
    let s = "journal-s1";
    assert_eq!(
        kind(&c.call(s, "ran", "auto", "read_file", json!({"path": "a.txt"}))),
        "result"
    );
    let secret_path = "/etc/pl4nted-journal-path";
    assert_eq!(
        kind(&c.call(s, "ref", "auto", "read_file", json!({"path": secret_path}))),
        "refused"
    );
    let made_up = "pl4nted_made_up_tool";
    assert_eq!(
        kind(&c.call(s, "odd", "auto", made_up, json!({"path": "a.txt"}))),
        "refused"
    );
    let ask = json!({"command": "touch pl4nted-asked.txt"});
    let t = ticket(&c.call(s, "asked", "ask", "shell", ask.clone()));
    assert_eq!(
        kind(&c.req(call_req(s, "asked", "ask", "shell", &ask, Some(&t)))),
        "result"
    );
    let write = json!({"path": "pl4nted-declined.txt", "content": "x"});
    let t = ticket(&c.call(s, "declined", "ask", "write_file", write));
    c.req(json!({"op": "decline", "id": "d", "ticket": t}));
    assert_eq!(
        kind(&c.call(s, "failed", "auto", "shell", json!({"command": "FAIL"}))),
        "failed"
    );
    assert_eq!(
        kind(&c.call(s, "unav", "auto", "shell", json!({"command": "UNAVAIL"}))),
        "unavailable"
    );
    // The same refusal four more times: the fifth in all is a stop.
    for n in 1..=4 {
        let want = if n < 4 { "refused" } else { "stopped" };
        let call = format!("again{n}");
        let got = c.call(s, &call, "auto", "read_file", json!({"path": secret_path}));
        assert_eq!(kind(&got), want, "{call}: {got:?}");
    }
    let text = String::from_utf8_lossy(&log.lock().unwrap()).into_owned();
    let lines = decision_lines(&text, s);
    let got: Vec<(String, String, String, String, String)> = lines
        .iter()
        .map(|f| {
            (
                get(f, "call").to_string(),
                get(f, "tool").to_string(),
                get(f, "decision").to_string(),
                get(f, "status").to_string(),
                get(f, "kind").to_string(),
            )
        })
        .collect();
    let want = [
        ("ran", "read_file", "allow", "result", ""),
        ("ref", "read_file", "refused", "", "path"),
        ("odd", "other", "refused", "", "arguments"),
        ("asked", "shell", "ask", "", ""),
        ("asked", "shell", "approved", "result", ""),
        ("declined", "write_file", "ask", "", ""),
        ("declined", "write_file", "declined", "cancelled", ""),
        ("failed", "shell", "allow", "failed", ""),
        ("unav", "shell", "allow", "unavailable", ""),
        ("again1", "read_file", "refused", "", "path"),
        ("again2", "read_file", "refused", "", "path"),
        ("again3", "read_file", "refused", "", "path"),
        ("again4", "read_file", "stopped", "", "path"),
    ];
    let want: Vec<(String, String, String, String, String)> = want
        .iter()
        .map(|(a, b, c, d, e)| {
            (
                a.to_string(),
                b.to_string(),
                c.to_string(),
                d.to_string(),
                e.to_string(),
            )
        })
        .collect();
    assert_eq!(got, want, "{text}");
    for f in &lines {
        assert!(!get(f, "grant").is_empty(), "{f:?}");
        assert!(get(f, "duration_ms").parse::<u64>().is_ok(), "{f:?}");
    }
    let mine: String = text
        .lines()
        .filter(|l| l.contains(" decision ") && l.contains(s))
        .collect::<Vec<_>>()
        .join("\n");
    for planted in [secret_path, made_up, "pl4nted-asked", "pl4nted-declined"] {
        assert!(!mine.contains(planted), "{planted} in {mine}");
    }
}

/// Only a failure that says the sandbox itself is missing makes the session's later writes
/// refused: a way out that could not be made (the proxy, the network preflight) does not.
#[test]
fn only_a_missing_sandbox_marks_the_session() {
    let svc = Service::start();
    let mut c = svc.connect();
    let write = |c: &mut crate::service::Client, s: &str, call: &str| {
        c.call(
            s,
            call,
            "auto",
            "write_file",
            json!({"path": "w.txt", "content": "x"}),
        )
    };
    // The proxy could not be made: unavailable, and the session still writes.
    let a = c.call(
        "mark-egress",
        "f1",
        "auto",
        "http_fetch",
        json!({"url": "https://docs.example.org/EGRESSDOWN"}),
    );
    assert_eq!(kind(&a), "unavailable", "{a:?}");
    assert_eq!(kind(&write(&mut c, "mark-egress", "w1")), "result");
    // The network preflight failed: the same.
    let svc2 = Service::start();
    svc2.runner.network_broken.store(true, Ordering::SeqCst);
    let mut c2 = svc2.connect();
    let a = c2.call(
        "mark-net",
        "f1",
        "auto",
        "http_fetch",
        json!({"url": "https://docs.example.org/x"}),
    );
    assert_eq!(kind(&a), "unavailable", "{a:?}");
    assert_eq!(kind(&write(&mut c2, "mark-net", "w1")), "result");
    // The sandbox itself could not start: later writes are refused, not attempted.
    let a = c.call(
        "mark-sb",
        "u",
        "auto",
        "shell",
        json!({"command": "UNAVAIL"}),
    );
    assert_eq!(kind(&a), "unavailable");
    let before = svc.runner.calls();
    let a = write(&mut c, "mark-sb", "w1");
    assert_eq!(kind(&a), "refused", "{a:?}");
    assert_eq!(message(&a), known_down("write_file"));
    assert_eq!(svc.runner.calls(), before);
}

/// In a session known down, a writing call of an `ask` grant is refused before a ticket is
/// issued, and a ticket issued before the session was known down is not redeemed for a write:
/// nobody is asked to approve what would then be refused.
#[test]
fn a_known_down_session_is_not_asked_to_approve_a_write() {
    let svc = Service::start();
    let mut c = svc.connect();
    let s = "down-ask";
    let write = json!({"path": "w.txt", "content": "x"});
    // A ticket issued while the session was well.
    let early = ticket(&c.call(s, "early", "ask", "write_file", write.clone()));
    let a = c.call(s, "u", "auto", "shell", json!({"command": "UNAVAIL"}));
    assert_eq!(kind(&a), "unavailable");
    let before = svc.runner.calls();
    let a = c.call(s, "late", "ask", "write_file", write.clone());
    assert_eq!(kind(&a), "refused", "no ticket is issued: {a:?}");
    assert_eq!(message(&a), known_down("write_file"));
    let a = c.req(call_req(
        s,
        "early",
        "ask",
        "write_file",
        &write,
        Some(&early),
    ));
    assert_eq!(kind(&a), "refused", "the ticket is not redeemed: {a:?}");
    assert_eq!(message(&a), known_down("write_file"));
    assert_eq!(svc.runner.calls(), before, "nothing ran");
    // A read of the same grant is still asked.
    let a = c.call(s, "read", "ask", "read_file", json!({"path": "a.txt"}));
    assert_ne!(kind(&a), "refused", "{a:?}");
}

/// The journal's words for a decision and a status are the audit log's: one rule, two sinks.
#[test]
fn the_journal_and_the_audit_log_use_the_same_words() {
    use brokerd::audit::{Decided, Ended};
    let decided = [
        Decided::Allow,
        Decided::Ask,
        Decided::Approved,
        Decided::Declined,
        Decided::Refused,
        Decided::Stopped,
        Decided::Ran,
        Decided::NotRun,
        Decided::OwnerApproved,
        Decided::Committed,
        Decided::Discarded,
    ];
    for d in decided {
        assert_eq!(serde_json::to_value(d).unwrap(), json!(d.as_str()));
    }
    let ended = [
        Ended::Result,
        Ended::Failed,
        Ended::Unavailable,
        Ended::Refused,
        Ended::Busy,
        Ended::Cancelled,
    ];
    for e in ended {
        assert_eq!(serde_json::to_value(e).unwrap(), json!(e.as_str()));
    }
}

/// On a full audit disk (/dev/full), an allowed call answers unavailable, and the journal
/// still has its decision line, naming its session and call, before the error line; a refused
/// one has its line as before. Nothing ran.
#[test]
fn a_decision_whose_record_cannot_be_written_is_still_in_the_journal() {
    let log = common::captured_log();
    let svc = Service::with(crate::service::Opts {
        audit: Some(std::path::PathBuf::from("/dev/full")),
        ..crate::service::Opts::default()
    });
    let mut c = svc.connect();
    let s = "journal-full-disk";
    let a = c.call(s, "allowed", "auto", "read_file", json!({"path": "a.txt"}));
    assert_eq!(kind(&a), "unavailable", "{a:?}");
    let a = c.call(s, "refused", "auto", "read_file", json!({"path": "/etc/x"}));
    assert_eq!(kind(&a), "unavailable", "{a:?}");
    assert_eq!(svc.runner.calls(), 0, "nothing ran unaudited");
    let text = String::from_utf8_lossy(&log.lock().unwrap()).into_owned();
    let got: Vec<(String, String, String)> = decision_lines(&text, s)
        .iter()
        .map(|f| {
            (
                get(f, "call").to_string(),
                get(f, "decision").to_string(),
                get(f, "status").to_string(),
            )
        })
        .collect();
    let want = [
        ("allowed", "allow", "unavailable"),
        ("refused", "refused", ""),
    ]
    .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()));
    assert_eq!(got, want, "{text}");
    // The error line that follows the allowed call's decision names it too.
    let allowed_error = text.lines().any(|l| {
        l.contains("an audit record could not be written")
            && l.contains(&format!("session=\"{s}\""))
            && l.contains("call=\"allowed\"")
    });
    assert!(allowed_error, "{text}");
}
