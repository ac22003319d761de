//! Embed tokens for partner pages, and the embeddable chat page that uses them.

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use shared::apps::embed_token::{self, EmbedToken, EmbedTokenRequest};
use shared::apps::frame_ancestors::{self, EmbedPageQuery};
use shared::domain::AppCaller;
use shared::http::{Api, ApiResult, Envelope, Json, Path, Query};
use shared::{AppError, AppState};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

const PAGE: &str = include_str!("embed_page.html");

/// The page's policy: its own inline script and style (by hash) and calls to this origin,
/// nothing else, so an answer that slipped markup past the escaping could run no script and
/// load nothing; framed by the pages the app lists (`frame_ancestors`).
fn content_security_policy(frame_ancestors: &str) -> String {
    static POLICY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let fixed = POLICY.get_or_init(|| {
        format!(
            "default-src 'none'; script-src '{}'; style-src '{}'; connect-src 'self'; base-uri 'none'; \
             form-action 'none'",
            inline_hash("script"),
            inline_hash("style")
        )
    });
    format!("{fixed}; {frame_ancestors}")
}

/// `sha256-<base64>` of the page's inline `<tag>` element, as CSP source expressions name it.
fn inline_hash(tag: &str) -> String {
    use base64::Engine as _;
    use sha2::Digest as _;
    let open = format!("<{tag}>");
    let body = PAGE
        .split_once(open.as_str())
        .and_then(|(_, rest)| rest.split_once(format!("</{tag}>").as_str()))
        .map(|(body, _)| body)
        .unwrap_or_default();
    let digest = sha2::Sha256::digest(body.as_bytes());
    format!("sha256-{}", base64::engine::general_purpose::STANDARD.encode(digest))
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(token_get, token_post))
        .routes(routes!(page))
}

/// A chat session token for one openId (query openId, ttlSeconds, optional agentId binding
/// it to one agent), sent as `Svc-Auth`.
#[utoipa::path(get, path = "/openapi/v1/embed-token", tag = "external", security(("svc_app_id" = [], "svc_token" = [])),
    params(EmbedTokenRequest), responses((status = 200, body = Envelope<EmbedToken>), (status = 400), (status = 401)))]
async fn token_get(
    State(state): State<AppState>,
    app: AppCaller,
    Query(req): Query<EmbedTokenRequest>,
) -> ApiResult<EmbedToken> {
    embed_token::issue(&state, &app, req).await.map(Api)
}

/// The same, with a JSON body `{openId, ttlSeconds, agentId}`.
#[utoipa::path(post, path = "/openapi/v1/embed-token", tag = "external", security(("svc_app_id" = [], "svc_token" = [])),
    request_body = EmbedTokenRequest, responses((status = 200, body = Envelope<EmbedToken>), (status = 400), (status = 401)))]
async fn token_post(
    State(state): State<AppState>,
    app: AppCaller,
    Json(req): Json<EmbedTokenRequest>,
) -> ApiResult<EmbedToken> {
    embed_token::issue(&state, &app, req).await.map(Api)
}

/// The chat page for an iframe: `/embed/{agentId}?app=<appId>#token=<embed token>`
/// (optionally `&q=<first question>` after the token). The page itself holds no data;
/// everything goes through the external chat. `app` names the app whose `frameAncestors` may
/// frame it (an app that lists none lets any page); the page starts only when it is its
/// token's app, so a site cannot leave it out to frame an app's chat from anywhere.
#[utoipa::path(get, path = "/embed/{agentId}", tag = "external", params(("agentId" = i64, Path), EmbedPageQuery),
    responses((status = 200, content_type = "text/html", body = String), (status = 400)))]
async fn page(
    State(state): State<AppState>,
    Path(_agent_id): Path<i64>,
    Query(q): Query<EmbedPageQuery>,
) -> Result<Response, AppError> {
    let framers = match q.app.as_deref() {
        Some(app) => frame_ancestors::of_app(&state, app).await?,
        None => Vec::new(),
    };
    let policy = content_security_policy(&frame_ancestors::directive(&framers));
    Ok(page_response(&policy))
}

fn page_response(policy: &str) -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CONTENT_SECURITY_POLICY, policy),
            (header::CACHE_CONTROL, "no-cache"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        PAGE,
    )
        .into_response()
}
