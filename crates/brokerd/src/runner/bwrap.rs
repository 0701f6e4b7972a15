//! The bubblewrap runtime (seed 000 5.1.3.3, BubblewrapSandbox; DESIGN.md "Runners"): the
//! same calls, the same answers as Podman, in a sandbox that starts in milliseconds.
//!
//! The sandbox's `/` is a tmpfs bwrap makes, holding the tools root's top-level entries
//! bound read-only and remounted read-only as a whole at the end. Binding the tools root
//! itself at `/` would leave no way to create the mount points a grant needs (`/srv/notes`)
//! on a read-only tree; the result is the same: the tools root's files, read-only, as `/`.
//!
//! Every process brokerd starts here is held by a pidfd and stopped through it (seed 000
//! 5.1.8); a stop that cannot be confirmed poisons network work (5.1.7). Limits are applied
//! by [`super::limits`] always and by [`super::cgroup`] when a cgroup mechanism exists;
//! with `enforce_limits` a missing mechanism makes calls `unavailable`, never unlimited.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::cgroup::{self, CgroupLimits, CgroupUnavailable, ChildGroup, Mechanism};
use super::egress::{self, make_private_dir, EGRESS_MOUNT, EGRESS_SOCKET};
use super::limits::ResourceLimits;
use super::mounts::{self, open_mounts};
use super::output::{verdict, Capture, Event, Streams, Verdict, DRAIN_GRACE, STDERR_KEEP};
use super::overlay::Overlays;
use super::pidfd::{Pidfd, Stopped, KILL_CONFIRM};
use super::protected::{Held, Protector};
use super::spawn::{self, Io, PreExec, Spawn};
use super::{
    dies_with_brokerd, mount_changed, not_cleared, Cleared, Deadlines, Egress, Failure, Ran, Reply,
    RunError, RunOutput, RunSpec, Runner, Settling, Steps, SweepError, Unavailable,
};
use super::{reaper, seccomp};
use crate::config::{memory_bytes, BwrapConfig, CgroupMode, RunnerConfig};
// What bwrap and the tools print can quote the model's text: redacted before it is logged.
use crate::redact::redact;

/// The runbook entry every `unavailable` line of this runtime ends with.
pub const RUNBOOK: &str = crate::runbook::BWRAP_UNAVAILABLE;
/// The size of the sandbox's `/tmp`, as Podman's `--tmpfs=/tmp:...,size=64m`.
pub const TMP_SIZE: u64 = 64 * 1024 * 1024;
/// The egress proxy's limits, as Podman's `--memory=128m --pids-limit=64`.
pub const PROXY_MEMORY: u64 = 128 * 1024 * 1024;
pub const PROXY_PIDS: u32 = 64;
/// Used only if `memory` somehow does not parse (config::load rejects that).
const FALLBACK_MEMORY: u64 = 512 * 1024 * 1024;
/// How long standard error may take to end once bwrap has exited.
const STDERR_GRACE: Duration = Duration::from_millis(100);
/// Entries of the tools root the sandbox makes for itself: mount points, empty in the image.
const OWN_MOUNTS: [&str; 5] = ["dev", "proc", "run", "sys", "tmp"];
/// The host file the proxy resolves names with (seed 003 section 5, step 4).
const RESOLV_CONF: &str = "/etc/resolv.conf";

/// Numbers the sandboxes of this brokerd process (the `<n>` of seed 003 section 6).
static SANDBOXES: AtomicU64 = AtomicU64::new(0);

/// One entry of the tools root's top level, as the sandbox's `/` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootEntry {
    /// A directory or file, bound read-only at `/<name>`.
    Bound(OsString),
    /// A symlink, made again with the same target (bwrap would follow it on the host).
    Symlink(OsString, PathBuf),
}

/// The tools root's top level, read once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootLayout(pub Vec<RootEntry>);

impl RootLayout {
    /// Lists `root`, sorted by name, leaving out the mount points the sandbox makes itself.
    pub fn read(root: &Path) -> io::Result<RootLayout> {
        let mut entries = Vec::new();
        for entry in std::fs::read_dir(root)? {
            let entry = entry?;
            let name = entry.file_name();
            if OWN_MOUNTS.iter().any(|m| OsStr::new(m) == name) {
                continue;
            }
            let kind = entry.file_type()?;
            if kind.is_symlink() {
                entries.push(RootEntry::Symlink(name, std::fs::read_link(entry.path())?));
            } else if kind.is_dir() || kind.is_file() {
                entries.push(RootEntry::Bound(name));
            }
            // Sockets, devices and FIFOs at the top of an image have no place in a sandbox.
        }
        entries.sort_by(|a, b| entry_name(a).cmp(entry_name(b)));
        Ok(RootLayout(entries))
    }
}

fn entry_name(e: &RootEntry) -> &OsStr {
    match e {
        RootEntry::Bound(n) | RootEntry::Symlink(n, _) => n,
    }
}

/// Why a sandbox can never start on this host as configured (seed 000 5.1.6): remembered, so
/// later calls answer `unavailable` without probing again.
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
    /// weaker than configured, so none runs (DESIGN.md "Runners").
    #[error("brokerd has no seccomp filter for the {0} architecture, so a sandbox would run without one")]
    NoSeccomp(String),
}

/// The terminal failure of a host whose architecture has no filter `program` for it.
fn seccomp_missing(program: Option<&[seccomp::SockFilter]>) -> Option<Terminal> {
    program
        .is_none()
        .then(|| Terminal::NoSeccomp(std::env::consts::ARCH.to_string()))
}

/// What brokerd's log says when nothing could run; each line ends with [`RUNBOOK`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum Trouble {
    #[error("bwrap cannot run here")]
    Terminal(Terminal),
    #[error("bwrap could not be started")]
    Spawn,
    #[error("bwrap could not build the sandbox")]
    Setup,
    #[error("the tools root could not be read")]
    ToolsRoot,
    #[error("the sandbox's limits cannot take effect")]
    Limits,
    #[error("the egress directory could not be made")]
    EgressDir,
    #[error("the egress proxy did not start")]
    ProxyFailed,
    #[error("the egress proxy's socket did not appear in time")]
    ProxySocket,
    #[error("a sandbox brokerd stopped earlier could not be confirmed dead, so http_fetch is off until restart")]
    Poisoned,
    #[error("an earlier call's egress proxy was not confirmed stopped in time")]
    EarlierCleanUp,
    #[error("the session's staged layer could not be mounted")]
    Staged,
}

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
    mechanism: OnceLock<Result<Mechanism, CgroupUnavailable>>,
    terminal: Mutex<Option<Terminal>>,
    poisoned: AtomicBool,
    /// Proxy stops and cgroup removals still under way after their call's answer left.
    settling: Settling,
    /// Cgroup knobs found unsettable, as `weakened` reports them.
    weakened: Mutex<Vec<String>>,
    /// The protected targets of writable mounts (docs/design.md#protected-targets).
    protector: Protector,
    /// The user namespace staged sandboxes mount their layers in, made at the first one.
    staging: Mutex<Option<OwnedFd>>,
}

