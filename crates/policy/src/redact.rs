//! Secrets out of what a person reads: the audit log and brokerd's journal (docs/design.md#audit).
//!
//! [`redact`] replaces, wherever it finds them in a command, a path, a URL, a question or a
//! reason:
//! - the value of `NAME=value` and of `--name value` whose name looks like a secret
//!   ([`SECRET_WORDS`]), as in `GITHUB_TOKEN=…`, `--password x`, `?access_token=…`;
//! - the value of a header or a JSON key whose name looks like one (`Authorization: Bearer …`,
//!   `"api_key": "…"`), the scheme word kept;
//! - the user information of a URL (`https://user:pw@host`);
//! - the body of a PEM private key block;
//! - the password of a program that takes one as `-p x` or `-px` ([`PASSWORD_P_PROGRAMS`]);
//! - a bare token of a well-known shape ([`TOKEN_SHAPES`], each a prefix and a least length).
//!
//! Each rule errs towards redacting: a person loses a word of a log line, a secret is not kept
//! in a file readable long after. The table carries its own examples, checked by the tests.

/// What a secret is replaced with.
pub const REDACTED: &str = "[redacted]";

/// Parts of a name whose value is a secret (matched case-insensitively).
pub const SECRET_WORDS: &[&str] = &[
    "token",
    "secret",
    "password",
    "passwd",
    "passphrase",
    "key",
    "auth",
    "credential",
    "cookie",
    "signature",
    "private",
];

/// Programs whose `-p` takes the password itself (MySQL and its kin, sshpass).
pub const PASSWORD_P_PROGRAMS: &[&str] = &[
    "mysql",
    "mariadb",
    "mysqldump",
    "mysqladmin",
    "mysqlimport",
    "mysqlshow",
    "mysqlcheck",
    "mariadb-dump",
    "sshpass",
];

/// A bare token of a well-known shape: its prefix, the least number of token characters
/// (letters, digits, `_ - . / + =`) after it, and whose it is.
pub struct TokenShape {
    pub prefix: &'static str,
    pub min_body: usize,
    pub what: &'static str,
}

const fn shape(prefix: &'static str, min_body: usize, what: &'static str) -> TokenShape {
    TokenShape {
        prefix,
        min_body,
        what,
    }
}

