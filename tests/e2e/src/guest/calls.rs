//! Calls through the socket-activated brokerd on Podman: a shell, a write and its read-back,
//! the journal's decision lines, the pids and memory limits, nothing left after; then a stop
//! during a call (drained, nothing left) and a SIGKILL during one (the restart sweeps what the
//! crash left), and the audit chain through both.

use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use client::CallOutcome;
use proto::sentences::Failure;

use super::broker::{self, content, content_or_message, shell_args, show, Broker};
use super::host;
use super::{Guest, FORK_LOOP, GRACE_S, NOTES_DIR};

/// brokerd's warning when its start removed what an earlier run left (crates/brokerd/src/main.rs).
const SWEEP_LOG: &str = "left by an earlier run";
/// What toolkit appends to the output of a command killed by SIGKILL.
const KILLED_9: &str = "[killed by signal 9]";
/// The path outside the grant that the refusal names.
const REFUSED_PATH: &str = "/etc/boxmaker-guest-refused";

/// A call running on a thread of its own, while the checks stop or kill brokerd.
pub(super) struct Background {
    handle: JoinHandle<Result<CallOutcome, String>>,
    /// The connection's other end, to close it when the check gives up.
    stream: Option<UnixStream>,
}

impl Background {
    /// A call whose answer is also written to `file`, as evidence.
    pub(super) fn start(
        b: &Broker,
        session: &str,
        call: &str,
        command: &str,
        file: PathBuf,
    ) -> Background {
        let (b, session, call, args) = (
            b.clone(),
            session.to_string(),
            call.to_string(),
            shell_args(command),
        );
        let stream = b.connect();
        let kept = stream.as_ref().ok().and_then(|s| s.try_clone().ok());
        let handle = std::thread::spawn(move || {
            let out = stream.and_then(|s| b.call_on(s, &session, &call, "shell", &args));
            let _ = std::fs::write(&file, format!("{}\n", show(&out)));
            out
        });
        Background {
            handle,
            stream: kept,
        }
    }

    /// Its answer, once it came.
    pub(super) fn wait(self) -> Result<CallOutcome, String> {
        self.handle
            .join()
            .unwrap_or_else(|_| Err("the call's thread panicked".into()))
    }

