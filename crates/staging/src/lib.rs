//! A staged grant's layers (docs/design.md#staged-writes-and-owners): what a session's calls
//! wrote, kept apart from the real directory until an owner commits or discards it. It reads
//! the real tree through the policy crate's `view` and `dirs`, and names nothing of brokerd.
//! Its system calls go through nix and rustix: it holds no unsafe code.

#![forbid(unsafe_code)]

use boxmaker_policy::{dirs, view};

pub mod stage;
