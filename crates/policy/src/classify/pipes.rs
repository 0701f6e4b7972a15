//! Pipelines: what each stage runs through its runners, and text that reaches a program that
//! runs what it reads.

use super::find::read_find;
use super::specs::spec_of;
use super::wrappers::{unwrap, What};
use super::*;

impl Walk<'_> {
    pub(super) fn pipeline(&mut self, n: Node, src: &str) {
        let mut stages = Vec::new();
        let mut c = n.walk();
        for ch in n.children(&mut c) {
            if ch.is_named() {
                stages.push(ch);
            }
        }
        for (k, s) in stages.iter().enumerate() {
            // `find ROOT | xargs rm`: xargs gets what find prints.
            let saved = self.piped_names.take();
            if src[s.byte_range()].contains("xargs") {
                self.piped_names = found_upstream(&stages[..k], src, self.roots);
            }
            self.statement(*s, src);
            self.piped_names = saved;
        }
        let mut c = n.walk();
        if n.children(&mut c).any(|ch| ch.kind() == "|&") {
            self.raise(CommandClass::ShellComplex, format!("{ASH_DIFFERS}: |&"));
        }
        // Text that reaches a program that runs what it reads: literal text is read as the
        // code it is; any other text is code the classifier cannot see.
        for k in 1..stages.len() {
            let Some(p) = self.stage_reader(stages[k], src) else {
                continue;
            };
            self.raise(
                CommandClass::ShellComplex,
                format!("text piped into {p} runs as code"),
            );
            let text = self.piped_text(&stages[..k], src);
            self.produced_input(&p, text, "text piped into it");
        }
    }

    /// What the stages hand the next one: `produce::produced_by`, with echo's, printf's and
    /// yes's words read with the variables the command sets.
    fn piped_text(&self, stages: &[Node], src: &str) -> Produced {
        let Some((last, before)) = stages.split_last() else {
            return Produced::Unknown;
        };
        if let Some((p, args)) = stage_program(*last, src) {
            if last.kind() == "command" && passes_lines(&p, &args) {
                return self.piped_text(before, src);
            }
            if last.kind() == "command" && matches!(p.as_str(), "echo" | "printf" | "yes") {
                return self.echoed(*last, src);
            }
        }
        produced_by(stages, src, 0)
    }

    /// What an echo, printf or yes command prints, its words expanded.
    fn echoed(&self, n: Node, src: &str) -> Produced {
        let Some(name) = n.child_by_field_name("name") else {
            return Produced::Unknown;
        };
        let Some((prog, _)) = literal(name.named_child(0).unwrap_or(name), src) else {
            return Produced::Unknown;
        };
        let words: Vec<Arg> = arguments(n).into_iter().map(|a| Arg::of(a, src)).collect();
        let Some((p, args)) = resolve_program(&prog, &words) else {
            return Produced::Unknown;
        };
        // Each word's texts; every combination of them is a text it may print.
        let mut lines: Vec<Vec<String>> = vec![Vec::new()];
        for a in &args {
            let v = self.expand(a);
            if v.unknown || v.outside || v.texts.is_empty() {
                return Produced::Unknown;
            }
            let mut next = Vec::new();
            for line in &lines {
                for t in &v.texts {
                    let mut l = line.clone();
                    l.push(t.clone());
                    next.push(l);
                }
            }
            next.truncate(MAX_DEPTH);
            lines = next;
        }
        let mut text = String::new();
        for line in lines {
            let words: Vec<&str> = line.iter().map(String::as_str).collect();
            match echoed_text(&p, &words) {
                Some(t) => {
                    text.push_str(&t);
                    text.push('\n');
                }
                None => return Produced::Unknown,
            }
        }
        Produced::Text(text)
    }
}

/// The program a pipeline stage runs and its arguments, through wrappers.
pub(super) fn stage_program(n: Node, src: &str) -> Option<(String, Vec<Arg>)> {
    match n.kind() {
        "redirected_statement" => stage_program(n.child_by_field_name("body")?, src),
        "command" => {
            let name = n.child_by_field_name("name")?;
            let (prog, _) = literal(name.named_child(0).unwrap_or(name), src)?;
            let args: Vec<Arg> = arguments(n)
                .into_iter()
                .map(|a| Arg::shallow(a, src))
                .collect();
            resolve_program(&prog, &args)
        }
        _ => None,
    }
}

