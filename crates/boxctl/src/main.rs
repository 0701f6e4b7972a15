//! `boxctl`: the operator's CLI (DESIGN.md "Command lines"). The protocol commands go
//! through the `client` library; `doctor`, `ps`, `gc` and `audit verify` need brokerd's config
//! and runners, so boxctl runs `brokerd` with the same command (the `brokerd` next to boxctl's
//! own executable, else the one on PATH), whose exit code is boxctl's.
//!
//! `boxctl mcp` is an MCP server on standard input and output for one grant ([`mcp`]).
//!
//! Exit codes of the protocol commands: 0 for `result` (and every other success), 1 for
//! `refused`, `stopped` or `ask`, 2 for `failed` or `unavailable`, 3 for `error` or bad usage.

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use clap::{CommandFactory, Parser, Subcommand};
use client::{Body, Client, Request, DEFAULT_SOCKET};
use proto::ident::Ident;

mod mcp;

/// Bad usage: exit 3, like a protocol error.
const EXIT_USAGE: u8 = 3;

/// The boxmaker operator's CLI: talks to brokerd over its socket
///
/// Exit codes: 0 for result (and every other success), 1 for refused, stopped or ask, 2 for
/// failed or unavailable, 3 for error or bad usage.
#[derive(Debug, Parser)]
#[command(name = "boxctl", version)]
struct Cli {
    /// brokerd's socket.
    #[arg(long, global = true, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// brokerd's config, for doctor, ps and gc [default: /etc/boxmaker/brokerd.toml].
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run one tool call (again with --approval after an ask); prints the answer line.
    Call {
        /// The agent's session (1 to 64 of A-Z a-z 0-9 _ . -).
        #[arg(long, value_name = "S")]
        session: String,
        /// The call's identifier within the session, same alphabet.
        #[arg(long = "call", value_name = "C")]
        call_id: String,
        /// The grant the call runs under.
        #[arg(long, value_name = "G")]
        grant: String,
        /// The ticket of an ask the owner approved.
        #[arg(long, value_name = "TICKET")]
        approval: Option<String>,
        /// read_file, write_file, shell or http_fetch.
        tool: String,
        /// The tool's arguments as the model wrote them (a JSON object).
        #[arg(value_name = "ARGUMENTS-JSON")]
        arguments: String,
    },
    /// Tell brokerd the owner said no to an ask.
    Decline { ticket: String },
    /// A page of a stored full output.
    Result {
        /// The result_id of a result answer.
        #[arg(value_name = "ID")]
        result_id: String,
        /// Where the page starts, in bytes.
        #[arg(long, default_value_t = 0, value_name = "N")]
        offset: usize,
    },
    /// Forget a session's refusal counts and tickets.
    EndSession {
        #[arg(value_name = "S")]
        session: String,
    },
    /// The JSON Schemas of the tools a grant offers.
    Tools {
        #[arg(value_name = "G")]
        grant: String,
    },
    /// brokerd's version, backend, preflights, poisoning and audit head.
    Status,
    /// Serve a grant's tools to an MCP client (Claude Code, Codex, ...) on standard input and
    /// output; an ask goes to the human through the client's elicitation.
    Mcp {
        /// The grant every call runs under (the model cannot choose another).
        #[arg(long, value_name = "G", value_parser = ident)]
        grant: String,
        /// The session the calls belong to [default: a fresh one, ended on exit].
        #[arg(long, value_name = "S", value_parser = ident)]
        session: Option<String>,
    },
    /// Check what a call needs, one line each (as the service user; runs brokerd doctor).
    Doctor,
    /// List the sandboxes of the service user (runs brokerd ps).
    Ps,
    /// Remove what an earlier brokerd left behind (as the service user; runs brokerd gc).
    Gc,
    /// The audit log (runs brokerd audit).
    Audit {
        #[command(subcommand)]
        command: AuditCmd,
    },
    /// Print a shell completion script for boxctl.
    Completions { shell: clap_complete::Shell },
    /// Print boxctl's man page (roff).
    Man,
}

