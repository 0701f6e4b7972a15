//! The client side of the broker protocol (docs/design.md#protocol): what loopd links to talk
//! to brokerd, and what `boxctl` is built on. Blocking, one request at a time per [`Client`];
//! open more clients for concurrency. Its dependencies are `proto`, serde, serde_json and
//! thiserror: no async runtime, nothing of brokerd.
//!
//! [`Client::request`] sends any [`Request`] and returns the [`Answer`] as brokerd wrote it.
//! The typed operations number the request themselves and return what the operation can
//! answer: [`Client::call`] a [`CallOutcome`], [`Client::decline`], [`Client::result_page`],
//! [`Client::end_session`], [`Client::tools`], [`Client::status`], and for staged writes
//! (docs/design.md#staged-writes-and-owners) [`Client::changes`] and [`Client::sessions`]
//! (clients may read them), [`Client::commit`], [`Client::discard`] and [`Client::approve`]
//! (owners only). brokerd's `error` (or a kind the operation does not have) is
//! [`ClientError::Broker`] (or [`ClientError::Unexpected`]).
//!
//! Lines are held to the protocol's [`MAX_LINE`] both ways, as brokerd holds them: a request
//! past it is not sent, an answer past it is read to its end and dropped, and the connection
//! stays in step for the next request.

#![forbid(unsafe_code)]

use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

pub use proto::broker::{
    Answer, Body, Change, ChangeKind, EntryKind, PathReason, Request, SessionChanges, Status,
    ToolSchema, DEFAULT_SOCKET, MAX_LINE,
};
use proto::line::{Frame, LineReader};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot connect to {path}: {source}")]
    Connect {
        path: String,
        source: std::io::Error,
    },
    #[error("the connection to brokerd failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("brokerd closed the connection without answering")]
    Closed,
    #[error("brokerd's answer is not valid: {0}")]
    BadAnswer(String),
    /// The request would be a line longer than the protocol allows; nothing was sent.
    #[error("the request is {len} bytes, longer than a line may be ({MAX_LINE} bytes); nothing was sent")]
    RequestTooLong { len: usize },
    /// brokerd's answer was a line longer than the protocol allows; it was read and dropped.
    #[error("brokerd's answer is longer than a line may be ({MAX_LINE} bytes); it was dropped")]
    AnswerTooLong,
    #[error("brokerd answered request {got:?}, not {want:?}")]
    WrongId { want: String, got: Option<String> },
    /// brokerd answered `error` (bad frame, unknown grant, peer not allowed, busy).
    #[error("brokerd answered error: {0}")]
    Broker(String),
    /// brokerd answered a kind this operation does not have.
    #[error("brokerd answered {got} to {op}")]
    Unexpected {
        op: &'static str,
        got: proto::broker::Kind,
    },
}

/// What `tools` answers for a grant.
#[derive(Debug, Clone, PartialEq)]
pub struct GrantTools {
    pub tools: Vec<ToolSchema>,
    /// Its writes wait in a staged layer for an owner's commit.
    pub staged: bool,
}

/// One tool call's outcome (docs/design.md#answers: the answers to `call`).
#[derive(Debug, Clone, PartialEq)]
pub enum CallOutcome {
    /// The tool ran. `content` is a preview when `truncated`; page the rest with
    /// [`Client::result_page`] and `result_id`.
    Result {
        content: String,
        truncated: bool,
        label: String,
        result_id: String,
        /// Where the preview cut the output: the offset to page on from.
        continues_at: Option<usize>,
    },
    /// The grant does not allow it; nothing ran.
    Refused { reason: String },
    /// The owner must approve: call again with `approval` = `ticket`, or decline it.
    Ask { question: String, ticket: String },
    /// The same refusal was asked for too often in this session.
    Stopped { reason: String },
    /// The tool ran and failed.
    Failed { message: String },
    /// Nothing could run.
    Unavailable { message: String },
}

