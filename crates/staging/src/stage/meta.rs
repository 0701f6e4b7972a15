//! A layer's `layer.json` (docs/design.md#staged-writes-and-owners): the real directory, the
//! grants that staged into it, and what each real path was when the session first staged a
//! change to it, which is how a commit tells a conflict.
//!
//! A change that hides a real directory (a deletion, a file or link in its place, an opaque
//! directory over it) removes everything below it when committed; so when such a change is
//! first recorded, every real entry below it is recorded too, and its path joins `hidden`.
//! Below a path of `hidden`, a real entry with no record appeared after the session last saw
//! that directory: a conflict, never a silent deletion.
//!
//! Only what the session could have seen is its base. A real entry whose change time is past
//! the moment the call took the layer, read from the fine-grained real-time clock (which no file
//! stamp runs ahead of, not even Linux's multigrain stamps), was changed by the host while the
//! call ran and is recorded as `changed`. A change in the clock tick just after that moment may
//! carry an earlier stamp and count as the base: the sandbox has not started by then in
//! practice. `layer.json` is written beside under a name of its own and renamed into place,
//! under `layer.json.lock`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use nix::errno::Errno;
use proto::broker::EntryKind;
use serde::{Deserialize, Serialize};

use super::tree::{kind_of_stat, Tree};
use super::Layer;

/// A layer's metadata file.
const META: &str = "layer.json";
/// Held while `layer.json` is read, changed and written back.
const META_LOCK: &str = "layer.json.lock";
/// The most bytes of a real file hashed to tell a later change to it (larger ones are told by
/// size, inode and times).
const HASH_LIMIT: u64 = 64 * 1024 * 1024;

/// What a real path was when the session first staged a change to it, as `layer.json`
/// spells it. A word it does not know is an error reading the file, never a guess.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RealKind {
    File,
    Dir,
    Link,
    /// A device, FIFO or socket, or what could not be read.
    Other,
    /// It did not exist.
    #[serde(rename = "none")]
    Absent,
    /// The way to it goes through a link.
    Unreachable,
    /// The host changed it while the call that first staged it ran: what the session saw is
    /// not known.
    Changed,
}

impl From<EntryKind> for RealKind {
    fn from(k: EntryKind) -> RealKind {
        match k {
            EntryKind::File => RealKind::File,
            EntryKind::Dir => RealKind::Dir,
            EntryKind::Link => RealKind::Link,
            EntryKind::Other => RealKind::Other,
            EntryKind::Absent => RealKind::Absent,
        }
    }
}

/// What a real path was when the session first staged a change to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub kind: RealKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dev: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ino: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtime_ns: Option<i128>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

impl Identity {
    /// The real path `rel` as it is now, read through no link; a file up to `HASH_LIMIT`
    /// hashed when `hash`.
    pub fn at(real: Option<&Tree>, rel: &Path, hash: bool) -> Identity {
        let Some(real) = real else {
            return Identity::of_kind(RealKind::Absent);
        };
        let st = match real.stat(rel) {
            Ok(st) => st,
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => {
                return Identity::of_kind(RealKind::Absent);
            }
            Err(e) if e.raw_os_error() == Some(Errno::ELOOP as i32) => {
                return Identity::of_kind(RealKind::Unreachable);
            }
            Err(_) => return Identity::of_kind(RealKind::Other),
        };
        let kind = RealKind::from(kind_of_stat(&st));
        let size = u64::try_from(st.st_size).unwrap_or(0);
        let mtime_ns = i128::from(st.st_mtime) * 1_000_000_000 + i128::from(st.st_mtime_nsec);
        Identity {
            sha256: (kind == RealKind::File && hash && size <= HASH_LIMIT)
                .then(|| real.sha256(rel).ok())
                .flatten(),
            target: (kind == RealKind::Link)
                .then(|| real.read_link(rel).ok().map(|t| t.display().to_string()))
                .flatten(),
            dev: Some(st.st_dev),
            ino: Some(st.st_ino),
            size: (kind == RealKind::File).then_some(size),
            mtime_ns: (kind == RealKind::File).then_some(mtime_ns),
            kind,
        }
    }

    /// The real path `p` (absolute) as it is now.
    pub fn of(p: &Path) -> Identity {
        match (p.parent(), p.file_name()) {
            (Some(dir), Some(name)) => {
                Identity::at(Tree::open(dir).ok().as_ref(), name.as_ref(), true)
            }
            _ => Identity::of_kind(RealKind::Other),
        }
    }

    fn of_kind(kind: RealKind) -> Identity {
        Identity {
            kind,
            dev: None,
            ino: None,
            size: None,
            mtime_ns: None,
            sha256: None,
            target: None,
        }
    }

    /// A real entry the host changed while the call that first staged it ran.
    pub fn changed_during_call() -> Identity {
        Identity::of_kind(RealKind::Changed)
    }

    pub fn none() -> Identity {
        Identity::of_kind(RealKind::Absent)
    }

