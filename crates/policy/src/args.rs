//! From a tool name and the model's raw argument string to [`ToolArgs`]
//! (docs/design.md#life-of-a-call, step 3; docs/design.md#protocol).
//!
//! Parsing is strict (the `proto::tools` structs deny unknown fields). `http_fetch` yields the
//! sealed [`FetchUrl`]: policy matches its `host()` and the runner hands its `url()` to the
//! tool, and since both come from one parse they cannot disagree (docs/design.md#grants-and-paths).
//!
//! # URL rules (docs/design.md#grants-and-paths)
//!
//! - plain printable ASCII: no control characters, no whitespace, no backslash (curl and WHATWG
//!   parsers read `\` differently, and a parser difference is a way around the host check);
//! - scheme `https` (any case), then `//`;
//! - no user info (`@` in the authority), no percent-escapes in the host;
//! - a port that is absent or exactly `443`;
//! - a host that is a valid name per [`proto::hosts::valid_host`], never an IP literal in any
//!   spelling (bracketed IPv6, dotted, decimal, hex, octal, short forms).
//!
//! `url()` is rebuilt from the parts: `https://<host><path-and-query>`, host in lower case
//! without a trailing dot, port 443 dropped, an empty path written `/`. The fragment is dropped:
//! it is never sent to a server, so keeping it would only make `url()` differ from what is
//! fetched. `[ ] { }` in the path and query are percent-encoded, because curl reads them as
//! URL globs and would fetch several URLs for one call.

use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

pub use proto::hosts::{host_matches, normalize, valid_host, valid_host_pattern};
use proto::tools::{parse_args, HttpFetchArgs, ToolName};
pub use proto::tools::{ReadFileArgs, ShellArgs, WriteFileArgs};

/// The longest URL accepted, in bytes; far beyond any real page, short of abuse.
pub const MAX_URL_LEN: usize = 8192;

/// A tool call's arguments, parsed and (for http_fetch) checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolArgs {
    ReadFile(ReadFileArgs),
    WriteFile(WriteFileArgs),
    Shell(ShellArgs),
    HttpFetch(FetchUrl),
}

impl ToolArgs {
    pub fn tool(&self) -> ToolName {
        match self {
            ToolArgs::ReadFile(_) => ToolName::ReadFile,
            ToolArgs::WriteFile(_) => ToolName::WriteFile,
            ToolArgs::Shell(_) => ToolName::Shell,
            ToolArgs::HttpFetch(_) => ToolName::HttpFetch,
        }
    }

    /// What the call is about, as the model wrote it: the path, the command or the URL.
    pub fn target(&self) -> &str {
        match self {
            ToolArgs::ReadFile(a) => &a.path,
            ToolArgs::WriteFile(a) => &a.path,
            ToolArgs::Shell(a) => &a.command,
            ToolArgs::HttpFetch(u) => u.url(),
        }
    }

    /// The `proto::tools` JSON the sandbox reads on standard input (docs/design.md#the-toolkit).
    /// For http_fetch it carries the checked `url()`, never the model's spelling.
    pub fn input_json(&self) -> Vec<u8> {
        let json = match self {
            ToolArgs::ReadFile(a) => serde_json::to_vec(a),
            ToolArgs::WriteFile(a) => serde_json::to_vec(a),
            ToolArgs::Shell(a) => serde_json::to_vec(a),
            ToolArgs::HttpFetch(u) => serde_json::to_vec(&HttpFetchArgs {
                url: u.url().to_owned(),
            }),
        };
        // Serialising a struct of strings into a Vec cannot fail.
        json.unwrap_or_default()
    }
}

/// An http_fetch target that passed every URL check. It has no public constructor: the only
/// way to get one is [`parse`], so a `FetchUrl` in hand is a checked one.
///
/// ```compile_fail,E0451
/// let u = boxmaker_policy::args::FetchUrl { url: "https://example.com/".into(), host: "example.com".into()
/// };
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchUrl {
    url: String,
    host: String,
}

impl FetchUrl {
    /// The URL the tool fetches, rebuilt from the checked parts.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The host policy matches against the grant's patterns: lower case, no trailing dot.
    pub fn host(&self) -> &str {
        &self.host
    }
}

/// Why a URL was refused. Each text tells the model what to change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum UrlProblem {
    #[error("the URL is longer than 8192 bytes")]
    TooLong,
    #[error("the URL may hold only printable ASCII without spaces or backslashes: percent-encode other characters, and write an internationalised host name in its xn-- form")]
    Characters,
    #[error("the URL must use https")]
    NotHttps,
    #[error("the URL must be absolute, like https://example.com/path")]
    NotAbsolute,
    #[error("the URL must not contain user information (user@ or user:password@)")]
    UserInfo,
    #[error("the URL must use the default https port 443")]
    Port,
    #[error("the URL has no host")]
    NoHost,
    #[error("the URL's host must be a name, not an IP address")]
    IpLiteral,
    #[error("the URL's host is not a valid host name (letters, digits and hyphens in dot-separated labels, at least two labels)")]
    InvalidHost,
}

