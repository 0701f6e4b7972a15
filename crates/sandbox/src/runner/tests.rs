//! The call sequence both backends share (`run_call`, `Steps`, `Cleared`, `Settling`), with a
//! backend that records what it was asked.

use super::*;
use std::sync::Mutex;

/// A backend that records what the skeleton asked of it, and when its leftovers went.
#[derive(Default)]
struct Recorder {
    refuse: bool,
    poisoned: bool,
    settling: Settling,
    protector: protected::Protector,
    events: Mutex<Vec<&'static str>>,
    /// Where its egress directories are.
    egress_root: PathBuf,
}

struct Left<'a>(&'a Recorder);
impl Drop for Left<'_> {
    fn drop(&mut self) {
        self.0.note("cleaned");
    }
}

impl Recorder {
    fn note(&self, what: &'static str) {
        self.events.lock().expect("events").push(what);
    }
}

impl Runner for Recorder {
    fn run(&self, spec: &RunSpec) -> Result<RunOutput, RunError> {
        run_to_the_end(|reply| self.run_replying(spec, reply))
    }
    fn run_replying(&self, spec: &RunSpec, reply: Reply<'_>) {
        run_call(self, spec, reply)
    }
    fn poisoned(&self) -> bool {
        self.poisoned
    }
}

impl Steps for Recorder {
    type Leftovers<'a> = Left<'a>;
    type Terminal = String;
    const WORDS: trouble::Words = trouble::Words {
        program: "recorder",
        build: "record",
        toolset: "no toolset",
        stopped: ("record", "gone"),
        proxy_gone: "gone",
        runbook: None,
    };
    fn remembered(&self) -> Option<String> {
        None
    }
    fn refusal(&self, _spec: &RunSpec, _detail: &str) -> Option<RunError> {
        self.refuse
            .then_some(RunError::Unavailable(Unavailable::RunnerUnavailable))
    }
    fn poisoned_answer(&self, _spec: &RunSpec, _detail: &str) -> RunError {
        RunError::Unavailable(Unavailable::RunnerUnavailable)
    }
    fn earlier_clean_up_answer(&self, _spec: &RunSpec, _detail: &str) -> RunError {
        RunError::Unavailable(Unavailable::EgressUnavailable)
    }
    fn protector(&self) -> &protected::Protector {
        &self.protector
    }
    fn run_call<'a>(
        &'a self,
        _spec: &'a RunSpec,
        _held: &protected::Held<'_>,
        _cleared: &Cleared,
    ) -> Result<Ran<Left<'a>>, RunError> {
        self.note("ran");
        Ok(Ran {
            sandbox: "sandbox".into(),
            answer: Ok(RunOutput {
                content: "out".into(),
                truncated: false,
            }),
            leftovers: Some(Left(self)),
        })
    }
    fn settling(&self) -> &Settling {
        &self.settling
    }
    fn egress_dir_of(&self, name: &str) -> PathBuf {
        self.egress_root.join(name)
    }
}

/// A decision already on disk, one written later, one that failed, one never told.
#[test]
fn cleared_says_whether_the_decision_is_on_disk() {
    use std::time::{Duration, Instant};
    let soon = || Instant::now() + Duration::from_millis(50);
    assert!(Cleared::already().wait(soon()));
    let later = Cleared::pending();
    let decider = later.clone();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        decider.decide(true);
    });
    assert!(later.wait(Instant::now() + Duration::from_secs(30)));
    t.join().expect("decider");
    let failed = Cleared::pending();
    failed.decide(false);
    assert!(!failed.wait(Instant::now() + Duration::from_secs(30)));
    // The first word stands; a writer gone without one means "not on disk".
    let once = Cleared::pending();
    once.decide(true);
    drop(once.undecided_on_drop());
    assert!(once.wait(soon()));
    let gone = Cleared::pending();
    drop(gone.undecided_on_drop());
    assert!(!gone.wait(Instant::now() + Duration::from_secs(30)));
    let started = Instant::now();
    assert!(!Cleared::pending().wait(started + Duration::from_millis(50)));
    assert!(started.elapsed() >= Duration::from_millis(50));
}

