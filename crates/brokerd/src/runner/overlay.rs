//! A staged grant directory in a bwrap sandbox (docs/design.md#staged-writes-and-owners):
//! overlayfs, the real directory below and the session's layer above, mounted in a user and
//! mount namespace made for the sandbox between clone and exec, then bound by bwrap from a
//! descriptor as every grant directory is. bwrap 0.8 (Debian 12) has no `--overlay`, and an
//! unprivileged overlay mount needs a user namespace of its own (Linux 5.11, `userxattr`).
//!
//! In the child, in this order: brokerd's staging user namespace (the service user mapped to
//! itself, so the layer's files are the service user's and bwrap runs as it did; made once by
//! `staging_userns`, since brokerd is not dumpable and its vfork child cannot write its own
//! uid_map) and a new mount namespace of it; the mounts made private; then per staged mount one
//! overlay at the layer's `merged` directory, whose
//! descriptor replaces the real directory's at the number bwrap binds. A writable mount's
//! overlay writes into the layer; a read-only mount's has the layer as its top lower layer and
//! no upper, so the kernel refuses every write.
//!
//! overlayfs takes its layers only from the mount namespace it is mounted in, so the child
//! opens them there again, with `openat2(RESOLVE_NO_SYMLINKS)`, and mounts nothing unless the
//! real directory is the one the grant resolved at start (device and inode): a directory
//! swapped for a link or another one in between stops the start. The descriptors go to numbers
//! the parent reserved (so the options, written before the clone, can name them) and are
//! closed once mounted: bwrap inherits none of them.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::fcntl::{fcntl, open, FcntlArg, OFlag};
use nix::sys::stat::Mode;

use super::mounts::{DirId, FIRST_FD};
use super::spawn::PreExec;
use super::Mount;

/// What the child reopens: a path, the number it goes to, and (for the real directory) the
/// identity it must have.
struct Reopen {
    path: CString,
    to: i32,
    expect: Option<DirId>,
}

/// One staged mount, ready for the child: everything it needs, made before the clone.
struct Item {
    /// The descriptor number bwrap binds (the real directory's, then the overlay's).
    slot: i32,
    merged: CString,
    data: CString,
    reopen: Vec<Reopen>,
    /// The numbers the child reopens into, held open (as placeholders) until the start.
    _reserved: Vec<OwnedFd>,
}

/// The staged mounts of a call.
pub struct Overlays {
    items: Vec<Item>,
    /// `staging_userns`'s descriptor.
    userns: i32,
}

/// A user namespace that maps the service user to itself, for the staged sandboxes' mounts:
/// made by a short-lived child (dumpable, unlike brokerd, so that its maps can be written),
/// and kept as a descriptor that each staged sandbox's child joins.
pub fn staging_userns() -> io::Result<OwnedFd> {
    use nix::unistd::{fork, pipe, ForkResult};
    let (ready_r, ready_w) = pipe()?;
    let (go_r, go_w) = pipe()?;
    // SAFETY: the child calls only close, prctl, unshare, write, read and _exit, all
    // async-signal-safe, on descriptors it owns, then exits without returning.
    match unsafe { fork() }? {
        // SAFETY: in the forked child, as above: async-signal-safe calls only, then _exit.
        ForkResult::Child => unsafe {
            // Its copies of the parent's ends: the read below ends when the parent's closes.
            libc::close(go_w.as_raw_fd());
            libc::close(ready_r.as_raw_fd());
            libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0);
            let ok: u8 = u8::from(libc::unshare(libc::CLONE_NEWUSER) == 0);
            libc::write(ready_w.as_raw_fd(), (&ok as *const u8).cast(), 1);
            let mut b = 0u8;
            libc::read(go_r.as_raw_fd(), (&mut b as *mut u8).cast(), 1);
            libc::_exit(0)
        },
        ForkResult::Parent { child } => {
            drop(ready_w);
            drop(go_r);
            let result = (|| -> io::Result<OwnedFd> {
                let mut ok = [0u8];
                let n = nix::unistd::read(&ready_r, &mut ok)?;
                if n != 1 || ok[0] != 1 {
                    return Err(io::Error::other(
                        "the kernel gives no user namespace to the service user",
                    ));
                }
                let (uid, gid) = (nix::unistd::getuid(), nix::unistd::getgid());
                let proc = format!("/proc/{child}");
                std::fs::write(format!("{proc}/setgroups"), "deny")?;
                std::fs::write(format!("{proc}/uid_map"), format!("{uid} {uid} 1\n"))?;
                std::fs::write(format!("{proc}/gid_map"), format!("{gid} {gid} 1\n"))?;
                Ok(open(
                    format!("{proc}/ns/user").as_str(),
                    OFlag::O_RDONLY | OFlag::O_CLOEXEC,
                    Mode::empty(),
                )?)
            })();
            drop(go_w);
            let _ = nix::sys::wait::waitpid(child, None);
            result
        }
    }
}

