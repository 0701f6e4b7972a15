//! The scenarios, each an assertion on what the model would see, against a
//! real brokerd that this process starts as the service user, on one backend: real rootless
//! Podman or bubblewrap over the tools image's tree. What the model sees is
//! asserted identically on both; only the checks of what is left behind differ.
//!
//! After every scenario no egress directory may be left (`<home>/run/egress/`), and no
//! sandbox: with Podman no container labelled `boxmaker`, with bwrap no `bwrap` process of the
//! service user and nothing of it in another PID namespace, whatever the scenario's own result.
//!
//! Here: the suite's types, the run list (`run`: its names and their order are printed, and
//! scripts compare them) and the helpers every scenario uses. The suite's own steps are in
//! `suite` (brokerd's config, start and stop, calls); the scenarios by concern in `files`,
//! `network`, `limits`, `decisions`, `escapes`, `staged`, `protected` and `crashes` (which also
//! looks for what each scenario left behind); the benches in `bench` and `scale`.

use std::path::{Path, PathBuf};
use std::process::{Child, ExitCode};
use std::time::{Duration, Instant};

use client::{Body, Client, Request};
use proto::broker::{Backend, EgressNetwork};
use serde_json::Value;

use crate::system::{self, User};

mod bench;
mod crashes;
mod decisions;
mod escapes;
mod files;
mod limits;
mod network;
mod protected;
mod scale;
mod staged;
mod suite;
mod toolsets;

const RO_TEXT: &str = "hello from the read-only directory\n";
const SHELL_MS: u64 = 4000;
const OUTPUT_CAP: usize = 65536;
const GRANT: &str = "e2e";
/// [`GRANT`]'s `hosts`, in the config's order: what its http_fetch may reach, and what a
/// refusal names.
const GRANT_HOSTS: [&str; 2] = ["ok.test", "*.ok.test"];
const ASK_GRANT: &str = "e2e-ask";
const STAGED_GRANT: &str = "e2e-staged";
/// The grant whose shell calls reach `ok.test` (only) through their egress proxy.
const NET_GRANT: &str = "e2e-net";
/// `NET_GRANT` without `shell_hosts`: what its shell calls cost without a proxy (the egress
/// bench).
const QUIET_GRANT: &str = "e2e-net-quiet";
/// The grant on the suite's toolset of the host's git and make (`--dev-image`, `--dev-tree`),
/// writing to the rw directory, with `ok.test` as its shell host; the toolset has its name.
const DEV_GRANT: &str = "e2e-dev";
/// The staged grant on that toolset, over the project directory (`<work>/project`).
const DEV_STAGED_GRANT: &str = "e2e-dev-staged";
/// [`DEV_GRANT`]'s `max_cache_bytes`: the least there is, 1 MiB.
const DEV_CACHE_BYTES: u64 = 1 << 20;
/// [`QUIET_GRANT`] on the toolset: what a toolset costs a call (the toolset bench).
const DEV_QUIET_GRANT: &str = "e2e-dev-quiet";
/// `egress_connections` in the suite's config: what one shell call's proxy accepts in all.
const NET_CONNECTIONS: u64 = 8;
/// A variable only brokerd's environment has, looked for in every sandbox.
const CANARY_NAME: &str = "BOXMAKER_E2E_CANARY";
const CANARY_VALUE: &str = "planted-in-brokerd-s-environment";

/// How long a bwrap sandbox's inner processes may outlive the answer: brokerd confirms the
/// death of the bwrap it started through its pidfd; the sandbox's PID 1 gets its
/// `--die-with-parent` SIGKILL a moment later.
const SETTLE: Duration = Duration::from_secs(2);
/// How long what a call's answer did not wait for may take to go: brokerd removes an egress
/// proxy and its directory after the answer, each step bounded by its helper timeout (8 s), so
/// the proxy's `rm -f` and the check that its container is gone fit in this.
const AFTER_ANSWER: Duration = Duration::from_secs(20);

/// How long the suite waits for a call's answer (longer than any tool's time limit).
const CALL_WAIT: Duration = Duration::from_secs(90);

/// `--time-scale N` (an integer of at least 1; 1 when absent).
fn time_scale(opts: &crate::Opts) -> Result<u32, String> {
    match opts.one("time-scale") {
        None => Ok(1),
        Some(v) => match v.parse::<u32>() {
            Ok(n) if (1..=1000).contains(&n) => Ok(n),
            _ => Err(format!(
                "--time-scale {v:?} is not a whole number from 1 to 1000"
            )),
        },
    }
}

