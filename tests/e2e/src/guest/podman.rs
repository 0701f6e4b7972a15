//! The service user's systemd and rootless Podman, its configuration as scripts/setup.sh
//! writes it on any host, the tools image made in the guest by the project's builder, and
//! nested user namespaces refused in a sandbox by the user's seccomp profile.

use std::path::Path;
use std::time::{Duration, Instant};

use super::host;
use super::{is_image_id, Finish, Guest, Step, MEMORY, PIDS, TOOLS_ROOT};

/// What `podman info` is asked for, in this order.
const INFO_FORMAT: &str = "{{.Host.CgroupsVersion}} {{.Host.CgroupManager}} {{.Store.GraphDriverName}} {{.Host.OCIRuntime.Name}} {{.Version.Version}}";

impl Guest {
    pub(super) fn podman_setup(&mut self) -> Step {
        self.rootless_podman();
        self.setup_user();
        self.tools_image()?;
        self.nested_userns();
        Ok(())
    }

    fn rootless_podman(&mut self) {
        let uid = self.svc.user.uid;
        host::systemctl(&["start", &format!("user@{uid}.service")]);
        let bus = self.svc.user.runtime_dir().join("bus");
        for _ in 0..60 {
            if is_socket(&bus) {
                break;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        let (_, info) = self.svc.podman(&["info", "--format", INFO_FORMAT]);
        let info = info.trim_end().to_string();
        let controllers = std::fs::read_to_string(format!(
            "/sys/fs/cgroup/user.slice/user-{uid}.slice/user@{uid}.service/cgroup.controllers"
        ))
        .unwrap_or_default();
        let controllers = controllers.trim_end().to_string();
        let has = |c: &str| controllers.split_whitespace().any(|w| w == c);
        let good = info.starts_with("v2 systemd overlay ") && has("memory") && has("pids");
        self.t.check(
            "rootless-podman",
            good,
            || {
                format!(
                    "cgroups, manager, storage, runtime, version: {info}; delegated: {controllers}"
                )
            },
            || format!("podman info says '{info}', delegated controllers '{controllers}'"),
        );
    }

    /// The image made the user; setup.sh adds what it adds everywhere: the seccomp profile that
    /// denies nested user namespaces (scripts/seccomp-nouserns.jq over Debian's default) and
    /// its containers.conf.
    fn setup_user(&mut self) {
        let setup = self.payload("src/scripts/setup.sh");
        let dir = self.svc.user.home.join(".config/containers");
        let conf = dir.join("containers.conf");
        let profile = dir.join("seccomp-nouserns.json");
        let mut c = host::cmd("bash", [setup.as_os_str()]);
        c.arg("user");
        let (code, msg) = host::merged(c);
        let conf_text = std::fs::read_to_string(&conf);
        let want = format!("seccomp_profile = \"{}\"", profile.display());
        let names_profile = conf_text
            .as_deref()
            .is_ok_and(|t| t.lines().any(|l| l == want));
        let profile_there = std::fs::metadata(&profile).is_ok_and(|m| m.len() > 0);
        let written = msg
            .lines()
            .filter(|l| l.starts_with("setup: wrote"))
            .count();
        let last = msg.trim_end().lines().next_back().unwrap_or("").to_string();
        self.t.check(
            "setup-user",
            code == 0 && names_profile && profile_there,
            || format!("{written} files written; {last}"),
            || format!("scripts/setup.sh user: {}", msg.trim_end()),
        );
        let shown = conf_text.unwrap_or_else(|e| format!("{}: {e}", conf.display()));
        self.t.note(shown.trim_end());
    }

    /// The guest's one tools image, which the service's checks and the scenario suite share:
    /// when the suite is to run, its test CA is made first and the image's bundle holds it too.
    fn tools_image(&mut self) -> Step {
        let started = Instant::now();
        let ca_pem = if self.set.e2e {
            match self.make_test_ca() {
                Ok(pem) => Some(pem),
                Err(e) => {
                    self.t.fail("tools-image", &e);
                    return Err(Finish);
                }
            }
        } else {
            None
        };
        let extra: Vec<&str> = ca_pem
            .as_deref()
            .map(|pem| vec!["--extra-ca", pem])
            .unwrap_or_default();
        let id = self.build_image(
            Path::new(TOOLS_ROOT),
            &extra,
            &self.results_file("tools-image.err"),
        );
        if is_image_id(&id) {
            self.image_id = id;
            let secs = started.elapsed().as_secs();
            let with = if ca_pem.is_some() {
                ", the suite's test CA in its bundle"
            } else {
                ""
            };
            self.t.ok(
                "tools-image",
                &format!("{} in {secs}s{with}", self.image_id),
            );
            Ok(())
        } else {
            self.t.fail(
                "tools-image",
                &format!("images/build-tools-image.sh printed '{id}'"),
            );
            let err = super::tail_of(&self.results_file("tools-image.err"), 20);
            self.t.note(&err);
            Err(Finish)
        }
    }

    /// images/build-tools-image.sh with the guest's toolkit into `out` (and `extra` options):
    /// the last line it printed, the image id when it worked; its standard error into `err`.
    pub(super) fn build_image(&self, out: &Path, extra: &[&str], err: &Path) -> String {
        let mut c = host::cmd("bash", [self.payload("src/images/build-tools-image.sh")]);
        c.arg("--toolkit")
            .arg(self.payload("bin/toolkit"))
            .arg("--out")
            .arg(out)
            .args(extra);
        let out = host::run(c);
        // Kept for the failure's note; without it the note says less.
        let _ = std::fs::write(err, &out.stderr);
        out.stdout
            .trim_end()
            .lines()
            .last()
            .unwrap_or("")
            .to_string()
    }

    /// The options of brokerd's tool containers (crates/brokerd/tests/fixtures/podman/), with
    /// busybox asking for a user namespace mapped to root; then the same with Debian's default
    /// profile named explicitly, which must allow it, so the refusal is the profile's and not
    /// the kernel's.
    fn nested_userns(&mut self) {
        let denied = self.userns_probe("profile", &[]);
        let allowed = self.userns_probe(
            "default",
            &["--security-opt=seccomp=/usr/share/containers/seccomp.json"],
        );
        let has_line = |text: &str, l: &str| text.lines().any(|x| x == l);
        let good = denied.contains("unshare(0x10000000): Operation not permitted")
            && has_line(&denied, "unshare exit 1")
            && has_line(&allowed, "unshare exit 0");
        let first = |text: &str, s: &str| {
            text.lines()
                .find(|l| l.contains(s))
                .unwrap_or("")
                .to_string()
        };
        self.t.check(
            "podman-nested-userns",
            good,
            || {
                format!(
                    "{}; with Debian's default profile: {}",
                    first(&denied, "unshare("),
                    first(&allowed, "unshare exit")
                )
            },
            || {
                format!(
                    "with the user's profile: '{}'; with Debian's default: '{}'",
                    denied.trim_end(),
                    allowed.trim_end()
                )
            },
        );
    }

    fn userns_probe(&self, name: &str, extra: &[&str]) -> String {
        let container = format!("--name=boxmaker-guest-userns-{name}");
        let pids = format!("--pids-limit={PIDS}");
        let memory = format!("--memory={MEMORY}");
        let mut args = vec![
            "run",
            "--rm",
            "-i",
            &container,
            proto::podman::TOOL_LABEL,
            "--network=none",
            "--read-only",
            "--cap-drop=all",
            "--security-opt=no-new-privileges",
            "--userns=keep-id",
            &pids,
            &memory,
            "--tmpfs=/tmp:rw,size=64m,mode=1777",
        ];
        args.extend_from_slice(extra);
        args.extend_from_slice(&[
            &self.image_id,
            "/bin/busybox",
            "sh",
            "-c",
            "busybox unshare -U -r true; echo \"unshare exit $?\"",
        ]);
        self.svc.podman(&args).1
    }
}

pub(super) fn is_socket(p: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_socket())
}
