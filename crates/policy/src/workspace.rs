//! The grant's directories and tool path resolution (docs/design.md#grants-and-paths).
//!
//! A tool path is absolute or relative to the first directory. Every symlink is followed, the
//! parent of a not-yet-existing file and a dangling link included, and the result must lie
//! inside one of the directories. Resolution is done component by component (like `realpath`)
//! so that a `..` is applied to the real directory a link led to, never to the link's name; a
//! `..` below a directory that does not exist is refused rather than guessed at.

use std::ffi::OsString;
use std::fmt;
use std::io;
use std::path::{Component, Path, PathBuf};

use proto::tools::ToolName;

use crate::dirs::{self as mounts, DirId};
use crate::view::{Host, View};

/// Longest path accepted (Linux PATH_MAX).
pub const MAX_PATH_BYTES: usize = 4096;
/// Longest single name (Linux NAME_MAX).
const MAX_NAME_BYTES: usize = 255;
/// Symlinks followed in one resolution before it counts as a loop (Linux MAXSYMLINKS).
const MAX_LINKS: usize = 40;

/// One grant directory, as the config names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Root {
    pub path: PathBuf,
    pub write: bool,
}

/// One grant directory, resolved: canonical, and the directory it was at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedRoot {
    pub path: PathBuf,
    pub write: bool,
    /// Every sandbox of the grant mounts this directory and no other.
    pub id: DirId,
}

/// A path that resolved inside the grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The path with every symlink followed.
    pub path: PathBuf,
    /// Index of the (most specific) root that holds it.
    pub root: usize,
    /// Whether that root is writable.
    pub writable: bool,
}

/// Why a grant's directories cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error("a grant needs at least one directory")]
    NoRoots,
    #[error("grant directory {0} is not absolute")]
    NotAbsolute(PathBuf),
    #[error("grant directory {0} may not contain `:` or `,`")]
    BadCharacter(PathBuf),
    #[error("grant directory {path} cannot be used: {source}")]
    Unusable { path: PathBuf, source: io::Error },
    #[error("grant directory {0} is not a directory")]
    NotADirectory(PathBuf),
    #[error("grant directory {path} ({canonical}) {why}")]
    Unopenable {
        path: PathBuf,
        canonical: PathBuf,
        why: mounts::MountTrouble,
    },
}

/// Why a tool path was refused; the text tells the model what to do instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathRefusal {
    pub tool: ToolName,
    pub path: String,
    pub why: Why,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Why {
    Empty,
    NulByte,
    TooLong,
    /// Resolved outside every root; carries the resolved path when it differs from the written
    /// one, and the roots to name.
    Outside {
        reached: Option<PathBuf>,
        roots: String,
    },
    /// `..` below a directory that does not exist.
    ParentOfMissing,
    SymlinkLoop,
    NotADirectory,
    /// The path resolved inside a read-only directory and the tool writes.
    ReadOnly {
        root: PathBuf,
    },
    /// The path could not be examined (permission denied, I/O error).
    Unreadable(String),
}

impl fmt::Display for PathRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (tool, path) = (self.tool, &self.path);
        match &self.why {
            Why::Empty => write!(f, "{tool}: the path is empty"),
            Why::NulByte => write!(f, "{tool}: the path contains a NUL byte"),
            Why::TooLong => write!(
                f,
                "{tool}: the path is longer than {MAX_PATH_BYTES} bytes or has a name longer \
                 than {MAX_NAME_BYTES}"
            ),
            Why::Outside {
                reached: None,
                roots,
            } => write!(
                f,
                "{tool}: {path} is outside the grant's directories ({roots})"
            ),
            Why::Outside {
                reached: Some(r),
                roots,
            } => write!(
                f,
                "{tool}: {path} leads to {}, which is outside the grant's directories ({roots})",
                r.display()
            ),
            Why::ParentOfMissing => write!(
                f,
                "{tool}: {path} uses `..` below a directory that does not exist; name the path \
                 without `..`"
            ),
            Why::SymlinkLoop => write!(f, "{tool}: {path} has too many levels of symbolic links"),
            Why::NotADirectory => write!(
                f,
                "{tool}: {path} goes through something that is not a directory"
            ),
            Why::ReadOnly { root } => write!(
                f,
                "{tool}: {path} is in {}, which the grant lets the model read but not write",
                root.display()
            ),
            Why::Unreadable(e) => write!(f, "{tool}: {path} cannot be examined: {e}"),
        }
    }
}