/// Where a sandbox's limits live, for its argument list and its start.
enum Placement {
    /// rlimits only (`enforce_limits = false` on a host without a mechanism).
    Plain,
    /// A child group of the delegated subtree, bound at /sys/fs/cgroup.
    Group(ChildGroup),
    /// A transient scope; its group appears at `dir` once systemd made it.
    Scope { prefix: Vec<OsString>, dir: PathBuf },
}

impl Placement {
    fn cgroup_view(&self) -> Option<&Path> {
        match self {
            Placement::Plain => None,
            Placement::Group(g) => Some(g.dir()),
            Placement::Scope { dir, .. } => Some(dir),
        }
    }
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
            mechanism: OnceLock::new(),
            // Known from the start: every call, the preflight included, answers unavailable.
            terminal: Mutex::new(seccomp_missing(seccomp::program())),
            poisoned: AtomicBool::new(false),
            settling: Settling::default(),
            weakened: Mutex::new(Vec::new()),
            protector: Protector::new(config.protect),
            staging: Mutex::new(None),
        }
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

    /// Another resolver file for the proxy (tests: a nameserver of their own).
    pub fn with_resolv_conf(mut self, path: impl Into<PathBuf>) -> BwrapRuntime {
        self.resolv_conf = path.into();
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
        let n = SANDBOXES.fetch_add(1, Ordering::SeqCst) + 1;
        format!("boxmaker-{}-{}-{n}", spec.session, spec.call)
    }

    /// `<home>/run/egress/<name>/`
    pub fn egress_dir(&self, name: &str) -> PathBuf {
        egress::egress_dir(&self.home, name)
    }

    /// The options every sandbox starts with: every namespace unshared (the network too),
    /// a user namespace that cannot make more, no capabilities, a clean environment, the
    /// tools root, a fresh /proc, a minimal /dev.
    fn common_args(&self, layout: &RootLayout, share_net: bool, etc: bool) -> Vec<OsString> {
        let mut a: Vec<OsString> = vec![
            "--unshare-all".into(),
            // Explicit, so the namespace is made even for root and --disable-userns applies.
            "--unshare-user".into(),
            "--disable-userns".into(),
        ];
        if share_net {
            a.push("--share-net".into());
        }
        a.extend(
            [
                "--die-with-parent",
                "--new-session",
                "--cap-drop",
                "ALL",
                "--clearenv",
            ]
            .map(OsString::from),
        );
        if seccomp::program().is_some() {
            // The filter arrives on this descriptor (see `start`).
            a.push("--seccomp".into());
            a.push(seccomp::FD.to_string().into());
        }
        for entry in &layout.0 {
            match entry {
                RootEntry::Bound(name) if !etc && name == "etc" => {}
                RootEntry::Bound(name) => {
                    a.push("--ro-bind".into());
                    a.push(self.tools_root.join(name).into_os_string());
                    a.push(inside(name));
                }
                RootEntry::Symlink(name, target) => {
                    a.push("--symlink".into());
                    a.push(target.clone().into_os_string());
                    a.push(inside(name));
                }
            }
        }
        a.extend(["--proc", "/proc", "--dev", "/dev"].map(OsString::from));
        a
    }

    /// The tool sandbox's `bwrap` arguments (the program not included), in a fixed order:
    /// golden files under `tests/fixtures/bwrap/` hold them byte for byte.
    pub fn build_argv(
        &self,
        spec: &RunSpec,
        name: &str,
        layout: &RootLayout,
        cgroup_view: Option<&Path>,
    ) -> Vec<OsString> {
        self.build_argv_with(spec, name, layout, cgroup_view, &[])
    }

    /// `build_argv` with the writable mounts' protected targets (`protected`, in the order
    /// their descriptors follow the mounts') bound read-only over them.
    pub fn build_argv_with(
        &self,
        spec: &RunSpec,
        name: &str,
        layout: &RootLayout,
        cgroup_view: Option<&Path>,
        protected: &[&Path],
    ) -> Vec<OsString> {
        let mut a = self.common_args(layout, false, true);
        a.extend(
            [
                "--setenv", "HOME", "/tmp", "--setenv", "TMPDIR", "/tmp", "--setenv", "PATH",
                "/bin", "--size",
            ]
            .map(OsString::from),
        );
        a.push(TMP_SIZE.to_string().into());
        a.extend(["--perms", "1777", "--tmpfs", "/tmp"].map(OsString::from));
        // After /tmp, so a grant under /tmp is not hidden by it. Each directory is bound from
        // the descriptor brokerd opened and checked (`mounts::open_mounts`), never by path,
        // and parents before their children, so a writable parent cannot cover a read-only
        // child.
        for i in mounts::mount_order(&spec.mounts) {
            let m = &spec.mounts[i];
            a.push(if m.write { "--bind-fd" } else { "--ro-bind-fd" }.into());
            a.push((mounts::FIRST_FD + i as i32).to_string().into());
            a.push(m.path.clone().into_os_string());
        }
        // Then each protected target, read-only over its writable mount, from the descriptor
        // the walk opened (docs/design.md#protected-targets).
        for (j, path) in protected.iter().enumerate() {
            a.push("--ro-bind-fd".into());
            a.push(
                (mounts::FIRST_FD + (spec.mounts.len() + j) as i32)
                    .to_string()
                    .into(),
            );
            a.push(path.as_os_str().to_owned());
        }
        if spec.egress.is_some() {
            a.push("--bind".into());
            a.push(self.egress_dir(name).into_os_string());
            a.push(EGRESS_MOUNT.into());
        }
        if let Some(dir) = cgroup_view {
            // The sandbox reads its own limits where cgroup v2 puts them (the preflight).
            a.push("--ro-bind".into());
            a.push(dir.as_os_str().to_owned());
            a.push(cgroup::CGROUP_ROOT.into());
        }
        a.extend(
            [
                "--remount-ro",
                "/",
                "--chdir",
                proto::tools::DEFAULT_CWD,
                proto::tools::TOOLKIT,
                spec.tool.as_str(),
            ]
            .map(OsString::from),
        );
        a
    }

    /// The egress proxy's `bwrap` arguments: everything unshared but the network; only
    /// toolkit, the host's resolver file, and the call's egress directory.
    pub fn proxy_argv(
        &self,
        egress: &Egress,
        name: &str,
        layout: &RootLayout,
        cgroup_view: Option<&Path>,
    ) -> Vec<OsString> {
        let mut a = self.common_args(layout, true, false);
        a.extend(["--setenv", "PATH", "/bin", "--size"].map(OsString::from));
        a.push((1024 * 1024).to_string().into());
        a.extend(["--tmpfs", "/tmp", "--ro-bind"].map(OsString::from));
        a.push(self.resolv_conf.clone().into_os_string());
        a.push(RESOLV_CONF.into());
        a.push("--bind".into());
        a.push(self.egress_dir(name).into_os_string());
        a.push(EGRESS_MOUNT.into());
        if let Some(dir) = cgroup_view {
            a.push("--ro-bind".into());
            a.push(dir.as_os_str().to_owned());
            a.push(cgroup::CGROUP_ROOT.into());
        }
        a.extend(["--remount-ro", "/", "--chdir", "/"].map(OsString::from));
        a.extend(egress.proxy_command());
        a
    }

    /// The staged mounts of `spec`, in the staging user namespace (made at the first).
    fn overlays(&self, spec: &RunSpec, passed: usize) -> io::Result<Option<Overlays>> {
        if spec.mounts.iter().all(|m| m.stage.is_none()) {
            return Ok(None);
        }
        let mut staging = lock(&self.staging);
        if staging.is_none() {
            *staging = Some(super::overlay::staging_userns()?);
        }
        match staging.as_ref() {
            Some(userns) => Overlays::of(&spec.mounts, passed, userns),
            None => Ok(None),
        }
    }

    /// Writes the log line of an `unavailable` answer, ending with the runbook pointer.
    fn unavailable(&self, spec: &RunSpec, trouble: Trouble, detail: &str) -> RunError {
        let what = match &trouble {
            Trouble::Terminal(t) => format!("{trouble}: {t}"),
            _ => trouble.to_string(),
        };
        let why = match trouble {
            Trouble::Staged => Unavailable::LayerUnavailable,
            Trouble::EgressDir
            | Trouble::ProxyFailed
            | Trouble::ProxySocket
            | Trouble::Poisoned
            | Trouble::EarlierCleanUp => Unavailable::EgressUnavailable,
            Trouble::Terminal(_)
            | Trouble::Spawn
            | Trouble::Setup
            | Trouble::ToolsRoot
            | Trouble::Limits => Unavailable::RunnerUnavailable,
        };
        let pointer = match why {
            Unavailable::LayerUnavailable => why.runbook(),
            _ => RUNBOOK,
        };
        tracing::error!(
            session = %spec.session,
            call = %spec.call,
            tool = %spec.tool,
            status = "unavailable",
            "{what}: {}; see {pointer}",
            redact(detail.trim_end()),
        );
        RunError::Unavailable(why)
    }

    /// Logs each optional cgroup knob the first time it is found unsettable, and keeps it
    /// for `weakened`.
    fn note_unset(&self, unset: &[(&'static str, String)]) {
        let mut seen = lock(&self.weakened);
        for (knob, why) in unset {
            if seen.iter().any(|w| w.starts_with(&format!("{knob} "))) {
                continue;
            }
            let line = format!("{knob} cannot be set in sandbox cgroups: {why}");
            tracing::warn!("{line}; sandboxes run without it (weaker confinement); see {RUNBOOK}");
            seen.push(line);
        }
    }

    fn remember(&self, t: Terminal) {
        lock(&self.terminal).get_or_insert(t);
    }

    fn layout(&self) -> io::Result<RootLayout> {
        let mut cached = lock(&self.layout);
        if let Some(l) = cached.as_ref() {
            return Ok(l.clone());
        }
        let l = RootLayout::read(&self.tools_root)?;
        if !l.0.iter().any(|e| entry_name(e) == "bin") {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "it has no bin (toolkit is run as {})",
                    proto::tools::TOOLKIT
                ),
            ));
        }
        *cached = Some(l.clone());
        Ok(l)
    }

    fn mechanism(&self) -> &Result<Mechanism, CgroupUnavailable> {
        self.mechanism.get_or_init(|| {
            let m = Mechanism::probe(self.cgroup_mode);
            if let Err(e) = &m {
                if self.enforce_limits {
                    tracing::error!("cgroup limits are unavailable: {e}; calls answer unavailable; see {RUNBOOK}");
                } else {
                    tracing::warn!("cgroup limits are unavailable ({e}); enforce_limits = false, so sandboxes run with rlimits only");
                }
            }
            m
        })
    }

    /// The sandbox's cgroup, as the configured mechanism and `enforce_limits` say.
    fn placement(&self, group_name: &str, limits: CgroupLimits) -> Result<Placement, String> {
        match self.mechanism() {
            Ok(Mechanism::Delegated { root }) => {
                match ChildGroup::create(root, group_name, &limits) {
                    // Weaker than configured, so it does not run (docs/design.md#limits).
                    Ok(g) if self.enforce_limits && !g.unset().is_empty() => {
                        let why = g
                            .unset()
                            .iter()
                            .map(|(knob, why)| format!("{knob} cannot be set: {why}"))
                            .collect::<Vec<_>>()
                            .join("; ");
                        let dir = g.dir().to_path_buf();
                        // Nothing ran in it: a group that will not go is litter, not a risk.
                        if !g.remove() {
                            tracing::warn!(
                                "{}: could not be removed; the next sweep removes it",
                                dir.display()
                            );
                        }
                        Err(format!(
                            "{why}; with enforce_limits = true no sandbox runs weaker than configured"
                        ))
                    }
                    Ok(g) => {
                        self.note_unset(g.unset());
                        Ok(Placement::Group(g))
                    }
                    Err(e) if self.enforce_limits => Err(format!(
                        "could not make the sandbox's cgroup under {}: {e}",
                        root.display()
                    )),
                    Err(e) => {
                        tracing::warn!("could not make the sandbox's cgroup under {}: {e}; running with rlimits only (enforce_limits = false)", root.display());
                        Ok(Placement::Plain)
                    }
                }
            }
            Ok(Mechanism::SystemdScope { systemd_run, uid }) => Ok(Placement::Scope {
                prefix: cgroup::scope_prefix(systemd_run, group_name, &limits),
                dir: cgroup::scope_dir(*uid, group_name),
            }),
            Err(e) if self.enforce_limits => Err(e.to_string()),
            Err(_) => Ok(Placement::Plain),
        }
    }

    /// Starts bwrap (inside a scope where configured) with the rlimits set and the cgroup
    /// joined between fork and exec, and takes its pidfd.
    fn start(
        &self,
        spec: &RunSpec,
        argv: Vec<OsString>,
        placement: Placement,
        rlimits: ResourceLimits,
        stdio: [Io; 3],
        mount_fds: Vec<OwnedFd>,
    ) -> Result<Sandbox<'_>, RunError> {
        // bwrap's own process in the sandbox (its PID 1) keeps the environment it was started
        // with (`--clearenv` clears only its child's), and a sandbox can read it in
        // /proc/1/environ: bwrap starts with nothing of brokerd's. For a scope, systemd-run
        // keeps what it needs to reach the user's manager and starts bwrap through `env -i`.
        let bwrap = find_program(&self.bwrap);
        let mut cmd = match &placement {
            Placement::Scope { prefix, .. } => match prefix.split_first() {
                Some((program, rest)) => {
                    let mut c = Spawn::new(find_program(Path::new(program)));
                    c.args(rest)
                        .arg(find_program(Path::new("env")))
                        .arg("-i")
                        .arg(&bwrap);
                    for key in ["XDG_RUNTIME_DIR", "DBUS_SESSION_BUS_ADDRESS"] {
                        if let Some(v) = std::env::var_os(key) {
                            c.env(key, v);
                        }
                    }
                    c
                }
                None => Spawn::new(&bwrap),
            },
            _ => Spawn::new(&bwrap),
        };
        // A Spawn passes no environment but what it is given: bwrap starts with nothing.
        dies_with_brokerd(&mut cmd);
        cmd.args(&argv).stdio(stdio);
        let procs_fd = match &placement {
            Placement::Group(g) => Some(g.procs_fd()),
            _ => None,
        };
        // SAFETY: the hook calls only setrlimit and write(2), both async-signal-safe, and
        // writes no memory; the fd it writes to stays open in brokerd until the Sandbox
        // (holding the group) is dropped.
        unsafe {
            cmd.pre_exec_hook(move || {
                rlimits.apply()?;
                if let Some(fd) = procs_fd {
                    cgroup::join_from_child(fd)?;
                }
                Ok(())
            });
        }
        // After the cgroup hook, which may use the descriptor number the filter goes to; the
        // mount descriptors last, moved to the numbers the argument list names.
        let passed_fds = mount_fds.len();
        let passed = seccomp::pass_to(&mut cmd)
            .map_err(|e| format!("seccomp filter: {e}"))
            .and_then(|filter| match mounts::pass_to(&mut cmd, mount_fds) {
                Ok(mounts) => Ok((filter, mounts)),
                Err(e) => Err(format!("grant directories: {e}")),
            });
        // Held until bwrap has started.
        let _passed = match passed {
            Ok(p) => p,
            Err(detail) => {
                drop_placement(placement, &self.poisoned);
                return Err(self.unavailable(spec, Trouble::Spawn, &detail));
            }
        };
        // A staged grant directory: the session's layer over it, mounted in the child last
        // (docs/design.md#staged-writes-and-owners). Held until bwrap has started.
        let overlays = match self.overlays(spec, passed_fds) {
            Ok(o) => o,
            Err(e) => {
                drop_placement(placement, &self.poisoned);
                return Err(self.unavailable(spec, Trouble::Staged, &e.to_string()));
            }
        };
        if let Some(o) = &overlays {
            o.hook(&mut cmd);
        }
        let child = match cmd.spawn() {
            Ok(c) => c,
            // With a layer to mount, a failure is the overlay's more likely than bwrap's: never
            // remembered, and never a fall back to the real directory.
            Err(e) if overlays.is_some() => {
                drop_placement(placement, &self.poisoned);
                let detail = format!("mounting the staged layer, or starting bwrap: {e}");
                return Err(self.unavailable(spec, Trouble::Staged, &detail));
            }
            Err(e) => {
                let detail = format!("{}: {e}", self.bwrap.display());
                let terminal = match (e.kind(), e.raw_os_error()) {
                    (io::ErrorKind::NotFound, _) => Some(Terminal::Absent(detail.clone())),
                    (io::ErrorKind::PermissionDenied, _) | (_, Some(libc::ENOEXEC)) => {
                        Some(Terminal::Inexecutable(detail.clone()))
                    }
                    _ => None,
                };
                drop_placement(placement, &self.poisoned);
                return Err(match terminal {
                    // Only bwrap's own absence is terminal, not a scope helper's.
                    Some(t) if !cmd_is_scope(&cmd) => {
                        self.remember(t.clone());
                        self.unavailable(spec, Trouble::Terminal(t), "remembered until restart")
                    }
                    _ => self.unavailable(spec, Trouble::Spawn, &detail),
                });
            }
        };
        let pidfd = match Pidfd::open(child.pid()) {
            Ok(p) => p,
            Err(e) => {
                // The child is not reaped, so its PID still names it; this is the one place
                // a PID is used, because no pidfd could be had (EMFILE or a pre-5.3 kernel).
                let mut child = child;
                child.kill_and_wait();
                drop_placement(placement, &self.poisoned);
                if e.raw_os_error() == Some(libc::ENOSYS) {
                    let t = Terminal::NoPidfd(e.to_string());
                    self.remember(t.clone());
                    return Err(self.unavailable(
                        spec,
                        Trouble::Terminal(t),
                        "remembered until restart",
                    ));
                }
                return Err(self.unavailable(spec, Trouble::Spawn, &format!("pidfd_open: {e}")));
            }
        };
        Ok(Sandbox {
            child,
            pidfd,
            placement: Some(placement),
            reaped: false,
            kill_confirm: self.kill_confirm,
            poisoned: &self.poisoned,
        })
    }

    /// Reads bwrap's own refusal: exit 1, nothing on standard output (toolkit's exit 1
    /// always prints its line there), and bwrap's `bwrap: ` message on standard error.
    fn setup_failure(
        &self,
        status: std::process::ExitStatus,
        stdout: &[u8],
        stderr: &str,
    ) -> Option<Option<Terminal>> {
        if status.code() != Some(1) || !stdout.is_empty() || !stderr.starts_with("bwrap: ") {
            return None;
        }
        let refused = stderr.contains("namespace")
            && (stderr.contains("No permissions")
                || stderr.contains("Operation not permitted")
                || stderr.contains("failed"))
            || stderr.contains("uid map")
            || stderr.contains("setting up uid");
        Some(refused.then(|| Terminal::Refused(stderr.trim_end().to_string())))
    }

    /// Makes the egress directory and starts the proxy sandbox; the guard stops the proxy
    /// and removes the directory on every path.
    fn start_egress<'a>(
        &'a self,
        spec: &'a RunSpec,
        egress: &Egress,
        name: &str,
        layout: &RootLayout,
        times: &Deadlines,
    ) -> Result<ProxyGuard<'a>, RunError> {
        let dir = self.egress_dir(name);
        if let Err(e) = make_private_dir(&dir) {
            let detail = format!("{}: {e}", dir.display());
            return Err(self.unavailable(spec, Trouble::EgressDir, &detail));
        }
        let mut guard = ProxyGuard {
            spec,
            dir,
            sandbox: None,
        };
        let deadline = times.step(self.egress_start);
        let placement = self
            .placement(
                &format!("{name}-egress"),
                CgroupLimits::new(PROXY_MEMORY, PROXY_PIDS),
            )
            .map_err(|e| self.unavailable(spec, Trouble::Limits, &e))?;
        let argv = self.proxy_argv(egress, name, layout, placement.cgroup_view());
        // The proxy's CPU is bounded by the whole call's time, the socket wait included.
        let rlimits =
            ResourceLimits::new(PROXY_MEMORY, self.pids, spec.timeout + self.egress_start);
        let mut sandbox = self.start(
            spec,
            argv,
            placement,
            rlimits,
            [Io::Null, Io::Null, Io::Piped],
            Vec::new(),
        )?;
        let stderr = Capture::start(
            sandbox.child.stderr.take().map(std::fs::File::from),
            STDERR_KEEP,
            false,
        );
        guard.sandbox = Some(sandbox);
        let pidfd = guard.sandbox.as_ref().map(|s| &s.pidfd);
        let appeared = egress::wait_for_socket(&guard.dir, deadline, pidfd.map(Pidfd::as_fd));
        if appeared {
            // The proxies of calls answered before this one are stopped, or the runtime is
            // poisoned, before this tool gets its way out (DESIGN.md "Runners").
            if !self.settling.wait_for_earlier(deadline) {
                let detail = format!("waited {:?}", self.egress_start);
                return Err(self.unavailable(spec, Trouble::EarlierCleanUp, &detail));
            }
            if self.poisoned() {
                return Err(self.unavailable(spec, Trouble::Poisoned, "http_fetch is off"));
            }
            return Ok(guard);
        }
        let exited = pidfd.is_some_and(|p| p.wait_exit(Duration::ZERO));
        if exited {
            stderr.wait_done(Instant::now() + STDERR_GRACE);
            let detail = format!("the proxy sandbox exited: {}", stderr.text());
            return Err(self.unavailable(spec, Trouble::ProxyFailed, &detail));
        }
        let detail = format!(
            "{} did not appear within {:?}",
            guard.dir.join(EGRESS_SOCKET).display(),
            self.egress_start
        );
        Err(self.unavailable(spec, Trouble::ProxySocket, &detail))
    }

    /// Runs the tool sandbox and answers by seed 003 section 6's table. A sandbox that exited
    /// by itself is left in `exited`, for its cgroup to be removed after the answer.
    // One call's parts, each of a different owner: bundling them would only rename them.
    #[allow(clippy::too_many_arguments)]
    fn run_tool<'a>(
        &'a self,
        spec: &RunSpec,
        name: &str,
        layout: &RootLayout,
        exited: &mut Option<Sandbox<'a>>,
        held: &Held<'_>,
        cleared: &Cleared,
        times: &Deadlines,
    ) -> Result<RunOutput, RunError> {
        // Right before the sandbox: the directories of the grant and no others, then the
        // protected targets the walk opened.
        let mut mount_fds = open_mounts(&spec.mounts).map_err(|e| mount_changed(spec, e))?;
        for t in held.targets() {
            let fd = t.fd.try_clone().map_err(|e| {
                self.unavailable(spec, Trouble::Spawn, &format!("protected target: {e}"))
            })?;
            mount_fds.push(fd);
        }
        let protected: Vec<&Path> = held.targets().map(|t| t.path.as_path()).collect();
        let placement = self
            .placement(name, CgroupLimits::new(self.memory, self.pids))
            .map_err(|e| self.unavailable(spec, Trouble::Limits, &e))?;
        let argv = self.build_argv_with(spec, name, layout, placement.cgroup_view(), &protected);
        let rlimits = ResourceLimits::new(self.memory, self.pids, spec.timeout);
        let deadline = times.step(spec.timeout);
        let mut sandbox = self.start(
            spec,
            argv,
            placement,
            rlimits,
            [Io::Piped, Io::Piped, Io::Piped],
            mount_fds,
        )?;
        // The sandbox was made while brokerd put the decision on disk; its tool gets its
        // input only now (dropping the sandbox stops it).
        if !cleared.wait(deadline) {
            return Err(not_cleared(spec));
        }
        let child = &mut sandbox.child;
        let fds = [child.stdin.take(), child.stdout.take(), child.stderr.take()];
        let mut streams = Streams::of(fds, &spec.input, self.output_cap);
        let status = loop {
            // Wakes on bwrap's exit, on standard output passing the cap, or at the deadline,
            // serving the sandbox's streams meanwhile.
            match streams.wait(Some(sandbox.pidfd.as_fd()), deadline) {
                Event::Exited => match sandbox.reap() {
                    Ok(status) => break status,
                    Err(e) => {
                        tracing::error!(session = %spec.session, call = %spec.call, "reaping bwrap failed: {e}");
                        sandbox.stop();
                        return Err(RunError::Failed(Failure::UnexpectedStatus));
                    }
                },
                Event::Overflowed => {
                    // DESIGN.md "Output": the capped output is the answer, not a time-out.
                    sandbox.stop();
                    return Ok(RunOutput {
                        content: super::output::decode(streams.stdout().to_vec(), true),
                        truncated: true,
                    });
                }
                Event::Deadline => {
                    sandbox.stop();
                    return Err(RunError::Failed(Failure::TimedOut));
                }
                Event::Look => {}
            }
        };
        // bwrap has exited, so the sandbox's PID namespace is gone and the pipes end at once.
        streams.drain(Instant::now() + DRAIN_GRACE);
        *exited = Some(sandbox);
        let err = streams.stderr_text();
        if let Some(terminal) = self.setup_failure(status, streams.stdout(), &err) {
            return Err(match terminal {
                Some(t) => {
                    self.remember(t.clone());
                    self.unavailable(spec, Trouble::Terminal(t), "remembered until restart")
                }
                None => self.unavailable(spec, Trouble::Setup, &err),
            });
        }
        let truncated = streams.overflowed();
        match verdict(status, streams.stdout().to_vec(), truncated) {
            Verdict::Output(out) => Ok(out),
            Verdict::RunnerFailed => {
                let detail = format!("bwrap exited with {status}: {err}");
                Err(self.unavailable(spec, Trouble::Setup, &detail))
            }
            Verdict::Failed(f) => {
                tracing::info!(
                    session = %spec.session,
                    call = %spec.call,
                    tool = %spec.tool,
                    "bwrap exited with {status}; its standard error: {}",
                    redact(err.trim_end())
                );
                Err(RunError::Failed(f))
            }
        }
    }
}

