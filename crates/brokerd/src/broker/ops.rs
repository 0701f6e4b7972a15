//! The ops beside `call`: a grant's tools, a page of a stored output, a decline, the end of a
//! session, and status (docs/design.md#protocol).

use super::*;

impl Broker {
    pub(super) fn tools(&self, grant: &str) -> Body {
        let Some(g) = self.policy.grant(grant) else {
            return error(ProtocolError::UnknownGrant(grant.to_string()));
        };
        let tools = self
            .policy
            .offered(g)
            .into_iter()
            .map(|t| ToolSchema {
                name: t.as_str().into(),
                description: t.description().into(),
                parameters: t.parameters(),
            })
            .collect();
        Body::Tools {
            tools,
            staged: g.grant.writes == crate::config::Writes::Staged,
        }
    }

    /// A page of a stored output; another peer's id is as unknown as one never given.
    pub(super) fn result(&self, peer: Peer, result_id: &str, offset: usize) -> Body {
        let page = self
            .state()
            .results
            .page(peer.uid, result_id, offset, PAGE_CHARS);
        match page {
            Some((content, next_offset)) => Body::ResultPage {
                content,
                offset,
                next_offset,
            },
            None => error(ProtocolError::UnknownResult(result_id.to_string())),
        }
    }

    pub(super) async fn decline(&self, ticket: &str) -> Body {
        let Some(b) = self.state().tickets.decline(ticket, Instant::now()) else {
            return error(ProtocolError::UnknownTicket);
        };
        let rec = Record {
            kind: RecordKind::Call,
            session: Some(b.session),
            call: Some(b.call),
            grant: Some(b.grant),
            tool: Some(b.tool),
            decision: Some(Decided::Declined),
            status: Some(Ended::Cancelled),
            ..Record::default()
        };
        journal(&rec, None, Instant::now());
        match self.record(rec).await {
            Ok(_) => Body::Declined {},
            Err(e) => self.audit_failed(&e),
        }
    }

    pub(super) fn end_session(&self, session: &str) -> Body {
        if Ident::parse(session).is_err() {
            return error(ProtocolError::BadIdent("session"));
        }
        let mut st = self.state();
        st.refusals.end_session(session);
        st.tickets.end_session(session);
        if st.unavailable.remove(session) {
            st.unavailable_order.retain(|s| s != session);
        }
        Body::Ended {}
    }

    pub(super) async fn status(&self) -> Body {
        let now = Instant::now();
        let mut preflight = lock(&self.preflight).status(now, "not run yet");
        preflight.network = Some(Box::new(
            lock(&self.network).status(now, "runs before the first http_fetch"),
        ));
        let head = self.audit_head();
        Body::Status(Status {
            protocol: PROTOCOL,
            version: env!("CARGO_PKG_VERSION").into(),
            backend: self.backend,
            enforce_limits: self.config.runner.as_ref().is_none_or(|r| r.enforce_limits),
            preflight,
            poisoned: self.runner.poisoned(),
            weakened: self.runner.weakened(),
            audit_head: AuditHead {
                seq: head.seq,
                hash: head.hash,
            },
            audit_stalled_ms: self
                .audit_watch
                .stalled_for()
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            privileges: crate::privileges::Privileges::read()
                .ok()
                .map(crate::privileges::Privileges::shown),
            toolsets: self.toolset_status(now),
            caches: self.cache_status().await,
        })
    }
}

impl Broker {
    /// Each grant's cache and what it holds, counted off the async threads
    /// (docs/design.md#grant-caches).
    async fn cache_status(&self) -> Vec<proto::broker::CacheStatus> {
        let caches: Vec<(String, crate::runner::cache::Cache)> = self
            .policy
            .grants()
            .filter_map(|g| g.cache.clone().map(|c| (g.name.clone(), c)))
            .collect();
        if caches.is_empty() {
            return Vec::new();
        }
        let counted = tokio::task::spawn_blocking(move || {
            caches
                .into_iter()
                .map(|(grant, c)| {
                    let bytes =
                        crate::runner::cache::usage(&c.dir, c.max_bytes).map_or(0, |u| u.bytes);
                    proto::broker::CacheStatus {
                        grant,
                        path: c.dir.display().to_string(),
                        bytes,
                        max_bytes: c.max_bytes,
                    }
                })
                .collect()
        });
        counted.await.unwrap_or_default()
    }
}
