//! Which addresses the egress proxy may dial (seed 003 section 5; DESIGN.md Config
//! `allow_addresses`).
//!
//! An address is dialable iff it is public ([`is_public`]), or some `--allow-address` CIDR
//! contains it and it is not in a range that is never allowed ([`never_allowed`]): loopback,
//! link-local (cloud metadata), the tailnet, 0/8 and multicast. IPv4-mapped (`::ffff:0:0/96`)
//! and NAT64 (`64:ff9b::/96`) addresses are judged by their IPv4 part throughout, since a
//! dual-stack socket or a NAT64 gateway delivers them to that IPv4 address.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// A network: an address and a prefix length, with no bits set past the prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

/// Why an `--allow-address` value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CidrError {
    #[error("{0:?} is not an address or a CIDR such as 192.0.2.0/24")]
    Syntax(String),
    #[error("{0:?} has a prefix length longer than the address")]
    PrefixTooLong(String),
    #[error("{0:?} has address bits set past its prefix length; write {1}")]
    HostBits(String, Cidr),
    #[error("{0} overlaps {1}, which is never allowed (loopback, link-local, the tailnet, 0/8, multicast)")]
    NeverAllowed(Cidr, Cidr),
}

impl Cidr {
    const fn v4(a: u8, b: u8, c: u8, d: u8, prefix: u8) -> Cidr {
        Cidr {
            network: IpAddr::V4(Ipv4Addr::new(a, b, c, d)),
            prefix,
        }
    }

    const fn v6(segments: [u16; 8], prefix: u8) -> Cidr {
        let [a, b, c, d, e, f, g, h] = segments;
        Cidr {
            network: IpAddr::V6(Ipv6Addr::new(a, b, c, d, e, f, g, h)),
            prefix,
        }
    }

    /// Whether `ip` lies in this network. Families never mix here: callers that want the IPv4
    /// part of a mapped address judged use [`embedded_v4`] first.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = mask32(self.prefix);
                u32::from(ip) & mask == u32::from(net)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = mask128(self.prefix);
                u128::from(ip) & mask == u128::from(net)
            }
            _ => false,
        }
    }

    /// Whether the two networks share an address: one holds the other's first address.
    pub fn overlaps(&self, other: &Cidr) -> bool {
        self.contains(other.network) || other.contains(self.network)
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

impl FromStr for Cidr {
    type Err = CidrError;

    /// `addr/len`, or a bare address meaning that one address. Bits set past the prefix are
    /// refused rather than masked away: the owner should see the network they actually allow.
    fn from_str(s: &str) -> Result<Cidr, CidrError> {
        let syntax = || CidrError::Syntax(s.to_string());
        let (addr, prefix) = match s.split_once('/') {
            Some((addr, len)) => {
                // u8's parser accepts a leading '+'; a CIDR has digits only.
                if len.is_empty() || len.len() > 3 || !len.bytes().all(|c| c.is_ascii_digit()) {
                    return Err(syntax());
                }
                let prefix: u8 = len.parse().map_err(|_| syntax())?;
                (addr, Some(prefix))
            }
            None => (s, None),
        };
        let network: IpAddr = addr.parse().map_err(|_| syntax())?;
        let bits = if network.is_ipv4() { 32 } else { 128 };
        let prefix = prefix.unwrap_or(bits);
        if prefix > bits {
            return Err(CidrError::PrefixTooLong(s.to_string()));
        }
        let masked = match network {
            IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask32(prefix))),
            IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask128(prefix))),
        };
        let cidr = Cidr {
            network: masked,
            prefix,
        };
        if masked != network {
            return Err(CidrError::HostBits(s.to_string(), cidr));
        }
        Ok(cidr)
    }
}

fn mask32(prefix: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0)
}

fn mask128(prefix: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0)
}

/// IPv4 ranges that are not public (seed 003 section 5, in its order).
const NOT_PUBLIC_V4: [Cidr; 14] = [
    Cidr::v4(0, 0, 0, 0, 8),
    Cidr::v4(10, 0, 0, 0, 8),
    Cidr::v4(100, 64, 0, 0, 10),
    Cidr::v4(127, 0, 0, 0, 8),
    Cidr::v4(169, 254, 0, 0, 16),
    Cidr::v4(172, 16, 0, 0, 12),
    Cidr::v4(192, 0, 0, 0, 24),
    Cidr::v4(192, 0, 2, 0, 24),
    Cidr::v4(192, 168, 0, 0, 16),
    Cidr::v4(198, 18, 0, 0, 15),
    Cidr::v4(198, 51, 100, 0, 24),
    Cidr::v4(203, 0, 113, 0, 24),
    Cidr::v4(224, 0, 0, 0, 4),
    Cidr::v4(240, 0, 0, 0, 4),
];

