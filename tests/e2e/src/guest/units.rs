//! The socket and service units as the guest installs them (dist/systemd/, or stand-ins when
//! run.sh found none there), and what the checks read from them: where brokerd and its config
//! live, the socket's path and the group that may connect.

use std::path::{Path, PathBuf};

/// What the checks take from the units.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Units {
    /// The unit files' directory.
    pub dir: PathBuf,
    pub socket_unit: String,
    pub service_unit: String,
    /// ExecStart= without its prefix characters (`-@:+!`).
    pub exec_start: String,
    pub brokerd: Option<String>,
    pub config: Option<String>,
    pub socket: Option<String>,
    pub socket_group: Option<String>,
}

/// The first value of `key=` on a line of its own in a unit file.
pub fn value<'a>(unit: &'a str, key: &str) -> Option<&'a str> {
    unit.lines()
        .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
}

/// brokerd's path on an ExecStart= line: the last space-separated word that is an absolute
/// path ending in `/brokerd` with no quote in it (it may follow a wrapping `sh -c '...'`).
pub fn brokerd_path(exec_start: &str) -> Option<String> {
    exec_start
        .split(' ')
        .rfind(|w| {
            w.starts_with('/')
                && w[1..].ends_with("/brokerd")
                && !w.contains('\'')
                && !w.contains('"')
        })
        .map(str::to_string)
}

/// The word after the last `--config` on an ExecStart= line, `%E` read as `/etc`.
pub fn config_path(exec_start: &str) -> Option<String> {
    let words: Vec<&str> = exec_start.split_whitespace().collect();
    words
        .windows(2)
        .rfind(|w| w[0] == "--config")
        .map(|w| w[1].replace("%E", "/etc"))
}

impl Units {
    /// The first `.socket` of `dir` (by name) and the service it names (`Service=`, else the
    /// socket's own name), read from their copies in `installed`.
    pub fn read(dir: &Path, installed: &Path) -> Result<Units, String> {
        let socket_unit = socket_units(dir)
            .into_iter()
            .next()
            .ok_or_else(|| format!("no .socket unit in {}", dir.display()))?;
        let read = |name: &str| {
            let p = installed.join(name);
            std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))
        };
        let socket_text = read(&socket_unit)?;
        let service_unit = value(&socket_text, "Service")
            .map(str::to_string)
            .unwrap_or_else(|| format!("{}.service", socket_unit.trim_end_matches(".socket")));
        let service_text = read(&service_unit)?;
        let exec_start = value(&service_text, "ExecStart")
            .map(|v| v.trim_start_matches(['-', '@', ':', '+', '!']).to_string())
            .unwrap_or_default();
        Ok(Units {
            dir: dir.to_path_buf(),
            brokerd: brokerd_path(&exec_start),
            config: config_path(&exec_start),
            socket: value(&socket_text, "ListenStream").map(str::to_string),
            socket_group: value(&socket_text, "SocketGroup").map(str::to_string),
            socket_unit,
            service_unit,
            exec_start,
        })
    }

    /// The line of evidence under the units.
    pub fn describe(&self) -> String {
        let group = self
            .socket_group
            .as_deref()
            .map(|g| format!(", group {g}"))
            .unwrap_or_default();
        format!(
            "units {} {}: ExecStart={}; socket {}{group}",
            self.socket_unit,
            self.service_unit,
            self.exec_start,
            self.socket.as_deref().unwrap_or("")
        )
    }
}

/// The `.socket` files of `dir`, sorted by name.
pub fn socket_units(dir: &Path) -> Vec<String> {
    units_ending(dir, ".socket")
}