type Outcome = Result<(), String>;
type Scenario = fn(&mut Suite) -> Outcome;

struct Suite {
    /// Whether the config has the toolset of git and make and [`DEV_GRANT`] (both
    /// `--dev-image` and `--dev-tree` given): the toolset scenarios run only then.
    dev: bool,
    /// The toolset's tree and the base toolset's (`--dev-tree`, `--tools-root`), for the
    /// toolset bench's sizes.
    dev_tree: Option<PathBuf>,
    /// The staged grant's project on the toolset (`--dev-project`).
    project: &'static toolsets::Project,
    base_tree: Option<PathBuf>,
    backend: Backend,
    tools_root: Option<PathBuf>,
    /// The other backend and brokerd's config for it, where this run was given what it needs
    /// (`--tools-root`, `--image`); for Podman, an error where its egress network could not be
    /// looked up.
    other_config: Option<(Backend, Result<String, String>)>,
    user: User,
    podman: String,
    brokerd: PathBuf,
    config: PathBuf,
    socket: PathBuf,
    log: PathBuf,
    pid_file: PathBuf,
    work: PathBuf,
    rw: PathBuf,
    ro: PathBuf,
    /// The staged grant's directory (`writes = "staged"`).
    staged: PathBuf,
    egress_root: PathBuf,
    image: String,
    /// Podman's network for the egress proxy: `--egress-network`, or what this host's Podman
    /// has (pasta where it exists, as on NixOS; slirp4netns otherwise); none on bwrap unless
    /// given.
    egress_network: Option<EgressNetwork>,
    tailnet_log: Option<PathBuf>,
    /// The test nameserver's log of the names it was asked for (`--dns-log`), where given.
    dns_log: Option<PathBuf>,
    /// Lines in the tailnet log before this run (another backend's run may have written some).
    tailnet_before: usize,
    /// `--time-scale`: every time limit in brokerd's config and every wait of the suite is
    /// multiplied by it (a slow host, e.g. a guest under QEMU's TCG).
    scale: u32,
    child: Option<Child>,
    session: String,
    calls: u32,
    /// Pad every call id to the protocol's longest, 64 characters.
    long_call_ids: bool,
    control_connections: usize,
}

