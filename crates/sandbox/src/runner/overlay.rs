//! A staged grant directory in a bwrap sandbox (docs/design.md#staged-writes-and-owners):
//! overlayfs, the real directory below and the session's layer above, mounted in brokerd's
//! staging namespaces between clone and exec, then bound by bwrap from a descriptor as every
//! grant directory is. bwrap 0.8 (Debian 12) has no `--overlay`, and an unprivileged overlay
//! mount needs a user namespace of its own (Linux 5.11, `userxattr`).
//!
//! In the child, in this order: brokerd's staging user namespace (the service user mapped to
//! itself, so the layer's files are the service user's and bwrap runs as it did) and the mount
//! namespace it owns, both made once by [`Staging::new`] (brokerd is not dumpable, so its vfork
//! child cannot write its own uid_map); then per staged mount, whatever an earlier call left
//! mounted at the layer's `merged` directory detached, and one overlay mounted there, whose
//! descriptor replaces the real directory's at the number bwrap binds. A writable mount's
//! overlay writes into the layer; a read-only mount's has the layer as its top lower layer and
//! no upper, so the kernel refuses every write. Once the sandbox is gone, [`Overlays`]' drop
//! unmounts them and mounts a fresh overlay of each writable one for the layer's next call
//! ([`Ready`]), which that call's child takes if it is still the one made: no overlay serves two
//! calls, so each sees the real directory as it is then (overlayfs keeps what it has looked
//! up), and a call does not wait for its mount.
//!
//! overlayfs takes its layers only from the mount namespace it is mounted in, so the child
//! opens them there again, with `openat2(RESOLVE_NO_SYMLINKS)`, and mounts nothing unless the
//! real directory is the one the grant resolved at start (device and inode): a directory
//! swapped for a link or another one in between stops the start. The descriptors go to numbers
//! the parent reserved (so the options, written before the clone, can name them) and are
//! closed once mounted: bwrap inherits none of them.
//!
//! The staging namespaces are made at the first staged call and kept as descriptors. Their mount
//! namespace is a copy of the host's taken then, its mounts slaves of the host's (a mount made or
//! removed on the host reaches it, nothing mounted in it reaches the host), so joining it costs a
//! staged call no copy of the host's mount table and no teardown of one.
//!
//! An overlay that has served a call is never kept: overlayfs keeps what it has looked up, so a
//! file the host replaced meanwhile (as an editor saves: a new file renamed over the old) would
//! read as it was, and the next call's change to it would be recorded against the new file,
//! hiding a conflict. The next call's child takes the ready overlay only when it is still mounted
//! over the same upper and work directories (its root's device and inode, theirs); otherwise, or
//! for a read-only call, it detaches it and mounts its own. A ready overlay no call has taken
//! within [`READY_KEEP`] (60 s) is unmounted by the `staged-expiry` thread, whether or not
//! another call comes; all go with the namespaces when brokerd exits. An overlay that could not
//! be unmounted is logged, and detached (never used) by its layer's next call.
//!
//! A writing call's overlay is `volatile`: its unmount leaves the layer's files to the kernel's
//! writeback, as every direct write is, instead of syncing the whole file system that holds
//! brokerd's state at the end of each call (a wait that grows with whatever else writes to that
//! disk). overlayfs marks such a work directory (`work/work/incompat/volatile`) and refuses it
//! until the mark is gone: it is removed after the unmount, before the layer's next overlay is
//! mounted (and checked again before a call mounts one), with the layer held. The boot is noted
//! in `volatile-boot` beside `work/bwrap`; when the host restarted in between, the log says that
//! the last calls' writes may not all have reached the disk.

use std::collections::HashMap;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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
    /// The numbers the child reopens into, held open (as placeholders) until the call's
    /// overlays are unmounted and the next call's mounted (whose child reopens into them too).
    _reserved: Vec<OwnedFd>,
    /// A writable overlay, and its layer's work directory (readied again after it).
    write: bool,
    work: PathBuf,
    /// The merged directory, as the ready overlays are known by.
    key: PathBuf,
    /// The overlay mounted for this call after the layer's last, when there is one.
    ready: Option<Ready>,
}

