//! The bwrap runtime against a real `bwrap` over a tools root built in a temporary directory
//! from the static (musl) toolkit and busybox-static: each tool, the mounts, the missing
//! network, the exit-code table of docs/design.md#the-podman-runner, the output cap, the time limit
//! with its kill confirmed through the pidfd, non-UTF-8 output, the egress proxy's lifecycle, and
//! terminal failures remembered (docs/design.md#preflight-and-poisoning).
//!
//! Skipped, with a message, only where bwrap cannot make a user namespace on this host.
//! Nothing here sends a packet off the machine: the sandbox has no route, and the proxy is
//! never asked to connect.

// A test: a setup step that fails is the test failing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use brokerd::config;
use brokerd::runner::bwrap::{BwrapRuntime, Terminal};
use brokerd::runner::mounts::MountTrouble;
use brokerd::runner::{
    Cleared, DirId, Egress, Failure, Mount, MountChanged, Reply, RunError, RunOutput, RunSpec,
    Runner, Unavailable,
};
use proto::tools::ToolName;

mod protected;

/// Whether a sandbox can be run here: bwrap makes a user namespace, and the musl toolkit and
/// busybox-static exist to build its root from; prints why not. Nix's build sandbox has none of
/// them (`make nix-sandbox-check`). Under CI (`CI` set) a host that cannot is a failure, not a
/// skip: CI installs bubblewrap and busybox-static and builds the toolkit first.
fn bwrap_works() -> bool {
    let works = bwrap_probe() && tools_present();
    assert!(
        works || std::env::var_os("CI").is_none(),
        "CI must be able to run bwrap (scripts/setup.sh toolchain installs it; make test builds the toolkit)"
    );
    works
}

fn tools_present() -> bool {
    for (path, how) in [
        (
            toolkit(),
            "cargo build --release --target x86_64-unknown-linux-musl -p toolkit",
        ),
        (PathBuf::from(BUSYBOX), "apt-get install busybox-static"),
    ] {
        if !path.is_file() {
            eprintln!("SKIPPED: {} is missing ({how})", path.display());
            return false;
        }
    }
    true
}

fn bwrap_probe() -> bool {
    let out = brokerd::runner::bwrap::userns_probe().output();
    match out {
        Ok(o) if o.status.success() => true,
        Ok(o) => {
            eprintln!(
                "SKIPPED: bwrap cannot create a user namespace here: {}",
                String::from_utf8_lossy(&o.stderr).trim_end()
            );
            false
        }
        Err(e) => {
            eprintln!("SKIPPED: bwrap cannot be run here: {e}");
            false
        }
    }
}

/// The musl toolkit: `make test` builds it before the unit tests.
fn toolkit() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/x86_64-unknown-linux-musl/release/toolkit")
}

const BUSYBOX: &str = "/bin/busybox";

struct World {
    _dir: tempfile::TempDir,
    root: PathBuf,
    home: PathBuf,
    /// A grant directory, mounted read-only or read-write by each test.
    work: PathBuf,
}

/// A world whose tools root holds the toolkit and busybox (`bwrap_works` says they exist).
fn world() -> World {
    let w = bare_world();
    std::fs::copy(toolkit(), w.root.join(&proto::tools::TOOLKIT[1..])).expect("toolkit");
    std::fs::copy(BUSYBOX, w.root.join("bin/busybox")).expect("busybox");
    std::os::unix::fs::symlink("busybox", w.root.join("bin/sh")).expect("sh");
    w
}

/// The directories alone, for what runs no sandbox.
fn bare_world() -> World {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("tools-root");
    for d in ["bin", "etc", "proc", "dev", "tmp", "run", "sys"] {
        std::fs::create_dir_all(root.join(d)).expect("root dir");
    }
    let home = dir.path().join("home");
    let work = dir.path().join("work");
    std::fs::create_dir_all(&home).expect("home");
    std::fs::create_dir_all(&work).expect("work");
    std::fs::write(work.join("notes.txt"), "hello from the host\n").expect("file");
    World {
        root,
        home,
        work,
        _dir: dir,
    }
}

