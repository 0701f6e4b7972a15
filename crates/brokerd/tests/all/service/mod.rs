//! brokerd end to end with a fake runner: the real `server::serve` on a Unix socket in a
//! tempdir, a `Broker` built from a config text whose grants point at tempdirs, and plain
//! `std::os::unix::net::UnixStream` lines (docs/design.md#protocol, and every kind of bad
//! input). This module is the harness; the tests are in `calls`, `refusals`, `runner`,
//! `protocol`, `lifecycle`, `secrets` and `stalls`, and other modules of this binary start the
//! same service.
//!
//! The fake runner records every `RunSpec` and acts on a word in the call's target (the shell
//! command or the file path): `FAIL`, `UNAVAIL` (the sandbox missing), `EGRESSDOWN` (the way
//! out missing), `PANIC`, `BIG`, `HOLD` (block until the test releases it), `TIDY` (hold the
//! clean-up after the answer), `SCRIBBLE` (`SCRIBBLE.txt` changed in the layers it can write
//! to), `STAGE` (a staged call: `rm a.txt` and a new `new.txt` in the
//! session's layer, through a real overlayfs mount where the kernel gives one, else written
//! as overlayfs writes them). Anything else answers `ran <tool>`. Every answer line is parsed
//! strictly as `proto::broker::Answer`, and every test ends by verifying the audit chain.

// A test: a setup step that fails is the test failing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use brokerd::audit::{self, Audit};
use brokerd::broker::{Broker, ProtocolError, AUDIT_UNAVAILABLE};
use brokerd::policy::Policy;
use brokerd::runner::podman::PodmanRuntime;
use brokerd::runner::{Failure, Mount, Reply, RunError, RunOutput, RunSpec, Runner, Unavailable};
use brokerd::server::{self, Clients, FrameError};
use proto::broker::{Answer, Body};
use proto::tools::ToolName;
use serde_json::{json, Value};
use tokio::sync::watch;

use crate::common;

mod calls;
mod lifecycle;
mod protocol;
mod refusals;
mod runner;
mod secrets;
mod stalls;

/// How long any one answer may take before the test calls it hung.
const PATIENCE: Duration = Duration::from_secs(60);
const BIG_CHARS: usize = 120_000;

// ---------------------------------------------------------------------------------------------
// The fake runner.

#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    cv: Condvar,
}

#[derive(Default)]
pub(crate) struct FakeRunner {
    specs: Mutex<Vec<RunSpec>>,
    /// Runs that have started (including held ones).
    started: AtomicUsize,
    gate: Gate,
    /// Answer the start-up preflight as a working sandbox would.
    preflight_ok: std::sync::atomic::AtomicBool,
    /// Answer the network preflight as a broken proxy path would (curl finds no proxy).
    pub(crate) network_broken: std::sync::atomic::AtomicBool,
    /// What the runner reports as a failure no retry can mend.
    terminal: Mutex<Option<String>>,
    /// What the runner reports as confinement this host does not apply.
    weakened: Mutex<Vec<String>>,
    /// `Runner::read_only_layers_write`: `SCRIBBLE` writes a read-only call's layer too.
    read_only_layers_write: std::sync::atomic::AtomicBool,
}

impl FakeRunner {
    fn specs(&self) -> Vec<RunSpec> {
        self.specs.lock().unwrap().clone()
    }

    pub(crate) fn calls(&self) -> usize {
        self.specs.lock().unwrap().len()
    }

    /// Runs that were calls, not brokerd's own preflights.
    fn tool_calls(&self) -> usize {
        let specs = self.specs.lock().unwrap();
        specs
            .iter()
            .filter(|s| s.session.as_str() != "preflight")
            .count()
    }

    fn release(&self) {
        *self.gate.open.lock().unwrap() = true;
        self.gate.cv.notify_all();
    }

