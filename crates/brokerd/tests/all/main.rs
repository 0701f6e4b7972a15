//! brokerd's integration tests, one binary with a module per concern (one link of brokerd, not
//! one per file). `tests/reaper.rs` stays a binary of its own: it makes its process a
//! subreaper and reaps every orphan, which would take other tests' children. Tests that need
//! what a build sandbox lacks (bwrap making a user namespace, the musl toolkit,
//! busybox-static) are `bwrap_runtime` here and `reaper`; they skip with a printed reason
//! where it is missing, and nixos/pkgs/boxmaker.nix skips them by name.

// Tests: a setup step that fails is the test failing.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![forbid(unsafe_code)]

mod bwrap_golden;
mod bwrap_runtime;
mod common;
mod decisions;
mod owners;
mod podman_cleanup;
mod podman_fake;
mod podman_fetch;
mod podman_golden;
mod podman_runtime;
mod podman_service;
mod privileges;
mod service;
mod slots;
mod staged;
mod status;
