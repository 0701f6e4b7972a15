//! `boxmaker-e2e report`: the benches' JSON (what `make bench` leaves in `build/bench/`) as the
//! tables of BENCHMARKS.md and the latency plot `docs/bench-scale.svg`.
//!
//! Each table goes between its markers in the Markdown file, `<!-- bench:NAME -->` and
//! `<!-- /bench:NAME -->`, and replaces what was there; a section whose JSON is missing keeps
//! its old text. The JSON files, each an object whose `bench` says what it holds:
//!
//! | file | `bench` | written by |
//! |---|---|---|
//! | `host.json` | `host` | `scripts/bench.sh` (the host and the run's settings) |
//! | `bench-<backend>.json` | `ratio` | `boxmaker-e2e run --bench N --bench-out DIR` |
//! | `scale-<backend>.json` | `scale` | `boxmaker-e2e run --scale N --bench-out DIR` |
//! | `staged-<backend>.json` | `staged` | `boxmaker-e2e run --bench N --bench-out DIR` |
//! | `egress-<backend>.json` | `egress` | `boxmaker-e2e run --bench N --bench-out DIR` |
//! | `toolset-<backend>.json` | `toolset` | the same, with `--dev-image` and `--dev-tree` |
//! | `changes-noop.json` | `changes` | brokerd's `staged_changes` example |
//! | `overhead.json`, `scale-noop.json` | `overhead`, `scale` | brokerd's `overhead` example |
//! | `podman-conf.json` | `podman-conf` | `scripts/bench-podman-conf.sh --json` |

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// The sections this program writes, in the order it writes them.
pub const SECTIONS: &[&str] = &[
    "host",
    "ratio",
    "staged",
    "egress",
    "toolset",
    "overhead",
    "scale",
    "podman-conf",
];

/// The performance targets of staged writes (docs/design.md#staged-writes-and-owners): a
/// staged call's p50 at most this many times a direct one's of the same run, by backend.
const STAGED_TARGETS: &[(&str, f64)] = &[("podman", 1.05), ("bwrap", 1.10)];
/// `changes` on a layer of 1,000 changed files: its p50 under this.
const CHANGES_TARGET_MS: f64 = 100.0;

/// The benches' JSON, by what each holds.
#[derive(Default)]
pub struct Results {
    host: Option<Value>,
    /// By backend.
    ratio: BTreeMap<String, Value>,
    /// By backend (`noop` for brokerd alone).
    scale: BTreeMap<String, Value>,
    overhead: Option<Value>,
    podman_conf: Option<Value>,
    /// By backend: staged calls next to direct ones.
    staged: BTreeMap<String, Value>,
    /// `changes` on a large layer, brokerd alone.
    changes: Option<Value>,
    /// By backend: shell calls with `shell_hosts` next to calls without.
    egress: BTreeMap<String, Value>,
    /// By backend: calls on a toolset next to calls on the base one, and `make test`.
    toolset: BTreeMap<String, Value>,
}

/// The order backends appear in, tables and plot alike.
const BACKEND_ORDER: &[&str] = &["podman", "bwrap", "noop"];

fn backend_rank(b: &str) -> usize {
    BACKEND_ORDER
        .iter()
        .position(|x| *x == b)
        .unwrap_or(BACKEND_ORDER.len())
}

fn backend_title(b: &str) -> String {
    match b {
        "noop" => "brokerd alone (no-op runner)".into(),
        other => other.to_string(),
    }
}

impl Results {
    /// Every `*.json` in `dir`.
    pub fn read_dir(dir: &Path) -> Result<Results, String> {
        let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut files: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        files.sort();
        let mut r = Results::default();
        for f in files {
            let text = std::fs::read_to_string(&f).map_err(|e| format!("{}: {e}", f.display()))?;
            r.add(&text).map_err(|e| format!("{}: {e}", f.display()))?;
        }
        Ok(r)
    }

