//! What a scenario leaves behind (the service user's sandboxes and egress directories, looked
//! for after every scenario and removed after a failure), and brokerd killed while a call runs:
//! its restart's sweep must remove what the crash left. Last, brokerd stopped by SIGTERM.

use std::time::{Duration, Instant};

use proto::podman::LABEL_FILTER;
use proto::tools::TOOLKIT;
use serde_json::{json, Value};

use super::{call_on, check, Backend, Outcome, Suite, AFTER_ANSWER, CALL_WAIT, GRANT, SETTLE};
use crate::system;

impl Suite {
    /// The service user's sandboxes (containers labelled `boxmaker`, or bwrap sandbox
    /// processes) and egress directories, as they are now.
    pub(super) fn leftovers(&self) -> Result<Vec<String>, String> {
        let mut left = match self.backend {
            Backend::Podman => {
                let mut c = self.user.command(&self.podman);
                c.args([
                    "ps",
                    "-a",
                    "--filter",
                    LABEL_FILTER,
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
    pub(super) fn settled_leftovers(&self, brokerd_alive: bool) -> Result<Vec<String>, String> {
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

    pub(super) fn clean_up_after_failure(&self) {
        match self.backend {
            Backend::Podman => {
                let mut c = self.user.command(&self.podman);
                c.args(["ps", "-aq", "--filter", LABEL_FILTER]);
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
                    let toolkit = format!(" {TOOLKIT} ");
                    let what = p.cmdline.split(&toolkit).nth(1).unwrap_or("");
                    what.split(' ').next().unwrap_or("").to_string()
                })
                .collect();
        }
        let mut c = self.user.command(&self.podman);
        c.args(["ps", "--filter", LABEL_FILTER, "--format", "{{.Names}}"]);
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

    pub(super) fn crash_during_shell(&mut self) -> Outcome {
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
    pub(super) fn crash_with_long_ids(&mut self) -> Outcome {
        self.session = format!("{:x<64}", self.session);
        self.long_call_ids = true;
        let outcome = self.crash_during_shell();
        self.long_call_ids = false;
        outcome
    }

    pub(super) fn crash_during_fetch(&mut self) -> Outcome {
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
    pub(super) fn crash_while_starting(&mut self) -> Outcome {
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

    pub(super) fn sigterm(&mut self) -> Outcome {
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
