//! The repository's own lints: rules about its files as a whole rather than about one crate's
//! code. `cargo test --workspace` (`make check`, `make test`) runs them; nothing links this
//! crate, and built as a library it is empty.
//!
//! - `lengths`: no source file is longer than 1,000 lines.
//! - `runbook`: every runbook anchor the code, scripts and documents send an operator to is one
//!   of proto's (`crates/proto/src/runbook.rs`, which brokerd re-exports) and exists in
//!   `runbook/`.
//! - `design`: every `docs/design.md#...` is a heading of docs/design.md, and nothing cites a
//!   document the repository does not hold.
//! - `unsafe_code`: every crate root of the workspace (library, binaries, tests, benches,
//!   examples, build script) has `#![forbid(unsafe_code)]`, but those of the members its
//!   `MAY_HOLD_UNSAFE` names (brokerd, which runs the sandboxes, and the e2e suite).
//!
//! Each reads the repository's files from its root. The Nix package's check phase builds from
//! the crates alone (nixos/pkgs/boxmaker.nix): there each lint prints why it skipped; under
//! `CI` a missing repository is a failure instead.

#![cfg(test)]
#![forbid(unsafe_code)]

mod design;
mod lengths;
mod runbook;
mod unsafe_code;

use std::path::{Path, PathBuf};

/// The repository's root, or `None` (after saying so) where `needed` (a directory or a file of
/// the root) is not beside the crates: the Nix package's source set holds only what cargo reads.
fn repository(needed: &str) -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let root = root.canonicalize().unwrap_or(root);
    if root.join(needed).exists() {
        return Some(root);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "no {needed} beside the crates under CI"
    );
    eprintln!("SKIPPED: no {needed} beside the crates (a build of the crates alone)");
    None
}

/// The text files under `tops` (directories and files of the repository's root), each with
/// its path from the root; build output (`target`) and golden files (`fixtures`) left out.
fn texts(root: &Path, tops: &[&str]) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut stack: Vec<PathBuf> = tops.iter().map(|p| root.join(p)).collect();
    while let Some(p) = stack.pop() {
        if p.is_dir() {
            if p.ends_with("target") || p.ends_with("fixtures") {
                continue;
            }
            for e in std::fs::read_dir(&p).into_iter().flatten().flatten() {
                stack.push(e.path());
            }
            continue;
        }
        if let Ok(text) = std::fs::read_to_string(&p) {
            let rel = p.strip_prefix(root).unwrap_or(&p);
            found.push((rel.display().to_string(), text));
        }
    }
    found
}
