//! Programs that run other programs or code: runners (`runners`), busybox, xargs, `sh -c`,
//! eval, and programs the classifier cannot name.

use super::opts::{parse, Parsed};
use super::redirects::fed_by;
use super::specs::{Before, Effect, Runs, Shape, Spec};
use super::*;

/// What a runner runs, read from its arguments.
#[derive(Debug, Clone)]
pub(super) enum What {
    /// Nothing: a query (`command -v`), or no command.
    Nothing,
    /// A program word and its arguments.
    Program(Vec<Arg>),
    /// Shell code: the words joined by spaces (`su -c CODE`, `watch WORDS`).
    Code(Vec<Arg>),
    /// A shell with these arguments; with none it reads its input (a bare `unshare`).
    Shell(Vec<Arg>),
}

/// A runner's arguments, split.
pub(super) struct Unwrapped<'s> {
    pub(super) parsed: Parsed<'s>,
    /// Each reading of what it runs, the likelier first (two where `Before::Maybe` leaves it
    /// open).
    pub(super) runs: Vec<What>,
    /// Files the runner itself writes (script's log, sudo -e's files).
    pub(super) files: Vec<Arg>,
    /// NAME=VALUE operands that set the command's environment (env).
    pub(super) assignments: Vec<String>,
    /// Directories the command runs in, and directories that are its `/`.
    pub(super) chdir: Vec<Arg>,
    pub(super) root: Vec<Arg>,
    /// The command runs in a login session, in a home directory.
    pub(super) login: bool,
}

/// Splits a runner's arguments by its spec: options (`-` and NAME=VALUE where the runner takes
/// them, in any order), the operands before the command, and what it runs.
pub(super) fn unwrap<'s>(name: &str, spec: &'s Spec, runs: &Runs, args: &[Arg]) -> Unwrapped<'s> {
    let mut parsed = parse(name, spec, args);
    let mut ops = std::mem::take(&mut parsed.operands);
    let (assignments, mut login) = leading(name, spec, runs, &mut parsed, &mut ops);
    let mut root = Vec::new();
    let readings = readings(name, spec, runs, ops, &mut parsed, &mut root);
    login |= parsed.with_effect(Effect::Login).next().is_some();
    let values = |effect: Effect| -> Vec<Arg> {
        parsed
            .with_effect(effect)
            .filter_map(|g| g.value.clone())
            .collect()
    };
    let chdir = values(Effect::Chdir);
    root.extend(values(Effect::Root));
    let code = values(Effect::Code);
    let split = values(Effect::Split);
    let shell = parsed.with_effect(Effect::Shell).next().is_some();
    let query = parsed.with_effect(Effect::Query).next().is_some();
    let edit = parsed.with_effect(Effect::Edit).next().is_some();
    let mut files = Vec::new();
    let mut what = Vec::new();
    for ops in readings {
        let given = |option: &str| parsed.has(option);
        // `script LOG -c CODE`: its files whatever it runs.
        if let Shape::Files(default) = runs.shape {
            match ops.is_empty() {
                true if !default.is_empty() => files.push(Arg::literal(default)),
                _ => files.extend(ops.iter().cloned()),
            }
        }
        what.push(if query {
            What::Nothing
        } else if edit {
            files.extend(ops);
            What::Nothing
        } else if !code.is_empty() {
            What::Code(code.clone())
        } else if let Some(first) = split.first() {
            // `env -S 'CMD ARGS' MORE`: the value split into words, then the operands as
            // they were written.
            let mut words = vec![first.clone()];
            words.extend(ops.iter().map(|a| Arg::literal(&a.raw)));
            What::Code(words)
        } else if ops
            .first()
            .and_then(|a| a.text())
            .is_some_and(|t| runs.code_after.contains(&t))
        {
            What::Code(ops.get(1).cloned().into_iter().collect())
        } else {
            let command = runs.command_with.is_some_and(given);
            match runs.shape {
                Shape::ShellArgs if !command => What::Shell(ops),
                Shape::Files(_) => match runs.bare_shell {
                    true => What::Shell(Vec::new()),
                    false => What::Nothing,
                },
                Shape::Joined(unless) if !unless.is_some_and(given) && !ops.is_empty() => {
                    What::Code(ops)
                }
                _ if ops.is_empty() && (runs.bare_shell || shell) => What::Shell(Vec::new()),
                _ if ops.is_empty() => What::Nothing,
                _ => What::Program(ops),
            }
        });
    }
    Unwrapped {
        parsed,
        runs: what,
        files,
        assignments,
        chdir,
        root,
        login,
    }
}

