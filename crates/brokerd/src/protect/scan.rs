//! The protected targets inside a grant directory, found by a bounded walk
//! (docs/design.md#protected-targets): every directory named `generated`, `vendor`,
//! `third_party` or `node_modules` (or a `tmp` inside a `build`), and every regular file whose
//! first lines say `@generated` or `DO NOT EDIT`. A sandbox that mounts the directory writable
//! binds each of them read-only over it, so that whatever runs there cannot write, delete,
//! rename or replace them.
//!
//! The walk follows no symbolic link: each directory is opened by name below the one before it
//! with `O_NOFOLLOW`, and each target is kept as a descriptor opened the same way, which is
//! what the bwrap backend mounts. A protected directory is not walked into (it is bound
//! whole). Every directory between the grant directory and a target is kept too (a *pin*):
//! the sandbox binds it writable onto itself, so that it is a mount point there and cannot be
//! renamed or removed (`EBUSY`), which would take the target away from the path that is held
//! and let a new file or directory take its place. The bounds are counted in work (depth, entries, targets), not time, so that the
//! same tree gets the same answer on a busy host; past a bound, the grant's writable calls are
//! refused unless its owner chose `protect = "classifier"`.
//!
//! What a file says in its first lines is read once per version of the file: a file whose
//! inode, size, modification and change times are those of the last walk keeps its answer.

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use nix::dir::{Dir, Type};
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{fstat, fstatat, FileStat, Mode, SFlag};

use crate::config::ProtectBounds;

use super::{has_protected_component, marker_in, protected_dir_name, HEADER_READ};

/// Why a target is protected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A directory of a protected name (`vendor`, `build/tmp`, ...).
    Directory(&'static str),
    /// A file whose first lines carry this marker.
    Generated(&'static str),
}

/// One protected target: its path, and a descriptor of what the walk found there.
#[derive(Debug)]
pub struct Target {
    pub path: PathBuf,
    pub fd: OwnedFd,
    pub kind: Kind,
}

/// A directory between the grant directory and a target, with a descriptor of it: bound
/// writable onto itself, so that it cannot be renamed or removed from inside the sandbox.
#[derive(Debug)]
pub struct Pin {
    pub path: PathBuf,
    pub fd: OwnedFd,
}

/// What a walk found.
#[derive(Debug)]
pub struct Found {
    pub targets: Vec<Target>,
    /// The directories holding targets below the grant directory, parents before their
    /// children (the order they are mounted in).
    pub pins: Vec<Pin>,
    /// Directory entries looked at.
    pub entries: usize,
}

/// A walk that could not finish: the grant directory's writable calls are refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PastBounds {
    #[error("{} nests more than {max} directories deep below {}", .at.display(), .root.display())]
    Depth {
        root: PathBuf,
        at: PathBuf,
        max: usize,
    },
    #[error("{} holds more than {max} entries", .root.display())]
    Entries { root: PathBuf, max: usize },
    #[error(
        "{} needs more than {max} mounts to hold its protected targets (one for each target and one for each directory between a target and the grant directory)",
        .root.display()
    )]
    Targets { root: PathBuf, max: usize },
    #[error("{} cannot be read: {why}", .at.display())]
    Unreadable { at: PathBuf, why: String },
}

impl PastBounds {
    /// The `[runner]` key that bounds it, where one does.
    pub fn key(&self) -> Option<&'static str> {
        match self {
            PastBounds::Depth { .. } => Some("protect_max_depth"),
            PastBounds::Entries { .. } => Some("protect_max_entries"),
            PastBounds::Targets { .. } => Some("protect_max_targets"),
            PastBounds::Unreadable { .. } => None,
        }
    }
}

/// A file as the last walk saw it, and what its first lines said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    size: i64,
    mtime: (i64, i64),
    ctime: (i64, i64),
    marker: Option<&'static str>,
}

impl Stamp {
    fn same_file(&self, st: &FileStat) -> bool {
        self.size == st.st_size
            && self.mtime == (st.st_mtime, st.st_mtime_nsec)
            && self.ctime == (st.st_ctime, st.st_ctime_nsec)
    }
}

/// The files of one walk, by (device, inode).
type Stamps = HashMap<(u64, u64), Stamp>;

/// Walks grant directories, remembering what each file said between walks.
#[derive(Debug, Default)]
pub struct Scanner {
    bounds: ProtectBounds,
    /// By grant directory: the files of its last walk.
    stamps: Mutex<HashMap<PathBuf, Stamps>>,
}

impl Scanner {
    pub fn new(bounds: ProtectBounds) -> Scanner {
        Scanner {
            bounds,
            stamps: Mutex::new(HashMap::new()),
        }
    }

    pub fn bounds(&self) -> ProtectBounds {
        self.bounds
    }

