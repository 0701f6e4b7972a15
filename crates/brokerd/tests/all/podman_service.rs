//! The whole path with the real `PodmanRuntime`: socket → broker → policy → podman's argument
//! list, against a fake `podman` script that records its arguments and standard input and
//! answers like a tool that worked. No real podman runs and no packet leaves the machine.
//!
//! One test only: the script is written before anything forks, so no other thread can hold it
//! open for writing when it is executed (ETXTBSY).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use brokerd::audit::{self, Audit};
use brokerd::broker::Broker;
use brokerd::policy::Policy;
use brokerd::runner::podman::PodmanRuntime;
use brokerd::server::{self, Clients};
use proto::broker::{Answer, Body};
use serde_json::{json, Value};

use crate::common;

const FAKE_PODMAN: &str = r#"#!/bin/sh
# Fake podman: record each call under @LOG@ by container name, then act like it worked.
log='@LOG@'
@ARGS@
case "$1" in
  run)
    printf '%s\n' "$@" > "$log/$name.args"
    if [ "$2" = "-d" ]; then
      touch "$egress_dir/egress.sock"
      echo "0123456789abcdef"
    else
      cat > "$log/$name.stdin"
      if grep -q 'preflight.invalid' "$log/$name.stdin"; then
        # brokerd's network preflight: what toolkit prints when the proxy refuses the name.
        printf "http_fetch: https://preflight.invalid/: curl: (97) Can't complete SOCKS5 connection to preflight.invalid. (2)\n"
        exit 1
      fi
      printf 'hello from podman\n'
    fi ;;
  # Every container brokerd removes is gone when it looks.
  container) printf '%s\n' "$*" >> "$log/other"; exit 1 ;;
  *) printf '%s\n' "$*" >> "$log/other" ;;
esac
exit 0
"#;

/// (call, tool, arguments, volumes, network, what the tool reads on stdin)
type Row = (
    &'static str,
    &'static str,
    Value,
    Vec<String>,
    &'static str,
    Value,
);

