//! `/ai-model`: providers, model configs, defaults, connectivity tests and usage statistics.
//! This module answers in the `{status, message, data}` envelope and pages with
//! `pageNum`/`pageSize`.

use axum::extract::State;
use serde::Deserialize;
use shared::domain::PageNumQuery;
use shared::http::envelope::{Empty, StatusApi, StatusEnvelope, StatusPage, StatusPageEnvelope, StatusResult};
use shared::http::{AdminUser, CurrentUser, Json, Path, Query};
use shared::models::adapters::{self, Adapter};
use shared::models::{self as m, service, ModelType};
use shared::{AppResult, AppState};
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(enabled_providers))
        .routes(routes!(all_providers))
        .routes(routes!(get_provider, update_provider, delete_provider))
        .routes(routes!(create_provider))
        .routes(routes!(enable_provider))
        .routes(routes!(disable_provider))
        .routes(routes!(list_adapters))
        .routes(routes!(page_configs))
        .routes(routes!(get_config, update_config, delete_config))
        .routes(routes!(create_config))
        .routes(routes!(enable_config))
        .routes(routes!(disable_config))
        .routes(routes!(test_config))
        .routes(routes!(by_type))
        .routes(routes!(by_provider_type))
        .routes(routes!(defaults))
        .routes(routes!(default_of_type))
        .routes(routes!(switch_default))
        .routes(routes!(model_stat))
        .routes(routes!(user_stats))
        .routes(routes!(global_stats))
}

type Env<T> = StatusEnvelope<T>;

fn model_type(value: &str) -> AppResult<ModelType> {
    ModelType::parse("modelType", value)
}

/// Enabled providers.
#[utoipa::path(get, path = "/ai-model/providers", tag = "models", security(("svc_auth" = [])),
    responses((status = 200, body = Env<Vec<m::ProviderView>>), (status = 401)))]
async fn enabled_providers(State(state): State<AppState>, _user: CurrentUser) -> StatusResult<Vec<m::ProviderView>> {
    service::providers(&state, true).await.map(StatusApi)
}

/// All providers, disabled ones included.
#[utoipa::path(get, path = "/ai-model/all-providers", tag = "models", security(("svc_auth" = [])),
    responses((status = 200, body = Env<Vec<m::ProviderView>>), (status = 401)))]
async fn all_providers(State(state): State<AppState>, _user: CurrentUser) -> StatusResult<Vec<m::ProviderView>> {
    service::providers(&state, false).await.map(StatusApi)
}

#[utoipa::path(get, path = "/ai-model/provider/{id}", tag = "models", security(("svc_auth" = [])), params(("id" = i64, Path)),
    responses((status = 200, body = Env<m::ProviderView>), (status = 401), (status = 404)))]
async fn get_provider(
    State(state): State<AppState>,
    _user: CurrentUser,
    Path(id): Path<i64>,
) -> StatusResult<m::ProviderView> {
    service::provider(&state, id).await.map(StatusApi)
}

/// Create a provider (administrator); returns its id.
#[utoipa::path(post, path = "/ai-model/provider", tag = "models", security(("svc_auth" = [])), request_body = m::ProviderRequest,
    responses((status = 200, body = Env<i64>), (status = 400), (status = 401), (status = 403)))]
async fn create_provider(
    State(state): State<AppState>,
    user: CurrentUser,
    Json(req): Json<m::ProviderRequest>,
) -> StatusResult<i64> {
    service::create_provider(&state, &user, req).await.map(StatusApi)
}

/// Change a provider (administrator); only the fields sent change.
#[utoipa::path(put, path = "/ai-model/provider/{id}", tag = "models", security(("svc_auth" = [])), params(("id" = i64, Path)),
    request_body = m::ProviderRequest,
    responses((status = 200, body = Env<Empty>), (status = 400), (status = 401), (status = 403), (status = 404)))]
async fn update_provider(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<i64>,
    Json(req): Json<m::ProviderRequest>,
) -> StatusResult<Empty> {
    service::update_provider(&state, &user, id, req)
        .await
        .map(|()| StatusApi(Empty))
}

/// Delete a provider without model configs (administrator).
#[utoipa::path(delete, path = "/ai-model/provider/{id}", tag = "models", security(("svc_auth" = [])), params(("id" = i64, Path)),
    responses((status = 200, body = Env<Empty>), (status = 400), (status = 401), (status = 403), (status = 404)))]
async fn delete_provider(State(state): State<AppState>, user: CurrentUser, Path(id): Path<i64>) -> StatusResult<Empty> {
    service::delete_provider(&state, &user, id)
        .await
        .map(|()| StatusApi(Empty))
}

#[utoipa::path(put, path = "/ai-model/provider/{id}/enable", tag = "models", security(("svc_auth" = [])), params(("id" = i64, Path)),
    responses((status = 200, body = Env<Empty>), (status = 401), (status = 403), (status = 404)))]
async fn enable_provider(State(state): State<AppState>, user: CurrentUser, Path(id): Path<i64>) -> StatusResult<Empty> {
    service::set_provider_enabled(&state, &user, id, true)
        .await
        .map(|()| StatusApi(Empty))
}

