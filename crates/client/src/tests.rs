use super::*;
use std::os::unix::net::UnixListener;

/// A brokerd stand-in that answers each request line with the next of `answers`, its `id`
/// replaced by the request's, and keeps the requests it read.
fn broker<S: Into<String>>(
    answers: Vec<S>,
) -> (
    tempfile::TempDir,
    std::path::PathBuf,
    std::thread::JoinHandle<Vec<String>>,
) {
    let answers: Vec<String> = answers.into_iter().map(Into::into).collect();
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("broker.sock");
    let listener = UnixListener::bind(&socket).expect("bind");
    let t = std::thread::spawn(move || {
        let mut seen = Vec::new();
        let Ok((stream, _)) = listener.accept() else {
            return seen;
        };
        let mut reader = BufReader::new(&stream);
        for a in answers {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                break;
            }
            let req: serde_json::Value = serde_json::from_str(&line).expect("request json");
            let id = req["id"].as_str().unwrap_or_default().to_owned();
            seen.push(line.trim_end().to_owned());
            let out = a.replace("$ID", &id);
            let _ = (&stream).write_all(format!("{out}\n").as_bytes());
        }
        seen
    });
    (dir, socket, t)
}

#[test]
fn typed_operations_send_the_protocol_and_read_its_answers() {
    let (_d, socket, t) = broker(vec![
        r#"{"id":"$ID","kind":"ask","question":"q?","ticket":"t1"}"#,
        r#"{"id":"$ID","kind":"declined"}"#,
        r#"{"id":"$ID","kind":"result_page","content":"abc","offset":3,"next_offset":null}"#,
        r#"{"id":"$ID","kind":"error","message":"unknown grant"}"#,
        r#"{"id":"$ID","kind":"ended"}"#,
        r#"{"id":"$ID","kind":"ended"}"#,
    ]);
    let mut c = Client::connect(&socket).expect("connect");
    let out = c
        .call(&Call {
            session: "s",
            call: "c1",
            grant: "g",
            tool: "shell",
            arguments: r#"{"command":"ls"}"#,
            approval: None,
        })
        .expect("call");
    assert_eq!(
        out,
        CallOutcome::Ask {
            question: "q?".into(),
            ticket: "t1".into()
        }
    );
    c.decline("t1").expect("decline");
    let page = c.result_page("r1", 3).expect("page");
    assert_eq!((page.content.as_str(), page.next_offset), ("abc", None));
    match c.tools("nope") {
        Err(ClientError::Broker(m)) => assert_eq!(m, "unknown grant"),
        other => panic!("{other:?}"),
    }
    c.end_session("s").expect("end");
    match c.status() {
        Err(ClientError::Unexpected { op, got }) => {
            assert_eq!((op, got), ("status", proto::broker::Kind::Ended))
        }
        other => panic!("{other:?}"),
    }
    let seen = t.join().expect("broker thread");
    let ops: Vec<serde_json::Value> = seen
        .iter()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    let names: Vec<&str> = ops.iter().filter_map(|o| o["op"].as_str()).collect();
    assert_eq!(
        names,
        [
            "call",
            "decline",
            "result",
            "tools",
            "end_session",
            "status"
        ]
    );
    let ids: Vec<&str> = ops.iter().filter_map(|o| o["id"].as_str()).collect();
    assert_eq!(ids, ["1", "2", "3", "4", "5", "6"], "fresh ids");
    assert_eq!(ops[0]["arguments"], r#"{"command":"ls"}"#);
    assert!(ops[0].get("approval").is_none());
}

#[test]
fn an_answer_to_another_request_is_an_error() {
    let (_d, socket, _t) = broker(vec![r#"{"id":"99","kind":"ended"}"#]);
    let mut c = Client::connect(&socket).expect("connect");
    assert!(matches!(
        c.end_session("s"),
        Err(ClientError::WrongId { .. })
    ));
}

#[test]
fn a_closed_connection_and_a_bad_line_are_errors() {
    let (_d, socket, _t) = broker(vec!["not json"]);
    let mut c = Client::connect(&socket).expect("connect");
    assert!(matches!(c.status(), Err(ClientError::BadAnswer(_))));
    assert!(matches!(
        c.status(),
        Err(ClientError::Closed | ClientError::Io(_))
    ));
    assert!(matches!(
        Client::connect(Path::new("/nonexistent/broker.sock")),
        Err(ClientError::Connect { .. })
    ));
}

/// What a staged operation returned, for the table below.
#[derive(Debug, PartialEq)]
enum Got {
    Changes(Changes),
    Sessions(Vec<SessionChanges>),
    Committed(Committed),
    Discarded(Vec<String>),
    Approved,
    Broker(String),
}

type Op = fn(&mut Client) -> Result<Got, ClientError>;

#[test]
fn staged_operations_send_the_protocol_and_read_its_answers() {
    let paths = || vec!["/srv/notes/a.txt".to_string()];
    let change = Change {
        grant: "notes".into(),
        path: "/srv/notes/a.txt".into(),
        change: ChangeKind::Modified,
        what: EntryKind::File,
        size: Some(12),
        sha256: Some("ab".into()),
        target: None,
        mode: None,
        dropped_bits: None,
        protected: false,
        conflict: false,
        diff: Some("--- a".into()),
    };
    let pending = SessionChanges {
        session: "s1".into(),
        grants: vec!["notes".into()],
        paths: 1,
        bytes: 12,
    };
    let reason = |path: &str, reason: &str| PathReason {
        path: path.into(),
        reason: reason.into(),
    };
    // (answer, operation, the request as sent without its id, what the operation returns)
    let cases: Vec<(&str, Op, serde_json::Value, Got)> = vec![
        (
            r#"{"id":"$ID","kind":"changes","session":"s1","changes":[{"grant":"notes","path":"/srv/notes/a.txt","change":"modified","what":"file","size":12,"sha256":"ab","diff":"--- a"}],"bytes":12,"max_bytes":100,"left_out":7}"#,
            |c| c.changes(Some("s1"), Some("notes"), true).map(Got::Changes),
            serde_json::json!({"op":"changes","session":"s1","grant":"notes","diff":true}),
            Got::Changes(Changes {
                session: Some("s1".into()),
                changes: vec![change],
                bytes: 12,
                max_bytes: 100,
                sessions: vec![],
                left_out: 7,
            }),
        ),
        (
            r#"{"id":"$ID","kind":"changes","session":null,"changes":[],"bytes":0,"max_bytes":100,"sessions":[{"session":"s1","grants":["notes"],"paths":1,"bytes":12}]}"#,
            |c| c.sessions().map(Got::Sessions),
            serde_json::json!({"op":"changes","diff":false}),
            Got::Sessions(vec![pending]),
        ),
        (
            r#"{"id":"$ID","kind":"committed","committed":["/srv/notes/a.txt"],"conflicts":[],"skipped":[]}"#,
            |c| {
                c.commit(
                    &Staged {
                        session: "s1",
                        grant: None,
                        paths: &[],
                    },
                    false,
                )
                .map(Got::Committed)
            },
            serde_json::json!({"op":"commit","session":"s1","all_or_nothing":false}),
            Got::Committed(Committed {
                committed: paths(),
                conflicts: vec![],
                skipped: vec![],
            }),
        ),
        (
            r#"{"id":"$ID","kind":"committed","committed":[],"conflicts":[{"path":"/srv/notes/a.txt","reason":"changed"}],"skipped":[{"path":"/srv/notes/Cargo.lock","reason":"protected: name it to commit it"}]}"#,
            |c| {
                c.commit(
                    &Staged {
                        session: "s1",
                        grant: Some("notes"),
                        paths: &["/srv/notes/a.txt".to_string()],
                    },
                    true,
                )
                .map(Got::Committed)
            },
            serde_json::json!({"op":"commit","session":"s1","grant":"notes","paths":["/srv/notes/a.txt"],"all_or_nothing":true}),
            Got::Committed(Committed {
                committed: vec![],
                conflicts: vec![reason("/srv/notes/a.txt", "changed")],
                skipped: vec![reason(
                    "/srv/notes/Cargo.lock",
                    "protected: name it to commit it",
                )],
            }),
        ),
        (
            r#"{"id":"$ID","kind":"discarded","discarded":["/srv/notes/a.txt"]}"#,
            |c| {
                c.discard(&Staged {
                    session: "s1",
                    grant: Some("notes"),
                    paths: &["/srv/notes/a.txt".to_string()],
                })
                .map(Got::Discarded)
            },
            serde_json::json!({"op":"discard","session":"s1","grant":"notes","paths":["/srv/notes/a.txt"]}),
            Got::Discarded(paths()),
        ),
        (
            r#"{"id":"$ID","kind":"approved"}"#,
            |c| c.approve("t1").map(|()| Got::Approved),
            serde_json::json!({"op":"approve","ticket":"t1"}),
            Got::Approved,
        ),
        (
            r#"{"id":"$ID","kind":"error","message":"not an owner of this brokerd"}"#,
            |c| c.approve("t1").map(|()| Got::Approved),
            serde_json::json!({"op":"approve","ticket":"t1"}),
            Got::Broker("not an owner of this brokerd".into()),
        ),
    ];
    let (_d, socket, t) = broker(cases.iter().map(|c| c.0).collect());
    let mut c = Client::connect(&socket).expect("connect");
    let mut want_requests = Vec::new();
    for (answer, op, request, want) in cases {
        let got = match op(&mut c) {
            Err(ClientError::Broker(m)) => Got::Broker(m),
            other => other.expect(answer),
        };
        assert_eq!(got, want, "{answer}");
        want_requests.push(request);
    }
    let seen: Vec<serde_json::Value> = t
        .join()
        .expect("broker thread")
        .iter()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).expect("json");
            v.as_object_mut().map(|o| o.remove("id"));
            v
        })
        .collect();
    assert_eq!(seen, want_requests);
    assert!(matches!(
        c.changes(Some("s1"), None, false),
        Err(ClientError::Closed | ClientError::Io(_))
    ));
}

