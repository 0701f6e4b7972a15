use super::sweep::is_left_sandbox;
use super::*;
use std::os::unix::process::CommandExt;
use std::process::Stdio;

/// A runtime on a delegated subtree that is a plain directory: new groups get only the
/// files listed, as a host without swap accounting or the cpu controller would give them.
fn on_fake_subtree(enforce: bool, files: &[&str]) -> (tempfile::TempDir, BwrapRuntime) {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = format!(
        "[runner]\nbackend = \"bwrap\"\nenforce_limits = {enforce}\nhome = \"{}\"\n[bwrap]\ntools_root = \"/nonexistent\"\n",
        dir.path().join("home").display()
    );
    let cfg = boxmaker_config::parse(&text, "t.toml").expect("config");
    let rt = BwrapRuntime::new(
        cfg.runner.as_ref().expect("runner"),
        cfg.bwrap.as_ref().expect("bwrap"),
    );
    let root = dir.path().join("subtree");
    for name in ["s-c-1", "s-c-2"] {
        let group = root.join(format!("{}{name}", cgroup::SANDBOX_PREFIX));
        std::fs::create_dir_all(&group).expect("group");
        for f in files {
            std::fs::write(group.join(f), "").expect("file");
        }
    }
    assert!(rt.mechanism.set(Ok(Mechanism::Delegated { root })).is_ok());
    (dir, rt)
}

/// With `enforce_limits = true` a sandbox whose group lacks a knob (here memory.swap.max:
/// no swap accounting) is not made: the call would answer unavailable. With `false` it is
/// placed, and the weaker confinement is noted for `status`.
#[test]
fn a_knob_that_cannot_be_set_is_no_sandbox_when_limits_are_enforced() {
    let limits = CgroupLimits::new(512 << 20, 128);
    let (_d, rt) = on_fake_subtree(true, &["cgroup.procs", "cpu.max"]);
    match rt.placement("s-c-1", limits) {
        Err(why) => assert!(
            why.contains("memory.swap.max cannot be set") && why.contains("enforce_limits = true"),
            "{why}"
        ),
        Ok(_) => panic!("placed without memory.swap.max"),
    }
    assert!(rt.weakened().is_empty());
    let (_d, rt) = on_fake_subtree(true, &["cgroup.procs", "cpu.max", "memory.swap.max"]);
    assert!(matches!(
        rt.placement("s-c-1", limits),
        Ok(Placement::Group(_))
    ));
    let (_d, rt) = on_fake_subtree(false, &["cgroup.procs"]);
    assert!(matches!(
        rt.placement("s-c-2", limits),
        Ok(Placement::Group(_))
    ));
    let weakened = rt.weakened();
    assert_eq!(weakened.len(), 2, "{weakened:?}");
    assert!(weakened[0].starts_with("memory.swap.max "), "{weakened:?}");
}

#[test]
fn a_left_sandbox_is_told_by_user_program_and_tools_root() {
    let bwrap = Path::new("/usr/bin/bwrap");
    let marker = Path::new("/var/lib/boxmaker/tools-root/bin");
    let status = |uid: &str| format!("Name:\tbwrap\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n");
    let ours =
        b"/usr/bin/bwrap\0--unshare-all\0--ro-bind\0/var/lib/boxmaker/tools-root/bin\0/bin\0";
    assert!(is_left_sandbox(&status("990"), ours, 990, bwrap, marker));
    // Another user's, another program, another tools root, the marker as argv[0], nothing.
    assert!(!is_left_sandbox(&status("1000"), ours, 990, bwrap, marker));
    let other_program = b"/bin/bwrap\0--ro-bind\0/var/lib/boxmaker/tools-root/bin\0/bin\0";
    assert!(!is_left_sandbox(
        &status("990"),
        other_program,
        990,
        bwrap,
        marker
    ));
    // A bare name configured: found in PATH by systemd-run for a scope.
    let bare = Path::new("bwrap");
    assert!(is_left_sandbox(
        &status("990"),
        other_program,
        990,
        bare,
        marker
    ));
    let not_bwrap = b"/bin/bwrapper\0--ro-bind\0/var/lib/boxmaker/tools-root/bin\0";
    assert!(!is_left_sandbox(
        &status("990"),
        not_bwrap,
        990,
        bare,
        marker
    ));
    let other_root = b"/usr/bin/bwrap\0--ro-bind\0/opt/root/bin\0/bin\0";
    assert!(!is_left_sandbox(
        &status("990"),
        other_root,
        990,
        bwrap,
        marker
    ));
    let prefix_only = b"/usr/bin/bwrap\0--ro-bind\0/var/lib/boxmaker/tools-root/bin/x\0";
    assert!(!is_left_sandbox(
        &status("990"),
        prefix_only,
        990,
        bwrap,
        marker
    ));
    assert!(!is_left_sandbox("", ours, 990, bwrap, marker));
    assert!(!is_left_sandbox(&status("990"), b"", 990, bwrap, marker));
}

