//! The scenarios, each an assertion on what the model would see, against a
//! real brokerd that this process starts as the service user, on one backend: real rootless
//! Podman or bubblewrap over the tools image's tree. What the model sees is
//! asserted identically on both; only the checks of what is left behind differ.
//!
//! After every scenario no egress directory may be left (`<home>/run/egress/`), and no
//! sandbox: with Podman no container labelled `boxmaker`, with bwrap no `bwrap` process of the
//! service user and nothing of it in another PID namespace, whatever the scenario's own result.

use std::fs::File;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitCode, Stdio};
use std::time::{Duration, Instant};

use client::{Body, Client, Request};
use proto::broker::Backend;
use serde_json::{json, Value};

use crate::https::{BIG, HELLO, TAILNET_GREETING};
use crate::system::{self, User};

mod protected;
mod scale;
mod staged;

const RO_TEXT: &str = "hello from the read-only directory\n";
const SHELL_MS: u64 = 4000;
const OUTPUT_CAP: usize = 65536;
const GRANT: &str = "e2e";
const ASK_GRANT: &str = "e2e-ask";
const STAGED_GRANT: &str = "e2e-staged";
/// A variable only brokerd's environment has, looked for in every sandbox.
const CANARY_NAME: &str = "BOXMAKER_E2E_CANARY";
const CANARY_VALUE: &str = "planted-in-brokerd-s-environment";
/// The runner's fixed sentences (seed 003 section 6), as the model reads them.
const TIMED_OUT: &str = "the tool ran past its time limit";

/// How long a bwrap sandbox's inner processes may outlive the answer: brokerd confirms the
/// death of the bwrap it started through its pidfd; the sandbox's PID 1 gets its
/// `--die-with-parent` SIGKILL a moment later.
const SETTLE: Duration = Duration::from_secs(2);
/// How long what a call's answer did not wait for may take to go: brokerd removes an egress
/// proxy and its directory after the answer, each step bounded by its helper timeout (8 s), so
/// the proxy's `rm -f` and the check that its container is gone fit in this.
const AFTER_ANSWER: Duration = Duration::from_secs(20);

/// How long the suite waits for a call's answer (longer than any tool's time limit).
const CALL_WAIT: Duration = Duration::from_secs(90);

/// `--time-scale N` (an integer of at least 1; 1 when absent).
fn time_scale(opts: &crate::Opts) -> Result<u32, String> {
    match opts.one("time-scale") {
        None => Ok(1),
        Some(v) => match v.parse::<u32>() {
            Ok(n) if (1..=1000).contains(&n) => Ok(n),
            _ => Err(format!(
                "--time-scale {v:?} is not a whole number from 1 to 1000"
            )),
        },
    }
}

type Outcome = Result<(), String>;
type Scenario = fn(&mut Suite) -> Outcome;

struct Suite {
    backend: Backend,
    tools_root: Option<PathBuf>,
    user: User,
    podman: String,
    brokerd: PathBuf,
    config: PathBuf,
    socket: PathBuf,
    log: PathBuf,
    pid_file: PathBuf,
    work: PathBuf,
    rw: PathBuf,
    ro: PathBuf,
    /// The staged grant's directory (`writes = "staged"`).
    staged: PathBuf,
    egress_root: PathBuf,
    image: String,
    /// Podman's network for the egress proxy: `--egress-network`, or what this host's Podman
    /// has (pasta where it exists, as on NixOS; slirp4netns otherwise).
    egress_network: String,
    tailnet_log: Option<PathBuf>,
    /// Lines in the tailnet log before this run (another backend's run may have written some).
    tailnet_before: usize,
    /// `--time-scale`: every time limit in brokerd's config and every wait of the suite is
    /// multiplied by it (a slow host, e.g. a guest under QEMU's TCG).
    scale: u32,
    child: Option<Child>,
    session: String,
    calls: u32,
    /// Pad every call id to the protocol's longest, 64 characters.
    long_call_ids: bool,
    control_connections: usize,
}

pub fn run(opts: &crate::Opts) -> Result<ExitCode, String> {
    let user = User::lookup(&opts.one("user").unwrap_or_else(|| "boxmaker".into()))?;
    let work = PathBuf::from(opts.required("work")?);
    let backend = opts.one("backend").unwrap_or_else(|| "podman".into());
    let backend =
        Backend::parse(&backend).ok_or(format!("--backend {backend:?} is not podman or bwrap"))?;
    let mut suite = Suite::prepare(backend, user, &work, opts)?;
    let only = opts.all("only");
    let bench: usize = match opts.one("bench") {
        Some(n) => n
            .parse()
            .map_err(|_| format!("--bench {n:?} is not a number"))?,
        None => 0,
    };
    let scale = scale::Plan::from_opts(opts)?;
    // Where the benches' JSON goes (bench-<backend>.json, scale-<backend>.json).
    let bench_out = opts.one("bench-out").map(PathBuf::from);
    let pre = suite.leftovers()?;
    if !pre.is_empty() {
        return Err(format!(
            "the service user already has sandboxes or egress directories: {}",
            pre.join(", ")
        ));
    }
    suite.start_brokerd()?;

    let scenarios: Vec<(&str, Scenario)> = vec![
        ("read_file-works", Suite::read_file_works),
        ("write_file-works", Suite::write_file_works),
        ("shell-works", Suite::shell_works),
        ("http_fetch-works", Suite::http_fetch_works),
        (
            "only-granted-dirs-visible",
            Suite::only_granted_dirs_visible,
        ),
        ("read-only-mount-honoured", Suite::read_only_mount_honoured),
        (
            "read-write-mount-honoured",
            Suite::read_write_mount_honoured,
        ),
        match backend {
            Backend::Podman => (
                "control-egress-network-reaches-tailnet",
                Suite::control_egress_network_reaches_tailnet as Scenario,
            ),
            Backend::Bwrap => (
                "control-bwrap-share-net-reaches-tailnet",
                Suite::control_share_net_reaches_tailnet as Scenario,
            ),
        },
        (
            "shell-cannot-reach-tailnet",
            Suite::shell_cannot_reach_tailnet,
        ),
        (
            "shell-cannot-reach-host-addresses",
            Suite::shell_cannot_reach_host,
        ),
        ("shell-has-no-network", Suite::shell_has_no_network),
        ("http_fetch-refuses-other-host", Suite::fetch_other_host),
        (
            "http_fetch-refuses-redirect-to-other-host",
            Suite::fetch_redirect,
        ),
        ("http_fetch-refuses-non-443-port", Suite::fetch_port),
        (
            "http_fetch-allowed-name-public-path",
            Suite::fetch_allowed_subdomain,
        ),
        (
            "http_fetch-refuses-name-in-tailnet",
            Suite::fetch_tailnet_name,
        ),
        ("http_fetch-refuses-name-in-cgnat", Suite::fetch_cgnat_name),
        (
            "http_fetch-refuses-name-on-loopback",
            Suite::fetch_loopback_name,
        ),
        (
            "http_fetch-refuses-name-on-link-local",
            Suite::fetch_metadata_name,
        ),
        ("time-limit-kills-and-removes", Suite::time_limit),
        ("output-cap-truncates-shell", Suite::output_cap_shell),
        ("output-cap-truncates-http_fetch", Suite::output_cap_fetch),
        ("ask-then-approve", Suite::ask_then_approve),
        ("refusal-outside-grant", Suite::refusal_outside_grant),
        (
            "config-refuses-nested-and-state-grants",
            Suite::config_refuses_nested_grants,
        ),
        (
            "swapped-grant-directory-is-refused",
            Suite::swapped_grant_directory,
        ),
        (
            "sandbox-sees-nothing-of-brokerd-s-environment",
            Suite::no_brokerd_environment,
        ),
        ("no-nested-user-namespaces", Suite::no_nested_userns),
        (
            "address-randomisation-stays-on",
            Suite::address_randomisation_stays_on,
        ),
        (
            "no-setuid-program-lands-in-a-grant",
            Suite::no_setuid_program_lands,
        ),
        (
            "staged-destructive-command-leaves-the-host-alone",
            Suite::staged_destructive,
        ),
        (
            "staged-writes-are-the-session-s-own",
            Suite::staged_session_own,
        ),
        (
            "staged-commit-lands-what-the-sandbox-saw",
            Suite::staged_commit_exact,
        ),
        (
            "staged-conflict-refused-for-that-path",
            Suite::staged_conflict,
        ),
        (
            "staged-swapped-directory-is-not-followed",
            Suite::staged_swapped_dir,
        ),
        (
            "staged-protected-target-needs-naming",
            Suite::staged_protected,
        ),
        (
            "staged-deleted-directory-keeps-the-host-s-new-files",
            Suite::staged_deleted_dir_conflict,
        ),
        ("staged-size-bound", Suite::staged_size_bound),
        (
            "staged-changes-survive-a-crash",
            Suite::staged_survive_crash,
        ),
        (
            "protected-targets-hold-against-an-unreadable-command",
            Suite::protected_targets_hold,
        ),
        (
            "crash-while-a-sandbox-starts-is-swept",
            Suite::crash_while_starting,
        ),
        ("crash-during-shell-is-swept", Suite::crash_during_shell),
        (
            "crash-with-64-character-ids-is-swept",
            Suite::crash_with_long_ids,
        ),
        (
            "crash-during-http_fetch-is-swept",
            Suite::crash_during_fetch,
        ),
        (
            "tailnet-host-saw-only-the-control",
            Suite::tailnet_untouched,
        ),
        ("a-burst-of-calls-all-run", Suite::burst),
        ("sigterm-stops-cleanly", Suite::sigterm),
    ];
    let (mut passed, mut failed) = (0, 0);
    let b = backend.as_str();
    for (name, scenario) in scenarios {
        if !only.is_empty() && !only.iter().any(|o| o == name) && name != "sigterm-stops-cleanly" {
            continue;
        }
        if bench > 0 && name == "sigterm-stops-cleanly" {
            // A session of its own, whichever scenarios ran before (or none, with --only).
            suite.session = "s-bench".to_string();
            match suite.bench(bench) {
                Ok(json) => write_bench(bench_out.as_deref(), "bench", b, &json),
                Err(e) => println!("bench: {e}"),
            }
            match suite.bench_staged(bench) {
                Ok(json) => write_bench(bench_out.as_deref(), "staged", b, &json),
                Err(e) => println!("bench staged: {e}"),
            }
        }
        if let (Some(plan), "sigterm-stops-cleanly") = (&scale, name) {
            match suite.scale(plan) {
                Ok(json) => write_bench(bench_out.as_deref(), "scale", b, &json),
                Err(e) => println!("scale: {e}"),
            }
        }
        suite.session = format!("s-{name}");
        let started = Instant::now();
        let mut outcome = if suite.child.is_none() && name != "sigterm-stops-cleanly" {
            Err("brokerd is not running".to_string())
        } else {
            scenario(&mut suite)
        };
        match suite.settled_leftovers(suite.child.is_some()) {
            Ok(left) if !left.is_empty() => {
                let why = format!("left behind after the scenario: {}", left.join(", "));
                outcome = match outcome {
                    Ok(()) => Err(why),
                    Err(e) => Err(format!("{e}; {why}")),
                };
                suite.clean_up_after_failure();
            }
            Ok(_) => {}
            Err(e) => outcome = Err(format!("cannot list leftovers: {e}")),
        }
        let ms = started.elapsed().as_millis();
        match outcome {
            Ok(()) => {
                passed += 1;
                println!("ok {b}/{name}");
            }
            Err(why) => {
                failed += 1;
                println!("FAIL {b}/{name}: {why}");
            }
        }
        eprintln!("  ({b}/{name}: {ms} ms)");
    }
    suite.stop_brokerd();
    // `WORD: N passed, M failed`: run.sh runs each backend and prints the total last.
    println!("{b}: {passed} passed, {failed} failed");
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `<dir>/<what>-<backend>.json`, when `--bench-out` named a directory; a failure is printed, as
/// a bench's own failure is.
fn write_bench(dir: Option<&Path>, what: &str, backend: &str, json: &Value) {
    let Some(dir) = dir else { return };
    let file = dir.join(format!("{what}-{backend}.json"));
    let text = format!("{json:#}\n");
    if let Err(e) = std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&file, text)) {
        println!("{what}: cannot write {}: {e}", file.display());
    }
}

