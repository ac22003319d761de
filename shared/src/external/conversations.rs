//! Conversations of one external user with one agent; another openId never sees them.

use super::model::{ConversationCreated, ConversationQuery, Deleted, NewConversation};
use super::{agents, users};
use crate::agents::conversation_repo::{self as conv_repo, ConversationRow, SummaryFilter};
use crate::agents::conversations::{ConversationSummary, MessageView, MessageWindow, Stopped};
use crate::domain::AppCaller;
use crate::domain::Owner;
use crate::domain::{Page, PageQuery};
use crate::{validate, AppError, AppResult, AppState};

/// The agent (which the app must be allowed to use) and the openId.
async fn scope(
    state: &AppState,
    app: &AppCaller,
    agent_id: Option<i64>,
    open_id: Option<String>,
) -> AppResult<(i64, String)> {
    let agent_id = validate::present("agentId", agent_id)?;
    let open_id = users::check_open_id(open_id)?;
    agents::usable(state, app, agent_id).await?;
    Ok((agent_id, open_id))
}

/// The agent and the registered user, if any, for what the user already said: an agent the
/// app may no longer use (disabled since, or bound to another app) still answers for the
/// conversations its end user has with it, which the partner must be able to read and erase.
/// An agent the user never talked to answers as an unknown one.
async fn scope_of_theirs(
    state: &AppState,
    app: &AppCaller,
    agent_id: Option<i64>,
    open_id: Option<String>,
) -> AppResult<(i64, Option<i64>)> {
    let agent_id = validate::present("agentId", agent_id)?;
    let open_id = users::check_open_id(open_id)?;
    let user = users::existing(state, app, &open_id).await?;
    match agents::usable(state, app, agent_id).await {
        Ok(_) => Ok((agent_id, user)),
        Err(refused) if refused.is_server_side() => Err(refused),
        Err(refused) => match user {
            Some(u) if super::repo::has_conversations(state.db(), agent_id, u).await? => Ok((agent_id, Some(u))),
            _ => Err(refused),
        },
    }
}

fn key(value: Option<String>) -> AppResult<String> {
    let key = validate::required("conversationId", value)?;
    validate::length("conversationId", &key, 1, 128)?;
    Ok(key)
}

pub async fn page(
    state: &AppState,
    app: &AppCaller,
    q: ConversationQuery,
    paging: PageQuery,
) -> AppResult<Page<ConversationSummary>> {
    let (agent_id, user) = scope_of_theirs(state, app, q.agent_id, q.open_id).await?;
    let Some(user) = user else {
        return Ok(Page::new(vec![], paging, 0));
    };
    let filter = SummaryFilter {
        agent_id,
        owner: Some(Owner::External(user)),
        active: None,
    };
    let (rows, total) = conv_repo::page(state.db(), &filter, paging.size(), paging.offset()).await?;
    Ok(Page::new(rows.into_iter().map(Into::into).collect(), paging, total))
}

pub async fn create(state: &AppState, app: &AppCaller, req: NewConversation) -> AppResult<ConversationCreated> {
    let conversation_id = match validate::optional(req.conversation_id) {
        Some(k) => key(Some(k))?,
        None => uuid::Uuid::new_v4().to_string(),
    };
    let title = validate::optional(req.title);
    if let Some(t) = &title {
        validate::length("title", t, 1, 200)?;
    }
    let (agent_id, open_id) = scope(state, app, req.agent_id, req.open_id).await?;
    let (user, _) = users::ensure(state, app, &open_id).await?;
    let (row, created) = conv_repo::ensure(state.db(), agent_id, Owner::External(user), &conversation_id).await?;
    let title = match title {
        Some(t) => {
            conv_repo::set_title(state.db(), row.id, &t).await?;
            t
        }
        None => row.title,
    };
    Ok(ConversationCreated {
        conversation_id,
        title,
        created,
    })
}

/// One conversation (404 when the user has none with this id), or all of the agent's.
pub async fn delete(state: &AppState, app: &AppCaller, q: ConversationQuery) -> AppResult<Deleted> {
    let one = validate::optional(q.conversation_id)
        .map(|k| key(Some(k)))
        .transpose()?;
    let (agent_id, user) = scope_of_theirs(state, app, q.agent_id, q.open_id).await?;
    match (one, user) {
        (Some(_), None) => Err(AppError::not_found("conversation")),
        (None, None) => Ok(Deleted { deleted: 0 }),
        (None, Some(user)) => Ok(Deleted {
            deleted: super::repo::delete_conversations(state.db(), agent_id, user).await?,
        }),
        (Some(k), Some(user)) => {
            let c = conv_repo::find(state.db(), agent_id, Owner::External(user), &k)
                .await?
                .ok_or_else(|| AppError::not_found("conversation"))?;
            conv_repo::delete(state.db(), c.id).await?;
            Ok(Deleted { deleted: 1 })
        }
    }
}

/// Stops the answer one of the user's conversations is generating (see the admin API's stop).
pub async fn stop(state: &AppState, app: &AppCaller, q: ConversationQuery) -> AppResult<Stopped> {
    let c = one_of_theirs(state, app, q).await?;
    crate::agents::conversations::stop_in(state, c.id).await
}

pub async fn messages(
    state: &AppState,
    app: &AppCaller,
    q: ConversationQuery,
    window: &MessageWindow,
) -> AppResult<Vec<MessageView>> {
    let c = one_of_theirs(state, app, q).await?;
    crate::agents::conversations::messages_of(state, c.id, window).await
}

/// The user's conversation `conversationId` names (404 for anyone else's).
async fn one_of_theirs(state: &AppState, app: &AppCaller, q: ConversationQuery) -> AppResult<ConversationRow> {
    let k = key(q.conversation_id)?;
    let (agent_id, user) = scope_of_theirs(state, app, q.agent_id, q.open_id).await?;
    let user = user.ok_or_else(|| AppError::not_found("conversation"))?;
    conv_repo::find(state.db(), agent_id, Owner::External(user), &k)
        .await?
        .ok_or_else(|| AppError::not_found("conversation"))
}
