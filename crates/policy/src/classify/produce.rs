//! What a command prints, as far as the command shows it (docs/design.md, "Modes and the
//! classifier"): the text a pipe, a here-document or a command or process substitution hands
//! a shell. Text from anything the classifier cannot read is code it cannot see.

use super::*;

/// What a command prints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Produced {
    /// Text the command shows: echo and printf without escapes or formats, yes, a
    /// here-document through cat; through filters that pass some of its lines on, all of it.
    Text(String),
    /// The path of a program looked up by name (`which rm`, `command -v rm`): the name.
    Lookup(String),
    /// What a download prints.
    Download,
    /// Anything else.
    Unknown,
}

/// Programs that print where a program is: their output names the program they are given.
const LOOKUPS: &[(&str, &[&str])] = &[
    ("which", &[]),
    ("command", &["-v", "-V"]),
    ("type", &["-p", "-P"]),
];

/// Programs that pass some of the lines they read on unchanged, and the options with which
/// they do (a value-taking option's value follows it). An operand is a file read, except
/// grep's pattern.
const LINE_FILTERS: &[(&str, &[&str], &[&str])] = &[
    ("cat", &["-u"], &[]),
    ("tac", &[], &[]),
    ("head", &["-q", "--quiet", "--silent"], &["-n", "--lines"]),
    ("tail", &["-q", "--quiet", "--silent"], &["-n", "--lines"]),
    (
        "grep",
        &["-v", "-i", "-E", "-F", "-G", "-w", "-x", "-s", "-a", "--"],
        &["-e", "-m", "--regexp", "--max-count"],
    ),
    (
        "egrep",
        &["-v", "-i", "-w", "-x", "-s", "-a"],
        &["-e", "-m"],
    ),
    (
        "fgrep",
        &["-v", "-i", "-w", "-x", "-s", "-a"],
        &["-e", "-m"],
    ),
    (
        "sort",
        &[
            "-u", "-r", "-n", "-f", "-b", "-d", "-s", "-V", "-h", "-g", "-M", "-R",
        ],
        &["-k", "-t", "--key", "--field-separator"],
    ),
    ("uniq", &["-u", "-d", "-i"], &[]),
    ("tee", &["-a", "--append", "-i"], &[]),
];

/// Whether `program args` passes some of the lines it reads on unchanged, reading nothing
/// else (so the text downstream is a part of the text upstream).
pub(super) fn passes_lines(program: &str, args: &[Arg]) -> bool {
    let Some((_, flags, valued)) = LINE_FILTERS.iter().find(|(p, _, _)| *p == program) else {
        return false;
    };
    let grep = program.ends_with("grep");
    let mut pattern_seen = false;
    let mut i = 0;
    while let Some(a) = args.get(i) {
        i += 1;
        let Some(t) = a.text() else { return false };
        let number = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
        match t {
            _ if flags.contains(&t) => {}
            _ if valued.contains(&t) => {
                pattern_seen |= grep && matches!(t, "-e" | "--regexp");
                i += 1;
            }
            _ if valued.iter().any(|v| t.starts_with(v) && t.len() > v.len()) => {
                pattern_seen |= grep && t.starts_with("-e");
            }
            // `head -5`.
            _ if t.starts_with('-') && number(&t[1..]) && !grep => {}
            // tee's operands are files it writes, not reads.
            _ if !t.starts_with('-') && program == "tee" => {}
            _ if !t.starts_with('-') && grep && !pattern_seen => pattern_seen = true,
            _ => return false,
        }
    }
    true
}

/// The text a pipeline's stages hand the next one, read from the last stage back through
/// the filters that pass lines on.
pub(super) fn produced_by(stages: &[Node], src: &str, depth: usize) -> Produced {
    let Some((last, before)) = stages.split_last() else {
        // The command's own input: nothing it shows.
        return Produced::Unknown;
    };
    if last.kind() == "command" {
        if let Some((p, args)) = stage_program(*last, src) {
            if passes_lines(&p, &args) {
                return produced_by(before, src, depth + 1);
            }
        }
    }
    produced(*last, src, depth)
}