    /// One file's JSON.
    pub fn add(&mut self, text: &str) -> Result<(), String> {
        let v: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let kind = text_of(&v, "bench")?;
        match kind.as_str() {
            "host" => self.host = Some(v),
            "ratio" => {
                let b = text_of(&v, "backend")?;
                self.ratio.insert(b, v);
            }
            "scale" => {
                let b = text_of(&v, "backend")?;
                self.scale.insert(b, v);
            }
            "overhead" => self.overhead = Some(v),
            "staged" => {
                let b = text_of(&v, "backend")?;
                self.staged.insert(b, v);
            }
            "changes" => self.changes = Some(v),
            "egress" => {
                let b = text_of(&v, "backend")?;
                self.egress.insert(b, v);
            }
            "toolset" => {
                let b = text_of(&v, "backend")?;
                self.toolset.insert(b, v);
            }
            "podman-conf" => self.podman_conf = Some(v),
            other => return Err(format!("unknown bench {other:?}")),
        }
        Ok(())
    }

    /// The Markdown of each section there is JSON for.
    pub fn sections(&self) -> Result<BTreeMap<&'static str, String>, String> {
        let mut out = BTreeMap::new();
        if let Some(h) = &self.host {
            out.insert("host", host_md(h)?);
        }
        if !self.ratio.is_empty() {
            out.insert("ratio", ratio_md(&sorted(&self.ratio))?);
        }
        if let Some(o) = &self.overhead {
            out.insert("overhead", overhead_md(o)?);
        }
        if !self.staged.is_empty() || self.changes.is_some() {
            out.insert(
                "staged",
                staged_md(&sorted(&self.staged), self.changes.as_ref())?,
            );
        }
        if !self.egress.is_empty() {
            out.insert("egress", egress_md(&sorted(&self.egress))?);
        }
        if !self.toolset.is_empty() {
            out.insert("toolset", toolset_md(&sorted(&self.toolset))?);
        }
        if !self.scale.is_empty() {
            out.insert("scale", scale_md(&sorted(&self.scale))?);
        }
        if let Some(p) = &self.podman_conf {
            out.insert("podman-conf", podman_conf_md(p)?);
        }
        Ok(out)
    }

    /// The plot, if there is a scale bench.
    pub fn svg(&self) -> Result<Option<String>, String> {
        if self.scale.is_empty() {
            return Ok(None);
        }
        let mut panels = Vec::new();
        for (backend, v) in sorted(&self.scale) {
            panels.push(Panel::from_json(backend, v)?);
        }
        Ok(Some(plot(&panels, &self.scale_note())))
    }

    /// The tool mix and the cores, as the plot's subtitle says them.
    fn scale_note(&self) -> String {
        let cores = self
            .scale
            .values()
            .find_map(|v| v.get("cores").and_then(Value::as_u64))
            .unwrap_or(0);
        let tools = self
            .scale
            .iter()
            .find(|(b, _)| b.as_str() != "noop")
            .map(|(_, v)| tool_list(v))
            .unwrap_or_default();
        format!("tools {tools}; {cores} cores")
    }
}

