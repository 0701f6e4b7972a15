//! brokerd's TOML configuration (DESIGN.md "Config"; seed 003 section 6).
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
//! Decisions where DESIGN.md leaves room:
//! - `[runner]` absent means no runner: every call is refused (seed 003 section 6), so `runner`
//!   is an `Option`. `image` is required with `backend = "podman"`.
//! - `[runner] home` (default `/var/lib/boxmaker`, the service user's home of DESIGN.md
//!   "Service") holds `<home>/run/egress/`. It is a key, not `$HOME`, so that brokerd run by hand
//!   and brokerd run by systemd use the same directories and a test can point it elsewhere.
//! - `[bwrap]` is accepted only with `backend = "bwrap"`; its keys default as in DESIGN.md.
//! - A grant's `mode` defaults to `safe`, the mode that only reads.
//! - `http_fetch_ms + egress_start_ms` must also stay under `broker.timeout_ms`: loopd waits for
//!   the proxy's start as well as for the tool.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use proto::tools::ToolName;
use serde::{Deserialize, Serialize};
use toml::Spanned;

use crate::args::{check_grant_path, UnmountablePath};
pub use crate::mode::Mode;

pub mod owners;

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

/// How a grant's protected targets are held (docs/design.md#protected-targets).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protect {
    /// Bound read-only over every writable mount of the grant, whatever runs there.
    Mount,
    /// The classifier's refusals alone: what it cannot read can write them.
    Classifier,
}

/// Where a grant's writes land (docs/design.md#staged-writes-and-owners).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Writes {
    /// In the granted directory itself.
    Direct,
    /// In a layer of the session's, until an owner commits them.
    Staged,
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

/// Which sandbox runs the calls; one per brokerd.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    Podman,
    Bwrap,
}

impl Backend {
    /// As the config and `status` spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Podman => "podman",
            Backend::Bwrap => "bwrap",
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `[runner]`
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnerConfig {
    pub backend: Backend,
    /// The podman program; a bare name is looked up in PATH.
    pub podman: PathBuf,
    /// Pinned by content; empty only with `backend = "bwrap"`.
    pub image: String,
    pub egress_network: String,
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
    /// The bounds of the walk that finds the protected targets of a writable grant directory
    /// (docs/design.md#protected-targets).
    pub protect: crate::protect::scan::Bounds,
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

    /// The longest one call of `tool` can keep loopd waiting once it starts: its time limit,
    /// the proxy's start for http_fetch, and the stop budget of the backend
    /// (`runner::stop_budget`). It stays under `broker.timeout_ms`.
    pub fn call_budget(&self, tool: ToolName) -> Duration {
        let start = match tool {
            ToolName::HttpFetch => Duration::from_millis(self.egress_start_ms),
            ToolName::ReadFile | ToolName::WriteFile | ToolName::Shell => Duration::ZERO,
        };
        self.time_limit(tool) + start + crate::runner::stop_budget(self.backend, tool)
    }
}

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

/// A grant's mode, spelt as in the config.
fn parse_mode(s: &str) -> Option<Mode> {
    [Mode::Safe, Mode::Ask, Mode::Auto]
        .into_iter()
        .find(|m| m.as_str() == s)
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
    /// Non-public ranges http_fetch may reach; never loopback, link-local, the tailnet, 0/8 or
    /// multicast.
    pub allow_addresses: Vec<Cidr>,
    pub protect: Protect,
    pub writes: Writes,
    pub approvals: Approvals,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantPath {
    pub path: PathBuf,
    pub write: bool,
}

pub use proto::addr::Cidr;

/// What is wrong with a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    #[error("{0:?} is a tag; pin the image by content (sha256:<64 hex> or name@sha256:<64 hex>)")]
    ImageTag(String),
    #[error("{0:?} is not pinned by content; use sha256:<64 lowercase hex> or name@sha256:<64 lowercase hex>")]
    ImageNotPinned(String),
    #[error("is required with backend = \"podman\": the tools image pinned by content (sha256:<64 hex> or name@sha256:<64 hex>)")]
    ImageMissing,
    #[error("{limit} ms is not under broker.timeout_ms ({timeout} ms): loopd stops waiting then; to give a tool longer, raise both")]
    NotUnderTimeout { limit: u64, timeout: u64 },
    #[error("http_fetch_ms + egress_start_ms ({sum} ms) is not under broker.timeout_ms ({timeout} ms): loopd waits for the proxy's start too")]
    FetchNotUnderTimeout { sum: u64, timeout: u64 },
    #[error("{limit} ms, with what stopping and removing the sandbox (and starting a proxy) may take, comes to {sum} ms, not under broker.timeout_ms ({timeout} ms): loopd would stop waiting before a call that ran out its time limit is answered; lower the limit or raise both")]
    StopNotUnderTimeout { limit: u64, sum: u64, timeout: u64 },
    #[error("must be greater than 0")]
    Zero,
    #[error(
        "{0:?} is not a memory size: digits and a unit b, k, m or g, like \"512m\", at least 6m"
    )]
    Memory(String),
    #[error("{0:?} is not an absolute path")]
    NotAbsolute(String),
    #[error("{0:?} must be written without . or .. components")]
    NotPlain(String),
    #[error("{0:?} does not exist or cannot be read by brokerd")]
    Missing(String),
    #[error("{0:?} is not a directory")]
    NotDirectory(String),
    #[error("{0}")]
    Unmountable(UnmountablePath),
    #[error("{0:?} is not a host pattern: a host name like docs.example.org, or *. and a name like *.example.net")]
    HostPattern(String),
    #[error("{0:?} is not a tool: the tools are read_file, write_file, shell and http_fetch")]
    UnknownTool(String),
    #[error("{0:?} is listed twice")]
    Repeated(String),
    #[error("a grant needs at least one tool")]
    NoTools,
    #[error("{0:?} is not a mode: use safe, ask or auto")]
    Mode(String),
    /// The same rule the egress proxy applies to its `--allow-address` flags.
    #[error("{0}")]
    AllowAddress(proto::addr::CidrError),
    #[error("must name at least one client")]
    NoClients,
    #[error("{0} is not a client: a user name, a uid, or \"@\" and a group name")]
    Client(String),
    #[error("must not be empty or contain spaces or control characters")]
    BadWord,
    #[error("{0:?} is not a grant name: 1 to 64 of A-Z a-z 0-9 _ . -, not . or ..")]
    GrantName(String),
    #[error("is accepted only with runner.backend = \"bwrap\"")]
    BwrapUnused,
    #[error("{0} directories are more than the {max} a sandbox mounts", max = crate::runner::mounts::MAX_MOUNTS)]
    TooManyPaths(usize),
    #[error("{0}")]
    Nested(Box<Nested>),
    #[error("{0}")]
    OverlapsState(Box<OverlapsState>),
    #[error("{0}")]
    Replaceable(Box<owners::Replaceable>),
}

/// Two grant directories, one inside the other, where either is writable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{inner:?} lies inside {outer:?} (see also {other}) and one of them is writable: a sandbox could swap the inner directory for a symbolic link between calls; grant directories may nest only when both are read-only")]
pub struct Nested {
    pub inner: String,
    pub outer: String,
    /// The key of the other directory's grant.
    pub other: String,
}

/// A grant directory over one of brokerd's own places.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path:?} overlaps {place:?}, {what}: no grant may reach brokerd's own state")]
pub struct OverlapsState {
    pub path: String,
    pub place: String,
    pub what: &'static str,
}

