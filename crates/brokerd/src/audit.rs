//! The audit log (docs/design.md#audit).
//!
//! Append-only JSON lines, metadata only: never file contents or output. Each record carries
//! `seq` (one more than the record before) and `prev`, the hex SHA-256 of the previous line's
//! bytes (without its newline), so a changed, removed, inserted or reordered record breaks the
//! chain; the head (`seq`, hash of the last line) is reported elsewhere so a cut-off tail shows
//! too. A record is written and synced before `append` returns: callers answer only after, and
//! a record that cannot be written makes the call `unavailable`.
//!
//! After a restart the chain continues from the last complete record. A torn last line (no
//! newline, or not a record) is left as it is, terminated with a newline, and followed by a
//! `torn_tail` record that names its hash; nothing already written is ever rewritten.
//! Rotation by size renames the file to `<path>.1` (older ones shift up) and the first record
//! of the new file carries the chain on.
//!
//! A record holds the log's lock across its sync, so a stalled disk stalls every record after
//! it. What `status` reports comes from a [`Watch`] instead, which never waits for a record:
//! the head so far, and how long the record being written has been at it.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::classify::CommandClass;
use crate::visible::visible;

/// `prev` of the very first record.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";
/// Rotate when the file would grow past this many bytes.
pub const DEFAULT_ROTATE_BYTES: u64 = 64 * 1024 * 1024;
/// Rotated files kept (`<path>.1` .. `<path>.N`).
pub const DEFAULT_KEEP: usize = 10;
/// Longest summary (command, path, URL) kept in a record, in characters of the model's text
/// (an escape that shows one character counts as one).
pub const MAX_SUMMARY_CHARS: usize = 1024;
/// A record being written for longer than this is a stalled audit (`status` says so).
pub const STALLED_AFTER: Duration = Duration::from_secs(5);
/// How much of the end of the file is read to find the last record.
const TAIL_BYTES: u64 = 1024 * 1024;

/// What a record is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum RecordKind {
    /// A decision on a tool call (run, refused, ask, stopped, declined...).
    #[default]
    Call,
    /// A service event: start, an operator's choice such as `enforce_limits = false`.
    Event,
    /// The line before this one was torn (a crash mid-write); it is not part of the chain.
    TornTail,
    /// An owner's commit or discard of a session's staged changes (or their expiry).
    Staged,
}

/// One path of a commit or discard: the real path, what changed, and the sha256 of what
/// landed (a file's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StagedPath {
    pub path: String,
    pub change: proto::broker::ChangeKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

/// What was decided about a call: a record's `decision`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decided {
    /// The grant's mode allows it: it runs.
    Allow,
    /// The owner is asked; a ticket was issued.
    Ask,
    /// The owner approved it with its ticket: it runs.
    Approved,
    /// The owner said no to an ask.
    Declined,
    /// Refused, with a reason the model reads.
    Refused,
    /// The same refusal asked for too often in the session.
    Stopped,
    /// The second record of a call that ran: how it ended.
    Ran,
    /// The second record of an allowed call that did not run (busy).
    NotRun,
    /// An owner approved an ask of a grant with `approvals = "owner"`.
    OwnerApproved,
    /// An owner committed staged changes.
    Committed,
    /// An owner discarded staged changes (or `staged_ttl_s` did).
    Discarded,
}

/// How a call ended: a record's `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ended {
    /// The tool ran; its output was the answer.
    Result,
    /// The tool ran and failed (a fixed sentence).
    Failed,
    /// Nothing could run (a fixed sentence).
    Unavailable,
    /// A grant directory changed under brokerd: refused after all.
    Refused,
    /// No slot in time: answered busy.
    Busy,
    /// The owner declined.
    Cancelled,
}

impl Decided {
    /// The word on disk (and in the journal's `decision` field).
    pub fn as_str(self) -> &'static str {
        match self {
            Decided::Allow => "allow",
            Decided::Ask => "ask",
            Decided::Approved => "approved",
            Decided::Declined => "declined",
            Decided::Refused => "refused",
            Decided::Stopped => "stopped",
            Decided::Ran => "ran",
            Decided::NotRun => "not_run",
            Decided::OwnerApproved => "owner_approved",
            Decided::Committed => "committed",
            Decided::Discarded => "discarded",
        }
    }
}

impl Ended {
    /// The word on disk (and in the journal's `status` field).
    pub fn as_str(self) -> &'static str {
        match self {
            Ended::Result => "result",
            Ended::Failed => "failed",
            Ended::Unavailable => "unavailable",
            Ended::Refused => "refused",
            Ended::Busy => "busy",
            Ended::Cancelled => "cancelled",
        }
    }
}

/// One line of the log. `seq`, `prev` and `time` are filled in by `Audit::append`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Record {
    pub seq: u64,
    pub prev: String,
    pub time: String,
    pub kind: RecordKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grant: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decided>,
    /// The shell command class, for shell calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<CommandClass>,
    /// The program a shell command runs, after leading environment assignments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executable: Option<String>,
    /// The path, URL or (redacted) command; see `summary` and `command_summary`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Once the call ran, or could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Ended>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// The refusal or stop text, the event's description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// For `torn_tail`: the torn line's SHA-256 and length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torn_sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torn_bytes: Option<u64>,
    /// A commit's or discard's paths: what landed or went.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<StagedPath>,
    /// A commit's paths that did not land (conflicts, protected targets not named).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_landed: Vec<StagedPath>,
}

/// The last record: its number and the hash of its line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Head {
    pub seq: u64,
    pub hash: String,
}

