//! toolkit run as a program against temporary directories: every exit code and output format
//! of docs/design.md#the-toolkit.

#![forbid(unsafe_code)]
// A test: a setup step that fails is the test failing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn toolkit(args: &[&str], stdin: &[u8]) -> (i32, Vec<u8>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolkit"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start toolkit");
    let mut stdin_pipe = child.stdin.take().expect("stdin");
    let input = stdin.to_vec();
    // A writer thread: toolkit may stop reading early (oversized input) and that must not
    // block the test.
    let writer = std::thread::spawn(move || {
        let _ = stdin_pipe.write_all(&input);
    });
    let out = child.wait_with_output().expect("wait");
    let _ = writer.join();
    (
        out.status.code().unwrap_or(-1),
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn run(tool: &str, json: &str) -> (i32, String) {
    let (code, out, _) = toolkit(&[tool], json.as_bytes());
    (code, String::from_utf8_lossy(&out).into_owned())
}

fn j(v: serde_json::Value) -> String {
    v.to_string()
}

#[test]
fn read_file_table() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    fs::write(d.join("a.txt"), "hello\nworld\n").unwrap();
    fs::write(d.join("empty"), "").unwrap();
    fs::write(d.join("big"), vec![b'x'; 1024 * 1024 + 1]).unwrap();
    fs::write(d.join("max"), vec![b'x'; 1024 * 1024]).unwrap();
    fs::write(d.join("bin"), b"\xff\xfe\x00").unwrap();
    fs::write(d.join("secret"), "s").unwrap();
    fs::set_permissions(d.join("secret"), fs::Permissions::from_mode(0o000)).unwrap();
    let p = |n: &str| d.join(n).to_string_lossy().into_owned();
    let root = rustix::process::geteuid().is_root();

    let cases: Vec<(String, i32, String)> = vec![
        (p("a.txt"), 0, "hello\nworld\n".into()),
        (p("empty"), 0, "".into()),
        (
            p("big"),
            1,
            format!("read_file: {}: larger than 1 MiB\n", p("big")),
        ),
        (
            p("bin"),
            1,
            format!("read_file: {}: not UTF-8 text\n", p("bin")),
        ),
        (
            p("nope"),
            1,
            format!("read_file: {}: no such file or directory\n", p("nope")),
        ),
        (p(""), 1, format!("read_file: {}: is a directory\n", p(""))),
        (
            format!("{}/x", p("a.txt")),
            1,
            format!(
                "read_file: {}/x: a component of the path is not a directory\n",
                p("a.txt")
            ),
        ),
    ];
    for (path, code, out) in cases {
        assert_eq!(
            run("read_file", &j(serde_json::json!({ "path": path }))),
            (code, out),
            "{path}"
        );
    }
    let (code, out) = run("read_file", &j(serde_json::json!({ "path": p("max") })));
    assert_eq!((code, out.len()), (0, 1024 * 1024));
    if !root {
        assert_eq!(
            run("read_file", &j(serde_json::json!({ "path": p("secret") }))),
            (
                1,
                format!("read_file: {}: permission denied\n", p("secret"))
            )
        );
    }
}

#[test]
fn write_file_table() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let p = |n: &str| d.join(n).to_string_lossy().into_owned();
    fs::write(d.join("old"), "a much longer old content").unwrap();
    fs::create_dir(d.join("sub")).unwrap();

    let cases: Vec<(String, &str, i32, String)> = vec![
        (
            p("new"),
            "héllo",
            0,
            format!("wrote 6 bytes to {}\n", p("new")),
        ),
        (
            p("old"),
            "short",
            0,
            format!("wrote 5 bytes to {}\n", p("old")),
        ),
        (
            p("empty"),
            "",
            0,
            format!("wrote 0 bytes to {}\n", p("empty")),
        ),
        (
            p("sub"),
            "x",
            1,
            format!("write_file: {}: is a directory\n", p("sub")),
        ),
        (
            p("missing/file"),
            "x",
            1,
            format!(
                "write_file: {}: the parent directory does not exist\n",
                p("missing/file")
            ),
        ),
    ];
    for (path, content, code, out) in cases {
        let input = j(serde_json::json!({ "path": path, "content": content }));
        assert_eq!(run("write_file", &input), (code, out), "{path}");
    }
    assert_eq!(fs::read_to_string(d.join("new")).unwrap(), "héllo");
    assert_eq!(fs::read_to_string(d.join("old")).unwrap(), "short");
    assert!(!d.join("missing").exists());
}

