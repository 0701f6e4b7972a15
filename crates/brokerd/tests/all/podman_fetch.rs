//! An http_fetch on Podman against the fake `podman` (`podman_fake`): the tool container
//! beside its proxy (docs/design.md#http_fetch-and-its-egress-proxy), given its input only
//! once the proxy is up, and everything removed on every path.
//!
//! The fake tool of these cases reads its input first, as toolkit does, and notes in the
//! case's `events` when it started and when it read; the fake proxy notes when its socket
//! appeared and when its `run -d` ended.

// A test: a setup step that fails is the test failing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use brokerd::runner::{Cleared, Failure, Reply, Runner};
use proto::tools::ToolName;

use crate::podman_fake::*;

/// A tool as toolkit is: it reads all its input before anything else, and notes both steps.
const TOOL_READS: &str =
    r#"echo tool-started >> "$d/events"; cat > "$d/stdin"; echo tool-read >> "$d/events""#;

#[test]
fn http_fetch_runs_behind_its_proxy_and_cleans_up() {
    let tool = r#"cat > /dev/null; [ -e "$egress_dir/egress.sock" ] && echo fetched
stat -c %a "$egress_dir" > "$d/mode""#;
    let case = Case::new("fetch", tool);
    let rt = case.runtime();
    let spec = case.spec(ToolName::HttpFetch);
    assert_eq!(rt.run(&spec), ok("fetched\n", false));
    assert_eq!(case.verbs(), FETCH_RAN);
    assert_eq!(case.record("mode"), b"700\n");
    assert_eq!(case.egress_dirs(), Vec::<PathBuf>::new());

    // The proxy got the egress list, the tool the same directory.
    let proxy = String::from_utf8(case.record("egress.args")).expect("utf-8");
    let name = proxy
        .lines()
        .find_map(|l| l.strip_prefix("--name="))
        .and_then(|n| n.strip_suffix("-egress"))
        .expect("--name=<name>-egress");
    let want: String = rt
        .egress_args(spec.egress.as_ref().expect("egress"), name)
        .iter()
        .map(|a| format!("{}\n", a.to_string_lossy()))
        .collect();
    assert_eq!(proxy, want);
    let tool_args = String::from_utf8(case.record("tool.args")).expect("utf-8");
    let volume = format!(
        "--volume={}:/run/egress:rw",
        case.home.path().join("run/egress").join(name).display()
    );
    assert!(tool_args.lines().any(|l| l == volume), "{tool_args}");
}

/// The answer leaves once the tool is done, while the proxy and its directory still exist;
/// `run_replying` returns only once both are removed.
#[test]
fn http_fetch_answers_before_its_proxy_is_removed() {
    let case = Case::new("early", "cat > /dev/null; echo fetched");
    let rt = case.runtime();
    let spec = case.spec(ToolName::HttpFetch);
    let mut seen = None;
    rt.run_replying(
        &spec,
        Reply::new(|answer| seen = Some((answer, case.verbs(), case.egress_dirs().len()))),
    );
    let (answer, verbs, dirs) = seen.expect("an answer");
    assert_eq!(answer, ok("fetched\n", false));
    assert_eq!(verbs, ["run", "proxy"]);
    assert_eq!(dirs, 1);
    assert_eq!(case.verbs(), FETCH_RAN);
    assert_eq!(case.egress_dirs(), Vec::<PathBuf>::new());
}

