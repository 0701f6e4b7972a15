//! Landing a layer's changes in the real directory, and discarding them
//! (docs/design.md#staged-writes-and-owners).
//!
//! A commit writes nothing through a symbolic link of the real tree: every directory on the
//! way is opened below the real directory with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`,
//! and the last component is handled by name in its parent (`*at` calls, no follow). Files land
//! whole: written beside under a temporary name, synced, then renamed over the old one. Links
//! are written as links. A path whose real file changed since the session first staged it is a
//! conflict, and is left in the layer; so is one whose way in the real tree is now a link.

use std::ffi::{CString, OsStr};
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat2, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::Mode;
use proto::broker::ChangeKind;

use super::changes::Found;
use super::{Identity, Meta};

/// Why one path was not committed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotLanded {
    #[error("the real file changed since this session first staged it (a conflict): look at both and commit again, or discard it")]
    Conflict,
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

/// Opens the directory `rel` (relative, `/`-separated) below `root`, through no link.
fn open_beneath(root: &OwnedFd, rel: &Path) -> Result<OwnedFd, NotLanded> {
    if rel.as_os_str().is_empty() {
        return nix::unistd::dup(root).map_err(|e| NotLanded::Io(e.to_string()));
    }
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC)
        .resolve(
            ResolveFlag::RESOLVE_BENEATH
                | ResolveFlag::RESOLVE_NO_SYMLINKS
                | ResolveFlag::RESOLVE_NO_MAGICLINKS,
        );
    openat2(root, rel, how).map_err(|e| match e {
        Errno::ELOOP | Errno::EXDEV => NotLanded::Symlink,
        e => NotLanded::Io(format!("{}: {}", rel.display(), e.desc())),
    })
}

/// The real directory, opened by descriptor (it must not be reached through a link either).
pub fn open_root(real: &Path) -> io::Result<OwnedFd> {
    crate::runner::mounts::open_dir(real)
        .map(|(fd, _)| fd)
        .map_err(|t| io::Error::other(format!("{}: {t:?}", real.display())))
}

fn io_err(e: impl std::fmt::Display) -> NotLanded {
    NotLanded::Io(e.to_string())
}

/// Lands one change in the real tree under `root`; `layer` is the upper directory.
pub fn land(root: &OwnedFd, layer: &Path, f: &Found) -> Result<Landed, NotLanded> {
    let parent_rel = f.rel.parent().unwrap_or(Path::new(""));
    let name = f.rel.file_name().ok_or_else(|| io_err("an empty path"))?;
    let parent = open_beneath(root, parent_rel)?;
    let source = layer.join(&f.rel);
    let mut sha256 = None;
    match f.kind {
        ChangeKind::Deleted => remove_at(&parent, name)?,
        ChangeKind::ModeChanged => {
            let mode = f.mode.unwrap_or(0o644);
            chmod_at(&parent, name, mode)?;
        }
        ChangeKind::Added | ChangeKind::Modified | ChangeKind::TypeChanged => {
            if f.kind == ChangeKind::TypeChanged {
                remove_at(&parent, name)?;
            }
            match f.what {
                "dir" => {
                    let mode = Mode::from_bits_truncate(f.mode.unwrap_or(0o755));
                    match nix::sys::stat::mkdirat(&parent, name, mode) {
                        Ok(()) | Err(Errno::EEXIST) => {}
                        Err(e) => return Err(io_err(e.desc())),
                    }
                    chmod_at(&parent, name, f.mode.unwrap_or(0o755))?;
                }
                "link" => {
                    let target = fs::read_link(&source).map_err(io_err)?;
                    let tmp = temp_name(name);
                    nix::unistd::symlinkat(&target, &parent, tmp.as_os_str())
                        .map_err(|e| io_err(e.desc()))?;
                    rename_at(&parent, &tmp, name)?;
                }
                "file" => {
                    sha256 = Some(write_file_at(
                        &parent,
                        name,
                        &source,
                        f.mode.unwrap_or(0o644),
                    )?);
                }
                other => return Err(io_err(format!("a {other} cannot be committed"))),
            }
        }
    }
    Ok(Landed {
        rel: f.rel.clone(),
        kind: f.kind,
        sha256,
    })
}

