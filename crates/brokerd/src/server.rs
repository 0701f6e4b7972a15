//! The listener: peers, frames and connections (docs/design.md#life-of-a-call 1-2,
//! docs/design.md#protocol).
//!
//! Each connection is served by its own task and answered in order; concurrency comes from
//! more connections. A line is at most [`proto::broker::MAX_LINE`] bytes; a longer one is
//! answered with an `error` and skipped to its end. A peer not in `[broker] clients` gets one
//! `error` line and is closed.
//!
//! Silent clients cannot pile up, and one peer cannot lock the others out: a connection must
//! send its first request within [`FIRST_REQUEST_TIMEOUT`], and after it may stay silent for
//! [`IDLE_TIMEOUT`]; at most [`MAX_CONNECTIONS`] are served at once, at most
//! [`MAX_CONNECTIONS_PER_UID`] of them for one peer uid, and the last
//! [`RESERVED_CONNECTIONS`] only for a uid that holds fewer than [`RESERVE_PER_UID`].

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proto::broker::{Answer, Body, Request, MAX_LINE, PROTOCOL};
pub use proto::line::Frame;
use proto::line::LineReader;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedWriteHalf, UCred};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::broker::{Broker, Peer};

/// A connection that has sent a request and then sends nothing for this long is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(900);
/// A connection that has sent no request this long after it was accepted gets an `error` line
/// and is closed. Empty lines and lines that are not requests do not count.
pub const FIRST_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// The most connections served at once; more are answered `busy` and closed.
pub const MAX_CONNECTIONS: usize = 256;
/// The most connections one peer uid holds at once; more are answered `busy` and closed.
pub const MAX_CONNECTIONS_PER_UID: usize = 128;
/// The last slots of [`MAX_CONNECTIONS`], kept for the peers that are not the busy ones: once
/// fewer than this many are free, only a uid holding fewer than [`RESERVE_PER_UID`] is served.
pub const RESERVED_CONNECTIONS: usize = 64;
/// See [`RESERVED_CONNECTIONS`]: the reserve is shared by at least this many more uids.
pub const RESERVE_PER_UID: usize = 8;
/// How long the `error` line of a connection closed for saying nothing may take to write.
const FAREWELL_WRITE: Duration = Duration::from_secs(1);

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
    #[error("busy: too many connections from this user")]
    TooManyFromUser,
    #[error("no request within {} s of connecting; the connection is closed", FIRST_REQUEST_TIMEOUT.as_secs())]
    NoRequest,
}

/// The connection slots of one listener: all peers together, each uid's, and the reserve.
#[derive(Debug, Default)]
struct Slots {
    held: Mutex<Held>,
}

#[derive(Debug, Default)]
struct Held {
    total: usize,
    by_uid: HashMap<u32, usize>,
}

/// One connection's slot, given back when dropped.
struct Slot {
    slots: Arc<Slots>,
    uid: u32,
}

impl Slots {
    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        // The counts are plain numbers; a panic elsewhere leaves them usable.
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A slot for a connection of `uid`, or why not.
    fn take(self: &Arc<Self>, uid: u32) -> Result<Slot, FrameError> {
        let mut h = self.held();
        let mine = h.by_uid.get(&uid).copied().unwrap_or(0);
        if h.total >= MAX_CONNECTIONS {
            return Err(FrameError::TooManyConnections);
        }
        let in_reserve = h.total >= MAX_CONNECTIONS - RESERVED_CONNECTIONS;
        if mine >= MAX_CONNECTIONS_PER_UID || (in_reserve && mine >= RESERVE_PER_UID) {
            return Err(FrameError::TooManyFromUser);
        }
        h.total += 1;
        *h.by_uid.entry(uid).or_default() += 1;
        Ok(Slot {
            slots: self.clone(),
            uid,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut h = self.slots.held();
        h.total = h.total.saturating_sub(1);
        if let Some(n) = h.by_uid.get_mut(&self.uid) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                h.by_uid.remove(&self.uid);
            }
        }
    }
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

/// Reads one line of at most `max` bytes (newline excluded), as [`LineReader`] frames it.
pub async fn read_frame<R: AsyncBufRead + Unpin>(r: &mut R, max: usize) -> std::io::Result<Frame> {
    let mut reading = LineReader::new(max);
    loop {
        let buf = r.fill_buf().await?;
        if buf.is_empty() {
            return Ok(reading.end());
        }
        let (used, frame) = reading.take(buf);
        r.consume(used);
        if let Some(frame) = frame {
            return Ok(frame);
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
    let slots = Arc::new(Slots::default());
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
                let accepted_at = Instant::now();
                // The slot is the peer's uid's: SO_PEERCRED is a getsockopt, no lookup.
                let cred = match stream.peer_cred() {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::warn!(error = %e, "no peer credentials; connection refused");
                        tokio::spawn(refuse(stream, FrameError::PeerNotAllowed));
                        continue;
                    }
                };
                let slot = match slots.take(cred.uid()) {
                    Ok(slot) => slot,
                    Err(e) => {
                        tracing::debug!(uid = cred.uid(), "{e}");
                        tokio::spawn(refuse(stream, e));
                        continue;
                    }
                };
                let broker = broker.clone();
                let clients = clients.clone();
                let shutdown = shutdown.clone();
                tokio::spawn(async move {
                    connection(stream, cred, accepted_at, broker, &clients, shutdown).await;
                    drop(slot);
                });
            }
        }
    }
}

