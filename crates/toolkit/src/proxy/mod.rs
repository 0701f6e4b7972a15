//! The egress proxy: `toolkit egress-proxy` (docs/design.md#the-egress-proxy).
//!
//! It listens on a Unix socket and speaks two ways of asking for a tunnel, told apart by the
//! first byte: the part of SOCKS5 (RFC 1928) that `curl --proxy socks5h://` uses (no
//! authentication, CONNECT, a domain name; first byte 5), and HTTP `CONNECT name:443` (a
//! letter), which tools find through `HTTPS_PROXY`. Each connection is checked against the
//! grant's host patterns and port 443, resolved once, and connected to the first address it
//! may dial (`addr::dialable`); then bytes are copied both ways without being looked at, so
//! TLS runs end to end between the client and the server. Over HTTP the same decisions are
//! answered with the statuses of [`Status`].
//!
//! | Input                                              | Answer                         |
//! |----------------------------------------------------|--------------------------------|
//! | greeting without method 0                          | `05 FF`, close                 |
//! | greeting or request not version 5, reserved not 0  | close                          |
//! | command other than CONNECT                         | reply 7, close                 |
//! | address type other than a domain name              | reply 8, close                 |
//! | name invalid or not allowed, port not 443          | reply 2, close                 |
//! | resolution failed, no dialable address             | reply 4, close                 |
//! | connecting failed                                  | reply 5, close                 |
//! | connected                                          | reply 0, copy until both close |
//! | more than 262 bytes, 10 s, or a close mid-way      | close                          |
//! | a 9th connection while 8 are open                  | close at once                  |
//!
//! By concern: `handshake` reads within the byte and time budget, `socks` reads the greeting
//! and the request and knows the replies, `http` reads a CONNECT head and knows the statuses,
//! `dial` checks, resolves and connects, `relay` copies, and `cli` is `toolkit egress-proxy`
//! itself (arguments, socket, accept loop). [`serve`] strings them together for one
//! connection.

mod cli;
mod dial;
mod handshake;
mod http;
pub(crate) mod relay;
mod report;
mod socks;
#[cfg(test)]
mod tests;

pub use cli::{bind, main, run, Limits, Options, StartError, UsageError};
pub use dial::{Dial, SystemDial};
pub use http::Status;
pub use report::Report;
pub use socks::Reply;

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use proto::hosts;

use crate::addr::Cidr;

// The limits docs/design.md#the-egress-proxy fixes.

/// The most bytes of greeting and request read: a request with a 255-byte name is 262 bytes,
/// and no client needs more than that in all.
pub const MAX_HANDSHAKE_BYTES: usize = 262;
/// How long greeting and request together may take to arrive.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long connecting to the server may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How many connections are served at once; more are closed at once.
pub const MAX_CONNECTIONS: usize = 8;
/// How many connections a proxy with bounds (a shell call's) serves at once: each is two
/// threads, and the proxy's sandbox has 64 processes.
pub const MAX_CONNECTIONS_BOUNDED: usize = 16;
/// The only port a connection may go to: https only.
pub const ALLOWED_PORT: u16 = 443;
/// A relayed connection with no byte either way for this long is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// What the proxy allows: the grant's host patterns and the owner's extra address ranges.
#[derive(Debug, Clone)]
pub struct Policy {
    allow: Vec<String>,
    allow_addresses: Vec<Cidr>,
    handshake_timeout: Duration,
    connect_timeout: Duration,
    idle_timeout: Duration,
    /// The call's byte bound each way and what it has relayed, all connections together.
    meter: Option<Arc<Meter>>,
    /// Where each connection's opening and end are written (`--report`).
    report: Option<Arc<Report>>,
}

/// Bytes relayed by one proxy, up and down, against its bound (`--max-bytes`).
#[derive(Debug)]
pub struct Meter {
    max: u64,
    up: AtomicU64,
    down: AtomicU64,
}

impl Meter {
    pub fn new(max: u64) -> Meter {
        Meter {
            max,
            up: AtomicU64::new(0),
            down: AtomicU64::new(0),
        }
    }
}

