//! `brokerd --config FILE [--socket PATH]` serves; `brokerd check-config FILE` validates;
//! `brokerd doctor | ps | gc` and `brokerd audit verify FILE` are the local commands
//! (`brokerd::local`), which `boxctl` forwards here; `completions SHELL` and `man` print what
//! a package installs. (docs/design.md#command-lines, docs/design.md#service.)

#![forbid(unsafe_code)]

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use brokerd::audit::Audit;
use brokerd::broker::Broker;
use brokerd::config::{self, Backend, Config};
use brokerd::local;
use brokerd::policy::Policy;
use brokerd::runbook;
use brokerd::runner::bwrap::BwrapRuntime;
use brokerd::runner::podman::PodmanRuntime;
use brokerd::runner::{reaper, NoRunner, Runner};
use brokerd::server::{self, Clients};
use clap::{CommandFactory, Parser, Subcommand};
use proto::cli::{AuditCmd, Generated, Local, EXIT_USAGE};
use sd_notify::NotifyState;
use tokio::net::UnixListener;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;

/// The boxmaker daemon: decides an agent's tool calls and runs them in sandboxes
///
/// Without a command it serves: `brokerd --config FILE [--socket PATH]` (the socket from
/// systemd when LISTEN_FDS is set).
///
/// Exit codes: 0 done, 1 a config that does not load or a service that failed, 3 bad usage;
/// the local commands as boxctl's (doctor: 2 when a check failed, 3 when the config cannot be
/// loaded; audit verify: 1 broken, 3 unreadable).
#[derive(Debug, Parser)]
#[command(name = "brokerd", version)]
struct Cli {
    /// The config to serve with, or to check and clean up after (doctor, ps, gc; default
    /// /etc/boxmaker/brokerd.toml there).
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Listen here instead of on systemd's socket; doctor asks the brokerd on it.
    #[arg(long, global = true, value_name = "PATH")]
    socket: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Cmd>,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Validate FILE (grants, policy, clients) and exit.
    CheckConfig {
        file: PathBuf,
        /// FILE's grant directories are placeholders made for this check (the NixOS module's
        /// build): who owns them and their parents is not checked; brokerd's start checks
        /// the real ones.
        #[arg(long, hide = true)]
        placeholder_grant_dirs: bool,
    },
    // doctor, ps, gc and audit verify, as boxctl forwards them.
    #[command(flatten)]
    Local(Local),
    // completions and man.
    #[command(flatten)]
    Generated(Generated),
    /// Print, as JSON, the values brokerd takes for keys a config leaves out (for the NixOS
    /// module's check).
    #[command(hide = true)]
    Defaults,
}

fn main() -> ExitCode {
    // Bad usage exits 3, as boxctl's; --help and --version print and exit 0.
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage(e),
    };
    match &cli.command {
        None => match &cli.config {
            Some(file) => serve(file, cli.socket.clone()),
            None => usage(Cli::command().error(
                clap::error::ErrorKind::MissingRequiredArgument,
                "serving needs --config FILE",
            )),
        },
        Some(Cmd::CheckConfig {
            file,
            placeholder_grant_dirs,
        }) => {
            if cli.config.is_some() || cli.socket.is_some() {
                return usage(Cli::command().error(
                    clap::error::ErrorKind::ArgumentConflict,
                    "check-config takes only its FILE",
                ));
            }
            check_config(file, *placeholder_grant_dirs)
        }
        Some(Cmd::Local(cmd)) => run_local(cmd, cli.config.as_deref(), cli.socket.clone()),
        Some(Cmd::Generated(what)) => match what.render::<Cli>("brokerd") {
            Ok(out) => print(&out),
            Err(e) => {
                eprintln!("brokerd: {e}");
                ExitCode::from(1)
            }
        },
        Some(Cmd::Defaults) => match config::defaults() {
            Ok(v) => print(format!("{v:#}\n").as_bytes()),
            Err(e) => {
                eprintln!("brokerd: {e}");
                ExitCode::from(1)
            }
        },
    }
}

/// A command line not taken, printed as clap prints it: bad usage exits [`EXIT_USAGE`].
fn usage(e: clap::Error) -> ExitCode {
    let _ = e.print();
    ExitCode::from(proto::cli::exit_code(&e))
}

