//! The orphans bwrap leaves. bwrap's outer process exits as soon as the sandbox's PID 1 tells
//! it the tool's status, before that PID 1 has been reaped; the PID 1 is then adopted by the
//! nearest child subreaper, or by the host's init. Until someone reaps it, it counts against
//! the service user's process limit (RLIMIT_NPROC, which every sandbox gets), so a burst of
//! calls on a host whose init reaps slowly (a container's) fails with "cannot fork".
//!
//! With the bwrap backend brokerd is the subreaper ([`adopt_orphans`]) and reaps them itself
//! ([`reap_orphans`]) before each sandbox starts and whenever SIGCHLD arrives. It reaps only
//! what it adopted: an exited child of brokerd that was the PID 1 of a PID namespace of its
//! own. Every process brokerd starts lives in brokerd's namespace and is reaped by the code
//! that started it, through its pidfd, so neither can take the other's exit status.

use std::io;
use std::sync::Mutex;

use super::procfs::field;

/// Makes brokerd the child subreaper of everything it starts (prctl PR_SET_CHILD_SUBREAPER).
pub fn adopt_orphans() -> io::Result<()> {
    nix::sys::prctl::set_child_subreaper(true).map_err(io::Error::from)
}

/// One reaper at a time: a zombie seen by one must not be reaped by another before the first
/// calls waitid on its PID, which could by then name a new child of brokerd.
static REAPING: Mutex<()> = Mutex::new(());

/// Reaps every adopted sandbox PID 1 that has exited; returns how many. Cheap: it reads the
/// children lists of brokerd's threads and the status of each child.
pub fn reap_orphans() -> usize {
    let _one = REAPING.lock().unwrap_or_else(|p| p.into_inner());
    let mut reaped = 0;
    for pid in children("self") {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"));
        if status.is_ok_and(|s| is_exited_namespace_init(&s)) && reap(pid) {
            reaped += 1;
        }
    }
    reaped
}

/// The children of process `pid` (a number, or `self`): the `children` lists of its threads.
pub(crate) fn children(pid: &str) -> Vec<libc::pid_t> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|p| p.parse::<libc::pid_t>().ok())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Whether a process (its /proc `status`) has exited and was PID 1 of a namespace below
/// brokerd's: a zombie whose `NSpid` line names it in more than one namespace, as 1 last.
fn is_exited_namespace_init(status: &str) -> bool {
    let zombie = field(status, "State:").is_some_and(|s| s.starts_with('Z'));
    zombie && is_namespace_init(status)
}

/// Whether a process (its /proc `status`) is PID 1 of a PID namespace below brokerd's: its
/// `NSpid` line names it in more than one namespace, as 1 last.
pub(crate) fn is_namespace_init(status: &str) -> bool {
    let ns_pids: Vec<&str> = field(status, "NSpid:")
        .map(|l| l.split_whitespace().collect())
        .unwrap_or_default();
    ns_pids.len() >= 2 && ns_pids.last() == Some(&"1")
}

/// waitid for one exited child, without blocking. A zombie child's PID cannot be reused before
/// it is reaped; brokerd's other code reaps only its own children through their pidfds, never
/// a namespace's PID 1, and reapers take turns, so the PID still names the same process.
/// (libc, not nix: nix's waitid reaps a child killed by a real-time signal and then reports
/// EINVAL, which would count it as not reaped.)
fn reap(pid: libc::pid_t) -> bool {
    let Ok(id) = libc::id_t::try_from(pid) else {
        return false;
    };
    // SAFETY: siginfo_t is plain data; zeroed is a valid value for waitid to overwrite.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid writes one siginfo_t through the valid pointer.
    let r = unsafe { libc::waitid(libc::P_PID, id, &mut info, libc::WEXITED | libc::WNOHANG) };
    // SAFETY: after a successful waitid with WNOHANG, si_pid is 0 when nothing was reaped.
    r == 0 && unsafe { info.si_pid() } == pid
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_exited_namespace_init_is_reaped() {
        let status = |state: &str, nspid: &str| {
            format!("Name:\tbwrap\nState:\t{state}\nPid:\t4242\nNSpid:\t{nspid}\n")
        };
        assert!(is_exited_namespace_init(&status("Z (zombie)", "4242\t1")));
        assert!(is_exited_namespace_init(&status(
            "Z (zombie)",
            "4242\t17\t1"
        )));
        // Running; brokerd's own child (one namespace); a process inside, not its PID 1.
        assert!(!is_exited_namespace_init(&status(
            "S (sleeping)",
            "4242\t1"
        )));
        assert!(!is_exited_namespace_init(&status("Z (zombie)", "4242")));
        assert!(!is_exited_namespace_init(&status("Z (zombie)", "4242\t2")));
        assert!(!is_exited_namespace_init("State:\tZ (zombie)\n"));
        assert!(!is_exited_namespace_init(""));
    }
}
