//! The two preflights (docs/design.md#preflight-and-poisoning): what each runs and how its answer is judged. The
//! broker decides when one runs and `probe` keeps its outcome; this module knows what a
//! working sandbox looks like, and asks the runner for what differs between backends.
//!
//! - The start-up preflight: a real minimal shell sandbox, in the default working directory
//!   with a writable /tmp, every directory a grant may write mounted as a call would mount
//!   it, and (with `enforce_limits`) its own pids and memory limits read back.
//! - The network preflight, before the first http_fetch: a proxy allowed only
//!   `allowed.invalid`, and a fetch of [`NETWORK_PREFLIGHT_URL`] through it, which the proxy
//!   must refuse by name. No name is resolved and no packet leaves.
//!
//! The refusal is told by curl's words for a SOCKS5 failure: `Can't complete SOCKS5 connection`,
//! or `cannot complete` from curl 8.9 on (as on NixOS). `HOME` and `TMPDIR` are checked on both
//! backends: bwrap's argument list sets them for toolkit, and toolkit sets them for every program
//! it starts, since Podman's argument list sets no environment and a container gets `HOME=/` and
//! no `TMPDIR`.

use proto::ident::Ident;
use std::time::Duration;

use proto::tools::{ToolName, DEFAULT_CWD};

use crate::audit;
use crate::config::{self, RunnerConfig};
use crate::policy::Policy;
use crate::probe::Preflight;
use crate::runbook;
use crate::runner::{Egress, Mount, RunError, RunOutput, RunSpec, Runner};

/// What the network preflight fetches: a name under `.invalid` (RFC 6761), never resolved.
pub const NETWORK_PREFLIGHT_URL: &str = "https://preflight.invalid/";

/// How a preflight's sandbox ended: the runner's answer, or the task that ran it failing.
pub type Outcome = Result<Result<RunOutput, RunError>, String>;

/// The start-up preflight: the call it runs and the answer it expects.
#[derive(Debug, Clone)]
pub struct Sandbox {
    pub spec: RunSpec,
    expected: String,
    home_and_tmpdir: bool,
    workspaces: usize,
    /// The limit files read back (with `enforce_limits`).
    limits: Option<Vec<&'static str>>,
}

impl Sandbox {
    /// The preflight for `rc` (`None`: no `[runner]`, defaults only) on `runner`, with
    /// `workspaces` mounted writable.
    pub fn new(rc: Option<&RunnerConfig>, runner: &dyn Runner, workspaces: Vec<Mount>) -> Sandbox {
        let limit = Duration::from_millis(rc.map_or(30_000, |r| r.shell_ms));
        // With enforce_limits the sandbox reads its own limits back (cgroup v2 files): where
        // they would be ignored, the files are absent or say "max", and calls stay unavailable.
        let limits = rc.filter(|r| r.enforce_limits).map(|r| {
            runner.limit_files().unwrap_or_else(|| {
                vec![
                    ("pids.max", r.pids.to_string()),
                    (
                        "memory.max",
                        config::memory_bytes(&r.memory).unwrap_or(0).to_string(),
                    ),
                ]
            })
        });
        let mut command = String::from("pwd && test -w /tmp && echo tmp-writable");
        let mut expected = format!("{DEFAULT_CWD}\ntmp-writable\n");
        let home_and_tmpdir = runner.sets_home_and_tmpdir();
        if home_and_tmpdir {
            command.push_str(" && echo \"home=$HOME tmpdir=$TMPDIR\"");
            expected.push_str("home=/tmp tmpdir=/tmp\n");
        }
        for dir in &workspaces {
            let quoted = shell_quote(&dir.path.to_string_lossy());
            command.push_str(&format!(" && test -w {quoted} && echo writable"));
            expected.push_str("writable\n");
        }
        if let Some(files) = &limits {
            command.push_str(" && cat");
            for (file, value) in files {
                command.push_str(&format!(" /sys/fs/cgroup/{file}"));
                expected.push_str(&format!("{value}\n"));
            }
        }
        let input =
            serde_json::to_vec(&proto::tools::ShellArgs { command, cwd: None }).unwrap_or_default();
        Sandbox {
            workspaces: workspaces.len(),
            spec: RunSpec {
                session: Ident::fixed("preflight"),
                call: Ident::fixed("preflight"),
                tool: ToolName::Shell,
                input,
                mounts: workspaces,
                egress: None,
                timeout: limit,
                staged_limit: None,
                toolset: None,
                limits: Default::default(),
                cache: None,
            },
            expected,
            home_and_tmpdir,
            limits: limits.map(|files| files.iter().map(|(f, _)| *f).collect()),
        }
    }

