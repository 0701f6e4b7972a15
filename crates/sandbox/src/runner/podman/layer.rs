//! Whether a failed `podman run` failed at a staged grant's overlay volume
//! (docs/design.md#staged-writes-and-owners): such a call is `unavailable` with the staged
//! layer's runbook pointer, as bwrap's is, and does not mark the session's sandbox missing.
//!
//! Tried with rootless Podman 4.3 and runc, each exit 126 or 127 with nothing on standard
//! output: Podman's own preparation of the volume (an upper or work directory it cannot reach
//! or that is not there) prints `Error: mounting overlay failed "<dir>": <why>`; the kernel's
//! refusal of the mount (a work directory on another file system, an upper directory that is
//! a file) comes back through the OCI runtime's error, which quotes the mount's options,
//! `...,upperdir=<upper>,workdir=<work>,...: invalid argument`.
//!
//! A process in the container can print these lines and exit 126 too; it gains nothing by it:
//! its call is `unavailable` either way, and a session left unmarked only means its next
//! calls are attempted.
//!
//! Podman's overlay volume takes no `ro` (Podman 4.3: `can't use 'O' with other options`), so a
//! read-only call of a session that has a layer mounts it writable, and the broker holds it to
//! what a writing call is held to (docs/design.md#staged-writes-and-owners).

use crate::runner::RunSpec;

/// The start of Podman's own line for a volume it could not prepare.
const PODMAN_OVERLAY_FAILED: &str = "Error: mounting overlay failed \"";

/// Whether podman's standard error names the overlay of one of `spec`'s staged mounts, with
/// nothing on standard output (no tool ran to print it). The caller has seen podman's own
/// failure (exit 125 to 127).
pub(super) fn failed_at_layer(spec: &RunSpec, stdout: &[u8], stderr: &str) -> bool {
    if !stdout.is_empty() {
        return false;
    }
    spec.mounts.iter().any(|m| {
        let Some(s) = &m.stage else {
            return false;
        };
        let own = format!("{PODMAN_OVERLAY_FAILED}{}\"", m.path.display());
        let options = format!(
            "upperdir={},workdir={}",
            s.upper.display(),
            s.work.display()
        );
        stderr
            .lines()
            .any(|l| l.starts_with(&own) || l.contains(&options))
    })
}