/// A local command (`brokerd::local`); one whose config cannot be loaded exits
/// [`EXIT_USAGE`], as boxctl's.
fn run_local(cmd: &Local, config: Option<&Path>, socket: Option<PathBuf>) -> ExitCode {
    let socket = socket.unwrap_or_else(|| PathBuf::from(proto::broker::DEFAULT_SOCKET));
    let outcome = match cmd {
        Local::Doctor => local::run("doctor", config, &socket),
        Local::Ps => local::run("ps", config, &socket),
        Local::Gc { caches: false } => local::run("gc", config, &socket),
        Local::Gc { caches: true } => local::run("gc-caches", config, &socket),
        Local::Audit {
            command: AuditCmd::Verify { file },
        } => return ExitCode::from(local::audit_verify(file)),
    };
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(msg) => {
            eprintln!("brokerd: {msg}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

/// Writes generated text to standard output; a closed output is a failure, not a panic.
fn print(bytes: &[u8]) -> ExitCode {
    use std::io::Write;
    match std::io::stdout().write_all(bytes) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("brokerd: {e}");
            ExitCode::from(1)
        }
    }
}

fn check_config(file: &Path, placeholder_grant_dirs: bool) -> ExitCode {
    let loaded = match placeholder_grant_dirs {
        false => config::load(file),
        true => config::load_placeholder_dirs(file),
    };
    match loaded.map_err(|e| e.to_string()).and_then(|c| {
        Policy::new(&c).map_err(|e| format!("{}: {e}", file.display()))?;
        peers(&c).map_err(|e| format!("{}: {e}", file.display()))?;
        Ok(c)
    }) {
        Ok(c) => {
            // The walks a writable call will need: past its bounds, such a grant's writable
            // calls would all be refused (docs/design.md#protected-targets).
            let mut past = 0;
            for s in brokerd::local::survey(&c) {
                match s.outcome {
                    Ok(n) => println!(
                        "grants.{}: {}: {n} protected target(s), bound read-only in its writable sandboxes",
                        s.grant,
                        s.path.display()
                    ),
                    Err(e) => {
                        past += 1;
                        eprintln!(
                            "{}: grants.{}: {e}: its writable calls would be refused; {}",
                            file.display(),
                            s.grant,
                            e.remedy()
                        );
                    }
                }
            }
            if past > 0 {
                return ExitCode::from(1);
            }
            println!("{}: ok ({} grant(s))", file.display(), c.grants.len());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(1)
        }
    }
}

/// The clients and owners of the config, looked up now.
fn peers(c: &Config) -> Result<server::Peers, String> {
    Ok(server::Peers {
        clients: Clients::resolve(&client_names(&c.broker.clients))
            .map_err(|e| format!("broker.clients: {e}"))?,
        owners: Clients::resolve(&client_names(&c.broker.owners))
            .map_err(|e| format!("broker.owners: {e}"))?,
    })
}

fn client_names(list: &[config::Client]) -> Vec<String> {
    list.iter()
        .map(|cl| match cl {
            config::Client::User(u) => u.clone(),
            config::Client::Uid(n) => n.to_string(),
            config::Client::Group(g) => format!("@{g}"),
        })
        .collect()
}

/// Logs go to journald (structured fields) under systemd, to stderr otherwise.
fn init_logging() {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = tracing_subscriber::EnvFilter::try_from_env("BROKERD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    if std::env::var_os("JOURNAL_STREAM").is_some() {
        // The fields under their own names, so that `journalctl -u boxmaker DECISION=refused`
        // finds every refusal (docs/design.md#service); none collides with journald's own.
        if let Ok(journald) = tracing_journald::layer().map(|l| l.with_field_prefix(None)) {
            let _ = tracing_subscriber::registry()
                .with(filter)
                .with(journald)
                .try_init();
            return;
        }
    }
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_target(false),
        )
        .try_init();
}

fn serve(file: &Path, socket: Option<PathBuf>) -> ExitCode {
    init_logging();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("brokerd: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let outcome = runtime.block_on(run(file, socket));
    // A runner thread still blocked in a sandbox that would not die must not keep the process
    // past systemd's stop timeout: its sandbox has been swept already.
    runtime.shutdown_timeout(Duration::from_secs(5));
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            let _ = sd_notify::notify(false, &[NotifyState::Status(&format!("failed: {e}"))]);
            ExitCode::from(1)
        }
    }
}