/// One tool call, as loopd has it from the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call<'a> {
    pub session: &'a str,
    pub call: &'a str,
    pub grant: &'a str,
    pub tool: &'a str,
    /// The model's raw argument string, untouched.
    pub arguments: &'a str,
    /// The ticket of an `ask` the owner approved.
    pub approval: Option<&'a str>,
}

/// A page of a stored full output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResultPage {
    pub content: String,
    pub offset: usize,
    /// Where the next page starts; `None` on the last page.
    pub next_offset: Option<usize>,
}

/// A session's staged changes (`changes` with a session), or the sessions with changes
/// pending (`changes` without one).
#[derive(Debug, Clone, PartialEq)]
pub struct Changes {
    /// The session asked about; `None` when none was named.
    pub session: Option<String>,
    pub changes: Vec<Change>,
    /// What the session holds staged, and the bound past which its writes are refused.
    pub bytes: u64,
    pub max_bytes: u64,
    /// Without a session: the sessions with changes pending.
    pub sessions: Vec<SessionChanges>,
    /// How many changes (or sessions) the answer leaves out: past the most one layer lists,
    /// or past what fits in one line.
    pub left_out: usize,
}

/// Which of a session's staged changes a commit or a discard takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Staged<'a> {
    pub session: &'a str,
    /// Only this grant's changes.
    pub grant: Option<&'a str>,
    /// Only these paths (as `changes` shows them); empty: every change, and for a commit
    /// every change but protected targets.
    pub paths: &'a [String],
}

/// What a commit landed and what it did not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    pub committed: Vec<String>,
    /// Paths whose real file changed since the session staged them: not committed.
    pub conflicts: Vec<PathReason>,
    /// Protected targets the commit did not name: not committed.
    pub skipped: Vec<PathReason>,
}

impl Committed {
    /// Whether everything the commit selected landed.
    pub fn complete(&self) -> bool {
        self.conflicts.is_empty() && self.skipped.is_empty()
    }
}

pub struct Client {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    next_id: u64,
}

impl Client {
    pub fn connect(path: &Path) -> Result<Client, ClientError> {
        let stream = UnixStream::connect(path).map_err(|source| ClientError::Connect {
            path: path.display().to_string(),
            source,
        })?;
        Client::from_stream(stream)
    }

    /// A client over a connection made elsewhere: by a thread that took another user's
    /// credentials to connect, say, since brokerd reads its peer from the connecting process.
    pub fn from_stream(stream: UnixStream) -> Result<Client, ClientError> {
        let writer = stream.try_clone()?;
        Ok(Client {
            reader: BufReader::new(stream),
            writer,
            next_id: 1,
        })
    }

    /// Bounds how long one answer may take (a call can take as long as its tool's limit).
    pub fn set_timeout(&self, t: Option<Duration>) -> Result<(), ClientError> {
        self.writer.set_read_timeout(t)?;
        Ok(())
    }

    /// A fresh request id for this connection.
    pub fn next_id(&mut self) -> String {
        let id = self.next_id.to_string();
        self.next_id += 1;
        id
    }

    /// Sends one request and reads its answer. A request longer than [`MAX_LINE`] is not
    /// sent; an answer longer than it is dropped ([`ClientError::AnswerTooLong`]).
    pub fn request(&mut self, req: &Request) -> Result<Answer, ClientError> {
        let mut line =
            serde_json::to_string(req).map_err(|e| ClientError::BadAnswer(e.to_string()))?;
        if line.len() > MAX_LINE {
            return Err(ClientError::RequestTooLong { len: line.len() });
        }
        line.push('\n');
        self.writer.write_all(line.as_bytes())?;
        let answer = match read_frame(&mut self.reader, MAX_LINE)? {
            Frame::Line(l) => l,
            Frame::TooLong => return Err(ClientError::AnswerTooLong),
            Frame::Eof => return Err(ClientError::Closed),
        };
        let answer =
            std::str::from_utf8(&answer).map_err(|e| ClientError::BadAnswer(e.to_string()))?;
        let answer: Answer = serde_json::from_str(answer.trim_end())
            .map_err(|e| ClientError::BadAnswer(e.to_string()))?;
        if answer.id.as_deref() != Some(req.id()) && answer.id.is_some() {
            return Err(ClientError::WrongId {
                want: req.id().to_string(),
                got: answer.id,
            });
        }
        Ok(answer)
    }

