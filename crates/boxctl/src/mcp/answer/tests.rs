use super::*;

fn text(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("")
}

#[test]
fn annotations_say_what_each_tool_does() {
    let schema = |name: &str| ToolSchema {
        name: name.into(),
        description: format!("{name} does things"),
        parameters: serde_json::json!({"type": "object", "properties": {}}),
    };
    let listed = tools(
        ["read_file", "write_file", "shell", "http_fetch", "newtool"]
            .map(schema)
            .to_vec(),
        true,
    );
    let hint = |name: &str| {
        let t = listed.iter().find(|t| t.name == name).expect(name);
        t.annotations.as_ref().map(|a| {
            (
                a.read_only_hint,
                a.destructive_hint,
                a.open_world_hint,
                t.description.as_deref().map(str::to_owned),
            )
        })
    };
    let cases = [
        ("read_file", Some(true), Some(false), Some(false)),
        ("http_fetch", Some(true), Some(false), Some(true)),
        ("write_file", Some(false), Some(true), Some(false)),
        ("shell", Some(false), Some(true), Some(false)),
        (READ_RESULT, Some(true), Some(false), Some(false)),
        (STAGED_CHANGES, Some(true), Some(false), Some(false)),
    ];
    for (name, ro, destructive, open) in cases {
        let (r, d, o, _) = hint(name).expect(name);
        assert_eq!((r, d, o), (ro, destructive, open), "{name}");
    }
    // A tool the table does not know is left to MCP's careful defaults.
    assert!(hint("newtool").is_none());
    let rf = listed.iter().find(|t| t.name == "read_file").expect("rf");
    assert_eq!(rf.description.as_deref(), Some("read_file does things"));
    assert_eq!(
        rf.input_schema.get("type"),
        Some(&serde_json::json!("object"))
    );
    let names: Vec<&str> = listed.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names[names.len() - 2..], [READ_RESULT, STAGED_CHANGES]);
}

/// staged_changes is offered where the grant's writes are staged and it may write: a tool
/// that is not read only, or one the table does not know. A grant whose writes land
/// directly never has anything staged.
#[test]
fn staged_changes_is_offered_to_staged_grants_that_may_write() {
    // (brokerd's tools, writes staged, offered)
    let cases: [(&[&str], bool, bool); 9] = [
        (&[], true, false),
        (&["read_file"], true, false),
        (&["read_file", "http_fetch"], true, false),
        (&["read_file", "write_file"], true, true),
        (&["shell"], true, true),
        (&["newtool"], true, true),
        (&["read_file", "write_file"], false, false),
        (&["shell"], false, false),
        (&["newtool"], false, false),
    ];
    for (names, staged, offered) in cases {
        let from_broker = names
            .iter()
            .map(|n| ToolSchema {
                name: n.to_string(),
                description: String::new(),
                parameters: serde_json::json!({"type": "object"}),
            })
            .collect();
        let listed = tools(from_broker, staged);
        let staged = listed.iter().find(|t| t.name == STAGED_CHANGES);
        assert_eq!(staged.is_some(), offered, "{names:?}");
        if let Some(t) = staged {
            let desc = t.description.as_deref().unwrap_or_default();
            assert!(desc.contains("awaiting the owner's commit"), "{desc}");
            assert!(desc.contains("Read only"), "{desc}");
            assert_eq!(
                t.input_schema.get("additionalProperties"),
                Some(&serde_json::json!(false))
            );
        }
    }
}

#[test]
fn staged_changes_become_a_read_only_listing() {
    use client::{Change, ChangeKind, EntryKind};
    let change = |path: &str, diff: Option<&str>| Change {
        grant: "notes".into(),
        path: path.into(),
        change: ChangeKind::Added,
        what: EntryKind::File,
        size: Some(3),
        sha256: None,
        target: None,
        mode: None,
        dropped_bits: None,
        protected: false,
        conflict: false,
        diff: diff.map(str::to_owned),
    };
    let of = |changes: Vec<Change>| Changes {
        session: Some("s1".into()),
        changes,
        bytes: 3,
        max_bytes: 100,
        sessions: vec![],
        left_out: 0,
    };
    // (changes, the text the model reads)
    let cases = [
        (
            of(vec![]),
            "[boxmaker: no staged changes of the grant \"notes\" in this session await the \
                 owner's commit]",
        ),
        (
            of(vec![change("/srv/notes/a\u{1b}", None)]),
            "[boxmaker: 1 staged change(s) of the grant \"notes\" in this session, awaiting \
                 the owner's commit (3 of 100 bytes staged); the real files change only when \
                 the owner commits them]\n\
                 added         /srv/notes/a\\x1b  3 bytes\n",
        ),
        (
            of(vec![change("/srv/notes/b", Some("+abc\n"))]),
            "[boxmaker: 1 staged change(s) of the grant \"notes\" in this session, awaiting \
                 the owner's commit (3 of 100 bytes staged); the real files change only when \
                 the owner commits them]\n\
                 added         /srv/notes/b  3 bytes\n\
                 \n\
                 +abc\n",
        ),
    ];
    for (c, want) in cases {
        let r = changes("notes", &c);
        assert_eq!(r.is_error, Some(false), "{c:?}");
        assert_eq!(text(&r), want);
    }
}