impl std::error::Error for PathRefusal {}

/// The grant's directories, canonical.
#[derive(Debug, Clone)]
pub struct Workspace {
    roots: Vec<ResolvedRoot>,
    /// The directories' paths alone: where a resolution may look.
    paths: Vec<PathBuf>,
}

impl Workspace {
    /// Canonicalises every directory; each must be absolute, exist and be a directory.
    pub fn new(roots: Vec<Root>) -> Result<Workspace, WorkspaceError> {
        if roots.is_empty() {
            return Err(WorkspaceError::NoRoots);
        }
        let mut out = Vec::with_capacity(roots.len());
        for r in roots {
            if !r.path.is_absolute() {
                return Err(WorkspaceError::NotAbsolute(r.path));
            }
            let s = r.path.as_os_str().as_encoded_bytes();
            if s.contains(&b':') || s.contains(&b',') {
                return Err(WorkspaceError::BadCharacter(r.path));
            }
            let canonical =
                std::fs::canonicalize(&r.path).map_err(|source| WorkspaceError::Unusable {
                    path: r.path.clone(),
                    source,
                })?;
            if !canonical.is_dir() {
                return Err(WorkspaceError::NotADirectory(r.path));
            }
            // The directory the sandboxes will mount, from now on and no other.
            let id = match mounts::open_dir(&canonical) {
                Ok((_, id)) => id,
                Err(why) => {
                    return Err(WorkspaceError::Unopenable {
                        path: r.path,
                        canonical,
                        why,
                    })
                }
            };
            out.push(ResolvedRoot {
                path: canonical,
                write: r.write,
                id,
            });
        }
        let paths = out.iter().map(|r| r.path.clone()).collect();
        Ok(Workspace { roots: out, paths })
    }

    pub fn roots(&self) -> &[ResolvedRoot] {
        &self.roots
    }

    /// Resolves a tool path inside the grant, on the host's tree.
    pub fn resolve(&self, tool: ToolName, path: &str) -> Result<Resolved, PathRefusal> {
        self.resolve_in(&Host, tool, path)
    }

    /// Resolves a tool path inside the grant, on `view`'s tree (a session's merged view).
    pub fn resolve_in(
        &self,
        view: &dyn View,
        tool: ToolName,
        path: &str,
    ) -> Result<Resolved, PathRefusal> {
        let refuse = |why: Why| PathRefusal {
            tool,
            path: path.to_string(),
            why,
        };
        if path.is_empty() {
            return Err(refuse(Why::Empty));
        }
        if path.contains('\0') {
            return Err(refuse(Why::NulByte));
        }
        if path.len() > MAX_PATH_BYTES || path.split('/').any(|n| n.len() > MAX_NAME_BYTES) {
            return Err(refuse(Why::TooLong));
        }
        let first = match self.roots.first() {
            Some(r) => &r.path,
            None => return Err(refuse(Why::Unreadable("the grant has no directory".into()))),
        };
        let joined = if Path::new(path).is_absolute() {
            PathBuf::from(path)
        } else {
            first.join(path)
        };
        let real = follow(view, &joined, &self.paths).map_err(refuse)?;
        // The most specific root wins: a writable directory inside a read-only one is writable.
        let holder = self
            .roots
            .iter()
            .enumerate()
            .filter(|(_, r)| real.starts_with(&r.path))
            .max_by_key(|(_, r)| r.path.components().count());
        match holder {
            Some((i, r)) => Ok(Resolved {
                path: real,
                root: i,
                writable: r.write,
            }),
            None => {
                let reached = (real != lexical(&joined)).then_some(real);
                Err(refuse(Why::Outside {
                    reached,
                    roots: self.root_list(),
                }))
            }
        }
    }

