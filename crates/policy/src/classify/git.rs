//! `git`: global options (`-C DIR`, `-c KEY=VALUE`, `--work-tree`), then the subcommand, read
//! by a table: what it reads, writes and runs (docs/design.md, "Modes and the classifier").

use std::sync::OnceLock;

use super::opts::{parse, Parsed};
use super::specs::{compile_options, Operands, Spec};
use super::*;

/// What a subcommand does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Does {
    /// Reads the repository.
    Reads,
    /// Changes the repository or the work tree.
    Changes,
    /// Runs programs or editors the classifier does not see.
    Runs,
}

use Does::{Changes, Reads, Runs};

/// One subcommand (or several with the same reading).
struct Sub {
    names: Names,
    does: Does,
    /// First operands (`stash list`) or options (`apply --check`) that make it only read.
    reads_when: &'static [&'static str],
    /// Its options that write, run or carry code, in the spec grammar (`specs`), with those
    /// every subcommand reads alike (`options!`); others are read as harmless flags.
    options: &'static str,
    /// Its operands are the paths it writes (`git rm`, `git checkout -- FILE`).
    writes_operands: bool,
}

/// A subcommand's options and the ones every subcommand reads alike: `-O` and `--ext-diff`
/// run programs, and `--exec` (push, archive, fetch-pack) is a command.
macro_rules! options {
    ($own:literal) => {
        concat!(
            $own,
            " O,open-files-in-pager=?:run ext-diff:run exec=:command"
        )
    };
}

const fn sub(
    names: &'static str,
    does: Does,
    reads_when: &'static [&'static str],
    options: &'static str,
) -> Sub {
    Sub {
        names: Names(names),
        does,
        reads_when,
        options,
        writes_operands: false,
    }
}

/// Every subcommand the classifier knows, a row each: names, what it does, what makes it only
/// read, its options; another (an alias among them) may run anything.
const SUBS: &[Sub] = &[
    sub(
        "status log diff show rev-parse ls-files blame shortlog describe show-ref cat-file \
         ls-tree rev-list merge-base whatchanged grep count-objects version check-ignore \
         check-attr for-each-ref name-rev var verify-commit verify-tag range-diff cherry \
         diff-tree diff-files diff-index",
        Reads,
        &[],
        options!("output=:write"),
    ),
    sub("stash", Changes, &["list", "show"], options!("")),
    sub("worktree", Changes, &["list"], options!("")),
    sub("notes", Changes, &["", "list", "show"], options!("")),
    sub(
        "remote",
        Changes,
        &["", "show", "get-url", "-v", "--verbose"],
        options!(""),
    ),
    sub("reflog", Changes, &["", "show"], options!("")),
    sub(
        "submodule",
        Changes,
        &["", "status", "summary"],
        options!(""),
    ),
    sub(
        "bisect",
        Changes,
        &["log", "view", "visualize", "terms"],
        options!(""),
    ),
    sub("bundle", Changes, &["verify", "list-heads"], options!("")),
    // `--apply` (however abbreviated) applies what `--check` would only check.
    sub(
        "apply",
        Changes,
        &["--check", "--stat", "--numstat", "--summary"],
        options!("directory=:write apply"),
    ),
    sub("am", Changes, &[], options!("directory=:write")),
    sub("archive", Reads, &[], options!("o,output=:write remote=")),
    sub(
        "format-patch",
        Changes,
        &[],
        options!("o,output-directory=:write"),
    ),
    Sub {
        writes_operands: true,
        ..sub("rm mv restore checkout", Changes, &[], options!(""))
    },
    sub(
        "add commit switch reset merge cherry-pick revert init clean gc prune repack config \
         sparse-checkout maintenance update-index update-ref symbolic-ref",
        Changes,
        &[],
        options!(""),
    ),
    // Their options that change, listed so that an abbreviation of one (`--del`) is that one.
    sub(
        "branch",
        Changes,
        &[],
        options!(
            "d,delete D m,move M c,copy C u,set-upstream-to= unset-upstream edit-description \
             f,force t,track=? no-track"
        ),
    ),
    sub(
        "tag",
        Changes,
        &[],
        options!("d,delete a,annotate l,list s,sign u,local-user= f,force m,message= F,file="),
    ),
    // What they run: `rebase -x`, the program `clone -u` and `fetch --upload-pack` run on the
    // remote side, here; an interactive rebase runs the editor.
    sub(
        "rebase",
        Changes,
        &[],
        options!("x=:command i,interactive:run"),
    ),
    sub("clone", Changes, &[], options!("u,upload-pack=:command")),
    sub("fetch pull", Changes, &[], options!("upload-pack=:command")),
    sub("push", Changes, &[], options!("receive-pack=:command")),
    // filter-branch is a shell script: its filters are shell code, named whole.
    sub(
        "filter-branch",
        Runs,
        &[],
        options!(
            "tree-filter=:command index-filter=:command msg-filter=:command \
             env-filter=:command commit-filter=:command parent-filter=:command \
             tag-name-filter=:command setup=:command"
        ),
    ),
    sub(
        "difftool mergetool daemon instaweb send-email gui web--browse credential \
         fsmonitor--daemon",
        Runs,
        &[],
        options!(""),
    ),
];

