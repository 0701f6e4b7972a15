//! A host that changes the real tree while an owner's commit runs: whatever the interleaving,
//! a commit lands what it listed or reports a conflict, and never removes or rewrites a host
//! entry the session did not change (docs/design.md#staged-writes-and-owners).

use super::super::super::Stage;
use super::super::*;
use super::listed;
use proto::ident::Ident;
use std::fs;
use std::os::unix::fs::symlink;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A small seeded generator (xorshift): a failing run is replayed with its seed, from
/// `BOXMAKER_TEST_SEED` or the one the test prints.
pub(crate) struct Seeded(pub(crate) u64);

impl Seeded {
    pub(crate) fn from_env(default: u64) -> Seeded {
        let seed = std::env::var("BOXMAKER_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default);
        eprintln!("seed {seed} (BOXMAKER_TEST_SEED replays it)");
        Seeded(seed.max(1))
    }

    pub(crate) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// `renameat2(a, b, RENAME_EXCHANGE)` on absolute paths.
fn exchange(a: &Path, b: &Path) -> io::Result<()> {
    use rustix::fs::{renameat_with, RenameFlags, CWD};
    renameat_with(CWD, a, CWD, b, RenameFlags::EXCHANGE).map_err(io::Error::from)
}

/// A layer whose session wrote `sub/new` into the real directory `sub/` (which holds the
/// host's `sub/host.txt`), recorded as a call's end records it.
fn sub_staged(base: &Path) -> (Stage, Layer) {
    let real = base.join("real");
    fs::create_dir_all(real.join("sub")).expect("mkdir");
    fs::write(real.join("sub/host.txt"), "the host's\n").expect("write");
    symlink("elsewhere", real.join("swap")).expect("symlink");
    let stage = Stage::new(&base.join("home"), 1 << 30, 0);
    let layer = stage
        .prepare(&Ident::fixed("s1"), "g", &real)
        .expect("prepare");
    // What a sandbox's write leaves in the layer: the directory copied up, the file in it.
    fs::create_dir_all(layer.upper.join("sub")).expect("mkdir");
    fs::write(layer.upper.join("sub/new"), "n\n").expect("write");
    stage.record_first(&layer).expect("record");
    (stage, layer)
}

/// A host process swaps its real `sub/` with a link (`RENAME_EXCHANGE`, at seeded moments)
/// while commits list and land: `sub/host.txt`, which the session never touched, survives
/// every commit, and `sub` lands as the session's new file or is a conflict, never a type
/// change that removes the host's directory.
#[test]
fn a_commit_raced_by_a_swap_removes_nothing_of_the_host() {
    let mut rng = Seeded::from_env(0x5eed_0036);
    let mut conflicts = 0;
    for round in 0..150 {
        let tmp = tempfile::tempdir().expect("tempdir");
        let base = fs::canonicalize(tmp.path()).expect("canonical");
        let (stage, layer) = sub_staged(&base);
        let (sub, swap) = (layer.real.join("sub"), layer.real.join("swap"));
        let stop = Arc::new(AtomicBool::new(false));
        let pauses: Vec<u64> = (0..64).map(|_| rng.below(200)).collect();
        let swapper = {
            let (stop, sub, swap) = (stop.clone(), sub.clone(), swap.clone());
            std::thread::spawn(move || {
                let mut swapped = false;
                let mut i = 0;
                while !stop.load(Ordering::SeqCst) {
                    // One of the two gone (the commit removed it): the host stops.
                    if exchange(&sub, &swap).is_err() {
                        return;
                    }
                    swapped = !swapped;
                    std::thread::sleep(Duration::from_micros(pauses[i % pauses.len()]));
                    i += 1;
                }
                if swapped {
                    let _ = exchange(&sub, &swap);
                }
            })
        };
        std::thread::sleep(Duration::from_micros(rng.below(300)));
        let found = listed(&stage, &layer);
        let report = commit(&layer, &found, None, false, |_| None).expect("commit");
        stop.store(true, Ordering::SeqCst);
        swapper.join().expect("swapper");
        assert_eq!(
            fs::read_to_string(sub.join("host.txt")).ok().as_deref(),
            Some("the host's\n"),
            "round {round}: the host's file is gone; {report:?}"
        );
        assert!(
            fs::symlink_metadata(&swap).is_ok_and(|m| m.file_type().is_symlink()),
            "round {round}: the host's link is gone; {report:?}"
        );
        for l in &report.landed {
            assert!(
                l.kind != proto::broker::ChangeKind::TypeChanged,
                "round {round}: {l:?} landed as a type change; {report:?}"
            );
        }
        conflicts += usize::from(!report.conflicts.is_empty());
    }
    eprintln!("{conflicts} of 150 commits met the swap (a conflict)");
}

/// The commit that `a_commit_killed_midway_leaves_no_temporary_file` runs in a child process
/// and kills: the layer of session `s1` over `BOXMAKER_TEST_REAL`, under `BOXMAKER_TEST_HOME`.
#[test]
#[ignore = "run by a_commit_killed_midway_leaves_no_temporary_file"]
fn a_commit_to_be_killed() {
    let (Some(home), Some(real)) = (
        std::env::var_os("BOXMAKER_TEST_HOME"),
        std::env::var_os("BOXMAKER_TEST_REAL"),
    ) else {
        return;
    };
    let stage = Stage::new(Path::new(&home), 1 << 40, 0);
    let layer = stage.layer(&Ident::fixed("s1"), Path::new(&real));
    let found = listed(&stage, &layer);
    let _ = commit(&layer, &found, None, false, |_| None);
}

/// The names in `dir` that a commit writes beside what it lands.
fn temporaries(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .expect("read_dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".boxmaker-commit-"))
        .collect()
}

/// A commit killed while it writes a file beside the real one (brokerd stopped by SIGKILL
/// midway) leaves its temporary file; brokerd's next start removes it, the real file is as it
/// was, and the change stays in the layer for the next commit, which lands it whole.
#[test]
fn a_commit_killed_midway_leaves_no_temporary_file() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let base = fs::canonicalize(tmp.path()).expect("canonical");
    let (real, home) = (base.join("real"), base.join("home"));
    fs::create_dir_all(&real).expect("mkdir");
    fs::write(real.join("big"), "the host's\n").expect("write");
    let stage = Arc::new(Stage::new(&home, 1 << 40, 0));
    let layer = stage
        .prepare(&Ident::fixed("s1"), "g", &real)
        .expect("prepare");
    fs::write(layer.upper.join("big"), vec![b'x'; 32 << 20]).expect("write");
    stage.record_first(&layer).expect("record");
    let mut child = std::process::Command::new(std::env::current_exe().expect("exe"))
        .args([
            "--exact",
            "stage::commit::tests::races::a_commit_to_be_killed",
            "--ignored",
            "--test-threads=1",
        ])
        .env("BOXMAKER_TEST_HOME", &home)
        .env("BOXMAKER_TEST_REAL", &real)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    let until = std::time::Instant::now() + Duration::from_secs(60);
    while temporaries(&real).is_empty() && std::time::Instant::now() < until {
        if child.try_wait().expect("wait").is_some() {
            break;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(
        temporaries(&real).len(),
        1,
        "the commit was not caught midway"
    );
    // brokerd's start.
    assert!(stage.finish_interrupted().is_empty());
    assert_eq!(temporaries(&real), Vec::<String>::new());
    assert_eq!(
        fs::read_to_string(real.join("big")).expect("read"),
        "the host's\n"
    );
    let found = listed(&stage, &layer);
    let report = commit(&layer, &found, None, false, |_| None).expect("commit");
    assert_eq!(report.landed.len(), 1, "{report:?}");
    assert_eq!(
        fs::metadata(real.join("big")).expect("stat").len(),
        32 << 20
    );
    assert_eq!(temporaries(&real), Vec::<String>::new());
}

/// Killed just after it exchanged the new file with the real one (the real one under the
/// temporary name, not yet checked): the next start puts the real one back, and removes the
/// commit's own.
#[test]
fn a_commit_killed_after_its_exchange_puts_the_real_entry_back() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let base = fs::canonicalize(tmp.path()).expect("canonical");
    let real = base.join("real");
    fs::create_dir_all(&real).expect("mkdir");
    fs::write(real.join("f"), "the host's\n").expect("write");
    let stage = Arc::new(Stage::new(&base.join("home"), 1 << 30, 0));
    let layer = stage
        .prepare(&Ident::fixed("s1"), "g", &real)
        .expect("prepare");
    fs::write(layer.upper.join("f"), "the session's\n").expect("write");
    stage.record_first(&layer).expect("record");
    // What the killed commit left: its note, and the two exchanged.
    fs::write(layer.dir.join("commit.pending"), "0123456789ab").expect("note");
    let tmp_name = real.join(".boxmaker-commit-0123456789ab-feed-f");
    fs::write(&tmp_name, "the session's\n").expect("write");
    exchange(&tmp_name, &real.join("f")).expect("exchange");
    assert!(stage.finish_interrupted().is_empty());
    assert_eq!(temporaries(&real), Vec::<String>::new());
    assert_eq!(
        fs::read_to_string(real.join("f")).expect("read"),
        "the host's\n"
    );
    assert!(!layer.dir.join("commit.pending").exists());
}
