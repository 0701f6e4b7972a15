//! The egress proxy's command line (docs/design.md#the-egress-proxy): brokerd writes it with
//! [`ProxyArgs::command`], toolkit reads it back with [`ProxyArgs::parse`], so the two cannot
//! drift apart.
//!
//! ```text
//! /bin/toolkit egress-proxy --socket <path> --allow <pattern>[,<pattern>...] [--allow-address <cidr>]...
//!     [--max-connections <n>] [--max-bytes <n>] [--report <path>]
//! ```
//!
//! With `--report`, the proxy appends one [`ReportLine`] of JSON per connection it opens and per
//! connection it ends to that file, for brokerd to read into the call's outcome record
//! (docs/design.md#shell-and-its-egress-proxy).
//!
//! `--allow` may be given more than once (its patterns add up); [`ProxyArgs::to_args`] gives it
//! once, the patterns joined by `,`, and one `--allow-address` per range, in order
//! (docs/design.md#http_fetch-and-its-egress-proxy).

use crate::addr::{self, Cidr, CidrError};
use crate::hosts;
use crate::tools::TOOLKIT;

/// The toolkit subcommand that runs the proxy.
pub const SUBCOMMAND: &str = "egress-proxy";

/// The proxy's synopsis, for its usage messages.
pub const USAGE: &str = "toolkit egress-proxy --socket <path> --allow <pattern>[,<pattern>...] [--allow-address <cidr>]... [--max-connections <n>] [--max-bytes <n>] [--report <path>]";

const SOCKET: &str = "--socket";
const ALLOW: &str = "--allow";
const ALLOW_ADDRESS: &str = "--allow-address";
const MAX_CONNECTIONS: &str = "--max-connections";
const MAX_BYTES: &str = "--max-bytes";
const REPORT: &str = "--report";

/// Where a shell call's proxy writes its report inside its own sandbox: a directory of its
/// own, which the tool's sandbox never sees.
pub const REPORT_DIR: &str = "/run/egress-report";
/// The report file in [`REPORT_DIR`].
pub const REPORT_FILE: &str = "/run/egress-report/connections.jsonl";
/// The most lines a proxy writes to its report; past them it writes none (brokerd reads the
/// report as cut short).
pub const REPORT_MAX_LINES: u64 = 4096;
/// The longest reason a report line carries, in bytes (cut at a character boundary).
pub const REPORT_MAX_REASON: usize = 240;

/// One line of a proxy's report: a connection opened to a server (`open`) or a connection's
/// end (`end`), numbered in the order the proxy accepted them. Never a byte of payload.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportLine {
    /// The connection's number, from 1, in the order the proxy began serving them.
    pub n: u64,
    pub event: ReportEvent,
    /// The host asked for, once read and valid; names that are not are left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The server's address, once connected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addr: Option<String>,
    /// Bytes relayed, client to server and back (`end` only).
    #[serde(default)]
    pub up: u64,
    #[serde(default)]
    pub down: u64,
    /// Whether the connection was relayed at all (`end` only): false is a refusal.
    #[serde(default)]
    pub relayed: bool,
    /// Why it ended: the proxy's reason (`end` only), at most [`REPORT_MAX_REASON`] bytes.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// The most hosts, and the most distinct refusal reasons, a [`Summary`] names; the rest are
/// counted in its totals only.
pub const SUMMARY_MAX_NAMED: usize = 16;

/// What a call's proxy did, as its outcome record carries it: read from the proxy's report.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Summary {
    /// Connections relayed to a server (opened, whether or not they ended).
    pub connections: u64,
    /// Connections refused or closed before any byte was relayed.
    pub refused: u64,
    /// Bytes relayed, all connections together, client to server and back; a connection
    /// still open when the report was read counts what it had not yet reported as 0.
    pub up: u64,
    pub down: u64,
    /// Connections opened that had not ended when the call's answer left.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub open_at_end: u64,
    /// Per host connected, in the order first seen: at most [`SUMMARY_MAX_NAMED`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<HostTally>,
    /// Per refusal reason, in the order first seen: at most [`SUMMARY_MAX_NAMED`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refusals: Vec<RefusalTally>,
    /// Why the report is not the whole story, when it is not: cut at its line bound, a line
    /// that could not be read, or a report that could not be read at all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incomplete: Option<String>,
}

