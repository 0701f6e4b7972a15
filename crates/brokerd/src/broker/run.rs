//! A decided call's run: a slot (or the bounded queue), the decision on disk while the sandbox
//! is made, the runner on a blocking thread, and its answer (docs/design.md#life-of-a-call).

use super::*;

/// Why [`Broker::run`] ran nothing: no slot, or the decision could not be audited.
pub(super) enum NotRun {
    Busy,
    Audit(String),
}

impl Broker {
    pub(super) async fn run(
        &self,
        session: &Ident,
        call: &Ident,
        plan: Plan,
        received: Instant,
        decision: Record,
        staged: Option<(Holding, Vec<Layer>)>,
    ) -> Result<(Result<RunOutput, RunError>, Option<Summary>), NotRun> {
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
            let call_budget = rc
                .for_grant(&plan.limits)
                .call_budget(plan.tool, plan.egress.is_some());
            if received.elapsed() + call_budget >= budget {
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
            .map_or(Duration::from_secs(30), |r| {
                r.grant_time_limit(&plan.limits, plan.tool)
            });
        let spec = RunSpec {
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
        // What the call's proxy did, left by the runner before the answer.
        let egress = EgressSink::default();
        let egress_in = egress.clone();
        let task = tokio::task::spawn_blocking(move || {
            let mut spec = spec;
            let in_use = ready_cache(&mut spec);
            let reply = Reply::after(runner_cleared, move |answer| {
                let (stage, layers) = answered;
                for l in layers.iter().flatten() {
                    if let Err(e) = stage.record_first(l) {
                        tracing::warn!(layer = %l.dir.display(), "recording what was staged failed: {e}");
                    }
                }
                let _ = answer_tx.send(answer);
            })
            .egress_to(egress_in);
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
        let answer = match answer {
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
        };
        Ok((answer, egress.take()))
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
