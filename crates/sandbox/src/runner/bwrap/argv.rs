//! The argument lists bwrap is started with: the tool sandbox's and the egress proxy's, over
//! the tools root's layout (docs/design.md#the-bwrap-runner).
//!
//! A top-level entry of a toolset's tree with a grant directory below it (a Debian tree's
//! `/home` or `/srv`) is made afresh and its entries bound alike down the grant's path, since
//! bwrap cannot make a mount point inside a read-only bind; a link on the way becomes a
//! directory, so the mount cannot be led elsewhere. An entry that is a grant directory itself is
//! left to the grant.

use std::io::Read;

use super::*;

/// bwrap asked for a user namespace with every other namespace unshared, over the host's `/`,
/// running `true`: whether this host lets bwrap make a sandbox's namespaces at all. `brokerd
/// doctor` asks it, and so do the tests that need a real sandbox, to skip where there is none.
pub fn userns_probe() -> std::process::Command {
    let mut c = std::process::Command::new("bwrap");
    c.args([
        "--unshare-user",
        "--unshare-all",
        "--ro-bind",
        "/",
        "/",
        "true",
    ])
    .stdin(std::process::Stdio::null());
    c
}

/// One entry of the tools root's top level, as the sandbox's `/` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootEntry {
    /// A directory or file, bound read-only at `/<name>`.
    Bound(OsString),
    /// A symlink, made again with the same target (bwrap would follow it on the host).
    Symlink(OsString, PathBuf),
    /// A store path of the toolset's `store_paths`, bound read-only at its own path.
    Store(PathBuf),
}

/// The tools root's top level, read once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootLayout(pub Vec<RootEntry>);

impl RootLayout {
    /// Lists `root`, sorted by name, leaving out the mount points the sandbox makes itself.
    pub fn read(root: &Path) -> io::Result<RootLayout> {
        let mut entries = Vec::new();
        for entry in std::fs::read_dir(root)? {
            let entry = entry?;
            let name = entry.file_name();
            if OWN_MOUNTS.iter().any(|m| OsStr::new(m) == name) {
                continue;
            }
            let kind = entry.file_type()?;
            if kind.is_symlink() {
                entries.push(RootEntry::Symlink(name, std::fs::read_link(entry.path())?));
            } else if kind.is_dir() || kind.is_file() {
                entries.push(RootEntry::Bound(name));
            }
            // Sockets, devices and FIFOs at the top of an image have no place in a sandbox.
        }
        entries.sort_by(|a, b| entry_name(a).cmp(entry_name(b)));
        Ok(RootLayout(entries))
    }
}

pub(super) fn entry_name(e: &RootEntry) -> &OsStr {
    match e {
        RootEntry::Bound(n) | RootEntry::Symlink(n, _) => n,
        RootEntry::Store(p) => p.as_os_str(),
    }
}

/// The tree's `host` as the sandbox's `at`, read-only: bound whole, unless a path of
/// `mounted` lies below it (a grant directory under a toolset's `/home` or `/srv`, which a
/// Debian tree has): a read-only bind could not hold the mount point bwrap makes for it. Then
/// `at` is made afresh (read-only with the rest of `/` once the sandbox is built) and each of
/// `host`'s entries goes in alike, sorted by name, down the mount's path; an entry where a
/// mount goes itself is left to the mount, and one that cannot be read is left out.
fn bind_tree(a: &mut Vec<OsString>, host: &Path, at: &Path, mounted: &[&Path]) {
    if !mounted.iter().any(|m| m.starts_with(at) && *m != at) {
        a.push("--ro-bind".into());
        a.push(host.as_os_str().to_owned());
        a.push(at.as_os_str().to_owned());
        return;
    }
    a.push("--dir".into());
    a.push(at.as_os_str().to_owned());
    let Ok(entries) = std::fs::read_dir(host) else {
        return;
    };
    let mut entries: Vec<std::fs::DirEntry> = entries.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let inner = at.join(e.file_name());
        if mounted.iter().any(|m| *m == inner) {
            continue;
        }
        let below = mounted.iter().any(|m| m.starts_with(&inner));
        match e.file_type() {
            Ok(t) if t.is_dir() && !t.is_symlink() => bind_tree(a, &e.path(), &inner, mounted),
            // A file or link where a grant's path goes on: a directory in its place, so the
            // mount lands where the grant says (a link would lead it elsewhere).
            _ if below => {
                a.push("--dir".into());
                a.push(inner.into_os_string());
            }
            Ok(t) if t.is_symlink() => {
                if let Ok(target) = std::fs::read_link(e.path()) {
                    a.push("--symlink".into());
                    a.push(target.into_os_string());
                    a.push(inner.into_os_string());
                }
            }
            Ok(t) if t.is_file() => {
                a.push("--ro-bind".into());
                a.push(e.path().into_os_string());
                a.push(inner.into_os_string());
            }
            // Sockets, devices and FIFOs have no place in a sandbox.
            _ => {}
        }
    }
}

