//! `boxmaker-e2e guest`: the checks of the QEMU guest (vm-tests/guest/), run inside it as root
//! by vm-tests/guest/in-guest.sh once systemd is up. What they prove, on a systemd host with
//! cgroup v2: the service user's Podman configuration as scripts/setup.sh writes it denies
//! nested user namespaces in a sandbox (and doctor says so); brokerd is started by its socket
//! on the first connection, as the service user, and reaches READY with enforce_limits = true;
//! the limits hold (a fork loop meets --pids-limit, a memory hog is OOM-killed); stopping the
//! service leaves no container; a crash (SIGKILL) during a call and the restart that follows
//! sweep what the crash left. Then the same units with the bwrap drop-in: a delegated subtree,
//! each sandbox in a group of its own with its limits, the limits holding, a crash, nothing
//! left. Then a smoke pass of the scenario suite on each backend (the scenarios that
//! vm-tests/guest/run.sh lists).
//!
//! The output is [`tally`]'s contract, which run.sh reads back. By concern: the service user's
//! Podman and the tools image in `podman`, the units, the config and the first connection in
//! `service`, the calls, limits, stop and crash on Podman in `calls`, the bwrap variant in
//! `bwrap`, the scenario suite in `suite`; the host's state as the checks read it in `host`,
//! the client user's connections in `broker`, the unit files in `units`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use proto::broker::Backend;

use crate::system::User;

mod broker;
mod bwrap;
mod calls;
mod host;
mod podman;
mod service;
mod suite;
mod tally;
mod units;

use host::Service;
use tally::Tally;

const SVC_USER: &str = "boxmaker";
const CLIENT_USER: &str = "loopd";
const GRANT: &str = "notes";
const NOTES_DIR: &str = "/srv/guest-notes";
const TOOLS_ROOT: &str = "/var/lib/boxmaker-guest/tools-root";
/// Small limits, so the hogs meet them quickly even under TCG.
const MEMORY: &str = "64m";
const MEMORY_BYTES: u64 = 64 * 1024 * 1024;
const PIDS: u32 = 32;
/// Generous time limits: containers start 5-20x slower under TCG than natively.
const SHELL_MS: u64 = 150_000;
const TIMEOUT_MS: u64 = 200_000;
const GRACE_S: u64 = 5;

/// The fork loop both backends get: more processes than the pids limit allows.
const FORK_LOOP: &str =
    "i=0; while [ $i -lt 100 ]; do sleep 10 & i=$((i+1)); done; echo all-forked";

/// What the script passes on from run.sh's guest.env.
struct Settings {
    payload: PathBuf,
    /// Whether the scenario suite runs.
    e2e: bool,
    time_scale: String,
    /// More arguments for the suite's `run` (e.g. --only NAME), split at white space.
    e2e_args: Vec<String>,
    /// The backends the suite runs on (`--backends`, space-separated).
    backends: Vec<Backend>,
}

/// A check's section ended the run early: what follows needs what it could not make.
pub struct Finish;

type Step = Result<(), Finish>;

/// The state the checks build up, section by section.
pub struct Guest {
    t: Tally,
    set: Settings,
    results: PathBuf,
    svc: Service,
    client_user: User,
    started: Instant,
    image_id: String,
    /// Set once the units are read.
    service_unit: String,
    socket_unit: String,
    units_dir: PathBuf,
    brokerd: String,
    boxctl: String,
    config: String,
    broker: Option<broker::Broker>,
}

