//! brokerd's TOML configuration (docs/design.md#config).
//!
//! Reading is two steps: serde with `deny_unknown_fields` everywhere (a misspelt key is an
//! error, not a silently ignored setting), then checks of the values. Every
//! error names the file, the line and column where the toml crate knows them, the key, and what
//! is wrong, e.g.
//!
//! ```text
//! config.toml:12:9: runner.image: "boxmaker-tools:latest" is a tag; pin the image by content (sha256:<64 hex> or name@sha256:<64 hex>)
//! ```
//!
//! What the code holds to, as docs/design.md#config writes it:
//! - `[runner]` absent means no runner: every call is refused (docs/design.md#runner), so
//!   `runner` is an `Option`. `image` is required with `backend = "podman"`.
//! - `[runner] home` (default `/var/lib/boxmaker`, the service user's home of
//!   docs/design.md#service) holds `<home>/run/egress/`. It is a key, not `$HOME`, so that
//!   brokerd run by hand and brokerd run by systemd use the same directories and a test can
//!   point it elsewhere.
//! - `[bwrap]` is accepted only with `backend = "bwrap"`; its keys default as
//!   docs/design.md#bwrap says.
//! - A grant's `mode` defaults to `safe`, the mode that only reads.
//! - `http_fetch_ms + egress_start_ms` must also stay under `broker.timeout_ms`: loopd waits for
//!   the proxy's start as well as for the tool.

#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use proto::tools::ToolName;
use serde::{Deserialize, Serialize};

pub use boxmaker_policy::grant::{Protect, ProtectBounds, Writes};
pub use boxmaker_policy::mode::Mode;

mod budget;
mod check;
mod defaults;
mod error;
mod limits;
pub mod owners;
mod places;
mod raw;
mod toolsets;

pub use budget::{stop_budget, HELPER_TIMEOUT, KILL_CONFIRM};
pub use check::memory_bytes;
use check::{line_col, Checker};
pub use defaults::{defaults, DEFAULT_HOME};
pub use error::{ConfigError, Nested, OverlapsState, Pos, Problem};
pub use limits::{AboveCeiling, GrantLimits};
pub use places::{grants_clear_of, overlaps_state, state_places, StatePlace, RUNTIME_DIR};
use raw::RawConfig;
pub use toolsets::{Toolset, BASE_TOOLSET};
/// The whole configuration, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub broker: BrokerConfig,
    /// `None`: no `[runner]` table, every call is refused.
    pub runner: Option<RunnerConfig>,
    /// `Some` exactly when `runner.backend` is `bwrap`.
    pub bwrap: Option<BwrapConfig>,
    /// By grant name.
    pub grants: BTreeMap<String, Grant>,
    /// `[toolsets.NAME]` by name; the built-in `base` toolset is not among them.
    pub toolsets: BTreeMap<String, Toolset>,
}

impl Config {
    /// The bounds of the walk that finds protected targets (`[runner] protect_max_*`; the
    /// defaults without a `[runner]`).
    pub fn protect_bounds(&self) -> ProtectBounds {
        self.runner.as_ref().map(|r| r.protect).unwrap_or_default()
    }

    /// The toolset `grant` runs: `None` for the base toolset (docs/design.md#toolsets).
    pub fn toolset_of(&self, grant: &Grant) -> Option<&Toolset> {
        grant.toolset.as_ref().and_then(|n| self.toolsets.get(n))
    }

    /// The bounds on a shell call's egress proxy (`[runner] egress_connections`,
    /// `egress_bytes`; the defaults without a `[runner]`).
    pub fn egress_bounds(&self) -> Bounds {
        self.runner.as_ref().map_or(
            Bounds {
                connections: DEFAULT_EGRESS_CONNECTIONS,
                bytes: DEFAULT_EGRESS_BYTES,
            },
            |r| r.egress_bounds,
        )
    }
}

