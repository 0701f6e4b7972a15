//! Runners: from a [`RunSpec`] to a finished, cleaned-up sandbox and an answer
//! (docs/design.md#the-podman-runner; docs/design.md#runners).
//!
//! Every text a runner gives the model is one of the fixed sentences below; whatever the tool
//! or podman printed on standard error goes to brokerd's log only.

use std::ffi::OsString;
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use proto::addr::Cidr;
use proto::egress::{Bounds, ProxyArgs, Summary};
use proto::ident::Ident;
use proto::tools::ToolName;

use boxmaker_config::MAX_GRANT_PATHS;

pub use mounts::{DirId, MountChanged};

/// A log line about how a call ended, with the fields every such line carries, in every
/// backend: the session, the call, the tool, and the status the audit gives it (`$answer` is
/// the [`RunError`]). The rest is the line's own fields and message, as `tracing` takes them.
macro_rules! call_line {
    ($level:ident, $spec:expr, $answer:expr, $($rest:tt)+) => {
        tracing::$level!(
            session = %$spec.session,
            call = %$spec.call,
            tool = %$spec.tool,
            status = $answer.ended().as_str(),
            $($rest)+
        )
    };
}

pub mod bwrap;
pub mod cache;
pub mod cgroup;
pub mod egress;
pub mod limits;
pub mod mounts;
pub mod output;
pub mod overlay;
pub mod pidfd;
pub mod podman;
pub(crate) mod procfs;
pub mod protected;
pub mod reaper;
pub mod seccomp;
pub mod spawn;
pub(crate) mod trouble;
pub mod wake;

/// Makes `cmd`'s process get SIGKILL when the brokerd thread that starts it dies, from its
/// first instruction on: bwrap's own `--die-with-parent` is set only once its namespaces are
/// made, and a `podman run` orphaned by a crash would go on creating its container after the
/// restart's sweep has looked. A child whose parent died before the setting took effect exits
/// before exec. The starting thread must wait for the child (every runner does).
pub fn dies_with_brokerd<C: spawn::PreExec>(cmd: &mut C) -> &mut C {
    let brokerd = nix::unistd::getpid();
    // SAFETY: the hook calls prctl and getppid, both async-signal-safe, and touches no memory
    // shared with the parent.
    unsafe {
        cmd.pre_exec_hook(move || {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)?;
            if nix::unistd::getppid() != brokerd {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        })
    }
}

/// One directory of the grant, mounted at the same path inside the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// Canonical.
    pub path: PathBuf,
    pub write: bool,
    /// The directory `path` named when the grant was resolved; a sandbox mounts only that one
    /// (`mounts::open_mounts`).
    pub id: DirId,
    /// Writable: its protected targets are bound read-only over it (`protected`).
    pub protect: bool,
    /// A staged grant directory: the session's layer over it (`overlay`, and Podman's `:O`).
    pub stage: Option<StageMount>,
}

/// Where a session's layer of a staged grant directory is
/// (docs/design.md#staged-writes-and-owners).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageMount {
    pub upper: PathBuf,
    pub work: PathBuf,
    /// Where the bwrap backend mounts the merged view before binding it.
    pub merged: PathBuf,
}

impl Mount {
    /// The directory at `path` as it is now (no symlink on the path), to be mounted as such.
    pub fn at(path: &std::path::Path, write: bool) -> Result<Mount, MountChanged> {
        let (_, id) = mounts::open_dir(path).map_err(|why| MountChanged {
            path: path.to_path_buf(),
            why,
        })?;
        Ok(Mount {
            path: path.to_path_buf(),
            write,
            id,
            protect: false,
            stage: None,
        })
    }
}

/// What the egress proxy of a call (http_fetch, or shell with `shell_hosts`) may reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Egress {
    /// The grant's host patterns, passed as `--allow <p1,p2,...>`.
    pub hosts: Vec<String>,
    /// The grant's `allow_addresses` CIDRs, each passed as `--allow-address <cidr>`.
    pub allow_addresses: Vec<Cidr>,
    /// The runner's `egress_connections` and `egress_bytes`, for a shell call's proxy
    /// (`--max-connections`, `--max-bytes`); `None` for http_fetch, whose one curl has its own.
    pub bounds: Option<Bounds>,
}

