//! `--report`: what each connection did, the report's bound, and a tunnel that a flood of
//! refusals cannot hide.

use super::*;

fn report_lines(path: &std::path::Path) -> Vec<proto::egress::ReportLine> {
    std::fs::read_to_string(path)
        .expect("report")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a report line"))
        .collect()
}

/// A policy that reports to `path`, and a fake dial whose `example.com` is a local server
/// that reads `ask` bytes and answers `answer`.
fn reporting(
    path: &std::path::Path,
    ask: usize,
    answer: &'static [u8],
) -> (FakeDial, Policy, std::thread::JoinHandle<()>) {
    let (target, h) = server(move |mut s| {
        let mut got = vec![0u8; ask];
        s.read_exact(&mut got).expect("read");
        s.write_all(answer).expect("write");
    });
    let mut dial = FakeDial::with(&[("example.com", &["93.184.216.34"])]);
    dial.target = Some(target);
    let p = policy().with_report(Report::create(path).expect("report"));
    (dial, p, h)
}

/// `--report`: each connection's opening and end, numbered, with bytes each way for a relayed
/// one, the reason for a refused one, no host the model spelled invalidly, and the accept
/// loop's closures too; an existing file or a link is never written through.
#[test]
fn the_report_says_what_each_connection_did() {
    use proto::egress::ReportEvent;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("connections.jsonl");
    let (dial, p, h) = reporting(&path, 5, b"hello, world");
    let (mut client, handle) = connected(&dial, &p);
    client.write_all(b"12345").expect("write");
    client.shutdown(Shutdown::Write).expect("half-close");
    let _ = read_to_close(&mut client);
    handle.join().expect("serve");
    h.join().expect("server");
    // Refused: a name with a NUL (left out of the report), then a host not allowed.
    let _ = exchange(
        &cat(&[&HELLO, &connect_req(b"example.com\0.evil", 443)]),
        true,
        &p,
        &dial,
    );
    let _ = exchange(
        &cat(&[&HELLO, &connect_req(b"other.test", 443)]),
        true,
        &p,
        &dial,
    );
    let lines = report_lines(&path);
    let shown: Vec<_> = lines
        .iter()
        .map(|l| (l.n, l.event, l.host.as_deref(), l.up, l.down, l.relayed))
        .collect();
    assert_eq!(
        shown,
        [
            (1, ReportEvent::Open, Some("example.com"), 0, 0, false),
            (1, ReportEvent::End, Some("example.com"), 5, 12, true),
            (2, ReportEvent::End, None, 0, 0, false),
            (3, ReportEvent::End, Some("other.test"), 0, 0, false),
        ]
    );
    let target = dial.target.map(|t| t.to_string());
    assert_eq!(lines[0].addr, target);
    assert_eq!(lines[3].reason, Reason::HostNotAllowed.to_string());
    // Never through what is already there.
    assert!(Report::create(&path).is_err());
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(dir.path().join("elsewhere"), &link).expect("symlink");
    assert!(Report::create(&link).is_err());
    assert!(!dir.path().join("elsewhere").exists());
}