#[derive(Debug, Subcommand)]
enum AuditCmd {
    /// Check the hash chain of FILE and its rotated predecessors: 0 when it holds, 1 when
    /// broken, 3 when unreadable.
    Verify { file: PathBuf },
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // --help and --version print to standard output and succeed; bad usage exits 3.
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { EXIT_USAGE } else { 0 });
        }
    };
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(msg) => {
            eprintln!("boxctl: {msg}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

fn run(cli: Cli) -> Result<u8, String> {
    let req = match cli.command {
        Cmd::Call {
            session,
            call_id,
            grant,
            approval,
            tool,
            arguments,
        } => Request::Call {
            id: "1".into(),
            v: None,
            session,
            call: call_id,
            grant,
            tool,
            arguments,
            approval,
        },
        Cmd::Decline { ticket } => Request::Decline {
            id: "1".into(),
            v: None,
            ticket,
        },
        Cmd::Result { result_id, offset } => Request::Result {
            id: "1".into(),
            v: None,
            result_id,
            offset,
        },
        Cmd::EndSession { session } => Request::EndSession {
            id: "1".into(),
            v: None,
            session,
        },
        Cmd::Tools { grant } => Request::Tools {
            id: "1".into(),
            v: None,
            grant,
        },
        Cmd::Status => Request::Status {
            id: "1".into(),
            v: None,
        },
        Cmd::Mcp { grant, session } => {
            return mcp::run(mcp::Options {
                socket: cli.socket.unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET)),
                grant,
                session,
            })
        }
        Cmd::Doctor | Cmd::Ps | Cmd::Gc => {
            let name = match cli.command {
                Cmd::Doctor => "doctor",
                Cmd::Ps => "ps",
                _ => "gc",
            };
            let mut forwarded: Vec<OsString> = vec![name.into()];
            if let Some(c) = cli.config {
                forwarded.extend(["--config".into(), c.into_os_string()]);
            }
            if let Some(s) = cli.socket {
                forwarded.extend(["--socket".into(), s.into_os_string()]);
            }
            return Err(run_brokerd(&forwarded));
        }
        Cmd::Audit {
            command: AuditCmd::Verify { file },
        } => {
            return Err(run_brokerd(&[
                "audit".into(),
                "verify".into(),
                file.into_os_string(),
            ]))
        }
        Cmd::Completions { shell } => {
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "boxctl", &mut out);
            return print(&out);
        }
        Cmd::Man => {
            let mut out = Vec::new();
            clap_mangen::Man::new(Cli::command())
                .render(&mut out)
                .map_err(|e| e.to_string())?;
            return print(&out);
        }
    };
    let socket = cli.socket.unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET));
    let mut client = Client::connect(&socket).map_err(|e| e.to_string())?;
    let answer = client.request(&req).map_err(|e| e.to_string())?;
    println!("{}", answer.to_line().trim_end());
    Ok(exit_code(&answer.body))
}

/// A session or grant name, checked as brokerd checks it.
fn ident(s: &str) -> Result<String, String> {
    Ident::parse(s)
        .map(Ident::into_string)
        .map_err(|e| e.to_string())
}

fn print(bytes: &[u8]) -> Result<u8, String> {
    std::io::stdout()
        .write_all(bytes)
        .map_err(|e| e.to_string())?;
    Ok(0)
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

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("boxctl").chain(args.iter().copied()))
    }

    #[test]
    fn the_command_lines_of_the_readme_parse() {
        Cli::command().debug_assert();
        let call = parse(&[
            "--socket",
            "/s",
            "call",
            "--session",
            "s",
            "--call",
            "c",
            "--grant",
            "g",
            "--approval",
            "t",
            "shell",
            r#"{"command":"ls"}"#,
        ])
        .expect("call");
        assert_eq!(call.socket.as_deref(), Some(Path::new("/s")));
        match call.command {
            Cmd::Call {
                session,
                call_id,
                grant,
                approval,
                tool,
                arguments,
            } => assert_eq!(
                (session, call_id, grant, approval, tool, arguments),
                (
                    "s".into(),
                    "c".into(),
                    "g".into(),
                    Some("t".into()),
                    "shell".into(),
                    r#"{"command":"ls"}"#.into()
                )
            ),
            other => panic!("{other:?}"),
        }
        let page = parse(&["result", "r1", "--offset", "7"]).expect("result");
        assert!(matches!(page.command, Cmd::Result { offset: 7, .. }));
        // The options may follow the command, as before.
        let doctor = parse(&["doctor", "--config", "/c", "--socket", "/s"]).expect("doctor");
        assert_eq!(doctor.config.as_deref(), Some(Path::new("/c")));
        assert!(matches!(doctor.command, Cmd::Doctor));
        for ok in [
            &["decline", "t"][..],
            &["end-session", "s"],
            &["tools", "g"],
            &["status"],
            &["mcp", "--grant", "g"],
            &["--socket", "/s", "mcp", "--grant", "g", "--session", "s.1"],
            &["ps"],
            &["gc"],
            &["audit", "verify", "f"],
            &["completions", "bash"],
            &["man"],
        ] {
            assert!(parse(ok).is_ok(), "{ok:?}");
        }
    }

    /// Bad usage is an error clap prints to standard error (exit 3); --help and --version are
    /// not.
    #[test]
    fn usage_errors() {
        for bad in [
            &[][..],
            &["frob"],
            &["call", "--session", "s", "shell", "{}"],
            &[
                "call",
                "--session",
                "s",
                "--call",
                "c",
                "--grant",
                "g",
                "shell",
            ],
            &["result", "r1", "--offset", "x"],
            &["status", "extra"],
            &["mcp"],
            &["mcp", "--grant", "../g"],
            &["mcp", "--grant", "g", "--session", ""],
            &["audit", "check", "f"],
            &["--socket"],
            &["completions", "nosuchshell"],
        ] {
            let e = parse(bad).expect_err(&format!("{bad:?}"));
            assert!(e.use_stderr(), "{bad:?}: {e}");
        }
        for info in [
            &["--help"][..],
            &["--version"],
            &["call", "--help"],
            &["help", "audit"],
        ] {
            let e = parse(info).expect_err(&format!("{info:?}"));
            assert!(!e.use_stderr(), "{info:?}: {e}");
        }
    }
}