#[test]
fn staged_changes_arguments_are_strict() {
    let obj = |v: serde_json::Value| match v {
        serde_json::Value::Object(o) => Some(o),
        _ => None,
    };
    // (arguments, diff when they parse)
    let cases = [
        (Some(serde_json::json!({})), Some(false)),
        (None, Some(false)),
        (Some(serde_json::json!({"diff": true})), Some(true)),
        (Some(serde_json::json!({"diff": "yes"})), None),
        (Some(serde_json::json!({"session": "other"})), None),
        (Some(serde_json::json!({"grant": "other"})), None),
    ];
    for (args, want) in cases {
        let got = StagedChanges::parse(args.clone().and_then(obj)).map(|a| a.diff);
        match (got, want) {
            (Ok(d), Some(w)) => assert_eq!(d, w, "{args:?}"),
            (Err(e), None) => assert!(e.starts_with("staged_changes takes"), "{e}"),
            (got, _) => panic!("{args:?}: {got:?}"),
        }
    }
}

#[test]
fn answers_become_tool_results() {
    let ok = outcome(
        "notes",
        &CallOutcome::Result {
            content: "hello".into(),
            truncated: false,
            label: "notes/shell".into(),
            result_id: "ab12".into(),
            continues_at: None,
        },
    );
    assert_eq!(ok.is_error, Some(false));
    assert_eq!(text(&ok), "[notes/shell]\nhello");
    let cut = outcome(
        "notes",
        &CallOutcome::Result {
            content: "head…tail".into(),
            truncated: true,
            label: "notes/shell".into(),
            result_id: "ab12".into(),
            continues_at: Some(4),
        },
    );
    assert_eq!(cut.is_error, Some(false));
    assert!(text(&cut).contains(r#"read_result {"result_id":"ab12","offset":4}"#));
    let capped = outcome(
        "notes",
        &CallOutcome::Result {
            content: "all there is".into(),
            truncated: true,
            label: "notes/shell".into(),
            result_id: "ab12".into(),
            continues_at: None,
        },
    );
    assert!(
        text(&capped).contains("all that was kept"),
        "{}",
        text(&capped)
    );
    assert!(!text(&capped).contains("read_result"));
    let errors = [
        (
            CallOutcome::Refused {
                reason: "outside".into(),
            },
            "refused by the grant \"notes\"; nothing ran: outside",
        ),
        (
            CallOutcome::Stopped {
                reason: "again".into(),
            },
            "stopped; nothing ran: again",
        ),
        (
            CallOutcome::Failed {
                message: "time".into(),
            },
            "the tool failed: time",
        ),
        (
            CallOutcome::Unavailable {
                message: "down".into(),
            },
            "the call could not run; nothing ran: down",
        ),
    ];
    for (o, want) in errors {
        let r = outcome("notes", &o);
        assert_eq!(r.is_error, Some(true), "{o:?}");
        assert_eq!(text(&r), want);
    }
    let ask = outcome(
        "review",
        &CallOutcome::Ask {
            question: "write x?".into(),
            ticket: "secret-ticket".into(),
        },
    );
    assert_eq!(ask.is_error, Some(true));
    assert!(text(&ask).contains("write x?"));
    assert!(
        !text(&ask).contains("secret-ticket"),
        "the ticket is never shown"
    );
    let err = client_error(&ClientError::Broker("busy".into()));
    assert_eq!(
        (err.is_error, text(&err)),
        (Some(true), "brokerd answered an error: busy".into())
    );
    let unsent = client_error(&ClientError::RequestTooLong { len: 5 << 20 });
    assert_eq!(unsent.is_error, Some(true));
    assert!(
        text(&unsent).starts_with("nothing was sent to brokerd; nothing ran: "),
        "{}",
        text(&unsent)
    );
}

#[test]
fn pages_name_the_next_offset_or_the_end() {
    let more = page(
        "ab12",
        &ResultPage {
            content: "abc".into(),
            offset: 0,
            next_offset: Some(3),
        },
    );
    assert!(text(&more).starts_with("abc\n"));
    assert!(text(&more).contains(r#"{"result_id":"ab12","offset":3}"#));
    let last = page(
        "ab12",
        &ResultPage {
            content: "def".into(),
            offset: 3,
            next_offset: None,
        },
    );
    assert_eq!(text(&last), "def\n[boxmaker: end of the output]");
}

#[test]
fn read_result_arguments_are_strict() {
    let obj = |v: serde_json::Value| match v {
        serde_json::Value::Object(o) => Some(o),
        _ => None,
    };
    let ok =
        ReadResult::parse(obj(serde_json::json!({"result_id": "r", "offset": 5}))).expect("ok");
    assert_eq!((ok.result_id.as_str(), ok.offset), ("r", 5));
    let zero = ReadResult::parse(obj(serde_json::json!({"result_id": "r"}))).expect("zero");
    assert_eq!(zero.offset, 0);
    for bad in [
        serde_json::json!({}),
        serde_json::json!({"result_id": 7}),
        serde_json::json!({"result_id": "r", "offset": -1}),
        serde_json::json!({"result_id": "r", "extra": true}),
    ] {
        assert!(ReadResult::parse(obj(bad.clone())).is_err(), "{bad}");
    }
    assert!(ReadResult::parse(None).is_err());
}