/// Subcommands whose words after an operand are what they run: the subcommand, that operand,
/// and whether the words are shell code (`git submodule foreach CODE`) or a program and its
/// arguments (`git bisect run PROGRAM ARGS`). The words are taken as written, not as the
/// subcommand's options would read them.
const RUNS_AFTER: &[(&str, &str, bool)] =
    &[("bisect", "run", false), ("submodule", "foreach", true)];

/// Subcommands that rewrite files of the work tree they do not name.
const TREE_CHANGERS: Names = Names(
    "stash checkout switch reset merge pull rebase cherry-pick revert am apply restore clean rm \
     mv submodule sparse-checkout",
);

/// Config keys whose value is a command git runs (`alias.x=!CMD`, `core.pager=CMD`): read as
/// code when they are set.
const COMMAND_KEYS: Names = Names(
    "alias. core.pager core.editor core.sshcommand core.fsmonitor core.hookspath sequence.editor \
     diff.external gpg.program credential.helper .command .textconv .clean .smudge .process \
     .driver pager. interactive.difffilter uploadpack.packobjectshook",
);

/// Config keys that change only how git prints (`git -c core.quotepath=off status`): setting
/// one runs nothing and reads no other config. Any other key may (`include.path` reads a file
/// of config, and a list of the keys that run programs could lag behind git).
const DISPLAY_KEYS: Names = Names(
    "core.quotepath core.abbrev color. column. advice. i18n. log.date log.decorate \
     log.showsignature diff.renames diff.noprefix diff.mnemonicprefix diff.relative status.short \
     status.branch status.showuntrackedfiles grep.linenumber grep.patterntype blame.date",
);

/// Whether setting config key `key` changes only how git prints.
fn is_display_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    DISPLAY_KEYS.iter().any(|k| {
        if k.ends_with('.') {
            key.starts_with(k)
        } else {
            key == *k
        }
    }) && !is_command_key(&key)
}

/// Whether git runs the value of config key `key` as a command.
pub(super) fn is_command_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    COMMAND_KEYS
        .iter()
        .any(|k| key.starts_with(k) || key.contains(k))
}

/// git's own options, before the subcommand, read exactly as written (git does not abbreviate
/// them); another may make git run programs or read other config.
const GLOBAL: &str = "C= c= work-tree= git-dir= namespace= super-prefix= config-env= \
     P,no-pager p,paginate no-optional-locks literal-pathspecs glob-pathspecs noglob-pathspecs \
     icase-pathspecs no-replace-objects bare";

/// The spec of git's own options and each subcommand's (`SUBS`), compiled once.
fn specs() -> &'static Result<(Spec, Vec<Spec>), String> {
    static SPECS: OnceLock<Result<(Spec, Vec<Spec>), String>> = OnceLock::new();
    SPECS.get_or_init(|| {
        let spec = |options, own: bool| -> Result<Spec, String> {
            Ok(Spec {
                operands: Operands::Own,
                stop_at_operand: !own,
                abbreviate: own,
                unknown_harmless: own,
                bundled_first: false,
                options: compile_options(options, &["git"])?,
                runs: None,
            })
        };
        let subs = SUBS.iter().map(|s| spec(s.options, true));
        // `git --help` runs `git help`, which starts a pager or a browser: not a harmless flag.
        let mut global = spec(GLOBAL, false)?;
        global.options.retain(|o| !o.long.contains(&"help"));
        Ok((global, subs.collect::<Result<_, _>>()?))
    })
}

/// Checks git's option tables (called when the classifier is built).
pub(super) fn check() -> Result<(), String> {
    specs().as_ref().map(|_| ()).map_err(|e| e.clone())
}

