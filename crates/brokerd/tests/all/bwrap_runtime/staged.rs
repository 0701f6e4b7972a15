//! Staged grant directories in a real bwrap sandbox: the session's layer over the real
//! directory, its byte bound, and the overlays brokerd mounts and unmounts for each call
//! (docs/design.md#staged-writes-and-owners).

use super::*;

/// A layer's directories under `layer`, made.
fn layer_at(layer: &Path) -> brokerd::runner::StageMount {
    let stage = brokerd::runner::StageMount {
        upper: layer.join("upper"),
        work: layer.join("work"),
        merged: layer.join("merged"),
    };
    for d in [&stage.upper, &stage.work, &stage.merged] {
        std::fs::create_dir_all(d).expect("layer dir");
    }
    stage
}

/// `max_staged_bytes` holds during a call: a call that writes its layer past the bytes it
/// may hold is stopped, the real directory untouched, and what it wrote so far stays in the
/// layer (docs/design.md#staged-writes-and-owners).
#[test]
fn a_staged_call_that_passes_the_bound_is_stopped() {
    if !bwrap_works() {
        return;
    }
    let w = world();
    let rt = runtime(&w, "");
    let stage = layer_at(&w.home.join("layer"));
    let before = snapshot(&w.work);
    let mut mounts = rw(&w.work);
    mounts[0].stage = Some(stage.clone());
    let mut s = shell(
        &format!(
            "cd {} && for i in $(seq 1 40); do head -c 262144 /dev/zero > f$i; sleep 0.1; done; echo done",
            w.work.display()
        ),
        mounts,
    );
    s.staged_limit = Some(1 << 20);
    let started = std::time::Instant::now();
    assert_eq!(rt.run(&s), Err(RunError::Failed(Failure::StagedFull)));
    // Stopped within a look or two of passing the bound (1 MiB after about 0.4 s).
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(snapshot(&w.work), before, "the real directory changed");
    let held = brokerd::stage::dir_bytes(&stage.upper);
    assert!(held > 1 << 20 && held < 4 << 20, "{held} bytes staged");
}

/// A staged grant directory: the session's layer over the real one, mounted in brokerd's
/// staging namespaces. Whatever the command does lands in the layer and the real directory keeps
/// what it had; a read-only call sees the layer and cannot write
/// (docs/design.md#staged-writes-and-owners).
#[test]
fn a_staged_directory_writes_only_its_layer() {
    if !bwrap_works() {
        return;
    }
    let w = world();
    let rt = runtime(&w, "");
    let layer = w.home.join("layer");
    let stage = layer_at(&layer);
    std::fs::write(w.work.join("old.txt"), "old\n").expect("old");
    let before = snapshot(&w.work);
    let mut mounts = rw(&w.work);
    mounts[0].stage = Some(stage.clone());
    let out = content(rt.run(&shell(
        &format!(
            "cd {} && rm -rf * && echo new > new.txt && mkdir d && echo x > d/x && ls && echo done",
            w.work.display()
        ),
        mounts.clone(),
    )));
    assert_eq!(out, "d\nnew.txt\ndone\n\n[exit 0]", "{out}");
    assert_eq!(snapshot(&w.work), before, "the real directory changed");
    assert_eq!(
        std::fs::read_to_string(stage.upper.join("new.txt")).expect("staged"),
        "new\n"
    );
    // Once its sandbox is gone the call's overlay is unmounted, its volatile mark (no sync of
    // the whole file system at its unmount) cleared, also when the host restarted in between,
    // and a fresh one mounted for the next call: that one's mark is there.
    let mark = stage.work.join("work/incompat/volatile");
    assert!(std::fs::symlink_metadata(&mark).is_ok(), "no volatile mark");
    let boot = layer.join("volatile-boot");
    let out = content(rt.run(&shell(
        "grep ' - overlay ' /proc/self/mountinfo",
        mounts.clone(),
    )));
    assert!(
        out.contains(&format!(" {} ", w.work.display()))
            && out.contains(",userxattr")
            // Shown as `fsync=volatile` since Linux 6.x.
            && out.contains("volatile"),
        "{out}"
    );
    for noted in [None, Some("a boot before this one\n")] {
        if let Some(n) = noted {
            std::fs::write(&boot, n).expect("boot");
        }
        let out = content(rt.run(&shell(
            &format!(
                "cd {} && echo again >> new.txt && cat new.txt",
                w.work.display()
            ),
            mounts.clone(),
        )));
        assert!(out.starts_with("new\nagain\n"), "{out}");
        let now = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").expect("boot id");
        assert_eq!(std::fs::read_to_string(&boot).expect("noted"), now);
    }
    assert_eq!(snapshot(&w.work), before, "the real directory changed");
    // The next call of the session sees the layer; a read-only one cannot write it.
    let mut ro_mounts = ro(&w.work);
    ro_mounts[0].stage = Some(stage.clone());
    let out = content(rt.run(&shell(
        &format!(
            "cd {} && cat new.txt && ls && echo y > y.txt; echo rc=$?",
            w.work.display()
        ),
        ro_mounts,
    )));
    assert!(out.starts_with("new\nagain\nagain\nd\nnew.txt\n"), "{out}");
    assert!(
        out.contains("Read-only file system") && out.contains("rc=1"),
        "{out}"
    );
    assert!(!stage.upper.join("y.txt").exists());
    // The read-only call took the overlay mounted for it and mounted its own: the next
    // writing call clears the mark that one left and mounts afresh.
    let out = content(rt.run(&shell(
        &format!(
            "cd {} && echo third >> new.txt && cat new.txt",
            w.work.display()
        ),
        mounts.clone(),
    )));
    assert_eq!(out, "new\nagain\nagain\nthird\n\n[exit 0]");
    // A layer that cannot be mounted is unavailable, never the real directory.
    let mut broken = rw(&w.work);
    broken[0].stage = Some(brokerd::runner::StageMount {
        upper: layer.join("missing"),
        ..stage
    });
    assert_eq!(
        rt.run(&shell("echo hi > x.txt", broken)),
        Err(RunError::Unavailable(Unavailable::LayerUnavailable))
    );
    assert!(!w.work.join("x.txt").exists());
}

