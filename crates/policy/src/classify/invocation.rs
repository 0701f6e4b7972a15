//! How a shell or an interpreter reads its arguments, one grammar for every question asked of
//! them: which options take a value, which carry the program's code, and so where the program
//! comes from (inline code, a script file, a module, or the input). `reads_code` asks whether
//! text fed to the program runs (`cat cmds | bash -euo pipefail` does, `-o` taking
//! `pipefail`); `shell_inline`, `interpreter_inline` and `script_interpreter` ask what runs.

use super::paths::is_input_path;
use super::programs::Names;
use super::Arg;

/// One program's option grammar.
struct Grammar {
    names: &'static [&'static str],
    /// Short options taking a value, attached or the next word (`python -W ARG`, `ruby -I DIR`);
    /// a shell's (`-o NAME`, `-O NAME`, also after `+`) each take the next word.
    valued: &'static str,
    /// Short options taking an optional value, attached only (`perl -i.bak`, `-l`, `-0777`).
    attached: &'static str,
    /// Short options whose value, attached or the next word, is code (`python -c`, `perl -e`).
    code: &'static str,
    /// Short options whose value is the program, from elsewhere than the input: a module or a
    /// file (`python -m MODULE`, `php -f FILE`).
    program: &'static str,
    /// Words (as written) whose next word is code, or that carry it after `=` (`--eval`,
    /// `-Command`, deno's `eval`).
    code_words: &'static [&'static str],
    /// Words (as written) whose next word is the program file (`-File`).
    program_words: &'static [&'static str],
    /// Long options that take the next word, unless given `=VALUE` (`--rcfile FILE`).
    long_valued: Names,
    /// A shell: `-c` makes the first operand the code, `-s` the input the program whatever the
    /// operands, and options also start with `+`.
    shell: bool,
    /// Options end with the code or program option: what follows is the program's arguments.
    ends: bool,
}

const NONE: Grammar = Grammar {
    names: &[],
    valued: "",
    attached: "",
    code: "",
    program: "",
    code_words: &[],
    program_words: &[],
    long_valued: Names(""),
    shell: false,
    ends: false,
};

const GRAMMARS: &[Grammar] = &[
    Grammar {
        names: super::SHELLS,
        valued: "oO",
        long_valued: Names("rcfile init-file"),
        shell: true,
        ..NONE
    },
    Grammar {
        names: &["python", "python2", "python3"],
        valued: "WXQ",
        code: "c",
        program: "m",
        long_valued: Names("check-hash-based-pycs"),
        ends: true,
        ..NONE
    },
    Grammar {
        names: &["perl"],
        valued: "I",
        attached: "0CdDilmMxVF",
        code: "eE",
        ..NONE
    },
    Grammar {
        names: &["ruby"],
        valued: "CIrE",
        attached: "0iFWxKTd",
        code: "e",
        ..NONE
    },
    Grammar {
        names: &["node", "nodejs"],
        valued: "r",
        code: "ep",
        code_words: &["--eval", "--print"],
        long_valued: Names(
            "require import loader experimental-loader input-type conditions title env-file redirect-warnings disable-warning watch-path",
        ),
        ends: true,
        ..NONE
    },
    Grammar {
        names: &["bun"],
        code: "ep",
        code_words: &["--eval", "--print"],
        ends: true,
        ..NONE
    },
    Grammar {
        names: &["deno"],
        code_words: &["eval"],
        ends: true,
        ..NONE
    },
    Grammar {
        names: &["php"],
        valued: "cdztS",
        code: "rBRE",
        program: "fF",
        ..NONE
    },
    Grammar {
        names: &["lua", "luajit"],
        valued: "l",
        code: "e",
        ..NONE
    },
    Grammar {
        names: &["Rscript"],
        code: "e",
        ..NONE
    },
    Grammar {
        names: &["pwsh"],
        code_words: &["-c", "-Command", "-command", "-CommandWithArgs"],
        program_words: &["-f", "-File", "-file"],
        ends: true,
        ..NONE
    },
    Grammar {
        names: &["tclsh"],
        ..NONE
    },
];

fn grammar(name: &str) -> Option<&'static Grammar> {
    if let Some(g) = GRAMMARS.iter().find(|g| g.names.contains(&name)) {
        return Some(g);
    }
    // python3.12 and the like.
    let rest = name.strip_prefix("python")?;
    let versioned = rest.chars().all(|c| c.is_ascii_digit() || c == '.');
    versioned.then(|| &GRAMMARS[1])
}

/// Whether `name` is an interpreter the grammar knows (not a shell).
pub(super) fn is_interpreter_name(name: &str) -> bool {
    grammar(name).is_some_and(|g| !g.shell)
}