/// A bench's `tools`, as "read_file, shell".
fn tool_list(v: &Value) -> String {
    v.get("tools")
        .and_then(Value::as_array)
        .map(|t| {
            t.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

fn sorted(m: &BTreeMap<String, Value>) -> Vec<(&str, &Value)> {
    let mut v: Vec<(&str, &Value)> = m.iter().map(|(k, v)| (k.as_str(), v)).collect();
    v.sort_by_key(|(k, _)| (backend_rank(k), k.to_string()));
    v
}

// --- reading values --------------------------------------------------------------------------

fn text_of(v: &Value, key: &str) -> Result<String, String> {
    v.get(key)
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| format!("no text {key:?}"))
}

fn num(v: &Value, key: &str) -> Result<f64, String> {
    v.get(key)
        .and_then(Value::as_f64)
        .ok_or_else(|| format!("no number {key:?} in {v}"))
}

/// A number that may be `null` (a row without answers).
fn maybe_num(v: &Value, key: &str) -> Option<f64> {
    v.get(key).and_then(Value::as_f64)
}

fn rows(v: &Value, key: &str) -> Result<Vec<Value>, String> {
    v.get(key)
        .and_then(Value::as_array)
        .cloned()
        .ok_or_else(|| format!("no list {key:?}"))
}

/// Milliseconds or microseconds as a person reads them: three significant digits or so.
fn fmt_num(x: Option<f64>) -> String {
    match x {
        None => "–".into(),
        Some(x) if !x.is_finite() => "–".into(),
        // The bounds are where rounding would carry into one more digit (9.996 is "10.0").
        Some(x) if x.abs() >= 99.95 => format!("{x:.0}"),
        Some(x) if x.abs() >= 9.995 => format!("{x:.1}"),
        Some(x) if x.abs() >= 0.9995 => format!("{x:.2}"),
        Some(x) => format!("{x:.3}"),
    }
}

fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

// --- the sections ----------------------------------------------------------------------------

fn host_md(h: &Value) -> Result<String, String> {
    let get = |k: &str| h.get(k).and_then(Value::as_str).unwrap_or("?").to_string();
    let mut s = format!(
        "Generated by `make bench` on {} at commit `{}`: {}, {} cores, kernel {}, Podman {}; \
         load average {} before and {} after.",
        get("date"),
        get("commit"),
        get("os"),
        h.get("cores").and_then(Value::as_u64).unwrap_or(0),
        get("kernel"),
        get("podman"),
        get("load_before"),
        get("load_after"),
    );
    if let Some(knobs) = h.get("knobs").and_then(Value::as_object) {
        let k: Vec<String> = knobs
            .iter()
            .map(|(k, v)| match v.as_str() {
                Some(t) => format!("{k}={t}"),
                None => format!("{k}={v}"),
            })
            .collect();
        let _ = write!(s, " Settings: `{}`.", k.join(" "));
    }
    if let Some(secs) = h.get("seconds").and_then(Value::as_u64) {
        let _ = write!(s, " The whole run took {} min {} s.", secs / 60, secs % 60);
    }
    s.push('\n');
    Ok(s)
}

fn ratio_md(benches: &[(&str, &Value)]) -> Result<String, String> {
    let mut s = String::new();
    let mut calls = Vec::new();
    s.push_str(
        "| backend | tool | through brokerd p50 ms | p95 ms | bare p50 ms | p95 ms | ratio p50 |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for (backend, v) in benches {
        calls.push(format!("{} on {backend}", num(v, "calls")?));
        for r in rows(v, "rows")? {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {:.2} |",
                cell(backend),
                cell(&text_of(&r, "tool")?),
                fmt_num(Some(num(&r, "through_p50_ms")?)),
                fmt_num(Some(num(&r, "through_p95_ms")?)),
                fmt_num(Some(num(&r, "bare_p50_ms")?)),
                fmt_num(Some(num(&r, "bare_p95_ms")?)),
                num(&r, "ratio_p50")?,
            );
        }
    }
    let _ = writeln!(s, "\nCalls per tool and side: {}.", calls.join(", "));
    for (backend, v) in benches {
        for r in rows(v, "rows")? {
            if r.get("beside_p50_ms").is_none() {
                continue;
            }
            let _ = writeln!(
                s,
                "\nThe bench's `beside` side, bare in the order brokerd starts an http_fetch \
                 (docs/design.md#http_fetch-and-its-egress-proxy): {} {} with the tool container \
                 started beside its proxy, its input held until the socket is seen and `run -d` \
                 has exited: p50 {} ms, p95 {} ms, {:.2} of the bare sequence.",
                cell(backend),
                cell(&text_of(&r, "tool")?),
                fmt_num(Some(num(&r, "beside_p50_ms")?)),
                fmt_num(Some(num(&r, "beside_p95_ms")?)),
                num(&r, "beside_ratio_p50")?,
            );
        }
    }
    Ok(s)
}

/// A toolset call's p50 at most this many times a base toolset call's of the same run, by
/// backend (docs/design.md#toolsets).
const TOOLSET_TARGETS: &[(&str, f64)] = &[("podman", 1.05), ("bwrap", 1.10)];

/// Calls on a toolset against the same calls on the base toolset, `make test` in the sandbox
/// against the host, and the trees' sizes, by backend.
fn toolset_md(benches: &[(&str, &Value)]) -> Result<String, String> {
    let mut s = String::from(
        "| backend | base p50 ms | p95 ms | toolset p50 ms | p95 ms | ratio p50 | target | make test ×N in the sandbox p50 ms | on the host p50 ms | trees MB (base, toolset) |\n\
         |---|---|---|---|---|---|---|---|---|---|\n",
    );
    let met = |ok: bool| if ok { "met" } else { "**not met**" };
    let mb = |v: f64| fmt_num(Some(v / 1e6));
    let mut calls = Vec::new();
    for (backend, v) in benches {
        let ratio = num(v, "ratio_p50")?;
        let target = match TOOLSET_TARGETS.iter().find(|(b, _)| b == backend) {
            Some((_, t)) => format!("≤ {t:.2}: {}", met(ratio <= *t)),
            None => "–".into(),
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {ratio:.2} | {target} | {} | {} | {}, {} |",
            cell(backend),
            fmt_num(Some(num(v, "base_p50_ms")?)),
            fmt_num(Some(num(v, "base_p95_ms")?)),
            fmt_num(Some(num(v, "toolset_p50_ms")?)),
            fmt_num(Some(num(v, "toolset_p95_ms")?)),
            fmt_num(Some(num(v, "make_sandbox_p50_ms")?)),
            fmt_num(Some(num(v, "make_host_p50_ms")?)),
            mb(num(v, "base_tree_bytes")?),
            mb(num(v, "tree_bytes")?),
        );
        calls.push(format!(
            "{} calls and N = {} on {backend}",
            num(v, "calls")?,
            num(v, "make_runs")?
        ));
    }
    let _ = writeln!(s, "\n{}.", calls.join(", "));
    Ok(s)
}

/// Shell calls with `shell_hosts` (a proxy started and removed with each) against the same
/// calls without, by backend.
fn egress_md(benches: &[(&str, &Value)]) -> Result<String, String> {
    let mut s = String::from(
        "| backend | without p50 ms | p95 ms | with shell_hosts p50 ms | p95 ms | added p50 ms | ratio p50 | calls |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for (backend, v) in benches {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {:.2} | {} |",
            cell(backend),
            fmt_num(Some(num(v, "without_p50_ms")?)),
            fmt_num(Some(num(v, "without_p95_ms")?)),
            fmt_num(Some(num(v, "with_p50_ms")?)),
            fmt_num(Some(num(v, "with_p95_ms")?)),
            fmt_num(Some(num(v, "added_p50_ms")?)),
            num(v, "ratio_p50")?,
            num(v, "calls")?,
        );
    }
    Ok(s)
}