/// IPv6 ranges that are not public whatever follows (seed 003 section 5).
const NOT_PUBLIC_V6: [Cidr; 5] = [
    Cidr::v6([0, 0, 0, 0, 0, 0, 0, 0], 96),
    Cidr::v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7),
    Cidr::v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10),
    Cidr::v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8),
    Cidr::v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32),
];

/// IPv6 prefixes whose last 32 bits name an IPv4 address.
const MAPPED: Cidr = Cidr::v6([0, 0, 0, 0, 0, 0xffff, 0, 0], 96);
const NAT64: Cidr = Cidr::v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96);
const COMPATIBLE: Cidr = Cidr::v6([0, 0, 0, 0, 0, 0, 0, 0], 96);

/// Ranges no `--allow-address` may reach (DESIGN.md Config `allow_addresses`): loopback,
/// link-local (cloud metadata lives there), the tailnet, "this network" and multicast.
const NEVER_ALLOWED: [Cidr; 9] = [
    Cidr::v4(127, 0, 0, 0, 8),
    Cidr::v4(169, 254, 0, 0, 16),
    Cidr::v4(100, 64, 0, 0, 10),
    Cidr::v4(0, 0, 0, 0, 8),
    Cidr::v4(224, 0, 0, 0, 4),
    Cidr::v6([0, 0, 0, 0, 0, 0, 0, 1], 128),
    Cidr::v6([0, 0, 0, 0, 0, 0, 0, 0], 128),
    Cidr::v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10),
    Cidr::v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8),
];

/// The IPv4 address inside an IPv4-mapped or NAT64 IPv6 address.
pub fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let ip6 = IpAddr::V6(ip);
    if MAPPED.contains(ip6) || NAT64.contains(ip6) {
        // The low 32 bits; truncation is the point.
        Some(Ipv4Addr::from(u128::from(ip) as u32))
    } else {
        None
    }
}

/// Whether `ip` is a public address, one the proxy may dial without an `--allow-address`
/// (seed 003 section 5, every range listed there and nothing else).
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(_) => !NOT_PUBLIC_V4.iter().any(|c| c.contains(ip)),
        IpAddr::V6(v6) => {
            if let Some(v4) = embedded_v4(v6) {
                return is_public(IpAddr::V4(v4));
            }
            !NOT_PUBLIC_V6.iter().any(|c| c.contains(ip))
        }
    }
}

/// Whether `ip` is in a range no `--allow-address` can open.
pub fn never_allowed(ip: IpAddr) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => embedded_v4(v6).map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    NEVER_ALLOWED.iter().any(|c| c.contains(ip))
}

/// Parses one `--allow-address` value and refuses any network that overlaps a never-allowed
/// range, including through the IPv4-mapped and NAT64 prefixes.
pub fn parse_allow_address(s: &str) -> Result<Cidr, CidrError> {
    let cidr: Cidr = s.parse()?;
    let mut forbidden: Vec<Cidr> = NEVER_ALLOWED.to_vec();
    for c in NEVER_ALLOWED {
        if let IpAddr::V4(v4) = c.network {
            // The old IPv4-compatible form (::a.b.c.d) too: the config refuses it as well.
            for prefix in [MAPPED, NAT64, COMPATIBLE] {
                let IpAddr::V6(p) = prefix.network else {
                    continue;
                };
                let v6 = Ipv6Addr::from(u128::from(p) | u128::from(u32::from(v4)));
                forbidden.push(Cidr {
                    network: IpAddr::V6(v6),
                    prefix: 96 + c.prefix,
                });
            }
        }
    }
    match forbidden.into_iter().find(|f| f.overlaps(&cidr)) {
        Some(f) => Err(CidrError::NeverAllowed(cidr, f)),
        None => Ok(cidr),
    }
}

