//! The Podman runtime: one fresh rootless container per call (seed 003 section 6).
//!
//! The argument lists are built by [`PodmanRuntime::tool_args`] and
//! [`PodmanRuntime::egress_args`], in the seed's order, as separate `OsString`s (never a shell
//! string); golden files under `tests/fixtures/podman/` hold them byte for byte.
//!
//! Every podman process brokerd starts runs in its own process group and is waited for with a
//! bound, so a podman that hangs cannot hang a call past its time limit plus
//! [`HELPER_TIMEOUT`]s. If a container or proxy that brokerd asked to die cannot be confirmed
//! gone, the runtime is poisoned and http_fetch answers `unavailable` until restart (DESIGN.md
//! "Runners", containment poisoning).

use std::ffi::OsString;
use std::io::ErrorKind;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use super::egress::{self, make_private_dir, EGRESS_MOUNT};
use super::mounts::check_mounts;
pub use super::output::STDERR_KEEP;
use super::output::{decode, verdict, Capture, Event, Streams, Verdict, DRAIN_GRACE};
use super::pidfd::Pidfd;
use super::protected::{Held, Over, Protector, Unprotected};
use super::{
    dies_with_brokerd, mount_changed, not_cleared, Cleared, Deadlines, Egress, Failure, Ran, Reply,
    RunError, RunOutput, RunSpec, Runner, Settling, Steps, SweepError, Unavailable,
};
use crate::config::RunnerConfig;
// What podman and the tools print can quote the model's text: redacted before it is logged.
use crate::redact::redact;

/// How long a podman `kill` or `rm` may take before brokerd gives up on it (and poisons).
/// Two of them, after the default shell limit of 100 s, still end under loopd's 120 s.
pub const HELPER_TIMEOUT: Duration = Duration::from_secs(8);
/// How often a running podman process is looked at when no pidfd could be had for it (with
/// one, the wait wakes on its exit).
const POLL: Duration = Duration::from_millis(10);
/// How long standard error may take to end once its podman process has exited.
const STDERR_GRACE: Duration = Duration::from_millis(100);

/// Numbers the containers of this brokerd process (the `<n>` of seed 003 section 6).
static CONTAINERS: AtomicU64 = AtomicU64::new(0);

/// What brokerd's log says when nothing could run; each line ends with the runbook pointer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
enum Trouble {
    #[error("podman could not be started")]
    NoPodman,
    #[error("podman could not start the container")]
    PodmanFailed,
    #[error("the egress directory could not be made")]
    EgressDir,
    #[error("the egress proxy did not start")]
    ProxyFailed,
    #[error("the egress proxy's socket did not appear in time")]
    ProxySocket,
    #[error("a container brokerd stopped earlier could not be confirmed gone, so http_fetch is off until restart")]
    Poisoned,
    #[error("an earlier call's egress proxy was not confirmed removed in time")]
    EarlierCleanUp,
}

/// Runs calls with rootless Podman.
pub struct PodmanRuntime {
    podman: PathBuf,
    image: String,
    egress_network: String,
    output_cap: usize,
    memory: String,
    pids: u32,
    home: PathBuf,
    egress_start: Duration,
    helper_timeout: Duration,
    poisoned: AtomicBool,
    /// Proxy removals still under way after their call's answer left.
    settling: Settling,
    /// Why podman can never start here (absent, not executable), once seen.
    terminal: std::sync::Mutex<Option<String>>,
    /// The protected targets of writable mounts (docs/design.md#protected-targets).
    protector: Protector,
}

impl PodmanRuntime {
    pub fn new(config: &RunnerConfig) -> PodmanRuntime {
        PodmanRuntime {
            podman: config.podman.clone(),
            image: config.image.clone(),
            egress_network: config.egress_network.clone(),
            output_cap: config.output_cap,
            memory: config.memory.clone(),
            pids: config.pids,
            home: config.home.clone(),
            egress_start: Duration::from_millis(config.egress_start_ms),
            helper_timeout: HELPER_TIMEOUT,
            poisoned: AtomicBool::new(false),
            settling: Settling::default(),
            terminal: std::sync::Mutex::new(None),
            protector: Protector::new(config.protect),
        }
    }