/// The staged mounts of a call. Dropped once its sandbox is gone (or did not start), it
/// unmounts them from the staging mount namespace.
pub struct Overlays {
    items: Vec<Item>,
    /// Copies of [`Staging`]'s descriptors at numbers above those the earlier hooks move
    /// descriptors to (the child's hook would find another file at a low one).
    userns: OwnedFd,
    mntns: OwnedFd,
    waiting: Arc<Waiting>,
}

/// brokerd's staging namespaces, made once, at the first staged call: a user namespace that
/// maps the service user to itself, and a mount namespace it owns, a copy of the host's taken
/// then, whose mounts are slaves of the host's (a mount made or removed on the host reaches it;
/// nothing made in it reaches the host). Each staged sandbox's child joins both and mounts its
/// overlays there, so no call copies the host's mount table or tears a copy down; the overlays
/// are unmounted once their sandbox is gone ([`Overlays`]' drop), and a thread of its own
/// unmounts each overlay mounted for a layer's next call that no call took within its time
/// ([`READY_KEEP`]). Dropped, it stops that thread; the overlays go with the namespace.
pub struct Staging {
    userns: OwnedFd,
    mntns: OwnedFd,
    waiting: Arc<Waiting>,
    expiry: Option<JoinHandle<()>>,
}

/// The writable overlays mounted for their layers' next calls, by merged directory, and how
/// long one waits for its call. Whoever removes an entry owns that overlay: a call's
/// [`Overlays::of`] (which takes it or mounts over it) or the expiry (which unmounts it while it
/// holds the lock, so that no call's own mount at that place is unmounted instead).
struct Waiting {
    state: Mutex<Pending>,
    /// Told of each overlay added, and of the end.
    wake: Condvar,
    keep: Duration,
}

#[derive(Default)]
struct Pending {
    ready: HashMap<PathBuf, Ready>,
    closed: bool,
}

impl Waiting {
    fn add(&self, key: PathBuf, ready: Ready) {
        lock(&self.state).ready.insert(key, ready);
        self.wake.notify_all();
    }

    fn take(&self, key: &Path) -> Option<Ready> {
        lock(&self.state).ready.remove(key)
    }

    /// The expiry's thread: until the staging namespaces are dropped, unmounts each ready
    /// overlay once it has waited `keep`, waking at the first one due or when one is added.
    fn expire_until_closed(&self, userns: &OwnedFd, mntns: &OwnedFd) {
        let mut state = lock(&self.state);
        while !state.closed {
            let now = Instant::now();
            // None: a time too far to be told (never due).
            let due = |r: &Ready| r.at.checked_add(self.keep);
            let is_due = |r: &Ready| due(r).is_some_and(|at| at <= now);
            let old: Vec<CString> = state
                .ready
                .iter()
                .filter(|(_, r)| is_due(r))
                .filter_map(|(k, _)| c_path(k).ok())
                .collect();
            if !old.is_empty() {
                state.ready.retain(|_, r| !is_due(r));
                unmount_detached(&old, userns.as_raw_fd(), mntns.as_raw_fd());
            }
            let next = state.ready.values().filter_map(due).min();
            state = match next {
                Some(at) => {
                    let wait = at.saturating_duration_since(Instant::now());
                    self.wake
                        .wait_timeout(state, wait)
                        .unwrap_or_else(|p| p.into_inner())
                        .0
                }
                None => self.wake.wait(state).unwrap_or_else(|p| p.into_inner()),
            };
        }
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        lock(&self.waiting.state).closed = true;
        self.waiting.wake.notify_all();
        if let Some(t) = self.expiry.take() {
            let _ = t.join();
        }
    }
}

