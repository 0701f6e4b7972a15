//! Owners: only they commit, discard and approve, and a grant's `approvals = "owner"` makes an
//! ask run only once an owner approved it (docs/design.md#staged-writes-and-owners).

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use brokerd::broker::ProtocolError;
use brokerd::server::Clients;
use brokerd::tickets::TicketError::NotApproved;
use proto::broker::Body;
use serde_json::json;

use crate::service::{call_req, me, Opts, Service};

fn error(a: &proto::broker::Answer) -> String {
    match &a.body {
        Body::Error { message } => message.clone(),
        other => panic!("expected an error, got {other:?}"),
    }
}

/// A client that is not an owner gets the same error for every owner-only op, and nothing
/// changes.
#[test]
fn a_client_that_is_no_owner_cannot_commit_discard_or_approve() {
    let svc = Service::start();
    let mut c = svc.connect();
    for req in [
        json!({"op": "commit", "id": "1", "session": "s1"}),
        json!({"op": "discard", "id": "2", "session": "s1", "paths": ["/x"]}),
        json!({"op": "approve", "id": "3", "ticket": "0123"}),
    ] {
        assert_eq!(error(&c.req(req)), ProtocolError::NotOwner.to_string());
    }
    // Reading changes is for clients too.
    let a = c.req(json!({"op": "changes", "id": "4"}));
    assert!(
        matches!(a.body, Body::Changes { ref changes, .. } if changes.is_empty()),
        "{a:?}"
    );
}

/// With `approvals = "owner"`, the client's re-sent call waits (refused, the ticket kept, and
/// never counted towards a stop) until an owner approves; then it runs once.
#[test]
fn an_owner_approves_what_the_client_cannot() {
    let svc = Service::with(Opts {
        owners: Some(Clients::of_uids([me()])),
        ..Opts::default()
    });
    let mut c = svc.connect();
    let args = json!({"path": "notes.txt", "content": "x"});
    let a = c.call("s1", "c1", "owned", "write_file", args.clone());
    let Body::Ask { ticket, question } = a.body else {
        panic!("expected an ask, got {a:?}");
    };
    assert!(question.contains("boxctl approve"), "{question}");
    // The same call again, with the ticket.
    let resend = |c: &mut crate::service::Client| {
        c.req(call_req(
            "s1",
            "c1",
            "owned",
            "write_file",
            &args,
            Some(&ticket),
        ))
    };
    for _ in 0..7 {
        let again = resend(&mut c);
        match again.body {
            Body::Refused { reason } => assert_eq!(reason, NotApproved.to_string()),
            other => panic!("expected a refusal while unapproved, got {other:?}"),
        }
    }
    assert_eq!(svc.runner.calls(), 0, "nothing ran before the approval");
    let a = c.req(json!({"op": "approve", "id": "ap", "ticket": ticket}));
    assert!(matches!(a.body, Body::Approved {}), "{a:?}");
    let ran = resend(&mut c);
    assert!(matches!(ran.body, Body::Result { .. }), "{ran:?}");
    assert_eq!(svc.runner.calls(), 1);
    // Single use, as every ticket.
    let again = resend(&mut c);
    assert!(matches!(again.body, Body::Refused { .. }), "{again:?}");
}

/// Every entry below `dir` with its type, mode and content (a whiteout as its device), so that
/// any change to the real directory or to a layer shows.
fn snapshot(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let m = std::fs::symlink_metadata(&p).expect("lstat");
            let what = if m.is_dir() {
                stack.push(p.clone());
                "dir".to_string()
            } else if m.is_file() {
                std::fs::read_to_string(&p).unwrap_or_default()
            } else {
                format!("rdev {}", m.rdev())
            };
            out.push(format!("{} {:o} {what}", p.display(), m.mode()));
        }
    }
    out.sort();
    out
}

/// With real staged changes waiting (a whiteout and a new file in the session's layer, made by
/// an overlayfs mount where the kernel gives one), a client that is not an owner cannot
/// commit, discard or approve, however it names the paths: the real directory, the layer, its
/// metadata and the audit log stay as they were, and the ticket stays unapproved.
#[test]
fn a_client_that_is_no_owner_changes_nothing_staged() {
    let svc = Service::start();
    let mut c = svc.connect();
    let new = svc.staged.join("STAGE.txt").display().to_string();
    let a = c.call(
        "s1",
        "c1",
        "staged",
        "write_file",
        json!({"path": new, "content": "x"}),
    );
    assert!(matches!(a.body, Body::Result { .. }), "{a:?}");
    let changes = |c: &mut crate::service::Client| match c
        .req(json!({"op": "changes", "id": "ch", "session": "s1"}))
        .body
    {
        Body::Changes { changes, .. } => changes
            .into_iter()
            .map(|c| (c.path, c.change.as_str()))
            .collect::<Vec<_>>(),
        other => panic!("changes: {other:?}"),
    };
    let shown = |p: &str| svc.staged.join(p).display().to_string();
    let staged = changes(&mut c);
    assert_eq!(
        staged,
        [(shown("a.txt"), "deleted"), (shown("new.txt"), "added")],
        "the layer holds what the call staged"
    );
    let ask = c.call(
        "s1",
        "c2",
        "owned",
        "write_file",
        json!({"path": "notes.txt", "content": "x"}),
    );
    let ticket = crate::service::ticket(&ask);
    let before = (snapshot(&svc.staged), snapshot(&svc.home));
    let audit_lines = |svc: &Service| {
        std::fs::read_to_string(svc.audit_path())
            .unwrap_or_default()
            .lines()
            .count()
    };
    let records = audit_lines(&svc);
    let a_txt = shown("a.txt");
    for (i, req) in [
        json!({"op": "commit", "session": "s1"}),
        json!({"op": "commit", "session": "s1", "grant": "staged", "all_or_nothing": true}),
        json!({"op": "commit", "session": "s1", "paths": [a_txt]}),
        json!({"op": "discard", "session": "s1"}),
        json!({"op": "discard", "session": "s1", "grant": "staged", "paths": [a_txt]}),
        json!({"op": "approve", "ticket": ticket}),
    ]
    .into_iter()
    .enumerate()
    {
        let mut req = req;
        req["id"] = json!(format!("o{i}"));
        assert_eq!(
            error(&c.req(req.clone())),
            ProtocolError::NotOwner.to_string(),
            "{req}"
        );
    }
    assert_eq!((snapshot(&svc.staged), snapshot(&svc.home)), before);
    assert_eq!(
        audit_lines(&svc),
        records,
        "an owner-only op was audited as done"
    );
    assert_eq!(changes(&mut c), staged);
    let again = c.req(call_req(
        "s1",
        "c2",
        "owned",
        "write_file",
        &json!({"path": "notes.txt", "content": "x"}),
        Some(&ticket),
    ));
    assert!(
        matches!(&again.body, Body::Refused { reason } if *reason == NotApproved.to_string()),
        "{again:?}"
    );
    assert!(std::fs::read_to_string(svc.staged.join("a.txt")).is_ok_and(|s| s == "a"));
}
