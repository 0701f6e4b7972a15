//! The bwrap variant: the same units with dist/systemd/boxmaker.service.d/bwrap.conf
//! (Delegate=yes), the same config with backend = "bwrap" over the tools image's tree and
//! cgroup = "delegated": each sandbox gets a sandbox-<name> group of the service's own cgroup,
//! with memory.max and pids.max written before anything runs in it. Then a crash with a sandbox
//! up, the pids and memory limits, nothing left, and the audit chain.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use client::CallOutcome;

use super::broker::{self, content, content_or_message, shell_args, show, show_status, Broker};
use super::calls::{first_line, Background};
use super::host;
use super::{Guest, FORK_LOOP, MEMORY_BYTES, PIDS, TOOLS_ROOT};

/// Three processes of 40 MB each, every one under the per-process address-space rlimit, 120 MB
/// together against memory.max 64m: only the cgroup can stop them, with an OOM kill in it.
const HOG: &str = "for i in 1 2 3; do dd if=/dev/zero bs=40M count=1 2>/dev/null | sleep 10 & done; wait; echo done";

impl Guest {
    pub(super) fn bwrap_variant(&mut self) {
        let dropin = self
            .units_dir
            .join(format!("{}.d/bwrap.conf", self.service_unit));
        if !host::have("bwrap") {
            self.t.skip("bwrap-unit", "no bwrap in the guest");
            return;
        }
        if !dropin.is_file() {
            self.t.fail(
                "bwrap-unit",
                &format!("the units came without {}.d/bwrap.conf", self.service_unit),
            );
            return;
        }
        let b = match self.broker().cloned() {
            Ok(b) => b,
            Err(e) => return self.t.fail("bwrap-unit", &e),
        };
        host::systemctl(&["stop", &self.service_unit]);
        if let Err(e) = self.switch_to_bwrap(&dropin) {
            self.t.fail("bwrap-unit", &e);
            return;
        }
        let (code, msg) = self.check_config();
        if code != 0 {
            self.t
                .fail("bwrap-unit", &format!("check-config: {}", msg.trim_end()));
            return;
        }
        host::systemctl(&["daemon-reload"]);
        let status = b.status();
        let cg = self.state("ControlGroup");
        let delegate = self.state("Delegate");
        let good = matches!(&status, Ok(s) if s.backend == Some(proto::broker::Backend::Bwrap)
            && s.preflight.ok == Some(true) && s.enforce_limits);
        if delegate == "yes" && good {
            let detail = status
                .as_ref()
                .map(|s| s.preflight.detail.clone())
                .unwrap_or_default();
            self.t.ok(
                "bwrap-unit",
                &format!("Delegate=yes, {cg}; preflight: {detail}"),
            );
        } else {
            self.t.fail(
                "bwrap-unit",
                &format!(
                    "Delegate={delegate}, status answer {}",
                    show_status(&status)
                ),
            );
            let tail = host::journal_tail(&self.service_unit, 15);
            self.t.note(&tail);
            return;
        }
        self.bwrap_cgroup_and_crash(&b, &cg);
        self.bwrap_limits(&b);
        let uid = self.svc.user.uid;
        let left = format!(
            "{}{}{}{}",
            host::sandbox_groups(&cg)
                .iter()
                .map(|g| format!("{}\n", g.display()))
                .collect::<String>(),
            host::join_pids(&host::pids_named(uid, "bwrap")),
            host::join_pids(&host::pids_named(uid, "sleep")),
            self.svc.egress_left()
        );
        self.t.check(
            "bwrap-clean",
            left.is_empty(),
            || "no sandbox group, no sandbox process, no egress directory".into(),
            || format!("left: {left}"),
        );
        host::systemctl(&["stop", &self.service_unit]);
        self.audit_verify("bwrap-audit-verify");
    }

    /// The drop-in installed and the config rewritten for bwrap.
    fn switch_to_bwrap(&self, dropin: &Path) -> Result<(), String> {
        let to =
            Path::new("/etc/systemd/system").join(format!("{}.d/bwrap.conf", self.service_unit));
        let err = |e: std::io::Error| format!("{}: {e}", to.display());
        std::fs::create_dir_all(to.parent().unwrap_or(Path::new("/"))).map_err(err)?;
        std::fs::copy(dropin, &to).map_err(err)?;
        std::fs::set_permissions(&to, PermissionsExt::from_mode(0o644)).map_err(err)?;
        let config = Path::new(&self.config);
        let cerr = |e: std::io::Error| format!("{}: {e}", config.display());
        let text = std::fs::read_to_string(config).map_err(cerr)?;
        std::fs::write(config, super::service::bwrap_config(&text, TOOLS_ROOT)).map_err(cerr)
    }

