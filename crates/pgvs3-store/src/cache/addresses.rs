//! Where an origin may be. An origin's endpoint is whatever `admin origin put`, the SQL function
//! `pgvs3.put_origin` or an OriginCache resource says; unchecked, a cache bucket would fetch and
//! keep as objects what this host serves on loopback (the gateway's own admin and console
//! listeners among it) or the cloud metadata service on link-local 169.254.169.254. So origins
//! at loopback, link-local, unspecified, multicast and broadcast addresses are refused unless
//! the gateway runs with `--origin-allow-local-addresses`. Private networks (10/8, 172.16/12,
//! 192.168/16, fc00::/7) are allowed: an origin inside the cluster is an ordinary setup.
//!
//! The addresses judged are the ones connected to: a host name is resolved by
//! [`GuardedResolver`] (which refuses it if any of its addresses is local, so a name cannot
//! answer one address to a check and another to the connection), and an endpoint written as an
//! address, which the HTTP client connects to without resolving, by [`OriginAddresses::check`].

use std::net::IpAddr;

use aws_smithy_runtime_api::client::dns::{DnsFuture, ResolveDns, ResolveDnsError};

/// Whether origins may be at local addresses (`--origin-allow-local-addresses`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OriginAddresses {
    pub allow_local: bool,
}

impl OriginAddresses {
    /// Refuses an endpoint whose host is written as a local address.
    pub fn check(&self, endpoint: &str) -> Result<(), LocalAddress> {
        let literal = endpoint
            .parse::<http::Uri>()
            .ok()
            .and_then(|uri| {
                uri.host()
                    .map(|host| host.trim_start_matches('[').trim_end_matches(']').to_owned())
            })
            .and_then(|host| host.parse::<IpAddr>().ok());
        match literal {
            Some(ip) if !self.allow_local && is_local(ip) => Err(LocalAddress(ip)),
            _ => Ok(()),
        }
    }

    /// The resolver an origin's client needs: `None` when every address is allowed.
    pub fn resolver(&self) -> Option<GuardedResolver> {
        (!self.allow_local).then_some(GuardedResolver)
    }
}

/// An origin at a local address, refused.
#[derive(Debug)]
pub struct LocalAddress(pub IpAddr);

impl std::fmt::Display for LocalAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the origin is at {}, a loopback, link-local or otherwise local address: origins may be there only when the gateway runs with --origin-allow-local-addresses",
            self.0
        )
    }
}

impl std::error::Error for LocalAddress {}

/// This host (loopback, unspecified), link-local (the cloud metadata service; IPv6 fe80::/10),
/// multicast and broadcast, and AWS's IPv6 metadata address fd00:ec2::254 (unique-local, which
/// is otherwise allowed). An IPv6 address that carries an IPv4 one (`::ffff:a.b.c.d`) is judged
/// as that address too.
fn is_local(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            v4.is_loopback() || v4.is_unspecified() || v4.is_link_local() || v4.is_multicast() || v4.is_broadcast()
        }
        IpAddr::V6(v6) => {
            const AWS_METADATA: std::net::Ipv6Addr = std::net::Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254);
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (v6.segments()[0] & 0xffc0) == 0xfe80
                || v6 == AWS_METADATA
                || v6.to_ipv4().is_some_and(|v4| is_local(IpAddr::V4(v4)))
        }
    }
}

/// Resolves an origin's host name, refusing it when any of its addresses is local.
#[derive(Debug, Clone)]
pub struct GuardedResolver;

impl ResolveDns for GuardedResolver {
    fn resolve_dns<'a>(&'a self, name: &'a str) -> DnsFuture<'a> {
        DnsFuture::new(async move {
            let addresses: Vec<IpAddr> = tokio::net::lookup_host((name, 0))
                .await
                .map_err(ResolveDnsError::new)?
                .map(|address| address.ip())
                .collect();
            match addresses.iter().find(|ip| is_local(**ip)) {
                Some(ip) => Err(ResolveDnsError::new(LocalAddress(*ip))),
                None => Ok(addresses),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_link_local_and_metadata_addresses_are_local_private_networks_are_not() {
        for local in [
            "127.0.0.1",
            "127.1.2.3",
            "0.0.0.0",
            "169.254.169.254",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "ff02::1",
            "fd00:ec2::254",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
        ] {
            assert!(is_local(local.parse().unwrap()), "{local}");
        }
        for remote in [
            "10.0.0.5",
            "172.16.0.1",
            "192.168.1.1",
            "8.8.8.8",
            "fd12::1",
            "2001:db8::1",
        ] {
            assert!(!is_local(remote.parse().unwrap()), "{remote}");
        }
    }

    #[test]
    fn an_endpoint_written_as_a_local_address_is_refused_unless_allowed() {
        let strict = OriginAddresses::default();
        assert!(strict.check("http://127.0.0.1:9000").is_err());
        assert!(strict.check("http://[::1]:9000/").is_err());
        assert!(strict.check("http://169.254.169.254/latest").is_err());
        assert!(strict.check("https://10.1.2.3:9000").is_ok());
        // A name is judged by the resolver, at connection time.
        assert!(strict.check("http://localhost:9000").is_ok());
        assert!(
            OriginAddresses { allow_local: true }
                .check("http://127.0.0.1:9000")
                .is_ok()
        );
    }

    #[tokio::test]
    async fn a_name_that_resolves_to_a_local_address_is_refused() {
        let refused = GuardedResolver.resolve_dns("localhost").await.unwrap_err();
        let why = std::error::Error::source(&refused).map(ToString::to_string);
        assert!(
            why.as_deref()
                .is_some_and(|why| why.contains("--origin-allow-local-addresses")),
            "{refused:?}"
        );
    }
}
