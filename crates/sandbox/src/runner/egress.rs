//! The per-call egress directory both backends share (docs/design.md#the-podman-runner): made
//! private before the proxy starts, looked at for the proxy's socket, removed afterwards, swept at
//! start-up.
//!
//! The egress directory's host path can be longer than the 108 bytes a Unix socket address
//! holds, so the host side never connects to the socket: brokerd only waits for it to exist, and
//! the tool inside the sandbox uses the short `/run/egress/egress.sock`.

use std::io::ErrorKind;
use std::os::fd::BorrowedFd;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use super::wake::first_ready_until;

/// Where the egress directory appears inside both sandboxes.
pub const EGRESS_MOUNT: &str = proto::tools::EGRESS_DIR;
/// The proxy's socket in that directory.
pub const EGRESS_SOCKET: &str = proto::tools::EGRESS_SOCKET_NAME;

/// `<home>/run/egress/`
pub fn egress_root(home: &Path) -> PathBuf {
    home.join("run").join("egress")
}

/// `<home>/run/egress/<name>/`
pub fn egress_dir(home: &Path, name: &str) -> PathBuf {
    egress_root(home).join(name)
}

/// `<home>/run/egress/<name>-report/`, beside the call's egress directory: where a shell call's
/// proxy writes its report ([`proto::egress::REPORT_FILE`] inside its sandbox). Only the proxy's
/// sandbox sees it, never the tool's. (A sandbox name ends in its number, never in `-report`.)
pub fn report_dir(egress_dir: &Path) -> PathBuf {
    let mut name = egress_dir.file_name().unwrap_or_default().to_owned();
    name.push("-report");
    egress_dir.with_file_name(name)
}

/// How long the answer waits, after the tool's sandbox is gone, for the proxy to report the
/// end of connections it had open (they end as soon as their server closes too).
pub const REPORT_GRACE: Duration = Duration::from_millis(250);
/// The most of a report brokerd reads: [`proto::egress::REPORT_MAX_LINES`] lines of at most
/// about 600 bytes.
const REPORT_MAX_BYTES: u64 = 4 << 20;

/// The summary of the report in `dir` ([`report_dir`]), once every connection it shows open
/// has ended or [`REPORT_GRACE`] has passed. The file is opened without following a link and
/// without blocking, must be a regular file, and is read up to [`REPORT_MAX_BYTES`] (read again
/// only when it has grown); what cannot be read is said in the summary's `incomplete`, a
/// missing report (the proxy never started) included.
pub fn read_report(dir: &Path) -> proto::egress::Summary {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let name = Path::new(proto::egress::REPORT_FILE)
        .file_name()
        .unwrap_or_default();
    let path = dir.join(name);
    let deadline = Instant::now() + REPORT_GRACE;
    let incomplete = |why: String| proto::egress::Summary {
        incomplete: Some(why),
        ..Default::default()
    };
    let mut read_len = None;
    let mut summary = incomplete("the proxy wrote no report: it did not start".into());
    loop {
        let read = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&path)
            .and_then(|f| {
                let meta = f.metadata()?;
                if !meta.is_file() {
                    return Err(std::io::Error::other("not a regular file"));
                }
                if read_len == Some(meta.len()) {
                    return Ok(None);
                }
                let mut text = Vec::new();
                f.take(REPORT_MAX_BYTES).read_to_end(&mut text)?;
                Ok(Some(text))
            });
        match read {
            Ok(None) => {}
            Ok(Some(text)) => {
                read_len = Some(text.len() as u64);
                summary = proto::egress::Summary::of_report(&text);
                if text.len() as u64 >= REPORT_MAX_BYTES {
                    summary.incomplete = Some(format!(
                        "the report is longer than the {REPORT_MAX_BYTES} bytes read"
                    ));
                }
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return incomplete(format!("the report could not be read: {e}")),
        }
        if summary.open_at_end == 0 || Instant::now() >= deadline {
            return summary;
        }
        thread::sleep(Duration::from_millis(5));
    }
}

/// Makes `dir` with mode 0700 (its parents too), replacing what a crashed brokerd left there.
pub fn make_private_dir(dir: &Path) -> std::io::Result<()> {
    if let Some(parent) = dir.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)?;
    }
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    std::fs::DirBuilder::new().mode(0o700).create(dir)?;
    // The umask may have taken more than it should; the proxy (same uid) needs rwx.
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// Removes a call's egress directory and its report directory; a missing one is fine.
pub fn remove_dir(dir: &Path) -> std::io::Result<()> {
    let gone = |d: &Path| match std::fs::remove_dir_all(d) {
        Err(e) if e.kind() != ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    };
    let report = gone(&report_dir(dir));
    gone(dir).and(report)
}

