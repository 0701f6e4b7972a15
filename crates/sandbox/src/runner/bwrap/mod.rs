//! The bubblewrap runtime (docs/design.md#the-bwrap-runner): the same calls, the same answers
//! as Podman, in a sandbox that starts in milliseconds.
//!
//! The sandbox's `/` is a tmpfs bwrap makes, holding the tools root's top-level entries
//! bound read-only and remounted read-only as a whole at the end. Binding the tools root
//! itself at `/` would leave no way to create the mount points a grant needs (`/srv/notes`)
//! on a read-only tree; the result is the same: the tools root's files, read-only, as `/`.
//!
//! Every process brokerd starts here is held by a pidfd and stopped through it; a stop that
//! cannot be confirmed poisons network work (docs/design.md#preflight-and-poisoning). Limits
//! are applied by [`super::limits`] always and by [`super::cgroup`] when a cgroup mechanism
//! exists; with `enforce_limits` a missing mechanism makes calls `unavailable`, never
//! unlimited.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::cgroup::{self, CgroupLimits, CgroupUnavailable, ChildGroup, Mechanism};
use super::egress::{self, make_private_dir, EGRESS_MOUNT, EGRESS_SOCKET};
use super::limits::ResourceLimits;
use super::mounts::{self, open_mounts};
use super::output::{
    verdict, Capture, Event, Streams, Verdict, DRAIN_GRACE, STDERR_GRACE, STDERR_KEEP,
};
use super::overlay::Overlays;
use super::pidfd::{Pidfd, Stopped, KILL_CONFIRM};
use super::protected::{Held, Over, Protector};
use super::spawn::{self, find_program, Io, PreExec, Spawn};
use super::trouble::Missing;
use super::{
    dies_with_brokerd, mount_changed, not_cleared, Cleared, Deadlines, Egress, Failure, Ran, Reply,
    RunError, RunOutput, RunSpec, Runner, Settling, Steps, SweepError,
};
use super::{reaper, seccomp};
use boxmaker_config::{memory_bytes, BwrapConfig, CgroupMode, RunnerConfig, Toolset};

mod argv;
mod placement;
mod sandbox;
mod sweep;
#[cfg(test)]
mod tests;

pub use argv::{userns_probe, RootEntry, RootLayout};
use placement::{drop_placement, Placement};
use sandbox::{ProxyGuard, Sandbox};
use sweep::sweep_sandboxes;

/// The runbook entry every `unavailable` line of this runtime ends with.
pub const RUNBOOK: &str = proto::runbook::BWRAP_UNAVAILABLE;
/// The size of the sandbox's `/tmp`, as Podman's `--tmpfs=/tmp:...,size=64m`.
pub const TMP_SIZE: u64 = 64 * 1024 * 1024;
/// The egress proxy's limits, as Podman's `--memory=128m --pids-limit=64`.
pub const PROXY_MEMORY: u64 = 128 * 1024 * 1024;
pub const PROXY_PIDS: u32 = 64;
/// Used only if `memory` somehow does not parse (config::load rejects that).
const FALLBACK_MEMORY: u64 = 512 * 1024 * 1024;
/// Entries of the tools root the sandbox makes for itself: mount points, empty in the image.
const OWN_MOUNTS: [&str; 5] = ["dev", "proc", "run", "sys", "tmp"];
/// The host file the proxy resolves names with (docs/design.md#the-egress-proxy).
const RESOLV_CONF: &str = "/etc/resolv.conf";

/// Numbers the sandboxes of this brokerd process (the `<n>` of docs/design.md#the-podman-runner).
static SANDBOXES: AtomicU64 = AtomicU64::new(0);

