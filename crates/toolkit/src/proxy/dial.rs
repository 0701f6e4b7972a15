//! Dialling for the egress proxy: the checks on the requested name and port, name resolution
//! through [`crate::dns`], the address rules of [`proto::addr`], and connecting
//! (docs/design.md#the-egress-proxy, steps 3 to 5).

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use proto::hosts;

use super::{Outcome, Policy, Reason, Reply, ALLOWED_PORT};
use crate::addr;
use crate::dns::{DnsError, Resolver};

/// Name resolution and connecting, behind a trait so that no test needs a network
/// (docs/design.md#the-egress-proxy).
pub trait Dial: Send + Sync {
    fn resolve(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>>;
    fn connect(&self, addr: SocketAddr, timeout: Duration) -> std::io::Result<TcpStream>;
}

/// The real world: the nameservers of resolv.conf and a TCP connection.
#[derive(Debug, Clone)]
pub struct SystemDial {
    resolver: Resolver,
}

impl SystemDial {
    pub fn new(resolver: Resolver) -> SystemDial {
        SystemDial { resolver }
    }

    /// Reads the nameservers from `path` (normally `/etc/resolv.conf`).
    pub fn from_resolv_conf(path: &Path) -> Result<SystemDial, DnsError> {
        Resolver::from_resolv_conf(path).map(SystemDial::new)
    }
}

impl Dial for SystemDial {
    fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
        let ips = self.resolver.lookup(host).map_err(io::Error::other)?;
        Ok(ips
            .into_iter()
            .map(|ip| SocketAddr::new(ip, port))
            .collect())
    }

    fn connect(&self, addr: SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
        let stream = TcpStream::connect_timeout(&addr, timeout)?;
        // The relay forwards whatever arrives at once; Nagle would only delay TLS handshakes.
        let _ = stream.set_nodelay(true);
        Ok(stream)
    }
}

/// Checks the requested name and port against `policy`, resolves the name once and connects to
/// the first address it may dial. On `Err`, `outcome.reply` holds the reply to send before
/// closing; on `Ok` it is cleared.
pub(super) fn open(
    name: &[u8],
    port: u16,
    policy: &Policy,
    dial: &dyn Dial,
    outcome: &mut Outcome,
) -> Result<TcpStream, Reason> {
    // Checks (step 3): all of them answer reply 2.
    outcome.reply = Some(Reply::NotAllowed);
    let name = std::str::from_utf8(name).map_err(|_| Reason::NameNotText)?;
    if !hosts::valid_host(name) {
        return Err(Reason::InvalidHost);
    }
    if !policy.allows_host(name) {
        return Err(Reason::HostNotAllowed);
    }
    if port != ALLOWED_PORT {
        return Err(Reason::Port(port));
    }
    let host = hosts::normalize(name);

    // Resolve once (step 4): the address checked is the address dialed.
    outcome.reply = Some(Reply::HostUnreachable);
    let resolved = dial
        .resolve(&host, port)
        .map_err(|e| Reason::ResolveFailed(e.to_string()))?;
    let Some(ip) = resolved
        .iter()
        .map(|a| a.ip())
        .find(|ip| addr::dialable(*ip, &policy.allow_addresses))
    else {
        return Err(Reason::NoDialableAddress(
            resolved.iter().map(|a| a.ip()).collect(),
        ));
    };
    // The port is the one checked above, whatever the resolver put beside the address.
    let target = SocketAddr::new(ip, port);

    // Connect (step 5).
    outcome.reply = Some(Reply::ConnectionRefused);
    let server = dial
        .connect(target, policy.connect_timeout)
        .map_err(|e| Reason::ConnectFailed(target, e.to_string()))?;
    outcome.reply = None;
    Ok(server)
}
