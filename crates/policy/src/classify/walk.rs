//! The walk over the syntax tree: statements, words, redirections and the write targets they name.

use std::cell::Cell;

use super::*;

/// The work spent on one command, shared by every nested reading of it (see `MAX_WORK`).
#[derive(Debug, Default)]
pub(super) struct Budget {
    used: Cell<u64>,
}

impl Budget {
    /// Adds `units`; false once the command has taken more than `MAX_WORK`.
    pub(super) fn spend(&self, units: u64) -> bool {
        let used = self.used.get().saturating_add(units);
        self.used.set(used);
        used <= MAX_WORK
    }
}

/// tree-sitter calls the progress callback once per this many parser operations.
const PARSER_OPERATIONS_PER_CALLBACK: u64 = 100;

/// The directory that is `/` for a command run by `chroot`, `unshare -R` and the like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Reroot {
    No,
    At(PathBuf),
    /// One the classifier cannot name: an absolute path may be anything.
    Unknown,
}

pub(super) struct Walk<'a> {
    pub(super) language: &'a Language,
    pub(super) roots: &'a [PathBuf],
    pub(super) depth: usize,
    pub(super) class: CommandClass,
    pub(super) reason: Option<String>,
    pub(super) writes: Vec<String>,
    /// The targets of recursive deletes, chmods and chowns, for the policy to resolve.
    pub(super) recursive: Vec<String>,
    /// The writes the shell expands as patterns (`gen*/x`), for the protected-target checks.
    pub(super) globbed: Vec<String>,
    /// A write the walk could not place (see `Assessment::unplaced`).
    pub(super) unplaced: bool,
    /// The program of the command's first simple command (see `Assessment::program`).
    pub(super) program: Option<String>,
    /// The first simple command has been seen.
    pub(super) program_seen: bool,
    /// The walk of the command itself, not of code found inside it.
    pub(super) top: bool,
    /// Relative paths count as a grant directory only when the walk knows the directory
    /// (reading an unknown program's arguments as a destroyer's: `ctags -R .` is no delete).
    pub(super) strict_roots: bool,
    /// The directory of the last literal `cd`, to report relative writes under it.
    pub(super) cwd: Option<String>,
    /// The working directory changed to one the classifier cannot name (`cd $D`, `pushd`,
    /// `env -C`): any relative path may then be a grant directory.
    pub(super) cwd_unknown: bool,
    /// The directory that is `/` for the command (`chroot DIR`, `unshare -R DIR`).
    pub(super) reroot: Reroot,
    /// The program being walked gets more operands from its input (xargs): names the
    /// classifier cannot see.
    pub(super) input_operands: bool,
    /// The names a `find` upstream in the pipeline prints (`Found` words): what xargs gets.
    pub(super) piped_names: Option<Vec<Arg>>,
    /// The links the command makes, (link, target) as they land: a link made and written
    /// through in one command writes its target.
    pub(super) links: Vec<(String, String)>,
    /// `ln` is writing its link names now; `wrote_other`: something else was written, and
    /// `other_writes` what.
    pub(super) in_link: bool,
    pub(super) wrote_other: bool,
    pub(super) other_writes: Vec<String>,
    /// A program that changes files' names, modes or times but not what they hold (chmod,
    /// touch) is writing now; `content_writes`: the files whose text may have changed.
    pub(super) in_meta: bool,
    pub(super) content_writes: Vec<String>,
    /// Files a redirection writes, with the text when the command shows it: run later in the
    /// command, that text is the code (`echo CMD > x.sh; sh x.sh`).
    pub(super) written: Vec<(String, Option<String>)>,
    /// A bound the command went past: it is refused.
    pub(super) beyond: Option<Bound>,
    /// The work this command may still take; past it nothing more is read.
    pub(super) budget: &'a Budget,
    /// The variables and functions the command sets (`vars`).
    pub(super) scope: Scope,
}