/// The suite's scenarios on `backend`, in order; the toolset scenarios join them when the
/// run has a toolset. vm-tests/e2e.nix counts this table's entries (a `match backend` entry
/// once) for the number a full run passes on one backend.
fn table(backend: Backend) -> Vec<(&'static str, Scenario)> {
    let scenarios: Vec<(&'static str, Scenario)> = vec![
        ("read_file-works", Suite::read_file_works),
        ("write_file-works", Suite::write_file_works),
        ("shell-works", Suite::shell_works),
        ("http_fetch-works", Suite::http_fetch_works),
        (
            "only-granted-dirs-visible",
            Suite::only_granted_dirs_visible,
        ),
        ("read-only-mount-honoured", Suite::read_only_mount_honoured),
        (
            "read-write-mount-honoured",
            Suite::read_write_mount_honoured,
        ),
        match backend {
            Backend::Podman => (
                "control-egress-network-reaches-tailnet",
                Suite::control_egress_network_reaches_tailnet as Scenario,
            ),
            Backend::Bwrap => (
                "control-bwrap-share-net-reaches-tailnet",
                Suite::control_share_net_reaches_tailnet as Scenario,
            ),
        },
        (
            "shell-cannot-reach-tailnet",
            Suite::shell_cannot_reach_tailnet,
        ),
        (
            "shell-cannot-reach-host-addresses",
            Suite::shell_cannot_reach_host,
        ),
        ("shell-has-no-network", Suite::shell_has_no_network),
        (
            "shell-egress-curl-by-the-environment-reaches-granted-host",
            Suite::shell_egress_reaches_granted_host,
        ),
        (
            "shell-egress-refuses-host-not-in-shell-hosts",
            Suite::shell_egress_refuses_other_host,
        ),
        (
            "shell-egress-refuses-connect-to-port-80",
            Suite::shell_egress_refuses_port_80,
        ),
        (
            "shell-egress-refuses-ip-literal",
            Suite::shell_egress_refuses_ip_literal,
        ),
        (
            "shell-egress-refuses-granted-names-at-forbidden-addresses",
            Suite::shell_egress_granted_names_at_forbidden_addresses,
        ),
        (
            "shell-egress-dns-from-the-sandbox-reaches-no-nameserver",
            Suite::shell_egress_dns_leaves_nothing,
        ),
        (
            "shell-egress-proxy-killed-mid-transfer",
            Suite::shell_egress_proxy_killed_mid_transfer,
        ),
        (
            "shell-egress-rebinding-between-connections-is-refused",
            Suite::shell_egress_rebinding_is_refused,
        ),
        (
            "shell-egress-slow-loris-on-the-bridge-holds-nothing-up",
            Suite::shell_egress_slow_loris_holds_nothing_up,
        ),
        (
            "shell-egress-spellings-of-a-name",
            Suite::shell_egress_spellings_of_a_name,
        ),
        (
            "shell-egress-connection-bound-holds",
            Suite::shell_egress_connection_bound,
        ),
        (
            "shell-egress-connection-flood",
            Suite::shell_egress_connection_flood,
        ),
        (
            "shell-egress-program-ignoring-the-environment-has-no-route",
            Suite::shell_egress_no_route_around_the_proxy,
        ),
        ("http_fetch-refuses-other-host", Suite::fetch_other_host),
        (
            "http_fetch-refuses-redirect-to-other-host",
            Suite::fetch_redirect,
        ),
        ("http_fetch-refuses-non-443-port", Suite::fetch_port),
        (
            "http_fetch-allowed-name-public-path",
            Suite::fetch_allowed_subdomain,
        ),
        (
            "http_fetch-refuses-name-in-tailnet",
            Suite::fetch_tailnet_name,
        ),
        ("http_fetch-refuses-name-in-cgnat", Suite::fetch_cgnat_name),
        (
            "http_fetch-refuses-name-on-loopback",
            Suite::fetch_loopback_name,
        ),
        (
            "http_fetch-refuses-name-on-link-local",
            Suite::fetch_metadata_name,
        ),
        ("time-limit-kills-and-removes", Suite::time_limit),
        ("output-cap-truncates-shell", Suite::output_cap_shell),
        ("output-cap-truncates-http_fetch", Suite::output_cap_fetch),
        ("ask-then-approve", Suite::ask_then_approve),
        ("refusal-outside-grant", Suite::refusal_outside_grant),
        (
            "config-refuses-nested-and-state-grants",
            Suite::config_refuses_nested_grants,
        ),
        (
            "swapped-grant-directory-is-refused",
            Suite::swapped_grant_directory,
        ),
        (
            "sandbox-sees-nothing-of-brokerd-s-environment",
            Suite::no_brokerd_environment,
        ),
        ("no-nested-user-namespaces", Suite::no_nested_userns),
        (
            "address-randomisation-stays-on",
            Suite::address_randomisation_stays_on,
        ),
        (
            "no-setuid-program-lands-in-a-grant",
            Suite::no_setuid_program_lands,
        ),
        (
            "staged-destructive-command-leaves-the-host-alone",
            Suite::staged_destructive,
        ),
        (
            "staged-writes-are-the-session-s-own",
            Suite::staged_session_own,
        ),
        (
            "staged-commit-lands-what-the-sandbox-saw",
            Suite::staged_commit_exact,
        ),
        (
            "staged-conflict-refused-for-that-path",
            Suite::staged_conflict,
        ),
        (
            "staged-swapped-directory-is-not-followed",
            Suite::staged_swapped_dir,
        ),
        (
            "staged-commit-raced-by-a-swap-keeps-the-host-s-files",
            Suite::staged_commit_raced_by_a_swap,
        ),
        (
            "staged-host-edit-during-a-call-is-a-conflict",
            Suite::staged_host_edit_during_a_call,
        ),
        (
            "staged-protected-target-needs-naming",
            Suite::staged_protected,
        ),
        (
            "staged-deleted-directory-keeps-the-host-s-new-files",
            Suite::staged_deleted_dir_conflict,
        ),
        ("staged-size-bound", Suite::staged_size_bound),
        (
            "staged-changes-survive-a-crash",
            Suite::staged_survive_crash,
        ),
        (
            "staged-layer-outlives-a-change-of-backend",
            Suite::staged_layer_outlives_a_backend_change,
        ),
        (
            "protected-targets-hold-against-an-unreadable-command",
            Suite::protected_targets_hold,
        ),
        (
            "descriptors-stall-nothing",
            Suite::descriptors_stall_nothing,
        ),
        (
            "protected-targets-hold-when-hidden-from-the-walk",
            Suite::protected_targets_hold_across_calls,
        ),
        (
            "crash-while-a-sandbox-starts-is-swept",
            Suite::crash_while_starting,
        ),
        ("crash-during-shell-is-swept", Suite::crash_during_shell),
        (
            "crash-with-64-character-ids-is-swept",
            Suite::crash_with_long_ids,
        ),
        (
            "crash-during-http_fetch-is-swept",
            Suite::crash_during_fetch,
        ),
        (
            "tailnet-host-saw-only-the-control",
            Suite::tailnet_untouched,
        ),
        ("a-burst-of-calls-all-run", Suite::burst),
        ("sigterm-stops-cleanly", Suite::sigterm),
    ];
    scenarios
}

