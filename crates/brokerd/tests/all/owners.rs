//! Owners: only they commit, discard and approve, and a grant's `approvals = "owner"` makes an
//! ask run only once an owner approved it (docs/design.md#staged-writes-and-owners).

use brokerd::server::Clients;
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
        assert_eq!(error(&c.req(req)), "not an owner of this brokerd");
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
    for _ in 0..7 {
        let again = c.req(call_req(
            "s1",
            "c1",
            "owned",
            "write_file",
            &args,
            Some(&ticket),
        ));
        match again.body {
            Body::Refused { reason } => assert!(reason.contains("not approved"), "{reason}"),
            other => panic!("expected a refusal while unapproved, got {other:?}"),
        }
    }
    assert_eq!(svc.runner.calls(), 0, "nothing ran before the approval");
    let a = c.req(json!({"op": "approve", "id": "ap", "ticket": ticket}));
    assert!(matches!(a.body, Body::Approved {}), "{a:?}");
    let ran = c.req(call_req(
        "s1",
        "c1",
        "owned",
        "write_file",
        &args,
        Some(&ticket),
    ));
    assert!(matches!(ran.body, Body::Result { .. }), "{ran:?}");
    assert_eq!(svc.runner.calls(), 1);
    // Single use, as every ticket.
    let again = c.req(call_req(
        "s1",
        "c1",
        "owned",
        "write_file",
        &args,
        Some(&ticket),
    ));
    assert!(matches!(again.body, Body::Refused { .. }), "{again:?}");
}
