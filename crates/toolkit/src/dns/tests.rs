use super::*;
use hickory_proto::rr::rdata::{A, AAAA, CNAME};
use hickory_proto::rr::Record;
use std::collections::HashMap;
use std::net::{Ipv4Addr, TcpListener};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// What the fake server does with one question.
#[derive(Clone)]
pub(crate) enum Behaviour {
    /// Answer with these records (name, data); the question's name must be in the zone.
    Records(Vec<(&'static str, RData)>),
    Rcode(ResponseCode),
    /// Over UDP: a truncated empty answer; over TCP: these records.
    Truncated(Vec<(&'static str, RData)>),
    /// Send a packet with the wrong ID, then the right answer.
    WrongIdFirst(Vec<(&'static str, RData)>),
    /// Send an answer to another question, then the right answer.
    WrongQuestionFirst(Vec<(&'static str, RData)>),
    /// Send garbage, then the right answer.
    GarbageFirst(Vec<(&'static str, RData)>),
    /// Send the right answer, but from another socket.
    FromElsewhere(Vec<(&'static str, RData)>),
    Silent,
}

/// A DNS server on 127.0.0.1 (UDP and TCP on one port) that answers from a table keyed by
/// (name, type), so no test asks anything beyond this machine.
pub(crate) struct FakeDns {
    pub(crate) addr: SocketAddr,
    pub(crate) queries: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl Drop for FakeDns {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

pub(crate) fn a(ip: &str) -> RData {
    RData::A(A(ip.parse().expect("test address")))
}
pub(crate) fn aaaa(ip: &str) -> RData {
    RData::AAAA(AAAA(ip.parse().expect("test address")))
}
pub(crate) fn cname(target: &str) -> RData {
    RData::CNAME(CNAME(Name::from_ascii(target).expect("test name")))
}

fn response(query: &Message, records: &[(&'static str, RData)], rcode: ResponseCode) -> Vec<u8> {
    let mut m = Message::response(query.metadata.id, OpCode::Query);
    m.metadata.response_code = rcode;
    m.metadata.recursion_available = true;
    m.add_queries(query.queries.iter().cloned());
    for (name, data) in records {
        let name = Name::from_ascii(name).expect("test name");
        m.add_answer(Record::from_rdata(name, 60, data.clone()));
    }
    m.to_vec().expect("encode")
}

impl FakeDns {
    pub(crate) fn start(table: Vec<((&'static str, RecordType), Behaviour)>) -> FakeDns {
        let table: HashMap<(String, RecordType), Behaviour> = table
            .into_iter()
            .map(|((n, t), b)| ((n.to_string(), t), b))
            .collect();
        let table = Arc::new(table);
        let (udp, tcp) = loop {
            let tcp = TcpListener::bind("127.0.0.1:0").expect("tcp bind");
            let port = tcp.local_addr().expect("addr").port();
            if let Ok(udp) = UdpSocket::bind(("127.0.0.1", port)) {
                break (udp, tcp);
            }
        };
        let addr = udp.local_addr().expect("addr");
        let stop = Arc::new(AtomicBool::new(false));
        let queries = Arc::new(AtomicUsize::new(0));
        udp.set_read_timeout(Some(Duration::from_millis(50)))
            .expect("timeout");
        tcp.set_nonblocking(true).expect("nonblocking");
        let lookup = {
            let table = table.clone();
            move |q: &Message| -> Behaviour {
                let Some(query) = q.queries.first() else {
                    return Behaviour::Silent;
                };
                let key = (query.name().to_lowercase().to_string(), query.query_type());
                table
                    .get(&key)
                    .cloned()
                    .unwrap_or(Behaviour::Rcode(ResponseCode::NXDomain))
            }
        };
        {
            let (stop, queries, lookup) = (stop.clone(), queries.clone(), lookup.clone());
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while !stop.load(Ordering::SeqCst) {
                    let Ok((n, from)) = udp.recv_from(&mut buf) else {
                        continue;
                    };
                    let Ok(q) = Message::from_vec(&buf[..n]) else {
                        continue;
                    };
                    queries.fetch_add(1, Ordering::SeqCst);
                    let send = |p: &[u8]| {
                        let _ = udp.send_to(p, from);
                    };
                    match lookup(&q) {
                        Behaviour::Records(r) => send(&response(&q, &r, ResponseCode::NoError)),
                        Behaviour::Rcode(c) => send(&response(&q, &[], c)),
                        Behaviour::Truncated(_) => {
                            let mut m =
                                Message::from_vec(&response(&q, &[], ResponseCode::NoError))
                                    .expect("own answer");
                            m.metadata.truncation = true;
                            send(&m.to_vec().expect("encode"));
                        }
                        Behaviour::WrongIdFirst(r) => {
                            let mut wrong = q.clone();
                            wrong.metadata.id = q.metadata.id.wrapping_add(1);
                            send(&response(
                                &wrong,
                                &[("evil.example.", a("6.6.6.6"))],
                                ResponseCode::NoError,
                            ));
                            send(&response(&q, &r, ResponseCode::NoError));
                        }
                        Behaviour::WrongQuestionFirst(r) => {
                            let mut other = q.clone();
                            other.queries = vec![Query::query(
                                Name::from_ascii("evil.example.").expect("name"),
                                RecordType::A,
                            )];
                            send(&response(
                                &other,
                                &[("evil.example.", a("6.6.6.6"))],
                                ResponseCode::NoError,
                            ));
                            send(&response(&q, &r, ResponseCode::NoError));
                        }
                        Behaviour::GarbageFirst(r) => {
                            send(&[0xde, 0xad, 0xbe, 0xef]);
                            send(&response(&q, &r, ResponseCode::NoError));
                        }
                        Behaviour::FromElsewhere(r) => {
                            if let Ok(other) = UdpSocket::bind("127.0.0.1:0") {
                                let _ =
                                    other.send_to(&response(&q, &r, ResponseCode::NoError), from);
                            }
                        }
                        Behaviour::Silent => {}
                    }
                }
            });
        }
        {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let mut s = match tcp.accept() {
                        Ok((s, _)) => s,
                        Err(_) => {
                            std::thread::sleep(Duration::from_millis(10));
                            continue;
                        }
                    };
                    let _ = s.set_nonblocking(false);
                    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                    let mut len = [0u8; 2];
                    if s.read_exact(&mut len).is_err() {
                        continue;
                    }
                    let mut body = vec![0u8; usize::from(u16::from_be_bytes(len))];
                    if s.read_exact(&mut body).is_err() {
                        continue;
                    }
                    let Ok(q) = Message::from_vec(&body) else {
                        continue;
                    };
                    let records = match lookup(&q) {
                        Behaviour::Truncated(r) | Behaviour::Records(r) => r,
                        _ => continue,
                    };
                    let answer = response(&q, &records, ResponseCode::NoError);
                    let mut framed = (answer.len() as u16).to_be_bytes().to_vec();
                    framed.extend_from_slice(&answer);
                    let _ = s.write_all(&framed);
                }
            });
        }
        FakeDns {
            addr,
            queries,
            stop,
        }
    }
}

fn quick(servers: Vec<SocketAddr>) -> Resolver {
    Resolver::new(servers).with_timeouts(Duration::from_millis(300), Duration::from_secs(2))
}

fn ips(list: &[&str]) -> Vec<IpAddr> {
    list.iter()
        .map(|s| s.parse().expect("test address"))
        .collect()
}

use Behaviour::*;
use RecordType::{A as TA, AAAA as TAAAA};

/// Each row: the server's table, the name looked up, and the addresses expected or the
/// error expected (by its text).
#[test]
fn lookup_table() {
    let empty = || Records(vec![]);
    type Row = (
        Vec<((&'static str, RecordType), Behaviour)>,
        &'static str,
        Result<Vec<IpAddr>, &'static str>,
    );
    let rows: Vec<Row> = vec![
        (
            vec![
                (
                    ("www.example.", TA),
                    Records(vec![
                        ("www.example.", a("192.0.2.1")),
                        ("www.example.", a("192.0.2.2")),
                    ]),
                ),
                (
                    ("www.example.", TAAAA),
                    Records(vec![("www.example.", aaaa("2001:db8::1"))]),
                ),
            ],
            "www.example",
            Ok(ips(&["192.0.2.1", "192.0.2.2", "2001:db8::1"])),
        ),
        // Case and a trailing dot do not matter.
        (
            vec![
                (
                    ("www.example.", TA),
                    Records(vec![("www.example.", a("192.0.2.1"))]),
                ),
                (("www.example.", TAAAA), empty()),
            ],
            "WWW.Example.",
            Ok(ips(&["192.0.2.1"])),
        ),
        // A whole chain in one answer.
        (
            vec![
                (
                    ("www.example.", TA),
                    Records(vec![
                        ("www.example.", cname("a.example.")),
                        ("a.example.", cname("b.example.")),
                        ("b.example.", a("192.0.2.7")),
                    ]),
                ),
                (("www.example.", TAAAA), empty()),
            ],
            "www.example",
            Ok(ips(&["192.0.2.7"])),
        ),
        // A chain that needs a second question.
        (
            vec![
                (
                    ("www.example.", TA),
                    Records(vec![("www.example.", cname("cdn.example."))]),
                ),
                (
                    ("www.example.", TAAAA),
                    Records(vec![("www.example.", cname("cdn.example."))]),
                ),
                (
                    ("cdn.example.", TA),
                    Records(vec![("cdn.example.", a("192.0.2.9"))]),
                ),
                (("cdn.example.", TAAAA), empty()),
            ],
            "www.example",
            Ok(ips(&["192.0.2.9"])),
        ),
        // Records for names outside the chain are not believed.
        (
            vec![
                (
                    ("www.example.", TA),
                    Records(vec![("other.example.", a("6.6.6.6"))]),
                ),
                (("www.example.", TAAAA), empty()),
            ],
            "www.example",
            Err("the name has no addresses"),
        ),
        // A loop of aliases ends.
        (
            vec![
                (
                    ("loop.example.", TA),
                    Records(vec![("loop.example.", cname("loop2.example."))]),
                ),
                (
                    ("loop2.example.", TA),
                    Records(vec![("loop2.example.", cname("loop.example."))]),
                ),
                (("loop.example.", TAAAA), empty()),
            ],
            "loop.example",
            Err("more than 8 CNAME links"),
        ),
        (vec![], "nowhere.example", Err("no such name")),
        // Addresses of one type win over the other type's NXDOMAIN.
        (
            vec![(
                ("v4only.example.", TA),
                Records(vec![("v4only.example.", a("192.0.2.11"))]),
            )],
            "v4only.example",
            Ok(ips(&["192.0.2.11"])),
        ),
        (
            vec![
                (("www.example.", TA), Rcode(ResponseCode::Refused)),
                (("www.example.", TAAAA), Rcode(ResponseCode::Refused)),
            ],
            "www.example",
            Err("the nameserver answered Query Refused"),
        ),
        // Truncated over UDP: asked again over TCP.
        (
            vec![
                (
                    ("big.example.", TA),
                    Truncated(vec![("big.example.", a("192.0.2.3"))]),
                ),
                (("big.example.", TAAAA), Truncated(vec![])),
            ],
            "big.example",
            Ok(ips(&["192.0.2.3"])),
        ),
        // Packets that do not fit the question are ignored, the right one is taken.
        (
            vec![
                (
                    ("www.example.", TA),
                    WrongIdFirst(vec![("www.example.", a("192.0.2.4"))]),
                ),
                (("www.example.", TAAAA), empty()),
            ],
            "www.example",
            Ok(ips(&["192.0.2.4"])),
        ),
        (
            vec![
                (
                    ("www.example.", TA),
                    WrongQuestionFirst(vec![("www.example.", a("192.0.2.5"))]),
                ),
                (("www.example.", TAAAA), empty()),
            ],
            "www.example",
            Ok(ips(&["192.0.2.5"])),
        ),
        (
            vec![
                (
                    ("www.example.", TA),
                    GarbageFirst(vec![("www.example.", a("192.0.2.6"))]),
                ),
                (("www.example.", TAAAA), empty()),
            ],
            "www.example",
            Ok(ips(&["192.0.2.6"])),
        ),
        // An answer from an address that was not asked is never believed.
        (
            vec![
                (
                    ("www.example.", TA),
                    FromElsewhere(vec![("www.example.", a("6.6.6.6"))]),
                ),
                (("www.example.", TAAAA), FromElsewhere(vec![])),
            ],
            "www.example",
            Err("no nameserver answered in time"),
        ),
        // One type failing does not lose the other.
        (
            vec![
                (
                    ("www.example.", TA),
                    Records(vec![("www.example.", a("192.0.2.8"))]),
                ),
                (("www.example.", TAAAA), Silent),
            ],
            "www.example",
            Ok(ips(&["192.0.2.8"])),
        ),
        (
            vec![
                (("www.example.", TA), Silent),
                (("www.example.", TAAAA), Silent),
            ],
            "www.example",
            Err("no nameserver answered in time"),
        ),
    ];
    for (table, host, want) in rows {
        let dns = FakeDns::start(table);
        let started = Instant::now();
        let got = quick(vec![dns.addr]).lookup(host);
        // Bounded: the whole lookup never outlives its total timeout by much.
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{host}: too slow"
        );
        match (got, want) {
            (Ok(got), Ok(want)) => assert_eq!(got, want, "{host}"),
            (Err(e), Err(want)) => assert_eq!(e.to_string(), want, "{host}"),
            (got, want) => panic!("{host}: got {got:?}, want {want:?}"),
        }
    }
}

#[test]
fn a_failing_server_passes_the_question_on() {
    let broken = FakeDns::start(vec![
        (("www.example.", TA), Rcode(ResponseCode::ServFail)),
        (("www.example.", TAAAA), Rcode(ResponseCode::ServFail)),
    ]);
    let good = FakeDns::start(vec![
        (
            ("www.example.", TA),
            Records(vec![("www.example.", a("192.0.2.1"))]),
        ),
        (("www.example.", TAAAA), Records(vec![])),
    ]);
    let got = quick(vec![broken.addr, good.addr]).lookup("www.example");
    assert_eq!(got.expect("answer"), ips(&["192.0.2.1"]));
    assert!(broken.queries.load(Ordering::SeqCst) >= 2);
}

#[test]
fn bad_names_are_refused_without_asking() {
    let dns = FakeDns::start(vec![]);
    for name in ["", "a..b", &"x".repeat(300)] {
        assert!(
            matches!(
                quick(vec![dns.addr]).lookup(name),
                Err(DnsError::BadName(_))
            ),
            "{name:?}"
        );
    }
    assert_eq!(dns.queries.load(Ordering::SeqCst), 0);
}

#[test]
fn resolv_conf_table() {
    let v4 = |s: &str| SocketAddr::new(IpAddr::V4(s.parse::<Ipv4Addr>().expect("addr")), 53);
    let cases: Vec<(&str, Vec<SocketAddr>)> = vec![
            ("nameserver 127.0.0.1\n", vec![v4("127.0.0.1")]),
            (
                "# comment\nsearch example.org\nnameserver 10.0.2.3\noptions ndots:5\nnameserver ::1\n",
                vec![v4("10.0.2.3"), "[::1]:53".parse().expect("addr")],
            ),
            ("nameserver\tfe80::1%eth0\nnameserver 192.0.2.1\n", vec![v4("192.0.2.1")]),
            ("nameserver not-an-address\n", vec![]),
            (
                "nameserver 192.0.2.1\nnameserver 192.0.2.2\nnameserver 192.0.2.3\nnameserver 192.0.2.4\n",
                vec![v4("192.0.2.1"), v4("192.0.2.2"), v4("192.0.2.3")],
            ),
            ("  nameserver 192.0.2.1 # trailing\n", vec![v4("192.0.2.1")]),
            ("", vec![]),
        ];
    for (text, want) in cases {
        assert_eq!(parse_resolv_conf(text), want, "{text:?}");
    }
}

#[test]
fn resolv_conf_from_a_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("resolv.conf");
    assert!(matches!(
        Resolver::from_resolv_conf(&path),
        Err(DnsError::ReadConf(_, _))
    ));
    std::fs::write(&path, "search example\n").expect("write");
    assert!(matches!(
        Resolver::from_resolv_conf(&path),
        Err(DnsError::NoServers(_))
    ));
    std::fs::write(&path, "nameserver 127.0.0.1\n").expect("write");
    let r = Resolver::from_resolv_conf(&path).expect("resolver");
    assert_eq!(
        r.servers(),
        &["127.0.0.1:53".parse::<SocketAddr>().expect("addr")]
    );
}
