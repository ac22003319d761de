//! The caller's address, for login throttling. It comes from the platform, never from what the
//! client says: under Lambda the source IP API Gateway puts in the request context, locally the
//! socket peer. `X-Forwarded-For` is a header any client can send with any value; it is used only
//! when `TRUSTED_PROXY_HOPS` says that many proxies we run sit in front and append to it, and
//! then only the entry the outermost trusted proxy saw (the ones left of it are the client's own
//! words).

use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use lambda_http::request::RequestContext;

use crate::{AppError, AppState};

#[derive(Debug, Clone)]
pub struct ClientIp(pub String);

impl FromRequestParts<AppState> for ClientIp {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, AppError> {
        let forwarded = parts
            .headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
            .collect::<Vec<_>>();
        let peer = platform_address(parts).unwrap_or_else(|| "unknown".to_owned());
        Ok(ClientIp(client_address(
            &forwarded,
            peer,
            state.config().trusted_proxy_hops,
        )))
    }
}

/// The address that connected to us as the platform saw it.
fn platform_address(parts: &Parts) -> Option<String> {
    if let Some(context) = parts.extensions.get::<RequestContext>() {
        #[allow(unreachable_patterns)]
        return match context {
            RequestContext::ApiGatewayV1(c) => c.identity.source_ip.clone(),
            RequestContext::ApiGatewayV2(c) => c.http.source_ip.clone(),
            RequestContext::WebSocket(c) => c.identity.source_ip.clone(),
            _ => None,
        };
    }
    parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip().to_string())
}

/// With `hops` trusted proxies, the chain `forwarded…, peer` ends in `hops` addresses of ours;
/// the one before them is the client. A shorter chain means the request skipped a proxy, so the
/// leftmost entry is the best there is. An entry that is no address (some proxies add a port)
/// is the client's own words: the peer stands instead. Taken as it was, kilobytes of it went
/// into the login throttle's keys, past what their index holds.
fn client_address(forwarded: &[String], peer: String, hops: usize) -> String {
    if hops == 0 || forwarded.is_empty() {
        return peer;
    }
    let chain_len = forwarded.len() + 1;
    let index = chain_len.saturating_sub(hops + 1);
    forwarded
        .get(index)
        .and_then(|entry| {
            let ip = entry.parse::<IpAddr>();
            ip.or_else(|_| entry.parse::<SocketAddr>().map(|a| a.ip())).ok()
        })
        .map_or(peer, |ip| ip.to_string())
}

#[cfg(test)]
mod tests {
    use super::client_address;

    fn chain(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_header_counts_only_behind_trusted_proxies() {
        let peer = || "10.0.0.9".to_owned();
        assert_eq!(client_address(&chain(&["1.2.3.4"]), peer(), 0), "10.0.0.9");
        assert_eq!(client_address(&chain(&["6.6.6.6", "1.2.3.4"]), peer(), 1), "1.2.3.4");
        assert_eq!(
            client_address(&chain(&["6.6.6.6", "1.2.3.4", "10.0.0.2"]), peer(), 2),
            "1.2.3.4"
        );
        assert_eq!(client_address(&chain(&["1.2.3.4"]), peer(), 3), "1.2.3.4");
        assert_eq!(client_address(&[], peer(), 1), "10.0.0.9");
    }

    #[test]
    fn an_entry_that_is_no_address_leaves_the_peer() {
        let peer = || "10.0.0.9".to_owned();
        assert_eq!(client_address(&chain(&["1.2.3.4:5678"]), peer(), 1), "1.2.3.4");
        assert_eq!(client_address(&chain(&["[2001:db8::1]:443"]), peer(), 1), "2001:db8::1");
        assert_eq!(client_address(&chain(&["2001:db8::1"]), peer(), 1), "2001:db8::1");
        let junk = "x".repeat(8000);
        assert_eq!(client_address(&chain(&[&junk]), peer(), 3), "10.0.0.9");
        assert_eq!(client_address(&chain(&["unknown", "1.2.3.4"]), peer(), 3), "10.0.0.9");
    }
}
