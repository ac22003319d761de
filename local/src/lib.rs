//! The whole API on one port: every function's router merged under the prefix, plus
//! `/health`, the OpenAPI document and a browsable API page. Tests build the same app.

mod health;

use axum::routing::get;
use axum::{Json, Router};
use shared::queue::QueueName;
use shared::AppState;
use utoipa_axum::router::OpenApiRouter;
use utoipa_scalar::{Scalar, Servable};

/// Every module's routes, as the Lambda functions serve them one by one.
pub fn api() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .merge(user_api::router())
        .merge(resource_api::router())
        .merge(model_api::router())
        .merge(knowledge_api::router())
        .merge(agent_api::router())
        .merge(skill_api::router())
        .merge(mcp_api::router())
        .merge(app_api::router())
        .merge(external_api::router())
        .merge(memory_api::router())
}

/// Runs the queue workers inside this process, as the Lambda event sources would.
pub fn start_workers(state: &AppState) {
    state
        .queue()
        .start_worker(QueueName::Ingest, shared::rag::pipeline::handler(state.clone()));
    state
        .queue()
        .start_worker(QueueName::Memory, shared::memory::worker::handler(state.clone()));
}

/// The complete local application.
pub fn build_app(state: AppState) -> Router {
    let (router, mut openapi) = shared::app::assemble(api(), state.clone());
    openapi.info.title = "Agent Platform API".to_owned();
    openapi.info.version = env!("CARGO_PKG_VERSION").to_owned();
    openapi.info.description = Some("Admin API (Svc-Auth) and external API (Svc-App-Id + Svc-Token).".to_owned());
    let docs = Router::new()
        .route(
            "/api-docs/openapi.json",
            get({
                let openapi = openapi.clone();
                move || async move { Json(openapi) }
            }),
        )
        .merge(Scalar::with_url("/api-docs", openapi));
    router.merge(docs).merge(health::router(state))
}
