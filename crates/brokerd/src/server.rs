//! The listener: peers, frames and connections (DESIGN.md "Life of a call" 1-2, "Protocol").
//!
//! Each connection is served by its own task and answered in order; concurrency comes from
//! more connections. A line is at most [`proto::broker::MAX_LINE`] bytes; a longer one is
//! answered with an `error` and skipped to its end. A peer not in `[broker] clients` gets one
//! `error` line and is closed. A connection idle for [`IDLE_TIMEOUT`] is closed, and at most
//! [`MAX_CONNECTIONS`] are served at once, so silent clients cannot pile up.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use proto::broker::{Answer, Body, Request, MAX_LINE, PROTOCOL};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{watch, Semaphore};

use crate::broker::{Broker, Peer};

/// A connection that sends nothing for this long is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(900);
/// The most connections served at once; more are answered `busy` and closed.
pub const MAX_CONNECTIONS: usize = 256;

/// Protocol errors a client can read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("the line is longer than 4 MiB")]
    TooLong,
    #[error("the line is not UTF-8")]
    NotUtf8,
    #[error("the line is not a valid request: {0}")]
    BadRequest(String),
    #[error("protocol version {0} is not supported; this brokerd speaks version 1")]
    Version(u32),
    #[error("this peer is not allowed to use brokerd")]
    PeerNotAllowed,
    #[error("busy: too many connections")]
    TooManyConnections,
}

/// The configured clients, resolved once at start: user names and uids to uids, `@group`
/// to a gid and its member names. root is not implied.
#[derive(Debug, Default, Clone)]
pub struct Clients {
    uids: HashSet<u32>,
    gids: HashSet<u32>,
    group_members: HashSet<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ClientsError {
    #[error("no user named {0:?}")]
    NoUser(String),
    #[error("no group named {0:?}")]
    NoGroup(String),
    #[error("looking up {0:?} failed: {1}")]
    Lookup(String, nix::Error),
}

impl Clients {
    pub fn resolve(entries: &[String]) -> Result<Clients, ClientsError> {
        use nix::unistd::{Group, User};
        let mut c = Clients::default();
        for e in entries {
            if let Some(name) = e.strip_prefix('@') {
                let g = Group::from_name(name)
                    .map_err(|err| ClientsError::Lookup(e.clone(), err))?
                    .ok_or_else(|| ClientsError::NoGroup(name.to_string()))?;
                c.gids.insert(g.gid.as_raw());
                c.group_members.extend(g.mem);
            } else if let Ok(uid) = e.parse::<u32>() {
                c.uids.insert(uid);
            } else {
                let u = User::from_name(e)
                    .map_err(|err| ClientsError::Lookup(e.clone(), err))?
                    .ok_or_else(|| ClientsError::NoUser(e.clone()))?;
                c.uids.insert(u.uid.as_raw());
            }
        }
        Ok(c)
    }

    /// Clients given directly, for tests and `--socket` runs.
    pub fn of_uids(uids: impl IntoIterator<Item = u32>) -> Clients {
        Clients {
            uids: uids.into_iter().collect(),
            ..Clients::default()
        }
    }

    pub fn allows(&self, uid: u32, gid: u32) -> bool {
        if self.uids.contains(&uid) || self.gids.contains(&gid) {
            return true;
        }
        if self.group_members.is_empty() {
            return false;
        }
        // Supplementary groups: SO_PEERCRED carries only the primary gid.
        match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
            Ok(Some(u)) => self.group_members.contains(&u.name),
            _ => false,
        }
    }
}

/// Who may connect: the clients, and the owners (who may also commit, discard and approve).
#[derive(Debug, Default)]
pub struct Peers {
    pub clients: Clients,
    pub owners: Clients,
}

impl Peers {
    /// Clients alone, no owner (tests and `--socket` runs).
    pub fn clients(clients: Clients) -> Peers {
        Peers {
            clients,
            owners: Clients::default(),
        }
    }
}

/// What one read of a frame gave.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    Line(Vec<u8>),
    TooLong,
    Eof,
}

