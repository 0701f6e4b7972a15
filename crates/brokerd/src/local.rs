//! The local commands: `brokerd doctor`, `ps`, `gc` (run as the service user) and
//! `audit verify`; `boxctl` forwards its commands of the same names here.
//!
//! `doctor` checks what a call needs, one line each, and says what to do about every failure.
//! On Podman it also starts one real sandbox, to see that it cannot make a user namespace.
//! Exit codes: 0 when everything is in order, 2 when a check failed, 3 for bad usage.

use proto::ident::Ident;
use std::ffi::OsStr;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::config::{self, Backend, Config, EgressNetwork, Protect, Writes};
use crate::protect::scan::{PastBounds, Scanner};
use crate::runbook;
use crate::runner::bwrap::BwrapRuntime;
use crate::runner::podman::{self, PodmanRuntime};
use crate::runner::{RunSpec, Runner};
use proto::tools::ToolName;
use std::fs::File;
use std::os::fd::AsFd;

/// Where the service's config lives unless `--config` says otherwise.
pub const DEFAULT_CONFIG: &str = "/etc/boxmaker/brokerd.toml";
/// How long one podman query may take.
const PODMAN_TIMEOUT: Duration = Duration::from_secs(30);
/// What the nested user namespace probe runs in a sandbox: busybox's unshare asks the kernel
/// for a user namespace mapped to root, as an exploit's first step would.
const USERNS_PROBE: &str = "busybox unshare -U -r true";
/// How long the probe's container may take to start and finish (slow or emulated hosts).
const PROBE_TIMEOUT: Duration = Duration::from_secs(120);
/// Where an operator reads how the service user's Podman denies nested user namespaces.
const USERNS_RUNBOOK: &str = runbook::NESTED_USERNS;

pub fn run(command: &str, config: Option<&Path>, socket: &Path) -> Result<u8, String> {
    let path = config
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG));
    let cfg = config::load(&path).map_err(|e| e.to_string())?;
    match command {
        "doctor" => Ok(doctor(&cfg, socket)),
        "ps" => ps(&cfg),
        "gc" => gc(&cfg),
        "gc-caches" => gc(&cfg).and_then(|code| match code {
            0 => gc_caches(&cfg),
            other => Ok(other),
        }),
        _ => Err(format!("unknown command {command:?}")),
    }
}

/// The output of a podman query, bounded in time.
fn podman(cfg: &Config, args: &[&str]) -> Result<String, String> {
    podman_with(cfg, args, None, PODMAN_TIMEOUT)
}

/// The output of `podman ARGS` when it exits 0 within `limit`, with `input` written to its
/// standard input and then closed (none: an empty standard input).
fn podman_with<A: AsRef<OsStr>>(
    cfg: &Config,
    args: &[A],
    input: Option<Vec<u8>>,
    limit: Duration,
) -> Result<String, String> {
    let program = cfg
        .runner
        .as_ref()
        .map_or_else(|| PathBuf::from("podman"), |r| r.podman.clone());
    let shown = || {
        args.iter()
            .map(|a| a.as_ref().to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut child = Command::new(&program)
        .args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{} cannot be started: {e}", program.display()))?;
    if let (Some(mut stdin), Some(input)) = (child.stdin.take(), input) {
        // From a thread, as brokerd does: a container that never reads must not block doctor.
        std::thread::spawn(move || {
            let _ = stdin.write_all(&input);
        });
    }
    let mut out = child.stdout.take();
    let mut err = child.stderr.take();
    let reader = std::thread::spawn(move || {
        let mut o = String::new();
        let mut e = String::new();
        if let Some(s) = out.as_mut() {
            let _ = s.take(4 << 20).read_to_string(&mut o);
        }
        if let Some(s) = err.as_mut() {
            let _ = s.take(64 << 10).read_to_string(&mut e);
        }
        (o, e)
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "podman {} did not answer within {}s",
                    shown(),
                    limit.as_secs()
                ));
            }
            Err(e) => return Err(e.to_string()),
        }
    };
    let (o, e) = reader.join().unwrap_or_default();
    if status.success() {
        Ok(o)
    } else {
        Err(format!(
            "podman {} exited with {status}: {}",
            shown(),
            e.trim()
        ))
    }
}

/// doctor's lines, printed as they come and kept.
#[derive(Default)]
struct Report {
    failed: usize,
    lines: Vec<String>,
}

