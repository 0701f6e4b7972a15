//! A directory tree read and changed by descriptor (docs/design.md#staged-writes-and-owners):
//! a layer's upper directory, which the session's sandboxes write, and the real directory,
//! which the host changes under brokerd. Every path is opened below the tree's top with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, a link in its last component taken as the
//! link: a directory swapped for a link while brokerd reads or writes leads nowhere else.

use std::ffi::{OsStr, OsString};
use std::fs::{File, Metadata};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat, openat2, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{FileStat, Mode, SFlag};
use nix::unistd::{unlinkat, UnlinkatFlags};
use proto::broker::EntryKind;
use sha2::{Digest, Sha256};

/// What an entry is: a file, a directory, a link or something other (never
/// [`EntryKind::Absent`]).
pub fn kind_of_stat(st: &FileStat) -> EntryKind {
    match SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT {
        SFlag::S_IFLNK => EntryKind::Link,
        SFlag::S_IFDIR => EntryKind::Dir,
        SFlag::S_IFREG => EntryKind::File,
        _ => EntryKind::Other,
    }
}

/// Whether an entry is a whiteout as overlayfs makes them: a character device 0/0 (kernel
/// overlayfs, both backends' layers on Linux 5.11 and later).
pub fn is_whiteout_stat(st: &FileStat) -> bool {
    SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFCHR && st.st_rdev == 0
}

/// The extended attributes that make a layer's directory opaque (it hides the real one below
/// it): `user.` with `userxattr`, as both backends mount the layers, and `trusted.` for an
/// overlay mounted by root. Neither can be set through the merged view: overlayfs refuses its
/// own attributes there, and `trusted.` needs the host's root.
const OPAQUE_XATTRS: [&str; 2] = ["user.overlay.opaque", "trusted.overlay.opaque"];

/// One directory tree, held by a descriptor of its top.
#[derive(Debug)]
pub struct Tree {
    top: OwnedFd,
    path: PathBuf,
}

fn errno(e: Errno) -> io::Error {
    io::Error::from(e)
}

