//! What the Podman runtime removes and what it remembers, against the fake `podman`
//! (`podman_fake`): stops and sweeps look until a container is gone, in Podman's database and
//! in its storage (docs/design.md#sweep), and a failure that no retry can mend is kept until
//! restart once brokerd's own podman command confirms it (docs/design.md#preflight-and-poisoning).

// A test: a setup step that fails is the test failing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use brokerd::preflight;
use brokerd::runner::{Failure, Runner};
use proto::tools::ToolName;

use crate::podman_fake::*;

/// `container exists` says the container is still there the first time it is asked, and gone
/// after: what a container left in "Removing" by an `rm -f` cut short looks like, which the
/// next `rm -f` removes (Podman 4.3 does).
const THERE_ONCE: &str = r#"n=$(cat "$d/asked" 2>/dev/null || echo 0); echo $((n + 1)) > "$d/asked"
[ "$n" -ge 1 ] && exit 1; exit 0"#;

/// A stop does not end at a successful `rm -f`: it looks until the container is gone, and
/// removes it again while it is still there ("Removing"); one that stays is poison, within
/// the removal's bound. The same for the proxy after an http_fetch.
#[test]
fn a_stop_looks_until_the_container_is_gone() {
    let case = Case::new("removing", "exec sleep 30").with("exists", THERE_ONCE);
    let rt = case.runtime();
    assert_eq!(
        rt.run(&case.spec(ToolName::Shell)),
        failed(Failure::TimedOut)
    );
    assert_eq!(
        case.verbs(),
        ["run", "kill", "rm -f", "exists", "rm -f", "exists"]
    );
    assert!(!rt.poisoned());

    let case =
        Case::new("proxyremoving", "cat > /dev/null; echo fetched").with("exists", THERE_ONCE);
    let rt = case.runtime();
    assert_eq!(
        rt.run(&case.spec(ToolName::HttpFetch)),
        ok("fetched\n", false)
    );
    assert_eq!(
        case.verbs(),
        [
            "run",
            "proxy",
            "rm -f egress",
            "exists egress",
            "rm -f egress",
            "exists egress"
        ]
    );
    assert!(!rt.poisoned());

    // Never gone: poison, once the bound is spent, and http_fetch is off.
    let case = Case::new("stuck", "exec sleep 30").with("exists", "exit 0");
    let rt = case.runtime();
    let started = Instant::now();
    assert_eq!(
        rt.run(&case.spec(ToolName::Shell)),
        failed(Failure::TimedOut)
    );
    let took = started.elapsed();
    assert!(
        took >= LIMIT + HELPER_LIMIT / 2 && took < LIMIT + 2 * HELPER_LIMIT + SLACK,
        "took {took:?}"
    );
    let verbs = case.verbs();
    assert_eq!(verbs[..4], ["run", "kill", "rm -f", "exists"]);
    assert!(
        verbs[2..].chunks(2).all(|p| p == ["rm -f", "exists"]) && verbs.len() >= 6,
        "removed again while there: {verbs:?}"
    );
    assert!(rt.poisoned());
    assert_eq!(rt.run(&case.spec(ToolName::HttpFetch)), EGRESS_UNAVAILABLE);
}

/// A proxy whose `rm -f` failed is poison unless podman confirms it is gone (`container exists
/// --external` exits 1); still there, or no answer, is tried again until the bound, then turns
/// http_fetch off.
#[test]
fn a_failed_rm_poisons_unless_the_container_is_confirmed_gone() {
    // (session, what `container exists` does, poisoned)
    let cases = [
        ("rmgone", "exit 1", false),
        ("rmthere", "exit 0", true),
        ("rmerror", "echo 'cannot connect' >&2; exit 125", true),
    ];
    for (session, exists, poisoned) in cases {
        let case = Case::new(session, "cat > /dev/null; echo fetched")
            .with("rm", "echo 'rm failed' >&2; exit 1")
            .with("exists", exists);
        let rt = case.runtime();
        assert_eq!(
            rt.run(&case.spec(ToolName::HttpFetch)),
            ok("fetched\n", false)
        );
        let verbs = case.verbs();
        assert_eq!(verbs[..4], FETCH_RAN, "{session}");
        assert_eq!(
            verbs.len() > 4,
            poisoned,
            "{session}: tried again: {verbs:?}"
        );
        assert_eq!(rt.poisoned(), poisoned, "{session}");
        if poisoned {
            assert_eq!(rt.run(&case.spec(ToolName::HttpFetch)), EGRESS_UNAVAILABLE);
        }
    }
}

