//! The decision (DESIGN.md "Life of a call" step 4, "Grants and modes", "Paths").
//!
//! `decide` turns a grant and a parsed call into one of three outcomes; the repeated-refusal
//! stop and approval tickets are the broker's, since they need session state. Nothing here
//! runs anything or knows how a sandbox works: the outcome carries the mounts and the input
//! the runner needs, and the runner never knows why a call was allowed.

use std::collections::BTreeMap;
use std::path::PathBuf;

use proto::tools::{ReadFileArgs, ShellArgs, ToolName, WriteFileArgs};

use crate::args::ToolArgs;
use crate::classify::{Classifier, ClassifierError, CommandClass};
use crate::config::{Config, Grant, Protect, Writes};
use crate::glob;
use crate::mode::{ActionClass, Capabilities, Grant as Permit};
use crate::protect::{pattern_protected, protected_in, Protection};
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
    /// A shell command past what the classifier reads (length, depth, time, NUL).
    #[error("shell: {0}; split it into smaller commands")]
    ShellBeyondBounds(String),
    /// http_fetch to a host the grant does not name.
    #[error("http_fetch: {host} is not one of the grant's hosts ({})", .hosts.join(", "))]
    HostNotGranted { host: String, hosts: Vec<String> },
    /// More than toolkit reads on standard input (seed 003 section 4).
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
    /// The session saw the runner unavailable: writes are refused (seed 000 5.1.5).
    #[error("{tool}: the sandbox was unavailable earlier in this session, so writes are refused rather than attempted; nothing was changed")]
    UnavailableEarlier { tool: String },
    /// A shell command writes where the classifier cannot tell, in a grant whose protected
    /// targets only the classifier guards.
    #[error("the command writes files the classifier cannot place (after a cd it cannot follow, names find or the input supplies, files an archive or a patch names), and {0}; with protect = \"classifier\" nothing else holds them, so it is refused: name the files, or run it from their directory")]
    UnplacedWrite(String),
    /// No `[runner]` is configured (DESIGN.md "Service").
    #[error("no tool runner is configured on this host; nothing was run")]
    NoRunner,
    /// A staged grant's layer cannot take the call (the session's bytes, a layer in use).
    #[error("{0}")]
    Staged(String),
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
        }
    }
}

/// One grant, with its directories resolved once at start.
#[derive(Debug, Clone)]
pub struct GrantPolicy {
    pub name: String,
    pub grant: Grant,
    pub workspace: Workspace,
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
}

