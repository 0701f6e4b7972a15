//! Toolsets (docs/design.md#toolsets): a grant on the suite's toolset of the host's git and
//! make runs those programs, a grant on the base toolset does not have them, the toolset's
//! git clones a repository through the call's egress proxy and its make builds it, a failing
//! test is fixed and passes in a staged grant whose owner then commits the fix alone, and a
//! build in a direct grant cannot touch a protected target.

use std::path::Path;

use client::{Body, Staged};
use serde_json::{json, Value};

use super::{
    call_on, check, show, Outcome, Suite, CALL_WAIT, DEV_GRANT, DEV_QUIET_GRANT, DEV_STAGED_GRANT,
};
use crate::system::User;

/// The project the staged grant works on: a source with a bug, its fix, and a Makefile whose
/// `make test` builds `build/sum` from the source and checks that it adds 2 and 3.
pub(super) struct Project {
    /// The source's file name.
    pub(super) source: &'static str,
    pub(super) broken: &'static str,
    pub(super) fixed: &'static str,
    pub(super) makefile: &'static str,
}

/// A C program built by the toolset's cc (a toolset from Debian's packages, with gcc).
pub(super) const C_PROJECT: Project = Project {
    source: "sum.c",
    broken: "#include <stdio.h>\n#include <stdlib.h>\n\nint main(int argc, char **argv)\n{\n\tif (argc != 3)\n\t\treturn 2;\n\tprintf(\"%d\\n\", atoi(argv[1]) - atoi(argv[2]));\n\treturn 0;\n}\n",
    fixed: "#include <stdio.h>\n#include <stdlib.h>\n\nint main(int argc, char **argv)\n{\n\tif (argc != 3)\n\t\treturn 2;\n\tprintf(\"%d\\n\", atoi(argv[1]) + atoi(argv[2]));\n\treturn 0;\n}\n",
    makefile: "test: build/sum\n\
\t./build/sum 2 3 | grep -qx 5\n\
\t@echo test passed\n\
\n\
build/sum: sum.c\n\
\tmkdir -p build && cc -O0 -o build/sum sum.c\n",
};

/// A shell program "built" by make (a toolset of the host's git and make, which has no
/// compiler).
pub(super) const SHELL_PROJECT: Project = Project {
    source: "sum.sh",
    broken: "#!/bin/sh\necho $(($1 - $2))\n",
    fixed: "#!/bin/sh\necho $(($1 + $2))\n",
    makefile: "test: build/sum\n\
\t./build/sum 2 3 | grep -qx 5\n\
\t@echo test passed\n\
\n\
build/sum: sum.sh\n\
\tmkdir -p build && cp sum.sh build/sum && chmod +x build/sum\n",
};

/// The subject of the project's one commit, which `git log` in the sandbox shows.
const FIRST_COMMIT: &str = "sum: add two numbers";