    /// Like `resolve`, and refuses a path in a read-only directory.
    pub fn resolve_for_write(&self, tool: ToolName, path: &str) -> Result<Resolved, PathRefusal> {
        self.resolve_for_write_in(&Host, tool, path)
    }

    /// Like `resolve_in`, and refuses a path in a read-only directory.
    pub fn resolve_for_write_in(
        &self,
        view: &dyn View,
        tool: ToolName,
        path: &str,
    ) -> Result<Resolved, PathRefusal> {
        let r = self.resolve_in(view, tool, path)?;
        if !r.writable {
            let root = self
                .roots
                .get(r.root)
                .map(|x| x.path.clone())
                .unwrap_or_default();
            return Err(PathRefusal {
                tool,
                path: path.to_string(),
                why: Why::ReadOnly { root },
            });
        }
        Ok(r)
    }

    fn root_list(&self) -> String {
        let names: Vec<String> = self
            .roots
            .iter()
            .map(|r| r.path.display().to_string())
            .collect();
        names.join(", ")
    }
}

/// `..` and `.` removed by text alone (only to tell whether a link changed where a path goes).
fn lexical(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// Whether `p` is a grant directory, inside one, or on the way to one: the only places a
/// decision looks at (docs/design.md#grants-and-paths).
fn in_reach(p: &Path, roots: &[PathBuf]) -> bool {
    roots.iter().any(|r| r.starts_with(p) || p.starts_with(r))
}

/// Follows every symlink of an absolute path on `view`'s tree, component by component. The
/// part that does not exist yet is appended as written, and may not contain `..`.
///
/// Nothing outside `roots` (the grant's directories, canonical) and the directories on the
/// way to them is looked at: a path that leaves them is returned as it stands from there on,
/// unresolved, and so lies outside every root. No link of `/proc` or `/dev/fd` (`/proc/self/fd/N`,
/// `/proc/self/root`) is ever read, and no file system that does not hold a grant directory
/// is asked anything.
pub fn follow(view: &dyn View, path: &Path, roots: &[PathBuf]) -> Result<PathBuf, Why> {
    let mut pending: Vec<OsString> = Vec::new();
    push_front(&mut pending, path);
    let mut out = PathBuf::from("/");
    let mut links = 0;
    let mut missing = false;
    // `pending` is a stack: the next component is at the end.
    while let Some(name) = pending.pop() {
        match name.to_str() {
            Some(".") | Some("") => continue,
            Some("..") => {
                if missing {
                    return Err(Why::ParentOfMissing);
                }
                out.pop();
                continue;
            }
            _ => {}
        }
        let next = out.join(&name);
        if missing {
            out = next;
            continue;
        }
        if !in_reach(&next, roots) {
            // Outside: the rest as written (a `..` in it included), never resolved.
            out = next;
            while let Some(rest) = pending.pop() {
                out.push(rest);
            }
            return Ok(out);
        }
        match view.lstat(&next) {
            Ok(m) if m.file_type().is_symlink() => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(Why::SymlinkLoop);
                }
                let target = view.read_link(&next).map_err(|e| io_why(&e))?;
                if target.is_absolute() {
                    out = PathBuf::from("/");
                }
                push_front(&mut pending, &target);
            }
            Ok(m) => {
                if !m.is_dir() && !pending.iter().all(|p| p == "." || p.is_empty()) {
                    return Err(Why::NotADirectory);
                }
                out = next;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                missing = true;
                out = next;
            }
            Err(e) => return Err(io_why(&e)),
        }
    }
    Ok(out)
}

/// Puts a path's components in front of what is still to resolve.
fn push_front(pending: &mut Vec<OsString>, p: &Path) {
    let comps: Vec<OsString> = p
        .components()
        .filter_map(|c| match c {
            Component::RootDir | Component::Prefix(_) => None,
            other => Some(other.as_os_str().to_os_string()),
        })
        .collect();
    pending.extend(comps.into_iter().rev());
}

