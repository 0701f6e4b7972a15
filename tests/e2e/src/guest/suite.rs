//! The scenario suite in the guest: tests/e2e/in-netns.sh, as CI's Debian run and the NixOS VM
//! test call it: a network namespace with the suite's own hosts (the guest has no NIC anyway),
//! then `boxmaker-e2e run` against a brokerd of its own, per backend, with the scenarios
//! vm-tests/guest/run.sh names (its smoke pass, `--e2e-args`). It takes the test CA, made here
//! before the `tools-image` check, which builds the guest's one tools image with that CA in its
//! bundle (the service's checks do not use TLS; one build under TCG instead of two), and that
//! image's tree. Both backends run with their limits enforced (the guest has cgroup v2 and the
//! user's systemd): Podman's through its own cgroups, bwrap's through cgroup = "systemd-scope"
//! (the suite's brokerd is not a unit, so it has no delegated group; the bwrap variant's checks
//! prove "delegated"). Every time limit and wait of the suite is multiplied by --time-scale: a
//! container starts in 5-9 s under TCG.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use proto::broker::Backend;

use super::host;
use super::Guest;
use crate::system;

const E2E_CA: &str = "/var/lib/boxmaker-guest/e2e-ca";
/// The bound of one backend's run, in seconds.
const E2E_TIMEOUT_S: u32 = 1500;

/// A line of the suite's output, as the guest counts it.
#[derive(Debug, PartialEq, Eq)]
enum Line<'a> {
    Ok(&'a str),
    Fail { name: &'a str, why: &'a str },
}

/// `ok NAME` or `FAIL NAME: why` (NAME ends at the first colon); anything else is not a result.
fn result_line(line: &str) -> Option<Line<'_>> {
    if let Some(name) = line.strip_prefix("ok ") {
        return Some(Line::Ok(name));
    }
    let rest = line.strip_prefix("FAIL ")?;
    let name = rest.split(':').next().unwrap_or(rest);
    let why = rest.split_once(": ").map_or(rest, |(_, w)| w);
    Some(Line::Fail { name, why })
}

impl Guest {
    pub(super) fn scenarios(&mut self) {
        if !self.set.e2e {
            self.t
                .skip("scenario-suite", "not asked for (GUEST_E2E=1 runs it)");
            return;
        }
        if !self.payload("bin/boxmaker-e2e").is_file()
            || !self.payload("src/tests/e2e/in-netns.sh").is_file()
        {
            self.t.skip(
                "scenario-suite",
                "boxmaker-e2e or tests/e2e/in-netns.sh was not in the payload",
            );
            return;
        }
        // The service's brokerd must not run beside the suite's own.
        host::systemctl(&["stop", &self.service_unit, &self.socket_unit]);
        // The tools-image check built it with the test CA, since the suite was asked for (and
        // without an image the run ended there).
        let image = self.image_id.clone();
        let started = Instant::now();
        self.run_backend(Backend::Podman, &image, &["--enforce-limits", "true"]);
        self.t.out(&format!(
            "timing scenarios-podman {}s",
            started.elapsed().as_secs()
        ));
        let started = Instant::now();
        if !self.set.backends.contains(&Backend::Bwrap) {
            let asked: Vec<&str> = self.set.backends.iter().map(|b| b.as_str()).collect();
            let why = format!("not asked for (GUEST_E2E_BACKENDS=\"{}\")", asked.join(" "));
            self.t.skip("e2e/bwrap", &why);
        } else if host::have("bwrap") {
            self.run_backend(
                Backend::Bwrap,
                &image,
                &[
                    "--enforce-limits",
                    "true",
                    "--bwrap-cgroup",
                    "systemd-scope",
                ],
            );
            self.t.out(&format!(
                "timing scenarios-bwrap {}s",
                started.elapsed().as_secs()
            ));
        } else {
            self.t.skip("e2e/bwrap", "no bwrap in the guest");
        }
    }

    /// The suite's test CA, made afresh: its certificate's path for the image builder's
    /// `--extra-ca`, or why it could not be made.
    pub(super) fn make_test_ca(&self) -> Result<String, String> {
        let _ = std::fs::remove_dir_all(E2E_CA);
        let ca = Path::new(E2E_CA);
        std::fs::create_dir_all(ca)
            .map_err(|e| e.to_string())
            .and_then(|()| crate::ca::create(ca).map_err(|e| e.to_string()))
            .map_err(|e| format!("boxmaker-e2e ca: {e}"))?;
        Ok(ca.join(crate::ca::CA_CERT).display().to_string())
    }

