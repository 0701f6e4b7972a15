//! The repeated-refusal stop (docs/design.md#modes-and-the-classifier).
//!
//! A refusal is deterministic, so asking again cannot change it. The same refusal asked for
//! N times in a session (same tool, target and refusal once spacing, quoting, a leading `./`
//! and trailing slashes are set aside) is answered `Stop` from the Nth time on. The state is
//! bounded: a flood of new session ids evicts the least recently used session, and a session
//! keeps at most a fixed number of distinct keys.

use std::collections::{BTreeMap, HashMap, VecDeque};

/// The default number of times after which the same refusal stops.
pub const DEFAULT_REPEATS: u32 = 5;
/// Sessions remembered at once.
pub const DEFAULT_MAX_SESSIONS: usize = 10_000;
/// Distinct refusals remembered per session.
pub const DEFAULT_MAX_KEYS: usize = 256;

/// What to answer a refused call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Answer `refused` with the refusal.
    Refuse,
    /// Answer `stopped`: the same refusal was asked for too often.
    Stop,
}

/// Sets aside spacing, quoting, a leading `./` and trailing slashes, word by word.
pub fn normalise(target: &str) -> String {
    let unquoted: String = target.chars().filter(|c| *c != '\'' && *c != '"').collect();
    let words: Vec<&str> = unquoted
        .split_whitespace()
        .map(|w| {
            let mut w = w;
            while let Some(rest) = w.strip_prefix("./") {
                w = rest;
            }
            let trimmed = w.trim_end_matches('/');
            if trimmed.is_empty() && !w.is_empty() {
                "/"
            } else {
                trimmed
            }
        })
        .filter(|w| !w.is_empty())
        .collect();
    words.join(" ")
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    tool: String,
    target: String,
    refusal: String,
}

struct Session {
    tick: u64,
    counts: HashMap<Key, u32>,
    order: VecDeque<Key>,
}

/// Per-session refusal counts.
pub struct RefusalCounter {
    repeats: u32,
    max_sessions: usize,
    max_keys: usize,
    tick: u64,
    sessions: HashMap<String, Session>,
    /// Sessions by last use, for evicting the least recently used one.
    by_use: BTreeMap<u64, String>,
}

impl RefusalCounter {
    pub fn new(repeats: u32) -> Self {
        RefusalCounter::with_bounds(repeats, DEFAULT_MAX_SESSIONS, DEFAULT_MAX_KEYS)
    }

    pub fn with_bounds(repeats: u32, max_sessions: usize, max_keys: usize) -> Self {
        RefusalCounter {
            repeats: repeats.max(1),
            max_sessions: max_sessions.max(1),
            max_keys: max_keys.max(1),
            tick: 0,
            sessions: HashMap::new(),
            by_use: BTreeMap::new(),
        }
    }

    /// Counts one refusal and says whether to refuse or stop.
    pub fn record(&mut self, session: &str, tool: &str, target: &str, refusal: &str) -> Verdict {
        self.tick += 1;
        let tick = self.tick;
        if !self.sessions.contains_key(session) {
            while self.sessions.len() >= self.max_sessions {
                let Some((_, oldest)) = self.by_use.pop_first() else {
                    break;
                };
                self.sessions.remove(&oldest);
            }
            self.sessions.insert(
                session.to_string(),
                Session {
                    tick,
                    counts: HashMap::new(),
                    order: VecDeque::new(),
                },
            );
        } else if let Some(s) = self.sessions.get(session) {
            self.by_use.remove(&s.tick);
        }
        self.by_use.insert(tick, session.to_string());
        let max_keys = self.max_keys;
        let Some(s) = self.sessions.get_mut(session) else {
            return Verdict::Refuse;
        };
        s.tick = tick;
        let key = Key {
            tool: tool.to_string(),
            target: normalise(target),
            refusal: refusal.to_string(),
        };
        if !s.counts.contains_key(&key) {
            while s.counts.len() >= max_keys {
                match s.order.pop_front() {
                    Some(old) => {
                        s.counts.remove(&old);
                    }
                    None => break,
                }
            }
            s.order.push_back(key.clone());
        }
        let n = s.counts.entry(key).or_insert(0);
        *n = n.saturating_add(1);
        if *n >= self.repeats {
            Verdict::Stop
        } else {
            Verdict::Refuse
        }
    }

