//! The Podman runtime against the fake `podman` (`podman_fake`): the exit-code table, the
//! tool's input, output and time limits, stops, a swapped grant directory, the log, the
//! decision's gate, protected targets, and how podman itself is started.

// A test: a setup step that fails is the test failing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use brokerd::runner::{Cleared, Failure, Mount, Reply, RunError, RunOutput, RunSpec, Runner};
use proto::tools::ToolName;

use crate::common;
use crate::podman_fake::*;

/// The exit-code table of docs/design.md#the-tool-container, one case per row.
#[test]
fn exit_codes() {
    let cases: Vec<(&'static str, &str, Result<RunOutput, RunError>)> = vec![
        ("exit0", "printf 'hello\\n'; exit 0", ok("hello\n", false)),
        (
            "exit1",
            "printf 'read_file: /x: no such file\\n'; exit 1",
            ok("read_file: /x: no such file\n", false),
        ),
        ("exit2", "echo output; exit 2", failed(Failure::CouldNotRun)),
        (
            "exit125",
            "echo 'Error: no image' >&2; exit 125",
            UNAVAILABLE,
        ),
        (
            "exit126",
            "echo 'Error: permission' >&2; exit 126",
            UNAVAILABLE,
        ),
        (
            "exit127",
            "echo 'Error: not found' >&2; exit 127",
            UNAVAILABLE,
        ),
        ("exit137", "echo partial; exit 137", failed(Failure::Killed)),
        (
            "exit3",
            "echo odd; exit 3",
            failed(Failure::UnexpectedStatus),
        ),
        ("exit255", "exit 255", failed(Failure::UnexpectedStatus)),
        (
            "nonutf8",
            "printf 'a\\377b\\300'; exit 0",
            ok("a\u{FFFD}b\u{FFFD}", false),
        ),
        ("empty", "exit 0", ok("", false)),
    ];
    for (session, sh, want) in cases {
        let case = Case::new(session, sh);
        let got = case.runtime().run(&case.spec(ToolName::Shell));
        assert_eq!(got, want, "{session}");
        assert_eq!(case.verbs(), ["run"], "{session}: nothing else is called");
    }
}

