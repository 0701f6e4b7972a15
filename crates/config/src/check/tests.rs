use super::super::tests::runner;
use super::*;

#[test]
fn bad_configs_say_where_and_what() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().display().to_string();
    let file = dir.path().join("file");
    std::fs::write(&file, "x").expect("write");
    let f = file.display().to_string();
    let colon = dir.path().join("a:b");
    std::fs::create_dir(&colon).expect("mkdir");
    let colon = colon.display().to_string();
    let grant = |body: &str| format!("[grants.g]\ntools = [\"read_file\"]\n{body}\n");
    // (config text, the whole expected error)
    let cases: Vec<(String, String)> = vec![
        (
            "[runner]\nimage = \"boxmaker-tools:latest\"\n".into(),
            "c.toml:2:9: runner.image: \"boxmaker-tools:latest\" is a tag; pin the image by content (sha256:<64 hex> or name@sha256:<64 hex>)".into(),
        ),
        (
            format!("[runner]\nimage = \"x@sha256:{}\"\n", "A".repeat(64)),
            format!("c.toml:2:9: runner.image: \"x@sha256:{}\" is not pinned by content; use sha256:<64 lowercase hex> or name@sha256:<64 lowercase hex>", "A".repeat(64)),
        ),
        (
            format!("[runner]\nimage = \"sha256:{}\"\n", "a".repeat(63)),
            format!("c.toml:2:9: runner.image: \"sha256:{}\" is not pinned by content; use sha256:<64 lowercase hex> or name@sha256:<64 lowercase hex>", "a".repeat(63)),
        ),
        (
            "[runner]\npids = 4\n".into(),
            "c.toml:1:1: runner.image: is required with backend = \"podman\": the tools image pinned by content (sha256:<64 hex> or name@sha256:<64 hex>)".into(),
        ),
        (
            runner("shell_ms = 120000"),
            "c.toml:3:12: runner.shell_ms: 120000 ms is not under broker.timeout_ms (120000 ms): loopd stops waiting then; to give a tool longer, raise both".into(),
        ),
        // The limit is under the timeout, but not with the kill and rm after it.
        (
            runner("shell_ms = 110000"),
            "c.toml:3:12: runner.shell_ms: 110000 ms, with what stopping and removing the sandbox (and starting a proxy) may take, comes to 126000 ms, not under broker.timeout_ms (120000 ms): loopd would stop waiting before a call that ran out its time limit is answered; lower the limit or raise both".into(),
        ),
        (
            format!("[broker]\ntimeout_ms = 110000\n{}", runner("backend = \"bwrap\"\nhttp_fetch_ms = 100000")),
            "c.toml:6:17: runner.http_fetch_ms: 100000 ms, with what stopping and removing the sandbox (and starting a proxy) may take, comes to 113000 ms, not under broker.timeout_ms (110000 ms): loopd would stop waiting before a call that ran out its time limit is answered; lower the limit or raise both".into(),
        ),
        (
            format!("[broker]\ntimeout_ms = 50000\n{}", runner("")),
            "c.toml:2:14: runner.shell_ms: 100000 ms is not under broker.timeout_ms (50000 ms): loopd stops waiting then; to give a tool longer, raise both".into(),
        ),
        (
            runner("http_fetch_ms = 116000"),
            "c.toml:3:17: runner.http_fetch_ms: http_fetch_ms + egress_start_ms (121000 ms) is not under broker.timeout_ms (120000 ms): loopd waits for the proxy's start too".into(),
        ),
        (runner("read_file_ms = 0"), "c.toml:3:16: runner.read_file_ms: must be greater than 0".into()),
        (runner("pids = 0"), "c.toml:3:8: runner.pids: must be greater than 0".into()),
        (runner("egress_connections = 0"), "c.toml:3:22: runner.egress_connections: must be greater than 0".into()),
        (runner("egress_bytes = 0"), "c.toml:3:16: runner.egress_bytes: must be greater than 0".into()),
        (runner("output_cap = 0"), "c.toml:3:14: runner.output_cap: must be greater than 0".into()),
        (
            runner("memory = \"512 MB\""),
            "c.toml:3:10: runner.memory: \"512 MB\" is not a memory size: digits and a unit b, k, m or g, like \"512m\", at least 6m".into(),
        ),
        (
            runner("memory = \"1m\""),
            "c.toml:3:10: runner.memory: \"1m\" is not a memory size: digits and a unit b, k, m or g, like \"512m\", at least 6m".into(),
        ),
        (
            runner("egress_network = \"\""),
            "c.toml:3:18: runner.egress_network: \"\" is not an egress network: use pasta or slirp4netns".into(),
        ),
        // Podman's other networks would give the proxy a way out that no check here judged.
        (
            runner("egress_network = \"host\""),
            "c.toml:3:18: runner.egress_network: \"host\" is not an egress network: use pasta or slirp4netns".into(),
        ),
        (
            runner("egress_network = \"Pasta\""),
            "c.toml:3:18: runner.egress_network: \"Pasta\" is not an egress network: use pasta or slirp4netns".into(),
        ),
        (
            runner("egress_network = \"pasta:--map-gw\""),
            "c.toml:3:18: runner.egress_network: \"pasta:--map-gw\" is not an egress network: use pasta or slirp4netns".into(),
        ),
        (
            runner("home = \"var/lib\""),
            "c.toml:3:8: runner.home: \"var/lib\" is not an absolute path".into(),
        ),
        (
            runner("home = \"/srv/a,b\""),
            "c.toml:3:8: runner.home: \"/srv/a,b\" cannot be mounted: it contains ':' or ','".into(),
        ),
        (
            runner("imag = \"x\""),
            "c.toml:3:1: unknown field `imag`, expected one of `backend`, `podman`, `image`, `egress_network`, `output_cap`, `memory`, `pids`, `read_file_ms`, `write_file_ms`, `shell_ms`, `http_fetch_ms`, `enforce_limits`, `egress_start_ms`, `egress_connections`, `egress_bytes`, `home`, `protect_max_depth`, `protect_max_entries`, `protect_max_targets`".into(),
        ),
        (
            runner("backend = \"docker\""),
            "c.toml:3:11: unknown variant `docker`, expected `podman` or `bwrap`".into(),
        ),
        ("[broker]\npids = 1\n".into(), "c.toml:2:1: unknown field `pids`, expected one of `clients`, `audit_log`, `timeout_ms`, `refusal_repeats`, `preview_chars`, `max_concurrent_calls`, `ticket_ttl_s`, `result_ttl_s`, `shutdown_grace_s`, `owners`, `max_staged_bytes`, `staged_ttl_s`".into()),
        ("[broker]\nclients = []\n".into(), "c.toml:2:11: broker.clients: must name at least one client".into()),
        (
            "[broker]\nclients = [\"Bad User\"]\n".into(),
            "c.toml:2:12: broker.clients: \"Bad User\" is not a client: a user name, a uid, or \"@\" and a group name".into(),
        ),
        ("[broker]\nclients = [-1]\n".into(), "c.toml:2:12: broker.clients: -1 is not a client: a user name, a uid, or \"@\" and a group name".into()),
        ("[broker]\nclients = [\"@\"]\n".into(), "c.toml:2:12: broker.clients: \"@\" is not a client: a user name, a uid, or \"@\" and a group name".into()),
        ("[broker]\ntimeout_ms = -5\n".into(), "c.toml:2:14: invalid value: integer `-5`, expected u64".into()),
        ("[broker]\naudit_log = \"/var/../etc/x\"\n".into(), "c.toml:2:13: broker.audit_log: \"/var/../etc/x\" must be written without . or .. components".into()),
        ("[bwrap]\n".into(), "c.toml:1:1: bwrap: is accepted only with runner.backend = \"bwrap\"".into()),
        (grant("mode = \"yolo\""), "c.toml:3:8: grants.g.mode: \"yolo\" is not a mode: use safe, ask or auto".into()),
        (
            "[grants.g]\ntools = [\"read_file\", \"exec\"]\n".into(),
            "c.toml:2:23: grants.g.tools: \"exec\" is not a tool: the tools are read_file, write_file, shell and http_fetch".into(),
        ),
        ("[grants.g]\ntools = [\"shell\", \"shell\"]\n".into(), "c.toml:2:19: grants.g.tools: \"shell\" is listed twice".into()),
        ("[grants.g]\ntools = []\n".into(), "c.toml:2:9: grants.g.tools: a grant needs at least one tool".into()),
        ("[grants.g]\nmode = \"safe\"\n".into(), "c.toml:1:1: missing field `tools`".into()),
        ("[grants.\"a b\"]\ntools = [\"shell\"]\n".into(), "c.toml:1:9: grants: \"a b\" is not a grant name: 1 to 64 of A-Z a-z 0-9 _ . -, not . or ..".into()),
        (grant("paths = [{ path = \"srv\" }]"), "c.toml:3:19: grants.g.paths: \"srv\" is not an absolute path".into()),
        (grant(&format!("paths = [{{ path = \"{d}/none\" }}]")), format!("c.toml:3:19: grants.g.paths: \"{d}/none\" does not exist or cannot be read by brokerd")),
        (grant(&format!("paths = [{{ path = \"{f}\" }}]")), format!("c.toml:3:19: grants.g.paths: \"{f}\" is not a directory")),
        (grant(&format!("paths = [{{ path = \"{colon}\" }}]")), format!("c.toml:3:19: grants.g.paths: \"{colon}\" cannot be mounted: it contains ':' or ','")),
        (grant(&format!("paths = [{{ path = \"{d}\", mode = \"rw\" }}]")), "c.toml:3:".to_string()),
        (grant("hosts = [\"*.com\"]"), "c.toml:3:10: grants.g.hosts: \"*.com\" is not a host pattern: a host name like docs.example.org, or *. and a name like *.example.net".into()),
        (grant("hosts = [\"10.0.0.1\"]"), "c.toml:3:10: grants.g.hosts: \"10.0.0.1\" is not a host pattern: a host name like docs.example.org, or *. and a name like *.example.net".into()),
        (grant("shell_hosts = [\"*.com\"]"), "c.toml:3:16: grants.g.shell_hosts: \"*.com\" is not a host pattern: a host name like docs.example.org, or *. and a name like *.example.net".into()),
        (grant("shell_hosts = [\"ok.example\", \"a%00.example\"]"), "c.toml:3:30: grants.g.shell_hosts: \"a%00.example\" is not a host pattern: a host name like docs.example.org, or *. and a name like *.example.net".into()),
        // A shell call with shell_hosts starts a proxy: the default shell limit, with the
        // proxy's start and removal, is past the default timeout under Podman.
        (
            format!("{}[grants.g]\ntools = [\"shell\"]\nshell_hosts = [\"index.crates.io\"]\n", runner("")),
            "c.toml:6:16: grants.g.shell_hosts: 100000 ms, with what stopping and removing the sandbox (and starting a proxy) may take, comes to 129000 ms, not under broker.timeout_ms (120000 ms): loopd would stop waiting before a call that ran out its time limit is answered; lower the limit or raise both".into(),
        ),
        (grant("allow_addresses = [\"10.1.2.3/8\"]"), "c.toml:3:20: grants.g.allow_addresses: \"10.1.2.3/8\" has address bits set past its prefix length; write 10.0.0.0/8".into()),
        (grant("allow_addresses = [\"10.0.0.0/33\"]"), "c.toml:3:20: grants.g.allow_addresses: \"10.0.0.0/33\" has a prefix length longer than the address".into()),
        (grant("allow_addresses = [\"example.com\"]"), "c.toml:3:20: grants.g.allow_addresses: \"example.com\" is not an address or a CIDR such as 192.0.2.0/24".into()),
        (grant("cache = true\nmax_cache_bytes = 1000"), "c.toml:4:19: grants.g.max_cache_bytes: 1000 is less than 1 MiB (1048576), the least a cache is bounded to".into()),
        (grant("max_cache_bytes = 2000000"), "c.toml:3:19: grants.g.max_cache_bytes: needs cache = true: it bounds the grant's cache".into()),
        (grant("cache = true\npaths = [{ path = \"/tmp\" }]"), "c.toml: grants.g.cache: the grant directory /tmp holds /tmp/.cache or lies in it, where the cache is mounted".into()),
        (grant("allow_addresses = [\"127.0.0.1\"]"), "c.toml:3:20: grants.g.allow_addresses: 127.0.0.1/32 overlaps 127.0.0.0/8, which is never allowed (loopback, link-local, the tailnet, 0/8, multicast)".into()),
    ];
    for (text, want) in cases {
        let got = parse(&text, "c.toml")
            .map(|_| ())
            .expect_err(&text)
            .to_string();
        assert!(
            got.starts_with(&want),
            "config:\n{text}\ngot:  {got}\nwant: {want}"
        );
        if !want.ends_with(':') {
            assert_eq!(got, want, "config:\n{text}");
        }
    }
}