    /// Runs one tool call (or re-sends it with the approval of an `ask`).
    pub fn call(&mut self, c: &Call<'_>) -> Result<CallOutcome, ClientError> {
        let req = Request::Call {
            id: self.next_id(),
            v: None,
            session: c.session.into(),
            call: c.call.into(),
            grant: c.grant.into(),
            tool: c.tool.into(),
            arguments: c.arguments.into(),
            approval: c.approval.map(str::to_owned),
        };
        let answer = self.request(&req)?;
        Ok(match answer.body {
            Body::Result {
                content,
                truncated,
                label,
                result_id,
                continues_at,
            } => CallOutcome::Result {
                content,
                truncated,
                label,
                result_id,
                continues_at,
            },
            Body::Refused { reason } => CallOutcome::Refused { reason },
            Body::Ask { question, ticket } => CallOutcome::Ask { question, ticket },
            Body::Stopped { reason } => CallOutcome::Stopped { reason },
            Body::Failed { message } => CallOutcome::Failed { message },
            Body::Unavailable { message } => CallOutcome::Unavailable { message },
            _ => return Err(unexpected("call", &answer)),
        })
    }

    /// Tells brokerd the owner said no to an `ask`.
    pub fn decline(&mut self, ticket: &str) -> Result<(), ClientError> {
        let req = Request::Decline {
            id: self.next_id(),
            v: None,
            ticket: ticket.into(),
        };
        let answer = self.request(&req)?;
        match answer.body {
            Body::Declined {} => Ok(()),
            _ => Err(unexpected("decline", &answer)),
        }
    }

    /// The page of a stored full output that starts at `offset`.
    pub fn result_page(
        &mut self,
        result_id: &str,
        offset: usize,
    ) -> Result<ResultPage, ClientError> {
        let req = Request::Result {
            id: self.next_id(),
            v: None,
            result_id: result_id.into(),
            offset,
        };
        let answer = self.request(&req)?;
        match answer.body {
            Body::ResultPage {
                content,
                offset,
                next_offset,
            } => Ok(ResultPage {
                content,
                offset,
                next_offset,
            }),
            _ => Err(unexpected("result", &answer)),
        }
    }

    /// Forgets a session's state (refusal counts, tickets).
    pub fn end_session(&mut self, session: &str) -> Result<(), ClientError> {
        let req = Request::EndSession {
            id: self.next_id(),
            v: None,
            session: session.into(),
        };
        let answer = self.request(&req)?;
        match answer.body {
            Body::Ended {} => Ok(()),
            _ => Err(unexpected("end_session", &answer)),
        }
    }

    /// The tools the grant offers in its mode, as a model sees them.
    /// The grant's tools, and whether its writes are staged.
    pub fn tools(&mut self, grant: &str) -> Result<GrantTools, ClientError> {
        let req = Request::Tools {
            id: self.next_id(),
            v: None,
            grant: grant.into(),
        };
        let answer = self.request(&req)?;
        match answer.body {
            Body::Tools { tools, staged } => Ok(GrantTools { tools, staged }),
            _ => Err(unexpected("tools", &answer)),
        }
    }

    /// brokerd's version, backend, preflights, poisoning and audit head.
    pub fn status(&mut self) -> Result<Status, ClientError> {
        let req = Request::Status {
            id: self.next_id(),
            v: None,
        };
        let answer = self.request(&req)?;
        match answer.body {
            Body::Status(s) => Ok(s),
            _ => Err(unexpected("status", &answer)),
        }
    }

