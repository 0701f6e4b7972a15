//! Grant directories as a sandbox mounts them: the same directory that brokerd resolved at
//! start, reached without following a symlink, or nothing runs.
//!
//! Both `podman --volume` and `bwrap --bind` follow links in a mount source. A directory that
//! was renamed away and replaced by a link between two calls would otherwise hand the next
//! sandbox whatever the link points to (`/`, another user's home). The config already
//! refuses a grant directory inside a writable one, which is how a sandbox could do that
//! itself; this is the check for everything else that can change the host between calls.
//! Each mount source is opened with `openat2(RESOLVE_NO_SYMLINKS)` right before its sandbox
//! starts and must be the directory (device and inode) recorded at start. bwrap then mounts
//! the descriptor itself (`--bind-fd`), so no path is looked up again; Podman can only take a
//! path, so its runner checks once more after the container ran (see `runner::podman`).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

use nix::fcntl::{fcntl, FcntlArg};

use super::Mount;
use boxmaker_config::MAX_GRANT_PATHS;

pub use boxmaker_policy::dirs::{open_dir, DirId, MountChanged, MountTrouble};

/// Opens every mount of a call and checks it is the directory of its grant; the descriptors
/// are in the order of `mounts` and stay valid until dropped.
pub fn open_mounts(mounts: &[Mount]) -> Result<Vec<OwnedFd>, MountChanged> {
    mounts
        .iter()
        .map(|m| {
            let changed = |why| MountChanged {
                path: m.path.clone(),
                why,
            };
            let (fd, id) = match open_dir(&m.path) {
                Ok(opened) => opened,
                // A link anywhere on the path, the last component included, is ELOOP with
                // openat2, ENOTDIR with the walk: tell a link from a plain file by lstat.
                Err(MountTrouble::Gone) if is_link_on_path(&m.path) => {
                    return Err(changed(MountTrouble::Symlink))
                }
                Err(t) => return Err(changed(t)),
            };
            if id != m.id {
                return Err(changed(MountTrouble::Replaced));
            }
            Ok(fd)
        })
        .collect()
}

/// Checks the mounts again without keeping anything open (Podman's check after its run).
pub fn check_mounts(mounts: &[Mount]) -> Result<(), MountChanged> {
    open_mounts(mounts).map(drop)
}

fn is_link_on_path(path: &Path) -> bool {
    path.ancestors()
        .any(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink()))
}

/// The order bwrap mounts a call's directories in: a parent before anything inside it, so
/// that a writable parent bound later never covers a read-only child (bwrap binds in argument
/// order; Podman sorts its mounts by itself). Otherwise the grant's order is kept.
pub fn mount_order(mounts: &[Mount]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..mounts.len()).collect();
    order.sort_by_key(|&i| mounts[i].path.components().count());
    order
}

/// The descriptor number the i-th mount of a call has in the sandbox program (bwrap's
/// `--bind-fd FD`): after standard I/O and the seccomp filter's 3. A call's protected
/// targets follow its mounts.
pub const FIRST_FD: i32 = 10;
/// Where the descriptors wait in brokerd, at the least: above every number they are moved
/// to in the child (a grant's directories, at most `config::MAX_GRANT_PATHS`, from
/// `FIRST_FD`), so that moving one never overwrites another.
const PARKED_FROM: i32 = FIRST_FD + MAX_GRANT_PATHS as i32;