    /// Whether the sandbox answered as a working one does.
    pub fn judge(&self, outcome: Outcome) -> Preflight {
        let expected = &self.expected;
        match outcome {
            Ok(Ok(RunOutput { content, .. })) if content.starts_with(expected) => {
                Preflight::passed(format!(
                    "a sandbox ran in /tmp with a writable /tmp{}{}{}",
                    if self.home_and_tmpdir {
                        ", HOME and TMPDIR /tmp"
                    } else {
                        ""
                    },
                    match self.workspaces {
                        0 => String::new(),
                        n => format!(
                            ", {n} writable grant director{}",
                            if n == 1 { "y" } else { "ies" }
                        ),
                    },
                    match &self.limits {
                        Some(files) => format!(" and read back its limits ({})", files.join(", ")),
                        None => " (limits not enforced)".to_string(),
                    }
                ))
            }
            Ok(Ok(RunOutput { content, .. })) => Preflight::failed(format!(
                "the preflight sandbox answered {:?}, expected it to start with {expected:?}",
                audit::clip(&content)
            )),
            Ok(Err(e)) => Preflight::failed(format!("the preflight sandbox failed: {e}")),
            Err(e) => Preflight::failed(format!("the preflight task failed: {e}")),
        }
    }
}

/// The network preflight's call, for `rc`'s http_fetch time limit.
pub fn network_spec(rc: Option<&RunnerConfig>) -> RunSpec {
    let input = serde_json::to_vec(&proto::tools::HttpFetchArgs {
        url: NETWORK_PREFLIGHT_URL.into(),
    })
    .unwrap_or_default();
    let limit = rc.map_or(Duration::from_secs(30), |r| {
        r.time_limit(ToolName::HttpFetch)
    });
    RunSpec {
        session: Ident::fixed("preflight"),
        call: Ident::fixed("network"),
        tool: ToolName::HttpFetch,
        input,
        mounts: Vec::new(),
        egress: Some(Egress {
            hosts: vec!["allowed.invalid".into()],
            allow_addresses: Vec::new(),
            bounds: None,
        }),
        timeout: limit,
        staged_limit: None,
        toolset: None,
        limits: Default::default(),
        cache: None,
    }
}

/// Whether the proxy refused the fetch by name, as a working proxy path does.
pub fn judge_network(outcome: Outcome) -> Preflight {
    let prefix = format!("http_fetch: {NETWORK_PREFLIGHT_URL}: ");
    match outcome {
        Ok(Ok(RunOutput { content, .. }))
            if content.starts_with(&prefix) && content.contains("SOCKS") =>
        {
            Preflight::passed(format!(
                "the egress proxy refused a host it was not given: {}",
                content.trim_end()
            ))
        }
        Ok(Ok(RunOutput { content, .. })) => Preflight::failed(format!(
            "the proxy path answered {:?}, not the proxy's refusal",
            audit::clip(&content)
        )),
        Ok(Err(e)) => Preflight::failed(format!("the proxy path failed: {e}")),
        Err(e) => Preflight::failed(format!("the network preflight task failed: {e}")),
    }
}

/// What a toolset's check prints when the toolset holds what every toolset must
/// (docs/design.md#toolsets): toolkit's version, then a word from busybox's own `sh`, the
/// shell the classifier reads.
fn toolset_expected() -> String {
    format!("{}\nbusybox-sh\n", proto::tools::TOOLKIT_VERSION)
}

/// The check of a toolset: a shell call on it (the runner builds it).
pub use crate::runner::toolset_spec;

/// Whether a toolset's check found toolkit of brokerd's version and busybox's `sh`.
pub fn judge_toolset(outcome: Outcome) -> Preflight {
    let expected = toolset_expected();
    match outcome {
        Ok(Ok(RunOutput { content, .. })) if content.starts_with(&expected) => {
            Preflight::passed(format!(
                "toolkit {} and busybox's sh answered",
                proto::tools::TOOLKIT_VERSION
            ))
        }
        Ok(Ok(RunOutput { content, .. })) => Preflight::failed(format!(
            "the toolset's sandbox answered {:?}, expected it to start with {expected:?} (toolkit of brokerd's version, busybox's sh)",
            audit::clip(&content)
        )),
        Ok(Err(e)) => Preflight::failed(format!("the toolset's sandbox failed: {e}")),
        Err(e) => Preflight::failed(format!("the toolset's check failed: {e}")),
    }
}