/// Staged calls next to direct ones, each against its target, and `changes` on a large layer,
/// through the suite's brokerd and by brokerd alone.
fn staged_md(benches: &[(&str, &Value)], alone: Option<&Value>) -> Result<String, String> {
    let mut s = String::new();
    if !benches.is_empty() {
        s.push_str(
            "| backend | tool | direct p50 ms | p95 ms | staged p50 ms | p95 ms | ratio p50 | target | bare ratio p50 |\n\
             |---|---|---|---|---|---|---|---|---|\n",
        );
    }
    let met = |ok: bool| if ok { "met" } else { "**not met**" };
    for (backend, v) in benches {
        let target = STAGED_TARGETS
            .iter()
            .find(|(b, _)| b == backend)
            .map(|(_, t)| *t);
        for r in rows(v, "rows")? {
            let ratio = num(&r, "ratio_p50")?;
            let target = match target {
                Some(t) => format!("≤ {t:.2}: {}", met(ratio <= t)),
                None => "–".into(),
            };
            let bare = match r.get("bare_ratio_p50").and_then(Value::as_f64) {
                Some(b) => format!(
                    "{b:.2} ({} / {} ms)",
                    fmt_num(Some(num(&r, "bare_staged_p50_ms")?)),
                    fmt_num(Some(num(&r, "bare_direct_p50_ms")?))
                ),
                None => "–".into(),
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {:.2} | {target} | {bare} |",
                cell(backend),
                cell(&text_of(&r, "tool")?),
                fmt_num(Some(num(&r, "direct_p50_ms")?)),
                fmt_num(Some(num(&r, "direct_p95_ms")?)),
                fmt_num(Some(num(&r, "staged_p50_ms")?)),
                fmt_num(Some(num(&r, "staged_p95_ms")?)),
                ratio,
            );
        }
    }
    if !benches.is_empty() {
        let calls: Vec<String> = benches
            .iter()
            .map(|(b, v)| num(v, "calls").map(|n| format!("{n} on {b}")))
            .collect::<Result<_, _>>()?;
        let _ = writeln!(s, "\nCalls per tool and side: {}.", calls.join(", "));
        if benches.iter().any(|(_, v)| {
            rows(v, "rows").is_ok_and(|r| r.iter().any(|r| r.get("bare_ratio_p50").is_some()))
        }) {
            s.push_str(
                "\nBare ratio: `podman run` of the argument lists brokerd builds for the same two calls, \
                 the staged one's `:O` volume over a layer of the bench's own against the direct grant's \
                 volumes, taking turns with the calls through brokerd: Podman's own cost of its overlay \
                 volume, with no brokerd in it.\n",
            );
        }
    }
    for (backend, v) in benches {
        let p50 = num(v, "changes_p50_ms")?;
        let _ = writeln!(
            s,
            "\n`changes` of {} staged paths on {}: p50 {} ms, p95 {} ms (target under {CHANGES_TARGET_MS:.0} ms: {}); \
             with diffs p50 {} ms, p95 {} ms.",
            num(v, "changes_paths")?,
            cell(backend),
            fmt_num(Some(p50)),
            fmt_num(Some(num(v, "changes_p95_ms")?)),
            met(p50 < CHANGES_TARGET_MS),
            fmt_num(Some(num(v, "changes_diff_p50_ms")?)),
            fmt_num(Some(num(v, "changes_diff_p95_ms")?)),
        );
    }
    if let Some(v) = alone {
        let mut kinds = Vec::new();
        for r in rows(v, "rows")? {
            let diff = r.get("diff").and_then(Value::as_bool).unwrap_or(false);
            let p50 = num(&r, "p50_ms")?;
            kinds.push(format!(
                "{} p50 {} ms, p95 {} ms ({})",
                if diff { "with diffs" } else { "without" },
                fmt_num(Some(p50)),
                fmt_num(Some(num(&r, "p95_ms")?)),
                met(p50 < CHANGES_TARGET_MS),
            ));
        }
        let _ = writeln!(
            s,
            "\n`changes` of {} staged paths, brokerd alone (no-op runner, {} answers each): {}.",
            num(v, "paths")?,
            num(v, "runs")?,
            kinds.join("; "),
        );
    }
    // The blank line before the first table's text is the caller's.
    Ok(s.trim_start().to_string())
}

