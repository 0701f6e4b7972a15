//! Containers brokerd stops, and those an earlier brokerd left: each removed and then looked
//! for until podman says it is gone, in its own database and in its storage
//! (docs/design.md#sweep). `podman rm -f` can end while the container is still there
//! ("Removing" after a removal that was cut short), and a `podman run` killed while it made its
//! container can leave one in storage only, which has no label and which `podman ps` shows
//! only with `--external`.
//!
//! A stop, and the sweep for each container, run `podman kill`, then `podman rm -f` until
//! `podman container exists --external <name>` says it is gone, with a pause of 20 ms that
//! doubles between tries. A container left in storage only has no labels, and Podman 4.3's
//! label filter does not keep it out of an `--external` listing, so the sweep tells brokerd's by
//! state (`Storage`) and name.

use std::ffi::OsString;
use std::thread;
use std::time::{Duration, Instant};

use super::orphans;
use super::process::Helper;
use super::{PodmanRuntime, Trouble, WORDS};
use crate::runner::{RunSpec, SweepError, Unavailable};
// What podman prints can quote the model's text: redacted before it is logged.
use boxmaker_policy::redact::redact;

/// The first pause between looks at a container that is still there after its `rm -f`; each
/// later pause is twice the one before, all within the removal's bound.
const GONE_STEP: Duration = Duration::from_millis(20);
/// How much of a `podman ps` listing the sweep reads.
const SWEEP_LIST_KEEP: usize = 1024 * 1024;

/// How a removal ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Removal {
    /// Podman says no such container exists, in its database or in storage.
    Gone,
    /// Gone, although a step failed on the way (what it said).
    GoneAfter(String),
    /// Not confirmed gone within the bound: why.
    NotGone(String),
}

impl PodmanRuntime {
    /// Stops and removes container `name`: `podman kill` first when it may be running, then
    /// `podman rm -f` until `podman container exists --external` says it is gone, all within
    /// the helper's bound; then, if its podman client was killed while it may have been making
    /// the container (`client_killed`), the container's monitor (`orphans`). Poisons the
    /// runtime (docs/design.md#preflight-and-poisoning) when it cannot be confirmed gone.
    pub(super) fn remove(&self, spec: &RunSpec, name: &str, with_kill: bool, client_killed: bool) {
        let removal = match self.remove_until_gone(name, with_kill) {
            Removal::NotGone(why) => Removal::NotGone(why),
            gone if !client_killed => gone,
            gone => match orphans::stop_monitor_of(name) {
                Ok(()) => gone,
                Err(why) => Removal::NotGone(why),
            },
        };
        match removal {
            Removal::Gone => {}
            Removal::GoneAfter(failed) => tracing::warn!(
                session = %spec.session,
                call = %spec.call,
                container = name,
                "{failed}; the container is gone all the same"
            ),
            Removal::NotGone(why) => {
                self.poison();
                tracing::error!(
                    session = %spec.session,
                    call = %spec.call,
                    container = name,
                    "{why}; {}; see {}",
                    Trouble::Poisoned.say(&WORDS),
                    Unavailable::RunnerUnavailable.runbook()
                );
            }
        }
    }

    /// See [`PodmanRuntime::remove`]; `name` may also be a container ID (the sweep).
    pub(super) fn remove_until_gone(&self, name: &str, with_kill: bool) -> Removal {
        // A running container's PID 1 (toolkit) ignores SIGTERM, so a bare `rm -f` would wait
        // out podman's 10 s stop timeout. A container that is not running makes `kill` fail:
        // `rm -f` decides. A `kill` that hangs is poison whatever follows
        // (docs/design.md#preflight-and-poisoning), and the removal is still tried.
        let kill: Vec<OsString> = vec!["kill".into(), name.into()];
        let hung = match with_kill {
            true => matches!(
                self.helper(&kill, Instant::now() + self.helper_timeout),
                Helper::TimedOut
            ),
            false => false,
        };
        let removal = self.rm_until_gone(name);
        if hung {
            let hung = format!(
                "podman kill did not finish within {:?}",
                self.helper_timeout
            );
            return match removal {
                Removal::NotGone(why) => Removal::NotGone(format!("{hung}; {why}")),
                Removal::Gone | Removal::GoneAfter(_) => Removal::NotGone(hung),
            };
        }
        removal
    }

