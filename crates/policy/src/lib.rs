//! What brokerd decides before anything runs, as pure code (docs/design.md#life-of-a-call):
//! `args` parses a call's arguments, `mode` and `classify` say what a command is and what the
//! grant's mode does with it, `glob` and `workspace` resolve paths inside the grant
//! directories (`dirs` reads a directory's identity without following a link), `protect`
//! finds the protected targets, and `grant` holds the grant settings they read. `redact` keeps
//! secrets out of what a person reads of a call (the audit log, the journal). It links no async
//! runtime and holds no unsafe code: the sandboxes are the `boxmaker-sandbox` crate's.

#![forbid(unsafe_code)]

pub mod args;
pub mod classify;
pub mod dirs;
pub mod glob;
pub mod grant;
pub mod mode;
pub mod protect;
pub mod redact;
pub mod view;
pub mod workspace;
