//! Conversations of an agent: listing, messages, deletion.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use super::conversation_repo::{self as repo, ConversationRow, MessageRow, SummaryFilter, SummaryRow};
use super::period::PeriodQuery;
use super::service;
use crate::domain::Owner;
use crate::domain::{CurrentUser, Page, PageQuery};
use crate::{time, validate, AppError, AppResult, AppState};

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConversationSummary {
    pub conversation_id: String,
    pub title: String,
    pub user_name: String,
    pub message_count: i64,
    pub tool_call_count: i64,
    pub create_dt: String,
    pub last_message_dt: String,
}

impl From<SummaryRow> for ConversationSummary {
    fn from(r: SummaryRow) -> Self {
        Self {
            conversation_id: r.conversation_key,
            title: r.title,
            user_name: r.user_name,
            message_count: r.message_count,
            tool_call_count: r.tool_call_count,
            create_dt: time::datetime(r.create_dt),
            last_message_dt: time::datetime(r.last_message_dt),
        }
    }
}

/// A conversation as the admin API lists it: the summary, and whose it is. Partners see the
/// summary alone (their end users' ids here are the service's own, shared by every app).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OwnedConversation {
    #[serde(flatten)]
    pub summary: ConversationSummary,
    /// The admin-API user whose conversation it is; `null` for a partner's end user.
    pub user_id: Option<i64>,
    /// The partner's end user whose conversation it is; `null` for an admin-API user. Two
    /// owners may choose the same `conversationId`: its messages and deletion take the owner's
    /// id then.
    pub external_user_id: Option<i64>,
}

impl From<SummaryRow> for OwnedConversation {
    fn from(r: SummaryRow) -> Self {
        Self {
            user_id: r.user_id,
            external_user_id: r.external_user_id,
            summary: r.into(),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MessageView {
    pub id: i64,
    /// user, assistant or system.
    pub role: String,
    pub content: String,
    /// The model's reasoning, on assistant messages that have one; `null` otherwise.
    pub thinking: Option<String>,
    /// `[{type: IMAGE, resourceId}]` on user messages.
    #[schema(value_type = Vec<crate::agents::chat::attachments::Image>)]
    pub attachments: Value,
    /// Tool calls made while answering.
    #[schema(value_type = Vec<StoredToolCall>)]
    pub tool_calls: Value,
    /// 0 generating, 1 complete, 2 failed, 3 stopped (the client went away, or a stop was asked for).
    pub status: i16,
    pub create_dt: String,
}

impl From<MessageRow> for MessageView {
    fn from(r: MessageRow) -> Self {
        Self {
            id: r.id,
            thinking: r.thinking.filter(|_| r.role == "assistant"),
            role: r.role,
            content: r.content,
            attachments: r.attachments,
            tool_calls: r.tool_calls,
            status: r.status,
            create_dt: time::datetime(r.create_dt),
        }
    }
}

/// The agent's managers (creator, administrators) see every conversation; others their own,
/// also on an agent hidden from them since they chatted (disabled): their conversations stay
/// theirs to read and delete. With none, a hidden agent answers as an unknown one.
pub async fn page(
    state: &AppState,
    user: &CurrentUser,
    agent_id: i64,
    paging: PageQuery,
    period: PeriodQuery,
) -> AppResult<Page<OwnedConversation>> {
    let own = Some(Owner::User(user.id));
    let (owner, hidden) = match service::visible(state, user, agent_id).await {
        Ok(agent) => (
            (!user.can_manage(agent.creator_id)).then_some(Owner::User(user.id)),
            None,
        ),
        Err(e @ AppError::NotFound(_)) => (own, Some(e)),
        Err(e) => return Err(e),
    };
    let filter = SummaryFilter {
        agent_id,
        owner,
        active: period.range()?,
    };
    let (rows, total) = repo::page(state.db(), &filter, paging.size(), paging.offset()).await?;
    if let (Some(unknown), 0) = (hidden, total) {
        // None in the period asked is not none at all.
        let any = SummaryFilter { active: None, ..filter };
        if repo::page(state.db(), &any, 1, 0).await?.1 == 0 {
            return Err(unknown);
        }
    }
    Ok(Page::new(rows.into_iter().map(Into::into).collect(), paging, total))
}

/// Whose conversation a manager means, as the summary lists it: needed only when several
/// owners chose the same `conversationId`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct Whose {
    /// An admin-API user's id.
    pub user_id: Option<i64>,
    /// A partner's end user's id (`externalUserId` of the summary).
    pub external_user_id: Option<i64>,
}

impl Whose {
    fn owner(&self) -> AppResult<Option<Owner>> {
        match (self.user_id, self.external_user_id) {
            (Some(_), Some(_)) => Err(AppError::validation(
                "userId, externalUserId: name one of them, not both",
            )),
            (Some(id), None) => Ok(Some(Owner::User(id))),
            (None, Some(id)) => Ok(Some(Owner::External(id))),
            (None, None) => Ok(None),
        }
    }
}

/// The caller's own conversation with this id (whether or not the agent is still visible to
/// them, as in `page`), or (for the agent's managers) the named owner's, or the one owner's
/// who chose it. Several owners with the id and none named is 409: picking one (the newest, as
/// this once did) read or deleted another person's conversation than the one listed. That
/// holds when the manager is one of the owners too: their own, taken first, was deleted for
/// the row of someone else's that the list showed.
async fn resolve(
    state: &AppState,
    user: &CurrentUser,
    agent_id: i64,
    key: &str,
    whose: &Whose,
) -> AppResult<ConversationRow> {
    let unknown = || AppError::not_found("conversation");
    let own = Owner::User(user.id);
    let named = whose.owner()?;
    if named.is_none_or(|o| o == own) {
        if let Some(c) = repo::find(state.db(), agent_id, own, key).await? {
            let managed = match named {
                Some(_) => None,
                // Only "not visible" means "not a manager": a database failure taken for it
                // would answer with the caller's own conversation past the several-owners
                // refusal (and a delete would take it).
                None => match service::visible(state, user, agent_id).await {
                    Ok(a) => Some(a).filter(|a| user.can_manage(a.creator_id)),
                    Err(AppError::NotFound(_)) => None,
                    Err(e) => return Err(e),
                },
            };
            if managed.is_some() && repo::find_any(state.db(), agent_id, key).await?.len() > 1 {
                return Err(several_owners(agent_id, key));
            }
            return Ok(c);
        }
    }
    let agent = service::visible(state, user, agent_id).await?;
    if !user.can_manage(agent.creator_id) {
        return Err(unknown());
    }
    if let Some(owner) = named {
        // Their own was looked for above.
        return match owner == own {
            true => Err(unknown()),
            false => repo::find(state.db(), agent_id, owner, key).await?.ok_or_else(unknown),
        };
    }
    let mut found = repo::find_any(state.db(), agent_id, key).await?;
    match found.len() {
        1 => Ok(found.remove(0)),
        2.. => Err(several_owners(agent_id, key)),
        _ => Err(unknown()),
    }
}

fn several_owners(agent_id: i64, key: &str) -> AppError {
    AppError::Conflict(format!(
        "several people's conversations of this agent have conversationId {key}; \
         say whose with userId or externalUserId, as GET /agent/{agent_id}/conversations lists them"
    ))
}

/// Which of a conversation's messages to read: all by default (the spec's answer); a long
/// conversation is read backwards a window at a time, each `beforeId` the first id of the last
/// window. Unbounded, one of a few hundred long turns passed the 6 MB a buffered function may
/// answer, and could not be read at all.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct MessageWindow {
    /// Only messages older than the message with this id.
    pub before_id: Option<i64>,
    /// At most this many, the newest of them (1 to 1,000); all when absent.
    pub limit: Option<i64>,
}

impl MessageWindow {
    pub const MAX_LIMIT: i64 = 1000;

