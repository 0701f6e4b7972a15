//! Landing a layer's changes in the real directory (docs/design.md#staged-writes-and-owners):
//! which of the selected changes may land (`plan`), landing them (`apply`), and the layer and
//! its metadata tidied after.
//!
//! A path whose real file changed since the session first staged it is a conflict
//! (`conflict`), and is left in the layer; so is one whose way in the real tree is now a link.
//! How one change lands, by descriptor and on the listing's view, is `landing`; the note that
//! lets a commit killed midway be tidied after is `journal`; throwing changes away is
//! `discard`.
//!
//! A commit writes nothing through a symbolic link of the real tree: every directory on the
//! way is opened below the real directory with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`,
//! and the last component is handled by name in its parent (`*at` calls, no follow). The layer
//! is read the same way. Files land whole: written beside under a temporary name, synced, then
//! renamed over the old one. Links are written as links. A directory gets its mode once what
//! lands inside it has landed. Setuid and setgid bits stay in the layer.
//!
//! A commit decides and lands on one view: the listing taken once the layer is held
//! (`changes::Found::seen`). Each real entry is removed, replaced or given a mode only while it
//! is still the entry that listing saw, checked by descriptor as it lands; a new entry goes
//! where the listing saw nothing only if nothing is there. A host that swaps, edits or adds
//! meanwhile makes a conflict (`NotLanded::Changed`), never a removal.
//!
//! Where the listing saw nothing, the new entry goes in with `RENAME_NOREPLACE`; what it replaces
//! is exchanged with it in one step (`RENAME_EXCHANGE`), checked, and exchanged back if it is
//! not the entry seen. Without those flags (some network and FUSE file systems) the entry is
//! checked, removed as a deletion is, and the new one renamed in. Temporary names carry an id
//! noted in `commit.pending` (synced) before any is made, so a commit killed midway can be
//! tidied: its temporary entry removed, or an exchanged real entry put back. A discard of one
//! real entry that a deleted directory held turns the whiteout into the directory with a
//! whiteout for each other entry, built beside and exchanged in.

use std::io;
use std::path::{Component, Path, PathBuf};

use proto::broker::{ChangeKind, EntryKind};

use super::changes::{self, Found};
use super::conflict::Conflicts;
use super::journal::{finish_interrupted, Journal, PENDING};
use super::landing::{chmod_at, land, SeenMap};
use super::tree::{kind_of_stat, Tree};
use super::{Layer, Meta};

/// Why one path was not committed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotLanded {
    #[error("the real file changed since this session first staged it (a conflict): look at both and commit again, or discard it")]
    Conflict,
    #[error("the real entry is no longer the one this commit listed: it changed while the commit ran (a conflict); nothing of it was removed or written: look at both and commit again, or discard it")]
    Changed,
    #[error("the way to it in the real tree goes through a symbolic link now; nothing was written there")]
    Symlink,
    #[error("protected (vendored, generated or third-party): name it to commit it")]
    Protected,
    #[error("not committed: another path of an all-or-nothing commit could not be")]
    AllOrNothing,
    #[error("{0}")]
    Io(String),
}

/// What landed: the change and, for a file, the hash of what was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Landed {
    pub rel: PathBuf,
    pub kind: ChangeKind,
    pub sha256: Option<String>,
}

pub(super) fn io_err(e: impl std::fmt::Display) -> NotLanded {
    NotLanded::Io(e.to_string())
}

pub(super) fn not_landed(rel: &Path, e: &io::Error) -> NotLanded {
    match e.raw_os_error() {
        Some(libc::ELOOP | libc::EXDEV) => NotLanded::Symlink,
        _ => NotLanded::Io(format!("{}: {e}", rel.display())),
    }
}

/// What a commit did: each selected change landed, was a conflict, or was skipped; and what
/// landed but could not be finished (taken out of the layer, its metadata written).
#[derive(Debug, Default)]
pub struct Report {
    pub landed: Vec<Landed>,
    pub conflicts: Vec<(PathBuf, NotLanded)>,
    pub skipped: Vec<(PathBuf, NotLanded)>,
    pub unfinished: Vec<String>,
}

/// The changes of `found` that `named` selects (relative paths; `None`: all): a change at or
/// below a named path.
pub fn select<'a>(found: &'a [Found], named: Option<&[PathBuf]>) -> Vec<&'a Found> {
    found
        .iter()
        .filter(|f| named.is_none_or(|n| n.iter().any(|p| f.rel.starts_with(p))))
        .collect()
}

/// Whether the owner named `f`'s protection away: `f` itself, the protected directory it lies
/// in (`guard`), or a deletion above it that the owner named as such.
fn named_explicitly(f: &Found, guard: &Path, named: Option<&[PathBuf]>, found: &[Found]) -> bool {
    let Some(named) = named else { return false };
    named.iter().any(|p| {
        *p == f.rel
            || p == guard
            || (f.rel.starts_with(p) && found.iter().any(|g| g.rel == *p && g.hides))
    })
}

/// The selected changes of a layer that can land, and the report of those that cannot.
#[derive(Debug)]
pub struct Plan<'a> {
    ready: Vec<&'a Found>,
    pub report: Report,
}

