use super::*;

/// A real file's identity tells a later change to it, whatever kind it is.
#[test]
fn identities_tell_changes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let f = tmp.path().join("f");
    std::fs::write(&f, "one").expect("write");
    let first = Identity::of(&f);
    assert!(first.unchanged(&Identity::of(&f)));
    std::fs::write(&f, "two").expect("write");
    assert!(!first.unchanged(&Identity::of(&f)));
    let missing = Identity::of(&tmp.path().join("none"));
    assert_eq!(missing.kind, RealKind::Absent);
    std::fs::write(tmp.path().join("none"), "x").expect("write");
    assert!(!missing.unchanged(&Identity::of(&tmp.path().join("none"))));
}

/// `layer.json` keeps the words it has always had for what a real path was, and one it does
/// not know (written by something else, or damaged) is an error naming the file, not a panic
/// and not a guess.
#[test]
fn layer_json_kinds_are_its_words() {
    let words = [
        (RealKind::File, "file"),
        (RealKind::Dir, "dir"),
        (RealKind::Link, "link"),
        (RealKind::Other, "other"),
        (RealKind::Absent, "none"),
        (RealKind::Unreachable, "unreachable"),
        (RealKind::Changed, "changed"),
    ];
    for (kind, word) in words {
        assert_eq!(serde_json::to_value(kind).expect("json"), word);
        let back: RealKind = serde_json::from_value(word.into()).expect("parse");
        assert_eq!(back, kind);
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let layer = Layer::at(tmp.path().to_path_buf(), Path::new("/srv"), Backend::Podman);
    let json = |kind: &str| {
        format!(
            r#"{{"real":"/srv","grants":["g"],"created":1,"first":{{"a":{{"kind":"{kind}"}}}}}}"#
        )
    };
    std::fs::write(tmp.path().join("layer.json"), json("none")).expect("write");
    let meta = Meta::read(&layer).expect("read");
    assert_eq!(meta.first["a"], Identity::none());
    std::fs::write(tmp.path().join("layer.json"), json("fifo")).expect("write");
    let err = Meta::read(&layer).expect_err("an unknown kind");
    assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    let text = err.to_string();
    assert!(
        text.contains("layer.json") && text.contains("fifo"),
        "{text}"
    );
}

/// The host edits a file and adds one below a directory while a call of the session holds the
/// layer (after its sandbox may have copied them up): neither is the session's base. The file
/// the call staged is a conflict, and so is its deletion of the directory; the commit keeps
/// the host's edit and file.
#[test]
fn what_the_host_changes_during_a_call_is_a_conflict() {
    use std::path::Path;
    use std::sync::Arc;
    use std::time::{Duration, Instant};
    let tmp = tempfile::tempdir().expect("tempdir");
    let base = std::fs::canonicalize(tmp.path()).expect("canonical");
    let real = base.join("real");
    std::fs::create_dir_all(real.join("src")).expect("mkdir");
    std::fs::write(real.join("a.txt"), "a\n").expect("write");
    std::fs::write(real.join("src/main.rs"), "fn main() {}\n").expect("write");
    let stage = Arc::new(Stage::new(&base.join("home"), 1 << 30, 0));
    let session = Ident::fixed("s1");
    let layer = stage.prepare(&session, "g", &real).expect("prepare");
    // Past the clock tick the files were made in.
    std::thread::sleep(Duration::from_millis(25));
    let held = stage
        .hold(
            &session,
            std::slice::from_ref(&layer),
            true,
            Instant::now() + Duration::from_secs(5),
        )
        .expect("hold");
    std::thread::sleep(Duration::from_millis(25));
    std::fs::write(real.join("a.txt"), "the host's edit\n").expect("edit");
    std::fs::write(real.join("src/new.rs"), "the host's\n").expect("add");
    // What the call's sandbox leaves in the layer: its own a.txt, src deleted.
    std::fs::write(layer.upper.join("a.txt"), "a\nA\n").expect("write");
    tree::Tree::open(&layer.upper)
        .expect("upper")
        .whiteout(Path::new("src"))
        .expect("whiteout");
    stage.record_first(&layer).expect("record");
    drop(held);
    commit::prepare_layer(&stage, &layer).expect("prepare");
    let found = changes::changes(&layer.upper, &layer.real)
        .expect("changes")
        .found;
    let report = commit::commit(&layer, &found, None, false, |_| None).expect("commit");
    let conflicts: Vec<_> = report.conflicts.iter().map(|(p, _)| p.clone()).collect();
    for p in ["a.txt", "src"] {
        assert!(conflicts.iter().any(|c| c == Path::new(p)), "{report:?}");
    }
    assert_eq!(
        std::fs::read_to_string(real.join("a.txt")).expect("read"),
        "the host's edit\n"
    );
    assert_eq!(
        std::fs::read_to_string(real.join("src/new.rs")).expect("read"),
        "the host's\n"
    );
}

/// A host edit made just before a call takes the layer is the session's base, never a change
/// during the call: no change time the kernel hands out (a stat between two writes makes the
/// second stamp fine-grained on a multigrain file system) is past the call's start.
#[test]
fn an_edit_before_the_call_is_not_during_it() {
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().expect("tempdir");
    let f = tmp.path().join("f");
    for round in 0..2000 {
        std::fs::write(&f, "one").expect("write");
        std::fs::metadata(&f).expect("stat");
        std::fs::write(&f, "two").expect("write");
        let began = now_ns().expect("clock");
        let st = std::fs::metadata(&f).expect("stat");
        let stamp = i128::from(st.ctime()) * 1_000_000_000 + i128::from(st.ctime_nsec());
        assert!(
            stamp <= began,
            "round {round}: stamped {stamp}, began {began}"
        );
    }
}

/// A call that writes into a directory of its layer and makes it mode 000 hides nothing from
/// `max_staged_bytes`: what brokerd cannot read counts as past the bound, and the session's
/// next writing call is refused, saying why.
#[test]
fn what_cannot_be_read_counts_as_past_the_bound() {
    use std::os::unix::fs::PermissionsExt;
    use std::sync::Arc;
    use std::time::{Duration, Instant};
    let tmp = tempfile::tempdir().expect("tempdir");
    let base = std::fs::canonicalize(tmp.path()).expect("canonical");
    let real = base.join("real");
    std::fs::create_dir_all(&real).expect("mkdir");
    let stage = Arc::new(Stage::new(&base.join("home"), 1 << 20, 0));
    let session = Ident::fixed("s1");
    let layer = stage.prepare(&session, "g", &real).expect("prepare");
    let hidden = layer.upper.join("d");
    std::fs::create_dir_all(&hidden).expect("mkdir");
    std::fs::write(hidden.join("big"), vec![0u8; 2 << 20]).expect("write");
    std::fs::set_permissions(&hidden, std::fs::Permissions::from_mode(0o000)).expect("chmod");
    // As the service user, without the capabilities a test run as root has.
    let held = std::thread::scope(|s| {
        s.spawn(|| {
            caps::clear(None, caps::CapSet::Effective).expect("drop capabilities");
            let held = stage.hold(
                &session,
                std::slice::from_ref(&layer),
                true,
                Instant::now() + Duration::from_secs(5),
            );
            (held.map(|_| ()), stage.bytes(&session))
        })
        .join()
        .expect("thread")
    });
    std::fs::set_permissions(&hidden, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let (held, bytes) = held;
    let why = held.expect_err("a writing call past the bound");
    assert!(
        why.to_string().contains("cannot read") && why.to_string().contains("max_staged_bytes"),
        "{why}"
    );
    assert!(matches!(why, StageError::Unmeasured { ref dir, .. } if *dir == real.join("d")));
    assert_eq!(bytes, u64::MAX);
}

/// However many paths a session changes, `layer.json` stays within its bound; a path that
/// found no room in it is a conflict, so a host file made there later is not overwritten, and
/// what the layer no longer changes leaves it.
#[test]
fn layer_json_stays_bounded() {
    const BUDGET: usize = 8 << 10;
    let tmp = tempfile::tempdir().expect("tempdir");
    let base = std::fs::canonicalize(tmp.path()).expect("canonical");
    let real = base.join("real");
    std::fs::create_dir_all(&real).expect("mkdir");
    let stage = Stage::new(&base.join("home"), 1 << 30, 0).with_meta_budget(BUDGET);
    let layer = stage
        .prepare(&Ident::fixed("s1"), "g", &real)
        .expect("prepare");
    for i in 0..1000 {
        std::fs::write(layer.upper.join(format!("n{i:04}")), "n\n").expect("write");
        if i % 100 == 99 {
            stage.record_first(&layer).expect("record");
        }
    }
    let size = || {
        std::fs::metadata(layer.dir.join("layer.json"))
            .expect("layer.json")
            .len()
    };
    // The bound, and what pretty-printing adds to each record.
    assert!(size() < 2 * BUDGET as u64, "{} bytes", size());
    let meta = Meta::read(&layer).expect("meta");
    let recorded = meta.first.len();
    assert!(meta.full && recorded < 1000, "{recorded}");
    // The host makes a file where the session's has no record: a conflict, kept.
    std::fs::write(real.join("n0999"), "the host's\n").expect("write");
    commit::prepare_layer(&stage, &layer).expect("prepare");
    let found = changes::changes(&layer.upper, &layer.real)
        .expect("changes")
        .found;
    let report = commit::commit(&layer, &found, None, false, |_| None).expect("commit");
    // What has a record lands; the rest, whose base is not known, conflicts.
    assert_eq!(report.landed.len(), recorded);
    assert_eq!(report.conflicts.len(), 1000 - recorded);
    assert_eq!(
        std::fs::read_to_string(real.join("n0999")).expect("read"),
        "the host's\n"
    );
    // Recorded again, only what the layer still changes is kept.
    let left = changes::changes(&layer.upper, &layer.real).expect("changes");
    assert_eq!(left.count(), 1000 - recorded);
    for f in &left.found {
        std::fs::remove_file(layer.upper.join(&f.rel)).expect("rm");
    }
    std::fs::write(layer.upper.join("again"), "a\n").expect("write");
    stage.record_first(&layer).expect("record");
    let meta = Meta::read(&layer).expect("meta");
    assert_eq!(meta.first.keys().collect::<Vec<_>>(), ["again"]);
}

/// A writing call's layers may hold together what the session's bound leaves after its other
/// layers: the runner stops the call past it.
#[test]
fn a_call_may_hold_what_the_other_layers_leave() {
    use std::sync::Arc;
    use std::time::{Duration, Instant};
    let tmp = tempfile::tempdir().expect("tempdir");
    let base = std::fs::canonicalize(tmp.path()).expect("canonical");
    let (one, two) = (base.join("one"), base.join("two"));
    for d in [&one, &two] {
        std::fs::create_dir_all(d).expect("mkdir");
    }
    let stage = Arc::new(Stage::new(&base.join("home"), 1000, 0));
    let session = Ident::fixed("s1");
    let a = stage.prepare(&session, "g", &one).expect("prepare");
    let b = stage.prepare(&session, "g", &two).expect("prepare");
    std::fs::write(a.upper.join("f"), vec![0u8; 300]).expect("write");
    std::fs::write(b.upper.join("f"), vec![0u8; 100]).expect("write");
    let until = Instant::now() + Duration::from_secs(5);
    let held = stage
        .hold(&session, std::slice::from_ref(&b), true, until)
        .expect("hold");
    assert_eq!(held.limit, Some(700));
    drop(held);
    let reading = stage
        .hold(&session, std::slice::from_ref(&b), false, until)
        .expect("hold");
    assert_eq!(reading.limit, None);
}
