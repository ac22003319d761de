//! Cross-cutting layers: request ids on every log line, and the `{status, message, data}`
//! rendering of failures for the modules that use that envelope.

use axum::body::Body;
use axum::http::{HeaderName, Request};
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde_json::json;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;

use crate::error::ErrorInfo;

pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Adds a request id (kept from the client when sent), a span carrying it around every log
/// line of the request, and echoes it in the response.
pub fn with_request_tracing<S: Clone + Send + Sync + 'static>(router: Router<S>) -> Router<S> {
    router
        .layer(PropagateRequestIdLayer::new(REQUEST_ID))
        .layer(TraceLayer::new_for_http().make_span_with(|req: &Request<Body>| {
            let id = req
                .headers()
                .get(REQUEST_ID)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("-");
            tracing::info_span!("request", request_id = %id, method = %req.method(), path = %req.uri().path())
        }))
        .layer(SetRequestIdLayer::new(REQUEST_ID, MakeRequestUuid))
}

/// Modules that answer in `{status, message, data}` (they add `status_envelope` to their
/// routes); `path` is relative to the API prefix. Layers around every module use it to render
/// their own refusals in the module's envelope.
pub fn uses_status_envelope(path: &str) -> bool {
    ["/ai-model", "/skill"].iter().any(|m| {
        path.strip_prefix(m)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    })
}

/// Re-renders error responses as `{status, message, data: null}` (model and skill modules).
pub async fn status_envelope(response: Response) -> Response {
    let Some(info) = response.extensions().get::<ErrorInfo>().cloned() else {
        return response;
    };
    let (mut parts, _) = response.into_parts();
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    let body = axum::Json(json!({ "status": info.code, "message": info.message, "data": null }));
    let mut rendered = body.into_response();
    *rendered.status_mut() = parts.status;
    for (name, value) in parts.headers.iter() {
        if name != axum::http::header::CONTENT_TYPE {
            rendered.headers_mut().insert(name.clone(), value.clone());
        }
    }
    rendered
}
