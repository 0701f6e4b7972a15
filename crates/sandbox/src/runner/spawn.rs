//! Starting a sandbox without copying brokerd's address space.
//!
//! std's `Command` runs `pre_exec` hooks in a child made by fork(2), which copies brokerd's page
//! tables and write-protects every page for copy-on-write; brokerd then takes a fault on each
//! page it writes next. On a virtual machine that shadows page tables this cost about 0.45 ms
//! a sandbox (BENCHMARKS.md). A sandbox needs hooks that posix_spawn(3) cannot run (the
//! parent-death signal, rlimits, the cgroup, descriptors at fixed numbers), so [`Spawn`] does
//! what posix_spawn does inside: clone(2) with `CLONE_VM | CLONE_VFORK`, the child on a stack
//! of its own, running the hooks and execve(2) while the calling thread waits for the exec.
//!
//! What the child does, in order, as std's does: every caught signal back to its default (and
//! SIGPIPE, which Rust ignores), standard I/O in place, the hooks in the order they were added,
//! an empty signal mask, then execve with an argument list and environment built beforehand.
//! It allocates nothing and takes no lock, so the threads of brokerd that go on running cannot
//! hold it up; it reports a failure through memory it shares with the waiting thread.
//!
//! bwrap starts with an empty environment and podman with brokerd's, every signal blocked
//! across the clone. bwrap's own process in the sandbox keeps the environment it was started
//! with, and a sandbox can read it: hence the empty one.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::num::NonZeroUsize;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicI32, Ordering};

use nix::fcntl::OFlag;
use nix::sched::CloneFlags;
use nix::sys::mman::{MapFlags, ProtFlags};
use nix::unistd::Pid;

/// Something a hook can be added to: std's `Command` (a forked child) or a [`Spawn`].
pub trait PreExec {
    /// Adds `hook`, run in the child after standard I/O is in place and before exec, in the
    /// order hooks were added; an error stops the start and is what the spawn returns.
    ///
    /// # Safety
    /// As std's `CommandExt::pre_exec`: the hook may call only async-signal-safe functions. It
    /// must not allocate, take a lock, panic, or write memory that other threads use; in a
    /// [`Spawn`] it runs in brokerd's own memory while one of its threads waits.
    unsafe fn pre_exec_hook<F>(&mut self, hook: F) -> &mut Self
    where
        F: FnMut() -> io::Result<()> + Send + Sync + 'static;
}

impl PreExec for std::process::Command {
    unsafe fn pre_exec_hook<F>(&mut self, hook: F) -> &mut Self
    where
        F: FnMut() -> io::Result<()> + Send + Sync + 'static,
    {
        // SAFETY: the caller keeps pre_exec's contract, which this one's includes.
        unsafe { self.pre_exec(hook) }
    }
}

/// What a started program's standard input, output or error is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Io {
    /// /dev/null.
    Null,
    /// A pipe whose other end is in [`Child`].
    Piped,
}

type Hook = Box<dyn FnMut() -> io::Result<()> + Send + Sync>;

/// A program to start through clone(2) with `CLONE_VM | CLONE_VFORK`: its path (no search),
/// arguments, the whole of its environment (nothing of brokerd's is passed unless added),
/// standard I/O and hooks.
pub struct Spawn {
    program: PathBuf,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    stdio: [Io; 3],
    hooks: Vec<Hook>,
}

/// A started program: an unreaped child of this process, which the caller must wait for.
#[derive(Debug)]
pub struct Child {
    pid: libc::pid_t,
    pub stdin: Option<OwnedFd>,
    pub stdout: Option<OwnedFd>,
    pub stderr: Option<OwnedFd>,
}

impl Child {
    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    pub fn id(&self) -> u32 {
        self.pid.unsigned_abs()
    }

    /// SIGKILL, then waits for it: for a child that must not run on (no pidfd could be had).
    pub fn kill_and_wait(&mut self) {
        let pid = Pid::from_raw(self.pid);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        while let Err(nix::errno::Errno::EINTR) = nix::sys::wait::waitpid(pid, None) {}
    }
}

/// The child's stack: large enough for its few calls in a debug build, with a page below it
/// that faults, so that an overflow kills the child instead of writing brokerd's memory.
const STACK: usize = 256 * 1024;
/// In the failure word: the child has not reached execve (it died before, by a signal).
const NOT_EXECED: i32 = -1;