/// Reads one line of at most `max` bytes (newline excluded). A longer line is consumed to its
/// end and reported as [`Frame::TooLong`], so the connection stays in step.
pub async fn read_frame<R: AsyncBufRead + Unpin>(r: &mut R, max: usize) -> std::io::Result<Frame> {
    let mut line = Vec::new();
    let mut too_long = false;
    loop {
        let buf = r.fill_buf().await?;
        if buf.is_empty() {
            // EOF: a last line without a newline still counts.
            return Ok(match (too_long, line.is_empty()) {
                (true, _) => Frame::TooLong,
                (false, true) => Frame::Eof,
                (false, false) => Frame::Line(line),
            });
        }
        let (chunk, found) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], Some(i + 1)),
            None => (buf, None),
        };
        if !too_long {
            if line.len() + chunk.len() > max {
                too_long = true;
                line = Vec::new();
            } else {
                line.extend_from_slice(chunk);
            }
        }
        let used = found.unwrap_or(buf.len());
        r.consume(used);
        if found.is_some() {
            return Ok(if too_long {
                Frame::TooLong
            } else {
                Frame::Line(line)
            });
        }
    }
}

/// Parses a request line; on failure the answer echoes the line's `id` when it has one.
pub fn parse_request(line: &[u8]) -> Result<Request, (Option<String>, FrameError)> {
    let text = std::str::from_utf8(line).map_err(|_| (None, FrameError::NotUtf8))?;
    match serde_json::from_str::<Request>(text) {
        Ok(req) => match req.version() {
            Some(v) if v != PROTOCOL => Err((Some(req.id().to_string()), FrameError::Version(v))),
            _ => Ok(req),
        },
        Err(e) => {
            let id = serde_json::from_str::<serde_json::Value>(text)
                .ok()
                .and_then(|v| v.get("id").and_then(|i| i.as_str()).map(str::to_string));
            Err((id, FrameError::BadRequest(e.to_string())))
        }
    }
}

fn error_line(id: Option<String>, e: &FrameError) -> String {
    Answer::new(
        id,
        Body::Error {
            message: e.to_string(),
        },
    )
    .to_line()
}

/// Serves `listener` until `shutdown` turns true; then stops accepting and returns. Calls in
/// flight finish in their own tasks (the broker's drain waits for them).
pub async fn serve(
    listener: UnixListener,
    broker: Arc<Broker>,
    clients: Arc<Peers>,
    mut shutdown: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        tokio::select! {
            _ = shutdown.changed() => {
                if *shutdown.borrow() { return; }
            }
            accepted = listener.accept() => {
                let (stream, _) = match accepted {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let Ok(permit) = slots.clone().try_acquire_owned() else {
                    tokio::spawn(refuse(stream, FrameError::TooManyConnections));
                    continue;
                };
                let broker = broker.clone();
                let clients = clients.clone();
                let shutdown = shutdown.clone();
                tokio::spawn(async move {
                    connection(stream, broker, &clients, shutdown).await;
                    drop(permit);
                });
            }
        }
    }
}

async fn refuse(mut stream: UnixStream, e: FrameError) {
    let _ = stream.write_all(error_line(None, &e).as_bytes()).await;
    let _ = stream.shutdown().await;
}