    /// A session's staged changes (only `grant`'s when named; with each text file's diff when
    /// `diff`). Without a session: the sessions with changes pending, in
    /// [`Changes::sessions`].
    pub fn changes(
        &mut self,
        session: Option<&str>,
        grant: Option<&str>,
        diff: bool,
    ) -> Result<Changes, ClientError> {
        let req = Request::Changes {
            id: self.next_id(),
            v: None,
            session: session.map(str::to_owned),
            grant: grant.map(str::to_owned),
            diff,
        };
        let answer = self.request(&req)?;
        match answer.body {
            Body::Changes {
                session,
                changes,
                bytes,
                max_bytes,
                sessions,
                left_out,
            } => Ok(Changes {
                session,
                changes,
                bytes,
                max_bytes,
                sessions,
                left_out,
            }),
            _ => Err(unexpected("changes", &answer)),
        }
    }

    /// The sessions with staged changes pending.
    pub fn sessions(&mut self) -> Result<Vec<SessionChanges>, ClientError> {
        Ok(self.changes(None, None, false)?.sessions)
    }

    /// Lands staged changes in the real directories (owners only). With `all_or_nothing`, a
    /// conflict lands nothing.
    pub fn commit(
        &mut self,
        which: &Staged<'_>,
        all_or_nothing: bool,
    ) -> Result<Committed, ClientError> {
        let req = Request::Commit {
            id: self.next_id(),
            v: None,
            session: which.session.into(),
            grant: which.grant.map(str::to_owned),
            paths: which.paths.to_vec(),
            all_or_nothing,
        };
        let answer = self.request(&req)?;
        match answer.body {
            Body::Committed {
                committed,
                conflicts,
                skipped,
            } => Ok(Committed {
                committed,
                conflicts,
                skipped,
            }),
            _ => Err(unexpected("commit", &answer)),
        }
    }

    /// Throws staged changes away (owners only); returns the paths discarded.
    pub fn discard(&mut self, which: &Staged<'_>) -> Result<Vec<String>, ClientError> {
        let req = Request::Discard {
            id: self.next_id(),
            v: None,
            session: which.session.into(),
            grant: which.grant.map(str::to_owned),
            paths: which.paths.to_vec(),
        };
        let answer = self.request(&req)?;
        match answer.body {
            Body::Discarded { discarded } => Ok(discarded),
            _ => Err(unexpected("discard", &answer)),
        }
    }

    /// Approves an `ask` ticket of a grant with `approvals = "owner"` (owners only); the
    /// client that was asked then re-sends its call with the ticket.
    pub fn approve(&mut self, ticket: &str) -> Result<(), ClientError> {
        let req = Request::Approve {
            id: self.next_id(),
            v: None,
            ticket: ticket.into(),
        };
        let answer = self.request(&req)?;
        match answer.body {
            Body::Approved {} => Ok(()),
            _ => Err(unexpected("approve", &answer)),
        }
    }
}

/// Reads one line of at most `max` bytes, newline excluded, as brokerd reads requests
/// ([`LineReader`]).
fn read_frame<R: BufRead>(r: &mut R, max: usize) -> std::io::Result<Frame> {
    let mut reading = LineReader::new(max);
    loop {
        let buf = match r.fill_buf() {
            Ok(buf) => buf,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            return Ok(reading.end());
        }
        let (used, frame) = reading.take(buf);
        r.consume(used);
        if let Some(frame) = frame {
            return Ok(frame);
        }
    }
}

/// `error` as [`ClientError::Broker`]; any other kind as [`ClientError::Unexpected`].
fn unexpected(op: &'static str, answer: &Answer) -> ClientError {
    match &answer.body {
        Body::Error { message } => ClientError::Broker(message.clone()),
        _ => ClientError::Unexpected {
            op,
            got: answer.kind(),
        },
    }
}

#[cfg(test)]
mod tests;