/// The service's life: loaded, started, ready, serving until a stop signal, then stopped.
async fn run(file: &Path, socket: Option<PathBuf>) -> Result<(), String> {
    let (config, policy, clients) = load(file, socket.as_deref())?;
    // Without [runner] brokerd still serves, decides and audits, and refuses whatever would
    // run (docs/design.md#the-podman-runner, docs/design.md#service).
    let backend = config.runner.as_ref().map(|rc| rc.backend);
    let runner = runner_of(file, &config)?;
    let audit_path = config.broker.audit_log.clone();
    let audit = tokio::task::spawn_blocking(move || Audit::open(&audit_path))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("{e}; see {}", runbook::AUDIT_UNWRITABLE))?;

    // The listener first: a socket-activated client may already be waiting on it.
    let listener = listener(socket)?;

    // Sweep what a crash of an earlier brokerd left behind.
    sweep(runner.clone(), Swept::EarlierRun).await;

    let grace = Duration::from_secs(config.broker.shutdown_grace_s);
    let owner_socket = config
        .runner
        .as_ref()
        .map_or(Path::new(config::DEFAULT_HOME), |r| r.home.as_path())
        .join(OWNER_SOCKET);
    let staged_ttl = config.broker.staged_ttl_s;
    let broker = start_broker(config, policy, runner, audit).await?;

    // The broker logs its outcome, and when a failed one is tried again.
    let preflight = broker.preflight().await;
    // Each toolset's check logs its outcome too; one that fails stops only its grants.
    if backend.is_some() {
        broker.toolset_checks().await;
    }
    // The stop signals are watched before anyone can see brokerd ready (the log, systemd, a
    // status answer): a SIGTERM right after must stop it cleanly, not kill it.
    let stop = StopSignals::watch();
    let head = broker.audit_head();
    tracing::info!(audit_seq = head.seq, audit_hash = head.hash, "ready");
    let status = if preflight.ok || backend.is_none() {
        format!("serving; audit head {} {}", head.seq, head.hash)
    } else {
        format!("serving, but the preflight failed: {}", preflight.detail)
    };
    let _ = sd_notify::notify(false, &[NotifyState::Ready, NotifyState::Status(&status)]);

    let serving = Serving::start(listener, &broker, clients, &owner_socket, staged_ttl);
    stop.wait().await;
    serving.stop(&broker, grace, &owner_socket).await;
    Ok(())
}

/// Start-up's first step: the privileges refused, the config and its policy loaded, its
/// clients looked up, and its grants clear of the socket's directory.
fn load(file: &Path, socket: Option<&Path>) -> Result<(Config, Policy, server::Peers), String> {
    // Nothing is read or opened as root or with a capability (docs/design.md#service).
    let privileges = brokerd::privileges::Privileges::read()?;
    if let Some(why) = privileges.refusal() {
        return Err(why);
    }
    tracing::info!("privileges: {}", privileges.summary());
    let config = config::load(file).map_err(|e| e.to_string())?;
    let policy = Policy::new(&config).map_err(|e| format!("{}: {e}", file.display()))?;
    let clients = peers(&config).map_err(|e| format!("{}: {e}", file.display()))?;
    // The socket's directory, known only now (systemd's RuntimeDirectory, or --socket).
    let socket_dirs: Vec<config::StatePlace> = socket
        .iter()
        .filter_map(|s| s.parent().map(Path::to_path_buf))
        .chain(std::env::var_os("RUNTIME_DIRECTORY").map(PathBuf::from))
        .map(|path| config::StatePlace {
            path,
            what: "the socket's directory",
            file: false,
        })
        .collect();
    config::grants_clear_of(&config, &socket_dirs)
        .map_err(|e| format!("{}: {e}", file.display()))?;
    Ok((config, policy, clients))
}

/// The config's runner: none without `[runner]`, else its backend's.
fn runner_of(file: &Path, config: &Config) -> Result<Arc<dyn Runner>, String> {
    Ok(match &config.runner {
        None => {
            tracing::warn!(
                "{}: no [runner] section: {}",
                file.display(),
                brokerd::policy::Why::NoRunner
            );
            Arc::new(NoRunner)
        }
        Some(rc) => match rc.backend {
            Backend::Podman => Arc::new(PodmanRuntime::new(rc)),
            // config::load gives [bwrap] (with its defaults) exactly when backend = "bwrap".
            Backend::Bwrap => match &config.bwrap {
                Some(b) => {
                    adopt_sandbox_orphans()?;
                    Arc::new(BwrapRuntime::new(rc, b).with_toolsets(config.toolsets.values()))
                }
                None => {
                    return Err(format!(
                        "{}: backend = \"bwrap\" without [bwrap]",
                        file.display()
                    ))
                }
            },
        },
    })
}

/// When a sweep runs, for its log line.
#[derive(Clone, Copy)]
enum Swept {
    EarlierRun,
    Shutdown,
}

