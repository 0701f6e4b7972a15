//! The egress proxy through its listener and as a program (docs/design.md#the-egress-proxy): the
//! cap of 8 connections, and exit 2 for a bad command line. Nothing here leaves 127.0.0.1.

#![forbid(unsafe_code)]
// A test: a setup step that fails is the test failing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use toolkit::proxy::{self, Dial, Policy, MAX_CONNECTIONS};

/// Every name resolves to one public address; every connection goes to a local listener.
struct ToLocal(SocketAddr);

impl Dial for ToLocal {
    fn resolve(&self, _host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
        Ok(vec![SocketAddr::new([93, 184, 216, 34].into(), port)])
    }
    fn connect(&self, _addr: SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
        TcpStream::connect_timeout(&self.0, timeout)
    }
}

const SUCCESS: [u8; 12] = [5, 0, 5, 0, 0, 1, 0, 0, 0, 0, 0, 0];

fn request() -> Vec<u8> {
    let mut r = vec![5, 1, 0, 5, 1, 0, 3, 11];
    r.extend_from_slice(b"example.com");
    r.extend_from_slice(&443u16.to_be_bytes());
    r
}

fn open(path: &std::path::Path) -> UnixStream {
    let s = UnixStream::connect(path).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    s
}

fn handshake(path: &std::path::Path) -> io::Result<UnixStream> {
    let mut s = open(path);
    s.write_all(&request())?;
    let mut reply = [0u8; 12];
    s.read_exact(&mut reply)?;
    assert_eq!(reply, SUCCESS);
    Ok(s)
}

/// Whether the proxy closed `s` without sending anything.
fn closed_silently(s: &mut UnixStream) -> bool {
    let mut buf = [0u8; 16];
    match s.read(&mut buf) {
        Ok(0) => true,
        Err(e) if e.kind() == io::ErrorKind::ConnectionReset => true,
        Ok(_) => false,
        Err(e) => panic!("neither answered nor closed: {e}"),
    }
}

#[test]
fn a_ninth_connection_is_closed_at_once() {
    // The servers behind the proxy hold each connection until the client's side ends.
    let sink = TcpListener::bind("127.0.0.1:0").expect("bind");
    let target = sink.local_addr().expect("addr");
    std::thread::spawn(move || {
        for mut s in sink.incoming().flatten() {
            std::thread::spawn(move || {
                let _ = io::copy(&mut s, &mut io::sink());
            });
        }
    });

    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("egress.sock");
    let listener = UnixListener::bind(&path).expect("bind");
    let policy = Policy::new(vec!["example.com".into()], vec![])
        .expect("policy")
        .with_handshake_timeout(Duration::from_secs(5));
    let dial: Arc<dyn Dial> = Arc::new(ToLocal(target));
    std::thread::spawn(move || {
        proxy::run(
            listener,
            Arc::new(policy),
            dial,
            proxy::Limits {
                open: MAX_CONNECTIONS,
                total: None,
            },
        )
    });

    let mut open_ones: Vec<UnixStream> = (0..MAX_CONNECTIONS)
        .map(|_| handshake(&path).expect("one of the first 8"))
        .collect();

    // The ninth is closed without a reply, even one that sends nothing.
    let started = Instant::now();
    let mut ninth = open(&path);
    assert!(
        closed_silently(&mut ninth),
        "the 9th connection got an answer"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    let mut tenth = open(&path);
    let _ = tenth.write_all(&request());
    assert!(
        closed_silently(&mut tenth),
        "the 10th connection got an answer"
    );

    // Once one ends, a new one is served again (the slot is freed when its relay ends).
    drop(open_ones.pop());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match handshake(&path) {
            Ok(s) => {
                open_ones.push(s);
                break;
            }
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("no slot came free: {e}"),
        }
    }
}

#[test]
fn bad_command_lines_exit_2() {
    let cases: [&[&str]; 6] = [
        &[],
        &["--socket", "/nonexistent/egress.sock"],
        &["--allow", "example.com"],
        &["--socket", "/nonexistent/s", "--allow", "*.com"],
        &[
            "--socket",
            "/nonexistent/s",
            "--allow",
            "example.com",
            "--allow-address",
            "169.254.0.0/16",
        ],
        &[
            "--socket",
            "/nonexistent/s",
            "--allow",
            "example.com",
            "--bogus",
        ],
    ];
    for args in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_toolkit"))
            .arg("egress-proxy")
            .args(args)
            .output()
            .expect("run toolkit");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("toolkit egress-proxy: "), "{args:?}: {err}");
        assert!(out.stdout.is_empty());
    }
}
