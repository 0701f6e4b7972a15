//! The decision (docs/design.md#life-of-a-call, docs/design.md#modes-and-the-classifier,
//! docs/design.md#grants-and-paths).
//!
//! `decide` turns a grant and a parsed call into one of three outcomes; the repeated-refusal
//! stop and approval tickets are the broker's, since they need session state. Nothing here
//! runs anything or knows how a sandbox works: the outcome carries the mounts and the input
//! the runner needs, and the runner never knows why a call was allowed.

use std::collections::BTreeMap;
use std::path::PathBuf;

use proto::tools::{ReadFileArgs, ShellArgs, ToolName, WriteFileArgs};

use crate::args::{FetchUrl, ToolArgs};
use crate::classify::{Classifier, ClassifierError, CommandClass};
use crate::config::{Config, Grant, Protect, Writes};
use crate::glob;
use crate::mode::{ActionClass, Capabilities, Grant as Permit};
use crate::protect::{pattern_protected, protected_by_name, protected_in, Protection};
use crate::runner::{Egress, Mount};
use crate::view::{Host, View};
use crate::visible::{visible, Visible};
use crate::workspace::{PathRefusal, Root, Workspace, WorkspaceError};

/// What the decision says about one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Run it now.
    Allow(Plan),
    /// Nothing runs; the reason is for the model.
    Refuse(Refusal),
    /// Run it only once the owner approves this exact call; the question the owner reads, with
    /// the model's text in it shown visibly.
    Ask(Plan, String),
}

/// What a call will run with, decided before any sandbox exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub tool: ToolName,
    /// The tool's JSON for the sandbox, with paths resolved.
    pub input: Vec<u8>,
    pub mounts: Vec<Mount>,
    pub egress: Option<Egress>,
    /// The shell command's class, for the audit.
    pub class: Option<CommandClass>,
    /// Whether the call may change files (write_file, or a shell with writable mounts).
    pub writes: bool,
    /// The program a shell command runs (`Assessment::program`), for the audit.
    pub program: Option<String>,
    /// The grant's toolset by name; `None`: the base toolset (docs/design.md#toolsets).
    pub toolset: Option<String>,
    /// What the grant lowers of `[runner]`'s limits.
    pub limits: crate::config::GrantLimits,
    /// A shell call's grant's cache (docs/design.md#grant-caches).
    pub cache: Option<crate::runner::cache::Cache>,
}

/// A refusal: the target as the model wrote it and why. The same (tool, target, why's kind)
/// asked for again is the same refusal (`refusals`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub target: String,
    pub why: Why,
    /// The program a refused shell command runs, for the audit.
    pub program: Option<String>,
}

impl Refusal {
    pub fn new(target: &str, why: Why) -> Refusal {
        Refusal {
            target: target.to_string(),
            why,
            program: None,
        }
    }

    /// The reason a person reads, with the model's text in it (a path, a command, a parser's
    /// complaint) shown as escapes: see `visible`.
    pub fn reason(&self) -> String {
        visible(&self.why.to_string())
    }
}