#[test]
fn allow_addresses_never_reach_the_forbidden_ranges() {
    // (range, allowed)
    let cases = [
        ("192.168.0.0/16", true),
        ("10.0.0.0/8", true),
        ("172.16.0.0/12", true),
        ("198.51.100.0/24", true),
        ("100.63.255.255", true),
        ("100.128.0.0/9", true),
        ("169.253.255.255", true),
        ("1.0.0.0/8", true),
        ("fd00::/8", true),
        ("2001:db8::1", true),
        ("::2", false),
        ("fc00::1", true),
        ("0.0.0.0/0", false),
        ("0.0.0.0", false),
        ("0.1.2.3", false),
        ("127.0.0.1", false),
        ("126.0.0.0/7", false),
        ("169.254.169.254", false),
        ("169.0.0.0/8", false),
        ("100.64.0.0/10", false),
        ("100.100.100.100", false),
        ("100.0.0.0/8", false),
        ("224.0.0.1", false),
        ("239.255.255.255", false),
        ("192.0.0.0/2", false),
        ("::/0", false),
        ("::1", false),
        ("::", false),
        ("fe80::1", false),
        ("febf::/16", false),
        ("ff02::1", false),
        ("::ffff:127.0.0.1", false),
        ("::ffff:0:0/96", false),
        ("::ffff:169.254.0.0/112", false),
        ("64:ff9b::7f00:1", false),
        ("::7f00:1", false),
        ("::ffff:192.168.1.1", true),
    ];
    for (s, allowed) in cases {
        assert_eq!(proto::addr::parse_allow_address(s).is_ok(), allowed, "{s}");
    }
}