/// Kills the sandboxes a crashed brokerd left running. Each dies with brokerd once it is
/// set up, but a sandbox killed while bwrap was still building it can outlive it: the
/// process bwrap clones sets its own parent-death signal only when its mounts are made.
/// Such a process runs as this user with the same program and tools root as every sandbox
/// brokerd starts, which is how it is recognised (one brokerd per service user); it is
/// stopped through a pidfd opened before it was judged.
fn sweep_sandboxes(bwrap: &Path, tools_root: &Path) -> (usize, Vec<String>) {
    let mut removed = 0;
    let mut failed = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return (0, failed);
    };
    let (uid, me) = (
        nix::unistd::getuid().as_raw(),
        nix::unistd::getpid().as_raw(),
    );
    let marker = tools_root.join("bin");
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<libc::pid_t>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let dir = entry.path();
        let is_it = || {
            let status = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
            let cmdline = std::fs::read(dir.join("cmdline")).unwrap_or_default();
            is_left_sandbox(&status, &cmdline, uid, bwrap, &marker)
        };
        let Some(pidfd) = Pidfd::open_if(pid, is_it) else {
            continue;
        };
        if pidfd.kill_foreign(KILL_CONFIRM) {
            tracing::warn!("killed a sandbox left by an earlier brokerd (process {pid})");
            removed += 1;
        } else {
            failed.push(format!("sandbox process {pid} did not die on SIGKILL"));
        }
    }
    (removed, failed)
}

