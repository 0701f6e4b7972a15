//! `CgroupLimits`, the second of two resource contracts (docs/design.md#limits): memory,
//! processes and CPU for a sandbox as a whole, which rlimits cannot bound.
//!
//! Two mechanisms, chosen by `[bwrap] cgroup`:
//! - `delegated`: a cgroup v2 child group `<own>/sandbox-<name>` of the subtree systemd
//!   delegated to brokerd (`Delegate=yes`). The limits are written before anything runs in it,
//!   and the sandbox's first process moves itself in (`cgroup.procs`) between fork and exec,
//!   so no instruction of bwrap runs outside its limits.
//! - `systemd-scope`: the argument list is wrapped in `systemd-run --user --scope` with
//!   `MemoryMax`, `MemorySwapMax`, `TasksMax` and `CPUQuota`: systemd does the rest.
//!
//! Whether a mechanism is there is decided once ([`Mechanism::probe`]); where it is not and
//! `enforce_limits` is on, calls answer `unavailable`: there is no path from "mechanism
//! unavailable" to "run it anyway" (docs/design.md#limits).
//!
//! With `delegated`, brokerd first moves itself into `<own>/brokerd`, since a cgroup v2 group
//! that holds processes cannot enable controllers for its children.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use boxmaker_config::CgroupMode;

/// Where cgroup v2 is mounted on a unified host.
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";
/// The leaf brokerd moves itself into when its delegated group holds its own process: cgroup
/// v2 lets a group with processes have no controlled children ("no internal processes").
pub const SUPERVISOR_LEAF: &str = "brokerd";
/// The prefix of every sandbox's group, which the sweep looks for.
pub const SANDBOX_PREFIX: &str = "sandbox-";
/// The slice of the transient scopes in the service user's manager.
pub const SCOPE_SLICE: &str = "boxmaker.slice";
/// The controllers the limits need.
const NEEDED: [&str; 2] = ["memory", "pids"];
/// How long an emptied group may take to report itself unpopulated.
const EMPTY_CONFIRM: Duration = Duration::from_secs(2);
/// The longest a wait for a group to empty goes without reading `cgroup.events` again.
const RELOOK: Duration = Duration::from_millis(50);

/// One sandbox's cgroup limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CgroupLimits {
    /// memory.max / MemoryMax, bytes.
    pub memory_max: u64,
    /// pids.max / TasksMax.
    pub pids_max: u32,
    /// cpu.max / CPUQuota as (quota, period) in microseconds.
    pub cpu_max: (u64, u64),
}

impl CgroupLimits {
    /// One CPU: there is no config key for CPU; a tool gets a core, not the host.
    pub fn new(memory_max: u64, pids_max: u32) -> CgroupLimits {
        CgroupLimits {
            memory_max,
            pids_max,
            cpu_max: (100_000, 100_000),
        }
    }
}

/// Why cgroup limits cannot be had here; each is a log line (with the runbook pointer).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CgroupUnavailable {
    #[error("/proc/self/cgroup names no cgroup v2 group (a cgroup v1 or hybrid host)")]
    NotUnified,
    #[error("{0} is not a cgroup v2 directory brokerd can write (no delegation: Delegate=yes)")]
    NotDelegated(PathBuf),
    #[error("the delegated group {path} lacks the {controller} controller")]
    NoController { path: PathBuf, controller: String },
    #[error("could not prepare the delegated group {path}: {why}")]
    Prepare { path: PathBuf, why: String },
    #[error("systemd-run was not found in PATH")]
    NoSystemdRun,
}

/// How the limits of a sandbox are applied, once probed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mechanism {
    /// Child groups of this delegated directory (with cgroup.subtree_control set).
    Delegated { root: PathBuf },
    /// `systemd-run --user --scope` from this program.
    SystemdScope { systemd_run: PathBuf, uid: u32 },
}