    /// Bounds each podman `kill`, `rm` differently from [`HELPER_TIMEOUT`] (tests use a short
    /// one).
    pub fn with_helper_timeout(mut self, limit: Duration) -> PodmanRuntime {
        self.helper_timeout = limit;
        self
    }

    /// Whether a container or proxy that brokerd stopped could not be confirmed gone.
    pub fn poisoned(&self) -> bool {
        self.poisoned.load(Ordering::SeqCst)
    }

    /// `boxmaker-<session>-<call>-<n>`, n counting containers in this process.
    pub fn container_name(spec: &RunSpec) -> String {
        let n = CONTAINERS.fetch_add(1, Ordering::SeqCst) + 1;
        format!("boxmaker-{}-{}-{n}", spec.session, spec.call)
    }

    /// `<home>/run/egress/<name>/`
    pub fn egress_dir(&self, name: &str) -> PathBuf {
        egress::egress_dir(&self.home, name)
    }

    /// The tool container's `podman` arguments, in the order of docs/design.md#the-podman-runner.
    pub fn tool_args(&self, spec: &RunSpec, name: &str) -> Vec<OsString> {
        self.tool_args_with(spec, name, &[])
    }

    /// `tool_args` with the mounts of the writable mounts' protected targets, after every
    /// grant directory's volume: each pin writable onto itself, each target read-only (Podman
    /// mounts a parent before what is inside it).
    pub fn tool_args_with(
        &self,
        spec: &RunSpec,
        name: &str,
        protected: &[Over<'_>],
    ) -> Vec<OsString> {
        let mut a: Vec<OsString> = vec![
            "run".into(),
            "--rm".into(),
            "-i".into(),
            format!("--name={name}").into(),
            "--label=boxmaker=tool".into(),
            "--network=none".into(),
            "--read-only".into(),
            "--cap-drop=all".into(),
            "--security-opt=no-new-privileges".into(),
            "--userns=keep-id".into(),
            format!("--pids-limit={}", self.pids).into(),
            format!("--memory={}", self.memory).into(),
            "--tmpfs=/tmp:rw,size=64m,mode=1777".into(),
        ];
        for m in &spec.mounts {
            match &m.stage {
                // The session's layer over a staged grant directory. Podman's overlay volume
                // is writable even for a read-only call: what such a call writes lands in the
                // layer too, where the owner sees it (docs/design.md#the-podman-runner).
                Some(s) => a.push(overlay_volume(&m.path, s)),
                None => a.push(volume(&m.path, &m.path, if m.write { "rw" } else { "ro" })),
            }
        }
        for o in protected {
            a.push(volume(o.path, o.path, if o.pin { "rw" } else { "ro" }));
        }
        if spec.egress.is_some() {
            a.push(volume(
                &self.egress_dir(name),
                Path::new(EGRESS_MOUNT),
                "rw",
            ));
        }
        a.push(self.image.clone().into());
        a.push(proto::tools::TOOLKIT.into());
        a.push(spec.tool.as_str().into());
        a
    }

    /// The egress proxy container's `podman` arguments (seed 003 section 6), with one
    /// `--allow-address <cidr>` pair per allowed range after `--allow` (DESIGN.md "Config").
    pub fn egress_args(&self, egress: &Egress, name: &str) -> Vec<OsString> {
        let mut a: Vec<OsString> = vec![
            "run".into(),
            "-d".into(),
            "--rm".into(),
            format!("--name={name}-egress").into(),
            "--label=boxmaker=egress".into(),
            format!("--network={}", self.egress_network).into(),
            "--read-only".into(),
            "--cap-drop=all".into(),
            "--security-opt=no-new-privileges".into(),
            "--userns=keep-id".into(),
            "--pids-limit=64".into(),
            "--memory=128m".into(),
            volume(&self.egress_dir(name), Path::new(EGRESS_MOUNT), "rw"),
            self.image.clone().into(),
        ];
        a.extend(egress.proxy_command());
        a
    }

    /// Writes the log line of an `unavailable` answer (DESIGN.md "Service": it ends with the
    /// runbook pointer) and gives the answer.
    fn unavailable(&self, spec: &RunSpec, trouble: Trouble, detail: &str) -> RunError {
        let why = match trouble {
            Trouble::EgressDir
            | Trouble::ProxyFailed
            | Trouble::ProxySocket
            | Trouble::Poisoned
            | Trouble::EarlierCleanUp => Unavailable::EgressUnavailable,
            Trouble::NoPodman | Trouble::PodmanFailed => Unavailable::RunnerUnavailable,
        };
        tracing::error!(
            session = %spec.session,
            call = %spec.call,
            tool = %spec.tool,
            status = "unavailable",
            "{trouble}: {}; see {}",
            redact(detail.trim_end()),
            why.runbook()
        );
        RunError::Unavailable(why)
    }

    /// Runs a podman `kill`, `rm` or `run -d`, giving up after `limit`.
    fn helper(&self, args: &[OsString], limit: Duration) -> Helper {
        match self.start_helper(args) {
            Ok(started) => started.finish(Instant::now() + limit),
            Err(e) => Helper::NotStarted(e),
        }
    }

    /// Starts a podman helper in a process group of its own, its standard error captured.
    fn start_helper(&self, args: &[OsString]) -> Result<Started, String> {
        let mut child = dies_with_brokerd(&mut Command::new(&self.podman))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .map_err(|e| e.to_string())?;
        let stderr = Capture::start(child.stderr.take(), STDERR_KEEP, false);
        Ok(Started { child, stderr })
    }

    /// `podman kill <name>`, then `podman rm -f <name>`, each bounded. Poisons the runtime
    /// (DESIGN.md "Runners") whenever the container cannot be confirmed gone: a step that
    /// hangs, or an `rm -f` that fails while `podman container exists` does not say it is gone.
    fn remove(&self, spec: &RunSpec, name: &str, with_kill: bool) {
        let poison = |what: String| {
            self.poisoned.store(true, Ordering::SeqCst);
            tracing::error!(
                session = %spec.session,
                call = %spec.call,
                container = name,
                "{what}; {}; see {}",
                Trouble::Poisoned,
                Unavailable::RunnerUnavailable.runbook()
            );
        };
        if with_kill {
            // A container that already exited makes `kill` fail: `rm -f` decides.
            let kill: Vec<OsString> = vec!["kill".into(), name.into()];
            if let Helper::TimedOut = self.helper(&kill, self.helper_timeout) {
                poison(format!(
                    "podman kill did not finish within {:?}",
                    self.helper_timeout
                ));
            }
        }
        let rm: Vec<OsString> = vec!["rm".into(), "-f".into(), name.into()];
        let failed = match self.helper(&rm, self.helper_timeout) {
            Helper::Exited(status, _) if status.success() => return,
            Helper::Exited(status, stderr) => {
                format!(
                    "podman rm -f exited with {status}: {}",
                    redact(stderr.trim_end())
                )
            }
            Helper::NotStarted(e) => format!("podman could not be started to remove it: {e}"),
            Helper::TimedOut => {
                return poison(format!(
                    "podman rm -f did not finish within {:?}",
                    self.helper_timeout
                ))
            }
        };
        if self.is_gone(name) {
            tracing::warn!(
                session = %spec.session,
                call = %spec.call,
                container = name,
                "{failed}; the container is gone all the same"
            );
        } else {
            poison(format!("{failed}, and the container may still exist"));
        }
    }

    /// Whether podman says no container `name` exists (`container exists` exits 1); anything
    /// else, an error or no answer included, is not a confirmation.
    fn is_gone(&self, name: &str) -> bool {
        let args: Vec<OsString> = vec!["container".into(), "exists".into(), name.into()];
        matches!(
            self.helper(&args, self.helper_timeout),
            Helper::Exited(status, _) if status.code() == Some(1)
        )
    }

    /// Makes the egress directory and starts the proxy; the guard removes both on every path.
    /// It returns once the proxy's socket exists (seed 003 section 6), when `podman run -d`
    /// may still be finishing: its outcome is confirmed after the tool
    /// ([`EgressGuard::confirm_started`]).
    fn start_egress<'a>(
        &'a self,
        spec: &'a RunSpec,
        egress: &Egress,
        name: &str,
        times: &Deadlines,
    ) -> Result<EgressGuard<'a>, RunError> {
        // One budget for starting the proxy and for its socket (seed 003 section 6: 5 s).
        let deadline = times.step(self.egress_start);
        let limit = deadline.saturating_duration_since(Instant::now());
        let mut guard = EgressGuard {
            runtime: self,
            spec,
            container: format!("{name}-egress"),
            dir: self.egress_dir(name),
            starter: None,
            started_by: deadline,
        };
        if let Err(e) = make_private_dir(&guard.dir) {
            let detail = format!("{}: {e}", guard.dir.display());
            return Err(self.unavailable(spec, Trouble::EgressDir, &detail));
        }
        let started = match self.start_helper(&self.egress_args(egress, name)) {
            Ok(started) => started,
            Err(e) => {
                let detail = format!("{}: {e}", self.podman.display());
                return Err(self.unavailable(spec, Trouble::NoPodman, &detail));
            }
        };
        // Taken before anything reaps it, so it names this podman process.
        let pidfd = Pidfd::of_child(&started.child).ok();
        guard.starter = Some(started);
        // Only wait for the socket to exist: its host path can exceed the 108 bytes of a
        // socket address, so brokerd never connects to it (DESIGN.md "Runners"). The wait
        // also ends when `podman run -d` does, which is then asked how it went.
        let mut appeared =
            egress::wait_for_socket(&guard.dir, deadline, pidfd.as_ref().map(Pidfd::as_fd));
        if !appeared {
            guard.confirm_started()?;
            appeared = egress::wait_for_socket(&guard.dir, deadline, None);
        }
        if appeared {
            // The proxies of calls answered before this one are removed, or the runtime is
            // poisoned, before this tool gets its way out (DESIGN.md "Runners").
            if !self.settling.wait_for_earlier(deadline) {
                let detail = format!("waited {limit:?}");
                return Err(self.unavailable(spec, Trouble::EarlierCleanUp, &detail));
            }
            if self.poisoned() {
                return Err(self.unavailable(spec, Trouble::Poisoned, "http_fetch is off"));
            }
            return Ok(guard);
        }
        let detail = format!(
            "{} did not appear within {:?}",
            guard.dir.join(egress::EGRESS_SOCKET).display(),
            limit
        );
        Err(self.unavailable(spec, Trouble::ProxySocket, &detail))
    }

    /// Runs the tool container and answers by the exit-code table of seed 003 section 6.
    fn run_tool(
        &self,
        spec: &RunSpec,
        name: &str,
        protected: &[Over<'_>],
        cleared: &Cleared,
        times: &Deadlines,
    ) -> Result<RunOutput, RunError> {
        let spawned = dies_with_brokerd(&mut Command::new(&self.podman))
            .args(self.tool_args_with(spec, name, protected))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                let detail = format!("{}: {e}", self.podman.display());
                // Absent or not executable: no retry can mend it (seed 000 5.1.6).
                if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::PermissionDenied)
                    || e.raw_os_error() == Some(libc::ENOEXEC)
                {
                    *self.terminal.lock().unwrap_or_else(|p| p.into_inner()) = Some(detail.clone());
                }
                return Err(self.unavailable(spec, Trouble::NoPodman, &detail));
            }
        };
        let deadline = times.step(spec.timeout);
        // The container was being made while brokerd put the decision on disk; its tool gets
        // its input only now.
        if !cleared.wait(deadline) {
            self.stop(spec, name, &mut child);
            return Err(not_cleared(spec));
        }
        let mut streams = Streams::new(&mut child, &spec.input, self.output_cap);
        // Taken before anything reaps the child, so it names this podman process.
        let pidfd = Pidfd::of_child(&child).ok();

        let status = loop {
            // Wakes on podman's exit, on standard output passing the cap, or at the deadline
            // (without a pidfd, every look), serving the streams meanwhile.
            let event = streams.wait(pidfd.as_ref().map(Pidfd::as_fd), deadline);
            if event == Event::Overflowed {
                // DESIGN.md "Output": the capped output is the answer, not a time-out.
                self.stop(spec, name, &mut child);
                return Ok(RunOutput {
                    content: decode(streams.stdout().to_vec(), true),
                    truncated: true,
                });
            }
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) => {}
                Err(e) => {
                    tracing::error!(session = %spec.session, call = %spec.call, "waiting for podman failed: {e}");
                    self.stop(spec, name, &mut child);
                    return Err(RunError::Failed(Failure::UnexpectedStatus));
                }
            }
            if Instant::now() >= deadline {
                self.stop(spec, name, &mut child);
                return Err(RunError::Failed(Failure::TimedOut));
            }
        };
        streams.drain(Instant::now() + DRAIN_GRACE);
        let truncated = streams.overflowed();
        let answer = match verdict(status, streams.stdout().to_vec(), truncated) {
            Verdict::Output(out) => Ok(out),
            Verdict::Failed(f) => Err(RunError::Failed(f)),
            Verdict::RunnerFailed => {
                let detail = format!("podman exited with {status}: {}", streams.stderr_text());
                Err(self.unavailable(spec, Trouble::PodmanFailed, &detail))
            }
        };
        if answer.is_err() && !matches!(answer, Err(RunError::Unavailable(_))) {
            tracing::info!(
                session = %spec.session,
                call = %spec.call,
                tool = %spec.tool,
                "podman exited with {status}; its standard error: {}",
                redact(streams.stderr_text().trim_end())
            );
        }
        answer
    }

    /// Stops a running tool container: `podman kill`, `podman rm -f`, then the podman client.
    fn stop(&self, spec: &RunSpec, name: &str, child: &mut Child) {
        self.remove(spec, name, true);
        kill_group(child);
    }
}

