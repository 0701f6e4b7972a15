//! brokerd's own cost per call (framing, decision, audit sync) against a no-op runner, and its
//! resident memory idle and with 32 calls in flight.
//!
//! `cargo run --release -p brokerd --example overhead [-- N] [--scale M] [--out DIR]`
//!
//! Then the scale rows: M calls a row (default 2000) from 1, 2, 4, 8 and 16 concurrent clients,
//! each on its own connection making its calls in turn (read_file and shell by turns), with
//! brokerd's default `max_concurrent_calls` and with it at the core count: calls per second and
//! p50/p95 of what a client waited. `--scale 0` leaves them out. With `--out DIR` the tables
//! are also written as JSON, `DIR/overhead.json` and `DIR/scale-noop.json`, for
//! `boxmaker-e2e report` (`make bench`).
//!
//! The example starts itself again as the server (`overhead serve CONFIG SOCKET`): the real
//! `server::serve` and `Broker` with a runner that does nothing (or sleeps 500 ms for a command
//! that says `SLOW`), so the memory figures are the server process's alone. The client sends
//! plain NDJSON lines over the Unix socket and times each answer.

#![forbid(unsafe_code)]
// A measurement run by hand: a setup step that fails ends it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use brokerd::audit::Audit;
use brokerd::broker::Broker;
use brokerd::policy::Policy;
use brokerd::runner::{RunError, RunOutput, RunSpec, Runner};
use brokerd::server::{self, Clients};
use proto::broker::Kind;
use serde_json::{json, Value};

const IN_FLIGHT: usize = 32;
const SCALE_CLIENTS: &[usize] = &[1, 2, 4, 8, 16];
const SLOW: Duration = Duration::from_millis(500);

/// One row's request, by its number.
type Request = Box<dyn Fn(usize) -> Value>;

struct NoopRunner;

