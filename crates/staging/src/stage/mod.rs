//! Staged writes (docs/design.md#staged-writes-and-owners): a grant with `writes = "staged"`
//! gives each session, per grant directory, an overlay layer in brokerd's state; every sandbox
//! of the session mounts the real directory with that layer over it, so whatever a command
//! does lands in the layer, and the real directory changes only when an owner commits.
//!
//! On disk, under `<home>/staged/` (mode 0700):
//!
//! ```text
//! <session>/d-<hash of the real path>/upper    the layer (overlayfs' upper directory)
//!                                      work/podman, work/bwrap   overlayfs' work
//!                                               directory of each backend's mounts (scratch:
//!                                               each backend leaves it as only it can clear
//!                                               it, so a layer outlives a change of backend)
//!                                      merged   where bwrap's sandboxes see the merged view
//!                                      layer.json   the real path, its grants, and the
//!                                               identity of each real path when the session
//!                                               first staged a change to it (conflicts)
//!                                      layer.json.lock  flock: one writer of layer.json
//!                                      commit.pending  while a commit lands: the id in
//!                                               its temporary names (`journal::Journal`)
//!                                      lock     flock: sandboxes shared, commit exclusive
//!                                      work/volatile-boot  the boot of bwrap's last
//!                                               writable overlay of it (runner::overlay)
//! ```
//!
//! A layer is the owner's data: it survives `end_session`, restarts and crashes, and goes only
//! by discard or `staged_ttl_s`. Modules: `tree` (a directory read and changed by descriptor,
//! no link followed), `meta` (`layer.json`), `merged` (the view decisions take), `changes`
//! (what a layer changed), `conflict` (which changes a commit refuses), `commit` (landing
//! changes: `landing` one by descriptor, `journal` the note a commit killed midway leaves),
//! `discard` (throwing changes away), `names` (a path as the owner reads and names it).
//!
//! A session's staged bytes are counted by descriptor over its layers' upper directories. A
//! call that may write gets what the bound leaves after the session's other layers, and both
//! runners count its layers each second while it runs.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime};

use sha2::{Digest, Sha256};

use proto::broker::{Backend, EntryKind};
use proto::ident::Ident;

pub mod changes;
pub mod commit;
pub mod conflict;
pub mod discard;
pub mod journal;
mod landing;
pub mod merged;
pub mod meta;
pub mod names;
#[cfg(any(test, feature = "test-support"))]
pub mod testing;
pub mod tree;

pub use merged::Merged;
pub use meta::{Identity, Meta, RealKind};

/// A layer's lock: sandboxes take it shared, commits and discards exclusive.
const LOCK: &str = "lock";
/// The directory under the service home that holds every layer.
pub const STAGED_DIR: &str = "staged";
/// The most real entries below one hidden directory recorded in one pass (see
/// `Stage::record_first`); past it, the rest are conflicts until an owner looks.
const RECORD_LIMIT: usize = changes::MAX_CHANGES;
/// The most bytes of real files one pass of `Stage::record_first` hashes; past it, files are
/// told by size, inode and times.
const RECORD_HASH_BYTES: u64 = 1 << 30;
/// About the most bytes a layer's `layer.json` holds, however many paths a session changes:
/// past it, a path with no record is a conflict (`Meta::full`).
const META_BUDGET: usize = 32 << 20;

/// One session's layer over one real directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layer {
    pub real: PathBuf,
    pub dir: PathBuf,
    pub upper: PathBuf,
    /// The work directory of this brokerd's backend's mounts.
    pub work: PathBuf,
    pub merged: PathBuf,
}

impl Layer {
    fn at(dir: PathBuf, real: &Path, backend: Backend) -> Layer {
        Layer {
            real: real.to_path_buf(),
            upper: dir.join("upper"),
            work: dir.join("work").join(backend.as_str()),
            merged: dir.join("merged"),
            dir,
        }
    }
}

