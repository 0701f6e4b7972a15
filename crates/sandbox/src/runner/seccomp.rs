//! The bwrap sandboxes' seccomp filter: it blocks what a tool never needs. Podman applies its
//! own default profile; bwrap applies none, so brokerd hands it a classic BPF program through
//! `--seccomp FD`.
//!
//! The program allows everything except a short deny list of calls no tool needs and that
//! widen the kernel surface a sandboxed process can reach: tracing other processes, the key
//! store, eBPF, mounting, module and kexec loading, handles that bypass path lookup, perf
//! events, userfaultfd, io_uring, namespace joining; and `personality` with anything but the
//! default or the query, so address space randomisation cannot be switched off
//! (`setarch -R`); and every call that sets a file's permission bits (`chmod`, `fchmod*`,
//! `open*` and `creat` with a creation mode, `mknod*`) with the setuid or setgid bit, so a
//! sandbox cannot leave a setuid program of the service user in a directory it may write
//! (`openat2`, whose mode the filter cannot read, answers ENOSYS, and callers fall back to
//! `openat`). Denied calls fail with EPERM (a program sees an ordinary error); a foreign
//! architecture or the x32 ABI kills the process, so the deny list cannot be dodged by
//! switching ABI. seccompiler compiles the list; the x32 guard is ours, because a deny list
//! (unlike firecracker's allow lists) must catch x32 numbers.
//!
//! `personality` and the mode arguments are compared as the kernel reads them, 32 bits. Podman's
//! default profile also allows `personality` `0x8`, `0x20000` and `0x20008` (`PER_LINUX32`,
//! `UNAME26`: what `uname` reports); no tool needs them. A directory cannot be made setgid
//! either.

