//! brokerd as the subreaper of its sandboxes (`runner::reaper`), with a real bwrap: the PID 1
//! a sandbox leaves behind is adopted by this process and reaped by `reap_orphans`, and a
//! child this process started itself is left to its owner. A test binary of its own, because
//! the subreaper setting is for the whole process.

// A test: a setup step that fails is the test failing.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![forbid(unsafe_code)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use brokerd::runner::reaper::{adopt_orphans, reap_orphans};

/// This process's children, from every thread's `children` list.
fn children() -> Vec<String> {
    let mut found = Vec::new();
    for task in std::fs::read_dir("/proc/self/task")
        .expect("tasks")
        .flatten()
    {
        let list = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        found.extend(list.split_whitespace().map(str::to_string));
    }
    found
}

#[test]
fn a_sandbox_s_pid_1_is_adopted_and_reaped_and_nothing_else() {
    let probe = brokerd::runner::bwrap::userns_probe().output();
    let works = matches!(&probe, Ok(o) if o.status.success());
    if !works {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must be able to run bwrap: {probe:?}"
        );
        eprintln!("SKIPPED: bwrap cannot make a user namespace here: {probe:?}");
        return;
    }
    adopt_orphans().expect("PR_SET_CHILD_SUBREAPER");
    // A child of this process's own, exited and not yet reaped: not the reaper's to take.
    let mut own = Command::new("true").spawn().expect("true");
    let status = Command::new("bwrap")
        .args([
            "--unshare-user",
            "--unshare-pid",
            "--ro-bind",
            "/",
            "/",
            "true",
        ])
        .stdin(Stdio::null())
        .status()
        .expect("bwrap");
    assert!(status.success());
    let until = Instant::now() + Duration::from_secs(10);
    let mut reaped = 0;
    while reaped == 0 && Instant::now() < until {
        reaped += reap_orphans();
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(reaped, 1, "the sandbox's PID 1 was not adopted and reaped");
    assert_eq!(children(), vec![own.id().to_string()]);
    assert!(own.wait().expect("own child").success());
    assert!(children().is_empty());
}