/// Why a session's layer cannot be used for a call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StageError {
    #[error("the staged layer of {} could not be made or read ({why}); nothing was run", .real.display())]
    Layer { real: PathBuf, why: String },
    #[error("this session has {bytes} bytes staged, at or past [broker] max_staged_bytes ({max}): its writes are refused until an owner commits or discards them")]
    Full { bytes: u64, max: u64 },
    /// `Full`, for a read-only call whose layer the runner cannot mount read-only.
    #[error("this session has {bytes} bytes staged, at or past [broker] max_staged_bytes ({max}): this runner cannot mount its staged layer read-only, so its calls that see the layer are refused as its writes are, until an owner commits or discards them")]
    FullReading { bytes: u64, max: u64 },
    /// A directory of a layer that brokerd cannot read (a call made it mode 000): what it
    /// holds cannot be counted, so it counts as past the bound.
    #[error("this session's staged layer holds a directory brokerd cannot read ({}): what it holds cannot be counted, so it counts as past [broker] max_staged_bytes ({max}), and this session's calls that may write its staged layers are refused until an owner commits or discards it", .dir.display())]
    Unmeasured { dir: PathBuf, max: u64 },
    #[error("another call of this session is using its staged layer of {}, or an owner is committing it; nothing was run; ask again once it has finished", .0.display())]
    Busy(PathBuf),
}

/// Every session's layers.
#[derive(Debug)]
pub struct Stage {
    root: PathBuf,
    pub max_bytes: u64,
    pub ttl: Option<Duration>,
    /// Layers a call of this process is using (by layer directory), with when a call (not an
    /// owner's commit) took them: what the host changed after that, the session cannot have
    /// seen (see `record_first`).
    busy: Mutex<HashMap<PathBuf, Option<i128>>>,
    freed: Condvar,
    /// The backend whose mounts use the layers (whose work directory a layer's calls get).
    backend: Backend,
    /// See `META_BUDGET`.
    meta_budget: usize,
    /// The podman program: what a Podman container's mapped root left in a layer (overlayfs'
    /// `work/work`, mode 0, owned by a subordinate uid) goes through `podman unshare`, also
    /// after the backend became bwrap.
    podman: Option<PathBuf>,
}

/// The layers a call holds until dropped: no other call of this process, and no commit,
/// touches them meanwhile.
#[derive(Debug)]
pub struct Holding {
    /// For a call that may write: the bytes its layers may hold together before it is
    /// stopped (`max_staged_bytes` less what the session's other layers hold).
    pub limit: Option<u64>,
    dirs: Vec<PathBuf>,
    locks: Vec<nix::fcntl::Flock<File>>,
    stage: Arc<Stage>,
}

impl Drop for Holding {
    fn drop(&mut self) {
        // The file locks go first: whoever is woken next takes them at once.
        self.locks.clear();
        if let Ok(mut busy) = self.stage.busy.lock() {
            for d in &self.dirs {
                busy.remove(d);
            }
        }
        self.stage.freed.notify_all();
    }
}

impl Stage {
    /// The layers under `<home>/staged`.
    pub fn new(home: &Path, max_bytes: u64, ttl_s: u64) -> Stage {
        Stage {
            root: home.join(STAGED_DIR),
            max_bytes,
            ttl: (ttl_s > 0).then(|| Duration::from_secs(ttl_s)),
            busy: Mutex::new(HashMap::new()),
            freed: Condvar::new(),
            backend: Backend::Podman,
            podman: None,
            meta_budget: META_BUDGET,
        }
    }

    /// The layers with a smaller `layer.json` (tests).
    #[cfg(test)]
    pub(crate) fn with_meta_budget(mut self, bytes: usize) -> Stage {
        self.meta_budget = bytes;
        self
    }

    /// The layers of `backend`'s mounts, and the podman program that removes what a
    /// container's mapped root left in one (see `podman`).
    pub fn for_runner(mut self, backend: Backend, podman: PathBuf) -> Stage {
        self.backend = backend;
        self.podman = Some(podman);
        self
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn session_dir(&self, session: &Ident) -> PathBuf {
        self.root.join(session.as_str())
    }

    /// The layer of `session` over `real` (canonical), whether or not it exists.
    pub fn layer(&self, session: &Ident, real: &Path) -> Layer {
        let mut h = Sha256::new();
        h.update(real.as_os_str().as_encoded_bytes());
        let name = format!("d-{}", &hex::encode(h.finalize())[..32]);
        Layer::at(self.session_dir(session).join(name), real, self.backend)
    }

    /// Makes the work directory of a layer a read-only call mounts (Podman's overlay volume
    /// needs one), when this backend has none there yet: the layer was written through the
    /// other backend.
    pub fn work_for_reading(&self, layer: &Layer) -> io::Result<()> {
        if fs::symlink_metadata(&layer.work).is_ok_and(|m| m.is_dir()) {
            return Ok(());
        }
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&layer.work)
    }