/// The project the staged grant works on, the service user's: a git repository of one commit
/// holding a Makefile and a source with a failing test (made by the host's git, none of its
/// configuration).
pub(super) fn make_project(dir: &Path, user: &User, project: &Project) -> Result<(), String> {
    let io = |e: std::io::Error| format!("{}: {e}", dir.display());
    std::fs::create_dir_all(dir).map_err(io)?;
    std::fs::write(dir.join("Makefile"), project.makefile).map_err(io)?;
    std::fs::write(dir.join(project.source), project.broken).map_err(io)?;
    std::fs::write(dir.join(".gitignore"), "build/\n").map_err(io)?;
    let git = |args: &[&str]| -> Result<(), String> {
        let out = std::process::Command::new("git")
            .args(["-c", "user.name=e2e", "-c", "user.email=e2e@example.org"])
            .args([
                "-c",
                "init.defaultBranch=main",
                "-c",
                "commit.gpgsign=false",
            ])
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .map_err(|e| format!("git: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "git {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    };
    if !dir.join(".git").exists() {
        git(&["init", "-q"])?;
        git(&["add", "."])?;
        git(&["commit", "-q", "-m", FIRST_COMMIT])?;
    }
    user.chown_tree(dir)
}

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
        let out = self.dev_shell(
            "git --version; make --version | head -n 1; echo \"path=$PATH\"; \
             awk '$5 == \"/\" || $5 == \"/usr\" || $5 == \"/bin\" { print \"mount\", $5, $6 }' /proc/self/mountinfo",
        )?;
        // The toolset is read-only on both backends; bwrap's binds are nosuid and nodev too.
        // (Podman's root shows `ro` alone: a filesystem mounted in its user namespace opens no
        // device node, and no_new_privs keeps a setuid file from raising a privilege.)
        let mounts: Vec<&str> = out.lines().filter(|l| l.starts_with("mount ")).collect();
        let flags = |l: &str| -> Vec<String> {
            l.split(' ')
                .nth(2)
                .unwrap_or("")
                .split(',')
                .map(str::to_string)
                .collect()
        };
        let held = |l: &&str| {
            let f = flags(l);
            f.iter().any(|x| x == "ro")
                && (self.backend == super::Backend::Podman
                    || f.iter().any(|x| x == "nosuid") && f.iter().any(|x| x == "nodev"))
        };
        check(
            mounts.iter().any(|l| l.starts_with("mount / ")) && mounts.iter().all(held),
            || format!("the toolset is not mounted read-only (nosuid, nodev on bwrap): {mounts:?}"),
        )?;
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
    /// call of its own, a clone from other.test, which is not among the grant's shell hosts, refused at `CONNECT`.
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
                && e["down"].as_u64().is_some_and(|n| n > 0)
                // git keeps its tunnel for the clone's requests, as the host keeps the
                // connection: well under the suite's egress_connections.
                && e["connections"].as_u64().is_some_and(|n| n < super::NET_CONNECTIONS),
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

impl Suite {
    /// A call of the staged grant on the toolset, in `session`: a result's content.
    fn dev_staged(&mut self, session: &str, tool: &str, args: Value) -> Result<String, String> {
        self.calls += 1;
        let (id, wait) = (self.call_id(), self.t(CALL_WAIT));
        let body = call_on(
            &self.socket,
            wait,
            session,
            &id,
            DEV_STAGED_GRANT,
            tool,
            args,
            None,
        )?;
        match body {
            Body::Result { content, .. } => Ok(content),
            other => Err(format!("{tool}: expected a result, got {}", show(&other))),
        }
    }

    /// The whole task in a staged grant: `make test` fails, the agent fixes the source with
    /// `write_file`, `make test` passes in the sandbox; `changes` holds the fix and the build's
    /// output; the owner commits the fix alone; the host has the fix and no build output, and
    /// the rest is discarded.
    pub(super) fn toolset_fixes_a_failing_test_staged(&mut self) -> Outcome {
        let project = self.work.join("project");
        let session = format!("{}-{}", self.session, self.backend.as_str());
        let cwd = project.display().to_string();
        let log = json!({ "command": "git log --format=%s; git config --show-origin --list", "cwd": cwd });
        let out = self.dev_staged(&session, "shell", log)?;
        check(out.starts_with(&format!("{FIRST_COMMIT}\n")), || {
            format!("git log in the sandbox: {out:?}")
        })?;
        // git reads the sandbox's own configuration and the repository's, nothing of the
        // host's or a user's.
        let origins: Vec<&str> = out
            .lines()
            .filter_map(|l| l.strip_prefix("file:"))
            .filter_map(|l| l.split('\t').next())
            .collect();
        check(
            origins.contains(&"/tmp/.gitconfig")
                && origins
                    .iter()
                    .all(|o| *o == "/tmp/.gitconfig" || *o == ".git/config"),
            || format!("git in the sandbox read another configuration: {out:?}"),
        )?;
        let make = json!({ "command": "make test 2>&1; echo \"make=$?\"", "cwd": cwd });
        let out = self.dev_staged(&session, "shell", make.clone())?;
        check(
            !out.contains("test passed") && !out.contains("make=0\n"),
            || format!("make test passed before the fix: {out:?}"),
        )?;
        let sum = project.join(self.project.source);
        self.dev_staged(
            &session,
            "write_file",
            json!({ "path": sum, "content": self.project.fixed }),
        )?;
        let out = self.dev_staged(&session, "shell", make)?;
        check(
            out.contains("test passed") && out.contains("make=0\n"),
            || format!("make test did not pass after the fix: {out:?}"),
        )?;
        let mut owner = self.owner()?;
        let listed = owner
            .changes(Some(&session), Some(DEV_STAGED_GRANT), false)
            .map_err(|e| e.to_string())?;
        let paths: Vec<String> = listed.changes.iter().map(|c| c.path.clone()).collect();
        let build = project.join("build").display().to_string();
        let sum_path = sum.display().to_string();
        check(
            paths.contains(&sum_path) && paths.iter().any(|p| p.starts_with(&build)),
            || format!("changes does not hold the fix and the build: {paths:?}"),
        )?;
        let committed = owner
            .commit(
                &Staged {
                    session: &session,
                    grant: Some(DEV_STAGED_GRANT),
                    paths: std::slice::from_ref(&sum_path),
                },
                true,
            )
            .map_err(|e| e.to_string())?;
        check(
            committed.committed == [sum_path.clone()] && committed.conflicts.is_empty(),
            || format!("the commit of the fix alone: {committed:?}"),
        )?;
        let host = std::fs::read_to_string(&sum).map_err(|e| format!("{sum_path}: {e}"))?;
        check(
            host == self.project.fixed && !project.join("build").exists(),
            || {
                format!(
                    "the host has {host:?} and build/ {}",
                    project.join("build").exists()
                )
            },
        )?;
        owner
            .discard(&Staged {
                session: &session,
                grant: Some(DEV_STAGED_GRANT),
                paths: &[],
            })
            .map_err(|e| e.to_string())?;
        // Back as it was, for another backend's run.
        std::fs::write(&sum, self.project.broken).map_err(|e| format!("{sum_path}: {e}"))
    }

    /// A build in the direct grant on the toolset whose recipe writes into `vendor/`: the write
    /// fails read-only, the build fails, and the host's vendored file is as it was.
    pub(super) fn toolset_build_cannot_touch_protected(&mut self) -> Outcome {
        let dir = self.rw.join(format!("vendored-{}", self.backend.as_str()));
        let lib = dir.join("vendor").join("lib.sh");
        let io = |e: std::io::Error| format!("{}: {e}", dir.display());
        std::fs::create_dir_all(dir.join("vendor")).map_err(io)?;
        std::fs::write(&lib, "upstream\n").map_err(io)?;
        std::fs::write(
            dir.join("Makefile"),
            "all:\n\techo patched >> vendor/lib.sh\n\trm -f vendor/lib.sh\n",
        )
        .map_err(io)?;
        self.user.chown_tree(&dir)?;
        let out = self.dev_shell(&format!(
            "cd {} && make 2>&1; echo \"make=$?\"",
            dir.display()
        ))?;
        check(
            out.contains("Read-only file system") && out.contains("make=2\n"),
            || format!("the build was not stopped at vendor/: {out:?}"),
        )?;
        let host = std::fs::read_to_string(&lib).map_err(|e| format!("{}: {e}", lib.display()))?;
        check(host == "upstream\n", || {
            format!("the vendored file changed on the host: {host:?}")
        })
    }
}

/// How many `make test` runs from a clean tree each timing of the toolset bench takes.
const MAKE_RUNS: u32 = 20;

/// The shell loop the toolset bench times: [`MAKE_RUNS`] clean builds and tests, make's
/// recipes run by `sh` (given: the host's run names the toolset's busybox, as the sandbox's
/// /bin/sh is).
fn make_loop(sh: Option<&Path>) -> String {
    let shell = sh.map_or(String::new(), |p| format!(" SHELL={}", p.display()));
    format!(
        "i=0; while [ $i -lt {MAKE_RUNS} ]; do rm -rf build; make -s test{shell} >/dev/null || exit 1; \
         i=$((i + 1)); done; rm -rf build"
    )
}

/// A directory's size in bytes, files and links, without following a link.
fn tree_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => tree_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

impl Suite {
    /// The toolset bench: the same shell call on the base toolset and on the toolset of git
    /// and make (two grants that differ only in `toolset`), taking turns, `n` each after a
    /// warm-up; then `make test` of the staged project, [`MAKE_RUNS`] times from a clean tree,
    /// in the sandbox (timed inside it, by `/proc/uptime`, so the call's own cost is not in
    /// it) against the same loop with the same programs on the host; and the two trees' sizes.
    pub(super) fn bench_toolset(&mut self, n: usize) -> Result<Value, String> {
        use super::{percentiles, QUIET_GRANT};
        use std::time::{Duration, Instant};
        let (mut toolset, mut base) = self.alternate_echo(DEV_QUIET_GRANT, QUIET_GRANT, n)?;
        let (bp50, bp95) = percentiles(&mut base);
        let (tp50, tp95) = percentiles(&mut toolset);
        // make test in the sandbox, on the staged grant (its writes go to the session's layer).
        let project = self.work.join("project");
        let session = format!("s-bench-toolset-{}", std::process::id());
        let command = format!(
            "read a _ </proc/uptime; {}; read b _ </proc/uptime; echo \"uptime $a $b\"",
            make_loop(None)
        );
        let cwd = project.display().to_string();
        let (mut inside, mut host) = (Vec::new(), Vec::new());
        let host_copy = self.work.join("bench-make");
        // The fixed source, in the session's layer only: each run builds and passes.
        self.dev_staged(
            &session,
            "write_file",
            json!({ "path": project.join(self.project.source), "content": self.project.fixed }),
        )?;
        for i in 0..=n.min(10) {
            let out =
                self.dev_staged(&session, "shell", json!({ "command": command, "cwd": cwd }))?;
            let (a, b) = out
                .lines()
                .find_map(|l| l.strip_prefix("uptime "))
                .and_then(|l| l.split_once(' '))
                .and_then(|(a, b)| Some((a.parse::<f64>().ok()?, b.parse::<f64>().ok()?)))
                .ok_or_else(|| format!("no timing in {out:?}"))?;
            let _ = std::fs::remove_dir_all(&host_copy);
            std::fs::create_dir_all(&host_copy).map_err(|e| e.to_string())?;
            std::fs::write(host_copy.join("Makefile"), self.project.makefile)
                .map_err(|e| e.to_string())?;
            std::fs::write(host_copy.join(self.project.source), self.project.fixed)
                .map_err(|e| e.to_string())?;
            // The same programs outside the sandbox: the toolset's busybox for the shell and
            // its applets, the host's make (the toolset's is a copy of it).
            let tree = self.dev_tree.clone().ok_or("no --dev-tree")?;
            let sh = tree.join("bin").join("sh");
            let t = Instant::now();
            let status = std::process::Command::new(&sh)
                .args(["-c", &make_loop(Some(&sh))])
                .env("PATH", format!("{}:/usr/bin", tree.join("bin").display()))
                .current_dir(&host_copy)
                .stdout(std::process::Stdio::null())
                .status()
                .map_err(|e| e.to_string())?;
            let on_host = t.elapsed();
            if !status.success() {
                return Err(format!("make test on the host: {status}"));
            }
            if i > 0 {
                inside.push(Duration::from_secs_f64((b - a).max(0.0)));
                host.push(on_host);
            }
        }
        let _ = std::fs::remove_dir_all(&host_copy);
        self.owner()?
            .discard(&Staged {
                session: &session,
                grant: Some(DEV_STAGED_GRANT),
                paths: &[],
            })
            .map_err(|e| e.to_string())?;
        let (ip50, _) = percentiles(&mut inside);
        let (hp50, _) = percentiles(&mut host);
        let tree = self.dev_tree.as_deref().map_or(0, tree_bytes);
        let base_tree = self.base_tree.as_deref().map_or(0, tree_bytes);
        let b = self.backend.as_str();
        println!(
            "bench {b} toolset: base p50 {bp50:>7.1} ms p95 {bp95:>7.1} ms ; toolset p50 {tp50:>7.1} ms \
             p95 {tp95:>7.1} ms ; ratio p50 {:.2} (n {n}) ; make test in the sandbox p50 {ip50:.0} ms, \
             on the host {hp50:.0} ms ; trees {base_tree} and {tree} bytes",
            tp50 / bp50
        );
        Ok(json!({
            "bench": "toolset",
            "backend": b,
            "calls": n,
            "base_p50_ms": bp50,
            "base_p95_ms": bp95,
            "toolset_p50_ms": tp50,
            "toolset_p95_ms": tp95,
            "ratio_p50": tp50 / bp50,
            "make_runs": MAKE_RUNS,
            "make_sandbox_p50_ms": ip50,
            "make_host_p50_ms": hp50,
            "tree_bytes": tree,
            "base_tree_bytes": base_tree,
        }))
    }
}

impl Suite {
    /// A grant's cache (docs/design.md#grant-caches): [`DEV_GRANT`]'s shell sandboxes find
    /// `XDG_CACHE_HOME` and the tool caches at `/tmp/.cache`, and what one call leaves there
    /// the next finds; the staged grant's cache is another, empty one, and the first's
    /// directory is not in its sandbox; a link left in the cache reaches nothing its grant
    /// does not mount; a call that fills the cache past `max_cache_bytes` leaves it emptied,
    /// the link's target untouched; `status` lists both caches and `gc --caches` removes them.
    pub(super) fn grant_cache(&mut self) -> Outcome {
        let caches = self.user.home.join("caches");
        let mine = caches.join(DEV_GRANT);
        let project = self.work.join("project");
        // What an earlier run's caches held is not this run's.
        for g in [DEV_GRANT, DEV_STAGED_GRANT] {
            let _ = std::fs::remove_dir_all(caches.join(g));
        }
        let out = self.dev_shell(&format!(
            "echo \"cache=$XDG_CACHE_HOME cargo=$CARGO_HOME\"; \
             echo kept > \"$XDG_CACHE_HOME/mark\" && ln -s {} \"$XDG_CACHE_HOME/other\" && echo wrote",
            project.display()
        ))?;
        check(
            out.contains("cache=/tmp/.cache cargo=/tmp/.cache/cargo\n") && out.contains("wrote\n"),
            || format!("the grant's cache is not where its variables point: {out:?}"),
        )?;
        let on_host = std::fs::read_to_string(mine.join("mark")).unwrap_or_default();
        check(on_host == "kept\n", || {
            format!("{} does not hold what the call left", mine.display())
        })?;
        let out = self.dev_shell(
            "cat \"$XDG_CACHE_HOME/mark\"; cat \"$XDG_CACHE_HOME/other/Makefile\" 2>&1; echo \"other=$?\"",
        )?;
        check(
            out.starts_with("kept\n") && out.contains("other=1\n") && !out.contains("build/sum"),
            || {
                format!("the next call did not find the cache, or its link reached the project: {out:?}")
            },
        )?;
        let session = format!("{}-cache-{}", self.session, self.backend.as_str());
        let theirs = self.dev_staged(
            &session,
            "shell",
            json!({ "command": format!(
                "echo \"n=$(ls -A \"$XDG_CACHE_HOME\" | wc -l)\"; cat {}/mark 2>&1; echo \"mark=$?\"",
                mine.display()
            ) }),
        )?;
        check(
            theirs.contains("n=0\n") && theirs.contains("mark=1\n") && !theirs.contains("kept"),
            || format!("another grant's sandbox saw the first grant's cache: {theirs:?}"),
        )?;
        self.cache_status(&[(DEV_GRANT, true), (DEV_STAGED_GRANT, false)])?;

        // Past the bound: the call's writes are kept until it ends, then the cache is emptied.
        let out = self.dev_shell(&format!(
            "head -c {} /dev/zero > \"$XDG_CACHE_HOME/big\"; echo \"big=$?\"",
            2 * super::DEV_CACHE_BYTES
        ))?;
        check(out.contains("big=0\n"), || {
            format!("the cache could not be written: {out:?}")
        })?;
        let out = self.dev_shell("echo \"n=$(ls -A \"$XDG_CACHE_HOME\" | wc -l)\"")?;
        check(out.contains("n=0\n"), || {
            format!("a cache past its bound was not emptied: {out:?}")
        })?;
        check(project.join("Makefile").is_file(), || {
            "emptying the cache followed its link into the project".into()
        })?;
        // What a call hides from brokerd's count behind a directory of mode 000 (its own
        // user's) is counted as over all the same, and removed.
        let out = self.dev_shell(&format!(
            "mkdir -p \"$XDG_CACHE_HOME/a/b\" && head -c {} /dev/zero > \"$XDG_CACHE_HOME/a/b/big\" \
             && chmod 000 \"$XDG_CACHE_HOME/a\"; echo \"hid=$?\"",
            2 * super::DEV_CACHE_BYTES
        ))?;
        check(out.contains("hid=0\n"), || {
            format!("the cache could not be written: {out:?}")
        })?;
        let out = self.dev_shell("echo \"n=$(ls -A \"$XDG_CACHE_HOME\" | wc -l)\"")?;
        let aside: Vec<String> = std::fs::read_dir(&caches)
            .map_err(|e| format!("{}: {e}", caches.display()))?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with('.'))
            .collect();
        check(out.contains("n=0\n") && aside.is_empty(), || {
            format!("a cache hidden behind mode 000 was not emptied: {out:?}, left {aside:?}")
        })?;
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        check(
            log.contains("the grant's cache was over its bound and is emptied"),
            || "the journal does not say the cache was emptied".into(),
        )?;

        // gc sweeps as at a start: the last call's proxy must be gone first.
        self.await_settled();
        let before = std::fs::read_dir(&caches).map_or(0, |d| {
            d.flatten()
                .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                .count()
        });
        let mut c = self.user.command(&self.brokerd);
        c.args(["gc", "--caches", "--config"]).arg(&self.config);
        let (code, text) = crate::system::output(c, self.t(std::time::Duration::from_secs(60)))?;
        let left = std::fs::read_dir(&caches).map_or(0, |d| d.count());
        check(
            code == 0
                && before >= 2
                && text.contains(&format!("removed {before} cache(s)"))
                && left == 0,
            || format!("gc --caches exited {code}, said {text:?}, left {left} entries"),
        )
    }

    /// `status` lists the two grants' caches, each with its bound and, where `used`, bytes.
    fn cache_status(&self, want: &[(&str, bool)]) -> Outcome {
        let mut client = client::Client::connect(&self.socket).map_err(|e| e.to_string())?;
        let _ = client.set_timeout(Some(self.t(std::time::Duration::from_secs(10))));
        let req = client::Request::Status {
            id: client.next_id(),
            v: None,
        };
        let caches = match client.request(&req).map_err(|e| e.to_string())?.body {
            Body::Status(s) => s.caches,
            other => return Err(format!("status answered {}", show(&other))),
        };
        let listed: Vec<(&str, bool)> = caches
            .iter()
            .map(|c| (c.grant.as_str(), c.bytes > 0))
            .collect();
        check(
            listed == want
                && caches
                    .iter()
                    .all(|c| c.path.ends_with(&format!("/caches/{}", c.grant))),
            || format!("status lists the caches as {caches:?}"),
        )
    }
}

impl Suite {
    /// The toolset's tree changed under a running brokerd (docs/design.md#toolsets): its
    /// `/bin/toolkit` replaced by one that answers another version. On bwrap the next call
    /// finds the change, checks the toolset again and answers `unavailable` with the toolset's
    /// runbook entry, never running on the changed tree; put back, the next call checks again
    /// and runs. Podman runs the image pinned by its ID, which no change to a tree reaches.
    pub(super) fn toolset_changed_after_start(&mut self) -> Outcome {
        let Some(tree) = self.dev_tree.clone() else {
            return Err("the suite has no toolset tree".into());
        };
        let toolkit = tree.join("bin/toolkit");
        let aside = tree.join("bin/toolkit.real");
        let io = |e: std::io::Error| format!("{}: {e}", toolkit.display());
        std::fs::rename(&toolkit, &aside).map_err(io)?;
        let other = "#!/bin/sh\n[ \"$1\" = version ] && { echo 0.0.0-other; exit 0; }\nexec /bin/toolkit.real \"$@\"\n";
        let swapped = std::fs::write(&toolkit, other).and_then(|()| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&toolkit, std::fs::Permissions::from_mode(0o755))
        });
        let answer = swapped.map_err(io).and_then(|()| {
            self.call_as(DEV_GRANT, "shell", json!({ "command": "echo ran" }), None)
        });
        // Put back whatever happened, so that no later scenario runs on the changed tree.
        let _ = std::fs::remove_file(&toolkit);
        std::fs::rename(&aside, &toolkit).map_err(io)?;
        let answer = answer?;
        match self.backend {
            super::Backend::Bwrap => check(matches!(&answer, Body::Unavailable { .. }), || {
                format!(
                    "a call on the changed tree was not refused: {}",
                    show(&answer)
                )
            })?,
            super::Backend::Podman => check(
                matches!(&answer, Body::Result { content, .. } if content.starts_with("ran\n")),
                || format!("a call on the pinned image did not run: {}", show(&answer)),
            )?,
        }
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        if self.backend == super::Backend::Bwrap {
            check(log.contains("0.0.0-other"), || {
                "the journal does not say what the check found".into()
            })?;
        }
        let out = self.dev_shell("echo ran")?;
        check(out.starts_with("ran\n"), || {
            format!("the toolset put back did not run again: {out:?}")
        })
    }
}
