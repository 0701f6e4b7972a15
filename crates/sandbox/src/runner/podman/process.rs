//! The podman processes brokerd starts (docs/design.md#the-podman-runner): through the clone
//! spawner bwrap uses ([`super::super::spawn`]), so that a call does not copy brokerd's page
//! tables, each in a process group of its own and dying with the thread that started it,
//! held by its pidfd where one could be had, and waited for with a bound.

use std::ffi::OsString;
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::thread;
use std::time::{Duration, Instant};

use super::super::dies_with_brokerd;
use super::super::output::{Capture, STDERR_GRACE, STDERR_KEEP};
use super::super::pidfd::Pidfd;
use super::super::spawn::{self, find_program, Io, PreExec, Spawn};

/// How often a running podman process is looked at when no pidfd could be had for it (with
/// one, a wait wakes on its exit).
const POLL: Duration = Duration::from_millis(10);
/// How long a podman process killed with its group may take to be seen gone.
const KILL_WAIT: Duration = Duration::from_secs(1);

/// How podman is started: the program, found in brokerd's PATH once, and the environment it
/// runs with, brokerd's own (rootless Podman needs `XDG_RUNTIME_DIR`, `HOME`, `PATH`, and
/// whatever the unit sets for it; none of it reaches a container).
#[derive(Debug, Clone)]
pub(super) struct Program {
    path: PathBuf,
    env: Vec<(OsString, OsString)>,
}

impl Program {
    pub(super) fn new(podman: &Path) -> Program {
        Program {
            path: find_program(podman),
            env: std::env::vars_os().collect(),
        }
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// Starts podman with `args`: in a process group of its own (so that a kill takes what it
    /// started with it) and with the parent-death signal set, both between clone and exec.
    pub(super) fn start(&self, args: &[OsString], stdio: [Io; 3]) -> io::Result<Proc> {
        let mut cmd = Spawn::new(&self.path);
        cmd.args(args).stdio(stdio).envs(self.env.iter().cloned());
        dies_with_brokerd(&mut cmd);
        own_process_group(&mut cmd);
        let child = cmd.spawn()?;
        // Taken before anything reaps the child, so it names this podman process.
        let pidfd = Pidfd::open(child.pid()).ok();
        Ok(Proc {
            child,
            pidfd,
            status: None,
        })
    }

    /// Starts a podman `kill`, `rm`, `container exists`, `image exists`, `ps` or `run -d`, its
    /// standard error captured (and its standard output, for a listing).
    pub(super) fn helper(&self, args: &[OsString], stdout_keep: usize) -> Result<Started, String> {
        let out = if stdout_keep > 0 { Io::Piped } else { Io::Null };
        let mut proc = self
            .start(args, [Io::Null, out, Io::Piped])
            .map_err(|e| e.to_string())?;
        let [_, stdout, stderr] = proc.take_stdio();
        let file = |fd: Option<OwnedFd>| fd.map(std::fs::File::from);
        Ok(Started {
            stdout: (stdout_keep > 0).then(|| Capture::start(file(stdout), stdout_keep, false)),
            stderr: Capture::start(file(stderr), STDERR_KEEP, false),
            proc,
        })
    }
}

/// Makes the child the leader of a new process group (what std's `process_group(0)` does).
fn own_process_group<C: PreExec>(cmd: &mut C) {
    // SAFETY: setpgid is async-signal-safe; the hook touches no memory shared with the parent.
    unsafe {
        cmd.pre_exec_hook(|| {
            if libc::setpgid(0, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// A podman process brokerd started and has not given up on: reaped once it exits, killed
/// with its process group when dropped before that.
#[derive(Debug)]
pub(super) struct Proc {
    child: spawn::Child,
    pidfd: Option<Pidfd>,
    status: Option<ExitStatus>,
}

impl Proc {
    /// Its pidfd, readable once it has exited; `None` if none could be had.
    pub(super) fn pidfd(&self) -> Option<BorrowedFd<'_>> {
        self.pidfd.as_ref().map(Pidfd::as_fd)
    }

    /// Its standard input, output and error, the pipes' ends brokerd holds.
    pub(super) fn take_stdio(&mut self) -> [Option<OwnedFd>; 3] {
        [
            self.child.stdin.take(),
            self.child.stdout.take(),
            self.child.stderr.take(),
        ]
    }

    /// How it ended, if it has (it is reaped then), without waiting.
    pub(super) fn try_wait(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = match &self.pidfd {
                Some(p) if p.wait_exit(Duration::ZERO) => {
                    Some(p.reap().unwrap_or_else(|_| unknown()))
                }
                Some(_) => None,
                None => self.wait_nohang(),
            };
        }
        self.status
    }

    /// How it ended, waited for until `deadline`; `None` if it is still running then.
    pub(super) fn wait_until(&mut self, deadline: Instant) -> Option<ExitStatus> {
        loop {
            if let Some(status) = self.try_wait() {
                return Some(status);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            match &self.pidfd {
                Some(p) => {
                    p.wait_exit(left);
                }
                None => thread::sleep(left.min(POLL)),
            }
        }
    }

    /// Kills the process and everything it started in its group, then reaps it; whether it
    /// was still running. Only before it was reaped, so its group id is still its own.
    pub(super) fn kill_group(&mut self) -> bool {
        if self.try_wait().is_some() {
            return false;
        }
        // The group was made for this child between clone and exec; the child is not
        // reaped, so its id names no other group.
        let group = nix::unistd::Pid::from_raw(self.child.pid());
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
        if let Some(p) = &self.pidfd {
            let _ = p.signal(libc::SIGKILL);
        }
        let _ = self.wait_until(Instant::now() + KILL_WAIT);
        true
    }

    /// waitpid(2) without blocking: for a process no pidfd could be had for. Its PID is still
    /// its own, since nothing else reaps brokerd's podman processes.
    fn wait_nohang(&self) -> Option<ExitStatus> {
        use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
        let pid = nix::unistd::Pid::from_raw(self.child.pid());
        match waitpid(pid, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(_, code)) => Some(ExitStatus::from_raw((code & 0xff) << 8)),
            Ok(WaitStatus::Signaled(_, sig, _)) => Some(ExitStatus::from_raw(sig as i32)),
            Ok(_) | Err(nix::errno::Errno::EINTR) => None,
            Err(_) => Some(unknown()),
        }
    }
}

/// The status of a process that is gone but whose status could not be read (reaped by
/// something else): an exit no table row means, so never a success.
fn unknown() -> ExitStatus {
    ExitStatus::from_raw(255 << 8)
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.kill_group();
    }
}

/// A podman helper under way: its process and what it prints.
pub(super) struct Started {
    pub(super) proc: Proc,
    stdout: Option<Capture>,
    stderr: Capture,
}

/// How a podman helper ended.
pub(super) enum Helper {
    /// Its status, standard error and standard output (empty unless asked for).
    Exited(ExitStatus, String, String),
    TimedOut,
    NotStarted(String),
}

impl Started {
    /// How it ended, waited for until `deadline`; one still running then is killed with its
    /// process group.
    pub(super) fn finish(mut self, deadline: Instant) -> Helper {
        match self.proc.wait_until(deadline) {
            Some(status) => {
                let grace = Instant::now() + STDERR_GRACE;
                if let Some(out) = &self.stdout {
                    out.wait_done(grace);
                }
                self.stderr.wait_done(grace);
                let out = self.stdout.as_ref().map(Capture::text).unwrap_or_default();
                Helper::Exited(status, self.stderr.text(), out)
            }
            None => {
                let _ = self.proc.kill_group();
                Helper::TimedOut
            }
        }
    }
}
