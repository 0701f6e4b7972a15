//! `sed`: in-place editing, and the script commands that write files (`w`, `s///w`) or run
//! programs (`e`, `s///e`), read as what they write or run.

use super::opts::Parsed;
use super::*;

/// At most this many `e COMMAND` guesses are read in a script the classifier cannot read.
const MAX_SED_GUESSES: usize = 8;

/// What a sed script does beyond editing its text.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct SedEffects {
    /// Files `w`, `W` and `s///w` write.
    pub(super) writes: Vec<String>,
    /// Commands `e COMMAND` runs.
    pub(super) runs: Vec<String>,
    /// `e` alone or `s///e`: the text sed reads runs as a command.
    pub(super) runs_text: bool,
}

impl Walk<'_> {
    /// `sed`: the options are read by the spec table (`-i`, `-f` and their abbreviations);
    /// here the scripts and the files an in-place edit writes.
    pub(super) fn sed(&mut self, o: &Parsed) {
        let in_place = o.has("in-place");
        let from_file = o.has("file");
        let mut scripts: Vec<Option<&str>> =
            o.values("expression").iter().map(|a| a.text()).collect();
        let mut files = o.operands.iter();
        if scripts.is_empty() && !from_file {
            if let Some(s) = files.next() {
                scripts.push(s.text());
            }
        }
        for s in scripts {
            self.sed_script(s);
        }
        if in_place {
            for f in files {
                self.write_target(f);
            }
        }
    }

    /// One sed script (`None`: one the classifier cannot read).
    pub(super) fn sed_script(&mut self, script: Option<&str>) {
        let Some(effects) = script.and_then(sed_effects) else {
            self.raise(
                CommandClass::ShellComplex,
                "a sed script the classifier cannot read",
            );
            // What may follow an `e` in it is read as a command, in case it is one.
            for command in script
                .unwrap_or("")
                .split("e ")
                .skip(1)
                .take(MAX_SED_GUESSES)
            {
                let command = command.lines().next().unwrap_or("");
                let mut inner = self.nested();
                inner.source(command);
                if inner.class == CommandClass::Dangerous {
                    self.absorb(inner);
                }
            }
            return;
        };
        for w in &effects.writes {
            self.write_target(&Arg::literal(w));
        }
        for command in &effects.runs {
            self.raise(CommandClass::ShellComplex, "sed's e runs a command");
            let mut inner = self.nested();
            inner.source(command);
            self.absorb(inner);
        }
        if effects.runs_text {
            self.raise(
                CommandClass::Dangerous,
                "sed's e runs the text it reads as a command, which the command does not show",
            );
        }
    }
}

/// Whether every sed script command is one that neither writes files nor runs programs.
#[cfg(test)]
pub(super) fn sed_plain(script: &str) -> bool {
    sed_effects(script).is_some_and(|e| e == SedEffects::default())
}

