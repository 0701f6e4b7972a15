//! Protected targets (docs/design.md#protected-targets).
//!
//! Generated, vendored and third-party files are not edited by hand: a write is refused when
//! the path as written or the file it reaches has a `generated`, `build/tmp`, `vendor`,
//! `third_party` or `node_modules` component, or when the existing file's first five lines say
//! `@generated` or `DO NOT EDIT`. These refusals are what the classifier can see; the
//! guarantee is the mount table: `scan` finds the protected targets inside a writable grant
//! directory, and every sandbox that mounts it writable binds them read-only over it.

use std::fmt;
use std::fs::File;
use std::io::Read;
use std::path::{Component, Path};

use crate::glob;

pub mod scan;

/// Directory names whose contents are never written.
pub(crate) const PROTECTED_DIRS: &[&str] = &["generated", "vendor", "third_party", "node_modules"];
/// Header markers, looked for in the first `HEADER_LINES` lines.
const MARKERS: &[&str] = &["@generated", "DO NOT EDIT"];
const HEADER_LINES: usize = 5;
/// The most of a file read to find its header.
const HEADER_BYTES: u64 = 4096;

/// Why a path is protected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Protection {
    /// The path has a protected directory component (`generated`, `build/tmp`, ...).
    Directory { path: String, component: String },
    /// The file's first lines carry a generated-file marker.
    Header { path: String, marker: &'static str },
}

impl fmt::Display for Protection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Protection::Directory { path, component } => write!(
                f,
                "{path} is under `{component}/`: generated, vendored and third-party files are \
                 not edited here; change the source they come from"
            ),
            Protection::Header { path, marker } => write!(
                f,
                "{path} says `{marker}` in its first lines: it is generated; change the source \
                 it comes from"
            ),
        }
    }
}

/// Whether a write to `written_as` (as the model wrote it), reaching `reached` (resolved), is
/// refused. The header check reads `reached` if it is an existing regular file.
pub fn protected(written_as: &str, reached: &Path) -> Option<Protection> {
    protected_in(&crate::view::Host, written_as, reached)
}

/// `protected` on `view`'s tree: the header is read from the file the view shows there.
pub fn protected_in(
    view: &dyn crate::view::View,
    written_as: &str,
    reached: &Path,
) -> Option<Protection> {
    protected_by_name(written_as, reached).or_else(|| {
        header_marker(view, reached).map(|marker| Protection::Header {
            path: written_as.to_string(),
            marker,
        })
    })
}

/// `protected` by the names alone, reading nothing: for a path that did not resolve inside
/// the grant, whose file a decision never opens.
pub fn protected_by_name(written_as: &str, reached: &Path) -> Option<Protection> {
    if let Some(component) = protected_component(Path::new(written_as)) {
        return Some(Protection::Directory {
            path: written_as.to_string(),
            component,
        });
    }
    protected_component(reached).map(|component| Protection::Directory {
        path: reached.display().to_string(),
        component,
    })
}

/// Whether a write to the shell pattern `pattern` (one brace alternative) is refused by its
/// own components: `generat*/x` may name `generated/x` even where no such file exists yet.
/// A component made only of wildcards (`*`, `?*`) is left to the expansion on the host: it
/// matches a protected directory only where one exists.
pub fn pattern_protected(pattern: &str) -> Option<Protection> {
    let glob_eq = |component: &str, name: &str| {
        if !glob::is_pattern(component) {
            return component == name;
        }
        glob::has_literal(component) && glob::matches(component, name) != Some(false)
    };
    protected_component_by(Path::new(pattern), glob_eq).map(|component| Protection::Directory {
        path: pattern.to_string(),
        component,
    })
}

/// The protected component of a path, if any (`build/tmp` as two components in a row).
fn protected_component(p: &Path) -> Option<String> {
    protected_component_by(p, |a, b| a == b)
}

/// As `protected_component`, with `same(component, protected name)` deciding a match.
fn protected_component_by(p: &Path, same: impl Fn(&str, &str) -> bool) -> Option<String> {
    let names: Vec<&str> = p
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => n.to_str(),
            _ => None,
        })
        .collect();
    for (i, n) in names.iter().enumerate() {
        if let Some(dir) = PROTECTED_DIRS.iter().find(|d| same(n, d)) {
            return Some((*dir).to_string());
        }
        if same(n, "build") && names.get(i + 1).is_some_and(|next| same(next, "tmp")) {
            return Some("build/tmp".to_string());
        }
    }
    None
}

/// Whether a directory entry named `name`, in a directory named `parent`, is a protected
/// directory: the protected name it carries (`build/tmp` for a `tmp` inside a `build`).
pub fn protected_dir_name(name: &str, parent: Option<&str>) -> Option<&'static str> {
    if let Some(dir) = PROTECTED_DIRS.iter().find(|d| **d == name) {
        return Some(dir);
    }
    (name == "tmp" && parent == Some("build")).then_some("build/tmp")
}

/// Whether a path (the grant directory itself, say) has a protected component.
pub fn has_protected_component(p: &Path) -> Option<String> {
    protected_component(p)
}

