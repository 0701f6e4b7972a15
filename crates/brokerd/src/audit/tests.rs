use super::log::*;
use super::*;
use std::fs;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};

fn call(n: u64) -> Record {
    Record {
        kind: RecordKind::Call,
        session: Some("s1".into()),
        call: Some(format!("c{n}")),
        grant: Some("notes".into()),
        tool: Some("shell".into()),
        decision: Some(Decided::Allow),
        class: Some(CommandClass::ReadOnly),
        executable: Some("ls".into()),
        target: Some("ls -la".into()),
        status: Some(Ended::Result),
        duration_ms: Some(12),
        ..Record::default()
    }
}

fn lines(path: &Path) -> Vec<String> {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

fn write_lines(path: &Path, lines: &[String]) {
    let mut s = lines.join("\n");
    s.push('\n');
    fs::write(path, s).expect("write");
}

#[test]
fn chain_numbers_and_continues_after_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.jsonl");
    let mut a = Audit::open(&path).expect("open");
    assert_eq!(a.head(), Head::genesis());
    for n in 1..=3 {
        let h = a.append(call(n)).expect("append");
        assert_eq!(h.seq, n);
    }
    let head = a.head();
    drop(a);
    let ls = lines(&path);
    assert_eq!(ls.len(), 3);
    let first: Record = serde_json::from_str(&ls[0]).expect("json");
    assert_eq!((first.seq, first.prev.as_str()), (1, GENESIS));
    let second: Record = serde_json::from_str(&ls[1]).expect("json");
    assert_eq!(second.prev, sha256_hex(ls[0].as_bytes()));
    assert_eq!(head.hash, sha256_hex(ls[2].as_bytes()));
    // Reopened: the chain goes on.
    let mut a = Audit::open(&path).expect("reopen");
    assert_eq!(a.head(), head);
    assert_eq!(a.append(call(4)).expect("append").seq, 4);
    assert_eq!(verify(&path).map(|h| h.seq), Ok(4));
}

#[test]
fn records_are_metadata_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("a.jsonl");
    let mut a = Audit::open(&path).expect("open");
    a.append(Record::default()).expect("append");
    let line = &lines(&path)[0];
    // Absent fields are not written; the fields present are fixed by the struct.
    let v: serde_json::Value = serde_json::from_str(line).expect("json");
    let keys: Vec<&str> = v
        .as_object()
        .map(|o| o.keys().map(|k| k.as_str()).collect())
        .unwrap_or_default();
    assert_eq!(keys.len(), 4, "{line}");
    for k in ["seq", "prev", "time", "kind"] {
        assert!(keys.contains(&k), "{k}");
    }
    assert!(v["time"]
        .as_str()
        .is_some_and(|t| t.ends_with('Z') && t.len() == 24));
}

#[test]
fn torn_tails_are_recorded_not_rewritten() {
    // (what the crash left after two good records, expected seq of the head after reopen)
    let cases: &[(&[u8], u64)] = &[
        (b"{\"seq\":3,\"prev\":\"ab", 3),
        (b"garbage line\n", 3),
        (b"\x00\x00\x00", 3),
    ];
    for (i, (tail, head_seq)) in cases.iter().enumerate() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("a.jsonl");
        let mut a = Audit::open(&path).expect("open");
        a.append(call(1)).expect("append");
        a.append(call(2)).expect("append");
        drop(a);
        let before = fs::read(&path).expect("read");
        let mut f = OpenOptions::new().append(true).open(&path).expect("open");
        f.write_all(tail).expect("write");
        drop(f);
        assert!(verify(&path).is_err(), "case {i}: a torn tail is visible");
        let mut a = Audit::open(&path).expect("reopen");
        assert_eq!(a.head().seq, *head_seq, "case {i}");
        let after = fs::read(&path).expect("read");
        // Nothing before was changed; the torn bytes are still there.
        assert!(after.starts_with(&before), "case {i}");
        assert!(after[before.len()..].starts_with(tail), "case {i}");
        let ls = lines(&path);
        let torn: Record = serde_json::from_str(ls.last().map(|s| s.as_str()).unwrap_or(""))
            .expect("torn_tail record");
        assert_eq!(torn.kind, RecordKind::TornTail, "case {i}");
        let torn_line = tail.strip_suffix(b"\n").unwrap_or(tail);
        assert_eq!(torn.torn_sha256, Some(sha256_hex(torn_line)), "case {i}");
        a.append(call(4)).expect("append");
        assert_eq!(verify(&path).map(|h| h.seq), Ok(4), "case {i}");
        // Reopening again changes nothing.
        let len = fs::metadata(&path).expect("meta").len();
        drop(a);
        let a = Audit::open(&path).expect("reopen");
        assert_eq!(fs::metadata(&path).expect("meta").len(), len);
        assert_eq!(a.head().seq, 4);
    }
}

