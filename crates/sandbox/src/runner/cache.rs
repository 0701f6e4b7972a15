//! A grant's cache (docs/design.md#grant-caches): a directory of its own under brokerd's
//! state, mounted writable at [`proto::tools::TOOL_CACHE`] in the grant's shell sandboxes,
//! never another grant's, and emptied whenever it is found over its bound.
//!
//! Only brokerd (the service user) and root can change `<home>/caches` itself; a sandbox sees
//! the inside of its own grant's directory alone. Nothing here follows a link the sandbox
//! made: sizes are read without following, and a directory is emptied by moving it aside
//! first (a name no grant can have) and then removing it without following links. A cache is
//! emptied only while no other call of its grant uses it ([`enter`]).

use std::collections::HashMap;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

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
    /// A part of it could not be read (a directory made unreadable, a path past the
    /// system's length): what it holds is not known, so it counts as over.
    pub unreadable: bool,
}

impl Usage {
    /// Whether it is past `max_bytes` or [`MAX_ENTRIES`], or could not be read whole.
    pub fn over(&self, max_bytes: u64) -> bool {
        self.bytes > max_bytes || self.entries > MAX_ENTRIES || self.unreadable
    }
}

/// What a cache's usage is, stopping once past `max_bytes` or [`MAX_ENTRIES`] (the answer is
/// then over, not exact). Links are counted, never followed; each entry is read relative to
/// its directory. An entry gone during the walk is left out; any other failure makes the
/// answer `unreadable`, which is over: a sandbox cannot hide what it wrote from the count.
/// An error only where `dir` itself cannot be read for a reason other than its mode.
pub fn usage(dir: &Path, max_bytes: u64) -> io::Result<Usage> {
    let mut u = Usage::default();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let entries = match std::fs::read_dir(&d) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound && d != dir => continue,
            Err(e) if d == dir && e.kind() != io::ErrorKind::PermissionDenied => return Err(e),
            Err(_) => {
                u.unreadable = true;
                return Ok(u);
            }
        };
        for entry in entries {
            let read = entry.and_then(|e| {
                let m = e.metadata()?;
                Ok((e.path(), m))
            });
            let (path, meta) = match read {
                Ok(r) => r,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(_) => {
                    u.unreadable = true;
                    return Ok(u);
                }
            };
            u.entries += 1;
            u.bytes = u.bytes.saturating_add(meta.blocks().saturating_mul(512));
            if u.over(max_bytes) {
                return Ok(u);
            }
            if meta.is_dir() {
                todo.push(path);
            }
        }
    }
    Ok(u)
}

/// The calls using each cache directory now (see [`enter`]).
static IN_USE: Mutex<Option<HashMap<PathBuf, usize>>> = Mutex::new(None);

/// A call's use of its cache, from before its sandbox is made until after its clean-up.
pub struct InUse(PathBuf);

/// Counts a call as using `dir` while the guard lives.
pub fn enter(dir: &Path) -> InUse {
    let mut m = IN_USE.lock().unwrap_or_else(|p| p.into_inner());
    *m.get_or_insert_with(HashMap::new)
        .entry(dir.to_path_buf())
        .or_default() += 1;
    InUse(dir.to_path_buf())
}

impl InUse {
    /// Whether this call is the only one using its cache: only then may it be emptied (a
    /// sandbox of another call would lose what it is writing).
    pub fn alone(&self) -> bool {
        let m = IN_USE.lock().unwrap_or_else(|p| p.into_inner());
        m.as_ref().and_then(|m| m.get(&self.0)).copied() == Some(1)
    }
}

impl Drop for InUse {
    fn drop(&mut self) {
        let mut m = IN_USE.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = m.as_mut() {
            if let Some(n) = m.get_mut(&self.0) {
                *n -= 1;
                if *n == 0 {
                    m.remove(&self.0);
                }
            }
        }
    }
}

/// The cache made ready for a call: its directory made (0700, with `<home>/caches`) where
/// missing, and emptied first when over its bound and `use_` is the only call using it.
/// `Ok(Some(usage))`: it was over, and is empty now.
pub fn prepare(cache: &Cache, use_: &InUse) -> io::Result<Option<Usage>> {
    if let Some(parent) = cache.dir.parent() {
        make_dir(parent)?;
    }
    make_dir(&cache.dir)?;
    if !use_.alone() {
        return Ok(None);
    }
    bound(cache)
}

/// Empties the cache when it is over its bound: `Ok(Some(usage))` when it was. The caller
/// makes sure no other call uses it ([`InUse::alone`]).
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
        remove(&aside)?;
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