/// `env - X=1 -u Y rm`: a lone dash, assignments and more options, in any order, taken off
/// the front of `ops`: the assignments, and whether the dash asks for a login.
fn leading<'s>(
    name: &str,
    spec: &'s Spec,
    runs: &Runs,
    parsed: &mut Parsed<'s>,
    ops: &mut Vec<Arg>,
) -> (Vec<String>, bool) {
    let mut assignments = Vec::new();
    let mut login = false;
    for _ in 0..ops.len() {
        let Some(t) = ops.first().and_then(|a| a.text()) else {
            break;
        };
        if t == "-" && runs.dash.is_some() {
            login |= runs.dash == Some("login");
            ops.remove(0);
        } else if runs.assignments && t.contains('=') && !t.starts_with('-') {
            assignments.push(t.to_string());
            ops.remove(0);
        } else if runs.assignments && t.starts_with('-') && t.len() > 1 {
            *ops = reparse(name, spec, ops, parsed);
        } else {
            break;
        }
    }
    (assignments, login)
}

/// The ways the operands may be read as what the runner runs, after the operands its spec
/// puts first (`Before`); a root directory among them goes to `root`.
fn readings<'s>(
    name: &str,
    spec: &'s Spec,
    runs: &Runs,
    ops: Vec<Arg>,
    parsed: &mut Parsed<'s>,
    root: &mut Vec<Arg>,
) -> Vec<Vec<Arg>> {
    // With the user given by an option (`runuser -u USER`), no operand comes before the command.
    let before = match runs.command_with {
        Some(option) if parsed.has(option) => Before::Nothing,
        _ => runs.before,
    };
    let after = |n: usize, ops: &[Arg], parsed: &mut Parsed<'s>| -> Vec<Arg> {
        let rest = ops.get(n..).unwrap_or(&[]);
        // `flock FILE -c CODE`: the words that make the next one code are not options.
        match rest.first().and_then(|a| a.text()) {
            Some(t) if runs.code_after.contains(&t) => rest.to_vec(),
            _ => reparse(name, spec, rest, parsed),
        }
    };
    match before {
        Before::Nothing => vec![ops],
        Before::Skip(n) => vec![after(n, &ops, parsed)],
        Before::Root => {
            root.extend(ops.first().cloned());
            vec![after(1, &ops, parsed)]
        }
        Before::Maybe => {
            let skipped = after(1, &ops, parsed);
            // A number first is a priority or a mask: that reading is the likelier one.
            let number = ops
                .first()
                .and_then(|a| a.text())
                .is_some_and(|t| t.starts_with(|c: char| c.is_ascii_digit()));
            if number {
                vec![skipped, ops]
            } else {
                vec![ops, skipped]
            }
        }
    }
}

