//! A commit's temporary names, and the layer's note that names them
//! (docs/design.md#staged-writes-and-owners): a commit killed midway leaves the note, and the
//! layer's next commit or discard, or brokerd's start, tidies after it.

use std::ffi::OsStr;
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use proto::broker::EntryKind;
use rustix::fs::RenameFlags;

use super::changes;
use super::landing::{names_at, rename2_at};
use super::tree::{kind_of_stat, remove_at, Tree};
use super::Layer;

/// The prefix of every temporary name a commit makes beside what it lands.
const TEMP_PREFIX: &str = ".boxmaker-commit-";

/// A layer's note that a commit is landing, naming its temporary names (`Journal`).
pub(super) const PENDING: &str = "commit.pending";

/// A temporary name beside `name` in the layer itself (brokerd's own state, not the owner's
/// directory: no note is needed to tidy after it).
pub(super) fn temp_name(name: &OsStr) -> std::ffi::OsString {
    Journal { id: String::new() }.temp_name(name)
}

/// The temporary names of one commit: `.boxmaker-commit-<id>-<random>-<name>`, the id noted
/// (synced) in the layer's `commit.pending` before any is made and removed once the last
/// is gone; a commit killed midway leaves the note, and `finish_interrupted` tidies after it.
pub(super) struct Journal {
    id: String,
}

impl Journal {
    pub(super) fn begin(layer: &Layer) -> io::Result<Journal> {
        let mut rand = [0u8; 6];
        getrandom::fill(&mut rand).map_err(|e| io::Error::other(e.to_string()))?;
        let id = hex::encode(rand);
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(layer.dir.join(PENDING))?;
        f.write_all(id.as_bytes())?;
        f.sync_all()?;
        File::open(&layer.dir)?.sync_all()?;
        Ok(Journal { id })
    }

    fn prefix(&self) -> String {
        format!("{TEMP_PREFIX}{}-", self.id)
    }

    pub(super) fn temp_name(&self, name: &OsStr) -> std::ffi::OsString {
        let mut rand = [0u8; 6];
        let _ = getrandom::fill(&mut rand);
        let mut t = std::ffi::OsString::from(self.prefix());
        t.push(hex::encode(rand));
        t.push("-");
        t.push(name);
        t
    }

    /// Every temporary name is gone: the note goes.
    pub(super) fn end(layer: &Layer) -> io::Result<()> {
        match fs::remove_file(layer.dir.join(PENDING)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

/// Tidies after a commit of `layer` killed midway (its `commit.pending` left): in the real
/// directory of each entry of the layer, each temporary name of that commit goes. At most one
/// change was landing: its temporary entry is the commit's own (removed), unless it was
/// already exchanged with the real entry, which is then put back (the real entry at the name
/// being the layer's). Either way that entry is as it was before the commit, and its change
/// stays in the layer for the next one. Called before a layer is committed or discarded, and
/// at brokerd's start (`Stage::finish_interrupted`).
pub fn finish_interrupted(layer: &Layer) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let id = match fs::read_to_string(layer.dir.join(PENDING)) {
        Ok(id) => id,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let prefix = Journal {
        id: id.trim().to_string(),
    }
    .prefix();
    let (Some(upper), Some(real)) = changes::trees(&layer.upper, &layer.real)? else {
        return Journal::end(layer);
    };
    let mut dirs: std::collections::BTreeSet<PathBuf> = std::collections::BTreeSet::new();
    dirs.insert(PathBuf::new());
    for e in changes::entries(&upper, Some(&real))? {
        dirs.insert(e.rel.parent().unwrap_or(Path::new("")).to_path_buf());
    }
    for d in dirs {
        let Ok(dir) = real.dir(&d) else { continue };
        let Ok(dir) = nix::fcntl::openat(
            &dir,
            ".",
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        ) else {
            continue;
        };
        let names = names_at(&dir).map_err(io::Error::other)?;
        for tmp in names {
            let Some(rest) = tmp.as_bytes().strip_prefix(prefix.as_bytes()) else {
                continue;
            };
            // `<random>-<name>`
            let Some(dash) = rest.iter().position(|&b| b == b'-') else {
                continue;
            };
            let name = OsStr::from_bytes(&rest[dash + 1..]);
            if is_layers(&real, &upper, &d.join(name)) {
                rename2_at(&dir, &tmp, name, RenameFlags::EXCHANGE).map_err(io::Error::from)?;
            }
            remove_at(&dir, &tmp).map_err(io::Error::from)?;
        }
    }
    Journal::end(layer)
}

/// Whether the real entry at `rel` is the layer's (what a commit put there): of its type, and
/// a file of its content, a link of its target.
fn is_layers(real: &Tree, upper: &Tree, rel: &Path) -> bool {
    let (Ok(r), Ok(u)) = (real.stat(rel), upper.stat(rel)) else {
        return false;
    };
    match (kind_of_stat(&r), kind_of_stat(&u)) {
        (EntryKind::File, EntryKind::File) => real
            .sha256(rel)
            .ok()
            .is_some_and(|h| upper.sha256(rel).ok() == Some(h)),
        (EntryKind::Link, EntryKind::Link) => real
            .read_link(rel)
            .ok()
            .is_some_and(|t| upper.read_link(rel).ok() == Some(t)),
        (EntryKind::Dir, EntryKind::Dir) => true,
        _ => false,
    }
}
