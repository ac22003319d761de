//! The whole API on one port: every function's router merged under the prefix, plus
//! `/health`, the OpenAPI document and a browsable API page. Tests build the same app.

mod health;

use axum::Router;
use shared::queue::QueueName;
use shared::AppState;
use utoipa_axum::router::OpenApiRouter;
use utoipa_swagger_ui::SwaggerUi;

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

/// How often the local server runs the housekeeping the scheduled function runs daily on AWS.
const HOUSEKEEPING_EVERY: std::time::Duration = std::time::Duration::from_secs(3600);

/// Runs the housekeeping in this process, at start and then every `HOUSEKEEPING_EVERY`: files
/// of requests that ended half way, expired previews, answers and documents a restart left in
/// progress are otherwise never cleaned up locally. Not for tests, whose data it would sweep
/// under them.
pub fn start_housekeeping(state: &AppState) {
    let state = state.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(HOUSEKEEPING_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            every.tick().await;
            if let Err(e) = shared::housekeeping::run(&state).await {
                tracing::warn!(error = %e, "housekeeping failed; it runs again in an hour");
            }
        }
    });
}

/// The complete local application.
pub fn build_app(state: AppState) -> Router {
    let (router, mut openapi) = shared::http::app::assemble(api(), state.clone());
    openapi.info.title = "Agent Platform API".to_owned();
    openapi.info.version = env!("CARGO_PKG_VERSION").to_owned();
    openapi.info.description = Some("Admin API (Svc-Auth) and external API (Svc-App-Id + Svc-Token).".to_owned());
    // utoipa fills these from the crate's authors and licence; the document speaks for the
    // service, not for whoever wrote a library.
    openapi.info.contact = None;
    openapi.info.license = None;
    // Swagger UI's files are compiled into the binary, so the page works without internet
    // (inside a VPC); it serves the document at /api-docs/openapi.json.
    let docs: Router = SwaggerUi::new("/api-docs")
        .url("/api-docs/openapi.json", openapi)
        .into();
    router.merge(docs).merge(health::router(state))
}

/// Serves `app` on `listener` until `shutdown` resolves. Every accepted socket has Nagle's
/// algorithm off: a streamed answer writes small frames, and on a kept-alive connection Nagle
/// would hold each first frame back until the client's delayed ACK (about 40 ms).
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::serve::ListenerExt;
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::warn!(error = %e, "cannot turn Nagle's algorithm off on a connection");
        }
    });
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<std::net::SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown)
    .await
}
