//! awk programs, read whole (docs/design.md, "Modes and the classifier"). An agent's most
//! common text tool is `read_only` when the classifier reads its program whole and it has no
//! `system()`, no pipe, no `getline` from a command and no output redirection; what such a
//! program writes or runs is read as that. Anything else about it (a program file, an
//! extension, gawk's `@` forms, text it cannot tokenize) is `ShellComplex`.

use super::opts::Parsed;
use super::*;

/// One token of an awk program.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    /// A string literal, unescaped.
    Str(String),
    /// A name: a keyword, a function or a variable.
    Name(String),
    /// A number, a regex or a field reference: a value that names nothing.
    Value,
    /// Punctuation and operators (`>`, `>>`, `|`, `|&`, `(`, `;`...); `\n` ends a statement.
    Op(&'static str),
}

/// Operators, longest first.
const OPERATORS: &[&str] = &[
    ">>", ">=", "<=", "==", "!=", "!~", "&&", "||", "|&", "++", "--", "+=", "-=", "*=", "/=", "%=",
    "^=", "**", ">", "<", "|", "(", ")", "{", "}", "[", "]", ";", ",", "!", "~", "?", ":", "=",
    "+", "-", "*", "%", "^", "$", "@", "/", "\n",
];

/// What an awk program does beyond printing.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct AwkEffects {
    /// Files its output redirections name (`print > "f"`).
    pub(super) writes: Vec<String>,
    /// Commands it runs that it shows (`system("cmd")`, `"cmd" | getline`, `print | "cmd"`).
    pub(super) runs: Vec<String>,
    /// Commands its output is piped into (`print | "sh"`): they read text it makes.
    pub(super) fed: Vec<String>,
    /// A command it builds from text the classifier cannot read (`system($0)`).
    pub(super) runs_unknown: bool,
    /// Variables its output redirections name (`print > out`): the file is the value the
    /// command assigns.
    pub(super) writes_vars: Vec<String>,
    /// An output redirection to a file it names by an expression, or by a variable the
    /// program also sets.
    pub(super) writes_unknown: bool,
    /// It sets variables by other ways than assigning them (`ARGV`, `SYMTAB`).
    pub(super) rebinds: bool,
    /// Something the classifier does not read (gawk's `@include`, `@f()`).
    pub(super) opaque: bool,
}

/// Splits an awk program into tokens; `None` for one the classifier cannot tokenize.
fn tokens(program: &str) -> Option<Vec<Token>> {
    let chars: Vec<char> = program.chars().collect();
    let mut out: Vec<Token> = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        // A regex may start where a value may: at the start, or after an operator.
        let regex_here = match out.last() {
            None => true,
            Some(Token::Op(op)) => !matches!(*op, ")" | "]" | "$" | "++" | "--"),
            Some(_) => false,
        };
        match c {
            '\\' if chars.get(i + 1) == Some(&'\n') => i += 2,
            ' ' | '\t' | '\r' => i += 1,
            '#' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '"' => {
                let mut s = String::new();
                i += 1;
                loop {
                    match chars.get(i)? {
                        '"' => break,
                        '\n' => return None,
                        '\\' => {
                            i += 1;
                            s.push(escape(&chars, &mut i)?);
                            continue;
                        }
                        ch => s.push(*ch),
                    }
                    i += 1;
                }
                i += 1;
                out.push(Token::Str(s));
            }
            '/' if regex_here => {
                i += 1;
                let mut in_class = false;
                loop {
                    match chars.get(i)? {
                        '\\' => i += 1,
                        '[' => in_class = true,
                        ']' => in_class = false,
                        '/' if !in_class => break,
                        '\n' => return None,
                        _ => {}
                    }
                    i += 1;
                }
                i += 1;
                out.push(Token::Value);
            }
            _ if c.is_ascii_alphabetic() || c == '_' => {
                let start = i;
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                out.push(Token::Name(chars[start..i].iter().collect()));
            }
            _ if c.is_ascii_digit() || c == '.' => {
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                    i += 1;
                }
                out.push(Token::Value);
            }
            _ => {
                let rest: String = chars[i..chars.len().min(i + 2)].iter().collect();
                let op = OPERATORS.iter().find(|op| rest.starts_with(*op))?;
                i += op.chars().count();
                out.push(Token::Op(op));
            }
        }
    }
    Some(out)
}