impl Staging {
    /// Made by a short-lived child (dumpable, unlike brokerd, so that its maps can be written),
    /// and kept as the two descriptors every staged sandbox's child joins; a ready overlay no
    /// call takes is unmounted after `keep` ([`READY_KEEP`] in brokerd).
    pub fn new(keep: Duration) -> io::Result<Staging> {
        use nix::unistd::{fork, pipe2, ForkResult};
        // Close-on-exec, so that no program brokerd starts meanwhile holds them; and the child
        // is let go by bytes, not by the end of the pipe, which another fork of brokerd's
        // could hold open.
        let (ready_r, ready_w) = pipe2(OFlag::O_CLOEXEC)?;
        let (go_r, go_w) = pipe2(OFlag::O_CLOEXEC)?;
        // SAFETY: the child calls only close, prctl, unshare, mount, write, read and _exit,
        // all async-signal-safe, on descriptors it owns, then exits without returning.
        match unsafe { fork() }? {
            // SAFETY: in the forked child, as above: async-signal-safe calls only, then _exit.
            ForkResult::Child => unsafe {
                // Its copies of the parent's ends.
                libc::close(go_w.as_raw_fd());
                libc::close(ready_r.as_raw_fd());
                libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0);
                let ok: u8 = u8::from(libc::unshare(libc::CLONE_NEWUSER) == 0);
                libc::write(ready_w.as_raw_fd(), (&ok as *const u8).cast(), 1);
                // The parent has written the maps: the mount namespace, owned by the new user
                // namespace, its copied mounts made slaves.
                let mut b = 0u8;
                libc::read(go_r.as_raw_fd(), (&mut b as *mut u8).cast(), 1);
                let ok: u8 = u8::from(
                    libc::unshare(libc::CLONE_NEWNS) == 0
                        && libc::mount(
                            std::ptr::null(),
                            c"/".as_ptr(),
                            std::ptr::null(),
                            libc::MS_REC | libc::MS_SLAVE,
                            std::ptr::null(),
                        ) == 0,
                );
                libc::write(ready_w.as_raw_fd(), (&ok as *const u8).cast(), 1);
                libc::read(go_r.as_raw_fd(), (&mut b as *mut u8).cast(), 1);
                libc::_exit(0)
            },
            ForkResult::Parent { child } => {
                drop(ready_w);
                drop(go_r);
                let mut sent = 0;
                let result = (|| -> io::Result<Staging> {
                    let step = |why: &str| -> io::Result<()> {
                        let mut ok = [0u8];
                        let n = nix::unistd::read(&ready_r, &mut ok)?;
                        if n != 1 || ok[0] != 1 {
                            return Err(io::Error::other(why.to_string()));
                        }
                        Ok(())
                    };
                    step("the kernel gives no user namespace to the service user")?;
                    let (uid, gid) = (nix::unistd::getuid(), nix::unistd::getgid());
                    let proc = format!("/proc/{child}");
                    std::fs::write(format!("{proc}/setgroups"), "deny")?;
                    std::fs::write(format!("{proc}/uid_map"), format!("{uid} {uid} 1\n"))?;
                    std::fs::write(format!("{proc}/gid_map"), format!("{gid} {gid} 1\n"))?;
                    nix::unistd::write(&go_w, &[1])?;
                    sent = 1;
                    step("the kernel gives the staging user namespace no mount namespace")?;
                    let ns = |kind: &str| {
                        open(
                            format!("{proc}/ns/{kind}").as_str(),
                            OFlag::O_RDONLY | OFlag::O_CLOEXEC,
                            Mode::empty(),
                        )
                    };
                    let (userns, mntns) = (ns("user")?, ns("mnt")?);
                    let waiting = Arc::new(Waiting {
                        state: Mutex::default(),
                        wake: Condvar::new(),
                        keep,
                    });
                    let expiry = {
                        let (userns, mntns) = (userns.try_clone()?, mntns.try_clone()?);
                        let waiting = waiting.clone();
                        std::thread::Builder::new()
                            .name("staged-expiry".into())
                            .spawn(move || waiting.expire_until_closed(&userns, &mntns))?
                    };
                    Ok(Staging {
                        userns,
                        mntns,
                        waiting,
                        expiry: Some(expiry),
                    })
                })();
                // The child's two reads: both answered, whatever happened.
                let _ = nix::unistd::write(&go_w, &[1, 1][sent..]);
                drop(go_w);
                let _ = nix::sys::wait::waitpid(child, None);
                result
            }
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
    pub fn of(mounts: &[Mount], passed: usize, staging: &Staging) -> io::Result<Option<Overlays>> {
        let above = FIRST_FD
            .checked_add(i32::try_from(passed).map_err(io::Error::other)?)
            .ok_or_else(|| io::Error::other("too many descriptors"))?;
        // A copy of `fd` at a number no earlier hook moves a descriptor to.
        let high = |fd: &OwnedFd| -> io::Result<OwnedFd> {
            let high = fcntl(fd, FcntlArg::F_DUPFD_CLOEXEC(above))?;
            // SAFETY: the number was just returned by fcntl and is owned by nobody else.
            Ok(unsafe { OwnedFd::from_raw_fd(high) })
        };
        // A number of brokerd's that nothing else uses until the start.
        let reserve = || -> io::Result<OwnedFd> {
            high(&open("/", OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty())?)
        };
        let mut items = Vec::new();
        for (i, m) in mounts.iter().enumerate() {
            let Some(stage) = &m.stage else { continue };
            // Taken by this call whatever it is: a read-only one mounts its own over it, and so
            // does a call whose layer's directories are not those it was mounted over (its
            // child checks again, and the overlay's root, where the layer is only there).
            let same = |p: &Path, id: DirId| {
                std::fs::symlink_metadata(p).is_ok_and(|md| {
                    use std::os::unix::fs::MetadataExt;
                    md.dev() == id.dev && md.ino() == id.ino
                })
            };
            let ready = staging
                .waiting
                .take(&stage.merged)
                .filter(|r| m.write && same(&stage.upper, r.upper) && same(&stage.work, r.work));
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
                // A ready overlay is mounted, its mark in place.
                if ready.is_none() {
                    clear_volatile(&stage.work)?;
                }
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
                write: m.write,
                work: stage.work.clone(),
                key: stage.merged.clone(),
                ready,
            });
        }
        if items.is_empty() {
            return Ok(None);
        }
        Ok(Some(Overlays {
            items,
            userns: high(&staging.userns)?,
            mntns: high(&staging.mntns)?,
            waiting: staging.waiting.clone(),
        }))
    }

    /// The raw form of the items, for a child.
    fn plan(&self) -> Plan {
        Plan {
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
                    ready: i.ready,
                })
                .collect(),
            userns: self.userns.as_raw_fd(),
            mntns: self.mntns.as_raw_fd(),
        }
    }

    /// Adds the hook that joins the staging namespaces and mounts the overlays; after every
    /// hook that moves the mounts' descriptors (`mounts::pass_to`). Keep `self` until the
    /// sandbox is gone: its drop unmounts them.
    pub fn hook<C: PreExec>(&self, cmd: &mut C) {
        let plan = self.plan();
        // SAFETY: the hook calls only setns, umount2, openat2 (syscall), fstat, open, close,
        // mount and dup2, all async-signal-safe, and reads only the strings `self` owns, which
        // the caller keeps alive until the program has started; it allocates nothing.
        unsafe {
            cmd.pre_exec_hook(move || plan.run());
        }
    }

    /// In a child of brokerd's own: joins the staging namespaces and runs `work`.
    fn in_staging(&self, work: &mut dyn FnMut() -> io::Result<()>) -> io::Result<()> {
        in_staging(self.userns.as_raw_fd(), self.mntns.as_raw_fd(), work)
    }

    /// Once the call's sandbox is gone: its overlays unmounted, then each writable one's work
    /// directory made mountable again and a fresh overlay of it mounted for the session's next
    /// call ([`Ready`]). A failure is logged; the next call's child detaches what is left
    /// before it mounts its own.
    fn after(&mut self) -> io::Result<()> {
        let merged: Vec<*const libc::c_char> =
            self.items.iter().map(|i| i.merged.as_ptr()).collect();
        // SAFETY: umount2 on C strings `self` owns; async-signal-safe.
        self.in_staging(&mut || unsafe {
            for &m in &merged {
                if libc::umount2(m, libc::UMOUNT_NOFOLLOW) < 0 {
                    let e = io::Error::last_os_error();
                    // Not mounted: the call's child stopped before its mount.
                    if e.raw_os_error() != Some(libc::EINVAL) {
                        return Err(e);
                    }
                }
            }
            Ok(())
        })?;
        let mut plan = self.plan();
        for raw in &mut plan.items {
            raw.slot = -1;
        }
        for (item, raw) in self.items.iter().zip(&plan.items) {
            if !item.write {
                continue;
            }
            clear_volatile(&item.work)?;
            let mut made: Option<Ready> = None;
            // SAFETY: `mount_item`'s calls (see `Plan::run`), and a write of a local.
            self.in_staging(&mut || unsafe {
                made = Some(mount_item(raw, None)?);
                Ok(())
            })?;
            if let Some(r) = made {
                self.waiting.add(item.key.clone(), r);
            }
        }
        Ok(())
    }
}

