//! What an MCP client sees of brokerd: the grant's tools with their annotations, and each
//! answer as a tool result. No I/O here; every sentence the model or the owner reads is a
//! [`Say`].
//!
//! Besides brokerd's tools the bridge offers two of its own, both read only: [`READ_RESULT`]
//! pages a cut output, and [`STAGED_CHANGES`] shows what the session's writes left staged for
//! the owner (docs/design.md#staged-writes-and-owners). Committing, discarding and approving
//! are the owner's, never a tool's.

use std::fmt;
use std::sync::Arc;

use client::{CallOutcome, Changes, ClientError, ResultPage, ToolSchema};
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool, ToolAnnotations};

/// The bridge's own tool: pages a stored whole output by its `result_id`.
pub const READ_RESULT: &str = "read_result";

/// The bridge's own tool: the session's staged changes, awaiting the owner's commit.
pub const STAGED_CHANGES: &str = "staged_changes";

/// The longest argument string sent to brokerd: a longer one cannot fit in one request line
/// (`proto::broker::MAX_LINE`, with room for the rest of the request).
pub const MAX_ARGUMENTS: usize = proto::broker::MAX_LINE - 64 * 1024;

/// What each of brokerd's tools does to the world, as MCP's hints say it. A tool brokerd
/// offers that is not here gets no annotations, which MCP reads as the most careful
/// (may write, may destroy, reaches the open world).
const HINTS: &[(&str, Hints)] = &[
    (
        "read_file",
        Hints {
            read_only: true,
            destructive: false,
            open_world: false,
        },
    ),
    (
        "http_fetch",
        Hints {
            read_only: true,
            destructive: false,
            open_world: true,
        },
    ),
    (
        "write_file",
        Hints {
            read_only: false,
            destructive: true,
            open_world: false,
        },
    ),
    (
        "shell",
        Hints {
            read_only: false,
            destructive: true,
            open_world: false,
        },
    ),
    (
        READ_RESULT,
        Hints {
            read_only: true,
            destructive: false,
            open_world: false,
        },
    ),
    (
        STAGED_CHANGES,
        Hints {
            read_only: true,
            destructive: false,
            open_world: false,
        },
    ),
];

#[derive(Debug, Clone, Copy)]
struct Hints {
    read_only: bool,
    destructive: bool,
    open_world: bool,
}

fn annotations(tool: &str) -> Option<ToolAnnotations> {
    let (_, h) = HINTS.iter().find(|(name, _)| *name == tool)?;
    Some(
        ToolAnnotations::new()
            .read_only(h.read_only)
            .destructive(h.destructive)
            .open_world(h.open_world),
    )
}

/// brokerd's tools for the grant, as MCP tools, then [`READ_RESULT`], then [`STAGED_CHANGES`]
/// when the grant's writes are staged and one of its tools may write (otherwise there is never
/// anything staged to list).
pub fn tools(from_broker: Vec<ToolSchema>, staged: bool) -> Vec<Tool> {
    let may_write = staged && from_broker.iter().any(|t| may_write(&t.name));
    let mut out: Vec<Tool> = from_broker
        .into_iter()
        .map(|t| tool(t.name, t.description, t.parameters))
        .collect();
    out.push(tool(
        READ_RESULT.into(),
        Say::ReadResultDescription.to_string(),
        read_result_schema(),
    ));
    if may_write {
        out.push(tool(
            STAGED_CHANGES.into(),
            Say::StagedChangesDescription.to_string(),
            staged_changes_schema(),
        ));
    }
    out
}

/// One tool as MCP lists it: its schema, which MCP wants an object (brokerd's always is; the
/// bridge's own are), and its [`HINTS`].
fn tool(name: String, description: String, schema: serde_json::Value) -> Tool {
    let schema = match schema {
        serde_json::Value::Object(o) => o,
        _ => JsonObject::new(),
    };
    let tool = Tool::new(name.clone(), description, Arc::new(schema));
    match annotations(&name) {
        Some(a) => tool.annotate(a),
        None => tool,
    }
}

/// The arguments of one of the bridge's own tools (none: `{}`); `bad` says what was wrong.
fn own_arguments<T: serde::de::DeserializeOwned>(
    arguments: Option<JsonObject>,
    bad: fn(String) -> Say<'static>,
) -> Result<T, String> {
    let value = serde_json::Value::Object(arguments.unwrap_or_default());
    serde_json::from_value(value).map_err(|e| bad(e.to_string()).to_string())
}