impl Tree {
    /// The tree at `path` (canonical), its top opened through no link.
    pub fn open(path: &Path) -> io::Result<Tree> {
        let (top, _) = crate::dirs::open_dir(path).map_err(|t| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("{}: {t:?}", path.display()),
            )
        })?;
        Ok(Tree {
            top,
            path: path.to_path_buf(),
        })
    }

    /// The tree's top, as it was named.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The descriptor of the tree's top.
    pub fn top(&self) -> &OwnedFd {
        &self.top
    }

    /// Opens `rel` below the top with `flags`, no link followed on the way; with `O_PATH |
    /// O_NOFOLLOW` a link in the last component is opened as the link.
    pub fn resolve(&self, rel: &Path, flags: OFlag) -> io::Result<OwnedFd> {
        let rel = if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel
        };
        let how = OpenHow::new().flags(flags | OFlag::O_CLOEXEC).resolve(
            ResolveFlag::RESOLVE_BENEATH
                | ResolveFlag::RESOLVE_NO_SYMLINKS
                | ResolveFlag::RESOLVE_NO_MAGICLINKS,
        );
        match openat2(&self.top, rel, how) {
            Err(Errno::ENOSYS) => self.resolve_by_component(rel, flags),
            other => other.map_err(errno),
        }
    }

    /// `resolve` without openat2 (before Linux 5.6): each component below the last with
    /// `O_NOFOLLOW`; the names are single components (no `..`).
    fn resolve_by_component(&self, rel: &Path, flags: OFlag) -> io::Result<OwnedFd> {
        let names: Vec<&OsStr> = rel
            .components()
            .filter_map(|c| match c {
                Component::Normal(n) => Some(Ok(n)),
                Component::CurDir => None,
                _ => Some(Err(())),
            })
            .collect::<Result<_, _>>()
            .map_err(|()| errno(Errno::EXDEV))?;
        let dir_flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let mut dir = nix::unistd::dup(&self.top).map_err(errno)?;
        let Some((last, way)) = names.split_last() else {
            return openat(&self.top, ".", flags | OFlag::O_CLOEXEC, Mode::empty()).map_err(errno);
        };
        for n in way {
            dir = openat(&dir, *n, dir_flags, Mode::empty()).map_err(|e| match e {
                Errno::ENOTDIR => errno(Errno::ELOOP),
                e => errno(e),
            })?;
        }
        openat(
            &dir,
            *last,
            flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(errno)
    }

    /// The directory `rel`, for `*at` calls.
    pub fn dir(&self, rel: &Path) -> io::Result<OwnedFd> {
        self.resolve(rel, OFlag::O_PATH | OFlag::O_DIRECTORY)
    }

    /// `lstat` of `rel`.
    pub fn stat(&self, rel: &Path) -> io::Result<FileStat> {
        let fd = self.resolve(rel, OFlag::O_PATH | OFlag::O_NOFOLLOW)?;
        nix::sys::stat::fstat(&fd).map_err(errno)
    }

    /// Whether `rel` is a directory, reached through no link (one that cannot be read is
    /// not).
    pub fn is_dir(&self, rel: &Path) -> bool {
        self.stat(rel)
            .is_ok_and(|st| kind_of_stat(&st) == EntryKind::Dir)
    }

    /// `lstat` of `rel`, as the standard library's `Metadata`.
    pub fn metadata(&self, rel: &Path) -> io::Result<Metadata> {
        File::from(self.resolve(rel, OFlag::O_PATH | OFlag::O_NOFOLLOW)?).metadata()
    }

    /// The names in the directory `rel` (no `.` or `..`), sorted.
    pub fn names(&self, rel: &Path) -> io::Result<Vec<OsString>> {
        let fd = self.resolve(rel, OFlag::O_RDONLY | OFlag::O_DIRECTORY)?;
        let mut d = nix::dir::Dir::from_fd(fd).map_err(errno)?;
        let mut out = Vec::new();
        for e in d.iter() {
            let e = e.map_err(errno)?;
            let n = e.file_name().to_bytes();
            if n != b"." && n != b".." {
                out.push(OsStr::from_bytes(n).to_os_string());
            }
        }
        out.sort();
        Ok(out)
    }

    /// The regular file `rel` for reading: no link followed, a FIFO not waited on.
    pub fn open_file(&self, rel: &Path) -> io::Result<File> {
        let fd = self.resolve(
            rel,
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_NOCTTY,
        )?;
        let f = File::from(fd);
        if !f.metadata()?.is_file() {
            return Err(io::Error::other(format!("{} is not a file", rel.display())));
        }
        Ok(f)
    }

    /// The target of the link `rel`.
    pub fn read_link(&self, rel: &Path) -> io::Result<PathBuf> {
        let fd = self.resolve(rel, OFlag::O_PATH | OFlag::O_NOFOLLOW)?;
        nix::fcntl::readlinkat(&fd, "")
            .map(PathBuf::from)
            .map_err(errno)
    }

    /// The SHA-256 of the regular file `rel`, in hex.
    pub fn sha256(&self, rel: &Path) -> io::Result<String> {
        let mut f = self.open_file(rel)?;
        let mut h = Sha256::new();
        io::copy(&mut f, &mut h)?;
        Ok(hex::encode(h.finalize()))
    }

    /// Whether the directory `rel` is opaque (see `OPAQUE_XATTRS`).
    pub fn is_opaque(&self, rel: &Path) -> bool {
        let Ok(fd) = self.resolve(rel, OFlag::O_RDONLY | OFlag::O_DIRECTORY) else {
            return false;
        };
        OPAQUE_XATTRS
            .iter()
            .any(|x| matches!(fd_xattr(&fd, x).as_deref(), Some(b"y")))
    }

    /// Makes the directory `rel` plain: its opaque attributes removed.
    pub fn clear_opaque(&self, rel: &Path) -> io::Result<()> {
        let fd = self.resolve(rel, OFlag::O_RDONLY | OFlag::O_DIRECTORY)?;
        for name in OPAQUE_XATTRS {
            match rustix::fs::fremovexattr(&fd, name) {
                // ENODATA: not set; EPERM: `trusted.` is for root, and then not set by brokerd.
                Ok(()) | Err(rustix::io::Errno::NODATA | rustix::io::Errno::PERM) => {}
                Err(e) => return Err(e.into()),
            }
        }
        if self.is_opaque(rel) {
            return Err(io::Error::other(format!(
                "{}: an opaque directory of the layer brokerd cannot make plain",
                self.path.join(rel).display()
            )));
        }
        Ok(())
    }

    /// The parent directory of `rel` and its last name.
    pub fn parent_of<'a>(&self, rel: &'a Path) -> io::Result<(OwnedFd, &'a OsStr)> {
        let name = rel
            .file_name()
            .ok_or_else(|| io::Error::other("an empty path"))?;
        Ok((self.dir(rel.parent().unwrap_or(Path::new("")))?, name))
    }

    /// Makes a whiteout at `rel` (nothing may be there).
    pub fn whiteout(&self, rel: &Path) -> io::Result<()> {
        let (parent, name) = self.parent_of(rel)?;
        nix::sys::stat::mknodat(&parent, name, SFlag::S_IFCHR, Mode::empty(), 0).map_err(errno)
    }

    /// Removes `rel`: a file, link or whiteout, or a directory with everything in it.
    pub fn remove(&self, rel: &Path) -> io::Result<()> {
        let (parent, name) = self.parent_of(rel)?;
        remove_at(&parent, name).map_err(errno)
    }

    /// Removes `rel` if it is an empty directory, or not a directory.
    pub fn remove_if_empty(&self, rel: &Path) -> io::Result<()> {
        let (parent, name) = self.parent_of(rel)?;
        match unlinkat(&parent, name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(Errno::EISDIR) => match unlinkat(&parent, name, UnlinkatFlags::RemoveDir) {
                Ok(()) | Err(Errno::ENOTEMPTY | Errno::EEXIST | Errno::ENOENT) => Ok(()),
                Err(e) => Err(errno(e)),
            },
            Err(e) => Err(errno(e)),
        }
    }
}

