//! How a person reads staged changes (docs/design.md#staged-writes-and-owners): the owner
//! through `boxctl changes --text` and `boxctl sessions --text`, the model through
//! `boxctl mcp`'s `staged_changes`.
//!
//! Every text that came from the model (a path, a link target, a diff) is written through
//! [`Shown`]: brokerd sends paths already visible, and a diff is read as code, so backslashes
//! stay as they are while a control, bidi or invisible character becomes an escape and never
//! reaches a terminal raw.

use std::fmt;

use client::{Change, EntryKind, SessionChanges};
use proto::visible::Shown;

/// The widest change kind (`type_changed`, `mode_changed`), so that paths line up.
const KIND_WIDTH: usize = 12;

/// One line per change: kind, path, then what the path is in the layer (size, link target,
/// mode) and whether it is protected or a conflict.
#[derive(Debug, Clone, Copy)]
pub struct ChangeList<'a>(pub &'a [Change]);

impl fmt::Display for ChangeList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in self.0 {
            write!(f, "{:<KIND_WIDTH$}  {}", c.change.as_str(), Shown(&c.path))?;
            match (c.what, c.size, &c.target) {
                (EntryKind::Link, _, Some(target)) => write!(f, "  link -> {}", Shown(target))?,
                (EntryKind::File, Some(size), _) => write!(f, "  {size} bytes")?,
                // A deleted path is nothing in the layer; anything else is named.
                (EntryKind::Absent, _, _) => {}
                (what, _, _) => write!(f, "  {what}")?,
            }
            if let Some(mode) = &c.mode {
                write!(f, "  mode {}", Shown(mode))?;
            }
            if let Some(bits) = &c.dropped_bits {
                write!(f, "  [setuid/setgid {}: not committed]", Shown(bits))?;
            }
            if c.protected {
                f.write_str("  [protected: named paths only]")?;
            }
            if c.conflict {
                f.write_str("  [conflict: the real file changed]")?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

/// The diffs of the changes that carry one, one after the other, every line shown.
#[derive(Debug, Clone, Copy)]
pub struct Diffs<'a>(pub &'a [Change]);

impl fmt::Display for Diffs<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for diff in self.0.iter().filter_map(|c| c.diff.as_deref()) {
            // Line by line, so that the line breaks stay breaks and nothing else does.
            for line in diff.strip_suffix('\n').unwrap_or(diff).split('\n') {
                writeln!(f, "{}", Shown(line))?;
            }
        }
        Ok(())
    }
}

/// How many changes or sessions an answer left out, if any (past what one line holds).
#[derive(Debug, Clone, Copy)]
pub struct LeftOut(pub usize);

impl fmt::Display for LeftOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            0 => Ok(()),
            n => writeln!(
                f,
                "[{n} more not shown: past what one answer holds; ask per grant (--grant), or \
                 commit or discard some, to see the rest]"
            ),
        }
    }
}

/// A session's staged bytes against `[broker] max_staged_bytes`.
#[derive(Debug, Clone, Copy)]
pub struct Held<'a> {
    pub session: &'a str,
    pub paths: usize,
    pub bytes: u64,
    pub max_bytes: u64,
}

impl fmt::Display for Held<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "session {}: {} changed path(s), {} of {} bytes staged",
            Shown(self.session),
            self.paths,
            self.bytes,
            self.max_bytes
        )
    }
}

/// One line per session with changes pending: session, paths, bytes, grants.
#[derive(Debug, Clone, Copy)]
pub struct SessionList<'a>(pub &'a [SessionChanges]);