/// Whether a tool of brokerd's may write: not read only by [`HINTS`], or not in it.
fn may_write(tool: &str) -> bool {
    HINTS
        .iter()
        .find(|(name, _)| *name == tool)
        .is_none_or(|(_, h)| !h.read_only)
}

fn staged_changes_schema() -> serde_json::Value {
    serde_json::json!({
        "type": "object",
        "properties": {
            "diff": {
                "type": "boolean",
                "description": "Include each changed text file's diff (bounded)."
            }
        },
        "additionalProperties": false
    })
}

/// The arguments of [`STAGED_CHANGES`].
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StagedChanges {
    #[serde(default)]
    pub diff: bool,
}

impl StagedChanges {
    pub fn parse(arguments: Option<JsonObject>) -> Result<StagedChanges, String> {
        own_arguments(arguments, Say::BadStagedChanges)
    }
}

/// The session's staged changes as the model reads them: what is held, a line per path (as
/// the owner's `boxctl changes --text` shows it), the diffs.
pub fn changes(grant: &str, c: &Changes) -> CallToolResult {
    if c.changes.is_empty() {
        return CallToolResult::success(vec![ContentBlock::text(
            Say::NoStagedChanges { grant }.to_string(),
        )]);
    }
    let mut text = Say::Staged {
        grant,
        paths: c.changes.len() + c.left_out,
        bytes: c.bytes,
        max_bytes: c.max_bytes,
    }
    .to_string();
    text.push_str(&crate::staged::ChangeList(&c.changes).to_string());
    text.push_str(&crate::staged::LeftOut(c.left_out).to_string());
    if c.changes.iter().any(|c| c.diff.is_some()) {
        text.push('\n');
        text.push_str(&crate::staged::Diffs(&c.changes).to_string());
    }
    CallToolResult::success(vec![ContentBlock::text(text)])
}

fn read_result_schema() -> serde_json::Value {
    serde_json::json!({
        "type": "object",
        "properties": {
            "result_id": {
                "type": "string",
                "description": "The result_id a truncated result named."
            },
            "offset": {
                "type": "integer",
                "minimum": 0,
                "description": "Where the page starts, in characters of the whole output (0 first, then the offset the previous page named)."
            }
        },
        "required": ["result_id"],
        "additionalProperties": false
    })
}

/// The arguments of [`READ_RESULT`].
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadResult {
    pub result_id: String,
    #[serde(default)]
    pub offset: usize,
}

impl ReadResult {
    pub fn parse(arguments: Option<JsonObject>) -> Result<ReadResult, String> {
        own_arguments(arguments, Say::BadReadResult)
    }
}

/// A call's answer as the tool result the model sees (everything but `ask`, which the bridge
/// turns into a question to the owner first).
pub fn outcome(grant: &str, outcome: &CallOutcome) -> CallToolResult {
    match outcome {
        CallOutcome::Result {
            content,
            truncated,
            label,
            result_id,
            continues_at,
        } => {
            let mut text = format!("[{label}]\n{content}");
            match continues_at {
                Some(offset) => text.push_str(
                    &Say::Truncated {
                        result_id,
                        offset: *offset,
                    }
                    .to_string(),
                ),
                None if *truncated => text.push_str(&Say::Capped.to_string()),
                None => {}
            }
            CallToolResult::success(vec![ContentBlock::text(text)])
        }
        CallOutcome::Refused { reason } => error(Say::Refused { grant, reason }),
        CallOutcome::Stopped { reason } => error(Say::Stopped { reason }),
        CallOutcome::Failed { message } => error(Say::Failed { message }),
        CallOutcome::Unavailable { message } => error(Say::Unavailable { message }),
        // Never shown as is: the bridge asks the owner, or says it cannot.
        CallOutcome::Ask { question, .. } => error(Say::CannotAsk { grant, question }),
    }
}

/// A page of a stored output, with where the next one starts.
pub fn page(result_id: &str, page: &ResultPage) -> CallToolResult {
    let mut text = page.content.clone();
    text.push_str(
        &Say::PageEnd {
            result_id,
            next: page.next_offset,
        }
        .to_string(),
    );
    CallToolResult::success(vec![ContentBlock::text(text)])
}

