//! Layers made by a real overlay mount, in a user and mount namespace of the test's own, for the
//! tests of this crate and of brokerd's owner ops (the `test-support` feature).

// Test support only: a set-up that fails is the test's failure, said where it happened.
#![allow(clippy::expect_used)]

use std::fs;
use std::path::Path;
use std::process::Command;

use proto::ident::Ident;

use super::{Layer, Stage};

/// A layer made by a real overlayfs mount (in a user and mount namespace of the test's own)
/// while `script` ran in it, and recorded as a call's end records it; `None` where this
/// kernel gives no such mount.
pub fn staged(script: &str, lower: impl Fn(&Path)) -> Option<(tempfile::TempDir, Stage, Layer)> {
    let tmp = tempfile::tempdir().expect("tempdir");
    let base = fs::canonicalize(tmp.path()).expect("canonical");
    let real = base.join("real");
    fs::create_dir_all(&real).expect("mkdir");
    lower(&real);
    let stage = Stage::new(&base.join("home"), 1 << 30, 0);
    let session = Ident::fixed("s1");
    let layer = stage.prepare(&session, "g", &real).expect("prepare");
    if !run_in(&layer, script) {
        return None;
    }
    Some((tmp, stage, layer))
}

/// Runs `script` in the merged view of `layer` (another call of the session), then records.
pub fn run_in(layer: &Layer, script: &str) -> bool {
    let sh = format!(
        "mount -t overlay overlay -o lowerdir={},upperdir={},workdir={},userxattr {} || exit 77; cd {} && {script}",
        layer.real.display(),
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
            assert_eq!(o.status.code(), Some(77), "the script failed: {o:?}");
            eprintln!("SKIPPED: no overlay mount here: {o:?}");
            return false;
        }
        Err(e) => {
            assert!(std::env::var_os("CI").is_none(), "unshare: {e}");
            eprintln!("SKIPPED: unshare cannot be run: {e}");
            return false;
        }
    }
    let stage = Stage::new(
        layer
            .dir
            .parent()
            .and_then(Path::parent)
            .and_then(Path::parent)
            .expect("home"),
        1 << 30,
        0,
    );
    stage.record_first(layer).expect("record");
    true
}