/// `[broker]`
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerConfig {
    pub clients: Vec<Client>,
    pub audit_log: PathBuf,
    pub timeout_ms: u64,
    pub refusal_repeats: u32,
    pub preview_chars: usize,
    pub max_concurrent_calls: usize,
    pub ticket_ttl_s: u64,
    pub result_ttl_s: u64,
    pub shutdown_grace_s: u64,
    /// The peers that may commit, discard and approve; root is not implied, and an empty
    /// list means nobody over the socket (docs/design.md#staged-writes-and-owners).
    pub owners: Vec<Client>,
    /// The most a session may hold in its staged layers, in bytes.
    pub max_staged_bytes: u64,
    /// How long staged changes stay without an owner's word; 0: until the owner acts.
    pub staged_ttl_s: u64,
}

/// Who approves an `ask` of a grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Approvals {
    /// The client that made the call, by sending it again with the ticket.
    Client,
    /// An owner (`approve`), before the client's call with the ticket runs.
    Owner,
}

/// A peer allowed to connect (checked against SO_PEERCRED). Root is not implied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Client {
    User(String),
    Uid(u32),
    Group(String),
}

/// Which sandbox runs the calls; one per brokerd, spelt as `status` spells it.
pub use proto::broker::Backend;

/// `[runner]`
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnerConfig {
    pub backend: Backend,
    /// The podman program; a bare name is looked up in PATH.
    pub podman: PathBuf,
    /// Pinned by content; empty only with `backend = "bwrap"`.
    pub image: String,
    /// The egress proxy container's network (Podman only).
    pub egress_network: EgressNetwork,
    pub output_cap: usize,
    pub memory: String,
    pub pids: u32,
    pub read_file_ms: u64,
    pub write_file_ms: u64,
    pub shell_ms: u64,
    pub http_fetch_ms: u64,
    pub enforce_limits: bool,
    pub egress_start_ms: u64,
    /// The service user's home; egress directories live in `<home>/run/egress/`.
    pub home: PathBuf,
    /// `egress_connections` and `egress_bytes`: what one shell call's proxy may open and
    /// relay each way (docs/design.md#shell-and-its-egress-proxy).
    pub egress_bounds: Bounds,
    /// The bounds of the walk that finds the protected targets of a writable grant directory
    /// (docs/design.md#protected-targets).
    pub protect: ProtectBounds,
}

impl RunnerConfig {
    /// The time limit of one call of `tool`.
    pub fn time_limit(&self, tool: ToolName) -> Duration {
        Duration::from_millis(match tool {
            ToolName::ReadFile => self.read_file_ms,
            ToolName::WriteFile => self.write_file_ms,
            ToolName::Shell => self.shell_ms,
            ToolName::HttpFetch => self.http_fetch_ms,
        })
    }
}

/// The network of the egress proxy's container, spelt as the end-to-end suite writes it too.
pub use proto::broker::EgressNetwork;

/// How the bwrap backend gets a cgroup for its limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CgroupMode {
    /// A child group of brokerd's own delegated cgroup v2 subtree.
    Delegated,
    SystemdScope,
}

/// `[bwrap]`
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BwrapConfig {
    pub tools_root: PathBuf,
    pub cgroup: CgroupMode,
}

/// `[grants.NAME]`
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub mode: Mode,
    /// In the order written, without repeats.
    pub tools: Vec<ToolName>,
    /// In the order written: absolute, existing directories that podman can mount.
    pub paths: Vec<GrantPath>,
    /// Host patterns for http_fetch, each valid per `proto::hosts::valid_host_pattern`.
    pub hosts: Vec<String>,
    /// Host patterns a shell call reaches through its own egress proxy, checked as `hosts`;
    /// empty: a shell call has no network at all (docs/design.md#shell-and-its-egress-proxy).
    pub shell_hosts: Vec<String>,
    /// Non-public ranges http_fetch (and a shell call with `shell_hosts`) may reach; never loopback, link-local, the tailnet, 0/8 or
    /// multicast.
    pub allow_addresses: Vec<Cidr>,
    pub protect: Protect,
    pub writes: Writes,
    pub approvals: Approvals,
    /// The name of one of `[toolsets]`; `None`: the built-in `base` toolset.
    pub toolset: Option<String>,
    /// What the grant lowers of `[runner]`'s limits.
    pub limits: GrantLimits,
    /// `cache = true`: the bound of the grant's own cache directory, in bytes
    /// (docs/design.md#grant-caches); `None`: no cache.
    pub cache: Option<u64>,
}

