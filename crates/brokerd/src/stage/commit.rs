//! Landing a layer's changes in the real directory, and discarding them
//! (docs/design.md#staged-writes-and-owners).
//!
//! A commit writes nothing through a symbolic link of the real tree: every directory on the
//! way is opened below the real directory with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`,
//! and the last component is handled by name in its parent (`*at` calls, no follow). The layer
//! is read the same way. Files land whole: written beside under a temporary name, synced, then
//! renamed over the old one. Links are written as links. A directory gets its mode once what
//! lands inside it has landed. Setuid and setgid bits stay in the layer. A path whose real file
//! changed since the session first staged it is a conflict (`conflict`), and is left in the
//! layer; so is one whose way in the real tree is now a link.
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
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::Mode;
use nix::unistd::UnlinkatFlags;
use proto::broker::{ChangeKind, EntryKind};

use super::changes::{self, landed_mode, Found, Seen};
use super::conflict::Conflicts;
use super::tree::{is_whiteout_stat, kind_of_stat, remove_at, Tree};
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

/// Why a discard could not be done as asked.
#[derive(Debug, thiserror::Error)]
pub enum DiscardError {
    /// A real entry below a directory the session replaced with a file or link: it cannot be
    /// kept alone.
    #[error("it lies under a directory this session replaced with a file or link")]
    Replaced { rel: PathBuf, root: PathBuf },
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// What landed: the change and, for a file, the hash of what was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Landed {
    pub rel: PathBuf,
    pub kind: ChangeKind,
    pub sha256: Option<String>,
}

fn io_err(e: impl std::fmt::Display) -> NotLanded {
    NotLanded::Io(e.to_string())
}

fn not_landed(rel: &Path, e: &io::Error) -> NotLanded {
    match e.raw_os_error() {
        Some(libc::ELOOP | libc::EXDEV) => NotLanded::Symlink,
        _ => NotLanded::Io(format!("{}: {e}", rel.display())),
    }
}

/// The real entries a commit's listing saw, by path: what it may remove or replace.
type SeenMap = BTreeMap<PathBuf, Seen>;

/// A directory a commit made or changes the mode of, for its mode once its children landed:
/// its path, the mode, and the entry it must still be.
struct DirMode {
    rel: PathBuf,
    mode: u32,
    seen: Option<Seen>,
}

