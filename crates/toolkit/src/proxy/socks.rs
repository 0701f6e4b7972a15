//! The SOCKS5 side of the egress proxy: the greeting, the request, and the replies
//! (docs/design.md#the-egress-proxy, steps 1 and 2).

use std::fmt;
use std::io;
use std::time::{Duration, Instant};

use super::{Conn, Outcome, Reason, MAX_HANDSHAKE_BYTES};

/// The SOCKS5 reply codes this proxy sends: those of RFC 1928 section 6 that
/// docs/design.md#the-egress-proxy names.
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

/// Greeting and request, within `timeout` for both together. Answers the greeting (`05 00`, or
/// `05 FF` before closing); returns the requested name, still bytes, and port. On `Err`,
/// `outcome.reply` holds the reply to send before closing, if any.
pub(super) fn read_request<C: Conn>(
    client: &C,
    timeout: Duration,
    outcome: &mut Outcome,
) -> Result<(Vec<u8>, u16), Reason> {
    let mut hs = Handshake {
        conn: client,
        deadline: Instant::now() + timeout,
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
    Ok((name, port))
}
