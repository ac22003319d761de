//! Agent management: listing, detail, changes, market and subscriptions.

use super::conversation_repo::{HistoryOf, HistoryOwner};
use super::model::{AgentFields, AgentFilter, AgentRow, AgentView, ChatModelOption, MarketAgent};
use super::references;
use super::repo::{self, AgentData, ChatAgentRow, Viewer};
use crate::admission::UserAdmission;
use crate::creation_cap::{self, Created};
use crate::domain::{CurrentUser, Page, PageQuery};
use crate::models::{self, ModelType};
use crate::{validate, AppError, AppResult, AppState};

fn viewer(user: &CurrentUser) -> Viewer {
    Viewer {
        id: user.id,
        admin: user.is_admin(),
    }
}

/// An agent the caller may see (administrators all, others enabled ones and their own), or 404.
pub async fn visible(state: &AppState, user: &CurrentUser, id: i64) -> AppResult<AgentRow> {
    repo::find(state.db(), id, user.id)
        .await?
        .filter(|a| may_see(user, a))
        .ok_or_else(|| AppError::not_found("agent"))
}

/// `visible`, with the config of the agent's chat model and the history of the conversation
/// `conversation_key` names read in the same statement, and the user authenticated by it when
/// the request's count was left to it.
pub async fn visible_for_chat(
    state: &AppState,
    caller: UserAdmission,
    id: i64,
    conversation_key: Option<&str>,
) -> AppResult<(CurrentUser, ChatAgentRow)> {
    let history = |viewer| {
        conversation_key.map(|key| HistoryOf {
            owner: HistoryOwner::User(viewer),
            key,
        })
    };
    let (user, row) = match caller {
        UserAdmission::Known(user) => {
            let row = repo::find_for_chat(state.db(), id, user.id, history(user.id)).await?;
            (user, row)
        }
        // The history is looked up for the token's user; a token the statement refuses is
        // refused before the row is looked at.
        UserAdmission::Pending(pending) => {
            let viewer = pending.user_id().unwrap_or_default();
            let (user, row) = pending
                .count_with(state, |qb| repo::push_find_for_chat(qb, id, viewer, history(viewer)))
                .await?;
            let user = user.ok_or_else(|| AppError::unauthorized("not logged in; please log in again"))?;
            (user, row)
        }
    };
    match row.filter(|r| may_see(&user, &r.agent)) {
        Some(row) => Ok((user, row)),
        None => Err(AppError::not_found("agent")),
    }
}

fn may_see(user: &CurrentUser, agent: &AgentRow) -> bool {
    user.is_admin() || agent.is_enabled() || agent.creator_id == user.id
}

/// An agent the caller may change: its creator or an administrator.
pub async fn managed(state: &AppState, user: &CurrentUser, id: i64) -> AppResult<AgentRow> {
    let agent = visible(state, user, id).await?;
    if !user.can_manage(agent.creator_id) {
        return Err(AppError::Forbidden(
            "only the agent's creator or an administrator may change it".into(),
        ));
    }
    Ok(agent)
}

pub async fn page(
    state: &AppState,
    user: &CurrentUser,
    paging: PageQuery,
    filter: AgentFilter,
) -> AppResult<Page<AgentView>> {
    let (rows, total) = repo::page(state.db(), viewer(user), &filter, paging.size(), paging.offset()).await?;
    Ok(Page::new(
        rows.into_iter().map(|r| AgentView::seen_by(r, user)).collect(),
        paging,
        total,
    ))
}

/// The agent with its MCP servers and skills; every call counts as a view.
pub async fn detail(state: &AppState, user: &CurrentUser, id: i64) -> AppResult<AgentView> {
    let mut agent = visible(state, user, id).await?;
    repo::count_view(state.db(), id).await?;
    agent.view_count += 1;
    let (mcp_servers, skills) = references::expand(state, &agent).await?;
    let mut view = AgentView::seen_by(agent, user);
    view.mcp_servers = Some(mcp_servers);
    view.skills = Some(skills);
    Ok(view)
}

const DEFAULT_AVATAR: &str = "🤖";

fn blank() -> AgentData {
    AgentData {
        name: String::new(),
        description: String::new(),
        avatar: DEFAULT_AVATAR.to_owned(),
        instruction: String::new(),
        greeting: String::new(),
        preset_questions: vec![],
        chat_model_id: None,
        mcp_enabled: false,
        mcp_server_ids: vec![],
        skill_enabled: false,
        skill_ids: vec![],
        web_search_enabled: false,
        rag_enabled: false,
        rag_id: None,
        memory_enabled: false,
        memory_config_id: None,
        short_term_memory_size: 20,
        is_featured: false,
        app_id: None,
        status: 1,
    }
}