impl Plan<'_> {
    /// Whether a selected change is a conflict.
    pub fn blocked(&self) -> bool {
        !self.report.conflicts.is_empty()
    }

    /// Lands nothing: every change that could land is skipped (an all-or-nothing commit
    /// another change of which is blocked).
    pub fn hold_back(&mut self) {
        for f in self.ready.drain(..) {
            self.report
                .skipped
                .push((f.rel.clone(), NotLanded::AllOrNothing));
        }
    }
}

/// Which selected changes of `layer` (listed as `found` after `prepare_layer`) can land. A
/// change `protected` says is a protected target lands only when named explicitly (see
/// `named_explicitly`; naming a parent is not enough); a conflict (`conflict`) does not land.
pub fn plan<'a>(
    layer: &Layer,
    found: &'a [Found],
    named: Option<&[PathBuf]>,
    protected: impl Fn(&Found) -> Option<PathBuf>,
) -> io::Result<Plan<'a>> {
    let root = Tree::open(&layer.real)?;
    let meta = Meta::read(layer)?;
    let conflicts = Conflicts::of(&meta, Some(&root), found);
    let mut report = Report::default();
    let mut ready = Vec::new();
    for f in select(found, named) {
        if let Some(guard) = protected(f) {
            if !named_explicitly(f, &guard, named, found) {
                report.skipped.push((f.rel.clone(), NotLanded::Protected));
                continue;
            }
        }
        if conflicts.has(f) {
            report.conflicts.push((f.rel.clone(), NotLanded::Conflict));
            continue;
        }
        // The way there must be open now; what it will create is checked as it lands.
        if let Err(e) = open_existing_parent(&root, &f.rel) {
            report.conflicts.push((f.rel.clone(), e));
            continue;
        }
        ready.push(f);
    }
    Ok(Plan { ready, report })
}

/// Lands the selected changes of `layer`; with `all_or_nothing`, nothing unless every selected
/// change can. What landed leaves the layer; the rest stays for another try or a discard.
pub fn commit(
    layer: &Layer,
    found: &[Found],
    named: Option<&[PathBuf]>,
    all_or_nothing: bool,
    protected: impl Fn(&Found) -> Option<PathBuf>,
) -> io::Result<Report> {
    let mut p = plan(layer, found, named, protected)?;
    if all_or_nothing && p.blocked() {
        p.hold_back();
        return Ok(p.report);
    }
    Ok(apply(layer, found, p))
}

/// Lands what `plan` found ready. Once anything may have landed, every trouble is in the
/// report, never an error: what landed is what the audit says.
pub fn apply(layer: &Layer, found: &[Found], plan: Plan<'_>) -> Report {
    let Plan { ready, mut report } = plan;
    let (root, upper) = match (Tree::open(&layer.real), Tree::open(&layer.upper)) {
        (Ok(r), Ok(u)) => (r, u),
        (Err(e), _) | (_, Err(e)) => {
            for f in ready {
                report
                    .conflicts
                    .push((f.rel.clone(), not_landed(&f.rel, &e)));
            }
            return report;
        }
    };
    let seen: SeenMap = found
        .iter()
        .filter_map(|f| f.seen.map(|s| (f.rel.clone(), s)))
        .collect();
    let journal = match Journal::begin(layer) {
        Ok(j) => j,
        Err(e) => {
            for f in ready {
                let why = format!("the layer's commit note could not be written: {e}");
                report.conflicts.push((f.rel.clone(), NotLanded::Io(why)));
            }
            return report;
        }
    };
    let mut modes = Vec::new();
    let mut removed: Vec<&Path> = Vec::new();
    for f in ready {
        // Below a real directory this commit removed (a link may be in its place now): gone.
        if f.kind == ChangeKind::Deleted && removed.iter().any(|r| f.rel.starts_with(r)) {
            report.landed.push(Landed {
                rel: f.rel.clone(),
                kind: f.kind,
                sha256: None,
            });
            continue;
        }
        match land(&root, &upper, f, &seen, &journal) {
            Ok((l, mode)) => {
                if let Some(m) = mode {
                    modes.push((report.landed.len(), m));
                }
                if f.hides {
                    removed.push(&f.rel);
                }
                report.landed.push(l);
            }
            Err(e) => report.conflicts.push((f.rel.clone(), e)),
        }
    }
    // Directories' modes, children before their directories: a 0555 directory takes its
    // files first.
    let mut unset = Vec::new();
    for (i, m) in modes.into_iter().rev() {
        let set = root
            .parent_of(&m.rel)
            .map_err(|e| not_landed(&m.rel, &e))
            .and_then(|(parent, name)| chmod_at(&parent, name, m.mode, m.seen.as_ref()));
        if let Err(e) = set {
            unset.push((i, e));
        }
    }
    // Every temporary name of the commit is gone by now.
    if let Err(e) = Journal::end(layer) {
        report
            .unfinished
            .push(format!("{PENDING} could not be removed: {e}"));
    }
    unset.sort_by_key(|(i, _)| std::cmp::Reverse(*i));
    for (i, e) in unset {
        let l = report.landed.remove(i);
        report.conflicts.push((l.rel, e));
    }
    // Out of the layer, children before their directories. What cannot be taken out still
    // landed: the report says so, and the next listing shows it as no change.
    for l in report.landed.iter().rev() {
        if let Some(f) = found.iter().find(|f| f.rel == l.rel) {
            if let Err(e) = drop_from_layer(&upper, f, false) {
                report.unfinished.push(format!(
                    "{} landed but stays in the layer: {e}",
                    l.rel.display()
                ));
            }
        }
    }
    let forgotten = Meta::update(
        layer,
        || None,
        |meta| {
            for l in &report.landed {
                let removes = found.iter().any(|f| f.rel == l.rel && f.hides);
                meta.forget(&l.rel, removes);
            }
            Ok((!report.landed.is_empty(), ()))
        },
    );
    if let Err(e) = forgotten {
        report
            .unfinished
            .push(format!("layer.json could not be updated: {e}"));
    }
    report
}

