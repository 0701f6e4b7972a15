//! The HTTP side of the egress proxy: a `CONNECT host:443 HTTP/1.1` request head, as curl,
//! git, cargo, pip, npm and go send it when `HTTPS_PROXY` names an `http://` proxy, and the
//! status lines it is answered with (docs/design.md#the-egress-proxy).
//!
//! Only the request line is looked at: its method must be `CONNECT`, its target
//! `name:port` in authority form. Header lines are read (so the tunnel starts after them) and
//! ignored; the `Host` header in particular decides nothing. The name then goes through the
//! same checks as a SOCKS5 name (`dial::open`).

use std::fmt;
use std::net::IpAddr;

use super::handshake::Handshake;
use super::{Conn, Outcome, Reason, Reply};

/// The most bytes of an HTTP request head read: curl's `CONNECT` is about 100, git's and
/// pip's a few hundred.
pub const MAX_HEAD_BYTES: usize = 4096;

/// The most bytes of a method kept for the log line.
const METHOD_SHOWN: usize = 32;

/// The HTTP statuses this proxy answers with (docs/design.md#the-egress-proxy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// 200: the tunnel is open.
    Established,
    /// 400: not an HTTP/1 request line, or a target that is not `name:port`.
    BadRequest,
    /// 403: a name not valid, not allowed or an IP literal, or a port not 443.
    Forbidden,
    /// 405: a method other than `CONNECT`, a plain-HTTP request among them.
    MethodNotAllowed,
    /// 408: the head did not arrive in time.
    RequestTimeout,
    /// 431: the head is longer than [`MAX_HEAD_BYTES`].
    HeadTooLarge,
    /// 502: resolution failed, no dialable address, or connecting failed.
    BadGateway,
}

impl Status {
    pub fn code(self) -> u16 {
        match self {
            Status::Established => 200,
            Status::BadRequest => 400,
            Status::Forbidden => 403,
            Status::MethodNotAllowed => 405,
            Status::RequestTimeout => 408,
            Status::HeadTooLarge => 431,
            Status::BadGateway => 502,
        }
    }

    fn text(self) -> &'static str {
        match self {
            Status::Established => "Connection established",
            Status::BadRequest => "Bad Request",
            Status::Forbidden => "Forbidden",
            Status::MethodNotAllowed => "Method Not Allowed",
            Status::RequestTimeout => "Request Timeout",
            Status::HeadTooLarge => "Request Header Fields Too Large",
            Status::BadGateway => "Bad Gateway",
        }
    }

    /// The response head sent. Every status but 200 is followed by closing the connection.
    pub fn bytes(self) -> Vec<u8> {
        let (code, text) = (self.code(), self.text());
        match self {
            Status::Established => format!("HTTP/1.1 {code} {text}\r\n\r\n"),
            Status::MethodNotAllowed => format!(
                "HTTP/1.1 {code} {text}\r\nAllow: CONNECT\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
            ),
            _ => format!(
                "HTTP/1.1 {code} {text}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
            ),
        }
        .into_bytes()
    }

    /// The status for a connection that ended with `reply` (the decision the SOCKS5 side
    /// would have answered) and `reason`; `None` where nothing is sent (a client gone).
    pub fn for_outcome(reply: Option<Reply>, reason: &Reason) -> Option<Status> {
        match reply {
            Some(Reply::Succeeded) => Some(Status::Established),
            Some(Reply::NotAllowed | Reply::AddressTypeNotSupported) => Some(Status::Forbidden),
            Some(Reply::HostUnreachable | Reply::ConnectionRefused) => Some(Status::BadGateway),
            Some(Reply::CommandNotSupported) => Some(Status::MethodNotAllowed),
            None => match reason {
                Reason::BadRequest => Some(Status::BadRequest),
                Reason::TooLong => Some(Status::HeadTooLarge),
                Reason::HandshakeTimeout => Some(Status::RequestTimeout),
                _ => None,
            },
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.code(), self.text())
    }
}

/// The request head, its first byte already read by `serve`, within the handshake's budget.
/// Returns the requested name, still bytes, and port. On `Err`, `outcome.reply` holds the
/// decision to answer (as a [`Status`]) before closing, if any.
pub(super) fn read_request<C: Conn>(
    hs: &mut Handshake<'_, C>,
    first: u8,
    outcome: &mut Outcome,
) -> Result<(Vec<u8>, u16), Reason> {
    let mut request_line = vec![first];
    read_line(hs, &mut request_line)?;
    // Header lines, up to the empty line that ends the head.
    loop {
        let mut header = Vec::new();
        read_line(hs, &mut header)?;
        if header.is_empty() {
            break;
        }
    }

    let mut parts = request_line.split(|b| *b == b' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Reason::BadRequest);
    };
    if version != b"HTTP/1.1" && version != b"HTTP/1.0" {
        return Err(Reason::BadRequest);
    }
    if method != b"CONNECT" {
        outcome.reply = Some(Reply::CommandNotSupported);
        let shown = &method[..method.len().min(METHOD_SHOWN)];
        return Err(Reason::Method(String::from_utf8_lossy(shown).into_owned()));
    }
    // Authority form: name ':' port. The last ':' splits, so `a.example:80:443` is the name
    // `a.example:80`, which no check lets through.
    let Some(colon) = target.iter().rposition(|b| *b == b':') else {
        return Err(Reason::BadRequest);
    };
    let (name, port) = (&target[..colon], &target[colon + 1..]);
    let port = parse_port(port).ok_or(Reason::BadRequest)?;
    outcome.target = Some((String::from_utf8_lossy(name).into_owned(), port));
    if is_ip_literal(name) {
        outcome.reply = Some(Reply::NotAllowed);
        return Err(Reason::IpLiteral);
    }
    Ok((name.to_vec(), port))
}

/// One line of the head, appended to `line` without its end: LF, or CR LF.
fn read_line<C: Conn>(hs: &mut Handshake<'_, C>, line: &mut Vec<u8>) -> Result<(), Reason> {
    loop {
        match hs.byte()? {
            b'\n' => {
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                return Ok(());
            }
            b => line.push(b),
        }
    }
}

/// 1 to 5 ASCII digits that make a port: no sign, no space, nothing after.
fn parse_port(digits: &[u8]) -> Option<u16> {
    if digits.is_empty() || digits.len() > 5 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// `[v6]`, or what parses as an address: the proxy connects to names, which it resolves
/// itself, never to addresses it is handed.
fn is_ip_literal(name: &[u8]) -> bool {
    name.first() == Some(&b'[')
        || std::str::from_utf8(name).is_ok_and(|s| s.parse::<IpAddr>().is_ok())
}