impl Spawn {
    pub fn new(program: impl AsRef<Path>) -> Spawn {
        Spawn {
            program: program.as_ref().to_path_buf(),
            args: Vec::new(),
            env: Vec::new(),
            stdio: [Io::Null; 3],
            hooks: Vec::new(),
        }
    }

    pub fn program(&self) -> &Path {
        &self.program
    }

    pub fn arg(&mut self, arg: impl AsRef<OsStr>) -> &mut Spawn {
        self.args.push(arg.as_ref().to_os_string());
        self
    }

    pub fn args<I, S>(&mut self, args: I) -> &mut Spawn
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        for a in args {
            self.arg(a);
        }
        self
    }

    pub fn env(&mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> &mut Spawn {
        let key = key.as_ref().to_os_string();
        self.env.retain(|(k, _)| *k != key);
        self.env.push((key, value.as_ref().to_os_string()));
        self
    }

    /// Each of `vars`, as [`Spawn::env`] adds one.
    pub fn envs<I, K, V>(&mut self, vars: I) -> &mut Spawn
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        for (k, v) in vars {
            self.env(k, v);
        }
        self
    }

    /// Standard input, output and error.
    pub fn stdio(&mut self, stdio: [Io; 3]) -> &mut Spawn {
        self.stdio = stdio;
        self
    }

    /// Starts the program; returns once it has been exec'd, or with the error that stopped
    /// it (a hook's, or execve's: `NotFound` for a program that is not there). A program
    /// named without a `/` is looked for where the C library looks without a PATH
    /// (/bin, /usr/bin), never in the working directory.
    pub fn spawn(&mut self) -> io::Result<Child> {
        not_dumpable()?;
        let program = c_string(resolve(&self.program)?.as_os_str())?;
        let mut argv_c = vec![program.clone()];
        for a in &self.args {
            argv_c.push(c_string(a)?);
        }
        let mut envp_c = Vec::with_capacity(self.env.len());
        for (k, v) in &self.env {
            let mut kv = k.clone();
            kv.push("=");
            kv.push(v);
            envp_c.push(c_string(&kv)?);
        }
        let argv = pointers(&argv_c);
        let envp = pointers(&envp_c);

        // Standard I/O: the child's ends, and ours of the pipes.
        let null = match self.stdio.contains(&Io::Null) {
            true => Some(nix::fcntl::open(
                "/dev/null",
                OFlag::O_RDWR | OFlag::O_CLOEXEC,
                nix::sys::stat::Mode::empty(),
            )?),
            false => None,
        };
        let mut theirs: Vec<OwnedFd> = Vec::with_capacity(3);
        let mut ours: [Option<OwnedFd>; 3] = [None, None, None];
        let mut child_fds: [RawFd; 3] = [-1; 3];
        for (i, io) in self.stdio.iter().enumerate() {
            match io {
                Io::Null => {
                    child_fds[i] = null.as_ref().map_or(-1, |n| n.as_raw_fd());
                }
                Io::Piped => {
                    let (r, w) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
                    let (child_end, our_end) = if i == 0 { (r, w) } else { (w, r) };
                    child_fds[i] = child_end.as_raw_fd();
                    theirs.push(child_end);
                    ours[i] = Some(our_end);
                }
            }
        }

        let mut stack = Stack::new()?;
        let failure = AtomicI32::new(NOT_EXECED);
        let hooks = &mut self.hooks;
        let (program_p, argv_p, envp_p) = (program.as_ptr(), argv.as_ptr(), envp.as_ptr());
        let child_main = Box::new(|| -> isize {
            // SAFETY: runs only in the child made by the clone below, while the spawning
            // thread waits (CLONE_VFORK); everything it reads was built before the clone and
            // outlives it, and the pointers name NUL-terminated arrays of C strings.
            unsafe { in_child(&child_fds, hooks, program_p, argv_p, envp_p, &failure) }
        });

        // SAFETY: the child runs `child_main` on its own stack and ends in execve or _exit;
        // it allocates nothing and takes no lock.
        let cloned = unsafe { clone_vfork(&mut stack, child_main) };
        drop(theirs);
        drop(null);
        let pid = cloned?.as_raw();
        match failure.load(Ordering::SeqCst) {
            0 => {
                let [stdin, stdout, stderr] = ours;
                Ok(Child {
                    pid,
                    stdin,
                    stdout,
                    stderr,
                })
            }
            e => {
                // The child has exited (or is about to, by its _exit): reap it.
                while let Err(nix::errno::Errno::EINTR) =
                    nix::sys::wait::waitpid(Pid::from_raw(pid), None)
                {}
                Err(match e {
                    NOT_EXECED => io::Error::other("the child died before it could exec"),
                    e => io::Error::from_raw_os_error(e),
                })
            }
        }
    }
}

