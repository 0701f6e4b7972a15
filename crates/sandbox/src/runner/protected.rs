//! The protected targets of a call's writable mounts, held for the life of its sandbox
//! (docs/design.md#protected-targets): found by `protect::scan`, then bound read-only over the
//! writable mount by the backend (bwrap from the descriptors, Podman by path), after the
//! directories between the grant directory and each target are bound writable onto
//! themselves (pinned), so that none of them can be renamed or removed to move a target away.
//!
//! Between the walk and the sandbox's mounts, another sandbox writing the same directory could
//! move a protected file's parent, and the new sandbox would then bind the old path and leave
//! the moved file writable. So a directory that has protected targets is held by one writable
//! sandbox at a time, from its walk until that sandbox is gone; a call that finds it held waits
//! for it within its own time limit. Read-only sandboxes, and directories with nothing to
//! protect, are never held.
//!
//! bwrap binds each pin and target from the descriptor the walk opened (`--bind-fd`, then
//! `--ro-bind-fd`); Podman takes them as `--volume=<pin>:<pin>:rw` and
//! `--volume=<target>:<target>:ro` after the grant directories' volumes (it mounts parents
//! first). The sandbox has no capability over its mounts: bwrap's seccomp filter denies the mount
//! calls and `--disable-userns` lets it make no user namespace; a Podman container may make one
//! (`unshare -rm`), but the mounts it gets there are copies the kernel locked together, so
//! `umount` fails with `EINVAL`.

use std::collections::HashSet;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex};
use std::time::Instant;

use super::mounts::{self, DirId};
use super::{Mount, MountChanged};
use boxmaker_config::ProtectBounds;
use boxmaker_policy::protect::scan::{PastBounds, Pin, Scanner, Target};

/// Why a call's writable mounts cannot be given their protection: the call is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unprotected {
    #[error(
        "the protected targets of grant directory {} (generated, vendored and third-party files, which every writable sandbox binds read-only) could not all be found: {why}; nothing was run, and the owner can {remedy}",
        .dir.display(), remedy = .why.remedy()
    )]
    PastBounds { dir: PathBuf, why: PastBounds },
    #[error(
        "grant directory {} is being written by another call, and its protected targets are held for that call until it ends; nothing was run; ask again once it has finished",
        .0.display()
    )]
    Held(PathBuf),
    #[error(
        "the path {} (a protected target, or a directory holding one) holds ':' or ',' or a name that is not UTF-8, which Podman's --volume cannot carry, so it cannot be bound; nothing was run, and the owner can rename it or set protect = \"classifier\" for the grant",
        .0.display()
    )]
    Unmountable(PathBuf),
    #[error("{0}")]
    Changed(MountChanged),
}

/// One directory's walk and the mounts it protects: `mount` is its index in the spec.
#[derive(Debug)]
pub struct Protected {
    pub mount: usize,
    pub targets: Vec<Target>,
    /// The directories between the grant directory and a target, parents first.
    pub pins: Vec<Pin>,
}

/// One mount a call's protected targets add over its writable grant directories.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Over<'a> {
    pub path: &'a Path,
    /// A pin: the directory bound writable onto itself, so that it cannot be renamed or
    /// removed. Otherwise a target, bound read-only.
    pub pin: bool,
}

impl Over<'_> {
    pub fn pin(path: &Path) -> Over<'_> {
        Over { path, pin: true }
    }

    pub fn read_only(path: &Path) -> Over<'_> {
        Over { path, pin: false }
    }
}

/// The targets of a call, and the directories it holds until dropped.
#[derive(Debug)]
pub struct Held<'a> {
    pub protected: Vec<Protected>,
    dirs: Vec<DirId>,
    owner: Option<&'a Protector>,
}

impl Held<'_> {
    /// Nothing protected, nothing held.
    pub fn none() -> Held<'static> {
        Held {
            protected: Vec::new(),
            dirs: Vec::new(),
            owner: None,
        }
    }

    /// Every target.
    pub fn targets(&self) -> impl Iterator<Item = &Target> {
        self.protected.iter().flat_map(|p| p.targets.iter())
    }

    /// Every mount the targets add, in the order the sandbox makes them: for each grant
    /// directory its pins, parents first, then its targets (which lie inside the pins).
    pub fn mounts(&self) -> Vec<(Over<'_>, &OwnedFd)> {
        let mut out = Vec::new();
        for p in &self.protected {
            out.extend(p.pins.iter().map(|x| (Over::pin(&x.path), &x.fd)));
            out.extend(p.targets.iter().map(|t| (Over::read_only(&t.path), &t.fd)));
        }
        out
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if let Some(owner) = self.owner {
            if let Ok(mut busy) = owner.busy.lock() {
                for d in &self.dirs {
                    busy.remove(d);
                }
            }
            owner.freed.notify_all();
        }
    }
}

/// Finds and holds protected targets for both backends.
#[derive(Debug, Default)]
pub struct Protector {
    scanner: Scanner,
    busy: Mutex<HashSet<DirId>>,
    freed: Condvar,
}

impl Protector {
    pub fn new(bounds: ProtectBounds) -> Protector {
        Protector {
            scanner: Scanner::new(bounds),
            busy: Mutex::new(HashSet::new()),
            freed: Condvar::new(),
        }
    }

