//! The tool container: started while brokerd puts the decision on disk, given its input only
//! once the call's gate opens, served until it exits, and answered by the exit-code table of
//! docs/design.md#the-tool-container.

use std::time::Instant;

use super::layer;
use super::process::Proc;
use super::terminal::{self, Terminal};
use super::{PodmanRuntime, Trouble};
use crate::runner::output::{decode, verdict, Event, Streams, Verdict, DRAIN_GRACE};
use crate::runner::protected::Over;
use crate::runner::spawn::Io;
use crate::runner::trouble::Missing;
use crate::runner::{not_cleared, Cleared, Deadlines, Failure, RunError, RunOutput, RunSpec};
// What podman and the tools print can quote the model's text: redacted before it is logged.

impl PodmanRuntime {
    /// Starts the tool container (`podman run --rm -i`), its three pipes held by brokerd. Its
    /// tool reads nothing until [`PodmanRuntime::serve`] writes the input.
    pub(super) fn start_tool(
        &self,
        spec: &RunSpec,
        name: &str,
        protected: &[Over<'_>],
    ) -> Result<Proc, RunError> {
        let args = self.tool_args_with(spec, name, protected);
        self.program.start(&args, [Io::Piped; 3]).map_err(|e| {
            let detail = format!("{}: {e}", self.program.path().display());
            // Absent or not executable: no retry can mend it.
            match Missing::of(&e) {
                Some(m) => {
                    let t = Terminal::missing(m, detail);
                    self.terminal_answer(spec, t, "remembered until restart")
                }
                None => self.unavailable(spec, Trouble::Start, &detail),
            }
        })
    }

    /// A call without a proxy: the container is made while the decision goes to disk, and its
    /// tool gets its input once the decision is there.
    pub(super) fn run_tool(
        &self,
        spec: &RunSpec,
        name: &str,
        protected: &[Over<'_>],
        cleared: &Cleared,
        times: &Deadlines,
    ) -> Result<RunOutput, RunError> {
        let mut tool = self.start_tool(spec, name, protected)?;
        let deadline = times.step(spec.timeout);
        if !cleared.wait(deadline) {
            self.stop(spec, name, &mut tool);
            return Err(not_cleared(spec));
        }
        self.serve(spec, name, tool, &spec.input, deadline)
    }

    /// Writes `input` to the tool and closes it, serves its output until podman exits (or the
    /// cap, or `deadline`), and answers by the exit-code table.
    pub(super) fn serve(
        &self,
        spec: &RunSpec,
        name: &str,
        mut tool: Proc,
        input: &[u8],
        deadline: Instant,
    ) -> Result<RunOutput, RunError> {
        let cap = spec.limits.output_cap.unwrap_or(self.output_cap);
        let mut streams = Streams::of(tool.take_stdio(), input, cap);
        let mut staged_looked = Instant::now();
        let status = loop {
            // Wakes on podman's exit, on standard output passing the cap, or at the deadline
            // (without a pidfd, every look), serving the streams meanwhile.
            let event = streams.wait(tool.pidfd(), crate::runner::staged_look(spec, deadline));
            if event == Event::Overflowed {
                // docs/design.md#output: the capped output is the answer, not a time-out.
                self.stop(spec, name, &mut tool);
                return Ok(RunOutput {
                    content: decode(streams.stdout().to_vec(), true),
                    truncated: true,
                });
            }
            if let Some(status) = tool.try_wait() {
                break status;
            }
            if Instant::now() >= deadline {
                self.stop(spec, name, &mut tool);
                return Err(RunError::Failed(Failure::TimedOut));
            }
            // docs/design.md#staged-writes-and-owners: the bound holds during a call.
            if staged_looked.elapsed() >= crate::runner::STAGED_LOOK && {
                staged_looked = Instant::now();
                crate::runner::staged_over(spec)
            } {
                self.stop(spec, name, &mut tool);
                return Err(RunError::Failed(Failure::StagedFull));
            }
        };
        streams.drain(Instant::now() + DRAIN_GRACE);
        let truncated = streams.overflowed();
        let stderr = streams.stderr_text();
        let suspect = terminal::suspect(status, streams.stdout(), &stderr);
        match verdict(status, streams.stdout().to_vec(), truncated) {
            Verdict::Output(out) => Ok(out),
            Verdict::Failed(f) => {
                super::super::tool_failed_line(spec, "podman", &status, &stderr);
                Err(RunError::Failed(f))
            }
            Verdict::RunnerFailed => {
                let detail = format!("podman exited with {status}: {stderr}");
                // A staged layer that could not be mounted: not the sandbox missing.
                if layer::failed_at_layer(spec, streams.stdout(), &stderr) {
                    return Err(self.unavailable(spec, Trouble::Staged, &detail));
                }
                // The grant's toolset image is missing: its grants' calls are unavailable,
                // and nothing is remembered against the base image (docs/design.md#toolsets).
                if spec.toolset.is_some() && suspect == Some(terminal::Suspect::ImageMissing) {
                    return Err(self.unavailable(spec, Trouble::Toolset, &detail));
                }
                match suspect.and_then(|s| self.confirm(s, &stderr)) {
                    Some(t) => Err(self.terminal_answer(spec, t, "remembered until restart")),
                    None => Err(self.unavailable(spec, Trouble::Build, &detail)),
                }
            }
        }
    }

    /// Stops a tool container: its podman client first, with its process group, so that it
    /// makes nothing more; then `podman kill` and `podman rm -f` until it is gone, and the
    /// container's monitor if the client was killed while it made the container.
    pub(super) fn stop(&self, spec: &RunSpec, name: &str, tool: &mut Proc) {
        let killed = tool.kill_group();
        self.remove(spec, name, true, killed);
    }

    /// Remembers `t` and gives the logged answer of a call it stopped.
    pub(super) fn terminal_answer(&self, spec: &RunSpec, t: Terminal, detail: &str) -> RunError {
        self.remember(t.clone());
        self.unavailable(spec, Trouble::Terminal(t), detail)
    }
}
