//! One program run with its arguments: the dispatch and the programs that write or delete.

use super::*;

impl Walk<'_> {
    /// Classifies one program run with its (already scanned) arguments.
    pub(super) fn program(&mut self, name: &str, args: &[Arg]) {
        use CommandClass::*;
        let name = match program_name(name) {
            Some(n) => n,
            None => {
                self.raise(
                    ShellComplex,
                    format!("{name} is run by a path outside the system's program directories"),
                );
                return;
            }
        };
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
        match name {
            "env" => self.wrapper_env(args),
            "command" | "builtin" => {
                let o = parse_opts(args, "", &[]);
                if o.has(&["-v", "-V"]) {
                    return;
                }
                let skip = skip_options(args, "", &[]);
                self.run_rest(name, args, skip);
            }
            "nice" => {
                let skip = skip_options(args, "n", &["adjustment"]);
                self.run_rest(name, args, skip);
            }
            "timeout" => {
                let skip = skip_options(args, "sk", &["signal", "kill-after"]);
                // The duration comes before the program.
                self.run_rest(name, args, skip + 1);
            }
            "stdbuf" => {
                let skip = skip_options(args, "ioe", &["input", "output", "error"]);
                self.run_rest(name, args, skip);
            }
            "time" => {
                let skip = skip_options(args, "fo", &["format", "output"]);
                self.run_rest(name, args, skip);
            }
            "xargs" => self.xargs(args),
            "exec" => {
                self.raise(ShellComplex, "exec replaces the shell");
                self.run_rest(name, args, 0);
            }
            "eval" => {
                self.raise(ShellComplex, "eval runs a string as shell code");
                self.inline_shell(args);
            }
            "source" | "." | "trap" | "alias" | "let" | "enable" | "shopt" | "read" | "mapfile"
            | "readarray" | "coproc" | "fc" | "hash" | "sudo" | "doas" | "su" | "pushd"
            | "popd" | "nohup" | "setsid" | "unshare" | "chroot" => self.raise(
                ShellComplex,
                format!("{name} runs or changes code the classifier does not see"),
            ),
            "cd" => self.cd(args),
            "set" => self.set(args),
            "find" => self.find(args),
            "sort" => {
                let o = parse_opts(args, "kotST", &["key", "output", "field-separator"]);
                if o.has(&["--compress-program"]) {
                    self.raise(ShellComplex, "sort --compress-program runs a program");
                }
                for v in o.value(&["-o", "--output"]) {
                    self.write_target(&Arg::literal(v));
                }
            }
            "uniq" => {
                let o = parse_opts(args, "fsw", &["skip-fields", "skip-chars", "check-chars"]);
                if let Some(out) = o.positionals.get(1) {
                    self.write_target(out);
                }
            }
            "xxd" => {
                let o = parse_opts(args, "cglosnC", &[]);
                if let Some(out) = o.positionals.get(1) {
                    self.write_target(out);
                }
            }
            "date" => {
                let o = parse_opts(args, "dfrI", &["date", "file", "reference"]);
                if o.has(&["-s", "--set"]) || o.flags.iter().any(|f| f.starts_with("--set")) {
                    self.raise(WorkspaceMutating, "date --set changes the clock");
                }
            }
            "file" => {
                let o = parse_opts(args, "emfFmP", &[]);
                if o.has(&["-C", "--compile"]) {
                    self.raise(WorkspaceMutating, "file -C writes a magic file");
                }
            }
            "rg" => {
                let o = parse_opts(args, "efgmtTABCEjM", &["pre", "pre-glob", "regexp"]);
                if o.has(&["--pre", "--pre-glob"]) {
                    self.raise(ShellComplex, "rg --pre runs a program on every file");
                }
            }
            "sed" => self.sed(args),
            "git" => self.git(args),
            "tee" => {
                let o = parse_opts(args, "", &[]);
                for p in &o.positionals {
                    self.write_target(p);
                }
            }
            "dd" => {
                for a in args {
                    if let Some(of) = a.text().and_then(|t| t.strip_prefix("of=")) {
                        self.write_target(&Arg {
                            lit: Some(of.to_string()),
                            pattern: a.pattern,
                            raw: a.raw.clone(),
                        });
                    }
                }
            }
            "touch" => self.write_all(args, "dtr", &["date", "reference"]),
            "mkdir" => self.write_all(args, "m", &["mode", "context"]),
            "rmdir" | "shred" | "unlink" => self.write_all(args, "nsu", &["iterations", "size"]),
            "truncate" => self.write_all(args, "sro", &["size", "reference"]),
            "cp" | "mv" | "install" | "ln" => self.copy_like(name, args),
            "rm" => {
                let o = parse_opts(args, "", &[]);
                let recursive = o.has(&["-r", "-R", "--recursive"]);
                if o.has(&["--no-preserve-root"]) {
                    self.raise(Dangerous, "rm --no-preserve-root");
                }
                for p in &o.positionals {
                    if recursive && self.wipes_root(p) {
                        self.raise(
                            Dangerous,
                            format!("rm -r of {}, a grant directory, / or the home", p.raw),
                        );
                    }
                    self.write_target(p);
                }
                if o.positionals.is_empty() {
                    self.raise(WorkspaceMutating, "rm");
                }
            }
            "chmod" | "chown" | "chgrp" => {
                let o = parse_opts(args, "", &["reference"]);
                let recursive = o.has(&["-R", "--recursive"]);
                // The mode or owner comes first unless --reference names it.
                let skip = usize::from(!o.has(&["--reference"]));
                for p in o.positionals.iter().skip(skip) {
                    if recursive && self.wipes_root(p) {
                        self.raise(
                            Dangerous,
                            format!("{name} -R of {}, a grant directory or /", p.raw),
                        );
                    }
                    self.write_target(p);
                }
                self.raise(WorkspaceMutating, name.to_string());
            }
            "kill" => self.kill(args),
            "systemctl" => {
                let stops = [
                    "poweroff",
                    "reboot",
                    "halt",
                    "kexec",
                    "suspend",
                    "hibernate",
                ];
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
                self.shell_inline(args);
            }
            n if is_interpreter(n) => {
                self.raise(ShellComplex, format!("{n} runs a program"));
                self.interpreter_inline(n, args);
            }
            other => self.raise(
                ShellComplex,
                format!("{other} is not a program the classifier knows"),
            ),
        }
    }

    pub(super) fn write_all(&mut self, args: &[Arg], short_val: &str, long_val: &[&str]) {
        let o = parse_opts(args, short_val, long_val);
        self.raise(CommandClass::WorkspaceMutating, "writes files");
        for p in &o.positionals {
            self.write_target(p);
        }
    }

    pub(super) fn copy_like(&mut self, name: &str, args: &[Arg]) {
        let o = parse_opts(
            args,
            "tSmogb",
            &[
                "target-directory",
                "suffix",
                "mode",
                "owner",
                "group",
                "backup",
            ],
        );
        self.raise(CommandClass::WorkspaceMutating, name.to_string());
        let targets = o.value(&["-t", "--target-directory"]);
        let pos = &o.positionals;
        if name == "mv" {
            // A moved file is gone from where it was.
            for p in pos {
                self.write_target(p);
            }
        }
        if !targets.is_empty() {
            for t in targets {
                self.write_target(&Arg::literal(t));
            }
        } else if name == "install" && o.has(&["-d", "--directory"]) {
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
        let o = parse_opts(args, "", &[]);
        match o.positional_texts().as_slice() {
            [dir] if *dir != "-" && o.positionals.len() == 1 && !o.positionals[0].pattern => {
                let next = match &self.cwd {
                    Some(cur) if !dir.starts_with('/') => {
                        Path::new(cur).join(dir).to_string_lossy().into_owned()
                    }
                    _ => dir.to_string(),
                };
                self.cwd = Some(next);
            }
            _ => self.raise(
                CommandClass::ShellComplex,
                "cd to a directory the classifier cannot name",
            ),
        }
    }

    pub(super) fn set(&mut self, args: &[Arg]) {
        let mut i = 0;
        while let Some(a) = args.get(i) {
            i += 1;
            let t = a.text().unwrap_or("");
            let ok_flags = (t.starts_with('-') || t.starts_with('+'))
                && t.len() > 1
                && t[1..].chars().all(|c| "euxvo".contains(c));
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

    pub(super) fn find(&mut self, args: &[Arg]) {
        let mut starts = Vec::new();
        let mut in_expr = false;
        let mut i = 0;
        while let Some(a) = args.get(i) {
            i += 1;
            let Some(t) = a.text() else { continue };
            if !in_expr && !t.starts_with('-') && t != "(" && t != "!" {
                starts.push(a.clone());
                continue;
            }
            in_expr = true;
            match t {
                "-exec" | "-execdir" | "-ok" | "-okdir" => {
                    self.raise(
                        CommandClass::ShellComplex,
                        format!("find {t} runs programs"),
                    );
                }
                "-delete" => {
                    self.raise(CommandClass::WorkspaceMutating, "find -delete");
                    if starts.is_empty() {
                        starts.push(Arg::literal("."));
                    }
                    for s in starts.clone() {
                        self.write_target(&s);
                    }
                }
                "-fprint" | "-fprint0" | "-fprintf" | "-fls" => {
                    if let Some(f) = args.get(i) {
                        self.write_target(f);
                    }
                    i += 1;
                }
                _ => {}
            }
        }
    }
}