fn runtime(w: &World, extra: &str) -> BwrapRuntime {
    let text = format!(
        "[runner]\nbackend = \"bwrap\"\nenforce_limits = false\nhome = \"{}\"\n{extra}\n[bwrap]\ntools_root = \"{}\"\n",
        w.home.display(),
        w.root.display()
    );
    let cfg = config::parse(&text, "t.toml").expect("config");
    BwrapRuntime::new(
        cfg.runner.as_ref().expect("runner"),
        cfg.bwrap.as_ref().expect("bwrap"),
    )
}

fn spec(tool: ToolName, input: serde_json::Value, mounts: Vec<Mount>) -> RunSpec {
    RunSpec {
        session: proto::ident::Ident::fixed("t"),
        call: proto::ident::Ident::fixed("c"),
        tool,
        input: serde_json::to_vec(&input).expect("json"),
        mounts,
        egress: None,
        timeout: Duration::from_secs(20),
        staged_limit: None,
        toolset: None,
        limits: Default::default(),
        cache: None,
    }
}

fn shell(command: &str, mounts: Vec<Mount>) -> RunSpec {
    spec(
        ToolName::Shell,
        serde_json::json!({ "command": command }),
        mounts,
    )
}

fn ro(p: &Path) -> Vec<Mount> {
    vec![Mount::at(p, false).expect("a directory")]
}

fn rw(p: &Path) -> Vec<Mount> {
    vec![Mount::at(p, true).expect("a directory")]
}

fn content(r: Result<RunOutput, RunError>) -> String {
    match r {
        Ok(out) => out.content,
        Err(e) => panic!("expected a result, got {e:?}"),
    }
}

/// Whether any process on the host has `needle` in its command line.
fn process_with(needle: &str) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|e| {
        let mut s = Vec::new();
        std::fs::File::open(e.path().join("cmdline"))
            .and_then(|mut f| f.read_to_end(&mut s))
            .is_ok()
            && String::from_utf8_lossy(&s).contains(needle)
    })
}

#[test]
fn each_tool_works_and_mounts_are_honoured() {
    if !bwrap_works() {
        return;
    }
    let w = world();
    let rt = runtime(&w, "");
    let file = w.work.join("notes.txt");
    let read = rt.run(&spec(
        ToolName::ReadFile,
        serde_json::json!({ "path": file }),
        ro(&w.work),
    ));
    assert_eq!(content(read), "hello from the host\n");

    let target = w.work.join("new.txt");
    let wrote = content(rt.run(&spec(
        ToolName::WriteFile,
        serde_json::json!({ "path": target, "content": "written inside" }),
        rw(&w.work),
    )));
    assert!(wrote.starts_with("wrote 14 bytes"), "{wrote}");
    assert_eq!(
        std::fs::read_to_string(&target).expect("on the host"),
        "written inside"
    );

    let refused = content(rt.run(&spec(
        ToolName::WriteFile,
        serde_json::json!({ "path": w.work.join("no.txt"), "content": "x" }),
        ro(&w.work),
    )));
    assert!(refused.starts_with("write_file:"), "{refused}");
    assert!(!w.work.join("no.txt").exists());

    // The environment, the working directory, a writable /tmp, a read-only / and mount.
    let cmd = format!(
        "pwd; echo \"$HOME $TMPDIR $PATH\"; test -w /tmp && echo tmp-writable; \
         touch /x 2>&1; touch {}/y 2>&1; cat /proc/self/status | grep CapEff; \
         busybox unshare -U true 2>/dev/null || echo no-nested-userns",
        w.work.display()
    );
    let out = content(rt.run(&shell(&cmd, ro(&w.work))));
    for want in [
        "/tmp\n/tmp /tmp /bin\ntmp-writable\n",
        "touch: /x: Read-only file system",
        "/y: Read-only file system",
        "CapEff:\t0000000000000000",
        "no-nested-userns",
        "[exit 0]",
    ] {
        assert!(out.contains(want), "{want:?} not in {out:?}");
    }
    // Only the grant's directory is there: the host's files are not.
    let out = content(rt.run(&shell(
        "ls /; test -e /etc/passwd || echo no-passwd",
        Vec::new(),
    )));
    assert!(out.contains("no-passwd"), "{out}");
    assert!(!out.contains("home"), "{out}");
}

