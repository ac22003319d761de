//! What an agent points at (chat model, knowledge base, app, MCP servers, skills, memory
//! config): checked on every change, expanded in detail.

use super::model::AgentRow;
use super::repo::{self, AgentData};
use sqlx::PgConnection;

use crate::domain::CurrentUser;
use crate::mcp::McpServerBrief;
use crate::models::{self, ModelType};
use crate::rag::bases;
use crate::skills::SkillBrief;
use crate::{AppError, AppResult, AppState};

/// The references of `data` that `before` did not have: only those are checked. One
/// the agent already had was checked when it was set, and an edit of anything else must not
/// fail on it (a model disabled since, a server its owner can no longer offer); chat judges
/// it when it runs. Every reference is still held while the agent is written (`hold`).
pub fn newly_named(data: &AgentData, before: &AgentData) -> AgentData {
    let new_ids = |now: &[i64], had: &[i64]| now.iter().copied().filter(|id| !had.contains(id)).collect();
    AgentData {
        chat_model_id: data
            .chat_model_id
            .filter(|_| data.chat_model_id != before.chat_model_id),
        rag_id: data.rag_id.filter(|_| data.rag_id != before.rag_id),
        memory_config_id: data
            .memory_config_id
            .filter(|_| data.memory_config_id != before.memory_config_id),
        mcp_server_ids: new_ids(&data.mcp_server_ids, &before.mcp_server_ids),
        skill_ids: new_ids(&data.skill_ids, &before.skill_ids),
        app_id: data.app_id.clone().filter(|_| data.app_id != before.app_id),
        ..data.clone()
    }
}

/// Each reference must exist and be usable by the caller; the error names the field. The app
/// binding is checked apart (`check_app`): it is the one reference kept as it is on update.
pub async fn check(state: &AppState, user: &CurrentUser, d: &AgentData) -> AppResult<()> {
    if let Some(id) = d.chat_model_id {
        models::service::usable_config(state, user, "chatModelId", id, ModelType::Chat).await?;
    }
    if let Some(id) = d.rag_id {
        let kb = bases::repo::find(state.db(), id).await?;
        if !kb.is_some_and(|kb| user.can_manage(kb.creator_id)) {
            return Err(AppError::validation(format!(
                "ragId: knowledge base {id} does not exist"
            )));
        }
    }
    crate::skills::ensure_exist(state.db(), "skillIds", &d.skill_ids).await?;
    let usable = crate::mcp::usable_ids(state.db(), user, &d.mcp_server_ids).await?;
    if let Some(id) = d.mcp_server_ids.iter().find(|id| !usable.contains(id)) {
        return Err(AppError::validation(format!(
            "mcpServerIds: MCP server {id} does not exist or is not available to you"
        )));
    }
    Ok(())
}

