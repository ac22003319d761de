//! Cross-cutting layers: request ids on every log line, and the `{status, message, data}`
//! rendering of failures for the modules that use that envelope.

use std::pin::Pin;
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::{MatchedPath, State};
use axum::http::{HeaderName, Request};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde_json::json;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tracing::field::Empty;
use tracing::{Instrument, Span};

use super::error_response::FailureCause;
use crate::error::ErrorInfo;
use crate::{AppError, AppState};

pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Adds a request id (kept from the client when sent), a span carrying it around every log
/// line of the request, and echoes it in the response. The span is the request's server span
/// when traces are exported: named by the route template, continuing an incoming
/// `traceparent`, with the status and the caller (`user.id` or `app.id`, never a token).
pub fn with_request_tracing<S: Clone + Send + Sync + 'static>(router: Router<S>) -> Router<S> {
    router
        .layer(PropagateRequestIdLayer::new(REQUEST_ID))
        .layer(axum::middleware::from_fn(trace_request))
        .layer(SetRequestIdLayer::new(REQUEST_ID, MakeRequestUuid))
        .layer(axum::middleware::from_fn(drop_unusable_request_id))
}

/// A client's request id is kept only when it can be found again: 1 to 128 of `A-Z a-z 0-9 .
/// _ -` (a UUID, a trace id). Another is replaced by a new one: kilobytes of it went into every
/// log line of the request, an empty one merged unrelated requests, and one that is not text
/// was logged as "-" while it was echoed back, so the id a user reported matched no line.
async fn drop_unusable_request_id(mut req: Request<Body>, next: Next) -> Response {
    let usable = req
        .headers()
        .get(REQUEST_ID)
        .is_none_or(|id| usable_request_id(id.as_bytes()));
    if !usable {
        req.headers_mut().remove(REQUEST_ID);
    }
    next.run(req).await
}

fn usable_request_id(id: &[u8]) -> bool {
    (1..=128).contains(&id.len())
        && id
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Runs the handler in the request's span and keeps the span open until the response's body
/// has ended, so a streamed answer's trace covers the whole stream. The body is not polled
/// inside the span (tower-http's TraceLayer enters it at every chunk): a streamed answer has a
/// chunk per token, and each entry and exit of a span is bookkeeping for every layer.
async fn trace_request(req: Request<Body>, next: Next) -> Response {
    let span = request_span(&req);
    let started = Instant::now();
    let response = next.run(req).instrument(span.clone()).await;
    let status = response.status();
    span.record("http.response.status_code", i64::from(status.as_u16()));
    if status.is_server_error() {
        // One line per failed request: the cause, when the failure has one, with its status and
        // latency (an error's own line and a second one here made every 5xx count twice).
        let _entered = span.enter();
        let latency_ms = started.elapsed().as_millis() as u64;
        match response.extensions().get::<FailureCause>() {
            Some(FailureCause(cause)) => cause.log_answered(Some(latency_ms)),
            None => tracing::error!(status = status.as_u16(), latency_ms, "response failed"),
        }
    }
    response.map(|body| Body::new(SpanBody { body, _span: span }))
}

/// A response body that holds its request's span until it is dropped.
struct SpanBody {
    body: Body,
    _span: Span,
}

impl http_body::Body for SpanBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

fn request_span(req: &Request<Body>) -> Span {
    let id = req
        .headers()
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-");
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str);
    let span = tracing::info_span!(
        "request",
        otel.name = %format_args!("{} {route}", req.method()),
        otel.kind = "server",
        request_id = %id,
        method = %req.method(),
        path = %req.uri().path(),
        http.request.method = %req.method(),
        http.route = route,
        http.response.status_code = Empty,
        user.id = Empty,
        app.id = Empty,
        trace_id = Empty,
        gateway_request_id = Empty,
    );
    if let Some(id) = gateway_request_id(req) {
        span.record("gateway_request_id", tracing::field::display(id));
    }
    if id != "-" {
        crate::telemetry::keep_request_id(&span, id);
    }
    crate::telemetry::continue_trace(&span, req.headers());
    span
}

/// API Gateway's id of the request (its `x-amzn-RequestId` to the client, `$context.requestId`
/// in its logs): what a client holding a 504 or a 502 can be matched by.
fn gateway_request_id(req: &Request<Body>) -> Option<&str> {
    use lambda_http::request::RequestContext;
    match req.extensions().get::<RequestContext>()? {
        RequestContext::ApiGatewayV1(c) => c.request_id.as_deref(),
        RequestContext::ApiGatewayV2(c) => c.request_id.as_deref(),
        _ => None,
    }
}

/// Answers a request whose handler panicked with the 500 envelope. Without it the panic ends the
/// connection with no answer, and where panics abort, the whole process with every request on it.
pub fn catch_panics<S: Clone + Send + Sync + 'static>(router: Router<S>) -> Router<S> {
    router.layer(CatchPanicLayer::custom(panic_response))
}

fn panic_response(panic: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned());
    // Internal: the message is logged with the request's span, the client sees the generic one.
    AppError::Internal(anyhow::anyhow!("the handler panicked: {what}")).into_response()
}

/// Modules that answer in `{status, message, data}`; `path` is relative to the API prefix.
fn uses_status_envelope(path: &str) -> bool {
    ["/ai-model", "/skill"].iter().any(|m| {
        path.strip_prefix(m)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    })
}

/// Renders every failure of a request under a module with the `{status, message, data}`
/// envelope that way: its handlers' and also what the layers around every module answer (an
/// unknown path or method under it, a rate limit, a panic). Success bodies are the handlers'.
pub async fn module_envelope(State(state): State<AppState>, req: Request<Body>, next: Next) -> Response {
    let status_module = req
        .uri()
        .path()
        .strip_prefix('/')
        .and_then(|p| p.strip_prefix(state.config().api_prefix.as_str()))
        .is_some_and(uses_status_envelope);
    let response = next.run(req).await;
    match status_module {
        true => status_envelope(response),
        false => response,
    }
}