    /// Waits until `n` runs have started.
    fn wait_started(&self, n: usize) {
        let deadline = Instant::now() + PATIENCE;
        while self.started.load(Ordering::SeqCst) < n {
            assert!(Instant::now() < deadline, "{n} runs never started");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// The word in the call that says what the fake does: the shell command, or the file path.
fn target_of(spec: &RunSpec) -> String {
    let v: Value = serde_json::from_slice(&spec.input).expect("runner input is JSON");
    ["command", "path", "url"]
        .iter()
        .find_map(|k| v.get(*k).and_then(Value::as_str))
        .unwrap_or_default()
        .to_string()
}

impl Runner for FakeRunner {
    fn terminal_failure(&self) -> Option<String> {
        self.terminal.lock().unwrap().clone()
    }

    fn weakened(&self) -> Vec<String> {
        self.weakened.lock().unwrap().clone()
    }

    fn read_only_layers_write(&self) -> bool {
        self.read_only_layers_write.load(Ordering::SeqCst)
    }

    /// `TIDY` in the call: the answer leaves, then the runner's clean-up holds until released.
    fn run_replying(&self, spec: &RunSpec, reply: Reply<'_>) {
        let tidy = target_of(spec).contains("TIDY");
        // As the real runners: nothing of the call runs before its decision is on disk.
        if !reply.cleared().wait(Instant::now() + spec.timeout) {
            return reply.send(Err(RunError::Failed(brokerd::runner::Failure::CouldNotRun)));
        }
        reply.send(self.run(spec));
        if tidy {
            let mut open = self.gate.open.lock().unwrap();
            while !*open {
                open = self.gate.cv.wait(open).unwrap();
            }
        }
    }

    fn run(&self, spec: &RunSpec) -> Result<RunOutput, RunError> {
        self.specs.lock().unwrap().push(spec.clone());
        self.started.fetch_add(1, Ordering::SeqCst);
        let t = target_of(spec);
        if t.contains("HOLD") {
            let mut open = self.gate.open.lock().unwrap();
            while !*open {
                open = self.gate.cv.wait(open).unwrap();
            }
        }
        if t.contains("PANIC") {
            panic!("the fake runner panics, as asked");
        }
        if t.contains("STAGE") {
            for m in spec.mounts.iter().filter(|m| m.write) {
                if let Some(layer) = &m.stage {
                    stage_into(&m.path, layer);
                }
            }
        }
        if t.contains("SCRIBBLE") {
            // `SCRIBBLE.txt` changed in each staged mount the call could write to: a writable
            // one, or any where layers cannot be mounted read-only (as overlayfs copies up).
            let writable = self.read_only_layers_write();
            for m in spec.mounts.iter().filter(|m| m.write || writable) {
                if let Some(layer) = &m.stage {
                    std::fs::write(layer.upper.join("SCRIBBLE.txt"), "scribbled\n").unwrap();
                }
            }
        }
        if t.contains("FAIL") {
            return Err(RunError::Failed(Failure::TimedOut));
        }
        if t.contains("UNAVAIL") {
            return Err(RunError::Unavailable(Unavailable::RunnerUnavailable));
        }
        if t.contains("EGRESSDOWN") {
            return Err(RunError::Unavailable(Unavailable::EgressUnavailable));
        }
        // A toolset's check: a toolset named `broken...` has no working sandbox.
        if spec.session.as_str() == "preflight" && spec.call.as_str() == "toolset" {
            let toolset = spec.toolset.as_ref().map_or("", |t| t.name.as_str());
            if toolset.starts_with("broken") {
                return Err(RunError::Unavailable(Unavailable::RunnerUnavailable));
            }
            let version = proto::tools::TOOLKIT_VERSION;
            return Ok(RunOutput {
                content: format!("{version}\nbusybox-sh\n\n[exit 0]"),
                truncated: false,
            });
        }
        let content = if spec.session.as_str() == "preflight" && spec.call.as_str() == "network" {
            if self.network_broken.load(Ordering::SeqCst) {
                format!("http_fetch: {t}: curl: (7) Failed to connect to localhost/run/egress/egress.sock port 1080 after 0 ms: Couldn't connect to server\n")
            } else {
                format!("http_fetch: {t}: curl: (97) Can't complete SOCKS5 connection to preflight.invalid. (2)\n")
            }
        } else if spec.session.as_str() == "preflight" && self.preflight_ok.load(Ordering::SeqCst) {
            let memory = brokerd::config::memory_bytes("512m").unwrap();
            // One line for each writable directory the command tests, as sh would print.
            let writable = "writable\n".repeat(t.matches("test -w '").count());
            format!("/tmp\ntmp-writable\n{writable}128\n{memory}\n")
        } else if t.contains("BIG") {
            (0..BIG_CHARS)
                .map(|i| char::from(b'a' + (i % 26) as u8))
                .collect()
        } else {
            format!("ran {}", spec.tool)
        };
        Ok(RunOutput {
            content,
            truncated: false,
        })
    }
}

/// What `STAGE` does in a staged mount: `rm a.txt && echo new > new.txt`, in the layer.
fn stage_into(real: &Path, layer: &brokerd::runner::StageMount) {
    let script = format!(
        "mount -t overlay overlay -o lowerdir={},upperdir={},workdir={},userxattr {m} || exit 77; \
         cd {m} && rm a.txt && echo new > new.txt",
        real.display(),
        layer.upper.display(),
        layer.work.display(),
        m = layer.merged.display(),
    );
    let mounted = std::process::Command::new("unshare")
        .args(["-Urm", "sh", "-c", &script])
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        // As overlayfs leaves them: a whiteout (a character device 0/0) and the new file.
        nix::sys::stat::mknod(
            &layer.upper.join("a.txt"),
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::empty(),
            0,
        )
        .unwrap();
        std::fs::write(layer.upper.join("new.txt"), "new\n").unwrap();
    }
}

// ---------------------------------------------------------------------------------------------
// The service under test.

pub(crate) struct Opts {
    pub(crate) clients: Option<Clients>,
    pub(crate) owners: Option<Clients>,
    /// Audit at this path instead of `<dir>/audit.jsonl`.
    pub(crate) audit: Option<PathBuf>,
    pub(crate) max_concurrent_calls: usize,
    pub(crate) refusal_repeats: u32,
    /// Leave out the `[runner]` section.
    pub(crate) no_runner: bool,
    /// Lines added to `[broker]` and to `[runner]`.
    pub(crate) broker_extra: &'static str,
    pub(crate) runner_extra: &'static str,
    /// The first wait before a failed preflight is tried again.
    pub(crate) preflight_retry: Option<Duration>,
    /// Run before each audit record's sync (`Audit::before_sync`).
    pub(crate) before_audit_sync: Option<Box<dyn FnMut() + Send>>,
    /// Calls run by the real `PodmanRuntime` with this program as its `podman` (a fake
    /// script), not by the fake runner.
    pub(crate) podman: Option<PathBuf>,
    /// The fake runner cannot mount a read-only call's layer read-only, as Podman cannot
    /// (`Runner::read_only_layers_write`).
    pub(crate) read_only_layers_write: bool,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            clients: None,
            owners: None,
            audit: None,
            max_concurrent_calls: 4,
            refusal_repeats: 5,
            no_runner: false,
            broker_extra: "",
            runner_extra: "",
            preflight_retry: None,
            before_audit_sync: None,
            podman: None,
            read_only_layers_write: false,
        }
    }
}

