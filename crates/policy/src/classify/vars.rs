//! Variables, positional parameters and functions a command sets itself (docs/design.md,
//! "Modes and the classifier"), so that a command or code built from them is read as what it
//! runs: `c='rm -rf /'; $c`, `set -- rm -rf /; "$@"`, `f() { "$@"; }; f rm -rf /`.
//!
//! Every assignment a command makes is collected before it is walked, in any order (a loop
//! may use a value before the text that sets it): a variable may hold any text assigned to
//! it. One the command does not set holds what the environment gives (`Values::outside`);
//! one set from text the classifier cannot read (`$(cat f)`, `read`) may hold anything
//! (`Values::unknown`), and a command or code built from it is dangerous.

use super::specs::spec_of;
use super::*;

/// At most this many texts are told apart for one word; more make it unknown.
const MAX_VALUES: usize = 16;

/// What a command that sets something must contain: an assignment's `=`, a function's `(`
/// (or `function`), and the commands that set variables, parameters and aliases.
const SETTERS: &[&str] = &[
    "=", "(", "function", "for", "read", "mapfile", "getopts", "printf", "set", "alias",
];

/// Commands that set the variables they name to text the classifier cannot read.
const READERS: &[&str] = &["read", "mapfile", "readarray", "getopts"];

/// What a variable may hold, over every assignment the command makes.
#[derive(Debug, Clone, Default)]
pub(super) struct Value {
    texts: Vec<String>,
    /// Some assignment is text the classifier cannot read.
    unknown: bool,
    /// Some assignment uses the environment.
    outside: bool,
}

/// A function the command defines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Function {
    pub(super) name: String,
    pub(super) body: String,
    /// The programs its body runs by name (and through `eval` and runners' words).
    called: Vec<String>,
}

/// The variables and functions of one shell, as far as the command sets them.
#[derive(Debug, Clone, Default)]
pub(super) struct Scope {
    vars: Vec<(String, Value)>,
    /// The functions the command defines.
    pub(super) functions: Vec<Function>,
    /// The functions being called now (a call of one of them is not read again).
    pub(super) calling: Vec<String>,
    /// Aliases the command defines, and their text.
    pub(super) aliases: Vec<(String, String)>,
}

/// The texts a word may become.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Values {
    pub(super) texts: Vec<String>,
    /// It may be text the classifier cannot read (a program's output, `read`'s input).
    pub(super) unknown: bool,
    /// It may be what the environment holds (a variable the command does not set).
    pub(super) outside: bool,
}

impl Values {
    pub(super) fn of(text: &str) -> Values {
        Values {
            texts: vec![text.to_string()],
            ..Values::default()
        }
    }

    /// Every text, as a shell splits it into words: at white space, and at each character
    /// `IFS` may hold (`ifs`).
    pub(super) fn split(&self, ifs: &[char]) -> Vec<Vec<Arg>> {
        self.texts
            .iter()
            .map(|t| {
                t.split(|c: char| c.is_whitespace() || ifs.contains(&c))
                    .filter(|w| !w.is_empty())
                    .map(Arg::literal)
                    .collect()
            })
            .collect()
    }

    /// Each text of `a` followed by each text of `b`.
    pub(super) fn then(self, b: Values) -> Values {
        let mut texts = Vec::new();
        let mut over = false;
        for x in &self.texts {
            for y in &b.texts {
                if texts.len() >= MAX_VALUES {
                    over = true;
                    break;
                }
                texts.push(format!("{x}{y}"));
            }
        }
        Values {
            texts,
            unknown: self.unknown || b.unknown || over,
            outside: self.outside || b.outside,
        }
    }
}

impl Scope {
    /// The texts a variable the command sets may hold.
    pub(super) fn texts(&self, name: &str) -> Vec<String> {
        self.get(name).map(|v| v.texts.clone()).unwrap_or_default()
    }

    /// The characters `IFS` may hold, where the command sets it.
    pub(super) fn ifs(&self) -> Vec<char> {
        self.get("IFS")
            .map(|v| v.texts.iter().flat_map(|t| t.chars()).collect())
            .unwrap_or_default()
    }

    /// What a variable the command sets may hold, as a word would expand it; `None` where the
    /// command does not set it.
    pub(super) fn value(&self, name: &str) -> Option<Values> {
        self.get(name).map(|v| Values {
            texts: v.texts.clone(),
            unknown: v.unknown,
            outside: v.outside,
        })
    }

