//! Connection slots against a real `server::serve` (docs/design.md#protocol): one peer uid
//! holding every connection it may cannot lock out another uid, and a connection that sends
//! no request is closed after `FIRST_REQUEST_TIMEOUT`, while one that did keeps the idle
//! timeout.
//!
//! Another uid is played by this test's own thread: a raw `setresuid` changes only the calling
//! thread's credentials (glibc's wrapper would change every thread's), and `SO_PEERCRED` names
//! the effective uid of whoever called `connect`. That takes root; elsewhere the tests that
//! need it skip with a message.

use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use brokerd::server::{self, Clients, FrameError, FIRST_REQUEST_TIMEOUT};
use proto::broker::{Answer, Body};

use crate::service::{me, Opts, Service};

/// Uids that stand for other users; they need no account.
const OTHER: u32 = 65534;
const THIRD: u32 = 65533;

const STATUS: &[u8] = b"{\"op\":\"status\",\"id\":\"s\"}\n";

/// The thread's effective uid and gid are `uid` until dropped.
struct As;

impl As {
    fn uid(uid: u32) -> As {
        // This thread's credentials only (not the process's, as libc's setresuid would set);
        // the real and saved ids stay root's, so the drop can change them back.
        use rustix::process::{Gid, Uid};
        use rustix::thread::{set_thread_res_gid, set_thread_res_uid};
        set_thread_res_gid(None, Gid::from_raw(uid), None).expect("setresgid");
        set_thread_res_uid(None, Uid::from_raw(uid), None).expect("setresuid");
        As
    }
}

impl Drop for As {
    fn drop(&mut self) {
        // The saved uid is root, so the effective ids may return to it.
        use rustix::process::{Gid, Uid};
        use rustix::thread::{set_thread_res_gid, set_thread_res_uid};
        set_thread_res_uid(None, Uid::ROOT, None).expect("setresuid back");
        set_thread_res_gid(None, Gid::ROOT, None).expect("setresgid back");
    }
}

/// Whether this test can play other uids; prints why not.
fn can_switch_uid() -> bool {
    if me() != 0 {
        eprintln!("SKIPPED: playing another uid needs root");
        return false;
    }
    true
}

/// A service that serves this uid, [`OTHER`] and [`THIRD`], on a socket they can all reach.
fn service() -> Service {
    let svc = Service::with(Opts {
        clients: Some(Clients::of_uids([me(), OTHER, THIRD])),
        ..Opts::default()
    });
    let socket = svc.socket();
    let dir = socket.parent().unwrap();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o711)).unwrap();
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    svc
}

fn connect_as(uid: u32, socket: &Path) -> UnixStream {
    let stream = {
        let _as = (uid != me()).then(|| As::uid(uid));
        UnixStream::connect(socket).expect("connect")
    };
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    stream
}

/// One answer line, or `None` at end of file.
fn answer(s: &UnixStream) -> Option<Answer> {
    let mut line = String::new();
    match BufReader::new(s).read_line(&mut line) {
        Ok(0) => None,
        Ok(_) => Some(serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))),
        Err(e) if e.kind() == ErrorKind::ConnectionReset => None,
        Err(e) => panic!("no answer: {e}"),
    }
}

/// A connection of `uid` that has asked for `status` and got it, or the error it got instead.
fn served(uid: u32, socket: &Path) -> Result<UnixStream, String> {
    let mut s = connect_as(uid, socket);
    // A refused connection may be closed before the request is read.
    let _ = s.write_all(STATUS);
    match answer(&s).map(|a| a.body) {
        Some(Body::Status(_)) => Ok(s),
        Some(Body::Error { message }) => Err(message),
        other => panic!("status answered {other:?}"),
    }
}

/// Opens connections of `uid`, each past its first request, until one is refused; returns
/// them and the refusal.
fn fill(uid: u32, socket: &Path) -> (Vec<UnixStream>, String) {
    let mut held = Vec::new();
    loop {
        match served(uid, socket) {
            Ok(s) => held.push(s),
            Err(e) => return (held, e),
        }
        assert!(held.len() <= server::MAX_CONNECTIONS, "never refused");
    }
}

/// One uid holding every connection it may, each one past its first request (so not closed
/// for silence), leaves room for another uid; and once two uids hold all they may, a third is
/// still served from the reserve. Giving connections back makes room again.
#[test]
fn one_uid_cannot_starve_another() {
    if !can_switch_uid() {
        return;
    }
    let svc = service();
    let socket = svc.socket().to_path_buf();
    let (hog, refused) = fill(me(), &socket);
    assert!(refused.starts_with("busy: "), "{refused}");
    assert!(
        hog.len() < server::MAX_CONNECTIONS,
        "one uid took every slot"
    );
    // Another uid is served, and so is a third while the first two hold all they may.
    let (other, refused) = fill(OTHER, &socket);
    assert!(!other.is_empty(), "another uid was locked out: {refused}");
    assert!(refused.starts_with("busy: "), "{refused}");
    let third = served(THIRD, &socket).expect("a third uid is served from the reserve");
    // The busy uid is still refused, and served again once it gives a connection back.
    assert_eq!(
        served(me(), &socket).err().as_deref(),
        Some(FrameError::TooManyFromUser.to_string().as_str())
    );
    drop(hog);
    let deadline = Instant::now() + Duration::from_secs(30);
    while served(me(), &socket).is_err() {
        assert!(Instant::now() < deadline, "the slots never came back");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop((other, third));
}

/// A connection that sends nothing, or only empty lines and half a line, gets an error line
/// and is closed once `FIRST_REQUEST_TIMEOUT` has passed; one that sent a request stays and
/// is served after that.
#[test]
fn a_connection_without_a_request_is_closed_after_the_first_request_deadline() {
    let svc = Service::start();
    let socket = svc.socket().to_path_buf();
    let start = Instant::now();
    let patience = FIRST_REQUEST_TIMEOUT + Duration::from_secs(20);
    let silent = UnixStream::connect(&socket).unwrap();
    let mut chatty = UnixStream::connect(&socket).unwrap();
    chatty.write_all(b"\n\n{\"op\":\"sta").unwrap();
    let mut asked = UnixStream::connect(&socket).unwrap();
    asked.write_all(STATUS).unwrap();
    for s in [&silent, &chatty, &asked] {
        s.set_read_timeout(Some(patience)).unwrap();
    }
    assert!(matches!(
        answer(&asked).map(|a| a.body),
        Some(Body::Status(_))
    ));
    for s in [&silent, &chatty] {
        let a = answer(s).expect("an error line before the close");
        assert_eq!(a.id, None);
        match a.body {
            Body::Error { message } => assert_eq!(message, FrameError::NoRequest.to_string()),
            other => panic!("expected an error, got {other:?}"),
        }
        assert!(answer(s).is_none(), "closed after the error line");
    }
    let waited = start.elapsed();
    assert!(
        waited >= FIRST_REQUEST_TIMEOUT,
        "closed after {waited:?}, before the deadline"
    );
    // The connection that asked is past the deadline and still served.
    asked.write_all(STATUS).unwrap();
    assert!(matches!(
        answer(&asked).map(|a| a.body),
        Some(Body::Status(_))
    ));
}
