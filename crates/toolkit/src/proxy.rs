//! The egress proxy: `toolkit egress-proxy` (seed 003 section 5).
//!
//! It listens on a Unix socket and speaks the part of SOCKS5 (RFC 1928) that
//! `curl --proxy socks5h://` uses: no authentication, CONNECT, a domain name. Each connection
//! is checked against the grant's host patterns and port 443, resolved once, and connected to
//! the first address it may dial (`addr::dialable`); then bytes are copied both ways without
//! being looked at, so TLS runs end to end between curl and the server.
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

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpStream};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use proto::hosts;

use crate::addr::{self, Cidr, CidrError};
use crate::dns::{DnsError, Resolver, RESOLV_CONF};

/// The most bytes of greeting and request read (section 5): a request with a 255-byte name is
/// 262 bytes, and no client needs more than that in all.
pub const MAX_HANDSHAKE_BYTES: usize = 262;
/// How long greeting and request together may take to arrive (section 5).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long connecting to the server may take (section 5).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How many connections are served at once; more are closed at once (section 5).
pub const MAX_CONNECTIONS: usize = 8;
/// The only port a connection may go to (section 5): http_fetch is https only.
pub const ALLOWED_PORT: u16 = 443;
/// The copy buffer of each direction.
const RELAY_BUFFER: usize = 64 * 1024;

const USAGE: &str =
    "usage: toolkit egress-proxy --socket <path> --allow <pattern>[,<pattern>...] [--allow-address <cidr>]...";

/// Name resolution and connecting, behind a trait so that no test needs a network
/// (section 5).
pub trait Dial: Send + Sync {
    fn resolve(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>>;
    fn connect(&self, addr: SocketAddr, timeout: Duration) -> std::io::Result<TcpStream>;
}

/// The real world: the nameservers of resolv.conf and a TCP connection.
#[derive(Debug, Clone)]
pub struct SystemDial {
    resolver: Resolver,
}

impl SystemDial {
    pub fn new(resolver: Resolver) -> SystemDial {
        SystemDial { resolver }
    }

    /// Reads the nameservers from `path` (normally `/etc/resolv.conf`).
    pub fn from_resolv_conf(path: &Path) -> Result<SystemDial, DnsError> {
        Resolver::from_resolv_conf(path).map(SystemDial::new)
    }
}

impl Dial for SystemDial {
    fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
        let ips = self.resolver.lookup(host).map_err(io::Error::other)?;
        Ok(ips
            .into_iter()
            .map(|ip| SocketAddr::new(ip, port))
            .collect())
    }

    fn connect(&self, addr: SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
        let stream = TcpStream::connect_timeout(&addr, timeout)?;
        // The relay forwards whatever arrives at once; Nagle would only delay TLS handshakes.
        let _ = stream.set_nodelay(true);
        Ok(stream)
    }
}

/// The SOCKS5 reply codes this proxy sends (RFC 1928 section 6, the ones section 5 names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Reply {
    Succeeded = 0,
    NotAllowed = 2,
    HostUnreachable = 4,
    ConnectionRefused = 5,
    CommandNotSupported = 7,
    AddressTypeNotSupported = 8,
}

impl Reply {
    /// The ten bytes sent: the bound address is never told (all zeros, IPv4).
    pub fn bytes(self) -> [u8; 10] {
        [5, self as u8, 0, 1, 0, 0, 0, 0, 0, 0]
    }
}

impl fmt::Display for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            Reply::Succeeded => "succeeded",
            Reply::NotAllowed => "not allowed",
            Reply::HostUnreachable => "host unreachable",
            Reply::ConnectionRefused => "connection refused",
            Reply::CommandNotSupported => "command not supported",
            Reply::AddressTypeNotSupported => "address type not supported",
        };
        write!(f, "{} ({text})", *self as u8)
    }
}

/// What the proxy allows: the grant's host patterns and the owner's extra address ranges.
#[derive(Debug, Clone)]
pub struct Policy {
    allow: Vec<String>,
    allow_addresses: Vec<Cidr>,
    handshake_timeout: Duration,
    connect_timeout: Duration,
}

impl Policy {
    /// Every pattern must be a valid host pattern (proto::hosts). The CIDRs are taken as given:
    /// `main` refuses never-allowed ones at start-up, and `addr::dialable` refuses those
    /// addresses whatever the list holds.
    pub fn new(allow: Vec<String>, allow_addresses: Vec<Cidr>) -> Result<Policy, UsageError> {
        if allow.is_empty() {
            return Err(UsageError::NoAllow);
        }
        if let Some(bad) = allow.iter().find(|p| !hosts::valid_host_pattern(p)) {
            return Err(UsageError::BadPattern(bad.clone()));
        }
        Ok(Policy {
            allow,
            allow_addresses,
            handshake_timeout: HANDSHAKE_TIMEOUT,
            connect_timeout: CONNECT_TIMEOUT,
        })
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
    Relayed {
        addr: SocketAddr,
        up: u64,
        down: u64,
    },
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::NotSocks5 => write!(f, "the greeting is not SOCKS5"),
            Reason::NoAcceptableMethod => write!(f, "the greeting does not offer method 0"),
            Reason::BadRequest => {
                write!(f, "the request is not SOCKS5 or its reserved byte is set")
            }
            Reason::TooLong => write!(
                f,
                "the handshake is longer than {MAX_HANDSHAKE_BYTES} bytes"
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
            Reason::Relayed { addr, up, down } => {
                write!(f, "relayed via {addr}: {up} bytes up, {down} bytes down")
            }
        }
    }
}

/// What happened on one connection: the log line (never the payload).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The requested host and port, once read (names from the socket are shown escaped).
    pub target: Option<(String, u16)>,
    /// The reply sent, if any.
    pub reply: Option<Reply>,
    pub reason: Reason,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.target {
            Some((host, port)) => write!(f, "{host:?} port {port}: ")?,
            None => write!(f, "-: ")?,
        }
        match self.reply {
            Some(r) => write!(f, "reply {r}: {}", self.reason),
            None => write!(f, "closed: {}", self.reason),
        }
    }
}