    fn checked(&self) -> AppResult<(Option<i64>, Option<i64>)> {
        if let Some(limit) = self.limit {
            validate::range("limit", limit, 1, Self::MAX_LIMIT)?;
        }
        if let Some(id) = self.before_id {
            validate::range("beforeId", id, 1, i64::MAX)?;
        }
        Ok((self.before_id, self.limit))
    }
}

/// The messages of conversation `id` within `window`, oldest first.
pub async fn messages_of(state: &AppState, id: i64, window: &MessageWindow) -> AppResult<Vec<MessageView>> {
    let (before_id, limit) = window.checked()?;
    let rows = repo::messages(state.db(), id, before_id, limit).await?;
    Ok(rows.into_iter().map(Into::into).collect())
}

pub async fn messages(
    state: &AppState,
    user: &CurrentUser,
    (agent_id, key): (i64, &str),
    whose: &Whose,
    window: &MessageWindow,
) -> AppResult<Vec<MessageView>> {
    let c = resolve(state, user, agent_id, key, whose).await?;
    messages_of(state, c.id, window).await
}

/// Whether a stop found an answer being generated.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Stopped {
    /// False when the conversation had no answer under way (it had ended, or none began).
    pub stopped: bool,
}

/// Stops the answer the conversation is generating, wherever its turn runs: the turn ends it
/// within about a second, keeping what was generated (status 3), and its stream ends with a
/// `stopped` line. Closing the connection stops a turn only where the closing reaches the
/// service, which API Gateway's streamed responses do not promise.
pub async fn stop(state: &AppState, user: &CurrentUser, agent_id: i64, key: &str, whose: &Whose) -> AppResult<Stopped> {
    let c = resolve(state, user, agent_id, key, whose).await?;
    stop_in(state, c.id).await
}

pub async fn stop_in(state: &AppState, conversation_id: i64) -> AppResult<Stopped> {
    Ok(Stopped {
        stopped: repo::ask_stop(state.db(), conversation_id).await?,
    })
}

pub async fn delete(state: &AppState, user: &CurrentUser, agent_id: i64, key: &str, whose: &Whose) -> AppResult<()> {
    let c = resolve(state, user, agent_id, key, whose).await?;
    repo::delete(state.db(), c.id).await?;
    Ok(())
}

/// A tool call of a stored answer, for the API document.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StoredToolCall {
    pub name: String,
    /// The MCP server of the tool; absent for built-in tools (skills, web search).
    pub server_id: Option<i64>,
    #[schema(value_type = Object)]
    pub arguments: serde_json::Value,
    pub ok: bool,
}
