//! `/store-instance`: vector stores and search engines.

use axum::extract::State;
use serde::Deserialize;
use shared::http::envelope::Empty;
use shared::http::{Api, ApiResult, CurrentUser, Envelope, Json, Page, PageQuery, Path, Query};
use shared::stores::{service, StoreFilter, StoreRequest, StoreTestRequest, StoreView};
use shared::AppState;
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list, create))
        .routes(routes!(page))
        .routes(routes!(get, update, delete))
        .routes(routes!(test))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct CategoryQuery {
    /// 1 = vector store, 2 = search engine.
    category: Option<i64>,
}

#[utoipa::path(get, path = "/store-instance", tag = "knowledge", security(("svc_auth" = [])), params(CategoryQuery),
    responses((status = 200, body = Envelope<Vec<StoreView>>), (status = 400), (status = 401)))]
async fn list(
    State(state): State<AppState>,
    user: CurrentUser,
    Query(q): Query<CategoryQuery>,
) -> ApiResult<Vec<StoreView>> {
    service::list(&state, &user, q.category).await.map(Api)
}

#[utoipa::path(get, path = "/store-instance/page", tag = "knowledge", security(("svc_auth" = [])), params(PageQuery, StoreFilter),
    responses((status = 200, body = Envelope<Page<StoreView>>), (status = 400), (status = 401)))]
async fn page(
    State(state): State<AppState>,
    user: CurrentUser,
    Query(p): Query<PageQuery>,
    Query(f): Query<StoreFilter>,
) -> ApiResult<Page<StoreView>> {
    service::page(&state, &user, p, f).await.map(Api)
}

#[utoipa::path(get, path = "/store-instance/{id}", tag = "knowledge", security(("svc_auth" = [])), params(("id" = i64, Path)),
    responses((status = 200, body = Envelope<StoreView>), (status = 401), (status = 404)))]
async fn get(State(state): State<AppState>, user: CurrentUser, Path(id): Path<i64>) -> ApiResult<StoreView> {
    service::get(&state, &user, id).await.map(Api)
}

/// Register a store instance (administrator); returns its id. The password is stored sealed.
#[utoipa::path(post, path = "/store-instance", tag = "knowledge", security(("svc_auth" = [])), request_body = StoreRequest,
    responses((status = 200, body = Envelope<i64>), (status = 400), (status = 401), (status = 403)))]
async fn create(State(state): State<AppState>, user: CurrentUser, Json(req): Json<StoreRequest>) -> ApiResult<i64> {
    service::create(&state, &user, req).await.map(Api)
}

/// Change a store instance (administrator); a masked password sent back keeps the stored one.
#[utoipa::path(put, path = "/store-instance/{id}", tag = "knowledge", security(("svc_auth" = [])), params(("id" = i64, Path)),
    request_body = StoreRequest,
    responses((status = 200, body = Envelope<Empty>), (status = 400), (status = 401), (status = 403), (status = 404)))]
async fn update(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<i64>,
    Json(req): Json<StoreRequest>,
) -> ApiResult<Empty> {
    service::update(&state, &user, id, req).await?;
    Api::empty()
}

#[utoipa::path(delete, path = "/store-instance/{id}", tag = "knowledge", security(("svc_auth" = [])), params(("id" = i64, Path)),
    responses((status = 200, body = Envelope<Empty>), (status = 400), (status = 401), (status = 403), (status = 404)))]
async fn delete(State(state): State<AppState>, user: CurrentUser, Path(id): Path<i64>) -> ApiResult<Empty> {
    service::delete(&state, &user, id).await?;
    Api::empty()
}

/// Connect to a store for real; true on success, an error saying what failed otherwise.
#[utoipa::path(post, path = "/store-instance/test", tag = "knowledge", security(("svc_auth" = [])), request_body = StoreTestRequest,
    responses((status = 200, body = Envelope<bool>), (status = 400), (status = 401), (status = 403)))]
async fn test(State(state): State<AppState>, user: CurrentUser, Json(req): Json<StoreTestRequest>) -> ApiResult<bool> {
    service::test(&state, &user, req).await.map(Api)
}