/// What a sed script writes and runs; `None` for one the classifier cannot read.
pub(super) fn sed_effects(script: &str) -> Option<SedEffects> {
    let s: Vec<char> = script.chars().collect();
    let mut effects = SedEffects::default();
    let mut i = 0;
    let skip_ws = |i: &mut usize| {
        while *i < s.len() && (s[*i] == ' ' || s[*i] == '\t') {
            *i += 1;
        }
    };
    // Reads up to an unescaped `delim`; returns false when it is missing.
    let delimited = |i: &mut usize, delim: char| -> bool {
        while *i < s.len() {
            if s[*i] == '\\' {
                *i += 2;
                continue;
            }
            if s[*i] == delim {
                *i += 1;
                return true;
            }
            if s[*i] == '\n' {
                return false;
            }
            *i += 1;
        }
        false
    };
    // The rest of the line (a file name, a label, text, a command).
    let rest_of_line = |i: &mut usize| -> String {
        let start = *i;
        while *i < s.len() && s[*i] != '\n' {
            *i += 1;
        }
        s[start..*i].iter().collect::<String>().trim().to_string()
    };
    let address = |i: &mut usize| -> bool {
        if *i < s.len() && s[*i] == '$' {
            *i += 1;
        } else if *i < s.len() && s[*i].is_ascii_digit() {
            while *i < s.len() && (s[*i].is_ascii_digit() || s[*i] == '~') {
                *i += 1;
            }
        } else if *i < s.len() && (s[*i] == '/' || s[*i] == '\\') {
            // `/re/` or `\%re%`.
            let delim = if s[*i] == '\\' {
                *i += 1;
                match s.get(*i) {
                    Some(d) => *d,
                    None => return false,
                }
            } else {
                '/'
            };
            *i += 1;
            if !delimited(i, delim) {
                return false;
            }
            while *i < s.len() && (s[*i] == 'I' || s[*i] == 'M') {
                *i += 1;
            }
        }
        true
    };
    loop {
        while i < s.len() && (s[i].is_whitespace() || s[i] == ';') {
            i += 1;
        }
        if i >= s.len() {
            return Some(effects);
        }
        if !address(&mut i) {
            return None;
        }
        if i < s.len() && s[i] == ',' {
            i += 1;
            if i < s.len() && (s[i] == '+' || s[i] == '~') {
                i += 1;
            }
            if !address(&mut i) {
                return None;
            }
        }
        skip_ws(&mut i);
        if i < s.len() && s[i] == '!' {
            i += 1;
            skip_ws(&mut i);
        }
        let cmd = *s.get(i)?;
        i += 1;
        match cmd {
            // A block opens; its first command follows without a separator.
            '{' => continue,
            'p' | 'd' | 'D' | 'n' | 'N' | 'g' | 'G' | 'h' | 'H' | 'x' | 'P' | '=' | 'z' | 'F'
            | '}' => {}
            'q' | 'Q' | 'l' | 'L' => {
                skip_ws(&mut i);
                while i < s.len() && s[i].is_ascii_digit() {
                    i += 1;
                }
            }
            // Labels and branches: GNU ends them at `;` too.
            ':' | 'b' | 't' | 'T' | 'v' => {
                while i < s.len() && !matches!(s[i], '\n' | ';' | '}') {
                    i += 1;
                }
            }
            // Text to print, a file to read: nothing written or run.
            'a' | 'i' | 'c' | 'r' | 'R' => {
                // `a\<newline>text` continues over escaped line ends.
                loop {
                    let line = rest_of_line(&mut i);
                    if !line.ends_with('\\') || i >= s.len() {
                        break;
                    }
                    i += 1;
                }
            }
            'w' | 'W' => {
                let file = rest_of_line(&mut i);
                if file.is_empty() {
                    return None;
                }
                effects.writes.push(file);
            }
            'e' => {
                let command = rest_of_line(&mut i);
                match command.is_empty() {
                    true => effects.runs_text = true,
                    false => effects.runs.push(command),
                }
            }
            's' | 'y' => {
                let delim = *s.get(i)?;
                if delim == '\\' || delim == '\n' {
                    return None;
                }
                i += 1;
                if !delimited(&mut i, delim) || !delimited(&mut i, delim) {
                    return None;
                }
                if cmd == 's' {
                    while i < s.len() && "gpiImM0123456789e".contains(s[i]) {
                        effects.runs_text |= s[i] == 'e';
                        i += 1;
                    }
                    if i < s.len() && s[i] == 'w' {
                        i += 1;
                        let file = rest_of_line(&mut i);
                        if file.is_empty() {
                            return None;
                        }
                        effects.writes.push(file);
                    }
                }
            }
            '#' => {
                rest_of_line(&mut i);
            }
            _ => return None,
        }
        skip_ws(&mut i);
        if i < s.len() && !matches!(s[i], ';' | '\n' | '}') {
            return None;
        }
    }
}