#[test]
fn shell_table() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_string_lossy().into_owned();
    let cases: Vec<(serde_json::Value, i32, String)> = vec![
        (
            serde_json::json!({"command": "echo hi"}),
            0,
            "hi\n\n[exit 0]".into(),
        ),
        (
            serde_json::json!({"command": "exit 3"}),
            0,
            "\n[exit 3]".into(),
        ),
        // one pipe, in the order written
        (
            serde_json::json!({"command": "echo 1; echo 2 >&2; echo 3; echo 4 >&2"}),
            0,
            "1\n2\n3\n4\n\n[exit 0]".into(),
        ),
        (
            serde_json::json!({"command": "pwd", "cwd": d}),
            0,
            format!("{d}\n\n[exit 0]"),
        ),
        (
            serde_json::json!({"command": "pwd", "cwd": "/nonexistent-dir"}),
            1,
            "shell: /nonexistent-dir: no such directory\n".into(),
        ),
        // standard input is empty
        (
            serde_json::json!({"command": "cat; echo done"}),
            0,
            "done\n\n[exit 0]".into(),
        ),
        (
            serde_json::json!({"command": "kill -9 $$"}),
            0,
            "\n[killed by signal 9]".into(),
        ),
        (
            serde_json::json!({"command": "kill -TERM $$"}),
            0,
            "\n[killed by signal 15]".into(),
        ),
    ];
    for (mut input, code, out) in cases {
        // In the temporary directory unless the case names one: the default, /tmp, need not
        // exist where these tests run (Nix's build sandbox has none).
        if input.get("cwd").is_none() {
            input["cwd"] = d.clone().into();
        }
        assert_eq!(run("shell", &input.to_string()), (code, out), "{input}");
    }
}

#[test]
fn shell_starts_in_tmp_by_default() {
    if !Path::new("/tmp").is_dir() {
        eprintln!("SKIPPED: this host has no /tmp");
        return;
    }
    assert_eq!(
        run("shell", r#"{"command":"pwd"}"#),
        (0, "/tmp\n\n[exit 0]".into())
    );
}

/// What a shell command sees as HOME and TMPDIR is toolkit's own setting, not the sandbox's:
/// Podman gives toolkit the image's HOME (or `/`) and no TMPDIR, bwrap gives it both at /tmp.
#[test]
fn shell_runs_with_home_and_tmpdir_in_tmp_whatever_toolkit_was_given() {
    let command = j(serde_json::json!({
        "command": "echo \"home=$HOME tmpdir=$TMPDIR\"",
        "cwd": "/"
    }));
    for (home, tmpdir) in [
        (Some("/"), None),
        (Some("/elsewhere"), Some("/var/tmp")),
        (None, None),
    ] {
        let mut c = Command::new(env!("CARGO_BIN_EXE_toolkit"));
        c.arg("shell")
            .env_remove("HOME")
            .env_remove("TMPDIR")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        if let Some(h) = home {
            c.env("HOME", h);
        }
        if let Some(t) = tmpdir {
            c.env("TMPDIR", t);
        }
        let mut child = c.spawn().expect("start toolkit");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(command.as_bytes())
            .expect("input");
        let out = child.wait_with_output().expect("wait");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "home=/tmp tmpdir=/tmp\n\n[exit 0]",
            "given HOME {home:?} and TMPDIR {tmpdir:?}"
        );
    }
}

#[test]
fn shell_returns_when_sh_exits_even_if_a_background_child_holds_the_pipe() {
    let start = Instant::now();
    let (code, out) = run(
        "shell",
        r#"{"command":"echo before; (sleep 30; echo late) & echo after","cwd":"/"}"#,
    );
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "held by the background child"
    );
    assert_eq!(code, 0);
    assert_eq!(out, "before\nafter\n\n[exit 0]");
}

#[test]
fn shell_output_larger_than_a_pipe_buffer_arrives_whole() {
    let (code, out) = run(
        "shell",
        r#"{"command":"head -c 1000000 /dev/zero | tr '\\0' a","cwd":"/"}"#,
    );
    assert_eq!(code, 0);
    assert_eq!(out.len(), 1_000_000 + "\n[exit 0]".len());
}

