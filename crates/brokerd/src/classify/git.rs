//! `git`: subcommands that read, write the work tree, or run programs.

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
        let o = parse_opts(rest, "", &[]);
        let mutate = |w: &mut Self| w.raise(WorkspaceMutating, format!("git {sub}"));
        match sub {
            "status" | "log" | "diff" | "show" | "rev-parse" | "ls-files" | "blame"
            | "shortlog" | "describe" | "show-ref" | "cat-file" | "ls-tree" | "rev-list"
            | "merge-base" | "whatchanged" | "grep" | "count-objects" | "version" => {
                if o.has(&["-O", "--open-files-in-pager", "--ext-diff"]) {
                    self.raise(ShellComplex, format!("git {sub} with a program option"));
                }
                for v in o.value(&["--output"]) {
                    self.write_target(&Arg::literal(v));
                }
            }
            "branch" => {
                let changes = [
                    "-d",
                    "-D",
                    "--delete",
                    "-m",
                    "-M",
                    "--move",
                    "-c",
                    "-C",
                    "--copy",
                    "-u",
                    "--set-upstream-to",
                    "--unset-upstream",
                    "--edit-description",
                    "-f",
                    "--force",
                    "-t",
                    "--track",
                    "--no-track",
                ];
                let lists = [
                    "--list",
                    "-l",
                    "-a",
                    "--all",
                    "-r",
                    "--remotes",
                    "--contains",
                    "--no-contains",
                    "--merged",
                    "--no-merged",
                    "--points-at",
                    "--show-current",
                ];
                if o.has(&changes) || (!o.positionals.is_empty() && !o.has(&lists)) {
                    mutate(self);
                }
            }
            "tag" => {
                if !(o.positionals.is_empty() || o.has(&["-l", "--list"])) || o.has(&["-d", "-a"]) {
                    mutate(self);
                }
            }
            "remote" => {
                let first = o.positionals.first().and_then(|a| a.text());
                if !matches!(first, None | Some("show" | "get-url")) {
                    mutate(self);
                }
            }
            "config" => {
                let reads = ["--get", "--get-all", "--get-regexp", "--list", "-l"];
                if !o.has(&reads) {
                    self.raise(
                        ShellComplex,
                        "git config can make later git commands run programs",
                    );
                }
            }
            "reflog" => {
                let first = o.positionals.first().and_then(|a| a.text());
                if !matches!(first, None | Some("show")) {
                    mutate(self);
                }
            }
            "rebase" if o.has(&["-x", "--exec", "-i", "--interactive"]) => {
                self.raise(ShellComplex, "git rebase --exec runs programs");
            }
            "bisect" if o.positionals.first().and_then(|a| a.text()) == Some("run") => {
                self.raise(ShellComplex, "git bisect run runs programs");
            }
            "rm" | "mv" | "restore" => {
                mutate(self);
                for p in &o.positionals {
                    self.write_target(p);
                }
            }
            "checkout" => {
                mutate(self);
                // Paths come after `--`; before it a name is a branch.
                if let Some(dd) = rest.iter().position(|a| a.text() == Some("--")) {
                    for p in &rest[dd + 1..] {
                        self.write_target(p);
                    }
                }
            }
            "add" | "commit" | "switch" | "reset" | "stash" | "merge" | "rebase"
            | "cherry-pick" | "revert" | "init" | "clone" | "fetch" | "pull" | "push" | "apply"
            | "am" | "clean" | "gc" | "worktree" | "notes" | "bisect" | "prune" | "repack" => {
                mutate(self)
            }
            other => self.raise(
                ShellComplex,
                format!(
                    "git {other} is not a subcommand the classifier knows (aliases run programs)"
                ),
            ),
        }
    }
}
