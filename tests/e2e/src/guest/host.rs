//! The guest host as the checks look at it: systemd's view of a unit, the journal (read as
//! JSON), the kernel's log, the service user's processes, containers and egress directories,
//! and a delegated cgroup's sandbox groups. Programs are spawned; what they print is parsed
//! here.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::system::{self, User};

/// How long one command run through `run` or `merged` may take in the guest (TCG is slow): one
/// that hangs is killed there, with its process group, and its check fails saying so.
pub const COMMAND_LIMIT: Duration = Duration::from_secs(600);

/// What a command printed, the two streams apart.
#[derive(Debug, Default)]
pub struct Out {
    /// The exit code; -1 when killed by a signal, killed at [`COMMAND_LIMIT`] or not started.
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    pub fn ok(&self) -> bool {
        self.code == 0
    }
}

/// Runs `c` to its end within [`COMMAND_LIMIT`] (standard input empty), with standard output
/// and error of its own, read apart. A program that cannot start or does not end in time is
/// exit -1 with why in `stderr`. A caller that needs the streams elsewhere (a file, as a long
/// suite writes) uses [`system::status_within`] with a limit of its own.
pub fn run(c: Command) -> Out {
    match system::output_apart(c, COMMAND_LIMIT) {
        Ok((code, stdout, stderr)) => Out {
            code,
            stdout,
            stderr,
        },
        Err(why) => Out {
            code: -1,
            stdout: String::new(),
            stderr: why,
        },
    }
}

pub fn cmd<I, S>(program: &str, args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let mut c = Command::new(program);
    c.args(args);
    c
}

/// Runs `c` with its two streams together, as a shell's `2>&1` has them: (exit code, text).
pub fn merged(c: Command) -> (i32, String) {
    system::output(c, COMMAND_LIMIT).unwrap_or_else(|e| (-1, e))
}

/// `systemctl ARGS...`; whether it exited 0.
pub fn systemctl(args: &[&str]) -> bool {
    run(cmd("systemctl", args)).ok()
}

/// One property of a unit, as `systemctl show -p NAME --value` prints it.
pub fn unit_property(unit: &str, name: &str) -> String {
    run(cmd("systemctl", ["show", "-p", name, "--value", unit]))
        .stdout
        .trim_end()
        .to_string()
}

/// The last journal entry of `unit` with every FIELD=VALUE of `matches`, as JSON.
pub fn journal_last(unit: &str, matches: &[&str]) -> Option<Value> {
    let mut c = cmd("journalctl", ["--no-pager", "-o", "json", "-u", unit]);
    c.args(matches);
    last_entry(&run(c).stdout)
}

/// The last line of `journalctl -o json` output that is a JSON object.
pub fn last_entry(json_lines: &str) -> Option<Value> {
    json_lines.lines().rev().find_map(|l| {
        serde_json::from_str::<Value>(l)
            .ok()
            .filter(Value::is_object)
    })
}

/// A journal field as text: a string as it is, an array of bytes (journald's form for a value
/// that is not UTF-8) decoded, and an absent field empty.
pub fn field(entry: &Value, name: &str) -> String {
    match &entry[name] {
        Value::String(s) => s.clone(),
        Value::Array(bytes) => {
            let b: Vec<u8> = bytes
                .iter()
                .filter_map(|v| v.as_u64().and_then(|n| u8::try_from(n).ok()))
                .collect();
            String::from_utf8_lossy(&b).into_owned()
        }
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// The journal's cursor now: entries written later follow it.
pub fn journal_cursor() -> Option<String> {
    let out = run(cmd(
        "journalctl",
        ["-n", "0", "--show-cursor", "--no-pager"],
    ))
    .stdout;
    out.lines()
        .find_map(|l| l.strip_prefix("-- cursor: "))
        .map(str::to_string)
}

/// The messages of `unit` in this boot (after `cursor` when given).
pub fn journal_messages(unit: &str, cursor: Option<&str>) -> Vec<String> {
    let mut c = cmd("journalctl", ["-b", "--no-pager", "-o", "cat", "-u", unit]);
    if let Some(cursor) = cursor {
        c.arg(format!("--after-cursor={cursor}"));
    }
    run(c).stdout.lines().map(str::to_string).collect()
}

/// The last `n` messages of `unit`, for evidence.
pub fn journal_tail(unit: &str, n: usize) -> String {
    tail(&journal_messages(unit, None).join("\n"), n)
}

/// The last `n` lines of `text`.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The kernel's log, one message a line.
pub fn dmesg() -> Vec<String> {
    run(cmd("dmesg", [] as [&str; 0]))
        .stdout
        .lines()
        .map(str::to_string)
        .collect()
}

/// Whether `program` is found in PATH.
pub fn have(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path)
            .any(|d| std::fs::metadata(d.join(program)).is_ok_and(|m| m.is_file()))
    })
}