impl Head {
    fn genesis() -> Head {
        Head {
            seq: 0,
            hash: GENESIS.to_string(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("the audit log {path} cannot be opened: {source}")]
    Open { path: PathBuf, source: io::Error },
    #[error("the audit log {path} cannot be read: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("the audit record cannot be written: {0}")]
    Write(io::Error),
    #[error("the audit log cannot be rotated: {0}")]
    Rotate(io::Error),
    #[error(
        "the audit log {path} ends in more than one unreadable line; run `boxctl audit verify`"
    )]
    Corrupt { path: PathBuf },
    #[error("the audit record cannot be encoded: {0}")]
    Encode(#[from] serde_json::Error),
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum VerifyError {
    #[error("{path}: cannot be read: {error}")]
    Read { path: PathBuf, error: String },
    #[error("{path}: holds no record")]
    Empty { path: PathBuf },
    #[error("{path}:{line}: not a record, and not followed by a torn_tail record naming it")]
    NotARecord { path: PathBuf, line: usize },
    #[error("{path}:{line}: seq {found} where {expected} was expected (a record removed, inserted or moved)")]
    SeqGap {
        path: PathBuf,
        line: usize,
        expected: u64,
        found: u64,
    },
    #[error(
        "{path}:{line}: prev does not match the line before (a record changed, removed or moved)"
    )]
    ChainBroken { path: PathBuf, line: usize },
    #[error("{path}:{line}: the first record's prev is not the genesis hash")]
    BadGenesis { path: PathBuf, line: usize },
    #[error("{path}:{line}: a torn_tail record that does not name the torn line before it")]
    TornMismatch { path: PathBuf, line: usize },
    #[error("{path}:{line}: the last line is torn (cut off mid-write)")]
    TornTail { path: PathBuf, line: usize },
}

/// Where records go; a test replaces it to fail like a full disk.
trait Sink: Send {
    fn put(&mut self, buf: &[u8]) -> io::Result<()>;
    fn sync(&mut self) -> io::Result<()>;
}

impl Sink for File {
    fn put(&mut self, buf: &[u8]) -> io::Result<()> {
        Write::write_all(self, buf)
    }
    fn sync(&mut self) -> io::Result<()> {
        File::sync_data(self)
    }
}

/// Size-based rotation settings.
#[derive(Debug, Clone, Copy)]
pub struct Rotation {
    /// Rotate before a record would take the file past this many bytes (0: never).
    pub max_bytes: u64,
    /// Rotated files kept.
    pub keep: usize,
}

impl Default for Rotation {
    fn default() -> Self {
        Rotation {
            max_bytes: DEFAULT_ROTATE_BYTES,
            keep: DEFAULT_KEEP,
        }
    }
}

/// The open audit log.
pub struct Audit {
    path: PathBuf,
    sink: Box<dyn Sink>,
    head: Head,
    size: u64,
    rotation: Rotation,
    /// A write failed: the file may end in a torn line, handled before the next record.
    needs_recovery: bool,
    /// Records written with [`Audit::append_unsynced`] and not yet synced.
    unsynced: bool,
    watch: Watch,
    before_sync: Option<Box<dyn FnMut() + Send>>,
}

/// The log as others see it without waiting for a record: its head, and since when the record
/// being written (rotation, write and sync) has been at it. Its lock is held only to copy.
#[derive(Clone, Default)]
pub struct Watch(Arc<Mutex<Seen>>);

#[derive(Default)]
struct Seen {
    head: Option<Head>,
    writing_since: Option<Instant>,
}

impl Watch {
    fn seen(&self) -> MutexGuard<'_, Seen> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The last record written and synced.
    pub fn head(&self) -> Head {
        self.seen().head.clone().unwrap_or_else(Head::genesis)
    }

    /// How long the record being written has been at it, once that is past
    /// [`STALLED_AFTER`]; `None` while records go through.
    pub fn stalled_for(&self) -> Option<Duration> {
        let since = self.seen().writing_since?;
        Some(since.elapsed()).filter(|d| *d > STALLED_AFTER)
    }
}

/// Marks a record as being written until dropped, however `append` returns.
struct Writing<'a>(&'a Watch);

impl<'a> Writing<'a> {
    fn start(w: &'a Watch) -> Writing<'a> {
        w.seen().writing_since = Some(Instant::now());
        Writing(w)
    }
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        self.0.seen().writing_since = None;
    }
}

impl Audit {
    /// Opens (or creates) the log with the default rotation and continues its chain.
    pub fn open(path: &Path) -> Result<Audit, AuditError> {
        Audit::open_with(path, Rotation::default())
    }

    pub fn open_with(path: &Path, rotation: Rotation) -> Result<Audit, AuditError> {
        let (file, head, size) = continue_chain(path)?;
        let watch = Watch::default();
        watch.seen().head = Some(head.clone());
        Ok(Audit {
            path: path.to_path_buf(),
            sink: Box::new(file),
            head,
            size,
            rotation,
            needs_recovery: false,
            unsynced: false,
            watch,
            before_sync: None,
        })
    }

    pub fn head(&self) -> Head {
        self.head.clone()
    }

    /// The head and the record in progress, readable while a record holds the log.
    pub fn watch(&self) -> Watch {
        self.watch.clone()
    }

    /// Runs `hook` before each record's sync, on the thread writing it: a test stalls the
    /// audit disk with it. Nothing in brokerd sets one.
    pub fn before_sync(&mut self, hook: impl FnMut() + Send + 'static) {
        self.before_sync = Some(Box::new(hook));
    }

    /// Numbers, chains, writes and syncs one record (and any written unsynced before it);
    /// returns the new head.
    pub fn append(&mut self, rec: Record) -> Result<Head, AuditError> {
        self.append_with(rec, true)
    }

    /// Numbers, chains and writes one record without waiting for the disk: for a call's
    /// outcome, whose answer need not wait for it (docs/design.md#audit). It reaches the disk
    /// with [`Audit::sync`] or with the next record `append` writes, whichever is first; a
    /// crash before either loses it, and `audit verify` then names the decision left without
    /// its outcome.
    pub fn append_unsynced(&mut self, rec: Record) -> Result<Head, AuditError> {
        self.append_with(rec, false)
    }

    /// Syncs what [`Audit::append_unsynced`] wrote, if anything.
    pub fn sync(&mut self) -> Result<(), AuditError> {
        if !self.unsynced {
            return Ok(());
        }
        let watch = self.watch.clone();
        let writing = Writing::start(&watch);
        let synced = self.sync_now();
        drop(writing);
        synced
    }

