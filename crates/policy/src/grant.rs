//! A grant's settings that the decision and the protected-target walk read, beside the config
//! that sets them (brokerd's `config`, which re-exports them).

use serde::{Deserialize, Serialize};

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

/// How far one walk for protected targets may go (`[runner] protect_max_depth`,
/// `protect_max_entries`, `protect_max_targets`): what the config says, which `protect::scan`
/// obeys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProtectBounds {
    /// Directories below the grant directory.
    pub max_depth: usize,
    /// Directory entries looked at, all directories together.
    pub max_entries: usize,
    /// Protected targets found and the directories pinned above them, together: each is one
    /// more mount in every writable sandbox.
    pub max_targets: usize,
}

impl Default for ProtectBounds {
    /// The three keys unset.
    fn default() -> ProtectBounds {
        ProtectBounds {
            max_depth: 32,
            max_entries: 100_000,
            max_targets: 256,
        }
    }
}
