//! The proxy's report (`--report <path>`): one line of JSON ([`ReportLine`]) per connection
//! opened to a server and per connection ended, for brokerd to read into the call's outcome
//! record (docs/design.md#shell-and-its-egress-proxy). Never a byte of payload.
//!
//! Each line goes out in one `write` on a file opened for appending, so brokerd, reading while
//! the proxy runs, sees whole lines. At most [`REPORT_MAX_LINES`] are written; past them none,
//! and brokerd reads a report of that length as cut short.

use std::fs::File;
use std::io::{self, Write};
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use proto::egress::{ReportEvent, ReportLine, REPORT_MAX_LINES, REPORT_MAX_REASON};
use proto::hosts;

use super::{Outcome, Reason};

/// An open report file and its counters.
#[derive(Debug)]
pub struct Report {
    file: Mutex<File>,
    /// Connections numbered so far.
    numbered: AtomicU64,
    /// Lines written so far.
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
        self.write(&ReportLine {
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
        self.write(&ReportLine {
            n,
            event: ReportEvent::End,
            host: outcome.target.as_ref().and_then(|(h, _)| shown_host(h)),
            addr,
            up,
            down,
            relayed,
            reason: cut(outcome.reason.to_string()),
        });
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
            reason: cut(reason.to_string()),
        });
    }

    fn write(&self, line: &ReportLine) {
        if self.written.fetch_add(1, Ordering::SeqCst) >= REPORT_MAX_LINES {
            return;
        }
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

/// A host name as the report carries it: only a valid one, the model's other bytes never.
fn shown_host(host: &str) -> Option<String> {
    hosts::valid_host(host).then(|| host.to_string())
}

/// `text` cut to [`REPORT_MAX_REASON`] bytes at a character boundary.
fn cut(mut text: String) -> String {
    if text.len() > REPORT_MAX_REASON {
        let mut at = REPORT_MAX_REASON;
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        text.truncate(at);
    }
    text
}
