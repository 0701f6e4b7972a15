//! What a session's layer changed in its real directory (docs/design.md#staged-writes-and-owners):
//! each changed path with its kind, size and hash, and for text a bounded unified diff.
//!
//! Read from the layer's upper directory against the real one, as overlayfs merges them: an
//! entry of the layer over nothing is added; over something else, modified, a type change or a
//! mode change; a whiteout (a character device 0/0) over something, deleted; an opaque
//! directory over a real one hides every real entry it does not have, at every depth below it.
//! A change that hides a real directory (a deletion, a file or link in its place) removes what
//! the directory holds, and each real entry below it is listed as deleted too. An entry copied
//! up unchanged (opened for writing, touched) is no change.
//!
//! Both trees are read by descriptor (`tree::Tree`): a sandbox of the session that swaps a
//! directory of the layer for a link meanwhile leads the reading nowhere else.

use std::collections::BTreeSet;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use nix::sys::stat::FileStat;
use proto::broker::{ChangeKind, EntryKind};

use super::tree::{is_whiteout_stat, kind_of_stat, Tree};

/// The most bytes of a text file diffed; larger ones are shown by size and hash.
const DIFF_INPUT: u64 = 256 * 1024;
/// The most bytes of one file's diff shown.
const DIFF_SHOWN: usize = 64 * 1024;
/// The most changes one layer lists; past it, each further change is counted in
/// `Listing::left_out`.
pub const MAX_CHANGES: usize = 100_000;
/// The permission bits a commit carries over: the sticky bit and `rwx` for all; setuid and
/// setgid stay in the layer (docs/design.md#staged-writes-and-owners).
pub const COMMITTED_MODE: u32 = 0o1777;

/// One change, relative to the layer's real directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// Relative to the real directory, `/`-separated.
    pub rel: PathBuf,
    pub kind: ChangeKind,
    /// What it is in the layer ([`EntryKind::Absent`]: deleted).
    pub what: EntryKind,
    pub size: Option<u64>,
    pub sha256: Option<String>,
    pub target: Option<PathBuf>,
    /// The permission bits in the layer.
    pub mode: Option<u32>,
    /// The permission bits of the real entry it replaces, if any.
    pub real_mode: Option<u32>,
    /// For a real entry deleted by a change above it (a deletion of its directory, a file in
    /// the directory's place, an opaque directory): the path of that change.
    pub under: Option<PathBuf>,
    /// Whether landing it removes a real directory (and everything in it).
    pub hides: bool,
    /// The real entry at `rel` as this listing saw it (`None`: nothing there). A commit
    /// decides on this view and lands on it only: an entry that is no longer this one is a
    /// conflict.
    pub seen: Option<Seen>,
}

/// Which real entry a listing saw at a path: its type, device and inode, and for what is not
/// a directory its change and modification times (a write, a rename or a mode change moves
/// the first; a write the second). A directory is told by device and inode alone: what lands
/// in it moves its times, and what it holds is judged entry by entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub kind: EntryKind,
    pub dev: u64,
    pub ino: u64,
    pub ctime_ns: Option<i128>,
    pub mtime_ns: Option<i128>,
}

impl Seen {
    pub fn of(st: &FileStat) -> Seen {
        let kind = kind_of_stat(st);
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        Seen {
            kind,
            dev: st.st_dev,
            ino: st.st_ino,
            ctime_ns: (kind != EntryKind::Dir).then(|| ns(st.st_ctime, st.st_ctime_nsec)),
            mtime_ns: (kind != EntryKind::Dir).then(|| ns(st.st_mtime, st.st_mtime_nsec)),
        }
    }

    /// Whether the real entry at `rel` of `real` is `seen` (`None`: nothing there), as far
    /// as it can be told (a link on the way: it is not).
    pub fn still(seen: Option<&Seen>, real: Option<&Tree>, rel: &Path) -> bool {
        let Some(real) = real else {
            return seen.is_none();
        };
        match real.stat(rel) {
            Ok(st) => seen == Some(&Seen::of(&st)),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => seen.is_none(),
            Err(_) => false,
        }
    }