#[test]
fn a_record_missing_only_its_newline_is_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("a.jsonl");
    let mut a = Audit::open(&path).expect("open");
    a.append(call(1)).expect("append");
    let h = a.append(call(2)).expect("append");
    drop(a);
    let bytes = fs::read(&path).expect("read");
    fs::write(&path, &bytes[..bytes.len() - 1]).expect("write");
    let a = Audit::open(&path).expect("reopen");
    assert_eq!(a.head(), h);
    assert_eq!(fs::read(&path).expect("read"), bytes);
}

#[test]
fn verify_finds_tampering() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("a.jsonl");
    let mut a = Audit::open(&path).expect("open");
    for n in 1..=5 {
        a.append(call(n)).expect("append");
    }
    drop(a);
    let good = lines(&path);
    let changed = good[2].replace("\"ls -la\"", "\"rm -rf x\"");
    type Edit = Box<dyn Fn(&mut Vec<String>)>;
    // (edit, expected error)
    let cases: Vec<(Edit, VerifyError)> = vec![
        (
            Box::new(move |l| l[2] = changed.clone()),
            VerifyError::ChainBroken {
                path: path.clone(),
                line: 4,
            },
        ),
        (
            Box::new(|l| {
                l.remove(1);
            }),
            VerifyError::SeqGap {
                path: path.clone(),
                line: 2,
                expected: 2,
                found: 3,
            },
        ),
        (
            Box::new(|l| l.swap(1, 2)),
            VerifyError::SeqGap {
                path: path.clone(),
                line: 2,
                expected: 2,
                found: 3,
            },
        ),
        (
            Box::new(|l| {
                let dup = l[1].clone();
                l.insert(2, dup);
            }),
            VerifyError::SeqGap {
                path: path.clone(),
                line: 3,
                expected: 3,
                found: 2,
            },
        ),
        (
            Box::new(|l| l.insert(3, "not json".into())),
            VerifyError::NotARecord {
                path: path.clone(),
                line: 4,
            },
        ),
        (
            Box::new(|l| {
                l.remove(0);
                // A forged first record: seq renumbered to 1 without the genesis prev.
                let r: Record = serde_json::from_str(&l[0]).unwrap_or_default();
                let forged = Record { seq: 1, ..r };
                l[0] = serde_json::to_string(&forged).unwrap_or_default();
            }),
            VerifyError::BadGenesis {
                path: path.clone(),
                line: 1,
            },
        ),
        (
            Box::new(|l| l.clear()),
            VerifyError::Empty { path: path.clone() },
        ),
    ];
    for (i, (edit, want)) in cases.into_iter().enumerate() {
        let mut l = good.clone();
        edit(&mut l);
        if l.is_empty() {
            fs::write(&path, "").expect("write");
        } else {
            write_lines(&path, &l);
        }
        assert_eq!(verify(&path), Err(want), "case {i}");
    }
    write_lines(&path, &good);
    assert_eq!(verify(&path).map(|h| h.seq), Ok(5));
    // A cut-off last line is reported with its line number.
    let mut s = good.join("\n");
    s.push_str("\n{\"seq\":6");
    fs::write(&path, s).expect("write");
    assert_eq!(
        verify(&path),
        Err(VerifyError::TornTail {
            path: path.clone(),
            line: 6
        })
    );
}

