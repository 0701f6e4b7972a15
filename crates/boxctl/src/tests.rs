use super::*;
use clap::CommandFactory;

/// A commit answer that landed `/srv/notes/b` and left out the conflicts and skipped paths.
fn committed(conflicts: &[&str], skipped: &[&str]) -> Body {
    let left = |paths: &[&str]| {
        paths
            .iter()
            .map(|p| client::PathReason {
                path: p.to_string(),
                reason: "r".into(),
            })
            .collect()
    };
    Body::Committed {
        committed: vec!["/srv/notes/b".into()],
        conflicts: left(conflicts),
        skipped: left(skipped),
    }
}

#[test]
fn exit_codes_follow_design() {
    let cases = [
        (
            Body::Result {
                content: "".into(),
                truncated: false,
                label: "g/t".into(),
                result_id: "r1".into(),
                continues_at: None,
            },
            0,
        ),
        (Body::Refused { reason: "".into() }, 1),
        (Body::Stopped { reason: "".into() }, 1),
        (
            Body::Ask {
                question: "".into(),
                ticket: "".into(),
            },
            1,
        ),
        (Body::Failed { message: "".into() }, 2),
        (Body::Unavailable { message: "".into() }, 2),
        (Body::Error { message: "".into() }, 3),
        (Body::Declined {}, 0),
        (Body::Ended {}, 0),
        (
            Body::Changes {
                session: None,
                changes: vec![],
                bytes: 0,
                max_bytes: 1,
                sessions: vec![],
                left_out: 0,
            },
            0,
        ),
        (committed(&[], &[]), 0),
        (committed(&["/srv/notes/a"], &[]), 1),
        (committed(&[], &["/srv/notes/Cargo.lock"]), 1),
        (
            Body::Discarded {
                discarded: vec!["/srv/notes/a".into()],
            },
            0,
        ),
        (Body::Approved {}, 0),
    ];
    for (body, code) in cases {
        assert_eq!(exit_code(&body), code, "{body:?}");
    }
}

fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
    Cli::try_parse_from(std::iter::once("boxctl").chain(args.iter().copied()))
}

#[test]
fn the_command_lines_of_the_readme_parse() {
    Cli::command().debug_assert();
    let call = parse(&[
        "--socket",
        "/s",
        "call",
        "--session",
        "s",
        "--call",
        "c",
        "--grant",
        "g",
        "--approval",
        "t",
        "shell",
        r#"{"command":"ls"}"#,
    ])
    .expect("call");
    assert_eq!(call.socket.as_deref(), Some(Path::new("/s")));
    match call.command {
        Cmd::Op(Op::Call {
            session,
            call_id,
            grant,
            approval,
            tool,
            arguments,
        }) => assert_eq!(
            (session, call_id, grant, approval, tool, arguments),
            (
                "s".into(),
                "c".into(),
                "g".into(),
                Some("t".into()),
                "shell".into(),
                r#"{"command":"ls"}"#.into()
            )
        ),
        other => panic!("{other:?}"),
    }
    let page = parse(&["result", "r1", "--offset", "7"]).expect("result");
    assert!(matches!(
        page.command,
        Cmd::Op(Op::Result { offset: 7, .. })
    ));
    // The options may follow the command, as before.
    let doctor = parse(&["doctor", "--config", "/c", "--socket", "/s"]).expect("doctor");
    assert_eq!(doctor.config.as_deref(), Some(Path::new("/c")));
    assert!(matches!(doctor.command, Cmd::Local(Local::Doctor)));
    for ok in [
        &["decline", "t"][..],
        &["end-session", "s"],
        &["tools", "g"],
        &["status"],
        &["mcp", "--grant", "g"],
        &["--socket", "/s", "mcp", "--grant", "g", "--session", "s.1"],
        &["ps"],
        &["gc"],
        &["gc", "--caches"],
        &["audit", "verify", "f"],
        &["completions", "bash"],
        &["man"],
        &["changes"],
        &["changes", "--text"],
        &[
            "changes",
            "--session",
            "s1",
            "--grant",
            "g",
            "--diff",
            "--text",
        ],
        &["sessions"],
        &["sessions", "--text"],
        &["commit", "--session", "s1"],
        &["discard", "--session", "s1", "--grant", "g"],
        &["approve", "t"],
    ] {
        assert!(parse(ok).is_ok(), "{ok:?}");
    }
}