/// The report stops at `REPORT_MAX_LINES` lines, however many connections come, and the
/// accept loop's closures past `--max-connections` are in it until then.
#[test]
fn the_report_is_bounded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("egress.sock");
    let path = dir.path().join("connections.jsonl");
    let listener = bind(&socket).expect("bind");
    let dial: Arc<dyn Dial> = Arc::new(FakeDial::with(&[]));
    let p = Arc::new(policy().with_report(Report::create(&path).expect("report")));
    let limits = Limits {
        open: 8,
        total: Some(2),
    };
    std::thread::spawn(move || run(listener, p, dial, limits));
    let max = proto::egress::REPORT_MAX_LINES;
    for _ in 0..max + 10 {
        let mut c = UnixStream::connect(&socket).expect("connect");
        let _ = c.write_all(&cat(&[&HELLO, &connect_req(b"example.com", 443)]));
        let _ = read_to_close(&mut c);
    }
    // The last closures are written after the client saw its close: wait for the count.
    let deadline = Instant::now() + Duration::from_secs(5);
    let lines = loop {
        let lines = report_lines(&path);
        if lines.len() as u64 >= max || Instant::now() > deadline {
            break lines;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(lines.len() as u64, max);
    // The third connection on is closed unserved (its line may come before the second's end).
    let closed = lines
        .iter()
        .filter(|l| l.reason.contains("the call's 2 connections are used"))
        .count() as u64;
    assert_eq!(closed, max - 2, "{:?}", &lines[..4]);
    assert!(lines.iter().all(|l| l.up == 0 && l.down == 0));
}

/// A flood of refusals past the report's bound cannot hide a tunnel: the lines of a relayed
/// connection, its opening and its end with the bytes, are written whatever came before.
#[test]
fn a_flood_of_refusals_cannot_hide_a_tunnel() {
    use proto::egress::{ReportEvent, Summary, REPORT_MAX_LINES};
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("connections.jsonl");
    let (dial, p, h) = reporting(&path, 3, b"back");
    let (mut client, handle) = connected(&dial, &p);
    for _ in 0..REPORT_MAX_LINES + 5 {
        let _ = exchange(
            &cat(&[&HELLO, &connect_req(b"other.test", 443)]),
            true,
            &p,
            &dial,
        );
    }
    client.write_all(b"abc").expect("write");
    client.shutdown(Shutdown::Write).expect("half-close");
    let _ = read_to_close(&mut client);
    handle.join().expect("serve");
    h.join().expect("server");
    let lines = report_lines(&path);
    let end = lines
        .iter()
        .find(|l| l.n == 1 && l.event == ReportEvent::End)
        .expect("the tunnel's end");
    assert_eq!((end.up, end.down, end.relayed), (3, 4, true));
    let s = Summary::of_report(&std::fs::read(&path).expect("read"));
    assert_eq!(
        (s.connections, s.up, s.down, s.open_at_end),
        (1, 3, 4, 0),
        "{s:?}"
    );
    assert!(s.incomplete.is_some(), "{s:?}");
}

/// The proxy's end of a connection that notes, at each write, how many lines the report has.
struct Watched {
    stream: UnixStream,
    report: std::path::PathBuf,
    lines_at_write: Arc<Mutex<Vec<usize>>>,
}

impl Conn for Watched {
    fn read_into(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.stream.read_into(buf)
    }
    fn write_all_from(&self, buf: &[u8]) -> io::Result<()> {
        let lines = std::fs::read_to_string(&self.report).map_or(0, |t| t.lines().count());
        self.lines_at_write.lock().expect("lock").push(lines);
        self.stream.write_all_from(buf)
    }
    fn set_read_deadline(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.stream.set_read_deadline(timeout)
    }
    fn set_write_deadline(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.stream.set_write_deadline(timeout)
    }
    fn shutdown_half(&self, how: Shutdown) -> io::Result<()> {
        self.stream.shutdown_half(how)
    }
}

/// A refusal is on record before the client reads it: a client that ends its call on the
/// answer ends the proxy with it, and a refusal written after would be lost (SOCKS5 and HTTP).
#[test]
fn a_refusal_is_on_record_before_its_answer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("connections.jsonl");
    let p = policy().with_report(Report::create(&path).expect("report"));
    let dial = FakeDial::with(&[]);
    let requests = [
        cat(&[&HELLO, &connect_req(b"other.test", 443)]),
        b"CONNECT other.test:443 HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
    ];
    for (i, request) in requests.iter().enumerate() {
        let (mut client, server) = UnixStream::pair().expect("pair");
        let lines_at_write = Arc::new(Mutex::new(Vec::new()));
        let watched = Watched {
            stream: server,
            report: path.clone(),
            lines_at_write: lines_at_write.clone(),
        };
        client.write_all(request).expect("write");
        let outcome = serve(watched, &p, &dial);
        assert!(
            matches!(outcome.reason, Reason::HostNotAllowed),
            "{i}: {outcome}"
        );
        let at = lines_at_write.lock().expect("lock").clone();
        // The last write is the refusal; the report had this connection's end by then.
        assert_eq!(at.last(), Some(&(i + 1)), "request {i}: {at:?}");
        assert!(
            !read_to_close(&mut client).is_empty(),
            "request {i}: no answer"
        );
    }
}
