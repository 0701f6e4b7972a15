//! A small stub resolver for the egress proxy (docs/design.md#the-egress-proxy, step 4).
//!
//! toolkit is a static musl binary, and musl's `getaddrinfo` gives no control over timeouts
//! or which answers are believed, so the proxy asks the nameservers of `/etc/resolv.conf`
//! itself: A and AAAA queries over UDP (over TCP when the answer is truncated), each try bounded
//! by [`TRY_TIMEOUT`] and the whole lookup by [`TOTAL_TIMEOUT`], CNAME chains followed for at
//! most [`MAX_ALIAS_HOPS`] names. An answer is believed only if it comes from the server that
//! was asked, carries the query's random ID, and repeats the question.
//!
//! Decisions: the name is always looked up as given, as an absolute name (no `search` list: a
//! grant names a host on the internet); `options` lines are ignored; IPv4 addresses come before
//! IPv6 ones, because the proxy dials the first dialable address and the container networks
//! (pasta, slirp4netns) always carry IPv4. Which addresses may be dialed is not decided here
//! (see `addr`).

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{DNSClass, Name, RData, RecordType};

/// Where the nameservers are listed inside the container.
pub const RESOLV_CONF: &str = "/etc/resolv.conf";
/// How long one question waits for one server's answer.
pub const TRY_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a whole lookup (A and AAAA, every server, every alias) may take.
pub const TOTAL_TIMEOUT: Duration = Duration::from_secs(10);
/// How many CNAME links a lookup follows before giving up.
pub const MAX_ALIAS_HOPS: usize = 8;
/// How many `nameserver` lines are used, as in glibc and musl.
pub const MAX_SERVERS: usize = 3;
/// How many times each server is tried.
const ROUNDS: usize = 2;
/// Large enough for any UDP answer a server sends to a query without EDNS (512) and for the
/// odd server that sends more anyway.
const UDP_BUFFER: usize = 4096;

/// Why a lookup gave no addresses.
#[derive(Debug, thiserror::Error)]
pub enum DnsError {
    #[error("cannot read {0}: {1}")]
    ReadConf(PathBuf, io::Error),
    #[error("{0} lists no usable nameserver")]
    NoServers(PathBuf),
    #[error("{0:?} is not a name that can be looked up")]
    BadName(String),
    #[error("no such name")]
    NoSuchName,
    #[error("the name has no addresses")]
    NoAddresses,
    #[error("more than {MAX_ALIAS_HOPS} CNAME links")]
    TooManyAliases,
    #[error("no nameserver answered in time")]
    Timeout,
    #[error("the nameserver answered {0}")]
    ServerFailure(ResponseCode),
    #[error("the nameserver sent an answer that does not fit the question")]
    BadAnswer,
    #[error("cannot reach the nameserver: {0}")]
    Io(#[from] io::Error),
}

/// The nameservers named by `nameserver` lines, port 53, at most [`MAX_SERVERS`]. Lines that
/// do not hold a plain address (a scoped `fe80::1%eth0`, a typo) are skipped.
pub fn parse_resolv_conf(text: &str) -> Vec<SocketAddr> {
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            match (words.next(), words.next()) {
                (Some("nameserver"), Some(addr)) => addr.parse::<IpAddr>().ok(),
                _ => None,
            }
        })
        .map(|ip| SocketAddr::new(ip, 53))
        .take(MAX_SERVERS)
        .collect()
}

/// A stub resolver asking a fixed list of nameservers.
#[derive(Debug, Clone)]
pub struct Resolver {
    servers: Vec<SocketAddr>,
    try_timeout: Duration,
    total_timeout: Duration,
}

impl Resolver {
    /// Asks `servers` in order, with the default timeouts.
    pub fn new(servers: Vec<SocketAddr>) -> Resolver {
        Resolver {
            servers,
            try_timeout: TRY_TIMEOUT,
            total_timeout: TOTAL_TIMEOUT,
        }
    }

    /// Asks the nameservers listed in `path` (normally [`RESOLV_CONF`]).
    pub fn from_resolv_conf(path: &Path) -> Result<Resolver, DnsError> {
        let text =
            std::fs::read_to_string(path).map_err(|e| DnsError::ReadConf(path.to_owned(), e))?;
        let servers = parse_resolv_conf(&text);
        if servers.is_empty() {
            return Err(DnsError::NoServers(path.to_owned()));
        }
        Ok(Resolver::new(servers))
    }

    /// Replaces the per-try and whole-lookup time limits (tests use short ones).
    pub fn with_timeouts(mut self, try_timeout: Duration, total_timeout: Duration) -> Resolver {
        self.try_timeout = try_timeout;
        self.total_timeout = total_timeout;
        self
    }