/// Marks a failed preflight terminal when the runner remembered why it can never start.
pub fn settle(runner: &dyn Runner, p: &mut Preflight) {
    if p.ok {
        return;
    }
    if let Some(why) = runner.terminal_failure() {
        p.terminal = true;
        p.detail = format!("{}; remembered until restart: {why}", p.detail);
    }
}

/// Every directory some grant may write, once each, in config order.
pub fn writable_grant_dirs(policy: &Policy) -> Vec<Mount> {
    let mut dirs: Vec<Mount> = Vec::new();
    for grant in policy.grants() {
        for r in grant.workspace.roots().iter().filter(|r| r.write) {
            if !dirs.iter().any(|d| d.path == r.path) {
                dirs.push(Mount {
                    path: r.path.clone(),
                    write: true,
                    id: r.id,
                    protect: false,
                    stage: None,
                });
            }
        }
    }
    dirs
}

/// A preflight's outcome in the journal, with when it is tried again.
pub fn log(which: &str, p: &Preflight, next_try: Option<Duration>) {
    match (p.ok, next_try) {
        (true, _) => tracing::info!(detail = p.detail, "{which} passed"),
        (false, Some(wait)) => tracing::error!(
            detail = p.detail,
            next_try_in_s = wait.as_secs(),
            "{which} failed; tried again by a call in {}s; until then calls that need it answer unavailable; see {}",
            wait.as_secs(),
            runbook::RUNNER_UNAVAILABLE
        ),
        (false, None) => tracing::error!(
            detail = p.detail,
            "{which} failed for good: calls that need it answer unavailable until brokerd restarts; see {}",
            runbook::RUNNER_UNAVAILABLE
        ),
    }
}

