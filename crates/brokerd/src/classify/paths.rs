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

/// `/usr/bin/rm` is `rm`; a program run by another path is not one the classifier knows.
pub(super) fn program_name(prog: &str) -> Option<&str> {
    if !prog.contains('/') {
        return Some(prog);
    }
    for dir in [
        "/bin/",
        "/usr/bin/",
        "/usr/local/bin/",
        "/sbin/",
        "/usr/sbin/",
    ] {
        if let Some(base) = prog.strip_prefix(dir) {
            if !base.is_empty() && !base.contains('/') {
                return Some(base);
            }
        }
    }
    None
}