/// The agent's chat model, memory config, MCP servers, skills, knowledge base and app, held
/// (`FOR SHARE`) by the transaction that writes the agent (a base or app deleted between the
/// check and the write failed the write on its foreign key: 500). A retype of the model or an edit of the config meanwhile
/// either sees this binding when it checks their users, or is seen here (the model and the
/// config's models are checked again under the hold); a server or skill deleted meanwhile is
/// either taken out of this agent by its deletion, which waits for this write, or found gone
/// here.
/// The models are held in one statement (in id order), after the config, as a config's
/// edit takes the config before its models. Every reference is held; only those `fresh`
/// names (`newly_named`) have their models checked again.
/// `owner` is the agent's creator: whose memory config it may be given.
pub async fn hold(
    user: &CurrentUser,
    owner: i64,
    conn: &mut PgConnection,
    d: &AgentData,
    fresh: &AgentData,
) -> AppResult<()> {
    let mut named: Vec<models::service::ModelRef<'_>> = fresh
        .chat_model_id
        .map(|id| models::service::ModelRef {
            field: "chatModelId",
            id,
            t: ModelType::Chat,
        })
        .into_iter()
        .collect();
    if let Some(id) = d.memory_config_id {
        let config = crate::memory::config_repo::find_held(conn, id)
            .await?
            .ok_or_else(|| AppError::validation(format!("memoryConfigId: memory config {id} does not exist")))?;
        if fresh.memory_config_id.is_some() {
            // Whoever manages the config decides what the agent stores and recalls (its status,
            // its extraction prompt, its expiry): someone else's config would hand them the agent's
            // memory, so only the agent owner's own and administrators' are bound.
            if config.creator_id != owner && !crate::memory::config_repo::by_operator(&mut *conn, id).await? {
                return Err(AppError::validation(format!(
                    "memoryConfigId: memory config {id} is another user's; bind one of yours or an administrator's"
                )));
            }
            named.extend(config.model_refs("memoryConfigId"));
        }
    }
    models::service::hold_usable(conn, user, &named).await?;
    for (field, held_ids, ids) in [
        (
            "mcpServerIds",
            "SELECT id FROM mcp_servers WHERE id = ANY($1) FOR SHARE",
            d.mcp_server_ids.as_slice(),
        ),
        (
            "skillIds",
            "SELECT id FROM skills WHERE id = ANY($1) FOR SHARE",
            d.skill_ids.as_slice(),
        ),
        (
            "ragId",
            "SELECT id FROM knowledge_bases WHERE id = ANY($1) FOR SHARE",
            d.rag_id.as_slice(),
        ),
    ] {
        if ids.is_empty() {
            continue;
        }
        let held: Vec<i64> = sqlx::query_scalar(held_ids).bind(ids).fetch_all(&mut *conn).await?;
        if let Some(gone) = ids.iter().find(|id| !held.contains(id)) {
            return Err(AppError::validation(format!("{field}: {gone} was deleted meanwhile")));
        }
    }
    if let Some(app) = &d.app_id {
        let held: Option<i32> = sqlx::query_scalar("SELECT 1 FROM apps WHERE app_id = $1 FOR SHARE")
            .bind(app)
            .fetch_optional(&mut *conn)
            .await?;
        if held.is_none() {
            return Err(AppError::validation(format!("appId: app {app} was deleted meanwhile")));
        }
    }
    Ok(())
}

/// Binding an agent to an app sends its chats to the app's client nodes, so only
/// administrators bind. A regular user naming any app gets the answer of an unknown one, so
/// app ids tell them nothing. Keeping the app an agent already has is not a new binding (an
/// administrator may bind a user's agent, and its owner may still edit the rest).
pub async fn check_app(
    state: &AppState,
    user: &CurrentUser,
    app: Option<&str>,
    current: Option<&str>,
) -> AppResult<()> {
    if app == current {
        return Ok(());
    }
    match app {
        // The binding keeps the agent to one app's partners: its owner taking it out would
        // open it to every app's.
        None if !user.is_admin() => Err(AppError::Forbidden(
            "appId: only administrators take an agent out of its app".to_owned(),
        )),
        None => Ok(()),
        Some(app) if !user.is_admin() || !repo::app_exists(state.db(), app).await? => {
            Err(AppError::validation(format!("appId: app {app} does not exist")))
        }
        Some(_) => Ok(()),
    }
}

/// The agent's MCP servers and skills, in the order the agent lists them.
pub async fn expand(state: &AppState, agent: &AgentRow) -> AppResult<(Vec<McpServerBrief>, Vec<SkillBrief>)> {
    let servers = crate::mcp::briefs(state.db(), &agent.mcp_server_ids).await?;
    let skills = crate::skills::briefs(state.db(), &agent.skill_ids).await?;
    Ok((servers, skills))
}

/// Refuses a model put into something agents are bound to (`binding`) when some bound agent may
/// not run it (`repo::bound_agents_barred`); the refusal names the field and how many agents.
pub async fn check_bound_agents_may_run(
    db: impl sqlx::PgExecutor<'_>,
    binding: repo::Binding,
    added: &[models::service::ModelRef<'_>],
    editor: &CurrentUser,
) -> AppResult<()> {
    if added.is_empty() {
        return Ok(());
    }
    let ids: Vec<i64> = added.iter().map(|r| r.id).collect();
    let barred = repo::bound_agents_barred(db, binding, &ids, editor.is_admin()).await?;
    for r in added {
        if let Some((_, agents)) = barred.iter().find(|(model, _)| *model == r.id) {
            return Err(AppError::validation(format!(
                "{}: model {} is not available to the creators of {agents} agent(s) using this {}",
                r.field,
                r.id,
                binding.noun()
            )));
        }
    }
    Ok(())
}
