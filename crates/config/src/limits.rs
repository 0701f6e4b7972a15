//! A grant's own limits (docs/design.md#grantsname): `memory`, `pids`, `shell_ms` and
//! `output_cap`, each at most `[runner]`'s value, which is the ceiling. A grant that sets none
//! runs with `[runner]`'s, as before; since each is under its ceiling, a grant's call budget
//! stays under `broker.timeout_ms` as `[runner]`'s does (`budget`).

use proto::tools::ToolName;

use super::check::{memory_bytes, Checker};
use super::defaults::{
    DEFAULT_MEMORY, DEFAULT_OUTPUT_CAP, DEFAULT_PIDS, DEFAULT_SHELL_MS, MIN_MEMORY,
};
use super::raw::{RawGrant, S};
use super::{ConfigError, Problem, RunnerConfig};

/// What a grant lowers of `[runner]`'s limits; `None`: `[runner]`'s.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GrantLimits {
    /// As `[runner] memory` spells it.
    pub memory: Option<String>,
    pub pids: Option<u32>,
    pub shell_ms: Option<u64>,
    pub output_cap: Option<usize>,
}

/// A grant's limit above `[runner]`'s, named by both keys.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{value} is more than {ceiling_key} ({ceiling}): a grant's limit is at most [runner]'s")]
pub struct AboveCeiling {
    pub value: String,
    pub ceiling_key: &'static str,
    pub ceiling: String,
}

impl RunnerConfig {
    /// `[runner]`'s limits as a grant with `limits` has them (docs/design.md#grantsname).
    pub fn for_grant(&self, limits: &GrantLimits) -> RunnerConfig {
        let mut r = self.clone();
        if let Some(m) = &limits.memory {
            r.memory = m.clone();
        }
        r.pids = limits.pids.unwrap_or(r.pids);
        r.shell_ms = limits.shell_ms.unwrap_or(r.shell_ms);
        r.output_cap = limits.output_cap.unwrap_or(r.output_cap);
        r
    }

    /// The time limit of one call of `tool` in a grant with `limits`.
    pub fn grant_time_limit(&self, limits: &GrantLimits, tool: ToolName) -> std::time::Duration {
        self.for_grant(limits).time_limit(tool)
    }
}

impl Checker<'_> {
    /// A grant's limits, each checked as `[runner]`'s is and against it (without a
    /// `[runner]`, against its defaults).
    pub(super) fn grant_limits(
        &self,
        grant: &str,
        g: &RawGrant,
        runner: Option<&RunnerConfig>,
    ) -> Result<GrantLimits, ConfigError> {
        let key = |k: &str| format!("grants.{grant}.{k}");
        let ceiling_memory = runner.map_or(DEFAULT_MEMORY, |r| r.memory.as_str());
        let memory = match &g.memory {
            None => None,
            Some(m) => {
                let (text, span) = (m.get_ref(), Some(m.span()));
                let bytes = match memory_bytes(text) {
                    Some(b) if b >= MIN_MEMORY => b,
                    _ => return self.err(span, &key("memory"), Problem::Memory(text.clone())),
                };
                let ceiling = memory_bytes(ceiling_memory).unwrap_or(0);
                if bytes > ceiling {
                    let problem = above(text, "runner.memory", ceiling_memory);
                    return self.err(span, &key("memory"), problem);
                }
                Some(text.clone())
            }
        };
        Ok(GrantLimits {
            memory,
            pids: self.under(
                &g.pids,
                runner.map_or(DEFAULT_PIDS, |r| r.pids),
                &key("pids"),
                "runner.pids",
            )?,
            shell_ms: self.under(
                &g.shell_ms,
                runner.map_or(DEFAULT_SHELL_MS, |r| r.shell_ms),
                &key("shell_ms"),
                "runner.shell_ms",
            )?,
            output_cap: self.under(
                &g.output_cap,
                runner.map_or(DEFAULT_OUTPUT_CAP, |r| r.output_cap),
                &key("output_cap"),
                "runner.output_cap",
            )?,
        })
    }

    /// A number greater than 0 and at most `ceiling`.
    fn under<T>(
        &self,
        v: &Option<S<T>>,
        ceiling: T,
        key: &str,
        ceiling_key: &'static str,
    ) -> Result<Option<T>, ConfigError>
    where
        T: Copy + Default + PartialOrd + std::fmt::Display,
    {
        let Some(v) = v else {
            return Ok(None);
        };
        let (n, span) = (*v.get_ref(), Some(v.span()));
        if n == T::default() {
            return self.err(span, key, Problem::Zero);
        }
        if n > ceiling {
            let problem = above(&n.to_string(), ceiling_key, &ceiling.to_string());
            return self.err(span, key, problem);
        }
        Ok(Some(n))
    }
}