/// Reads the handshake within the byte budget and the deadline.
struct Handshake<'a, C: Conn> {
    conn: &'a C,
    deadline: Instant,
    used: usize,
}

impl<C: Conn> Handshake<'_, C> {
    /// Exactly `buf.len()` bytes: nothing past the request is ever read here, so what curl
    /// sends after it (TLS) stays in the socket for the relay.
    fn take(&mut self, buf: &mut [u8]) -> Result<(), Reason> {
        if self.used + buf.len() > MAX_HANDSHAKE_BYTES {
            return Err(Reason::TooLong);
        }
        let mut done = 0;
        while done < buf.len() {
            let left = self.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Reason::HandshakeTimeout);
            }
            self.conn
                .set_read_deadline(Some(left))
                .map_err(|e| Reason::Io(e.to_string()))?;
            match self.conn.read_into(&mut buf[done..]) {
                Ok(0) => return Err(Reason::ClosedEarly),
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(Reason::HandshakeTimeout)
                }
                Err(e) => return Err(Reason::Io(e.to_string())),
            }
        }
        self.used += buf.len();
        Ok(())
    }

    fn byte(&mut self) -> Result<u8, Reason> {
        let mut b = [0u8; 1];
        self.take(&mut b)?;
        Ok(b[0])
    }
}

/// Serves one connection from greeting to close and says what happened. Never panics on what
/// the client sends; every path ends with the streams dropped, that is closed.
pub fn serve<C: Conn>(client: C, policy: &Policy, dial: &dyn Dial) -> Outcome {
    let mut outcome = Outcome {
        target: None,
        reply: None,
        reason: Reason::ClosedEarly,
    };
    // A client that does not read cannot hold a reply write forever.
    if let Err(e) = client.set_write_deadline(Some(policy.handshake_timeout)) {
        outcome.reason = Reason::Io(e.to_string());
        return outcome;
    }
    let server = match handshake(&client, policy, dial, &mut outcome) {
        Ok(server) => server,
        Err(reason) => {
            outcome.reason = reason;
            if let Some(reply) = outcome.reply {
                // The close follows whether or not the reply could be written.
                let _ = client.write_all_from(&reply.bytes());
            }
            return outcome;
        }
    };
    let addr = match server.peer_addr() {
        Ok(a) => a,
        Err(e) => {
            outcome.reason = Reason::Io(e.to_string());
            return outcome;
        }
    };
    outcome.reply = Some(Reply::Succeeded);
    if let Err(e) = client.write_all_from(&Reply::Succeeded.bytes()) {
        outcome.reason = Reason::Io(e.to_string());
        return outcome;
    }
    // From here on nothing is parsed and nothing times out: the connection lasts as long as
    // both ends keep it, which curl's --max-time and the container's life bound.
    let cleared = client
        .set_read_deadline(None)
        .and_then(|_| client.set_write_deadline(None));
    if let Err(e) = cleared {
        outcome.reason = Reason::Io(e.to_string());
        return outcome;
    }
    let (up, down) = relay(&client, &server);
    outcome.reason = Reason::Relayed { addr, up, down };
    outcome
}

/// Greeting, request, checks, resolution and connecting. On `Err`, `outcome.reply` holds the
/// reply to send before closing, if any.
fn handshake<C: Conn>(
    client: &C,
    policy: &Policy,
    dial: &dyn Dial,
    outcome: &mut Outcome,
) -> Result<TcpStream, Reason> {
    let mut hs = Handshake {
        conn: client,
        deadline: Instant::now() + policy.handshake_timeout,
        used: 0,
    };
    let io_err = |e: io::Error| Reason::Io(e.to_string());

    // Greeting: VER NMETHODS METHODS...
    let mut head = [0u8; 2];
    hs.take(&mut head)?;
    if head[0] != 5 {
        return Err(Reason::NotSocks5);
    }
    let mut methods = vec![0u8; usize::from(head[1])];
    hs.take(&mut methods)?;
    if !methods.contains(&0) {
        let _ = client.write_all_from(&[5, 0xFF]);
        return Err(Reason::NoAcceptableMethod);
    }
    client.write_all_from(&[5, 0]).map_err(io_err)?;

    // Request: VER CMD RSV ATYP, then for ATYP 3: LEN NAME PORT.
    let mut req = [0u8; 4];
    hs.take(&mut req)?;
    let [ver, cmd, rsv, atyp] = req;
    if ver != 5 || rsv != 0 {
        return Err(Reason::BadRequest);
    }
    if cmd != 1 {
        outcome.reply = Some(Reply::CommandNotSupported);
        return Err(Reason::Command(cmd));
    }
    if atyp != 3 {
        outcome.reply = Some(Reply::AddressTypeNotSupported);
        return Err(Reason::AddressType(atyp));
    }
    let len = hs.byte()?;
    let mut name = vec![0u8; usize::from(len)];
    hs.take(&mut name)?;
    let mut port = [0u8; 2];
    hs.take(&mut port)?;
    let port = u16::from_be_bytes(port);
    outcome.target = Some((String::from_utf8_lossy(&name).into_owned(), port));

    // Checks (step 3): all of them answer reply 2.
    outcome.reply = Some(Reply::NotAllowed);
    let name = std::str::from_utf8(&name).map_err(|_| Reason::NameNotText)?;
    if !hosts::valid_host(name) {
        return Err(Reason::InvalidHost);
    }
    if !policy.allows_host(name) {
        return Err(Reason::HostNotAllowed);
    }
    if port != ALLOWED_PORT {
        return Err(Reason::Port(port));
    }
    let host = hosts::normalize(name);

    // Resolve once (step 4): the address checked is the address dialed.
    outcome.reply = Some(Reply::HostUnreachable);
    let resolved = dial
        .resolve(&host, port)
        .map_err(|e| Reason::ResolveFailed(e.to_string()))?;
    let Some(ip) = resolved
        .iter()
        .map(|a| a.ip())
        .find(|ip| addr::dialable(*ip, &policy.allow_addresses))
    else {
        return Err(Reason::NoDialableAddress(
            resolved.iter().map(|a| a.ip()).collect(),
        ));
    };
    // The port is the one checked above, whatever the resolver put beside the address.
    let target = SocketAddr::new(ip, port);

    // Connect (step 5).
    outcome.reply = Some(Reply::ConnectionRefused);
    let server = dial
        .connect(target, policy.connect_timeout)
        .map_err(|e| Reason::ConnectFailed(target, e.to_string()))?;
    outcome.reply = None;
    Ok(server)
}

