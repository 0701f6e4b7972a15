//! A grant's cache (docs/design.md#grant-caches): a directory of its own under brokerd's
//! state, mounted writable at [`proto::tools::TOOL_CACHE`] in the grant's shell sandboxes,
//! never another grant's, and emptied whenever it is found over its bound.
//!
//! Only brokerd (the service user) and root can change `<home>/caches` itself; a sandbox sees
//! the inside of its own grant's directory alone. Nothing here follows a link the sandbox
//! made: sizes are read without following, and a directory is emptied by moving it aside
//! first (a sandbox still running keeps the one it mounted) and then removing it without
//! following links.

use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A call's cache: its grant's directory and bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cache {
    pub dir: PathBuf,
    pub max_bytes: u64,
}

/// A walk of a cache stops counting after this many entries, and counts as over its bound:
/// a cache of more files than this costs every call a long walk.
pub const MAX_ENTRIES: u64 = 1_000_000;

/// What a cache holds: bytes on disk (a sparse file counts what it uses) and entries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub bytes: u64,
    pub entries: u64,
}

impl Usage {
    /// Whether it is past `max_bytes` or [`MAX_ENTRIES`].
    pub fn over(&self, max_bytes: u64) -> bool {
        self.bytes > max_bytes || self.entries > MAX_ENTRIES
    }
}

/// What a cache's usage is, stopping once past `max_bytes` or [`MAX_ENTRIES`] (the answer is
/// then over, not exact). Links are counted, never followed; an entry gone during the walk
/// (a sandbox still running) is left out.
pub fn usage(dir: &Path, max_bytes: u64) -> io::Result<Usage> {
    let mut u = Usage::default();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let entries = match std::fs::read_dir(&d) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound && d != dir => continue,
            Err(e) => return Err(e),
        };
        for e in entries.flatten() {
            let Ok(meta) = std::fs::symlink_metadata(e.path()) else {
                continue;
            };
            u.entries += 1;
            u.bytes = u.bytes.saturating_add(meta.blocks().saturating_mul(512));
            if u.over(max_bytes) {
                return Ok(u);
            }
            if meta.is_dir() {
                todo.push(e.path());
            }
        }
    }
    Ok(u)
}

/// The cache made ready for a call: its directory made (0700, with `<home>/caches`) where
/// missing, and emptied first when over its bound. `Ok(Some(usage))`: it was over, and is
/// empty now.
pub fn prepare(cache: &Cache) -> io::Result<Option<Usage>> {
    if let Some(parent) = cache.dir.parent() {
        make_dir(parent)?;
    }
    make_dir(&cache.dir)?;
    bound(cache)
}

/// Empties the cache when it is over its bound: `Ok(Some(usage))` when it was.
pub fn bound(cache: &Cache) -> io::Result<Option<Usage>> {
    let u = usage(&cache.dir, cache.max_bytes)?;
    if !u.over(cache.max_bytes) {
        return Ok(None);
    }
    // Another call of the grant may be making its sandbox: a directory is back at the path
    // at once, before the old one's removal.
    let aside = move_aside(&cache.dir)?;
    make_dir(&cache.dir)?;
    if let Some(aside) = aside {
        std::fs::remove_dir_all(aside)?;
    }
    Ok(Some(u))
}

/// A directory of brokerd's own, made 0700 where missing; anything else there (a file, a
/// link) is an error, never followed.
fn make_dir(dir: &Path) -> io::Result<()> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            let meta = std::fs::symlink_metadata(dir)?;
            if meta.is_dir() {
                Ok(())
            } else {
                Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} is not a directory", dir.display()),
                ))
            }
        }
        Err(e) => Err(e),
    }
}

/// Removes `dir` whole: moved aside first to a name no call mounts (a sandbox still running
/// keeps what it mounted), then removed without following links. A directory not there is
/// not an error.
pub fn empty(dir: &Path) -> io::Result<()> {
    match move_aside(dir)? {
        Some(aside) => std::fs::remove_dir_all(aside),
        None => Ok(()),
    }
}

