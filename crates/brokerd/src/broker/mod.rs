//! The broker: one request in, one answer out (DESIGN.md "Life of a call").
//!
//! [`Broker::call`] is the life of a call read top to bottom: identifiers, grant, parse,
//! decide, approval, audit, run, audit, answer. Every decision is audited, and the record is
//! synced before the answer leaves; a record that cannot be written makes the call
//! `unavailable`, so nothing runs unaudited.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use proto::broker::{AuditHead, Body, Request, Status, ToolSchema, PROTOCOL};
use proto::ident::Ident;
use tokio::sync::{Notify, Semaphore};

use crate::args;
use crate::audit::{self, Audit, Decided, Ended, Record, RecordKind};
use crate::config::{Backend, Config};
use crate::policy::{Decision, Plan, Policy, Refusal, Why};
use crate::preflight;
use crate::preview::{preview, ResultStore};
use crate::probe::{Kept, RETRY_FIRST};
use crate::refusals::{RefusalCounter, Verdict};
use crate::runbook;
use crate::runner::{Cleared, Reply, RunError, RunOutput, RunSpec, Runner, Unavailable};
use crate::stage::{Holding, Layer, Stage};
use crate::tickets::{Binding, Tickets};

mod staged;
use staged::NotStaged;

/// How many calls may wait for a slot, per running slot, before new ones are answered busy.
pub const QUEUE_PER_SLOT: usize = 8;
/// The most bytes of full outputs kept for `result` paging.
pub const RESULT_STORE_BYTES: usize = 256 * 1024 * 1024;
/// The most sessions remembered as having seen the runner unavailable.
const MAX_UNAVAILABLE_SESSIONS: usize = 10_000;
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
    /// Sessions that saw the runner unavailable: their later writes are refused (seed 000
    /// 5.1.5), bounded, oldest forgotten first.
    unavailable: HashSet<String>,
    unavailable_order: VecDeque<String>,
}

pub struct Broker {
    config: Config,
    policy: Policy,
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
            policy,
            runner,
            audit_watch: audit.watch(),
            audit: Arc::new(Mutex::new(audit)),
            state: Mutex::new(state),
            preflight: Mutex::new(Kept::new(RETRY_FIRST)),
            network: Mutex::new(Kept::new(RETRY_FIRST)),
            probing: tokio::sync::Mutex::new(()),
            network_probing: tokio::sync::Mutex::new(()),
            // DESIGN.md "Service": without [runner] brokerd still serves, and says so.
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
                    Some(r) if r.backend == Backend::Podman => stage.with_podman(r.podman.clone()),
                    _ => stage,
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
        self
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind; keep serving.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The backend's preflight: a real minimal sandbox (seed 000 5.1.6), run unless its kept
    /// outcome stands (`probe`: a pass or a terminal failure for good, another failure until
    /// its retry is due). While it fails, calls answer `unavailable`.
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

    /// The proxy path, proven once before the first http_fetch runs (seed 000 5.1.6): a proxy
    /// sandbox allowed only `allowed.invalid`, and a fetch of `preflight.invalid` through it,
    /// which the proxy must refuse by name. That needs the proxy started, its socket in the
    /// tool sandbox and the SOCKS5 exchange working; no name is resolved and no packet leaves.
    /// Kept as the start-up preflight is (`probe`).
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

    /// Appends one record, synced, off the async threads.
    async fn record(&self, rec: Record) -> Result<audit::Head, String> {
        self.write(rec, true).await
    }

    /// Appends a call's outcome without waiting for the disk (docs/design.md#audit): the next
    /// record's sync covers it, one sync for both, or, where no record follows within
    /// [`OUTCOME_SYNC_WITHIN`], a sync of its own. The decision before it was synced before
    /// the tool got its input.
    async fn record_outcome(&self, rec: Record) -> Result<audit::Head, String> {
        let head = self.write(rec, false).await?;
        let audit = self.audit.clone();
        tokio::spawn(async move {
            tokio::time::sleep(OUTCOME_SYNC_WITHIN).await;
            let synced = tokio::task::spawn_blocking(move || lock(&audit).sync()).await;
            if let Ok(Err(e)) = synced {
                tracing::error!(
                    error = %e,
                    "a call's outcome record could not be synced; see {}",
                    runbook::AUDIT_UNWRITABLE
                );
            }
        });
        Ok(head)
    }