impl PodmanRuntime {
    /// The IDs of every container of this user labelled `boxmaker` (tool or egress). Rootless
    /// Podman lists only the containers of the user that runs it, so the label and the user
    /// are the whole test: a name is never parsed, since `boxmaker-<session>-<call>-<n>` can
    /// be 140 characters and says nothing a label does not.
    pub fn labelled(&self) -> Result<Vec<String>, SweepError> {
        let args: Vec<OsString> = [
            "ps",
            "-a",
            "--no-trunc",
            "--filter",
            "label=boxmaker",
            "--format",
            "{{.ID}}",
        ]
        .into_iter()
        .map(OsString::from)
        .collect();
        let spawned = dies_with_brokerd(&mut Command::new(&self.podman))
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn();
        let mut child =
            spawned.map_err(|e| SweepError(format!("podman could not be started: {e}")))?;
        let stdout = Capture::start(child.stdout.take(), SWEEP_LIST_KEEP, false);
        let stderr = Capture::start(child.stderr.take(), STDERR_KEEP, false);
        let Some(status) = wait_until(&mut child, Instant::now() + self.helper_timeout) else {
            kill_group(&mut child);
            return Err(SweepError("podman ps did not answer in time".into()));
        };
        stdout.wait_done(Instant::now() + STDERR_GRACE);
        stderr.wait_done(Instant::now() + STDERR_GRACE);
        if !status.success() {
            return Err(SweepError(format!(
                "podman ps exited with {status}: {}",
                stderr.text().trim_end()
            )));
        }
        // Only container IDs are handed back to podman; any other line is ignored.
        Ok(stdout
            .text()
            .lines()
            .map(str::trim)
            .filter(|id| is_container_id(id))
            .map(str::to_string)
            .collect())
    }
}

