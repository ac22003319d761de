//! Fetching documents by URL, refusing addresses inside the service's own network.

use std::net::{IpAddr, SocketAddr};

use bytes::Bytes;
use futures::StreamExt;

use crate::outbound::Reach;
use crate::{AppError, AppResult, AppState};

const MAX_REDIRECTS: usize = 3;

pub struct Fetched {
    pub name: String,
    pub bytes: Bytes,
}

/// Loopback, private, link-local, unique-local, CGNAT and unspecified addresses: where a
/// fetch on a client's behalf must not go.
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || (o[0] == 100 && (64..128).contains(&o[1]))
                || o[0] == 0
        }
        IpAddr::V6(v6) => {
            let seg = v6.segments();
            v6.is_loopback()
                || v6.is_unspecified()
                || (seg[0] & 0xfe00) == 0xfc00
                || (seg[0] & 0xffc0) == 0xfe80
                || matches!(crate::outbound::embedded_v4(ip), IpAddr::V4(v4) if is_internal(IpAddr::V4(v4)))
        }
    }
}

/// Resolves the URL's host and checks every address; returns one to connect to.
async fn vet(state: &AppState, url: &reqwest::Url) -> AppResult<(String, SocketAddr)> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(AppError::validation("url must be http or https"));
    }
    let host = url
        .host_str()
        .ok_or_else(|| AppError::validation("url has no host"))?
        .to_owned();
    let port = url.port_or_known_default().unwrap_or(80);
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.trim_matches(['[', ']']), port))
        .await
        .map_err(|e| AppError::validation(format!("url: cannot resolve {host}: {e}")))?
        .collect();
    let first = *addrs
        .first()
        .ok_or_else(|| AppError::validation(format!("url: {host} has no address")))?;
    let allowed = state
        .config()
        .import_allow_hosts
        .iter()
        .any(|h| h.eq_ignore_ascii_case(&host));
    if !allowed && addrs.iter().any(|a| is_internal(a.ip())) {
        return Err(AppError::validation(format!(
            "url: {host} resolves to an internal address, which imports may not reach"
        )));
    }
    // The operator's lists bind imports too, the one outbound path that hands a whole answer
    // back (a dual-stack VPC's IPv6 range is global, so only a list names it); a host allowed
    // for imports passes the users' list, never the one every call obeys.
    // The users' list holds the operator's too.
    let deny = state.config().outbound.deny(match allowed {
        true => Reach::Operator,
        false => Reach::User,
    });
    if addrs.iter().any(|a| deny.denies(a.ip())) {
        return Err(AppError::validation(format!(
            "url: {host} resolves into a network the service may not call (OUTBOUND_DENY_CIDRS, \
             and OUTBOUND_USER_DENY_CIDRS unless IMPORT_URL_ALLOW_HOSTS names the host)"
        )));
    }
    Ok((host, first))
}

/// Downloads at most MAX_UPLOAD_BYTES within `URL_IMPORT_TIMEOUT_SECS`, following up to 3
/// redirects, each hop checked and pinned to the address that was checked. The limit is for the
/// whole download: one per hop let a slow server and its redirects pass API Gateway's 29 s.
pub async fn fetch(state: &AppState, raw: &str) -> AppResult<Fetched> {
    let limit = state.config().url_import_timeout;
    tokio::time::timeout(limit, download(state, raw))
        .await
        .unwrap_or_else(|_| {
            Err(AppError::validation(format!(
                "url: the download did not finish within {} s",
                limit.as_secs()
            )))
        })
}

async fn download(state: &AppState, raw: &str) -> AppResult<Fetched> {
    let mut url = reqwest::Url::parse(raw).map_err(|_| AppError::validation("url must be an absolute http(s) URL"))?;
    // The address is kept as the document's source and shown to whoever sees the document.
    crate::validate::without_credentials("url", &url, "import from an address without them")?;
    let limit = state.config().max_upload_bytes;
    for _ in 0..=MAX_REDIRECTS {
        let (host, addr) = vet(state, &url).await?;
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .resolve(&host, addr)
            .build()
            .map_err(|e| AppError::Internal(e.into()))?;
        let resp = client
            .get(url.clone())
            .send()
            .await
            .map_err(|e| AppError::validation(format!("url: fetching failed: {e}")))?;
        if resp.status().is_redirection() {
            let next = resp
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|l| l.to_str().ok())
                .and_then(|l| url.join(l).ok())
                .ok_or_else(|| AppError::validation("url: a redirect without a valid Location"))?;
            url = next;
            continue;
        }
        if !resp.status().is_success() {
            return Err(AppError::validation(format!(
                "url: the server answered HTTP {}",
                resp.status().as_u16()
            )));
        }
        if resp.content_length().is_some_and(|n| n > limit) {
            return Err(AppError::PayloadTooLarge(format!(
                "url: the document exceeds the limit of {limit} bytes"
            )));
        }
        let name = file_name(&url, resp.headers());
        let mut body = Vec::new();
        let mut stream = resp.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| AppError::validation(format!("url: download broke off: {e}")))?;
            if (body.len() + chunk.len()) as u64 > limit {
                return Err(AppError::PayloadTooLarge(format!(
                    "url: the document exceeds the limit of {limit} bytes"
                )));
            }
            body.extend_from_slice(&chunk);
        }
        return Ok(Fetched {
            name,
            bytes: Bytes::from(body),
        });
    }
    Err(AppError::validation(format!(
        "url: more than {MAX_REDIRECTS} redirects"
    )))
}

/// The last path segment, or a name from the content type (`page.html` for HTML).
fn file_name(url: &reqwest::Url, headers: &reqwest::header::HeaderMap) -> String {
    let from_path = url
        .path_segments()
        .and_then(|mut s| s.next_back().map(str::to_owned))
        .map(|s| {
            percent_encoding::percent_decode_str(&s)
                .decode_utf8_lossy()
                .into_owned()
        })
        .filter(|s| s.contains('.'));
    from_path.unwrap_or_else(|| {
        let ct = headers
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let ext = if ct.contains("html") {
            "html"
        } else if ct.contains("pdf") {
            "pdf"
        } else if ct.contains("markdown") {
            "md"
        } else if ct.contains("csv") {
            "csv"
        } else {
            "txt"
        };
        format!("{}.{ext}", url.host_str().unwrap_or("document"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_addresses() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "64:ff9b::a00:5",
            "64:ff9b::a9fe:a9fe",
        ] {
            assert!(is_internal(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["8.8.8.8", "1.1.1.1", "2606:4700::1111", "64:ff9b::808:808"] {
            assert!(!is_internal(ip.parse().unwrap()), "{ip}");
        }
    }
}
