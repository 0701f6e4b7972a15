//! The values brokerd takes for the keys a config leaves out.

use super::parse;

// The tables of docs/design.md#broker, docs/design.md#runner, docs/design.md#bwrap and
// docs/design.md#grantsname.
pub(super) const DEFAULT_CLIENT: &str = "loopd";
pub(super) const DEFAULT_AUDIT_LOG: &str = "/var/lib/boxmaker/audit.jsonl";
pub(super) const DEFAULT_TIMEOUT_MS: u64 = 120_000;
pub(super) const DEFAULT_REFUSAL_REPEATS: u32 = 5;
pub(super) const DEFAULT_PREVIEW_CHARS: usize = 50_000;
pub(super) const DEFAULT_MAX_CONCURRENT_CALLS: usize = 4;
pub(super) const DEFAULT_TICKET_TTL_S: u64 = 600;
pub(super) const DEFAULT_RESULT_TTL_S: u64 = 600;
pub(super) const DEFAULT_SHUTDOWN_GRACE_S: u64 = 30;
pub(super) const DEFAULT_MAX_STAGED_BYTES: u64 = 1 << 30;

pub(super) const DEFAULT_PODMAN: &str = "podman";
pub(super) const DEFAULT_EGRESS_NETWORK: super::EgressNetwork = super::EgressNetwork::Pasta;
pub(super) const DEFAULT_OUTPUT_CAP: usize = 262_144;
pub(super) const DEFAULT_MEMORY: &str = "512m";
pub(super) const DEFAULT_PIDS: u32 = 128;
pub(super) const DEFAULT_READ_FILE_MS: u64 = 30_000;
pub(super) const DEFAULT_WRITE_FILE_MS: u64 = 30_000;
pub(super) const DEFAULT_SHELL_MS: u64 = 100_000;
pub(super) const DEFAULT_HTTP_FETCH_MS: u64 = 60_000;
pub(super) const DEFAULT_EGRESS_START_MS: u64 = 5_000;
pub(super) const DEFAULT_EGRESS_CONNECTIONS: u64 = 64;
pub(super) const DEFAULT_EGRESS_BYTES: u64 = 1 << 30;
pub const DEFAULT_HOME: &str = "/var/lib/boxmaker";
pub(super) const DEFAULT_TOOLS_ROOT: &str = "/var/lib/boxmaker/tools-root";
/// Podman refuses a memory limit under 6 MiB; say so at load time, not at the first call.
pub(super) const MIN_MEMORY: u64 = 6 << 20;

/// The values brokerd takes for the keys a config leaves out, as `brokerd defaults` prints
/// them for `nix-check`, which compares the NixOS module's option defaults with them: read
/// from configs that set only what is required, so they are the values brokerd really uses.
pub fn defaults() -> Result<serde_json::Value, String> {
    let image = format!("sha256:{}", "0".repeat(64));
    // Any directory that exists will do for the one grant a config needs.
    let dir = std::env::temp_dir();
    let base = format!(
        "[runner]\nimage = \"{image}\"\n[grants.g]\ntools = [\"read_file\"]\npaths = [{{ path = {:?} }}]\n",
        dir.display().to_string()
    );
    let podman = parse(&base, "defaults").map_err(|e| e.to_string())?;
    let bwrap = parse(
        &base.replace("[runner]\n", "[runner]\nbackend = \"bwrap\"\n"),
        "defaults",
    )
    .map_err(|e| e.to_string())?;
    let (b, g) = (&podman.broker, &podman.grants["g"]);
    let r = podman.runner.as_ref().ok_or("no [runner]")?;
    let bw = bwrap.bwrap.as_ref().ok_or("no [bwrap]")?;
    let json = |v: serde_json::Result<serde_json::Value>| v.unwrap_or_default();
    Ok(serde_json::json!({
        "broker": {
            "timeout_ms": b.timeout_ms,
            "refusal_repeats": b.refusal_repeats,
            "preview_chars": b.preview_chars,
            "max_concurrent_calls": b.max_concurrent_calls,
            "ticket_ttl_s": b.ticket_ttl_s,
            "result_ttl_s": b.result_ttl_s,
            "shutdown_grace_s": b.shutdown_grace_s,
            "max_staged_bytes": b.max_staged_bytes,
            "staged_ttl_s": b.staged_ttl_s,
        },
        "runner": {
            "backend": json(serde_json::to_value(r.backend)),
            "egress_network": r.egress_network.as_str(),
            "output_cap": r.output_cap,
            "memory": r.memory,
            "pids": r.pids,
            "read_file_ms": r.read_file_ms,
            "write_file_ms": r.write_file_ms,
            "shell_ms": r.shell_ms,
            "http_fetch_ms": r.http_fetch_ms,
            "enforce_limits": r.enforce_limits,
            "egress_start_ms": r.egress_start_ms,
            "egress_connections": r.egress_bounds.connections,
            "egress_bytes": r.egress_bounds.bytes,
            "home": r.home,
        },
        "bwrap": { "cgroup": json(serde_json::to_value(bw.cgroup)), "tools_root": bw.tools_root },
        "grant": {
            "mode": g.mode.as_str(),
            "protect": json(serde_json::to_value(g.protect)),
            "writes": json(serde_json::to_value(g.writes)),
            "approvals": json(serde_json::to_value(g.approvals)),
        },
        "ident": {
            "max": proto::ident::MAX_IDENT,
            "chars": "A-Za-z0-9_.-",
        },
    }))
}
