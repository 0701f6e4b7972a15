//! Toolsets in a real bwrap sandbox: a toolset's tree as the sandbox's root, a Nix closure as
//! all it sees of the store, the environment shell's programs get, and a toolset built by
//! images/build-toolset.sh (docs/design.md#toolsets).

use super::*;

/// A toolset's tree beside `w`'s tools root: toolkit and busybox as the root has them, and a
/// file that says which tree the sandbox runs on.
fn toolset_tree(w: &World, name: &str) -> brokerd::config::Toolset {
    let tree = w.root.with_file_name(format!("toolset-{name}"));
    for d in ["bin", "etc", "tmp"] {
        std::fs::create_dir_all(tree.join(d)).expect("tree dir");
    }
    std::fs::copy(toolkit(), tree.join(&proto::tools::TOOLKIT[1..])).expect("toolkit");
    std::fs::copy(BUSYBOX, tree.join("bin/busybox")).expect("busybox");
    std::os::unix::fs::symlink("busybox", tree.join("bin/sh")).expect("sh");
    std::fs::write(tree.join("etc/tree"), format!("{name}\n")).expect("marker");
    brokerd::config::Toolset {
        name: name.into(),
        image: String::new(),
        tree: Some(tree),
        store_paths: None,
    }
}

/// A grant's toolset is the sandbox's `/`; a toolset whose tree is gone answers unavailable
/// with the toolset's runbook entry and never runs on the tools root; the toolset's check
/// passes on a tree with toolkit of brokerd's version and busybox, and fails on one without
/// (docs/design.md#toolsets).
#[test]
fn a_toolset_s_tree_is_the_sandbox_s_root_and_never_another() {
    if !bwrap_works() {
        return;
    }
    let w = world();
    std::fs::write(w.root.join("etc/tree"), "base\n").expect("marker");
    let c = toolset_tree(&w, "c");
    let rt = runtime(&w, "");
    let on = |toolset: Option<brokerd::config::Toolset>, command: &str| {
        let mut spec = shell(command, Vec::new());
        spec.toolset = toolset;
        rt.run(&spec)
    };
    assert_eq!(content(on(None, "cat /etc/tree")), "base\n\n[exit 0]");
    assert_eq!(
        content(on(Some(c.clone()), "cat /etc/tree")),
        "c\n\n[exit 0]"
    );

    let gone = brokerd::config::Toolset {
        tree: Some(w.root.with_file_name("toolset-gone")),
        ..c.clone()
    };
    assert_eq!(
        on(Some(gone.clone()), "cat /etc/tree"),
        Err(RunError::Unavailable(Unavailable::ToolsetUnavailable))
    );
    assert_eq!(
        Unavailable::ToolsetUnavailable.runbook(),
        "runbook/runner.md#toolset-unavailable"
    );

    // A tree removed after its first call: the toolset's failure, never the tools root.
    let d = toolset_tree(&w, "d");
    assert_eq!(
        content(on(Some(d.clone()), "cat /etc/tree")),
        "d\n\n[exit 0]"
    );
    std::fs::remove_dir_all(d.tree.as_ref().expect("tree")).expect("rm tree");
    assert_eq!(
        on(Some(d), "cat /etc/tree"),
        Err(RunError::Unavailable(Unavailable::ToolsetUnavailable))
    );

    let check = |t: &brokerd::config::Toolset| {
        let spec = brokerd::preflight::toolset_spec(None, t);
        brokerd::preflight::judge_toolset(Ok(rt.run(&spec)))
    };
    let passed = check(&c);
    assert!(passed.ok, "{}", passed.detail);
    assert!(!check(&gone).ok);
    // A tree whose sh says it is another shell (it runs commands all the same).
    let other = toolset_tree(&w, "other");
    let tree = other.tree.clone().expect("tree");
    std::fs::remove_file(tree.join("bin/sh")).expect("rm sh");
    let sh = "#!/bin/busybox ash\n[ \"$1\" = --help ] && { echo dash; exit 0; }\nexec /bin/busybox ash \"$@\"\n";
    std::fs::write(tree.join("bin/sh"), sh).expect("sh");
    let mut perm = std::fs::metadata(tree.join("bin/sh"))
        .expect("meta")
        .permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(tree.join("bin/sh"), perm).expect("chmod");
    assert_eq!(
        content(on(Some(other.clone()), "echo hi")),
        "hi\n\n[exit 0]"
    );
    let failed = check(&other);
    assert!(!failed.ok, "{}", failed.detail);
}