impl Egress {
    /// The proxy's command inside its sandbox, `/bin/toolkit egress-proxy --socket ...`, by the
    /// rule toolkit parses it with (`proto::egress::ProxyArgs`).
    pub fn proxy_command(&self) -> Vec<OsString> {
        let args = ProxyArgs {
            socket: proto::tools::EGRESS_SOCKET.into(),
            allow: self.hosts.clone(),
            allow_addresses: self.allow_addresses.clone(),
            bounds: self.bounds,
            // A shell call's proxy reports what it did, for the call's outcome record; an
            // http_fetch's one curl is the record's target already.
            report: self.bounds.map(|_| proto::egress::REPORT_FILE.to_string()),
        };
        args.command().into_iter().map(OsString::from).collect()
    }
}

/// Everything a runner needs for one call, decided before any sandbox exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSpec {
    /// Both name containers, directories and cgroups: identifiers by type.
    pub session: Ident,
    pub call: Ident,
    pub tool: ToolName,
    /// The tool's `proto::tools` JSON, written to the sandbox's standard input and closed.
    pub input: Vec<u8>,
    /// In grant order; read-only unless the decision allowed writing.
    pub mounts: Vec<Mount>,
    /// `Some` for http_fetch (the grant's `hosts`) and for a shell call of a grant with
    /// `shell_hosts` (those); the runners start the same proxy for both.
    pub egress: Option<Egress>,
    /// The tool's time limit.
    pub timeout: Duration,
    /// For a call that writes staged layers: the bytes its layers' upper directories may hold
    /// together (`max_staged_bytes` less what the session's other layers hold); past it the
    /// call is stopped (docs/design.md#staged-writes-and-owners).
    pub staged_limit: Option<u64>,
    /// The grant's toolset (docs/design.md#toolsets); `None`: the base toolset.
    pub toolset: Option<boxmaker_config::Toolset>,
    /// What the grant lowers of `[runner]`'s memory, pids and output cap
    /// (docs/design.md#grantsname); its time limit is `timeout` already.
    pub limits: boxmaker_config::GrantLimits,
    /// A shell call's grant's cache, mounted at `proto::tools::TOOL_CACHE`
    /// (docs/design.md#grant-caches).
    pub cache: Option<cache::Cache>,
}

impl RunSpec {
    /// What makes this spec unrunnable, if anything: more mounts than a sandbox takes, or a
    /// mount that is not absolute or holds `:` or `,` (a relative `--volume` source would be a
    /// named volume). The policy rules these out before a spec exists; every runner checks
    /// again before it starts anything. (Session and call are identifiers by their type.)
    pub fn malformation(&self) -> Option<String> {
        if self.mounts.len() > MAX_GRANT_PATHS {
            return Some(format!(
                "{} directories are more than a sandbox mounts ({})",
                self.mounts.len(),
                MAX_GRANT_PATHS
            ));
        }
        self.mounts
            .iter()
            .find(|m| {
                boxmaker_policy::args::check_grant_path(&m.path).is_err() || !m.path.is_absolute()
            })
            .map(|m| format!("{:?} cannot be mounted", m.path))
    }
}

/// What the tool printed, as the model will see it (before the preview is cut).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOutput {
    pub content: String,
    /// More than `output_cap` bytes were written; `content` holds the first `output_cap`.
    pub truncated: bool,
}

/// Why a call failed: the fixed sentences of docs/design.md#runners, exactly, defined in
/// [`proto::sentences`] where the end-to-end suite compares answers with them.
pub use proto::sentences::Failure;

/// How often a call that writes staged layers has their bytes counted while it runs.
pub(crate) const STAGED_LOOK: Duration = Duration::from_secs(1);

/// When a runner next looks at a call's staged bytes (`staged_over`), `deadline` at the latest.
pub(crate) fn staged_look(spec: &RunSpec, deadline: Instant) -> Instant {
    match spec.staged_limit {
        Some(_) => deadline.min(Instant::now() + STAGED_LOOK),
        None => deadline,
    }
}

/// Whether a call's staged layers hold more than its `staged_limit` (a directory brokerd
/// cannot read counts as past it): the call is stopped.
pub(crate) fn staged_over(spec: &RunSpec) -> bool {
    let Some(limit) = spec.staged_limit else {
        return false;
    };
    let held = spec
        .mounts
        .iter()
        .filter_map(|m| m.stage.as_ref())
        .map(|s| boxmaker_staging::stage::dir_bytes(&s.upper))
        .fold(0u64, u64::saturating_add);
    held > limit
}