/// Copies both ways until both directions have ended; returns the bytes sent up (client to
/// server) and down.
fn relay<A: Conn, B: Conn>(client: &A, server: &B) -> (u64, u64) {
    std::thread::scope(|s| {
        let up = s.spawn(|| pump(client, server));
        let down = pump(server, client);
        // pump does not panic; if it somehow did, the count is all that is lost.
        (up.join().unwrap_or(0), down)
    })
}

/// One direction. End of input is passed on as a half-close, so a client that shuts its
/// write side still gets the answer. An error ends both directions: otherwise the other pump
/// could wait forever for a peer that is gone.
fn pump<R: Conn, W: Conn>(from: &R, to: &W) -> u64 {
    let mut buf = vec![0u8; RELAY_BUFFER];
    let mut total = 0u64;
    loop {
        match from.read_into(&mut buf) {
            Ok(0) => {
                let _ = to.shutdown_half(Shutdown::Write);
                return total;
            }
            Ok(n) => {
                if to.write_all_from(&buf[..n]).is_err() {
                    break;
                }
                total += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    let _ = from.shutdown_half(Shutdown::Both);
    let _ = to.shutdown_half(Shutdown::Both);
    total
}

/// Counts a connection as open until dropped.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Accepts and serves forever, at most `max` connections at once; one more is closed at once,
/// without a reply. One line per connection goes to standard error.
pub fn run(listener: UnixListener, policy: Arc<Policy>, dial: Arc<dyn Dial>, max: usize) -> ! {
    let open = Arc::new(AtomicUsize::new(0));
    loop {
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors or memory: wait for connections to end rather than spin.
                eprintln!("egress-proxy: accept failed: {e}");
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        // Only this thread adds, so the check and the add cannot race each other.
        if open.load(Ordering::SeqCst) >= max {
            drop(stream);
            eprintln!("egress-proxy: -: closed: {max} connections are already open");
            continue;
        }
        open.fetch_add(1, Ordering::SeqCst);
        let slot = Slot(open.clone());
        let (policy, dial) = (policy.clone(), dial.clone());
        let spawned = std::thread::Builder::new()
            .name("egress-conn".into())
            .spawn(move || {
                let _slot = slot;
                let outcome = serve(stream, &policy, &*dial);
                eprintln!("egress-proxy: {outcome}");
            });
        // A failed spawn drops the closure, and with it the stream and the slot.
        if let Err(e) = spawned {
            eprintln!("egress-proxy: -: closed: cannot start a thread: {e}");
        }
    }
}

/// Why `toolkit egress-proxy` was run wrongly (exit 2).
#[derive(Debug, thiserror::Error)]
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
}

/// What the command line asked for.
#[derive(Debug)]
pub struct Options {
    pub socket: PathBuf,
    pub policy: Policy,
}

impl Options {
    /// `--socket <path> --allow <pattern>[,<pattern>...] [--allow-address <cidr>]...`;
    /// `--allow` may be given more than once.
    pub fn parse(args: &[String]) -> Result<Options, UsageError> {
        let mut socket = None;
        let mut allow = Vec::new();
        let mut addresses = Vec::new();
        let mut it = args.iter();
        while let Some(flag) = it.next() {
            let mut value = || {
                it.next()
                    .ok_or_else(|| UsageError::MissingValue(flag.clone()))
            };
            match flag.as_str() {
                "--socket" => {
                    let v = value()?;
                    if socket.replace(PathBuf::from(v)).is_some() {
                        return Err(UsageError::SocketTwice);
                    }
                }
                "--allow" => allow.extend(value()?.split(',').map(str::to_string)),
                "--allow-address" => addresses.push(addr::parse_allow_address(value()?)?),
                other => return Err(UsageError::Unknown(other.to_string())),
            }
        }
        let socket = socket.ok_or(UsageError::NoSocket)?;
        if socket.as_os_str().is_empty() {
            return Err(UsageError::MissingValue("--socket".into()));
        }
        Ok(Options {
            socket,
            policy: Policy::new(allow, addresses)?,
        })
    }
}

/// Why the proxy could not start although it was run rightly (exit 1).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0} exists and is not a socket; not removing it")]
    NotASocket(PathBuf),
    #[error("cannot listen on {0}: {1}")]
    Bind(PathBuf, io::Error),
    #[error("{0}")]
    Dns(#[from] DnsError),
}

/// Binds the socket, first removing a stale one left by an earlier proxy (only a socket: a
/// wrong path must not cost the owner a file).
pub fn bind(path: &Path) -> Result<UnixListener, StartError> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            std::fs::remove_file(path).map_err(|e| StartError::Bind(path.to_owned(), e))?
        }
        Ok(_) => return Err(StartError::NotASocket(path.to_owned())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(StartError::Bind(path.to_owned(), e)),
    }
    UnixListener::bind(path).map_err(|e| StartError::Bind(path.to_owned(), e))
}

