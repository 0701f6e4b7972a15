//! The units installed from the payload (dist/systemd/, or stand-ins), brokerd and boxctl where
//! the units expect them, the guest's config, `check-config` and `doctor`; then socket
//! activation: the socket listens with the service inactive, the first connection starts it
//! as the service user, and it reaches READY with its preflight passed and limits enforced.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Instant;

use super::broker::{show_status, Broker};
use super::host;
use super::podman::is_socket;
use super::units::{self, Units};
use super::{Finish, Guest, Step};
use super::{GRACE_S, GRANT, MEMORY, NOTES_DIR, PIDS, SHELL_MS, TIMEOUT_MS};

/// Where the stand-in units go when the payload has none.
const STANDIN_UNITS: &str = "/run/boxmaker-standin-units";
const SYSTEM_UNITS: &str = "/etc/systemd/system";
/// doctor's line for the check of nested user namespaces, when it passed.
const DOCTOR_USERNS_OK: &str = "ok    nested user namespaces: ";

impl Guest {
    pub(super) fn service(&mut self) -> Step {
        self.install_units()?;
        self.write_config()?;
        self.doctor();
        self.socket_activation();
        Ok(())
    }

    fn install_units(&mut self) -> Step {
        let mut dir = self.payload("units");
        if units::socket_units(&dir).is_empty() {
            self.t.skip(
                "units-from-dist",
                "dist/systemd/ has no units yet; using the guest's stand-in units",
            );
            dir = Path::new(STANDIN_UNITS).to_path_buf();
            let home = self.svc.user.home.display().to_string();
            if let Err(e) = units::write_standins(&dir, self.svc.user.uid, &home) {
                self.t.fail("units", &e);
                return Err(Finish);
            }
        }
        let system = Path::new(SYSTEM_UNITS);
        let mut names = units::units_ending(&dir, ".socket");
        names.extend(units::units_ending(&dir, ".service"));
        for n in &names {
            if let Err(e) = std::fs::copy(dir.join(n), system.join(n)) {
                self.t.fail("units", &format!("cannot install {n}: {e}"));
                return Err(Finish);
            }
        }
        let u = match Units::read(&dir, system) {
            Ok(u) => u,
            Err(e) => {
                self.t.fail("units", &e);
                return Err(Finish);
            }
        };
        self.t.note(&u.describe());
        self.units_dir = dir;
        self.socket_unit = u.socket_unit.clone();
        self.service_unit = u.service_unit.clone();
        let (Some(brokerd), Some(config), Some(socket)) = (u.brokerd, u.config, u.socket) else {
            self.t.fail(
                "units",
                "cannot read brokerd's path, --config or ListenStream from the units",
            );
            return Err(Finish);
        };
        let bin = Path::new(&brokerd)
            .parent()
            .unwrap_or(Path::new("/"))
            .to_path_buf();
        let boxctl = bin.join("boxctl");
        for (from, to) in [
            ("bin/brokerd", Path::new(&brokerd)),
            ("bin/boxctl", &boxctl),
        ] {
            if let Err(e) = install(&self.payload(from), to, 0o755) {
                self.t.fail("units", &e);
                return Err(Finish);
            }
        }
        self.brokerd = brokerd;
        self.boxctl = boxctl.display().to_string();
        self.config = config;
        if let Some(group) = &u.socket_group {
            if !host::run(host::cmd("getent", ["group", group])).ok() {
                host::run(host::cmd("groupadd", ["--system", group]));
            }
            host::run(host::cmd(
                "usermod",
                ["-a", "-G", group, super::CLIENT_USER],
            ));
        }
        match Broker::new(Path::new(&socket), GRANT, self.client_user.clone()) {
            Ok(b) => self.broker = Some(b),
            Err(e) => {
                self.t.fail("units", &e);
                return Err(Finish);
            }
        }
        Ok(())
    }

