//! The egress proxy's command line (docs/design.md#the-egress-proxy): brokerd writes it with
//! [`ProxyArgs::command`], toolkit reads it back with [`ProxyArgs::parse`], so the two cannot
//! drift apart.
//!
//! ```text
//! /bin/toolkit egress-proxy --socket <path> --allow <pattern>[,<pattern>...] [--allow-address <cidr>]...
//!     [--max-connections <n>] [--max-bytes <n>]
//! ```
//!
//! `--allow` may be given more than once (its patterns add up); [`ProxyArgs::to_args`] gives it
//! once, the patterns joined by `,`, and one `--allow-address` per range, in order
//! (docs/design.md#http_fetch-and-its-egress-proxy).

use crate::addr::{self, Cidr, CidrError};
use crate::hosts;
use crate::tools::TOOLKIT;

/// The toolkit subcommand that runs the proxy.
pub const SUBCOMMAND: &str = "egress-proxy";

/// The proxy's synopsis, for its usage messages.
pub const USAGE: &str = "toolkit egress-proxy --socket <path> --allow <pattern>[,<pattern>...] [--allow-address <cidr>]... [--max-connections <n>] [--max-bytes <n>]";

const SOCKET: &str = "--socket";
const ALLOW: &str = "--allow";
const ALLOW_ADDRESS: &str = "--allow-address";
const MAX_CONNECTIONS: &str = "--max-connections";
const MAX_BYTES: &str = "--max-bytes";

/// What one egress proxy is told: where to listen and what it may reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyArgs {
    /// The Unix socket to listen on, as seen inside the proxy's sandbox.
    pub socket: String,
    /// The grant's host patterns ([`hosts::valid_host_pattern`]), at least one.
    pub allow: Vec<String>,
    /// The grant's `allow_addresses`, each refused by [`addr::parse_allow_address`] if it
    /// reaches a range that is never allowed.
    pub allow_addresses: Vec<Cidr>,
    /// The call's bounds, where it has them (a shell call with `shell_hosts`): how many
    /// connections in all, and how many bytes each way, all connections together.
    pub bounds: Option<Bounds>,
}

/// A call's bounds on its proxy (docs/design.md#shell-and-its-egress-proxy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Connections accepted over the proxy's life; past them each is closed at once.
    pub connections: u64,
    /// Bytes relayed up (client to server), and as many down, all connections together.
    pub bytes: u64,
}

/// Why an egress proxy command line was refused: toolkit's exit 2.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UsageError {
    #[error("{0} needs a value")]
    MissingValue(String),
    #[error("unknown argument {0:?}")]
    Unknown(String),
    #[error("--socket given twice")]
    SocketTwice,
    #[error("--socket is required")]
    NoSocket,
    #[error("--allow is required")]
    NoAllow,
    #[error("{0:?} is not a host pattern")]
    BadPattern(String),
    #[error("--allow-address {0}")]
    BadAddress(#[from] CidrError),
    #[error("{0} needs a whole number greater than 0, not {1:?}")]
    BadCount(String, String),
    #[error("{0} given twice")]
    Twice(String),
    #[error("--max-connections and --max-bytes go together")]
    HalfBounds,
}

impl ProxyArgs {
    /// The words after the subcommand. `parse` gives back an equal value for every value it
    /// could have produced. Of the values it could not: no pattern, or one that is not a host
    /// pattern, gives a command line toolkit refuses, except that a pattern holding `,` comes
    /// back as two (brokerd's patterns passed the host pattern check, which refuses `,`).
    pub fn to_args(&self) -> Vec<String> {
        let mut a = vec![
            SOCKET.to_string(),
            self.socket.clone(),
            ALLOW.to_string(),
            self.allow.join(","),
        ];
        for cidr in &self.allow_addresses {
            a.push(ALLOW_ADDRESS.to_string());
            a.push(cidr.to_string());
        }
        if let Some(b) = self.bounds {
            a.push(MAX_CONNECTIONS.to_string());
            a.push(b.connections.to_string());
            a.push(MAX_BYTES.to_string());
            a.push(b.bytes.to_string());
        }
        a
    }