pub fn run(opts: &crate::Opts) -> Result<ExitCode, String> {
    let user = User::lookup(&opts.one("user").unwrap_or_else(|| "boxmaker".into()))?;
    let work = PathBuf::from(opts.required("work")?);
    let backend = opts.one("backend").unwrap_or_else(|| "podman".into());
    let backend =
        Backend::parse(&backend).ok_or(format!("--backend {backend:?} is not podman or bwrap"))?;
    let mut suite = Suite::prepare(backend, user, &work, opts)?;
    let only = opts.all("only");
    let bench: usize = match opts.one("bench") {
        Some(n) => n
            .parse()
            .map_err(|_| format!("--bench {n:?} is not a number"))?,
        None => 0,
    };
    let scale = scale::Plan::from_opts(opts)?;
    // Where the benches' JSON goes (bench-<backend>.json, scale-<backend>.json).
    let bench_out = opts.one("bench-out").map(PathBuf::from);
    // What an earlier run left (one killed mid-scenario) is brokerd's start-up sweep to
    // remove; the suite checks that it did, so every later leftover is this run's.
    let pre = suite.leftovers()?;
    suite.start_brokerd()?;
    if !pre.is_empty() {
        let left = suite.leftovers()?;
        if !left.is_empty() {
            suite.stop_brokerd();
            return Err(format!(
                "brokerd's start-up sweep left what an earlier run left behind: {}",
                left.join(", ")
            ));
        }
        eprintln!(
            "boxmaker-e2e: brokerd's start-up sweep removed what an earlier run left: {}",
            pre.join(", ")
        );
    }

    let mut scenarios = table(backend);
    if suite.dev {
        let at = scenarios.len() - 1;
        let dev: [(&str, Scenario); 6] = [
            (
                "toolset-runs-its-own-programs",
                Suite::toolset_runs_its_own_programs,
            ),
            (
                "toolset-clones-and-builds-through-the-proxy",
                Suite::toolset_clones_and_builds,
            ),
            (
                "toolset-fix-a-failing-test-in-a-staged-grant",
                Suite::toolset_fixes_a_failing_test_staged,
            ),
            (
                "toolset-build-cannot-touch-protected-targets",
                Suite::toolset_build_cannot_touch_protected,
            ),
            (
                "grant-cache-persists-is-its-own-and-is-bounded",
                Suite::grant_cache,
            ),
            (
                "toolset-changed-after-start-is-checked-again",
                Suite::toolset_changed_after_start,
            ),
        ];
        scenarios.splice(at..at, dev);
    }
    // A name no scenario has (misspelt, or a toolset scenario on a run without the toolset)
    // would run nothing and pass: it is an error. The control of one backend's network is
    // named for both (a list such as the guest's serves both runs).
    let one_backend = [
        "control-egress-network-reaches-tailnet",
        "control-bwrap-share-net-reaches-tailnet",
    ];
    if let Some(o) = only
        .iter()
        .filter(|o| !one_backend.contains(&o.as_str()))
        .find(|o| !scenarios.iter().any(|(n, _)| n == o))
    {
        suite.stop_brokerd();
        return Err(format!("--only {o:?}: no such scenario in this run"));
    }
    let (mut passed, mut failed) = (0, 0);
    let b = backend.as_str();
    for (name, scenario) in scenarios {
        if !only.is_empty() && !only.iter().any(|o| o == name) && name != "sigterm-stops-cleanly" {
            continue;
        }
        if bench > 0 && name == "sigterm-stops-cleanly" {
            // A session of its own, whichever scenarios ran before (or none, with --only).
            suite.session = "s-bench".to_string();
            match suite.bench(bench) {
                Ok(json) => write_bench(bench_out.as_deref(), "bench", b, &json),
                Err(e) => println!("bench: {e}"),
            }
            match suite.bench_staged(bench) {
                Ok(json) => write_bench(bench_out.as_deref(), "staged", b, &json),
                Err(e) => println!("bench staged: {e}"),
            }
            match suite.bench_egress(bench) {
                Ok(json) => write_bench(bench_out.as_deref(), "egress", b, &json),
                Err(e) => println!("bench egress: {e}"),
            }
            if suite.dev {
                match suite.bench_toolset(bench) {
                    Ok(json) => write_bench(bench_out.as_deref(), "toolset", b, &json),
                    Err(e) => println!("bench toolset: {e}"),
                }
            }
        }
        if let (Some(plan), "sigterm-stops-cleanly") = (&scale, name) {
            match suite.scale(plan) {
                Ok(json) => write_bench(bench_out.as_deref(), "scale", b, &json),
                Err(e) => println!("scale: {e}"),
            }
        }
        suite.session = format!("s-{name}");
        let started = Instant::now();
        let mut outcome = if suite.child.is_none() && name != "sigterm-stops-cleanly" {
            Err("brokerd is not running".to_string())
        } else {
            scenario(&mut suite)
        };
        match suite.settled_leftovers(suite.child.is_some()) {
            Ok(left) if !left.is_empty() => {
                let why = format!("left behind after the scenario: {}", left.join(", "));
                outcome = match outcome {
                    Ok(()) => Err(why),
                    Err(e) => Err(format!("{e}; {why}")),
                };
                suite.clean_up_after_failure();
            }
            Ok(_) => {}
            Err(e) => outcome = Err(format!("cannot list leftovers: {e}")),
        }
        let ms = started.elapsed().as_millis();
        match outcome {
            Ok(()) => {
                passed += 1;
                println!("ok {b}/{name}");
            }
            Err(why) => {
                failed += 1;
                println!("FAIL {b}/{name}: {why}");
            }
        }
        eprintln!("  ({b}/{name}: {ms} ms)");
    }
    suite.stop_brokerd();
    // `WORD: N passed, M failed`: run.sh runs each backend and prints the total last.
    println!("{b}: {passed} passed, {failed} failed");
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `<dir>/<what>-<backend>.json`, when `--bench-out` named a directory; a failure is printed, as
/// a bench's own failure is.
fn write_bench(dir: Option<&Path>, what: &str, backend: &str, json: &Value) {
    let Some(dir) = dir else { return };
    let file = dir.join(format!("{what}-{backend}.json"));
    let text = format!("{json:#}\n");
    if let Err(e) = std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&file, text)) {
        println!("{what}: cannot write {}: {e}", file.display());
    }
}

