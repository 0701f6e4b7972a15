//! The service user, its Podman and the brokerd this suite runs as that user.

use std::fs::File;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use nix::unistd::Pid;

/// The service user's PATH, as scripts/as-boxmaker gives it: the usual directories, with
/// NixOS's setuid wrappers (newuidmap, newgidmap) first and its system profile last; neither
/// exists on Debian.
const USER_PATH: &str = "/run/wrappers/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/run/current-system/sw/bin";

/// The service user, as the passwd database has it.
#[derive(Debug, Clone)]
pub struct User {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
}

impl User {
    pub fn lookup(name: &str) -> Result<User, String> {
        let pw = nix::unistd::User::from_name(name)
            .map_err(|e| format!("cannot look up the user {name:?}: {e}"))?
            .ok_or_else(|| format!("no user {name}; run scripts/setup.sh user"))?;
        Ok(User {
            name: name.to_string(),
            uid: pw.uid.as_raw(),
            gid: pw.gid.as_raw(),
            home: pw.dir,
        })
    }

    pub fn runtime_dir(&self) -> PathBuf {
        PathBuf::from(format!("/run/user/{}", self.uid))
    }

    /// A command that runs as this user with what rootless Podman needs, and nothing else
    /// from this process's environment.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new(program);
        c.env_clear()
            .env("HOME", &self.home)
            .env("USER", &self.name)
            .env("LOGNAME", &self.name)
            .env("XDG_RUNTIME_DIR", self.runtime_dir())
            .env("PATH", USER_PATH)
            .current_dir(&self.home)
            .uid(self.uid)
            .gid(self.gid);
        // The user's systemd instance, where there is one (a lingering user on NixOS): rootless
        // Podman places containers in cgroups through it, which enforced limits need.
        let bus = self.runtime_dir().join("bus");
        if std::fs::symlink_metadata(&bus).is_ok_and(|m| m.file_type().is_socket()) {
            c.env(
                "DBUS_SESSION_BUS_ADDRESS",
                format!("unix:path={}", bus.display()),
            );
        }
        c
    }

    pub fn chown(&self, path: &Path) -> Result<(), String> {
        std::os::unix::fs::chown(path, Some(self.uid), Some(self.gid))
            .map_err(|e| format!("chown {}: {e}", path.display()))
    }

    /// `chown` of `path` and everything below it (no link followed).
    pub fn chown_tree(&self, path: &Path) -> Result<(), String> {
        std::os::unix::fs::lchown(path, Some(self.uid), Some(self.gid))
            .map_err(|e| format!("chown {}: {e}", path.display()))?;
        if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
            let entries =
                std::fs::read_dir(path).map_err(|e| format!("{}: {e}", path.display()))?;
            for e in entries.flatten() {
                self.chown_tree(&e.path())?;
            }
        }
        Ok(())
    }
}

/// Runs a command to its end within `limit`: (exit code, standard output and error).
pub fn output(c: Command, limit: Duration) -> Result<(i32, String), String> {
    let (code, text, _) = captured(c, limit, false)?;
    Ok((code, text))
}

/// Runs `c` to its end within `limit` (standard input empty), its standard output and error
/// apart: (exit code, output, error). One that outlives `limit` is killed with its process
/// group and is an error saying so.
pub fn output_apart(c: Command, limit: Duration) -> Result<(i32, String, String), String> {
    captured(c, limit, true)
}

