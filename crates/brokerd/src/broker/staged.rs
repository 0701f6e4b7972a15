//! The broker's side of staged writes (docs/design.md#staged-writes-and-owners): a staged
//! grant's calls decided on the session's merged view and run over its layers, and the
//! `changes`, `commit`, `discard` and `approve` ops. Owners only commit, discard and approve.

use std::path::PathBuf;
use std::time::Instant;

use proto::broker::Body;
use proto::ident::Ident;

use super::owner::{self, commit_session, discard_session, list, sessions, shown_paths};
use super::{error, Broker, Peer, ProtocolError};
use crate::audit::{self, Decided, Record, RecordKind, StagedPath};
use crate::config::Writes;
use crate::policy::{GrantPolicy, Plan};
use crate::runbook;
use crate::runner::StageMount;
use crate::stage::{changes, Holding, Layer, Merged, StageError};

/// Why a staged call was not run.
pub(super) enum NotStaged {
    /// Refused: the reason is for the model (a session past its bytes, a layer in use).
    Refused(String),
    /// The layer could not be made: nothing runs, and the operator's log says why.
    Unavailable(String),
}

impl Broker {
    /// A staged grant's writable directories (the ones its sessions' layers lie over).
    pub(super) fn staged_roots(g: &GrantPolicy) -> Vec<PathBuf> {
        if g.grant.writes != Writes::Staged {
            return Vec::new();
        }
        g.workspace
            .roots()
            .iter()
            .filter(|r| r.write)
            .map(|r| r.path.clone())
            .collect()
    }

    /// The merged view a staged grant's call is decided on; `None` for a direct grant.
    pub(super) fn staged_view(&self, session: &Ident, g: &GrantPolicy) -> Option<Merged> {
        let roots = Broker::staged_roots(g);
        (!roots.is_empty()).then(|| self.stage.view(session, &roots))
    }

    /// Gives a staged grant's plan its session's layers and holds them for the call: a
    /// writable call gets each layer (made on first use), a read-only one the layers that
    /// exist (to see what the session staged). Returns the held layers the call can write to,
    /// whose changes are recorded once it ends; `None` for a direct grant.
    ///
    /// Where the runner cannot mount a layer read-only (Podman), a read-only call that sees
    /// a layer can write to it: it is bounded by `max_staged_bytes` and recorded as a
    /// writing call is (docs/design.md#staged-writes-and-owners).
    pub(super) fn stage_plan(
        &self,
        session: &Ident,
        g: &GrantPolicy,
        plan: &mut Plan,
        deadline: Instant,
    ) -> Result<Option<(Holding, Vec<Layer>)>, NotStaged> {
        let roots = Broker::staged_roots(g);
        if roots.is_empty() {
            return Ok(None);
        }
        let mut layers = Vec::new();
        for m in plan.mounts.iter_mut().filter(|m| roots.contains(&m.path)) {
            let layer = if m.write {
                self.stage
                    .prepare(session, &g.name, &m.path)
                    .map_err(|e| NotStaged::Unavailable(e.to_string()))?
            } else {
                let layer = self.stage.layer(session, &m.path);
                if !layer.upper.is_dir() {
                    continue;
                }
                if self.runner.read_only_layers_write() {
                    self.stage
                        .work_for_reading(&layer)
                        .map_err(|e| NotStaged::Unavailable(e.to_string()))?;
                }
                layer
            };
            m.stage = Some(StageMount {
                upper: layer.upper.clone(),
                work: layer.work.clone(),
                merged: layer.merged.clone(),
            });
            layers.push(layer);
        }
        if layers.is_empty() {
            return Ok(None);
        }
        let reads_write = self.runner.read_only_layers_write();
        let holding = self
            .stage
            .hold(session, &layers, plan.writes || reads_write, deadline)
            .map_err(|e| match e {
                StageError::Layer { .. } => NotStaged::Unavailable(e.to_string()),
                StageError::Full { bytes, max } if !plan.writes => {
                    NotStaged::Refused(StageError::FullReading { bytes, max }.to_string())
                }
                StageError::Full { .. }
                | StageError::FullReading { .. }
                | StageError::Unmeasured { .. }
                | StageError::Busy(_) => NotStaged::Refused(e.to_string()),
            })?;
        let written = layers
            .into_iter()
            .zip(plan.mounts.iter().filter(|m| m.stage.is_some()))
            .filter(|(_, m)| m.write || reads_write)
            .map(|(l, _)| l)
            .collect();
        Ok(Some((holding, written)))
    }

