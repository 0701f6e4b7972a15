//! `boxctl`: the operator's CLI (docs/design.md#command-lines). The protocol commands go
//! through the `client` library; `doctor`, `ps`, `gc` and `audit verify` need brokerd's config
//! and runners, so boxctl runs `brokerd` with the same command (the `brokerd` next to boxctl's
//! own executable, else the one on PATH), whose exit code is boxctl's.
//!
//! `boxctl mcp` is an MCP server on standard input and output for one grant ([`mcp`]).
//!
//! Exit codes of the protocol commands: 0 for `result` (and every other success), 1 for
//! `refused`, `stopped` or `ask`, 2 for `failed` or `unavailable`, 3 for `error` or bad usage.
//! A `commit` that left a selected path out (a conflict, or a protected target not named) is
//! not a success: 1, so that a script sees that the real tree is not what the session wrote.

#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use clap::{Parser, Subcommand};
use client::{Answer, Body, Client, ClientError, Request, DEFAULT_SOCKET};
use proto::cli::{Generated, Local, EXIT_USAGE};
use proto::ident::Ident;
use proto::visible::Shown;

mod mcp;
mod staged;

/// The boxmaker operator's CLI: talks to brokerd over its socket
///
/// doctor, ps, gc and audit run brokerd's commands of the same names (the brokerd beside
/// boxctl, else the one on PATH), as the service user where they say so.
///
/// Exit codes: 0 for result (and every other success), 1 for refused, stopped or ask, 2 for
/// failed or unavailable, 3 for error or bad usage. commit exits 1 when a path it selected was
/// a conflict or skipped.
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
    // The protocol's ops, each one request to brokerd.
    #[command(flatten)]
    Op(Op),
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
    // doctor, ps, gc and audit verify, forwarded to brokerd.
    #[command(flatten)]
    Local(Local),
    // completions and man.
    #[command(flatten)]
    Generated(Generated),
}

/// The protocol's ops (docs/design.md#protocol).
#[derive(Debug, Subcommand)]
enum Op {
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
        /// Where the page starts, in characters of the whole output (a cut result says where it
        /// continues).
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
    /// A session's staged changes; without --session, the sessions with changes pending.
    Changes {
        /// The session whose changes to show.
        #[arg(long, value_name = "S", value_parser = ident)]
        session: Option<String>,
        /// Only this grant's changes.
        #[arg(long, value_name = "G", value_parser = ident)]
        grant: Option<String>,
        /// Include each text file's diff (bounded by brokerd).
        #[arg(long)]
        diff: bool,
        /// For a person: a line per path (kind, path, size), then the diffs, with control
        /// characters shown as escapes; not the answer line.
        #[arg(long)]
        text: bool,
    },
    /// The sessions with staged changes pending.
    Sessions {
        /// For a person: a line per session, not the answer line.
        #[arg(long)]
        text: bool,
    },
    /// Land a session's staged changes in the real directories (owners only); exit 1 when a
    /// selected path was a conflict or skipped.
    Commit {
        /// The session whose changes to commit.
        #[arg(long, value_name = "S", value_parser = ident)]
        session: String,
        /// Only this grant's changes.
        #[arg(long, value_name = "G", value_parser = ident)]
        grant: Option<String>,
        /// Commit nothing unless every selected path can be committed.
        #[arg(long)]
        all_or_nothing: bool,
        /// Only these paths, as changes shows them; a protected target is committed only when
        /// named [default: every change but protected targets].
        #[arg(value_name = "PATH")]
        paths: Vec<String>,
    },
    /// Throw a session's staged changes away (owners only).
    Discard {
        /// The session whose changes to discard.
        #[arg(long, value_name = "S", value_parser = ident)]
        session: String,
        /// Only this grant's changes.
        #[arg(long, value_name = "G", value_parser = ident)]
        grant: Option<String>,
        /// Only these paths, as changes shows them [default: every change].
        #[arg(value_name = "PATH")]
        paths: Vec<String>,
    },
    /// Approve an ask ticket of a grant with approvals = "owner" (owners only); the client
    /// that was asked then runs the call with it.
    Approve { ticket: String },
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // --help and --version print to standard output and succeed; bad usage exits 3.
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(proto::cli::exit_code(&e));
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
    let Cli {
        socket,
        config,
        command,
    } = cli;
    match command {
        Cmd::Op(op) => ask(&socket.unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET)), op),
        Cmd::Mcp { grant, session } => mcp::run(mcp::Options {
            socket: socket.unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET)),
            grant,
            session,
        }),
        Cmd::Local(cmd) => Err(run_brokerd(&forwarded(&cmd, config, socket))),
        Cmd::Generated(what) => print(&what.render::<Cli>("boxctl")?),
    }
}