fn check(cond: bool, why: impl FnOnce() -> String) -> Outcome {
    if cond {
        Ok(())
    } else {
        Err(why())
    }
}

/// The egress network this host's Podman offers: pasta where Podman knows a pasta program
/// (`podman info`: host.pasta.executable, Podman 5 and NixOS), else slirp4netns.
pub fn host_egress_network(user: &User, podman: &str) -> Result<EgressNetwork, String> {
    Ok(host_egress_helper(user, podman)?.0)
}

/// [`host_egress_network`] and the program Podman runs for it, as `podman info` names it (empty
/// where it names none).
pub fn host_egress_helper(user: &User, podman: &str) -> Result<(EgressNetwork, String), String> {
    let mut c = user.command(podman);
    c.args(["info", "--format", "json"]);
    let (code, out) = system::output(c, Duration::from_secs(60))?;
    if code != 0 {
        return Err(format!("podman info failed (exit {code}): {out}"));
    }
    let start = out.find('{').unwrap_or(0);
    let info: serde_json::Value = serde_json::from_str(&out[start..])
        .map_err(|e| format!("podman info: not JSON ({e}): {out}"))?;
    let program = |net: EgressNetwork| {
        info["host"][net.as_str()]["executable"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let pasta = program(EgressNetwork::Pasta);
    Ok(if pasta.is_empty() {
        let slirp = EgressNetwork::Slirp4netns;
        (slirp, program(slirp))
    } else {
        (EgressNetwork::Pasta, pasta)
    })
}

/// A short, one-line rendering of what the model saw, for failure messages.
fn show(body: &Body) -> String {
    let s = serde_json::to_string(body).unwrap_or_default();
    if s.len() > 600 {
        format!(
            "{}…",
            &s[..s.char_indices().take(600).last().map_or(0, |(i, _)| i)]
        )
    } else {
        s
    }
}

/// Every path under `dir`, relative and sorted, with what it is: a link's target, a file's
/// content, or `dir`.
fn tree_of(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let rel = p.strip_prefix(dir).unwrap_or(&p).display().to_string();
            let what = match std::fs::symlink_metadata(&p) {
                Ok(m) if m.file_type().is_symlink() => std::fs::read_link(&p)
                    .map(|t| format!("-> {}", t.display()))
                    .unwrap_or_default(),
                Ok(m) if m.is_dir() => {
                    stack.push(p.clone());
                    "dir".to_string()
                }
                Ok(_) => std::fs::read_to_string(&p).unwrap_or_default(),
                Err(e) => e.to_string(),
            };
            out.push((rel, what));
        }
    }
    out.sort();
    out
}