/// `dir` renamed to a name beside it that no call mounts: where it went, `None` when it was
/// not there.
fn move_aside(dir: &Path) -> io::Result<Option<PathBuf>> {
    static N: AtomicU64 = AtomicU64::new(0);
    let Some(name) = dir.file_name() else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "no name"));
    };
    let mut aside = std::ffi::OsString::from(".removing-");
    aside.push(name);
    aside.push(format!(
        "-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let aside = dir.with_file_name(aside);
    match std::fs::rename(dir, &aside) {
        Ok(()) => Ok(Some(aside)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Every cache directory under `caches` (`<home>/caches`), by name, with what it holds
/// (counted up to `max_bytes` each); what is being removed is left out.
pub fn list(caches: &Path, max_bytes: u64) -> io::Result<Vec<(String, Usage)>> {
    let entries = match std::fs::read_dir(caches) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        out.push((name, usage(&e.path(), max_bytes)?));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Removes every cache under `caches` (and what an earlier removal left): how many.
pub fn remove_all(caches: &Path) -> io::Result<usize> {
    let entries = match std::fs::read_dir(caches) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut n = 0;
    for e in entries.flatten() {
        if !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        if e.file_name().to_string_lossy().starts_with(".removing-") {
            std::fs::remove_dir_all(e.path())?;
        } else {
            empty(&e.path())?;
            n += 1;
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cache is counted without following its links, emptied when over its bound (whatever
    /// a link in it points at stays), and listed and removed by name.
    #[test]
    fn a_cache_is_bounded_without_following_links() {
        let home = tempfile::tempdir().expect("tempdir");
        let caches = home.path().join("caches");
        let outside = home.path().join("other-grant");
        std::fs::create_dir_all(&outside).expect("outside");
        std::fs::write(outside.join("keep"), vec![7u8; 300_000]).expect("outside file");
        let cache = Cache {
            dir: caches.join("g"),
            max_bytes: 200_000,
        };
        assert!(prepare(&cache).expect("prepare").is_none());
        let mode = std::fs::metadata(&cache.dir).expect("dir").mode() & 0o777;
        assert_eq!(mode, 0o700);
        std::os::unix::fs::symlink(&outside, cache.dir.join("link")).expect("link");
        std::fs::write(cache.dir.join("small"), b"x").expect("small");
        let u = usage(&cache.dir, cache.max_bytes).expect("usage");
        assert!(
            !u.over(cache.max_bytes),
            "{u:?}: the link's target is not counted"
        );
        assert_eq!(bound(&cache).expect("bound"), None);
        std::fs::write(cache.dir.join("big"), vec![1u8; 300_000]).expect("big");
        let over = bound(&cache).expect("bound").expect("over");
        assert!(over.bytes > cache.max_bytes, "{over:?}");
        assert_eq!(std::fs::read_dir(&cache.dir).expect("dir").count(), 0);
        assert!(
            outside.join("keep").exists(),
            "a link's target is never removed"
        );
        std::fs::write(cache.dir.join("a"), b"a").expect("a");
        prepare(&Cache {
            dir: caches.join("h"),
            max_bytes: 1 << 20,
        })
        .expect("h");
        let listed = list(&caches, 1 << 20).expect("list");
        let names: Vec<&str> = listed.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["g", "h"]);
        assert!(listed[0].1.bytes > 0);
        assert_eq!(remove_all(&caches).expect("remove"), 2);
        assert_eq!(std::fs::read_dir(&caches).expect("caches").count(), 0);
        assert!(outside.join("keep").exists());
        // A link where the cache goes is refused, never followed.
        std::os::unix::fs::symlink(&outside, caches.join("g")).expect("planted");
        assert!(prepare(&cache).is_err());
    }
}
