//! Streaming a stored file back: inline preview or attachment download, with Range support.

use axum::body::Body;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use crate::domain::{Disposition, StoredFile};
use crate::storage::{parse_range, ByteRange};
use crate::{AppError, AppResult, AppState};

const FILENAME_ENCODE: &AsciiSet = &NON_ALPHANUMERIC.remove(b'.').remove(b'-').remove(b'_');

/// `attachment; filename="ascii"; filename*=UTF-8''percent-encoded`: safe for any name.
pub fn content_disposition(kind: Disposition, name: &str) -> String {
    let fallback: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() && c != '"' && c != '\\' || c == ' ' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let encoded = utf8_percent_encode(name, FILENAME_ENCODE);
    let kind = match kind {
        Disposition::Inline => "inline",
        Disposition::Attachment => "attachment",
    };
    format!("{kind}; filename=\"{fallback}\"; filename*=UTF-8''{encoded}")
}

/// What a request for a file asked: its method (a HEAD, answered without the bytes, is never
/// too large) and its headers (a `Range`).
pub struct FileRequest {
    method: Method,
    headers: HeaderMap,
}

impl<S: Send + Sync> FromRequestParts<S> for FileRequest {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Self {
            method: parts.method.clone(),
            headers: parts.headers.clone(),
        })
    }
}

/// The type a file is answered with. A preview of a type a browser runs (HTML, XML and SVG,
/// scripts) is plain text: the sandbox policy guards only a browser that opens the URL itself,
/// and a console fetching with its token shows the file from a blob of its own origin, where
/// an uploaded page's script would run as the person looking at it.
fn shown_type(kind: Disposition, mime: &str) -> String {
    let essence = mime.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    let active = matches!(
        essence.as_str(),
        "text/html" | "application/xhtml+xml" | "text/xml" | "application/xml"
    ) || essence.ends_with("+xml")
        || essence.contains("javascript")
        || essence.contains("ecmascript");
    match (kind, active) {
        (Disposition::Inline, true) => "text/plain; charset=utf-8".to_owned(),
        _ => mime.to_owned(),
    }
}

/// Streams `file` from storage, honouring a `Range` header with 206 / 416. An answer longer
/// than `BUFFERED_RESPONSE_MAX_BYTES` (one buffered answer behind API Gateway) is refused with
/// 413 before the file is read, naming the byte ranges that fit.
pub async fn file_response(
    state: &AppState,
    file: &StoredFile,
    request: &FileRequest,
    kind: Disposition,
) -> AppResult<Response> {
    let limit = state.config().buffered_response_max_bytes;
    let range = match request.headers.get(header::RANGE).and_then(|v| v.to_str().ok()) {
        None => None,
        Some(h) => match parse_range(h, file.size) {
            Ok(r) => r,
            Err(()) => {
                let mut resp = AppError::RangeNotSatisfiable { size: file.size }.into_response();
                insert(
                    resp.headers_mut(),
                    header::CONTENT_RANGE,
                    &format!("bytes */{}", file.size),
                );
                return Ok(resp);
            }
        },
    };
    let length = range.as_ref().map_or(file.size, ByteRange::len);
    if let Some(limit) = limit.filter(|l| length > *l && request.method != Method::HEAD) {
        return Err(AppError::PayloadTooLarge(format!(
            "this answer would be {length} bytes, more than the {limit} one answer may hold here; \
             download the file in byte ranges (Range: bytes=0-{})",
            limit - 1
        )));
    }
    let stream = state.storage().get(&file.key, range).await?;
    let mut resp = Response::new(Body::from_stream(stream));
    let headers = resp.headers_mut();
    insert(headers, header::CONTENT_TYPE, &shown_type(kind, &file.mime));
    // Someone's own file, fetched with their token: no shared cache may keep it for others.
    insert(headers, header::CACHE_CONTROL, "private, no-store");
    resp.extensions_mut().insert(StoredBytes);
    let headers = resp.headers_mut();
    insert(
        headers,
        header::CONTENT_DISPOSITION,
        &content_disposition(kind, &file.name),
    );
    insert(headers, header::ACCEPT_RANGES, "bytes");
    insert(headers, header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    // Uploaded HTML or SVG must not run scripts in the service's origin.
    insert(headers, header::CONTENT_SECURITY_POLICY, "sandbox");
    match range {
        Some(r) => {
            *resp.status_mut() = StatusCode::PARTIAL_CONTENT;
            let headers = resp.headers_mut();
            insert(
                headers,
                header::CONTENT_RANGE,
                &format!("bytes {}-{}/{}", r.start, r.end, file.size),
            );
            insert(headers, header::CONTENT_LENGTH, &r.len().to_string());
        }
        None => insert(resp.headers_mut(), header::CONTENT_LENGTH, &file.size.to_string()),
    }
    Ok(resp)
}

/// Marks a response whose body is a stored file's bytes, to go out as they are
/// (`http::lambda` keeps the Lambda adapter from decoding it as text).
#[derive(Clone, Copy, Debug)]
pub struct StoredBytes;

fn insert(headers: &mut HeaderMap, name: header::HeaderName, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        headers.insert(name, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disposition_is_header_safe() {
        let d = content_disposition(Disposition::Attachment, "报告 \"final\".pdf");
        assert!(d.starts_with("attachment; filename=\"__ _final_.pdf\""));
        assert!(d.contains("filename*=UTF-8''%E6%8A%A5%E5%91%8A%20%22final%22.pdf"));
        assert!(HeaderValue::from_str(&d).is_ok());
        assert!(HeaderValue::from_str(&content_disposition(Disposition::Inline, "a\r\nb")).is_ok());
    }

    #[test]
    fn a_preview_of_what_a_browser_runs_is_plain_text() {
        for active in [
            "text/html",
            "image/svg+xml",
            "text/xml",
            "application/xhtml+xml",
            "text/javascript",
        ] {
            assert_eq!(
                shown_type(Disposition::Inline, active),
                "text/plain; charset=utf-8",
                "{active}"
            );
            assert_eq!(shown_type(Disposition::Attachment, active), active, "{active}");
        }
        for passive in ["image/png", "application/pdf", "text/plain", "text/csv"] {
            assert_eq!(shown_type(Disposition::Inline, passive), passive, "{passive}");
        }
    }
}
