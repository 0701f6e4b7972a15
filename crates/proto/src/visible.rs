//! Text from the model, shown to a person: the owner reading an `ask` question, whoever reads
//! a refusal or a stop, the operator reading the audit log.
//!
//! The model chooses every character of a command, a path or a URL, so a question built from
//! one could carry its own line breaks (`ls\n\nAllow grant notes to run ls?`), terminal escape
//! sequences that rewrite the screen, or bidirectional overrides that show text in another
//! order than the one it runs in. [`Visible`] shows each such character as an escape instead:
//!
//! | character                                                    | shown as               |
//! |--------------------------------------------------------------|------------------------|
//! | `\`                                                          | `\\`                   |
//! | line feed, carriage return, tab                              | `\n`, `\r`, `\t`       |
//! | any other ASCII control, and DEL                             | `\x1b`, `\x7f`, ...    |
//! | C1 controls (U+0080 to U+009F)                               | `\u{85}`, ...          |
//! | format characters (Cf): bidi controls, zero-width ones, tags | `\u{202e}`, ...        |
//! | line and paragraph separators (U+2028, U+2029)               | `\u{2028}`, `\u{2029}` |
//! | anything else (`é`, `日本`, spaces)                            | itself                 |
//!
//! The backslash is doubled so that a backslash the reader sees always starts an escape: a
//! model that writes the two characters `\` `n` is shown `\\n`, never a fake line break.
//! Rendering is for display only: approval tickets stay bound to the exact raw call, and
//! whatever runs gets the raw text.
//!
//! [`Shown`] is the same rendering for text whose backslashes must stay as they are: text
//! already in this notation (a staged change's `path`, which brokerd sends shown), or a diff
//! line a person reads as code. Only the hidden characters become escapes, so nothing raw
//! reaches a terminal, and a text that is already visible passes unchanged.
//!
//! Defined here, not in brokerd, because clients show the model's text too (`boxctl changes`).

use std::fmt::{self, Write};

/// Format characters (general category Cf, Unicode 15.1), as inclusive ranges.
const FORMAT: [(char, char); 21] = [
    ('\u{ad}', '\u{ad}'),
    ('\u{600}', '\u{605}'),
    ('\u{61c}', '\u{61c}'),
    ('\u{6dd}', '\u{6dd}'),
    ('\u{70f}', '\u{70f}'),
    ('\u{890}', '\u{891}'),
    ('\u{8e2}', '\u{8e2}'),
    ('\u{180e}', '\u{180e}'),
    ('\u{200b}', '\u{200f}'),
    ('\u{202a}', '\u{202e}'),
    ('\u{2060}', '\u{2064}'),
    ('\u{2066}', '\u{206f}'),
    ('\u{feff}', '\u{feff}'),
    ('\u{fff9}', '\u{fffb}'),
    ('\u{110bd}', '\u{110bd}'),
    ('\u{110cd}', '\u{110cd}'),
    ('\u{13430}', '\u{1343f}'),
    ('\u{1bca0}', '\u{1bca3}'),
    ('\u{1d173}', '\u{1d17a}'),
    ('\u{e0001}', '\u{e0001}'),
    ('\u{e0020}', '\u{e007f}'),
];

/// A text from the model, displayed with every character that could hide or rearrange what a
/// person reads shown as an escape (module docs).
#[derive(Debug, Clone, Copy)]
pub struct Visible<'a>(pub &'a str);

impl fmt::Display for Visible<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        escape(self.0, true, f)
    }
}

/// A text shown with its hidden characters as escapes and its backslashes as they are (module
/// docs): for text already visible, or read as code.
#[derive(Debug, Clone, Copy)]
pub struct Shown<'a>(pub &'a str);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        escape(self.0, false, f)
    }
}

/// Writes `text` with each hidden character as an escape, and each backslash doubled when
/// `backslash` says so.
fn escape(text: &str, backslash: bool, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let mut plain = 0;
    for (i, c) in text.char_indices() {
        if !(hidden(c) || (backslash && c == '\\')) {
            continue;
        }
        f.write_str(&text[plain..i])?;
        plain = i + c.len_utf8();
        match c {
            '\\' => f.write_str("\\\\")?,
            '\n' => f.write_str("\\n")?,
            '\r' => f.write_str("\\r")?,
            '\t' => f.write_str("\\t")?,
            c if c.is_ascii() => write!(f, "\\x{:02x}", u32::from(c))?,
            c => write!(f, "\\u{{{:x}}}", u32::from(c))?,
        }
    }
    f.write_str(&text[plain..])
}

/// `text` as [`Visible`] displays it.
pub fn visible(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    // Writing into a String cannot fail.
    let _ = write!(out, "{}", Visible(text));
    out
}