/// A toolset whose programs live in store paths (a Nix closure): the sandbox runs them through
/// the tree's links and sees exactly the listed store paths, not another beside them; a list
/// naming a path that is gone fails the toolset, never the tools root
/// (docs/design.md#toolsets-on-nixos).
#[test]
fn a_toolset_s_closure_is_all_the_sandbox_sees_of_the_store() {
    if !bwrap_works() {
        return;
    }
    let w = world();
    // Not under /tmp, which the sandbox has a tmpfs of its own on, as /nix/store is not.
    let store_dir = tempfile::tempdir_in("/var/tmp").expect("store dir");
    let store = store_dir.path().join("store");
    let busybox = store.join("0a1b-busybox");
    std::fs::create_dir_all(busybox.join("bin")).expect("store path");
    std::fs::copy(BUSYBOX, busybox.join("bin/busybox")).expect("busybox");
    std::fs::create_dir_all(store.join("0c2d-secret")).expect("unlisted");
    std::fs::write(store.join("0c2d-secret/key"), "not for the sandbox\n").expect("key");
    let tree = w.root.with_file_name("toolset-nix");
    for d in ["bin", "etc", "tmp"] {
        std::fs::create_dir_all(tree.join(d)).expect("tree dir");
    }
    std::fs::copy(toolkit(), tree.join(&proto::tools::TOOLKIT[1..])).expect("toolkit");
    std::os::unix::fs::symlink(busybox.join("bin/busybox"), tree.join("bin/sh")).expect("sh");
    std::os::unix::fs::symlink(busybox.join("bin/busybox"), tree.join("bin/ls")).expect("ls");
    let list = w.root.with_file_name("store-paths");
    std::fs::write(&list, format!("{}\n", busybox.display())).expect("list");
    let toolset = brokerd::config::Toolset {
        name: "nix".into(),
        image: String::new(),
        tree: Some(tree),
        store_paths: Some(list.clone()),
    };
    let rt = runtime(&w, "").with_store(&store);
    let mut spec = shell(
        &format!(
            "ls {}; cat {}/0c2d-secret/key",
            store.display(),
            store.display()
        ),
        Vec::new(),
    );
    spec.toolset = Some(toolset.clone());
    let out = content(rt.run(&spec));
    assert!(out.starts_with("0a1b-busybox\n"), "{out}");
    assert!(!out.contains("not for the sandbox"), "{out}");
    assert!(out.ends_with("[exit 1]"), "{out}");
    let check = brokerd::preflight::judge_toolset(Ok(
        rt.run(&brokerd::preflight::toolset_spec(None, &toolset))
    ));
    assert!(check.ok, "{}", check.detail);

    std::fs::write(
        &list,
        format!("{}\n{}/gone\n", busybox.display(), store.display()),
    )
    .expect("list");
    assert_eq!(
        rt.run(&spec),
        Err(RunError::Unavailable(Unavailable::ToolsetUnavailable))
    );
}

/// What shell's programs find in their environment (docs/design.md#the-toolkit): everything in
/// /tmp, UTF-8, the toolset's program directories on PATH, and git told that any directory
/// is safe, with no system configuration.
#[test]
fn shell_s_programs_get_a_working_environment() {
    if !bwrap_works() {
        return;
    }
    let w = world();
    let c = toolset_tree(&w, "c");
    std::fs::create_dir_all(c.tree.as_ref().expect("tree").join("usr/bin")).expect("usr/bin");
    let rt = runtime(&w, "");
    let command = "echo \"$HOME|$TMPDIR|$XDG_CACHE_HOME|$LANG|$PATH|$GIT_CONFIG_NOSYSTEM|$GIT_CONFIG_GLOBAL\"; cat \"$GIT_CONFIG_GLOBAL\"";
    let git = "[safe]\n\tdirectory = *\n\n[exit 0]";
    let base = content(rt.run(&shell(command, Vec::new())));
    assert_eq!(
        base,
        format!("/tmp|/tmp|/tmp/.cache|C.UTF-8|/bin|1|/tmp/.gitconfig\n{git}")
    );
    let mut spec = shell(command, Vec::new());
    spec.toolset = Some(c);
    assert_eq!(
        content(rt.run(&spec)),
        format!("/tmp|/tmp|/tmp/.cache|C.UTF-8|/usr/bin:/bin|1|/tmp/.gitconfig\n{git}")
    );
}

/// A toolset built by images/build-toolset.sh with make and git, named by
/// `BOXMAKER_TEST_TOOLSET` (its tree): its check passes, and make and git run in it on a
/// repository of a grant directory. Skipped without the variable.
#[test]
fn a_built_toolset_runs_make_and_git() {
    let Some(tree) = std::env::var_os("BOXMAKER_TEST_TOOLSET") else {
        eprintln!("SKIPPED: BOXMAKER_TEST_TOOLSET names no toolset tree");
        return;
    };
    if !bwrap_works() {
        return;
    }
    let w = world();
    let toolset = brokerd::config::Toolset {
        name: "built".into(),
        image: String::new(),
        tree: Some(PathBuf::from(tree)),
        store_paths: None,
    };
    let rt = runtime(&w, "");
    let check = brokerd::preflight::judge_toolset(Ok(
        rt.run(&brokerd::preflight::toolset_spec(None, &toolset))
    ));
    assert!(check.ok, "{}", check.detail);
    let repo = w.work.join("repo");
    std::fs::create_dir_all(&repo).expect("repo");
    let git = |args: &[&str]| {
        let ok = std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t", "-C"])
            .arg(&repo)
            .args(args)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "git {args:?}");
    };
    std::fs::write(repo.join("Makefile"), "test:\n\t@echo made\n").expect("Makefile");
    git(&["init", "-q"]);
    git(&["add", "Makefile"]);
    git(&["commit", "-q", "-m", "first"]);
    let mut spec = spec(
        ToolName::Shell,
        serde_json::json!({ "command": "make test && git log --format=%s", "cwd": repo }),
        rw(&w.work),
    );
    spec.toolset = Some(toolset);
    assert_eq!(content(rt.run(&spec)), "made\nfirst\n\n[exit 0]");
}