    /// Forgets a session (`end_session`).
    pub fn end_session(&mut self, session: &str) {
        if let Some(s) = self.sessions.remove(session) {
            self.by_use.remove(&s.tick);
        }
    }

    /// How many sessions are remembered.
    pub fn sessions(&self) -> usize {
        self.sessions.len()
    }
}

impl Default for RefusalCounter {
    fn default() -> Self {
        RefusalCounter::new(DEFAULT_REPEATS)
    }
}

#[cfg(test)]
mod tests {
    use super::Verdict::*;
    use super::*;

    #[test]
    fn normalisation() {
        let cases = [
            ("a.txt", "a.txt"),
            ("./a.txt", "a.txt"),
            ("././a.txt", "a.txt"),
            ("dir/", "dir"),
            ("dir///", "dir"),
            ("/", "/"),
            ("'a.txt'", "a.txt"),
            ("\"a.txt\"", "a.txt"),
            ("cat   ./a.txt  ", "cat a.txt"),
            ("cat\t'./x/'", "cat x"),
            ("", ""),
            ("./", ""),
        ];
        for (input, want) in cases {
            assert_eq!(normalise(input), want, "{input:?}");
        }
    }

    #[test]
    fn stops_from_the_nth_time() {
        let mut c = RefusalCounter::new(5);
        // Spellings of one target count together.
        let targets = [
            "notes/a",
            "./notes/a",
            "'notes/a'",
            "notes/a/",
            " notes/a",
            "notes/a",
        ];
        let want = [Refuse, Refuse, Refuse, Refuse, Stop, Stop];
        for (t, w) in targets.iter().zip(want) {
            assert_eq!(c.record("s1", "write_file", t, "protected"), w, "{t}");
        }
        // Another session, tool, target or refusal starts its own count.
        assert_eq!(c.record("s2", "write_file", "notes/a", "protected"), Refuse);
        assert_eq!(c.record("s1", "shell", "notes/a", "protected"), Refuse);
        assert_eq!(c.record("s1", "write_file", "notes/b", "protected"), Refuse);
        assert_eq!(c.record("s1", "write_file", "notes/a", "outside"), Refuse);
        // end_session forgets.
        c.end_session("s1");
        assert_eq!(c.record("s1", "write_file", "notes/a", "protected"), Refuse);
    }

    #[test]
    fn configurable_limit() {
        // (repeats, verdicts for the first three)
        let table = [
            (1, [Stop, Stop, Stop]),
            (2, [Refuse, Stop, Stop]),
            (3, [Refuse, Refuse, Stop]),
            (0, [Stop, Stop, Stop]),
        ];
        for (n, want) in table {
            let mut c = RefusalCounter::new(n);
            for w in want {
                assert_eq!(c.record("s", "t", "x", "r"), w, "{n}");
            }
        }
    }

    #[test]
    fn bounded_under_a_flood() {
        let mut c = RefusalCounter::with_bounds(2, 100, 4);
        c.record("keep", "t", "x", "r");
        for i in 0..10_000 {
            c.record(&format!("s{i}"), "t", "x", "r");
            if i % 50 == 0 {
                // Touching a session keeps it recent.
                c.record("keep", "t", "y", "r");
            }
        }
        assert_eq!(c.sessions(), 100);
        assert_eq!(c.record("keep", "t", "x", "r"), Stop);
        // The oldest sessions are gone: their count starts again.
        assert_eq!(c.record("s0", "t", "x", "r"), Refuse);
        // Keys per session are bounded too: the oldest key is forgotten.
        let mut c = RefusalCounter::with_bounds(2, 10, 3);
        c.record("s", "t", "a", "r");
        for t in ["b", "c", "d"] {
            c.record("s", "t", t, "r");
        }
        assert_eq!(c.record("s", "t", "a", "r"), Refuse);
        assert_eq!(c.record("s", "t", "d", "r"), Stop);
    }
}