async fn refuse(mut stream: UnixStream, e: FrameError) {
    let _ = stream.write_all(error_line(None, &e).as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// Writes `bytes` unless the peer leaves them unread past `by`; false when not written.
async fn write_by(write: &mut OwnedWriteHalf, bytes: &[u8], by: Instant) -> bool {
    matches!(
        tokio::time::timeout_at(by, write.write_all(bytes)).await,
        Ok(Ok(()))
    )
}

async fn connection(
    stream: UnixStream,
    cred: UCred,
    accepted_at: Instant,
    broker: Arc<Broker>,
    peers: &Peers,
    mut shutdown: watch::Receiver<bool>,
) {
    let owner = peers.owners.allows(cred.uid(), cred.gid());
    if !owner && !peers.clients.allows(cred.uid(), cred.gid()) {
        tracing::warn!(
            uid = cred.uid(),
            pid = cred.pid(),
            "peer not in broker.clients; connection refused"
        );
        return refuse(stream, FrameError::PeerNotAllowed).await;
    }
    let peer = Peer {
        uid: cred.uid(),
        pid: cred.pid(),
        owner,
    };
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    // Until its first request a connection has FIRST_REQUEST_TIMEOUT in all; after it,
    // IDLE_TIMEOUT between lines (docs/design.md#protocol).
    let first_request_by = accepted_at + FIRST_REQUEST_TIMEOUT;
    let mut requested = false;
    loop {
        let wait_until = match requested {
            true => Instant::now() + IDLE_TIMEOUT,
            false => first_request_by,
        };
        let frame = tokio::select! {
            f = read_frame(&mut reader, MAX_LINE) => f,
            _ = tokio::time::sleep_until(wait_until) => {
                if !requested {
                    tracing::debug!(uid = peer.uid, pid = peer.pid, "no request in time; closed");
                    let line = error_line(None, &FrameError::NoRequest);
                    write_by(&mut write, line.as_bytes(), Instant::now() + FAREWELL_WRITE).await;
                }
                return;
            }
            _ = shutdown.changed() => return,
        };
        // Held until the answer is written, so a shutdown's drain waits for it.
        let mut answering = None;
        let answer = match frame {
            // An empty line is not a request: skip it quietly, like a keep-alive.
            Ok(Frame::Line(l)) if l.iter().all(u8::is_ascii_whitespace) => continue,
            Ok(Frame::Line(l)) => match parse_request(&l) {
                Ok(req) => {
                    requested = true;
                    answering = Some(broker.answering());
                    broker.handle(req, peer).await.to_line()
                }
                Err((id, e)) => error_line(id, &e),
            },
            Ok(Frame::TooLong) => error_line(None, &FrameError::TooLong),
            Ok(Frame::Eof) | Err(_) => return,
        };
        // A peer that leaves its answers unread holds its slot no longer than a silent one.
        let write_until = match requested {
            true => Instant::now() + IDLE_TIMEOUT,
            false => first_request_by,
        };
        let written = write_by(&mut write, answer.as_bytes(), write_until).await;
        drop(answering);
        if !written {
            // The client vanished or stopped reading; whatever ran has been audited already.
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

    /// The framing itself is `proto::line`'s; this is its use over tokio's reader.
    #[tokio::test]
    async fn lines_are_framed_over_an_async_reader() {
        let l = |s: &str| Frame::Line(s.as_bytes().to_vec());
        assert_eq!(
            frames(
                b"a
0123456789X
ok
last",
                10
            )
            .await,
            vec![l("a"), Frame::TooLong, l("ok"), l("last"), Frame::Eof]
        );
        assert_eq!(frames(b"", 10).await, vec![Frame::Eof]);
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

    /// One uid gets its share and no more; a second busy uid gets what is left outside the
    /// reserve; the reserve serves other uids a few each; and every slot comes back.
    #[test]
    fn slots_bound_each_uid_and_keep_a_reserve() {
        let slots = Arc::new(Slots::default());
        let hog: Vec<Slot> = (0..MAX_CONNECTIONS_PER_UID)
            .map(|_| slots.take(1).unwrap())
            .collect();
        assert_eq!(slots.take(1).err(), Some(FrameError::TooManyFromUser));
        let mut second = Vec::new();
        while let Ok(s) = slots.take(2) {
            second.push(s);
        }
        assert_eq!(
            second.len(),
            MAX_CONNECTIONS - RESERVED_CONNECTIONS - MAX_CONNECTIONS_PER_UID
        );
        let mut others = Vec::new();
        for uid in 100..100 + (RESERVED_CONNECTIONS / RESERVE_PER_UID) as u32 {
            for _ in 0..RESERVE_PER_UID {
                others.push(slots.take(uid).unwrap());
            }
            let full = slots.held().total == MAX_CONNECTIONS;
            let why = match full {
                true => FrameError::TooManyConnections,
                false => FrameError::TooManyFromUser,
            };
            assert_eq!(slots.take(uid).err(), Some(why));
        }
        assert_eq!(others.len(), RESERVED_CONNECTIONS);
        assert_eq!(slots.take(999).err(), Some(FrameError::TooManyConnections));
        drop(hog);
        assert!(slots.take(1).is_ok(), "a slot given back is taken again");
        drop((second, others));
        let h = slots.held();
        assert_eq!((h.total, h.by_uid.len()), (0, 0));
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
