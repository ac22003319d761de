//! Fetching documents by URL, refusing addresses inside the service's own network.

use std::net::{IpAddr, SocketAddr};

use bytes::Bytes;
use futures::StreamExt;

use crate::outbound::Reach;
use crate::rag::parse::FileType;
use crate::{AppError, AppResult, AppState};

const MAX_REDIRECTS: usize = 3;

pub struct Fetched {
    pub name: String,
    /// Whether `name` was made up from the content type: no file name came with the file.
    pub guessed: bool,
    pub bytes: Bytes,
}

/// Loopback, private, link-local, unique-local, site-local, CGNAT, benchmarking, multicast,
/// reserved and unspecified addresses: where a fetch on a client's behalf must not go.
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || (o[0] == 100 && (64..128).contains(&o[1]))
                || (o[0] == 198 && (o[1] & 0xfe) == 18)
                || (o[0] == 192 && o[1] == 0 && o[2] == 0)
                || o[0] == 0
                || o[0] >= 240
        }
        IpAddr::V6(v6) => {
            let seg = v6.segments();
            v6.is_loopback()
                || v6.is_unspecified()
                || (seg[0] & 0xfe00) == 0xfc00
                || (seg[0] & 0xffc0) == 0xfe80
                || (seg[0] & 0xffc0) == 0xfec0
                || v6.is_multicast()
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
    // One answer for a name that does not resolve and one that resolves inside: told apart,
    // they let whoever imports list the names of the service's own network.
    let refused = || {
        AppError::validation(format!(
            "url: {host} is unknown or resolves to an address imports may not reach (internal \
             networks, OUTBOUND_DENY_CIDRS, and OUTBOUND_USER_DENY_CIDRS unless \
             IMPORT_URL_ALLOW_HOSTS names the host)"
        ))
    };
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.trim_matches(['[', ']']), port))
        .await
        .map_err(|_| refused())?
        .collect();
    let first = *addrs.first().ok_or_else(refused)?;
    let allowed = state
        .config()
        .import_allow_hosts
        .iter()
        .any(|h| h.eq_ignore_ascii_case(&host));
    // The operator's lists bind imports too, the one outbound path that hands a whole answer
    // back (a dual-stack VPC's IPv6 range is global, so only a list names it); a host allowed
    // for imports passes the users' list, never the one every call obeys.
    // The users' list holds the operator's too.
    let deny = state.config().outbound.deny(match allowed {
        true => Reach::Operator,
        false => Reach::User,
    });
    let inside = |ip: IpAddr| (!allowed && is_internal(ip)) || deny.denies(ip);
    if addrs.iter().any(|a| inside(a.ip())) {
        return Err(refused());
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
        // No proxy: one would resolve the host again, after the check, wherever it pointed.
        let client = reqwest::Client::builder()
            .no_proxy()
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
        let (name, guessed) = file_name(&url, resp.headers());
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
            guessed,
            bytes: Bytes::from(body),
        });
    }
    Err(AppError::validation(format!(
        "url: more than {MAX_REDIRECTS} redirects"
    )))
}

/// The file's name, and whether it was guessed: the name the server gives it
/// (`Content-Disposition`), else the URL's last path segment, when either names a type the
/// service parses; else one made from the content type (`<host>.html`). A download link
/// (`/download?id=42`) is named by its header, and a page whose path has a dot (`/wiki/Node.js`)
/// by its content type. Failing all, the path's segment, whose type is then refused by name.
fn file_name(url: &reqwest::Url, headers: &reqwest::header::HeaderMap) -> (String, bool) {
    let from_path = url
        .path_segments()
        .and_then(|mut s| s.next_back().map(str::to_owned))
        .map(|s| decoded(&s))
        .filter(|s| s.contains('.'));
    let given = headers
        .get(reqwest::header::CONTENT_DISPOSITION)
        .and_then(|v| v.to_str().ok())
        .and_then(disposition_name);
    if let Some(name) = [&given, &from_path]
        .into_iter()
        .flatten()
        .find(|n| FileType::from_name(n).is_some())
    {
        return (name.clone(), false);
    }
    let content_type = headers
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let typed = [
        ("html", "html"),
        ("pdf", "pdf"),
        ("markdown", "md"),
        ("csv", "csv"),
        ("wordprocessingml", "docx"),
        ("spreadsheetml", "xlsx"),
        ("text/plain", "txt"),
    ]
    .into_iter()
    .find(|(part, _)| content_type.contains(part))
    .map(|(_, ext)| ext);
    let host = url.host_str().unwrap_or("document");
    match (typed, given.or(from_path)) {
        (Some(ext), _) => (format!("{host}.{ext}"), true),
        (None, Some(named)) => (named, false),
        (None, None) => (format!("{host}.txt"), true),
    }
}