/// Whether the proxy may dial `ip`: public, or opened by an `--allow-address` and not in a
/// never-allowed range.
pub fn dialable(ip: IpAddr, allow: &[Cidr]) -> bool {
    if is_public(ip) {
        return true;
    }
    if never_allowed(ip) {
        return false;
    }
    let v4 = match ip {
        IpAddr::V6(v6) => embedded_v4(v6).map(IpAddr::V4),
        IpAddr::V4(_) => None,
    };
    allow
        .iter()
        .any(|c| c.contains(ip) || v4.is_some_and(|v4| c.contains(v4)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("test address")
    }

    /// Every range of seed section 5: first and last address inside, and the neighbours just
    /// outside (when those are not themselves in another range).
    #[test]
    fn is_public_table() {
        let cases = [
            // 0/8
            ("0.0.0.0", false),
            ("0.255.255.255", false),
            ("1.0.0.0", true),
            // 10/8
            ("9.255.255.255", true),
            ("10.0.0.0", false),
            ("10.255.255.255", false),
            ("11.0.0.0", true),
            // 100.64/10
            ("100.63.255.255", true),
            ("100.64.0.0", false),
            ("100.100.100.100", false),
            ("100.127.255.255", false),
            ("100.128.0.0", true),
            // 127/8
            ("126.255.255.255", true),
            ("127.0.0.0", false),
            ("127.0.0.1", false),
            ("127.255.255.255", false),
            ("128.0.0.0", true),
            // 169.254/16
            ("169.253.255.255", true),
            ("169.254.0.0", false),
            ("169.254.169.254", false),
            ("169.254.255.255", false),
            ("169.255.0.0", true),
            // 172.16/12
            ("172.15.255.255", true),
            ("172.16.0.0", false),
            ("172.31.255.255", false),
            ("172.32.0.0", true),
            // 192.0.0/24
            ("191.255.255.255", true),
            ("192.0.0.0", false),
            ("192.0.0.255", false),
            ("192.0.1.0", true),
            // 192.0.2/24
            ("192.0.1.255", true),
            ("192.0.2.0", false),
            ("192.0.2.255", false),
            ("192.0.3.0", true),
            // 192.168/16
            ("192.167.255.255", true),
            ("192.168.0.0", false),
            ("192.168.255.255", false),
            ("192.169.0.0", true),
            // 198.18/15
            ("198.17.255.255", true),
            ("198.18.0.0", false),
            ("198.19.255.255", false),
            ("198.20.0.0", true),
            // 198.51.100/24
            ("198.51.99.255", true),
            ("198.51.100.0", false),
            ("198.51.100.255", false),
            ("198.51.101.0", true),
            // 203.0.113/24
            ("203.0.112.255", true),
            ("203.0.113.0", false),
            ("203.0.113.255", false),
            ("203.0.114.0", true),
            // 224/4 and 240/4 run to the end of the space
            ("223.255.255.255", true),
            ("224.0.0.0", false),
            ("239.255.255.255", false),
            ("240.0.0.0", false),
            ("255.255.255.255", false),
            // ordinary public
            ("8.8.8.8", true),
            ("93.184.216.34", true),
            // ::/96
            ("::", false),
            ("::1", false),
            ("::ffff", false),
            ("::1.2.3.4", false),
            ("::ffff:ffff", false),
            ("::1:0:0", true),
            // ::ffff:0:0/96 judged by the IPv4 part
            ("::ffff:0.0.0.0", false),
            ("::ffff:8.8.8.8", true),
            ("::ffff:127.0.0.1", false),
            ("::ffff:100.100.100.100", false),
            ("::ffff:169.254.169.254", false),
            ("::ffff:10.1.2.3", false),
            ("::ffff:255.255.255.255", false),
            ("::ffff:223.255.255.255", true),
            ("::fffe:ffff:ffff", true),
            ("::1:0:0:0", true),
            // 64:ff9b::/96 judged by the IPv4 part
            ("64:ff9b::8.8.8.8", true),
            ("64:ff9b::127.0.0.1", false),
            ("64:ff9b::100.64.0.0", false),
            ("64:ff9b::192.168.1.1", false),
            ("64:ff9b::ffff:ffff", false),
            ("64:ff9b::1.0.0.0", true),
            ("64:ff9a:ffff:ffff:ffff:ffff:ffff:ffff", true),
            ("64:ff9b:0:0:0:1::", true),
            // fc00::/7
            ("fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", true),
            ("fc00::", false),
            ("fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", false),
            ("fe00::", true),
            // fe80::/10
            ("fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff", true),
            ("fe80::", false),
            ("febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", false),
            ("fec0::", true),
            // ff00::/8 runs to the end
            ("feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", true),
            ("ff00::", false),
            ("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", false),
            // 2001:db8::/32
            ("2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", true),
            ("2001:db8::", false),
            ("2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", false),
            ("2001:db9::", true),
            // ordinary public
            ("2606:4700::1111", true),
        ];
        for (addr, public) in cases {
            assert_eq!(is_public(ip(addr)), public, "is_public({addr})");
        }
    }

    #[test]
    fn cidr_parse_table() {
        let ok = [
            ("192.0.2.0/24", "192.0.2.0/24"),
            ("192.0.2.10", "192.0.2.10/32"),
            ("10.0.0.0/8", "10.0.0.0/8"),
            ("2001:db8::/32", "2001:db8::/32"),
            ("fd00::1", "fd00::1/128"),
            ("198.51.100.7/32", "198.51.100.7/32"),
        ];
        for (input, shown) in ok {
            let c = parse_allow_address(input).expect(input);
            assert_eq!(c.to_string(), shown, "{input}");
        }
        let syntax = [
            "",
            "/",
            "192.0.2.0/",
            "/24",
            "192.0.2/24",
            "192.0.2.0/+24",
            "192.0.2.0/024x",
            "example.com",
            "192.0.2.0/24/1",
            " 192.0.2.0/24",
            "[::1]",
            "192.0.2.0/1000",
        ];
        for input in syntax {
            assert!(
                matches!(parse_allow_address(input), Err(CidrError::Syntax(_))),
                "{input:?}"
            );
        }
        assert!(matches!(
            parse_allow_address("192.0.2.0/33"),
            Err(CidrError::PrefixTooLong(_))
        ));
        assert!(matches!(
            parse_allow_address("2001:db8::/129"),
            Err(CidrError::PrefixTooLong(_))
        ));
        assert!(matches!(
            parse_allow_address("192.0.2.10/24"),
            Err(CidrError::HostBits(_, _))
        ));
    }

    #[test]
    fn never_allowed_cidrs_are_refused() {
        let refused = [
            "127.0.0.1",
            "127.0.0.0/8",
            "126.0.0.0/7",
            "169.254.169.254",
            "169.254.0.0/16",
            "100.64.0.0/10",
            "100.100.100.100/32",
            "100.0.0.0/8",
            "0.0.0.0/8",
            "0.0.0.0/0",
            "224.0.0.0/4",
            "239.1.2.3",
            "::1",
            "::/128",
            "::/0",
            "::/96",
            "fe80::/10",
            "fe80::1",
            "ff02::1",
            "ff00::/8",
            "::ffff:0:0/96",
            "::ffff:127.0.0.1",
            "::ffff:169.254.0.0/112",
            "64:ff9b::/96",
            "64:ff9b::100.100.100.100",
        ];
        for input in refused {
            assert!(
                matches!(
                    parse_allow_address(input),
                    Err(CidrError::NeverAllowed(_, _))
                ),
                "{input} must be refused"
            );
        }
        let allowed = [
            "192.0.2.0/24",
            "10.0.0.0/8",
            "172.16.0.0/12",
            "192.168.1.0/24",
            "198.18.0.0/15",
            "fd00::/8",
            "2001:db8::/32",
            "::ffff:192.0.2.0/120",
            "64:ff9b::10.0.0.0/104",
            "100.128.0.0/10",
        ];
        for input in allowed {
            assert!(
                parse_allow_address(input).is_ok(),
                "{input} must be accepted"
            );
        }
    }

    #[test]
    fn dialable_table() {
        let allow: Vec<Cidr> = ["192.0.2.0/24", "10.0.0.0/8", "fd00::/8"]
            .iter()
            .map(|s| parse_allow_address(s).expect(s))
            .collect();
        let cases = [
            ("93.184.216.34", true),
            ("192.0.2.10", true),
            ("::ffff:192.0.2.10", true),
            ("10.1.2.3", true),
            ("fd00::5", true),
            ("192.168.1.1", false),
            ("198.51.100.1", false),
            ("127.0.0.1", false),
            ("169.254.169.254", false),
            ("100.100.100.100", false),
            ("::1", false),
            ("::ffff:127.0.0.1", false),
            ("fe80::1", false),
        ];
        for (addr, ok) in cases {
            assert_eq!(dialable(ip(addr), &allow), ok, "dialable({addr})");
        }
        // Even an allow list that somehow holds a never-allowed range cannot open it.
        let bad = [Cidr::v4(0, 0, 0, 0, 0), Cidr::v6([0; 8], 0)];
        for addr in [
            "127.0.0.1",
            "169.254.1.1",
            "100.64.0.1",
            "0.1.2.3",
            "224.0.0.1",
            "::1",
            "::",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "64:ff9b::169.254.169.254",
        ] {
            assert!(!dialable(ip(addr), &bad), "{addr} must never be dialable");
        }
        assert!(dialable(ip("192.0.2.10"), &bad));
    }

    #[test]
    fn errors_read_well() {
        let e = parse_allow_address("127.0.0.0/8").expect_err("refused");
        assert_eq!(
            e.to_string(),
            "127.0.0.0/8 overlaps 127.0.0.0/8, which is never allowed (loopback, link-local, the tailnet, 0/8, multicast)"
        );
        let e = parse_allow_address("192.0.2.10/24").expect_err("refused");
        assert!(e.to_string().contains("write 192.0.2.0/24"), "{e}");
    }
}