    fn get(&self, name: &str) -> Option<&Value> {
        self.vars.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    pub(super) fn add(&mut self, name: &str, values: Values) {
        let name = name.trim_end_matches('+');
        let name = name.split('[').next().unwrap_or(name);
        let at = match self.vars.iter().position(|(n, _)| n == name) {
            Some(at) => at,
            None => {
                self.vars.push((name.to_string(), Value::default()));
                self.vars.len() - 1
            }
        };
        let v = &mut self.vars[at].1;
        for t in values.texts {
            if v.texts.len() >= MAX_VALUES {
                v.unknown = true;
                break;
            }
            if !v.texts.contains(&t) {
                v.texts.push(t);
            }
        }
        v.unknown |= values.unknown;
        v.outside |= values.outside;
    }

    /// `$@`, `$*` and `$1`... of a function call or `set --`: every tail of the arguments
    /// (a `shift` may drop the first ones).
    pub(super) fn set_positional(&mut self, args: &[Values]) {
        for start in 0..args.len().min(MAX_VALUES) {
            let mut all = Values::of("");
            for (k, a) in args[start..].iter().enumerate() {
                let sep = if k == 0 { "" } else { " " };
                all = all.then(Values::of(sep)).then(a.clone());
            }
            self.add("@", all.clone());
            self.add("*", all);
        }
        for (k, a) in args.iter().enumerate().take(9) {
            self.add(&(k + 1).to_string(), a.clone());
        }
    }

    /// What `part` may become.
    fn part(&self, part: &Part) -> Values {
        let var = |name: &str| -> Values {
            match name {
                // The last argument of the last command: anything the command said.
                "_" => Values {
                    unknown: true,
                    ..Values::default()
                },
                "?" | "$" | "!" | "#" | "-" => Values::of("0"),
                // The working directory, which relative paths are relative to: `.` unless the
                // command sets it.
                "PWD" if self.get(name).is_none() => Values::of("."),
                _ => match self.get(name) {
                    Some(v) => Values {
                        texts: v.texts.clone(),
                        unknown: v.unknown,
                        outside: v.outside,
                    },
                    None => Values {
                        outside: true,
                        ..Values::default()
                    },
                },
            }
        };
        match part {
            Part::Text(t) => Values::of(t),
            Part::Var(name) => var(name),
            Part::Or(name, word) => {
                let mut v = var(name);
                match word {
                    Some(w) => v.texts.push(w.clone()),
                    None => v.unknown = true,
                }
                v
            }
            Part::Made(name) => Values {
                unknown: self.get(name).is_some(),
                outside: self.get(name).is_none(),
                ..Values::default()
            },
            Part::Output(Produced::Text(t)) => Values::of(t.trim_end_matches('\n')),
            Part::Output(Produced::Lookup(p)) => Values::of(p),
            Part::Output(_) => Values {
                unknown: true,
                ..Values::default()
            },
            // The word is a path to what the command prints; the program reading it decides.
            Part::Fed(_) => Values::of("/dev/fd/63"),
            Part::Opaque => Values {
                outside: true,
                ..Values::default()
            },
        }
    }

    /// What a word may become.
    pub(super) fn expand(&self, a: &Arg) -> Values {
        if let Some(t) = a.text() {
            return Values::of(t);
        }
        let Some(parts) = &a.parts else {
            return Values {
                outside: true,
                ..Values::default()
            };
        };
        let mut out = Values::of("");
        for p in parts {
            out = out.then(self.part(p));
        }
        out
    }
}

impl Walk<'_> {
    /// Collects the assignments and function definitions of the tree under `n` (twice, so
    /// that one using another set later is read with it).
    pub(super) fn collect(&mut self, n: Node, src: &str) {
        // Only these words set variables, parameters, aliases or functions: a command
        // without them has nothing to collect.
        if !SETTERS.iter().any(|w| src.contains(w)) {
            return;
        }
        self.collect_in(n, src, 0);
        if !self.scope.vars.is_empty() {
            self.collect_in(n, src, 0);
        }
        self.recursion();
    }

