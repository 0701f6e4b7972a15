//! The sandboxes and the system calls brokerd makes (docs/design.md#runners): `runner` runs a
//! call's tool in a fresh rootless Podman container or bwrap sandbox and cleans it up, and
//! `sys` holds the few calls of brokerd's own that no safe library wraps (the user database's
//! enumeration, the socket systemd passes). This is the one crate of the workspace with unsafe
//! code; every block carries a `SAFETY:` note, and the others forbid it.

pub mod runner;
pub mod sys;
