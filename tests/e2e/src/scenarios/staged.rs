//! Staged writes end to end (docs/design.md#staged-writes-and-owners): the `e2e-staged` grant
//! keeps each session's writes in its layer, and the suite (an owner) reads, commits and
//! discards them. Each scenario leaves the staged directory and the session's layer empty.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use client::{Body, Client, Staged};
use serde_json::{json, Value};

use super::{call_on, check, show, Backend, Outcome, Suite, CALL_WAIT, GRANT, STAGED_GRANT};

/// `[broker] max_staged_bytes` of the suite's brokerd: small, for the bound's scenario.
pub const MAX_STAGED_BYTES: u64 = 4 * 1024 * 1024;
/// The changed files of the layer the staged bench times `changes` on (the performance
/// target: under 100 ms for 1,000).
const CHANGES_LAYER: usize = 1000;

/// Lists a tree, the same way inside a sandbox and on the host: each path below the working
/// directory with its type, a link's target, a file's md5 and permission bits.
const LISTING: &str = "find . -mindepth 1 | sort | while read -r p; do \
    if [ -L \"$p\" ]; then echo \"$p l $(readlink \"$p\")\"; \
    elif [ -d \"$p\" ]; then echo \"$p d $(stat -c %a \"$p\")\"; \
    else echo \"$p f $(stat -c %a \"$p\") $(md5sum < \"$p\" | cut -d' ' -f1)\"; fi; done";

impl Suite {
    /// This run's session of the scenario: layers outlive brokerd (they are the owner's), so
    /// another run's (or backend's) of the same scenario must not be this one's.
    fn staged_session(&self) -> String {
        let name: String = self.session.chars().take(40).collect();
        format!(
            "{name}-{}{}",
            &self.backend.as_str()[..1],
            std::process::id()
        )
    }

    /// A call of the staged grant; an `ask` (a command the classifier reads as dangerous) is
    /// approved, as an owner who trusts the staged layer would: what runs still waits there.
    fn staged_call(&mut self, session: &str, tool: &str, args: Value) -> Result<Body, String> {
        self.calls += 1;
        let id = self.call_id();
        let wait = self.t(CALL_WAIT);
        let send = |approval: Option<String>| {
            call_on(
                &self.socket,
                wait,
                session,
                &id,
                STAGED_GRANT,
                tool,
                args.clone(),
                approval,
            )
        };
        match send(None)? {
            Body::Ask { ticket, .. } => send(Some(ticket)),
            other => Ok(other),
        }
    }

    /// A shell command in the staged directory, which must give a result.
    fn staged_shell(&mut self, session: &str, command: &str) -> Result<String, String> {
        let cwd = self.staged.display().to_string();
        match self.staged_call(session, "shell", json!({ "command": command, "cwd": cwd }))? {
            Body::Result { content, .. } => Ok(content),
            other => Err(format!("expected a result, got {}", show(&other))),
        }
    }

    pub(super) fn owner(&self) -> Result<Client, String> {
        let c = Client::connect(&self.socket).map_err(|e| e.to_string())?;
        c.set_timeout(Some(self.t(CALL_WAIT)))
            .map_err(|e| e.to_string())?;
        Ok(c)
    }

    /// The session's staged changes: (path relative to the staged directory, kind).
    fn staged_changes(&self, session: &str) -> Result<Vec<(String, String)>, String> {
        let changes = self
            .owner()?
            .changes(Some(session), Some(STAGED_GRANT), false)
            .map_err(|e| e.to_string())?;
        Ok(changes
            .changes
            .iter()
            .map(|c| {
                let rel = Path::new(&c.path)
                    .strip_prefix(&self.staged)
                    .map_or(c.path.clone(), |p| p.display().to_string());
                (rel, c.change.as_str().to_string())
            })
            .collect())
    }

    fn discard_all(&self, session: &str) -> Outcome {
        self.owner()?
            .discard(&Staged {
                session,
                grant: Some(STAGED_GRANT),
                paths: &[],
            })
            .map(drop)
            .map_err(|e| e.to_string())
    }

    /// The staged directory filled afresh: files, a directory, a vendored file, all the
    /// service user's.
    fn staged_fill(&self) -> Outcome {
        let d = &self.staged;
        clear_dir(d)?;
        let fill = || -> std::io::Result<()> {
            std::fs::create_dir_all(d.join("src"))?;
            std::fs::create_dir_all(d.join("vendor"))?;
            std::fs::write(d.join("a.txt"), "a\n")?;
            std::fs::write(d.join("b.txt"), "b\n")?;
            std::fs::write(d.join("src/main.rs"), "fn main() {}\n")?;
            std::fs::write(d.join("vendor/lib.c"), "int a;\n")?;
            std::fs::write(d.join(".hidden"), "h\n")?;
            Ok(())
        };
        fill().map_err(|e| format!("host: {e}"))?;
        self.user.chown_tree(d)
    }