/// Disable a provider: it drops out of /providers but stays in /all-providers.
#[utoipa::path(put, path = "/ai-model/provider/{id}/disable", tag = "models", security(("svc_auth" = [])), params(("id" = i64, Path)),
    responses((status = 200, body = Env<Empty>), (status = 401), (status = 403), (status = 404)))]
async fn disable_provider(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<i64>,
) -> StatusResult<Empty> {
    service::set_provider_enabled(&state, &user, id, false)
        .await
        .map(|()| StatusApi(Empty))
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
struct TypeQuery {
    /// CHAT, EMBEDDING or RERANKER.
    model_type: Option<String>,
}

/// Adapters of a model type.
#[utoipa::path(get, path = "/ai-model/adapters", tag = "models", security(("svc_auth" = [])), params(TypeQuery),
    responses((status = 200, body = Env<Vec<Adapter>>), (status = 400), (status = 401)))]
async fn list_adapters(_user: CurrentUser, Query(q): Query<TypeQuery>) -> StatusResult<Vec<Adapter>> {
    let t = shared::validate::required("modelType", q.model_type)?;
    Ok(StatusApi(adapters::for_type(model_type(&t)?)))
}

/// Page through the model configs you can see.
#[utoipa::path(get, path = "/ai-model/configs", tag = "models", security(("svc_auth" = [])), params(PageNumQuery, m::ConfigFilter),
    responses((status = 200, body = StatusPageEnvelope<m::ModelConfigView>), (status = 400), (status = 401)))]
async fn page_configs(
    State(state): State<AppState>,
    user: CurrentUser,
    Query(paging): Query<PageNumQuery>,
    Query(filter): Query<m::ConfigFilter>,
) -> AppResult<StatusPage<m::ModelConfigView>> {
    service::page_configs(&state, &user, paging.into(), filter)
        .await
        .map(StatusPage)
}

#[utoipa::path(get, path = "/ai-model/config/{id}", tag = "models", security(("svc_auth" = [])), params(("id" = i64, Path)),
    responses((status = 200, body = Env<m::ModelConfigView>), (status = 401), (status = 404)))]
async fn get_config(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<i64>,
) -> StatusResult<m::ModelConfigView> {
    service::config(&state, &user, id).await.map(StatusApi)
}

/// Create a model config; returns its id. Regular users create PERSONAL configs only.
#[utoipa::path(post, path = "/ai-model/config", tag = "models", security(("svc_auth" = [])), request_body = m::ModelConfigRequest,
    responses((status = 200, body = Env<i64>), (status = 400), (status = 401), (status = 403)))]
async fn create_config(
    State(state): State<AppState>,
    user: CurrentUser,
    Json(req): Json<m::ModelConfigRequest>,
) -> StatusResult<i64> {
    service::create_config(&state, &user, req).await.map(StatusApi)
}

/// Change a model config; a masked apiKey sent back keeps the stored key.
#[utoipa::path(put, path = "/ai-model/config/{id}", tag = "models", security(("svc_auth" = [])), params(("id" = i64, Path)),
    request_body = m::ModelConfigRequest,
    responses((status = 200, body = Env<Empty>), (status = 400), (status = 401), (status = 403), (status = 404)))]
async fn update_config(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<i64>,
    Json(req): Json<m::ModelConfigRequest>,
) -> StatusResult<Empty> {
    service::update_config(&state, &user, id, req)
        .await
        .map(|()| StatusApi(Empty))
}

#[utoipa::path(delete, path = "/ai-model/config/{id}", tag = "models", security(("svc_auth" = [])), params(("id" = i64, Path)),
    responses((status = 200, body = Env<Empty>), (status = 401), (status = 403), (status = 404)))]
async fn delete_config(State(state): State<AppState>, user: CurrentUser, Path(id): Path<i64>) -> StatusResult<Empty> {
    service::delete_config(&state, &user, id)
        .await
        .map(|()| StatusApi(Empty))
}

#[utoipa::path(put, path = "/ai-model/config/{id}/enable", tag = "models", security(("svc_auth" = [])), params(("id" = i64, Path)),
    responses((status = 200, body = Env<Empty>), (status = 401), (status = 403), (status = 404)))]
async fn enable_config(State(state): State<AppState>, user: CurrentUser, Path(id): Path<i64>) -> StatusResult<Empty> {
    service::set_config_enabled(&state, &user, id, true)
        .await
        .map(|()| StatusApi(Empty))
}

#[utoipa::path(put, path = "/ai-model/config/{id}/disable", tag = "models", security(("svc_auth" = [])), params(("id" = i64, Path)),
    responses((status = 200, body = Env<Empty>), (status = 401), (status = 403), (status = 404)))]
async fn disable_config(State(state): State<AppState>, user: CurrentUser, Path(id): Path<i64>) -> StatusResult<Empty> {
    service::set_config_enabled(&state, &user, id, false)
        .await
        .map(|()| StatusApi(Empty))
}

