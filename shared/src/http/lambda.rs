//! Lambda entry points of the HTTP functions: one call per function binary.

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use axum::Router;
use futures::StreamExt;
use lambda_http::request::RequestContext;
use utoipa_axum::router::OpenApiRouter;

use super::files::StoredBytes;
use crate::AppState;

/// Serves `api` behind API Gateway (REST API proxy events).
pub async fn run_http(api: OpenApiRouter<AppState>) -> Result<(), lambda_http::Error> {
    let app = application(api)
        .await?
        .layer(axum::middleware::map_response(keep_stored_bytes))
        .layer(axum::Extension(super::answer_size::Buffered));
    lambda_http::run(routed_from_api(app)).await
}

/// The buffered adapter decodes a body of a text type (csv, json, svg ...) into UTF-8 text
/// unless the response names an encoding: a stored file not in UTF-8, a byte-order mark, or a
/// range ending inside a character came back as other bytes than `Content-Length` says. Such
/// a file names its encoding as `identity`; other files do not, since some browsers refuse
/// ranges of media with that header (the streaming adapter converts nothing).
async fn keep_stored_bytes(mut response: Response) -> Response {
    let decoded = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|t| t.to_str().ok())
        .is_some_and(decoded_as_text);
    if decoded && response.extensions().get::<StoredBytes>().is_some() {
        response
            .headers_mut()
            .insert(header::CONTENT_ENCODING, HeaderValue::from_static("identity"));
    }
    response
}

/// The content types lambda_http (1.3) turns into text.
fn decoded_as_text(content_type: &str) -> bool {
    const PREFIXES: [&str; 5] = [
        "text",
        "application/json",
        "application/javascript",
        "application/xml",
        "application/yaml",
    ];
    let mime = content_type.split(';').next().unwrap_or_default().trim();
    PREFIXES.iter().any(|p| content_type.starts_with(p)) || ["+xml", "+yaml", "+json"].iter().any(|s| mime.ends_with(s))
}

/// Serves `api` with response streaming (an API Gateway integration in STREAM mode),
/// so streamed answers reach the client as they are generated instead of all at the end.
pub async fn run_http_streaming(api: OpenApiRouter<AppState>) -> Result<(), lambda_http::Error> {
    lambda_http::run_with_streaming_response(routed_from_api(application(api).await?)).await
}

/// `app` with every request's path starting at `/api`: a custom domain that maps the API
/// under a base path (`https://example.com/v1`) leaves the base path in the event's path
/// (API Gateway strips only the stage), and every route answered 404.
fn routed_from_api<B>(
    app: Router,
) -> tower::util::MapRequest<Router, impl FnMut(axum::http::Request<B>) -> axum::http::Request<B> + Clone> {
    tower::ServiceBuilder::new().map_request(without_base_path).service(app)
}

/// A base path taken off a request's path, for the links the service hands out.
#[derive(Clone)]
struct BasePath(String);

fn without_base_path<B>(mut req: axum::http::Request<B>) -> axum::http::Request<B> {
    let path = req.uri().path();
    if req.extensions().get::<RequestContext>().is_none() {
        return req;
    }
    // No route starts with /api/api: that is a base path named `api`.
    let at = match path {
        p if p.starts_with("/api/api/") => Some(4),
        p if p == "/api" || p.starts_with("/api/") => None,
        p => p.find("/api/"),
    };
    let Some(at) = at else {
        return req;
    };
    let base = path[..at].to_owned();
    let rest = req
        .uri()
        .path_and_query()
        .map_or("", |pq| pq.as_str())
        .get(at..)
        .unwrap_or_default();
    let mut parts = req.uri().clone().into_parts();
    let Ok(rest) = rest.parse() else {
        return req;
    };
    parts.path_and_query = Some(rest);
    if let Ok(uri) = axum::http::Uri::from_parts(parts) {
        *req.uri_mut() = uri;
        req.extensions_mut().insert(BasePath(base));
    }
    req
}

/// The started process's state with `api` assembled on it.
async fn application(api: OpenApiRouter<AppState>) -> Result<Router, lambda_http::Error> {
    let state = crate::startup::start()
        .await
        .map_err(|e| lambda_http::Error::from(format!("{e:#}")))?;
    let app = super::app::assemble(api, state.clone())
        .0
        .layer(axum::middleware::from_fn_with_state(state, learn_base_url));
    Ok(match crate::telemetry::tracing_enabled() {
        true => app.layer(axum::middleware::map_response(flush_at_end)),
        false => app,
    })
}

/// Links the service hands out (`accessUrl`, document images) need the address clients call,
/// which API Gateway knows and the function does not: without PUBLIC_BASE_URL it is taken from
/// the first request an instance serves (not the console's test invocations, whose address is
/// made up). On the API's default endpoint paths start with the stage; a custom domain maps
/// the API at its root or under a base path (one served at two addresses needs
/// PUBLIC_BASE_URL).
async fn learn_base_url(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let base = req.extensions().get::<BasePath>().map_or("", |b| b.0.as_str());
    state.learn_base_url(|| match req.extensions().get::<RequestContext>()? {
        RequestContext::ApiGatewayV1(c) if c.stage.as_deref() != Some("test-invoke-stage") => {
            let domain = c.domain_name.as_deref()?;
            Some(match (domain.ends_with(".amazonaws.com"), c.stage.as_deref()) {
                (true, Some(stage)) => format!("https://{domain}/{stage}"),
                _ => format!("https://{domain}{base}"),
            })
        }
        _ => None,
    });
    next.run(req).await
}

/// Lambda may freeze the process as soon as an invocation's response has been sent, spans
/// still waiting in the exporter's batch included: the response's body ends only once the
/// spans are sent. A streamed answer's spans end with its body (`spawn_stream`), so the
/// request's own span is among them.
async fn flush_at_end(response: Response) -> Response {
    let (parts, body) = response.into_parts();
    let flushed =
        futures::stream::once(crate::telemetry::flush()).filter_map(|()| async { None::<Result<Bytes, axum::Error>> });
    // `chain` drops the body (and the request span it holds) before it starts the flush.
    Response::from_parts(parts, Body::from_stream(body.into_data_stream().chain(flushed)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the adapter makes of a file response: the bytes as stored, for a text type; a
    /// media file passes as it is without the header.
    #[tokio::test]
    async fn a_stored_text_file_goes_through_the_adapter_byte_for_byte() {
        let stored: &[u8] = b"\xEF\xBB\xBFname;caf\xE9\r\n\xC3";
        let file = |mime: &'static str, marked: bool| {
            let mut resp = Response::new(Body::from(stored.to_vec()));
            resp.headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static(mime));
            if marked {
                resp.extensions_mut().insert(StoredBytes);
            }
            resp
        };
        let through =
            |resp: Response| async { lambda_http::IntoResponse::into_response(keep_stored_bytes(resp).await).await };
        let text = through(file("text/csv", true)).await;
        assert_eq!(text.body(), &lambda_http::Body::Binary(stored.to_vec()));
        let video = keep_stored_bytes(file("video/mp4", true)).await;
        assert!(video.headers().get(header::CONTENT_ENCODING).is_none());
        // Unmarked (not a stored file), a text body is the adapter's to decode: what the mark
        // guards against.
        let unmarked = through(file("text/csv", false)).await;
        assert!(
            matches!(unmarked.body(), lambda_http::Body::Text(_)),
            "{:?}",
            unmarked.body()
        );
    }
}