    fn host_listing(&self) -> Result<String, String> {
        let out = Command::new("sh")
            .args(["-c", LISTING])
            .current_dir(&self.staged)
            .output()
            .map_err(|e| format!("host listing: {e}"))?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// A command the classifier cannot read (`sh -c "$(printf ...)"`, run in `auto`)
    /// deletes everything: the host's directory is byte for byte as it was, `changes` lists
    /// every deletion, and a discard leaves it so.
    pub(super) fn staged_destructive(&mut self) -> Outcome {
        let session = self.staged_session();
        self.staged_fill()?;
        let before = self.host_listing()?;
        let out = self.staged_shell(
            &session,
            "sh -c \"$(printf '%s' 'rm -rf ./* ./.[!.]*; ls -A; echo gone')\"",
        )?;
        check(out.starts_with("gone\n"), || format!("output {out:?}"))?;
        check(self.host_listing()? == before, || {
            "the host's directory changed".to_string()
        })?;
        let changes = self.staged_changes(&session)?;
        let mut deleted: Vec<&str> = changes
            .iter()
            .filter(|(_, k)| k == "deleted")
            .map(|(p, _)| p.as_str())
            .collect();
        deleted.sort();
        // Every file a deletion removes is listed, below a deleted directory too.
        let want = [
            ".hidden",
            "a.txt",
            "b.txt",
            "src",
            "src/main.rs",
            "vendor",
            "vendor/lib.c",
        ];
        check(deleted == want && changes.len() == want.len(), || {
            format!("changes {changes:?}")
        })?;
        self.discard_all(&session)?;
        check(self.staged_changes(&session)?.is_empty(), || {
            "changes left after a discard".into()
        })?;
        check(self.host_listing()? == before, || {
            "the host's directory changed after the discard".to_string()
        })
    }

    /// What a session stages is there for its next call, and for no other session or the
    /// host.
    pub(super) fn staged_session_own(&mut self) -> Outcome {
        let session = self.staged_session();
        let other = format!("{session}-other");
        self.staged_fill()?;
        let file = self.staged.join("mine.txt");
        let path = file.display().to_string();
        match self.staged_call(
            &session,
            "write_file",
            json!({ "path": path, "content": "mine\n" }),
        )? {
            Body::Result { .. } => {}
            other => return Err(format!("write_file: {}", show(&other))),
        }
        match self.staged_call(&session, "read_file", json!({ "path": path }))? {
            Body::Result { content, .. } => {
                check(content == "mine\n", || format!("read back {content:?}"))?
            }
            other => return Err(format!("read_file in the session: {}", show(&other))),
        }
        // Another session reads the host's directory, where the file is not: the toolkit's
        // own not-found answer, nothing else (an unavailable or refused call proves nothing).
        let theirs = self.staged_call(&other, "read_file", json!({ "path": path }))?;
        check(
            matches!(&theirs, Body::Result { content, .. }
                if content.starts_with("read_file: ")
                    && content.contains("mine.txt")
                    && content.ends_with(": no such file or directory\n")),
            || format!("another session's read_file: {}", show(&theirs)),
        )?;
        check(!file.exists(), || "the file is on the host".into())?;
        self.discard_all(&session)
    }

    /// A commit lands exactly what the sandbox saw (compared as a listing made the same way
    /// inside the sandbox and on the host), a link to /etc as a link.
    pub(super) fn staged_commit_exact(&mut self) -> Outcome {
        let session = self.staged_session();
        self.staged_fill()?;
        let seen = self.staged_shell(
            &session,
            &format!(
                "echo A >> a.txt && rm b.txt && mkdir -p new/deep && echo d > new/deep/d && \
                 chmod 600 src/main.rs && ln -s /etc etc-link && rm -rf src && mkdir src && \
                 echo s > src/lib.rs && {LISTING}"
            ),
        )?;
        let seen = seen
            .strip_suffix("\n[exit 0]")
            .unwrap_or(&seen)
            .trim_end_matches('\n')
            .to_string();
        let committed = self
            .owner()?
            .commit(
                &Staged {
                    session: &session,
                    grant: Some(STAGED_GRANT),
                    paths: &[],
                },
                false,
            )
            .map_err(|e| e.to_string())?;
        check(
            committed.conflicts.is_empty() && committed.skipped.is_empty(),
            || format!("commit {committed:?}"),
        )?;
        let host = self.host_listing()?;
        check(host.trim_end_matches('\n') == seen, || {
            format!("the host after the commit:\n{host}\nthe sandbox saw:\n{seen}")
        })?;
        let link = std::fs::symlink_metadata(self.staged.join("etc-link"))
            .map_err(|e| format!("etc-link: {e}"))?;
        check(link.file_type().is_symlink(), || {
            "etc-link is not a link".into()
        })?;
        check(self.staged_changes(&session)?.is_empty(), || {
            "changes left after the commit".into()
        })
    }

    /// The host edits a file after the session staged it: that path is a conflict, the rest
    /// lands.
    pub(super) fn staged_conflict(&mut self) -> Outcome {
        let session = self.staged_session();
        self.staged_fill()?;
        self.staged_shell(&session, "echo staged > a.txt && echo staged > b.txt")?;
        std::fs::write(self.staged.join("a.txt"), "the owner's edit\n")
            .map_err(|e| format!("host: {e}"))?;
        let committed = self
            .owner()?
            .commit(
                &Staged {
                    session: &session,
                    grant: Some(STAGED_GRANT),
                    paths: &[],
                },
                false,
            )
            .map_err(|e| e.to_string())?;
        let a = self.staged.join("a.txt").display().to_string();
        let b = self.staged.join("b.txt").display().to_string();
        check(
            committed.committed == [b.clone()]
                && committed.conflicts.iter().map(|c| &c.path).eq([&a]),
            || format!("commit {committed:?}"),
        )?;
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        check(
            read(&a) == "the owner's edit\n" && read(&b) == "staged\n",
            || format!("host a.txt {:?}, b.txt {:?}", read(&a), read(&b)),
        )?;
        self.discard_all(&session)
    }

    /// A host process swaps the real `src/` with a link (`RENAME_EXCHANGE`, at seeded moments)
    /// while the owner commits a file the session wrote into it, round after round: the host's
    /// `src/main.rs`, which the session never touched, survives every commit, and `src` itself
    /// never lands as a change.
    pub(super) fn staged_commit_raced_by_a_swap(&mut self) -> Outcome {
        let session = self.staged_session();
        self.staged_fill()?;
        let (src, swap) = (self.staged.join("src"), self.staged.join("src-swap"));
        std::os::unix::fs::symlink("elsewhere", &swap).map_err(|e| format!("host: {e}"))?;
        let seed = std::env::var("BOXMAKER_E2E_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(u64::from(std::process::id()))
            .max(1);
        let mut rng = seed;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let shown_src = src.display().to_string();
        for round in 0..12 {
            self.staged_shell(&session, &format!("echo {round} > src/new-{round}.rs"))?;
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let pauses: Vec<u64> = (0..32).map(|_| next() % 2000).collect();
            let swapper = {
                let (stop, src, swap) = (stop.clone(), src.clone(), swap.clone());
                std::thread::spawn(move || {
                    let mut swapped = false;
                    let mut i = 0;
                    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                        if exchange(&src, &swap).is_err() {
                            break;
                        }
                        swapped = !swapped;
                        std::thread::sleep(Duration::from_micros(pauses[i % pauses.len()]));
                        i += 1;
                    }
                    if swapped {
                        let _ = exchange(&src, &swap);
                    }
                })
            };
            let committed = self.owner()?.commit(
                &Staged {
                    session: &session,
                    grant: Some(STAGED_GRANT),
                    paths: &[],
                },
                false,
            );
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
            let _ = swapper.join();
            let committed = committed.map_err(|e| format!("seed {seed}, round {round}: {e}"))?;
            check(!committed.committed.contains(&shown_src), || {
                format!("seed {seed}, round {round}: src landed: {committed:?}")
            })?;
            let main = std::fs::read_to_string(src.join("main.rs")).unwrap_or_default();
            check(main == "fn main() {}\n", || {
                format!(
                    "seed {seed}, round {round}: the host's src/main.rs is {main:?}: {committed:?}"
                )
            })?;
        }
        self.discard_all(&session)
    }

    /// The host edits a file while a staged call that already changed it still runs: the
    /// session never saw that edit, so the commit reports a conflict and the edit stays.
    pub(super) fn staged_host_edit_during_a_call(&mut self) -> Outcome {
        let session = self.staged_session();
        self.staged_fill()?;
        let a = self.staged.join("a.txt");
        let host = {
            let a = a.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(1500));
                std::fs::write(&a, "the host's edit during the call\n")
            })
        };
        self.staged_shell(&session, "echo staged >> a.txt && sleep 3")?;
        host.join()
            .map_err(|_| "the host's thread panicked".to_string())?
            .map_err(|e| format!("host: {e}"))?;
        let committed = self
            .owner()?
            .commit(
                &Staged {
                    session: &session,
                    grant: Some(STAGED_GRANT),
                    paths: &[],
                },
                false,
            )
            .map_err(|e| e.to_string())?;
        let shown = a.display().to_string();
        check(committed.conflicts.iter().any(|c| c.path == shown), || {
            format!("commit {committed:?}")
        })?;
        let now = std::fs::read_to_string(&a).unwrap_or_default();
        check(now == "the host's edit during the call\n", || {
            format!("host a.txt {now:?}")
        })?;
        self.discard_all(&session)
    }

    /// A real directory swapped for a link to elsewhere after staging: that path's commit is
    /// refused and nothing is written where the link leads.
    pub(super) fn staged_swapped_dir(&mut self) -> Outcome {
        let session = self.staged_session();
        self.staged_fill()?;
        self.staged_shell(&session, "echo evil > src/new.rs")?;
        let elsewhere = self.work.join("elsewhere");
        let _ = std::fs::remove_dir_all(&elsewhere);
        std::fs::create_dir_all(&elsewhere).map_err(|e| format!("host: {e}"))?;
        self.user.chown(&elsewhere)?;
        std::fs::rename(self.staged.join("src"), self.staged.join("src-moved"))
            .map_err(|e| format!("host: {e}"))?;
        std::os::unix::fs::symlink(&elsewhere, self.staged.join("src"))
            .map_err(|e| format!("host: {e}"))?;
        let committed = self
            .owner()?
            .commit(
                &Staged {
                    session: &session,
                    grant: Some(STAGED_GRANT),
                    paths: &[],
                },
                false,
            )
            .map_err(|e| e.to_string())?;
        let written = std::fs::read_dir(&elsewhere)
            .map(|d| d.count())
            .unwrap_or(0);
        let _ = std::fs::remove_dir_all(&elsewhere);
        check(written == 0, || "written through the link".into())?;
        // The directory itself (a link now) and the file below it: neither lands.
        let new_rs = self.staged.join("src/new.rs").display().to_string();
        check(
            committed.committed.is_empty() && committed.conflicts.iter().any(|c| c.path == new_rs),
            || format!("commit {committed:?}"),
        )?;
        self.discard_all(&session)
    }

    /// The host adds a file below a directory after the session deleted it: a commit refuses
    /// the deletion (and the new file's), and deletes nothing of the host's. A file the session
    /// names as fuse-overlayfs names whiteouts (`.wh.a.txt`) is a file: a.txt stays.
    pub(super) fn staged_deleted_dir_conflict(&mut self) -> Outcome {
        let session = self.staged_session();
        self.staged_fill()?;
        self.staged_shell(&session, "rm -rf src && echo x > .wh.a.txt")?;
        let host_file = self.staged.join("src/host.rs");
        std::fs::write(&host_file, "the host's\n").map_err(|e| format!("host: {e}"))?;
        self.user.chown(&host_file)?;
        let changes = self.staged_changes(&session)?;
        check(
            !changes.iter().any(|(p, _)| p == "a.txt")
                && changes
                    .iter()
                    .any(|(p, k)| p == ".wh.a.txt" && k == "added"),
            || format!("changes {changes:?}"),
        )?;
        let committed = self
            .owner()?
            .commit(
                &Staged {
                    session: &session,
                    grant: Some(STAGED_GRANT),
                    paths: &[],
                },
                false,
            )
            .map_err(|e| e.to_string())?;
        let shown = |p: &str| self.staged.join(p).display().to_string();
        let conflicts: Vec<&str> = committed
            .conflicts
            .iter()
            .map(|c| c.path.as_str())
            .collect();
        check(
            conflicts.contains(&shown("src").as_str())
                && conflicts.contains(&shown("src/host.rs").as_str()),
            || format!("commit {committed:?}"),
        )?;
        let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
        check(
            read(&host_file) == "the host's\n" && read(&self.staged.join("a.txt")) == "a\n",
            || "the commit deleted what the session never saw".into(),
        )?;
        check(read(&self.staged.join(".wh.a.txt")) == "x\n", || {
            ".wh.a.txt did not land as a file".into()
        })?;
        self.discard_all(&session)
    }

    /// A protected target the command wrote stays out of a commit until it is named.
    pub(super) fn staged_protected(&mut self) -> Outcome {
        let session = self.staged_session();
        self.staged_fill()?;
        self.staged_shell(
            &session,
            "sh -c \"$(printf '%s' 'echo patched > vendor/lib.c; echo x > a.txt')\"",
        )?;
        let lib = self.staged.join("vendor/lib.c");
        let mut owner = self.owner()?;
        let all = Staged {
            session: &session,
            grant: Some(STAGED_GRANT),
            paths: &[],
        };
        let first = owner.commit(&all, false).map_err(|e| e.to_string())?;
        let lib_shown = lib.display().to_string();
        check(first.skipped.iter().any(|s| s.path == lib_shown), || {
            format!("commit {first:?}")
        })?;
        let now = std::fs::read_to_string(&lib).unwrap_or_default();
        check(now == "int a;\n", || format!("vendor/lib.c became {now:?}"))?;
        let named = [lib_shown];
        let second = owner
            .commit(
                &Staged {
                    paths: &named,
                    ..all
                },
                false,
            )
            .map_err(|e| e.to_string())?;
        let now = std::fs::read_to_string(&lib).unwrap_or_default();
        check(second.committed.len() == 1 && now == "patched\n", || {
            format!("named commit {second:?}, vendor/lib.c {now:?}")
        })
    }

    /// Past `max_staged_bytes` a session's writes are refused, naming the limit; `changes`
    /// shows the bytes.
    pub(super) fn staged_size_bound(&mut self) -> Outcome {
        let session = self.staged_session();
        self.staged_fill()?;
        let mib = MAX_STAGED_BYTES / (1024 * 1024) + 1;
        // The call that passes the bound ends, or is stopped by the bound held during a call
        // (on a slow host it runs long enough to be looked at): both keep what it wrote staged.
        let command =
            format!("dd if=/dev/zero of=big bs=1048576 count={mib} 2>/dev/null; wc -c < big");
        let cwd = self.staged.display().to_string();
        let passed =
            self.staged_call(&session, "shell", json!({ "command": command, "cwd": cwd }))?;
        let ok = match &passed {
            Body::Result { content, .. } => {
                content.starts_with(&format!("{}\n", mib * 1024 * 1024))
            }
            Body::Failed { message } => message.contains("max_staged_bytes"),
            _ => false,
        };
        check(ok, || format!("writing {mib} MiB: {}", show(&passed)))?;
        let refused = self.staged_call(
            &session,
            "write_file",
            json!({ "path": self.staged.join("more.txt").display().to_string(), "content": "x" }),
        )?;
        check(
            matches!(&refused, Body::Refused { reason } if reason.contains("max_staged_bytes")),
            || {
                format!(
                    "expected a refusal naming the limit, got {}",
                    show(&refused)
                )
            },
        )?;
        let changes = self
            .owner()?
            .changes(Some(&session), Some(STAGED_GRANT), false)
            .map_err(|e| e.to_string())?;
        check(changes.bytes >= MAX_STAGED_BYTES, || {
            format!("changes says {} bytes", changes.bytes)
        })?;
        self.discard_all(&session)
    }

    /// A layer outlives a change of backend: brokerd restarted on the other backend over a
    /// layer this one wrote lists the same changes, its sandbox sees them (a replaced directory,
    /// a deletion, a modification) and writes beside them, and a discard removes the layer
    /// whole, what the first backend's container root left in it included
    /// (docs/design.md#staged-writes-and-owners). Each backend leaves its own work directory
    /// as only it can clear it, so the two do not share one.
    pub(super) fn staged_layer_outlives_a_backend_change(&mut self) -> Outcome {
        let Some((other, other_config)) = self.other_config.clone() else {
            return Err(format!(
                "this run has no config for the backend beside {} (--tools-root and --image)",
                self.backend.as_str()
            ));
        };
        let other_config = other_config.map_err(|e| format!("{}'s config: {e}", other.as_str()))?;
        let session = self.staged_session();
        self.staged_fill()?;
        let before = self.host_listing()?;
        let first = self.staged_shell(
            &session,
            "rm -r src && mkdir src && echo new > src/new.rs && rm b.txt && echo more >> a.txt && echo first",
        )?;
        check(first.starts_with("first\n"), || format!("output {first:?}"))?;
        let staged = self.staged_changes(&session)?;
        let own = std::fs::read_to_string(&self.config).map_err(|e| e.to_string())?;
        std::fs::write(&self.config, &other_config).map_err(|e| e.to_string())?;
        self.stop_brokerd();
        let switched = self.start_brokerd().and_then(|()| {
            check(self.staged_changes(&session)? == staged, || {
                format!("{} lists other changes than {staged:?}", other.as_str())
            })?;
            // A read-only call first: its mount needs a work directory of this backend too.
            let path = self.staged.join("src/new.rs").display().to_string();
            match self.staged_call(&session, "read_file", json!({ "path": path }))? {
                Body::Result { content, .. } => {
                    check(content == "new\n", || format!("read_file: {content:?}"))?
                }
                other => return Err(format!("read_file: {}", show(&other))),
            }
            let out = self.staged_shell(
                &session,
                "ls src; cat a.txt; test -e b.txt || echo no-b; echo second > second.txt; echo done",
            )?;
            check(out.starts_with("new.rs\na\nmore\nno-b\ndone\n"), || {
                format!("on {}: {out:?}", other.as_str())
            })?;
            let mut changes = self.staged_changes(&session)?;
            changes.retain(|(p, _)| p != "second.txt");
            check(changes == staged, || format!("after the write: {changes:?}"))?;
            check(self.host_listing()? == before, || {
                "the host's directory changed".to_string()
            })?;
            self.discard_all(&session)?;
            let layers = self.user.home.join("staged").join(&session);
            check(!layers.exists(), || {
                format!("{} is left after the discard", layers.display())
            })?;
            check(self.host_listing()? == before, || {
                "the host's directory changed after the discard".to_string()
            })
        });
        // This run's backend again, whatever happened.
        std::fs::write(&self.config, own).map_err(|e| e.to_string())?;
        self.stop_brokerd();
        let back = self.start_brokerd();
        switched.and(back)
    }

    /// Staged changes are the owner's data: a SIGKILL of brokerd and its restart keep them.
    pub(super) fn staged_survive_crash(&mut self) -> Outcome {
        let session = self.staged_session();
        self.staged_fill()?;
        self.staged_shell(&session, "echo kept > kept.txt")?;
        if let Some(mut child) = self.child.take() {
            crate::system::signal(&child, libc::SIGKILL);
            let _ = child.wait();
        }
        std::thread::sleep(Duration::from_millis(200));
        self.start_brokerd()?;
        let changes = self.staged_changes(&session)?;
        check(
            changes == [("kept.txt".to_string(), "added".to_string())],
            || format!("after the restart: {changes:?}"),
        )?;
        self.discard_all(&session)
    }
}