/// The processes of this test binary's children named `bwrap` whose mount table names
/// `path`: the bwraps of the staging mount namespace that holds an overlay at `path`.
fn bwraps_seeing(path: &Path) -> Vec<String> {
    let me = std::process::id().to_string();
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").expect("proc").flatten() {
        let dir = e.path();
        let Ok(stat) = std::fs::read_to_string(dir.join("stat")) else {
            continue;
        };
        // pid (comm) state ppid ...
        let Some((comm, rest)) = stat.split_once(") ") else {
            continue;
        };
        let ppid = rest.split(' ').nth(1).unwrap_or("");
        if ppid != me || !comm.ends_with("(bwrap") {
            continue;
        }
        let table = std::fs::read_to_string(dir.join("mountinfo")).unwrap_or_default();
        if table.contains(&format!(" {} ", path.display())) {
            found.push(table);
        }
    }
    found
}

/// The mount table of a long staged call on `mounts` (`sleep 3`), read once its bwrap shows an
/// overlay at `merged`, and the call (which answers "slept").
fn table_while_running(
    rt: &std::sync::Arc<BwrapRuntime>,
    mounts: &[Mount],
    merged: &Path,
) -> (String, std::thread::JoinHandle<String>) {
    let long = {
        let (rt, mounts) = (rt.clone(), mounts.to_vec());
        std::thread::spawn(move || content(rt.run(&shell("sleep 3; echo slept", mounts))))
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut tables = loop {
        let t = bwraps_seeing(merged);
        if !t.is_empty() || std::time::Instant::now() > deadline {
            break t;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(tables.len(), 1, "no bwrap of the long call was found");
    (tables.remove(0), long)
}

/// No overlay serves two staged calls: each call's is unmounted once its sandbox is gone and a
/// fresh one, untouched until the layer's next call, mounted in brokerd's staging mount
/// namespace. A file the host replaced between two calls (as an editor saves) reads as it is
/// now, not as overlayfs had looked it up, and calls leave one overlay per layer, seen by
/// neither the host nor another layer's sandbox (docs/design.md#staged-writes-and-owners).
#[test]
fn a_staged_call_sees_the_real_directory_as_it_is_now() {
    if !bwrap_works() {
        return;
    }
    let w = world();
    let rt = std::sync::Arc::new(runtime(&w, ""));
    let stage_of = |name: &str| layer_at(&w.home.join(name));
    let (a, b) = (stage_of("layer-a"), stage_of("layer-b"));
    let mut on_a = rw(&w.work);
    on_a[0].stage = Some(a.clone());
    let file = w.work.join("notes.txt");
    std::fs::write(&file, "first\n").expect("notes");
    let read = format!("cat {}", file.display());
    assert_eq!(
        content(rt.run(&shell(&read, on_a.clone()))),
        "first\n\n[exit 0]"
    );
    // The host saves a new version beside it and renames it over the old.
    let beside = w.work.join(".notes.txt.new");
    std::fs::write(&beside, "second\n").expect("new notes");
    std::fs::rename(&beside, &file).expect("rename over");
    assert_eq!(
        content(rt.run(&shell(&read, on_a.clone()))),
        "second\n\n[exit 0]"
    );
    // While a call of another layer runs, the staging namespace holds its overlay only.
    let mut on_b = rw(&w.work);
    on_b[0].stage = Some(b.clone());
    let (table, long) = table_while_running(&rt, &on_b, &b.merged);
    // Layer a's two calls left one overlay mounted, the one for its next call, not one each.
    assert_eq!(
        table.matches(&format!(" {} ", a.merged.display())).count(),
        1,
        "{table}"
    );
    // Neither the host nor a sandbox of layer a, made meanwhile from that same namespace, sees
    // layer b's overlay: only its own.
    let host = std::fs::read_to_string("/proc/self/mountinfo").expect("host table");
    assert!(
        !host.contains(&format!(" {} ", b.merged.display())),
        "{host}"
    );
    let mine = content(rt.run(&shell(
        "grep ' - overlay ' /proc/self/mountinfo",
        on_a.clone(),
    )));
    assert_eq!(mine.matches(" - overlay ").count(), 1, "{mine}");
    assert!(!mine.contains("layer-b"), "{mine}");
    assert_eq!(long.join().expect("long call"), "slept\n\n[exit 0]");
    // Layer a discarded whole while an overlay waits for its next call (its directories
    // removed, then made again by that call's preparation): that call mounts over the new
    // directories, and nothing of the old layer shows.
    let staged = format!("{}/staged.txt", w.work.display());
    assert_eq!(
        content(rt.run(&shell(&format!("echo kept > {staged}"), on_a.clone()))),
        "\n[exit 0]"
    );
    assert!(a.upper.join("staged.txt").is_file());
    std::fs::remove_dir_all(w.home.join("layer-a")).expect("discard layer a");
    let a_again = stage_of("layer-a");
    assert_eq!(a_again, a);
    let out = content(rt.run(&shell(
        &format!(
            "cat {staged}; echo rc=$?; echo new > {}/fresh.txt",
            w.work.display()
        ),
        on_a,
    )));
    assert!(out.contains("rc=1"), "{out}");
    assert!(!a.upper.join("staged.txt").exists());
    assert!(
        a.upper.join("fresh.txt").is_file(),
        "the write missed the layer"
    );
    // The layer's upper directory swapped for a link while an overlay waits over it: the next
    // call is unavailable, and writes neither through the link nor into the old directory.
    let elsewhere = w.home.join("elsewhere");
    std::fs::create_dir(&elsewhere).expect("elsewhere");
    let old = w.home.join("layer-a-upper-old");
    std::fs::rename(&a.upper, &old).expect("move upper");
    std::os::unix::fs::symlink(&elsewhere, &a.upper).expect("link upper");
    let mut again = rw(&w.work);
    again[0].stage = Some(a.clone());
    assert_eq!(
        rt.run(&shell(
            &format!("echo swapped > {}/swapped.txt", w.work.display()),
            again
        )),
        Err(RunError::Unavailable(Unavailable::LayerUnavailable))
    );
    assert_eq!(std::fs::read_dir(&elsewhere).expect("elsewhere").count(), 0);
    assert!(!old.join("swapped.txt").exists() && !w.work.join("swapped.txt").exists());
}

/// An overlay mounted for a layer's next call that no call takes is unmounted once it has
/// waited its time, by brokerd's own clock, with no other staged call to do it: an idle brokerd
/// does not hold a staged grant's file system busy for longer than that. The layer's next call
/// mounts its own and sees what the session staged (docs/design.md#staged-writes-and-owners).
#[test]
fn an_overlay_no_call_takes_is_unmounted_in_its_time() {
    if !bwrap_works() {
        return;
    }
    let w = world();
    // Longer than the first long call below: no staged call ends between the overlay's due time
    // and the look that follows it.
    let keep = Duration::from_secs(5);
    let rt = std::sync::Arc::new(runtime(&w, "").with_ready_keep(keep));
    let stage_of = |name: &str| layer_at(&w.home.join(name));
    let (a, b) = (stage_of("layer-a"), stage_of("layer-b"));
    let (mut on_a, mut on_b) = (rw(&w.work), rw(&w.work));
    on_a[0].stage = Some(a.clone());
    on_b[0].stage = Some(b.clone());
    let staged = format!("{}/staged.txt", w.work.display());
    let written = std::time::Instant::now();
    assert_eq!(
        content(rt.run(&shell(&format!("echo kept > {staged}"), on_a.clone()))),
        "\n[exit 0]"
    );
    let a_at = format!(" {} ", a.merged.display());
    let (table, long) = table_while_running(&rt, &on_b, &b.merged);
    assert!(
        written.elapsed() < keep,
        "the host was too slow to see the overlay waiting"
    );
    assert_eq!(table.matches(&a_at).count(), 1, "{table}");
    assert_eq!(long.join().expect("long call"), "slept\n\n[exit 0]");
    // Nothing staged runs while the overlays wait out their time.
    std::thread::sleep(keep + Duration::from_secs(1));
    let (table, long) = table_while_running(&rt, &on_b, &b.merged);
    assert_eq!(table.matches(&a_at).count(), 0, "{table}");
    assert_eq!(
        table.matches(&format!(" {} ", b.merged.display())).count(),
        1,
        "{table}"
    );
    assert_eq!(long.join().expect("long call"), "slept\n\n[exit 0]");
    assert_eq!(
        content(rt.run(&shell(&format!("cat {staged}"), on_a))),
        "kept\n\n[exit 0]"
    );
}