#[test]
fn each_tool_reaches_podman_with_its_arguments() {
    let dir = tempfile::tempdir().expect("tempdir");
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let (rw, ro, log, home) = (
        base.join("notes"),
        base.join("ref"),
        base.join("log"),
        base.join("home"),
    );
    for d in [&rw, &ro, &log, &home] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(rw.join("a.txt"), "a").unwrap();
    let podman = base.join("podman");
    let script = common::fake_podman_script(FAKE_PODMAN);
    common::write_script(
        &podman,
        &script.replace("@LOG@", &log.display().to_string()),
    );
    let image = common::image("boxmaker-tools");

    let uid = nix::unistd::getuid().as_raw();
    let audit_path = base.join("audit.jsonl");
    let text = format!(
        r#"
[broker]
clients = [{uid}]
audit_log = "{audit}"

[runner]
image = "{image}"
podman = "{podman}"
home = "{home}"
egress_start_ms = 3000

[grants.auto]
mode = "auto"
tools = ["read_file", "write_file", "shell", "http_fetch"]
paths = [{{ path = "{rw}", write = true }}, {{ path = "{ro}" }}]
hosts = ["docs.example.org"]
"#,
        audit = audit_path.display(),
        podman = podman.display(),
        home = home.display(),
        rw = rw.display(),
        ro = ro.display(),
    );
    let config = brokerd::config::parse(&text, "podman.toml").unwrap_or_else(|e| panic!("{e}"));
    let policy = Policy::new(&config).unwrap();
    let runtime = Arc::new(PodmanRuntime::new(config.runner.as_ref().unwrap()));
    let log_file = Audit::open(&audit_path).unwrap();
    let broker = Arc::new(Broker::new(config, policy, runtime, log_file));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let socket = base.join("broker.sock");
    let listener = {
        let _in = rt.enter();
        tokio::net::UnixListener::bind(&socket).unwrap()
    };
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    rt.spawn(server::serve(
        listener,
        broker,
        Arc::new(server::Peers::clients(Clients::of_uids([uid]))),
        stop_rx,
    ));

    let s = UnixStream::connect(&socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut w = s;
    let mut ask = |call: &str, tool: &str, args: Value| -> Answer {
        let req = json!({"op": "call", "id": call, "session": "ps", "call": call,
                         "grant": "auto", "tool": tool, "arguments": args.to_string()});
        w.write_all(format!("{req}\n").as_bytes()).unwrap();
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    };

    let ro_vol = |p: &Path| format!("--volume={0}:{0}:ro", p.display());
    let rw_vol = |p: &Path| format!("--volume={0}:{0}:rw", p.display());
    let a_txt = rw.join("a.txt").display().to_string();
    // (call, tool, arguments, volumes, network, what the tool reads on stdin)
    let cases: Vec<Row> = vec![
        (
            "read",
            "read_file",
            json!({"path": "a.txt"}),
            vec![ro_vol(&rw), ro_vol(&ro)],
            "--network=none",
            json!({"path": a_txt}),
        ),
        (
            "write",
            "write_file",
            json!({"path": "b.txt", "content": "hi"}),
            vec![rw_vol(&rw), ro_vol(&ro)],
            "--network=none",
            json!({"path": rw.join("b.txt").display().to_string(), "content": "hi"}),
        ),
        (
            "shell",
            "shell",
            json!({"command": "ls -la", "cwd": "."}),
            vec![ro_vol(&rw), ro_vol(&ro)],
            "--network=none",
            json!({"command": "ls -la", "cwd": rw.display().to_string()}),
        ),
        (
            "fetch",
            "http_fetch",
            json!({"url": "https://docs.example.org/x"}),
            vec![],
            "",
            json!({"url": "https://docs.example.org/x"}),
        ),
    ];
    for (call, tool, args, volumes, network, stdin) in cases {
        let a = ask(call, tool, args);
        let Body::Result { content, label, .. } = &a.body else {
            panic!("{call}: {a:?}");
        };
        assert_eq!(label, &format!("auto/{tool}"));
        assert!(content.contains("hello from podman"), "{call}: {content:?}");
        // The tool container: its arguments one a line, and what it read.
        let name = std::fs::read_dir(&log)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .find(|n| n.starts_with(&format!("boxmaker-ps-{call}-")) && n.ends_with(".stdin"))
            .unwrap_or_else(|| panic!("{call}: podman never ran the tool"));
        let name = name.trim_end_matches(".stdin");
        let args = std::fs::read_to_string(log.join(format!("{name}.args"))).unwrap();
        let args: Vec<&str> = args.lines().collect();
        assert_eq!(&args[..3], ["run", "--rm", "-i"], "{call}");
        assert_eq!(
            args[args.len() - 3..],
            [image.as_str(), proto::tools::TOOLKIT, tool],
            "{call}"
        );
        for v in &volumes {
            assert!(args.contains(&v.as_str()), "{call}: {v} not in {args:?}");
        }
        if !network.is_empty() {
            assert!(args.contains(&network), "{call}: {args:?}");
        }
        let got: Value =
            serde_json::from_slice(&std::fs::read(log.join(format!("{name}.stdin"))).unwrap())
                .unwrap_or_else(|e| panic!("{call}: stdin is not JSON: {e}"));
        assert_eq!(got, stdin, "{call}");
        if tool == "http_fetch" {
            let proxy = std::fs::read_to_string(log.join(format!("{name}-egress.args")))
                .unwrap_or_else(|e| panic!("the egress proxy never started: {e}"));
            let proxy: Vec<&str> = proxy.lines().collect();
            assert_eq!(&proxy[..2], ["run", "-d"]);
            let at = proxy.iter().position(|a| *a == "--allow").expect("--allow");
            assert_eq!(proxy[at + 1], "docs.example.org");
        }
    }
    let _ = stop.send(true);
    let head = audit::verify(&audit_path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        head.seq, 8,
        "a decision and an outcome for each of the four calls"
    );
    let text = std::fs::read_to_string(&audit_path).unwrap();
    assert_eq!(text.matches(r#""status":"result""#).count(), 4, "{text}");
}