/// Both backends' call: the checks in order, then the run, the answer, and only then the
/// clean-up, counted as under way while the answer leaves.
#[test]
fn the_skeleton_answers_before_it_cleans_up() {
    let unavailable = Err(RunError::Unavailable(Unavailable::RunnerUnavailable));
    let ran = Ok(RunOutput {
        content: "out".into(),
        truncated: false,
    });
    let answered: &[&str] = &["answered"];
    let whole: &[&str] = &["ran", "answered", "cleaned"];
    // (session, http_fetch, refuse, poisoned, answer, events)
    let table = [
        (
            "relative",
            false,
            false,
            false,
            Err(RunError::Failed(Failure::CouldNotRun)),
            answered,
        ),
        ("s1", false, true, false, unavailable.clone(), answered),
        ("s1", true, false, true, unavailable.clone(), answered),
        ("s1", false, false, true, ran.clone(), whole),
        ("s1", true, false, false, ran.clone(), whole),
    ];
    for (session, fetch, refuse, poisoned, answer, events) in table {
        let backend = Recorder {
            refuse,
            poisoned,
            ..Recorder::default()
        };
        // "relative": a spec with a mount no sandbox may take, which is malformed.
        let mounts = if session == "relative" {
            let mut m = Mount::at(std::path::Path::new("/"), false).expect("mount of /");
            m.path = PathBuf::from("relative/dir");
            vec![m]
        } else {
            Vec::new()
        };
        let spec = RunSpec {
            session: Ident::parse(session).expect("session"),
            call: Ident::fixed("c1"),
            tool: ToolName::Shell,
            input: Vec::new(),
            mounts,
            egress: fetch.then(|| Egress {
                hosts: vec!["example.org".into()],
                allow_addresses: Vec::new(),
                bounds: None,
            }),
            timeout: Duration::from_secs(1),
            staged_limit: None,
            toolset: None,
            limits: Default::default(),
            cache: None,
        };
        let mut got = None;
        run_call(
            &backend,
            &spec,
            Reply::new(|a| {
                backend.note("answered");
                let now = std::time::Instant::now();
                let cleaning = !backend.settling.wait_for_earlier(now);
                assert_eq!(cleaning, events.len() > 1, "clean-up counted");
                got = Some(a);
            }),
        );
        assert_eq!(got, Some(answer), "{session} {fetch} {refuse} {poisoned}");
        assert_eq!(*backend.events.lock().expect("events"), events);
    }
}

/// A waiter waits for the clean-ups begun before it, and not for later ones.
#[test]
fn settling_waits_for_earlier_clean_ups_only() {
    use std::time::Instant;
    let settling = Settling::default();
    let soon = || Instant::now() + Duration::from_millis(30);
    assert!(settling.wait_for_earlier(soon()));
    let earlier = settling.begin();
    assert!(!settling.wait_for_earlier(soon()));
    std::thread::scope(|s| {
        let waiter =
            s.spawn(|| settling.wait_for_earlier(Instant::now() + Duration::from_secs(30)));
        std::thread::sleep(Duration::from_millis(20));
        // Begun after the waiter started: not waited for.
        let _later = settling.begin();
        drop(earlier);
        assert!(waiter.join().expect("waiter"));
    });
}

#[test]
fn an_early_reply_is_the_answer_and_no_reply_is_unavailable() {
    let out = RunOutput {
        content: "x".into(),
        truncated: false,
    };
    let sent = out.clone();
    assert_eq!(run_to_the_end(|reply| reply.send(Ok(sent))), Ok(out));
    assert_eq!(
        run_to_the_end(|reply| drop(reply)),
        Err(RunError::Unavailable(Unavailable::RunnerUnavailable))
    );
}

/// The parent-death signal is tied to the starting thread: when it ends, so does the
/// child (what a crashed brokerd's sandboxes see), and one still waited for lives on.
#[test]
#[allow(clippy::zombie_processes)]
fn a_child_dies_with_the_thread_that_started_it() {
    use std::os::unix::process::ExitStatusExt;
    let start = || {
        dies_with_brokerd(&mut std::process::Command::new("sleep"))
            .arg("30")
            .spawn()
            .expect("sleep")
    };
    let mut orphaned = std::thread::spawn(start).join().expect("thread");
    let status = orphaned.wait().expect("wait");
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    let mut kept = start();
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(kept.try_wait().expect("try_wait"), None);
    let _ = kept.kill();
    let _ = kept.wait();
}