impl Runner for NoopRunner {
    fn run(&self, spec: &RunSpec) -> Result<RunOutput, RunError> {
        if spec.input.windows(4).any(|w| w == b"SLOW") {
            std::thread::sleep(SLOW);
        }
        Ok(RunOutput {
            content: "ok\n".into(),
            truncated: false,
        })
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("serve") {
        serve(Path::new(&args[2]), Path::new(&args[3]));
        return;
    }
    let (n, scale_calls, out) = match parse_args(&args[1..]) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("overhead: {e}\nusage: overhead [N] [--scale M] [--out DIR]");
            std::process::exit(2);
        }
    };
    let work = tempfile::tempdir().expect("tempdir");
    // The grant apart from the server's state and home, as brokerd's config requires.
    let granted = tempfile::tempdir().expect("tempdir");
    let grant = std::fs::canonicalize(granted.path()).unwrap().join("notes");
    std::fs::create_dir_all(&grant).unwrap();
    std::fs::write(grant.join("a.txt"), "a").unwrap();

    let mut places: Vec<(&str, PathBuf)> = vec![("disk", work.path().to_path_buf())];
    let shm = Path::new("/dev/shm")
        .is_dir()
        .then(|| tempfile::tempdir_in("/dev/shm").ok())
        .flatten();
    if let Some(d) = &shm {
        places.push(("tmpfs", d.path().to_path_buf()));
    }
    println!(
        "brokerd overhead: {n} sequential calls per row over the real socket, no-op runner\n\
         audit on disk: {} ({}); tmpfs: /dev/shm\n",
        work.path().display(),
        fs_type(work.path())
    );
    println!(
        "{:<6} {:<28} {:>9} {:>9} {:>9} {:>9}",
        "audit", "request", "p50 µs", "p95 µs", "p99 µs", "mean µs"
    );
    let mut memory = None;
    let mut json_rows = Vec::new();
    for (label, dir) in &places {
        let srv = Server::start(dir, &grant, Some(IN_FLIGHT));
        let mut c = srv.connect();
        // Warm up: the classifier, the allocator, the page cache.
        for i in 0..50 {
            c.ask(&call(
                "warm",
                &format!("w{i}"),
                "shell",
                json!({"command": "ls"}),
            ));
        }
        let rows: Vec<(&str, Request)> = vec![
            (
                "status (framing only)",
                Box::new(|i| json!({"op": "status", "id": i.to_string()})),
            ),
            (
                "refused read_file (1 record)",
                Box::new(|i| {
                    // A session each, so that no refusal repeats into a stop.
                    call(
                        &format!("r{i}"),
                        "r",
                        "read_file",
                        json!({"path": "/etc/x"}),
                    )
                }),
            ),
            (
                "read_file (2 records)",
                Box::new(|i| call("s", &format!("a{i}"), "read_file", json!({"path": "a.txt"}))),
            ),
            (
                "shell `ls -la` (2 records)",
                Box::new(|i| call("s", &format!("b{i}"), "shell", json!({"command": "ls -la"}))),
            ),
        ];
        for (name, req) in rows {
            let mut t: Vec<Duration> = (0..n).map(|i| c.ask(&req(i))).collect();
            t.sort();
            let us = |d: Duration| d.as_secs_f64() * 1e6;
            let mean = t.iter().sum::<Duration>() / n as u32;
            println!(
                "{label:<6} {name:<28} {:>9.0} {:>9.0} {:>9.0} {:>9.0}",
                us(t[n / 2]),
                us(t[n * 95 / 100]),
                us(t[n * 99 / 100]),
                us(mean)
            );
            json_rows.push(json!({
                "audit": label,
                "request": name,
                "p50_us": us(t[n / 2]),
                "p95_us": us(t[n * 95 / 100]),
                "p99_us": us(t[n * 99 / 100]),
                "mean_us": us(mean),
            }));
        }
        if *label == "disk" {
            memory = Some((srv.fresh_kib, srv.memory()));
        }
        srv.stop();
    }
    let mut json_memory = Value::Null;
    if let Some((fresh, (idle, busy, busy_hwm, took))) = memory {
        json_memory = json!({
            "fresh_kib": fresh,
            "idle_kib": idle.0,
            "busy_kib": busy,
            "in_flight": IN_FLIGHT,
            "peak_kib": busy_hwm,
            "after_kib": idle.1,
            "concurrent_ms": took.as_secs_f64() * 1e3,
        });
        println!("\nresident memory of the server process (VmRSS), audit on disk:");
        println!("  idle, right after start-up:       {fresh:>7} KiB");
        println!("  idle, after the rows above:       {:>7} KiB", idle.0);
        println!(
            "  {IN_FLIGHT} calls in flight (runner sleeps):  {:>7} KiB  (peak VmHWM {busy_hwm} KiB)",
            busy
        );
        println!("  idle again, after those calls:    {:>7} KiB", idle.1);
        println!(
            "  the {IN_FLIGHT} concurrent {}ms calls took {:?} in all",
            SLOW.as_millis(),
            took
        );
    }
    if let Some(dir) = &out {
        std::fs::create_dir_all(dir).unwrap();
        let overhead = json!({
            "bench": "overhead",
            "calls": n,
            "rows": json_rows,
            "memory": json_memory,
        });
        std::fs::write(dir.join("overhead.json"), format!("{overhead:#}\n")).unwrap();
    }
    if scale_calls > 0 {
        let scale = scale(work.path(), &grant, scale_calls);
        if let Some(dir) = &out {
            std::fs::write(dir.join("scale-noop.json"), format!("{scale:#}\n")).unwrap();
        }
    }
}

/// The scale rows, audit on disk; their JSON (as `boxmaker-e2e report` reads it).
fn scale(dir: &Path, grant: &Path, calls: usize) -> Value {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    // brokerd's default, read back from a config without the key.
    let default_slots = {
        let probe = dir.join("default.toml");
        std::fs::write(&probe, config_text(dir, grant, None)).unwrap();
        brokerd::config::load(&probe)
            .unwrap()
            .broker
            .max_concurrent_calls
    };
    let mut settings = vec![(None, default_slots, "default")];
    if cores != default_slots {
        settings.push((Some(cores), cores, "cores"));
    }
    println!(
        "\nscale: {calls} calls a row, clients each on a connection of its own, audit on disk"
    );
    println!(
        "{:<22} {:>7} {:>9} {:>9} {:>9} {:>6}",
        "max_concurrent_calls", "clients", "calls/s", "p50 µs", "p95 µs", "errors"
    );
    let mut rows = Vec::new();
    for (set, slots, which) in settings {
        let srv = Server::start(dir, grant, set);
        let warm = srv.connect();
        let _ = srv.round(vec![warm], 50, "warm");
        for &clients in SCALE_CLIENTS {
            let per_client = calls.div_ceil(clients);
            let conns = (0..clients).map(|_| srv.connect()).collect();
            let started = Instant::now();
            let (mut took, errors) = srv.round(conns, per_client, &format!("n{clients}"));
            let secs = started.elapsed().as_secs_f64();
            let rate = took.len() as f64 / secs;
            took.sort();
            let ms = |q: f64| -> Option<f64> {
                let i = ((took.len() as f64 - 1.0) * q).round() as usize;
                took.get(i).map(|d| d.as_secs_f64() * 1e3)
            };
            let (p50, p95) = (ms(0.50), ms(0.95));
            println!(
                "{:<22} {clients:>7} {rate:>9.0} {:>9.0} {:>9.0} {errors:>6}",
                format!("{slots} ({which})"),
                p50.unwrap_or(f64::NAN) * 1e3,
                p95.unwrap_or(f64::NAN) * 1e3,
            );
            rows.push(json!({
                "slots": slots,
                "slots_are": which,
                "clients": clients,
                "calls": took.len(),
                "errors": errors,
                "seconds": secs,
                "calls_per_s": rate,
                "p50_ms": p50,
                "p95_ms": p95,
            }));
        }
        srv.stop();
    }
    json!({
        "bench": "scale",
        "backend": "noop",
        "cores": cores,
        "default_slots": default_slots,
        "tools": ["read_file", "shell"],
        "calls_per_row": calls,
        "rows": rows,
    })
}

