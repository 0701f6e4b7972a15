//! The podman argument lists of docs/design.md#the-tool-container and
//! docs/design.md#http_fetch-and-its-egress-proxy, byte for byte against the golden files in
//! `tests/fixtures/podman/` (one argument a line). The files were written from the design, not
//! from the code: a change here is a change of the sandbox, and of the design first.

// A test: a setup step that fails is the test failing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsString;

use brokerd::config;
use brokerd::runner::podman::PodmanRuntime;
use brokerd::runner::Egress;
use proto::egress::Bounds;
use proto::tools::ToolName;

use crate::common::{self, egress, mount, spec};

/// A fixed name, so the files do not depend on the per-process counter.
const NAME: &str = "boxmaker-s1-c1-7";

fn runtime() -> PodmanRuntime {
    let text = format!(
        "[runner]\nimage = \"{}\"\nhome = \"/var/lib/boxmaker\"\n",
        common::image("boxmaker-tools")
    );
    let cfg = config::parse(&text, "golden.toml").expect("config");
    PodmanRuntime::new(&cfg.runner.expect("runner"))
}

fn assert_golden(file: &str, args: &[OsString]) {
    common::assert_golden("podman", file, args);
}

#[test]
fn tool_argument_lists() {
    let rt = runtime();
    let notes_ro = || vec![mount("/srv/notes", false), mount("/srv/ref", false)];
    let notes_rw = || vec![mount("/srv/notes", true), mount("/srv/ref", false)];
    let cases = [
        ("read_file.args", spec(ToolName::ReadFile, notes_ro(), None)),
        (
            "write_file.args",
            spec(ToolName::WriteFile, notes_rw(), None),
        ),
        ("shell.args", spec(ToolName::Shell, notes_rw(), None)),
        // A shell call of a grant with shell_hosts: its proxy's directory, as http_fetch's.
        (
            "shell-egress.args",
            spec(ToolName::Shell, notes_rw(), Some(egress())),
        ),
        (
            "http_fetch.args",
            spec(
                ToolName::HttpFetch,
                vec![mount("/srv/ref", false)],
                Some(egress()),
            ),
        ),
    ];
    for (file, spec) in cases {
        assert_golden(file, &rt.tool_args(&spec, NAME));
    }
}

/// A grant's toolset changes the image, and nothing else, of `shell.args`
/// (docs/design.md#toolsets).
#[test]
fn a_toolset_runs_its_own_image() {
    assert_golden(
        "shell-toolset.args",
        &runtime().tool_args(&common::toolset_call(), NAME),
    );
}

/// A grant's cache is one more volume, over the sandbox's /tmp, and nothing else
/// (docs/design.md#grant-caches).
#[test]
fn a_grant_s_cache_is_its_own_volume() {
    assert_golden(
        "shell-cache.args",
        &runtime().tool_args(&common::cache_call(), NAME),
    );
}

/// A grant's own pids and memory replace `[runner]`'s in `shell.args`, and nothing else
/// (docs/design.md#grantsname).
#[test]
fn a_grant_s_own_limits() {
    let mut spec = spec(
        ToolName::Shell,
        vec![mount("/srv/notes", true), mount("/srv/ref", false)],
        None,
    );
    spec.limits.pids = Some(64);
    spec.limits.memory = Some("256m".into());
    assert_golden("shell-limits.args", &runtime().tool_args(&spec, NAME));
}

#[test]
fn egress_argument_list() {
    assert_golden("egress.args", &runtime().egress_args(&egress(), NAME));
}

/// A shell call's proxy: its bounds, and its report's directory, which only it mounts
/// (docs/design.md#shell-and-its-egress-proxy).
#[test]
fn shell_egress_argument_list() {
    let bounded = Egress {
        bounds: Some(Bounds {
            connections: 64,
            bytes: 1 << 30,
        }),
        ..egress()
    };
    assert_golden("egress-shell.args", &runtime().egress_args(&bounded, NAME));
}

/// Every container brokerd starts carries the label that the sweep, `brokerd ps` and the e2e
/// suite filter on (`podman ps --filter label=boxmaker` lists both kinds).
#[test]
fn every_container_carries_the_label_the_sweep_filters_on() {
    let rt = runtime();
    let key = brokerd::runner::podman::LABEL_FILTER
        .strip_prefix("label=")
        .expect("a label filter");
    let egress_spec = spec(ToolName::HttpFetch, vec![], Some(egress()));
    for (args, value) in [
        (
            rt.tool_args(&spec(ToolName::Shell, vec![], None), NAME),
            "tool",
        ),
        (rt.egress_args(&egress(), NAME), "egress"),
        (rt.tool_args(&egress_spec, NAME), "tool"),
    ] {
        let want = OsString::from(format!("--label={key}={value}"));
        assert!(args.contains(&want), "{want:?} not in {args:?}");
    }
}

#[test]
fn egress_without_allow_addresses_has_no_allow_address_flag() {
    let only_hosts = Egress {
        hosts: vec!["docs.example.org".into()],
        allow_addresses: vec![],
        bounds: None,
    };
    let args = runtime().egress_args(&only_hosts, NAME);
    let tail: Vec<&str> = args[args.len() - 2..]
        .iter()
        .map(|a| a.to_str().unwrap_or("?"))
        .collect();
    assert_eq!(tail, ["--allow", "docs.example.org"]);
}

#[test]
fn names_count_calls_in_this_process() {
    let s = spec(ToolName::Shell, vec![], None);
    let a = PodmanRuntime::container_name(&s);
    let b = PodmanRuntime::container_name(&s);
    let n = |name: &str| -> u64 {
        let n = name.strip_prefix("boxmaker-s1-c1-").expect("prefix");
        n.parse().expect("a number")
    };
    assert!(n(&b) > n(&a), "{a} then {b}");
}

/// A writable grant directory's protected targets, each bound read-only over it after every
/// grant directory's volume, and the directories between them and the grant directory as
/// writable volumes onto themselves (docs/design.md#protected-targets).
#[test]
fn protected_targets_follow_the_volumes() {
    let rt = runtime();
    let (spec, protected) = common::protected_call();
    assert_golden(
        "shell-protected.args",
        &rt.tool_args_with(&spec, NAME, &protected),
    );
}