fn above(value: &str, ceiling_key: &'static str, ceiling: &str) -> Problem {
    Problem::AboveCeiling(Box::new(AboveCeiling {
        value: value.to_owned(),
        ceiling_key,
        ceiling: ceiling.to_owned(),
    }))
}

#[cfg(test)]
mod tests {
    use super::super::tests::IMAGE;
    use super::super::{parse, Config};
    use super::*;

    /// A Podman config whose `[runner]` has `runner` and whose one grant has `grant`.
    fn config(runner: &str, grant: &str) -> Result<Config, String> {
        let dir = std::env::temp_dir().display().to_string();
        let text = format!(
            "[runner]\nimage = \"{IMAGE}\"\n{runner}\n[grants.g]\ntools = [\"shell\"]\npaths = [{{ path = {dir:?} }}]\n{grant}\n"
        );
        parse(&text, "c.toml").map_err(|e| e.to_string())
    }

    #[test]
    fn a_grant_without_limits_has_the_runner_s() {
        let cfg = config("", "").expect("config");
        assert_eq!(cfg.grants["g"].limits, GrantLimits::default());
        let rc = cfg.runner.as_ref().expect("runner");
        assert_eq!(rc.for_grant(&cfg.grants["g"].limits), *rc);
    }

    #[test]
    fn a_grant_lowers_its_limits() {
        let cfg = config(
            "memory = \"2g\"\npids = 512\nshell_ms = 90000\noutput_cap = 1000000",
            "memory = \"1g\"\npids = 256\nshell_ms = 60000\noutput_cap = 4096",
        )
        .expect("config");
        let limits = &cfg.grants["g"].limits;
        let rc = cfg.runner.as_ref().expect("runner").for_grant(limits);
        assert_eq!(
            (rc.memory.as_str(), rc.pids, rc.shell_ms, rc.output_cap),
            ("1g", 256, 60000, 4096)
        );
        assert_eq!(
            rc.grant_time_limit(limits, ToolName::Shell),
            std::time::Duration::from_millis(60000)
        );
        // Equal to the ceiling is allowed.
        assert!(config("pids = 64", "pids = 64").is_ok());
    }

    /// (runner's lines, grant's lines, the whole error)
    #[test]
    fn a_limit_above_the_runner_s_is_refused_naming_both() {
        let table: [(&str, &str, &str); 7] = [
            (
                "memory = \"512m\"",
                "memory = \"1g\"",
                "c.toml:7:10: grants.g.memory: 1g is more than runner.memory (512m): a grant's limit is at most [runner]'s",
            ),
            (
                "",
                "pids = 129",
                "c.toml:7:8: grants.g.pids: 129 is more than runner.pids (128): a grant's limit is at most [runner]'s",
            ),
            (
                "shell_ms = 50000",
                "shell_ms = 50001",
                "c.toml:7:12: grants.g.shell_ms: 50001 is more than runner.shell_ms (50000): a grant's limit is at most [runner]'s",
            ),
            (
                "",
                "output_cap = 262145",
                "c.toml:7:14: grants.g.output_cap: 262145 is more than runner.output_cap (262144): a grant's limit is at most [runner]'s",
            ),
            (
                "",
                "pids = 0",
                "c.toml:7:8: grants.g.pids: must be greater than 0",
            ),
            (
                "",
                "memory = \"5m\"",
                "c.toml:7:10: grants.g.memory: \"5m\" is not a memory size: digits and a unit b, k, m or g, like \"512m\", at least 6m",
            ),
            (
                "",
                "shell_ms = 0",
                "c.toml:7:12: grants.g.shell_ms: must be greater than 0",
            ),
        ];
        let mut wrong = Vec::new();
        for (runner, grant, want) in table {
            let got = config(runner, grant).err();
            if got.as_deref() != Some(want) {
                wrong.push(format!(
                    "{runner} / {grant}\n  got  {got:?}\n  want {want:?}"
                ));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }
}