/// Runs `c` within `limit` with what it prints in files of its own (one for both streams
/// unless `apart`), read once it ends.
fn captured(mut c: Command, limit: Duration, apart: bool) -> Result<(i32, String, String), String> {
    // Files of each call's own, so that threads may run commands side by side.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let path =
        |n: u64| std::env::temp_dir().join(format!("boxmaker-e2e-out-{}-{n}", std::process::id()));
    let out_path = path(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    let err_path = apart.then(|| path(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)));
    let made = |p: &Path| File::create(p).map_err(|e| format!("{}: {e}", p.display()));
    let file = made(&out_path)?;
    let err = match &err_path {
        Some(p) => made(p)?,
        None => file.try_clone().map_err(|e| e.to_string())?,
    };
    let spawned = c
        .stdin(Stdio::null())
        .stdout(file)
        .stderr(err)
        .process_group(0)
        .spawn();
    let status = spawned.map(|mut child| {
        let status = wait(&mut child, limit);
        if status.is_none() {
            kill_group(&child);
            let _ = child.wait();
        }
        status
    });
    let mut read = |p: &Path| {
        let text = std::fs::read_to_string(p).unwrap_or_default();
        let _ = std::fs::remove_file(p);
        text
    };
    let text = read(&out_path);
    let err_text = err_path.as_deref().map(&mut read).unwrap_or_default();
    match status {
        Ok(Some(s)) => Ok((s.code().unwrap_or(-1), text, err_text)),
        Ok(None) => Err(format!(
            "{:?} did not finish within {limit:?}: {text}{err_text}",
            c.get_program()
        )),
        Err(e) => Err(format!("cannot start {:?}: {e}", c.get_program())),
    }
}