#[test]
fn standard_input_is_the_tool_json_then_closed() {
    let case = Case::new("stdin", r#"cat > "$d/stdin"; echo done"#);
    let spec = case.spec(ToolName::Shell);
    assert_eq!(case.runtime().run(&spec), ok("done\n", false));
    assert_eq!(case.record("stdin"), spec.input);
}

#[test]
fn a_container_that_never_reads_its_input_does_not_block() {
    let case = Case::new("noread", "echo early; exit 0");
    let mut spec = case.spec(ToolName::WriteFile);
    // Far more than a pipe holds.
    spec.input = vec![b'x'; 4 << 20];
    let start = Instant::now();
    assert_eq!(case.runtime().run(&spec), ok("early\n", false));
    assert!(start.elapsed() < SLACK, "took {:?}", start.elapsed());
}

#[test]
fn arguments_are_the_tool_list() {
    let case = Case::new("args", "exit 0");
    let rt = case.runtime();
    let spec = case.spec(ToolName::ReadFile);
    assert_eq!(rt.run(&spec), ok("", false));
    let recorded = String::from_utf8(case.record("tool.args")).expect("utf-8");
    let name = recorded
        .lines()
        .find_map(|l| l.strip_prefix("--name="))
        .expect("--name");
    assert!(name.starts_with("boxmaker-args-c1-"), "{name}");
    let want: String = rt
        .tool_args(&spec, name)
        .iter()
        .map(|a| format!("{}\n", a.to_string_lossy()))
        .collect();
    assert_eq!(recorded, want);
}

#[test]
fn output_over_the_cap_is_truncated_and_the_container_stopped() {
    let case = Case::new("flood", "exec yes abcdefghi");
    let start = Instant::now();
    let got = case.runtime().run(&case.spec(ToolName::Shell));
    assert!(
        start.elapsed() < LIMIT + SLACK,
        "took {:?}",
        start.elapsed()
    );
    let out = got.expect("a result, not a failure");
    assert!(out.truncated);
    assert_eq!(out.content.len(), CAP);
    assert_eq!(out.content, "abcdefghi\n".repeat(CAP / 10));
    assert_eq!(case.verbs(), ["run", "kill", "rm -f", "exists"]);
}

#[test]
fn output_of_exactly_the_cap_is_not_truncated() {
    let case = Case::new(
        "atcap",
        &format!("head -c {CAP} /dev/zero | tr '\\0' x; exit 0"),
    );
    let out = case.runtime().run(&case.spec(ToolName::Shell)).expect("ok");
    assert_eq!((out.content.len(), out.truncated), (CAP, false));
    assert_eq!(case.verbs(), ["run"]);
}

#[test]
fn a_hang_past_the_time_limit_is_killed_then_removed() {
    let case = Case::new("hang", "exec sleep 30");
    let start = Instant::now();
    let got = case.runtime().run(&case.spec(ToolName::Shell));
    let took = start.elapsed();
    assert_eq!(got, failed(Failure::TimedOut));
    assert!(took >= LIMIT && took < LIMIT + SLACK, "took {took:?}");
    assert_eq!(case.verbs(), ["run", "kill", "rm -f", "exists"]);
    let name = case.calls()[1].strip_prefix("kill ").map(str::to_owned);
    assert_eq!(
        case.calls()[2],
        format!("rm -f {}", name.expect("kill <name>"))
    );
}

#[test]
fn a_podman_kill_that_hangs_is_still_bounded_and_poisons_http_fetch() {
    let case = Case::new("killhang", "exec sleep 30").with("kill", "exec sleep 30");
    let rt = case.runtime();
    let start = Instant::now();
    let got = rt.run(&case.spec(ToolName::Shell));
    let took = start.elapsed();
    assert_eq!(got, failed(Failure::TimedOut));
    assert!(
        took < LIMIT + 2 * HELPER_LIMIT + SLACK,
        "took {took:?}: kill and rm are each bounded"
    );
    // The removal is still tried, and the container is gone, but a hung kill is poison.
    assert_eq!(case.verbs(), ["run", "kill", "rm -f", "exists"]);
    // docs/design.md#preflight-and-poisoning: a sandbox not confirmed dead turns http_fetch off until restart.
    assert!(rt.poisoned());
    let before = case.calls().len();
    assert_eq!(rt.run(&case.spec(ToolName::HttpFetch)), EGRESS_UNAVAILABLE);
    assert_eq!(case.calls().len(), before, "nothing was started");
    // Other tools still run.
    std::fs::write(case.dir.join("tool.sh"), "echo fine").expect("tool.sh");
    assert_eq!(rt.run(&case.spec(ToolName::ReadFile)), ok("fine\n", false));
}

#[test]
fn podman_absent_is_unavailable() {
    for tool in [ToolName::Shell, ToolName::HttpFetch] {
        let case = Case::new("absent", "exit 0");
        let rt = case.runtime_with(Path::new("/nonexistent/boxmaker/podman"));
        assert_eq!(rt.run(&case.spec(tool)), UNAVAILABLE, "{tool}");
        assert_eq!(case.egress_dirs(), Vec::<PathBuf>::new(), "{tool}");
    }
}

#[test]
fn malformed_specs_never_reach_podman() {
    let case = Case::new("malformed", "echo ran");
    let rt = case.runtime();
    // (A session or call that could not name a container cannot be built: they are Idents.)
    let mut bad_mount = case.spec(ToolName::Shell);
    bad_mount.mounts = vec![brokerd::runner::Mount {
        path: "/srv/a:b".into(),
        write: false,
        id: brokerd::runner::DirId { dev: 0, ino: 0 },
        protect: false,
        stage: None,
    }];
    assert_eq!(rt.run(&bad_mount), failed(Failure::CouldNotRun));
    assert!(case.calls().is_empty());
    // More directories than a grant may name: the descriptors would not fit the layout the
    // runner keeps for them (`config::MAX_GRANT_PATHS`).
    let mut too_many = case.spec(ToolName::Shell);
    too_many.mounts = vec![
        brokerd::runner::Mount {
            path: "/srv/a".into(),
            ..bad_mount.mounts[0].clone()
        };
        brokerd::config::MAX_GRANT_PATHS + 1
    ];
    assert_eq!(rt.run(&too_many), failed(Failure::CouldNotRun));
    assert!(case.calls().is_empty());
}

/// Podman mounts by path, so a grant directory swapped for a symlink is caught before the
/// container starts (nothing runs) and, if swapped while it ran, after it: the call is a
/// refusal that names the directory, and what the container printed is dropped.
#[test]
fn a_swapped_grant_directory_is_refused_before_and_after_the_run() {
    use brokerd::runner::mounts::MountTrouble;
    use brokerd::runner::{Mount, MountChanged};
    let grants = tempfile::tempdir().expect("tempdir");
    let base = std::fs::canonicalize(grants.path()).expect("canonical");
    let (inner, away) = (base.join("inner"), base.join("away"));
    std::fs::create_dir(&inner).expect("inner");
    let swap = format!(
        "mv '{}' '{}'; ln -s / '{}'; echo 'what the link showed'; exit 0",
        inner.display(),
        away.display(),
        inner.display()
    );
    let case = Case::new("swapped", &swap);
    let rt = case.runtime();
    let mut spec = case.spec(ToolName::Shell);
    spec.mounts = vec![Mount::at(&inner, false).expect("a directory")];
    let changed = Err(RunError::MountChanged(MountChanged {
        path: inner.clone(),
        why: MountTrouble::Symlink,
    }));
    // Swapped while the container ran: the run happened, its output is not the answer.
    assert_eq!(rt.run(&spec), changed);
    assert_eq!(case.verbs(), ["run"]);
    // Still swapped at the next call: podman is not started at all.
    assert_eq!(rt.run(&spec), changed);
    assert_eq!(case.verbs(), ["run"]);
    // Put back: it runs, and the script swaps it again.
    std::fs::remove_file(&inner).expect("unlink");
    std::fs::rename(&away, &inner).expect("move back");
    std::fs::write(case.dir.join("tool.sh"), "echo fine; exit 0").expect("tool.sh");
    assert_eq!(rt.run(&spec), ok("fine\n", false));
}

/// A staged layer's overlay volume that podman could not mount is `unavailable` with the staged
/// layer's runbook pointer, not the sandbox missing: podman's own lines as Podman 4.3 with runc
/// printed them (docs/design.md#staged-writes-and-owners). The same lines for a call with no
/// staged mount, or naming another layer, or after the tool printed, are podman's failure as
/// before.
#[test]
fn an_overlay_volume_podman_cannot_mount_is_the_layer_unavailable() {
    use brokerd::runner::StageMount;
    let log = common::captured_log();
    let dirs = tempfile::tempdir().expect("tempdir");
    let base = std::fs::canonicalize(dirs.path()).expect("canonical");
    let real = base.join("real");
    let layer = base.join("layer");
    let (upper, work) = (layer.join("upper"), layer.join("work"));
    for d in [&real, &upper, &work] {
        std::fs::create_dir_all(d).expect("dir");
    }
    let stage = StageMount {
        upper: upper.clone(),
        work: work.clone(),
        merged: layer.join("merged"),
    };
    let (r, u, w) = (real.display(), upper.display(), work.display());
    let prepare =
        format!("Error: mounting overlay failed \"{r}\": chmod {u}: no such file or directory");
    let runtime = format!(
        "Error: OCI runtime error: runc: runc create failed: unable to start container process: \
         error during container init: error mounting \"/home/boxmaker/.local/share/containers/\
         storage/overlay-containers/0f/userdata/overlay/3612083776/merge\" to rootfs at \"{r}\": \
         mount /home/boxmaker/.local/share/containers/storage/overlay-containers/0f/userdata/\
         overlay/3612083776/merge:{r} (via /proc/self/fd/10), data: \
         lowerdir={r},upperdir={u},workdir={w},userxattr: invalid argument"
    );
    let other_layer = runtime.replace(&format!("upperdir={u}"), "upperdir=/elsewhere/upper");
    // (case, what podman prints on standard error, exit, standard output, staged, answer)
    let table: Vec<(&str, &str, u8, &str, bool, Answer)> = vec![
        ("ovlprep", &prepare, 127, "", true, LAYER_UNAVAILABLE),
        ("ovlprep126", &prepare, 126, "", true, LAYER_UNAVAILABLE),
        ("ovlmount", &runtime, 126, "", true, LAYER_UNAVAILABLE),
        ("ovlmount125", &runtime, 125, "", true, LAYER_UNAVAILABLE),
        ("ovldirect", &prepare, 127, "", false, UNAVAILABLE),
        ("ovlother", &other_layer, 126, "", true, UNAVAILABLE),
        ("ovlprinted", &runtime, 126, "x", true, UNAVAILABLE),
        (
            "ovlplain",
            "Error: permission denied",
            126,
            "",
            true,
            UNAVAILABLE,
        ),
        // Not podman's own failure: the tool's answer.
        ("ovltool", &prepare, 1, "", true, ok("", false)),
    ];
    for (session, stderr, exit, stdout, staged, want) in table {
        let quoted = |t: &str| format!("'{}'", t.replace('\'', r"'\''"));
        let sh = format!(
            "printf '%s' {}; printf '%s\\n' {} >&2; exit {exit}",
            quoted(stdout),
            quoted(stderr)
        );
        let case = Case::new(session, &sh);
        let mut spec = case.spec(ToolName::Shell);
        let mut m = Mount::at(&real, true).expect("a directory");
        m.stage = staged.then(|| stage.clone());
        spec.mounts = vec![m];
        assert_eq!(case.runtime().run(&spec), want, "{session}");
    }
    let journal = String::from_utf8_lossy(&log.lock().expect("log")).into_owned();
    let line = journal
        .lines()
        .find(|l| l.contains("ovlmount") && l.contains("unavailable"))
        .unwrap_or_else(|| panic!("no log line of ovlmount:\n{journal}"));
    assert!(
        line.contains("the session's staged layer could not be mounted")
            && line.contains("see runbook/runner.md#staged-layer"),
        "{line}"
    );
}

/// What podman or the tool print on standard error reaches brokerd's log only, and redacted:
/// a secret in it is not kept in the journal.
#[test]
fn standard_error_is_logged_redacted() {
    const SECRET: &str = "ghp_Pl4ntedPl4ntedPl4ntedPl4ntedPl4nted1";
    let log = common::captured_log();
    let failing =
        format!("echo 'GITHUB_TOKEN={SECRET} Authorization: Bearer pl4ntedbearer' >&2; exit 2");
    let case = Case::new("stderrlog", &failing);
    let rt = case.runtime();
    assert_eq!(
        rt.run(&case.spec(ToolName::Shell)),
        failed(Failure::CouldNotRun)
    );
    let missing = format!("echo 'no such image; --password pl4ntedpw {SECRET}' >&2; exit 125");
    std::fs::write(case.dir.join("tool.sh"), missing).expect("tool.sh");
    assert_eq!(rt.run(&case.spec(ToolName::Shell)), UNAVAILABLE);
    let journal = String::from_utf8_lossy(&log.lock().expect("log")).into_owned();
    assert!(
        journal.contains("stderrlog"),
        "the lines were captured: {journal}"
    );
    for secret in [SECRET, "pl4ntedbearer", "pl4ntedpw"] {
        assert!(!journal.contains(secret), "{secret} logged:\n{journal}");
    }
}

/// The container is started while brokerd puts the decision on disk; its tool gets its input
/// only once the record is there. Without the record, the container is stopped having read
/// nothing, and an http_fetch starts no proxy at all.
#[test]
fn the_tool_and_its_proxy_wait_for_the_decision_on_disk() {
    let run = |case: &Case, spec: &RunSpec, on_disk: bool| {
        let cleared = Cleared::pending();
        let decider = cleared.clone();
        let stdin = case.dir.join("stdin");
        let decide = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            let read_early = std::fs::read(&stdin).unwrap_or_default();
            decider.decide(on_disk);
            read_early
        });
        let mut got = None;
        case.runtime()
            .run_replying(spec, Reply::after(cleared, |answer| got = Some(answer)));
        (got.expect("an answer"), decide.join().expect("decider"))
    };
    let case = Case::new("gateopen", r#"cat > "$d/stdin"; echo done"#);
    let spec = case.spec(ToolName::Shell);
    let (answer, early) = run(&case, &spec, true);
    assert_eq!(
        early, b"",
        "the tool read its input before the decision was on disk"
    );
    assert_eq!(answer, ok("done\n", false));
    assert_eq!(case.record("stdin"), spec.input);

    let case = Case::new("gateshut", r#"cat > "$d/stdin"; echo done"#);
    let (answer, _) = run(&case, &case.spec(ToolName::Shell), false);
    assert_eq!(answer, failed(Failure::CouldNotRun));
    assert_eq!(case.record("stdin"), b"");
    assert_eq!(case.verbs(), ["run", "kill", "rm -f", "exists"]);

    // An http_fetch's tool container is made beside the decision too; its proxy is not.
    let case = Case::new("gatefetch", r#"cat > "$d/stdin"; echo fetched"#);
    let (answer, _) = run(&case, &case.spec(ToolName::HttpFetch), false);
    assert_eq!(answer, failed(Failure::CouldNotRun));
    case.assert_stopped_before_the_decision();
}

/// A writable mount's protected targets reach Podman as read-only volumes over it, and the
/// directories between them and the grant directory as writable volumes onto themselves; a
/// path Podman's --volume cannot carry refuses the call before any podman runs
/// (docs/design.md#protected-targets).
#[test]
fn protected_targets_become_read_only_volumes() {
    let case = Case::new("protected", "echo ran");
    let work = tempfile::tempdir().expect("work");
    let root = std::fs::canonicalize(work.path()).expect("canonical");
    std::fs::create_dir(root.join("vendor")).expect("vendor");
    std::fs::write(root.join("gen.rs"), "// @generated\n").expect("gen.rs");
    std::fs::create_dir_all(root.join("web/app/node_modules")).expect("node_modules");
    let mut spec = case.spec(ToolName::Shell);
    let mut m = Mount::at(&root, true).expect("mount");
    m.protect = true;
    spec.mounts = vec![m];
    let rt = case.runtime();
    assert!(rt.run(&spec).is_ok());
    let run = case
        .calls()
        .into_iter()
        .find(|c| c.starts_with("run -i") || c.starts_with("run --rm"))
        .expect("run");
    for target in ["gen.rs", "vendor", "web/app/node_modules"] {
        let p = root.join(target);
        let want = format!("--volume={}:{}:ro", p.display(), p.display());
        assert!(run.contains(&want), "{want} not in {run}");
    }
    for pin in ["web", "web/app"] {
        let p = root.join(pin);
        let want = format!("--volume={}:{}:rw", p.display(), p.display());
        assert!(run.contains(&want), "{want} not in {run}");
    }
    assert!(
        !run.contains(&format!("--volume={}/src", root.display())),
        "{run}"
    );

    let odd = Case::new("protectedodd", "echo ran");
    std::fs::create_dir(root.join("a:b")).expect("odd");
    std::fs::create_dir(root.join("a:b/vendor")).expect("odd vendor");
    let mut spec = odd.spec(ToolName::Shell);
    let mut m = Mount::at(&root, true).expect("mount");
    m.protect = true;
    spec.mounts = vec![m];
    match odd.runtime().run(&spec) {
        Err(RunError::Unprotected(e)) => assert!(e.to_string().contains("a:b"), "{e}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(odd.calls().is_empty(), "{:?}", odd.calls());

    // A name that is not UTF-8 cannot reach runc's JSON spec either.
    use std::os::unix::ffi::OsStrExt;
    std::fs::remove_dir_all(root.join("a:b")).expect("rm odd");
    let latin = Case::new("protectedlatin", "echo ran");
    let caf = root.join(std::ffi::OsStr::from_bytes(b"caf\xe9"));
    std::fs::create_dir_all(caf.join("vendor")).expect("latin vendor");
    let mut spec = latin.spec(ToolName::Shell);
    let mut m = Mount::at(&root, true).expect("mount");
    m.protect = true;
    spec.mounts = vec![m];
    match latin.runtime().run(&spec) {
        Err(RunError::Unprotected(e)) => assert!(e.to_string().contains("not UTF-8"), "{e}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(latin.calls().is_empty(), "{:?}", latin.calls());
}

/// Podman runs through the clone spawner with every hook std's `Command` had: a process group
/// of its own (what a stop kills) and brokerd's environment (rootless Podman needs its
/// `XDG_RUNTIME_DIR` and `HOME`), and nothing else it did not have.
#[test]
fn podman_starts_in_a_group_of_its_own_with_brokerd_s_environment() {
    let home = std::env::var("HOME").unwrap_or_default();
    let tool = format!(
        r#"[ "$(cut -d' ' -f5 /proc/$$/stat)" = "$$" ] && echo own-group
[ -n "$PATH" ] && echo has-path
[ "$HOME" = '{home}' ] && echo same-home
exit 0"#
    );
    let case = Case::new("hooks", &tool);
    let got = case.runtime().run(&case.spec(ToolName::Shell));
    assert_eq!(got, ok("own-group\nhas-path\nsame-home\n", false));
}

/// `max_staged_bytes` holds during a call: a call whose container writes its layer past the
/// bytes it may hold is stopped (docs/design.md#staged-writes-and-owners), the real directory
/// untouched.
#[test]
fn a_staged_call_that_passes_the_bound_is_stopped() {
    use brokerd::runner::StageMount;
    let dirs = tempfile::tempdir().expect("tempdir");
    let base = std::fs::canonicalize(dirs.path()).expect("canonical");
    let (real, layer) = (base.join("real"), base.join("layer"));
    let (upper, work) = (layer.join("upper"), layer.join("work"));
    for d in [&real, &upper, &work] {
        std::fs::create_dir_all(d).expect("dir");
    }
    // The fake podman writes where the container's overlay would: the layer.
    let case = Case::new(
        "stagedfull",
        &format!(
            "for i in $(seq 1 60); do head -c 262144 /dev/zero > {}/f$i; sleep 0.1; done; echo done",
            upper.display()
        ),
    );
    let mut spec = case.spec(ToolName::Shell);
    let mut m = Mount::at(&real, true).expect("a directory");
    m.stage = Some(StageMount {
        upper: upper.clone(),
        work,
        merged: layer.join("merged"),
    });
    spec.mounts = vec![m];
    spec.timeout = Duration::from_secs(20);
    spec.staged_limit = Some(1 << 20);
    let started = Instant::now();
    assert_eq!(case.runtime().run(&spec), failed(Failure::StagedFull));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(std::fs::read_dir(&real).expect("real").count(), 0);
}