    /// Makes the layer's directories (0700) and its metadata, naming `grant`.
    pub fn prepare(&self, session: &Ident, grant: &str, real: &Path) -> Result<Layer, StageError> {
        let layer = self.layer(session, real);
        let failed = |e: io::Error| StageError::Layer {
            real: real.to_path_buf(),
            why: e.to_string(),
        };
        // Made for this grant by an earlier call: nothing to write (layer.json is replaced
        // whole, never written in place, so it reads whole without the lock).
        let made = |d: &Path| fs::symlink_metadata(d).is_ok_and(|m| m.is_dir());
        if Meta::read(&layer).is_ok_and(|m| m.real == real && m.grants.iter().any(|g| g == grant))
            && [&layer.upper, &layer.work, &layer.merged]
                .into_iter()
                .all(|d| made(d))
        {
            return Ok(layer);
        }
        let mut b = fs::DirBuilder::new();
        b.recursive(true).mode(0o700);
        for d in [
            &self.root,
            &layer.dir,
            &layer.upper,
            &layer.work,
            &layer.merged,
        ] {
            b.create(d).map_err(failed)?;
        }
        let fresh = || {
            Some(Meta {
                real: real.to_path_buf(),
                created: now_s(),
                ..Meta::default()
            })
        };
        Meta::update(&layer, fresh, |meta| {
            if meta.real != real {
                return Err(io::Error::other(format!(
                    "its layer.json names {}",
                    meta.real.display()
                )));
            }
            let new = !meta.grants.iter().any(|g| g == grant);
            if new {
                meta.grants.push(grant.to_string());
            }
            Ok((new, ()))
        })
        .map_err(failed)?;
        Ok(layer)
    }