/// A tool gets its way out only once the clean-ups begun before it are done, and never while
/// the runtime is poisoned; each refusal is the backend's own answer.
#[test]
fn the_way_out_waits_for_earlier_clean_ups_and_poisoning() {
    use std::time::{Duration, Instant};
    let spec = RunSpec {
        session: Ident::fixed("s1"),
        call: Ident::fixed("c1"),
        tool: ToolName::HttpFetch,
        input: Vec::new(),
        mounts: Vec::new(),
        egress: None,
        timeout: Duration::from_secs(1),
        staged_limit: None,
        toolset: None,
        limits: Default::default(),
        cache: None,
    };
    let soon = || Instant::now() + Duration::from_millis(30);
    let wait = Duration::from_millis(30);
    let backend = Recorder::default();
    assert_eq!(Steps::way_out_clear(&backend, &spec, soon(), wait), Ok(()));
    let earlier = backend.settling.begin();
    assert_eq!(
        Steps::way_out_clear(&backend, &spec, soon(), wait),
        Err(RunError::Unavailable(Unavailable::EgressUnavailable))
    );
    drop(earlier);
    assert_eq!(Steps::way_out_clear(&backend, &spec, soon(), wait), Ok(()));
    let poisoned = Recorder {
        poisoned: true,
        ..Recorder::default()
    };
    assert_eq!(
        Steps::way_out_clear(&poisoned, &spec, soon(), wait),
        Err(RunError::Unavailable(Unavailable::RunnerUnavailable))
    );
}

/// A shell call with bounds has what its proxy reported left with its answer, read once the
/// connections it shows open have ended (or the grace is over); a call without bounds (an
/// http_fetch) leaves nothing.
#[test]
fn a_shell_call_s_proxy_report_goes_with_the_answer() {
    use proto::egress::{ReportEvent, ReportLine};
    let tmp = tempfile::tempdir().expect("tempdir");
    let backend = Recorder {
        egress_root: tmp.path().to_path_buf(),
        ..Recorder::default()
    };
    let report = egress::report_dir(&tmp.path().join("sandbox"));
    std::fs::create_dir_all(&report).expect("report dir");
    let file = report.join("connections.jsonl");
    let line = |event, relayed, down| {
        let mut t = serde_json::to_string(&ReportLine {
            n: 1,
            event,
            host: Some("ok.test".into()),
            addr: Some("192.0.2.1:443".into()),
            up: 0,
            down,
            relayed,
            reason: String::new(),
        })
        .expect("json");
        t.push('\n');
        t
    };
    std::fs::write(&file, line(ReportEvent::Open, false, 0)).expect("write");
    // The end comes while the runner waits for it.
    let ender = {
        let file = file.clone();
        let end = line(ReportEvent::End, true, 99);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(file)
                .expect("open");
            std::io::Write::write_all(&mut f, end.as_bytes()).expect("append");
        })
    };
    for bounded in [true, false] {
        let spec = RunSpec {
            session: Ident::fixed("s1"),
            call: Ident::fixed("c1"),
            tool: ToolName::Shell,
            input: Vec::new(),
            mounts: Vec::new(),
            egress: Some(Egress {
                hosts: vec!["ok.test".into()],
                allow_addresses: Vec::new(),
                bounds: bounded.then_some(Bounds {
                    connections: 4,
                    bytes: 1 << 20,
                }),
            }),
            timeout: Duration::from_secs(1),
            staged_limit: None,
            toolset: None,
            limits: Default::default(),
            cache: None,
        };
        let sink = EgressSink::default();
        run_call(&backend, &spec, Reply::new(|_| {}).egress_to(sink.clone()));
        let got = sink.take();
        match bounded {
            true => {
                let s = got.expect("a summary");
                assert_eq!((s.connections, s.down, s.open_at_end), (1, 99, 0), "{s:?}");
            }
            false => assert_eq!(got, None),
        }
    }
    ender.join().expect("ender");
}