    /// The servers asked, in order.
    pub fn servers(&self) -> &[SocketAddr] {
        &self.servers
    }

    /// The IPv4 and then IPv6 addresses of `host`. A and AAAA are asked at the same time so
    /// that a server slow on one type costs the lookup once, not twice.
    pub fn lookup(&self, host: &str) -> Result<Vec<IpAddr>, DnsError> {
        let bad_name = || DnsError::BadName(host.to_string());
        let mut name = Name::from_ascii(host).map_err(|_| bad_name())?;
        if name.num_labels() == 0 {
            return Err(bad_name());
        }
        name.set_fqdn(true);
        let deadline = Instant::now() + self.total_timeout;
        let (v4, v6) = std::thread::scope(|s| {
            let aaaa = s.spawn(|| self.lookup_type(&name, RecordType::AAAA, deadline));
            let a = self.lookup_type(&name, RecordType::A, deadline);
            // A panic in the AAAA thread is a bug; treat it as no answer rather than abort.
            let aaaa = aaaa.join().unwrap_or(Err(DnsError::BadAnswer));
            (a, aaaa)
        });
        // Addresses of either type win over the other type's error (a server that says
        // NXDOMAIN for AAAA only is wrong, not a reason to fail). Without addresses, "no such
        // name" is the most telling error, then A's.
        let mut ips = Vec::new();
        let mut error = None;
        for result in [v4, v6] {
            match result {
                Ok(found) => ips.extend(found),
                Err(e) => {
                    if error.is_none() || matches!(e, DnsError::NoSuchName) {
                        error = Some(e);
                    }
                }
            }
        }
        match (ips.is_empty(), error) {
            (false, _) => Ok(ips),
            (true, Some(e)) => Err(e),
            (true, None) => Err(DnsError::NoAddresses),
        }
    }

    /// The addresses of one type, following aliases across answers when a server gives only
    /// part of the chain.
    fn lookup_type(
        &self,
        name: &Name,
        rtype: RecordType,
        deadline: Instant,
    ) -> Result<Vec<IpAddr>, DnsError> {
        let mut current = name.clone();
        let mut hops = 0;
        loop {
            let answer = self.exchange(&current, rtype, deadline)?;
            match follow(&answer, &current, rtype, &mut hops)? {
                Followed::Addresses(ips) => return Ok(ips),
                Followed::Alias(target) => current = target,
            }
        }
    }

    /// One question, asked of each server in turn until one answers it.
    fn exchange(
        &self,
        name: &Name,
        rtype: RecordType,
        deadline: Instant,
    ) -> Result<Message, DnsError> {
        let mut query = Message::query();
        query.metadata.recursion_desired = true;
        query.add_query(Query::query(name.clone(), rtype));
        let id = query.metadata.id;
        let packet = query
            .to_vec()
            .map_err(|_| DnsError::BadName(name.to_string()))?;
        let question = Question { id, name, rtype };

        let mut last = DnsError::Timeout;
        for _ in 0..ROUNDS {
            for &server in &self.servers {
                let now = Instant::now();
                if now >= deadline {
                    return Err(DnsError::Timeout);
                }
                let try_deadline = deadline.min(now + self.try_timeout);
                let answer = match udp_try(server, &packet, &question, try_deadline) {
                    Ok(m) if m.metadata.truncation => tcp_try(
                        server,
                        &packet,
                        &question,
                        deadline.min(now + self.try_timeout * 2),
                    ),
                    other => other,
                };
                match answer {
                    Ok(m) => match m.metadata.response_code {
                        ResponseCode::NoError => return Ok(m),
                        // The name does not exist: another server would say the same.
                        ResponseCode::NXDomain => return Err(DnsError::NoSuchName),
                        code => last = DnsError::ServerFailure(code),
                    },
                    Err(e) => last = e,
                }
            }
        }
        Err(last)
    }
}

/// What a response must repeat to be believed.
struct Question<'a> {
    id: u16,
    name: &'a Name,
    rtype: RecordType,
}

impl Question<'_> {
    fn answered_by(&self, bytes: &[u8]) -> Option<Message> {
        let m = Message::from_vec(bytes).ok()?;
        let q = m.queries.first()?;
        let fits = m.metadata.id == self.id
            && m.metadata.message_type == MessageType::Response
            && m.metadata.op_code == OpCode::Query
            && m.queries.len() == 1
            && q.name() == self.name
            && q.query_type() == self.rtype
            && q.query_class() == DNSClass::IN;
        fits.then_some(m)
    }
}