pub(crate) struct Service {
    dir: tempfile::TempDir,
    socket: PathBuf,
    audit: PathBuf,
    rw: PathBuf,
    ro: PathBuf,
    /// The `staged` grant's directory (`writes = "staged"`), holding `a.txt`.
    pub(crate) staged: PathBuf,
    /// The runner's home, whose `staged/` holds the layers.
    pub(crate) home: PathBuf,
    pub(crate) runner: Arc<FakeRunner>,
    broker: Arc<Broker>,
    stop: watch::Sender<bool>,
    rt: tokio::runtime::Runtime,
    verify_audit: bool,
}

pub(crate) fn me() -> u32 {
    nix::unistd::getuid().as_raw()
}

impl Service {
    pub(crate) fn start() -> Service {
        Service::with(Opts::default())
    }

    pub(crate) fn with(opts: Opts) -> Service {
        Service::in_dir(tempfile::tempdir().expect("tempdir"), opts)
    }

    fn in_dir(dir: tempfile::TempDir, mut opts: Opts) -> Service {
        let base = std::fs::canonicalize(dir.path()).expect("canonical tempdir");
        let rw = base.join("notes");
        let ro = base.join("ref");
        let staged = base.join("staged");
        std::fs::create_dir_all(&rw).unwrap();
        std::fs::create_dir_all(&ro).unwrap();
        std::fs::create_dir_all(&staged).unwrap();
        std::fs::write(staged.join("a.txt"), "a").unwrap();
        std::fs::write(rw.join("a.txt"), "a").unwrap();
        std::fs::write(ro.join("r.txt"), "r").unwrap();
        let audit = opts
            .audit
            .clone()
            .unwrap_or_else(|| base.join("audit.jsonl"));
        let text = format!(
            r#"
[broker]
clients = [{uid}]
audit_log = "{audit}"
refusal_repeats = {repeats}
preview_chars = 200
max_concurrent_calls = {slots}
{broker_extra}
[runner]
image = "sha256:{hex}"
home = "{home}"
{runner_extra}{podman}

[grants.auto]
mode = "auto"
tools = ["read_file", "write_file", "shell", "http_fetch"]
paths = [{{ path = "{rw}", write = true }}, {{ path = "{ro}" }}]
hosts = ["docs.example.org"]

[grants.ask]
mode = "ask"
tools = ["read_file", "write_file", "shell", "http_fetch"]
paths = [{{ path = "{rw}", write = true }}, {{ path = "{ro}" }}]
hosts = ["docs.example.org"]

[grants.safe]
mode = "safe"
tools = ["read_file", "write_file", "shell", "http_fetch"]
paths = [{{ path = "{rw}", write = true }}, {{ path = "{ro}" }}]
hosts = ["docs.example.org"]

[grants.readonly]
mode = "auto"
tools = ["read_file", "write_file", "shell"]
paths = [{{ path = "{ro}" }}]

[grants.owned]
mode = "ask"
tools = ["read_file", "write_file", "shell"]
paths = [{{ path = "{rw}", write = true }}]
approvals = "owner"

[grants.staged]
mode = "auto"
tools = ["read_file", "write_file", "shell"]
paths = [{{ path = "{staged}", write = true }}]
writes = "staged"
"#,
            uid = me(),
            audit = audit.display(),
            repeats = opts.refusal_repeats,
            slots = opts.max_concurrent_calls,
            broker_extra = opts.broker_extra,
            runner_extra = opts.runner_extra,
            podman = opts
                .podman
                .as_ref()
                .map(|p| format!("podman = \"{}\"\n", p.display()))
                .unwrap_or_default(),
            hex = "a".repeat(64),
            home = base.join("home").display(),
            rw = rw.display(),
            ro = ro.display(),
            staged = staged.display(),
        );
        let text = match opts.no_runner {
            true => {
                let runner = format!(
                    "[runner]\nimage = \"sha256:{}\"\nhome = \"{}\"\n",
                    "a".repeat(64),
                    base.join("home").display()
                );
                text.replace(&runner, "")
            }
            false => text,
        };
        let config =
            brokerd::config::parse(&text, "service.toml").unwrap_or_else(|e| panic!("{e}"));
        let policy = Policy::new(&config).expect("policy");
        let runner = Arc::new(FakeRunner::default());
        runner
            .read_only_layers_write
            .store(opts.read_only_layers_write, Ordering::SeqCst);
        let run: Arc<dyn Runner> = match &opts.podman {
            Some(_) => Arc::new(PodmanRuntime::new(config.runner.as_ref().expect("runner"))),
            None => runner.clone(),
        };
        let mut log = Audit::open(&config.broker.audit_log).expect("audit");
        if let Some(hook) = opts.before_audit_sync.take() {
            log.before_sync(hook);
        }
        let mut broker = Broker::new(config, policy, run, log);
        if let Some(first) = opts.preflight_retry {
            broker = broker.with_preflight_retry(first);
        }
        let broker = Arc::new(broker);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let socket = base.join("broker.sock");
        let listener = {
            let _in_rt = rt.enter();
            tokio::net::UnixListener::bind(&socket).expect("bind")
        };
        let clients = opts.clients.unwrap_or_else(|| Clients::of_uids([me()]));
        let (stop, stop_rx) = watch::channel(false);
        rt.spawn(server::serve(
            listener,
            broker.clone(),
            Arc::new(server::Peers {
                clients,
                owners: opts.owners.unwrap_or_default(),
            }),
            stop_rx,
        ));
        Service {
            dir,
            socket,
            verify_audit: opts.audit.is_none(),
            audit,
            rw,
            ro,
            staged,
            home: base.join("home"),
            runner,
            broker,
            stop,
            rt,
        }
    }