/// Well-known token shapes. A prefix counts only at the start of a word (after a character
/// that is not a letter or digit), and only with at least `min_body` token characters after it.
pub const TOKEN_SHAPES: &[TokenShape] = &[
    shape("AKIA", 16, "AWS access key id"),
    shape("ASIA", 16, "AWS temporary access key id"),
    shape("ABIA", 16, "AWS STS service bearer token id"),
    shape("ACCA", 16, "AWS context-specific credential"),
    shape("LTAI", 12, "Alibaba Cloud access key id"),
    shape("ghp_", 30, "GitHub personal access token"),
    shape("gho_", 30, "GitHub OAuth token"),
    shape("ghu_", 30, "GitHub user-to-server token"),
    shape("ghs_", 30, "GitHub server-to-server token"),
    shape("ghr_", 30, "GitHub refresh token"),
    shape("github_pat_", 22, "GitHub fine-grained token"),
    shape("glpat-", 20, "GitLab personal access token"),
    shape("gldt-", 20, "GitLab deploy token"),
    shape("glrt-", 20, "GitLab runner token"),
    shape("glptt-", 20, "GitLab pipeline trigger token"),
    shape("xoxb-", 10, "Slack bot token"),
    shape("xoxp-", 10, "Slack user token"),
    shape("xoxa-", 10, "Slack app token"),
    shape("xoxr-", 10, "Slack refresh token"),
    shape("xoxs-", 10, "Slack session token"),
    shape("xoxe-", 10, "Slack config token"),
    shape("xapp-", 10, "Slack app-level token"),
    shape(
        "sk-",
        20,
        "OpenAI-style secret key (sk-proj-, sk-ant-, sk-or-)",
    ),
    shape("sk_live_", 16, "Stripe secret key"),
    shape("sk_test_", 16, "Stripe test secret key"),
    shape("rk_live_", 16, "Stripe restricted key"),
    shape("rk_test_", 16, "Stripe restricted test key"),
    shape("whsec_", 16, "Stripe webhook secret"),
    shape("AIza", 30, "Google API key"),
    shape("ya29.", 20, "Google OAuth access token"),
    shape("GOCSPX-", 20, "Google OAuth client secret"),
    shape("SG.", 20, "SendGrid API key"),
    shape("xkeysib-", 20, "Brevo API key"),
    shape("npm_", 30, "npm access token"),
    shape("pypi-", 30, "PyPI upload token"),
    shape("rubygems_", 30, "RubyGems API key"),
    shape("hf_", 30, "Hugging Face token"),
    shape("dop_v1_", 30, "DigitalOcean personal access token"),
    shape("doo_v1_", 30, "DigitalOcean OAuth token"),
    shape("dor_v1_", 30, "DigitalOcean refresh token"),
    shape("shpat_", 20, "Shopify access token"),
    shape("shpss_", 20, "Shopify shared secret"),
    shape("shpca_", 20, "Shopify custom app token"),
    shape("shppa_", 20, "Shopify private app token"),
    shape("glc_", 20, "Grafana Cloud token"),
    shape("glsa_", 20, "Grafana service account token"),
    shape("sq0atp-", 20, "Square access token"),
    shape("sq0csp-", 20, "Square OAuth secret"),
    shape("dapi", 32, "Databricks token"),
    shape("pul-", 30, "Pulumi access token"),
    shape("lin_api_", 30, "Linear API key"),
    shape("figd_", 30, "Figma token"),
    shape("ntn_", 30, "Notion token"),
    shape("secret_", 30, "Notion integration secret"),
    shape("AKCp", 30, "JFrog Artifactory API key"),
    shape("ATATT", 30, "Atlassian API token"),
    shape("hvs.", 20, "HashiCorp Vault service token"),
    shape("hvb.", 20, "HashiCorp Vault batch token"),
    shape("AGE-SECRET-KEY-1", 20, "age secret key"),
    shape("nvapi-", 30, "NVIDIA API key"),
    shape("tskey-", 20, "Tailscale key"),
    shape("dckr_pat_", 20, "Docker Hub token"),
    shape("pscale_tkn_", 20, "PlanetScale token"),
    shape("pscale_pw_", 20, "PlanetScale password"),
    shape("sntrys_", 30, "Sentry token"),
    shape("sntryu_", 30, "Sentry user token"),
    shape("lsv2_", 30, "LangSmith key"),
    shape("phx_", 30, "PostHog personal key"),
    shape("rnd_", 20, "Render API key"),
    shape("gsk_", 30, "Groq API key"),
    shape("r8_", 30, "Replicate token"),
    shape("xai-", 30, "xAI API key"),
    shape("EAACEdEose0cBA", 10, "Facebook access token"),
    shape("eyJ", 30, "JSON Web Token"),
];

/// Scheme words kept before a redacted header value (`Authorization: Bearer [redacted]`).
const SCHEMES: &[&str] = &["bearer", "basic", "token", "digest", "negotiate", "bot"];

/// `text` with every secret it holds (see the module) replaced by [`REDACTED`].
pub fn redact(text: &str) -> String {
    let text = pem_blocks(text);
    let text = url_userinfo(&text);
    let text = named_values(&text);
    let text = password_options(&text);
    bare_tokens(&text)
}

fn secret_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    !lower.is_empty() && SECRET_WORDS.iter().any(|w| lower.contains(w))
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')
}

fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/' | '+' | '=')
}

