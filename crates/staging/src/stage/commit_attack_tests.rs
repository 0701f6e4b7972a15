//! What a hostile session tries on its own layer, and what the owner's reading and commit make
//! of it (docs/design.md#staged-writes-and-owners).

use super::super::super::changes::{changes, changes_in, diff, dropped_bits};
use super::super::super::tree::Tree;
use super::super::super::Merged;
use super::super::*;
use super::{kinds, listed, staged, tree};
use crate::view::View;
use std::fs;
use std::os::unix::fs::symlink;
use std::os::unix::fs::PermissionsExt;

/// Runs `f` on a thread without effective capabilities, as the service user runs: a test run
/// as root must still meet permission bits.
fn as_service_user<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            caps::clear(None, caps::CapSet::Effective).expect("drop capabilities");
            f()
        })
        .join()
        .expect("thread")
    })
}

fn lower(real: &Path) {
    fs::create_dir_all(real.join("d")).expect("mkdir");
    fs::create_dir_all(real.join("shared")).expect("mkdir");
    fs::set_permissions(real.join("shared"), fs::Permissions::from_mode(0o2775)).expect("chmod");
    fs::write(real.join("README"), "read me\n").expect("write");
    fs::write(real.join("d/keep"), "k\n").expect("write");
    fs::write(real.join("mode.sh"), "echo\n").expect("write");
}

/// A file named as fuse-overlayfs names whiteouts and opaque markers is a file on kernel
/// overlayfs, where both backends' layers are: it deletes nothing and hides nothing, in the
/// view, in `changes`, and in a commit. Setting overlayfs' own attributes through the merged
/// view is refused, so no directory becomes opaque behind the owner's back.
#[test]
fn a_file_named_like_a_whiteout_is_a_file() {
    let script = "echo x > .wh.README && : > d/.wh..wh..opq && : > .wh..wh..opq && \
        for a in user.overlay.opaque trusted.overlay.opaque; do \
        python3 -c \"import os,sys; os.setxattr('d', sys.argv[1], b'y')\" $a 2>/dev/null && echo SET $a; \
        done; true";
    let Some((_tmp, stage, layer)) = staged(script, lower) else {
        return;
    };
    let found = changes(&layer.upper, &layer.real).expect("changes").found;
    assert_eq!(
        kinds(&found),
        [
            (".wh..wh..opq".to_string(), "added"),
            (".wh.README".to_string(), "added"),
            ("d/.wh..wh..opq".to_string(), "added"),
        ]
    );
    let view = Merged::new(vec![(layer.real.clone(), layer.upper.clone())]);
    assert!(view.lstat(&layer.real.join("README")).is_ok());
    assert!(view.lstat(&layer.real.join("d/keep")).is_ok());
    assert!(view
        .lstat(&layer.real.join(".wh.README"))
        .expect("file")
        .is_file());
    let upper = Tree::open(&layer.upper).expect("upper");
    assert!(
        !upper.is_opaque(Path::new("d")),
        "the session made d opaque"
    );
    let found = listed(&stage, &layer);
    let report = commit(&layer, &found, None, false, |_| None).expect("commit");
    assert_eq!(report.landed.len(), 3, "{report:?}");
    assert_eq!(
        fs::read_to_string(layer.real.join("README")).expect("README"),
        "read me\n"
    );
    assert!(layer.real.join("d/keep").exists());
    assert_eq!(
        fs::read_to_string(layer.real.join(".wh.README")).expect("file"),
        "x\n"
    );
}

/// setuid and setgid bits the session sets are shown to the owner and not committed; a
/// directory keeps the setgid bit it already had.
#[test]
fn setuid_and_setgid_stay_in_the_layer() {
    let script = "echo x > s.sh && chmod 4755 s.sh && chmod 2755 mode.sh && mkdir g && \
        chmod 2775 g && chmod 2770 shared";
    let Some((_tmp, stage, layer)) = staged(script, lower) else {
        return;
    };
    let found = listed(&stage, &layer);
    let shown: Vec<(String, Option<u32>, Option<u32>)> = found
        .iter()
        .map(|f| (f.rel.display().to_string(), f.mode, dropped_bits(f)))
        .collect();
    assert_eq!(
        shown,
        [
            ("g".to_string(), Some(0o2775), Some(0o2000)),
            ("mode.sh".to_string(), Some(0o2755), Some(0o2000)),
            ("s.sh".to_string(), Some(0o4755), Some(0o4000)),
            ("shared".to_string(), Some(0o2770), None),
        ]
    );
    let report = commit(&layer, &found, None, false, |_| None).expect("commit");
    assert_eq!(report.landed.len(), 4, "{report:?}");
    let t = tree(&layer.real);
    assert_eq!(t["s.sh"], "f 755 x\n");
    assert_eq!(t["mode.sh"], "f 755 echo\n");
    assert_eq!(t["g"], "d 775");
    assert_eq!(t["shared"], "d 2770");
}

/// A read-only directory the session made lands with its files: its mode is set once they
/// are in.
#[test]
fn a_read_only_directory_takes_its_files_first() {
    let script = "mkdir -p ro/sub && echo f > ro/sub/f && echo g > ro/g && chmod 555 ro/sub ro";
    let Some((_tmp, stage, layer)) = staged(script, lower) else {
        return;
    };
    let found = listed(&stage, &layer);
    let report = as_service_user(|| commit(&layer, &found, None, false, |_| None)).expect("commit");
    assert!(report.conflicts.is_empty(), "{report:?}");
    let t = tree(&layer.real);
    assert_eq!(
        (
            t["ro"].as_str(),
            t["ro/sub"].as_str(),
            t["ro/g"].as_str(),
            t["ro/sub/f"].as_str()
        ),
        ("d 555", "d 555", "f 644 g\n", "f 644 f\n")
    );
}