/// Why nothing could run. The model reads one fixed sentence whatever the part that failed
/// (docs/design.md#runners); the variant says which part it was, for the operator's pointer
/// and for the session's "known down" mark, which only a missing sandbox sets
/// (docs/design.md#preflight-and-poisoning).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Unavailable {
    /// The sandbox itself could not be made or started: no call of this kind can run.
    #[error("the tool runner could not start the container")]
    RunnerUnavailable,
    /// The way out of an `http_fetch` could not be made (its egress directory, its proxy, the
    /// network preflight, or http_fetch turned off by poisoning): the sandbox itself is not
    /// known to be down.
    #[error("the tool runner could not start the container")]
    EgressUnavailable,
    /// A staged grant's layer could not be made or mounted: the sandbox itself is not known
    /// to be down, and nothing falls back to writing in place.
    #[error("the tool runner could not start the container")]
    LayerUnavailable,
    /// The grant's toolset failed its check (docs/design.md#toolsets): its grants' calls
    /// never run on another toolset, and other grants keep working.
    #[error("the tool runner could not start the container")]
    ToolsetUnavailable,
}

impl Unavailable {
    /// The runbook entry that brokerd's log line ends with (never shown to the model).
    pub fn runbook(self) -> &'static str {
        match self {
            Unavailable::RunnerUnavailable | Unavailable::EgressUnavailable => {
                proto::runbook::RUNNER_UNAVAILABLE
            }
            Unavailable::LayerUnavailable => proto::runbook::STAGED_LAYER,
            Unavailable::ToolsetUnavailable => proto::runbook::TOOLSET_UNAVAILABLE,
        }
    }

    /// Whether this says the sandbox itself is missing: only then are the session's later
    /// writes refused rather than attempted.
    pub fn sandbox_missing(self) -> bool {
        self == Unavailable::RunnerUnavailable
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    #[error("{0}")]
    Failed(Failure),
    #[error("{0}")]
    Unavailable(Unavailable),
    /// A grant directory is not the one resolved at start: a refusal that names it.
    #[error("{0}")]
    MountChanged(MountChanged),
    /// A writable mount's protected targets could not be held: a refusal that says why.
    #[error("{0}")]
    Unprotected(protected::Unprotected),
}

/// Where a runner hands a call's answer, once, as soon as it has it: before the clean-up that
/// the answer does not depend on (a proxy's removal, an empty cgroup's). Dropped unsent, the
/// caller sees the runner as failed. It also carries whether the call's decision is on disk
/// yet ([`Cleared`]).
pub struct Reply<'a>(Option<Deliver<'a>>, Cleared, EgressSink);

/// Where a runner leaves what a call's proxy did (its report's [`Summary`]), before the
/// answer leaves, for the caller to put in the call's outcome record.
#[derive(Clone, Debug, Default)]
pub struct EgressSink(Arc<Mutex<Option<Summary>>>);

impl EgressSink {
    /// What the runner left, once.
    pub fn take(&self) -> Option<Summary> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    fn put(&self, summary: Summary) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(summary);
    }
}

/// Whether a call's decision record is on disk (docs/design.md#audit: audited before anything
/// runs). brokerd writes and syncs it while the runner makes the sandbox ready; the runner
/// gives the tool its input, and an http_fetch its proxy, only once it is. A record that could
/// not be written stops the call there: the tool never got its input, so nothing ran.
#[derive(Clone, Debug)]
pub struct Cleared(Arc<(Mutex<Option<bool>>, Condvar)>);

impl Cleared {
    /// A decision already on disk.
    pub fn already() -> Cleared {
        Cleared(Arc::new((Mutex::new(Some(true)), Condvar::new())))
    }

    /// A decision being written; [`Cleared::decide`] says how it went.
    pub fn pending() -> Cleared {
        Cleared(Arc::new((Mutex::new(None), Condvar::new())))
    }

    /// Says how the record went; the first word stands.
    pub fn decide(&self, on_disk: bool) {
        let (state, changed) = &*self.0;
        state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(on_disk);
        changed.notify_all();
    }

    /// Decides "not on disk" when dropped, unless decided before: a writer that goes away
    /// (a dropped future, a panic) never leaves a runner waiting out its time limit.
    pub fn undecided_on_drop(&self) -> UndecidedOnDrop {
        UndecidedOnDrop(self.clone())
    }