/// Connectivity test: one minimal real call. Upstream failures give success=false.
#[utoipa::path(post, path = "/ai-model/config/{id}/test", tag = "models", security(("svc_auth" = [])), params(("id" = i64, Path)),
    responses((status = 200, body = Env<m::TestResult>), (status = 401), (status = 404)))]
async fn test_config(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<i64>,
) -> StatusResult<m::TestResult> {
    service::test_config(&state, &user, id).await.map(StatusApi)
}

/// Enabled models of a type.
#[utoipa::path(get, path = "/ai-model/by-type/{modelType}", tag = "models", security(("svc_auth" = [])),
    params(("modelType" = String, Path, description = "CHAT, EMBEDDING or RERANKER")),
    responses((status = 200, body = Env<Vec<m::ModelListItem>>), (status = 400), (status = 401)))]
async fn by_type(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(t): Path<String>,
) -> StatusResult<Vec<m::ModelListItem>> {
    let rows = service::usable(&state, &user, model_type(&t)?, None).await?;
    Ok(StatusApi(rows.into_iter().map(m::ModelListItem::from).collect()))
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
struct ProviderTypeQuery {
    provider_key: Option<String>,
    /// CHAT, EMBEDDING or RERANKER.
    model_type: Option<String>,
}

/// Enabled models of one provider and type.
#[utoipa::path(get, path = "/ai-model/by-provider-type", tag = "models", security(("svc_auth" = [])), params(ProviderTypeQuery),
    responses((status = 200, body = Env<Vec<m::ModelListItem>>), (status = 400), (status = 401)))]
async fn by_provider_type(
    State(state): State<AppState>,
    user: CurrentUser,
    Query(q): Query<ProviderTypeQuery>,
) -> StatusResult<Vec<m::ModelListItem>> {
    let key = shared::validate::required("providerKey", q.provider_key)?;
    let t = model_type(&shared::validate::required("modelType", q.model_type)?)?;
    let rows = service::usable(&state, &user, t, Some(&key)).await?;
    Ok(StatusApi(rows.into_iter().map(m::ModelListItem::from).collect()))
}

/// The default model of each type.
#[utoipa::path(get, path = "/ai-model/default", tag = "models", security(("svc_auth" = [])),
    responses((status = 200, body = Env<m::DefaultModels>), (status = 401)))]
async fn defaults(State(state): State<AppState>, user: CurrentUser) -> StatusResult<m::DefaultModels> {
    service::defaults(&state, &user).await.map(StatusApi)
}

/// The default model of one type (null when none is set).
#[utoipa::path(get, path = "/ai-model/default/{modelType}", tag = "models", security(("svc_auth" = [])),
    params(("modelType" = String, Path, description = "CHAT, EMBEDDING or RERANKER")),
    responses((status = 200, body = Env<Option<m::ModelConfigView>>), (status = 400), (status = 401)))]
async fn default_of_type(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(t): Path<String>,
) -> AppResult<StatusApi<Option<m::ModelConfigView>>> {
    service::default_of(&state, &user, model_type(&t)?).await.map(StatusApi)
}

/// Make a GLOBAL model the default of its type (administrator); returns true.
#[utoipa::path(put, path = "/ai-model/switch-default/{modelId}", tag = "models", security(("svc_auth" = [])),
    params(("modelId" = i64, Path)),
    responses((status = 200, body = Env<bool>), (status = 400), (status = 401), (status = 403), (status = 404)))]
async fn switch_default(State(state): State<AppState>, user: CurrentUser, Path(id): Path<i64>) -> StatusResult<bool> {
    service::switch_default(&state, &user, id).await.map(StatusApi)
}

/// Usage statistics of one model.
#[utoipa::path(get, path = "/ai-model/usage/stat/{modelId}", tag = "models", security(("svc_auth" = [])),
    params(("modelId" = i64, Path)),
    responses((status = 200, body = Env<m::UsageStat>), (status = 401), (status = 404)))]
async fn model_stat(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<i64>,
) -> StatusResult<m::UsageStat> {
    service::model_stat(&state, &user, id).await.map(StatusApi)
}

/// Your own usage, per model.
#[utoipa::path(get, path = "/ai-model/usage/user-stats", tag = "models", security(("svc_auth" = [])), params(PageNumQuery),
    responses((status = 200, body = StatusPageEnvelope<m::UsageStat>), (status = 401)))]
async fn user_stats(
    State(state): State<AppState>,
    user: CurrentUser,
    Query(p): Query<PageNumQuery>,
) -> AppResult<StatusPage<m::UsageStat>> {
    service::usage_stats(&state, Some(&user), p.into())
        .await
        .map(StatusPage)
}

/// Everyone's usage, per model (administrator).
#[utoipa::path(get, path = "/ai-model/usage/global-stats", tag = "models", security(("svc_auth" = [])), params(PageNumQuery),
    responses((status = 200, body = StatusPageEnvelope<m::UsageStat>), (status = 401), (status = 403)))]
async fn global_stats(
    State(state): State<AppState>,
    _admin: AdminUser,
    Query(p): Query<PageNumQuery>,
) -> AppResult<StatusPage<m::UsageStat>> {
    service::usage_stats(&state, None, p.into()).await.map(StatusPage)
}
