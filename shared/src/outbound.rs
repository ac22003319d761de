//! Where calls the service makes on a client's behalf (model endpoints, MCP servers, OAuth
//! token URLs) may not go. Every call: cloud metadata and link-local addresses by default, plus
//! whatever a deployment adds (`OUTBOUND_DENY_CIDRS`). Addresses an administrator configured may
//! reach private and loopback networks, because self-hosted model servers live there; addresses
//! a regular user configured may not (`OUTBOUND_USER_DENY_CIDRS`), or any user could make the
//! service call into its own network.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use ipnet::IpNet;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use crate::{AppError, AppResult};

/// Link-local (AWS, GCP and Azure metadata at 169.254.169.254), AWS's IPv6 metadata
/// address, Alibaba's metadata address, "this network", and the local-use NAT64 prefix
/// (RFC 8215), whose IPv4 hosts (the metadata address among them) sit at positions its
/// operator chooses, so no rule can tell them apart.
pub const DEFAULT_DENY: &str = "169.254.0.0/16,fe80::/10,fd00:ec2::254/128,100.100.100.200/32,0.0.0.0/8,64:ff9b:1::/48";

/// What endpoints regular users configure may not reach besides the list above: loopback,
/// private (RFC 1918, unique local IPv6), carrier-grade NAT, benchmarking, multicast, reserved
/// and unspecified addresses, and the local-use NAT64 prefix again, for a deployment whose own
/// `OUTBOUND_DENY_CIDRS` leaves it out.
pub const DEFAULT_USER_DENY: &str = "127.0.0.0/8,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,100.64.0.0/10,\
198.18.0.0/15,224.0.0.0/4,240.0.0.0/4,::1/128,::/128,fc00::/7,ff00::/8,64:ff9b:1::/48";

/// How long a save waits for a name's addresses; a name that does not answer by then is left
/// to the connection-time check, as one that does not resolve.
const SAVE_LOOKUP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Where client nodes may be registered by default: private networks, loopback and unique-local
/// IPv6. The service sends a node the app's token over plaintext gRPC (see `apps::node_client`),
/// which must not cross the internet.
pub const DEFAULT_NODE_NETWORKS: &str =
    "10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,100.64.0.0/10,127.0.0.0/8,::1/128,fc00::/7";

/// The networks client nodes may be registered in (`CLIENT_NODE_CIDRS`); `any` for every
/// address outbound calls may reach.
#[derive(Debug, Clone)]
pub struct NodeNetworks(Option<DenyList>);

impl NodeNetworks {
    /// Comma-separated CIDRs or addresses, or `any`. `none`, which lifts the deny lists,
    /// would here allow no node at all: refused, as is an empty list.
    pub fn parse(name: &str, spec: &str) -> Result<Self, String> {
        match spec.trim().to_ascii_lowercase().as_str() {
            "any" => Ok(Self(None)),
            "none" | "" => Err(format!("{name}: list the networks nodes may use, or `any`")),
            _ => match DenyList::parse(name, spec)? {
                nets if nets.nets.is_empty() => Err(format!("{name}: list the networks nodes may use, or `any`")),
                nets => Ok(Self(Some(nets))),
            },
        }
    }

    pub fn allow(&self, ip: IpAddr) -> bool {
        self.0.as_ref().is_none_or(|nets| nets.holds(ip))
    }
}

/// The IPv4 host an IPv6 address reaches, where it names one: IPv4-mapped, and the NAT64
/// well-known prefix (64:ff9b::/96, RFC 6052), which a DNS64 network hands out for IPv4-only
/// hosts (169.254.169.254 as 64:ff9b::a9fe:a9fe). Otherwise the address itself.
pub fn embedded_v4(ip: IpAddr) -> IpAddr {
    let IpAddr::V6(v6) = ip else {
        return ip;
    };
    if let Some(v4) = v6.to_ipv4_mapped() {
        return IpAddr::V4(v4);
    }
    match v6.octets() {
        [0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0, a, b, c, d] => IpAddr::V4([a, b, c, d].into()),
        _ => ip,
    }
}

/// Who configured an address the service calls, which decides the networks it may reach.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Reach {
    /// An administrator (or the deployment itself): every network but `OUTBOUND_DENY_CIDRS`.
    #[default]
    Operator,
    /// A regular user: not the service's own networks either.
    User,
}

impl Reach {
    /// The reach of something configured by a user who is, or is not, an administrator.
    pub fn of_admin(is_admin: bool) -> Self {
        if is_admin {
            Self::Operator
        } else {
            Self::User
        }
    }
}

/// One `T` for each reach: deny lists, and the HTTP clients built on them (each reach has its
/// own connection pools, so a connection opened under the operator's wider reach is never
/// reused for a user's address).
#[derive(Debug, Clone, Default)]
pub struct PerReach<T> {
    operator: T,
    user: T,
}

