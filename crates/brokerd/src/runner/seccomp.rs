//! The bwrap sandboxes' seccomp filter: it blocks what a tool never needs. Podman applies its
//! own default profile; bwrap applies none, so brokerd hands it a classic BPF program through
//! `--seccomp FD`.
//!
//! The program allows everything except a short deny list of calls no tool needs and that
//! widen the kernel surface a sandboxed process can reach: tracing other processes, the key
//! store, eBPF, mounting, module and kexec loading, handles that bypass path lookup, perf
//! events, userfaultfd, io_uring, namespace joining. Denied calls fail with EPERM (a program
//! sees an ordinary error); a foreign architecture or the x32 ABI kills the process, so the
//! numbers below cannot be dodged by switching ABI.

use std::io::{self, Seek, SeekFrom, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

/// The descriptor bwrap reads the program from: the argument lists say `--seccomp 3`.
pub const FD: i32 = 3;

/// `struct sock_filter`, as the kernel and bwrap read it.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SockFilter {
    code: u16,
    jt: u8,
    jf: u8,
    k: u32,
}

const BPF_LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const BPF_JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const BPF_JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
const BPF_RET_K: u16 = 0x06; // BPF_RET | BPF_K

const SECCOMP_RET_KILL_PROCESS: u32 = 0x8000_0000;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
/// System call numbers at or above this are the x32 ABI on x86_64.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// `struct seccomp_data`: the syscall number is at offset 0, the architecture at 4.
const OFFSET_NR: u32 = 0;
const OFFSET_ARCH: u32 = 4;

/// The denied calls, by x86_64 number and name.
#[cfg(target_arch = "x86_64")]
pub const DENIED: &[(u32, &str)] = &[
    (101, "ptrace"),
    (310, "process_vm_readv"),
    (311, "process_vm_writev"),
    (248, "add_key"),
    (249, "request_key"),
    (250, "keyctl"),
    (321, "bpf"),
    (165, "mount"),
    (166, "umount2"),
    (155, "pivot_root"),
    (428, "open_tree"),
    (429, "move_mount"),
    (430, "fsopen"),
    (431, "fsconfig"),
    (432, "fsmount"),
    (433, "fspick"),
    (442, "mount_setattr"),
    (175, "init_module"),
    (313, "finit_module"),
    (176, "delete_module"),
    (246, "kexec_load"),
    (320, "kexec_file_load"),
    (303, "name_to_handle_at"),
    (304, "open_by_handle_at"),
    (298, "perf_event_open"),
    (323, "userfaultfd"),
    (425, "io_uring_setup"),
    (426, "io_uring_enter"),
    (427, "io_uring_register"),
    (308, "setns"),
    (163, "acct"),
    (167, "swapon"),
    (168, "swapoff"),
    (169, "reboot"),
];

