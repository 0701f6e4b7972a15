//! A sandbox's life: started (in its cgroup, with its rlimits and seccomp filter), given its
//! input once the decision is on disk, read, and stopped through its pidfd; the egress proxy
//! beside it (docs/design.md#the-bwrap-runner).

use super::*;

/// A started bwrap, held by its pidfd. Dropping it stops it (SIGKILL through the pidfd,
/// confirmed) and removes its cgroup; whatever cannot be confirmed poisons the runtime.
pub(crate) struct Sandbox<'a> {
    child: spawn::Child,
    pidfd: Pidfd,
    placement: Option<Placement>,
    reaped: bool,
    kill_confirm: Duration,
    poisoned: &'a AtomicBool,
    /// Its staged layers' overlays: unmounted when dropped, after bwrap has been stopped
    /// (the fields drop after `Drop::drop`'s `stop`).
    _overlays: Option<Overlays>,
}

impl Sandbox<'_> {
    fn reap(&mut self) -> io::Result<std::process::ExitStatus> {
        let status = self.pidfd.reap()?;
        self.reaped = true;
        Ok(status)
    }

    /// Kills bwrap (and with it the sandbox's PID namespace) through the pidfd, waits to see
    /// it die, then empties and removes the cgroup. Idempotent.
    ///
    /// Without a cgroup of its own, the sandbox's processes are seen to die through bwrap's
    /// children, taken before bwrap is killed: each must be a PID namespace's init (whose
    /// death takes every process of the namespace with it) and must be seen to exit. A child
    /// that is not one, or does not exit, leaves processes unaccounted for: poison
    /// (docs/design.md#preflight-and-poisoning).
    fn stop(&mut self) {
        if !self.reaped {
            let inner = match &self.placement {
                Some(Placement::Group(_)) => Vec::new(),
                _ => children_of(self.child.id()),
            };
            self.stop_outer();
            for (pidfd, pid, is_init) in inner {
                let what = if !pidfd.kill_foreign(self.kill_confirm) {
                    "did not die after two SIGKILLs through its pidfd"
                } else if !is_init {
                    "was not a PID namespace's init, so what it started cannot be seen to die"
                } else {
                    continue;
                };
                self.poisoned.store(true, Ordering::SeqCst);
                tracing::error!(
                    "a process of the sandbox of bwrap {} (pid {pid}) {what}; {}; see {RUNBOOK}",
                    self.child.id(),
                    Trouble::Poisoned.say(&WORDS)
                );
            }
        }
        if let Some(p) = self.placement.take() {
            drop_placement(p, self.poisoned);
        }
    }

    /// SIGKILL to bwrap's own process through its pidfd, confirmed and reaped.
    fn stop_outer(&mut self) {
        match self.pidfd.kill_and_reap(self.kill_confirm) {
            Stopped::Confirmed(_) => self.reaped = true,
            Stopped::Unconfirmed => {
                self.poisoned.store(true, Ordering::SeqCst);
                tracing::error!(
                    "bwrap (pid {}) did not die after two SIGKILLs through its pidfd; {}; see {RUNBOOK}",
                    self.child.id(),
                    Trouble::Poisoned.say(&WORDS)
                );
            }
        }
    }
}

/// The children of process `pid`, each held by a pidfd opened before it was looked at, with
/// its PID and whether it is the init of a PID namespace below brokerd's.
pub(super) fn children_of(pid: u32) -> Vec<(Pidfd, libc::pid_t, bool)> {
    let mut found = Vec::new();
    for child in reaper::children(&pid.to_string()) {
        let mut is_init = false;
        let opened = Pidfd::open_if(child, || {
            let status = std::fs::read_to_string(format!("/proc/{child}/status"));
            is_init = status.is_ok_and(|s| reaper::is_namespace_init(&s));
            true
        });
        if let Some(pidfd) = opened {
            found.push((pidfd, child, is_init));
        }
    }
    found
}

impl Drop for Sandbox<'_> {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Stops the proxy and removes the egress directory when the call ends, however it ends:
/// no proxy outlives its call (docs/design.md#runners).
pub(crate) struct ProxyGuard<'a> {
    spec: &'a RunSpec,
    dir: PathBuf,
    sandbox: Option<Sandbox<'a>>,
}

impl Drop for ProxyGuard<'_> {
    fn drop(&mut self) {
        if let Some(mut s) = self.sandbox.take() {
            s.stop();
        }
        if let Err(e) = egress::remove_dir(&self.dir) {
            tracing::warn!(
                session = %self.spec.session,
                call = %self.spec.call,
                "could not remove {}: {e}",
                self.dir.display()
            );
        }
    }
}