    /// `podman rm -f` until `container exists --external` says it is gone, within the
    /// helper's bound, with a pause that doubles between tries.
    fn rm_until_gone(&self, name: &str) -> Removal {
        let deadline = Instant::now() + self.helper_timeout;
        let rm: Vec<OsString> = vec!["rm".into(), "-f".into(), name.into()];
        let mut failed: Option<String> = None;
        let mut pause = GONE_STEP;
        loop {
            match self.helper(&rm, deadline) {
                Helper::Exited(status, _, _) if status.success() => {}
                Helper::Exited(status, stderr, _) => {
                    failed = Some(format!(
                        "podman rm -f exited with {status}: {}",
                        redact(stderr.trim_end())
                    ))
                }
                Helper::NotStarted(e) => {
                    failed = Some(format!("podman could not be started to remove it: {e}"))
                }
                Helper::TimedOut => {
                    return Removal::NotGone(format!(
                        "podman rm -f did not finish within {:?}",
                        self.helper_timeout
                    ))
                }
            }
            let still = match self.exists(name, deadline) {
                Exists::Gone => {
                    return match failed {
                        Some(f) => Removal::GoneAfter(f),
                        None => Removal::Gone,
                    }
                }
                Exists::There => "podman container exists --external still finds it".to_string(),
                Exists::Unknown(why) => why,
            };
            let why = match &failed {
                Some(f) => format!("{f}, and {still}"),
                None => format!("podman rm -f succeeded, but {still}"),
            };
            if Instant::now() + pause >= deadline {
                return Removal::NotGone(format!(
                    "{why} after {:?}: the container may still exist",
                    self.helper_timeout
                ));
            }
            thread::sleep(pause);
            pause *= 2;
        }
    }

    /// Whether podman says no container `name` exists, storage-only ones included
    /// (`container exists --external` exits 1); an error or no answer is not a confirmation.
    fn exists(&self, name: &str, deadline: Instant) -> Exists {
        let args: Vec<OsString> = vec![
            "container".into(),
            "exists".into(),
            "--external".into(),
            name.into(),
        ];
        match self.helper(&args, deadline) {
            Helper::Exited(status, _, _) if status.code() == Some(1) => Exists::Gone,
            Helper::Exited(status, _, _) if status.success() => Exists::There,
            Helper::Exited(status, stderr, _) => Exists::Unknown(format!(
                "podman container exists exited with {status}: {}",
                redact(stderr.trim_end())
            )),
            Helper::TimedOut => Exists::Unknown("podman container exists did not answer".into()),
            Helper::NotStarted(e) => Exists::Unknown(format!("podman could not be started: {e}")),
        }
    }

    /// What an earlier brokerd of this user left: the IDs of every container labelled
    /// `boxmaker` (tool or egress), and of every container that exists in storage only and is
    /// named as brokerd names containers (such a container has no labels). Rootless Podman
    /// lists only the containers of the user that runs it.
    pub fn leftovers(&self) -> Result<Vec<String>, SweepError> {
        let labelled = self.list(&[
            "ps",
            "-a",
            "--no-trunc",
            "--filter",
            super::LABEL_FILTER,
            "--format",
            "{{.ID}}",
        ])?;
        // The label filter does not apply to storage-only containers (Podman 4.3 lists them
        // all with it; later versions may list none), so they are asked for by name.
        let external = self.list(&[
            "ps",
            "-a",
            "--external",
            "--no-trunc",
            "--format",
            "{{.ID}} {{.State}} {{.Names}}",
        ])?;
        let mut ids: Vec<String> = labelled
            .lines()
            .map(str::trim)
            .filter(|id| is_container_id(id))
            .map(str::to_string)
            .collect();
        for line in external.lines() {
            let mut words = line.split_whitespace();
            let (Some(id), Some(state), Some(name), None) =
                (words.next(), words.next(), words.next(), words.next())
            else {
                continue;
            };
            if is_container_id(id)
                && state.eq_ignore_ascii_case("storage")
                && is_boxmaker_name(name)
                && !ids.iter().any(|i| i == id)
            {
                ids.push(id.to_string());
            }
        }
        Ok(ids)
    }

