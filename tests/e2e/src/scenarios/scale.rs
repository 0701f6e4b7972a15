//! The scale bench (`--scale N`): calls per second and latency through the real brokerd of
//! this run, at 1, 2, 4, 8 and 16 concurrent clients, once with brokerd's default
//! `max_concurrent_calls` and once with it at this host's core count. Each client is a thread
//! that makes its calls one after another, each on a fresh connection, cycling through the tool
//! mix (`--scale-tools`, read_file and shell unless told); client `i` starts at tool `i`, so the
//! mix holds at every moment. A row's latency is what a client waited for its answer, queueing
//! for a slot included; its rate is the answers given over the row's wall time.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use client::Body;
use serde_json::{json, Value};

use super::{call_on, Suite, GRANT};
use crate::stats;

/// The clients of each row unless `--scale-clients` says otherwise.
pub const DEFAULT_CLIENTS: &[usize] = &[1, 2, 4, 8, 16];
/// The tool mix unless `--scale-tools` says otherwise: a file read and a command, the calls an
/// agent makes most; http_fetch starts a second sandbox (the proxy) per call.
pub const DEFAULT_TOOLS: &[&str] = &["read_file", "shell"];
const TOOLS: &[&str] = &["read_file", "write_file", "shell", "http_fetch"];

/// What `--scale`, `--scale-clients` and `--scale-tools` asked for.
pub struct Plan {
    /// Calls per row (each client makes at least one).
    pub calls: usize,
    pub clients: Vec<usize>,
    pub tools: Vec<String>,
}

impl Plan {
    /// `None` without `--scale` (or with `--scale 0`).
    pub fn from_opts(opts: &crate::Opts) -> Result<Option<Plan>, String> {
        let calls: usize = match opts.one("scale") {
            None => return Ok(None),
            Some(n) => n
                .parse()
                .map_err(|_| format!("--scale {n:?} is not a number"))?,
        };
        if calls == 0 {
            return Ok(None);
        }
        let clients = match opts.one("scale-clients") {
            None => DEFAULT_CLIENTS.to_vec(),
            Some(list) => list
                .split(',')
                .map(|c| match c.trim().parse::<usize>() {
                    Ok(n) if (1..=256).contains(&n) => Ok(n),
                    _ => Err(format!(
                        "--scale-clients {list:?}: {c:?} is not a number from 1 to 256"
                    )),
                })
                .collect::<Result<Vec<_>, _>>()?,
        };
        let tools = match opts.one("scale-tools") {
            None => DEFAULT_TOOLS.iter().map(|t| t.to_string()).collect(),
            Some(list) => list
                .split(',')
                .map(|t| {
                    let t = t.trim();
                    if TOOLS.contains(&t) {
                        Ok(t.to_string())
                    } else {
                        Err(format!(
                            "--scale-tools {list:?}: {t:?} is not one of {}",
                            TOOLS.join(", ")
                        ))
                    }
                })
                .collect::<Result<Vec<_>, _>>()?,
        };
        Ok(Some(Plan {
            calls,
            clients,
            tools,
        }))
    }
}

/// One row: what `clients` clients saw together.
struct Row {
    clients: usize,
    answered: usize,
    errors: usize,
    first_error: Option<String>,
    wall: Duration,
    latencies: Vec<Duration>,
}

impl Suite {
    /// brokerd's `max_concurrent_calls` when a config leaves it out, as the suite's does: what
    /// `brokerd defaults` prints.
    fn default_slots(&self) -> Result<usize, String> {
        let mut c = std::process::Command::new(&self.brokerd);
        c.arg("defaults");
        let (code, out, err) = crate::system::output_apart(c, self.t(Duration::from_secs(30)))?;
        if code != 0 {
            return Err(format!("brokerd defaults exited {code}: {err}"));
        }
        let defaults: Value = serde_json::from_str(&out)
            .map_err(|e| format!("brokerd defaults: not JSON ({e}): {out}"))?;
        defaults["broker"]["max_concurrent_calls"]
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .ok_or(format!(
                "brokerd defaults has no broker.max_concurrent_calls: {out}"
            ))
    }

    /// Runs the plan's rows at each slot count and returns the bench's JSON. brokerd is
    /// restarted with `max_concurrent_calls` set for each slot count, and with the run's own
    /// config again at the end.
    pub(super) fn scale(&mut self, plan: &Plan) -> Result<Value, String> {
        let original = std::fs::read_to_string(&self.config)
            .map_err(|e| format!("{}: {e}", self.config.display()))?;
        let default_slots = self.default_slots()?;
        let cores = stats::cores();
        // The default first; the core count as well where it differs.
        let mut settings = vec![(default_slots, "default")];
        if cores != default_slots {
            settings.push((cores, "cores"));
        }
        let mut rows = Vec::new();
        let outcome = self.scale_settings(plan, &original, &settings, &mut rows);
        // brokerd as the rest of the run expects it, whatever happened.
        let restored = std::fs::write(&self.config, &original)
            .map_err(|e| format!("{}: {e}", self.config.display()))
            .and_then(|()| self.restart_brokerd());
        outcome?;
        restored?;
        Ok(json!({
            "bench": "scale",
            "backend": self.backend.as_str(),
            "cores": cores,
            "default_slots": default_slots,
            "tools": plan.tools,
            "calls_per_row": plan.calls,
            "rows": rows,
        }))
    }