async fn connection(
    stream: UnixStream,
    broker: Arc<Broker>,
    peers: &Peers,
    mut shutdown: watch::Receiver<bool>,
) {
    let owner = |c: &tokio::net::unix::UCred| peers.owners.allows(c.uid(), c.gid());
    let peer = match stream.peer_cred() {
        Ok(c) if owner(&c) || peers.clients.allows(c.uid(), c.gid()) => Peer {
            uid: c.uid(),
            pid: c.pid(),
            owner: owner(&c),
        },
        Ok(c) => {
            tracing::warn!(
                uid = c.uid(),
                pid = c.pid(),
                "peer not in broker.clients; connection refused"
            );
            return refuse(stream, FrameError::PeerNotAllowed).await;
        }
        Err(e) => {
            tracing::warn!(error = %e, "no peer credentials; connection refused");
            return refuse(stream, FrameError::PeerNotAllowed).await;
        }
    };
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    loop {
        let frame = tokio::select! {
            f = read_frame(&mut reader, MAX_LINE) => f,
            _ = tokio::time::sleep(IDLE_TIMEOUT) => return,
            _ = shutdown.changed() => return,
        };
        // Held until the answer is written, so a shutdown's drain waits for it.
        let mut answering = None;
        let answer = match frame {
            // An empty line is not a request: skip it quietly, like a keep-alive.
            Ok(Frame::Line(l)) if l.iter().all(u8::is_ascii_whitespace) => continue,
            Ok(Frame::Line(l)) => match parse_request(&l) {
                Ok(req) => {
                    answering = Some(broker.answering());
                    broker.handle(req, peer).await.to_line()
                }
                Err((id, e)) => error_line(id, &e),
            },
            Ok(Frame::TooLong) => error_line(None, &FrameError::TooLong),
            Ok(Frame::Eof) | Err(_) => return,
        };
        let written = write.write_all(answer.as_bytes()).await;
        drop(answering);
        if written.is_err() {
            // The client vanished; whatever ran has been audited already.
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn frames(input: &[u8], max: usize) -> Vec<Frame> {
        let mut r = BufReader::with_capacity(7, input);
        let mut out = Vec::new();
        loop {
            let f = read_frame(&mut r, max).await.unwrap();
            let end = f == Frame::Eof;
            out.push(f);
            if end {
                return out;
            }
        }
    }

    #[tokio::test]
    async fn framing_table() {
        let l = |s: &str| Frame::Line(s.as_bytes().to_vec());
        let cases: Vec<(&[u8], Vec<Frame>)> = vec![
            (b"", vec![Frame::Eof]),
            (b"a\n", vec![l("a"), Frame::Eof]),
            (b"a\nbb\n", vec![l("a"), l("bb"), Frame::Eof]),
            (b"last", vec![l("last"), Frame::Eof]),
            (b"\n", vec![l(""), Frame::Eof]),
            // max is 10: a line of 11 is too long, and the next line is read in step
            (b"0123456789\n", vec![l("0123456789"), Frame::Eof]),
            (
                b"0123456789X\nok\n",
                vec![Frame::TooLong, l("ok"), Frame::Eof],
            ),
            (
                b"0123456789012345678901234567890\nok",
                vec![Frame::TooLong, l("ok"), Frame::Eof],
            ),
            (b"0123456789012345", vec![Frame::TooLong, Frame::Eof]),
        ];
        for (input, want) in cases {
            assert_eq!(
                frames(input, 10).await,
                want,
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn request_errors_echo_the_id_when_there_is_one() {
        let cases: Vec<(&[u8], Option<&str>, &str)> = vec![
            (b"not json", None, "the line is not a valid request"),
            (
                br#"{"op":"launch","id":"7"}"#,
                Some("7"),
                "the line is not a valid request",
            ),
            (
                br#"{"op":"status"}"#,
                None,
                "the line is not a valid request",
            ),
            (
                br#"{"op":"status","id":"8","v":2}"#,
                Some("8"),
                "protocol version 2 is not supported",
            ),
            (b"\xff\xfe", None, "the line is not UTF-8"),
        ];
        for (line, id, msg) in cases {
            let (got_id, e) = parse_request(line).unwrap_err();
            assert_eq!(got_id.as_deref(), id);
            assert!(e.to_string().starts_with(msg), "{e}");
        }
        assert!(parse_request(br#"{"op":"status","id":"9","v":1}"#).is_ok());
    }

    #[test]
    fn clients_by_uid() {
        let c = Clients::of_uids([1000]);
        assert!(c.allows(1000, 1000));
        assert!(!c.allows(0, 0), "root is not implied");
        let root = Clients::resolve(&["root".into()]).unwrap();
        assert!(root.allows(0, 0));
        assert!(matches!(
            Clients::resolve(&["no-such-user-here".into()]),
            Err(ClientsError::NoUser(_))
        ));
        assert!(matches!(
            Clients::resolve(&["@no-such-group-here".into()]),
            Err(ClientsError::NoGroup(_))
        ));
        let by_group = Clients::resolve(&["@root".into()]).unwrap();
        assert!(by_group.allows(4242, 0));
    }
}
