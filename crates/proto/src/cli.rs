//! What boxctl's and brokerd's command lines share (docs/design.md#command-lines), defined
//! once: the local commands ([`Local`]: `doctor`, `ps`, `gc`, `audit verify`), which brokerd
//! runs and boxctl forwards to it as the arguments brokerd parses back ([`Local::args`]);
//! what a package installs ([`Generated`]: `completions`, `man`); and the exit code of bad
//! usage, [`EXIT_USAGE`], the same for both programs.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{CommandFactory, Subcommand};

/// Bad usage: exit 3, for boxctl as for brokerd, the code of a protocol `error` and of a
/// local command whose config cannot be loaded.
pub const EXIT_USAGE: u8 = 3;

/// How a command line clap did not take ends the program: [`EXIT_USAGE`] for bad usage, 0 for
/// `--help` and `--version` (printed to standard output).
pub fn exit_code(e: &clap::Error) -> u8 {
    if e.use_stderr() {
        EXIT_USAGE
    } else {
        0
    }
}

/// The local commands: they need brokerd's config and runners, so boxctl runs brokerd with
/// the same command, and brokerd's exit code is boxctl's.
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum Local {
    /// Check what a call needs, one line each; run as the service user.
    Doctor,
    /// List the sandboxes of the service user.
    Ps,
    /// Remove what an earlier brokerd left behind; run as the service user.
    Gc {
        /// Remove the grants' caches too (docs/design.md#grant-caches).
        #[arg(long)]
        caches: bool,
    },
    /// The audit log.
    Audit {
        #[command(subcommand)]
        command: AuditCmd,
    },
}

/// The commands on the audit log.
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum AuditCmd {
    /// Check the hash chain of FILE and its rotated predecessors: 0 when it holds, 1 when
    /// broken, 3 when unreadable.
    Verify { file: PathBuf },
}

impl Local {
    /// The command as brokerd's arguments, which parse back to it: what boxctl runs brokerd
    /// with, before the options it passes on.
    pub fn args(&self) -> Vec<OsString> {
        match self {
            Local::Doctor => vec!["doctor".into()],
            Local::Ps => vec!["ps".into()],
            Local::Gc { caches: false } => vec!["gc".into()],
            Local::Gc { caches: true } => vec!["gc".into(), "--caches".into()],
            Local::Audit {
                command: AuditCmd::Verify { file },
            } => vec!["audit".into(), "verify".into(), file.into()],
        }
    }
}

/// What a package installs of a program: a shell's completion script, and its man page.
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum Generated {
    /// Print a shell completion script for this program.
    Completions { shell: clap_complete::Shell },
    /// Print this program's man page (roff).
    Man,
}

impl Generated {
    /// The script or page of the program whose command line is `C`, run as `name`.
    pub fn render<C: CommandFactory>(&self, name: &str) -> Result<Vec<u8>, String> {
        let mut out = Vec::new();
        match self {
            Generated::Completions { shell } => {
                clap_complete::generate(*shell, &mut C::command(), name, &mut out)
            }
            Generated::Man => clap_mangen::Man::new(C::command())
                .render(&mut out)
                .map_err(|e| e.to_string())?,
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// A program with the shared commands only.
    #[derive(Debug, Parser)]
    #[command(name = "brokerd")]
    struct Cli {
        #[command(subcommand)]
        command: Local,
    }

    /// What boxctl forwards is what brokerd parses: the same command.
    #[test]
    fn forwarded_arguments_parse_back() {
        let file = PathBuf::from("/var/lib/boxmaker/audit.jsonl");
        for local in [
            Local::Doctor,
            Local::Ps,
            Local::Gc { caches: false },
            Local::Gc { caches: true },
            Local::Audit {
                command: AuditCmd::Verify { file },
            },
        ] {
            let line = std::iter::once(OsString::from("brokerd")).chain(local.args());
            let parsed = Cli::try_parse_from(line).map(|c| c.command);
            assert_eq!(parsed.ok(), Some(local.clone()), "{local:?}");
        }
    }

    /// Bad usage exits 3; --help and --version exit 0.
    #[test]
    fn usage_exits_3_and_help_0() {
        for (line, code) in [
            (&["brokerd", "frob"][..], EXIT_USAGE),
            (&["brokerd", "gc", "--frob"], EXIT_USAGE),
            (&["brokerd", "--help"], 0),
            (&["brokerd", "help", "audit"], 0),
        ] {
            let e = Cli::try_parse_from(line).err().map(|e| exit_code(&e));
            assert_eq!(e, Some(code), "{line:?}");
        }
    }
}
