use super::super::changes::changes;
use super::super::{Layer, Meta, Stage};
use super::*;
use proto::ident::Ident;
use std::collections::BTreeMap;
use std::os::unix::fs::symlink;
use std::process::Command;

/// A layer made by a real overlayfs mount (in a user and mount namespace of the test's own)
/// while `script` ran in it; `None` where this kernel gives no such mount.
fn staged(script: &str, lower: impl Fn(&Path)) -> Option<(tempfile::TempDir, Stage, Layer)> {
    let tmp = tempfile::tempdir().expect("tempdir");
    let base = fs::canonicalize(tmp.path()).expect("canonical");
    let real = base.join("real");
    fs::create_dir_all(&real).expect("mkdir");
    lower(&real);
    let stage = Stage::new(&base.join("home"), 1 << 30, 0);
    let session = Ident::fixed("s1");
    let layer = stage.prepare(&session, "g", &real).expect("prepare");
    let sh = format!(
        "mount -t overlay overlay -o lowerdir={},upperdir={},workdir={},userxattr {} || exit 77; cd {} && {script}",
        real.display(),
        layer.upper.display(),
        layer.work.display(),
        layer.merged.display(),
        layer.merged.display()
    );
    match Command::new("unshare")
        .args(["-Urm", "sh", "-c", &sh])
        .output()
    {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            assert!(
                std::env::var_os("CI").is_none() || o.status.code() != Some(77),
                "{o:?}"
            );
            eprintln!("SKIPPED: no overlay mount here: {o:?}");
            return None;
        }
        Err(e) => {
            eprintln!("SKIPPED: unshare cannot be run: {e}");
            return None;
        }
    }
    stage.record_first(&layer).expect("record");
    Some((tmp, stage, layer))
}

fn tree(dir: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).expect("read_dir").flatten() {
            let p = e.path();
            let rel = p.strip_prefix(dir).expect("inside").display().to_string();
            let m = fs::symlink_metadata(&p).expect("lstat");
            let mode = m.permissions().mode() & 0o7777;
            let what = if m.file_type().is_symlink() {
                format!("l {}", fs::read_link(&p).expect("link").display())
            } else if m.is_dir() {
                stack.push(p.clone());
                format!("d {mode:o}")
            } else {
                format!("f {mode:o} {}", fs::read_to_string(&p).unwrap_or_default())
            };
            out.insert(rel, what);
        }
    }
    out
}

fn lower(real: &Path) {
    for d in ["src", "old", "vendor", "opaque/keep"] {
        fs::create_dir_all(real.join(d)).expect("mkdir");
    }
    for (f, c) in [
        ("a.txt", "a\n"),
        ("b.txt", "b\n"),
        ("src/main.rs", "fn main() {}\n"),
        ("old/x", "x\n"),
        ("vendor/lib.c", "int a;\n"),
        ("opaque/o", "o\n"),
        ("mode.sh", "echo\n"),
    ] {
        fs::write(real.join(f), c).expect("write");
    }
}

const SCRIPT: &str = "echo A >> a.txt && rm b.txt && rm -rf old && echo n > new.txt && \
    mkdir -p dir/sub && echo d > dir/sub/d && ln -s /etc etc-link && echo v > vendor/lib.c && \
    rm -rf opaque && mkdir opaque && echo p > opaque/p && chmod 755 mode.sh";

fn kinds(found: &[Found]) -> Vec<(String, &'static str)> {
    found
        .iter()
        .map(|f| (f.rel.display().to_string(), f.kind.as_str()))
        .collect()
}