impl PreExec for Spawn {
    unsafe fn pre_exec_hook<F>(&mut self, hook: F) -> &mut Self
    where
        F: FnMut() -> io::Result<()> + Send + Sync + 'static,
    {
        self.hooks.push(Box::new(hook));
        self
    }
}

/// Runs `work` in a child made as a [`Spawn`]'s is (`CLONE_VM | CLONE_VFORK`, a stack of its
/// own), which exits when it returns, and waits for it: for system calls that only a process
/// of its own may make, such as joining a mount namespace (a thread shares its file-system
/// context with brokerd's others, so setns refuses it). The child runs with every signal
/// blocked and never unblocks them, so no handler of brokerd's runs in it.
///
/// # Safety
/// As [`PreExec::pre_exec_hook`]'s hooks: `work` may call only async-signal-safe functions,
/// and must not allocate, take a lock, panic, or write memory that other threads use.
pub unsafe fn run_in_child(work: &mut dyn FnMut() -> io::Result<()>) -> io::Result<()> {
    let mut stack = Stack::new()?;
    let failure = AtomicI32::new(NOT_EXECED);
    let child_main = Box::new(|| -> isize {
        let code = match work() {
            Ok(()) => 0,
            Err(e) => e.raw_os_error().unwrap_or(libc::EINVAL),
        };
        failure.store(code, Ordering::SeqCst);
        // SAFETY: leaves the child at once, without exit handlers (they belong to brokerd).
        unsafe { libc::_exit(0) }
    });
    // SAFETY: the child ends in _exit; the caller's `work` keeps the hooks' contract.
    let pid = unsafe { clone_vfork(&mut stack, child_main) }?;
    while let Err(nix::errno::Errno::EINTR) = nix::sys::wait::waitpid(pid, None) {}
    match failure.load(Ordering::SeqCst) {
        0 => Ok(()),
        NOT_EXECED => Err(io::Error::other("the child died before it finished")),
        e => Err(io::Error::from_raw_os_error(e)),
    }
}

/// clone(2) with `CLONE_VM | CLONE_VFORK`: `child_main` runs on `stack` while this thread
/// waits, until it execs or exits. Every signal is blocked across the clone, so that none is
/// handled in the child before it has put the handlers back to their defaults (a handler of
/// brokerd's would run on brokerd's memory); the mask is set by the system call, not the C
/// library's wrapper, which leaves out the two signals it keeps for itself (those have
/// handlers in brokerd too).
///
/// # Safety
/// `child_main` must end in execve or _exit, allocate nothing and take no lock; what it reads
/// of this thread's stack is kept for it, as the thread is stopped until then.
unsafe fn clone_vfork(stack: &mut Stack, child_main: nix::sched::CloneCb<'_>) -> io::Result<Pid> {
    let before = set_mask(u64::MAX)?;
    // SAFETY: the caller's contract; the stack has a guard page below it.
    let cloned = unsafe {
        nix::sched::clone(
            child_main,
            stack.usable(),
            CloneFlags::CLONE_VM | CloneFlags::CLONE_VFORK,
            Some(libc::SIGCHLD),
        )
    };
    let _ = set_mask(before);
    Ok(cloned?)
}