/// Why a configuration was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: cannot read the config: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{origin}{pos}: {message}")]
    Syntax {
        origin: String,
        pos: Pos,
        message: String,
    },
    #[error("{origin}{pos}: {key}: {problem}")]
    Invalid {
        origin: String,
        pos: Pos,
        key: String,
        problem: Problem,
    },
}

/// A 1-based line and column in the config, when known. Displayed as `:line:col`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pos(pub Option<(usize, usize)>);

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some((line, col)) => write!(f, ":{line}:{col}"),
            None => Ok(()),
        }
    }
}

/// Reads and checks the config at `path`; errors name it by its path. No grant directory may
/// hold the file itself, and none may be one that a user other than root and the service user
/// could rename or replace (`owners`).
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    load_with(path, Some(&owners::System))
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

/// The directory the service's socket lives in when systemd makes it (`RuntimeDirectory=`).
pub const RUNTIME_DIR: &str = "/run/boxmaker";

/// One of brokerd's own places, which no grant directory may overlap: a sandbox that could
/// read or write them could read other calls' sockets, the audit, Podman's storage and
/// configuration, or change the tools every sandbox runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatePlace {
    pub path: PathBuf,
    /// As the problem text names it.
    pub what: &'static str,
    /// A file: only a grant directory holding it overlaps it.
    pub file: bool,
}

/// brokerd's own places that a config names (the config file and the socket's directory are
/// added by whoever knows them).
pub fn state_places(c: &Config) -> Vec<StatePlace> {
    let home = c
        .runner
        .as_ref()
        .map_or_else(|| PathBuf::from(DEFAULT_HOME), |r| r.home.clone());
    let mut places = vec![
        StatePlace {
            path: home,
            what: "the service home (runner.home: Podman's storage and configuration, the egress sockets)",
            file: false,
        },
        StatePlace {
            path: PathBuf::from(RUNTIME_DIR),
            what: "brokerd's runtime directory",
            file: false,
        },
        StatePlace {
            path: c.broker.audit_log.clone(),
            what: "the audit log (broker.audit_log)",
            file: true,
        },
    ];
    if let Some(b) = &c.bwrap {
        places.push(StatePlace {
            path: b.tools_root.clone(),
            what: "the sandboxes' tools root (bwrap.tools_root)",
            file: false,
        });
    }
    places
}

/// The first grant directory of `c` that overlaps one of `places` (known only once brokerd
/// runs: the socket's directory), as the problem text of `check-config` words it.
pub fn grants_clear_of(c: &Config, places: &[StatePlace]) -> Result<(), String> {
    for (name, g) in &c.grants {
        for p in &g.paths {
            let real = real_path(&p.path);
            if let Some(place) = places.iter().find(|s| overlaps_state(&real, s)) {
                return Err(format!(
                    "grants.{name}.paths: {}",
                    OverlapsState {
                        path: p.path.display().to_string(),
                        place: place.path.display().to_string(),
                        what: place.what,
                    }
                ));
            }
        }
    }
    Ok(())
}

/// Whether grant directory `dir` (canonical) overlaps `place`: holds it, is it, or lies
/// inside it (a directory).
pub fn overlaps_state(dir: &Path, place: &StatePlace) -> bool {
    let p = real_path(&place.path);
    p.starts_with(dir) || (!place.file && dir.starts_with(&p))
}