/// (N, M, DIR) from `[N] [--scale M] [--out DIR]`.
fn parse_args(args: &[String]) -> Result<(usize, usize, Option<PathBuf>), String> {
    let (mut n, mut scale, mut out) = (2000, 2000, None);
    let mut it = args.iter();
    let number = |v: Option<&String>, what: &str| -> Result<usize, String> {
        let v = v.ok_or_else(|| format!("{what} needs a number"))?;
        v.parse()
            .map_err(|_| format!("{what}: {v:?} is not a number"))
    };
    while let Some(a) = it.next() {
        match a.as_str() {
            "--scale" => scale = number(it.next(), "--scale")?,
            "--out" => out = Some(PathBuf::from(it.next().ok_or("--out needs a directory")?)),
            v => n = number(Some(&v.to_string()), "N")?,
        }
    }
    if n == 0 {
        return Err("N must be at least 1".into());
    }
    Ok((n, scale, out))
}

fn call(session: &str, id: &str, tool: &str, args: Value) -> Value {
    json!({"op": "call", "id": id, "session": session, "call": id.replace(' ', "_"), "grant": "notes",
           "tool": tool, "arguments": args.to_string()})
}

fn fs_type(p: &Path) -> String {
    Command::new("stat")
        .args(["-f", "-c", "%T"])
        .arg(p)
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "?".into())
}

struct Server {
    child: Child,
    socket: PathBuf,
    /// VmRSS right after start-up, before any call.
    fresh_kib: u64,
}

struct Client {
    r: BufReader<UnixStream>,
    w: UnixStream,
}

impl Client {
    /// Sends one call and times its answer; `None` for an answer other than a result.
    fn try_ask(&mut self, req: &Value) -> Option<Duration> {
        let mut line = req.to_string();
        line.push('\n');
        let t = Instant::now();
        self.w.write_all(line.as_bytes()).ok()?;
        let mut answer = String::new();
        self.r.read_line(&mut answer).ok()?;
        let took = t.elapsed();
        let a: proto::broker::Answer = serde_json::from_str(&answer).ok()?;
        (a.kind() == "result").then_some(took)
    }

    /// Sends one request and times its answer.
    fn ask(&mut self, req: &Value) -> Duration {
        let mut line = req.to_string();
        line.push('\n');
        let t = Instant::now();
        self.w.write_all(line.as_bytes()).expect("write");
        let mut answer = String::new();
        self.r.read_line(&mut answer).expect("read");
        let took = t.elapsed();
        let a: proto::broker::Answer = serde_json::from_str(&answer).expect("an answer");
        assert!(
            matches!(a.kind(), Kind::Result | Kind::Refused | Kind::Status),
            "{answer}"
        );
        took
    }
}

/// The server's config; `slots` sets `max_concurrent_calls` (brokerd's default without it).
fn config_text(audit_dir: &Path, grant: &Path, slots: Option<usize>) -> String {
    format!(
        r#"
[broker]
clients = [{uid}]
audit_log = "{audit}"
{slots}

[runner]
image = "sha256:{hex}"
home = "{home}"

[grants.notes]
mode = "auto"
tools = ["read_file", "write_file", "shell"]
paths = [{{ path = "{grant}", write = true }}]
"#,
        uid = nix::unistd::getuid().as_raw(),
        audit = audit_dir.join("audit.jsonl").display(),
        slots = slots.map_or(String::new(), |n| format!("max_concurrent_calls = {n}")),
        hex = "a".repeat(64),
        home = audit_dir.display(),
        grant = grant.display(),
    )
}

