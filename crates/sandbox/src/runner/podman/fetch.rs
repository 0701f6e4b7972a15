//! An http_fetch: the tool container beside its egress proxy
//! (docs/design.md#http_fetch-and-its-egress-proxy).
//!
//! The tool container is started first, while the decision goes to disk; the proxy's
//! `podman run -d` once the decision is there; the two containers are made at the same time.
//! The tool gets its input only once the proxy's socket exists and its `run -d` has exited 0
//! (and earlier calls' proxies are removed, and the runner is not poisoned): until then it has
//! read nothing, so a proxy that fails or is late costs a tool container that is killed and
//! removed, never a tool that ran without its way out or with one not known to be brokerd's.
//!
//! Each container takes Podman hundreds of milliseconds to make (BENCHMARKS.md, "brokerd next
//! to the bare sandbox", its `beside` side), hence the two at once. The gate looks for the
//! socket every 0.25 ms and wakes at once when either podman process exits; a `run -d` still
//! running when the call ends is killed first, with its process group, before the proxy's
//! `rm -f`.

use std::ffi::OsString;
use std::io::ErrorKind;
use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use super::process::{Helper, Proc, Started};
use super::{PodmanRuntime, Trouble};
use crate::runner::egress::{self, make_private_dir, EGRESS_SOCKET, SOCKET_STEP};
use crate::runner::protected::Over;
use crate::runner::wake::first_ready_until;
use crate::runner::Steps;
use crate::runner::{
    could_not_run, not_cleared, Cleared, Deadlines, Egress, RunError, RunOutput, RunSpec,
};

/// How often the gate is looked at, once the socket exists, when neither podman process has a
/// pidfd to wake it.
const GATE_LOOK: Duration = Duration::from_millis(5);

/// What opened or shut a call's gate.
enum Gate {
    /// The proxy is up: its socket exists and its `run -d` exited 0.
    Open,
    /// The tool's podman exited before the proxy was up (it could not make the container).
    ToolEnded,
    /// The proxy failed or was late: the logged answer.
    Shut(RunError),
}

impl PodmanRuntime {
    /// Runs an http_fetch: its answer, and its proxy and egress directory, which the caller
    /// removes (by dropping the guard) once the answer has left.
    pub(super) fn run_fetch<'a>(
        &'a self,
        spec: &'a RunSpec,
        egress: &Egress,
        name: &str,
        protected: &[Over<'_>],
        cleared: &Cleared,
        times: &Deadlines,
    ) -> (Result<RunOutput, RunError>, Option<EgressGuard<'a>>) {
        let mut guard = EgressGuard {
            runtime: self,
            spec,
            container: format!("{name}-egress"),
            dir: self.egress_dir(name),
            starter: None,
            started: false,
        };
        // The tool container mounts the directory, so it is made first; it holds nothing
        // until the proxy makes its socket there.
        let report = egress.bounds.map(|_| egress::report_dir(&guard.dir));
        let made = make_private_dir(&guard.dir)
            .map_err(|e| (guard.dir.clone(), e))
            .and_then(|()| match &report {
                Some(r) => make_private_dir(r).map_err(|e| (r.clone(), e)),
                None => Ok(()),
            });
        if let Err((path, e)) = made {
            let detail = format!("{}: {e}", path.display());
            return (
                Err(self.unavailable(spec, Trouble::EgressDir, &detail)),
                Some(guard),
            );
        }
        let mut tool = match self.start_tool(spec, name, protected) {
            Ok(tool) => tool,
            Err(e) => return (Err(e), Some(guard)),
        };
        // No way out is made before the decision is on disk.
        if !cleared.wait(times.decided()) {
            self.stop(spec, name, &mut tool);
            return (Err(not_cleared(spec)), Some(guard));
        }
        // One budget for the proxy's `run -d` and its socket.
        let budget = self.egress_start;
        let proxy_by = times.step(budget);
        let answer = match guard.start(egress, name) {
            Err(e) => Err(e),
            Ok(()) => match guard.wait_until_up(&mut tool, proxy_by, budget) {
                Gate::Open => match Steps::way_out_clear(self, spec, proxy_by, budget) {
                    Ok(()) => {
                        let deadline = times.step(spec.timeout);
                        return (
                            self.serve(spec, name, tool, &spec.input, deadline),
                            Some(guard),
                        );
                    }
                    Err(e) => Err(e),
                },
                // It read nothing: podman's failure is the answer, and output without the
                // call's input answers nothing.
                Gate::ToolEnded => {
                    let deadline = times.step(spec.timeout);
                    let answer = match self.serve(spec, name, tool, &[], deadline) {
                        Ok(_) => Err(could_not_run(
                            spec,
                            "the tool container ended before its proxy was up, without its input",
                        )),
                        failed => failed,
                    };
                    return (answer, Some(guard));
                }
                Gate::Shut(e) => Err(e),
            },
        };
        // The proxy failed or was late: the tool container goes having read nothing.
        self.stop(spec, name, &mut tool);
        (answer, Some(guard))
    }
}