fn overhead_md(v: &Value) -> Result<String, String> {
    let mut s = format!(
        "{} sequential calls per row over the real socket, no-op runner.\n\n\
         | audit | request | p50 µs | p95 µs | p99 µs | mean µs |\n|---|---|---|---|---|---|\n",
        num(v, "calls")?
    );
    for r in rows(v, "rows")? {
        let _ = writeln!(
            s,
            "| {} | {} | {:.0} | {:.0} | {:.0} | {:.0} |",
            cell(&text_of(&r, "audit")?),
            cell(&text_of(&r, "request")?),
            num(&r, "p50_us")?,
            num(&r, "p95_us")?,
            num(&r, "p99_us")?,
            num(&r, "mean_us")?,
        );
    }
    if let Some(m) = v.get("memory") {
        let _ = write!(
            s,
            "\nResident memory of the server process (VmRSS), audit on disk: {:.0} KiB right \
             after start-up, {:.0} KiB idle after the rows above, {:.0} KiB with {:.0} calls in \
             flight (peak VmHWM {:.0} KiB), {:.0} KiB idle again.\n",
            num(m, "fresh_kib")?,
            num(m, "idle_kib")?,
            num(m, "busy_kib")?,
            num(m, "in_flight")?,
            num(m, "peak_kib")?,
            num(m, "after_kib")?,
        );
    }
    Ok(s)
}

fn scale_md(benches: &[(&str, &Value)]) -> Result<String, String> {
    let mut s = String::new();
    for (backend, v) in benches {
        let tools = tool_list(v);
        let _ = write!(
            s,
            "**{}** ({} calls a row, tools {tools}; {} cores, default `max_concurrent_calls` {}):\n\n\
             | max_concurrent_calls | clients | calls/s | p50 ms | p95 ms | calls | errors |\n\
             |---|---|---|---|---|---|---|\n",
            backend_title(backend),
            num(v, "calls_per_row")?,
            num(v, "cores")?,
            num(v, "default_slots")?,
        );
        for r in rows(v, "rows")? {
            let which = match text_of(&r, "slots_are")?.as_str() {
                "default" => "default",
                "cores" => "cores",
                _ => "",
            };
            let _ = writeln!(
                s,
                "| {:.0} ({which}) | {:.0} | {} | {} | {} | {:.0} | {:.0} |",
                num(&r, "slots")?,
                num(&r, "clients")?,
                fmt_num(Some(num(&r, "calls_per_s")?)),
                fmt_num(maybe_num(&r, "p50_ms")),
                fmt_num(maybe_num(&r, "p95_ms")),
                num(&r, "calls")?,
                num(&r, "errors")?,
            );
        }
        s.push('\n');
    }
    // The blank line after the last table is the caller's.
    Ok(s.trim_end().to_string() + "\n")
}

