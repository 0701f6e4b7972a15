//! `git`: subcommands that read, write the work tree, or run programs.

use super::opts::{parse, LENIENT};
use super::*;

impl Walk<'_> {
    pub(super) fn git(&mut self, args: &[Arg]) {
        use CommandClass::*;
        let mut i = 0;
        // Global options before the subcommand.
        while let Some(t) = args.get(i).and_then(|a| a.text()) {
            match t {
                "-C" | "--git-dir" | "--work-tree" | "--namespace" => i += 2,
                "--no-pager"
                | "-P"
                | "--paginate"
                | "-p"
                | "--no-optional-locks"
                | "--literal-pathspecs"
                | "--no-replace-objects"
                | "--bare" => i += 1,
                _ if t.starts_with("--git-dir=")
                    || t.starts_with("--work-tree=")
                    || t.starts_with("--namespace=") =>
                {
                    i += 1
                }
                _ if t.starts_with('-') => {
                    self.raise(
                        ShellComplex,
                        format!("git {t} can make git run programs or read other config"),
                    );
                    return;
                }
                _ => break,
            }
        }
        let Some(sub) = args.get(i).and_then(|a| a.text()) else {
            return;
        };
        let rest = args.get(i + 1..).unwrap_or(&[]);
        let o = parse("git", &LENIENT, rest);
        let mutate = |w: &mut Self| w.raise(WorkspaceMutating, format!("git {sub}"));
        match sub {
            "status" | "log" | "diff" | "show" | "rev-parse" | "ls-files" | "blame"
            | "shortlog" | "describe" | "show-ref" | "cat-file" | "ls-tree" | "rev-list"
            | "merge-base" | "whatchanged" | "grep" | "count-objects" | "version" => {
                // git abbreviates long options: any unambiguous prefix counts.
                let runs = o.has("O")
                    || !long_values(rest, "open-files-in-pager", 2).is_empty()
                    || !long_values(rest, "ext-diff", 3).is_empty();
                if runs {
                    self.raise(ShellComplex, format!("git {sub} with a program option"));
                }
                for v in long_values(rest, "output", 1) {
                    self.write_target(&v);
                }
            }
            "branch" => {
                let changes = [
                    "d",
                    "D",
                    "delete",
                    "m",
                    "M",
                    "move",
                    "c",
                    "C",
                    "copy",
                    "u",
                    "set-upstream-to",
                    "unset-upstream",
                    "edit-description",
                    "f",
                    "force",
                    "t",
                    "track",
                    "no-track",
                ];
                let lists = [
                    "list",
                    "l",
                    "a",
                    "all",
                    "r",
                    "remotes",
                    "contains",
                    "no-contains",
                    "merged",
                    "no-merged",
                    "points-at",
                    "show-current",
                ];
                if o.has_any(&changes) || (!o.operands.is_empty() && !o.has_any(&lists)) {
                    mutate(self);
                }
            }
            "tag" => {
                if !(o.operands.is_empty() || o.has_any(&["l", "list"])) || o.has_any(&["d", "a"]) {
                    mutate(self);
                }
            }
            "remote" => {
                let first = o.operands.first().and_then(|a| a.text());
                if !matches!(first, None | Some("show" | "get-url")) {
                    mutate(self);
                }
            }
            "config" => {
                let reads = ["get", "get-all", "get-regexp", "list", "l"];
                if !o.has_any(&reads) {
                    self.raise(
                        ShellComplex,
                        "git config can make later git commands run programs",
                    );
                }
            }
            "reflog" => {
                let first = o.operands.first().and_then(|a| a.text());
                if !matches!(first, None | Some("show")) {
                    mutate(self);
                }
            }
            "rebase" if o.has_any(&["x", "exec", "i", "interactive"]) => {
                self.raise(ShellComplex, "git rebase --exec runs programs");
            }
            "bisect" if o.operands.first().and_then(|a| a.text()) == Some("run") => {
                self.raise(ShellComplex, "git bisect run runs programs");
            }
            "rm" | "mv" | "restore" => {
                mutate(self);
                for p in &o.operands {
                    self.write_target(p);
                }
            }
            "checkout" => {
                mutate(self);
                // `git checkout [TREE-ISH] [--] PATHS`: without `--` any name may be a path.
                for p in &o.operands {
                    self.write_target(p);
                }
            }
            "apply" if o.has_any(&["check", "stat", "numstat", "summary"]) && !o.has("apply") => {}
            "apply" | "am" => {
                self.raise(
                    ShellComplex,
                    format!("git {sub} writes the files its patch names, which the classifier cannot see"),
                );
            }
            "add" | "commit" | "switch" | "reset" | "stash" | "merge" | "rebase"
            | "cherry-pick" | "revert" | "init" | "clone" | "fetch" | "pull" | "push" | "clean"
            | "gc" | "worktree" | "notes" | "bisect" | "prune" | "repack" => mutate(self),
            other => self.raise(
                ShellComplex,
                format!(
                    "git {other} is not a subcommand the classifier knows (aliases run programs)"
                ),
            ),
        }
    }
}

/// The values of a long option given by any prefix of `full` at least `min` characters long
/// (`--outp=F`, `--output F`), up to `--`.
fn long_values(args: &[Arg], full: &str, min: usize) -> Vec<Arg> {
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(a) = args.get(i) {
        i += 1;
        let Some(t) = a.text() else { continue };
        if t == "--" {
            break;
        }
        let Some(long) = t.strip_prefix("--") else {
            continue;
        };
        let (name, attached) = match long.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (long, None),
        };
        if name.len() < min || !full.starts_with(name) {
            continue;
        }
        match attached {
            Some(v) => out.push(Arg::literal(v)),
            None => {
                if let Some(next) = args.get(i) {
                    out.push(next.clone());
                    i += 1;
                } else {
                    out.push(Arg::literal(""));
                }
            }
        }
    }
    out
}
