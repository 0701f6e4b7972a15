//! What the staged ops do to a session's layers (docs/design.md#staged-writes-and-owners), on
//! a blocking thread: `changes` reads (and writes nothing), `commit` and `discard` take each
//! layer from its calls, match the named paths before anything lands, and land or throw away.

use std::io::Read;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use proto::broker::{Change, ChangeKind, PathReason, SessionChanges, MAX_LINE};
use proto::ident::Ident;
use proto::visible::visible;

use crate::audit::StagedPath;
use crate::config::ProtectBounds;
use crate::protect::{self, scan::Scanner};
use crate::stage::changes::{self, Found};
use crate::stage::conflict::Conflicts;
use crate::stage::tree::Tree;
use crate::stage::{commit, discard, names, Holding, Layer, Meta, Stage, StageError};

/// How long an owner's commit or discard waits for a call of the session to finish.
const OWNER_WAIT: Duration = Duration::from_secs(30);
/// What a `changes` answer leaves of the protocol's line for everything but its list (the
/// id, the session, the counts): the list stops where it would pass the rest.
const ANSWER_RESERVE: usize = 64 * 1024;

/// Why an owner's commit or discard was not done: nothing was committed or discarded.
#[derive(Debug, thiserror::Error)]
pub(super) enum OwnerRefused {
    #[error("no staged change of this session matches {}: nothing was {done}", .paths.join(", "))]
    NoMatch {
        paths: Vec<String>,
        done: &'static str,
    },
    #[error("{path} lies under {root}, a directory this session replaced with a file or link: discard {root} to keep it; nothing was discarded")]
    Replaced { path: String, root: String },
    #[error("{0}")]
    Layer(String),
}

impl From<std::io::Error> for OwnerRefused {
    fn from(e: std::io::Error) -> Self {
        OwnerRefused::Layer(e.to_string())
    }
}

impl From<StageError> for OwnerRefused {
    fn from(e: StageError) -> Self {
        OwnerRefused::Layer(e.to_string())
    }
}

/// A layer's real path of `rel`, as the owner reads and names it (`stage::names`: hidden
/// characters and bytes that are not UTF-8 escaped, one text per path).
pub(super) fn shown(layer: &Layer, rel: &Path) -> String {
    names::shown(&layer.real.join(rel))
}

pub(super) fn shown_paths(layer: &Layer, found: &[Found]) -> Vec<StagedPath> {
    found
        .iter()
        .map(|f| StagedPath {
            path: shown(layer, &f.rel),
            change: f.kind,
            sha256: f.sha256.clone(),
        })
        .collect()
}

/// How much of a line is left: entries are added while they fit.
struct Budget(usize);

impl Budget {
    fn line() -> Budget {
        Budget(MAX_LINE - ANSWER_RESERVE)
    }

    /// Takes `item`'s room (its JSON and a comma) if it fits.
    fn fits(&mut self, item: &impl serde::Serialize) -> bool {
        let len = serde_json::to_vec(item).map_or(usize::MAX, |v| v.len() + 1);
        match self.0.checked_sub(len) {
            Some(left) => {
                self.0 = left;
                true
            }
            None => {
                self.0 = 0;
                false
            }
        }
    }
}