use std::io::{self, Seek, SeekFrom, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::OnceLock;

use nix::sys::memfd::{memfd_create, MFdFlags};
pub use seccompiler::sock_filter as SockFilter;
#[cfg(target_arch = "x86_64")]
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// The descriptor bwrap reads the program from: the argument lists say `--seccomp 3`.
pub const FD: i32 = 3;

/// The denied calls, by number and name.
#[cfg(target_arch = "x86_64")]
pub const DENIED: &[(libc::c_long, &str)] = &[
    (libc::SYS_ptrace, "ptrace"),
    (libc::SYS_process_vm_readv, "process_vm_readv"),
    (libc::SYS_process_vm_writev, "process_vm_writev"),
    (libc::SYS_add_key, "add_key"),
    (libc::SYS_request_key, "request_key"),
    (libc::SYS_keyctl, "keyctl"),
    (libc::SYS_bpf, "bpf"),
    (libc::SYS_mount, "mount"),
    (libc::SYS_umount2, "umount2"),
    (libc::SYS_pivot_root, "pivot_root"),
    (libc::SYS_open_tree, "open_tree"),
    (libc::SYS_move_mount, "move_mount"),
    (libc::SYS_fsopen, "fsopen"),
    (libc::SYS_fsconfig, "fsconfig"),
    (libc::SYS_fsmount, "fsmount"),
    (libc::SYS_fspick, "fspick"),
    (libc::SYS_mount_setattr, "mount_setattr"),
    (libc::SYS_init_module, "init_module"),
    (libc::SYS_finit_module, "finit_module"),
    (libc::SYS_delete_module, "delete_module"),
    (libc::SYS_kexec_load, "kexec_load"),
    (libc::SYS_kexec_file_load, "kexec_file_load"),
    (libc::SYS_name_to_handle_at, "name_to_handle_at"),
    (libc::SYS_open_by_handle_at, "open_by_handle_at"),
    (libc::SYS_perf_event_open, "perf_event_open"),
    (libc::SYS_userfaultfd, "userfaultfd"),
    (libc::SYS_io_uring_setup, "io_uring_setup"),
    (libc::SYS_io_uring_enter, "io_uring_enter"),
    (libc::SYS_io_uring_register, "io_uring_register"),
    (libc::SYS_setns, "setns"),
    (libc::SYS_acct, "acct"),
    (libc::SYS_swapon, "swapon"),
    (libc::SYS_swapoff, "swapoff"),
    (libc::SYS_reboot, "reboot"),
];

/// The calls that set permission bits, with the index of their mode argument: each is denied
/// when the mode has the setuid or the setgid bit (docs/design.md#the-bwrap-runner). The
/// kernel reads a mode as 32 bits, and so does the filter.
#[cfg(target_arch = "x86_64")]
pub const MODE_SETTING: &[(libc::c_long, u8, &str)] = &[
    (libc::SYS_chmod, 1, "chmod"),
    (libc::SYS_fchmod, 1, "fchmod"),
    (libc::SYS_fchmodat, 2, "fchmodat"),
    (libc::SYS_fchmodat2, 2, "fchmodat2"),
    (libc::SYS_open, 2, "open"),
    (libc::SYS_openat, 3, "openat"),
    (libc::SYS_creat, 1, "creat"),
    (libc::SYS_mknod, 1, "mknod"),
    (libc::SYS_mknodat, 2, "mknodat"),
];

/// The bits no mode may carry: setuid and setgid.
#[cfg(target_arch = "x86_64")]
const SPECIAL_BITS: [u64; 2] = [0o4000, 0o2000];

/// The only arguments `personality` takes in a sandbox: `PER_LINUX` (the default every process
/// starts with) and `0xffffffff` (the query, which changes nothing). Anything else fails with
/// EPERM: above all `ADDR_NO_RANDOMIZE` (`setarch -R`), which would turn address space
/// randomisation off for what the process runs next. Podman's default profile also allows
/// `PER_LINUX32` (`0x8`) and `UNAME26` (`0x20000`, and both `0x20008`), which only change what
/// `uname` reports; no tool needs them, so the bwrap filter allows less
/// (docs/design.md#the-bwrap-runner). The kernel reads the argument as 32 bits, and so does the
/// filter: the upper half of the register cannot smuggle a value past it.
#[cfg(target_arch = "x86_64")]
pub const PERSONALITIES: &[u32] = &[0, 0xffff_ffff];

/// System call numbers at or above this are the x32 ABI on x86_64, where the deny list's
/// numbers do not apply: such a call kills the process.
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// The x32 guard and `openat2`'s ENOSYS, run before seccompiler's program. It is correct
/// whatever the architecture: a foreign one is killed by seccompiler's architecture check
/// anyway (and numbers from 424 on are the same calls everywhere).
#[cfg(target_arch = "x86_64")]
fn x32_guard() -> [SockFilter; 5] {
    const BPF_LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const BPF_JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
    const BPF_JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const BPF_RET_K: u16 = 0x06; // BPF_RET | BPF_K
    const OFFSET_NR: u32 = 0; // `struct seccomp_data`: the call's number comes first
    let kill = u32::from(SeccompAction::KillProcess);
    let enosys = u32::from(SeccompAction::Errno(libc::ENOSYS as u32));
    [
        SockFilter {
            code: BPF_LD_W_ABS,
            jt: 0,
            jf: 0,
            k: OFFSET_NR,
        },
        SockFilter {
            code: BPF_JGE_K,
            jt: 0,
            jf: 1,
            k: X32_SYSCALL_BIT,
        },
        SockFilter {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k: kill,
        },
        SockFilter {
            code: BPF_JEQ_K,
            jt: 0,
            jf: 1,
            k: libc::SYS_openat2 as u32,
        },
        SockFilter {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k: enosys,
        },
    ]
}

#[cfg(target_arch = "x86_64")]
fn compile() -> Option<BpfProgram> {
    let mut rules: std::collections::BTreeMap<_, _> =
        DENIED.iter().map(|&(nr, _)| (nr, Vec::new())).collect();
    // One rule: denied when the argument is none of the allowed ones.
    let other_personality = PERSONALITIES
        .iter()
        .map(|&p| SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, p.into()))
        .collect::<Result<Vec<_>, _>>()
        .ok()?;
    rules.insert(
        libc::SYS_personality,
        vec![SeccompRule::new(other_personality).ok()?],
    );
    // One rule a bit: denied when the mode has it.
    for &(nr, arg, _) in MODE_SETTING {
        let with_bit = SPECIAL_BITS
            .iter()
            .map(|&bit| {
                let c = SeccompCondition::new(
                    arg,
                    SeccompCmpArgLen::Dword,
                    SeccompCmpOp::MaskedEq(bit),
                    bit,
                );
                c.and_then(|c| SeccompRule::new(vec![c]))
            })
            .collect::<Result<Vec<_>, _>>()
            .ok()?;
        rules.insert(nr, with_bit);
    }
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        TargetArch::x86_64,
    )
    .ok()?;
    let listed = BpfProgram::try_from(filter).ok()?;
    let mut program = x32_guard().to_vec();
    program.extend(listed);
    Some(program)
}

#[cfg(not(target_arch = "x86_64"))]
fn compile() -> Option<Vec<SockFilter>> {
    None
}

