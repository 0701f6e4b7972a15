//! The fake `podman` the Podman runtime's tests run against (docs/design.md#testing): a shell
//! script that records its arguments and standard input and acts out the case a test wrote
//! for it. No real podman runs and no packet leaves the machine.
//!
//! One script serves every test. It is written once, before any test starts a process, because
//! executing a file that another thread's fork still holds open for writing fails with ETXTBSY.
//! Each test's behaviour lives in files the script sources from `<root>/<session>/`, found from
//! the container name `boxmaker-<session>-<call>-<n>` in its arguments.

// A test: a setup step that fails is the test failing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use brokerd::config;
use brokerd::runner::podman::PodmanRuntime;
use brokerd::runner::{Egress, Failure, RunError, RunOutput, RunSpec, Unavailable};
use proto::tools::ToolName;

use crate::common;

/// Short limits keep the suite fast; the bound is what "returns promptly" may take on a busy
/// machine.
pub const LIMIT: Duration = Duration::from_millis(1000);
pub const HELPER_LIMIT: Duration = Duration::from_millis(1000);
pub const EGRESS_START_MS: u64 = 1000;
pub const SLACK: Duration = Duration::from_secs(3);
pub const CAP: usize = 1000;

const FAKE_PODMAN: &str = r#"#!/bin/sh
# Fake podman: record the call, then act out <root>/<session>/<step>.sh.
root='@ROOT@'
@ARGS@
[ -n "$name" ] || for a in "$@"; do name="$a"; done
case "$1" in
  # `image exists localhost/<session>@sha256:...`: the case's image names it.
  image) s="${name#localhost/}"; s="${s%%@*}" ;;
  *) s="${name#boxmaker-}"; s="${s%%-*}" ;;
esac
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
  # Gone unless the case says otherwise.
  container) [ -f "$d/exists.sh" ] && . "$d/exists.sh"; exit 1 ;;
  image) [ -f "$d/image.sh" ] && . "$d/image.sh" ;;
esac
exit 0
"#;

/// The proxy's usual behaviour: make the socket in the mounted directory.
pub const PROXY_STARTS: &str = r#"touch "$egress_dir/egress.sock""#;

pub fn fake_podman() -> &'static Path {
    static FAKE: OnceLock<PathBuf> = OnceLock::new();
    FAKE.get_or_init(|| {
        let root = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("fake-podman-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).expect("fake podman root");
        let script = root.join("podman");
        let text = common::fake_podman_script(FAKE_PODMAN);
        common::write_script(
            &script,
            &text.replace("@ROOT@", &root.display().to_string()),
        );
        script
    })
}

/// One test's case: its directory of behaviour and records, and a home for egress dirs.
pub struct Case {
    pub session: &'static str,
    pub dir: PathBuf,
    pub home: tempfile::TempDir,
}

