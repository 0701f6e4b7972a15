//! `boxmaker-e2e`: the end-to-end scenario suite in one static binary (docs/design.md#testing).
//!
//! ```text
//! boxmaker-e2e ca --out DIR
//!     a new test CA: DIR/ca.pem (for the test image's bundle) and DIR/ca-key.pem
//! boxmaker-e2e serve --ca DIR [--https ADDR]... [--dns ADDR] [--dns-log FILE]
//!                    [--tailnet ADDR]... [--tailnet-log FILE] [--record NAME=IPV4]...
//!                    [--files DIR] [--ready FILE]
//!     the test hosts, until killed; --ready is written once every socket listens; --files
//!     serves DIR's files at https://<host>/files/
//! boxmaker-e2e run --brokerd FILE --work DIR [--backend podman|bwrap] [--image ID]
//!                  [--tools-root DIR] [--user NAME] [--podman PROG] [--tailnet-log FILE]
//!                  [--dns-log FILE] [--only NAME]... [--bench N] [--enforce-limits true|false]
//!                  [--time-scale N] [--bwrap-cgroup delegated|systemd-scope]
//!                  [--egress-network pasta|slirp4netns] [--bench-out DIR]
//!                  [--scale N] [--scale-clients LIST] [--scale-tools LIST]
//!                  [--dev-image ID] [--dev-tree DIR]
//!     the scenarios against a brokerd this process starts as the service user, on Podman
//!     (the default; --image is required) or bwrap (--tools-root is required); its config has
//!     enforce_limits = false unless --enforce-limits true (a host with cgroup v2 delegation);
//!     --time-scale N (default 1) multiplies every time limit in that config and every wait of
//!     the suite, for a slow host (a guest under QEMU's TCG); --bwrap-cgroup sets
//!     `[bwrap] cgroup` (brokerd's default, "delegated", when not given); --egress-network
//!     sets `[runner] egress_network` (when not given: pasta where `podman info` names a pasta
//!     program, as NixOS's Podman does, else slirp4netns)
//!     --bench N times N calls of each tool through brokerd next to the bare sandbox, and
//!     --scale N runs N calls a row at each of --scale-clients (1,2,4,8,16) concurrent
//!     clients with brokerd's default max_concurrent_calls and with it at the core count
//!     (tools from --scale-tools, default read_file,shell); both just before the last scenario
//!     (--only sigterm-stops-cleanly runs them alone); --bench-out DIR writes their JSON
//!     (bench-<backend>.json, scale-<backend>.json, staged-<backend>.json,
//!     egress-<backend>.json); --dev-image (Podman) or --dev-tree (bwrap) is a toolset with git
//!     and make (tests/e2e/run.sh builds it), and with it the toolset scenarios run
//!
//! boxmaker-e2e report --dir DIR [--markdown FILE] [--svg FILE]
//!     the benches' JSON in DIR as BENCHMARKS.md's tables (rewritten between their markers in
//!     FILE, or printed) and the latency plot (src/report.rs)
//!
//! boxmaker-e2e egress-network [--user NAME] [--podman PROG] [--program true]
//!     prints the egress network `run` picks without --egress-network: pasta or slirp4netns
//!     (with --program true: the program Podman runs for it, as `podman info` names it)
//!
//! boxmaker-e2e guest --payload DIR [--e2e 1|0] [--time-scale N] [--e2e-args ARGS]
//!                    [--backends LIST]
//!     the checks of the QEMU guest (vm-tests/guest/), as root inside it: the binaries,
//!     scripts and units from the payload disk at DIR, the results into DIR/results/; the
//!     scenario suite at the end (unless --e2e 0) with --time-scale N (default 5), ARGS added
//!     to its `run` and on the backends of LIST (default "podman bwrap"); src/guest/
//! ```
//!
//! `run` prints `ok <backend>/<name>` or `FAIL <backend>/<name>: <why>` for each scenario,
//! then `<backend>: N passed, M failed` alone on a line, and exits 1 if any failed (2 for bad
//! usage or a setup failure). `guest` prints `ok NAME (detail)`, `FAIL NAME: why` or
//! `skip NAME: why` per check and `N passed, M failed` last, and exits 1 if any failed.

#![forbid(unsafe_code)]