impl Drop for Overlays {
    fn drop(&mut self) {
        if let Err(e) = self.after() {
            tracing::warn!("unmounting a call's staged layers, or mounting them again for the next call, failed: {e}");
        }
    }
}

/// Detaches the overlays mounted at `merged` in the staging namespaces (those no call took).
fn unmount_detached(merged: &[CString], userns: i32, mntns: i32) {
    // SAFETY: umount2 on C strings that outlive the child; async-signal-safe.
    let unmounted = in_staging(userns, mntns, &mut || unsafe {
        for m in merged {
            libc::umount2(m.as_ptr(), libc::MNT_DETACH | libc::UMOUNT_NOFOLLOW);
        }
        Ok(())
    });
    if let Err(e) = unmounted {
        tracing::warn!("unmounting staged layers no call took failed: {e}");
    }
}

/// In a child of brokerd's own: joins the staging namespaces (`userns`, `mntns`) and runs
/// `work`, which keeps the hooks' contract (its callers say how).
fn in_staging(userns: i32, mntns: i32, work: &mut dyn FnMut() -> io::Result<()>) -> io::Result<()> {
    let mut joined = || -> io::Result<()> {
        // SAFETY: setns on descriptors that outlive the child; async-signal-safe.
        unsafe {
            check(libc::setns(userns, libc::CLONE_NEWUSER))?;
            check(libc::setns(mntns, libc::CLONE_NEWNS))?;
        }
        work()
    };
    // SAFETY: `joined` makes only setns and `work`'s calls.
    unsafe { super::spawn::run_in_child(&mut joined) }
}

