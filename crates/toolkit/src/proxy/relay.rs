//! The relay of the egress proxy: once connected, bytes are copied both ways without being
//! looked at, a half-close passed on, until both directions have ended, no byte has moved
//! either way for the idle timeout, or the call's bytes are spent
//! (docs/design.md#the-egress-proxy, step 5). Between two sockets the bytes go through a pipe
//! by `splice(2)`, never through user space.
//!
//! Each direction's pipe grows to 256 KiB where it can; where the kernel or a seccomp filter
//! will not splice an end, that direction falls back to a 64 KiB buffer, with what the pipe held
//! passed on. A relayed connection holds four pipes (two hops, two directions), 1 MiB of the
//! service user's pipe allowance; past it new pipes are small and the relay slower, never wrong.
//! Writes go in steps of at most 64 KiB, each counting as the connection moving, so a reader
//! still reading at more than about 1 KiB/s is not cut as idle. Throughput: BENCHMARKS.md, "The
//! egress relay".

use std::io;
use std::net::Shutdown;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{fcntl, splice, FcntlArg, OFlag, SpliceFFlags};
use nix::unistd::{pipe2, read};

use super::{Conn, Meter};

/// The copy buffer of each direction, where a buffer carries it.
const RELAY_BUFFER: usize = 64 * 1024;
/// A buffer's bytes are written in pieces of this many, each a sign of life.
const BUFFER_WRITE: usize = 16 * 1024;
/// The pipe of each direction, where a pipe carries it; what the kernel grants is what one
/// splice moves. Every page of a pipe's size counts against its user's pipe allowance
/// (`fs.pipe-user-pages-soft`, 64 MiB by default), which brokerd's sandboxes all share: a
/// relayed connection has four (two hops, two directions): 1 MiB, 16 MiB at a call's 16 at once.
const RELAY_PIPE: usize = 256 * 1024;

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

/// Where one direction's bytes wait between their read and their write: a pipe between the two
/// sockets, which `splice(2)` fills and drains inside the kernel, or, where either end is not a
/// socket or the kernel refuses the splice (a seccomp filter, an old kernel), a buffer.
enum Carrier<'a> {
    Pipe {
        from: BorrowedFd<'a>,
        to: BorrowedFd<'a>,
        read_end: OwnedFd,
        write_end: OwnedFd,
        /// The pipe's size: at most this much is taken at once.
        size: usize,
    },
    Buffer(Vec<u8>),
}

impl<'a> Carrier<'a> {
    fn new<R: Conn, W: Conn>(from: &'a R, to: &'a W) -> Carrier<'a> {
        if let (Some(from), Some(to)) = (from.socket_fd(), to.socket_fd()) {
            if let Ok((read_end, write_end)) = pipe2(OFlag::O_CLOEXEC) {
                // A pipe that cannot grow keeps the size it has (64 KiB, or less once the
                // user's allowance is spent: then a splice moves what fits).
                let size = fcntl(&write_end, FcntlArg::F_SETPIPE_SZ(RELAY_PIPE as i32))
                    .ok()
                    .and_then(|n| usize::try_from(n).ok())
                    .filter(|n| *n > 0)
                    .unwrap_or(RELAY_BUFFER);
                return Carrier::Pipe {
                    from,
                    to,
                    read_end,
                    write_end,
                    size,
                };
            }
        }
        Carrier::Buffer(vec![0u8; RELAY_BUFFER])
    }

    /// Reads what `from` has, at most a pipe's or a buffer's worth and at most `most`: how many
    /// bytes it now holds (0: end of input).
    fn take<R: Conn>(&mut self, from: &R, most: usize) -> io::Result<usize> {
        match self {
            Carrier::Pipe {
                from,
                write_end,
                size,
                ..
            } => splice(
                *from,
                None,
                &*write_end,
                None,
                (*size).min(most),
                SpliceFFlags::SPLICE_F_MOVE,
            )
            .map_err(io::Error::from),
            Carrier::Buffer(buf) => {
                let most = buf.len().min(most);
                from.read_into(&mut buf[..most])
            }
        }
    }

    /// Writes the `n` bytes it holds to `to`, all of them. Where the kernel will not splice
    /// into `to`, what the pipe holds is read out and written, and a buffer carries the
    /// direction from then on.
    /// Each write that moves bytes counts as the connection moving (`touch`), so a slow
    /// reader that is still reading is never cut as idle.
    fn give<W: Conn>(&mut self, to: &W, n: usize, touch: &dyn Fn()) -> io::Result<()> {
        let rest = match self {
            Carrier::Pipe {
                to: out, read_end, ..
            } => {
                let mut left = n;
                loop {
                    if left == 0 {
                        return Ok(());
                    }
                    // In steps, each a sign of life: one splice of a whole pipe to a slow
                    // reader could outlast the idle timeout while it still reads.
                    match splice(
                        &*read_end,
                        None,
                        *out,
                        None,
                        left.min(RELAY_BUFFER),
                        SpliceFFlags::SPLICE_F_MOVE,
                    ) {
                        Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                        Ok(m) => {
                            left -= m;
                            touch();
                        }
                        Err(Errno::EINTR) => {}
                        Err(e) if refused(e as i32) => break drain(read_end, left)?,
                        Err(e) => return Err(e.into()),
                    }
                }
            }
            Carrier::Buffer(buf) => {
                for chunk in buf[..n].chunks(BUFFER_WRITE) {
                    to.write_all_from(chunk)?;
                    touch();
                }
                return Ok(());
            }
        };
        *self = Carrier::Buffer(vec![0u8; RELAY_BUFFER]);
        to.write_all_from(&rest)
    }

    /// Whether `e`, from the first [`Self::take`] of a pipe, says this kernel or filter will
    /// not splice these sockets: then a buffer carries the direction instead.
    fn refused(&self, e: &io::Error) -> bool {
        matches!(self, Carrier::Pipe { .. }) && e.raw_os_error().is_some_and(refused)
    }
}

