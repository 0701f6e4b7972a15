//! The shell's bridge to its egress proxy (docs/design.md#shell-and-its-egress-proxy): a TCP
//! listener on the sandbox's own loopback that forwards each connection, byte for byte, to
//! the proxy's Unix socket, so that programs which know only `HTTPS_PROXY=http://host:port`
//! (curl, git, cargo, pip, npm, go) find the proxy.
//!
//! The bridge decides nothing and is trusted with nothing: the command it serves may kill it
//! or listen in its place, and reaches the same socket either way. Every check is made by the
//! proxy, outside the sandbox.
//!
//! The listener's port is the kernel's pick. The sandbox's loopback is up on both backends:
//! bwrap's `--unshare-net` brings `lo` up in the namespace it makes, and Podman's
//! `--network=none` does too.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;

use crate::proxy::{relay, IDLE_TIMEOUT};

/// How many connections the bridge forwards at once; one past it is closed at once. The proxy
/// holds the call's own bound and serves no more than 16 at once itself; this one keeps the
/// bridge's threads (two a connection) few: the kernel counts them against the service user's
/// processes, which the other calls' sandboxes are bounded by too (RLIMIT_NPROC, the `pids`
/// limit), so a flood in one sandbox must not use them up (docs/design.md#the-egress-proxy).
pub const MAX_BRIDGED: usize = 16;

/// The proxy variables set for the command, each to the bridge's `http://` address
/// (docs/design.md#shell-and-its-egress-proxy). `NO_PROXY` and `no_proxy` are set empty.
pub const PROXY_VARIABLES: [&str; 5] = [
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "ALL_PROXY",
];
/// The variables set empty, so that nothing the image sets sends a host around the proxy.
pub const NO_PROXY_VARIABLES: [&str; 2] = ["NO_PROXY", "no_proxy"];

/// A running bridge: its address on loopback.
#[derive(Debug)]
pub struct Bridge {
    addr: SocketAddr,
}

impl Bridge {
    /// Listens on `127.0.0.1` (a port the kernel picks) and forwards, on threads of its own,
    /// until the process ends.
    pub fn start(socket: &Path) -> io::Result<Bridge> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let addr = listener.local_addr()?;
        let socket = socket.to_path_buf();
        thread::Builder::new()
            .name("egress-bridge".into())
            .spawn(move || accept_loop(listener, socket))?;
        Ok(Bridge { addr })
    }

    /// `http://127.0.0.1:<port>`, what the proxy variables say.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The environment the command gets: [`PROXY_VARIABLES`] set to [`url`](Self::url),
    /// [`NO_PROXY_VARIABLES`] set empty.
    pub fn environment(&self) -> Vec<(&'static str, String)> {
        let url = self.url();
        let mut env: Vec<(&'static str, String)> =
            PROXY_VARIABLES.iter().map(|v| (*v, url.clone())).collect();
        env.extend(NO_PROXY_VARIABLES.iter().map(|v| (*v, String::new())));
        env
    }
}

/// Counts a connection as open until dropped.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn accept_loop(listener: TcpListener, socket: PathBuf) {
    let open = Arc::new(AtomicUsize::new(0));
    loop {
        let Ok((client, _)) = listener.accept() else {
            // Out of descriptors: wait for connections to end rather than spin.
            thread::sleep(std::time::Duration::from_millis(50));
            continue;
        };
        // Only this thread adds, so the check and the add cannot race each other.
        if open.load(Ordering::SeqCst) >= MAX_BRIDGED {
            drop(client);
            continue;
        }
        open.fetch_add(1, Ordering::SeqCst);
        let slot = Slot(open.clone());
        let socket = socket.clone();
        // A failed spawn drops the closure, and with it the connection and the slot.
        let _ = thread::Builder::new()
            .name("egress-bridged".into())
            .spawn(move || {
                let _slot = slot;
                forward(client, &socket);
            });
    }
}

/// One connection: to the proxy's socket, then bytes both ways until both ends close.
fn forward(client: TcpStream, socket: &Path) {
    let _ = client.set_nodelay(true);
    let Ok(proxy) = UnixStream::connect(socket) else {
        return;
    };
    relay::relay(&client, &proxy, IDLE_TIMEOUT, None);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::net::UnixListener;

    #[test]
    fn forwards_both_ways_and_names_itself_in_every_variable() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("egress.sock");
        let listener = UnixListener::bind(&path).expect("bind");
        let echo = thread::spawn(move || {
            let (mut s, _) = listener.accept().expect("accept");
            let mut got = Vec::new();
            s.read_to_end(&mut got).expect("read");
            s.write_all(&got).expect("write");
        });
        let bridge = Bridge::start(&path).expect("bridge");
        let env = bridge.environment();
        let url = bridge.url();
        assert!(url.starts_with("http://127.0.0.1:"), "{url}");
        for v in PROXY_VARIABLES {
            assert!(env.contains(&(v, url.clone())), "{v}");
        }
        for v in NO_PROXY_VARIABLES {
            assert!(env.contains(&(v, String::new())), "{v}");
        }
        let mut c = TcpStream::connect(bridge.addr).expect("connect");
        c.write_all(b"CONNECT a.example:443 HTTP/1.1\r\n\r\n")
            .expect("write");
        c.shutdown(std::net::Shutdown::Write).expect("half-close");
        let mut back = Vec::new();
        c.read_to_end(&mut back).expect("read");
        assert_eq!(back, b"CONNECT a.example:443 HTTP/1.1\r\n\r\n");
        echo.join().expect("echo");
    }
}