impl Report {
    fn check(&mut self, what: &str, outcome: Result<String, String>) {
        let line = match outcome {
            Ok(detail) => format!("ok    {what}: {detail}"),
            Err(fix) => {
                self.failed += 1;
                format!("FAIL  {what}: {fix}")
            }
        };
        println!("{line}");
        self.lines.push(line);
    }
}

fn doctor(cfg: &Config, socket: &Path) -> u8 {
    let mut r = Report::default();
    let Some(rc) = &cfg.runner else {
        r.check(
            "runner",
            Err(format!(
                "the config has no [runner] section; add one (see {})",
                runbook::RUNNER
            )),
        );
        return 2;
    };
    if rc.backend == Backend::Bwrap {
        return doctor_bwrap(cfg, rc, r, socket);
    }
    r.check(
        "podman",
        podman(cfg, &["--version"]).map(|v| v.trim().to_string()).map_err(|e| {
            format!("{e}; install podman (Debian: apt-get install podman uidmap slirp4netns) or set runner.podman")
        }),
    );
    let info = podman(
        cfg,
        &["info", "--format", "{{.Host.OCIRuntime.Name}} {{.Host.CgroupsVersion}} {{.Host.CgroupControllers}} {{.Host.Security.Rootless}}"],
    );
    match info {
        Ok(line) => {
            let mut parts = line.split_whitespace();
            let runtime = parts.next().unwrap_or("?").to_string();
            let cgroups = parts.next().unwrap_or("?").to_string();
            let rest: Vec<&str> = parts.collect();
            let controllers = rest.join(" ");
            r.check("runtime", Ok(format!("{runtime}, cgroups {cgroups}")));
            let limits_hold =
                cgroups == "v2" && controllers.contains("memory") && controllers.contains("pids");
            let outcome = match (limits_hold, rc.enforce_limits) {
                (true, _) => Ok(format!("memory and pids controllers delegated ({controllers})")),
                (false, false) => Ok(format!(
                    "limits are NOT enforced here (cgroups {cgroups}, controllers {controllers}); enforce_limits = false accepts that"
                )),
                (false, true) => Err(format!(
                    "cgroups {cgroups} with controllers {controllers}: rootless Podman would ignore --memory and --pids-limit, so calls answer unavailable; boot with cgroup v2 and delegate memory and pids to the user (lingering, user@.service Delegate=), or set enforce_limits = false knowingly"
                )),
            };
            r.check("cgroup delegation", outcome);
            if cgroups != "v2" && runtime == "crun" {
                r.check(
                    "runtime on hybrid cgroups",
                    Err("crun fails on hybrid cgroups; set runtime = \"runc\" in ~/.config/containers/containers.conf".into()),
                );
            }
        }
        Err(e) => r.check(
            "podman info",
            Err(format!("{e}; see {}", runbook::RUNNER_UNAVAILABLE)),
        ),
    }
    r.check(
        "image",
        podman(cfg, &["image", "inspect", "--format", "{{.Id}}", &rc.image])
            .map(|id| format!("{} present", id.trim()))
            .map_err(|e| format!("{e}; load the tools image and pin its ID in runner.image")),
    );
    r.check("nested user namespaces", nested_userns(cfg, rc));
    let user = current_user();
    r.check("subordinate IDs", subordinate_ids(&user));
    r.check(
        "egress network",
        podman(cfg, &["info", "--format", "json"])
            .and_then(|info| egress_helper(&info, rc.egress_network)),
    );
    if rc.egress_network == EgressNetwork::Slirp4netns {
        r.check("/dev/net/tun", tun_usable());
    }
    running_checks(socket, &mut r);
    grant_checks(cfg, &mut r);
    if r.failed == 0 {
        0
    } else {
        2
    }
}

/// Each grant directory is usable by the service user, and each writable one's protected
/// targets can all be found within the walk's bounds (docs/design.md#protected-targets).
fn grant_checks(cfg: &Config, r: &mut Report) {
    for (name, g) in &cfg.grants {
        for p in &g.paths {
            r.check(
                &format!("grant {name}: {}", p.path.display()),
                reachable(&p.path, p.write),
            );
        }
    }
    for s in survey(cfg) {
        r.check(
            &format!(
                "grant {}: protected targets in {}",
                s.grant,
                s.path.display()
            ),
            s.outcome
                .map(|n| format!("{n}, bound read-only in its writable sandboxes"))
                .map_err(|e| format!("{e}: its writable calls are refused; {}", e.remedy())),
        );
    }
}

