//! A session's merged view, computed the way overlayfs merges a layer over its real directory,
//! for the decisions brokerd takes before a sandbox exists (`view::View`).
//!
//! Inside a staged directory, a path is the layer's where the layer has it: a whiteout (a
//! character device 0/0, or an older `.wh.<name>` file) hides the real entry, and an opaque
//! directory (`user.overlay.opaque`, `trusted.overlay.opaque` or fuse-overlayfs'
//! `user.fuseoverlayfs.opaque` set to `y`, or a `.wh..wh..opq` entry) hides everything of
//! the real directory below it. A non-directory in the layer hides what the real tree has
//! below its name. Outside the staged directories the view is the host's.

use std::ffi::{OsStr, OsString};
use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Component, Path, PathBuf};

use crate::view::{open_for_reading, View};

/// Where a path of the merged view is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// In the layer, at this path.
    Layer(PathBuf),
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

/// An older (aufs, fuse-overlayfs) whiteout of `name`.
const WHITEOUT_PREFIX: &str = ".wh.";
/// An older opaque marker inside a directory.
const OPAQUE_MARKER: &str = ".wh..wh..opq";
const OPAQUE_XATTRS: [&str; 3] = [
    "user.overlay.opaque",
    "trusted.overlay.opaque",
    "user.fuseoverlayfs.opaque",
];

/// Whether a layer entry is a whiteout: a character device 0/0.
pub fn is_whiteout(m: &Metadata) -> bool {
    m.file_type().is_char_device() && m.rdev() == 0
}

/// Whether a layer directory hides the real one below it.
pub fn is_opaque(dir: &Path) -> bool {
    OPAQUE_XATTRS
        .iter()
        .any(|x| matches!(xattr(dir, x).as_deref(), Some(b"y")))
        || std::fs::symlink_metadata(dir.join(OPAQUE_MARKER)).is_ok()
}

/// The value of the extended attribute `name` of `p` (not following a link).
fn xattr(p: &Path, name: &str) -> Option<Vec<u8>> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(p.as_os_str().as_bytes()).ok()?;
    let name = std::ffi::CString::new(name).ok()?;
    let mut buf = [0u8; 16];
    // SAFETY: both strings are NUL-terminated and live across the call; the buffer's length is
    // the one given, and lgetxattr writes at most that many bytes.
    let n = unsafe {
        libc::lgetxattr(
            path.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    usize::try_from(n)
        .ok()
        .map(|n| buf[..n.min(buf.len())].to_vec())
}

/// Whether a name in a layer directory is an older whiteout or opaque marker (not an entry).
fn is_marker(name: &OsStr) -> bool {
    name.to_str()
        .is_some_and(|n| n.starts_with(WHITEOUT_PREFIX))
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

    /// Where `p` is in the layer and in the real tree, as overlayfs resolves it (its last
    /// component not followed): each `Some` only where that tree shows it.
    fn walk(&self, p: &Path) -> (Option<PathBuf>, Option<PathBuf>) {
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
        let (mut up, mut lo) = (upper.to_path_buf(), real.to_path_buf());
        // Whether each tree still has the path down to here: the layer's (none before the
        // session's first write), and the real one as far as the layer lets it show through.
        let mut in_layer = std::fs::symlink_metadata(upper).is_ok_and(|m| m.is_dir());
        let mut in_real = true;
        let last = names.len();
        for (i, name) in names.iter().enumerate() {
            let is_last = i + 1 == last;
            let mut layer_is_dir = false;
            if in_layer {
                // An older whiteout of this name hides the real entry.
                let mut wh = OsString::from(WHITEOUT_PREFIX);
                wh.push(name);
                if std::fs::symlink_metadata(up.join(&wh)).is_ok() {
                    in_real = false;
                }
                up.push(name);
                match std::fs::symlink_metadata(&up) {
                    Ok(m) if is_whiteout(&m) => return (None, None),
                    Ok(m) if m.is_dir() => {
                        layer_is_dir = true;
                        if is_opaque(&up) {
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
        (in_layer.then_some(up), in_real.then_some(lo))
    }

    /// Where `p` is in the merged view: the layer's entry where it has one.
    pub fn place(&self, p: &Path) -> Place {
        match self.walk(p) {
            (Some(up), _) => Place::Layer(up),
            (None, Some(lo)) => Place::Real(lo),
            (None, None) => Place::Gone,
        }
    }

    fn located(&self, p: &Path) -> io::Result<PathBuf> {
        match self.place(p) {
            Place::Layer(at) | Place::Real(at) => Ok(at),
            Place::Gone => Err(io::Error::from(io::ErrorKind::NotFound)),
        }
    }
}

impl View for Merged {
    fn lstat(&self, p: &Path) -> io::Result<Metadata> {
        std::fs::symlink_metadata(self.located(p)?)
    }

    fn read_link(&self, p: &Path) -> io::Result<PathBuf> {
        std::fs::read_link(self.located(p)?)
    }

    fn read_dir(&self, p: &Path) -> io::Result<Vec<OsString>> {
        let (layer, real) = self.walk(p);
        let mut names: Vec<OsString> = Vec::new();
        let mut hidden: Vec<OsString> = Vec::new();
        let mut real_shows = real.is_some();
        match &layer {
            Some(dir) => {
                if is_opaque(dir) {
                    real_shows = false;
                }
                for e in std::fs::read_dir(dir)?.flatten() {
                    let name = e.file_name();
                    if let Some(of) = name.to_str().and_then(|n| n.strip_prefix(WHITEOUT_PREFIX)) {
                        hidden.push(OsString::from(of));
                        continue;
                    }
                    match e.metadata() {
                        Ok(m) if is_whiteout(&m) => hidden.push(name),
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
        names.retain(|n| !is_marker(n));
        Ok(names)
    }

    fn open(&self, p: &Path) -> io::Result<File> {
        open_for_reading(&self.located(p)?)
    }
}

#[cfg(test)]
#[path = "merged_tests.rs"]
mod tests;
