//! The four tools as the sandbox runs them (docs/design.md#the-toolkit).
//!
//! Each reads all of standard input (at most [`MAX_INPUT`] bytes), parses it strictly as its
//! `proto::tools` struct, does the work, writes what the model should see to standard output,
//! and answers an [`Exit`]:
//!
//! | exit | meaning                                              | brokerd answers            |
//! |------|------------------------------------------------------|----------------------------|
//! | 0    | the tool did its work                                | result, content = stdout   |
//! | 1    | it could not, for a reason the model should read     | result: one line, `<tool>: …` |
//! | 2    | toolkit was run wrongly (bad input, unknown command) | failed, a fixed sentence   |

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::thread;

use proto::tools::{
    parse_args, HttpFetchArgs, ReadFileArgs, ShellArgs, WriteFileArgs, EGRESS_SOCKET,
};
use rustix::event::{PollFd, PollFlags};
use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};
use rustix::io::Errno;

use crate::bridge::Bridge;

pub use proto::tools::MAX_INPUT;
/// The largest file read_file returns.
pub const MAX_READ: u64 = 1024 * 1024;
pub use proto::tools::DEFAULT_CWD;
/// The shell, and curl, inside the image.
pub const SHELL: &str = "/bin/sh";
pub const CURL: &str = "/bin/curl";
/// What curl may download (docs/design.md#http_fetch-and-its-egress-proxy: `--max-filesize`), plus
/// room for the `[http <status>]` trailer; http_fetch holds the body until curl has finished.
const MAX_FETCH_BODY: usize = 8_388_608 + 64;

/// How a tool ended, as toolkit's exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 0: the tool did its work.
    Done = 0,
    /// 1: the tool could not do it; standard output holds one line saying why.
    Refused = 1,
    /// 2: toolkit was run wrongly.
    Misused = 2,
}

/// Why toolkit was run wrongly (exit 2). Printed on standard error for brokerd's log.
#[derive(Debug, thiserror::Error)]
pub enum Misuse {
    #[error("standard input could not be read: {0}")]
    Stdin(io::Error),
    #[error("the input is larger than {MAX_INPUT} bytes")]
    TooLarge,
    #[error("the input is not UTF-8")]
    NotUtf8,
    #[error("the input does not parse as {tool}'s arguments: {reason}")]
    BadArgs { tool: &'static str, reason: String },
    #[error("standard output could not be written: {0}")]
    Stdout(io::Error),
}

/// Reads standard input, refusing more than [`MAX_INPUT`] bytes or text that is not UTF-8.
pub fn read_input(mut input: impl Read) -> Result<String, Misuse> {
    let mut buf = Vec::new();
    input
        .by_ref()
        .take(MAX_INPUT as u64 + 1)
        .read_to_end(&mut buf)
        .map_err(Misuse::Stdin)?;
    if buf.len() > MAX_INPUT {
        return Err(Misuse::TooLarge);
    }
    String::from_utf8(buf).map_err(|_| Misuse::NotUtf8)
}

fn parse<T: serde::de::DeserializeOwned>(tool: &'static str, text: &str) -> Result<T, Misuse> {
    parse_args(text).map_err(|e| Misuse::BadArgs {
        tool,
        reason: e.to_string(),
    })
}

/// The reason part of `<tool>: <path>: <reason>`, in words the model can act on.
fn reason(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::NotFound => "no such file or directory".into(),
        io::ErrorKind::PermissionDenied => "permission denied".into(),
        io::ErrorKind::IsADirectory => "is a directory".into(),
        io::ErrorKind::NotADirectory => "a component of the path is not a directory".into(),
        io::ErrorKind::ReadOnlyFilesystem => "the file system is read-only".into(),
        io::ErrorKind::StorageFull => "no space left on the device".into(),
        _ => {
            // Keep the OS's words but not the "(os error N)" suffix.
            let text = e.to_string();
            match text.find(" (os error") {
                Some(i) => text[..i].to_lowercase(),
                None => text.to_lowercase(),
            }
        }
    }
}

fn refuse(out: &mut impl Write, tool: &str, subject: &str, why: &str) -> Result<Exit, Misuse> {
    writeln!(out, "{tool}: {subject}: {why}").map_err(Misuse::Stdout)?;
    Ok(Exit::Refused)
}