impl<'a> Walk<'a> {
    pub(super) fn new(
        language: &'a Language,
        roots: &'a [PathBuf],
        depth: usize,
        cwd: Option<String>,
        budget: &'a Budget,
    ) -> Self {
        Walk {
            language,
            roots,
            depth,
            class: CommandClass::ReadOnly,
            reason: None,
            writes: Vec::new(),
            globbed: Vec::new(),
            recursive: Vec::new(),
            unplaced: false,
            program: None,
            program_seen: false,
            top: false,
            strict_roots: false,
            cwd,
            cwd_unknown: false,
            reroot: Reroot::No,
            input_operands: false,
            piped_names: None,
            links: Vec::new(),
            in_link: false,
            wrote_other: false,
            other_writes: Vec::new(),
            in_meta: false,
            content_writes: Vec::new(),
            written: Vec::new(),
            budget,
            scope: Scope::default(),
            beyond: None,
        }
    }

    pub(super) fn finish(mut self) -> Assessment {
        // A link is only a way to a file; written through in the same command (or by code the
        // classifier cannot see), its target is what is written: `ln -s /dev x; echo > x/sda`
        // writes the disk.
        let through = self.class >= CommandClass::ShellComplex || self.wrote_other;
        for (link, target) in std::mem::take(&mut self.links) {
            for w in self.other_writes.clone() {
                let rest = w.strip_prefix(link.as_str());
                if let Some(rest) = rest.filter(|r| r.is_empty() || r.starts_with('/')) {
                    self.write_target(&Arg::literal(&format!("{target}{rest}")));
                }
            }
            if through {
                self.write_target(&Arg::literal(&target));
            }
        }
        Assessment {
            recursive: self.recursive,
            globbed: self.globbed,
            unplaced: self.unplaced,
            program: self.program,
            beyond: self.beyond,
            class: self.class,
            writes: self.writes,
            reason: self.reason,
        }
    }

    /// The command went past one of the classifier's bounds: `ShellComplex`, and refused.
    pub(super) fn beyond(&mut self, bound: Bound) {
        self.raise(CommandClass::ShellComplex, bound.to_string());
        self.beyond.get_or_insert(bound);
    }

    pub(super) fn raise(&mut self, class: CommandClass, why: impl Into<String>) {
        if class > self.class {
            self.class = class;
            self.reason = Some(why.into());
        }
    }