/// The exit codes a shell's output reports on `rc=N` lines of their own, in order (`rc=127`
/// is not `rc=1`).
fn exit_codes(out: &str) -> Vec<&str> {
    out.lines().filter_map(|l| l.strip_prefix("rc=")).collect()
}

/// One call on a fresh connection.
#[allow(clippy::too_many_arguments)]
fn call_on(
    socket: &Path,
    wait: Duration,
    session: &str,
    call: &str,
    grant: &str,
    tool: &str,
    args: Value,
    approval: Option<String>,
) -> Result<Body, String> {
    let mut client = Client::connect(socket).map_err(|e| e.to_string())?;
    client.set_timeout(Some(wait)).map_err(|e| e.to_string())?;
    let req = Request::Call {
        id: client.next_id(),
        v: None,
        session: session.to_string(),
        call: call.to_string(),
        grant: grant.to_string(),
        tool: tool.to_string(),
        arguments: args.to_string(),
        approval,
    };
    client
        .request(&req)
        .map(|a| a.body)
        .map_err(|e| e.to_string())
}

/// (p50, p95) in milliseconds, nearest rank.
fn percentiles(v: &mut [Duration]) -> (f64, f64) {
    v.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let at = |q: f64| ms(v[((v.len() as f64 - 1.0) * q).round() as usize]);
    (at(0.50), at(0.95))
}

#[cfg(test)]
mod table_tests {
    use super::*;

    /// The count vm-tests/e2e.nix and nixos/checks/check_vm.py take from this file's text is
    /// what a run on each backend has: a `match backend` entry is one scenario, not two.
    #[test]
    fn the_vm_test_counts_what_a_backend_runs() {
        let text = include_str!("scenarios.rs");
        let after = text.split("let scenarios").nth(1).expect("the table");
        let listed = after.split("];").next().expect("its end");
        let count = listed.matches("Suite::").count() - listed.matches("Backend::Bwrap =>").count();
        for backend in [Backend::Podman, Backend::Bwrap] {
            assert_eq!(table(backend).len(), count, "{backend:?}");
        }
    }

    /// Every scenario of the guest's smoke pass (vm-tests/guest/run.sh's `smoke`, run on both
    /// backends) is one of the table's, so a misspelt name fails here rather than in the guest
    /// (Nix's build of the crates leaves the script out: skipped there, never under `CI`).
    #[test]
    fn the_guest_s_smoke_pass_names_scenarios_of_both_backends() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../vm-tests/guest/run.sh");
        let Ok(script) = std::fs::read_to_string(path) else {
            assert!(std::env::var_os("CI").is_none(), "no {path}");
            println!("SKIPPED no {path} (a build of the crates alone)");
            return;
        };
        let list = script.split("\nsmoke=\"").nth(1).expect("smoke=\"...\"");
        let names: Vec<&str> = list.split('"').next().unwrap().split_whitespace().collect();
        assert!(!names.is_empty());
        for backend in [Backend::Podman, Backend::Bwrap] {
            let table = table(backend);
            for name in &names {
                assert!(
                    table.iter().any(|(n, _)| n == name),
                    "{name} on {backend:?}"
                );
            }
        }
    }
}