/// An op: its request sent to brokerd, its answer printed, and the exit code of the answer.
fn ask(socket: &Path, op: Op) -> Result<u8, String> {
    let text = op.text();
    let req = op.request();
    let mut client = Client::connect(socket).map_err(|e| e.to_string())?;
    let answer = client.request(&req).map_err(|e| e.to_string())?;
    show(&answer, text);
    Ok(exit_code(&answer.body))
}

impl Op {
    /// Whether the answer is rendered for a person instead of printed as its line.
    fn text(&self) -> bool {
        matches!(
            self,
            Op::Changes { text: true, .. } | Op::Sessions { text: true }
        )
    }

    /// The op's request, the only one on its connection.
    fn request(self) -> Request {
        match self {
            Op::Call {
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
            Op::Decline { ticket } => Request::Decline {
                id: "1".into(),
                v: None,
                ticket,
            },
            Op::Result { result_id, offset } => Request::Result {
                id: "1".into(),
                v: None,
                result_id,
                offset,
            },
            Op::EndSession { session } => Request::EndSession {
                id: "1".into(),
                v: None,
                session,
            },
            Op::Tools { grant } => Request::Tools {
                id: "1".into(),
                v: None,
                grant,
            },
            Op::Status => Request::Status {
                id: "1".into(),
                v: None,
            },
            Op::Changes {
                session,
                grant,
                diff,
                ..
            } => Request::Changes {
                id: "1".into(),
                v: None,
                session,
                grant,
                diff,
            },
            Op::Sessions { .. } => Request::Changes {
                id: "1".into(),
                v: None,
                session: None,
                grant: None,
                diff: false,
            },
            Op::Commit {
                session,
                grant,
                all_or_nothing,
                paths,
            } => Request::Commit {
                id: "1".into(),
                v: None,
                session,
                grant,
                paths,
                all_or_nothing,
            },
            Op::Discard {
                session,
                grant,
                paths,
            } => Request::Discard {
                id: "1".into(),
                v: None,
                session,
                grant,
                paths,
            },
            Op::Approve { ticket } => Request::Approve {
                id: "1".into(),
                v: None,
                ticket,
            },
        }
    }
}

/// Prints brokerd's answer: its line, or with `text` a rendering for a person (an error to
/// standard error).
fn show(answer: &Answer, text: bool) {
    match (text, &answer.body) {
        (true, Body::Error { message }) => {
            let e = ClientError::Broker(Shown(message).to_string());
            eprintln!("boxctl: {e}");
        }
        (
            true,
            Body::Changes {
                session: None,
                sessions,
                left_out,
                ..
            },
        ) => print!(
            "{}{}",
            staged::SessionList(sessions),
            staged::LeftOut(*left_out)
        ),
        (
            true,
            Body::Changes {
                session: Some(session),
                changes,
                bytes,
                max_bytes,
                left_out,
                ..
            },
        ) => print!(
            "{}",
            staged::Report {
                session,
                changes,
                left_out: *left_out,
                bytes: *bytes,
                max_bytes: *max_bytes,
            }
        ),
        _ => println!("{}", answer.to_line().trim_end()),
    }
}

/// brokerd's arguments for a local command: the command, then the config and socket it is
/// to use (`audit verify` takes neither).
fn forwarded(cmd: &Local, config: Option<PathBuf>, socket: Option<PathBuf>) -> Vec<OsString> {
    let mut args = cmd.args();
    if let Local::Audit { .. } = cmd {
        return args;
    }
    if let Some(c) = config {
        args.extend(["--config".into(), c.into_os_string()]);
    }
    if let Some(s) = socket {
        args.extend(["--socket".into(), s.into_os_string()]);
    }
    args
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

/// docs/design.md#protocol: 0 for result, 1 for refused, stopped or ask, 2 for failed or
/// unavailable, 3 for error; and 1 for a commit that left a selected path out.
fn exit_code(body: &Body) -> u8 {
    match body {
        Body::Refused { .. } | Body::Stopped { .. } | Body::Ask { .. } => 1,
        Body::Committed {
            conflicts, skipped, ..
        } if !conflicts.is_empty() || !skipped.is_empty() => 1,
        Body::Failed { .. } | Body::Unavailable { .. } => 2,
        Body::Error { .. } => 3,
        _ => 0,
    }
}
#[cfg(test)]
mod tests;