    /// Runs a nested walk (inline `sh -c` code, xargs' command) and folds its result in.
    pub(super) fn nested(&mut self) -> Walk<'a> {
        let mut inner = Walk::new(
            self.language,
            self.roots,
            self.depth + 1,
            self.cwd.clone(),
            self.budget,
        );
        inner.scope = self.scope.clone();
        inner.written = self.written.clone();
        inner.other_writes = self.other_writes.clone();
        inner.content_writes = self.content_writes.clone();
        inner.cwd_unknown = self.cwd_unknown;
        inner.reroot = self.reroot.clone();
        inner
    }

    pub(super) fn absorb(&mut self, inner: Walk<'a>) {
        if let Some(why) = inner.reason {
            self.raise(inner.class, why);
        }
        for w in inner.writes {
            self.push_write(w);
        }
        self.unplaced |= inner.unplaced;
        self.recursive.extend(inner.recursive);
        for g in inner.globbed {
            if !self.globbed.contains(&g) {
                self.globbed.push(g);
            }
        }
        if self.beyond.is_none() {
            self.beyond = inner.beyond;
        }
        self.links.extend(inner.links);
        self.wrote_other |= inner.wrote_other;
        self.other_writes.extend(inner.other_writes);
        self.content_writes.extend(inner.content_writes);
        self.written.extend(inner.written);
    }

    /// Spends `units` of the command's work; false (and the command is refused) past the bound.
    pub(super) fn spend(&mut self, units: u64) -> bool {
        if self.budget.spend(units) {
            return true;
        }
        self.beyond(Bound::Work);
        false
    }

    /// Parses and walks a whole command text.
    pub(super) fn source(&mut self, command: &str) {
        if !self.spend(NESTED_WORK) {
            return;
        }
        if self.depth > MAX_DEPTH {
            self.beyond(Bound::Depth);
            return;
        }
        if command.len() > MAX_COMMAND_BYTES {
            self.beyond(Bound::Length);
            return;
        }
        if command.contains('\0') {
            self.beyond(Bound::Nul);
            return;
        }
        if command.trim().is_empty() {
            self.raise(CommandClass::ShellComplex, "the command is empty");
            return;
        }
        let mut parser = Parser::new();
        if parser.set_language(self.language).is_err() {
            self.raise(
                CommandClass::ShellComplex,
                "the shell grammar is unavailable",
            );
            return;
        }
        let budget = self.budget;
        let mut over_budget =
            |_: &tree_sitter::ParseState| !budget.spend(PARSER_OPERATIONS_PER_CALLBACK);
        let options = ParseOptions::new().progress_callback(&mut over_budget);
        let bytes = command.as_bytes();
        let parsed = parser.parse_with_options(
            &mut |offset, _| bytes.get(offset..).unwrap_or(&[]),
            None,
            Some(options),
        );
        let Some(tree) = parsed else {
            self.beyond(Bound::Work);
            return;
        };
        let root = tree.root_node();
        if root.has_error() {
            // Still walk what parsed, so that a dangerous part is not hidden by a syntax error.
            self.raise(
                CommandClass::ShellComplex,
                "the command does not parse as shell",
            );
        }
        self.collect(root, command);
        self.statement(root, command);
        if command.contains("\\\n") {
            // The shell removes a backslash-newline before it splits words (`r\<newline>m` is
            // `rm`); the grammar may not. Read the joined text as well.
            let mut inner = self.nested();
            inner.source(&command.replace("\\\n", ""));
            self.absorb(inner);
        }
        if root.has_error() {
            // A parse error may swallow what follows it (`[ a / ] && rm -rf /` reads as one
            // test): the pieces between the shell's separators are read on their own as well.
            // `{rm,-rf,/}` is a group to the grammar and the words `rm -rf /` to bash.
            if command.contains('{') && command.contains(',') {
                let words: Vec<String> = command
                    .split_whitespace()
                    .map(|w| match crate::glob::alternatives(w) {
                        Some(alts) => alts.join(" "),
                        None => w.to_string(),
                    })
                    .collect();
                let expanded = words.join(" ");
                if expanded != command {
                    let mut inner = self.nested();
                    inner.source(&expanded);
                    self.absorb(inner);
                }
            }
            for piece in pieces(command) {
                if piece.len() < command.trim().len() {
                    let mut inner = self.nested();
                    inner.source(piece);
                    self.absorb(inner);
                }
            }
        }
    }

    pub(super) fn statement(&mut self, n: Node, src: &str) {
        if self.depth > MAX_DEPTH {
            self.beyond(Bound::Depth);
            return;
        }
        if !self.spend(1) {
            return;
        }
        self.depth += 1;
        self.statement_inner(n, src);
        self.depth -= 1;
    }

    pub(super) fn statement_inner(&mut self, n: Node, src: &str) {
        match n.kind() {
            "program" | "list" | "compound_statement" | "do_group" | "if_statement"
            | "elif_clause" | "else_clause" | "negated_command" => {
                if n.kind() == "compound_statement" && first_token(n) == Some("((") {
                    self.raise(CommandClass::ShellComplex, "arithmetic evaluation");
                }
                self.container(n, src);
            }
            "subshell" => {
                let saved = (self.cwd.clone(), self.cwd_unknown);
                self.container(n, src);
                (self.cwd, self.cwd_unknown) = saved;
            }
            "pipeline" => self.pipeline(n, src),
            "redirected_statement" => self.redirected(n, src),
            "command" => self.command(n, src),
            "variable_assignment" => self.assignment(n, src),
            "variable_assignments" => self.container(n, src),
            "declaration_command" => self.declaration(n, src),
            "unset_command" => self.scan_children(n, src),
            "test_command" => {
                if first_token(n) == Some("[[") {
                    self.raise(CommandClass::ShellComplex, format!("{ASH_DIFFERS}: [[ ]]"));
                }
                self.scan_children(n, src);
            }
            "for_statement" | "c_style_for_statement" | "while_statement" => {
                self.raise(CommandClass::ShellComplex, "a loop");
                self.container(n, src);
            }
            "case_statement" | "case_item" => {
                self.raise(CommandClass::ShellComplex, "a case statement");
                self.container(n, src);
            }
            "function_definition" => self.function(n, src),
            "comment" | "heredoc_body" | "heredoc_start" | "heredoc_end" => {}
            other => {
                self.raise(
                    CommandClass::ShellComplex,
                    format!("shell syntax the classifier does not analyse ({other})"),
                );
                self.container(n, src);
            }
        }
    }

    /// Walks the children of a statement container: statements as statements, words scanned.
    pub(super) fn container(&mut self, n: Node, src: &str) {
        let mut c = n.walk();
        for ch in n.children(&mut c) {
            if !ch.is_named() {
                if ch.kind() == "&" {
                    self.raise(CommandClass::ShellComplex, "a background job");
                }
                continue;
            }
            if is_statement(ch.kind()) {
                self.statement(ch, src);
            } else if ch.kind() == "file_redirect"
                || ch.kind() == "heredoc_redirect"
                || ch.kind() == "herestring_redirect"
            {
                self.redirect(ch, src, None);
            } else {
                self.scan(ch, src);
            }
        }
    }

    pub(super) fn scan_children(&mut self, n: Node, src: &str) {
        let mut c = n.walk();
        for ch in n.named_children(&mut c) {
            self.scan(ch, src);
        }
    }

    /// Looks inside a word for what runs code: substitutions, arithmetic, complex `${..}`.
    pub(super) fn scan(&mut self, n: Node, src: &str) {
        if self.depth > MAX_DEPTH {
            self.beyond(Bound::Depth);
            return;
        }
        if !self.spend(1) {
            return;
        }
        if dollar_string(n) {
            self.raise(
                CommandClass::ShellComplex,
                format!("{ASH_DIFFERS}: $\"...\" quoting"),
            );
        }
        match n.kind() {
            "command_substitution" | "process_substitution" => {
                let what = if n.kind() == "command_substitution" {
                    "command substitution"
                } else {
                    "process substitution"
                };
                self.raise(CommandClass::ShellComplex, what);
                self.depth += 1;
                self.container(n, src);
                self.depth -= 1;
                return;
            }
            "ansi_c_string" => self.raise(
                CommandClass::ShellComplex,
                format!("{ASH_DIFFERS}: $'...' quoting"),
            ),
            "array" => self.raise(
                CommandClass::ShellComplex,
                format!("{ASH_DIFFERS}: an array"),
            ),
            "arithmetic_expansion" => {
                self.raise(CommandClass::ShellComplex, "arithmetic expansion");
            }
            "expansion" if !is_plain_expansion(n) => {
                self.raise(
                    CommandClass::ShellComplex,
                    "a parameter expansion with an operator",
                );
            }
            k if is_statement(k) => {
                self.statement(n, src);
                return;
            }
            _ => {}
        }
        self.depth += 1;
        let mut c = n.walk();
        for ch in n.named_children(&mut c) {
            self.scan(ch, src);
        }
        self.depth -= 1;
    }

    pub(super) fn arg(&mut self, n: Node, src: &str) -> Arg {
        self.scan(n, src);
        if brace_expansion(n, src) {
            self.raise(
                CommandClass::ShellComplex,
                format!("{ASH_DIFFERS}: brace expansion"),
            );
        }
        Arg::of(n, src)
    }

    pub(super) fn assignment(&mut self, n: Node, src: &str) {
        if let Some(name) = n.child_by_field_name("name") {
            let name = &src[name.byte_range()];
            // A variable holding a command is read as the command (`command_variable`).
            if is_sensitive_var(name) && !is_command_var(name) {
                self.raise(
                    CommandClass::ShellComplex,
                    format!("sets {name}, which changes what programs run"),
                );
            }
            if name.contains('[') {
                self.raise(CommandClass::ShellComplex, "an array subscript assignment");
            }
        }
        if let Some(v) = n.child_by_field_name("value") {
            self.scan(v, src);
            if let Some(name) = n.child_by_field_name("name") {
                if v.kind() != "array" {
                    self.command_variable(&src[name.byte_range()], &Arg::of(v, src));
                }
            }
        }
    }

    pub(super) fn declaration(&mut self, n: Node, src: &str) {
        let mut c = n.walk();
        for ch in n.named_children(&mut c) {
            match ch.kind() {
                "variable_assignment" => self.assignment(ch, src),
                "variable_name" => {
                    let name = &src[ch.byte_range()];
                    if is_sensitive_var(name) {
                        self.raise(
                            CommandClass::ShellComplex,
                            format!("changes {name}, which changes what programs run"),
                        );
                    }
                }
                _ => {
                    self.raise(
                        CommandClass::ShellComplex,
                        "a declaration with options the classifier does not read",
                    );
                    self.scan(ch, src);
                }
            }
        }
    }

    /// A function definition: its body is read here too (recursion is found by `vars`).
    pub(super) fn function(&mut self, n: Node, src: &str) {
        self.raise(CommandClass::ShellComplex, "a function definition");
        if let Some(body) = n.child_by_field_name("body") {
            self.statement(body, src);
        }
    }

    pub(super) fn command(&mut self, n: Node, src: &str) {
        if dollar_string(n) {
            self.raise(
                CommandClass::ShellComplex,
                format!("{ASH_DIFFERS}: $\"...\" quoting"),
            );
        }
        let mut name: Option<Node> = None;
        let mut args = Vec::new();
        let mut c = n.walk();
        let children: Vec<(Option<&str>, Node)> = n
            .children(&mut c)
            .enumerate()
            .map(|(i, ch)| (n.field_name_for_child(i as u32), ch))
            .collect();
        if self.top && !self.program_seen {
            self.program_seen = true;
            self.program = self.first_program(&children, src);
        }
        for (field, ch) in children {
            if !ch.is_named() {
                continue;
            }
            match (field, ch.kind()) {
                (Some("name"), _) => name = Some(ch),
                (Some("argument"), _) => {}
                (Some("redirect"), _) => {}
                (_, "variable_assignment") => self.assignment(ch, src),
                (_, "comment") => {}
                (_, k) if is_statement(k) => self.statement(ch, src),
                _ => {
                    self.raise(
                        CommandClass::ShellComplex,
                        "a command part the classifier does not read",
                    );
                    self.scan(ch, src);
                }
            }
        }
        for a in arguments(n) {
            args.push(self.arg(a, src));
        }
        let Some(name) = name else { return };
        self.scan(name, src);
        let word = name.named_child(0).unwrap_or(name);
        let Some((prog, pattern)) = literal(word, src) else {
            let program = Arg::of(word, src);
            self.expanded_command(&src[word.byte_range()], &program, &args);
            // `"$X" < script`: a program the classifier cannot name may be a shell.
            let into = self.stage_reader(n, src);
            self.redirects_of(n, src, into.as_deref());
            return;
        };
        if pattern {
            // `/bin/r? -rf /` runs whatever the pattern matches; bash makes `{rm,-rf,/}` the
            // words `rm -rf /`.
            self.raise(CommandClass::ShellComplex, "a pattern in command position");
            self.args_as_commands(&prog, &args, false);
            if let Some(words) = crate::glob::alternatives(&prog).filter(|w| w.len() > 1) {
                let rest: Vec<&str> = args.iter().map(|a| a.raw.as_str()).collect();
                let mut inner = self.nested();
                inner.source(&format!("{} {}", words.join(" "), rest.join(" ")));
                self.absorb(inner);
            }
        }
        self.program(&prog, &args);
        // Only a redirection feeds the program: no need to look through its runners otherwise.
        let mut c = n.walk();
        let redirected = n
            .children_by_field_name("redirect", &mut c)
            .next()
            .is_some();
        let into = redirected
            .then(|| resolve_program(&prog, &args))
            .flatten()
            .filter(|(p, a)| reads_code(p, a))
            .map(|(p, _)| p);
        self.redirects_of(n, src, into.as_deref());
    }
}