/// Why a sandbox can never start on this host as configured
/// (docs/design.md#preflight-and-poisoning): remembered, so later calls answer `unavailable`
/// without probing again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Terminal {
    #[error("bwrap is absent: {0}")]
    Absent(String),
    #[error("bwrap is not executable: {0}")]
    Inexecutable(String),
    #[error("the kernel refused bwrap a user namespace: {0}")]
    Refused(String),
    #[error("this kernel has no pidfd_open, so sandboxes could not be stopped safely: {0}")]
    NoPidfd(String),
    /// brokerd has no seccomp filter for this architecture: a sandbox without it would be
    /// weaker than configured, so none runs (docs/design.md#runners).
    #[error("brokerd has no seccomp filter for the {0} architecture, so a sandbox would run without one")]
    NoSeccomp(String),
}

impl Terminal {
    /// bwrap itself missing (`runner::trouble::Missing`).
    fn missing(m: Missing, detail: String) -> Terminal {
        match m {
            Missing::Absent => Terminal::Absent(detail),
            Missing::Inexecutable => Terminal::Inexecutable(detail),
        }
    }
}

/// The terminal failure of a host whose architecture has no filter `program` for it.
fn seccomp_missing(program: Option<&[seccomp::SockFilter]>) -> Option<Terminal> {
    program
        .is_none()
        .then(|| Terminal::NoSeccomp(std::env::consts::ARCH.to_string()))
}

/// What bwrap ran into; each is one `unavailable` answer (`runner::trouble`).
type Trouble = super::trouble::Trouble<Terminal>;

/// bwrap's words for its troubles; a runner's or an egress trouble points to bwrap's runbook
/// entry.
const WORDS: super::trouble::Words = super::trouble::Words {
    program: "bwrap",
    build: "build the sandbox",
    toolset: "the grant's toolset tree could not be read",
    stopped: ("sandbox", "dead"),
    proxy_gone: "stopped",
    runbook: Some(RUNBOOK),
};

/// Runs calls in bubblewrap sandboxes.
pub struct BwrapRuntime {
    bwrap: PathBuf,
    tools_root: PathBuf,
    cgroup_mode: CgroupMode,
    enforce_limits: bool,
    output_cap: usize,
    memory: u64,
    pids: u32,
    home: PathBuf,
    egress_start: Duration,
    kill_confirm: Duration,
    resolv_conf: PathBuf,
    layout: Mutex<Option<RootLayout>>,
    /// The toolsets' trees, for the sweep (docs/design.md#toolsets).
    toolset_trees: Vec<PathBuf>,
    mechanism: OnceLock<Result<Mechanism, CgroupUnavailable>>,
    terminal: Mutex<Option<Terminal>>,
    poisoned: AtomicBool,
    /// Proxy stops and cgroup removals still under way after their call's answer left.
    settling: Settling,
    /// Cgroup knobs found unsettable, as `weakened` reports them.
    weakened: Mutex<Vec<String>>,
    /// The protected targets of writable mounts (docs/design.md#protected-targets).
    protector: Protector,
    /// The namespaces staged sandboxes mount their layers in, made at the first one and kept
    /// while the runtime lives (the calls' overlays name their descriptors).
    staging: Mutex<Option<crate::runner::overlay::Staging>>,
    /// How long an overlay mounted for a staged layer's next call waits for it.
    ready_keep: Duration,
    /// The store a toolset's `store_paths` list from: `/nix/store/`.
    store: PathBuf,
}

impl BwrapRuntime {
    pub fn new(config: &RunnerConfig, bwrap: &BwrapConfig) -> BwrapRuntime {
        BwrapRuntime {
            bwrap: PathBuf::from("bwrap"),
            tools_root: bwrap.tools_root.clone(),
            cgroup_mode: bwrap.cgroup,
            enforce_limits: config.enforce_limits,
            output_cap: config.output_cap,
            memory: memory_bytes(&config.memory).unwrap_or(FALLBACK_MEMORY),
            pids: config.pids,
            home: config.home.clone(),
            egress_start: Duration::from_millis(config.egress_start_ms),
            kill_confirm: KILL_CONFIRM,
            resolv_conf: PathBuf::from(RESOLV_CONF),
            layout: Mutex::new(None),
            toolset_trees: Vec::new(),
            mechanism: OnceLock::new(),
            // Known from the start: every call, the preflight included, answers unavailable.
            terminal: Mutex::new(seccomp_missing(seccomp::program())),
            poisoned: AtomicBool::new(false),
            settling: Settling::default(),
            weakened: Mutex::new(Vec::new()),
            protector: Protector::new(config.protect),
            staging: Mutex::new(None),
            ready_keep: crate::runner::overlay::READY_KEEP,
            store: PathBuf::from(argv::STORE),
        }
    }

