//! The limits a call runs under: its time limit, the output cap, and the service user's
//! process limit, which a burst of calls must not reach.

use std::time::{Duration, Instant};

use client::Body;
use serde_json::json;

use proto::sentences::Failure;

use super::{check, show, Backend, Outcome, Suite, RO_TEXT, SHELL_MS};
use crate::https::BIG;
use crate::system;

impl Suite {
    pub(super) fn time_limit(&mut self) -> Outcome {
        // The command outlives the limit by far: an answer near the limit is the kill's.
        let started = Instant::now();
        let command = format!("sleep {}", self.secs(30));
        let body = self.call("shell", json!({ "command": command }))?;
        let took = started.elapsed();
        match body {
            Body::Failed { message } => check(message == Failure::TimedOut.to_string(), || {
                format!("message {message:?}")
            })?,
            other => return Err(format!("expected failed, got {}", show(&other))),
        }
        let limit = self.t(Duration::from_millis(SHELL_MS));
        let slack = self.t(Duration::from_secs(15));
        check(took >= limit && took < limit + slack, || {
            format!("the answer came after {took:?} for a {limit:?} limit")
        })
    }

    pub(super) fn output_cap_shell(&mut self) -> Outcome {
        let (content, truncated) = self.result(
            "shell",
            json!({ "command": "yes 0123456789 | head -c 1000000" }),
        )?;
        check(truncated, || "truncated is false".into())?;
        check(content.starts_with("0123456789\n"), || {
            format!("content starts {:?}", &content[..content.len().min(40)])
        })
    }

    pub(super) fn output_cap_fetch(&mut self) -> Outcome {
        match self.fetch("https://ok.test/big")? {
            Body::Result {
                content, truncated, ..
            } => {
                check(truncated, || "truncated is false".into())?;
                check(content.starts_with("xxxx") && content.len() < BIG, || {
                    format!("content of {} bytes", content.len())
                })
            }
            other => Err(format!("expected a result, got {}", show(&other))),
        }
    }

    /// Calls back to back each get their result. Every bwrap sandbox leaves its PID 1 behind
    /// for a moment after it answers; brokerd adopts and reaps them, so they never pile up
    /// against the service user's process limit (`pids`, RLIMIT_NPROC), as they did while
    /// this host's slow init was left to reap them. Podman gets a few, as it is 40x slower.
    pub(super) fn burst(&mut self) -> Outcome {
        let n = match self.backend {
            Backend::Bwrap => 200,
            Backend::Podman => 3,
        };
        let path = self.ro.join("hello.txt");
        let started = Instant::now();
        for i in 1..=n {
            let (content, _) = self
                .result("read_file", json!({ "path": path }))
                .map_err(|e| format!("call {i} of {n}: {e}"))?;
            check(content == RO_TEXT, || {
                format!("call {i} of {n} read {content:?}")
            })?;
        }
        eprintln!(
            "  {n} calls in {} ms; zombies of the service user now: {}",
            started.elapsed().as_millis(),
            system::zombies(&self.user)
        );
        Ok(())
    }
}