    /// Holds `layers` for one call, waiting until `deadline` for another call of the session
    /// (or a commit) to finish with them. The session's staged bytes are checked when `writes`.
    pub fn hold(
        self: &Arc<Self>,
        session: &Ident,
        layers: &[Layer],
        writes: bool,
        deadline: Instant,
    ) -> Result<Holding, StageError> {
        let mut limit = None;
        if writes {
            let bytes = self
                .measure(session)
                .map_err(|dir| StageError::Unmeasured {
                    dir,
                    max: self.max_bytes,
                })?;
            if bytes >= self.max_bytes {
                return Err(StageError::Full {
                    bytes,
                    max: self.max_bytes,
                });
            }
            let held: u64 = layers
                .iter()
                .map(|l| dir_bytes(&l.upper))
                .fold(0, u64::saturating_add);
            limit = Some(self.max_bytes.saturating_sub(bytes.saturating_sub(held)));
        }
        let dirs: Vec<PathBuf> = layers.iter().map(|l| l.dir.clone()).collect();
        let busy_one = |busy: &HashMap<PathBuf, Option<i128>>| {
            layers.iter().find(|l| busy.contains_key(&l.dir))
        };
        let mut busy = self
            .busy
            .lock()
            .map_err(|_| StageError::Busy(layers[0].real.clone()))?;
        loop {
            match busy_one(&busy) {
                None => break,
                Some(l) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return Err(StageError::Busy(l.real.clone()));
                    }
                    let real = l.real.clone();
                    busy = match self.freed.wait_timeout(busy, deadline - now) {
                        Ok((b, _)) => b,
                        Err(_) => return Err(StageError::Busy(real)),
                    };
                }
            }
        }
        // Against another process (a commit run locally as the service user): shared flocks.
        let mut locks = Vec::new();
        for l in layers {
            match lock_file(&l.dir, LOCK, nix::fcntl::FlockArg::LockSharedNonblock) {
                Ok(f) => locks.push(f),
                Err(_) => return Err(StageError::Busy(l.real.clone())),
            }
        }
        let began = now_ns();
        busy.extend(dirs.iter().map(|d| (d.clone(), began)));
        Ok(Holding {
            limit,
            dirs,
            locks,
            stage: self.clone(),
        })
    }

    /// Records, for every path the session's calls changed in `layer` and not yet recorded,
    /// what the real path is now: a later change to the real file is a conflict at commit.
    /// A change that hides a real directory, when first seen, records every real entry below
    /// it too (at most `RECORD_LIMIT`), and joins `Meta::hidden`; below such a path, a real
    /// entry with no record appeared after the session last saw it, and stays unrecorded: a
    /// conflict (docs/design.md#staged-writes-and-owners).
    ///
    /// Recorded by a call (the layer held by `hold`), a real entry whose change time is past
    /// the moment the call took the layer changed while the call ran: the session's base is
    /// not known, so it is recorded as changed (a conflict at commit), and such an entry below
    /// a hidden directory stays unrecorded (a conflict too).
    pub fn record_first(&self, layer: &Layer) -> io::Result<()> {
        let (Some(upper), real) = changes::trees(&layer.upper, &layer.real)? else {
            return Ok(());
        };
        let real = real.as_ref();
        let began = self
            .busy
            .lock()
            .ok()
            .and_then(|b| b.get(&layer.dir).copied().flatten());
        let changed_since = |rel: &Path| match (began, real.map(|r| r.stat(rel))) {
            (Some(t), Some(Ok(st))) => {
                i128::from(st.st_ctime) * 1_000_000_000 + i128::from(st.st_ctime_nsec) > t
            }
            _ => false,
        };
        let entries = changes::entries(&upper, real)?;
        // Every path recorded already (the usual case past a session's first calls): nothing
        // to write, and no lock to take.
        let recorded = |meta: &Meta| {
            entries.iter().all(|e| {
                meta.first.contains_key(&meta::key(&e.rel)) && (!e.hides || meta.covered(&e.rel))
            })
        };
        if Meta::read(layer).is_ok_and(|m| recorded(&m)) {
            return Ok(());
        }
        Meta::update(
            layer,
            || None,
            |meta| {
                let mut hashed = 0u64;
                let mut identity = |rel: &Path| {
                    let id = Identity::at(real, rel, hashed < RECORD_HASH_BYTES);
                    if id.sha256.is_some() {
                        hashed += id.size.unwrap_or(0);
                    }
                    id
                };
                // What the layer no longer changes needs no record: a later change of it is
                // recorded by the call that makes it.
                let mut changed = meta.prune(entries.iter().map(|e| meta::key(&e.rel)).collect());
                let mut size = meta.size();
                let mut room = |meta: &mut Meta, cost: usize| {
                    if size.saturating_add(cost) > self.meta_budget {
                        meta.full = true;
                        return false;
                    }
                    size += cost;
                    true
                };
                let was_full = meta.full;
                for e in &entries {
                    let k = meta::key(&e.rel);
                    if !meta.first.contains_key(&k) {
                        let now = match changed_since(&e.rel) {
                            true => Identity::changed_during_call(),
                            false => identity(&e.rel),
                        };
                        if !(meta.covered(&e.rel) && now.kind != RealKind::Absent)
                            && room(meta, Meta::cost(&k, &now))
                        {
                            meta.first.insert(k.clone(), now);
                            changed = true;
                        }
                    }
                    // What is below it is recorded only when it was a directory as the
                    // session first saw it: one the host made there later (in place of a
                    // file or link the session changed) holds nothing the session saw, and
                    // what it holds stays unrecorded, a conflict.
                    let saw_dir = meta
                        .first
                        .get(&k)
                        .is_some_and(|id| id.kind == RealKind::Dir);
                    if e.hides && !meta.covered(&e.rel) {
                        if let (Some(real), true) = (real, saw_dir) {
                            let (below, _all) = changes::real_below(real, &e.rel, RECORD_LIMIT);
                            for b in below.into_iter().filter(|b| !changed_since(b)) {
                                let bk = meta::key(&b);
                                if meta.first.contains_key(&bk) {
                                    continue;
                                }
                                let id = identity(&b);
                                if room(meta, Meta::cost(&bk, &id)) {
                                    meta.first.insert(bk, id);
                                }
                            }
                        }
                        if room(meta, k.len() + 8) {
                            meta.hidden.insert(k);
                            changed = true;
                        }
                    }
                }
                // Every path of the layer has its record again: none is unknown.
                if meta.full && recorded(meta) {
                    meta.full = false;
                }
                Ok((changed || meta.full != was_full, ()))
            },
        )
    }

    /// The bytes a session holds in its layers' upper directories (what cannot be counted
    /// counts as `u64::MAX`).
    pub fn bytes(&self, session: &Ident) -> u64 {
        self.measure(session).unwrap_or(u64::MAX)
    }

    /// The bytes a session holds in its layers' upper directories, or the first directory
    /// of them brokerd cannot read (its real path): what it holds cannot be counted.
    pub fn measure(&self, session: &Ident) -> Result<u64, PathBuf> {
        let mut total = 0u64;
        for l in self.layers_of(session) {
            let bytes = measure(&l.upper).map_err(|rel| l.real.join(rel))?;
            total = total.saturating_add(bytes);
        }
        Ok(total)
    }

    /// The layers a session has, with their metadata (unreadable ones left out).
    pub fn layers_of(&self, session: &Ident) -> Vec<Layer> {
        let Ok(entries) = fs::read_dir(self.session_dir(session)) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for e in entries.flatten() {
            let dir = e.path();
            if !e.file_name().to_string_lossy().starts_with("d-") {
                continue;
            }
            let Ok(meta) = Meta::read(&Layer::at(dir.clone(), Path::new("/"), self.backend)) else {
                continue;
            };
            out.push(Layer::at(dir, &meta.real, self.backend));
        }
        out.sort_by(|a, b| a.real.cmp(&b.real));
        out
    }

    /// Every session that has a layer.
    pub fn sessions(&self) -> Vec<Ident> {
        let Ok(entries) = fs::read_dir(&self.root) else {
            return Vec::new();
        };
        let mut out: Vec<Ident> = entries
            .flatten()
            .filter_map(|e| Ident::parse(e.file_name().to_string_lossy().into_owned()).ok())
            .collect();
        out.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        out
    }

    /// The merged view of `session` over the real directories `staged` (the staged ones of
    /// a grant); a directory the session has no layer of yet shows as it is on disk.
    pub fn view(&self, session: &Ident, staged: &[PathBuf]) -> Merged {
        Merged::new(
            staged
                .iter()
                .map(|real| (real.clone(), self.layer(session, real).upper))
                .collect(),
        )
    }

    /// Takes a layer for an owner's commit or discard: no sandbox of it runs meanwhile, in
    /// this process or another.
    pub fn exclusive(
        self: &Arc<Self>,
        layer: &Layer,
        deadline: Instant,
    ) -> Result<Holding, StageError> {
        let mut busy = self
            .busy
            .lock()
            .map_err(|_| StageError::Busy(layer.real.clone()))?;
        while busy.contains_key(&layer.dir) {
            let now = Instant::now();
            if now >= deadline {
                return Err(StageError::Busy(layer.real.clone()));
            }
            busy = match self.freed.wait_timeout(busy, deadline - now) {
                Ok((b, _)) => b,
                Err(_) => return Err(StageError::Busy(layer.real.clone())),
            };
        }
        let lock = lock_file(
            &layer.dir,
            LOCK,
            nix::fcntl::FlockArg::LockExclusiveNonblock,
        )
        .map_err(|_| StageError::Busy(layer.real.clone()))?;
        busy.insert(layer.dir.clone(), None);
        Ok(Holding {
            limit: None,
            dirs: vec![layer.dir.clone()],
            locks: vec![lock],
            stage: self.clone(),
        })
    }

    /// Tidies after every commit killed midway (`journal::finish_interrupted`), at brokerd's
    /// start: no temporary name of it stays in an owner's directory. What cannot be tidied is
    /// said, with its layer, and tried again before that layer's next commit or discard.
    pub fn finish_interrupted(self: &Arc<Self>) -> Vec<(PathBuf, io::Error)> {
        let mut failed = Vec::new();
        for s in self.sessions() {
            for l in self.layers_of(&s) {
                let Ok(_hold) = self.exclusive(&l, Instant::now()) else {
                    continue;
                };
                if let Err(e) = journal::finish_interrupted(&l) {
                    failed.push((l.real.clone(), e));
                }
            }
        }
        failed
    }

    /// Layers made longer ago than `staged_ttl_s` (`Meta::created`, not their last change):
    /// the ones to discard.
    pub fn expired(&self) -> Vec<(Ident, Layer)> {
        let Some(ttl) = self.ttl else {
            return Vec::new();
        };
        let now = now_s();
        let mut out = Vec::new();
        for s in self.sessions() {
            for l in self.layers_of(&s) {
                if let Ok(meta) = Meta::read(&l) {
                    if now.saturating_sub(meta.created) > ttl.as_secs() {
                        out.push((s.clone(), l));
                    }
                }
            }
        }
        out
    }

    /// Removes a layer whole (a discard of everything, or its expiry), and the session's
    /// directory once it holds no layer.
    pub fn remove_layer(&self, session: &Ident, layer: &Layer) -> io::Result<()> {
        match (discard::remove_tree(&layer.dir), &self.podman) {
            (Ok(()), _) => {}
            (Err(e), Some(podman)) if e.kind() == io::ErrorKind::PermissionDenied => {
                remove_as_container_root(podman, &layer.dir)?;
            }
            (Err(e), _) => return Err(e),
        }
        let dir = self.session_dir(session);
        if fs::read_dir(&dir)
            .map(|mut d| d.next().is_none())
            .unwrap_or(false)
        {
            let _ = fs::remove_dir(&dir);
        }
        Ok(())
    }
}