/// The child, from clone to execve: never returns.
///
/// # Safety
/// Only in a child made with `CLONE_VM | CLONE_VFORK` whose parent thread waits; the pointers
/// must name a C string and NUL-terminated arrays of C strings that outlive the exec.
unsafe fn in_child(
    stdio: &[RawFd; 3],
    hooks: &mut [Hook],
    program: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    failure: &AtomicI32,
) -> isize {
    let prepared = (|| -> io::Result<()> {
        for sig in 1..=64 {
            if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                continue;
            }
            // The system call, not the C library's sigaction, which refuses the signals it
            // keeps for itself (one of which has a handler of its own in brokerd).
            let mut old = KernelSigaction::default();
            // SAFETY: rt_sigaction reads no new action (null) and writes the old one into a
            // struct at least as large as the kernel's; async-signal-safe.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_rt_sigaction,
                    sig,
                    std::ptr::null::<KernelSigaction>(),
                    &mut old as *mut KernelSigaction,
                    8usize,
                )
            };
            if r != 0 {
                continue;
            }
            if old.handler != libc::SIG_IGN || sig == libc::SIGPIPE {
                let dfl = KernelSigaction::default();
                // SAFETY: as above, with SIG_DFL, no flags and an empty mask as the new action.
                unsafe {
                    libc::syscall(
                        libc::SYS_rt_sigaction,
                        sig,
                        &dfl as *const KernelSigaction,
                        std::ptr::null_mut::<KernelSigaction>(),
                        8usize,
                    )
                };
            }
        }
        for (target, &fd) in (0..).zip(stdio.iter()) {
            // SAFETY: dup2 and fcntl on descriptors open in this process; async-signal-safe.
            // dup2 leaves the copy open across exec; one already in place only needs its
            // FD_CLOEXEC cleared (dup2 onto itself would keep it).
            let r = unsafe {
                if fd == target {
                    libc::fcntl(fd, libc::F_SETFD, 0)
                } else {
                    libc::dup2(fd, target)
                }
            };
            if r < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        for hook in hooks.iter_mut() {
            hook()?;
        }
        set_mask(0).map(drop)
    })();
    match prepared {
        Ok(()) => {
            failure.store(0, Ordering::SeqCst);
            // SAFETY: the caller's pointers are valid; execve returns only on failure.
            unsafe { libc::execve(program, argv, envp) };
            let e = io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::ENOEXEC);
            failure.store(e, Ordering::SeqCst);
        }
        Err(e) => failure.store(e.raw_os_error().unwrap_or(libc::EINVAL), Ordering::SeqCst),
    }
    // SAFETY: leaves the child at once, without exit handlers (they belong to brokerd).
    unsafe { libc::_exit(127) }
}

/// The kernel's `struct sigaction` on x86_64 and aarch64 (the handler first, which is all
/// that is read); zeroed, it is SIG_DFL with no flags and an empty mask.
#[repr(C)]
#[derive(Default)]
struct KernelSigaction {
    handler: libc::sighandler_t,
    flags: libc::c_ulong,
    restorer: usize,
    mask: u64,
}

/// rt_sigprocmask(2) of the calling thread to `mask` (bit n-1 for signal n, all 64 of them);
/// returns the mask before. Async-signal-safe.
fn set_mask(mask: u64) -> io::Result<u64> {
    let mut before: u64 = 0;
    // SAFETY: the kernel reads and writes one 8-byte mask (the size passed) through valid
    // pointers to locals.
    let r = unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            &mask as *const u64,
            &mut before as *mut u64,
            8usize,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(before)
}

/// Makes this process not dumpable, once: the child shares brokerd's memory until its exec,
/// and before Linux 5.16 a core dump of one process killed every process sharing its memory
/// (the check of dumpability comes first, so no dump, no kill). brokerd's memory holds grants
/// and outputs, which no core file should either. exec makes bwrap dumpable as usual.
fn not_dumpable() -> io::Result<()> {
    static DONE: std::sync::OnceLock<Result<(), i32>> = std::sync::OnceLock::new();
    let done = DONE.get_or_init(|| nix::sys::prctl::set_dumpable(false).map_err(|e| e as i32));
    done.map_err(io::Error::from_raw_os_error)
}