/// Waits until the proxy's socket exists in `dir`, or `deadline`, or `gone` (the proxy's
/// pidfd, where there is one) says the proxy is no longer there to make it. Only existence is
/// checked: the host path can exceed the 108 bytes of a socket address, so brokerd never
/// connects to it (docs/design.md#runners).
///
/// It looks every [`SOCKET_STEP`], waiting in between on the pidfd, so a proxy that dies ends
/// the wait at once. Not inotify: a watch on the directory the sandbox bind-mounts slowed the
/// proxy's own start-up (bwrap's mount set-up and pivot) from about 4 ms to 10-25 ms on the
/// benchmark host (BENCHMARKS.md), far more than a look every quarter millisecond costs.
pub fn wait_for_socket(dir: &Path, deadline: Instant, gone: Option<BorrowedFd<'_>>) -> bool {
    let socket = dir.join(EGRESS_SOCKET);
    loop {
        if socket.symlink_metadata().is_ok() {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        let until = deadline.min(now + SOCKET_STEP);
        match gone {
            Some(fd) => {
                if first_ready_until(&[fd], until).is_some() {
                    return socket.symlink_metadata().is_ok();
                }
            }
            None => thread::sleep(until.saturating_duration_since(now)),
        }
    }
}

/// How often [`wait_for_socket`] looks: a proxy makes its socket a few milliseconds after it
/// starts under bwrap, about a hundred under Podman.
pub const SOCKET_STEP: Duration = Duration::from_micros(250);

/// Removes every directory under `<home>/run/egress/` (the start-up and shutdown sweep);
/// returns how many went and what could not be removed.
pub fn sweep(home: &Path) -> (usize, Vec<String>) {
    let mut removed = 0;
    let mut failed = Vec::new();
    if let Ok(entries) = std::fs::read_dir(egress_root(home)) {
        for entry in entries.flatten() {
            match std::fs::remove_dir_all(entry.path()) {
                Ok(()) => removed += 1,
                Err(e) => failed.push(format!("{}: {e}", entry.path().display())),
            }
        }
    }
    (removed, failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report that is missing, a FIFO, a link or a directory never blocks and never reads
    /// through: each is said in `incomplete`; an empty one is a call with no connections.
    #[test]
    fn a_report_is_read_only_as_a_regular_file() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path();
        let file = dir.join("connections.jsonl");
        let started = Instant::now();
        let missing = read_report(dir);
        assert!(missing
            .incomplete
            .as_deref()
            .is_some_and(|w| w.contains("did not start")));
        nix::unistd::mkfifo(&file, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
        let fifo = read_report(dir);
        assert!(fifo
            .incomplete
            .as_deref()
            .is_some_and(|w| w.contains("not a regular file")));
        std::fs::remove_file(&file).expect("rm");
        std::fs::write(dir.join("elsewhere"), "{}\n").expect("write");
        std::os::unix::fs::symlink(dir.join("elsewhere"), &file).expect("symlink");
        let link = read_report(dir);
        assert!(link
            .incomplete
            .as_deref()
            .is_some_and(|w| w.contains("could not be read")));
        std::fs::remove_file(&file).expect("rm");
        std::fs::write(&file, "").expect("write");
        assert_eq!(read_report(dir), proto::egress::Summary::default());
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn egress_dir_is_private_and_replaces_leftovers() {
        let home = tempfile::tempdir().expect("tempdir");
        let dir = home.path().join("run/egress/boxmaker-s-c-1");
        std::fs::create_dir_all(dir.join("junk")).expect("leftover");
        std::fs::write(dir.join(EGRESS_SOCKET), "").expect("stale socket");
        make_private_dir(&dir).expect("made");
        assert_eq!(std::fs::read_dir(&dir).expect("read").count(), 0);
        let fresh = home.path().join("fresh/run/egress/boxmaker-s-c-2");
        make_private_dir(&fresh).expect("made with parents");
        for d in [&dir, &fresh, &home.path().join("fresh/run/egress")] {
            let mode = std::fs::metadata(d).expect("stat").permissions().mode() & 0o777;
            assert_eq!(mode, 0o700, "{}", d.display());
        }
    }

    #[test]
    #[allow(clippy::zombie_processes)]
    fn socket_wait_stops_when_the_proxy_is_gone_and_wakes_when_it_appears() {
        use super::super::pidfd::Pidfd;
        let home = tempfile::tempdir().expect("tempdir");
        let dir = egress_dir(home.path(), "n");
        make_private_dir(&dir).expect("made");
        let far = Instant::now() + Duration::from_secs(30);
        // A proxy that exits without making its socket.
        let child = std::process::Command::new("/bin/sh")
            .args(["-c", "exit 0"])
            .spawn()
            .expect("sh");
        let pidfd = Pidfd::of_child(&child).expect("pidfd");
        let started = Instant::now();
        assert!(!wait_for_socket(&dir, far, Some(pidfd.as_fd())));
        assert!(started.elapsed() < Duration::from_secs(5));
        let _ = pidfd.reap();
        // Nothing made it: the deadline ends the wait.
        let started = Instant::now();
        assert!(!wait_for_socket(
            &dir,
            started + Duration::from_millis(50),
            None
        ));
        assert!(started.elapsed() >= Duration::from_millis(50));
        // Made while waiting: seen well before the deadline.
        let socket = dir.join(EGRESS_SOCKET);
        let maker = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            std::fs::write(socket, "").expect("socket stand-in");
        });
        let started = Instant::now();
        assert!(wait_for_socket(&dir, far, None));
        assert!(started.elapsed() < Duration::from_secs(5));
        maker.join().expect("maker");
        assert_eq!(sweep(home.path()), (1, Vec::new()));
        assert!(!dir.exists());
    }
}
