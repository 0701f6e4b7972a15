//! The podman argument lists of docs/design.md#the-tool-container and
//! docs/design.md#http_fetch-and-its-egress-proxy, byte for byte against the golden files in
//! `tests/fixtures/podman/` (one argument a line). The files were written from the design, not
//! from the code: a change here is a change of the sandbox, and of the design first.

// A test: a setup step that fails is the test failing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use brokerd::config;
use brokerd::runner::podman::PodmanRuntime;
use brokerd::runner::protected::Over;
use brokerd::runner::{DirId, Egress, Mount, RunSpec};
use proto::tools::ToolName;

const IMAGE: &str = "localhost/boxmaker-tools@sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
/// A fixed name, so the files do not depend on the per-process counter.
const NAME: &str = "boxmaker-s1-c1-7";

fn runtime() -> PodmanRuntime {
    let text = format!("[runner]\nimage = \"{IMAGE}\"\nhome = \"/var/lib/boxmaker\"\n");
    let cfg = config::parse(&text, "golden.toml").expect("config");
    PodmanRuntime::new(&cfg.runner.expect("runner"))
}

fn mount(path: &str, write: bool) -> Mount {
    // The argument list names paths; which directory they are is checked at run time.
    Mount {
        path: PathBuf::from(path),
        write,
        id: DirId { dev: 0, ino: 0 },
        protect: false,
        stage: None,
    }
}

fn spec(tool: ToolName, mounts: Vec<Mount>, egress: Option<Egress>) -> RunSpec {
    RunSpec {
        session: proto::ident::Ident::fixed("s1"),
        call: proto::ident::Ident::fixed("c1"),
        tool,
        input: b"{}".to_vec(),
        mounts,
        egress,
        timeout: Duration::from_secs(30),
    }
}

fn egress() -> Egress {
    Egress {
        hosts: vec!["docs.example.org".into(), "*.example.net".into()],
        allow_addresses: vec![
            "192.0.2.0/24".parse().unwrap(),
            "2001:db8::/32".parse().unwrap(),
        ],
    }
}

fn assert_golden(file: &str, args: &[OsString]) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/podman")
        .join(file);
    let want = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut got = Vec::new();
    for a in args {
        got.extend_from_slice(a.as_bytes());
        got.push(b'\n');
    }
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(&want),
        "{file}"
    );
    assert_eq!(got, want, "{file}: bytes differ");
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

#[test]
fn egress_argument_list() {
    assert_golden("egress.args", &runtime().egress_args(&egress(), NAME));
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
        (rt.tool_args(&spec(ToolName::Shell, vec![], None), NAME), "tool"),
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
    let spec = spec(
        ToolName::Shell,
        vec![mount("/srv/notes", true), mount("/srv/ref", false)],
        None,
    );
    let protected = [
        Over::pin(Path::new("/srv/notes/src")),
        Over::read_only(Path::new("/srv/notes/vendor")),
        Over::read_only(Path::new("/srv/notes/src/gen.rs")),
    ];
    assert_golden(
        "shell-protected.args",
        &rt.tool_args_with(&spec, NAME, &protected),
    );
}
