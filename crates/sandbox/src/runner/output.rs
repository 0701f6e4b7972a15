//! What both backends do with a finished sandbox: read its standard output up to the cap,
//! decode it, and turn its exit status into an answer by the docs/design.md#the-podman-runner
//! table.
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

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use super::wake::{first_ready, poll_until, Signal};
use super::{Failure, RunOutput};

/// How much of a runner's standard error is kept for the log (docs/design.md#the-podman-runner).
pub const STDERR_KEEP: usize = 4096;
/// How long to wait for the last output once the sandbox has exited: a process that inherited
/// the pipe must not hold the answer.
pub const DRAIN_GRACE: Duration = Duration::from_secs(2);
/// How long a [`Capture`]d pipe (a helper's standard error, a podman helper's standard output)
/// may take to end once its process has exited.
pub const STDERR_GRACE: Duration = Duration::from_millis(100);

/// What an exit status means (docs/design.md#the-podman-runner), before the backend adds its own
/// reading of "the runner failed".
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Exit 0 or 1, or any exit once the output was truncated: the output is the answer.
    Output(RunOutput),
    /// Exit 2, 137 (or killed by SIGKILL), or anything else: a fixed sentence.
    Failed(Failure),
    /// Exit 125, 126 or 127: the runner could not start the sandbox.
    RunnerFailed,
}

/// the docs/design.md#the-podman-runner table, shared by every backend.
pub fn verdict(status: ExitStatus, stdout: Vec<u8>, truncated: bool) -> Verdict {
    match (status.code(), status.signal()) {
        (Some(0 | 1), _) => Verdict::Output(RunOutput {
            content: decode(stdout, truncated),
            truncated,
        }),
        // docs/design.md#output: once the cap was passed, the capped output is the answer.
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

/// A tool sandbox's standard streams, served by the thread that waits for it: the call's input
/// written, standard output kept up to the cap and standard error up to [`STDERR_KEEP`], each
/// as its pipe becomes ready, in one ppoll(2) with the sandbox's pidfd. No thread is started
/// for a call and nothing passes between threads, so the exit and the output's end are seen
/// in the same wake-up.
pub struct Streams {
    input: Option<(OwnedFd, Vec<u8>, usize)>,
    /// The input pipe could be made non-blocking: it is written until it is full. Otherwise
    /// one step of at most PIPE_BUF is written each time poll(2) says it is writable.
    input_nonblocking: bool,
    out: Stream,
    err: Stream,
}

/// One output pipe: open until its end (or, for standard output, one byte past the cap).
struct Stream {
    fd: Option<OwnedFd>,
    kept: Vec<u8>,
    keep: usize,
    /// Reading stops at the first byte past `keep` (standard output: the cap); without, the
    /// rest is read and dropped, so that the writer never blocks (standard error).
    stop_at_more: bool,
    more: bool,
}

/// What ended a [`Streams::wait`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The pidfd became readable: the process exited.
    Exited,
    /// Standard output passed the cap.
    Overflowed,
    /// The deadline passed.
    Deadline,
    /// A look ([`LOOK`]) with no pidfd to wait on passed: the caller asks the process itself.
    Look,
}

/// At most this much is written to the input pipe per wake-up: no more than PIPE_BUF, which a
/// pipe that polls writable always takes without blocking, even if O_NONBLOCK could not be set.
const INPUT_STEP: usize = 4096;
/// At most this much is read per pipe per wake-up.
const READ_STEP: usize = 64 * 1024;

impl Stream {
    fn new(fd: Option<OwnedFd>, keep: usize, stop_at_more: bool) -> Stream {
        Stream {
            fd: fd.inspect(|fd| {
                set_nonblocking(fd.as_fd());
            }),
            kept: Vec::new(),
            keep,
            stop_at_more,
            more: false,
        }
    }

    /// One read after poll(2) said the pipe is ready: a read that cannot block. The pipe is
    /// closed at its end, on an error, or (standard output) one byte past the cap.
    fn read_ready(&mut self, chunk: &mut [u8]) {
        let Some(fd) = &self.fd else { return };
        // One byte past the cap is enough to know the output was truncated.
        let want = if self.stop_at_more {
            (self.keep - self.kept.len() + 1).min(chunk.len())
        } else {
            chunk.len()
        };
        match nix::unistd::read(fd, &mut chunk[..want]) {
            Ok(0) => self.fd = None,
            Ok(n) => {
                let room = self.keep - self.kept.len();
                self.kept.extend_from_slice(&chunk[..n.min(room)]);
                if n > room {
                    self.more = true;
                    if self.stop_at_more {
                        self.fd = None;
                    }
                }
            }
            Err(nix::errno::Errno::EINTR | nix::errno::Errno::EAGAIN) => {}
            Err(_) => self.fd = None,
        }
    }
}

/// Whether `fd` is now non-blocking. Should this fail, reads still wait for poll(2) to say
/// the pipe is ready, and the input is written a step within PIPE_BUF per readiness: nothing
/// blocks either way.
fn set_nonblocking(fd: BorrowedFd<'_>) -> bool {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    fcntl(fd, FcntlArg::F_GETFL).is_ok_and(|flags| {
        let on = OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK;
        fcntl(fd, FcntlArg::F_SETFL(on)).is_ok()
    })
}

