//! The Podman runtime against a fake `podman` (seed 003 section 9): a bash script that records
//! its arguments and standard input and acts out the case a test wrote for it. No real podman
//! runs and no packet leaves the machine.
//!
//! One script serves every test. It is written once, before any test starts a process, because
//! executing a file that another thread's fork still holds open for writing fails with ETXTBSY.
//! Each test's behaviour lives in files the script sources from `<root>/<session>/`, found from
//! the container name `boxmaker-<session>-<call>-<n>` in its arguments.

// A test: a setup step that fails is the test failing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use brokerd::config;
use brokerd::runner::podman::PodmanRuntime;
use brokerd::runner::{
    Cleared, Egress, Failure, Mount, Reply, RunError, RunOutput, RunSpec, Runner, Unavailable,
};
use proto::tools::ToolName;

use crate::common;

const IMAGE: &str = "localhost/boxmaker-tools@sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
/// Short limits keep the suite fast; the bound is what "returns promptly" may take on a busy
/// machine.
const LIMIT: Duration = Duration::from_millis(300);
const HELPER_LIMIT: Duration = Duration::from_millis(300);
const EGRESS_START_MS: u64 = 400;
const SLACK: Duration = Duration::from_secs(3);
const CAP: usize = 1000;

const FAKE_PODMAN: &str = r#"#!/bin/sh
# Fake podman: record the call, then act out <root>/<session>/<step>.sh.
root='@ROOT@'
name=""
egress_dir=""
for a in "$@"; do
  case "$a" in
    --name=*) name="${a#--name=}" ;;
    --volume=*:/run/egress:rw) egress_dir="${a#--volume=}"; egress_dir="${egress_dir%:/run/egress:rw}" ;;
  esac
done
[ -n "$name" ] || for a in "$@"; do name="$a"; done
s="${name#boxmaker-}"
s="${s%%-*}"
d="$root/$s"
printf '%s\n' "$*" >> "$d/calls"
case "$1" in
  run)
    if [ "$2" = "-d" ]; then
      printf '%s\n' "$@" > "$d/egress.args"
      . "$d/egress.sh"
    else
      printf '%s\n' "$@" > "$d/tool.args"
      . "$d/tool.sh"
    fi ;;
  kill) [ -f "$d/kill.sh" ] && . "$d/kill.sh" ;;
  rm) [ -f "$d/rm.sh" ] && . "$d/rm.sh" ;;
  ps) [ -f "$root/ps.sh" ] && . "$root/ps.sh" ;;
  container) [ -f "$d/exists.sh" ] && . "$d/exists.sh" ;;
esac
exit 0
"#;

/// The proxy's usual behaviour: make the socket in the mounted directory.
const PROXY_STARTS: &str = r#"touch "$egress_dir/egress.sock""#;

fn fake_podman() -> &'static Path {
    static FAKE: OnceLock<PathBuf> = OnceLock::new();
    FAKE.get_or_init(|| {
        let root = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("fake-podman-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).expect("fake podman root");
        let script = root.join("podman");
        let text = FAKE_PODMAN.replace("@ROOT@", &root.display().to_string());
        std::fs::write(&script, text).expect("write fake podman");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))
            .expect("chmod fake podman");
        script
    })
}

/// One test's case: its directory of behaviour and records, and a home for egress dirs.
struct Case {
    session: &'static str,
    dir: PathBuf,
    home: tempfile::TempDir,
}

