//! What the runner behind a call changes: a session known down after the runner was
//! unavailable, no `[runner]` at all, a grant's toolset, and a grant's own limits in its
//! sandbox (docs/design.md#protocol, docs/design.md#toolsets).

use super::*;

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
