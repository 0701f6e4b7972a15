//! One change landed in the real directory (docs/design.md#staged-writes-and-owners).
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

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::Mode;
use nix::unistd::UnlinkatFlags;
use proto::broker::{ChangeKind, EntryKind};
use rustix::fs::RenameFlags;

use super::changes::{landed_mode, Found, Seen};
use super::commit::{io_err, not_landed, Landed, NotLanded};
use super::journal::Journal;
use super::tree::{remove_at, Tree};

/// The real entries a commit's listing saw, by path: what it may remove or replace.
pub(super) type SeenMap = BTreeMap<PathBuf, Seen>;

/// A directory a commit made or changes the mode of, for its mode once its children landed:
/// its path, the mode, and the entry it must still be.
pub(super) struct DirMode {
    pub(super) rel: PathBuf,
    pub(super) mode: u32,
    pub(super) seen: Option<Seen>,
}

/// Lands one change in the real tree `root`, reading the layer `upper`, on the view `seen`:
/// what it removes or replaces must still be the entry the listing saw, each entry checked as
/// it goes. A directory's mode is returned for the caller to set once the directory's children
/// have landed.
pub(super) fn land(
    root: &Tree,
    upper: &Tree,
    f: &Found,
    seen: &SeenMap,
    journal: &Journal,
) -> Result<(Landed, Option<DirMode>), NotLanded> {
    let landed = || Landed {
        rel: f.rel.clone(),
        kind: f.kind,
        sha256: None,
    };
    let (parent, name) = match root.parent_of(&f.rel) {
        Ok(p) => p,
        // A deletion whose directory is gone (a deletion above it landed first) is done.
        Err(e)
            if f.kind == ChangeKind::Deleted
                && matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) =>
        {
            return Ok((landed(), None));
        }
        Err(e) => return Err(not_landed(&f.rel, &e)),
    };
    let mut sha256 = None;
    let mut dir_mode = None;
    match f.kind {
        ChangeKind::Deleted => {
            if f.seen.is_some_and(|s| s.kind == EntryKind::Dir)
                && !listed_below(&parent, name, &f.rel, seen)?
            {
                return Err(NotLanded::Changed);
            }
            remove_listed(&parent, name, &f.rel, seen)?;
        }
        ChangeKind::ModeChanged if f.what == EntryKind::Dir => {
            dir_mode = Some(DirMode {
                rel: f.rel.clone(),
                mode: landed_mode(f),
                seen: f.seen,
            });
        }
        ChangeKind::ModeChanged => chmod_at(&parent, name, landed_mode(f), f.seen.as_ref())?,
        ChangeKind::Added | ChangeKind::Modified | ChangeKind::TypeChanged => {
            let tmp = journal.temp_name(name);
            match f.what {
                // A new directory is made in place: nothing is there to keep.
                EntryKind::Dir if f.seen.is_none() => {
                    // Open to brokerd until its children are in; its own mode comes last.
                    match nix::sys::stat::mkdirat(&parent, name, Mode::S_IRWXU) {
                        Ok(()) => {}
                        Err(Errno::EEXIST) => return Err(NotLanded::Changed),
                        Err(e) => return Err(io_err(e.desc())),
                    }
                    dir_mode = Some(DirMode {
                        rel: f.rel.clone(),
                        mode: landed_mode(f),
                        seen: stat_at(&parent, name).ok().flatten(),
                    });
                }
                EntryKind::Dir => {
                    nix::sys::stat::mkdirat(&parent, tmp.as_os_str(), Mode::S_IRWXU)
                        .map_err(|e| io_err(e.desc()))?;
                    let made = stat_at(&parent, &tmp).ok().flatten();
                    put_in_place(&parent, &tmp, name, &f.rel, f.seen.as_ref(), seen)?;
                    dir_mode = Some(DirMode {
                        rel: f.rel.clone(),
                        mode: landed_mode(f),
                        seen: made,
                    });
                }
                EntryKind::Link => {
                    let target = upper.read_link(&f.rel).map_err(io_err)?;
                    nix::unistd::symlinkat(&target, &parent, tmp.as_os_str())
                        .map_err(|e| io_err(e.desc()))?;
                    put_in_place(&parent, &tmp, name, &f.rel, f.seen.as_ref(), seen)?;
                }
                EntryKind::File => {
                    let source = upper.open_file(&f.rel).map_err(io_err)?;
                    sha256 = Some(write_file_at(&parent, &tmp, source, landed_mode(f))?);
                    put_in_place(&parent, &tmp, name, &f.rel, f.seen.as_ref(), seen)?;
                }
                other @ (EntryKind::Other | EntryKind::Absent) => {
                    return Err(io_err(format!("a {other} cannot be committed")))
                }
            }
        }
    }
    Ok((Landed { sha256, ..landed() }, dir_mode))
}