impl Case {
    /// `session` has no `-`, so the script can find it in the container name.
    fn new(session: &'static str, tool_sh: &str) -> Case {
        let dir = fake_podman().parent().expect("root").join(session);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).expect("case dir");
        std::fs::write(dir.join("tool.sh"), tool_sh).expect("tool.sh");
        std::fs::write(dir.join("egress.sh"), PROXY_STARTS).expect("egress.sh");
        Case {
            session,
            dir,
            home: tempfile::tempdir().expect("home"),
        }
    }

    fn with(self, step: &str, sh: &str) -> Case {
        std::fs::write(self.dir.join(format!("{step}.sh")), sh).expect("step");
        self
    }

    fn runtime_with(&self, podman: &Path) -> PodmanRuntime {
        let text = format!(
            "[runner]\nimage = \"{IMAGE}\"\npodman = \"{}\"\noutput_cap = {CAP}\negress_start_ms = {EGRESS_START_MS}\nhome = \"{}\"\n",
            podman.display(),
            self.home.path().display()
        );
        let cfg = config::parse(&text, "test.toml").unwrap_or_else(|e| panic!("{e}"));
        PodmanRuntime::new(&cfg.runner.expect("runner")).with_helper_timeout(HELPER_LIMIT)
    }

    fn runtime(&self) -> PodmanRuntime {
        self.runtime_with(fake_podman())
    }

    fn spec(&self, tool: ToolName) -> RunSpec {
        let egress = (tool == ToolName::HttpFetch).then(|| Egress {
            hosts: vec!["docs.example.org".into()],
            allow_addresses: vec![],
        });
        RunSpec {
            session: proto::ident::Ident::fixed(self.session),
            call: proto::ident::Ident::fixed("c1"),
            tool,
            input: br#"{"command":"echo hi"}"#.to_vec(),
            mounts: vec![],
            egress,
            timeout: LIMIT,
        }
    }

    /// Each podman invocation as one line: its arguments joined by spaces.
    fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.join("calls"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The podman verbs called, `run -d` spelt `proxy` and the tool's `run` spelt `run`.
    fn verbs(&self) -> Vec<String> {
        self.calls()
            .iter()
            .map(|c| {
                let words: Vec<&str> = c.split(' ').collect();
                match words.as_slice() {
                    ["run", "-d", ..] => "proxy".to_owned(),
                    ["rm", "-f", name] if name.ends_with("-egress") => "rm -f egress".to_owned(),
                    ["rm", "-f", _] => "rm -f".to_owned(),
                    [verb, ..] => (*verb).to_owned(),
                    [] => String::new(),
                }
            })
            .collect()
    }

    fn record(&self, file: &str) -> Vec<u8> {
        std::fs::read(self.dir.join(file)).unwrap_or_default()
    }

    /// What is left under `<home>/run/egress/`.
    fn egress_dirs(&self) -> Vec<PathBuf> {
        match std::fs::read_dir(self.home.path().join("run/egress")) {
            Ok(entries) => entries.filter_map(|e| e.ok().map(|e| e.path())).collect(),
            Err(_) => vec![],
        }
    }
}

type Answer = Result<RunOutput, RunError>;

fn ok(content: &str, truncated: bool) -> Result<RunOutput, RunError> {
    Ok(RunOutput {
        content: content.into(),
        truncated,
    })
}

fn failed(f: Failure) -> Result<RunOutput, RunError> {
    Err(RunError::Failed(f))
}
const UNAVAILABLE: Result<RunOutput, RunError> =
    Err(RunError::Unavailable(Unavailable::RunnerUnavailable));
/// The way out could not be made: unavailable, with the sandbox itself not known to be down.
const EGRESS_UNAVAILABLE: Result<RunOutput, RunError> =
    Err(RunError::Unavailable(Unavailable::EgressUnavailable));

/// Seed 003 section 6's exit-code table, one case per row.
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
    assert_eq!(case.verbs(), ["run", "kill", "rm -f"]);
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
    assert_eq!(case.verbs(), ["run", "kill", "rm -f"]);
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
    assert_eq!(case.verbs(), ["run", "kill", "rm -f"]);
    // DESIGN.md "Runners": a sandbox not confirmed dead turns http_fetch off until restart.
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
fn http_fetch_runs_behind_its_proxy_and_cleans_up() {
    let tool = r#"[ -e "$egress_dir/egress.sock" ] && echo fetched
stat -c %a "$egress_dir" > "$d/mode""#;
    let case = Case::new("fetch", tool);
    let rt = case.runtime();
    let spec = case.spec(ToolName::HttpFetch);
    assert_eq!(rt.run(&spec), ok("fetched\n", false));
    assert_eq!(case.verbs(), ["proxy", "run", "rm -f egress"]);
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
    let case = Case::new("early", "echo fetched");
    let rt = case.runtime();
    let spec = case.spec(ToolName::HttpFetch);
    let mut seen = None;
    rt.run_replying(
        &spec,
        Reply::new(|answer| seen = Some((answer, case.verbs(), case.egress_dirs().len()))),
    );
    let (answer, verbs, dirs) = seen.expect("an answer");
    assert_eq!(answer, ok("fetched\n", false));
    assert_eq!(verbs, ["proxy", "run"]);
    assert_eq!(dirs, 1);
    assert_eq!(case.verbs(), ["proxy", "run", "rm -f egress"]);
    assert_eq!(case.egress_dirs(), Vec::<PathBuf>::new());
}