/// Empties a directory (the staged grant's, between scenarios).
fn clear_dir(d: &PathBuf) -> Outcome {
    let entries = std::fs::read_dir(d).map_err(|e| format!("{}: {e}", d.display()))?;
    for e in entries.flatten() {
        let p = e.path();
        let gone = match std::fs::symlink_metadata(&p) {
            Ok(m) if m.is_dir() => std::fs::remove_dir_all(&p),
            _ => std::fs::remove_file(&p),
        };
        gone.map_err(|e| format!("{}: {e}", p.display()))?;
    }
    Ok(())
}

/// The bare side of the staged bench on Podman: brokerd's Podman runtime (for its argument
/// lists), the suite's direct and staged grants' mounts, and a layer of the bench's own.
pub(super) struct BareStaged {
    runtime: boxmaker_sandbox::runner::podman::PodmanRuntime,
    direct: Vec<boxmaker_sandbox::runner::Mount>,
    staged: Vec<boxmaker_sandbox::runner::Mount>,
    layer: PathBuf,
}

/// The staged bench's call of `tool` in `dir`.
fn bench_args(tool: &str, dir: &Path) -> Value {
    match tool {
        "write_file" => json!({
            "path": dir.join("bench.txt").display().to_string(),
            "content": "bench\n"
        }),
        _ => json!({ "command": "echo hi > bench.txt", "cwd": dir.display().to_string() }),
    }
}