/// Removes the proxy container and the egress directory when the call ends, however it ends
/// (a panic included): no proxy outlives its call (docs/design.md#runners).
pub(in crate::runner) struct EgressGuard<'a> {
    runtime: &'a PodmanRuntime,
    spec: &'a RunSpec,
    container: String,
    dir: PathBuf,
    /// The proxy's `podman run -d`, until it has exited.
    starter: Option<Started>,
    /// A `run -d` was started, so a proxy container may exist.
    started: bool,
}

impl EgressGuard<'_> {
    /// Starts the proxy's `podman run -d`.
    fn start(&mut self, egress: &Egress, name: &str) -> Result<(), RunError> {
        let rt = self.runtime;
        let args: Vec<OsString> = rt.egress_args(egress, name);
        match rt.program.helper(&args, 0) {
            Ok(started) => {
                self.starter = Some(started);
                self.started = true;
                Ok(())
            }
            Err(e) => {
                let detail = format!("{}: {e}", rt.program.path().display());
                Err(rt.unavailable(self.spec, Trouble::Start, &detail))
            }
        }
    }

    /// Waits, until `deadline`, for the proxy to be up (its socket made and its `run -d`
    /// exited 0), or for either podman process to end the wait sooner: a `run -d` that
    /// fails, or a tool container that could not be made. The socket is looked for every
    /// [`SOCKET_STEP`] (its host path can be too long to connect to,
    /// docs/design.md#http_fetch-and-its-egress-proxy); both exits wake the wait at once.
    fn wait_until_up(&mut self, tool: &mut Proc, deadline: Instant, budget: Duration) -> Gate {
        let (rt, spec) = (self.runtime, self.spec);
        let socket = self.dir.join(EGRESS_SOCKET);
        loop {
            let exited = self.starter.as_mut().and_then(|s| s.proc.try_wait());
            if let Some((status, started)) =
                exited.and_then(|st| self.starter.take().map(|s| (st, s)))
            {
                // Its standard error is read to its end: the log's detail if it failed.
                let stderr = match started.finish(Instant::now()) {
                    Helper::Exited(_, stderr, _) => stderr,
                    Helper::TimedOut | Helper::NotStarted(_) => String::new(),
                };
                if !status.success() {
                    let detail = format!("podman exited with {status}: {stderr}");
                    return Gate::Shut(rt.unavailable(spec, Trouble::ProxyFailed, &detail));
                }
            }
            let made = socket.symlink_metadata().is_ok();
            if made && self.starter.is_none() {
                return Gate::Open;
            }
            if tool.try_wait().is_some() {
                return Gate::ToolEnded;
            }
            let now = Instant::now();
            if now >= deadline {
                return Gate::Shut(match made {
                    false => {
                        let detail =
                            format!("{} did not appear within {budget:?}", socket.display());
                        rt.unavailable(spec, Trouble::ProxySocket, &detail)
                    }
                    true => rt.unavailable(
                        spec,
                        Trouble::ProxyFailed,
                        "podman run -d did not end within the proxy's start budget",
                    ),
                });
            }
            // Until the socket exists, a look every step; after it, only the exits matter.
            let until = match made {
                false => deadline.min(now + SOCKET_STEP),
                true => deadline,
            };
            // Each podman process still running wakes the wait when it exits, if all have
            // pidfds; otherwise they are looked at every few milliseconds.
            let proxy = self.starter.as_ref().map(|s| s.proc.pidfd());
            match (tool.pidfd(), proxy) {
                (Some(t), None) => {
                    first_ready_until(&[t], until);
                }
                (Some(t), Some(Some(p))) => {
                    first_ready_until(&[p, t], until);
                }
                _ => thread::sleep(until.min(now + GATE_LOOK).saturating_duration_since(now)),
            }
        }
    }
}

impl Drop for EgressGuard<'_> {
    fn drop(&mut self) {
        // A `podman run -d` still under way is stopped first, or it could start the proxy
        // after its removal.
        let killed = match self.starter.take() {
            Some(started) => matches!(started.finish(Instant::now()), Helper::TimedOut),
            None => false,
        };
        if self.started {
            self.runtime
                .remove(self.spec, &self.container, false, killed);
        }
        match egress::remove_dir(&self.dir) {
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
