//! Programs that run other programs or code: env, nice, timeout, xargs, `sh -c`, eval.

use super::*;

impl Walk<'_> {
    /// The program after a wrapper's own options, classified as a program of its own.
    pub(super) fn run_rest(&mut self, wrapper: &str, args: &[Arg], skip: usize) {
        let rest = args.get(skip..).unwrap_or(&[]);
        // `command` or `exec` alone do nothing; `timeout 5` alone is an error.
        if let Some((first, tail)) = rest.split_first() {
            match first.text() {
                Some(p) => self.program(p, tail),
                None => self.raise(
                    CommandClass::ShellComplex,
                    format!("{wrapper} runs a program the classifier cannot read"),
                ),
            }
        }
    }

    pub(super) fn wrapper_env(&mut self, args: &[Arg]) {
        let mut i = 0;
        while let Some(a) = args.get(i) {
            let Some(t) = a.text() else { break };
            if t == "-i" || t == "-0" || t == "--null" || t == "--ignore-environment" || t == "-" {
                i += 1;
            } else if t == "-u" {
                i += 2;
            } else if t.starts_with("--unset=") || (t.starts_with("-u") && t.len() > 2) {
                i += 1;
            } else if t.starts_with('-') {
                self.raise(
                    CommandClass::ShellComplex,
                    format!("env {t} is an option the classifier does not read"),
                );
                return;
            } else if let Some((var, _)) = t.split_once('=') {
                if is_sensitive_var(var) {
                    self.raise(
                        CommandClass::ShellComplex,
                        format!("sets {var}, which changes what programs run"),
                    );
                }
                i += 1;
            } else {
                break;
            }
        }
        self.run_rest("env", args, i);
    }

    pub(super) fn xargs(&mut self, args: &[Arg]) {
        let skip = skip_options(
            args,
            "IinLlPdEesa",
            &[
                "replace",
                "max-args",
                "max-lines",
                "max-procs",
                "delimiter",
                "eof",
                "max-chars",
                "arg-file",
            ],
        );
        let mut inner = self.nested();
        inner.run_rest("xargs", args, skip);
        if inner.class > CommandClass::ReadOnly {
            // The names the inner command gets come from its input: its targets are unknown.
            self.raise(
                CommandClass::ShellComplex,
                "xargs runs a command on names read from its input",
            );
        }
        self.absorb(inner);
    }

    /// `sh -c CODE`: the code is classified too, so that `sh -c 'rm -rf /'` is dangerous.
    pub(super) fn shell_inline(&mut self, args: &[Arg]) {
        let mut i = 0;
        while let Some(a) = args.get(i) {
            i += 1;
            let Some(t) = a.text() else { continue };
            if t.starts_with('-') && !t.starts_with("--") && t[1..].contains('c') {
                if let Some(code) = args.get(i).and_then(|a| a.text()) {
                    let mut inner = self.nested();
                    inner.source(code);
                    self.absorb(inner);
                }
                return;
            }
            if !t.starts_with('-') {
                return;
            }
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
            for w in inline_paths(c) {
                self.push_write(w);
            }
        }
    }
}
