//! A decision that cannot stall brokerd (docs/design.md#life-of-a-call,
//! docs/design.md#grants-and-paths): the model's spellings of brokerd's own descriptors are
//! outside without a look, and a grant directory whose file system stops answering makes only
//! that call a refusal, within its limit, while other clients' calls go on.

use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use super::*;

/// `/proc/self/fd/N`, `/proc/self/root/...`, `/dev/fd/N` and `/dev/stdin` name brokerd's own
/// descriptors and root: each is refused at once as outside, and the refusal shows nothing of
/// what they lead to in brokerd (a socket, a pipe, the audit log).
#[test]
fn brokerds_own_descriptors_are_outside_as_written() {
    let svc = Service::start();
    let mut c = svc.connect();
    let audit = svc.audit.display().to_string();
    for (i, path) in [
        "/proc/self/fd/0",
        "/proc/self/fd/3",
        "/proc/self/fd/7",
        "/proc/self/root/etc/passwd",
        "/proc/thread-self/fd/5",
        "/dev/fd/4",
        "/dev/stdin",
        "/proc/self/cwd/a.txt",
    ]
    .into_iter()
    .enumerate()
    {
        let started = Instant::now();
        let a = c.call(
            "stall-own",
            &format!("r{i}"),
            "auto",
            "read_file",
            json!({ "path": path }),
        );
        assert_eq!(kind(&a), "refused", "{path}: {a:?}");
        let m = message(&a);
        assert!(
            m.contains("is outside the grant's directories"),
            "{path}: {m}"
        );
        for leak in ["socket:", "pipe:", "anon_inode", &audit, "leads to"] {
            assert!(!m.contains(leak), "{path}: {m}");
        }
        assert!(started.elapsed() < Duration::from_secs(2), "{path}");
        let w = c.call(
            "stall-own",
            &format!("w{i}"),
            "auto",
            "write_file",
            json!({ "path": path, "content": "x" }),
        );
        assert_eq!(kind(&w), "refused", "{path}: {w:?}");
    }
    assert_eq!(svc.runner.calls(), 0);
}

/// A FUSE file system whose server never answers, mounted inside the grant: every look at it
/// waits until the connection is aborted (on drop), as a frozen network file system would.
struct Frozen {
    fuse: Option<OwnedFd>,
    at: PathBuf,
}

impl Frozen {
    fn mount(at: &Path) -> Option<Frozen> {
        if !nix::unistd::geteuid().is_root() {
            return None;
        }
        std::fs::create_dir_all(at).unwrap();
        let fuse = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")
            .ok()?;
        let fuse = OwnedFd::from(fuse);
        let opts = format!(
            "fd={},rootmode=40000,user_id=0,group_id=0",
            fuse.as_raw_fd()
        );
        nix::mount::mount(
            Some("boxmaker-frozen"),
            at,
            Some("fuse"),
            nix::mount::MsFlags::empty(),
            Some(opts.as_str()),
        )
        .ok()?;
        Some(Frozen {
            fuse: Some(fuse),
            at: at.to_path_buf(),
        })
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        // Closing the server's end aborts the connection: every waiter gets ENOTCONN.
        drop(self.fuse.take());
        let _ = nix::mount::umount2(&self.at, nix::mount::MntFlags::MNT_DETACH);
    }
}

/// Two calls whose decisions wait on a frozen file system in the grant (one more than the
/// runtime's worker threads) are refused within the decision's limit, each with its record,
/// and a third client's call is answered meanwhile.
#[test]
fn a_decision_stuck_on_the_file_system_holds_up_no_one() {
    let svc = Service::start();
    let mut first = svc.connect();
    assert_eq!(
        kind(&first.call(
            "stall-warm",
            "w",
            "auto",
            "read_file",
            json!({"path": "a.txt"})
        )),
        "result"
    );
    let Some(frozen) = Frozen::mount(&svc.rw.join("frozen")) else {
        eprintln!("skipped: mounting a FUSE file system needs root and /dev/fuse");
        return;
    };
    let stuck: Vec<_> = (0..2)
        .map(|i| {
            let mut c = svc.connect();
            std::thread::spawn(move || {
                let started = Instant::now();
                let a = c.call(
                    "stall-fuse",
                    &format!("stuck{i}"),
                    "auto",
                    "read_file",
                    json!({ "path": format!("frozen/x{i}") }),
                );
                (a, started.elapsed())
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let mut other = svc.connect();
    other
        .w
        .set_read_timeout(Some(Duration::from_secs(4)))
        .unwrap();
    let started = Instant::now();
    let a = other.call(
        "stall-other",
        "o",
        "auto",
        "read_file",
        json!({"path": "a.txt"}),
    );
    assert_eq!(kind(&a), "result", "{a:?}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    for t in stuck {
        let (a, took) = t.join().unwrap();
        assert_eq!(kind(&a), "refused", "{a:?}");
        assert!(message(&a).contains("no decision could be made"), "{a:?}");
        let limit = brokerd::broker::DECIDE_WITHIN + Duration::from_secs(2);
        assert!(took < limit, "{took:?}");
    }
    drop(frozen);
    let records = std::fs::read_to_string(&svc.audit).unwrap();
    for call in ["stuck0", "stuck1"] {
        assert!(
            records
                .lines()
                .any(|l| l.contains(&format!("\"call\":\"{call}\"")) && l.contains("refused")),
            "{call}: {records}"
        );
    }
}