/// A Podman container ID: 64 lower-case hex digits (12 when shortened).
fn is_container_id(s: &str) -> bool {
    matches!(s.len(), 12 | 64)
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// How much of `podman ps`'s listing the sweep reads.
const SWEEP_LIST_KEEP: usize = 1024 * 1024;

impl Runner for PodmanRuntime {
    fn poisoned(&self) -> bool {
        PodmanRuntime::poisoned(self)
    }

    fn terminal_failure(&self) -> Option<String> {
        self.terminal
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Removes every labelled container and every egress directory (DESIGN.md "Service": the
    /// start-up sweep; also the end of a shutdown).
    fn sweep(&self) -> Result<usize, SweepError> {
        let ids = self.labelled()?;
        let mut removed = 0;
        let mut failed = Vec::new();
        for name in &ids {
            // A running container's PID 1 (toolkit) ignores SIGTERM, so a bare `rm -f` waits
            // out podman's 10 s stop timeout, as long as the helper's own limit: kill first, as
            // `remove` does. A container that is not running makes `kill` fail; `rm -f` decides.
            let kill: Vec<OsString> = vec!["kill".into(), name.into()];
            let _ = self.helper(&kill, self.helper_timeout);
            let args: Vec<OsString> = vec!["rm".into(), "-f".into(), name.into()];
            match self.helper(&args, self.helper_timeout) {
                Helper::Exited(status, _) if status.success() => removed += 1,
                Helper::Exited(status, err) => {
                    failed.push(format!("{name}: {status}: {}", err.trim_end()))
                }
                Helper::TimedOut => {
                    failed.push(format!("{name}: podman rm -f did not finish in time"))
                }
                Helper::NotStarted(e) => failed.push(format!("{name}: {e}")),
            }
        }
        let (dirs, dir_failures) = egress::sweep(&self.home);
        removed += dirs;
        failed.extend(dir_failures);
        SweepError::outcome(removed, failed)
    }

    fn run(&self, spec: &RunSpec) -> Result<RunOutput, RunError> {
        super::run_to_the_end(|reply| self.run_replying(spec, reply))
    }

    fn run_replying(&self, spec: &RunSpec, reply: Reply<'_>) {
        super::run_call(self, spec, reply)
    }
}

impl Steps for PodmanRuntime {
    type Leftovers<'a> = EgressGuard<'a>;

    fn poisoned_answer(&self, spec: &RunSpec) -> RunError {
        self.unavailable(spec, Trouble::Poisoned, "http_fetch is off")
    }

    fn settling(&self) -> &Settling {
        &self.settling
    }

    fn protector(&self) -> &Protector {
        &self.protector
    }

    /// The answer leaves once the tool container is gone (`run --rm`); the proxy's `rm -f` and
    /// the egress directory's removal come after it, still within the call.
    fn run_call<'a>(
        &'a self,
        spec: &'a RunSpec,
        held: &Held<'_>,
        cleared: &Cleared,
    ) -> Result<Ran<EgressGuard<'a>>, RunError> {
        // Podman's --volume cannot carry a path with ':' or ','.
        let protected: Vec<Over<'_>> = held.mounts().into_iter().map(|(o, _)| o).collect();
        if let Some(o) = protected
            .iter()
            .find(|o| crate::args::check_grant_path(o.path).is_err())
        {
            let e = Unprotected::Unmountable(o.path.to_path_buf());
            tracing::warn!(session = %spec.session, call = %spec.call, status = "refused", "{e}");
            return Err(RunError::Unprotected(e));
        }
        // Podman takes its mount sources as paths (seed 003 section 6) and follows links in
        // them, so the grant's directories are checked before the run and again after it: a
        // directory swapped in between makes the call a refusal, and nothing it printed
        // reaches the model (see `runner::mounts`).
        if let Err(e) = check_mounts(&spec.mounts) {
            return Err(mount_changed(spec, e));
        }
        let name = PodmanRuntime::container_name(spec);
        let times = Deadlines::new(spec, self.egress_start);
        let mut proxy = None;
        let mut answer = match &spec.egress {
            // No way out is made before the decision is on disk.
            Some(_) if !cleared.wait(times.decided()) => Err(not_cleared(spec)),
            Some(egress) => match self.start_egress(spec, egress, &name, &times) {
                Ok(mut guard) => {
                    let answer = self.run_tool(spec, &name, &protected, cleared, &times);
                    // A proxy whose `podman run -d` failed after its socket appeared is still
                    // a proxy that did not start: the answer says so, whatever the tool did.
                    let started = guard.confirm_started();
                    proxy = Some(guard);
                    started.and(answer)
                }
                Err(e) => Err(e),
            },
            None => self.run_tool(spec, &name, &protected, cleared, &times),
        };
        if let Err(e) = check_mounts(&spec.mounts) {
            answer = Err(mount_changed(spec, e));
        }
        Ok(Ran {
            sandbox: name,
            answer,
            leftovers: proxy,
        })
    }
}

/// Removes the proxy container and the egress directory when the call ends, however it ends
/// (a panic included): no proxy outlives its call (seed 003 section 1).
pub(super) struct EgressGuard<'a> {
    runtime: &'a PodmanRuntime,
    spec: &'a RunSpec,
    container: String,
    dir: PathBuf,
    /// The proxy's `podman run -d`, until its outcome is known.
    starter: Option<Started>,
    /// When the proxy's start budget ends.
    started_by: Instant,
}

