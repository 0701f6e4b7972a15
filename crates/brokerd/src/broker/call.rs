//! The life of one call (docs/design.md#life-of-a-call), a function per step in the order
//! they run: admitted (identifiers, grant), parsed, decided, asked or approved, staged, run
//! (past the preflights, its decision audited while the sandbox is made) and answered (its
//! outcome audited). A step that ends the call answers it there: its `Err` is the answer.

use super::*;

/// A `call` request's fields, as the client sent them.
pub(super) struct CallRequest {
    pub session: String,
    pub call: String,
    pub grant: String,
    pub tool: String,
    pub arguments: String,
    pub approval: Option<String>,
}

/// A step's outcome: `Err` is the call's answer, given already (a refusal, an ask, busy,
/// unavailable), with its record written where it has one.
type Step<T> = Result<T, Body>;

/// A staged grant's layers, held for the call (`Broker::stage_plan`).
type Staged = Option<(Holding, Vec<Layer>)>;

/// A call past its protocol checks, with its audit record as the steps fill it in.
struct Call<'a> {
    session: Ident,
    call: Ident,
    grant: &'a GrantPolicy,
    tool: String,
    arguments: String,
    approval: Option<String>,
    /// When the request arrived: loopd's clock for the call started about then.
    received: Instant,
    rec: Record,
}

impl Call<'_> {
    /// What an ask's ticket is bound to: this exact call.
    fn binding(&self) -> Binding {
        Binding {
            session: self.session.to_string(),
            call: self.call.to_string(),
            grant: self.grant.name.clone(),
            tool: self.tool.clone(),
            arguments: self.arguments.clone(),
        }
    }
}

impl Broker {
    /// The life of one call.
    pub(super) async fn call(&self, peer: Peer, req: CallRequest) -> Body {
        // loopd's clock for this call started about now: [broker] timeout_ms from here.
        let received = Instant::now();
        let steps = async {
            let mut c = self.admit(req, received)?;
            let parsed = self.parse_call(&mut c).await?;
            let decision = self.decide_call(&mut c, &parsed).await?;
            let mut plan = self.approve_call(&mut c, &parsed, decision).await?;
            // A call that does not run holds its layers until it is answered.
            let mut staged = self.stage_call(&mut c, &parsed, &mut plan).await?;
            let (outcome, started) = self.run_call(&mut c, plan, &mut staged).await?;
            Ok::<Body, Body>(self.answer_call(peer, c, outcome, started).await)
        };
        steps.await.unwrap_or_else(|answer| answer)
    }