/// Where, beside a layer's work directory, the boot of its last writable mount is noted.
const VOLATILE_BOOT: &str = "volatile-boot";
/// The kernel's identifier of this boot.
const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

/// Makes a layer's work directory mountable again after its last writable overlay: a
/// `volatile` overlay (which leaves the layer to the kernel's writeback, as every direct write
/// is, instead of syncing the whole file system at each unmount) leaves
/// `work/incompat/volatile` behind, and overlayfs refuses the directory while it is there.
/// The caller holds the layer, so no overlay of it is mounted. When the host has restarted
/// since that mount, its last writes may not have reached the disk: said in the log, as the
/// layer is still the owner's to look at (docs/design.md#staged-writes-and-owners).
fn clear_volatile(work: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let inner = work.join("work");
    let incompat = inner.join("incompat");
    let mark = incompat.join("volatile");
    let noted = work.with_file_name(VOLATILE_BOOT);
    let boot = std::fs::read_to_string(BOOT_ID).unwrap_or_default();
    // overlayfs makes these directories mode 0: their owner opens them up to remove them.
    let open_up = |d: &Path| -> io::Result<bool> {
        match std::fs::symlink_metadata(d) {
            Ok(m) if m.is_dir() => {
                if m.permissions().mode() & 0o700 != 0o700 {
                    std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700))?;
                }
                Ok(true)
            }
            Ok(_) => Err(io::Error::other(format!(
                "{} is not a directory",
                d.display()
            ))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    };
    let before = std::fs::read_to_string(&noted).unwrap_or_default();
    if open_up(&inner)? && open_up(&incompat)? {
        if open_up(&mark)? {
            if before != boot {
                tracing::warn!(
                    layer = %work.display(),
                    "this staged layer was last written before the host restarted: the writes of its last calls may not have reached the disk; its changes show what did"
                );
            }
            for e in std::fs::read_dir(&mark)? {
                std::fs::remove_file(e?.path())?;
            }
            std::fs::remove_dir(&mark)?;
        }
        std::fs::remove_dir(&incompat)?;
    }
    if before != boot {
        std::fs::write(&noted, &boot)?;
    }
    Ok(())
}

fn c_path(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::other("a path holds a NUL byte"))
}

impl Overlays {
    /// The overlays of `mounts` that are staged; `None` when none is. `passed` is how many
    /// descriptors `mounts::pass_to` moves to `FIRST_FD` on: the reserved numbers are above
    /// them, where no move can overwrite them.
    pub fn of(mounts: &[Mount], passed: usize, userns: &OwnedFd) -> io::Result<Option<Overlays>> {
        let above = FIRST_FD
            .checked_add(i32::try_from(passed).map_err(io::Error::other)?)
            .ok_or_else(|| io::Error::other("too many descriptors"))?;
        // A number of brokerd's that nothing else uses until the start.
        let reserve = || -> io::Result<OwnedFd> {
            let fd = open("/", OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty())?;
            let high = fcntl(&fd, FcntlArg::F_DUPFD_CLOEXEC(above))?;
            // SAFETY: the number was just returned by fcntl and is owned by nobody else.
            Ok(unsafe { OwnedFd::from_raw_fd(high) })
        };
        let mut items = Vec::new();
        for (i, m) in mounts.iter().enumerate() {
            let Some(stage) = &m.stage else { continue };
            let slot = FIRST_FD + i32::try_from(i).map_err(io::Error::other)?;
            let (lower, upper) = (reserve()?, reserve()?);
            let mut reopen = vec![
                Reopen {
                    path: c_path(&m.path)?,
                    to: lower.as_raw_fd(),
                    expect: Some(m.id),
                },
                Reopen {
                    path: c_path(&stage.upper)?,
                    to: upper.as_raw_fd(),
                    expect: None,
                },
            ];
            let mut reserved = vec![lower, upper];
            let fd = |n: usize| reserved[n].as_raw_fd();
            let options = if m.write {
                let work = reserve()?;
                reopen.push(Reopen {
                    path: c_path(&stage.work)?,
                    to: work.as_raw_fd(),
                    expect: None,
                });
                clear_volatile(&stage.work)?;
                let o = format!(
                    "lowerdir=/proc/self/fd/{},upperdir=/proc/self/fd/{},workdir=/proc/self/fd/{},userxattr,volatile",
                    fd(0),
                    fd(1),
                    work.as_raw_fd()
                );
                reserved.push(work);
                o
            } else {
                format!(
                    "lowerdir=/proc/self/fd/{}:/proc/self/fd/{},userxattr",
                    fd(1),
                    fd(0)
                )
            };
            items.push(Item {
                slot,
                merged: c_path(&stage.merged)?,
                data: CString::new(options).map_err(io::Error::other)?,
                reopen,
                _reserved: reserved,
            });
        }
        if items.is_empty() {
            return Ok(None);
        }
        Ok(Some(Overlays {
            items,
            userns: userns.as_raw_fd(),
        }))
    }