const STAND_IN: &str = "BOXMAKER_TEST_STAND_IN_SECONDS";

/// A process for the sweep to find: sleeps when started by the test below, returns at
/// once when `--ignored` tests are run by hand.
#[test]
#[ignore = "started by the_sweep_kills_a_left_sandbox_and_nothing_else"]
fn a_sandbox_stand_in() {
    if let Some(secs) = std::env::var(STAND_IN).ok().and_then(|s| s.parse().ok()) {
        std::thread::sleep(std::time::Duration::from_secs(secs));
    }
}

#[test]
#[allow(clippy::zombie_processes)]
fn the_sweep_kills_a_left_sandbox_and_nothing_else() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fake = dir.path().join("bwrap");
    let root = dir.path().join("tools-root");
    // This test program itself, named `fake` and with the marker among its arguments,
    // running only `a_sandbox_stand_in`, which then sleeps. (Not /bin/sh: where that is
    // busybox, as in Nix's build sandbox, the name picks the applet.)
    let start = |marker: &Path| {
        std::process::Command::new(std::env::current_exe().expect("test program"))
            .arg0(&fake)
            .args(["--exact", "runner::bwrap::tests::a_sandbox_stand_in"])
            .args(["--ignored", "--test-threads=1", "--quiet"])
            .arg(marker)
            .env(STAND_IN, "30")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("stand-in")
    };
    // spawn returns once the exec has begun, but the kernel sets the new program's
    // arguments a moment later: until then /proc shows an empty command line, and the
    // sweep would rightly pass the process by. Wait for the arguments to show.
    let started = |child: &std::process::Child, marker: &Path| {
        let path = format!("/proc/{}/cmdline", child.id());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            let cmdline = std::fs::read(&path).unwrap_or_default();
            if cmdline
                .split(|&b| b == 0)
                .any(|a| a == marker.as_os_str().as_bytes())
            {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        panic!("the stand-in never showed its arguments");
    };
    let mut left = start(&root.join("bin"));
    let mut other = start(&dir.path().join("elsewhere/bin"));
    started(&left, &root.join("bin"));
    started(&other, &dir.path().join("elsewhere/bin"));
    let (removed, failed) = sweep_sandboxes(&fake, [&root]);
    assert_eq!((removed, failed), (1, Vec::<String>::new()));
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(left.wait().expect("wait").signal(), Some(libc::SIGKILL));
    assert_eq!(other.try_wait().expect("try_wait"), None);
    // A toolset's tree is one more root whose sandboxes the sweep knows.
    let toolset = dir.path().join("elsewhere");
    let (removed, failed) = sweep_sandboxes(&fake, [&root, &toolset]);
    assert_eq!((removed, failed), (1, Vec::<String>::new()));
    assert_eq!(other.wait().expect("wait").signal(), Some(libc::SIGKILL));
}

#[test]
fn the_layout_leaves_out_the_sandbox_s_own_mount_points() {
    let root = tempfile::tempdir().expect("tempdir");
    for d in ["bin", "etc", "proc", "dev", "tmp", "run", "sys", "nix"] {
        std::fs::create_dir(root.path().join(d)).expect("dir");
    }
    std::fs::write(root.path().join("init"), "").expect("file");
    std::os::unix::fs::symlink("usr/lib", root.path().join("lib")).expect("link");
    let got = RootLayout::read(root.path()).expect("read");
    assert_eq!(
        got,
        RootLayout(vec![
            RootEntry::Bound("bin".into()),
            RootEntry::Bound("etc".into()),
            RootEntry::Bound("init".into()),
            RootEntry::Symlink("lib".into(), "usr/lib".into()),
            RootEntry::Bound("nix".into()),
        ])
    );
}

