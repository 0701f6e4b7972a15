//! The relay of the egress proxy: once connected, bytes are copied both ways without being
//! looked at, a half-close passed on, until both directions have ended, no byte has moved
//! either way for the idle timeout, or the call's bytes are spent
//! (docs/design.md#the-egress-proxy, step 5).

use std::io;
use std::net::Shutdown;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use super::{Conn, Meter};

/// The copy buffer of each direction.
const RELAY_BUFFER: usize = 64 * 1024;

/// How a relayed connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Both ends closed, or one failed.
    Closed,
    /// The call's bytes each way were spent; both ends were shut.
    BytesSpent,
    /// No byte moved either way for the idle timeout; both ends were shut.
    Idle,
}

/// What a relay did: bytes up (client to server), down, and how it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Relayed {
    pub(crate) up: u64,
    pub(crate) down: u64,
    pub(crate) ended: Ended,
}

/// What the two directions share: when a byte last moved, and why they were cut, if they were.
struct Shared {
    start: Instant,
    /// Milliseconds from `start` to the last byte either way.
    last: AtomicU64,
    /// 0: not cut, 1: bytes spent, 2: idle.
    cut: AtomicU8,
    idle: Duration,
}

impl Shared {
    fn touch(&self) {
        let ms = self.start.elapsed().as_millis() as u64;
        self.last.store(ms, Ordering::SeqCst);
    }

    fn idle_for(&self) -> Duration {
        let last = Duration::from_millis(self.last.load(Ordering::SeqCst));
        self.start.elapsed().saturating_sub(last)
    }
}

/// Copies both ways until both directions have ended, either way has been idle for `idle`,
/// or `meter` (the call's bytes, shared by its connections) is spent.
pub(crate) fn relay<A: Conn, B: Conn>(
    client: &A,
    server: &B,
    idle: Duration,
    meter: Option<&Meter>,
) -> Relayed {
    let shared = Shared {
        start: Instant::now(),
        last: AtomicU64::new(0),
        cut: AtomicU8::new(0),
        idle,
    };
    // A read wakes at least every `idle` to look whether the other way moved meanwhile; a
    // write blocked that long means a peer that does not read.
    for deadline in [
        client.set_read_deadline(Some(idle)),
        client.set_write_deadline(Some(idle)),
        server.set_read_deadline(Some(idle)),
        server.set_write_deadline(Some(idle)),
    ] {
        if deadline.is_err() {
            return Relayed {
                up: 0,
                down: 0,
                ended: Ended::Closed,
            };
        }
    }
    let (up, down) = std::thread::scope(|s| {
        let up = s.spawn(|| pump(client, server, &shared, meter.map(|m| (&m.up, m.max))));
        let down = pump(server, client, &shared, meter.map(|m| (&m.down, m.max)));
        // pump does not panic; if it somehow did, the count is all that is lost.
        (up.join().unwrap_or(0), down)
    });
    let ended = match shared.cut.load(Ordering::SeqCst) {
        1 => Ended::BytesSpent,
        2 => Ended::Idle,
        _ => Ended::Closed,
    };
    Relayed { up, down, ended }
}

/// One direction. End of input is passed on as a half-close, so a client that shuts its
/// write side still gets the answer. An error, the idle timeout or the spent bound ends both
/// directions: otherwise the other pump could wait for a peer that is gone.
fn pump<R: Conn, W: Conn>(
    from: &R,
    to: &W,
    shared: &Shared,
    bound: Option<(&AtomicU64, u64)>,
) -> u64 {
    let mut buf = vec![0u8; RELAY_BUFFER];
    let mut total = 0u64;
    loop {
        if shared.cut.load(Ordering::SeqCst) != 0 {
            break;
        }
        match from.read_into(&mut buf) {
            Ok(0) => {
                let _ = to.shutdown_half(Shutdown::Write);
                return total;
            }
            Ok(n) => {
                shared.touch();
                if let Some((spent, max)) = bound {
                    // What crosses the bound is not passed on.
                    let before = spent.fetch_add(n as u64, Ordering::SeqCst);
                    if before.saturating_add(n as u64) > max {
                        shared.cut.store(1, Ordering::SeqCst);
                        break;
                    }
                }
                if to.write_all_from(&buf[..n]).is_err() {
                    break;
                }
                total += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                if shared.idle_for() >= shared.idle {
                    let _ = shared
                        .cut
                        .compare_exchange(0, 2, Ordering::SeqCst, Ordering::SeqCst);
                    break;
                }
            }
            Err(_) => break,
        }
    }
    let _ = from.shutdown_half(Shutdown::Both);
    let _ = to.shutdown_half(Shutdown::Both);
    total
}
