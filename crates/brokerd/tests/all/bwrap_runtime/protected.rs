//! Protected targets in a real bwrap sandbox (docs/design.md#protected-targets).

use super::*;

/// A writable mount's protected targets are bound read-only over it, and the directories
/// between the grant directory and each target are pinned (bound onto themselves): whatever
/// the command, vendored and generated files cannot be written, deleted, renamed or replaced,
/// neither can a directory holding one be renamed, removed or replaced by a link, and nothing
/// in the sandbox can unmount or cover those mounts; the rest of the directory stays writable
/// (docs/design.md#protected-targets).
#[test]
fn protected_targets_hold_against_any_command() {
    if !bwrap_works() {
        return;
    }
    let w = world();
    let rt = runtime(&w, "");
    // The tree each attack starts from: the grant directory holds only notes.txt before.
    let setup = |work: &Path| {
        for e in std::fs::read_dir(work).expect("read_dir").flatten() {
            let p = e.path();
            if e.file_name() != "notes.txt" {
                let _ = std::fs::remove_file(&p).or_else(|_| std::fs::remove_dir_all(&p));
            }
        }
        let _ = std::fs::remove_dir_all(work.join("../src.old"));
        std::fs::create_dir_all(work.join("vendor/lib")).expect("vendor");
        std::fs::write(work.join("vendor/lib/a.c"), "int a;\n").expect("a.c");
        std::fs::create_dir_all(work.join("src")).expect("src");
        std::fs::write(work.join("src/gen.rs"), "// @generated\nfn x() {}\n").expect("gen.rs");
        std::fs::create_dir_all(work.join("build/tmp")).expect("build/tmp");
        std::fs::write(work.join("build/tmp/o.o"), "obj\n").expect("o.o");
        std::fs::create_dir_all(work.join("a/b/third_party")).expect("third_party");
        std::fs::write(work.join("a/b/third_party/l.h"), "#define L\n").expect("l.h");
    };
    setup(&w.work);
    // What must not change: the targets, what is in them, and every directory on the way.
    let held = |p: &str| {
        ["vendor", "src/gen.rs", "build/tmp", "a/b/third_party"]
            .iter()
            .any(|t| p == *t || p.starts_with(&format!("{t}/")) || t.starts_with(&format!("{p}/")))
    };
    let held_of = |dir: &Path| -> Vec<(String, String)> {
        snapshot(dir).into_iter().filter(|(p, _)| held(p)).collect()
    };
    let mut mounts = rw(&w.work);
    mounts[0].protect = true;
    let attacks = [
        "echo x > vendor/lib/a.c",
        "rm -f vendor/lib/a.c",
        "rm -rf vendor",
        "mv vendor v2",
        "mv src/gen.rs src/gen2.rs",
        "rm -f src/gen.rs",
        "echo y >> src/gen.rs",
        "echo z > src/new.rs && mv src/new.rs src/gen.rs",
        "ln -sf /etc/passwd src/gen.rs",
        "cp notes.txt vendor/lib/b.c",
        "chmod 777 src/gen.rs",
        "touch -d 2000-01-01 vendor/lib/a.c",
        "ln src/gen.rs hard.rs && echo x > hard.rs",
        // A directory holding a protected file: renamed, replaced, or replaced by a link.
        "mv src s.old && mkdir src && echo x > src/gen.rs",
        "mv src s.old; ln -s s.old src",
        "mv src/ ../src.old",
        "rm -rf src",
        "rmdir src",
        // A directory holding a protected directory, at each level above it.
        "mv build b2 && mkdir -p build/tmp && echo x > build/tmp/o.o",
        "mv build b2; ln -s /etc build",
        "mv a a2 && mkdir -p a/b/third_party && echo x > a/b/third_party/l.h",
        "mv a/b a/c && mkdir -p a/b/third_party && echo x > a/b/third_party/l.h",
        "mv a/b/ b; ln -s ../b a/b",
        "rm -rf a/b && mkdir -p a/b/third_party",
        "rmdir a/b/third_party",
        // The mounts themselves: nothing in the sandbox may unmount, cover or move them.
        "umount src/gen.rs; echo x > src/gen.rs",
        "umount -l vendor; rm -rf vendor",
        "umount -l src; mv src s.old",
        "mount -t tmpfs none src && echo x > src/gen.rs",
        "mount --bind notes.txt src/gen.rs",
        "mount -o remount,rw src/gen.rs && echo x > src/gen.rs",
        "unshare -rm sh -c 'umount -l src && mv src s.old'",
        "nsenter -t 1 -m umount -l src",
    ];
    let mut changed = Vec::new();
    for attack in attacks {
        let before = held_of(&w.work);
        let out = content(rt.run(&shell(
            &format!("cd {} && {attack}; echo done", w.work.display()),
            mounts.clone(),
        )));
        assert!(out.contains("done"), "{attack}: {out}");
        if held_of(&w.work) != before {
            changed.push(format!("{attack}: {:?}; {out}", held_of(&w.work)));
        }
        setup(&w.work);
    }
    assert!(
        changed.is_empty(),
        "changed a protected target or a directory holding one:\n{}",
        changed.join("\n")
    );
    // Nothing in the sandbox may mount or unmount: no capability, and the calls are denied.
    let out = content(rt.run(&shell(
        &format!("cd {} && umount src/gen.rs; echo rc=$?", w.work.display()),
        mounts.clone(),
    )));
    assert!(out.contains("rc=1") || out.contains("rc=255"), "{out}");
    assert!(!out.contains("rc=0"), "{out}");
    // The rest stays writable, in the pinned directories too.
    let out = content(rt.run(&shell(
        &format!(
            "cd {} && echo ok > src/main.rs && mkdir -p a/b/c && echo ok > a/b/c/x && cat src/main.rs a/b/c/x",
            w.work.display()
        ),
        mounts.clone(),
    )));
    assert!(out.starts_with("ok\nok\n"), "{out}");
}
