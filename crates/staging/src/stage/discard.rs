//! Throwing staged changes away (docs/design.md#staged-writes-and-owners): the selected
//! changes of a layer (`discard`), the real directory keeping what it has, or a whole layer,
//! brokerd's own state (`remove_tree`).

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use nix::sys::stat::Mode;

use super::changes::{self, Found};
use super::commit::{drop_from_layer, select};
use super::journal::temp_name;
use super::landing::{chmod_at, exchange_at};
use super::tree::{is_whiteout_stat, Tree};
use super::{Layer, Meta};

/// Why a discard could not be done as asked.
#[derive(Debug, thiserror::Error)]
pub enum DiscardError {
    /// A real entry below a directory the session replaced with a file or link: it cannot be
    /// kept alone.
    #[error("it lies under a directory this session replaced with a file or link")]
    Replaced { rel: PathBuf, root: PathBuf },
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Throws the selected changes of `layer` away (after `prepare_layer`): the real directory
/// keeps what it has. A real entry that a deletion of its directory removes can be kept alone:
/// the deletion is split (`split`), the rest of the directory staying deleted.
pub fn discard(layer: &Layer, named: Option<&[PathBuf]>) -> Result<Vec<Found>, DiscardError> {
    let upper = Tree::open(&layer.upper)?;
    let real = Tree::open(&layer.real).ok();
    let mut found = changes::changes_in(&upper, real.as_ref())?.found;
    let asked: Vec<Found> = select(&found, named).into_iter().cloned().collect();
    // At most one split per chosen path; a split throws away the deletion it keeps a path of.
    for _ in 0..=asked.len() {
        let chosen = select(&found, named);
        let alone = chosen.iter().find_map(|f| {
            let root = f.under.as_ref()?;
            (!chosen.iter().any(|c| c.rel == *root)).then(|| (f.rel.clone(), root.clone()))
        });
        let Some((rel, root)) = alone else { break };
        let is_whiteout = upper.stat(&root).is_ok_and(|st| is_whiteout_stat(&st));
        match (&real, is_whiteout) {
            (Some(real), true) => split(&upper, real, &root, &rel)?,
            _ => return Err(DiscardError::Replaced { rel, root }),
        }
        found = changes::changes_in(&upper, real.as_ref())?.found;
    }
    for f in select(&found, named).iter().rev() {
        drop_from_layer(&upper, f, true)?;
    }
    Meta::update(
        layer,
        || None,
        |meta| {
            for f in &asked {
                meta.forget(&f.rel, true);
            }
            Ok((!asked.is_empty(), ()))
        },
    )?;
    Ok(asked)
}

/// Turns the whiteout at `root` (over a real directory) into directories that keep `keep`: on
/// the way from `root` to `keep`, each directory is in the layer with the real one's mode and a
/// whiteout for every real entry but the next on the way, and `keep` shows through. Built
/// beside under a temporary name and exchanged with the whiteout in one step.
fn split(upper: &Tree, real: &Tree, root: &Path, keep: &Path) -> io::Result<()> {
    let (parent, name) = upper.parent_of(root)?;
    let tmp_name = temp_name(name);
    let tmp = root.with_file_name(&tmp_name);
    let mut dirs = Vec::new();
    let (mut at_real, mut at_tmp) = (root.to_path_buf(), tmp.clone());
    let on_the_way: Vec<_> = keep
        .strip_prefix(root)
        .map_err(io::Error::other)?
        .components()
        .collect();
    for (i, c) in on_the_way.iter().enumerate() {
        nix::sys::stat::mkdirat(
            &upper.dir(at_tmp.parent().unwrap_or(Path::new("")))?,
            at_tmp.file_name().unwrap_or_default(),
            Mode::S_IRWXU,
        )
        .map_err(io::Error::from)?;
        dirs.push((at_tmp.clone(), real.stat(&at_real)?.st_mode));
        for n in real.names(&at_real)? {
            if n.as_os_str() != c.as_os_str() {
                upper.whiteout(&at_tmp.join(&n))?;
            }
        }
        if i + 1 < on_the_way.len() {
            at_real.push(c);
            at_tmp.push(c);
        }
    }
    for (d, mode) in dirs.iter().rev() {
        let (p, n) = upper.parent_of(d)?;
        chmod_at(&p, n, mode & 0o7777, None).map_err(io::Error::other)?;
    }
    exchange_at(&parent, name, tmp_name.as_os_str())?;
    upper.remove(&tmp)
}

/// Removes a directory tree of brokerd's own state (a layer), entries of other owners
/// included where the directory lets brokerd unlink them. overlayfs leaves its `work/work`
/// directory mode 0: brokerd's own such directories are opened up first.
pub fn remove_tree(dir: &Path) -> io::Result<()> {
    match fs::remove_dir_all(dir) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) if e.kind() != io::ErrorKind::PermissionDenied => return Err(e),
        Err(_) => {}
    }
    open_up(dir);
    match fs::remove_dir_all(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Gives every directory below `dir` that brokerd owns mode 0700 (no link followed).
fn open_up(dir: &Path) {
    let _ = fs::set_permissions(dir, fs::Permissions::from_mode(0o700));
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            open_up(&e.path());
        }
    }
}
