//! The broker's audit records and journal lines: a decision synced before anything runs, an
//! outcome written before its answer and synced after, one journal line per decision
//! (docs/design.md#audit, docs/design.md#service).

use super::*;

/// One journal line per decision about a call (docs/design.md#service): who, which grant and
/// tool, what was decided, how it ended (when it has), how long brokerd took from the request,
/// and for a refusal its kind. Never the model's text: not the target, not the reason.
pub(super) fn journal(rec: &Record, kind: Option<&'static str>, received: Instant) {
    let field = |f: &Option<String>| f.clone().unwrap_or_default();
    tracing::info!(
        session = field(&rec.session),
        call = field(&rec.call),
        grant = field(&rec.grant),
        toolset = rec
            .toolset
            .as_deref()
            .unwrap_or(crate::config::BASE_TOOLSET),
        // A tool name the model made up is its text: only the four are named.
        tool = rec
            .tool
            .as_deref()
            .and_then(proto::tools::ToolName::parse)
            .map_or("other", proto::tools::ToolName::as_str),
        decision = rec.decision.map_or("", Decided::as_str),
        status = rec.status.map_or("", Ended::as_str),
        kind = kind.unwrap_or(""),
        // What a shell call's proxy did, in counts (the names are in the audit record).
        egress = rec
            .egress
            .as_ref()
            .map(proto::egress::Summary::counts)
            .unwrap_or_default(),
        duration_ms = received.elapsed().as_millis() as u64,
        "decision"
    );
}

/// The longest a call's outcome record waits for the disk when no other record follows it.
pub const OUTCOME_SYNC_WITHIN: Duration = Duration::from_millis(100);

/// The second record of an allowed call: whether it ran, how it ended, how long it took.
pub(super) fn outcome_record(mut rec: Record, decision: Decided, started: Instant) -> Record {
    rec.decision = Some(decision);
    rec.duration_ms = Some(started.elapsed().as_millis() as u64);
    rec
}

impl Broker {
    /// Appends one record, synced, off the async threads.
    pub(super) async fn record(&self, rec: Record) -> Result<audit::Head, String> {
        self.write(rec, true).await
    }

    /// Appends a call's outcome without waiting for the disk (docs/design.md#audit): the next
    /// record's sync covers it, one sync for both, or, where no record follows within
    /// [`OUTCOME_SYNC_WITHIN`], a sync of its own. The decision before it was synced before
    /// the tool got its input.
    pub(super) async fn record_outcome(&self, rec: Record) -> Result<audit::Head, String> {
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

    pub(super) async fn write(&self, rec: Record, sync: bool) -> Result<audit::Head, String> {
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
    /// not apply (docs/design.md#limits: weaker confinement is never silent).
    pub(super) async fn audit_weakened(&self) {
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

    /// An allowed call whose decision record could not be written: nothing ran, and its
    /// decision line goes to the journal first (with status `unavailable`), naming its session
    /// and call, as a refusal's and an ask's do before their record: on a full audit disk the
    /// journal is the operator's only trace of it (docs/design.md#audit).
    pub(super) fn decision_unrecorded(&self, mut rec: Record, e: &str, received: Instant) -> Body {
        rec.status = Some(Ended::Unavailable);
        journal(&rec, None, received);
        tracing::error!(
            session = rec.session.as_deref().unwrap_or_default(),
            call = rec.call.as_deref().unwrap_or_default(),
            error = e,
            "an audit record could not be written; see {}",
            runbook::AUDIT_UNWRITABLE
        );
        Body::Unavailable {
            message: AUDIT_UNAVAILABLE.into(),
        }
    }

    pub(super) fn audit_failed(&self, e: &str) -> Body {
        tracing::error!(
            error = e,
            "an audit record could not be written; see {}",
            runbook::AUDIT_UNWRITABLE
        );
        Body::Unavailable {
            message: AUDIT_UNAVAILABLE.into(),
        }
    }
}