/// A shell's or an interpreter's arguments, read.
#[derive(Debug, Default)]
pub(super) struct Reading {
    /// Code given by options (`python -c CODE`, each `perl -e CODE`).
    pub(super) code: Vec<Arg>,
    /// A code or program option whose value is missing (xargs adds it from its input).
    pub(super) missing: bool,
    /// A shell's `-c`: the first operand is the code.
    pub(super) inline: bool,
    /// A shell's `-s`: the program is the input, the operands its arguments.
    pub(super) stdin: bool,
    /// The program an option names (`python -m MODULE`, `php -f FILE`).
    pub(super) program: Option<Arg>,
    /// Where the operands start: the script (or `sh -c`'s code), then its arguments.
    pub(super) operands: usize,
    /// Every short option given, with its value (`ruby -C DIR`, `perl -i`).
    pub(super) given: Vec<(char, Option<Arg>)>,
}

impl Reading {
    /// Whether the program comes from the input: no code, no program option, and no script
    /// but the input (`-`, `/dev/stdin` however spelled, a word the classifier cannot read),
    /// or `-s`; or a code option without its code, or `sh -c '{}'` (or `{}` among its
    /// arguments), which xargs fills in.
    pub(super) fn reads_input(&self, args: &[Arg]) -> bool {
        let operand = args.get(self.operands);
        if self.missing {
            return true;
        }
        if self.inline {
            // xargs puts what it reads where `{}` stands, in the code or its arguments.
            let rest = args.get(self.operands..).unwrap_or(&[]);
            return operand.is_none() || rest.iter().any(|a| a.raw.contains("{}"));
        }
        if !self.code.is_empty() {
            return false;
        }
        if let Some(p) = &self.program {
            return p.text().is_none_or(|t| t == "-" || is_input_path(t));
        }
        self.stdin || operand.is_none_or(|s| s.text().is_none_or(|t| t == "-" || is_input_path(t)))
    }

    pub(super) fn has(&self, c: char) -> bool {
        self.given.iter().any(|(g, _)| *g == c)
    }

    pub(super) fn values(&self, c: char) -> impl Iterator<Item = &Arg> {
        self.given
            .iter()
            .filter(move |(g, _)| *g == c)
            .filter_map(|(_, v)| v.as_ref())
    }
}