impl Walk<'_> {
    /// What the audit names for a simple command of these children: its literal program, or
    /// what `env` runs (`None` for a program the shell computes).
    fn first_program(&mut self, children: &[(Option<&str>, Node)], src: &str) -> Option<String> {
        let name = children.iter().find(|(f, _)| *f == Some("name"))?.1;
        let word = name.named_child(0).unwrap_or(name);
        let (prog, _) = literal(word, src)?;
        if super::paths::program_name(&prog, None).name != "env" {
            return Some(prog);
        }
        let args: Vec<Arg> = arguments(name.parent()?)
            .into_iter()
            .map(|ch| Arg::of(ch, src))
            .collect();
        Some(resolve_program(&prog, &args).map_or(prog, |(p, _)| p))
    }
}

/// A simple command's arguments as the shell reads them: its `argument` words, then the words
/// the grammar puts into a redirection after its target (`rm >/dev/null -rf x`, `find x
/// 2>/dev/null -delete`, `cat <<EOF -n x`), which the shell passes to the command: a
/// redirection's target is its first word, and every word after it is an argument.
pub(super) fn arguments<'t>(n: Node<'t>) -> Vec<Node<'t>> {
    let mut c = n.walk();
    let mut out: Vec<Node<'t>> = n.children_by_field_name("argument", &mut c).collect();
    out.extend(
        n.parent()
            .filter(|p| {
                p.kind() == "redirected_statement" && p.child_by_field_name("body") == Some(n)
            })
            .map(swallowed)
            .unwrap_or_default(),
    );
    out
}

