//! The Podman runtime: one fresh rootless container per call
//! (docs/design.md#the-podman-runner).
//!
//! The argument lists are built by [`PodmanRuntime::tool_args`] and
//! [`PodmanRuntime::egress_args`] as separate `OsString`s (never a shell string); golden files
//! under `tests/fixtures/podman/` hold them byte for byte. What runs them: `process` (every
//! podman process, started through the clone spawner), `tool` (the tool container and its
//! answer), `fetch` (an http_fetch, its tool container beside its proxy), `layer` (a staged
//! layer's overlay volume that failed), `remove` (stops and the sweep, each looked at until
//! the container is gone), `orphans` (monitors of containers Podman forgot), `terminal` (the
//! failures remembered until restart).
//!
//! Every podman process brokerd starts runs in its own process group and is waited for with a
//! bound, so a podman that hangs cannot hang a call past its time limit plus
//! [`HELPER_TIMEOUT`]s. If a container or proxy that brokerd asked to die cannot be confirmed
//! gone, the runtime is poisoned and http_fetch answers `unavailable` until restart
//! (docs/design.md#preflight-and-poisoning).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::egress::{self, EGRESS_MOUNT};
use super::mounts::check_mounts;
pub use super::output::STDERR_KEEP;
use super::protected::{Held, Over, Protector, Unprotected};
use super::{
    mount_changed, Cleared, Deadlines, Egress, Ran, Reply, RunError, RunOutput, RunSpec, Runner,
    Settling, Steps, SweepError,
};
use boxmaker_config::{EgressNetwork, RunnerConfig};

mod fetch;
mod layer;
mod orphans;
mod process;
mod remove;
mod terminal;
mod tool;

use fetch::EgressGuard;
use process::{Helper, Program};
pub use terminal::Terminal;

/// How long a podman `kill`, or the `rm -f` of a container and the looks until it is gone, may
/// take before brokerd gives up on it: the stop budget's bound (`config::stop_budget`).
pub use boxmaker_config::HELPER_TIMEOUT;

use proto::podman::{EGRESS_LABEL, TOOL_LABEL};
/// The label of every container brokerd starts (`boxmaker=tool`, `boxmaker=egress`), by which
/// the sweep, `brokerd ps` and the end-to-end suite find them: written once, in
/// [`proto::podman`].
pub use proto::podman::{LABEL_FILTER, LABEL_VALUE};

/// Numbers the containers of this brokerd process (the `<n>` of
/// docs/design.md#the-podman-runner).
static CONTAINERS: AtomicU64 = AtomicU64::new(0);

/// What Podman ran into; each is one `unavailable` answer (`runner::trouble`).
type Trouble = super::trouble::Trouble<Terminal>;

/// Podman's words for its troubles; every one points to the runner's runbook entry.
const WORDS: super::trouble::Words = super::trouble::Words {
    program: "podman",
    build: "start the container",
    toolset: "the grant's toolset image is not in the service user's store",
    stopped: ("container", "gone"),
    proxy_gone: "removed",
    runbook: None,
};

/// Runs calls with rootless Podman.
pub struct PodmanRuntime {
    program: Program,
    image: String,
    egress_network: EgressNetwork,
    output_cap: usize,
    memory: String,
    pids: u32,
    home: PathBuf,
    egress_start: Duration,
    helper_timeout: Duration,
    poisoned: AtomicBool,
    /// Proxy removals still under way after their call's answer left.
    settling: Settling,
    /// Why no container can ever start here, once seen and confirmed.
    terminal: Mutex<Option<Terminal>>,
    /// The protected targets of writable mounts (docs/design.md#protected-targets).
    protector: Protector,
}

impl PodmanRuntime {
    pub fn new(config: &RunnerConfig) -> PodmanRuntime {
        PodmanRuntime {
            program: Program::new(&config.podman),
            image: config.image.clone(),
            egress_network: config.egress_network,
            output_cap: config.output_cap,
            memory: config.memory.clone(),
            pids: config.pids,
            home: config.home.clone(),
            egress_start: Duration::from_millis(config.egress_start_ms),
            helper_timeout: HELPER_TIMEOUT,
            poisoned: AtomicBool::new(false),
            settling: Settling::default(),
            terminal: Mutex::new(None),
            protector: Protector::new(config.protect),
        }
    }