#[test]
fn bwrap_s_own_refusals_are_told_from_a_tool_s_exit_1() {
    let cfg = boxmaker_config::parse(
        "[runner]\nbackend = \"bwrap\"\nenforce_limits = false\n",
        "t.toml",
    )
    .expect("config");
    let rt = BwrapRuntime::new(
        cfg.runner.as_ref().expect("runner"),
        cfg.bwrap.as_ref().expect("bwrap"),
    );
    use std::os::unix::process::ExitStatusExt;
    let one = std::process::ExitStatus::from_raw(1 << 8);
    let zero = std::process::ExitStatus::from_raw(0);
    let userns = "bwrap: No permissions to create new namespace, likely because the kernel does not allow non-privileged user namespaces.\n";
    let cases: [(std::process::ExitStatus, &[u8], &str, Option<bool>); 7] = [
        (one, b"", userns, Some(true)),
        // Short of a resource this moment: this call's failure, not a terminal one.
        (
            one,
            b"",
            "bwrap: Creating new namespace failed: Resource temporarily unavailable\n",
            Some(false),
        ),
        (
            one,
            b"",
            "bwrap: Creating new namespace failed: No space left on device\n",
            Some(false),
        ),
        (
            one,
            b"",
            "bwrap: setting up uid map: Permission denied\n",
            Some(true),
        ),
        (
            one,
            b"",
            "bwrap: Can't find source path /srv/x: No such file or directory\n",
            Some(false),
        ),
        (one, b"read_file: /x: no such file\n", "", None),
        (zero, b"", "bwrap: whatever\n", None),
    ];
    for (status, out, err, want) in cases {
        let got = rt.setup_failure(status, out, err).map(|t| t.is_some());
        assert_eq!(got, want, "{err}");
    }
}

/// No filter for the architecture is a terminal failure, never a sandbox without one.
#[test]
fn no_seccomp_filter_is_terminal() {
    let got = seccomp_missing(None);
    assert!(
        matches!(&got, Some(Terminal::NoSeccomp(arch)) if arch == std::env::consts::ARCH),
        "{got:?}"
    );
    let program = seccomp::program();
    assert_eq!(seccomp_missing(program), None);
    #[cfg(target_arch = "x86_64")]
    assert!(program.is_some(), "x86_64 has its filter");
}

/// A tree with its own `/srv` and `/home` (a Debian toolset's): a grant directory below one is
/// not under a read-only bind bwrap cannot make its mount point in. The entry is made afresh
/// and its entries bound alike down the grant's path; the other entries stay bound whole,
/// and a grant that is an entry itself takes its place.
#[test]
fn a_tree_s_entries_leave_room_for_the_grants_below_them() {
    let root = tempfile::tempdir().expect("tempdir");
    let r = root.path();
    for d in ["bin", "srv", "home/user", "home/other", "opt", "var/lib"] {
        std::fs::create_dir_all(r.join(d)).expect("dir");
    }
    std::fs::write(r.join("home/user/.profile"), "").expect("file");
    std::os::unix::fs::symlink("../other", r.join("home/user/link")).expect("link");
    // A link on a grant's path (as Debian's /var/run is): a directory takes its place, at the
    // top level too (an ostree tree's /home -> var/home); a link no grant goes through stays.
    std::os::unix::fs::symlink("/run", r.join("var/run")).expect("link");
    std::os::unix::fs::symlink("var/mnt", r.join("mnt")).expect("link");
    std::os::unix::fs::symlink("usr/lib", r.join("lib")).expect("link");
    let cfg = boxmaker_config::parse(
        &format!(
            "[runner]\nbackend = \"bwrap\"\nenforce_limits = false\n[bwrap]\ntools_root = \"{}\"\n",
            r.display()
        ),
        "t.toml",
    )
    .expect("config");
    let rt = BwrapRuntime::new(
        cfg.runner.as_ref().expect("runner"),
        cfg.bwrap.as_ref().expect("bwrap"),
    );
    let layout = RootLayout::read(r).expect("read");
    let mounted = [
        Path::new("/srv/grant/rw"),
        Path::new("/home/user/proj"),
        Path::new("/opt"),
        Path::new("/var/run/x"),
        Path::new("/mnt/data"),
    ];
    let args: Vec<String> = rt
        .common_args(r, &layout, false, true, &mounted)
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let joined = args.join(" ");
    let at = |p: &str| r.join(p).display().to_string();
    let want = format!(
        "--ro-bind {bin} /bin --dir /home --ro-bind {other} /home/other --dir /home/user \
         --ro-bind {profile} /home/user/.profile --symlink ../other /home/user/link \
         --symlink usr/lib /lib --dir /mnt --dir /srv --dir /var --ro-bind {lib} /var/lib --dir /var/run --proc /proc",
        bin = at("bin"),
        other = at("home/other"),
        profile = at("home/user/.profile"),
        lib = at("var/lib"),
    );
    assert!(joined.contains(&want), "{joined}");
    // `/opt` is a grant itself: the tree's is not bound under it.
    assert!(!joined.contains("/opt"), "{joined}");
    // Without a grant below it, every entry is bound whole, as before.
    let whole = rt.common_args(r, &layout, false, true, &[]);
    assert!(!whole.iter().any(|a| a == "--dir"), "{whole:?}");
}