/// The generated-file marker in the first `HEADER_LINES` lines of `head` (the start of a file).
pub fn marker_in(head: &[u8]) -> Option<&'static str> {
    let text = String::from_utf8_lossy(head);
    let first: Vec<&str> = text.lines().take(HEADER_LINES).collect();
    MARKERS
        .iter()
        .find(|m| first.iter().any(|l| l.contains(**m)))
        .copied()
}

/// How much of a file's start `marker_in` needs.
pub const HEADER_READ: u64 = HEADER_BYTES;

/// The generated-file marker in the first lines of an existing regular file.
fn header_marker(view: &dyn crate::view::View, p: &Path) -> Option<&'static str> {
    // Only regular files are opened (a device's open may do something; a FIFO's may wait),
    // and only regular files are read, should it have changed in between.
    if !view.lstat(p).ok()?.file_type().is_file() {
        return None;
    }
    let file: File = view.open(p).ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut head = Vec::new();
    file.take(HEADER_BYTES).read_to_end(&mut head).ok()?;
    marker_in(&head)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn components() {
        // (written, reached, protected component)
        let cases = [
            ("notes/a.md", "/srv/notes/a.md", None),
            ("generated/a.rs", "/srv/x/generated/a.rs", Some("generated")),
            ("src/generated/deep/a.rs", "/srv/x/a.rs", Some("generated")),
            ("a.rs", "/srv/x/generated/a.rs", Some("generated")),
            ("./vendor/lib.c", "/srv/x/vendor/lib.c", Some("vendor")),
            (
                "x/third_party/y",
                "/srv/x/third_party/y",
                Some("third_party"),
            ),
            ("web/node_modules/p/i.js", "/srv/w", Some("node_modules")),
            ("build/tmp/out.o", "/srv/build/tmp/out.o", Some("build/tmp")),
            ("a/build/tmp", "/srv/a", Some("build/tmp")),
            ("build/out.o", "/srv/build/out.o", None),
            ("tmp/build", "/srv/tmp/build", None),
            ("generated.rs", "/srv/generated.rs", None),
            ("my_generated/a", "/srv/my_generated/a", None),
            ("vendors/a", "/srv/vendors/a", None),
            ("generated/../a", "/srv/a", Some("generated")),
        ];
        for (written, reached, want) in cases {
            let got = protected(written, Path::new(reached));
            let comp = match &got {
                Some(Protection::Directory { component, .. }) => Some(component.as_str()),
                Some(Protection::Header { .. }) => Some("header"),
                None => None,
            };
            assert_eq!(comp, want, "{written} -> {reached}");
        }
    }

    #[test]
    fn headers() {
        let dir = tempfile::tempdir().expect("tempdir");
        let long_first = format!("{}\n// @generated\n", "x".repeat(5000));
        // (file content, marker)
        let cases: Vec<(&str, Option<&str>)> = vec![
            ("// @generated by protoc\nfn a() {}\n", Some("@generated")),
            (
                "package x\n\n// Code generated by X. DO NOT EDIT.\n",
                Some("DO NOT EDIT"),
            ),
            ("1\n2\n3\n4\n# DO NOT EDIT\n", Some("DO NOT EDIT")),
            ("1\n2\n3\n4\n5\n# DO NOT EDIT\n", None),
            ("hand written\n", None),
            ("", None),
            (&long_first, None),
        ];
        for (i, (content, want)) in cases.into_iter().enumerate() {
            let p = dir.path().join(format!("f{i}"));
            fs::write(&p, content).expect("write");
            let got = protected(&format!("f{i}"), &p);
            let marker = match got {
                Some(Protection::Header { marker, .. }) => Some(marker),
                _ => None,
            };
            assert_eq!(marker, want, "case {i}");
        }
        // Missing files, directories and FIFOs are not read (and do not hang).
        assert_eq!(protected("nope", &dir.path().join("nope")), None);
        assert_eq!(protected("d", dir.path()), None);
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(
            &fifo,
            nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
        )
        .expect("mkfifo");
        assert_eq!(protected("fifo", &fifo), None);
    }

    #[test]
    fn patterns() {
        // (pattern, protected component)
        let cases = [
            ("generat*/x.c", Some("generated")),
            ("vendo?/l.c", Some("vendor")),
            ("[gv]en*/a", Some("generated")),
            ("n*s/p/i.js", Some("node_modules")),
            ("bu*/t?p/o", Some("build/tmp")),
            ("third?party/x", Some("third_party")),
            ("*/x", None),
            ("*d/x", Some("generated")),
            ("src/*.c", None),
            ("gen.r?", None),
            ("generated/x", Some("generated")),
            ("ven*s/x", None),
        ];
        for (pattern, want) in cases {
            let got = pattern_protected(pattern);
            let comp = match &got {
                Some(Protection::Directory { component, .. }) => Some(component.as_str()),
                _ => None,
            };
            assert_eq!(comp, want, "{pattern}");
        }
    }

    #[test]
    fn texts() {
        let d = protected("gen/generated/a.rs", Path::new("/x")).map(|p| p.to_string());
        assert_eq!(
            d.as_deref(),
            Some(
                "gen/generated/a.rs is under `generated/`: generated, vendored and third-party \
                 files are not edited here; change the source they come from"
            )
        );
    }
}