    /// Adds the hook that makes the namespaces and mounts the overlays; after every hook that
    /// moves the mounts' descriptors (`mounts::pass_to`). Keep `self` until the program started.
    pub fn hook<C: PreExec>(&self, cmd: &mut C) {
        let plan = Plan {
            items: self
                .items
                .iter()
                .map(|i| RawItem {
                    slot: i.slot,
                    merged: i.merged.as_ptr(),
                    data: i.data.as_ptr(),
                    reopen: i
                        .reopen
                        .iter()
                        .map(|r| (r.path.as_ptr(), r.to, r.expect))
                        .collect(),
                })
                .collect(),
            userns: self.userns,
        };
        // SAFETY: the hook calls only setns, unshare, openat2 (syscall), fstat, open, close,
        // mount and dup2, all async-signal-safe, and reads only the strings `self` owns, which
        // the caller keeps alive until the program has started; it allocates nothing.
        unsafe {
            cmd.pre_exec_hook(move || plan.run());
        }
    }
}

/// The raw form of one item: pointers into `Overlays`' strings.
struct RawItem {
    slot: i32,
    merged: *const libc::c_char,
    data: *const libc::c_char,
    reopen: Vec<(*const libc::c_char, i32, Option<DirId>)>,
}

/// The hook's work.
struct Plan {
    items: Vec<RawItem>,
    userns: i32,
}

// SAFETY: the pointers are read-only views of CStrings the spawning thread keeps alive and
// does not touch until the child has exec'd; the hook runs on that thread's behalf only.
unsafe impl Send for Plan {}
// SAFETY: as above; nothing writes through them.
unsafe impl Sync for Plan {}

impl Plan {
    fn run(&self) -> io::Result<()> {
        let check = |r: libc::c_int| {
            if r < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(r)
            }
        };
        // SAFETY: each call gets NUL-terminated strings that outlive it (see `hook`), a
        // stack value or integers; none keeps a pointer.
        unsafe {
            check(libc::setns(self.userns, libc::CLONE_NEWUSER))?;
            check(libc::unshare(libc::CLONE_NEWNS))?;
            check(libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ))?;
            for item in &self.items {
                for &(path, to, expect) in &item.reopen {
                    let mut how: libc::open_how = std::mem::zeroed();
                    how.flags = (libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) as u64;
                    how.resolve = libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
                    let fd = libc::syscall(
                        libc::SYS_openat2,
                        libc::AT_FDCWD,
                        path,
                        &how as *const libc::open_how,
                        std::mem::size_of::<libc::open_how>(),
                    );
                    let fd = check(libc::c_int::try_from(fd).unwrap_or(-1))?;
                    if let Some(want) = expect {
                        let mut st: libc::stat = std::mem::zeroed();
                        let same = libc::fstat(fd, &mut st) == 0
                            && st.st_dev == want.dev
                            && st.st_ino == want.ino;
                        if !same {
                            libc::close(fd);
                            return Err(io::Error::from_raw_os_error(libc::ESTALE));
                        }
                    }
                    let moved = libc::dup2(fd, to);
                    libc::close(fd);
                    check(moved)?;
                }
                let mounted = libc::mount(
                    c"overlay".as_ptr(),
                    item.merged,
                    c"overlay".as_ptr(),
                    0,
                    item.data.cast(),
                );
                // Nothing of the layers' or the real directory's reaches bwrap.
                for &(_, to, _) in &item.reopen {
                    libc::close(to);
                }
                check(mounted)?;
                let fd = check(libc::open(
                    item.merged,
                    libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
                ))?;
                let moved = libc::dup2(fd, item.slot);
                libc::close(fd);
                check(moved)?;
            }
        }
        Ok(())
    }
}
