//! The command line of the egress proxy: `toolkit egress-proxy` arguments, binding the socket,
//! and the accept loop with its cap on open connections (docs/design.md#the-egress-proxy).

use std::io;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::{
    serve, Dial, Policy, Reason, Report, SystemDial, MAX_CONNECTIONS, MAX_CONNECTIONS_BOUNDED,
};
use crate::dns::{DnsError, RESOLV_CONF};

pub use proto::egress::UsageError;
use proto::egress::{ProxyArgs, USAGE};

/// Counts a connection as open until dropped.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How many connections a proxy serves: at once, and over its life (`None`: no end).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub open: usize,
    pub total: Option<u64>,
}

/// Accepts and serves forever, at most `limits.open` connections at once and `limits.total`
/// in all; one more is closed at once, without a reply. One line per connection goes to
/// standard error.
pub fn run(listener: UnixListener, policy: Arc<Policy>, dial: Arc<dyn Dial>, limits: Limits) -> ! {
    let open = Arc::new(AtomicUsize::new(0));
    let mut accepted: u64 = 0;
    loop {
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors or memory: wait for connections to end rather than spin.
                eprintln!("egress-proxy: accept failed: {e}");
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        if let Some(total) = limits.total {
            if accepted >= total {
                // On record before the client sees the close (`serve` says why).
                let reason = Reason::ConnectionsSpent(total).to_string();
                eprintln!("egress-proxy: -: {reason}");
                if let Some(r) = policy.report() {
                    r.closed_unserved(&reason);
                }
                drop(stream);
                continue;
            }
        }
        // Only this thread adds, so the check and the add cannot race each other.
        if open.load(Ordering::SeqCst) >= limits.open {
            let reason = format!("closed: {} connections are already open", limits.open);
            eprintln!("egress-proxy: -: {reason}");
            if let Some(r) = policy.report() {
                r.closed_unserved(&reason);
            }
            drop(stream);
            continue;
        }
        accepted += 1;
        open.fetch_add(1, Ordering::SeqCst);
        let slot = Slot(open.clone());
        let (policy, dial) = (policy.clone(), dial.clone());
        let spawned = std::thread::Builder::new()
            .name("egress-conn".into())
            .spawn(move || {
                let _slot = slot;
                let outcome = serve(stream, &policy, &*dial);
                eprintln!("egress-proxy: {outcome}");
            });
        // A failed spawn drops the closure, and with it the stream and the slot.
        if let Err(e) = spawned {
            eprintln!("egress-proxy: -: closed: cannot start a thread: {e}");
        }
    }
}

/// What the command line asked for.
#[derive(Debug)]
pub struct Options {
    pub socket: PathBuf,
    pub policy: Policy,
    pub limits: Limits,
    /// `--report`: the file to make and write each connection's opening and end to.
    pub report: Option<PathBuf>,
}

impl Options {
    /// The words after the subcommand, read by [`ProxyArgs::parse`], the rule brokerd writes
    /// them by.
    pub fn parse(args: &[String]) -> Result<Options, UsageError> {
        let args = ProxyArgs::parse(args)?;
        let mut policy = Policy::new(args.allow, args.allow_addresses)?;
        // Without bounds (http_fetch's proxy): today's cap at once, no end.
        let limits = match args.bounds {
            None => Limits {
                open: MAX_CONNECTIONS,
                total: None,
            },
            Some(b) => {
                policy = policy.with_max_bytes(b.bytes);
                Limits {
                    open: MAX_CONNECTIONS_BOUNDED,
                    total: Some(b.connections),
                }
            }
        };
        Ok(Options {
            socket: PathBuf::from(args.socket),
            policy,
            limits,
            report: args.report.map(PathBuf::from),
        })
    }
}

/// Why the proxy could not start although it was run rightly (exit 1).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0} exists and is not a socket; not removing it")]
    NotASocket(PathBuf),
    #[error("cannot listen on {0}: {1}")]
    Bind(PathBuf, io::Error),
    #[error("{0}")]
    Dns(#[from] DnsError),
    #[error("cannot make the report {0}: {1}")]
    Report(PathBuf, io::Error),
}

/// Binds the socket, first removing a stale one left by an earlier proxy (only a socket: a
/// wrong path must not cost the owner a file).
pub fn bind(path: &Path) -> Result<UnixListener, StartError> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            std::fs::remove_file(path).map_err(|e| StartError::Bind(path.to_owned(), e))?
        }
        Ok(_) => return Err(StartError::NotASocket(path.to_owned())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(StartError::Bind(path.to_owned(), e)),
    }
    UnixListener::bind(path).map_err(|e| StartError::Bind(path.to_owned(), e))
}

/// `toolkit egress-proxy ...`: `args` are the words after the subcommand. Serves until killed;
/// returns only when it cannot start (2: run wrongly, 1: could not start).
pub fn main(args: &[String]) -> ExitCode {
    let options = match Options::parse(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("toolkit egress-proxy: {e}\nusage: {USAGE}");
            return ExitCode::from(2);
        }
    };
    // The report before the socket: once the socket exists brokerd counts the proxy as up.
    let reported = match &options.report {
        None => Ok(options.policy),
        Some(path) => Report::create(path)
            .map(|r| options.policy.with_report(r))
            .map_err(|e| StartError::Report(path.clone(), e)),
    };
    let started = reported.and_then(|policy| {
        let dial = SystemDial::from_resolv_conf(Path::new(RESOLV_CONF))?;
        Ok((dial, bind(&options.socket)?, policy))
    });
    let (dial, listener, policy) = match started {
        Ok(s) => s,
        Err(e) => {
            eprintln!("toolkit egress-proxy: {e}");
            return ExitCode::from(1);
        }
    };
    eprintln!(
        "egress-proxy: listening on {} for {}",
        options.socket.display(),
        policy.allow.join(",")
    );
    run(listener, Arc::new(policy), Arc::new(dial), options.limits)
}