impl Suite {
    /// The bare side's runtime, mounts and layer (made afresh, the service user's).
    fn bare_staged_setup(&self) -> Result<BareStaged, String> {
        use boxmaker_sandbox::runner::{Mount, StageMount};
        let config = boxmaker_config::load(&self.config, &boxmaker_sandbox::sys::System)
            .map_err(|e| e.to_string())?;
        let rc = config.runner.clone().ok_or("no [runner]")?;
        let mounts = |grant: &str| -> Result<Vec<Mount>, String> {
            let g = config
                .grants
                .get(grant)
                .ok_or(format!("no grant {grant}"))?;
            g.paths
                .iter()
                .map(|p| Mount::at(&p.path, p.write))
                .collect::<Result<_, _>>()
                .map_err(|e| e.to_string())
        };
        let layer = self.user.home.join("bench-bare-layer");
        self.bare_layer_removed(&layer)?;
        let stage = StageMount {
            upper: layer.join("upper"),
            work: layer.join("work"),
            merged: layer.join("merged"),
        };
        for d in [&stage.upper, &stage.work] {
            std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
        }
        self.user.chown_tree(&layer)?;
        let mut staged = mounts(STAGED_GRANT)?;
        for m in &mut staged {
            m.stage = Some(stage.clone());
        }
        Ok(BareStaged {
            runtime: boxmaker_sandbox::runner::podman::PodmanRuntime::new(&rc),
            direct: mounts(GRANT)?,
            staged,
            layer,
        })
    }