/// The filter program, or `None` on an architecture it has no deny list for: the bwrap
/// runtime then answers every call `unavailable` (a terminal failure), never a sandbox
/// without it. Compiled once.
pub fn program() -> Option<&'static [SockFilter]> {
    static PROGRAM: OnceLock<Option<Vec<SockFilter>>> = OnceLock::new();
    PROGRAM.get_or_init(compile).as_deref()
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
    let fd = memfd_create(c"boxmaker-seccomp", MFdFlags::MFD_CLOEXEC)?;
    let mut file = std::fs::File::from(fd);
    file.write_all(&bytes(program))?;
    file.seek(SeekFrom::Start(0))?;
    Ok(OwnedFd::from(file))
}

/// Hands the program to the bwrap that `cmd` will start, on [`FD`]. Returns the descriptor,
/// which the caller keeps until the spawn has returned; `None` where there is no program.
/// Hooks run in the order they were added: add this one after any that use descriptors.
pub fn pass_to<C: super::spawn::PreExec>(cmd: &mut C) -> io::Result<Option<OwnedFd>> {
    let Some(p) = program() else {
        return Ok(None);
    };
    let fd = memfd(p)?;
    let raw = fd.as_raw_fd();
    // SAFETY: the hook calls only dup2 and fcntl, both async-signal-safe, on a descriptor
    // that stays open in the parent until the caller drops the returned OwnedFd. (libc, not
    // nix: nix's dup2 wants to own the target descriptor, which here is only a number.)
    unsafe {
        cmd.pre_exec_hook(move || {
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

#[cfg(test)]
#[cfg(target_arch = "x86_64")]
mod tests {
    use super::*;
    use nix::sys::signal::Signal;
    use nix::sys::wait::{waitpid, WaitStatus};
    use nix::unistd::{fork, ForkResult};

    /// How a forked child of the test ended after loading the program and running `check`:
    /// exit 0 if the check held, 1 if not, or the signal that killed it.
    fn in_filtered_child(check: fn() -> bool) -> WaitStatus {
        let p = program().expect("x86_64 has a program");
        // SAFETY: the child only makes system calls (no allocation, no locks) and leaves with
        // _exit, so the test harness's other threads cannot be caught mid-lock.
        match unsafe { fork() }.expect("fork") {
            ForkResult::Child => {
                let ok = seccompiler::apply_filter(p).is_ok() && check();
                // SAFETY: leaves the child without running the harness's exit handlers.
                unsafe { libc::_exit(if ok { 0 } else { 1 }) }
            }
            ForkResult::Parent { child } => waitpid(child, None).expect("waitpid"),
        }
    }

    fn passed(status: WaitStatus) -> bool {
        matches!(status, WaitStatus::Exited(_, 0))
    }

    fn denied_calls_fail_with_eperm() -> bool {
        DENIED.iter().all(|&(nr, _)| {
            // SAFETY: every argument is zero; a denied call never reaches the kernel's handler.
            let r = unsafe { libc::syscall(nr, 0, 0, 0, 0, 0, 0) };
            r == -1 && io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
        })
    }

    fn ordinary_calls_work() -> bool {
        // Nothing that allocates: the child of a threaded test must not take malloc's lock.
        nix::unistd::getpid().as_raw() > 0
            && nix::unistd::pipe().is_ok()
            && nix::sys::stat::stat("/").is_ok()
    }

    /// `personality` with `arg` as the raw register: its result, or the errno.
    fn personality(arg: u64) -> Result<libc::c_long, i32> {
        // SAFETY: personality takes one integer and touches no memory of ours.
        let r = unsafe { libc::syscall(libc::SYS_personality, arg) };
        match r {
            -1 => Err(io::Error::last_os_error().raw_os_error().unwrap_or(0)),
            r => Ok(r),
        }
    }

    fn only_the_default_personality_and_the_query() -> bool {
        const ADDR_NO_RANDOMIZE: u64 = 0x0040000;
        let denied = [
            ADDR_NO_RANDOMIZE,
            ADDR_NO_RANDOMIZE | 0xffff_ffff_0000_0000,
            0x8,       // PER_LINUX32
            0x20000,   // UNAME26
            0x0400000, // READ_IMPLIES_EXEC
            0xffff_fffe,
        ];
        let before = personality(0xffff_ffff);
        before.is_ok()
            && denied
                .iter()
                .all(|&p| personality(p) == Err(libc::EPERM))
            && personality(0xffff_ffff) == before
            // What the kernel reads is 32 bits: a stray upper half is still the default.
            && [0, 0x1_0000_0000]
                .iter()
                .all(|&p| personality(p).is_ok())
    }

    /// A raw call's errno (0 when it succeeded).
    fn errno_of(r: libc::c_long) -> i32 {
        if r == -1 {
            io::Error::last_os_error().raw_os_error().unwrap_or(0)
        } else {
            0
        }
    }

    fn no_setuid_or_setgid_mode() -> bool {
        let gone = c"/nonexistent/boxmaker-seccomp";
        let p = gone.as_ptr();
        let creat = libc::O_CREAT | libc::O_WRONLY;
        // (mode, the errno it must get): the filter's EPERM, or the kernel's own answer.
        let modes: [(u64, i32); 7] = [
            (0o4755, libc::EPERM),
            (0o2755, libc::EPERM),
            (0o6777, libc::EPERM),
            (0o1777, libc::ENOENT),
            (0o755, libc::ENOENT),
            // The kernel reads 32 bits: an upper half changes nothing either way.
            ((1 << 32) | 0o755, libc::ENOENT),
            ((1 << 32) | 0o4755, libc::EPERM),
        ];
        modes.iter().all(|&(mode, want)| {
            // SAFETY: each call names a NUL-terminated path that does not exist, or fd -1;
            // none writes memory of ours.
            let got = unsafe {
                [
                    errno_of(libc::syscall(libc::SYS_chmod, p, mode)),
                    errno_of(libc::syscall(
                        libc::SYS_fchmodat,
                        libc::AT_FDCWD,
                        p,
                        mode,
                        0,
                    )),
                    errno_of(libc::syscall(
                        libc::SYS_fchmodat2,
                        libc::AT_FDCWD,
                        p,
                        mode,
                        0,
                    )),
                    errno_of(libc::syscall(libc::SYS_open, p, creat, mode)),
                    errno_of(libc::syscall(
                        libc::SYS_openat,
                        libc::AT_FDCWD,
                        p,
                        creat,
                        mode,
                    )),
                    errno_of(libc::syscall(libc::SYS_creat, p, mode)),
                    errno_of(libc::syscall(
                        libc::SYS_mknodat,
                        libc::AT_FDCWD,
                        p,
                        u64::from(libc::S_IFREG) | mode,
                        0,
                    )),
                ]
            };
            // SAFETY: fchmod of descriptor -1 touches nothing.
            let fchmod = errno_of(unsafe { libc::syscall(libc::SYS_fchmod, -1, mode) });
            let fchmod_want = if want == libc::EPERM {
                libc::EPERM
            } else {
                libc::EBADF
            };
            got.iter().all(|&e| e == want) && fchmod == fchmod_want
        })
    }

    fn openat2_is_not_there() -> bool {
        // SAFETY: openat2 is refused before the kernel reads its arguments.
        let r = unsafe { libc::syscall(libc::SYS_openat2, libc::AT_FDCWD, 0, 0, 0) };
        errno_of(r) == libc::ENOSYS
    }

    fn an_x32_call() -> bool {
        // SAFETY: getpid under the x32 ABI's numbering takes no arguments and changes nothing.
        unsafe { libc::syscall(libc::SYS_getpid | X32_SYSCALL_BIT as libc::c_long) };
        true
    }

    #[test]
    fn the_filter_denies_its_list_and_allows_the_rest() {
        assert!(
            passed(in_filtered_child(denied_calls_fail_with_eperm)),
            "a denied call got through"
        );
        assert!(
            passed(in_filtered_child(ordinary_calls_work)),
            "an ordinary call was denied"
        );
    }

    #[test]
    fn address_randomisation_cannot_be_switched_off() {
        assert!(
            passed(in_filtered_child(
                only_the_default_personality_and_the_query
            )),
            "a personality other than the default and the query got through"
        );
    }

    #[test]
    fn no_call_sets_setuid_or_setgid() {
        assert!(
            passed(in_filtered_child(no_setuid_or_setgid_mode)),
            "a mode with setuid or setgid got through, or a plain one was denied"
        );
        assert!(
            passed(in_filtered_child(openat2_is_not_there)),
            "openat2 is not ENOSYS"
        );
    }

    #[test]
    fn an_x32_call_kills_the_process() {
        match in_filtered_child(an_x32_call) {
            WaitStatus::Signaled(_, Signal::SIGSYS, _) => {}
            other => panic!("an x32 call was not killed: {other:?}"),
        }
    }

    #[test]
    fn the_program_is_well_formed() {
        let p = program().unwrap();
        assert!(p.len() < 4096, "BPF_MAXINSNS");
        assert_eq!(bytes(p).len(), p.len() * 8);
        assert_eq!(p[..5], x32_guard());
        let mut names: Vec<&str> = DENIED.iter().map(|d| d.1).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), DENIED.len(), "a call listed twice");
    }
}