/// The words after a redirection's target in the redirections of the statement `s`, in order.
pub(super) fn swallowed(s: Node<'_>) -> Vec<Node<'_>> {
    let mut c = s.walk();
    let redirects: Vec<Node> = s.children_by_field_name("redirect", &mut c).collect();
    let mut out = Vec::new();
    for r in redirects {
        after_target(r, &mut out);
    }
    out
}

/// The words after the target of the redirection `r`, and of those the grammar nests in it
/// (`<<EOF >/dev/null -rf x`).
fn after_target<'t>(r: Node<'t>, out: &mut Vec<Node<'t>>) {
    let mut c = r.walk();
    match r.kind() {
        "file_redirect" => out.extend(r.children_by_field_name("destination", &mut c).skip(1)),
        // In order: its arguments, the words the grammar could not place (an `ERROR` node
        // between them), and the redirections nested in it.
        "heredoc_redirect" => {
            let children: Vec<(Option<&str>, Node<'t>)> = r
                .children(&mut c)
                .enumerate()
                .map(|(i, ch)| (r.field_name_for_child(i as u32), ch))
                .collect();
            for (field, ch) in children {
                match (field, ch.kind()) {
                    (Some("argument"), _) => out.push(ch),
                    (Some("redirect"), _) => after_target(ch, out),
                    (_, "ERROR") => {
                        let mut c = ch.walk();
                        out.extend(ch.named_children(&mut c));
                    }
                    _ => {}
                }
            }
        }
        _ => {}
    }
}

/// The first token's kind (`((`, `[[`, `>` ...).
pub(super) fn first_token(n: Node) -> Option<&'static str> {
    let mut c = n.walk();
    let first = n.children(&mut c).find(|ch| !ch.is_named());
    first.map(|ch| ch.kind())
}