/// A tool result with `isError: true` saying `say`.
pub fn error(say: Say<'_>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(say.to_string())])
}

/// What the client library's error means for a call: whether anything may have run.
pub fn client_error(e: &ClientError) -> CallToolResult {
    match e {
        ClientError::Broker(message) => error(Say::BrokerError { message }),
        ClientError::Connect { .. } => error(Say::Unreachable { error: e }),
        ClientError::RequestTooLong { .. } => error(Say::NotSent { error: e }),
        _ => error(Say::Lost { error: e }),
    }
}

/// Every sentence the bridge writes for the model or the owner.
#[derive(Debug)]
pub enum Say<'a> {
    /// The server's instructions to the client.
    Instructions {
        grant: &'a str,
    },
    ReadResultDescription,
    /// Appended to a result whose content is a preview: where the whole output continues.
    Truncated {
        result_id: &'a str,
        offset: usize,
    },
    /// Appended to a result cut at the output cap, with nothing more kept.
    Capped,
    /// Appended to a page of [`READ_RESULT`].
    PageEnd {
        result_id: &'a str,
        next: Option<usize>,
    },
    BadReadResult(String),
    StagedChangesDescription,
    BadStagedChanges(String),
    /// Before the lines of [`STAGED_CHANGES`].
    Staged {
        grant: &'a str,
        paths: usize,
        bytes: u64,
        max_bytes: u64,
    },
    NoStagedChanges {
        grant: &'a str,
    },
    Refused {
        grant: &'a str,
        reason: &'a str,
    },
    Stopped {
        reason: &'a str,
    },
    Failed {
        message: &'a str,
    },
    Unavailable {
        message: &'a str,
    },
    /// brokerd answered `error`.
    BrokerError {
        message: &'a str,
    },
    /// brokerd could not be reached: nothing ran.
    Unreachable {
        error: &'a ClientError,
    },
    /// The connection failed after the request went out: the call may have run.
    Lost {
        error: &'a ClientError,
    },
    /// The client library would not send the request: nothing ran.
    NotSent {
        error: &'a ClientError,
    },
    TooLong {
        len: usize,
    },
    /// The question put to the owner through elicitation.
    Question {
        grant: &'a str,
        tool: &'a str,
        question: &'a str,
    },
    /// The client cannot ask the owner (no elicitation).
    CannotAsk {
        grant: &'a str,
        question: &'a str,
    },
    /// The owner declined, or dismissed the question.
    Declined,
    /// Asking the owner failed.
    NotAsked {
        why: String,
    },
}

impl fmt::Display for Say<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Say::Instructions { grant } => instructions(f, grant),
            Say::ReadResultDescription => read_result_description(f),
            Say::Truncated { result_id, offset } => write!(
                f,
                "\n[boxmaker: the output above is cut. Read on from where the cut begins with \
                 the tool read_result {{\"result_id\":\"{result_id}\",\"offset\":{offset}}} \
                 (offset 0 is the start); each page names where the next one starts.]"
            ),
            Say::Capped => write!(
                f,
                "\n[boxmaker: the tool printed more than its output cap; the output above is \
                 all that was kept.]"
            ),
            Say::PageEnd {
                result_id,
                next: Some(n),
            } => write!(
                f,
                "\n[boxmaker: more follows: read_result \
                 {{\"result_id\":\"{result_id}\",\"offset\":{n}}}]"
            ),
            Say::PageEnd { next: None, .. } => write!(f, "\n[boxmaker: end of the output]"),
            Say::BadReadResult(e) => write!(
                f,
                "read_result takes {{\"result_id\": string, \"offset\": integer}}: {e}"
            ),
            Say::StagedChangesDescription => staged_changes_description(f),
            Say::BadStagedChanges(e) => {
                write!(f, "staged_changes takes {{\"diff\": boolean}}: {e}")
            }
            Say::Staged {
                grant,
                paths,
                bytes,
                max_bytes,
            } => staged(f, grant, *paths, *bytes, *max_bytes),
            Say::NoStagedChanges { grant } => write!(
                f,
                "[boxmaker: no staged changes of the grant \"{grant}\" in this session await \
                 the owner's commit]"
            ),
            Say::Refused { grant, reason } => {
                write!(f, "refused by the grant \"{grant}\"; nothing ran: {reason}")
            }
            Say::Stopped { reason } => write!(f, "stopped; nothing ran: {reason}"),
            Say::Failed { message } => write!(f, "the tool failed: {message}"),
            Say::Unavailable { message } => {
                write!(f, "the call could not run; nothing ran: {message}")
            }
            Say::BrokerError { message } => write!(f, "brokerd answered an error: {message}"),
            Say::Unreachable { error } => {
                write!(f, "brokerd cannot be reached; nothing ran: {error}")
            }
            Say::Lost { error } => write!(
                f,
                "brokerd's answer was lost ({error}); the call may have run: brokerd's audit \
                 log says"
            ),
            Say::NotSent { error } => {
                write!(f, "nothing was sent to brokerd; nothing ran: {error}")
            }
            Say::TooLong { len } => write!(
                f,
                "the arguments are {len} bytes, longer than brokerd takes ({MAX_ARGUMENTS}); \
                 nothing ran"
            ),
            Say::Question {
                grant,
                tool,
                question,
            } => write!(
                f,
                "boxmaker: the grant \"{grant}\" asks you before this {tool} call runs.\n\
                 {question}\n\
                 Accept runs it once; decline refuses it."
            ),
            Say::CannotAsk { grant, question } => cannot_ask(f, grant, question),
            Say::Declined => write!(f, "the owner declined this call; nothing ran"),
            Say::NotAsked { why } => write!(
                f,
                "the owner could not be asked ({why}); the call was declined and nothing ran"
            ),
        }
    }
}