    /// The whole command inside the proxy's sandbox: [`TOOLKIT`], [`SUBCOMMAND`], then
    /// [`to_args`](Self::to_args).
    pub fn command(&self) -> Vec<String> {
        let mut a = vec![TOOLKIT.to_string(), SUBCOMMAND.to_string()];
        a.extend(self.to_args());
        a
    }

    /// Reads the words after the subcommand: `--socket` exactly once and not empty, `--allow`
    /// at least once with valid host patterns, any number of `--allow-address`, each a range
    /// that reaches nothing never allowed. Flags may come in any order.
    pub fn parse(args: &[String]) -> Result<ProxyArgs, UsageError> {
        let mut socket = None;
        let mut allow = Vec::new();
        let mut allow_addresses = Vec::new();
        let (mut connections, mut bytes) = (None, None);
        let mut it = args.iter();
        while let Some(flag) = it.next() {
            let mut value = || {
                it.next()
                    .ok_or_else(|| UsageError::MissingValue(flag.clone()))
            };
            match flag.as_str() {
                SOCKET => {
                    let v = value()?;
                    if socket.replace(v.clone()).is_some() {
                        return Err(UsageError::SocketTwice);
                    }
                }
                ALLOW => allow.extend(value()?.split(',').map(str::to_string)),
                ALLOW_ADDRESS => allow_addresses.push(addr::parse_allow_address(value()?)?),
                MAX_CONNECTIONS => count(flag, value()?, &mut connections)?,
                MAX_BYTES => count(flag, value()?, &mut bytes)?,
                other => return Err(UsageError::Unknown(other.to_string())),
            }
        }
        let socket = socket.ok_or(UsageError::NoSocket)?;
        if socket.is_empty() {
            return Err(UsageError::MissingValue(SOCKET.into()));
        }
        check_allow(&allow)?;
        let bounds = match (connections, bytes) {
            (Some(connections), Some(bytes)) => Some(Bounds { connections, bytes }),
            (None, None) => None,
            _ => return Err(UsageError::HalfBounds),
        };
        Ok(ProxyArgs {
            socket,
            allow,
            allow_addresses,
            bounds,
        })
    }
}

/// A count flag's value: digits only, greater than 0, given once.
fn count(flag: &str, value: &str, into: &mut Option<u64>) -> Result<(), UsageError> {
    let bad = || UsageError::BadCount(flag.to_string(), value.to_string());
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let n: u64 = value.parse().map_err(|_| bad())?;
    if n == 0 {
        return Err(bad());
    }
    if into.replace(n).is_some() {
        return Err(UsageError::Twice(flag.to_string()));
    }
    Ok(())
}