/// Hands `fds` (a call's mounts, in `RunSpec` order) to `cmd` as `FIRST_FD`, `FIRST_FD + 1`,
/// ... Register it after every other `pre_exec` hook that moves descriptors (the seccomp
/// filter's). Keep what it returns until the program has started.
pub fn pass_to<C: super::spawn::PreExec>(
    cmd: &mut C,
    fds: Vec<OwnedFd>,
) -> io::Result<Vec<OwnedFd>> {
    // Above every target number (protected targets can take a call past MAX_GRANT_PATHS); past
    // the process's descriptor limit F_DUPFD says so.
    let parked_from = i32::try_from(fds.len())
        .ok()
        .and_then(|n| FIRST_FD.checked_add(n))
        .map_or(i32::MAX, |top| top.max(PARKED_FROM));
    let parked = fds
        .iter()
        .map(|fd| fcntl(fd, FcntlArg::F_DUPFD_CLOEXEC(parked_from)).map_err(io::Error::from))
        .collect::<io::Result<Vec<RawFd>>>()?;
    // SAFETY: each number was just returned by fcntl and is owned by nobody else.
    let parked: Vec<OwnedFd> = parked
        .into_iter()
        .map(|raw| unsafe { OwnedFd::from_raw_fd(raw) })
        .collect();
    let moves: Vec<(RawFd, RawFd)> = parked
        .iter()
        .zip(FIRST_FD..)
        .map(|(fd, n)| (fd.as_raw_fd(), n))
        .collect();
    // SAFETY: the hook calls only dup2, async-signal-safe, on descriptors that stay open in
    // brokerd until the caller drops what this returns; every source is at parked_from or
    // above and every target below it, so no move overwrites a source.
    unsafe {
        cmd.pre_exec_hook(move || {
            for &(from, to) in &moves {
                if libc::dup2(from, to) < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    Ok(parked)
}

#[cfg(test)]
mod tests {
    use super::*;
    use boxmaker_policy::dirs::open_dir_walk;
    use std::os::unix::fs::symlink;
    use std::path::PathBuf;

    fn mount(path: &Path) -> Mount {
        Mount::at(path, false).expect("mount")
    }

    #[test]
    fn the_directory_resolved_at_start_is_accepted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let base = std::fs::canonicalize(dir.path()).expect("canonical");
        let m = mount(&base);
        assert_eq!(
            open_mounts(std::slice::from_ref(&m)).map(|v| v.len()),
            Ok(1)
        );
    }

    /// The ways a grant directory can change between calls, each a refusal that names it.
    #[test]
    fn a_changed_directory_is_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let base = std::fs::canonicalize(dir.path()).expect("canonical");
        let inner = base.join("inner");
        let swap = |what: &str| {
            let _ = std::fs::remove_dir_all(base.join("away"));
            std::fs::rename(&inner, base.join("away")).expect("move away");
            match what {
                "link to /" => symlink("/", &inner).expect("symlink"),
                "link to the same dir" => symlink(base.join("away"), &inner).expect("symlink"),
                "new dir" => std::fs::create_dir(&inner).expect("mkdir"),
                "file" => std::fs::write(&inner, "x").expect("file"),
                "nothing" => {}
                _ => unreachable!(),
            }
        };
        let cases = [
            ("link to /", MountTrouble::Symlink),
            ("link to the same dir", MountTrouble::Symlink),
            ("new dir", MountTrouble::Replaced),
            ("file", MountTrouble::Gone),
            ("nothing", MountTrouble::Gone),
        ];
        for (what, why) in cases {
            let _ = std::fs::remove_file(&inner);
            let _ = std::fs::remove_dir_all(&inner);
            std::fs::create_dir(&inner).expect("mkdir");
            let m = mount(&inner);
            assert!(open_mounts(std::slice::from_ref(&m)).is_ok(), "{what}");
            swap(what);
            let e = open_mounts(std::slice::from_ref(&m)).expect_err(what);
            assert_eq!(e.why, why, "{what}");
            assert_eq!(e.path, inner, "{what}");
            assert!(e.to_string().contains(&*inner.to_string_lossy()), "{e}");
            assert!(check_mounts(std::slice::from_ref(&m)).is_err(), "{what}");
        }
    }

    /// A link on a parent of the directory counts as much as one at its end.
    #[test]
    fn a_link_on_a_parent_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let base = std::fs::canonicalize(dir.path()).expect("canonical");
        std::fs::create_dir_all(base.join("p/child")).expect("mkdir");
        let m = mount(&base.join("p/child"));
        std::fs::rename(base.join("p"), base.join("q")).expect("rename");
        symlink(base.join("q"), base.join("p")).expect("symlink");
        let e = open_mounts(&[m]).expect_err("link on a parent");
        assert_eq!(e.why, MountTrouble::Symlink);
        assert_eq!(
            open_dir_walk(&base.join("p/child")).map(drop),
            Err(MountTrouble::Gone),
            "the walk meets the link as ENOTDIR"
        );
        assert!(open_dir_walk(&base.join("q/child")).is_ok());
    }

    #[test]
    fn parents_are_mounted_before_their_children() {
        let m = |p: &str| Mount {
            path: PathBuf::from(p),
            write: false,
            id: DirId { dev: 0, ino: 0 },
            protect: false,
            stage: None,
        };
        let mounts = [
            m("/srv/p/ro"),
            m("/srv/p"),
            m("/a"),
            m("/srv/q/r/s"),
            m("/srv/q"),
        ];
        let order: Vec<&str> = mount_order(&mounts)
            .into_iter()
            .map(|i| mounts[i].path.to_str().expect("utf-8"))
            .collect();
        assert_eq!(order, ["/a", "/srv/p", "/srv/q", "/srv/p/ro", "/srv/q/r/s"]);
    }
}