    /// Bounds each podman `kill` and each removal differently from [`HELPER_TIMEOUT`] (tests
    /// use a short one).
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
        super::sandbox_name(&CONTAINERS, spec)
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
            TOOL_LABEL.into(),
            "--network=none".into(),
            "--read-only".into(),
            "--cap-drop=all".into(),
            "--security-opt=no-new-privileges".into(),
            "--userns=keep-id".into(),
            // The grant's own limits, at most [runner]'s (docs/design.md#grantsname).
            format!("--pids-limit={}", spec.limits.pids.unwrap_or(self.pids)).into(),
            format!(
                "--memory={}",
                spec.limits.memory.as_ref().unwrap_or(&self.memory)
            )
            .into(),
            "--tmpfs=/tmp:rw,size=64m,mode=1777".into(),
        ];
        for m in &spec.mounts {
            match &m.stage {
                // The session's layer over a staged grant directory. Podman's overlay volume
                // is writable even for a read-only call: what such a call writes lands in the
                // layer too, and the broker bounds and records it as a write
                // (`read_only_layers_write`, docs/design.md#staged-writes-and-owners).
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
        // The grant's own cache, over the sandbox's /tmp (docs/design.md#grant-caches).
        if let Some(c) = &spec.cache {
            a.push(volume(&c.dir, Path::new(proto::tools::TOOL_CACHE), "rw"));
        }
        // The grant's toolset, or the base image (docs/design.md#toolsets).
        let image = spec.toolset.as_ref().map_or(&self.image, |t| &t.image);
        a.push(image.into());
        a.push(proto::tools::TOOLKIT.into());
        a.push(spec.tool.as_str().into());
        a
    }

    /// The egress proxy container's `podman` arguments, with one `--allow-address <cidr>` pair
    /// per allowed range after `--allow` (docs/design.md#http_fetch-and-its-egress-proxy).
    pub fn egress_args(&self, egress: &Egress, name: &str) -> Vec<OsString> {
        let mut a: Vec<OsString> = vec![
            "run".into(),
            "-d".into(),
            "--rm".into(),
            format!("--name={name}-egress").into(),
            EGRESS_LABEL.into(),
            format!("--network={}", self.egress_network).into(),
            "--read-only".into(),
            "--cap-drop=all".into(),
            "--security-opt=no-new-privileges".into(),
            "--userns=keep-id".into(),
            "--pids-limit=64".into(),
            "--memory=128m".into(),
            volume(&self.egress_dir(name), Path::new(EGRESS_MOUNT), "rw"),
        ];
        // A shell call's proxy writes its report to a directory the tool never sees.
        if egress.bounds.is_some() {
            a.push(volume(
                &egress::report_dir(&self.egress_dir(name)),
                Path::new(proto::egress::REPORT_DIR),
                "rw",
            ));
        }
        a.push(self.image.clone().into());
        a.extend(egress.proxy_command());
        a
    }

    /// Writes the log line of an `unavailable` answer (docs/design.md#service: it ends with the
    /// runbook pointer) and gives the answer.
    fn unavailable(&self, spec: &RunSpec, trouble: Trouble, detail: &str) -> RunError {
        super::trouble::unavailable(spec, trouble, detail, &WORDS)
    }

    /// Runs a podman helper (`kill`, `rm`, `container exists`, `image exists`), giving up at
    /// `deadline`.
    fn helper(&self, args: &[OsString], deadline: Instant) -> Helper {
        match self.program.helper(args, 0) {
            Ok(started) => started.finish(deadline),
            Err(e) => Helper::NotStarted(e),
        }
    }

    /// Turns http_fetch off until restart: a container brokerd stopped may still exist.
    fn poison(&self) {
        self.poisoned.store(true, Ordering::SeqCst);
    }
}

impl Runner for PodmanRuntime {
    fn poisoned(&self) -> bool {
        PodmanRuntime::poisoned(self)
    }

    fn terminal_failure(&self) -> Option<String> {
        self.terminal().map(|t| t.to_string())
    }

    /// toolkit sets both for every program it starts (the tool's own environment); Podman's
    /// argument list sets none.
    fn sets_home_and_tmpdir(&self) -> bool {
        true
    }

    /// Podman 4.3 refuses `:O` with `ro` ("can't use 'O' with other options").
    fn read_only_layers_write(&self) -> bool {
        true
    }

    /// Removes every container an earlier brokerd left, storage-only ones included, the
    /// monitors of containers Podman no longer lists, and every egress directory
    /// (docs/design.md#sweep: at start, and at the end of a shutdown).
    fn sweep(&self) -> Result<usize, SweepError> {
        SweepError::outcome([
            self.sweep_containers()?,
            orphans::sweep_monitors(),
            egress::sweep(&self.home),
        ])
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

    /// The answer leaves once the tool container is gone (`run --rm`); the proxy's removal
    /// and the egress directory's come after it, still within the call.
    fn run_call<'a>(
        &'a self,
        spec: &'a RunSpec,
        held: &Held<'_>,
        cleared: &Cleared,
    ) -> Result<Ran<EgressGuard<'a>>, RunError> {
        // Podman's --volume cannot carry a path with ':' or ',', nor its OCI spec (JSON) one
        // that is not UTF-8.
        let protected: Vec<Over<'_>> = held.mounts().into_iter().map(|(o, _)| o).collect();
        if let Some(o) = protected.iter().find(|o| {
            boxmaker_policy::args::check_grant_path(o.path).is_err() || o.path.to_str().is_none()
        }) {
            let answer = RunError::Unprotected(Unprotected::Unmountable(o.path.to_path_buf()));
            let status = answer.ended().as_str();
            tracing::warn!(session = %spec.session, call = %spec.call, status, "{answer}");
            return Err(answer);
        }
        // Podman takes its mount sources as paths and follows links in them, so the grant's
        // directories are checked before the run and again after it: a directory swapped in
        // between makes the call a refusal, and nothing it printed reaches the model (see
        // `runner::mounts`). Nobody but root and the service user can swap one: config::load
        // refuses a grant directory that another user could rename or replace
        // (docs/design.md#grants-and-paths).
        if let Err(e) = check_mounts(&spec.mounts) {
            return Err(mount_changed(spec, e));
        }
        let name = PodmanRuntime::container_name(spec);
        let times = Deadlines::new(spec, self.egress_start);
        let (mut answer, proxy) = match &spec.egress {
            Some(egress) => self.run_fetch(spec, egress, &name, &protected, cleared, &times),
            None => (
                self.run_tool(spec, &name, &protected, cleared, &times),
                None,
            ),
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