/// `s` in single quotes for sh, each `'` written as `'\''`.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::NoRunner;

    fn ran(content: &str) -> Outcome {
        Ok(Ok(RunOutput {
            content: content.into(),
            truncated: false,
        }))
    }

    /// A runner whose sandboxes set HOME and TMPDIR, as bwrap's do.
    struct SetsHome;
    impl Runner for SetsHome {
        fn run(&self, _spec: &RunSpec) -> Result<RunOutput, RunError> {
            Err(RunError::Unavailable(
                crate::runner::Unavailable::RunnerUnavailable,
            ))
        }
        fn sets_home_and_tmpdir(&self) -> bool {
            true
        }
    }

    /// (runner sets HOME, sandbox output, passes)
    #[test]
    fn the_sandbox_preflight_asks_what_the_runner_promises() {
        let table: [(&dyn Runner, &str, bool); 5] = [
            (&NoRunner, "/tmp\ntmp-writable\n", true),
            (&NoRunner, "/\ntmp-writable\n", false),
            (
                &SetsHome,
                "/tmp\ntmp-writable\nhome=/tmp tmpdir=/tmp\n",
                true,
            ),
            (&SetsHome, "/tmp\ntmp-writable\n", false),
            (&SetsHome, "/tmp\ntmp-writable\nhome=/ tmpdir=/tmp\n", false),
        ];
        for (runner, content, ok) in table {
            let probe = Sandbox::new(None, runner, Vec::new());
            assert_eq!(probe.judge(ran(content)).ok, ok, "{content:?}");
        }
        let detail = Sandbox::new(None, &SetsHome, Vec::new())
            .judge(ran("/tmp\ntmp-writable\nhome=/tmp tmpdir=/tmp\n"))
            .detail;
        assert_eq!(
            detail,
            "a sandbox ran in /tmp with a writable /tmp, HOME and TMPDIR /tmp (limits not enforced)"
        );
    }

    /// A runner that sets swap and CPU as well, as bwrap's cgroups do.
    struct SetsAll;
    impl Runner for SetsAll {
        fn run(&self, _spec: &RunSpec) -> Result<RunOutput, RunError> {
            Err(RunError::Unavailable(
                crate::runner::Unavailable::RunnerUnavailable,
            ))
        }
        fn limit_files(&self) -> Option<Vec<(&'static str, String)>> {
            Some(
                crate::runner::cgroup::CgroupLimits::new(512 << 20, 128)
                    .files()
                    .to_vec(),
            )
        }
    }

    /// With enforce_limits every knob the runner sets is read back: one that says "max" (a
    /// swap limit the host ignored) fails the preflight; without enforce_limits none is read.
    #[test]
    fn the_preflight_reads_back_every_limit_the_runner_sets() {
        let text = "[runner]\nimage = \"sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"\nenforce_limits = true\nmemory = \"512m\"\npids = 128\n";
        let cfg = crate::config::parse(text, "t.toml").expect("config");
        let rc = cfg.runner.as_ref();
        let bytes = (512u64 << 20).to_string();
        let all = Sandbox::new(rc, &SetsAll, Vec::new());
        let cmd = String::from_utf8_lossy(&all.spec.input).into_owned();
        assert!(
            cmd.contains("cat /sys/fs/cgroup/pids.max /sys/fs/cgroup/memory.max /sys/fs/cgroup/memory.swap.max /sys/fs/cgroup/cpu.max"),
            "{cmd}"
        );
        let good = format!("/tmp\ntmp-writable\n128\n{bytes}\n0\n100000 100000\n");
        let judged = all.judge(ran(&good));
        assert!(judged.ok, "{}", judged.detail);
        assert!(
            judged
                .detail
                .ends_with("read back its limits (pids.max, memory.max, memory.swap.max, cpu.max)"),
            "{}",
            judged.detail
        );
        let swap_ignored = format!("/tmp\ntmp-writable\n128\n{bytes}\nmax\n100000 100000\n");
        assert!(!all.judge(ran(&swap_ignored)).ok);
        // A runner that names none: the configured pids and memory only.
        let two = Sandbox::new(rc, &NoRunner, Vec::new());
        assert!(
            two.judge(ran(&format!("/tmp\ntmp-writable\n128\n{bytes}\n")))
                .ok
        );
        let text = "[runner]\nimage = \"sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"\nenforce_limits = false\n";
        let cfg = crate::config::parse(text, "t.toml").expect("config");
        let none = Sandbox::new(cfg.runner.as_ref(), &SetsAll, Vec::new());
        assert!(!String::from_utf8_lossy(&none.spec.input).contains("/sys/fs/cgroup"));
    }

    #[test]
    fn the_network_preflight_passes_only_on_the_proxy_s_refusal() {
        let refusal = "http_fetch: https://preflight.invalid/: curl: (97) Can't complete SOCKS5 connection to preflight.invalid. (2)\n";
        assert!(judge_network(ran(refusal)).ok);
        assert!(!judge_network(ran("http_fetch: https://preflight.invalid/: 200 OK\n")).ok);
        assert!(!judge_network(Err("panicked".into())).ok);
        let spec = network_spec(None);
        assert_eq!(
            spec.egress.map(|e| e.hosts),
            Some(vec!["allowed.invalid".into()])
        );
    }

    /// Only toolkit of brokerd's version and busybox's sh pass a toolset's check.
    #[test]
    fn a_toolset_passes_only_with_toolkit_of_brokerd_s_version_and_busybox() {
        let v = proto::tools::TOOLKIT_VERSION;
        let table: [(String, bool); 5] = [
            (format!("{v}\nbusybox-sh\n\n[exit 0]"), true),
            // Another toolkit's version, or toolkit with no version subcommand.
            ("0.0.0-other\nbusybox-sh\n\n[exit 0]".into(), false),
            (
                "toolkit: unknown subcommand \"version\"\n\n[exit 2]".into(),
                false,
            ),
            // Another shell than busybox's.
            (format!("{v}\n\n[exit 0]"), false),
            (String::new(), false),
        ];
        for (content, ok) in table {
            assert_eq!(judge_toolset(ran(&content)).ok, ok, "{content:?}");
        }
        let failed = Ok(Err(RunError::Unavailable(
            crate::runner::Unavailable::RunnerUnavailable,
        )));
        assert!(!judge_toolset(failed).ok);
        let t = config::Toolset {
            name: "c".into(),
            image: String::new(),
            tree: Some("/srv/c".into()),
            store_paths: None,
        };
        let spec = toolset_spec(None, &t);
        assert_eq!(spec.toolset, Some(t));
        let cmd = String::from_utf8_lossy(&spec.input).into_owned();
        assert!(cmd.contains("/bin/toolkit version"), "{cmd}");
    }

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("/w/it's"), "'/w/it'\\''s'");
    }
}
