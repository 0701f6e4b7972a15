//! Which addresses the egress proxy may dial (docs/design.md#the-egress-proxy; `allow_addresses` in
//! docs/design.md#grantsname).
//!
//! An address is dialable iff it is public ([`is_public`]), or some `--allow-address` CIDR
//! opens it and it is not in a range that is never allowed ([`never_allowed`]): loopback,
//! link-local (cloud metadata), the tailnet, 0/8 and multicast.
//!
//! An IPv6 address that carries an IPv4 address is judged by that IPv4 address throughout,
//! since a dual-stack socket or a NAT64 gateway delivers it there: IPv4-mapped
//! (`::ffff:0:0/96`) and well-known NAT64 (`64:ff9b::/96`) addresses by their last 32 bits,
//! as the design's list of public addresses says. The local-use NAT64 prefix
//! `64:ff9b:1::/48` (RFC 8215) is judged too: an operator may carve a /48, /56, /64 or /96
//! translation prefix out of it, RFC 6052 section 2.2 puts the IPv4 address in a different
//! place for each, and nothing here can tell which one a gateway uses. So an address there is
//! public only if the IPv4 address at every one of those places is public, and never allowed
//! if any of them is never allowed; `64:ff9b:1::8.8.8.8` is not public, since a /48 gateway
//! reads it as 0.0.0.0.

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

/// IPv4 ranges that are not public (docs/design.md#the-egress-proxy, in its order).
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

/// IPv6 ranges that are not public whatever follows (docs/design.md#the-egress-proxy).
const NOT_PUBLIC_V6: [Cidr; 5] = [
    Cidr::v6([0, 0, 0, 0, 0, 0, 0, 0], 96),
    Cidr::v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7),
    Cidr::v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10),
    Cidr::v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8),
    Cidr::v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32),
];

/// An IPv6 prefix whose addresses carry an IPv4 address, and the RFC 6052 prefix lengths that
/// say where it may sit.
struct Embedding {
    prefix: Cidr,
    at: &'static [u8],
}

/// The IPv6 prefixes a packet leaves through to the IPv4 address it carries: IPv4-mapped
/// (a dual-stack socket), the well-known NAT64 prefix and the local-use one (module docs).
static EMBEDDINGS: [Embedding; 3] = [
    Embedding {
        prefix: Cidr::v6([0, 0, 0, 0, 0, 0xffff, 0, 0], 96),
        at: &[96],
    },
    Embedding {
        prefix: Cidr::v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96),
        at: &[96],
    },
    Embedding {
        prefix: Cidr::v6([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48),
        at: &[48, 56, 64, 96],
    },
];

/// The old IPv4-compatible form (`::a.b.c.d`): never public (it lies in `::/96`), and still no
/// way to a never-allowed range, for a host that routes it through a tunnel.
static COMPATIBLE: Embedding = Embedding {
    prefix: Cidr::v6([0, 0, 0, 0, 0, 0, 0, 0], 96),
    at: &[96],
};

impl Embedding {
    /// The IPv4 addresses `ip` carries: one for each place, none if `ip` is outside the prefix.
    fn carried(&self, ip: Ipv6Addr) -> impl Iterator<Item = Ipv4Addr> + '_ {
        let inside = self.prefix.contains(IpAddr::V6(ip));
        self.at
            .iter()
            .filter(move |_| inside)
            .map(move |&len| v4_at(u128::from(ip), len))
    }
}

/// Which bit of an IPv6 address (0 the most significant) holds bit `i` of the IPv4 address
/// behind an RFC 6052 prefix of `len` bits: the bits follow the prefix, stepping over bits
/// 64 to 71 (the "u" octet) when they get there.
fn v6_bit(len: u8, i: u8) -> u8 {
    let bit = len + i;
    if len <= 64 && bit >= 64 {
        bit + 8
    } else {
        bit
    }
}

/// The IPv4 address behind an RFC 6052 prefix of `len` bits.
fn v4_at(ip: u128, len: u8) -> Ipv4Addr {
    let v4 = (0..32).fold(0u32, |v4, i| {
        let bit = (ip >> (127 - v6_bit(len, i))) & 1;
        (v4 << 1) | bit as u32
    });
    Ipv4Addr::from(v4)
}

/// Ranges no `--allow-address` may reach (`allow_addresses` in docs/design.md#grantsname):
/// loopback, link-local (cloud metadata lives there), the tailnet, "this network" and multicast.
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

/// The IPv4 addresses an IPv4-mapped or NAT64 IPv6 address may be delivered to: one, or for
/// the local-use NAT64 prefix one for each place RFC 6052 allows; none for other addresses.
pub fn embedded_v4(ip: Ipv6Addr) -> impl Iterator<Item = Ipv4Addr> {
    EMBEDDINGS.iter().flat_map(move |e| e.carried(ip))
}