impl<T> PerReach<T> {
    pub fn new(mut make: impl FnMut(Reach) -> T) -> Self {
        Self {
            operator: make(Reach::Operator),
            user: make(Reach::User),
        }
    }

    pub fn get(&self, reach: Reach) -> &T {
        match reach {
            Reach::Operator => &self.operator,
            Reach::User => &self.user,
        }
    }
}

/// The deny lists of both reaches.
#[derive(Debug, Clone, Default)]
pub struct Outbound(PerReach<DenyList>);

impl Outbound {
    /// `user_extra` applies to users' addresses on top of `operator`, which applies to all.
    pub fn new(operator: DenyList, user_extra: &DenyList) -> Self {
        let user = DenyList {
            nets: Arc::new(operator.nets.iter().chain(user_extra.nets.iter()).copied().collect()),
            discreet: true,
        };
        Self(PerReach { operator, user })
    }

    pub fn deny(&self, reach: Reach) -> &DenyList {
        self.0.get(reach)
    }
}

/// The networks outbound calls may not reach.
#[derive(Debug, Clone, Default)]
pub struct DenyList {
    nets: Arc<Vec<IpNet>>,
    /// The users' list: what it answers never tells an internal name from one that does not
    /// exist. Otherwise any user could list the names of the service's own network by saving
    /// endpoints and reading which refusal came back.
    discreet: bool,
}

impl DenyList {
    /// Comma-separated CIDRs or bare addresses; `none` allows everything. `name` is the
    /// setting's, for the error.
    pub fn parse(name: &str, spec: &str) -> Result<Self, String> {
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
                    .map_err(|_| format!("{name}: {s:?} is not a CIDR or an IP address"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            nets: Arc::new(nets),
            discreet: false,
        })
    }

    pub fn denies(&self, ip: IpAddr) -> bool {
        self.holds(ip)
    }

    /// Whether one of the list's networks holds `ip`, or the IPv4 host it embeds.
    fn holds(&self, ip: IpAddr) -> bool {
        self.nets
            .iter()
            .any(|net| net.contains(&ip) || net.contains(&embedded_v4(ip)))
    }

    /// Checks a URL field when it is saved: an address literal, or on the operator's list every
    /// address a name resolves to now (on the users' list only `localhost`). A name that does
    /// not resolve yet, and on the users' list every other name, is left to the connection-time
    /// check, which every client built by [`DenyList::guard`] makes on the addresses it
    /// connects to.
    pub async fn check_url(&self, field: &str, raw: &str) -> AppResult<()> {
        let url = reqwest::Url::parse(raw)
            .map_err(|_| AppError::validation(format!("{field} must be an http:// or https:// URL")))?;
        let port = url.port_or_known_default().unwrap_or(80);
        let host = url
            .host_str()
            .ok_or_else(|| AppError::validation(format!("{field} must name a host")))?;
        let bare = host.trim_matches(['[', ']']);
        // A name's addresses are not told: quoted, the refusal showed whoever saved a URL the
        // private address behind any internal name they tried.
        let (addrs, named) = match bare.parse::<IpAddr>() {
            Ok(ip) => (vec![ip], format!("{ip} is in")),
            // Bounded: a name server that drops queries held every save (and every MCP session
            // opening, which checks its endpoint again) for as long as the resolver retried.
            Err(_) if !self.discreet => (
                tokio::time::timeout(SAVE_LOOKUP_TIMEOUT, tokio::net::lookup_host((bare, port)))
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .map(|a| a.map(|s| s.ip()).collect())
                    .unwrap_or_default(),
                format!("{host} resolves into"),
            ),
            // Loopback by definition (RFC 6761), so refusing it tells nobody anything.
            Err(_) if is_localhost(bare) => (
                vec![Ipv4Addr::LOCALHOST.into(), Ipv6Addr::LOCALHOST.into()],
                format!("{host} is in"),
            ),
            Err(_) => return Ok(()),
        };
        match addrs.into_iter().any(|ip| self.denies(ip)) {
            true => Err(AppError::validation(format!(
                "{field}: {named} a network the service may not call for you (OUTBOUND_DENY_CIDRS, \
                 and OUTBOUND_USER_DENY_CIDRS for addresses regular users set)"
            ))),
            false => Ok(()),
        }
    }

    /// A client builder whose name resolution drops denied addresses and whose redirects
    /// may not lead to a denied address literal, so a saved host that later resolves to a
    /// denied address, or redirects there, is still refused. The addresses a client connects
    /// to are the ones checked: a name is resolved once per connection, never again after.
    pub fn guard(&self, builder: reqwest::ClientBuilder) -> reqwest::ClientBuilder {
        self.guarded(builder, false)
    }