    /// True once the decision is on disk; false if it could not be written, or it is still
    /// unknown at `deadline`.
    pub fn wait(&self, deadline: Instant) -> bool {
        let (state, changed) = &*self.0;
        let mut got = state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(on_disk) = *got {
                return on_disk;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            got = changed
                .wait_timeout(got, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

/// When each step of a call must be over, fixed as the runner takes the call, so that no
/// step's wait lengthens the next: the decision must be on disk within the tool's time limit,
/// the proxy up within its start budget, and the tool done within its time limit, and nothing
/// of the call runs past the time limit plus the proxy's budget (`RunnerConfig::call_budget`,
/// before its stop). A decision that reaches the disk late shortens the tool's time; it never
/// makes the call longer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadlines {
    /// The decision must be on disk by then.
    decided: Instant,
    /// No step of the call runs past this (the stop that may follow aside).
    ends: Instant,
}

impl Deadlines {
    /// From now, for `spec`; `egress_start` is the proxy's budget, counted for http_fetch only.
    pub(crate) fn new(spec: &RunSpec, egress_start: Duration) -> Deadlines {
        let now = Instant::now();
        let proxy = match spec.egress {
            Some(_) => egress_start,
            None => Duration::ZERO,
        };
        Deadlines {
            decided: now + spec.timeout,
            ends: now + spec.timeout + proxy,
        }
    }

    /// The wait for the decision's record ends then.
    pub(crate) fn decided(&self) -> Instant {
        self.decided
    }

    /// A step that may take `limit` from now: it ends then, or at the call's end if sooner.
    pub(crate) fn step(&self, limit: Duration) -> Instant {
        (Instant::now() + limit).min(self.ends)
    }
}

/// See [`Cleared::undecided_on_drop`].
pub struct UndecidedOnDrop(Cleared);

impl Drop for UndecidedOnDrop {
    fn drop(&mut self) {
        self.0.decide(false);
    }
}

/// The log line and answer of a call stopped because its decision could not be put on disk:
/// the sandbox is stopped before its tool got its input (brokerd answers that the audit
/// failed).
pub(crate) fn not_cleared(spec: &RunSpec) -> RunError {
    could_not_run(
        spec,
        "the call's decision was not on disk in time (its record could not be written, or not within the tool's time limit); its sandbox was stopped before the tool got its input",
    )
}

/// `boxmaker-<session>-<call>-<n>`: the name of a call's container or sandbox, `n` counting
/// them in this process (`count`). The sweep and `brokerd ps` know brokerd's by it
/// (docs/design.md#the-podman-runner).
pub(crate) fn sandbox_name(count: &std::sync::atomic::AtomicU64, spec: &RunSpec) -> String {
    let n = count.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
    format!("boxmaker-{}-{}-{n}", spec.session, spec.call)
}

/// The operator's log line for a call that found its backend unavailable, and the answer:
/// `what` went wrong, then `detail` (what the program printed can quote the model's text, so
/// it is redacted), then the runbook entry that says what to do.
pub(crate) fn unavailable(
    spec: &RunSpec,
    why: Unavailable,
    what: &str,
    detail: &str,
    runbook: &str,
) -> RunError {
    let answer = RunError::Unavailable(why);
    call_line!(
        error,
        spec,
        answer,
        "{what}: {}; see {runbook}",
        boxmaker_policy::redact::redact(detail.trim_end())
    );
    answer
}

/// The operator's log line for a call that could not run, and its fixed answer.
pub(crate) fn could_not_run(spec: &RunSpec, why: &str) -> RunError {
    let answer = RunError::Failed(Failure::CouldNotRun);
    call_line!(error, spec, answer, "{why}");
    answer
}

/// What takes a call's answer to whoever waits for it.
type Deliver<'a> = Box<dyn FnOnce(Result<RunOutput, RunError>) + Send + 'a>;

impl<'a> Reply<'a> {
    /// A reply for a call whose decision is already on disk.
    pub fn new(to: impl FnOnce(Result<RunOutput, RunError>) + Send + 'a) -> Reply<'a> {
        Reply(
            Some(Box::new(to)),
            Cleared::already(),
            EgressSink::default(),
        )
    }

    /// A reply for a call whose decision is still being written.
    pub fn after(
        cleared: Cleared,
        to: impl FnOnce(Result<RunOutput, RunError>) + Send + 'a,
    ) -> Reply<'a> {
        Reply(Some(Box::new(to)), cleared, EgressSink::default())
    }

    /// Has the runner leave what the call's proxy did in `sink`.
    pub fn egress_to(mut self, sink: EgressSink) -> Reply<'a> {
        self.2 = sink;
        self
    }

    pub fn cleared(&self) -> &Cleared {
        &self.1
    }

    /// What the call's proxy did, for the caller's record; given before [`Reply::send`].
    pub fn report_egress(&self, summary: Summary) {
        self.2.put(summary);
    }

    pub fn send(mut self, answer: Result<RunOutput, RunError>) {
        if let Some(to) = self.0.take() {
            to(answer);
        }
    }
}

/// The answer of a [`Runner::run_replying`], given once all of the call is over, clean-up
/// included: what `run` means for a runner that replies early.
pub fn run_to_the_end(run: impl FnOnce(Reply<'_>)) -> Result<RunOutput, RunError> {
    let got = std::sync::Mutex::new(None);
    run(Reply::new(|answer| {
        *got.lock().unwrap_or_else(|p| p.into_inner()) = Some(answer);
    }));
    got.into_inner()
        .unwrap_or_else(|p| p.into_inner())
        .unwrap_or(Err(RunError::Unavailable(Unavailable::RunnerUnavailable)))
}

/// Clean-ups still under way after their call's answer left. A call that is about to give a
/// tool its way out (http_fetch) first waits for every clean-up that began before it, because
/// one that cannot confirm its proxy gone poisons network work (docs/design.md#runners), and the
/// poisoning must be seen before the next tool runs, as when clean-up came before the answer.
#[derive(Debug, Default)]
pub struct Settling {
    /// The next ticket, and the tickets of the clean-ups under way.
    state: std::sync::Mutex<(u64, std::collections::BTreeSet<u64>)>,
    settled: std::sync::Condvar,
}

/// One clean-up under way; dropping it says it is done.
#[derive(Debug)]
pub struct Cleaning<'a> {
    settling: &'a Settling,
    ticket: u64,
}

impl Settling {
    fn state(&self) -> std::sync::MutexGuard<'_, (u64, std::collections::BTreeSet<u64>)> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a clean-up as under way from now until the guard is dropped.
    pub fn begin(&self) -> Cleaning<'_> {
        let mut st = self.state();
        let ticket = st.0;
        st.0 += 1;
        st.1.insert(ticket);
        Cleaning {
            settling: self,
            ticket,
        }
    }

    /// Waits until every clean-up begun before now has finished, at most until `deadline`;
    /// false if one was still under way then.
    pub fn wait_for_earlier(&self, deadline: std::time::Instant) -> bool {
        let mut st = self.state();
        let now_ticket = st.0;
        loop {
            if st.1.first().is_none_or(|&t| t >= now_ticket) {
                return true;
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return false;
            }
            st = match self.settled.wait_timeout(st, left) {
                Ok((st, _)) => st,
                Err(p) => p.into_inner().0,
            };
        }
    }
}

impl Drop for Cleaning<'_> {
    fn drop(&mut self) {
        self.settling.state().1.remove(&self.ticket);
        self.settling.settled.notify_all();
    }
}