/// One host's connections and bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HostTally {
    pub host: String,
    pub connections: u64,
    pub up: u64,
    pub down: u64,
}

/// One refusal reason and how often it was given.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RefusalTally {
    pub reason: String,
    pub count: u64,
}

/// `reason` cut to [`REPORT_MAX_REASON`] bytes at a character boundary: what the proxy writes
/// and what brokerd takes from a report.
pub fn cut_reason(mut reason: String) -> String {
    if reason.len() > REPORT_MAX_REASON {
        let mut at = REPORT_MAX_REASON;
        while !reason.is_char_boundary(at) {
            at -= 1;
        }
        reason.truncate(at);
    }
    reason
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Summary {
    /// Reads a report's text (whole lines; a last line without its newline is ignored, as a
    /// line still being written). Never fails: what cannot be read is said in `incomplete`.
    pub fn of_report(text: &[u8]) -> Summary {
        let mut s = Summary::default();
        let mut open: std::collections::BTreeMap<u64, Option<String>> = Default::default();
        // Lines of the bounded kind: refusals and closures of connections never opened.
        let mut bounded = 0u64;
        let mut unreadable = 0u64;
        let complete = match text.iter().rposition(|&b| b == b'\n') {
            Some(end) => text[..end].split(|&b| b == b'\n').collect(),
            None => Vec::new(),
        };
        for raw in complete {
            let Ok(line) = serde_json::from_slice::<ReportLine>(raw) else {
                unreadable += 1;
                continue;
            };
            // What the proxy wrote is checked again: a valid name in its comparable form, a
            // reason of bounded length.
            let host = line
                .host
                .as_deref()
                .filter(|h| hosts::valid_host(h))
                .map(hosts::normalize);
            match line.event {
                ReportEvent::Open => {
                    if open.insert(line.n, host.clone()).is_none() {
                        s.connections += 1;
                        if let Some(h) = host {
                            s.tally_host(h, 1, 0, 0);
                        }
                    }
                }
                ReportEvent::End if line.relayed => {
                    let was_open = open.remove(&line.n).is_some();
                    if !was_open {
                        s.connections += 1;
                    }
                    s.up = s.up.saturating_add(line.up);
                    s.down = s.down.saturating_add(line.down);
                    if let Some(h) = host {
                        s.tally_host(h, u64::from(!was_open), line.up, line.down);
                    }
                }
                ReportEvent::End => {
                    // A connection that opened and then failed before relaying is not one.
                    match open.remove(&line.n) {
                        Some(opened_for) => {
                            s.connections -= 1;
                            if let Some(h) = opened_for {
                                s.untally_host(&h);
                            }
                        }
                        None => bounded += 1,
                    }
                    s.refused += 1;
                    s.tally_refusal(cut_reason(line.reason));
                }
            }
        }
        s.open_at_end = open.len() as u64;
        s.incomplete = match (bounded >= REPORT_MAX_LINES, unreadable) {
            (true, _) => Some(format!(
                "the report's refusals stopped at its bound of {REPORT_MAX_LINES} lines"
            )),
            (false, 0) => None,
            (false, n) => Some(format!("{n} lines of the report could not be read")),
        };
        s
    }

    /// One connection fewer for `host` (one that opened and then was not relayed).
    fn untally_host(&mut self, host: &str) {
        if let Some(t) = self.hosts.iter_mut().find(|t| t.host == host) {
            t.connections = t.connections.saturating_sub(1);
        }
    }

    fn tally_host(&mut self, host: String, connections: u64, up: u64, down: u64) {
        let found = self.hosts.iter().position(|t| t.host == host);
        let t = match found {
            Some(i) => &mut self.hosts[i],
            None if self.hosts.len() < SUMMARY_MAX_NAMED => {
                self.hosts.push(HostTally {
                    host,
                    ..HostTally::default()
                });
                let last = self.hosts.len() - 1;
                &mut self.hosts[last]
            }
            None => return,
        };
        t.connections += connections;
        t.up = t.up.saturating_add(up);
        t.down = t.down.saturating_add(down);
    }

    fn tally_refusal(&mut self, reason: String) {
        let room = self.refusals.len() < SUMMARY_MAX_NAMED;
        match self.refusals.iter_mut().find(|t| t.reason == reason) {
            Some(t) => t.count += 1,
            None if room => self.refusals.push(RefusalTally { reason, count: 1 }),
            None => {}
        }
    }

    /// The journal's words for it: counts only, never a name the model chose.
    pub fn counts(&self) -> String {
        format!(
            "{} connections, {} refused, {} bytes up, {} down{}",
            self.connections,
            self.refused,
            self.up,
            self.down,
            match self.open_at_end {
                0 => String::new(),
                n => format!(", {n} open at the end"),
            }
        )
    }
}

/// What a [`ReportLine`] says happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReportEvent {
    Open,
    End,
}

