//! `sed`: in-place editing and the script commands that write files or run programs.

use super::opts::Parsed;
use super::*;

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
            if !s.is_some_and(sed_plain) {
                self.raise(
                    CommandClass::ShellComplex,
                    "a sed script with commands the classifier does not read (w, e, r, ...)",
                );
            }
        }
        if in_place {
            for f in files {
                self.write_target(f);
            }
        }
    }
}

/// Whether every sed script command is one that neither writes files nor runs programs.
pub(super) fn sed_plain(script: &str) -> bool {
    let s: Vec<char> = script.chars().collect();
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
    let address = |i: &mut usize| -> bool {
        if *i < s.len() && s[*i] == '$' {
            *i += 1;
        } else if *i < s.len() && s[*i].is_ascii_digit() {
            while *i < s.len() && (s[*i].is_ascii_digit() || s[*i] == '~') {
                *i += 1;
            }
        } else if *i < s.len() && s[*i] == '/' {
            *i += 1;
            if !delimited(i, '/') {
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
            return true;
        }
        if !address(&mut i) {
            return false;
        }
        if i < s.len() && s[i] == ',' {
            i += 1;
            if i < s.len() && s[i] == '+' {
                i += 1;
            }
            if !address(&mut i) {
                return false;
            }
        }
        skip_ws(&mut i);
        if i < s.len() && s[i] == '!' {
            i += 1;
            skip_ws(&mut i);
        }
        let Some(&cmd) = s.get(i) else { return false };
        i += 1;
        match cmd {
            // A block opens; its first command follows without a separator.
            '{' => continue,
            'p' | 'd' | 'D' | 'n' | 'N' | 'g' | 'G' | 'h' | 'H' | 'x' | 'P' | '=' | 'l' | 'z'
            | '}' => {}
            'q' | 'Q' => {
                skip_ws(&mut i);
                while i < s.len() && s[i].is_ascii_digit() {
                    i += 1;
                }
            }
            's' | 'y' => {
                let Some(&delim) = s.get(i) else { return false };
                if delim == '\\' || delim == '\n' {
                    return false;
                }
                i += 1;
                if !delimited(&mut i, delim) || !delimited(&mut i, delim) {
                    return false;
                }
                if cmd == 's' {
                    while i < s.len() && "gpiIm0123456789M".contains(s[i]) {
                        i += 1;
                    }
                }
            }
            '#' => {
                while i < s.len() && s[i] != '\n' {
                    i += 1;
                }
            }
            _ => return false,
        }
        skip_ws(&mut i);
        if i < s.len() && !matches!(s[i], ';' | '\n' | '}') {
            return false;
        }
    }
}
