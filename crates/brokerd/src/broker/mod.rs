//! The broker: one request in, one answer out (docs/design.md#life-of-a-call).
//!
//! [`Broker::call`] (`call`) is the life of a call read top to bottom, a function per step:
//! identifiers, grant, parse, decide, approval, stage, audit, run, audit, answer. Every decision is audited and synced before
//! anything runs or its answer leaves; a call's outcome is written before its answer and
//! synced after it; a record that cannot be written makes the call `unavailable`, so nothing
//! runs unaudited. `run` holds a decided call's slot and runner, `records` the audit and the
//! journal, `ops` the other requests, `staged` the owners' ops on staged layers.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use proto::broker::{AuditHead, Body, Request, Status, ToolSchema, PROTOCOL};
use proto::ident::Ident;
use tokio::sync::{Notify, Semaphore};

use crate::args;
use crate::args::ToolArgs;
use crate::audit::{self, Audit, Decided, Ended, Record, RecordKind};
use crate::config::{Backend, Config};
use crate::policy::{Decision, GrantPolicy, Plan, Policy, Refusal, Why};
use crate::preflight;
use crate::preview::{preview, ResultStore};
use crate::probe::{Kept, RETRY_FIRST};
use crate::refusals::{RefusalCounter, Verdict};
use crate::runbook;
use crate::runner::{
    Cleared, EgressSink, Reply, RunError, RunOutput, RunSpec, Runner, Unavailable,
};
use crate::stage::{Holding, Layer, Stage};
use crate::tickets::{Binding, Tickets};
use proto::egress::Summary;

mod call;
mod ops;
mod owner;
mod records;
mod run;
mod staged;
mod toolsets;

use call::CallRequest;
pub use records::OUTCOME_SYNC_WITHIN;
use records::{journal, outcome_record};
use run::NotRun;
use staged::NotStaged;

/// How many calls may wait for a slot, per running slot, before new ones are answered busy.
pub const QUEUE_PER_SLOT: usize = 8;
/// The most bytes of full outputs kept for `result` paging.
pub const RESULT_STORE_BYTES: usize = 256 * 1024 * 1024;
/// The most sessions remembered as having seen the runner unavailable.
const MAX_UNAVAILABLE_SESSIONS: usize = 10_000;
/// The longest a call's decision may take (docs/design.md#life-of-a-call): it reads only a
/// bounded number of entries of the grant's directories, in microseconds where they answer.
pub const DECIDE_WITHIN: Duration = Duration::from_secs(5);
/// Decisions made at once; past it a call is refused (those before it wait on a file system).
pub const MAX_DECIDING: usize = 32;
/// Characters in one `result_page`.
pub const PAGE_CHARS: usize = 50_000;

/// Who is asking (from SO_PEERCRED).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    pub uid: u32,
    pub pid: Option<i32>,
    /// One of `[broker] owners`: may commit, discard and approve.
    pub owner: bool,
}

/// Protocol errors (answered `error`, no decision made).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    #[error("{0} must be 1 to 64 of A-Za-z0-9_.- and not . or ..")]
    BadIdent(&'static str),
    #[error("unknown grant {0:?}")]
    UnknownGrant(String),
    #[error("unknown or expired result_id {0:?}")]
    UnknownResult(String),
    #[error("unknown, used or expired ticket")]
    UnknownTicket,
    #[error("busy: too many calls are waiting; try again shortly")]
    Busy,
    #[error("brokerd is shutting down")]
    ShuttingDown,
    #[error("not an owner of this brokerd")]
    NotOwner,
}

pub use crate::probe::Preflight;

struct State {
    tickets: Tickets,
    refusals: RefusalCounter,
    results: ResultStore,
    /// Sessions that saw the sandbox missing: their later writes are refused
    /// (docs/design.md#preflight-and-poisoning), bounded, oldest forgotten first.
    unavailable: HashSet<String>,
    unavailable_order: VecDeque<String>,
}

