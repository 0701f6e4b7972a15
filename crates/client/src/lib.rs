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

use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

pub use proto::broker::{
    Answer, Body, Change, ChangeKind, PathReason, Request, SessionChanges, Status, ToolSchema,
    DEFAULT_SOCKET, MAX_LINE,
};

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

/// One line read from brokerd.
#[derive(Debug, PartialEq, Eq)]
enum Frame {
    /// The line without its newline (a last line without one counts).
    Line(Vec<u8>),
    /// The line was longer than the limit: read to its end and dropped.
    TooLong,
    Eof,
}

/// Reads one line of at most `max` bytes, newline excluded, as brokerd reads requests: a
/// longer line is consumed to its end without being kept, so the next one is read in step.
fn read_frame<R: BufRead>(r: &mut R, max: usize) -> std::io::Result<Frame> {
    let mut line = Vec::new();
    let mut too_long = false;
    loop {
        let buf = match r.fill_buf() {
            Ok(buf) => buf,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            return Ok(match (too_long, line.is_empty()) {
                (true, _) => Frame::TooLong,
                (false, true) => Frame::Eof,
                (false, false) => Frame::Line(line),
            });
        }
        let (chunk, found) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], Some(i + 1)),
            None => (buf, None),
        };
        if !too_long {
            if line.len() + chunk.len() > max {
                too_long = true;
                line = Vec::new();
            } else {
                line.extend_from_slice(chunk);
            }
        }
        let used = found.unwrap_or(buf.len());
        r.consume(used);
        if found.is_some() {
            return Ok(if too_long {
                Frame::TooLong
            } else {
                Frame::Line(line)
            });
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
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    /// A brokerd stand-in that answers each request line with the next of `answers`, its `id`
    /// replaced by the request's, and keeps the requests it read.
    fn broker<S: Into<String>>(
        answers: Vec<S>,
    ) -> (
        tempfile::TempDir,
        std::path::PathBuf,
        std::thread::JoinHandle<Vec<String>>,
    ) {
        let answers: Vec<String> = answers.into_iter().map(Into::into).collect();
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("broker.sock");
        let listener = UnixListener::bind(&socket).expect("bind");
        let t = std::thread::spawn(move || {
            let mut seen = Vec::new();
            let Ok((stream, _)) = listener.accept() else {
                return seen;
            };
            let mut reader = BufReader::new(&stream);
            for a in answers {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    break;
                }
                let req: serde_json::Value = serde_json::from_str(&line).expect("request json");
                let id = req["id"].as_str().unwrap_or_default().to_owned();
                seen.push(line.trim_end().to_owned());
                let out = a.replace("$ID", &id);
                let _ = (&stream).write_all(format!("{out}\n").as_bytes());
            }
            seen
        });
        (dir, socket, t)
    }

    #[test]
    fn typed_operations_send_the_protocol_and_read_its_answers() {
        let (_d, socket, t) = broker(vec![
            r#"{"id":"$ID","kind":"ask","question":"q?","ticket":"t1"}"#,
            r#"{"id":"$ID","kind":"declined"}"#,
            r#"{"id":"$ID","kind":"result_page","content":"abc","offset":3,"next_offset":null}"#,
            r#"{"id":"$ID","kind":"error","message":"unknown grant"}"#,
            r#"{"id":"$ID","kind":"ended"}"#,
            r#"{"id":"$ID","kind":"ended"}"#,
        ]);
        let mut c = Client::connect(&socket).expect("connect");
        let out = c
            .call(&Call {
                session: "s",
                call: "c1",
                grant: "g",
                tool: "shell",
                arguments: r#"{"command":"ls"}"#,
                approval: None,
            })
            .expect("call");
        assert_eq!(
            out,
            CallOutcome::Ask {
                question: "q?".into(),
                ticket: "t1".into()
            }
        );
        c.decline("t1").expect("decline");
        let page = c.result_page("r1", 3).expect("page");
        assert_eq!((page.content.as_str(), page.next_offset), ("abc", None));
        match c.tools("nope") {
            Err(ClientError::Broker(m)) => assert_eq!(m, "unknown grant"),
            other => panic!("{other:?}"),
        }
        c.end_session("s").expect("end");
        match c.status() {
            Err(ClientError::Unexpected { op, got }) => {
                assert_eq!((op, got), ("status", proto::broker::Kind::Ended))
            }
            other => panic!("{other:?}"),
        }
        let seen = t.join().expect("broker thread");
        let ops: Vec<serde_json::Value> = seen
            .iter()
            .map(|l| serde_json::from_str(l).expect("json"))
            .collect();
        let names: Vec<&str> = ops.iter().filter_map(|o| o["op"].as_str()).collect();
        assert_eq!(
            names,
            [
                "call",
                "decline",
                "result",
                "tools",
                "end_session",
                "status"
            ]
        );
        let ids: Vec<&str> = ops.iter().filter_map(|o| o["id"].as_str()).collect();
        assert_eq!(ids, ["1", "2", "3", "4", "5", "6"], "fresh ids");
        assert_eq!(ops[0]["arguments"], r#"{"command":"ls"}"#);
        assert!(ops[0].get("approval").is_none());
    }

    #[test]
    fn an_answer_to_another_request_is_an_error() {
        let (_d, socket, _t) = broker(vec![r#"{"id":"99","kind":"ended"}"#]);
        let mut c = Client::connect(&socket).expect("connect");
        assert!(matches!(
            c.end_session("s"),
            Err(ClientError::WrongId { .. })
        ));
    }

    #[test]
    fn a_closed_connection_and_a_bad_line_are_errors() {
        let (_d, socket, _t) = broker(vec!["not json"]);
        let mut c = Client::connect(&socket).expect("connect");
        assert!(matches!(c.status(), Err(ClientError::BadAnswer(_))));
        assert!(matches!(
            c.status(),
            Err(ClientError::Closed | ClientError::Io(_))
        ));
        assert!(matches!(
            Client::connect(Path::new("/nonexistent/broker.sock")),
            Err(ClientError::Connect { .. })
        ));
    }

    /// What a staged operation returned, for the table below.
    #[derive(Debug, PartialEq)]
    enum Got {
        Changes(Changes),
        Sessions(Vec<SessionChanges>),
        Committed(Committed),
        Discarded(Vec<String>),
        Approved,
        Broker(String),
    }

    type Op = fn(&mut Client) -> Result<Got, ClientError>;

    #[test]
    fn staged_operations_send_the_protocol_and_read_its_answers() {
        let paths = || vec!["/srv/notes/a.txt".to_string()];
        let change = Change {
            grant: "notes".into(),
            path: "/srv/notes/a.txt".into(),
            change: ChangeKind::Modified,
            what: "file".into(),
            size: Some(12),
            sha256: Some("ab".into()),
            target: None,
            mode: None,
            dropped_bits: None,
            protected: false,
            conflict: false,
            diff: Some("--- a".into()),
        };
        let pending = SessionChanges {
            session: "s1".into(),
            grants: vec!["notes".into()],
            paths: 1,
            bytes: 12,
        };
        let reason = |path: &str, reason: &str| PathReason {
            path: path.into(),
            reason: reason.into(),
        };
        // (answer, operation, the request as sent without its id, what the operation returns)
        let cases: Vec<(&str, Op, serde_json::Value, Got)> = vec![
            (
                r#"{"id":"$ID","kind":"changes","session":"s1","changes":[{"grant":"notes","path":"/srv/notes/a.txt","change":"modified","what":"file","size":12,"sha256":"ab","diff":"--- a"}],"bytes":12,"max_bytes":100,"left_out":7}"#,
                |c| c.changes(Some("s1"), Some("notes"), true).map(Got::Changes),
                serde_json::json!({"op":"changes","session":"s1","grant":"notes","diff":true}),
                Got::Changes(Changes {
                    session: Some("s1".into()),
                    changes: vec![change],
                    bytes: 12,
                    max_bytes: 100,
                    sessions: vec![],
                    left_out: 7,
                }),
            ),
            (
                r#"{"id":"$ID","kind":"changes","session":null,"changes":[],"bytes":0,"max_bytes":100,"sessions":[{"session":"s1","grants":["notes"],"paths":1,"bytes":12}]}"#,
                |c| c.sessions().map(Got::Sessions),
                serde_json::json!({"op":"changes","diff":false}),
                Got::Sessions(vec![pending]),
            ),
            (
                r#"{"id":"$ID","kind":"committed","committed":["/srv/notes/a.txt"],"conflicts":[],"skipped":[]}"#,
                |c| {
                    c.commit(
                        &Staged {
                            session: "s1",
                            grant: None,
                            paths: &[],
                        },
                        false,
                    )
                    .map(Got::Committed)
                },
                serde_json::json!({"op":"commit","session":"s1","all_or_nothing":false}),
                Got::Committed(Committed {
                    committed: paths(),
                    conflicts: vec![],
                    skipped: vec![],
                }),
            ),
            (
                r#"{"id":"$ID","kind":"committed","committed":[],"conflicts":[{"path":"/srv/notes/a.txt","reason":"changed"}],"skipped":[{"path":"/srv/notes/Cargo.lock","reason":"protected: name it to commit it"}]}"#,
                |c| {
                    c.commit(
                        &Staged {
                            session: "s1",
                            grant: Some("notes"),
                            paths: &["/srv/notes/a.txt".to_string()],
                        },
                        true,
                    )
                    .map(Got::Committed)
                },
                serde_json::json!({"op":"commit","session":"s1","grant":"notes","paths":["/srv/notes/a.txt"],"all_or_nothing":true}),
                Got::Committed(Committed {
                    committed: vec![],
                    conflicts: vec![reason("/srv/notes/a.txt", "changed")],
                    skipped: vec![reason(
                        "/srv/notes/Cargo.lock",
                        "protected: name it to commit it",
                    )],
                }),
            ),
            (
                r#"{"id":"$ID","kind":"discarded","discarded":["/srv/notes/a.txt"]}"#,
                |c| {
                    c.discard(&Staged {
                        session: "s1",
                        grant: Some("notes"),
                        paths: &["/srv/notes/a.txt".to_string()],
                    })
                    .map(Got::Discarded)
                },
                serde_json::json!({"op":"discard","session":"s1","grant":"notes","paths":["/srv/notes/a.txt"]}),
                Got::Discarded(paths()),
            ),
            (
                r#"{"id":"$ID","kind":"approved"}"#,
                |c| c.approve("t1").map(|()| Got::Approved),
                serde_json::json!({"op":"approve","ticket":"t1"}),
                Got::Approved,
            ),
            (
                r#"{"id":"$ID","kind":"error","message":"not an owner of this brokerd"}"#,
                |c| c.approve("t1").map(|()| Got::Approved),
                serde_json::json!({"op":"approve","ticket":"t1"}),
                Got::Broker("not an owner of this brokerd".into()),
            ),
        ];
        let (_d, socket, t) = broker(cases.iter().map(|c| c.0).collect());
        let mut c = Client::connect(&socket).expect("connect");
        let mut want_requests = Vec::new();
        for (answer, op, request, want) in cases {
            let got = match op(&mut c) {
                Err(ClientError::Broker(m)) => Got::Broker(m),
                other => other.expect(answer),
            };
            assert_eq!(got, want, "{answer}");
            want_requests.push(request);
        }
        let seen: Vec<serde_json::Value> = t
            .join()
            .expect("broker thread")
            .iter()
            .map(|l| {
                let mut v: serde_json::Value = serde_json::from_str(l).expect("json");
                v.as_object_mut().map(|o| o.remove("id"));
                v
            })
            .collect();
        assert_eq!(seen, want_requests);
        assert!(matches!(
            c.changes(Some("s1"), None, false),
            Err(ClientError::Closed | ClientError::Io(_))
        ));
    }

    /// The unexpected kind of a staged operation names the operation.
    #[test]
    fn a_staged_operation_answered_with_another_kind_is_an_error() {
        let (_d, socket, _t) = broker(vec![r#"{"id":"$ID","kind":"ended"}"#]);
        let mut c = Client::connect(&socket).expect("connect");
        match c.commit(
            &Staged {
                session: "s",
                grant: None,
                paths: &[],
            },
            false,
        ) {
            Err(ClientError::Unexpected { op, got }) => {
                assert_eq!((op, got), ("commit", proto::broker::Kind::Ended))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn commits_are_complete_when_nothing_was_left_out() {
        let r = || PathReason {
            path: "p".into(),
            reason: "r".into(),
        };
        // (conflicts, skipped, complete)
        let cases = [
            (vec![], vec![], true),
            (vec![r()], vec![], false),
            (vec![], vec![r()], false),
        ];
        for (conflicts, skipped, complete) in cases {
            let c = Committed {
                committed: vec![],
                conflicts,
                skipped,
            };
            assert_eq!(c.complete(), complete, "{c:?}");
        }
    }

    /// A request of exactly the limit is sent, one byte more is not (and the connection is
    /// still in step); an answer past the limit is dropped, and the next one is read.
    #[test]
    fn lines_are_held_to_the_protocol_limit() {
        let decline = |ticket: String| Request::Decline {
            id: "t".into(),
            v: None,
            ticket,
        };
        let frame = serde_json::to_string(&decline(String::new()))
            .expect("json")
            .len();
        let fits = decline("x".repeat(MAX_LINE - frame));
        let over = decline("x".repeat(MAX_LINE - frame + 1));
        let long_answer = format!(
            r#"{{"id":"$ID","kind":"error","message":"{}"}}"#,
            "y".repeat(MAX_LINE)
        );
        let (_d, socket, t) = broker(vec![
            r#"{"id":"$ID","kind":"declined"}"#.to_string(),
            r#"{"id":"$ID","kind":"ended"}"#.to_string(),
            long_answer,
            r#"{"id":"$ID","kind":"ended"}"#.to_string(),
        ]);
        let mut c = Client::connect(&socket).expect("connect");
        let sent = c.request(&fits).expect("a line of the limit");
        assert_eq!(sent.body, Body::Declined {});
        match c.request(&over) {
            Err(ClientError::RequestTooLong { len }) => assert_eq!(len, MAX_LINE + 1),
            other => panic!("{other:?}"),
        }
        c.end_session("s")
            .expect("in step after a request not sent");
        assert!(matches!(
            c.end_session("s"),
            Err(ClientError::AnswerTooLong)
        ));
        c.end_session("s").expect("in step after an answer dropped");
        let seen = t.join().expect("broker thread");
        assert_eq!(seen.len(), 4, "the long request never went out");
        assert_eq!(seen[0].len(), MAX_LINE);
    }

    #[test]
    fn framing_table() {
        let l = |s: &str| Frame::Line(s.as_bytes().to_vec());
        // (input, frames read until the end) with lines of at most 10 bytes
        let cases: [(&[u8], Vec<Frame>); 6] = [
            (b"", vec![Frame::Eof]),
            (b"abc\n", vec![l("abc"), Frame::Eof]),
            (b"abc", vec![l("abc"), Frame::Eof]),
            (
                b"0123456789\nx\n",
                vec![l("0123456789"), l("x"), Frame::Eof],
            ),
            (
                b"0123456789ABCDEFGHIJ\nx\n",
                vec![Frame::TooLong, l("x"), Frame::Eof],
            ),
            (b"\n0123456789A", vec![l(""), Frame::TooLong, Frame::Eof]),
        ];
        for (input, want) in cases {
            // A small buffer, so that lines span several reads.
            let mut r = BufReader::with_capacity(7, input);
            let mut got = Vec::new();
            loop {
                let f = read_frame(&mut r, 10).expect("read");
                let end = f == Frame::Eof;
                got.push(f);
                if end {
                    break;
                }
            }
            assert_eq!(got, want, "{:?}", String::from_utf8_lossy(input));
        }
    }
}