/// `toolkit egress-proxy ...`: `args` are the words after the subcommand. Serves until killed;
/// returns only when it cannot start (2: run wrongly, 1: could not start).
pub fn main(args: &[String]) -> ExitCode {
    let options = match Options::parse(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("toolkit egress-proxy: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let started = SystemDial::from_resolv_conf(Path::new(RESOLV_CONF))
        .map_err(StartError::from)
        .and_then(|dial| Ok((dial, bind(&options.socket)?)));
    let (dial, listener) = match started {
        Ok(s) => s,
        Err(e) => {
            eprintln!("toolkit egress-proxy: {e}");
            return ExitCode::from(1);
        }
    };
    eprintln!(
        "egress-proxy: listening on {} for {}",
        options.socket.display(),
        options.policy.allow.join(",")
    );
    run(
        listener,
        Arc::new(options.policy),
        Arc::new(dial),
        MAX_CONNECTIONS,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::net::TcpListener;
    use std::sync::Mutex;

    /// A resolver answering from a table and a connector that records the address it was given
    /// and, when a target is set, really connects to that local listener instead.
    #[derive(Default)]
    struct FakeDial {
        answers: HashMap<&'static str, Vec<&'static str>>,
        target: Option<SocketAddr>,
        resolves: Mutex<Vec<String>>,
        connects: Mutex<Vec<SocketAddr>>,
    }

    impl FakeDial {
        fn with(answers: &[(&'static str, &[&'static str])]) -> FakeDial {
            FakeDial {
                answers: answers.iter().map(|(h, a)| (*h, a.to_vec())).collect(),
                ..FakeDial::default()
            }
        }
        fn resolves(&self) -> Vec<String> {
            self.resolves.lock().map(|v| v.clone()).unwrap_or_default()
        }
        fn connects(&self) -> Vec<SocketAddr> {
            self.connects.lock().map(|v| v.clone()).unwrap_or_default()
        }
    }

    impl Dial for FakeDial {
        fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
            if let Ok(mut r) = self.resolves.lock() {
                r.push(host.to_string());
            }
            match self.answers.get(host) {
                Some(ips) => Ok(ips
                    .iter()
                    .map(|ip| SocketAddr::new(ip.parse().expect("test address"), port))
                    .collect()),
                None => Err(io::Error::other("no such name")),
            }
        }
        fn connect(&self, addr: SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
            if let Ok(mut c) = self.connects.lock() {
                c.push(addr);
            }
            match self.target {
                Some(t) => TcpStream::connect_timeout(&t, timeout),
                None => Err(io::ErrorKind::ConnectionRefused.into()),
            }
        }
    }

    fn policy() -> Policy {
        Policy::new(vec!["example.com".into(), "*.example.org".into()], vec![])
            .expect("policy")
            .with_handshake_timeout(Duration::from_millis(500))
            .with_connect_timeout(Duration::from_secs(2))
    }

    fn connect_req(name: &[u8], port: u16) -> Vec<u8> {
        let mut r = vec![5, 1, 0, 3, name.len() as u8];
        r.extend_from_slice(name);
        r.extend_from_slice(&port.to_be_bytes());
        r
    }

    const HELLO: [u8; 3] = [5, 1, 0];
    const OK: [u8; 2] = [5, 0];

    /// Reads until the proxy closes; a reset after the last byte counts as the close.
    fn read_to_close(s: &mut UnixStream) -> Vec<u8> {
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut got = Vec::new();
        let mut buf = [0u8; 1024];
        loop {
            match s.read(&mut buf) {
                Ok(0) => return got,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return got,
                Err(e) => panic!("the proxy neither answered nor closed: {e}"),
            }
        }
    }

    /// Sends `input` (then, if `eof`, half-closes) and returns what came back before the close
    /// and what the proxy says happened.
    fn exchange(input: &[u8], eof: bool, policy: &Policy, dial: &FakeDial) -> (Vec<u8>, Outcome) {
        let (mut client, server) = UnixStream::pair().expect("pair");
        std::thread::scope(|s| {
            let handle = s.spawn(|| serve(server, policy, dial));
            // The proxy may close before taking everything; that is its right.
            let _ = client.write_all(input);
            if eof {
                let _ = client.shutdown(Shutdown::Write);
            }
            let got = read_to_close(&mut client);
            let outcome = handle.join().expect("serve does not panic");
            (got, outcome)
        })
    }

    fn cat(parts: &[&[u8]]) -> Vec<u8> {
        parts.concat()
    }

    #[test]
    fn replies_table() {
        let dial = FakeDial::with(&[
            ("example.com", &["93.184.216.34"]),
            ("a.example.org", &["93.184.216.35"]),
            ("tailnet.example.org", &["100.100.100.100"]),
            ("loopback.example.org", &["127.0.0.1"]),
            (
                "private.example.org",
                &["10.0.0.1", "169.254.169.254", "::1", "fe80::1"],
            ),
            ("empty.example.org", &[]),
        ]);
        let r = |reply: Reply| reply.bytes().to_vec();
        let p = policy();
        // Without a target server every dial fails: rows that get that far answer 5.
        // (what, bytes sent, bytes answered before the close, reply, reason)
        type Row = (&'static str, Vec<u8>, Vec<u8>, Option<Reply>, Reason);
        let rows: Vec<Row> = vec![
            (
                "no method 0",
                vec![5, 1, 2],
                vec![5, 0xFF],
                None,
                Reason::NoAcceptableMethod,
            ),
            (
                "no methods",
                vec![5, 0],
                vec![5, 0xFF],
                None,
                Reason::NoAcceptableMethod,
            ),
            (
                "SOCKS4",
                vec![4, 1, 0, 80, 1, 2, 3, 4, 0],
                vec![],
                None,
                Reason::NotSocks5,
            ),
            ("empty", vec![], vec![], None, Reason::ClosedEarly),
            ("half greeting", vec![5], vec![], None, Reason::ClosedEarly),
            (
                "short method list",
                vec![5, 3, 0],
                vec![],
                None,
                Reason::ClosedEarly,
            ),
            (
                "BIND",
                cat(&[&HELLO, &[5, 2, 0, 3]]),
                cat(&[&OK, &r(Reply::CommandNotSupported)]),
                Some(Reply::CommandNotSupported),
                Reason::Command(2),
            ),
            (
                "UDP",
                cat(&[&HELLO, &[5, 3, 0, 1]]),
                cat(&[&OK, &r(Reply::CommandNotSupported)]),
                Some(Reply::CommandNotSupported),
                Reason::Command(3),
            ),
            (
                "IPv4 literal",
                cat(&[&HELLO, &[5, 1, 0, 1, 127, 0, 0, 1, 1, 187]]),
                cat(&[&OK, &r(Reply::AddressTypeNotSupported)]),
                Some(Reply::AddressTypeNotSupported),
                Reason::AddressType(1),
            ),
            (
                "IPv6 literal",
                cat(&[&HELLO, &[5, 1, 0, 4], &[0; 16], &[1, 187]]),
                cat(&[&OK, &r(Reply::AddressTypeNotSupported)]),
                Some(Reply::AddressTypeNotSupported),
                Reason::AddressType(4),
            ),
            (
                "address type 9",
                cat(&[&HELLO, &[5, 1, 0, 9]]),
                cat(&[&OK, &r(Reply::AddressTypeNotSupported)]),
                Some(Reply::AddressTypeNotSupported),
                Reason::AddressType(9),
            ),
            (
                "request version 4",
                cat(&[&HELLO, &[4, 1, 0, 3]]),
                OK.to_vec(),
                None,
                Reason::BadRequest,
            ),
            (
                "reserved byte set",
                cat(&[&HELLO, &[5, 1, 1, 3]]),
                OK.to_vec(),
                None,
                Reason::BadRequest,
            ),
            (
                "request cut short",
                cat(&[&HELLO, &[5, 1, 0, 3, 11], b"exam"]),
                OK.to_vec(),
                None,
                Reason::ClosedEarly,
            ),
            (
                "port missing",
                cat(&[&HELLO, &[5, 1, 0, 3, 11], b"example.com", &[1]]),
                OK.to_vec(),
                None,
                Reason::ClosedEarly,
            ),
            (
                "invalid name",
                cat(&[&HELLO, &connect_req(b"exa mple.com", 443)]),
                cat(&[&OK, &r(Reply::NotAllowed)]),
                Some(Reply::NotAllowed),
                Reason::InvalidHost,
            ),
            (
                "one label",
                cat(&[&HELLO, &connect_req(b"localhost", 443)]),
                cat(&[&OK, &r(Reply::NotAllowed)]),
                Some(Reply::NotAllowed),
                Reason::InvalidHost,
            ),
            (
                "IP as a name",
                cat(&[&HELLO, &connect_req(b"127.0.0.1", 443)]),
                cat(&[&OK, &r(Reply::NotAllowed)]),
                Some(Reply::NotAllowed),
                Reason::InvalidHost,
            ),
            (
                "empty name",
                cat(&[&HELLO, &connect_req(b"", 443)]),
                cat(&[&OK, &r(Reply::NotAllowed)]),
                Some(Reply::NotAllowed),
                Reason::InvalidHost,
            ),
            (
                "not UTF-8",
                cat(&[&HELLO, &connect_req(b"ex\xffample.com", 443)]),
                cat(&[&OK, &r(Reply::NotAllowed)]),
                Some(Reply::NotAllowed),
                Reason::NameNotText,
            ),
            (
                "NUL in name",
                cat(&[&HELLO, &connect_req(b"example.com\0", 443)]),
                cat(&[&OK, &r(Reply::NotAllowed)]),
                Some(Reply::NotAllowed),
                Reason::InvalidHost,
            ),
            (
                "not allowed",
                cat(&[&HELLO, &connect_req(b"evil.com", 443)]),
                cat(&[&OK, &r(Reply::NotAllowed)]),
                Some(Reply::NotAllowed),
                Reason::HostNotAllowed,
            ),
            (
                "wildcard base",
                cat(&[&HELLO, &connect_req(b"example.org", 443)]),
                cat(&[&OK, &r(Reply::NotAllowed)]),
                Some(Reply::NotAllowed),
                Reason::HostNotAllowed,
            ),
            (
                "suffix trick",
                cat(&[&HELLO, &connect_req(b"badexample.com", 443)]),
                cat(&[&OK, &r(Reply::NotAllowed)]),
                Some(Reply::NotAllowed),
                Reason::HostNotAllowed,
            ),
            (
                "port 80",
                cat(&[&HELLO, &connect_req(b"example.com", 80)]),
                cat(&[&OK, &r(Reply::NotAllowed)]),
                Some(Reply::NotAllowed),
                Reason::Port(80),
            ),
            (
                "port 0",
                cat(&[&HELLO, &connect_req(b"example.com", 0)]),
                cat(&[&OK, &r(Reply::NotAllowed)]),
                Some(Reply::NotAllowed),
                Reason::Port(0),
            ),
            (
                "no such name",
                cat(&[&HELLO, &connect_req(b"nowhere.example.org", 443)]),
                cat(&[&OK, &r(Reply::HostUnreachable)]),
                Some(Reply::HostUnreachable),
                Reason::ResolveFailed("no such name".into()),
            ),
            (
                "no addresses",
                cat(&[&HELLO, &connect_req(b"empty.example.org", 443)]),
                cat(&[&OK, &r(Reply::HostUnreachable)]),
                Some(Reply::HostUnreachable),
                Reason::NoDialableAddress(vec![]),
            ),
            (
                "tailnet",
                cat(&[&HELLO, &connect_req(b"tailnet.example.org", 443)]),
                cat(&[&OK, &r(Reply::HostUnreachable)]),
                Some(Reply::HostUnreachable),
                Reason::NoDialableAddress(vec!["100.100.100.100".parse().expect("ip")]),
            ),
            (
                "loopback",
                cat(&[&HELLO, &connect_req(b"loopback.example.org", 443)]),
                cat(&[&OK, &r(Reply::HostUnreachable)]),
                Some(Reply::HostUnreachable),
                Reason::NoDialableAddress(vec!["127.0.0.1".parse().expect("ip")]),
            ),
            (
                "private only",
                cat(&[&HELLO, &connect_req(b"private.example.org", 443)]),
                cat(&[&OK, &r(Reply::HostUnreachable)]),
                Some(Reply::HostUnreachable),
                Reason::NoDialableAddress(
                    ["10.0.0.1", "169.254.169.254", "::1", "fe80::1"]
                        .iter()
                        .map(|s| s.parse().expect("ip"))
                        .collect(),
                ),
            ),
            (
                "connect fails",
                cat(&[&HELLO, &connect_req(b"example.com", 443)]),
                cat(&[&OK, &r(Reply::ConnectionRefused)]),
                Some(Reply::ConnectionRefused),
                Reason::ConnectFailed(
                    "93.184.216.34:443".parse().expect("addr"),
                    io::Error::from(io::ErrorKind::ConnectionRefused).to_string(),
                ),
            ),
            (
                "greeting with more methods",
                cat(&[&[5, 3, 2, 1, 0], &connect_req(b"A.Example.ORG.", 443)]),
                cat(&[&OK, &r(Reply::ConnectionRefused)]),
                Some(Reply::ConnectionRefused),
                Reason::ConnectFailed(
                    "93.184.216.35:443".parse().expect("addr"),
                    io::Error::from(io::ErrorKind::ConnectionRefused).to_string(),
                ),
            ),
        ];
        for (what, input, want, reply, reason) in rows {
            let before = dial.resolves().len();
            let (got, outcome) = exchange(&input, true, &p, &dial);
            assert_eq!(got, want, "{what}: bytes");
            assert_eq!(outcome.reply, reply, "{what}: reply");
            assert_eq!(outcome.reason, reason, "{what}: reason");
            let resolved = dial.resolves().len() - before;
            let expect_resolve = matches!(
                reply,
                Some(Reply::HostUnreachable | Reply::ConnectionRefused)
            );
            assert_eq!(resolved, usize::from(expect_resolve), "{what}: resolutions");
        }
        // The name reaches the resolver normalised: lower case, no trailing dot.
        assert!(dial.resolves().contains(&"a.example.org".to_string()));
    }

    /// A local TCP server behind the fake Dial; `script` runs on the accepted connection.
    fn server(
        script: impl FnOnce(TcpStream) + Send + 'static,
    ) -> (SocketAddr, std::thread::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let handle = std::thread::spawn(move || {
            if let Ok((s, _)) = listener.accept() {
                script(s);
            }
        });
        (addr, handle)
    }

    #[test]
    fn dials_the_first_dialable_address_once() {
        let (target, _h) = server(|_s| {});
        let mut dial = FakeDial::with(&[(
            "example.com",
            &[
                "10.0.0.1",
                "127.0.0.1",
                "100.64.0.1",
                "93.184.216.34",
                "1.1.1.1",
            ],
        )]);
        dial.target = Some(target);
        let input = cat(&[&HELLO, &connect_req(b"example.com", 443)]);
        let (got, outcome) = exchange(&input, true, &policy(), &dial);
        assert_eq!(got, cat(&[&OK, &Reply::Succeeded.bytes()]));
        assert_eq!(outcome.reply, Some(Reply::Succeeded));
        assert_eq!(dial.resolves(), vec!["example.com".to_string()]);
        assert_eq!(
            dial.connects(),
            vec!["93.184.216.34:443".parse::<SocketAddr>().expect("addr")]
        );
    }

    /// Every NAT64 spelling of the tailnet and of loopback is passed over, the local-use
    /// prefix 64:ff9b:1::/48 at each RFC 6052 place included, even with everything allowed.
    #[test]
    fn nat64_spellings_of_forbidden_addresses_are_never_dialed() {
        let (target, _h) = server(|_s| {});
        const NAT64: [&str; 10] = [
            "64:ff9b::6464:6464",
            "64:ff9b::100.100.100.100",
            "64:ff9b:1::6464:6464",
            "64:ff9b:1:6464:64:6400::",
            "64:ff9b:1:64:64:6464::",
            "64:ff9b:1:0:64:6464:6400:0",
            "64:ff9b:1::7f00:1",
            "64:ff9b:1:7f00:0:100::",
            "64:ff9b:1:808:87f:808:808:808",
            "64:ff9b:1::8.8.8.8",
        ];
        let nat64 = NAT64;
        let mut names = nat64.to_vec();
        names.push("64:ff9b:1:808:808:808:808:808");
        let mut dial = FakeDial::with(&[("example.com", names.as_slice())]);
        dial.target = Some(target);
        let (got, _) = exchange(
            &cat(&[&HELLO, &connect_req(b"example.com", 443)]),
            true,
            &policy(),
            &dial,
        );
        assert_eq!(got, cat(&[&OK, &Reply::Succeeded.bytes()]));
        assert_eq!(
            dial.connects(),
            vec!["[64:ff9b:1:808:808:808:808:808]:443"
                .parse::<SocketAddr>()
                .expect("addr")]
        );

        never_dialed_with_everything_allowed("example.com", NAT64.split_at(9).0);
    }

    /// With an allow list that covers everything (main refuses it; a Policy could still hold
    /// it), none of `addrs`, which `host` resolves to, is dialed.
    fn never_dialed_with_everything_allowed(host: &'static str, addrs: &'static [&'static str]) {
        let everything: Vec<Cidr> = ["0.0.0.0/0", "::/0"]
            .iter()
            .map(|s| s.parse().expect("cidr"))
            .collect();
        let p = Policy::new(vec![host.into()], everything).expect("policy");
        let dial = FakeDial::with(&[(host, addrs)]);
        let (got, outcome) = exchange(
            &cat(&[&HELLO, &connect_req(host.as_bytes(), 443)]),
            true,
            &p,
            &dial,
        );
        assert_eq!(got, cat(&[&OK, &Reply::HostUnreachable.bytes()]));
        assert!(matches!(outcome.reason, Reason::NoDialableAddress(_)));
        assert!(dial.connects().is_empty());
    }

    #[test]
    fn allow_address_opens_a_range_but_never_the_forbidden_ones() {
        let (target, _h) = server(|_s| {});
        let cidr = |s: &str| addr::parse_allow_address(s).expect("cidr");
        let p = Policy::new(vec!["*.example.org".into()], vec![cidr("192.0.2.0/24")])
            .expect("policy")
            .with_handshake_timeout(Duration::from_millis(500));
        let mut dial = FakeDial::with(&[
            (
                "internal.example.org",
                &["127.0.0.1", "169.254.169.254", "100.64.0.1", "192.0.2.10"],
            ),
            ("outside.example.org", &["198.51.100.1"]),
        ]);
        dial.target = Some(target);
        let (got, _) = exchange(
            &cat(&[&HELLO, &connect_req(b"internal.example.org", 443)]),
            true,
            &p,
            &dial,
        );
        assert_eq!(got, cat(&[&OK, &Reply::Succeeded.bytes()]));
        assert_eq!(
            dial.connects(),
            vec!["192.0.2.10:443".parse::<SocketAddr>().expect("addr")]
        );
        let (got, _) = exchange(
            &cat(&[&HELLO, &connect_req(b"outside.example.org", 443)]),
            true,
            &p,
            &dial,
        );
        assert_eq!(got, cat(&[&OK, &Reply::HostUnreachable.bytes()]));

        // Even a list that covers everything never opens loopback, link-local or the tailnet.
        never_dialed_with_everything_allowed(
            "internal.example.org",
            &[
                "127.0.0.1",
                "169.254.169.254",
                "100.64.0.1",
                "::1",
                "fe80::1",
                "::ffff:127.0.0.1",
                "0.0.0.0",
                "224.0.0.1",
            ],
        );
    }

    fn connected(dial: &FakeDial, p: &Policy) -> (UnixStream, std::thread::JoinHandle<Outcome>) {
        let (mut client, proxy_end) = UnixStream::pair().expect("pair");
        let (p, dial) = (
            p.clone(),
            Arc::new(FakeDial {
                answers: dial.answers.clone(),
                target: dial.target,
                ..FakeDial::default()
            }),
        );
        let handle = std::thread::spawn(move || serve(proxy_end, &p, &*dial));
        client
            .write_all(&cat(&[&HELLO, &connect_req(b"example.com", 443)]))
            .expect("write");
        client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut reply = [0u8; 12];
        client.read_exact(&mut reply).expect("reply");
        assert_eq!(reply.to_vec(), cat(&[&OK, &Reply::Succeeded.bytes()]));
        (client, handle)
    }

    #[test]
    fn relays_both_ways_and_passes_the_client_half_close_on() {
        // The server answers only once it has seen the end of the request: that end must come
        // through the proxy as a half-close.
        let payload: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let (target, h) = server(|mut s| {
            let mut got = Vec::new();
            s.read_to_end(&mut got).expect("read");
            s.write_all(&(got.len() as u64).to_be_bytes())
                .expect("write");
            s.write_all(&got).expect("write");
        });
        let mut dial = FakeDial::with(&[("example.com", &["93.184.216.34"])]);
        dial.target = Some(target);
        let (mut client, handle) = connected(&dial, &policy());
        // After the handshake no deadline applies.
        std::thread::sleep(Duration::from_millis(600));
        client.write_all(&payload).expect("write");
        client.shutdown(Shutdown::Write).expect("half-close");
        let mut back = Vec::new();
        client.read_to_end(&mut back).expect("read");
        assert_eq!(back[..8], (payload.len() as u64).to_be_bytes());
        assert!(back[8..] == payload[..], "the bytes came back unchanged");
        let outcome = handle.join().expect("serve");
        assert_eq!(
            outcome.reason,
            Reason::Relayed {
                addr: target,
                up: payload.len() as u64,
                down: payload.len() as u64 + 8
            }
        );
        h.join().expect("server");
    }

    #[test]
    fn passes_the_server_half_close_on() {
        let (target, h) = server(|mut s| {
            s.write_all(b"hello").expect("write");
            s.shutdown(Shutdown::Write).expect("half-close");
            let mut got = Vec::new();
            s.read_to_end(&mut got).expect("read");
            assert_eq!(got, b"still talking");
        });
        let mut dial = FakeDial::with(&[("example.com", &["93.184.216.34"])]);
        dial.target = Some(target);
        let (mut client, handle) = connected(&dial, &policy());
        let mut got = Vec::new();
        client.read_to_end(&mut got).expect("read");
        assert_eq!(got, b"hello");
        client
            .write_all(b"still talking")
            .expect("write after the server's half-close");
        client.shutdown(Shutdown::Write).expect("half-close");
        h.join().expect("server saw everything");
        let outcome = handle.join().expect("serve");
        assert!(
            matches!(
                outcome.reason,
                Reason::Relayed {
                    up: 13,
                    down: 5,
                    ..
                }
            ),
            "{outcome}"
        );
    }

    #[test]
    fn handshake_limits() {
        let dial = FakeDial::with(&[("example.com", &["93.184.216.34"])]);
        let p = policy().with_handshake_timeout(Duration::from_millis(200));

        // More than 262 bytes: a greeting of 257 and a request of up to 262 cannot both fit.
        let mut greeting = vec![5, 255];
        greeting.extend(0..=254u8);
        let long = vec![b'a'; 253];
        let input = cat(&[&greeting, &connect_req(&long, 443)]);
        let (got, outcome) = exchange(&input, true, &p, &dial);
        assert_eq!(got, OK.to_vec());
        assert_eq!(outcome.reason, Reason::TooLong);
        assert!(dial.resolves().is_empty());

        // The budget is for greeting and request together: after curl's 3-byte greeting a
        // name of 252 bytes fits exactly (and reaches the checks), 253 does not.
        let input = cat(&[&HELLO, &connect_req(&[b'a'; 252], 443)]);
        assert_eq!(input.len(), MAX_HANDSHAKE_BYTES);
        let (got, outcome) = exchange(&input, true, &p, &dial);
        assert_eq!(got, cat(&[&OK, &Reply::NotAllowed.bytes()]));
        assert_eq!(outcome.reason, Reason::InvalidHost);
        let input = cat(&[&HELLO, &connect_req(&[b'a'; 253], 443)]);
        let (got, outcome) = exchange(&input, true, &p, &dial);
        assert_eq!(got, OK.to_vec());
        assert_eq!(outcome.reason, Reason::TooLong);

        // Two bytes, then nothing: closed once the deadline passes, and not much later.
        for input in [&[5u8, 1][..], &HELLO[..], &cat(&[&HELLO, &[5, 1]])[..]] {
            let started = Instant::now();
            let (_, outcome) = exchange(input, false, &p, &dial);
            assert_eq!(outcome.reason, Reason::HandshakeTimeout, "{input:?}");
            assert!(started.elapsed() >= Duration::from_millis(200));
            assert!(started.elapsed() < Duration::from_secs(5));
        }
    }

    #[test]
    fn a_slow_drip_is_cut_off_by_the_whole_handshake_deadline() {
        let dial = FakeDial::with(&[]);
        let p = policy().with_handshake_timeout(Duration::from_millis(300));
        let (mut client, proxy_end) = UnixStream::pair().expect("pair");
        let started = Instant::now();
        let handle = std::thread::spawn(move || serve(proxy_end, &p, &dial));
        // Each byte arrives well within any per-read timeout, but the whole never does.
        let input = cat(&[&HELLO, &connect_req(b"example.com", 443)]);
        for b in input {
            if client.write_all(&[b]).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let outcome = handle.join().expect("serve");
        assert_eq!(outcome.reason, Reason::HandshakeTimeout);
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn system_dial_over_a_fake_nameserver() {
        use crate::dns::tests::{a, FakeDns};
        use hickory_proto::rr::RecordType;
        let dns = FakeDns::start(vec![
            (
                ("www.example.org.", RecordType::A),
                crate::dns::tests::Behaviour::Records(vec![("www.example.org.", a("127.0.0.1"))]),
            ),
            (
                ("www.example.org.", RecordType::AAAA),
                crate::dns::tests::Behaviour::Records(vec![]),
            ),
        ]);
        let dial = SystemDial::new(Resolver::new(vec![dns.addr]));
        let got = dial.resolve("www.example.org", 443).expect("resolve");
        assert_eq!(
            got,
            vec!["127.0.0.1:443".parse::<SocketAddr>().expect("addr")]
        );
        assert!(dial.resolve("nowhere.example.org", 443).is_err());

        // The real path refuses a name that resolves to loopback, and never connects.
        let input = cat(&[&HELLO, &connect_req(b"www.example.org", 443)]);
        let (client, proxy_end) = UnixStream::pair().expect("pair");
        let p = policy();
        let handle = std::thread::spawn(move || serve(proxy_end, &p, &dial));
        let mut client = client;
        client.write_all(&input).expect("write");
        let got = read_to_close(&mut client);
        assert_eq!(got, cat(&[&OK, &Reply::HostUnreachable.bytes()]));
        let outcome = handle.join().expect("serve");
        assert_eq!(
            outcome.reason,
            Reason::NoDialableAddress(vec!["127.0.0.1".parse().expect("ip")])
        );

        // connect is a plain TCP connection with the timeout given.
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let to = listener.local_addr().expect("addr");
        let dial = SystemDial::new(Resolver::new(vec![dns.addr]));
        let s = dial.connect(to, Duration::from_secs(2)).expect("connect");
        assert_eq!(s.peer_addr().expect("peer"), to);
    }

    #[test]
    fn options_table() {
        let args = |s: &str| s.split_whitespace().map(str::to_string).collect::<Vec<_>>();
        let ok = [
            ("--socket /run/egress/egress.sock --allow example.com", vec!["example.com"], 0),
            ("--allow a.example,*.b.example --socket /s", vec!["a.example", "*.b.example"], 0),
            ("--socket /s --allow a.example --allow c.example --allow-address 192.0.2.0/24 --allow-address 10.0.0.1", vec!["a.example", "c.example"], 2),
        ];
        for (line, allow, n) in ok {
            let o = Options::parse(&args(line)).expect(line);
            assert_eq!(o.policy.allow, allow, "{line}");
            assert_eq!(o.policy.allow_addresses.len(), n, "{line}");
        }
        let bad = [
            ("", "--socket is required"),
            ("--allow example.com", "--socket is required"),
            ("--socket /s", "--allow is required"),
            ("--socket", "--socket needs a value"),
            ("--socket /s --allow", "--allow needs a value"),
            ("--socket /s --socket /t --allow example.com", "--socket given twice"),
            ("--socket /s --allow example.com,", "\"\" is not a host pattern"),
            ("--socket /s --allow *.com", "\"*.com\" is not a host pattern"),
            ("--socket /s --allow 10.0.0.1", "\"10.0.0.1\" is not a host pattern"),
            ("--socket /s --allow example.com --verbose", "unknown argument \"--verbose\""),
            ("--socket /s --allow example.com --allow-address 127.0.0.0/8", "--allow-address 127.0.0.0/8 overlaps 127.0.0.0/8, which is never allowed (loopback, link-local, the tailnet, 0/8, multicast)"),
            ("--socket /s --allow example.com --allow-address 169.254.169.254", "--allow-address 169.254.169.254/32 overlaps 169.254.0.0/16, which is never allowed (loopback, link-local, the tailnet, 0/8, multicast)"),
            ("--socket /s --allow example.com --allow-address 100.64.0.0/10", "--allow-address 100.64.0.0/10 overlaps 100.64.0.0/10, which is never allowed (loopback, link-local, the tailnet, 0/8, multicast)"),
            ("--socket /s --allow example.com --allow-address nonsense", "--allow-address \"nonsense\" is not an address or a CIDR such as 192.0.2.0/24"),
        ];
        for (line, why) in bad {
            let e = Options::parse(&args(line)).expect_err(line);
            assert_eq!(e.to_string(), why, "{line}");
        }
    }

    #[test]
    fn bind_replaces_only_a_stale_socket() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("egress.sock");
        let first = bind(&path).expect("bind");
        drop(first);
        // The file of the closed listener is still there: stale, so it is replaced.
        assert!(path.exists());
        let _second = bind(&path).expect("rebind over a stale socket");
        let file = dir.path().join("not-a-socket");
        std::fs::write(&file, "keep me").expect("write");
        assert!(matches!(bind(&file), Err(StartError::NotASocket(_))));
        assert_eq!(std::fs::read_to_string(&file).expect("read"), "keep me");
    }

    #[test]
    fn outcome_lines_escape_the_name() {
        let o = Outcome {
            target: Some(("evil\n.example.com".into(), 443)),
            reply: Some(Reply::NotAllowed),
            reason: Reason::InvalidHost,
        };
        assert_eq!(
            o.to_string(),
            "\"evil\\n.example.com\" port 443: reply 2 (not allowed): the name is not a valid host"
        );
        let o = Outcome {
            target: None,
            reply: None,
            reason: Reason::HandshakeTimeout,
        };
        assert_eq!(
            o.to_string(),
            "-: closed: the handshake did not arrive in time"
        );
    }
}
