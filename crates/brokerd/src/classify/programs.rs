//! Program tables: readers, shells, interpreters, downloaders, system stoppers.

use super::Arg;

/// Programs that only read whatever their arguments (no option writes a file or runs a program).
pub(super) const PLAIN_READERS: &[&str] = &[
    "cat",
    "head",
    "tail",
    "grep",
    "egrep",
    "fgrep",
    "wc",
    "stat",
    "du",
    "cut",
    "diff",
    "cmp",
    "pwd",
    "echo",
    "printf",
    "true",
    "false",
    "test",
    "[",
    "basename",
    "dirname",
    "realpath",
    "readlink",
    "tr",
    "nl",
    "tac",
    "rev",
    "od",
    "hexdump",
    "md5sum",
    "sha1sum",
    "sha224sum",
    "sha256sum",
    "sha384sum",
    "sha512sum",
    "b2sum",
    "cksum",
    "ls",
    "comm",
    "paste",
    "fold",
    "column",
    "seq",
    "sleep",
    "whoami",
    "id",
    "uname",
    "printenv",
    "expand",
    "unexpand",
    "strings",
    "fmt",
    "join",
    "which",
    "type",
    ":",
    "exit",
    "expr",
    "nproc",
    "df",
    "base64",
    "jq",
    "yes",
    "tsort",
    "numfmt",
];

pub(super) const SHELLS: &[&str] = &[
    "sh", "bash", "zsh", "dash", "ksh", "ash", "mksh", "fish", "csh", "tcsh", "hush", "yash",
    "posh", "rbash",
];

/// Interpreters and the options that take inline code.
pub(super) const INTERPRETERS: &[(&str, &[&str])] = &[
    ("python", &["-c"]),
    ("python2", &["-c"]),
    ("python3", &["-c"]),
    ("perl", &["-e", "-E"]),
    ("ruby", &["-e"]),
    ("node", &["-e", "--eval", "-p", "--print"]),
    ("nodejs", &["-e", "--eval", "-p", "--print"]),
    ("deno", &["eval"]),
    ("bun", &["-e", "--eval"]),
    ("php", &["-r"]),
    ("lua", &["-e"]),
    ("luajit", &["-e"]),
    ("tclsh", &[]),
    ("Rscript", &["-e"]),
    ("pwsh", &["-c", "-Command"]),
    ("awk", &[]),
    ("gawk", &[]),
    ("mawk", &[]),
    ("nawk", &[]),
];

pub(super) const DOWNLOADERS: &[&str] = &["curl", "wget", "fetch", "aria2c", "nc", "ncat", "socat"];

pub(super) const SYSTEM_STOPPERS: &[&str] = &["shutdown", "reboot", "halt", "poweroff", "killall5"];

pub(super) const DISK_WRECKERS: &[&str] = &[
    "mke2fs",
    "mkswap",
    "wipefs",
    "fdisk",
    "sfdisk",
    "parted",
    "blkdiscard",
];

/// Variables that change which program runs or what a shell runs on its own.
pub(super) const SENSITIVE_VARS: &[&str] = &[
    "PATH",
    "IFS",
    "ENV",
    "BASH_ENV",
    "CDPATH",
    "GLOBIGNORE",
    "SHELLOPTS",
    "BASHOPTS",
    "PS4",
    "PROMPT_COMMAND",
    "PAGER",
    "MANPAGER",
    "EDITOR",
    "VISUAL",
    "LESSOPEN",
    "LESSCLOSE",
    "HOME",
];
pub(super) const SENSITIVE_PREFIXES: &[&str] = &[
    "LD_",
    "DYLD_",
    "GIT_",
    "PYTHON",
    "PERL5",
    "NODE_",
    "RUBY",
    "BASH_FUNC_",
];

/// Write targets that are not files.
pub(super) const HARMLESS_SINKS: &[&str] = &["/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"];

/// Programs `Walk::program` reads by name (beyond the spec table, shells and interpreters).
pub(super) const READ_BY_NAME: &[&str] = &[
    "busybox",
    "toybox",
    "eval",
    "source",
    ".",
    "alias",
    "trap",
    "cd",
    "pushd",
    "set",
    "find",
    "xxd",
    "unzip",
    "git",
    "dd",
    "kill",
    "systemctl",
    "init",
    "telinit",
];

/// Whether the classifier knows what `name` does beyond reading: a word naming it in an
/// unknown program's arguments may be the command it runs.
pub(super) fn is_known_program(name: &str) -> bool {
    super::specs::spec_of(name).is_some()
        || READ_BY_NAME.contains(&name)
        || SHELLS.contains(&name)
        || is_interpreter(name)
        || SYSTEM_STOPPERS.contains(&name)
        || DISK_WRECKERS.contains(&name)
        || name.starts_with("mkfs")
}

pub(super) fn is_interpreter(name: &str) -> bool {
    interpreter_code_opts(name).is_some()
}

pub(super) fn interpreter_code_opts(name: &str) -> Option<&'static [&'static str]> {
    if let Some((_, opts)) = INTERPRETERS.iter().find(|(n, _)| *n == name) {
        return Some(opts);
    }
    // python3.12 and the like.
    if let Some(rest) = name.strip_prefix("python") {
        if rest.chars().all(|c| c.is_ascii_digit() || c == '.') {
            return Some(&["-c"]);
        }
    }
    None
}

pub(super) fn is_sensitive_var(name: &str) -> bool {
    SENSITIVE_VARS.contains(&name) || SENSITIVE_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Programs whose output is text the classifier cannot read from the command: decoders and
/// transformers. Piped into a shell, they hide what runs.
pub(super) const DECODERS: &[&str] = &[
    "base64", "base32", "basenc", "xxd", "uudecode", "openssl", "gpg", "gzip", "gunzip", "zcat",
    "bzip2", "bunzip2", "bzcat", "xz", "unxz", "xzcat", "lzcat", "zstd", "unzstd", "zstdcat",
    "rev", "tr", "sed", "awk", "cut", "iconv", "od", "dd",
];

/// The start of every reason for syntax the sandbox's shell may read differently.
pub(super) const ASH_DIFFERS: &str =
    "bash syntax that busybox ash, the sandbox's shell, may read differently";

/// Whether `p` runs code it reads from its standard input, given its arguments.
pub(super) fn reads_code(p: &str, args: &[Arg]) -> bool {
    if p == "source" || p == "." {
        // `. /dev/stdin` runs what it reads.
        return args
            .first()
            .and_then(|a| a.text())
            .is_some_and(|t| matches!(t, "/dev/stdin" | "/dev/fd/0" | "/proc/self/fd/0"));
    }
    let shell = SHELLS.contains(&p);
    if !shell && (!is_interpreter(p) || p.ends_with("awk")) {
        return false;
    }
    for a in args {
        match a.text() {
            Some("-" | "--") => return true,
            Some(t) if t.starts_with('-') || t.starts_with('+') => {
                // `sh -c` with no code after it gets its code from elsewhere (xargs' input).
                if shell && !t.starts_with("--") && t.contains('c') {
                    return args.last().is_some_and(|last| std::ptr::eq(last, a));
                }
                if let Some((_, code_opts)) = INTERPRETERS.iter().find(|(n, _)| *n == p) {
                    if code_opts.contains(&t) {
                        return false;
                    }
                }
            }
            // A script file: its input is data to it.
            _ => return false,
        }
    }
    true
}
