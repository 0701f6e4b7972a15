//! `boxctl mcp`: an MCP server on standard input and output that is a client of brokerd
//! (README "Any MCP agent"). The grant is fixed by the command line; the model picks tools and
//! arguments, never the grant, and never approves its own calls.
//!
//! - `tools/list` is brokerd's `tools` answer for the grant, with MCP's annotations
//!   ([`answer::tools`]), plus `read_result`, which pages a cut output by its `result_id`, and
//!   for a grant that may write `staged_changes`, brokerd's `changes` for this session and
//!   grant. Both are read only: the bridge never sends `commit`, `discard` or `approve`, which
//!   are the owner's (docs/design.md#staged-writes-and-owners).
//! - `tools/call` is one broker `call` with a fresh call id. An `ask` becomes an elicitation
//!   to the human when the client declares it: accept sends the same call again with the
//!   ticket, decline or cancel sends `decline`. Without elicitation the model is told that
//!   the owner must approve, and how.
//! - Every broker operation runs on a connection of its own, on a blocking thread, and reads
//!   its answer to the end: a cancelled request (`notifications/cancelled`) or a client that
//!   went away ends nothing that runs in brokerd. The call finishes and is audited as usual,
//!   its answer is read and dropped, and the connection is closed whole. An `ask` nobody can
//!   answer any more is declined. Before the process exits it waits for all of that, also
//!   after SIGTERM or SIGINT (a client's way to stop a server that still works), which stop
//!   only the serving.

pub mod answer;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use client::{Call, CallOutcome, Client, ClientError};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ElicitRequestParams,
    ElicitationAction, ElicitationSchema, Implementation, ListToolsResult, PaginatedRequestParams,
    ProtocolVersion, ServerCapabilities, ServerConfig,
};
use rmcp::service::{ElicitationMode, RequestContext};
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use answer::{ReadResult, Say, StagedChanges, MAX_ARGUMENTS, READ_RESULT, STAGED_CHANGES};

/// The longest JSON-RPC line read from the client. A request up to this long is parsed and
/// answered (a call whose arguments brokerd cannot take is an error result, and brokerd never
/// sees it); a longer line is dropped unread, and the server reads on.
const MAX_MESSAGE: usize = 16 * 1024 * 1024;

/// How long one broker answer may take: longer than any call brokerd lets run (its
/// `timeout_ms` bounds every tool's limit and the clean-up after it).
const ANSWER_WITHIN: Duration = Duration::from_secs(15 * 60);

/// Who the bridge talks to and for which grant.
#[derive(Debug, Clone)]
pub struct Options {
    pub socket: PathBuf,
    pub grant: String,
    /// The session the calls belong to; a fresh one when not given.
    pub session: Option<String>,
}

/// Serves MCP on standard input and output until the client closes them, then waits for
/// every broker operation still under way. Returns the exit code.
pub fn run(opts: Options) -> Result<u8, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let result = rt.block_on(serve(opts));
    // Every broker operation has ended by now; what may remain is a read of standard input
    // that cannot be interrupted (after a signal), which must not keep the process alive.
    rt.shutdown_timeout(Duration::from_millis(100));
    result
}

async fn serve(opts: Options) -> Result<u8, String> {
    let own_session = opts.session.is_none();
    let bridge = Bridge::new(opts);
    let broker = bridge.broker.clone();
    let session = bridge.session.clone();
    let (stdin, stdout) = rmcp::transport::stdio();
    let transport = AsyncRwTransport::new(stdin, stdout).with_max_line_length(MAX_MESSAGE);
    let result = match bridge.serve(transport).await {
        Ok(running) => {
            let stop = running.cancellation_token();
            let waiting = running.waiting();
            tokio::pin!(waiting);
            let ended = tokio::select! {
                r = &mut waiting => r,
                () = stop_signal() => {
                    stop.cancel();
                    waiting.await
                }
            };
            ended
                .map(|_| 0)
                .map_err(|e| format!("the MCP service ended abnormally: {e}"))
        }
        // The client went away or spoke no MCP before the handshake completed.
        Err(e) => Err(format!("no MCP session: {e}")),
    };
    // Calls under way finish, are audited and read to their end before the process exits.
    broker.tracker.close();
    broker.tracker.wait().await;
    if own_session {
        // Nobody can use this session again: brokerd may forget its refusal counts.
        let _ = broker.op(move |c| c.end_session(&session)).await;
    }
    result
}

/// SIGTERM or SIGINT; never, where they cannot be watched.
async fn stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => std::future::pending().await,
    }
}

/// The way to brokerd: one connection per operation, on a blocking thread, tracked so that
/// the process waits for it.
#[derive(Clone)]
struct Broker {
    socket: PathBuf,
    tracker: TaskTracker,
}

