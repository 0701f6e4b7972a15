//! A staged path as the owner reads and names it (docs/design.md#staged-writes-and-owners):
//! one text per path, and one path per text. A name need not be UTF-8; its text is the
//! model-text notation of `proto::visible` (a backslash doubled, hidden characters escaped),
//! with each byte that is not UTF-8 as `\xNN`. An ASCII control is `\xNN` there too and a
//! C1 control `\u{NN}`, so `\xNN` always stands for the byte NN: the text reads back to the
//! exact bytes, and `commit` and `discard` match a named path by those bytes alone.

use std::ffi::OsString;
use std::fmt::Write;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use proto::visible::visible;

/// The text of `p`: its UTF-8 runs as model text, each other byte `\xNN`.
pub fn shown(p: &Path) -> String {
    let mut out = String::new();
    for chunk in p.as_os_str().as_bytes().utf8_chunks() {
        let _ = write!(out, "{}", visible(chunk.valid()));
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

/// The path whose text `shown` is `text`, or `None` when `text` is no such text (an escape
/// that `shown` does not write, a backslash alone).
pub fn parse(text: &str) -> Option<PathBuf> {
    let mut out: Vec<u8> = Vec::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            let mut buf = [0u8; 4];
            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            continue;
        }
        match chars.next()? {
            '\\' => out.push(b'\\'),
            'n' => out.push(b'\n'),
            'r' => out.push(b'\r'),
            't' => out.push(b'\t'),
            'x' => {
                let hex: String = chars.by_ref().take(2).collect();
                if hex.len() != 2 || !hex.bytes().all(|h| h.is_ascii_hexdigit()) {
                    return None;
                }
                out.push(u8::from_str_radix(&hex, 16).ok()?);
            }
            'u' => {
                if chars.next()? != '{' {
                    return None;
                }
                let hex: String = chars.by_ref().take_while(|&h| h != '}').collect();
                let c = char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?;
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
            _ => return None,
        }
    }
    let p = PathBuf::from(OsString::from_vec(out));
    // Only the one text `shown` writes names it.
    (shown(&p) == text).then_some(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names that read alike under a lossy conversion have texts of their own, and each text
    /// reads back to its name and to no other.
    #[test]
    fn every_name_has_one_text() {
        let name = |b: &[u8]| PathBuf::from(OsString::from_vec(b.to_vec()));
        let cases: [(&[u8], &str); 9] = [
            (b"/r/plain.txt", "/r/plain.txt"),
            (b"/r/f\xff", "/r/f\\xff"),
            (b"/r/f\xfe", "/r/f\\xfe"),
            (b"/r/f\\xff", "/r/f\\\\xff"),
            (b"/r/f\xef\xbf\xbd", "/r/f\u{fffd}"),
            (b"/r/a\nb", "/r/a\\nb"),
            (b"/r/e\x1b", "/r/e\\x1b"),
            (b"/r/c1\xc2\x85", "/r/c1\\u{85}"),
            (b"/r/\xe2\x82", "/r/\\xe2\\x82"),
        ];
        for (bytes, text) in cases {
            assert_eq!(shown(&name(bytes)), text, "{bytes:?}");
            assert_eq!(parse(text), Some(name(bytes)), "{text}");
        }
        // Texts `shown` never writes name nothing: an escape of a printable byte, a lone
        // backslash, an escape it does not know, a control that is `\n` elsewhere.
        for text in [
            "/r/\\x66",
            "/r/a\\",
            "/r/\\q",
            "/r/\\x0a",
            "/r/\\xf",
            "/r/\\u{41}",
        ] {
            assert_eq!(parse(text), None, "{text}");
        }
    }
}