/// SIGTERM ends toolkit at once with 128 + SIGTERM, whatever the command it runs is doing: as
/// its container's first process it would otherwise not see the signal at all.
#[test]
fn sigterm_ends_toolkit_at_once_with_143() {
    use rustix::process::{kill_process, Pid, Signal};
    use std::io::{BufRead, BufReader};

    let mut child = Command::new(env!("CARGO_BIN_EXE_toolkit"))
        .arg("shell")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start toolkit");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin
        .write_all(br#"{"command":"echo started; sleep 10","cwd":"/"}"#)
        .expect("input");
    drop(stdin);
    // The command's first line: toolkit is past its start, its handler set.
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("the first line");
    assert_eq!(line, "started\n");
    let start = Instant::now();
    kill_process(Pid::from_child(&child), Signal::TERM).expect("SIGTERM");
    let status = child.wait().expect("wait");
    assert_eq!(status.code(), Some(143), "{status:?}");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "SIGTERM waited for the command"
    );
}

#[test]
fn misuse_is_exit_2_with_nothing_on_stdout() {
    let big = format!(r#"{{"path":"{}"}}"#, "a".repeat(2 * 1024 * 1024));
    let cases: Vec<(Vec<&str>, Vec<u8>)> = vec![
        (vec![], vec![]),
        (vec!["frobnicate"], b"{}".to_vec()),
        (vec!["read_file", "extra"], br#"{"path":"/tmp"}"#.to_vec()),
        (vec!["read_file"], b"".to_vec()),
        (vec!["read_file"], b"not json".to_vec()),
        (vec!["read_file"], br#"{"path":"/tmp","mode":"r"}"#.to_vec()),
        (vec!["read_file"], br#"["/tmp"]"#.to_vec()),
        (vec!["read_file"], b"{\"path\":\"\xff\"}".to_vec()),
        (vec!["read_file"], big.into_bytes()),
        (vec!["write_file"], br#"{"path":"/tmp/x"}"#.to_vec()),
        (vec!["shell"], br#"{"command":"ls","cwd":5}"#.to_vec()),
        (
            vec!["http_fetch"],
            br#"{"url":"https://a.example/","method":"POST"}"#.to_vec(),
        ),
        (vec!["egress-proxy"], b"".to_vec()),
        (vec!["egress-proxy", "--socket"], b"".to_vec()),
    ];
    for (args, input) in cases {
        let (code, out, err) = toolkit(&args, &input);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?}");
        assert!(
            !err.is_empty(),
            "{args:?}: a reason goes to stderr for brokerd's log"
        );
    }
}

/// The binary brokerd puts in the image must be static: no program interpreter, no shared
/// libraries. Checked on the musl release build when one exists (`make static-check` builds it).
#[test]
fn musl_release_build_is_static_when_present() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/x86_64-unknown-linux-musl/release/toolkit");
    if !path.exists() {
        eprintln!(
            "no musl release build at {}; `make static-check` covers it",
            path.display()
        );
        return;
    }
    let bytes = fs::read(&path).unwrap();
    let (interp, needed) = elf_interp_and_needed(&bytes);
    assert!(!interp, "the toolkit has a PT_INTERP header");
    assert_eq!(needed, 0, "the toolkit names shared libraries");
}

/// Minimal ELF64 reading: whether a PT_INTERP program header exists and how many DT_NEEDED
/// entries the dynamic section has.
fn elf_interp_and_needed(b: &[u8]) -> (bool, usize) {
    assert_eq!(&b[..4], b"\x7fELF");
    assert_eq!(b[4], 2, "ELF64");
    let u16_at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap()) as usize;
    let phoff = u64_at(0x20);
    let phentsize = u16_at(0x36);
    let phnum = u16_at(0x38);
    let mut interp = false;
    let mut needed = 0;
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        let kind = u32::from_le_bytes(b[ph..ph + 4].try_into().unwrap());
        if kind == 3 {
            interp = true;
        }
        if kind == 2 {
            let off = u64_at(ph + 8);
            let size = u64_at(ph + 32);
            let mut o = off;
            while o + 16 <= off + size {
                let tag = u64_at(o);
                if tag == 0 {
                    break;
                }
                if tag == 1 {
                    needed += 1;
                }
                o += 16;
            }
        }
    }
    (interp, needed)
}
