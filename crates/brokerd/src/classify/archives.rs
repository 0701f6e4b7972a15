//! tar, patch and unzip: the files they write, or `ShellComplex` when only the archive or the
//! patch names them.

use super::opts::Parsed;
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
                (Some(d), Some(t)) => self.write_target(&Arg {
                    lit: Some(Path::new(d).join(t).to_string_lossy().into_owned()),
                    pattern: m.pattern,
                    raw: m.raw.clone(),
                }),
                _ => self.write_target(m),
            }
        }
    }
}