/// Why a call is refused: every refusal text the model reads, in one place.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Why {
    /// The tool is unknown or its arguments do not parse (`args::ArgsError`, rendered).
    #[error("{0}")]
    Arguments(String),
    /// The grant does not offer the tool.
    #[error("{tool} is not one of the tools of grant {grant}")]
    ToolNotGranted { tool: ToolName, grant: String },
    /// A path outside the grant, or one that cannot be resolved.
    #[error("{0}")]
    Path(PathRefusal),
    /// shell's `cwd` is not a directory.
    #[error("shell: the working directory {} is not a directory", .0.display())]
    CwdNotADirectory(PathBuf),
    /// write_file to a generated or snapshot file.
    #[error("write_file: {0}")]
    WriteProtected(Protection),
    /// A shell command that writes a generated or snapshot file.
    #[error("shell: the command writes {written}: {why}")]
    ShellWritesProtected { written: String, why: Protection },
    /// A shell command past what the classifier reads (length, NUL, nesting, work counted in
    /// parser operations, nodes and words, write targets).
    #[error("shell: {0}; split it into smaller commands")]
    ShellBeyondBounds(String),
    /// http_fetch to a host the grant does not name.
    #[error("{}", proto::sentences::host_not_granted(.host, .hosts))]
    HostNotGranted { host: String, hosts: Vec<String> },
    /// More than toolkit reads on standard input (docs/design.md#the-toolkit).
    #[error("{tool}: the call comes to {bytes} bytes, more than the {} bytes a tool can take; nothing was run: split it into smaller calls", proto::tools::MAX_INPUT)]
    TooLarge { tool: ToolName, bytes: usize },
    /// The grant's mode does not allow the action.
    #[error("{tool}: grant {grant} is in {mode} mode, which does not allow {what}")]
    ModeForbids {
        tool: ToolName,
        grant: String,
        mode: crate::mode::Mode,
        what: String,
    },
    /// The approval ticket does not approve this call.
    #[error("{0}")]
    Approval(crate::tickets::TicketError),
    /// The session saw the runner unavailable: writes are refused
    /// (docs/design.md#preflight-and-poisoning).
    #[error("{tool}: the sandbox was unavailable earlier in this session, so writes are refused rather than attempted; nothing was changed")]
    UnavailableEarlier { tool: String },
    /// A shell command writes where the classifier cannot tell, in a grant whose protected
    /// targets only the classifier guards.
    #[error("the command writes files the classifier cannot place (after a cd it cannot follow, names find or the input supplies, files an archive or a patch names), and {0}; with protect = \"classifier\" nothing else holds them, so it is refused: name the files, or run it from their directory")]
    UnplacedWrite(String),
    /// No `[runner]` is configured (docs/design.md#service).
    #[error("no tool runner is configured on this host; nothing was run")]
    NoRunner,
    /// A staged grant's layer cannot take the call (the session's bytes, a layer in use).
    #[error("{0}")]
    Staged(String),
    /// The decision did not finish: a file system of the grant did not answer.
    #[error("{tool}: no decision could be made ({why}); nothing was run")]
    Undecided { tool: ToolName, why: String },
}

impl Why {
    /// Which refusal this is, apart from what it quotes: with the tool and the target, the
    /// key of the repeated-refusal count.
    pub fn kind(&self) -> &'static str {
        match self {
            Why::Arguments(_) => "arguments",
            Why::ToolNotGranted { .. } => "tool_not_granted",
            Why::Path(_) => "path",
            Why::CwdNotADirectory(_) => "cwd_not_a_directory",
            Why::WriteProtected(_) => "write_protected",
            Why::ShellWritesProtected { .. } => "shell_writes_protected",
            Why::ShellBeyondBounds(_) => "shell_beyond_bounds",
            Why::HostNotGranted { .. } => "host_not_granted",
            Why::TooLarge { .. } => "too_large",
            Why::ModeForbids { .. } => "mode_forbids",
            Why::Approval(crate::tickets::TicketError::Unknown) => "approval_unknown",
            Why::Approval(crate::tickets::TicketError::Mismatch) => "approval_mismatch",
            Why::Approval(crate::tickets::TicketError::NotApproved) => "approval_pending",
            Why::UnavailableEarlier { .. } => "unavailable_earlier",
            Why::UnplacedWrite(_) => "unplaced_write",
            Why::NoRunner => "no_runner",
            Why::Staged(_) => "staged",
            Why::Undecided { .. } => "undecided",
        }
    }
}

/// One grant, with its directories resolved once at start.
#[derive(Debug, Clone)]
pub struct GrantPolicy {
    pub name: String,
    pub grant: Grant,
    pub workspace: Workspace,
    /// Its cache, where it has one and a `[runner]` to keep it under.
    pub cache: Option<crate::runner::cache::Cache>,
}

#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("grants.{grant}: {source}")]
    Workspace {
        grant: String,
        source: WorkspaceError,
    },
    #[error(transparent)]
    Classifier(#[from] ClassifierError),
}

/// Every grant of the config, and the command classifier (checked against its examples).
pub struct Policy {
    grants: BTreeMap<String, GrantPolicy>,
    classifier: Classifier,
    /// Finds whether a `protect = "classifier"` grant holds protected targets at all.
    scanner: crate::protect::scan::Scanner,
    /// What a shell call's egress proxy may open and relay.
    egress_bounds: proto::egress::Bounds,
}

