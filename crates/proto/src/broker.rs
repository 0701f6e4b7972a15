//! The broker protocol, version 1 (docs/design.md#protocol).
//!
//! One JSON object a line each way, at most [`MAX_LINE`] bytes a line. Requests on one
//! connection are answered in order. brokerd parses requests and writes answers with these
//! types; boxctl (and loopd's client library) does the reverse, so the two cannot drift.

use serde::{Deserialize, Serialize};

/// The protocol version this build speaks.
pub const PROTOCOL: u32 = 1;
/// The longest line either side accepts, newline excluded.
pub const MAX_LINE: usize = 4 * 1024 * 1024;
/// Where brokerd listens unless told otherwise (systemd's socket unit, `--socket`).
pub const DEFAULT_SOCKET: &str = "/run/boxmaker/broker.sock";
pub use crate::ident::{valid_ident, Ident, MAX_IDENT};

/// A request line. `id` is the client's, echoed back on the answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Run one tool call (or re-send it with `approval` after an `ask`).
    Call {
        id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        v: Option<u32>,
        session: String,
        call: String,
        grant: String,
        tool: String,
        /// The model's raw argument string, untouched by loopd.
        arguments: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        approval: Option<String>,
    },
    /// The JSON Schemas of the tools the grant offers in its mode.
    Tools {
        id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        v: Option<u32>,
        grant: String,
    },
    /// A page of a stored full output.
    Result {
        id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        v: Option<u32>,
        result_id: String,
        #[serde(default)]
        offset: usize,
    },
    /// The owner said no to an `ask`.
    Decline {
        id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        v: Option<u32>,
        ticket: String,
    },
    /// Forget a session's state (refusal counts, tickets).
    EndSession {
        id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        v: Option<u32>,
        session: String,
    },
    Status {
        id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        v: Option<u32>,
    },
    /// What a session's staged grants changed (clients and owners). Without `session`: the
    /// sessions with changes pending, and no paths.
    Changes {
        id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        v: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        grant: Option<String>,
        /// Include each text file's unified diff (bounded).
        #[serde(default)]
        diff: bool,
    },
    /// Land a session's staged changes in the real directories (owners only). Without
    /// `paths`, every change of the session (or of `grant`) but protected targets.
    Commit {
        id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        v: Option<u32>,
        session: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        grant: Option<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        paths: Vec<String>,
        /// Commit nothing unless every selected path can be committed.
        #[serde(default)]
        all_or_nothing: bool,
    },
    /// Throw a session's staged changes away (owners only); without `paths`, all of them.
    Discard {
        id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        v: Option<u32>,
        session: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        grant: Option<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        paths: Vec<String>,
    },
    /// An owner approves an `ask` ticket of a grant with `approvals = "owner"` (owners only).
    Approve {
        id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        v: Option<u32>,
        ticket: String,
    },
}

impl Request {
    pub fn id(&self) -> &str {
        self.head().0
    }

    pub fn version(&self) -> Option<u32> {
        self.head().1
    }

    /// What every request carries: its `id` and its `v`.
    fn head(&self) -> (&str, Option<u32>) {
        match self {
            Request::Call { id, v, .. }
            | Request::Tools { id, v, .. }
            | Request::Result { id, v, .. }
            | Request::Decline { id, v, .. }
            | Request::EndSession { id, v, .. }
            | Request::Status { id, v, .. }
            | Request::Changes { id, v, .. }
            | Request::Commit { id, v, .. }
            | Request::Discard { id, v, .. }
            | Request::Approve { id, v, .. } => (id, *v),
        }
    }
}

/// An answer line: the request's `id` (null when the line could not be read) and a body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    pub id: Option<String>,
    #[serde(flatten)]
    pub body: Body,
}