/// The unexpected kind of a staged operation names the operation.
#[test]
fn a_staged_operation_answered_with_another_kind_is_an_error() {
    let (_d, socket, _t) = broker(vec![r#"{"id":"$ID","kind":"ended"}"#]);
    let mut c = Client::connect(&socket).expect("connect");
    match c.commit(
        &Staged {
            session: "s",
            grant: None,
            paths: &[],
        },
        false,
    ) {
        Err(ClientError::Unexpected { op, got }) => {
            assert_eq!((op, got), ("commit", proto::broker::Kind::Ended))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn commits_are_complete_when_nothing_was_left_out() {
    let r = || PathReason {
        path: "p".into(),
        reason: "r".into(),
    };
    // (conflicts, skipped, complete)
    let cases = [
        (vec![], vec![], true),
        (vec![r()], vec![], false),
        (vec![], vec![r()], false),
    ];
    for (conflicts, skipped, complete) in cases {
        let c = Committed {
            committed: vec![],
            conflicts,
            skipped,
        };
        assert_eq!(c.complete(), complete, "{c:?}");
    }
}

/// A request of exactly the limit is sent, one byte more is not (and the connection is
/// still in step); an answer past the limit is dropped, and the next one is read.
#[test]
fn lines_are_held_to_the_protocol_limit() {
    let decline = |ticket: String| Request::Decline {
        id: "t".into(),
        v: None,
        ticket,
    };
    let frame = serde_json::to_string(&decline(String::new()))
        .expect("json")
        .len();
    let fits = decline("x".repeat(MAX_LINE - frame));
    let over = decline("x".repeat(MAX_LINE - frame + 1));
    let long_answer = format!(
        r#"{{"id":"$ID","kind":"error","message":"{}"}}"#,
        "y".repeat(MAX_LINE)
    );
    let (_d, socket, t) = broker(vec![
        r#"{"id":"$ID","kind":"declined"}"#.to_string(),
        r#"{"id":"$ID","kind":"ended"}"#.to_string(),
        long_answer,
        r#"{"id":"$ID","kind":"ended"}"#.to_string(),
    ]);
    let mut c = Client::connect(&socket).expect("connect");
    let sent = c.request(&fits).expect("a line of the limit");
    assert_eq!(sent.body, Body::Declined {});
    match c.request(&over) {
        Err(ClientError::RequestTooLong { len }) => assert_eq!(len, MAX_LINE + 1),
        other => panic!("{other:?}"),
    }
    c.end_session("s")
        .expect("in step after a request not sent");
    assert!(matches!(
        c.end_session("s"),
        Err(ClientError::AnswerTooLong)
    ));
    c.end_session("s").expect("in step after an answer dropped");
    let seen = t.join().expect("broker thread");
    assert_eq!(seen.len(), 4, "the long request never went out");
    assert_eq!(seen[0].len(), MAX_LINE);
}

/// The framing itself is `proto::line`'s; this is its use over a blocking reader whose
/// buffer is smaller than the lines.
#[test]
fn lines_are_framed_over_a_blocking_reader() {
    let l = |s: &str| Frame::Line(s.as_bytes().to_vec());
    let mut r = BufReader::with_capacity(
        7,
        &b"abc
0123456789ABCDEFGHIJ
x
last"[..],
    );
    let mut got = Vec::new();
    loop {
        let f = read_frame(&mut r, 10).expect("read");
        let end = f == Frame::Eof;
        got.push(f);
        if end {
            break;
        }
    }
    assert_eq!(
        got,
        vec![l("abc"), Frame::TooLong, l("x"), l("last"), Frame::Eof]
    );
}

#[test]
fn a_client_from_a_stream_made_elsewhere_talks_as_one_that_connected() {
    let (_d, socket, t) = broker(vec![r#"{"id":"$ID","kind":"ended"}"#]);
    let stream = UnixStream::connect(&socket).expect("connect");
    let mut c = Client::from_stream(stream).expect("from_stream");
    c.end_session("s").expect("end_session");
    drop(c);
    let seen = t.join().expect("broker");
    assert_eq!(seen.len(), 1);
    assert!(seen[0].contains(r#""op":"end_session""#), "{seen:?}");
}
