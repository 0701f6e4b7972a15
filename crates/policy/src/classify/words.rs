//! Words as the shell will see them: quote removal, literal values, inline-code paths.

use super::*;
/// One argument as the classifier reads it.
#[derive(Debug, Clone)]
pub(super) struct Arg {
    /// The word after quote removal, when it holds no expansion or substitution.
    pub(super) lit: Option<String>,
    /// Unquoted glob or brace characters: the word may stand for other or several words.
    pub(super) pattern: bool,
    /// The source text (for messages and unreadable write targets).
    pub(super) raw: String,
    /// `{}` of `find -exec` (and the names find gives xargs): `lit` is the path find starts
    /// from, and the word stands for what it finds under it.
    pub(super) found: Found,
    /// For a word that is not literal, its parts (text, variables, substitutions), so that
    /// what it may become can be told (`Walk::expand`); `None` for a literal word or one read
    /// shallowly.
    pub(super) parts: Option<Vec<Part>>,
}

/// A part of a word that is not literal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Part {
    Text(String),
    /// `$x`, `${x}`, `"$@"`, `$1`, `${a[@]}`.
    Var(String),
    /// `${x:-WORD}` and its kin: the variable, or WORD (`None` when WORD is not literal).
    Or(String, Option<String>),
    /// `${x#y}`, `${x/a/b}` and their kin: text made from the variable.
    Made(String),
    /// `$(...)`, `` `...` ``: what the command prints.
    Output(Produced),
    /// `<(...)`: a file holding what the command prints.
    Fed(Produced),
    /// Anything else (arithmetic, `${!x}`): text the classifier does not follow.
    Opaque,
}

/// What a `{}` of `find` stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Found {
    /// Not a `{}`.
    No,
    /// Every file under the start path, the start included: no test narrows what find finds.
    Every,
    /// Some files under the start path, none of them a grant directory or one holding one.
    Some,
}

impl Arg {
    pub(super) fn text(&self) -> Option<&str> {
        self.lit.as_deref()
    }
    /// The word node `n` as the classifier reads it.
    pub(super) fn of(n: Node, src: &str) -> Arg {
        let mut a = Arg::shallow(n, src);
        if a.lit.is_none() {
            let mut parts = Vec::new();
            word_parts(n, src, &mut parts, 0);
            a.parts = Some(parts);
        }
        a
    }

    /// The word read literally only (no parts): for looking at a program and its options.
    pub(super) fn shallow(n: Node, src: &str) -> Arg {
        let raw = src[n.byte_range()].to_string();
        let (lit, pattern) = match literal(n, src) {
            Some((t, pattern)) => (Some(t), pattern),
            None => (None, false),
        };
        Arg {
            lit,
            pattern,
            raw,
            found: Found::No,
            parts: None,
        }
    }

    pub(super) fn literal(s: &str) -> Arg {
        Arg {
            lit: Some(s.to_string()),
            pattern: false,
            raw: s.to_string(),
            found: Found::No,
            parts: None,
        }
    }

    /// The same word read as `text` (a value cut from it, `of=FILE`, a member under `-C DIR`).
    pub(super) fn with_text(&self, text: &str) -> Arg {
        Arg {
            lit: Some(text.to_string()),
            ..self.clone()
        }
    }
}

/// The literal value of a word node, or `None` when it depends on the shell's state.
pub(super) fn literal(n: Node, src: &str) -> Option<(String, bool)> {
    let text = &src[n.byte_range()];
    match n.kind() {
        "word" => Some(unescape_word(text)),
        "number" if n.named_child_count() == 0 => Some((text.to_string(), false)),
        "raw_string" => {
            let inner = text.strip_prefix('\'')?.strip_suffix('\'')?;
            Some((inner.to_string(), false))
        }
        "string" => {
            let mut c = n.walk();
            if n.named_children(&mut c)
                .any(|ch| ch.kind() != "string_content")
            {
                return None;
            }
            let inner = text.strip_prefix('"')?.strip_suffix('"')?;
            Some((unescape_double(inner), false))
        }
        "concatenation" => {
            let mut out = String::new();
            let mut pattern = false;
            let mut c = n.walk();
            for ch in n.children(&mut c) {
                let (t, p) = literal(ch, src)?;
                out.push_str(&t);
                pattern |= p;
            }
            Some((out, pattern))
        }
        "brace_expression" => Some((text.to_string(), true)),
        "ansi_c_string" => {
            let inner = text.strip_prefix("$'")?.strip_suffix('\'')?;
            Some((unescape_ansi_c(inner)?, false))
        }
        _ => None,
    }
}