#[test]
fn no_network() {
    if !bwrap_works() {
        return;
    }
    let w = world();
    let rt = runtime(&w, "");
    // A host listener the sandbox must not reach: 127.0.0.1 inside is the sandbox's own.
    let listener = TcpListener::bind("127.0.0.1:0").expect("listener");
    listener.set_nonblocking(true).expect("nonblocking");
    let port = listener.local_addr().expect("addr").port();
    // 192.0.2.1 and 2001:db8::1 (documentation ranges): the sandbox has no route, so nothing
    // is sent anywhere. (Debian's busybox-static wget crashes with SIGSEGV in a root without
    // NSS, so it is not used: a crash must never pass for "unreachable".)
    let cmd = format!(
        "busybox nc -w 2 192.0.2.1 443 </dev/null; echo nc=$?; \
         busybox nc -w 2 2001:db8::1 443 </dev/null; echo nc6=$?; \
         busybox nc -w 2 127.0.0.1 {port} </dev/null; echo loopback=$?; \
         cat /proc/net/route | busybox wc -l"
    );
    let out = content(rt.run(&shell(&cmd, Vec::new())));
    assert_eq!(
        out.matches("Network is unreachable").count(),
        2,
        "both must fail for want of a network, not crash: {out}"
    );
    assert!(out.contains("nc=1\n") && out.contains("nc6=1\n"), "{out}");
    assert!(
        out.contains("Connection refused") && out.contains("loopback=1"),
        "{out}"
    );
    assert!(
        listener.accept().is_err(),
        "the host's loopback was reached from the sandbox"
    );
    // Only the route table's header line: no route at all.
    assert!(out.contains("\n1\n"), "{out}");
}

#[test]
fn exit_code_table() {
    if !bwrap_works() {
        return;
    }
    let w = world();
    let rt = runtime(&w, "");
    // exit 1: the tool's own line is the result.
    let out = content(rt.run(&spec(
        ToolName::ReadFile,
        serde_json::json!({ "path": w.work.join("absent") }),
        ro(&w.work),
    )));
    assert!(out.starts_with("read_file:"), "{out}");
    // (spec, answer)
    let mut bad_input = shell("true", Vec::new());
    bad_input.input = b"not json".to_vec();
    let cases = [
        (bad_input, Err(RunError::Failed(Failure::CouldNotRun))),
        // The toolkit process itself killed: bwrap says 128 + 9.
        (
            shell("kill -9 $PPID; sleep 5", Vec::new()),
            Err(RunError::Failed(Failure::Killed)),
        ),
        (
            shell("kill -TERM $PPID; sleep 5", Vec::new()),
            Err(RunError::Failed(Failure::UnexpectedStatus)),
        ),
        // A grant directory that is gone: a refusal that names it, and not remembered.
        (
            shell(
                "true",
                vec![Mount {
                    path: PathBuf::from("/nonexistent/grant"),
                    write: false,
                    id: DirId { dev: 1, ino: 1 },
                    protect: false,
                    stage: None,
                }],
            ),
            Err(RunError::MountChanged(MountChanged {
                path: PathBuf::from("/nonexistent/grant"),
                why: MountTrouble::Gone,
            })),
        ),
    ];
    for (s, want) in cases {
        let got = rt.run(&s);
        assert_eq!(
            got.map(|o| o.content),
            want,
            "{:?}",
            String::from_utf8_lossy(&s.input)
        );
    }
    assert_eq!(rt.terminal(), None);
    assert!(content(rt.run(&shell("echo still-fine", Vec::new()))).contains("still-fine"));
}

#[test]
fn output_cap_and_non_utf8() {
    if !bwrap_works() {
        return;
    }
    let w = world();
    let rt = runtime(&w, "output_cap = 1000");
    let started = Instant::now();
    let out = rt
        .run(&shell("busybox yes 0123456789", Vec::new()))
        .expect("a truncated result");
    assert!(out.truncated);
    assert_eq!(out.content.len(), 1000);
    assert!(out.content.starts_with("0123456789\n0123456789\n"));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );

    let out = rt
        .run(&shell("printf 'a\\377b\\n'", Vec::new()))
        .expect("a result");
    assert!(!out.truncated);
    assert!(out.content.starts_with("a\u{FFFD}b\n"), "{:?}", out.content);
}