/// Runs `c` with the standard output and error its caller set (standard input empty) within
/// `limit`: its exit status, or an error when it could not start or was killed at `limit`
/// with its process group.
pub fn status_within(mut c: Command, limit: Duration) -> Result<i32, String> {
    let mut child = c
        .stdin(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot start {:?}: {e}", c.get_program()))?;
    match wait(&mut child, limit) {
        Some(s) => Ok(s.code().unwrap_or(-1)),
        None => {
            kill_group(&child);
            let _ = child.wait();
            Err(format!(
                "{:?} did not finish within {limit:?}",
                c.get_program()
            ))
        }
    }
}

pub fn wait(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let until = Instant::now() + limit;
    loop {
        if let Ok(Some(s)) = child.try_wait() {
            return Some(s);
        }
        if Instant::now() >= until {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn signal(child: &Child, sig: libc::c_int) {
    if let (Ok(pid), Ok(sig)) = (i32::try_from(child.id()), Signal::try_from(sig)) {
        // A child this process has not reaped yet.
        let _ = nix::sys::signal::kill(Pid::from_raw(pid), sig);
    }
}

fn kill_group(child: &Child) {
    if let Ok(pid) = i32::try_from(child.id()) {
        // The child was started in its own process group (process_group(0)) and is not reaped
        // yet, so the group id is still its.
        let _ = nix::sys::signal::killpg(Pid::from_raw(pid), Signal::SIGKILL);
    }
}

/// A live process of the service user that lives in a sandbox: `bwrap` itself, or anything in
/// a PID namespace other than this process's (the sandbox's toolkit, shell, curl, ...).
/// Zombies are dead and not counted: a sandbox's inner bwrap (its PID 1) is orphaned when the
/// outer one exits and is reaped by brokerd (its subreaper) or, for the bench's bare bwrap, by
/// this host's PID 1, which here takes a second or two.
#[derive(Debug, Clone)]
pub struct SandboxProcess {
    pub pid: u32,
    /// `/proc/<pid>/cmdline`, arguments joined by spaces.
    pub cmdline: String,
}

impl SandboxProcess {
    /// Whether it is bwrap itself: as brokerd started it (`bwrap`), or as systemd-run found
    /// it in PATH for a scope (`/usr/bin/bwrap`).
    pub fn is_bwrap(&self) -> bool {
        let program = self.cmdline.split(' ').next().unwrap_or("");
        program.rsplit('/').next() == Some("bwrap")
    }
}

impl std::fmt::Display for SandboxProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut c = self.cmdline.clone();
        if c.len() > 160 {
            let cut = c.char_indices().take(160).last().map_or(0, |(i, _)| i);
            c.truncate(cut);
            c.push('…');
        }
        write!(f, "process {} ({c})", self.pid)
    }
}

/// The service user's sandbox processes, read from /proc.
pub fn sandbox_processes(user: &User) -> Vec<SandboxProcess> {
    let own_ns = std::fs::read_link("/proc/self/ns/pid").ok();
    user_processes(user, |comm, ns| {
        comm == "bwrap" || (ns.is_some() && ns != own_ns.as_deref())
    })
}

/// The service user's live `podman` processes (a `podman run` brokerd started, for one).
pub fn podman_processes(user: &User) -> Vec<SandboxProcess> {
    user_processes(user, |comm, _| comm == "podman")
}

/// The service user's live processes that `keep` accepts by name (`comm`) and PID namespace.
fn user_processes(user: &User, keep: impl Fn(&str, Option<&Path>) -> bool) -> Vec<SandboxProcess> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let dir = e.path();
        let Ok(status) = std::fs::read_to_string(dir.join("status")) else {
            continue;
        };
        if uid_and_state(&status) != Some((user.uid, true)) {
            continue;
        }
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        let ns = std::fs::read_link(dir.join("ns/pid")).ok();
        if !keep(comm.trim_end(), ns.as_deref()) {
            continue;
        }
        let cmdline = std::fs::read(dir.join("cmdline"))
            .map(|b| {
                b.split(|&c| c == 0)
                    .filter(|a| !a.is_empty())
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default();
        found.push(SandboxProcess { pid, cmdline });
    }
    found
}

/// SIGKILL to one process by its id (the clean-up after a failed scenario, for sandboxes of the
/// brokerd this suite started).
pub fn kill_pid(pid: u32) {
    if let Ok(pid) = i32::try_from(pid) {
        // A pid just read from /proc: at worst it names a process that has exited (ESRCH).
        let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
}

/// (real uid, alive) from `/proc/<pid>/status`; zombies and dying processes are not alive.
fn uid_and_state(status: &str) -> Option<(u32, bool)> {
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|u| u.parse::<u32>().ok())?;
    let state = status
        .lines()
        .find_map(|l| l.strip_prefix("State:"))
        .map(str::trim_start)
        .unwrap_or("");
    Some((uid, !state.starts_with('Z') && !state.starts_with('X')))
}

/// How many zombies of the service user there are: a bwrap sandbox's inner bwrap, orphaned
/// when the outer one exits, stays one until it is reaped (by brokerd, or for a bare bwrap
/// by this host's PID 1), and counts against the user's RLIMIT_NPROC until then.
pub fn zombies(user: &User) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("status")).ok())
        .filter(|s| uid_and_state(s) == Some((user.uid, false)))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("/bin/sh");
        c.args(["-c", script]);
        c
    }

    #[test]
    fn the_two_streams_are_read_apart_or_together() {
        let script = "echo out; echo err >&2; exit 3";
        assert_eq!(
            output_apart(sh(script), Duration::from_secs(20)),
            Ok((3, "out\n".to_string(), "err\n".to_string()))
        );
        assert_eq!(
            output(sh(script), Duration::from_secs(20)),
            Ok((3, "out\nerr\n".to_string()))
        );
    }

    /// A command past its limit is killed with what it started, and says what it printed.
    #[test]
    fn a_command_past_its_limit_is_killed_with_its_group() {
        let dir = std::env::temp_dir().join(format!("boxmaker-e2e-limit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let late = dir.join("late");
        let script = format!(
            "echo started; (sleep 2; touch {}) & sleep 30",
            late.display()
        );
        let t = Instant::now();
        let got = output_apart(sh(&script), Duration::from_millis(500));
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        let why = got.expect_err("ended in time");
        assert!(
            why.contains("did not finish") && why.contains("started"),
            "{why}"
        );
        // The background child went with its group.
        std::thread::sleep(Duration::from_secs(3));
        assert!(!late.exists(), "a child of the killed command ran on");
        // The streams a caller set stay its own.
        let file = dir.join("out.txt");
        let mut c = sh("echo to-file; echo err-to-file >&2");
        let f = File::create(&file).expect("file");
        c.stdout(f.try_clone().expect("clone")).stderr(f);
        assert_eq!(status_within(c, Duration::from_secs(20)), Ok(0));
        assert_eq!(
            std::fs::read_to_string(&file).expect("read"),
            "to-file\nerr-to-file\n"
        );
        assert!(status_within(sh("sleep 30"), Duration::from_millis(300))
            .expect_err("ended in time")
            .contains("did not finish"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
