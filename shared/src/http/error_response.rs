//! Every failure as the envelope `{code, msg, data: null}` with its HTTP status.

use std::sync::Arc;

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::error::ErrorInfo;
use crate::AppError;

/// A failure of the service carried to the request's tracing layer, which logs its cause
/// once, with the status and the latency (`http::middleware`).
#[derive(Clone)]
pub struct FailureCause(pub Arc<AppError>);

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let info = ErrorInfo {
            code: self.code(),
            message: self.public_message(),
        };
        let body = json!({ "code": info.code, "msg": info.message, "data": null });
        let mut response = (self.status(), axum::Json(body)).into_response();
        if let AppError::RateLimited { retry_after_secs, .. } = &self {
            if let Ok(v) = HeaderValue::from_str(&retry_after_secs.to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        response.extensions_mut().insert(info);
        if self.is_server_side() {
            response.extensions_mut().insert(FailureCause(Arc::new(self)));
        }
        response
    }
}