/// Whether a process (its /proc `status` and `cmdline`) is a bwrap sandbox of this service:
/// its real user, `bwrap` as started, the tools root's `bin` among its arguments.
fn is_left_sandbox(status: &str, cmdline: &[u8], uid: u32, bwrap: &Path, marker: &Path) -> bool {
    let real_uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().next())
        .and_then(|id| id.parse::<u32>().ok());
    if real_uid != Some(uid) {
        return false;
    }
    let mut args = cmdline.split(|&b| b == 0);
    // As started, or as systemd-run found it in PATH for a scope (`bwrap`, `/usr/bin/bwrap`).
    let program = args.next().unwrap_or_default();
    let named = program == bwrap.as_os_str().as_bytes()
        || (!bwrap.as_os_str().as_bytes().contains(&b'/')
            && Path::new(OsStr::from_bytes(program)).file_name() == Some(bwrap.as_os_str()));
    named && args.any(|a| a == marker.as_os_str().as_bytes())
}

/// `program` as found in brokerd's PATH (a sandbox starts with an empty environment, so the
/// search cannot be left to exec); as given when it names a path or is not found.
fn find_program(program: &Path) -> PathBuf {
    if program.as_os_str().as_bytes().contains(&b'/') {
        return program.to_path_buf();
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(program))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .unwrap_or_else(|| program.to_path_buf())
}