    fn run_backend(&mut self, backend: Backend, image: &str, extra: &[&str]) {
        let out_path = self.results_file(&format!("e2e-{backend}.txt"));
        let mut c = host::cmd("timeout", [E2E_TIMEOUT_S.to_string()]);
        let scale = self.set.time_scale.clone();
        c.arg("bash")
            .arg(self.payload("src/tests/e2e/in-netns.sh"))
            .arg("--e2e")
            .arg(self.payload("bin/boxmaker-e2e"))
            .args(["--brokerd", &self.brokerd, "--ca", E2E_CA])
            .arg("--work")
            .arg(format!("/srv/boxmaker-e2e-{backend}"))
            .args([
                "--image",
                image,
                "--tools-root",
                super::TOOLS_ROOT,
                "--backends",
                backend.as_str(),
            ])
            .args(["--", "--time-scale", &scale])
            .args(extra)
            .args(&self.set.e2e_args);
        let file = std::fs::File::create(&out_path);
        let rc = match file.and_then(|f| Ok((f.try_clone()?, f))) {
            Ok((out, err)) => {
                c.stdout(Stdio::from(out)).stderr(Stdio::from(err));
                // `timeout` ends the suite first; this bound is for a `timeout` that hangs.
                let limit = Duration::from_secs(u64::from(E2E_TIMEOUT_S) + 60);
                system::status_within(c, limit).unwrap_or_else(|why| {
                    self.t.note(&why);
                    -1
                })
            }
            Err(e) => {
                self.t.fail(
                    &format!("e2e/{backend}"),
                    &format!("{}: {e}", out_path.display()),
                );
                return;
            }
        };
        let text = std::fs::read_to_string(&out_path).unwrap_or_default();
        let mut failed = false;
        for line in text.lines() {
            match result_line(line) {
                Some(Line::Ok(name)) => self.t.ok(&format!("e2e/{name}"), ""),
                Some(Line::Fail { name, why }) => {
                    failed = true;
                    self.t.fail(&format!("e2e/{name}"), why);
                }
                None => {}
            }
        }
        let times: String = text
            .lines()
            .filter(|l| l.starts_with("  ("))
            .map(|l| format!("{l}\n"))
            .collect();
        if !times.is_empty() {
            use std::io::Write;
            let _ = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(self.results_file("e2e-times.txt"))
                .and_then(|mut f| f.write_all(times.as_bytes()));
        }
        if rc != 0 && !failed {
            self.t.fail(
                &format!("e2e/{backend}"),
                &format!("tests/e2e/in-netns.sh exited with {rc} without a failed scenario"),
            );
            self.t.note(&host::tail(&text, 25));
        }
        let summary = text
            .lines()
            .rfind(|l| is_backend_summary(l, backend))
            .unwrap_or("");
        // A run whose lines never reached the file counted nothing: not a pass.
        if summary.is_empty() && !failed && rc == 0 {
            self.t.fail(
                &format!("e2e/{backend}"),
                &format!(
                    "{} has no \"{backend}: N passed\" line (exit {rc})",
                    out_path.display()
                ),
            );
            self.t.note(&host::tail(&text, 25));
        }
        self.t.note(&format!("{backend}: {summary}, exit {rc}"));
    }
}

/// `<backend>: N passed, ...`, the suite's own summary line.
fn is_backend_summary(line: &str, backend: Backend) -> bool {
    line.strip_prefix(backend.as_str())
        .and_then(|r| r.strip_prefix(": "))
        .is_some_and(|r| {
            let digits = r.bytes().take_while(u8::is_ascii_digit).count();
            digits > 0 && r[digits..].starts_with(" passed")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_suites_lines_are_read_as_the_guest_counts_them() {
        assert_eq!(
            result_line("ok podman/read-file"),
            Some(Line::Ok("podman/read-file"))
        );
        assert_eq!(
            result_line("FAIL bwrap/ttl: answer: late"),
            Some(Line::Fail {
                name: "bwrap/ttl",
                why: "answer: late"
            })
        );
        assert_eq!(
            result_line("FAIL bwrap/odd"),
            Some(Line::Fail {
                name: "bwrap/odd",
                why: "bwrap/odd"
            })
        );
        assert_eq!(result_line("  (podman/read-file 3.2s)"), None);
        assert_eq!(result_line("okay"), None);
    }

    #[test]
    fn the_backends_summary_is_told_from_other_lines() {
        assert!(is_backend_summary(
            "podman: 40 passed, 0 failed",
            Backend::Podman
        ));
        assert!(!is_backend_summary("podman: passed", Backend::Podman));
        assert!(!is_backend_summary("bwrap: 40 passed", Backend::Podman));
    }
}
