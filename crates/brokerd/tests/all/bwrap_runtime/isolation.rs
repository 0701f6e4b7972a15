//! What a bwrap sandbox cannot reach or change: a grant directory swapped between two calls,
//! a read-only directory under a writable parent, brokerd's environment, address space
//! randomisation, and setuid or setgid bits (docs/design.md#the-bwrap-runner).

use super::*;

/// A grant directory swapped for a symlink (or another directory) between two calls: the next
/// sandbox is refused with the directory's name and never sees what the link points to.
#[test]
fn a_swapped_grant_directory_is_refused_by_name() {
    if !bwrap_works() {
        return;
    }
    let w = world();
    let rt = runtime(&w, "");
    let inner = w.work.join("inner");
    std::fs::create_dir(&inner).expect("inner");
    std::fs::write(inner.join("mine.txt"), "granted\n").expect("file");
    let mounts = ro(&inner);
    let cmd = format!("cat {}/mine.txt; ls {}", inner.display(), inner.display());
    assert!(content(rt.run(&shell(&cmd, mounts.clone()))).contains("granted"));

    let away = w.work.join("away");
    std::fs::rename(&inner, &away).expect("move away");
    std::os::unix::fs::symlink("/", &inner).expect("link to /");
    let swapped = rt.run(&shell(&cmd, mounts.clone()));
    assert_eq!(
        swapped.map(|o| o.content),
        Err(RunError::MountChanged(MountChanged {
            path: inner.clone(),
            why: MountTrouble::Symlink,
        }))
    );
    // A link back to the very same directory is refused too: no path is followed.
    std::fs::remove_file(&inner).expect("unlink");
    std::os::unix::fs::symlink(&away, &inner).expect("link to the same dir");
    assert!(matches!(
        rt.run(&shell(&cmd, mounts.clone())),
        Err(RunError::MountChanged(MountChanged {
            why: MountTrouble::Symlink,
            ..
        }))
    ));
    std::fs::remove_file(&inner).expect("unlink");
    std::fs::create_dir(&inner).expect("a new directory");
    assert!(matches!(
        rt.run(&shell(&cmd, mounts.clone())),
        Err(RunError::MountChanged(MountChanged {
            why: MountTrouble::Replaced,
            ..
        }))
    ));
    // Put back, the same directory runs again.
    std::fs::remove_dir(&inner).expect("rmdir");
    std::fs::rename(&away, &inner).expect("move back");
    assert!(content(rt.run(&shell(&cmd, mounts))).contains("granted"));
}

/// bwrap binds a parent before its children whatever the grant's order, so a writable parent
/// never covers a read-only directory inside it.
#[test]
fn a_writable_parent_does_not_cover_a_read_only_child() {
    if !bwrap_works() {
        return;
    }
    let w = world();
    let rt = runtime(&w, "");
    let child = w.work.join("ro");
    std::fs::create_dir(&child).expect("child");
    let mut mounts = ro(&child);
    mounts.extend(rw(&w.work));
    let cmd = format!(
        "touch {}/x 2>&1; touch {}/y && echo parent-written",
        child.display(),
        w.work.display()
    );
    let out = content(rt.run(&shell(&cmd, mounts)));
    assert!(out.contains("/x: Read-only file system"), "{out}");
    assert!(out.contains("parent-written"), "{out}");
    assert!(!child.join("x").exists());
}

/// Nothing of brokerd's environment is readable anywhere in the sandbox: bwrap's own PID 1
/// in the sandbox keeps the environment bwrap was started with.
#[test]
fn the_sandbox_sees_nothing_of_brokerd_s_environment() {
    if !bwrap_works() {
        return;
    }
    const CANARY: &str = "BOXMAKER_TEST_CANARY";
    // The test binary stands for brokerd: what it has, bwrap's parent has.
    std::env::set_var(CANARY, "a-secret-token");
    let w = world();
    let rt = runtime(&w, "");
    let cmd = "for f in /proc/[0-9]*/environ; do echo \"== $f\"; tr '\\0' '\\n' < $f; echo; done";
    let out = content(rt.run(&shell(cmd, Vec::new())));
    // The reads work (so the test can fail): bwrap's PID 1 and the tool's own environment.
    assert!(out.contains("== /proc/1/environ"), "{out}");
    assert!(out.contains("HOME=/tmp"), "{out}");
    assert!(
        !out.contains(CANARY) && !out.contains("a-secret-token"),
        "{out}"
    );
    assert!(
        !out.contains("PATH=/usr") && !out.contains("USER="),
        "{out}"
    );
}

/// Address space randomisation cannot be switched off in a sandbox: `setarch -R` (busybox's
/// `linux64 -R`, personality `ADDR_NO_RANDOMIZE`) fails with EPERM and runs nothing, while the
/// default personality and the query still work (docs/design.md#the-bwrap-runner).
#[test]
fn address_randomisation_cannot_be_switched_off() {
    if !bwrap_works() {
        return;
    }
    let w = world();
    let rt = runtime(&w, "");
    let cmd = "busybox linux64 -R cat /proc/self/personality 2>&1 || echo no-randomize-refused; \
               busybox linux64 cat /proc/self/personality; cat /proc/self/personality";
    let out = content(rt.run(&shell(cmd, Vec::new())));
    assert!(
        out.contains("personality(0x40000): Operation not permitted")
            && out.contains("no-randomize-refused"),
        "{out}"
    );
    assert!(
        !out.contains("00040000"),
        "ran without randomisation: {out}"
    );
    assert!(out.contains("00000000\n00000000\n"), "{out}");
}

/// A sandbox cannot leave a setuid or setgid file in a directory it may write (a setuid
/// program of the service user there would run as it for anyone): chmod, install and a
/// creation mode with either bit fail, and the plain mode still works
/// (docs/design.md#the-bwrap-runner).
#[test]
fn a_sandbox_cannot_set_setuid_or_setgid() {
    if !bwrap_works() {
        return;
    }
    let w = world();
    let rt = runtime(&w, "");
    let out = content(rt.run(&shell(
        &format!(
            "cd {} && echo x > s && chmod 4755 s; echo u=$?; chmod g+s s; echo g=$?; \
             mkdir d; chmod 2775 d; echo d=$?; chmod 755 s; echo p=$?; \
             busybox install -m 4755 s t; echo i=$?",
            w.work.display()
        ),
        rw(&w.work),
    )));
    assert!(
        out.contains("u=1\n")
            && out.contains("g=1\n")
            && out.contains("d=1\n")
            && out.contains("p=0\n"),
        "{out}"
    );
    use std::os::unix::fs::PermissionsExt;
    for name in ["s", "t", "d"] {
        let Ok(m) = std::fs::symlink_metadata(w.work.join(name)) else {
            continue;
        };
        assert_eq!(m.permissions().mode() & 0o6000, 0, "{name}: {out}");
    }
}