pub fn run(opts: &crate::Opts) -> Result<ExitCode, String> {
    let payload = PathBuf::from(opts.required("payload")?);
    let e2e = match opts.one("e2e").as_deref() {
        None | Some("1") => true,
        Some(_) => false,
    };
    let set = Settings {
        e2e,
        time_scale: opts.one("time-scale").unwrap_or_else(|| "5".into()),
        e2e_args: opts
            .one("e2e-args")
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_string)
            .collect(),
        backends: parse_backends(
            &opts
                .one("backends")
                .unwrap_or_else(|| "podman bwrap".into()),
        )?,
        payload,
    };
    let results = set.payload.join("results");
    std::fs::create_dir_all(&results).map_err(|e| format!("{}: {e}", results.display()))?;
    let t = Tally::create(&results.join("checks.log"));
    let mut g = Guest {
        t,
        svc: Service {
            user: User::lookup(SVC_USER)?,
        },
        client_user: User::lookup(CLIENT_USER)?,
        started: Instant::now(),
        results,
        set,
        image_id: String::new(),
        service_unit: "boxmaker.service".into(),
        socket_unit: "boxmaker.socket".into(),
        units_dir: PathBuf::new(),
        brokerd: String::new(),
        boxctl: String::new(),
        config: String::new(),
        broker: None,
    };
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let up = uptime();
    g.t.out(&format!(
        "guest-test: start, {}, uptime {up}s",
        kernel.trim_end()
    ));
    g.t.out(&format!(
        "timing boot {}s (kernel start to the test unit)",
        up.split('.').next().unwrap_or("")
    ));
    let _ = g.all();
    g.finish();
    Ok(if g.t.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

impl Guest {
    fn all(&mut self) -> Step {
        self.podman_setup()?;
        self.service()?;
        self.calls();
        self.bwrap_variant();
        self.scenarios();
        self.clean_at_end();
        Ok(())
    }

    fn payload(&self, rel: &str) -> PathBuf {
        self.set.payload.join(rel)
    }

    fn results_file(&self, name: &str) -> PathBuf {
        self.results.join(name)
    }

    fn state(&self, property: &str) -> String {
        host::unit_property(&self.service_unit, property)
    }

    /// The client user's view of brokerd; the units section made it.
    fn broker(&self) -> Result<&broker::Broker, String> {
        self.broker
            .as_ref()
            .ok_or_else(|| "no socket to connect to".to_string())
    }

    /// `boxctl audit verify` of the audit log, as the service user.
    fn audit_verify(&mut self, name: &str) {
        let mut c = self.svc.user.command(&self.boxctl);
        let log = self.svc.user.home.join("audit.jsonl");
        c.args(["audit", "verify"]).arg(&log);
        let (code, msg) = host::merged(c);
        let last = msg.lines().next_back().unwrap_or("").to_string();
        self.t
            .check(name, code == 0, || last, || msg.trim_end().to_string());
    }

    /// At the very end: stop, and nothing may remain.
    fn clean_at_end(&mut self) {
        host::systemctl(&["stop", &self.service_unit, &self.socket_unit]);
        let (left, egress) = (self.svc.leftovers(), self.svc.egress_left());
        self.t.check(
            "clean-at-end",
            left.is_empty() && egress.is_empty(),
            || "no container labelled boxmaker, no egress directory".into(),
            || format!("left: {left} {egress}"),
        );
    }

    /// The journals and the boot's timing onto the payload disk, then the summary, last.
    fn finish(&mut self) {
        let to_file = |name: &str, args: &[&str]| {
            let path = self.results_file(name);
            let out = host::run(host::cmd(args[0], &args[1..]));
            let _ = std::fs::write(&path, format!("{}{}", out.stdout, out.stderr));
        };
        to_file("journal.txt", &["journalctl", "-b", "--no-pager"]);
        to_file("boot-blame.txt", &["systemd-analyze", "blame"]);
        let unit = self.service_unit.clone();
        to_file(
            "boxmaker.journal.txt",
            &[
                "journalctl",
                "-b",
                "--no-pager",
                "-o",
                "short-monotonic",
                "-u",
                &unit,
            ],
        );
        let secs = self.started.elapsed().as_secs();
        self.t
            .out(&format!("timing suite {secs}s (the checks in the guest)"));
        self.t.summary();
    }
}

/// `--backends`: backend names separated by white space, each one brokerd knows.
fn parse_backends(list: &str) -> Result<Vec<Backend>, String> {
    list.split_whitespace()
        .map(|b| {
            Backend::parse(b).ok_or(format!(
                "--backends {list:?}: {b:?} is not a backend (podman or bwrap)"
            ))
        })
        .collect()
}

/// Seconds since boot, as /proc/uptime has them.
fn uptime() -> String {
    std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|s| s.split(' ').next().map(str::to_string))
        .unwrap_or_default()
}

/// Whether `s` is a content-addressed image id, `sha256:` and 64 lower-case hex digits.
fn is_image_id(s: &str) -> bool {
    s.strip_prefix("sha256:")
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

/// The last line of `path`'s content, for evidence (empty when unreadable).
fn tail_of(path: &Path, n: usize) -> String {
    host::tail(&std::fs::read_to_string(path).unwrap_or_default(), n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_full_sha256_id_is_an_image_id() {
        let id = format!("sha256:{}", "0a".repeat(32));
        assert!(is_image_id(&id));
        assert!(!is_image_id(&id[..id.len() - 1]));
        assert!(!is_image_id(&id.to_uppercase()));
        assert!(!is_image_id("Error: no image"));
    }

    #[test]
    fn backends_are_parsed_once_and_an_unknown_one_is_an_error() {
        assert_eq!(
            parse_backends(" podman\tbwrap ").unwrap(),
            [Backend::Podman, Backend::Bwrap]
        );
        assert_eq!(parse_backends("").unwrap(), []);
        let err = parse_backends("podman bwarp").unwrap_err();
        assert!(err.contains("\"bwarp\" is not a backend"), "{err}");
    }
}