/// The layer's changes are what the commands did, and a commit lands exactly the merged tree
/// (but the protected target, which needs naming): the real tree afterwards is what the
/// sandbox saw.
#[test]
fn a_commit_lands_exactly_what_was_staged() {
    let Some((_tmp, _stage, layer)) = staged(SCRIPT, lower) else {
        return;
    };
    let found = changes(&layer.upper, &layer.real).expect("changes");
    assert_eq!(
        kinds(&found),
        [
            ("a.txt".to_string(), "modified"),
            ("b.txt".into(), "deleted"),
            ("dir".into(), "added"),
            ("dir/sub".into(), "added"),
            ("dir/sub/d".into(), "added"),
            ("etc-link".into(), "added"),
            ("mode.sh".into(), "mode_changed"),
            ("new.txt".into(), "added"),
            ("old".into(), "deleted"),
            ("opaque/keep".into(), "deleted"),
            ("opaque/o".into(), "deleted"),
            ("opaque/p".into(), "added"),
            ("vendor/lib.c".into(), "modified"),
        ]
    );
    let mut want = tree(&layer.real);
    let protected = |f: &Found| f.rel.starts_with("vendor").then(|| PathBuf::from("vendor"));
    let report = commit(&layer, &found, None, false, protected).expect("commit");
    assert_eq!(report.skipped.len(), 1, "{report:?}");
    assert!(report.conflicts.is_empty(), "{report:?}");
    // What the sandbox saw, but vendor/lib.c.
    for (k, v) in [
        ("a.txt", "f 644 a\nA\n"),
        ("new.txt", "f 644 n\n"),
        ("dir", "d 755"),
        ("dir/sub", "d 755"),
        ("dir/sub/d", "f 644 d\n"),
        ("etc-link", "l /etc"),
        ("opaque/p", "f 644 p\n"),
        ("mode.sh", "f 755 echo\n"),
    ] {
        want.insert(k.into(), v.into());
    }
    for k in ["b.txt", "old", "old/x", "opaque/keep", "opaque/o"] {
        want.remove(k);
    }
    assert_eq!(tree(&layer.real), want);
    // The link was written as a link: /etc is untouched, and nothing else is left staged.
    assert!(fs::symlink_metadata(layer.real.join("etc-link"))
        .expect("link")
        .file_type()
        .is_symlink());
    let left = changes(&layer.upper, &layer.real).expect("changes");
    assert_eq!(kinds(&left), [("vendor/lib.c".to_string(), "modified")]);
    // Named, the protected target lands too.
    let named = [PathBuf::from("vendor/lib.c")];
    let report = commit(&layer, &left, Some(&named), false, protected).expect("commit");
    assert_eq!(report.landed.len(), 1, "{report:?}");
    assert_eq!(
        fs::read_to_string(layer.real.join("vendor/lib.c")).expect("read"),
        "v\n"
    );
    assert!(changes(&layer.upper, &layer.real)
        .expect("changes")
        .is_empty());
}

/// A real file changed after the session staged it is a conflict, for that path only; with
/// all-or-nothing nothing lands.
#[test]
fn a_conflict_is_refused_for_that_path_only() {
    let Some((_tmp, _stage, layer)) = staged("echo A >> a.txt && echo n > new.txt", lower) else {
        return;
    };
    fs::write(layer.real.join("a.txt"), "the owner's edit\n").expect("edit");
    let found = changes(&layer.upper, &layer.real).expect("changes");
    let report = commit(&layer, &found, None, true, |_| None).expect("commit");
    assert!(
        report.landed.is_empty() && report.conflicts.len() == 1,
        "{report:?}"
    );
    assert!(!layer.real.join("new.txt").exists());
    let report = commit(&layer, &found, None, false, |_| None).expect("commit");
    assert_eq!(
        report.conflicts,
        vec![(PathBuf::from("a.txt"), NotLanded::Conflict)]
    );
    assert_eq!(report.landed.len(), 1);
    assert_eq!(
        fs::read_to_string(layer.real.join("a.txt")).expect("read"),
        "the owner's edit\n"
    );
    assert_eq!(
        fs::read_to_string(layer.real.join("new.txt")).expect("read"),
        "n\n"
    );
}

/// A real directory swapped for a link after staging: that path's commit is refused, and
/// nothing is written where the link leads.
#[test]
fn a_swapped_directory_is_not_followed() {
    let Some((tmp, _stage, layer)) =
        staged("echo evil > src/main.rs && echo new > src/new.rs", lower)
    else {
        return;
    };
    let elsewhere = fs::canonicalize(tmp.path())
        .expect("canonical")
        .join("elsewhere");
    fs::create_dir_all(&elsewhere).expect("mkdir");
    fs::rename(layer.real.join("src"), layer.real.join("src-moved")).expect("move");
    symlink(&elsewhere, layer.real.join("src")).expect("symlink");
    let found = changes(&layer.upper, &layer.real).expect("changes");
    let report = commit(&layer, &found, None, false, |_| None).expect("commit");
    assert!(report.landed.is_empty(), "{report:?}");
    assert!(
        fs::read_dir(&elsewhere).expect("dir").next().is_none(),
        "written through the link"
    );
    assert_eq!(
        fs::read_to_string(layer.real.join("src-moved/main.rs")).expect("read"),
        "fn main() {}\n"
    );
}

/// Discarding leaves the real tree as it was and the layer empty.
#[test]
fn a_discard_leaves_the_real_tree_alone() {
    let Some((_tmp, _stage, layer)) = staged(SCRIPT, lower) else {
        return;
    };
    let before = tree(&layer.real);
    let found = changes(&layer.upper, &layer.real).expect("changes");
    let named = [PathBuf::from("opaque/p")];
    discard(&layer, &found, Some(&named)).expect("discard one");
    let left = changes(&layer.upper, &layer.real).expect("changes");
    assert!(!kinds(&left).iter().any(|(p, _)| p == "opaque/p"));
    // The opaque directory's other changes are still there.
    assert!(
        kinds(&left).iter().any(|(p, _)| p == "opaque/o"),
        "{left:?}"
    );
    discard(&layer, &left, None).expect("discard");
    assert!(changes(&layer.upper, &layer.real)
        .expect("changes")
        .is_empty());
    assert_eq!(tree(&layer.real), before);
    let _ = Meta::read(&layer).expect("meta");
}
