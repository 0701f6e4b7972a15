//! The SOCKS5 side of the egress proxy: the greeting, the request, and the replies
//! (docs/design.md#the-egress-proxy, steps 1 and 2).

use std::fmt;
use std::io;

use super::handshake::Handshake;
use super::{Conn, Outcome, Reason};

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

/// Greeting (its first byte, the version, already read by `serve`) and request, within the
/// handshake's budget. Answers the greeting (`05 00`, or `05 FF` before closing); returns the
/// requested name, still bytes, and port. On `Err`, `outcome.reply` holds the reply to send
/// before closing, if any.
pub(super) fn read_request<C: Conn>(
    hs: &mut Handshake<'_, C>,
    outcome: &mut Outcome,
) -> Result<(Vec<u8>, u16), Reason> {
    let client = hs.conn;
    let io_err = |e: io::Error| Reason::Io(e.to_string());

    // Greeting: VER (read) NMETHODS METHODS...
    let count = hs.byte()?;
    let mut methods = vec![0u8; usize::from(count)];
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
