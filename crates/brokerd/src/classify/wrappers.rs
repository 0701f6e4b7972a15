//! Programs that run other programs or code: env, nice, timeout, xargs, `sh -c`, eval.

use super::opts::Parsed;
use super::specs::Effect;
use super::*;

impl Walk<'_> {
    /// The command a wrapper runs, classified as a program of its own: the wrapper is at least
    /// as bad as what it runs.
    pub(super) fn run_rest(&mut self, wrapper: &str, rest: &[Arg]) {
        // `command` or `exec` alone do nothing; `timeout 5` alone is an error.
        if let Some((first, tail)) = rest.split_first() {
            match first.text() {
                Some(p) => {
                    if self.depth > MAX_DEPTH {
                        self.beyond(Bound::Depth);
                        return;
                    }
                    self.depth += 1;
                    self.program(p, tail);
                    self.depth -= 1;
                }
                None => self.raise(
                    CommandClass::ShellComplex,
                    format!("{wrapper} runs a program the classifier cannot read"),
                ),
            }
        }
    }

    /// env, nice, nohup, timeout, stdbuf, time, command, exec, xargs: their command.
    pub(super) fn wrapped(&mut self, name: &str, p: &Parsed) {
        let mut rest: &[Arg] = &p.operands;
        match name {
            "command" | "builtin" if p.with_effect(Effect::Query).next().is_some() => return,
            "exec" => self.raise(CommandClass::ShellComplex, "exec replaces the shell"),
            "sudo" | "doas" | "setsid" => self.raise(
                CommandClass::ShellComplex,
                format!("{name} runs a program as another user or session"),
            ),
            "timeout" => rest = rest.get(1..).unwrap_or(&[]),
            "env" => {
                // `env -S 'CMD ARGS'` splits its value into the command it runs.
                if let Some(split) = p.values("split-string").first() {
                    if let Some(text) = split.text() {
                        let words: Vec<&str> = rest.iter().map(|a| a.raw.as_str()).collect();
                        let mut inner = self.nested();
                        inner.source(&format!("{text} {}", words.join(" ")));
                        self.absorb(inner);
                    }
                    return;
                }
                if !p.values("chdir").is_empty() {
                    self.cwd_unknown = true;
                    self.raise(
                        CommandClass::ShellComplex,
                        "env -C runs the command in another directory",
                    );
                }
                while let Some((first, tail)) = rest.split_first() {
                    let Some((var, _)) = first.text().and_then(|t| t.split_once('=')) else {
                        break;
                    };
                    if is_sensitive_var(var) {
                        self.raise(
                            CommandClass::ShellComplex,
                            format!("sets {var}, which changes what programs run"),
                        );
                    }
                    rest = tail;
                }
            }
            "xargs" => {
                self.xargs(rest);
                return;
            }
            _ => {}
        }
        self.run_rest(name, rest);
    }

    /// `busybox APPLET ARGS` is the applet; `busybox` alone and `--list` only print.
    pub(super) fn busybox(&mut self, args: &[Arg]) {
        match args.first().map(|a| a.text()) {
            None => {}
            Some(Some("--list" | "--list-full" | "--help")) => {}
            Some(Some(t)) if t.starts_with('-') => self.raise(
                CommandClass::ShellComplex,
                format!("busybox {t} is an option the classifier does not read"),
            ),
            Some(_) => self.run_rest("busybox", args),
        }
    }

    /// xargs' command gets more operands from the input: names the classifier cannot see.
    fn xargs(&mut self, rest: &[Arg]) {
        let mut inner = self.nested();
        inner.input_operands = true;
        inner.run_rest("xargs", rest);
        if inner.class > CommandClass::ReadOnly {
            self.raise(
                CommandClass::ShellComplex,
                "xargs runs a command on names read from its input",
            );
        }
        self.absorb(inner);
    }

    /// `sh [OPTIONS] -c [--] CODE`: the code is classified too, so that `sh -c 'rm -rf /'` is
    /// dangerous however the options are spelled.
    pub(super) fn shell_inline(&mut self, args: &[Arg]) {
        let mut i = 0;
        let mut inline = false;
        let mut operand = None;
        while let Some(a) = args.get(i) {
            i += 1;
            let Some(t) = a.text() else {
                operand = Some(i - 1);
                break;
            };
            if t == "--" || t == "-" {
                operand = Some(i);
                break;
            }
            if let Some(long) = t.strip_prefix("--") {
                if matches!(long, "rcfile" | "init-file") {
                    i += 1;
                }
                continue;
            }
            if (t.starts_with('-') || t.starts_with('+')) && t.len() > 1 {
                inline |= t.starts_with('-') && t.contains('c');
                // `-o OPTION` and bash's `-O SHOPT` take the next word.
                i += t.matches(['o', 'O']).count();
                continue;
            }
            operand = Some(i - 1);
            break;
        }
        if !inline {
            return;
        }
        if let Some(at) = operand {
            self.positional_commands(args.get(at..).unwrap_or(&[]));
        }
        match operand.and_then(|at| args.get(at)) {
            Some(code) => match code.text() {
                Some(text) => {
                    let mut inner = self.nested();
                    inner.source(text);
                    self.absorb(inner);
                }
                None => self.raise(
                    CommandClass::ShellComplex,
                    "a shell runs code the classifier cannot read",
                ),
            },
            None => self.raise(CommandClass::ShellComplex, "sh -c without code"),
        }
    }

    pub(super) fn inline_shell(&mut self, args: &[Arg]) {
        let texts: Option<Vec<&str>> = args.iter().map(|a| a.text()).collect();
        if let Some(texts) = texts {
            let mut inner = self.nested();
            inner.source(&texts.join(" "));
            self.absorb(inner);
        }
    }

    pub(super) fn interpreter_inline(&mut self, name: &str, args: &[Arg]) {
        let opts = interpreter_code_opts(name).unwrap_or(&[]);
        let awk = name.ends_with("awk");
        let mut code: Vec<&str> = Vec::new();
        let mut i = 0;
        while let Some(a) = args.get(i) {
            i += 1;
            let Some(t) = a.text() else { continue };
            if opts.contains(&t) {
                if let Some(c) = args.get(i).and_then(|a| a.text()) {
                    code.push(c);
                }
                i += 1;
            } else if awk && (t == "-v" || t == "-F" || t == "-f") {
                i += 1;
            } else if awk && !t.starts_with('-') {
                code.push(t);
                break;
            }
        }
        for c in code {
            self.inline_code(c);
        }
    }

    /// `sh -c CODE ARG0 ARGS...`: CODE may run its arguments (`"$@"`, `$0 $1`), so every tail
    /// of them is read as a command as well, when CODE names them or cannot be read.
    fn positional_commands(&mut self, code_and_args: &[Arg]) {
        let Some((code, rest)) = code_and_args.split_first() else {
            return;
        };
        let names_them = code.text().is_none_or(|c| {
            c.contains("$@")
                || c.contains("$*")
                || c.contains("${@")
                || c.contains("${*")
                || (0..10).any(|d| c.contains(&format!("${d}")) || c.contains(&format!("${{{d}")))
        });
        if !names_them {
            return;
        }
        for start in 0..rest.len().min(16) {
            let words: Vec<&str> = rest[start..].iter().map(|a| a.raw.as_str()).collect();
            let mut inner = self.nested();
            inner.source(&words.join(" "));
            if inner.class == CommandClass::Dangerous {
                self.absorb(inner);
                return;
            }
        }
    }
}