/// What landed is what the report (and so the audit) says, even when the layer cannot be
/// tidied afterwards.
#[test]
fn what_landed_is_reported_when_the_layer_cannot_be_tidied() {
    let Some((_tmp, stage, layer)) = staged("echo n > new.txt && rm README", lower) else {
        return;
    };
    let found = listed(&stage, &layer);
    fs::set_permissions(&layer.upper, fs::Permissions::from_mode(0o555)).expect("chmod");
    let report = as_service_user(|| commit(&layer, &found, None, false, |_| None))
        .expect("a commit that landed files answers with what landed");
    fs::set_permissions(&layer.upper, fs::Permissions::from_mode(0o755)).expect("chmod");
    assert_eq!(report.landed.len(), 2, "{report:?}");
    assert_eq!(report.unfinished.len(), 2, "{report:?}");
    assert!(layer.real.join("new.txt").exists() && !layer.real.join("README").exists());
    // What stays in the layer is no change any more.
    assert!(changes(&layer.upper, &layer.real)
        .expect("changes")
        .is_empty());
}

/// A directory of the layer swapped for a link to brokerd's own state while the owner reads
/// the changes leads nowhere: no diff, hash or size is read through it.
#[test]
fn reading_follows_no_link_the_sandbox_swapped_in() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let base = fs::canonicalize(tmp.path()).expect("canonical");
    let (real, upper, secret) = (base.join("real"), base.join("upper"), base.join("state"));
    for d in [&real, &upper.join("d"), &secret] {
        fs::create_dir_all(d).expect("mkdir");
    }
    fs::write(upper.join("d/f"), "staged\n").expect("write");
    fs::write(secret.join("f"), "the service's secret\n").expect("write");
    let t = Tree::open(&upper).expect("upper");
    let listing = changes_in(&t, Tree::open(&real).ok().as_ref()).expect("changes");
    let f = listing
        .found
        .iter()
        .find(|f| f.rel == Path::new("d/f"))
        .expect("d/f")
        .clone();
    fs::rename(upper.join("d"), upper.join("d-moved")).expect("move");
    symlink(&secret, upper.join("d")).expect("symlink");
    let shown = diff(&f, &t, Tree::open(&real).ok().as_ref(), "/x");
    assert!(
        !shown.unwrap_or_default().contains("secret"),
        "read through the link"
    );
    let again = changes(&upper, &real).expect("changes");
    assert!(
        again.found.iter().all(|f| f.rel != Path::new("d/f")),
        "{again:?}"
    );
    assert_eq!(super::super::super::dir_bytes(&upper), 7);
}

/// A directory the session replaced with a link to elsewhere lands as that link: what the
/// real directory held goes, and nothing is removed where the link leads.
#[test]
fn a_directory_replaced_by_a_link_deletes_nothing_through_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let elsewhere = fs::canonicalize(tmp.path())
        .expect("canonical")
        .join("elsewhere");
    fs::create_dir_all(&elsewhere).expect("mkdir");
    fs::write(elsewhere.join("keep"), "k\n").expect("write");
    let script = format!("rm -rf d && ln -s {} d", elsewhere.display());
    let Some((_tmp, stage, layer)) = staged(&script, lower) else {
        return;
    };
    let found = listed(&stage, &layer);
    assert_eq!(
        kinds(&found),
        [
            ("d".to_string(), "type_changed"),
            ("d/keep".to_string(), "deleted")
        ]
    );
    let report = commit(&layer, &found, None, false, |_| None).expect("commit");
    assert!(
        report.conflicts.is_empty() && report.landed.len() == 2,
        "{report:?}"
    );
    assert_eq!(
        fs::read_link(layer.real.join("d")).expect("link"),
        elsewhere
    );
    assert_eq!(
        fs::read_to_string(elsewhere.join("keep")).expect("kept"),
        "k\n"
    );
}

/// A layer directory nested past what a path can name still lists: what it holds is counted
/// as left out, and the rest is there.
#[test]
fn a_layer_too_deep_to_name_still_lists() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let base = fs::canonicalize(tmp.path()).expect("canonical");
    let (real, upper) = (base.join("real"), base.join("upper"));
    fs::create_dir_all(&real).expect("mkdir");
    fs::create_dir_all(&upper).expect("mkdir");
    fs::write(upper.join("top.txt"), "t\n").expect("write");
    // 20 levels of 250 characters: past PATH_MAX, made one level at a time.
    let mut dir = nix::fcntl::open(
        &upper,
        nix::fcntl::OFlag::O_DIRECTORY,
        nix::sys::stat::Mode::empty(),
    )
    .expect("open");
    let name = "d".repeat(250);
    for _ in 0..20 {
        nix::sys::stat::mkdirat(&dir, name.as_str(), nix::sys::stat::Mode::S_IRWXU).expect("mkdir");
        dir = nix::fcntl::openat(
            &dir,
            name.as_str(),
            nix::fcntl::OFlag::O_DIRECTORY,
            nix::sys::stat::Mode::empty(),
        )
        .expect("openat");
    }
    let listing = changes(&upper, &real).expect("changes");
    assert!(listing.found.iter().any(|f| f.rel == Path::new("top.txt")));
    assert!(listing.left_out >= 1, "{}", listing.left_out);
    // Recording and readying the layer for an owner go on too: the rest can still land.
    let t = Tree::open(&upper).expect("upper");
    let entries = super::super::super::changes::entries(&t, Tree::open(&real).ok().as_ref())
        .expect("entries");
    assert!(entries.iter().any(|e| e.rel == Path::new("top.txt")));
    fs::remove_dir_all(&upper).expect("a tree too deep to name is still removed");
}
