//! brokerd: checks each tool call against the owner's grant, runs it in a fresh sandbox and
//! answers with the output labelled by its grant. See docs/design.md#life-of-a-call.
//!
//! One module answers one question: `args` parses, `policy` decides (with `mode`,
//! `classify`, `workspace` and `protect`), `runner` runs, `audit` records (`redact` keeps secrets
//! out of it), `broker` walks a call through all of them, `server` speaks the protocol on the
//! socket, `visible` shows the model's text to a person.

pub mod args;
pub mod audit;
pub mod broker;
pub mod classify;
pub mod config;
pub mod dirs;
pub mod glob;
pub mod local;
pub mod mode;
pub mod policy;
pub mod preflight;
pub mod preview;
pub mod privileges;
pub mod probe;
pub mod protect;
pub mod redact;
pub mod refusals;
pub mod runbook;
pub mod runner;
pub mod server;
pub mod stage;
pub mod tickets;
pub mod view;
pub mod visible;
pub mod workspace;