/// What is at `name` in `parent` now, if anything.
fn stat_at(parent: &OwnedFd, name: &OsStr) -> Result<Option<Seen>, NotLanded> {
    match nix::sys::stat::fstatat(parent, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(Seen::of(&st))),
        Err(Errno::ENOENT) => Ok(None),
        Err(e) => Err(io_err(e.desc())),
    }
}

/// Whether `name` in `parent` is still the entry seen at `rel`.
fn is_seen(parent: &OwnedFd, name: &OsStr, rel: &Path, seen: &SeenMap) -> Result<bool, NotLanded> {
    Ok(stat_at(parent, name)?.is_some_and(|now| seen.get(rel) == Some(&now)))
}

/// Whether the real directory `name` in `parent` (seen at `rel`) holds only entries the
/// listing saw, each still the one it saw, at every depth. An entry it did not see (the
/// host's, newer) makes removing the directory a conflict.
fn listed_below(
    parent: &OwnedFd,
    name: &OsStr,
    rel: &Path,
    seen: &SeenMap,
) -> Result<bool, NotLanded> {
    if !is_seen(parent, name, rel, seen)? {
        return Ok(false);
    }
    let dir = match open_dir_at(parent, name) {
        Ok(d) => d,
        Err(_) => return Ok(false),
    };
    for n in names_at(&dir)? {
        let here = rel.join(&n);
        if !is_seen(&dir, &n, &here, seen)? {
            return Ok(false);
        }
        if seen.get(&here).is_some_and(|s| s.kind == EntryKind::Dir)
            && !listed_below(&dir, &n, &here, seen)?
        {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Removes the real entry `name` in `parent` (seen at `rel`), and for a directory what it
/// holds, each entry checked to be the one the listing saw just before it goes; one that is
/// not stops the removal there, a conflict. Nothing there is no error.
fn remove_listed(
    parent: &OwnedFd,
    name: &OsStr,
    rel: &Path,
    seen: &SeenMap,
) -> Result<(), NotLanded> {
    let Some(now) = stat_at(parent, name)? else {
        return Ok(());
    };
    if seen.get(rel) != Some(&now) {
        return Err(NotLanded::Changed);
    }
    if now.kind != EntryKind::Dir {
        return match nix::unistd::unlinkat(parent, name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(io_err(e.desc())),
        };
    }
    let dir = open_dir_at(parent, name).map_err(|e| io_err(e.desc()))?;
    let st = nix::sys::stat::fstat(&dir).map_err(|e| io_err(e.desc()))?;
    if Seen::of(&st) != now {
        return Err(NotLanded::Changed);
    }
    for n in names_at(&dir)? {
        remove_listed(&dir, &n, &rel.join(&n), seen)?;
    }
    match nix::unistd::unlinkat(parent, name, UnlinkatFlags::RemoveDir) {
        Ok(()) | Err(Errno::ENOENT) => Ok(()),
        Err(Errno::ENOTEMPTY | Errno::EEXIST) => Err(NotLanded::Changed),
        Err(e) => Err(io_err(e.desc())),
    }
}

fn open_dir_at(parent: &OwnedFd, name: &OsStr) -> Result<OwnedFd, Errno> {
    nix::fcntl::openat(
        parent,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

/// The names in the open directory `dir` (no `.` or `..`).
pub(super) fn names_at(dir: &OwnedFd) -> Result<Vec<std::ffi::OsString>, NotLanded> {
    use std::os::unix::ffi::OsStrExt;
    let fd = nix::unistd::dup(dir).map_err(|e| io_err(e.desc()))?;
    let mut d = nix::dir::Dir::from_fd(fd).map_err(|e| io_err(e.desc()))?;
    let mut out = Vec::new();
    for e in d.iter() {
        let e = e.map_err(|e| io_err(e.desc()))?;
        let n = e.file_name().to_bytes();
        if n != b"." && n != b".." {
            out.push(OsStr::from_bytes(n).to_os_string());
        }
    }
    Ok(out)
}

/// Puts what was made at `tmp` in `parent` at `name`, in one step: where the listing saw
/// nothing, only if nothing is there (`RENAME_NOREPLACE`); otherwise exchanged with what is
/// there (`RENAME_EXCHANGE`), which must be the entry seen at `rel` (a directory: with only
/// what the listing saw in it), else it is exchanged back. What it replaced is then removed.
/// On every failure `tmp` is gone and the real entry is as it was.
fn put_in_place(
    parent: &OwnedFd,
    tmp: &OsStr,
    name: &OsStr,
    rel: &Path,
    expect: Option<&Seen>,
    seen: &SeenMap,
) -> Result<(), NotLanded> {
    let drop_tmp = || {
        let _ = remove_at(parent, tmp);
    };
    let failed = |e: NotLanded| {
        drop_tmp();
        Err(e)
    };
    let Some(expect) = expect else {
        return match rename2_at(parent, tmp, name, RenameFlags::NOREPLACE) {
            Ok(()) => Ok(()),
            Err(Errno::EEXIST) => failed(NotLanded::Changed),
            // A file system without the flag (some network and FUSE ones): checked, then
            // renamed, a narrower promise than the flag's.
            Err(Errno::EINVAL) => match stat_at(parent, name) {
                Ok(None) => rename_plain(parent, tmp, name).or_else(failed),
                Ok(Some(_)) => failed(NotLanded::Changed),
                Err(e) => failed(e),
            },
            Err(e) => failed(io_err(e.desc())),
        };
    };
    // Checked before the exchange (a write in place moves the change time), and after it,
    // as far as the exchange's own rename leaves it to be told (the modification time).
    match stat_at(parent, name) {
        Ok(now) if now == Some(*expect) => {}
        Ok(_) => return failed(NotLanded::Changed),
        Err(e) => return failed(e),
    }
    match rename2_at(parent, tmp, name, RenameFlags::EXCHANGE) {
        Ok(()) => {}
        // Gone since it was listed: nothing of the host's is there to replace.
        Err(Errno::ENOENT) => return failed(NotLanded::Changed),
        // No exchange on this file system: what is there is removed as a deletion is (each
        // entry checked), then the new entry renamed in.
        Err(Errno::EINVAL) => {
            if expect.kind == EntryKind::Dir
                && !listed_below(parent, name, rel, seen).unwrap_or(false)
            {
                return failed(NotLanded::Changed);
            }
            if let Err(e) = remove_listed(parent, name, rel, seen) {
                return failed(e);
            }
            return rename_plain(parent, tmp, name).or_else(failed);
        }
        Err(e) => return failed(io_err(e.desc())),
    }
    // The replaced entry is at `tmp` now.
    let kept = match stat_at(parent, tmp) {
        Ok(Some(now)) if expect.moved_to(&now) => {
            now.kind != EntryKind::Dir || listed_below(parent, tmp, rel, seen).unwrap_or(false)
        }
        _ => false,
    };
    if !kept {
        let back = rename2_at(parent, tmp, name, RenameFlags::EXCHANGE);
        if back.is_ok() {
            drop_tmp();
        }
        return Err(match back {
            Ok(()) => NotLanded::Changed,
            Err(e) => io_err(format!(
                "the real entry changed while it was replaced, and could not be put back from {}: {}",
                Path::new(tmp).display(),
                e.desc()
            )),
        });
    }
    let removed = match expect.kind {
        EntryKind::Dir => remove_listed(parent, tmp, rel, seen),
        _ => nix::unistd::unlinkat(parent, tmp, UnlinkatFlags::NoRemoveDir)
            .map_err(|e| io_err(e.desc())),
    };
    if let Err(e) = removed {
        // Changed inside while it went: what is left of it goes back to its name.
        if rename2_at(parent, tmp, name, RenameFlags::EXCHANGE).is_ok() {
            drop_tmp();
        }
        return Err(e);
    }
    Ok(())
}

/// Writes `input`'s bytes to the new file `tmp` in `parent`, synced, for `put_in_place`.
fn write_file_at(
    parent: &OwnedFd,
    tmp: &OsStr,
    mut input: File,
    mode: u32,
) -> Result<String, NotLanded> {
    use sha2::Digest;
    let fd = nix::fcntl::openat(
        parent,
        tmp,
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(mode & 0o777),
    )
    .map_err(|e| io_err(e.desc()))?;
    let mut out = File::from(fd);
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
        out.set_permissions(fs::Permissions::from_mode(mode))?;
        out.sync_all()
    })();
    if let Err(e) = written {
        let _ = nix::unistd::unlinkat(parent, tmp, UnlinkatFlags::NoRemoveDir);
        return Err(io_err(e));
    }
    Ok(hex::encode(hasher.finalize()))
}

/// `renameat(parent, from, parent, to)`.
fn rename_plain(parent: &OwnedFd, from: &OsStr, to: &OsStr) -> Result<(), NotLanded> {
    nix::fcntl::renameat(parent, from, parent, to).map_err(|e| io_err(e.desc()))
}

/// `renameat2(parent, from, parent, to, flags)`. The C library of the musl builds (the e2e
/// suite links this crate through the sandbox crate) may lack the wrapper, and nix offers it
/// only over glibc: rustix makes the system call itself.
pub(super) fn rename2_at(
    parent: &OwnedFd,
    from: &OsStr,
    to: &OsStr,
    flags: RenameFlags,
) -> Result<(), Errno> {
    rustix::fs::renameat_with(parent, from, parent, to, flags)
        .map_err(|e| Errno::from_raw(e.raw_os_error()))
}

/// `renameat2(dir, a, dir, b, RENAME_EXCHANGE)`: `a` and `b` trade places in one step.
pub(super) fn exchange_at(dir: &OwnedFd, a: &OsStr, b: &OsStr) -> io::Result<()> {
    rustix::fs::renameat_with(dir, a, dir, b, RenameFlags::EXCHANGE).map_err(io::Error::from)
}

/// Sets the permission bits of `name` in `parent` to `mode` (a regular file or a directory,
/// opened by name without following a link), when it is the entry `expect` (if given).
pub(super) fn chmod_at(
    parent: &OwnedFd,
    name: &OsStr,
    mode: u32,
    expect: Option<&Seen>,
) -> Result<(), NotLanded> {
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
    // The descriptor holds the inode: the mode goes to the entry checked, whatever the name
    // holds by then.
    if expect.is_some_and(|e| *e != Seen::of(&st)) {
        return Err(NotLanded::Changed);
    }
    // An O_PATH descriptor takes no fchmod; its /proc link names exactly that file.
    let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
    fs::set_permissions(&path, fs::Permissions::from_mode(mode)).map_err(io_err)
}
