//! Staged writes (docs/design.md#staged-writes-and-owners): a grant with `writes = "staged"`
//! gives each session, per grant directory, an overlay layer in brokerd's state; every sandbox
//! of the session mounts the real directory with that layer over it, so whatever a command
//! does lands in the layer, and the real directory changes only when an owner commits.
//!
//! On disk, under `<home>/staged/` (mode 0700):
//!
//! ```text
//! <session>/d-<hash of the real path>/upper    the layer (overlayfs' upper directory)
//!                                      work     overlayfs' work directory
//!                                      merged   where bwrap's sandboxes see the merged view
//!                                      layer.json   the real path, its grants, and the
//!                                               identity of each real path when the session
//!                                               first staged a change to it (conflicts)
//!                                      lock     flock: sandboxes shared, commit exclusive
//! ```
//!
//! A layer is the owner's data: it survives `end_session`, restarts and crashes, and goes only
//! by discard or `staged_ttl_s`. Modules: `merged` (the view decisions take), `changes` (what a
//! layer changed), `commit` (landing and discarding changes).

use std::collections::{BTreeMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use proto::ident::Ident;

pub mod changes;
pub mod commit;
pub mod merged;

pub use merged::Merged;

/// The directory under the service home that holds every layer.
pub const STAGED_DIR: &str = "staged";
/// A layer's metadata file.
const META: &str = "layer.json";
/// The most bytes of a real file hashed to tell a later change to it (larger ones are told by
/// size, inode and times).
const HASH_LIMIT: u64 = 64 * 1024 * 1024;

/// One session's layer over one real directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layer {
    pub real: PathBuf,
    pub dir: PathBuf,
    pub upper: PathBuf,
    pub work: PathBuf,
    pub merged: PathBuf,
}

impl Layer {
    fn at(dir: PathBuf, real: &Path) -> Layer {
        Layer {
            real: real.to_path_buf(),
            upper: dir.join("upper"),
            work: dir.join("work"),
            merged: dir.join("merged"),
            dir,
        }
    }
}

/// What a real path was when the session first staged a change to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// `file`, `dir`, `link`, `other`, or `none` (it did not exist).
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dev: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ino: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtime_ns: Option<i128>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

impl Identity {
    /// The real path as it is now, read without following a link.
    pub fn of(p: &Path) -> Identity {
        let Ok(m) = fs::symlink_metadata(p) else {
            return Identity::none();
        };
        let kind = kind_of(&m);
        let mtime_ns = i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec());
        Identity {
            sha256: (kind == "file" && m.len() <= HASH_LIMIT)
                .then(|| sha256_file(p).ok())
                .flatten(),
            target: (kind == "link")
                .then(|| fs::read_link(p).ok().map(|t| t.display().to_string()))
                .flatten(),
            dev: Some(m.dev()),
            ino: Some(m.ino()),
            size: (kind == "file").then_some(m.len()),
            mtime_ns: (kind == "file").then_some(mtime_ns),
            kind: kind.to_string(),
        }
    }

    pub fn none() -> Identity {
        Identity {
            kind: "none".into(),
            dev: None,
            ino: None,
            size: None,
            mtime_ns: None,
            sha256: None,
            target: None,
        }
    }

    /// Whether `now` is still what was recorded: the same thing at the path, not changed
    /// since. A directory counts as unchanged while it is a directory (its entries are
    /// judged each on its own).
    pub fn unchanged(&self, now: &Identity) -> bool {
        if self.kind != now.kind {
            return false;
        }
        match self.kind.as_str() {
            "none" | "dir" => true,
            "link" => self.target == now.target,
            "file" => {
                self.size == now.size
                    && match (&self.sha256, &now.sha256) {
                        (Some(a), Some(b)) => a == b,
                        _ => {
                            self.dev == now.dev
                                && self.ino == now.ino
                                && self.mtime_ns == now.mtime_ns
                        }
                    }
            }
            _ => self.dev == now.dev && self.ino == now.ino,
        }
    }
}

/// `file`, `dir`, `link` or `other`.
pub fn kind_of(m: &fs::Metadata) -> &'static str {
    let t = m.file_type();
    if t.is_symlink() {
        "link"
    } else if t.is_dir() {
        "dir"
    } else if t.is_file() {
        "file"
    } else {
        "other"
    }
}

pub fn sha256_file(p: &Path) -> io::Result<String> {
    let mut f = crate::view::open_for_reading(p)?;
    let mut h = Sha256::new();
    io::copy(&mut f, &mut h)?;
    Ok(hex::encode(h.finalize()))
}

/// A layer's `layer.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Meta {
    pub real: PathBuf,
    /// The grants of the session that staged into it.
    pub grants: Vec<String>,
    /// Seconds since the epoch of the layer's first change.
    pub created: u64,
    /// By path relative to the real directory: what it was when first staged.
    pub first: BTreeMap<String, Identity>,
}

impl Meta {
    pub fn read(layer: &Layer) -> io::Result<Meta> {
        let text = fs::read_to_string(layer.dir.join(META))?;
        serde_json::from_str(&text).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }

    /// Written beside and renamed into place, synced: a crash leaves the old or the new.
    pub fn write(&self, layer: &Layer) -> io::Result<()> {
        let text = serde_json::to_vec_pretty(self)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        let tmp = layer.dir.join(format!("{META}.new"));
        {
            let mut f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)?;
            io::Write::write_all(&mut f, &text)?;
            f.sync_all()?;
        }
        fs::rename(&tmp, layer.dir.join(META))?;
        File::open(&layer.dir)?.sync_all()
    }
}