    /// Whether `moved` is this entry after a rename of brokerd's own (which moves its change
    /// time, and nothing else of it).
    pub fn moved_to(&self, moved: &Seen) -> bool {
        Seen {
            ctime_ns: self.ctime_ns,
            ..*moved
        } == *self
    }
}

/// A layer's changes in path order, and how many more there were past `MAX_CHANGES`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing {
    pub found: Vec<Found>,
    pub left_out: usize,
}

impl Listing {
    /// How many changes the layer has, listed or not.
    pub fn count(&self) -> usize {
        self.found.len() + self.left_out
    }

    pub fn is_empty(&self) -> bool {
        self.count() == 0
    }
}

/// An entry of the layer, for recording what the real paths were when first staged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub rel: PathBuf,
    /// The entry hides a real directory: a whiteout, a file or link, or an opaque directory
    /// over it.
    pub hides: bool,
}

/// The trees of a layer, by descriptor: its upper directory (none before the first write)
/// and the real directory (none if it cannot be opened).
pub fn trees(upper: &Path, real: &Path) -> io::Result<(Option<Tree>, Option<Tree>)> {
    let upper = match Tree::open(upper) {
        Ok(t) => Some(t),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    Ok((upper, Tree::open(real).ok()))
}

/// Whether the real tree has a directory at `rel`, reached through no link.
fn real_dir(real: Option<&Tree>, rel: &Path) -> bool {
    real.is_some_and(|r| r.is_dir(rel))
}

/// Every entry of the layer (whiteouts included), in path order.
pub fn entries(upper: &Tree, real: Option<&Tree>) -> io::Result<Vec<Entry>> {
    let mut out = Vec::new();
    let mut stack = vec![(PathBuf::new(), real_dir(real, Path::new("")))];
    while let Some((rel, on_real_dir)) = stack.pop() {
        // A directory that cannot be opened (past PATH_MAX below the top) is not listed by
        // `changes` either: nothing of it can be committed.
        let names = match upper.names(&rel) {
            Ok(n) => n,
            Err(e) if rel.as_os_str().is_empty() => return Err(e),
            Err(_) => continue,
        };
        for name in names {
            let here = rel.join(&name);
            let Ok(st) = upper.stat(&here) else { continue };
            let over_dir = on_real_dir && real_dir(real, &here);
            let is_dir = kind_of_stat(&st) == EntryKind::Dir;
            let hides = over_dir && (!is_dir || upper.is_opaque(&here));
            out.push(Entry {
                rel: here.clone(),
                hides,
            });
            if is_dir {
                stack.push((here, over_dir));
            }
        }
    }
    out.sort_by(|a, b| a.rel.cmp(&b.rel));
    Ok(out)
}

/// Every real entry below `rel` (not `rel` itself), at most `limit`; `false` with them when
/// there were more.
pub fn real_below(real: &Tree, rel: &Path, limit: usize) -> (Vec<PathBuf>, bool) {
    let mut out = Vec::new();
    let mut stack = vec![rel.to_path_buf()];
    while let Some(d) = stack.pop() {
        for name in real.names(&d).unwrap_or_default() {
            if out.len() >= limit {
                return (out, false);
            }
            let here = d.join(name);
            if real.is_dir(&here) {
                stack.push(here.clone());
            }
            out.push(here);
        }
    }
    (out, true)
}

/// The changes of the layer `upper` over `real`, in path order.
pub fn changes(upper: &Path, real: &Path) -> io::Result<Listing> {
    let (upper, real) = trees(upper, real)?;
    match upper {
        Some(upper) => changes_in(&upper, real.as_ref()),
        None => Ok(Listing::default()),
    }
}

/// `changes` on open trees.
pub fn changes_in(upper: &Tree, real: Option<&Tree>) -> io::Result<Listing> {
    let mut w = Walk {
        upper,
        real,
        out: Listing::default(),
    };
    w.walk()?;
    w.out.found.sort_by(|a, b| a.rel.cmp(&b.rel));
    Ok(w.out)
}

struct Walk<'a> {
    upper: &'a Tree,
    real: Option<&'a Tree>,
    out: Listing,
}

