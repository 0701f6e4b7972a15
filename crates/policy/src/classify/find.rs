//! `find`: the tests it filters by, what `-delete` removes and the commands `-exec` runs.
//!
//! A test narrows what the actions after it see only when it needs something most files do
//! not have and cannot match a grant directory or one holding it: `-name '*.o'` narrows,
//! `-name '[!.]*'`, `-name '*.*'`, `-regex '.+'` and `-name notes` (under `/srv`) do not. An
//! operator (`-o`, `!`, parentheses) after or around a test loosens it. `{}` of `-exec` stands
//! for what find finds: every file under the start path, the start included, unless a test
//! narrows it (`Found`). `-samefile F` narrows only when F cannot be a grant directory or one
//! holding it (`-samefile .` is the start itself); `-inum` never does, since any inode may be
//! a root's.

use super::*;

/// Options before the start paths; `-D` takes a value.
const LEADING: &[&str] = &["-H", "-L", "-P"];

/// Tests that pick files by name.
const NAME_TESTS: &[&str] = &["-name", "-iname"];
/// Tests that pick files by the whole path find prints.
const PATH_TESTS: &[&str] = &["-path", "-ipath", "-wholename", "-iwholename"];
const REGEX_TESTS: &[&str] = &["-regex", "-iregex"];
/// Tests that pick one file: by a file that is the same (`-samefile`), by an inode number.
const ONE_FILE_TESTS: &[&str] = &["-samefile", "-inum"];

/// The other primaries that take one value (so that `-newer -delete` is a file, not an action).
const OTHER_WITH_VALUE: Names = Names(
    "-lname -ilname -type -xtype -newer -anewer -cnewer -maxdepth -mindepth -mtime -mmin -atime \
     -amin -ctime -cmin -size -user -group -uid -gid -perm -links -fstype -regextype -used \
     -context -printf -files0-from",
);

/// Actions that write the file their value names.
const WRITE_ACTIONS: &[&str] = &["-fprint", "-fprint0", "-fls", "-fprintf"];
const EXEC_ACTIONS: &[&str] = &["-exec", "-execdir", "-ok", "-okdir"];

/// Operators after which an earlier test no longer guards what follows.
const OPERATORS: &[&str] = &["-o", "-or", ",", "!", "-not", "(", ")"];

/// What one action of a find expression does.
#[derive(Debug, Clone)]
pub(super) enum Action {
    Delete,
    /// `-exec COMMAND {} ;` (`in_dir` for `-execdir`: relative to each file's directory).
    Exec {
        command: Vec<Arg>,
        in_dir: bool,
    },
    /// `-fprint FILE` and the like.
    Write(Arg),
    /// Prints names (`-print`, `-print0`, the default): what a pipe downstream reads.
    Print,
}

/// A find command, read.
#[derive(Debug, Clone)]
pub(super) struct FindExpr {
    pub(super) starts: Vec<Arg>,
    /// Each action, and whether a test narrows what it sees.
    pub(super) actions: Vec<(Action, bool)>,
}

impl FindExpr {
    /// `{}` for one start path: what an action sees under it.
    pub(super) fn found(start: &Arg, narrowed: bool) -> Arg {
        Arg {
            raw: "{}".to_string(),
            found: if narrowed { Found::Some } else { Found::Every },
            ..start.clone()
        }
    }

    /// What find prints, as names for a program downstream (`find ROOT | xargs rm`).
    pub(super) fn printed(&self) -> Vec<Arg> {
        let narrowed = self
            .actions
            .iter()
            .filter(|(a, _)| matches!(a, Action::Print))
            .all(|(_, n)| *n);
        self.starts
            .iter()
            .map(|s| FindExpr::found(s, narrowed))
            .collect()
    }
}