/// The bwrap backend's checks ([`runbook::BWRAP_UNAVAILABLE`]): bwrap is there, the
/// kernel gives it a user namespace, the tools root holds toolkit, and the cgroup mechanism
/// exists where limits are enforced. Read-only: nothing is prepared or moved.
fn doctor_bwrap(cfg: &Config, rc: &config::RunnerConfig, mut r: Report, socket: &Path) -> u8 {
    use crate::runner::cgroup;
    let hint = format!("see {}", runbook::BWRAP_UNAVAILABLE);
    let version = Command::new("bwrap")
        .arg("--version")
        .stdin(Stdio::null())
        .output();
    r.check(
        "bwrap",
        match version {
            Ok(o) if o.status.success() => {
                Ok(String::from_utf8_lossy(&o.stdout).trim().to_string())
            }
            Ok(o) => Err(format!("bwrap --version exited with {}; {hint}", o.status)),
            Err(e) => Err(format!(
                "{e}; install bubblewrap (Debian: apt-get install bubblewrap); {hint}"
            )),
        },
    );
    let userns = crate::runner::bwrap::userns_probe().output();
    r.check(
        "user namespaces",
        match userns {
            Ok(o) if o.status.success() => {
                Ok("bwrap made a user namespace with every namespace unshared".into())
            }
            Ok(o) => Err(format!(
                "{}; allow unprivileged user namespaces for the service user; {hint}",
                String::from_utf8_lossy(&o.stderr).trim()
            )),
            Err(e) => Err(format!("{e}; {hint}")),
        },
    );
    if let Some(b) = &cfg.bwrap {
        // The sandbox's `/` is the tools root.
        let toolkit = b
            .tools_root
            .join(proto::tools::TOOLKIT.trim_start_matches('/'));
        r.check(
            "tools root",
            if toolkit.is_file() {
                Ok(format!("{} present", toolkit.display()))
            } else {
                Err(format!(
                    "{} is missing: build it with images/build-tools-image.sh; {hint}",
                    toolkit.display()
                ))
            },
        );
        let mechanism = match b.cgroup {
            config::CgroupMode::Delegated => std::fs::read_to_string("/proc/self/cgroup")
                .ok()
                .and_then(|t| cgroup::own_group(&t))
                .map(|own| Path::new(cgroup::CGROUP_ROOT).join(own.strip_prefix("/").unwrap_or(&own)))
                .and_then(|dir| std::fs::read_to_string(dir.join("cgroup.controllers")).ok().map(|c| (dir, c)))
                .filter(|(_, c)| c.contains("memory") && c.contains("pids"))
                .map(|(dir, c)| format!("delegated group {} with {}", dir.display(), c.trim()))
                .ok_or_else(|| "no delegated cgroup v2 group with memory and pids (run doctor inside the unit, Delegate=yes)".to_string()),
            config::CgroupMode::SystemdScope => cgroup::find_in_path("systemd-run")
                .map(|p| format!("systemd-run at {}", p.display()))
                .ok_or_else(|| "systemd-run is not in PATH".to_string()),
        };
        r.check(
            "cgroup limits",
            match (mechanism, rc.enforce_limits) {
                (Ok(m), _) => Ok(m),
                (Err(e), false) => Ok(format!("limits are NOT enforced here ({e}); enforce_limits = false accepts that, rlimits still apply")),
                (Err(e), true) => Err(format!("{e}: calls answer unavailable; {hint}")),
            },
        );
    }
    r.check(
        "seccomp filter",
        match crate::runner::seccomp::program() {
            Some(p) => Ok(format!(
                "{} instructions for {}",
                p.len(),
                std::env::consts::ARCH
            )),
            None => Err(format!(
                "brokerd has no seccomp filter for {}: calls answer unavailable; {hint}",
                std::env::consts::ARCH
            )),
        },
    );
    running_checks(socket, &mut r);
    grant_checks(cfg, &mut r);
    if r.failed == 0 {
        0
    } else {
        2
    }
}

/// What a sandbox's attempt to make a user namespace came to, read from the probe's output
/// (toolkit shell's: what the command printed, then `[exit N]`).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Userns {
    /// The kernel refused it; busybox's line saying so.
    Denied(String),
    /// It worked: a sandbox can make user namespaces.
    Allowed,
    /// The probe did not get as far as asking (no busybox, no unshare applet): what it printed.
    Unknown(String),
}

