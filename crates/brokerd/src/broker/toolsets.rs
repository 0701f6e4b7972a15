//! Each toolset's check (docs/design.md#toolsets): a shell sandbox on the toolset that must
//! find toolkit of brokerd's version and busybox's `sh`. It runs at start for every
//! `[toolsets.NAME]`, is kept as the start-up preflight is (`probe`), and a call of one of the
//! toolset's grants tries it again once its retry is due. A toolset that fails makes only its
//! own grants' calls `unavailable`; nothing runs them on another toolset.
//!
//! The check runs `toolkit version` and asks `sh --help` whose shell it is. A bwrap toolset is
//! looked at with each call (its tree, its `/bin/toolkit` and `/bin/sh` through their links, its
//! `store_paths` list, each by device, inode, size and change time); a change makes the call
//! check it again first, whatever the kept outcome. A Podman toolset is an image pinned by ID,
//! so no such print is taken.

use std::collections::BTreeMap;

use proto::broker::ToolsetStatus;

use super::*;

/// The kept outcome of each toolset's check, by name.
pub(super) fn kept_checks(config: &Config, first: Duration) -> BTreeMap<String, Kept> {
    config
        .toolsets
        .keys()
        .map(|name| (name.clone(), Kept::new(first)))
        .collect()
}

impl Broker {
    /// The check of toolset `name`, run unless its kept outcome stands; `None` for a name
    /// that is not a `[toolsets.NAME]`.
    pub async fn toolset_check(&self, name: &str) -> Option<Preflight> {
        let toolset = self.config.toolsets.get(name)?.clone();
        // A tree changed since its last check (another toolkit, a tree swapped in its place)
        // is checked again now, whatever the kept outcome.
        let print = match self.backend {
            Some(Backend::Bwrap) => Print::of(&toolset),
            _ => Print(Vec::new()),
        };
        let standing = |b: &Broker| {
            if lock(&b.toolset_prints).get(name) != Some(&print) {
                return None;
            }
            lock(&b.toolset_checks)
                .get(name)
                .and_then(|k| k.standing(Instant::now()))
        };
        if let Some(p) = standing(self) {
            return Some(p);
        }
        let _one = self.toolset_probing.lock().await;
        if let Some(p) = standing(self) {
            return Some(p);
        }
        let spec = preflight::toolset_spec(self.config.runner.as_ref(), &toolset);
        let runner = self.runner.clone();
        let outcome = tokio::task::spawn_blocking(move || runner.run(&spec)).await;
        let mut p = preflight::judge_toolset(outcome.map_err(|e| e.to_string()));
        preflight::settle(self.runner.as_ref(), &mut p);
        lock(&self.toolset_prints).insert(name.to_owned(), print);
        let now = Instant::now();
        let mut checks = lock(&self.toolset_checks);
        let kept = checks
            .entry(name.to_owned())
            .or_insert_with(|| Kept::new(RETRY_FIRST));
        kept.record(p.clone(), now);
        log_check(name, &p, kept.next_try_in(now));
        Some(p)
    }

    /// Every toolset's check, in name order (brokerd's start).
    pub async fn toolset_checks(&self) -> Vec<(String, Preflight)> {
        let mut all = Vec::new();
        for name in self.config.toolsets.keys() {
            if let Some(p) = self.toolset_check(name).await {
                all.push((name.clone(), p));
            }
        }
        all
    }

    /// Whether a call of a grant on toolset `name` (`None`: the base toolset) may run as far
    /// as its toolset goes.
    pub(super) async fn toolset_ready(&self, name: Option<&str>) -> bool {
        match name {
            None => true,
            Some(name) => self.toolset_check(name).await.is_some_and(|p| p.ok),
        }
    }

    /// What `status` shows of the toolsets.
    pub(super) fn toolset_status(&self, now: Instant) -> Vec<ToolsetStatus> {
        let checks = lock(&self.toolset_checks);
        self.config
            .toolsets
            .keys()
            .map(|name| ToolsetStatus {
                name: name.clone(),
                grants: self
                    .config
                    .grants
                    .iter()
                    .filter(|(_, g)| g.toolset.as_deref() == Some(name))
                    .map(|(g, _)| g.clone())
                    .collect(),
                check: checks
                    .get(name)
                    .map(|k| k.status(now, "not run yet"))
                    .unwrap_or_default(),
            })
            .collect()
    }
}

/// What a bwrap toolset's tree is made of where a change matters to its check: the tree
/// itself, its `/bin/toolkit` and `/bin/sh` (through their links, as a Nix tree's lead into
/// the store) and its `store_paths` list, each by device, inode, size and change time; `None`
/// for what cannot be read. A Podman toolset is pinned by its image ID and has no print.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Print(Vec<Option<FileId>>);

/// A file's device, inode, size and change time (seconds, nanoseconds).
type FileId = (u64, u64, u64, i64, i64);

impl Print {
    pub(super) fn of(t: &crate::config::Toolset) -> Print {
        use std::os::unix::fs::MetadataExt;
        let Some(tree) = &t.tree else {
            return Print(Vec::new());
        };
        let mut paths = vec![tree.clone(), tree.join("bin/toolkit"), tree.join("bin/sh")];
        paths.extend(t.store_paths.clone());
        Print(
            paths
                .iter()
                .map(|p| {
                    std::fs::metadata(p)
                        .ok()
                        .map(|m| (m.dev(), m.ino(), m.size(), m.ctime(), m.ctime_nsec()))
                })
                .collect(),
        )
    }
}

/// A toolset check's outcome in the journal, with when it is tried again.
fn log_check(name: &str, p: &Preflight, next_try: Option<Duration>) {
    let pointer = runbook::TOOLSET_UNAVAILABLE;
    match (p.ok, next_try) {
        (true, _) => tracing::info!(toolset = name, detail = p.detail, "toolset check passed"),
        (false, Some(wait)) => tracing::error!(
            toolset = name,
            detail = p.detail,
            next_try_in_s = wait.as_secs(),
            "toolset check failed; tried again by a call in {}s; until then the calls of its grants answer unavailable; see {pointer}",
            wait.as_secs(),
        ),
        (false, None) => tracing::error!(
            toolset = name,
            detail = p.detail,
            "toolset check failed for good: the calls of its grants answer unavailable until brokerd restarts; see {pointer}",
        ),
    }
}