/// Whether `errno` from `splice(2)` says it will not splice these files (the file type, a
/// seccomp filter, a kernel without it), rather than that something went wrong.
fn refused(errno: i32) -> bool {
    matches!(
        errno,
        libc::EINVAL | libc::ENOSYS | libc::EPERM | libc::EOPNOTSUPP | libc::EBADF
    )
}

/// The `n` bytes a pipe holds, read out.
fn drain(pipe: &OwnedFd, n: usize) -> io::Result<Vec<u8>> {
    let mut rest = vec![0u8; n];
    let mut got = 0;
    while got < n {
        match read(pipe, &mut rest[got..]) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(m) => got += m,
            Err(Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(rest)
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
    let mut carrier = Carrier::new(from, to);
    let mut total = 0u64;
    let touch = || shared.touch();
    loop {
        if shared.cut.load(Ordering::SeqCst) != 0 {
            break;
        }
        // At most one byte past what is left of the bound: enough to see it crossed.
        let most = bound.map_or(usize::MAX, |(spent, max)| {
            let left = max.saturating_sub(spent.load(Ordering::SeqCst));
            usize::try_from(left.saturating_add(1)).unwrap_or(usize::MAX)
        });
        match carrier.take(from, most) {
            Ok(0) => {
                let _ = to.shutdown_half(Shutdown::Write);
                return total;
            }
            Ok(n) => {
                shared.touch();
                if let Some((spent, max)) = bound {
                    // What crosses the bound is not passed on; what is under it is.
                    let before = spent.fetch_add(n as u64, Ordering::SeqCst);
                    if before.saturating_add(n as u64) > max {
                        let under = max.saturating_sub(before).min(n as u64);
                        if under > 0 && carrier.give(to, under as usize, &touch).is_ok() {
                            total += under;
                        }
                        shared.cut.store(1, Ordering::SeqCst);
                        break;
                    }
                }
                if carrier.give(to, n, &touch).is_err() {
                    break;
                }
                total += n as u64;
            }
            // The kernel or a filter will not splice these sockets: a buffer carries the
            // direction from here (the pipe is empty between a give and the next take).
            Err(e) if carrier.refused(&e) => {
                carrier = Carrier::Buffer(vec![0u8; RELAY_BUFFER]);
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::io::{Read, Write};
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    /// A stream whose "socket" is a directory, which the kernel will not splice from.
    struct Unspliceable {
        stream: UnixStream,
        dir: File,
    }

    impl Conn for Unspliceable {
        fn read_into(&self, buf: &mut [u8]) -> io::Result<usize> {
            self.stream.read_into(buf)
        }
        fn write_all_from(&self, buf: &[u8]) -> io::Result<()> {
            self.stream.write_all_from(buf)
        }
        fn set_read_deadline(&self, timeout: Option<Duration>) -> io::Result<()> {
            self.stream.set_read_deadline(timeout)
        }
        fn set_write_deadline(&self, timeout: Option<Duration>) -> io::Result<()> {
            self.stream.set_write_deadline(timeout)
        }
        fn shutdown_half(&self, how: Shutdown) -> io::Result<()> {
            self.stream.shutdown_half(how)
        }
        fn socket_fd(&self) -> Option<BorrowedFd<'_>> {
            Some(self.dir.as_fd())
        }
    }

    /// `payload` from the far end of `a` through the relay to the far end of `b`, and back
    /// again as it came, with `b`'s end closing after its answer.
    fn round_trip<A: Conn, B: Conn>(a: &A, mut a_far: UnixStream, b: &B, mut b_far: UnixStream) {
        let payload: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
        let (up, down) = std::thread::scope(|s| {
            let relay = s.spawn(|| relay(a, b, Duration::from_secs(5), None));
            let echo = s.spawn(move || {
                let mut got = Vec::new();
                b_far.read_to_end(&mut got).expect("read at the far end");
                b_far.write_all(&got).expect("answer");
            });
            a_far.write_all(&payload).expect("write");
            a_far.shutdown(Shutdown::Write).expect("half-close");
            let mut back = Vec::new();
            a_far.read_to_end(&mut back).expect("read the answer");
            echo.join().expect("echo");
            assert!(back == payload, "the bytes came back unchanged");
            let r = relay.join().expect("relay");
            (r.up, r.down)
        });
        assert_eq!((up, down), (3_000_000, 3_000_000));
    }

    /// Between two sockets the bytes go by splice; where the kernel refuses to splice an end,
    /// the direction falls back to a buffer on its first read, and nothing is lost either way.
    #[test]
    fn relays_by_splice_and_falls_back_to_a_buffer() {
        let (a, a_far) = UnixStream::pair().expect("pair");
        let (b, b_far) = UnixStream::pair().expect("pair");
        assert!(matches!(Carrier::new(&a, &b), Carrier::Pipe { .. }));
        round_trip(&a, a_far, &b, b_far);

        let dir = tempfile::tempdir().expect("tempdir");
        let (a, a_far) = UnixStream::pair().expect("pair");
        let (b, b_far) = UnixStream::pair().expect("pair");
        let a = Unspliceable {
            stream: a,
            dir: File::open(dir.path()).expect("open the directory"),
        };
        let mut carrier = Carrier::new(&a, &b);
        let e = carrier
            .take(&a, usize::MAX)
            .expect_err("a directory is not spliced");
        assert!(carrier.refused(&e), "{e}");
        round_trip(&a, a_far, &b, b_far);
    }
}