/// What one egress proxy is told: where to listen and what it may reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyArgs {
    /// The Unix socket to listen on, as seen inside the proxy's sandbox.
    pub socket: String,
    /// The grant's host patterns ([`hosts::valid_host_pattern`]), at least one.
    pub allow: Vec<String>,
    /// The grant's `allow_addresses`, each refused by [`addr::parse_allow_address`] if it
    /// reaches a range that is never allowed.
    pub allow_addresses: Vec<Cidr>,
    /// The call's bounds, where it has them (a shell call with `shell_hosts`): how many
    /// connections in all, and how many bytes each way, all connections together.
    pub bounds: Option<Bounds>,
    /// The file to write the report to ([`ReportLine`]), as seen inside the proxy's sandbox.
    pub report: Option<String>,
}

/// A call's bounds on its proxy (docs/design.md#shell-and-its-egress-proxy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Connections accepted over the proxy's life; past them each is closed at once.
    pub connections: u64,
    /// Bytes relayed up (client to server), and as many down, all connections together.
    pub bytes: u64,
}

/// Why an egress proxy command line was refused: toolkit's exit 2.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UsageError {
    #[error("{0} needs a value")]
    MissingValue(String),
    #[error("unknown argument {0:?}")]
    Unknown(String),
    #[error("--socket given twice")]
    SocketTwice,
    #[error("--socket is required")]
    NoSocket,
    #[error("--allow is required")]
    NoAllow,
    #[error("{0:?} is not a host pattern")]
    BadPattern(String),
    #[error("--allow-address {0}")]
    BadAddress(#[from] CidrError),
    #[error("{0} needs a whole number greater than 0, not {1:?}")]
    BadCount(String, String),
    #[error("{0} given twice")]
    Twice(String),
    #[error("--max-connections and --max-bytes go together")]
    HalfBounds,
}

impl ProxyArgs {
    /// The words after the subcommand. `parse` gives back an equal value for every value it
    /// could have produced. Of the values it could not: no pattern, or one that is not a host
    /// pattern, gives a command line toolkit refuses, except that a pattern holding `,` comes
    /// back as two (brokerd's patterns passed the host pattern check, which refuses `,`).
    pub fn to_args(&self) -> Vec<String> {
        let mut a = vec![
            SOCKET.to_string(),
            self.socket.clone(),
            ALLOW.to_string(),
            self.allow.join(","),
        ];
        for cidr in &self.allow_addresses {
            a.push(ALLOW_ADDRESS.to_string());
            a.push(cidr.to_string());
        }
        if let Some(b) = self.bounds {
            a.push(MAX_CONNECTIONS.to_string());
            a.push(b.connections.to_string());
            a.push(MAX_BYTES.to_string());
            a.push(b.bytes.to_string());
        }
        if let Some(r) = &self.report {
            a.push(REPORT.to_string());
            a.push(r.clone());
        }
        a
    }

    /// The whole command inside the proxy's sandbox: [`TOOLKIT`], [`SUBCOMMAND`], then
    /// [`to_args`](Self::to_args).
    pub fn command(&self) -> Vec<String> {
        let mut a = vec![TOOLKIT.to_string(), SUBCOMMAND.to_string()];
        a.extend(self.to_args());
        a
    }