    /// Closes the connection (the caller gives up), without waiting for the answer.
    pub(super) fn abandon(self) {
        if let Some(s) = &self.stream {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl Guest {
    pub(super) fn calls(&mut self) {
        let b = match self.broker().cloned() {
            Ok(b) => b,
            Err(e) => return self.t.fail("shell", &e),
        };
        let a = b.call(
            "g1",
            "echo",
            "shell",
            &shell_args("echo hello from the guest"),
        );
        let label = match &a {
            Ok(CallOutcome::Result { content, label, .. })
                if content.contains("hello from the guest") =>
            {
                Some(label.clone())
            }
            _ => None,
        };
        self.t.check(
            "shell",
            label.is_some(),
            || format!("label {}", label.clone().unwrap_or_default()),
            || format!("answer {}", show(&a)),
        );

        let note = format!("{NOTES_DIR}/note.txt");
        let w_args =
            serde_json::json!({ "path": note, "content": "written in the guest\n" }).to_string();
        let w = b.call("g1", "write", "write_file", &w_args);
        let r = b.call(
            "g1",
            "read",
            "read_file",
            &serde_json::json!({ "path": note }).to_string(),
        );
        let owner = std::fs::metadata(&note)
            .ok()
            .map(|m| std::os::unix::fs::MetadataExt::uid(&m));
        let svc = self.svc.user.name.clone();
        self.t.check(
            "write-read",
            content(&w).is_some()
                && content(&r).is_some_and(|c| c.contains("written in the guest"))
                && owner == Some(self.svc.user.uid),
            || format!("the file is {svc}'s on the host side"),
            || format!("write {}; read {}; owner '{owner:?}'", show(&w), show(&r)),
        );

        self.journal_decisions(&b);
        self.limits(&b);
        let (left, egress) = (self.svc.leftovers(), self.svc.egress_left());
        self.t.check(
            "clean-after-calls",
            left.is_empty() && egress.is_empty(),
            || "no container labelled boxmaker, no egress directory".into(),
            || format!("left: {left} {egress}"),
        );
        self.stop_leaves_nothing(&b);
        self.crash_sweep(&b);
        self.audit_verify("audit-verify");
    }

    /// Every decision is one journal line with its fields under their own names: the refusal of
    /// a path outside the grant is found by DECISION=refused, with its kind and without the path.
    fn journal_decisions(&mut self, b: &Broker) {
        let a = b.call(
            "g1",
            "refused",
            "read_file",
            &serde_json::json!({ "path": REFUSED_PATH }).to_string(),
        );
        std::thread::sleep(Duration::from_secs(1));
        let unit = self.service_unit.clone();
        let line = host::journal_last(&unit, &["DECISION=refused", "CALL=refused"]);
        let ran = host::journal_last(&unit, &["DECISION=allow", "CALL=write"]);
        let f = |e: &Option<serde_json::Value>, k: &str| {
            e.as_ref().map(|e| host::field(e, k)).unwrap_or_default()
        };
        let raw = line.as_ref().map(|l| l.to_string()).unwrap_or_default();
        let good = matches!(a, Ok(CallOutcome::Refused { .. }))
            && f(&line, "KIND") == "path"
            && f(&line, "TOOL") == "read_file"
            && f(&line, "SESSION") == "g1"
            && !raw.contains("boxmaker-guest-refused")
            && f(&ran, "STATUS") == "result";
        self.t.check(
            "journal-decisions",
            good,
            || {
                format!(
                    "refused: kind {}; allowed write: status {}, {} ms",
                    f(&line, "KIND"),
                    f(&ran, "STATUS"),
                    f(&ran, "DURATION_MS")
                )
            },
            || {
                let ran = ran.as_ref().map(|l| l.to_string()).unwrap_or_default();
                format!(
                    "answer {}; refused line '{raw}'; write line '{ran}'",
                    show(&a)
                )
            },
        );
    }

    fn limits(&mut self, b: &Broker) {
        // A fork loop: more processes than --pids-limit allows; busybox sh says it cannot fork.
        let a = b.call("g1", "forks", "shell", &shell_args(FORK_LOOP));
        let text = content_or_message(&a).to_string();
        let good = content(&a).is_some()
            && text.lines().any(broker::says_cannot_fork)
            && !text.contains("all-forked");
        self.t.check(
            "pids-limit",
            good,
            || broker::fork_line(&text).to_string(),
            || format!("answer {}", show(&a)),
        );
        let kernel = first_line(&host::dmesg(), |l| {
            l.contains("fork rejected by pids controller")
        })
        .unwrap_or_else(|| "no pids controller message".into());
        self.t.note(&format!("kernel: {kernel}"));

        // A memory hog: a 200 MB buffer filled in one read, against a 64m limit.
        let a = b.call(
            "g1",
            "hog",
            "shell",
            &shell_args("exec dd if=/dev/zero of=/tmp/hog bs=200M count=1"),
        );
        let killed = Failure::Killed.to_string();
        let seen = match &a {
            Ok(CallOutcome::Result { content, .. }) if content.contains(KILLED_9) => {
                Some(KILLED_9.to_string())
            }
            Ok(CallOutcome::Failed { message }) if *message == killed => Some(message.clone()),
            _ => None,
        };
        self.t.check(
            "memory-limit",
            seen.is_some(),
            || format!("the model sees '{}'", seen.clone().unwrap_or_default()),
            || format!("answer {}", show(&a)),
        );
        let kernel = first_line(&host::dmesg(), |l| {
            l.contains("Memory cgroup out of memory") || l.contains("oom-kill")
        })
        .unwrap_or_else(|| "no OOM message".into());
        self.t.note(&format!("kernel: {kernel}"));
    }

    /// Stopping the service: drain, then nothing left. The call sleeps far longer than the check
    /// waits: a container that goes away did not just finish its work.
    fn stop_leaves_nothing(&mut self, b: &Broker) {
        let file = self.results_file("stop-call.txt");
        let call = Background::start(b, "g2", "long", "sleep 600", file.clone());
        let Some(name) = self.svc.wait_for_container() else {
            call.abandon();
            let answered = std::fs::read_to_string(&file).unwrap_or_default();
            self.t.fail(
                "stop-leaves-nothing",
                &format!(
                    "the sleep call's container never appeared; the call answered {}",
                    answered.trim_end()
                ),
            );
            return;
        };
        let started = Instant::now();
        host::systemctl(&["stop", &self.service_unit]);
        let t_stop = started.elapsed().as_secs();
        let answer = show(&call.wait());
        let (left, egress) = (self.svc.leftovers(), self.svc.egress_left());
        let stopped = format!("{}/{}", self.state("ActiveState"), self.state("Result"));
        if left.is_empty() && egress.is_empty() && stopped == "inactive/success" {
            let got: String = answer.chars().take(200).collect();
            self.t.ok(
                "stop-leaves-nothing",
                &format!(
                    "{name} removed; stop took {t_stop}s (grace {GRACE_S}s); the caller got {got}"
                ),
            );
        } else {
            std::thread::sleep(Duration::from_secs(20));
            let later = self.svc.leftovers();
            self.t.fail(
                "stop-leaves-nothing",
                &format!("after a stop of {t_stop}s the service is {stopped}, left: '{left}' {egress}; 20s later: '{later}'"),
            );
            let tail = host::journal_tail(&self.service_unit, 15);
            self.t.note(&tail);
        }
    }

    /// A crash during a call, and the restart's sweep.
    fn crash_sweep(&mut self, b: &Broker) {
        let _ = b.status();
        let file = self.results_file("crash-call.txt");
        let call = Background::start(b, "g3", "crash", "sleep 600", file.clone());
        if self.svc.wait_for_container().is_none() {
            call.abandon();
            let answered = std::fs::read_to_string(&file).unwrap_or_default();
            self.t.fail(
                "crash-sweep",
                &format!(
                    "the sleep call's container never appeared; the call answered {}",
                    answered.trim_end()
                ),
            );
            return;
        }
        let pid = self.state("MainPID");
        let cursor = host::journal_cursor();
        host::systemctl(&["kill", "-s", "KILL", &self.service_unit]);
        self.wait_main_pid_other_than(&pid);
        let _ = call.wait();
        let crashed = format!(
            "{}/{}/{}",
            self.state("ActiveState"),
            self.state("SubState"),
            self.state("Result")
        );
        let left_by_crash = self.svc.leftovers();
        let started = Instant::now();
        // The next connection (or Restart=) starts brokerd again; its answer comes after the sweep.
        let restarted = b.status();
        let t_sweep = started.elapsed().as_secs();
        let (left, egress) = (self.svc.leftovers(), self.svc.egress_left());
        let swept = host::journal_messages(&self.service_unit, cursor.as_deref())
            .iter()
            .filter(|l| l.contains(SWEEP_LOG))
            .count();
        if left_by_crash.is_empty() {
            self.t.fail(
                "crash-sweep",
                &format!("nothing was left after the SIGKILL of pid {pid} ({crashed}), so the sweep was not exercised"),
            );
        } else if left.is_empty() && egress.is_empty() && restarted.is_ok() && swept >= 1 {
            self.t.ok(
                "crash-sweep",
                &format!("SIGKILL of pid {pid} ({crashed}) left '{left_by_crash}'; brokerd answered again {t_sweep}s later, having removed it"),
            );
        } else {
            self.t.fail(
                "crash-sweep",
                &format!(
                    "after the restart ({}, {t_sweep}s): left '{left}' {egress}; sweep log lines since the crash: {swept}",
                    broker::show_status(&restarted)
                ),
            );
            let tail = host::journal_tail(&self.service_unit, 15);
            self.t.note(&tail);
        }
    }

    /// Up to 30 s for the service's main pid to be another than `pid`.
    pub(super) fn wait_main_pid_other_than(&self, pid: &str) {
        for _ in 0..60 {
            if self.state("MainPID") != pid {
                return;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

/// The first of `lines` that `keep` takes.
pub(super) fn first_line(lines: &[String], keep: impl Fn(&str) -> bool) -> Option<String> {
    lines.iter().find(|l| keep(l)).cloned()
}
