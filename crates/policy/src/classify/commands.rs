//! One program run with its arguments: the dispatch and the programs that write or delete.

use super::archives::COMPRESSORS;
use super::editors::is_editor;
use super::opts::{parse, Parsed, LENIENT};
use super::specs::{spec_of, Effect, Operands, Spec};
use super::*;

/// Patterns pkill and killall match every process name by.
const EVERY_NAME: &[&str] = &[".", ".*", "^", "", ".+", "^.*$"];

/// xxd's option letters that take a value, their long spellings, and its other letters.
const XXD_VALUED: &str = "cglnosR";
const XXD_LONG: &[&str] = &["-cols", "-groupsize", "-len", "-name", "-offset", "-seek"];
const XXD_FLAGS: &str = "abCdeEhiprPuv-";

impl Walk<'_> {
    /// Classifies one program run with its (already scanned) arguments.
    pub(super) fn program(&mut self, word: &str, args: &[Arg]) {
        use CommandClass::*;
        if !self.spend(1 + args.len() as u64) {
            return;
        }
        let pn = program_name(word, self.cwd.as_deref());
        let name = pn.name.as_str();
        if !pn.system {
            // Read as the program its name says (`/tmp/rm -rf /` is still dangerous), and as
            // one that may be any (`tools/cat -rf /srv/notes` may be a copied rm): no plain
            // reader's short cut, and its arguments read as an unknown program's are.
            self.raise(
                ShellComplex,
                format!("{word} is run by a path outside the system's program directories"),
            );
            if is_known_program(name) || PLAIN_READERS.contains(&name) {
                self.args_as_commands(word, args, false);
            }
        }
        if !word.contains('/') && (self.call_alias(word, args) || self.call_function(word, args)) {
            return;
        }
        // `./x.sh` the command itself writes: what it writes there runs.
        if word.contains('/') {
            self.run_written("sh", &Arg::literal(word));
        }
        if PLAIN_READERS.contains(&name) {
            return;
        }
        // Past the plain readers, an argument the classifier cannot read could be any option.
        if let Some(a) = args.iter().find(|a| a.lit.is_none()) {
            self.raise(
                ShellComplex,
                format!(
                    "{name} gets an argument the classifier cannot read ({})",
                    a.raw
                ),
            );
        }
        if let Some(spec) = spec_of(name) {
            match &spec.runs {
                Some(runs) => self.wrapped(name, spec, runs, args),
                None => self.by_spec(name, spec, args),
            }
            return;
        }
        self.by_name(name, args, pn.system);
    }

    /// A program the spec table does not know, read by its name: the shell's builtins, the
    /// programs read by a module of their own, shells, interpreters, editors, and the ones
    /// that stop the machine or rewrite a disk; any other is an unknown program.
    fn by_name(&mut self, name: &str, args: &[Arg], system: bool) {
        use CommandClass::*;
        match name {
            "busybox" | "toybox" => self.busybox(name, args),
            "eval" => self.run_code(name, args),
            "source" | "." => {
                self.raise(ShellComplex, format!("{name} runs shell code"));
                self.script_operand(name, args.first());
            }
            "pushd" => {
                self.raise(
                    ShellComplex,
                    format!("{name} changes the working directory"),
                );
                self.cd(args);
            }
            "popd" => {
                self.cwd_unknown = true;
                self.raise(
                    ShellComplex,
                    format!("{name} changes the working directory"),
                );
            }
            "alias" | "trap" => {
                self.raise(ShellComplex, format!("{name} sets code that runs later"));
                // The code is read as if it ran here: `alias x='rm -rf /'; x`.
                let code = args
                    .iter()
                    .filter_map(|a| a.text())
                    .filter_map(|t| match name {
                        "alias" => t.split_once('=').map(|(_, v)| v),
                        _ => Some(t),
                    });
                for text in code.collect::<Vec<_>>() {
                    let mut inner = self.nested();
                    inner.source(text);
                    self.absorb(inner);
                }
            }
            "let" | "enable" | "shopt" | "read" | "mapfile" | "readarray" | "coproc" | "fc"
            | "hash" => self.raise(
                ShellComplex,
                format!("{name} runs or changes code the classifier does not see"),
            ),
            "cd" => self.cd(args),
            "set" => self.set(args),
            "find" => self.find(args),
            "xxd" => self.xxd(args),
            "git" => self.git(args),
            "dd" => {
                for a in args {
                    if let Some(of) = a.text().and_then(|t| t.strip_prefix("of=")) {
                        self.write_target(&a.with_text(of));
                    }
                }
            }
            "kill" => self.kill(args),
            "pkill" | "killall" => {
                // A pattern every process name matches signals every process, as kill -1 does.
                let everyone = args
                    .iter()
                    .filter_map(|a| a.text())
                    .filter(|t| !t.starts_with('-'))
                    .any(|t| EVERY_NAME.contains(&t));
                match everyone {
                    true => self.raise(Dangerous, format!("{name} signals every process")),
                    false => self.raise(ShellComplex, format!("{name} signals other processes")),
                }
            }
            "systemctl" => {
                let stops = Names("poweroff reboot halt kexec suspend hibernate");
                if args
                    .iter()
                    .any(|a| a.text().is_some_and(|t| stops.contains(&t)))
                {
                    self.raise(Dangerous, "systemctl stops the machine");
                } else {
                    self.raise(ShellComplex, "systemctl");
                }
            }
            "init" | "telinit" => {
                if args.iter().any(|a| matches!(a.text(), Some("0" | "6"))) {
                    self.raise(Dangerous, format!("{name} stops the machine"));
                } else {
                    self.raise(ShellComplex, name.to_string());
                }
            }
            n if SYSTEM_STOPPERS.contains(&n) => {
                self.raise(Dangerous, format!("{n} stops the machine"))
            }
            n if n.starts_with("mkfs") || DISK_WRECKERS.contains(&n) => {
                self.raise(Dangerous, format!("{n} rewrites a disk"))
            }
            n if SHELLS.contains(&n) => {
                self.raise(
                    ShellComplex,
                    format!("{n} runs code the classifier does not see"),
                );
                // A shell first runs the file BASH_ENV or ENV names.
                for var in ["BASH_ENV", "ENV"] {
                    for file in self.scope.texts(var) {
                        self.run_written(n, &Arg::literal(&file));
                    }
                }
                self.shell_inline(n, args);
            }
            n if is_interpreter(n) => {
                self.raise(ShellComplex, format!("{n} runs a program"));
                if !self.script_interpreter(n, args) {
                    self.interpreter_inline(n, args);
                }
            }
            n if is_editor(n) => self.editor(n, args),
            other => self.unknown_program(other, args, system),
        }
    }

    pub(super) fn kill(&mut self, args: &[Arg]) {
        let texts: Vec<&str> = args.iter().filter_map(|a| a.text()).collect();
        // `kill -1` alone (and `kill -9 -1`, `kill -- -1`) signal every process.
        let everyone = match texts.as_slice() {
            ["-1"] => true,
            _ => {
                let mut pids = Vec::new();
                let mut i = 0;
                let mut signal_seen = false;
                while let Some(t) = texts.get(i) {
                    i += 1;
                    if *t == "--" {
                        pids.extend(texts.get(i..).unwrap_or(&[]).iter().copied());
                        break;
                    }
                    if (*t == "-s" || *t == "-n") && !signal_seen {
                        i += 1;
                        signal_seen = true;
                    } else if t.starts_with('-') && !signal_seen && t.len() > 1 {
                        signal_seen = true;
                    } else {
                        pids.push(*t);
                    }
                }
                pids.contains(&"-1")
            }
        };
        if everyone {
            self.raise(CommandClass::Dangerous, "kill -1 signals every process");
        } else {
            self.raise(CommandClass::ShellComplex, "kill signals other processes");
        }
    }

    pub(super) fn cd(&mut self, args: &[Arg]) {
        let o = parse("cd", &LENIENT, args);
        match o.operand_texts().as_slice() {
            [dir] if *dir != "-" && o.operands.len() == 1 && !o.operands[0].pattern => {
                let next = match &self.cwd {
                    Some(cur) if !dir.starts_with('/') => {
                        Path::new(cur).join(dir).to_string_lossy().into_owned()
                    }
                    _ => dir.to_string(),
                };
                // An absolute directory is known whatever came before.
                self.cwd_unknown &= !dir.starts_with('/');
                self.cwd = Some(next);
            }
            _ => {
                self.cwd_unknown = true;
                self.raise(
                    CommandClass::ShellComplex,
                    "cd to a directory the classifier cannot name",
                )
            }
        }
    }

    /// `set -e`, `set -o pipefail`; `set -- WORDS` sets the positional parameters (`vars`).
    pub(super) fn set(&mut self, args: &[Arg]) {
        let mut i = 0;
        while let Some(a) = args.get(i) {
            i += 1;
            let t = a.text().unwrap_or("");
            if t == "--" || !(t.starts_with('-') || t.starts_with('+')) {
                return;
            }
            let ok_flags = t.len() > 1 && t[1..].chars().all(|c| "euxvo".contains(c));
            if !ok_flags {
                self.raise(
                    CommandClass::ShellComplex,
                    "set with arguments the classifier does not read",
                );
                return;
            }
            if t.ends_with('o') {
                let opt = args.get(i).and_then(|a| a.text()).unwrap_or("");
                i += 1;
                if !["pipefail", "errexit", "nounset", "xtrace", "verbose"].contains(&opt) {
                    self.raise(
                        CommandClass::ShellComplex,
                        format!("set -o {opt} is an option the classifier does not read"),
                    );
                    return;
                }
            }
        }
    }

    /// A program the spec table knows: its options' effects, then its operands by role.
    fn by_spec(&mut self, name: &str, spec: &Spec, args: &[Arg]) {
        use CommandClass::*;
        let p = parse(name, spec, args);
        self.option_effects(name, &p);
        let recursive = p.with_effect(Effect::Recursive).next().is_some();
        let writer = matches!(
            spec.operands,
            Operands::Written
                | Operands::Rewritten { .. }
                | Operands::Emptied
                | Operands::Deleted
                | Operands::DeletedTrees
                | Operands::Changed
                | Operands::Copied
        );
        if writer && self.input_operands {
            self.raise(
                ShellComplex,
                format!(
                    "{name} changes names read from the input, which the classifier cannot see"
                ),
            );
            self.unplaced = true;
        }
        match spec.operands {
            Operands::Read => {}
            Operands::Written => {
                // touch and mkdir make files empty or directories: nothing that runs.
                self.in_meta = matches!(name, "touch" | "mkdir");
                for t in &p.operands {
                    self.write_target(t);
                }
                self.in_meta = false;
            }
            Operands::Emptied => {
                self.raise(WorkspaceMutating, name.to_string());
                self.deletes(name, false, &p.operands);
            }
            Operands::Deleted => {
                self.raise(WorkspaceMutating, name.to_string());
                self.deletes(name, recursive, &p.operands);
            }
            Operands::DeletedTrees => {
                self.raise(WorkspaceMutating, name.to_string());
                self.deletes(name, true, &p.operands);
            }
            Operands::Changed => {
                self.raise(WorkspaceMutating, name.to_string());
                // The mode or owner comes first unless --reference names it.
                let skip = usize::from(!p.has("reference"));
                self.in_meta = true;
                self.deletes(name, recursive, p.operands.get(skip..).unwrap_or(&[]));
                self.in_meta = false;
            }
            Operands::Copied => self.copied(name, &p),
            Operands::Rewritten { leading, always } => {
                let checks = p.with_effect(Effect::Query).next().is_some();
                let asked = p.with_effect(Effect::InPlace).next().is_some();
                if (always && !checks) || asked {
                    for t in p.operands.get(leading..).unwrap_or(&[]) {
                        self.write_target(t);
                    }
                }
            }
            // Runners are read by `wrapped` before the spec is parsed here.
            Operands::Command => {}
            Operands::Own => match name {
                "sed" => self.sed(&p),
                "uniq" => {
                    if let Some(out) = p.operands.get(1) {
                        self.write_target(out);
                    }
                }
                "tar" | "bsdtar" | "gtar" => self.tar(&p),
                "zip" => self.zip(&p, args),
                "unzip" => self.unzip(&p, args),
                "mknod" => self.mknod(&p),
                "make" | "gmake" | "ninja" => self.make(name, &p, args),
                "curl" | "wget" => self.download(name, &p),
                "split" | "csplit" => self.split(name, &p),
                "7z" | "7za" | "7zr" => self.sevenzip(args),
                "cpio" => self.cpio(&p),
                "ar" => self.ar(args),
                n if COMPRESSORS.iter().any(|(c, _)| *c == n) => self.compressor(name, &p),
                "rsync" => self.rsync(&p),
                "patch" => self.patch(&p),
                n if n.ends_with("awk") => self.awk(n, &p),
                other => self.raise(
                    ShellComplex,
                    format!("{other} has no reader in the classifier"),
                ),
            },
        }
    }

    /// What a program's options do beyond how it reads: the files they write, the programs
    /// they run, the guards they remove. The problems of reading them make it `ShellComplex`.
    pub(super) fn option_effects(&mut self, name: &str, p: &Parsed) {
        use CommandClass::*;
        for problem in &p.problems {
            self.raise(ShellComplex, problem.clone());
        }
        for g in &p.given {
            match g.effect() {
                Effect::Write => {
                    if let Some(v) = &g.value {
                        self.write_target(v);
                    }
                }
                Effect::Run => {
                    self.raise(ShellComplex, format!("{name} {} runs a program", g.spelled))
                }
                // The command an option names is read as code (`tar --to-command='rm -rf /'`).
                Effect::Command | Effect::Action => {
                    let shown = format!("{name} {}", g.spelled);
                    self.raise(ShellComplex, format!("{shown} runs a command"));
                    let code = match (g.effect(), &g.value) {
                        (Effect::Action, Some(v)) => match v.text() {
                            Some(t) => t.strip_prefix("exec=").map(|c| v.with_text(c)),
                            // An action the classifier cannot read may be `exec=`.
                            None => Some(v.clone()),
                        },
                        (_, v) => v.clone(),
                    };
                    if let Some(code) = code {
                        self.run_code(&shown, std::slice::from_ref(&code));
                    }
                }
                Effect::Mutate => self.raise(WorkspaceMutating, format!("{name} {}", g.spelled)),
                Effect::Unguard => self.raise(
                    Dangerous,
                    format!("{name} {} removes the guard for /", g.spelled),
                ),
                _ => {}
            }
        }
    }

    /// make and ninja run recipes the classifier does not see: `ShellComplex`, and their
    /// arguments may name what they run. A makefile the command itself writes is read as
    /// code; `-C DIR` builds in DIR, which is written.
    fn make(&mut self, name: &str, p: &Parsed, args: &[Arg]) {
        let files: Vec<Arg> = match p.values("file").first() {
            Some(f) => vec![(*f).clone()],
            None => ["GNUmakefile", "makefile", "Makefile"]
                .iter()
                .map(|m| Arg::literal(m))
                .collect(),
        };
        let mut inner = self.nested();
        for d in p.values("directory") {
            inner.write_target(d);
            match d.text() {
                Some(t) => inner.cwd = Some(inner.land(t)),
                None => inner.cwd_unknown = true,
            }
        }
        for f in &files {
            inner.run_written("make", f);
        }
        self.absorb(inner);
        self.raise(
            CommandClass::ShellComplex,
            format!("{name} runs the recipes of a makefile"),
        );
        self.args_as_commands(name, args, true);
    }

    /// curl and wget: a download (the network is the grant's business), and the files they
    /// save it to: `-o FILE`, or a name taken from the URL (`curl -O`, wget by default).
    fn download(&mut self, name: &str, p: &Parsed) {
        self.raise(CommandClass::ShellComplex, format!("{name} downloads"));
        let named = p
            .values("output")
            .into_iter()
            .chain(p.values("output-document"));
        let named: Vec<Arg> = named.filter(|a| a.text() != Some("-")).cloned().collect();
        for f in &named {
            self.write_target(f);
        }
        let from_url = match name {
            "curl" => p.has_any(&["remote-name", "remote-name-all"]),
            _ => p.values("output-document").is_empty(),
        };
        if !from_url {
            return;
        }
        let dir = p
            .values("output-dir")
            .into_iter()
            .chain(p.values("directory-prefix"))
            .last()
            .and_then(|d| d.text());
        for url in &p.operands {
            let base = url.text().and_then(|u| {
                let path = u.split(['?', '#']).next().unwrap_or(u);
                path.rsplit('/')
                    .next()
                    .filter(|b| !b.is_empty() && !path.ends_with("//"))
            });
            let file = match (dir, base) {
                (Some(d), Some(b)) => Path::new(d).join(b).to_string_lossy().into_owned(),
                (None, Some(b)) => b.to_string(),
                (Some(d), None) => d.to_string(),
                (None, None) => "index.html".to_string(),
            };
            self.write_target(&url.with_text(&file));
        }
        // A recursive download writes what the pages link to.
        self.unplaced |= p.has_any(&["recursive", "mirror"]);
    }

    /// `xxd [OPTIONS] [INFILE [OUTFILE]]`: xxd reads an option by its first letter (`-l 16`,
    /// `-len 16`, `-l16`); OUTFILE is written.
    fn xxd(&mut self, args: &[Arg]) {
        let mut operands = Vec::new();
        let mut i = 0;
        while let Some(a) = args.get(i) {
            i += 1;
            let t = match a.text() {
                Some(t) if t.starts_with('-') && t.len() > 1 => t,
                _ => {
                    operands.push(a.clone());
                    continue;
                }
            };
            let letter = t.chars().nth(1).unwrap_or('-');
            if XXD_VALUED.contains(letter) {
                // The value is the next word after `-l` or `-len`, else attached.
                if t.len() == 2 || XXD_LONG.contains(&t) {
                    i += 1;
                }
            } else if !XXD_FLAGS.contains(letter) {
                self.raise(
                    CommandClass::ShellComplex,
                    format!("xxd {t} is an option the classifier does not know"),
                );
            }
        }
        if let Some(out) = operands.get(1).filter(|o| o.text() != Some("-")) {
            self.write_target(out);
        }
    }

    /// `mknod NAME TYPE [MAJOR MINOR]`: a block or character device is a way to a disk or
    /// to the kernel, which any later write reaches.
    fn mknod(&mut self, p: &Parsed) {
        if let Some(name) = p.operands.first() {
            self.write_target(name);
        }
        match p.operands.get(1).and_then(|a| a.text()) {
            Some("p") => {}
            _ => self.raise(CommandClass::Dangerous, "mknod makes a device file"),
        }
    }

    /// Targets of rm, rmdir, chmod and the like; a recursive one of a root is dangerous, and so
    /// is one whose targets come from the command's input.
    pub(super) fn deletes(&mut self, name: &str, recursive: bool, targets: &[Arg]) {
        use CommandClass::*;
        for t in targets {
            // `{}` of a find no test narrows is the start and everything under it; what a
            // narrowing test leaves is no grant directory.
            let whole = recursive || t.found == Found::Every;
            if whole && t.found != Found::Some && self.wipes_root(t) {
                let what = match t.found {
                    Found::No => format!("{name} -r of {}", t.raw),
                    _ => format!(
                        "{name} of everything find finds under {}",
                        t.text().unwrap_or(&t.raw)
                    ),
                };
                self.raise(
                    Dangerous,
                    format!("{what}, a grant directory, / or the home"),
                );
            } else if t.pattern && t.found == Found::No && name != "rmdir" && self.empties_root(t) {
                self.raise(
                    Dangerous,
                    format!("{name} of every entry of a grant directory ({})", t.raw),
                );
            }
            self.write_target(t);
            if whole {
                if let Some(shown) = self.writes.last().cloned() {
                    self.recursive.push(shown);
                }
            }
        }
        // A link made earlier in the command may lead to a root: `ln -s / x; rm -rf x/`.
        let linked_root = self
            .links
            .clone()
            .iter()
            .any(|(_, l)| self.wipes_root(&Arg::literal(l)));
        if recursive && linked_root && !targets.is_empty() {
            self.raise(
                Dangerous,
                format!("{name} -r in a command that links to a grant directory or /"),
            );
        }
        if recursive && self.input_operands {
            self.raise(
                Dangerous,
                format!("{name} -r of names read from the input, which may be a grant directory"),
            );
        }
    }

    /// cp, mv, install and ln: what they write, and the links ln makes.
    fn copied(&mut self, name: &str, o: &Parsed) {
        self.raise(CommandClass::WorkspaceMutating, name.to_string());
        let targets = o.values("target-directory");
        let pos = &o.operands;
        if name == "mv" {
            // A moved file is gone from where it was; moved out of the grant, a root's
            // contents are gone from it, and a root moved anywhere is gone as a root.
            let dest = targets.last().copied().or(pos.last());
            let sources = if targets.is_empty() && !pos.is_empty() {
                &pos[..pos.len() - 1]
            } else {
                &pos[..]
            };
            let emptied = |w: &Self, s: &Arg| s.found != Found::Some && w.empties_root(s);
            if dest.is_some_and(|d| self.outside_roots(d))
                && sources.iter().any(|s| emptied(self, s))
            {
                self.raise(
                    CommandClass::Dangerous,
                    "mv takes a grant directory's contents out of the grant",
                );
            }
            if let Some(root) = sources.iter().find(|s| self.names_root(s)) {
                self.raise(
                    CommandClass::Dangerous,
                    format!(
                        "mv moves {}, a grant directory or one holding it, away",
                        root.raw
                    ),
                );
            }
            for p in pos {
                self.write_target(p);
            }
        }
        if matches!(name, "ln" | "link") || (name == "cp" && o.has_any(&["symbolic-link", "link"]))
        {
            let symbolic = o.has_any(&["symbolic", "symbolic-link"]);
            let (sources, dir) = match (targets.last(), pos.split_last()) {
                (Some(t), _) => (&pos[..], t.text()),
                (None, Some((last, rest))) if !rest.is_empty() => (rest, last.text()),
                _ => (&pos[..], None),
            };
            let base = |s: &Arg| {
                s.text()
                    .and_then(|t| Path::new(t).file_name())
                    .map(|b| b.to_string_lossy().into_owned())
                    .unwrap_or_default()
            };
            // The link is DEST itself, or DEST/NAME when DEST is a directory.
            let into_dir =
                !targets.is_empty() || sources.len() > 1 || dir.is_some_and(|d| d.ends_with('/'));
            for s in sources {
                match dir {
                    Some(d) if into_dir => {
                        let inside = Path::new(d).join(base(s)).to_string_lossy().into_owned();
                        self.made_link(s, &inside, symbolic);
                    }
                    Some(d) => self.made_link(s, d, symbolic),
                    None => self.made_link(s, &base(s), symbolic),
                }
            }
        }
        if self.input_operands && targets.is_empty() {
            self.raise(
                CommandClass::ShellComplex,
                format!("{name} writes to names read from its input"),
            );
        }
        self.in_link = name == "ln";
        if !targets.is_empty() {
            for t in targets {
                self.write_target(t);
            }
        } else if name == "install" && o.has("directory") {
            for p in pos {
                self.write_target(p);
            }
        } else if let Some(last) = pos.last() {
            if pos.len() >= 2 {
                self.write_target(last);
            } else if name == "ln" {
                // `ln -s TARGET` makes a link named after TARGET in the working directory.
                let base = last
                    .text()
                    .and_then(|t| Path::new(t).file_name())
                    .map(|b| b.to_string_lossy().into_owned());
                match base {
                    Some(b) => self.write_target(&Arg::literal(&b)),
                    None => self.write_target(last),
                }
            }
        }
        self.in_link = false;
    }
}
