//! brokerd refuses to serve as root or holding a capability (docs/design.md#service), before
//! it reads its config or opens anything. Run as root (to become other users with `setpriv`);
//! elsewhere each test says why it did not run.

use std::process::Command;

const BROKERD: &str = env!("CARGO_BIN_EXE_brokerd");

/// `brokerd --config <missing>` as the given `setpriv` options (none: as this process):
/// its exit code and what it said.
fn serve_as(setpriv: &[&str]) -> Option<(i32, String)> {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: needs root to run brokerd as other users");
        return None;
    }
    let mut c = if setpriv.is_empty() {
        Command::new(BROKERD)
    } else {
        let mut c = Command::new("setpriv");
        c.args(setpriv).arg("--").arg(BROKERD);
        c
    };
    c.args(["--config", "/nonexistent/brokerd.toml", "--socket"])
        .arg(std::env::temp_dir().join("brokerd-privileges-test.sock"))
        .env("BROKERD_LOG", "info")
        .env_remove("JOURNAL_STREAM")
        .env_remove("LISTEN_FDS");
    let out = match c.output() {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("skipped: no setpriv here");
            return None;
        }
        Err(e) => panic!("{e}"),
    };
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    Some((out.status.code().unwrap_or(-1), said))
}

const NOBODY: [&str; 4] = [
    "--reuid=65534",
    "--regid=65534",
    "--clear-groups",
    "--no-new-privs",
];

#[test]
fn root_is_refused() {
    let Some((code, said)) = serve_as(&[]) else {
        return;
    };
    assert_eq!(code, 1, "{said}");
    assert!(said.contains("brokerd does not serve as root"), "{said}");
    assert!(
        !said.contains("/nonexistent"),
        "refused before the config: {said}"
    );
}

#[test]
fn a_held_capability_is_refused() {
    let mut args = NOBODY.to_vec();
    args.extend([
        "--inh-caps=+net_bind_service",
        "--ambient-caps=+net_bind_service",
    ]);
    let Some((code, said)) = serve_as(&args) else {
        return;
    };
    assert_eq!(code, 1, "{said}");
    assert!(
        said.contains("brokerd holds capabilities it does not need (CAP_NET_BIND_SERVICE)"),
        "{said}"
    );
}

#[test]
fn an_unprivileged_user_goes_on_to_its_config() {
    let mut args = NOBODY.to_vec();
    args.push("--inh-caps=-all");
    let Some((code, said)) = serve_as(&args) else {
        return;
    };
    assert_eq!(code, 1, "{said}");
    assert!(!said.contains("does not serve as root"), "{said}");
    assert!(!said.contains("capabilities it does not need"), "{said}");
    assert!(said.contains("/nonexistent/brokerd.toml"), "{said}");
}
