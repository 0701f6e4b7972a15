//! Relay throughput of the egress proxy on loopback (docs/design.md#the-egress-proxy), next to a
//! direct copy over loopback TCP, so a slow relay shows as a ratio rather than a bare number.
//!
//! `cargo bench -p toolkit --bench relay` (or `-- <MiB>` for another size). Client → proxy over
//! a Unix socket → TCP to a sink on 127.0.0.1, and the same bytes the other way.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use toolkit::proxy::{self, Dial, Limits, Policy, MAX_CONNECTIONS};

const CHUNK: usize = 256 * 1024;

struct ToLocal(SocketAddr);

impl Dial for ToLocal {
    fn resolve(&self, _host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
        Ok(vec![SocketAddr::new([93, 184, 216, 34].into(), port)])
    }
    fn connect(&self, _addr: SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
        TcpStream::connect_timeout(&self.0, timeout)
    }
}

/// Writes `total` bytes to `w`, then half-closes through `done`.
fn send(mut w: impl Write, total: u64) -> io::Result<()> {
    let buf = vec![0x5au8; CHUNK];
    let mut left = total;
    while left > 0 {
        let n = left.min(CHUNK as u64) as usize;
        w.write_all(&buf[..n])?;
        left -= n as u64;
    }
    Ok(())
}

fn drain(mut r: impl Read) -> io::Result<u64> {
    let mut buf = vec![0u8; CHUNK];
    let mut total = 0;
    loop {
        match r.read(&mut buf)? {
            0 => return Ok(total),
            n => total += n as u64,
        }
    }
}

fn mbps(bytes: u64, took: Duration) -> f64 {
    bytes as f64 / 1_000_000.0 / took.as_secs_f64()
}

/// A TCP server on 127.0.0.1 that, per connection, either drains (`up`) or sends `total`.
fn sink(total: u64, up: bool) -> io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    std::thread::spawn(move || {
        for s in listener.incoming().flatten() {
            std::thread::spawn(move || {
                if up {
                    let _ = drain(&s);
                    let _ = (&s).write_all(b"k");
                } else {
                    let _ = send(&s, total);
                    let _ = s.shutdown(std::net::Shutdown::Write);
                    let _ = drain(&s);
                }
            });
        }
    });
    Ok(addr)
}

/// Time to move `total` bytes over `stream` in one direction and see the far end finish.
fn transfer<S>(stream: S, total: u64, up: bool) -> io::Result<Duration>
where
    for<'a> &'a S: Read + Write,
    S: HalfClose,
{
    let started = Instant::now();
    if up {
        send(&stream, total)?;
        stream.close_write()?;
        // The sink's one-byte answer comes after it has read everything.
        let mut ack = [0u8; 1];
        (&stream).read_exact(&mut ack)?;
    } else {
        let got = drain(&stream)?;
        if got != total {
            return Err(io::Error::other(format!("got {got} of {total} bytes")));
        }
        stream.close_write()?;
    }
    Ok(started.elapsed())
}

trait HalfClose {
    fn close_write(&self) -> io::Result<()>;
}
impl HalfClose for TcpStream {
    fn close_write(&self) -> io::Result<()> {
        self.shutdown(std::net::Shutdown::Write)
    }
}
impl HalfClose for UnixStream {
    fn close_write(&self) -> io::Result<()> {
        self.shutdown(std::net::Shutdown::Write)
    }
}

fn through_proxy(path: &std::path::Path, total: u64, up: bool) -> io::Result<Duration> {
    let mut s = UnixStream::connect(path)?;
    let mut req = vec![5, 1, 0, 5, 1, 0, 3, 11];
    req.extend_from_slice(b"example.com");
    req.extend_from_slice(&443u16.to_be_bytes());
    s.write_all(&req)?;
    let mut reply = [0u8; 12];
    s.read_exact(&mut reply)?;
    if reply[3] != 0 {
        return Err(io::Error::other(format!("proxy replied {}", reply[3])));
    }
    transfer(s, total, up)
}

fn main() -> io::Result<()> {
    // `cargo bench` passes "--bench"; a bare number among the arguments is the size in MiB.
    let mib: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(512);
    let total = mib * 1024 * 1024;
    let dir = tempfile::tempdir()?;

    for (label, up) in [("client -> server", true), ("server -> client", false)] {
        let target = sink(total, up)?;
        let direct = transfer(TcpStream::connect(target)?, total, up)?;

        let path = dir.path().join(if up { "up.sock" } else { "down.sock" });
        let listener = UnixListener::bind(&path)?;
        let policy = Policy::new(vec!["example.com".into()], vec![])
            .map_err(|e| io::Error::other(e.to_string()))?;
        let dial: Arc<dyn Dial> = Arc::new(ToLocal(target));
        std::thread::spawn(move || {
            proxy::run(
                listener,
                Arc::new(policy),
                dial,
                Limits {
                    open: MAX_CONNECTIONS,
                    total: None,
                },
            )
        });
        let relayed = through_proxy(&path, total, up)?;

        println!(
            "{label}, {mib} MiB: direct TCP {:>8.0} MB/s   through the proxy {:>8.0} MB/s   ({:.0}%)",
            mbps(total, direct),
            mbps(total, relayed),
            100.0 * direct.as_secs_f64() / relayed.as_secs_f64()
        );
    }
    Ok(())
}
