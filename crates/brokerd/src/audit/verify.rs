//! Checking the chain of a log and its rotated files, and finding the calls it holds no
//! outcome for (docs/design.md#audit).

use std::path::{Path, PathBuf};

use super::log::{rotated, sha256_hex};

use super::{Decided, Head, Record, RecordKind, GENESIS};

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

/// Checks one file's chain. Its first record may continue a rotated file's chain; a first
/// record with seq 1 must start from the genesis hash.
pub fn verify(path: &Path) -> Result<Head, VerifyError> {
    verify_file(path).map(|(_, head)| head)
}

/// The files of one chain, oldest first: `<path>.N` .. `<path>.1` (as many as exist from `.1`
/// on), then `<path>`.
fn chain_files(path: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = (1..)
        .map(|k| rotated(path, k))
        .take_while(|p| p.exists())
        .collect();
    files.reverse();
    files.push(path.to_path_buf());
    files
}

/// Checks `<path>.N` .. `<path>.1` and `<path>` as one chain.
pub fn verify_rotated(path: &Path) -> Result<Head, VerifyError> {
    let files = chain_files(path);
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
    let files = chain_files(path);
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