    /// Reads the words after the subcommand: `--socket` exactly once and not empty, `--allow`
    /// at least once with valid host patterns, any number of `--allow-address`, each a range
    /// that reaches nothing never allowed. Flags may come in any order.
    pub fn parse(args: &[String]) -> Result<ProxyArgs, UsageError> {
        let mut socket = None;
        let mut allow = Vec::new();
        let mut allow_addresses = Vec::new();
        let (mut connections, mut bytes) = (None, None);
        let mut report: Option<String> = None;
        let mut it = args.iter();
        while let Some(flag) = it.next() {
            let mut value = || {
                it.next()
                    .ok_or_else(|| UsageError::MissingValue(flag.clone()))
            };
            match flag.as_str() {
                SOCKET => {
                    let v = value()?;
                    if socket.replace(v.clone()).is_some() {
                        return Err(UsageError::SocketTwice);
                    }
                }
                ALLOW => allow.extend(value()?.split(',').map(str::to_string)),
                ALLOW_ADDRESS => allow_addresses.push(addr::parse_allow_address(value()?)?),
                MAX_CONNECTIONS => count(flag, value()?, &mut connections)?,
                MAX_BYTES => count(flag, value()?, &mut bytes)?,
                REPORT => {
                    let v = value()?;
                    if v.is_empty() {
                        return Err(UsageError::MissingValue(REPORT.into()));
                    }
                    if report.replace(v.clone()).is_some() {
                        return Err(UsageError::Twice(REPORT.into()));
                    }
                }
                other => return Err(UsageError::Unknown(other.to_string())),
            }
        }
        let socket = socket.ok_or(UsageError::NoSocket)?;
        if socket.is_empty() {
            return Err(UsageError::MissingValue(SOCKET.into()));
        }
        check_allow(&allow)?;
        let bounds = match (connections, bytes) {
            (Some(connections), Some(bytes)) => Some(Bounds { connections, bytes }),
            (None, None) => None,
            _ => return Err(UsageError::HalfBounds),
        };
        Ok(ProxyArgs {
            socket,
            allow,
            allow_addresses,
            bounds,
            report,
        })
    }
}

/// A count flag's value: digits only, greater than 0, given once.
fn count(flag: &str, value: &str, into: &mut Option<u64>) -> Result<(), UsageError> {
    let bad = || UsageError::BadCount(flag.to_string(), value.to_string());
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let n: u64 = value.parse().map_err(|_| bad())?;
    if n == 0 {
        return Err(bad());
    }
    if into.replace(n).is_some() {
        return Err(UsageError::Twice(flag.to_string()));
    }
    Ok(())
}

