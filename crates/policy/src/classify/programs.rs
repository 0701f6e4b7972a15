//! Program tables: readers, shells, interpreters, downloaders, system stoppers.

use super::Arg;

/// Names written as one string, separated by white space, as the spec table writes options.
#[derive(Debug, Clone, Copy)]
pub(super) struct Names(pub(super) &'static str);

impl Names {
    pub(super) fn iter(self) -> std::str::SplitWhitespace<'static> {
        self.0.split_whitespace()
    }

    /// Whether `name` is one of them.
    pub(super) fn contains(self, name: &&str) -> bool {
        self.iter().any(|n| n == *name)
    }
}

/// Programs that only read whatever their arguments (no option writes a file or runs a program).
/// Then process, binary and system information, readers of archives and compressed files, and
/// formatters of text.
pub(super) const PLAIN_READERS: Names = Names(
    "cat head tail grep egrep fgrep wc stat du cut diff cmp pwd echo printf true false test [ \
     basename dirname realpath readlink tr nl tac rev od hexdump md5sum sha1sum sha224sum \
     sha256sum sha384sum sha512sum b2sum cksum ls comm paste fold column seq sleep whoami id \
     uname printenv expand unexpand strings fmt join which type : exit expr nproc df base64 jq \
     yes tsort numfmt \
     ps pgrep pidof uptime free vmstat lscpu groups locale getconf tty arch logname users who nm \
     readelf objdump size bc \
     zipinfo zgrep zegrep zfgrep xzgrep bzgrep zstdgrep zdiff zcmp pr cal look",
);

pub(super) const SHELLS: &[&str] = &[
    "sh", "bash", "zsh", "dash", "ksh", "ash", "mksh", "fish", "csh", "tcsh", "hush", "yash",
    "posh", "rbash",
];

/// awk and its kin: interpreters read by `awk` (the others' grammars are in `invocation`).
const AWKS: &[&str] = &["awk", "gawk", "mawk", "nawk"];

pub(super) const DOWNLOADERS: &[&str] = &["curl", "wget", "fetch", "aria2c", "nc", "ncat", "socat"];

pub(super) const SYSTEM_STOPPERS: &[&str] = &["shutdown", "reboot", "halt", "poweroff", "killall5"];

pub(super) const DISK_WRECKERS: Names =
    Names("mke2fs mkswap wipefs fdisk sfdisk parted blkdiscard");

/// Variables that change which program runs or what a shell runs on its own.
pub(super) const SENSITIVE_VARS: Names = Names(
    "PATH IFS ENV BASH_ENV CDPATH GLOBIGNORE SHELLOPTS BASHOPTS PS4 PROMPT_COMMAND PAGER MANPAGER \
     EDITOR VISUAL LESSOPEN LESSCLOSE HOME",
);
pub(super) const SENSITIVE_PREFIXES: Names =
    Names("LD_ DYLD_ GIT_ PYTHON PERL5 NODE_ RUBY BASH_FUNC_");

/// Write targets that are not files.
pub(super) const HARMLESS_SINKS: &[&str] = &["/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"];

/// Calls by which an interpreter deletes a tree: with a string naming a grant directory (or
/// `.`, `~`), inline code is dangerous.
pub(super) const TREE_DESTROYERS: &[&str] = &[
    "rmtree",
    "rm_rf",
    "rm_r",
    "remove_dir_all",
    "rmSync",
    "rmdirSync",
    "rimraf",
    "deltree",
    "remove_tree",
    "File::Path",
    "FileUtils.rm",
    "Remove-Item",
    "rm -r",
];

/// Calls by which an interpreter deletes, moves or empties one file: with a string naming a
/// grant directory by its path, inline code is dangerous.
pub(super) const FILE_DESTROYERS: &[&str] = &[
    "unlink", "remove", "rename", "move", "truncate", "rmdir", "chmod", "chown",
];

/// Programs `Walk::program` reads by name (beyond the spec table, shells and interpreters).
pub(super) const READ_BY_NAME: Names = Names(
    "busybox toybox eval source . alias trap cd pushd set find xxd git dd kill systemctl \
     init telinit",
);