impl Walk<'_> {
    fn room(&self) -> bool {
        self.out.found.len() < MAX_CHANGES
    }

    fn push(&mut self, f: impl FnOnce() -> Found) {
        if self.room() {
            self.out.found.push(f());
        } else {
            self.out.left_out += 1;
        }
    }

    /// The layer's directories, top down; each with whether the real tree has a directory
    /// there, and the opaque directory at or above it (below which the real tree is hidden).
    fn walk(&mut self) -> io::Result<()> {
        let mut stack: Vec<(PathBuf, bool, Option<PathBuf>)> =
            vec![(PathBuf::new(), real_dir(self.real, Path::new("")), None)];
        while let Some((rel, on_real_dir, hidden_by)) = stack.pop() {
            let names = match self.upper.names(&rel) {
                Ok(n) => n,
                Err(e) if rel.as_os_str().is_empty() => return Err(e),
                // A directory of the layer that cannot be opened: what it holds is not
                // listed, and counted as one left out.
                Err(_) => {
                    self.out.left_out += 1;
                    continue;
                }
            };
            let opaque_here = !rel.as_os_str().is_empty() && self.upper.is_opaque(&rel);
            let hidden_by = hidden_by.or_else(|| opaque_here.then(|| rel.clone()));
            if let (true, Some(root), Some(real)) = (on_real_dir, &hidden_by, self.real) {
                let have: BTreeSet<_> = names.iter().collect();
                for name in real.names(&rel).unwrap_or_default() {
                    if !have.contains(&name) {
                        self.real_deleted(rel.join(name), Some(root));
                    }
                }
            }
            for name in names {
                let here = rel.join(&name);
                let st = match self.upper.stat(&here) {
                    Ok(st) => st,
                    // Gone since it was listed.
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    // There, but not to be named (past PATH_MAX): counted, not listed.
                    Err(_) => {
                        self.out.left_out += 1;
                        continue;
                    }
                };
                let on_disk = match (on_real_dir, self.real) {
                    (true, Some(real)) => real.stat(&here).ok(),
                    _ => None,
                };
                if is_whiteout_stat(&st) {
                    if on_disk.is_some() {
                        self.real_deleted(here, None);
                    }
                    continue;
                }
                let what = kind_of_stat(&st);
                let over_dir = on_disk
                    .as_ref()
                    .is_some_and(|r| kind_of_stat(r) == EntryKind::Dir);
                let kind = match &on_disk {
                    None => Some(ChangeKind::Added),
                    Some(r) if kind_of_stat(r) != what => Some(ChangeKind::TypeChanged),
                    Some(r) => self.same_kind_change(&here, &st, r),
                };
                if let Some(kind) = kind {
                    let hides = kind == ChangeKind::TypeChanged && over_dir;
                    let (upper, real_mode) =
                        (self.upper, on_disk.as_ref().map(|r| r.st_mode & 0o7777));
                    let seen = on_disk.as_ref().map(Seen::of);
                    self.push(|| Found {
                        real_mode,
                        hides,
                        seen,
                        ..found(upper, here.clone(), kind, &st)
                    });
                }
                if what == EntryKind::Dir {
                    stack.push((here, over_dir, hidden_by.clone()));
                } else if over_dir {
                    // A file or link in a real directory's place: what it held is gone.
                    if let Some(real) = self.real {
                        for child in real.names(&here).unwrap_or_default() {
                            self.real_deleted(here.join(child), Some(&here));
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// A real entry the layer deletes, and for a directory every real entry below it.
    fn real_deleted(&mut self, rel: PathBuf, under: Option<&Path>) {
        let Some(real) = self.real else { return };
        let root = under.map_or_else(|| rel.clone(), Path::to_path_buf);
        let mut stack = vec![(rel, under.map(Path::to_path_buf))];
        while let Some((rel, under)) = stack.pop() {
            let Ok(st) = real.stat(&rel) else { continue };
            let is_dir = kind_of_stat(&st) == EntryKind::Dir;
            if is_dir {
                for name in real.names(&rel).unwrap_or_default() {
                    stack.push((rel.join(name), Some(root.clone())));
                }
            }
            self.push(|| Found {
                rel,
                kind: ChangeKind::Deleted,
                what: EntryKind::Absent,
                size: None,
                sha256: None,
                target: None,
                mode: None,
                real_mode: Some(st.st_mode & 0o7777),
                under,
                hides: is_dir,
                seen: Some(Seen::of(&st)),
            });
        }
    }

    /// A change between two entries of the same type, if any.
    fn same_kind_change(&self, rel: &Path, lm: &FileStat, rm: &FileStat) -> Option<ChangeKind> {
        let mode = |m: &FileStat| m.st_mode & 0o7777;
        let real = self.real?;
        match kind_of_stat(lm) {
            EntryKind::File => {
                let same = lm.st_size == rm.st_size
                    && match (self.upper.sha256(rel), real.sha256(rel)) {
                        (Ok(a), Ok(b)) => a == b,
                        _ => false,
                    };
                if !same {
                    Some(ChangeKind::Modified)
                } else if mode(lm) != mode(rm) {
                    Some(ChangeKind::ModeChanged)
                } else {
                    None
                }
            }
            EntryKind::Link => (self.upper.read_link(rel).ok() != real.read_link(rel).ok())
                .then_some(ChangeKind::Modified),
            EntryKind::Dir => (mode(lm) != mode(rm)).then_some(ChangeKind::ModeChanged),
            _ => Some(ChangeKind::Modified),
        }
    }
}

fn found(upper: &Tree, rel: PathBuf, kind: ChangeKind, st: &FileStat) -> Found {
    let what = kind_of_stat(st);
    Found {
        kind,
        what,
        size: (what == EntryKind::File).then(|| u64::try_from(st.st_size).unwrap_or(0)),
        sha256: (what == EntryKind::File)
            .then(|| upper.sha256(&rel).ok())
            .flatten(),
        target: (what == EntryKind::Link)
            .then(|| upper.read_link(&rel).ok())
            .flatten(),
        mode: Some(st.st_mode & 0o7777),
        real_mode: None,
        under: None,
        hides: false,
        seen: None,
        rel,
    }
}

/// The permission bits a commit gives `f`: the layer's without setuid and setgid, but for the
/// setgid bit a real directory already has (it gives its files its group, no privilege).
pub fn landed_mode(f: &Found) -> u32 {
    let mode = f.mode.unwrap_or(if f.what == EntryKind::Dir {
        0o755
    } else {
        0o644
    });
    let kept = match f.what {
        EntryKind::Dir => mode & f.real_mode.unwrap_or(0) & 0o2000,
        _ => 0,
    };
    (mode & COMMITTED_MODE) | kept
}

/// The bits of `f`'s mode in the layer that a commit leaves out (setuid, setgid), if any.
pub fn dropped_bits(f: &Found) -> Option<u32> {
    let dropped = f.mode? & 0o7777 & !landed_mode(f);
    (dropped != 0).then_some(dropped)
}

/// The unified diff of a changed text file, bounded; `None` for binary or large files (shown
/// by size and hash) and for what is not a file.
pub fn diff(f: &Found, upper: &Tree, real: Option<&Tree>, shown: &str) -> Option<String> {
    if f.what != EntryKind::File && f.kind != ChangeKind::Deleted {
        return None;
    }
    let read = |t: &Tree| -> Option<String> {
        let file = t.open_file(&f.rel).ok()?;
        if file.metadata().ok()?.len() > DIFF_INPUT {
            return None;
        }
        let mut s = String::new();
        file.take(DIFF_INPUT).read_to_string(&mut s).ok()?;
        Some(s)
    };
    let real_file = real.filter(|r| {
        r.stat(&f.rel)
            .is_ok_and(|st| kind_of_stat(&st) == EntryKind::File)
    });
    let old = match (f.kind, real_file) {
        (ChangeKind::Added, _) | (_, None) => String::new(),
        (_, Some(r)) => read(r)?,
    };
    let new = match f.kind {
        ChangeKind::Deleted => String::new(),
        _ => read(upper)?,
    };
    let text = similar::TextDiff::from_lines(&old, &new)
        .unified_diff()
        .context_radius(3)
        .header(&format!("a{shown}"), &format!("b{shown}"))
        .to_string();
    Some(match text.char_indices().nth(DIFF_SHOWN) {
        Some((cut, _)) => format!("{}\n[diff cut at {DIFF_SHOWN} characters]\n", &text[..cut]),
        None => text,
    })
}