impl Walk<'_> {
    pub(super) fn git(&mut self, args: &[Arg]) {
        let Ok((global, _)) = specs() else {
            return self.raise(CommandClass::ShellComplex, "git's option table is broken");
        };
        let g = parse("git", global, args);
        let mut dirs: Vec<Arg> = Vec::new();
        for given in &g.given {
            let Some(v) = &given.value else { continue };
            if given.is("C") || given.is("work-tree") {
                dirs.push(v.clone());
            } else if given.is("c") {
                self.git_config_value(v);
            } else if given.is("config-env") {
                // `--config-env=KEY=VAR`: `-c KEY=$VAR`, the variable as the command sets it.
                self.git_config_env(v);
            }
        }
        // Read after the settings given before it, which an option the table lacks must not
        // hide (`git -c core.pager=CMD --no-advice log`).
        if let Some(problem) = g.problems.first() {
            return self.raise(
                CommandClass::ShellComplex,
                format!("{problem}: it can make git run programs or read other config"),
            );
        }
        let Some((sub, rest)) = g.operands.split_first() else {
            return;
        };
        let Some(sub) = sub.text() else { return };

        // `GIT_WORK_TREE=DIR git ...` is `git --work-tree=DIR ...`.
        let tree = self.scope.value("GIT_WORK_TREE");
        let tree_unknown = tree.as_ref().is_some_and(|v| v.unknown || v.outside);
        for t in tree.map(|v| v.texts).unwrap_or_default() {
            dirs.push(Arg::literal(&t));
        }
        // `git -C DIR`: what the subcommand writes is under DIR.
        let mut inner = self.nested();
        inner.cwd_unknown |= tree_unknown;
        for d in &dirs {
            match d.text() {
                Some(t) => inner.cwd = Some(inner.land(t)),
                None => inner.cwd_unknown = true,
            }
        }
        inner.git_sub(sub, rest);
        // `git -C vendor stash pop` rewrites files under vendor it does not name.
        if TREE_CHANGERS.contains(&sub) && inner.class >= CommandClass::WorkspaceMutating {
            for d in &dirs {
                self.write_target(d);
            }
        }
        self.absorb(inner);
    }

    /// One subcommand and its arguments.
    fn git_sub(&mut self, sub: &str, rest: &[Arg]) {
        use CommandClass::*;
        let found = SUBS.iter().position(|s| s.names.contains(&sub));
        let (Some(at), Ok((_, specs))) = (found, specs()) else {
            self.raise(
                ShellComplex,
                format!(
                    "git {sub} is not a subcommand the classifier knows (aliases run programs)"
                ),
            );
            return;
        };
        let (entry, o) = (&SUBS[at], parse("git", &specs[at], rest));
        // What its options write, run and carry as code (`options!`).
        self.option_effects(&format!("git {sub}"), &o);
        let first = o.operands.first().and_then(|a| a.text());
        // `""`: no operand (`git remote` lists).
        let reads = entry.reads_when.iter().any(|r| {
            first == Some(*r)
                || (r.is_empty() && first.is_none())
                || (r.starts_with('-') && rest.iter().any(|a| a.text() == Some(*r)))
        }) && !o.has("apply");
        let reads = reads || lists_only(sub, &o);
        if reads {
            return;
        }
        match entry.does {
            Does::Reads => {}
            Does::Runs => self.raise(ShellComplex, format!("git {sub} runs programs")),
            Does::Changes => self.raise(WorkspaceMutating, format!("git {sub}")),
        }
        self.git_runs_after(sub, rest);
        match sub {
            "config" => {
                self.raise(
                    ShellComplex,
                    "git config can make later git commands run programs",
                );
                let words: Vec<&str> = o.operand_texts();
                if let [key, value, ..] = words.as_slice() {
                    self.git_config_value(&Arg::literal(&format!("{key}={value}")));
                }
            }
            "apply" | "am" => {
                self.raise(
                    ShellComplex,
                    format!(
                        "git {sub} writes the files its patch names, which the classifier \
                         cannot see"
                    ),
                );
                self.unplaced = true;
            }
            "rm" if o.has("r") => self.deletes("git rm", true, &o.operands),
            // `git stash push [--] PATHS` puts the paths back as HEAD has them.
            "stash" if matches!(first, Some("push" | "save")) => {
                let after_dashes = rest.iter().position(|a| a.text() == Some("--"));
                let paths = match after_dashes {
                    Some(at) => &rest[at + 1..],
                    None => o.operands.get(1..).unwrap_or(&[]),
                };
                for p in paths {
                    self.write_target(p);
                }
            }

            "worktree" if first == Some("add") => {
                let path = o.operands.get(1).cloned();
                self.write_target(&path.unwrap_or_else(|| Arg::literal(".")));
            }
            "clone" | "init" => {
                // The directory it makes: the last operand, or (clone) one named after the URL.
                let dir = match (sub, o.operands.as_slice()) {
                    ("clone", [url]) => url.text().map(|u| {
                        let base = u
                            .trim_end_matches('/')
                            .rsplit(['/', ':'])
                            .next()
                            .unwrap_or(u);
                        Arg::literal(base.trim_end_matches(".git"))
                    }),
                    (_, [.., last]) => Some(last.clone()),
                    _ => None,
                };
                if let Some(d) = dir {
                    self.write_target(&d);
                }
            }
            "format-patch" if o.values("output-directory").is_empty() => {
                self.write_target(&Arg {
                    pattern: true,
                    ..Arg::literal("[0-9]*.patch")
                });
            }
            "bundle" if first == Some("create") => {
                if let Some(f) = o.operands.get(1) {
                    self.write_target(f);
                }
            }
            _ if entry.writes_operands => {
                // `git checkout [TREE-ISH] [--] PATHS`: without `--` any name may be a path.
                for p in &o.operands {
                    self.write_target(p);
                }
            }
            _ => {}
        }
    }

    /// `KEY=VALUE` set by `git -c` or `git config`: a key whose value is a command has it read
    /// as code (`alias.x=!CMD`).
    /// `git --config-env=KEY=VAR`: the setting `KEY=$VAR`, read as `-c` reads it, once for
    /// each value the command gives VAR; one it does not set may hold anything.
    fn git_config_env(&mut self, setting: &Arg) {
        let Some((key, var)) = setting.text().and_then(|t| t.split_once('=')) else {
            self.raise(
                CommandClass::ShellComplex,
                "git --config-env with a setting the classifier cannot read",
            );
            return;
        };
        let values = self.scope.value(var).unwrap_or(Values {
            outside: true,
            ..Values::default()
        });
        if values.unknown || values.outside {
            // What git gets is not known: a key that runs its value runs anything.
            let code = Arg {
                lit: None,
                parts: Some(vec![Part::Var(var.to_string())]),
                ..Arg::literal("")
            };
            if is_display_key(key) {
                return;
            }
            self.git_config_value(&Arg::literal(&format!("{key}=")));
            if is_command_key(key) {
                self.run_code("git --config-env", &[code]);
            }
        }
        for v in values.texts {
            self.git_config_value(&Arg::literal(&format!("{key}={v}")));
        }
    }

    pub(super) fn git_config_value(&mut self, setting: &Arg) {
        let key = setting
            .text()
            .map(|t| t.split_once('=').map_or(t, |(k, _)| k));
        if key.is_some_and(is_display_key) {
            return;
        }
        self.raise(
            CommandClass::ShellComplex,
            "git -c can make git run programs or read other config",
        );
        let Some((key, value)) = setting.text().and_then(|t| t.split_once('=')) else {
            return;
        };
        if is_command_key(key) {
            let code = value.strip_prefix('!').unwrap_or(value);
            self.run_code("git config", &[Arg::literal(code)]);
        }
    }
}