impl Broker {
    /// Runs `f` on a fresh connection. The connection is read to its answer and closed
    /// whatever becomes of the request that wanted it.
    async fn op<T, F>(&self, f: F) -> Result<T, ClientError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Client) -> Result<T, ClientError> + Send + 'static,
    {
        let socket = self.socket.clone();
        let task = self.tracker.spawn_blocking(move || {
            let mut client = Client::connect(&socket)?;
            client.set_timeout(Some(ANSWER_WITHIN))?;
            f(&mut client)
        });
        match task.await {
            Ok(r) => r,
            Err(e) => Err(ClientError::Io(std::io::Error::other(e.to_string()))),
        }
    }
}

#[derive(Clone)]
struct Bridge {
    broker: Broker,
    grant: Arc<str>,
    session: Arc<str>,
    /// Call ids: this process's prefix and a counter, fresh for every request.
    call_prefix: Arc<str>,
    calls: Arc<AtomicU64>,
}

impl Bridge {
    fn new(opts: Options) -> Bridge {
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default();
        let prefix = format!("mcp-{stamp}-{}", std::process::id());
        Bridge {
            broker: Broker {
                socket: opts.socket,
                tracker: TaskTracker::new(),
            },
            session: opts.session.unwrap_or_else(|| prefix.clone()).into(),
            grant: opts.grant.into(),
            call_prefix: prefix.into(),
            calls: Arc::new(AtomicU64::new(0)),
        }
    }

    /// A call id no other request of this process (or an earlier one) used: 1 to 64 of the
    /// identifier alphabet.
    fn next_call_id(&self) -> String {
        let n = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        format!("{}-{n}", self.call_prefix)
    }

    /// One `tools/call`: the broker call, and for an `ask` the owner's answer.
    async fn call(
        &self,
        tool: String,
        arguments: String,
        ct: CancellationToken,
        peer: rmcp::Peer<RoleServer>,
    ) -> CallToolResult {
        if arguments.len() > MAX_ARGUMENTS {
            return answer::error(Say::TooLong {
                len: arguments.len(),
            });
        }
        let call = OwnedCall {
            session: self.session.to_string(),
            call: self.next_call_id(),
            grant: self.grant.to_string(),
            tool,
            arguments,
        };
        let first = {
            let c = call.clone();
            self.broker
                .op(move |client| client.call(&c.as_call(None)))
                .await
        };
        let (question, ticket) = match first {
            Ok(CallOutcome::Ask { question, ticket }) => (question, ticket),
            Ok(other) => return answer::outcome(&self.grant, &other),
            Err(e) => return answer::client_error(&e),
        };
        let can_ask = peer
            .supported_elicitation_modes()
            .contains(&ElicitationMode::Form);
        if !can_ask {
            // The ticket stays unused and expires; the owner was never asked.
            return answer::error(Say::CannotAsk {
                grant: &self.grant,
                question: &question,
            });
        }
        let message = Say::Question {
            grant: &self.grant,
            tool: &call.tool,
            question: &question,
        }
        .to_string();
        let params = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message,
            requested_schema: ElicitationSchema::new(Default::default()),
        };
        let asked = tokio::select! {
            r = peer.create_elicitation(params) => Some(r),
            () = ct.cancelled() => None,
        };
        let refusal = match asked {
            Some(Ok(r)) if r.action == ElicitationAction::Accept => {
                let approved = self
                    .broker
                    .op(move |client| client.call(&call.as_call(Some(&ticket))))
                    .await;
                return match approved {
                    Ok(o) => answer::outcome(&self.grant, &o),
                    Err(e) => answer::client_error(&e),
                };
            }
            Some(Ok(_)) => Say::Declined,
            Some(Err(e)) => Say::NotAsked { why: e.to_string() },
            None => Say::NotAsked {
                why: "the request was cancelled".into(),
            },
        };
        match self.broker.op(move |client| client.decline(&ticket)).await {
            Ok(()) => answer::error(refusal),
            Err(e) => answer::client_error(&e),
        }
    }

    async fn read_result(&self, arguments: Option<rmcp::model::JsonObject>) -> CallToolResult {
        let ReadResult { result_id, offset } = match ReadResult::parse(arguments) {
            Ok(r) => r,
            Err(text) => return CallToolResult::error(vec![rmcp::model::ContentBlock::text(text)]),
        };
        let id = result_id.clone();
        match self
            .broker
            .op(move |client| client.result_page(&id, offset))
            .await
        {
            Ok(page) => answer::page(&result_id, &page),
            Err(e) => answer::client_error(&e),
        }
    }

    /// The session's staged changes of this grant, read only.
    async fn staged_changes(&self, arguments: Option<rmcp::model::JsonObject>) -> CallToolResult {
        let StagedChanges { diff } = match StagedChanges::parse(arguments) {
            Ok(a) => a,
            Err(text) => return CallToolResult::error(vec![rmcp::model::ContentBlock::text(text)]),
        };
        let (session, grant) = (self.session.clone(), self.grant.clone());
        match self
            .broker
            .op(move |client| client.changes(Some(&session), Some(&grant), diff))
            .await
        {
            Ok(changes) => answer::changes(&self.grant, &changes),
            Err(e) => answer::client_error(&e),
        }
    }
}