/// Reads the arguments of the shell or interpreter `name`; `None` for another program.
pub(super) fn read(name: &str, args: &[Arg]) -> Option<Reading> {
    let g = grammar(name)?;
    let mut r = Reading::default();
    let mut i = 0;
    // The value of an option at `i`: the rest of its word, else the next word.
    let value = |i: &mut usize, a: &Arg, rest: &str| -> Option<Arg> {
        if !rest.is_empty() {
            return Some(a.with_text(rest));
        }
        *i += 1;
        args.get(*i - 1).cloned()
    };
    while let Some(a) = args.get(i) {
        let Some(t) = a.text() else { break };
        let option = t.starts_with('-') || (g.shell && t.starts_with('+'));
        if !option || t == "+" {
            break;
        }
        i += 1;
        if t == "-" && !g.shell {
            // The program is the input: `-` is its operand.
            i -= 1;
            break;
        }
        if t == "--" || t == "-" {
            break;
        }
        let (word, attached) = match t.split_once('=') {
            Some((w, v)) if t.starts_with("--") => (w, Some(v)),
            _ => (t, None),
        };
        if g.code_words.contains(&word) {
            match attached {
                Some(v) => r.code.push(a.with_text(v)),
                None => match value(&mut i, a, "") {
                    Some(code) => r.code.push(code),
                    None => r.missing = true,
                },
            }
            if g.ends {
                break;
            }
            continue;
        }
        if g.program_words.contains(&word) {
            r.program = value(&mut i, a, "");
            r.missing |= r.program.is_none();
            if g.ends {
                break;
            }
            continue;
        }
        if let Some(long) = word.strip_prefix("--") {
            if attached.is_none() && g.long_valued.contains(&long) {
                i += 1;
            }
            continue;
        }
        let plus = t.starts_with('+');
        let letters: Vec<char> = t.chars().skip(1).collect();
        let mut stop = false;
        for (k, &c) in letters.iter().enumerate() {
            let rest: String = letters[k + 1..].iter().collect();
            if g.shell {
                match c {
                    'c' if !plus => r.inline = true,
                    's' if !plus => r.stdin = true,
                    // `-eo pipefail`: each takes the next word.
                    _ if g.valued.contains(c) => {
                        r.given.push((c, args.get(i).cloned()));
                        i += 1;
                        continue;
                    }
                    _ => {}
                }
                r.given.push((c, None));
                continue;
            }
            if g.code.contains(c) {
                match value(&mut i, a, &rest) {
                    Some(code) => r.code.push(code),
                    None => r.missing = true,
                }
                r.given.push((c, None));
                stop = g.ends;
                break;
            }
            if g.program.contains(c) {
                r.program = value(&mut i, a, &rest);
                r.missing |= r.program.is_none();
                r.given.push((c, r.program.clone()));
                stop = g.ends;
                break;
            }
            if g.valued.contains(c) {
                let v = value(&mut i, a, &rest);
                r.given.push((c, v));
                break;
            }
            if g.attached.contains(c) {
                r.given
                    .push((c, (!rest.is_empty()).then(|| a.with_text(&rest))));
                break;
            }
            r.given.push((c, None));
        }
        if stop {
            break;
        }
    }
    r.operands = i.min(args.len());
    Some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Vec<Arg> {
        words.iter().map(|w| Arg::literal(w)).collect()
    }

    /// (program, arguments, reads its program from the input)
    #[test]
    fn where_the_program_comes_from() {
        let cases: &[(&str, &[&str], bool)] = &[
            ("sh", &[], true),
            ("sh", &["-s"], true),
            ("sh", &["-s", "a", "b"], true),
            ("sh", &["-o", "errexit"], true),
            ("bash", &["-euo", "pipefail"], true),
            ("bash", &["-o", "errexit", "-o", "nounset"], true),
            ("bash", &["+o", "posix"], true),
            ("bash", &["-O", "extglob"], true),
            ("bash", &["--rcfile", "F"], true),
            ("bash", &["--init-file", "F", "-x"], true),
            ("bash", &["--norc", "--noprofile"], true),
            ("sh", &["-"], true),
            ("sh", &["--"], true),
            ("sh", &["-", "script"], false),
            ("sh", &["script"], false),
            ("sh", &["-e", "script", "arg"], false),
            ("sh", &["-o", "errexit", "script"], false),
            ("sh", &["/dev/stdin"], true),
            ("sh", &["//dev/stdin"], true),
            ("sh", &["/dev/./stdin"], true),
            ("sh", &["/proc/self/fd/0"], true),
            ("sh", &["/proc/1/fd/0"], true),
            ("sh", &["/dev/fd/3"], true),
            ("sh", &["-c", "ls"], false),
            ("sh", &["-c"], true),
            ("sh", &["-ec", "{}"], true),
            ("python3", &[], true),
            ("python3", &["-"], true),
            ("python3", &["-W", "ignore"], true),
            ("python3", &["-X", "dev", "-u"], true),
            ("python3", &["-Wignore", "x.py"], false),
            ("python3", &["-c", "print(1)"], false),
            ("python3", &["-Ic", "print(1)"], false),
            ("python3", &["-m", "http.server"], false),
            ("python3", &["-W", "ignore", "/dev/stdin"], true),
            ("python3.12", &["-E"], true),
            ("perl", &[], true),
            ("perl", &["-w"], true),
            ("perl", &["-I", "lib"], true),
            ("perl", &["-Ilib", "-Mstrict"], true),
            ("perl", &["-e", "1"], false),
            ("perl", &["-pie", "s/a/b/", "f"], false),
            ("perl", &["x.pl"], false),
            ("ruby", &["-r", "json"], true),
            ("ruby", &["-e", "1"], false),
            ("node", &["--require", "x"], true),
            ("node", &["--eval=1"], false),
            ("node", &["-p", "1"], false),
            ("php", &[], true),
            ("php", &["-d", "x=1"], true),
            ("php", &["-r", "1;"], false),
            ("php", &["-f", "x.php"], false),
            ("php", &["-f", "/dev/stdin"], true),
            ("lua", &["-l", "m"], true),
            ("lua", &["-e", "1"], false),
        ];
        for &(p, a, want) in cases {
            let a = args(a);
            let r = read(p, &a).expect("a grammar");
            assert_eq!(r.reads_input(&a), want, "{p} {a:?}: {r:?}");
        }
        assert!(read("cat", &[]).is_none());
    }

    #[test]
    fn code_and_operands() {
        let a = args(&["-euo", "pipefail", "-c", "ls", "x"]);
        let r = read("bash", &a).expect("bash");
        assert!(r.inline);
        assert_eq!(a[r.operands].raw, "ls");
        let a = args(&["-W", "ignore", "-c", "print(1)", "arg"]);
        let r = read("python3", &a).expect("python3");
        assert_eq!(r.code.len(), 1);
        assert_eq!(r.code[0].raw, "print(1)");
        assert_eq!(a[r.operands].raw, "arg");
        let a = args(&["-i.bak", "-pe", "s/a/b/", "f"]);
        let r = read("perl", &a).expect("perl");
        assert!(r.has('i'));
        assert_eq!(r.code[0].text(), Some("s/a/b/"));
        assert_eq!(a[r.operands].raw, "f");
        let a = args(&["-C", "dir", "-i", "-pe", "1", "f"]);
        let r = read("ruby", &a).expect("ruby");
        assert_eq!(r.values('C').next().and_then(|d| d.text()), Some("dir"));
    }
}
