//! brokerd's own cost of `changes` on a staged layer of exactly 1,000 changed files (the
//! performance target: under 100 ms), with and without diffs, over the real socket.
//!
//! `cargo run --release -p brokerd --example staged_changes [-- RUNS] [--out DIR]`
//!
//! The real `server::serve` and `Broker` with a staged grant over a directory of two files,
//! and a runner that runs nothing: its one call leaves in the session's layer what overlayfs
//! would (998 new files and the two files changed, copied up whole), and brokerd records it as
//! after any call. Then RUNS (default 20) `changes` answers of each kind are timed, after one
//! of each to warm up. With `--out DIR` the figures are also written as `DIR/changes-noop.json`
//! for `boxmaker-e2e report` (`make bench`). It fails (exit 1) if the layer does not list
//! exactly 1,000 changes.

#![forbid(unsafe_code)]
// A measurement run by hand: a setup step that fails ends it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use brokerd::audit::Audit;
use brokerd::broker::Broker;
use brokerd::policy::Policy;
use brokerd::runner::{RunError, RunOutput, RunSpec, Runner};
use brokerd::server::{self, Clients};
use proto::broker::{Answer, Body};
use serde_json::{json, Value};

/// The changed files of the layer.
const CHANGES: usize = 1000;
/// What `changes` must stay under, p50.
const TARGET_MS: f64 = 100.0;

/// Leaves in each staged mount's layer what a command changing `CHANGES` files would.
struct Stager;

impl Runner for Stager {
    fn run(&self, spec: &RunSpec) -> Result<RunOutput, RunError> {
        for m in &spec.mounts {
            let Some(layer) = &m.stage else { continue };
            for i in 0..CHANGES - 2 {
                std::fs::write(layer.upper.join(format!("f{i}")), format!("{i}\n")).unwrap();
            }
            for f in ["a.txt", "b.txt"] {
                let mut text = std::fs::read_to_string(m.path.join(f)).unwrap();
                text.push_str("x\n");
                std::fs::write(layer.upper.join(f), text).unwrap();
            }
        }
        Ok(RunOutput {
            content: "made\n".into(),
            truncated: false,
        })
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (runs, out) = match parse_args(&args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("staged_changes: {e}\nusage: staged_changes [RUNS] [--out DIR]");
            std::process::exit(2);
        }
    };
    let work = tempfile::tempdir().expect("tempdir");
    // The grant apart from the server's state and home, as brokerd's config requires.
    let granted = tempfile::tempdir().expect("tempdir");
    let grant = std::fs::canonicalize(granted.path()).unwrap().join("notes");
    std::fs::create_dir_all(&grant).unwrap();
    // As big as source files are: the diffs have something to show.
    let lines: String = (0..200).map(|i| format!("line {i}\n")).collect();
    std::fs::write(grant.join("a.txt"), &lines).unwrap();
    std::fs::write(grant.join("b.txt"), &lines).unwrap();

    let uid = nix::unistd::getuid().as_raw();
    let text = format!(
        r#"
[broker]
clients = [{uid}]
audit_log = "{audit}"

[runner]
image = "sha256:{hex}"
home = "{home}"

[grants.notes]
mode = "auto"
tools = ["read_file", "write_file", "shell"]
paths = [{{ path = "{grant}", write = true }}]
writes = "staged"
"#,
        audit = work.path().join("audit.jsonl").display(),
        hex = "a".repeat(64),
        home = work.path().display(),
        grant = grant.display(),
    );
    let config = brokerd::config::parse(&text, "staged_changes.toml").expect("config");
    let policy = Policy::new(&config).expect("policy");
    let audit = Audit::open(&config.broker.audit_log).expect("audit");
    let broker = Arc::new(Broker::new(config, policy, Arc::new(Stager), audit));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let socket = work.path().join("broker.sock");
    let listener = {
        let _in = rt.enter();
        tokio::net::UnixListener::bind(&socket).expect("bind")
    };
    let (_stop, stop_rx) = tokio::sync::watch::channel(false);
    rt.spawn(server::serve(
        listener,
        broker,
        Arc::new(server::Peers::clients(Clients::of_uids([uid]))),
        stop_rx,
    ));

    let mut c = Client::connect(&socket);
    let (made, _) = c.ask(
        &json!({"op": "call", "id": "c1", "session": "s1", "call": "c1",
        "grant": "notes", "tool": "shell",
        "arguments": json!({"command": "make the files"}).to_string()}),
    );
    assert!(matches!(made.body, Body::Result { .. }), "{made:?}");
    let changes = |diff: bool| json!({"op": "changes", "id": "ch", "session": "s1", "diff": diff});
    let (listed, _) = c.ask(&changes(true));
    let (count, left_out, diffs) = match &listed.body {
        Body::Changes {
            changes, left_out, ..
        } => (
            changes.len(),
            *left_out,
            changes.iter().filter(|c| c.diff.is_some()).count(),
        ),
        other => panic!("changes: {other:?}"),
    };
    println!(
        "staged changes: a layer of {count} changed files ({left_out} left out, {diffs} with a diff); \
         {runs} answers each after a warm-up, over the real socket"
    );
    if count != CHANGES || left_out != 0 {
        eprintln!("staged_changes: the layer lists {count} changes, not {CHANGES}");
        std::process::exit(1);
    }
    let mut rows = Vec::new();
    for diff in [false, true] {
        c.ask(&changes(diff));
        let mut t: Vec<Duration> = (0..runs).map(|_| c.ask(&changes(diff)).1).collect();
        t.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let at = |q: f64| ms(t[((t.len() as f64 * q).ceil() as usize).clamp(1, t.len()) - 1]);
        let (p50, p95, max) = (at(0.50), at(0.95), ms(t[t.len() - 1]));
        let what = if diff { "with diffs" } else { "without diffs" };
        let met = if p50 < TARGET_MS { "met" } else { "NOT met" };
        println!(
            "changes {what:<13} p50 {p50:>7.2} ms  p95 {p95:>7.2} ms  max {max:>7.2} ms  \
             (target p50 under {TARGET_MS} ms: {met})"
        );
        rows.push(json!({"diff": diff, "p50_ms": p50, "p95_ms": p95, "max_ms": max}));
    }
    if let Some(dir) = out {
        let v = json!({"bench": "changes", "backend": "noop", "paths": count,
                       "runs": runs, "rows": rows});
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("changes-noop.json"), format!("{v:#}\n")).unwrap();
    }
}

fn parse_args(args: &[String]) -> Result<(usize, Option<PathBuf>), String> {
    let mut runs = 20;
    let mut out = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--out" => out = Some(PathBuf::from(it.next().ok_or("--out needs a directory")?)),
            n => {
                runs = n
                    .parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| format!("{n:?} is not a number of runs"))?
            }
        }
    }
    Ok((runs, out))
}

struct Client {
    r: BufReader<UnixStream>,
    w: UnixStream,
}

impl Client {
    fn connect(socket: &Path) -> Client {
        let s = UnixStream::connect(socket).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        Client {
            r: BufReader::new(s.try_clone().unwrap()),
            w: s,
        }
    }

    /// Sends one request; its answer and how long it took.
    fn ask(&mut self, req: &Value) -> (Answer, Duration) {
        let mut line = req.to_string();
        line.push('\n');
        let t = Instant::now();
        self.w.write_all(line.as_bytes()).expect("write");
        let mut answer = String::new();
        self.r.read_line(&mut answer).expect("read");
        let took = t.elapsed();
        (serde_json::from_str(&answer).expect("an answer"), took)
    }
}