    fn collect_in(&mut self, n: Node, src: &str, depth: usize) {
        if depth > MAX_DEPTH || !self.spend(1) {
            return;
        }
        match n.kind() {
            "variable_assignment" => {
                let name = n.child_by_field_name("name").map(|x| &src[x.byte_range()]);
                let value = n.child_by_field_name("value");
                if let Some(name) = name {
                    let values = match value {
                        Some(v) if v.kind() == "array" => self.words_joined(v, src),
                        Some(v) => self.scope.expand(&Arg::of(v, src)),
                        None => Values::of(""),
                    };
                    self.scope.add(name, values);
                }
            }
            "for_statement" => {
                let var = n
                    .child_by_field_name("variable")
                    .map(|x| &src[x.byte_range()]);
                let mut c = n.walk();
                let words: Vec<Node> = n.children_by_field_name("value", &mut c).collect();
                if let Some(var) = var {
                    if words.is_empty() {
                        let all = self.scope.part(&Part::Var("@".to_string()));
                        self.scope.add(var, all);
                    }
                    for w in words {
                        let a = Arg::of(w, src);
                        // A pattern stands for file names, which the classifier cannot read:
                        // any of them, and the pattern's own text for where they lie
                        // (`for f in vendor/*`: `$f` is under `vendor/`).
                        if a.pattern {
                            let mut any = unknown();
                            any.texts.push(a.raw.clone());
                            self.scope.add(var, any);
                            continue;
                        }
                        let values = self.scope.expand(&a);
                        // Quoted, the word is one value; unquoted, each word of it is.
                        let words: Vec<String> = values
                            .texts
                            .iter()
                            .flat_map(|t| t.split_whitespace().map(str::to_string))
                            .collect();
                        self.scope.add(var, values);
                        for word in words {
                            self.scope.add(var, Values::of(&word));
                        }
                    }
                }
            }
            "command" => self.collect_command(n, src),
            // `declare -n REF=NAME`: REF stands for another variable, whatever it holds.
            "declaration_command" => {
                let mut c = n.walk();
                let children: Vec<Node> = n.named_children(&mut c).collect();
                let nameref = children.iter().any(|ch| {
                    ch.kind() == "word" && {
                        let t = &src[ch.byte_range()];
                        t.starts_with('-') && t.contains('n')
                    }
                });
                if nameref {
                    for ch in children
                        .iter()
                        .filter(|ch| ch.kind() == "variable_assignment")
                    {
                        if let Some(name) = ch.child_by_field_name("name") {
                            self.scope.add(&src[name.byte_range()], unknown());
                        }
                    }
                }
            }
            "function_definition" => {
                let name = n.child_by_field_name("name").map(|x| &src[x.byte_range()]);
                if let (Some(name), Some(body)) = (name, n.child_by_field_name("body")) {
                    let mut called = Vec::new();
                    self.called_names(body, src, &mut called, 0);
                    let def = Function {
                        name: name.to_string(),
                        body: src[body.byte_range()].to_string(),
                        called,
                    };
                    if !self
                        .scope
                        .functions
                        .iter()
                        .any(|f| f.name == def.name && f.body == def.body)
                    {
                        self.scope.functions.push(def);
                    }
                }
            }
            _ => {}
        }
        let mut c = n.walk();
        let children: Vec<Node> = n.named_children(&mut c).collect();
        for ch in children {
            self.collect_in(ch, src, depth + 1);
        }
    }

    /// `read X`, `mapfile A`, `printf -v X`: set to text the classifier cannot read;
    /// `set -- ARGS`: the positional parameters.
    fn collect_command(&mut self, n: Node, src: &str) {
        let Some((program, args)) = stage_program(n, src) else {
            return;
        };
        let unknown = unknown();
        let names = args.iter().filter_map(|a| a.text());
        match program.as_str() {
            p if READERS.contains(&p) => {
                for name in names.filter(|t| is_name(t)).collect::<Vec<_>>() {
                    self.scope.add(name, unknown.clone());
                }
                // `mapfile` without a name fills MAPFILE; `read` without one fills REPLY.
                self.scope.add("MAPFILE", unknown.clone());
                self.scope.add("REPLY", unknown);
            }
            "alias" => {
                for (name, text) in names.filter_map(|t| t.split_once('=')) {
                    let def = (name.to_string(), text.to_string());
                    if !self.scope.aliases.contains(&def) {
                        self.scope.aliases.push(def);
                    }
                }
            }
            "printf" => {
                let mut words = names.skip_while(|t| *t != "-v").skip(1);
                if let Some(name) = words.next() {
                    self.scope.add(name, unknown);
                }
            }
            "set" => {
                let nodes: Vec<Node> = arguments(n);
                let words: Vec<Arg> = nodes.iter().map(|w| Arg::of(*w, src)).collect();
                let start = words
                    .iter()
                    .position(|a| a.text() == Some("--"))
                    .map(|i| i + 1)
                    .or_else(|| {
                        words
                            .iter()
                            .position(|a| !a.text().is_some_and(|t| t.starts_with(['-', '+'])))
                    });
                if let Some(start) = start {
                    let values: Vec<Values> = words[start..]
                        .iter()
                        .map(|a| self.scope.expand(a))
                        .collect();
                    self.scope.set_positional(&values);
                }
            }
            _ => {}
        }
    }

