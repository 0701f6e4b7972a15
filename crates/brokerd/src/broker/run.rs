//! A decided call's run: a slot (or the bounded queue), the decision on disk while the sandbox
//! is made, the runner on a blocking thread, and its answer (docs/design.md#life-of-a-call).

use tokio::sync::OwnedSemaphorePermit;

use super::*;

/// Why [`Broker::run`] ran nothing: no slot, or the decision could not be audited.
pub(super) enum NotRun {
    Busy,
    Audit(String),
}

/// What one call answers once it ran, and what its proxy did.
type Ran = (Result<RunOutput, RunError>, Option<Summary>);

impl Broker {
    /// Runs a decided call: a slot, the run on a blocking thread while its decision goes to
    /// disk, and the runner's answer.
    pub(super) async fn run(
        &self,
        session: &Ident,
        call: &Ident,
        plan: Plan,
        received: Instant,
        decision: Record,
        staged: Option<(Holding, Vec<Layer>)>,
    ) -> Result<Ran, NotRun> {
        let (permit, decision) = self.slot(decision).await?;
        if self.waited_too_long(session, call, &plan, received) {
            // A call that did not wait has its decision on disk before its busy record.
            if let Some(decision) = decision {
                if let Err(e) = self.record(decision).await {
                    return Err(NotRun::Audit(e));
                }
            }
            return Err(NotRun::Busy);
        }
        let spec = self.run_spec(session, call, plan, &staged);
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let cleaning = Cleaning(self.in_flight.clone(), self.idle.clone());
        let (answer_tx, answer_rx) = tokio::sync::oneshot::channel();
        let cleared = match decision {
            Some(_) => Cleared::pending(),
            None => Cleared::already(),
        };
        // Should this future be dropped before the record is written, the runner stops.
        let _undecided = cleared.undecided_on_drop();
        // What the call's proxy did, left by the runner before the answer.
        let egress = EgressSink::default();
        let on_runner = OnRunner {
            runner: self.runner.clone(),
            spec,
            stage: self.stage.clone(),
            staged,
            cleared: cleared.clone(),
            egress: egress.clone(),
            answer: answer_tx,
            permit,
            cleaning,
        };
        let task = tokio::task::spawn_blocking(move || on_runner.run());
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
        let answer = runner_answer(answer_rx, task).await;
        Ok((answer, egress.take()))
    }

    /// A slot for the call, and its decision where that is still to be written: a free slot
    /// at once, the decision to go to disk while the sandbox is made; else a place in the
    /// bounded queue (past it, busy), the decision on disk before the call waits.
    async fn slot(
        &self,
        decision: Record,
    ) -> Result<(OwnedSemaphorePermit, Option<Record>), NotRun> {
        if let Ok(permit) = self.slots.clone().try_acquire_owned() {
            return Ok((permit, Some(decision)));
        }
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
        Ok((permit, None))
    }

    /// Whether the call waited for its slot past what is left of loopd's timeout: it would be
    /// answered after loopd stopped waiting, so it does not start.
    fn waited_too_long(
        &self,
        session: &Ident,
        call: &Ident,
        plan: &Plan,
        received: Instant,
    ) -> bool {
        let Some(rc) = &self.config.runner else {
            return false;
        };
        let budget = Duration::from_millis(self.config.broker.timeout_ms);
        let call_budget = rc
            .for_grant(&plan.limits)
            .call_budget(plan.tool, plan.egress.is_some());
        if received.elapsed() + call_budget < budget {
            return false;
        }
        tracing::warn!(
            session = session.as_str(),
            call = call.as_str(),
            waited_ms = received.elapsed().as_millis() as u64,
            "the call waited for a slot too long to finish within broker.timeout_ms; answered busy"
        );
        true
    }

    /// What the runner is given for the plan: its time limit, its staged bound and toolset.
    fn run_spec(
        &self,
        session: &Ident,
        call: &Ident,
        plan: Plan,
        staged: &Option<(Holding, Vec<Layer>)>,
    ) -> RunSpec {
        let timeout = self
            .config
            .runner
            .as_ref()
            .map_or(Duration::from_secs(30), |r| {
                r.grant_time_limit(&plan.limits, plan.tool)
            });
        RunSpec {
            session: session.clone(),
            call: call.clone(),
            tool: plan.tool,
            input: plan.input,
            mounts: plan.mounts,
            egress: plan.egress,
            timeout,
            staged_limit: staged.as_ref().and_then(|(h, _)| h.limit),
            toolset: plan
                .toolset
                .as_ref()
                .and_then(|name| self.config.toolsets.get(name))
                .cloned(),
            limits: plan.limits,
            cache: plan.cache,
        }
    }
}