    fn sync_now(&mut self) -> Result<(), AuditError> {
        if let Some(h) = &mut self.before_sync {
            h();
        }
        match self.sink.sync() {
            Ok(()) => {
                self.unsynced = false;
                Ok(())
            }
            Err(e) => {
                self.needs_recovery = true;
                Err(AuditError::Write(e))
            }
        }
    }

    fn append_with(&mut self, rec: Record, sync: bool) -> Result<Head, AuditError> {
        let watch = self.watch.clone();
        let writing = Writing::start(&watch);
        let appended = self.append_now(rec, sync);
        // A failed write may have re-read the chain: the watch follows the head either way.
        watch.seen().head = Some(self.head.clone());
        drop(writing);
        appended
    }

    fn append_now(&mut self, mut rec: Record, sync: bool) -> Result<Head, AuditError> {
        if self.needs_recovery {
            let (file, head, size) = continue_chain(&self.path)?;
            self.sink = Box::new(file);
            self.head = head;
            self.size = size;
            self.needs_recovery = false;
            self.unsynced = false;
        }
        rec.seq = self.head.seq + 1;
        rec.prev = self.head.hash.clone();
        rec.time = now_rfc3339();
        let mut line = serde_json::to_vec(&rec)?;
        let hash = sha256_hex(&line);
        line.push(b'\n');
        let over = self.size + line.len() as u64 > self.rotation.max_bytes;
        if self.rotation.max_bytes > 0 && self.size > 0 && over && is_regular(&self.path) {
            // What the old file holds unsynced reaches its disk before it is renamed away.
            if self.unsynced {
                self.sync_now()?;
            }
            self.rotate()?;
        }
        if let Err(e) = self.sink.put(&line) {
            self.needs_recovery = true;
            return Err(AuditError::Write(e));
        }
        self.unsynced = true;
        if sync {
            self.sync_now()?;
        }
        self.size += line.len() as u64;
        self.head = Head { seq: rec.seq, hash };
        Ok(self.head.clone())
    }

    fn rotate(&mut self) -> Result<(), AuditError> {
        let keep = self.rotation.keep.max(1);
        for k in (1..keep).rev() {
            let from = rotated(&self.path, k);
            if from.exists() {
                std::fs::rename(&from, rotated(&self.path, k + 1)).map_err(AuditError::Rotate)?;
            }
        }
        std::fs::rename(&self.path, rotated(&self.path, 1)).map_err(AuditError::Rotate)?;
        let file = open_append(&self.path).map_err(AuditError::Rotate)?;
        // The renames and the new file must survive a crash together with the next record.
        if let Some(dir) = self.path.parent() {
            let dir = if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            };
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
        self.sink = Box::new(file);
        self.size = 0;
        Ok(())
    }
}

fn rotated(path: &Path, k: usize) -> PathBuf {
    let mut s = path.as_os_str().to_os_string();
    s.push(format!(".{k}"));
    PathBuf::from(s)
}

fn is_regular(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file())
}

fn open_append(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    // Metadata only, but still the owner's business: readable by the service user alone.
    OpenOptions::new()
        .create(true)
        .append(true)
        .read(true)
        .mode(0o600)
        .open(path)
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Opens the file and finds where the chain stands, terminating and recording a torn tail.
fn continue_chain(path: &Path) -> Result<(File, Head, u64), AuditError> {
    let open_err = |source| AuditError::Open {
        path: path.to_path_buf(),
        source,
    };
    let read_err = |source| AuditError::Read {
        path: path.to_path_buf(),
        source,
    };
    let mut file = open_append(path).map_err(open_err)?;
    let len = file.metadata().map_err(read_err)?.len();
    let start = len.saturating_sub(TAIL_BYTES);
    let mut tail = Vec::new();
    if len > 0 {
        file.seek(SeekFrom::Start(start)).map_err(read_err)?;
        (&mut file)
            .take(len - start)
            .read_to_end(&mut tail)
            .map_err(read_err)?;
    }
    let mut lines: Vec<&[u8]> = tail.split(|b| *b == b'\n').collect();
    // After the last newline: empty, or an unterminated fragment.
    let fragment = lines.pop().filter(|f| !f.is_empty());
    if start > 0 && !lines.is_empty() {
        lines.remove(0); // starts mid-line
    }
    // The last complete line that is a record, and a bad complete line after it, if any.
    let mut head = None;
    let mut torn: Option<Vec<u8>> = None;
    for (i, line) in lines.iter().enumerate().rev() {
        if let Ok(rec) = serde_json::from_slice::<Record>(line) {
            head = Some(Head {
                seq: rec.seq,
                hash: sha256_hex(line),
            });
            if lines.len() - i > 2 {
                return Err(AuditError::Corrupt {
                    path: path.to_path_buf(),
                });
            }
            if lines.len() - i == 2 {
                torn = Some(lines[i + 1].to_vec());
            }
            break;
        }
    }
    if head.is_none() && lines.len() > 1 {
        return Err(AuditError::Corrupt {
            path: path.to_path_buf(),
        });
    }
    if head.is_none() && lines.len() == 1 {
        torn = Some(lines[0].to_vec());
    }
    let mut head = match head {
        Some(h) => h,
        // An empty file right after a rotation continues the rotated file's chain.
        None => last_head_of(&rotated(path, 1)).unwrap_or_else(Head::genesis),
    };
    let mut size = len;
    if let Some(frag) = fragment {
        let whole = serde_json::from_slice::<Record>(frag)
            .ok()
            .filter(|r| r.seq == head.seq + 1 && r.prev == head.hash && torn.is_none());
        file.write_all(b"\n").map_err(AuditError::Write)?;
        size += 1;
        match whole {
            // Written but for its newline: it is part of the chain.
            Some(rec) => {
                head = Head {
                    seq: rec.seq,
                    hash: sha256_hex(frag),
                }
            }
            None => {
                if torn.is_some() {
                    return Err(AuditError::Corrupt {
                        path: path.to_path_buf(),
                    });
                }
                torn = Some(frag.to_vec());
            }
        }
    }
    if let Some(t) = torn {
        let rec = Record {
            seq: head.seq + 1,
            prev: head.hash.clone(),
            time: now_rfc3339(),
            kind: RecordKind::TornTail,
            reason: Some("the line before was cut off mid-write (a crash or a full disk)".into()),
            torn_sha256: Some(sha256_hex(&t)),
            torn_bytes: Some(t.len() as u64),
            ..Record::default()
        };
        let mut line = serde_json::to_vec(&rec)?;
        let hash = sha256_hex(&line);
        line.push(b'\n');
        file.write_all(&line).map_err(AuditError::Write)?;
        size += line.len() as u64;
        head = Head { seq: rec.seq, hash };
    }
    if size != len {
        file.sync_data().map_err(AuditError::Write)?;
    }
    Ok((file, head, size))
}

/// The head of a (rotated) file, if it ends in a record.
fn last_head_of(path: &Path) -> Option<Head> {
    let mut f = File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    let start = len.saturating_sub(TAIL_BYTES);
    f.seek(SeekFrom::Start(start)).ok()?;
    let mut buf = Vec::new();
    f.read_to_end(&mut buf).ok()?;
    buf.split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .filter_map(|l| {
            serde_json::from_slice::<Record>(l).ok().map(|r| Head {
                seq: r.seq,
                hash: sha256_hex(l),
            })
        })
        .next_back()
}

/// Checks one file's chain. Its first record may continue a rotated file's chain; a first
/// record with seq 1 must start from the genesis hash.
pub fn verify(path: &Path) -> Result<Head, VerifyError> {
    verify_file(path).map(|(_, head)| head)
}

/// Checks `<path>.N` .. `<path>.1` and `<path>` as one chain.
pub fn verify_rotated(path: &Path) -> Result<Head, VerifyError> {
    let mut files: Vec<PathBuf> = (1..)
        .map(|k| rotated(path, k))
        .take_while(|p| p.exists())
        .collect();
    files.reverse();
    files.push(path.to_path_buf());
    let mut last: Option<Head> = None;
    for f in files {
        let (first, head) = verify_file(&f)?;
        if let Some(prev) = &last {
            if first.seq != prev.seq + 1 {
                return Err(VerifyError::SeqGap {
                    path: f,
                    line: 1,
                    expected: prev.seq + 1,
                    found: first.seq,
                });
            }
            if first.hash != prev.hash {
                return Err(VerifyError::ChainBroken { path: f, line: 1 });
            }
        }
        last = Some(head);
    }
    last.ok_or(VerifyError::Empty {
        path: path.to_path_buf(),
    })
}

/// A call decided to run whose outcome the log does not hold: still running when the log was
/// read, or brokerd stopped (a crash, a power loss) before the outcome reached the disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unfinished {
    pub seq: u64,
    pub session: String,
    pub call: String,
    pub tool: String,
}

