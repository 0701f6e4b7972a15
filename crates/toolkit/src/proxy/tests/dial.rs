//! Dialling: the first dialable address, once; forbidden addresses in any spelling never
//! dialed, whatever `--allow-address` opens; the system resolver over a fake nameserver.

use super::*;

#[test]
fn dials_the_first_dialable_address_once() {
    let (target, _h) = server(|_s| {});
    let mut dial = FakeDial::with(&[(
        "example.com",
        &[
            "10.0.0.1",
            "127.0.0.1",
            "100.64.0.1",
            "93.184.216.34",
            "1.1.1.1",
        ],
    )]);
    dial.target = Some(target);
    let input = cat(&[&HELLO, &connect_req(b"example.com", 443)]);
    let (got, outcome) = exchange(&input, true, &policy(), &dial);
    assert_eq!(got, cat(&[&OK, &Reply::Succeeded.bytes()]));
    assert_eq!(outcome.reply, Some(Reply::Succeeded));
    assert_eq!(dial.resolves(), vec!["example.com".to_string()]);
    assert_eq!(
        dial.connects(),
        vec!["93.184.216.34:443".parse::<SocketAddr>().expect("addr")]
    );
}

/// Every NAT64 spelling of the tailnet and of loopback is passed over, the local-use
/// prefix 64:ff9b:1::/48 at each RFC 6052 place included, even with everything allowed.
#[test]
fn nat64_spellings_of_forbidden_addresses_are_never_dialed() {
    let (target, _h) = server(|_s| {});
    const NAT64: [&str; 10] = [
        "64:ff9b::6464:6464",
        "64:ff9b::100.100.100.100",
        "64:ff9b:1::6464:6464",
        "64:ff9b:1:6464:64:6400::",
        "64:ff9b:1:64:64:6464::",
        "64:ff9b:1:0:64:6464:6400:0",
        "64:ff9b:1::7f00:1",
        "64:ff9b:1:7f00:0:100::",
        "64:ff9b:1:808:87f:808:808:808",
        "64:ff9b:1::8.8.8.8",
    ];
    let nat64 = NAT64;
    let mut names = nat64.to_vec();
    names.push("64:ff9b:1:808:808:808:808:808");
    let mut dial = FakeDial::with(&[("example.com", names.as_slice())]);
    dial.target = Some(target);
    let (got, _) = exchange(
        &cat(&[&HELLO, &connect_req(b"example.com", 443)]),
        true,
        &policy(),
        &dial,
    );
    assert_eq!(got, cat(&[&OK, &Reply::Succeeded.bytes()]));
    assert_eq!(
        dial.connects(),
        vec!["[64:ff9b:1:808:808:808:808:808]:443"
            .parse::<SocketAddr>()
            .expect("addr")]
    );

    never_dialed_with_everything_allowed("example.com", NAT64.split_at(9).0);
}

/// With an allow list that covers everything (main refuses it; a Policy could still hold
/// it), none of `addrs`, which `host` resolves to, is dialed.
fn never_dialed_with_everything_allowed(host: &'static str, addrs: &'static [&'static str]) {
    let everything: Vec<Cidr> = ["0.0.0.0/0", "::/0"]
        .iter()
        .map(|s| s.parse().expect("cidr"))
        .collect();
    let p = Policy::new(vec![host.into()], everything).expect("policy");
    let dial = FakeDial::with(&[(host, addrs)]);
    let (got, outcome) = exchange(
        &cat(&[&HELLO, &connect_req(host.as_bytes(), 443)]),
        true,
        &p,
        &dial,
    );
    assert_eq!(got, cat(&[&OK, &Reply::HostUnreachable.bytes()]));
    assert!(matches!(outcome.reason, Reason::NoDialableAddress(_)));
    assert!(dial.connects().is_empty());
}

#[test]
fn allow_address_opens_a_range_but_never_the_forbidden_ones() {
    let (target, _h) = server(|_s| {});
    let cidr = |s: &str| addr::parse_allow_address(s).expect("cidr");
    let p = Policy::new(vec!["*.example.org".into()], vec![cidr("192.0.2.0/24")])
        .expect("policy")
        .with_handshake_timeout(Duration::from_millis(500));
    let mut dial = FakeDial::with(&[
        (
            "internal.example.org",
            &["127.0.0.1", "169.254.169.254", "100.64.0.1", "192.0.2.10"],
        ),
        ("outside.example.org", &["198.51.100.1"]),
    ]);
    dial.target = Some(target);
    let (got, _) = exchange(
        &cat(&[&HELLO, &connect_req(b"internal.example.org", 443)]),
        true,
        &p,
        &dial,
    );
    assert_eq!(got, cat(&[&OK, &Reply::Succeeded.bytes()]));
    assert_eq!(
        dial.connects(),
        vec!["192.0.2.10:443".parse::<SocketAddr>().expect("addr")]
    );
    let (got, _) = exchange(
        &cat(&[&HELLO, &connect_req(b"outside.example.org", 443)]),
        true,
        &p,
        &dial,
    );
    assert_eq!(got, cat(&[&OK, &Reply::HostUnreachable.bytes()]));

    // Even a list that covers everything never opens loopback, link-local or the tailnet.
    never_dialed_with_everything_allowed(
        "internal.example.org",
        &[
            "127.0.0.1",
            "169.254.169.254",
            "100.64.0.1",
            "::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "0.0.0.0",
            "224.0.0.1",
        ],
    );
}

#[test]
fn system_dial_over_a_fake_nameserver() {
    use crate::dns::tests::{a, FakeDns};
    use hickory_proto::rr::RecordType;
    let dns = FakeDns::start(vec![
        (
            ("www.example.org.", RecordType::A),
            crate::dns::tests::Behaviour::Records(vec![("www.example.org.", a("127.0.0.1"))]),
        ),
        (
            ("www.example.org.", RecordType::AAAA),
            crate::dns::tests::Behaviour::Records(vec![]),
        ),
    ]);
    let dial = SystemDial::new(Resolver::new(vec![dns.addr]));
    let got = dial.resolve("www.example.org", 443).expect("resolve");
    assert_eq!(
        got,
        vec!["127.0.0.1:443".parse::<SocketAddr>().expect("addr")]
    );
    assert!(dial.resolve("nowhere.example.org", 443).is_err());

    // The real path refuses a name that resolves to loopback, and never connects.
    let input = cat(&[&HELLO, &connect_req(b"www.example.org", 443)]);
    let (client, proxy_end) = UnixStream::pair().expect("pair");
    let p = policy();
    let handle = std::thread::spawn(move || serve(proxy_end, &p, &dial));
    let mut client = client;
    client.write_all(&input).expect("write");
    let got = read_to_close(&mut client);
    assert_eq!(got, cat(&[&OK, &Reply::HostUnreachable.bytes()]));
    let outcome = handle.join().expect("serve");
    assert_eq!(
        outcome.reason,
        Reason::NoDialableAddress(vec!["127.0.0.1".parse().expect("ip")])
    );

    // connect is a plain TCP connection with the timeout given.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let to = listener.local_addr().expect("addr");
    let dial = SystemDial::new(Resolver::new(vec![dns.addr]));
    let s = dial.connect(to, Duration::from_secs(2)).expect("connect");
    assert_eq!(s.peer_addr().expect("peer"), to);
}