/// A sandbox backend. Blocking: brokerd calls it from a blocking task, and it must return
/// within the spec's time limit plus a small bound, whatever the sandbox does.
pub trait Runner: Send + Sync {
    /// Runs the call; returns once everything it started is stopped and removed.
    fn run(&self, spec: &RunSpec) -> Result<RunOutput, RunError>;

    /// Runs the call as `run` does, but hands the answer to `reply` as soon as it is known;
    /// returns once the clean-up is done (or has poisoned the runner). brokerd counts the
    /// call, and holds its slot, until then.
    ///
    /// A runner that starts nothing before its tool runs only has to wait for the decision.
    fn run_replying(&self, spec: &RunSpec, reply: Reply<'_>) {
        if !reply.cleared().wait(Instant::now() + spec.timeout) {
            return reply.send(Err(not_cleared(spec)));
        }
        reply.send(self.run(spec));
    }

    /// Whether a sandbox or proxy this runner asked to die could not be confirmed dead
    /// (containment poisoning, docs/design.md#preflight-and-poisoning): http_fetch answers
    /// unavailable until restart.
    fn poisoned(&self) -> bool {
        false
    }

    /// What of the configured confinement this host would not apply (a cgroup knob that
    /// cannot be set), one line each, in the order first seen. Sandboxes still run; brokerd
    /// logs, audits and shows each in `status`.
    fn weakened(&self) -> Vec<String> {
        Vec::new()
    }

