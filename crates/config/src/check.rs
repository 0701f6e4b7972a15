//! The checks of the values serde read: every error names the line and column, the key, and
//! what is wrong.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use proto::tools::ToolName;

use super::defaults::*;
use super::places::{overlaps_state, real_path, StatePlace};
use super::raw::{RawBroker, RawBwrap, RawConfig, RawGrant, RawRunner, S};
use super::*;
use boxmaker_policy::args::check_grant_path;
/// `[runner]`'s time limits of the tools, and of the egress proxy's start, in milliseconds.
struct ToolTimes {
    read_file_ms: u64,
    write_file_ms: u64,
    shell_ms: u64,
    http_fetch_ms: u64,
    egress_start_ms: u64,
}

/// A grant's mode, spelt as in the config.
fn parse_mode(s: &str) -> Option<Mode> {
    [Mode::Safe, Mode::Ask, Mode::Auto]
        .into_iter()
        .find(|m| m.as_str() == s)
}

pub(super) struct Checker<'a> {
    pub(super) text: &'a str,
    pub(super) origin: &'a str,
}

impl Checker<'_> {
    pub(super) fn err<T>(
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
    pub(super) fn value<T: Clone>(
        &self,
        v: &Option<S<T>>,
        default: T,
    ) -> (T, Option<std::ops::Range<usize>>) {
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
    pub(super) fn grant_overlaps(
        &self,
        raw: &RawConfig,
        state: &[StatePlace],
    ) -> Result<(), ConfigError> {
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
    pub(super) fn grant_owners(
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

    pub(super) fn config(&self, raw: &RawConfig) -> Result<Config, ConfigError> {
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
        let toolsets = self.toolsets(&raw.toolsets, runner.as_ref().map(|r| r.backend))?;
        let mut grants = BTreeMap::new();
        for (name, g) in &raw.grants {
            if !proto::ident::valid_ident(name.get_ref()) {
                return self.err(
                    Some(name.span()),
                    "grants",
                    Problem::GrantName(name.get_ref().clone()),
                );
            }
            let mut grant = self.grant(name.get_ref(), g)?;
            grant.toolset = self.grant_toolset(name.get_ref(), g, &toolsets)?;
            grant.limits = self.grant_limits(name.get_ref(), g, runner.as_ref())?;
            grants.insert(name.get_ref().clone(), grant);
            // A shell call with shell_hosts starts a proxy too: its start and its removal
            // count against loopd's wait as http_fetch's do (docs/design.md#runner).
            if let (Some(r), Some(first)) = (&runner, g.shell_hosts.first()) {
                let sum = r.call_budget(ToolName::Shell, true).as_millis() as u64;
                let timeout = broker.timeout_ms;
                if sum >= timeout {
                    let limit = r.shell_ms;
                    return self.err(
                        Some(first.span()),
                        &format!("grants.{}.shell_hosts", name.get_ref()),
                        Problem::StopNotUnderTimeout {
                            limit,
                            sum,
                            timeout,
                        },
                    );
                }
            }
        }
        Ok(Config {
            broker,
            runner,
            bwrap,
            grants,
            toolsets,
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

    /// `[runner]`: the backend and its image, podman, the egress network, the memory, the
    /// home, the tools' time limits under loopd's timeout, the counts, then each call's stop
    /// under that timeout too.
    fn runner(&self, r: &S<RawRunner>, b: &RawBroker) -> Result<RunnerConfig, ConfigError> {
        let table = r.span();
        let r = r.get_ref();
        let backend = r.backend.unwrap_or(Backend::Podman);
        let image = self.image(r, backend, table)?;

        let (podman, span) = self.value(&r.podman, DEFAULT_PODMAN.to_owned());
        if podman.is_empty() {
            return self.err(span, "runner.podman", Problem::BadWord);
        }
        let egress_network = match &r.egress_network {
            None => DEFAULT_EGRESS_NETWORK,
            Some(word) => match EgressNetwork::parse(word.get_ref()) {
                Some(network) => network,
                None => {
                    let problem = Problem::EgressNetwork(word.get_ref().clone());
                    return self.err(Some(word.span()), "runner.egress_network", problem);
                }
            },
        };
        let (memory, span) = self.value(&r.memory, DEFAULT_MEMORY.to_owned());
        if !matches!(memory_bytes(&memory), Some(b) if b >= MIN_MEMORY) {
            return self.err(span, "runner.memory", Problem::Memory(memory));
        }
        let (home, span) = self.value(&r.home, DEFAULT_HOME.to_owned());
        let home = self.absolute(&home, span.clone(), "runner.home")?;
        // The egress directory under home is mounted with --volume
        // (docs/design.md#http_fetch-and-its-egress-proxy).
        check_grant_path(&home)
            .or_else(|e| self.err(span, "runner.home", Problem::Unmountable(e)))?;

        // Every tool limit stays under loopd's broker timeout (docs/design.md#runner).
        let (timeout, timeout_span) = self.value(&b.timeout_ms, DEFAULT_TIMEOUT_MS);
        let times = self.tool_times(r, timeout, &timeout_span)?;

        let runner = RunnerConfig {
            backend,
            podman: PathBuf::from(podman),
            image,
            egress_network,
            output_cap: self.positive(&r.output_cap, DEFAULT_OUTPUT_CAP, "runner.output_cap")?,
            memory,
            pids: self.positive(&r.pids, DEFAULT_PIDS, "runner.pids")?,
            read_file_ms: times.read_file_ms,
            write_file_ms: times.write_file_ms,
            shell_ms: times.shell_ms,
            http_fetch_ms: times.http_fetch_ms,
            enforce_limits: r.enforce_limits.unwrap_or(true),
            egress_start_ms: times.egress_start_ms,
            home,
            egress_bounds: Bounds {
                connections: self.positive(
                    &r.egress_connections,
                    DEFAULT_EGRESS_CONNECTIONS,
                    "runner.egress_connections",
                )?,
                bytes: self.positive(
                    &r.egress_bytes,
                    DEFAULT_EGRESS_BYTES,
                    "runner.egress_bytes",
                )?,
            },
            protect: self.protect_bounds(r)?,
        };
        self.stops_under_timeout(&runner, r, timeout, timeout_span)?;
        Ok(runner)
    }

    /// `runner.image`: pinned by content; Podman's needs one, bwrap has no use for it.
    fn image(
        &self,
        r: &RawRunner,
        backend: Backend,
        table: std::ops::Range<usize>,
    ) -> Result<String, ConfigError> {
        match (&r.image, backend) {
            (Some(img), _) => {
                check_image(img.get_ref())
                    .or_else(|p| self.err(Some(img.span()), "runner.image", p))?;
                Ok(img.get_ref().clone())
            }
            (None, Backend::Podman) => self.err(Some(table), "runner.image", Problem::ImageMissing),
            (None, Backend::Bwrap) => Ok(String::new()),
        }
    }

    /// The tools' time limits and the proxy's start, each under loopd's `timeout` (with its
    /// span where the file gave it), and http_fetch's with its proxy's start as well.
    fn tool_times(
        &self,
        r: &RawRunner,
        timeout: u64,
        timeout_span: &Option<std::ops::Range<usize>>,
    ) -> Result<ToolTimes, ConfigError> {
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
        let times = ToolTimes {
            read_file_ms: limit(&r.read_file_ms, DEFAULT_READ_FILE_MS, "runner.read_file_ms")?,
            write_file_ms: limit(
                &r.write_file_ms,
                DEFAULT_WRITE_FILE_MS,
                "runner.write_file_ms",
            )?,
            shell_ms: limit(&r.shell_ms, DEFAULT_SHELL_MS, "runner.shell_ms")?,
            http_fetch_ms: limit(
                &r.http_fetch_ms,
                DEFAULT_HTTP_FETCH_MS,
                "runner.http_fetch_ms",
            )?,
            egress_start_ms: limit(
                &r.egress_start_ms,
                DEFAULT_EGRESS_START_MS,
                "runner.egress_start_ms",
            )?,
        };
        let sum = times.http_fetch_ms.saturating_add(times.egress_start_ms);
        if sum >= timeout {
            let span = r
                .http_fetch_ms
                .as_ref()
                .map(|s| s.span())
                .or(timeout_span.clone());
            return self.err(
                span,
                "runner.http_fetch_ms",
                Problem::FetchNotUnderTimeout { sum, timeout },
            );
        }
        Ok(times)
    }

    /// The bounds of the walk for protected targets.
    fn protect_bounds(&self, r: &RawRunner) -> Result<ProtectBounds, ConfigError> {
        let d = ProtectBounds::default();
        Ok(ProtectBounds {
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
        })
    }

    /// A call that runs out its limit is then stopped and removed: that too must end
    /// before loopd stops waiting.
    fn stops_under_timeout(
        &self,
        runner: &RunnerConfig,
        r: &RawRunner,
        timeout: u64,
        timeout_span: Option<std::ops::Range<usize>>,
    ) -> Result<(), ConfigError> {
        for tool in ToolName::ALL {
            let sum = runner
                .call_budget(tool, tool == ToolName::HttpFetch)
                .as_millis() as u64;
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
        Ok(())
    }

    fn bwrap(&self, b: &RawBwrap) -> Result<BwrapConfig, ConfigError> {
        let (root, span) = self.value(&b.tools_root, DEFAULT_TOOLS_ROOT.to_owned());
        Ok(BwrapConfig {
            tools_root: self.absolute(&root, span, "bwrap.tools_root")?,
            cgroup: b.cgroup.unwrap_or(CgroupMode::Delegated),
        })
    }

    /// `[grants.NAME]`: its mode, tools, paths, hosts, addresses and cache (its toolset and
    /// limits are checked against the other sections, by `config`).
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

        let tools = self.grant_tools(g, &key("tools"))?;
        let paths = self.grant_paths(g, &key("paths"))?;
        let hosts = self.host_patterns(&g.hosts, &key("hosts"))?;
        let shell_hosts = self.host_patterns(&g.shell_hosts, &key("shell_hosts"))?;

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
            shell_hosts,
            allow_addresses,
            protect: g.protect.unwrap_or(Protect::Mount),
            writes: g.writes.unwrap_or(Writes::Direct),
            approvals: g.approvals.unwrap_or(Approvals::Client),
            toolset: None,
            limits: GrantLimits::default(),
            cache: self.cache(&g.cache, &g.max_cache_bytes, &key)?,
        })
        .and_then(|grant| self.cache_clear_of_paths(grant, &key("cache")))
    }

    /// A grant's `tools`: at least one, each known and named once.
    fn grant_tools(&self, g: &RawGrant, key: &str) -> Result<Vec<ToolName>, ConfigError> {
        if g.tools.get_ref().is_empty() {
            return self.err(Some(g.tools.span()), key, Problem::NoTools);
        }
        let mut tools = Vec::new();
        for t in g.tools.get_ref() {
            let Some(tool) = ToolName::parse(t.get_ref()) else {
                return self.err(
                    Some(t.span()),
                    key,
                    Problem::UnknownTool(t.get_ref().clone()),
                );
            };
            if tools.contains(&tool) {
                return self.err(Some(t.span()), key, Problem::Repeated(t.get_ref().clone()));
            }
            tools.push(tool);
        }
        Ok(tools)
    }

    /// A grant's `paths`: at most [`MAX_GRANT_PATHS`], each an absolute directory that a
    /// sandbox can mount.
    fn grant_paths(&self, g: &RawGrant, key: &str) -> Result<Vec<GrantPath>, ConfigError> {
        if g.paths.len() > MAX_GRANT_PATHS {
            let span = g.paths.first().map(|p| p.path.span());
            return self.err(span, key, Problem::TooManyPaths(g.paths.len()));
        }
        let mut paths = Vec::new();
        for p in &g.paths {
            let span = Some(p.path.span());
            let path = self.absolute(p.path.get_ref(), span.clone(), key)?;
            check_grant_path(&path)
                .or_else(|e| self.err(span.clone(), key, Problem::Unmountable(e)))?;
            match std::fs::metadata(&path) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => {
                    return self.err(span, key, Problem::NotDirectory(p.path.get_ref().clone()))
                }
                Err(_) => return self.err(span, key, Problem::Missing(p.path.get_ref().clone())),
            }
            paths.push(GrantPath {
                path,
                write: p.write,
            });
        }
        Ok(paths)
    }

    /// The cache is mounted at /tmp/.cache: a grant directory there or above it would hold
    /// its mount point, or be hidden by it on one backend and not the other.
    fn cache_clear_of_paths(&self, grant: Grant, key: &str) -> Result<Grant, ConfigError> {
        let at = Path::new(proto::tools::TOOL_CACHE);
        match grant
            .paths
            .iter()
            .find(|p| grant.cache.is_some() && (at.starts_with(&p.path) || p.path.starts_with(at)))
        {
            Some(p) => self.err(
                None,
                key,
                Problem::CacheOverGrant(p.path.display().to_string()),
            ),
            None => Ok(grant),
        }
    }

    /// A grant's `cache` and `max_cache_bytes`: the bound when the cache is on, which the
    /// bound alone does not turn on.
    fn cache(
        &self,
        cache: &Option<S<bool>>,
        max: &Option<S<u64>>,
        key: &dyn Fn(&str) -> String,
    ) -> Result<Option<u64>, ConfigError> {
        let on = cache.as_ref().is_some_and(|c| *c.get_ref());
        match max {
            Some(m) if !on => self.err(
                Some(m.span()),
                &key("max_cache_bytes"),
                Problem::CacheBoundWithoutCache,
            ),
            Some(m) if *m.get_ref() < super::MIN_MAX_CACHE_BYTES => self.err(
                Some(m.span()),
                &key("max_cache_bytes"),
                Problem::CacheBound(*m.get_ref()),
            ),
            Some(m) => Ok(Some(*m.get_ref())),
            None => Ok(on.then_some(super::DEFAULT_MAX_CACHE_BYTES)),
        }
    }

    /// A list of host patterns (`hosts`, `shell_hosts`), each valid per
    /// `proto::hosts::valid_host_pattern`, in the order written.
    fn host_patterns(&self, list: &[S<String>], key: &str) -> Result<Vec<String>, ConfigError> {
        let mut out = Vec::new();
        for h in list {
            if !proto::hosts::valid_host_pattern(h.get_ref()) {
                return self.err(
                    Some(h.span()),
                    key,
                    Problem::HostPattern(h.get_ref().clone()),
                );
            }
            out.push(h.get_ref().clone());
        }
        Ok(out)
    }

    /// An absolute path written plainly (no `.` or `..`), trailing slash dropped.
    pub(super) fn absolute(
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
pub(super) fn check_image(image: &str) -> Result<(), Problem> {
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
pub(super) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

#[cfg(test)]
mod tests;