impl std::fmt::Display for Unfinished {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "record {}: session {} call {} ({}) was decided to run and has no outcome record: it was still running, or brokerd stopped before its outcome reached the disk",
            self.seq, self.session, self.call, self.tool
        )
    }
}

/// The calls of `<path>.N` .. `<path>` decided to run without an outcome record after them
/// (read after [`verify_rotated`] passed; lines that are not records are skipped).
pub fn unfinished(path: &Path) -> Result<Vec<Unfinished>, VerifyError> {
    let mut files: Vec<PathBuf> = (1..)
        .map(|k| rotated(path, k))
        .take_while(|p| p.exists())
        .collect();
    files.reverse();
    files.push(path.to_path_buf());
    let mut open: Vec<Unfinished> = Vec::new();
    for f in files {
        let bytes = std::fs::read(&f).map_err(|e| VerifyError::Read {
            path: f.clone(),
            error: e.to_string(),
        })?;
        for rec in bytes
            .split(|b| *b == b'\n')
            .filter_map(|l| serde_json::from_slice::<Record>(l).ok())
        {
            let (Some(session), Some(call)) = (rec.session, rec.call) else {
                continue;
            };
            let same = |u: &Unfinished| u.session == session && u.call == call;
            match (rec.decision, rec.status) {
                (Some(Decided::Allow | Decided::Approved), None) => {
                    open.retain(|u| !same(u));
                    open.push(Unfinished {
                        seq: rec.seq,
                        session,
                        call,
                        tool: rec.tool.unwrap_or_default(),
                    });
                }
                (Some(Decided::Ran | Decided::NotRun), _) | (_, Some(_)) => {
                    open.retain(|u| !same(u))
                }
                _ => {}
            }
        }
    }
    Ok(open)
}

/// Returns the first record's (seq, prev) as a Head, and the file's head.
fn verify_file(path: &Path) -> Result<(Head, Head), VerifyError> {
    let bytes = std::fs::read(path).map_err(|e| VerifyError::Read {
        path: path.to_path_buf(),
        error: e.to_string(),
    })?;
    let p = || path.to_path_buf();
    if bytes.is_empty() {
        return Err(VerifyError::Empty { path: p() });
    }
    let terminated = bytes.last() == Some(&b'\n');
    let mut lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
    if terminated {
        lines.pop();
    }
    let mut first: Option<Head> = None;
    let mut head: Option<Head> = None;
    let mut pending_torn: Option<(usize, String)> = None;
    for (i, line) in lines.iter().enumerate() {
        let n = i + 1;
        let last_unterminated = !terminated && i + 1 == lines.len();
        let rec = match serde_json::from_slice::<Record>(line) {
            Ok(r) if !last_unterminated => r,
            _ => {
                if pending_torn.is_some() {
                    return Err(VerifyError::NotARecord {
                        path: p(),
                        line: n - 1,
                    });
                }
                pending_torn = Some((n, sha256_hex(line)));
                continue;
            }
        };
        match &head {
            None => {
                if rec.seq == 1 && rec.prev != GENESIS {
                    return Err(VerifyError::BadGenesis { path: p(), line: n });
                }
                first = Some(Head {
                    seq: rec.seq,
                    hash: rec.prev.clone(),
                });
            }
            Some(h) => {
                if rec.seq != h.seq + 1 {
                    return Err(VerifyError::SeqGap {
                        path: p(),
                        line: n,
                        expected: h.seq + 1,
                        found: rec.seq,
                    });
                }
                if rec.prev != h.hash {
                    return Err(VerifyError::ChainBroken { path: p(), line: n });
                }
            }
        }
        match (rec.kind, pending_torn.take()) {
            (RecordKind::TornTail, Some((_, hash))) => {
                if rec.torn_sha256.as_deref() != Some(hash.as_str()) {
                    return Err(VerifyError::TornMismatch { path: p(), line: n });
                }
            }
            (RecordKind::TornTail, None) => {
                return Err(VerifyError::TornMismatch { path: p(), line: n })
            }
            (_, Some((bad, _))) => {
                return Err(VerifyError::NotARecord {
                    path: p(),
                    line: bad,
                })
            }
            (_, None) => {}
        }
        head = Some(Head {
            seq: rec.seq,
            hash: sha256_hex(line),
        });
    }
    if let Some((bad, _)) = pending_torn {
        return Err(VerifyError::TornTail {
            path: p(),
            line: bad,
        });
    }
    match (first, head) {
        (Some(f), Some(h)) => Ok((f, h)),
        _ => Err(VerifyError::Empty { path: p() }),
    }
}

