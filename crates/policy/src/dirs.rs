//! A directory reached without following a symlink, and its identity (device and inode):
//! what grant directories are recorded as at start and checked against before each sandbox
//! mounts them (`runner::mounts`), and what the staged layer's trees are read through.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path};

use nix::errno::Errno;
use nix::fcntl::{openat, openat2, OFlag, OpenHow, ResolveFlag, AT_FDCWD};
use nix::sys::stat::{fstat, Mode};

/// Which directory a path named when brokerd resolved it: its device and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DirId {
    pub dev: u64,
    pub ino: u64,
}

impl DirId {
    fn of(fd: impl AsFd) -> io::Result<DirId> {
        let st = fstat(fd.as_fd())?;
        Ok(DirId {
            dev: st.st_dev,
            ino: st.st_ino,
        })
    }
}

/// A mount source that is not the directory brokerd resolved at start, and what was found
/// there: the model's refusal and the operator's log line, defined in [`proto::sentences`].
pub use proto::sentences::{MountChanged, MountTrouble};

/// Opens `path` (absolute) as a directory with no symlink anywhere on it, for reading its
/// identity and for mounting it by descriptor. The descriptor is `O_PATH` and close-on-exec.
pub fn open_dir(path: &Path) -> Result<(OwnedFd, DirId), MountTrouble> {
    let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let how = OpenHow::new()
        .flags(flags)
        .resolve(ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    let fd = match openat2(AT_FDCWD, path, how) {
        Ok(fd) => fd,
        // Before Linux 5.6 (or under a filter that hides it): one component at a time.
        Err(Errno::ENOSYS) | Err(Errno::EPERM) => open_dir_walk(path)?,
        Err(e) => return Err(trouble(e)),
    };
    let id = DirId::of(&fd).map_err(|_| MountTrouble::Unreadable)?;
    Ok((fd, id))
}

/// `open_dir` without openat2 (before Linux 5.6): each component opened with `O_NOFOLLOW`
/// below the last.
pub fn open_dir_walk(path: &Path) -> Result<OwnedFd, MountTrouble> {
    let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW;
    let mut dir = openat(AT_FDCWD, "/", flags, Mode::empty()).map_err(trouble)?;
    for c in path.components() {
        match c {
            Component::RootDir => {}
            Component::Normal(name) => {
                dir = openat(&dir, name, flags, Mode::empty()).map_err(trouble)?;
            }
            // Grant paths are canonical; anything else is not one.
            _ => return Err(MountTrouble::Gone),
        }
    }
    Ok(dir)
}

fn trouble(e: Errno) -> MountTrouble {
    match e {
        // ELOOP: RESOLVE_NO_SYMLINKS met a link; ENOTDIR: O_NOFOLLOW on a link to a directory.
        Errno::ELOOP => MountTrouble::Symlink,
        Errno::ENOENT | Errno::ENOTDIR => MountTrouble::Gone,
        _ => MountTrouble::Unreadable,
    }
}