#[test]
fn memory_sizes() {
    let cases = [
        ("512m", Some(512 << 20)),
        ("1g", Some(1 << 30)),
        ("1G", Some(1 << 30)),
        ("6291456", Some(6 << 20)),
        ("64k", Some(64 << 10)),
        ("m", None),
        ("-1m", None),
        ("1.5g", None),
        ("1t", None),
        ("", None),
        ("99999999999999999999g", None),
    ];
    for (s, want) in cases {
        assert_eq!(memory_bytes(s), want, "{s}");
    }
}

#[test]
fn shell_hosts_count_the_proxy_in_the_shell_budget() {
    let grant = "[grants.g]\ntools = [\"shell\"]\nshell_hosts = [\"index.crates.io\"]\n";
    // Podman: 90 s + 5 s start + 16 s tool stop + 8 s proxy removal = 119 s.
    let ok = format!("{}{grant}", runner("shell_ms = 90000"));
    let c = parse(&ok, "c.toml").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.grants["g"].shell_hosts, vec!["index.crates.io"]);
    let over = format!("{}{grant}", runner("shell_ms = 91000"));
    assert!(parse(&over, "c.toml").is_err());
    // Without shell_hosts the same limit needs no proxy.
    let plain = format!(
        "{}[grants.g]\ntools = [\"shell\"]\n",
        runner("shell_ms = 100000")
    );
    assert!(parse(&plain, "c.toml").is_ok());
}