    /// Why no sandbox can ever start here as configured, when the runner has seen it: the
    /// program absent or not executable, the kernel refusing it
    /// (docs/design.md#preflight-and-poisoning). Such a failure is remembered; any other is tried
    /// again.
    fn terminal_failure(&self) -> Option<String> {
        None
    }

    /// Removes every sandbox and egress directory this service user's brokerd left behind
    /// (a crash, or calls still running at the end of a shutdown); returns how many.
    fn sweep(&self) -> Result<usize, SweepError> {
        Ok(0)
    }

    /// Whether this runner's sandboxes set HOME and TMPDIR to /tmp, which the start-up
    /// preflight then checks (bwrap's argument list sets them; Podman's,
    /// docs/design.md#the-podman-runner, sets no environment).
    fn sets_home_and_tmpdir(&self) -> bool {
        false
    }

    /// Whether a read-only call's staged layer is writable all the same: Podman's overlay
    /// volume takes no `ro` (docs/design.md#staged-writes-and-owners), so what such a call
    /// writes lands in the session's layer, and brokerd bounds and records it as a writing
    /// call's. bwrap mounts a read-only call's layer with no upper directory.
    fn read_only_layers_write(&self) -> bool {
        false
    }

    /// The cgroup v2 files this runner sets its sandboxes' limits in, each with the value a
    /// sandbox reads back from it, which the preflight checks with `enforce_limits`. `None`:
    /// the configured `pids.max` and `memory.max` (what Podman's `--pids-limit` and `--memory`
    /// set).
    fn limit_files(&self) -> Option<Vec<(&'static str, String)>> {
        None
    }
}

/// The runner of a brokerd without `[runner]`: the broker refuses every call that would run
/// before it gets here, so it is never asked; if it were, nothing would run.
pub struct NoRunner;

impl Runner for NoRunner {
    fn run(&self, _spec: &RunSpec) -> Result<RunOutput, RunError> {
        Err(RunError::Unavailable(Unavailable::RunnerUnavailable))
    }
}

/// Why the start-up or shutdown sweep could not finish.
#[derive(Debug, thiserror::Error)]
#[error("the sweep of leftover sandboxes failed: {0}")]
pub struct SweepError(pub String);

impl SweepError {
    /// A sweep's answer from its parts, each how many things it removed and the removals that
    /// failed: how many things went in all, or every removal that failed, in order.
    pub fn outcome(
        parts: impl IntoIterator<Item = (usize, Vec<String>)>,
    ) -> Result<usize, SweepError> {
        let (mut removed, mut failed) = (0, Vec::new());
        for (n, failures) in parts {
            removed += n;
            failed.extend(failures);
        }
        if failed.is_empty() {
            Ok(removed)
        } else {
            Err(SweepError(failed.join("; ")))
        }
    }
}

/// What one call is in either backend, with the steps that differ left to [`Steps`]: the
/// spec's own checks, the backend's remembered refusal, http_fetch turned off by poisoning
/// (docs/design.md#preflight-and-poisoning), the run, its log line, the answer, and then the
/// clean-up the answer does not depend on, counted in the backend's [`Settling`] from before the
/// answer leaves so that a call that starts after it waits for it.
fn run_call<S: Steps>(backend: &S, spec: &RunSpec, reply: Reply<'_>) {
    let started = std::time::Instant::now();
    if let Some(what) = spec.malformation() {
        return reply.send(Err(malformed(spec, &what)));
    }
    if let Some(refusal) = backend.refusal(spec, "remembered from an earlier call") {
        return reply.send(Err(refusal));
    }
    if spec.egress.is_some() && backend.poisoned() {
        return reply.send(Err(backend.poisoned_answer(spec, FETCH_OFF)));
    }
    // The writable mounts' protected targets, held until the sandbox is gone.
    let held = match backend
        .protector()
        .hold(&spec.mounts, started + spec.timeout)
    {
        Ok(held) => held,
        Err(e) => return reply.send(Err(unprotected(spec, e))),
    };
    let ran = match backend.run_call(spec, &held, reply.cleared()) {
        Ok(ran) => ran,
        Err(e) => return reply.send(Err(e)),
    };
    drop(held);
    log_finished(spec, &ran.sandbox, &ran.answer, started);
    // A shell call's proxy reports each connection (docs/design.md#shell-and-its-egress-proxy).
    if spec.egress.as_ref().is_some_and(|e| e.bounds.is_some()) {
        let dir = egress::report_dir(&backend.egress_dir_of(&ran.sandbox));
        reply.report_egress(egress::read_report(&dir));
    }
    let cleaning = ran.leftovers.as_ref().map(|_| backend.settling().begin());
    reply.send(ran.answer);
    drop(ran.leftovers);
    drop(cleaning);
}