    /// The protected targets of the directory `root` (canonical), opened as `dir` (any
    /// descriptor of it, `O_PATH` included).
    pub fn scan(&self, root: &Path, dir: BorrowedFd<'_>) -> Result<Found, PastBounds> {
        let unreadable = |at: &Path, e: nix::Error| PastBounds::Unreadable {
            at: at.to_path_buf(),
            why: e.desc().to_string(),
        };
        // A grant directory that is itself vendored or generated is protected whole.
        if let Some(name) = has_protected_component(root) {
            let fd = openat(dir, ".", OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty())
                .map_err(|e| unreadable(root, e))?;
            let kind = Kind::Directory(leak_name(&name));
            return Ok(Found {
                targets: vec![Target {
                    path: root.to_path_buf(),
                    fd,
                    kind,
                }],
                pins: Vec::new(),
                entries: 0,
            });
        }
        let previous = self
            .stamps
            .lock()
            .map(|mut s| s.remove(root).unwrap_or_default())
            .unwrap_or_default();
        let mut walk = Walk {
            bounds: self.bounds,
            root,
            previous,
            seen: HashMap::new(),
            found: Vec::new(),
            pins: Vec::new(),
            entries: 0,
        };
        let top = openat(
            dir,
            ".",
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| unreadable(root, e))?;
        let result = walk.dir(top, root.to_path_buf(), None, 0);
        if result.is_ok() {
            if let Ok(mut stamps) = self.stamps.lock() {
                stamps.insert(root.to_path_buf(), walk.seen);
            }
        }
        // Found after what they hold; mounted before it.
        walk.pins.sort_by_key(|p| p.path.components().count());
        result.map(|()| Found {
            targets: walk.found,
            pins: walk.pins,
            entries: walk.entries,
        })
    }
}

/// One writable grant directory whose protected targets are held by the mount table, as
/// `check-config` and `doctor` report it: how many targets, or why they cannot all be found.
#[derive(Debug)]
pub struct Survey {
    pub grant: String,
    pub path: PathBuf,
    pub outcome: Result<usize, PastBounds>,
}

/// Walks every writable directory of every grant with `protect = "mount"` and direct writes.
pub fn survey(config: &crate::config::Config) -> Vec<Survey> {
    use crate::config::{Protect, Writes};
    let scanner = Scanner::new(config.protect_bounds());
    let mut out = Vec::new();
    for (name, g) in &config.grants {
        if g.protect != Protect::Mount || g.writes != Writes::Direct {
            continue;
        }
        for p in g.paths.iter().filter(|p| p.write) {
            let outcome = File::open(&p.path)
                .map_err(|e| PastBounds::Unreadable {
                    at: p.path.clone(),
                    why: e.to_string(),
                })
                .and_then(|dir| scanner.scan(&p.path, dir.as_fd()))
                .map(|found| found.targets.len());
            out.push(Survey {
                grant: name.clone(),
                path: p.path.clone(),
                outcome,
            });
        }
    }
    out
}

/// The protected names are a fixed set; a `Kind` carries one of them.
fn leak_name(name: &str) -> &'static str {
    super::PROTECTED_DIRS
        .iter()
        .copied()
        .chain(["build/tmp"])
        .find(|n| *n == name)
        .unwrap_or("generated")
}

struct Walk<'a> {
    bounds: ProtectBounds,
    root: &'a Path,
    previous: Stamps,
    seen: Stamps,
    found: Vec<Target>,
    pins: Vec<Pin>,
    entries: usize,
}

