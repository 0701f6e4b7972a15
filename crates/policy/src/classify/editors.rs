//! Editors run non-interactively (`ex -c wq FILE`, `vim -es`, `ed FILE`) and interpreters
//! editing in place (`perl -pi -e CODE FILE`, `ruby -i`): the files they are given are
//! written, and an editor command starting with `!` runs a shell command.

use super::*;

/// Editors, and their options that take the next word as a value. Editor commands (`-c
/// CMD`, `+CMD`, `--cmd CMD`, `--eval EXPR`) are among them.
const EDITORS: &[(Names, Names)] = &[
    (
        Names("vim vi nvim ex view vimdiff"),
        Names("-c --cmd -S -s -w -W -T -u -U -i -t -q --servername --startuptime"),
    ),
    (Names("ed red"), Names("-p")),
    (Names("nano pico"), Names("-o -Y -T -r -s -Q -X -f")),
    (
        Names("emacs"),
        Names("-l --load -f --funcall --eval --execute --insert --chdir"),
    ),
    (Names("micro"), Names("-config-dir -option")),
    (Names("kak"), Names("-e -c -s -E")),
    (Names("hx"), Names("-c --config --log")),
];

/// Editor options whose value is an editor command, which `!` turns into a shell command.
const EDITOR_COMMANDS: &[&str] = &["-c", "--cmd", "--eval", "--execute", "-e", "-E"];

/// Whether `name` is an editor the table knows.
pub(super) fn is_editor(name: &str) -> bool {
    EDITORS.iter().any(|(n, _)| n.contains(&name))
}

impl Walk<'_> {
    /// An editor: `ShellComplex` (its startup files run what they say), the files it is
    /// given are written, and its commands' `!CMD` run CMD.
    pub(super) fn editor(&mut self, name: &str, args: &[Arg]) {
        self.raise(
            CommandClass::ShellComplex,
            format!("{name} is an editor, which runs its startup files and commands"),
        );
        let valued = EDITORS
            .iter()
            .find(|(n, _)| n.contains(&name))
            .map_or(Names(""), |(_, v)| *v);
        let mut commands: Vec<Arg> = Vec::new();
        let mut i = 0;
        while let Some(a) = args.get(i) {
            i += 1;
            let Some(t) = a.text() else {
                self.write_target(a);
                continue;
            };
            if valued.contains(&t) {
                if let Some(v) = args.get(i) {
                    if EDITOR_COMMANDS.contains(&t) {
                        commands.push(v.clone());
                    }
                }
                i += 1;
            } else if let Some(command) = t.strip_prefix('+') {
                commands.push(a.with_text(command));
            } else if t == "--" {
                for f in args.get(i..).unwrap_or(&[]) {
                    self.write_target(f);
                }
                break;
            } else if !t.starts_with('-') {
                self.write_target(a);
            }
        }
        for c in commands {
            match c.text() {
                Some(text) => {
                    if let Some((_, shell)) = text.split_once('!') {
                        let mut inner = self.nested();
                        inner.source(shell);
                        self.absorb(inner);
                    }
                }
                None => self.raise(
                    CommandClass::ShellComplex,
                    format!("{name} runs an editor command the classifier cannot read"),
                ),
            }
        }
    }

    /// perl and ruby: their inline code (`-e`, clustered as in `-pe`), and with `-i` the
    /// files after the code or the script, which are edited in place. Returns false for
    /// another interpreter. The options are read by the interpreter's grammar (`invocation`).
    pub(super) fn script_interpreter(&mut self, name: &str, args: &[Arg]) -> bool {
        if !matches!(name, "perl" | "ruby") {
            return false;
        }
        let Some(r) = super::invocation::read(name, args) else {
            return false;
        };
        let code = r.code.clone();
        let in_place = r.has('i');
        // ruby -C DIR: the files are relative to DIR.
        let dirs: Vec<Arg> = match name {
            "ruby" => r.values('C').cloned().collect(),
            _ => Vec::new(),
        };
        let i = r.operands;
        let rest = args.get(i..).unwrap_or(&[]);
        // Without inline code, the first operand is the script.
        let files = match code.is_empty() {
            true => {
                self.script_operand(name, rest.first());
                self.args_as_commands(name, rest.get(1..).unwrap_or(&[]), true);
                rest.get(1..).unwrap_or(&[])
            }
            false => rest,
        };
        for c in &code {
            let values = self.expand(c);
            if values.unknown {
                self.raise(
                    CommandClass::Dangerous,
                    format!("{name} runs code built from text the classifier cannot read"),
                );
            }
            let operands: Vec<String> = files
                .iter()
                .filter_map(|a| a.text())
                .map(str::to_string)
                .collect();
            for text in &values.texts {
                self.inline_code_on(text, &operands);
            }
        }
        if in_place {
            let mut inner = self.nested();
            for d in &dirs {
                match d.text() {
                    Some(t) => inner.cwd = Some(inner.land(t)),
                    None => inner.cwd_unknown = true,
                }
            }
            for f in files {
                inner.write_target(f);
            }
            self.absorb(inner);
        }
        true
    }
}
