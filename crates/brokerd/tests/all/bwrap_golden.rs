//! The bwrap argument lists (docs/design.md#runners, docs/design.md#the-bwrap-runner), byte for
//! byte against the golden files in `tests/fixtures/bwrap/` (one argument a line). A change here is
//! a change of the sandbox: review the file's diff flag by flag.
//!
//! Set `BLESS=1` to rewrite the files from the code (then read the diff before committing).

// A test: a setup step that fails is the test failing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsString;
use std::path::Path;

use brokerd::config;
use brokerd::runner::bwrap::{BwrapRuntime, RootEntry, RootLayout};
use brokerd::runner::Egress;
use proto::egress::Bounds;
use proto::tools::ToolName;

use crate::common::{self, egress, mount, spec};

/// A fixed name, so the files do not depend on the per-process counter.
const NAME: &str = "boxmaker-s1-c1-7";
const CGROUP: &str = "/sys/fs/cgroup/system.slice/boxmaker.service/sandbox-boxmaker-s1-c1-7";

/// The layout of images/build-tools-image.sh's tree (its mount points left out), plus a
/// top-level symlink as a Nix image has them.
fn layout() -> RootLayout {
    RootLayout(vec![
        RootEntry::Bound("bin".into()),
        RootEntry::Bound("etc".into()),
        RootEntry::Bound("lib".into()),
        RootEntry::Symlink("lib64".into(), "usr/lib64".into()),
        RootEntry::Bound("usr".into()),
    ])
}

fn runtime() -> BwrapRuntime {
    let text = "[runner]\nbackend = \"bwrap\"\nhome = \"/var/lib/boxmaker\"\n\n[bwrap]\ntools_root = \"/var/lib/boxmaker/tools-root\"\n";
    let cfg = config::parse(text, "golden.toml").expect("config");
    BwrapRuntime::new(
        cfg.runner.as_ref().expect("runner"),
        cfg.bwrap.as_ref().expect("bwrap"),
    )
    .with_layout(layout())
}

/// With `BLESS` set, the file is written from `args` first.
fn assert_golden(file: &str, args: &[OsString]) {
    if std::env::var_os("BLESS").is_some() {
        let path = common::golden_path("bwrap", file);
        std::fs::write(&path, common::golden_lines(args))
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
    common::assert_golden("bwrap", file, args);
}

#[test]
fn tool_argument_lists() {
    let rt = runtime();
    let l = layout();
    let notes_ro = || vec![mount("/srv/notes", false), mount("/srv/ref", false)];
    let notes_rw = || vec![mount("/srv/notes", true), mount("/srv/ref", false)];
    let cases = [
        (
            "read_file.args",
            spec(ToolName::ReadFile, notes_ro(), None),
            None,
        ),
        (
            "write_file.args",
            spec(ToolName::WriteFile, notes_rw(), None),
            None,
        ),
        ("shell.args", spec(ToolName::Shell, notes_rw(), None), None),
        // A shell call of a grant with shell_hosts: its proxy's directory, as http_fetch's.
        (
            "shell-egress.args",
            spec(ToolName::Shell, notes_rw(), Some(egress())),
            None,
        ),
        (
            "http_fetch.args",
            spec(ToolName::HttpFetch, Vec::new(), Some(egress())),
            None,
        ),
        // A read-only child listed before its writable parent is still bound after it, so
        // the parent does not cover it; each descriptor keeps its number in grant order.
        (
            "shell-nested.args",
            spec(
                ToolName::Shell,
                vec![mount("/srv/p/ro", false), mount("/srv/p", true)],
                None,
            ),
            None,
        ),
        (
            "shell-cgroup.args",
            spec(ToolName::Shell, notes_ro(), None),
            Some(Path::new(CGROUP)),
        ),
    ];
    for (file, spec, cgroup) in cases {
        assert_golden(file, &rt.build_argv(&spec, NAME, &l, cgroup));
    }
}

/// A grant's toolset binds its tree's entries where the tools root's were, and changes
/// nothing else of `shell.args` (docs/design.md#toolsets).
#[test]
fn a_toolset_runs_on_its_own_tree() {
    let rt = runtime();
    assert_golden(
        "shell-toolset.args",
        &rt.build_argv(&common::toolset_call(), NAME, &layout(), None),
    );
}

/// A grant's cache is one more bind, over the sandbox's /tmp, and nothing else
/// (docs/design.md#grant-caches).
#[test]
fn a_grant_s_cache_is_its_own_bind() {
    let rt = runtime();
    assert_golden(
        "shell-cache.args",
        &rt.build_argv(&common::cache_call(), NAME, &layout(), None),
    );
}

#[test]
fn egress_proxy_argument_list() {
    let rt = runtime();
    let l = layout();
    assert_golden("egress.args", &rt.proxy_argv(&egress(), NAME, &l, None));
}

/// A shell call's proxy: its bounds, and its report's directory, which only it binds
/// (docs/design.md#shell-and-its-egress-proxy).
#[test]
fn shell_egress_proxy_argument_list() {
    let rt = runtime();
    let l = layout();
    let bounded = Egress {
        bounds: Some(Bounds {
            connections: 64,
            bytes: 1 << 30,
        }),
        ..egress()
    };
    assert_golden(
        "egress-shell.args",
        &rt.proxy_argv(&bounded, NAME, &l, None),
    );
}

#[test]
fn any_path_survives_as_one_argument() {
    let rt = runtime();
    let l = layout();
    let odd = "/srv/a b/\u{e9}t\u{e9} -- --bind";
    let args = rt.build_argv(
        &spec(ToolName::ReadFile, vec![mount(odd, false)], None),
        NAME,
        &l,
        None,
    );
    let at = args
        .iter()
        .position(|a| a == odd)
        .expect("the path is one argument");
    assert_eq!(args[at - 1], "10");
    assert_eq!(args[at - 2], "--ro-bind-fd");
    assert_eq!(
        args.iter().filter(|a| *a == odd).count(),
        1,
        "only the destination"
    );
}

/// A writable grant directory's protected targets, each bound read-only from the descriptor
/// the walk opened, numbered after the grant directories', and the directories between them
/// and the grant directory bound writable onto themselves before them
/// (docs/design.md#protected-targets).
#[test]
fn protected_targets_follow_the_mounts() {
    let rt = runtime();
    let l = layout();
    let (spec, protected) = common::protected_call();
    assert_golden(
        "shell-protected.args",
        &rt.build_argv_with(&spec, NAME, &l, None, &protected),
    );
}
