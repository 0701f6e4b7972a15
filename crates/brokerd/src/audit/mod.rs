//! The audit log (docs/design.md#audit).
//!
//! Append-only JSON lines, metadata only: never file contents or output. Each record carries
//! `seq` (one more than the record before) and `prev`, the hex SHA-256 of the previous line's
//! bytes (without its newline), so a changed, removed, inserted or reordered record breaks the
//! chain; the head (`seq`, hash of the last line) is reported elsewhere so a cut-off tail shows
//! too. A record is written and synced before `append` returns (a decision is on disk before
//! anything runs); `append_unsynced` writes a call's outcome without waiting for the disk, and
//! the next sync covers it. A record that cannot be written makes the call `unavailable`.
//!
//! `mod.rs` holds the record and what it may say (summaries of the model's text, redacted);
//! `log` the open log, its chain, sync and rotation; `verify` the checks of a log on disk.
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

mod log;
#[cfg(test)]
mod tests;
mod verify;

use std::io;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::classify::CommandClass;
use crate::visible::visible;

pub use log::{Audit, Rotation, Watch};
pub use verify::{unfinished, verify, verify_rotated, Unfinished, VerifyError};

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
pub(super) const TAIL_BYTES: u64 = 1024 * 1024;

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

/// How a call ended: a record's `status` (the runner says it of its outcomes).
pub use crate::runner::Ended;

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
    /// The toolset a call's grant runs, when not the base one (docs/design.md#toolsets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toolset: Option<String>,
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
    /// What a shell call's egress proxy did: hosts connected with bytes each way, refusals
    /// by reason (docs/design.md#shell-and-its-egress-proxy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<proto::egress::Summary>,
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

pub use boxmaker_policy::redact::redact;

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
