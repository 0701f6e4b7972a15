//! `sed`: in-place editing and the script commands that write files or run programs.

use super::*;

impl Walk<'_> {
    pub(super) fn sed(&mut self, args: &[Arg]) {
        let o = parse_opts(args, "efl", &["expression", "file", "line-length"]);
        let in_place = o.has(&["-i", "--in-place"])
            || o.flags.iter().any(|f| f.starts_with("--in-place"))
            || o.values.iter().any(|(k, _)| k == "--in-place");
        // GNU sed reads `-i.bak` as -i with a suffix; the cluster parser saw flags -i -. -b ...
        let in_place = in_place
            || args
                .iter()
                .any(|a| a.text().is_some_and(|t| t.starts_with("-i")));
        if o.has(&["-f", "--file"]) {
            self.raise(CommandClass::ShellComplex, "sed runs a script from a file");
        }
        let mut scripts: Vec<&str> = o.value(&["-e", "--expression"]);
        let mut files = o.positionals.iter();
        if scripts.is_empty() && !o.has(&["-f", "--file"]) {
            if let Some(s) = files.next() {
                scripts.push(s.text().unwrap_or(""));
            }
        }
        for s in scripts {
            if !sed_plain(s) {
                self.raise(
                    CommandClass::ShellComplex,
                    "a sed script with commands the classifier does not read (w, e, r, ...)",
                );
            }
        }
        if in_place {
            self.raise(CommandClass::WorkspaceMutating, "sed -i");
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