/// Removes the runner's sandboxes (`Runner::sweep`) on a blocking thread, and logs what it
/// removed.
async fn sweep(runner: Arc<dyn Runner>, when: Swept) {
    match tokio::task::spawn_blocking(move || runner.sweep()).await {
        Ok(Ok(n)) if n > 0 => match when {
            Swept::EarlierRun => tracing::warn!(
                removed = n,
                "removed sandboxes and egress directories left by an earlier run"
            ),
            Swept::Shutdown => tracing::warn!(removed = n, "removed sandboxes at shutdown"),
        },
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::error!("{e}; see {}", runbook::RUNNER_UNAVAILABLE),
        Err(e) => tracing::error!("the sweep task failed: {e}"),
    }
}

/// The broker made, its start audited, and the commits a stop interrupted finished.
async fn start_broker(
    config: Config,
    policy: Policy,
    runner: Arc<dyn Runner>,
    audit: Audit,
) -> Result<Arc<Broker>, String> {
    let backend = config.runner.as_ref().map(|rc| rc.backend);
    let enforce = config.runner.as_ref().is_none_or(|rc| rc.enforce_limits);
    let broker = Arc::new(Broker::new(config, policy, runner, audit));
    let mut start = format!(
        "brokerd {} started, backend {}",
        env!("CARGO_PKG_VERSION"),
        Backend::name(backend)
    );
    if !enforce {
        // docs/design.md#limits: an operator's explicit choice, logged and audited.
        start.push_str(
            "; enforce_limits = false: calls run even where memory and pids limits are ignored",
        );
        tracing::warn!(
            "runner.enforce_limits = false: calls run even where limits would be ignored"
        );
    }
    broker
        .event(start)
        .await
        .map_err(|e| format!("{e}; see {}", runbook::AUDIT_UNWRITABLE))?;

    broker.finish_interrupted_commits().await;
    Ok(broker)
}

/// What runs while brokerd serves: its sockets' servers, the expiry of staged changes and
/// the watchdog's pings.
struct Serving {
    stop: watch::Sender<bool>,
    server: tokio::task::JoinHandle<()>,
    owner_server: Option<tokio::task::JoinHandle<()>>,
    expiry: Option<tokio::task::JoinHandle<()>>,
    watchdog: Option<tokio::task::JoinHandle<()>>,
}

impl Serving {
    /// Serves the clients on `listener`, and the service user as an owner on its own socket.
    fn start(
        listener: UnixListener,
        broker: &Arc<Broker>,
        clients: server::Peers,
        owner_socket: &Path,
        staged_ttl: u64,
    ) -> Serving {
        let (stop, stop_rx) = watch::channel(false);
        let watchdog = start_watchdog();
        let server = tokio::spawn(server::serve(
            listener,
            broker.clone(),
            Arc::new(clients),
            stop_rx.clone(),
        ));
        // The service user's own way in, as an owner (docs/design.md#staged-writes-and-owners):
        // a socket in its home that no one else can reach, for commits where `owners` names
        // nobody on the shared socket.
        let owner_server = match owner_listener(owner_socket) {
            Ok(l) => Some(tokio::spawn(server::serve(
                l,
                broker.clone(),
                Arc::new(server::Peers {
                    clients: Clients::default(),
                    owners: Clients::of_uids([nix::unistd::geteuid().as_raw()]),
                }),
                stop_rx.clone(),
            ))),
            Err(e) => {
                tracing::warn!("{}: {e}; the owner's socket is off", owner_socket.display());
                None
            }
        };
        // Staged changes past the owner's staged_ttl_s go, audited; checked each minute.
        let expiry = (staged_ttl > 0).then(|| {
            let broker = broker.clone();
            tokio::spawn(async move {
                loop {
                    broker.expire_staged().await;
                    tokio::time::sleep(Duration::from_secs(60)).await;
                }
            })
        });
        Serving {
            stop,
            server,
            owner_server,
            expiry,
            watchdog,
        }
    }