    /// The toolsets whose trees the sandboxes may run on, so that the sweep knows their
    /// sandboxes too (docs/design.md#toolsets).
    pub fn with_toolsets<'a>(
        mut self,
        toolsets: impl IntoIterator<Item = &'a Toolset>,
    ) -> BwrapRuntime {
        self.toolset_trees = toolsets
            .into_iter()
            .filter_map(|t| t.tree.clone())
            .collect();
        self
    }

    /// The memory (bytes) and pids of `spec`'s sandbox: its grant's, or [runner]'s.
    fn limits_of(&self, spec: &RunSpec) -> (u64, u32) {
        let memory = spec.limits.memory.as_deref().and_then(memory_bytes);
        (
            memory.unwrap_or(self.memory),
            spec.limits.pids.unwrap_or(self.pids),
        )
    }

    /// Another bwrap program (a bare name is looked up in PATH).
    pub fn with_program(mut self, bwrap: impl Into<PathBuf>) -> BwrapRuntime {
        self.bwrap = bwrap.into();
        self
    }

    /// A fixed tools-root layout instead of reading the directory (golden tests).
    pub fn with_layout(self, layout: RootLayout) -> BwrapRuntime {
        *lock(&self.layout) = Some(layout);
        self
    }

    /// Another store for the toolsets' `store_paths` (tests: a directory of their own).
    pub fn with_store(mut self, store: impl Into<PathBuf>) -> BwrapRuntime {
        self.store = store.into();
        self
    }

    /// Another resolver file for the proxy (tests: a nameserver of their own).
    pub fn with_resolv_conf(mut self, path: impl Into<PathBuf>) -> BwrapRuntime {
        self.resolv_conf = path.into();
        self
    }

    /// Another time an overlay mounted for a staged layer's next call waits for it before it
    /// is unmounted (tests: a short one).
    pub fn with_ready_keep(mut self, keep: Duration) -> BwrapRuntime {
        self.ready_keep = keep;
        self
    }

    /// Whether a sandbox or proxy that brokerd stopped could not be confirmed dead.
    pub fn poisoned(&self) -> bool {
        self.poisoned.load(Ordering::SeqCst)
    }

    /// The remembered terminal failure, if any.
    pub fn terminal(&self) -> Option<Terminal> {
        lock(&self.terminal).clone()
    }

    /// `boxmaker-<session>-<call>-<n>`, n counting sandboxes in this process.
    pub fn sandbox_name(spec: &RunSpec) -> String {
        super::sandbox_name(&SANDBOXES, spec)
    }

    /// `<home>/run/egress/<name>/`
    pub fn egress_dir(&self, name: &str) -> PathBuf {
        egress::egress_dir(&self.home, name)
    }

    /// Writes the log line of an `unavailable` answer, ending with the runbook pointer.
    fn unavailable(&self, spec: &RunSpec, trouble: Trouble, detail: &str) -> RunError {
        super::trouble::unavailable(spec, trouble, detail, &WORDS)
    }

    fn remember(&self, t: Terminal) {
        lock(&self.terminal).get_or_insert(t);
    }
}

impl Runner for BwrapRuntime {
    fn poisoned(&self) -> bool {
        BwrapRuntime::poisoned(self)
    }

    fn terminal_failure(&self) -> Option<String> {
        self.terminal().map(|t| t.to_string())
    }

    fn weakened(&self) -> Vec<String> {
        lock(&self.weakened).clone()
    }

    /// `tool_argv` sets both (`--setenv HOME /tmp --setenv TMPDIR /tmp`).
    fn sets_home_and_tmpdir(&self) -> bool {
        true
    }

