//! What /proc says about this host's processes, as the sweeps and the reaper read it: which
//! processes there are, and the fields of a process's `status` (their children:
//! [`super::reaper::children`]). A process can
//! exit between two reads, so what cannot be read counts as not there.

use std::path::{Path, PathBuf};

/// Every process in /proc but brokerd itself, by PID, with its /proc directory; none when
/// /proc cannot be read.
pub(crate) fn processes() -> impl Iterator<Item = (libc::pid_t, PathBuf)> {
    let me = nix::unistd::getpid().as_raw();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(move |entry| {
            let pid = entry.file_name().to_str()?.parse::<libc::pid_t>().ok()?;
            (pid != me).then(|| (pid, entry.path()))
        })
}

/// A process's `status` and `cmdline` (its arguments, each ended by a NUL), from its /proc
/// directory `dir`; empty when it has gone.
pub(crate) fn status_and_cmdline(dir: &Path) -> (String, Vec<u8>) {
    let status = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
    let cmdline = std::fs::read(dir.join("cmdline")).unwrap_or_default();
    (status, cmdline)
}

/// The value of the field `name` (`"State:"`) of a process's `status`, trimmed.
pub(crate) fn field<'a>(status: &'a str, name: &str) -> Option<&'a str> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .map(str::trim)
}

/// A process's real user: the first ID of its `status`'s `Uid:` line.
pub(crate) fn real_uid(status: &str) -> Option<u32> {
    field(status, "Uid:")?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_fields_are_read_by_name() {
        let status =
            "Name:\tconmon\nState:\tS (sleeping)\nPPid:\t17\nUid:\t1002\t1003\t1003\t1003\n";
        assert_eq!(field(status, "State:"), Some("S (sleeping)"));
        assert_eq!(field(status, "PPid:"), Some("17"));
        assert_eq!(field(status, "NSpid:"), None);
        assert_eq!(real_uid(status), Some(1002));
        assert_eq!(real_uid("Uid:\tnobody\n"), None);
        assert_eq!(real_uid(""), None);
    }

    /// This test's own process is among the children of its parent, and never in the list.
    #[test]
    fn processes_leave_brokerd_out() {
        let me = nix::unistd::getpid().as_raw();
        let parent = nix::unistd::getppid().as_raw();
        let pids: Vec<libc::pid_t> = processes().map(|(pid, _)| pid).collect();
        assert!(!pids.contains(&me));
        assert!(pids.contains(&parent), "{parent} not in {pids:?}");
        assert!(super::super::reaper::children(&parent.to_string()).contains(&me));
    }
}
