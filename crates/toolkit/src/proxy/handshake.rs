//! Reading a client's handshake, SOCKS5 or HTTP, within a byte budget and one deadline for the
//! whole of it (docs/design.md#the-egress-proxy): nothing past the handshake is ever read
//! here, so what the client sends after it (TLS) stays in the socket for the relay.

use std::io;
use std::time::{Duration, Instant};

use super::{Conn, Reason};

/// Reads the handshake within the byte budget and the deadline.
pub(super) struct Handshake<'a, C: Conn> {
    pub(super) conn: &'a C,
    deadline: Instant,
    used: usize,
    limit: usize,
}

impl<'a, C: Conn> Handshake<'a, C> {
    /// A handshake that may take `timeout` in all and `limit` bytes.
    pub(super) fn new(conn: &'a C, timeout: Duration, limit: usize) -> Handshake<'a, C> {
        Handshake {
            conn,
            deadline: Instant::now() + timeout,
            used: 0,
            limit,
        }
    }

    /// Sets the byte budget, once the protocol is known (the bytes read so far count).
    pub(super) fn set_limit(&mut self, limit: usize) {
        self.limit = limit;
    }

    /// Exactly `buf.len()` bytes, or [`Reason::TooLong`] before reading if they would pass the
    /// budget.
    pub(super) fn take(&mut self, buf: &mut [u8]) -> Result<(), Reason> {
        if self.used + buf.len() > self.limit {
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

    pub(super) fn byte(&mut self) -> Result<u8, Reason> {
        let mut b = [0u8; 1];
        self.take(&mut b)?;
        Ok(b[0])
    }
}
