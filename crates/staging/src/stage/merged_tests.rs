use super::*;
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::symlink;
use std::process::Command;

/// The merged tree as the view shows it: every path below `real`, with its type and a link's
/// target or a file's content.
fn listing(view: &Merged, real: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![real.to_path_buf()];
    while let Some(d) = stack.pop() {
        for name in view.read_dir(&d).expect("read_dir") {
            let p = d.join(&name);
            let rel = p.strip_prefix(real).expect("inside").display().to_string();
            let m = view.lstat(&p).expect("lstat");
            let what = if m.file_type().is_symlink() {
                format!("l {}", view.read_link(&p).expect("link").display())
            } else if m.is_dir() {
                stack.push(p.clone());
                "d".to_string()
            } else {
                let mut s = String::new();
                io::Read::read_to_string(&mut view.open(&p).expect("open"), &mut s).expect("read");
                // As `$(cat)` in the script shows it: trailing newlines dropped.
                format!("f {}", s.trim_end_matches('\n'))
            };
            out.insert(rel, what);
        }
    }
    out
}

/// The same listing of a directory on disk (a mounted overlay).
fn listing_of_script(out: &str) -> BTreeMap<String, String> {
    out.lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(p, w)| (p.to_string(), w.to_string()))
        .collect()
}

fn lower(root: &Path) {
    for d in ["keep", "gone", "opaque/sub", "fileToDir", "deep/a/b"] {
        fs::create_dir_all(root.join(d)).expect("mkdir");
    }
    for (f, c) in [
        ("a.txt", "a"),
        ("b.txt", "b"),
        ("keep/k", "k"),
        ("gone/g", "g"),
        ("opaque/o", "o"),
        ("opaque/sub/s", "s"),
        ("dirToFile", "x"),
        ("deep/a/b/c", "c"),
    ] {
        fs::write(root.join(f), c).expect("write");
    }
    symlink("a.txt", root.join("link")).expect("symlink");
}

/// What a session's commands do, in the layer's terms.
const SCRIPT: &str = "cd \"$1\" && echo A > a.txt && rm b.txt && rm -rf gone && \
    rm -rf opaque && mkdir -p opaque/new && echo n > opaque/new/n && \
    rm -rf fileToDir && echo F > fileToDir && rm dirToFile && mkdir dirToFile && \
    echo D > dirToFile/d && ln -sf /etc/passwd link && echo c > new.txt && \
    mkdir -p added/x && echo y > added/x/y && rm deep/a/b/c && echo w > .wh.keep";

/// A real overlayfs mount (in a user and mount namespace of the test's own) and the view
/// agree on every path after the same changes; skipped where the kernel gives no such mount.
#[test]
fn the_view_is_what_overlayfs_shows() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let base = fs::canonicalize(tmp.path()).expect("canonical");
    let (real, upper, work, merged) = (
        base.join("real"),
        base.join("upper"),
        base.join("work"),
        base.join("merged"),
    );
    for d in [&real, &upper, &work, &merged] {
        fs::create_dir_all(d).expect("mkdir");
    }
    lower(&real);
    let list = "cd \"$1\" && find . -mindepth 1 | sort | while read -r p; do \
        p=${p#./}; if [ -L \"$p\" ]; then printf '%s\\tl %s\\n' \"$p\" \"$(readlink \"$p\")\"; \
        elif [ -d \"$p\" ]; then printf '%s\\td\\n' \"$p\"; \
        else printf '%s\\tf %s\\n' \"$p\" \"$(cat \"$p\")\"; fi; done";
    // The scripts go as arguments, so that their quotes stay theirs.
    let script = format!(
        "mount -t overlay overlay -o lowerdir={},upperdir={},workdir={},userxattr {} || exit 77; \
         sh -c \"$1\" sh \"$3\" && sh -c \"$2\" sh \"$3\"",
        real.display(),
        upper.display(),
        work.display(),
        merged.display(),
    );
    let out = Command::new("unshare")
        .args(["-Urm", "sh", "-c", &script, "sh", SCRIPT, list])
        .arg(&merged)
        .output();
    let out = match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
        Ok(o) => {
            assert!(
                std::env::var_os("CI").is_none() && o.status.code() == Some(77),
                "the scripts failed, or CI cannot mount an overlay: {o:?}"
            );
            eprintln!("SKIPPED: no overlay mount in a user namespace here: {o:?}");
            return;
        }
        Err(e) => {
            assert!(std::env::var_os("CI").is_none(), "unshare: {e}");
            eprintln!("SKIPPED: unshare cannot be run: {e}");
            return;
        }
    };
    let want = listing_of_script(&out);
    assert!(
        want.contains_key("opaque/new/n")
            && !want.contains_key("b.txt")
            && want.contains_key("keep/k")
            && want.contains_key(".wh.keep"),
        "{want:?}"
    );
    let view = Merged::new(vec![(real.clone(), upper.clone())]);
    assert_eq!(listing(&view, &real), want);
    // Nothing of the real directory changed.
    assert_eq!(fs::read_to_string(real.join("b.txt")).expect("b"), "b");
}

