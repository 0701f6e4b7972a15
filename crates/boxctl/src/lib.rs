//! The client side of the broker protocol (DESIGN.md "Protocol (v1)"): what loopd links to
//! talk to brokerd, and what `boxctl` is built on. Blocking, one request at a time per
//! [`Client`]; open more clients for concurrency.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

pub use proto::broker::{Answer, Body, Request};

/// Where brokerd listens by default.
pub const DEFAULT_SOCKET: &str = "/run/boxmaker/broker.sock";

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
}