impl Server {
    fn start(audit_dir: &Path, grant: &Path, slots: Option<usize>) -> Server {
        let socket = audit_dir.join("broker.sock");
        let config = audit_dir.join("brokerd.toml");
        let _ = std::fs::remove_file(&socket);
        std::fs::write(&config, config_text(audit_dir, grant, slots)).unwrap();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .arg("serve")
            .arg(&config)
            .arg(&socket)
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the server");
        let mut ready = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut ready)
            .unwrap();
        assert_eq!(ready.trim(), "ready");
        let mut s = Server {
            child,
            socket,
            fresh_kib: 0,
        };
        std::thread::sleep(Duration::from_millis(200));
        s.fresh_kib = s.status_kib("VmRSS:");
        s
    }

    fn connect(&self) -> Client {
        let s = UnixStream::connect(&self.socket).expect("connect");
        Client {
            r: BufReader::new(s.try_clone().unwrap()),
            w: s,
        }
    }

    fn status_kib(&self, key: &str) -> u64 {
        let text = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }

    /// (idle before, idle after), in flight, peak, and how long the concurrent calls took.
    fn memory(&self) -> ((u64, u64), u64, u64, Duration) {
        std::thread::sleep(Duration::from_millis(200));
        let idle = self.status_kib("VmRSS:");
        let t = Instant::now();
        let workers: Vec<_> = (0..IN_FLIGHT)
            .map(|i| {
                let mut c = self.connect();
                std::thread::spawn(move || {
                    c.ask(&call(
                        &format!("m{i}"),
                        "slow",
                        "shell",
                        json!({"command": "cat SLOW"}),
                    ))
                })
            })
            .collect();
        // Sample while the calls sleep in the runner.
        std::thread::sleep(SLOW / 2);
        let busy = self.status_kib("VmRSS:");
        for w in workers {
            w.join().unwrap();
        }
        let took = t.elapsed();
        let hwm = self.status_kib("VmHWM:");
        std::thread::sleep(Duration::from_millis(200));
        let after = self.status_kib("VmRSS:");
        ((idle, after), busy, hwm, took)
    }

    /// Each connection on a thread of its own making `per_client` calls in turn, read_file and
    /// shell by turns; every answer's wait, and how many were not results.
    fn round(&self, conns: Vec<Client>, per_client: usize, tag: &str) -> (Vec<Duration>, usize) {
        let workers: Vec<_> = conns
            .into_iter()
            .enumerate()
            .map(|(i, mut c)| {
                let session = format!("{tag}c{i}");
                std::thread::spawn(move || {
                    (0..per_client)
                        .map(|k| {
                            let req = if (i + k) % 2 == 0 {
                                call(
                                    &session,
                                    &format!("k{k}"),
                                    "read_file",
                                    json!({"path": "a.txt"}),
                                )
                            } else {
                                call(
                                    &session,
                                    &format!("k{k}"),
                                    "shell",
                                    json!({"command": "ls -la"}),
                                )
                            };
                            c.try_ask(&req)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut took = Vec::new();
        let mut errors = 0;
        for w in workers {
            for r in w.join().unwrap_or_default() {
                match r {
                    Some(d) => took.push(d),
                    None => errors += 1,
                }
            }
        }
        (took, errors)
    }

    fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The server half: the real listener and broker with the no-op runner.
fn serve(config: &Path, socket: &Path) {
    let config = brokerd::config::load(config).expect("config");
    let policy = Policy::new(&config).expect("policy");
    let audit = Audit::open(&config.broker.audit_log).expect("audit");
    let broker = Arc::new(Broker::new(config, policy, Arc::new(NoopRunner), audit));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let listener = tokio::net::UnixListener::bind(socket).expect("bind");
        let (_stop, stop_rx) = tokio::sync::watch::channel(false);
        println!("ready");
        std::io::stdout().flush().unwrap();
        server::serve(
            listener,
            broker,
            Arc::new(brokerd::server::Peers::clients(Clients::of_uids([
                nix::unistd::getuid().as_raw(),
            ]))),
            stop_rx,
        )
        .await;
    });
}