impl Policy {
    pub fn new(config: &Config) -> Result<Policy, PolicyError> {
        let classifier = Classifier::new()?;
        let scanner = crate::protect::scan::Scanner::new(config.protect_bounds());
        let mut grants = BTreeMap::new();
        for (name, grant) in &config.grants {
            let roots = grant
                .paths
                .iter()
                .map(|p| Root {
                    path: p.path.clone(),
                    write: p.write,
                })
                .collect();
            let workspace = Workspace::new(roots).map_err(|source| PolicyError::Workspace {
                grant: name.clone(),
                source,
            })?;
            grants.insert(
                name.clone(),
                GrantPolicy {
                    name: name.clone(),
                    grant: grant.clone(),
                    workspace,
                    cache: grant
                        .cache
                        .zip(config.runner.as_ref())
                        .map(|(max_bytes, r)| crate::runner::cache::Cache {
                            dir: r.cache_dir(name),
                            max_bytes,
                        }),
                },
            );
        }
        Ok(Policy {
            grants,
            classifier,
            scanner,
            egress_bounds: config.egress_bounds(),
        })
    }

    /// Whether a grant's writable directories hold a protected target, or cannot be walked
    /// far enough to tell: what, in words, or `None` when they hold none.
    fn classifier_alone_holds(&self, g: &GrantPolicy) -> Option<String> {
        use std::os::fd::AsFd;
        for root in g.workspace.roots().iter().filter(|r| r.write) {
            let walked = std::fs::File::open(&root.path)
                .map_err(|e| format!("{} cannot be read: {e}", root.path.display()))
                .and_then(|dir| {
                    self.scanner.scan(&root.path, dir.as_fd()).map_err(|e| {
                        format!("it cannot tell whether the grant holds protected targets ({e})")
                    })
                });
            match walked {
                Ok(found) => {
                    if let Some(t) = found.targets.first() {
                        return Some(format!(
                            "the grant holds protected targets ({})",
                            visible(&t.path.to_string_lossy())
                        ));
                    }
                }
                Err(why) => return Some(why),
            }
        }
        None
    }

    pub fn grant(&self, name: &str) -> Option<&GrantPolicy> {
        self.grants.get(name)
    }

    /// Every grant, by name.
    pub fn grants(&self) -> impl Iterator<Item = &GrantPolicy> {
        self.grants.values()
    }

    /// The tools a grant offers in its mode: a tool the grant cannot use is not offered.
    pub fn offered(&self, g: &GrantPolicy) -> Vec<ToolName> {
        let caps = Capabilities::for_mode(g.grant.mode);
        ToolName::ALL
            .into_iter()
            .filter(|t| g.grant.tools.contains(t))
            .filter(|t| match t {
                ToolName::WriteFile => {
                    caps.grant(ActionClass::Mutate) != Permit::Refuse
                        && g.workspace.roots().iter().any(|r| r.write)
                }
                ToolName::HttpFetch => !g.grant.hosts.is_empty(),
                ToolName::ReadFile | ToolName::Shell => true,
            })
            .collect()
    }

    /// Decides one call of grant `g` on the host's tree. `tool` is the requested tool, already
    /// known to parse.
    pub fn decide(&self, g: &GrantPolicy, args: &ToolArgs) -> Decision {
        self.decide_in(&Host, g, args)
    }

    /// Decides one call of grant `g` on `view`'s tree: for a session of a staged grant, the
    /// merged view its sandboxes see. A shell command's decision names the program it runs
    /// (from the classifier's one parse of it), whatever the decision.
    pub fn decide_in(&self, view: &dyn View, g: &GrantPolicy, args: &ToolArgs) -> Decision {
        let mut program = None;
        let mut decision = self.decide_named(view, g, args, &mut program);
        match &mut decision {
            Decision::Allow(p) | Decision::Ask(p, _) => p.program = program,
            Decision::Refuse(r) => r.program = program,
        }
        decision
    }