/// What brokerd answers, by `kind`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Body {
    /// The tool ran; `content` is a preview when `truncated` or when longer than the preview.
    Result {
        content: String,
        truncated: bool,
        /// `<grant>/<tool>`: what the output is labelled by.
        label: String,
        result_id: String,
        /// Where the preview cut the output: the character offset at which `result` continues
        /// (the first character not shown). Absent when the preview is the whole output.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        continues_at: Option<usize>,
    },
    /// The grant does not allow it; nothing ran.
    Refused {
        reason: String,
    },
    /// The owner must approve: re-send the same call with `approval` = `ticket`.
    Ask {
        question: String,
        ticket: String,
    },
    /// The same refusal was asked for too often in this session.
    Stopped {
        reason: String,
    },
    /// The tool ran and failed: one of the runner's fixed sentences.
    Failed {
        message: String,
    },
    /// Nothing could run: one of the runner's fixed sentences.
    Unavailable {
        message: String,
    },
    /// A protocol error: bad frame, unknown grant, peer not allowed, busy.
    Error {
        message: String,
    },
    Declined {},
    Tools {
        tools: Vec<ToolSchema>,
        /// The grant's writes wait in a staged layer for an owner's commit
        /// (`writes = "staged"`); absent when they land directly.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        staged: bool,
    },
    ResultPage {
        content: String,
        offset: usize,
        next_offset: Option<usize>,
    },
    Ended {},
    Status(Status),
    /// A session's staged changes (`session` null: the sessions with changes pending).
    Changes {
        session: Option<String>,
        changes: Vec<Change>,
        /// The session's staged bytes (all its layers).
        bytes: u64,
        /// `[broker] max_staged_bytes`: past it, the session's writes are refused.
        max_bytes: u64,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        sessions: Vec<SessionChanges>,
        /// How many changes (or, without a session, sessions) are not in the answer: past the
        /// most one layer lists, or past what fits in one line.
        #[serde(default, skip_serializing_if = "is_zero")]
        left_out: usize,
    },
    Committed {
        committed: Vec<String>,
        #[serde(default)]
        conflicts: Vec<PathReason>,
        #[serde(default)]
        skipped: Vec<PathReason>,
    },
    Discarded {
        discarded: Vec<String>,
    },
    Approved {},
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// What happened to one path of a staged layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    Added,
    Modified,
    Deleted,
    /// A file became a directory or a link, or the other way round.
    TypeChanged,
    /// Only the permission bits changed.
    ModeChanged,
}

impl ChangeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Added => "added",
            ChangeKind::Modified => "modified",
            ChangeKind::Deleted => "deleted",
            ChangeKind::TypeChanged => "type_changed",
            ChangeKind::ModeChanged => "mode_changed",
        }
    }
}

/// What a path of a staged layer is: as `changes` spells it, and as brokerd reads an entry
/// of the layer or the real directory (never following a link).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryKind {
    File,
    Dir,
    /// A symbolic link, as a link.
    Link,
    /// A device, FIFO or socket: listed, never committed.
    Other,
    /// Nothing: the path is deleted.
    #[serde(rename = "none")]
    Absent,
}

impl EntryKind {
    pub const ALL: [EntryKind; 5] = [
        EntryKind::File,
        EntryKind::Dir,
        EntryKind::Link,
        EntryKind::Other,
        EntryKind::Absent,
    ];

    /// The word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::File => "file",
            EntryKind::Dir => "dir",
            EntryKind::Link => "link",
            EntryKind::Other => "other",
            EntryKind::Absent => "none",
        }
    }
}

impl std::fmt::Display for EntryKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One changed path: the real path a commit would write, shown with control characters
/// escaped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Change {
    pub grant: String,
    pub path: String,
    pub change: ChangeKind,
    /// What the path is in the layer: `file`, `dir`, `link`, `other`, or `none` (deleted).
    pub what: EntryKind,
    /// A file's size in the layer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// A link's target in the layer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// The bits of `mode` a commit leaves out (setuid, setgid), in octal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dropped_bits: Option<String>,
    /// A protected target (vendored, generated): committed only when named.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub protected: bool,
    /// The real file changed since the session first staged it: its commit is refused.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub conflict: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
}

/// A session with staged changes pending.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionChanges {
    pub session: String,
    pub grants: Vec<String>,
    pub paths: usize,
    pub bytes: u64,
}

/// A path and why it was not committed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathReason {
    pub path: String,
    pub reason: String,
}

