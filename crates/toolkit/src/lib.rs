//! toolkit: the one static binary inside the sandbox (docs/design.md#the-toolkit).
//!
//! `toolkit read_file | write_file | shell | http_fetch` read the tool's arguments as JSON on
//! standard input and print what the model should see; `toolkit egress-proxy` is the SOCKS5 and HTTP CONNECT
//! proxy of docs/design.md#the-egress-proxy. toolkit never decides what may run: that was decided before
//! the sandbox existed.
//!
//! It holds no unsafe code: its system calls go through std, nix, rustix and signal-hook.

#![forbid(unsafe_code)]

/// The address rules live in `proto`: brokerd checks `allow_addresses` with the same code.
pub use proto::addr;
pub mod bridge;
pub mod dns;
pub mod environment;
pub mod proxy;
pub mod tools;
