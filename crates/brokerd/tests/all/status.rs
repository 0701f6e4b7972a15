//! `status` while the audit disk is stalled (docs/design.md#audit): a record holds the log
//! across its sync, and `status` must answer without waiting for it, saying once the record
//! has been at it past `audit::STALLED_AFTER`.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use brokerd::audit::STALLED_AFTER;
use proto::broker::{Answer, Body, Status};
use serde_json::json;

use crate::service::{call_req, Opts, Service};

/// How long a `status` may take while a record is stalled.
const PROMPT: Duration = Duration::from_secs(2);

/// A stand-in for a stalled audit disk: while `stall` is set, each sync waits until released.
#[derive(Default)]
struct Disk {
    stall: AtomicBool,
    stalled: AtomicUsize,
    released: Mutex<bool>,
    cv: Condvar,
}

impl Disk {
    fn sync(&self) {
        if !self.stall.load(Ordering::SeqCst) {
            return;
        }
        self.stalled.fetch_add(1, Ordering::SeqCst);
        let mut released = self.released.lock().unwrap();
        while !*released {
            released = self.cv.wait(released).unwrap();
        }
    }

    fn release(&self) {
        self.stall.store(false, Ordering::SeqCst);
        *self.released.lock().unwrap() = true;
        self.cv.notify_all();
    }
}

/// Releases the disk however the test ends, so a failing test does not hang in the service's
/// drop behind a record that never syncs.
struct Release(Arc<Disk>);

impl Drop for Release {
    fn drop(&mut self) {
        self.0.release();
    }
}

/// `status` on a fresh connection, answered within [`PROMPT`] or the test fails.
fn status(svc: &Service) -> Status {
    let mut s = UnixStream::connect(svc.socket()).unwrap();
    s.set_read_timeout(Some(PROMPT)).unwrap();
    let start = Instant::now();
    s.write_all(b"{\"op\":\"status\",\"id\":\"st\"}\n").unwrap();
    let mut line = String::new();
    if let Err(e) = BufReader::new(&s).read_line(&mut line) {
        panic!("status did not answer within {PROMPT:?} ({e})");
    }
    assert!(
        start.elapsed() < PROMPT,
        "status took {:?}",
        start.elapsed()
    );
    match serde_json::from_str::<Answer>(&line).unwrap().body {
        Body::Status(st) => st,
        other => panic!("status answered {other:?}"),
    }
}

/// While a call's audit record is stuck in its sync, `status` answers at once with the head
/// it has (the last record synced), says the audit is stalled once that is past the
/// threshold, and the call is answered once the disk comes back.
#[test]
fn status_answers_while_an_audit_record_is_stalled() {
    let disk = Arc::new(Disk::default());
    let hook = disk.clone();
    let svc = Service::with(Opts {
        before_audit_sync: Some(Box::new(move || hook.sync())),
        ..Opts::default()
    });
    let _release = Release(disk.clone());
    let before = status(&svc);
    assert_eq!(before.audit_stalled_ms, None);

    disk.stall.store(true, Ordering::SeqCst);
    let mut caller = UnixStream::connect(svc.socket()).unwrap();
    caller
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let call = call_req("s", "c1", "auto", "shell", &json!({"command": "ls"}), None);
    caller
        .write_all(format!("{call}\n").as_bytes())
        .expect("send the call");
    let deadline = Instant::now() + Duration::from_secs(30);
    while disk.stalled.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "the call's record never synced");
        std::thread::sleep(Duration::from_millis(5));
    }

    let early = status(&svc);
    assert_eq!(
        early.audit_head, before.audit_head,
        "the head synced so far"
    );
    assert_eq!(early.audit_stalled_ms, None, "not stalled yet: {early:?}");

    std::thread::sleep(STALLED_AFTER + Duration::from_millis(300));
    let late = status(&svc);
    assert_eq!(late.audit_head, before.audit_head);
    let stalled = late
        .audit_stalled_ms
        .expect("the audit is said to be stalled");
    assert!(
        stalled > STALLED_AFTER.as_millis() as u64,
        "stalled for {stalled} ms"
    );

    disk.release();
    let mut line = String::new();
    BufReader::new(&caller).read_line(&mut line).unwrap();
    let answered: Answer = serde_json::from_str(&line).unwrap();
    assert_eq!(answered.kind(), "result", "{line}");
    let after = status(&svc);
    assert_eq!(after.audit_stalled_ms, None);
    assert_eq!(
        after.audit_head.seq,
        before.audit_head.seq + 2,
        "allow and ran"
    );
}