impl Userns {
    fn read(output: &str) -> Userns {
        let (printed, status) = output.rsplit_once("\n[").unwrap_or((output, ""));
        if status == "exit 0]" {
            return Userns::Allowed;
        }
        // busybox: "unshare: unshare(0x10000000): Operation not permitted"
        match printed.lines().find(|l| l.contains("unshare(0x")) {
            Some(line) => Userns::Denied(line.trim().to_string()),
            None => Userns::Unknown(output.trim().chars().take(300).collect()),
        }
    }
}

/// Whether a Podman sandbox can make a user namespace: a real container of the configured
/// image, started with brokerd's own argument list for a shell call, runs [`USERNS_PROBE`].
/// The denial comes from the seccomp profile in the service user's containers.conf.
fn nested_userns(cfg: &Config, rc: &config::RunnerConfig) -> Result<String, String> {
    let profile = podman(cfg, &["info", "--format", "json"])
        .ok()
        .and_then(|j| serde_json::from_str::<serde_json::Value>(&j).ok())
        .and_then(|v| {
            v.pointer("/host/security/seccompProfilePath")
                .and_then(|p| p.as_str())
                .map(str::to_string)
        })
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "none named".into());
    let spec = RunSpec {
        session: Ident::fixed("doctor"),
        call: Ident::fixed("userns"),
        tool: ToolName::Shell,
        input: serde_json::json!({ "command": USERNS_PROBE })
            .to_string()
            .into_bytes(),
        mounts: Vec::new(),
        egress: None,
        timeout: PROBE_TIMEOUT,
        staged_limit: None,
        toolset: None,
        limits: Default::default(),
        cache: None,
    };
    let name = format!("boxmaker-doctor-{}", std::process::id());
    let args = PodmanRuntime::new(rc).tool_args(&spec, &name);
    let output = podman_with(cfg, &args, Some(spec.input.clone()), PROBE_TIMEOUT);
    if output.is_err() {
        // A container left behind by a time-out; `--rm` removes it otherwise.
        let _ = podman(cfg, &["rm", "-f", &name]);
    }
    match output.map(|o| Userns::read(&o)) {
        Ok(Userns::Denied(line)) => Ok(format!(
            "denied in the sandbox ({line}); seccomp profile {profile}"
        )),
        Ok(Userns::Allowed) => Err(format!(
            "ALLOWED: `{USERNS_PROBE}` made a user namespace inside a sandbox (seccomp profile {profile}); set seccomp_profile in the service user's ~/.config/containers/containers.conf to a profile that refuses CLONE_NEWUSER (scripts/setup.sh user writes one, the NixOS module sets one); see {USERNS_RUNBOOK}"
        )),
        Ok(Userns::Unknown(printed)) => Err(format!(
            "could not tell: `{USERNS_PROBE}` in the sandbox printed {printed:?}; the tools image needs busybox with its unshare applet; see {USERNS_RUNBOOK}"
        )),
        Err(e) => Err(format!(
            "could not tell: the probe sandbox did not run: {e}; see {USERNS_RUNBOOK}"
        )),
    }
}

/// The running brokerd's `status`, asked once for the checks that read it: `None` (with why)
/// when there is no brokerd to ask or it answered something else, which those checks report
/// as unknown rather than failed.
fn running_status(socket: &Path) -> Result<client::Status, String> {
    let asked = client::Client::connect(socket).and_then(|mut c| {
        c.set_timeout(Some(PODMAN_TIMEOUT))?;
        c.request(&client::Request::Status {
            id: "1".into(),
            v: None,
        })
    });
    match asked.map(|a| a.body) {
        Ok(client::Body::Status(s)) => Ok(s),
        Ok(other) => Err(format!("unknown: brokerd answered {:?}", other)),
        Err(e) => Err(format!(
            "unknown: no brokerd to ask at {} ({e})",
            socket.display()
        )),
    }
}

/// What the running brokerd says of itself: its containment (docs/design.md#preflight-and-poisoning:
/// a sandbox or proxy it could not confirm dead is a failure), its privileges
/// (docs/design.md#service: it refuses to start as root or holding a capability, so one that
/// reports either is a failure) and its audit log (a record stuck in its write is a failure).
/// No brokerd to ask is none of these.
fn running_checks(socket: &Path, r: &mut Report) {
    let status = running_status(socket);
    r.check(
        "poisoned",
        status
            .as_ref()
            .map_err(String::clone)
            .map_or_else(Ok, |s| poisoned(socket, s)),
    );
    r.check(
        "privileges",
        status
            .as_ref()
            .map_err(String::clone)
            .map_or_else(Ok, privileges),
    );
    r.check(
        "audit",
        status
            .as_ref()
            .map_err(String::clone)
            .map_or_else(Ok, audit_stalled),
    );
}