    /// Logs a layer that could not be made or mounted, with its runbook pointer.
    pub(super) fn log_unstaged(session: &Ident, call: &Ident, why: &str) {
        tracing::error!(
            session = session.as_str(),
            call = call.as_str(),
            status = audit::Ended::Unavailable.as_str(),
            "{why}; see {}",
            runbook::STAGED_LAYER
        );
    }

    /// `changes`: a session's staged changes (clients and owners), or, without a session,
    /// the sessions that have some; as many as fit in a line, with how many more there are.
    pub(super) async fn changes(
        &self,
        session: Option<String>,
        grant: Option<String>,
        diff: bool,
    ) -> Body {
        let stage = self.stage.clone();
        let max_bytes = stage.max_bytes;
        let Some(session) = session else {
            let listed =
                tokio::task::spawn_blocking(move || sessions(&stage, grant.as_deref())).await;
            return match listed {
                Ok((sessions, left_out)) => Body::Changes {
                    session: None,
                    changes: Vec::new(),
                    bytes: sessions.iter().map(|s| s.bytes).sum(),
                    max_bytes,
                    sessions,
                    left_out,
                },
                Err(e) => internal(&e.to_string()),
            };
        };
        let Ok(session) = Ident::parse(session) else {
            return error(ProtocolError::BadIdent("session"));
        };
        let bounds = self.config.protect_bounds();
        let read = tokio::task::spawn_blocking(move || {
            let listed = list(&stage, &session, grant.as_deref(), diff, bounds);
            (listed, stage.bytes(&session), session)
        })
        .await;
        match read {
            Ok((Ok((changes, left_out)), bytes, session)) => Body::Changes {
                session: Some(session.to_string()),
                changes,
                bytes,
                max_bytes,
                sessions: Vec::new(),
                left_out,
            },
            Ok((Err(e), _, _)) => internal(&e.to_string()),
            Err(e) => internal(&e.to_string()),
        }
    }

    /// `commit` (owners only): lands the selected changes, audited with what landed.
    pub(super) async fn commit(
        &self,
        peer: Peer,
        session: String,
        grant: Option<String>,
        paths: Vec<String>,
        all_or_nothing: bool,
    ) -> Body {
        let session = match owner_session(peer, session) {
            Ok(session) => session,
            Err(e) => return error(e),
        };
        let stage = self.stage.clone();
        let s = session.clone();
        let bounds = self.config.protect_bounds();
        let done = tokio::task::spawn_blocking(move || {
            commit_session(&stage, &s, grant.as_deref(), &paths, all_or_nothing, bounds)
        })
        .await;
        let outcome = match done {
            Ok(Ok(o)) => o,
            Ok(Err(e)) => return owner_refused(&e),
            Err(e) => return internal(&e.to_string()),
        };
        let mut rec = owner_record(&session, Decided::Committed, &outcome.landed, &outcome.not);
        if !outcome.unfinished.is_empty() {
            tracing::warn!(
                session = session.as_str(),
                "a commit landed paths it could not take out of the layer: {}; see {}",
                outcome.unfinished.join("; "),
                runbook::STAGED_CHANGES
            );
            rec.reason = Some(outcome.unfinished.join("; "));
        }
        tracing::info!(
            session = session.as_str(),
            decision = "committed",
            paths = outcome.landed.len(),
            conflicts = outcome.conflicts.len(),
            skipped = outcome.skipped.len(),
            "staged changes committed"
        );
        if let Err(e) = self.record(rec).await {
            return self.audit_failed(&e);
        }
        Body::Committed {
            committed: outcome.landed.iter().map(|p| p.path.clone()).collect(),
            conflicts: outcome.conflicts,
            skipped: outcome.skipped,
        }
    }

    /// `discard` (owners only): throws the selected changes away, audited.
    pub(super) async fn discard(
        &self,
        peer: Peer,
        session: String,
        grant: Option<String>,
        paths: Vec<String>,
    ) -> Body {
        let session = match owner_session(peer, session) {
            Ok(session) => session,
            Err(e) => return error(e),
        };
        let stage = self.stage.clone();
        let s = session.clone();
        let done = tokio::task::spawn_blocking(move || {
            discard_session(&stage, &s, grant.as_deref(), &paths)
        })
        .await;
        let gone = match done {
            Ok(Ok(g)) => g,
            Ok(Err(e)) => return owner_refused(&e),
            Err(e) => return internal(&e.to_string()),
        };
        let rec = owner_record(&session, Decided::Discarded, &gone, &[]);
        tracing::info!(
            session = session.as_str(),
            decision = "discarded",
            paths = gone.len(),
            "staged changes discarded"
        );
        if let Err(e) = self.record(rec).await {
            return self.audit_failed(&e);
        }
        Body::Discarded {
            discarded: gone.into_iter().map(|p| p.path).collect(),
        }
    }