pub(super) fn is_statement(kind: &str) -> bool {
    matches!(
        kind,
        "c_style_for_statement"
            | "case_statement"
            | "command"
            | "compound_statement"
            | "declaration_command"
            | "for_statement"
            | "function_definition"
            | "if_statement"
            | "list"
            | "negated_command"
            | "pipeline"
            | "redirected_statement"
            | "subshell"
            | "test_command"
            | "unset_command"
            | "variable_assignment"
            | "variable_assignments"
            | "while_statement"
    )
}

/// `${name}` and `${#name}` only; every operator form may evaluate arithmetic or assign.
pub(super) fn is_plain_expansion(n: Node) -> bool {
    let mut c = n.walk();
    let mut named = 0;
    for ch in n.children(&mut c) {
        if ch.is_named() {
            named += 1;
            if !matches!(ch.kind(), "variable_name" | "special_variable_name") {
                return false;
            }
        } else if !matches!(ch.kind(), "${" | "}" | "#") {
            return false;
        }
    }
    named == 1
}

/// Whether `n` has a `$"..."` (a locale string in bash, `$` and a string in ash) among its parts.
fn dollar_string(n: Node) -> bool {
    let mut c = n.walk();
    let children: Vec<Node> = n.children(&mut c).collect();
    children
        .windows(2)
        .any(|w| !w[0].is_named() && w[0].kind() == "$" && w[1].kind() == "string")
}

/// The command cut at unquoted separators (`;`, `&`, `|`, newlines, parentheses, braces,
/// backquotes, `[`, `]`), each piece trimmed; empty pieces are left out.
fn pieces(command: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for (i, c) in command.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        match (quote, c) {
            (_, '\\') if quote != Some('\'') => escaped = true,
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, ';' | '&' | '|' | '\n' | '(' | ')' | '{' | '}' | '`' | '[' | ']') => {
                let piece = command[start..i].trim();
                if !piece.is_empty() {
                    out.push(piece);
                }
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    let piece = command[start..].trim();
    if !piece.is_empty() {
        out.push(piece);
    }
    out
}