fn cmd_is_scope(cmd: &Spawn) -> bool {
    cmd.program()
        .as_os_str()
        .as_bytes()
        .ends_with(b"systemd-run")
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
        let (mut removed, mut failed) = sweep_sandboxes(&self.bwrap, &self.tools_root);
        let (dirs, dir_failures) = egress::sweep(&self.home);
        removed += dirs;
        failed.extend(dir_failures);
        // Probing here also prepares the delegated subtree once, at start-up.
        if let Ok(Mechanism::Delegated { root }) = self.mechanism() {
            let (groups, group_failures) = cgroup::sweep(root);
            removed += groups;
            failed.extend(group_failures);
        }
        SweepError::outcome(removed, failed)
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

    fn refusal(&self, spec: &RunSpec) -> Option<RunError> {
        let t = self.terminal()?;
        Some(self.unavailable(
            spec,
            Trouble::Terminal(t),
            "remembered from an earlier call",
        ))
    }

    fn poisoned_answer(&self, spec: &RunSpec) -> RunError {
        self.unavailable(spec, Trouble::Poisoned, "http_fetch is off")
    }

    fn settling(&self) -> &Settling {
        &self.settling
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
        let layout = match self.layout() {
            Ok(l) => l,
            Err(e) => {
                let detail = format!("{}: {e}", self.tools_root.display());
                return Err(self.unavailable(spec, Trouble::ToolsRoot, &detail));
            }
        };
        // What earlier sandboxes left must not count against this one's process limit.
        reaper::reap_orphans();
        let name = BwrapRuntime::sandbox_name(spec);
        let times = Deadlines::new(spec, self.egress_start);
        let mut proxy = None;
        let mut sandbox = None;
        let answer = match &spec.egress {
            // No way out is made before the decision is on disk.
            Some(_) if !cleared.wait(times.decided()) => Err(not_cleared(spec)),
            Some(egress) => match self.start_egress(spec, egress, &name, &layout, &times) {
                Ok(guard) => {
                    proxy = Some(guard);
                    self.run_tool(spec, &name, &layout, &mut sandbox, held, cleared, &times)
                }
                Err(e) => Err(e),
            },
            None => self.run_tool(spec, &name, &layout, &mut sandbox, held, cleared, &times),
        };
        let leftovers = (sandbox.is_some() || proxy.is_some()).then_some((sandbox, proxy));
        Ok(Ran {
            sandbox: name,
            answer,
            leftovers,
        })
    }
}

