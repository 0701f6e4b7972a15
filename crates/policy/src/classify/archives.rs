//! tar, zip, unzip, rsync and patch: the files they write and delete, or `ShellComplex` when
//! only the archive or the patch names them.

use super::opts::Parsed;
use super::specs::Effect;
use super::*;

/// Compressors, and whether they only print (`zcat` and its kin decompress to the output).
pub(super) const COMPRESSORS: &[(&str, bool)] = &[
    ("gzip", false),
    ("gunzip", false),
    ("zcat", true),
    ("pigz", false),
    ("unpigz", false),
    ("bzip2", false),
    ("bunzip2", false),
    ("bzcat", true),
    ("xz", false),
    ("unxz", false),
    ("xzcat", true),
    ("lzma", false),
    ("unlzma", false),
    ("lzcat", true),
    ("zstd", false),
    ("unzstd", false),
    ("zstdcat", true),
    ("lz4", false),
    ("lz4cat", true),
];

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
            // Every `-C DIR` is written (members named after one land in it).
            let dirs = o.values("directory");
            if let Some((last, before)) = dirs.split_last() {
                for d in before {
                    self.write_target(d);
                }
                self.extracts("tar -x", Some((*last).clone()), &o.operands);
            } else {
                self.extracts("tar -x", None, &o.operands);
            }
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

    /// unzip, its options read by its spec: `-d DIR` is where it extracts; `-l`, `-t`, `-p`,
    /// `-c`, `-z`, `-Z` (and `-v` first) only read; names after `-x` are left out, so that it
    /// then writes whatever else the archive holds.
    pub(super) fn unzip(&mut self, o: &Parsed, args: &[Arg]) {
        let listing = args
            .first()
            .and_then(|a| a.text())
            .is_some_and(|t| t.starts_with("-v"));
        if listing || o.with_effect(Effect::Query).next().is_some() {
            return;
        }
        let dir = o.values("d").last().map(|a| (*a).clone());
        let members = match o.has("x") {
            true => &[][..],
            false => o.operands.get(1..).unwrap_or(&[]),
        };
        self.extracts("unzip", dir, members);
    }

    /// A compressor: with `-c`, `-t`, `-l`, or no file, or as `zcat`, it only reads; otherwise
    /// each file is replaced by its (de)compressed form, beside it.
    pub(super) fn compressor(&mut self, name: &str, o: &Parsed) {
        let prints = COMPRESSORS.iter().any(|(c, cat)| *c == name && *cat);
        if prints || o.with_effect(Effect::Query).next().is_some() {
            return;
        }
        for f in &o.operands {
            if f.text() != Some("-") {
                self.write_target(f);
            }
        }
        // `-r DIR`: every file under it.
        self.unplaced |= o.has("recursive") && !o.operands.is_empty();
    }

    /// `7z COMMAND [-oDIR] ARCHIVE [FILES]`: `a`, `u`, `d`, `rn` write the archive; `x` and
    /// `e` extract into DIR (or here); `l`, `t`, `h`, `i`, `b` only read.
    pub(super) fn sevenzip(&mut self, args: &[Arg]) {
        let (switches, words): (Vec<&Arg>, Vec<&Arg>) = args
            .iter()
            .partition(|a| a.text().is_some_and(|t| t.starts_with('-') && t.len() > 1));
        let dir = switches.iter().find_map(|a| {
            a.text()
                .and_then(|t| t.strip_prefix("-o"))
                .map(|d| a.with_text(d))
        });
        let command = words.first().and_then(|a| a.text()).unwrap_or("");
        let archive = words.get(1);
        match command {
            "a" | "u" | "d" | "rn" => {
                if let Some(a) = archive {
                    self.write_target(a);
                }
            }
            "x" | "e" => {
                let members: Vec<Arg> = words.iter().skip(2).map(|a| (*a).clone()).collect();
                self.extracts("7z x", dir, &members);
            }
            "l" | "t" | "h" | "i" | "b" => {}
            _ => self.raise(
                CommandClass::ShellComplex,
                "7z without a command the classifier reads",
            ),
        }
    }

    /// cpio: `-i` extracts what the archive names (under `-D DIR`), `-p DIR` copies into DIR,
    /// `-o` writes the archive (`-F`/`-O FILE`); `-t` only lists.
    pub(super) fn cpio(&mut self, o: &Parsed) {
        if o.with_effect(Effect::Query).next().is_some() && !o.has("extract") {
            return;
        }
        if o.has("extract") {
            let dir = o.values("directory").last().map(|a| (*a).clone());
            self.extracts("cpio -i", dir, &[]);
        } else if o.has("pass-through") {
            self.extracts("cpio -p", o.operands.first().cloned(), &[]);
        } else if o.has("create") {
            for f in o.values("file").into_iter().chain(o.values("O")) {
                self.write_target(f);
            }
        } else {
            self.raise(
                CommandClass::ShellComplex,
                "cpio without a mode the classifier reads",
            );
        }
    }

    /// `ar OPERATIONS [POSITION] ARCHIVE [MEMBERS]`: `d`, `m`, `q`, `r`, `s` write the archive;
    /// `x` extracts its members here; `t` and `p` only read.
    pub(super) fn ar(&mut self, args: &[Arg]) {
        let Some((ops, rest)) = args.split_first() else {
            return;
        };
        let ops = ops.text().unwrap_or("").trim_start_matches('-');
        // `a`, `b` and `i` name a member to place the others by, before the archive.
        let skip = usize::from(ops.contains(['a', 'b', 'i']));
        let archive = rest.get(skip);
        let members = rest.get(skip + 1..).unwrap_or(&[]);
        if ops.contains(['d', 'm', 'q', 'r', 's']) {
            if let Some(a) = archive {
                self.write_target(a);
            }
        } else if ops.contains('x') {
            self.extracts("ar x", None, members);
        } else if !ops.contains(['t', 'p']) {
            self.raise(
                CommandClass::ShellComplex,
                "ar without an operation the classifier reads",
            );
        }
    }

    /// `split [FILE [PREFIX]]` and `csplit -f PREFIX FILE PATTERNS`: files named PREFIX and
    /// a suffix.
    pub(super) fn split(&mut self, name: &str, o: &Parsed) {
        let prefix = match name {
            "csplit" => o.values("prefix").first().map(|a| (*a).clone()),
            _ => o.operands.get(1).cloned(),
        };
        let default = if name == "csplit" { "xx" } else { "x" };
        let prefix = prefix.unwrap_or_else(|| Arg::literal(default));
        match prefix.text() {
            Some(p) => self.write_target(&Arg {
                pattern: true,
                ..prefix.with_text(&format!("{p}*"))
            }),
            None => self.write_target(&prefix),
        }
    }

    /// `patch [-d DIR] [ORIGINAL [PATCHFILE]]`: ORIGINAL (under DIR) is written; without it,
    /// the files the patch names, under DIR.
    pub(super) fn patch(&mut self, o: &Parsed) {
        if o.has("dry-run") {
            return;
        }
        let dir = o.values("directory").last().map(|a| (*a).clone());
        let mut inner = self.nested();
        if let Some(d) = &dir {
            match d.text() {
                Some(t) => inner.cwd = Some(inner.land(t)),
                None => inner.cwd_unknown = true,
            }
        }
        match o.operands.first() {
            Some(orig) if o.values("output").is_empty() => inner.write_target(orig),
            Some(_) => {}
            None if !o.values("output").is_empty() => {}
            None => {
                inner.raise(CommandClass::WorkspaceMutating, "patch");
                inner.raise(
                    CommandClass::ShellComplex,
                    "patch writes the files its patch names, which the classifier cannot see",
                );
                if let Some(d) = &dir {
                    self.write_target(d);
                }
                inner.unplaced = true;
            }
        }
        self.absorb(inner);
    }

    /// Members extracted into `dir` (or the working directory): written; none named means
    /// every member, which only the archive knows.
    pub(super) fn extracts(&mut self, what: &str, dir: Option<Arg>, members: &[Arg]) {
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
            self.unplaced = true;
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