/// Re-renders an error response as `{status, message, data: null}`.
fn status_envelope(response: Response) -> Response {
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
    // The failure's cause goes on to the tracing layer, which logs it.
    rendered.extensions_mut().extend(parts.extensions);
    rendered
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use tower::ServiceExt;

    #[test]
    fn a_request_id_is_kept_when_it_can_be_found_again() {
        for usable in [
            "req-123",
            "4bf92f3577b34da6a3ce929d0e0e4736",
            "a.b_c-D",
            &"r".repeat(128),
        ] {
            assert!(usable_request_id(usable.as_bytes()), "{usable}");
        }
        for unusable in ["", "a b", "é", "a\u{1}", &"r".repeat(129)] {
            assert!(!usable_request_id(unusable.as_bytes()), "{unusable:?}");
        }
    }

    async fn call(app: &Router, path: &str) -> (u16, serde_json::Value) {
        let request = Request::builder().uri(path).body(Body::empty()).unwrap();
        let response = app.clone().oneshot(request).await.unwrap();
        let status = response.status().as_u16();
        let body = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
        (status, serde_json::from_slice(&body).unwrap_or_default())
    }

    #[tokio::test]
    async fn a_failed_request_is_logged_once_with_its_cause_status_and_latency() {
        let lines = crate::telemetry::CapturedLines::default();
        let _guard = lines.capture();
        let app = with_request_tracing(catch_panics(
            Router::new()
                .route(
                    "/internal",
                    get(|| async { AppError::Internal(anyhow::anyhow!("disk on fire")) }),
                )
                .route(
                    "/unavailable",
                    get(|| async {
                        AppError::Unavailable {
                            message: "the database cannot be reached".into(),
                            cause: anyhow::anyhow!("connection refused"),
                        }
                    }),
                )
                .route("/boom", get(|| async { panic!("index out of bounds") as &'static str }))
                .route("/bare", get(|| async { axum::http::StatusCode::BAD_GATEWAY })),
        ));
        let cases = [
            ("/internal", "500", "disk on fire"),
            ("/unavailable", "503", "connection refused"),
            ("/boom", "500", "index out of bounds"),
            ("/bare", "502", "response failed"),
        ];
        for (path, status, cause) in cases {
            lines.clear();
            call(&app, path).await;
            let logged = lines.text();
            // A panic also has a line of its own (`panicked`, once the hook is installed).
            let failed: Vec<&str> = logged
                .lines()
                .filter(|l| l.contains("request failed") || l.contains("response failed"))
                .collect();
            assert_eq!(failed.len(), 1, "{path}: one line per failed request:\n{logged}");
            let line = failed[0];
            assert!(line.contains(cause), "{path}: {line}");
            assert!(line.contains(&format!("status={status}")), "{path}: {line}");
            assert!(line.contains("latency_ms="), "{path}: {line}");
            assert!(line.contains("request_id="), "{path}: {line}");
        }
    }

    /// Under Lambda the request's line names API Gateway's id, which the client sees.
    #[tokio::test]
    async fn a_request_through_api_gateway_is_logged_with_its_gateway_id() {
        use lambda_http::aws_lambda_events::apigw::ApiGatewayProxyRequestContext;
        use lambda_http::request::RequestContext;
        let lines = crate::telemetry::CapturedLines::default();
        let _guard = lines.capture();
        let app = with_request_tracing(Router::new().route(
            "/internal",
            get(|| async { AppError::Internal(anyhow::anyhow!("disk on fire")) }),
        ));
        let mut context = ApiGatewayProxyRequestContext::default();
        context.request_id = Some("c6af9ac6-7b61-11e6-9a41-93e8deadbeef".into());
        let request = Request::builder()
            .uri("/internal")
            .extension(RequestContext::ApiGatewayV1(context))
            .body(Body::empty())
            .unwrap();
        app.oneshot(request).await.unwrap();
        let logged = lines.text();
        assert!(
            logged.contains("gateway_request_id=c6af9ac6-7b61-11e6-9a41-93e8deadbeef"),
            "{logged}"
        );
    }

    #[test]
    fn the_status_envelope_keeps_the_failure_for_the_log() {
        let response = AppError::Internal(anyhow::anyhow!("disk on fire")).into_response();
        let rendered = status_envelope(response);
        assert!(rendered.extensions().get::<FailureCause>().is_some());
        assert!(rendered.extensions().get::<ErrorInfo>().is_some());
    }

    #[tokio::test]
    async fn a_panicking_handler_answers_500_and_the_next_request_is_served() {
        let app = catch_panics(
            Router::new()
                .route(
                    "/boom",
                    get(|| async { panic!("slice out of a char boundary") as &'static str }),
                )
                .route(
                    "/owned",
                    get(|| async { std::panic::panic_any(format!("code {}", 7)) as &'static str }),
                )
                .route("/fine", get(|| async { "ok" })),
        );
        for path in ["/boom", "/owned"] {
            let (status, body) = call(&app, path).await;
            assert_eq!(status, 500, "{path}");
            assert_eq!(body["code"], 500, "{path}: {body}");
            assert_eq!(body["data"], serde_json::Value::Null);
            let msg = body["msg"].as_str().unwrap_or_default();
            assert!(msg.contains("internal server error"), "{msg}");
            assert!(!msg.contains("char boundary"), "the panic message stays in the log");
        }
        let request = Request::builder().uri("/fine").body(Body::empty()).unwrap();
        assert_eq!(app.clone().oneshot(request).await.unwrap().status(), 200);
    }
}