/// The operator's log line for protected targets that could not be held, and the answer.
fn unprotected(spec: &RunSpec, e: protected::Unprotected) -> RunError {
    if let protected::Unprotected::Changed(e) = e {
        return mount_changed(spec, e);
    }
    let answer = RunError::Unprotected(e);
    call_line!(warn, spec, answer, "{answer}");
    answer
}

/// The detail of the `unavailable` line of a call with a way out while containment is poisoned.
pub(crate) const FETCH_OFF: &str = "network work (http_fetch, shell with shell_hosts) is off";

/// The steps of a call that differ between the backends; [`run_call`] is the rest.
trait Steps: Runner {
    /// What a call leaves to stop and remove after its answer has left: dropping it does so.
    type Leftovers<'a>
    where
        Self: 'a;

    /// The backend's own failure, remembered until restart.
    type Terminal: std::fmt::Display;

    /// The backend's words for its troubles.
    const WORDS: trouble::Words;

    /// The failure remembered until restart, if there is one.
    fn remembered(&self) -> Option<Self::Terminal>;

    /// Why no call may start now: a failure remembered until restart, logged with `detail`.
    fn refusal(&self, spec: &RunSpec, detail: &str) -> Option<RunError> {
        let t = self.remembered()?;
        Some(trouble::unavailable(
            spec,
            trouble::Trouble::Terminal(t),
            detail,
            &Self::WORDS,
        ))
    }

    /// The answer of an http_fetch while containment is poisoned, logged with `detail`.
    fn poisoned_answer(&self, spec: &RunSpec, detail: &str) -> RunError {
        let t = trouble::Trouble::<Self::Terminal>::Poisoned;
        trouble::unavailable(spec, t, detail, &Self::WORDS)
    }

    /// Finds and holds the protected targets of writable mounts.
    fn protector(&self) -> &protected::Protector;

    /// Runs the call. `Err`: nothing could start (already logged), so there is nothing to
    /// clean and no "call finished" line.
    ///
    /// The tool gets its input, and an http_fetch its proxy, only once `cleared` says so.
    /// `held`'s targets are bound read-only over their writable mounts.
    fn run_call<'a>(
        &'a self,
        spec: &'a RunSpec,
        held: &protected::Held<'_>,
        cleared: &Cleared,
    ) -> Result<Ran<Self::Leftovers<'a>>, RunError>;

    /// The backend's clean-ups under way.
    fn settling(&self) -> &Settling;

    /// The egress directory of the sandbox called `name`.
    fn egress_dir_of(&self, name: &str) -> std::path::PathBuf;

    /// The answer of an http_fetch whose way out waited until `deadline` for the clean-ups of
    /// calls answered before it, logged with `detail`.
    fn earlier_clean_up_answer(&self, spec: &RunSpec, detail: &str) -> RunError {
        let t = trouble::Trouble::<Self::Terminal>::EarlierCleanUp;
        trouble::unavailable(spec, t, detail, &Self::WORDS)
    }

    /// Before a tool gets its way out: the proxies of calls answered before this one are
    /// stopped, or the runtime is poisoned, and it is not (docs/design.md#runners). `waited`
    /// is what the log says the wait was allowed.
    fn way_out_clear(
        &self,
        spec: &RunSpec,
        deadline: std::time::Instant,
        waited: std::time::Duration,
    ) -> Result<(), RunError> {
        if !self.settling().wait_for_earlier(deadline) {
            let detail = format!("waited {waited:?}");
            return Err(self.earlier_clean_up_answer(spec, &detail));
        }
        if self.poisoned() {
            return Err(self.poisoned_answer(spec, FETCH_OFF));
        }
        Ok(())
    }
}