mod ca;
mod dns;
mod guest;
mod https;
mod report;
mod scenarios;
mod stats;
mod system;

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// The suite's zone when no --record is given: the HTTPS host under two names, another host,
/// and names under the granted `*.ok.test` that point where the proxy must never connect.
pub const DEFAULT_ZONE: &[(&str, Ipv4Addr)] = &[
    ("ok.test", Ipv4Addr::new(192, 0, 2, 1)),
    ("www.ok.test", Ipv4Addr::new(192, 0, 2, 1)),
    ("other.test", Ipv4Addr::new(192, 0, 2, 2)),
    ("tailnet.ok.test", Ipv4Addr::new(100, 100, 100, 100)),
    ("cgnat.ok.test", Ipv4Addr::new(100, 64, 0, 5)),
    ("loop.ok.test", Ipv4Addr::new(127, 0, 0, 1)),
    ("meta.ok.test", Ipv4Addr::new(169, 254, 169, 254)),
];

/// The names the HTTPS host's certificate covers.
pub const CERT_NAMES: &[&str] = &["ok.test", "*.ok.test", "other.test"];

const USAGE: &str = "usage: boxmaker-e2e ca --out DIR
       boxmaker-e2e serve --ca DIR [--https ADDR]... [--dns ADDR] [--dns-log FILE] [--tailnet ADDR]... [--tailnet-log FILE] [--record NAME=IPV4]... [--files DIR] [--ready FILE]
       boxmaker-e2e run --brokerd FILE --work DIR [--backend podman|bwrap] [--image ID] [--tools-root DIR] [--user NAME] [--podman PROG] [--tailnet-log FILE] [--dns-log FILE] [--only NAME]... [--bench N] [--enforce-limits true|false] [--time-scale N] [--bwrap-cgroup delegated|systemd-scope] [--egress-network pasta|slirp4netns] [--bench-out DIR] [--scale N] [--scale-clients LIST] [--scale-tools LIST] [--dev-image ID] [--dev-tree DIR]
       boxmaker-e2e report --dir DIR [--markdown FILE] [--svg FILE]
       boxmaker-e2e egress-network [--user NAME] [--podman PROG] [--program true]
       boxmaker-e2e guest --payload DIR [--e2e 1|0] [--time-scale N] [--e2e-args ARGS] [--backends LIST]";

/// Options as (name, value) pairs, in order; every option takes a value.
pub struct Opts(Vec<(String, String)>);