/// Whatever happens to the call, the proxy is removed and its directory is gone; a proxy that
/// fails or is late gets the tool container killed and removed having read nothing.
#[test]
fn egress_is_cleaned_up_on_every_path() {
    // (session, proxy behaviour, tool behaviour, answer, podman calls)
    type Row = (
        &'static str,
        &'static str,
        &'static str,
        Answer,
        Vec<&'static str>,
    );
    let (ran, stopped) = (FETCH_RAN.to_vec(), FETCH_STOPPED.to_vec());
    let cases: Vec<Row> = vec![
        (
            "eok",
            PROXY_STARTS,
            "cat > /dev/null; echo body",
            ok("body\n", false),
            ran.clone(),
        ),
        (
            "efail",
            PROXY_STARTS,
            "cat > /dev/null; echo oops; exit 2",
            failed(Failure::CouldNotRun),
            ran.clone(),
        ),
        (
            "ecurl",
            PROXY_STARTS,
            "cat > /dev/null; echo 'http_fetch: x: refused'; exit 1",
            ok("http_fetch: x: refused\n", false),
            ran.clone(),
        ),
        (
            "ehang",
            PROXY_STARTS,
            "cat > /dev/null; exec sleep 30",
            failed(Failure::TimedOut),
            stopped.clone(),
        ),
        (
            "eflood",
            PROXY_STARTS,
            "cat > /dev/null; exec yes",
            ok(&"y\n".repeat(CAP / 2), true),
            stopped.clone(),
        ),
        // podman could not make the tool container: its own failure is the answer.
        (
            "eno127",
            PROXY_STARTS,
            "cat > /dev/null; echo 'podman: not found' >&2; exit 127",
            UNAVAILABLE,
            ran.clone(),
        ),
        // A `run -d` that ends well without a socket, one that fails, one that never ends.
        (
            "enosock",
            ":",
            TOOL_READS,
            EGRESS_UNAVAILABLE,
            stopped.clone(),
        ),
        (
            "eproxy125",
            "echo 'Error: pasta: unsupported network' >&2; exit 125",
            TOOL_READS,
            EGRESS_UNAVAILABLE,
            stopped.clone(),
        ),
        (
            "eproxyhang",
            "exec sleep 30",
            TOOL_READS,
            EGRESS_UNAVAILABLE,
            stopped.clone(),
        ),
        // The socket is not enough: a `run -d` that fails, or never ends, after its socket
        // appeared is a proxy that did not start.
        (
            "eproxylate",
            r#"touch "$egress_dir/egress.sock"; echo 'Error: late' >&2; exit 125"#,
            TOOL_READS,
            EGRESS_UNAVAILABLE,
            stopped.clone(),
        ),
        (
            "eproxystuck",
            r#"touch "$egress_dir/egress.sock"; exec sleep 30"#,
            TOOL_READS,
            EGRESS_UNAVAILABLE,
            stopped.clone(),
        ),
    ];
    for (session, proxy, tool, want, verbs) in cases {
        let case = Case::new(session, tool).with("egress", proxy);
        let start = Instant::now();
        let got = case.runtime().run(&case.spec(ToolName::HttpFetch));
        let took = start.elapsed();
        assert_eq!(got, want, "{session}");
        let mut got_verbs = case.verbs();
        // A proxy that fails at once can have the tool's podman killed before the fake notes
        // its `run`; that it read nothing is checked below either way.
        if want == EGRESS_UNAVAILABLE && got_verbs.first().is_some_and(|v| v != "run") {
            got_verbs.insert(0, "run".into());
        }
        assert_eq!(got_verbs, verbs, "{session}");
        assert_eq!(case.egress_dirs(), Vec::<PathBuf>::new(), "{session}");
        if want == EGRESS_UNAVAILABLE {
            assert_eq!(
                case.record("stdin"),
                b"",
                "{session}: the tool read its input"
            );
            assert!(
                !events(&case).contains(&"tool-read".to_string()),
                "{session}"
            );
        }
        let bound = Duration::from_millis(EGRESS_START_MS) + LIMIT + 2 * HELPER_LIMIT + SLACK;
        assert!(took < bound, "{session}: took {took:?}");
    }
}