pub struct Broker {
    config: Config,
    policy: Arc<Policy>,
    /// Decisions being made on blocking threads, at most [`MAX_DECIDING`]: one stuck on a
    /// file system that does not answer holds its permit until it returns.
    deciding: Arc<Semaphore>,
    runner: Arc<dyn Runner>,
    audit: Arc<Mutex<Audit>>,
    /// The audit head and any stalled record, read without waiting for a record's sync.
    audit_watch: audit::Watch,
    state: Mutex<State>,
    slots: Arc<Semaphore>,
    waiting: AtomicUsize,
    queue_cap: usize,
    /// Requests being answered, and calls whose clean-up is still under way after their
    /// answer left: a shutdown's drain waits for both.
    in_flight: Arc<AtomicUsize>,
    idle: Arc<Notify>,
    /// The start-up preflight (`probe`): kept, remembered or tried again.
    preflight: Mutex<Kept>,
    /// The proxy path's preflight, run before the first http_fetch, kept the same way.
    network: Mutex<Kept>,
    /// One preflight of each kind runs at a time; callers that arrive meanwhile wait for it.
    probing: tokio::sync::Mutex<()>,
    network_probing: tokio::sync::Mutex<()>,
    /// Each toolset's check (`toolsets`), kept as the preflight is, and one run at a time.
    toolset_checks: Mutex<std::collections::BTreeMap<String, Kept>>,
    toolset_probing: tokio::sync::Mutex<()>,
    /// What each toolset's files were when its last check ran (`toolsets::Print`).
    toolset_prints: Mutex<std::collections::BTreeMap<String, toolsets::Print>>,
    /// `None` without a `[runner]` section.
    backend: Option<Backend>,
    shutting_down: std::sync::atomic::AtomicBool,
    /// How many of the runner's `weakened` lines are audited already.
    weakened_audited: Mutex<usize>,
    /// Every session's layers of staged grants (`stage`).
    stage: Arc<Stage>,
}

/// A call counted in flight until its clean-up, on a runner thread, is done.
struct Cleaning(Arc<AtomicUsize>, Arc<Notify>);
impl Drop for Cleaning {
    fn drop(&mut self) {
        if self.0.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.1.notify_waiters();
        }
    }
}

/// A decrement that runs however the call ends.
struct Counted<'a>(&'a AtomicUsize, Option<&'a Notify>);
impl Drop for Counted<'_> {
    fn drop(&mut self) {
        if self.0.fetch_sub(1, Ordering::SeqCst) == 1 {
            if let Some(n) = self.1 {
                n.notify_waiters();
            }
        }
    }
}

