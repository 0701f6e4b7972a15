//! Where the operator reads what to do: the runbook's anchors, named once. Every log line and
//! every `doctor` line of brokerd that sends the operator to the runbook uses one of these, and
//! the end-to-end suite looks for them in brokerd's log.

/// The runner's runbook, from its start.
pub const RUNNER: &str = "runbook/runner.md";
/// Podman (or the runner in general) cannot run a sandbox, and what each cause looks like.
pub const RUNNER_UNAVAILABLE: &str = "runbook/runner.md#runner-unavailable";
/// The bwrap backend's checks and its leftovers.
pub const BWRAP_UNAVAILABLE: &str = "runbook/runner.md#bwrap-unavailable";
/// A grant directory that changed under brokerd.
pub const GRANT_DIRECTORY_CHANGED: &str = "runbook/runner.md#grant-directory-changed";
/// A grant directory another user could rename or replace, refused at config load.
pub const GRANT_DIRECTORY_OWNERS: &str = "runbook/runner.md#grant-directory-owners";
/// How the service user's Podman denies nested user namespaces.
pub const NESTED_USERNS: &str = "runbook/runner.md#nested-userns";
/// The service user cannot open /dev/net/tun, so the egress network cannot start.
pub const DEV_NET_TUN: &str = "runbook/runner.md#dev-net-tun";
/// An audit record could not be written.
pub const AUDIT_UNWRITABLE: &str = "runbook/audit.md#audit-unwritable";
/// An audit record has been writing for longer than it should: the disk under it is stalled.
pub const AUDIT_STALLED: &str = "runbook/audit.md#audit-stalled";
/// The service user's Podman store still uses fuse-overlayfs although native overlay works.
pub const PODMAN_STORE_MOUNT_PROGRAM: &str = "runbook/runner.md#podman-store-mount-program";
/// A staged grant's layer could not be mounted (it never falls back to the real directory).
pub const STAGED_LAYER: &str = "runbook/runner.md#staged-layer";
/// Staged changes: reading, committing, discarding, and what a conflict means.
pub const STAGED_CHANGES: &str = "runbook/staged.md#staged-changes";

/// A toolset that failed its check: its grants' calls are unavailable.
pub const TOOLSET_UNAVAILABLE: &str = "runbook/runner.md#toolset-unavailable";

/// Every anchor above, for the repository's lint that each exists and that every anchor in use
/// is one of them (crates/repo-lints, which reads this file).
pub const ALL: [&str; 13] = [
    RUNNER,
    RUNNER_UNAVAILABLE,
    BWRAP_UNAVAILABLE,
    GRANT_DIRECTORY_CHANGED,
    GRANT_DIRECTORY_OWNERS,
    NESTED_USERNS,
    DEV_NET_TUN,
    AUDIT_UNWRITABLE,
    AUDIT_STALLED,
    PODMAN_STORE_MOUNT_PROGRAM,
    STAGED_LAYER,
    STAGED_CHANGES,
    TOOLSET_UNAVAILABLE,
];