fn decoded(s: &str) -> String {
    percent_encoding::percent_decode_str(s).decode_utf8_lossy().into_owned()
}

/// The file name of a `Content-Disposition` value: `filename*` (RFC 5987, UTF-8) before
/// `filename`.
fn disposition_name(value: &str) -> Option<String> {
    let mut plain = None;
    for part in value.split(';') {
        let Some((key, v)) = part.split_once('=') else {
            continue;
        };
        let v = v.trim().trim_matches('"');
        match key.trim().to_ascii_lowercase().as_str() {
            "filename*" => {
                if let Some((_, encoded)) = v.split_once("''") {
                    return Some(decoded(encoded)).filter(|n| !n.trim().is_empty());
                }
            }
            "filename" => plain = Some(v.to_owned()).filter(|n| !n.trim().is_empty()),
            _ => {}
        }
    }
    plain
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(url: &str, headers: &[(&str, &str)]) -> (String, bool) {
        let mut map = reqwest::header::HeaderMap::new();
        for (k, v) in headers {
            map.insert(
                reqwest::header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        file_name(&reqwest::Url::parse(url).unwrap(), &map)
    }

    #[test]
    fn a_fetched_file_is_named_by_its_header_its_path_or_its_type() {
        let docx = "application/vnd.openxmlformats-officedocument.wordprocessingml.document";
        let cases = [
            (
                "https://files.example.com/download?id=42",
                vec![
                    ("content-type", docx),
                    ("content-disposition", "attachment; filename=\"Policy.docx\""),
                ],
                ("Policy.docx", false),
            ),
            (
                "https://files.example.com/download?id=42",
                vec![(
                    "content-disposition",
                    "attachment; filename=\"x.bin\"; filename*=UTF-8''R%C3%A8gles.pdf",
                )],
                ("Règles.pdf", false),
            ),
            (
                "https://h.example/a/guide.md",
                vec![("content-type", "text/plain")],
                ("guide.md", false),
            ),
            (
                "https://en.wikipedia.org/wiki/Node.js",
                vec![("content-type", "text/html; charset=UTF-8")],
                ("en.wikipedia.org.html", true),
            ),
            (
                "https://files.example.com/download?id=42",
                vec![("content-type", docx)],
                ("files.example.com.docx", true),
            ),
            (
                "https://h.example/tool.exe",
                vec![("content-type", "application/octet-stream")],
                ("tool.exe", false),
            ),
            ("https://h.example/", vec![], ("h.example.txt", true)),
        ];
        for (url, headers, (name, guessed)) in cases {
            assert_eq!(named(url, &headers), (name.to_owned(), guessed), "{url} {headers:?}");
        }
    }

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
            "198.18.0.1",
            "198.19.255.254",
            "192.0.0.8",
            "224.0.0.1",
            "240.0.0.1",
            "fec0::1",
            "ff02::1",
        ] {
            assert!(is_internal(ip.parse().unwrap()), "{ip}");
        }
        for ip in [
            "8.8.8.8",
            "1.1.1.1",
            "198.20.0.1",
            "192.0.2.1",
            "2606:4700::1111",
            "64:ff9b::808:808",
        ] {
            assert!(!is_internal(ip.parse().unwrap()), "{ip}");
        }
    }
}