/// Whatever happens to the call, the proxy is removed and its directory is gone.
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
    let cases: Vec<Row> = vec![
        (
            "eok",
            PROXY_STARTS,
            "echo body",
            ok("body\n", false),
            vec!["proxy", "run", "rm -f egress"],
        ),
        (
            "efail",
            PROXY_STARTS,
            "echo oops; exit 2",
            failed(Failure::CouldNotRun),
            vec!["proxy", "run", "rm -f egress"],
        ),
        (
            "ecurl",
            PROXY_STARTS,
            "echo 'http_fetch: x: refused'; exit 1",
            ok("http_fetch: x: refused\n", false),
            vec!["proxy", "run", "rm -f egress"],
        ),
        (
            "ehang",
            PROXY_STARTS,
            "exec sleep 30",
            failed(Failure::TimedOut),
            vec!["proxy", "run", "kill", "rm -f", "rm -f egress"],
        ),
        (
            "eflood",
            PROXY_STARTS,
            "exec yes",
            ok(&"y\n".repeat(CAP / 2), true),
            vec!["proxy", "run", "kill", "rm -f", "rm -f egress"],
        ),
        (
            "eno127",
            PROXY_STARTS,
            "echo 'podman: not found' >&2; exit 127",
            UNAVAILABLE,
            vec!["proxy", "run", "rm -f egress"],
        ),
        (
            "enosock",
            ":",
            "echo never",
            EGRESS_UNAVAILABLE,
            vec!["proxy", "rm -f egress"],
        ),
        (
            "eproxy125",
            "echo 'Error: pasta: unsupported network' >&2; exit 125",
            "echo never",
            EGRESS_UNAVAILABLE,
            vec!["proxy", "rm -f egress"],
        ),
        (
            "eproxyhang",
            "exec sleep 30",
            "echo never",
            EGRESS_UNAVAILABLE,
            vec!["proxy", "rm -f egress"],
        ),
        // The tool starts once the socket exists, while `run -d` is still finishing: this
        // `run -d` ends once the tool has looked (or after 0.3 s, within the proxy's budget).
        (
            "eearly",
            r#"touch "$egress_dir/egress.sock"
i=0; while [ ! -e "$d/tool-looked" ] && [ $i -lt 30 ]; do sleep 0.01; i=$((i+1)); done
touch "$d/proxy-done""#,
            r#"[ -e "$d/proxy-done" ] && echo after || echo before; touch "$d/tool-looked""#,
            ok("before\n", false),
            vec!["proxy", "run", "rm -f egress"],
        ),
        // A `run -d` that fails, or never ends, after its socket appeared is a proxy that
        // did not start, whatever the tool did meanwhile.
        (
            "eproxylate",
            r#"touch "$egress_dir/egress.sock"; echo 'Error: late' >&2; exit 125"#,
            "echo body",
            EGRESS_UNAVAILABLE,
            vec!["proxy", "run", "rm -f egress"],
        ),
        (
            "eproxystuck",
            r#"touch "$egress_dir/egress.sock"; exec sleep 30"#,
            "echo body",
            EGRESS_UNAVAILABLE,
            vec!["proxy", "run", "rm -f egress"],
        ),
    ];
    for (session, proxy, tool, want, verbs) in cases {
        let case = Case::new(session, tool).with("egress", proxy);
        let start = Instant::now();
        let got = case.runtime().run(&case.spec(ToolName::HttpFetch));
        let took = start.elapsed();
        assert_eq!(got, want, "{session}");
        assert_eq!(case.verbs(), verbs, "{session}");
        assert_eq!(case.egress_dirs(), Vec::<PathBuf>::new(), "{session}");
        let bound = Duration::from_millis(EGRESS_START_MS) + LIMIT + 2 * HELPER_LIMIT + SLACK;
        assert!(took < bound, "{session}: took {took:?}");
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

/// DESIGN.md "Service": the sweep finds leftovers by label (and, rootless, by user), never by
/// their names: a container of 64-character session and call ids is removed like any other.
#[test]
fn the_sweep_removes_labelled_containers_by_id_whatever_their_names() {
    const ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let case = Case::new(ID, "true");
    let long = format!("boxmaker-{}-{}-1", "s".repeat(64), "c".repeat(64));
    // The listing podman would give for the format asked: IDs, or the (long) names.
    let ps = format!(
        "case \"$*\" in\n  *'{{{{.ID}}}}'*) printf '%s\\n' {ID} 'not an id' ;;\n  *) printf '%s\\n' {long} {long}-egress ;;\nesac\n"
    );
    std::fs::write(fake_podman().with_file_name("ps.sh"), ps).expect("ps.sh");
    let rt = case.runtime();
    let egress = rt.egress_dir(&long);
    std::fs::create_dir_all(&egress).expect("a left egress directory");
    assert_eq!(
        rt.sweep().expect("sweep"),
        2,
        "the container and the directory"
    );
    assert_eq!(case.calls(), [format!("kill {ID}"), format!("rm -f {ID}")]);
    assert!(case.egress_dirs().is_empty());
}

/// DESIGN.md "Runners": a proxy whose `rm -f` failed is poison unless podman confirms it is
/// gone (`container exists` exits 1); still there, or no answer, turns http_fetch off.
#[test]
fn a_failed_rm_poisons_unless_the_container_is_confirmed_gone() {
    // (session, what `container exists` does, poisoned)
    let cases = [
        ("rmgone", "exit 1", false),
        ("rmthere", "exit 0", true),
        ("rmerror", "echo 'cannot connect' >&2; exit 125", true),
    ];
    for (session, exists, poisoned) in cases {
        let case = Case::new(session, "echo fetched")
            .with("rm", "echo 'rm failed' >&2; exit 1")
            .with("exists", exists);
        let rt = case.runtime();
        assert_eq!(
            rt.run(&case.spec(ToolName::HttpFetch)),
            ok("fetched\n", false)
        );
        assert_eq!(
            case.verbs(),
            ["proxy", "run", "rm -f egress", "container"],
            "{session}"
        );
        assert_eq!(rt.poisoned(), poisoned, "{session}");
        if poisoned {
            assert_eq!(rt.run(&case.spec(ToolName::HttpFetch)), EGRESS_UNAVAILABLE);
        }
    }
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
    assert_eq!(case.verbs(), ["run", "kill", "rm -f"]);

    let case = Case::new("gatefetch", "echo fetched");
    let (answer, _) = run(&case, &case.spec(ToolName::HttpFetch), false);
    assert_eq!(answer, failed(Failure::CouldNotRun));
    assert_eq!(
        case.verbs(),
        Vec::<String>::new(),
        "no proxy before the decision"
    );
    assert_eq!(case.egress_dirs(), Vec::<PathBuf>::new());
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
    assert_eq!(
        case.verbs(),
        ["proxy", "run", "kill", "rm -f", "rm -f egress"]
    );

    // On disk only after the time limit: nothing started, and the answer comes at the limit.
    let case = Case::new("toolate", "echo fetched");
    let (answer, took) = run(&case, limit + Duration::from_millis(300));
    assert_eq!(answer, failed(Failure::CouldNotRun));
    assert!(
        took >= limit && took < limit + Duration::from_millis(300),
        "took {took:?}"
    );
    assert_eq!(
        case.verbs(),
        Vec::<String>::new(),
        "nothing before the decision"
    );
    assert_eq!(case.egress_dirs(), Vec::<PathBuf>::new());
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
}