/// What the statement `n` prints (a substitution's statements, a list, a pipeline, a
/// command); arguments are read literally (a variable makes the text unknown).
pub(super) fn produced(n: Node, src: &str, depth: usize) -> Produced {
    if depth > MAX_DEPTH {
        return Produced::Unknown;
    }
    match n.kind() {
        "command_substitution"
        | "process_substitution"
        | "program"
        | "list"
        | "compound_statement"
        | "subshell" => {
            let mut c = n.walk();
            let parts: Vec<Produced> = n
                .named_children(&mut c)
                .filter(|ch| ch.kind() != "comment")
                .map(|ch| produced(ch, src, depth + 1))
                .collect();
            match parts.as_slice() {
                [one] => one.clone(),
                _ => joined(parts),
            }
        }
        "pipeline" => {
            let mut c = n.walk();
            let stages: Vec<Node> = n.named_children(&mut c).collect();
            produced_by(&stages, src, depth + 1)
        }
        "redirected_statement" => {
            let body = n.child_by_field_name("body");
            let filter = body
                .and_then(|b| stage_program(b, src))
                .is_some_and(|(p, a)| {
                    passes_lines(&p, &a)
                        && !a
                            .iter()
                            .any(|x| x.text().is_some_and(|t| !t.starts_with('-')))
                });
            match (filter, fed_text(n, src)) {
                (true, Some(text)) => Produced::Text(text),
                _ => body.map_or(Produced::Unknown, |b| produced(b, src, depth + 1)),
            }
        }
        "command" => match stage_program(n, src) {
            Some((p, args)) => printed(&p, &args),
            None => Produced::Unknown,
        },
        _ => Produced::Unknown,
    }
}

/// Several commands' output, one after the other.
fn joined(parts: Vec<Produced>) -> Produced {
    let mut text = String::new();
    for p in parts {
        match p {
            Produced::Text(t) => {
                text.push_str(&t);
                text.push('\n');
            }
            Produced::Lookup(_) => return Produced::Unknown,
            other => return other,
        }
    }
    Produced::Text(text)
}

/// What one program prints, given its (literal) arguments.
pub(super) fn printed(program: &str, args: &[Arg]) -> Produced {
    if DOWNLOADERS.contains(&program) {
        return Produced::Download;
    }
    let texts: Option<Vec<&str>> = args.iter().map(|a| a.text()).collect();
    if let Some((_, flags)) = LOOKUPS.iter().find(|(p, _)| *p == program) {
        let looked_up = match texts.as_deref() {
            Some([name]) if flags.is_empty() => Some(*name),
            Some([flag, name]) if flags.contains(flag) => Some(*name),
            _ => None,
        };
        if let Some(name) = looked_up {
            return Produced::Lookup(name.to_string());
        }
    }
    match (program, texts) {
        ("true" | "false" | ":", _) => Produced::Text(String::new()),
        ("echo" | "printf" | "yes", Some(texts)) => match echoed_text(program, &texts) {
            Some(t) => Produced::Text(t),
            None => Produced::Unknown,
        },
        _ => Produced::Unknown,
    }
}

/// The text `echo`, `printf` or `yes` prints, when the command shows it as it is (no
/// escapes, no formats).
pub(super) fn echoed_text(program: &str, texts: &[&str]) -> Option<String> {
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
        "printf" => match texts {
            [format] => printf_text(format),
            _ => None,
        },
        "yes" => match texts {
            [] => Some("y".to_string()),
            words => Some(words.join(" ")),
        },
        _ => None,
    }
}

/// What `printf FORMAT` prints for a format without conversions: its escapes decoded (`\n`,
/// octal `\162`, hex `\x72`); `None` for a conversion or an escape it does not decode.
fn printf_text(format: &str) -> Option<String> {
    let mut out = String::new();
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '%' if chars.peek() == Some(&'%') => {
                chars.next();
                out.push('%');
            }
            '%' => return None,
            '\\' => {
                let e = chars.next()?;
                let simple = match e {
                    'n' => Some('\n'),
                    't' => Some('\t'),
                    'r' => Some('\r'),
                    'a' => Some('\u{7}'),
                    'b' => Some('\u{8}'),
                    'f' => Some('\u{c}'),
                    'v' => Some('\u{b}'),
                    '\\' | '"' | '\'' => Some(e),
                    _ => None,
                };
                if let Some(s) = simple {
                    out.push(s);
                    continue;
                }
                let (radix, digits, max) = match e {
                    '0'..='7' => (8, e.to_string(), 3),
                    'x' => (16, String::new(), 2),
                    _ => return None,
                };
                out.push(super::words::numeric_escape(
                    &mut chars, digits, radix, max,
                )?);
            }
            _ => out.push(c),
        }
    }
    Some(out)
}

/// The here-document or here-string a statement reads, when it is literal text.
pub(super) fn fed_text(stage: Node, src: &str) -> Option<String> {
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