/// [`Say::Instructions`]: the server's instructions to the client.
fn instructions(f: &mut fmt::Formatter<'_>, grant: &str) -> fmt::Result {
    write!(
        f,
        "These tools run through boxmaker under the owner's grant \"{grant}\": each call \
         is checked against the grant, runs in a fresh sandbox that sees only the \
         granted directories (http_fetch reaches only the granted hosts), and is audited. \
         A result starts with its label [grant/tool]; a cut output says how to read the \
         rest with read_result. Some calls wait for the owner's approval."
    )
}

/// [`Say::ReadResultDescription`]: what [`READ_RESULT`] does.
fn read_result_description(f: &mut fmt::Formatter<'_>) -> fmt::Result {
    write!(
        f,
        "Read a page of a whole tool output that a result showed only in part (the \
         result names its result_id). Start at offset 0; each page names the offset of \
         the next one."
    )
}

/// [`Say::StagedChangesDescription`]: what [`STAGED_CHANGES`] does.
fn staged_changes_description(f: &mut fmt::Formatter<'_>) -> fmt::Result {
    write!(
        f,
        "List this session's staged changes awaiting the owner's commit: the files \
         this grant's calls added, modified or deleted. They wait in the session's \
         layer: your calls see them, the real files have them only once the owner \
         commits them, and the owner may discard them instead. Read only: nothing \
         here commits, discards or approves. With \"diff\": true, each changed text \
         file's diff follows."
    )
}

/// [`Say::Staged`]: the line before the staged changes' lines, with how many bytes are
/// staged of the most there may be.
fn staged(
    f: &mut fmt::Formatter<'_>,
    grant: &str,
    paths: usize,
    bytes: u64,
    max_bytes: u64,
) -> fmt::Result {
    writeln!(
        f,
        "[boxmaker: {paths} staged change(s) of the grant \"{grant}\" in this \
         session, awaiting the owner's commit ({bytes} of {max_bytes} bytes staged); \
         the real files change only when the owner commits them]"
    )
}

/// [`Say::CannotAsk`]: the call the client cannot ask the owner about, and how the owner
/// approves such calls.
fn cannot_ask(f: &mut fmt::Formatter<'_>, grant: &str, question: &str) -> fmt::Result {
    write!(
        f,
        "the grant \"{grant}\" asks the owner before this call, and this MCP client \
         cannot ask them (it does not support elicitation); nothing ran. The owner \
         would be asked: {question}\n\
         The owner approves such calls from an MCP client that supports elicitation \
         (it shows them the question to accept or decline), or runs the call through \
         boxctl (boxctl call, then again with --approval), or changes the grant's mode \
         in brokerd's config. A call is never approved on the model's word."
    )
}

#[cfg(test)]
mod tests;