impl Case {
    /// `session` has no `-`, so the script can find it in the container name.
    pub fn new(session: &'static str, tool_sh: &str) -> Case {
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

    pub fn with(self, step: &str, sh: &str) -> Case {
        std::fs::write(self.dir.join(format!("{step}.sh")), sh).expect("step");
        self
    }

    pub fn runtime_with(&self, podman: &Path) -> PodmanRuntime {
        let text = format!(
            "[runner]\nimage = \"{}\"\npodman = \"{}\"\noutput_cap = {CAP}\negress_start_ms = {EGRESS_START_MS}\nhome = \"{}\"\n",
            self.image(),
            podman.display(),
            self.home.path().display()
        );
        let cfg = config::parse(&text, "test.toml").unwrap_or_else(|e| panic!("{e}"));
        PodmanRuntime::new(&cfg.runner.expect("runner")).with_helper_timeout(HELPER_LIMIT)
    }

    /// `localhost/<session>@sha256:...`, so that the script finds the case of an
    /// `image exists`.
    pub fn image(&self) -> String {
        common::image(self.session)
    }

    pub fn runtime(&self) -> PodmanRuntime {
        self.runtime_with(fake_podman())
    }

    pub fn spec(&self, tool: ToolName) -> RunSpec {
        let egress = (tool == ToolName::HttpFetch).then(|| Egress {
            hosts: vec!["docs.example.org".into()],
            allow_addresses: vec![],
            bounds: None,
        });
        RunSpec {
            session: proto::ident::Ident::fixed(self.session),
            call: proto::ident::Ident::fixed("c1"),
            tool,
            input: br#"{"command":"echo hi"}"#.to_vec(),
            mounts: vec![],
            egress,
            timeout: LIMIT,
            staged_limit: None,
            toolset: None,
            limits: Default::default(),
            cache: None,
        }
    }

    /// Each podman invocation as one line: its arguments joined by spaces.
    pub fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.join("calls"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The podman verbs called, `run -d` spelt `proxy` and the tool's `run` spelt `run`. An
    /// http_fetch starts its tool container and then its proxy, and the two may reach the
    /// record in either order: the tool's is listed first.
    pub fn verbs(&self) -> Vec<String> {
        let mut verbs: Vec<String> = self
            .calls()
            .iter()
            .map(|c| {
                let words: Vec<&str> = c.split(' ').collect();
                match words.as_slice() {
                    ["run", "-d", ..] => "proxy".to_owned(),
                    ["rm", "-f", name] if name.ends_with("-egress") => "rm -f egress".to_owned(),
                    ["rm", "-f", _] => "rm -f".to_owned(),
                    ["container", "exists", "--external", name] if name.ends_with("-egress") => {
                        "exists egress".to_owned()
                    }
                    ["container", "exists", "--external", _] => "exists".to_owned(),
                    ["image", "exists", _] => "image exists".to_owned(),
                    [verb, ..] => (*verb).to_owned(),
                    [] => String::new(),
                }
            })
            .collect();
        if verbs.len() >= 2 && verbs[0] == "proxy" && verbs[1] == "run" {
            verbs.swap(0, 1);
        }
        verbs
    }

    pub fn record(&self, file: &str) -> Vec<u8> {
        std::fs::read(self.dir.join(file)).unwrap_or_default()
    }

    /// What is left under `<home>/run/egress/`.
    pub fn egress_dirs(&self) -> Vec<PathBuf> {
        match std::fs::read_dir(self.home.path().join("run/egress")) {
            Ok(entries) => entries.filter_map(|e| e.ok().map(|e| e.path())).collect(),
            Err(_) => vec![],
        }
    }
}

pub type Answer = Result<RunOutput, RunError>;

pub fn ok(content: &str, truncated: bool) -> Result<RunOutput, RunError> {
    Ok(RunOutput {
        content: content.into(),
        truncated,
    })
}

pub fn failed(f: Failure) -> Result<RunOutput, RunError> {
    Err(RunError::Failed(f))
}
pub const UNAVAILABLE: Result<RunOutput, RunError> =
    Err(RunError::Unavailable(Unavailable::RunnerUnavailable));
/// The way out could not be made: unavailable, with the sandbox itself not known to be down.
pub const EGRESS_UNAVAILABLE: Result<RunOutput, RunError> =
    Err(RunError::Unavailable(Unavailable::EgressUnavailable));
/// A staged layer could not be mounted: unavailable, with the sandbox not known to be down.
pub const LAYER_UNAVAILABLE: Result<RunOutput, RunError> =
    Err(RunError::Unavailable(Unavailable::LayerUnavailable));

/// The podman calls of an http_fetch whose tool ran to its end: the tool container, the
/// proxy, and the proxy's removal, looked at until it is gone.
pub const FETCH_RAN: [&str; 4] = ["run", "proxy", "rm -f egress", "exists egress"];
/// The podman calls of an http_fetch whose tool container was stopped: killed, removed and
/// looked at, then the proxy's removal.
pub const FETCH_STOPPED: [&str; 7] = [
    "run",
    "proxy",
    "kill",
    "rm -f",
    "exists",
    "rm -f egress",
    "exists egress",
];

impl Case {
    /// The call's tool container was made and stopped before its decision was on disk: it
    /// read nothing, and no proxy was started for it.
    pub fn assert_stopped_before_the_decision(&self) {
        assert_eq!(
            self.verbs(),
            ["run", "kill", "rm -f", "exists"],
            "no proxy before the decision"
        );
        assert_eq!(self.record("stdin"), b"");
        assert_eq!(self.egress_dirs(), Vec::<PathBuf>::new());
    }
}

/// Each line of the case's `events` file, which its scripts append to.
pub fn events(case: &Case) -> Vec<String> {
    String::from_utf8_lossy(&case.record("events"))
        .lines()
        .map(str::to_owned)
        .collect()
}