impl Policy {
    /// The patterns follow the command line's rule (`proto::egress::check_allow`: at least one,
    /// each a valid host pattern). The CIDRs are taken as given:
    /// `main` refuses never-allowed ones at start-up, and `addr::dialable` refuses those
    /// addresses whatever the list holds.
    pub fn new(allow: Vec<String>, allow_addresses: Vec<Cidr>) -> Result<Policy, UsageError> {
        proto::egress::check_allow(&allow)?;
        Ok(Policy {
            allow,
            allow_addresses,
            handshake_timeout: HANDSHAKE_TIMEOUT,
            connect_timeout: CONNECT_TIMEOUT,
            idle_timeout: IDLE_TIMEOUT,
            meter: None,
            report: None,
        })
    }

    /// Writes each connection's opening and end to `report`.
    pub fn with_report(mut self, report: Report) -> Policy {
        self.report = Some(Arc::new(report));
        self
    }

    /// The report, where there is one.
    pub fn report(&self) -> Option<&Report> {
        self.report.as_deref()
    }

    /// Bounds the bytes relayed each way, all connections served with this policy together.
    pub fn with_max_bytes(mut self, max: u64) -> Policy {
        self.meter = Some(Arc::new(Meter::new(max)));
        self
    }

    /// Replaces the idle timeout of relayed connections (tests use a short one).
    pub fn with_idle_timeout(mut self, timeout: Duration) -> Policy {
        self.idle_timeout = timeout;
        self
    }

    /// Replaces the handshake deadline (tests use a short one).
    pub fn with_handshake_timeout(mut self, timeout: Duration) -> Policy {
        self.handshake_timeout = timeout;
        self
    }

    /// Replaces the connect timeout handed to `Dial::connect`.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Policy {
        self.connect_timeout = timeout;
        self
    }

    fn allows_host(&self, host: &str) -> bool {
        hosts::valid_host(host) && self.allow.iter().any(|p| hosts::host_matches(p, host))
    }
}

/// A byte stream the proxy can serve: a Unix socket from curl, or the TCP connection to the
/// server. Methods take `&self` so the two copy directions can share one stream.
pub trait Conn: Send + Sync {
    fn read_into(&self, buf: &mut [u8]) -> io::Result<usize>;
    fn write_all_from(&self, buf: &[u8]) -> io::Result<()>;
    fn set_read_deadline(&self, timeout: Option<Duration>) -> io::Result<()>;
    fn set_write_deadline(&self, timeout: Option<Duration>) -> io::Result<()>;
    fn shutdown_half(&self, how: Shutdown) -> io::Result<()>;
    /// The connection's socket, where it has one: the relay then moves bytes with `splice(2)`
    /// through a pipe, never through this process's memory.
    fn socket_fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }
}

macro_rules! impl_conn {
    ($t:ty) => {
        impl Conn for $t {
            fn read_into(&self, buf: &mut [u8]) -> io::Result<usize> {
                let mut s: &$t = self;
                Read::read(&mut s, buf)
            }
            fn write_all_from(&self, buf: &[u8]) -> io::Result<()> {
                let mut s: &$t = self;
                Write::write_all(&mut s, buf)
            }
            fn set_read_deadline(&self, timeout: Option<Duration>) -> io::Result<()> {
                self.set_read_timeout(timeout)
            }
            fn set_write_deadline(&self, timeout: Option<Duration>) -> io::Result<()> {
                self.set_write_timeout(timeout)
            }
            fn shutdown_half(&self, how: Shutdown) -> io::Result<()> {
                self.shutdown(how)
            }
            fn socket_fd(&self) -> Option<BorrowedFd<'_>> {
                Some(self.as_fd())
            }
        }
    };
}

impl_conn!(UnixStream);
impl_conn!(TcpStream);

