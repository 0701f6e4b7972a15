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

/// A sed script read a character at a time.
struct Script {
    s: Vec<char>,
    i: usize,
}

impl Script {
    fn at(&self, c: char) -> bool {
        self.s.get(self.i) == Some(&c)
    }

    fn skip_ws(&mut self) {
        while self.at(' ') || self.at('\t') {
            self.i += 1;
        }
    }

    /// Reads up to an unescaped `delim`; false when it is missing.
    fn delimited(&mut self, delim: char) -> bool {
        while let Some(&c) = self.s.get(self.i) {
            match c {
                '\\' => self.i += 2,
                '\n' => return false,
                _ => {
                    self.i += 1;
                    if c == delim {
                        return true;
                    }
                }
            }
        }
        false
    }

    /// The rest of the line (a file name, a label, text, a command).
    fn rest_of_line(&mut self) -> String {
        let start = self.i;
        while self.i < self.s.len() && self.s[self.i] != '\n' {
            self.i += 1;
        }
        self.s[start..self.i]
            .iter()
            .collect::<String>()
            .trim()
            .to_string()
    }

    /// A line number, `$`, or `/re/` (`\%re%`) with its flags; false for one it cannot read.
    fn address(&mut self) -> bool {
        let s = &self.s;
        if self.at('$') {
            self.i += 1;
        } else if s.get(self.i).is_some_and(char::is_ascii_digit) {
            while s
                .get(self.i)
                .is_some_and(|c| c.is_ascii_digit() || *c == '~')
            {
                self.i += 1;
            }
        } else if self.at('/') || self.at('\\') {
            let delim = if self.at('\\') {
                self.i += 1;
                match s.get(self.i) {
                    Some(d) => *d,
                    None => return false,
                }
            } else {
                '/'
            };
            self.i += 1;
            if !self.delimited(delim) {
                return false;
            }
            while self.at('I') || self.at('M') {
                self.i += 1;
            }
        }
        true
    }

    /// One address or a range, and `!`; false for one it cannot read.
    fn addresses(&mut self) -> bool {
        if !self.address() {
            return false;
        }
        if self.at(',') {
            self.i += 1;
            if self.at('+') || self.at('~') {
                self.i += 1;
            }
            if !self.address() {
                return false;
            }
        }
        self.skip_ws();
        if self.at('!') {
            self.i += 1;
            self.skip_ws();
        }
        true
    }

    /// A file name after `w` (or `s///w`), which must be there.
    fn file(&mut self, effects: &mut SedEffects) -> Option<()> {
        let file = self.rest_of_line();
        if file.is_empty() {
            return None;
        }
        effects.writes.push(file);
        Some(())
    }

    /// What follows the command letter `cmd`, read; `None` where the classifier cannot.
    fn command(&mut self, cmd: char, effects: &mut SedEffects) -> Option<()> {
        match cmd {
            'p' | 'd' | 'D' | 'n' | 'N' | 'g' | 'G' | 'h' | 'H' | 'x' | 'P' | '=' | 'z' | 'F'
            | '}' => {}
            'q' | 'Q' | 'l' | 'L' => {
                self.skip_ws();
                while self.s.get(self.i).is_some_and(char::is_ascii_digit) {
                    self.i += 1;
                }
            }
            // Labels and branches: GNU ends them at `;` too.
            ':' | 'b' | 't' | 'T' | 'v' => {
                while self
                    .s
                    .get(self.i)
                    .is_some_and(|c| !matches!(c, '\n' | ';' | '}'))
                {
                    self.i += 1;
                }
            }
            // Text to print, a file to read: nothing written or run. `a\<newline>text`
            // continues over escaped line ends.
            'a' | 'i' | 'c' | 'r' | 'R' => {
                while self.rest_of_line().ends_with('\\') && self.i < self.s.len() {
                    self.i += 1;
                }
            }
            'w' | 'W' => self.file(effects)?,
            'e' => {
                let command = self.rest_of_line();
                match command.is_empty() {
                    true => effects.runs_text = true,
                    false => effects.runs.push(command),
                }
            }
            's' | 'y' => {
                let delim = *self.s.get(self.i)?;
                if delim == '\\' || delim == '\n' {
                    return None;
                }
                self.i += 1;
                if !self.delimited(delim) || !self.delimited(delim) {
                    return None;
                }
                if cmd == 's' {
                    while self
                        .s
                        .get(self.i)
                        .is_some_and(|c| "gpiImM0123456789e".contains(*c))
                    {
                        effects.runs_text |= self.at('e');
                        self.i += 1;
                    }
                    if self.at('w') {
                        self.i += 1;
                        self.file(effects)?;
                    }
                }
            }
            '#' => {
                self.rest_of_line();
            }
            _ => return None,
        }
        Some(())
    }
}

/// What a sed script writes and runs; `None` for one the classifier cannot read.
pub(super) fn sed_effects(script: &str) -> Option<SedEffects> {
    let mut effects = SedEffects::default();
    let mut p = Script {
        s: script.chars().collect(),
        i: 0,
    };
    loop {
        while p.s.get(p.i).is_some_and(|c| c.is_whitespace() || *c == ';') {
            p.i += 1;
        }
        if p.i >= p.s.len() {
            return Some(effects);
        }
        if !p.addresses() {
            return None;
        }
        let cmd = *p.s.get(p.i)?;
        p.i += 1;
        // A block opens; its first command follows without a separator.
        if cmd == '{' {
            continue;
        }
        p.command(cmd, &mut effects)?;
        p.skip_ws();
        if p.s.get(p.i).is_some_and(|c| !matches!(c, ';' | '\n' | '}')) {
            return None;
        }
    }
}
