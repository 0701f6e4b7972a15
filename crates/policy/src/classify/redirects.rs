//! Redirections: the files they write, and the text they feed a program that runs what it
//! reads (a here-document into `sh`, a file or a process substitution into `python3`).

use super::*;

/// Inputs that give a program nothing the command did not give it: empty, or the command's
/// own input (compared once `//`, `.` and `..` are resolved).
const NO_TEXT: &[&str] = &["/dev/null", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"];

impl Walk<'_> {
    pub(super) fn redirected(&mut self, n: Node, src: &str) {
        let body = n.child_by_field_name("body");
        if let Some(b) = body {
            self.statement(b, src);
        }
        // A here-document's line the grammar could not read whole may hold redirections it
        // lost: their writes cannot be placed.
        let mut c = n.walk();
        let lost = n
            .children_by_field_name("redirect", &mut c)
            .any(|r| r.kind() == "heredoc_redirect" && r.has_error());
        if lost {
            self.raise(
                CommandClass::ShellComplex,
                "a here-document's line the grammar cannot read whole",
            );
            self.unplaced = true;
        }
        // Words after a redirection's target are a simple command's arguments (`arguments`);
        // after any other statement the classifier has no rule for them.
        if body.is_none_or(|b| b.kind() != "command") && !swallowed(n).is_empty() {
            self.raise(
                CommandClass::ShellComplex,
                "words after a redirection's target of a statement that is no simple command",
            );
            for w in swallowed(n) {
                self.scan(w, src);
            }
        }
        // A here-document of a pipeline feeds its first stage; the text may reach a shell later.
        let into = match body {
            Some(b) if b.kind() == "pipeline" => self.pipeline_code_reader(b, src, 1),
            Some(b) => self.stage_reader(b, src),
            None => None,
        };
        let mut c = n.walk();
        let redirects: Vec<Node> = n
            .named_children(&mut c)
            .filter(|ch| Some(*ch) != body)
            .collect();
        for r in &redirects {
            self.redirect(*r, src, into.as_deref());
        }
        // `echo CMD > >(sh)`: what the command prints is the substitution's input.
        for r in redirects.iter().filter(|r| r.kind() == "file_redirect") {
            let into_sub = matches!(first_token(*r), Some(">" | ">>" | ">|"))
                .then(|| r.child_by_field_name("destination"))
                .flatten()
                .filter(|d| d.kind() == "process_substitution")
                .and_then(|d| self.compound_reader(d, src));
            if let Some(reader) = into_sub {
                self.produced_input(&reader, produced(n, src, 0), "a process substitution");
            }
        }
        // `echo CMD > x.sh`: what the file holds, for a later `sh x.sh`.
        let mut text: Option<Option<String>> = None;
        for r in redirects.iter().filter(|r| r.kind() == "file_redirect") {
            let writes = matches!(first_token(*r), Some(">" | ">>" | ">|"));
            let dest = r
                .child_by_field_name("destination")
                .and_then(|d| literal(d, src));
            if let (true, Some((path, _))) = (writes, dest) {
                let text = text
                    .get_or_insert_with(|| match produced(n, src, 0) {
                        Produced::Text(t) => Some(t),
                        _ => None,
                    })
                    .clone();
                let entry = (self.land(&path), text);
                if !self.written.contains(&entry) {
                    self.written.push(entry);
                }
            }
        }
    }

    pub(super) fn redirects_of(&mut self, n: Node, src: &str, into: Option<&str>) {
        let mut c = n.walk();
        let reds: Vec<Node> = n.children_by_field_name("redirect", &mut c).collect();
        for r in reds {
            self.redirect(r, src, into);
        }
    }

    /// A redirection; `into` is the program reading it that runs what it reads, if any.
    pub(super) fn redirect(&mut self, r: Node, src: &str, into: Option<&str>) {
        match r.kind() {
            "file_redirect" => self.file_redirect(r, src, into),
            "heredoc_redirect" => {
                // `cat <<EOF | sh`: the pipeline after the here-document's start reads its text.
                let mut c = r.walk();
                let downstream = r
                    .named_children(&mut c)
                    .find(|ch| ch.kind() == "pipeline")
                    .and_then(|p| self.pipeline_code_reader(p, src, 0));
                let mut c = r.walk();
                for ch in r.named_children(&mut c) {
                    match ch.kind() {
                        "heredoc_body" => {
                            self.scan(ch, src);
                            let text = &src[ch.byte_range()];
                            self.fed_input(into, text, "a here-document");
                            if downstream.is_some() {
                                self.fed_input(downstream.as_deref(), text, "a here-document");
                            }
                        }
                        "heredoc_start" | "heredoc_end" => {}
                        "file_redirect" | "herestring_redirect" => self.redirect(ch, src, into),
                        k if is_statement(k) => self.statement(ch, src),
                        _ => self.scan(ch, src),
                    }
                }
            }
            "herestring_redirect" => {
                self.raise(CommandClass::ShellComplex, format!("{ASH_DIFFERS}: <<<"));
                self.scan(r, src);
                let mut c = r.walk();
                let words: Vec<Node> = r.named_children(&mut c).collect();
                for w in words {
                    let values = self.expand(&Arg::of(w, src));
                    self.fed_values(into, &values, "a here-string");
                }
            }
            other => {
                self.raise(
                    CommandClass::ShellComplex,
                    format!("a redirection the classifier does not read ({other})"),
                );
                self.scan(r, src);
            }
        }
    }

    fn file_redirect(&mut self, r: Node, src: &str, into: Option<&str>) {
        let op = first_token(r).unwrap_or("");
        let dest = r.child_by_field_name("destination");
        let dest_arg = dest.map(|d| self.arg(d, src));
        // `1<>FILE` opens FILE to read and write; the grammar does not know `<>`.
        let mut c = r.walk();
        let read_write =
            r.children(&mut c).any(|ch| ch.kind() == "ERROR") && src[r.byte_range()].contains("<>");
        if read_write {
            match &dest_arg {
                Some(a) => self.write_target(a),
                None => self.raise(CommandClass::ShellComplex, "a redirection without a target"),
            }
        }
        match op {
            "<" => {
                if let Some(a) = &dest_arg {
                    self.file_fed(into, a);
                }
            }
            _ if read_write => {}
            ">&-" | "<&-" => {}
            ">&" | "<&" => {
                let fd_dup = dest_arg.as_ref().and_then(|a| a.text()).is_some_and(|t| {
                    t == "-" || (!t.is_empty() && t.chars().all(|c| c.is_ascii_digit()))
                });
                if op == "<&" && fd_dup {
                    // Another descriptor's text, which the command does not show.
                    self.fed_values(into, &Values::default(), "a file descriptor");
                }
                if !fd_dup {
                    match dest_arg {
                        Some(a) if op == ">&" => {
                            self.raise(
                                CommandClass::ShellComplex,
                                format!("{ASH_DIFFERS}: >& to a file"),
                            );
                            self.write_target(&a);
                        }
                        _ => self.raise(
                            CommandClass::ShellComplex,
                            "a redirection the classifier does not read",
                        ),
                    }
                }
            }
            ">" | ">>" | "&>" | "&>>" | ">|" => match dest_arg {
                Some(a) if op.starts_with('&') => {
                    self.raise(CommandClass::ShellComplex, format!("{ASH_DIFFERS}: {op}"));
                    self.write_target(&a);
                }
                Some(a) => self.write_target(&a),
                None => self.raise(CommandClass::ShellComplex, "a redirection without a target"),
            },
            _ => self.raise(
                CommandClass::ShellComplex,
                "a redirection the classifier does not read",
            ),
        }
    }

    /// `PROGRAM < FILE` where PROGRAM runs what it reads: the file's text is code the command
    /// does not show, unless it is empty or the command's own input; a process substitution
    /// is read as what it prints.
    fn file_fed(&mut self, into: Option<&str>, file: &Arg) {
        let Some(p) = into else { return };
        let no_text = |t: &str| {
            let p = normalise(Path::new(t));
            NO_TEXT.iter().any(|n| p == Path::new(n))
        };
        if file.text().is_some_and(no_text) {
            return;
        }
        match fed_by(file) {
            Some(produced) => self.produced_input(p, produced, "a process substitution"),
            None => self.raise(
                CommandClass::Dangerous,
                format!(
                    "{p} runs the text of {}, which the command does not show",
                    file.raw
                ),
            ),
        }
    }

    /// Text a program that runs what it reads gets: the code it is, or code the classifier
    /// cannot see.
    pub(super) fn produced_input(&mut self, reader: &str, produced: Produced, what: &str) {
        match produced {
            Produced::Text(t) | Produced::Lookup(t) => self.fed_input(Some(reader), &t, what),
            Produced::Download => {
                self.raise(CommandClass::Dangerous, format!("{reader} runs a download"))
            }
            Produced::Unknown => self.raise(
                CommandClass::Dangerous,
                format!("{reader} runs {what} whose text the classifier cannot read"),
            ),
        }
    }

    /// Texts a word may be, fed to `into`: each is read as code; one the classifier cannot
    /// read is code it cannot see.
    pub(super) fn fed_values(&mut self, into: Option<&str>, values: &Values, what: &str) {
        let Some(p) = into else { return };
        for t in &values.texts {
            self.fed_input(Some(p), t, what);
        }
        if values.unknown || values.outside || values.texts.is_empty() {
            self.raise(
                CommandClass::Dangerous,
                format!("{p} runs {what} whose text the classifier cannot read"),
            );
        }
    }

    /// Literal text fed to `into` on its input (piped, redirected, a here-document, a process
    /// substitution), which it runs: read as `code_input` reads it. An interpreter's program
    /// the classifier does not read whole (python, perl, node...: only its strings are read),
    /// so text fed to one is never read as safe, and is `Dangerous`; shells, awk, sed and ed
    /// are read as what they run.
    pub(super) fn fed_input(&mut self, into: Option<&str>, text: &str, what: &str) {
        let Some(p) = into else { return };
        if reader_kind(p) == Some(Reader::Interpreter) {
            self.raise(
                CommandClass::Dangerous,
                format!("{p} runs {what}, a program the classifier does not read whole"),
            );
        }
        self.code_input(Some(p), text);
    }

    /// Text fed to `into` that it runs: a shell runs it, an interpreter may name paths, an
    /// editor's `!` runs a shell command.
    pub(super) fn code_input(&mut self, into: Option<&str>, text: &str) {
        let Some(p) = into else { return };
        match reader_kind(p) {
            Some(Reader::Shell) => {
                let mut inner = self.nested();
                inner.source(text);
                self.absorb(inner);
            }
            Some(Reader::Interpreter) => self.inline_code(text),
            Some(Reader::Awk) => self.awk_program(p, text, false, &[]),
            Some(Reader::Sed) => self.sed_script(Some(text)),
            Some(Reader::Bang) => {
                self.raise(CommandClass::ShellComplex, format!("{p} runs commands"));
                for line in text.lines() {
                    if let Some((_, command)) = line.split_once('!') {
                        let mut inner = self.nested();
                        inner.source(command);
                        self.absorb(inner);
                    }
                }
            }
            None => {}
        }
    }

    /// Code of an interpreter: the paths its strings name are writes, and a string that is a
    /// dangerous shell command (`system("rm -rf /")`) makes the command dangerous.
    pub(super) fn inline_code(&mut self, code: &str) {
        self.inline_code_on(code, &[]);
    }

    /// Code of an interpreter given `operands`: besides `inline_code`, code that deletes a tree
    /// (`shutil.rmtree`) of a string or operand naming a grant directory, `.` or `~`, or that
    /// deletes or moves a path naming one, is dangerous.
    pub(super) fn inline_code_on(&mut self, code: &str, operands: &[String]) {
        // The paths it names, in its strings or its operands (`process.argv[1]`).
        let named = operands
            .iter()
            .filter(|o| o.contains(['/', '.']) && !o.contains("://"));
        for w in inline_paths(code).into_iter().chain(named.cloned()) {
            self.push_write(w);
        }
        let strings = string_literals(code);
        for s in &strings {
            let mut inner = self.nested();
            inner.source(s);
            if inner.class == CommandClass::Dangerous {
                self.raise(
                    CommandClass::Dangerous,
                    format!("inline code holds a dangerous shell command ({s})"),
                );
            }
        }
        // `system("rm", "-rf", "/")`, `subprocess.run(["rm", "-rf", "/"])`: the strings from
        // one naming a program, joined, may be the command.
        for k in 0..strings.len() {
            let first = strings[k].split_whitespace().next().unwrap_or("");
            if !is_known_program(&program_name(first, None).name) {
                continue;
            }
            let mut inner = self.nested();
            inner.source(&strings[k..].join(" "));
            if inner.class == CommandClass::Dangerous {
                self.raise(
                    CommandClass::Dangerous,
                    format!(
                        "inline code holds a dangerous command ({})",
                        strings[k..].join(" ")
                    ),
                );
                break;
            }
        }
        let named = strings
            .iter()
            .copied()
            .chain(operands.iter().map(String::as_str));
        let trees = TREE_DESTROYERS.iter().any(|d| code.contains(d));
        let files = FILE_DESTROYERS.iter().any(|d| code.contains(d));
        for s in named.collect::<Vec<_>>() {
            let path = Arg::literal(s);
            let absolute = s.starts_with('/') || s.starts_with('~');
            let root =
                (trees && self.wipes_root(&path)) || (files && absolute && self.names_root(&path));
            if root {
                self.raise(
                    CommandClass::Dangerous,
                    format!(
                        "inline code deletes or moves {s}, a grant directory or one holding it"
                    ),
                );
                return;
            }
        }
    }
}

/// What a word that is a process substitution (`<(CMD)`) holds: what CMD prints.
pub(super) fn fed_by(a: &Arg) -> Option<Produced> {
    match a.parts.as_deref() {
        Some([Part::Fed(p)]) => Some(p.clone()),
        _ => None,
    }
}