/// Whether `ip` is a public address, one the proxy may dial without an `--allow-address`
/// (docs/design.md#the-egress-proxy, every range listed there, and the local-use NAT64 prefix
/// judged as the module docs say).
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(_) => !NOT_PUBLIC_V4.iter().any(|c| c.contains(ip)),
        IpAddr::V6(v6) => {
            !NOT_PUBLIC_V6.iter().any(|c| c.contains(ip))
                && embedded_v4(v6).all(|v4| is_public(IpAddr::V4(v4)))
        }
    }
}

/// Whether `ip` is in a range no `--allow-address` can open, itself or through an IPv4
/// address it carries.
pub fn never_allowed(ip: IpAddr) -> bool {
    let direct = |ip: IpAddr| NEVER_ALLOWED.iter().any(|c| c.contains(ip));
    match ip {
        IpAddr::V4(_) => direct(ip),
        IpAddr::V6(v6) => {
            direct(ip)
                || embedded_v4(v6)
                    .chain(COMPATIBLE.carried(v6))
                    .any(|v4| direct(IpAddr::V4(v4)))
        }
    }
}

/// Parses one `--allow-address` value and refuses any network that overlaps a never-allowed
/// range, including through an IPv4 address its addresses carry (at any place).
pub fn parse_allow_address(s: &str) -> Result<Cidr, CidrError> {
    let cidr: Cidr = s.parse()?;
    if let Some(f) = NEVER_ALLOWED.iter().find(|f| f.overlaps(&cidr)) {
        return Err(CidrError::NeverAllowed(cidr, *f));
    }
    for e in EMBEDDINGS.iter().chain([&COMPATIBLE]) {
        // The networks nest or are apart; where they nest, the longer prefix is the overlap.
        if !e.prefix.overlaps(&cidr) {
            continue;
        }
        let inside = if cidr.prefix >= e.prefix.prefix {
            cidr
        } else {
            e.prefix
        };
        for &len in e.at {
            let reach = inside.reach(len);
            if let Some(f) = NEVER_ALLOWED.iter().find(|f| f.overlaps(&reach)) {
                return Err(CidrError::NeverAllowed(cidr, inside.carrying(e, len, f)));
            }
        }
    }
    Ok(cidr)
}

impl Cidr {
    /// The IPv4 addresses this IPv6 network's addresses carry behind an RFC 6052 prefix of
    /// `len` bits: those IPv4 bits that lie inside this prefix are fixed, the rest are free,
    /// and since they keep their order the result is an IPv4 network.
    fn reach(&self, len: u8) -> Cidr {
        let IpAddr::V6(net) = self.network else {
            return *self;
        };
        let fixed = (0..32u8)
            .take_while(|&i| v6_bit(len, i) < self.prefix)
            .count() as u8;
        Cidr {
            network: IpAddr::V4(v4_at(u128::from(net), len)),
            prefix: fixed,
        }
    }

    /// A network that shares an address with this one and whose every address carries an
    /// address of `f` behind an RFC 6052 prefix of `len` bits: what a refusal names.
    fn carrying(&self, e: &Embedding, len: u8, f: &Cidr) -> Cidr {
        let (IpAddr::V6(net), IpAddr::V4(v4)) = (self.network, f.network) else {
            return *f;
        };
        let (mut bits, v4) = (u128::from(net), u32::from(v4));
        for i in 0..f.prefix {
            let mask = 1u128 << (127 - v6_bit(len, i));
            if (v4 >> (31 - i)) & 1 == 1 {
                bits |= mask;
            } else {
                bits &= !mask;
            }
        }
        let prefix = match f.prefix {
            0 => e.prefix.prefix,
            n => e.prefix.prefix.max(v6_bit(len, n - 1) + 1),
        };
        Cidr {
            network: IpAddr::V6(Ipv6Addr::from(bits & mask128(prefix))),
            prefix,
        }
    }
}

/// Whether the proxy may dial `ip`: public, or opened by an `--allow-address` and not in a
/// never-allowed range. An address that carries IPv4 addresses is opened by a CIDR holding it,
/// or when every one of those IPv4 addresses that is not public is held by one.
pub fn dialable(ip: IpAddr, allow: &[Cidr]) -> bool {
    if is_public(ip) {
        return true;
    }
    if never_allowed(ip) {
        return false;
    }
    let opened = |ip: IpAddr| allow.iter().any(|c| c.contains(ip));
    if opened(ip) {
        return true;
    }
    let IpAddr::V6(v6) = ip else {
        return false;
    };
    let mut carried = embedded_v4(v6).map(IpAddr::V4).peekable();
    carried.peek().is_some() && carried.filter(|v4| !is_public(*v4)).all(opened)
}

#[cfg(test)]
mod tests;