/// The parts of a word that is not literal (see `Part`).
fn word_parts(n: Node, src: &str, out: &mut Vec<Part>, depth: usize) {
    if depth > 16 {
        out.push(Part::Opaque);
        return;
    }
    let text = &src[n.byte_range()];
    let name_of = |n: Node| -> Option<String> {
        let mut c = n.walk();
        let child = n.named_children(&mut c).next()?;
        let name = match child.kind() {
            "subscript" => child.child_by_field_name("name")?,
            _ => child,
        };
        Some(src[name.byte_range()].to_string())
    };
    match n.kind() {
        "concatenation" | "string" => {
            let mut c = n.walk();
            for ch in n.named_children(&mut c) {
                word_parts(ch, src, out, depth + 1);
            }
            // `"a$(x)"`: the quotes themselves are no text.
            if n.kind() == "string" && n.named_child_count() == 0 {
                out.push(Part::Text(String::new()));
            }
        }
        "string_content" => out.push(Part::Text(unescape_double(text))),
        "simple_expansion" => match name_of(n) {
            Some(name) => out.push(Part::Var(name)),
            None => out.push(Part::Opaque),
        },
        "expansion" => out.push(expansion_part(text, name_of(n))),
        "command_substitution" => out.push(Part::Output(produced(n, src, 0))),
        "process_substitution" => out.push(Part::Fed(produced(n, src, 0))),
        _ => match literal(n, src) {
            Some((t, _)) => out.push(Part::Text(t)),
            None => out.push(Part::Opaque),
        },
    }
}

/// Operators of `${NAME OP WORD}` that give the variable or WORD.
const OR_OPERATORS: &[&str] = &[":-", ":=", ":+", "-", "=", "+", ":?", "?"];

/// A `${...}` expansion: the variable, the variable or a word, or text made from it.
fn expansion_part(text: &str, name: Option<String>) -> Part {
    let Some(name) = name else {
        return Part::Opaque;
    };
    let inner = text
        .strip_prefix("${")
        .and_then(|t| t.strip_suffix('}'))
        .unwrap_or("");
    if inner.starts_with('!') {
        return Part::Opaque;
    }
    if inner.starts_with('#') {
        return Part::Text("0".to_string());
    }
    let rest = inner.strip_prefix(name.as_str()).unwrap_or(inner);
    // `${a[@]}`: the subscript is the array's.
    let rest = match rest.strip_prefix('[') {
        Some(r) => r.split_once(']').map_or("", |(_, after)| after),
        None => rest,
    };
    if rest.is_empty() {
        return Part::Var(name);
    }
    match OR_OPERATORS.iter().find(|op| rest.starts_with(*op)) {
        Some(op) => {
            let word = &rest[op.len()..];
            let literal = !word.contains(['$', '`']);
            Part::Or(
                name,
                literal.then(|| unescape_double(word.trim_matches(['"', '\'']))),
            )
        }
        None => Part::Made(name),
    }
}

/// Quote removal for an unquoted word; reports unescaped glob and brace characters.
pub(super) fn unescape_word(text: &str) -> (String, bool) {
    let mut out = String::with_capacity(text.len());
    let mut pattern = false;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('\n') | None => {}
                Some(e) => out.push(e),
            },
            '*' | '?' | '[' | '{' | '}' => {
                pattern = true;
                out.push(c);
            }
            _ => out.push(c),
        }
    }
    (out, pattern)
}