/// Whether `git branch`, `git tag` or `git config` only list or query.
fn lists_only(sub: &str, o: &Parsed) -> bool {
    match sub {
        "branch" => {
            let changes = Names(
                "d D delete m M move c C copy u set-upstream-to unset-upstream edit-description \
                 f force t track no-track",
            );
            let lists = Names(
                "list l a all r remotes contains no-contains merged no-merged points-at \
                 show-current",
            );
            !changes.iter().any(|n| o.has(n))
                && (o.operands.is_empty() || lists.iter().any(|n| o.has(n)))
        }
        "tag" => (o.operands.is_empty() || o.has_any(&["l", "list"])) && !o.has_any(&["d", "a"]),
        // `git config KEY` prints a value, as `git config get KEY` does.
        "config" => {
            let sets =
                Names("unset unset-all add replace-all rename-section remove-section e edit");
            let verb = o.operands.first().and_then(|a| a.text());
            o.has_any(&["get", "get-all", "get-regexp", "list", "l"])
                || matches!(verb, Some("get" | "list"))
                || (o.operands.len() == 1
                    && !sets.iter().any(|n| o.has(n))
                    && verb.is_some_and(|k| k.contains('.')))
        }
        // `git reflog` is `git reflog show` unless its first word is a verb that changes it.
        "reflog" => !matches!(
            o.operands.first().and_then(|a| a.text()),
            Some("expire" | "delete")
        ),
        _ => false,
    }
}

impl Walk<'_> {
    /// The code a subcommand carries in the words after an operand (`RUNS_AFTER`), read as
    /// what it runs.
    fn git_runs_after(&mut self, sub: &str, rest: &[Arg]) {
        for (_, trigger, code) in RUNS_AFTER.iter().filter(|(s, ..)| *s == sub) {
            let at = rest
                .iter()
                .position(|a| a.text().is_none_or(|t| !t.starts_with('-')));
            let Some(at) = at.filter(|i| rest[*i].text() == Some(*trigger)) else {
                continue;
            };
            let words = &rest[at + 1..];
            let name = format!("git {sub} {trigger}");
            match code {
                true => self.run_code(&name, words),
                false => self.run_rest(&name, words),
            }
        }
    }
}
