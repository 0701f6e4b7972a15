//! What a session's layer changed in its real directory (docs/design.md#staged-writes-and-owners):
//! each changed path with its kind, size and hash, and for text a bounded unified diff.
//!
//! Read from the layer's upper directory against the real one, as overlayfs merges them: an
//! entry of the layer over nothing is added; over something else, modified, a type change or a
//! mode change; a whiteout over something, deleted; an opaque directory over a real one hides
//! (deletes) every real entry it does not have. An entry copied up unchanged (opened for
//! writing, touched) is no change.

use std::fs::{self, Metadata};
use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use proto::broker::ChangeKind;

use super::merged::{is_opaque, is_whiteout};
use super::{kind_of, sha256_file};

/// The most bytes of a text file diffed; larger ones are shown by size and hash.
const DIFF_INPUT: u64 = 256 * 1024;
/// The most bytes of one file's diff shown.
const DIFF_SHOWN: usize = 64 * 1024;
/// The most changes one layer reports (a command can stage far more; the rest is counted).
pub const MAX_CHANGES: usize = 100_000;

/// One change, relative to the layer's real directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// Relative to the real directory, `/`-separated.
    pub rel: PathBuf,
    pub kind: ChangeKind,
    /// What it is in the layer: `file`, `dir`, `link` or `none` (deleted).
    pub what: &'static str,
    pub size: Option<u64>,
    pub sha256: Option<String>,
    pub target: Option<PathBuf>,
    /// The permission bits in the layer.
    pub mode: Option<u32>,
}

