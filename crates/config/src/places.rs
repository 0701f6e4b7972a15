//! brokerd's own places, which no grant directory may overlap.

use std::path::{Path, PathBuf};

use super::{Config, OverlapsState, DEFAULT_HOME};
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
    // A grant over a toolset's tree or its store path list could change what other sandboxes
    // run or see of the store.
    for t in c.toolsets.values() {
        if let Some(tree) = &t.tree {
            places.push(StatePlace {
                path: tree.clone(),
                what: "a toolset's tree (toolsets.NAME.tree)",
                file: false,
            });
        }
        if let Some(list) = &t.store_paths {
            places.push(StatePlace {
                path: list.clone(),
                what: "a toolset's store path list (toolsets.NAME.store_paths)",
                file: true,
            });
        }
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
pub(super) fn real_path(p: &Path) -> PathBuf {
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

#[cfg(test)]
mod tests;
