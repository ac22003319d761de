//! Lambda entry points: one call per function binary.

use utoipa_axum::router::OpenApiRouter;

use crate::AppState;

/// Serves `api` behind API Gateway (REST API proxy events).
pub async fn run_http(api: OpenApiRouter<AppState>) -> Result<(), lambda_http::Error> {
    let state = crate::app::start()
        .await
        .map_err(|e| lambda_http::Error::from(format!("{e:#}")))?;
    let (app, _) = crate::app::assemble(api, state);
    lambda_http::run(app).await
}