    /// One bare `podman run` of the staged bench, timed to its end.
    fn bare_staged_run(
        &self,
        bare: &BareStaged,
        tool: &str,
        staged_now: bool,
        i: usize,
    ) -> Result<Duration, String> {
        use proto::tools::ToolName;
        let (dir, mounts, side) = match staged_now {
            true => (&self.staged, &bare.staged, "s"),
            false => (&self.rw, &bare.direct, "d"),
        };
        let spec = boxmaker_sandbox::runner::RunSpec {
            session: proto::ident::Ident::fixed("bench"),
            call: proto::ident::Ident::parse(format!(
                "staged-{}-{side}-{i}",
                tool.replace('_', "-")
            ))
            .map_err(|e| e.to_string())?,
            tool: match tool {
                "write_file" => ToolName::WriteFile,
                _ => ToolName::Shell,
            },
            input: serde_json::to_vec(&bench_args(tool, dir)).unwrap_or_default(),
            mounts: mounts.clone(),
            egress: None,
            timeout: self.t(Duration::from_secs(30)),
            staged_limit: None,
            toolset: None,
            limits: Default::default(),
            cache: None,
        };
        let name = format!("boxmaker-bench-{}", spec.call);
        let t = std::time::Instant::now();
        self.bare_podman(&bare.runtime, &spec, &name)?;
        Ok(t.elapsed())
    }