fn podman_conf_md(v: &Value) -> Result<String, String> {
    let mut s = format!(
        "{} calls per variant:\n\n\
         | variant | what it changes | p50 ms | p95 ms | p50 vs required |\n|---|---|---|---|---|\n",
        num(v, "calls")?
    );
    let mut refused = Vec::new();
    for r in rows(v, "variants")? {
        let name = text_of(&r, "variant")?;
        let what = r.get("what").and_then(Value::as_str).unwrap_or("");
        if let Some(why) = r.get("refused").and_then(Value::as_str) {
            refused.push(format!("`{name}` ({})", why.trim()));
            continue;
        }
        let _ = writeln!(
            s,
            "| {} | {} | {:.1} | {:.1} | {:.3} |",
            cell(&name),
            cell(what),
            num(&r, "p50_ms")?,
            num(&r, "p95_ms")?,
            num(&r, "vs_required")?,
        );
    }
    if !refused.is_empty() {
        let _ = writeln!(s, "\nRefused by Podman here: {}.", refused.join("; "));
    }
    Ok(s)
}

// --- the Markdown file -----------------------------------------------------------------------

fn begin_marker(name: &str) -> String {
    format!("<!-- bench:{name} -->")
}

fn end_marker(name: &str) -> String {
    format!("<!-- /bench:{name} -->")
}

/// `doc` with each section's text between its markers; the names of the sections replaced.
pub fn splice(
    doc: &str,
    sections: &BTreeMap<&'static str, String>,
) -> Result<(String, Vec<&'static str>), String> {
    let mut out = doc.to_string();
    let mut done = Vec::new();
    for (name, text) in sections {
        let (b, e) = (begin_marker(name), end_marker(name));
        let start = out
            .find(&b)
            .ok_or_else(|| format!("no {b} marker"))?
            .saturating_add(b.len());
        let end = out[start..]
            .find(&e)
            .map(|i| i + start)
            .ok_or_else(|| format!("no {e} after {b}"))?;
        if out[end + e.len()..].contains(&b) || out[start..end].contains(&b) {
            return Err(format!("{b} is there twice"));
        }
        // Blank lines around the text: a Markdown table must not run into a marker.
        out.replace_range(start..end, &format!("\n\n{text}\n"));
        done.push(*name);
    }
    Ok((out, done))
}

// --- the plot --------------------------------------------------------------------------------

/// One backend's latencies: for each slot setting, (clients, p50, p95) points.
struct Panel {
    title: String,
    series: Vec<Series>,
}

struct Series {
    label: String,
    /// Which of the two colours.
    default: bool,
    points: Vec<(f64, Option<f64>, Option<f64>)>,
}

