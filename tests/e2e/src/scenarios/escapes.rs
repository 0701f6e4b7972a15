//! Ways out of the sandbox: grants that would let one sandbox reach another's directory, a
//! grant directory swapped for a symlink, brokerd's environment, nested user namespaces,
//! address randomisation, and setuid programs left in a grant.

use std::time::Duration;

use client::Body;
use proto::sentences::{MountChanged, MountTrouble};
use serde_json::json;

use super::{check, show, Outcome, Suite, CANARY_NAME, CANARY_VALUE, RO_TEXT};
use crate::system;

impl Suite {
    /// The model names brokerd's descriptors and the sandbox's own: `read_file` of
    /// `/proc/self/fd/N`, `/proc/self/root/...` and `/dev/fd/N` is refused at once as outside
    /// the grant, and a shell that writes through every `/proc/*/fd/*` it finds (its own
    /// pipes to toolkit and brokerd included) is answered within its time limit; brokerd
    /// then serves the next call as before.
    pub(super) fn descriptors_stall_nothing(&mut self) -> Outcome {
        for path in [
            "/proc/self/fd/0",
            "/proc/self/fd/3",
            "/proc/self/root/etc/hostname",
            "/dev/fd/1",
        ] {
            let started = std::time::Instant::now();
            match self.call("read_file", json!({ "path": path }))? {
                // Outside as written: what the link leads to in brokerd is never read.
                Body::Refused { reason }
                    if reason.contains("is outside the grant's directories")
                        && !reason.contains("leads to") => {}
                other => return Err(format!("read_file {path}: {}", show(&other))),
            }
            check(started.elapsed() < Duration::from_secs(5), || {
                format!("read_file {path} took {:?}", started.elapsed())
            })?;
        }
        let started = std::time::Instant::now();
        let command = "for f in /proc/[0-9]*/fd/*; do echo x > $f; done 2>/dev/null; echo looped";
        let answer = self.call("shell", json!({ "command": command }))?;
        check(!matches!(answer, Body::Unavailable { .. }), || {
            format!("`{command}`: {}", show(&answer))
        })?;
        check(started.elapsed() < Duration::from_secs(40), || {
            format!("`{command}` was answered after {:?}", started.elapsed())
        })?;
        match self.call("read_file", json!({ "path": self.rw.join("a.txt") }))? {
            Body::Result { .. } | Body::Failed { .. } => Ok(()),
            other => Err(format!("the call after it: {}", show(&other))),
        }
    }

    /// `brokerd check-config` refuses, naming both paths, a grant directory inside a
    /// writable one (a sandbox of the outer one could swap the inner one for a symlink), the
    /// same in either order (bwrap used to bind a writable parent over a read-only child),
    /// and a grant of the service user's home.
    pub(super) fn config_refuses_nested_grants(&mut self) -> Outcome {
        let base = std::fs::read_to_string(&self.config).map_err(|e| e.to_string())?;
        let (inner, p, p_ro) = (
            self.rw.join("inner"),
            self.work.join("p"),
            self.work.join("p").join("ro"),
        );
        for d in [&inner, &p_ro] {
            std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
        }
        let home = self.user.home.clone();
        let cases = [
            (
                format!("[grants.nest]\ntools = [\"shell\"]\npaths = [ {{ path = \"{}\" }} ]\n", inner.display()),
                format!("{:?} lies inside {:?}", inner.display().to_string(), self.rw.display().to_string()),
            ),
            (
                format!("[grants.p]\ntools = [\"shell\"]\npaths = [ {{ path = \"{}\" }}, {{ path = \"{}\", write = true }} ]\n", p_ro.display(), p.display()),
                format!("{:?} lies inside {:?}", p_ro.display().to_string(), p.display().to_string()),
            ),
            (
                format!("[grants.h]\ntools = [\"read_file\"]\npaths = [ {{ path = \"{}\" }} ]\n", home.display()),
                format!("{:?} overlaps {:?}, the service home", home.display().to_string(), home.display().to_string()),
            ),
        ];
        let file = self.work.join("state").join("check.toml");
        let mut outcome = Ok(());
        for (grant, want) in cases {
            std::fs::write(&file, format!("{base}\n{grant}")).map_err(|e| e.to_string())?;
            let mut c = std::process::Command::new(&self.brokerd);
            c.arg("check-config").arg(&file);
            let (code, text) = system::output(c, self.t(Duration::from_secs(30)))?;
            if code != 1 || !text.contains(&want) {
                outcome = Err(format!(
                    "check-config exited {code}, said {text:?}; wanted {want:?}"
                ));
                break;
            }
        }
        let _ = std::fs::remove_file(&file);
        let _ = std::fs::remove_dir_all(&p);
        let _ = std::fs::remove_dir(&inner);
        outcome
    }