impl fmt::Display for SessionList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return writeln!(f, "no session has staged changes");
        }
        for s in self.0 {
            write!(
                f,
                "{}  {} path(s)  {} bytes  grants:",
                Shown(&s.session),
                s.paths,
                s.bytes
            )?;
            for g in &s.grants {
                write!(f, " {}", Shown(g))?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

/// A session's changes as the owner reads them: how much is held, a line per path, the diffs.
#[derive(Debug, Clone, Copy)]
pub struct Report<'a> {
    pub session: &'a str,
    pub changes: &'a [Change],
    /// Changes the answer left out.
    pub left_out: usize,
    pub bytes: u64,
    pub max_bytes: u64,
}

impl fmt::Display for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let held = Held {
            session: self.session,
            paths: self.changes.len() + self.left_out,
            bytes: self.bytes,
            max_bytes: self.max_bytes,
        };
        write!(
            f,
            "{held}{}{}",
            ChangeList(self.changes),
            LeftOut(self.left_out)
        )?;
        if self.changes.iter().any(|c| c.diff.is_some()) {
            write!(f, "\n{}", Diffs(self.changes))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use client::ChangeKind;

    fn change(kind: ChangeKind, path: &str, what: EntryKind) -> Change {
        Change {
            grant: "notes".into(),
            path: path.into(),
            change: kind,
            what,
            size: None,
            sha256: None,
            target: None,
            mode: None,
            dropped_bits: None,
            protected: false,
            conflict: false,
            diff: None,
        }
    }

    #[test]
    fn a_line_per_change() {
        let file = Change {
            size: Some(12),
            ..change(ChangeKind::Modified, "/srv/notes/a.txt", EntryKind::File)
        };
        let link = Change {
            target: Some("../a.txt".into()),
            ..change(ChangeKind::TypeChanged, "/srv/notes/l", EntryKind::Link)
        };
        let mode = Change {
            size: Some(40),
            mode: Some("0755".into()),
            ..change(
                ChangeKind::ModeChanged,
                "/srv/notes/run.sh",
                EntryKind::File,
            )
        };
        let setuid = Change {
            size: Some(40),
            mode: Some("4755".into()),
            dropped_bits: Some("4000".into()),
            ..change(
                ChangeKind::ModeChanged,
                "/srv/notes/run.sh",
                EntryKind::File,
            )
        };
        let protected = Change {
            size: Some(1),
            protected: true,
            conflict: true,
            ..change(ChangeKind::Added, "/srv/notes/Cargo.lock", EntryKind::File)
        };
        // (change, its line)
        let cases = [
            (file, "modified      /srv/notes/a.txt  12 bytes"),
            (link, "type_changed  /srv/notes/l  link -> ../a.txt"),
            (mode, "mode_changed  /srv/notes/run.sh  40 bytes  mode 0755"),
            (
                setuid,
                "mode_changed  /srv/notes/run.sh  40 bytes  mode 4755  \
                 [setuid/setgid 4000: not committed]",
            ),
            (
                change(ChangeKind::Deleted, "/srv/notes/old", EntryKind::Absent),
                "deleted       /srv/notes/old",
            ),
            (
                change(ChangeKind::Added, "/srv/notes/d", EntryKind::Dir),
                "added         /srv/notes/d  dir",
            ),
            (
                protected,
                "added         /srv/notes/Cargo.lock  1 bytes  [protected: named paths only]  \
                 [conflict: the real file changed]",
            ),
            // brokerd sends paths shown; a raw control character is escaped all the same.
            (
                change(
                    ChangeKind::Added,
                    "/srv/notes/a\\nb\u{1b}[2J\u{202e}",
                    EntryKind::Dir,
                ),
                "added         /srv/notes/a\\nb\\x1b[2J\\u{202e}  dir",
            ),
            (
                change(ChangeKind::Added, "/srv/notes/fifo", EntryKind::Other),
                "added         /srv/notes/fifo  other",
            ),
        ];
        for (c, line) in cases {
            let shown = ChangeList(std::slice::from_ref(&c)).to_string();
            assert_eq!(shown, format!("{line}\n"), "{c:?}");
        }
    }

    #[test]
    fn a_report_holds_the_bytes_the_lines_and_the_diffs() {
        let with_diff = |path: &str, diff: &str| Change {
            size: Some(3),
            diff: Some(diff.into()),
            ..change(ChangeKind::Modified, path, EntryKind::File)
        };
        let changes = [
            with_diff(
                "/srv/notes/a.c",
                "--- a\n+++ b\n-x\n+printf(\"\\n\");\u{1b}[31m\n",
            ),
            change(ChangeKind::Deleted, "/srv/notes/b", EntryKind::Absent),
            with_diff("/srv/notes/c", "+\tlast\r"),
        ];
        let report = Report {
            session: "s1",
            changes: &changes,
            left_out: 0,
            bytes: 4096,
            max_bytes: 8192,
        };
        assert_eq!(
            report.to_string(),
            "session s1: 3 changed path(s), 4096 of 8192 bytes staged\n\
             modified      /srv/notes/a.c  3 bytes\n\
             deleted       /srv/notes/b\n\
             modified      /srv/notes/c  3 bytes\n\
             \n\
             --- a\n\
             +++ b\n\
             -x\n\
             +printf(\"\\n\");\\x1b[31m\n\
             +\\tlast\\r\n"
        );
        let empty = Report {
            session: "s1",
            changes: &[],
            left_out: 0,
            bytes: 0,
            max_bytes: 8192,
        };
        assert_eq!(
            empty.to_string(),
            "session s1: 0 changed path(s), 0 of 8192 bytes staged\n"
        );
        let cut = Report {
            changes: &changes[1..2],
            left_out: 4,
            ..empty
        };
        assert_eq!(
            cut.to_string(),
            "session s1: 5 changed path(s), 0 of 8192 bytes staged\n\
             deleted       /srv/notes/b\n\
             [4 more not shown: past what one answer holds; ask per grant (--grant), or commit \
             or discard some, to see the rest]\n"
        );
    }

    #[test]
    fn a_line_per_session() {
        let s = |session: &str, grants: &[&str]| SessionChanges {
            session: session.into(),
            grants: grants.iter().map(|g| g.to_string()).collect(),
            paths: 2,
            bytes: 10,
        };
        // (sessions, listing)
        let cases = [
            (vec![], "no session has staged changes\n"),
            (
                vec![s("s1", &["notes"]), s("s2", &["notes", "ref"])],
                "s1  2 path(s)  10 bytes  grants: notes\n\
                 s2  2 path(s)  10 bytes  grants: notes ref\n",
            ),
        ];
        for (sessions, listing) in cases {
            assert_eq!(SessionList(&sessions).to_string(), listing);
        }
    }
}