impl Opts {
    fn parse(args: &[String]) -> Result<Opts, String> {
        let mut out = Vec::new();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            if !a.starts_with("--") {
                return Err(format!("unexpected argument {a:?}\n{USAGE}"));
            }
            let v = it
                .next()
                .ok_or_else(|| format!("{a} needs a value\n{USAGE}"))?;
            out.push((a[2..].to_string(), v.clone()));
        }
        Ok(Opts(out))
    }

    pub fn all(&self, name: &str) -> Vec<String> {
        self.0
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .collect()
    }

    pub fn one(&self, name: &str) -> Option<String> {
        self.all(name).pop()
    }

    pub fn required(&self, name: &str) -> Result<String, String> {
        self.one(name)
            .ok_or_else(|| format!("--{name} is required"))
    }

    fn check(&self, known: &[&str]) -> Result<(), String> {
        match self.0.iter().find(|(n, _)| !known.contains(&n.as_str())) {
            Some((n, _)) => Err(format!("unknown option --{n}\n{USAGE}")),
            None => Ok(()),
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((cmd, rest)) = args.split_first() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let outcome = Opts::parse(rest).and_then(|opts| match cmd.as_str() {
        "ca" => {
            opts.check(&["out"])?;
            let out = PathBuf::from(opts.required("out")?);
            ca::create(&out).map_err(|e| e.to_string())?;
            println!("{}", out.join(ca::CA_CERT).display());
            Ok(ExitCode::SUCCESS)
        }
        "serve" => {
            opts.check(&[
                "ca",
                "https",
                "dns",
                "dns-log",
                "tailnet",
                "tailnet-log",
                "record",
                "files",
                "ready",
            ])?;
            serve(&opts).map(|()| ExitCode::SUCCESS)
        }
        "run" => {
            opts.check(&[
                "brokerd",
                "backend",
                "image",
                "tools-root",
                "work",
                "user",
                "podman",
                "tailnet-log",
                "dns-log",
                "only",
                "bench",
                "enforce-limits",
                "time-scale",
                "bwrap-cgroup",
                "egress-network",
                "bench-out",
                "scale",
                "scale-clients",
                "scale-tools",
                "dev-image",
                "dev-tree",
                "dev-project",
            ])?;
            scenarios::run(&opts)
        }
        "report" => {
            opts.check(&["dir", "markdown", "svg"])?;
            report::run(&opts).map(|()| ExitCode::SUCCESS)
        }
        "egress-network" => {
            opts.check(&["user", "podman", "program"])?;
            let user =
                system::User::lookup(&opts.one("user").unwrap_or_else(|| "boxmaker".into()))?;
            let podman = opts.one("podman").unwrap_or_else(|| "podman".into());
            let (network, program) = scenarios::host_egress_helper(&user, &podman)?;
            match opts.one("program") {
                Some(v) if v == "true" => println!("{program}"),
                Some(v) if v != "false" => return Err(format!("--program {v:?}: true or false")),
                _ => println!("{network}"),
            }
            Ok(ExitCode::SUCCESS)
        }
        "guest" => {
            opts.check(&["payload", "e2e", "time-scale", "e2e-args", "backends"])?;
            guest::run(&opts)
        }
        _ => Err(format!("unknown command {cmd:?}\n{USAGE}")),
    });
    match outcome {
        Ok(code) => code,
        Err(e) => {
            eprintln!("boxmaker-e2e: {e}");
            ExitCode::from(2)
        }
    }
}

fn serve(opts: &Opts) -> Result<(), String> {
    let ca = ca::load(&PathBuf::from(opts.required("ca")?)).map_err(|e| e.to_string())?;
    let names: Vec<String> = CERT_NAMES.iter().map(|s| s.to_string()).collect();
    let (leaf, key) = ca::leaf(&ca, &names).map_err(|e| e.to_string())?;
    let tls = https::tls_config(leaf, key, ca.cert.der().to_vec())?;
    let mut zone = BTreeMap::new();
    for r in opts.all("record") {
        let (name, ip) = r
            .split_once('=')
            .and_then(|(n, ip)| Some((n.to_ascii_lowercase(), ip.parse::<Ipv4Addr>().ok()?)))
            .ok_or_else(|| format!("--record {r:?} is not NAME=IPV4"))?;
        zone.insert(name, ip);
    }
    if zone.is_empty() {
        zone = DEFAULT_ZONE
            .iter()
            .map(|(n, ip)| (n.to_string(), *ip))
            .collect();
    }
    let addr = |s: &str| s.parse::<SocketAddr>().map_err(|e| format!("{s:?}: {e}"));
    let files = opts.one("files").map(|d| Arc::new(PathBuf::from(d)));
    let mut threads = Vec::new();
    for a in opts.all("https") {
        let l = TcpListener::bind(addr(&a)?).map_err(|e| format!("https {a}: {e}"))?;
        let (tls, files) = (tls.clone(), files.clone());
        threads.push(std::thread::spawn(move || https::serve(l, tls, files)));
    }
    if let Some(a) = opts.one("dns") {
        let s = UdpSocket::bind(addr(&a)?).map_err(|e| format!("dns {a}: {e}"))?;
        let log = opts.one("dns-log").map(PathBuf::from);
        threads.push(std::thread::spawn(move || dns::serve(s, zone, log)));
    }
    let log = opts.one("tailnet-log").map(PathBuf::from);
    for a in opts.all("tailnet") {
        let l = TcpListener::bind(addr(&a)?).map_err(|e| format!("tailnet {a}: {e}"))?;
        let log = log.clone();
        threads.push(std::thread::spawn(move || https::serve_tailnet(l, log)));
    }
    if threads.is_empty() {
        return Err("nothing to serve: give --https, --dns or --tailnet".into());
    }
    if let Some(ready) = opts.one("ready") {
        std::fs::write(&ready, "ready\n").map_err(|e| format!("{ready}: {e}"))?;
    }
    for t in threads {
        let _ = t.join();
    }
    Ok(())
}