/// The program a command runs with its arguments, with runners (`env X=1`, `busybox`, `nice`,
/// `sudo`, `su -c CODE` ...) looked through; a runner that runs a shell on its input is `sh`;
/// `None` when a runner's command cannot be read.
pub(super) fn resolve_program(prog: &str, args: &[Arg]) -> Option<(String, Vec<Arg>)> {
    let mut name = program_name(prog, None).name;
    let mut args = args.to_vec();
    for _ in 0..MAX_DEPTH {
        let rest: Vec<Arg> = match name.as_str() {
            "busybox" | "toybox" => args.clone(),
            n => match spec_of(n).map(|s| (s, s.runs)) {
                Some((spec, Some(runs))) => match unwrap(n, spec, &runs, &args) {
                    // xargs adds what it reads to the command: `{}` stands for it (unless
                    // `-I` names where it goes).
                    u if n == "xargs" => match u.runs.first() {
                        Some(What::Program(words)) => {
                            let mut words = words.clone();
                            if !u.parsed.has_any(&["I", "replace"]) {
                                words.push(Arg::literal("{}"));
                            }
                            words
                        }
                        _ => return Some((name, args)),
                    },
                    u => match u.runs.first() {
                        Some(What::Program(words)) => words.clone(),
                        Some(What::Shell(shell_args)) => {
                            return Some(("sh".into(), shell_args.clone()))
                        }
                        // Code the runner hands a shell: its first words, as the shell splits them.
                        Some(What::Code(words)) => {
                            let texts: Option<Vec<&str>> = words.iter().map(|a| a.text()).collect();
                            texts?
                                .join(" ")
                                .split_whitespace()
                                .map(Arg::literal)
                                .collect()
                        }
                        _ => return Some((name, args)),
                    },
                },
                _ => return Some((name, args)),
            },
        };
        let Some((first, tail)) = rest.split_first() else {
            return Some((name, args));
        };
        name = program_name(first.text()?, None).name;
        args = tail.to_vec();
    }
    None
}

/// The names a `find` upstream of a stage prints, through filters that pass lines on.
fn found_upstream(stages: &[Node], src: &str, roots: &[PathBuf]) -> Option<Vec<Arg>> {
    for stage in stages.iter().rev() {
        let (program, args) = stage_program(*stage, src)?;
        if program == "find" {
            return Some(read_find(&args, roots).printed());
        }
        if !passes_lines(&program, &args) && !matches!(program.as_str(), "sort" | "uniq") {
            return None;
        }
    }
    None
}

impl Walk<'_> {
    /// The first stage of a pipeline, past the first `skip`, that runs what it reads as code.
    pub(super) fn pipeline_code_reader(&self, n: Node, src: &str, skip: usize) -> Option<String> {
        let mut c = n.walk();
        let stages: Vec<Node> = n.named_children(&mut c).collect();
        stages
            .iter()
            .skip(skip)
            .find_map(|s| self.stage_reader(*s, src))
    }

    /// A shell is a shell in whatever compound it stands: every command inside a subshell, a
    /// group or a process substitution (its substitutions too) inherits the compound's input,
    /// so the compound runs what it reads as code when any of them does.
    pub(super) fn compound_reader(&self, n: Node, src: &str) -> Option<String> {
        let mut c = n.walk();
        let children: Vec<Node> = n.named_children(&mut c).collect();
        children.into_iter().find_map(|ch| match ch.kind() {
            "command" => self
                .stage_reader(ch, src)
                .or_else(|| self.compound_reader(ch, src)),
            _ => self.compound_reader(ch, src),
        })
    }

    /// The program a stage (a command, or a redirected one) runs when it runs what it reads as
    /// code, as `reads_code` reads it. A program word the classifier cannot read (`$SHELL`,
    /// `"$X"`, `$(which sh)`) is each program the variables the command sets make it, and may be
    /// a shell where it cannot tell: it is `sh` then, and so is a runner whose command the
    /// classifier cannot read (`env $X`).
    pub(super) fn stage_reader(&self, n: Node, src: &str) -> Option<String> {
        if matches!(
            n.kind(),
            "subshell" | "compound_statement" | "process_substitution"
        ) {
            return self.compound_reader(n, src);
        }
        if let Some((p, args)) = stage_program(n, src) {
            return reads_code(&p, &args).then_some(p);
        }
        let command = match n.kind() {
            "redirected_statement" => n.child_by_field_name("body")?,
            _ => n,
        };
        if command.kind() != "command" {
            return None;
        }
        let name = command.child_by_field_name("name")?;
        let word = name.named_child(0).unwrap_or(name);
        if literal(word, src).is_some() {
            // A runner whose command the classifier cannot read (`env $X`, `sudo "$X"`).
            return Some("sh".to_string());
        }
        let args: Vec<Arg> = arguments(command)
            .into_iter()
            .map(|a| Arg::shallow(a, src))
            .collect();
        let values = self.expand(&Arg::of(word, src));
        if values.unknown || values.outside || values.texts.is_empty() {
            return Some("sh".to_string());
        }
        for words in values.split(&self.scope.ifs()) {
            let Some((first, rest)) = words.split_first() else {
                continue;
            };
            let all: Vec<Arg> = rest.iter().chain(args.iter()).cloned().collect();
            match first.text().and_then(|t| resolve_program(t, &all)) {
                Some((p, a)) if reads_code(&p, &a) => return Some(p),
                Some(_) => {}
                None => return Some("sh".to_string()),
            }
        }
        None
    }
}