    /// The decision, the program a shell command runs left in `program`: the tool granted,
    /// the action its arguments ask for, the input within toolkit's bound, then the plan as
    /// the grant's mode takes it (run, ask or refuse).
    fn decide_named(
        &self,
        view: &dyn View,
        g: &GrantPolicy,
        args: &ToolArgs,
        program: &mut Option<String>,
    ) -> Decision {
        let tool = args.tool();
        if !g.grant.tools.contains(&tool) {
            let grant = g.name.clone();
            return refuse(args.target(), Why::ToolNotGranted { tool, grant });
        }
        let caps = Capabilities::for_mode(g.grant.mode);
        let action = match args {
            ToolArgs::ReadFile(a) => read_action(view, g, tool, a),
            ToolArgs::WriteFile(a) => write_action(view, g, tool, a),
            ToolArgs::Shell(a) => self.shell_action(view, g, tool, a, program),
            ToolArgs::HttpFetch(u) => fetch_action(g, args, u),
        };
        let Action {
            class: action,
            input,
            target,
            command: class,
            egress,
            detail: question_detail,
        } = match action {
            Ok(a) => a,
            Err(r) => return Decision::Refuse(*r),
        };
        // toolkit reads at most MAX_INPUT bytes (docs/design.md#the-toolkit): a larger call could
        // only fail inside the sandbox, with a sentence the model cannot act on.
        if input.len() > proto::tools::MAX_INPUT {
            let bytes = input.len();
            return refuse(&target, Why::TooLarge { tool, bytes });
        }
        let mounts = grant_mounts(g, caps.writable_mounts(action));
        let writes = mounts.iter().any(|m| m.write);
        let plan = Plan {
            tool,
            input,
            mounts,
            egress,
            class,
            writes,
            program: None,
            toolset: g.grant.toolset.clone(),
            limits: g.grant.limits.clone(),
            // Only a shell call builds; a file tool's sandbox needs no cache.
            cache: g.cache.clone().filter(|_| tool == ToolName::Shell),
        };
        match caps.grant(action) {
            Permit::Run => Decision::Allow(plan),
            Permit::Ask => {
                // The owner approves what they read: the model's part of it, shown visibly.
                let question = format!("Allow grant {} to {}?", g.name, Visible(&question_detail));
                Decision::Ask(plan, question)
            }
            Permit::Refuse => {
                let what = match class {
                    Some(c) => format!("a {c} command"),
                    None => format!("{tool}"),
                };
                let (grant, mode) = (g.name.clone(), caps.mode());
                refuse(
                    &target,
                    Why::ModeForbids {
                        tool,
                        grant,
                        mode,
                        what,
                    },
                )
            }
        }
    }

    /// A shell command's action: the classifier's reading of it, its working directory, the
    /// protected files it writes, what its recursive targets lead to, and its way out.
    fn shell_action(
        &self,
        view: &dyn View,
        g: &GrantPolicy,
        tool: ToolName,
        a: &ShellArgs,
        program: &mut Option<String>,
    ) -> Result<Action, Box<Refusal>> {
        let roots: Vec<PathBuf> = g.workspace.roots().iter().map(|r| r.path.clone()).collect();
        let mut assessment = self.classifier.classify(&a.command, &roots);
        program.clone_from(&assessment.program);
        let cwd = shell_cwd(view, g, tool, a)?;
        if let Some(bound) = assessment.beyond {
            let why = Why::ShellBeyondBounds(bound.to_string());
            return Err(refusal(&a.command, why));
        }
        let base = cwd
            .clone()
            .unwrap_or_else(|| PathBuf::from(proto::tools::DEFAULT_CWD));
        let reach = Reach {
            view,
            g,
            tool,
            base: &base,
            roots: &roots,
        };
        let undecided = reach.protected_writes(&a.command, &assessment)?;
        reach.follow_recursive(&mut assessment);
        if let Some(why) = undecided {
            if assessment.class < CommandClass::ShellComplex {
                assessment.class = CommandClass::ShellComplex;
                assessment.reason = Some(why);
            }
        }
        // A write the classifier cannot place may be a protected one. Where the mount
        // table holds the protected targets, or a commit is the gate, that is theirs
        // to stop; where the classifier is all there is, it is refused if the grant
        // has any (docs/design.md#protected-targets).
        if assessment.unplaced
            && g.grant.protect == Protect::Classifier
            && g.grant.writes == Writes::Direct
        {
            if let Some(held) = self.classifier_alone_holds(g) {
                return Err(refusal(&a.command, Why::UnplacedWrite(held)));
            }
        }
        let input = json(&ShellArgs {
            command: a.command.clone(),
            cwd: cwd.as_deref().map(path_string),
        });
        let detail = match &assessment.reason {
            Some(why) => format!("run `{}` ({}: {why})", a.command, assessment.class),
            None => format!("run `{}` ({})", a.command, assessment.class),
        };
        // The grant's shell hosts, if any, are the call's way out: the same proxy as
        // http_fetch's, with the same address rule
        // (docs/design.md#shell-and-its-egress-proxy).
        let egress = (!g.grant.shell_hosts.is_empty()).then(|| Egress {
            hosts: g.grant.shell_hosts.clone(),
            allow_addresses: g.grant.allow_addresses.clone(),
            bounds: Some(self.egress_bounds),
        });
        Ok(Action {
            class: ActionClass::from(assessment.class),
            input,
            target: a.command.clone(),
            command: Some(assessment.class),
            egress,
            detail,
        })
    }
}