    /// A podman listing's standard output, bounded in time and size.
    fn list(&self, args: &[&str]) -> Result<String, SweepError> {
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        let started = self
            .program
            .helper(&args, SWEEP_LIST_KEEP)
            .map_err(|e| SweepError(format!("podman could not be started: {e}")))?;
        match started.finish(Instant::now() + self.helper_timeout) {
            Helper::Exited(status, _, out) if status.success() => Ok(out),
            Helper::Exited(status, stderr, _) => Err(SweepError(format!(
                "podman ps exited with {status}: {}",
                stderr.trim_end()
            ))),
            Helper::TimedOut => Err(SweepError("podman ps did not answer in time".into())),
            Helper::NotStarted(e) => Err(SweepError(e)),
        }
    }

    /// Removes each leftover container until it is gone; how many went, and each that did not.
    pub(super) fn sweep_containers(&self) -> Result<(usize, Vec<String>), SweepError> {
        let mut removed = 0;
        let mut failed = Vec::new();
        for id in self.leftovers()? {
            match self.remove_until_gone(&id, true) {
                Removal::Gone | Removal::GoneAfter(_) => removed += 1,
                Removal::NotGone(why) => failed.push(format!("{id}: {why}")),
            }
        }
        Ok((removed, failed))
    }
}

/// What `podman container exists --external` said.
enum Exists {
    Gone,
    There,
    Unknown(String),
}

/// A Podman container ID: 64 lower-case hex digits (12 when shortened).
pub(super) fn is_container_id(s: &str) -> bool {
    matches!(s.len(), 12 | 64)
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Whether `name` is one brokerd gives containers: `boxmaker-<session>-<call>-<n>`, or that
/// and `-egress`, session and call being identifiers (which may hold `-` themselves).
pub(super) fn is_boxmaker_name(name: &str) -> bool {
    let name = name.strip_suffix("-egress").unwrap_or(name);
    let Some((rest, n)) = name.rsplit_once('-') else {
        return false;
    };
    let Some(ids) = rest.strip_prefix("boxmaker-") else {
        return false;
    };
    !n.is_empty()
        && n.bytes().all(|b| b.is_ascii_digit())
        && ids.match_indices('-').any(|(at, _)| {
            proto::ident::valid_ident(&ids[..at]) && proto::ident::valid_ident(&ids[at + 1..])
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_brokerd_s_own_names_are_taken_for_its_containers() {
        let long = format!("boxmaker-{}-{}-12", "s".repeat(64), "c".repeat(64));
        for (name, ours) in [
            ("boxmaker-s1-c1-1", true),
            ("boxmaker-s1-c1-1-egress", true),
            ("boxmaker-a-b-c-d-30", true),
            ("boxmaker-s.1-c_2-7", true),
            (long.as_str(), true),
            ("boxmaker-s1-c1", false),
            ("boxmaker-s1-1", false),
            ("boxmaker--c1-1", false),
            ("boxmaker-s1-c1-x", false),
            ("boxmaker-s1-c1-", false),
            ("boxmaker-s1-c1-1-egress-egress", false),
            ("buildah-working-container", false),
            ("my-boxmaker-s1-c1-1", false),
            ("boxmaker-s1-c1-1 ", false),
            ("boxmaker-..-c1-1", false),
        ] {
            assert_eq!(is_boxmaker_name(name), ours, "{name}");
        }
        let too_long = format!("boxmaker-{}-c-1", "s".repeat(65));
        assert!(!is_boxmaker_name(&too_long));
    }
}