/// A text field of at most `max` characters; `layout`: line breaks and tabs allowed.
fn text(field: &str, value: Option<String>, (max, layout): (usize, bool), target: &mut String) -> AppResult<()> {
    if let Some(v) = value {
        let v = v.trim().to_owned();
        validate::length(field, &v, 0, max)?;
        validate::printable(field, &v, layout)?;
        *target = v;
    }
    Ok(())
}

fn preset_questions(questions: Vec<String>) -> AppResult<Vec<String>> {
    if questions.len() > 10 {
        return Err(AppError::validation("presetQuestions may hold at most 10 questions"));
    }
    questions
        .into_iter()
        .enumerate()
        .map(|(i, q)| {
            let q = q.trim().to_owned();
            let field = format!("presetQuestions[{i}]");
            validate::length(&field, &q, 1, 200)?;
            validate::printable(&field, &q, false)?;
            Ok(q)
        })
        .collect()
}

fn dedup(mut ids: Vec<i64>) -> Vec<i64> {
    let mut seen = std::collections::HashSet::new();
    ids.retain(|id| seen.insert(*id));
    ids
}

/// Characters an agent's texts may hold.
pub const MAX_NAME: usize = 100;
pub const MAX_DESCRIPTION: usize = 1000;
pub const MAX_INSTRUCTION: usize = 20_000;
pub const MAX_GREETING: usize = 2000;

/// Applies the sent fields over `data`, checking each one; the references it names anew are
/// checked to exist and be usable by the caller (`references::newly_named`).
async fn apply(state: &AppState, user: &CurrentUser, mut data: AgentData, f: AgentFields) -> AppResult<AgentData> {
    let before = data.clone();
    if let Some(name) = f.name {
        let name = name.trim().to_owned();
        validate::length("name", &name, 1, MAX_NAME)?;
        validate::printable("name", &name, false)?;
        data.name = name;
    }
    text(
        "description",
        f.description,
        (MAX_DESCRIPTION, true),
        &mut data.description,
    )?;
    text(
        "instruction",
        f.instruction,
        (MAX_INSTRUCTION, true),
        &mut data.instruction,
    )?;
    text("greeting", f.greeting, (MAX_GREETING, true), &mut data.greeting)?;
    text("avatar", f.avatar, (512, false), &mut data.avatar)?;
    if data.avatar.is_empty() {
        DEFAULT_AVATAR.clone_into(&mut data.avatar);
    }
    if let Some(q) = f.preset_questions {
        data.preset_questions = preset_questions(q)?;
    }
    if let Some(size) = f.short_term_memory_size {
        validate::range("shortTermMemorySize", i64::from(size), 0, 200)?;
        data.short_term_memory_size = size;
    }
    if let Some(status) = f.status {
        if !matches!(status, 0 | 1) {
            return Err(AppError::validation("status must be 1 (enabled) or 0 (disabled)"));
        }
        data.status = status;
    }
    if let Some(featured) = f.is_featured {
        if featured != data.is_featured && !user.is_admin() {
            return Err(AppError::Forbidden("only administrators may feature agents".into()));
        }
        data.is_featured = featured;
    }
    macro_rules! flag {
        ($($field:ident),*) => { $( if let Some(v) = f.$field { data.$field = v; } )* };
    }
    flag!(
        mcp_enabled,
        skill_enabled,
        web_search_enabled,
        rag_enabled,
        memory_enabled
    );
    if let Some(id) = f.chat_model_id {
        data.chat_model_id = id;
    }
    if let Some(id) = f.rag_id {
        data.rag_id = id;
    }
    if let Some(id) = f.memory_config_id {
        data.memory_config_id = id;
    }
    if let Some(app) = f.app_id {
        let app = validate::optional(app);
        references::check_app(state, user, app.as_deref(), data.app_id.as_deref()).await?;
        data.app_id = app;
    }
    if let Some(ids) = f.mcp_server_ids {
        data.mcp_server_ids = at_most_ids("mcpServerIds", dedup(ids), MAX_MCP_SERVERS)?;
    }
    if let Some(ids) = f.skill_ids {
        data.skill_ids = at_most_ids("skillIds", dedup(ids), MAX_SKILLS)?;
    }
    references::check(state, user, &references::newly_named(&data, &before)).await?;
    Ok(data)
}

