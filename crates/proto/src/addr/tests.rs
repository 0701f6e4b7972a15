use super::*;

fn ip(s: &str) -> IpAddr {
    s.parse().expect("test address")
}

/// Every range docs/design.md#the-egress-proxy lists: first and last address inside, and the
/// neighbours just outside (when those are not themselves in another range).
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
        // every spelling of the tailnet's 100.100.100.100 through NAT64
        ("64:ff9b::6464:6464", false),
        ("64:ff9b::100.100.100.100", false),
        ("64:ff9b:1::6464:6464", false),
        ("64:ff9b:1::100.100.100.100", false),
        ("64:ff9b:1:6464:64:6400::", false),
        ("64:ff9b:1:64:64:6464::", false),
        ("64:ff9b:1:0:64:6464:6400:0", false),
        // 127.0.0.1 and 10.0.0.1 behind a local-use /48, /56, /64 and /96
        ("64:ff9b:1:7f00:0:100::", false),
        ("64:ff9b:1:7f:0:1::", false),
        ("64:ff9b:1:0:7f:0:100:0", false),
        ("64:ff9b:1::7f00:1", false),
        ("64:ff9b:1:a00:0:100::", false),
        ("64:ff9b:1:a:0:1::", false),
        ("64:ff9b:1:0:a:0:100:0", false),
        ("64:ff9b:1::a00:1", false),
        // 64:ff9b:1::/48: public only if 8.8.8.8 is read at every place; a /96 spelling
        // alone reads 0.0.0.0 behind a /48 gateway
        ("64:ff9b:1:808:808:808:808:808", true),
        ("64:ff9b:1:808:8:808:808:808", true),
        ("64:ff9b:1::8.8.8.8", false),
        ("64:ff9b:1::", false),
        ("64:ff9b:1:ffff:ffff:ffff:ffff:ffff", false),
        ("64:ff9b:0:ffff:ffff:ffff:ffff:ffff", true),
        ("64:ff9b:2::808:808", true),
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

/// RFC 6052 section 2.4's own examples: 192.0.2.33 behind each prefix length.
#[test]
fn rfc6052_places() {
    let cases = [
        ("2001:db8:c000:221::", 32),
        ("2001:db8:1c0:2:21::", 40),
        ("2001:db8:122:c000:2:2100::", 48),
        ("2001:db8:122:3c0:0:221::", 56),
        ("2001:db8:122:344:c0:2:2100::", 64),
        ("2001:db8:122:344::192.0.2.33", 96),
    ];
    for (addr, len) in cases {
        let v6: Ipv6Addr = addr.parse().expect("test address");
        assert_eq!(
            v4_at(u128::from(v6), len),
            Ipv4Addr::new(192, 0, 2, 33),
            "{addr} /{len}"
        );
    }
}