/// The character an escape in a string stands for, as awk decodes it (`\\057` is `/`, gawk's
/// `\\x2f` too); `i` is past the backslash and moves past the escape.
fn escape(chars: &[char], i: &mut usize) -> Option<char> {
    let digits = |i: &mut usize, radix: u32, most: usize| {
        let start = *i;
        while *i - start < most && chars.get(*i).is_some_and(|c| c.is_digit(radix)) {
            *i += 1;
        }
        let text: String = chars[start..*i].iter().collect();
        u32::from_str_radix(&text, radix)
            .ok()
            .and_then(char::from_u32)
    };
    let e = *chars.get(*i)?;
    if e.is_digit(8) {
        return digits(i, 8, 3);
    }
    *i += 1;
    Some(match e {
        'x' if chars.get(*i).is_some_and(char::is_ascii_hexdigit) => digits(i, 16, 2)?,
        'n' => '\n',
        't' => '\t',
        'r' => '\r',
        other => other,
    })
}

/// Whether a token ends a statement.
fn ends_statement(t: &Token) -> bool {
    matches!(t, Token::Op(";" | "\n" | "}" | "{"))
}

/// The expression after position `at` up to the end of its statement when it is one string
/// literal or one name; `None` for anything else.
fn lone_after(tokens: &[Token], at: usize) -> Option<&Token> {
    let rest: Vec<&Token> = tokens[at..]
        .iter()
        .take_while(|t| !ends_statement(t) && !matches!(t, Token::Op(")")))
        .collect();
    match rest.as_slice() {
        [one @ (Token::Str(_) | Token::Name(_))] => Some(one),
        [Token::Op("("), one @ (Token::Str(_) | Token::Name(_))] => Some(one),
        _ => None,
    }
}

/// What an awk program writes and runs; `None` for one the classifier cannot tokenize.
pub(super) fn awk_effects(program: &str) -> Option<AwkEffects> {
    let tokens = tokens(program)?;
    let mut e = AwkEffects::default();
    // Inside a print or printf statement: the parenthesis depth it started at.
    let mut print_depth: Option<usize> = None;
    let mut depth = 0usize;
    for (k, t) in tokens.iter().enumerate() {
        match t {
            Token::Name(n) if n == "print" || n == "printf" => print_depth = Some(depth),
            Token::Name(n) if n == "system" => {
                // `system(EXPR)`: the argument up to the matching parenthesis.
                match tokens.get(k + 1..k + 4) {
                    Some([Token::Op("("), Token::Str(s), Token::Op(")")]) => e.runs.push(s.clone()),
                    _ => e.runs_unknown = true,
                }
            }
            Token::Op("(") | Token::Op("[") => depth += 1,
            Token::Op(")") | Token::Op("]") => depth = depth.saturating_sub(1),
            Token::Op(">") | Token::Op(">>") if print_depth == Some(depth) => {
                match lone_after(&tokens, k + 1) {
                    Some(Token::Str(f)) => e.writes.push(f.clone()),
                    Some(Token::Name(v)) => {
                        // Placed only where the program never sets it (its every other use
                        // is another redirection) and awk does not either.
                        e.writes_unknown |= AWK_SETS.contains(&v.as_str());
                        e.writes_unknown |= tokens.iter().enumerate().any(|(j, t)| {
                            t == &Token::Name(v.clone())
                                && !matches!(
                                    j.checked_sub(1).map(|b| &tokens[b]),
                                    Some(Token::Op(">" | ">>"))
                                )
                        });
                        e.writes_vars.push(v.clone());
                    }
                    _ => e.writes_unknown = true,
                }
            }
            Token::Op("|") | Token::Op("|&") => {
                if tokens.get(k + 1) == Some(&Token::Name("getline".to_string())) {
                    // `"cmd" | getline`: the command is the value before the pipe.
                    match k.checked_sub(1).and_then(|p| tokens.get(p)) {
                        Some(Token::Str(s)) => e.runs.push(s.clone()),
                        _ => e.runs_unknown = true,
                    }
                } else {
                    // `print ... | "cmd"`: the command reads what the program prints.
                    match lone_after(&tokens, k + 1) {
                        Some(Token::Str(c)) => e.fed.push(c.clone()),
                        _ => e.runs_unknown = true,
                    }
                }
            }
            Token::Op("@") => e.opaque = true,
            // A program that rewrites its arguments (`ARGV[1] = "out=F"`) or any variable by
            // name (gawk's `SYMTAB`) may set the one a redirection names.
            Token::Name(n) if REBINDS.contains(&n.as_str()) => e.rebinds = true,
            _ if ends_statement(t) => print_depth = None,
            _ => {}
        }
    }
    e.writes_unknown |= e.rebinds && !e.writes_vars.is_empty();
    Some(e)
}

/// Variables awk sets itself as it runs, whatever the command assigns them.
const AWK_SETS: Names =
    Names("FILENAME NR FNR NF RT ERRNO RSTART RLENGTH ARGIND ARGC ARGV ENVIRON PROCINFO SYMTAB");

/// Names through which a program sets variables other than by assigning them.
const REBINDS: Names = Names("ARGV ARGC SYMTAB");