/// A grant's `max_cache_bytes` when it sets none: 1 GiB.
pub const DEFAULT_MAX_CACHE_BYTES: u64 = 1 << 30;
/// The least `max_cache_bytes`: 1 MiB.
pub const MIN_MAX_CACHE_BYTES: u64 = 1 << 20;

/// The directory under `[runner] home` that holds the grants' caches, one each by name.
pub const CACHES_DIR: &str = "caches";

impl RunnerConfig {
    /// Where grant `grant`'s cache lives (docs/design.md#grant-caches).
    pub fn cache_dir(&self, grant: &str) -> PathBuf {
        self.home.join(CACHES_DIR).join(grant)
    }
}

/// The most directories one grant names (docs/design.md#grantsname). Each is a descriptor the
/// runner hands its sandbox; the runner keeps room for this many.
pub const MAX_GRANT_PATHS: usize = 54;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantPath {
    pub path: PathBuf,
    pub write: bool,
}

use defaults::{DEFAULT_EGRESS_BYTES, DEFAULT_EGRESS_CONNECTIONS};
pub use proto::addr::Cidr;
pub use proto::egress::Bounds;

/// Reads and checks the config at `path`; errors name it by its path. No grant directory may
/// hold the file itself, and none may be one that a user other than root and the service user
/// could rename or replace (`owners`), as `accounts` (the system's user database, which
/// brokerd passes) says who is in which group.
pub fn load(path: &Path, accounts: &dyn owners::Accounts) -> Result<Config, ConfigError> {
    load_with(path, Some(accounts))
}

/// [`load`] without the owners' check: for a config whose grant directories are placeholders
/// made for the check (the NixOS module's build, where none of the host's directories exist);
/// brokerd's start checks the real ones.
pub fn load_placeholder_dirs(path: &Path) -> Result<Config, ConfigError> {
    load_with(path, None)
}

fn load_with(path: &Path, accounts: Option<&dyn owners::Accounts>) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.display().to_string(),
        source,
    })?;
    let origin = path.display().to_string();
    let file = StatePlace {
        path: path.to_path_buf(),
        what: "the config file",
        file: true,
    };
    parse_with(&text, &origin, &[file], accounts)
}

/// Checks a config text; `origin` names it in errors (usually its path). The host's owners of
/// the grant directories are checked only by [`load`].
pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
    parse_with(text, origin, &[], None)
}

fn parse_with(
    text: &str,
    origin: &str,
    more: &[StatePlace],
    accounts: Option<&dyn owners::Accounts>,
) -> Result<Config, ConfigError> {
    let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError::Syntax {
        origin: origin.to_owned(),
        pos: Pos(e.span().map(|s| line_col(text, s.start))),
        message: e.message().trim_end().to_owned(),
    })?;
    let checker = Checker { text, origin };
    let config = checker.config(&raw)?;
    let mut state = state_places(&config);
    state.extend(more.iter().cloned());
    checker.grant_overlaps(&raw, &state)?;
    // Podman alone mounts a grant directory by its path; bwrap binds the descriptor brokerd
    // opened and checked, which no rename redirects (docs/design.md#grants-and-paths).
    let podman = config
        .runner
        .as_ref()
        .filter(|r| r.backend == Backend::Podman);
    if let (Some(accounts), Some(runner)) = (accounts, podman) {
        checker.grant_owners(
            &raw,
            &owners::Trusted::of_this_process(&runner.home),
            accounts,
        )?;
    }
    Ok(config)
}

#[cfg(test)]
mod tests;
