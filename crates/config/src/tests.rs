use std::path::PathBuf;
use std::time::Duration;

use super::*;

pub(crate) const IMAGE: &str =
    "localhost/boxmaker-tools@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

pub(super) fn runner(extra: &str) -> String {
    format!("[runner]\nimage = \"{IMAGE}\"\n{extra}\n")
}

#[test]
fn defaults_are_the_documented_ones() {
    let c = parse(&runner(""), "config.toml").expect("minimal config");
    assert_eq!(
        c.broker,
        BrokerConfig {
            clients: vec![Client::User("loopd".into())],
            audit_log: "/var/lib/boxmaker/audit.jsonl".into(),
            timeout_ms: 120_000,
            refusal_repeats: 5,
            preview_chars: 50_000,
            max_concurrent_calls: 4,
            ticket_ttl_s: 600,
            result_ttl_s: 600,
            shutdown_grace_s: 30,
            owners: vec![],
            max_staged_bytes: 1 << 30,
            staged_ttl_s: 0,
        }
    );
    assert_eq!(
        c.runner,
        Some(RunnerConfig {
            backend: Backend::Podman,
            podman: "podman".into(),
            image: IMAGE.into(),
            egress_network: EgressNetwork::Pasta,
            output_cap: 262_144,
            memory: "512m".into(),
            pids: 128,
            read_file_ms: 30_000,
            write_file_ms: 30_000,
            shell_ms: 100_000,
            http_fetch_ms: 60_000,
            enforce_limits: true,
            egress_start_ms: 5_000,
            home: "/var/lib/boxmaker".into(),
            egress_bounds: Bounds {
                connections: 64,
                bytes: 1 << 30,
            },
            protect: ProtectBounds {
                max_depth: 32,
                max_entries: 100_000,
                max_targets: 256,
            },
        })
    );
    assert_eq!(c.bwrap, None);
    assert!(c.grants.is_empty());
    // No [runner]: no runner, every call refused (docs/design.md#runner).
    assert_eq!(parse("", "c").expect("empty config").runner, None);
}

#[test]
fn a_full_config() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, b) = (dir.path().join("notes"), dir.path().join("ref"));
    std::fs::create_dir(&a).expect("mkdir");
    std::fs::create_dir(&b).expect("mkdir");
    let text = format!(
        r#"
[broker]
clients = ["loopd", 1001, "2002", "@agents"]
audit_log = "/var/log/boxmaker/audit.jsonl"
timeout_ms = 200000
refusal_repeats = 3
preview_chars = 1000
max_concurrent_calls = 2
ticket_ttl_s = 60
result_ttl_s = 60
shutdown_grace_s = 0

[runner]
backend = "bwrap"
podman = "/run/current-system/sw/bin/podman"
image = "sha256:{hex}"
egress_network = "slirp4netns"
output_cap = 1024
memory = "1g"
pids = 64
read_file_ms = 1000
write_file_ms = 2000
shell_ms = 150000
http_fetch_ms = 90000
enforce_limits = false
egress_start_ms = 3000
egress_connections = 16
egress_bytes = 1048576
home = "/home/boxmaker/"

[bwrap]
tools_root = "/opt/tools-root"
cgroup = "systemd-scope"

[grants.notes]
mode = "auto"
tools = ["read_file", "write_file", "shell", "http_fetch"]
paths = [ {{ path = "{a}", write = true }}, {{ path = "{b}/" }} ]
hosts = ["docs.example.org", "*.example.net"]
shell_hosts = ["index.crates.io", "*.pypi.example"]
allow_addresses = ["192.168.1.0/24", "10.0.0.7", "2001:db8::/32"]

[grants."read.only-1"]
tools = ["read_file"]
"#,
        hex = "f".repeat(64),
        a = a.display(),
        b = b.display(),
    );
    let c = parse(&text, "full.toml").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.broker.clients,
        vec![
            Client::User("loopd".into()),
            Client::Uid(1001),
            Client::Uid(2002),
            Client::Group("agents".into())
        ]
    );
    assert_eq!(c.broker.shutdown_grace_s, 0);
    let r = c.runner.expect("runner");
    assert_eq!(r.backend, Backend::Bwrap);
    assert_eq!(r.egress_network, EgressNetwork::Slirp4netns);
    assert_eq!(r.home, PathBuf::from("/home/boxmaker"));
    assert_eq!(
        r.egress_bounds,
        Bounds {
            connections: 16,
            bytes: 1 << 20
        }
    );
    assert!(!r.enforce_limits);
    assert_eq!(
        r.time_limit(ToolName::Shell),
        Duration::from_millis(150_000)
    );
    assert_eq!(
        r.time_limit(ToolName::ReadFile),
        Duration::from_millis(1000)
    );
    assert_eq!(
        c.bwrap,
        Some(BwrapConfig {
            tools_root: "/opt/tools-root".into(),
            cgroup: CgroupMode::SystemdScope
        })
    );
    let g = &c.grants["notes"];
    assert_eq!(g.mode, Mode::Auto);
    assert_eq!(g.tools, ToolName::ALL.to_vec());
    assert_eq!(
        g.paths,
        vec![
            GrantPath {
                path: a.clone(),
                write: true
            },
            GrantPath {
                path: b.clone(),
                write: false
            }
        ]
    );
    assert_eq!(g.hosts, vec!["docs.example.org", "*.example.net"]);
    assert_eq!(g.shell_hosts, vec!["index.crates.io", "*.pypi.example"]);
    assert!(c.grants["read.only-1"].shell_hosts.is_empty());
    let cidrs: Vec<String> = g.allow_addresses.iter().map(|c| c.to_string()).collect();
    assert_eq!(
        cidrs,
        vec!["192.168.1.0/24", "10.0.0.7/32", "2001:db8::/32"]
    );
    assert_eq!(c.grants["read.only-1"].mode, Mode::Safe);
}

#[test]
fn load_names_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("brokerd.toml");
    std::fs::write(&path, "[runner]\nimage = \"x:1\"\n").expect("write");
    let e = load(&path, &owners::tests::Fake::none())
        .expect_err("tag")
        .to_string();
    assert!(
        e.starts_with(&format!("{}:2:9: runner.image:", path.display())),
        "{e}"
    );
    let e = load(&dir.path().join("none.toml"), &owners::tests::Fake::none())
        .expect_err("missing")
        .to_string();
    assert!(e.contains("none.toml: cannot read the config:"), "{e}");
}