    /// While a call sleeps: its group, the limits in it, its processes in it. Then a crash with
    /// the sandbox up (SIGKILL to brokerd alone): nothing of the sandbox outlives it (brokerd's
    /// parent-death signal, or systemd stopping the rest of the unit); the restart removes the
    /// group.
    fn bwrap_cgroup_and_crash(&mut self, b: &Broker, cg: &str) {
        let uid = self.svc.user.uid;
        let call = Background::start(
            b,
            "b1",
            "long",
            "sleep 600",
            self.results_file("bwrap-crash-call.txt"),
        );
        let mut group = None;
        for _ in 0..120 {
            group = host::sandbox_groups(cg).into_iter().next();
            if group.is_some() && !host::pids_named(uid, "sleep").is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        let sleeps = host::pids_named(uid, "sleep");
        match &group {
            Some(g)
                if host::cgroup_file(g, "memory.max") == MEMORY_BYTES.to_string()
                    && host::cgroup_file(g, "pids.max") == PIDS.to_string()
                    && sleeps.first().is_some_and(|p| {
                        host::cgroup_file(g, "cgroup.procs")
                            .lines()
                            .any(|l| l == p.to_string())
                    }) =>
            {
                let procs = host::cgroup_file(g, "cgroup.procs").lines().count();
                let name = g.display().to_string();
                self.t.ok(
                    "bwrap-cgroup",
                    &format!(
                        "{}: memory.max {}, pids.max {}, cpu.max '{}', {procs} processes, the tool's sleep among them",
                        name.trim_start_matches("/sys/fs/cgroup"),
                        host::cgroup_file(g, "memory.max"),
                        host::cgroup_file(g, "pids.max"),
                        host::cgroup_file(g, "cpu.max"),
                    ),
                );
            }
            _ => {
                let g = group
                    .as_ref()
                    .map(|g| g.display().to_string())
                    .unwrap_or_default();
                let limits = group
                    .as_ref()
                    .map(|g| {
                        format!(
                            "{} {} ",
                            host::cgroup_file(g, "memory.max"),
                            host::cgroup_file(g, "pids.max")
                        )
                    })
                    .unwrap_or_default();
                let groups: String = host::sandbox_groups(cg)
                    .iter()
                    .map(|g| format!("{} ", g.display()))
                    .collect();
                self.t.fail(
                    "bwrap-cgroup",
                    &format!(
                        "group '{g}' ({limits}); sleep: {}; groups: {groups}",
                        host::join_pids(&sleeps)
                    ),
                );
            }
        }

        let pid = self.state("MainPID");
        host::systemctl(&["kill", "--kill-who=main", "-s", "KILL", &self.service_unit]);
        self.wait_main_pid_other_than(&pid);
        let _ = call.wait();
        std::thread::sleep(Duration::from_secs(2));
        let left = format!(
            "{}{}",
            host::join_pids(&host::pids_named(uid, "sleep")),
            host::join_pids(&host::pids_named(uid, "bwrap"))
        );
        let status = b.status();
        let groups = host::sandbox_groups(cg);
        self.t.check(
            "bwrap-crash",
            left.is_empty() && status.is_ok() && groups.is_empty(),
            || format!("SIGKILL of pid {pid}: no sandbox process outlived it; the restart left no sandbox group"),
            || {
                let g: String = groups.iter().map(|g| format!("{} ", g.display())).collect();
                format!("left after the kill: '{left}'; after the restart: {g} (status {})", show_status(&status))
            },
        );
    }

    fn bwrap_limits(&mut self, b: &Broker) {
        // A fork loop, as for Podman.
        let kmsg = host::dmesg().len();
        let a = b.call("b1", "forks", "shell", &shell_args(FORK_LOOP));
        let text = content_or_message(&a).to_string();
        let good = content(&a).is_some()
            && text.lines().any(broker::says_cannot_fork)
            && !text.contains("all-forked");
        self.t.check(
            "bwrap-pids-limit",
            good,
            || broker::fork_line(&text).to_string(),
            || format!("answer {}", show(&a)),
        );
        let new = new_lines(kmsg);
        let kernel = first_line(&new, |l| l.contains("fork rejected by pids controller"))
            .unwrap_or_else(|| {
                "no pids controller message (the RLIMIT_NPROC backstop may have met the loop first)"
                    .into()
            });
        self.t.note(&format!("kernel: {kernel}"));

        let kmsg = host::dmesg().len();
        let a = b.call("b1", "hog", "shell", &shell_args(HOG));
        let new = new_lines(kmsg);
        let oom = first_line(&new, is_sandbox_oom_kill);
        match (&a, &oom) {
            (Ok(CallOutcome::Result { .. }), Some(line)) => {
                let cut: String = line.chars().take(300).collect();
                self.t.ok("bwrap-memory-limit", &format!("kernel: {cut}"));
            }
            _ => {
                let seen: Vec<&String> = new
                    .iter()
                    .filter(|l| {
                        let l = l.to_lowercase();
                        l.contains("oom") || l.contains("memory")
                    })
                    .take(2)
                    .collect();
                let seen = if seen.is_empty() {
                    "no OOM message".to_string()
                } else {
                    seen.iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join("\n")
                };
                self.t.fail(
                    "bwrap-memory-limit",
                    &format!("answer {}; kernel: {seen}", show(&a)),
                );
            }
        }
    }
}

/// The kernel's messages after the first `seen`.
fn new_lines(seen: usize) -> Vec<String> {
    host::dmesg().into_iter().skip(seen).collect()
}

/// The kernel's OOM-kill line for a process of a sandbox's own group:
/// `oom-kill:...,oom_memcg=<...>/sandbox-<name>,...`.
fn is_sandbox_oom_kill(line: &str) -> bool {
    let Some(i) = line.find("oom-kill:") else {
        return false;
    };
    let rest = &line[i..];
    rest.match_indices("oom_memcg=").any(|(j, m)| {
        let value = &rest[j + m.len()..];
        let value = value.split(',').next().unwrap_or("");
        value.contains("/sandbox-")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_oom_kill_counts_only_in_a_sandbox_group() {
        let inside = "[  812.1] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/system.slice/boxmaker.service/sandbox-b1-hog,task_memcg=/system.slice/boxmaker.service/sandbox-b1-hog,task=dd,pid=812,uid=990";
        let outside = "[  812.1] oom-kill:constraint=CONSTRAINT_MEMCG,oom_memcg=/system.slice/boxmaker.service,task_memcg=/x/sandbox-b1,task=dd";
        assert!(is_sandbox_oom_kill(inside));
        assert!(!is_sandbox_oom_kill(outside));
        assert!(!is_sandbox_oom_kill(
            "oom_memcg=/a/sandbox-x without the kill"
        ));
    }
}