/// The sessions with changes pending (a grant's, with `grant`), as many as fit in a line, and
/// how many more there are.
pub(super) fn sessions(stage: &Arc<Stage>, grant: Option<&str>) -> (Vec<SessionChanges>, usize) {
    let mut out = Vec::new();
    let mut left_out = 0;
    let mut budget = Budget::line();
    for s in stage.sessions() {
        let mut grants = Vec::new();
        let mut paths = 0;
        for (l, meta) in layers(stage, &s, grant) {
            let n = changes::changes(&l.upper, &l.real).map_or(0, |c| c.count());
            if n > 0 {
                paths += n;
                for g in meta.grants {
                    if !grants.contains(&g) {
                        grants.push(g);
                    }
                }
            }
        }
        if paths == 0 {
            continue;
        }
        let pending = SessionChanges {
            session: s.to_string(),
            grants,
            paths,
            bytes: stage.bytes(&s),
        };
        if left_out == 0 && budget.fits(&pending) {
            out.push(pending);
        } else {
            left_out += 1;
        }
    }
    (out, left_out)
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

/// Whether `rel` of `tree` is a regular file whose first lines say it is generated.
fn marked(tree: Option<&Tree>, rel: &Path) -> bool {
    let Some(file) = tree.and_then(|t| t.open_file(rel).ok()) else {
        return false;
    };
    let mut head = Vec::new();
    file.take(protect::HEADER_READ)
        .read_to_end(&mut head)
        .is_ok_and(|_| protect::marker_in(&head).is_some())
}

/// Whether a change is a protected target (docs/design.md#protected-targets): the path by
/// which naming commits it. A change that removes a real directory is one when the directory
/// holds a protected target, by the walk that finds them for the mount table (or is past its
/// bounds); it is committed only when named itself.
fn protection(
    layer: &Layer,
    upper: Option<&Tree>,
    real: Option<&Tree>,
    scanner: &Scanner,
    f: &Found,
) -> Option<PathBuf> {
    let at = layer.real.join(&f.rel);
    if protect::has_protected_component(&at).is_some()
        || marked(real, &f.rel)
        || marked(upper, &f.rel)
    {
        // The outermost protected directory on the way, if the protection is by directory.
        let mut guard = PathBuf::new();
        for c in f.rel.components() {
            guard.push(c);
            if protect::has_protected_component(&guard).is_some() {
                return Some(guard);
            }
        }
        return Some(f.rel.clone());
    }
    if !f.hides {
        return None;
    }
    let holds_targets = match real.map(|r| r.dir(&f.rel)) {
        Some(Ok(dir)) => scanner
            .scan(&at, dir.as_fd())
            .map_or(true, |found| !found.targets.is_empty()),
        // Gone since it was listed: nothing of it is removed.
        _ => false,
    };
    holds_targets.then(|| f.rel.clone())
}

/// A session's changes (a grant's, with `grant`), as many as fit in a line, and how many more
/// there are. Nothing is written: the layers are read by descriptor while calls may run.
pub(super) fn list(
    stage: &Stage,
    session: &Ident,
    grant: Option<&str>,
    diff: bool,
    bounds: ProtectBounds,
) -> std::io::Result<(Vec<Change>, usize)> {
    let scanner = Scanner::new(bounds);
    let mut out = Vec::new();
    let mut left_out = 0;
    let mut budget = Budget::line();
    for (layer, meta) in layers(stage, session, grant) {
        let (Some(upper), real) = changes::trees(&layer.upper, &layer.real)? else {
            continue;
        };
        let real = real.as_ref();
        let listing = changes::changes_in(&upper, real)?;
        left_out += listing.left_out;
        let conflicts = Conflicts::of(&meta, real, &listing.found);
        let grant_name = meta.grants.first().cloned().unwrap_or_default();
        for f in &listing.found {
            // Once one does not fit, the rest are counted: the list stays in path order.
            if budget.0 == 0 {
                left_out += 1;
                continue;
            }
            let path = shown(&layer, &f.rel);
            let change = Change {
                grant: grant_name.clone(),
                diff: diff
                    .then(|| changes::diff(f, &upper, real, &path))
                    .flatten(),
                protected: protection(&layer, Some(&upper), real, &scanner, f).is_some(),
                conflict: conflicts.has(f),
                path,
                change: f.kind,
                what: f.what,
                size: f.size,
                sha256: f.sha256.clone(),
                target: f.target.as_deref().map(names::shown),
                mode: f.mode.map(|m| format!("{m:o}")),
                dropped_bits: changes::dropped_bits(f).map(|m| format!("{m:o}")),
            };
            if budget.fits(&change) {
                out.push(change);
            } else {
                left_out += 1;
            }
        }
    }
    Ok((out, left_out))
}

/// One layer an owner's commit or discard took from its calls: readied and listed.
struct Taken {
    layer: Layer,
    found: Vec<Found>,
    _hold: Holding,
}

/// Takes every layer of `session` (a grant's, with `grant`) that `paths` may name (all when
/// none is named) from its calls, readies it (`commit::prepare_layer`) and lists it.
fn take(
    stage: &Arc<Stage>,
    session: &Ident,
    grant: Option<&str>,
    paths: &[String],
) -> Result<Vec<Taken>, OwnerRefused> {
    let mut out = Vec::new();
    for (layer, _) in layers(stage, session, grant) {
        let may_name = |p: &String| names::parse(p).is_some_and(|p| p.starts_with(&layer.real));
        if !paths.is_empty() && !paths.iter().any(may_name) {
            continue;
        }
        let hold = stage.exclusive(&layer, Instant::now() + OWNER_WAIT)?;
        commit::prepare_layer(stage, &layer)?;
        let found = changes::changes(&layer.upper, &layer.real)?.found;
        out.push(Taken {
            layer,
            found,
            _hold: hold,
        });
    }
    Ok(out)
}

/// The named paths of each layer, relative to it (`None` for each when none was named). A path
/// is named as `changes` shows it, and only so (`stage::names::parse`: the text reads back to
/// one path), and selects the changes at or below it; one that selects nothing in any layer
/// refuses the whole operation.
fn named(
    taken: &[Taken],
    paths: &[String],
    done: &'static str,
) -> Result<Vec<Option<Vec<PathBuf>>>, OwnerRefused> {
    if paths.is_empty() {
        return Ok(taken.iter().map(|_| None).collect());
    }
    let mut matched = vec![false; paths.len()];
    let mut out = Vec::new();
    for t in taken {
        let mut rels = Vec::new();
        for (i, p) in paths.iter().enumerate() {
            let rel = names::parse(p)
                .and_then(|p| {
                    p.strip_prefix(&t.layer.real)
                        .ok()
                        .and_then(commit::relative)
                })
                .filter(|rel| t.found.iter().any(|f| f.rel.starts_with(rel)));
            if let Some(rel) = rel {
                rels.push(rel);
                matched[i] = true;
            }
        }
        out.push(Some(rels));
    }
    let unmatched: Vec<String> = paths
        .iter()
        .zip(&matched)
        .filter(|(_, m)| !**m)
        .map(|(p, _)| visible(p).to_string())
        .collect();
    if unmatched.is_empty() {
        Ok(out)
    } else {
        Err(OwnerRefused::NoMatch {
            paths: unmatched,
            done,
        })
    }
}

/// What a commit did, across the session's layers.
pub(super) struct Committed {
    pub landed: Vec<StagedPath>,
    pub conflicts: Vec<PathReason>,
    pub skipped: Vec<PathReason>,
    /// Conflicts and skipped, for the audit record.
    pub not: Vec<StagedPath>,
    /// What landed but could not be finished (left in the layer).
    pub unfinished: Vec<String>,
}

pub(super) fn commit_session(
    stage: &Arc<Stage>,
    session: &Ident,
    grant: Option<&str>,
    paths: &[String],
    all_or_nothing: bool,
    bounds: ProtectBounds,
) -> Result<Committed, OwnerRefused> {
    let taken = take(stage, session, grant, paths)?;
    let named = named(&taken, paths, "committed")?;
    let scanner = Scanner::new(bounds);
    let mut plans = Vec::new();
    for (t, named) in taken.iter().zip(&named) {
        if named.as_ref().is_some_and(Vec::is_empty) {
            continue;
        }
        let (upper, real) = changes::trees(&t.layer.upper, &t.layer.real)?;
        let protected =
            |f: &Found| protection(&t.layer, upper.as_ref(), real.as_ref(), &scanner, f);
        // A layer whose real directory cannot be opened (gone, moved, a link now) lands
        // nothing, and is no reason to leave the session's other layers alone.
        let plan = commit::plan(&t.layer, &t.found, named.as_deref(), protected).map_err(|e| {
            commit::select(&t.found, named.as_deref())
                .into_iter()
                .map(|f| {
                    let why = format!("the real directory cannot be written: {e}");
                    (f.rel.clone(), commit::NotLanded::Io(why))
                })
                .collect::<Vec<_>>()
        });
        plans.push((t, plan));
    }
    // All or nothing is across the session's layers: one conflict anywhere lands nothing.
    let blocked = plans.iter().any(|(_, p)| match p {
        Ok(p) => p.blocked(),
        Err(not) => !not.is_empty(),
    });
    let mut done = Committed {
        landed: Vec::new(),
        conflicts: Vec::new(),
        skipped: Vec::new(),
        not: Vec::new(),
        unfinished: Vec::new(),
    };
    for (t, plan) in plans {
        let report = match plan {
            Ok(mut p) if all_or_nothing && blocked => {
                p.hold_back();
                p.report
            }
            Ok(p) => commit::apply(&t.layer, &t.found, p),
            Err(conflicts) => commit::Report {
                conflicts,
                ..commit::Report::default()
            },
        };
        add_report(&mut done, &t.layer, &t.found, report);
        if changes::changes(&t.layer.upper, &t.layer.real).is_ok_and(|c| c.is_empty()) {
            let _ = stage.remove_layer(session, &t.layer);
        }
    }
    Ok(done)
}

fn add_report(done: &mut Committed, layer: &Layer, found: &[Found], report: commit::Report) {
    for l in &report.landed {
        done.landed.push(StagedPath {
            path: shown(layer, &l.rel),
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
                path: shown(layer, rel),
                reason: why.to_string(),
            });
            let change = found
                .iter()
                .find(|f| f.rel == *rel)
                .map_or(ChangeKind::Modified, |f| f.kind);
            done.not.push(StagedPath {
                path: shown(layer, rel),
                change,
                sha256: None,
            });
        }
    }
    done.unfinished.extend(
        report
            .unfinished
            .into_iter()
            .map(|u| visible(&format!("{}: {u}", layer.real.display())).to_string()),
    );
}