/// Lands one change in the real tree `root`, reading the layer `upper`, on the view `seen`:
/// what it removes or replaces must still be the entry the listing saw, each entry checked as
/// it goes. A directory's mode is returned for the caller to set once the directory's children
/// have landed.
fn land(
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
fn names_at(dir: &OwnedFd) -> Result<Vec<std::ffi::OsString>, NotLanded> {
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
        return match rename2_at(parent, tmp, name, libc::RENAME_NOREPLACE) {
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
    match rename2_at(parent, tmp, name, libc::RENAME_EXCHANGE) {
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
        let back = rename2_at(parent, tmp, name, libc::RENAME_EXCHANGE);
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
        if rename2_at(parent, tmp, name, libc::RENAME_EXCHANGE).is_ok() {
            drop_tmp();
        }
        return Err(e);
    }
    Ok(())
}

/// The prefix of every temporary name a commit makes beside what it lands.
const TEMP_PREFIX: &str = ".boxmaker-commit-";
/// A layer's note that a commit is landing, naming its temporary names (`Journal`).
const PENDING: &str = "commit.pending";

/// A temporary name beside `name` in the layer itself (brokerd's own state, not the owner's
/// directory: no note is needed to tidy after it).
fn temp_name(name: &OsStr) -> std::ffi::OsString {
    Journal { id: String::new() }.temp_name(name)
}

/// The temporary names of one commit: `.boxmaker-commit-<id>-<random>-<name>`, the id noted
/// (synced) in the layer's `commit.pending` before any is made and removed once the last
/// is gone; a commit killed midway leaves the note, and `finish_interrupted` tidies after it.
struct Journal {
    id: String,
}

impl Journal {
    fn begin(layer: &Layer) -> io::Result<Journal> {
        let mut rand = [0u8; 6];
        getrandom::fill(&mut rand).map_err(|e| io::Error::other(e.to_string()))?;
        let id = hex::encode(rand);
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(layer.dir.join(PENDING))?;
        f.write_all(id.as_bytes())?;
        f.sync_all()?;
        File::open(&layer.dir)?.sync_all()?;
        Ok(Journal { id })
    }

    fn prefix(&self) -> String {
        format!("{TEMP_PREFIX}{}-", self.id)
    }

    fn temp_name(&self, name: &OsStr) -> std::ffi::OsString {
        let mut rand = [0u8; 6];
        let _ = getrandom::fill(&mut rand);
        let mut t = std::ffi::OsString::from(self.prefix());
        t.push(hex::encode(rand));
        t.push("-");
        t.push(name);
        t
    }

    /// Every temporary name is gone: the note goes.
    fn end(layer: &Layer) -> io::Result<()> {
        match fs::remove_file(layer.dir.join(PENDING)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

/// Tidies after a commit of `layer` killed midway (its `commit.pending` left): in the real
/// directory of each entry of the layer, each temporary name of that commit goes. At most one
/// change was landing: its temporary entry is the commit's own (removed), unless it was
/// already exchanged with the real entry, which is then put back (the real entry at the name
/// being the layer's). Either way that entry is as it was before the commit, and its change
/// stays in the layer for the next one. Called before a layer is committed or discarded, and
/// at brokerd's start (`Stage::finish_interrupted`).
pub fn finish_interrupted(layer: &Layer) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let id = match fs::read_to_string(layer.dir.join(PENDING)) {
        Ok(id) => id,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let prefix = Journal {
        id: id.trim().to_string(),
    }
    .prefix();
    let (Some(upper), Some(real)) = changes::trees(&layer.upper, &layer.real)? else {
        return Journal::end(layer);
    };
    let mut dirs: std::collections::BTreeSet<PathBuf> = std::collections::BTreeSet::new();
    dirs.insert(PathBuf::new());
    for e in changes::entries(&upper, Some(&real))? {
        dirs.insert(e.rel.parent().unwrap_or(Path::new("")).to_path_buf());
    }
    for d in dirs {
        let Ok(dir) = real.dir(&d) else { continue };
        let Ok(dir) = nix::fcntl::openat(
            &dir,
            ".",
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        ) else {
            continue;
        };
        let names = names_at(&dir).map_err(io::Error::other)?;
        for tmp in names {
            let Some(rest) = tmp.as_bytes().strip_prefix(prefix.as_bytes()) else {
                continue;
            };
            // `<random>-<name>`
            let Some(dash) = rest.iter().position(|&b| b == b'-') else {
                continue;
            };
            let name = OsStr::from_bytes(&rest[dash + 1..]);
            if is_layers(&real, &upper, &d.join(name)) {
                rename2_at(&dir, &tmp, name, libc::RENAME_EXCHANGE).map_err(io::Error::from)?;
            }
            remove_at(&dir, &tmp).map_err(io::Error::from)?;
        }
    }
    Journal::end(layer)
}

/// Whether the real entry at `rel` is the layer's (what a commit put there): of its type, and
/// a file of its content, a link of its target.
fn is_layers(real: &Tree, upper: &Tree, rel: &Path) -> bool {
    let (Ok(r), Ok(u)) = (real.stat(rel), upper.stat(rel)) else {
        return false;
    };
    match (kind_of_stat(&r), kind_of_stat(&u)) {
        (EntryKind::File, EntryKind::File) => real
            .sha256(rel)
            .ok()
            .is_some_and(|h| upper.sha256(rel).ok() == Some(h)),
        (EntryKind::Link, EntryKind::Link) => real
            .read_link(rel)
            .ok()
            .is_some_and(|t| upper.read_link(rel).ok() == Some(t)),
        (EntryKind::Dir, EntryKind::Dir) => true,
        _ => false,
    }
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

/// `renameat2(parent, from, parent, to, flags)`, through the system call itself (see
/// `exchange_at`).
fn rename2_at(
    parent: &OwnedFd,
    from: &OsStr,
    to: &OsStr,
    flags: libc::c_uint,
) -> Result<(), Errno> {
    use std::os::unix::ffi::OsStrExt;
    let from = std::ffi::CString::new(from.as_bytes()).map_err(|_| Errno::EINVAL)?;
    let to = std::ffi::CString::new(to.as_bytes()).map_err(|_| Errno::EINVAL)?;
    // SAFETY: both names are NUL-terminated strings that outlive the call, and `parent` is an
    // open descriptor; the kernel reads nothing else.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            parent.as_raw_fd(),
            from.as_ptr(),
            parent.as_raw_fd(),
            to.as_ptr(),
            flags,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(Errno::last())
    }
}

/// Sets the permission bits of `name` in `parent` to `mode` (a regular file or a directory,
/// opened by name without following a link), when it is the entry `expect` (if given).
fn chmod_at(
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

/// Readies a layer for a commit or a discard: a commit of it killed midway tidied after
/// (`finish_interrupted`), every opaque directory made plain
/// (`normalize_opaque`), and what its calls changed recorded (a crash may have left some of it
/// unrecorded).
pub fn prepare_layer(stage: &super::Stage, layer: &Layer) -> io::Result<()> {
    finish_interrupted(layer)?;
    normalize_opaque(layer)?;
    stage.record_first(layer)
}

/// Throws the selected changes of `layer` away (after `prepare_layer`): the real directory
/// keeps what it has. A real entry that a deletion of its directory removes can be kept alone:
/// the deletion is split (`split`), the rest of the directory staying deleted.
pub fn discard(layer: &Layer, named: Option<&[PathBuf]>) -> Result<Vec<Found>, DiscardError> {
    let upper = Tree::open(&layer.upper)?;
    let real = Tree::open(&layer.real).ok();
    let mut found = changes::changes_in(&upper, real.as_ref())?.found;
    let asked: Vec<Found> = select(&found, named).into_iter().cloned().collect();
    // At most one split per chosen path; a split throws away the deletion it keeps a path of.
    for _ in 0..=asked.len() {
        let chosen = select(&found, named);
        let alone = chosen.iter().find_map(|f| {
            let root = f.under.as_ref()?;
            (!chosen.iter().any(|c| c.rel == *root)).then(|| (f.rel.clone(), root.clone()))
        });
        let Some((rel, root)) = alone else { break };
        let is_whiteout = upper.stat(&root).is_ok_and(|st| is_whiteout_stat(&st));
        match (&real, is_whiteout) {
            (Some(real), true) => split(&upper, real, &root, &rel)?,
            _ => return Err(DiscardError::Replaced { rel, root }),
        }
        found = changes::changes_in(&upper, real.as_ref())?.found;
    }
    for f in select(&found, named).iter().rev() {
        drop_from_layer(&upper, f, true)?;
    }
    Meta::update(
        layer,
        || None,
        |meta| {
            for f in &asked {
                meta.forget(&f.rel, true);
            }
            Ok((!asked.is_empty(), ()))
        },
    )?;
    Ok(asked)
}

/// Turns the whiteout at `root` (over a real directory) into directories that keep `keep`: on
/// the way from `root` to `keep`, each directory is in the layer with the real one's mode and a
/// whiteout for every real entry but the next on the way, and `keep` shows through. Built
/// beside under a temporary name and exchanged with the whiteout in one step.
fn split(upper: &Tree, real: &Tree, root: &Path, keep: &Path) -> io::Result<()> {
    let (parent, name) = upper.parent_of(root)?;
    let tmp_name = temp_name(name);
    let tmp = root.with_file_name(&tmp_name);
    let mut dirs = Vec::new();
    let (mut at_real, mut at_tmp) = (root.to_path_buf(), tmp.clone());
    let on_the_way: Vec<_> = keep
        .strip_prefix(root)
        .map_err(io::Error::other)?
        .components()
        .collect();
    for (i, c) in on_the_way.iter().enumerate() {
        nix::sys::stat::mkdirat(
            &upper.dir(at_tmp.parent().unwrap_or(Path::new("")))?,
            at_tmp.file_name().unwrap_or_default(),
            Mode::S_IRWXU,
        )
        .map_err(io::Error::from)?;
        dirs.push((at_tmp.clone(), real.stat(&at_real)?.st_mode));
        for n in real.names(&at_real)? {
            if n.as_os_str() != c.as_os_str() {
                upper.whiteout(&at_tmp.join(&n))?;
            }
        }
        if i + 1 < on_the_way.len() {
            at_real.push(c);
            at_tmp.push(c);
        }
    }
    for (d, mode) in dirs.iter().rev() {
        let (p, n) = upper.parent_of(d)?;
        chmod_at(&p, n, mode & 0o7777, None).map_err(io::Error::other)?;
    }
    exchange_at(&parent, name, tmp_name.as_os_str())?;
    upper.remove(&tmp)
}

/// `renameat2(dir, a, dir, b, RENAME_EXCHANGE)`: `a` and `b` trade places in one step. Through
/// the system call itself, since the C library of the musl builds (the e2e suite links brokerd)
/// may lack the wrapper, and nix offers it only over glibc.
fn exchange_at(dir: &OwnedFd, a: &OsStr, b: &OsStr) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let a = std::ffi::CString::new(a.as_bytes()).map_err(io::Error::other)?;
    let b = std::ffi::CString::new(b.as_bytes()).map_err(io::Error::other)?;
    // SAFETY: both names are NUL-terminated strings that outlive the call, and `dir` is an open
    // descriptor; the kernel reads nothing else.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            dir.as_raw_fd(),
            a.as_ptr(),
            dir.as_raw_fd(),
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
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

#[cfg(test)]
#[path = "commit_tests.rs"]
pub(crate) mod tests;