/// `/<name>`
pub(super) fn inside(name: &OsStr) -> OsString {
    let mut s = OsString::from("/");
    s.push(name);
    s
}

impl BwrapRuntime {
    /// The options every sandbox starts with: every namespace unshared (the network too),
    /// a user namespace that cannot make more, no capabilities, a clean environment, the
    /// tree `root` (the tools root or a toolset's) as `layout` lists it, a fresh /proc, a
    /// minimal /dev. `mounted`: the paths mounted after these (the grant directories), which
    /// the tree's binds must leave room for ([`bind_tree`]).
    pub(super) fn common_args(
        &self,
        root: &Path,
        layout: &RootLayout,
        share_net: bool,
        etc: bool,
        mounted: &[&Path],
    ) -> Vec<OsString> {
        let mut a: Vec<OsString> = vec![
            "--unshare-all".into(),
            // Explicit, so the namespace is made even for root and --disable-userns applies.
            "--unshare-user".into(),
            "--disable-userns".into(),
        ];
        if share_net {
            a.push("--share-net".into());
        }
        a.extend(
            [
                "--die-with-parent",
                "--new-session",
                "--cap-drop",
                "ALL",
                "--clearenv",
            ]
            .map(OsString::from),
        );
        if seccomp::program().is_some() {
            // The filter arrives on this descriptor (see `start`).
            a.push("--seccomp".into());
            a.push(seccomp::FD.to_string().into());
        }
        for entry in &layout.0 {
            match entry {
                RootEntry::Bound(name) if !etc && name == "etc" => {}
                RootEntry::Bound(name) => {
                    let at = PathBuf::from(inside(name));
                    // A grant directory that is `/<name>` itself takes its place whole.
                    if !mounted.iter().any(|m| *m == at) {
                        bind_tree(&mut a, &root.join(name), &at, mounted);
                    }
                }
                // A link a grant's path goes through (an ostree tree's /home -> var/home) would
                // lead bwrap's mount elsewhere: a directory takes its place.
                RootEntry::Symlink(name, _)
                    if mounted.iter().any(|m| m.starts_with(inside(name))) =>
                {
                    a.push("--dir".into());
                    a.push(inside(name));
                }
                RootEntry::Symlink(name, target) => {
                    a.push("--symlink".into());
                    a.push(target.clone().into_os_string());
                    a.push(inside(name));
                }
                // A store path that is a link is made again as one: bwrap would bind where it
                // leads on the host.
                RootEntry::Store(path) => match std::fs::read_link(path) {
                    Ok(target) => {
                        a.push("--symlink".into());
                        a.push(target.into_os_string());
                        a.push(path.clone().into_os_string());
                    }
                    Err(_) => bind_tree(&mut a, path, path, mounted),
                },
            }
        }
        a.extend(["--proc", "/proc", "--dev", "/dev"].map(OsString::from));
        a
    }

    /// The tool sandbox's `bwrap` arguments (the program not included), in a fixed order:
    /// golden files under `tests/fixtures/bwrap/` hold them byte for byte.
    pub fn build_argv(
        &self,
        spec: &RunSpec,
        name: &str,
        layout: &RootLayout,
        cgroup_view: Option<&Path>,
    ) -> Vec<OsString> {
        self.build_argv_with(spec, name, layout, cgroup_view, &[])
    }