/// The rule for the proxy's host patterns: at least one, each a valid host pattern.
pub fn check_allow(allow: &[String]) -> Result<(), UsageError> {
    if allow.is_empty() {
        return Err(UsageError::NoAllow);
    }
    match allow.iter().find(|p| !hosts::valid_host_pattern(p)) {
        Some(bad) => Err(UsageError::BadPattern(bad.clone())),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_string).collect()
    }

    fn cidrs(list: &[&str]) -> Vec<Cidr> {
        list.iter()
            .map(|s| addr::parse_allow_address(s))
            .collect::<Result<_, _>>()
            .unwrap_or_else(|e| panic!("test range: {e}"))
    }

    /// The exact words brokerd's two runners have always written (the golden files under
    /// crates/brokerd/tests/fixtures hold them too).
    #[test]
    fn to_args_is_the_documented_list() {
        let a = ProxyArgs {
            socket: crate::tools::EGRESS_SOCKET.into(),
            allow: vec!["docs.example.org".into(), "*.example.net".into()],
            allow_addresses: cidrs(&["192.0.2.0/24", "2001:db8::/32"]),
            bounds: None,
            report: None,
        };
        assert_eq!(
            a.command(),
            words(
                "/bin/toolkit egress-proxy --socket /run/egress/egress.sock \
                 --allow docs.example.org,*.example.net \
                 --allow-address 192.0.2.0/24 --allow-address 2001:db8::/32"
            )
        );
        let only_hosts = ProxyArgs {
            allow_addresses: vec![],
            ..a
        };
        assert_eq!(
            only_hosts.to_args(),
            words("--socket /run/egress/egress.sock --allow docs.example.org,*.example.net")
        );
    }

    #[test]
    fn parse_gives_back_what_to_args_wrote() {
        let sockets = [
            "/run/egress/egress.sock",
            "/s",
            "relative/path.sock",
            "/a b/ü.sock",
        ];
        let patterns = [
            "example.com",
            "*.example.org",
            "Docs.Example.ORG",
            "xn--bcher-kva.example",
            "a-b.c-d.example",
            "trailing.example.",
        ];
        let ranges = [
            "192.0.2.0/24",
            "10.0.0.7",
            "2001:db8::/32",
            "fd00::1",
            "198.51.100.0/25",
        ];
        let mut cases = 0;
        // Every socket, every non-empty run of patterns, every run of ranges (none included).
        for socket in sockets {
            for start in 0..patterns.len() {
                for end in start + 1..=patterns.len() {
                    for n in 0..=ranges.len() {
                        let mut addrs = ranges[..n].to_vec();
                        // Order is kept, so try it reversed too.
                        if start % 2 == 1 {
                            addrs.reverse();
                        }
                        let x = ProxyArgs {
                            socket: socket.into(),
                            allow: patterns[start..end].iter().map(|p| p.to_string()).collect(),
                            allow_addresses: cidrs(&addrs),
                            bounds: (n % 2 == 1).then_some(Bounds {
                                connections: 64,
                                bytes: 1 << 30,
                            }),
                            report: (start % 3 == 1).then(|| REPORT_FILE.to_string()),
                        };
                        let back = ProxyArgs::parse(&x.to_args());
                        assert_eq!(back.as_ref(), Ok(&x), "{:?}", x.to_args());
                        cases += 1;
                    }
                }
            }
        }
        assert_eq!(cases, 4 * 21 * 6);
    }

    #[test]
    fn parse_accepts_flags_in_any_order_and_allow_more_than_once() {
        let got = ProxyArgs::parse(&words(
            "--allow-address 192.0.2.0/24 --allow a.example --socket /s --allow b.example,*.c.example",
        ));
        assert_eq!(
            got,
            Ok(ProxyArgs {
                socket: "/s".into(),
                allow: vec!["a.example".into(), "b.example".into(), "*.c.example".into()],
                allow_addresses: cidrs(&["192.0.2.0/24"]),
                bounds: None,
                report: None,
            })
        );
    }

    #[test]
    fn parse_refuses_bad_input_clearly() {
        let never = "which is never allowed (loopback, link-local, the tailnet, 0/8, multicast)";
        let rows: Vec<(Vec<String>, String)> = vec![
            (words(""), "--socket is required".into()),
            (words("--allow example.com"), "--socket is required".into()),
            (words("--socket /s"), "--allow is required".into()),
            (words("--socket"), "--socket needs a value".into()),
            (words("--socket /s --allow"), "--allow needs a value".into()),
            (
                words("--socket /s --allow example.com --allow-address"),
                "--allow-address needs a value".into(),
            ),
            (
                vec![
                    "--socket".into(),
                    "".into(),
                    "--allow".into(),
                    "a.example".into(),
                ],
                "--socket needs a value".into(),
            ),
            (
                words("--socket /s --socket /t --allow example.com"),
                "--socket given twice".into(),
            ),
            (
                vec!["--socket".into(), "/s".into(), "--allow".into(), "".into()],
                "\"\" is not a host pattern".into(),
            ),
            (
                words("--socket /s --allow example.com,"),
                "\"\" is not a host pattern".into(),
            ),
            (
                words("--socket /s --allow a.example,,b.example"),
                "\"\" is not a host pattern".into(),
            ),
            (
                words("--socket /s --allow *.com"),
                "\"*.com\" is not a host pattern".into(),
            ),
            (
                words("--socket /s --allow 10.0.0.1"),
                "\"10.0.0.1\" is not a host pattern".into(),
            ),
            (
                words("--socket /s --allow *.example.org."),
                "\"*.example.org.\" is not a host pattern".into(),
            ),
            (
                words("--socket /s --allow example.com --verbose"),
                "unknown argument \"--verbose\"".into(),
            ),
            (
                words("--socket /s --allow=example.com"),
                "unknown argument \"--allow=example.com\"".into(),
            ),
            (
                words("egress-proxy --socket /s --allow example.com"),
                "unknown argument \"egress-proxy\"".into(),
            ),
            (
                words("--socket /s --allow example.com --allow-address nonsense"),
                "--allow-address \"nonsense\" is not an address or a CIDR such as 192.0.2.0/24"
                    .into(),
            ),
            (
                words("--socket /s --allow example.com --allow-address 10.1.2.3/8"),
                "--allow-address \"10.1.2.3/8\" has address bits set past its prefix length; \
                 write 10.0.0.0/8"
                    .into(),
            ),
            (
                words("--socket /s --allow example.com --allow-address 10.0.0.0/33"),
                "--allow-address \"10.0.0.0/33\" has a prefix length longer than the address"
                    .into(),
            ),
            (
                words("--socket /s --allow example.com --allow-address 127.0.0.0/8"),
                format!("--allow-address 127.0.0.0/8 overlaps 127.0.0.0/8, {never}"),
            ),
            (
                words("--socket /s --allow example.com --allow-address 169.254.169.254"),
                format!("--allow-address 169.254.169.254/32 overlaps 169.254.0.0/16, {never}"),
            ),
            (
                words("--socket /s --allow example.com --max-connections 64"),
                "--max-connections and --max-bytes go together".into(),
            ),
            (
                words("--socket /s --allow example.com --max-connections 0 --max-bytes 1"),
                "--max-connections needs a whole number greater than 0, not \"0\"".into(),
            ),
            (
                words("--socket /s --allow example.com --max-connections 1 --max-bytes -1"),
                "--max-bytes needs a whole number greater than 0, not \"-1\"".into(),
            ),
            (
                words("--socket /s --allow example.com --max-connections +5 --max-bytes 1"),
                "--max-connections needs a whole number greater than 0, not \"+5\"".into(),
            ),
            (
                words("--socket /s --allow example.com --max-connections 1 --max-bytes 99999999999999999999"),
                "--max-bytes needs a whole number greater than 0, not \"99999999999999999999\"".into(),
            ),
            (
                words("--socket /s --allow example.com --max-connections 1 --max-connections 2 --max-bytes 1"),
                "--max-connections given twice".into(),
            ),
            (
                words("--socket /s --allow example.com --report /r --report /q"),
                "--report given twice".into(),
            ),
            (
                vec!["--socket".into(), "/s".into(), "--allow".into(), "a.example".into(), "--report".into(), "".into()],
                "--report needs a value".into(),
            ),
            (
                words("--socket /s --allow example.com --allow-address 0.0.0.0/0"),
                format!("--allow-address 0.0.0.0/0 overlaps 127.0.0.0/8, {never}"),
            ),
        ];
        for (args, why) in rows {
            match ProxyArgs::parse(&args) {
                Ok(got) => panic!("{args:?} was accepted as {got:?}"),
                Err(e) => assert_eq!(e.to_string(), why, "{args:?}"),
            }
        }
    }

    /// A report line reads back as written, and a line with a field brokerd does not know,
    /// or that is not JSON, is refused rather than half read.
    #[test]
    fn report_lines_round_trip_and_refuse_the_unknown() {
        let line = ReportLine {
            n: 3,
            event: ReportEvent::End,
            host: Some("ok.test".into()),
            addr: Some("192.0.2.7:443".into()),
            up: 10,
            down: 20,
            relayed: true,
            reason: "closed".into(),
        };
        let text = serde_json::to_string(&line).expect("json");
        assert_eq!(serde_json::from_str::<ReportLine>(&text).ok(), Some(line));
        let open: ReportLine =
            serde_json::from_str(r#"{"n":1,"event":"open","host":"a.test"}"#).expect("open");
        assert_eq!(
            (open.event, open.up, open.relayed),
            (ReportEvent::Open, 0, false)
        );
        for bad in [
            r#"{"n":1,"event":"open","extra":1}"#,
            r#"{"n":1,"event":"close"}"#,
            r#"{"event":"open"}"#,
            "not json",
        ] {
            assert!(serde_json::from_str::<ReportLine>(bad).is_err(), "{bad}");
        }
    }

    /// A report reads into its summary: relayed bytes per host, refusals by reason, a
    /// connection still open, a line being written (no newline yet) left for later, a line
    /// that is not a report line counted, and names past the bound counted but not named.
    #[test]
    fn a_report_reads_into_its_summary() {
        let line =
            |n: u64, event: ReportEvent, host: Option<&str>, up, down, relayed, reason: &str| {
                let mut t = serde_json::to_vec(&ReportLine {
                    n,
                    event,
                    host: host.map(str::to_string),
                    addr: None,
                    up,
                    down,
                    relayed,
                    reason: reason.into(),
                })
                .expect("json");
                t.push(b'\n');
                t
            };
        use ReportEvent::{End, Open};
        let mut text = Vec::new();
        text.extend(line(1, Open, Some("ok.test"), 0, 0, false, ""));
        text.extend(line(2, End, Some("no.test"), 0, 0, false, "not allowed"));
        text.extend(line(3, Open, Some("ok.test"), 0, 0, false, ""));
        text.extend(line(1, End, Some("ok.test"), 10, 200, true, "relayed"));
        text.extend(line(4, End, None, 0, 0, false, "not allowed"));
        text.extend(b"garbage\n");
        text.extend(line(5, Open, Some("b.test"), 0, 0, false, ""));
        text.extend(line(5, End, Some("b.test"), 0, 0, false, "broken pipe"));
        text.extend(br#"{"n":6,"event":"open""#);
        let s = Summary::of_report(&text);
        assert_eq!(
            (s.connections, s.refused, s.up, s.down, s.open_at_end),
            (2, 3, 10, 200, 1)
        );
        assert_eq!(
            s.hosts,
            [
                HostTally {
                    host: "ok.test".into(),
                    connections: 2,
                    up: 10,
                    down: 200
                },
                // Opened, then not relayed: no connection.
                HostTally {
                    host: "b.test".into(),
                    connections: 0,
                    up: 0,
                    down: 0
                },
            ]
        );
        assert_eq!(
            s.refusals,
            [
                RefusalTally {
                    reason: "not allowed".into(),
                    count: 2
                },
                RefusalTally {
                    reason: "broken pipe".into(),
                    count: 1
                },
            ]
        );
        assert_eq!(
            s.incomplete.as_deref(),
            Some("1 lines of the report could not be read")
        );
        assert_eq!(
            s.counts(),
            "2 connections, 3 refused, 10 bytes up, 200 down, 1 open at the end"
        );
        assert_eq!(Summary::of_report(b""), Summary::default());
        // Spellings of a name are one host; an invalid one and an over-long reason written by
        // a proxy that should not have are not taken as given.
        let mut odd = Vec::new();
        odd.extend(line(1, Open, Some("OK.Test."), 0, 0, false, ""));
        odd.extend(line(1, End, Some("ok.test"), 1, 2, true, ""));
        odd.extend(line(2, Open, Some("bad name"), 0, 0, false, ""));
        odd.extend(line(3, End, None, 0, 0, false, &"x".repeat(5000)));
        let s = Summary::of_report(&odd);
        assert_eq!(
            (
                s.connections,
                s.hosts.len(),
                s.hosts[0].host.as_str(),
                s.hosts[0].connections
            ),
            (2, 1, "ok.test", 1)
        );
        assert_eq!(s.refusals[0].reason.len(), REPORT_MAX_REASON);
        // Many names: the first SUMMARY_MAX_NAMED are named, all are counted.
        let mut many = Vec::new();
        for n in 0..40u64 {
            let host = format!("h{n}.test");
            many.extend(line(n, Open, Some(&host), 0, 0, false, ""));
            many.extend(line(n, End, Some(&host), 1, 1, true, ""));
            many.extend(line(
                100 + n,
                End,
                None,
                0,
                0,
                false,
                &format!("reason {n}"),
            ));
        }
        let s = Summary::of_report(&many);
        assert_eq!((s.connections, s.refused, s.up), (40, 40, 40));
        assert_eq!(
            (s.hosts.len(), s.refusals.len()),
            (SUMMARY_MAX_NAMED, SUMMARY_MAX_NAMED)
        );
        assert_eq!(s.incomplete, None);
    }

    #[test]
    fn check_allow_is_the_rule_parse_applies() {
        assert_eq!(check_allow(&[]), Err(UsageError::NoAllow));
        assert_eq!(
            check_allow(&["a.example".into(), "*.com".into()]),
            Err(UsageError::BadPattern("*.com".into()))
        );
        assert_eq!(
            check_allow(&["a.example".into(), "*.b.example".into()]),
            Ok(())
        );
    }

    #[test]
    fn usage_names_every_flag_to_args_writes() {
        assert!(USAGE.starts_with(&format!("toolkit {SUBCOMMAND} ")));
        let a = ProxyArgs {
            socket: "/s".into(),
            allow: vec!["a.example".into()],
            allow_addresses: cidrs(&["192.0.2.0/24"]),
            bounds: Some(Bounds {
                connections: 1,
                bytes: 2,
            }),
            report: Some(REPORT_FILE.into()),
        };
        for flag in a.to_args().iter().filter(|w| w.starts_with("--")) {
            assert!(USAGE.contains(&format!("{flag} <")), "{flag}");
        }
    }
}