/// Parses `ops` again as options and a command (options after a runner's first operands, or
/// after env's assignments), adding the options to `parsed`; returns the operands.
fn reparse<'s>(name: &str, spec: &'s Spec, ops: &[Arg], parsed: &mut Parsed<'s>) -> Vec<Arg> {
    let again = parse(name, spec, ops);
    parsed.given.extend(again.given);
    parsed.problems.extend(again.problems);
    again.operands
}

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
                None => {
                    self.raise(
                        CommandClass::ShellComplex,
                        format!("{wrapper} runs a program the classifier cannot read"),
                    );
                    self.expanded_command(&first.raw, first, tail);
                }
            }
        }
    }

    /// A runner (`runners`): its own options' effects, then what it runs, in the directory
    /// and root it runs it in.
    pub(super) fn wrapped(&mut self, name: &str, spec: &Spec, runs: &Runs, args: &[Arg]) {
        use CommandClass::*;
        let u = unwrap(name, spec, runs, args);
        self.option_effects(name, &u.parsed);
        if runs.elsewhere {
            self.raise(
                ShellComplex,
                format!(
                    "{name} runs its command as another user, in other namespaces, another \
                     root or a service"
                ),
            );
        }
        for var in u.assignments.iter().filter_map(|a| a.split_once('=')) {
            if is_sensitive_var(var.0) && !is_command_var(var.0) {
                self.raise(
                    ShellComplex,
                    format!("sets {}, which changes what programs run", var.0),
                );
            }
            self.command_variable(var.0, &Arg::literal(var.1));
            // What the runner's command sees of it (`env GIT_WORK_TREE=DIR git ...`).
            self.scope.add(var.0, Values::of(var.1));
        }
        for f in &u.files {
            self.write_target(f);
        }
        if name == "xargs" {
            if let Some(What::Program(words)) = u.runs.first() {
                self.xargs(&u.parsed, words);
            }
            return;
        }
        let mut inner = self.nested();
        inner.input_operands = self.input_operands;
        inner.piped_names = self.piped_names.clone();
        // `env C='rm -rf /' sh -c '$C'`: the command sees what env sets.
        for (var, value) in u.assignments.iter().filter_map(|a| a.split_once('=')) {
            inner.scope.add(var, Values::of(value));
        }
        for dir in &u.chdir {
            match dir.text() {
                Some(d) => {
                    inner.cwd = Some(match &inner.cwd {
                        Some(cur) if !d.starts_with('/') => {
                            Path::new(cur).join(d).to_string_lossy().into_owned()
                        }
                        _ => d.to_string(),
                    })
                }
                None => inner.cwd_unknown = true,
            }
        }
        if u.login {
            inner.cwd_unknown = true;
        }
        for r in &u.root {
            // The command starts in its new root, where the walk's directory means nothing.
            match r.text().map(|t| normalise(Path::new(t))) {
                Some(p) if p == Path::new("/") => {}
                Some(p) if p.has_root() => inner.reroot = Reroot::At(p),
                _ => inner.reroot = Reroot::Unknown,
            }
            inner.cwd = None;
            inner.cwd_unknown = true;
        }
        for (k, what) in u.runs.iter().enumerate() {
            // The less likely reading counts only for what it writes and whether it is
            // dangerous (`chrt 0 ls` does not run a program named `0`).
            let mut reading = inner.nested();
            reading.input_operands = inner.input_operands;
            match what {
                What::Nothing => {}
                What::Program(words) => reading.run_rest(name, words),
                What::Code(words) => reading.run_code(name, words),
                What::Shell(shell_args) => {
                    reading.raise(ShellComplex, format!("{name} runs a shell"));
                    reading.run_rest(name, &[&[Arg::literal("sh")], &shell_args[..]].concat());
                }
            }
            match k {
                0 => inner.absorb(reading),
                _ => inner.take_reading(name, reading),
            }
        }
        self.absorb(inner);
    }

    /// Shell code a program runs (`eval`, `sh -c`, `su -c`, `watch`, `flock -c`): its words
    /// joined by spaces, each text they may be with the variables the command sets. Code
    /// built from text the classifier cannot read is dangerous.
    pub(super) fn run_code(&mut self, name: &str, words: &[Arg]) {
        if words.is_empty() {
            return;
        }
        self.raise(
            CommandClass::ShellComplex,
            format!("{name} runs shell code"),
        );
        self.held_code(name, words);
    }

    /// Shell code another program runs, read as what it does: no worse than that, where the
    /// classifier reads all of it (`GIT_PAGER=cat`).
    pub(super) fn held_code(&mut self, name: &str, words: &[Arg]) {
        let mut code = Values {
            texts: vec![String::new()],
            ..Values::default()
        };
        for (k, w) in words.iter().enumerate() {
            let mut v = self.expand(w);
            if k > 0 {
                v.texts = v.texts.iter().map(|t| format!(" {t}")).collect();
            }
            code = code.then(v);
        }
        for text in &code.texts {
            let mut inner = self.nested();
            inner.source(text);
            self.absorb(inner);
        }
        if code.unknown {
            self.raise(
                CommandClass::Dangerous,
                format!("{name} runs code built from text the classifier cannot read"),
            );
        } else if code.outside {
            self.raise(
                CommandClass::ShellComplex,
                format!("{name} runs code the classifier cannot read"),
            );
        }
    }

    /// A script a shell or `source` runs: a process substitution is read as what it prints,
    /// a file the command itself writes as what it writes there.
    pub(super) fn script_operand(&mut self, name: &str, script: Option<&Arg>) {
        let Some(script) = script else { return };
        match fed_by(script) {
            Some(produced) => self.produced_input(name, produced, "a process substitution"),
            None => {
                self.run_written(name, script);
            }
        }
    }

    /// A file run as a script or a program: when the command itself writes it, what it
    /// writes there is the code (and text the classifier cannot read is code it cannot see).
    /// Returns whether the command writes it.
    pub(super) fn run_written(&mut self, reader: &str, file: &Arg) -> bool {
        let Some(t) = file.text() else { return false };
        let path = normalise(Path::new(&self.land(t)));
        let same = |w: &String| normalise(Path::new(w)) == path;
        match self
            .written
            .iter()
            .find(|(w, _)| same(w))
            .map(|(_, text)| text.clone())
        {
            Some(Some(text)) => {
                self.code_input(Some(reader), &text);
                true
            }
            found => {
                if found.is_some() || self.content_writes.iter().any(same) {
                    self.raise(
                        CommandClass::Dangerous,
                        format!(
                            "{reader} runs {t}, which the command writes with text the \
                             classifier cannot read"
                        ),
                    );
                    return true;
                }
                false
            }
        }
    }

    /// A command whose program word is built from variables or output (`$c`, `$(which rm)`):
    /// each text it may become, split into words, is read as the command it runs; text the
    /// classifier cannot read makes it dangerous.
    pub(super) fn expanded_command(&mut self, shown: &str, word: &Arg, args: &[Arg]) {
        self.raise(
            CommandClass::ShellComplex,
            "a variable or expansion in command position",
        );
        let values = self.expand(word);
        for words in values.split(&self.scope.ifs()) {
            let command: Vec<Arg> = words.into_iter().chain(args.iter().cloned()).collect();
            let mut inner = self.nested();
            inner.input_operands = self.input_operands;
            inner.run_rest(shown, &command);
            self.absorb(inner);
        }
        if values.unknown {
            self.raise(
                CommandClass::Dangerous,
                format!("{shown} runs a command built from text the classifier cannot read"),
            );
        }
        if values.outside || values.texts.is_empty() {
            self.args_as_commands(shown, args, false);
        }
    }

    /// `busybox APPLET ARGS` (and toybox's) is the applet; alone or with `--list` they only
    /// print.
    pub(super) fn busybox(&mut self, name: &str, args: &[Arg]) {
        match args.first().map(|a| a.text()) {
            None => {}
            Some(Some("--list" | "--list-full" | "--help" | "--long")) => {}
            Some(Some(t)) if t.starts_with('-') => self.raise(
                CommandClass::ShellComplex,
                format!("{name} {t} is an option the classifier does not read"),
            ),
            Some(_) => self.run_rest(name, args),
        }
    }

    /// xargs' command gets more operands from its input: the names a find upstream prints
    /// (`{}`-like words, see `find`), or names the classifier cannot see.
    fn xargs(&mut self, p: &Parsed, words: &[Arg]) {
        let replace: Option<String> = p
            .values("I")
            .into_iter()
            .chain(p.values("replace"))
            .filter_map(|a| a.text())
            .map(str::to_string)
            .next()
            .or_else(|| p.has_any(&["I", "replace"]).then(|| "{}".to_string()));
        // `xargs -a FILE sh -c '{}'`: the file's text is code.
        if let Some(file) = p.values("arg-file").first() {
            let command: Vec<Arg> = match &replace {
                Some(_) => words.to_vec(),
                None => words.iter().cloned().chain([Arg::literal("{}")]).collect(),
            };
            let runs_input = command.split_first().is_some_and(|(first, rest)| {
                first
                    .text()
                    .and_then(|p| resolve_program(p, rest))
                    .is_some_and(|(p, a)| reads_code(&p, &a))
            });
            if runs_input {
                self.raise(
                    CommandClass::Dangerous,
                    format!("xargs runs the text of {} as code", file.raw),
                );
            }
        }
        let mut inner = self.nested();
        match self.piped_names.clone() {
            Some(names) => {
                for name in names {
                    let command: Vec<Arg> = match &replace {
                        Some(r) => words
                            .iter()
                            .map(|w| match w.text() {
                                Some(t) if t.contains(r.as_str()) => name.clone(),
                                _ => w.clone(),
                            })
                            .collect(),
                        None => words.iter().cloned().chain([name]).collect(),
                    };
                    inner.run_rest("xargs", &command);
                }
            }
            None => {
                inner.input_operands = true;
                inner.run_rest("xargs", words);
            }
        }
        if inner.class > CommandClass::ReadOnly {
            self.raise(
                CommandClass::ShellComplex,
                "xargs runs a command on names read from its input",
            );
        }
        self.absorb(inner);
    }

    /// `sh [OPTIONS] -c [--] CODE`: the code is classified too, so that `sh -c 'rm -rf /'` is
    /// dangerous however the options are spelled. `sh SCRIPT ARGS`: the script is a file the
    /// classifier cannot read (a process substitution is read as what it prints), and it may
    /// run its arguments; so may the program `sh -s` reads from its input. The options are
    /// read by the shells' grammar (`invocation`).
    pub(super) fn shell_inline(&mut self, name: &str, args: &[Arg]) {
        let Some(r) = super::invocation::read(name, args) else {
            return;
        };
        let operands = args.get(r.operands..).unwrap_or(&[]);
        if r.inline {
            self.positional_commands(operands);
            match operands.first() {
                Some(code) => self.run_code(name, std::slice::from_ref(code)),
                None => self.raise(CommandClass::ShellComplex, "sh -c without code"),
            }
            return;
        }
        if r.stdin {
            self.args_as_commands(name, operands, true);
            return;
        }
        if let Some((script, rest)) = operands.split_first() {
            self.script_operand(name, Some(script));
            self.args_as_commands(name, rest, true);
        }
    }

    /// An interpreter's inline code (`python3 -c CODE`, `perl -e CODE`) and the operands after
    /// it (which the code may act on), or its script or module, which may run its arguments.
    /// The options are read by the interpreter's grammar (`invocation`).
    pub(super) fn interpreter_inline(&mut self, name: &str, args: &[Arg]) {
        let Some(r) = super::invocation::read(name, args) else {
            return;
        };
        let rest = args.get(r.operands..).unwrap_or(&[]);
        if r.code.is_empty() {
            match (&r.program, rest.split_first()) {
                (Some(_), _) => self.args_as_commands(name, rest, true),
                // The script: a process substitution is read as what it prints, and it may
                // run its arguments.
                (None, Some((script, tail))) => {
                    self.script_operand(name, Some(script));
                    self.args_as_commands(name, tail, true);
                }
                (None, None) => {}
            }
            return;
        }
        let operands: Vec<String> = rest
            .iter()
            .filter_map(|a| a.text())
            .filter(|t| !t.starts_with('-'))
            .map(str::to_string)
            .collect();
        for c in &r.code {
            let values = self.expand(c);
            if values.unknown {
                self.raise(
                    CommandClass::Dangerous,
                    format!("{name} runs code built from text the classifier cannot read"),
                );
            }
            for text in &values.texts {
                self.inline_code_on(text, &operands);
            }
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

/// Programs whose reading of an unknown program's arguments can find a dangerous command.
const DESTROYERS: &[&str] = &["rm", "chmod", "chown", "find", "dd", "kill"];

/// At most this many words of an unknown program's arguments are read as commands.
const MAX_ARG_READINGS: usize = 16;

impl Walk<'_> {
    /// A program the classifier cannot name (`mytool`, `$X`, `./x`): `ShellComplex`, and its
    /// arguments are read as what it may run (`args_as_commands`).
    pub(super) fn unknown_program(&mut self, shown: &str, args: &[Arg], strict: bool) {
        self.raise(
            CommandClass::ShellComplex,
            format!("{shown} is not a program the classifier knows"),
        );
        self.args_as_commands(shown, args, strict);
    }

    /// Arguments a program the classifier cannot see through may run: read as each destroying
    /// program would read them (`$X -rf /`), from each word naming a program the classifier
    /// knows (`mytool rm -rf /`), and as shell code where a word holds a space or an operator
    /// (`ssh host 'rm -rf /'`). A dangerous reading makes the command `Dangerous`; the writes
    /// of every reading are reported. `strict` (a program run by a bare name, such as
    /// `ctags -R .`): only a path that names a root by itself counts as one for the
    /// destroyers' reading, not one that may be a root because the directory is unknown.
    pub(super) fn args_as_commands(&mut self, shown: &str, args: &[Arg], strict: bool) {
        for candidate in DESTROYERS {
            let mut inner = self.nested();
            inner.input_operands = self.input_operands;
            inner.strict_roots = strict;
            inner.program(candidate, args);
            if inner.class == CommandClass::Dangerous {
                self.raise(
                    CommandClass::Dangerous,
                    format!(
                        "{shown}, a program the classifier cannot name, gets arguments that are \
                         dangerous for {candidate}"
                    ),
                );
                break;
            }
        }
        for (k, a) in args.iter().enumerate().take(MAX_ARG_READINGS) {
            let Some(t) = a.text() else { continue };
            if !is_known_program(&program_name(t, None).name) {
                continue;
            }
            let mut inner = self.nested();
            inner.input_operands = self.input_operands;
            inner.program(t, args.get(k + 1..).unwrap_or(&[]));
            self.take_reading(shown, inner);
        }
        let code = args
            .iter()
            .filter_map(|a| a.text())
            .filter(|t| t.contains([' ', '\t', '\n', ';', '|', '&']));
        for text in code.take(MAX_ARG_READINGS).collect::<Vec<_>>() {
            let mut inner = self.nested();
            inner.source(text);
            self.take_reading(shown, inner);
        }
    }

    /// One guessed reading of what a program runs: its writes, and its class if dangerous.
    pub(super) fn take_reading(&mut self, shown: &str, inner: Walk<'_>) {
        if inner.class == CommandClass::Dangerous {
            self.raise(
                CommandClass::Dangerous,
                format!(
                    "{shown} may run what its arguments say: {}",
                    inner.reason.as_deref().unwrap_or_default()
                ),
            );
        }
        if let Some(bound) = inner.beyond {
            self.beyond(bound);
        }
        for w in inner.writes {
            self.push_write(w);
        }
        for g in inner.globbed {
            if !self.globbed.contains(&g) {
                self.globbed.push(g);
            }
        }
        self.recursive.extend(inner.recursive);
        self.unplaced |= inner.unplaced;
    }
}
