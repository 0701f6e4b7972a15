//! What brokerd keeps of a preflight (docs/design.md#preflight-and-poisoning): a pass is kept; a terminal failure (the
//! sandbox program absent or not executable, the kernel refusing it) is remembered for the
//! life of the process; any other failure (a slow start, a full disk, a busy host) is tried
//! again by a later call once its back-off has passed, the wait doubling from
//! [`RETRY_FIRST`] to [`RETRY_MAX`]. `status` shows which, and when the next try is due.

use std::time::{Duration, Instant};

use proto::broker::PreflightStatus;

/// The wait before the first retry of a failed preflight.
pub const RETRY_FIRST: Duration = Duration::from_secs(5);
/// The longest wait between two tries.
pub const RETRY_MAX: Duration = Duration::from_secs(300);

/// The outcome of one preflight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preflight {
    pub ok: bool,
    pub detail: String,
    /// A failure no retry can mend until the operator acts (and brokerd restarts).
    pub terminal: bool,
}

impl Preflight {
    /// A preflight that passed, saying what it saw.
    pub fn passed(detail: String) -> Preflight {
        Preflight {
            ok: true,
            detail,
            terminal: false,
        }
    }

    /// A failed preflight that a later retry may mend.
    pub fn failed(detail: String) -> Preflight {
        Preflight {
            ok: false,
            detail,
            terminal: false,
        }
    }
}

/// A preflight's kept outcome and its retry schedule.
#[derive(Debug)]
pub struct Kept {
    last: Option<Preflight>,
    /// When a failed, non-terminal preflight may be tried again.
    next_try: Option<Instant>,
    failures: u32,
    first: Duration,
}

impl Kept {
    /// Nothing kept yet; a failure is first retried after `first`.
    pub fn new(first: Duration) -> Kept {
        Kept {
            last: None,
            next_try: None,
            failures: 0,
            first,
        }
    }

    /// The last outcome, whether or not it still stands.
    pub fn last(&self) -> Option<&Preflight> {
        self.last.as_ref()
    }

    /// The kept outcome if it stands at `now`: a pass, a terminal failure, or a failure whose
    /// retry is not due yet. `None`: run the preflight (again).
    pub fn standing(&self, now: Instant) -> Option<Preflight> {
        let last = self.last.as_ref()?;
        match self.next_try {
            Some(due) if now >= due => None,
            _ => Some(last.clone()),
        }
    }

    /// Keeps `p`, run at `now`: a transient failure is due again after the doubled wait.
    pub fn record(&mut self, p: Preflight, now: Instant) {
        if p.ok || p.terminal {
            self.next_try = None;
            self.failures = 0;
        } else {
            let wait = self
                .first
                .saturating_mul(1u32 << self.failures.min(16))
                .min(RETRY_MAX.max(self.first));
            self.failures = self.failures.saturating_add(1);
            self.next_try = Some(now + wait);
        }
        self.last = Some(p);
    }

    /// How long until the next try, for a failure that will be tried again.
    pub fn next_try_in(&self, now: Instant) -> Option<Duration> {
        self.next_try.map(|due| due.saturating_duration_since(now))
    }

    /// What `status` shows of it; `unrun` is the detail before it has run.
    pub fn status(&self, now: Instant, unrun: &str) -> PreflightStatus {
        match &self.last {
            Some(p) => PreflightStatus {
                ok: Some(p.ok),
                detail: p.detail.clone(),
                terminal: Some(p.terminal),
                next_try_in_ms: self
                    .next_try_in(now)
                    .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                network: None,
            },
            None => PreflightStatus {
                ok: None,
                detail: unrun.into(),
                ..PreflightStatus::default()
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(terminal: bool) -> Preflight {
        Preflight {
            ok: false,
            detail: "x".into(),
            terminal,
        }
    }

    #[test]
    fn passes_and_terminal_failures_stand_transient_ones_back_off() {
        let t0 = Instant::now();
        let s = |n: u64| Duration::from_secs(n);
        let mut k = Kept::new(s(5));
        assert_eq!(k.standing(t0), None, "never run");
        // A transient failure: 5 s, then 10, 20, ... up to RETRY_MAX.
        let mut now = t0;
        for wait in [5, 10, 20, 40, 80, 160, 300, 300] {
            k.record(failed(false), now);
            assert_eq!(k.next_try_in(now), Some(s(wait)));
            assert!(k
                .standing(now + s(wait) - Duration::from_millis(1))
                .is_some());
            now += s(wait);
            assert_eq!(k.standing(now), None, "due after {wait} s");
        }
        // A pass stands for good, and resets the back-off.
        let pass = Preflight {
            ok: true,
            detail: "y".into(),
            terminal: false,
        };
        k.record(pass.clone(), now);
        assert_eq!(k.standing(now + s(100_000)), Some(pass));
        k.record(failed(false), now);
        assert_eq!(k.next_try_in(now), Some(s(5)));
        // A terminal failure stands for good.
        k.record(failed(true), now);
        assert_eq!(k.standing(now + s(100_000)), Some(failed(true)));
        assert_eq!(k.status(now, "").next_try_in_ms, None);
        assert_eq!(k.status(now, "").terminal, Some(true));
    }
}