/// `program` as found in brokerd's PATH (a sandbox starts with an empty environment, and a
/// [`Spawn`] looks only in /bin and /usr/bin, so the search cannot be left to exec); as given
/// when it names a path or is not found.
pub fn find_program(program: &Path) -> PathBuf {
    if program.as_os_str().as_bytes().contains(&b'/') {
        return program.to_path_buf();
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(program))
        .find(|p| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .unwrap_or_else(|| program.to_path_buf())
}

/// `program` itself when it names a path; a bare name from /bin or /usr/bin (what the C
/// library searches without a PATH), `NotFound` if it is in neither.
fn resolve(program: &Path) -> io::Result<PathBuf> {
    if program.as_os_str().as_bytes().contains(&b'/') {
        return Ok(program.to_path_buf());
    }
    ["/bin", "/usr/bin"]
        .iter()
        .map(|dir| Path::new(dir).join(program))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| {
                use std::os::unix::fs::PermissionsExt;
                m.is_file() && m.permissions().mode() & 0o111 != 0
            })
        })
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} is not in /bin or /usr/bin", program.display()),
            )
        })
}

fn c_string(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "an argument or environment entry holds a NUL byte",
        )
    })
}

/// A NUL-terminated array of pointers to `strings`, which must outlive it.
fn pointers(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// An anonymous mapping for the child's stack, its lowest page made inaccessible.
struct Stack {
    base: NonNull<libc::c_void>,
    len: usize,
    guard: usize,
}

impl Stack {
    fn new() -> io::Result<Stack> {
        let guard = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
            .ok()
            .flatten()
            .and_then(|p| usize::try_from(p).ok())
            .unwrap_or(4096);
        let len = STACK + guard;
        let length = NonZeroUsize::new(len).ok_or_else(|| io::Error::other("empty stack"))?;
        // SAFETY: a new private anonymous mapping at an address the kernel picks; nothing
        // else refers to it.
        let base = unsafe {
            nix::sys::mman::mmap_anonymous(
                None,
                length,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_PRIVATE | MapFlags::MAP_STACK,
            )?
        };
        let stack = Stack { base, len, guard };
        // SAFETY: the first page of the mapping just made, which nothing uses.
        unsafe { nix::sys::mman::mprotect(base, guard, ProtFlags::PROT_NONE)? };
        Ok(stack)
    }

    /// The part above the guard page.
    fn usable(&mut self) -> &mut [u8] {
        // SAFETY: the mapping is `len` bytes, readable and writable from `guard` on, and owned
        // by this Stack for the slice's lifetime.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.base.as_ptr().cast::<u8>().add(self.guard),
                self.len - self.guard,
            )
        }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, no longer used (the child has exec'd or exited).
        let _ = unsafe { nix::sys::mman::munmap(self.base, self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn wait(child: &Child) -> std::process::ExitStatus {
        use std::os::unix::process::ExitStatusExt;
        match nix::sys::wait::waitpid(Pid::from_raw(child.pid()), None).expect("waitpid") {
            nix::sys::wait::WaitStatus::Exited(_, code) => {
                std::process::ExitStatus::from_raw(code << 8)
            }
            nix::sys::wait::WaitStatus::Signaled(_, sig, _) => {
                std::process::ExitStatus::from_raw(sig as i32)
            }
            other => panic!("{other:?}"),
        }
    }

    fn read_all(fd: Option<OwnedFd>) -> String {
        let mut s = String::new();
        std::fs::File::from(fd.expect("pipe"))
            .read_to_string(&mut s)
            .expect("read");
        s
    }

    /// The program gets its arguments, only the environment it was given, its input, and
    /// descriptors moved by hooks; nothing of brokerd's leaks in (signal mask and handlers
    /// at their defaults, no open descriptor but those passed).
    #[test]
    fn the_child_starts_clean() {
        use std::io::Write;
        let script = r#"read line; echo "in=$line"; echo "args=$1,$2"; echo "env=$(env | sort | tr '\n' ' ')";
            grep -E '^(SigBlk|SigCgt|SigIgn)' /proc/self/status;
            ls /proc/self/fd | sort -n | tr '\n' ' '; echo; cat <&7"#;
        let (r, w) = nix::unistd::pipe2(OFlag::O_CLOEXEC).expect("pipe");
        let raw = r.as_raw_fd();
        let mut spawn = Spawn::new("/bin/sh");
        spawn
            .args(["-c", script, "sh", "one", "two words"])
            .env("ONLY", "this")
            // Where the tools the script uses are (Nix's build sandbox has no /usr/bin of them).
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .stdio([Io::Piped, Io::Piped, Io::Null]);
        // SAFETY: dup2 only.
        unsafe {
            spawn.pre_exec_hook(move || {
                if libc::dup2(raw, 7) < 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = spawn.spawn().expect("spawn");
        drop(r);
        std::fs::File::from(w)
            .write_all(b"from fd 7\n")
            .expect("write 7");
        std::fs::File::from(child.stdin.take().expect("stdin"))
            .write_all(b"hello\n")
            .expect("stdin");
        let out = read_all(child.stdout.take());
        assert!(wait(&child).success(), "{out}");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "in=hello");
        assert_eq!(lines[1], "args=one,two words");
        assert!(lines[2].contains("ONLY=this"), "{}", lines[2]);
        assert!(
            !lines[2].contains("CARGO"),
            "brokerd's environment leaked: {}",
            lines[2]
        );
        // Signals as a forked child of std's Command has them (std resets SIGPIPE and the
        // mask; exec resets what had a handler).
        let mut by_std = std::process::Command::new("/bin/sh");
        by_std
            .args(["-c", "grep -E '^(SigBlk|SigCgt|SigIgn)' /proc/self/status"])
            .env_clear();
        // SAFETY: an empty hook, which makes std fork instead of using posix_spawn.
        unsafe { by_std.pre_exec(|| Ok(())) };
        let by_std = by_std.output().expect("std's child");
        let by_std = String::from_utf8_lossy(&by_std.stdout).into_owned();
        assert_eq!(lines[3..6].join("\n") + "\n", by_std);
        assert_eq!(lines[3], "SigBlk:\t0000000000000000");
        // 0, 1, 2, 7, whatever the test process itself was given without close-on-exec (a
        // test runner's own, `flock`'s lock), and the one ls opens for /proc/self/fd: the
        // lowest number free of those.
        let mut allowed: Vec<String> = ["0", "1", "2", "7"].map(String::from).to_vec();
        for entry in std::fs::read_dir("/proc/self/fd").expect("fds").flatten() {
            let Some(n) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<RawFd>().ok())
            else {
                continue;
            };
            // SAFETY: F_GETFD on a number; at worst EBADF for the directory's own.
            if n > 2 && unsafe { libc::fcntl(n, libc::F_GETFD) } == 0 {
                allowed.push(n.to_string());
            }
        }
        let ls_s = (3..)
            .map(|n: RawFd| n.to_string())
            .find(|n| !allowed.contains(n))
            .expect("a free number");
        allowed.push(ls_s);
        for fd in lines[6].split_whitespace() {
            assert!(
                allowed.iter().any(|a| a == fd),
                "descriptor {fd} leaked: {}",
                lines[6]
            );
        }
        assert!(lines[6].split_whitespace().any(|fd| fd == "7"));
        assert_eq!(lines[7], "from fd 7");
    }

    /// A hook's error and an exec that fails come back as the spawn's error, the child reaped.
    #[test]
    fn failures_before_exec_are_the_spawn_s_error() {
        let e = Spawn::new("/nonexistent/program")
            .spawn()
            .expect_err("absent");
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        let mut spawn = Spawn::new("/bin/true");
        // SAFETY: no call at all.
        unsafe {
            spawn.pre_exec_hook(|| Err(io::Error::from_raw_os_error(libc::ESRCH)));
        }
        let e = spawn.spawn().expect_err("hook");
        assert_eq!(e.raw_os_error(), Some(libc::ESRCH));
        let e = Spawn::new("/bin/true")
            .arg("a\0b")
            .spawn()
            .expect_err("nul");
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }

    /// `run_in_child` runs its work in another process, one that may join a mount namespace
    /// (which a thread of brokerd's may not), and returns the work's error.
    #[test]
    fn work_in_a_child_is_another_process_s() {
        let mut seen = 0;
        let mut work = || -> io::Result<()> {
            // SAFETY: getpid, unshare and setns are system calls; `seen` is this test's local.
            unsafe {
                seen = libc::getpid();
                let ns = libc::open(c"/proc/self/ns/mnt".as_ptr(), libc::O_RDONLY);
                if ns < 0 || libc::setns(ns, libc::CLONE_NEWNS) != 0 {
                    return Err(io::Error::last_os_error());
                }
                libc::close(ns);
            }
            Err(io::Error::from_raw_os_error(libc::ENOTCONN))
        };
        // SAFETY: the work makes system calls and writes a local of this thread only.
        let got = unsafe { run_in_child(&mut work) };
        // setns to its own namespace needs CAP_SYS_ADMIN: as root the work gets to the end.
        if nix::unistd::geteuid().is_root() {
            assert_eq!(got.expect_err("work").raw_os_error(), Some(libc::ENOTCONN));
        } else {
            assert!(got.is_err());
        }
        assert!(seen > 0 && seen != std::process::id() as i32, "{seen}");
        let mut fine = || -> io::Result<()> { Ok(()) };
        // SAFETY: no call at all.
        assert!(unsafe { run_in_child(&mut fine) }.is_ok());
    }

    /// Every signal, the C library's own two included, stays blocked in the child until just
    /// before exec (a hook reads its own mask), and brokerd is left not dumpable.
    #[test]
    fn the_child_runs_its_hooks_with_every_signal_blocked() {
        use std::sync::atomic::AtomicU8;
        // 0 not looked, 1 all blocked, 2 some not, 3 could not read.
        static SEEN: AtomicU8 = AtomicU8::new(0);
        let mut spawn = Spawn::new("/bin/sh");
        spawn.args(["-c", "exit 0"]);
        // SAFETY: open, read and close into a buffer on the child's stack; an atomic store.
        unsafe {
            spawn.pre_exec_hook(|| {
                let mut buf = [0u8; 4096];
                let fd = libc::open(c"/proc/thread-self/status".as_ptr(), libc::O_RDONLY);
                let n = if fd >= 0 {
                    libc::read(fd, buf.as_mut_ptr().cast(), buf.len())
                } else {
                    -1
                };
                libc::close(fd);
                let seen = match usize::try_from(n) {
                    Ok(n) => {
                        let text = &buf[..n];
                        // All but SIGKILL (9) and SIGSTOP (19), which cannot be blocked.
                        let want = b"SigBlk:\tfffffffffffbfeff";
                        if text.windows(want.len()).any(|w| w == want) {
                            1
                        } else {
                            2
                        }
                    }
                    Err(_) => 3,
                };
                SEEN.store(seen, Ordering::SeqCst);
                Ok(())
            });
        }
        let child = spawn.spawn().expect("spawn");
        assert!(wait(&child).success());
        assert_eq!(
            SEEN.load(Ordering::SeqCst),
            1,
            "a signal was not blocked in the child"
        );
        assert_eq!(nix::sys::prctl::get_dumpable(), Ok(false));
    }

    /// A bare name is found where the C library looks without a PATH, never elsewhere.
    #[test]
    fn a_bare_name_is_looked_for_in_bin_and_usr_bin_only() {
        let sh = resolve(Path::new("sh")).expect("sh");
        assert!(
            sh == Path::new("/bin/sh") || sh == Path::new("/usr/bin/sh"),
            "{sh:?}"
        );
        let e = resolve(Path::new("no-such-program-here")).expect_err("absent");
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert_eq!(resolve(Path::new("./x")).expect("path"), Path::new("./x"));
        let e = Spawn::new("no-such-program-here")
            .spawn()
            .expect_err("absent");
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }

    /// A hook that overflows the child's stack kills the child on the guard page, and the
    /// spawn says so; brokerd's memory is untouched.
    #[test]
    fn a_stack_overflow_in_the_child_is_caught() {
        #[inline(never)]
        fn deep(n: usize) -> usize {
            let pad = [n as u8; 1024];
            if n == 0 {
                return std::hint::black_box(&pad)[0] as usize;
            }
            let below = deep(n - 1);
            // The frame's array is used after the call, so no frame can be dropped.
            below + std::hint::black_box(&pad)[1] as usize
        }
        let mut spawn = Spawn::new("/bin/true");
        // SAFETY: recursion only, on the child's own stack, to its guard page.
        unsafe {
            spawn.pre_exec_hook(|| {
                std::hint::black_box(deep(STACK));
                Ok(())
            });
        }
        let e = spawn.spawn().expect_err("overflow");
        assert_eq!(e.kind(), io::ErrorKind::Other, "{e}");
    }
}