/// A session with no layer yet sees the real directory; paths outside staged directories are
/// the host's.
#[test]
fn no_layer_is_the_real_tree() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let base = fs::canonicalize(tmp.path()).expect("canonical");
    let real = base.join("real");
    fs::create_dir_all(&real).expect("mkdir");
    lower(&real);
    let view = Merged::new(vec![(real.clone(), base.join("no-upper-yet"))]);
    assert_eq!(
        view.place(&real.join("a.txt")),
        Place::Real(real.join("a.txt"))
    );
    assert_eq!(view.place(&base), Place::Real(base.clone()));
    let host = Merged::new(vec![]);
    assert_eq!(listing(&view, &real), listing(&host, &real));
    assert_eq!(listing(&view, &real).len(), 17);
}

/// Whiteouts and opaque directories made by hand, as Podman's layer has them; a file named
/// as fuse-overlayfs names its whiteouts and opaque markers is a file, as kernel overlayfs
/// (both backends' layers) reads it.
#[test]
fn whiteouts_and_opaque_directories_hide_the_real_tree() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let base = fs::canonicalize(tmp.path()).expect("canonical");
    let (real, upper) = (base.join("real"), base.join("upper"));
    fs::create_dir_all(&real).expect("mkdir");
    fs::create_dir_all(upper.join("opaque")).expect("mkdir");
    fs::create_dir_all(upper.join("keep")).expect("mkdir");
    lower(&real);
    // An unprivileged whiteout (Linux 5.8).
    nix::sys::stat::mknod(
        &upper.join("b.txt"),
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::empty(),
        0,
    )
    .expect("whiteout");
    fs::write(upper.join(".wh.a.txt"), "").expect("a file named as a whiteout");
    fs::write(upper.join("keep").join(".wh..wh..opq"), "").expect("a file named as a marker");
    rustix::fs::setxattr(
        upper.join("opaque"),
        "user.overlay.opaque",
        b"y",
        rustix::fs::XattrFlags::empty(),
    )
    .expect("setxattr");
    let view = Merged::new(vec![(real.clone(), upper.clone())]);
    assert_eq!(view.place(&real.join("b.txt")), Place::Gone);
    assert_eq!(
        view.place(&real.join("a.txt")),
        Place::Real(real.join("a.txt"))
    );
    assert!(view
        .lstat(&real.join(".wh.a.txt"))
        .expect("a file")
        .is_file());
    assert_eq!(
        view.place(&real.join("keep/k")),
        Place::Real(real.join("keep/k"))
    );
    assert_eq!(view.place(&real.join("opaque/o")), Place::Gone);
    assert_eq!(
        view.read_dir(&real.join("opaque")).expect("dir"),
        Vec::<OsString>::new()
    );
    let mut top: Vec<String> = view
        .read_dir(&real)
        .expect("dir")
        .into_iter()
        .map(|n| n.to_string_lossy().into_owned())
        .collect();
    top.sort();
    assert_eq!(
        top,
        [
            ".wh.a.txt",
            "a.txt",
            "deep",
            "dirToFile",
            "fileToDir",
            "gone",
            "keep",
            "link",
            "opaque"
        ]
    );
    let mut keep = view.read_dir(&real.join("keep")).expect("dir");
    keep.sort();
    assert_eq!(keep, [".wh..wh..opq", "k"]);
}
