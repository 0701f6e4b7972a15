//! The egress proxy (seed 003 section 5). Being written: the entry point exists so the binary
//! builds.

use std::process::ExitCode;

/// `toolkit egress-proxy ...` (not yet implemented: exits 2).
pub fn main(_args: &[String]) -> ExitCode {
    eprintln!("toolkit egress-proxy: not implemented yet");
    ExitCode::from(2)
}