/// The log line of a tool that ran and failed (`program` exited with `status`), with what it
/// wrote on standard error, redacted.
fn tool_failed_line(spec: &RunSpec, program: &str, status: &dyn std::fmt::Display, stderr: &str) {
    tracing::info!(
        session = %spec.session,
        call = %spec.call,
        tool = %spec.tool,
        "{program} exited with {status}; its standard error: {}",
        boxmaker_policy::redact::redact(stderr.trim_end())
    );
}

/// A call that ran: its container or sandbox name, its answer, and what is left to clean.
struct Ran<L> {
    pub sandbox: String,
    pub answer: Result<RunOutput, RunError>,
    pub leftovers: Option<L>,
}

/// A spec that should never have reached a runner (the protocol and config check these).
fn malformed(spec: &RunSpec, what: &str) -> RunError {
    could_not_run(
        spec,
        &format!("refusing to run a malformed RunSpec: {what}"),
    )
}

/// The operator's log line for a mount source that changed, and the call's answer.
pub(crate) fn mount_changed(spec: &RunSpec, e: MountChanged) -> RunError {
    let path = e.path.display().to_string();
    let answer = RunError::MountChanged(e);
    call_line!(
        error,
        spec,
        answer,
        path,
        "{answer}; see {}",
        proto::runbook::GRANT_DIRECTORY_CHANGED
    );
    answer
}

/// The check of `toolset`: a shell call on it, with the shell time limit of `rc`, asking its
/// `/bin/toolkit` for its version and its `/bin/sh` whether it is busybox's.
pub fn toolset_spec(
    rc: Option<&boxmaker_config::RunnerConfig>,
    toolset: &boxmaker_config::Toolset,
) -> RunSpec {
    let command = format!(
        "{} {} && case \"$(/bin/sh --help 2>&1)\" in *BusyBox*) echo busybox-sh;; esac",
        proto::tools::TOOLKIT,
        proto::tools::VERSION_SUBCOMMAND
    );
    let input =
        serde_json::to_vec(&proto::tools::ShellArgs { command, cwd: None }).unwrap_or_default();
    RunSpec {
        session: Ident::fixed("preflight"),
        call: Ident::fixed("toolset"),
        tool: ToolName::Shell,
        input,
        mounts: Vec::new(),
        egress: None,
        timeout: Duration::from_millis(rc.map_or(30_000, |r| r.shell_ms)),
        staged_limit: None,
        toolset: Some(toolset.clone()),
        limits: Default::default(),
        cache: None,
    }
}

/// One log line per finished call, the same for every backend (`sandbox` is the container or
/// sandbox name).
pub(crate) fn log_finished(
    spec: &RunSpec,
    sandbox: &str,
    answer: &Result<RunOutput, RunError>,
    started: std::time::Instant,
) {
    let (status, truncated) = match answer {
        Ok(out) => (Ended::Result, out.truncated),
        Err(e) => (e.ended(), false),
    };
    tracing::info!(
        session = %spec.session,
        call = %spec.call,
        tool = %spec.tool,
        sandbox,
        status = status.as_str(),
        truncated,
        duration_ms = started.elapsed().as_millis() as u64,
        "call finished"
    );
}

/// How a call ended: a record's `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ended {
    /// The tool ran; its output was the answer.
    Result,
    /// The tool ran and failed (a fixed sentence).
    Failed,
    /// Nothing could run (a fixed sentence).
    Unavailable,
    /// A grant directory changed under brokerd: refused after all.
    Refused,
    /// No slot in time: answered busy.
    Busy,
    /// The owner declined.
    Cancelled,
}

impl Ended {
    /// The word on disk (and in the journal's `status` field).
    pub fn as_str(self) -> &'static str {
        match self {
            Ended::Result => "result",
            Ended::Failed => "failed",
            Ended::Unavailable => "unavailable",
            Ended::Refused => "refused",
            Ended::Busy => "busy",
            Ended::Cancelled => "cancelled",
        }
    }
}

impl RunError {
    /// How a call that got this error ended, in the audit's and the journal's words.
    pub fn ended(&self) -> Ended {
        match self {
            RunError::Failed(_) => Ended::Failed,
            RunError::Unavailable(_) => Ended::Unavailable,
            RunError::MountChanged(_) | RunError::Unprotected(_) => Ended::Refused,
        }
    }
}

#[cfg(test)]
mod tests;