/// `read_file`: the file's content, unchanged; a directory, more than 1 MiB or text that is
/// not UTF-8 is exit 1.
pub fn read_file(input: &str, out: &mut impl Write) -> Result<Exit, Misuse> {
    let args: ReadFileArgs = parse("read_file", input)?;
    let path = &args.path;
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) => return refuse(out, "read_file", path, &reason(&e)),
    };
    match file.metadata() {
        Ok(m) if m.is_dir() => return refuse(out, "read_file", path, "is a directory"),
        Ok(_) => {}
        Err(e) => return refuse(out, "read_file", path, &reason(&e)),
    }
    // The size is taken from what is read, not from metadata: /proc files say 0.
    let mut buf = Vec::new();
    if let Err(e) = file.take(MAX_READ + 1).read_to_end(&mut buf) {
        return refuse(out, "read_file", path, &reason(&e));
    }
    if buf.len() as u64 > MAX_READ {
        return refuse(out, "read_file", path, "larger than 1 MiB");
    }
    if std::str::from_utf8(&buf).is_err() {
        return refuse(out, "read_file", path, "not UTF-8 text");
    }
    out.write_all(&buf).map_err(Misuse::Stdout)?;
    Ok(Exit::Done)
}

/// `write_file`: creates or truncates the file; the parent directory must exist.
pub fn write_file(input: &str, out: &mut impl Write) -> Result<Exit, Misuse> {
    let args: WriteFileArgs = parse("write_file", input)?;
    let path = Path::new(&args.path);
    if path.is_dir() {
        return refuse(out, "write_file", &args.path, "is a directory");
    }
    let parent = match path.parent() {
        Some(p) if p.as_os_str().is_empty() => Path::new("."),
        Some(p) => p,
        None => return refuse(out, "write_file", &args.path, "is a directory"),
    };
    if !parent.is_dir() {
        return refuse(
            out,
            "write_file",
            &args.path,
            "the parent directory does not exist",
        );
    }
    if let Err(e) = fs::write(path, args.content.as_bytes()) {
        return refuse(out, "write_file", &args.path, &reason(&e));
    }
    writeln!(out, "wrote {} bytes to {}", args.content.len(), args.path).map_err(Misuse::Stdout)?;
    Ok(Exit::Done)
}

/// `shell`: `/bin/sh -c <command>` in `cwd` (or /tmp), standard input empty, standard output
/// and standard error on one pipe in the order written, then `\n[exit <code>]` or
/// `\n[killed by signal <n>]`. Exit 0 whatever the command did: the tool ran.
///
/// Where the call has a way out (the egress proxy's socket is in the sandbox, which brokerd
/// mounts only for a grant with `shell_hosts`), the command gets a [`Bridge`] to it on
/// `127.0.0.1` and the proxy variables naming it (docs/design.md#shell-and-its-egress-proxy).
pub fn shell(input: &str, out: &mut impl Write) -> Result<Exit, Misuse> {
    shell_with(SHELL, Path::new(EGRESS_SOCKET), input, out)
}

fn shell_with(sh: &str, egress: &Path, input: &str, out: &mut impl Write) -> Result<Exit, Misuse> {
    let args: ShellArgs = parse("shell", input)?;
    let cwd = args.cwd.as_deref().unwrap_or(DEFAULT_CWD);
    if !Path::new(cwd).is_dir() {
        return refuse(out, "shell", cwd, "no such directory");
    }
    let mut cmd = Command::new(sh);
    own_environment(cmd.arg("-c").arg(&args.command)).current_dir(cwd);
    if egress.symlink_metadata().is_ok() {
        match Bridge::start(egress) {
            Ok(bridge) => {
                cmd.envs(bridge.environment());
            }
            Err(e) => {
                let why = format!(
                    "the bridge to the egress proxy could not start: {}",
                    reason(&e)
                );
                return refuse(out, "shell", "127.0.0.1", &why);
            }
        }
    }
    let (status, _) = match run_on_one_pipe(&mut cmd, out) {
        Ok(r) => r,
        Err(ShellError::Spawn(e)) => return refuse(out, "shell", sh, &reason(&e)),
        Err(ShellError::Stdout(e)) => return Err(Misuse::Stdout(e)),
    };
    match (status.code(), status.signal()) {
        (Some(code), _) => write!(out, "\n[exit {code}]"),
        (None, Some(sig)) => write!(out, "\n[killed by signal {sig}]"),
        (None, None) => write!(out, "\n[exit unknown]"),
    }
    .map_err(Misuse::Stdout)?;
    Ok(Exit::Done)
}

