//! Waiting for whichever comes first of several descriptors becoming readable, or a deadline:
//! the one primitive every runner wait is built on, so a call wakes when its sandbox exits or
//! its output ends, not at the next tick of a timer. poll(2) blocks with the time left as its
//! timeout (docs/design.md#the-podman-runner: the wait is still a poll, on the pidfd).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::Instant;

/// Blocks until one of `fds` is readable (or has hung up), or `deadline`. Returns the index of
/// the first such descriptor, or `None` at the deadline or when poll(2) itself fails (the
/// callers then treat the wait as over without the event, which is the strict reading).
pub fn first_ready(fds: &[BorrowedFd<'_>], deadline: Instant) -> Option<usize> {
    first_of(fds, libc::POLLIN, deadline)
}

/// As [`first_ready`], with a deadline kept to the microsecond (ppoll(2)): for the short
/// steps of a wait that also looks at something no descriptor signals.
pub fn first_ready_until(fds: &[BorrowedFd<'_>], deadline: Instant) -> Option<usize> {
    let mut polled: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    match poll_until(&mut polled, deadline) {
        Ok(0) => None,
        Ok(_) => polled.iter().position(|p| p.revents != 0),
        Err(_) => {
            // ppoll itself failed: the step still passes, so that a caller's loop does not spin.
            std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
            None
        }
    }
}

/// ppoll(2) of `polled` until one is ready or `deadline` (to the microsecond), interruptions
/// retried: how many are ready (their `revents` set), 0 at the deadline.
pub fn poll_until(polled: &mut [libc::pollfd], deadline: Instant) -> io::Result<usize> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ts = nix::sys::time::TimeSpec::from_duration(left);
        // SAFETY: `polled` is a valid array of as many pollfds as the count says, each naming
        // a descriptor the caller keeps open for the length of this call (a negative one is
        // skipped by the kernel); `ts` is a valid timespec, and no signal mask is passed.
        let r = unsafe {
            libc::ppoll(
                polled.as_mut_ptr(),
                polled.len() as libc::nfds_t,
                ts.as_ref(),
                std::ptr::null(),
            )
        };
        if r >= 0 {
            return Ok(r as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Blocks until a kernel file that signals changes as POLLPRI (cgroup v2's `cgroup.events`)
/// changed since it was last read through `fd`, or `deadline`; true if it did. Such files are
/// always readable, so readability says nothing.
pub fn changed(fd: BorrowedFd<'_>, deadline: Instant) -> bool {
    first_of(&[fd], libc::POLLPRI, deadline).is_some()
}

fn first_of(fds: &[BorrowedFd<'_>], events: libc::c_short, deadline: Instant) -> Option<usize> {
    let mut polled: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd {
            fd: fd.as_raw_fd(),
            events,
            revents: 0,
        })
        .collect();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        // Rounded up, so that a wait of less than a millisecond does not spin.
        let ms = left.as_micros().div_ceil(1000);
        let ms = libc::c_int::try_from(ms).unwrap_or(libc::c_int::MAX);
        // SAFETY: `polled` is a valid array of as many pollfds as the count says, each naming
        // a descriptor borrowed for the length of this call.
        let r = unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, ms) };
        if r > 0 {
            return polled.iter().position(|p| p.revents != 0);
        }
        if r < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        if r < 0 {
            // poll itself failed: wait out a short step, so that a caller's loop does not spin.
            let left = deadline.saturating_duration_since(Instant::now());
            std::thread::sleep(left.min(std::time::Duration::from_millis(10)));
            return None;
        }
        if Instant::now() >= deadline {
            return None;
        }
    }
}

/// A one-way signal between threads that poll(2) can wait on: readable once [`Signal::raise`]
/// was called (an eventfd).
#[derive(Debug)]
pub struct Signal {
    fd: OwnedFd,
}

impl Signal {
    pub fn new() -> io::Result<Signal> {
        // SAFETY: eventfd takes an initial value and flags and returns a new descriptor or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the kernel just returned this descriptor, and nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Signal { fd })
    }

    /// Makes the descriptor readable, for good (it is never read, so it stays so).
    pub fn raise(&self) {
        let one: u64 = 1;
        // SAFETY: write(2) of the 8 bytes of a u64 from a valid local, as eventfd requires.
        // Failing would need the counter at its maximum, which one write a capture never reaches.
        unsafe {
            libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8);
        }
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_raised_signal_wakes_and_the_deadline_ends_the_wait() {
        let quiet = Signal::new().expect("eventfd");
        let raised = Signal::new().expect("eventfd");
        let started = Instant::now();
        let got = first_ready(&[quiet.fd()], started + Duration::from_millis(30));
        assert_eq!(got, None);
        assert!(started.elapsed() >= Duration::from_millis(30));
        let far = Instant::now() + Duration::from_secs(30);
        let r = std::sync::Arc::new(raised);
        let raiser = std::sync::Arc::clone(&r);
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            raiser.raise();
        });
        let started = Instant::now();
        assert_eq!(first_ready(&[quiet.fd(), r.fd()], far), Some(1));
        assert!(started.elapsed() < Duration::from_secs(5));
        t.join().expect("raiser");
        // Raised stays raised.
        assert_eq!(first_ready(&[r.fd()], far), Some(0));
    }
}