    /// `guard`, for requests that carry credentials in headers of their own (an MCP server's
    /// API key) or in their body (an OAuth client secret): redirects stay on the first
    /// request's origin. reqwest drops only `Authorization` and cookies on a redirect to
    /// another host; everything else would follow to wherever the server points.
    pub fn guard_credentialed(&self, builder: reqwest::ClientBuilder) -> reqwest::ClientBuilder {
        self.guarded(builder, true)
    }

    fn guarded(&self, builder: reqwest::ClientBuilder, same_origin: bool) -> reqwest::ClientBuilder {
        let deny = self.clone();
        let redirects = reqwest::redirect::Policy::custom(move |attempt| {
            match deny.redirect_refusal(attempt.url(), attempt.previous(), same_origin) {
                Some(why) => attempt.error(why),
                None => attempt.follow(),
            }
        });
        // No proxy (HTTP_PROXY and the like): the proxy would resolve the host itself, past
        // the resolver that checks its addresses.
        builder
            .no_proxy()
            .dns_resolver(Arc::new(self.clone()))
            .redirect(redirects)
    }

    /// `guard_credentialed` for the HTTP client of the MCP Streamable HTTP transport, which is
    /// built on the next major version of reqwest.
    pub fn guard_mcp(&self, builder: reqwest13::ClientBuilder) -> reqwest13::ClientBuilder {
        let deny = self.clone();
        let redirects = reqwest13::redirect::Policy::custom(move |attempt| {
            match deny.redirect_refusal(attempt.url(), attempt.previous(), true) {
                Some(why) => attempt.error(why),
                None => attempt.follow(),
            }
        });
        builder
            .no_proxy()
            .dns_resolver(Arc::new(self.clone()))
            .redirect(redirects)
    }

    /// The URL's host when it is an address literal this list denies. Clients connect to
    /// literals without asking their resolver, so calls check them before they are sent.
    pub fn denied_literal(&self, url: &reqwest::Url) -> Option<IpAddr> {
        url.host_str()
            .and_then(|h| h.trim_matches(['[', ']']).parse::<IpAddr>().ok())
            .filter(|ip| self.denies(*ip))
    }

    fn redirect_refusal(
        &self,
        url: &reqwest::Url,
        previous: &[reqwest::Url],
        same_origin: bool,
    ) -> Option<&'static str> {
        if previous.len() >= 10 {
            Some("too many redirects")
        } else if self.denied_literal(url).is_some() {
            Some("redirect to a network the service may not call")
        } else if same_origin && previous.first().is_some_and(|first| first.origin() != url.origin()) {
            Some("redirect to another origin; the request carries credentials")
        } else {
            None
        }
    }

    /// The addresses of `host` the service may connect to; none is an error. On the users'
    /// list a name that does not resolve fails with the same words as one that resolves only
    /// into denied networks.
    async fn allowed_addrs(&self, host: &str) -> std::io::Result<Vec<SocketAddr>> {
        let found = match tokio::net::lookup_host((host, 0)).await {
            Ok(found) => found,
            Err(e) if !self.discreet => return Err(e),
            Err(_) => return Err(self.unreachable(host)),
        };
        let addrs: Vec<SocketAddr> = found.filter(|a| !self.denies(a.ip())).collect();
        if addrs.is_empty() {
            return Err(self.unreachable(host));
        }
        Ok(addrs)
    }

    fn unreachable(&self, host: &str) -> std::io::Error {
        std::io::Error::other(match self.discreet {
            true => format!("{host} is unknown or in a network the service may not call for you"),
            false => format!("{host} resolves only to networks the service may not call"),
        })
    }
}

/// `localhost` and the names under it, which resolve to loopback wherever they are asked.
fn is_localhost(host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    host == "localhost" || host.ends_with(".localhost")
}