/// Quote removal inside double quotes, where a backslash escapes only `$`, `` ` ``, `"`, `\`.
pub(super) fn unescape_double(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.peek() {
                Some('$' | '`' | '"' | '\\') => {
                    if let Some(e) = chars.next() {
                        out.push(e);
                    }
                }
                Some('\n') => {
                    chars.next();
                }
                _ => out.push(c),
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The quoted string literals of inline code (`"gen/x.c"`, `'rm -rf /'`), at most 64: in
/// quotes, and in Perl's and Ruby's quote-like operators (`q(...)`, `qq{...}`, `qx[...]`,
/// `qw<...>`, `%x(...)`, `%Q|...|`), whose delimiter is any punctuation (brackets nest). A
/// language without them only gets more of its text read as what it may write or run.
pub(super) fn string_literals(code: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let (open, start) = match quote_like(code, i) {
            Some(found) => found,
            None => {
                i += code[i..].chars().next().map_or(1, char::len_utf8);
                continue;
            }
        };
        let Some(end) = closing(code, start, open) else {
            break;
        };
        if out.len() < 64 && end - start <= 4096 {
            out.push(&code[start..end]);
        }
        i = end + open.len_utf8();
    }
    out
}

/// Where a string literal opens at byte `i`: its opening delimiter and where its text starts.
fn quote_like(code: &str, i: usize) -> Option<(char, usize)> {
    let rest = &code[i..];
    let c = rest.chars().next()?;
    if matches!(c, '"' | '\'' | '`') {
        return Some((c, i + 1));
    }
    let word_before = code[..i]
        .chars()
        .next_back()
        .is_some_and(|p| p.is_alphanumeric() || p == '_' || p == '$' || p == '@');
    if word_before {
        return None;
    }
    // Perl: q qq qx qw; Ruby: %q %Q %x %w %W %i %I %r %s and a bare %.
    let after = ["qq", "qx", "qw", "q"]
        .iter()
        .find(|op| rest.starts_with(**op))
        .map(|op| &rest[op.len()..])
        .or_else(|| {
            let r = rest.strip_prefix('%')?;
            Some(
                r.strip_prefix(['q', 'Q', 'x', 'w', 'W', 'i', 'I', 'r', 's'])
                    .unwrap_or(r),
            )
        })?;
    let open = after.chars().next()?;
    let delimiter = open.is_ascii_punctuation() && !matches!(open, '_' | '=' | ',' | ';' | '.');
    delimiter.then(|| (open, code.len() - after.len() + open.len_utf8()))
}

/// The byte where a literal opened by `open` at `start` closes: the matching bracket (nesting
/// counted) or the same character, a backslash escaping; `None` when it does not close.
fn closing(code: &str, start: usize, open: char) -> Option<usize> {
    let close = match open {
        '(' => ')',
        '[' => ']',
        '{' => '}',
        '<' => '>',
        c => c,
    };
    let mut depth = 0usize;
    let mut escaped = false;
    for (j, c) in code[start..].char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == close && depth == 0 {
            return Some(start + j);
        } else if c == close {
            depth -= 1;
        } else if c == open && open != close {
            depth += 1;
        }
    }
    None
}

/// String literals an inline program names that look like paths (`"gen/x.c"`, `'./a'`).
pub(super) fn inline_paths(code: &str) -> Vec<String> {
    string_literals(code)
        .into_iter()
        // Perl's two-argument `open` takes its mode in the name (`">vendor/x"`, `"+< f"`).
        .map(|s| s.trim_start_matches(['>', '<', '+', '|']).trim_start())
        .filter(|s| {
            !s.is_empty()
                && (s.contains('/') || s.contains('.'))
                && !s.contains("://")
                && !s.chars().any(|c| c.is_whitespace() || c.is_control())
        })
        .map(str::to_string)
        .collect()
}

/// Bash's `$'...'` escapes; `None` for one the classifier does not decode or a NUL.
fn unescape_ansi_c(text: &str) -> Option<String> {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let e = chars.next()?;
        let simple = match e {
            'a' => Some('\u{7}'),
            'b' => Some('\u{8}'),
            'e' | 'E' => Some('\u{1b}'),
            'f' => Some('\u{c}'),
            'n' => Some('\n'),
            'r' => Some('\r'),
            't' => Some('\t'),
            'v' => Some('\u{b}'),
            '\\' | '\'' | '"' | '?' => Some(e),
            _ => None,
        };
        if let Some(s) = simple {
            out.push(s);
            continue;
        }
        let (radix, max) = match e {
            'x' => (16, 2),
            'u' => (16, 4),
            'U' => (16, 8),
            '0'..='7' => (8, 2),
            _ => return None,
        };
        // An octal escape's first digit is the escape itself.
        let (digits, max) = match radix {
            8 => (e.to_string(), max + 1),
            _ => (String::new(), max),
        };
        out.push(numeric_escape(&mut chars, digits, radix, max)?);
    }
    Some(out)
}