pub(super) fn discard_session(
    stage: &Arc<Stage>,
    session: &Ident,
    grant: Option<&str>,
    paths: &[String],
) -> Result<Vec<StagedPath>, OwnerRefused> {
    let taken = take(stage, session, grant, paths)?;
    let named = named(&taken, paths, "discarded")?;
    // A real entry below a directory replaced by a file or link cannot be kept alone: refused
    // before anything of any layer is thrown away.
    for (t, named) in taken.iter().zip(&named) {
        let chosen = commit::select(&t.found, named.as_deref());
        for f in &chosen {
            let Some(root) = &f.under else { continue };
            let replaced = t
                .found
                .iter()
                .any(|g| g.rel == *root && g.kind == ChangeKind::TypeChanged);
            if replaced && !chosen.iter().any(|c| c.rel == *root) {
                return Err(OwnerRefused::Replaced {
                    path: shown(&t.layer, &f.rel),
                    root: shown(&t.layer, root),
                });
            }
        }
    }
    let mut gone = Vec::new();
    for (t, named) in taken.iter().zip(&named) {
        if named.as_ref().is_some_and(Vec::is_empty) {
            continue;
        }
        if named.is_none() {
            stage.remove_layer(session, &t.layer)?;
            gone.extend(shown_paths(&t.layer, &t.found));
            continue;
        }
        let thrown = discard::discard(&t.layer, named.as_deref()).map_err(|e| match e {
            discard::DiscardError::Replaced { rel, root } => OwnerRefused::Replaced {
                path: shown(&t.layer, &rel),
                root: shown(&t.layer, &root),
            },
            discard::DiscardError::Io(e) => OwnerRefused::from(e),
        })?;
        gone.extend(shown_paths(&t.layer, &thrown));
        if changes::changes(&t.layer.upper, &t.layer.real).is_ok_and(|c| c.is_empty()) {
            let _ = stage.remove_layer(session, &t.layer);
        }
    }
    Ok(gone)
}

#[cfg(test)]
#[path = "owner_tests.rs"]
mod tests;
