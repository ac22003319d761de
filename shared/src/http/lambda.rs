//! Lambda entry points of the HTTP functions: one call per function binary.

use axum::Router;
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
    Ok(super::app::assemble(api, state).0)
}
