//! Approval tickets for `ask` (docs/design.md#modes-and-the-classifier).
//!
//! A ticket is bound to one exact call: session, call, grant, tool and the model's raw
//! argument string. It is single use, expires after `ticket_ttl_s`, and lives in memory only
//! (a restart forgets every ticket). The store is bounded: past [`MAX_TICKETS`] the oldest
//! ticket is forgotten, so a flood of asks cannot grow brokerd without limit.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// The most tickets held at once.
pub const MAX_TICKETS: usize = 4096;

/// The exact call a ticket approves.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Binding {
    pub session: String,
    pub call: String,
    pub grant: String,
    pub tool: String,
    pub arguments: String,
}

/// Why an approval was not accepted. The texts reach the model as a refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TicketError {
    #[error("the approval ticket is unknown, already used or expired; ask again")]
    Unknown,
    #[error("the approval ticket was issued for a different call; re-send exactly the call that was asked about")]
    Mismatch,
    #[error("the owner has not approved this call yet; it runs once an owner approves the ticket, and the ticket stays valid until then")]
    NotApproved,
}

#[derive(Debug)]
struct Entry {
    binding: Binding,
    expires: Instant,
    /// The grant's `approvals = "owner"`: the ticket redeems only once an owner approved it.
    needs_owner: bool,
    approved: bool,
}

#[derive(Debug)]
pub struct Tickets {
    ttl: Duration,
    live: HashMap<String, Entry>,
    /// Issue order, for evicting the oldest; may hold tickets already used.
    order: VecDeque<String>,
}

impl Tickets {
    pub fn new(ttl: Duration) -> Tickets {
        Tickets {
            ttl,
            live: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    /// Issues a fresh ticket for `binding`, which the client that made the call redeems.
    pub fn issue(&mut self, binding: Binding, now: Instant) -> String {
        self.issue_for(binding, now, false)
    }

    /// Issues a fresh ticket for `binding`; with `needs_owner` it redeems only once an owner
    /// approved it (`approve`).
    pub fn issue_for(&mut self, binding: Binding, now: Instant, needs_owner: bool) -> String {
        self.expire(now);
        while self.live.len() >= MAX_TICKETS {
            match self.order.pop_front() {
                Some(old) => {
                    self.live.remove(&old);
                }
                None => break,
            }
        }
        let ticket = random_token();
        self.live.insert(
            ticket.clone(),
            Entry {
                binding,
                expires: now + self.ttl,
                needs_owner,
                approved: false,
            },
        );
        self.order.push_back(ticket.clone());
        ticket
    }

    /// Uses `ticket` for `binding`: it must exist, be unexpired and match exactly. A ticket
    /// presented with the wrong call is consumed too, so it cannot be probed.
    pub fn redeem(
        &mut self,
        ticket: &str,
        binding: &Binding,
        now: Instant,
    ) -> Result<(), TicketError> {
        self.expire(now);
        // Not yet approved by an owner: kept, for the client to send again once it is.
        if let Some(e) = self.live.get(ticket) {
            if e.needs_owner && !e.approved && &e.binding == binding {
                return Err(TicketError::NotApproved);
            }
        }
        let entry = self.live.remove(ticket).ok_or(TicketError::Unknown)?;
        if &entry.binding != binding {
            return Err(TicketError::Mismatch);
        }
        Ok(())
    }

    /// An owner approves `ticket`; the call it was for is returned for the audit record.
    pub fn approve(&mut self, ticket: &str, now: Instant) -> Option<Binding> {
        self.expire(now);
        self.live.get_mut(ticket).map(|e| {
            e.approved = true;
            e.binding.clone()
        })
    }

    /// The owner declined: the ticket is gone, and the call it was for is returned for the
    /// audit record.
    pub fn decline(&mut self, ticket: &str, now: Instant) -> Option<Binding> {
        self.expire(now);
        self.live.remove(ticket).map(|e| e.binding)
    }

    /// Forgets every ticket of a session.
    pub fn end_session(&mut self, session: &str) {
        self.live.retain(|_, e| e.binding.session != session);
    }

    pub fn len(&self) -> usize {
        self.live.len()
    }

    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    fn expire(&mut self, now: Instant) {
        self.live.retain(|_, e| e.expires > now);
        // Keep the order queue from growing past the live set by much.
        if self.order.len() > 2 * MAX_TICKETS {
            let live = &self.live;
            self.order.retain(|t| live.contains_key(t));
        }
    }
}

/// 128 random bits as 32 hex characters.
pub fn random_token() -> String {
    let mut bytes = [0u8; 16];
    // The kernel's random source does not fail once the system has booted; if it did, a
    // predictable ticket would be worse than stopping.
    if let Err(e) = getrandom::fill(&mut bytes) {
        panic!("no randomness for a ticket: {e}");
    }
    hex::encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(c: &str, args: &str) -> Binding {
        Binding {
            session: "s1".into(),
            call: c.into(),
            grant: "notes".into(),
            tool: "write_file".into(),
            arguments: args.into(),
        }
    }

    #[test]
    fn single_use_exact_and_expiring() {
        let t0 = Instant::now();
        let mut tickets = Tickets::new(Duration::from_secs(600));
        let a = call("c1", r#"{"path":"a","content":"x"}"#);
        let ticket = tickets.issue(a.clone(), t0);
        assert_eq!(ticket.len(), 32);

        // (presented for, at, expected)
        let other_args = call("c1", r#"{"path":"b","content":"x"}"#);
        assert_eq!(
            tickets.redeem(&ticket, &other_args, t0),
            Err(TicketError::Mismatch)
        );
        // consumed by the mismatch
        assert_eq!(tickets.redeem(&ticket, &a, t0), Err(TicketError::Unknown));

        let ticket = tickets.issue(a.clone(), t0);
        assert_eq!(
            tickets.redeem(&ticket, &a, t0 + Duration::from_secs(1)),
            Ok(())
        );
        assert_eq!(
            tickets.redeem(&ticket, &a, t0),
            Err(TicketError::Unknown),
            "single use"
        );

        let ticket = tickets.issue(a.clone(), t0);
        assert_eq!(
            tickets.redeem(&ticket, &a, t0 + Duration::from_secs(601)),
            Err(TicketError::Unknown),
            "expired"
        );
        assert_eq!(tickets.redeem("forged", &a, t0), Err(TicketError::Unknown));
    }

    #[test]
    fn decline_and_end_session() {
        let t0 = Instant::now();
        let mut tickets = Tickets::new(Duration::from_secs(600));
        let a = call("c1", "{}");
        let ticket = tickets.issue(a.clone(), t0);
        assert_eq!(tickets.decline(&ticket, t0), Some(a.clone()));
        assert_eq!(tickets.decline(&ticket, t0), None);
        let ticket = tickets.issue(a.clone(), t0);
        tickets.end_session("s1");
        assert_eq!(tickets.redeem(&ticket, &a, t0), Err(TicketError::Unknown));
    }

    #[test]
    fn bounded() {
        let t0 = Instant::now();
        let mut tickets = Tickets::new(Duration::from_secs(600));
        let first = tickets.issue(call("c0", "{}"), t0);
        for i in 1..MAX_TICKETS + 10 {
            tickets.issue(call(&format!("c{i}"), "{}"), t0);
        }
        assert_eq!(tickets.len(), MAX_TICKETS);
        assert_eq!(
            tickets.redeem(&first, &call("c0", "{}"), t0),
            Err(TicketError::Unknown)
        );
    }
}