/// The body of every `-----BEGIN … PRIVATE KEY-----` block (to its END line, or the end).
fn pem_blocks(text: &str) -> String {
    const BEGIN: &str = "-----BEGIN ";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(BEGIN) {
        let after = &rest[at + BEGIN.len()..];
        let Some(label_end) = after.find("-----") else {
            break;
        };
        let label = &after[..label_end];
        out.push_str(&rest[..at + BEGIN.len() + label_end + 5]);
        rest = &after[label_end + 5..];
        if !label.contains("PRIVATE KEY") {
            continue;
        }
        out.push_str(REDACTED);
        match rest.find("-----END ") {
            Some(end) => rest = &rest[end..],
            None => rest = "",
        }
    }
    out.push_str(rest);
    out
}

/// `scheme://user:pw@host` → `scheme://[redacted]@host`.
fn url_userinfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        out.push_str(&rest[..at + 3]);
        rest = &rest[at + 3..];
        let stop = rest
            .find(|c: char| {
                c.is_whitespace() || matches!(c, '/' | '?' | '#' | '@' | '"' | '\'' | '>' | '`')
            })
            .unwrap_or(rest.len());
        if stop > 0 && rest[stop..].starts_with('@') {
            out.push_str(REDACTED);
            rest = &rest[stop..];
        }
    }
    out.push_str(rest);
    out
}

/// The name (of name characters) that ends just before byte `end` of `text`, a closing quote
/// before `end` set aside.
fn name_before(text: &str, end: usize) -> &str {
    let before = &text[..end];
    let before = before
        .strip_suffix('"')
        .or_else(|| before.strip_suffix('\''))
        .unwrap_or(before);
    let start = before
        .char_indices()
        .rev()
        .take_while(|(_, c)| is_name_char(*c))
        .last()
        .map_or(before.len(), |(i, _)| i);
    &before[start..]
}

/// Where a value that starts at byte `from` ends: at its closing quote if it is quoted (the
/// quotes kept outside), else at white space or a shell separator. Returns (value start,
/// value end).
fn value_span(text: &str, from: usize, to_line_end: bool) -> (usize, usize) {
    let rest = &text[from..];
    match rest.chars().next() {
        Some(q @ ('"' | '\'')) => {
            let body = &rest[1..];
            let mut end = body.len();
            let mut escaped = false;
            for (i, c) in body.char_indices() {
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == q {
                    end = i;
                    break;
                }
            }
            (from + 1, from + 1 + end)
        }
        _ => {
            let end = rest
                .find(|c: char| {
                    if to_line_end {
                        matches!(c, '\n' | '"' | '\'' | '`')
                    } else {
                        c.is_whitespace() || matches!(c, '&' | ';' | '"' | '\'' | '`' | ',' | '}')
                    }
                })
                .unwrap_or(rest.len());
            (from, from + end)
        }
    }
}

/// `NAME=value`, `Name: value` and `"name": "value"` whose name looks like a secret.
fn named_values(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let mut copied = 0;
    while i < text.len() {
        let Some(c) = text[i..].chars().next() else {
            break;
        };
        let next = i + c.len_utf8();
        if !matches!(c, '=' | ':') || !secret_name(name_before(text, i)) {
            i = next;
            continue;
        }
        // `https:` and the like are no header; neither is `key::path`.
        if c == ':' && text[next..].starts_with([':', '/']) {
            i = next;
            continue;
        }
        let mut from = next;
        if c == ':' {
            from += text[from..].len() - text[from..].trim_start_matches([' ', '\t']).len();
            let word_end = text[from..]
                .find(|ch: char| !ch.is_ascii_alphabetic())
                .map_or(text.len(), |e| from + e);
            let word = text[from..word_end].to_ascii_lowercase();
            if SCHEMES.contains(&word.as_str()) && text[word_end..].starts_with(' ') {
                from = word_end + 1;
            }
        }
        let (mut start, mut end) = value_span(text, from, c == ':');
        // `NAME='a b'` loses its quotes with its value, as `NAME=[redacted]`.
        if c == '=' && start > from {
            start = from;
            end = (end + 1).min(text.len());
        }
        if end > start || c == '=' {
            out.push_str(&text[copied..start]);
            out.push_str(REDACTED);
            copied = end;
        }
        i = end.max(next);
    }
    out.push_str(&text[copied..]);
    out
}