fn check(cond: bool, why: impl FnOnce() -> String) -> Outcome {
    if cond {
        Ok(())
    } else {
        Err(why())
    }
}

/// The egress network this host's Podman offers: pasta where Podman knows a pasta program
/// (`podman info`: host.pasta.executable, Podman 5 and NixOS), else slirp4netns.
pub fn host_egress_network(user: &User, podman: &str) -> Result<String, String> {
    Ok(host_egress_helper(user, podman)?.0)
}

/// [`host_egress_network`] and the program Podman runs for it, as `podman info` names it (empty
/// where it names none).
pub fn host_egress_helper(user: &User, podman: &str) -> Result<(String, String), String> {
    let mut c = user.command(podman);
    c.args(["info", "--format", "json"]);
    let (code, out) = system::output(c, Duration::from_secs(60))?;
    if code != 0 {
        return Err(format!("podman info failed (exit {code}): {out}"));
    }
    let start = out.find('{').unwrap_or(0);
    let info: serde_json::Value = serde_json::from_str(&out[start..])
        .map_err(|e| format!("podman info: not JSON ({e}): {out}"))?;
    let program = |net: &str| {
        info["host"][net]["executable"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let pasta = program("pasta");
    Ok(if pasta.is_empty() {
        ("slirp4netns".into(), program("slirp4netns"))
    } else {
        ("pasta".into(), pasta)
    })
}

/// A short, one-line rendering of what the model saw, for failure messages.
fn show(body: &Body) -> String {
    let s = serde_json::to_string(body).unwrap_or_default();
    if s.len() > 600 {
        format!(
            "{}…",
            &s[..s.char_indices().take(600).last().map_or(0, |(i, _)| i)]
        )
    } else {
        s
    }
}

impl Suite {
    fn prepare(
        backend: Backend,
        user: User,
        work: &Path,
        opts: &crate::Opts,
    ) -> Result<Suite, String> {
        let (image, tools_root) = match backend {
            Backend::Podman => (opts.required("image")?, None),
            Backend::Bwrap => (
                opts.one("image").unwrap_or_default(),
                Some(PathBuf::from(opts.required("tools-root")?)),
            ),
        };
        let brokerd = PathBuf::from(opts.required("brokerd")?);
        let podman = opts.one("podman").unwrap_or_else(|| "podman".into());
        let mk = |p: &Path, mode: u32| -> Result<(), String> {
            std::fs::create_dir_all(p).map_err(|e| format!("{}: {e}", p.display()))?;
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
                .map_err(|e| format!("{}: {e}", p.display()))
        };
        let (rw, ro, state) = (work.join("rw"), work.join("ro"), work.join("state"));
        let staged = work.join("staged");
        mk(work, 0o755)?;
        mk(&ro, 0o755)?;
        mk(&rw, 0o755)?;
        mk(&staged, 0o755)?;
        mk(&state, 0o750)?;
        user.chown(&rw)?;
        user.chown(&staged)?;
        user.chown(&state)?;
        let hello = ro.join("hello.txt");
        std::fs::write(&hello, RO_TEXT).map_err(|e| format!("{}: {e}", hello.display()))?;
        let config = state.join("brokerd.toml");
        // Off unless asked for: CI's host cannot enforce them (cgroup v1 for Podman, no cgroup
        // v2 delegation for bwrap). With it on, brokerd's preflight reads the limits back.
        let enforce_limits = match opts.one("enforce-limits").as_deref() {
            None | Some("false") => false,
            Some("true") => true,
            Some(v) => return Err(format!("--enforce-limits {v:?} is not true or false")),
        };
        let scale = time_scale(opts)?;
        let ms = |v: u64| v * u64::from(scale);
        let limits_note = match (enforce_limits, &tools_root) {
            (true, _) => "# Limits enforced (--enforce-limits true): the preflight reads them back.\n",
            (false, None) => "# This host's rootless Podman cannot enforce memory and pids limits (cgroup v1).\n",
            (false, Some(_)) => "# No cgroup v2 delegation on this host: rlimits only (runbook/runner.md#bwrap-unavailable).\n",
        };
        let egress_network = match (opts.one("egress-network"), &tools_root) {
            (Some(n), _) if n == "pasta" || n == "slirp4netns" => n,
            (Some(n), _) => {
                return Err(format!(
                    "--egress-network {n:?} is not pasta or slirp4netns"
                ))
            }
            (None, None) => host_egress_network(&user, &podman)?,
            (None, Some(_)) => String::new(),
        };
        let backend_keys = match &tools_root {
            None => format!(
                "backend = \"podman\"\npodman = \"{podman}\"\nimage = \"{image}\"\negress_network = \"{egress_network}\"\n{limits_note}"
            ),
            Some(_) => format!("backend = \"bwrap\"\n{limits_note}"),
        };
        let cgroup = match opts.one("bwrap-cgroup").as_deref() {
            None => String::new(),
            Some(m @ ("delegated" | "systemd-scope")) => format!("cgroup = \"{m}\"\n"),
            Some(m) => {
                return Err(format!(
                    "--bwrap-cgroup {m:?} is not delegated or systemd-scope"
                ))
            }
        };
        let bwrap_section = match &tools_root {
            None => String::new(),
            // The test variant's tree: its CA bundle also holds the suite's test CA.
            Some(root) => format!("\n[bwrap]\ntools_root = \"{}\"\n{cgroup}", root.display()),
        };
        let text = format!(
            r#"# Written by boxmaker-e2e for one run of the suite.
[broker]
clients = [0]
audit_log = "{state}/audit.jsonl"
timeout_ms = {timeout_ms}
refusal_repeats = 50
shutdown_grace_s = {grace_s}
# The suite's client (root) may commit and discard its staged changes.
owners = [0]
max_staged_bytes = {max_staged}

[runner]
{backend_keys}enforce_limits = {enforce_limits}
output_cap = {OUTPUT_CAP}
shell_ms = {shell_ms}
read_file_ms = {read_file_ms}
write_file_ms = {write_file_ms}
http_fetch_ms = {http_fetch_ms}
egress_start_ms = {egress_start_ms}
home = "{home}"

[grants.{GRANT}]
mode = "auto"
tools = ["read_file", "write_file", "shell", "http_fetch"]
paths = [ {{ path = "{rw}", write = true }}, {{ path = "{ro}" }} ]
hosts = ["ok.test", "*.ok.test"]
allow_addresses = ["192.0.2.0/24"]

[grants.{ASK_GRANT}]
mode = "ask"
tools = ["read_file", "write_file", "shell"]
paths = [ {{ path = "{rw}", write = true }} ]

[grants.{STAGED_GRANT}]
mode = "auto"
tools = ["read_file", "write_file", "shell"]
paths = [ {{ path = "{staged}", write = true }} ]
writes = "staged"
{bwrap_section}"#,
            state = state.display(),
            home = user.home.display(),
            rw = rw.display(),
            ro = ro.display(),
            staged = staged.display(),
            max_staged = staged::MAX_STAGED_BYTES,
            timeout_ms = ms(60000),
            grace_s = ms(5),
            shell_ms = ms(SHELL_MS),
            read_file_ms = ms(10000),
            write_file_ms = ms(10000),
            http_fetch_ms = ms(20000),
            egress_start_ms = ms(5000),
        );
        std::fs::write(&config, text).map_err(|e| format!("{}: {e}", config.display()))?;
        let tailnet_log = opts.one("tailnet-log").map(PathBuf::from);
        // The test hosts outlive one backend's run: only connections from now on are this run's.
        let tailnet_before = tailnet_log.as_ref().map_or(0, |l| {
            std::fs::read_to_string(l)
                .unwrap_or_default()
                .lines()
                .count()
        });
        Ok(Suite {
            backend,
            tools_root,
            egress_root: user.home.join("run").join("egress"),
            socket: state.join("broker.sock"),
            log: state.join("brokerd.log"),
            pid_file: state.join("brokerd.pid"),
            tailnet_log,
            tailnet_before,
            scale,
            user,
            podman,
            brokerd,
            config,
            work: work.to_path_buf(),
            rw,
            ro,
            staged,
            image,
            egress_network,
            child: None,
            session: String::new(),
            calls: 0,
            long_call_ids: false,
            control_connections: 0,
        })
    }

    /// `d`, times `--time-scale`.
    fn t(&self, d: Duration) -> Duration {
        d * self.scale
    }

    /// Whole seconds, times `--time-scale` (for commands run in a sandbox).
    fn secs(&self, s: u64) -> u64 {
        s * u64::from(self.scale)
    }

    // --- brokerd -----------------------------------------------------------------------------

    fn start_brokerd(&mut self) -> Outcome {
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| format!("{}: {e}", self.log.display()))?;
        let err = log.try_clone().map_err(|e| e.to_string())?;
        let mut c = self.user.command(&self.brokerd);
        c.arg("--config")
            .arg(&self.config)
            .arg("--socket")
            .arg(&self.socket)
            .env("BROKERD_LOG", "info")
            // Planted for `no_brokerd_environment`: nothing of it may reach a sandbox.
            .env(CANARY_NAME, CANARY_VALUE)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .process_group(0);
        let child = c
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.brokerd.display()))?;
        let _ = std::fs::write(&self.pid_file, format!("{}\n", child.id()));
        self.child = Some(child);
        let ready_within = self.t(Duration::from_secs(30));
        let until = Instant::now() + ready_within;
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(format!(
                        "brokerd exited with {status} at start; see {}",
                        self.log.display()
                    ));
                }
            }
            if let Ok(mut client) = Client::connect(&self.socket) {
                let _ = client.set_timeout(Some(self.t(Duration::from_secs(10))));
                let req = Request::Status {
                    id: client.next_id(),
                    v: None,
                };
                if let Ok(answer) = client.request(&req) {
                    return match answer.body {
                        Body::Status(s) if s.preflight.ok == Some(true) => Ok(()),
                        other => Err(format!("brokerd is not ready: {}", show(&other))),
                    };
                }
            }
            if Instant::now() >= until {
                return Err(format!(
                    "brokerd did not answer status within {ready_within:?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn stop_brokerd(&mut self) {
        if let Some(mut child) = self.child.take() {
            system::signal(&child, libc::SIGTERM);
            let limit = self.t(Duration::from_secs(20));
            if system::wait(&mut child, limit).is_none() {
                system::signal(&child, libc::SIGKILL);
                let _ = child.wait();
            }
        }
        let _ = std::fs::remove_file(&self.pid_file);
    }

    // --- calls -------------------------------------------------------------------------------

    fn call_as(
        &mut self,
        grant: &str,
        tool: &str,
        args: Value,
        approval: Option<String>,
    ) -> Result<Body, String> {
        // An approval re-sends exactly the call that was asked about, call id included.
        if approval.is_none() {
            self.calls += 1;
        }
        call_on(
            &self.socket,
            self.t(CALL_WAIT),
            &self.session,
            &self.call_id(),
            grant,
            tool,
            args,
            approval,
        )
    }

    /// A call of the `e2e` grant; an `ask` (a command the auto mode deems dangerous) is
    /// approved, since these scenarios test what runs, not the question.
    fn call(&mut self, tool: &str, args: Value) -> Result<Body, String> {
        let body = self.call_as(GRANT, tool, args.clone(), None)?;
        match body {
            Body::Ask { ticket, .. } => self.call_as(GRANT, tool, args, Some(ticket)),
            other => Ok(other),
        }
    }

    /// A call that must give a result: (content, truncated).
    fn result(&mut self, tool: &str, args: Value) -> Result<(String, bool), String> {
        match self.call(tool, args)? {
            Body::Result {
                content,
                truncated,
                label,
                ..
            } => {
                check(label == format!("{GRANT}/{tool}"), || {
                    format!("the label is {label:?}, not {GRANT}/{tool}")
                })?;
                Ok((content, truncated))
            }
            other => Err(format!("expected a result, got {}", show(&other))),
        }
    }

    fn shell(&mut self, command: &str) -> Result<String, String> {
        self.result("shell", json!({ "command": command }))
            .map(|(c, _)| c)
    }

    fn fetch(&mut self, url: &str) -> Result<Body, String> {
        self.call("http_fetch", json!({ "url": url }))
    }

    // --- clean-up checks ---------------------------------------------------------------------

    /// The service user's sandboxes (containers labelled `boxmaker`, or bwrap sandbox
    /// processes) and egress directories, as they are now.
    fn leftovers(&self) -> Result<Vec<String>, String> {
        let mut left = match self.backend {
            Backend::Podman => {
                let mut c = self.user.command(&self.podman);
                c.args([
                    "ps",
                    "-a",
                    "--filter",
                    "label=boxmaker",
                    "--format",
                    "{{.Names}}",
                ]);
                let (code, out) = system::output(c, self.t(Duration::from_secs(30)))?;
                if code != 0 {
                    return Err(format!("podman ps exited {code}: {out}"));
                }
                out.lines()
                    .filter(|l| !l.trim().is_empty() && !l.starts_with("time="))
                    .map(|l| format!("container {}", l.trim()))
                    .collect()
            }
            Backend::Bwrap => system::sandbox_processes(&self.user)
                .iter()
                .map(|p| format!("sandbox {p}"))
                .collect::<Vec<_>>(),
        };
        if let Ok(entries) = std::fs::read_dir(&self.egress_root) {
            for e in entries.flatten() {
                left.push(format!("egress dir {}", e.path().display()));
            }
        }
        Ok(left)
    }

    /// [`Self::leftovers`], once bwrap sandbox processes had [`SETTLE`] to die after the bwrap
    /// brokerd killed and reaped, and, with `brokerd_alive`, the clean-up brokerd does after an
    /// answer had [`AFTER_ANSWER`] to finish.
    fn settled_leftovers(&self, brokerd_alive: bool) -> Result<Vec<String>, String> {
        let started = Instant::now();
        let mut first: Option<Vec<String>> = None;
        loop {
            let left = self.leftovers()?;
            let limit = if !brokerd_alive || left.iter().all(|l| l.starts_with("sandbox ")) {
                SETTLE
            } else {
                AFTER_ANSWER
            };
            let waiting = if brokerd_alive {
                !left.is_empty()
            } else {
                left.iter().any(|l| l.starts_with("sandbox "))
            };
            if !waiting || started.elapsed() >= self.t(limit) {
                if let Some(first) = first {
                    eprintln!(
                        "  still there after the answer for {} ms: {}",
                        started.elapsed().as_millis(),
                        first.join(", ")
                    );
                }
                return Ok(left);
            }
            first.get_or_insert(left);
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn clean_up_after_failure(&self) {
        match self.backend {
            Backend::Podman => {
                let mut c = self.user.command(&self.podman);
                c.args(["ps", "-aq", "--filter", "label=boxmaker"]);
                if let Ok((0, ids)) = system::output(c, self.t(Duration::from_secs(30))) {
                    for id in ids.split_whitespace() {
                        let mut rm = self.user.command(&self.podman);
                        rm.args(["rm", "-f", id]);
                        let _ = system::output(rm, self.t(Duration::from_secs(30)));
                    }
                }
            }
            Backend::Bwrap => {
                for p in system::sandbox_processes(&self.user) {
                    system::kill_pid(p.pid);
                }
            }
        }
        if let Ok(entries) = std::fs::read_dir(&self.egress_root) {
            for e in entries.flatten() {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }

    /// The running sandboxes of this scenario's session: container names with Podman; with
    /// bwrap, `<tool>` or `egress-proxy` for each bwrap process (one call runs at a time, so
    /// every sandbox is this session's).
    fn session_sandboxes(&self) -> Vec<String> {
        if self.backend == Backend::Bwrap {
            return system::sandbox_processes(&self.user)
                .into_iter()
                .filter(|p| p.is_bwrap())
                .map(|p| {
                    let what = p.cmdline.split(" /bin/toolkit ").nth(1).unwrap_or("");
                    what.split(' ').next().unwrap_or("").to_string()
                })
                .collect();
        }
        let mut c = self.user.command(&self.podman);
        c.args(["ps", "--filter", "label=boxmaker", "--format", "{{.Names}}"]);
        let prefix = format!("boxmaker-{}-", self.session);
        match system::output(c, self.t(Duration::from_secs(30))) {
            Ok((0, out)) => out
                .lines()
                .map(str::trim)
                .filter(|l| l.starts_with(&prefix))
                .map(str::to_string)
                .collect(),
            _ => Vec::new(),
        }
    }

    // --- each tool on granted directories ------------------------------------------------------

    fn read_file_works(&mut self) -> Outcome {
        let path = self.ro.join("hello.txt");
        let (content, _) = self.result("read_file", json!({ "path": path }))?;
        check(content == RO_TEXT, || format!("read {content:?}"))
    }

    fn write_file_works(&mut self) -> Outcome {
        let path = self.rw.join("written.txt");
        let text = "written through brokerd\n";
        let (content, _) = self.result("write_file", json!({ "path": path, "content": text }))?;
        let want = format!("wrote {} bytes to {}", text.len(), path.display());
        check(content.trim_end() == want, || {
            format!("answer {content:?}, want {want:?}")
        })?;
        let on_disk = std::fs::read_to_string(&path).map_err(|e| format!("on the host: {e}"))?;
        check(on_disk == text, || {
            format!("the host file holds {on_disk:?}")
        })?;
        let uid = std::fs::metadata(&path).map_err(|e| e.to_string())?.uid();
        check(uid == self.user.uid, || {
            format!("the file is owned by uid {uid}, not the service user's")
        })
    }

    fn shell_works(&mut self) -> Outcome {
        let cmd = format!("cd {} && pwd && cat hello.txt && id -u", self.ro.display());
        let out = self.shell(&cmd)?;
        let want = format!(
            "{}\n{RO_TEXT}{}\n\n[exit 0]",
            self.ro.display(),
            self.user.uid
        );
        check(out == want, || format!("output {out:?}, want {want:?}"))
    }

    /// The page arrives; before it, brokerd proved the proxy path once (its network
    /// preflight), which `status` reports.
    fn http_fetch_works(&mut self) -> Outcome {
        match self.fetch("https://ok.test/")? {
            Body::Result { content, .. } => {
                check(content == format!("{HELLO}\n[http 200]"), || {
                    format!("content {content:?}")
                })?
            }
            other => return Err(format!("expected a result, got {}", show(&other))),
        }
        let mut client = Client::connect(&self.socket).map_err(|e| e.to_string())?;
        let _ = client.set_timeout(Some(self.t(Duration::from_secs(10))));
        let req = Request::Status {
            id: client.next_id(),
            v: None,
        };
        match client.request(&req).map_err(|e| e.to_string())?.body {
            Body::Status(s) => {
                let network = s.preflight.network.unwrap_or_default();
                eprintln!("  network preflight: {network:?}");
                check(network.ok == Some(true), || {
                    format!("the network preflight is {network:?}")
                })
            }
            other => Err(format!("status answered {}", show(&other))),
        }
    }

    fn only_granted_dirs_visible(&mut self) -> Outcome {
        let cmd = format!(
            "ls {work}; ls /var/lib/boxmaker /root /home 2>&1; ls /",
            work = self.work.display()
        );
        let out = self.shell(&cmd)?;
        check(out.starts_with("ro\nrw\n"), || {
            format!("the work directory shows more than the two granted ones: {out:?}")
        })?;
        check(!out.contains("state") && !out.contains("audit"), || {
            format!("an ungranted directory is visible: {out:?}")
        })?;
        check(
            out.matches("No such file or directory").count() == 3,
            || format!("a host directory is visible: {out:?}"),
        )
    }

    fn read_only_mount_honoured(&mut self) -> Outcome {
        let target = self.ro.join("from-shell.txt");
        let cmd = format!("echo x > {}; echo \"rc=$?\"", target.display());
        let out = self.shell(&cmd)?;
        check(
            out.contains("Read-only file system") && exit_codes(&out) == ["1"],
            || format!("the write was not stopped by the mount: {out:?}"),
        )?;
        check(!target.exists(), || "the file exists on the host".into())?;
        // write_file on the read-only directory is refused before anything runs.
        let path = self.ro.join("from-write_file.txt");
        match self.call("write_file", json!({ "path": path, "content": "x" }))? {
            Body::Refused { .. } => check(!path.exists(), || "the file exists".into()),
            other => Err(format!("write_file to the ro dir: {}", show(&other))),
        }
    }

    fn read_write_mount_honoured(&mut self) -> Outcome {
        let target = self.rw.join("from-shell.txt");
        let cmd = format!("echo from-shell > {t} && cat {t}", t = target.display());
        let out = self.shell(&cmd)?;
        check(out.starts_with("from-shell\n"), || {
            format!("output {out:?}")
        })?;
        let on_disk = std::fs::read_to_string(&target).map_err(|e| format!("host: {e}"))?;
        check(on_disk == "from-shell\n", || {
            format!("host file {on_disk:?}")
        })
    }

    // --- shell and the network ---------------------------------------------------------------

    /// Without the sandbox's `--network=none`, a container on the egress proxy's network in
    /// this namespace does reach the fake tailnet host: so the refusals below are the
    /// sandbox's doing, not a missing host.
    fn control_egress_network_reaches_tailnet(&mut self) -> Outcome {
        let nc_s = self.secs(5).to_string();
        let network = format!("--network={}", self.egress_network);
        let mut c = self.user.command(&self.podman);
        c.args([
            "run",
            "--rm",
            "--name=boxmaker-e2e-control",
            &network,
            &self.image,
            "/bin/busybox",
            "timeout",
            &nc_s,
            "/bin/busybox",
            "nc",
            "100.100.100.100",
            "80",
        ]);
        let (code, out) = system::output(c, self.t(Duration::from_secs(30)))?;
        self.control_connections += 1;
        check(out.contains(TAILNET_GREETING), || {
            format!("the control container did not reach 100.100.100.100:80 (exit {code}): {out}")
        })
    }

    /// The same for bwrap: a bare `bwrap --share-net` over the same tools root, as the service
    /// user, reaches the fake tailnet host; the tool sandbox differs from it by the network
    /// namespace brokerd's argument list unshares.
    fn control_share_net_reaches_tailnet(&mut self) -> Outcome {
        let root = self.tools_root.clone().ok_or("no tools root")?;
        let nc_s = self.secs(5).to_string();
        let mut c = self.user.command("bwrap");
        c.args([
            "--unshare-all",
            "--share-net",
            "--die-with-parent",
            "--ro-bind",
        ])
        .arg(&root)
        .args([
            "/",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "/bin/busybox",
            "timeout",
            &nc_s,
            "/bin/busybox",
            "nc",
            "100.100.100.100",
            "80",
        ]);
        let (code, out) = system::output(c, self.t(Duration::from_secs(30)))?;
        self.control_connections += 1;
        check(out.contains(TAILNET_GREETING), || {
            format!("the control sandbox did not reach 100.100.100.100:80 (exit {code}): {out}")
        })
    }

    /// `nc` to each target from the sandbox: each must fail to connect, with a reason, and
    /// neither crash nor reach anything.
    fn nc_fails(&mut self, targets: &[&str]) -> Outcome {
        let mut cmd = String::new();
        let nc_s = self.secs(5);
        for t in targets {
            let (host, port) = t.split_once(':').unwrap_or((t, "80"));
            cmd.push_str(&format!(
                "echo '== {t}'; timeout {nc_s} nc {host} {port} </dev/null 2>&1; echo \"rc=$?\"; "
            ));
        }
        let out = self.shell(&cmd)?;
        for t in targets {
            let section = out
                .split("== ")
                .find(|s| s.starts_with(&format!("{t}\n")))
                .ok_or_else(|| format!("no output for {t}: {out:?}"))?;
            check(!section.contains(TAILNET_GREETING), || {
                format!("{t} was reached: {section:?}")
            })?;
            check(
                exit_codes(section) == ["1"] && section.contains("can't connect"),
                || {
                    format!("{t}: nc did not fail to connect as expected (a crash or a hang is not a refusal): {section:?}")
                },
            )?;
        }
        Ok(())
    }

    fn shell_cannot_reach_tailnet(&mut self) -> Outcome {
        self.nc_fails(&["100.100.100.100:80", "100.100.100.100:443"])
    }

    fn shell_cannot_reach_host(&mut self) -> Outcome {
        // The namespace's own addresses: the HTTPS host, the nameserver (TCP), slirp4netns's
        // gateway and DNS addresses.
        self.nc_fails(&[
            "192.0.2.1:443",
            "192.0.2.2:443",
            "192.0.2.53:53",
            "10.0.2.2:80",
            "10.0.2.3:53",
        ])
    }

    fn shell_has_no_network(&mut self) -> Outcome {
        let w = self.secs(5);
        let out = self.shell(&format!(
            "sed 1,2d /proc/net/dev | cut -d: -f1 | tr -d ' '; echo '== route'; cat /proc/net/route; echo '== resolv'; cat /etc/resolv.conf; \
             echo '== wget'; timeout {w} wget -q -O- https://ok.test/ 2>&1; echo \"rc=$?\"; \
             echo '== dns'; timeout {w} nslookup ok.test 192.0.2.53 2>&1; echo \"rc=$?\""
        ))?;
        check(out.starts_with("lo\n== route\n"), || {
            format!("the sandbox has an interface besides lo: {out:?}")
        })?;
        let route = out.split("== route\n").nth(1).unwrap_or("");
        let route_lines = route
            .split("== resolv")
            .next()
            .unwrap_or("")
            .lines()
            .count();
        check(route_lines <= 1, || {
            format!("the sandbox has routes: {route:?}")
        })?;
        let wget = out.split("== wget\n").nth(1).unwrap_or("");
        let wget = wget.split("== dns").next().unwrap_or("");
        check(!wget.contains(HELLO), || {
            format!("wget reached ok.test: {wget:?}")
        })?;
        check(
            exit_codes(wget) == ["1"] && wget.contains("bad address"),
            || {
                format!(
                    "wget did not fail to resolve (a crash or a hang is not a refusal): {wget:?}"
                )
            },
        )?;
        let dns = out.split("== dns\n").nth(1).unwrap_or("");
        check(
            !dns.contains("192.0.2.1") && exit_codes(dns) == ["1"],
            || format!("nslookup got an answer or crashed: {dns:?}"),
        )
    }

    // --- http_fetch --------------------------------------------------------------------------

    fn fetch_other_host(&mut self) -> Outcome {
        match self.fetch("https://other.test/")? {
            Body::Refused { reason } => check(
                reason.contains("other.test is not one of the grant's hosts"),
                || format!("reason {reason:?}"),
            ),
            other => Err(format!("expected a refusal, got {}", show(&other))),
        }
    }

    /// What the model sees when curl fails: a result that is one `http_fetch: <url>: ...`
    /// line (seed 003 section 4), with no body.
    /// An http_fetch the proxy refused: the toolkit's one line with curl's report of the
    /// proxy's SOCKS5 reply (RFC 1928: 2 not allowed, 4 host unreachable) for `host`.
    fn fetch_refused_by_proxy(&mut self, url: &str, host: &str, reply: u8) -> Outcome {
        // curl before 8.9 (Debian 12) says "Can't complete", 8.9 and later (NixOS) "cannot
        // complete"; the rest of the line, the host and the reply code, is the same.
        let wants = ["Can't", "cannot"]
            .map(|verb| format!("{verb} complete SOCKS5 connection to {host}. ({reply})"));
        self.fetch_fails_in_curl(url, &wants)
    }

    /// `wants`: curl's report, in any one of its spellings.
    fn fetch_fails_in_curl(&mut self, url: &str, wants: &[String]) -> Outcome {
        match self.fetch(url)? {
            Body::Result { content, .. } => {
                let prefix = format!("http_fetch: {url}: ");
                check(
                    content.starts_with(&prefix) && content.trim_end().lines().count() == 1,
                    || format!("content {content:?} is not one {prefix:?} line"),
                )?;
                check(
                    !content.contains(HELLO) && !content.contains("[http"),
                    || format!("a body came back: {content:?}"),
                )?;
                check(wants.iter().any(|w| content.contains(w.as_str())), || {
                    format!("content {content:?} says none of {wants:?}")
                })
            }
            other => Err(format!(
                "expected a result with curl's error, got {}",
                show(&other)
            )),
        }
    }

    fn fetch_redirect(&mut self) -> Outcome {
        // The proxy answers 2 (not allowed) for other.test.
        self.fetch_refused_by_proxy("https://ok.test/redirect-other", "other.test", 2)
    }

    fn fetch_port(&mut self) -> Outcome {
        match self.fetch("https://ok.test:8443/")? {
            Body::Refused { reason } => {
                check(reason.contains("443"), || format!("reason {reason:?}"))
            }
            other => Err(format!("expected a refusal, got {}", show(&other))),
        }
    }

    /// The contrast for the four below: another name of the same pattern that resolves into
    /// allow_addresses is fetched.
    fn fetch_allowed_subdomain(&mut self) -> Outcome {
        match self.fetch("https://www.ok.test/")? {
            Body::Result { content, .. } => {
                check(content == format!("{HELLO}\n[http 200]"), || {
                    format!("content {content:?}")
                })
            }
            other => Err(format!("expected a result, got {}", show(&other))),
        }
    }

    fn fetch_tailnet_name(&mut self) -> Outcome {
        self.fetch_refused_by_proxy("https://tailnet.ok.test/", "tailnet.ok.test", 4)
    }

    fn fetch_cgnat_name(&mut self) -> Outcome {
        self.fetch_refused_by_proxy("https://cgnat.ok.test/", "cgnat.ok.test", 4)
    }

    fn fetch_loopback_name(&mut self) -> Outcome {
        self.fetch_refused_by_proxy("https://loop.ok.test/", "loop.ok.test", 4)
    }

    fn fetch_metadata_name(&mut self) -> Outcome {
        self.fetch_refused_by_proxy("https://meta.ok.test/", "meta.ok.test", 4)
    }

    // --- limits ------------------------------------------------------------------------------

    fn time_limit(&mut self) -> Outcome {
        // The command outlives the limit by far: an answer near the limit is the kill's.
        let started = Instant::now();
        let command = format!("sleep {}", self.secs(30));
        let body = self.call("shell", json!({ "command": command }))?;
        let took = started.elapsed();
        match body {
            Body::Failed { message } => {
                check(message == TIMED_OUT, || format!("message {message:?}"))?
            }
            other => return Err(format!("expected failed, got {}", show(&other))),
        }
        let limit = self.t(Duration::from_millis(SHELL_MS));
        let slack = self.t(Duration::from_secs(15));
        check(took >= limit && took < limit + slack, || {
            format!("the answer came after {took:?} for a {limit:?} limit")
        })
    }

    fn output_cap_shell(&mut self) -> Outcome {
        let (content, truncated) = self.result(
            "shell",
            json!({ "command": "yes 0123456789 | head -c 1000000" }),
        )?;
        check(truncated, || "truncated is false".into())?;
        check(content.starts_with("0123456789\n"), || {
            format!("content starts {:?}", &content[..content.len().min(40)])
        })
    }

    fn output_cap_fetch(&mut self) -> Outcome {
        match self.fetch("https://ok.test/big")? {
            Body::Result {
                content, truncated, ..
            } => {
                check(truncated, || "truncated is false".into())?;
                check(content.starts_with("xxxx") && content.len() < BIG, || {
                    format!("content of {} bytes", content.len())
                })
            }
            other => Err(format!("expected a result, got {}", show(&other))),
        }
    }

    // --- decisions ---------------------------------------------------------------------------

    fn ask_then_approve(&mut self) -> Outcome {
        let path = self.rw.join("asked.txt");
        let args = json!({ "path": path, "content": "approved\n" });
        let ticket = match self.call_as(ASK_GRANT, "write_file", args.clone(), None)? {
            Body::Ask { ticket, question } => {
                check(question.contains(&path.display().to_string()), || {
                    format!("the question does not name the file: {question:?}")
                })?;
                ticket
            }
            other => return Err(format!("expected ask, got {}", show(&other))),
        };
        check(!path.exists(), || {
            "the file was written before approval".into()
        })?;
        match self.call_as(ASK_GRANT, "write_file", args.clone(), Some(ticket.clone()))? {
            Body::Result { content, .. } => check(content.starts_with("wrote 9 bytes"), || {
                format!("content {content:?}")
            })?,
            other => return Err(format!("the approved call: {}", show(&other))),
        }
        check(
            std::fs::read_to_string(&path).ok().as_deref() == Some("approved\n"),
            || "the approved write is not on the host".into(),
        )?;
        // A ticket is good for one call.
        match self.call_as(ASK_GRANT, "write_file", args, Some(ticket))? {
            Body::Refused { .. } | Body::Ask { .. } => Ok(()),
            other => Err(format!(
                "a used ticket was accepted again: {}",
                show(&other)
            )),
        }
    }

    fn refusal_outside_grant(&mut self) -> Outcome {
        match self.call("read_file", json!({ "path": "/etc/passwd" }))? {
            Body::Refused { reason } => check(reason.contains("/etc/passwd"), || {
                format!("reason {reason:?}")
            }),
            other => Err(format!("expected a refusal, got {}", show(&other))),
        }
    }

    // --- ways out of the sandbox --------------------------------------------------------------

    /// `brokerd check-config` refuses, naming both paths, a grant directory inside a
    /// writable one (a sandbox of the outer one could swap the inner one for a symlink), the
    /// same in either order (bwrap used to bind a writable parent over a read-only child),
    /// and a grant of the service user's home.
    fn config_refuses_nested_grants(&mut self) -> Outcome {
        let base = std::fs::read_to_string(&self.config).map_err(|e| e.to_string())?;
        let (inner, p, p_ro) = (
            self.rw.join("inner"),
            self.work.join("p"),
            self.work.join("p").join("ro"),
        );
        for d in [&inner, &p_ro] {
            std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
        }
        let home = self.user.home.clone();
        let cases = [
            (
                format!("[grants.nest]\ntools = [\"shell\"]\npaths = [ {{ path = \"{}\" }} ]\n", inner.display()),
                format!("{:?} lies inside {:?}", inner.display().to_string(), self.rw.display().to_string()),
            ),
            (
                format!("[grants.p]\ntools = [\"shell\"]\npaths = [ {{ path = \"{}\" }}, {{ path = \"{}\", write = true }} ]\n", p_ro.display(), p.display()),
                format!("{:?} lies inside {:?}", p_ro.display().to_string(), p.display().to_string()),
            ),
            (
                format!("[grants.h]\ntools = [\"read_file\"]\npaths = [ {{ path = \"{}\" }} ]\n", home.display()),
                format!("{:?} overlaps {:?}, the service home", home.display().to_string(), home.display().to_string()),
            ),
        ];
        let file = self.work.join("state").join("check.toml");
        let mut outcome = Ok(());
        for (grant, want) in cases {
            std::fs::write(&file, format!("{base}\n{grant}")).map_err(|e| e.to_string())?;
            let mut c = std::process::Command::new(&self.brokerd);
            c.arg("check-config").arg(&file);
            let (code, text) = system::output(c, self.t(Duration::from_secs(30)))?;
            if code != 1 || !text.contains(&want) {
                outcome = Err(format!(
                    "check-config exited {code}, said {text:?}; wanted {want:?}"
                ));
                break;
            }
        }
        let _ = std::fs::remove_file(&file);
        let _ = std::fs::remove_dir_all(&p);
        let _ = std::fs::remove_dir(&inner);
        outcome
    }

    /// A grant directory replaced by a symlink to `/` between calls (by anything on the host):
    /// the next call is a refusal that names it, the sandbox never starts, the operator's log
    /// says so; put back, calls run again.
    fn swapped_grant_directory(&mut self) -> Outcome {
        let away = self.work.join("ro.away");
        std::fs::rename(&self.ro, &away).map_err(|e| format!("move ro away: {e}"))?;
        let linked = std::os::unix::fs::symlink("/", &self.ro);
        let ro = self.ro.display().to_string();
        let answer = match linked {
            Ok(()) => self.call(
                "shell",
                json!({ "command": format!("ls {ro}; cat {ro}/etc/passwd") }),
            ),
            Err(e) => Err(format!("symlink: {e}")),
        };
        let _ = std::fs::remove_file(&self.ro);
        std::fs::rename(&away, &self.ro).map_err(|e| format!("move ro back: {e}"))?;
        match answer? {
            Body::Refused { reason } => check(
                reason.contains(&format!(
                    "grant directory {ro} is reached through a symbolic link"
                )),
                || format!("reason {reason:?}"),
            )?,
            other => return Err(format!("expected a refusal, got {}", show(&other))),
        }
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        check(
            log.lines()
                .any(|l| l.contains(&ro) && l.contains(brokerd::runbook::GRANT_DIRECTORY_CHANGED)),
            || "brokerd's log has no line for the changed directory".into(),
        )?;
        let hello = self.ro.join("hello.txt");
        let (content, _) = self.result("read_file", json!({ "path": hello }))?;
        check(content == RO_TEXT, || {
            format!("after putting it back: {content:?}")
        })
    }

    /// Nothing of brokerd's environment is readable in any process of the sandbox (bwrap's own
    /// PID 1 there used to keep it, in /proc/1/environ).
    fn no_brokerd_environment(&mut self) -> Outcome {
        let cmd =
            "for f in /proc/[0-9]*/environ; do echo \"== $f\"; tr '\\0' '\\n' < \"$f\"; echo; done";
        let (content, _) = self.result("shell", json!({ "command": cmd }))?;
        check(content.contains("== /proc/1/environ"), || {
            format!("the sandbox's PID 1 was not read: {content:?}")
        })?;
        check(
            !content.contains(CANARY_NAME) && !content.contains(CANARY_VALUE),
            || format!("brokerd's environment is visible in the sandbox: {content:?}"),
        )
    }

    /// A sandbox cannot make a user namespace of its own (the usual first step of a kernel
    /// exploit): bwrap by `--disable-userns`, Podman by the service user's seccomp profile.
    /// The fork and a thread of an ordinary pipeline still work.
    fn no_nested_userns(&mut self) -> Outcome {
        let cmd = "busybox unshare -U -r true 2>&1 && echo nested-userns-made; \
                   busybox unshare -U true 2>&1 && echo nested-userns-made; \
                   echo a | cat | wc -c; sleep 0 & wait; echo done";
        let (content, _) = self.result("shell", json!({ "command": cmd }))?;
        check(!content.contains("nested-userns-made"), || {
            format!("the sandbox made a user namespace: {content:?}")
        })?;
        check(content.contains("2\ndone\n"), || {
            format!("an ordinary pipeline failed: {content:?}")
        })
    }

    /// A sandbox cannot switch address space randomisation off (`setarch -R`, personality
    /// `ADDR_NO_RANDOMIZE`): bwrap's seccomp filter refuses it with EPERM, Podman's default
    /// profile with ENOSYS. Programs still run with the default personality.
    fn address_randomisation_stays_on(&mut self) -> Outcome {
        let cmd = "busybox linux64 -R cat /proc/self/personality 2>&1 || echo refused; \
                   cat /proc/self/personality";
        let content = self.shell(cmd)?;
        check(
            content.contains("personality(0x40000): ") && content.contains("refused\n"),
            || format!("the sandbox switched randomisation off, or could not try: {content:?}"),
        )?;
        check(
            !content.contains("00040000") && content.contains("00000000\n"),
            || format!("the sandbox's personality is not the default: {content:?}"),
        )
    }

    /// A sandbox cannot leave a setuid or setgid program in a directory it may write: on the
    /// host it would be the service user's, and any local user running it would act as the
    /// service user. bwrap's filter and the service user's Podman profile
    /// (scripts/seccomp-nouserns.jq) refuse every mode with either bit, by chmod, by install
    /// and at creation; ordinary modes still work.
    fn no_setuid_program_lands(&mut self) -> Outcome {
        let dir = self.rw.join("setuid");
        let cmd = format!(
            "mkdir -p {d} && cd {d} && echo x > p && chmod 755 p && echo plain-ok; \
             chmod 4755 p 2>/dev/null || echo setuid-refused; \
             chmod g+s p 2>/dev/null || echo setgid-refused; \
             install -m 6755 p q 2>/dev/null || echo install-refused; ls -l",
            d = dir.display()
        );
        let out = self.shell(&cmd)?;
        for want in [
            "plain-ok",
            "setuid-refused",
            "setgid-refused",
            "install-refused",
        ] {
            check(out.contains(want), || format!("no {want:?} in {out:?}"))?;
        }
        use std::os::unix::fs::PermissionsExt;
        for entry in std::fs::read_dir(&dir).map_err(|e| format!("host: {e}"))? {
            let entry = entry.map_err(|e| format!("host: {e}"))?;
            let mode = entry
                .metadata()
                .map_err(|e| format!("host: {e}"))?
                .permissions()
                .mode();
            check(mode & 0o6000 == 0, || {
                format!("{} has mode {mode:o} on the host", entry.path().display())
            })?;
        }
        let _ = std::fs::remove_dir_all(&dir);
        Ok(())
    }

    /// The id of the current call: `c<n>`, or padded to 64 characters.
    fn call_id(&self) -> String {
        let id = format!("c{}-", self.calls);
        match self.long_call_ids {
            true => format!("{id:x<64}"),
            false => id.trim_end_matches('-').to_string(),
        }
    }

    // --- crashes -----------------------------------------------------------------------------

    /// Starts a call on another thread, waits until `ready` says so, kills brokerd with
    /// SIGKILL and checks the call was not answered. Returns what `ready` last saw.
    fn kill_brokerd_when(
        &mut self,
        tool: &str,
        args: Value,
        ready: fn(&Suite) -> Option<Vec<String>>,
    ) -> Result<Vec<String>, String> {
        self.calls += 1;
        let (socket, session, call) = (self.socket.clone(), self.session.clone(), self.call_id());
        let tool = tool.to_string();
        let wait = self.t(CALL_WAIT);
        let caller = std::thread::spawn(move || {
            call_on(&socket, wait, &session, &call, GRANT, &tool, args, None)
        });
        let up_within = self.t(Duration::from_secs(15));
        let until = Instant::now() + up_within;
        let seen = loop {
            if let Some(seen) = ready(self) {
                break seen;
            }
            if Instant::now() >= until {
                return Err(format!(
                    "the sandbox did not come up within {up_within:?} (saw {:?})",
                    self.session_sandboxes()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let Some(mut child) = self.child.take() else {
            return Err("brokerd is not running".into());
        };
        system::signal(&child, libc::SIGKILL);
        let _ = child.wait();
        let answer = caller
            .join()
            .map_err(|_| "the calling thread panicked".to_string())?;
        check(answer.is_err(), || {
            format!("the call was answered although brokerd was killed: {answer:?}")
        })?;
        Ok(seen)
    }

    /// Kills brokerd while the tool runs, starts it again and lets the clean-up check judge.
    /// With Podman the containers outlive brokerd for its restart to sweep; with bwrap the
    /// sandboxes must die with it and only the egress directory (`want_dir_left`) stays.
    fn crash_during(
        &mut self,
        tool: &str,
        args: Value,
        ready: fn(&Suite) -> Option<Vec<String>>,
        want_dir_left: bool,
    ) -> Outcome {
        let seen = self.kill_brokerd_when(tool, args, ready)?;
        let left = match self.backend {
            Backend::Podman => {
                let left = self.leftovers()?;
                check(!left.is_empty(), || {
                    format!("nothing was left to sweep after the kill (saw {seen:?} before it)")
                })?;
                left
            }
            // A sandbox that is up dies with brokerd (brokerd's parent-death signal for bwrap,
            // bwrap's --die-with-parent inside); only an http_fetch's egress directory stays.
            Backend::Bwrap => {
                let left = self.settled_leftovers(false)?;
                check(!left.iter().any(|l| l.starts_with("sandbox ")), || {
                    format!(
                        "sandboxes outlived the killed brokerd by {:?}: {}",
                        self.t(SETTLE),
                        left.join(", ")
                    )
                })?;
                check(left.is_empty() != want_dir_left, || {
                    format!("after the kill, left: {left:?} (saw {seen:?} before it)")
                })?;
                left
            }
        };
        eprintln!("  left by the crash: {}", left.join(", "));
        self.start_brokerd()
            .map_err(|e| format!("brokerd did not start again: {e}"))
    }

    fn crash_during_shell(&mut self) -> Outcome {
        let command = format!("sleep {}", self.secs(30));
        self.crash_during(
            "shell",
            json!({ "command": command }),
            |s| match s.backend {
                // The sandbox is up once its tool's `sleep` runs.
                Backend::Bwrap => {
                    let p = system::sandbox_processes(&s.user);
                    p.iter()
                        .any(|p| p.cmdline.starts_with("sleep "))
                        .then(|| s.session_sandboxes())
                }
                Backend::Podman => Some(s.session_sandboxes()).filter(|n| !n.is_empty()),
            },
            false,
        )
    }

    /// The same crash with a session and call id of 64 characters each: the container's name
    /// is then 140 characters, and the restart's sweep must still find it (by its label).
    fn crash_with_long_ids(&mut self) -> Outcome {
        self.session = format!("{:x<64}", self.session);
        self.long_call_ids = true;
        let outcome = self.crash_during_shell();
        self.long_call_ids = false;
        outcome
    }

    fn crash_during_fetch(&mut self) -> Outcome {
        // /slow keeps the fetch open, with its proxy and egress directory.
        self.crash_during(
            "http_fetch",
            json!({ "url": "https://ok.test/slow" }),
            |s| {
                let names = s.session_sandboxes();
                let proxy = |n: &String| n.ends_with("-egress") || n == "egress-proxy";
                let dir = std::fs::read_dir(&s.egress_root).is_ok_and(|mut d| d.next().is_some());
                let up = match s.backend {
                    // Both sandboxes are up once the proxy and the tool's curl run in them.
                    Backend::Bwrap => {
                        let p = system::sandbox_processes(&s.user);
                        p.iter().any(|p| p.cmdline.starts_with("/bin/curl "))
                            && p.iter()
                                .any(|p| !p.is_bwrap() && p.cmdline.contains("egress-proxy"))
                    }
                    Backend::Podman => names.iter().any(proxy) && names.iter().any(|n| !proxy(n)),
                };
                (up && dir).then_some(names)
            },
            true,
        )
    }

    /// Kills brokerd at the first sign of a call's sandbox (bwrap just started, or the
    /// `podman run` process there before its container), when nothing of it is set to die
    /// with brokerd yet. Whatever that leaves must be gone once brokerd has started again
    /// (its sweep), and stay gone: no orphaned `podman run` may create its container later.
    fn crash_while_starting(&mut self) -> Outcome {
        let command = format!("sleep {}", self.secs(30));
        let seen = self.kill_brokerd_when("shell", json!({ "command": command }), |s| {
            let seen = match s.backend {
                Backend::Bwrap => s.session_sandboxes(),
                Backend::Podman => {
                    let name = format!("--name=boxmaker-{}-", s.session);
                    system::podman_processes(&s.user)
                        .into_iter()
                        .filter(|p| p.cmdline.contains(&name))
                        .map(|p| p.to_string())
                        .collect()
                }
            };
            Some(seen).filter(|s| !s.is_empty())
        })?;
        let before = self.leftovers()?;
        eprintln!(
            "  killed on seeing {}; left before the restart: {}",
            seen.join(", "),
            if before.is_empty() {
                "nothing".to_string()
            } else {
                before.join(", ")
            }
        );
        self.start_brokerd()
            .map_err(|e| format!("brokerd did not start again: {e}"))?;
        std::thread::sleep(self.t(SETTLE));
        let left = self.leftovers()?;
        check(left.is_empty(), || {
            format!("left after the restart's sweep: {}", left.join(", "))
        })
    }

    /// Calls back to back each get their result. Every bwrap sandbox leaves its PID 1 behind
    /// for a moment after it answers; brokerd adopts and reaps them, so they never pile up
    /// against the service user's process limit (`pids`, RLIMIT_NPROC), as they did while
    /// this host's slow init was left to reap them. Podman gets a few, as it is 40x slower.
    fn burst(&mut self) -> Outcome {
        let n = match self.backend {
            Backend::Bwrap => 200,
            Backend::Podman => 3,
        };
        let path = self.ro.join("hello.txt");
        let started = Instant::now();
        for i in 1..=n {
            let (content, _) = self
                .result("read_file", json!({ "path": path }))
                .map_err(|e| format!("call {i} of {n}: {e}"))?;
            check(content == RO_TEXT, || {
                format!("call {i} of {n} read {content:?}")
            })?;
        }
        eprintln!(
            "  {n} calls in {} ms; zombies of the service user now: {}",
            started.elapsed().as_millis(),
            system::zombies(&self.user)
        );
        Ok(())
    }

    /// Every connection the fake tailnet host saw came from the control container.
    fn tailnet_untouched(&mut self) -> Outcome {
        let Some(log) = &self.tailnet_log else {
            return Ok(());
        };
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let text = text
            .lines()
            .skip(self.tailnet_before)
            .collect::<Vec<_>>()
            .join("\n");
        let n = text.lines().count();
        check(n == self.control_connections, || {
            format!(
                "the tailnet host saw {n} connection(s), the control made {}: {text}",
                self.control_connections
            )
        })
    }

    fn sigterm(&mut self) -> Outcome {
        let Some(mut child) = self.child.take() else {
            return Err("brokerd is not running".into());
        };
        system::signal(&child, libc::SIGTERM);
        let limit = self.t(Duration::from_secs(20));
        let status = system::wait(&mut child, limit);
        let _ = std::fs::remove_file(&self.pid_file);
        match status {
            Some(s) if s.success() => Ok(()),
            Some(s) => Err(format!("brokerd exited with {s} on SIGTERM")),
            None => {
                system::signal(&child, libc::SIGKILL);
                let _ = child.wait();
                Err(format!("brokerd did not stop within {limit:?} of SIGTERM"))
            }
        }
    }
}

/// Every path under `dir`, relative and sorted, with what it is: a link's target, a file's
/// content, or `dir`.
fn tree_of(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let rel = p.strip_prefix(dir).unwrap_or(&p).display().to_string();
            let what = match std::fs::symlink_metadata(&p) {
                Ok(m) if m.file_type().is_symlink() => std::fs::read_link(&p)
                    .map(|t| format!("-> {}", t.display()))
                    .unwrap_or_default(),
                Ok(m) if m.is_dir() => {
                    stack.push(p.clone());
                    "dir".to_string()
                }
                Ok(_) => std::fs::read_to_string(&p).unwrap_or_default(),
                Err(e) => e.to_string(),
            };
            out.push((rel, what));
        }
    }
    out.sort();
    out
}

/// The exit codes a shell's output reports on `rc=N` lines of their own, in order (`rc=127`
/// is not `rc=1`).
fn exit_codes(out: &str) -> Vec<&str> {
    out.lines().filter_map(|l| l.strip_prefix("rc=")).collect()
}

/// One call on a fresh connection.
#[allow(clippy::too_many_arguments)]
fn call_on(
    socket: &Path,
    wait: Duration,
    session: &str,
    call: &str,
    grant: &str,
    tool: &str,
    args: Value,
    approval: Option<String>,
) -> Result<Body, String> {
    let mut client = Client::connect(socket).map_err(|e| e.to_string())?;
    client.set_timeout(Some(wait)).map_err(|e| e.to_string())?;
    let req = Request::Call {
        id: client.next_id(),
        v: None,
        session: session.to_string(),
        call: call.to_string(),
        grant: grant.to_string(),
        tool: tool.to_string(),
        arguments: args.to_string(),
        approval,
    };
    client
        .request(&req)
        .map(|a| a.body)
        .map_err(|e| e.to_string())
}

/// The bare command a bench compares brokerd with, built by brokerd's own code.
enum BareRunner {
    Podman(brokerd::runner::podman::PodmanRuntime),
    Bwrap(
        brokerd::runner::bwrap::BwrapRuntime,
        brokerd::runner::bwrap::RootLayout,
    ),
}

impl Suite {
    /// Wall time per call of each tool through brokerd, next to the bare command of the
    /// argument list brokerd builds for the same call: `podman run` of
    /// `PodmanRuntime::tool_args` (for http_fetch the proxy's `egress_args` around it), or
    /// `bwrap` of `BwrapRuntime::build_argv` (and `proxy_argv`), as the service user. The
    /// bare side has no rlimits, no pidfd and no output capture beyond reading stdout.
    /// Returns the rows as the bench's JSON.
    fn bench(&mut self, n: usize) -> Result<Value, String> {
        use brokerd::runner::bwrap::{BwrapRuntime, RootLayout};
        use brokerd::runner::podman::PodmanRuntime;
        use brokerd::runner::{Egress, Mount, RunSpec};
        use proto::tools::ToolName;
        let config = brokerd::config::load(&self.config).map_err(|e| e.to_string())?;
        let rc = config.runner.clone().ok_or("no [runner]")?;
        let bare_runner = match self.backend {
            Backend::Podman => BareRunner::Podman(PodmanRuntime::new(&rc)),
            Backend::Bwrap => {
                let bc = config.bwrap.clone().ok_or("no [bwrap]")?;
                let layout = RootLayout::read(&bc.tools_root)
                    .map_err(|e| format!("{}: {e}", bc.tools_root.display()))?;
                BareRunner::Bwrap(BwrapRuntime::new(&rc, &bc), layout)
            }
        };
        let bare_name = match self.backend {
            Backend::Podman => "bare podman run",
            Backend::Bwrap => "bare bwrap",
        };
        let grant = &config.grants[GRANT];
        let cases: Vec<(ToolName, Value)> = vec![
            (
                ToolName::ReadFile,
                json!({ "path": self.ro.join("hello.txt") }),
            ),
            (
                ToolName::WriteFile,
                json!({ "path": self.rw.join("bench.txt"), "content": "bench\n" }),
            ),
            (ToolName::Shell, json!({ "command": "echo hi" })),
            (ToolName::HttpFetch, json!({ "url": "https://ok.test/" })),
        ];
        let b = self.backend.as_str();
        let mut rows = Vec::new();
        for (tool, args) in cases {
            self.await_reaped_zombies(0);
            // One warm-up of each side, so the page cache holds what both start.
            self.result(tool.as_str(), args.clone())?;
            let mut through = Vec::new();
            let mut bare = Vec::new();
            // What-if, not what brokerd does: on Podman, http_fetch's tool container started
            // beside its proxy, its input held until the socket is seen and `run -d` has exited
            // (`bare_podman_beside`).
            let mut beside = Vec::new();
            // The two sides take turns call by call (which goes first alternates), so the
            // host's drift falls on both alike. Each call starts once what the one before it
            // left is gone: no egress directory (brokerd removes it last, after the answer),
            // as when a model thinks between calls. Back to back is the scale bench's part.
            for i in 0..=n {
                let through_first = i % 2 == 0;
                if i > 0 && through_first {
                    self.await_settled();
                    let t = Instant::now();
                    let (_, _) = self.result(tool.as_str(), args.clone())?;
                    through.push(t.elapsed());
                }
                let spec = RunSpec {
                    session: proto::ident::Ident::fixed("bench"),
                    call: proto::ident::Ident::parse(format!(
                        "{}-{i}",
                        tool.as_str().replace('_', "-")
                    ))
                    .map_err(|e| e.to_string())?,
                    tool,
                    input: serde_json::to_vec(&args).unwrap_or_default(),
                    mounts: grant
                        .paths
                        .iter()
                        .map(|p| Mount::at(&p.path, p.write && tool != ToolName::ReadFile))
                        .collect::<Result<_, _>>()
                        .map_err(|e| e.to_string())?,
                    egress: (tool == ToolName::HttpFetch).then(|| Egress {
                        hosts: grant.hosts.clone(),
                        allow_addresses: grant.allow_addresses.clone(),
                    }),
                    timeout: self.t(Duration::from_secs(30)),
                };
                let name = format!("boxmaker-bench-{}-{i}", spec.call);
                // Bare bwrap's orphans wait for the host's init; too many would count against
                // the process limit brokerd's sandboxes get.
                self.await_reaped_zombies(8);
                self.await_settled();
                let t = Instant::now();
                match &bare_runner {
                    BareRunner::Podman(rt) => self.bare_podman(rt, &spec, &name)?,
                    BareRunner::Bwrap(rt, layout) => self.bare_bwrap(rt, layout, &spec, &name)?,
                }
                if i > 0 {
                    bare.push(t.elapsed());
                }
                if let (BareRunner::Podman(rt), ToolName::HttpFetch) = (&bare_runner, tool) {
                    self.await_settled();
                    let took = self.bare_podman_beside(rt, &spec, &format!("{name}-beside"))?;
                    if i > 0 {
                        beside.push(took);
                    }
                }
                if i > 0 && !through_first {
                    self.await_settled();
                    let t = Instant::now();
                    let (_, _) = self.result(tool.as_str(), args.clone())?;
                    through.push(t.elapsed());
                }
            }
            let (tp50, tp95) = percentiles(&mut through);
            let (bp50, bp95) = percentiles(&mut bare);
            println!(
                "bench {b} {:<10} through brokerd p50 {tp50:>7.1} ms p95 {tp95:>7.1} ms ; \
                 {bare_name} p50 {bp50:>7.1} ms p95 {bp95:>7.1} ms ; ratio p50 {:.2} (n {n})",
                tool.as_str(),
                tp50 / bp50,
            );
            let mut row = json!({
                "tool": tool.as_str(),
                "through_p50_ms": tp50,
                "through_p95_ms": tp95,
                "bare_p50_ms": bp50,
                "bare_p95_ms": bp95,
                "ratio_p50": tp50 / bp50,
            });
            if !beside.is_empty() {
                let (sp50, sp95) = percentiles(&mut beside);
                println!(
                    "bench {b} {:<10} what-if, tool beside its proxy p50 {sp50:>7.1} ms p95 {sp95:>7.1} ms ; \
                     ratio to {bare_name} p50 {:.2} (n {n})",
                    tool.as_str(),
                    sp50 / bp50,
                );
                row["beside_p50_ms"] = json!(sp50);
                row["beside_p95_ms"] = json!(sp95);
                row["beside_ratio_p50"] = json!(sp50 / bp50);
            }
            rows.push(row);
        }
        Ok(json!({
            "bench": "ratio",
            "backend": b,
            "bare": bare_name,
            "calls": n,
            "rows": rows,
        }))
    }

    /// Each bare bwrap leaves an orphaned zombie (the sandbox's inner bwrap) that this host's
    /// PID 1 reaps a second or two later (brokerd reaps its own; this process does not); in a
    /// burst they reach the user's RLIMIT_NPROC (`pids`) and bwrap cannot fork ("Can't fork
    /// for pid 1"). The bench lets them go between series and says how long that took.
    fn await_reaped_zombies(&self, at_most: usize) {
        if self.backend != Backend::Bwrap {
            return;
        }
        let started = Instant::now();
        let before = system::zombies(&self.user);
        if before <= at_most {
            return;
        }
        let limit = self.t(Duration::from_secs(15));
        while system::zombies(&self.user) > at_most && started.elapsed() < limit {
            std::thread::sleep(Duration::from_millis(50));
        }
        if before > 0 {
            println!(
                "bench note: waited {} ms for {before} orphaned bwrap zombies to be reaped ({} left)",
                started.elapsed().as_millis(),
                system::zombies(&self.user)
            );
        }
    }

    /// Up to 20 s (times --time-scale) until no egress directory is left: the previous call's
    /// clean-up is over.
    fn await_settled(&self) {
        let limit = Instant::now() + self.t(Duration::from_secs(20));
        while std::fs::read_dir(&self.egress_root).is_ok_and(|mut d| d.next().is_some())
            && Instant::now() < limit
        {
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn bare_podman(
        &self,
        runtime: &brokerd::runner::podman::PodmanRuntime,
        spec: &brokerd::runner::RunSpec,
        name: &str,
    ) -> Outcome {
        let mut proxy = None;
        if let Some(egress) = &spec.egress {
            let dir = runtime.egress_dir(name);
            std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
            self.user.chown(&dir)?;
            let mut c = self.user.command(&self.podman);
            c.args(runtime.egress_args(egress, name));
            let (code, out) = system::output(c, self.t(Duration::from_secs(30)))?;
            check(code == 0, || format!("proxy: {out}"))?;
            wait_for_socket(&dir, self.t(Duration::from_secs(5)));
            proxy = Some((format!("{name}-egress"), dir));
        }
        let mut c = self.user.command(&self.podman);
        c.args(runtime.tool_args(spec, name));
        let out = run_with_input(c, &spec.input);
        if let Some((container, dir)) = proxy {
            let mut rm = self.user.command(&self.podman);
            rm.args(["rm", "-f", &container]);
            let _ = system::output(rm, self.t(Duration::from_secs(30)));
            let _ = std::fs::remove_dir_all(dir);
        }
        let out = out?;
        check(out.status.code() == Some(0), || {
            format!(
                "bare run of {name}: {} {}",
                out.status,
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }

    /// What-if, not what brokerd does (seed 003 section 6 starts the tool container only once
    /// the proxy's socket exists): the proxy's `run -d` and the tool's `run` of the same
    /// argument lists started together, the tool's input written once the socket is seen and
    /// the proxy's `run -d` has exited. Returns the time until the tool's answer; the proxy's
    /// `rm -f` and the directory's removal come after it, as brokerd's do.
    fn bare_podman_beside(
        &self,
        runtime: &brokerd::runner::podman::PodmanRuntime,
        spec: &brokerd::runner::RunSpec,
        name: &str,
    ) -> Result<Duration, String> {
        use std::io::{Read, Write};
        let egress = spec
            .egress
            .as_ref()
            .ok_or("an http_fetch spec has an egress")?;
        let dir = runtime.egress_dir(name);
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        self.user.chown(&dir)?;
        let started = Instant::now();
        let mut proxy = self.user.command(&self.podman);
        proxy
            .args(runtime.egress_args(egress, name))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut proxy = proxy.spawn().map_err(|e| format!("proxy: {e}"))?;
        let mut tool = self.user.command(&self.podman);
        tool.args(runtime.tool_args(spec, name))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let ran = tool
            .spawn()
            .map_err(|e| format!("tool: {e}"))
            .and_then(|mut tool| {
                wait_for_socket(&dir, self.t(Duration::from_secs(5)));
                let proxy_status = proxy.wait().map_err(|e| e.to_string());
                if let Some(mut stdin) = tool.stdin.take() {
                    let _ = stdin.write_all(&spec.input);
                }
                let mut out = Vec::new();
                if let Some(mut stdout) = tool.stdout.take() {
                    let _ = stdout.read_to_end(&mut out);
                }
                let status = tool.wait().map_err(|e| e.to_string())?;
                let took = started.elapsed();
                check(proxy_status?.success(), || {
                    format!("proxy of {name} failed")
                })?;
                check(status.success(), || {
                    format!(
                        "what-if run of {name}: {status} {}",
                        String::from_utf8_lossy(&out)
                    )
                })?;
                Ok(took)
            });
        let _ = proxy.kill();
        let _ = proxy.wait();
        let mut rm = self.user.command(&self.podman);
        rm.args(["rm", "-f", &format!("{name}-egress")]);
        let _ = system::output(rm, self.t(Duration::from_secs(30)));
        let _ = std::fs::remove_dir_all(dir);
        ran
    }

    fn bare_bwrap(
        &self,
        runtime: &brokerd::runner::bwrap::BwrapRuntime,
        layout: &brokerd::runner::bwrap::RootLayout,
        spec: &brokerd::runner::RunSpec,
        name: &str,
    ) -> Outcome {
        let mut proxy = None;
        if let Some(egress) = &spec.egress {
            let dir = runtime.egress_dir(name);
            std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
                .map_err(|e| e.to_string())?;
            self.user.chown(&dir)?;
            let mut c = self.user.command("bwrap");
            c.args(runtime.proxy_argv(egress, name, layout, None))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            // The argument list says `--seccomp 3`: the bare run gets the same filter.
            let _filter = brokerd::runner::seccomp::pass_to(&mut c).map_err(|e| e.to_string())?;
            let child = c.spawn().map_err(|e| format!("proxy: {e}"))?;
            proxy = Some((child, dir.clone()));
            wait_for_socket(&dir, self.t(Duration::from_secs(5)));
        }
        let mut c = self.user.command("bwrap");
        c.args(runtime.build_argv(spec, name, layout, None));
        let _filter = brokerd::runner::seccomp::pass_to(&mut c).map_err(|e| e.to_string())?;
        // The argument list binds the grant's directories by descriptor, as brokerd does.
        let fds = brokerd::runner::mounts::open_mounts(&spec.mounts).map_err(|e| e.to_string())?;
        let _mounts = brokerd::runner::mounts::pass_to(&mut c, fds).map_err(|e| e.to_string())?;
        let out = run_with_input(c, &spec.input);
        if let Some((mut child, dir)) = proxy {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_dir_all(dir);
        }
        let out = out?;
        check(out.status.code() == Some(0), || {
            format!(
                "bare bwrap of {name}: {} {}",
                out.status,
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }
}

/// Up to `limit` (5 s, times --time-scale) for a proxy's socket to appear in its egress
/// directory.
fn wait_for_socket(dir: &Path, limit: Duration) {
    let sock = dir.join("egress.sock");
    let until = Instant::now() + limit;
    while !sock.exists() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Runs `c` with `input` on its standard input, standard output read to the end.
fn run_with_input(
    mut c: std::process::Command,
    input: &[u8],
) -> Result<std::process::Output, String> {
    use std::io::Write;
    c.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = c.spawn().map_err(|e| e.to_string())?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(input);
    }
    child.wait_with_output().map_err(|e| e.to_string())
}

/// (p50, p95) in milliseconds, nearest rank.
fn percentiles(v: &mut [Duration]) -> (f64, f64) {
    v.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let at = |q: f64| ms(v[((v.len() as f64 - 1.0) * q).round() as usize]);
    (at(0.50), at(0.95))
}