    /// A grant directory replaced by a symlink to `/` between calls (by anything on the host):
    /// the next call is a refusal that names it, the sandbox never starts, the operator's log
    /// says so; put back, calls run again.
    pub(super) fn swapped_grant_directory(&mut self) -> Outcome {
        let away = self.work.join("ro.away");
        std::fs::rename(&self.ro, &away).map_err(|e| format!("move ro away: {e}"))?;
        let linked = std::os::unix::fs::symlink("/", &self.ro);
        let ro = self.ro.display().to_string();
        let answer = match linked {
            Ok(()) => self.call(
                "shell",
                json!({ "command": format!("ls {ro}; cat {ro}/etc/passwd") }),
            ),
            Err(e) => Err(format!("symlink: {e}")),
        };
        let _ = std::fs::remove_file(&self.ro);
        std::fs::rename(&away, &self.ro).map_err(|e| format!("move ro back: {e}"))?;
        match answer? {
            Body::Refused { reason } => {
                let want = MountChanged {
                    path: self.ro.clone(),
                    why: MountTrouble::Symlink,
                }
                .to_string();
                check(reason == want, || {
                    format!("reason {reason:?}, want {want:?}")
                })?
            }
            other => return Err(format!("expected a refusal, got {}", show(&other))),
        }
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        check(
            log.lines()
                .any(|l| l.contains(&ro) && l.contains(proto::runbook::GRANT_DIRECTORY_CHANGED)),
            || "brokerd's log has no line for the changed directory".into(),
        )?;
        let hello = self.ro.join("hello.txt");
        let (content, _) = self.result("read_file", json!({ "path": hello }))?;
        check(content == RO_TEXT, || {
            format!("after putting it back: {content:?}")
        })
    }

    /// Nothing of brokerd's environment is readable in any process of the sandbox (bwrap's own
    /// PID 1 there used to keep it, in /proc/1/environ).
    pub(super) fn no_brokerd_environment(&mut self) -> Outcome {
        let cmd =
            "for f in /proc/[0-9]*/environ; do echo \"== $f\"; tr '\\0' '\\n' < \"$f\"; echo; done";
        let (content, _) = self.result("shell", json!({ "command": cmd }))?;
        check(content.contains("== /proc/1/environ"), || {
            format!("the sandbox's PID 1 was not read: {content:?}")
        })?;
        check(
            !content.contains(CANARY_NAME) && !content.contains(CANARY_VALUE),
            || format!("brokerd's environment is visible in the sandbox: {content:?}"),
        )
    }

    /// A sandbox cannot make a user namespace of its own (the usual first step of a kernel
    /// exploit): bwrap by `--disable-userns`, Podman by the service user's seccomp profile.
    /// The fork and a thread of an ordinary pipeline still work.
    pub(super) fn no_nested_userns(&mut self) -> Outcome {
        let cmd = "busybox unshare -U -r true 2>&1 && echo nested-userns-made; \
                   busybox unshare -U true 2>&1 && echo nested-userns-made; \
                   echo a | cat | wc -c; sleep 0 & wait; echo done";
        let (content, _) = self.result("shell", json!({ "command": cmd }))?;
        check(!content.contains("nested-userns-made"), || {
            format!("the sandbox made a user namespace: {content:?}")
        })?;
        check(content.contains("2\ndone\n"), || {
            format!("an ordinary pipeline failed: {content:?}")
        })
    }

    /// A sandbox cannot switch address space randomisation off (`setarch -R`, personality
    /// `ADDR_NO_RANDOMIZE`): bwrap's seccomp filter refuses it with EPERM, Podman's default
    /// profile with ENOSYS. Programs still run with the default personality.
    pub(super) fn address_randomisation_stays_on(&mut self) -> Outcome {
        let cmd = "busybox linux64 -R cat /proc/self/personality 2>&1 || echo refused; \
                   cat /proc/self/personality";
        let content = self.shell(cmd)?;
        check(
            content.contains("personality(0x40000): ") && content.contains("refused\n"),
            || format!("the sandbox switched randomisation off, or could not try: {content:?}"),
        )?;
        check(
            !content.contains("00040000") && content.contains("00000000\n"),
            || format!("the sandbox's personality is not the default: {content:?}"),
        )
    }

    /// A sandbox cannot leave a setuid or setgid program in a directory it may write: on the
    /// host it would be the service user's, and any local user running it would act as the
    /// service user. bwrap's filter and the service user's Podman profile
    /// (scripts/seccomp-nouserns.jq) refuse every mode with either bit, by chmod, by install
    /// and at creation; ordinary modes still work.
    pub(super) fn no_setuid_program_lands(&mut self) -> Outcome {
        let dir = self.rw.join("setuid");
        let cmd = format!(
            "mkdir -p {d} && cd {d} && echo x > p && chmod 755 p && echo plain-ok; \
             chmod 4755 p 2>/dev/null || echo setuid-refused; \
             chmod g+s p 2>/dev/null || echo setgid-refused; \
             install -m 6755 p q 2>/dev/null || echo install-refused; ls -l",
            d = dir.display()
        );
        let out = self.shell(&cmd)?;
        for want in [
            "plain-ok",
            "setuid-refused",
            "setgid-refused",
            "install-refused",
        ] {
            check(out.contains(want), || format!("no {want:?} in {out:?}"))?;
        }
        use std::os::unix::fs::PermissionsExt;
        for entry in std::fs::read_dir(&dir).map_err(|e| format!("host: {e}"))? {
            let entry = entry.map_err(|e| format!("host: {e}"))?;
            let mode = entry
                .metadata()
                .map_err(|e| format!("host: {e}"))?
                .permissions()
                .mode();
            check(mode & 0o6000 == 0, || {
                format!("{} has mode {mode:o} on the host", entry.path().display())
            })?;
        }
        let _ = std::fs::remove_dir_all(&dir);
        Ok(())
    }
}
