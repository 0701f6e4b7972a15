//! brokerd: checks each tool call against the owner's grant, runs it in a fresh sandbox and
//! answers with the output labelled by its grant. See DESIGN.md "Life of a call".

pub mod args;
pub mod audit;
pub mod classify;
pub mod config;
pub mod mode;
pub mod preview;
pub mod protect;
pub mod refusals;
pub mod runner;
pub mod workspace;
