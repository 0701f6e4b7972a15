//! Unsafe code stays in the crates of `MAY_HOLD_UNSAFE`: every other crate root of the
//! workspace has `#![forbid(unsafe_code)]`, so the compiler refuses an `unsafe` block anywhere
//! in it, its modules and unit tests included, and no `allow` inside can lift that. A crate
//! root is what cargo compiles as one crate: a member's library, each binary, integration test,
//! bench and example, and its build script, found as cargo finds them (the manifest's `path`s
//! and `build`, then the usual places unless `autobins`, `autotests`, `autobenches` or
//! `autoexamples` turn them off).

use std::path::{Path, PathBuf};

use crate::repository;

/// The workspace members whose crate roots may hold unsafe code, each with why. Every other
/// member forbids it.
const MAY_HOLD_UNSAFE: [(&str, &str); 1] = [(
    "crates/sandbox",
    "the sandboxes themselves: namespaces, mounts by descriptor, seccomp, pidfds, cgroups \
         and the reaper, and the system calls of brokerd's own no safe library wraps \
         (getpwent, the socket systemd passes); the one crate meant to hold unsafe code",
)];

/// The attribute each other crate root has, on a line of its own.
const FORBID: &str = "#![forbid(unsafe_code)]";

/// The workspace's members, as the root manifest lists them.
fn members(root: &Path) -> Vec<String> {
    let manifest = manifest(&root.join("Cargo.toml"));
    let members = manifest
        .get("workspace")
        .and_then(|w| w.get("members"))
        .and_then(|m| m.as_array())
        .expect("the root manifest lists the workspace's members");
    members
        .iter()
        .map(|m| m.as_str().expect("a member is a path").to_string())
        .collect()
}

fn manifest(path: &Path) -> toml::Table {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.parse()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The crate roots of the member at `dir`.
fn crate_roots(dir: &Path) -> Vec<PathBuf> {
    let manifest = manifest(&dir.join("Cargo.toml"));
    let package = manifest.get("package").and_then(|p| p.as_table());
    let auto = |key: &str| {
        package
            .and_then(|p| p.get(key))
            .and_then(|v| v.as_bool())
            .unwrap_or(true)
    };
    let mut roots: Vec<PathBuf> = Vec::new();
    // The targets the manifest names.
    if let Some(path) = manifest
        .get("lib")
        .and_then(|l| l.get("path"))
        .and_then(|p| p.as_str())
    {
        roots.push(dir.join(path));
    }
    for kind in ["bin", "test", "bench", "example"] {
        for target in manifest
            .get(kind)
            .and_then(|t| t.as_array())
            .into_iter()
            .flatten()
        {
            if let Some(path) = target.get("path").and_then(|p| p.as_str()) {
                roots.push(dir.join(path));
            }
        }
    }
    match package.and_then(|p| p.get("build")) {
        Some(toml::Value::String(build)) => roots.push(dir.join(build)),
        Some(toml::Value::Boolean(false)) => {}
        _ => roots.push(dir.join("build.rs")),
    }
    // The places cargo looks by itself.
    roots.push(dir.join("src/lib.rs"));
    roots.push(dir.join("src/main.rs"));
    for (found, place) in [
        ("autobins", "src/bin"),
        ("autotests", "tests"),
        ("autobenches", "benches"),
        ("autoexamples", "examples"),
    ] {
        if auto(found) {
            roots.extend(discovered(&dir.join(place)));
        }
    }
    roots.retain(|p| p.is_file());
    roots.sort();
    roots.dedup();
    roots
}

/// The targets cargo finds in `dir` (`tests/`, `benches/`...): each `NAME.rs`, and each
/// `NAME/main.rs`.
fn discovered(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.push(path.join("main.rs"));
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
    found
}

/// Whether the Rust source `text` has the attribute on a line of its own.
fn forbids_unsafe(text: &str) -> bool {
    text.lines().any(|line| line.trim() == FORBID)
}

#[test]
fn every_crate_root_but_the_sandbox_crate_s_forbids_unsafe_code() {
    let Some(root) = repository("Cargo.toml") else {
        return;
    };
    let members = members(&root);
    for (exempt, _) in MAY_HOLD_UNSAFE {
        assert!(
            members.iter().any(|m| m == exempt),
            "MAY_HOLD_UNSAFE names {exempt}, which is no member of the workspace"
        );
    }
    let mut checked = 0;
    let mut missing = Vec::new();
    for member in &members {
        if MAY_HOLD_UNSAFE.iter().any(|(exempt, _)| exempt == member) {
            continue;
        }
        let roots = crate_roots(&root.join(member));
        assert!(!roots.is_empty(), "{member}: no crate root found");
        for path in roots {
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            checked += 1;
            if !forbids_unsafe(&text) {
                let rel = path.strip_prefix(&root).unwrap_or(&path);
                missing.push(rel.display().to_string());
            }
        }
    }
    assert!(
        checked >= members.len(),
        "the walk found the crate roots: {checked}"
    );
    assert!(
        missing.is_empty(),
        "crate roots without {FORBID} (unsafe code belongs in {}):\n{}",
        MAY_HOLD_UNSAFE.map(|(m, _)| m).join(", "),
        missing.join("\n")
    );
}

#[test]
fn crate_roots_are_found_as_cargo_finds_them() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    for file in [
        "src/lib.rs",
        "src/main.rs",
        "src/bin/one.rs",
        "src/bin/two/main.rs",
        "src/bin/two/part.rs",
        "src/module.rs",
        "tests/it.rs",
        "tests/all/main.rs",
        "tests/all/part.rs",
        "tests/fixtures/data.args",
        "benches/b.rs",
        "tools/gen.rs",
        "custom/build.rs",
    ] {
        let path = dir.join(file);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        std::fs::write(&path, "").expect("write");
    }
    std::fs::write(
        dir.join("Cargo.toml"),
        "[package]\nname = \"x\"\nbuild = \"custom/build.rs\"\nautobenches = false\n\n\
         [[bin]]\nname = \"gen\"\npath = \"tools/gen.rs\"\n",
    )
    .expect("write");
    let found: Vec<String> = crate_roots(dir)
        .iter()
        .map(|p| p.strip_prefix(dir).expect("below").display().to_string())
        .collect();
    assert_eq!(
        found,
        [
            "custom/build.rs",
            "src/bin/one.rs",
            "src/bin/two/main.rs",
            "src/lib.rs",
            "src/main.rs",
            "tests/all/main.rs",
            "tests/it.rs",
            "tools/gen.rs",
        ]
    );
}

#[test]
fn the_attribute_is_told_from_its_mention() {
    assert!(forbids_unsafe(
        "//! doc\n\n#![forbid(unsafe_code)]\n\nuse x;\n"
    ));
    assert!(!forbids_unsafe("//! no `#![forbid(unsafe_code)]` here\n"));
    assert!(!forbids_unsafe("#![deny(unsafe_code)]\n"));
}