/// What `a_monitor_stand_in` is to be: "monitor" (a conmon that starts its container's init and
/// stays) or "init" (which sleeps).
const MONITOR_STAND_IN: &str = "BOXMAKER_TEST_MONITOR_STAND_IN";

/// This test program's arguments that run `a_monitor_stand_in` alone.
fn stand_in_args() -> [&'static str; 5] {
    [
        "--exact",
        "podman_cleanup::a_monitor_stand_in",
        "--ignored",
        "--test-threads=1",
        "--quiet",
    ]
}

#[test]
#[ignore = "started by the_sweep_removes_labelled_and_storage_only_containers"]
fn a_monitor_stand_in() {
    match std::env::var(MONITOR_STAND_IN).as_deref() {
        Ok("monitor") => {
            // Dies with the test, whatever becomes of it: no stand-in outlives a failed run.
            let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
            let child = std::process::Command::new(std::env::current_exe().expect("program"))
                .args(stand_in_args())
                .env(MONITOR_STAND_IN, "init")
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn();
            if let Ok(mut c) = child {
                let _ = c.wait();
            }
            // Outlives its child, so that only a kill ends it (a real conmon exits once its
            // container's init has: that would race the sweep's kill of the monitor itself).
            std::thread::sleep(std::time::Duration::from_secs(300));
        }
        Ok("init") => {
            // Dies with its monitor, whoever kills that (the test kills another program's).
            let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
            if nix::unistd::getppid().as_raw() != 1 {
                std::thread::sleep(std::time::Duration::from_secs(300));
            }
        }
        _ => {}
    }
}

/// The sweep removes every labelled container by ID, whatever its name (64-character session
/// and call ids included), and every container in storage only that brokerd named (a
/// `podman run` killed while it made its container leaves one, without labels); another
/// program's storage container stays. Each is looked at until it is gone. A `conmon` of a
/// container brokerd named that Podman no longer lists is killed with its child.
#[test]
fn the_sweep_removes_labelled_and_storage_only_containers() {
    const LABELLED: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    const STORAGE: &str = "1123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    const LONG: &str = "2123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    const OTHERS: &str = "3123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let cases: Vec<Case> = [LABELLED, STORAGE, LONG, OTHERS]
        .into_iter()
        .map(|id| Case::new(id, "true"))
        .collect();
    let long = format!("boxmaker-{}-{}-1", "s".repeat(64), "c".repeat(64));
    // Podman 4.3's two listings for the formats asked (the label filter does not keep
    // storage-only containers out, and they have no labels).
    let ps = format!(
        r#"case "$*" in
  *--external*) printf '%s\n' "{LABELLED} Running boxmaker-s1-c1-1" "{STORAGE} Storage boxmaker-s1-c2-3-egress" "{OTHERS} Storage buildah-working-container" "{LONG} storage {long}" "{OTHERS} Storage" "not an id" ;;
  *) printf '%s\n' {LABELLED} 'not an id' ;;
