//! Lambda entry points of the HTTP functions: one call per function binary.

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use axum::Router;
use futures::StreamExt;
use lambda_http::request::RequestContext;
use utoipa_axum::router::OpenApiRouter;

use crate::AppState;

/// Serves `api` behind API Gateway (REST API proxy events).
pub async fn run_http(api: OpenApiRouter<AppState>) -> Result<(), lambda_http::Error> {
    lambda_http::run(application(api).await?).await
}

/// Serves `api` with response streaming (an API Gateway integration in STREAM mode),
/// so streamed answers reach the client as they are generated instead of all at the end.
pub async fn run_http_streaming(api: OpenApiRouter<AppState>) -> Result<(), lambda_http::Error> {
    lambda_http::run_with_streaming_response(application(api).await?).await
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
/// the API at its root (one mapped under a base path, or served at two addresses, needs
/// PUBLIC_BASE_URL).
async fn learn_base_url(State(state): State<AppState>, req: Request, next: Next) -> Response {
    state.learn_base_url(|| match req.extensions().get::<RequestContext>()? {
        RequestContext::ApiGatewayV1(c) if c.stage.as_deref() != Some("test-invoke-stage") => {
            let domain = c.domain_name.as_deref()?;
            Some(match (domain.ends_with(".amazonaws.com"), c.stage.as_deref()) {
                (true, Some(stage)) => format!("https://{domain}/{stage}"),
                _ => format!("https://{domain}"),
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