/// Splits `text` into words (runs without white space) with their byte offsets.
fn words(text: &str) -> Vec<(usize, &str)> {
    let mut v = Vec::new();
    let mut start = None;
    for (i, c) in text.char_indices() {
        match (c.is_whitespace(), start) {
            (true, Some(s)) => {
                v.push((s, &text[s..i]));
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    if let Some(s) = start {
        v.push((s, &text[s..]));
    }
    v
}

/// `--password x`, `--api-token x` (any long option whose name looks like a secret, when its
/// value is the next word), and `-p x` / `-px` of [`PASSWORD_P_PROGRAMS`].
fn password_options(text: &str) -> String {
    let ws = words(text);
    let bare = |w: &str| {
        w.trim_matches(|c| c == '\'' || c == '"')
            .rsplit('/')
            .next()
            .map(str::to_string)
    };
    let takes_p = ws
        .iter()
        .any(|(_, w)| bare(w).is_some_and(|b| PASSWORD_P_PROGRAMS.contains(&b.as_str())));
    let mut spans: Vec<(usize, usize)> = Vec::new();
    for (k, (at, w)) in ws.iter().enumerate() {
        let next = ws.get(k + 1);
        let long_secret = w
            .strip_prefix("--")
            .is_some_and(|n| !n.contains('=') && secret_name(n));
        if long_secret || (takes_p && *w == "-p") {
            if let Some((nat, nw)) = next {
                if !nw.starts_with('-') {
                    spans.push((*nat, nat + nw.len()));
                }
            }
        } else if takes_p && w.len() > 2 && w.starts_with("-p") && !w.starts_with("--") {
            spans.push((at + 2, at + w.len()));
        }
    }
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    for (s, e) in spans {
        if s < copied {
            continue;
        }
        out.push_str(&text[copied..s]);
        out.push_str(REDACTED);
        copied = e;
    }
    out.push_str(&text[copied..]);
    out
}

/// Every bare token of a [`TOKEN_SHAPES`] shape.
fn bare_tokens(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut i = 0;
    let mut prev: Option<char> = None;
    while i < text.len() {
        let Some(c) = text[i..].chars().next() else {
            break;
        };
        // A prefix inside a word (`task-sk-…`, `xAKIA…`) is not a token's start.
        let at_word_start =
            !prev.is_some_and(|p| p.is_ascii_alphanumeric() || matches!(p, '_' | '-' | '.'));
        if at_word_start {
            let rest = &text[i..];
            let hit = TOKEN_SHAPES.iter().find(|s| {
                rest.starts_with(s.prefix)
                    && rest[s.prefix.len()..]
                        .chars()
                        .take_while(|c| is_token_char(*c))
                        .count()
                        >= s.min_body
            });
            if let Some(s) = hit {
                let body = rest[s.prefix.len()..]
                    .find(|c: char| !is_token_char(c))
                    .unwrap_or(rest.len() - s.prefix.len());
                out.push_str(&text[copied..i]);
                out.push_str(REDACTED);
                i += s.prefix.len() + body;
                copied = i;
                prev = Some('x');
                continue;
            }
        }
        prev = Some(c);
        i += c.len_utf8();
    }
    out.push_str(&text[copied..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (text, what must be gone, what must stay)
    const CASES: &[(&str, &str, &str)] = &[
        ("GITHUB_TOKEN=ghp_x git push", "ghp_x", "git push"),
        ("PASSWORD='a b' ls", "a b", "ls"),
        ("curl -H 'Authorization: Bearer abc.def' https://x.example", "abc.def", "Bearer"),
        ("curl -H \"X-Api-Key: k123\" https://x.example", "k123", "X-Api-Key"),
        ("curl -H 'Cookie: sid=s3cr3t; a=b' https://x.example", "s3cr3t", "Cookie"),
        ("git clone https://alice:hunter2@git.example/r", "hunter2", "git.example/r"),
        ("https://tok123@git.example/r", "tok123", "https://"),
        ("psql --password hunter2 -h db", "hunter2", "-h db"),
        ("tool --api-token=t0k --verbose", "t0k", "--verbose"),
        ("tool --client-secret s3c run", "s3c", "run"),
        ("mysql -u root -p hunter2 db", "hunter2", "-u root"),
        ("mysql -uroot -phunter2 db", "hunter2", "-uroot"),
        ("sshpass -p hunter2 ssh host", "hunter2", "ssh host"),
        ("{\"api_key\": \"k-987\", \"name\": \"n\"}", "k-987", "\"name\": \"n\""),
        ("https://x.example/?access_token=abc&page=2", "abc", "page=2"),
        (
            "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk\n-----END OPENSSH PRIVATE KEY-----",
            "b3BlbnNzaC1rZXk",
            "-----END OPENSSH PRIVATE KEY-----",
        ),
        (
            "-----BEGIN RSA PRIVATE KEY-----\\nMIIEpAIBAAKCAQEA",
            "MIIEpAIBAAKCAQEA",
            "BEGIN RSA PRIVATE KEY",
        ),
        ("echo AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE", "echo"),
        ("x ghp_0123456789abcdefghijklmnopqrstuvwxyz y", "ghp_0123456789", "x "),
        ("xoxb-1234-5678-abcdefgh", "xoxb-1234", ""),
        ("key sk-proj-abcdefghijklmnopqrstuvwxyz", "sk-proj-abc", "key "),
        ("sk-ant-api03-abcdefghijklmnopqrst", "sk-ant-api03", ""),
    ];

    /// Ordinary text that looks a little like a secret and must stay as it is.
    const UNTOUCHED: &[&str] = &[
        "mkdir -p build/out",
        "ssh -p 2222 host",
        "ls -la /srv/notes",
        "https://docs.example.org/a?page=2",
        "cat disk-usage-report-for-the-whole-year.txt",
        "task-sk-abcdefghijklmnopqrstuvwxyz",
        "read_file: /etc/passwd is outside the grant's directories",
        "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
        "grep -r token src/",
        "sort -u names.txt",
    ];

    #[test]
    fn secrets_are_redacted_and_the_rest_kept() {
        for (text, secret, kept) in CASES {
            let got = redact(text);
            assert!(!got.contains(secret), "{text:?} → {got:?}");
            assert!(got.contains(kept), "{text:?} → {got:?} lost {kept:?}");
            assert!(got.contains(REDACTED), "{text:?} → {got:?}");
        }
        for text in UNTOUCHED {
            assert_eq!(redact(text), *text);
        }
    }

    /// Each shape of the table, with a body just long enough, is redacted as a word of its
    /// own; one character shorter, or glued to a word before it, it is not.
    #[test]
    fn every_token_shape_is_redacted() {
        assert!(TOKEN_SHAPES.len() >= 44, "{}", TOKEN_SHAPES.len());
        for s in TOKEN_SHAPES {
            let token = format!(
                "{}{}",
                s.prefix,
                "A1b2".repeat(s.min_body).get(..s.min_body).unwrap_or("")
            );
            let got = redact(&format!("use {token} now"));
            assert_eq!(
                got,
                format!("use {REDACTED} now"),
                "{} ({})",
                s.prefix,
                s.what
            );
            let short = &token[..token.len() - 1];
            assert_eq!(
                redact(&format!("use {short} now")),
                format!("use {short} now"),
                "{}",
                s.what
            );
            let glued = format!("use x{token} now");
            assert_eq!(redact(&glued), glued, "{}", s.what);
        }
    }

    #[test]
    fn bad_input_never_panics() {
        for text in [
            "",
            "=",
            ":",
            "a=",
            "token=",
            "token:",
            "://",
            "x://@",
            "-----BEGIN ",
            "-----BEGIN X PRIVATE KEY-----",
            "--password",
            "mysql -p",
            "é=é",
            "tökén=ü",
            "Authorization: Bearer",
        ] {
            let _ = redact(text);
        }
    }
}