/// Why a tool's arguments were not accepted.
#[derive(Debug, thiserror::Error)]
pub enum ArgsError {
    #[error("unknown tool: the tools are read_file, write_file, shell and http_fetch")]
    UnknownTool,
    #[error("{tool}: the arguments do not parse: {source}")]
    Invalid {
        tool: ToolName,
        source: proto::tools::ArgsError,
    },
    #[error("http_fetch: {0}")]
    Url(UrlProblem),
}

/// What a call whose arguments did not parse is about: the `path`, `command` or `url` string
/// of an arguments object, else the raw arguments. Two calls with different bad URLs are two
/// different refusals, not one asked twice.
pub fn raw_target(raw: &str) -> String {
    let value: Option<serde_json::Value> = serde_json::from_str(raw).ok();
    ["path", "command", "url"]
        .iter()
        .find_map(|k| value.as_ref()?.get(*k)?.as_str().map(str::to_string))
        .unwrap_or_else(|| raw.to_string())
}

/// Parses a call's arguments for `tool` (its protocol name) from the model's raw string.
pub fn parse(tool: &str, raw: &str) -> Result<ToolArgs, ArgsError> {
    let tool = ToolName::parse(tool).ok_or(ArgsError::UnknownTool)?;
    let invalid = |source| ArgsError::Invalid { tool, source };
    Ok(match tool {
        ToolName::ReadFile => ToolArgs::ReadFile(parse_args(raw).map_err(invalid)?),
        ToolName::WriteFile => ToolArgs::WriteFile(parse_args(raw).map_err(invalid)?),
        ToolName::Shell => ToolArgs::Shell(parse_args(raw).map_err(invalid)?),
        ToolName::HttpFetch => {
            let a: HttpFetchArgs = parse_args(raw).map_err(invalid)?;
            ToolArgs::HttpFetch(parse_url(&a.url).map_err(ArgsError::Url)?)
        }
    })
}

fn parse_url(raw: &str) -> Result<FetchUrl, UrlProblem> {
    if raw.len() > MAX_URL_LEN {
        return Err(UrlProblem::TooLong);
    }
    if !raw.bytes().all(|b| b.is_ascii_graphic() && b != b'\\') {
        return Err(UrlProblem::Characters);
    }
    let (scheme, rest) = raw.split_once(':').ok_or(UrlProblem::NotAbsolute)?;
    if !scheme.eq_ignore_ascii_case("https") {
        let looks_like_scheme = !scheme.is_empty()
            && scheme
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b));
        return Err(if looks_like_scheme && rest.starts_with("//") {
            UrlProblem::NotHttps
        } else {
            UrlProblem::NotAbsolute
        });
    }
    let rest = rest.strip_prefix("//").ok_or(UrlProblem::NotAbsolute)?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    if authority.contains('@') {
        return Err(UrlProblem::UserInfo);
    }
    if authority.starts_with('[') || authority.parse::<std::net::Ipv6Addr>().is_ok() {
        return Err(UrlProblem::IpLiteral);
    }
    let host = match authority.split_once(':') {
        Some((host, "443")) => host,
        Some(_) => return Err(UrlProblem::Port),
        None => authority,
    };
    if host.is_empty() {
        return Err(UrlProblem::NoHost);
    }
    if looks_like_ip(host) {
        return Err(UrlProblem::IpLiteral);
    }
    if !valid_host(host) {
        return Err(UrlProblem::InvalidHost);
    }
    let host = normalize(host);
    let path_and_query = tail.split('#').next().unwrap_or("");
    let mut url = format!("https://{host}");
    if !path_and_query.starts_with('/') {
        url.push('/');
    }
    for c in path_and_query.chars() {
        match c {
            '[' => url.push_str("%5B"),
            ']' => url.push_str("%5D"),
            '{' => url.push_str("%7B"),
            '}' => url.push_str("%7D"),
            c => url.push(c),
        }
    }
    Ok(FetchUrl { url, host })
}

/// Whether a host an address parser could read as an IP address: anything with a colon, or a
/// last label that is decimal, octal or `0x` hex (`10.0.0.1`, `2130706433`, `0x7f.1`, `127.1`).
fn looks_like_ip(host: &str) -> bool {
    if host.contains(':') || host.parse::<std::net::IpAddr>().is_ok() {
        return true;
    }
    let host = host.strip_suffix('.').unwrap_or(host);
    let last = host.rsplit('.').next().unwrap_or(host).to_ascii_lowercase();
    let digits = last.strip_prefix("0x").unwrap_or(&last);
    !last.is_empty()
        && (last.bytes().all(|b| b.is_ascii_digit())
            || (last.starts_with("0x") && digits.bytes().all(|b| b.is_ascii_hexdigit())))
}