/// The part of `rel`'s parent that exists in the real tree, opened through no link.
fn open_existing_parent(root: &Tree, rel: &Path) -> Result<(), NotLanded> {
    let mut existing = PathBuf::new();
    for c in rel.parent().unwrap_or(Path::new("")).components() {
        let next = existing.join(c);
        match root.dir(&next) {
            Ok(_) => existing = next,
            Err(e) => match not_landed(&next, &e) {
                // Not there yet: an added directory of the same commit makes it.
                NotLanded::Io(_) => break,
                e => return Err(e),
            },
        }
    }
    Ok(())
}

/// Takes `f` out of the layer once it landed or was discarded: its entry (a whiteout, a file,
/// a link, or a directory with what is left in it when `whole`). A real entry deleted by a
/// change above it has no entry of its own.
pub fn drop_from_layer(upper: &Tree, f: &Found, whole: bool) -> io::Result<()> {
    match upper.stat(&f.rel) {
        Ok(st) if kind_of_stat(&st) == EntryKind::Dir && !whole => upper.remove_if_empty(&f.rel),
        Ok(_) => upper.remove(&f.rel),
        // Nothing there, or no directory of the layer on the way (a whiteout, a file or a
        // link above it): nothing of its own to drop.
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::ENOENT | libc::ENOTDIR | libc::ELOOP)
            ) =>
        {
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Readies a layer for a commit or a discard: a commit of it killed midway tidied after
/// (`finish_interrupted`), every opaque directory made plain
/// (`normalize_opaque`), and what its calls changed recorded (a crash may have left some of it
/// unrecorded).
pub fn prepare_layer(stage: &super::Stage, layer: &Layer) -> io::Result<()> {
    finish_interrupted(layer)?;
    normalize_opaque(layer)?;
    stage.record_first(layer)
}

/// Turns every opaque directory of the layer that lies over a real directory into a plain one,
/// with a whiteout for each real entry it hid, at every depth below it. The merged view is the
/// same; but a part of it can now land (or be thrown away) alone: an opaque directory would
/// hide a file the commit just wrote into the real directory, and its uncommitted siblings
/// would vanish with it. The whiteouts are all made before any directory is made plain, so
/// that a crash in between leaves the view as it was.
pub fn normalize_opaque(layer: &Layer) -> io::Result<()> {
    let (Some(upper), real) = changes::trees(&layer.upper, &layer.real)? else {
        return Ok(());
    };
    let Some(real) = real else { return Ok(()) };
    let mut opaque = Vec::new();
    let mut stack = vec![(PathBuf::new(), false)];
    while let Some((rel, hidden_above)) = stack.pop() {
        let hidden = hidden_above || (!rel.as_os_str().is_empty() && upper.is_opaque(&rel));
        if hidden && !hidden_above {
            opaque.push(rel.clone());
        }
        // One that cannot be opened (past PATH_MAX) is neither listed nor committed.
        let names = match upper.names(&rel) {
            Ok(n) => n,
            Err(e) if rel.as_os_str().is_empty() => return Err(e),
            Err(_) => continue,
        };
        if hidden && real.is_dir(&rel) {
            for n in real.names(&rel)? {
                if !names.contains(&n) {
                    upper.whiteout(&rel.join(&n))?;
                }
            }
        }
        for n in names {
            let here = rel.join(&n);
            if upper.is_dir(&here) {
                stack.push((here, hidden));
            }
        }
    }
    // Below a first opaque directory, others are plain too (their whiteouts were made).
    let mut stack = opaque;
    while let Some(rel) = stack.pop() {
        if upper.is_opaque(&rel) {
            upper.clear_opaque(&rel)?;
        }
        for n in upper.names(&rel).unwrap_or_default() {
            let here = rel.join(&n);
            if upper.is_dir(&here) {
                stack.push(here);
            }
        }
    }
    Ok(())
}

/// `rel` as the parts of a relative path, checked: no `..`, no root.
pub fn relative(p: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            _ => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
#[path = "commit_tests.rs"]
pub(crate) mod tests;
