//! The open log: records numbered, chained, written and synced; rotation; the chain
//! continued after a restart (docs/design.md#audit).

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use super::{
    now_rfc3339, AuditError, Head, Record, RecordKind, DEFAULT_KEEP, DEFAULT_ROTATE_BYTES,
    STALLED_AFTER, TAIL_BYTES,
};

/// Where records go; a test replaces it to fail like a full disk.
pub(super) trait Sink: Send {
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
    pub(super) sink: Box<dyn Sink>,
    head: Head,
    size: u64,
    rotation: Rotation,
    /// A write failed: the file may end in a torn line, handled before the next record.
    pub(super) needs_recovery: bool,
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

pub(super) fn rotated(path: &Path, k: usize) -> PathBuf {
    let mut s = path.as_os_str().to_os_string();
    s.push(format!(".{k}"));
    PathBuf::from(s)
}

fn is_regular(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file())
}

pub(super) fn open_append(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    // Metadata only, but still the owner's business: readable by the service user alone.
    OpenOptions::new()
        .create(true)
        .append(true)
        .read(true)
        .mode(0o600)
        .open(path)
}

pub(super) fn sha256_hex(bytes: &[u8]) -> String {
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
    let (start, tail) = read_tail(&mut file, len).map_err(read_err)?;
    let mut lines: Vec<&[u8]> = tail.split(|b| *b == b'\n').collect();
    // After the last newline: empty, or an unterminated fragment.
    let fragment = lines.pop().filter(|f| !f.is_empty());
    if start > 0 && !lines.is_empty() {
        lines.remove(0); // starts mid-line
    }
    let (head, torn) = last_record(path, &lines)?;
    let mut end = ChainEnd {
        head: match head {
            Some(h) => h,
            // An empty file right after a rotation continues the rotated file's chain.
            None => last_head_of(&rotated(path, 1)).unwrap_or_else(Head::genesis),
        },
        torn,
        size: len,
    };
    if let Some(frag) = fragment {
        end.end_fragment(&mut file, frag, path)?;
    }
    end.record_torn(&mut file)?;
    if end.size != len {
        file.sync_data().map_err(AuditError::Write)?;
    }
    Ok((file, end.head, end.size))
}

/// The file's last [`TAIL_BYTES`] (all of it when shorter), and where they start.
fn read_tail(file: &mut File, len: u64) -> io::Result<(u64, Vec<u8>)> {
    let start = len.saturating_sub(TAIL_BYTES);
    let mut tail = Vec::new();
    if len > 0 {
        file.seek(SeekFrom::Start(start))?;
        file.take(len - start).read_to_end(&mut tail)?;
    }
    Ok((start, tail))
}

/// The head of the last complete line that is a record, and a bad complete line after it
/// (a torn one), if any; more than one bad line after the last record is corruption.
fn last_record(
    path: &Path,
    lines: &[&[u8]],
) -> Result<(Option<Head>, Option<Vec<u8>>), AuditError> {
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
    Ok((head, torn))
}

/// Where the chain stands at the end of the file as it is continued: its head, a torn line
/// still to record, and the file's size.
struct ChainEnd {
    head: Head,
    torn: Option<Vec<u8>>,
    size: u64,
}

impl ChainEnd {
    /// Ends the fragment after the last newline with one: a record written but for its
    /// newline is part of the chain; anything else is a torn line, and a second one after a
    /// torn line is corruption.
    fn end_fragment(
        &mut self,
        file: &mut File,
        frag: &[u8],
        path: &Path,
    ) -> Result<(), AuditError> {
        let whole = serde_json::from_slice::<Record>(frag).ok().filter(|r| {
            r.seq == self.head.seq + 1 && r.prev == self.head.hash && self.torn.is_none()
        });
        file.write_all(b"\n").map_err(AuditError::Write)?;
        self.size += 1;
        match whole {
            // Written but for its newline: it is part of the chain.
            Some(rec) => {
                self.head = Head {
                    seq: rec.seq,
                    hash: sha256_hex(frag),
                }
            }
            None => {
                if self.torn.is_some() {
                    return Err(AuditError::Corrupt {
                        path: path.to_path_buf(),
                    });
                }
                self.torn = Some(frag.to_vec());
            }
        }
        Ok(())
    }

    /// Records the torn line, if any: a record of the chain that says so, with the line's
    /// digest and length.
    fn record_torn(&mut self, file: &mut File) -> Result<(), AuditError> {
        let Some(t) = self.torn.take() else {
            return Ok(());
        };
        let rec = Record {
            seq: self.head.seq + 1,
            prev: self.head.hash.clone(),
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
        self.size += line.len() as u64;
        self.head = Head { seq: rec.seq, hash };
        Ok(())
    }
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