/// Why a connection ended the way it did; the log line's reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    NotSocks5,
    NoAcceptableMethod,
    BadRequest,
    TooLong,
    HandshakeTimeout,
    ClosedEarly,
    Io(String),
    Command(u8),
    AddressType(u8),
    NameNotText,
    InvalidHost,
    HostNotAllowed,
    Port(u16),
    ResolveFailed(String),
    NoDialableAddress(Vec<IpAddr>),
    ConnectFailed(SocketAddr, String),
    /// An HTTP method other than CONNECT (at most its first 32 bytes).
    Method(String),
    /// An HTTP CONNECT to an address, not a name.
    IpLiteral,
    Relayed {
        addr: SocketAddr,
        up: u64,
        down: u64,
    },
    /// Relayed until the call's bytes each way (`--max-bytes`) were spent.
    BytesSpent {
        addr: SocketAddr,
        up: u64,
        down: u64,
    },
    /// Relayed until no byte moved either way for the idle timeout.
    Idle {
        addr: SocketAddr,
        up: u64,
        down: u64,
    },
    /// The call's connections (`--max-connections`) were all used.
    ConnectionsSpent(u64),
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::NotSocks5 => write!(f, "the greeting is neither SOCKS5 nor HTTP"),
            Reason::NoAcceptableMethod => write!(f, "the greeting does not offer method 0"),
            Reason::BadRequest => write!(
                f,
                "the request is malformed (SOCKS5: not version 5 or its reserved byte set; HTTP: not a request line, or a target not name:port)"
            ),
            Reason::TooLong => write!(
                f,
                "the handshake is longer than {MAX_HANDSHAKE_BYTES} bytes (SOCKS5) or {} (HTTP)",
                http::MAX_HEAD_BYTES
            ),
            Reason::HandshakeTimeout => write!(f, "the handshake did not arrive in time"),
            Reason::ClosedEarly => write!(f, "the client closed during the handshake"),
            Reason::Io(e) => write!(f, "{e}"),
            Reason::Command(c) => write!(f, "command {c} is not CONNECT"),
            Reason::AddressType(t) => write!(f, "address type {t} is not a domain name"),
            Reason::NameNotText => write!(f, "the name is not text"),
            Reason::InvalidHost => write!(f, "the name is not a valid host"),
            Reason::HostNotAllowed => write!(f, "the host matches no --allow pattern"),
            Reason::Port(p) => write!(f, "port {p} is not {ALLOWED_PORT}"),
            Reason::ResolveFailed(e) => write!(f, "resolution failed: {e}"),
            Reason::NoDialableAddress(ips) => {
                write!(f, "no public or allowed address among [")?;
                for (i, ip) in ips.iter().enumerate() {
                    write!(f, "{}{ip}", if i == 0 { "" } else { ", " })?;
                }
                write!(f, "]")
            }
            Reason::ConnectFailed(a, e) => write!(f, "connecting to {a} failed: {e}"),
            Reason::Method(m) => write!(f, "method {m:?} is not CONNECT"),
            Reason::IpLiteral => write!(f, "the target is an IP address, not a name"),
            Reason::Relayed { addr, up, down } => {
                write!(f, "relayed via {addr}: {up} bytes up, {down} bytes down")
            }
            Reason::BytesSpent { addr, up, down } => write!(
                f,
                "relayed via {addr}: {up} bytes up, {down} bytes down, cut: the call's bytes are spent"
            ),
            Reason::Idle { addr, up, down } => write!(
                f,
                "relayed via {addr}: {up} bytes up, {down} bytes down, closed: idle for {} s",
                IDLE_TIMEOUT.as_secs()
            ),
            Reason::ConnectionsSpent(n) => {
                write!(f, "closed: the call's {n} connections are used")
            }
        }
    }
}

/// Which protocol a client spoke, told by its first byte: 5 for SOCKS5, a letter for HTTP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Socks5,
    Http,
}

/// What happened on one connection: the log line (never the payload).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub protocol: Protocol,
    /// The requested host and port, once read (names from the socket are shown escaped).
    pub target: Option<(String, u16)>,
    /// The decision sent, if any: as this SOCKS5 reply, or over HTTP as its [`Status`].
    pub reply: Option<Reply>,
    pub reason: Reason,
}

