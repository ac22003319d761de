//! Usage analytics of an agent, for its creator and administrators.

use axum::extract::State;
use shared::agents::analytics::{self, Analytics, AnalyticsQuery, UsageDetail};
use shared::agents::period::PeriodQuery;
use shared::http::{Api, ApiResult, CurrentUser, Envelope, Page, PageQuery, Path, Query};
use shared::AppState;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(summary))
        .routes(routes!(usage_detail))
}

/// Totals and per-day (per-hour for `1d`) trends, zeros where nothing happened.
#[utoipa::path(get, path = "/agent/{id}/analytics", tag = "agents", security(("svc_auth" = [])),
    params(("id" = i64, Path), AnalyticsQuery),
    responses((status = 200, body = Envelope<Analytics>), (status = 400), (status = 401), (status = 403), (status = 404)))]
async fn summary(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<i64>,
    Query(q): Query<AnalyticsQuery>,
) -> ApiResult<Analytics> {
    analytics::analytics(&state, &user, id, q).await.map(Api)
}

/// Messages sent per person, most active first.
#[utoipa::path(get, path = "/agent/{id}/usage-detail", tag = "agents", security(("svc_auth" = [])),
    params(("id" = i64, Path), PageQuery, PeriodQuery),
    responses((status = 200, body = Envelope<Page<UsageDetail>>), (status = 400), (status = 401), (status = 403), (status = 404)))]
async fn usage_detail(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<i64>,
    Query(paging): Query<PageQuery>,
    Query(period): Query<PeriodQuery>,
) -> ApiResult<Page<UsageDetail>> {
    analytics::usage_detail(&state, &user, id, paging, period)
        .await
        .map(Api)
}
