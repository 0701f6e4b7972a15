//! `toolkit <subcommand>`: see the crate docs and seed 003 section 4.

use std::io::{self, Write};
use std::process::ExitCode;

use toolkit::tools::{self, Exit, Misuse};

const USAGE: &str = "usage: toolkit read_file | write_file | shell | http_fetch   (arguments as JSON on standard input)\n       toolkit egress-proxy --socket <path> --allow <pattern>[,<pattern>...] [--allow-address <cidr>]...";

fn main() -> ExitCode {
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
        "egress-proxy" => return toolkit::proxy::main(rest),
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

/// Exit 2: toolkit was run wrongly. The text goes to standard error, for brokerd's log only.
fn misused(why: &str) -> ExitCode {
    let _ = writeln!(io::stderr(), "toolkit: {why}\n{USAGE}");
    ExitCode::from(Exit::Misused as u8)
}
