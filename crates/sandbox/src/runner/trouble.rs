//! Why a call could not run, said once for both backends: the troubles a backend meets, the
//! `unavailable` answer each one is, the runbook entry its log line points to, and which
//! failures to start a program mean the program itself is missing (docs/design.md#runners).

use std::fmt::Display;
use std::io;

use super::{RunError, RunSpec, Unavailable};

/// What a backend ran into; `T` is its own failure remembered until restart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Trouble<T> {
    /// The backend cannot run here at all (remembered until restart).
    Terminal(T),
    /// Its program could not be started.
    Start,
    /// Its program started and could not make the sandbox.
    Build,
    /// The tools root could not be read (bwrap's tree).
    ToolsRoot,
    /// The grant's toolset could not be had.
    Toolset,
    /// The sandbox's limits cannot take effect (bwrap's cgroup).
    Limits,
    /// The egress directory could not be made.
    EgressDir,
    /// The egress proxy did not start.
    ProxyFailed,
    /// The egress proxy's socket did not appear in time.
    ProxySocket,
    /// Network work is off until restart: a stopped sandbox was not confirmed gone.
    Poisoned,
    /// An earlier call's egress proxy was not confirmed gone in time.
    EarlierCleanUp,
    /// The session's staged layer could not be mounted.
    Staged,
}

/// A backend's words for its troubles, as its log lines say them.
pub(crate) struct Words {
    /// The program: `podman` or `bwrap`.
    pub program: &'static str,
    /// What [`Trouble::Build`] could not do, after "`<program>` could not".
    pub build: &'static str,
    /// [`Trouble::Toolset`], whole.
    pub toolset: &'static str,
    /// What a stopped sandbox is called, and what it was not confirmed, for
    /// [`Trouble::Poisoned`]: "a container ... could not be confirmed gone".
    pub stopped: (&'static str, &'static str),
    /// What an earlier proxy was not confirmed, for [`Trouble::EarlierCleanUp`].
    pub proxy_gone: &'static str,
    /// The runbook entry of a runner's or an egress trouble, where the backend has its own (a
    /// layer's and a toolset's always point to theirs).
    pub runbook: Option<&'static str>,
}

impl<T> Trouble<T> {
    /// The answer the model gets.
    pub(crate) fn why(&self) -> Unavailable {
        match self {
            Trouble::Staged => Unavailable::LayerUnavailable,
            Trouble::Toolset => Unavailable::ToolsetUnavailable,
            Trouble::EgressDir
            | Trouble::ProxyFailed
            | Trouble::ProxySocket
            | Trouble::Poisoned
            | Trouble::EarlierCleanUp => Unavailable::EgressUnavailable,
            Trouble::Terminal(_)
            | Trouble::Start
            | Trouble::Build
            | Trouble::ToolsRoot
            | Trouble::Limits => Unavailable::RunnerUnavailable,
        }
    }
}

impl<T: Display> Trouble<T> {
    /// What the operator's log line says went wrong.
    pub(crate) fn say(&self, w: &Words) -> String {
        let p = w.program;
        match self {
            Trouble::Terminal(t) => format!("{p} cannot run here: {t}"),
            Trouble::Start => format!("{p} could not be started"),
            Trouble::Build => format!("{p} could not {}", w.build),
            Trouble::ToolsRoot => "the tools root could not be read".into(),
            Trouble::Toolset => w.toolset.into(),
            Trouble::Limits => "the sandbox's limits cannot take effect".into(),
            Trouble::EgressDir => "the egress directory could not be made".into(),
            Trouble::ProxyFailed => "the egress proxy did not start".into(),
            Trouble::ProxySocket => "the egress proxy's socket did not appear in time".into(),
            Trouble::Poisoned => format!(
                "a {} brokerd stopped earlier could not be confirmed {}, so network work \
                 (http_fetch, and shell calls of grants with shell_hosts) is off until restart",
                w.stopped.0, w.stopped.1
            ),
            Trouble::EarlierCleanUp => format!(
                "an earlier call's egress proxy was not confirmed {} in time",
                w.proxy_gone
            ),
            Trouble::Staged => "the session's staged layer could not be mounted".into(),
        }
    }
}

/// The log line of an `unavailable` answer for `trouble`, ending with the runbook pointer,
/// and the answer.
pub(crate) fn unavailable<T: Display>(
    spec: &RunSpec,
    trouble: Trouble<T>,
    detail: &str,
    words: &Words,
) -> RunError {
    let why = trouble.why();
    let pointer = match (why, words.runbook) {
        (Unavailable::LayerUnavailable | Unavailable::ToolsetUnavailable, _) | (_, None) => {
            why.runbook()
        }
        (_, Some(own)) => own,
    };
    super::unavailable(spec, why, &trouble.say(words), detail, pointer)
}

/// A program that could not be started at all, which no retry mends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Missing {
    /// It is not there.
    Absent,
    /// It is there and cannot be executed.
    Inexecutable,
}

impl Missing {
    /// Whether the failure to start a program says it is missing; `None` for a failure a
    /// later call may not meet.
    pub(crate) fn of(e: &io::Error) -> Option<Missing> {
        match (e.kind(), e.raw_os_error()) {
            (io::ErrorKind::NotFound, _) => Some(Missing::Absent),
            (io::ErrorKind::PermissionDenied, _) | (_, Some(libc::ENOEXEC)) => {
                Some(Missing::Inexecutable)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_absence_and_a_refused_execution_mark_a_program_missing() {
        let of = |e: io::Error| Missing::of(&e);
        assert_eq!(of(io::ErrorKind::NotFound.into()), Some(Missing::Absent));
        assert_eq!(
            of(io::Error::from_raw_os_error(libc::EACCES)),
            Some(Missing::Inexecutable)
        );
        assert_eq!(
            of(io::Error::from_raw_os_error(libc::ENOEXEC)),
            Some(Missing::Inexecutable)
        );
        assert_eq!(of(io::Error::from_raw_os_error(libc::EAGAIN)), None);
        assert_eq!(of(io::Error::from_raw_os_error(libc::ENOMEM)), None);
    }

    #[test]
    fn each_trouble_is_one_answer() {
        type T = Trouble<String>;
        assert_eq!(T::Staged.why(), Unavailable::LayerUnavailable);
        assert_eq!(T::Toolset.why(), Unavailable::ToolsetUnavailable);
        for t in [
            T::EgressDir,
            T::ProxyFailed,
            T::ProxySocket,
            T::Poisoned,
            T::EarlierCleanUp,
        ] {
            assert_eq!(t.why(), Unavailable::EgressUnavailable, "{t:?}");
        }
        for t in [
            T::Terminal("x".into()),
            T::Start,
            T::Build,
            T::ToolsRoot,
            T::Limits,
        ] {
            assert_eq!(t.why(), Unavailable::RunnerUnavailable, "{t:?}");
        }
    }
}