/// A decision that reaches the disk late shortens the tool's time and never makes the call
/// longer than its time limit plus the proxy's budget: the tool's limit is not counted afresh
/// after a slow record. One that is later still than the time limit starts nothing.
#[test]
fn a_late_decision_never_lengthens_the_call() {
    let limit = Duration::from_secs(3);
    let budget = limit + Duration::from_millis(EGRESS_START_MS);
    let run = |case: &Case, after: Duration| {
        let mut spec = case.spec(ToolName::HttpFetch);
        spec.timeout = limit;
        let cleared = Cleared::pending();
        let decider = cleared.clone();
        let decide = std::thread::spawn(move || {
            std::thread::sleep(after);
            decider.decide(true);
        });
        let started = Instant::now();
        let mut got = None;
        case.runtime()
            .run_replying(&spec, Reply::after(cleared, |answer| got = Some(answer)));
        let took = started.elapsed();
        decide.join().expect("decider");
        (got.expect("an answer"), took)
    };
    // On disk shortly before the time limit: the proxy and the tool run, within the budget
    // (counting the tool's limit afresh would end it at 5.5 s).
    let case = Case::new("latedecision", r#"cat > "$d/stdin"; exec sleep 30"#);
    let (answer, took) = run(&case, Duration::from_millis(2500));
    assert_eq!(answer, failed(Failure::TimedOut));
    assert!(
        took >= budget && took < budget + Duration::from_secs(1),
        "took {took:?}, budget {budget:?}"
    );
    assert_eq!(case.verbs(), FETCH_STOPPED);

    // On disk only after the time limit: no proxy started, the tool container was stopped
    // having read nothing, and the answer comes at the limit.
    let case = Case::new("toolate", r#"cat > "$d/stdin"; echo fetched"#);
    let (answer, took) = run(&case, limit + Duration::from_millis(300));
    assert_eq!(answer, failed(Failure::CouldNotRun));
    assert!(
        took >= limit && took < limit + Duration::from_millis(300),
        "took {took:?}"
    );
    case.assert_stopped_before_the_decision();
}

/// The tool container starts beside its proxy, not after it, and reads its input only once
/// the proxy's socket exists and its `run -d` has ended: the fake's events say so in order,
/// for a proxy that comes quickly and for one that takes most of its budget.
#[test]
fn the_tool_starts_beside_its_proxy_and_reads_only_once_it_is_up() {
    for (session, delay) in [("besidequick", "0"), ("besidelate", "0.5")] {
        // The proxy makes its socket once the tool container has started (for at most 3 s,
        // past which a tool started after its proxy shows in the order of the events), so
        // that a slow start of the tool's podman on a busy host is not read as an order.
        let proxy = format!(
            r#"i=0; until grep -q tool-started "$d/events" 2>/dev/null || [ $i -ge 300 ]; do sleep 0.01; i=$((i+1)); done
sleep {delay}; touch "$egress_dir/egress.sock"; echo proxy-socket >> "$d/events"
sleep 0.1; echo proxy-exit >> "$d/events""#
        );
        let tool = format!("{TOOL_READS}; echo fetched");
        let case = Case::new(session, &tool).with("egress", &proxy);
        let spec = case.spec(ToolName::HttpFetch);
        assert_eq!(
            case.runtime().run(&spec),
            ok("fetched\n", false),
            "{session}"
        );
        assert_eq!(case.record("stdin"), spec.input, "{session}");
        let events = events(&case);
        let at = |e: &str| {
            events
                .iter()
                .position(|x| x == e)
                .unwrap_or_else(|| panic!("{session}: no {e} in {events:?}"))
        };
        assert!(
            at("tool-started") < at("proxy-socket"),
            "{session}: the tool container was not made beside the proxy: {events:?}"
        );
        assert!(
            at("proxy-socket") < at("proxy-exit") && at("proxy-exit") < at("tool-read"),
            "{session}: the tool read before the proxy was up: {events:?}"
        );
    }
}

/// A proxy past its budget (its socket never made in time) and a proxy that failed: the tool
/// container, which was made beside it, is killed and removed having read nothing, and the
/// answer is unavailable, the sandbox itself not known to be down.
#[test]
fn a_proxy_late_or_failed_takes_the_tool_container_with_it() {
    let cases = [
        (
            "proxytoolate",
            format!(
                "sleep {}; touch \"$egress_dir/egress.sock\"",
                (EGRESS_START_MS + 400) as f64 / 1000.0
            ),
        ),
        (
            "proxyfailed",
            r#"sleep 0.1; echo 'Error: slirp4netns failed' >&2; exit 125"#.to_string(),
        ),
    ];
    for (session, proxy) in cases {
        let case = Case::new(session, TOOL_READS).with("egress", &proxy);
        let started = Instant::now();
        let got = case.runtime().run(&case.spec(ToolName::HttpFetch));
        assert_eq!(got, EGRESS_UNAVAILABLE, "{session}");
        assert!(
            started.elapsed() < Duration::from_millis(EGRESS_START_MS) + SLACK,
            "{session}: took {:?}",
            started.elapsed()
        );
        assert_eq!(
            case.record("stdin"),
            b"",
            "{session}: the tool read its input"
        );
        assert_eq!(events(&case), ["tool-started"], "{session}");
        assert_eq!(case.verbs(), FETCH_STOPPED, "{session}");
        assert_eq!(case.egress_dirs(), Vec::<PathBuf>::new(), "{session}");
    }
}

/// A tool container that ends before its proxy is up (podman could not make it, or it ended
/// by itself) read nothing: podman's failure is the answer, and output it printed without its
/// input answers nothing. The answer does not wait for the proxy, which is removed after it.
#[test]
fn a_tool_container_that_ends_first_read_nothing() {
    // (session, tool, answer)
    let cases = [
        (
            "toolfirst125",
            "echo 'Error: creating container storage: no space left' >&2; exit 125",
            UNAVAILABLE,
        ),
        (
            "toolfirst0",
            r#"echo 'made up' ; exit 0"#,
            failed(Failure::CouldNotRun),
        ),
    ];
    for (session, tool, want) in cases {
        let proxy =
            r#"sleep 0.3; touch "$egress_dir/egress.sock"; echo proxy-socket >> "$d/events""#;
        let case = Case::new(session, tool).with("egress", proxy);
        let spec = case.spec(ToolName::HttpFetch);
        let mut seen = None;
        case.runtime().run_replying(
            &spec,
            Reply::new(|answer| seen = Some((answer, events(&case)))),
        );
        let (answer, at_answer) = seen.expect("an answer");
        assert_eq!(answer, want, "{session}");
        assert!(
            at_answer.is_empty(),
            "{session}: the answer waited for the proxy: {at_answer:?}"
        );
        assert_eq!(case.record("stdin"), b"", "{session}");
        // The proxy's `run -d` was started; it may have been killed before the fake podman
        // noted it, which is what its removal is for.
        let verbs: Vec<String> = case.verbs().into_iter().filter(|v| v != "proxy").collect();
        assert_eq!(verbs, ["run", "rm -f egress", "exists egress"], "{session}");
        assert_eq!(case.egress_dirs(), Vec::<PathBuf>::new(), "{session}");
    }
}
