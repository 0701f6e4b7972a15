//! The proxy's report (`--report <path>`): one line of JSON ([`ReportLine`]) per connection
//! opened to a server and per connection ended, for brokerd to read into the call's outcome
//! record (docs/design.md#shell-and-its-egress-proxy). Never a byte of payload.
//!
//! Each line goes out in one `write` on a file opened for appending, so brokerd, reading while
//! the proxy runs, sees whole lines. Lines of refusals and of connections closed unserved are
//! at most [`REPORT_MAX_LINES`]; past them none (brokerd reads a report with that many as cut
//! short). The lines of a connection relayed to a server, its opening and its end, are always
//! written, so that no flood of refusals can hide a tunnel's bytes: there are at most
//! `--max-connections` of those.
//!
//! A line for a connection opened has its number, the host and the address; one for its end,
//! bytes each way, whether it was relayed, the reason, and the host when it was a valid name, in
//! its comparable form: never other bytes the model sent, not even an HTTP method it made up.

use std::fs::File;
use std::io::{self, Write};
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use proto::egress::{cut_reason, ReportEvent, ReportLine, REPORT_MAX_LINES};
use proto::hosts;

use super::{Outcome, Reason, Reply};

/// An open report file and its counters.
#[derive(Debug)]
pub struct Report {
    file: Mutex<File>,
    /// Connections numbered so far.
    numbered: AtomicU64,
    /// Lines of refusals and closures written so far (the bounded kind).
    written: AtomicU64,
}

impl Report {
    /// Makes the report file, which must not exist (brokerd makes its directory fresh for each
    /// call): never follows a link, never appends to someone else's file.
    pub fn create(path: &Path) -> io::Result<Report> {
        let file = std::fs::OpenOptions::new()
            .append(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)?;
        Ok(Report {
            file: Mutex::new(file),
            numbered: AtomicU64::new(0),
            written: AtomicU64::new(0),
        })
    }

    /// The next connection's number, from 1.
    pub fn number(&self) -> u64 {
        self.numbered.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Connection `n` reached `addr` for `host`.
    pub fn opened(&self, n: u64, host: &str, addr: SocketAddr) {
        self.write_always(&ReportLine {
            n,
            event: ReportEvent::Open,
            host: shown_host(host),
            addr: Some(addr.to_string()),
            up: 0,
            down: 0,
            relayed: false,
            reason: String::new(),
        });
    }

    /// Connection `n` ended as `outcome` says.
    pub fn ended(&self, n: u64, outcome: &Outcome) {
        let (addr, up, down, relayed) = match &outcome.reason {
            Reason::Relayed { addr, up, down }
            | Reason::BytesSpent { addr, up, down }
            | Reason::Idle { addr, up, down } => (Some(addr.to_string()), *up, *down, true),
            Reason::ConnectFailed(addr, _) => (Some(addr.to_string()), 0, 0, false),
            _ => (None, 0, 0, false),
        };
        let line = ReportLine {
            n,
            event: ReportEvent::End,
            host: outcome.target.as_ref().and_then(|(h, _)| shown_host(h)),
            addr,
            up,
            down,
            relayed,
            reason: cut_reason(reason_text(&outcome.reason)),
        };
        // A connection that was opened has its end written whatever came before.
        match outcome.reply {
            Some(Reply::Succeeded) => self.write_always(&line),
            _ => self.write(&line),
        }
    }

    /// A connection closed by the accept loop before it was served (`reason`).
    pub fn closed_unserved(&self, reason: &str) {
        let n = self.number();
        self.write(&ReportLine {
            n,
            event: ReportEvent::End,
            host: None,
            addr: None,
            up: 0,
            down: 0,
            relayed: false,
            reason: cut_reason(reason.to_string()),
        });
    }

    /// A line of the bounded kind: refusals and closures.
    fn write(&self, line: &ReportLine) {
        if self.written.fetch_add(1, Ordering::SeqCst) >= REPORT_MAX_LINES {
            return;
        }
        self.write_always(line);
    }

    fn write_always(&self, line: &ReportLine) {
        let Ok(mut text) = serde_json::to_vec(line) else {
            return;
        };
        text.push(b'\n');
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        // A report that cannot be written costs the record, never the connection; the line
        // on standard error still says what happened.
        if let Err(e) = file.write_all(&text) {
            eprintln!("egress-proxy: the report could not be written: {e}");
        }
    }
}

/// A host name as the report carries it: only a valid one, in its comparable form (lower
/// case, no trailing dot), so that spellings of one name are one host; the model's other bytes
/// never.
fn shown_host(host: &str) -> Option<String> {
    hosts::valid_host(host).then(|| hosts::normalize(host))
}

/// Why a connection ended, as the report says it: the proxy's reason, except that a method
/// the client sent is not repeated (its bytes are the model's).
fn reason_text(reason: &Reason) -> String {
    match reason {
        Reason::Method(_) => "the method is not CONNECT".to_string(),
        other => other.to_string(),
    }
}
