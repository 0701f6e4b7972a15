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
//!
//! Entries are read in name order (names as bytes: one that is not UTF-8 is walked as it is),
//! and the first 4 KiB of each regular file are read for its markers. A directory whose entries
//! cannot be searched is held in its parent's place. A regular file with more names than the
//! walk found, none of them a target, is looked for in the protected directories (read for
//! their files' identities only then, within `protect_max_entries` of their own); where it has a
//! name there, or where one of them cannot be read all through, every name of it in the grant is
//! held.

use std::collections::{HashMap, HashSet};
use std::ffi::{CStr, CString, OsStr, OsString};
use std::fmt;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use nix::dir::{Dir, Type};
use nix::errno::Errno;
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{fstat, fstatat, FileStat, Mode, SFlag};

use crate::grant::ProtectBounds;

use super::{has_protected_component, marker_in, protected_dir_name, HEADER_READ};

/// Why a target is protected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A directory of a protected name (`vendor`, `build/tmp`, ...).
    Directory(&'static str),
    /// A file whose first lines carry this marker.
    Generated(&'static str),
    /// A file of a protected name (a plain file named `vendor`): a protected target by its
    /// path, as the refusals read it.
    Named(&'static str),
    /// A directory or file the walk could not read, held whole: what it holds, or what its
    /// first lines say, cannot be known, and the sandbox must not be able to make it readable.
    Unreadable,
    /// Another name of a file that has a name inside a protected directory (a hard link):
    /// writing it would write that file.
    Linked,
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

    /// What the owner can do about it, for the refusal and the reports.
    pub fn remedy(&self) -> String {
        match (self, self.key()) {
            (PastBounds::Unreadable { at, .. }, _) => format!(
                "make {} readable and searchable by brokerd's user on the host (chmod u+rx) or set protect = \"classifier\" for the grant",
                at.display()
            ),
            (_, Some(key)) => {
                format!("raise [runner] {key} or set protect = \"classifier\" for the grant")
            }
            (_, None) => "set protect = \"classifier\" for the grant".to_string(),
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

/// What the walks of one grant directory remember: the files they read, and the targets they
/// held, which stay held while their path exists and a walk cannot tell what they are.
#[derive(Debug, Default)]
struct Memory {
    stamps: Stamps,
    targets: HashMap<PathBuf, Kind>,
}

/// Walks grant directories, remembering what each file said between walks.
#[derive(Debug, Default)]
pub struct Scanner {
    bounds: ProtectBounds,
    /// By grant directory: what its walks found.
    memory: Mutex<HashMap<PathBuf, Memory>>,
}

impl Scanner {
    pub fn new(bounds: ProtectBounds) -> Scanner {
        Scanner {
            bounds,
            memory: Mutex::new(HashMap::new()),
        }
    }

    pub fn bounds(&self) -> ProtectBounds {
        self.bounds
    }

    /// The protected targets of the directory `root` (canonical), opened as `dir` (any
    /// descriptor of it, `O_PATH` included).
    pub fn scan(&self, root: &Path, dir: BorrowedFd<'_>) -> Result<Found, PastBounds> {
        let unreadable = |e: nix::Error| PastBounds::Unreadable {
            at: root.to_path_buf(),
            why: e.desc().to_string(),
        };
        // A grant directory that is itself vendored or generated is protected whole.
        if let Some(name) = has_protected_component(root) {
            let fd = openat(dir, ".", OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty())
                .map_err(unreadable)?;
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
        let memory = self
            .memory
            .lock()
            .map(|mut m| m.remove(root).unwrap_or_default())
            .unwrap_or_default();
        let mut walk = Walk::new(self.bounds, root, memory.stamps, &memory.targets);
        let mut result = walk.run(dir);
        // Another name of a file inside a protected directory: held too, found by a second
        // walk that knows which files they are (only where such names may exist).
        if result.is_ok() {
            match walk.linked_to_protected() {
                Ok(linked) if linked.is_empty() => {}
                Ok(linked) => {
                    let seen = std::mem::take(&mut walk.seen);
                    walk = Walk::new(self.bounds, root, seen, &memory.targets);
                    walk.linked = linked;
                    result = walk.run(dir);
                }
                Err(e) => result = Err(e),
            }
        }
        // Found after what they hold; mounted before it.
        walk.pins.sort_by_key(|p| p.path.components().count());
        let kept = match &result {
            // What was held stays remembered, and so do the remembered targets inside a
            // target held whole.
            Ok(()) => {
                let mut targets: HashMap<PathBuf, Kind> = walk
                    .found
                    .iter()
                    .map(|t| (t.path.clone(), t.kind))
                    .collect();
                for (p, k) in &memory.targets {
                    if walk.found.iter().any(|t| p.starts_with(&t.path)) {
                        targets.entry(p.clone()).or_insert(*k);
                    }
                }
                Memory {
                    stamps: walk.seen,
                    targets,
                }
            }
            // A walk that did not finish forgets nothing it held.
            Err(_) => Memory {
                stamps: Stamps::new(),
                targets: memory.targets.clone(),
            },
        };
        if let Ok(mut m) = self.memory.lock() {
            m.insert(root.to_path_buf(), kept);
        }
        result.map(|()| Found {
            targets: walk.found,
            pins: walk.pins,
            entries: walk.entries,
        })
    }
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

/// Why a directory's walk stopped: a bound (the call is refused), or something in it that
/// could not be read (the directory is held whole by its parent's walk).
enum Stop {
    Bounds(PastBounds),
    Unreadable(nix::Error),
}

impl From<PastBounds> for Stop {
    fn from(e: PastBounds) -> Stop {
        Stop::Bounds(e)
    }
}

/// The files with more than one name, by (device, inode): how many names the file has, and
/// the paths the walk found it at outside the protected directories.
type Links = HashMap<(u64, u64), (u64, Vec<PathBuf>)>;

struct Walk<'a> {
    bounds: ProtectBounds,
    root: &'a Path,
    previous: Stamps,
    seen: Stamps,
    /// What earlier walks held: held again where this walk cannot tell what it is.
    remembered: &'a HashMap<PathBuf, Kind>,
    /// Files to hold as another name of a protected one, by (device, inode).
    linked: HashSet<(u64, u64)>,
    links: Links,
    found: Vec<Target>,
    pins: Vec<Pin>,
    entries: usize,
}

impl<'a> Walk<'a> {
    fn new(
        bounds: ProtectBounds,
        root: &'a Path,
        previous: Stamps,
        remembered: &'a HashMap<PathBuf, Kind>,
    ) -> Walk<'a> {
        Walk {
            bounds,
            root,
            previous,
            seen: HashMap::new(),
            remembered,
            linked: HashSet::new(),
            links: HashMap::new(),
            found: Vec::new(),
            pins: Vec::new(),
            entries: 0,
        }
    }

    /// Walks the grant directory from its descriptor. One that cannot be read is refused
    /// (holding it whole would make the writable call read-only without saying so).
    fn run(&mut self, dir: BorrowedFd<'_>) -> Result<(), PastBounds> {
        let unreadable = |e: nix::Error| PastBounds::Unreadable {
            at: self.root.to_path_buf(),
            why: e.desc().to_string(),
        };
        let top = openat(
            dir,
            ".",
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(unreadable)?;
        // The grant directory's own name counts: a `tmp` in a grant directory named `build`
        // is `build/tmp`.
        let name = self.root.file_name().map(OsStr::to_os_string);
        match self.dir(top, self.root.to_path_buf(), name, 0) {
            Ok(()) => Ok(()),
            Err(Stop::Bounds(e)) => Err(e),
            Err(Stop::Unreadable(e)) => Err(PastBounds::Unreadable {
                at: self.root.to_path_buf(),
                why: e.desc().to_string(),
            }),
        }
    }

    /// Walks one directory: its names read first, then each protected one held and each
    /// directory below walked, then the directory pinned where it holds a target.
    fn dir(
        &mut self,
        fd: OwnedFd,
        path: PathBuf,
        name: Option<OsString>,
        depth: usize,
    ) -> Result<(), Stop> {
        let mut dir = Dir::from_fd(fd).map_err(Stop::Unreadable)?;
        let names = self.names(&mut dir)?;
        let targets_before = self.found.len();
        let parent = name.as_deref().and_then(OsStr::to_str);
        for (entry, kind) in names {
            let at = path.join(OsStr::from_bytes(entry.to_bytes()));
            let kind = match kind {
                Some(k) => k,
                None => match fstatat(
                    dir.as_fd(),
                    entry.as_c_str(),
                    nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
                ) {
                    Ok(st) => type_of(&st),
                    Err(Errno::ENOENT) => continue,
                    Err(e) => return Err(Stop::Unreadable(e)),
                },
            };
            match kind {
                Type::Directory => self.subdir(dir.as_fd(), &entry, at, parent, depth)?,
                Type::File => self.dir_file(dir.as_fd(), &entry, at, parent)?,
                // Links are not followed; devices, sockets and FIFOs carry no header.
                _ => {}
            }
        }
        // A directory below the grant directory that holds a target is pinned: the directory
        // just read, by a descriptor of its own.
        if depth > 0 && self.found.len() > targets_before {
            let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
            let fd = openat(dir.as_fd(), ".", flags, Mode::empty()).map_err(Stop::Unreadable)?;
            self.count_mount()?;
            self.pins.push(Pin { path, fd });
        }
        Ok(())
    }

    /// A directory's names and their types where the listing gives them, counted against
    /// `max_entries`, in name order (so that the same tree gives the same answer). Names are
    /// bytes: one that is not UTF-8 is none of the protected names, and is walked as it is.
    fn names(&mut self, dir: &mut Dir) -> Result<Vec<(CString, Option<Type>)>, Stop> {
        let mut names: Vec<(CString, Option<Type>)> = Vec::new();
        for entry in dir.iter() {
            let entry = entry.map_err(Stop::Unreadable)?;
            let bytes = entry.file_name().to_bytes();
            if bytes == b"." || bytes == b".." {
                continue;
            }
            self.entries += 1;
            if self.entries > self.bounds.max_entries {
                return Err(Stop::Bounds(PastBounds::Entries {
                    root: self.root.to_path_buf(),
                    max: self.bounds.max_entries,
                }));
            }
            names.push((entry.file_name().to_owned(), entry.file_type()));
        }
        names.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(names)
    }

    /// A directory in the one being walked (`parent` its name): held when protected by
    /// name, else walked, within `max_depth`.
    fn subdir(
        &mut self,
        dir: BorrowedFd<'_>,
        entry: &CStr,
        at: PathBuf,
        parent: Option<&str>,
        depth: usize,
    ) -> Result<(), Stop> {
        let entry_name = OsStr::from_bytes(entry.to_bytes());
        let protected = entry_name
            .to_str()
            .and_then(|n| protected_dir_name(n, parent));
        if let Some(protected) = protected {
            let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
            return match openat(dir, entry, flags, Mode::empty()) {
                Ok(fd) => Ok(self.target(at, fd, Kind::Directory(protected))?),
                Err(e) => self.cannot_tell(dir, entry, at, e),
            };
        }
        if depth + 1 > self.bounds.max_depth {
            return Err(Stop::Bounds(PastBounds::Depth {
                root: self.root.to_path_buf(),
                at,
                max: self.bounds.max_depth,
            }));
        }
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let sub = match openat(dir, entry, flags, Mode::empty()) {
            Ok(sub) => sub,
            Err(e) => return self.cannot_tell(dir, entry, at, e),
        };
        // What a directory that cannot be read all through holds is not known:
        // it is held whole, and nothing found inside it is mounted on its own.
        let before = (self.found.len(), self.pins.len());
        match self.dir(sub, at.clone(), Some(entry_name.to_os_string()), depth + 1) {
            Ok(()) => Ok(()),
            Err(Stop::Unreadable(_)) => {
                self.found.truncate(before.0);
                self.pins.truncate(before.1);
                self.hold_whole(dir, entry, at)
            }
            Err(e) => Err(e),
        }
    }

    /// A file in the directory being walked (`parent` its name): held when protected by
    /// name, else read for a header (`file`).
    fn dir_file(
        &mut self,
        dir: BorrowedFd<'_>,
        entry: &CStr,
        at: PathBuf,
        parent: Option<&str>,
    ) -> Result<(), Stop> {
        let named = OsStr::from_bytes(entry.to_bytes())
            .to_str()
            .and_then(|n| protected_dir_name(n, parent));
        match named {
            Some(named) => {
                let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
                match openat(dir, entry, flags, Mode::empty()) {
                    Ok(fd) => Ok(self.target(at, fd, Kind::Named(named))?),
                    Err(e) => self.cannot_tell(dir, entry, at, e),
                }
            }
            None => self.file(dir, entry, at),
        }
    }

    /// An entry the walk could not open: gone since it was listed (or replaced by a link or
    /// a file of another type) is nothing to protect, unless an earlier walk held it; anything
    /// else (no permission, an I/O error) is held whole.
    fn cannot_tell(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &CStr,
        at: PathBuf,
        e: Errno,
    ) -> Result<(), Stop> {
        if matches!(
            e,
            Errno::ENOENT | Errno::ENOTDIR | Errno::ELOOP | Errno::ENXIO
        ) && !self.remembered.contains_key(&at)
        {
            return Ok(());
        }
        self.hold_whole(dir, name, at)
    }

    /// Holds the directory or file `name` whole, read-only, by a descriptor that reads
    /// nothing (`O_PATH`); what was there before keeps its kind. Where even that cannot be
    /// opened, the directory holding it cannot be searched: that one is held whole instead.
    fn hold_whole(&mut self, dir: BorrowedFd<'_>, name: &CStr, at: PathBuf) -> Result<(), Stop> {
        let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = match openat(dir, name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => return Ok(()),
            Err(e) => return Err(Stop::Unreadable(e)),
        };
        let st = fstat(&fd).map_err(Stop::Unreadable)?;
        // A link or a special file in its place since it was listed: nothing to bind.
        if !matches!(type_of(&st), Type::Directory | Type::File) {
            return Ok(());
        }
        let kind = self
            .remembered
            .get(&at)
            .copied()
            .unwrap_or(Kind::Unreadable);
        Ok(self.target(at, fd, kind)?)
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

    /// A regular file: a target when its first lines say it is generated, when it is another
    /// name of a file in a protected directory, or when it cannot be read.
    fn file(&mut self, dir: BorrowedFd<'_>, name: &CStr, at: PathBuf) -> Result<(), Stop> {
        let st = match fstatat(dir, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(e) => return self.cannot_tell(dir, name, at, e),
        };
        let id = (st.st_dev, st.st_ino);
        if self.linked.contains(&id) {
            let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
            return match openat(dir, name, flags, Mode::empty()) {
                Ok(fd) => Ok(self.target(at, fd, Kind::Linked)?),
                Err(e) => self.cannot_tell(dir, name, at, e),
            };
        }
        if st.st_nlink > 1 {
            let links = self.links.entry(id).or_insert((st.st_nlink, Vec::new()));
            links.1.push(at.clone());
        }
        let known = self.previous.get(&id).filter(|s| s.same_file(&st)).copied();
        let (marker, fd) = match known {
            Some(stamp) => {
                self.seen.insert(id, stamp);
                let Some(marker) = stamp.marker else {
                    return Ok(());
                };
                let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
                match openat(dir, name, flags, Mode::empty()) {
                    Ok(fd) => (marker, fd),
                    Err(e) => return self.cannot_tell(dir, name, at, e),
                }
            }
            None => {
                // O_NONBLOCK: a file swapped for a FIFO since the listing does not hang.
                let flags = OFlag::O_RDONLY
                    | OFlag::O_NOFOLLOW
                    | OFlag::O_NONBLOCK
                    | OFlag::O_NOCTTY
                    | OFlag::O_CLOEXEC;
                let fd = match openat(dir, name, flags, Mode::empty()) {
                    Ok(fd) => fd,
                    Err(e) => return self.cannot_tell(dir, name, at, e),
                };
                // What is read is what the descriptor is: its own identity is the one kept.
                let st = fstat(&fd).map_err(Stop::Unreadable)?;
                if type_of(&st) != Type::File {
                    return Ok(());
                }
                let mut head = Vec::new();
                let mut file = File::from(fd);
                if let Err(e) = (&mut file).take(HEADER_READ).read_to_end(&mut head) {
                    let e = Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO));
                    return self.cannot_tell(dir, name, at, e);
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
        Ok(self.target(at, fd, Kind::Generated(marker))?)
    }

    fn target(&mut self, path: PathBuf, fd: OwnedFd, kind: Kind) -> Result<(), PastBounds> {
        self.count_mount()?;
        self.found.push(Target { path, fd, kind });
        Ok(())
    }

    /// The files found with a name the walk did not see and no name it holds: where the
    /// unseen name is inside a protected directory this walk holds, writing the file would
    /// write that one. The protected directories are read for their files' identities only
    /// when such files exist, within `max_entries` of their own; a directory that cannot be
    /// read, or past the bound, counts as holding every one of them.
    fn linked_to_protected(&self) -> Result<HashSet<(u64, u64)>, PastBounds> {
        let held: HashSet<&Path> = self.found.iter().map(|t| t.path.as_path()).collect();
        let candidates: HashSet<(u64, u64)> = self
            .links
            .iter()
            .filter(|(_, (nlink, paths))| {
                (paths.len() as u64) < *nlink && !paths.iter().any(|p| held.contains(p.as_path()))
            })
            .map(|(id, _)| *id)
            .collect();
        if candidates.is_empty() {
            return Ok(candidates);
        }
        let mut search = IdSearch {
            wanted: &candidates,
            found: HashSet::new(),
            budget: self.bounds.max_entries,
            max_depth: self.bounds.max_depth,
        };
        for t in &self.found {
            let whole = matches!(t.kind, Kind::Directory(_) | Kind::Unreadable);
            if !whole {
                continue;
            }
            if !search.below(&t.fd, 0) {
                return Ok(candidates);
            }
        }
        Ok(search.found)
    }
}

/// A search below protected directories for files of given identities (device, inode), within
/// a budget of entries shared by every directory searched and the walk's depth.
struct IdSearch<'a> {
    wanted: &'a HashSet<(u64, u64)>,
    /// The wanted identities found.
    found: HashSet<(u64, u64)>,
    budget: usize,
    max_depth: usize,
}

impl IdSearch<'_> {
    /// Adds to `found` the identities of wanted files found below the directory `dir` (an
    /// `O_PATH` descriptor; a file's is checked itself), `depth` below where the search
    /// began. False where something could not be read or the budget ran out: the caller
    /// then assumes every wanted file is there.
    fn below(&mut self, dir: &OwnedFd, depth: usize) -> bool {
        let Ok(st) = fstat(dir) else { return false };
        match type_of(&st) {
            Type::File => {
                if self.wanted.contains(&(st.st_dev, st.st_ino)) {
                    self.found.insert((st.st_dev, st.st_ino));
                }
                return true;
            }
            Type::Directory => {}
            _ => return true,
        }
        if depth > self.max_depth {
            return false;
        }
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let Ok(fd) = openat(dir.as_fd(), ".", flags, Mode::empty()) else {
            return false;
        };
        // A second descriptor of it for the look-ups, while the first is being read.
        let Ok(at_fd) = fd.try_clone() else {
            return false;
        };
        let Ok(mut d) = Dir::from_fd(fd) else {
            return false;
        };
        let mut subdirs = Vec::new();
        for entry in d.iter() {
            let Ok(entry) = entry else { return false };
            let bytes = entry.file_name().to_bytes();
            if bytes == b"." || bytes == b".." {
                continue;
            }
            if self.budget == 0 {
                return false;
            }
            self.budget -= 1;
            match entry.file_type() {
                Some(Type::Symlink | Type::Fifo | Type::Socket) => continue,
                Some(Type::CharacterDevice | Type::BlockDevice) => continue,
                Some(Type::Directory) => subdirs.push(entry.file_name().to_owned()),
                _ => {
                    let at = nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW;
                    let Ok(st) = fstatat(at_fd.as_fd(), entry.file_name(), at) else {
                        return false;
                    };
                    match type_of(&st) {
                        Type::File if self.wanted.contains(&(st.st_dev, st.st_ino)) => {
                            self.found.insert((st.st_dev, st.st_ino));
                        }
                        Type::Directory => subdirs.push(entry.file_name().to_owned()),
                        _ => {}
                    }
                }
            }
        }
        for name in subdirs {
            let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
            let Ok(sub) = openat(at_fd.as_fd(), name.as_c_str(), flags, Mode::empty()) else {
                return false;
            };
            if !self.below(&sub, depth + 1) {
                return false;
            }
        }
        true
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
            Kind::Named(name) => write!(f, "a file named {name}"),
            Kind::Unreadable => write!(f, "a directory or file brokerd cannot read"),
            Kind::Linked => write!(f, "another name of a file in a protected directory"),
        }
    }
}

#[cfg(test)]
#[path = "scan_tests.rs"]
mod tests;
