//! Decisions the model sees: an `ask` approved once with its ticket, a refusal outside the
//! grant.

use client::Body;
use serde_json::json;

use super::{check, show, Outcome, Suite, ASK_GRANT};

impl Suite {
    pub(super) fn ask_then_approve(&mut self) -> Outcome {
        let path = self.rw.join("asked.txt");
        let args = json!({ "path": path, "content": "approved\n" });
        let ticket = match self.call_as(ASK_GRANT, "write_file", args.clone(), None)? {
            Body::Ask { ticket, question } => {
                check(question.contains(&path.display().to_string()), || {
                    format!("the question does not name the file: {question:?}")
                })?;
                ticket
            }
            other => return Err(format!("expected ask, got {}", show(&other))),
        };
        check(!path.exists(), || {
            "the file was written before approval".into()
        })?;
        match self.call_as(ASK_GRANT, "write_file", args.clone(), Some(ticket.clone()))? {
            Body::Result { content, .. } => check(content.starts_with("wrote 9 bytes"), || {
                format!("content {content:?}")
            })?,
            other => return Err(format!("the approved call: {}", show(&other))),
        }
        check(
            std::fs::read_to_string(&path).ok().as_deref() == Some("approved\n"),
            || "the approved write is not on the host".into(),
        )?;
        // A ticket is good for one call.
        match self.call_as(ASK_GRANT, "write_file", args, Some(ticket))? {
            Body::Refused { .. } | Body::Ask { .. } => Ok(()),
            other => Err(format!(
                "a used ticket was accepted again: {}",
                show(&other)
            )),
        }
    }

    pub(super) fn refusal_outside_grant(&mut self) -> Outcome {
        match self.call("read_file", json!({ "path": "/etc/passwd" }))? {
            Body::Refused { reason } => check(reason.contains("/etc/passwd"), || {
                format!("reason {reason:?}")
            }),
            other => Err(format!("expected a refusal, got {}", show(&other))),
        }
    }
}
