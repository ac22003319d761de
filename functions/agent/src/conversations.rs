//! Conversations of an agent and their messages.

use axum::extract::State;
use shared::agents::conversations::{self, MessageView, MessageWindow, OwnedConversation, Stopped, Whose};
use shared::agents::period::PeriodQuery;
use shared::http::envelope::Empty;
use shared::http::{Api, ApiResult, CurrentUser, Envelope, Page, PageQuery, Path, Query};
use shared::AppState;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(page))
        .routes(routes!(messages))
        .routes(routes!(delete))
        .routes(routes!(stop))
}

/// Conversations, most recently active first (the agent's managers see everyone's).
#[utoipa::path(get, path = "/agent/{id}/conversations", tag = "agents", security(("svc_auth" = [])),
    params(("id" = i64, Path), PageQuery, PeriodQuery),
    responses((status = 200, body = Envelope<Page<OwnedConversation>>), (status = 400), (status = 401), (status = 404)))]
async fn page(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<i64>,
    Query(paging): Query<PageQuery>,
    Query(period): Query<PeriodQuery>,
) -> ApiResult<Page<OwnedConversation>> {
    conversations::page(&state, &user, id, paging, period).await.map(Api)
}

/// The messages of a conversation, oldest first (all, or a window of them). The agent's
/// managers name the owner when several chose the same `conversationId` (409 otherwise).
#[utoipa::path(get, path = "/agent/{agentId}/conversation/{conversationId}/messages", tag = "agents",
    security(("svc_auth" = [])), params(("agentId" = i64, Path), ("conversationId" = String, Path), Whose,
        MessageWindow),
    responses((status = 200, body = Envelope<Vec<MessageView>>), (status = 400), (status = 401), (status = 404),
        (status = 409)))]
async fn messages(
    State(state): State<AppState>,
    user: CurrentUser,
    Path((agent_id, key)): Path<(i64, String)>,
    Query(whose): Query<Whose>,
    Query(window): Query<MessageWindow>,
) -> ApiResult<Vec<MessageView>> {
    conversations::messages(&state, &user, (agent_id, &key), &whose, &window)
        .await
        .map(Api)
}

/// Delete a conversation and its messages (the owner named as for its messages).
#[utoipa::path(delete, path = "/agent/{agentId}/conversation/{conversationId}", tag = "agents",
    security(("svc_auth" = [])), params(("agentId" = i64, Path), ("conversationId" = String, Path), Whose),
    responses((status = 200, body = Envelope<Empty>), (status = 400), (status = 401), (status = 404),
        (status = 409)))]
async fn delete(
    State(state): State<AppState>,
    user: CurrentUser,
    Path((agent_id, key)): Path<(i64, String)>,
    Query(whose): Query<Whose>,
) -> ApiResult<Empty> {
    conversations::delete(&state, &user, agent_id, &key, &whose).await?;
    Api::empty()
}

/// Stop the answer the conversation is generating (the owner named as for its messages): the
/// turn ends it within about a second, keeping what was generated, and its stream ends with a
/// `stopped` line. `stopped` is false when no answer was under way.
#[utoipa::path(post, path = "/agent/{agentId}/conversation/{conversationId}/stop", tag = "agents",
    security(("svc_auth" = [])), params(("agentId" = i64, Path), ("conversationId" = String, Path), Whose),
    responses((status = 200, body = Envelope<Stopped>), (status = 400), (status = 401), (status = 404),
        (status = 409)))]
async fn stop(
    State(state): State<AppState>,
    user: CurrentUser,
    Path((agent_id, key)): Path<(i64, String)>,
    Query(whose): Query<Whose>,
) -> ApiResult<Stopped> {
    conversations::stop(&state, &user, agent_id, &key, &whose)
        .await
        .map(Api)
}