fn poisoned(socket: &Path, s: &client::Status) -> Result<String, String> {
    if s.poisoned {
        return Err(format!(
            "yes: brokerd ({} backend) could not confirm a sandbox or proxy dead, so http_fetch answers unavailable until it restarts; see {} (section 6)",
            Backend::name(s.backend),
            runbook::RUNNER_UNAVAILABLE
        ));
    }
    Ok(format!(
        "no (brokerd at {}, {} backend)",
        socket.display(),
        Backend::name(s.backend)
    ))
}

fn privileges(s: &client::Status) -> Result<String, String> {
    match s
        .privileges
        .clone()
        .map(crate::privileges::Privileges::of_status)
    {
        Some(p) => match p.refusal() {
            None => Ok(p.summary()),
            Some(why) => Err(format!("{}: {why}", p.summary())),
        },
        None => Ok("unknown: brokerd does not say".into()),
    }
}

fn audit_stalled(s: &client::Status) -> Result<String, String> {
    match s.audit_stalled_ms {
        Some(ms) => Err(format!(
            "a record has been writing for {ms} ms: calls wait for it; see {}",
            runbook::AUDIT_STALLED
        )),
        None => Ok(format!(
            "writing; head {} {}",
            s.audit_head.seq, s.audit_head.hash
        )),
    }
}

fn current_user() -> String {
    let uid = nix::unistd::getuid();
    std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                let f: Vec<&str> = l.split(':').collect();
                (f.len() > 2 && f[2] == uid.to_string()).then(|| f[0].to_string())
            })
        })
        .unwrap_or_else(|| uid.to_string())
}

fn subordinate_ids(user: &str) -> Result<String, String> {
    subordinate_ids_in(user, &[Path::new("/etc/subuid"), Path::new("/etc/subgid")])
}

/// `files`: /etc/subuid and /etc/subgid. shadow's `newuidmap` opens them with `O_NOFOLLOW`, so a
/// link (what NixOS's `environment.etc` makes without a `mode`) fails every rootless container
/// however right its lines are ([`runbook::RUNNER`], section 4).
fn subordinate_ids_in(user: &str, files: &[&Path]) -> Result<String, String> {
    let mut missing = Vec::new();
    for file in files {
        match std::fs::symlink_metadata(file) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(format!(
                    "{} is a symbolic link, which newuidmap and newgidmap refuse to open (O_NOFOLLOW), so rootless Podman starts nothing; make it a file (on NixOS: environment.etc.{}.mode = \"0644\", which services.boxmaker.subIdRange does); see {}",
                    file.display(),
                    file.file_name().map(|n| n.to_string_lossy()).unwrap_or_default(),
                    runbook::RUNNER
                ));
            }
            _ => {}
        }
        let text = std::fs::read_to_string(file).unwrap_or_default();
        if !text.lines().any(|l| l.split(':').next() == Some(user)) {
            missing.push(file.display().to_string());
        }
    }
    if missing.is_empty() {
        Ok(format!(
            "{user} has ranges in {}",
            files
                .iter()
                .map(|f| f.display().to_string())
                .collect::<Vec<_>>()
                .join(" and ")
        ))
    } else {
        Err(format!(
            "{user} needs ranges in {} (usermod --add-subuids 100000-165535 --add-subgids 100000-165535 {user}), then podman system migrate",
            missing.join(" and ")
        ))
    }
}

/// slirp4netns opens /dev/net/tun as the service user; udev makes it 0666, a host without udev
/// may not ([`runbook::DEV_NET_TUN`]).
fn tun_usable() -> Result<String, String> {
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")
    {
        Ok(_) => Ok("this user can open it".into()),
        Err(e) => Err(format!(
            "this user cannot open it ({e}), so every http_fetch answers unavailable; as root: chmod 0666 /dev/net/tun (what udev sets), or scripts/setup.sh user; see {}", runbook::DEV_NET_TUN
        )),
    }
}