// ---------------------------------------------------------------------------------------------
// Summaries.

pub use crate::redact::redact;

/// A text from the model (a path, a URL, a command) as a record keeps it: secrets redacted,
/// cut to `MAX_SUMMARY_CHARS`, and shown visibly (`visible`), since a person reads the log.
pub fn summary(text: &str) -> String {
    visible(&cap(&redact(text)))
}

/// A text already safe to show (a refusal reason or a question, rendered when it was made; a
/// text shown through `{:?}`) as a record keeps it: secrets redacted, cut to
/// `MAX_SUMMARY_CHARS`.
pub fn clip(text: &str) -> String {
    cap(&redact(text))
}

fn cap(s: &str) -> String {
    if s.chars().count() <= MAX_SUMMARY_CHARS {
        return s.to_string();
    }
    let mut out: String = s.chars().take(MAX_SUMMARY_CHARS).collect();
    out.push('…');
    out
}

/// The program a shell command runs (as the classifier names it, `Assessment::program`) as a
/// record keeps it: secrets redacted, at most 128 characters, shown visibly.
pub fn executable(program: &str) -> Option<String> {
    (!program.is_empty()).then(|| visible(&redact(program).chars().take(128).collect::<String>()))
}

fn now_rfc3339() -> String {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    format_time(d.as_secs(), d.subsec_millis())
}

