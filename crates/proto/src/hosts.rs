//! Host names and host patterns (docs/design.md#grants-and-paths, "http_fetch URLs").
//!
//! A valid host is a DNS name: labels of 1 to 63 letters, digits and hyphens (not starting or
//! ending with a hyphen), at least two labels, at most 253 characters in all, compared in lower
//! case without a trailing dot. Internationalised names are accepted only in their ASCII
//! (punycode, `xn--`) form. An IP literal is never a host, in any spelling: a name whose last
//! label is numeric (`10.0.0.1`, `0177.1`) or hexadecimal (`127.0.0.0x1`) is refused, since no
//! top-level domain looks like that and resolvers read such names as addresses.
//!
//! A pattern is either a host, which matches only itself, or `*.` followed by a host, which
//! matches every name strictly below it (`*.example.com` matches `a.example.com` and
//! `a.b.example.com`, not `example.com`).

/// The most characters a name may have, trailing dot excluded.
pub const MAX_NAME_LEN: usize = 253;
/// The most characters a label may have.
pub const MAX_LABEL_LEN: usize = 63;

/// The comparable form of a name: lower case, one trailing dot removed.
pub fn normalize(name: &str) -> String {
    let name = name.strip_suffix('.').unwrap_or(name);
    name.to_ascii_lowercase()
}

/// Whether `name` is a host name that http_fetch and the egress proxy may use.
pub fn valid_host(name: &str) -> bool {
    let name = name.strip_suffix('.').unwrap_or(name);
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return false;
    }
    let labels: Vec<&str> = name.split('.').collect();
    if labels.len() < 2 || !labels.iter().all(|l| valid_label(l)) {
        return false;
    }
    let last = labels[labels.len() - 1];
    !looks_numeric(last)
}

/// Whether `pattern` is a host pattern a grant may list.
pub fn valid_host_pattern(pattern: &str) -> bool {
    match pattern.strip_prefix("*.") {
        Some(suffix) => valid_host(suffix) && !suffix.ends_with('.'),
        None => valid_host(pattern),
    }
}

/// Whether `host` is allowed by `pattern`. Both must be valid; comparison ignores case and a
/// trailing dot on the host.
pub fn host_matches(pattern: &str, host: &str) -> bool {
    if !valid_host_pattern(pattern) || !valid_host(host) {
        return false;
    }
    let host = normalize(host);
    match pattern.strip_prefix("*.") {
        Some(suffix) => {
            let suffix = normalize(suffix);
            host.len() > suffix.len() + 1
                && host.ends_with(&suffix)
                && host.as_bytes()[host.len() - suffix.len() - 1] == b'.'
        }
        None => host == normalize(pattern),
    }
}

fn valid_label(label: &str) -> bool {
    let b = label.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_LABEL_LEN
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// A last label that an address parser would take for a number: decimal, octal or `0x` hex.
fn looks_numeric(label: &str) -> bool {
    let lower = label.to_ascii_lowercase();
    if let Some(hex) = lower.strip_prefix("0x") {
        return hex.bytes().all(|c| c.is_ascii_hexdigit());
    }
    lower.bytes().all(|c| c.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_host_table() {
        let l63 = "a".repeat(63);
        let l64 = "a".repeat(64);
        // 4 labels of 63 + 3 dots = 255; trim to exactly 253 and 254.
        let n253 = format!("{l63}.{l63}.{l63}.{}", "a".repeat(61));
        let n254 = format!("{l63}.{l63}.{l63}.{}", "a".repeat(62));
        assert_eq!(n253.len(), 253);
        let cases: Vec<(String, bool)> = vec![
            ("example.com".into(), true),
            ("Example.COM".into(), true),
            ("example.com.".into(), true),
            ("a.b.c.example.com".into(), true),
            ("xn--bcher-kva.example".into(), true),
            ("a-b.example".into(), true),
            ("x1.example".into(), true),
            ("example.xn--p1ai".into(), true),
            (format!("{l63}.example"), true),
            (n253.clone(), true),
            (format!("{n253}."), true),
            // invalid
            (format!("{l64}.example"), false),
            (n254, false),
            ("".into(), false),
            (".".into(), false),
            ("com".into(), false),
            ("localhost".into(), false),
            ("example..com".into(), false),
            (".example.com".into(), false),
            ("example.com..".into(), false),
            ("-a.example".into(), false),
            ("a-.example".into(), false),
            ("a_b.example".into(), false),
            ("bücher.example".into(), false),
            ("exa mple.com".into(), false),
            ("example.com:443".into(), false),
            ("user@example.com".into(), false),
            ("*.example.com".into(), false),
            ("example.com/".into(), false),
            ("1.2.3.4".into(), false),
            ("127.0.0.1".into(), false),
            ("0177.0.0.1".into(), false),
            ("127.1".into(), false),
            ("2130706433".into(), false),
            ("0x7f.0x1".into(), false),
            ("127.0.0.0x1".into(), false),
            ("[::1]".into(), false),
            ("::1".into(), false),
            ("100.100.100.100".into(), false),
            ("example.com\0".into(), false),
            ("example.com\n".into(), false),
        ];
        for (name, ok) in cases {
            assert_eq!(valid_host(&name), ok, "valid_host({name:?})");
        }
    }

    #[test]
    fn pattern_table() {
        let cases = [
            ("example.com", true),
            ("*.example.com", true),
            ("*.EXAMPLE.com", true),
            ("*.com", false),
            ("*", false),
            ("*.", false),
            ("**.example.com", false),
            ("a.*.example.com", false),
            ("*example.com", false),
            ("*.example.com.", false),
            ("", false),
            ("*.1.2.3.4", false),
        ];
        for (p, ok) in cases {
            assert_eq!(valid_host_pattern(p), ok, "valid_host_pattern({p:?})");
        }
    }

    #[test]
    fn matching_table() {
        let cases = [
            ("example.com", "example.com", true),
            ("example.com", "EXAMPLE.com.", true),
            ("example.com", "www.example.com", false),
            ("example.com", "example.co", false),
            ("*.example.com", "a.example.com", true),
            ("*.example.com", "A.B.Example.Com", true),
            ("*.example.com", "a.example.com.", true),
            ("*.example.com", "example.com", false),
            ("*.example.com", "badexample.com", false),
            ("*.example.com", "a.example.com.evil.net", false),
            ("*.example.com", "a.notexample.com", false),
            ("docs.example.org", "docs.example.org.evil.net", false),
            ("*.example.com", "", false),
            ("bad pattern", "bad pattern", false),
            ("*.example.com", "a..example.com", false),
        ];
        for (p, h, ok) in cases {
            assert_eq!(host_matches(p, h), ok, "host_matches({p:?}, {h:?})");
        }
    }

    #[test]
    fn normalize_form() {
        assert_eq!(normalize("A.Example.COM."), "a.example.com");
        assert_eq!(normalize("a.example.com"), "a.example.com");
    }
}