fn io_why(e: &io::Error) -> Why {
    match e.raw_os_error() {
        Some(libc::ELOOP) => Why::SymlinkLoop,
        Some(libc::ENOTDIR) => Why::NotADirectory,
        Some(libc::ENAMETOOLONG) => Why::TooLong,
        _ => Why::Unreadable(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::symlink;

    struct Fixture {
        _dir: tempfile::TempDir,
        base: PathBuf,
        ws: Workspace,
    }

    /// base/notes (rw), base/ref (ro), base/outside; links of every kind.
    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let base = fs::canonicalize(dir.path()).expect("canonical");
        let notes = base.join("notes");
        let refd = base.join("ref");
        let outside = base.join("outside");
        for d in [&notes, &refd, &outside, &notes.join("sub")] {
            fs::create_dir_all(d).expect("mkdir");
        }
        fs::write(notes.join("a.md"), "a").expect("write");
        fs::write(outside.join("secret"), "s").expect("write");
        fs::write(refd.join("r.md"), "r").expect("write");
        let links: [(&str, PathBuf); 9] = [
            ("notes/up", PathBuf::from("..")),
            ("notes/esc", outside.clone()),
            ("notes/esc_file", outside.join("secret")),
            ("notes/dangling_out", outside.join("new_file")),
            ("notes/dangling_in", PathBuf::from("sub/new_file")),
            ("notes/loop1", PathBuf::from("loop2")),
            ("notes/loop2", PathBuf::from("loop1")),
            ("notes/to_ref", refd.clone()),
            ("notes/sub/back", PathBuf::from("../a.md")),
        ];
        for (name, target) in links {
            symlink(target, base.join(name)).expect("symlink");
        }
        let ws = Workspace::new(vec![
            Root {
                path: notes,
                write: true,
            },
            Root {
                path: refd,
                write: false,
            },
        ])
        .expect("workspace");
        Fixture {
            _dir: dir,
            base,
            ws,
        }
    }

    enum Want {
        In(&'static str, usize),
        Out,
        Refused(fn(&Why) -> bool),
    }

    #[test]
    fn resolution() {
        let f = fixture();
        let b = f.base.display().to_string();
        let abs = |s: &str| format!("{b}/{s}");
        use Want::*;
        let long = "a/".repeat(3000);
        let long_name = "n".repeat(300);
        let cases: Vec<(String, Want)> = vec![
            ("a.md".into(), In("notes/a.md", 0)),
            ("./a.md".into(), In("notes/a.md", 0)),
            ("sub/../a.md".into(), In("notes/a.md", 0)),
            ("new.md".into(), In("notes/new.md", 0)),
            ("sub/new/deeper.md".into(), In("notes/sub/new/deeper.md", 0)),
            (abs("notes/a.md"), In("notes/a.md", 0)),
            (abs("ref/r.md"), In("ref/r.md", 1)),
            ("to_ref/r.md".into(), In("ref/r.md", 1)),
            ("sub/back".into(), In("notes/a.md", 0)),
            ("dangling_in".into(), In("notes/sub/new_file", 0)),
            (String::new(), Refused(|w| *w == Why::Empty)),
            ("../outside/secret".into(), Out),
            ("sub/../../outside/secret".into(), Out),
            ("/etc/passwd".into(), Out),
            ("/".into(), Out),
            ("..".into(), Out),
            ("up".into(), Out),
            ("up/outside/secret".into(), Out),
            ("esc/secret".into(), Out),
            ("esc_file".into(), Out),
            ("esc/new".into(), Out),
            ("dangling_out".into(), Out),
            (
                "missing/../../outside/x".into(),
                Refused(|w| *w == Why::ParentOfMissing),
            ),
            (
                "missing/../a.md".into(),
                Refused(|w| *w == Why::ParentOfMissing),
            ),
            ("loop1".into(), Refused(|w| *w == Why::SymlinkLoop)),
            ("loop1/x".into(), Refused(|w| *w == Why::SymlinkLoop)),
            ("a.md/x".into(), Refused(|w| *w == Why::NotADirectory)),
            ("a\0b".into(), Refused(|w| *w == Why::NulByte)),
            (long, Refused(|w| *w == Why::TooLong)),
            (long_name, Refused(|w| *w == Why::TooLong)),
        ];
        for (input, want) in cases {
            let got = f.ws.resolve(ToolName::ReadFile, &input);
            match (want, got) {
                (In(p, root), Ok(r)) => {
                    assert_eq!(r.path, f.base.join(p), "{input}");
                    assert_eq!(r.root, root, "{input}");
                    assert_eq!(r.writable, root == 0, "{input}");
                }
                (
                    Out,
                    Err(PathRefusal {
                        why: Why::Outside { .. },
                        ..
                    }),
                ) => {}
                (Refused(ok), Err(e)) => assert!(ok(&e.why), "{input}: {e}"),
                (_, got) => panic!("{input:?}: unexpected {got:?}"),
            }
        }
    }

    #[test]
    fn refusal_texts() {
        let f = fixture();
        let b = f.base.display().to_string();
        let roots = format!("{b}/notes, {b}/ref");
        let cases = [
            (
                "/etc/passwd".to_string(),
                format!("read_file: /etc/passwd is outside the grant's directories ({roots})"),
            ),
            (
                "esc/secret".to_string(),
                format!(
                    "read_file: esc/secret leads to {b}/outside/secret, which is outside the \
                     grant's directories ({roots})"
                ),
            ),
            (String::new(), "read_file: the path is empty".to_string()),
        ];
        for (input, text) in cases {
            let e = f.ws.resolve(ToolName::ReadFile, &input).err();
            assert_eq!(e.map(|e| e.to_string()), Some(text), "{input}");
        }
        let e =
            f.ws.resolve_for_write(ToolName::WriteFile, &format!("{b}/ref/r.md"))
                .err();
        assert_eq!(
            e.map(|e| e.to_string()),
            Some(format!(
                "write_file: {b}/ref/r.md is in {b}/ref, which the grant lets the model read \
                 but not write"
            ))
        );
        assert!(f
            .ws
            .resolve_for_write(ToolName::WriteFile, "new.md")
            .is_ok());
    }

    #[test]
    fn roots_are_checked() {
        let f = fixture();
        let b = &f.base;
        let bad = [
            vec![],
            vec![Root {
                path: "rel".into(),
                write: false,
            }],
            vec![Root {
                path: b.join("no:pe"),
                write: false,
            }],
            vec![Root {
                path: b.join("a,b"),
                write: false,
            }],
            vec![Root {
                path: b.join("missing"),
                write: false,
            }],
            vec![Root {
                path: b.join("notes/a.md"),
                write: false,
            }],
        ];
        for roots in bad {
            assert!(Workspace::new(roots.clone()).is_err(), "{roots:?}");
        }
        // A root given through a symlink is canonicalised.
        let ws = Workspace::new(vec![Root {
            path: b.join("notes/to_ref"),
            write: false,
        }])
        .expect("workspace");
        assert_eq!(ws.roots()[0].path, b.join("ref"));
    }

    #[test]
    fn nested_roots_pick_the_most_specific() {
        let f = fixture();
        let b = &f.base;
        let ws = Workspace::new(vec![
            Root {
                path: b.clone(),
                write: false,
            },
            Root {
                path: b.join("notes/sub"),
                write: true,
            },
        ])
        .expect("workspace");
        let r = ws.resolve(ToolName::WriteFile, &format!("{}/notes/sub/x", b.display()));
        assert_eq!(r.map(|r| (r.root, r.writable)), Ok((1, true)));
        let r = ws.resolve(ToolName::WriteFile, &format!("{}/notes/x", b.display()));
        assert_eq!(r.map(|r| (r.root, r.writable)), Ok((0, false)));
    }
}