/// One tool as a model sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSchema {
    pub name: String,
    pub description: String,
    pub parameters: serde_json::Value,
}

/// Which sandbox runs a brokerd's calls, one per brokerd (docs/design.md#runner): as the
/// config's `[runner] backend`, `status` and the command lines spell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// A rootless Podman container per call (docs/design.md#the-podman-runner).
    Podman,
    /// A bubblewrap sandbox per call (docs/design.md#the-bwrap-runner).
    Bwrap,
}

/// `status`'s `backend` when brokerd has no `[runner]`: every call is refused.
pub const NO_BACKEND: &str = "none";

impl Backend {
    pub const ALL: [Backend; 2] = [Backend::Podman, Backend::Bwrap];

    /// The word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Podman => "podman",
            Backend::Bwrap => "bwrap",
        }
    }

    /// The backend spelt `word`, if any.
    pub fn parse(word: &str) -> Option<Backend> {
        Backend::ALL.into_iter().find(|b| b.as_str() == word)
    }

    /// The word for a brokerd's backend, or [`NO_BACKEND`] without one.
    pub fn name(backend: Option<Backend>) -> &'static str {
        backend.map_or(NO_BACKEND, Backend::as_str)
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The network of the egress proxy's container: one of Podman's rootless user-mode networks,
/// by the helper program it runs (docs/design.md#runner): as the config's `[runner]
/// egress_network`, `podman run --network=` and `podman info` spell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EgressNetwork {
    /// passt's `pasta`: Podman 4.4 and later, NixOS's.
    Pasta,
    /// `slirp4netns`: where Podman has no pasta (Debian 12's Podman 4.3).
    Slirp4netns,
}

impl EgressNetwork {
    pub const ALL: [EgressNetwork; 2] = [EgressNetwork::Pasta, EgressNetwork::Slirp4netns];

    /// As the config, `podman run --network=` and `podman info` spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            EgressNetwork::Pasta => "pasta",
            EgressNetwork::Slirp4netns => "slirp4netns",
        }
    }

    /// The network spelt `word`, if any.
    pub fn parse(word: &str) -> Option<EgressNetwork> {
        EgressNetwork::ALL.into_iter().find(|n| n.as_str() == word)
    }
}

impl std::fmt::Display for EgressNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `status`'s `backend`, a word: a [`Backend`]'s, or [`NO_BACKEND`] for `None`.
mod backend_or_none {
    use serde::de::{Deserializer, Error};
    use serde::{Deserialize, Serializer};

    use super::{Backend, NO_BACKEND};

    pub fn serialize<S: Serializer>(b: &Option<Backend>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(Backend::name(*b))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Backend>, D::Error> {
        let word = std::borrow::Cow::<str>::deserialize(d)?;
        if word == NO_BACKEND {
            return Ok(None);
        }
        match Backend::parse(&word) {
            Some(b) => Ok(Some(b)),
            None => Err(D::Error::unknown_variant(
                &word,
                &["podman", "bwrap", NO_BACKEND],
            )),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    pub protocol: u32,
    pub version: String,
    /// `None`: no `[runner]`, spelt [`NO_BACKEND`].
    #[serde(with = "backend_or_none")]
    pub backend: Option<Backend>,
    pub enforce_limits: bool,
    /// The start-up preflight, with the network preflight in its `network`.
    pub preflight: PreflightStatus,
    pub poisoned: bool,
    /// What of the configured confinement this host does not apply (a cgroup knob that
    /// cannot be set), one line each; absent when nothing is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub weakened: Vec<String>,
    /// The last record written and synced.
    pub audit_head: AuditHead,
    /// How long the audit record being written has been at it, once that is past 5 s: the
    /// audit disk is stalled, and calls wait for it. Absent while records go through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_stalled_ms: Option<u64>,
    /// brokerd's user IDs and capabilities; absent from a brokerd that could not read them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub privileges: Option<PrivilegesStatus>,
    /// Each `[toolsets.NAME]` of the config, by name; absent without any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub toolsets: Vec<ToolsetStatus>,
    /// Each grant's cache (`cache = true`), by grant; absent without any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub caches: Vec<CacheStatus>,
}

/// A grant's cache as `status` shows it: where it is, what it holds and its bound.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheStatus {
    pub grant: String,
    pub path: String,
    /// Bytes on disk, counted up to just past the bound; 0 before its first call.
    pub bytes: u64,
    pub max_bytes: u64,
}

/// A toolset as `status` shows it: the grants that run it and its check.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolsetStatus {
    pub name: String,
    pub grants: Vec<String>,
    /// Its check: the tools it must hold (toolkit of brokerd's version, busybox's sh).
    pub check: PreflightStatus,
}

/// brokerd's privileges as `status` shows them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrivilegesStatus {
    /// Real, effective and saved user IDs.
    pub uids: [u32; 3],
    /// Capabilities in the effective, permitted, inheritable or ambient set (`CAP_...`).
    pub capabilities: Vec<String>,
    /// The bounding set.
    pub bounding: Vec<String>,
}