/// What a call asks to do, before the grant's mode says whether it may.
struct Action {
    /// What the mode is asked to allow.
    class: ActionClass,
    /// The tool's JSON for the sandbox, with paths resolved.
    input: Vec<u8>,
    /// The target a refusal names, as the model wrote it.
    target: String,
    /// A shell command's class.
    command: Option<CommandClass>,
    egress: Option<Egress>,
    /// What the owner is asked to allow, with the model's text in it.
    detail: String,
}

/// A read_file call's action: the path resolved in the grant.
fn read_action(
    view: &dyn View,
    g: &GrantPolicy,
    tool: ToolName,
    a: &ReadFileArgs,
) -> Result<Action, Box<Refusal>> {
    let r = g
        .workspace
        .resolve_in(view, tool, &a.path)
        .map_err(|e| refusal(&a.path, Why::Path(e)))?;
    let input = json(&ReadFileArgs {
        path: path_string(&r.path),
    });
    Ok(Action {
        class: ActionClass::Read,
        input,
        target: a.path.clone(),
        command: None,
        egress: None,
        detail: String::new(),
    })
}

/// A write_file call's action: the path resolved for writing in the grant, and not a
/// protected target.
fn write_action(
    view: &dyn View,
    g: &GrantPolicy,
    tool: ToolName,
    a: &WriteFileArgs,
) -> Result<Action, Box<Refusal>> {
    let r = g
        .workspace
        .resolve_for_write_in(view, tool, &a.path)
        .map_err(|e| refusal(&a.path, Why::Path(e)))?;
    if let Some(p) = protected_in(view, &a.path, &r.path) {
        return Err(refusal(&a.path, Why::WriteProtected(p)));
    }
    let input = json(&WriteFileArgs {
        path: path_string(&r.path),
        content: a.content.clone(),
    });
    let detail = format!("write {} bytes to {}", a.content.len(), r.path.display());
    Ok(Action {
        class: ActionClass::Mutate,
        input,
        target: a.path.clone(),
        command: None,
        egress: None,
        detail,
    })
}

/// An http_fetch call's action: a host of the grant, reached through the proxy.
fn fetch_action(g: &GrantPolicy, args: &ToolArgs, u: &FetchUrl) -> Result<Action, Box<Refusal>> {
    if !g
        .grant
        .hosts
        .iter()
        .any(|p| proto::hosts::host_matches(p, u.host()))
    {
        let host = u.host().to_string();
        let hosts = g.grant.hosts.clone();
        return Err(refusal(u.url(), Why::HostNotGranted { host, hosts }));
    }
    let egress = Egress {
        hosts: g.grant.hosts.clone(),
        allow_addresses: g.grant.allow_addresses.clone(),
        bounds: None,
    };
    Ok(Action {
        class: ActionClass::Read,
        input: args.input_json(),
        target: u.url().to_string(),
        command: None,
        egress: Some(egress),
        detail: format!("fetch {}", u.url()),
    })
}

/// A shell call's working directory: a directory of the grant, or none given.
fn shell_cwd(
    view: &dyn View,
    g: &GrantPolicy,
    tool: ToolName,
    a: &ShellArgs,
) -> Result<Option<PathBuf>, Box<Refusal>> {
    let Some(c) = &a.cwd else {
        return Ok(None);
    };
    match g.workspace.resolve_in(view, tool, c) {
        Ok(r) if view.lstat(&r.path).is_ok_and(|m| m.is_dir()) => Ok(Some(r.path)),
        Ok(r) => Err(refusal(c, Why::CwdNotADirectory(r.path))),
        Err(e) => Err(refusal(c, Why::Path(e))),
    }
}

/// The grant's directories as a call's sandbox mounts them: writable where the grant's
/// mode lets the action write.
fn grant_mounts(g: &GrantPolicy, writable: bool) -> Vec<Mount> {
    g.workspace
        .roots()
        .iter()
        .map(|r| Mount {
            path: r.path.clone(),
            write: r.write && writable,
            id: r.id,
            // The mount table holds the protected targets of a writable direct grant; a
            // staged grant's commit is that gate instead.
            protect: r.write
                && writable
                && g.grant.protect == Protect::Mount
                && g.grant.writes == Writes::Direct,
            // The session's layer, which the broker knows.
            stage: None,
        })
        .collect()
}