pub(super) fn cmd_is_scope(cmd: &Spawn) -> bool {
    cmd.program()
        .as_os_str()
        .as_bytes()
        .ends_with(b"systemd-run")
}

/// What a bwrap is started with ([`BwrapRuntime::start`]).
pub(super) struct Launch {
    /// bwrap's arguments.
    pub(super) argv: Vec<OsString>,
    /// Its cgroup, or the scope that makes one.
    pub(super) placement: Placement,
    pub(super) rlimits: ResourceLimits,
    pub(super) stdio: [Io; 3],
    /// The descriptors `argv` names (grant directories, pins, protected targets), passed last.
    pub(super) mount_fds: Vec<OwnedFd>,
}

/// What bwrap was handed, held in brokerd until it has started.
struct HandedOver {
    /// brokerd's own copies of the seccomp filter's and the mounts' descriptors.
    _passed: (Option<OwnedFd>, Vec<OwnedFd>),
    /// The staged layers' overlays, mounted in the child.
    overlays: Option<Overlays>,
}

impl BwrapRuntime {
    /// Starts bwrap (inside a scope where configured) with the rlimits set and the cgroup
    /// joined between fork and exec, and takes its pidfd.
    pub(super) fn start(&self, spec: &RunSpec, launch: Launch) -> Result<Sandbox<'_>, RunError> {
        let Launch {
            argv,
            placement,
            rlimits,
            stdio,
            mount_fds,
        } = launch;
        let mut cmd = self.command(&placement);
        // A Spawn passes no environment but what it is given: bwrap starts with nothing.
        dies_with_brokerd(&mut cmd);
        cmd.args(&argv).stdio(stdio);
        let procs_fd = match &placement {
            Placement::Group(g) => Some(g.procs_fd()),
            _ => None,
        };
        // SAFETY: the hook calls only setrlimit and write(2), both async-signal-safe, and
        // writes no memory; the fd it writes to stays open in brokerd until the Sandbox
        // (holding the group) is dropped.
        unsafe {
            cmd.pre_exec_hook(move || {
                rlimits.apply()?;
                if let Some(fd) = procs_fd {
                    cgroup::join_from_child(fd)?;
                }
                Ok(())
            });
        }
        // Held until bwrap has started.
        let handed = match self.hand_over(spec, &mut cmd, mount_fds) {
            Ok(h) => h,
            Err((trouble, detail)) => {
                drop_placement(placement, &self.poisoned);
                return Err(self.unavailable(spec, trouble, &detail));
            }
        };
        let child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                drop_placement(placement, &self.poisoned);
                return Err(self.not_started(spec, &cmd, e, handed.overlays.is_some()));
            }
        };
        let pidfd = match Pidfd::open(child.pid()) {
            Ok(p) => p,
            Err(e) => {
                // The child is not reaped, so its PID still names it; this is the one place
                // a PID is used, because no pidfd could be had (EMFILE or a pre-5.3 kernel).
                let mut child = child;
                child.kill_and_wait();
                drop_placement(placement, &self.poisoned);
                if e.raw_os_error() == Some(libc::ENOSYS) {
                    let t = Terminal::NoPidfd(e.to_string());
                    self.remember(t.clone());
                    return Err(self.unavailable(
                        spec,
                        Trouble::Terminal(t),
                        "remembered until restart",
                    ));
                }
                return Err(self.unavailable(spec, Trouble::Start, &format!("pidfd_open: {e}")));
            }
        };
        Ok(Sandbox {
            child,
            pidfd,
            placement: Some(placement),
            reaped: false,
            kill_confirm: self.kill_confirm,
            poisoned: &self.poisoned,
            _overlays: handed.overlays,
        })
    }

    /// The command that starts bwrap: bwrap itself, or for a scope the scope's helper, which
    /// starts bwrap through `env -i`.
    fn command(&self, placement: &Placement) -> Spawn {
        // bwrap's own process in the sandbox (its PID 1) keeps the environment it was started
        // with (`--clearenv` clears only its child's), and a sandbox can read it in
        // /proc/1/environ: bwrap starts with nothing of brokerd's. For a scope, systemd-run
        // keeps what it needs to reach the user's manager and starts bwrap through `env -i`.
        let bwrap = find_program(&self.bwrap);
        match placement {
            Placement::Scope { prefix, .. } => match prefix.split_first() {
                Some((program, rest)) => {
                    let mut c = Spawn::new(find_program(Path::new(program)));
                    c.args(rest)
                        .arg(find_program(Path::new("env")))
                        .arg("-i")
                        .arg(&bwrap);
                    for key in ["XDG_RUNTIME_DIR", "DBUS_SESSION_BUS_ADDRESS"] {
                        if let Some(v) = std::env::var_os(key) {
                            c.env(key, v);
                        }
                    }
                    c
                }
                None => Spawn::new(&bwrap),
            },
            _ => Spawn::new(&bwrap),
        }
    }

    /// Hands bwrap its seccomp filter and the descriptors its arguments name, and hooks the
    /// staged layers' overlays: what is returned is held until bwrap has started. On
    /// failure, why (the placement is the caller's to drop).
    fn hand_over(
        &self,
        spec: &RunSpec,
        cmd: &mut Spawn,
        mount_fds: Vec<OwnedFd>,
    ) -> Result<HandedOver, (Trouble, String)> {
        // After the cgroup hook, which may use the descriptor number the filter goes to; the
        // mount descriptors last, moved to the numbers the argument list names.
        let passed_fds = mount_fds.len();
        let passed = seccomp::pass_to(cmd)
            .map_err(|e| format!("seccomp filter: {e}"))
            .and_then(|filter| match mounts::pass_to(cmd, mount_fds) {
                Ok(mounts) => Ok((filter, mounts)),
                Err(e) => Err(format!("grant directories: {e}")),
            })
            .map_err(|detail| (Trouble::Start, detail))?;
        // A staged grant directory: the session's layer over it, mounted in the child last
        // (docs/design.md#staged-writes-and-owners).
        let overlays = self
            .overlays(spec, passed_fds)
            .map_err(|e| (Trouble::Staged, e.to_string()))?;
        if let Some(o) = &overlays {
            o.hook(cmd);
        }
        Ok(HandedOver {
            _passed: passed,
            overlays,
        })
    }

    /// Why bwrap could not be started: its absence or a refused execution remembered (not a
    /// scope helper's), a staged layer's mount never.
    fn not_started(&self, spec: &RunSpec, cmd: &Spawn, e: io::Error, layers: bool) -> RunError {
        // With a layer to mount, a failure is the overlay's more likely than bwrap's: never
        // remembered, and never a fall back to the real directory.
        if layers {
            let detail = format!("mounting the staged layer, or starting bwrap: {e}");
            return self.unavailable(spec, Trouble::Staged, &detail);
        }
        let detail = format!("{}: {e}", self.bwrap.display());
        let terminal = Missing::of(&e).map(|m| Terminal::missing(m, detail.clone()));
        match terminal {
            // Only bwrap's own absence is terminal, not a scope helper's.
            Some(t) if !cmd_is_scope(cmd) => {
                self.remember(t.clone());
                self.unavailable(spec, Trouble::Terminal(t), "remembered until restart")
            }
            _ => self.unavailable(spec, Trouble::Start, &detail),
        }
    }

    /// Reads bwrap's own refusal: exit 1, nothing on standard output (toolkit's exit 1
    /// always prints its line there), and bwrap's `bwrap: ` message on standard error.
    pub(super) fn setup_failure(
        &self,
        status: std::process::ExitStatus,
        stdout: &[u8],
        stderr: &str,
    ) -> Option<Option<Terminal>> {
        if status.code() != Some(1) || !stdout.is_empty() || !stderr.starts_with("bwrap: ") {
            return None;
        }
        // A namespace the kernel could not make for want of a resource this moment (EAGAIN:
        // the user's processes or namespaces at their limit, as a flood of calls can bring
        // them; ENOSPC: max_user_namespaces reached) is this call's failure, not the host's:
        // the next call tries again.
        let short_of = stderr.contains("Resource temporarily unavailable")
            || stderr.contains("No space left on device");
        let refused = stderr.contains("namespace")
            && (stderr.contains("No permissions")
                || stderr.contains("Operation not permitted")
                || stderr.contains("failed"))
            && !short_of
            || stderr.contains("uid map")
            || stderr.contains("setting up uid");
        Some(refused.then(|| Terminal::Refused(stderr.trim_end().to_string())))
    }

    /// Makes the egress directory and starts the proxy sandbox; the guard stops the proxy
    /// and removes the directory on every path.
    pub(super) fn start_egress<'a>(
        &'a self,
        spec: &'a RunSpec,
        egress: &Egress,
        name: &str,
        layout: &RootLayout,
        times: &Deadlines,
    ) -> Result<ProxyGuard<'a>, RunError> {
        let dir = self.egress_dir(name);
        // A shell call's proxy writes its report beside it (docs/design.md#shell-and-its-egress-proxy).
        let report = egress.bounds.map(|_| egress::report_dir(&dir));
        let made = make_private_dir(&dir).map_err(|e| (dir.clone(), e));
        let mut guard = ProxyGuard {
            spec,
            dir,
            sandbox: None,
        };
        let made = made.and_then(|()| match &report {
            Some(r) => make_private_dir(r).map_err(|e| (r.clone(), e)),
            None => Ok(()),
        });
        if let Err((path, e)) = made {
            let detail = format!("{}: {e}", path.display());
            return Err(self.unavailable(spec, Trouble::EgressDir, &detail));
        }
        let deadline = times.step(self.egress_start);
        let placement = self
            .placement(
                &format!("{name}-egress"),
                CgroupLimits::new(PROXY_MEMORY, PROXY_PIDS),
            )
            .map_err(|e| self.unavailable(spec, Trouble::Limits, &e))?;
        let argv = self.proxy_argv(egress, name, layout, placement.cgroup_view());
        // The proxy's CPU is bounded by the whole call's time, the socket wait included.
        let rlimits =
            ResourceLimits::new(PROXY_MEMORY, self.pids, spec.timeout + self.egress_start);
        let launch = Launch {
            argv,
            placement,
            rlimits,
            stdio: [Io::Null, Io::Null, Io::Piped],
            mount_fds: Vec::new(),
        };
        let mut sandbox = self.start(spec, launch)?;
        let stderr = Capture::start(
            sandbox.child.stderr.take().map(std::fs::File::from),
            STDERR_KEEP,
            false,
        );
        guard.sandbox = Some(sandbox);
        let pidfd = guard.sandbox.as_ref().map(|s| &s.pidfd);
        let appeared = egress::wait_for_socket(&guard.dir, deadline, pidfd.map(Pidfd::as_fd));
        if appeared {
            Steps::way_out_clear(self, spec, deadline, self.egress_start)?;
            return Ok(guard);
        }
        let exited = pidfd.is_some_and(|p| p.wait_exit(Duration::ZERO));
        if exited {
            stderr.wait_done(Instant::now() + STDERR_GRACE);
            let detail = format!("the proxy sandbox exited: {}", stderr.text());
            return Err(self.unavailable(spec, Trouble::ProxyFailed, &detail));
        }
        let detail = format!(
            "{} did not appear within {:?}",
            guard.dir.join(EGRESS_SOCKET).display(),
            self.egress_start
        );
        Err(self.unavailable(spec, Trouble::ProxySocket, &detail))
    }

    /// Runs the tool sandbox and answers by the exit-status table of
    /// docs/design.md#runners. A sandbox that exited by itself is left in `exited`, for its
    /// cgroup to be removed after the answer.
    // One call's parts, each of a different owner: bundling them would only rename them.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn run_tool<'a>(
        &'a self,
        spec: &RunSpec,
        name: &str,
        layout: &RootLayout,
        exited: &mut Option<Sandbox<'a>>,
        held: &Held<'_>,
        cleared: &Cleared,
        times: &Deadlines,
    ) -> Result<RunOutput, RunError> {
        let (mut sandbox, deadline) = self.start_tool(spec, name, layout, held, times)?;
        // The sandbox was made while brokerd put the decision on disk; its tool gets its
        // input only now (dropping the sandbox stops it).
        if !cleared.wait(deadline) {
            return Err(not_cleared(spec));
        }
        let child = &mut sandbox.child;
        let fds = [child.stdin.take(), child.stdout.take(), child.stderr.take()];
        let cap = spec.limits.output_cap.unwrap_or(self.output_cap);
        let mut streams = Streams::of(fds, &spec.input, cap);
        let status = match serve_tool(spec, &mut sandbox, &mut streams, deadline) {
            Served::Exited(status) => status,
            Served::Answered(answer) => return answer,
        };
        // bwrap has exited, so the sandbox's PID namespace is gone and the pipes end at once.
        streams.drain(Instant::now() + DRAIN_GRACE);
        *exited = Some(sandbox);
        self.exit_answer(spec, status, &streams)
    }

    /// The tool's sandbox started over the grant's directories, with the grant's limits;
    /// with the time its tool must be done by.
    fn start_tool<'a>(
        &'a self,
        spec: &RunSpec,
        name: &str,
        layout: &RootLayout,
        held: &Held<'_>,
        times: &Deadlines,
    ) -> Result<(Sandbox<'a>, Instant), RunError> {
        // Right before the sandbox: the directories of the grant and no others, then the
        // pins and protected targets the walk opened.
        let mut mount_fds = open_mounts(&spec.mounts).map_err(|e| mount_changed(spec, e))?;
        let over = held.mounts();
        for (_, fd) in &over {
            let fd = fd.try_clone().map_err(|e| {
                self.unavailable(spec, Trouble::Start, &format!("protected target: {e}"))
            })?;
            mount_fds.push(fd);
        }
        let protected: Vec<Over<'_>> = over.iter().map(|(o, _)| *o).collect();
        // The grant's own limits, at most [runner]'s (docs/design.md#grantsname).
        let (memory, pids) = self.limits_of(spec);
        let placement = self
            .placement(name, CgroupLimits::new(memory, pids))
            .map_err(|e| self.unavailable(spec, Trouble::Limits, &e))?;
        let argv = self.build_argv_with(spec, name, layout, placement.cgroup_view(), &protected);
        let rlimits = ResourceLimits::new(memory, pids, spec.timeout);
        let deadline = times.step(spec.timeout);
        let launch = Launch {
            argv,
            placement,
            rlimits,
            stdio: [Io::Piped, Io::Piped, Io::Piped],
            mount_fds,
        };
        Ok((self.start(spec, launch)?, deadline))
    }

    /// The answer of a tool sandbox that exited by itself: bwrap's own refusal, or the
    /// tool's by its exit status.
    fn exit_answer(
        &self,
        spec: &RunSpec,
        status: std::process::ExitStatus,
        streams: &Streams,
    ) -> Result<RunOutput, RunError> {
        let err = streams.stderr_text();
        if let Some(terminal) = self.setup_failure(status, streams.stdout(), &err) {
            return Err(match terminal {
                Some(t) => {
                    self.remember(t.clone());
                    self.unavailable(spec, Trouble::Terminal(t), "remembered until restart")
                }
                None => self.unavailable(spec, Trouble::Build, &err),
            });
        }
        let truncated = streams.overflowed();
        match verdict(status, streams.stdout().to_vec(), truncated) {
            Verdict::Output(out) => Ok(out),
            Verdict::RunnerFailed => {
                let detail = format!("bwrap exited with {status}: {err}");
                Err(self.unavailable(spec, Trouble::Build, &detail))
            }
            Verdict::Failed(f) => {
                super::super::tool_failed_line(spec, "bwrap", &status, &err);
                Err(RunError::Failed(f))
            }
        }
    }
}