/// `podman unshare rm -rf DIR`: in the user namespace of the service user's Podman, where its
/// containers' mapped root can be removed.
fn remove_as_container_root(podman: &Path, dir: &Path) -> io::Result<()> {
    let out = std::process::Command::new(podman)
        .args(["unshare", "rm", "-rf", "--"])
        .arg(dir)
        .stdin(std::process::Stdio::null())
        .output()?;
    if out.status.success() && !dir.exists() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "podman unshare rm -rf {}: {} {}",
            dir.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// A layer's lock file `name` (made 0600 if missing, never through a link), locked `how`.
fn lock_file(
    dir: &Path,
    name: &str,
    how: nix::fcntl::FlockArg,
) -> io::Result<nix::fcntl::Flock<File>> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(dir.join(name))?;
    nix::fcntl::Flock::lock(f, how).map_err(|(_, e)| io::Error::from(e))
}

/// The bytes of the regular files under `dir` (links and whiteouts count nothing; what cannot
/// be counted counts as `u64::MAX`).
pub fn dir_bytes(dir: &Path) -> u64 {
    measure(dir).unwrap_or(u64::MAX)
}

/// The bytes of the regular files under `dir`, read by descriptor (a directory swapped for a
/// link meanwhile leads nowhere else), or the first directory below it (relative) that brokerd
/// cannot read: a sandbox may have made it mode 000 with anything in it. No `dir`: nothing.
pub fn measure(dir: &Path) -> Result<u64, PathBuf> {
    let gone = |e: &io::Error| matches!(e.raw_os_error(), Some(libc::ENOENT));
    let t = match tree::Tree::open(dir) {
        Ok(t) => t,
        Err(_) if fs::symlink_metadata(dir).is_err() => return Ok(0),
        Err(_) => return Err(PathBuf::new()),
    };
    let mut total = 0u64;
    let mut stack = vec![PathBuf::new()];
    while let Some(d) = stack.pop() {
        let names = match t.names(&d) {
            Ok(n) => n,
            // Removed by a call meanwhile: nothing of it is held.
            Err(e) if gone(&e) => continue,
            Err(_) => return Err(d),
        };
        for name in names {
            let here = d.join(name);
            match t.stat(&here) {
                Ok(st) if tree::kind_of_stat(&st) == EntryKind::Dir => stack.push(here),
                Ok(st) if tree::kind_of_stat(&st) == EntryKind::File => {
                    total = total.saturating_add(u64::try_from(st.st_size).unwrap_or(0));
                }
                Ok(_) => {}
                Err(e) if gone(&e) => {}
                Err(_) => return Err(here),
            }
        }
    }
    Ok(total)
}

/// The real-time clock, fine-grained, in nanoseconds. No change time the kernel hands out is
/// past it (coarse stamps lag it; fine ones and the multigrain floor, since Linux 6.13, never
/// run ahead of it), so a file changed before this reads is never taken for one changed after.
/// A change in the clock tick after it may carry a coarse stamp below it: that change came
/// before the call's sandbox started, which then saw it (docs/design.md#staged-writes-and-owners).
fn now_ns() -> Option<i128> {
    let d = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .ok()?;
    i128::try_from(d.as_nanos()).ok()
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