impl Broker {
    pub fn new(config: Config, policy: Policy, runner: Arc<dyn Runner>, audit: Audit) -> Broker {
        let b = &config.broker;
        let state = State {
            tickets: Tickets::new(Duration::from_secs(b.ticket_ttl_s)),
            refusals: RefusalCounter::new(b.refusal_repeats),
            results: ResultStore::new(Duration::from_secs(b.result_ttl_s), RESULT_STORE_BYTES),
            unavailable: HashSet::new(),
            unavailable_order: VecDeque::new(),
        };
        let slots = b.max_concurrent_calls.max(1);
        Broker {
            slots: Arc::new(Semaphore::new(slots)),
            queue_cap: slots * QUEUE_PER_SLOT,
            waiting: AtomicUsize::new(0),
            in_flight: Arc::new(AtomicUsize::new(0)),
            idle: Arc::new(Notify::new()),
            policy: Arc::new(policy),
            deciding: Arc::new(Semaphore::new(MAX_DECIDING)),
            runner,
            audit_watch: audit.watch(),
            audit: Arc::new(Mutex::new(audit)),
            state: Mutex::new(state),
            preflight: Mutex::new(Kept::new(RETRY_FIRST)),
            network: Mutex::new(Kept::new(RETRY_FIRST)),
            probing: tokio::sync::Mutex::new(()),
            network_probing: tokio::sync::Mutex::new(()),
            toolset_checks: Mutex::new(toolsets::kept_checks(&config, RETRY_FIRST)),
            toolset_probing: tokio::sync::Mutex::new(()),
            toolset_prints: Mutex::new(std::collections::BTreeMap::new()),
            // docs/design.md#service: without [runner] brokerd still serves, and says so.
            backend: config.runner.as_ref().map(|r| r.backend),
            shutting_down: std::sync::atomic::AtomicBool::new(false),
            weakened_audited: Mutex::new(0),
            stage: Arc::new({
                let rc = config.runner.as_ref();
                let home = rc.map_or(std::path::Path::new(crate::config::DEFAULT_HOME), |r| {
                    &r.home
                });
                let stage = Stage::new(home, b.max_staged_bytes, b.staged_ttl_s);
                match rc {
                    Some(r) => stage.for_runner(r.backend, r.podman.clone()),
                    None => stage,
                }
            }),
            config,
        }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Tries a transiently failed preflight again after `first` (doubling) instead of
    /// [`RETRY_FIRST`] (tests use a short one).
    pub fn with_preflight_retry(self, first: Duration) -> Broker {
        *lock(&self.preflight) = Kept::new(first);
        *lock(&self.network) = Kept::new(first);
        *lock(&self.toolset_checks) = toolsets::kept_checks(&self.config, first);
        self
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind; keep serving.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The backend's preflight: a real minimal sandbox (docs/design.md#preflight-and-poisoning),
    /// run unless its kept outcome stands (`probe`: a pass or a terminal failure for good, another
    /// failure until its retry is due). While it fails, calls answer `unavailable`.
    pub async fn preflight(&self) -> Preflight {
        if self.config.runner.is_none() {
            let p = Preflight {
                ok: false,
                detail: Why::NoRunner.to_string(),
                terminal: true,
            };
            lock(&self.preflight).record(p.clone(), Instant::now());
            return p;
        }
        if let Some(p) = lock(&self.preflight).standing(Instant::now()) {
            return p;
        }
        let _one = self.probing.lock().await;
        if let Some(p) = lock(&self.preflight).standing(Instant::now()) {
            return p;
        }
        let probe = preflight::Sandbox::new(
            self.config.runner.as_ref(),
            self.runner.as_ref(),
            preflight::writable_grant_dirs(&self.policy),
        );
        let runner = self.runner.clone();
        let spec = probe.spec.clone();
        let outcome = tokio::task::spawn_blocking(move || runner.run(&spec)).await;
        self.audit_weakened().await;
        let mut p = probe.judge(outcome.map_err(|e| e.to_string()));
        preflight::settle(self.runner.as_ref(), &mut p);
        let now = Instant::now();
        let mut kept = lock(&self.preflight);
        kept.record(p.clone(), now);
        preflight::log("preflight", &p, kept.next_try_in(now));
        p
    }

    /// The proxy path, proven once before the first http_fetch runs
    /// (docs/design.md#preflight-and-poisoning): a proxy sandbox allowed only `allowed.invalid`,
    /// and a fetch of `preflight.invalid` through it, which the proxy must refuse by name. That
    /// needs the proxy started, its socket in the tool sandbox and the SOCKS5 exchange working; no
    /// name is resolved and no packet leaves. Kept as the start-up preflight is (`probe`).
    pub async fn network_preflight(&self) -> Preflight {
        if let Some(p) = lock(&self.network).standing(Instant::now()) {
            return p;
        }
        let _one = self.network_probing.lock().await;
        if let Some(p) = lock(&self.network).standing(Instant::now()) {
            return p;
        }
        let spec = preflight::network_spec(self.config.runner.as_ref());
        let runner = self.runner.clone();
        let outcome = tokio::task::spawn_blocking(move || runner.run(&spec)).await;
        let mut p = preflight::judge_network(outcome.map_err(|e| e.to_string()));
        preflight::settle(self.runner.as_ref(), &mut p);
        let now = Instant::now();
        let mut kept = lock(&self.network);
        kept.record(p.clone(), now);
        preflight::log("network preflight", &p, kept.next_try_in(now));
        p
    }

    /// Marks the broker as stopping: new calls are refused with an error.
    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
    }

    /// Marks a request as in flight until the guard is dropped: the server holds it from the
    /// request until its answer is written, so a drain waits for answers, not just for runs.
    pub fn answering(&self) -> impl Drop + '_ {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        Counted(&self.in_flight, Some(&self.idle))
    }

    /// Waits until no request is in flight, or `grace` has passed; true if none remain.
    pub async fn drain(&self, grace: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + grace;
        loop {
            let notified = self.idle.notified();
            if self.in_flight.load(Ordering::SeqCst) == 0 {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.in_flight.load(Ordering::SeqCst) == 0;
            }
        }
    }

    pub fn runner(&self) -> &Arc<dyn Runner> {
        &self.runner
    }

    pub async fn handle(&self, req: Request, peer: Peer) -> proto::broker::Answer {
        let id = Some(req.id().to_string());
        let body = match req {
            Request::Call {
                session,
                call,
                grant,
                tool,
                arguments,
                approval,
                ..
            } => {
                let req = CallRequest {
                    session,
                    call,
                    grant,
                    tool,
                    arguments,
                    approval,
                };
                self.call(peer, req).await
            }
            Request::Tools { grant, .. } => self.tools(&grant),
            Request::Result {
                result_id, offset, ..
            } => self.result(peer, &result_id, offset),
            Request::Decline { ticket, .. } => self.decline(&ticket).await,
            Request::EndSession { session, .. } => self.end_session(&session),
            Request::Status { .. } => self.status().await,
            Request::Changes {
                session,
                grant,
                diff,
                ..
            } => self.changes(session, grant, diff).await,
            Request::Commit {
                session,
                grant,
                paths,
                all_or_nothing,
                ..
            } => {
                self.commit(peer, session, grant, paths, all_or_nothing)
                    .await
            }
            Request::Discard {
                session,
                grant,
                paths,
                ..
            } => self.discard(peer, session, grant, paths).await,
            Request::Approve { ticket, .. } => self.approve(peer, &ticket).await,
        };
        proto::broker::Answer::new(id, body)
    }