/// A call as the runner's blocking thread takes it: its run, then the clean-up after its
/// answer.
struct OnRunner {
    runner: Arc<dyn Runner>,
    spec: RunSpec,
    stage: Arc<Stage>,
    staged: Option<(Holding, Vec<Layer>)>,
    cleared: Cleared,
    egress: EgressSink,
    answer: tokio::sync::oneshot::Sender<Result<RunOutput, RunError>>,
    /// The slot and the count in flight are held until the clean-up after the answer is
    /// done: `max_concurrent_calls` bounds sandboxes, not answers.
    permit: OwnedSemaphorePermit,
    cleaning: Cleaning,
}

impl OnRunner {
    /// The run, on the runner's thread: the cache made ready, the answer sent once what was
    /// staged is recorded, then the layers recorded again, the cache bounded, the slot freed.
    fn run(self) {
        let OnRunner {
            runner,
            mut spec,
            stage,
            staged,
            cleared,
            egress,
            answer,
            permit,
            cleaning,
        } = self;
        let in_use = ready_cache(&mut spec);
        // What the call staged is recorded (the real paths as they are now, for conflicts)
        // before its answer leaves: once the client has it, anything may change the real tree,
        // and that change must read as a conflict at commit, not as the state first seen.
        let answered = (stage.clone(), staged.as_ref().map(|(_, l)| l.clone()));
        let reply = Reply::after(cleared, move |a| {
            let (stage, layers) = answered;
            for l in layers.iter().flatten() {
                if let Err(e) = stage.record_first(l) {
                    tracing::warn!(layer = %l.dir.display(), "recording what was staged failed: {e}");
                }
            }
            let _ = answer.send(a);
        })
        .egress_to(egress);
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
        // A call that filled its cache past the bound leaves it emptied for the next,
        // unless another call of the grant is using it.
        if let (Some(cache), Some(in_use)) = (&spec.cache, &in_use) {
            if in_use.alone() {
                bound_cache(&spec, cache, crate::runner::cache::bound(cache));
            }
        }
        drop(in_use);
        drop(permit);
        drop(cleaning);
    }
}

/// The runner's answer, as soon as it gives it, its thread left to finish the clean-up; a
/// runner that panicked before answering is unavailable, with a fixed sentence.
async fn runner_answer(
    answer: tokio::sync::oneshot::Receiver<Result<RunOutput, RunError>>,
    task: tokio::task::JoinHandle<()>,
) -> Result<RunOutput, RunError> {
    match answer.await {
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
    }
}

/// The call's cache made ready before its sandbox (docs/design.md#grant-caches), counted as
/// in use until the guard goes: one that cannot be made leaves the call without it, said in
/// the journal, rather than failing it.
fn ready_cache(spec: &mut RunSpec) -> Option<crate::runner::cache::InUse> {
    let cache = spec.cache.clone()?;
    let in_use = crate::runner::cache::enter(&cache.dir);
    let ready = crate::runner::cache::prepare(&cache, &in_use);
    let made = ready.is_ok();
    bound_cache(spec, &cache, ready);
    if made {
        Some(in_use)
    } else {
        spec.cache = None;
        None
    }
}

/// The journal's line for a cache found over its bound (and emptied), or not made ready.
fn bound_cache(
    spec: &RunSpec,
    cache: &crate::runner::cache::Cache,
    outcome: std::io::Result<Option<crate::runner::cache::Usage>>,
) {
    match outcome {
        Ok(None) => {}
        Ok(Some(u)) => tracing::info!(
            session = %spec.session,
            call = %spec.call,
            cache = %cache.dir.display(),
            bytes = u.bytes,
            entries = u.entries,
            max_cache_bytes = cache.max_bytes,
            "the grant's cache was over its bound and is emptied"
        ),
        Err(e) => tracing::warn!(
            session = %spec.session,
            call = %spec.call,
            cache = %cache.dir.display(),
            "the grant's cache could not be made ready ({e}); the call runs without it"
        ),
    }
}
