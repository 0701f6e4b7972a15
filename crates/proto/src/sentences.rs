//! The fixed sentences of brokerd's answers that other programs compare word for word: the
//! model reads them, and the end-to-end suite checks brokerd's answers against them
//! (docs/design.md#runners). Each is written here once; no text may change without the design.

use std::fmt;
use std::path::PathBuf;

/// Why a call failed: the fixed sentences of docs/design.md#runners, exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    #[error("the tool could not run")]
    CouldNotRun,
    #[error("the tool was stopped: it ran out of memory or was killed")]
    Killed,
    #[error("the tool ran past its time limit")]
    TimedOut,
    #[error("the tool failed with an unexpected status")]
    UnexpectedStatus,
    #[error("the tool was stopped: this session's staged writes passed [broker] max_staged_bytes; what it wrote so far stays staged, and the session's writes are refused until an owner commits or discards them")]
    StagedFull,
}

/// A mount source that is not the directory brokerd resolved at start. The text names the
/// directory; it is the model's refusal and the operator's log line
/// (docs/design.md#grants-and-paths).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("grant directory {} {why}; nothing was run, and the owner has to look at it", path.display())]
pub struct MountChanged {
    pub path: PathBuf,
    pub why: MountTrouble,
}

/// What was found where a grant directory should be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MountTrouble {
    /// A symlink on the path (the directory itself or a parent).
    Symlink,
    /// Another directory under the same name.
    Replaced,
    /// Nothing, or something that is not a directory.
    Gone,
    /// It could not be opened (permission, I/O).
    Unreadable,
}

impl fmt::Display for MountTrouble {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MountTrouble::Symlink => {
                "is reached through a symbolic link now, not as the directory resolved at start"
            }
            MountTrouble::Replaced => {
                "is another directory now than the one resolved at start (it was moved or replaced)"
            }
            MountTrouble::Gone => "no longer exists or is not a directory",
            MountTrouble::Unreadable => "cannot be opened by brokerd",
        })
    }
}

/// The refusal of an http_fetch to `host`, which none of the grant's `hosts` (its patterns,
/// in the config's order) matches (docs/design.md#grants-and-paths).
pub fn host_not_granted(host: &str, hosts: &[String]) -> String {
    format!(
        "http_fetch: {host} is not one of the grant's hosts ({})",
        hosts.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sentences as docs/design.md writes them.
    #[test]
    fn sentences_are_the_designs() {
        assert_eq!(
            Failure::TimedOut.to_string(),
            "the tool ran past its time limit"
        );
        assert_eq!(
            Failure::Killed.to_string(),
            "the tool was stopped: it ran out of memory or was killed"
        );
        let changed = MountChanged {
            path: "/srv/notes".into(),
            why: MountTrouble::Symlink,
        };
        assert_eq!(
            changed.to_string(),
            "grant directory /srv/notes is reached through a symbolic link now, not as the \
             directory resolved at start; nothing was run, and the owner has to look at it"
        );
        let hosts = ["ok.test".to_string(), "*.ok.test".to_string()];
        assert_eq!(
            host_not_granted("other.test", &hosts),
            "http_fetch: other.test is not one of the grant's hosts (ok.test, *.ok.test)"
        );
    }
}
