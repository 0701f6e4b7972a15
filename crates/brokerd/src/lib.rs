//! brokerd: checks each tool call against the owner's grant, runs it in a fresh sandbox and
//! answers with the output labelled by its grant. See docs/design.md#life-of-a-call.
//!
//! One module answers one question: `args` parses, `policy` decides (with `mode`,
//! `classify`, `workspace` and `protect`), `runner` runs, `audit` records (`redact` keeps secrets
//! out of it), `broker` walks a call through all of them, `server` speaks the protocol on the
//! socket, `visible` shows the model's text to a person. The decision's pure parts are the
//! `boxmaker-policy` crate, the configuration `boxmaker-config`, a staged grant's layers
//! `boxmaker-staging`, and the sandboxes (with all of the workspace's unsafe code)
//! `boxmaker-sandbox`; none of them can name anything here, and they are re-exported under the
//! paths they had. This crate holds no unsafe code.

#![forbid(unsafe_code)]

pub use boxmaker_policy::{args, classify, dirs, glob, mode, protect, redact, view, workspace};
pub use boxmaker_sandbox::{runner, sys};
pub use boxmaker_staging::stage;

pub mod audit;
pub mod broker;
pub mod config;
pub mod local;
pub mod policy;
pub mod preflight;
pub mod preview;
pub mod privileges;
pub mod probe;
pub mod refusals;
pub mod runbook;
pub mod server;
pub mod tickets;
pub mod visible;
