//! `boxctl`: the operator's CLI (DESIGN.md "Command lines"). The protocol commands go
//! through the `client` library; `doctor`, `ps`, `gc` and `audit verify` need brokerd's config
//! and runners, so boxctl runs `brokerd` with the same command (the `brokerd` next to boxctl's
//! own executable, else the one on PATH), whose exit code is boxctl's.
//!
//! Exit codes of the protocol commands: 0 for `result` (and every other success), 1 for
//! `refused`, `stopped` or `ask`, 2 for `failed` or `unavailable`, 3 for `error` or bad usage.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use client::{Body, Client, Request, DEFAULT_SOCKET};

const USAGE: &str = "usage:
  boxctl [--socket PATH] call --session S --call C --grant G [--approval TICKET] TOOL 'ARGUMENTS-JSON'
  boxctl [--socket PATH] decline TICKET | result ID [--offset N] | end-session S | tools G | status
  boxctl [--config FILE] [--socket PATH] doctor | ps | gc   local checks and clean-up, as the service user
  boxctl audit verify FILE";

/// Bad usage: exit 3, like a protocol error.
const EXIT_USAGE: u8 = 3;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(args) {
        Ok(code) => ExitCode::from(code),
        Err(msg) => {
            eprintln!("boxctl: {msg}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

fn run(mut args: Vec<String>) -> Result<u8, String> {
    let socket = take_option(&mut args, "--socket")?.map(PathBuf::from);
    let config = take_option(&mut args, "--config")?.map(PathBuf::from);
    let Some(command) = (!args.is_empty()).then(|| args.remove(0)) else {
        return Err(format!("no command\n{USAGE}"));
    };
    let req = match command.as_str() {
        "call" => {
            let session = required(&mut args, "--session")?;
            let call = required(&mut args, "--call")?;
            let grant = required(&mut args, "--grant")?;
            let approval = take_option(&mut args, "--approval")?;
            let [tool, arguments] = exactly::<2>(args, "TOOL 'ARGUMENTS-JSON'")?;
            Request::Call {
                id: "1".into(),
                v: None,
                session,
                call,
                grant,
                tool,
                arguments,
                approval,
            }
        }
        "decline" => {
            let [ticket] = exactly::<1>(args, "TICKET")?;
            Request::Decline {
                id: "1".into(),
                v: None,
                ticket,
            }
        }
        "result" => {
            let offset = match take_option(&mut args, "--offset")? {
                Some(n) => n
                    .parse()
                    .map_err(|_| format!("--offset {n:?} is not a number"))?,
                None => 0,
            };
            let [result_id] = exactly::<1>(args, "ID")?;
            Request::Result {
                id: "1".into(),
                v: None,
                result_id,
                offset,
            }
        }
        "end-session" => {
            let [session] = exactly::<1>(args, "SESSION")?;
            Request::EndSession {
                id: "1".into(),
                v: None,
                session,
            }
        }
        "tools" => {
            let [grant] = exactly::<1>(args, "GRANT")?;
            Request::Tools {
                id: "1".into(),
                v: None,
                grant,
            }
        }
        "status" => {
            exactly::<0>(args, "")?;
            Request::Status {
                id: "1".into(),
                v: None,
            }
        }
        "doctor" | "ps" | "gc" => {
            exactly::<0>(args, "")?;
            let mut forwarded: Vec<OsString> = vec![command.into()];
            if let Some(c) = config {
                forwarded.extend(["--config".into(), c.into_os_string()]);
            }
            if let Some(s) = socket {
                forwarded.extend(["--socket".into(), s.into_os_string()]);
            }
            return Err(run_brokerd(&forwarded));
        }
        "audit" => {
            let [verb, file] = exactly::<2>(args, "verify FILE")?;
            if verb != "verify" {
                return Err(format!("unknown audit command {verb:?}\n{USAGE}"));
            }
            return Err(run_brokerd(&["audit".into(), verb.into(), file.into()]));
        }
        "help" | "--help" | "-h" => {
            println!("{USAGE}");
            return Ok(0);
        }
        other => return Err(format!("unknown command {other:?}\n{USAGE}")),
    };
    let socket = socket.unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET));
    let mut client = Client::connect(&socket).map_err(|e| e.to_string())?;
    let answer = client.request(&req).map_err(|e| e.to_string())?;
    println!("{}", answer.to_line().trim_end());
    Ok(exit_code(&answer.body))
}

/// Replaces this process with `brokerd ARGS`; returns only when that cannot be done, with why.
fn run_brokerd(args: &[OsString]) -> String {
    let program = brokerd_path();
    let e = Command::new(&program).args(args).exec();
    format!(
        "cannot run {} for this command ({e}): install brokerd next to boxctl or on PATH",
        program.display()
    )
}

/// The `brokerd` installed beside this `boxctl`, else `brokerd` (found on PATH).
fn brokerd_path() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|d| d.join("brokerd")))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| Path::new("brokerd").to_path_buf())
}

/// DESIGN.md: 0 for result, 1 for refused, stopped or ask, 2 for failed or unavailable, 3 for
/// error.
fn exit_code(body: &Body) -> u8 {
    match body {
        Body::Refused { .. } | Body::Stopped { .. } | Body::Ask { .. } => 1,
        Body::Failed { .. } | Body::Unavailable { .. } => 2,
        Body::Error { .. } => 3,
        _ => 0,
    }
}

fn take_option(args: &mut Vec<String>, name: &str) -> Result<Option<String>, String> {
    let Some(i) = args.iter().position(|a| a == name) else {
        return Ok(None);
    };
    if i + 1 >= args.len() {
        return Err(format!("{name} needs a value"));
    }
    let value = args.remove(i + 1);
    args.remove(i);
    Ok(Some(value))
}

fn required(args: &mut Vec<String>, name: &str) -> Result<String, String> {
    take_option(args, name)?.ok_or_else(|| format!("{name} is required\n{USAGE}"))
}

fn exactly<const N: usize>(args: Vec<String>, what: &str) -> Result<[String; N], String> {
    let n = args.len();
    args.try_into()
        .map_err(|_| format!("expected {N} argument(s) {what}, got {n}\n{USAGE}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_design() {
        let cases = [
            (
                Body::Result {
                    content: "".into(),
                    truncated: false,
                    label: "g/t".into(),
                    result_id: "r1".into(),
                },
                0,
            ),
            (Body::Refused { reason: "".into() }, 1),
            (Body::Stopped { reason: "".into() }, 1),
            (
                Body::Ask {
                    question: "".into(),
                    ticket: "".into(),
                },
                1,
            ),
            (Body::Failed { message: "".into() }, 2),
            (Body::Unavailable { message: "".into() }, 2),
            (Body::Error { message: "".into() }, 3),
            (Body::Declined {}, 0),
            (Body::Ended {}, 0),
        ];
        for (body, code) in cases {
            assert_eq!(exit_code(&body), code, "{body:?}");
        }
    }

    #[test]
    fn usage_errors() {
        let v = |s: &[&str]| s.iter().map(|a| a.to_string()).collect::<Vec<_>>();
        for bad in [
            v(&[]),
            v(&["frob"]),
            v(&["call", "--session", "s", "shell", "{}"]),
            v(&[
                "call",
                "--session",
                "s",
                "--call",
                "c",
                "--grant",
                "g",
                "shell",
            ]),
            v(&["result", "r1", "--offset", "x"]),
            v(&["status", "extra"]),
            v(&["audit", "check", "f"]),
            v(&["--socket"]),
        ] {
            assert!(run(bad.clone()).is_err(), "{bad:?}");
        }
    }
}