fn stmt(code: u16, k: u32) -> SockFilter {
    SockFilter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> SockFilter {
    SockFilter { code, jt, jf, k }
}

/// The filter program, or `None` on an architecture it has no numbers for: the bwrap runtime
/// then answers every call `unavailable` (a terminal failure), never a sandbox without it.
pub fn program() -> Option<Vec<SockFilter>> {
    #[cfg(target_arch = "x86_64")]
    {
        let n = DENIED.len();
        // Layout: [0] load arch, [1] arch ok?, [2] kill, [3] load nr, [4] x32?, then one jeq
        // per denied call jumping to the EPERM return, then allow, then EPERM.
        let mut p = vec![
            stmt(BPF_LD_W_ABS, OFFSET_ARCH),
            jump(BPF_JEQ_K, AUDIT_ARCH_X86_64, 1, 0),
            stmt(BPF_RET_K, SECCOMP_RET_KILL_PROCESS),
            stmt(BPF_LD_W_ABS, OFFSET_NR),
            // x32: to the kill above is a backward jump, which BPF forbids; kill here instead.
            jump(BPF_JGE_K, X32_SYSCALL_BIT, 0, 1),
            stmt(BPF_RET_K, SECCOMP_RET_KILL_PROCESS),
        ];
        for (i, (nr, _)) in DENIED.iter().enumerate() {
            // From this jeq, the EPERM return is past the remaining jeqs and the allow.
            let to_eperm = (n - 1 - i) + 1;
            p.push(jump(BPF_JEQ_K, *nr, to_eperm as u8, 0));
        }
        p.push(stmt(BPF_RET_K, SECCOMP_RET_ALLOW));
        p.push(stmt(BPF_RET_K, SECCOMP_RET_ERRNO | libc::EPERM as u32));
        Some(p)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

/// The program as bytes, in the layout bwrap reads from its `--seccomp` descriptor.
pub fn bytes(p: &[SockFilter]) -> Vec<u8> {
    let mut out = Vec::with_capacity(p.len() * 8);
    for f in p {
        out.extend_from_slice(&f.code.to_ne_bytes());
        out.push(f.jt);
        out.push(f.jf);
        out.extend_from_slice(&f.k.to_ne_bytes());
    }
    out
}

/// A fresh descriptor holding the program, positioned at its start, for one bwrap to read.
/// (One per sandbox: bwrap reads from the current offset, which dup'ed descriptors share.)
pub fn memfd(program: &[SockFilter]) -> io::Result<OwnedFd> {
    // SAFETY: the name is a valid NUL-terminated string; flags are constants.
    let fd = unsafe { libc::memfd_create(c"boxmaker-seccomp".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: memfd_create returned a new descriptor that nothing else owns.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut file = std::fs::File::from(owned);
    file.write_all(&bytes(program))?;
    file.seek(SeekFrom::Start(0))?;
    Ok(OwnedFd::from(file))
}

/// Hands the program to the bwrap that `cmd` will start, on [`FD`]. Returns the descriptor,
/// which the caller keeps until the spawn has returned; `None` where there is no program.
/// Hooks run in the order they were added: add this one after any that use descriptors.
pub fn pass_to(cmd: &mut Command) -> io::Result<Option<OwnedFd>> {
    let Some(p) = program() else {
        return Ok(None);
    };
    let fd = memfd(&p)?;
    let raw = fd.as_raw_fd();
    // SAFETY: the hook calls only dup2 and fcntl, both async-signal-safe, on a descriptor
    // that stays open in the parent until the caller drops the returned OwnedFd.
    unsafe {
        cmd.pre_exec(move || {
            // dup2 leaves the copy open across exec; a descriptor already at FD only needs
            // its FD_CLOEXEC cleared (dup2 onto itself would keep it).
            let r = if raw == FD {
                libc::fcntl(raw, libc::F_SETFD, 0)
            } else {
                libc::dup2(raw, FD)
            };
            if r < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ok(Some(fd))
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    /// Loads the program in a forked child of the test and reports, through the exit code,
    /// whether each denied call failed with EPERM and an ordinary call still worked.
    fn run_in_child(check: fn() -> bool) -> bool {
        let p = program().expect("x86_64 has a program");
        let prog = libc::sock_fprog {
            len: p.len() as u16,
            filter: p.as_ptr() as *mut libc::sock_filter,
        };
        // SAFETY: fork in a test; the child only makes system calls and exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork");
        if pid == 0 {
            // SAFETY: prctl with valid arguments; `prog` outlives the call.
            let ok = unsafe {
                libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
                    && libc::prctl(
                        libc::PR_SET_SECCOMP,
                        libc::SECCOMP_MODE_FILTER,
                        &prog as *const _,
                    ) == 0
            };
            let code = if ok && check() { 0 } else { 1 };
            // SAFETY: leave the forked child without running the test harness's destructors.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waiting for the child just forked.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
    }

    fn denied_calls_fail_with_eperm() -> bool {
        DENIED.iter().all(|(nr, _)| {
            // SAFETY: every argument is zero; a denied call never reaches the kernel's handler.
            let r = unsafe { libc::syscall(*nr as libc::c_long, 0, 0, 0, 0, 0, 0) };
            r == -1 && io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
        })
    }

    fn ordinary_calls_work() -> bool {
        // SAFETY: getpid and a pipe have no preconditions.
        unsafe {
            let mut fds = [0; 2];
            libc::getpid() > 0 && libc::pipe(fds.as_mut_ptr()) == 0
        }
    }

    #[test]
    fn the_filter_denies_its_list_and_allows_the_rest() {
        assert!(
            run_in_child(denied_calls_fail_with_eperm),
            "a denied call got through"
        );
        assert!(
            run_in_child(ordinary_calls_work),
            "an ordinary call was denied"
        );
    }

    #[test]
    fn the_program_is_well_formed() {
        let p = program().unwrap();
        assert!(p.len() < 256, "jump offsets are u8");
        assert_eq!(bytes(&p).len(), p.len() * 8);
        assert_eq!(p[p.len() - 2], stmt(BPF_RET_K, SECCOMP_RET_ALLOW));
        let mut names: Vec<&str> = DENIED.iter().map(|d| d.1).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), DENIED.len(), "a call listed twice");
    }
}