    /// `build_argv` with the mounts of the writable mounts' protected targets (`protected`,
    /// in the order their descriptors follow the mounts'): each pin bound writable onto
    /// itself, each target read-only.
    pub fn build_argv_with(
        &self,
        spec: &RunSpec,
        name: &str,
        layout: &RootLayout,
        cgroup_view: Option<&Path>,
        protected: &[Over<'_>],
    ) -> Vec<OsString> {
        let mounted: Vec<&Path> = spec.mounts.iter().map(|m| m.path.as_path()).collect();
        let mut a = self.common_args(self.root_of(spec), layout, false, true, &mounted);
        a.extend(
            [
                "--setenv", "HOME", "/tmp", "--setenv", "TMPDIR", "/tmp", "--setenv", "PATH",
                "/bin", "--size",
            ]
            .map(OsString::from),
        );
        a.push(TMP_SIZE.to_string().into());
        a.extend(["--perms", "1777", "--tmpfs", "/tmp"].map(OsString::from));
        // After /tmp, so a grant under /tmp is not hidden by it. Each directory is bound from
        // the descriptor brokerd opened and checked (`mounts::open_mounts`), never by path,
        // and parents before their children, so a writable parent cannot cover a read-only
        // child.
        for i in mounts::mount_order(&spec.mounts) {
            let m = &spec.mounts[i];
            a.push(if m.write { "--bind-fd" } else { "--ro-bind-fd" }.into());
            a.push((mounts::FIRST_FD + i as i32).to_string().into());
            a.push(m.path.clone().into_os_string());
        }
        // Then, from the descriptors the walk opened, the directories between a writable
        // mount and its protected targets, each onto itself (a mount point cannot be renamed
        // or removed), and each target read-only over them (docs/design.md#protected-targets).
        for (j, over) in protected.iter().enumerate() {
            a.push(
                if over.pin {
                    "--bind-fd"
                } else {
                    "--ro-bind-fd"
                }
                .into(),
            );
            a.push(
                (mounts::FIRST_FD + (spec.mounts.len() + j) as i32)
                    .to_string()
                    .into(),
            );
            a.push(over.path.as_os_str().to_owned());
        }
        // The grant's own cache, over the sandbox's /tmp: a directory of brokerd's, which
        // nobody else can swap (docs/design.md#grant-caches).
        if let Some(c) = &spec.cache {
            a.push("--bind".into());
            a.push(c.dir.clone().into_os_string());
            a.push(proto::tools::TOOL_CACHE.into());
        }
        self.egress_and_cgroup(&mut a, spec.egress.is_some().then_some(name), cgroup_view);
        a.extend(
            [
                "--remount-ro",
                "/",
                "--chdir",
                proto::tools::DEFAULT_CWD,
                proto::tools::TOOLKIT,
                spec.tool.as_str(),
            ]
            .map(OsString::from),
        );
        a
    }

    /// The egress proxy's `bwrap` arguments: everything unshared but the network; only
    /// toolkit, the host's resolver file, and the call's egress directory.
    pub fn proxy_argv(
        &self,
        egress: &Egress,
        name: &str,
        layout: &RootLayout,
        cgroup_view: Option<&Path>,
    ) -> Vec<OsString> {
        // The proxy runs the base toolset's toolkit whatever the call's toolset.
        let mut a = self.common_args(&self.tools_root, layout, true, false, &[]);
        a.extend(["--setenv", "PATH", "/bin", "--size"].map(OsString::from));
        a.push((1024 * 1024).to_string().into());
        a.extend(["--tmpfs", "/tmp", "--ro-bind"].map(OsString::from));
        a.push(self.resolv_conf.clone().into_os_string());
        a.push(RESOLV_CONF.into());
        self.egress_and_cgroup(&mut a, Some(name), cgroup_view);
        // Its report's directory, which the tool's sandbox never sees.
        if egress.bounds.is_some() {
            a.push("--bind".into());
            a.push(egress::report_dir(&self.egress_dir(name)).into_os_string());
            a.push(proto::egress::REPORT_DIR.into());
        }
        a.extend(["--remount-ro", "/", "--chdir", "/"].map(OsString::from));
        a.extend(egress.proxy_command());
        a
    }

    /// The binds both sandboxes end with: the egress directory of sandbox `egress` (when
    /// there is one) at [`EGRESS_MOUNT`], then the sandbox's own cgroup, read-only, where
    /// cgroup v2 puts it, for the sandbox to read its limits in (the preflight).
    fn egress_and_cgroup(
        &self,
        a: &mut Vec<OsString>,
        egress: Option<&str>,
        cgroup_view: Option<&Path>,
    ) {
        if let Some(name) = egress {
            a.push("--bind".into());
            a.push(self.egress_dir(name).into_os_string());
            a.push(EGRESS_MOUNT.into());
        }
        if let Some(dir) = cgroup_view {
            a.push("--ro-bind".into());
            a.push(dir.as_os_str().to_owned());
            a.push(cgroup::CGROUP_ROOT.into());
        }
    }

    /// The staged mounts of `spec`, in the staging namespaces (made at the first).
    pub(super) fn overlays(&self, spec: &RunSpec, passed: usize) -> io::Result<Option<Overlays>> {
        if spec.mounts.iter().all(|m| m.stage.is_none()) {
            return Ok(None);
        }
        let mut staging = lock(&self.staging);
        if staging.is_none() {
            *staging = Some(crate::runner::overlay::Staging::new(self.ready_keep)?);
        }
        match staging.as_ref() {
            Some(staging) => Overlays::of(&spec.mounts, passed, staging),
            None => Ok(None),
        }
    }

    /// The tree a call's sandbox has as `/`: its toolset's (docs/design.md#toolsets), or the
    /// tools root.
    pub fn root_of<'a>(&'a self, spec: &'a RunSpec) -> &'a Path {
        match spec.toolset.as_ref().and_then(|t| t.tree.as_deref()) {
            Some(tree) => tree,
            None => &self.tools_root,
        }
    }

    /// The layout of the tree `spec` runs on. A toolset's tree is read at each call (one
    /// directory's entries), so that a tree gone since the start answers as the toolset's
    /// failure, not as a sandbox bwrap could not build.
    pub(super) fn layout_of(&self, spec: &RunSpec) -> io::Result<RootLayout> {
        let root = self.root_of(spec);
        if root == self.tools_root {
            return self.layout();
        }
        let mut layout = read_with_bin(root)?;
        if let Some(list) = spec.toolset.as_ref().and_then(|t| t.store_paths.as_deref()) {
            if layout.0.iter().any(|e| entry_name(e) == STORE_TOP) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "it has its own /nix, where its store paths are bound",
                ));
            }
            let paths = read_store_paths(list, &self.store)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", list.display())))?;
            layout.0.extend(paths.into_iter().map(RootEntry::Store));
        }
        Ok(layout)
    }

    pub(super) fn layout(&self) -> io::Result<RootLayout> {
        let mut cached = lock(&self.layout);
        if let Some(l) = cached.as_ref() {
            return Ok(l.clone());
        }
        let l = read_with_bin(&self.tools_root)?;
        *cached = Some(l.clone());
        Ok(l)
    }
}

