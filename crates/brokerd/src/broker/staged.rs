//! The broker's side of staged writes (docs/design.md#staged-writes-and-owners): a staged
//! grant's calls decided on the session's merged view and run over its layers, and the
//! `changes`, `commit`, `discard` and `approve` ops. Owners only commit, discard and approve.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use proto::broker::{Body, Change, ChangeKind, PathReason, SessionChanges};
use proto::ident::Ident;
use proto::visible::visible;

use super::{error, Broker, Peer, ProtocolError};
use crate::audit::{self, Decided, Record, RecordKind, StagedPath};
use crate::config::Writes;
use crate::policy::{GrantPolicy, Plan};
use crate::protect;
use crate::runbook;
use crate::runner::StageMount;
use crate::stage::{changes, commit, Holding, Layer, Merged, Meta, Stage, StageError};

/// How long an owner's commit or discard waits for a call of the session to finish.
const OWNER_WAIT: Duration = Duration::from_secs(30);

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
    /// exist (to see what the session staged). `None` for a direct grant.
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
        let holding = self
            .stage
            .hold(session, &layers, plan.writes, deadline)
            .map_err(|e| match e {
                StageError::Layer { .. } => NotStaged::Unavailable(e.to_string()),
                StageError::Full { .. } | StageError::Busy(_) => NotStaged::Refused(e.to_string()),
            })?;
        let writable = layers
            .into_iter()
            .zip(plan.mounts.iter().filter(|m| m.stage.is_some()))
            .filter(|(_, m)| m.write)
            .map(|(l, _)| l)
            .collect();
        Ok(Some((holding, writable)))
    }

    /// Logs a layer that could not be made or mounted, with its runbook pointer.
    pub(super) fn log_unstaged(session: &Ident, call: &Ident, why: &str) {
        tracing::error!(
            session = session.as_str(),
            call = call.as_str(),
            status = "unavailable",
            "{why}; see {}",
            runbook::STAGED_LAYER
        );
    }

    /// `changes`: a session's staged changes (clients and owners), or, without a session,
    /// the sessions that have some.
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
                Ok(sessions) => Body::Changes {
                    session: None,
                    changes: Vec::new(),
                    bytes: sessions.iter().map(|s| s.bytes).sum(),
                    max_bytes,
                    sessions,
                },
                Err(e) => internal(&e.to_string()),
            };
        };
        let Ok(session) = Ident::parse(session) else {
            return error(ProtocolError::BadIdent("session"));
        };
        let read = tokio::task::spawn_blocking(move || {
            let listed = list(&stage, &session, grant.as_deref(), diff);
            (listed, stage.bytes(&session), session)
        })
        .await;
        match read {
            Ok((Ok(changes), bytes, session)) => Body::Changes {
                session: Some(session.to_string()),
                changes,
                bytes,
                max_bytes,
                sessions: Vec::new(),
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
        if !peer.owner {
            return error(ProtocolError::NotOwner);
        }
        let Ok(session) = Ident::parse(session) else {
            return error(ProtocolError::BadIdent("session"));
        };
        let stage = self.stage.clone();
        let s = session.clone();
        let done = tokio::task::spawn_blocking(move || {
            commit_session(&stage, &s, grant.as_deref(), &paths, all_or_nothing)
        })
        .await;
        let outcome = match done {
            Ok(Ok(o)) => o,
            Ok(Err(e)) => return owner_refused(&e),
            Err(e) => return internal(&e.to_string()),
        };
        let rec = owner_record(&session, Decided::Committed, &outcome.landed, &outcome.not);
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
        if !peer.owner {
            return error(ProtocolError::NotOwner);
        }
        let Ok(session) = Ident::parse(session) else {
            return error(ProtocolError::BadIdent("session"));
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

    /// Discards the layers past `staged_ttl_s` (the owner's choice), each audited.
    pub async fn expire_staged(&self) {
        let stage = self.stage.clone();
        let Ok(expired) = tokio::task::spawn_blocking(move || {
            let mut gone = Vec::new();
            for (session, layer) in stage.expired() {
                let Ok(_hold) = stage.exclusive(&layer, Instant::now()) else {
                    continue;
                };
                let found = changes::changes(&layer.upper, &layer.real).unwrap_or_default();
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
            let _ = self.record(rec).await;
        }
    }
}

/// A layer's real path of `rel`, as the owner reads it (control characters escaped).
fn shown(layer: &Layer, rel: &Path) -> String {
    visible(&layer.real.join(rel).display().to_string()).to_string()
}

fn shown_paths(layer: &Layer, found: &[changes::Found]) -> Vec<StagedPath> {
    found
        .iter()
        .map(|f| StagedPath {
            path: shown(layer, &f.rel),
            change: f.kind,
            sha256: f.sha256.clone(),
        })
        .collect()
}

/// The sessions with changes pending (a grant's, with `grant`).
fn sessions(stage: &Arc<Stage>, grant: Option<&str>) -> Vec<SessionChanges> {
    let mut out = Vec::new();
    for s in stage.sessions() {
        let mut grants = Vec::new();
        let mut paths = 0;
        for l in stage.layers_of(&s) {
            let Ok(meta) = Meta::read(&l) else { continue };
            if grant.is_some_and(|g| !meta.grants.iter().any(|x| x == g)) {
                continue;
            }
            let n = changes::changes(&l.upper, &l.real)
                .map(|c| c.len())
                .unwrap_or(0);
            if n > 0 {
                paths += n;
                for g in meta.grants {
                    if !grants.contains(&g) {
                        grants.push(g);
                    }
                }
            }
        }
        if paths > 0 {
            out.push(SessionChanges {
                session: s.to_string(),
                grants,
                paths,
                bytes: stage.bytes(&s),
            });
        }
    }
    out
}

/// The layers of `session` (a grant's, with `grant`), each with its metadata.
fn layers(stage: &Stage, session: &Ident, grant: Option<&str>) -> Vec<(Layer, Meta)> {
    stage
        .layers_of(session)
        .into_iter()
        .filter_map(|l| Meta::read(&l).ok().map(|m| (l, m)))
        .filter(|(_, m)| grant.is_none_or(|g| m.grants.iter().any(|x| x == g)))
        .collect()
}

/// Whether a change is a protected target: the directory it lies in, by which naming commits it.
fn protection(layer: &Layer, f: &changes::Found) -> Option<PathBuf> {
    let real = layer.real.join(&f.rel);
    let staged = layer.upper.join(&f.rel);
    let shown = real.display().to_string();
    let hit = protect::protected(&shown, &real).or_else(|| protect::protected(&shown, &staged));
    hit.map(|_| {
        // The outermost protected directory on the way, if the protection is by directory.
        let mut guard = PathBuf::new();
        for c in f.rel.components() {
            guard.push(c);
            if protect::has_protected_component(&guard).is_some() {
                return guard;
            }
        }
        f.rel.clone()
    })
}

fn list(
    stage: &Stage,
    session: &Ident,
    grant: Option<&str>,
    diff: bool,
) -> std::io::Result<Vec<Change>> {
    let mut out = Vec::new();
    for (layer, meta) in layers(stage, session, grant) {
        stage.record_first(&layer)?;
        let meta = Meta::read(&layer).unwrap_or(meta);
        let grant_name = meta.grants.first().cloned().unwrap_or_default();
        for f in changes::changes(&layer.upper, &layer.real)? {
            let path = shown(&layer, &f.rel);
            out.push(Change {
                grant: grant_name.clone(),
                diff: diff
                    .then(|| changes::diff(&f, &layer.upper, &layer.real, &path))
                    .flatten(),
                protected: protection(&layer, &f).is_some(),
                conflict: commit::conflict(&meta, &layer.real, &f),
                path,
                change: f.kind,
                what: f.what.to_string(),
                size: f.size,
                sha256: f.sha256.clone(),
                target: f
                    .target
                    .as_ref()
                    .map(|t| visible(&t.display().to_string()).to_string()),
                mode: f.mode.map(|m| format!("{m:o}")),
            });
        }
    }
    Ok(out)
}

/// What a commit did, across the session's layers.
struct Committed {
    landed: Vec<StagedPath>,
    conflicts: Vec<PathReason>,
    skipped: Vec<PathReason>,
    /// Conflicts and skipped, for the audit record.
    not: Vec<StagedPath>,
}

/// The named paths that lie in `layer`, relative to it. A path is named as `changes` shows
/// it or as it is.
fn named_in(layer: &Layer, paths: &[String]) -> Option<Vec<PathBuf>> {
    if paths.is_empty() {
        return None;
    }
    let mut out = Vec::new();
    for p in paths {
        let raw = PathBuf::from(p);
        if let Ok(rel) = raw.strip_prefix(&layer.real) {
            if let Some(rel) = commit::relative(rel) {
                out.push(rel);
            }
            continue;
        }
        // A path as shown, escapes and all: match it against what `changes` shows.
        if let Ok(found) = changes::changes(&layer.upper, &layer.real) {
            for f in found {
                if shown(layer, &f.rel) == *p {
                    out.push(f.rel);
                }
            }
        }
    }
    Some(out)
}

fn commit_session(
    stage: &Arc<Stage>,
    session: &Ident,
    grant: Option<&str>,
    paths: &[String],
    all_or_nothing: bool,
) -> Result<Committed, String> {
    let mut done = Committed {
        landed: Vec::new(),
        conflicts: Vec::new(),
        skipped: Vec::new(),
        not: Vec::new(),
    };
    for (layer, _) in layers(stage, session, grant) {
        let named = named_in(&layer, paths);
        if named.as_ref().is_some_and(Vec::is_empty) {
            continue;
        }
        let _hold = stage
            .exclusive(&layer, Instant::now() + OWNER_WAIT)
            .map_err(|e| e.to_string())?;
        let found = changes::changes(&layer.upper, &layer.real).map_err(|e| e.to_string())?;
        let landed = stage.record_first(&layer).and_then(|()| {
            commit::commit(&layer, &found, named.as_deref(), all_or_nothing, |f| {
                protection(&layer, f)
            })
        });
        // A layer whose real directory cannot be opened (gone, moved, a link now) lands
        // nothing, and is no reason to leave the session's other layers alone.
        let report = match landed {
            Ok(r) => r,
            Err(e) => commit::Report {
                conflicts: commit::select(&found, named.as_deref())
                    .into_iter()
                    .map(|f| {
                        let why = format!("the real directory cannot be written: {e}");
                        (f.rel.clone(), commit::NotLanded::Io(why))
                    })
                    .collect(),
                ..commit::Report::default()
            },
        };
        for l in &report.landed {
            done.landed.push(StagedPath {
                path: shown(&layer, &l.rel),
                change: l.kind,
                sha256: l.sha256.clone(),
            });
        }
        for (list, into) in [
            (&report.conflicts, &mut done.conflicts),
            (&report.skipped, &mut done.skipped),
        ] {
            for (rel, why) in list {
                into.push(PathReason {
                    path: shown(&layer, rel),
                    reason: why.to_string(),
                });
                let change = found
                    .iter()
                    .find(|f| f.rel == *rel)
                    .map_or(ChangeKind::Modified, |f| f.kind);
                done.not.push(StagedPath {
                    path: shown(&layer, rel),
                    change,
                    sha256: None,
                });
            }
        }
        if changes::changes(&layer.upper, &layer.real).is_ok_and(|c| c.is_empty()) {
            let _ = stage.remove_layer(session, &layer);
        }
    }
    Ok(done)
}

fn discard_session(
    stage: &Arc<Stage>,
    session: &Ident,
    grant: Option<&str>,
    paths: &[String],
) -> Result<Vec<StagedPath>, String> {
    let mut gone = Vec::new();
    for (layer, _) in layers(stage, session, grant) {
        let named = named_in(&layer, paths);
        if named.as_ref().is_some_and(Vec::is_empty) {
            continue;
        }
        let _hold = stage
            .exclusive(&layer, Instant::now() + OWNER_WAIT)
            .map_err(|e| e.to_string())?;
        let found = changes::changes(&layer.upper, &layer.real).map_err(|e| e.to_string())?;
        let chosen: Vec<StagedPath> = commit::select(&found, named.as_deref())
            .into_iter()
            .map(|f| StagedPath {
                path: shown(&layer, &f.rel),
                change: f.kind,
                sha256: f.sha256.clone(),
            })
            .collect();
        if named.is_none() {
            stage
                .remove_layer(session, &layer)
                .map_err(|e| e.to_string())?;
        } else {
            commit::discard(&layer, &found, named.as_deref()).map_err(|e| e.to_string())?;
            if changes::changes(&layer.upper, &layer.real).is_ok_and(|c| c.is_empty()) {
                let _ = stage.remove_layer(session, &layer);
            }
        }
        gone.extend(chosen);
    }
    Ok(gone)
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

fn owner_refused(why: &str) -> Body {
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