    fn write_config(&mut self) -> Step {
        let user = &self.svc.user;
        let made = std::fs::create_dir_all(NOTES_DIR)
            .and_then(|()| std::fs::set_permissions(NOTES_DIR, PermissionsExt::from_mode(0o750)))
            .map_err(|e| format!("{NOTES_DIR}: {e}"))
            .and_then(|()| user.chown(Path::new(NOTES_DIR)));
        let config = Path::new(&self.config);
        let text = config_text(&self.image_id, &user.home.display().to_string());
        let written = made
            .and_then(|()| {
                std::fs::create_dir_all(config.parent().unwrap_or(Path::new("/")))
                    .and_then(|()| std::fs::write(config, text))
                    .map_err(|e| format!("{}: {e}", config.display()))
            })
            .and_then(|()| {
                std::os::unix::fs::chown(config, Some(0), Some(user.gid))
                    .and_then(|()| {
                        std::fs::set_permissions(config, PermissionsExt::from_mode(0o640))
                    })
                    .map_err(|e| format!("{}: {e}", config.display()))
            });
        let (code, msg) = match written {
            Ok(()) => self.check_config(),
            Err(e) => (1, e),
        };
        let msg = msg.trim_end().to_string();
        if self
            .t
            .check("config", code == 0, || msg.clone(), || msg.clone())
        {
            Ok(())
        } else {
            Err(Finish)
        }
    }

    /// `brokerd check-config` of the config, as the service user.
    pub(super) fn check_config(&self) -> (i32, String) {
        let mut c = self.svc.user.command(&self.brokerd);
        c.args(["check-config", &self.config]);
        host::merged(c)
    }

    fn doctor(&mut self) {
        let mut c = self.svc.user.command(&self.boxctl);
        c.args(["--config", &self.config, "doctor"]);
        let (code, msg) = host::merged(c);
        self.t.check(
            "doctor",
            code == 0,
            || "every check of boxctl doctor passed".into(),
            || "boxctl doctor found problems".into(),
        );
        self.t.note(msg.trim_end());
        let denied = msg
            .lines()
            .find(|l| l.starts_with(&format!("{DOCTOR_USERNS_OK}denied")));
        match denied {
            Some(l) => self
                .t
                .ok("doctor-nested-userns", &l[DOCTOR_USERNS_OK.len()..]),
            None => {
                let said = msg
                    .lines()
                    .find(|l| l.contains("nested user namespaces"))
                    .unwrap_or("");
                self.t
                    .fail("doctor-nested-userns", &format!("doctor said: {said}"));
            }
        }
    }

    fn socket_activation(&mut self) {
        host::systemctl(&["daemon-reload"]);
        host::systemctl(&["start", &self.socket_unit]);
        let before = self.state("ActiveState");
        let broker = match self.broker().cloned() {
            Ok(broker) => broker,
            Err(e) => return self.t.fail("socket-activation", &e),
        };
        let socket_active = host::systemctl(&["is-active", "-q", &self.socket_unit]);
        let exists = is_socket(&broker.socket);
        let sock = broker.socket.display().to_string();
        self.t.check(
            "socket-listening",
            socket_active && exists && before == "inactive",
            || format!("{sock}, {} {before}", self.service_unit),
            || {
                let active = host::run(host::cmd("systemctl", ["is-active", &self.socket_unit]));
                format!(
                    "socket {}, {sock} {}, service {before}",
                    active.stdout.trim_end(),
                    if exists { "exists" } else { "missing" }
                )
            },
        );

        let started = Instant::now();
        let status = broker.status();
        let t_ready = started.elapsed().as_secs();
        let main_pid = self.state("MainPID");
        let main_uid = host::process_uid(&main_pid);
        let main_user = match main_uid {
            Some(u) if u == self.svc.user.uid => self.svc.user.name.clone(),
            Some(u) => u.to_string(),
            None => String::new(),
        };
        let active = self.state("ActiveState");
        self.t.check(
            "socket-activation",
            before == "inactive" && active == "active" && main_user == self.svc.user.name,
            || {
                format!(
                    "the first connection started {} as {main_user} (pid {main_pid}); answered in {t_ready}s",
                    self.service_unit
                )
            },
            || format!("service was {before}, is {active}, main pid {main_pid} runs as '{main_user}'"),
        );
        self.t.out(&format!(
            "timing activation {t_ready}s (first connection to the status answer, preflight included)"
        ));
        let (active, sub, text) = (
            self.state("ActiveState"),
            self.state("SubState"),
            self.state("StatusText"),
        );
        let ready = matches!(&status, Ok(s) if s.preflight.ok == Some(true) && s.enforce_limits);
        self.t.check(
            "ready",
            active == "active" && sub == "running" && ready,
            || {
                let detail = status.as_ref().map(|s| s.preflight.detail.clone());
                format!(
                    "active/running, status text '{text}'; preflight: {}",
                    detail.unwrap_or_default()
                )
            },
            || {
                format!(
                    "{active}/{sub}, status text '{text}', status answer {}",
                    show_status(&status)
                )
            },
        );
    }
}