/// Whether the classifier knows what `name` does beyond reading: a word naming it in an
/// unknown program's arguments may be the command it runs.
pub(super) fn is_known_program(name: &str) -> bool {
    super::specs::spec_of(name).is_some()
        || super::editors::is_editor(name)
        || READ_BY_NAME.contains(&name)
        || SHELLS.contains(&name)
        || is_interpreter(name)
        || SYSTEM_STOPPERS.contains(&name)
        || DISK_WRECKERS.contains(&name)
        || name.starts_with("mkfs")
}

pub(super) fn is_interpreter(name: &str) -> bool {
    AWKS.contains(&name) || super::invocation::is_interpreter_name(name)
}

pub(super) fn is_sensitive_var(name: &str) -> bool {
    SENSITIVE_VARS.contains(&name) || SENSITIVE_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// The start of every reason for syntax the sandbox's shell may read differently.
pub(super) const ASH_DIFFERS: &str =
    "bash syntax that busybox ash, the sandbox's shell, may read differently";

/// How a program that runs what it reads reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reader {
    /// Shell code (a shell, `source /dev/stdin`, at, batch, crontab, parallel, make -f -).
    Shell,
    /// An interpreter's program.
    Interpreter,
    /// An editor's or calculator's commands, where `!CMD` runs a shell command (ed, ex, dc).
    Bang,
    /// An awk program (`awk -f -`).
    Awk,
    /// A sed script (`sed -f -`).
    Sed,
}

/// Programs whose input is shell code to run later or line by line.
const SHELL_READERS: &[&str] = &["at", "batch", "crontab", "parallel"];
/// Programs whose input is commands where `!CMD` runs a shell command.
const BANG_READERS: &[&str] = &["ed", "red", "ex", "dc"];
/// How `p` reads code by name, whatever its arguments.
pub(super) fn reader_kind(p: &str) -> Option<Reader> {
    match p {
        _ if SHELLS.contains(&p) || SHELL_READERS.contains(&p) => Some(Reader::Shell),
        "source" | "." | "make" | "gmake" => Some(Reader::Shell),
        _ if BANG_READERS.contains(&p) => Some(Reader::Bang),
        _ if p.ends_with("awk") => Some(Reader::Awk),
        "sed" => Some(Reader::Sed),
        _ if is_interpreter(p) => Some(Reader::Interpreter),
        _ => None,
    }
}

/// `-` or a path that may be the standard input (`paths::is_input_path`).
pub(super) fn names_input(t: &str) -> bool {
    t == "-" || super::paths::is_input_path(t)
}

/// Whether `p` runs code it reads from its standard input, given its arguments.
pub(super) fn reads_code(p: &str, args: &[Arg]) -> bool {
    let texts: Vec<&str> = args.iter().filter_map(|a| a.text()).collect();
    // `-f -`, `-f-`, `--file=/dev/stdin`, gawk's `-E -` and `-i -`: a program file that is
    // the input, as the program's own option grammar reads its arguments.
    let program_file_is_input = || {
        super::specs::spec_of(p).is_some_and(|spec| {
            let parsed = super::opts::parse(p, spec, args);
            ["file", "exec", "include"]
                .iter()
                .flat_map(|name| parsed.values(name))
                .filter_map(|a| a.text())
                .any(names_input)
        })
    };
    match reader_kind(p) {
        None => false,
        Some(Reader::Awk | Reader::Sed) => program_file_is_input(),
        Some(_) if matches!(p, "make" | "gmake") => program_file_is_input(),
        Some(_) if matches!(p, "source" | ".") => {
            // `. /dev/stdin` runs what it reads.
            texts
                .first()
                .is_some_and(|t| super::paths::is_input_path(t))
        }
        // A program file, or crontab's file, instead of the input.
        Some(Reader::Shell) if SHELL_READERS.contains(&p) => match p {
            "crontab" => {
                texts.iter().all(|t| t.starts_with('-') && *t != "-l") || texts.contains(&"-")
            }
            "parallel" => texts.iter().all(|t| t.starts_with('-')),
            _ => !texts.contains(&"-f"),
        },
        Some(Reader::Bang) => true,
        // A shell or interpreter, as its option grammar reads its arguments.
        Some(_) => super::invocation::read(p, args).is_none_or(|r| r.reads_input(args)),
    }
}