/// A started bwrap, held by its pidfd. Dropping it stops it (SIGKILL through the pidfd,
/// confirmed) and removes its cgroup; whatever cannot be confirmed poisons the runtime.
pub(super) struct Sandbox<'a> {
    child: spawn::Child,
    pidfd: Pidfd,
    placement: Option<Placement>,
    reaped: bool,
    kill_confirm: Duration,
    poisoned: &'a AtomicBool,
}

impl Sandbox<'_> {
    fn reap(&mut self) -> io::Result<std::process::ExitStatus> {
        let status = self.pidfd.reap()?;
        self.reaped = true;
        Ok(status)
    }

    /// Kills bwrap (and with it the sandbox's PID namespace) through the pidfd, waits to see
    /// it die, then empties and removes the cgroup. Idempotent.
    ///
    /// Without a cgroup of its own, the sandbox's processes are seen to die through bwrap's
    /// children, taken before bwrap is killed: each must be a PID namespace's init (whose
    /// death takes every process of the namespace with it) and must be seen to exit. A child
    /// that is not one, or does not exit, leaves processes unaccounted for: poison (seed 000
    /// 5.1.7).
    fn stop(&mut self) {
        if !self.reaped {
            let inner = match &self.placement {
                Some(Placement::Group(_)) => Vec::new(),
                _ => children_of(self.child.id()),
            };
            self.stop_outer();
            for (pidfd, pid, is_init) in inner {
                let what = if !pidfd.kill_foreign(self.kill_confirm) {
                    "did not die after two SIGKILLs through its pidfd"
                } else if !is_init {
                    "was not a PID namespace's init, so what it started cannot be seen to die"
                } else {
                    continue;
                };
                self.poisoned.store(true, Ordering::SeqCst);
                tracing::error!(
                    "a process of the sandbox of bwrap {} (pid {pid}) {what}; {}; see {RUNBOOK}",
                    self.child.id(),
                    Trouble::Poisoned
                );
            }
        }
        if let Some(p) = self.placement.take() {
            drop_placement(p, self.poisoned);
        }
    }

    /// SIGKILL to bwrap's own process through its pidfd, confirmed and reaped.
    fn stop_outer(&mut self) {
        match self.pidfd.kill_and_reap(self.kill_confirm) {
            Stopped::Confirmed(_) => self.reaped = true,
            Stopped::Unconfirmed => {
                self.poisoned.store(true, Ordering::SeqCst);
                tracing::error!(
                    "bwrap (pid {}) did not die after two SIGKILLs through its pidfd; {}; see {RUNBOOK}",
                    self.child.id(),
                    Trouble::Poisoned
                );
            }
        }
    }
}