/// The character of a numeric escape: its digits of `radix` begin with `digits` and go on in
/// `chars` while there are fewer than `max`. None for NUL (which no argument can hold) or a
/// value that is no character.
pub(super) fn numeric_escape(
    chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
    mut digits: String,
    radix: u32,
    max: usize,
) -> Option<char> {
    while digits.len() < max {
        match chars.peek() {
            Some(d) if d.is_digit(radix) => {
                digits.push(*d);
                chars.next();
            }
            _ => break,
        }
    }
    let value = u32::from_str_radix(&digits, radix).ok()?;
    char::from_u32(value).filter(|c| *c != '\0')
}

/// Whether bash would brace-expand the word (`{a,b}`, `x{1..3}`); busybox ash does not.
pub(super) fn brace_expansion(n: Node, src: &str) -> bool {
    let mut shape = String::new();
    if !word_shape(n, src, &mut shape, 0) {
        return true;
    }
    let chars: Vec<char> = shape.chars().collect();
    let mut open: Vec<(usize, bool)> = Vec::new();
    for (i, c) in chars.iter().enumerate() {
        match c {
            '{' => open.push((i, false)),
            ',' => {
                if let Some(last) = open.last_mut() {
                    last.1 = true;
                }
            }
            '.' if chars.get(i + 1) == Some(&'.') => {
                if let Some(last) = open.last_mut() {
                    last.1 = true;
                }
            }
            '}' => {
                if let Some((_, listed)) = open.pop() {
                    if listed {
                        return true;
                    }
                }
            }
            _ => {}
        }
    }
    false
}

/// The word with quoted parts and escaped characters replaced by `x`; false when a
/// `brace_expression` node is found or the word nests too deeply to look at.
fn word_shape(n: Node, src: &str, out: &mut String, depth: usize) -> bool {
    if depth > 16 {
        return false;
    }
    match n.kind() {
        "brace_expression" => false,
        "word" => {
            let mut chars = src[n.byte_range()].chars();
            while let Some(c) = chars.next() {
                if c == '\\' {
                    chars.next();
                    out.push('x');
                } else {
                    out.push(c);
                }
            }
            true
        }
        "concatenation" => {
            let mut c = n.walk();
            let children: Vec<Node> = n.children(&mut c).collect();
            children
                .into_iter()
                .all(|ch| word_shape(ch, src, out, depth + 1))
        }
        _ => {
            out.push('x');
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// bash's `$'...'` takes one to three octal digits and up to two hex ones; printf's format
    /// (`produce::printf_text`) reads the same digits through `numeric_escape`.
    #[test]
    fn numeric_escapes_take_their_digits_and_no_more() {
        assert_eq!(unescape_ansi_c(r"\162m"), Some("rm".into()));
        assert_eq!(unescape_ansi_c(r"\1623"), Some("r3".into()));
        assert_eq!(unescape_ansi_c(r"\x72m"), Some("rm".into()));
        assert_eq!(unescape_ansi_c(r"\x7"), Some("\u{7}".into()));
        assert_eq!(unescape_ansi_c(r"\u0072m"), Some("rm".into()));
        assert_eq!(unescape_ansi_c(r"\0"), None, "NUL");
        assert_eq!(unescape_ansi_c(r"\xg"), None, "no digits");
        assert_eq!(unescape_ansi_c(r"\U00110000"), None, "no character");
        let mut chars = "623x".chars().peekable();
        assert_eq!(numeric_escape(&mut chars, "1".into(), 8, 3), Some('r'));
        assert_eq!(chars.collect::<String>(), "3x");
    }
}