/// A preflight as `status` shows it: `{"ok": null, "detail": ...}` before it has run, then
/// `{"ok", "detail", "terminal", "next_try_in_ms"}` (`next_try_in_ms` null unless a failed
/// preflight will be tried again).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct PreflightStatus {
    /// `None` until it has run.
    pub ok: Option<bool>,
    pub detail: String,
    /// A failure no retry mends until the operator acts; `None` until it has run.
    pub terminal: Option<bool>,
    /// When a failed, non-terminal preflight is tried again.
    pub next_try_in_ms: Option<u64>,
    /// The network preflight (only in the start-up preflight's status).
    pub network: Option<Box<PreflightStatus>>,
}

impl Serialize for PreflightStatus {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("ok", &self.ok)?;
        m.serialize_entry("detail", &self.detail)?;
        // Once it has run both fields are there, `next_try_in_ms` null when nothing is due.
        if let Some(terminal) = self.terminal {
            m.serialize_entry("terminal", &terminal)?;
            m.serialize_entry("next_try_in_ms", &self.next_try_in_ms)?;
        }
        if let Some(network) = &self.network {
            m.serialize_entry("network", network)?;
        }
        m.end()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditHead {
    pub seq: u64,
    pub hash: String,
}

impl Answer {
    pub fn new(id: Option<String>, body: Body) -> Answer {
        Answer { id, body }
    }

    /// The answer as one line, newline included.
    pub fn to_line(&self) -> String {
        // Serialising these types cannot fail: every map key is a string.
        let mut s = serde_json::to_string(self).unwrap_or_else(|_| {
            r#"{"id":null,"kind":"error","message":"the answer could not be encoded"}"#.into()
        });
        s.push('\n');
        s
    }