fn temp_name(name: &OsStr) -> std::ffi::OsString {
    let mut rand = [0u8; 6];
    let _ = getrandom::fill(&mut rand);
    let mut t = std::ffi::OsString::from(".boxmaker-commit-");
    t.push(hex::encode(rand));
    t.push("-");
    t.push(name);
    t
}

/// Writes `source`'s bytes beside `name` in `parent`, syncs them and renames them over it.
fn write_file_at(
    parent: &OwnedFd,
    name: &OsStr,
    source: &Path,
    mode: u32,
) -> Result<String, NotLanded> {
    use sha2::Digest;
    let tmp = temp_name(name);
    let fd = nix::fcntl::openat(
        parent,
        tmp.as_os_str(),
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(mode & 0o777),
    )
    .map_err(|e| io_err(e.desc()))?;
    let mut out = File::from(fd);
    let mut input = crate::view::open_for_reading(source).map_err(io_err)?;
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    let written = (|| -> io::Result<()> {
        loop {
            let n = io::Read::read(&mut input, &mut buf)?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            out.write_all(&buf[..n])?;
        }
        out.set_permissions(fs::Permissions::from_mode(mode & 0o7777))?;
        out.sync_all()
    })();
    if let Err(e) = written {
        let _ = nix::unistd::unlinkat(
            parent,
            tmp.as_os_str(),
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        );
        return Err(io_err(e));
    }
    rename_at(parent, &tmp, name)?;
    Ok(hex::encode(hasher.finalize()))
}

fn rename_at(parent: &OwnedFd, from: &OsStr, to: &OsStr) -> Result<(), NotLanded> {
    nix::fcntl::renameat(parent, from, parent, to).map_err(|e| {
        let _ = nix::unistd::unlinkat(parent, from, nix::unistd::UnlinkatFlags::NoRemoveDir);
        io_err(e.desc())
    })
}

/// Sets the permission bits of `name` in `parent` (a regular file or a directory, opened by
/// name without following a link).
fn chmod_at(parent: &OwnedFd, name: &OsStr, mode: u32) -> Result<(), NotLanded> {
    let fd = nix::fcntl::openat(
        parent,
        name,
        OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io_err(e.desc()))?;
    let st = nix::sys::stat::fstat(&fd).map_err(|e| io_err(e.desc()))?;
    // A link where the layer has a file or a directory: the real tree changed under it, and
    // nothing is set through the link.
    if st.st_mode & libc::S_IFMT == libc::S_IFLNK {
        return Err(NotLanded::Symlink);
    }
    // An O_PATH descriptor takes no fchmod; its /proc link names exactly that file.
    let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
    fs::set_permissions(&path, fs::Permissions::from_mode(mode & 0o7777)).map_err(io_err)
}

/// Removes `name` in `parent`: a file or link, or a directory with everything in it, following
/// no link.
fn remove_at(parent: &OwnedFd, name: &OsStr) -> Result<(), NotLanded> {
    use nix::unistd::{unlinkat, UnlinkatFlags};
    match unlinkat(parent, name, UnlinkatFlags::NoRemoveDir) {
        Ok(()) | Err(Errno::ENOENT) => return Ok(()),
        Err(Errno::EISDIR) => {}
        Err(e) => return Err(io_err(e.desc())),
    }
    let dir = nix::fcntl::openat(
        parent,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io_err(e.desc()))?;
    empty_dir(dir)?;
    unlinkat(parent, name, UnlinkatFlags::RemoveDir).map_err(|e| io_err(e.desc()))
}

fn empty_dir(dir: OwnedFd) -> Result<(), NotLanded> {
    let keep = nix::unistd::dup(&dir).map_err(|e| io_err(e.desc()))?;
    let mut d = nix::dir::Dir::from_fd(dir).map_err(|e| io_err(e.desc()))?;
    let names: Vec<CString> = d
        .iter()
        .flatten()
        .map(|e| e.file_name().to_owned())
        .filter(|n| n.as_bytes() != b"." && n.as_bytes() != b"..")
        .collect();
    for n in names {
        remove_at(&keep, OsStr::from_bytes(n.as_bytes()))?;
    }
    Ok(())
}