    /// The targets of every mount of `mounts` that is writable and protected by mount,
    /// waiting until `deadline` for directories another call holds. The directories that
    /// have targets stay held until the result is dropped.
    pub fn hold(&self, mounts: &[Mount], deadline: Instant) -> Result<Held<'_>, Unprotected> {
        let wanted: Vec<(usize, &Mount)> = mounts
            .iter()
            .enumerate()
            .filter(|(_, m)| m.write && m.protect)
            .collect();
        if wanted.is_empty() {
            return Ok(Held::none());
        }
        let ids: Vec<DirId> = wanted.iter().map(|(_, m)| m.id).collect();
        self.acquire(&ids, &wanted, deadline)?;
        // From here the directories are this call's; whatever goes wrong releases them.
        let mut held = Held {
            protected: Vec::new(),
            dirs: ids,
            owner: Some(self),
        };
        let wanted_mounts: Vec<Mount> = wanted.iter().map(|(_, m)| (*m).clone()).collect();
        let fds = mounts::open_mounts(&wanted_mounts).map_err(Unprotected::Changed)?;
        for ((index, m), fd) in wanted.iter().zip(fds) {
            use std::os::fd::AsFd;
            let found =
                self.scanner
                    .scan(&m.path, fd.as_fd())
                    .map_err(|why| Unprotected::PastBounds {
                        dir: m.path.clone(),
                        why,
                    })?;
            if found.targets.is_empty() {
                self.release(m.id);
                held.dirs.retain(|d| *d != m.id);
            } else {
                held.protected.push(Protected {
                    mount: *index,
                    targets: found.targets,
                    pins: found.pins,
                });
            }
        }
        Ok(held)
    }

    /// Marks every directory of `ids` as this call's, once none is another's.
    fn acquire(
        &self,
        ids: &[DirId],
        wanted: &[(usize, &Mount)],
        deadline: Instant,
    ) -> Result<(), Unprotected> {
        let held_by_another = |busy: &HashSet<DirId>| {
            wanted
                .iter()
                .find(|(_, m)| busy.contains(&m.id))
                .map(|(_, m)| m.path.clone())
        };
        let Ok(mut busy) = self.busy.lock() else {
            return Err(Unprotected::Held(wanted[0].1.path.clone()));
        };
        loop {
            let Some(path) = held_by_another(&busy) else {
                busy.extend(ids.iter().copied());
                return Ok(());
            };
            let now = Instant::now();
            if now >= deadline {
                return Err(Unprotected::Held(path));
            }
            busy = match self.freed.wait_timeout(busy, deadline - now) {
                Ok((b, _)) => b,
                Err(_) => return Err(Unprotected::Held(path)),
            };
        }
    }

    fn release(&self, id: DirId) {
        if let Ok(mut busy) = self.busy.lock() {
            busy.remove(&id);
        }
        self.freed.notify_all();
    }

    /// The walk alone, for `check-config` and `doctor`: how many targets, or why not.
    pub fn survey(&self, m: &Mount) -> Result<usize, Unprotected> {
        use std::os::fd::AsFd;
        let fds = mounts::open_mounts(std::slice::from_ref(m)).map_err(Unprotected::Changed)?;
        let fd = fds.first().ok_or_else(|| {
            Unprotected::Changed(MountChanged {
                path: m.path.clone(),
                why: mounts::MountTrouble::Gone,
            })
        })?;
        self.scanner
            .scan(&m.path, fd.as_fd())
            .map(|f| f.targets.len())
            .map_err(|why| Unprotected::PastBounds {
                dir: m.path.clone(),
                why,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    fn bounds() -> ProtectBounds {
        ProtectBounds {
            max_depth: 8,
            max_entries: 100,
            max_targets: 8,
        }
    }

    fn grant() -> (tempfile::TempDir, Mount) {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(dir.path()).expect("canonical");
        std::fs::create_dir(root.join("vendor")).expect("mkdir");
        let mut m = Mount::at(&root, true).expect("mount");
        m.protect = true;
        (dir, m)
    }

    /// A second writable call of the same directory waits for the first, and gets it once
    /// the first is dropped; past its deadline it is refused, naming the directory.
    #[test]
    fn one_writable_sandbox_at_a_time_per_protected_directory() {
        let (_keep, m) = grant();
        let p = Arc::new(Protector::new(bounds()));
        let soon = || Instant::now() + Duration::from_millis(100);
        let first = p.hold(std::slice::from_ref(&m), soon()).expect("first");
        assert_eq!(first.targets().count(), 1);
        assert!(matches!(
            p.hold(std::slice::from_ref(&m), soon()),
            Err(Unprotected::Held(ref d)) if *d == m.path
        ));
        let (p2, m2) = (p.clone(), m.clone());
        let waiter = std::thread::spawn(move || {
            p2.hold(
                std::slice::from_ref(&m2),
                Instant::now() + Duration::from_secs(10),
            )
            .map(|h| h.targets().count())
        });
        std::thread::sleep(Duration::from_millis(50));
        drop(first);
        assert_eq!(waiter.join().expect("join").expect("second"), 1);
    }

    /// Read-only mounts, mounts of `protect = "classifier"` grants and directories with
    /// nothing to protect are never held.
    #[test]
    fn only_writable_protected_directories_with_targets_are_held() {
        let (_keep, m) = grant();
        let p = Protector::new(bounds());
        let soon = || Instant::now() + Duration::from_millis(50);
        let ro = Mount {
            write: false,
            ..m.clone()
        };
        let classifier = Mount {
            protect: false,
            ..m.clone()
        };
        let _a = p.hold(std::slice::from_ref(&ro), soon()).expect("ro");
        let _b = p
            .hold(std::slice::from_ref(&classifier), soon())
            .expect("classifier");
        assert_eq!(_a.targets().count() + _b.targets().count(), 0);
        std::fs::remove_dir(m.path.join("vendor")).expect("rmdir");
        let _c = p.hold(std::slice::from_ref(&m), soon()).expect("empty");
        let _d = p.hold(std::slice::from_ref(&m), soon()).expect("not held");
    }
}