/// Reads `find ARGS` against the grant's directories.
pub(super) fn read_find(args: &[Arg], roots: &[PathBuf]) -> FindExpr {
    let mut i = 0;
    // `-L` and `-H` follow links, in what `-samefile` names too.
    let mut follow = false;
    while let Some(t) = args.get(i).and_then(|a| a.text()) {
        match t {
            _ if LEADING.contains(&t) || t.starts_with("-O") => {
                follow |= matches!(t, "-L" | "-H");
                i += 1
            }
            "-D" => i += 2,
            _ => break,
        }
    }
    let mut starts = Vec::new();
    while let Some(a) = args.get(i) {
        match a.text() {
            Some(t) if t.starts_with('-') || matches!(t, "(" | "!" | ")" | ",") => break,
            _ => starts.push(a.clone()),
        }
        i += 1;
    }
    if starts.is_empty() {
        starts.push(Arg::literal("."));
    }
    let start_texts: Vec<String> = starts
        .iter()
        .map(|s| s.text().unwrap_or("").to_string())
        .collect();
    let mut actions = Vec::new();
    // A test has narrowed what the actions that follow see, with no operator since.
    let mut narrowed = false;
    let mut loose = false;
    while let Some(a) = args.get(i) {
        i += 1;
        let Some(t) = a.text() else { continue };
        if OPERATORS.contains(&t) {
            loose = true;
            continue;
        }
        let here = narrowed && !loose;
        match t {
            _ if EXEC_ACTIONS.contains(&t) => {
                let end = args[i..]
                    .iter()
                    .position(|a| matches!(a.text(), Some(";" | "+")))
                    .map(|p| i + p)
                    .unwrap_or(args.len());
                let command = args[i..end].to_vec();
                actions.push((
                    Action::Exec {
                        command,
                        in_dir: t.ends_with("dir"),
                    },
                    here,
                ));
                i = end + 1;
            }
            "-delete" => actions.push((Action::Delete, here)),
            _ if WRITE_ACTIONS.contains(&t) => {
                if let Some(f) = args.get(i) {
                    actions.push((Action::Write(f.clone()), here));
                }
                i += 1 + usize::from(t == "-fprintf");
            }
            "-follow" => follow = true,
            "-print" | "-print0" | "-ls" => actions.push((Action::Print, here)),
            "-printf" => {
                actions.push((Action::Print, here));
                i += 1;
            }
            _ if OTHER_WITH_VALUE.contains(&t) => i += 1,
            _ if NAME_TESTS.contains(&t)
                || PATH_TESTS.contains(&t)
                || REGEX_TESTS.contains(&t)
                || ONE_FILE_TESTS.contains(&t) =>
            {
                let value = args.get(i).and_then(|v| v.text());
                i += 1;
                narrowed |= value.is_some_and(|v| narrows(t, v, &start_texts, roots, follow));
            }
            _ => {}
        }
    }
    if actions.is_empty() {
        actions.push((Action::Print, narrowed && !loose));
    }
    FindExpr { starts, actions }
}

/// Whether a test with `value` leaves out most files and every grant directory (and every
/// directory holding one) that find may reach from `starts`; `follow`: find follows links.
fn narrows(test: &str, value: &str, starts: &[String], roots: &[PathBuf], follow: bool) -> bool {
    let fold = test.starts_with("-i");
    let matches = |pattern: &str, name: &str| {
        let (p, n) = match fold {
            true => (pattern.to_lowercase(), name.to_lowercase()),
            false => (pattern.to_string(), name.to_string()),
        };
        crate::glob::matches(&p, &n).unwrap_or(true)
    };
    // The directories a destroying action must not reach: the roots and those holding them.
    let held: Vec<PathBuf> = roots
        .iter()
        .flat_map(|r| {
            normalise(r)
                .ancestors()
                .map(Path::to_path_buf)
                .collect::<Vec<_>>()
        })
        .collect();
    // A run found in a start or held path (`/` added) may be how it matches them.
    let unexplained = |runs: Vec<String>| {
        runs.iter().any(|run| {
            !starts
                .iter()
                .any(|s| format!("{s}/").contains(run.as_str()))
                && !held
                    .iter()
                    .any(|h| format!("{}/", h.display()).contains(run.as_str()))
        })
    };
    if test == "-inum" {
        return false;
    }
    if test == "-samefile" {
        return !may_be_held(value, &held, follow);
    }
    if NAME_TESTS.contains(&test) {
        let names = held.iter().filter_map(|h| h.file_name());
        return !literal_runs(value, "./").is_empty()
            && !names
                .map(|n| n.to_string_lossy().into_owned())
                .any(|n| matches(value, &n));
    }
    if PATH_TESTS.contains(&test) {
        // What find prints for a held directory: the start path as given, then the rest.
        let printed = starts.iter().flat_map(|s| {
            let from = normalise(Path::new(s));
            held.iter()
                .filter_map(move |h| h.strip_prefix(&from).ok().map(|rest| (s, rest)))
                .map(|(s, rest)| Path::new(s).join(rest).to_string_lossy().into_owned())
                .chain(std::iter::once(s.clone()))
                .collect::<Vec<_>>()
        });
        let candidates: Vec<String> = printed
            .chain(held.iter().map(|h| h.to_string_lossy().into_owned()))
            .collect();
        return unexplained(literal_runs(value, "./"))
            && !candidates.iter().any(|c| matches(value, c));
    }
    // A regex: an alternative, or a group made optional, may match anything; otherwise it
    // needs one of its runs.
    let optional_group = [")*", ")?", "){"].iter().any(|g| value.contains(g));
    !value.contains('|') && !optional_group && unexplained(regex_runs(value))
}

