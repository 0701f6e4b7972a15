//! `ResourceLimits`, the first of two resource contracts (docs/design.md#limits): setrlimit(2)
//! in the sandbox's first process, after fork and before exec, so bwrap and everything it
//! starts inherit them. They hold on any host, cgroups or not; the cgroup contract
//! ([`super::cgroup`]) bounds the sandbox as a whole, which rlimits cannot (they count per
//! process, or per user for processes).

use std::io;
use std::time::Duration;

use nix::sys::resource::{setrlimit, Resource};

/// Largest file a sandbox may write (RLIMIT_FSIZE): above the 64 MiB `/tmp` and far above
/// anything a tool should write into a workspace in one call.
pub const FILE_SIZE: u64 = 256 * 1024 * 1024;
/// Open descriptors per process (RLIMIT_NOFILE): toolkit and busybox need a handful; the
/// egress proxy needs two per connection and serves at most 8.
pub const OPEN_FILES: u64 = 1024;

/// One sandbox's rlimits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceLimits {
    /// RLIMIT_AS, from `memory`: address space per process.
    pub address_space: u64,
    /// RLIMIT_NPROC, from `pids`. The kernel counts it per user, so it bounds the service
    /// user's processes as seen from inside the sandbox's user namespace too.
    pub processes: u64,
    /// RLIMIT_FSIZE.
    pub file_size: u64,
    /// RLIMIT_NOFILE.
    pub open_files: u64,
    /// RLIMIT_CPU in seconds: never more than the call's time limit, rounded up; a backstop
    /// behind the wall-clock limit, for work that escapes the pidfd's kill.
    pub cpu_seconds: u64,
}

impl ResourceLimits {
    pub fn new(memory: u64, pids: u32, time_limit: Duration) -> ResourceLimits {
        let secs = time_limit.as_secs() + u64::from(time_limit.subsec_nanos() > 0);
        ResourceLimits {
            address_space: memory,
            processes: u64::from(pids),
            file_size: FILE_SIZE,
            open_files: OPEN_FILES,
            cpu_seconds: secs.max(1),
        }
    }

    /// The (resource, value) pairs in the order they are set.
    pub fn table(&self) -> [(Resource, u64); 5] {
        [
            (Resource::RLIMIT_AS, self.address_space),
            (Resource::RLIMIT_NPROC, self.processes),
            (Resource::RLIMIT_FSIZE, self.file_size),
            (Resource::RLIMIT_NOFILE, self.open_files),
            (Resource::RLIMIT_CPU, self.cpu_seconds),
        ]
    }

    /// Sets every limit, soft and hard, on the calling process. Async-signal-safe (only
    /// setrlimit), so it may run in a `pre_exec` hook between fork and exec.
    pub fn apply(&self) -> io::Result<()> {
        for (resource, value) in self.table() {
            setrlimit(resource, value, value)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::Command;

    #[test]
    fn cpu_seconds_round_up_and_never_reach_zero() {
        let table = [(0, 1), (999, 1), (1000, 1), (1001, 2), (30_000, 30)];
        for (ms, secs) in table {
            let l = ResourceLimits::new(1 << 29, 128, Duration::from_millis(ms));
            assert_eq!(l.cpu_seconds, secs, "{ms} ms");
        }
    }

    #[test]
    fn a_child_sees_its_limits() {
        let limits = ResourceLimits::new(512 << 20, 128, Duration::from_secs(30));
        let mut cmd = Command::new("cat");
        cmd.arg("/proc/self/limits");
        // SAFETY: apply only calls setrlimit, which is async-signal-safe.
        unsafe {
            cmd.pre_exec(move || limits.apply());
        }
        let out = cmd.output().expect("cat");
        let text = String::from_utf8_lossy(&out.stdout);
        // (row of /proc/self/limits, soft and hard value)
        let want = [
            ("Max address space", (512u64 << 20).to_string()),
            ("Max processes", "128".into()),
            ("Max open files", "1024".into()),
            ("Max cpu time", "30".into()),
            ("Max file size", FILE_SIZE.to_string()),
        ];
        for (row, value) in want {
            let line = text
                .lines()
                .find(|l| l.starts_with(row))
                .unwrap_or_else(|| panic!("{row} missing in {text}"));
            let fields: Vec<&str> = line[row.len()..].split_whitespace().collect();
            assert_eq!(&fields[..2], [value.as_str(), value.as_str()], "{line}");
        }
    }
}
