//! What is wrong with a config, in the sentences `check-config` and brokerd's start print.

use std::fmt;

use boxmaker_policy::args::UnmountablePath;

use super::owners;
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
    #[error("{0:?} is not an egress network: use pasta or slirp4netns")]
    EgressNetwork(String),
    #[error("{0:?} is not a grant name: 1 to 64 of A-Z a-z 0-9 _ . -, not . or ..")]
    GrantName(String),
    #[error("is accepted only with runner.backend = \"bwrap\"")]
    BwrapUnused,
    #[error("{0} directories are more than the {max} a sandbox mounts", max = super::MAX_GRANT_PATHS)]
    TooManyPaths(usize),
    #[error("{0}")]
    UnknownToolset(Box<UnknownToolset>),
    #[error("{0}")]
    AboveCeiling(Box<super::AboveCeiling>),
    #[error("\"base\" is the built-in toolset ([runner] image and [bwrap] tools_root) and cannot be defined again")]
    ToolsetBase,
    #[error("{0:?} is not a toolset name: 1 to 64 of A-Z a-z 0-9 _ . -, not . or ..")]
    ToolsetName(String),
    #[error("is required with backend = \"{1}\": the toolset's {0} pinned for that backend")]
    ToolsetNeeds(&'static str, super::Backend),
    #[error("needs the toolset's tree: the store paths are bound beside it")]
    ToolsetStorePathsWithoutTree,
    #[error("needs cache = true: it bounds the grant's cache")]
    CacheBoundWithoutCache,
    #[error("{0} is less than 1 MiB (1048576), the least a cache is bounded to")]
    CacheBound(u64),
    #[error("the grant directory {0} holds /tmp/.cache or lies in it, where the cache is mounted")]
    CacheOverGrant(String),
    #[error("{0}")]
    Nested(Box<Nested>),
    #[error("{0}")]
    OverlapsState(Box<OverlapsState>),
    #[error("{0}")]
    Replaceable(Box<owners::Replaceable>),
}

/// A grant's `toolset` that names none of the config's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name:?} is not a toolset: the toolsets are {known}")]
pub struct UnknownToolset {
    pub name: String,
    /// `base` and every `[toolsets.NAME]`, comma-separated.
    pub known: String,
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
