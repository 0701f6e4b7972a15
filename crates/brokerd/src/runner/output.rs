//! What both backends do with a finished sandbox: read its standard output up to the cap,
//! decode it, and turn its exit status into an answer by seed 003 section 6's table.
//!
//! Podman and bwrap report a tool's exit the same way (the tool's own code, or 128 + the
//! signal that killed it), so one table serves both; only what "the runner itself failed"
//! looks like differs, and each backend decides that before asking [`verdict`].

use std::io::{ErrorKind, Read};
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use std::os::unix::process::ExitStatusExt;

use super::wake::{first_ready, Signal};
use super::{Failure, RunOutput};

/// How much of a runner's standard error is kept for the log (seed 003 section 6).
pub const STDERR_KEEP: usize = 4096;
/// How long to wait for the last output once the sandbox has exited: a process that inherited
/// the pipe must not hold the answer.
pub const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// What an exit status means (seed 003 section 6), before the backend adds its own reading
/// of "the runner failed".
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Exit 0 or 1, or any exit once the output was truncated: the output is the answer.
    Output(RunOutput),
    /// Exit 2, 137 (or killed by SIGKILL), or anything else: a fixed sentence.
    Failed(Failure),
    /// Exit 125, 126 or 127: the runner could not start the sandbox.
    RunnerFailed,
}

/// Seed 003 section 6's table, shared by every backend.
pub fn verdict(status: ExitStatus, stdout: Vec<u8>, truncated: bool) -> Verdict {
    match (status.code(), status.signal()) {
        (Some(0 | 1), _) => Verdict::Output(RunOutput {
            content: decode(stdout, truncated),
            truncated,
        }),
        // DESIGN.md "Output": once the cap was passed, the capped output is the answer.
        _ if truncated => Verdict::Output(RunOutput {
            content: decode(stdout, true),
            truncated,
        }),
        (Some(2), _) => Verdict::Failed(Failure::CouldNotRun),
        (Some(125..=127), _) => Verdict::RunnerFailed,
        (Some(137), _) | (None, Some(libc::SIGKILL)) => Verdict::Failed(Failure::Killed),
        _ => Verdict::Failed(Failure::UnexpectedStatus),
    }
}

/// A pipe read from its own thread: the first `keep` bytes are kept. With `stop_at_more` the
/// reading stops at the first byte past `keep` (standard output and its cap); without, the
/// rest is drained so that the writer never blocks (standard error).
/// How often a run loop looks at a capture that has no descriptor to wake it.
pub const LOOK: Duration = Duration::from_millis(10);

pub struct Capture {
    state: Arc<(Mutex<Vec<u8>>, AtomicBool, AtomicBool)>,
    /// Raised when the reading ends (the pipe's end, the cap, an error), so a waiter wakes
    /// then; `None` only if no eventfd could be had, and waits fall back to looking.
    ended: Option<Arc<Signal>>,
}