    /// Step 1, the protocol checks: no decision is made on a malformed request, and none
    /// is audited.
    // The answer is moved once, to the reply, as every step's is: a box would only add an
    // allocation.
    #[allow(clippy::result_large_err)]
    fn admit(&self, req: CallRequest, received: Instant) -> Step<Call<'_>> {
        let Ok(session) = Ident::parse(req.session) else {
            return Err(error(ProtocolError::BadIdent("session")));
        };
        let Ok(call) = Ident::parse(req.call) else {
            return Err(error(ProtocolError::BadIdent("call")));
        };
        if self.shutting_down.load(Ordering::SeqCst) {
            return Err(error(ProtocolError::ShuttingDown));
        }
        let Some(grant) = self.policy.grant(&req.grant) else {
            return Err(error(ProtocolError::UnknownGrant(req.grant)));
        };
        let rec = Record {
            kind: RecordKind::Call,
            session: Some(session.to_string()),
            call: Some(call.to_string()),
            grant: Some(req.grant),
            tool: Some(audit::summary(&req.tool)),
            toolset: grant.grant.toolset.clone(),
            ..Record::default()
        };
        Ok(Call {
            session,
            call,
            grant,
            tool: req.tool,
            arguments: req.arguments,
            approval: req.approval,
            received,
            rec,
        })
    }

    /// Step 2, the model's arguments parsed and the call's target recorded; a call that
    /// does not parse is refused.
    async fn parse_call(&self, c: &mut Call<'_>) -> Step<ToolArgs> {
        let parsed = match args::parse(&c.tool, &c.arguments) {
            Ok(a) => a,
            Err(e) => {
                // Counted by what it is about: six different bad URLs are six refusals.
                let target = args::raw_target(&c.arguments);
                c.rec.target = Some(audit::summary(&target));
                let refusal = Refusal::new(&target, Why::Arguments(e.to_string()));
                return Err(self.refuse_call(c, refusal).await);
            }
        };
        let target = match &parsed {
            args::ToolArgs::ReadFile(a) => audit::summary(&a.path),
            args::ToolArgs::WriteFile(a) => audit::summary(&a.path),
            args::ToolArgs::Shell(a) => audit::summary(&a.command),
            args::ToolArgs::HttpFetch(u) => audit::summary(&audit::redact(u.url())),
        };
        c.rec.target = Some(target);
        Ok(parsed)
    }

    /// Steps 3 and 4, the decision, and the refusal of what would run where it cannot: with
    /// no runner, or a write of a session whose sandbox was seen missing.
    async fn decide_call(&self, c: &mut Call<'_>, parsed: &ToolArgs) -> Step<Decision> {
        // 3. Decide, on the tree the sandbox will see: a staged grant's session sees its
        // layers. Without a runner the decision is still made and audited, and whatever would
        // run is refused (docs/design.md#service).
        let decision = match self.decide(&c.session, c.grant, parsed).await {
            Ok(d) => d,
            Err(why) => {
                let refusal = Refusal::new(parsed.target(), why);
                return Err(self.refuse_call(c, refusal).await);
            }
        };
        // The program a shell command runs, from the classifier's parse of it.
        c.rec.executable = match &decision {
            Decision::Allow(p) | Decision::Ask(p, _) => p.program.as_deref(),
            Decision::Refuse(r) => r.program.as_deref(),
        }
        .and_then(audit::executable);
        if let (None, Decision::Allow(plan) | Decision::Ask(plan, _)) =
            (&self.config.runner, &decision)
        {
            c.rec.class = plan.class;
            let refusal = Refusal::new(parsed.target(), Why::NoRunner);
            return Err(self.refuse_call(c, refusal).await);
        }
        // 4. A session whose sandbox was seen missing writes nothing more
        // (docs/design.md#preflight-and-poisoning): checked before a ticket is issued or
        // redeemed, so nobody is asked to approve a write that would then be refused.
        if let Decision::Allow(plan) | Decision::Ask(plan, _) = &decision {
            if plan.writes && self.state().unavailable.contains(c.session.as_str()) {
                c.rec.class = plan.class;
                let why = Why::UnavailableEarlier {
                    tool: c.tool.clone(),
                };
                let refusal = Refusal::new(parsed.target(), why);
                return Err(self.refuse_call(c, refusal).await);
            }
        }
        Ok(decision)
    }

    /// The decision carried out up to a plan to run: a refusal answered, an ask without a
    /// ticket asked, a ticket redeemed for this exact call.
    async fn approve_call(
        &self,
        c: &mut Call<'_>,
        parsed: &ToolArgs,
        decision: Decision,
    ) -> Step<Plan> {
        let plan = match decision {
            Decision::Allow(plan) => plan,
            Decision::Refuse(r) => return Err(self.refuse_call(c, r).await),
            Decision::Ask(plan, question) => {
                c.rec.class = plan.class;
                match c.approval.take() {
                    None => return Err(self.ask(c, question).await),
                    Some(ticket) => {
                        self.redeem(c, parsed, &ticket).await?;
                        plan
                    }
                }
            }
        };
        c.rec.class = plan.class;
        if c.rec.decision.is_none() {
            c.rec.decision = Some(Decided::Allow);
        }
        Ok(plan)
    }

    /// An ask without a ticket: one is issued for this exact call, and the question the
    /// owner reads is audited and answered.
    async fn ask(&self, c: &mut Call<'_>, question: String) -> Body {
        let by_owner = c.grant.grant.approvals == crate::config::Approvals::Owner;
        let ticket = self
            .state()
            .tickets
            .issue_for(c.binding(), Instant::now(), by_owner);
        let question = if by_owner {
            format!("{question} (an owner approves it: boxctl approve TICKET)")
        } else {
            question
        };
        c.rec.decision = Some(Decided::Ask);
        c.rec.reason = Some(audit::clip(&question));
        journal(&c.rec, None, c.received);
        if let Err(e) = self.record(std::mem::take(&mut c.rec)).await {
            return self.audit_failed(&e);
        }
        Body::Ask { question, ticket }
    }

    /// An ask's ticket redeemed for this exact call: approved, or the call is refused.
    async fn redeem(&self, c: &mut Call<'_>, parsed: &ToolArgs, ticket: &str) -> Step<()> {
        let redeemed = self
            .state()
            .tickets
            .redeem(ticket, &c.binding(), Instant::now());
        // Waiting for an owner is no refusal to count: the ticket stays.
        if let Err(e @ crate::tickets::TicketError::NotApproved) = redeemed {
            c.rec.decision = Some(Decided::Refused);
            c.rec.reason = Some(e.to_string());
            journal(&c.rec, Some(Why::Approval(e).kind()), c.received);
            return Err(match self.record(std::mem::take(&mut c.rec)).await {
                Ok(_) => Body::Refused {
                    reason: e.to_string(),
                },
                Err(err) => self.audit_failed(&err),
            });
        }
        if let Err(e) = redeemed {
            let refusal = Refusal::new(parsed.target(), Why::Approval(e));
            return Err(self.refuse_call(c, refusal).await);
        }
        c.rec.decision = Some(Decided::Approved);
        Ok(())
    }

    /// The plan given its session's layers, held for the call where its grant is staged.
    async fn stage_call(
        &self,
        c: &mut Call<'_>,
        parsed: &ToolArgs,
        plan: &mut Plan,
    ) -> Step<Staged> {
        // A staged grant's call runs over its session's layers, held for the call: a session
        // past its bytes, or a layer another call of it is using, is a refusal; a layer that
        // cannot be made is unavailable, never the real directory.
        let budget = self
            .config
            .runner
            .as_ref()
            .map_or(Duration::from_secs(30), |r| {
                r.for_grant(&plan.limits)
                    .call_budget(plan.tool, plan.egress.is_some())
            });
        match self.stage_plan(&c.session, c.grant, plan, Instant::now() + budget) {
            Ok(s) => Ok(s),
            Err(NotStaged::Refused(why)) => {
                let refusal = Refusal::new(parsed.target(), Why::Staged(why));
                Err(self.refuse_call(c, refusal).await)
            }
            Err(NotStaged::Unavailable(why)) => {
                Broker::log_unstaged(&c.session, &c.call, &why);
                c.rec.status = Some(Ended::Unavailable);
                journal(&c.rec, None, c.received);
                if let Err(e) = self.record(std::mem::take(&mut c.rec)).await {
                    return Err(self.audit_failed(&e));
                }
                Err(Body::Unavailable {
                    message: Unavailable::LayerUnavailable.to_string(),
                })
            }
        }
    }

    /// Steps 5 and 6, the decision audited and the call run, unless a preflight it needs
    /// failed; how the run ended, and when it started. The layers run over are taken from
    /// `staged`.
    async fn run_call(
        &self,
        c: &mut Call<'_>,
        plan: Plan,
        staged: &mut Staged,
    ) -> Step<(Result<RunOutput, RunError>, Instant)> {
        // A preflight that failed for now is tried again once its retry is due.
        let ran_before = lock(&self.preflight).last().is_some();
        let preflight_ok = !ran_before || self.preflight().await.ok;

        // 5. Audit the decision before anything runs, and 6. run. Where a sandbox starts, the
        // record is written and synced while the runner makes the sandbox ready, and the tool
        // gets its input only once the record is on disk (`runner::Cleared`).
        let started = Instant::now();
        let failed_preflight = self.failed_preflight(preflight_ok, &plan).await;
        if failed_preflight.is_some() {
            if let Err(e) = self.record(c.rec.clone()).await {
                let rec = std::mem::take(&mut c.rec);
                return Err(self.decision_unrecorded(rec, &e, c.received));
            }
        }
        let outcome = match failed_preflight {
            None => {
                let decision = c.rec.clone();
                self.run(
                    &c.session,
                    &c.call,
                    plan,
                    c.received,
                    decision,
                    staged.take(),
                )
                .await
            }
            Some((which, why)) => {
                tracing::error!(
                    session = c.session.as_str(),
                    call = c.call.as_str(),
                    "{which}; see {}",
                    why.runbook()
                );
                Ok((Err(RunError::Unavailable(why)), None))
            }
        };
        match outcome {
            Ok((o, egress)) => {
                c.rec.egress = egress;
                Ok((o, started))
            }
            Err(NotRun::Audit(e)) => {
                let rec = std::mem::take(&mut c.rec);
                Err(self.decision_unrecorded(rec, &e, c.received))
            }
            Err(NotRun::Busy) => {
                c.rec.status = Some(Ended::Busy);
                journal(&c.rec, None, c.received);
                let rec = std::mem::take(&mut c.rec);
                let _ = self
                    .record_outcome(outcome_record(rec, Decided::NotRun, started))
                    .await;
                Err(error(ProtocolError::Busy))
            }
        }
    }

    /// The preflight a call cannot run past, if it failed: what failed, and the call's
    /// answer. The start-up preflight says whether a sandbox can start at all; the network
    /// one only whether the way out works.
    async fn failed_preflight(
        &self,
        preflight_ok: bool,
        plan: &Plan,
    ) -> Option<(&'static str, Unavailable)> {
        if !preflight_ok {
            Some(("the preflight failed", Unavailable::RunnerUnavailable))
        } else if !self.toolset_ready(plan.toolset.as_deref()).await {
            // Never another toolset in its place (docs/design.md#toolsets).
            Some((
                "the grant's toolset failed its check",
                Unavailable::ToolsetUnavailable,
            ))
        } else if plan.egress.is_some() && !self.network_preflight().await.ok {
            Some((
                "the network preflight failed",
                Unavailable::EgressUnavailable,
            ))
        } else {
            None
        }
    }

    /// Step 7, the outcome audited, then the answer.
    async fn answer_call(
        &self,
        peer: Peer,
        c: Call<'_>,
        outcome: Result<RunOutput, RunError>,
        started: Instant,
    ) -> Body {
        let Call {
            session,
            call,
            grant,
            tool,
            received,
            mut rec,
            ..
        } = c;
        self.audit_weakened().await;

        // 7. Audit the outcome, then answer.
        let label = format!("{}/{tool}", grant.name);
        let status = outcome
            .as_ref()
            .map_or_else(RunError::ended, |_| Ended::Result);
        let body = match outcome {
            Ok(out) => self.result_body(peer, out, label),
            Err(RunError::Failed(f)) => Body::Failed {
                message: f.to_string(),
            },
            // The runner logged it for the operator; the model reads which directory.
            Err(RunError::MountChanged(e)) => Body::Refused {
                reason: e.to_string(),
            },
            // Protected targets that could not be held: nothing ran, and the reason says why.
            Err(RunError::Unprotected(e)) => Body::Refused {
                reason: e.to_string(),
            },
            Err(RunError::Unavailable(u)) => {
                if u.sandbox_missing() {
                    self.mark_unavailable(&session);
                }
                tracing::error!(
                    session = session.as_str(),
                    call = call.as_str(),
                    tool,
                    status = status.as_str(),
                    "{u}; see {}",
                    u.runbook()
                );
                Body::Unavailable {
                    message: u.to_string(),
                }
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

    /// The call refused, audited (`Broker::refused`): its answer.
    async fn refuse_call(&self, c: &mut Call<'_>, refusal: Refusal) -> Body {
        let rec = std::mem::take(&mut c.rec);
        self.refused(rec, &c.session, &c.tool, refusal, c.received)
            .await
    }
}
