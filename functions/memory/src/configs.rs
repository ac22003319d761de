//! Memory configs: CRUD and the recall debugger.

use axum::extract::State;
use shared::http::envelope::Empty;
use shared::http::{Api, ApiResult, CurrentUser, Envelope, Json, Path};
use shared::memory::config_model::{ConfigRequest, ConfigView};
use shared::memory::{config_service, DebugRequest, MemoryView};
use shared::AppState;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list, create))
        .routes(routes!(detail, update, delete))
        .routes(routes!(debug))
}

#[utoipa::path(get, path = "/memory/config", tag = "memory", security(("svc_auth" = [])),
    responses((status = 200, body = Envelope<Vec<ConfigView>>), (status = 401)))]
async fn list(State(state): State<AppState>, user: CurrentUser) -> ApiResult<Vec<ConfigView>> {
    config_service::list(&state, &user).await.map(Api)
}

#[utoipa::path(get, path = "/memory/config/{id}", tag = "memory", security(("svc_auth" = [])),
    params(("id" = i64, Path)),
    responses((status = 200, body = Envelope<ConfigView>), (status = 401), (status = 404)))]
async fn detail(State(state): State<AppState>, _user: CurrentUser, Path(id): Path<i64>) -> ApiResult<ConfigView> {
    config_service::detail(&state, id).await.map(Api)
}

/// Create a config; `name` and `embeddingModelId` are required. Returns the new id.
#[utoipa::path(post, path = "/memory/config", tag = "memory", security(("svc_auth" = [])),
    request_body = ConfigRequest,
    responses((status = 200, body = Envelope<i64>), (status = 400), (status = 401)))]
async fn create(State(state): State<AppState>, user: CurrentUser, Json(req): Json<ConfigRequest>) -> ApiResult<i64> {
    config_service::create(&state, &user, req).await.map(Api)
}

/// Change the given fields (absent fields keep their value).
#[utoipa::path(put, path = "/memory/config/{id}", tag = "memory", security(("svc_auth" = [])),
    params(("id" = i64, Path)), request_body = ConfigRequest,
    responses((status = 200, body = Envelope<Empty>), (status = 400), (status = 401), (status = 403), (status = 404)))]
async fn update(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<i64>,
    Json(req): Json<ConfigRequest>,
) -> ApiResult<Empty> {
    config_service::update(&state, &user, id, req).await?;
    Api::empty()
}

/// Delete a config no agent is bound to.
#[utoipa::path(delete, path = "/memory/config/{id}", tag = "memory", security(("svc_auth" = [])),
    params(("id" = i64, Path)),
    responses((status = 200, body = Envelope<Empty>), (status = 400), (status = 401), (status = 403), (status = 404)))]
async fn delete(State(state): State<AppState>, user: CurrentUser, Path(id): Path<i64>) -> ApiResult<Empty> {
    config_service::delete(&state, &user, id).await?;
    Api::empty()
}

/// Recall with this config for a user and agent, as chat would (access counts unchanged).
#[utoipa::path(post, path = "/memory/config/{id}/debug", tag = "memory", security(("svc_auth" = [])),
    params(("id" = i64, Path)), request_body = DebugRequest,
    responses((status = 200, body = Envelope<Vec<MemoryView>>), (status = 400), (status = 401), (status = 403), (status = 404)))]
async fn debug(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<i64>,
    Json(req): Json<DebugRequest>,
) -> ApiResult<Vec<MemoryView>> {
    config_service::debug(&state, &user, id, req).await.map(Api)
}
