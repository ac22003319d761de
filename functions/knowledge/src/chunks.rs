//! `/chunk`: chunks by hand.

use axum::extract::State;
use shared::http::envelope::Empty;
use shared::http::{Api, ApiResult, CurrentUser, Envelope, Json, Page, PageQuery, Path, Query};
use shared::rag::chunks::{self, ChunkFilter, ChunkView, EditChunkRequest, NewChunkRequest};
use shared::AppState;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(page))
        .routes(routes!(create))
        .routes(routes!(update, delete))
}

#[utoipa::path(get, path = "/chunk/page", tag = "knowledge", security(("svc_auth" = [])), params(ChunkFilter, PageQuery),
    responses((status = 200, body = Envelope<Page<ChunkView>>), (status = 401)))]
async fn page(
    State(state): State<AppState>,
    user: CurrentUser,
    Query(f): Query<ChunkFilter>,
    Query(p): Query<PageQuery>,
) -> ApiResult<Page<ChunkView>> {
    chunks::page(&state, &user, f, p).await.map(Api)
}

/// Add a chunk to a document; it is embedded at once.
#[utoipa::path(post, path = "/chunk", tag = "knowledge", security(("svc_auth" = [])), request_body = NewChunkRequest,
    responses((status = 200, body = Envelope<ChunkView>), (status = 400), (status = 401), (status = 404)))]
async fn create(
    State(state): State<AppState>,
    user: CurrentUser,
    Json(req): Json<NewChunkRequest>,
) -> ApiResult<ChunkView> {
    chunks::create(&state, &user, req).await.map(Api)
}

/// Change a chunk's text; it is embedded again.
#[utoipa::path(put, path = "/chunk/{id}", tag = "knowledge", security(("svc_auth" = [])), params(("id" = i64, Path)),
    request_body = EditChunkRequest,
    responses((status = 200, body = Envelope<ChunkView>), (status = 400), (status = 401), (status = 404)))]
async fn update(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<i64>,
    Json(req): Json<EditChunkRequest>,
) -> ApiResult<ChunkView> {
    chunks::update(&state, &user, id, req).await.map(Api)
}

#[utoipa::path(delete, path = "/chunk/{id}", tag = "knowledge", security(("svc_auth" = [])), params(("id" = i64, Path)),
    responses((status = 200, body = Envelope<Empty>), (status = 401), (status = 404)))]
async fn delete(State(state): State<AppState>, user: CurrentUser, Path(id): Path<i64>) -> ApiResult<Empty> {
    chunks::delete(&state, &user, id).await?;
    Api::empty()
}
