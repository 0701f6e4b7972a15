//! The guest's output contract, which vm-tests/guest/run.sh reads back: `ok NAME (detail)`,
//! `FAIL NAME: why` or `skip NAME: why` per check, evidence indented under it (never read as a
//! result), `timing ...` lines, and `N passed, M failed` last. Every line goes to standard
//! output (the serial console) and to the results file on the payload disk.

use std::fs::File;
use std::io::Write;
use std::path::Path;

/// How much of one piece of evidence is kept.
const NOTE_MAX: usize = 4000;

pub struct Tally {
    log: Option<File>,
    /// Whether lines go to standard output too (not in this module's tests).
    echo: bool,
    pub passed: usize,
    pub failed: usize,
}

impl Tally {
    /// A tally that writes to `log` (made anew) as well as to standard output.
    pub fn create(log: &Path) -> Tally {
        let file = File::create(log)
            .map_err(|e| eprintln!("boxmaker-e2e guest: {}: {e}", log.display()))
            .ok();
        Tally {
            log: file,
            echo: true,
            passed: 0,
            failed: 0,
        }
    }

    /// One line, as it is.
    pub fn out(&mut self, line: &str) {
        if self.echo {
            let mut stdout = std::io::stdout().lock();
            let _ = writeln!(stdout, "{line}");
            let _ = stdout.flush();
        }
        if let Some(f) = self.log.as_mut() {
            let _ = writeln!(f, "{line}");
        }
    }

    pub fn ok(&mut self, name: &str, detail: &str) {
        self.passed += 1;
        self.out(&ok_line(name, detail));
    }

    pub fn fail(&mut self, name: &str, why: &str) {
        self.failed += 1;
        self.out(&format!("FAIL {name}: {why}"));
    }

    pub fn skip(&mut self, name: &str, why: &str) {
        self.out(&format!("skip {name}: {why}"));
    }

    /// Passes when `cond` holds; the detail or the reason is made only for the side taken.
    pub fn check(
        &mut self,
        name: &str,
        cond: bool,
        detail: impl FnOnce() -> String,
        why: impl FnOnce() -> String,
    ) -> bool {
        if cond {
            self.ok(name, &detail());
        } else {
            self.fail(name, &why());
        }
        cond
    }

    /// Evidence under a check: every line indented, the whole cut at [`NOTE_MAX`] bytes.
    pub fn note(&mut self, text: &str) {
        let text = note_text(text);
        let mut stdout = std::io::stdout().lock();
        let _ = stdout.write_all(text.as_bytes());
        let _ = stdout.flush();
        if let Some(f) = self.log.as_mut() {
            let _ = f.write_all(text.as_bytes());
        }
    }

    pub fn summary(&mut self) {
        let line = format!("{} passed, {} failed", self.passed, self.failed);
        self.out(&line);
    }
}

fn ok_line(name: &str, detail: &str) -> String {
    if detail.is_empty() {
        format!("ok {name}")
    } else {
        format!("ok {name} ({detail})")
    }
}

/// `text`'s lines indented by four spaces, newline-terminated, cut at [`NOTE_MAX`] bytes (at a
/// character boundary).
fn note_text(text: &str) -> String {
    let mut out = String::new();
    let lines: Vec<&str> = if text.is_empty() {
        vec![""]
    } else {
        text.lines().collect()
    };
    for l in lines {
        out.push_str("    ");
        out.push_str(l);
        out.push('\n');
    }
    if out.len() > NOTE_MAX {
        let mut cut = NOTE_MAX;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ok_line_has_its_detail_in_parentheses_only_when_there_is_one() {
        assert_eq!(
            ok_line("shell", "label notes/shell"),
            "ok shell (label notes/shell)"
        );
        assert_eq!(ok_line("e2e/podman/read", ""), "ok e2e/podman/read");
    }

    #[test]
    fn a_note_is_indented_so_that_no_line_reads_as_a_result() {
        let n = note_text("ok not a check\nFAIL nor this");
        assert_eq!(n, "    ok not a check\n    FAIL nor this\n");
        assert_eq!(note_text(""), "    \n");
        let long = note_text(&"é".repeat(5000));
        assert!(long.len() <= NOTE_MAX && long.starts_with("    é"));
    }

    #[test]
    fn the_counts_follow_the_checks_and_the_log_gets_every_line() {
        let dir = std::env::temp_dir().join(format!("boxmaker-e2e-tally-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("checks.log");
        let mut t = Tally::create(&log);
        t.echo = false;
        assert!(t.check("a", true, || "fine".into(), || unreachable!()));
        assert!(!t.check("b", false, || unreachable!(), || "broken".into()));
        t.skip("c", "not here");
        t.summary();
        let text = std::fs::read_to_string(&log).unwrap();
        assert_eq!(
            text,
            "ok a (fine)\nFAIL b: broken\nskip c: not here\n1 passed, 1 failed\n"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