/// The time left before `deadline`, or a timeout error when none is.
fn remaining(deadline: Instant) -> Result<Duration, DnsError> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        Err(DnsError::Timeout)
    } else {
        Ok(left)
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// One UDP try. The socket is connected to the server, so the kernel drops datagrams from any
/// other address; datagrams that do not fit the question (a late answer to an earlier try, a
/// guess at the ID) are ignored until the deadline.
fn udp_try(
    server: SocketAddr,
    packet: &[u8],
    question: &Question<'_>,
    deadline: Instant,
) -> Result<Message, DnsError> {
    let local: SocketAddr = match server {
        SocketAddr::V4(_) => (std::net::Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let socket = UdpSocket::bind(local)?;
    socket.connect(server)?;
    socket.send(packet)?;
    let mut buf = [0u8; UDP_BUFFER];
    loop {
        socket.set_read_timeout(Some(remaining(deadline)?))?;
        let (n, from) = match socket.recv_from(&mut buf) {
            Ok(got) => got,
            Err(e) if is_timeout(&e) => return Err(DnsError::Timeout),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(DnsError::Io(e)),
        };
        if from != server {
            continue;
        }
        if let Some(m) = question.answered_by(&buf[..n]) {
            return Ok(m);
        }
    }
}

/// One TCP try (RFC 1035 4.2.2: each message prefixed by its two-byte length).
fn tcp_try(
    server: SocketAddr,
    packet: &[u8],
    question: &Question<'_>,
    deadline: Instant,
) -> Result<Message, DnsError> {
    let mut stream = TcpStream::connect_timeout(&server, remaining(deadline)?).map_err(|e| {
        if is_timeout(&e) {
            DnsError::Timeout
        } else {
            DnsError::Io(e)
        }
    })?;
    let len = u16::try_from(packet.len()).map_err(|_| DnsError::BadAnswer)?;
    let mut framed = Vec::with_capacity(packet.len() + 2);
    framed.extend_from_slice(&len.to_be_bytes());
    framed.extend_from_slice(packet);
    stream.set_write_timeout(Some(remaining(deadline)?))?;
    stream.write_all(&framed).map_err(|e| {
        if is_timeout(&e) {
            DnsError::Timeout
        } else {
            DnsError::Io(e)
        }
    })?;
    let mut len = [0u8; 2];
    read_exact_by(&mut stream, &mut len, deadline)?;
    let mut body = vec![0u8; usize::from(u16::from_be_bytes(len))];
    read_exact_by(&mut stream, &mut body, deadline)?;
    question.answered_by(&body).ok_or(DnsError::BadAnswer)
}

/// `read_exact` where the deadline bounds the whole read, not each `read` call.
fn read_exact_by(
    stream: &mut TcpStream,
    buf: &mut [u8],
    deadline: Instant,
) -> Result<(), DnsError> {
    let mut done = 0;
    while done < buf.len() {
        stream.set_read_timeout(Some(remaining(deadline)?))?;
        match stream.read(&mut buf[done..]) {
            Ok(0) => return Err(DnsError::BadAnswer),
            Ok(n) => done += n,
            Err(e) if is_timeout(&e) => return Err(DnsError::Timeout),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(DnsError::Io(e)),
        }
    }
    Ok(())
}

enum Followed {
    /// The chain ended in addresses (possibly none: the name exists without this type).
    Addresses(Vec<IpAddr>),
    /// The chain leads to a name this answer has no records for: ask again for it.
    Alias(Name),
}

/// Walks the answer section from `name`: the addresses of the chain's last name, counting each
/// CNAME link against the lookup's budget. Records for other names are ignored, so a server
/// cannot slip in addresses for a name nobody asked about.
fn follow(
    answer: &Message,
    name: &Name,
    rtype: RecordType,
    hops: &mut usize,
) -> Result<Followed, DnsError> {
    let mut current = name.clone();
    loop {
        let records = answer
            .answers
            .iter()
            .filter(|r| r.dns_class == DNSClass::IN && r.name == current);
        let mut ips = Vec::new();
        let mut alias = None;
        for r in records {
            match (&r.data, rtype) {
                (RData::A(a), RecordType::A) => ips.push(IpAddr::V4(a.0)),
                (RData::AAAA(a), RecordType::AAAA) => ips.push(IpAddr::V6(a.0)),
                (RData::CNAME(c), _) => alias = Some(c.0.clone()),
                _ => {}
            }
        }
        if !ips.is_empty() {
            return Ok(Followed::Addresses(ips));
        }
        match alias {
            Some(target) => {
                *hops += 1;
                if *hops > MAX_ALIAS_HOPS {
                    return Err(DnsError::TooManyAliases);
                }
                current = target;
            }
            None if current == *name => return Ok(Followed::Addresses(Vec::new())),
            None => return Ok(Followed::Alias(current)),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