/// The children of process `pid`, each held by a pidfd opened before it was looked at, with
/// its PID and whether it is the init of a PID namespace below brokerd's.
fn children_of(pid: u32) -> Vec<(Pidfd, libc::pid_t, bool)> {
    let mut found = Vec::new();
    for child in reaper::children(&pid.to_string()) {
        let mut is_init = false;
        let opened = Pidfd::open_if(child, || {
            let status = std::fs::read_to_string(format!("/proc/{child}/status"));
            is_init = status.is_ok_and(|s| reaper::is_namespace_init(&s));
            true
        });
        if let Some(pidfd) = opened {
            found.push((pidfd, child, is_init));
        }
    }
    found
}

impl Drop for Sandbox<'_> {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Removes a sandbox's child cgroup (a scope goes by itself once empty, `--collect`).
fn drop_placement(p: Placement, poisoned: &AtomicBool) {
    if let Placement::Group(g) = p {
        let dir = g.dir().to_path_buf();
        if !g.remove() {
            poisoned.store(true, Ordering::SeqCst);
            tracing::error!(
                "the sandbox cgroup {} could not be confirmed empty and removed; {}; see {RUNBOOK}",
                dir.display(),
                Trouble::Poisoned
            );
        }
    }
}

/// Stops the proxy and removes the egress directory when the call ends, however it ends:
/// no proxy outlives its call (seed 003 section 1).
pub(super) struct ProxyGuard<'a> {
    spec: &'a RunSpec,
    dir: PathBuf,
    sandbox: Option<Sandbox<'a>>,
}

impl Drop for ProxyGuard<'_> {
    fn drop(&mut self) {
        if let Some(mut s) = self.sandbox.take() {
            s.stop();
        }
        if let Err(e) = egress::remove_dir(&self.dir) {
            tracing::warn!(
                session = %self.spec.session,
                call = %self.spec.call,
                "could not remove {}: {e}",
                self.dir.display()
            );
        }
    }
}

