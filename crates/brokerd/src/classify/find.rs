//! `find`: the tests it filters by, what `-delete` removes and the commands `-exec` runs.

use super::*;

/// Tests that pick files by name: with a literal character in the pattern they spare the rest.
const NAME_TESTS: &[&str] = &[
    "-name",
    "-iname",
    "-path",
    "-ipath",
    "-wholename",
    "-iwholename",
    "-regex",
    "-iregex",
    "-samefile",
    "-inum",
];

/// The other primaries that take one value (so that `-newer -delete` is a file, not an action).
const OTHER_WITH_VALUE: &[&str] = &[
    "-lname",
    "-ilname",
    "-type",
    "-xtype",
    "-newer",
    "-anewer",
    "-cnewer",
    "-maxdepth",
    "-mindepth",
    "-mtime",
    "-mmin",
    "-atime",
    "-amin",
    "-ctime",
    "-cmin",
    "-size",
    "-user",
    "-group",
    "-uid",
    "-gid",
    "-perm",
    "-links",
    "-fstype",
    "-regextype",
    "-used",
    "-context",
    "-printf",
    "-files0-from",
];

/// Operators after which an earlier test no longer guards what follows.
const OPERATORS: &[&str] = &["-o", "-or", ",", "!", "-not", "(", ")"];

impl Walk<'_> {
    pub(super) fn find(&mut self, args: &[Arg]) {
        let mut starts = Vec::new();
        let mut in_expr = false;
        // A name test has narrowed what the actions that follow see, with no `-o` since.
        let mut narrowed = false;
        let mut loose = false;
        let mut i = 0;
        while let Some(a) = args.get(i) {
            i += 1;
            let Some(t) = a.text() else {
                if !in_expr {
                    starts.push(a.clone());
                }
                continue;
            };
            if !in_expr && !t.starts_with('-') && t != "(" && t != "!" {
                starts.push(a.clone());
                continue;
            }
            in_expr = true;
            if OPERATORS.contains(&t) {
                loose = true;
                continue;
            }
            match t {
                "-exec" | "-execdir" | "-ok" | "-okdir" => {
                    self.raise(
                        CommandClass::ShellComplex,
                        format!("find {t} runs programs"),
                    );
                    let end = args[i..]
                        .iter()
                        .position(|a| matches!(a.text(), Some(";" | "+")))
                        .map(|p| i + p)
                        .unwrap_or(args.len());
                    // `{}` stands for each name found: the command's targets come from find.
                    let command: Vec<Arg> = args[i..end]
                        .iter()
                        .filter(|a| !a.text().is_some_and(|t| t.contains("{}")))
                        .cloned()
                        .collect();
                    let mut inner = self.nested();
                    inner.input_operands = true;
                    inner.run_rest("find -exec", &command);
                    self.absorb(inner);
                    i = end + 1;
                }
                "-delete" => {
                    self.raise(CommandClass::WorkspaceMutating, "find -delete");
                    if starts.is_empty() {
                        starts.push(Arg::literal("."));
                    }
                    for s in starts.clone() {
                        if (!narrowed || loose) && self.wipes_root(&s) {
                            self.raise(
                                CommandClass::Dangerous,
                                format!(
                                    "find {} -delete removes a grant directory's contents",
                                    s.raw
                                ),
                            );
                        }
                        self.write_target(&s);
                    }
                }
                "-fprint" | "-fprint0" | "-fprintf" | "-fls" => {
                    if let Some(f) = args.get(i) {
                        self.write_target(f);
                    }
                    i += 1 + usize::from(t == "-fprintf");
                }
                _ if NAME_TESTS.contains(&t) || OTHER_WITH_VALUE.contains(&t) => {
                    let value = args.get(i);
                    i += 1;
                    if NAME_TESTS.contains(&t) {
                        let literal_char = value.and_then(|v| v.text()).is_some_and(|p| {
                            p.chars()
                                .any(|c| !matches!(c, '*' | '?' | '[' | ']' | '.' | '\\'))
                        });
                        narrowed |= literal_char;
                    }
                }
                _ => {}
            }
        }
    }
}