fn refuse(target: &str, why: Why) -> Decision {
    Decision::Refuse(Refusal::new(target, why))
}

/// A refusal a step of the decision ends with, boxed: it is passed up, not kept.
fn refusal(target: &str, why: Why) -> Box<Refusal> {
    Box::new(Refusal::new(target, why))
}

/// Where a shell command's paths reach: the grant's directories, seen through the view,
/// from the command's working directory.
struct Reach<'a> {
    view: &'a dyn View,
    g: &'a GrantPolicy,
    tool: ToolName,
    /// The working directory the command's relative paths start from.
    base: &'a std::path::Path,
    roots: &'a [PathBuf],
}

impl Reach<'_> {
    /// The command refused where a write of it reaches a protected file; otherwise why a
    /// pattern's writes could not be told, if one's could not.
    fn protected_writes(
        &self,
        command: &str,
        assessment: &crate::classify::Assessment,
    ) -> Result<Option<String>, Box<Refusal>> {
        let mut undecided = None;
        for w in &assessment.writes {
            if assessment.globbed.contains(w) {
                match self.pattern_protection(w) {
                    Ok(None) => {}
                    Ok(Some(p)) => {
                        return Err(refusal(
                            command,
                            Why::ShellWritesProtected {
                                written: w.clone(),
                                why: p,
                            },
                        ))
                    }
                    Err(why) => undecided = Some(why),
                }
                continue;
            }
            let reached = self.base.join(w);
            // A file outside the grant is judged by its name: a decision opens nothing
            // there.
            let protection =
                match self
                    .g
                    .workspace
                    .resolve_in(self.view, self.tool, &path_string(&reached))
                {
                    Ok(r) => protected_in(self.view, w, &r.path),
                    Err(_) => protected_by_name(w, &reached),
                };
            if let Some(why) = protection {
                let written = w.clone();
                return Err(refusal(command, Why::ShellWritesProtected { written, why }));
            }
        }
        Ok(undecided)
    }

    /// `rm -rf link/` deletes what the link leads to: a grant directory, or `/` where every
    /// grant directory is mounted. Such a command is dangerous.
    fn follow_recursive(&self, assessment: &mut crate::classify::Assessment) {
        for t in &assessment.recursive {
            let at = self.base.join(t);
            let real = crate::workspace::follow(self.view, &at, self.roots).unwrap_or(at);
            if self.roots.iter().any(|r| r.starts_with(&real)) {
                assessment.class = CommandClass::Dangerous;
                assessment.reason = Some(format!(
                    "{t} leads to {}, a grant directory or one holding it",
                    real.display()
                ));
            }
        }
    }

    /// Whether a write to the shell pattern `w` reaches a protected file: by the pattern's
    /// own components, or by a file it matches in the grant (expanded on the host, relative
    /// to `base`). `Err` when that cannot be told within the expansion's bounds.
    fn pattern_protection(&self, w: &str) -> Result<Option<Protection>, String> {
        let (view, g, tool) = (self.view, self.g, self.tool);
        let cannot_tell =
            || format!("the write pattern {w} matches more than the classifier checks");
        for alt in glob::alternatives(w).ok_or_else(cannot_tell)? {
            if let Some(p) = pattern_protected(&alt) {
                return Ok(Some(p));
            }
            for m in
                glob::expand_in(view, &self.base.join(&alt), self.roots).ok_or_else(cannot_tell)?
            {
                let shown = path_string(&m);
                let protection = match g.workspace.resolve_in(view, tool, &shown) {
                    Ok(r) => protected_in(view, &shown, &r.path),
                    Err(_) => protected_by_name(&shown, &m),
                };
                if let Some(p) = protection {
                    return Ok(Some(p));
                }
            }
        }
        Ok(None)
    }
}

fn path_string(p: &std::path::Path) -> String {
    p.to_string_lossy().into_owned()
}

fn json<T: serde::Serialize>(v: &T) -> Vec<u8> {
    // Structs of strings always serialise.
    serde_json::to_vec(v).unwrap_or_default()
}

#[cfg(test)]
mod tests;
