//! Conversations of one external user with one agent.

use axum::extract::State;
use axum::http::Uri;
use shared::agents::conversations::{ConversationSummary, MessageView, MessageWindow, Stopped};
use shared::domain::AppCaller;
use shared::external::{conversations, ConversationCreated, ConversationQuery, Deleted, NewConversation};
use shared::http::{refuse_blank, refuse_unknown, Api, ApiResult, Envelope, Json, NoBody, Page, PageQuery, Query};
use shared::AppState;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(page, create, delete))
        .routes(routes!(messages))
        .routes(routes!(stop))
}

/// The user's conversations with the agent, most recently active first.
#[utoipa::path(get, path = "/openapi/v1/agent/conversations", tag = "external", security(("svc_app_id" = [], "svc_token" = [])),
    params(ConversationQuery, PageQuery),
    responses((status = 200, body = Envelope<Page<ConversationSummary>>), (status = 400), (status = 401)))]
async fn page(
    State(state): State<AppState>,
    app: AppCaller,
    Query(q): Query<ConversationQuery>,
    Query(paging): Query<PageQuery>,
) -> ApiResult<Page<ConversationSummary>> {
    conversations::page(&state, &app, q, paging).await.map(Api)
}

/// Create a conversation (or retitle the user's existing one with this id).
#[utoipa::path(post, path = "/openapi/v1/agent/conversations", tag = "external", security(("svc_app_id" = [], "svc_token" = [])),
    request_body = NewConversation,
    responses((status = 200, body = Envelope<ConversationCreated>), (status = 400), (status = 401)))]
async fn create(
    State(state): State<AppState>,
    app: AppCaller,
    Json(req): Json<NewConversation>,
) -> ApiResult<ConversationCreated> {
    conversations::create(&state, &app, req).await.map(Api)
}

/// Delete one conversation (conversationId given) or clear all of the user's with the agent.
#[utoipa::path(delete, path = "/openapi/v1/agent/conversations", tag = "external", security(("svc_app_id" = [], "svc_token" = [])),
    params(ConversationQuery),
    responses((status = 200, body = Envelope<Deleted>), (status = 400), (status = 401), (status = 404)))]
async fn delete(
    State(state): State<AppState>,
    app: AppCaller,
    uri: Uri,
    Query(q): Query<ConversationQuery>,
    _: NoBody,
) -> ApiResult<Deleted> {
    refuse_unknown(&uri, &["agentId", "openId", "conversationId"])?;
    refuse_blank(
        &uri,
        "conversationId",
        "leave it out to delete all of the user's conversations with the agent",
    )?;
    conversations::delete(&state, &app, q).await.map(Api)
}

/// The messages of one of the user's conversations, oldest first (all, or a window of them).
#[utoipa::path(get, path = "/openapi/v1/agent/conversations/messages", tag = "external",
    security(("svc_app_id" = [], "svc_token" = [])), params(ConversationQuery, MessageWindow),
    responses((status = 200, body = Envelope<Vec<MessageView>>), (status = 400), (status = 401), (status = 404)))]
async fn messages(
    State(state): State<AppState>,
    app: AppCaller,
    Query(q): Query<ConversationQuery>,
    Query(window): Query<MessageWindow>,
) -> ApiResult<Vec<MessageView>> {
    conversations::messages(&state, &app, q, &window).await.map(Api)
}

/// Stop the answer one of the user's conversations is generating: the turn ends it within
/// about a second, keeping what was generated, and its stream ends with a `stopped` line.
/// `stopped` is false when no answer was under way.
#[utoipa::path(post, path = "/openapi/v1/agent/conversations/stop", tag = "external",
    security(("svc_app_id" = [], "svc_token" = [])), params(ConversationQuery),
    responses((status = 200, body = Envelope<Stopped>), (status = 400), (status = 401), (status = 404)))]
async fn stop(
    State(state): State<AppState>,
    app: AppCaller,
    uri: Uri,
    Query(q): Query<ConversationQuery>,
    _: NoBody,
) -> ApiResult<Stopped> {
    refuse_unknown(&uri, &["agentId", "openId", "conversationId"])?;
    conversations::stop(&state, &app, q).await.map(Api)
}
