//! The relay of the egress proxy: once connected, bytes are copied both ways without being
//! looked at, a half-close passed on, until both directions have ended
//! (docs/design.md#the-egress-proxy, step 5).

use std::io;
use std::net::Shutdown;

use super::Conn;

/// The copy buffer of each direction.
const RELAY_BUFFER: usize = 64 * 1024;

/// Copies both ways until both directions have ended; returns the bytes sent up (client to
/// server) and down.
pub(crate) fn relay<A: Conn, B: Conn>(client: &A, server: &B) -> (u64, u64) {
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
