//! The suite's own steps: the config it writes for brokerd, starting and stopping brokerd as
//! the service user, and the calls a scenario makes through it.

use std::fs::File;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use client::{Body, Client, Request};
use serde_json::{json, Value};

use super::{
    call_on, check, host_egress_network, show, staged, time_scale, Backend, EgressNetwork, Outcome,
    Suite, ASK_GRANT, CALL_WAIT, CANARY_NAME, CANARY_VALUE, DEV_CACHE_BYTES, DEV_GRANT,
    DEV_QUIET_GRANT, DEV_STAGED_GRANT, GRANT, GRANT_HOSTS, NET_CONNECTIONS, NET_GRANT, OUTPUT_CAP,
    QUIET_GRANT, RO_TEXT, SHELL_MS, STAGED_GRANT,
};
use crate::system::{self, User};

impl Suite {
    pub(super) fn prepare(
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
        // The other backend's tree, for the scenario that changes backend under a layer.
        let tree = opts.one("tools-root").map(PathBuf::from);
        // The toolset of git and make, on both backends (the other one's config has it too).
        let dev = match (opts.one("dev-image"), opts.one("dev-tree")) {
            (Some(image), Some(tree)) => Some((image, tree)),
            (None, None) => None,
            _ => return Err("--dev-image and --dev-tree go together".into()),
        };
        let dev_section = match &dev {
            None => String::new(),
            Some((image, tree)) => format!(
                r#"
[toolsets.{DEV_GRANT}]
image = "{image}"
tree = "{tree}"

[grants.{DEV_GRANT}]
mode = "auto"
tools = ["shell"]
paths = [ {{ path = "{rw}", write = true }} ]
shell_hosts = ["ok.test"]
allow_addresses = ["192.0.2.0/24"]
toolset = "{DEV_GRANT}"
cache = true
max_cache_bytes = {DEV_CACHE_BYTES}

[grants.{DEV_QUIET_GRANT}]
mode = "auto"
tools = ["shell"]
paths = [ {{ path = "{ro}" }} ]
toolset = "{DEV_GRANT}"

[grants.{DEV_STAGED_GRANT}]
mode = "auto"
tools = ["read_file", "write_file", "shell"]
paths = [ {{ path = "{project}", write = true }} ]
writes = "staged"
toolset = "{DEV_GRANT}"
cache = true
"#,
                rw = work.join("rw").display(),
                project = work.join("project").display(),
                ro = work.join("ro").display(),
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
        // The staged grant's project: C where the toolset has a compiler (`--dev-project c`).
        let project = match opts.one("dev-project").as_deref() {
            None | Some("sh") => &super::toolsets::SHELL_PROJECT,
            Some("c") => &super::toolsets::C_PROJECT,
            Some(other) => return Err(format!("--dev-project {other:?} is not c or sh")),
        };
        if dev.is_some() {
            super::toolsets::make_project(&work.join("project"), &user, project)?;
        }
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
            (Some(n), _) => Some(EgressNetwork::parse(&n).ok_or(format!(
                "--egress-network {n:?} is not pasta or slirp4netns"
            ))?),
            (None, None) => Some(host_egress_network(&user, &podman)?),
            (None, Some(_)) => None,
        };
        // The [runner] keys and the [bwrap] section of a backend: this run's, or the other one's
        // (`staged-layer-outlives-a-change-of-backend`; its egress network is looked up then).
        let backend_keys = |b: Backend, egress_network: Option<EgressNetwork>| {
            let network =
                egress_network.map_or(String::new(), |n| format!("egress_network = \"{n}\"\n"));
            match b {
                Backend::Podman => format!(
                    "backend = \"podman\"\npodman = \"{podman}\"\nimage = \"{image}\"\n{network}{limits_note}"
                ),
                Backend::Bwrap => format!("backend = \"bwrap\"\n{limits_note}"),
            }
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
        let bwrap_section = |b: Backend| match (b, &tree) {
            (Backend::Podman, _) | (Backend::Bwrap, None) => String::new(),
            // The test variant's tree: its CA bundle also holds the suite's test CA.
            (Backend::Bwrap, Some(root)) => {
                format!("\n[bwrap]\ntools_root = \"{}\"\n{cgroup}", root.display())
            }
        };
        let config_of = |b: Backend, egress_network: Option<EgressNetwork>| {
            format!(
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
egress_connections = {NET_CONNECTIONS}
home = "{home}"

[grants.{GRANT}]
mode = "auto"
tools = ["read_file", "write_file", "shell", "http_fetch"]
paths = [ {{ path = "{rw}", write = true }}, {{ path = "{ro}" }} ]
hosts = {grant_hosts}
allow_addresses = ["192.0.2.0/24"]

[grants.{NET_GRANT}]
mode = "auto"
tools = ["shell"]
paths = [ {{ path = "{ro}" }} ]
shell_hosts = ["ok.test", "tailnet.ok.test", "cgnat.ok.test", "loop.ok.test", "meta.ok.test", "rebind.ok.test"]
allow_addresses = ["192.0.2.0/24"]

[grants.{QUIET_GRANT}]
mode = "auto"
tools = ["shell"]
paths = [ {{ path = "{ro}" }} ]

[grants.{ASK_GRANT}]
mode = "ask"
tools = ["read_file", "write_file", "shell"]
paths = [ {{ path = "{rw}", write = true }} ]

[grants.{STAGED_GRANT}]
mode = "auto"
tools = ["read_file", "write_file", "shell"]
paths = [ {{ path = "{staged}", write = true }} ]
writes = "staged"
{dev_section}{bwrap_section}"#,
                backend_keys = backend_keys(b, egress_network),
                grant_hosts = json!(GRANT_HOSTS),
                bwrap_section = bwrap_section(b),
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
            )
        };
        let text = config_of(backend, egress_network);
        let other = match backend {
            Backend::Podman => Backend::Bwrap,
            Backend::Bwrap => Backend::Podman,
        };
        let other_ready = match other {
            Backend::Bwrap => tree.is_some(),
            Backend::Podman => !image.is_empty(),
        };
        let other_config = other_ready.then(|| {
            let egress = match other {
                Backend::Podman => host_egress_network(&user, &podman).map(Some),
                Backend::Bwrap => Ok(None),
            };
            // The scenario tests the layer, not the limits: this run's limit options (a cgroup
            // mode, --enforce-limits) are the run's backend's, so the other one enforces none.
            let text = egress.map(|egress| {
                config_of(other, egress).replace("enforce_limits = true", "enforce_limits = false")
            });
            (other, text)
        });
        std::fs::write(&config, text).map_err(|e| format!("{}: {e}", config.display()))?;
        let tailnet_log = opts.one("tailnet-log").map(PathBuf::from);
        // The test hosts outlive one backend's run: only connections from now on are this run's.
        let tailnet_before = tailnet_log.as_ref().map_or(0, |l| {
            std::fs::read_to_string(l)
                .unwrap_or_default()
                .lines()
                .count()
        });
        let dns_log = opts.one("dns-log").map(PathBuf::from);
        Ok(Suite {
            dev: dev.is_some(),
            dev_tree: dev.as_ref().map(|(_, tree)| PathBuf::from(tree)),
            project,
            base_tree: tree.clone(),
            dns_log,
            backend,
            tools_root,
            other_config,
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
    pub(super) fn t(&self, d: Duration) -> Duration {
        d * self.scale
    }

    /// Whole seconds, times `--time-scale` (for commands run in a sandbox).
    pub(super) fn secs(&self, s: u64) -> u64 {
        s * u64::from(self.scale)
    }

    // --- brokerd -----------------------------------------------------------------------------

    pub(super) fn start_brokerd(&mut self) -> Outcome {
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

    pub(super) fn stop_brokerd(&mut self) {
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

    pub(super) fn call_as(
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
    pub(super) fn call(&mut self, tool: &str, args: Value) -> Result<Body, String> {
        let body = self.call_as(GRANT, tool, args.clone(), None)?;
        match body {
            Body::Ask { ticket, .. } => self.call_as(GRANT, tool, args, Some(ticket)),
            other => Ok(other),
        }
    }

    /// A call that must give a result: (content, truncated).
    pub(super) fn result(&mut self, tool: &str, args: Value) -> Result<(String, bool), String> {
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

    pub(super) fn shell(&mut self, command: &str) -> Result<String, String> {
        self.result("shell", json!({ "command": command }))
            .map(|(c, _)| c)
    }

    pub(super) fn fetch(&mut self, url: &str) -> Result<Body, String> {
        self.call("http_fetch", json!({ "url": url }))
    }

    /// The id of the current call: `c<n>`, or padded to 64 characters.
    pub(super) fn call_id(&self) -> String {
        let id = format!("c{}-", self.calls);
        match self.long_call_ids {
            true => format!("{id:x<64}"),
            false => id.trim_end_matches('-').to_string(),
        }
    }
}