/// `p` with every symlink of its longest existing prefix followed (it may not exist yet).
fn real_path(p: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut at = p;
    loop {
        if let Ok(real) = std::fs::canonicalize(at) {
            return rest.iter().rev().fold(real, |acc, c| acc.join(c));
        }
        match (at.parent(), at.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                at = parent;
            }
            _ => return p.to_path_buf(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The shape of the file, as serde reads it. Values that are checked after parsing keep their
// span so that the error can point at them.

type S<T> = Spanned<T>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    broker: RawBroker,
    runner: Option<S<RawRunner>>,
    bwrap: Option<S<RawBwrap>>,
    #[serde(default)]
    grants: BTreeMap<S<String>, RawGrant>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawBroker {
    clients: Option<S<Vec<S<toml::Value>>>>,
    audit_log: Option<S<String>>,
    timeout_ms: Option<S<u64>>,
    refusal_repeats: Option<S<u32>>,
    preview_chars: Option<S<usize>>,
    max_concurrent_calls: Option<S<usize>>,
    ticket_ttl_s: Option<S<u64>>,
    result_ttl_s: Option<S<u64>>,
    shutdown_grace_s: Option<S<u64>>,
    owners: Option<S<Vec<S<toml::Value>>>>,
    max_staged_bytes: Option<S<u64>>,
    staged_ttl_s: Option<S<u64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRunner {
    backend: Option<Backend>,
    podman: Option<S<String>>,
    image: Option<S<String>>,
    egress_network: Option<S<String>>,
    output_cap: Option<S<usize>>,
    memory: Option<S<String>>,
    pids: Option<S<u32>>,
    read_file_ms: Option<S<u64>>,
    write_file_ms: Option<S<u64>>,
    shell_ms: Option<S<u64>>,
    http_fetch_ms: Option<S<u64>>,
    enforce_limits: Option<bool>,
    egress_start_ms: Option<S<u64>>,
    home: Option<S<String>>,
    protect_max_depth: Option<S<usize>>,
    protect_max_entries: Option<S<usize>>,
    protect_max_targets: Option<S<usize>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBwrap {
    tools_root: Option<S<String>>,
    cgroup: Option<CgroupMode>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGrant {
    mode: Option<S<String>>,
    tools: S<Vec<S<String>>>,
    #[serde(default)]
    paths: Vec<RawPath>,
    #[serde(default)]
    hosts: Vec<S<String>>,
    #[serde(default)]
    allow_addresses: Vec<S<String>>,
    protect: Option<Protect>,
    writes: Option<Writes>,
    approvals: Option<Approvals>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPath {
    path: S<String>,
    #[serde(default)]
    write: bool,
}

// Defaults: DESIGN.md "Config" and seed 003 section 6.
const DEFAULT_CLIENT: &str = "loopd";
const DEFAULT_AUDIT_LOG: &str = "/var/lib/boxmaker/audit.jsonl";
const DEFAULT_TIMEOUT_MS: u64 = 120_000;
const DEFAULT_REFUSAL_REPEATS: u32 = 5;
const DEFAULT_PREVIEW_CHARS: usize = 50_000;
const DEFAULT_MAX_CONCURRENT_CALLS: usize = 4;
const DEFAULT_TICKET_TTL_S: u64 = 600;
const DEFAULT_RESULT_TTL_S: u64 = 600;
const DEFAULT_SHUTDOWN_GRACE_S: u64 = 30;
const DEFAULT_MAX_STAGED_BYTES: u64 = 1 << 30;

const DEFAULT_PODMAN: &str = "podman";
const DEFAULT_EGRESS_NETWORK: &str = "pasta";
const DEFAULT_OUTPUT_CAP: usize = 262_144;
const DEFAULT_MEMORY: &str = "512m";
const DEFAULT_PIDS: u32 = 128;
const DEFAULT_READ_FILE_MS: u64 = 30_000;
const DEFAULT_WRITE_FILE_MS: u64 = 30_000;
const DEFAULT_SHELL_MS: u64 = 100_000;
const DEFAULT_HTTP_FETCH_MS: u64 = 60_000;
const DEFAULT_EGRESS_START_MS: u64 = 5_000;
pub const DEFAULT_HOME: &str = "/var/lib/boxmaker";
const DEFAULT_TOOLS_ROOT: &str = "/var/lib/boxmaker/tools-root";
/// Podman refuses a memory limit under 6 MiB; say so at load time, not at the first call.
const MIN_MEMORY: u64 = 6 << 20;

struct Checker<'a> {
    text: &'a str,
    origin: &'a str,
}

impl Checker<'_> {
    fn err<T>(
        &self,
        span: Option<std::ops::Range<usize>>,
        key: &str,
        problem: Problem,
    ) -> Result<T, ConfigError> {
        Err(ConfigError::Invalid {
            origin: self.origin.to_owned(),
            pos: Pos(span.map(|s| line_col(self.text, s.start))),
            key: key.to_owned(),
            problem,
        })
    }

    /// A spanned value or its default, with the span when the file gave one.
    fn value<T: Clone>(&self, v: &Option<S<T>>, default: T) -> (T, Option<std::ops::Range<usize>>) {
        match v {
            Some(s) => (s.get_ref().clone(), Some(s.span())),
            None => (default, None),
        }
    }

    fn positive<T: Clone + Default + PartialEq>(
        &self,
        v: &Option<S<T>>,
        default: T,
        key: &str,
    ) -> Result<T, ConfigError> {
        let (v, span) = self.value(v, default);
        if v == T::default() {
            return self.err(span, key, Problem::Zero);
        }
        Ok(v)
    }

    /// Grant directories against each other and against brokerd's own places, compared as
    /// the sandboxes will mount them (symlinks followed). A directory strictly inside
    /// another where either is writable could be swapped for a symlink by a sandbox of the
    /// outer one; the same directory in several grants is fine.
    fn grant_overlaps(&self, raw: &RawConfig, state: &[StatePlace]) -> Result<(), ConfigError> {
        let mut seen: Vec<(String, PathBuf, bool, String)> = Vec::new();
        for (name, g) in &raw.grants {
            let key = format!("grants.{}.paths", name.get_ref());
            for p in &g.paths {
                let span = Some(p.path.span());
                let written = p.path.get_ref();
                let real = real_path(Path::new(written));
                if let Some(place) = state.iter().find(|s| overlaps_state(&real, s)) {
                    let problem = Problem::OverlapsState(Box::new(OverlapsState {
                        path: written.clone(),
                        place: place.path.display().to_string(),
                        what: place.what,
                    }));
                    return self.err(span, &key, problem);
                }
                for (other_key, other, other_write, other_written) in &seen {
                    let nested =
                        real != *other && (real.starts_with(other) || other.starts_with(&real));
                    if nested && (p.write || *other_write) {
                        let (inner, outer) = if real.starts_with(other) {
                            (written.clone(), other_written.clone())
                        } else {
                            (other_written.clone(), written.clone())
                        };
                        let problem = Problem::Nested(Box::new(Nested {
                            inner,
                            outer,
                            other: other_key.clone(),
                        }));
                        return self.err(span, &key, problem);
                    }
                }
                seen.push((key.clone(), real, p.write, written.clone()));
            }
        }
        Ok(())
    }

    /// Each grant directory can be renamed or replaced by root and the service user only.
    fn grant_owners(
        &self,
        raw: &RawConfig,
        trusted: &owners::Trusted,
        accounts: &dyn owners::Accounts,
    ) -> Result<(), ConfigError> {
        for (name, g) in &raw.grants {
            let key = format!("grants.{}.paths", name.get_ref());
            for p in &g.paths {
                if let Err(e) = owners::check(Path::new(p.path.get_ref()), trusted, accounts) {
                    return self.err(Some(p.path.span()), &key, Problem::Replaceable(e));
                }
            }
        }
        Ok(())
    }

    fn config(&self, raw: &RawConfig) -> Result<Config, ConfigError> {
        let broker = self.broker(&raw.broker)?;
        let runner = match &raw.runner {
            Some(r) => Some(self.runner(r, &raw.broker)?),
            None => None,
        };
        let uses_bwrap = runner.as_ref().is_some_and(|r| r.backend == Backend::Bwrap);
        let bwrap = match (&raw.bwrap, uses_bwrap) {
            (Some(b), false) => return self.err(Some(b.span()), "bwrap", Problem::BwrapUnused),
            (Some(b), true) => Some(self.bwrap(b.get_ref())?),
            (None, true) => Some(BwrapConfig {
                tools_root: PathBuf::from(DEFAULT_TOOLS_ROOT),
                cgroup: CgroupMode::Delegated,
            }),
            (None, false) => None,
        };
        let mut grants = BTreeMap::new();
        for (name, g) in &raw.grants {
            if !proto::ident::valid_ident(name.get_ref()) {
                return self.err(
                    Some(name.span()),
                    "grants",
                    Problem::GrantName(name.get_ref().clone()),
                );
            }
            grants.insert(name.get_ref().clone(), self.grant(name.get_ref(), g)?);
        }
        Ok(Config {
            broker,
            runner,
            bwrap,
            grants,
        })
    }

    fn broker(&self, b: &RawBroker) -> Result<BrokerConfig, ConfigError> {
        let clients = match &b.clients {
            None => vec![Client::User(DEFAULT_CLIENT.to_owned())],
            Some(list) => {
                if list.get_ref().is_empty() {
                    return self.err(Some(list.span()), "broker.clients", Problem::NoClients);
                }
                self.clients(list, "broker.clients")?
            }
        };
        let (audit_log, span) = self.value(&b.audit_log, DEFAULT_AUDIT_LOG.to_owned());
        let audit_log = self.absolute(&audit_log, span, "broker.audit_log")?;
        Ok(BrokerConfig {
            clients,
            audit_log,
            timeout_ms: self.positive(&b.timeout_ms, DEFAULT_TIMEOUT_MS, "broker.timeout_ms")?,
            refusal_repeats: self.positive(
                &b.refusal_repeats,
                DEFAULT_REFUSAL_REPEATS,
                "broker.refusal_repeats",
            )?,
            preview_chars: self.positive(
                &b.preview_chars,
                DEFAULT_PREVIEW_CHARS,
                "broker.preview_chars",
            )?,
            max_concurrent_calls: self.positive(
                &b.max_concurrent_calls,
                DEFAULT_MAX_CONCURRENT_CALLS,
                "broker.max_concurrent_calls",
            )?,
            ticket_ttl_s: self.positive(
                &b.ticket_ttl_s,
                DEFAULT_TICKET_TTL_S,
                "broker.ticket_ttl_s",
            )?,
            result_ttl_s: self.positive(
                &b.result_ttl_s,
                DEFAULT_RESULT_TTL_S,
                "broker.result_ttl_s",
            )?,
            shutdown_grace_s: self.value(&b.shutdown_grace_s, DEFAULT_SHUTDOWN_GRACE_S).0,
            owners: match &b.owners {
                None => Vec::new(),
                Some(list) => self.clients(list, "broker.owners")?,
            },
            max_staged_bytes: self.positive(
                &b.max_staged_bytes,
                DEFAULT_MAX_STAGED_BYTES,
                "broker.max_staged_bytes",
            )?,
            staged_ttl_s: self.value(&b.staged_ttl_s, 0).0,
        })
    }

    /// A list of peers (`clients`, `owners`): user names, uids, or `@group`.
    fn clients(
        &self,
        list: &S<Vec<S<toml::Value>>>,
        key: &str,
    ) -> Result<Vec<Client>, ConfigError> {
        let mut clients = Vec::new();
        for c in list.get_ref() {
            match parse_client(c.get_ref()) {
                Some(client) => clients.push(client),
                None => {
                    return self.err(
                        Some(c.span()),
                        key,
                        Problem::Client(c.get_ref().to_string()),
                    )
                }
            }
        }
        Ok(clients)
    }

    fn runner(&self, r: &S<RawRunner>, b: &RawBroker) -> Result<RunnerConfig, ConfigError> {
        let table = r.span();
        let r = r.get_ref();
        let backend = r.backend.unwrap_or(Backend::Podman);

        let image = match (&r.image, backend) {
            (Some(img), _) => {
                check_image(img.get_ref())
                    .or_else(|p| self.err(Some(img.span()), "runner.image", p))?;
                img.get_ref().clone()
            }
            (None, Backend::Podman) => {
                return self.err(Some(table), "runner.image", Problem::ImageMissing)
            }
            (None, Backend::Bwrap) => String::new(),
        };

        let (podman, span) = self.value(&r.podman, DEFAULT_PODMAN.to_owned());
        if podman.is_empty() {
            return self.err(span, "runner.podman", Problem::BadWord);
        }
        let (egress_network, span) =
            self.value(&r.egress_network, DEFAULT_EGRESS_NETWORK.to_owned());
        if egress_network.is_empty()
            || egress_network
                .chars()
                .any(|c| c.is_whitespace() || c.is_control())
        {
            return self.err(span, "runner.egress_network", Problem::BadWord);
        }
        let (memory, span) = self.value(&r.memory, DEFAULT_MEMORY.to_owned());
        if !matches!(memory_bytes(&memory), Some(b) if b >= MIN_MEMORY) {
            return self.err(span, "runner.memory", Problem::Memory(memory));
        }
        let (home, span) = self.value(&r.home, DEFAULT_HOME.to_owned());
        let home = self.absolute(&home, span.clone(), "runner.home")?;
        // The egress directory under home is mounted with --volume (seed 003 section 6).
        check_grant_path(&home)
            .or_else(|e| self.err(span, "runner.home", Problem::Unmountable(e)))?;

        // Every tool limit stays under loopd's broker timeout (seed 003 section 6).
        let (timeout, timeout_span) = self.value(&b.timeout_ms, DEFAULT_TIMEOUT_MS);
        let limit = |v: &Option<S<u64>>, default: u64, key: &str| -> Result<u64, ConfigError> {
            let (ms, span) = self.value(v, default);
            if ms == 0 {
                return self.err(span, key, Problem::Zero);
            }
            if ms >= timeout {
                let problem = Problem::NotUnderTimeout { limit: ms, timeout };
                return self.err(span.or(timeout_span.clone()), key, problem);
            }
            Ok(ms)
        };
        let read_file_ms = limit(&r.read_file_ms, DEFAULT_READ_FILE_MS, "runner.read_file_ms")?;
        let write_file_ms = limit(
            &r.write_file_ms,
            DEFAULT_WRITE_FILE_MS,
            "runner.write_file_ms",
        )?;
        let shell_ms = limit(&r.shell_ms, DEFAULT_SHELL_MS, "runner.shell_ms")?;
        let http_fetch_ms = limit(
            &r.http_fetch_ms,
            DEFAULT_HTTP_FETCH_MS,
            "runner.http_fetch_ms",
        )?;
        let egress_start_ms = limit(
            &r.egress_start_ms,
            DEFAULT_EGRESS_START_MS,
            "runner.egress_start_ms",
        )?;
        let sum = http_fetch_ms.saturating_add(egress_start_ms);
        if sum >= timeout {
            let span = r.http_fetch_ms.as_ref().map(|s| s.span()).or(timeout_span);
            return self.err(
                span,
                "runner.http_fetch_ms",
                Problem::FetchNotUnderTimeout { sum, timeout },
            );
        }

        let runner = RunnerConfig {
            backend,
            podman: PathBuf::from(podman),
            image,
            egress_network,
            output_cap: self.positive(&r.output_cap, DEFAULT_OUTPUT_CAP, "runner.output_cap")?,
            memory,
            pids: self.positive(&r.pids, DEFAULT_PIDS, "runner.pids")?,
            read_file_ms,
            write_file_ms,
            shell_ms,
            http_fetch_ms,
            enforce_limits: r.enforce_limits.unwrap_or(true),
            egress_start_ms,
            home,
            protect: {
                let d = crate::protect::scan::Bounds::default();
                crate::protect::scan::Bounds {
                    max_depth: self.positive(
                        &r.protect_max_depth,
                        d.max_depth,
                        "runner.protect_max_depth",
                    )?,
                    max_entries: self.positive(
                        &r.protect_max_entries,
                        d.max_entries,
                        "runner.protect_max_entries",
                    )?,
                    max_targets: self.positive(
                        &r.protect_max_targets,
                        d.max_targets,
                        "runner.protect_max_targets",
                    )?,
                }
            },
        };
        // A call that runs out its limit is then stopped and removed: that too must end
        // before loopd stops waiting.
        for tool in ToolName::ALL {
            let sum = runner.call_budget(tool).as_millis() as u64;
            if sum >= timeout {
                let (key, value) = match tool {
                    ToolName::ReadFile => ("runner.read_file_ms", &r.read_file_ms),
                    ToolName::WriteFile => ("runner.write_file_ms", &r.write_file_ms),
                    ToolName::Shell => ("runner.shell_ms", &r.shell_ms),
                    ToolName::HttpFetch => ("runner.http_fetch_ms", &r.http_fetch_ms),
                };
                let limit = runner.time_limit(tool).as_millis() as u64;
                let problem = Problem::StopNotUnderTimeout {
                    limit,
                    sum,
                    timeout,
                };
                let span = value.as_ref().map(|s| s.span()).or(timeout_span.clone());
                return self.err(span, key, problem);
            }
        }
        Ok(runner)
    }

    fn bwrap(&self, b: &RawBwrap) -> Result<BwrapConfig, ConfigError> {
        let (root, span) = self.value(&b.tools_root, DEFAULT_TOOLS_ROOT.to_owned());
        Ok(BwrapConfig {
            tools_root: self.absolute(&root, span, "bwrap.tools_root")?,
            cgroup: b.cgroup.unwrap_or(CgroupMode::Delegated),
        })
    }

    fn grant(&self, name: &str, g: &RawGrant) -> Result<Grant, ConfigError> {
        let key = |k: &str| format!("grants.{name}.{k}");
        let mode = match &g.mode {
            None => Mode::Safe,
            Some(m) => match parse_mode(m.get_ref()) {
                Some(mode) => mode,
                None => {
                    return self.err(
                        Some(m.span()),
                        &key("mode"),
                        Problem::Mode(m.get_ref().clone()),
                    )
                }
            },
        };

        if g.tools.get_ref().is_empty() {
            return self.err(Some(g.tools.span()), &key("tools"), Problem::NoTools);
        }
        let mut tools = Vec::new();
        for t in g.tools.get_ref() {
            let Some(tool) = ToolName::parse(t.get_ref()) else {
                return self.err(
                    Some(t.span()),
                    &key("tools"),
                    Problem::UnknownTool(t.get_ref().clone()),
                );
            };
            if tools.contains(&tool) {
                return self.err(
                    Some(t.span()),
                    &key("tools"),
                    Problem::Repeated(t.get_ref().clone()),
                );
            }
            tools.push(tool);
        }

        if g.paths.len() > crate::runner::mounts::MAX_MOUNTS {
            let span = g.paths.first().map(|p| p.path.span());
            return self.err(span, &key("paths"), Problem::TooManyPaths(g.paths.len()));
        }
        let mut paths = Vec::new();
        for p in &g.paths {
            let span = Some(p.path.span());
            let path = self.absolute(p.path.get_ref(), span.clone(), &key("paths"))?;
            check_grant_path(&path)
                .or_else(|e| self.err(span.clone(), &key("paths"), Problem::Unmountable(e)))?;
            match std::fs::metadata(&path) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => {
                    return self.err(
                        span,
                        &key("paths"),
                        Problem::NotDirectory(p.path.get_ref().clone()),
                    )
                }
                Err(_) => {
                    return self.err(
                        span,
                        &key("paths"),
                        Problem::Missing(p.path.get_ref().clone()),
                    )
                }
            }
            paths.push(GrantPath {
                path,
                write: p.write,
            });
        }

        let mut hosts = Vec::new();
        for h in &g.hosts {
            if !proto::hosts::valid_host_pattern(h.get_ref()) {
                return self.err(
                    Some(h.span()),
                    &key("hosts"),
                    Problem::HostPattern(h.get_ref().clone()),
                );
            }
            hosts.push(h.get_ref().clone());
        }

        let mut allow_addresses = Vec::new();
        for a in &g.allow_addresses {
            let span = Some(a.span());
            let cidr = proto::addr::parse_allow_address(a.get_ref())
                .or_else(|e| self.err(span, &key("allow_addresses"), Problem::AllowAddress(e)))?;
            allow_addresses.push(cidr);
        }

        Ok(Grant {
            mode,
            tools,
            paths,
            hosts,
            allow_addresses,
            protect: g.protect.unwrap_or(Protect::Mount),
            writes: g.writes.unwrap_or(Writes::Direct),
            approvals: g.approvals.unwrap_or(Approvals::Client),
        })
    }

    /// An absolute path written plainly (no `.` or `..`), trailing slash dropped.
    fn absolute(
        &self,
        s: &str,
        span: Option<std::ops::Range<usize>>,
        key: &str,
    ) -> Result<PathBuf, ConfigError> {
        let path = Path::new(s);
        if !path.is_absolute() {
            return self.err(span, key, Problem::NotAbsolute(s.to_owned()));
        }
        if path
            .components()
            .any(|c| matches!(c, Component::CurDir | Component::ParentDir))
            || s.contains("/./")
            || s.ends_with("/.")
        {
            return self.err(span, key, Problem::NotPlain(s.to_owned()));
        }
        Ok(path.components().collect())
    }
}

/// `sha256:<64 lowercase hex>` (an image ID) or `name@sha256:<64 lowercase hex>`.
fn check_image(image: &str) -> Result<(), Problem> {
    let is_digest = |d: &str| {
        d.strip_prefix("sha256:").is_some_and(|h| {
            h.len() == 64
                && h.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        })
    };
    let pinned = match image.split_once('@') {
        Some((name, digest)) => {
            !name.is_empty()
                && !name.starts_with('-')
                && name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-/:".contains(&b))
                && is_digest(digest)
        }
        None => is_digest(image),
    };
    if pinned {
        return Ok(());
    }
    if !image.is_empty() && !image.contains('@') && !image.starts_with("sha256:") {
        return Err(Problem::ImageTag(image.to_owned()));
    }
    Err(Problem::ImageNotPinned(image.to_owned()))
}

/// `512m` and the like, in bytes; `None` for anything podman would not read the same way.
pub fn memory_bytes(s: &str) -> Option<u64> {
    let (digits, unit) = match s.char_indices().last()? {
        (i, c) if c.is_ascii_alphabetic() => (&s[..i], c.to_ascii_lowercase()),
        _ => (s, 'b'),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let shift = match unit {
        'b' => 0,
        'k' => 10,
        'm' => 20,
        'g' => 30,
        _ => return None,
    };
    digits.parse::<u64>().ok()?.checked_mul(1 << shift)
}

/// A user name, a uid (number or digits), or `@group`.
fn parse_client(v: &toml::Value) -> Option<Client> {
    let name_ok = |n: &str| {
        let b = n.as_bytes();
        !b.is_empty()
            && b.len() <= 32
            && (b[0].is_ascii_lowercase() || b[0] == b'_')
            && b.iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_' || *c == b'-')
    };
    match v {
        toml::Value::Integer(n) => u32::try_from(*n).ok().map(Client::Uid),
        toml::Value::String(s) => {
            if let Some(group) = s.strip_prefix('@') {
                return name_ok(group).then(|| Client::Group(group.to_owned()));
            }
            if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
                return s.parse().ok().map(Client::Uid);
            }
            name_ok(s).then(|| Client::User(s.clone()))
        }
        _ => None,
    }
}

/// The 1-based line and column (in characters) of byte `offset` in `text`.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

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
            "egress_network": r.egress_network,
            "output_cap": r.output_cap,
            "memory": r.memory,
            "pids": r.pids,
            "read_file_ms": r.read_file_ms,
            "write_file_ms": r.write_file_ms,
            "shell_ms": r.shell_ms,
            "http_fetch_ms": r.http_fetch_ms,
            "enforce_limits": r.enforce_limits,
            "egress_start_ms": r.egress_start_ms,
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

#[cfg(test)]
mod tests {
    use super::*;

    const IMAGE: &str =
        "localhost/boxmaker-tools@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn runner(extra: &str) -> String {
        format!("[runner]\nimage = \"{IMAGE}\"\n{extra}\n")
    }

    #[test]
    fn defaults_are_the_documented_ones() {
        let c = parse(&runner(""), "config.toml").expect("minimal config");
        assert_eq!(
            c.broker,
            BrokerConfig {
                clients: vec![Client::User("loopd".into())],
                audit_log: "/var/lib/boxmaker/audit.jsonl".into(),
                timeout_ms: 120_000,
                refusal_repeats: 5,
                preview_chars: 50_000,
                max_concurrent_calls: 4,
                ticket_ttl_s: 600,
                result_ttl_s: 600,
                shutdown_grace_s: 30,
                owners: vec![],
                max_staged_bytes: 1 << 30,
                staged_ttl_s: 0,
            }
        );
        assert_eq!(
            c.runner,
            Some(RunnerConfig {
                backend: Backend::Podman,
                podman: "podman".into(),
                image: IMAGE.into(),
                egress_network: "pasta".into(),
                output_cap: 262_144,
                memory: "512m".into(),
                pids: 128,
                read_file_ms: 30_000,
                write_file_ms: 30_000,
                shell_ms: 100_000,
                http_fetch_ms: 60_000,
                enforce_limits: true,
                egress_start_ms: 5_000,
                home: "/var/lib/boxmaker".into(),
                protect: crate::protect::scan::Bounds {
                    max_depth: 32,
                    max_entries: 100_000,
                    max_targets: 256,
                },
            })
        );
        assert_eq!(c.bwrap, None);
        assert!(c.grants.is_empty());
        // No [runner]: no runner, every call refused (seed 003 section 6).
        assert_eq!(parse("", "c").expect("empty config").runner, None);
    }

    #[test]
    fn a_full_config() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (a, b) = (dir.path().join("notes"), dir.path().join("ref"));
        std::fs::create_dir(&a).expect("mkdir");
        std::fs::create_dir(&b).expect("mkdir");
        let text = format!(
            r#"
[broker]
clients = ["loopd", 1001, "2002", "@agents"]
audit_log = "/var/log/boxmaker/audit.jsonl"
timeout_ms = 200000
refusal_repeats = 3
preview_chars = 1000
max_concurrent_calls = 2
ticket_ttl_s = 60
result_ttl_s = 60
shutdown_grace_s = 0

[runner]
backend = "bwrap"
podman = "/run/current-system/sw/bin/podman"
image = "sha256:{hex}"
egress_network = "slirp4netns"
output_cap = 1024
memory = "1g"
pids = 64
read_file_ms = 1000
write_file_ms = 2000
shell_ms = 150000
http_fetch_ms = 90000
enforce_limits = false
egress_start_ms = 3000
home = "/home/boxmaker/"

[bwrap]
tools_root = "/opt/tools-root"
cgroup = "systemd-scope"

[grants.notes]
mode = "auto"
tools = ["read_file", "write_file", "shell", "http_fetch"]
paths = [ {{ path = "{a}", write = true }}, {{ path = "{b}/" }} ]
hosts = ["docs.example.org", "*.example.net"]
allow_addresses = ["192.168.1.0/24", "10.0.0.7", "2001:db8::/32"]

[grants."read.only-1"]
tools = ["read_file"]
"#,
            hex = "f".repeat(64),
            a = a.display(),
            b = b.display(),
        );
        let c = parse(&text, "full.toml").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            c.broker.clients,
            vec![
                Client::User("loopd".into()),
                Client::Uid(1001),
                Client::Uid(2002),
                Client::Group("agents".into())
            ]
        );
        assert_eq!(c.broker.shutdown_grace_s, 0);
        let r = c.runner.expect("runner");
        assert_eq!(r.backend, Backend::Bwrap);
        assert_eq!(r.home, PathBuf::from("/home/boxmaker"));
        assert!(!r.enforce_limits);
        assert_eq!(
            r.time_limit(ToolName::Shell),
            Duration::from_millis(150_000)
        );
        assert_eq!(
            r.time_limit(ToolName::ReadFile),
            Duration::from_millis(1000)
        );
        assert_eq!(
            c.bwrap,
            Some(BwrapConfig {
                tools_root: "/opt/tools-root".into(),
                cgroup: CgroupMode::SystemdScope
            })
        );
        let g = &c.grants["notes"];
        assert_eq!(g.mode, Mode::Auto);
        assert_eq!(g.tools, ToolName::ALL.to_vec());
        assert_eq!(
            g.paths,
            vec![
                GrantPath {
                    path: a.clone(),
                    write: true
                },
                GrantPath {
                    path: b.clone(),
                    write: false
                }
            ]
        );
        assert_eq!(g.hosts, vec!["docs.example.org", "*.example.net"]);
        let cidrs: Vec<String> = g.allow_addresses.iter().map(|c| c.to_string()).collect();
        assert_eq!(
            cidrs,
            vec!["192.168.1.0/24", "10.0.0.7/32", "2001:db8::/32"]
        );
        assert_eq!(c.grants["read.only-1"].mode, Mode::Safe);
    }

    /// Grant directories nested where either is writable, and grant directories over
    /// brokerd's own places, are refused with both paths; read-only nesting and the same
    /// directory in two grants are fine. Symlinks in the config are followed first.
    #[test]
    fn grant_directories_stay_apart_from_each_other_and_from_brokerd() {
        let dir = tempfile::tempdir().expect("tempdir");
        let base = std::fs::canonicalize(dir.path()).expect("canonical");
        let d = base.display().to_string();
        for sub in ["p/ro", "q/r", "home/x", "state", "other"] {
            std::fs::create_dir_all(base.join(sub)).expect("mkdir");
        }
        std::os::unix::fs::symlink(base.join("p"), base.join("link")).expect("symlink");
        let config = base.join("state/brokerd.toml");
        let head = format!(
            "[broker]\naudit_log = \"{d}/state/audit.jsonl\"\n[runner]\nbackend = \"bwrap\"\nhome = \"{d}/home\"\n[bwrap]\ntools_root = \"{d}/other/root\"\n"
        );
        let grants = |a: &str, b: &str| {
            format!("{head}[grants.a]\ntools = [\"shell\"]\npaths = [ {a} ]\n[grants.b]\ntools = [\"shell\"]\npaths = [ {b} ]\n")
        };
        let nested = |inner: &str, outer: &str, other: &str, line: usize, col: usize| {
            format!("brokerd.toml:{line}:{col}: grants.b.paths: \"{d}/{inner}\" lies inside \"{d}/{outer}\" (see also grants.a.paths) and one of them is writable: a sandbox could swap the inner directory for a symbolic link between calls; grant directories may nest only when both are read-only{other}")
        };
        let state = |path: &str, place: &str, what: &str| {
            format!("brokerd.toml:13:20: grants.b.paths: \"{path}\" overlaps \"{place}\", {what}: no grant may reach brokerd's own state")
        };
        let ok = || Ok(());
        let cases: Vec<(String, Result<(), String>)> = vec![
            // (a's paths, b's paths)
            (grants(&format!("{{ path = \"{d}/p\", write = true }}"), &format!("{{ path = \"{d}/p/ro\" }}")), Err(nested("p/ro", "p", "", 13, 20))),
            (grants(&format!("{{ path = \"{d}/p/ro\" }}"), &format!("{{ path = \"{d}/p\", write = true }}")), Err(nested("p/ro", "p", "", 13, 20))),
            (grants(&format!("{{ path = \"{d}/q\" }}"), &format!("{{ path = \"{d}/q/r\", write = true }}")), Err(nested("q/r", "q", "", 13, 20))),
            // Through a symlink in the config: compared as mounted.
            (grants(&format!("{{ path = \"{d}/p\", write = true }}"), &format!("{{ path = \"{d}/link/ro\" }}")), Err(nested("link/ro", "p", "", 13, 20))),
            (grants(&format!("{{ path = \"{d}/q\" }}"), &format!("{{ path = \"{d}/q/r\" }}")), ok()),
            (grants(&format!("{{ path = \"{d}/p\", write = true }}"), &format!("{{ path = \"{d}/p\" }}")), ok()),
            (grants(&format!("{{ path = \"{d}/p\", write = true }}"), &format!("{{ path = \"{d}/q\", write = true }}")), ok()),
            // brokerd's own places.
            (grants(&format!("{{ path = \"{d}/q\" }}"), &format!("{{ path = \"{d}/home/x\" }}")), Err(state(&format!("{d}/home/x"), &format!("{d}/home"), "the service home (runner.home: Podman's storage and configuration, the egress sockets)"))),
            (grants(&format!("{{ path = \"{d}/q\" }}"), &format!("{{ path = \"{d}\" }}")), Err(state(&d, &format!("{d}/home"), "the service home (runner.home: Podman's storage and configuration, the egress sockets)"))),
            (grants(&format!("{{ path = \"{d}/q\" }}"), &format!("{{ path = \"{d}/state\" }}")), Err(state(&format!("{d}/state"), &format!("{d}/state/audit.jsonl"), "the audit log (broker.audit_log)"))),
            (grants(&format!("{{ path = \"{d}/q\" }}"), &format!("{{ path = \"{d}/other\" }}")), Err(state(&format!("{d}/other"), &format!("{d}/other/root"), "the sandboxes' tools root (bwrap.tools_root)"))),
        ];
        let mut cases = cases;
        // Only where /run exists (Nix's build sandbox has none).
        if Path::new("/run").is_dir() {
            cases.push((
                grants(&format!("{{ path = \"{d}/q\" }}"), "{ path = \"/run\" }"),
                Err(state(
                    "/run",
                    "/run/boxmaker",
                    "brokerd's runtime directory",
                )),
            ));
        }
        for (text, want) in cases {
            std::fs::write(&config, &text).expect("write");
            let origin = format!("{d}/state/");
            let got = load(&config).map(|_| ()).map_err(|e| {
                let e = e.to_string();
                e.strip_prefix(&origin).map_or(e.clone(), str::to_owned)
            });
            assert_eq!(got, want, "{text}");
        }
        // More directories than a sandbox mounts by descriptor.
        let many: Vec<String> = (0..=crate::runner::mounts::MAX_MOUNTS)
            .map(|_| format!("{{ path = \"{d}/q\" }}"))
            .collect();
        let text = format!(
            "[grants.a]\ntools = [\"shell\"]\npaths = [ {} ]\n",
            many.join(", ")
        );
        let e = parse(&text, "c.toml").expect_err("too many").to_string();
        assert!(
            e.ends_with("grants.a.paths: 55 directories are more than the 54 a sandbox mounts"),
            "{e}"
        );

        // The config file itself, once the audit log is elsewhere.
        let text = format!("[broker]\naudit_log = \"{d}/q/audit.jsonl\"\n[grants.a]\ntools = [\"shell\"]\npaths = [ {{ path = \"{d}/state\" }} ]\n");
        std::fs::write(&config, &text).expect("write");
        let e = load(&config)
            .expect_err("the config's directory")
            .to_string();
        assert!(e.ends_with(&format!("grants.a.paths: \"{d}/state\" overlaps \"{d}/state/brokerd.toml\", the config file: no grant may reach brokerd's own state")), "{e}");
        assert!(parse(&text, "c.toml").is_ok(), "a text alone names no file");
    }

    #[test]
    fn bad_configs_say_where_and_what() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path().display().to_string();
        let file = dir.path().join("file");
        std::fs::write(&file, "x").expect("write");
        let f = file.display().to_string();
        let colon = dir.path().join("a:b");
        std::fs::create_dir(&colon).expect("mkdir");
        let colon = colon.display().to_string();
        let grant = |body: &str| format!("[grants.g]\ntools = [\"read_file\"]\n{body}\n");
        // (config text, the whole expected error)
        let cases: Vec<(String, String)> = vec![
            (
                "[runner]\nimage = \"boxmaker-tools:latest\"\n".into(),
                "c.toml:2:9: runner.image: \"boxmaker-tools:latest\" is a tag; pin the image by content (sha256:<64 hex> or name@sha256:<64 hex>)".into(),
            ),
            (
                format!("[runner]\nimage = \"x@sha256:{}\"\n", "A".repeat(64)),
                format!("c.toml:2:9: runner.image: \"x@sha256:{}\" is not pinned by content; use sha256:<64 lowercase hex> or name@sha256:<64 lowercase hex>", "A".repeat(64)),
            ),
            (
                format!("[runner]\nimage = \"sha256:{}\"\n", "a".repeat(63)),
                format!("c.toml:2:9: runner.image: \"sha256:{}\" is not pinned by content; use sha256:<64 lowercase hex> or name@sha256:<64 lowercase hex>", "a".repeat(63)),
            ),
            (
                "[runner]\npids = 4\n".into(),
                "c.toml:1:1: runner.image: is required with backend = \"podman\": the tools image pinned by content (sha256:<64 hex> or name@sha256:<64 hex>)".into(),
            ),
            (
                runner("shell_ms = 120000"),
                "c.toml:3:12: runner.shell_ms: 120000 ms is not under broker.timeout_ms (120000 ms): loopd stops waiting then; to give a tool longer, raise both".into(),
            ),
            // The limit is under the timeout, but not with the kill and rm after it.
            (
                runner("shell_ms = 110000"),
                "c.toml:3:12: runner.shell_ms: 110000 ms, with what stopping and removing the sandbox (and starting a proxy) may take, comes to 126000 ms, not under broker.timeout_ms (120000 ms): loopd would stop waiting before a call that ran out its time limit is answered; lower the limit or raise both".into(),
            ),
            (
                format!("[broker]\ntimeout_ms = 110000\n{}", runner("backend = \"bwrap\"\nhttp_fetch_ms = 100000")),
                "c.toml:6:17: runner.http_fetch_ms: 100000 ms, with what stopping and removing the sandbox (and starting a proxy) may take, comes to 113000 ms, not under broker.timeout_ms (110000 ms): loopd would stop waiting before a call that ran out its time limit is answered; lower the limit or raise both".into(),
            ),
            (
                format!("[broker]\ntimeout_ms = 50000\n{}", runner("")),
                "c.toml:2:14: runner.shell_ms: 100000 ms is not under broker.timeout_ms (50000 ms): loopd stops waiting then; to give a tool longer, raise both".into(),
            ),
            (
                runner("http_fetch_ms = 116000"),
                "c.toml:3:17: runner.http_fetch_ms: http_fetch_ms + egress_start_ms (121000 ms) is not under broker.timeout_ms (120000 ms): loopd waits for the proxy's start too".into(),
            ),
            (runner("read_file_ms = 0"), "c.toml:3:16: runner.read_file_ms: must be greater than 0".into()),
            (runner("pids = 0"), "c.toml:3:8: runner.pids: must be greater than 0".into()),
            (runner("output_cap = 0"), "c.toml:3:14: runner.output_cap: must be greater than 0".into()),
            (
                runner("memory = \"512 MB\""),
                "c.toml:3:10: runner.memory: \"512 MB\" is not a memory size: digits and a unit b, k, m or g, like \"512m\", at least 6m".into(),
            ),
            (
                runner("memory = \"1m\""),
                "c.toml:3:10: runner.memory: \"1m\" is not a memory size: digits and a unit b, k, m or g, like \"512m\", at least 6m".into(),
            ),
            (
                runner("egress_network = \"\""),
                "c.toml:3:18: runner.egress_network: must not be empty or contain spaces or control characters".into(),
            ),
            (
                runner("home = \"var/lib\""),
                "c.toml:3:8: runner.home: \"var/lib\" is not an absolute path".into(),
            ),
            (
                runner("home = \"/srv/a,b\""),
                "c.toml:3:8: runner.home: \"/srv/a,b\" cannot be mounted: it contains ':' or ','".into(),
            ),
            (
                runner("imag = \"x\""),
                "c.toml:3:1: unknown field `imag`, expected one of `backend`, `podman`, `image`, `egress_network`, `output_cap`, `memory`, `pids`, `read_file_ms`, `write_file_ms`, `shell_ms`, `http_fetch_ms`, `enforce_limits`, `egress_start_ms`, `home`, `protect_max_depth`, `protect_max_entries`, `protect_max_targets`".into(),
            ),
            (
                runner("backend = \"docker\""),
                "c.toml:3:11: unknown variant `docker`, expected `podman` or `bwrap`".into(),
            ),
            ("[broker]\npids = 1\n".into(), "c.toml:2:1: unknown field `pids`, expected one of `clients`, `audit_log`, `timeout_ms`, `refusal_repeats`, `preview_chars`, `max_concurrent_calls`, `ticket_ttl_s`, `result_ttl_s`, `shutdown_grace_s`, `owners`, `max_staged_bytes`, `staged_ttl_s`".into()),
            ("[broker]\nclients = []\n".into(), "c.toml:2:11: broker.clients: must name at least one client".into()),
            (
                "[broker]\nclients = [\"Bad User\"]\n".into(),
                "c.toml:2:12: broker.clients: \"Bad User\" is not a client: a user name, a uid, or \"@\" and a group name".into(),
            ),
            ("[broker]\nclients = [-1]\n".into(), "c.toml:2:12: broker.clients: -1 is not a client: a user name, a uid, or \"@\" and a group name".into()),
            ("[broker]\nclients = [\"@\"]\n".into(), "c.toml:2:12: broker.clients: \"@\" is not a client: a user name, a uid, or \"@\" and a group name".into()),
            ("[broker]\ntimeout_ms = -5\n".into(), "c.toml:2:14: invalid value: integer `-5`, expected u64".into()),
            ("[broker]\naudit_log = \"/var/../etc/x\"\n".into(), "c.toml:2:13: broker.audit_log: \"/var/../etc/x\" must be written without . or .. components".into()),
            ("[bwrap]\n".into(), "c.toml:1:1: bwrap: is accepted only with runner.backend = \"bwrap\"".into()),
            (grant("mode = \"yolo\""), "c.toml:3:8: grants.g.mode: \"yolo\" is not a mode: use safe, ask or auto".into()),
            (
                "[grants.g]\ntools = [\"read_file\", \"exec\"]\n".into(),
                "c.toml:2:23: grants.g.tools: \"exec\" is not a tool: the tools are read_file, write_file, shell and http_fetch".into(),
            ),
            ("[grants.g]\ntools = [\"shell\", \"shell\"]\n".into(), "c.toml:2:19: grants.g.tools: \"shell\" is listed twice".into()),
            ("[grants.g]\ntools = []\n".into(), "c.toml:2:9: grants.g.tools: a grant needs at least one tool".into()),
            ("[grants.g]\nmode = \"safe\"\n".into(), "c.toml:1:1: missing field `tools`".into()),
            ("[grants.\"a b\"]\ntools = [\"shell\"]\n".into(), "c.toml:1:9: grants: \"a b\" is not a grant name: 1 to 64 of A-Z a-z 0-9 _ . -, not . or ..".into()),
            (grant("paths = [{ path = \"srv\" }]"), "c.toml:3:19: grants.g.paths: \"srv\" is not an absolute path".into()),
            (grant(&format!("paths = [{{ path = \"{d}/none\" }}]")), format!("c.toml:3:19: grants.g.paths: \"{d}/none\" does not exist or cannot be read by brokerd")),
            (grant(&format!("paths = [{{ path = \"{f}\" }}]")), format!("c.toml:3:19: grants.g.paths: \"{f}\" is not a directory")),
            (grant(&format!("paths = [{{ path = \"{colon}\" }}]")), format!("c.toml:3:19: grants.g.paths: \"{colon}\" cannot be mounted: it contains ':' or ','")),
            (grant(&format!("paths = [{{ path = \"{d}\", mode = \"rw\" }}]")), "c.toml:3:".to_string()),
            (grant("hosts = [\"*.com\"]"), "c.toml:3:10: grants.g.hosts: \"*.com\" is not a host pattern: a host name like docs.example.org, or *. and a name like *.example.net".into()),
            (grant("hosts = [\"10.0.0.1\"]"), "c.toml:3:10: grants.g.hosts: \"10.0.0.1\" is not a host pattern: a host name like docs.example.org, or *. and a name like *.example.net".into()),
            (grant("allow_addresses = [\"10.1.2.3/8\"]"), "c.toml:3:20: grants.g.allow_addresses: \"10.1.2.3/8\" has address bits set past its prefix length; write 10.0.0.0/8".into()),
            (grant("allow_addresses = [\"10.0.0.0/33\"]"), "c.toml:3:20: grants.g.allow_addresses: \"10.0.0.0/33\" has a prefix length longer than the address".into()),
            (grant("allow_addresses = [\"example.com\"]"), "c.toml:3:20: grants.g.allow_addresses: \"example.com\" is not an address or a CIDR such as 192.0.2.0/24".into()),
            (grant("allow_addresses = [\"127.0.0.1\"]"), "c.toml:3:20: grants.g.allow_addresses: 127.0.0.1/32 overlaps 127.0.0.0/8, which is never allowed (loopback, link-local, the tailnet, 0/8, multicast)".into()),
        ];
        for (text, want) in cases {
            let got = parse(&text, "c.toml")
                .map(|_| ())
                .expect_err(&text)
                .to_string();
            assert!(
                got.starts_with(&want),
                "config:\n{text}\ngot:  {got}\nwant: {want}"
            );
            if !want.ends_with(':') {
                assert_eq!(got, want, "config:\n{text}");
            }
        }
    }

    #[test]
    fn allow_addresses_never_reach_the_forbidden_ranges() {
        // (range, allowed)
        let cases = [
            ("192.168.0.0/16", true),
            ("10.0.0.0/8", true),
            ("172.16.0.0/12", true),
            ("198.51.100.0/24", true),
            ("100.63.255.255", true),
            ("100.128.0.0/9", true),
            ("169.253.255.255", true),
            ("1.0.0.0/8", true),
            ("fd00::/8", true),
            ("2001:db8::1", true),
            ("::2", false),
            ("fc00::1", true),
            ("0.0.0.0/0", false),
            ("0.0.0.0", false),
            ("0.1.2.3", false),
            ("127.0.0.1", false),
            ("126.0.0.0/7", false),
            ("169.254.169.254", false),
            ("169.0.0.0/8", false),
            ("100.64.0.0/10", false),
            ("100.100.100.100", false),
            ("100.0.0.0/8", false),
            ("224.0.0.1", false),
            ("239.255.255.255", false),
            ("192.0.0.0/2", false),
            ("::/0", false),
            ("::1", false),
            ("::", false),
            ("fe80::1", false),
            ("febf::/16", false),
            ("ff02::1", false),
            ("::ffff:127.0.0.1", false),
            ("::ffff:0:0/96", false),
            ("::ffff:169.254.0.0/112", false),
            ("64:ff9b::7f00:1", false),
            ("::7f00:1", false),
            ("::ffff:192.168.1.1", true),
        ];
        for (s, allowed) in cases {
            assert_eq!(proto::addr::parse_allow_address(s).is_ok(), allowed, "{s}");
        }
    }

    #[test]
    fn memory_sizes() {
        let cases = [
            ("512m", Some(512 << 20)),
            ("1g", Some(1 << 30)),
            ("1G", Some(1 << 30)),
            ("6291456", Some(6 << 20)),
            ("64k", Some(64 << 10)),
            ("m", None),
            ("-1m", None),
            ("1.5g", None),
            ("1t", None),
            ("", None),
            ("99999999999999999999g", None),
        ];
        for (s, want) in cases {
            assert_eq!(memory_bytes(s), want, "{s}");
        }
    }

    #[test]
    fn load_names_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("brokerd.toml");
        std::fs::write(&path, "[runner]\nimage = \"x:1\"\n").expect("write");
        let e = load(&path).expect_err("tag").to_string();
        assert!(
            e.starts_with(&format!("{}:2:9: runner.image:", path.display())),
            "{e}"
        );
        let e = load(&dir.path().join("none.toml"))
            .expect_err("missing")
            .to_string();
        assert!(e.contains("none.toml: cannot read the config:"), "{e}");
    }
}