fn reachable(path: &Path, write: bool) -> Result<String, String> {
    use nix::unistd::AccessFlags;
    use std::os::unix::ffi::OsStrExt;
    if path.as_os_str().as_bytes().contains(&0) {
        return Err("the path holds a NUL byte".into());
    }
    let mode = AccessFlags::R_OK
        | AccessFlags::X_OK
        | if write {
            AccessFlags::W_OK
        } else {
            AccessFlags::empty()
        };
    match nix::unistd::access(path, mode) {
        Ok(()) => Ok(if write {
            "readable and writable".into()
        } else {
            "readable".into()
        }),
        Err(e) => Err(format!(
            "not {} by this user ({}); grant it with chown/chmod or an ACL (setfacl -m u:boxmaker:{} …)",
            if write { "readable and writable" } else { "readable" },
            std::io::Error::from(e),
            if write { "rwx" } else { "rx" }
        )),
    }
}

/// Where Podman finds the egress network's helper program, from `podman info`'s JSON: Podman
/// looks in its `helper_binaries_dir` (containers.conf; on NixOS Podman's own
/// `libexec/podman`) before PATH, so PATH alone says nothing about it.
fn egress_helper(info: &str, network: EgressNetwork) -> Result<String, String> {
    let info: serde_json::Value =
        serde_json::from_str(info).map_err(|e| format!("podman info is not JSON: {e}"))?;
    let found = info["host"][network.as_str()]["executable"]
        .as_str()
        .filter(|p| !p.is_empty());
    match (found, network) {
        (Some(path), _) => Ok(format!("{network} at {path}, where Podman finds it")),
        (None, EgressNetwork::Pasta) => Err(format!(
            "Podman finds no pasta (podman info names none: Podman older than 4.4, as Debian 12's 4.3, or no passt installed where Podman looks); install passt, or set egress_network = \"slirp4netns\"; see {}",
            runbook::RUNNER_UNAVAILABLE
        )),
        (None, EgressNetwork::Slirp4netns) => Err(format!(
            "Podman finds no {network} (podman info names none); install it where Podman looks (helper_binaries_dir in containers.conf, or PATH), or set egress_network = \"pasta\" (NixOS's Podman ships pasta, not slirp4netns); see {}",
            runbook::RUNNER_UNAVAILABLE
        )),
    }
}

fn ps(cfg: &Config) -> Result<u8, String> {
    let out = podman(
        cfg,
        &[
            "ps",
            "-a",
            "--filter",
            podman::LABEL_FILTER,
            "--format",
            &format!("{{{{.Names}}}}\t{{{{.Status}}}}\t{}", podman::LABEL_VALUE),
        ],
    )?;
    if out.trim().is_empty() {
        println!("no boxmaker containers");
    } else {
        print!("{out}");
    }
    Ok(0)
}

fn gc(cfg: &Config) -> Result<u8, String> {
    let Some(rc) = &cfg.runner else {
        return Err("the config has no [runner] section".into());
    };
    // The configured backend's own sweep: the same one brokerd runs at start and stop.
    let runner: Box<dyn Runner> = match (&rc.backend, &cfg.bwrap) {
        (Backend::Bwrap, Some(b)) => {
            Box::new(BwrapRuntime::new(rc, b).with_toolsets(cfg.toolsets.values()))
        }
        _ => Box::new(PodmanRuntime::new(rc)),
    };
    match runner.sweep() {
        Ok(n) => {
            println!("removed {n} container(s) and egress director(ies)");
            Ok(0)
        }
        Err(e) => {
            eprintln!("brokerd: {e}");
            Ok(2)
        }
    }
}

/// `gc --caches`: every grant's cache under `<home>/caches` removed, and what an emptying left
/// (for a brokerd stopped or idle: a call using a cache would lose it).
fn gc_caches(cfg: &Config) -> Result<u8, String> {
    let Some(rc) = &cfg.runner else {
        return Err("the config has no [runner] section".into());
    };
    let caches = rc.home.join(crate::config::CACHES_DIR);
    match crate::runner::cache::remove_all(&caches) {
        Ok(n) => {
            println!("removed {n} cache(s) under {}", caches.display());
            Ok(0)
        }
        Err(e) => {
            eprintln!("brokerd: {}: {e}", caches.display());
            Ok(2)
        }
    }
}

/// `audit verify FILE` (with its rotated predecessors `FILE.N`): 0 when the chain holds, 1 when it is broken, 3 when the file
/// cannot be read.
pub fn audit_verify(path: &Path) -> u8 {
    match crate::audit::verify_rotated(path) {
        Ok(head) => {
            println!(
                "{}: ok, {} records, head {}",
                path.display(),
                head.seq,
                head.hash
            );
            // Not a broken chain: a call whose outcome a crash lost, or one still running.
            for u in crate::audit::unfinished(path).unwrap_or_default() {
                println!("note: {u}");
            }
            0
        }
        Err(e) => {
            println!("{e}");
            match e {
                crate::audit::VerifyError::Read { .. } => 3,
                _ => 1,
            }
        }
    }
}

