//! `/rag`: knowledge bases.

use axum::extract::State;
use shared::http::envelope::Empty;
use shared::http::{Api, ApiResult, CurrentUser, Envelope, Json, Page, PageQuery, Path, Query};
use shared::rag::bases::{service, KbConfigRequest, KbRequest, KbView};
use shared::AppState;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(page))
        .routes(routes!(create))
        .routes(routes!(get, update, delete))
        .routes(routes!(update_config))
}

/// Your knowledge bases (administrators see all).
#[utoipa::path(get, path = "/rag/page", tag = "knowledge", security(("svc_auth" = [])), params(PageQuery),
    responses((status = 200, body = Envelope<Page<KbView>>), (status = 401)))]
async fn page(State(state): State<AppState>, user: CurrentUser, Query(p): Query<PageQuery>) -> ApiResult<Page<KbView>> {
    service::page(&state, &user, p).await.map(Api)
}

#[utoipa::path(get, path = "/rag/{id}", tag = "knowledge", security(("svc_auth" = [])), params(("id" = i64, Path)),
    responses((status = 200, body = Envelope<KbView>), (status = 401), (status = 404)))]
async fn get(State(state): State<AppState>, user: CurrentUser, Path(id): Path<i64>) -> ApiResult<KbView> {
    service::get(&state, &user, id).await.map(Api)
}

/// Create a knowledge base (name and embeddingModelId required; the dimension is probed when
/// not given).
#[utoipa::path(post, path = "/rag", tag = "knowledge", security(("svc_auth" = [])), request_body = KbRequest,
    responses((status = 200, body = Envelope<KbView>), (status = 400), (status = 401)))]
async fn create(State(state): State<AppState>, user: CurrentUser, Json(req): Json<KbRequest>) -> ApiResult<KbView> {
    service::create(&state, &user, req).await.map(Api)
}

#[utoipa::path(put, path = "/rag/{id}", tag = "knowledge", security(("svc_auth" = [])), params(("id" = i64, Path)),
    request_body = KbRequest,
    responses((status = 200, body = Envelope<Empty>), (status = 400), (status = 401), (status = 404)))]
async fn update(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<i64>,
    Json(req): Json<KbRequest>,
) -> ApiResult<Empty> {
    service::update(&state, &user, id, req).await?;
    Api::empty()
}

/// Replace settings section by section (chunkParams, parseParams, searchParams, modelParams).
#[utoipa::path(put, path = "/rag/{id}/config", tag = "knowledge", security(("svc_auth" = [])), params(("id" = i64, Path)),
    request_body = KbConfigRequest,
    responses((status = 200, body = Envelope<Empty>), (status = 400), (status = 401), (status = 404)))]
async fn update_config(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<i64>,
    Json(req): Json<KbConfigRequest>,
) -> ApiResult<Empty> {
    service::update_config(&state, &user, id, req).await?;
    Api::empty()
}

/// Delete a knowledge base with every document, chunk, vector, image and stored file.
#[utoipa::path(delete, path = "/rag/{id}", tag = "knowledge", security(("svc_auth" = [])), params(("id" = i64, Path)),
    responses((status = 200, body = Envelope<Empty>), (status = 401), (status = 404)))]
async fn delete(State(state): State<AppState>, user: CurrentUser, Path(id): Path<i64>) -> ApiResult<Empty> {
    service::delete(&state, &user, id).await?;
    Api::empty()
}