/// Why a session's layer cannot be used for a call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StageError {
    #[error("the staged layer of {} could not be made or read ({why}); nothing was run", .real.display())]
    Layer { real: PathBuf, why: String },
    #[error("this session has {bytes} bytes staged, at or past [broker] max_staged_bytes ({max}): its writes are refused until an owner commits or discards them")]
    Full { bytes: u64, max: u64 },
    #[error("another call of this session is using its staged layer of {}, or an owner is committing it; nothing was run; ask again once it has finished", .0.display())]
    Busy(PathBuf),
}

/// Every session's layers.
#[derive(Debug)]
pub struct Stage {
    root: PathBuf,
    pub max_bytes: u64,
    pub ttl: Option<Duration>,
    /// Layers a call of this process is using (by layer directory).
    busy: Mutex<HashSet<PathBuf>>,
    freed: Condvar,
    /// The podman program, when Podman's overlays made the layers: what its container's
    /// mapped root left (overlayfs' `work/work`, mode 0, owned by a subordinate uid) goes
    /// through `podman unshare`.
    podman: Option<PathBuf>,
}

/// The layers a call holds until dropped: no other call of this process, and no commit,
/// touches them meanwhile.
#[derive(Debug)]
pub struct Holding {
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
            busy: Mutex::new(HashSet::new()),
            freed: Condvar::new(),
            podman: None,
        }
    }

    /// Layers that Podman's overlays write (see `podman`).
    pub fn with_podman(mut self, podman: PathBuf) -> Stage {
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
        Layer::at(self.session_dir(session).join(name), real)
    }

    /// Makes the layer's directories (0700) and its metadata, naming `grant`.
    pub fn prepare(&self, session: &Ident, grant: &str, real: &Path) -> Result<Layer, StageError> {
        let layer = self.layer(session, real);
        let failed = |e: io::Error| StageError::Layer {
            real: real.to_path_buf(),
            why: e.to_string(),
        };
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
        let mut meta = match Meta::read(&layer) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Meta {
                real: real.to_path_buf(),
                created: now_s(),
                ..Meta::default()
            },
            Err(e) => return Err(failed(e)),
        };
        if meta.real != real {
            return Err(failed(io::Error::other(format!(
                "its layer.json names {}",
                meta.real.display()
            ))));
        }
        if !meta.grants.iter().any(|g| g == grant) {
            meta.grants.push(grant.to_string());
            meta.write(&layer).map_err(failed)?;
        }
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
        if writes {
            let bytes = self.bytes(session);
            if bytes >= self.max_bytes {
                return Err(StageError::Full {
                    bytes,
                    max: self.max_bytes,
                });
            }
        }
        let dirs: Vec<PathBuf> = layers.iter().map(|l| l.dir.clone()).collect();
        let busy_one = |busy: &HashSet<PathBuf>| layers.iter().find(|l| busy.contains(&l.dir));
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
            match lock_file(&l.dir, nix::fcntl::FlockArg::LockSharedNonblock) {
                Ok(f) => locks.push(f),
                Err(_) => return Err(StageError::Busy(l.real.clone())),
            }
        }
        busy.extend(dirs.iter().cloned());
        Ok(Holding {
            dirs,
            locks,
            stage: self.clone(),
        })
    }

    /// Records, for every path the session's calls changed in `layer` and not yet recorded,
    /// what the real path is now: a later change to the real file is a conflict at commit.
    pub fn record_first(&self, layer: &Layer) -> io::Result<()> {
        let mut meta = Meta::read(layer)?;
        let before = meta.first.len();
        for rel in changes::layer_paths(&layer.upper)? {
            meta.first
                .entry(rel.clone())
                .or_insert_with(|| Identity::of(&layer.real.join(&rel)));
        }
        if meta.first.len() != before {
            meta.write(layer)?;
        }
        Ok(())
    }

    /// The bytes a session holds in its layers' upper directories.
    pub fn bytes(&self, session: &Ident) -> u64 {
        let mut total = 0;
        for l in self.layers_of(session) {
            total += dir_bytes(&l.upper);
        }
        total
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
            let Ok(meta) = Meta::read(&Layer::at(dir.clone(), Path::new("/"))) else {
                continue;
            };
            out.push(Layer::at(dir, &meta.real));
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
        while busy.contains(&layer.dir) {
            let now = Instant::now();
            if now >= deadline {
                return Err(StageError::Busy(layer.real.clone()));
            }
            busy = match self.freed.wait_timeout(busy, deadline - now) {
                Ok((b, _)) => b,
                Err(_) => return Err(StageError::Busy(layer.real.clone())),
            };
        }
        let lock = lock_file(&layer.dir, nix::fcntl::FlockArg::LockExclusiveNonblock)
            .map_err(|_| StageError::Busy(layer.real.clone()))?;
        busy.insert(layer.dir.clone());
        Ok(Holding {
            dirs: vec![layer.dir.clone()],
            locks: vec![lock],
            stage: self.clone(),
        })
    }

    /// Layers whose first change is older than `staged_ttl_s`: the ones to discard.
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
        match (commit::remove_tree(&layer.dir), &self.podman) {
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

fn lock_file(dir: &Path, how: nix::fcntl::FlockArg) -> io::Result<nix::fcntl::Flock<File>> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(dir.join("lock"))?;
    nix::fcntl::Flock::lock(f, how).map_err(|(_, e)| io::Error::from(e))
}

/// The bytes of the regular files under `dir` (links and whiteouts count nothing).
pub fn dir_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(e.path()),
                Ok(t) if t.is_file() => total += e.metadata().map(|m| m.len()).unwrap_or(0),
                _ => {}
            }
        }
    }
    total
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
