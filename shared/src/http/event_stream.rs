//! Streamed responses: the headers every stream carries.

use axum::body::Body;
use axum::http::header;
use axum::response::Response;

use crate::{AppError, AppResult};

/// A streamed response that proxies must not buffer.
pub fn response(content_type: &'static str, body: Body) -> AppResult<Response> {
    Response::builder()
        .header(header::CONTENT_TYPE, content_type)
        .header(header::CACHE_CONTROL, "no-cache")
        .header("x-accel-buffering", "no")
        .body(body)
        .map_err(|e| AppError::Internal(e.into()))
}