    /// The stop: no new connections, the calls in flight given `grace`, what remains swept,
    /// and the audit head logged once the last outcomes are on disk.
    async fn stop(self, broker: &Arc<Broker>, grace: Duration, owner_socket: &Path) {
        tracing::info!(
            "stopping: no new connections; waiting up to {}s for calls in flight",
            grace.as_secs()
        );
        let _ = sd_notify::notify(
            false,
            &[NotifyState::Stopping, NotifyState::Status("stopping")],
        );
        broker.begin_shutdown();
        let _ = self.stop.send(true);
        let _ = self.server.await;
        if let Some(s) = self.owner_server {
            let _ = s.await;
        }
        if let Some(e) = self.expiry {
            e.abort();
        }
        let _ = std::fs::remove_file(owner_socket);
        let drained = broker.drain(grace).await;
        if !drained {
            tracing::warn!("calls still running after the grace period; removing their sandboxes");
        }
        // Whatever remains (calls past the grace, or a runner that lost track) is removed.
        sweep(broker.runner().clone(), Swept::Shutdown).await;
        if !drained {
            // The calls whose sandboxes were just removed end now: let their answers (the fixed
            // sentences) reach their clients before the process exits.
            broker.drain(Duration::from_secs(5)).await;
        }
        if let Some(w) = self.watchdog {
            w.abort();
        }
        // The last outcomes reach the disk before the head is said to be the log's.
        if let Err(e) = broker.sync_audit().await {
            tracing::error!("{e}; see {}", runbook::AUDIT_UNWRITABLE);
        }
        let head = broker.audit_head();
        tracing::info!(audit_seq = head.seq, audit_hash = head.hash, "stopped");
    }
}

/// Where, under the service home, the service user reaches brokerd as an owner.
const OWNER_SOCKET: &str = "owner.sock";

/// The owner's socket: made afresh (a stale one of a crash removed), mode 0600 in the home
/// (0700, so nobody else reaches it even before the chmod), so only the service user can
/// connect; a peer is an owner only with the service user's own uid.
fn owner_listener(path: &Path) -> Result<UnixListener, String> {
    let _ = std::fs::remove_file(path);
    let l = UnixListener::bind(path).map_err(|e| e.to_string())?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| e.to_string())?;
    Ok(l)
}

/// The socket from systemd (LISTEN_FDS) or `--socket PATH`.
fn listener(socket: Option<PathBuf>) -> Result<UnixListener, String> {
    if socket.is_none() {
        let fds = libsystemd::activation::receive_descriptors(true)
            .map_err(|e| format!("no socket from systemd ({e}) and no --socket given"))?;
        let Some(fd) = fds.into_iter().next() else {
            return Err("systemd passed no socket and no --socket was given".into());
        };
        let std_listener = brokerd::sys::adopt_listener(fd);
        std_listener
            .set_nonblocking(true)
            .map_err(|e| format!("the systemd socket: {e}"))?;
        return UnixListener::from_std(std_listener)
            .map_err(|e| format!("the systemd socket: {e}"));
    }
    let path = socket.unwrap_or_default();
    if let Ok(meta) = std::fs::symlink_metadata(&path) {
        if meta.file_type().is_socket() {
            // A socket file left by an earlier run; nothing listens on it any more.
            std::fs::remove_file(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        } else {
            return Err(format!(
                "{} exists and is not a socket; refusing to replace it",
                path.display()
            ));
        }
    }
    let listener = UnixListener::bind(&path)
        .map_err(|e| format!("cannot listen on {}: {e}", path.display()))?;
    // Peer credentials are the real check; the mode keeps other users from even connecting.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o660))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    tracing::info!(socket = %path.display(), "listening");
    Ok(listener)
}

/// Pings the systemd watchdog at half its interval, when the unit asks for one.
fn start_watchdog() -> Option<tokio::task::JoinHandle<()>> {
    let mut usec = 0u64;
    if !sd_notify::watchdog_enabled(false, &mut usec) || usec == 0 {
        return None;
    }
    let every = Duration::from_micros(usec / 2);
    Some(tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            let _ = sd_notify::notify(false, &[NotifyState::Watchdog]);
        }
    }))
}

/// SIGTERM and SIGINT, handled from the moment [`StopSignals::watch`] returns.
struct StopSignals(Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>);

impl StopSignals {
    fn watch() -> StopSignals {
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(term), Ok(int)) => StopSignals(Some((term, int))),
            _ => StopSignals(None),
        }
    }

    async fn wait(self) {
        match self.0 {
            Some((mut term, mut int)) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            }
            None => {
                // Without signal handlers the process cannot stop cleanly; wait for Ctrl-C.
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
}

/// With bwrap, brokerd adopts and reaps the PID 1 each sandbox leaves behind
/// (`runner::reaper`): before each sandbox starts, and here, whenever SIGCHLD arrives.
fn adopt_sandbox_orphans() -> Result<(), String> {
    reaper::adopt_orphans().map_err(|e| format!("prctl(PR_SET_CHILD_SUBREAPER): {e}"))?;
    let mut chld =
        signal(SignalKind::child()).map_err(|e| format!("cannot watch for SIGCHLD: {e}"))?;
    tokio::spawn(async move {
        while chld.recv().await.is_some() {
            let _ = tokio::task::spawn_blocking(reaper::reap_orphans).await;
        }
    });
    Ok(())
}
