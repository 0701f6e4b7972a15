//! Pipelines: what each stage runs through its wrappers, and text that reaches a shell.

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
            self.piped_names = found_upstream(&stages[..k], src, self.roots);
            self.statement(*s, src);
            self.piped_names = saved;
        }
        let mut c = n.walk();
        if n.children(&mut c).any(|ch| ch.kind() == "|&") {
            self.raise(CommandClass::ShellComplex, format!("{ASH_DIFFERS}: |&"));
        }
        let programs: Vec<Option<(String, Vec<Arg>)>> =
            stages.iter().map(|s| stage_program(*s, src)).collect();
        // Whether a download or a decoder runs in a stage before each stage, and which stages
        // run the text they read as code.
        let mut downloaded = false;
        let mut decoded = false;
        let mut reader = vec![false; programs.len()];
        for (k, stage) in programs.iter().enumerate() {
            let Some((p, pargs)) = stage else { continue };
            let (download_before, decode_before) = (downloaded, decoded);
            downloaded |= DOWNLOADERS.contains(&p.as_str());
            decoded |= DECODERS.contains(&p.as_str());
            let sources = p == "source" || p == ".";
            if k == 0 || (!SHELLS.contains(&p.as_str()) && !is_interpreter(p) && !sources) {
                continue;
            }
            if download_before {
                self.raise(
                    CommandClass::Dangerous,
                    format!("a download piped into {p}"),
                );
                continue;
            }
            if !reads_code(p, pargs) {
                continue;
            }
            reader[k] = true;
            self.raise(
                CommandClass::ShellComplex,
                format!("text piped into {p} runs as code"),
            );
            if decode_before {
                self.raise(
                    CommandClass::Dangerous,
                    format!("decoded text piped into {p} runs as code the command does not show"),
                );
            }
        }
        // Text that reaches a shell from upstream: echo and printf of literal text, and
        // here-documents, are read as the code they are; what cannot be read is dangerous.
        let mut next_reader: Option<&str> = None;
        for j in (0..programs.len()).rev() {
            if let Some(p) = next_reader {
                if let Some(text) = fed_text(stages[j], src) {
                    self.code_input(Some(p), &text);
                }
                match programs[j].as_ref() {
                    Some((q, qargs)) if q == "echo" || q == "printf" => {
                        match echoed_text(q, qargs) {
                            Some(text) => self.code_input(Some(p), &text),
                            None => self.raise(
                                CommandClass::Dangerous,
                                format!("{q} text with escapes or formats is piped into {p} and runs as code"),
                            ),
                        }
                    }
                    Some(_) => {}
                    None => self.raise(
                        CommandClass::Dangerous,
                        format!(
                            "text the classifier cannot read is piped into {p} and runs as code"
                        ),
                    ),
                }
            }
            if reader[j] {
                next_reader = programs[j].as_ref().map(|(p, _)| p.as_str());
            }
        }
    }
}

/// The program a pipeline stage runs and its arguments, through wrappers.
pub(super) fn stage_program(n: Node, src: &str) -> Option<(String, Vec<Arg>)> {
    match n.kind() {
        "redirected_statement" => stage_program(n.child_by_field_name("body")?, src),
        "command" => {
            let name = n.child_by_field_name("name")?;
            let (prog, _) = literal(name.named_child(0).unwrap_or(name), src)?;
            let mut c = n.walk();
            let args: Vec<Arg> = n
                .children_by_field_name("argument", &mut c)
                .map(|a| Arg::of(a, src))
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
                Some((spec, Some(runs))) => match unwrap(n, spec, &runs, &args).runs.first() {
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

/// Programs that pass on some of the lines they read, unchanged.
const LINE_FILTERS: &[&str] = &[
    "grep", "egrep", "fgrep", "head", "tail", "sort", "uniq", "cat", "tee", "tac", "shuf",
];

/// The names a `find` upstream of a stage prints, through filters that pass lines on.
fn found_upstream(stages: &[Node], src: &str, roots: &[PathBuf]) -> Option<Vec<Arg>> {
    for stage in stages.iter().rev() {
        let (program, args) = stage_program(*stage, src)?;
        if program == "find" {
            return Some(read_find(&args, roots).printed());
        }
        if !LINE_FILTERS.contains(&program.as_str()) {
            return None;
        }
    }
    None
}

/// The text `echo` or `printf` prints, when the command shows it as it is (no escapes, no
/// formats).
fn echoed_text(program: &str, args: &[Arg]) -> Option<String> {
    let texts: Vec<&str> = args.iter().map(|a| a.text()).collect::<Option<_>>()?;
    match program {
        "echo" => {
            let words: Vec<&str> = texts
                .iter()
                .copied()
                .skip_while(|t| matches!(*t, "-n" | "-E"))
                .collect();
            if words.iter().any(|t| t.contains('\\')) || words.first() == Some(&"-e") {
                return None;
            }
            Some(words.join(" "))
        }
        "printf" => match texts.as_slice() {
            [format] if !format.contains(['%', '\\']) => Some((*format).to_string()),
            _ => None,
        },
        _ => None,
    }
}

/// Whether a substitution runs a download or a decoder anywhere inside it.
pub(super) fn runs_fetch(n: Node, src: &str, depth: usize) -> bool {
    if depth > MAX_DEPTH {
        return true;
    }
    if n.kind() == "command" {
        if let Some((p, _)) = stage_program(n, src) {
            if DOWNLOADERS.contains(&p.as_str()) || DECODERS.contains(&p.as_str()) {
                return true;
            }
        }
    }
    let mut c = n.walk();
    let children: Vec<Node> = n.named_children(&mut c).collect();
    children
        .into_iter()
        .any(|ch| runs_fetch(ch, src, depth + 1))
}

/// The here-document or here-string a pipeline stage reads, when it is literal text.
fn fed_text(stage: Node, src: &str) -> Option<String> {
    if stage.kind() != "redirected_statement" {
        return None;
    }
    let mut c = stage.walk();
    let redirects: Vec<Node> = stage.children_by_field_name("redirect", &mut c).collect();
    for r in redirects {
        let mut c = r.walk();
        let parts: Vec<Node> = r.named_children(&mut c).collect();
        for part in parts {
            match (r.kind(), part.kind()) {
                ("heredoc_redirect", "heredoc_body") => {
                    return Some(src[part.byte_range()].to_string())
                }
                ("herestring_redirect", _) => return literal(part, src).map(|(t, _)| t),
                _ => {}
            }
        }
    }
    None
}

/// The first stage of a pipeline, past the first `skip`, that runs what it reads as code.
pub(super) fn pipeline_code_reader(n: Node, src: &str, skip: usize) -> Option<String> {
    let mut c = n.walk();
    let stages: Vec<Node> = n.named_children(&mut c).collect();
    stages.iter().skip(skip).find_map(|s| {
        let (p, args) = stage_program(*s, src)?;
        reads_code(&p, &args).then_some(p)
    })
}
