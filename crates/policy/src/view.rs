//! The file tree a decision looks at: the host's, or, for a session of a staged grant, the
//! merged view its sandboxes see (docs/design.md#staged-writes-and-owners). Path resolution,
//! symlink checks, glob expansion and the protected-target checks go through a `View`, so a
//! file the session created is there for its next call, and a link it planted in its layer is
//! followed (or refused) exactly as if it were on disk.
//!
//! Every operation names one path and follows no link in its last component; resolving links
//! is the caller's (`workspace`), component by component.

use std::ffi::OsString;
use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// A file tree to decide on.
pub trait View: Send + Sync {
    /// `lstat`: what is at `p`, a link not followed.
    fn lstat(&self, p: &Path) -> io::Result<Metadata>;
    /// The target of the link at `p`.
    fn read_link(&self, p: &Path) -> io::Result<PathBuf>;
    /// The names in the directory at `p` (no `.` or `..`), in no particular order.
    fn read_dir(&self, p: &Path) -> io::Result<Vec<OsString>>;
    /// The regular file at `p` for reading, a link not followed and a FIFO not waited on.
    fn open(&self, p: &Path) -> io::Result<File>;
}

/// The host's own tree.
#[derive(Debug, Default, Clone, Copy)]
pub struct Host;

/// Opens a file for reading its start: no link followed, a FIFO not waited on, no terminal
/// taken.
pub fn open_for_reading(p: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_NOFOLLOW)
        .open(p)
}

impl View for Host {
    fn lstat(&self, p: &Path) -> io::Result<Metadata> {
        std::fs::symlink_metadata(p)
    }
    fn read_link(&self, p: &Path) -> io::Result<PathBuf> {
        std::fs::read_link(p)
    }
    fn read_dir(&self, p: &Path) -> io::Result<Vec<OsString>> {
        std::fs::read_dir(p)?
            .map(|e| e.map(|e| e.file_name()))
            .collect()
    }
    fn open(&self, p: &Path) -> io::Result<File> {
        open_for_reading(p)
    }
}