#[test]
fn rotation_carries_the_chain() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("a.jsonl");
    let rotation = Rotation {
        max_bytes: 1000,
        keep: 2,
    };
    let mut a = Audit::open_with(&path, rotation).expect("open");
    for n in 1..=20 {
        a.append(call(n)).expect("append");
    }
    let head = a.head();
    assert_eq!(head.seq, 20);
    assert!(rotated(&path, 1).exists() && rotated(&path, 2).exists());
    assert!(!rotated(&path, 3).exists(), "only `keep` files are kept");
    for p in [&path, &rotated(&path, 1), &rotated(&path, 2)] {
        assert!(fs::metadata(p).expect("meta").len() <= 1000);
        assert!(verify(p).is_ok(), "{}", p.display());
    }
    // The current file's first record continues the previous file's last.
    let first: Record = serde_json::from_str(&lines(&path)[0]).expect("json");
    assert_eq!(first.prev, verify(&rotated(&path, 1)).expect("verify").hash);
    assert_eq!(verify(&path), Ok(head.clone()));
    // Both kept files and the current one form one chain.
    assert_eq!(verify_rotated(&path), Ok(head.clone()));
    // A crash right after the rename leaves an empty file: the chain continues from .1.
    drop(a);
    fs::rename(&path, rotated(&path, 1)).expect("rename");
    fs::write(&path, "").expect("write");
    let mut a = Audit::open_with(&path, rotation).expect("reopen");
    assert_eq!(a.head(), head);
    assert_eq!(a.append(call(21)).expect("append").seq, 21);
}

/// A sink over a file that counts its syncs.
struct Counting(File, Arc<Mutex<usize>>);
impl Sink for Counting {
    fn put(&mut self, buf: &[u8]) -> io::Result<()> {
        Write::write_all(&mut self.0, buf)
    }
    fn sync(&mut self) -> io::Result<()> {
        *self.1.lock().expect("count") += 1;
        Ok(())
    }
}

/// An outcome written unsynced is in the file at once and reaches the disk with the next
/// synced record or an explicit sync, each one sync; nothing pending is no sync at all.
#[test]
fn unsynced_records_are_synced_by_the_next_record_or_a_sync() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("a.jsonl");
    let mut a = Audit::open(&path).expect("open");
    let syncs = Arc::new(Mutex::new(0));
    let file = open_append(&path).expect("file");
    a.sink = Box::new(Counting(file, syncs.clone()));
    let n = || *syncs.lock().expect("count");
    a.append(call(1)).expect("decision");
    assert_eq!(n(), 1);
    a.append_unsynced(call(2)).expect("outcome");
    assert_eq!(n(), 1, "the outcome does not wait for the disk");
    assert_eq!(lines(&path).len(), 2, "but it is written");
    assert_eq!(a.head().seq, 2);
    a.append(call(3)).expect("next decision");
    assert_eq!(n(), 2, "one sync covers the outcome and the next record");
    a.sync().expect("nothing pending");
    assert_eq!(n(), 2);
    a.append_unsynced(call(4)).expect("outcome");
    a.sync().expect("sync");
    a.sync().expect("again");
    assert_eq!(n(), 3);
    assert_eq!(verify(&path).map(|h| h.seq), Ok(4));
}

/// A decision without its outcome (a crash lost it, or the call still runs) is named by
/// `unfinished`, across rotated files; a decided call with an outcome, a refusal, and a
/// record that carries its own status are not.
#[test]
fn a_decision_whose_outcome_was_lost_is_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("a.jsonl");
    let rotation = Rotation {
        max_bytes: 600,
        keep: 5,
    };
    let mut a = Audit::open_with(&path, rotation).expect("open");
    let rec = |call: &str, decision: Decided, status: Option<Ended>| Record {
        kind: RecordKind::Call,
        session: Some("s".into()),
        call: Some(call.into()),
        tool: Some("shell".into()),
        decision: Some(decision),
        status,
        ..Record::default()
    };
    a.append(rec("done", Decided::Allow, None)).expect("append");
    a.append_unsynced(rec("done", Decided::Ran, Some(Ended::Result)))
        .expect("append");
    a.append(rec("ref", Decided::Refused, None))
        .expect("append");
    a.append(rec("busy", Decided::Allow, None)).expect("append");
    a.append_unsynced(rec("busy", Decided::NotRun, Some(Ended::Busy)))
        .expect("append");
    a.append(rec("layer", Decided::Allow, Some(Ended::Unavailable)))
        .expect("append");
    a.append(rec("asked", Decided::Ask, None)).expect("append");
    a.append(rec("asked", Decided::Approved, None))
        .expect("append");
    a.append(rec("lost", Decided::Allow, None)).expect("append");
    a.sync().expect("sync");
    assert!(rotated(&path, 1).exists(), "the records span files");
    assert!(verify_rotated(&path).is_ok());
    let open: Vec<(String, u64)> = unfinished(&path)
        .expect("read")
        .into_iter()
        .map(|u| (u.call, u.seq))
        .collect();
    assert_eq!(open, [("asked".to_string(), 8), ("lost".to_string(), 9)]);
    let said = unfinished(&path).expect("read")[1].to_string();
    assert!(
        said.contains("brokerd stopped before its outcome reached the disk"),
        "{said}"
    );
}