/// Every path the layer has an entry for (whiteouts included), relative, for recording what
/// the real paths were when first staged.
pub fn layer_paths(upper: &Path) -> std::io::Result<Vec<String>> {
    let mut out = Vec::new();
    if !upper.exists() {
        return Ok(out);
    }
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        for e in fs::read_dir(upper.join(&rel))?.flatten() {
            let name = e.file_name();
            let n = name.to_string_lossy();
            if n == ".wh..wh..opq" {
                continue;
            }
            let shown = match n.strip_prefix(".wh.") {
                Some(of) => rel.join(of),
                None => rel.join(&name),
            };
            out.push(shown.display().to_string());
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(rel.join(&name));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The changes of the layer `upper` over `real`, in path order.
pub fn changes(upper: &Path, real: &Path) -> std::io::Result<Vec<Found>> {
    let mut out = Vec::new();
    if upper.exists() {
        walk(upper, real, PathBuf::new(), &mut out)?;
    }
    out.sort_by(|a, b| a.rel.cmp(&b.rel));
    Ok(out)
}

fn walk(upper: &Path, real: &Path, rel: PathBuf, out: &mut Vec<Found>) -> std::io::Result<()> {
    let layer_dir = upper.join(&rel);
    let real_dir = real.join(&rel);
    let real_is_dir = fs::symlink_metadata(&real_dir).is_ok_and(|m| m.is_dir());
    let mut names = Vec::new();
    for e in fs::read_dir(&layer_dir)?.flatten() {
        names.push(e.file_name());
    }
    names.sort();
    // An opaque directory over a real one: what it does not have is gone.
    if real_is_dir && !rel.as_os_str().is_empty() && is_opaque(&layer_dir) {
        let mut real_names: Vec<_> = fs::read_dir(&real_dir)?
            .flatten()
            .map(|e| e.file_name())
            .collect();
        real_names.sort();
        for name in real_names {
            if !names.contains(&name) {
                out.push(deleted(rel.join(&name)));
            }
        }
    }
    for name in names {
        if out.len() >= MAX_CHANGES {
            return Ok(());
        }
        let n = name.to_string_lossy().into_owned();
        if n == ".wh..wh..opq" {
            continue;
        }
        if let Some(of) = n.strip_prefix(".wh.") {
            if fs::symlink_metadata(real_dir.join(of)).is_ok() {
                out.push(deleted(rel.join(of)));
            }
            continue;
        }
        let here = rel.join(&name);
        let in_layer = upper.join(&here);
        let Ok(m) = fs::symlink_metadata(&in_layer) else {
            continue;
        };
        let on_disk = if real_is_dir || rel.as_os_str().is_empty() {
            fs::symlink_metadata(real.join(&here)).ok()
        } else {
            None
        };
        if is_whiteout(&m) {
            if on_disk.is_some() {
                out.push(deleted(here));
            }
            continue;
        }
        let what = kind_of(&m);
        let kind = match &on_disk {
            None => Some(ChangeKind::Added),
            Some(r) if kind_of(r) != what => Some(ChangeKind::TypeChanged),
            Some(r) => same_kind_change(&in_layer, &m, &real.join(&here), r),
        };
        if let Some(kind) = kind {
            out.push(found(here.clone(), kind, &in_layer, &m));
        }
        if m.is_dir() {
            walk(upper, real, here, out)?;
        }
    }
    Ok(())
}

/// A change between two entries of the same type, if any.
fn same_kind_change(layer: &Path, lm: &Metadata, real: &Path, rm: &Metadata) -> Option<ChangeKind> {
    let mode = |m: &Metadata| m.permissions().mode() & 0o7777;
    match kind_of(lm) {
        "file" => {
            let same = lm.len() == rm.len()
                && match (sha256_file(layer), sha256_file(real)) {
                    (Ok(a), Ok(b)) => a == b,
                    _ => false,
                };
            if !same {
                Some(ChangeKind::Modified)
            } else if mode(lm) != mode(rm) {
                Some(ChangeKind::ModeChanged)
            } else {
                None
            }
        }
        "link" => {
            (fs::read_link(layer).ok() != fs::read_link(real).ok()).then_some(ChangeKind::Modified)
        }
        "dir" => (mode(lm) != mode(rm)).then_some(ChangeKind::ModeChanged),
        _ => Some(ChangeKind::Modified),
    }
}

fn deleted(rel: PathBuf) -> Found {
    Found {
        rel,
        kind: ChangeKind::Deleted,
        what: "none",
        size: None,
        sha256: None,
        target: None,
        mode: None,
    }
}

fn found(rel: PathBuf, kind: ChangeKind, at: &Path, m: &Metadata) -> Found {
    let what = kind_of(m);
    Found {
        rel,
        kind,
        what,
        size: (what == "file").then_some(m.len()),
        sha256: (what == "file").then(|| sha256_file(at).ok()).flatten(),
        target: (what == "link").then(|| fs::read_link(at).ok()).flatten(),
        mode: Some(m.mode() & 0o7777),
    }
}

/// The unified diff of a changed text file, bounded; `None` for binary or large files (shown
/// by size and hash) and for what is not a file.
pub fn diff(f: &Found, upper: &Path, real: &Path, shown: &str) -> Option<String> {
    if f.what != "file" && f.kind != ChangeKind::Deleted {
        return None;
    }
    let read = |p: &Path| -> Option<String> {
        let m = fs::symlink_metadata(p).ok()?;
        if !m.is_file() || m.len() > DIFF_INPUT {
            return None;
        }
        let mut s = String::new();
        crate::view::open_for_reading(p)
            .ok()?
            .read_to_string(&mut s)
            .ok()?;
        Some(s)
    };
    let old = match f.kind {
        ChangeKind::Added => String::new(),
        _ if fs::symlink_metadata(real.join(&f.rel)).is_ok_and(|m| m.is_file()) => {
            read(&real.join(&f.rel))?
        }
        _ => String::new(),
    };
    let new = match f.kind {
        ChangeKind::Deleted => String::new(),
        _ => read(&upper.join(&f.rel))?,
    };
    let text = similar::TextDiff::from_lines(&old, &new)
        .unified_diff()
        .context_radius(3)
        .header(&format!("a{shown}"), &format!("b{shown}"))
        .to_string();
    Some(match text.char_indices().nth(DIFF_SHOWN) {
        Some((cut, _)) => format!("{}\n[diff cut at {DIFF_SHOWN} characters]\n", &text[..cut]),
        None => text,
    })
}