/// The store whose paths a toolset's `store_paths` may list; its top-level entry, which a
/// tree with store paths must not have.
pub(super) const STORE: &str = "/nix/store";
const STORE_TOP: &str = "nix";
/// At most this many store paths (a compiler's closure has a few hundred), so a list cannot
/// make an argument list bwrap refuses.
pub(super) const MAX_STORE_PATHS: usize = 8192;

/// A toolset's `store_paths` file (a Nix closure's `store-paths`: one path a line): each line
/// a path directly under `store`, never the store itself, that exists; sorted, no repeats. A
/// line of another shape fails the whole list: a toolset gets exactly its closure.
pub(super) fn read_store_paths(list: &Path, store: &Path) -> io::Result<Vec<PathBuf>> {
    let bad = |what: String| io::Error::new(io::ErrorKind::InvalidData, what);
    let cap = MAX_STORE_PATHS as u64 * 256;
    let mut text = String::new();
    std::fs::File::open(list)?
        .take(cap + 1)
        .read_to_string(&mut text)?;
    if text.len() as u64 > cap {
        return Err(bad(format!("larger than {cap} bytes")));
    }
    let mut paths = Vec::new();
    for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.is_empty()) {
        let path = PathBuf::from(line);
        let name = path
            .strip_prefix(store)
            .ok()
            .and_then(|rest| rest.to_str())
            .unwrap_or_default();
        let direct = path.as_os_str().len() == store.as_os_str().len() + 1 + name.len()
            && !name.is_empty()
            && !name.contains('/')
            && !name.starts_with('.');
        if !direct {
            return Err(bad(format!(
                "line {}: {line:?} is not a path directly under {}",
                n + 1,
                store.display()
            )));
        }
        std::fs::symlink_metadata(&path)
            .map_err(|e| bad(format!("line {}: {line}: {e}", n + 1)))?;
        paths.push(path);
        if paths.len() > MAX_STORE_PATHS {
            return Err(bad(format!("more than {MAX_STORE_PATHS} store paths")));
        }
    }
    paths.sort();
    paths.dedup();
    Ok(paths)
}

/// `root`'s layout, which must have a `bin` (toolkit is run as `/bin/toolkit`).
fn read_with_bin(root: &Path) -> io::Result<RootLayout> {
    {
        let l = RootLayout::read(root)?;
        if !l.0.iter().any(|e| entry_name(e) == "bin") {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "it has no bin (toolkit is run as {})",
                    proto::tools::TOOLKIT
                ),
            ));
        }
        Ok(l)
    }
}