#[test]
fn staged_commands_make_the_protocol_requests() {
    let commit = parse(&[
        "commit",
        "--session",
        "s1",
        "--grant",
        "notes",
        "--all-or-nothing",
        "/srv/notes/a b",
        "/srv/notes/c",
    ])
    .expect("commit");
    match commit.command {
        Cmd::Op(Op::Commit {
            session,
            grant,
            all_or_nothing,
            paths,
        }) => assert_eq!(
            (session, grant, all_or_nothing, paths),
            (
                "s1".into(),
                Some("notes".into()),
                true,
                vec!["/srv/notes/a b".to_string(), "/srv/notes/c".into()]
            )
        ),
        other => panic!("{other:?}"),
    }
    let discard = parse(&["discard", "--session", "s1"]).expect("discard");
    match discard.command {
        Cmd::Op(Op::Discard {
            session,
            grant,
            paths,
        }) => assert_eq!((session, grant, paths), ("s1".into(), None, vec![])),
        other => panic!("{other:?}"),
    }
    let changes = parse(&["changes", "--diff"]).expect("changes");
    assert!(matches!(
        changes.command,
        Cmd::Op(Op::Changes {
            session: None,
            grant: None,
            diff: true,
            text: false
        })
    ));
}

/// boxctl against a brokerd stand-in on a socket of its own: the request each staged
/// command sends and the code it exits with.
#[test]
fn staged_commands_exit_by_their_answers() {
    let committed =
        r#"{"id":"1","kind":"committed","committed":["/a"],"conflicts":[],"skipped":[]}"#;
    let conflict = r#"{"id":"1","kind":"committed","committed":[],"conflicts":[{"path":"/a","reason":"changed"}],"skipped":[]}"#;
    let skipped = r#"{"id":"1","kind":"committed","committed":["/a"],"conflicts":[],"skipped":[{"path":"/b","reason":"protected: name it to commit it"}]}"#;
    let not_owner = r#"{"id":"1","kind":"error","message":"not an owner of this brokerd"}"#;
    let sessions = r#"{"id":"1","kind":"changes","session":null,"changes":[],"bytes":0,"max_bytes":9,"sessions":[{"session":"s1","grants":["g"],"paths":1,"bytes":3}]}"#;
    let changes = r#"{"id":"1","kind":"changes","session":"s1","changes":[{"grant":"g","path":"/a","change":"added","what":"file","size":3,"diff":"+abc\u001b"}],"bytes":3,"max_bytes":9}"#;
    // (command line, answer, the request sent, exit code)
    let cases: [(&[&str], &str, &str, u8); 10] = [
        (
            &["commit", "--session", "s1"],
            committed,
            r#"{"op":"commit","id":"1","session":"s1","all_or_nothing":false}"#,
            0,
        ),
        (
            &["commit", "--session", "s1", "--all-or-nothing", "/a"],
            conflict,
            r#"{"op":"commit","id":"1","session":"s1","paths":["/a"],"all_or_nothing":true}"#,
            1,
        ),
        (
            &["commit", "--session", "s1", "--grant", "g"],
            skipped,
            r#"{"op":"commit","id":"1","session":"s1","grant":"g","all_or_nothing":false}"#,
            1,
        ),
        (
            &["commit", "--session", "s1"],
            not_owner,
            r#"{"op":"commit","id":"1","session":"s1","all_or_nothing":false}"#,
            3,
        ),
        (
            &["discard", "--session", "s1", "/a"],
            r#"{"id":"1","kind":"discarded","discarded":["/a"]}"#,
            r#"{"op":"discard","id":"1","session":"s1","paths":["/a"]}"#,
            0,
        ),
        (
            &["approve", "t"],
            r#"{"id":"1","kind":"approved"}"#,
            r#"{"op":"approve","id":"1","ticket":"t"}"#,
            0,
        ),
        (
            &["approve", "t"],
            not_owner,
            r#"{"op":"approve","id":"1","ticket":"t"}"#,
            3,
        ),
        (
            &["sessions", "--text"],
            sessions,
            r#"{"op":"changes","id":"1","diff":false}"#,
            0,
        ),
        (
            &["changes", "--session", "s1", "--diff", "--text"],
            changes,
            r#"{"op":"changes","id":"1","session":"s1","diff":true}"#,
            0,
        ),
        (
            &["changes", "--session", "s1", "--text"],
            not_owner,
            r#"{"op":"changes","id":"1","session":"s1","diff":false}"#,
            3,
        ),
    ];
    for (n, (args, answer, want, code)) in cases.into_iter().enumerate() {
        let socket =
            std::env::temp_dir().join(format!("boxctl-test-{}-{n}.sock", std::process::id()));
        let _ = std::fs::remove_file(&socket);
        let listener = std::os::unix::net::UnixListener::bind(&socket).expect("bind");
        let answer = answer.to_string();
        let server = std::thread::spawn(move || {
            let (stream, _) = listener.accept().expect("accept");
            let mut line = String::new();
            std::io::BufRead::read_line(&mut std::io::BufReader::new(&stream), &mut line)
                .expect("request");
            (&stream)
                .write_all(format!("{answer}\n").as_bytes())
                .expect("answer");
            line
        });
        let mut line: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        line.extend(["--socket".to_string(), socket.display().to_string()]);
        let cli = Cli::try_parse_from(std::iter::once("boxctl".to_string()).chain(line))
            .expect("command line");
        assert_eq!(run(cli), Ok(code), "{args:?}");
        assert_eq!(server.join().expect("server").trim_end(), want, "{args:?}");
        let _ = std::fs::remove_file(&socket);
    }
}