    /// Which answer this is: the `kind` field.
    pub fn kind(&self) -> Kind {
        match self.body {
            Body::Result { .. } => Kind::Result,
            Body::Refused { .. } => Kind::Refused,
            Body::Ask { .. } => Kind::Ask,
            Body::Stopped { .. } => Kind::Stopped,
            Body::Failed { .. } => Kind::Failed,
            Body::Unavailable { .. } => Kind::Unavailable,
            Body::Error { .. } => Kind::Error,
            Body::Declined {} => Kind::Declined,
            Body::Tools { .. } => Kind::Tools,
            Body::ResultPage { .. } => Kind::ResultPage,
            Body::Ended {} => Kind::Ended,
            Body::Status(_) => Kind::Status,
            Body::Changes { .. } => Kind::Changes,
            Body::Committed { .. } => Kind::Committed,
            Body::Discarded { .. } => Kind::Discarded,
            Body::Approved {} => Kind::Approved,
        }
    }
}

/// An answer's `kind`: the closed set of answers brokerd gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Result,
    Refused,
    Ask,
    Stopped,
    Failed,
    Unavailable,
    Error,
    Declined,
    Tools,
    ResultPage,
    Ended,
    Status,
    Changes,
    Committed,
    Discarded,
    Approved,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 16] = [
        Kind::Result,
        Kind::Refused,
        Kind::Ask,
        Kind::Stopped,
        Kind::Failed,
        Kind::Unavailable,
        Kind::Error,
        Kind::Declined,
        Kind::Tools,
        Kind::ResultPage,
        Kind::Ended,
        Kind::Status,
        Kind::Changes,
        Kind::Committed,
        Kind::Discarded,
        Kind::Approved,
    ];

    /// The `kind` field's word.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Result => "result",
            Kind::Refused => "refused",
            Kind::Ask => "ask",
            Kind::Stopped => "stopped",
            Kind::Failed => "failed",
            Kind::Unavailable => "unavailable",
            Kind::Error => "error",
            Kind::Declined => "declined",
            Kind::Tools => "tools",
            Kind::ResultPage => "result_page",
            Kind::Ended => "ended",
            Kind::Status => "status",
            Kind::Changes => "changes",
            Kind::Committed => "committed",
            Kind::Discarded => "discarded",
            Kind::Approved => "approved",
        }
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for Kind {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The preflight's JSON as status has always written it: before a run, after a pass,
    /// after a failure that is retried, with the network preflight inside.
    #[test]
    fn preflight_status_json() {
        let unrun = PreflightStatus {
            detail: "not run yet".into(),
            ..PreflightStatus::default()
        };
        let failed = PreflightStatus {
            ok: Some(false),
            detail: "x".into(),
            terminal: Some(false),
            next_try_in_ms: Some(500),
            network: None,
        };
        let passed = PreflightStatus {
            ok: Some(true),
            detail: "ok".into(),
            terminal: Some(false),
            next_try_in_ms: None,
            network: Some(Box::new(unrun.clone())),
        };
        let cases = [
            (&unrun, r#"{"ok":null,"detail":"not run yet"}"#),
            (
                &failed,
                r#"{"ok":false,"detail":"x","terminal":false,"next_try_in_ms":500}"#,
            ),
            (
                &passed,
                r#"{"ok":true,"detail":"ok","terminal":false,"next_try_in_ms":null,"network":{"ok":null,"detail":"not run yet"}}"#,
            ),
        ];
        for (p, json) in cases {
            assert_eq!(serde_json::to_string(p).unwrap(), json);
            let back: PreflightStatus = serde_json::from_str(json).unwrap();
            assert_eq!(&back, p, "{json}");
        }
    }

    /// `status`'s backend is one of three words, each read back as it was written; any other
    /// word is not a status.
    #[test]
    fn status_backend_words() {
        let status = |backend: &str| {
            format!(
                r#"{{"protocol":1,"version":"0","backend":{backend},"enforce_limits":true,"preflight":{{"ok":null,"detail":""}},"poisoned":false,"audit_head":{{"seq":0,"hash":""}}}}"#
            )
        };
        let cases = [
            ("\"podman\"", Some(Some(Backend::Podman))),
            ("\"bwrap\"", Some(Some(Backend::Bwrap))),
            ("\"none\"", Some(None)),
            ("\"docker\"", None),
            ("\"Podman\"", None),
            ("\"\"", None),
            ("null", None),
            ("1", None),
        ];
        for (word, want) in cases {
            let got = serde_json::from_str::<Status>(&status(word)).ok();
            assert_eq!(got.as_ref().map(|s| s.backend), want, "{word}");
            if let Some(s) = got {
                let again = serde_json::to_value(&s).unwrap();
                assert_eq!(again["backend"].to_string(), word);
            }
        }
        for b in Backend::ALL {
            assert_eq!(Backend::parse(b.as_str()), Some(b));
            assert_eq!(serde_json::to_string(&b).unwrap(), format!("\"{b}\""));
        }
        assert_eq!(Backend::parse(NO_BACKEND), None);
    }

    /// The egress networks as the config and Podman spell them; no other word is one.
    #[test]
    fn egress_networks_are_podmans_words() {
        for n in EgressNetwork::ALL {
            assert_eq!(EgressNetwork::parse(n.as_str()), Some(n));
        }
        let words: Vec<&str> = EgressNetwork::ALL.iter().map(|n| n.as_str()).collect();
        assert_eq!(words, ["pasta", "slirp4netns"]);
        for word in ["", "Pasta", "host", "pasta:--map-gw"] {
            assert_eq!(EgressNetwork::parse(word), None, "{word}");
        }
    }

    #[test]
    fn requests_parse_as_design_writes_them() {
        let lines = [
            r#"{"op":"call","id":"1","session":"s1","call":"c1","grant":"notes","tool":"shell","arguments":"{\"command\":\"ls\"}"}"#,
            r#"{"op":"call","id":"1","v":1,"session":"s1","call":"c1","grant":"notes","tool":"shell","arguments":"{}","approval":"t"}"#,
            r#"{"op":"decline","id":"2","ticket":"t"}"#,
            r#"{"op":"tools","id":"3","grant":"notes"}"#,
            r#"{"op":"result","id":"4","result_id":"r7","offset":0}"#,
            r#"{"op":"result","id":"4","result_id":"r7"}"#,
            r#"{"op":"end_session","id":"5","session":"s1"}"#,
            r#"{"op":"status","id":"6"}"#,
            r#"{"op":"changes","id":"7","session":"s1","grant":"notes","diff":true}"#,
            r#"{"op":"changes","id":"7"}"#,
            r#"{"op":"commit","id":"8","session":"s1","grant":"notes","paths":["/srv/notes/a.txt"],"all_or_nothing":true}"#,
            r#"{"op":"commit","id":"8","session":"s1"}"#,
            r#"{"op":"discard","id":"9","session":"s1","grant":"notes","paths":["/srv/notes/a.txt"]}"#,
            r#"{"op":"approve","id":"10","ticket":"t"}"#,
        ];
        for line in lines {
            let r: Request = serde_json::from_str(line).expect(line);
            let again: Request = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
            assert_eq!(r, again);
        }
        let bad = [
            r#"{"op":"status"}"#,
            r#"{"op":"launch","id":"1"}"#,
            r#"{"id":"1"}"#,
            r#"{"op":"status","id":1}"#,
            r#"{"op":"status","id":"1","extra":true}"#,
            r#"{"op":"call","id":"1","session":"s","call":"c","grant":"g","tool":"shell","arguments":{"command":"ls"}}"#,
            r#"{"op":"result","id":"4","result_id":"r7","offset":-1}"#,
            r#"{"op":"commit","id":"8"}"#,
            r#"{"op":"discard","id":"9","paths":["/srv/notes/a.txt"]}"#,
            r#"{"op":"approve","id":"10"}"#,
            r#"{"op":"changes","id":"7","diff":"yes"}"#,
        ];
        for line in bad {
            assert!(serde_json::from_str::<Request>(line).is_err(), "{line}");
        }
    }

    #[test]
    fn answers_are_written_as_design_writes_them() {
        let cases = [
            (
                Answer::new(
                    Some("1".into()),
                    Body::Result {
                        content: "x".into(),
                        truncated: false,
                        label: "notes/shell".into(),
                        result_id: "r7".into(),
                        continues_at: None,
                    },
                ),
                r#"{"id":"1","kind":"result","content":"x","truncated":false,"label":"notes/shell","result_id":"r7"}"#,
            ),
            (
                Answer::new(
                    Some("2".into()),
                    Body::Result {
                        content: "a\n[... 8 characters cut; the output continues at offset 1: page through it with its result_id ...]\nz".into(),
                        truncated: true,
                        label: "notes/shell".into(),
                        result_id: "r8".into(),
                        continues_at: Some(1),
                    },
                ),
                r#"{"id":"2","kind":"result","content":"a\n[... 8 characters cut; the output continues at offset 1: page through it with its result_id ...]\nz","truncated":true,"label":"notes/shell","result_id":"r8","continues_at":1}"#,
            ),
            (
                Answer::new(
                    None,
                    Body::Error {
                        message: "m".into(),
                    },
                ),
                r#"{"id":null,"kind":"error","message":"m"}"#,
            ),
            (
                Answer::new(Some("2".into()), Body::Declined {}),
                r#"{"id":"2","kind":"declined"}"#,
            ),
            (
                Answer::new(
                    Some("4".into()),
                    Body::ResultPage {
                        content: "c".into(),
                        offset: 0,
                        next_offset: None,
                    },
                ),
                r#"{"id":"4","kind":"result_page","content":"c","offset":0,"next_offset":null}"#,
            ),
            (
                Answer::new(
                    Some("7".into()),
                    Body::Changes {
                        session: Some("s1".into()),
                        changes: vec![Change {
                            grant: "notes".into(),
                            path: "/srv/notes/a.txt".into(),
                            change: ChangeKind::Modified,
                            what: EntryKind::File,
                            size: Some(12),
                            sha256: Some("ab".into()),
                            target: None,
                            mode: Some("4755".into()),
                            dropped_bits: Some("4000".into()),
                            protected: false,
                            conflict: false,
                            diff: Some("--- a".into()),
                        }],
                        bytes: 4096,
                        max_bytes: 8192,
                        sessions: vec![],
                        left_out: 3,
                    },
                ),
                r#"{"id":"7","kind":"changes","session":"s1","changes":[{"grant":"notes","path":"/srv/notes/a.txt","change":"modified","what":"file","size":12,"sha256":"ab","mode":"4755","dropped_bits":"4000","diff":"--- a"}],"bytes":4096,"max_bytes":8192,"left_out":3}"#,
            ),
            (
                Answer::new(
                    Some("7".into()),
                    Body::Changes {
                        session: None,
                        changes: vec![],
                        bytes: 0,
                        max_bytes: 8192,
                        sessions: vec![SessionChanges {
                            session: "s1".into(),
                            grants: vec!["notes".into()],
                            paths: 2,
                            bytes: 4096,
                        }],
                        left_out: 0,
                    },
                ),
                r#"{"id":"7","kind":"changes","session":null,"changes":[],"bytes":0,"max_bytes":8192,"sessions":[{"session":"s1","grants":["notes"],"paths":2,"bytes":4096}]}"#,
            ),
            (
                Answer::new(
                    Some("8".into()),
                    Body::Committed {
                        committed: vec!["/srv/notes/a.txt".into()],
                        conflicts: vec![],
                        skipped: vec![PathReason {
                            path: "/srv/notes/Cargo.lock".into(),
                            reason: "protected: name it to commit it".into(),
                        }],
                    },
                ),
                r#"{"id":"8","kind":"committed","committed":["/srv/notes/a.txt"],"conflicts":[],"skipped":[{"path":"/srv/notes/Cargo.lock","reason":"protected: name it to commit it"}]}"#,
            ),
            (
                Answer::new(
                    Some("9".into()),
                    Body::Discarded {
                        discarded: vec!["/srv/notes/a.txt".into()],
                    },
                ),
                r#"{"id":"9","kind":"discarded","discarded":["/srv/notes/a.txt"]}"#,
            ),
            (
                Answer::new(Some("10".into()), Body::Approved {}),
                r#"{"id":"10","kind":"approved"}"#,
            ),
        ];
        for (answer, line) in cases {
            assert_eq!(answer.to_line(), format!("{line}\n"));
            let back: Answer = serde_json::from_str(line).unwrap();
            assert_eq!(back, answer);
            // The typed kind is the line's own `kind`, in one spelling.
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(v["kind"], answer.kind().as_str());
            assert_eq!(serde_json::to_value(answer.kind()).unwrap(), v["kind"]);
        }
        for k in Kind::ALL {
            assert_eq!(serde_json::to_value(k).unwrap(), k.as_str());
        }
    }

    /// A change's `what` keeps its words on the wire (boxctl, the MCP tools and their tests
    /// read them), and a word it does not know is an error, not a guess.
    #[test]
    fn entry_kinds_are_spelt_as_changes_writes_them() {
        let words: Vec<&str> = EntryKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(words, ["file", "dir", "link", "other", "none"]);
        for k in EntryKind::ALL {
            assert_eq!(serde_json::to_value(k).unwrap(), k.as_str());
            let back: EntryKind = serde_json::from_value(k.as_str().into()).unwrap();
            assert_eq!(back, k);
        }
        for word in ["\"absent\"", "\"File\"", "\"\"", "null"] {
            assert!(serde_json::from_str::<EntryKind>(word).is_err(), "{word}");
        }
    }
}