impl Streams {
    /// Takes a std child's pipes, as [`Streams::of`].
    pub fn new(child: &mut std::process::Child, input: &[u8], out_keep: usize) -> Streams {
        let fds = [
            child.stdin.take().map(OwnedFd::from),
            child.stdout.take().map(OwnedFd::from),
            child.stderr.take().map(OwnedFd::from),
        ];
        Streams::of(fds, input, out_keep)
    }

    /// Takes a child's pipes (standard input, output, error); `input` is written to its
    /// standard input, which is then closed.
    pub fn of(fds: [Option<OwnedFd>; 3], input: &[u8], out_keep: usize) -> Streams {
        let [stdin, stdout, stderr] = fds;
        let input_nonblocking = stdin.as_ref().is_some_and(|fd| set_nonblocking(fd.as_fd()));
        let mut streams = Streams {
            input: stdin.map(|fd| (fd, input.to_vec(), 0)),
            input_nonblocking,
            out: Stream::new(stdout, out_keep, true),
            err: Stream::new(stderr, STDERR_KEEP, false),
        };
        // A call's arguments almost always fit the pipe: written now, before the first wait
        // (a fresh pipe is empty, so the first step never blocks).
        streams.write_input();
        streams
    }

    /// Writes what the input pipe takes without blocking (a single step if it could not be
    /// made non-blocking); closes it once all is written, or when the sandbox closed its end
    /// (it reads no more).
    fn write_input(&mut self) {
        let Some((fd, input, at)) = &mut self.input else {
            return;
        };
        let mut steps = if self.input_nonblocking {
            usize::MAX
        } else {
            1
        };
        while *at < input.len() {
            if steps == 0 {
                return;
            }
            steps -= 1;
            let end = input.len().min(*at + INPUT_STEP);
            match nix::unistd::write(&*fd, &input[*at..end]) {
                Ok(0) => break,
                Ok(n) => *at += n,
                Err(nix::errno::Errno::EINTR) => {}
                Err(nix::errno::Errno::EAGAIN) => return,
                Err(_) => break,
            }
        }
        self.input = None;
    }

    /// Serves the streams until the process exits (its pidfd readable), standard output passes
    /// the cap, or `deadline`; without a pidfd, at most [`LOOK`] at a time.
    pub fn wait(&mut self, pidfd: Option<BorrowedFd<'_>>, deadline: Instant) -> Event {
        let mut chunk = vec![0u8; READ_STEP];
        loop {
            if self.overflowed() {
                return Event::Overflowed;
            }
            let until = match pidfd {
                Some(_) => deadline,
                None => deadline.min(Instant::now() + LOOK),
            };
            let (mut polled, slots) = self.pollfds(pidfd);
            match poll_until(&mut polled, until) {
                Ok(0) => {}
                Ok(_) => {
                    let exited = self.serve(&polled, slots, &mut chunk);
                    if self.overflowed() {
                        return Event::Overflowed;
                    }
                    if exited {
                        return Event::Exited;
                    }
                    // On to the deadline's check: output that never pauses must not hold it.
                }
                // ppoll itself failed: a short step, so that the loop does not spin; the
                // deadline still ends the wait.
                Err(_) => thread::sleep(until.saturating_duration_since(Instant::now()).min(LOOK)),
            }
            if Instant::now() >= deadline {
                return Event::Deadline;
            }
            if pidfd.is_none() && Instant::now() >= until {
                return Event::Look;
            }
        }
    }

