//! Where calls the service makes on a client's behalf (model endpoints, MCP servers, OAuth
//! token URLs) may not go: cloud metadata and link-local addresses by default, plus whatever
//! a deployment adds (`OUTBOUND_DENY_CIDRS`). Private and loopback networks stay reachable,
//! because self-hosted model servers live there.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use ipnet::IpNet;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use crate::{AppError, AppResult};

/// Link-local (AWS, GCP and Azure metadata at 169.254.169.254), AWS's IPv6 metadata
/// address, Alibaba's metadata address and "this network".
pub const DEFAULT_DENY: &str = "169.254.0.0/16,fe80::/10,fd00:ec2::254/128,100.100.100.200/32,0.0.0.0/8";

/// The networks outbound calls may not reach.
#[derive(Debug, Clone, Default)]
pub struct DenyList(Arc<Vec<IpNet>>);

impl DenyList {
    /// Comma-separated CIDRs or bare addresses; `none` allows everything.
    pub fn parse(spec: &str) -> Result<Self, String> {
        if spec.trim().eq_ignore_ascii_case("none") {
            return Ok(Self::default());
        }
        let nets = spec
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                s.parse::<IpNet>()
                    .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| format!("OUTBOUND_DENY_CIDRS: {s:?} is not a CIDR or an IP address"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self(Arc::new(nets)))
    }

    pub fn denies(&self, ip: IpAddr) -> bool {
        // An IPv4-mapped IPv6 address reaches the IPv4 host.
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        self.0.iter().any(|net| net.contains(&ip))
    }

    /// Checks a URL field when it is saved: an address literal, or every address its host
    /// resolves to now. A host that does not resolve yet is left to the connection-time check.
    pub async fn check_url(&self, field: &str, raw: &str) -> AppResult<()> {
        let url = reqwest::Url::parse(raw)
            .map_err(|_| AppError::validation(format!("{field} must be an http:// or https:// URL")))?;
        let refused = |ip: IpAddr| {
            AppError::validation(format!(
                "{field}: {ip} is in a network the service may not call (OUTBOUND_DENY_CIDRS)"
            ))
        };
        let port = url.port_or_known_default().unwrap_or(80);
        let host = url
            .host_str()
            .ok_or_else(|| AppError::validation(format!("{field} must name a host")))?;
        let addrs: Vec<IpAddr> = match host.trim_matches(['[', ']']).parse::<IpAddr>() {
            Ok(ip) => vec![ip],
            Err(_) => tokio::net::lookup_host((host, port))
                .await
                .map(|a| a.map(|s| s.ip()).collect())
                .unwrap_or_default(),
        };
        match addrs.into_iter().find(|ip| self.denies(*ip)) {
            Some(ip) => Err(refused(ip)),
            None => Ok(()),
        }
    }

    /// A client builder whose name resolution drops denied addresses and whose redirects
    /// may not lead to a denied address literal, so a saved host that later resolves to a
    /// metadata address, or redirects there, is still refused.
    pub fn guard(&self, builder: reqwest::ClientBuilder) -> reqwest::ClientBuilder {
        let deny = self.clone();
        let redirects = reqwest::redirect::Policy::custom(move |attempt| {
            let literal = attempt
                .url()
                .host_str()
                .and_then(|h| h.trim_matches(['[', ']']).parse::<IpAddr>().ok());
            if attempt.previous().len() >= 10 {
                attempt.error("too many redirects")
            } else if literal.is_some_and(|ip| deny.denies(ip)) {
                attempt.error("redirect to a network the service may not call")
            } else {
                attempt.follow()
            }
        });
        builder.dns_resolver(Arc::new(self.clone())).redirect(redirects)
    }
}

impl Resolve for DenyList {
    fn resolve(&self, name: Name) -> Resolving {
        let deny = self.clone();
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await?
                .filter(|a| !deny.denies(a.ip()))
                .collect();
            if addrs.is_empty() {
                return Err(format!("{host} resolves only to networks the service may not call").into());
            }
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_list_blocks_metadata_and_allows_private_networks() {
        let deny = DenyList::parse(DEFAULT_DENY).unwrap();
        for ip in [
            "169.254.169.254",
            "fd00:ec2::254",
            "::ffff:169.254.169.254",
            "fe80::1",
            "100.100.100.200",
        ] {
            assert!(deny.denies(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["127.0.0.1", "10.0.0.5", "192.168.1.2", "::1", "93.184.216.34"] {
            assert!(!deny.denies(ip.parse().unwrap()), "{ip}");
        }
        assert!(!DenyList::parse("none")
            .unwrap()
            .denies("169.254.169.254".parse().unwrap()));
        assert!(DenyList::parse("10.0.0.0/8, 127.0.0.1")
            .unwrap()
            .denies("127.0.0.1".parse().unwrap()));
        assert!(DenyList::parse("nonsense").is_err());
    }
}
