//! Toolsets (docs/design.md#toolsets): a grant on the suite's toolset of the host's git and
//! make runs those programs, a grant on the base toolset does not have them, and the toolset's
//! git clones a repository through the call's egress proxy and its make builds it.

use client::Body;

use super::{check, show, Outcome, Suite, DEV_GRANT};

impl Suite {
    /// A shell call on [`DEV_GRANT`]: its output.
    fn dev_shell(&mut self, command: &str) -> Result<String, String> {
        // As for any call with a proxy: the last one's clean-up first (`net_shell`).
        self.await_settled();
        let args = serde_json::json!({ "command": command });
        match self.call_as(DEV_GRANT, "shell", args, None)? {
            Body::Result { content, .. } => Ok(content),
            other => Err(format!("expected a result, got {}", show(&other))),
        }
    }

    /// The grant's toolset has git and make, in `PATH`; the base toolset has neither, and its
    /// calls' records name no toolset, where the toolset's name one.
    pub(super) fn toolset_runs_its_own_programs(&mut self) -> Outcome {
        let out =
            self.dev_shell("git --version; make --version | head -n 1; echo \"path=$PATH\"")?;
        check(
            out.contains("git version") && out.contains("GNU Make") && out.contains("/usr/bin"),
            || format!("the toolset's git and make did not run: {out:?}"),
        )?;
        let record = self.audited_with("status")?;
        check(record["toolset"] == DEV_GRANT, || {
            format!("the outcome record does not name the toolset: {record}")
        })?;
        let out = self.shell("git --version; echo \"rc=$?\"; make --version; echo \"rc=$?\"")?;
        check(out.contains("rc=127\n") && !out.contains("rc=0"), || {
            format!("the base toolset ran git or make: {out:?}")
        })?;
        let record = self.audited_with("status")?;
        check(record.get("toolset").is_none(), || {
            format!("a base toolset call's record names a toolset: {record}")
        })
    }

    /// `git clone https://ok.test/files/repo.git` by the proxy variables alone, `git log` and
    /// `make test` in the clone (which lands in the grant directory on the host); then, in a
    /// call of its own (a dumb-HTTP clone takes most of the suite's `egress_connections`), a
    /// clone from other.test, which is not among the grant's shell hosts, refused at `CONNECT`.
    /// Each record says where its call went and what was refused. (curl by the variables alone
    /// is `shell-egress-reaches-granted-host`.)
    pub(super) fn toolset_clones_and_builds(&mut self) -> Outcome {
        let name = format!("clone-{}", self.backend.as_str());
        let rw = self.rw.display().to_string();
        let out = self.dev_shell(&format!(
            "cd {rw} && rm -rf {name} other; \
             git clone -q https://ok.test/files/repo.git {name} 2>&1; echo \"clone=$?\"; \
             cd {name} && git log --format=%s && make -s test; echo \"make=$?\""
        ))?;
        check(out.contains("clone=0\n"), || {
            format!("git clone through the proxy failed: {out:?}")
        })?;
        check(
            out.contains("e2e: a project to build\n")
                && out.contains("built and tested\n")
                && out.contains("make=0\n"),
            || format!("git log or make test in the clone failed: {out:?}"),
        )?;
        let built = self.rw.join(&name).join("hello");
        check(built.is_file(), || {
            format!(
                "the host does not hold what make built, {}",
                built.display()
            )
        })?;
        let e = self.egress_audited()?;
        check(
            e["hosts"][0]["host"] == "ok.test"
                && e["hosts"].as_array().is_some_and(|h| h.len() == 1)
                && e["down"].as_u64().is_some_and(|n| n > 0),
            || format!("the record does not show the clone from ok.test: {e}"),
        )?;
        let out = self.dev_shell(&format!(
            "cd {rw} && git clone -q https://other.test/files/repo.git other 2>&1; echo \"other=$?\"; \
             ls -d other 2>/dev/null"
        ))?;
        check(
            out.contains("other=128\n")
                && out.contains("response 403")
                && !out.contains("\nother\n"),
            || format!("the clone from a host not in shell_hosts was not refused: {out:?}"),
        )?;
        let e = self.egress_audited()?;
        check(
            e["connections"] == 0
                && e["refusals"][0]["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("matches no --allow pattern")),
            || format!("the record does not show other.test refused: {e}"),
        )
    }
}