impl Walk<'_> {
    fn dir(
        &mut self,
        fd: OwnedFd,
        path: PathBuf,
        name: Option<String>,
        depth: usize,
    ) -> Result<(), PastBounds> {
        let unreadable = |at: &Path, e: nix::Error| PastBounds::Unreadable {
            at: at.to_path_buf(),
            why: e.desc().to_string(),
        };
        let mut dir = Dir::from_fd(fd).map_err(|e| unreadable(&path, e))?;
        // Names first, so the directory is read before anything below it is opened.
        let mut names: Vec<(String, Option<Type>)> = Vec::new();
        for entry in dir.iter() {
            let entry = entry.map_err(|e| unreadable(&path, e))?;
            let bytes = entry.file_name().to_bytes();
            if bytes == b"." || bytes == b".." {
                continue;
            }
            self.entries += 1;
            if self.entries > self.bounds.max_entries {
                return Err(PastBounds::Entries {
                    root: self.root.to_path_buf(),
                    max: self.bounds.max_entries,
                });
            }
            // A name that is not UTF-8 is none of the protected names; its file is still read.
            names.push((
                String::from_utf8_lossy(bytes).into_owned(),
                entry.file_type(),
            ));
        }
        // In name order, so that the same tree gives the same answer.
        names.sort_by(|a, b| a.0.cmp(&b.0));
        let targets_before = self.found.len();
        for (entry, kind) in names {
            let at = path.join(&entry);
            let kind = match kind {
                Some(k) => k,
                None => match fstatat(
                    dir.as_fd(),
                    entry.as_str(),
                    nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
                ) {
                    Ok(st) => type_of(&st),
                    Err(_) => continue,
                },
            };
            match kind {
                Type::Directory => {
                    if let Some(protected) = protected_dir_name(&entry, name.as_deref()) {
                        let flags = OFlag::O_PATH
                            | OFlag::O_DIRECTORY
                            | OFlag::O_NOFOLLOW
                            | OFlag::O_CLOEXEC;
                        let fd = openat(dir.as_fd(), entry.as_str(), flags, Mode::empty())
                            .map_err(|e| unreadable(&at, e))?;
                        self.target(at, fd, Kind::Directory(protected))?;
                        continue;
                    }
                    if depth + 1 > self.bounds.max_depth {
                        return Err(PastBounds::Depth {
                            root: self.root.to_path_buf(),
                            at,
                            max: self.bounds.max_depth,
                        });
                    }
                    let flags =
                        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
                    // Gone since it was listed: nothing there to protect.
                    let Ok(sub) = openat(dir.as_fd(), entry.as_str(), flags, Mode::empty()) else {
                        continue;
                    };
                    self.dir(sub, at, Some(entry), depth + 1)?;
                }
                Type::File => self.file(dir.as_fd(), &entry, at)?,
                // Links are not followed; devices, sockets and FIFOs carry no header.
                _ => {}
            }
        }
        // A directory below the grant directory that holds a target is pinned: the directory
        // just read, by a descriptor of its own.
        if depth > 0 && self.found.len() > targets_before {
            let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
            let fd =
                openat(dir.as_fd(), ".", flags, Mode::empty()).map_err(|e| unreadable(&path, e))?;
            self.count_mount()?;
            self.pins.push(Pin { path, fd });
        }
        Ok(())
    }

    /// One more mount (a target or a pin), within `max_targets`.
    fn count_mount(&self) -> Result<(), PastBounds> {
        if self.found.len() + self.pins.len() >= self.bounds.max_targets {
            return Err(PastBounds::Targets {
                root: self.root.to_path_buf(),
                max: self.bounds.max_targets,
            });
        }
        Ok(())
    }

    /// A regular file: a target when its first lines say it is generated.
    fn file(&mut self, dir: BorrowedFd<'_>, name: &str, at: PathBuf) -> Result<(), PastBounds> {
        let Ok(st) = fstatat(dir, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) else {
            return Ok(());
        };
        let id = (st.st_dev, st.st_ino);
        let known = self.previous.get(&id).filter(|s| s.same_file(&st)).copied();
        let (marker, fd) = match known {
            Some(stamp) => {
                self.seen.insert(id, stamp);
                let Some(marker) = stamp.marker else {
                    return Ok(());
                };
                let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
                let Ok(fd) = openat(dir, name, flags, Mode::empty()) else {
                    return Ok(());
                };
                (marker, fd)
            }
            None => {
                // O_NONBLOCK: a file swapped for a FIFO since the listing does not hang.
                let flags = OFlag::O_RDONLY
                    | OFlag::O_NOFOLLOW
                    | OFlag::O_NONBLOCK
                    | OFlag::O_NOCTTY
                    | OFlag::O_CLOEXEC;
                let Ok(fd) = openat(dir, name, flags, Mode::empty()) else {
                    return Ok(());
                };
                // What is read is what the descriptor is: its own identity is the one kept.
                let Ok(st) = fstat(&fd) else { return Ok(()) };
                if type_of(&st) != Type::File {
                    return Ok(());
                }
                let mut head = Vec::new();
                let mut file = File::from(fd);
                if (&mut file)
                    .take(HEADER_READ)
                    .read_to_end(&mut head)
                    .is_err()
                {
                    return Ok(());
                }
                let marker = marker_in(&head);
                self.seen.insert(
                    (st.st_dev, st.st_ino),
                    Stamp {
                        size: st.st_size,
                        mtime: (st.st_mtime, st.st_mtime_nsec),
                        ctime: (st.st_ctime, st.st_ctime_nsec),
                        marker,
                    },
                );
                let Some(marker) = marker else {
                    return Ok(());
                };
                (marker, OwnedFd::from(file))
            }
        };
        self.target(at, fd, Kind::Generated(marker))
    }

    fn target(&mut self, path: PathBuf, fd: OwnedFd, kind: Kind) -> Result<(), PastBounds> {
        self.count_mount()?;
        self.found.push(Target { path, fd, kind });
        Ok(())
    }
}

fn type_of(st: &FileStat) -> Type {
    match SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT {
        SFlag::S_IFDIR => Type::Directory,
        SFlag::S_IFREG => Type::File,
        SFlag::S_IFLNK => Type::Symlink,
        SFlag::S_IFIFO => Type::Fifo,
        SFlag::S_IFSOCK => Type::Socket,
        SFlag::S_IFCHR => Type::CharacterDevice,
        _ => Type::BlockDevice,
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Kind::Directory(name) => write!(f, "a {name}/ directory"),
            Kind::Generated(marker) => write!(f, "a file marked {marker}"),
        }
    }
}

#[cfg(test)]
#[path = "scan_tests.rs"]
mod tests;
