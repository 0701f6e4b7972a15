//! tar, zip, unzip, rsync and patch: the files they write and delete, or `ShellComplex` when
//! only the archive or the patch names them.

use super::opts::Parsed;
use super::specs::Effect;
use super::*;

impl Walk<'_> {
    pub(super) fn tar(&mut self, o: &Parsed) {
        let extract = o.has("extract");
        let writes_archive = o.has_any(&["create", "append", "update", "catenate", "delete"]);
        if !extract && !writes_archive && !o.has_any(&["list", "diff"]) {
            self.raise(
                CommandClass::ShellComplex,
                "tar without a mode the classifier reads",
            );
            return;
        }
        if writes_archive {
            for f in o.values("file") {
                if f.text() != Some("-") {
                    self.write_target(f);
                }
            }
        }
        if extract && !o.has("to-stdout") {
            let dir = o.values("directory").last().map(|a| (*a).clone());
            self.extracts("tar -x", dir, &o.operands);
        }
        if writes_archive && o.has("remove-files") {
            // The members are deleted once archived: a root archived away is gone.
            self.deletes("tar --remove-files", true, &o.operands);
        }
    }

    /// `zip ARCHIVE FILES`: the archive is written; `-m` deletes the files once zipped.
    pub(super) fn zip(&mut self, o: &Parsed, args: &[Arg]) {
        // `-TT CMD` tests the archive with CMD; getopt would read it as `-T -T`.
        if let Some(at) = args.iter().position(|a| a.text() == Some("-TT")) {
            self.run_code("zip -TT", args.get(at + 1..at + 2).unwrap_or(&[]));
        }
        let Some((archive, files)) = o.operands.split_first() else {
            return;
        };
        self.write_target(archive);
        if o.has("move") {
            self.deletes(
                "zip -m",
                o.has_any(&["recurse-paths", "recurse-patterns"]),
                files,
            );
        }
    }

    /// `rsync SRC... DEST`: DEST is written; `--delete` empties what of DEST the sources lack,
    /// `--remove-source-files` deletes the sources' files.
    pub(super) fn rsync(&mut self, o: &Parsed) {
        let remote = |a: &Arg| {
            a.text().is_none_or(|t| {
                t.starts_with("rsync://")
                    || t.split_once(':')
                        .is_some_and(|(host, _)| !host.contains('/'))
            })
        };
        if o.operands.iter().any(remote) {
            self.raise(CommandClass::ShellComplex, "rsync to or from another host");
        }
        let (Some(dest), true) = (o.operands.last(), o.operands.len() >= 2) else {
            return;
        };
        if o.has_any(&["dry-run", "list-only"]) {
            return;
        }
        let sources = &o.operands[..o.operands.len() - 1];
        let recursive = o.has_any(&["recursive", "archive"]);
        let deleting = o.with_effect(Effect::Recursive).next().is_some();
        if deleting {
            self.deletes("rsync --delete", true, std::slice::from_ref(dest));
        } else {
            self.write_target(dest);
        }
        if o.has("remove-source-files") {
            self.deletes("rsync --remove-source-files", recursive, sources);
        }
    }

    pub(super) fn patch(&mut self, o: &Parsed) {
        if o.has("dry-run") {
            return;
        }
        match o.operands.first() {
            Some(orig) if o.values("output").is_empty() => self.write_target(orig),
            Some(_) => {}
            None if !o.values("output").is_empty() => {}
            None => {
                self.raise(CommandClass::WorkspaceMutating, "patch");
                self.raise(
                    CommandClass::ShellComplex,
                    "patch writes the files its patch names, which the classifier cannot see",
                );
            }
        }
    }

    /// unzip's options are its own: `-d DIR`, `-x` before exclusions, single letters.
    pub(super) fn unzip(&mut self, args: &[Arg]) {
        let mut dir = None;
        let mut operands = Vec::new();
        let mut only_reads = false;
        let mut i = 0;
        while let Some(a) = args.get(i) {
            i += 1;
            match a.text() {
                Some("-d") => {
                    dir = args.get(i).cloned();
                    i += 1;
                }
                Some("-x") => break,
                Some(t) if t.starts_with('-') && t.len() > 1 => {
                    only_reads |= t.chars().any(|c| "ltvZpcz".contains(c));
                }
                _ => operands.push(a.clone()),
            }
        }
        if only_reads {
            return;
        }
        self.extracts("unzip", dir, operands.get(1..).unwrap_or(&[]));
    }

    /// Members extracted into `dir` (or the working directory): written; none named means
    /// every member, which only the archive knows.
    fn extracts(&mut self, what: &str, dir: Option<Arg>, members: &[Arg]) {
        self.raise(CommandClass::WorkspaceMutating, what.to_string());
        if let Some(d) = &dir {
            self.write_target(d);
        }
        if members.is_empty() {
            self.raise(
                CommandClass::ShellComplex,
                format!(
                    "{what} writes the files the archive names, which the classifier cannot see"
                ),
            );
        }
        for m in members {
            match (dir.as_ref().and_then(|d| d.text()), m.text()) {
                (Some(d), Some(t)) => {
                    self.write_target(&m.with_text(&Path::new(d).join(t).to_string_lossy()))
                }
                _ => self.write_target(m),
            }
        }
    }
}
