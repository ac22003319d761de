//! Agents an app may use: every enabled agent that runs on this app or on no app in
//! particular; agents bound to another app and disabled agents are invisible.

use super::model::{AgentQuery, ExternalAgent, OpenIdQuery, SubscriptionRequest};
use super::{repo, users};
use crate::admission::Pending;
use crate::agents::conversation_repo::HistoryOf;
use crate::agents::repo::{self as agent_repo, ChatAgentRow};
use crate::agents::AgentRow;
use crate::domain::AppCaller;
use crate::{validate, AppError, AppResult, AppState};

pub const UNAVAILABLE: &str = "agent does not exist or is disabled";

fn unavailable() -> AppError {
    AppError::business(UNAVAILABLE)
}

/// The viewer's external user id, 0 when no openId was given or it is unknown.
async fn viewer(state: &AppState, app: &AppCaller, open_id: Option<String>) -> AppResult<i64> {
    match validate::optional(open_id) {
        Some(o) => Ok(users::existing(state, app, &users::check_open_id(Some(o))?)
            .await?
            .unwrap_or(0)),
        None => Ok(0),
    }
}

pub async fn list(state: &AppState, app: &AppCaller, q: OpenIdQuery) -> AppResult<Vec<ExternalAgent>> {
    let viewer = viewer(state, app, q.open_id).await?;
    Ok(repo::agents(state.db(), &app.app_id, viewer)
        .await?
        .into_iter()
        .map(Into::into)
        .collect())
}

pub async fn detail(state: &AppState, app: &AppCaller, q: AgentQuery) -> AppResult<ExternalAgent> {
    let id = validate::present("agentId", q.agent_id)?;
    let viewer = viewer(state, app, q.open_id).await?;
    repo::agent(state.db(), &app.app_id, viewer, id)
        .await?
        .map(Into::into)
        .ok_or_else(unavailable)
}

/// The full agent row for chatting, if this app may use it.
pub async fn usable(state: &AppState, app: &AppCaller, id: i64) -> AppResult<AgentRow> {
    agent_repo::find(state.db(), id, 0)
        .await?
        .filter(|a| may_use(app, a))
        .ok_or_else(unavailable)
}

/// `usable`, with the config of the agent's chat model and the history of the conversation
/// the turn continues read in the same statement, which counts the request too when its count
/// was left to it.
pub async fn usable_for_chat(
    state: &AppState,
    app: &AppCaller,
    id: i64,
    history: Option<HistoryOf<'_>>,
    count: Option<&Pending>,
) -> AppResult<ChatAgentRow> {
    let row = match count {
        Some(pending) => {
            let (_, row) = pending
                .count_with(state, |qb| agent_repo::push_find_for_chat(qb, id, 0, history))
                .await?;
            row
        }
        None => agent_repo::find_for_chat(state.db(), id, 0, history).await?,
    };
    row.filter(|r| may_use(app, &r.agent)).ok_or_else(unavailable)
}

fn may_use(app: &AppCaller, agent: &AgentRow) -> bool {
    agent.is_enabled() && agent.app_id.as_deref().is_none_or(|bound| bound == app.app_id)
}

pub async fn subscribed(state: &AppState, app: &AppCaller, q: OpenIdQuery) -> AppResult<Vec<ExternalAgent>> {
    let open_id = users::check_open_id(q.open_id)?;
    let Some(user) = users::existing(state, app, &open_id).await? else {
        return Ok(vec![]);
    };
    Ok(repo::subscribed_agents(state.db(), &app.app_id, user)
        .await?
        .into_iter()
        .map(Into::into)
        .collect())
}

/// Subscribes (idempotent) or unsubscribes the user.
pub async fn subscribe(state: &AppState, app: &AppCaller, req: SubscriptionRequest, on: bool) -> AppResult<()> {
    let agent_id = validate::present("agentId", req.agent_id)?;
    let open_id = users::check_open_id(req.open_id)?;
    if on {
        usable(state, app, agent_id).await?;
        let (user, _) = users::ensure(state, app, &open_id).await?;
        repo::subscribe(state.db(), agent_id, user).await?;
    } else if let Some(user) = users::existing(state, app, &open_id).await? {
        repo::unsubscribe(state.db(), agent_id, user).await?;
    }
    Ok(())
}
