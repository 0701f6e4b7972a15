//! The answer's preview and the store of whole outputs (docs/design.md#output).
//!
//! The model gets at most `preview_chars` characters, head and tail kept, with a marker line
//! saying how much was cut; the whole (capped) output stays retrievable by `result_id` for a
//! while. Everything counts characters, never bytes, and never splits a character.
//!
//! A `result_id` is 128 random bits and belongs to the uid of the peer whose call made it:
//! another peer cannot guess one, and one it learnt reads as unknown.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// The marker line put where the middle was cut: how much, and the character offset at which
/// the `result` op continues (the first character cut).
fn marker(cut: usize, at: usize) -> String {
    format!(
        "\n[... {cut} characters cut; the output continues at offset {at}: page through it with its result_id ...]\n"
    )
}

/// Keeps the head and tail of `content` within `max_chars` characters, the marker included.
/// Returns the preview and, when something was cut, the character offset at which the whole
/// output continues after the preview's head.
pub fn preview(content: &str, max_chars: usize) -> (String, Option<usize>) {
    let total = content.chars().count();
    if total <= max_chars {
        return (content.to_string(), None);
    }
    // The marker's length depends on the numbers it carries, which depend on its length: a
    // few rounds settle it (each can only add a digit), and the last check makes sure.
    let split = |keep: usize| {
        let head_n = keep.div_ceil(2);
        (head_n, marker(total - keep, head_n))
    };
    let mut keep = max_chars;
    let mut best: Option<(usize, usize, String)> = None;
    for _ in 0..8 {
        let (head_n, mark) = split(keep);
        let mark_len = mark.chars().count();
        if mark_len >= max_chars {
            break;
        }
        if keep + mark_len <= max_chars && best.as_ref().is_none_or(|(k, ..)| keep > *k) {
            best = Some((keep, head_n, mark));
        }
        let room = max_chars - mark_len;
        if room == keep {
            break;
        }
        keep = room;
    }
    let Some((keep, head_n, mark)) = best else {
        // No room for a marker: the head alone, still within the budget.
        return (content.chars().take(max_chars).collect(), Some(max_chars));
    };
    let tail_n = keep - head_n;
    let head_end = byte_at_char(content, head_n);
    let tail_start = byte_at_char(content, total - tail_n);
    let mut out = String::with_capacity(head_end + mark.len() + (content.len() - tail_start));
    out.push_str(&content[..head_end]);
    out.push_str(&mark);
    out.push_str(&content[tail_start..]);
    (out, Some(head_n))
}

/// The byte offset of the `n`th character (the length when past the end).
fn byte_at_char(s: &str, n: usize) -> usize {
    s.char_indices().nth(n).map(|(i, _)| i).unwrap_or(s.len())
}

/// The time, replaceable in tests.
pub trait Clock {
    fn now(&self) -> Instant;
}

/// The real monotonic clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

struct Stored {
    id: String,
    /// The uid of the peer whose call produced it.
    owner: u32,
    at: Instant,
    content: String,
}

/// Whole outputs by `result_id`, kept for a TTL and within a bound on their total bytes
/// (the oldest go first). Lives in memory only.
pub struct ResultStore<C: Clock = SystemClock> {
    clock: C,
    ttl: Duration,
    max_bytes: usize,
    total_bytes: usize,
    entries: VecDeque<Stored>,
}

impl ResultStore<SystemClock> {
    pub fn new(ttl: Duration, max_bytes: usize) -> Self {
        ResultStore::with_clock(SystemClock, ttl, max_bytes)
    }
}

impl<C: Clock> ResultStore<C> {
    pub fn with_clock(clock: C, ttl: Duration, max_bytes: usize) -> Self {
        ResultStore {
            clock,
            ttl,
            max_bytes,
            total_bytes: 0,
            entries: VecDeque::new(),
        }
    }