/// Whether the file `-samefile` compares with may be a grant directory or one holding it
/// (`held`): `.`, `..`, `/` and a path ending in one of them may be any directory; one ending
/// in a held directory's name may be it wherever the command runs (find's working directory is
/// not known); with a trailing `/`, or with `follow`, a link of any name may lead to one.
fn may_be_held(value: &str, held: &[PathBuf], follow: bool) -> bool {
    if follow || value.ends_with('/') || value.is_empty() {
        return true;
    }
    let last = Path::new(value).components().next_back();
    let name = match last {
        Some(Component::Normal(n)) => n.to_string_lossy().into_owned(),
        // `.`, `..`, `/`.
        _ => return true,
    };
    // A path ending in `/.` has `.` as its last component, which `components` drops.
    if value.ends_with("/.") || value == "." {
        return true;
    }
    held.iter()
        .filter_map(|h| h.file_name())
        .any(|n| n.to_string_lossy() == name)
}

/// The runs of characters a shell pattern needs as they are (outside `*`, `?` and `[...]`),
/// without the characters in `ignored`.
fn literal_runs(pattern: &str, ignored: &str) -> Vec<String> {
    let mut runs = Vec::new();
    let mut run = String::new();
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '*' | '?' | '[' => {
                if c == '[' {
                    for d in chars.by_ref() {
                        if d == ']' {
                            break;
                        }
                    }
                }
                runs.push(std::mem::take(&mut run));
            }
            '\\' => run.extend(chars.next()),
            _ if ignored.contains(c) => runs.push(std::mem::take(&mut run)),
            _ => run.push(c),
        }
    }
    runs.push(run);
    runs.retain(|r| !r.is_empty());
    runs
}

/// The runs of characters a regex needs as they are: letters, digits, `/`, `-`, `_` and
/// escaped punctuation, not in a bracket expression, not made optional by `?`, `*` or `{`.
fn regex_runs(regex: &str) -> Vec<String> {
    let mut runs = Vec::new();
    let mut run = String::new();
    let mut chars = regex.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            // `\.` is a dot; `\w` and the like are classes.
            '\\' => match chars.next() {
                Some(e)
                    if e.is_ascii_punctuation()
                        && !matches!(chars.peek(), Some('?' | '*' | '{')) =>
                {
                    run.push(e)
                }
                _ => runs.push(std::mem::take(&mut run)),
            },
            '[' => {
                for d in chars.by_ref() {
                    if d == ']' {
                        break;
                    }
                }
                runs.push(std::mem::take(&mut run));
            }
            c if c.is_alphanumeric() || matches!(c, '/' | '-' | '_') => {
                if matches!(chars.peek(), Some('?' | '*' | '{')) {
                    runs.push(std::mem::take(&mut run));
                } else {
                    run.push(c);
                }
            }
            _ => runs.push(std::mem::take(&mut run)),
        }
    }
    runs.push(run);
    runs.retain(|r| !r.is_empty());
    runs
}

