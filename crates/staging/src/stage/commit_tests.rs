use super::super::changes::changes;
use super::super::discard::{discard, DiscardError};
use super::super::{Layer, Meta, Stage};
use super::*;
use crate::stage::testing::{run_in, staged};
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::symlink;
use std::os::unix::fs::PermissionsExt;

pub(crate) fn tree(dir: &Path) -> BTreeMap<String, String> {
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
    for d in ["src", "old/sub", "vendor", "opaque/keep", "opaque/deep"] {
        fs::create_dir_all(real.join(d)).expect("mkdir");
    }
    for (f, c) in [
        ("a.txt", "a\n"),
        ("b.txt", "b\n"),
        ("src/main.rs", "fn main() {}\n"),
        ("old/x", "x\n"),
        ("old/sub/y", "y\n"),
        ("vendor/lib.c", "int a;\n"),
        ("opaque/o", "o\n"),
        ("opaque/deep/d", "d\n"),
        ("mode.sh", "echo\n"),
    ] {
        fs::write(real.join(f), c).expect("write");
    }
}

const SCRIPT: &str = "echo A >> a.txt && rm b.txt && rm -rf old && echo n > new.txt && \
    mkdir -p dir/sub && echo d > dir/sub/d && ln -s /etc etc-link && echo v > vendor/lib.c && \
    rm -rf opaque && mkdir -p opaque/deep && echo p > opaque/p && echo e > opaque/deep/e && \
    chmod 755 mode.sh";

pub(crate) fn kinds(found: &[Found]) -> Vec<(String, &'static str)> {
    found
        .iter()
        .map(|f| (f.rel.display().to_string(), f.kind.as_str()))
        .collect()
}

/// The layer readied for an owner, and its changes.
pub(crate) fn listed(stage: &Stage, layer: &Layer) -> Vec<Found> {
    prepare_layer(stage, layer).expect("prepare");
    changes(&layer.upper, &layer.real).expect("changes").found
}

/// The layer's changes are what the commands did, every real file a deletion removes listed
/// (below an opaque directory too, at every depth), and a commit lands exactly the merged tree
/// (but the protected target, which needs naming): the real tree afterwards is what the
/// sandbox saw.
#[test]
fn a_commit_lands_exactly_what_was_staged() {
    let Some((_tmp, stage, layer)) = staged(SCRIPT, lower) else {
        return;
    };
    let found = changes(&layer.upper, &layer.real).expect("changes").found;
    let want = [
        ("a.txt", "modified"),
        ("b.txt", "deleted"),
        ("dir", "added"),
        ("dir/sub", "added"),
        ("dir/sub/d", "added"),
        ("etc-link", "added"),
        ("mode.sh", "mode_changed"),
        ("new.txt", "added"),
        ("old", "deleted"),
        ("old/sub", "deleted"),
        ("old/sub/y", "deleted"),
        ("old/x", "deleted"),
        ("opaque/deep/d", "deleted"),
        ("opaque/deep/e", "added"),
        ("opaque/keep", "deleted"),
        ("opaque/o", "deleted"),
        ("opaque/p", "added"),
        ("vendor/lib.c", "modified"),
    ];
    let want: Vec<(String, &str)> = want.iter().map(|(p, k)| (p.to_string(), *k)).collect();
    assert_eq!(kinds(&found), want);
    // The owner's readying changes nothing of what the layer says.
    assert_eq!(kinds(&listed(&stage, &layer)), want);
    let mut want = tree(&layer.real);
    let protected = |f: &Found| f.rel.starts_with("vendor").then(|| PathBuf::from("vendor"));
    let found = listed(&stage, &layer);
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
        ("opaque/deep/e", "f 644 e\n"),
        ("mode.sh", "f 755 echo\n"),
    ] {
        want.insert(k.into(), v.into());
    }
    for k in [
        "b.txt",
        "old",
        "old/x",
        "old/sub",
        "old/sub/y",
        "opaque/keep",
        "opaque/o",
        "opaque/deep/d",
    ] {
        want.remove(k);
    }
    assert_eq!(tree(&layer.real), want);
    // The link was written as a link: /etc is untouched, and nothing else is left staged.
    assert!(fs::symlink_metadata(layer.real.join("etc-link"))
        .expect("link")
        .file_type()
        .is_symlink());
    let left = changes(&layer.upper, &layer.real).expect("changes").found;
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
    let Some((_tmp, stage, layer)) = staged("echo A >> a.txt && echo n > new.txt", lower) else {
        return;
    };
    fs::write(layer.real.join("a.txt"), "the owner's edit\n").expect("edit");
    let found = listed(&stage, &layer);
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

