//! Relay throughput of the egress proxy on loopback (docs/design.md#the-egress-proxy), next to a
//! direct copy over loopback TCP, so a slow relay shows as a ratio rather than a bare number.
//!
//! `cargo bench -p toolkit --bench relay` (or `-- <MiB>` for another size). Client → proxy over
//! a Unix socket → TCP to a sink on 127.0.0.1, and the same bytes the other way; then the path
//! a shell call's tools take (docs/design.md#shell-and-its-egress-proxy): client → the
//! toolkit's bridge on 127.0.0.1 by HTTP CONNECT → the proxy → the sink.

#![forbid(unsafe_code)]

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use toolkit::bridge::Bridge;
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

/// The same, through the bridge by HTTP CONNECT, as curl with `HTTPS_PROXY` does.
fn through_bridge(bridge: &Bridge, total: u64, up: bool) -> io::Result<Duration> {
    let port = bridge.url().rsplit(':').next().unwrap_or("").to_string();
    let mut s = TcpStream::connect(format!("127.0.0.1:{port}"))?;
    s.set_nodelay(true)?;
    s.write_all(b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")?;
    // The status line and the empty line after it, byte by byte: nothing of the tunnel is read.
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut b)?;
        head.push(b[0]);
    }
    if !head.starts_with(b"HTTP/1.1 200") {
        return Err(io::Error::other(
            String::from_utf8_lossy(&head).into_owned(),
        ));
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
        let bridged = through_bridge(&Bridge::start(&path)?, total, up)?;

        println!(
            "{label}, {mib} MiB: direct TCP {:>6.0} MB/s   proxy {:>6.0} MB/s ({:.0}%)   bridge and proxy {:>6.0} MB/s ({:.0}%)",
            mbps(total, direct),
            mbps(total, relayed),
            100.0 * direct.as_secs_f64() / relayed.as_secs_f64(),
            mbps(total, bridged),
            100.0 * direct.as_secs_f64() / bridged.as_secs_f64()
        );
    }
    Ok(())
}