/// gawk's options that write a file, and the file each writes when given no value.
const WRITES: &[(&str, &str)] = &[
    ("dump-variables", "awkvars.out"),
    ("pretty-print", "awkprof.out"),
    ("profile", "awkprof.out"),
];

impl Walk<'_> {
    /// `awk [OPTIONS] PROGRAM [FILE | VAR=VALUE]...`, its options read by its spec (`specs`):
    /// the program read whole, the files `-i inplace` edits, the files gawk's profiling
    /// options write, and the values the command assigns (`-v out=F`, `out=F`) for the
    /// variables its output redirections name.
    pub(super) fn awk(&mut self, name: &str, p: &Parsed) {
        use CommandClass::*;
        let from_file = p.has_any(&["file", "exec"]);
        if from_file {
            self.raise(
                ShellComplex,
                format!("{name} runs a program file the classifier does not read"),
            );
        }
        for g in p
            .given
            .iter()
            .filter(|g| ["load", "W", "debug"].iter().any(|o| g.is(o)))
        {
            self.raise(
                ShellComplex,
                format!(
                    "{name} {} is an option the classifier does not read",
                    g.spelled
                ),
            );
        }
        let mut in_place = false;
        for v in p.values("include") {
            match v.text() {
                Some("inplace") => in_place = true,
                _ => self.raise(
                    ShellComplex,
                    format!("{name} -i loads code the classifier does not read"),
                ),
            }
        }
        for (option, default) in WRITES {
            for g in p.given.iter().filter(|g| g.is(option)) {
                self.write_target(g.value.as_ref().unwrap_or(&Arg::literal(default)));
            }
        }
        let mut programs: Vec<Arg> = p.values("source").into_iter().cloned().collect();
        let mut operands = &p.operands[..];
        if programs.is_empty() && !from_file {
            let Some((program, rest)) = operands.split_first() else {
                return;
            };
            programs.push(program.clone());
            operands = rest;
        }
        // `var=value` operands are assignments, the rest files.
        let is_assignment = |a: &&Arg| {
            a.text()
                .is_some_and(|t| t.contains('=') && !t.starts_with('/'))
        };
        let assigned: Vec<Arg> = (p.values("assign").into_iter())
            .chain(operands.iter().filter(is_assignment))
            .cloned()
            .collect();
        let sandbox = p.has("sandbox");
        for program in &programs {
            match program.text() {
                Some(text) => self.awk_program(name, text, sandbox, &assigned),
                None => self.raise(
                    ShellComplex,
                    format!(
                        "{name} runs a program the classifier cannot read ({})",
                        program.raw
                    ),
                ),
            }
        }
        if in_place {
            let files: Vec<&Arg> = operands.iter().filter(|a| !is_assignment(a)).collect();
            for f in files {
                self.write_target(f);
            }
        }
    }

    /// One awk program: `ShellComplex` when the classifier cannot read it; what it writes and
    /// runs otherwise (`sandbox`: gawk runs neither), a file named by a variable at the values
    /// `assigned` (`VAR=VALUE` words) gives it.
    pub(super) fn awk_program(
        &mut self,
        name: &str,
        program: &str,
        sandbox: bool,
        assigned: &[Arg],
    ) {
        use CommandClass::*;
        let Some(mut e) = awk_effects(program) else {
            self.raise(
                ShellComplex,
                format!("{name} runs a program the classifier cannot read"),
            );
            // Its strings may still be paths or commands.
            self.inline_code(program);
            return;
        };
        if e.opaque {
            self.raise(
                ShellComplex,
                format!("{name}'s program has @ forms the classifier does not read"),
            );
        }
        if sandbox {
            return;
        }
        for w in &e.writes {
            self.write_target(&Arg::literal(w));
        }
        for var in &e.writes_vars {
            let values = assigned.iter().filter_map(|a| match a.text() {
                Some(t) => t
                    .strip_prefix(var.as_str())?
                    .strip_prefix('=')
                    .map(|v| a.with_text(v)),
                // An assignment the classifier cannot read may set this variable.
                None => Some(a.clone()),
            });
            let mut named = false;
            for v in values.collect::<Vec<_>>() {
                // awk decodes escapes in an assignment (`out=vendor\057x`).
                e.writes_unknown |= v.text().is_none_or(|t| t.contains('\\'));
                self.write_target(&v);
                named = true;
            }
            // Without an assignment it is empty, or set by the environment or the input.
            e.writes_unknown |= !named;
        }
        if e.writes_unknown {
            self.raise(
                ShellComplex,
                format!("{name} writes a file its program names by an expression"),
            );
            self.unplaced = true;
        }
        for command in &e.runs {
            self.raise(ShellComplex, format!("{name} runs a command"));
            let mut inner = self.nested();
            inner.source(command);
            self.absorb(inner);
        }
        for command in &e.fed {
            // Its output into a program that runs what it reads: text the command does not show.
            let words: Vec<Arg> = command.split_whitespace().map(Arg::literal).collect();
            let reader = words
                .split_first()
                .and_then(|(first, rest)| first.text().and_then(|p| resolve_program(p, rest)));
            if reader.is_some_and(|(p, a)| reads_code(&p, &a)) {
                self.raise(
                    Dangerous,
                    format!("{name} prints into {command}, which runs what it reads"),
                );
            }
            let mut inner = self.nested();
            inner.source(command);
            self.absorb(inner);
        }
        if e.runs_unknown {
            self.raise(
                Dangerous,
                format!("{name} runs a command built from text the classifier cannot read"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs() {
        // (program, writes, runs, fed, runs_unknown, writes_unknown); `None`: unreadable.
        type Case = (
            &'static str,
            Option<(&'static [&'static str], &'static [&'static str], bool, bool)>,
        );
        let cases: &[Case] = &[
            ("{print $1}", Some((&[], &[], false, false))),
            ("NR>1 {s+=$2} END {print s}", Some((&[], &[], false, false))),
            ("{ if ($3 > 10) print $1 }", Some((&[], &[], false, false))),
            ("length($0) > 80", Some((&[], &[], false, false))),
            (
                "{printf \"%s > %d\\n\", $1, $2}",
                Some((&[], &[], false, false)),
            ),
            ("/a|b/ {print}", Some((&[], &[], false, false))),
            ("{ print ($1 > $2) }", Some((&[], &[], false, false))),
            ("{ a = 6 / 3; print a }", Some((&[], &[], false, false))),
            (
                "{print > \"out.txt\"}",
                Some((&["out.txt"], &[], false, false)),
            ),
            (
                "{print $1 >> \"log\"; print}",
                Some((&["log"], &[], false, false)),
            ),
            (
                "{printf(\"%s\", $0) > \"f\"}",
                Some((&["f"], &[], false, false)),
            ),
            ("{print > $2}", Some((&[], &[], false, true))),
            (
                "BEGIN { system(\"ls\") }",
                Some((&[], &["ls"], false, false)),
            ),
            ("{ system($0) }", Some((&[], &[], true, false))),
            ("{ system(\"rm \" $1) }", Some((&[], &[], true, false))),
            (
                "BEGIN { \"date\" | getline d }",
                Some((&[], &["date"], false, false)),
            ),
            ("{ cmd | getline x }", Some((&[], &[], true, false))),
            ("{ getline line < \"f\" }", Some((&[], &[], false, false))),
            ("{print \"ls\" | \"sh\"}", Some((&[], &[], false, false))),
            ("{print $0 | cmd}", Some((&[], &[], true, false))),
            ("{print \"unterminated}", None),
        ];
        for &(program, want) in cases {
            let got = awk_effects(program);
            match (want, got) {
                (None, None) => {}
                (Some((writes, runs, runs_unknown, writes_unknown)), Some(e)) => {
                    assert_eq!(e.writes, writes, "{program}");
                    assert_eq!(e.runs, runs, "{program}");
                    assert_eq!(e.runs_unknown, runs_unknown, "{program}");
                    assert_eq!(e.writes_unknown, writes_unknown, "{program}");
                }
                (want, got) => panic!("{program}: want {want:?}, got {got:?}"),
            }
        }
        // A variable named by redirections only is placed at its value; one the program also
        // sets is not.
        let by_var = awk_effects("{ print > out; print >> out }").expect("reads");
        assert_eq!(
            (by_var.writes_vars, by_var.writes_unknown),
            (vec!["out".to_string(); 2], false)
        );
        // What awk itself sets, or lets the program set by other ways, is not the command's.
        for program in [
            "{ print > FILENAME }",
            "BEGIN { ARGV[1] = \"o=x\" } { print > o }",
        ] {
            assert!(
                awk_effects(program).expect("reads").writes_unknown,
                "{program}"
            );
        }
        // Escapes decode as awk decodes them: octal, gawk's hex, the letters.
        let escaped = awk_effects(r#"{ print > "vendor\057x"; print > "a\x2fb\tc" }"#);
        assert_eq!(
            escaped.map(|e| e.writes),
            Some(vec!["vendor/x".to_string(), "a/b\tc".to_string()])
        );
        let set = awk_effects("{ out = $1; print > out }").expect("reads");
        assert_eq!(
            (set.writes_vars, set.writes_unknown),
            (vec!["out".to_string()], true)
        );
        assert_eq!(
            awk_effects("{print \"ls\" | \"sh\"}").map(|e| e.fed),
            Some(vec!["sh".to_string()])
        );
    }
}