/// The man page and the completions are clap's, and name the staged commands.
#[test]
fn man_page_and_completions_render() {
    let mut man = Vec::new();
    clap_mangen::Man::new(Cli::command())
        .render(&mut man)
        .expect("man");
    let man = String::from_utf8(man).expect("utf-8");
    for shell in [
        clap_complete::Shell::Bash,
        clap_complete::Shell::Zsh,
        clap_complete::Shell::Fish,
    ] {
        let mut out = Vec::new();
        clap_complete::generate(shell, &mut Cli::command(), "boxctl", &mut out);
        let out = String::from_utf8(out).expect("utf-8");
        for cmd in ["changes", "sessions", "commit", "discard", "approve"] {
            assert!(man.contains(cmd), "man: {cmd}");
            assert!(out.contains(cmd), "{shell}: {cmd}");
        }
        assert!(out.contains("all-or-nothing"), "{shell}");
    }
}

/// Bad usage is an error clap prints to standard error (exit 3); --help and --version are
/// not.
#[test]
fn usage_errors() {
    for bad in [
        &[][..],
        &["frob"],
        &["call", "--session", "s", "shell", "{}"],
        &[
            "call",
            "--session",
            "s",
            "--call",
            "c",
            "--grant",
            "g",
            "shell",
        ],
        &["result", "r1", "--offset", "x"],
        &["status", "extra"],
        &["mcp"],
        &["mcp", "--grant", "../g"],
        &["mcp", "--grant", "g", "--session", ""],
        &["audit", "check", "f"],
        &["--socket"],
        &["completions", "nosuchshell"],
        &["changes", "s1"],
        &["changes", "--session", "../s"],
        &["sessions", "--session", "s1"],
        &["commit"],
        &["commit", "/srv/notes/a"],
        &["commit", "--session", "s1", "--grant", ""],
        &["discard", "--grant", "g"],
        &["approve"],
        &["approve", "t1", "t2"],
    ] {
        let e = parse(bad).expect_err(&format!("{bad:?}"));
        assert!(e.use_stderr(), "{bad:?}: {e}");
    }
    for info in [
        &["--help"][..],
        &["--version"],
        &["call", "--help"],
        &["help", "audit"],
    ] {
        let e = parse(info).expect_err(&format!("{info:?}"));
        assert!(!e.use_stderr(), "{info:?}: {e}");
    }
}