struct FullDisk;
impl Sink for FullDisk {
    fn put(&mut self, _: &[u8]) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::ENOSPC))
    }
    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }
}

struct HalfWrite(File);
impl Sink for HalfWrite {
    fn put(&mut self, buf: &[u8]) -> io::Result<()> {
        Write::write_all(&mut self.0, &buf[..buf.len() / 2])?;
        Err(io::Error::from_raw_os_error(libc::ENOSPC))
    }
    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_full_disk_is_an_error_and_recovers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("a.jsonl");
    let mut a = Audit::open(&path).expect("open");
    a.append(call(1)).expect("append");
    a.sink = Box::new(FullDisk);
    assert!(matches!(a.append(call(2)), Err(AuditError::Write(_))));
    assert_eq!(a.head().seq, 1);
    // Half a line reached the disk before it filled up.
    let f = OpenOptions::new().append(true).open(&path).expect("open");
    a.sink = Box::new(HalfWrite(f));
    a.needs_recovery = false; // keep the injected sink for this append
    assert!(matches!(a.append(call(2)), Err(AuditError::Write(_))));
    // Space again: the torn half line is recorded and the chain goes on.
    let h = a.append(call(2)).expect("append after recovery");
    assert_eq!(h.seq, 3);
    assert_eq!(verify(&path), Ok(h));
    // The real thing: /dev/full.
    if Path::new("/dev/full").exists() {
        let mut a = Audit::open(Path::new("/dev/full")).expect("open /dev/full");
        assert!(matches!(a.append(call(1)), Err(AuditError::Write(_))));
    }
}

/// The enums of a record are written as the words the log always had.
#[test]
fn decisions_statuses_and_classes_keep_their_words_on_disk() {
    let word = |v: serde_json::Value| v.as_str().unwrap_or_default().to_string();
    let decided = [
        (Decided::Allow, "allow"),
        (Decided::Ask, "ask"),
        (Decided::Approved, "approved"),
        (Decided::Declined, "declined"),
        (Decided::Refused, "refused"),
        (Decided::Stopped, "stopped"),
        (Decided::Ran, "ran"),
        (Decided::NotRun, "not_run"),
    ];
    for (d, w) in decided {
        assert_eq!(word(serde_json::json!(d)), w);
    }
    let ended = [
        (Ended::Result, "result"),
        (Ended::Failed, "failed"),
        (Ended::Unavailable, "unavailable"),
        (Ended::Refused, "refused"),
        (Ended::Busy, "busy"),
        (Ended::Cancelled, "cancelled"),
    ];
    for (e, w) in ended {
        assert_eq!((word(serde_json::json!(e)).as_str(), e.as_str()), (w, w));
    }
    for (c, w) in [
        (CommandClass::ReadOnly, "read_only"),
        (CommandClass::WorkspaceMutating, "workspace_mutating"),
        (CommandClass::ShellComplex, "shell_complex"),
        (CommandClass::Dangerous, "dangerous"),
    ] {
        assert_eq!(word(serde_json::json!(c)), w);
    }
    // A line written before the enums reads back the same.
    let line = r#"{"seq":3,"prev":"x","time":"t","kind":"call","decision":"not_run","class":"dangerous","status":"busy"}"#;
    let rec: Record = serde_json::from_str(line).expect("a record");
    assert_eq!(
        (rec.decision, rec.class, rec.status),
        (
            Some(Decided::NotRun),
            Some(CommandClass::Dangerous),
            Some(Ended::Busy)
        )
    );
}

