//! Processes signalled and observed only through a pidfd (docs/design.md#preflight-and-poisoning):
//! a numeric PID can be reused between reading it and signalling it; a pidfd names one process for
//! as long as the descriptor is open.
//!
//! A pidfd is opened right after `spawn` returns. The child is not reaped until [`Pidfd::reap`],
//! so its PID cannot have been reused in between: the pidfd names the process brokerd started.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

use super::wake::first_ready;

/// How long a SIGKILL is given to be seen done before it is sent once more: the stop budget's
/// bound (`config::stop_budget`).
pub use boxmaker_config::KILL_CONFIRM;

/// A process started by brokerd, held by its pidfd.
#[derive(Debug)]
pub struct Pidfd {
    fd: OwnedFd,
}

/// What a stop through the pidfd ended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// The process was seen to exit and was reaped.
    Confirmed(ExitStatus),
    /// Two SIGKILLs and the process was not seen to exit: containment is unverified.
    Unconfirmed,
}

impl Pidfd {
    /// The pidfd of a child that `spawn` just returned and nothing has reaped.
    pub fn of_child(child: &Child) -> io::Result<Pidfd> {
        let pid = libc::pid_t::try_from(child.id())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "pid out of range"))?;
        Pidfd::open(pid)
    }

    /// pidfd_open(2). Callers pass only the PID of an unreaped child of theirs (or their own).
    pub fn open(pid: libc::pid_t) -> io::Result<Pidfd> {
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1; no
        // memory is passed. PIDFD_NONBLOCK is not asked for: waitid below waits on purpose.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let fd = RawFd::try_from(fd)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "fd out of range"))?;
        // SAFETY: the kernel just returned this descriptor to us, and nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Pidfd { fd })
    }

    /// The pidfd of a process that is not brokerd's child, found by `pid` in /proc (a sweep
    /// after a crash). The pidfd is opened first and `is_it` judges the process afterwards, by
    /// its /proc entry; the judgement counts only if the pinned process is still alive once it
    /// is made, because a PID cannot be reused while its process lives. `None`: not it, or gone.
    pub fn open_if(pid: libc::pid_t, is_it: impl FnOnce() -> bool) -> Option<Pidfd> {
        let pidfd = Pidfd::open(pid).ok()?;
        if !is_it() || pidfd.wait_exit(Duration::ZERO) {
            return None;
        }
        Some(pidfd)
    }

    /// SIGKILL through the pidfd to a process brokerd did not start, confirmed by its exit
    /// (its own parent reaps it); once more if the first was not seen to work.
    pub fn kill_foreign(&self, confirm: Duration) -> bool {
        for _ in 0..2 {
            let _ = self.signal(libc::SIGKILL);
            if self.wait_exit(confirm) {
                return true;
            }
        }
        false
    }

    /// Whether this kernel has pidfd_open (Linux 5.3): checked once, on brokerd itself.
    pub fn supported() -> io::Result<()> {
        Pidfd::open(nix::unistd::getpid().as_raw()).map(drop)
    }

    /// pidfd_send_signal(2).
    pub fn signal(&self, sig: libc::c_int) -> io::Result<()> {
        // SAFETY: the descriptor is a pidfd we own; a null siginfo asks the kernel to fill in
        // the one kill(2) would send; flags must be 0.
        let r = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.fd.as_raw_fd(),
                sig,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Waits up to `limit` for the process to exit: a pidfd polls readable once it has.
    pub fn wait_exit(&self, limit: Duration) -> bool {
        first_ready(&[self.fd.as_fd()], Instant::now() + limit).is_some()
    }

    /// The descriptor, for a caller's own poll.
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Reaps the process once it has exited (waitid on the pidfd), giving its status. (libc,
    /// not nix: nix's waitid cannot report a death by a real-time signal.) pidfd_open and
    /// pidfd_send_signal above are raw system calls because nix has no wrapper for them.
    pub fn reap(&self) -> io::Result<ExitStatus> {
        loop {
            // SAFETY: siginfo_t is plain data; zeroed is a valid value to be overwritten.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: waitid writes one siginfo_t through the valid pointer; the id is our
            // pidfd, which names one child of this process.
            let r = unsafe {
                libc::waitid(
                    libc::P_PIDFD,
                    self.fd.as_raw_fd() as libc::id_t,
                    &mut info,
                    libc::WEXITED,
                )
            };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            // SAFETY: waitid succeeded for WEXITED, so the SIGCHLD fields of info are set.
            let status = unsafe { info.si_status() };
            let raw = match info.si_code {
                libc::CLD_EXITED => (status & 0xff) << 8,
                libc::CLD_DUMPED => (status & 0x7f) | 0x80,
                _ => status & 0x7f,
            };
            return Ok(ExitStatus::from_raw(raw));
        }
    }

    /// SIGKILL through the pidfd, confirmed by its exit; once more if the first was not
    /// seen to work (docs/design.md#preflight-and-poisoning). Never a numeric kill.
    pub fn kill_and_reap(&self, confirm: Duration) -> Stopped {
        for _ in 0..2 {
            // ESRCH means it already exited (and is a zombie, or reaped by us): fine.
            let _ = self.signal(libc::SIGKILL);
            if self.wait_exit(confirm) {
                return match self.reap() {
                    Ok(status) => Stopped::Confirmed(status),
                    // Already reaped elsewhere (not by brokerd's code) still means it is gone.
                    Err(_) => Stopped::Confirmed(ExitStatus::from_raw(libc::SIGKILL)),
                };
            }
        }
        Stopped::Unconfirmed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    // The children are reaped through the pidfd, which clippy cannot see.
    #[test]
    #[allow(clippy::zombie_processes)]
    fn exit_is_observed_and_reaped_through_the_pidfd() {
        Pidfd::supported().expect("pidfd_open on this kernel");
        let child = Command::new("/bin/sh")
            .args(["-c", "exit 3"])
            .stdin(Stdio::null())
            .spawn()
            .expect("sh");
        let pidfd = Pidfd::of_child(&child).expect("pidfd");
        assert!(pidfd.wait_exit(Duration::from_secs(10)));
        assert_eq!(pidfd.reap().expect("reaped").code(), Some(3));
    }

    #[test]
    #[allow(clippy::zombie_processes)]
    fn a_kill_is_confirmed() {
        let child = Command::new("/bin/sh")
            .args(["-c", "sleep 30"])
            .stdin(Stdio::null())
            .spawn()
            .expect("sh");
        let pidfd = Pidfd::of_child(&child).expect("pidfd");
        assert!(!pidfd.wait_exit(Duration::from_millis(20)));
        match pidfd.kill_and_reap(Duration::from_secs(5)) {
            Stopped::Confirmed(status) => assert_eq!(status.signal(), Some(libc::SIGKILL)),
            Stopped::Unconfirmed => panic!("the kill was not confirmed"),
        }
    }
}