    /// Stores an output of `owner`'s call and gives its id (128 random bits in hex), or `None`
    /// when it alone exceeds the byte bound.
    pub fn put(&mut self, owner: u32, content: String) -> Option<String> {
        self.expire();
        if content.len() > self.max_bytes {
            return None;
        }
        while self.total_bytes + content.len() > self.max_bytes {
            match self.entries.pop_front() {
                Some(old) => self.total_bytes -= old.content.len(),
                None => break,
            }
        }
        let id = crate::tickets::random_token();
        self.total_bytes += content.len();
        self.entries.push_back(Stored {
            id: id.clone(),
            owner,
            at: self.clock.now(),
            content,
        });
        Some(id)
    }

    /// Up to `page_chars` characters from character `offset_chars`, and the offset of the next
    /// page (`None` at the end). `None` for an unknown or expired id, and for an id that is
    /// not `reader`'s: the same answer, so a peer learns nothing of another's outputs.
    pub fn page(
        &mut self,
        reader: u32,
        result_id: &str,
        offset_chars: usize,
        page_chars: usize,
    ) -> Option<(String, Option<usize>)> {
        self.expire();
        let e = self
            .entries
            .iter()
            .find(|e| e.id == result_id && e.owner == reader)?;
        let start = byte_at_char(&e.content, offset_chars);
        let rest = &e.content[start..];
        let end = byte_at_char(rest, page_chars);
        let page = rest[..end].to_string();
        let next = if end < rest.len() {
            Some(offset_chars + page_chars)
        } else {
            None
        };
        Some((page, next))
    }

    /// How many outputs are held (after expiry).
    pub fn len(&mut self) -> usize {
        self.expire();
        self.entries.len()
    }

    pub fn is_empty(&mut self) -> bool {
        self.len() == 0
    }

