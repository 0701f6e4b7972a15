//! `toolkit <subcommand>`: see the crate docs and docs/design.md#the-toolkit.

#![forbid(unsafe_code)]

use std::io::{self, Write};
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;

use proto::egress;
use signal_hook::consts::SIGTERM;
use toolkit::tools::{self, Exit, Misuse};

/// The tools' synopsis; the proxy's is `proto::egress::USAGE`.
const TOOLS_USAGE: &str =
    "toolkit read_file | write_file | shell | http_fetch   (arguments as JSON on standard input)\n       toolkit version";

fn main() -> ExitCode {
    exit_on_sigterm();
    let args: Vec<String> = match std::env::args_os()
        .skip(1)
        .map(|a| a.into_string())
        .collect()
    {
        Ok(a) => a,
        Err(_) => return misused("the arguments are not UTF-8"),
    };
    let Some((sub, rest)) = args.split_first() else {
        return misused("no subcommand");
    };
    let tool: fn(&str, &mut io::StdoutLock<'static>) -> Result<Exit, Misuse> = match sub.as_str() {
        egress::SUBCOMMAND => return toolkit::proxy::main(rest),
        proto::tools::VERSION_SUBCOMMAND if rest.is_empty() => {
            return match writeln!(io::stdout(), "{}", proto::tools::TOOLKIT_VERSION) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => misused(&format!("version: {e}")),
            };
        }
        "read_file" => tools::read_file,
        "write_file" => tools::write_file,
        "shell" => tools::shell,
        "http_fetch" => tools::http_fetch,
        other => return misused(&format!("unknown subcommand {other:?}")),
    };
    if !rest.is_empty() {
        return misused(&format!(
            "{sub} takes its arguments on standard input, not the command line"
        ));
    }
    let outcome = tools::read_input(io::stdin().lock()).and_then(|input| {
        let mut out = io::stdout().lock();
        let exit = tool(&input, &mut out)?;
        out.flush().map_err(Misuse::Stdout)?;
        Ok(exit)
    });
    match outcome {
        Ok(exit) => ExitCode::from(exit as u8),
        Err(e) => misused(&format!("{sub}: {e}")),
    }
}

/// toolkit is the first process of its container, and the kernel drops a signal whose action
/// is the default when it is sent to a PID namespace's first process: SIGTERM from `podman rm
/// -f` or `podman stop` would be ignored and podman would wait out its 10 s grace before
/// SIGKILL, longer than brokerd waits for a clean-up step. So SIGTERM ends toolkit at once with
/// 128 + SIGTERM (signal-hook's handler calls only `_exit`, which is async-signal-safe); the
/// kernel then kills the rest of the container. (Programs toolkit starts get the default action
/// back when they exec.) Where the handler cannot be installed, toolkit runs without it, as a
/// process outside a container would.
fn exit_on_sigterm() {
    static ALWAYS: AtomicBool = AtomicBool::new(true);
    let _ = signal_hook::flag::register_conditional_shutdown(SIGTERM, 128 + SIGTERM, &ALWAYS);
}

/// Exit 2: toolkit was run wrongly. The text goes to standard error, for brokerd's log only.
fn misused(why: &str) -> ExitCode {
    let _ = writeln!(
        io::stderr(),
        "toolkit: {why}\nusage: {TOOLS_USAGE}\n       {}",
        egress::USAGE
    );
    ExitCode::from(Exit::Misused as u8)
}