    /// Every knob [`CgroupLimits`] sets, swap and CPU included: with `enforce_limits` none may
    /// be missing, whichever mechanism placed the sandbox.
    fn limit_files(&self) -> Option<Vec<(&'static str, String)>> {
        Some(CgroupLimits::new(self.memory, self.pids).files().to_vec())
    }

    /// Removes every sandbox, egress directory and sandbox cgroup a crashed brokerd left.
    fn sweep(&self) -> Result<usize, SweepError> {
        let mut parts = vec![
            sweep_sandboxes(
                &self.bwrap,
                std::iter::once(&self.tools_root).chain(&self.toolset_trees),
            ),
            egress::sweep(&self.home),
        ];
        // Probing here also prepares the delegated subtree once, at start-up.
        if let Ok(Mechanism::Delegated { root }) = self.mechanism() {
            parts.push(cgroup::sweep(root));
        }
        SweepError::outcome(parts)
    }

    fn run(&self, spec: &RunSpec) -> Result<RunOutput, RunError> {
        super::run_to_the_end(|reply| self.run_replying(spec, reply))
    }

    fn run_replying(&self, spec: &RunSpec, reply: Reply<'_>) {
        super::run_call(self, spec, reply)
    }
}

impl Steps for BwrapRuntime {
    /// The tool's sandbox (its cgroup), then the proxy (stopped through its pidfd), its cgroup
    /// and the egress directory: each confirmed when dropped, or the runtime is poisoned.
    type Leftovers<'a> = (Option<Sandbox<'a>>, Option<ProxyGuard<'a>>);

    type Terminal = Terminal;
    const WORDS: super::trouble::Words = WORDS;

    fn remembered(&self) -> Option<Terminal> {
        self.terminal()
    }

    fn settling(&self) -> &Settling {
        &self.settling
    }

    fn egress_dir_of(&self, name: &str) -> PathBuf {
        self.egress_dir(name)
    }

    fn protector(&self) -> &Protector {
        &self.protector
    }

    /// The answer leaves once the tool's bwrap has exited; its cgroup's removal and the
    /// proxy's stop come after it, still within the call.
    fn run_call<'a>(
        &'a self,
        spec: &'a RunSpec,
        held: &Held<'_>,
        cleared: &Cleared,
    ) -> Result<Ran<Self::Leftovers<'a>>, RunError> {
        // The proxy's tree is the tools root; the tool's is its toolset's, never another.
        let (layout, tool_layout) = match (self.layout(), self.layout_of(spec)) {
            (Ok(l), Ok(t)) => (l, t),
            (Err(e), _) => {
                let detail = format!("{}: {e}", self.tools_root.display());
                return Err(self.unavailable(spec, Trouble::ToolsRoot, &detail));
            }
            (_, Err(e)) => {
                let detail = format!("{}: {e}", self.root_of(spec).display());
                return Err(self.unavailable(spec, Trouble::Toolset, &detail));
            }
        };
        // What earlier sandboxes left must not count against this one's process limit.
        reaper::reap_orphans();
        let name = BwrapRuntime::sandbox_name(spec);
        let times = Deadlines::new(spec, self.egress_start);
        let mut proxy = None;
        let mut sandbox = None;
        // No way out is made before the decision is on disk.
        let way_out = match &spec.egress {
            Some(_) if !cleared.wait(times.decided()) => Err(not_cleared(spec)),
            Some(egress) => self
                .start_egress(spec, egress, &name, &layout, &times)
                .map(|guard| proxy = Some(guard)),
            None => Ok(()),
        };
        let answer = way_out.and_then(|()| {
            self.run_tool(
                spec,
                &name,
                &tool_layout,
                &mut sandbox,
                held,
                cleared,
                &times,
            )
        });
        let leftovers = (sandbox.is_some() || proxy.is_some()).then_some((sandbox, proxy));
        Ok(Ran {
            sandbox: name,
            answer,
            leftovers,
        })
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
