//! Why no container can ever start here as configured (docs/design.md#preflight-and-poisoning):
//! remembered until restart, so later calls and the preflight answer `unavailable` without
//! running podman again, as the bwrap runner does with its own.
//!
//! Exit 125 says only that podman itself failed; its standard error says why. A cause read
//! there is confirmed by a podman command of brokerd's own before it is remembered: the tool
//! container's exit code and standard error can also be its tool's (a process inside that
//! traces toolkit can make it exit 125 and print anything), and one such call must not turn
//! the runner off.
//!
//! The confirmation is `podman image exists <image>`, which needs no container and pulls
//! nothing: exit 1 says the image is missing, a failure with a user-namespace line of its own
//! says the namespace is refused.

use std::ffi::OsString;
use std::process::ExitStatus;
use std::time::Instant;

use super::super::trouble::Missing;
use super::process::Helper;
use super::PodmanRuntime;

/// What is remembered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Terminal {
    #[error("podman is absent: {0}")]
    Absent(String),
    #[error("podman is not executable: {0}")]
    Inexecutable(String),
    /// Rootless Podman makes a user namespace for every command; the kernel (or the service
    /// user's subordinate ids) refused it.
    #[error("the kernel refused podman a user namespace: {0}")]
    NoUserNamespace(String),
    /// The pinned image is not in the service user's store (`podman image exists` says so).
    #[error("the image is not in the service user's store: {0}")]
    ImageMissing(String),
}

impl Terminal {
    /// podman itself missing (`runner::trouble::Missing`).
    pub(super) fn missing(m: Missing, detail: String) -> Terminal {
        match m {
            Missing::Absent => Terminal::Absent(detail),
            Missing::Inexecutable => Terminal::Inexecutable(detail),
        }
    }
}

/// What podman's standard error of a failed run suggests, before it is confirmed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Suspect {
    NoUserNamespace,
    ImageMissing,
}

/// What rootless Podman prints when it cannot make its user namespace: the clone refused (and
/// which sysctl is off), or newuidmap/newgidmap refusing the service user's ranges.
const NO_USERNS: [&str; 6] = [
    "cannot clone: ",
    "user namespaces are not enabled",
    "cannot set up namespace using",
    "newuidmap",
    "newgidmap",
    "cannot re-exec process",
];

/// The cause a failed `podman run` suggests: only exit 125 (podman's own failure) with nothing
/// on standard output (no tool ran to print it), and a line of standard error that names it.
pub(super) fn suspect(status: ExitStatus, stdout: &[u8], stderr: &str) -> Option<Suspect> {
    if status.code() != Some(125) || !stdout.is_empty() {
        return None;
    }
    if stderr
        .lines()
        .any(|l| NO_USERNS.iter().any(|m| l.contains(m)))
    {
        return Some(Suspect::NoUserNamespace);
    }
    if stderr
        .lines()
        .any(|l| l.starts_with("Error: ") && l.trim_end().ends_with(": image not known"))
    {
        return Some(Suspect::ImageMissing);
    }
    None
}

impl PodmanRuntime {
    /// Confirms `suspect` with `podman image exists <image>`, which needs no container and
    /// pulls nothing: exit 1 is the image missing, a failure with a user-namespace line on its
    /// own standard error is the namespace refused. Anything else confirms nothing.
    pub(super) fn confirm(&self, suspect: Suspect, stderr: &str) -> Option<Terminal> {
        let args: Vec<OsString> = vec!["image".into(), "exists".into(), self.image.clone().into()];
        let Helper::Exited(status, own, _) =
            self.helper(&args, Instant::now() + self.helper_timeout)
        else {
            return None;
        };
        let detail = stderr.trim_end().to_string();
        match (suspect, status.code()) {
            (Suspect::ImageMissing, Some(1)) => Some(Terminal::ImageMissing(detail)),
            (Suspect::NoUserNamespace, Some(code))
                if code != 0 && suspect_of(&own) == Some(Suspect::NoUserNamespace) =>
            {
                Some(Terminal::NoUserNamespace(own.trim_end().to_string()))
            }
            _ => None,
        }
    }

    /// Remembers `t` (the first one seen stands).
    pub(super) fn remember(&self, t: Terminal) {
        self.terminal
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(t);
    }

    /// The remembered terminal failure, if any.
    pub fn terminal(&self) -> Option<Terminal> {
        self.terminal
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// The user-namespace reading of a helper's own standard error (its exit code already 125).
fn suspect_of(stderr: &str) -> Option<Suspect> {
    stderr
        .lines()
        .any(|l| NO_USERNS.iter().any(|m| l.contains(m)))
        .then_some(Suspect::NoUserNamespace)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    /// Podman's own lines, as Podman 4.3 prints them, and lines that must not count.
    #[test]
    fn only_podman_s_own_failure_suggests_a_terminal_cause() {
        let exit = |code: i32| ExitStatus::from_raw(code << 8);
        let image = "Error: sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa: image not known\n";
        let userns = "cannot clone: Operation not permitted\nuser namespaces are not enabled in /proc/sys/kernel/unprivileged_userns_clone\nError: cannot re-exec process\n";
        let uidmap = "Error: cannot set up namespace using \"/usr/bin/newuidmap\": exit status 1\n";
        // (status, stdout, stderr, suspect)
        let table: [(ExitStatus, &[u8], &str, Option<Suspect>); 9] = [
            (exit(125), b"", image, Some(Suspect::ImageMissing)),
            (exit(125), b"", userns, Some(Suspect::NoUserNamespace)),
            (exit(125), b"", uidmap, Some(Suspect::NoUserNamespace)),
            // A tool ran (it printed), or another exit: not podman's own failure.
            (exit(125), b"x", image, None),
            (exit(126), b"", image, None),
            (exit(127), b"", userns, None),
            (exit(1), b"", image, None),
            // Other failures of podman's: tried again.
            (exit(125), b"", "Error: pasta: unsupported network\n", None),
            (
                exit(125),
                b"",
                "Error: creating container: image not known yet, retrying\n",
                None,
            ),
        ];
        for (status, stdout, stderr, want) in table {
            assert_eq!(suspect(status, stdout, stderr), want, "{status} {stderr:?}");
        }
    }
}