#[test]
fn time_limit_kills_through_the_pidfd() {
    if !bwrap_works() {
        return;
    }
    let w = world();
    let rt = runtime(&w, "");
    let mut s = shell(
        "busybox sleep 4242123 & exec busybox sleep 4242124",
        Vec::new(),
    );
    s.timeout = Duration::from_millis(500);
    let started = Instant::now();
    assert_eq!(rt.run(&s), Err(RunError::Failed(Failure::TimedOut)));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // The whole sandbox is gone, the background child included, and nothing is poisoned.
    let deadline = Instant::now() + Duration::from_secs(2);
    while (process_with("4242123") || process_with("4242124")) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !process_with("4242123") && !process_with("4242124"),
        "a sleeper survived"
    );
    assert!(!rt.poisoned());
}

#[test]
fn egress_proxy_lifecycle() {
    if !bwrap_works() {
        return;
    }
    let w = world();
    let rt = runtime(&w, "");
    let mut s = shell(
        "ls -l /run/egress/; busybox nc -w 2 192.0.2.1 443 </dev/null",
        Vec::new(),
    );
    s.session = proto::ident::Ident::fixed("egress");
    s.egress = Some(Egress {
        hosts: vec!["docs.example.org".into()],
        allow_addresses: Vec::new(),
        bounds: None,
    });
    let out = content(rt.run(&s));
    // The proxy's socket is in the tool's sandbox; the tool still has no network.
    assert!(
        out.contains("egress.sock") && out.contains("\nsrw"),
        "{out}"
    );
    assert!(out.contains("Network is unreachable"), "{out}");
    // Afterwards: no directory, no proxy.
    let root = w.home.join("run/egress");
    let left: Vec<_> = std::fs::read_dir(&root)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
    // The outer bwrap was reaped through its pidfd; the sandbox's own pid 1 dies from
    // PR_SET_PDEATHSIG a moment later, so allow it that moment.
    let proxy = format!("{}/boxmaker-egress-c-", root.display());
    let deadline = Instant::now() + Duration::from_secs(2);
    while process_with(&proxy) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(!process_with(&proxy), "the proxy outlived its call");
    assert!(!rt.poisoned());

    // A proxy that cannot start (no toolkit in the root) is unavailable, and cleaned up.
    std::fs::remove_file(w.root.join(&proto::tools::TOOLKIT[1..])).expect("rm");
    let rt = runtime(&w, "egress_start_ms = 3000");
    let started = Instant::now();
    assert_eq!(
        rt.run(&s),
        Err(RunError::Unavailable(Unavailable::EgressUnavailable))
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "the exit was not noticed early"
    );
    let left = std::fs::read_dir(&root).map(|d| d.count()).unwrap_or(0);
    assert_eq!(left, 0);
}

#[test]
fn terminal_failures_are_remembered() {
    if !bwrap_works() {
        return;
    }
    let w = world();
    let missing = w.home.join("bin/bwrap");
    let rt = runtime(&w, "").with_program(&missing);
    let s = shell("echo hi", Vec::new());
    let unavailable = Err(RunError::Unavailable(Unavailable::RunnerUnavailable));
    assert_eq!(rt.run(&s), unavailable);
    assert!(matches!(rt.terminal(), Some(Terminal::Absent(_))));
    // bwrap appears afterwards: the runtime does not probe again until restart.
    std::fs::create_dir_all(missing.parent().expect("parent")).expect("dir");
    std::os::unix::fs::symlink("/usr/bin/bwrap", &missing).expect("link");
    assert_eq!(rt.run(&s), unavailable);

    let not_exec = w.home.join("bwrap-not-exec");
    std::fs::write(&not_exec, "not a program").expect("file");
    let rt = runtime(&w, "").with_program(&not_exec);
    assert_eq!(rt.run(&s), unavailable);
    assert!(matches!(rt.terminal(), Some(Terminal::Inexecutable(_))));
}