    async fn write(&self, rec: Record, sync: bool) -> Result<audit::Head, String> {
        let audit = self.audit.clone();
        let append = move || {
            let mut a = audit.lock().unwrap_or_else(|p| p.into_inner());
            match sync {
                true => a.append(rec),
                false => a.append_unsynced(rec),
            }
            .map_err(|e| e.to_string())
        };
        // On brokerd's multi-threaded runtime the write and its sync run on this thread, the
        // runtime's other work moving to another: no hand-over to a blocking thread and back
        // on the call's path (two wake-ups, each dear on a virtual machine). Elsewhere (a
        // current-thread runtime in tests) a blocking thread takes it.
        let flavor = tokio::runtime::Handle::current().runtime_flavor();
        if flavor == tokio::runtime::RuntimeFlavor::MultiThread {
            let written = tokio::task::block_in_place(|| {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(append))
            });
            return written.unwrap_or_else(|_| Err("the audit task failed: it panicked".into()));
        }
        match tokio::task::spawn_blocking(append).await {
            Ok(r) => r,
            Err(e) => Err(format!("the audit task failed: {e}")),
        }
    }

    /// Appends a service event (start, an operator's choice).
    pub async fn event(&self, reason: String) -> Result<audit::Head, String> {
        self.record(Record {
            kind: RecordKind::Event,
            reason: Some(reason),
            ..Record::default()
        })
        .await
    }

    /// Audits, once each, what of the configured confinement the runner found this host would
    /// not apply (DESIGN.md "Limits": weaker confinement is never silent).
    async fn audit_weakened(&self) {
        let all = self.runner.weakened();
        let new: Vec<String> = {
            let mut done = lock(&self.weakened_audited);
            let new = all.iter().skip(*done).cloned().collect();
            *done = all.len();
            new
        };
        for line in new {
            let reason = format!("weaker confinement than configured: {line}");
            if let Err(e) = self.event(reason).await {
                tracing::error!(
                    error = e,
                    "an audit record could not be written; see {}",
                    runbook::AUDIT_UNWRITABLE
                );
            }
        }
    }

    /// The last record synced; never waits for a record being written (docs/design.md#audit).
    pub fn audit_head(&self) -> audit::Head {
        self.audit_watch.head()
    }

    /// Syncs the outcomes written without waiting for the disk (at shutdown).
    pub async fn sync_audit(&self) -> Result<(), String> {
        let audit = self.audit.clone();
        tokio::task::spawn_blocking(move || lock(&audit).sync().map_err(|e| e.to_string()))
            .await
            .map_err(|e| format!("the audit task failed: {e}"))?
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
                self.call(peer, session, call, grant, tool, arguments, approval)
                    .await
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

    /// The life of one call.
    #[allow(clippy::too_many_arguments)]
    async fn call(
        &self,
        peer: Peer,
        session: String,
        call: String,
        grant_name: String,
        tool: String,
        arguments: String,
        approval: Option<String>,
    ) -> Body {
        // loopd's clock for this call started about now: [broker] timeout_ms from here.
        let received = Instant::now();
        // 1. Protocol checks: no decision is made on a malformed request.
        let Ok(session) = Ident::parse(session) else {
            return error(ProtocolError::BadIdent("session"));
        };
        let Ok(call) = Ident::parse(call) else {
            return error(ProtocolError::BadIdent("call"));
        };
        if self.shutting_down.load(Ordering::SeqCst) {
            return error(ProtocolError::ShuttingDown);
        }
        let Some(grant) = self.policy.grant(&grant_name) else {
            return error(ProtocolError::UnknownGrant(grant_name));
        };
        let mut rec = Record {
            kind: RecordKind::Call,
            session: Some(session.to_string()),
            call: Some(call.to_string()),
            grant: Some(grant_name.clone()),
            tool: Some(audit::summary(&tool)),
            ..Record::default()
        };

        // 2. Parse the model's arguments; a call that does not parse is refused.
        let parsed = match args::parse(&tool, &arguments) {
            Ok(a) => a,
            Err(e) => {
                // Counted by what it is about: six different bad URLs are six refusals.
                let target = args::raw_target(&arguments);
                rec.target = Some(audit::summary(&target));
                let refusal = Refusal::new(&target, Why::Arguments(e.to_string()));
                return self.refused(rec, &session, &tool, refusal, received).await;
            }
        };
        let target = match &parsed {
            args::ToolArgs::ReadFile(a) => audit::summary(&a.path),
            args::ToolArgs::WriteFile(a) => audit::summary(&a.path),
            args::ToolArgs::Shell(a) => audit::summary(&a.command),
            args::ToolArgs::HttpFetch(u) => audit::summary(&audit::redact(u.url())),
        };
        rec.target = Some(target);

        // 3. Decide, on the tree the sandbox will see: a staged grant's session sees its
        // layers. Without a runner the decision is still made and audited, and whatever would
        // run is refused (docs/design.md#service).
        let decision = match self.staged_view(&session, grant) {
            Some(view) => self.policy.decide_in(&view, grant, &parsed),
            None => self.policy.decide(grant, &parsed),
        };
        // The program a shell command runs, from the classifier's parse of it.
        rec.executable = match &decision {
            Decision::Allow(p) | Decision::Ask(p, _) => p.program.as_deref(),
            Decision::Refuse(r) => r.program.as_deref(),
        }
        .and_then(audit::executable);
        if let (None, Decision::Allow(plan) | Decision::Ask(plan, _)) =
            (&self.config.runner, &decision)
        {
            rec.class = plan.class;
            let refusal = Refusal::new(parsed.target(), Why::NoRunner);
            return self.refused(rec, &session, &tool, refusal, received).await;
        }
        // 4. A session whose sandbox was seen missing writes nothing more
        // (docs/design.md#preflight-and-poisoning): checked before a ticket is issued or
        // redeemed, so nobody is asked to approve a write that would then be refused.
        if let Decision::Allow(plan) | Decision::Ask(plan, _) = &decision {
            if plan.writes && self.state().unavailable.contains(session.as_str()) {
                rec.class = plan.class;
                let why = Why::UnavailableEarlier { tool: tool.clone() };
                let refusal = Refusal::new(parsed.target(), why);
                return self.refused(rec, &session, &tool, refusal, received).await;
            }
        }
        let plan = match decision {
            Decision::Allow(plan) => plan,
            Decision::Refuse(r) => return self.refused(rec, &session, &tool, r, received).await,
            Decision::Ask(plan, question) => {
                let binding = Binding {
                    session: session.to_string(),
                    call: call.to_string(),
                    grant: grant_name.clone(),
                    tool: tool.clone(),
                    arguments: arguments.clone(),
                };
                rec.class = plan.class;
                let by_owner = grant.grant.approvals == crate::config::Approvals::Owner;
                match approval {
                    None => {
                        let ticket =
                            self.state()
                                .tickets
                                .issue_for(binding, Instant::now(), by_owner);
                        let question = if by_owner {
                            format!("{question} (an owner approves it: boxctl approve TICKET)")
                        } else {
                            question
                        };
                        rec.decision = Some(Decided::Ask);
                        rec.reason = Some(audit::clip(&question));
                        journal(&rec, None, received);
                        if let Err(e) = self.record(rec).await {
                            return self.audit_failed(&e);
                        }
                        return Body::Ask { question, ticket };
                    }
                    Some(ticket) => {
                        let redeemed =
                            self.state()
                                .tickets
                                .redeem(&ticket, &binding, Instant::now());
                        // Waiting for an owner is no refusal to count: the ticket stays.
                        if let Err(e @ crate::tickets::TicketError::NotApproved) = redeemed {
                            rec.decision = Some(Decided::Refused);
                            rec.reason = Some(e.to_string());
                            journal(&rec, Some(Why::Approval(e).kind()), received);
                            return match self.record(rec).await {
                                Ok(_) => Body::Refused {
                                    reason: e.to_string(),
                                },
                                Err(err) => self.audit_failed(&err),
                            };
                        }
                        if let Err(e) = redeemed {
                            let refusal = Refusal::new(parsed.target(), Why::Approval(e));
                            return self.refused(rec, &session, &tool, refusal, received).await;
                        }
                        rec.decision = Some(Decided::Approved);
                        plan
                    }
                }
            }
        };
        rec.class = plan.class;
        if rec.decision.is_none() {
            rec.decision = Some(Decided::Allow);
        }

        // A staged grant's call runs over its session's layers, held for the call: a session
        // past its bytes, or a layer another call of it is using, is a refusal; a layer that
        // cannot be made is unavailable, never the real directory.
        let mut plan = plan;
        let budget = self
            .config
            .runner
            .as_ref()
            .map_or(Duration::from_secs(30), |r| r.call_budget(plan.tool));
        let staged = match self.stage_plan(&session, grant, &mut plan, Instant::now() + budget) {
            Ok(s) => s,
            Err(NotStaged::Refused(why)) => {
                let refusal = Refusal::new(parsed.target(), Why::Staged(why));
                return self.refused(rec, &session, &tool, refusal, received).await;
            }
            Err(NotStaged::Unavailable(why)) => {
                Broker::log_unstaged(&session, &call, &why);
                rec.status = Some(Ended::Unavailable);
                journal(&rec, None, received);
                if let Err(e) = self.record(rec).await {
                    return self.audit_failed(&e);
                }
                return Body::Unavailable {
                    message: Unavailable::RunnerUnavailable.to_string(),
                };
            }
        };
        // A preflight that failed for now is tried again once its retry is due.
        let ran_before = lock(&self.preflight).last().is_some();
        let preflight_ok = !ran_before || self.preflight().await.ok;

        // 5. Audit the decision before anything runs, and 6. run. Where a sandbox starts, the
        // record is written and synced while the runner makes the sandbox ready, and the tool
        // gets its input only once the record is on disk (`runner::Cleared`).
        let started = Instant::now();
        // The start-up preflight says whether a sandbox can start at all; the network one
        // only whether the way out works.
        let failed_preflight = if !preflight_ok {
            Some(("the preflight failed", Unavailable::RunnerUnavailable))
        } else if plan.egress.is_some() && !self.network_preflight().await.ok {
            Some((
                "the network preflight failed",
                Unavailable::EgressUnavailable,
            ))
        } else {
            None
        };
        if failed_preflight.is_some() {
            if let Err(e) = self.record(rec.clone()).await {
                return self.audit_failed(&e);
            }
        }
        let outcome = match failed_preflight {
            None => {
                self.run(&session, &call, plan, received, rec.clone(), staged)
                    .await
            }
            Some((which, why)) => {
                tracing::error!(
                    session = session.as_str(),
                    call = call.as_str(),
                    "{which}; see {}",
                    why.runbook()
                );
                Ok(Err(RunError::Unavailable(why)))
            }
        };
        let outcome = match outcome {
            Ok(o) => o,
            Err(NotRun::Audit(e)) => return self.audit_failed(&e),
            Err(NotRun::Busy) => {
                rec.status = Some(Ended::Busy);
                journal(&rec, None, received);
                let _ = self
                    .record_outcome(outcome_record(rec, Decided::NotRun, started))
                    .await;
                return error(ProtocolError::Busy);
            }
        };

        self.audit_weakened().await;

        // 7. Audit the outcome, then answer.
        let label = format!("{grant_name}/{tool}");
        let (status, body) = match outcome {
            Ok(out) => (Ended::Result, self.result_body(peer, out, label)),
            Err(RunError::Failed(f)) => (
                Ended::Failed,
                Body::Failed {
                    message: f.to_string(),
                },
            ),
            // The runner logged it for the operator; the model reads which directory.
            Err(RunError::MountChanged(e)) => (
                Ended::Refused,
                Body::Refused {
                    reason: e.to_string(),
                },
            ),
            // Protected targets that could not be held: nothing ran, and the reason says why.
            Err(RunError::Unprotected(e)) => (
                Ended::Refused,
                Body::Refused {
                    reason: e.to_string(),
                },
            ),
            Err(RunError::Unavailable(u)) => {
                if u.sandbox_missing() {
                    self.mark_unavailable(&session);
                }
                tracing::error!(
                    session = session.as_str(),
                    call = call.as_str(),
                    tool,
                    status = "unavailable",
                    "{u}; see {}",
                    u.runbook()
                );
                (
                    Ended::Unavailable,
                    Body::Unavailable {
                        message: u.to_string(),
                    },
                )
            }
        };
        rec.status = Some(status);
        journal(&rec, None, received);
        if let Err(e) = self
            .record_outcome(outcome_record(rec, Decided::Ran, started))
            .await
        {
            return self.audit_failed(&e);
        }
        body
    }

    async fn run(
        &self,
        session: &Ident,
        call: &Ident,
        plan: Plan,
        received: Instant,
        decision: Record,
        staged: Option<(Holding, Vec<Layer>)>,
    ) -> Result<Result<RunOutput, RunError>, NotRun> {
        // A free slot: the decision goes to disk while the sandbox is made (below). A call
        // that must wait for one has its decision on disk before it queues.
        let (permit, decision) = match self.slots.clone().try_acquire_owned() {
            Ok(permit) => (permit, Some(decision)),
            Err(_) => {
                if let Err(e) = self.record(decision).await {
                    return Err(NotRun::Audit(e));
                }
                // The bounded queue: past it, busy.
                if self.waiting.fetch_add(1, Ordering::SeqCst) >= self.queue_cap {
                    self.waiting.fetch_sub(1, Ordering::SeqCst);
                    return Err(NotRun::Busy);
                }
                let waiting = Counted(&self.waiting, None);
                let permit = self.slots.clone().acquire_owned().await;
                drop(waiting);
                let Ok(permit) = permit else {
                    return Err(NotRun::Busy);
                };
                (permit, None)
            }
        };
        // A call that waited for its slot past what is left of loopd's timeout would be
        // answered after loopd stopped waiting: it does not start.
        if let Some(rc) = &self.config.runner {
            let budget = Duration::from_millis(self.config.broker.timeout_ms);
            if received.elapsed() + rc.call_budget(plan.tool) >= budget {
                tracing::warn!(
                    session = session.as_str(),
                    call = call.as_str(),
                    waited_ms = received.elapsed().as_millis() as u64,
                    "the call waited for a slot too long to finish within broker.timeout_ms; answered busy"
                );
                // A call that did not wait has its decision on disk before its busy record.
                if let Some(decision) = decision {
                    if let Err(e) = self.record(decision).await {
                        return Err(NotRun::Audit(e));
                    }
                }
                return Err(NotRun::Busy);
            }
        }
        let timeout = self
            .config
            .runner
            .as_ref()
            .map_or(Duration::from_secs(30), |r| r.time_limit(plan.tool));
        let spec = RunSpec {
            session: session.clone(),
            call: call.clone(),
            tool: plan.tool,
            input: plan.input,
            mounts: plan.mounts,
            egress: plan.egress,
            timeout,
        };
        let runner = self.runner.clone();
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let cleaning = Cleaning(self.in_flight.clone(), self.idle.clone());
        let (answer_tx, answer_rx) = tokio::sync::oneshot::channel();
        let cleared = match decision {
            Some(_) => Cleared::pending(),
            None => Cleared::already(),
        };
        let runner_cleared = cleared.clone();
        // Should this future be dropped before the record is written, the runner stops.
        let _undecided = cleared.undecided_on_drop();
        let stage = self.stage.clone();
        // What the call staged is recorded (the real paths as they are now, for conflicts)
        // before its answer leaves: once the client has it, anything may change the real tree,
        // and that change must read as a conflict at commit, not as the state first seen.
        let answered = (stage.clone(), staged.as_ref().map(|(_, l)| l.clone()));
        let task = tokio::task::spawn_blocking(move || {
            let reply = Reply::after(runner_cleared, move |answer| {
                let (stage, layers) = answered;
                for l in layers.iter().flatten() {
                    if let Err(e) = stage.record_first(l) {
                        tracing::warn!(layer = %l.dir.display(), "recording what was staged failed: {e}");
                    }
                }
                let _ = answer_tx.send(answer);
            });
            runner.run_replying(&spec, reply);
            // And again once the sandbox is gone, before another call or a commit may take
            // the layers (a path already recorded keeps its first record).
            if let Some((holding, layers)) = staged {
                for l in &layers {
                    if let Err(e) = stage.record_first(l) {
                        tracing::warn!(layer = %l.dir.display(), "recording what was staged failed: {e}");
                    }
                }
                drop(holding);
            }
            // The slot and the count in flight are held until the clean-up after the answer
            // is done: `max_concurrent_calls` bounds sandboxes, not answers.
            drop(permit);
            drop(cleaning);
        });
        // The decision goes to disk on this thread while the runner's thread makes the sandbox.
        if let Some(decision) = decision {
            let on_disk = self.record(decision).await;
            cleared.decide(on_disk.is_ok());
            if let Err(e) = on_disk {
                // The runner stops the sandbox before its tool gets its input: nothing runs.
                let _ = answer_rx.await;
                return Err(NotRun::Audit(e));
            }
        }
        let answer = answer_rx.await;
        Ok(match answer {
            Ok(r) => {
                tokio::spawn(async move {
                    if let Err(e) = task.await {
                        tracing::error!(
                            error = %e,
                            "the runner task failed after its answer; see {}",
                            runbook::RUNNER_UNAVAILABLE
                        );
                    }
                });
                r
            }
            Err(_) => {
                // The runner panicked: its own guards cleaned up; the model gets a fixed sentence.
                let e = match task.await {
                    Err(e) => e.to_string(),
                    Ok(()) => "it gave no answer".to_string(),
                };
                tracing::error!(
                    error = %e,
                    "the runner task failed; see {}",
                    runbook::RUNNER_UNAVAILABLE
                );
                Err(RunError::Unavailable(Unavailable::RunnerUnavailable))
            }
        })
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
        // `./x` and `x/` are one refusal (seed 000 5.1.4), and two different targets are two.
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

    fn audit_failed(&self, e: &str) -> Body {
        tracing::error!(
            error = e,
            "an audit record could not be written; see {}",
            runbook::AUDIT_UNWRITABLE
        );
        Body::Unavailable {
            message: AUDIT_UNAVAILABLE.into(),
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

    fn tools(&self, grant: &str) -> Body {
        let Some(g) = self.policy.grant(grant) else {
            return error(ProtocolError::UnknownGrant(grant.to_string()));
        };
        let tools = self
            .policy
            .offered(g)
            .into_iter()
            .map(|t| ToolSchema {
                name: t.as_str().into(),
                description: t.description().into(),
                parameters: t.parameters(),
            })
            .collect();
        Body::Tools {
            tools,
            staged: g.grant.writes == crate::config::Writes::Staged,
        }
    }

    /// A page of a stored output; another peer's id is as unknown as one never given.
    fn result(&self, peer: Peer, result_id: &str, offset: usize) -> Body {
        let page = self
            .state()
            .results
            .page(peer.uid, result_id, offset, PAGE_CHARS);
        match page {
            Some((content, next_offset)) => Body::ResultPage {
                content,
                offset,
                next_offset,
            },
            None => error(ProtocolError::UnknownResult(result_id.to_string())),
        }
    }

    async fn decline(&self, ticket: &str) -> Body {
        let Some(b) = self.state().tickets.decline(ticket, Instant::now()) else {
            return error(ProtocolError::UnknownTicket);
        };
        let rec = Record {
            kind: RecordKind::Call,
            session: Some(b.session),
            call: Some(b.call),
            grant: Some(b.grant),
            tool: Some(b.tool),
            decision: Some(Decided::Declined),
            status: Some(Ended::Cancelled),
            ..Record::default()
        };
        journal(&rec, None, Instant::now());
        match self.record(rec).await {
            Ok(_) => Body::Declined {},
            Err(e) => self.audit_failed(&e),
        }
    }

    fn end_session(&self, session: &str) -> Body {
        if Ident::parse(session).is_err() {
            return error(ProtocolError::BadIdent("session"));
        }
        let mut st = self.state();
        st.refusals.end_session(session);
        st.tickets.end_session(session);
        if st.unavailable.remove(session) {
            st.unavailable_order.retain(|s| s != session);
        }
        Body::Ended {}
    }

    async fn status(&self) -> Body {
        let now = Instant::now();
        let mut preflight = lock(&self.preflight).status(now, "not run yet");
        preflight.network = Some(Box::new(
            lock(&self.network).status(now, "runs before the first http_fetch"),
        ));
        let head = self.audit_head();
        Body::Status(Status {
            protocol: PROTOCOL,
            version: env!("CARGO_PKG_VERSION").into(),
            backend: self.backend.map_or(NO_BACKEND, Backend::as_str).into(),
            enforce_limits: self.config.runner.as_ref().is_none_or(|r| r.enforce_limits),
            preflight,
            poisoned: self.runner.poisoned(),
            weakened: self.runner.weakened(),
            audit_head: AuditHead {
                seq: head.seq,
                hash: head.hash,
            },
            audit_stalled_ms: self
                .audit_watch
                .stalled_for()
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            privileges: crate::privileges::Privileges::read()
                .ok()
                .map(crate::privileges::Privileges::shown),
        })
    }
}

/// One journal line per decision about a call (docs/design.md#service): who, which grant and
/// tool, what was decided, how it ended (when it has), how long brokerd took from the request,
/// and for a refusal its kind. Never the model's text: not the target, not the reason.
fn journal(rec: &Record, kind: Option<&'static str>, received: Instant) {
    let field = |f: &Option<String>| f.clone().unwrap_or_default();
    tracing::info!(
        session = field(&rec.session),
        call = field(&rec.call),
        grant = field(&rec.grant),
        // A tool name the model made up is its text: only the four are named.
        tool = rec
            .tool
            .as_deref()
            .and_then(proto::tools::ToolName::parse)
            .map_or("other", proto::tools::ToolName::as_str),
        decision = rec.decision.map_or("", Decided::as_str),
        status = rec.status.map_or("", Ended::as_str),
        kind = kind.unwrap_or(""),
        duration_ms = received.elapsed().as_millis() as u64,
        "decision"
    );
}

/// The longest a call's outcome record waits for the disk when no other record follows it.
pub const OUTCOME_SYNC_WITHIN: Duration = Duration::from_millis(100);

/// The `backend` of `status` when the config has no `[runner]` section.
pub const NO_BACKEND: &str = "none";

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves plain data behind; keep serving.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub use crate::preflight::NETWORK_PREFLIGHT_URL;

/// What the model reads when its call's audit record cannot be written.
pub const AUDIT_UNAVAILABLE: &str = "the call could not be audited, so it was not answered";

/// Why [`Broker::run`] ran nothing: no slot, or the decision could not be audited.
enum NotRun {
    Busy,
    Audit(String),
}

/// The second record of an allowed call: whether it ran, how it ended, how long it took.
fn outcome_record(mut rec: Record, decision: Decided, started: Instant) -> Record {
    rec.decision = Some(decision);
    rec.duration_ms = Some(started.elapsed().as_millis() as u64);
    rec
}

fn error(e: ProtocolError) -> Body {
    Body::Error {
        message: e.to_string(),
    }
}