/// A call as the bridge keeps it between its first sending and its approval.
#[derive(Debug, Clone)]
struct OwnedCall {
    session: String,
    call: String,
    grant: String,
    tool: String,
    arguments: String,
}

impl OwnedCall {
    fn as_call<'a>(&'a self, approval: Option<&'a str>) -> Call<'a> {
        Call {
            session: &self.session,
            call: &self.call,
            grant: &self.grant,
            tool: &self.tool,
            arguments: &self.arguments,
            approval,
        }
    }
}

impl ServerHandler for Bridge {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("boxmaker", env!("CARGO_PKG_VERSION")))
            .with_instructions(Say::Instructions { grant: &self.grant }.to_string())
    }

    /// The versions with the `initialize` handshake, where a server may ask the client
    /// (`elicitation/create`) while a call waits; later ones forbid that.
    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        std::borrow::Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let grant = self.grant.to_string();
        match self.broker.op(move |c| c.tools(&grant)).await {
            Ok(g) => Ok(ListToolsResult::with_all_items(answer::tools(
                g.tools, g.staged,
            ))),
            Err(e) => Err(ErrorData::internal_error(
                format!("brokerd's tools for this grant: {e}"),
                None,
            )),
        }
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let this = self.clone();
        // Tracked, so that the process waits for the whole call (a decline included) even
        // when the client is gone.
        let flow = self.broker.tracker.spawn(async move {
            if request.name == READ_RESULT {
                return this.read_result(request.arguments).await;
            }
            if request.name == STAGED_CHANGES {
                return this.staged_changes(request.arguments).await;
            }
            // The model's arguments as it wrote them, for brokerd to parse strictly.
            let arguments = serde_json::Value::Object(request.arguments.unwrap_or_default());
            this.call(
                request.name.into_owned(),
                arguments.to_string(),
                context.ct,
                context.peer,
            )
            .await
        });
        match flow.await {
            Ok(result) => Ok(result.into()),
            Err(e) => Err(ErrorData::internal_error(e.to_string(), None)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_ids_are_fresh_identifiers_and_the_session_is_one_too() {
        let b = Bridge::new(Options {
            socket: PathBuf::from("/nonexistent"),
            grant: "g".into(),
            session: None,
        });
        assert!(proto::broker::valid_ident(&b.session), "{}", b.session);
        let ids: Vec<String> = (0..3).map(|_| b.next_call_id()).collect();
        for id in &ids {
            assert!(proto::broker::valid_ident(id), "{id}");
        }
        assert!(ids[0] != ids[1] && ids[1] != ids[2], "{ids:?}");
        let named = Bridge::new(Options {
            socket: PathBuf::from("/nonexistent"),
            grant: "g".into(),
            session: Some("mine".into()),
        });
        assert_eq!(&*named.session, "mine");
    }

    /// staged_changes asks brokerd for this session's and this grant's changes, whatever the
    /// model writes, and sends nothing else.
    #[tokio::test]
    async fn staged_changes_reads_the_bridges_own_session_and_grant() {
        use std::io::{BufRead, Write};
        let socket = std::env::temp_dir().join(format!("boxctl-mcp-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&socket);
        let listener = std::os::unix::net::UnixListener::bind(&socket).expect("bind");
        let broker = std::thread::spawn(move || {
            let mut seen = Vec::new();
            // One connection per operation: a strict model argument sends nothing.
            if let Ok((stream, _)) = listener.accept() {
                let mut line = String::new();
                std::io::BufReader::new(&stream)
                    .read_line(&mut line)
                    .expect("request");
                let req: serde_json::Value = serde_json::from_str(&line).expect("json");
                let answer = serde_json::json!({
                    "id": req["id"], "kind": "changes", "session": "mine", "changes": [],
                    "bytes": 0, "max_bytes": 10
                });
                (&stream)
                    .write_all(format!("{answer}\n").as_bytes())
                    .expect("answer");
                seen.push(req);
            }
            seen
        });
        let b = Bridge::new(Options {
            socket: socket.clone(),
            grant: "notes".into(),
            session: Some("mine".into()),
        });
        let obj = |v: serde_json::Value| match v {
            serde_json::Value::Object(o) => Some(o),
            _ => None,
        };
        let refused = b
            .staged_changes(obj(serde_json::json!({"session": "other"})))
            .await;
        assert_eq!(refused.is_error, Some(true));
        let listed = b
            .staged_changes(obj(serde_json::json!({"diff": true})))
            .await;
        assert_eq!(listed.is_error, Some(false), "{listed:?}");
        let seen = broker.join().expect("broker");
        let _ = std::fs::remove_file(&socket);
        assert_eq!(seen.len(), 1, "{seen:?}");
        let mut req = seen[0].clone();
        req.as_object_mut().map(|o| o.remove("id"));
        assert_eq!(
            req,
            serde_json::json!({"op": "changes", "session": "mine", "grant": "notes", "diff": true})
        );
    }
}