/// `/<name>`
fn inside(name: &OsStr) -> OsString {
    let mut s = OsString::from("/");
    s.push(name);
    s
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;

    /// A runtime on a delegated subtree that is a plain directory: new groups get only the
    /// files listed, as a host without swap accounting or the cpu controller would give them.
    fn on_fake_subtree(enforce: bool, files: &[&str]) -> (tempfile::TempDir, BwrapRuntime) {
        let dir = tempfile::tempdir().expect("tempdir");
        let text = format!(
            "[runner]\nbackend = \"bwrap\"\nenforce_limits = {enforce}\nhome = \"{}\"\n[bwrap]\ntools_root = \"/nonexistent\"\n",
            dir.path().join("home").display()
        );
        let cfg = crate::config::parse(&text, "t.toml").expect("config");
        let rt = BwrapRuntime::new(
            cfg.runner.as_ref().expect("runner"),
            cfg.bwrap.as_ref().expect("bwrap"),
        );
        let root = dir.path().join("subtree");
        for name in ["s-c-1", "s-c-2"] {
            let group = root.join(format!("{}{name}", cgroup::SANDBOX_PREFIX));
            std::fs::create_dir_all(&group).expect("group");
            for f in files {
                std::fs::write(group.join(f), "").expect("file");
            }
        }
        assert!(rt.mechanism.set(Ok(Mechanism::Delegated { root })).is_ok());
        (dir, rt)
    }

    /// With `enforce_limits = true` a sandbox whose group lacks a knob (here memory.swap.max:
    /// no swap accounting) is not made: the call would answer unavailable. With `false` it is
    /// placed, and the weaker confinement is noted for `status`.
    #[test]
    fn a_knob_that_cannot_be_set_is_no_sandbox_when_limits_are_enforced() {
        let limits = CgroupLimits::new(512 << 20, 128);
        let (_d, rt) = on_fake_subtree(true, &["cgroup.procs", "cpu.max"]);
        match rt.placement("s-c-1", limits) {
            Err(why) => assert!(
                why.contains("memory.swap.max cannot be set")
                    && why.contains("enforce_limits = true"),
                "{why}"
            ),
            Ok(_) => panic!("placed without memory.swap.max"),
        }
        assert!(rt.weakened().is_empty());
        let (_d, rt) = on_fake_subtree(true, &["cgroup.procs", "cpu.max", "memory.swap.max"]);
        assert!(matches!(
            rt.placement("s-c-1", limits),
            Ok(Placement::Group(_))
        ));
        let (_d, rt) = on_fake_subtree(false, &["cgroup.procs"]);
        assert!(matches!(
            rt.placement("s-c-2", limits),
            Ok(Placement::Group(_))
        ));
        let weakened = rt.weakened();
        assert_eq!(weakened.len(), 2, "{weakened:?}");
        assert!(weakened[0].starts_with("memory.swap.max "), "{weakened:?}");
    }

    #[test]
    fn a_left_sandbox_is_told_by_user_program_and_tools_root() {
        let bwrap = Path::new("/usr/bin/bwrap");
        let marker = Path::new("/var/lib/boxmaker/tools-root/bin");
        let status = |uid: &str| format!("Name:\tbwrap\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n");
        let ours =
            b"/usr/bin/bwrap\0--unshare-all\0--ro-bind\0/var/lib/boxmaker/tools-root/bin\0/bin\0";
        assert!(is_left_sandbox(&status("990"), ours, 990, bwrap, marker));
        // Another user's, another program, another tools root, the marker as argv[0], nothing.
        assert!(!is_left_sandbox(&status("1000"), ours, 990, bwrap, marker));
        let other_program = b"/bin/bwrap\0--ro-bind\0/var/lib/boxmaker/tools-root/bin\0/bin\0";
        assert!(!is_left_sandbox(
            &status("990"),
            other_program,
            990,
            bwrap,
            marker
        ));
        // A bare name configured: found in PATH by systemd-run for a scope.
        let bare = Path::new("bwrap");
        assert!(is_left_sandbox(
            &status("990"),
            other_program,
            990,
            bare,
            marker
        ));
        let not_bwrap = b"/bin/bwrapper\0--ro-bind\0/var/lib/boxmaker/tools-root/bin\0";
        assert!(!is_left_sandbox(
            &status("990"),
            not_bwrap,
            990,
            bare,
            marker
        ));
        let other_root = b"/usr/bin/bwrap\0--ro-bind\0/opt/root/bin\0/bin\0";
        assert!(!is_left_sandbox(
            &status("990"),
            other_root,
            990,
            bwrap,
            marker
        ));
        let prefix_only = b"/usr/bin/bwrap\0--ro-bind\0/var/lib/boxmaker/tools-root/bin/x\0";
        assert!(!is_left_sandbox(
            &status("990"),
            prefix_only,
            990,
            bwrap,
            marker
        ));
        assert!(!is_left_sandbox("", ours, 990, bwrap, marker));
        assert!(!is_left_sandbox(&status("990"), b"", 990, bwrap, marker));
    }

    const STAND_IN: &str = "BOXMAKER_TEST_STAND_IN_SECONDS";

    /// A process for the sweep to find: sleeps when started by the test below, returns at
    /// once when `--ignored` tests are run by hand.
    #[test]
    #[ignore = "started by the_sweep_kills_a_left_sandbox_and_nothing_else"]
    fn a_sandbox_stand_in() {
        if let Some(secs) = std::env::var(STAND_IN).ok().and_then(|s| s.parse().ok()) {
            std::thread::sleep(std::time::Duration::from_secs(secs));
        }
    }

    #[test]
    #[allow(clippy::zombie_processes)]
    fn the_sweep_kills_a_left_sandbox_and_nothing_else() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fake = dir.path().join("bwrap");
        let root = dir.path().join("tools-root");
        // This test program itself, named `fake` and with the marker among its arguments,
        // running only `a_sandbox_stand_in`, which then sleeps. (Not /bin/sh: where that is
        // busybox, as in Nix's build sandbox, the name picks the applet.)
        let start = |marker: &Path| {
            std::process::Command::new(std::env::current_exe().expect("test program"))
                .arg0(&fake)
                .args(["--exact", "runner::bwrap::tests::a_sandbox_stand_in"])
                .args(["--ignored", "--test-threads=1", "--quiet"])
                .arg(marker)
                .env(STAND_IN, "30")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()
                .expect("stand-in")
        };
        // spawn returns once the exec has begun, but the kernel sets the new program's
        // arguments a moment later: until then /proc shows an empty command line, and the
        // sweep would rightly pass the process by. Wait for the arguments to show.
        let started = |child: &std::process::Child, marker: &Path| {
            let path = format!("/proc/{}/cmdline", child.id());
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while std::time::Instant::now() < deadline {
                let cmdline = std::fs::read(&path).unwrap_or_default();
                if cmdline
                    .split(|&b| b == 0)
                    .any(|a| a == marker.as_os_str().as_bytes())
                {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            panic!("the stand-in never showed its arguments");
        };
        let mut left = start(&root.join("bin"));
        let mut other = start(&dir.path().join("elsewhere/bin"));
        started(&left, &root.join("bin"));
        started(&other, &dir.path().join("elsewhere/bin"));
        let (removed, failed) = sweep_sandboxes(&fake, &root);
        assert_eq!((removed, failed), (1, Vec::<String>::new()));
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(left.wait().expect("wait").signal(), Some(libc::SIGKILL));
        assert_eq!(other.try_wait().expect("try_wait"), None);
        let _ = other.kill();
        let _ = other.wait();
    }

    #[test]
    fn the_layout_leaves_out_the_sandbox_s_own_mount_points() {
        let root = tempfile::tempdir().expect("tempdir");
        for d in ["bin", "etc", "proc", "dev", "tmp", "run", "sys", "nix"] {
            std::fs::create_dir(root.path().join(d)).expect("dir");
        }
        std::fs::write(root.path().join("init"), "").expect("file");
        std::os::unix::fs::symlink("usr/lib", root.path().join("lib")).expect("link");
        let got = RootLayout::read(root.path()).expect("read");
        assert_eq!(
            got,
            RootLayout(vec![
                RootEntry::Bound("bin".into()),
                RootEntry::Bound("etc".into()),
                RootEntry::Bound("init".into()),
                RootEntry::Symlink("lib".into(), "usr/lib".into()),
                RootEntry::Bound("nix".into()),
            ])
        );
    }

    #[test]
    fn bwrap_s_own_refusals_are_told_from_a_tool_s_exit_1() {
        let cfg = crate::config::parse(
            "[runner]\nbackend = \"bwrap\"\nenforce_limits = false\n",
            "t.toml",
        )
        .expect("config");
        let rt = BwrapRuntime::new(
            cfg.runner.as_ref().expect("runner"),
            cfg.bwrap.as_ref().expect("bwrap"),
        );
        use std::os::unix::process::ExitStatusExt;
        let one = std::process::ExitStatus::from_raw(1 << 8);
        let zero = std::process::ExitStatus::from_raw(0);
        let userns = "bwrap: No permissions to create new namespace, likely because the kernel does not allow non-privileged user namespaces.\n";
        let cases: [(std::process::ExitStatus, &[u8], &str, Option<bool>); 5] = [
            (one, b"", userns, Some(true)),
            (
                one,
                b"",
                "bwrap: setting up uid map: Permission denied\n",
                Some(true),
            ),
            (
                one,
                b"",
                "bwrap: Can't find source path /srv/x: No such file or directory\n",
                Some(false),
            ),
            (one, b"read_file: /x: no such file\n", "", None),
            (zero, b"", "bwrap: whatever\n", None),
        ];
        for (status, out, err, want) in cases {
            let got = rt.setup_failure(status, out, err).map(|t| t.is_some());
            assert_eq!(got, want, "{err}");
        }
    }

    /// No filter for the architecture is a terminal failure, never a sandbox without one.
    #[test]
    fn no_seccomp_filter_is_terminal() {
        let got = seccomp_missing(None);
        assert!(
            matches!(&got, Some(Terminal::NoSeccomp(arch)) if arch == std::env::consts::ARCH),
            "{got:?}"
        );
        let program = seccomp::program();
        assert_eq!(seccomp_missing(program), None);
        #[cfg(target_arch = "x86_64")]
        assert!(program.is_some(), "x86_64 has its filter");
    }
}