/// `install -D -m MODE FROM TO`.
fn install(from: &Path, to: &Path, mode: u32) -> Result<(), String> {
    let err = |e: std::io::Error| format!("install {} {}: {e}", from.display(), to.display());
    std::fs::create_dir_all(to.parent().unwrap_or(Path::new("/"))).map_err(err)?;
    // A new file, not the old one written over: a running brokerd keeps its text.
    let _ = std::fs::remove_file(to);
    std::fs::copy(from, to).map_err(err)?;
    std::fs::set_permissions(to, PermissionsExt::from_mode(mode)).map_err(err)
}

/// The guest's config: limits enforced and small, time limits generous for TCG, one grant on
/// the notes directory.
fn config_text(image: &str, home: &str) -> String {
    format!(
        r#"# The guest's config (boxmaker-e2e guest, tests/e2e/src/guest/): limits enforced and
# small, time limits generous for TCG, one grant on {NOTES_DIR}.
[broker]
clients = ["{client}"]
audit_log = "{home}/audit.jsonl"
timeout_ms = {TIMEOUT_MS}
shutdown_grace_s = {GRACE_S}

[runner]
backend = "podman"
podman = "podman"
image = "{image}"
egress_network = "slirp4netns"
memory = "{MEMORY}"
pids = {PIDS}
read_file_ms = 120000
write_file_ms = 120000
shell_ms = {SHELL_MS}
http_fetch_ms = 120000
enforce_limits = true
home = "{home}"

[grants.{GRANT}]
mode = "auto"
tools = ["read_file", "write_file", "shell"]
paths = [ {{ path = "{NOTES_DIR}", write = true }} ]
"#,
        client = super::CLIENT_USER,
    )
}

/// The config for the bwrap variant: the same, with `backend = "bwrap"` over `tools_root` and
/// `cgroup = "delegated"`, Podman's keys gone.
pub(super) fn bwrap_config(podman_config: &str, tools_root: &str) -> String {
    let mut out: String = podman_config
        .lines()
        .filter(|l| {
            !l.starts_with("podman = ")
                && !l.starts_with("image = ")
                && !l.starts_with("egress_network = ")
        })
        .map(|l| {
            if l == r#"backend = "podman""# {
                "backend = \"bwrap\"\n".to_string()
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    out.push_str(&format!(
        "\n[bwrap]\ntools_root = \"{tools_root}\"\ncgroup = \"delegated\"\n"
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configs_load_as_brokerd_loads_them() {
        let dir = std::env::temp_dir().join(format!("boxmaker-e2e-gconf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let podman = config_text(&format!("sha256:{}", "ab".repeat(32)), "/var/lib/boxmaker");
        let bwrap = bwrap_config(&podman, "/var/lib/boxmaker-guest/tools-root");
        // The grant's directory as this host has one.
        let notes = dir.join("notes");
        std::fs::create_dir_all(&notes).unwrap();
        for (name, text) in [("podman.toml", &podman), ("bwrap.toml", &bwrap)] {
            let p = dir.join(name);
            std::fs::write(&p, text.replace(NOTES_DIR, &notes.display().to_string())).unwrap();
            let c = boxmaker_config::load_placeholder_dirs(&p)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let r = c.runner.expect("[runner]");
            assert!(r.enforce_limits);
            assert_eq!(r.pids, PIDS);
        }
        assert!(bwrap.contains("backend = \"bwrap\"\n") && !bwrap.contains("image = "));
        assert!(bwrap.ends_with("cgroup = \"delegated\"\n"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