impl Resolve for DenyList {
    fn resolve(&self, name: Name) -> Resolving {
        let deny = self.clone();
        Box::pin(async move {
            let addrs = deny.allowed_addrs(name.as_str()).await?;
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

impl reqwest13::dns::Resolve for DenyList {
    fn resolve(&self, name: reqwest13::dns::Name) -> reqwest13::dns::Resolving {
        let deny = self.clone();
        Box::pin(async move {
            let addrs = deny.allowed_addrs(name.as_str()).await?;
            Ok(Box::new(addrs.into_iter()) as reqwest13::dns::Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentialed_requests_follow_redirects_on_their_own_origin_only() {
        let deny = DenyList::parse("D", DEFAULT_DENY).unwrap();
        let url = |u: &str| reqwest::Url::parse(u).unwrap();
        let first = [url("https://mcp.example.com/mcp")];
        let same = url("https://mcp.example.com/v2/mcp");
        let other = url("https://elsewhere.example.net/mcp");
        assert_eq!(deny.redirect_refusal(&same, &first, true), None);
        assert!(deny
            .redirect_refusal(&other, &first, true)
            .is_some_and(|w| w.contains("another origin")));
        assert_eq!(
            deny.redirect_refusal(&other, &first, false),
            None,
            "other clients may follow"
        );
        let port = url("https://mcp.example.com:8443/mcp");
        assert!(deny.redirect_refusal(&port, &first, true).is_some());
    }

    #[test]
    fn default_list_blocks_metadata_and_allows_private_networks() {
        let deny = DenyList::parse("D", DEFAULT_DENY).unwrap();
        for ip in [
            "169.254.169.254",
            "fd00:ec2::254",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
            "fe80::1",
            "100.100.100.200",
            "64:ff9b:1::a9fe:a9fe",
        ] {
            assert!(deny.denies(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["127.0.0.1", "10.0.0.5", "192.168.1.2", "::1", "93.184.216.34"] {
            assert!(!deny.denies(ip.parse().unwrap()), "{ip}");
        }
        assert!(!DenyList::parse("D", "none")
            .unwrap()
            .denies("169.254.169.254".parse().unwrap()));
        assert!(DenyList::parse("D", "10.0.0.0/8, 127.0.0.1")
            .unwrap()
            .denies("127.0.0.1".parse().unwrap()));
        assert!(DenyList::parse("D", "nonsense").is_err());
    }

    #[test]
    fn users_addresses_may_not_reach_the_services_own_networks() {
        let outbound = Outbound::new(
            DenyList::parse("D", DEFAULT_DENY).unwrap(),
            &DenyList::parse("U", DEFAULT_USER_DENY).unwrap(),
        );
        for ip in [
            "127.0.0.1",
            "10.0.0.5",
            "172.20.1.1",
            "192.168.1.2",
            "100.64.0.1",
            "::1",
            "fd12::1",
            "::ffff:127.0.0.1",
            "64:ff9b::10.0.0.5",
            "64:ff9b:1::a9fe:a9fe",
        ] {
            let ip = ip.parse().unwrap();
            assert!(outbound.deny(Reach::User).denies(ip), "{ip}");
            assert!(
                !outbound.deny(Reach::Operator).denies(ip) || ip.to_string().starts_with("64:ff9b:1:"),
                "{ip}"
            );
        }
        // Metadata stays denied to both; public addresses open to both.
        assert!(outbound.deny(Reach::User).denies("169.254.169.254".parse().unwrap()));
        assert!(!outbound.deny(Reach::User).denies("93.184.216.34".parse().unwrap()));
    }

    #[tokio::test]
    async fn the_users_list_tells_no_internal_name_from_an_unknown_one() {
        let outbound = Outbound::new(
            DenyList::parse("D", DEFAULT_DENY).unwrap(),
            &DenyList::parse("U", DEFAULT_USER_DENY).unwrap(),
        );
        let user = outbound.deny(Reach::User);
        // When saved: names are not resolved (localhost needs no resolving), literals are.
        assert!(user.check_url("f", "http://no-such-host.invalid/v1").await.is_ok());
        assert!(user.check_url("f", "http://LocalHost./v1").await.is_err());
        assert!(user.check_url("f", "http://10.0.0.1/v1").await.is_err());
        // When called: the same words for a name inside and a name nowhere.
        let said = async |host: &str| {
            let err = user.allowed_addrs(host).await.unwrap_err().to_string();
            err.replace(host, "<host>")
        };
        let internal = said("localhost").await;
        assert_eq!(internal, said("no-such-host.invalid").await);
        assert!(internal.contains("may not call"), "{internal}");
        // The operator's list still says why.
        let operator = outbound.deny(Reach::Operator);
        assert!(operator.check_url("f", "http://no-such-host.invalid/v1").await.is_ok());
        assert!(operator.allowed_addrs("localhost").await.is_ok());
    }

    #[test]
    fn client_nodes_stay_on_the_networks_listed_or_anywhere_with_any() {
        let default = NodeNetworks::parse("N", DEFAULT_NODE_NETWORKS).unwrap();
        assert!(default.allow("10.1.2.3".parse().unwrap()));
        assert!(default.allow("fd00::7".parse().unwrap()));
        assert!(!default.allow("203.0.113.10".parse().unwrap()));
        assert!(NodeNetworks::parse("N", "any")
            .unwrap()
            .allow("203.0.113.10".parse().unwrap()));
        // `none` lifts the deny lists; here it would allow no node at all.
        for refused in ["none", " ", ",", " , ", "nonsense"] {
            assert!(NodeNetworks::parse("N", refused).is_err(), "{refused:?}");
        }
    }
}