    fn scale_settings(
        &mut self,
        plan: &Plan,
        original: &str,
        settings: &[(usize, &str)],
        rows: &mut Vec<Value>,
    ) -> Result<(), String> {
        let b = self.backend.as_str();
        for &(slots, which) in settings {
            let text = with_slots(original, slots)?;
            std::fs::write(&self.config, text)
                .map_err(|e| format!("{}: {e}", self.config.display()))?;
            self.restart_brokerd()?;
            // One call of each tool first: brokerd's preflight, the page cache.
            let warm = self.scale_row(plan, 1, &format!("w{slots}"), plan.tools.len());
            if warm.errors > 0 {
                return Err(format!(
                    "the warm-up failed: {}",
                    warm.first_error.unwrap_or_default()
                ));
            }
            for &clients in &plan.clients {
                let per_client = plan.calls.div_ceil(clients).max(1);
                let row = self.scale_row(plan, clients, &format!("m{slots}-{clients}"), per_client);
                let mut ms: Vec<f64> = row.latencies.iter().map(|d| stats::ms(*d)).collect();
                let p50 = stats::percentile(&mut ms, 0.50);
                let p95 = stats::percentile(&mut ms, 0.95);
                let secs = row.wall.as_secs_f64();
                let rate = if secs > 0.0 {
                    row.answered as f64 / secs
                } else {
                    0.0
                };
                println!(
                    "scale {b} slots {slots:>2} ({which:<7}) clients {clients:>2}: {rate:>7.1} calls/s, \
                     p50 {:>8.1} ms, p95 {:>8.1} ms ({} calls, {} errors)",
                    p50.unwrap_or(f64::NAN),
                    p95.unwrap_or(f64::NAN),
                    row.answered,
                    row.errors,
                );
                if let Some(e) = &row.first_error {
                    println!("scale {b} note: first error of the row: {e}");
                }
                rows.push(json!({
                    "slots": slots,
                    "slots_are": which,
                    "clients": row.clients,
                    "calls": row.answered,
                    "errors": row.errors,
                    "seconds": secs,
                    "calls_per_s": rate,
                    "p50_ms": p50,
                    "p95_ms": p95,
                }));
            }
        }
        Ok(())
    }

    /// `clients` threads, each making `per_client` calls in turn.
    fn scale_row(&self, plan: &Plan, clients: usize, tag: &str, per_client: usize) -> Row {
        let target = Target {
            socket: self.socket.clone(),
            ro: self.ro.clone(),
            rw: self.rw.clone(),
            wait: self.t(super::CALL_WAIT),
        };
        let target = &target;
        let started = Instant::now();
        let results: Vec<Vec<Result<Duration, String>>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..clients)
                .map(|c| {
                    let session = format!("scale-{tag}-c{c}");
                    s.spawn(move || {
                        (0..per_client)
                            .map(|k| {
                                let tool = &plan.tools[(c + k) % plan.tools.len()];
                                let call = format!("{tag}-c{c}-{k}");
                                target.call(&session, &call, tool, c)
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| vec![Err("a client thread panicked".into())])
                })
                .collect()
        });
        let wall = started.elapsed();
        let mut row = Row {
            clients,
            answered: 0,
            errors: 0,
            first_error: None,
            wall,
            latencies: Vec::new(),
        };
        for r in results.into_iter().flatten() {
            match r {
                Ok(d) => {
                    row.answered += 1;
                    row.latencies.push(d);
                }
                Err(e) => {
                    row.errors += 1;
                    row.first_error.get_or_insert(e);
                }
            }
        }
        row
    }

    fn restart_brokerd(&mut self) -> Result<(), String> {
        self.stop_brokerd();
        self.start_brokerd()
    }
}

/// What a client thread needs of the suite.
struct Target {
    socket: PathBuf,
    ro: PathBuf,
    rw: PathBuf,
    wait: Duration,
}

impl Target {
    /// One call, timed; anything but a result of the tool is an error.
    fn call(
        &self,
        session: &str,
        call: &str,
        tool: &str,
        client: usize,
    ) -> Result<Duration, String> {
        let args = match tool {
            "read_file" => json!({ "path": self.ro.join("hello.txt") }),
            "write_file" => json!({
                "path": self.rw.join(format!("scale-{client}.txt")),
                "content": "scale\n",
            }),
            "shell" => json!({ "command": "echo hi" }),
            _ => json!({ "url": "https://ok.test/" }),
        };
        let t = Instant::now();
        let body = call_on(
            &self.socket,
            self.wait,
            session,
            call,
            GRANT,
            tool,
            args,
            None,
        )?;
        let took = t.elapsed();
        match body {
            Body::Result { .. } => Ok(took),
            other => Err(format!("{tool}: {}", super::show(&other))),
        }
    }
}

/// The run's config with `[broker] max_concurrent_calls = slots`.
fn with_slots(config: &str, slots: usize) -> Result<String, String> {
    if config.contains("max_concurrent_calls") {
        return Err("the run's config already sets max_concurrent_calls".into());
    }
    let head = "[broker]\n";
    match config.find(head) {
        Some(at) => {
            let (before, after) = config.split_at(at + head.len());
            Ok(format!("{before}max_concurrent_calls = {slots}\n{after}"))
        }
        None => Err("the run's config has no [broker] section".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_go_into_the_broker_section() {
        let c = "# x\n[broker]\nclients = [0]\n\n[runner]\nbackend = \"bwrap\"\n";
        assert_eq!(
            with_slots(c, 3).unwrap(),
            "# x\n[broker]\nmax_concurrent_calls = 3\nclients = [0]\n\n[runner]\nbackend = \"bwrap\"\n"
        );
        assert!(with_slots("[runner]\n", 3).is_err());
        assert!(with_slots("[broker]\nmax_concurrent_calls = 2\n", 3).is_err());
    }
}
