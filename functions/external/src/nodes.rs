//! Client-node heartbeats.

use axum::extract::State;
use shared::apps::{nodes, Heartbeat, HeartbeatReply};
use shared::domain::AppCaller;
use shared::http::{Api, ApiResult, Envelope, Json};
use shared::AppState;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(heartbeat))
}

/// Register or refresh a client node for 30 s; a kicked node gets `kicked: true` once.
#[utoipa::path(post, path = "/openapi/v1/node/heartbeat", tag = "external", security(("svc_app_id" = [], "svc_token" = [])),
    request_body = Heartbeat, responses((status = 200, body = Envelope<HeartbeatReply>), (status = 400), (status = 401)))]
async fn heartbeat(
    State(state): State<AppState>,
    app: AppCaller,
    Json(beat): Json<Heartbeat>,
) -> ApiResult<HeartbeatReply> {
    nodes::heartbeat(&state, &app, beat).await.map(Api)
}
