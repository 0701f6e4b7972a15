//! Paths: lexical normalisation and program names.

use super::*;
/// Lexical normalisation: `.` dropped, `..` pops (an escape above a relative start is kept as
/// a leading `..`).
pub(super) fn normalise(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                let popped =
                    matches!(out.components().next_back(), Some(Component::Normal(_))) && out.pop();
                if !popped && !out.has_root() {
                    out.push("..");
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// The ways of naming a descriptor of the command as a file, by component: `*` is any one
/// component, `N` a descriptor number.
const INPUT_PATHS: &[&[&str]] = &[
    &["dev", "stdin"],
    &["dev", "fd", "N"],
    &["proc", "*", "fd", "N"],
    &["proc", "*", "task", "*", "fd", "N"],
];

/// Whether `path` may name the command's standard input: `/dev/stdin`, `/dev/fd/N` or
/// `/proc/PID/fd/N` (any N, since a redirection such as `3<&0` can make it the input; any
/// PID, `self` and `$$` included), however spelled (`//dev/stdin`, `/dev/./stdin`,
/// `/dev/../dev/stdin`). A relative path may be one from a working directory the classifier
/// does not know when it is the end of one (`stdin`, `fd/0`, `0`).
pub(super) fn is_input_path(path: &str) -> bool {
    let p = normalise(Path::new(path));
    let names: Vec<String> = p
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect();
    let fits = |pattern: &[&str], names: &[String]| {
        pattern.len() == names.len()
            && pattern.iter().zip(names).all(|(want, name)| match *want {
                "*" => true,
                "N" => !name.is_empty() && name.chars().all(|c| c.is_ascii_digit()),
                w => w == name,
            })
    };
    if p.has_root() {
        return INPUT_PATHS.iter().any(|pattern| fits(pattern, &names));
    }
    !names.is_empty()
        && INPUT_PATHS.iter().any(|pattern| {
            pattern.len() >= names.len() && fits(&pattern[pattern.len() - names.len()..], &names)
        })
}

/// Directories whose programs are the system's: run from one, a program is what its name says.
const SYSTEM_DIRS: Names = Names("/bin /usr/bin /usr/local/bin /sbin /usr/sbin /usr/local/sbin");

/// Name prefixes that stand for one program (`ld-linux-x86-64.so.2` is the dynamic loader,
/// `busybox.static` is busybox).
const NAME_FAMILIES: &[(&str, &str)] = &[
    ("ld-linux", "ld.so"),
    ("ld-musl-", "ld.so"),
    ("ld64.so", "ld.so"),
    ("busybox", "busybox"),
    ("toybox", "toybox"),
];

/// A program word as the classifier reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ProgramName {
    /// The last component of the path, its family's name where it has one.
    pub(super) name: String,
    /// Run by a bare name or from a system directory: the program is what its name says.
    /// Otherwise it is read as that program, and may be any.
    pub(super) system: bool,
}

/// `/usr/bin/rm`, `/bin//rm`, `/bin/../bin/rm` and (after `cd /bin`) `./rm` are `rm`; any
/// other path is read by its last component, as a program that may be something else.
pub(super) fn program_name(word: &str, cwd: Option<&str>) -> ProgramName {
    let family = |base: &str| -> String {
        NAME_FAMILIES
            .iter()
            .find(|(prefix, _)| base.starts_with(prefix))
            .map(|(_, name)| (*name).to_string())
            .unwrap_or_else(|| base.to_string())
    };
    if !word.contains('/') {
        return ProgramName {
            name: family(word),
            system: true,
        };
    }
    let joined = match cwd {
        Some(dir) if !word.starts_with('/') => Path::new(dir).join(word),
        _ => PathBuf::from(word),
    };
    let path = normalise(&joined);
    let base = match path.file_name() {
        Some(b) if !word.ends_with('/') => b.to_string_lossy().into_owned(),
        _ => {
            return ProgramName {
                name: word.to_string(),
                system: false,
            }
        }
    };
    let system = path
        .parent()
        .is_some_and(|dir| SYSTEM_DIRS.iter().any(|d| dir == Path::new(d)));
    ProgramName {
        name: family(&base),
        system,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_paths() {
        let input = [
            "/dev/stdin",
            "//dev/stdin",
            "/dev/./stdin",
            "/dev//stdin",
            "/dev/../dev/stdin",
            "/tmp/../dev/stdin",
            "/dev/fd/0",
            "/dev/fd/3",
            "/proc/self/fd/0",
            "/proc/thread-self/fd/0",
            "/proc/0/fd/0",
            "/proc/self/task/1/fd/0",
            "/proc/self/fd/../fd/0",
            "stdin",
            "fd/0",
            "./fd/0",
            "0",
            "../stdin",
            "self/fd/0",
        ];
        for p in input {
            assert!(is_input_path(p), "{p}");
        }
        let not = [
            "/dev/stdout",
            "/dev/null",
            "/srv/notes/stdin.sh",
            "/dev/fd",
            "/proc/self/fdinfo/0",
            "/proc/self/fd/x",
            "script.sh",
            "a/stdin/b",
            "/stdin",
            "",
        ];
        for p in not {
            assert!(!is_input_path(p), "{p}");
        }
    }

    #[test]
    fn program_words() {
        // (word, working directory, name, system)
        let cases: &[(&str, Option<&str>, &str, bool)] = &[
            ("rm", None, "rm", true),
            ("/bin/rm", None, "rm", true),
            ("/bin//rm", None, "rm", true),
            ("//usr/bin/rm", None, "rm", true),
            ("/bin/../bin/rm", None, "rm", true),
            ("/usr/./bin/rm", None, "rm", true),
            ("/usr/local/sbin/rm", None, "rm", true),
            ("./rm", Some("/bin"), "rm", true),
            ("../bin/rm", Some("/usr/lib"), "rm", true),
            ("./rm", None, "rm", false),
            ("/tmp/rm", None, "rm", false),
            ("/proc/self/root/bin/rm", None, "rm", false),
            ("/bin/sub/rm", None, "rm", false),
            ("/lib64/ld-linux-x86-64.so.2", None, "ld.so", false),
            ("busybox.static", None, "busybox", true),
            ("/bin/", None, "/bin/", false),
        ];
        for &(word, cwd, name, system) in cases {
            let got = program_name(word, cwd);
            assert_eq!(
                got,
                ProgramName {
                    name: name.to_string(),
                    system
                },
                "{word} in {cwd:?}"
            );
        }
    }
}