esac
"#
    );
    std::fs::write(fake_podman().with_file_name("ps.sh"), ps).expect("ps.sh");
    let rt = cases[0].runtime();
    std::fs::create_dir_all(rt.egress_dir(&long)).expect("a left egress directory");
    assert_eq!(
        rt.leftovers().expect("listed"),
        [LABELLED, STORAGE, LONG],
        "labelled first, then brokerd's storage-only ones"
    );
    // A `conmon` left with its container's `runc init` for a container Podman forgot, and one
    // of another program's container, which stays. Each is this test program, named conmon,
    // running only `a_monitor_stand_in` (not /bin/sh: where that is busybox, as in Nix's build
    // sandbox, the name picks the applet).
    let monitor = |name: &str| {
        use std::os::unix::process::CommandExt;
        std::process::Command::new(std::env::current_exe().expect("test program"))
            .arg0("/usr/bin/conmon")
            .args(stand_in_args())
            .args(["--", "-n", name])
            .env(MONITOR_STAND_IN, "monitor")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("a fake conmon")
    };
    let mut left = monitor("boxmaker-orphan-c1-7-egress");
    let mut other = monitor("web-1");
    // Its child is started before the sweep looks.
    for m in [&left, &other] {
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        // Any of its threads' children (libtest may run the stand-in on a thread of its own).
        let has_child = || {
            std::fs::read_dir(format!("/proc/{}/task", m.id()))
                .into_iter()
                .flatten()
                .flatten()
                .any(|t| {
                    let list = std::fs::read_to_string(t.path().join("children"));
                    !list.unwrap_or_default().trim().is_empty()
                })
        };
        while !has_child() {
            assert!(
                Instant::now() < deadline,
                "the stand-in monitor started no child"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
    assert_eq!(
        rt.sweep().expect("sweep"),
        5,
        "three containers, the monitor and the directory"
    );
    assert!(left.wait().expect("reaped").code().is_none(), "killed");
    assert_eq!(
        other.try_wait().expect("looked"),
        None,
        "another program's stays"
    );
    let _ = other.kill();
    let _ = other.wait();
    for case in &cases[..3] {
        let id = case.session;
        assert_eq!(
            case.calls(),
            [
                format!("kill {id}"),
                format!("rm -f {id}"),
                format!("container exists --external {id}")
            ]
        );
    }
    assert!(cases[3].calls().is_empty(), "another program's container");
    assert!(cases[0].egress_dirs().is_empty());

    // A storage-only container that stays is a failed sweep that names it.
    std::fs::write(cases[1].dir.join("exists.sh"), "exit 0").expect("exists.sh");
    let e = rt.sweep().expect_err("one stayed");
    assert!(e.to_string().contains(STORAGE), "{e}");
    assert!(!e.to_string().contains(LABELLED), "{e}");
}

const IMAGE_MISSING: &str =
    "echo 'Error: localhost/boxmaker-tools@sha256:9f86: image not known' >&2; exit 125";
const USERNS: &str = "echo 'cannot clone: Operation not permitted' >&2
echo 'user namespaces are not enabled in /proc/sys/user/max_user_namespaces' >&2
echo 'Error: cannot re-exec process' >&2; exit 125";

/// Exit 125 is podman's own failure; its standard error says why, and `podman image exists`,
/// which needs no container, confirms it: a missing image and a refused user namespace are
/// remembered, and later calls of every tool start nothing. The same lines printed by a tool
/// (a process in the container can make toolkit exit 125) are not confirmed, and the next
/// call runs.
#[test]
fn podman_remembers_a_missing_image_and_a_refused_user_namespace() {
    // (session, tool, `image exists`, what is remembered)
    let cases = [
        (
            "noimage",
            IMAGE_MISSING,
            "exit 1",
            Some("the image is not in the service user's store"),
        ),
        ("imagethere", IMAGE_MISSING, "exit 0", None),
        (
            "nouserns",
            USERNS,
            USERNS,
            Some("the kernel refused podman a user namespace"),
        ),
        ("usernsforged", USERNS, "exit 0", None),
        (
            "other125",
            "echo 'Error: OCI runtime error' >&2; exit 125",
            "exit 1",
            None,
        ),
    ];
    for (session, tool, image, remembered) in cases {
        let case = Case::new(session, tool).with("image", image);
        let rt = case.runtime();
        assert_eq!(
            rt.run(&case.spec(ToolName::Shell)),
            UNAVAILABLE,
            "{session}"
        );
        let asked = match session {
            "other125" => vec!["run"],
            _ => vec!["run", "image exists"],
        };
        assert_eq!(case.verbs(), asked, "{session}");
        let kept = rt.terminal_failure();
        assert_eq!(
            kept.as_deref()
                .map(|k| k.split(':').next().unwrap_or_default()),
            remembered,
            "{session}: {kept:?}"
        );
        let before = case.calls().len();
        for tool in [ToolName::ReadFile, ToolName::HttpFetch] {
            assert_eq!(rt.run(&case.spec(tool)), UNAVAILABLE, "{session} {tool}");
        }
        let ran_again = case.calls().len() > before;
        assert_eq!(
            ran_again,
            remembered.is_none(),
            "{session}: {:?}",
            case.verbs()
        );
    }
}

/// Podman's start-up preflight asks the sandbox for HOME and TMPDIR as bwrap's does (toolkit
/// sets them for the shell; what Podman 4.3 gives a container is HOME=/ and no TMPDIR), and a
/// terminal failure it meets is kept as terminal, not tried again.
#[test]
fn the_podman_preflight_checks_home_and_tmpdir_and_keeps_terminal_failures() {
    let good = r#"cat > /dev/null; printf '/tmp\ntmp-writable\nhome=/tmp tmpdir=/tmp\n'"#;
    // The preflight's own session names the container, and so the case.
    let case = Case::new("preflight", good).with("image", "exit 1");
    let rt = case.runtime();
    let probe = preflight::Sandbox::new(None, &rt, Vec::new());
    let command = String::from_utf8_lossy(&probe.spec.input).into_owned();
    assert!(
        command.contains(r#"home=$HOME tmpdir=$TMPDIR"#),
        "{command}"
    );
    let judge = |rt: &dyn Runner| {
        let mut p = probe.judge(Ok(rt.run(&probe.spec)));
        preflight::settle(rt, &mut p);
        p
    };
    let p = judge(&rt);
    assert!(p.ok, "{}", p.detail);
    assert!(p.detail.contains("HOME and TMPDIR /tmp"), "{}", p.detail);

    let bare = r#"cat > /dev/null; printf '/tmp\ntmp-writable\nhome=/ tmpdir=\n'"#;
    std::fs::write(case.dir.join("tool.sh"), bare).expect("tool.sh");
    let p = judge(&rt);
    assert!(!p.ok && !p.terminal, "{p:?}");

    std::fs::write(case.dir.join("tool.sh"), IMAGE_MISSING).expect("tool.sh");
    let p = judge(&rt);
    assert!(!p.ok && p.terminal, "{p:?}");
    assert!(
        p.detail.contains("remembered until restart"),
        "{}",
        p.detail
    );
    let before = case.calls().len();
    assert!(!judge(&rt).ok);
    assert_eq!(
        case.calls().len(),
        before,
        "tried again: {:?}",
        case.verbs()
    );
}

/// A grant's toolset image missing from the store answers that toolset's call unavailable
/// with the toolset's runbook entry, is not confirmed against the base image nor remembered,
/// and the next call on the base image runs (docs/design.md#toolsets).
#[test]
fn a_missing_toolset_image_stops_only_its_calls() {
    let case = Case::new("toolsetgone", IMAGE_MISSING).with("image", "exit 1");
    let rt = case.runtime();
    let mut spec = case.spec(ToolName::Shell);
    spec.toolset = Some(crate::common::toolset());
    assert_eq!(
        rt.run(&spec),
        Err(brokerd::runner::RunError::Unavailable(
            brokerd::runner::Unavailable::ToolsetUnavailable
        ))
    );
    assert_eq!(case.verbs(), vec!["run"]);
    assert_eq!(rt.terminal_failure(), None);
}