/// Removes a directory tree of brokerd's own state (a layer), entries of other owners
/// included where the directory lets brokerd unlink them. overlayfs leaves its `work/work`
/// directory mode 0: brokerd's own such directories are opened up first.
pub fn remove_tree(dir: &Path) -> io::Result<()> {
    match fs::remove_dir_all(dir) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) if e.kind() != io::ErrorKind::PermissionDenied => return Err(e),
        Err(_) => {}
    }
    open_up(dir);
    match fs::remove_dir_all(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Gives every directory below `dir` that brokerd owns mode 0700 (no link followed).
fn open_up(dir: &Path) {
    let _ = fs::set_permissions(dir, fs::Permissions::from_mode(0o700));
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            open_up(&e.path());
        }
    }
}

/// Takes `f` out of the layer once it landed or was discarded: its entry (a whiteout, a file,
/// a link, or a directory with what is left in it when `whole`), then empty parents up to the
/// layer's top.
pub fn drop_from_layer(upper: &Path, f: &Found, whole: bool) -> io::Result<()> {
    let at = upper.join(&f.rel);
    let m = match fs::symlink_metadata(&at) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            // An older whiteout is a `.wh.` file beside it.
            let parent = at.parent().unwrap_or(upper);
            let mut wh = std::ffi::OsString::from(".wh.");
            wh.push(f.rel.file_name().unwrap_or_default());
            let _ = fs::remove_file(parent.join(wh));
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    if m.is_dir() {
        if whole {
            fs::remove_dir_all(&at)?;
        } else if fs::read_dir(&at)?.next().is_none() {
            fs::remove_dir(&at)?;
        }
    } else {
        fs::remove_file(&at)?;
    }
    Ok(())
}

/// Whether the real path of `f` is no longer what the session saw when it first staged a
/// change there. Every path has a record by the time of a commit (`Stage::record_first` runs
/// first, taking the real path as it is then for a change a crash left unrecorded).
pub fn conflict(meta: &Meta, real: &Path, f: &Found) -> bool {
    let key = f.rel.display().to_string();
    meta.first
        .get(&key)
        .is_some_and(|first| !first.unchanged(&Identity::of(&real.join(&f.rel))))
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

/// What a commit did: each selected change landed, was a conflict, or was skipped.
#[derive(Debug, Default)]
pub struct Report {
    pub landed: Vec<Landed>,
    pub conflicts: Vec<(PathBuf, NotLanded)>,
    pub skipped: Vec<(PathBuf, NotLanded)>,
}

/// The changes of `found` that `named` selects (relative paths; `None`: all): a change at or
/// below a named path.
pub fn select<'a>(found: &'a [Found], named: Option<&[PathBuf]>) -> Vec<&'a Found> {
    found
        .iter()
        .filter(|f| named.is_none_or(|n| n.iter().any(|p| f.rel.starts_with(p))))
        .collect()
}