impl Mechanism {
    /// Finds the configured mechanism, preparing the delegated subtree if needed.
    pub fn probe(mode: CgroupMode) -> Result<Mechanism, CgroupUnavailable> {
        match mode {
            CgroupMode::Delegated => {
                let text = std::fs::read_to_string("/proc/self/cgroup")
                    .map_err(|_| CgroupUnavailable::NotUnified)?;
                let own = own_group(&text).ok_or(CgroupUnavailable::NotUnified)?;
                let root = prepare_delegated(Path::new(CGROUP_ROOT), &own)?;
                Ok(Mechanism::Delegated { root })
            }
            CgroupMode::SystemdScope => {
                let systemd_run =
                    find_in_path("systemd-run").ok_or(CgroupUnavailable::NoSystemdRun)?;
                let uid = nix::unistd::getuid().as_raw();
                Ok(Mechanism::SystemdScope { systemd_run, uid })
            }
        }
    }
}

/// The cgroup v2 path in `/proc/self/cgroup` (the `0::<path>` line). A hybrid host lists it
/// too, as `0::/`, but then `cgroup.controllers` is not where v2 would put it: the caller
/// checks the directory.
pub fn own_group(proc_self_cgroup: &str) -> Option<PathBuf> {
    proc_self_cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .filter(|p| p.starts_with('/'))
        .map(PathBuf::from)
}

/// Makes `<mount>/<own>` ready to hold sandbox groups: the controllers enabled for its
/// children, brokerd itself moved into a leaf first if its group holds it. Returns the group
/// sandboxes are made under. A brokerd restarted in a leaf it made earlier uses the parent.
pub fn prepare_delegated(mount: &Path, own: &Path) -> Result<PathBuf, CgroupUnavailable> {
    let rel = own.strip_prefix("/").unwrap_or(own);
    let mut dir = mount.join(rel);
    if dir.file_name().is_some_and(|n| n == SUPERVISOR_LEAF) {
        if let Some(parent) = dir.parent() {
            dir = parent.to_path_buf();
        }
    }
    let controllers = std::fs::read_to_string(dir.join("cgroup.controllers"))
        .map_err(|_| CgroupUnavailable::NotDelegated(dir.clone()))?;
    for c in NEEDED {
        if !controllers.split_whitespace().any(|x| x == c) {
            return Err(CgroupUnavailable::NoController {
                path: dir.clone(),
                controller: c.into(),
            });
        }
    }
    if !writable(&dir) {
        return Err(CgroupUnavailable::NotDelegated(dir));
    }
    let enabled = std::fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
    let mut want: Vec<&str> = NEEDED.to_vec();
    if controllers.split_whitespace().any(|x| x == "cpu") {
        want.push("cpu");
    }
    let missing: Vec<&str> = want
        .into_iter()
        .filter(|c| !enabled.split_whitespace().any(|x| x == *c))
        .collect();
    if missing.is_empty() {
        return Ok(dir);
    }
    let prepare = |why: String| CgroupUnavailable::Prepare {
        path: dir.clone(),
        why,
    };
    // brokerd's own processes must leave the group before it may control children.
    let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
    if !procs.trim().is_empty() {
        let leaf = dir.join(SUPERVISOR_LEAF);
        match std::fs::create_dir(&leaf) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
                return Err(prepare(format!("mkdir {}: {e}", leaf.display())))
            }
            _ => {}
        }
        for pid in procs.split_whitespace() {
            // Writing any PID of a process moves the whole process, threads included.
            std::fs::write(leaf.join("cgroup.procs"), pid)
                .map_err(|e| prepare(format!("moving {pid} into {}: {e}", leaf.display())))?;
        }
    }
    let line: Vec<String> = missing.iter().map(|c| format!("+{c}")).collect();
    std::fs::write(dir.join("cgroup.subtree_control"), line.join(" "))
        .map_err(|e| prepare(format!("enabling {}: {e}", line.join(" "))))?;
    Ok(dir)
}