impl Walk<'_> {
    pub(super) fn find(&mut self, args: &[Arg]) {
        let expr = read_find(args, self.roots);
        for (action, narrowed) in &expr.actions {
            match action {
                Action::Print => {}
                Action::Write(f) => self.write_target(f),
                Action::Delete => {
                    self.raise(CommandClass::WorkspaceMutating, "find -delete");
                    for s in &expr.starts {
                        if !narrowed && self.wipes_root(s) {
                            self.raise(
                                CommandClass::Dangerous,
                                format!(
                                    "find {} -delete removes a grant directory's contents",
                                    s.raw
                                ),
                            );
                        }
                        self.write_target(s);
                        // What is deleted lies anywhere under the start.
                        self.unplaced = true;
                    }
                }
                Action::Exec { command, in_dir } => {
                    // The command is read as what it is, `{}` standing for what find finds;
                    // past the starts read with it, what the others make of it is not told.
                    if expr.starts.len() > MAX_FIND_STARTS {
                        self.raise(
                            CommandClass::ShellComplex,
                            format!(
                                "find -exec{} runs programs on more starts than the classifier reads",
                                if *in_dir { "dir" } else { "" }
                            ),
                        );
                    }
                    for s in expr.starts.iter().take(MAX_FIND_STARTS) {
                        let found = FindExpr::found(s, *narrowed);
                        // `{}` inside a word (`of={}`) stands for the path there.
                        let start = found.text().unwrap_or("");
                        let words: Vec<Arg> = command
                            .iter()
                            .map(|a| match a.text() {
                                Some(t) if t.contains("{}") => Arg {
                                    lit: Some(t.replace("{}", start)),
                                    ..found.clone()
                                },
                                _ => a.clone(),
                            })
                            .collect();
                        let mut inner = self.nested();
                        // `-execdir` runs in each file's directory.
                        inner.cwd_unknown |= *in_dir;
                        inner.run_rest("find -exec", &words);
                        self.absorb(inner);
                    }
                }
            }
        }
    }
}

/// At most this many start paths of one find are read with its `-exec` command.
const MAX_FIND_STARTS: usize = 8;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tests_that_narrow() {
        let roots = [PathBuf::from("/srv/notes"), PathBuf::from("/srv/ref")];
        // (test, value, start, narrows)
        let cases: &[(&str, &str, &str, bool)] = &[
            ("-name", "*.o", "/srv/notes", true),
            ("-name", "x*", ".", true),
            ("-name", "*~", ".", true),
            ("-name", "*", "/srv/notes", false),
            ("-name", "[!.]*", "/srv/notes", false),
            ("-name", "[^.]*", "/srv/notes", false),
            ("-name", "?*", "/srv/notes", false),
            ("-name", "*.*", "/srv/notes", false),
            ("-name", ".*", "/srv/notes", false),
            ("-name", "*[a-z]*", "/srv/notes", false),
            ("-name", "notes", "/srv", false),
            ("-iname", "NOTES", "/srv", false),
            ("-name", "no*", "/srv", false),
            ("-path", "*", "/srv/notes", false),
            ("-path", "/srv/notes/*", "/srv/notes", false),
            ("-path", "*/notes/*", "/srv/notes", false),
            ("-path", "./*", ".", false),
            ("-path", "*/build/*", ".", true),
            ("-wholename", "/srv/*", "/srv", false),
            ("-regex", ".*", "/srv/notes", false),
            ("-regex", ".+", "/srv/notes", false),
            ("-regex", ".*\\.o", "/srv/notes", true),
            ("-regex", ".*notes.*", "/srv", false),
            ("-regex", ".*\\.o\\|.*", "/srv/notes", false),
            ("-regex", "[a-z]+.*", "/srv/notes", false),
            ("-regex", "x?.*", "/srv/notes", false),
            ("-regex", ".*/notes/.*", "/srv/notes", false),
            ("-regex", "\\(foo\\)*.*", "/srv/notes", false),
            ("-regex", "^/srv/notes/.+$", "/srv/notes", false),
            ("-samefile", "a", ".", true),
            ("-samefile", "src/a.o", "/srv/notes", true),
            ("-samefile", ".", ".", false),
            ("-samefile", "./", ".", false),
            ("-samefile", "x/.", ".", false),
            ("-samefile", "..", ".", false),
            ("-samefile", "a/..", ".", false),
            ("-samefile", "/", "/srv", false),
            ("-samefile", "/srv/notes", "/srv", false),
            ("-samefile", "notes", "/srv", false),
            ("-samefile", "../ref", ".", false),
            ("-samefile", "srv", "/", false),
            ("-samefile", "link/", ".", false),
            ("-samefile", "", ".", false),
            ("-inum", "2", "/srv/notes", false),
            ("-inum", "123456", ".", false),
        ];
        for &(test, value, start, want) in cases {
            assert_eq!(
                narrows(test, value, &[start.to_string()], &roots, false),
                want,
                "find {start} {test} {value:?}"
            );
        }
        // Following links, a link of any name may lead to a root.
        assert!(!narrows("-samefile", "a", &[".".into()], &roots, true));
    }
}