    /// The elements of an array, joined by spaces (as `"${a[@]}"` in command position is).
    fn words_joined(&self, array: Node, src: &str) -> Values {
        let mut c = array.walk();
        let mut out = Values::of("");
        for (k, w) in array.named_children(&mut c).enumerate() {
            let sep = if k == 0 { "" } else { " " };
            out = out
                .then(Values::of(sep))
                .then(self.scope.expand(&Arg::of(w, src)));
        }
        out
    }

    /// The names the statements under `n` run: command names (what a variable there may
    /// hold included) and the first words of the arguments of `eval` and runners.
    fn called_names(&self, n: Node, src: &str, out: &mut Vec<String>, depth: usize) {
        if depth > MAX_DEPTH || out.len() > MAX_VALUES * 4 {
            return;
        }
        if n.kind() == "command" {
            if let Some(name) = n.child_by_field_name("name") {
                let word = name.named_child(0).unwrap_or(name);
                out.extend(self.scope.expand(&Arg::of(word, src)).texts);
                let program = literal(word, src).map(|(t, _)| t).unwrap_or_default();
                let runs_words =
                    program == "eval" || spec_of(&program).is_some_and(|s| s.runs.is_some());
                if runs_words {
                    let args: Vec<Node> = arguments(n);
                    for a in args {
                        let values = self.scope.expand(&Arg::of(a, src));
                        let firsts = values
                            .texts
                            .iter()
                            .filter_map(|t| t.split_whitespace().next());
                        out.extend(firsts.map(str::to_string));
                    }
                }
            }
        }
        let mut c = n.walk();
        let children: Vec<Node> = n.named_children(&mut c).collect();
        for ch in children {
            self.called_names(ch, src, out, depth + 1);
        }
    }

    /// Functions that call each other (or themselves): a fork bomb's shape.
    fn recursion(&mut self) {
        let functions = &self.scope.functions;
        let edges: Vec<Vec<usize>> = functions
            .iter()
            .map(|f| {
                (0..functions.len())
                    .filter(|&k| f.called.contains(&functions[k].name))
                    .collect()
            })
            .collect();
        let mut cycle = None;
        for start in 0..functions.len() {
            // Whether `start` reaches itself.
            let mut seen = vec![false; functions.len()];
            let mut stack = edges[start].clone();
            while let Some(f) = stack.pop() {
                if f == start {
                    cycle = Some(functions[start].name.clone());
                    break;
                }
                if !std::mem::replace(&mut seen[f], true) {
                    stack.extend(edges[f].iter().copied());
                }
            }
            if cycle.is_some() {
                break;
            }
        }
        if let Some(name) = cycle {
            self.raise(
                CommandClass::Dangerous,
                format!(
                    "the function {name} calls itself, alone or through others (a fork bomb's \
                     shape)"
                ),
            );
        }
    }

    /// What a word may become, with the variables the command sets.
    pub(super) fn expand(&self, a: &Arg) -> Values {
        self.scope.expand(a)
    }

    /// A program word that is an alias the command defines: its text, then the arguments.
    /// Returns false when `name` is no such alias.
    pub(super) fn call_alias(&mut self, name: &str, args: &[Arg]) -> bool {
        let texts: Vec<String> = self
            .scope
            .aliases
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, t)| t.clone())
            .collect();
        if texts.is_empty() || self.scope.calling.iter().any(|c| c == name) {
            return false;
        }
        let raw: Vec<&str> = args.iter().map(|a| a.raw.as_str()).collect();
        for text in texts {
            let mut inner = self.nested();
            inner.scope.calling.push(name.to_string());
            inner.source(&format!("{text} {}", raw.join(" ")));
            self.absorb(inner);
        }
        true
    }

    /// A call of a function the command defines: its body, with the call's arguments as
    /// `$@`. Returns false when `name` is no such function.
    pub(super) fn call_function(&mut self, name: &str, args: &[Arg]) -> bool {
        let Some(body) = self
            .scope
            .functions
            .iter()
            .find(|f| f.name == name)
            .map(|f| f.body.clone())
        else {
            return false;
        };
        self.raise(
            CommandClass::ShellComplex,
            format!("calls the function {name}"),
        );
        if self.scope.calling.iter().any(|c| c == name) {
            return true;
        }
        let values: Vec<Values> = args.iter().map(|a| self.expand(a)).collect();
        let mut inner = self.nested();
        inner.scope.calling.push(name.to_string());
        inner.scope.set_positional(&values);
        inner.source(&body);
        self.absorb(inner);
        true
    }
}

fn unknown() -> Values {
    Values {
        unknown: true,
        ..Values::default()
    }
}

/// Whether `t` is a shell variable name.
fn is_name(t: &str) -> bool {
    t.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && t.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}