    /// Once the process has exited: the input is dropped and both outputs are read to their
    /// ends (or the cap), at most until `until` (a process that inherited a pipe must not hold
    /// the answer).
    pub fn drain(&mut self, until: Instant) {
        self.input = None;
        let mut chunk = vec![0u8; READ_STEP];
        while self.out.fd.is_some() || self.err.fd.is_some() {
            let (mut polled, slots) = self.pollfds(None);
            match poll_until(&mut polled, until) {
                Ok(0) => break,
                Ok(_) => {
                    self.serve(&polled, slots, &mut chunk);
                }
                Err(_) if Instant::now() < until => {
                    thread::sleep(until.saturating_duration_since(Instant::now()).min(LOOK));
                }
                Err(_) => break,
            }
            // Output that never pauses must not hold the drain past its grace either.
            if Instant::now() >= until {
                break;
            }
        }
        self.out.fd = None;
        self.err.fd = None;
    }

    /// The pollfds of what is still open, and where each is: [pidfd, input, out, err].
    fn pollfds(&self, pidfd: Option<BorrowedFd<'_>>) -> (Vec<libc::pollfd>, [Option<usize>; 4]) {
        let mut polled = Vec::with_capacity(4);
        let mut slots = [None; 4];
        let mut add = |slot: usize, fd: Option<BorrowedFd<'_>>, events: libc::c_short| {
            if let Some(fd) = fd {
                slots[slot] = Some(polled.len());
                polled.push(libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events,
                    revents: 0,
                });
            }
        };
        add(0, pidfd, libc::POLLIN);
        add(
            1,
            self.input.as_ref().map(|(fd, ..)| fd.as_fd()),
            libc::POLLOUT,
        );
        add(2, self.out.fd.as_ref().map(OwnedFd::as_fd), libc::POLLIN);
        add(3, self.err.fd.as_ref().map(OwnedFd::as_fd), libc::POLLIN);
        (polled, slots)
    }

    /// Serves each stream that poll(2) said is ready; true if the pidfd was.
    fn serve(
        &mut self,
        polled: &[libc::pollfd],
        slots: [Option<usize>; 4],
        chunk: &mut [u8],
    ) -> bool {
        let ready = |slot: usize| slots[slot].is_some_and(|i| polled[i].revents != 0);
        if ready(1) {
            self.write_input();
        }
        if ready(2) {
            self.out.read_ready(chunk);
        }
        if ready(3) {
            self.err.read_ready(chunk);
        }
        ready(0)
    }

    /// One byte more than the cap arrived on standard output.
    pub fn overflowed(&self) -> bool {
        self.out.more
    }

    /// Standard output as kept (up to the cap).
    pub fn stdout(&self) -> &[u8] {
        &self.out.kept
    }

    /// Standard error as kept, for the log.
    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.err.kept).into_owned()
    }
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

    use crate::runner::pidfd::Pidfd;
    use std::process::{Child, Command, Stdio};

    fn piped(program: &str, args: &[&str]) -> Child {
        Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect(program)
    }

    /// Serves `child` to its exit (or the deadline), as the runners do, then drains.
    fn serve(child: &mut Child, input: &[u8], keep: usize, limit: Duration) -> (Event, Streams) {
        let mut streams = Streams::new(child, input, keep);
        let pidfd = Pidfd::of_child(child).expect("pidfd");
        let event = streams.wait(Some(pidfd.as_fd()), Instant::now() + limit);
        if event == Event::Exited {
            streams.drain(Instant::now() + Duration::from_millis(300));
        }
        (event, streams)
    }

    fn reap(mut child: Child) {
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Input larger than a pipe holds reaches the reader whole, while the same thread reads
    /// what the reader writes back (`cat`: neither side may wait for the other to finish).
    #[test]
    fn input_and_output_are_served_together() {
        let input: Vec<u8> = (0..3 << 20).map(|i| (i % 251) as u8).collect();
        for size in [0, 10, 70_000, input.len()] {
            let mut child = piped("wc", &["-c"]);
            let (event, streams) =
                serve(&mut child, &input[..size], 1 << 20, Duration::from_secs(30));
            assert_eq!(event, Event::Exited);
            assert_eq!(
                String::from_utf8_lossy(streams.stdout()).trim(),
                size.to_string()
            );
            reap(child);

            let mut child = piped("cat", &[]);
            let (event, streams) =
                serve(&mut child, &input[..size], 4 << 20, Duration::from_secs(30));
            assert_eq!(event, Event::Exited);
            assert!(streams.stdout() == &input[..size], "cat of {size} bytes");
            assert!(!streams.overflowed());
            reap(child);
        }
    }

    /// A sandbox that never reads its input nor exits holds nothing but its own deadline.
    #[test]
    fn a_reader_that_never_reads_ends_at_the_deadline() {
        let input = vec![7u8; 3 << 20];
        let mut child = piped("sleep", &["30"]);
        let started = Instant::now();
        let (event, _) = serve(&mut child, &input, 1024, Duration::from_millis(200));
        assert_eq!(event, Event::Deadline);
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the wait blocked"
        );
        reap(child);
    }

    /// Error output that never pauses (here /dev/zero, always readable) does not hold the
    /// wait past its deadline, nor the drain past its grace.
    #[test]
    fn endless_error_output_does_not_hold_the_deadline() {
        let sleeper = Command::new("sleep").arg("30").spawn().expect("sleep");
        let pidfd = Pidfd::of_child(&sleeper).expect("pidfd");
        let (done, finished) = std::sync::mpsc::channel();
        let err = OwnedFd::from(std::fs::File::open("/dev/zero").expect("/dev/zero"));
        let server = thread::spawn(move || {
            let mut streams = Streams::of([None, None, Some(err)], b"", 1000);
            let event = streams.wait(
                Some(pidfd.as_fd()),
                Instant::now() + Duration::from_millis(100),
            );
            streams.drain(Instant::now() + Duration::from_millis(100));
            let _ = done.send((event, streams.stderr_text().len()));
        });
        let got = finished.recv_timeout(Duration::from_secs(10));
        reap(sleeper);
        assert_eq!(
            got,
            Ok((Event::Deadline, STDERR_KEEP)),
            "the wait or the drain never ended"
        );
        server.join().expect("server");
    }

    /// Standard output stops one byte past the cap; standard error is read on past its keep,
    /// so a writer of much error output never blocks.
    #[test]
    fn the_cap_and_the_error_output() {
        let mut child = piped("head", &["-c", "10000000", "/dev/zero"]);
        let (event, streams) = serve(&mut child, b"", 1000, Duration::from_secs(30));
        assert_eq!(event, Event::Overflowed);
        assert!(streams.overflowed());
        assert_eq!(streams.stdout().len(), 1000);
        reap(child);

        let script = "head -c 300000 /dev/zero | tr '\\0' e >&2; echo out";
        let mut child = piped("/bin/sh", &["-c", script]);
        let (event, streams) = serve(&mut child, b"", 1000, Duration::from_secs(30));
        assert_eq!(event, Event::Exited);
        assert_eq!(streams.stdout(), b"out\n");
        assert_eq!(streams.stderr_text(), "e".repeat(STDERR_KEEP));
        assert!(!streams.overflowed());
        reap(child);
    }

    /// A process that inherited the pipes and outlives the sandbox does not hold the drain
    /// past its grace.
    #[test]
    fn the_drain_ends_at_its_grace() {
        let mut child = piped("/bin/sh", &["-c", "sleep 3 & echo early"]);
        let started = Instant::now();
        let (event, streams) = serve(&mut child, b"", 1000, Duration::from_secs(30));
        assert_eq!(event, Event::Exited);
        assert_eq!(streams.stdout(), b"early\n");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the drain waited for the grandchild"
        );
        reap(child);
    }

    /// Without a pidfd the wait comes back every look, and the caller asks the process.
    #[test]
    fn without_a_pidfd_the_wait_looks() {
        let mut child = piped("/bin/sh", &["-c", "read x; echo got $x"]);
        let mut streams = Streams::new(&mut child, b"it\n", 1000);
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut looks = 0;
        let status = loop {
            match streams.wait(None, deadline) {
                Event::Look => looks += 1,
                other => panic!("{other:?}"),
            }
            if let Some(status) = child.try_wait().expect("try_wait") {
                break status;
            }
        };
        streams.drain(Instant::now() + Duration::from_secs(5));
        assert!(status.success());
        assert!(looks >= 1);
        assert_eq!(streams.stdout(), b"got it\n");
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
