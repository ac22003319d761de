//! Buffered JSON answers held to `BUFFERED_RESPONSE_MAX_BYTES`. Behind API Gateway one answer
//! carries at most 6 MB, and a larger one fails there as a bare 502 after the work is done: a
//! page of a hundred agents with long instructions, or of model configs with large
//! `configJson`, is refused here instead, saying to ask for fewer. File downloads have their
//! own check (`files`), which names the byte ranges that fit; streams are not buffered.

use axum::body::HttpBody;
use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::{AppError, AppState};

pub async fn refuse_oversized(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let response = next.run(req).await;
    let Some(limit) = state.config().buffered_response_max_bytes else {
        return response;
    };
    let json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    match response.body().size_hint().exact() {
        Some(size) if json && size > limit => AppError::PayloadTooLarge(format!(
            "this answer would be {size} bytes, more than the {limit} one answer may hold here; \
             ask for fewer items (a smaller page size)"
        ))
        .into_response(),
        _ => response,
    }
}