/// The names in `dir` ending in `suffix`, sorted.
pub fn units_ending(dir: &Path, suffix: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.ends_with(suffix))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Stand-ins with the settings docs/design.md#deployment names, for a run whose dist/systemd/
/// had no units: the rest can still be checked (and the run says so, never counted as a pass).
pub fn write_standins(dir: &Path, svc_uid: u32, svc_home: &str) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let socket = "[Unit]
Description=boxmaker broker socket (guest stand-in)
[Socket]
ListenStream=/run/boxmaker/broker.sock
SocketUser=boxmaker
SocketGroup=boxmaker-clients
SocketMode=0660
DirectoryMode=0755
[Install]
WantedBy=sockets.target
";
    let service = format!(
        "[Unit]
Description=boxmaker broker (guest stand-in)
Requires=boxmaker.socket user@{svc_uid}.service
After=boxmaker.socket user@{svc_uid}.service
[Service]
Type=notify
NotifyAccess=main
User=boxmaker
Group=boxmaker
Environment=XDG_RUNTIME_DIR=/run/user/{svc_uid} DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/{svc_uid}/bus
WorkingDirectory={svc_home}
ExecStart=/usr/local/bin/brokerd --config /etc/boxmaker/brokerd.toml
TimeoutStartSec=300
TimeoutStopSec=120
"
    );
    for (name, text) in [("boxmaker.socket", socket), ("boxmaker.service", &service)] {
        let p = dir.join(name);
        std::fs::write(&p, text).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// dist/systemd/boxmaker.service's ExecStart=, as the generator writes it.
    const DIST_EXEC: &str = r#"/bin/sh -c 'uid=$$(id -u); export XDG_RUNTIME_DIR=/run/user/$$uid DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/$$uid/bus; exec "$$0" "$$@"' /usr/local/bin/brokerd --config /etc/boxmaker/brokerd.toml"#;

    #[test]
    fn brokerd_and_its_config_are_read_past_a_wrapping_shell() {
        assert_eq!(
            brokerd_path(DIST_EXEC).as_deref(),
            Some("/usr/local/bin/brokerd")
        );
        assert_eq!(
            config_path(DIST_EXEC).as_deref(),
            Some("/etc/boxmaker/brokerd.toml")
        );
        assert_eq!(
            config_path("/opt/bin/brokerd --config %E/boxmaker/b.toml").as_deref(),
            Some("/etc/boxmaker/b.toml")
        );
    }

    #[test]
    fn what_is_not_brokerd_or_has_no_config_is_not_taken() {
        assert_eq!(brokerd_path("/usr/bin/brokerd-old --config x"), None);
        assert_eq!(brokerd_path("'/usr/bin/brokerd'"), None);
        assert_eq!(brokerd_path("/brokerd"), None);
        assert_eq!(config_path("/usr/bin/brokerd --config"), None);
        assert_eq!(config_path("/usr/bin/brokerd"), None);
    }

    #[test]
    fn a_key_is_read_only_at_the_start_of_a_line_and_the_first_wins() {
        let unit = "[Socket]\n# ListenStream=/nope\nListenStream=/run/a.sock\nListenStream=/run/b.sock\nServiceX=no\n";
        assert_eq!(value(unit, "ListenStream"), Some("/run/a.sock"));
        assert_eq!(value(unit, "Service"), None);
    }

    #[test]
    fn the_repository_units_and_the_standins_read_alike() {
        let dist = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../dist/systemd");
        if !dist.is_dir() {
            // The package's check phase builds from the crates alone (nixos/pkgs/boxmaker.nix).
            eprintln!("SKIPPED: {} is not in this source tree", dist.display());
            return;
        }
        let u = Units::read(&dist, &dist).unwrap();
        assert_eq!(u.socket_unit, "boxmaker.socket");
        assert_eq!(u.service_unit, "boxmaker.service");
        assert_eq!(u.brokerd.as_deref(), Some("/usr/local/bin/brokerd"));
        assert_eq!(u.config.as_deref(), Some("/etc/boxmaker/brokerd.toml"));
        assert_eq!(u.socket.as_deref(), Some("/run/boxmaker/broker.sock"));
        assert_eq!(u.socket_group.as_deref(), Some("boxmaker-clients"));

        let dir = std::env::temp_dir().join(format!("boxmaker-e2e-units-{}", std::process::id()));
        write_standins(&dir, 990, "/var/lib/boxmaker").unwrap();
        let s = Units::read(&dir, &dir).unwrap();
        assert_eq!(
            (s.brokerd, s.config, s.socket),
            (u.brokerd, u.config, u.socket)
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