    /// Whether `now` is still what was recorded: the same thing at the path, not changed
    /// since. A directory counts as unchanged while it is a directory: its entries are judged
    /// each on its own, and below a hidden one an entry with no record is a conflict.
    pub fn unchanged(&self, now: &Identity) -> bool {
        if self.kind != now.kind {
            return false;
        }
        match self.kind {
            RealKind::Absent | RealKind::Dir => true,
            RealKind::Link => self.target == now.target,
            RealKind::File => {
                self.size == now.size
                    && match (&self.sha256, &now.sha256) {
                        (Some(a), Some(b)) => a == b,
                        _ => {
                            self.dev == now.dev
                                && self.ino == now.ino
                                && self.mtime_ns == now.mtime_ns
                        }
                    }
            }
            RealKind::Unreachable | RealKind::Changed => false,
            RealKind::Other => self.dev == now.dev && self.ino == now.ino,
        }
    }
}

/// A layer's `layer.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Meta {
    pub real: std::path::PathBuf,
    /// The grants of the session that staged into it.
    pub grants: Vec<String>,
    /// Seconds since the epoch when the layer was made (the session's first writing call
    /// through its directory); `staged_ttl_s` counts from it.
    pub created: u64,
    /// By path relative to the real directory: what it was when first staged.
    pub first: BTreeMap<String, Identity>,
    /// Paths whose change hides a real directory, and below which every real entry was
    /// recorded when it was first seen.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub hidden: BTreeSet<String>,
    /// Set once a record did not fit (about `META_BUDGET` bytes in all): from then on a path
    /// with no record is a conflict, since what the session saw there was not kept.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub full: bool,
}

/// The key of `rel` in `Meta::first` and `Meta::hidden`: its text (`names::shown`), one per
/// path whatever bytes its names hold.
pub fn key(rel: &Path) -> String {
    super::names::shown(rel)
}

impl Meta {
    /// The layer's metadata; one that does not parse (a kind it does not know, a key too
    /// many) is an error that names the file.
    pub fn read(layer: &Layer) -> io::Result<Meta> {
        let path = layer.dir.join(META);
        let text = fs::read_to_string(&path)?;
        serde_json::from_str(&text).map_err(|e| {
            let why = format!("{}: {e}", path.display());
            io::Error::new(io::ErrorKind::InvalidData, why)
        })
    }

    /// Written beside under a name of its own and renamed into place, synced: a crash leaves
    /// the old or the new, and two writers never share a file.
    fn write(&self, layer: &Layer) -> io::Result<()> {
        let text = serde_json::to_vec_pretty(self)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        let mut rand = [0u8; 8];
        getrandom::fill(&mut rand).map_err(|e| io::Error::other(e.to_string()))?;
        let tmp = layer.dir.join(format!("{META}.{}.new", hex::encode(rand)));
        let written = (|| {
            let mut f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&tmp)?;
            io::Write::write_all(&mut f, &text)?;
            f.sync_all()?;
            fs::rename(&tmp, layer.dir.join(META))
        })();
        if written.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        written?;
        File::open(&layer.dir)?.sync_all()
    }

    /// Reads, changes and writes back the layer's metadata under its lock (no other writer,
    /// in this process or another, in between); `change` says whether it changed anything.
    /// A layer with no metadata yet starts from `fresh`.
    pub fn update<T>(
        layer: &Layer,
        fresh: impl FnOnce() -> Option<Meta>,
        change: impl FnOnce(&mut Meta) -> io::Result<(bool, T)>,
    ) -> io::Result<T> {
        let _held = super::lock_file(&layer.dir, META_LOCK, nix::fcntl::FlockArg::LockExclusive)?;
        let mut meta = match Meta::read(layer) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => match fresh() {
                Some(m) => m,
                None => return Err(e),
            },
            Err(e) => return Err(e),
        };
        let (changed, out) = change(&mut meta)?;
        if changed {
            meta.write(layer)?;
        }
        Ok(out)
    }

    /// About the bytes of `layer.json` one record of `first` takes.
    pub fn cost(key: &str, id: &Identity) -> usize {
        key.len() + serde_json::to_vec(id).map_or(512, |v| v.len()) + 16
    }

    /// About the bytes of `layer.json` its records take.
    pub fn size(&self) -> usize {
        let first: usize = self.first.iter().map(|(k, id)| Meta::cost(k, id)).sum();
        first + self.hidden.iter().map(|k| k.len() + 8).sum::<usize>()
    }

    /// Keeps the records of the paths in `entries` (the layer's) and of those below a path of
    /// `hidden` that is one of them; whether anything went.
    pub fn prune(&mut self, entries: BTreeSet<String>) -> bool {
        let before = (self.first.len(), self.hidden.len());
        self.hidden.retain(|k| entries.contains(k));
        let hidden = &self.hidden;
        // A key's ancestors are its prefixes up to a `/` (a text keeps every `/` of its path).
        let below_hidden = |k: &str| k.match_indices('/').any(|(i, _)| hidden.contains(&k[..i]));
        self.first
            .retain(|k, _| entries.contains(k) || below_hidden(k));
        before != (self.first.len(), self.hidden.len())
    }

    /// Whether `rel` lies at or below a path of `hidden`.
    pub fn covered(&self, rel: &Path) -> bool {
        rel.ancestors()
            .filter(|a| !a.as_os_str().is_empty())
            .any(|a| self.hidden.contains(&key(a)))
    }

    /// Forgets `rel`, and with `below` everything below it.
    pub fn forget(&mut self, rel: &Path, below: bool) {
        let k = key(rel);
        self.first.remove(&k);
        self.hidden.remove(&k);
        if below {
            let prefix = format!("{k}/");
            self.first.retain(|p, _| !p.starts_with(&prefix));
            self.hidden.retain(|p| !p.starts_with(&prefix));
        }
    }
}