/// A writable overlay mounted after its call for its layer's next one, and untouched since:
/// the identity of its root (the overlay's own device) and of the layer's upper and work
/// directories it was mounted on, and when. Nothing looks up a path through it before that
/// call, so it shows the real directory as it is when the call looks, as a mount made then
/// would (overlayfs keeps what it has looked up, which is why no overlay serves two calls).
#[derive(Debug, Clone, Copy)]
struct Ready {
    root: DirId,
    upper: DirId,
    work: DirId,
    at: Instant,
}

/// How long a ready overlay waits for its layer's next call before it is unmounted.
pub const READY_KEEP: Duration = Duration::from_secs(60);

fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// The identity of an open descriptor; async-signal-safe.
unsafe fn id_of(fd: libc::c_int) -> Option<DirId> {
    // SAFETY: fstat into a stack value.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        (libc::fstat(fd, &mut st) == 0).then_some(DirId {
            dev: st.st_dev,
            ino: st.st_ino,
        })
    }
}

/// In a child in the staging namespaces: the item's real directory and layer reopened (the
/// real one checked to be the grant's), and its overlay: `ready`, when it is still mounted at
/// the merged directory over the same layer, else one mounted now over whatever an earlier
/// call left there (detached, never used). Leaves the merged directory open at `item.slot`
/// when `item.slot` is not negative, and returns what was mounted.
///
/// # Safety
/// Async-signal-safe calls only, on C strings that outlive it; allocates nothing.
unsafe fn mount_item(item: &RawItem, ready: Option<&Ready>) -> io::Result<Ready> {
    // SAFETY: each call gets NUL-terminated strings that outlive it, a stack value or
    // integers; none keeps a pointer.
    unsafe {
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
                if id_of(fd) != Some(want) {
                    libc::close(fd);
                    return Err(io::Error::from_raw_os_error(libc::ESTALE));
                }
            }
            let moved = libc::dup2(fd, to);
            libc::close(fd);
            check(moved)?;
        }
        let (upper, work) = match (item.reopen.get(1), item.reopen.get(2)) {
            (Some(u), Some(w)) => (id_of(u.1), id_of(w.1)),
            _ => (None, None),
        };
        // Nothing of the layers' or the real directory's reaches bwrap.
        let close_reopened = || {
            for &(_, to, _) in &item.reopen {
                libc::close(to);
            }
        };
        let open_merged = || {
            check(libc::open(
                item.merged,
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            ))
        };
        if let (Some(r), Some(u), Some(w)) = (ready, upper, work) {
            if r.upper == u && r.work == w {
                let fd = open_merged()?;
                if id_of(fd) == Some(r.root) {
                    close_reopened();
                    return keep(fd, item.slot, *r);
                }
                libc::close(fd);
            }
        }
        libc::umount2(item.merged, libc::MNT_DETACH | libc::UMOUNT_NOFOLLOW);
        let mounted = libc::mount(
            c"overlay".as_ptr(),
            item.merged,
            c"overlay".as_ptr(),
            0,
            item.data.cast(),
        );
        close_reopened();
        check(mounted)?;
        let fd = open_merged()?;
        let made = match (id_of(fd), upper, work) {
            (Some(root), Some(upper), Some(work)) => Ready {
                root,
                upper,
                work,
                at: Instant::now(),
            },
            // A read-only overlay has no work directory: never kept.
            _ => Ready {
                root: DirId { dev: 0, ino: 0 },
                upper: DirId { dev: 0, ino: 0 },
                work: DirId { dev: 0, ino: 0 },
                at: Instant::now(),
            },
        };
        keep(fd, item.slot, made)
    }
}