    fn result_body(&self, peer: Peer, out: RunOutput, label: String) -> Body {
        let max = self.config.broker.preview_chars;
        let (content, continues_at) = preview(&out.content, max);
        let result_id = self
            .state()
            .results
            .put(peer.uid, out.content)
            .unwrap_or_default();
        Body::Result {
            content,
            truncated: out.truncated || continues_at.is_some(),
            label,
            // Nothing to continue with where the whole could not be kept.
            continues_at: continues_at.filter(|_| !result_id.is_empty()),
            result_id,
        }
    }

    /// A refusal, or from the Nth same refusal in a session on, a stop; audited either way.
    async fn refused(
        &self,
        mut rec: Record,
        session: &str,
        tool: &str,
        refusal: Refusal,
        received: Instant,
    ) -> Body {
        let reason = refusal.reason();
        // Counted by (tool, target, which refusal): the target is normalised there, so `x`,
        // `./x` and `x/` are one refusal (docs/design.md#modes-and-the-classifier), and two
        // different targets are two.
        let kind = refusal.why.kind();
        let verdict = self
            .state()
            .refusals
            .record(session, tool, &refusal.target, kind);
        let body = match verdict {
            Verdict::Refuse => {
                rec.decision = Some(Decided::Refused);
                Body::Refused {
                    reason: reason.clone(),
                }
            }
            Verdict::Stop => {
                rec.decision = Some(Decided::Stopped);
                Body::Stopped {
                    reason: format!(
                        "stopped: the same refusal was asked for {} times in this session, and asking again cannot change it: {reason}",
                        self.config.broker.refusal_repeats
                    ),
                }
            }
        };
        rec.reason = Some(audit::clip(&reason));
        journal(&rec, Some(kind), received);
        match self.record(rec).await {
            Ok(_) => body,
            Err(e) => self.audit_failed(&e),
        }
    }

    /// Decides a call on a blocking thread, within [`DECIDE_WITHIN`]: a decision waits on
    /// nothing outside the grant's directories, but a grant directory's own file system may
    /// stop answering (docs/design.md#life-of-a-call). Past the limit the call is refused
    /// while the thread finishes on its own; the other clients' calls go on.
    async fn decide(
        &self,
        session: &Ident,
        grant: &GrantPolicy,
        args: &ToolArgs,
    ) -> Result<Decision, Why> {
        let tool = args.tool();
        let Ok(permit) = self.deciding.clone().try_acquire_owned() else {
            return Err(Why::Undecided {
                tool,
                why: format!("{MAX_DECIDING} decisions are waiting on the grant's file systems"),
            });
        };
        let view = self.staged_view(session, grant);
        let (policy, name, args) = (self.policy.clone(), grant.name.clone(), args.clone());
        let task = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let g = policy.grant(&name)?;
            Some(match view {
                Some(view) => policy.decide_in(&view, g, &args),
                None => policy.decide(g, &args),
            })
        });
        match tokio::time::timeout(DECIDE_WITHIN, task).await {
            Ok(Ok(Some(d))) => Ok(d),
            Ok(_) => Err(Why::Undecided {
                tool,
                why: "the decision failed".into(),
            }),
            Err(_) => Err(Why::Undecided {
                tool,
                why: format!(
                    "a file it looked at in the grant's directories did not answer within {} s",
                    DECIDE_WITHIN.as_secs()
                ),
            }),
        }
    }

    fn mark_unavailable(&self, session: &str) {
        let mut st = self.state();
        if st.unavailable.insert(session.to_string()) {
            st.unavailable_order.push_back(session.to_string());
            while st.unavailable_order.len() > MAX_UNAVAILABLE_SESSIONS {
                if let Some(old) = st.unavailable_order.pop_front() {
                    st.unavailable.remove(&old);
                }
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves plain data behind; keep serving.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub use crate::preflight::NETWORK_PREFLIGHT_URL;

/// What the model reads when its call's audit record cannot be written.
pub const AUDIT_UNAVAILABLE: &str = "the call could not be audited, so it was not answered";

fn error(e: ProtocolError) -> Body {
    Body::Error {
        message: e.to_string(),
    }
}