    fn expire(&mut self) {
        let now = self.clock.now();
        while let Some(front) = self.entries.front() {
            if now.saturating_duration_since(front.at) < self.ttl {
                break;
            }
            self.total_bytes -= front.content.len();
            self.entries.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::rc::Rc;

    #[test]
    fn previews() {
        let long: String = "abcdefghij".repeat(100); // 1000 chars
        let wide: String = "é€😀".repeat(300); // 900 chars, multi-byte
                                               // (content, max_chars, cut)
        let cases: Vec<(&str, usize, bool)> = vec![
            ("", 10, false),
            ("short", 10, false),
            ("exactly10!", 10, false),
            (&long, 1000, false),
            (&long, 999, true),
            (&long, 200, true),
            (&wide, 200, true),
            (&long, 5, true),
            (&long, 0, true),
        ];
        for (content, max, cut) in cases {
            let (p, was_cut) = preview(content, max);
            assert_eq!(was_cut.is_some(), cut, "{max}");
            assert!(p.chars().count() <= max, "{max}: {}", p.chars().count());
            if !cut {
                assert_eq!(p, content);
            }
        }
    }

    #[test]
    fn preview_keeps_head_tail_and_names_the_cut() {
        let content: String = (0..1000)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let (p, at) = preview(&content, 200);
        let at = at.expect("cut");
        assert_eq!(p.chars().count(), 200);
        // What is kept plus what the marker says was cut is the whole.
        let n_cut: usize = p
            .split("[... ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        let kept = 200 - marker(n_cut, at).chars().count();
        assert_eq!(kept + n_cut, 1000, "{p}");
        // The marker names where the output continues: right after the head, which is the
        // content's first `at` characters; the tail is what follows the cut.
        assert!(p.contains(&format!("continues at offset {at}:")), "{p}");
        assert!(p.starts_with(&format!("{}\n[... ", &content[..at])), "{p}");
        assert!(p.ends_with(&content[at + n_cut..]), "{p}");
        assert!(p.starts_with(&content[..40]));
        assert!(p.ends_with(&content[content.len() - 40..]));
        // Multi-byte content is cut between characters.
        let wide: String = "é😀".repeat(500);
        let (p, _) = preview(&wide, 150);
        assert!(p.chars().count() <= 150);
        assert!(p.starts_with('é') && p.ends_with('😀'));
    }

    /// Whatever the lengths, the preview fits, and what its marker says is true: the head is
    /// the output up to the offset it names, and the tail is what follows the characters it
    /// says were cut.
    #[test]
    fn the_marker_is_true_for_every_length() {
        let content: String = (0..20_000)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        for total in [150, 999, 1_000, 1_001, 9_999, 10_000, 20_000] {
            let c = &content[..total];
            for max in (0..400).chain([999, 1_000, 5_000]) {
                let (p, at) = preview(c, max);
                assert!(p.chars().count() <= max, "{total}/{max}: {p}");
                let Some(at) = at else {
                    assert_eq!(p, c);
                    continue;
                };
                let Some((head, rest)) = p.split_once("\n[... ") else {
                    // No room for a marker: the head alone.
                    assert_eq!((p.as_str(), at), (&c[..max], max));
                    continue;
                };
                let cut: usize = rest.split(' ').next().and_then(|n| n.parse().ok()).unwrap();
                assert!(
                    rest.contains(&format!("continues at offset {at}:")),
                    "{rest}"
                );
                assert_eq!(head, &c[..at], "{total}/{max}");
                let tail = rest.split_once("...]\n").map(|(_, t)| t).unwrap();
                assert_eq!(tail, &c[at + cut..], "{total}/{max}");
            }
        }
    }

    #[derive(Clone)]
    struct FakeClock(Rc<Cell<Instant>>);
    impl Clock for FakeClock {
        fn now(&self) -> Instant {
            self.0.get()
        }
    }

    const OWNER: u32 = 1000;

    #[test]
    fn store_pages_by_characters() {
        let clock = FakeClock(Rc::new(Cell::new(Instant::now())));
        let mut s = ResultStore::with_clock(clock, Duration::from_secs(600), 1 << 20);
        let id = s.put(OWNER, "aé😀bcdefg".to_string()).unwrap_or_default();
        assert_eq!(id.len(), 32);
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
        // (offset, page, expected text, next)
        let cases = [
            (0, 3, "aé😀", Some(3)),
            (3, 3, "bcd", Some(6)),
            (6, 3, "efg", None),
            (6, 10, "efg", None),
            (9, 3, "", None),
            (50, 3, "", None),
            (0, 0, "", Some(0)),
        ];
        for (offset, n, text, next) in cases {
            assert_eq!(
                s.page(OWNER, &id, offset, n),
                Some((text.to_string(), next)),
                "{offset}+{n}"
            );
        }
        assert_eq!(s.page(OWNER, "r99", 0, 3), None);
        // Another peer's read of a real id is the same as of an unknown one.
        assert_eq!(s.page(OWNER + 1, &id, 0, 3), None);
        let next = s.put(OWNER, String::new()).unwrap_or_default();
        assert_ne!(next, id);
        assert_eq!(s.page(OWNER, &next, 0, 3), Some((String::new(), None)));
    }

    #[test]
    fn store_expires_and_stays_bounded() {
        let t0 = Instant::now();
        let cell = Rc::new(Cell::new(t0));
        let mut s = ResultStore::with_clock(FakeClock(cell.clone()), Duration::from_secs(10), 10);
        let a = s.put(OWNER, "aaaa".into()).unwrap_or_default();
        let b = s.put(OWNER, "bbbb".into()).unwrap_or_default();
        assert_eq!(s.len(), 2);
        // A third output over the byte bound pushes out the oldest.
        let c = s.put(OWNER, "cccc".into()).unwrap_or_default();
        assert_eq!(s.page(OWNER, &a, 0, 4), None);
        assert!(s.page(OWNER, &b, 0, 4).is_some());
        assert!(s.page(OWNER, &c, 0, 4).is_some());
        // Larger than the whole bound: not stored.
        assert_eq!(s.put(OWNER, "x".repeat(11)), None);
        // Past the TTL everything is gone.
        cell.set(t0 + Duration::from_secs(10));
        assert_eq!(s.page(OWNER, &b, 0, 4), None);
        assert!(s.is_empty());
        let d = s.put(OWNER, "dddddddddd".into()).unwrap_or_default();
        assert!(s.page(OWNER, &d, 0, 4).is_some());
    }
}
