//! What an earlier brokerd left behind: its sandboxes found by user, program and tools root,
//! and stopped (docs/design.md#service).

use super::*;
use crate::runner::procfs;

/// Kills the sandboxes a crashed brokerd left running. Each dies with brokerd once it is
/// set up, but a sandbox killed while bwrap was still building it can outlive it: the
/// process bwrap clones sets its own parent-death signal only when its mounts are made.
/// Such a process runs as this user with the same program and tools root (or a toolset's
/// tree) as every sandbox
/// brokerd starts, which is how it is recognised (one brokerd per service user); it is
/// stopped through a pidfd opened before it was judged.
pub(super) fn sweep_sandboxes<'a>(
    bwrap: &Path,
    roots: impl IntoIterator<Item = &'a PathBuf>,
) -> (usize, Vec<String>) {
    let mut removed = 0;
    let mut failed = Vec::new();
    let uid = nix::unistd::getuid().as_raw();
    let markers: Vec<PathBuf> = roots.into_iter().map(|r| r.join("bin")).collect();
    for (pid, dir) in procfs::processes() {
        let is_it = || {
            let (status, cmdline) = procfs::status_and_cmdline(&dir);
            markers
                .iter()
                .any(|marker| is_left_sandbox(&status, &cmdline, uid, bwrap, marker))
        };
        let Some(pidfd) = Pidfd::open_if(pid, is_it) else {
            continue;
        };
        if pidfd.kill_foreign(KILL_CONFIRM) {
            tracing::warn!("killed a sandbox left by an earlier brokerd (process {pid})");
            removed += 1;
        } else {
            failed.push(format!("sandbox process {pid} did not die on SIGKILL"));
        }
    }
    (removed, failed)
}

/// Whether a process (its /proc `status` and `cmdline`) is a bwrap sandbox of this service:
/// its real user, `bwrap` as started, the tools root's `bin` among its arguments.
pub(super) fn is_left_sandbox(
    status: &str,
    cmdline: &[u8],
    uid: u32,
    bwrap: &Path,
    marker: &Path,
) -> bool {
    if procfs::real_uid(status) != Some(uid) {
        return false;
    }
    let mut args = cmdline.split(|&b| b == 0);
    // As started, or as systemd-run found it in PATH for a scope (`bwrap`, `/usr/bin/bwrap`).
    let program = args.next().unwrap_or_default();
    let named = program == bwrap.as_os_str().as_bytes()
        || (!bwrap.as_os_str().as_bytes().contains(&b'/')
            && Path::new(OsStr::from_bytes(program)).file_name() == Some(bwrap.as_os_str()));
    named && args.any(|a| a == marker.as_os_str().as_bytes())
}