/// The processes named `comm` (exactly, as the kernel has it) whose effective user is `uid`,
/// zombies included, by pid.
pub fn pids_named(uid: u32, comm: &str) -> Vec<u32> {
    let mut pids: Vec<u32> = std::fs::read_dir("/proc")
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
                .filter(|pid| {
                    let dir = PathBuf::from(format!("/proc/{pid}"));
                    let name = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
                    name.trim_end() == comm
                        && std::fs::read_to_string(dir.join("status"))
                            .is_ok_and(|s| effective_uid(&s) == Some(uid))
                })
                .collect()
        })
        .unwrap_or_default();
    pids.sort_unstable();
    pids
}

/// The effective uid on the `Uid:` line of `/proc/<pid>/status` (real, effective, saved, fs).
pub fn effective_uid(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|u| u.parse().ok())
}

/// The real uid of a process, from `/proc/<pid>/status`.
pub fn process_uid(pid: &str) -> Option<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|u| u.parse().ok())
}

pub fn join_pids(pids: &[u32]) -> String {
    pids.iter().map(|p| format!("{p} ")).collect()
}

/// The `sandbox-*` groups directly under the cgroup `cg` (as systemd names it, from the root
/// of the cgroup v2 hierarchy).
pub fn sandbox_groups(cg: &str) -> Vec<PathBuf> {
    let dir = PathBuf::from(format!("/sys/fs/cgroup{cg}"));
    std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .filter(|e| e.file_name().to_string_lossy().starts_with("sandbox-"))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// A cgroup file's content without its newline; empty when it cannot be read.
pub fn cgroup_file(group: &Path, name: &str) -> String {
    std::fs::read_to_string(group.join(name))
        .map(|s| s.trim_end().to_string())
        .unwrap_or_default()
}

/// The service user's rootless Podman and its egress directories.
pub struct Service {
    pub user: User,
}

impl Service {
    /// `podman ARGS...` as the service user, both streams together.
    pub fn podman(&self, args: &[&str]) -> (i32, String) {
        let mut c = self.user.command("podman");
        c.args(args);
        merged(c)
    }

    /// What is left labelled `boxmaker`: a `NAME STATUS` line each (or podman's error).
    pub fn leftovers(&self) -> String {
        let (_, out) = self.podman(&[
            "ps",
            "-a",
            "--filter",
            proto::podman::LABEL_FILTER,
            "--format",
            "{{.Names}} {{.Status}}",
        ]);
        out.trim_end().to_string()
    }

    /// The names in `<home>/run/egress/`, space-separated; empty when there are none.
    pub fn egress_left(&self) -> String {
        let dir = self.user.home.join("run/egress");
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names.join(" ")
    }

    /// The name of a running tool container, waited for up to 180 s.
    pub fn wait_for_container(&self) -> Option<String> {
        for _ in 0..180 {
            let (code, out) = self.podman(&[
                "ps",
                "--filter",
                // `label=boxmaker=tool`: the tool container's label as a filter.
                proto::podman::TOOL_LABEL.trim_start_matches('-'),
                "--format",
                "{{.Names}}",
            ]);
            if let Some(name) = out.lines().next().filter(|n| code == 0 && !n.is_empty()) {
                return Some(name.to_string());
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_json_entry_is_read_and_its_fields_as_text() {
        let out = "{\"KIND\":\"path\",\"TOOL\":\"read_file\"}\n{\"KIND\":\"grant\",\"MSG\":[104,105],\"N\":3}\nnot json\n";
        let e = last_entry(out).unwrap();
        assert_eq!(field(&e, "KIND"), "grant");
        assert_eq!(field(&e, "MSG"), "hi");
        assert_eq!(field(&e, "N"), "3");
        assert_eq!(field(&e, "ABSENT"), "");
        assert!(last_entry("-- No entries --\n").is_none());
    }

    #[test]
    fn the_effective_uid_is_the_second_of_the_uid_line() {
        let s = "Name:\tsleep\nUid:\t1000\t990\t990\t990\nGid:\t1\n";
        assert_eq!(effective_uid(s), Some(990));
        assert_eq!(effective_uid("Name:\tx\n"), None);
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail("a\nb\nc", 2), "b\nc");
        assert_eq!(tail("a", 5), "a");
    }

    #[test]
    fn this_process_is_found_by_its_name_and_uid() {
        let comm = std::fs::read_to_string("/proc/self/comm").unwrap();
        let uid = nix::unistd::geteuid().as_raw();
        assert!(pids_named(uid, comm.trim_end()).contains(&std::process::id()));
        assert!(pids_named(uid, "no-such-process-name").is_empty());
    }
}