/// `fd` moved to `slot` (closed when `slot` is negative), and `made` returned.
unsafe fn keep(fd: libc::c_int, slot: i32, made: Ready) -> io::Result<Ready> {
    // SAFETY: dup2 and close of descriptors this child owns.
    unsafe {
        let moved = if slot >= 0 { libc::dup2(fd, slot) } else { 0 };
        libc::close(fd);
        check(moved)?;
    }
    Ok(made)
}

/// The raw form of one item: pointers into `Overlays`' strings.
struct RawItem {
    slot: i32,
    merged: *const libc::c_char,
    data: *const libc::c_char,
    reopen: Vec<(*const libc::c_char, i32, Option<DirId>)>,
    ready: Option<Ready>,
}

/// The hook's work.
struct Plan {
    items: Vec<RawItem>,
    userns: i32,
    mntns: i32,
}

// SAFETY: the pointers are read-only views of CStrings the spawning thread keeps alive and
// does not touch until the child has exec'd; the hook runs on that thread's behalf only.
unsafe impl Send for Plan {}
// SAFETY: as above; nothing writes through them.
unsafe impl Sync for Plan {}

impl Plan {
    fn run(&self) -> io::Result<()> {
        // SAFETY: setns on descriptors that outlive the child, then `mount_item`'s calls.
        unsafe {
            check(libc::setns(self.userns, libc::CLONE_NEWUSER))?;
            check(libc::setns(self.mntns, libc::CLONE_NEWNS))?;
            for item in &self.items {
                mount_item(item, item.ready.as_ref())?;
            }
        }
        Ok(())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