/// In 64:ff9b:1::/48 the IPv4 address at each RFC 6052 place decides alone: in each row
/// the address at the place named is the one given, and 8.x.x.x (public) everywhere else.
#[test]
fn local_use_nat64_is_judged_at_every_place() {
    let allow = [parse_allow_address("10.0.0.0/8").expect("cidr")];
    // (address, the IPv4 address it carries at that place, public, never allowed,
    // dialable with 10.0.0.0/8 allowed)
    let cases = [
        (
            "64:ff9b:1:6464:808:808:808:808",
            "/48 100.100.8.8",
            false,
            true,
            false,
        ),
        (
            "64:ff9b:1:864:864:808:808:808",
            "/56 100.100.8.8",
            false,
            true,
            false,
        ),
        (
            "64:ff9b:1:808:864:6408:808:808",
            "/64 100.100.8.8",
            false,
            true,
            false,
        ),
        (
            "64:ff9b:1:808:808:808:6464:808",
            "/96 100.100.8.8",
            false,
            true,
            false,
        ),
        (
            "64:ff9b:1:7f08:808:808:808:808",
            "/48 127.8.8.8",
            false,
            true,
            false,
        ),
        (
            "64:ff9b:1:87f:808:808:808:808",
            "/56 127.8.8.8",
            false,
            true,
            false,
        ),
        (
            "64:ff9b:1:808:87f:808:808:808",
            "/64 127.8.8.8",
            false,
            true,
            false,
        ),
        (
            "64:ff9b:1:808:808:808:7f08:808",
            "/96 127.8.8.8",
            false,
            true,
            false,
        ),
        (
            "64:ff9b:1:a08:808:808:808:808",
            "/48 10.8.8.8",
            false,
            false,
            true,
        ),
        (
            "64:ff9b:1:80a:808:808:808:808",
            "/56 10.8.8.8",
            false,
            false,
            true,
        ),
        (
            "64:ff9b:1:808:80a:808:808:808",
            "/64 10.8.8.8",
            false,
            false,
            true,
        ),
        (
            "64:ff9b:1:808:808:808:a08:808",
            "/96 10.8.8.8",
            false,
            false,
            true,
        ),
        (
            "64:ff9b:1:808:808:808:808:808",
            "8.8.8.8 everywhere",
            true,
            false,
            true,
        ),
        (
            "64:ff9b:1:6464:64:6400::",
            "/48 100.100.100.100",
            false,
            true,
            false,
        ),
        (
            "64:ff9b:1:64:64:6464::",
            "/56 100.100.100.100",
            false,
            true,
            false,
        ),
        (
            "64:ff9b:1:0:64:6464:6400:0",
            "/64 100.100.100.100",
            false,
            true,
            false,
        ),
        (
            "64:ff9b:1::6464:6464",
            "/96 100.100.100.100",
            false,
            true,
            false,
        ),
        (
            "64:ff9b:1:7f00:0:100::",
            "/48 127.0.0.1",
            false,
            true,
            false,
        ),
        ("64:ff9b:1:7f:0:1::", "/56 127.0.0.1", false, true, false),
        (
            "64:ff9b:1:0:7f:0:100:0",
            "/64 127.0.0.1",
            false,
            true,
            false,
        ),
        // 10.0.0.1 with zeros around it: another place reads 0/8, never allowed
        ("64:ff9b:1:a00:0:100::", "/48 10.0.0.1", false, true, false),
        ("64:ff9b:1:a:0:1::", "/56 10.0.0.1", false, true, false),
        ("64:ff9b:1:0:a:0:100:0", "/64 10.0.0.1", false, true, false),
    ];
    for (addr, what, public, never, dial) in cases {
        let a = ip(addr);
        assert_eq!(is_public(a), public, "is_public({addr}) ({what})");
        assert_eq!(never_allowed(a), never, "never_allowed({addr}) ({what})");
        assert_eq!(dialable(a, &allow), dial, "dialable({addr}) ({what})");
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
        "64:ff9b::/32",
        "64:ff9b:1::/48",
        "64:ff9b:1::6464:6464",
        "64:ff9b:1::100.100.100.100",
        "64:ff9b:1:6464:64:6400::",
        "64:ff9b:1:7f08:808:808:808:808",
        "64:ff9b:1:808:87f:808:808:808",
        // every place but one fixed to a public address, the /96 one left open
        "64:ff9b:1:808:808:808::/96",
        // 10.0/16 behind a /48, but 0/8 behind a /56
        "64:ff9b:1:a00::/56",
        "::7f00:1",
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
        "64:ff9b:1:a08:808:808:808:808",
        "64:ff9b:1:808:808:808:a00:0/104",
        "64:ff9b:1:808:808:808:808:0/112",
        "64:ff9b:2::/48",
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
        ("64:ff9b::10.1.2.3", true),
        ("64:ff9b:1:808:808:808:a01:203", true),
        ("64:ff9b:1::a01:203", false),
        ("64:ff9b:1:808:808:808:c0a8:101", false),
        ("fd00::64:ff9b:1:0", true),
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
        "64:ff9b:1::6464:6464",
        "64:ff9b:1:7f00:0:100::",
        "64:ff9b:1:808:808:808:a9fe:a9fe",
        "::7f00:1",
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
    // Through a carried IPv4 address, the refusal names a network of such addresses.
    let cases = [
        (
            "::ffff:127.0.0.1",
            "::ffff:127.0.0.1/128 overlaps ::ffff:127.0.0.0/104",
        ),
        (
            "64:ff9b:1::/48",
            "64:ff9b:1::/48 overlaps 64:ff9b:1:7f00::/56",
        ),
        (
            "64:ff9b:1:808:808:808::/96",
            "64:ff9b:1:808:808:808::/96 overlaps 64:ff9b:1:808:808:808:7f00:0/104",
        ),
    ];
    for (input, start) in cases {
        let e = parse_allow_address(input).expect_err(input);
        assert!(e.to_string().starts_with(start), "{input}: {e}");
    }
    let e = parse_allow_address("192.0.2.10/24").expect_err("refused");
    assert!(e.to_string().contains("write 192.0.2.0/24"), "{e}");
}