/// The host adds or edits files below a directory after the session deleted it, replaced it
/// with a file, or emptied it and made it again: a commit deletes none of the host's newer
/// files, and says which paths conflict; what the session saw and deleted still goes.
#[test]
fn what_the_host_changes_below_a_deleted_directory_is_a_conflict() {
    // (script, what the host does afterwards, paths that must conflict)
    let cases: [(&str, &str, &[&str]); 4] = [
        ("rm -rf src", "add", &["src", "src/new.rs"]),
        ("rm -rf src", "edit", &["src", "src/main.rs"]),
        ("rm -rf src && echo f > src", "add", &["src", "src/new.rs"]),
        (
            "rm -rf src && mkdir src && echo s > src/lib.rs",
            "add",
            &["src/new.rs"],
        ),
    ];
    for (script, host, want) in cases {
        let Some((_tmp, stage, layer)) = staged(script, lower) else {
            return;
        };
        match host {
            "add" => fs::write(layer.real.join("src/new.rs"), "the host's\n").expect("add"),
            _ => fs::write(layer.real.join("src/main.rs"), "the host's edit\n").expect("edit"),
        }
        let host_file = if host == "add" {
            "src/new.rs"
        } else {
            "src/main.rs"
        };
        let found = listed(&stage, &layer);
        let report = commit(&layer, &found, None, false, |_| None).expect("commit");
        let mut conflicts: Vec<String> = report
            .conflicts
            .iter()
            .map(|(p, _)| p.display().to_string())
            .collect();
        conflicts.sort();
        assert_eq!(conflicts, want, "{script} / {host}: {report:?}");
        assert!(
            fs::read_to_string(layer.real.join(host_file))
                .is_ok_and(|s| s.starts_with("the host's")),
            "{script} / {host}: the host's file went"
        );
        // A second commit, with the layer as the first one left it, still refuses.
        let again = commit(&layer, &listed(&stage, &layer), None, false, |_| None).expect("commit");
        assert!(
            again.landed.is_empty() && !again.conflicts.is_empty(),
            "{script} / {host}: {again:?}"
        );
        assert!(layer.real.join(host_file).exists());
    }
}

/// A later call of the session that saw the host's new file and deleted the directory again
/// may delete it: the session saw it then.
#[test]
fn what_a_later_call_saw_it_may_delete() {
    let Some((_tmp, stage, layer)) = staged("echo touched > src/main.rs", lower) else {
        return;
    };
    fs::write(layer.real.join("src/new.rs"), "the host's\n").expect("add");
    assert!(run_in(&layer, "cat src/new.rs && rm -rf src"));
    let found = listed(&stage, &layer);
    let report = commit(&layer, &found, None, false, |_| None).expect("commit");
    assert!(report.conflicts.is_empty(), "{report:?}");
    assert!(!layer.real.join("src").exists());
}

/// A real directory swapped for a link after staging: that path's commit is refused, and
/// nothing is written where the link leads.
#[test]
fn a_swapped_directory_is_not_followed() {
    let Some((tmp, stage, layer)) =
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
    let found = listed(&stage, &layer);
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

/// Discarding leaves the real tree as it was and the layer empty; a file a deletion of its
/// directory removed can be kept alone, the rest of the directory staying deleted.
#[test]
fn a_discard_leaves_the_real_tree_alone() {
    let Some((_tmp, stage, layer)) = staged(SCRIPT, lower) else {
        return;
    };
    let before = tree(&layer.real);
    listed(&stage, &layer);
    let named = [PathBuf::from("opaque/p"), PathBuf::from("old/sub/y")];
    let thrown = discard(&layer, Some(&named)).expect("discard some");
    assert_eq!(
        kinds(&thrown),
        [
            ("old/sub/y".to_string(), "deleted"),
            ("opaque/p".to_string(), "added")
        ]
    );
    let left = kinds(&changes(&layer.upper, &layer.real).expect("changes").found);
    let has = |p: &str| left.iter().any(|(q, _)| q == p);
    assert!(!has("opaque/p") && !has("old/sub/y") && !has("old") && !has("old/sub"));
    // The opaque directory's other changes are still there, and so is the rest of old/.
    assert!(has("opaque/o") && has("old/x"), "{left:?}");
    let view = super::super::Merged::new(vec![(layer.real.clone(), layer.upper.clone())]);
    use crate::view::View;
    assert!(view.lstat(&layer.real.join("old/sub/y")).is_ok());
    assert!(view.lstat(&layer.real.join("old/x")).is_err());
    discard(&layer, None).expect("discard");
    assert!(changes(&layer.upper, &layer.real)
        .expect("changes")
        .is_empty());
    assert_eq!(tree(&layer.real), before);
    let _ = Meta::read(&layer).expect("meta");
}

/// A file of a directory the session replaced with a file cannot be kept alone.
#[test]
fn a_file_of_a_replaced_directory_is_discarded_with_it() {
    let Some((_tmp, stage, layer)) = staged("rm -rf src && echo f > src", lower) else {
        return;
    };
    listed(&stage, &layer);
    let named = [PathBuf::from("src/main.rs")];
    assert!(matches!(
        discard(&layer, Some(&named)),
        Err(DiscardError::Replaced { .. })
    ));
    let named = [PathBuf::from("src")];
    discard(&layer, Some(&named)).expect("discard");
    assert!(changes(&layer.upper, &layer.real)
        .expect("changes")
        .is_empty());
}

#[path = "commit_attack_tests.rs"]
mod attacks;

#[path = "commit_race_tests.rs"]
mod races;

#[path = "commit_prop_tests.rs"]
mod props;
