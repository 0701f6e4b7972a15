//! Container monitors Podman no longer knows. A `podman run` killed between `runc create` and
//! the moment it records the container as created (a SIGKILL of brokerd during a proxy's
//! start does it) leaves its `conmon` and the container's `runc init` behind: the init waits
//! for a `runc start` that never comes, holding the container's namespaces and mounts, and
//! `podman rm` of the container (by then "configured", or gone) does not reach it. Seen with
//! Podman 4.3 and runc 1.1. The sweep kills them after removing the containers
//! (docs/design.md#sweep): at start and at the end of a shutdown no container of brokerd's
//! runs, so a monitor of a container named as brokerd names them is left over. A stop that
//! had to kill a podman client kills the monitor of that one container the same way.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::remove::is_boxmaker_name;
use crate::runner::pidfd::{Pidfd, KILL_CONFIRM};
use crate::runner::{procfs, reaper};

/// Kills every `conmon` of this user that monitors a container named as brokerd names them,
/// its children first (the container's init, whose death ends the container's PID
/// namespace); each through a pidfd opened before it was judged. How many monitors went,
/// and each process that did not die.
pub(super) fn sweep_monitors() -> (usize, Vec<String>) {
    kill_monitors(|_| true)
}

/// Kills the monitor of container `name`, if one is left: after a stop that killed the
/// container's podman client while it may have been making it.
pub(super) fn stop_monitor_of(name: &str) -> Result<(), String> {
    let (_, failed) = kill_monitors(|n| n == name);
    match failed.is_empty() {
        true => Ok(()),
        false => Err(failed.join("; ")),
    }
}

/// Kills the left monitors whose container name `pick` takes.
fn kill_monitors(pick: impl Fn(&str) -> bool) -> (usize, Vec<String>) {
    let mut removed = 0;
    let mut failed = Vec::new();
    let uid = nix::unistd::getuid().as_raw();
    for (pid, dir) in procfs::processes() {
        let mut name = None;
        let is_it = || {
            let (status, cmdline) = procfs::status_and_cmdline(&dir);
            name = left_monitor(&status, &cmdline, uid).filter(|n| pick(n));
            name.is_some()
        };
        let Some(monitor) = Pidfd::open_if(pid, is_it) else {
            continue;
        };
        let name = name.unwrap_or_default();
        let mut dead = true;
        for child in reaper::children(&pid.to_string()) {
            // Still the child of the monitor, which its pidfd keeps alive: the PID is its.
            let of_it = || {
                std::fs::read_to_string(format!("/proc/{child}/status"))
                    .is_ok_and(|s| procfs::field(&s, "PPid:") == Some(pid.to_string().as_str()))
            };
            if let Some(c) = Pidfd::open_if(child, of_it) {
                if !c.kill_foreign(KILL_CONFIRM) {
                    dead = false;
                    failed.push(format!("{name}: process {child} did not die on SIGKILL"));
                }
            }
        }
        if !monitor.kill_foreign(KILL_CONFIRM) {
            dead = false;
            failed.push(format!("{name}: conmon {pid} did not die on SIGKILL"));
        }
        if dead {
            tracing::warn!(
                container = name,
                "killed the monitor of a container Podman no longer lists (process {pid})"
            );
            removed += 1;
        }
    }
    (removed, failed)
}

/// The container a process (its /proc `status` and `cmdline`) monitors, if it is a `conmon`
/// of this user (its real uid) for a container named as brokerd names them (`-n <name>`).
pub(super) fn left_monitor(status: &str, cmdline: &[u8], uid: u32) -> Option<String> {
    if procfs::real_uid(status) != Some(uid) {
        return None;
    }
    let mut args = cmdline.split(|&b| b == 0);
    let program = Path::new(OsStr::from_bytes(args.next().unwrap_or_default()));
    if program.file_name() != Some(OsStr::new("conmon")) {
        return None;
    }
    let args: Vec<&[u8]> = args.collect();
    args.windows(2)
        .find(|w| w[0] == b"-n")
        .and_then(|w| std::str::from_utf8(w[1]).ok())
        .filter(|n| is_boxmaker_name(n))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_this_user_s_monitors_of_brokerd_s_containers_are_taken() {
        let status = |uid: u32| format!("Name:\tconmon\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n");
        let line = |args: &[&str]| args.join("\0").into_bytes();
        let ours = line(&[
            "/usr/bin/conmon",
            "--api-version",
            "1",
            "-c",
            "d881",
            "-n",
            "boxmaker-s1-c1-2-egress",
            "--exit-dir",
            "/run/user/1002/libpod/tmp/exits",
        ]);
        // (status, cmdline, found)
        let table: [(String, Vec<u8>, Option<&str>); 6] = [
            (status(1002), ours.clone(), Some("boxmaker-s1-c1-2-egress")),
            (status(1003), ours.clone(), None),
            (
                status(1002),
                line(&["/usr/bin/conmon", "-c", "x", "-n", "web-server"]),
                None,
            ),
            (
                status(1002),
                line(&["/usr/bin/sleep", "-n", "boxmaker-s1-c1-2"]),
                None,
            ),
            (
                status(1002),
                line(&["conmon", "-n", "boxmaker-s1-c1-2"]),
                Some("boxmaker-s1-c1-2"),
            ),
            (status(1002), line(&["/usr/bin/conmon", "-n"]), None),
        ];
        for (status, cmdline, want) in table {
            assert_eq!(
                left_monitor(&status, &cmdline, 1002).as_deref(),
                want,
                "{}",
                String::from_utf8_lossy(&cmdline)
            );
        }
    }
}