/// Lands the selected changes of `layer`. A change `protected` says is a protected target
/// lands only when a named path is exactly it or the protected directory it lies in (naming
/// a parent is not enough). With `all_or_nothing`, nothing lands unless every selected change
/// can. What landed leaves the layer; the rest stays for another try or a discard.
pub fn commit(
    layer: &super::Layer,
    found: &[Found],
    named: Option<&[PathBuf]>,
    all_or_nothing: bool,
    protected: impl Fn(&Found) -> Option<PathBuf>,
) -> io::Result<Report> {
    let root = open_root(&layer.real)?;
    normalize_opaque(layer)?;
    let mut meta = Meta::read(layer)?;
    let mut report = Report::default();
    let mut ready = Vec::new();
    for f in select(found, named) {
        if let Some(guard) = protected(f) {
            let named_it = named.is_some_and(|n| n.iter().any(|p| *p == f.rel || *p == guard));
            if !named_it {
                report.skipped.push((f.rel.clone(), NotLanded::Protected));
                continue;
            }
        }
        if conflict(&meta, &layer.real, f) {
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
    if all_or_nothing && !report.conflicts.is_empty() {
        for f in ready {
            report
                .skipped
                .push((f.rel.clone(), NotLanded::AllOrNothing));
        }
        return Ok(report);
    }
    for f in ready {
        match land(&root, &layer.upper, f) {
            Ok(l) => report.landed.push(l),
            Err(e) => report.conflicts.push((f.rel.clone(), e)),
        }
    }
    // Out of the layer, children before their directories.
    for l in report.landed.iter().rev() {
        if let Some(f) = found.iter().find(|f| f.rel == l.rel) {
            drop_from_layer(&layer.upper, f, false)?;
        }
        meta.first.remove(&l.rel.display().to_string());
    }
    meta.write(layer)?;
    Ok(report)
}

/// The part of `rel`'s parent that exists in the real tree, opened through no link.
fn open_existing_parent(root: &OwnedFd, rel: &Path) -> Result<(), NotLanded> {
    let mut existing = PathBuf::new();
    for c in rel.parent().unwrap_or(Path::new("")).components() {
        let next = existing.join(c);
        match open_beneath(root, &next) {
            Ok(_) => existing = next,
            // Not there yet: an added directory of the same commit makes it.
            Err(NotLanded::Io(_)) => break,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Throws the selected changes of `layer` away: the real directory keeps what it has.
pub fn discard(
    layer: &super::Layer,
    found: &[Found],
    named: Option<&[PathBuf]>,
) -> io::Result<Vec<PathBuf>> {
    normalize_opaque(layer)?;
    let mut meta = Meta::read(layer)?;
    let chosen = select(found, named);
    for f in chosen.iter().rev() {
        drop_from_layer(&layer.upper, f, true)?;
        meta.first.remove(&f.rel.display().to_string());
    }
    meta.write(layer)?;
    Ok(chosen.into_iter().map(|f| f.rel.clone()).collect())
}

/// Turns every opaque directory of the layer that lies over a real directory into a plain one
/// with a whiteout for each real entry it hid. The merged view is the same; but a part of it
/// can now land (or be thrown away) alone: an opaque directory would hide a file the commit
/// just wrote into the real directory, and its uncommitted siblings would vanish with it.
pub fn normalize_opaque(layer: &super::Layer) -> io::Result<()> {
    use super::merged::is_opaque;
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let dir = layer.upper.join(&rel);
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(rel.join(e.file_name()));
            }
        }
        let real = layer.real.join(&rel);
        if rel.as_os_str().is_empty()
            || !is_opaque(&dir)
            || !fs::symlink_metadata(&real).is_ok_and(|m| m.is_dir())
        {
            continue;
        }
        for e in fs::read_dir(&real)?.flatten() {
            let at = dir.join(e.file_name());
            if fs::symlink_metadata(&at).is_err() {
                nix::sys::stat::mknod(&at, nix::sys::stat::SFlag::S_IFCHR, Mode::empty(), 0)
                    .map_err(io::Error::from)?;
            }
        }
        for name in ["user.overlay.opaque", "user.fuseoverlayfs.opaque"] {
            let _ = remove_xattr(&dir, name);
        }
        let _ = fs::remove_file(dir.join(".wh..wh..opq"));
        if is_opaque(&dir) {
            return Err(io::Error::other(format!(
                "{}: an opaque directory of the layer brokerd cannot make plain",
                dir.display()
            )));
        }
    }
    Ok(())
}

fn remove_xattr(p: &Path, name: &str) -> io::Result<()> {
    let path =
        CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::other("NUL in a path"))?;
    let name = CString::new(name).map_err(|_| io::Error::other("NUL in a name"))?;
    // SAFETY: both strings are NUL-terminated and live across the call.
    if unsafe { libc::lremovexattr(path.as_ptr(), name.as_ptr()) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
#[path = "commit_tests.rs"]
mod tests;