    /// The bare side's layer removed: what a container's mapped root left in it goes through
    /// `podman unshare`, as brokerd's discard does.
    fn bare_layer_removed(&self, layer: &Path) -> Outcome {
        if std::fs::symlink_metadata(layer).is_err() {
            return Ok(());
        }
        let mut c = self.user.command(&self.podman);
        c.arg("unshare").arg("rm").arg("-rf").arg(layer);
        let (code, out) = crate::system::output(c, self.t(Duration::from_secs(30)))?;
        check(code == 0 && !layer.exists(), || {
            format!("{}: {out}", layer.display())
        })
    }
}

/// The percentiles (p50, p95) of `times`, in milliseconds.
fn p50_p95(times: &mut [Duration]) -> (f64, f64) {
    super::percentiles(times)
}

impl Suite {
    /// The staged bench: the same write_file and shell call on the direct grant and on the
    /// staged one, alternating, `n` each (p50 and p95 through brokerd); on Podman also bare,
    /// `podman run` of the argument lists brokerd builds for each (Podman's own cost of its
    /// overlay volume); then `changes` on a layer of exactly 1,000 changed files, with and
    /// without diffs, 10 times each.
    pub(super) fn bench_staged(&mut self, n: usize) -> Result<Value, String> {
        let session = format!("s-bench-staged-{}", std::process::id());
        self.staged_fill()?;
        let bare = match self.backend {
            Backend::Podman => Some(self.bare_staged_setup()?),
            Backend::Bwrap => None,
        };
        let mut rows = Vec::new();
        for tool in ["write_file", "shell"] {
            let (mut direct, mut staged) = (Vec::new(), Vec::new());
            let (mut bare_direct, mut bare_staged) = (Vec::new(), Vec::new());
            for i in 0..=n {
                for staged_now in [i % 2 == 0, i % 2 != 0] {
                    let (grant_dir, into) = match staged_now {
                        true => (self.staged.clone(), &mut staged),
                        false => (self.rw.clone(), &mut direct),
                    };
                    let args = bench_args(tool, &grant_dir);
                    let t = std::time::Instant::now();
                    let body = match staged_now {
                        true => self.staged_call(&session, tool, args)?,
                        false => self.call(tool, args)?,
                    };
                    let took = t.elapsed();
                    if !matches!(body, Body::Result { .. }) {
                        return Err(format!("{tool}: {}", show(&body)));
                    }
                    // The first of each is a warm-up.
                    if i > 0 {
                        into.push(took);
                    }
                }
                if let Some(bare) = &bare {
                    for staged_now in [i % 2 == 0, i % 2 != 0] {
                        let took = self.bare_staged_run(bare, tool, staged_now, i)?;
                        if i > 0 {
                            match staged_now {
                                true => bare_staged.push(took),
                                false => bare_direct.push(took),
                            }
                        }
                    }
                }
            }
            let (dp50, dp95) = p50_p95(&mut direct);
            let (sp50, sp95) = p50_p95(&mut staged);
            println!(
                "bench {} {tool:<10} direct p50 {dp50:>7.1} ms p95 {dp95:>7.1} ms ; staged p50 {sp50:>7.1} ms p95 {sp95:>7.1} ms ; ratio p50 {:.2} (n {n})",
                self.backend.as_str(),
                sp50 / dp50
            );
            let mut row = json!({
                "tool": tool,
                "direct_p50_ms": dp50,
                "direct_p95_ms": dp95,
                "staged_p50_ms": sp50,
                "staged_p95_ms": sp95,
                "ratio_p50": sp50 / dp50,
            });
            if bare.is_some() {
                let (bd50, bd95) = p50_p95(&mut bare_direct);
                let (bs50, bs95) = p50_p95(&mut bare_staged);
                println!(
                    "bench {} {tool:<10} bare podman run direct p50 {bd50:>7.1} ms p95 {bd95:>7.1} ms ; bare staged (:O volume) p50 {bs50:>7.1} ms p95 {bs95:>7.1} ms ; ratio p50 {:.2} (n {n})",
                    self.backend.as_str(),
                    bs50 / bd50
                );
                row["bare_direct_p50_ms"] = json!(bd50);
                row["bare_direct_p95_ms"] = json!(bd95);
                row["bare_staged_p50_ms"] = json!(bs50);
                row["bare_staged_p95_ms"] = json!(bs95);
                row["bare_ratio_p50"] = json!(bs50 / bd50);
            }
            rows.push(row);
        }
        self.discard_all(&session)?;
        // A layer of exactly CHANGES_LAYER changed files: a.txt and b.txt modified, the rest
        // added beside them (no new directory, which would be a change of its own).
        let added = CHANGES_LAYER - 2;
        self.staged_shell(
            &session,
            &format!(
                "i=0; while [ $i -lt {added} ]; do echo $i > f$i; i=$((i+1)); done; \
                 for f in a.txt b.txt; do echo x >> $f; done; echo made"
            ),
        )?;
        let mut owner = self.owner()?;
        let listed = owner
            .changes(Some(&session), Some(STAGED_GRANT), false)
            .map_err(|e| e.to_string())?;
        let count = listed.changes.len();
        let modified = listed
            .changes
            .iter()
            .filter(|c| c.change.as_str() == "modified")
            .count();
        if count != CHANGES_LAYER || listed.left_out != 0 || modified != 2 {
            return Err(format!(
                "the layer holds {count} changes ({modified} modified, {} left out), not {CHANGES_LAYER}",
                listed.left_out
            ));
        }
        let mut timed = |diff: bool| -> Result<(f64, f64), String> {
            let mut times = Vec::new();
            for _ in 0..10 {
                let t = std::time::Instant::now();
                owner
                    .changes(Some(&session), Some(STAGED_GRANT), diff)
                    .map_err(|e| e.to_string())?;
                times.push(t.elapsed());
            }
            Ok(p50_p95(&mut times))
        };
        let (cp50, cp95) = timed(false)?;
        let (dp50, dp95) = timed(true)?;
        println!(
            "bench {} changes of {count} paths p50 {cp50:.1} ms p95 {cp95:.1} ms ; with diffs p50 {dp50:.1} ms p95 {dp95:.1} ms",
            self.backend.as_str()
        );
        self.discard_all(&session)?;
        if let Some(bare) = bare {
            self.bare_layer_removed(&bare.layer)?;
        }
        Ok(json!({
            "bench": "staged",
            "backend": self.backend.as_str(),
            "calls": n,
            "rows": rows,
            "changes_paths": count,
            "changes_p50_ms": cp50,
            "changes_p95_ms": cp95,
            "changes_diff_p50_ms": dp50,
            "changes_diff_p95_ms": dp95,
        }))
    }
}

/// `renameat2(a, b, RENAME_EXCHANGE)`: the two trade places in one step, as a host process
/// that swaps a directory with a link does.
fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    use rustix::fs::{renameat_with, RenameFlags, CWD};
    renameat_with(CWD, a, CWD, b, RenameFlags::EXCHANGE).map_err(std::io::Error::from)
}
