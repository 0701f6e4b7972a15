//! How long a call may keep loopd waiting (docs/design.md#runner): its tool's time limit, the
//! proxy's start where the call has one, and what stopping and removing its sandbox may take. The
//! config's check keeps each call's budget under `broker.timeout_ms`, and a call that waited
//! too long for a slot is answered `busy` by it; the runners wait no longer than these bounds
//! for each step of a stop, so the budget holds.

use std::time::Duration;

use proto::tools::ToolName;

use super::{Backend, RunnerConfig};

/// How long a podman `kill`, or the `rm -f` of a container and the looks until it is gone, may
/// take before brokerd gives up on it (and poisons). Two of them, after the default shell
/// limit of 100 s, still end under loopd's 120 s.
pub const HELPER_TIMEOUT: Duration = Duration::from_secs(8);

/// How long a process that was sent SIGKILL may take to be seen dead before the signal is
/// sent once more (docs/design.md#preflight-and-poisoning: one retry through the same pidfd, no
/// other fallback).
pub const KILL_CONFIRM: Duration = Duration::from_secs(2);

/// The longest a runner of `backend` takes, past a call's time limit, to stop and remove what
/// it started: with Podman `kill` and `rm -f` of the tool's container, each bounded by
/// [`HELPER_TIMEOUT`], and `rm -f` of the proxy when the call has one (`proxy`: every
/// http_fetch, and a shell call of a grant with `shell_hosts`); with bwrap two SIGKILLs of
/// each sandbox, each confirmed within [`KILL_CONFIRM`]. loopd waits for all of it.
pub fn stop_budget(backend: Backend, proxy: bool) -> Duration {
    let (sandbox, proxy_stop) = match backend {
        Backend::Podman => (2 * HELPER_TIMEOUT, HELPER_TIMEOUT),
        Backend::Bwrap => (2 * KILL_CONFIRM, 2 * KILL_CONFIRM),
    };
    match proxy {
        true => sandbox + proxy_stop,
        false => sandbox,
    }
}

impl RunnerConfig {
    /// The longest one call of `tool` can keep loopd waiting once it starts: its time limit,
    /// the proxy's start when it has one (`proxy`), and the stop budget of the backend
    /// ([`stop_budget`]). It stays under `broker.timeout_ms`.
    pub fn call_budget(&self, tool: ToolName, proxy: bool) -> Duration {
        let start = match proxy {
            true => Duration::from_millis(self.egress_start_ms),
            false => Duration::ZERO,
        };
        self.time_limit(tool) + start + stop_budget(self.backend, proxy)
    }
}