/// `cmd` with `HOME` and `TMPDIR` at [`proto::tools::TOOL_HOME`] and the rest of
/// [`crate::environment`], whatever the sandbox gave toolkit: a Podman container's `HOME` is
/// the image's or `/`, and it has no `TMPDIR`.
fn own_environment(cmd: &mut Command) -> &mut Command {
    crate::environment::apply(cmd)
}

enum ShellError {
    Spawn(io::Error),
    Stdout(io::Error),
}

/// Runs `cmd` with standard output and standard error on one pipe, copying the pipe to `out`
/// as it fills. Returns once the child has exited and what was already in the pipe is drained:
/// a background grandchild that keeps the pipe open cannot hold the call.
fn run_on_one_pipe(
    cmd: &mut Command,
    out: &mut impl Write,
) -> Result<(ExitStatus, u64), ShellError> {
    let (read_end, write_end) = io::pipe().map_err(ShellError::Spawn)?;
    let write_err = write_end.try_clone().map_err(ShellError::Spawn)?;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::from(write_end))
        .stderr(Stdio::from(write_err))
        .spawn()
        .map_err(ShellError::Spawn)?;
    // `cmd` still holds our copies of the write end; the reader must not keep the pipe open.
    drop(std::mem::replace(cmd, Command::new("")));

    // A waiter thread tells the poll loop, through a second pipe, that the child has exited.
    let (exit_read, exit_write) = io::pipe().map_err(ShellError::Spawn)?;
    let waiter = thread::spawn(move || {
        let status = child.wait();
        drop(exit_write); // closing it wakes the poll loop
        status
    });

    let mut copied = 0u64;
    let mut buf = vec![0u8; 64 * 1024];
    let mut pipe_open = true;
    loop {
        let mut fds = [
            PollFd::new(&read_end, PollFlags::IN),
            PollFd::new(&exit_read, PollFlags::IN),
        ];
        let watched = if pipe_open {
            &mut fds[..]
        } else {
            &mut fds[1..]
        };
        match rustix::event::poll(watched, None) {
            Ok(_) => {}
            Err(Errno::INTR) => continue,
            Err(e) => return Err(ShellError::Spawn(e.into())),
        }
        let child_exited = !fds[1].revents().is_empty();
        if pipe_open && !fds[0].revents().is_empty() {
            match (&read_end).read(&mut buf) {
                Ok(0) => pipe_open = false,
                Ok(k) => {
                    out.write_all(&buf[..k]).map_err(ShellError::Stdout)?;
                    copied += k as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => pipe_open = false,
            }
        }
        if child_exited {
            break;
        }
    }
    // The child has exited: take what is already in the pipe, without waiting for writers
    // that outlive it.
    if pipe_open {
        set_nonblocking(&read_end).map_err(ShellError::Spawn)?;
        loop {
            match (&read_end).read(&mut buf) {
                Ok(0) => break,
                Ok(k) => {
                    out.write_all(&buf[..k]).map_err(ShellError::Stdout)?;
                    copied += k as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break, // EAGAIN: drained
            }
        }
    }
    out.flush().map_err(ShellError::Stdout)?;
    let status = match waiter.join() {
        Ok(s) => s.map_err(ShellError::Spawn)?,
        Err(_) => {
            return Err(ShellError::Spawn(io::Error::other(
                "the waiter thread failed",
            )))
        }
    };
    Ok((status, copied))
}

/// Sets `O_NONBLOCK` on `fd`, keeping its other status flags.
fn set_nonblocking(fd: impl AsFd) -> io::Result<()> {
    let flags = fcntl_getfl(&fd)?;
    fcntl_setfl(&fd, flags | OFlags::NONBLOCK)?;
    Ok(())
}

/// curl's argument list inside the tool sandbox, fixed by
/// docs/design.md#http_fetch-and-its-egress-proxy. The `\n` in the write-out format is curl's own
/// escape, passed as the two characters `\` `n`.
pub fn curl_args(url: &str) -> Vec<OsString> {
    let proxy = format!("socks5h://localhost{}", proto::tools::EGRESS_SOCKET);
    [
        "--silent",
        "--show-error",
        "--proto",
        "=https",
        "--proto-redir",
        "=https",
        "--location",
        "--max-redirs",
        "5",
        "--max-time",
        "50",
        "--max-filesize",
        "8388608",
        "--cacert",
        "/etc/ssl/certs/ca-certificates.crt",
        "--proxy",
        &proxy,
        "--write-out",
        "\\n[http %{response_code}]",
        "--url",
        url,
    ]
    .into_iter()
    .map(OsString::from)
    .collect()
}

/// `http_fetch`: the body and then `\n[http <status>]` (curl's write-out); a curl failure is
/// exit 1 with `http_fetch: <url>: <curl's first line of error>`.
pub fn http_fetch(input: &str, out: &mut impl Write) -> Result<Exit, Misuse> {
    http_fetch_with(CURL, input, out)
}

fn http_fetch_with(curl: &str, input: &str, out: &mut impl Write) -> Result<Exit, Misuse> {
    let args: HttpFetchArgs = parse("http_fetch", input)?;
    let url = &args.url;
    let mut child = match own_environment(&mut Command::new(curl))
        .args(curl_args(url))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => return refuse(out, "http_fetch", url, &format!("{curl}: {}", reason(&e))),
    };
    let stderr = child.stderr.take();
    let err_reader = thread::spawn(move || {
        let mut text = Vec::new();
        if let Some(s) = stderr {
            let _ = s.take(64 * 1024).read_to_end(&mut text);
        }
        text
    });
    // The body is held until curl has finished, so a failure mid-body is one line, not a
    // partial page followed by an error.
    let mut body = Vec::new();
    if let Some(s) = child.stdout.take() {
        let mut s = s.take(MAX_FETCH_BODY as u64);
        let _ = s.read_to_end(&mut body);
        // Drain anything past the bound so curl is never stuck on a full pipe.
        let _ = io::copy(&mut s.into_inner(), &mut io::sink());
    }
    let status = child.wait();
    let err_text = err_reader.join().unwrap_or_default();
    match status {
        Ok(s) if s.success() => {
            out.write_all(&body).map_err(Misuse::Stdout)?;
            Ok(Exit::Done)
        }
        Ok(s) => {
            let text = String::from_utf8_lossy(&err_text);
            let first = text.lines().map(str::trim).find(|l| !l.is_empty());
            let why = match (first, s.code()) {
                (Some(line), _) => line.to_string(),
                (None, Some(code)) => format!("curl failed with exit code {code}"),
                (None, None) => "curl was killed".to_string(),
            };
            refuse(out, "http_fetch", url, &why)
        }
        Err(e) => refuse(out, "http_fetch", url, &reason(&e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn run(
        f: fn(&str, &mut Vec<u8>) -> Result<Exit, Misuse>,
        input: &str,
    ) -> (Result<Exit, Misuse>, String) {
        let mut out = Vec::new();
        let r = f(input, &mut out);
        (r, String::from_utf8_lossy(&out).into_owned())
    }

    #[test]
    fn input_limits() {
        assert!(read_input(&vec![b' '; MAX_INPUT][..]).is_ok());
        assert!(matches!(
            read_input(&vec![b' '; MAX_INPUT + 1][..]),
            Err(Misuse::TooLarge)
        ));
        assert!(matches!(
            read_input(&b"{\"path\":\"\xff\"}"[..]),
            Err(Misuse::NotUtf8)
        ));
    }

    #[test]
    fn curl_argument_list_is_the_documented_one() {
        let args: Vec<String> = curl_args("https://a.example/x")
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect();
        let expected = r#"--silent --show-error --proto =https --proto-redir =https --location --max-redirs 5 --max-time 50 --max-filesize 8388608 --cacert /etc/ssl/certs/ca-certificates.crt --proxy socks5h://localhost/run/egress/egress.sock --write-out \n[http %{response_code}] --url https://a.example/x"#;
        // The only argument with a space is the write-out format.
        assert_eq!(args.join(" "), expected);
        assert_eq!(args[18], "\\n[http %{response_code}]");
        assert_eq!(args.len(), 21);
    }

    fn fake_curl(dir: &Path, script: &str) -> String {
        let path = dir.join("curl");
        fs::write(&path, format!("#!/bin/sh\n{script}\n")).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        path.to_string_lossy().into_owned()
    }

    #[test]
    fn http_fetch_outcomes() {
        let dir = tempfile::tempdir().unwrap();
        let input = r#"{"url":"https://a.example/"}"#;
        // (what the fake curl does, expected exit, expected output)
        let cases = [
            (
                r#"printf 'body'; printf '\n[http 200]'"#,
                Exit::Done,
                "body\n[http 200]",
            ),
            (
                "printf 'partial'; echo 'curl: (28) Operation timed out after 50000 ms' >&2; echo more >&2; exit 28",
                Exit::Refused,
                "http_fetch: https://a.example/: curl: (28) Operation timed out after 50000 ms\n",
            ),
            ("exit 7", Exit::Refused, "http_fetch: https://a.example/: curl failed with exit code 7\n"),
        ];
        for (script, exit, expected) in cases {
            let curl = fake_curl(dir.path(), script);
            let mut out = Vec::new();
            let r = http_fetch_with(&curl, input, &mut out).unwrap();
            assert_eq!(
                (r, String::from_utf8_lossy(&out).as_ref()),
                (exit, expected),
                "{script}"
            );
        }
        // curl receives exactly the fixed list.
        let log = dir.path().join("argv");
        let curl = fake_curl(
            dir.path(),
            &format!("printf '%s\\n' \"$@\" > {}", log.display()),
        );
        http_fetch_with(&curl, input, &mut Vec::new()).unwrap();
        let seen = fs::read_to_string(&log).unwrap();
        let want: Vec<String> = curl_args("https://a.example/")
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect();
        assert_eq!(seen, want.join("\n") + "\n");
        // No curl at all is a refusal the model can read, not a crash.
        let mut out = Vec::new();
        let r = http_fetch_with("/nonexistent/curl", input, &mut out).unwrap();
        assert_eq!(r, Exit::Refused);
        assert!(String::from_utf8_lossy(&out).starts_with("http_fetch: https://a.example/: "));
        assert!(matches!(
            run(http_fetch, r#"{"url":1}"#).0,
            Err(Misuse::BadArgs { .. })
        ));
    }

    #[test]
    fn shell_with_missing_shell_is_a_refusal() {
        let mut out = Vec::new();
        let r = shell_with(
            "/nonexistent/sh",
            Path::new("/nonexistent/egress.sock"),
            r#"{"command":"true","cwd":"/"}"#,
            &mut out,
        )
        .unwrap();
        assert_eq!(r, Exit::Refused);
        assert_eq!(
            String::from_utf8_lossy(&out),
            "shell: /nonexistent/sh: no such file or directory\n"
        );
    }

    /// With the proxy's socket there, the command gets the bridge in every proxy variable and
    /// an empty NO_PROXY; without it, none of them (the command's environment is toolkit's).
    #[test]
    fn shell_gets_the_proxy_variables_exactly_when_the_socket_is_there() {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("egress.sock");
        let show = r#"{"command":"env | grep -i _proxy= | sort","cwd":"/"}"#;
        let mut out = Vec::new();
        assert_eq!(
            shell_with(SHELL, &socket, show, &mut out).expect("shell"),
            Exit::Done
        );
        let text = String::from_utf8_lossy(&out);
        assert!(!text.contains("127.0.0.1"), "{text}");

        let _listener = std::os::unix::net::UnixListener::bind(&socket).expect("bind");
        let mut out = Vec::new();
        assert_eq!(
            shell_with(SHELL, &socket, show, &mut out).expect("shell"),
            Exit::Done
        );
        let text = String::from_utf8_lossy(&out);
        let lines: Vec<&str> = text.lines().collect();
        let url = lines
            .iter()
            .find_map(|l| l.strip_prefix("HTTPS_PROXY="))
            .expect("HTTPS_PROXY set");
        assert!(url.starts_with("http://127.0.0.1:"), "{url}");
        for v in crate::bridge::PROXY_VARIABLES {
            assert!(
                lines.contains(&format!("{v}={url}").as_str()),
                "{v}: {text}"
            );
        }
        for v in crate::bridge::NO_PROXY_VARIABLES {
            assert!(lines.contains(&format!("{v}=").as_str()), "{v}: {text}");
        }
    }
}
