//! A session's merged view, computed the way overlayfs merges a layer over its real directory,
//! for the decisions brokerd takes before a sandbox exists (`view::View`).
//!
//! Inside a staged directory, a path is the layer's where the layer has it: a whiteout (a
//! character device 0/0) hides the real entry, and an opaque directory (`user.overlay.opaque`
//! or `trusted.overlay.opaque` set to `y`) hides everything of the real directory below it. A
//! non-directory in the layer hides what the real tree has below its name. Outside the staged
//! directories the view is the host's. Both backends mount kernel overlayfs (Podman's rootless
//! `:O` volumes included), so fuse-overlayfs' conventions (`.wh.NAME` files, `.wh..wh..opq`)
//! mean nothing here: a file of that name is a file the sandbox made. The layer is read by
//! descriptor (`tree::Tree`), no link of it followed.
//!
//! Tried with Podman 4.3 on Debian 12: a file deleted through a rootless `:O` volume left a
//! character device 0/0 owned by a subordinate uid, a re-made directory `user.overlay.opaque`.

use std::ffi::{OsStr, OsString};
use std::fs::{File, Metadata};
use std::io;
use std::path::{Component, Path, PathBuf};

use proto::broker::EntryKind;

use super::tree::{is_whiteout_stat, kind_of_stat, Tree};
use crate::view::{open_for_reading, View};

/// Where a path of the merged view is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// In the layer whose upper directory is `upper`, at `rel` below it.
    Layer { upper: PathBuf, rel: PathBuf },
    /// In the real tree, at this path.
    Real(PathBuf),
    /// Nowhere: never there, or deleted in the layer.
    Gone,
}

/// The layers of one session over its staged directories.
#[derive(Debug, Clone, Default)]
pub struct Merged {
    /// (real directory, its layer's upper directory)
    layers: Vec<(PathBuf, PathBuf)>,
}

impl Merged {
    pub fn new(layers: Vec<(PathBuf, PathBuf)>) -> Merged {
        Merged { layers }
    }

    /// The staged directory holding `p`, with `p` relative to it.
    fn staged<'a>(&self, p: &'a Path) -> Option<(&Path, &Path, &'a Path)> {
        self.layers
            .iter()
            .filter_map(|(real, upper)| p.strip_prefix(real).ok().map(|rel| (real, upper, rel)))
            .max_by_key(|(real, _, _)| real.components().count())
            .map(|(real, upper, rel)| (real.as_path(), upper.as_path(), rel))
    }

    /// Where `p` is in the layer (its tree and the path in it) and in the real tree, as
    /// overlayfs resolves it (its last component not followed): each `Some` only where that
    /// tree shows it.
    fn walk(&self, p: &Path) -> (Option<(Tree, PathBuf)>, Option<PathBuf>) {
        let Some((real, upper, rel)) = self.staged(p) else {
            return (None, Some(p.to_path_buf()));
        };
        let names: Vec<&OsStr> = rel
            .components()
            .filter_map(|c| match c {
                Component::Normal(n) => Some(n),
                _ => None,
            })
            .collect();
        // The layer's tree: none before the session's first write.
        let tree = Tree::open(upper).ok();
        let (mut up, mut lo) = (PathBuf::new(), real.to_path_buf());
        // Whether each tree still has the path down to here: the layer's, and the real one
        // as far as the layer lets it show through.
        let mut in_layer = tree.is_some();
        let mut in_real = true;
        let last = names.len();
        for (i, name) in names.iter().enumerate() {
            let is_last = i + 1 == last;
            let mut layer_is_dir = false;
            if let (true, Some(t)) = (in_layer, &tree) {
                up.push(name);
                match t.stat(&up) {
                    Ok(st) if is_whiteout_stat(&st) => return (None, None),
                    Ok(st) if kind_of_stat(&st) == EntryKind::Dir => {
                        layer_is_dir = true;
                        if t.is_opaque(&up) {
                            in_real = false;
                        }
                    }
                    // A file or link of the layer hides the real entry, and has nothing below.
                    Ok(_) => {
                        in_real = false;
                        in_layer = is_last;
                    }
                    Err(_) => in_layer = false,
                }
            }
            if in_real {
                lo.push(name);
                match std::fs::symlink_metadata(&lo) {
                    Err(_) => in_real = false,
                    // Nothing below a real non-directory; and a layer directory of the same
                    // name hides it (overlayfs merges only directories).
                    Ok(m) if !m.is_dir() && (!is_last || layer_is_dir) => in_real = false,
                    Ok(_) => {}
                }
            }
            if !in_layer && !in_real {
                return (None, None);
            }
        }
        let layer = match (in_layer, tree) {
            (true, Some(t)) => Some((t, up)),
            _ => None,
        };
        (layer, in_real.then_some(lo))
    }

    /// Where `p` is in the merged view: the layer's entry where it has one.
    pub fn place(&self, p: &Path) -> Place {
        match self.walk(p) {
            (Some((t, rel)), _) => Place::Layer {
                upper: t.path().to_path_buf(),
                rel,
            },
            (None, Some(lo)) => Place::Real(lo),
            (None, None) => Place::Gone,
        }
    }
}

impl View for Merged {
    fn lstat(&self, p: &Path) -> io::Result<Metadata> {
        match self.walk(p) {
            (Some((t, rel)), _) => t.metadata(&rel),
            (None, Some(lo)) => std::fs::symlink_metadata(lo),
            (None, None) => Err(io::Error::from(io::ErrorKind::NotFound)),
        }
    }

    fn read_link(&self, p: &Path) -> io::Result<PathBuf> {
        match self.walk(p) {
            (Some((t, rel)), _) => t.read_link(&rel),
            (None, Some(lo)) => std::fs::read_link(lo),
            (None, None) => Err(io::Error::from(io::ErrorKind::NotFound)),
        }
    }

    fn read_dir(&self, p: &Path) -> io::Result<Vec<OsString>> {
        let (layer, real) = self.walk(p);
        let mut names: Vec<OsString> = Vec::new();
        let mut hidden: Vec<OsString> = Vec::new();
        let mut real_shows = real.is_some();
        match &layer {
            Some((t, rel)) => {
                if t.is_opaque(rel) {
                    real_shows = false;
                }
                for name in t.names(rel)? {
                    match t.stat(&rel.join(&name)) {
                        Ok(st) if is_whiteout_stat(&st) => hidden.push(name),
                        _ => names.push(name),
                    }
                }
            }
            None if real.is_none() => return Err(io::Error::from(io::ErrorKind::NotFound)),
            None => {}
        }
        if real_shows {
            if let Some(dir) = &real {
                let entries = match std::fs::read_dir(dir) {
                    Ok(e) => e,
                    // Only the real tree has it: its error is the answer.
                    Err(e) if layer.is_none() => return Err(e),
                    Err(_) => return Ok(names),
                };
                for e in entries.flatten() {
                    let name = e.file_name();
                    if !hidden.contains(&name) && !names.contains(&name) {
                        names.push(name);
                    }
                }
            }
        }
        Ok(names)
    }

    fn open(&self, p: &Path) -> io::Result<File> {
        match self.walk(p) {
            (Some((t, rel)), _) => t.open_file(&rel),
            (None, Some(lo)) => open_for_reading(&lo),
            (None, None) => Err(io::Error::from(io::ErrorKind::NotFound)),
        }
    }
}

#[cfg(test)]
#[path = "merged_tests.rs"]
mod tests;
