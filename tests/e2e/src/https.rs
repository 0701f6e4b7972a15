//! The HTTPS test host: one TLS server (the leaf covers every test name) answering
//!
//! | path              | answer                                         |
//! |-------------------|------------------------------------------------|
//! | `/`               | 200 `hello from ok.test`                       |
//! | `/redirect-other` | 302 to `https://other.test/`                   |
//! | `/big`            | 200 and [`BIG`] bytes of `x`                   |
//! | `/slow`           | nothing for [`SLOW`], then 200 `slow`          |
//! | `/files/PATH`     | with `serve --files DIR`: DIR's file PATH      |
//! | anything else     | 404                                            |
//!
//! `/files/` is what a dumb-HTTP git clone reads (a bare repository after `git
//! update-server-info`), over one connection kept for the next request: a query is ignored, and a path with an empty, `.` or `..` component,
//! or one that is not a regular file under DIR, is 404.
//!
//! and a plain TCP "tailnet host" that greets every connection and counts them in a file, so
//! the suite can tell that nothing but its own control reached it.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ServerConfig, ServerConnection, StreamOwned};

pub const HELLO: &str = "hello from ok.test";
pub const BIG: usize = 1 << 20;
pub const SLOW: Duration = Duration::from_secs(40);
pub const TAILNET_GREETING: &str = "tailnet host here";

pub fn tls_config(leaf: Vec<u8>, key: Vec<u8>, ca: Vec<u8>) -> Result<Arc<ServerConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(leaf), CertificateDer::from(ca)],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key)),
        )
        .map_err(|e| e.to_string())?;
    Ok(Arc::new(config))
}

pub fn serve(listener: TcpListener, config: Arc<ServerConfig>, files: Option<Arc<PathBuf>>) {
    for stream in listener.incoming().flatten() {
        let (config, files) = (config.clone(), files.clone());
        std::thread::spawn(move || {
            let _ = handle(stream, config, files.as_deref().map(PathBuf::as_path));
        });
    }
}

/// `/files/PATH` under `dir`, when PATH is a regular file there reached by plain names.
fn file_under(dir: &Path, path: &str) -> Option<Vec<u8>> {
    let rel = path.strip_prefix("/files/")?.split('?').next()?;
    if rel
        .split('/')
        .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return None;
    }
    let full = dir.join(rel);
    let meta = std::fs::symlink_metadata(&full).ok()?;
    meta.is_file().then(|| std::fs::read(&full).ok()).flatten()
}

fn handle(
    stream: TcpStream,
    config: Arc<ServerConfig>,
    files: Option<&Path>,
) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let conn = ServerConnection::new(config).map_err(std::io::Error::other)?;
    let mut tls = StreamOwned::new(conn, stream);
    let mut request = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        // One request: its head, and whatever of the next one came with it stays.
        let end = loop {
            if let Some(at) = request.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            let n = tls.read(&mut buf)?;
            if n == 0 || request.len() > 16 * 1024 {
                return Ok(());
            }
            request.extend_from_slice(&buf[..n]);
        };
        let head: Vec<u8> = request.drain(..end).collect();
        let line = String::from_utf8_lossy(&head);
        let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
        // `/files/` keeps the connection for the next request (a git clone's dozen, over one
        // tunnel); every other answer closes it.
        let keep = path.starts_with("/files/");
        let (status, extra, body): (&str, &str, Vec<u8>) = match path.as_str() {
            "/" => ("200 OK", "", HELLO.as_bytes().to_vec()),
            "/redirect-other" => ("302 Found", "Location: https://other.test/\r\n", Vec::new()),
            "/big" => ("200 OK", "", vec![b'x'; BIG]),
            "/slow" => {
                std::thread::sleep(SLOW);
                ("200 OK", "", b"slow".to_vec())
            }
            p => match files.and_then(|dir| file_under(dir, p)) {
                Some(body) => ("200 OK", "", body),
                None => ("404 Not Found", "", b"not found".to_vec()),
            },
        };
        let connection = if keep { "keep-alive" } else { "close" };
        let head = format!(
            "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n{extra}Connection: {connection}\r\n\r\n",
            body.len()
        );
        tls.write_all(head.as_bytes())?;
        tls.write_all(&body)?;
        if !keep {
            tls.conn.send_close_notify();
            return tls.flush();
        }
        tls.flush()?;
    }
}

/// The fake tailnet host: greets, then closes; each connection adds a line to `log`.
pub fn serve_tailnet(listener: TcpListener, log: Option<PathBuf>) {
    for mut stream in listener.incoming().flatten() {
        if let Some(log) = &log {
            let peer = stream
                .peer_addr()
                .map(|a| a.to_string())
                .unwrap_or_default();
            if let Ok(mut f) = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
            {
                let _ = writeln!(
                    f,
                    "{peer} -> {}",
                    stream
                        .local_addr()
                        .map(|a| a.to_string())
                        .unwrap_or_default()
                );
            }
        }
        let _ = stream.write_all(format!("{TAILNET_GREETING}\n").as_bytes());
    }
}