impl Outcome {
    /// The bytes that answer this outcome before the close, if any.
    fn answer(&self) -> Option<Vec<u8>> {
        match self.protocol {
            Protocol::Socks5 => self.reply.map(|r| r.bytes().to_vec()),
            Protocol::Http => Status::for_outcome(self.reply, &self.reason).map(Status::bytes),
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.target {
            Some((host, port)) => write!(f, "{host:?} port {port}: ")?,
            None => write!(f, "-: ")?,
        }
        match (self.protocol, self.reply) {
            (Protocol::Socks5, Some(r)) => write!(f, "reply {r}: {}", self.reason),
            (Protocol::Http, _) => match Status::for_outcome(self.reply, &self.reason) {
                Some(s) => write!(f, "HTTP {s}: {}", self.reason),
                None => write!(f, "closed: {}", self.reason),
            },
            (Protocol::Socks5, None) => write!(f, "closed: {}", self.reason),
        }
    }
}

/// Serves one connection from greeting to close and says what happened. Never panics on what
/// the client sends; every path ends with the streams dropped, that is closed. With a report,
/// the connection is numbered and its opening and end are written to it.
pub fn serve<C: Conn>(client: C, policy: &Policy, dial: &dyn Dial) -> Outcome {
    let n = policy.report().map(Report::number);
    let (outcome, answer) = serve_connection(&client, policy, dial, n);
    // The end goes on record before the client can learn it: a client that reads its refusal,
    // or sees its connection closed, may end the call at once, and brokerd stops the proxy
    // with the call.
    if let (Some(report), Some(n)) = (policy.report(), n) {
        report.ended(n, &outcome);
    }
    if let Some(answer) = answer {
        // The close follows whether or not the answer could be written.
        let _ = client.write_all_from(&answer);
    }
    outcome
}

/// One connection until its end is known, and the refusal to answer it with, if any.
fn serve_connection<C: Conn>(
    client: &C,
    policy: &Policy,
    dial: &dyn Dial,
    n: Option<u64>,
) -> (Outcome, Option<Vec<u8>>) {
    let mut outcome = Outcome {
        protocol: Protocol::Socks5,
        target: None,
        reply: None,
        reason: Reason::ClosedEarly,
    };
    // A client that does not read cannot hold a reply write forever.
    if let Err(e) = client.set_write_deadline(Some(policy.handshake_timeout)) {
        outcome.reason = Reason::Io(e.to_string());
        return (outcome, None);
    }
    let opened = read_request(client, policy, &mut outcome)
        .and_then(|(name, port)| dial::open(&name, port, policy, dial, &mut outcome));
    let server = match opened {
        Ok(server) => server,
        Err(reason) => {
            outcome.reason = reason;
            let answer = outcome.answer();
            return (outcome, answer);
        }
    };
    let addr = match server.peer_addr() {
        Ok(a) => a,
        Err(e) => {
            outcome.reason = Reason::Io(e.to_string());
            return (outcome, None);
        }
    };
    outcome.reply = Some(Reply::Succeeded);
    if let (Some(report), Some(n), Some((host, _))) = (policy.report(), n, &outcome.target) {
        report.opened(n, host, addr);
    }
    let established = match outcome.protocol {
        Protocol::Socks5 => Reply::Succeeded.bytes().to_vec(),
        Protocol::Http => Status::Established.bytes(),
    };
    if let Err(e) = client.write_all_from(&established) {
        outcome.reason = Reason::Io(e.to_string());
        return (outcome, None);
    }
    // From here on nothing is parsed: the connection lasts as long as both ends keep it and
    // bytes move, which the client's own time limit and the sandbox's life bound.
    let relayed = relay::relay(
        client,
        &server,
        policy.idle_timeout,
        policy.meter.as_deref(),
    );
    let (up, down) = (relayed.up, relayed.down);
    outcome.reason = match relayed.ended {
        relay::Ended::Closed => Reason::Relayed { addr, up, down },
        relay::Ended::BytesSpent => Reason::BytesSpent { addr, up, down },
        relay::Ended::Idle => Reason::Idle { addr, up, down },
    };
    (outcome, None)
}

/// The handshake, SOCKS5 or HTTP by its first byte, within the handshake deadline: the
/// requested name, still bytes, and port.
fn read_request<C: Conn>(
    client: &C,
    policy: &Policy,
    outcome: &mut Outcome,
) -> Result<(Vec<u8>, u16), Reason> {
    let mut hs = handshake::Handshake::new(client, policy.handshake_timeout, MAX_HANDSHAKE_BYTES);
    match hs.byte()? {
        5 => socks::read_request(&mut hs, outcome),
        first if first.is_ascii_alphabetic() => {
            outcome.protocol = Protocol::Http;
            hs.set_limit(http::MAX_HEAD_BYTES);
            http::read_request(&mut hs, first, outcome)
        }
        _ => Err(Reason::NotSocks5),
    }
}
