//! The environment of every program a tool starts (docs/design.md#the-toolkit), the same on
//! both backends whatever the sandbox gave toolkit: a home, a temporary directory and the
//! caches in the sandbox's `/tmp` (a grant's own cache where it has one), UTF-8, the toolset's program directories, and a git that works on
//! a grant directory another user owns, without the host's git configuration.
//!
//! In the base toolset `PATH` is `/bin` alone: nixpkgs' busybox runs an applet only through its
//! link, so a shell finds `ls` or `sed` only where the image made one (`images/programs.txt`,
//! checked by `images/check-programs.sh`).

use std::path::Path;
use std::process::Command;

use proto::tools::{TOOL_CACHE, TOOL_HOME};

/// The program directories a toolset may carry, in the order they are searched; `PATH` holds
/// those the sandbox's root has (the base toolset: `/bin` alone).
pub const PATH_DIRS: [&str; 6] = [
    "/usr/local/bin",
    "/usr/bin",
    "/bin",
    "/usr/local/sbin",
    "/usr/sbin",
    "/sbin",
];

/// The git configuration toolkit writes in the home, as git's global one: any directory is
/// safe. A grant directory belongs to its owner, not to the sandbox's user, and git refuses
/// such a repository ("dubious ownership") unless told so; nothing else of the host's or a
/// user's git configuration reaches the sandbox.
pub const GIT_CONFIG: &str = "[safe]\n\tdirectory = *\n";

/// The file name of [`GIT_CONFIG`] in the home.
pub const GIT_CONFIG_FILE: &str = ".gitconfig";

/// The variables, for a sandbox whose `/` is `root` and whose home is `home`.
pub fn variables(root: &Path, home: &str) -> Vec<(&'static str, String)> {
    let path: Vec<&str> = PATH_DIRS
        .into_iter()
        .filter(|d| root.join(&d[1..]).is_dir())
        .collect();
    let mut vars = vec![
        ("HOME", home.to_owned()),
        ("TMPDIR", home.to_owned()),
        ("XDG_CACHE_HOME", TOOL_CACHE.to_owned()),
        ("LANG", "C.UTF-8".to_owned()),
        (
            "PATH",
            if path.is_empty() {
                "/bin".to_owned()
            } else {
                path.join(":")
            },
        ),
        ("GIT_CONFIG_GLOBAL", format!("{home}/{GIT_CONFIG_FILE}")),
        ("GIT_CONFIG_NOSYSTEM", "1".to_owned()),
    ];
    vars.extend(
        TOOL_CACHES
            .into_iter()
            .map(|(k, dir)| (k, format!("{TOOL_CACHE}/{dir}"))),
    );
    vars
}

/// The common tools' caches, each a directory under `XDG_CACHE_HOME` ([`TOOL_CACHE`]), where
/// a grant's own cache is mounted when it has one (docs/design.md#grant-caches).
pub const TOOL_CACHES: [(&str, &str); 6] = [
    ("CARGO_HOME", "cargo"),
    ("GOCACHE", "go-build"),
    ("GOMODCACHE", "go-mod"),
    ("npm_config_cache", "npm"),
    ("PIP_CACHE_DIR", "pip"),
    ("CCACHE_DIR", "ccache"),
];

/// `cmd` with [`variables`] of this sandbox, after writing [`GIT_CONFIG`] to its home. A home
/// that cannot be written only leaves git without it.
pub fn apply(cmd: &mut Command) -> &mut Command {
    let _ = std::fs::write(Path::new(TOOL_HOME).join(GIT_CONFIG_FILE), GIT_CONFIG);
    cmd.envs(variables(Path::new("/"), TOOL_HOME))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_holds_the_toolset_s_program_directories() {
        let root = tempfile::tempdir().unwrap();
        let get = |root: &Path| {
            variables(root, "/tmp")
                .into_iter()
                .find(|(k, _)| *k == "PATH")
                .map(|(_, v)| v)
                .unwrap()
        };
        // No program directory at all: /bin, where toolkit's own busybox is.
        assert_eq!(get(root.path()), "/bin");
        std::fs::create_dir_all(root.path().join("bin")).unwrap();
        assert_eq!(get(root.path()), "/bin");
        std::fs::create_dir_all(root.path().join("usr/bin")).unwrap();
        std::fs::create_dir_all(root.path().join("usr/sbin")).unwrap();
        assert_eq!(get(root.path()), "/usr/bin:/bin:/usr/sbin");
    }

    #[test]
    fn everything_lives_in_the_home() {
        let vars = variables(Path::new("/nonexistent"), "/tmp");
        let want = [
            ("HOME", "/tmp"),
            ("TMPDIR", "/tmp"),
            ("XDG_CACHE_HOME", "/tmp/.cache"),
            ("LANG", "C.UTF-8"),
            ("PATH", "/bin"),
            ("GIT_CONFIG_GLOBAL", "/tmp/.gitconfig"),
            ("GIT_CONFIG_NOSYSTEM", "1"),
            ("CARGO_HOME", "/tmp/.cache/cargo"),
            ("GOCACHE", "/tmp/.cache/go-build"),
            ("GOMODCACHE", "/tmp/.cache/go-mod"),
            ("npm_config_cache", "/tmp/.cache/npm"),
            ("PIP_CACHE_DIR", "/tmp/.cache/pip"),
            ("CCACHE_DIR", "/tmp/.cache/ccache"),
        ];
        let got: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
        assert_eq!(got, want);
    }
}