/// The problem text of docs/design.md#grants-and-paths, exactly.
pub const UNMOUNTABLE: &str = "cannot be mounted: it contains ':' or ','";

/// A grant directory that podman's `--volume=<path>:<path>:ro` cannot express.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnmountablePath(pub std::path::PathBuf);

impl fmt::Display for UnmountablePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} {UNMOUNTABLE}", self.0)
    }
}

impl std::error::Error for UnmountablePath {}

/// docs/design.md#grants-and-paths: a grant path may not contain `:` or `,`, the separators of
/// podman's
/// `--volume` option.
pub fn check_grant_path(path: &Path) -> Result<(), UnmountablePath> {
    if path
        .as_os_str()
        .as_bytes()
        .iter()
        .any(|b| *b == b':' || *b == b',')
    {
        return Err(UnmountablePath(path.to_path_buf()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fetch(url: &str) -> Result<FetchUrl, UrlProblem> {
        let raw = serde_json::json!({ "url": url }).to_string();
        match parse("http_fetch", &raw) {
            Ok(ToolArgs::HttpFetch(u)) => Ok(u),
            Ok(other) => panic!("http_fetch parsed as {other:?}"),
            Err(ArgsError::Url(p)) => Err(p),
            Err(e) => panic!("{url:?}: not a URL problem: {e}"),
        }
    }

    #[test]
    fn accepted_urls_and_their_checked_form() {
        // (as the model wrote it, url(), host())
        let cases = [
            ("https://example.com", "https://example.com/", "example.com"),
            (
                "https://Docs.Example.ORG./a/B?q=1",
                "https://docs.example.org/a/B?q=1",
                "docs.example.org",
            ),
            (
                "HTTPS://example.com:443/x",
                "https://example.com/x",
                "example.com",
            ),
            (
                "https://example.com/p#frag",
                "https://example.com/p",
                "example.com",
            ),
            (
                "https://example.com?q=a",
                "https://example.com/?q=a",
                "example.com",
            ),
            (
                "https://example.com#top",
                "https://example.com/",
                "example.com",
            ),
            (
                "https://a.example.com/x[1-9]{a,b}",
                "https://a.example.com/x%5B1-9%5D%7Ba,b%7D",
                "a.example.com",
            ),
            (
                "https://xn--bcher-kva.example/%C3%BC",
                "https://xn--bcher-kva.example/%C3%BC",
                "xn--bcher-kva.example",
            ),
            (
                "https://example.com/a@b:c",
                "https://example.com/a@b:c",
                "example.com",
            ),
            (
                "https://1x.example.com/",
                "https://1x.example.com/",
                "1x.example.com",
            ),
        ];
        for (raw, url, host) in cases {
            let u = fetch(raw).unwrap_or_else(|p| panic!("{raw:?} refused: {p}"));
            assert_eq!((u.url(), u.host()), (url, host), "{raw:?}");
        }
    }

    #[test]
    fn refused_urls() {
        use UrlProblem::*;
        let long = format!("https://example.com/{}", "a".repeat(MAX_URL_LEN));
        let cases: Vec<(&str, UrlProblem)> = vec![
            ("http://example.com/", NotHttps),
            ("ftp://example.com/", NotHttps),
            ("file:///etc/passwd", NotHttps),
            ("example.com/x", NotAbsolute),
            ("https:example.com", NotAbsolute),
            ("https:/example.com", NotAbsolute),
            ("//example.com/", NotAbsolute),
            ("", NotAbsolute),
            ("javascript:alert(1)", NotAbsolute),
            ("https://user@example.com/", UserInfo),
            ("https://user:pw@example.com/", UserInfo),
            ("https://evil.net@example.com/", UserInfo),
            ("https://example.com@evil.net/", UserInfo),
            ("https://example.com:8443/", Port),
            ("https://example.com:80/", Port),
            ("https://example.com:/", Port),
            ("https://example.com:0443/", Port),
            ("https://example.com:443:443/", Port),
            ("https:///path", NoHost),
            ("https://:443/", NoHost),
            ("https://?q", NoHost),
            ("https://127.0.0.1/", IpLiteral),
            ("https://10.0.0.1:443/", IpLiteral),
            ("https://100.100.100.100/", IpLiteral),
            ("https://2130706433/", IpLiteral),
            ("https://0x7f000001/", IpLiteral),
            ("https://0x7f.0x1/", IpLiteral),
            ("https://0177.0.0.1/", IpLiteral),
            ("https://127.1/", IpLiteral),
            ("https://127.0.0.1./", IpLiteral),
            ("https://example.com.0x1/", IpLiteral),
            ("https://[::1]/", IpLiteral),
            ("https://[::ffff:127.0.0.1]:443/", IpLiteral),
            ("https://[fe80::1%25eth0]/", IpLiteral),
            ("https://::1/", IpLiteral),
            ("https://localhost/", InvalidHost),
            ("https://a_b.example/", InvalidHost),
            ("https://example..com/", InvalidHost),
            ("https://-a.example/", InvalidHost),
            ("https://*.example.com/", InvalidHost),
            ("https://exa%6dple.com/", InvalidHost),
            ("https://example.com\\@evil.net/", Characters),
            ("https://exa mple.com/", Characters),
            ("https://example.com/a b", Characters),
            ("https://example.com/\n", Characters),
            ("https://example.com/\t", Characters),
            ("https://example.com\r\n/", Characters),
            ("https://example.com/\u{0}", Characters),
            ("https://bücher.example/", Characters),
            ("https://example.com/ü", Characters),
            ("https://example.com/\u{a0}", Characters),
            (long.as_str(), TooLong),
        ];
        for (raw, want) in cases {
            assert_eq!(fetch(raw).err(), Some(want), "{raw:?}");
        }
    }

    #[test]
    fn url_problems_read_as_actions() {
        let e = ArgsError::Url(UrlProblem::NotHttps);
        assert_eq!(e.to_string(), "http_fetch: the URL must use https");
        let e = ArgsError::Url(UrlProblem::IpLiteral);
        assert_eq!(
            e.to_string(),
            "http_fetch: the URL's host must be a name, not an IP address"
        );
    }

    #[test]
    fn tools_and_argument_errors() {
        let ok = [
            ("read_file", r#"{"path":"/srv/a"}"#, ToolName::ReadFile),
            (
                "write_file",
                r#"{"path":"a","content":"x"}"#,
                ToolName::WriteFile,
            ),
            ("shell", r#"{"command":"ls","cwd":"/srv"}"#, ToolName::Shell),
            (
                "http_fetch",
                r#"{"url":"https://example.com/"}"#,
                ToolName::HttpFetch,
            ),
        ];
        for (tool, raw, want) in ok {
            let args = parse(tool, raw).unwrap_or_else(|e| panic!("{tool} {raw}: {e}"));
            assert_eq!(args.tool(), want);
        }
        let bad = [
            ("exec", r#"{"command":"ls"}"#, "unknown tool"),
            ("Shell", r#"{"command":"ls"}"#, "unknown tool"),
            (
                "shell",
                r#"{"command":"ls","env":{}}"#,
                "shell: the arguments",
            ),
            (
                "read_file",
                r#"["/etc/passwd"]"#,
                "read_file: the arguments",
            ),
            ("write_file", r#"{"path":"a"}"#, "write_file: the arguments"),
            (
                "http_fetch",
                r#"{"url":"https://example.com/","method":"POST"}"#,
                "http_fetch: the arguments",
            ),
            (
                "http_fetch",
                r#"{"url":"http://example.com/"}"#,
                "http_fetch: the URL",
            ),
        ];
        for (tool, raw, prefix) in bad {
            let e = parse(tool, raw).expect_err(raw).to_string();
            assert!(e.starts_with(prefix), "{tool} {raw}: {e}");
        }
    }

    #[test]
    fn input_json_carries_the_checked_url() {
        let args = parse("http_fetch", r#"{"url":"HTTPS://Example.COM:443/a#b"}"#).expect("ok");
        assert_eq!(
            args.input_json(),
            br#"{"url":"https://example.com/a"}"#.to_vec()
        );
        let args = parse("shell", r#"{"command":"ls"}"#).expect("ok");
        assert_eq!(args.input_json(), br#"{"command":"ls"}"#.to_vec());
    }

    #[test]
    fn grant_path_rule() {
        let cases = [
            ("/srv/notes", true),
            ("/srv/my notes", true),
            ("/srv/a;b", true),
            ("/srv/a:b", false),
            ("/srv/a,b", false),
            ("/srv/notes:ro", false),
            ("/srv/x,rw,y", false),
        ];
        for (p, ok) in cases {
            assert_eq!(check_grant_path(Path::new(p)).is_ok(), ok, "{p}");
        }
        let e = check_grant_path(Path::new("/srv/a:b")).expect_err("refused");
        assert_eq!(
            e.to_string(),
            "\"/srv/a:b\" cannot be mounted: it contains ':' or ','"
        );
    }
}