    /// The audit log.
    pub(crate) fn audit_path(&self) -> &Path {
        &self.audit
    }

    /// The socket, and the directory that holds it.
    pub(crate) fn socket(&self) -> &Path {
        &self.socket
    }

    pub(crate) fn connect(&self) -> Client {
        let s = UnixStream::connect(&self.socket).expect("connect");
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        Client {
            r: BufReader::new(s.try_clone().unwrap()),
            w: s,
        }
    }

    /// Runs the expiry of layers past `staged_ttl_s` once, as brokerd's minute timer does.
    pub(crate) fn expire_staged(&self) {
        self.rt.block_on(self.broker.expire_staged());
    }

    /// The audit records so far, after checking the chain.
    pub(crate) fn records(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.audit).unwrap_or_default();
        if text.is_empty() {
            return Vec::new();
        }
        audit::verify(&self.audit).unwrap_or_else(|e| panic!("audit chain: {e}"));
        text.lines()
            .map(|l| serde_json::from_str(l).expect("audit line is JSON"))
            .collect()
    }

    /// The (session, call, decision, status) of every call record.
    fn decisions(&self) -> Vec<(String, String, String, String)> {
        let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        self.records()
            .iter()
            .filter(|r| r["kind"] == "call")
            .map(|r| {
                (
                    s(r, "session"),
                    s(r, "call"),
                    s(r, "decision"),
                    s(r, "status"),
                )
            })
            .collect()
    }

    /// Waits until the audit holds `n` call records.
    fn wait_records(&self, n: usize) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let have = std::fs::read_to_string(&self.audit)
                .unwrap_or_default()
                .lines()
                .filter(|l| l.contains(r#""kind":"call""#))
                .count();
            if have >= n {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "only {have} of {n} audit records"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        self.runner.release();
        if self.verify_audit && !std::thread::panicking() {
            if let Ok(text) = std::fs::read_to_string(&self.audit) {
                if !text.is_empty() {
                    audit::verify(&self.audit).unwrap_or_else(|e| panic!("audit chain: {e}"));
                }
            }
        }
        let _ = &self.dir;
    }
}

pub(crate) struct Client {
    r: BufReader<UnixStream>,
    w: UnixStream,
}

impl Client {
    fn send_raw(&mut self, line: &[u8]) {
        self.w.write_all(line).expect("write");
        self.w.write_all(b"\n").expect("write newline");
    }

    /// Reads one answer line; it must parse as an `Answer`.
    fn answer(&mut self) -> Answer {
        let mut line = String::new();
        let n = self.r.read_line(&mut line).expect("read answer");
        assert!(n > 0, "the connection closed instead of answering");
        assert!(
            line.ends_with('\n'),
            "an answer line ends in a newline: {line:?}"
        );
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not an Answer ({e}): {line}"))
    }

    /// Sends a request without waiting for its answer.
    fn send(&mut self, v: Value) {
        self.send_raw(v.to_string().as_bytes());
    }

    /// Sends a shell call the fake runner holds until released (`cat HOLD`), without waiting
    /// for its answer.
    fn send_held(&mut self, session: &str, call: &str) {
        let hold = json!({"command": "cat HOLD"});
        self.send(call_req(session, call, "auto", "shell", &hold, None));
    }

    fn raw(&mut self, line: &[u8]) -> Answer {
        self.send_raw(line);
        self.answer()
    }

    pub(crate) fn req(&mut self, v: Value) -> Answer {
        let a = self.raw(v.to_string().as_bytes());
        assert_eq!(a.id.as_deref(), v["id"].as_str(), "the id is echoed");
        a
    }

    pub(crate) fn call(
        &mut self,
        session: &str,
        call: &str,
        grant: &str,
        tool: &str,
        args: Value,
    ) -> Answer {
        self.req(call_req(session, call, grant, tool, &args, None))
    }

    fn status(&mut self) -> proto::broker::Status {
        match self.req(json!({"op": "status", "id": "st"})).body {
            Body::Status(s) => s,
            other => panic!("status answered {other:?}"),
        }
    }

    /// True when the server closed the connection (end of file or a reset).
    fn closed(&mut self) -> bool {
        let mut buf = [0u8; 1];
        // A reset is a close too: the server closed with our request unread.
        match self.r.read(&mut buf) {
            Ok(n) => n == 0,
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        }
    }
}

pub(crate) fn call_req(
    session: &str,
    call: &str,
    grant: &str,
    tool: &str,
    args: &Value,
    approval: Option<&str>,
) -> Value {
    let mut v = json!({
        "op": "call", "id": format!("id-{call}"), "session": session, "call": call,
        "grant": grant, "tool": tool, "arguments": args.to_string(),
    });
    if let Some(t) = approval {
        v["approval"] = json!(t);
    }
    v
}

fn path(p: &Path, name: &str) -> String {
    p.join(name).display().to_string()
}

pub(crate) fn kind(a: &Answer) -> &'static str {
    a.kind().as_str()
}

pub(crate) fn message(a: &Answer) -> String {
    match &a.body {
        Body::Refused { reason } | Body::Stopped { reason } => reason.clone(),
        Body::Failed { message } | Body::Unavailable { message } | Body::Error { message } => {
            message.clone()
        }
        Body::Ask { question, .. } => question.clone(),
        other => format!("{other:?}"),
    }
}

pub(crate) fn ticket(a: &Answer) -> String {
    match &a.body {
        Body::Ask { ticket, .. } => ticket.clone(),
        other => panic!("expected ask, got {other:?}"),
    }
}
