//! Answers of the buffered Lambda functions held to what one Lambda answer carries. Behind
//! API Gateway a buffered function's whole answer, its body escaped into a JSON string, is at
//! most 6 MB: a larger one fails there as a bare 502 after the work is done, as a page of a
//! hundred agents with long instructions in a script of three bytes a character did. Such a
//! JSON answer is refused here with 413 in the module's envelope. The streaming functions and
//! the local server have no such limit, so the check is on only where `lambda::run_http`
//! marks the request; file downloads have their own, tighter one (`files`).

use axum::body::{Body, HttpBody};
use axum::extract::Request;
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::AppError;

/// Marks a request served by a buffered Lambda function.
#[derive(Debug, Clone, Copy)]
pub struct Buffered;

/// Lambda's limit on a synchronous answer, less room for the status and headers around the
/// body.
const MAX_ESCAPED_BODY: u64 = 6 * 1024 * 1024 - 16 * 1024;

pub async fn refuse_oversized(req: Request, next: Next) -> Response {
    // A HEAD's body is emptied by the router only outside this layer: seen here it is the
    // GET's, though what leaves is empty.
    if req.extensions().get::<Buffered>().is_none() || req.method() == axum::http::Method::HEAD {
        return next.run(req).await;
    }
    let response = next.run(req).await;
    let json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    let size = response.body().size_hint().exact();
    // Escaping at most doubles a body: a smaller one fits without being looked at.
    if !json || size.is_none_or(|s| s <= MAX_ESCAPED_BODY / 2) {
        return response;
    }
    let (parts, body) = response.into_parts();
    let bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(bytes) => bytes,
        Err(e) => return AppError::Internal(anyhow::anyhow!("reading an answer back: {e}")).into_response(),
    };
    // Inside the JSON string Lambda's answer holds, each quote and backslash takes two bytes.
    let escaped = bytes.len() as u64 + bytes.iter().filter(|b| matches!(b, b'"' | b'\\')).count() as u64;
    if escaped <= MAX_ESCAPED_BODY {
        return Response::from_parts(parts, Body::from(bytes));
    }
    AppError::PayloadTooLarge(format!(
        "this answer would take {escaped} bytes of the {MAX_ESCAPED_BODY} one answer may hold here \
         (of a paged list: ask for fewer items a page)"
    ))
    .into_response()
}