fn format_time(secs: u64, millis: u32) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn call(n: u64) -> Record {
        Record {
            kind: RecordKind::Call,
            session: Some("s1".into()),
            call: Some(format!("c{n}")),
            grant: Some("notes".into()),
            tool: Some("shell".into()),
            decision: Some(Decided::Allow),
            class: Some(CommandClass::ReadOnly),
            executable: Some("ls".into()),
            target: Some("ls -la".into()),
            status: Some(Ended::Result),
            duration_ms: Some(12),
            ..Record::default()
        }
    }

    fn lines(path: &Path) -> Vec<String> {
        fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect()
    }

    fn write_lines(path: &Path, lines: &[String]) {
        let mut s = lines.join("\n");
        s.push('\n');
        fs::write(path, s).expect("write");
    }

    #[test]
    fn chain_numbers_and_continues_after_restart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("audit.jsonl");
        let mut a = Audit::open(&path).expect("open");
        assert_eq!(a.head(), Head::genesis());
        for n in 1..=3 {
            let h = a.append(call(n)).expect("append");
            assert_eq!(h.seq, n);
        }
        let head = a.head();
        drop(a);
        let ls = lines(&path);
        assert_eq!(ls.len(), 3);
        let first: Record = serde_json::from_str(&ls[0]).expect("json");
        assert_eq!((first.seq, first.prev.as_str()), (1, GENESIS));
        let second: Record = serde_json::from_str(&ls[1]).expect("json");
        assert_eq!(second.prev, sha256_hex(ls[0].as_bytes()));
        assert_eq!(head.hash, sha256_hex(ls[2].as_bytes()));
        // Reopened: the chain goes on.
        let mut a = Audit::open(&path).expect("reopen");
        assert_eq!(a.head(), head);
        assert_eq!(a.append(call(4)).expect("append").seq, 4);
        assert_eq!(verify(&path).map(|h| h.seq), Ok(4));
    }

    #[test]
    fn records_are_metadata_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("a.jsonl");
        let mut a = Audit::open(&path).expect("open");
        a.append(Record::default()).expect("append");
        let line = &lines(&path)[0];
        // Absent fields are not written; the fields present are fixed by the struct.
        let v: serde_json::Value = serde_json::from_str(line).expect("json");
        let keys: Vec<&str> = v
            .as_object()
            .map(|o| o.keys().map(|k| k.as_str()).collect())
            .unwrap_or_default();
        assert_eq!(keys.len(), 4, "{line}");
        for k in ["seq", "prev", "time", "kind"] {
            assert!(keys.contains(&k), "{k}");
        }
        assert!(v["time"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z') && t.len() == 24));
    }

    #[test]
    fn torn_tails_are_recorded_not_rewritten() {
        // (what the crash left after two good records, expected seq of the head after reopen)
        let cases: &[(&[u8], u64)] = &[
            (b"{\"seq\":3,\"prev\":\"ab", 3),
            (b"garbage line\n", 3),
            (b"\x00\x00\x00", 3),
        ];
        for (i, (tail, head_seq)) in cases.iter().enumerate() {
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join("a.jsonl");
            let mut a = Audit::open(&path).expect("open");
            a.append(call(1)).expect("append");
            a.append(call(2)).expect("append");
            drop(a);
            let before = fs::read(&path).expect("read");
            let mut f = OpenOptions::new().append(true).open(&path).expect("open");
            f.write_all(tail).expect("write");
            drop(f);
            assert!(verify(&path).is_err(), "case {i}: a torn tail is visible");
            let mut a = Audit::open(&path).expect("reopen");
            assert_eq!(a.head().seq, *head_seq, "case {i}");
            let after = fs::read(&path).expect("read");
            // Nothing before was changed; the torn bytes are still there.
            assert!(after.starts_with(&before), "case {i}");
            assert!(after[before.len()..].starts_with(tail), "case {i}");
            let ls = lines(&path);
            let torn: Record = serde_json::from_str(ls.last().map(|s| s.as_str()).unwrap_or(""))
                .expect("torn_tail record");
            assert_eq!(torn.kind, RecordKind::TornTail, "case {i}");
            let torn_line = tail.strip_suffix(b"\n").unwrap_or(tail);
            assert_eq!(torn.torn_sha256, Some(sha256_hex(torn_line)), "case {i}");
            a.append(call(4)).expect("append");
            assert_eq!(verify(&path).map(|h| h.seq), Ok(4), "case {i}");
            // Reopening again changes nothing.
            let len = fs::metadata(&path).expect("meta").len();
            drop(a);
            let a = Audit::open(&path).expect("reopen");
            assert_eq!(fs::metadata(&path).expect("meta").len(), len);
            assert_eq!(a.head().seq, 4);
        }
    }

    #[test]
    fn a_record_missing_only_its_newline_is_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("a.jsonl");
        let mut a = Audit::open(&path).expect("open");
        a.append(call(1)).expect("append");
        let h = a.append(call(2)).expect("append");
        drop(a);
        let bytes = fs::read(&path).expect("read");
        fs::write(&path, &bytes[..bytes.len() - 1]).expect("write");
        let a = Audit::open(&path).expect("reopen");
        assert_eq!(a.head(), h);
        assert_eq!(fs::read(&path).expect("read"), bytes);
    }

    #[test]
    fn verify_finds_tampering() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("a.jsonl");
        let mut a = Audit::open(&path).expect("open");
        for n in 1..=5 {
            a.append(call(n)).expect("append");
        }
        drop(a);
        let good = lines(&path);
        let changed = good[2].replace("\"ls -la\"", "\"rm -rf x\"");
        type Edit = Box<dyn Fn(&mut Vec<String>)>;
        // (edit, expected error)
        let cases: Vec<(Edit, VerifyError)> = vec![
            (
                Box::new(move |l| l[2] = changed.clone()),
                VerifyError::ChainBroken {
                    path: path.clone(),
                    line: 4,
                },
            ),
            (
                Box::new(|l| {
                    l.remove(1);
                }),
                VerifyError::SeqGap {
                    path: path.clone(),
                    line: 2,
                    expected: 2,
                    found: 3,
                },
            ),
            (
                Box::new(|l| l.swap(1, 2)),
                VerifyError::SeqGap {
                    path: path.clone(),
                    line: 2,
                    expected: 2,
                    found: 3,
                },
            ),
            (
                Box::new(|l| {
                    let dup = l[1].clone();
                    l.insert(2, dup);
                }),
                VerifyError::SeqGap {
                    path: path.clone(),
                    line: 3,
                    expected: 3,
                    found: 2,
                },
            ),
            (
                Box::new(|l| l.insert(3, "not json".into())),
                VerifyError::NotARecord {
                    path: path.clone(),
                    line: 4,
                },
            ),
            (
                Box::new(|l| {
                    l.remove(0);
                    // A forged first record: seq renumbered to 1 without the genesis prev.
                    let r: Record = serde_json::from_str(&l[0]).unwrap_or_default();
                    let forged = Record { seq: 1, ..r };
                    l[0] = serde_json::to_string(&forged).unwrap_or_default();
                }),
                VerifyError::BadGenesis {
                    path: path.clone(),
                    line: 1,
                },
            ),
            (
                Box::new(|l| l.clear()),
                VerifyError::Empty { path: path.clone() },
            ),
        ];
        for (i, (edit, want)) in cases.into_iter().enumerate() {
            let mut l = good.clone();
            edit(&mut l);
            if l.is_empty() {
                fs::write(&path, "").expect("write");
            } else {
                write_lines(&path, &l);
            }
            assert_eq!(verify(&path), Err(want), "case {i}");
        }
        write_lines(&path, &good);
        assert_eq!(verify(&path).map(|h| h.seq), Ok(5));
        // A cut-off last line is reported with its line number.
        let mut s = good.join("\n");
        s.push_str("\n{\"seq\":6");
        fs::write(&path, s).expect("write");
        assert_eq!(
            verify(&path),
            Err(VerifyError::TornTail {
                path: path.clone(),
                line: 6
            })
        );
    }

    #[test]
    fn rotation_carries_the_chain() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("a.jsonl");
        let rotation = Rotation {
            max_bytes: 1000,
            keep: 2,
        };
        let mut a = Audit::open_with(&path, rotation).expect("open");
        for n in 1..=20 {
            a.append(call(n)).expect("append");
        }
        let head = a.head();
        assert_eq!(head.seq, 20);
        assert!(rotated(&path, 1).exists() && rotated(&path, 2).exists());
        assert!(!rotated(&path, 3).exists(), "only `keep` files are kept");
        for p in [&path, &rotated(&path, 1), &rotated(&path, 2)] {
            assert!(fs::metadata(p).expect("meta").len() <= 1000);
            assert!(verify(p).is_ok(), "{}", p.display());
        }
        // The current file's first record continues the previous file's last.
        let first: Record = serde_json::from_str(&lines(&path)[0]).expect("json");
        assert_eq!(first.prev, verify(&rotated(&path, 1)).expect("verify").hash);
        assert_eq!(verify(&path), Ok(head.clone()));
        // Both kept files and the current one form one chain.
        assert_eq!(verify_rotated(&path), Ok(head.clone()));
        // A crash right after the rename leaves an empty file: the chain continues from .1.
        drop(a);
        fs::rename(&path, rotated(&path, 1)).expect("rename");
        fs::write(&path, "").expect("write");
        let mut a = Audit::open_with(&path, rotation).expect("reopen");
        assert_eq!(a.head(), head);
        assert_eq!(a.append(call(21)).expect("append").seq, 21);
    }

    /// A sink over a file that counts its syncs.
    struct Counting(File, Arc<Mutex<usize>>);
    impl Sink for Counting {
        fn put(&mut self, buf: &[u8]) -> io::Result<()> {
            Write::write_all(&mut self.0, buf)
        }
        fn sync(&mut self) -> io::Result<()> {
            *self.1.lock().expect("count") += 1;
            Ok(())
        }
    }

    /// An outcome written unsynced is in the file at once and reaches the disk with the next
    /// synced record or an explicit sync, each one sync; nothing pending is no sync at all.
    #[test]
    fn unsynced_records_are_synced_by_the_next_record_or_a_sync() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("a.jsonl");
        let mut a = Audit::open(&path).expect("open");
        let syncs = Arc::new(Mutex::new(0));
        let file = open_append(&path).expect("file");
        a.sink = Box::new(Counting(file, syncs.clone()));
        let n = || *syncs.lock().expect("count");
        a.append(call(1)).expect("decision");
        assert_eq!(n(), 1);
        a.append_unsynced(call(2)).expect("outcome");
        assert_eq!(n(), 1, "the outcome does not wait for the disk");
        assert_eq!(lines(&path).len(), 2, "but it is written");
        assert_eq!(a.head().seq, 2);
        a.append(call(3)).expect("next decision");
        assert_eq!(n(), 2, "one sync covers the outcome and the next record");
        a.sync().expect("nothing pending");
        assert_eq!(n(), 2);
        a.append_unsynced(call(4)).expect("outcome");
        a.sync().expect("sync");
        a.sync().expect("again");
        assert_eq!(n(), 3);
        assert_eq!(verify(&path).map(|h| h.seq), Ok(4));
    }

    /// A decision without its outcome (a crash lost it, or the call still runs) is named by
    /// `unfinished`, across rotated files; a decided call with an outcome, a refusal, and a
    /// record that carries its own status are not.
    #[test]
    fn a_decision_whose_outcome_was_lost_is_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("a.jsonl");
        let rotation = Rotation {
            max_bytes: 600,
            keep: 5,
        };
        let mut a = Audit::open_with(&path, rotation).expect("open");
        let rec = |call: &str, decision: Decided, status: Option<Ended>| Record {
            kind: RecordKind::Call,
            session: Some("s".into()),
            call: Some(call.into()),
            tool: Some("shell".into()),
            decision: Some(decision),
            status,
            ..Record::default()
        };
        a.append(rec("done", Decided::Allow, None)).expect("append");
        a.append_unsynced(rec("done", Decided::Ran, Some(Ended::Result)))
            .expect("append");
        a.append(rec("ref", Decided::Refused, None))
            .expect("append");
        a.append(rec("busy", Decided::Allow, None)).expect("append");
        a.append_unsynced(rec("busy", Decided::NotRun, Some(Ended::Busy)))
            .expect("append");
        a.append(rec("layer", Decided::Allow, Some(Ended::Unavailable)))
            .expect("append");
        a.append(rec("asked", Decided::Ask, None)).expect("append");
        a.append(rec("asked", Decided::Approved, None))
            .expect("append");
        a.append(rec("lost", Decided::Allow, None)).expect("append");
        a.sync().expect("sync");
        assert!(rotated(&path, 1).exists(), "the records span files");
        assert!(verify_rotated(&path).is_ok());
        let open: Vec<(String, u64)> = unfinished(&path)
            .expect("read")
            .into_iter()
            .map(|u| (u.call, u.seq))
            .collect();
        assert_eq!(open, [("asked".to_string(), 8), ("lost".to_string(), 9)]);
        let said = unfinished(&path).expect("read")[1].to_string();
        assert!(
            said.contains("brokerd stopped before its outcome reached the disk"),
            "{said}"
        );
    }

    struct FullDisk;
    impl Sink for FullDisk {
        fn put(&mut self, _: &[u8]) -> io::Result<()> {
            Err(io::Error::from_raw_os_error(libc::ENOSPC))
        }
        fn sync(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    struct HalfWrite(File);
    impl Sink for HalfWrite {
        fn put(&mut self, buf: &[u8]) -> io::Result<()> {
            Write::write_all(&mut self.0, &buf[..buf.len() / 2])?;
            Err(io::Error::from_raw_os_error(libc::ENOSPC))
        }
        fn sync(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_full_disk_is_an_error_and_recovers() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("a.jsonl");
        let mut a = Audit::open(&path).expect("open");
        a.append(call(1)).expect("append");
        a.sink = Box::new(FullDisk);
        assert!(matches!(a.append(call(2)), Err(AuditError::Write(_))));
        assert_eq!(a.head().seq, 1);
        // Half a line reached the disk before it filled up.
        let f = OpenOptions::new().append(true).open(&path).expect("open");
        a.sink = Box::new(HalfWrite(f));
        a.needs_recovery = false; // keep the injected sink for this append
        assert!(matches!(a.append(call(2)), Err(AuditError::Write(_))));
        // Space again: the torn half line is recorded and the chain goes on.
        let h = a.append(call(2)).expect("append after recovery");
        assert_eq!(h.seq, 3);
        assert_eq!(verify(&path), Ok(h));
        // The real thing: /dev/full.
        if Path::new("/dev/full").exists() {
            let mut a = Audit::open(Path::new("/dev/full")).expect("open /dev/full");
            assert!(matches!(a.append(call(1)), Err(AuditError::Write(_))));
        }
    }

    /// The enums of a record are written as the words the log always had.
    #[test]
    fn decisions_statuses_and_classes_keep_their_words_on_disk() {
        let word = |v: serde_json::Value| v.as_str().unwrap_or_default().to_string();
        let decided = [
            (Decided::Allow, "allow"),
            (Decided::Ask, "ask"),
            (Decided::Approved, "approved"),
            (Decided::Declined, "declined"),
            (Decided::Refused, "refused"),
            (Decided::Stopped, "stopped"),
            (Decided::Ran, "ran"),
            (Decided::NotRun, "not_run"),
        ];
        for (d, w) in decided {
            assert_eq!(word(serde_json::json!(d)), w);
        }
        let ended = [
            (Ended::Result, "result"),
            (Ended::Failed, "failed"),
            (Ended::Unavailable, "unavailable"),
            (Ended::Refused, "refused"),
            (Ended::Busy, "busy"),
            (Ended::Cancelled, "cancelled"),
        ];
        for (e, w) in ended {
            assert_eq!((word(serde_json::json!(e)).as_str(), e.as_str()), (w, w));
        }
        for (c, w) in [
            (CommandClass::ReadOnly, "read_only"),
            (CommandClass::WorkspaceMutating, "workspace_mutating"),
            (CommandClass::ShellComplex, "shell_complex"),
            (CommandClass::Dangerous, "dangerous"),
        ] {
            assert_eq!(word(serde_json::json!(c)), w);
        }
        // A line written before the enums reads back the same.
        let line = r#"{"seq":3,"prev":"x","time":"t","kind":"call","decision":"not_run","class":"dangerous","status":"busy"}"#;
        let rec: Record = serde_json::from_str(line).expect("a record");
        assert_eq!(
            (rec.decision, rec.class, rec.status),
            (
                Some(Decided::NotRun),
                Some(CommandClass::Dangerous),
                Some(Ended::Busy)
            )
        );
    }

    #[test]
    fn redaction() {
        let cases = [
            ("ls -la", "ls -la"),
            (
                "GITHUB_TOKEN=abc123 gh pr list",
                "GITHUB_TOKEN=[redacted] gh pr list",
            ),
            ("API_KEY='a b c' curl x", "API_KEY=[redacted] curl x"),
            ("PASSWORD=\"p w\" x", "PASSWORD=[redacted] x"),
            (
                "mysql --password=hunter2 db",
                "mysql --password=[redacted] db",
            ),
            ("export Db_Passwd=x; ls", "export Db_Passwd=[redacted]; ls"),
            (
                "https://a.example/p?q=1&token=abc&x=2",
                "https://a.example/p?q=1&token=[redacted]&x=2",
            ),
            (
                "AUTH_HEADER=x COOKIE=y ls",
                "AUTH_HEADER=[redacted] COOKIE=[redacted] ls",
            ),
            (
                "aws_secret_access_key=k",
                "aws_secret_access_key=[redacted]",
            ),
            ("CREDENTIALS_FILE=/x ls", "CREDENTIALS_FILE=[redacted] ls"),
            ("X=1 NAME=bob ls", "X=1 NAME=bob ls"),
            ("a=b=c", "a=b=c"),
            ("=token", "=token"),
            ("KEY=", "KEY=[redacted]"),
        ];
        for (input, want) in cases {
            assert_eq!(redact(input), want, "{input}");
        }
    }

    #[test]
    fn command_summaries() {
        // (command, executable, target)
        let cases = [
            ("ls -la", Some("ls"), "ls -la"),
            (
                "TOKEN=abc LANG=C curl -s x",
                Some("curl"),
                "TOKEN=[redacted] LANG=C curl -s x",
            ),
            (
                "env A=1 B=2 python3 x.py",
                Some("python3"),
                "env A=1 B=2 python3 x.py",
            ),
            ("'git' status", Some("git"), "'git' status"),
            // From the shell parse, not a whitespace split.
            ("PASSWORD='a b' ls", Some("ls"), "PASSWORD=[redacted] ls"),
            (
                "A=\"x y\" B='1 2' \"git\" push",
                Some("git"),
                "A=\"x y\" B='1 2' \"git\" push",
            ),
            (
                "env -i HOME=/tmp ls -l",
                Some("ls"),
                "env -i HOME=/tmp ls -l",
            ),
            ("cd /srv && make", Some("cd"), "cd /srv && make"),
            ("", None, ""),
            ("X=1", None, "X=1"),
            // The model's control and bidi characters are kept as escapes: the log is read.
            (
                "ls\u{1b}[2J\n\u{202e}txt",
                Some("ls\\x1b[2J"),
                "ls\\x1b[2J\\n\\u{202e}txt",
            ),
            (
                "TOKEN=a\u{202e}b cat 'a\\b'",
                Some("cat"),
                "TOKEN=[redacted] cat 'a\\\\b'",
            ),
        ];
        // The program comes from the classifier's one parse of the command.
        for (cmd, exe, target) in cases {
            let e = crate::classify::classify(cmd, &[])
                .program
                .as_deref()
                .and_then(executable);
            let t = summary(cmd);
            assert_eq!(e.as_deref(), exe, "{cmd}");
            assert_eq!(t, target, "{cmd}");
        }
        let long = "x".repeat(5000);
        assert_eq!(summary(&long).chars().count(), MAX_SUMMARY_CHARS + 1);
        // The cap counts the model's characters; each is then shown whole.
        let long = "\u{1b}".repeat(5000);
        assert_eq!(
            summary(&long),
            format!("{}…", "\\x1b".repeat(MAX_SUMMARY_CHARS))
        );
        assert_eq!(summary("/srv/a\u{200b}b\r"), "/srv/a\\u{200b}b\\r");
        // A text rendered when it was made is not rendered again.
        assert_eq!(
            clip("read_file: a\\nb is outside"),
            "read_file: a\\nb is outside"
        );
    }

    #[test]
    fn times() {
        let cases = [
            (0, 0, "1970-01-01T00:00:00.000Z"),
            (951_782_400, 5, "2000-02-29T00:00:00.005Z"),
            (1_764_480_000, 999, "2025-11-30T05:20:00.999Z"),
            (4_102_444_799, 0, "2099-12-31T23:59:59.000Z"),
        ];
        for (secs, ms, want) in cases {
            assert_eq!(format_time(secs, ms), want);
        }
    }
}