/// The MCP servers an agent may use: every server's tools (up to 256 each) go to the model on
/// every step of a turn, and each opens a session in the chat's process. A hundred servers of
/// one user's made each turn list tens of thousands of tools, in memory shared with every other
/// chat of the instance.
pub const MAX_MCP_SERVERS: usize = 20;
/// The skills an agent may use: each one's name and description go into every turn's prompt.
pub const MAX_SKILLS: usize = 50;

fn at_most_ids(field: &str, ids: Vec<i64>, max: usize) -> AppResult<Vec<i64>> {
    if ids.len() > max {
        return Err(AppError::validation(format!(
            "{field} may hold at most {max} ids, not {}",
            ids.len()
        )));
    }
    Ok(ids)
}

/// Creates an agent from its fields (`name` required).
pub async fn create(state: &AppState, user: &CurrentUser, f: AgentFields) -> AppResult<i64> {
    if validate::optional(f.name.clone()).is_none() {
        return Err(AppError::validation("name is required"));
    }
    let data = apply(state, user, blank(), f).await?;
    let mut tx = state.db().begin().await?;
    creation_cap::check(&mut tx, state.config(), user, Created::Agent).await?;
    references::hold(user, user.id, &mut tx, &data, &data).await?;
    let id = repo::insert(&mut *tx, &data, user.id).await?;
    tx.commit().await?;
    Ok(id)
}

pub async fn update(state: &AppState, user: &CurrentUser, id: i64, f: AgentFields) -> AppResult<AgentView> {
    let agent = managed(state, user, id).await?;
    let before = AgentData::from(&agent);
    let data = apply(state, user, before.clone(), f).await?;
    let mut tx = state.db().begin().await?;
    let fresh = references::newly_named(&data, &before);
    references::hold(user, agent.creator_id, &mut tx, &data, &fresh).await?;
    if !repo::update(&mut *tx, id, agent.update_dt, &data).await? {
        // Deleted meanwhile is not "changed": reloading it would find nothing.
        return Err(match repo::exists(&mut *tx, id).await? {
            true => AppError::changed_meanwhile("agent"),
            false => AppError::not_found("agent"),
        });
    }
    tx.commit().await?;
    let row = repo::find(state.db(), id, user.id)
        .await?
        .ok_or_else(|| AppError::not_found("agent"))?;
    Ok(AgentView::seen_by(row, user))
}

pub async fn delete(state: &AppState, user: &CurrentUser, id: i64) -> AppResult<()> {
    managed(state, user, id).await?;
    repo::delete(state.db(), id).await?;
    Ok(())
}

pub async fn market(state: &AppState, user: &CurrentUser) -> AppResult<Vec<MarketAgent>> {
    let rows = repo::market(state.db(), user.id).await?;
    Ok(rows.into_iter().map(MarketAgent::from).collect())
}

pub async fn mine(state: &AppState, user: &CurrentUser) -> AppResult<Vec<AgentView>> {
    let rows = repo::mine(state.db(), user.id, user.is_admin()).await?;
    Ok(rows.into_iter().map(|r| AgentView::seen_by(r, user)).collect())
}

/// Subscribing twice, or unsubscribing when not subscribed, is not an error. Unsubscribing
/// needs no sight of the agent: one disabled since is hidden from its subscribers, who could
/// otherwise never leave it (it came back to their list when enabled again).
pub async fn subscribe(state: &AppState, user: &CurrentUser, id: i64, on: bool) -> AppResult<()> {
    if !on {
        repo::unsubscribe(state.db(), id, user.id).await?;
        return Ok(());
    }
    let agent = visible(state, user, id).await?;
    if !agent.is_enabled() {
        return Err(AppError::business("this agent is disabled and cannot be subscribed to"));
    }
    repo::subscribe(state.db(), id, user.id).await?;
    Ok(())
}

/// Enabled CHAT models the caller can use, with their capabilities.
pub async fn chat_models(state: &AppState, user: &CurrentUser) -> AppResult<Vec<ChatModelOption>> {
    let rows = models::service::usable(state, user, ModelType::Chat, None).await?;
    Ok(rows
        .into_iter()
        .map(|r| ChatModelOption {
            capabilities: models::model::capabilities(&r.config_json),
            id: r.id,
            value: r.model_key,
            label: r.model_name,
        })
        .collect())
}