/// A toolset's `store_paths` (docs/design.md#toolsets-on-nixos): each listed path directly
/// under the store is bound read-only at its own path after the tree's entries, and nothing
/// else of the store; a line of any other shape, a path that is not there or a tree with its
/// own `/nix` fails the toolset, naming the line.
#[test]
fn a_toolset_s_store_paths_are_bound_one_by_one_and_checked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    for p in ["aaa-git", "bbb-busybox", "ccc-unlisted"] {
        std::fs::create_dir_all(store.join(p)).expect("store path");
    }
    let tree = dir.path().join("tree");
    std::fs::create_dir_all(tree.join("bin")).expect("bin");
    let list = dir.path().join("store-paths");
    let at = |p: &str| store.join(p).display().to_string();
    std::fs::write(
        &list,
        format!(
            "{}\n{}\n\n{}\n",
            at("bbb-busybox"),
            at("aaa-git"),
            at("aaa-git")
        ),
    )
    .expect("list");
    let read = |text: &str| {
        std::fs::write(&list, text).expect("list");
        argv::read_store_paths(&list, &store).map_err(|e| e.to_string())
    };
    let listed = format!(
        "{}\n{}\n\n{}\n",
        at("bbb-busybox"),
        at("aaa-git"),
        at("aaa-git")
    );
    assert_eq!(
        read(&listed),
        Ok(vec![store.join("aaa-git"), store.join("bbb-busybox")])
    );
    let s = store.display();
    for bad in [
        format!("{s}\n"),
        format!("{s}/\n"),
        format!("{s}/aaa-git/bin\n"),
        format!("{s}/./aaa-git\n"),
        format!("{s}//aaa-git\n"),
        format!("{s}/aaa-git/\n"),
        format!("{s}/../store/aaa-git\n"),
        format!("{s}/.hidden\n"),
        format!("{}\n", dir.path().join("aaa-git").display()),
        "relative/aaa-git\n".to_owned(),
        "/etc\n".to_owned(),
        format!("{s}/not-there\n"),
    ] {
        let got = read(&format!("{}\n{bad}", at("aaa-git")));
        let err = got.expect_err(&bad);
        assert!(err.starts_with("line 2: "), "{bad:?}: {err}");
    }
    let long = format!("{}\n", at("aaa-git")).repeat(argv::MAX_STORE_PATHS + 1);
    assert!(read(&long).is_err());

    std::fs::write(&list, format!("{}\n{}\n", at("bbb-busybox"), at("aaa-git"))).expect("list");
    let cfg = boxmaker_config::parse(
        &format!(
            "[runner]\nbackend = \"bwrap\"\nenforce_limits = false\n[bwrap]\ntools_root = \"{}\"\n\
             [toolsets.t]\ntree = \"{}\"\nstore_paths = \"{}\"\n",
            dir.path().display(),
            tree.display(),
            list.display()
        ),
        "t.toml",
    )
    .expect("config");
    let toolset = cfg.toolsets.get("t").cloned();
    assert_eq!(
        toolset.as_ref().and_then(|t| t.store_paths.clone()),
        Some(list.clone())
    );
    let rt = BwrapRuntime::new(
        cfg.runner.as_ref().expect("runner"),
        cfg.bwrap.as_ref().expect("bwrap"),
    )
    .with_store(&store);
    let spec = crate::runner::toolset_spec(None, toolset.as_ref().expect("toolset"));
    let layout = rt.layout_of(&spec).expect("layout");
    let args: Vec<String> = rt
        .common_args(&tree, &layout, false, true, &[])
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let joined = args.join(" ");
    let want = format!(
        "--ro-bind {bin} /bin --ro-bind {git} {git} --ro-bind {bb} {bb} --proc /proc",
        bin = tree.join("bin").display(),
        git = at("aaa-git"),
        bb = at("bbb-busybox"),
    );
    assert!(joined.contains(&want), "{joined}");
    assert!(!joined.contains("ccc-unlisted"), "{joined}");

    std::fs::create_dir(tree.join("nix")).expect("nix");
    let err = rt.layout_of(&spec).expect_err("its own /nix");
    assert!(err.to_string().contains("its own /nix"), "{err}");
}