/// The rule for the proxy's host patterns: at least one, each a valid host pattern.
pub fn check_allow(allow: &[String]) -> Result<(), UsageError> {
    if allow.is_empty() {
        return Err(UsageError::NoAllow);
    }
    match allow.iter().find(|p| !hosts::valid_host_pattern(p)) {
        Some(bad) => Err(UsageError::BadPattern(bad.clone())),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_string).collect()
    }

    fn cidrs(list: &[&str]) -> Vec<Cidr> {
        list.iter()
            .map(|s| addr::parse_allow_address(s))
            .collect::<Result<_, _>>()
            .unwrap_or_else(|e| panic!("test range: {e}"))
    }

    /// The exact words brokerd's two runners have always written (the golden files under
    /// crates/brokerd/tests/fixtures hold them too).
    #[test]
    fn to_args_is_the_documented_list() {
        let a = ProxyArgs {
            socket: crate::tools::EGRESS_SOCKET.into(),
            allow: vec!["docs.example.org".into(), "*.example.net".into()],
            allow_addresses: cidrs(&["192.0.2.0/24", "2001:db8::/32"]),
            bounds: None,
        };
        assert_eq!(
            a.command(),
            words(
                "/bin/toolkit egress-proxy --socket /run/egress/egress.sock \
                 --allow docs.example.org,*.example.net \
                 --allow-address 192.0.2.0/24 --allow-address 2001:db8::/32"
            )
        );
        let only_hosts = ProxyArgs {
            allow_addresses: vec![],
            ..a
        };
        assert_eq!(
            only_hosts.to_args(),
            words("--socket /run/egress/egress.sock --allow docs.example.org,*.example.net")
        );
    }

    #[test]
    fn parse_gives_back_what_to_args_wrote() {
        let sockets = [
            "/run/egress/egress.sock",
            "/s",
            "relative/path.sock",
            "/a b/ü.sock",
        ];
        let patterns = [
            "example.com",
            "*.example.org",
            "Docs.Example.ORG",
            "xn--bcher-kva.example",
            "a-b.c-d.example",
            "trailing.example.",
        ];
        let ranges = [
            "192.0.2.0/24",
            "10.0.0.7",
            "2001:db8::/32",
            "fd00::1",
            "198.51.100.0/25",
        ];
        let mut cases = 0;
        // Every socket, every non-empty run of patterns, every run of ranges (none included).
        for socket in sockets {
            for start in 0..patterns.len() {
                for end in start + 1..=patterns.len() {
                    for n in 0..=ranges.len() {
                        let mut addrs = ranges[..n].to_vec();
                        // Order is kept, so try it reversed too.
                        if start % 2 == 1 {
                            addrs.reverse();
                        }
                        let x = ProxyArgs {
                            socket: socket.into(),
                            allow: patterns[start..end].iter().map(|p| p.to_string()).collect(),
                            allow_addresses: cidrs(&addrs),
                            bounds: (n % 2 == 1).then_some(Bounds {
                                connections: 64,
                                bytes: 1 << 30,
                            }),
                        };
                        let back = ProxyArgs::parse(&x.to_args());
                        assert_eq!(back.as_ref(), Ok(&x), "{:?}", x.to_args());
                        cases += 1;
                    }
                }
            }
        }
        assert_eq!(cases, 4 * 21 * 6);
    }

    #[test]
    fn parse_accepts_flags_in_any_order_and_allow_more_than_once() {
        let got = ProxyArgs::parse(&words(
            "--allow-address 192.0.2.0/24 --allow a.example --socket /s --allow b.example,*.c.example",
        ));
        assert_eq!(
            got,
            Ok(ProxyArgs {
                socket: "/s".into(),
                allow: vec!["a.example".into(), "b.example".into(), "*.c.example".into()],
                allow_addresses: cidrs(&["192.0.2.0/24"]),
                bounds: None,
            })
        );
    }

    #[test]
    fn parse_refuses_bad_input_clearly() {
        let never = "which is never allowed (loopback, link-local, the tailnet, 0/8, multicast)";
        let rows: Vec<(Vec<String>, String)> = vec![
            (words(""), "--socket is required".into()),
            (words("--allow example.com"), "--socket is required".into()),
            (words("--socket /s"), "--allow is required".into()),
            (words("--socket"), "--socket needs a value".into()),
            (words("--socket /s --allow"), "--allow needs a value".into()),
            (
                words("--socket /s --allow example.com --allow-address"),
                "--allow-address needs a value".into(),
            ),
            (
                vec![
                    "--socket".into(),
                    "".into(),
                    "--allow".into(),
                    "a.example".into(),
                ],
                "--socket needs a value".into(),
            ),
            (
                words("--socket /s --socket /t --allow example.com"),
                "--socket given twice".into(),
            ),
            (
                vec!["--socket".into(), "/s".into(), "--allow".into(), "".into()],
                "\"\" is not a host pattern".into(),
            ),
            (
                words("--socket /s --allow example.com,"),
                "\"\" is not a host pattern".into(),
            ),
            (
                words("--socket /s --allow a.example,,b.example"),
                "\"\" is not a host pattern".into(),
            ),
            (
                words("--socket /s --allow *.com"),
                "\"*.com\" is not a host pattern".into(),
            ),
            (
                words("--socket /s --allow 10.0.0.1"),
                "\"10.0.0.1\" is not a host pattern".into(),
            ),
            (
                words("--socket /s --allow *.example.org."),
                "\"*.example.org.\" is not a host pattern".into(),
            ),
            (
                words("--socket /s --allow example.com --verbose"),
                "unknown argument \"--verbose\"".into(),
            ),
            (
                words("--socket /s --allow=example.com"),
                "unknown argument \"--allow=example.com\"".into(),
            ),
            (
                words("egress-proxy --socket /s --allow example.com"),
                "unknown argument \"egress-proxy\"".into(),
            ),
            (
                words("--socket /s --allow example.com --allow-address nonsense"),
                "--allow-address \"nonsense\" is not an address or a CIDR such as 192.0.2.0/24"
                    .into(),
            ),
            (
                words("--socket /s --allow example.com --allow-address 10.1.2.3/8"),
                "--allow-address \"10.1.2.3/8\" has address bits set past its prefix length; \
                 write 10.0.0.0/8"
                    .into(),
            ),
            (
                words("--socket /s --allow example.com --allow-address 10.0.0.0/33"),
                "--allow-address \"10.0.0.0/33\" has a prefix length longer than the address"
                    .into(),
            ),
            (
                words("--socket /s --allow example.com --allow-address 127.0.0.0/8"),
                format!("--allow-address 127.0.0.0/8 overlaps 127.0.0.0/8, {never}"),
            ),
            (
                words("--socket /s --allow example.com --allow-address 169.254.169.254"),
                format!("--allow-address 169.254.169.254/32 overlaps 169.254.0.0/16, {never}"),
            ),
            (
                words("--socket /s --allow example.com --max-connections 64"),
                "--max-connections and --max-bytes go together".into(),
            ),
            (
                words("--socket /s --allow example.com --max-connections 0 --max-bytes 1"),
                "--max-connections needs a whole number greater than 0, not \"0\"".into(),
            ),
            (
                words("--socket /s --allow example.com --max-connections 1 --max-bytes -1"),
                "--max-bytes needs a whole number greater than 0, not \"-1\"".into(),
            ),
            (
                words("--socket /s --allow example.com --max-connections +5 --max-bytes 1"),
                "--max-connections needs a whole number greater than 0, not \"+5\"".into(),
            ),
            (
                words("--socket /s --allow example.com --max-connections 1 --max-bytes 99999999999999999999"),
                "--max-bytes needs a whole number greater than 0, not \"99999999999999999999\"".into(),
            ),
            (
                words("--socket /s --allow example.com --max-connections 1 --max-connections 2 --max-bytes 1"),
                "--max-connections given twice".into(),
            ),
            (
                words("--socket /s --allow example.com --allow-address 0.0.0.0/0"),
                format!("--allow-address 0.0.0.0/0 overlaps 127.0.0.0/8, {never}"),
            ),
        ];
        for (args, why) in rows {
            match ProxyArgs::parse(&args) {
                Ok(got) => panic!("{args:?} was accepted as {got:?}"),
                Err(e) => assert_eq!(e.to_string(), why, "{args:?}"),
            }
        }
    }

    #[test]
    fn check_allow_is_the_rule_parse_applies() {
        assert_eq!(check_allow(&[]), Err(UsageError::NoAllow));
        assert_eq!(
            check_allow(&["a.example".into(), "*.com".into()]),
            Err(UsageError::BadPattern("*.com".into()))
        );
        assert_eq!(
            check_allow(&["a.example".into(), "*.b.example".into()]),
            Ok(())
        );
    }

    #[test]
    fn usage_names_every_flag_to_args_writes() {
        assert!(USAGE.starts_with(&format!("toolkit {SUBCOMMAND} ")));
        let a = ProxyArgs {
            socket: "/s".into(),
            allow: vec!["a.example".into()],
            allow_addresses: cidrs(&["192.0.2.0/24"]),
            bounds: Some(Bounds {
                connections: 1,
                bytes: 2,
            }),
        };
        for flag in a.to_args().iter().filter(|w| w.starts_with("--")) {
            assert!(USAGE.contains(&format!("{flag} <")), "{flag}");
        }
    }
}