/// Removes `name` in `parent`: a file or link, or a directory with everything in it,
/// following no link. Nothing there is no error.
pub fn remove_at(parent: &impl AsFd, name: &OsStr) -> Result<(), Errno> {
    match unlinkat(parent, name, UnlinkatFlags::NoRemoveDir) {
        Ok(()) | Err(Errno::ENOENT) => return Ok(()),
        Err(Errno::EISDIR) => {}
        Err(e) => return Err(e),
    }
    let dir = openat(
        parent,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let keep = nix::unistd::dup(&dir)?;
    let mut d = nix::dir::Dir::from_fd(dir)?;
    let names: Vec<OsString> = d
        .iter()
        .flatten()
        .map(|e| OsStr::from_bytes(e.file_name().to_bytes()).to_os_string())
        .filter(|n| n.as_bytes() != b"." && n.as_bytes() != b"..")
        .collect();
    for n in names {
        remove_at(&keep, &n)?;
    }
    match unlinkat(parent, name, UnlinkatFlags::RemoveDir) {
        Ok(()) | Err(Errno::ENOENT) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The value of the extended attribute `name` of the open file `fd`, if it is set and no
/// longer than 16 bytes (the opaque marker is one, `y`); `None` for any error.
fn fd_xattr(fd: &OwnedFd, name: &str) -> Option<Vec<u8>> {
    let mut buf = [0u8; 16];
    let n = rustix::fs::fgetxattr(fd, name, &mut buf[..]).ok()?;
    Some(buf[..n.min(buf.len())].to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A link anywhere on the way, or as the last component of a read, leads nowhere: the
    /// tree answers for what is below its top only.
    #[test]
    fn no_link_is_followed() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let base = std::fs::canonicalize(tmp.path()).expect("canonical");
        let (top, outside) = (base.join("top"), base.join("outside"));
        std::fs::create_dir_all(top.join("d")).expect("mkdir");
        std::fs::create_dir_all(&outside).expect("mkdir");
        std::fs::write(outside.join("secret"), "secret").expect("write");
        std::fs::write(top.join("d/f"), "f").expect("write");
        symlink(&outside, top.join("out")).expect("symlink");
        symlink("../outside/secret", top.join("d/up")).expect("symlink");
        let t = Tree::open(&top).expect("open");
        assert_eq!(t.names(Path::new("")).expect("names"), ["d", "out"]);
        assert!(t.open_file(Path::new("out/secret")).is_err());
        assert!(t.open_file(Path::new("d/up")).is_err());
        assert!(t.names(Path::new("out")).is_err());
        assert!(t.stat(Path::new("out/secret")).is_err());
        assert_eq!(
            kind_of_stat(&t.stat(Path::new("out")).expect("lstat")),
            EntryKind::Link
        );
        assert_eq!(
            t.read_link(Path::new("d/up")).expect("link"),
            Path::new("../outside/secret")
        );
        assert!(t.remove(Path::new("out/secret")).is_err());
        assert!(outside.join("secret").exists());
        // Removing a link removes the link, not what it leads to.
        t.remove(Path::new("out")).expect("remove");
        assert!(outside.join("secret").exists());
        assert_eq!(t.sha256(Path::new("d/f")).expect("hash").len(), 64);
    }
}
