//! The local commands: `doctor`, `ps`, `gc` (run as the service user) and `audit verify`.
//!
//! `doctor` checks what a call needs, one line each, and says what to do about every failure.
//! Exit codes: 0 when everything is in order, 2 when a check failed, 3 for bad usage.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use brokerd::config::{self, Backend, Config};
use brokerd::runner::podman::PodmanRuntime;
use brokerd::runner::Runner;

/// Where the service's config lives unless `--config` says otherwise.
pub const DEFAULT_CONFIG: &str = "/etc/boxmaker/brokerd.toml";
/// How long one podman query may take.
const PODMAN_TIMEOUT: Duration = Duration::from_secs(30);

pub fn run(command: &str, config: Option<&Path>) -> Result<u8, String> {
    let path = config
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG));
    let cfg = config::load(&path).map_err(|e| e.to_string())?;
    match command {
        "doctor" => Ok(doctor(&cfg)),
        "ps" => ps(&cfg),
        "gc" => gc(&cfg),
        _ => Err(format!("unknown command {command:?}")),
    }
}

/// The output of a podman query, bounded in time.
fn podman(cfg: &Config, args: &[&str]) -> Result<String, String> {
    let program = cfg
        .runner
        .as_ref()
        .map_or_else(|| PathBuf::from("podman"), |r| r.podman.clone());
    let mut child = Command::new(&program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{} cannot be started: {e}", program.display()))?;
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
    let deadline = Instant::now() + PODMAN_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "podman {} did not answer within {}s",
                    args.join(" "),
                    PODMAN_TIMEOUT.as_secs()
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
            args.join(" "),
            e.trim()
        ))
    }
}

struct Report {
    failed: usize,
}

impl Report {
    fn check(&mut self, what: &str, outcome: Result<String, String>) {
        match outcome {
            Ok(detail) => println!("ok    {what}: {detail}"),
            Err(fix) => {
                self.failed += 1;
                println!("FAIL  {what}: {fix}");
            }
        }
    }
}

fn doctor(cfg: &Config) -> u8 {
    let mut r = Report { failed: 0 };
    let Some(rc) = &cfg.runner else {
        r.check(
            "runner",
            Err("the config has no [runner] section; add one (see runbook/runner.md)".into()),
        );
        return 2;
    };
    if rc.backend == Backend::Bwrap {
        return doctor_bwrap(cfg, rc, r);
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
            Err(format!("{e}; see runbook/runner.md#runner-unavailable")),
        ),
    }
    r.check(
        "image",
        podman(cfg, &["image", "inspect", "--format", "{{.Id}}", &rc.image])
            .map(|id| format!("{} present", id.trim()))
            .map_err(|e| format!("{e}; load the tools image and pin its ID in runner.image")),
    );
    let user = current_user();
    r.check("subordinate IDs", subordinate_ids(&user));
    if rc.egress_network == "pasta" {
        r.check(
            "egress network",
            which("pasta").map(|p| format!("pasta at {p}")).ok_or_else(|| {
                "this host has no pasta (Podman 4.3 on Debian 12 cannot use it): set egress_network = \"slirp4netns\"".to_string()
            }),
        );
    } else {
        r.check("egress network", Ok(rc.egress_network.clone()));
    }
    r.check(
        "poisoned",
        Ok("only a running brokerd knows; see `boxctl status`".into()),
    );
    for (name, g) in &cfg.grants {
        for p in &g.paths {
            r.check(
                &format!("grant {name}: {}", p.path.display()),
                reachable(&p.path, p.write),
            );
        }
    }
    if r.failed == 0 {
        0
    } else {
        2
    }
}

/// The bwrap backend's checks (runbook/runner.md#bwrap-unavailable): bwrap is there, the
/// kernel gives it a user namespace, the tools root holds toolkit, and the cgroup mechanism
/// exists where limits are enforced. Read-only: nothing is prepared or moved.
fn doctor_bwrap(cfg: &Config, rc: &config::RunnerConfig, mut r: Report) -> u8 {
    use brokerd::runner::cgroup;
    let hint = "see runbook/runner.md#bwrap-unavailable";
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
    let userns = Command::new("bwrap")
        .args([
            "--unshare-user",
            "--unshare-all",
            "--ro-bind",
            "/",
            "/",
            "true",
        ])
        .stdin(Stdio::null())
        .output();
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
        let toolkit = b.tools_root.join("bin/toolkit");
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
        "poisoned",
        Ok("only a running brokerd knows; see `boxctl status`".into()),
    );
    for (name, g) in &cfg.grants {
        for p in &g.paths {
            r.check(
                &format!("grant {name}: {}", p.path.display()),
                reachable(&p.path, p.write),
            );
        }
    }
    if r.failed == 0 {
        0
    } else {
        2
    }
}

fn current_user() -> String {
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
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
    let mut found = Vec::new();
    for file in ["/etc/subuid", "/etc/subgid"] {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        if text.lines().any(|l| l.split(':').next() == Some(user)) {
            found.push(file);
        }
    }
    if found.len() == 2 {
        Ok(format!("{user} has ranges in /etc/subuid and /etc/subgid"))
    } else {
        Err(format!(
            "{user} needs ranges in /etc/subuid and /etc/subgid (usermod --add-subuids 100000-165535 --add-subgids 100000-165535 {user}), then podman system migrate"
        ))
    }
}

fn reachable(path: &Path, write: bool) -> Result<String, String> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
        return Err("the path holds a NUL byte".into());
    };
    let mode = libc::R_OK | libc::X_OK | if write { libc::W_OK } else { 0 };
    // SAFETY: `c` is a valid NUL-terminated string for the duration of the call.
    if unsafe { libc::access(c.as_ptr(), mode) } == 0 {
        Ok(if write {
            "readable and writable".into()
        } else {
            "readable".into()
        })
    } else {
        Err(format!(
            "not {} by this user ({}); grant it with chown/chmod or an ACL (setfacl -m u:boxmaker:{} …)",
            if write { "readable and writable" } else { "readable" },
            std::io::Error::last_os_error(),
            if write { "rwx" } else { "rx" }
        ))
    }
}

fn which(name: &str) -> Option<String> {
    std::env::var_os("PATH")?
        .to_string_lossy()
        .split(':')
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
        .map(|p| p.display().to_string())
}

fn ps(cfg: &Config) -> Result<u8, String> {
    let out = podman(
        cfg,
        &[
            "ps",
            "-a",
            "--filter",
            "label=boxmaker",
            "--format",
            "{{.Names}}\t{{.Status}}\t{{.Labels.boxmaker}}",
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
    match PodmanRuntime::new(rc).sweep() {
        Ok(n) => {
            println!("removed {n} container(s) and egress director(ies)");
            Ok(0)
        }
        Err(e) => {
            eprintln!("boxctl: {e}");
            Ok(2)
        }
    }
}

/// `boxctl audit verify FILE` (with its rotated predecessors `FILE.N`): 0 when the chain holds, 1 when it is broken, 3 when the file
/// cannot be read.
pub fn audit_verify(path: &Path) -> u8 {
    match brokerd::audit::verify_rotated(path) {
        Ok(head) => {
            println!(
                "{}: ok, {} records, head {}",
                path.display(),
                head.seq,
                head.hash
            );
            0
        }
        Err(e) => {
            println!("{e}");
            match e {
                brokerd::audit::VerifyError::Read { .. } => 3,
                _ => 1,
            }
        }
    }
}
