//! What two boxmaker programs must agree on, defined once (docs/design.md#layout).
//!
//! - [`tools`]: the argument structs of the four tools. brokerd parses the model's arguments
//!   with them and writes them to the sandbox's standard input; toolkit reads them back.
//! - [`addr`]: which addresses http_fetch may reach. brokerd checks a grant's
//!   `allow_addresses` with it; the egress proxy checks every address it dials.
//! - [`egress`]: the egress proxy's command line. brokerd writes it; toolkit parses it.
//! - `cli` (with the `cli` feature): what boxctl's and brokerd's command lines share, the
//!   local commands boxctl forwards to brokerd among them, and the exit code of bad usage.
//! - [`line`]: the protocol's line framing, with its limit. brokerd reads requests and boxctl
//!   reads answers with it.
//! - [`ident`]: session, call and grant names, which become container and directory names.
//! - [`hosts`]: host names and host patterns. brokerd checks grants and URLs with them; the
//!   egress proxy checks every connection with the same functions.
//! - [`visible`]: the model's text as a person may see it (escapes for what would hide or
//!   rearrange it). brokerd shows questions, reasons and the audit log with it; clients show
//!   staged paths and diffs.
//! - [`sentences`]: the fixed sentences of brokerd's answers (a call's failure, a changed
//!   grant directory, a host not granted). brokerd answers with them; the end-to-end suite
//!   compares its answers with them.
//! - [`runbook`]: the runbook's anchors. brokerd's log and `doctor` send the operator there;
//!   the end-to-end suite looks for them in the log.
//! - [`podman`]: the label of brokerd's containers. brokerd sets it and finds its leftovers
//!   by it; the end-to-end suite finds what a scenario left by it.
//!
//! No I/O and no async runtime live here.

#![forbid(unsafe_code)]

pub mod addr;
pub mod broker;
#[cfg(feature = "cli")]
pub mod cli;
pub mod egress;
pub mod hosts;
pub mod ident;
pub mod line;
pub mod podman;
pub mod runbook;
pub mod sentences;
pub mod tools;
pub mod visible;