impl Policy {
    pub fn new(config: &Config) -> Result<Policy, PolicyError> {
        let classifier = Classifier::new()?;
        let bounds = config
            .runner
            .as_ref()
            .map(|r| r.protect)
            .unwrap_or_default();
        let scanner = crate::protect::scan::Scanner::new(bounds);
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
                },
            );
        }
        Ok(Policy {
            grants,
            classifier,
            scanner,
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
        let (action, input, target, class, egress, question_detail) = match args {
            ToolArgs::ReadFile(a) => {
                let r = match g.workspace.resolve_in(view, tool, &a.path) {
                    Ok(r) => r,
                    Err(e) => return refuse(&a.path, Why::Path(e)),
                };
                let input = json(&ReadFileArgs {
                    path: path_string(&r.path),
                });
                (
                    ActionClass::Read,
                    input,
                    a.path.clone(),
                    None,
                    None,
                    String::new(),
                )
            }
            ToolArgs::WriteFile(a) => {
                let r = match g.workspace.resolve_for_write_in(view, tool, &a.path) {
                    Ok(r) => r,
                    Err(e) => return refuse(&a.path, Why::Path(e)),
                };
                if let Some(p) = protected_in(view, &a.path, &r.path) {
                    return refuse(&a.path, Why::WriteProtected(p));
                }
                let input = json(&WriteFileArgs {
                    path: path_string(&r.path),
                    content: a.content.clone(),
                });
                let detail = format!("write {} bytes to {}", a.content.len(), r.path.display());
                (
                    ActionClass::Mutate,
                    input,
                    a.path.clone(),
                    None,
                    None,
                    detail,
                )
            }
            ToolArgs::Shell(a) => {
                let roots: Vec<PathBuf> =
                    g.workspace.roots().iter().map(|r| r.path.clone()).collect();
                let mut assessment = self.classifier.classify(&a.command, &roots);
                program.clone_from(&assessment.program);
                let cwd = match &a.cwd {
                    Some(c) => match g.workspace.resolve_in(view, tool, c) {
                        Ok(r) if view.lstat(&r.path).is_ok_and(|m| m.is_dir()) => Some(r.path),
                        Ok(r) => return refuse(c, Why::CwdNotADirectory(r.path)),
                        Err(e) => return refuse(c, Why::Path(e)),
                    },
                    None => None,
                };
                if let Some(bound) = assessment.beyond {
                    return refuse(&a.command, Why::ShellBeyondBounds(bound.to_string()));
                }
                let base = cwd
                    .clone()
                    .unwrap_or_else(|| PathBuf::from(proto::tools::DEFAULT_CWD));
                let mut undecided = None;
                for w in &assessment.writes {
                    if assessment.globbed.contains(w) {
                        match pattern_protection(view, g, tool, &base, &roots, w) {
                            Ok(None) => {}
                            Ok(Some(p)) => {
                                return refuse(
                                    &a.command,
                                    Why::ShellWritesProtected {
                                        written: w.clone(),
                                        why: p,
                                    },
                                )
                            }
                            Err(why) => undecided = Some(why),
                        }
                        continue;
                    }
                    let reached = base.join(w);
                    let reached = match g.workspace.resolve_in(view, tool, &path_string(&reached)) {
                        Ok(r) => r.path,
                        Err(_) => reached,
                    };
                    if let Some(why) = protected_in(view, w, &reached) {
                        let written = w.clone();
                        return refuse(&a.command, Why::ShellWritesProtected { written, why });
                    }
                }
                // `rm -rf link/` deletes what the link leads to: a grant directory, or `/`
                // where every grant directory is mounted.
                for t in &assessment.recursive {
                    let at = base.join(t);
                    let real = crate::workspace::follow(view, &at).unwrap_or(at);
                    if roots.iter().any(|r| r.starts_with(&real)) {
                        assessment.class = CommandClass::Dangerous;
                        assessment.reason = Some(format!(
                            "{t} leads to {}, a grant directory or one holding it",
                            real.display()
                        ));
                    }
                }
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
                        return refuse(&a.command, Why::UnplacedWrite(held));
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
                (
                    ActionClass::from(assessment.class),
                    input,
                    a.command.clone(),
                    Some(assessment.class),
                    None,
                    detail,
                )
            }
            ToolArgs::HttpFetch(u) => {
                if !g
                    .grant
                    .hosts
                    .iter()
                    .any(|p| proto::hosts::host_matches(p, u.host()))
                {
                    let host = u.host().to_string();
                    let hosts = g.grant.hosts.clone();
                    return refuse(u.url(), Why::HostNotGranted { host, hosts });
                }
                let egress = Egress {
                    hosts: g.grant.hosts.clone(),
                    allow_addresses: g.grant.allow_addresses.clone(),
                };
                let input = args.input_json();
                (
                    ActionClass::Read,
                    input,
                    u.url().to_string(),
                    None,
                    Some(egress),
                    format!("fetch {}", u.url()),
                )
            }
        };
        // toolkit reads at most MAX_INPUT bytes (seed 003 section 4): a larger call could only
        // fail inside the sandbox, with a sentence the model cannot act on.
        if input.len() > proto::tools::MAX_INPUT {
            let bytes = input.len();
            return refuse(&target, Why::TooLarge { tool, bytes });
        }
        let writable = caps.writable_mounts(action);
        let mounts = g
            .workspace
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
            .collect::<Vec<_>>();
        let writes = mounts.iter().any(|m| m.write);
        let plan = Plan {
            tool,
            input,
            mounts,
            egress,
            class,
            writes,
            program: None,
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
}

fn refuse(target: &str, why: Why) -> Decision {
    Decision::Refuse(Refusal::new(target, why))
}

/// Whether a write to the shell pattern `w` reaches a protected file: by the pattern's own
/// components, or by a file it matches in the grant (expanded on the host, relative to `base`).
/// `Err` when that cannot be told within the expansion's bounds.
fn pattern_protection(
    view: &dyn View,
    g: &GrantPolicy,
    tool: ToolName,
    base: &std::path::Path,
    roots: &[PathBuf],
    w: &str,
) -> Result<Option<Protection>, String> {
    let cannot_tell = || format!("the write pattern {w} matches more than the classifier checks");
    for alt in glob::alternatives(w).ok_or_else(cannot_tell)? {
        if let Some(p) = pattern_protected(&alt) {
            return Ok(Some(p));
        }
        for m in glob::expand_in(view, &base.join(&alt), roots).ok_or_else(cannot_tell)? {
            let shown = path_string(&m);
            let reached = match g.workspace.resolve_in(view, tool, &shown) {
                Ok(r) => r.path,
                Err(_) => m,
            };
            if let Some(p) = protected_in(view, &shown, &reached) {
                return Ok(Some(p));
            }
        }
    }
    Ok(None)
}

fn path_string(p: &std::path::Path) -> String {
    p.to_string_lossy().into_owned()
}

fn json<T: serde::Serialize>(v: &T) -> Vec<u8> {
    // Structs of strings always serialise.
    serde_json::to_vec(v).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args;

    struct Fixture {
        _dir: tempfile::TempDir,
        rw: PathBuf,
        ro: PathBuf,
        policy: Policy,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let rw = std::fs::canonicalize(dir.path()).unwrap().join("notes");
        let ro = std::fs::canonicalize(dir.path()).unwrap().join("ref");
        std::fs::create_dir_all(rw.join("generated")).unwrap();
        std::fs::create_dir_all(&ro).unwrap();
        std::fs::write(rw.join("a.txt"), "a").unwrap();
        std::fs::write(rw.join("gen.rs"), "// @generated by a tool\nfn x() {}\n").unwrap();
        std::fs::write(ro.join("r.txt"), "r").unwrap();
        let text = format!(
            r#"
[runner]
image = "sha256:{hex}"
[grants.safe]
mode = "safe"
tools = ["read_file", "write_file", "shell", "http_fetch"]
paths = [{{ path = "{rw}", write = true }}, {{ path = "{ro}" }}]
hosts = ["docs.example.org", "*.example.net"]
[grants.ask]
mode = "ask"
tools = ["read_file", "write_file", "shell", "http_fetch"]
paths = [{{ path = "{rw}", write = true }}, {{ path = "{ro}" }}]
hosts = ["docs.example.org"]
[grants.auto]
mode = "auto"
tools = ["read_file", "write_file", "shell", "http_fetch"]
paths = [{{ path = "{rw}", write = true }}, {{ path = "{ro}" }}]
hosts = ["docs.example.org"]
allow_addresses = ["192.0.2.0/24"]
[grants.readonly]
mode = "auto"
tools = ["read_file", "shell"]
paths = [{{ path = "{ro}" }}]
"#,
            hex = "a".repeat(64),
            rw = rw.display(),
            ro = ro.display()
        );
        let config = crate::config::parse(&text, "test.toml").expect("config");
        let policy = Policy::new(&config).expect("policy");
        Fixture {
            _dir: dir,
            rw,
            ro,
            policy,
        }
    }

    #[derive(Debug, PartialEq)]
    enum Want {
        Run,
        Ask,
        Refuse(&'static str),
    }

    fn outcome(f: &Fixture, grant: &str, tool: &str, raw: &str) -> (Want, Option<Plan>) {
        let g = f.policy.grant(grant).unwrap();
        let a = args::parse(tool, raw).expect(raw);
        match f.policy.decide(g, &a) {
            Decision::Allow(p) => (Want::Run, Some(p)),
            Decision::Ask(p, q) => {
                assert!(q.starts_with(&format!("Allow grant {grant} to ")), "{q}");
                (Want::Ask, Some(p))
            }
            Decision::Refuse(r) => {
                let leaked: &'static str = Box::leak(r.reason().to_string().into_boxed_str());
                (Want::Refuse(leaked), None)
            }
        }
    }

    #[test]
    fn modes_and_classes() {
        let f = fixture();
        let a = format!("{}/a.txt", f.rw.display());
        let rd = format!(r#"{{"path":"{a}"}}"#);
        let wr = format!(r#"{{"path":"{a}","content":"x"}}"#);
        let url = r#"{"url":"https://docs.example.org/x"}"#;
        // (grant, tool, arguments, run/ask/refuse)
        let cases: Vec<(&str, &str, String, &str)> = vec![
            ("safe", "read_file", rd.clone(), "run"),
            ("safe", "read_file", r#"{"path":"a.txt"}"#.into(), "run"),
            ("safe", "write_file", wr.clone(), "refuse"),
            ("safe", "shell", r#"{"command":"ls -la"}"#.into(), "run"),
            ("safe", "shell", r#"{"command":"touch x"}"#.into(), "refuse"),
            (
                "safe",
                "shell",
                r#"{"command":"echo $(id)"}"#.into(),
                "refuse",
            ),
            (
                "safe",
                "shell",
                r#"{"command":"rm -rf /"}"#.into(),
                "refuse",
            ),
            ("safe", "http_fetch", url.into(), "run"),
            ("ask", "read_file", rd.clone(), "run"),
            ("ask", "write_file", wr.clone(), "ask"),
            ("ask", "shell", r#"{"command":"ls"}"#.into(), "run"),
            ("ask", "shell", r#"{"command":"touch x"}"#.into(), "ask"),
            (
                "ask",
                "shell",
                r#"{"command":"python3 -c 'print(1)'"}"#.into(),
                "ask",
            ),
            ("ask", "shell", r#"{"command":"rm -rf /"}"#.into(), "ask"),
            ("auto", "write_file", wr.clone(), "run"),
            ("auto", "shell", r#"{"command":"touch x"}"#.into(), "run"),
            ("auto", "shell", r#"{"command":"sh -c 'ls'"}"#.into(), "run"),
            ("auto", "shell", r#"{"command":"rm -rf /"}"#.into(), "ask"),
            ("auto", "http_fetch", url.into(), "run"),
            ("readonly", "write_file", wr.clone(), "refuse"),
            ("readonly", "http_fetch", url.into(), "refuse"),
        ];
        for (grant, tool, raw, want) in cases {
            let (got, _) = outcome(&f, grant, tool, &raw);
            let got = match got {
                Want::Run => "run",
                Want::Ask => "ask",
                Want::Refuse(_) => "refuse",
            };
            assert_eq!(got, want, "{grant} {tool} {raw}");
        }
    }

    #[test]
    fn refusal_texts_the_model_can_act_on() {
        let f = fixture();
        let ro_file = format!("{}/r.txt", f.ro.display());
        let cases: Vec<(&str, &str, String, String)> = vec![
            (
                "auto",
                "read_file",
                r#"{"path":"/etc/passwd"}"#.into(),
                "read_file: /etc/passwd is outside the grant's directories".into(),
            ),
            (
                "auto",
                "write_file",
                format!(r#"{{"path":"{ro_file}","content":"x"}}"#),
                format!("write_file: {ro_file}"),
            ),
            (
                "auto",
                "write_file",
                r#"{"path":"generated/x.rs","content":"x"}"#.into(),
                "write_file: generated/x.rs is under `generated/`".into(),
            ),
            (
                "auto",
                "write_file",
                r#"{"path":"gen.rs","content":"x"}"#.into(),
                "write_file: gen.rs says `@generated`".into(),
            ),
            (
                "auto",
                "shell",
                r#"{"command":"echo x > generated/y"}"#.into(),
                "shell: the command writes generated/y: generated/y is under `generated/`".into(),
            ),
            (
                "auto",
                "http_fetch",
                r#"{"url":"https://evil.example.com/"}"#.into(),
                "http_fetch: evil.example.com is not one of the grant's hosts (docs.example.org)".into(),
            ),
            (
                "safe",
                "write_file",
                r#"{"path":"a.txt","content":"x"}"#.into(),
                "write_file: grant safe is in safe mode, which does not allow write_file".into(),
            ),
            (
                "safe",
                "shell",
                r#"{"command":"touch a"}"#.into(),
                "shell: grant safe is in safe mode, which does not allow a workspace_mutating command".into(),
            ),
            (
                "readonly",
                "http_fetch",
                r#"{"url":"https://docs.example.org/"}"#.into(),
                "http_fetch is not one of the tools of grant readonly".into(),
            ),
            (
                "auto",
                "shell",
                r#"{"command":"ls","cwd":"/etc"}"#.into(),
                "shell: /etc is outside the grant's directories".into(),
            ),
            // Over toolkit's stdin bound: refused before anything runs.
            (
                "auto",
                "write_file",
                format!(
                    r#"{{"path":"big.txt","content":"{}"}}"#,
                    "x".repeat(proto::tools::MAX_INPUT)
                ),
                "write_file: the call comes to 2097".into(),
            ),
        ];
        for (grant, tool, raw, prefix) in cases {
            match outcome(&f, grant, tool, &raw).0 {
                Want::Refuse(reason) => assert!(
                    reason.starts_with(&prefix),
                    "{raw}: {reason:?} does not start with {prefix:?}"
                ),
                other => panic!("{raw}: {other:?}"),
            }
        }
    }

    /// Write targets the shell expands, links written through and git's paths reach protected
    /// files however they are spelled.
    #[test]
    fn protected_targets_behind_patterns_and_links() {
        let f = fixture();
        let rw = f.rw.display().to_string();
        let shell =
            |command: &str| serde_json::json!({ "command": command, "cwd": rw }).to_string();
        // (command, the start of the refusal, or None where it runs in auto)
        let cases: Vec<(&str, Option<String>)> = vec![
            (
                "tee generat*/x.c < a.txt",
                Some(
                    "shell: the command writes generat*/x.c: generat*/x.c is under `generated/`"
                        .into(),
                ),
            ),
            (
                "sed -i s/a/b/ vendo?/l.c",
                Some("shell: the command writes vendo?/l.c: vendo?/l.c is under `vendor/`".into()),
            ),
            (
                "cp a.txt gen.r?",
                Some(format!(
                    "shell: the command writes gen.r?: {rw}/gen.rs says `@generated`"
                )),
            ),
            (
                "cp a.txt */x.c",
                Some(format!(
                    "shell: the command writes */x.c: {rw}/generated/x.c is under `generated/`"
                )),
            ),
            (
                "touch gen{e,}rated/x",
                Some(
                    "shell: the command writes gen{e,}rated/x: generated/x is under `generated/`"
                        .into(),
                ),
            ),
            (
                "ln -s generated/x l; echo y > l",
                Some(
                    "shell: the command writes generated/x: generated/x is under `generated/`"
                        .into(),
                ),
            ),
            (
                "ln -s gen.rs l && echo y > l",
                Some("shell: the command writes gen.rs: gen.rs says `@generated`".into()),
            ),
            (
                "git checkout HEAD generated/x",
                Some(
                    "shell: the command writes generated/x: generated/x is under `generated/`"
                        .into(),
                ),
            ),
            (
                "git restore --source=HEAD~1 gen.rs",
                Some("shell: the command writes gen.rs: gen.rs says `@generated`".into()),
            ),
            (
                "tar -xf a.tar -C generated",
                Some("shell: the command writes generated: generated is under `generated/`".into()),
            ),
            ("cp a.txt ?.bak", None),
            ("sed -i s/a/b/ a.tx?", None),
            ("ln -s a.txt l && cat l", None),
        ];
        for (command, want) in cases {
            let got = outcome(&f, "auto", "shell", &shell(command)).0;
            match (&got, &want) {
                (Want::Refuse(reason), Some(prefix)) => assert!(
                    reason.starts_with(prefix.as_str()),
                    "{command}: {reason:?} does not start with {prefix:?}"
                ),
                (Want::Run, None) => {}
                _ => panic!("{command}: {got:?}, wanted {want:?}"),
            }
        }
    }

    /// A command past the classifier's bounds is refused in every mode, naming the bound.
    /// A write the classifier cannot place is refused only where the classifier is all that
    /// guards the grant's protected targets: `protect = "classifier"`, direct writes, and a
    /// protected target in a writable directory. The mount table (`protect = "mount"`) and a
    /// commit (staged writes) hold them otherwise, and a grant without any has nothing to lose.
    #[test]
    fn unplaced_writes_are_refused_where_only_the_classifier_guards() {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let held = base.join("held");
        let bare = base.join("bare");
        std::fs::create_dir_all(held.join("vendor/lib")).unwrap();
        std::fs::create_dir_all(&bare).unwrap();
        let grant = |name: &str, path: &PathBuf, protect: &str, writes: &str| {
            format!(
                "[grants.{name}]\nmode = \"auto\"\ntools = [\"shell\"]\npaths = [{{ path = \"{}\", write = true }}]\nprotect = \"{protect}\"\nwrites = \"{writes}\"\n",
                path.display()
            )
        };
        let text = format!(
            "[runner]\nimage = \"sha256:{}\"\n{}{}{}{}",
            "a".repeat(64),
            grant("classifier", &held, "classifier", "direct"),
            grant("mount", &held, "mount", "direct"),
            grant("staged", &held, "classifier", "staged"),
            grant("bare", &bare, "classifier", "direct"),
        );
        let config = crate::config::parse(&text, "test.toml").expect("config");
        let policy = Policy::new(&config).expect("policy");
        let decide = |grant: &str, command: &str| {
            let raw = serde_json::json!({ "command": command }).to_string();
            let a = args::parse("shell", &raw).expect("args");
            policy.decide(policy.grant(grant).unwrap(), &a)
        };
        // (command, the classifier cannot place its write)
        let unplaced = [
            r#"cd "$D" && touch lib.c"#,
            "find . -name '*.c' -exec sed -i s/a/b/ {} +",
            "tar xf a.tar",
            "xargs touch < names.txt",
        ];
        for command in unplaced {
            match decide("classifier", command) {
                Decision::Refuse(r) => {
                    assert_eq!(r.why.kind(), "unplaced_write", "{command}");
                    let said = r.reason();
                    assert!(said.contains("vendor"), "{said}");
                }
                other => panic!("{command}: {other:?}"),
            }
            for grant in ["mount", "staged", "bare"] {
                if let Decision::Refuse(r) = decide(grant, command) {
                    assert_ne!(r.why.kind(), "unplaced_write", "{grant}: {command}");
                }
            }
        }
        // A write it can place is judged as before: outside vendor/, it runs.
        assert!(
            matches!(decide("classifier", "touch notes.txt"), Decision::Allow(_)),
            "a placed write"
        );
    }

    #[test]
    fn commands_past_the_bounds_are_refused() {
        let f = fixture();
        let long = format!(
            "echo {}; rm -rf /",
            "a".repeat(crate::classify::MAX_COMMAND_BYTES)
        );
        let deep = format!("{}rm -rf /", "nice ".repeat(100));
        let cases = [
            (
                long,
                "shell: the command is longer than the classifier reads",
            ),
            (
                deep,
                "shell: the command nests deeper than the classifier reads",
            ),
        ];
        for (command, prefix) in cases {
            let raw = serde_json::json!({ "command": command }).to_string();
            for grant in ["safe", "ask", "auto"] {
                match outcome(&f, grant, "shell", &raw).0 {
                    Want::Refuse(reason) => assert!(reason.starts_with(prefix), "{reason}"),
                    other => panic!("{grant}: {other:?}"),
                }
            }
        }
    }

    /// A recursive delete through a symlink that leads to a grant directory is dangerous.
    #[test]
    fn recursive_deletes_through_links() {
        let f = fixture();
        std::os::unix::fs::symlink(&f.ro, f.rw.join("to_ref")).unwrap();
        std::os::unix::fs::symlink("/", f.rw.join("to_root")).unwrap();
        std::fs::create_dir_all(f.rw.join("sub")).unwrap();
        let rw = f.rw.display().to_string();
        let cases = [
            ("rm -rf to_ref/", Some(CommandClass::Dangerous)),
            ("chmod -R 777 to_root/", Some(CommandClass::Dangerous)),
            ("rm -rf sub", Some(CommandClass::WorkspaceMutating)),
            ("rm -rf ../notes", Some(CommandClass::Dangerous)),
        ];
        for (command, want) in cases {
            let raw = serde_json::json!({ "command": command, "cwd": rw }).to_string();
            let (got, plan) = outcome(&f, "auto", "shell", &raw);
            let class = plan.and_then(|p| p.class);
            assert_eq!(class, want, "{command}: {got:?}");
        }
    }

    /// A write pattern that matches more than the expansion reads cannot be checked: it is
    /// `shell_complex` (asked in ask, refused in safe), not a plain write.
    #[test]
    fn an_unbounded_write_pattern_is_complex() {
        let f = fixture();
        let many = f.rw.join("many");
        std::fs::create_dir_all(&many).unwrap();
        for i in 0..=crate::glob::MAX_ENTRIES {
            std::fs::write(many.join(format!("f{i}")), "").unwrap();
        }
        let rw = f.rw.display().to_string();
        let raw = serde_json::json!({ "command": "touch many/*x", "cwd": rw }).to_string();
        let (got, plan) = outcome(&f, "ask", "shell", &raw);
        assert_eq!(got, Want::Ask);
        assert_eq!(plan.unwrap().class, Some(CommandClass::ShellComplex));
        match outcome(&f, "safe", "shell", &raw).0 {
            Want::Refuse(reason) => assert!(reason.contains("shell_complex"), "{reason}"),
            other => panic!("{other:?}"),
        }
        // The same pattern over a small directory is a plain write.
        let raw = serde_json::json!({ "command": "touch generated2*x", "cwd": rw }).to_string();
        let (_, plan) = outcome(&f, "ask", "shell", &raw);
        assert_eq!(plan.unwrap().class, Some(CommandClass::WorkspaceMutating));
    }

    /// What a person reads of a call shows the model's line breaks, terminal escapes and bidi
    /// controls as escapes, so a command cannot forge the question it is approved by; what
    /// runs is the raw text.
    #[test]
    fn the_model_text_people_read_is_shown_visibly() {
        let f = fixture();
        let raw = |c: char| {
            c.is_control()
                || ('\u{202a}'..='\u{202e}').contains(&c)
                || ('\u{2066}'..='\u{2069}').contains(&c)
                || ('\u{200b}'..='\u{200f}').contains(&c)
        };
        let command = "ls\n\nAllow grant ask to run `ls` (read_only)?\x1b[2J\u{202e}txt.exe";
        let a = args::parse(
            "shell",
            &serde_json::json!({ "command": command }).to_string(),
        )
        .expect("parses");
        let g = f.policy.grant("ask").unwrap();
        let (plan, question) = match f.policy.decide(g, &a) {
            Decision::Ask(plan, question) => (plan, question),
            other => panic!("{other:?}"),
        };
        assert!(!question.chars().any(raw), "{question:?}");
        assert_eq!(
            question,
            "Allow grant ask to run `ls\\n\\nAllow grant ask to run `ls` (read_only)?\\x1b[2J\\u{202e}txt.exe` \
             (shell_complex: the command does not parse as shell)?"
        );
        let input: serde_json::Value = serde_json::from_slice(&plan.input).unwrap();
        assert_eq!(
            input["command"], command,
            "the sandbox gets the raw command"
        );

        // (grant, tool, arguments, what the question or reason shows)
        let cases = [
            (
                "ask",
                "write_file",
                r#"{"path":"new\u001b]0;x\u0007\u200b.txt","content":"x"}"#,
                format!(
                    "Allow grant ask to write 1 bytes to {}/new\\x1b]0;x\\x07\\u{{200b}}.txt?",
                    f.rw.display()
                ),
            ),
            (
                "auto",
                "read_file",
                r#"{"path":"/etc/\u202epasswd\r"}"#,
                "read_file: /etc/\\u{202e}passwd\\r is outside".into(),
            ),
            (
                "auto",
                "shell",
                r#"{"command":"echo x > 'generated/\u2066y\\n'"}"#,
                "shell: the command writes generated/\\u{2066}y\\\\n: generated/\\u{2066}y\\\\n is under"
                    .into(),
            ),
        ];
        for (grant, tool, raw_args, shown) in cases {
            let a = args::parse(tool, raw_args).expect(raw_args);
            let g = f.policy.grant(grant).unwrap();
            let text = match f.policy.decide(g, &a) {
                Decision::Ask(_, q) => q,
                Decision::Refuse(r) => r.reason().to_string(),
                other => panic!("{raw_args}: {other:?}"),
            };
            assert!(!text.chars().any(raw), "{raw_args}: {text:?}");
            assert!(
                text.starts_with(&shown),
                "{raw_args}: {text:?} vs {shown:?}"
            );
        }
    }

    #[test]
    fn plans_resolve_paths_and_mount_by_class() {
        let f = fixture();
        // A relative path is resolved against the first directory and handed on absolute.
        let (_, plan) = outcome(&f, "auto", "read_file", r#"{"path":"a.txt"}"#);
        let plan = plan.unwrap();
        let input: serde_json::Value = serde_json::from_slice(&plan.input).unwrap();
        assert_eq!(input["path"], format!("{}/a.txt", f.rw.display()));
        // A read gets read-only mounts even in auto.
        assert!(plan.mounts.iter().all(|m| !m.write));
        assert_eq!(plan.mounts.len(), 2);
        let (_, plan) = outcome(&f, "auto", "shell", r#"{"command":"cat a.txt | wc -l"}"#);
        let plan = plan.unwrap();
        assert!(!plan.writes);
        assert_eq!(plan.class, Some(CommandClass::ReadOnly));
        // A mutating command gets the writable directory writable, and only that one.
        let (_, plan) = outcome(
            &f,
            "auto",
            "shell",
            &format!(r#"{{"command":"touch x","cwd":"{}"}}"#, f.rw.display()),
        );
        let plan = plan.unwrap();
        assert_eq!(
            plan.mounts,
            vec![
                // Writable and direct: its protected targets are held by the mount table.
                Mount {
                    protect: true,
                    ..Mount::at(&f.rw, true).unwrap()
                },
                Mount::at(&f.ro, false).unwrap(),
            ]
        );
        assert!(plan.writes);
        // http_fetch carries the grant's hosts and allowed addresses to the proxy.
        let (_, plan) = outcome(
            &f,
            "auto",
            "http_fetch",
            r#"{"url":"https://DOCS.example.org./p"}"#,
        );
        let plan = plan.unwrap();
        assert_eq!(
            plan.egress,
            Some(Egress {
                hosts: vec!["docs.example.org".into()],
                allow_addresses: vec!["192.0.2.0/24".parse().unwrap()]
            })
        );
        let input: serde_json::Value = serde_json::from_slice(&plan.input).unwrap();
        assert_eq!(input["url"], "https://docs.example.org/p");
    }

    #[test]
    fn offered_tools() {
        let f = fixture();
        let names = |g: &str| f.policy.offered(f.policy.grant(g).unwrap());
        use ToolName::*;
        assert_eq!(names("safe"), vec![ReadFile, Shell, HttpFetch]);
        assert_eq!(names("ask"), vec![ReadFile, WriteFile, Shell, HttpFetch]);
        assert_eq!(names("readonly"), vec![ReadFile, Shell]);
    }
}