impl EgressGuard<'_> {
    /// How the proxy's `podman run -d` ended, waited for until the proxy's start budget ends
    /// (it is normally over by the time the socket is seen); `Err` is the logged answer of a
    /// proxy that did not start. Past the budget it is killed with its process group.
    fn confirm_started(&mut self) -> Result<(), RunError> {
        let Some(started) = self.starter.take() else {
            return Ok(());
        };
        let (rt, spec) = (self.runtime, self.spec);
        match started.finish(self.started_by) {
            Helper::Exited(status, _) if status.success() => Ok(()),
            Helper::Exited(status, stderr) => {
                let detail = format!("podman exited with {status}: {stderr}");
                Err(rt.unavailable(spec, Trouble::ProxyFailed, &detail))
            }
            Helper::TimedOut => {
                let detail = "podman run -d did not end within the proxy's start budget";
                Err(rt.unavailable(spec, Trouble::ProxyFailed, detail))
            }
            Helper::NotStarted(e) => Err(rt.unavailable(spec, Trouble::NoPodman, &e)),
        }
    }
}

impl Drop for EgressGuard<'_> {
    fn drop(&mut self) {
        // A `podman run -d` still under way is stopped first, or it could start the proxy
        // after its removal.
        if let Some(started) = self.starter.take() {
            started.finish(Instant::now());
        }
        self.runtime.remove(self.spec, &self.container, false);
        match std::fs::remove_dir_all(&self.dir) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(
                session = %self.spec.session,
                call = %self.spec.call,
                "could not remove {}: {e}",
                self.dir.display()
            ),
        }
    }
}