#[test]
fn sweep_removes_leftover_egress_directories() {
    let w = bare_world();
    let rt = runtime(&w, "");
    let left = w.home.join("run/egress/boxmaker-old-c-1");
    std::fs::create_dir_all(&left).expect("leftover");
    std::fs::write(left.join("egress.sock"), "").expect("socket stand-in");
    assert_eq!(rt.sweep().expect("swept"), 1);
    assert!(!left.exists());
}

#[test]
fn enforced_limits_without_a_cgroup_mechanism_answer_unavailable() {
    if !bwrap_works() {
        return;
    }
    // Only meaningful where cgroup v2 is not mounted at /sys/fs/cgroup (this hybrid host);
    // the guest proves the enforced path with delegation.
    if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        eprintln!("SKIPPED: this host has cgroup v2; the guest scenarios cover enforcement");
        return;
    }
    let w = world();
    let text = format!(
        "[runner]\nbackend = \"bwrap\"\nenforce_limits = true\nhome = \"{}\"\n\n[bwrap]\ntools_root = \"{}\"\n",
        w.home.display(),
        w.root.display()
    );
    let cfg = config::parse(&text, "t.toml").expect("config");
    let rt = BwrapRuntime::new(
        cfg.runner.as_ref().expect("runner"),
        cfg.bwrap.as_ref().expect("bwrap"),
    );
    let marker = w.work.join("ran");
    let cmd = format!("touch {}", marker.display());
    assert_eq!(
        rt.run(&shell(&cmd, rw(&w.work))),
        Err(RunError::Unavailable(Unavailable::RunnerUnavailable))
    );
    assert!(!marker.exists(), "the sandbox ran without its limits");
}

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

/// docs/design.md#preflight-and-poisoning: without a cgroup, a sandbox asked to die is seen to die
/// through bwrap's children, each a PID namespace's init. A "bwrap" whose child is not one (here a
/// script that starts a sleeper of its own) leaves processes that cannot be seen to die: the child
/// is killed all the same, and the runtime is poisoned, so http_fetch answers unavailable.
#[test]
fn a_sandbox_whose_processes_cannot_be_seen_to_die_poisons() {
    // bwrap is started with an empty environment: the fake names sleep by its path.
    let Some(sleep) = std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("sleep"))
            .find(|f| f.is_file())
    }) else {
        eprintln!("SKIPPED: no sleep on PATH");
        return;
    };
    let w = bare_world();
    let fake = w.home.join("fake-bwrap");
    let script = format!("#!/bin/sh\n{} 4242125 &\nwait\n", sleep.display());
    std::fs::write(&fake, script).expect("fake bwrap");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let rt = runtime(&w, "").with_program(&fake);
    let mut s = shell("true", Vec::new());
    s.timeout = Duration::from_millis(300);
    assert_eq!(rt.run(&s), Err(RunError::Failed(Failure::TimedOut)));
    assert!(rt.poisoned(), "the sleeper was not a namespace init");
    assert!(
        !process_with("4242125"),
        "the sleeper was killed all the same"
    );
    let fetch = spec(
        ToolName::HttpFetch,
        serde_json::json!({"url": "https://docs.example.org/"}),
        Vec::new(),
    );
    let mut fetch = fetch;
    fetch.egress = Some(Egress {
        hosts: vec!["docs.example.org".into()],
        allow_addresses: Vec::new(),
        bounds: None,
    });
    assert_eq!(
        rt.run(&fetch),
        Err(RunError::Unavailable(Unavailable::EgressUnavailable))
    );
}

