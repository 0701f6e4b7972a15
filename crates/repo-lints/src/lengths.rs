//! No source file is longer than `MAX_LINES` lines: a file past it is split along its seams,
//! each part a module of its own (CONTRIBUTING.md).
//!
//! A source file is one git tracks, or would track (not ignored), that is Rust, Python, shell,
//! Nix or jq, the Makefile, or a script with a `#!` line. Left out, as data or prose rather
//! than source: the lock files (Cargo.lock, flake.lock), TOML (the manifests, and tables such
//! as the classifier's adversarial.toml), Markdown, JSON, the golden argument lists (`.args`),
//! the systemd units and other text.

use std::path::Path;
use std::process::Command;

use crate::repository;

/// The longest a source file may be.
const MAX_LINES: usize = 1000;

/// The extensions of source files.
const SOURCE_EXTENSIONS: [&str; 5] = ["rs", "py", "sh", "nix", "jq"];

/// Whether the file at `path` (from the root), which starts with `head`, is source.
fn is_source(path: &str, head: &[u8]) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    let extension = name.rsplit_once('.').map(|(_, e)| e);
    extension.is_some_and(|e| SOURCE_EXTENSIONS.contains(&e))
        || name == "Makefile"
        || (extension.is_none() && head.starts_with(b"#!"))
}

/// The lines of `bytes`, as `wc -l` counts them but with a last line that has no newline.
fn line_count(bytes: &[u8]) -> usize {
    let newlines = bytes.iter().filter(|b| **b == b'\n').count();
    newlines + usize::from(bytes.last().is_some_and(|b| *b != b'\n'))
}

/// The files under `root` that git tracks or would track, from the root; `None` (after saying
/// why) where `root` is not the top of a git work tree or git cannot be run.
fn git_files(root: &Path) -> Option<Vec<String>> {
    let git = |args: &[&str]| {
        Command::new("git")
            .arg("-C")
            .arg(root)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
    };
    let top = git(&["rev-parse", "--show-toplevel"])?;
    let top = String::from_utf8_lossy(&top.stdout).trim_end().to_string();
    if Path::new(&top).canonicalize().ok()? != root.canonicalize().ok()? {
        return None;
    }
    let out = git(&[
        "ls-files",
        "-z",
        "--cached",
        "--others",
        "--exclude-standard",
    ])?;
    Some(
        out.stdout
            .split(|b| *b == 0)
            .filter(|p| !p.is_empty())
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect(),
    )
}

#[test]
fn no_source_file_is_longer_than_the_limit() {
    let Some(root) = repository("Cargo.toml") else {
        return;
    };
    let Some(files) = git_files(&root) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "git cannot list the repository's files under CI"
        );
        eprintln!(
            "SKIPPED: {} is not a git work tree, or git is missing (a build of the crates alone)",
            root.display()
        );
        return;
    };
    let mut sources = 0;
    let mut long = Vec::new();
    for path in &files {
        // Listed but deleted in the work tree: nothing to read.
        let Ok(bytes) = std::fs::read(root.join(path)) else {
            continue;
        };
        if !is_source(path, &bytes) {
            continue;
        }
        sources += 1;
        let lines = line_count(&bytes);
        if lines > MAX_LINES {
            long.push(format!("{path}: {lines} lines"));
        }
    }
    assert!(sources > 100, "the walk found the source files: {sources}");
    assert!(
        long.is_empty(),
        "source files longer than {MAX_LINES} lines; split each along its seams:\n{}",
        long.join("\n")
    );
}

#[test]
fn sources_are_told_from_data() {
    for (path, head, source) in [
        ("crates/x/src/lib.rs", &b""[..], true),
        ("nixos/checks/check.py", b"", true),
        ("nixos/module.nix", b"", true),
        ("scripts/setup.sh", b"", true),
        ("scripts/seccomp-nouserns.jq", b"", true),
        ("Makefile", b"", true),
        ("scripts/as-boxmaker", b"#!/usr/bin/env bash\n", true),
        (".ci/run", b"#!/usr/bin/env bash\n", true),
        ("Cargo.lock", b"# This file is automatically", false),
        ("flake.lock", b"{", false),
        (
            "crates/policy/src/classify/adversarial.toml",
            b"[[case]]",
            false,
        ),
        ("docs/design.md", b"#!", false),
        (
            "crates/brokerd/tests/fixtures/podman/shell.args",
            b"run",
            false,
        ),
        ("dist/systemd/boxmaker.service", b"[Unit]", false),
        ("README", b"boxmaker", false),
    ] {
        assert_eq!(is_source(path, head), source, "{path}");
    }
    assert_eq!(line_count(b""), 0);
    assert_eq!(line_count(b"a\nb\n"), 2);
    assert_eq!(line_count(b"a\nb"), 2);
}