/// How serving a tool sandbox's streams ended.
enum Served {
    /// bwrap exited by itself.
    Exited(std::process::ExitStatus),
    /// The call is answered already (its output capped, its time or staged bound run out),
    /// the sandbox stopped.
    Answered(Result<RunOutput, RunError>),
}

/// Serves the tool sandbox's streams until bwrap exits, its standard output passes the cap,
/// or the deadline, checking a staged grant's bound meanwhile.
fn serve_tool(
    spec: &RunSpec,
    sandbox: &mut Sandbox<'_>,
    streams: &mut Streams,
    deadline: Instant,
) -> Served {
    loop {
        // Wakes on bwrap's exit, on standard output passing the cap, or at the deadline,
        // serving the sandbox's streams meanwhile.
        let look = crate::runner::staged_look(spec, deadline);
        match streams.wait(Some(sandbox.pidfd.as_fd()), look) {
            Event::Exited => match sandbox.reap() {
                Ok(status) => return Served::Exited(status),
                Err(e) => {
                    tracing::error!(session = %spec.session, call = %spec.call, "reaping bwrap failed: {e}");
                    sandbox.stop();
                    return Served::Answered(Err(RunError::Failed(Failure::UnexpectedStatus)));
                }
            },
            Event::Overflowed => {
                // docs/design.md#output: the capped output is the answer, not a time-out.
                sandbox.stop();
                return Served::Answered(Ok(RunOutput {
                    content: crate::runner::output::decode(streams.stdout().to_vec(), true),
                    truncated: true,
                }));
            }
            Event::Deadline if Instant::now() < deadline => {
                // docs/design.md#staged-writes-and-owners: the bound holds during a call.
                if crate::runner::staged_over(spec) {
                    sandbox.stop();
                    return Served::Answered(Err(RunError::Failed(Failure::StagedFull)));
                }
            }
            Event::Deadline => {
                sandbox.stop();
                return Served::Answered(Err(RunError::Failed(Failure::TimedOut)));
            }
            Event::Look => {}
        }
    }
}
