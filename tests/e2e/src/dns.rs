//! The test zone's nameserver: A records for the suite's own names, nothing else.
//!
//! A name of the zone with no address of the asked type gets an empty answer (AAAA, say); any
//! other name gets REFUSED, so a lookup that strays out of the zone fails at once and is never
//! passed on.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, UdpSocket};
use std::path::PathBuf;

use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{RData, Record, RecordType};

/// A name whose address changes between lookups, as a rebinding attack's does: its A queries
/// are answered in turn with the HTTPS host's address and loopback, first the host's.
pub const REBIND_NAME: &str = "rebind.ok.test";
/// What [`REBIND_NAME`]'s lookups answer, in turn.
pub const REBIND_ANSWERS: [Ipv4Addr; 2] = [Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::LOCALHOST];

/// Serves `zone` (lower-case names without a trailing dot) and [`REBIND_NAME`] on `socket`
/// until the process ends;
/// with `log`, appends each query's name (lower case, one a line) there first, so that a
/// scenario can show which names were asked for.
pub fn serve(socket: UdpSocket, zone: BTreeMap<String, Ipv4Addr>, log: Option<PathBuf>) {
    let mut buf = [0u8; 4096];
    let mut rebind_lookups = 0usize;
    loop {
        let Ok((n, from)) = socket.recv_from(&mut buf) else {
            continue;
        };
        let Ok(query) = Message::from_vec(&buf[..n]) else {
            continue;
        };
        if query.metadata.message_type != MessageType::Query {
            continue;
        }
        if let Some(log) = &log {
            let names: String = query
                .queries
                .iter()
                .map(|q| format!("{}\n", q.name().to_lowercase()))
                .collect();
            let appended = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .and_then(|mut f| std::io::Write::write_all(&mut f, names.as_bytes()));
            if let Err(e) = appended {
                eprintln!("dns: {}: {e}", log.display());
            }
        }
        let mut zone_now = zone.clone();
        if let [q] = query.queries.as_slice() {
            let name = q.name().to_lowercase().to_string();
            if name.trim_end_matches('.') == REBIND_NAME {
                zone_now.insert(
                    REBIND_NAME.to_string(),
                    REBIND_ANSWERS[rebind_lookups % REBIND_ANSWERS.len()],
                );
                if q.query_type() == RecordType::A {
                    rebind_lookups += 1;
                }
            }
        }
        if let Some(answer) = answer(&query, &zone_now) {
            let _ = socket.send_to(&answer, from);
        }
    }
}

fn answer(query: &Message, zone: &BTreeMap<String, Ipv4Addr>) -> Option<Vec<u8>> {
    let mut m = Message::response(query.metadata.id, OpCode::Query);
    m.metadata.recursion_desired = query.metadata.recursion_desired;
    m.metadata.authoritative = true;
    m.add_queries(query.queries.iter().cloned());
    m.metadata.response_code = ResponseCode::Refused;
    if let [q] = query.queries.as_slice() {
        let name = q.name().to_lowercase().to_string();
        let name = name.strip_suffix('.').unwrap_or(&name);
        if let Some(ip) = zone.get(name) {
            m.metadata.response_code = ResponseCode::NoError;
            if q.query_type() == RecordType::A {
                m.add_answer(Record::from_rdata(q.name().clone(), 60, RData::A(A(*ip))));
            }
        }
    }
    m.to_vec().ok()
}