/// Removes `dir` whole: moved aside first to a name no call mounts, so the next call's
/// sandbox gets a fresh one, then removed without following links ([`remove`]). A directory
/// not there is not an error.
pub fn empty(dir: &Path) -> io::Result<()> {
    match move_aside(dir)? {
        Some(aside) => remove(&aside),
        None => Ok(()),
    }
}

/// Removes a directory moved aside, without following links. A sandbox may have left a
/// directory it cannot be read or emptied through (`chmod 000`, the same user's): where the
/// first removal fails, each directory in it (never a link) is given back `rwx` for its
/// owner, and the removal is tried once more.
fn remove(dir: &Path) -> io::Result<()> {
    if std::fs::remove_dir_all(dir).is_ok() {
        return Ok(());
    }
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        match std::fs::symlink_metadata(&d) {
            Ok(m) if m.is_dir() => {
                if m.permissions().mode() & 0o700 != 0o700 {
                    let mut p = m.permissions();
                    p.set_mode(m.permissions().mode() | 0o700);
                    std::fs::set_permissions(&d, p)?;
                }
            }
            _ => continue,
        }
        for e in std::fs::read_dir(&d)?.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                todo.push(e.path());
            }
        }
    }
    std::fs::remove_dir_all(dir)
}

/// `dir` renamed to a name beside it that no call mounts: where it went, `None` when it was
/// not there.
fn move_aside(dir: &Path) -> io::Result<Option<PathBuf>> {
    static N: AtomicU64 = AtomicU64::new(0);
    let Some(name) = dir.file_name() else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "no name"));
    };
    // '@' is in no grant's name: the name cannot be a cache's.
    let mut aside = std::ffi::OsString::from(".removing@");
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
        if e.file_name().to_string_lossy().starts_with(".removing@") {
            remove(&e.path())?;
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
    /// a link in it points at stays), also when a part of it is made unreadable, never while
    /// another call uses it, and removed whole by `remove_all`.
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
        let use_ = enter(&cache.dir);
        assert!(prepare(&cache, &use_).expect("prepare").is_none());
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
        // Another call of the grant is using it: it is left as it is.
        let other = enter(&cache.dir);
        assert!(!use_.alone());
        assert_eq!(prepare(&cache, &use_).expect("prepare"), None);
        assert!(cache.dir.join("big").exists());
        drop(other);
        assert!(use_.alone());
        let over = prepare(&cache, &use_).expect("prepare").expect("over");
        assert!(over.bytes > cache.max_bytes, "{over:?}");
        assert_eq!(std::fs::read_dir(&cache.dir).expect("dir").count(), 0);
        assert!(
            outside.join("keep").exists(),
            "a link's target is never removed"
        );

        // A directory the sandbox made unreadable (its own user's) hides nothing: the cache
        // counts as over and is emptied all the same.
        let hidden = cache.dir.join("a/b");
        std::fs::create_dir_all(&hidden).expect("hidden");
        std::fs::write(hidden.join("big"), vec![1u8; 300_000]).expect("hidden big");
        std::fs::set_permissions(cache.dir.join("a"), std::fs::Permissions::from_mode(0o0))
            .expect("chmod 000");
        let unreadable = usage(&cache.dir, cache.max_bytes).expect("usage");
        // root reads through any mode: only another user sees it unreadable.
        if !nix::unistd::Uid::effective().is_root() {
            assert!(unreadable.unreadable, "{unreadable:?}");
        }
        assert!(bound(&cache).expect("bound").is_some());
        assert_eq!(std::fs::read_dir(&cache.dir).expect("dir").count(), 0);
        let left: Vec<_> = std::fs::read_dir(&caches)
            .expect("caches")
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(
            left,
            [std::ffi::OsString::from("g")],
            "nothing moved aside is left"
        );

        std::fs::write(cache.dir.join("a"), b"a").expect("a");
        let h = Cache {
            dir: caches.join("h"),
            max_bytes: 1 << 20,
        };
        prepare(&h, &enter(&h.dir)).expect("h");
        assert_eq!(remove_all(&caches).expect("remove"), 2);
        assert_eq!(std::fs::read_dir(&caches).expect("caches").count(), 0);
        assert!(outside.join("keep").exists());
        // A link where the cache goes is refused, never followed.
        std::os::unix::fs::symlink(&outside, caches.join("g")).expect("planted");
        assert!(prepare(&cache, &use_).is_err());
    }
}