/// A sandbox's own child group; removed (its processes killed first) by [`ChildGroup::remove`].
#[derive(Debug)]
pub struct ChildGroup {
    dir: PathBuf,
    /// `cgroup.procs`, opened before the fork, written by the child before exec.
    procs: File,
    /// The knobs of [`OPTIONAL_KNOBS`] this host would not let brokerd set, and why.
    unset: Vec<(&'static str, String)>,
}

/// Knobs a host may lack (no swap accounting, no cpu controller delegated). With
/// `enforce_limits = true` a sandbox whose group lacks one does not run (docs/design.md#limits);
/// with `false` it runs with its memory and pids limits, and the weaker confinement is logged,
/// audited and shown by `status`.
pub const OPTIONAL_KNOBS: [&str; 2] = ["memory.swap.max", "cpu.max"];

impl CgroupLimits {
    /// Every cgroup v2 file these limits set, with the value a sandbox reads back from it:
    /// what the preflight checks with `enforce_limits`.
    pub fn files(&self) -> [(&'static str, String); 4] {
        let (quota, period) = self.cpu_max;
        [
            ("pids.max", self.pids_max.to_string()),
            ("memory.max", self.memory_max.to_string()),
            ("memory.swap.max", "0".to_string()),
            ("cpu.max", format!("{quota} {period}")),
        ]
    }
}

impl ChildGroup {
    /// Makes `<root>/sandbox-<name>` and writes its limits before anything runs in it.
    pub fn create(root: &Path, name: &str, limits: &CgroupLimits) -> io::Result<ChildGroup> {
        let dir = root.join(format!("{SANDBOX_PREFIX}{name}"));
        match std::fs::create_dir(&dir) {
            // A leftover of a crash under the same name is empty or swept; reuse it.
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
        // Swap would let a sandbox exceed memory.max unseen; absent without swap accounting.
        let mut unset = Vec::new();
        for (knob, value) in limits.files() {
            let file = dir.join(knob);
            if !OPTIONAL_KNOBS.contains(&knob) {
                if let Err(e) = std::fs::write(&file, value) {
                    remove_group(&dir);
                    return Err(e);
                }
            } else if !file.exists() {
                unset.push((
                    knob,
                    "absent (the controller is not enabled for this group)".to_string(),
                ));
            } else if let Err(e) = std::fs::write(&file, value) {
                unset.push((knob, e.to_string()));
            }
        }
        let procs = OpenOptions::new()
            .write(true)
            .open(dir.join("cgroup.procs"))?;
        Ok(ChildGroup { dir, procs, unset })
    }

    /// The optional knobs that could not be set, and why.
    pub fn unset(&self) -> &[(&'static str, String)] {
        &self.unset
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The descriptor [`join_from_child`] writes to.
    pub fn procs_fd(&self) -> std::os::fd::RawFd {
        self.procs.as_raw_fd()
    }

    /// Kills whatever still runs in the group, waits for it to be empty, removes it. `false`
    /// when its emptiness could not be confirmed (the caller poisons).
    pub fn remove(self) -> bool {
        remove_group(&self.dir)
    }
}

/// Moves the calling process into the group whose `cgroup.procs` is open as `fd`. Only
/// write(2): async-signal-safe, for a `pre_exec` hook. "0" means "the writer".
pub fn join_from_child(fd: std::os::fd::RawFd) -> io::Result<()> {
    // SAFETY: write(2) reads one byte from a static buffer; fd is open (opened before the
    // fork, inherited, closed on exec).
    let n = unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) };
    if n == 1 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `cgroup.kill` (Linux 5.14) then waits for `populated 0` in `cgroup.events`, then rmdir.
/// The kernel flags each change of `cgroup.events` as POLLPRI on a descriptor that has read
/// it, so the wait blocks in poll(2) until the group empties (a fixed step only if the file
/// cannot be opened).
fn remove_group(dir: &Path) -> bool {
    if !dir.exists() {
        return true;
    }
    let path = dir.join("cgroup.events");
    let mut events = File::open(&path).ok();
    // Read through the watched descriptor, which marks what it has seen.
    let populated = |events: &mut Option<File>| {
        let text = match events {
            Some(f) => {
                use std::io::{Read, Seek};
                let mut text = String::new();
                f.rewind()
                    .and_then(|_| f.read_to_string(&mut text))
                    .map(|_| text)
            }
            None => std::fs::read_to_string(&path),
        };
        text.map(|t| t.lines().any(|l| l.trim() == "populated 1"))
            .unwrap_or(false)
    };
    if populated(&mut events) {
        // Not a PID: the kernel kills every process of this group and of its children.
        let _ = std::fs::write(dir.join("cgroup.kill"), "1");
    }
    let deadline = Instant::now() + EMPTY_CONFIRM;
    while populated(&mut events) {
        if Instant::now() >= deadline {
            return false;
        }
        match &events {
            Some(f) => {
                // Looked at again at least every RELOOK even without the event, so that a
                // kernel that does not flag the change costs time, never a false poisoning.
                use std::os::fd::AsFd;
                super::wake::changed(f.as_fd(), deadline.min(Instant::now() + RELOOK));
            }
            None => thread::sleep(Duration::from_millis(5)),
        }
    }
    match std::fs::remove_dir(dir) {
        Ok(()) => true,
        Err(e) if e.kind() == io::ErrorKind::NotFound => true,
        Err(_) => false,
    }
}

/// Removes every `sandbox-*` group under `root` (the sweep); returns how many, and failures.
pub fn sweep(root: &Path) -> (usize, Vec<String>) {
    let mut removed = 0;
    let mut failed = Vec::new();
    let Ok(entries) = std::fs::read_dir(root) else {
        return (0, failed);
    };
    for entry in entries.flatten() {
        let is_sandbox = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(SANDBOX_PREFIX));
        if !is_sandbox || !entry.path().is_dir() {
            continue;
        }
        if remove_group(&entry.path()) {
            removed += 1;
        } else {
            failed.push(format!(
                "{}: could not be emptied and removed",
                entry.path().display()
            ));
        }
    }
    (removed, failed)
}

/// `systemd-run --user --scope ... --` before `argv`.
pub fn scope_prefix(systemd_run: &Path, unit: &str, limits: &CgroupLimits) -> Vec<OsString> {
    let (quota, period) = limits.cpu_max;
    let percent = quota.saturating_mul(100) / period.max(1);
    vec![
        systemd_run.as_os_str().to_owned(),
        "--user".into(),
        "--scope".into(),
        "--quiet".into(),
        "--collect".into(),
        format!("--unit={unit}").into(),
        format!("--slice={SCOPE_SLICE}").into(),
        "-p".into(),
        format!("MemoryMax={}", limits.memory_max).into(),
        "-p".into(),
        "MemorySwapMax=0".into(),
        "-p".into(),
        format!("TasksMax={}", limits.pids_max).into(),
        "-p".into(),
        format!("CPUQuota={percent}%").into(),
        "--".into(),
    ]
}

/// Where the scope's group appears, by systemd's naming: the service user's manager, the
/// slice, the unit. Bound at /sys/fs/cgroup so the preflight reads the scope's own limits.
pub fn scope_dir(uid: u32, unit: &str) -> PathBuf {
    Path::new(CGROUP_ROOT)
        .join("user.slice")
        .join(format!("user-{uid}.slice"))
        .join(format!("user@{uid}.service"))
        .join(SCOPE_SLICE)
        .join(format!("{unit}.scope"))
}

fn writable(dir: &Path) -> bool {
    nix::unistd::access(dir, nix::unistd::AccessFlags::W_OK).is_ok()
}

/// The first executable `name` in PATH.
pub fn find_in_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| {
            std::fs::metadata(p)
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_group_table() {
        let cases = [
            (
                "0::/system.slice/boxmaker.service\n",
                Some("/system.slice/boxmaker.service"),
            ),
            ("12:pids:/\n1:name=systemd:/x\n0::/\n", Some("/")),
            ("4:memory:/a\n1:cpu:/\n", None),
            ("", None),
        ];
        for (text, want) in cases {
            assert_eq!(own_group(text), want.map(PathBuf::from), "{text:?}");
        }
    }

    /// A stand-in cgroupfs: plain files, so the writes can be read back (the kernel's
    /// semantics, such as moving processes, are the guest's to prove).
    fn fake_group(controllers: &str, procs: &str) -> tempfile::TempDir {
        let mount = tempfile::tempdir().expect("tempdir");
        let own = mount.path().join("system.slice/boxmaker.service");
        std::fs::create_dir_all(&own).expect("group");
        std::fs::write(own.join("cgroup.controllers"), controllers).expect("controllers");
        std::fs::write(own.join("cgroup.subtree_control"), "").expect("subtree");
        std::fs::write(own.join("cgroup.procs"), procs).expect("procs");
        mount
    }

    #[test]
    fn a_delegated_group_is_prepared_by_moving_brokerd_into_a_leaf() {
        let mount = fake_group("cpu memory pids", "");
        let own = Path::new("/system.slice/boxmaker.service");
        let leaf = mount
            .path()
            .join("system.slice/boxmaker.service")
            .join(SUPERVISOR_LEAF);
        std::fs::create_dir_all(&leaf).expect("leaf");
        std::fs::write(
            mount
                .path()
                .join("system.slice/boxmaker.service/cgroup.procs"),
            "4242\n",
        )
        .expect("procs");
        let root = prepare_delegated(mount.path(), own).expect("prepared");
        assert_eq!(root, mount.path().join("system.slice/boxmaker.service"));
        assert_eq!(
            std::fs::read_to_string(root.join("cgroup.subtree_control")).expect("read"),
            "+memory +pids +cpu"
        );
        assert_eq!(
            std::fs::read_to_string(leaf.join("cgroup.procs")).expect("read"),
            "4242"
        );
        // Restarted inside the leaf, brokerd still makes sandboxes beside it.
        let again = prepare_delegated(mount.path(), &own.join(SUPERVISOR_LEAF));
        assert_eq!(again.ok(), Some(root));
    }

    #[test]
    fn a_group_without_the_controllers_is_refused() {
        let mount = fake_group("cpu memory", "");
        let own = Path::new("/system.slice/boxmaker.service");
        match prepare_delegated(mount.path(), own) {
            Err(CgroupUnavailable::NoController { controller, .. }) => {
                assert_eq!(controller, "pids")
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            prepare_delegated(mount.path(), Path::new("/elsewhere")),
            Err(CgroupUnavailable::NotDelegated(_))
        ));
    }

    #[test]
    fn a_child_group_gets_its_limits_before_anything_runs() {
        let mount = fake_group("cpu memory pids", "");
        let root = mount.path().join("system.slice/boxmaker.service");
        // What the kernel would make in a new group.
        let dir = root.join("sandbox-boxmaker-s-c-1");
        std::fs::create_dir_all(&dir).expect("group");
        for f in ["cgroup.procs", "cpu.max", "memory.swap.max"] {
            std::fs::write(dir.join(f), "").expect("file");
        }
        let group = ChildGroup::create(&root, "boxmaker-s-c-1", &CgroupLimits::new(512 << 20, 128))
            .expect("created");
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).expect("read");
        assert_eq!(read("memory.max"), (512u64 << 20).to_string());
        assert_eq!(read("pids.max"), "128");
        assert_eq!(read("memory.swap.max"), "0");
        assert_eq!(read("cpu.max"), "100000 100000");
        assert_eq!(group.dir(), dir);
        assert!(group.unset().is_empty());
        // A host without swap accounting or a delegated cpu controller: said, not skipped.
        let dir = root.join("sandbox-boxmaker-s-c-2");
        std::fs::create_dir_all(&dir).expect("group");
        std::fs::write(dir.join("cgroup.procs"), "").expect("file");
        let group = ChildGroup::create(&root, "boxmaker-s-c-2", &CgroupLimits::new(512 << 20, 128))
            .expect("created");
        let unset: Vec<&str> = group.unset().iter().map(|(k, _)| *k).collect();
        assert_eq!(unset, OPTIONAL_KNOBS);
    }

    #[test]
    fn scope_wrapping() {
        let got = scope_prefix(
            Path::new("/usr/bin/systemd-run"),
            "boxmaker-s-c-1",
            &CgroupLimits::new(512 << 20, 128),
        );
        let want = [
            "/usr/bin/systemd-run",
            "--user",
            "--scope",
            "--quiet",
            "--collect",
            "--unit=boxmaker-s-c-1",
            "--slice=boxmaker.slice",
            "-p",
            "MemoryMax=536870912",
            "-p",
            "MemorySwapMax=0",
            "-p",
            "TasksMax=128",
            "-p",
            "CPUQuota=100%",
            "--",
        ];
        assert_eq!(got, want.map(OsString::from));
        assert_eq!(
            scope_dir(1000, "boxmaker-s-c-1"),
            Path::new("/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/boxmaker.slice/boxmaker-s-c-1.scope")
        );
    }
}
