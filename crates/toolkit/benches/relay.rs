//! Relay throughput of the egress proxy (being written).
fn main() {}