#[test]
fn redaction() {
    let cases = [
        ("ls -la", "ls -la"),
        (
            "GITHUB_TOKEN=abc123 gh pr list",
            "GITHUB_TOKEN=[redacted] gh pr list",
        ),
        ("API_KEY='a b c' curl x", "API_KEY=[redacted] curl x"),
        ("PASSWORD=\"p w\" x", "PASSWORD=[redacted] x"),
        (
            "mysql --password=hunter2 db",
            "mysql --password=[redacted] db",
        ),
        ("export Db_Passwd=x; ls", "export Db_Passwd=[redacted]; ls"),
        (
            "https://a.example/p?q=1&token=abc&x=2",
            "https://a.example/p?q=1&token=[redacted]&x=2",
        ),
        (
            "AUTH_HEADER=x COOKIE=y ls",
            "AUTH_HEADER=[redacted] COOKIE=[redacted] ls",
        ),
        (
            "aws_secret_access_key=k",
            "aws_secret_access_key=[redacted]",
        ),
        ("CREDENTIALS_FILE=/x ls", "CREDENTIALS_FILE=[redacted] ls"),
        ("X=1 NAME=bob ls", "X=1 NAME=bob ls"),
        ("a=b=c", "a=b=c"),
        ("=token", "=token"),
        ("KEY=", "KEY=[redacted]"),
    ];
    for (input, want) in cases {
        assert_eq!(redact(input), want, "{input}");
    }
}

#[test]
fn command_summaries() {
    // (command, executable, target)
    let cases = [
        ("ls -la", Some("ls"), "ls -la"),
        (
            "TOKEN=abc LANG=C curl -s x",
            Some("curl"),
            "TOKEN=[redacted] LANG=C curl -s x",
        ),
        (
            "env A=1 B=2 python3 x.py",
            Some("python3"),
            "env A=1 B=2 python3 x.py",
        ),
        ("'git' status", Some("git"), "'git' status"),
        // From the shell parse, not a whitespace split.
        ("PASSWORD='a b' ls", Some("ls"), "PASSWORD=[redacted] ls"),
        (
            "A=\"x y\" B='1 2' \"git\" push",
            Some("git"),
            "A=\"x y\" B='1 2' \"git\" push",
        ),
        (
            "env -i HOME=/tmp ls -l",
            Some("ls"),
            "env -i HOME=/tmp ls -l",
        ),
        ("cd /srv && make", Some("cd"), "cd /srv && make"),
        ("", None, ""),
        ("X=1", None, "X=1"),
        // The model's control and bidi characters are kept as escapes: the log is read.
        (
            "ls\u{1b}[2J\n\u{202e}txt",
            Some("ls\\x1b[2J"),
            "ls\\x1b[2J\\n\\u{202e}txt",
        ),
        (
            "TOKEN=a\u{202e}b cat 'a\\b'",
            Some("cat"),
            "TOKEN=[redacted] cat 'a\\\\b'",
        ),
    ];
    // The program comes from the classifier's one parse of the command.
    for (cmd, exe, target) in cases {
        let e = crate::classify::classify(cmd, &[])
            .program
            .as_deref()
            .and_then(executable);
        let t = summary(cmd);
        assert_eq!(e.as_deref(), exe, "{cmd}");
        assert_eq!(t, target, "{cmd}");
    }
    let long = "x".repeat(5000);
    assert_eq!(summary(&long).chars().count(), MAX_SUMMARY_CHARS + 1);
    // The cap counts the model's characters; each is then shown whole.
    let long = "\u{1b}".repeat(5000);
    assert_eq!(
        summary(&long),
        format!("{}…", "\\x1b".repeat(MAX_SUMMARY_CHARS))
    );
    assert_eq!(summary("/srv/a\u{200b}b\r"), "/srv/a\\u{200b}b\\r");
    // A text rendered when it was made is not rendered again.
    assert_eq!(
        clip("read_file: a\\nb is outside"),
        "read_file: a\\nb is outside"
    );
}

#[test]
fn times() {
    let cases = [
        (0, 0, "1970-01-01T00:00:00.000Z"),
        (951_782_400, 5, "2000-02-29T00:00:00.005Z"),
        (1_764_480_000, 999, "2025-11-30T05:20:00.999Z"),
        (4_102_444_799, 0, "2099-12-31T23:59:59.000Z"),
    ];
    for (secs, ms, want) in cases {
        assert_eq!(format_time(secs, ms), want);
    }
}
