//! The client side of the broker protocol (DESIGN.md "Protocol (v1)"): what loopd links to
//! talk to brokerd, and what `boxctl` is built on. Blocking, one request at a time per
//! [`Client`]; open more clients for concurrency. Its dependencies are `proto`, serde and
//! thiserror: no async runtime, nothing of brokerd.
//!
//! [`Client::request`] sends any [`Request`] and returns the [`Answer`] as brokerd wrote it.
//! The typed operations ([`Client::call`], [`Client::decline`], [`Client::result_page`],
//! [`Client::end_session`], [`Client::tools`], [`Client::status`]) number the request
//! themselves and return what the operation can answer: a [`CallOutcome`] for a call, the
//! [`Status`] for a status, and [`ClientError::Broker`] when brokerd answered `error` (or a
//! kind the operation does not have).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

pub use proto::broker::{Answer, Body, Request, Status, ToolSchema, DEFAULT_SOCKET};

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
    #[error("brokerd answered request {got:?}, not {want:?}")]
    WrongId { want: String, got: Option<String> },
    /// brokerd answered `error` (bad frame, unknown grant, peer not allowed, busy).
    #[error("brokerd answered error: {0}")]
    Broker(String),
    /// brokerd answered a kind this operation does not have.
    #[error("brokerd answered {got} to {op}")]
    Unexpected { op: &'static str, got: &'static str },
}

/// One tool call's outcome (DESIGN.md "Protocol (v1)": the answers to `call`).
#[derive(Debug, Clone, PartialEq)]
pub enum CallOutcome {
    /// The tool ran. `content` is a preview when `truncated`; page the rest with
    /// [`Client::result_page`] and `result_id`.
    Result {
        content: String,
        truncated: bool,
        label: String,
        result_id: String,
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

    /// Sends one request and reads its answer.
    pub fn request(&mut self, req: &Request) -> Result<Answer, ClientError> {
        let mut line =
            serde_json::to_string(req).map_err(|e| ClientError::BadAnswer(e.to_string()))?;
        line.push('\n');
        self.writer.write_all(line.as_bytes())?;
        let mut answer = String::new();
        if self.reader.read_line(&mut answer)? == 0 {
            return Err(ClientError::Closed);
        }
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
            } => CallOutcome::Result {
                content,
                truncated,
                label,
                result_id,
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
    pub fn tools(&mut self, grant: &str) -> Result<Vec<ToolSchema>, ClientError> {
        let req = Request::Tools {
            id: self.next_id(),
            v: None,
            grant: grant.into(),
        };
        let answer = self.request(&req)?;
        match answer.body {
            Body::Tools { tools } => Ok(tools),
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
    fn broker(
        answers: Vec<&'static str>,
    ) -> (
        tempfile::TempDir,
        std::path::PathBuf,
        std::thread::JoinHandle<Vec<String>>,
    ) {
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
            Err(ClientError::Unexpected { op, got }) => assert_eq!((op, got), ("status", "ended")),
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
}