impl Panel {
    fn from_json(backend: &str, v: &Value) -> Result<Panel, String> {
        let mut series: Vec<Series> = Vec::new();
        for r in rows(v, "rows")? {
            let slots = num(&r, "slots")?;
            let which = text_of(&r, "slots_are")?;
            let label = format!("max_concurrent_calls {slots:.0} ({which})");
            let point = (
                num(&r, "clients")?,
                maybe_num(&r, "p50_ms"),
                maybe_num(&r, "p95_ms"),
            );
            match series.iter_mut().find(|s| s.label == label) {
                Some(s) => s.points.push(point),
                None => series.push(Series {
                    label,
                    default: which == "default",
                    points: vec![point],
                }),
            }
        }
        for s in &mut series {
            s.points.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        Ok(Panel {
            title: backend_title(backend),
            series,
        })
    }
}

/// A round step for about `want` ticks up to `max`, and the axis top it gives.
pub fn nice_axis(max: f64, want: usize) -> (f64, f64) {
    let max = if max.is_finite() && max > 0.0 {
        max
    } else {
        1.0
    };
    let raw = max / want.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let top = (max / step).ceil() * step;
    (step, top)
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const COLOURS: [&str; 2] = ["#1f5fa8", "#c8402a"];
const PANEL_W: f64 = 330.0;
const PANEL_H: f64 = 270.0;
const LEFT: f64 = 62.0;
const RIGHT: f64 = 18.0;
const TOP: f64 = 72.0;
const BOTTOM: f64 = 48.0;
const LEGEND_H: f64 = 52.0;

/// p50 (solid) and p95 (dashed) against concurrent clients, one panel per backend, each with its
/// own linear millisecond axis; clients on a log-2 axis.
fn plot(panels: &[Panel], note: &str) -> String {
    let width = panels.len().max(1) as f64 * (PANEL_W + LEFT + RIGHT);
    let height = TOP + PANEL_H + BOTTOM + LEGEND_H;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        s,
        r##"<rect width="100%" height="100%" fill="white"/>
<text x="{:.0}" y="22" text-anchor="middle" font-size="15" font-weight="bold">Latency per call against concurrent clients (make bench)</text>
<text x="{:.0}" y="40" text-anchor="middle" fill="#444">{}; solid p50, dashed p95; each panel has its own scale</text>"##,
        width / 2.0,
        width / 2.0,
        esc(note)
    );
    for (i, p) in panels.iter().enumerate() {
        let x0 = i as f64 * (PANEL_W + LEFT + RIGHT) + LEFT;
        panel(&mut s, p, x0, TOP);
    }
    // The legend: one entry per slot setting of the first panel that has them.
    let labels: Vec<(&str, bool)> = panels
        .iter()
        .flat_map(|p| p.series.iter().map(|s| (s.label.as_str(), s.default)))
        .fold(Vec::new(), |mut acc, l| {
            if !acc.contains(&l) {
                acc.push(l);
            }
            acc
        });
    let ly = TOP + PANEL_H + BOTTOM + 20.0;
    let mut lx = LEFT;
    for (label, default) in labels {
        let c = COLOURS[usize::from(!default)];
        let _ = writeln!(
            s,
            r#"<line x1="{lx:.0}" y1="{ly:.0}" x2="{:.0}" y2="{ly:.0}" stroke="{c}" stroke-width="2"/><text x="{:.0}" y="{:.0}">{}</text>"#,
            lx + 26.0,
            lx + 32.0,
            ly + 4.0,
            esc(label)
        );
        lx += 300.0;
    }
    let _ = writeln!(
        s,
        r##"<line x1="{lx:.0}" y1="{ly:.0}" x2="{:.0}" y2="{ly:.0}" stroke="#555" stroke-width="2"/><text x="{:.0}" y="{:.0}">p50</text>
<line x1="{:.0}" y1="{ly:.0}" x2="{:.0}" y2="{ly:.0}" stroke="#555" stroke-width="2" stroke-dasharray="6 4"/><text x="{:.0}" y="{:.0}">p95</text>"##,
        lx + 26.0,
        lx + 32.0,
        ly + 4.0,
        lx + 70.0,
        lx + 96.0,
        lx + 102.0,
        ly + 4.0,
    );
    s.push_str("</svg>\n");
    s
}

fn panel(s: &mut String, p: &Panel, x0: f64, y0: f64) {
    let clients: Vec<f64> = {
        let mut c: Vec<f64> = p
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|q| q.0))
            .filter(|c| *c >= 1.0)
            .collect();
        c.sort_by(f64::total_cmp);
        c.dedup();
        c
    };
    let (lo, hi) = match (clients.first(), clients.last()) {
        (Some(a), Some(b)) => (a.log2(), b.log2()),
        _ => (0.0, 1.0),
    };
    let x_of = |c: f64| {
        if hi > lo {
            x0 + (c.log2() - lo) / (hi - lo) * PANEL_W
        } else {
            x0 + PANEL_W / 2.0
        }
    };
    let max = p
        .series
        .iter()
        .flat_map(|s| s.points.iter().flat_map(|q| [q.1, q.2]))
        .flatten()
        .fold(0.0, f64::max);
    let (step, top) = nice_axis(max, 5);
    let y_of = |v: f64| y0 + PANEL_H - v / top * PANEL_H;
    let _ = writeln!(
        s,
        r##"<g><text x="{:.0}" y="{:.0}" text-anchor="middle" font-weight="bold">{}</text>
<rect x="{x0:.0}" y="{y0:.0}" width="{PANEL_W:.0}" height="{PANEL_H:.0}" fill="none" stroke="#888"/>"##,
        x0 + PANEL_W / 2.0,
        y0 - 8.0,
        esc(&p.title)
    );
    // The y axis: gridlines and labels.
    let ticks = (top / step).round() as usize;
    for k in 0..=ticks {
        let v = k as f64 * step;
        let y = y_of(v);
        let _ = writeln!(
            s,
            r##"<line x1="{x0:.0}" y1="{y:.1}" x2="{:.0}" y2="{y:.1}" stroke="#e4e4e4"/><text x="{:.0}" y="{:.1}" text-anchor="end">{}</text>"##,
            x0 + PANEL_W,
            x0 - 6.0,
            y + 4.0,
            tick_label(v, step)
        );
    }
    let _ = writeln!(
        s,
        r#"<text transform="translate({:.0},{:.0}) rotate(-90)" text-anchor="middle">ms per call</text>"#,
        x0 - 46.0,
        y0 + PANEL_H / 2.0
    );
    // The x axis: one tick per client count.
    for c in &clients {
        let x = x_of(*c);
        let _ = writeln!(
            s,
            r##"<line x1="{x:.1}" y1="{:.0}" x2="{x:.1}" y2="{:.0}" stroke="#888"/><text x="{x:.1}" y="{:.0}" text-anchor="middle">{c:.0}</text>"##,
            y0 + PANEL_H,
            y0 + PANEL_H + 5.0,
            y0 + PANEL_H + 18.0
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{:.0}" y="{:.0}" text-anchor="middle">concurrent clients (log scale)</text>"#,
        x0 + PANEL_W / 2.0,
        y0 + PANEL_H + 36.0
    );
    for series in &p.series {
        let c = COLOURS[usize::from(!series.default)];
        for (pick, dash) in [(1usize, ""), (2, r#" stroke-dasharray="6 4""#)] {
            let pts: Vec<(f64, f64)> = series
                .points
                .iter()
                .filter_map(|q| {
                    let v = if pick == 1 { q.1 } else { q.2 };
                    v.filter(|v| v.is_finite()).map(|v| (x_of(q.0), y_of(v)))
                })
                .collect();
            if pts.is_empty() {
                continue;
            }
            let path: Vec<String> = pts.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
            let _ = writeln!(
                s,
                r#"<polyline points="{}" fill="none" stroke="{c}" stroke-width="2"{dash}/>"#,
                path.join(" ")
            );
            for (x, y) in pts {
                let _ = writeln!(s, r#"<circle cx="{x:.1}" cy="{y:.1}" r="2.5" fill="{c}"/>"#);
            }
        }
    }
    s.push_str("</g>\n");
}

fn tick_label(v: f64, step: f64) -> String {
    if step >= 1.0 {
        format!("{v:.0}")
    } else if step >= 0.1 {
        format!("{v:.1}")
    } else if step >= 0.01 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

// --- the command -----------------------------------------------------------------------------

/// `report --dir DIR [--markdown FILE] [--svg FILE]`.
pub fn run(opts: &crate::Opts) -> Result<(), String> {
    let dir = PathBuf::from(opts.required("dir")?);
    let results = Results::read_dir(&dir)?;
    let sections = results.sections()?;
    for name in SECTIONS {
        if !sections.contains_key(name) {
            eprintln!(
                "report: no JSON for the {name} section in {}; its text is kept",
                dir.display()
            );
        }
    }
    match opts.one("markdown") {
        Some(md) => {
            let doc = std::fs::read_to_string(&md).map_err(|e| format!("{md}: {e}"))?;
            let (out, done) = splice(&doc, &sections).map_err(|e| format!("{md}: {e}"))?;
            std::fs::write(&md, out).map_err(|e| format!("{md}: {e}"))?;
            eprintln!("report: {md}: rewrote {}", done.join(", "));
        }
        None => {
            for (name, text) in &sections {
                println!("{}\n{text}{}\n", begin_marker(name), end_marker(name));
            }
        }
    }
    if let Some(svg) = opts.one("svg") {
        match results.svg()? {
            Some(text) => {
                if let Some(parent) = Path::new(&svg)
                    .parent()
                    .filter(|p| !p.as_os_str().is_empty())
                {
                    std::fs::create_dir_all(parent)
                        .map_err(|e| format!("{}: {e}", parent.display()))?;
                }
                std::fs::write(&svg, text).map_err(|e| format!("{svg}: {e}"))?;
                eprintln!("report: wrote {svg}");
            }
            None => eprintln!("report: no scale bench in {}; {svg} is kept", dir.display()),
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "report_tests.rs"]
mod tests;