/// Whether `c` is shown as an escape: a control (Cc), a format character (Cf), or a line or
/// paragraph separator (Zl, Zp).
fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}')
        || FORMAT
            .iter()
            .any(|&(first, last)| (first..=last).contains(&c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renderings() {
        // (text, as shown)
        let cases = [
            ("ls -la", "ls -la"),
            ("", ""),
            ("café 日本語 ☃ naïve Ωmega", "café 日本語 ☃ naïve Ωmega"),
            ("a b\u{a0}c\u{3000}d", "a b\u{a0}c\u{3000}d"),
            ("ls\nrm -rf ~", "ls\\nrm -rf ~"),
            ("a\r\nb", "a\\r\\nb"),
            ("a\tb", "a\\tb"),
            ("\u{1b}[2J\u{1b}]0;title\u{7}", "\\x1b[2J\\x1b]0;title\\x07"),
            ("\0", "\\x00"),
            ("\u{7f}", "\\x7f"),
            ("\u{85}\u{9b}31m", "\\u{85}\\u{9b}31m"),
            ("abc\u{202e}fed", "abc\\u{202e}fed"),
            (
                "\u{202a}\u{202b}\u{202c}\u{202d}",
                "\\u{202a}\\u{202b}\\u{202c}\\u{202d}",
            ),
            (
                "\u{2066}\u{2067}\u{2068}\u{2069}",
                "\\u{2066}\\u{2067}\\u{2068}\\u{2069}",
            ),
            ("\u{200e}\u{200f}\u{61c}", "\\u{200e}\\u{200f}\\u{61c}"),
            ("r\u{200b}m", "r\\u{200b}m"),
            (
                "\u{200c}\u{200d}\u{2060}\u{feff}",
                "\\u{200c}\\u{200d}\\u{2060}\\u{feff}",
            ),
            ("\u{2061}\u{2064}", "\\u{2061}\\u{2064}"),
            ("soft\u{ad}hyphen", "soft\\u{ad}hyphen"),
            ("\u{2028}\u{2029}", "\\u{2028}\\u{2029}"),
            ("tag\u{e0041}\u{e007f}", "tag\\u{e0041}\\u{e007f}"),
            ("\u{13430}\u{1343f}", "\\u{13430}\\u{1343f}"),
            // A backslash is doubled, so text cannot pass for an escape.
            ("C:\\dir", "C:\\\\dir"),
            ("\\n", "\\\\n"),
            ("\\u{202e}", "\\\\u{202e}"),
            ("\\\n", "\\\\\\n"),
            // Neighbours of the ranges stay as they are.
            (
                "\u{ac}\u{ae}\u{200a}\u{2010}\u{2065}\u{fff8}",
                "\u{ac}\u{ae}\u{200a}\u{2010}\u{2065}\u{fff8}",
            ),
        ];
        for (text, shown) in cases {
            assert_eq!(visible(text), shown, "{text:?}");
            assert_eq!(Visible(text).to_string(), shown, "{text:?}");
        }
    }

    /// Whatever the text, what is shown holds no control, format or separator character, and
    /// reads back as the text: the rendering hides nothing and merges nothing.
    #[test]
    fn shown_text_is_plain_and_unambiguous() {
        let texts = [
            "plain",
            "\\",
            "\\\\x1b",
            "\u{1b}\\x1b",
            "\u{202e}\\u{202e}",
            "é\n\u{85}\u{2028}\t日本\u{feff}",
        ];
        for text in texts {
            let shown = visible(text);
            assert!(!shown.chars().any(hidden), "{text:?} shown as {shown:?}");
            assert_eq!(unescape(&shown), text, "{text:?} shown as {shown:?}");
            // Text already visible passes through Shown unchanged.
            assert_eq!(Shown(&shown).to_string(), shown, "{text:?}");
        }
    }

    /// Shown escapes what Visible escapes, but a backslash stays one.
    #[test]
    fn shown_keeps_backslashes() {
        // (text, as shown)
        let cases = [
            ("/srv/notes/a.txt", "/srv/notes/a.txt"),
            ("", ""),
            ("C:\\dir", "C:\\dir"),
            ("printf(\"\\n\");", "printf(\"\\n\");"),
            ("already\\nshown", "already\\nshown"),
            ("a\nb", "a\\nb"),
            ("\t+x", "\\t+x"),
            ("\u{1b}[2J", "\\x1b[2J"),
            ("abc\u{202e}fed", "abc\\u{202e}fed"),
            ("\u{85}\u{2028}", "\\u{85}\\u{2028}"),
            ("café 日本", "café 日本"),
        ];
        for (text, shown) in cases {
            assert_eq!(Shown(text).to_string(), shown, "{text:?}");
            assert!(!shown.chars().any(hidden), "{text:?}");
        }
    }

    fn unescape(shown: &str) -> String {
        let mut out = String::new();
        let mut chars = shown.chars();
        while let Some(c) = chars.next() {
            if c != '\\' {
                out.push(c);
                continue;
            }
            match chars.next() {
                Some('\\') => out.push('\\'),
                Some('n') => out.push('\n'),
                Some('r') => out.push('\r'),
                Some('t') => out.push('\t'),
                Some('x') => {
                    let hex: String = chars.by_ref().take(2).collect();
                    out.push(char::from(u8::from_str_radix(&hex, 16).expect("hex")));
                }
                Some('u') => {
                    let hex: String = chars.by_ref().skip(1).take_while(|c| *c != '}').collect();
                    let n = u32::from_str_radix(&hex, 16).expect("hex");
                    out.push(char::from_u32(n).expect("a char"));
                }
                other => panic!("{shown:?}: a backslash before {other:?}"),
            }
        }
        out
    }
}
