//! The ratio bench (`--bench N`): each tool through brokerd next to the bare command of the
//! argument list brokerd builds for the same call.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use client::Body;

use super::{check, percentiles, show, Backend, Outcome, Suite, GRANT, NET_GRANT, QUIET_GRANT};
use crate::system;

/// The bare command a bench compares brokerd with, built by the runners' own code.
enum BareRunner {
    // Boxed: the two runtimes differ in size by hundreds of bytes.
    Podman(Box<boxmaker_sandbox::runner::podman::PodmanRuntime>),
    Bwrap(
        Box<boxmaker_sandbox::runner::bwrap::BwrapRuntime>,
        boxmaker_sandbox::runner::bwrap::RootLayout,
    ),
}

impl Suite {
    /// Wall time per call of each tool through brokerd, next to the bare command of the
    /// argument list brokerd builds for the same call: `podman run` of
    /// `PodmanRuntime::tool_args` (for http_fetch the proxy's `egress_args` before it, and both
    /// together as the `beside` side), or
    /// `bwrap` of `BwrapRuntime::build_argv` (and `proxy_argv`), as the service user. The
    /// bare side has no rlimits, no pidfd and no output capture beyond reading stdout.
    /// Returns the rows as the bench's JSON.
    pub(super) fn bench(&mut self, n: usize) -> Result<Value, String> {
        use boxmaker_sandbox::runner::bwrap::{BwrapRuntime, RootLayout};
        use boxmaker_sandbox::runner::podman::PodmanRuntime;
        use boxmaker_sandbox::runner::{Egress, Mount, RunSpec};
        use proto::tools::ToolName;
        let config = boxmaker_config::load(&self.config, &boxmaker_sandbox::sys::System)
            .map_err(|e| e.to_string())?;
        let rc = config.runner.clone().ok_or("no [runner]")?;
        let bare_runner = match self.backend {
            Backend::Podman => BareRunner::Podman(Box::new(PodmanRuntime::new(&rc))),
            Backend::Bwrap => {
                let bc = config.bwrap.clone().ok_or("no [bwrap]")?;
                let layout = RootLayout::read(&bc.tools_root)
                    .map_err(|e| format!("{}: {e}", bc.tools_root.display()))?;
                BareRunner::Bwrap(Box::new(BwrapRuntime::new(&rc, &bc)), layout)
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
            // On Podman, http_fetch bare also in the order brokerd starts it
            // (docs/design.md#http_fetch-and-its-egress-proxy): the tool container beside its
            // proxy, its input held until the socket is seen and `run -d` has exited
            // (`bare_podman_beside`); `bare` starts the proxy, then the tool.
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
                        bounds: None,
                    }),
                    timeout: self.t(Duration::from_secs(30)),
                    staged_limit: None,
                    toolset: None,
                    limits: Default::default(),
                    cache: None,
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
                    "bench {b} {:<10} bare, tool beside its proxy as brokerd starts it p50 {sp50:>7.1} ms p95 {sp95:>7.1} ms ; \
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
    pub(super) fn await_settled(&self) {
        let limit = Instant::now() + self.t(Duration::from_secs(20));
        while std::fs::read_dir(&self.egress_root).is_ok_and(|mut d| d.next().is_some())
            && Instant::now() < limit
        {
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    pub(super) fn bare_podman(
        &self,
        runtime: &boxmaker_sandbox::runner::podman::PodmanRuntime,
        spec: &boxmaker_sandbox::runner::RunSpec,
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

    /// A bare http_fetch in the order brokerd starts one
    /// (docs/design.md#http_fetch-and-its-egress-proxy): the proxy's `run -d` and the tool's
    /// `run` of the same argument lists started together, the tool's input written once the
    /// socket is seen and the proxy's `run -d` has exited. Returns the time until the tool's
    /// answer; the proxy's `rm -f` and the directory's removal come after it, as brokerd's do.
    fn bare_podman_beside(
        &self,
        runtime: &boxmaker_sandbox::runner::podman::PodmanRuntime,
        spec: &boxmaker_sandbox::runner::RunSpec,
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
                        "beside run of {name}: {status} {}",
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
        runtime: &boxmaker_sandbox::runner::bwrap::BwrapRuntime,
        layout: &boxmaker_sandbox::runner::bwrap::RootLayout,
        spec: &boxmaker_sandbox::runner::RunSpec,
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
            let _filter =
                boxmaker_sandbox::runner::seccomp::pass_to(&mut c).map_err(|e| e.to_string())?;
            let child = c.spawn().map_err(|e| format!("proxy: {e}"))?;
            proxy = Some((child, dir.clone()));
            wait_for_socket(&dir, self.t(Duration::from_secs(5)));
        }
        let mut c = self.user.command("bwrap");
        c.args(runtime.build_argv(spec, name, layout, None));
        let _filter =
            boxmaker_sandbox::runner::seccomp::pass_to(&mut c).map_err(|e| e.to_string())?;
        // The argument list binds the grant's directories by descriptor, as brokerd does.
        let fds = boxmaker_sandbox::runner::mounts::open_mounts(&spec.mounts)
            .map_err(|e| e.to_string())?;
        let _mounts =
            boxmaker_sandbox::runner::mounts::pass_to(&mut c, fds).map_err(|e| e.to_string())?;
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

impl Suite {
    /// The egress bench: the same shell call on the grant with `shell_hosts` and on one
    /// without, alternating, `n` each after a warm-up (p50 and p95 through brokerd): what a
    /// proxy's start and removal add to a call. Each call starts once the one before it has
    /// cleaned up, as when a model thinks between calls.
    pub(super) fn bench_egress(&mut self, n: usize) -> Result<Value, String> {
        let (mut with, mut without) = self.alternate_echo(NET_GRANT, QUIET_GRANT, n)?;
        let (wp50, wp95) = percentiles(&mut with);
        let (op50, op95) = percentiles(&mut without);
        println!(
            "bench {} shell without shell_hosts p50 {op50:>7.1} ms p95 {op95:>7.1} ms ; \
             with p50 {wp50:>7.1} ms p95 {wp95:>7.1} ms ; added p50 {:.1} ms (n {n})",
            self.backend.as_str(),
            wp50 - op50
        );
        Ok(json!({
            "bench": "egress",
            "backend": self.backend.as_str(),
            "calls": n,
            "without_p50_ms": op50,
            "without_p95_ms": op95,
            "with_p50_ms": wp50,
            "with_p95_ms": wp95,
            "added_p50_ms": wp50 - op50,
            "ratio_p50": wp50 / op50,
        }))
    }
}

impl Suite {
    /// `echo hi` through brokerd on grant `a` and on grant `b`, taking turns (which goes first
    /// alternates), `n` each after a warm-up of each, every call once the one before it has
    /// cleaned up: the wall times on `a`, then on `b`.
    pub(super) fn alternate_echo(
        &mut self,
        a: &str,
        b: &str,
        n: usize,
    ) -> Result<(Vec<Duration>, Vec<Duration>), String> {
        let args = json!({ "command": "echo hi" });
        let (mut on_a, mut on_b) = (Vec::new(), Vec::new());
        for i in 0..=n {
            for a_now in [i % 2 == 0, i % 2 != 0] {
                self.await_settled();
                let grant = if a_now { a } else { b };
                let t = Instant::now();
                let body = self.call_as(grant, "shell", args.clone(), None)?;
                let took = t.elapsed();
                match body {
                    Body::Result { content, .. } if content.starts_with("hi") => {}
                    other => return Err(format!("shell on {grant}: {}", show(&other))),
                }
                if i > 0 {
                    if a_now { &mut on_a } else { &mut on_b }.push(took);
                }
            }
        }
        Ok((on_a, on_b))
    }
}
