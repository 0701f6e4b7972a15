//! The broker protocol's framing (docs/design.md#protocol): one line each way, at most
//! [`MAX_LINE`](crate::broker::MAX_LINE) bytes, newline excluded. brokerd reads requests and
//! boxctl reads answers through the same [`LineReader`], whatever reader each has: a longer
//! line is read to its end without being kept and given as [`Frame::TooLong`], so the next
//! line is read in step.
//!
//! No I/O here: the caller hands over what its buffered reader holds, consumes as many bytes
//! as [`LineReader::take`] used, and reads on until a frame comes out.

/// What one line read gave.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// The line without its newline (a last line without one counts).
    Line(Vec<u8>),
    /// The line was longer than the limit: read to its end and dropped.
    TooLong,
    /// The input ended before any byte of a line.
    Eof,
}

/// One line being read, of at most `max` bytes.
#[derive(Debug)]
pub struct LineReader {
    max: usize,
    line: Vec<u8>,
    too_long: bool,
}

impl LineReader {
    pub fn new(max: usize) -> LineReader {
        LineReader {
            max,
            line: Vec::new(),
            too_long: false,
        }
    }

    /// Takes what `buf` holds of the line: how many of its bytes belong to it (the caller
    /// consumes that many), and the frame once its newline was among them.
    pub fn take(&mut self, buf: &[u8]) -> (usize, Option<Frame>) {
        let (chunk, found) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], Some(i + 1)),
            None => (buf, None),
        };
        if !self.too_long {
            if self.line.len() + chunk.len() > self.max {
                self.too_long = true;
                self.line = Vec::new();
            } else {
                self.line.extend_from_slice(chunk);
            }
        }
        match found {
            Some(used) => (used, Some(self.frame())),
            None => (buf.len(), None),
        }
    }

    /// The frame at the end of the input: a last line without a newline still counts.
    pub fn end(mut self) -> Frame {
        if !self.too_long && self.line.is_empty() {
            Frame::Eof
        } else {
            self.frame()
        }
    }

    /// The line read so far as a frame; the reader starts on the next line.
    fn frame(&mut self) -> Frame {
        let too_long = std::mem::take(&mut self.too_long);
        let line = std::mem::take(&mut self.line);
        if too_long {
            Frame::TooLong
        } else {
            Frame::Line(line)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The frames of `input` read in pieces of `piece` bytes (a reader's buffer), to the end.
    fn frames(input: &[u8], max: usize, piece: usize) -> Vec<Frame> {
        let mut out = Vec::new();
        let mut reading = LineReader::new(max);
        let mut at = 0;
        while at < input.len() {
            let buf = &input[at..input.len().min(at + piece)];
            let (used, frame) = reading.take(buf);
            assert!(
                used > 0 && used <= buf.len(),
                "used {used} of {}",
                buf.len()
            );
            at += used;
            out.extend(frame);
        }
        out.push(reading.end());
        if out.last() != Some(&Frame::Eof) {
            out.push(Frame::Eof);
        }
        out
    }

    #[test]
    fn framing_table() {
        let l = |s: &str| Frame::Line(s.as_bytes().to_vec());
        // (input, frames read until the end) with lines of at most 10 bytes
        let cases: Vec<(&[u8], Vec<Frame>)> = vec![
            (b"", vec![Frame::Eof]),
            (b"a\n", vec![l("a"), Frame::Eof]),
            (b"a\nbb\n", vec![l("a"), l("bb"), Frame::Eof]),
            (b"last", vec![l("last"), Frame::Eof]),
            (b"\n", vec![l(""), Frame::Eof]),
            (b"0123456789\n", vec![l("0123456789"), Frame::Eof]),
            (
                b"0123456789\nx\n",
                vec![l("0123456789"), l("x"), Frame::Eof],
            ),
            // A line of 11 is too long, and the next line is read in step.
            (
                b"0123456789X\nok\n",
                vec![Frame::TooLong, l("ok"), Frame::Eof],
            ),
            (
                b"0123456789012345678901234567890\nok",
                vec![Frame::TooLong, l("ok"), Frame::Eof],
            ),
            (b"0123456789012345", vec![Frame::TooLong, Frame::Eof]),
            (b"\n0123456789A", vec![l(""), Frame::TooLong, Frame::Eof]),
        ];
        for (input, want) in cases {
            // Whole, and in small pieces so that lines span several reads.
            for piece in [1, 7, 64] {
                assert_eq!(
                    frames(input, 10, piece),
                    want,
                    "{:?} in pieces of {piece}",
                    String::from_utf8_lossy(input)
                );
            }
        }
    }

    /// After a frame the reader is empty: the end then is the end of the input.
    #[test]
    fn a_reader_starts_afresh_after_each_line() {
        let mut reading = LineReader::new(3);
        assert_eq!(reading.take(b"abcd\n"), (5, Some(Frame::TooLong)));
        assert_eq!(
            reading.take(b"ab\nc"),
            (3, Some(Frame::Line(b"ab".to_vec())))
        );
        assert_eq!(reading.end(), Frame::Eof);
    }
}