/// The sandbox is made while brokerd puts the call's decision on disk, but its tool gets its
/// input only once the record is there; a record that could not be written stops the sandbox
/// before the tool did anything, and leaves no process behind.
#[test]
fn the_tool_waits_for_its_decision_on_disk() {
    if !bwrap_works() {
        return;
    }
    let w = world();
    let rt = runtime(&w, "");
    for (on_disk, name) in [(true, "written.txt"), (false, "never.txt")] {
        let target = w.work.join(name);
        let s = spec(
            ToolName::WriteFile,
            serde_json::json!({ "path": target, "content": "gated" }),
            rw(&w.work),
        );
        let cleared = Cleared::pending();
        let decider = cleared.clone();
        let watched = target.clone();
        let started = Instant::now();
        let before = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            // The sandbox has been ready for a while: its tool has not written yet.
            let written_early = watched.exists();
            decider.decide(on_disk);
            written_early
        });
        let got = std::sync::Mutex::new(None);
        rt.run_replying(
            &s,
            Reply::after(cleared, |answer| {
                *got.lock().unwrap() = Some(answer);
            }),
        );
        assert!(
            !before.join().unwrap(),
            "the tool ran before its decision was on disk"
        );
        let answer = got.into_inner().unwrap().expect("an answer");
        if on_disk {
            assert!(started.elapsed() >= Duration::from_millis(300));
            assert!(answer.is_ok(), "{answer:?}");
            assert_eq!(std::fs::read_to_string(&target).unwrap(), "gated");
        } else {
            assert_eq!(answer, Err(RunError::Failed(Failure::CouldNotRun)));
            assert!(
                !target.exists(),
                "the tool ran although its decision was not audited"
            );
            let root = w.root.display().to_string();
            assert!(!process_with(&root), "the stopped sandbox is still running");
        }
    }
}

/// A decision that reaches the disk late shortens the tool's time and never makes the call
/// longer than its time limit plus the proxy's budget, the tool's limit not counted afresh
/// after a slow record.
#[test]
fn a_late_decision_never_lengthens_the_call() {
    if !bwrap_works() {
        return;
    }
    let w = world();
    let rt = runtime(&w, "egress_start_ms = 400");
    let mut s = shell("sleep 30", Vec::new());
    s.session = proto::ident::Ident::fixed("late");
    s.timeout = Duration::from_secs(3);
    s.egress = Some(Egress {
        hosts: vec!["docs.example.org".into()],
        allow_addresses: Vec::new(),
        bounds: None,
    });
    let budget = s.timeout + Duration::from_millis(400);
    let cleared = Cleared::pending();
    let decider = cleared.clone();
    let decide = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(2500));
        decider.decide(true);
    });
    let started = Instant::now();
    let got = std::sync::Mutex::new(None);
    rt.run_replying(
        &s,
        Reply::after(cleared, |answer| {
            *got.lock().unwrap() = Some(answer);
        }),
    );
    let took = started.elapsed();
    decide.join().unwrap();
    assert_eq!(
        got.into_inner().unwrap().expect("an answer"),
        Err(RunError::Failed(Failure::TimedOut))
    );
    // Counting the tool's limit afresh after the record would end it at 5.5 s.
    assert!(
        took >= budget && took < budget + Duration::from_secs(1),
        "took {took:?}, budget {budget:?}"
    );
    assert!(!rt.poisoned());
}

/// Every file and directory under `dir`, relative, with its content (links as their target).
fn snapshot(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir").flatten() {
            let p = e.path();
            let rel = p.strip_prefix(dir).expect("inside").display().to_string();
            let meta = std::fs::symlink_metadata(&p).expect("lstat");
            use std::os::unix::fs::MetadataExt;
            let what = if meta.file_type().is_symlink() {
                format!("-> {}", std::fs::read_link(&p).expect("link").display())
            } else if meta.is_dir() {
                stack.push(p.clone());
                format!("dir {:o}", meta.mode())
            } else {
                format!(
                    "{:o} {} {}",
                    meta.mode(),
                    meta.mtime(),
                    std::fs::read_to_string(&p).unwrap_or_default()
                )
            };
            out.push((rel, what));
        }
    }
    out.sort();
    out
}

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

/// A grant's own output cap, lower than `[runner]`'s, holds in its sandbox
/// (docs/design.md#grantsname); a grant without one gets `[runner]`'s.
#[test]
fn a_grant_s_own_limits_hold_in_its_sandbox() {
    if !bwrap_works() {
        return;
    }
    let w = world();
    let rt = runtime(&w, "output_cap = 1000");
    let mut spec = shell("busybox yes 0123456789", Vec::new());
    spec.limits.output_cap = Some(100);
    let out = rt.run(&spec).expect("a truncated result");
    assert!(out.truncated);
    assert_eq!(out.content.len(), 100);
    spec.limits.output_cap = None;
    assert_eq!(rt.run(&spec).expect("a result").content.len(), 1000);
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