    /// `approve` (owners only): an owner approves an ask of a grant with `approvals = "owner"`.
    pub(super) async fn approve(&self, peer: Peer, ticket: &str) -> Body {
        if !peer.owner {
            return error(ProtocolError::NotOwner);
        }
        let Some(b) = self.state().tickets.approve(ticket, Instant::now()) else {
            return error(ProtocolError::UnknownTicket);
        };
        tracing::info!(
            session = b.session.as_str(),
            call = b.call.as_str(),
            grant = b.grant.as_str(),
            tool = b.tool.as_str(),
            decision = "owner_approved",
            "an owner approved a call"
        );
        let rec = Record {
            kind: RecordKind::Call,
            session: Some(b.session),
            call: Some(b.call),
            grant: Some(b.grant),
            tool: Some(audit::summary(&b.tool)),
            decision: Some(Decided::OwnerApproved),
            ..Record::default()
        };
        match self.record(rec).await {
            Ok(_) => Body::Approved {},
            Err(e) => self.audit_failed(&e),
        }
    }

    /// Tidies after the commits a stop of brokerd killed midway: no temporary name of theirs
    /// stays in an owner's directory (docs/design.md#staged-writes-and-owners).
    pub async fn finish_interrupted_commits(&self) {
        let stage = self.stage.clone();
        let Ok(failed) = tokio::task::spawn_blocking(move || stage.finish_interrupted()).await
        else {
            return;
        };
        for (real, e) in failed {
            tracing::warn!(
                real = %real.display(),
                "an interrupted commit could not be tidied after (tried again before its next commit or discard): {e}"
            );
        }
    }

    /// Discards the layers past `staged_ttl_s` (the owner's choice), each audited.
    pub async fn expire_staged(&self) {
        let stage = self.stage.clone();
        let Ok(expired) = tokio::task::spawn_blocking(move || {
            let mut gone = Vec::new();
            for (session, layer) in stage.expired() {
                let Ok(_hold) = stage.exclusive(&layer, Instant::now()) else {
                    continue;
                };
                let found = changes::changes(&layer.upper, &layer.real)
                    .unwrap_or_default()
                    .found;
                if stage.remove_layer(&session, &layer).is_ok() {
                    gone.push((session, shown_paths(&layer, &found)));
                }
            }
            gone
        })
        .await
        else {
            return;
        };
        for (session, paths) in expired {
            tracing::info!(
                session = session.as_str(),
                decision = "expired",
                paths = paths.len(),
                "staged changes past staged_ttl_s discarded"
            );
            let mut rec = owner_record(&session, Decided::Discarded, &paths, &[]);
            rec.reason = Some("past [broker] staged_ttl_s".into());
            if let Err(e) = self.record(rec).await {
                tracing::error!(
                    session = session.as_str(),
                    "the discard of expired staged changes could not be audited: {e}; see {}",
                    runbook::AUDIT_UNWRITABLE
                );
            }
        }
    }
}

/// The audit record of an owner's commit or discard: what landed or went, with hashes.
fn owner_record(
    session: &Ident,
    decision: Decided,
    paths: &[StagedPath],
    not: &[StagedPath],
) -> Record {
    Record {
        kind: RecordKind::Staged,
        session: Some(session.to_string()),
        decision: Some(decision),
        paths: paths.to_vec(),
        not_landed: not.to_vec(),
        ..Record::default()
    }
}

fn owner_refused(why: &owner::OwnerRefused) -> Body {
    Body::Error {
        message: format!("the staged changes could not be taken: {why}"),
    }
}

fn internal(why: &str) -> Body {
    tracing::error!(
        "reading staged changes failed: {why}; see {}",
        runbook::STAGED_CHANGES
    );
    Body::Error {
        message: "the staged changes could not be read".into(),
    }
}

/// The session an owner op names, once its peer is an owner: a peer that is not one is
/// answered that first, whatever it named.
fn owner_session(peer: Peer, session: String) -> Result<Ident, ProtocolError> {
    if !peer.owner {
        return Err(ProtocolError::NotOwner);
    }
    Ident::parse(session).map_err(|_| ProtocolError::BadIdent("session"))
}