impl Capture {
    pub fn start<R: Read + Send + 'static>(
        pipe: Option<R>,
        keep: usize,
        stop_at_more: bool,
    ) -> Capture {
        let state = Arc::new((
            Mutex::new(Vec::new()),
            AtomicBool::new(false),
            AtomicBool::new(false),
        ));
        let ended = Signal::new().ok().map(Arc::new);
        let Some(mut pipe) = pipe else {
            state.2.store(true, Ordering::SeqCst);
            if let Some(s) = &ended {
                s.raise();
            }
            return Capture { state, ended };
        };
        let shared = Arc::clone(&state);
        let raise = ended.clone();
        thread::spawn(move || {
            let (buf, more, done) = &*shared;
            let mut chunk = vec![0u8; 16 * 1024];
            loop {
                let kept = lock(buf).len();
                // One byte past the cap is enough to know the output was truncated.
                let want = if stop_at_more {
                    (keep - kept + 1).min(chunk.len())
                } else {
                    chunk.len()
                };
                match pipe.read(&mut chunk[..want]) {
                    Ok(0) => break,
                    Ok(n) => {
                        let room = keep - kept;
                        lock(buf).extend_from_slice(&chunk[..n.min(room)]);
                        if n > room {
                            more.store(true, Ordering::SeqCst);
                            if stop_at_more {
                                break;
                            }
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
            done.store(true, Ordering::SeqCst);
            if let Some(s) = raise {
                s.raise();
            }
        });
        Capture { state, ended }
    }

    /// Readable once the reading has ended: at the pipe's end, or at the cap.
    pub fn ended_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.ended.as_deref().map(Signal::fd)
    }

    /// What a run loop waits on for this capture's end, and until when: the end's descriptor
    /// and `deadline`; or, with no descriptor to wait on (no eventfd could be had) while the
    /// reading goes on, a look every [`LOOK`] so that the cap is still seen at once.
    pub fn wake(&self, deadline: Instant) -> (Option<std::os::fd::BorrowedFd<'_>>, Instant) {
        if self.done() {
            return (None, deadline);
        }
        match self.ended_fd() {
            Some(fd) => (Some(fd), deadline),
            None => (None, deadline.min(Instant::now() + LOOK)),
        }
    }

    /// The reading has ended.
    pub fn done(&self) -> bool {
        self.state.2.load(Ordering::SeqCst)
    }

    /// One byte more than `keep` arrived.
    pub fn overflowed(&self) -> bool {
        self.state.1.load(Ordering::SeqCst)
    }

    /// Waits until the pipe reached its end (or the cap), at most until `until`.
    pub fn wait_done(&self, until: Instant) {
        if let Some(fd) = self.ended_fd() {
            let _ = first_ready(&[fd], until);
            return;
        }
        while !self.done() && Instant::now() < until {
            thread::sleep(Duration::from_millis(1));
        }
    }

    pub fn bytes(&self) -> Vec<u8> {
        lock(&self.state.0).clone()
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes()).into_owned()
    }
}

/// Gives a sandbox its standard input and closes it: the call's JSON. What the pipe takes at
/// once is written here, without blocking (a call's arguments almost always fit); only the
/// rest goes to a thread of its own, so a sandbox that never reads cannot block brokerd.
pub fn feed(mut stdin: std::process::ChildStdin, input: &[u8]) {
    use std::io::Write;
    use std::os::fd::AsFd;
    let mut written = 0;
    let nonblocking = nix::fcntl::fcntl(stdin.as_fd(), nix::fcntl::FcntlArg::F_GETFL)
        .map(nix::fcntl::OFlag::from_bits_truncate)
        .and_then(|flags| {
            let on = flags | nix::fcntl::OFlag::O_NONBLOCK;
            nix::fcntl::fcntl(stdin.as_fd(), nix::fcntl::FcntlArg::F_SETFL(on)).map(|_| flags)
        });
    if let Ok(flags) = nonblocking {
        while written < input.len() {
            match stdin.write(&input[written..]) {
                Ok(0) => return,
                Ok(n) => written += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                // The sandbox closed its end: it reads no more.
                Err(_) => return,
            }
        }
        if written == input.len() {
            return;
        }
        // Back to blocking for the thread; should that fail, the thread waits out each
        // WouldBlock below instead, and nothing of the input is dropped.
        let _ = nix::fcntl::fcntl(stdin.as_fd(), nix::fcntl::FcntlArg::F_SETFL(flags));
    }
    let rest = input[written..].to_vec();
    thread::spawn(move || {
        let mut at = 0;
        while at < rest.len() {
            match stdin.write(&rest[at..]) {
                Ok(0) => return,
                Ok(n) => at += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => thread::sleep(LOOK),
                // The sandbox closed its end: it reads no more.
                Err(_) => return,
            }
        }
    });
}

fn lock(m: &Mutex<Vec<u8>>) -> std::sync::MutexGuard<'_, Vec<u8>> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The tool's output as the model sees it: UTF-8 with replacement. A truncated output loses
/// the partial character the cap cut through, rather than ending in a replacement character.
pub fn decode(mut bytes: Vec<u8>, truncated: bool) -> String {
    if truncated {
        let n = bytes.len();
        for back in 1..=n.min(3) {
            let b = bytes[n - back];
            if b & 0xC0 == 0x80 {
                continue;
            }
            let len = match b {
                0xF0.. => 4,
                0xE0.. => 3,
                0xC0.. => 2,
                _ => 1,
            };
            if len > back {
                bytes.truncate(n - back);
            }
            break;
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Input larger than a pipe holds reaches the reader whole; a reader that never reads
    /// does not hold the caller.
    #[test]
    fn feed_delivers_everything_and_never_blocks() {
        use std::process::{Command, Stdio};
        let input: Vec<u8> = (0..3 << 20).map(|i| (i % 251) as u8).collect();
        for size in [0, 10, 70_000, input.len()] {
            let mut child = Command::new("wc")
                .arg("-c")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("wc");
            feed(child.stdin.take().expect("stdin"), &input[..size]);
            let out = child.wait_with_output().expect("wc output");
            assert_eq!(
                String::from_utf8_lossy(&out.stdout).trim(),
                size.to_string()
            );
        }
        let mut idle = Command::new("sleep")
            .arg("30")
            .stdin(Stdio::piped())
            .spawn()
            .expect("sleep");
        let started = Instant::now();
        feed(idle.stdin.take().expect("stdin"), &input);
        assert!(started.elapsed() < Duration::from_secs(5), "feed blocked");
        let _ = idle.kill();
        let _ = idle.wait();
    }

    #[test]
    fn decode_table() {
        // (bytes, truncated, content)
        let cases: [(&[u8], bool, &str); 7] = [
            (b"plain", false, "plain"),
            (b"a\xffb", false, "a\u{FFFD}b"),
            ("ü".as_bytes(), true, "ü"),
            (b"x\xc3", true, "x"),
            (b"x\xe2\x82", true, "x"),
            (b"x\xf0\x9f\x98", true, "x"),
            (b"x\xc3", false, "x\u{FFFD}"),
        ];
        for (bytes, truncated, want) in cases {
            assert_eq!(decode(bytes.to_vec(), truncated), want, "{bytes:?}");
        }
    }

    #[test]
    fn exit_table() {
        let out = |s: &str, t: bool| {
            Verdict::Output(RunOutput {
                content: s.into(),
                truncated: t,
            })
        };
        // (raw wait status, truncated, verdict): exit n is n << 8, a signal is its number.
        let cases = [
            (0, false, out("x", false)),
            (1 << 8, false, out("x", false)),
            (2 << 8, false, Verdict::Failed(Failure::CouldNotRun)),
            (2 << 8, true, out("x", true)),
            (125 << 8, false, Verdict::RunnerFailed),
            (126 << 8, false, Verdict::RunnerFailed),
            (127 << 8, false, Verdict::RunnerFailed),
            (137 << 8, false, Verdict::Failed(Failure::Killed)),
            (libc::SIGKILL, false, Verdict::Failed(Failure::Killed)),
            (
                libc::SIGSEGV,
                false,
                Verdict::Failed(Failure::UnexpectedStatus),
            ),
            (3 << 8, false, Verdict::Failed(Failure::UnexpectedStatus)),
        ];
        for (raw, truncated, want) in cases {
            let got = verdict(ExitStatus::from_raw(raw), b"x".to_vec(), truncated);
            assert_eq!(got, want, "status {raw:#x}, truncated {truncated}");
        }
    }
}