/// A podman helper under way: its process, in a group of its own, and its standard error.
struct Started {
    child: Child,
    stderr: Capture,
}

impl Started {
    /// How it ended, waited for until `deadline`; one still running then is killed with its
    /// process group.
    fn finish(mut self, deadline: Instant) -> Helper {
        match wait_until(&mut self.child, deadline) {
            Some(status) => {
                self.stderr.wait_done(Instant::now() + STDERR_GRACE);
                Helper::Exited(status, self.stderr.text())
            }
            None => {
                kill_group(&mut self.child);
                Helper::TimedOut
            }
        }
    }
}

/// How a podman `kill`, `rm` or `run -d` ended.
enum Helper {
    Exited(ExitStatus, String),
    TimedOut,
    NotStarted(String),
}

/// The process's status once it exits, or `None` at `deadline`.
/// Called only on a child not reaped yet, so its pidfd names it.
fn wait_until(child: &mut Child, deadline: Instant) -> Option<ExitStatus> {
    let pidfd = Pidfd::of_child(child).ok();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) => {}
            Err(_) => return None,
        }
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        match &pidfd {
            Some(p) => {
                p.wait_exit(deadline - now);
            }
            None => thread::sleep(POLL),
        }
    }
}

/// Kills a podman process and everything it started in its process group, then reaps it.
/// Called only before the process was reaped, so its group id is still ours.
fn kill_group(child: &mut Child) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // The group was made by process_group(0) for this child, which is not reaped yet, so
        // the id is not reused.
        let group = nix::unistd::Pid::from_raw(pid);
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
    }
    let _ = child.kill();
    let _ = wait_until(child, Instant::now() + Duration::from_secs(1));
}

/// `--volume=<host>:<inside>:<mode>`, built from bytes so any path survives.
/// `--volume=<dir>:<dir>:O,upperdir=<upper>,workdir=<work>`: Podman's overlay volume with the
/// session's layer as its upper directory.
fn overlay_volume(dir: &Path, stage: &super::StageMount) -> OsString {
    let mut v = volume(dir, dir, "O,upperdir=");
    v.push(&stage.upper);
    v.push(",workdir=");
    v.push(&stage.work);
    v
}

fn volume(host: &Path, inside: &Path, mode: &str) -> OsString {
    let mut v = OsString::from("--volume=");
    v.push(host);
    v.push(":");
    v.push(inside);
    v.push(":");
    v.push(mode);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volumes_keep_any_path() {
        let v = volume(Path::new("/srv/a b"), Path::new("/srv/a b"), "ro");
        assert_eq!(v, OsString::from("--volume=/srv/a b:/srv/a b:ro"));
    }
}
