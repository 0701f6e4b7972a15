//! Which of a layer's changes a commit refuses as conflicts
//! (docs/design.md#staged-writes-and-owners): a real path that is no longer what the session
//! saw when it first staged a change there, and, below a change that hides a real directory,
//! a real entry with no record (it appeared after the session last saw the directory). A
//! change that removes a real directory conflicts when anything below it does: committing it
//! would delete the host's newer files with it. A real entry that is no longer the one the
//! commit's listing saw (`changes::Seen`) conflicts too: the commit decides on one view.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::changes::{real_below, Found, Seen};
use super::meta::{key, Identity, Meta, RealKind};
use super::tree::Tree;

/// The most real entries below one change looked at; past it the change is a conflict (it
/// cannot be told safe).
const WALK_LIMIT: usize = 1_000_000;

/// The real paths that conflict.
#[derive(Debug, Default, Clone)]
pub struct Conflicts(BTreeSet<PathBuf>);

impl Conflicts {
    /// The conflicts of `found` against the real tree as it is now.
    pub fn of(meta: &Meta, real: Option<&Tree>, found: &[Found]) -> Conflicts {
        let mut set = BTreeSet::new();
        let mut walked: Vec<&Path> = Vec::new();
        for f in found {
            if at(meta, real, &f.rel) || !still(real, f) {
                set.insert(f.rel.clone());
            }
            // What the change removes with it, looked at once per tree (the listing may not
            // hold all of it).
            if f.hides && !walked.iter().any(|w| f.rel.starts_with(w)) {
                walked.push(&f.rel);
                let Some(real) = real else { continue };
                let (below, all) = real_below(real, &f.rel, WALK_LIMIT);
                if !all {
                    set.insert(f.rel.clone());
                }
                for b in below {
                    if at(meta, Some(real), &b) {
                        set.insert(b);
                    }
                }
            }
        }
        Conflicts(set)
    }

    /// Whether `f` is refused: its own path conflicts, or, when it removes a real directory,
    /// a path below it does.
    pub fn has(&self, f: &Found) -> bool {
        if self.0.contains(&f.rel) {
            return true;
        }
        f.hides
            && self
                .0
                .range(f.rel.clone()..)
                .take_while(|p| p.starts_with(&f.rel))
                .any(|p| p != &f.rel)
    }
}

/// Whether the real entry at `f`'s path is still the one its listing saw.
fn still(real: Option<&Tree>, f: &Found) -> bool {
    Seen::still(f.seen.as_ref(), real, &f.rel)
}

/// Whether the real path `rel` conflicts on its own.
fn at(meta: &Meta, real: Option<&Tree>, rel: &Path) -> bool {
    match meta.first.get(&key(rel)) {
        Some(first) => !first.unchanged(&Identity::at(real, rel, first.sha256.is_some())),
        // Unrecorded: below a hidden directory, it appeared since (if it is there at all);
        // past the metadata's bound, what the session saw is not known; elsewhere a crash
        // left it unrecorded, and the commit records it as it is.
        None => {
            meta.full
                || (meta.covered(rel) && Identity::at(real, rel, false).kind != RealKind::Absent)
        }
    }
}
