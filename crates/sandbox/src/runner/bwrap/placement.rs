//! Where a sandbox's processes are counted and limited: a child group of brokerd's delegated
//! cgroup, a transient systemd scope, or rlimits alone (docs/design.md#limits).

use super::*;

/// Where a sandbox's limits live, for its argument list and its start.
pub(super) enum Placement {
    /// rlimits only (`enforce_limits = false` on a host without a mechanism).
    Plain,
    /// A child group of the delegated subtree, bound at /sys/fs/cgroup.
    Group(ChildGroup),
    /// A transient scope; its group appears at `dir` once systemd made it.
    Scope { prefix: Vec<OsString>, dir: PathBuf },
}

impl Placement {
    pub(super) fn cgroup_view(&self) -> Option<&Path> {
        match self {
            Placement::Plain => None,
            Placement::Group(g) => Some(g.dir()),
            Placement::Scope { dir, .. } => Some(dir),
        }
    }
}

/// Removes a sandbox's child cgroup (a scope goes by itself once empty, `--collect`).
pub(super) fn drop_placement(p: Placement, poisoned: &AtomicBool) {
    if let Placement::Group(g) = p {
        let dir = g.dir().to_path_buf();
        if !g.remove() {
            poisoned.store(true, Ordering::SeqCst);
            tracing::error!(
                "the sandbox cgroup {} could not be confirmed empty and removed; {}; see {RUNBOOK}",
                dir.display(),
                Trouble::Poisoned.say(&WORDS)
            );
        }
    }
}

impl BwrapRuntime {
    /// Logs each optional cgroup knob the first time it is found unsettable, and keeps it
    /// for `weakened`.
    pub(super) fn note_unset(&self, unset: &[(&'static str, String)]) {
        let mut seen = lock(&self.weakened);
        for (knob, why) in unset {
            if seen.iter().any(|w| w.starts_with(&format!("{knob} "))) {
                continue;
            }
            let line = format!("{knob} cannot be set in sandbox cgroups: {why}");
            tracing::warn!("{line}; sandboxes run without it (weaker confinement); see {RUNBOOK}");
            seen.push(line);
        }
    }

    pub(super) fn mechanism(&self) -> &Result<Mechanism, CgroupUnavailable> {
        self.mechanism.get_or_init(|| {
            let m = Mechanism::probe(self.cgroup_mode);
            if let Err(e) = &m {
                if self.enforce_limits {
                    tracing::error!("cgroup limits are unavailable: {e}; calls answer unavailable; see {RUNBOOK}");
                } else {
                    tracing::warn!("cgroup limits are unavailable ({e}); enforce_limits = false, so sandboxes run with rlimits only");
                }
            }
            m
        })
    }

    /// The sandbox's cgroup, as the configured mechanism and `enforce_limits` say.
    pub(super) fn placement(
        &self,
        group_name: &str,
        limits: CgroupLimits,
    ) -> Result<Placement, String> {
        match self.mechanism() {
            Ok(Mechanism::Delegated { root }) => {
                match ChildGroup::create(root, group_name, &limits) {
                    // Weaker than configured, so it does not run (docs/design.md#limits).
                    Ok(g) if self.enforce_limits && !g.unset().is_empty() => {
                        let why = g
                            .unset()
                            .iter()
                            .map(|(knob, why)| format!("{knob} cannot be set: {why}"))
                            .collect::<Vec<_>>()
                            .join("; ");
                        let dir = g.dir().to_path_buf();
                        // Nothing ran in it: a group that will not go is litter, not a risk.
                        if !g.remove() {
                            tracing::warn!(
                                "{}: could not be removed; the next sweep removes it",
                                dir.display()
                            );
                        }
                        Err(format!(
                            "{why}; with enforce_limits = true no sandbox runs weaker than configured"
                        ))
                    }
                    Ok(g) => {
                        self.note_unset(g.unset());
                        Ok(Placement::Group(g))
                    }
                    Err(e) if self.enforce_limits => Err(format!(
                        "could not make the sandbox's cgroup under {}: {e}",
                        root.display()
                    )),
                    Err(e) => {
                        tracing::warn!("could not make the sandbox's cgroup under {}: {e}; running with rlimits only (enforce_limits = false)", root.display());
                        Ok(Placement::Plain)
                    }
                }
            }
            Ok(Mechanism::SystemdScope { systemd_run, uid }) => Ok(Placement::Scope {
                prefix: cgroup::scope_prefix(systemd_run, group_name, &limits),
                dir: cgroup::scope_dir(*uid, group_name),
            }),
            Err(e) if self.enforce_limits => Err(e.to_string()),
            Err(_) => Ok(Placement::Plain),
        }
    }
}
