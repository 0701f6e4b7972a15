//! The shape of the file, as serde reads it. Values that are checked after parsing keep their
//! span so that the error can point at them.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

use super::{Approvals, Backend, CgroupMode, Protect, Writes};

pub(super) type S<T> = Spanned<T>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    #[serde(default)]
    pub(super) broker: RawBroker,
    pub(super) runner: Option<S<RawRunner>>,
    pub(super) bwrap: Option<S<RawBwrap>>,
    #[serde(default)]
    pub(super) grants: BTreeMap<S<String>, RawGrant>,
    #[serde(default)]
    pub(super) toolsets: BTreeMap<S<String>, S<RawToolset>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBroker {
    pub(super) clients: Option<S<Vec<S<toml::Value>>>>,
    pub(super) audit_log: Option<S<String>>,
    pub(super) timeout_ms: Option<S<u64>>,
    pub(super) refusal_repeats: Option<S<u32>>,
    pub(super) preview_chars: Option<S<usize>>,
    pub(super) max_concurrent_calls: Option<S<usize>>,
    pub(super) ticket_ttl_s: Option<S<u64>>,
    pub(super) result_ttl_s: Option<S<u64>>,
    pub(super) shutdown_grace_s: Option<S<u64>>,
    pub(super) owners: Option<S<Vec<S<toml::Value>>>>,
    pub(super) max_staged_bytes: Option<S<u64>>,
    pub(super) staged_ttl_s: Option<S<u64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRunner {
    pub(super) backend: Option<Backend>,
    pub(super) podman: Option<S<String>>,
    pub(super) image: Option<S<String>>,
    pub(super) egress_network: Option<S<String>>,
    pub(super) output_cap: Option<S<usize>>,
    pub(super) memory: Option<S<String>>,
    pub(super) pids: Option<S<u32>>,
    pub(super) read_file_ms: Option<S<u64>>,
    pub(super) write_file_ms: Option<S<u64>>,
    pub(super) shell_ms: Option<S<u64>>,
    pub(super) http_fetch_ms: Option<S<u64>>,
    pub(super) enforce_limits: Option<bool>,
    pub(super) egress_start_ms: Option<S<u64>>,
    pub(super) egress_connections: Option<S<u64>>,
    pub(super) egress_bytes: Option<S<u64>>,
    pub(super) home: Option<S<String>>,
    pub(super) protect_max_depth: Option<S<usize>>,
    pub(super) protect_max_entries: Option<S<usize>>,
    pub(super) protect_max_targets: Option<S<usize>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBwrap {
    pub(super) tools_root: Option<S<String>>,
    pub(super) cgroup: Option<CgroupMode>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawGrant {
    pub(super) mode: Option<S<String>>,
    pub(super) tools: S<Vec<S<String>>>,
    #[serde(default)]
    pub(super) paths: Vec<RawPath>,
    #[serde(default)]
    pub(super) hosts: Vec<S<String>>,
    #[serde(default)]
    pub(super) shell_hosts: Vec<S<String>>,
    #[serde(default)]
    pub(super) allow_addresses: Vec<S<String>>,
    pub(super) protect: Option<Protect>,
    pub(super) writes: Option<Writes>,
    pub(super) approvals: Option<Approvals>,
    pub(super) toolset: Option<S<String>>,
    pub(super) memory: Option<S<String>>,
    pub(super) pids: Option<S<u32>>,
    pub(super) shell_ms: Option<S<u64>>,
    pub(super) output_cap: Option<S<usize>>,
    pub(super) cache: Option<S<bool>>,
    pub(super) max_cache_bytes: Option<S<u64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawToolset {
    pub(super) image: Option<S<String>>,
    pub(super) tree: Option<S<String>>,
    pub(super) store_paths: Option<S<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPath {
    pub(super) path: S<String>,
    #[serde(default)]
    pub(super) write: bool,
}