/// One writable grant directory whose protected targets are held by the mount table, as
/// `check-config` and `doctor` report it: how many targets, or why they cannot all be found.
#[derive(Debug)]
pub struct Survey {
    pub grant: String,
    pub path: PathBuf,
    pub outcome: Result<usize, PastBounds>,
}

/// Walks every writable directory of every grant with `protect = "mount"` and direct writes.
pub fn survey(config: &Config) -> Vec<Survey> {
    let scanner = Scanner::new(config.protect_bounds());
    let mut out = Vec::new();
    for (name, g) in &config.grants {
        if g.protect != Protect::Mount || g.writes != Writes::Direct {
            continue;
        }
        for p in g.paths.iter().filter(|p| p.write) {
            let outcome = File::open(&p.path)
                .map_err(|e| PastBounds::Unreadable {
                    at: p.path.clone(),
                    why: e.to_string(),
                })
                .and_then(|dir| scanner.scan(&p.path, dir.as_fd()))
                .map(|found| found.targets.len());
            out.push(Survey {
                grant: name.clone(),
                path: p.path.clone(),
                outcome,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{egress_helper, subordinate_ids_in, EgressNetwork, Userns};

    /// The lines as usermod writes them, in files, pass; a file without the user's line, and a
    /// link however right its target (NixOS's `environment.etc` without a mode), fail.
    #[test]
    fn subordinate_ids_must_be_files_with_the_users_lines() {
        let dir = tempfile::tempdir().expect("tempdir");
        let at = |name: &str| dir.path().join(name);
        std::fs::write(at("subuid"), "alice:100000:65536\nboxmaker:165536:65536\n").unwrap();
        std::fs::write(at("subgid"), "boxmaker:165536:65536\n").unwrap();
        std::fs::write(at("other"), "alice:100000:65536\n").unwrap();
        std::os::unix::fs::symlink(at("subgid"), at("linked")).unwrap();
        let (uid, gid, other, linked) = (at("subuid"), at("subgid"), at("other"), at("linked"));
        let got = subordinate_ids_in("boxmaker", &[&uid, &gid]);
        assert!(
            got.as_ref()
                .is_ok_and(|m| m.starts_with("boxmaker has ranges")),
            "{got:?}"
        );
        let got = subordinate_ids_in("boxmaker", &[&uid, &other]).unwrap_err();
        assert!(
            got.contains("needs ranges in") && got.contains("other"),
            "{got}"
        );
        assert!(
            !got.contains("/subuid"),
            "only the file without the line is named: {got}"
        );
        let got = subordinate_ids_in("boxmaker", &[&uid, &linked]).unwrap_err();
        assert!(
            got.contains("is a symbolic link") && got.contains("O_NOFOLLOW"),
            "{got}"
        );
        assert!(subordinate_ids_in("boxmaker", &[&dir.path().join("absent"), &gid]).is_err());
    }

    /// The helper as `podman info` reports it: Podman 5 on NixOS (pasta from its own
    /// libexec, not on PATH), Debian's 4.3 (slirp4netns only), and what is not there.
    #[test]
    fn the_egress_helper_is_where_podman_finds_it() {
        let nixos = r#"{"host":{"pasta":{"executable":"/nix/store/x-podman-5.6/libexec/podman/pasta","package":"passt"},"slirp4netns":{"executable":""}}}"#;
        let debian =
            r#"{"host":{"slirp4netns":{"executable":"/usr/bin/slirp4netns","version":"1.2.0"}}}"#;
        let cases = [
            (
                nixos,
                EgressNetwork::Pasta,
                Ok("pasta at /nix/store/x-podman-5.6/libexec/podman/pasta, where Podman finds it"),
            ),
            (
                nixos,
                EgressNetwork::Slirp4netns,
                Err("NixOS's Podman ships pasta"),
            ),
            (
                debian,
                EgressNetwork::Slirp4netns,
                Ok("slirp4netns at /usr/bin/slirp4netns, where Podman finds it"),
            ),
            (debian, EgressNetwork::Pasta, Err("Podman finds no pasta")),
            (
                "not json",
                EgressNetwork::Pasta,
                Err("podman info is not JSON"),
            ),
        ];
        for (info, network, want) in cases {
            match (egress_helper(info, network), want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want),
                (Err(got), Err(want)) => assert!(got.contains(want), "{network}: {got}"),
                (got, want) => panic!("{network}: {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn the_probe_output_reads_as_the_kernel_answered() {
        let denied = "unshare: unshare(0x10000000): Operation not permitted";
        let cases = [
            // (what toolkit shell printed, what doctor reads)
            (
                format!("{denied}\n\n[exit 1]"),
                Userns::Denied(denied.into()),
            ),
            (
                "unshare: unshare(0x10000000): No space left on device\n[exit 1]".into(),
                Userns::Denied("unshare: unshare(0x10000000): No space left on device".into()),
            ),
            ("\n[exit 0]".into(), Userns::Allowed),
            ("some noise\n[exit 0]".into(), Userns::Allowed),
            (
                "unshare: applet not found\n[exit 127]".into(),
                Userns::Unknown("unshare: applet not found\n[exit 127]".into()),
            ),
            (
                "sh: busybox: not found\n[exit 127]".into(),
                Userns::Unknown("sh: busybox: not found\n[exit 127]".into()),
            ),
            ("".into(), Userns::Unknown("".into())),
            (
                format!("{denied}\n[killed by signal 9]"),
                Userns::Denied(denied.into()),
            ),
        ];
        for (output, expected) in cases {
            assert_eq!(Userns::read(&output), expected, "{output:?}");
        }
    }
}

#[cfg(test)]
mod running_tests {
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::net::UnixListener;

    /// A brokerd that answers one status line with `poisoned` and `extra` fields.
    fn broker_answering(
        poisoned: bool,
        extra: &'static str,
    ) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("broker.sock");
        let listener = UnixListener::bind(&socket).expect("bind");
        std::thread::spawn(move || {
            if let Ok((stream, _)) = listener.accept() {
                let mut line = String::new();
                let _ = BufReader::new(&stream).read_line(&mut line);
                let answer = format!(
                    r#"{{"id":"1","kind":"status","protocol":1,"version":"t","backend":"bwrap","enforce_limits":true,"preflight":{{}},"poisoned":{poisoned},"audit_head":{{"seq":1,"hash":"h"}}{extra}}}"#
                );
                let _ = (&stream).write_all(format!("{answer}\n").as_bytes());
            }
        });
        (dir, socket)
    }

    /// The doctor lines of what the brokerd on `socket` says of itself.
    fn lines(socket: &std::path::Path) -> (usize, Vec<String>) {
        let mut r = super::Report::default();
        super::running_checks(socket, &mut r);
        (r.failed, r.lines.clone())
    }

    /// docs/design.md#preflight-and-poisoning: doctor shows a poisoned brokerd as a failure;
    /// docs/design.md#service: and one that reports a privilege or a stalled audit record.
    #[test]
    fn doctor_shows_what_brokerd_says_of_itself() {
        let (_d, socket) = broker_answering(true, "");
        let (failed, got) = lines(&socket);
        assert_eq!(failed, 1, "{got:?}");
        assert!(
            got.iter()
                .any(|l| l.contains("poisoned") && l.contains("yes")),
            "{got:?}"
        );
        let well = r#","privileges":{"uids":[990,990,990],"capabilities":[],"bounding":["CAP_SETGID","CAP_SETUID"]}"#;
        let (_d, socket) = broker_answering(false, well);
        let (failed, got) = lines(&socket);
        assert_eq!(failed, 0, "{got:?}");
        assert!(
            got.iter().any(|l| l.contains("uid 990, no capabilities")),
            "{got:?}"
        );
        let root =
            r#","privileges":{"uids":[0,0,0],"capabilities":["CAP_SYS_ADMIN"],"bounding":[]}"#;
        let (_d, socket) = broker_answering(false, root);
        let (failed, got) = lines(&socket);
        assert_eq!(failed, 1, "{got:?}");
        assert!(
            got.iter().any(|l| l.contains("does not serve as root")),
            "{got:?}"
        );
        let (_d, socket) = broker_answering(false, r#","audit_stalled_ms":7000"#);
        let (failed, got) = lines(&socket);
        assert_eq!(failed, 1, "{got:?}");
        assert!(
            got.iter()
                .any(|l| l.contains("7000 ms") && l.contains("audit-stalled")),
            "{got:?}"
        );
        let nowhere = std::path::Path::new("/nonexistent/broker.sock");
        let (failed, got) = lines(nowhere);
        assert_eq!(failed, 0, "{got:?}");
        assert!(got.iter().all(|l| l.contains("unknown")), "{got:?}");
    }
}
