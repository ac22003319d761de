//! SQL of the agents module.

use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use sqlx::types::Json;
use sqlx::{PgExecutor, PgPool, Postgres, QueryBuilder};

use super::conversation_repo::{self, HistoryMessage, HistoryOf};
use super::model::{AgentFilter, AgentRow, AgentSort};
use crate::models::{self, ModelConfigRow};
use crate::users::repo::escape_like;

/// Everything an agent's row stores that a caller can set.
#[derive(Debug, Clone)]
pub struct AgentData {
    pub name: String,
    pub description: String,
    pub avatar: String,
    pub instruction: String,
    pub greeting: String,
    pub preset_questions: Vec<String>,
    pub chat_model_id: Option<i64>,
    pub mcp_enabled: bool,
    pub mcp_server_ids: Vec<i64>,
    pub skill_enabled: bool,
    pub skill_ids: Vec<i64>,
    pub web_search_enabled: bool,
    pub rag_enabled: bool,
    pub rag_id: Option<i64>,
    pub memory_enabled: bool,
    pub memory_config_id: Option<i64>,
    pub short_term_memory_size: i32,
    pub is_featured: bool,
    pub app_id: Option<String>,
    pub status: i16,
}

impl From<&AgentRow> for AgentData {
    fn from(r: &AgentRow) -> Self {
        Self {
            name: r.name.clone(),
            description: r.description.clone(),
            avatar: r.avatar.clone(),
            instruction: r.instruction.clone(),
            greeting: r.greeting.clone(),
            preset_questions: r.preset_questions.clone(),
            chat_model_id: r.chat_model_id,
            mcp_enabled: r.mcp_enabled,
            mcp_server_ids: r.mcp_server_ids.clone(),
            skill_enabled: r.skill_enabled,
            skill_ids: r.skill_ids.clone(),
            web_search_enabled: r.web_search_enabled,
            rag_enabled: r.rag_enabled,
            rag_id: r.rag_id,
            memory_enabled: r.memory_enabled,
            memory_config_id: r.memory_config_id,
            short_term_memory_size: r.short_term_memory_size,
            is_featured: r.is_featured,
            app_id: r.app_id.clone(),
            status: r.status,
        }
    }
}

/// The select list of an `AgentRow`, as seen by the viewer bound next.
fn select(viewer: i64) -> QueryBuilder<'static, Postgres> {
    let mut qb = QueryBuilder::new("");
    push_select(&mut qb, viewer, "");
    qb
}

/// The select list with more columns (`, expr AS name`) after the agent's own.
fn push_select(qb: &mut QueryBuilder<'_, Postgres>, viewer: i64, more: &str) {
    qb.push(
        "SELECT a.id, a.name, a.description, a.avatar, a.instruction, a.greeting, a.preset_questions,
           a.chat_model_id, m.model_key AS chat_model, a.mcp_enabled, a.mcp_server_ids, a.skill_enabled,
           a.skill_ids, a.web_search_enabled, a.rag_enabled, a.rag_id, a.memory_enabled, a.memory_config_id,
           a.short_term_memory_size, a.is_featured, a.app_id, a.status, a.view_count, a.creator_id,
           u.username AS creator, a.create_dt, a.update_dt,
           EXISTS (SELECT 1 FROM agent_subscriptions s WHERE s.agent_id = a.id AND s.user_id = ",
    );
    qb.push_bind(viewer);
    qb.push(") AS subscribed");
    qb.push(more);
    qb.push(" FROM agents a JOIN users u ON u.id = a.creator_id LEFT JOIN model_configs m ON m.id = a.chat_model_id");
}

pub async fn find(db: &PgPool, id: i64, viewer: i64) -> sqlx::Result<Option<AgentRow>> {
    let mut qb = select(viewer);
    qb.push(" WHERE a.id = ").push_bind(id);
    qb.build_query_as().fetch_optional(db).await
}

/// An agent with the config of the model it chats with.
#[derive(sqlx::FromRow)]
pub struct ChatAgentRow {
    #[sqlx(flatten)]
    pub agent: AgentRow,
    /// Its own chat model or, without one, the default chat model; None when that is missing.
    pub chat_model_config: Option<Json<ModelConfigRow>>,
    /// The conversation's short-term history before this turn (`conversation_repo::history_sql`).
    pub history: Json<Vec<HistoryMessage>>,
}

/// The agent, its chat model and the history of the conversation the turn continues, in one
/// statement: a chat reads them before its first token, and each round trip waits its turn for
/// a loaded machine's CPU. With the history read here, the turn's own statement (a write) can
/// run while the model is called.
pub async fn find_for_chat(
    db: &PgPool,
    id: i64,
    viewer: i64,
    history: Option<HistoryOf<'_>>,
) -> sqlx::Result<Option<ChatAgentRow>> {
    let mut qb = QueryBuilder::new("");
    push_find_for_chat(&mut qb, id, viewer, history);
    qb.build_query_as().fetch_optional(db).await
}

/// The SELECT of `find_for_chat`, for a statement that carries it (a request's rate-limit count).
pub fn push_find_for_chat(qb: &mut QueryBuilder<'_, Postgres>, id: i64, viewer: i64, history: Option<HistoryOf<'_>>) {
    push_select(qb, viewer, &CHAT_COLUMNS);
    conversation_repo::push_history_join(qb, history);
    qb.push(" WHERE a.id = ").push_bind(id);
}

static CHAT_COLUMNS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "{}{}",
        *models::repo::CHAT_CONFIG_OF_AGENT,
        conversation_repo::HISTORY_COLUMN
    )
});

/// Who sees what: administrators every agent, others the enabled ones and their own.
#[derive(Debug, Clone, Copy)]
pub struct Viewer {
    pub id: i64,
    pub admin: bool,
}

fn push_filter(qb: &mut QueryBuilder<'_, Postgres>, viewer: Viewer, f: &AgentFilter) {
    qb.push(" WHERE TRUE");
    if !viewer.admin {
        qb.push(" AND (a.status = 1 OR a.creator_id = ")
            .push_bind(viewer.id)
            .push(")");
    }
    if let Some(k) = f.keyword.as_deref().map(str::trim).filter(|k| !k.is_empty()) {
        let pattern = format!("%{}%", escape_like(k));
        qb.push(" AND (a.name ILIKE ")
            .push_bind(pattern.clone())
            .push(" OR a.description ILIKE ")
            .push_bind(pattern)
            .push(")");
    }
    if let Some(featured) = f.featured {
        qb.push(" AND a.is_featured = ").push_bind(featured);
    }
}

pub async fn page(
    db: &PgPool,
    viewer: Viewer,
    f: &AgentFilter,
    limit: i64,
    offset: i64,
) -> sqlx::Result<(Vec<AgentRow>, i64)> {
    let mut count = QueryBuilder::new("SELECT count(*) FROM agents a");
    push_filter(&mut count, viewer, f);
    let total: i64 = count.build_query_scalar().fetch_one(db).await?;
    let mut rows = select(viewer.id);
    push_filter(&mut rows, viewer, f);
    rows.push(match f.sort.unwrap_or_default() {
        AgentSort::Latest => " ORDER BY a.create_dt DESC, a.id DESC",
        AgentSort::Popular => " ORDER BY a.view_count DESC, a.id DESC",
    });
    rows.push(" LIMIT ").push_bind(limit).push(" OFFSET ").push_bind(offset);
    Ok((rows.build_query_as().fetch_all(db).await?, total))
}

/// Agents the market lists at most: it is not paged, and every user's agents are in it.
pub const MARKET_MAX: i64 = 500;

/// The first `MARKET_MAX` enabled agents, featured first, then the most viewed.
pub async fn market(db: &PgPool, viewer: i64) -> sqlx::Result<Vec<AgentRow>> {
    let mut qb = select(viewer);
    qb.push(" WHERE a.status = 1 ORDER BY a.is_featured DESC, a.view_count DESC, a.id DESC LIMIT ")
        .push_bind(MARKET_MAX);
    qb.build_query_as().fetch_all(db).await
}

/// The most agents `mine` lists. Subscriptions have no cap and an administrator's creations
/// none either; each row carries its instruction (up to 20,000 characters), and an unpaged
/// list grew past what a response may carry (6 MB under Lambda), for good.
pub const MINE_MAX: i64 = 500;

/// Agents the viewer created or subscribed to, the most recently changed first (at most
/// `MINE_MAX`). A subscription to an agent its creator has disabled is kept but not listed
/// (the agent is hidden from the subscriber like any other disabled one) unless
/// `with_disabled` (administrators, who see every agent).
pub async fn mine(db: &PgPool, viewer: i64, with_disabled: bool) -> sqlx::Result<Vec<AgentRow>> {
    let mut qb = select(viewer);
    qb.push(" WHERE a.creator_id = ")
        .push_bind(viewer)
        .push(" OR (EXISTS (SELECT 1 FROM agent_subscriptions s WHERE s.agent_id = a.id AND s.user_id = ")
        .push_bind(viewer)
        .push(")");
    if !with_disabled {
        qb.push(" AND a.status = 1");
    }
    qb.push(") ORDER BY a.update_dt DESC, a.id DESC LIMIT ")
        .push_bind(MINE_MAX);
    qb.build_query_as().fetch_all(db).await
}

fn push_values<'a>(qb: &mut QueryBuilder<'a, Postgres>, d: &'a AgentData) {
    let mut v = qb.separated(", ");
    v.push_bind(&d.name)
        .push_bind(&d.description)
        .push_bind(&d.avatar)
        .push_bind(&d.instruction)
        .push_bind(&d.greeting)
        .push_bind(&d.preset_questions)
        .push_bind(d.chat_model_id)
        .push_bind(d.mcp_enabled)
        .push_bind(&d.mcp_server_ids)
        .push_bind(d.skill_enabled)
        .push_bind(&d.skill_ids)
        .push_bind(d.web_search_enabled)
        .push_bind(d.rag_enabled)
        .push_bind(d.rag_id)
        .push_bind(d.memory_enabled)
        .push_bind(d.memory_config_id)
        .push_bind(d.short_term_memory_size)
        .push_bind(d.is_featured)
        .push_bind(&d.app_id)
        .push_bind(d.status);
}

const DATA_COLUMNS: &str = "name, description, avatar, instruction, greeting, preset_questions, chat_model_id,
    mcp_enabled, mcp_server_ids, skill_enabled, skill_ids, web_search_enabled, rag_enabled, rag_id, memory_enabled,
    memory_config_id, short_term_memory_size, is_featured, app_id, status";

pub async fn insert(db: impl PgExecutor<'_>, d: &AgentData, creator_id: i64) -> sqlx::Result<i64> {
    let mut qb = QueryBuilder::new(format!("INSERT INTO agents ({DATA_COLUMNS}, creator_id) VALUES ("));
    push_values(&mut qb, d);
    qb.push(", ").push_bind(creator_id).push(") RETURNING id");
    qb.build_query_scalar().fetch_one(db).await
}

/// Writes the agent as `d`, made from the row read at `read` (its `update_dt`); false when the
/// row changed since (another edit, a status change, a server or skill taken out of it), and
/// nothing was written: `d` would undo that change.
pub async fn update(db: impl PgExecutor<'_>, id: i64, read: DateTime<Utc>, d: &AgentData) -> sqlx::Result<bool> {
    let mut qb = QueryBuilder::new(format!("UPDATE agents SET ({DATA_COLUMNS}, update_dt) = ROW("));
    push_values(&mut qb, d);
    qb.push(", now()) WHERE id = ")
        .push_bind(id)
        .push(" AND update_dt = ")
        .push_bind(read);
    Ok(qb.build().execute(db).await?.rows_affected() == 1)
}

pub async fn exists(db: impl PgExecutor<'_>, id: i64) -> sqlx::Result<bool> {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM agents WHERE id = $1)")
        .bind(id)
        .fetch_one(db)
        .await
}

/// Conversations and messages go with the agent (foreign keys cascade).
pub async fn delete(db: impl PgExecutor<'_>, id: i64) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM agents WHERE id = $1")
        .bind(id)
        .execute(db)
        .await?;
    Ok(())
}

pub async fn count_view(db: impl PgExecutor<'_>, id: i64) -> sqlx::Result<()> {
    sqlx::query("UPDATE agents SET view_count = view_count + 1 WHERE id = $1")
        .bind(id)
        .execute(db)
        .await?;
    Ok(())
}

pub async fn subscribe(db: impl PgExecutor<'_>, agent_id: i64, user_id: i64) -> sqlx::Result<()> {
    sqlx::query("INSERT INTO agent_subscriptions (agent_id, user_id) VALUES ($1, $2) ON CONFLICT DO NOTHING")
        .bind(agent_id)
        .bind(user_id)
        .execute(db)
        .await?;
    Ok(())
}

pub async fn unsubscribe(db: impl PgExecutor<'_>, agent_id: i64, user_id: i64) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM agent_subscriptions WHERE agent_id = $1 AND user_id = $2")
        .bind(agent_id)
        .bind(user_id)
        .execute(db)
        .await?;
    Ok(())
}

/// Whether an app with this appId exists.
pub async fn app_exists(db: &PgPool, app_id: &str) -> sqlx::Result<bool> {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM apps WHERE app_id = $1)")
        .bind(app_id)
        .fetch_one(db)
        .await
}

/// A shared thing whose models run in the chats of the agents bound to it.
#[derive(Debug, Clone, Copy)]
pub enum Binding {
    MemoryConfig(i64),
    KnowledgeBase(i64),
}

impl Binding {
    /// What refusals call it.
    pub fn noun(self) -> &'static str {
        match self {
            Binding::MemoryConfig(_) => "memory config",
            Binding::KnowledgeBase(_) => "knowledge base",
        }
    }
}

/// Of `model_ids`, the PERSONAL ones that some agent bound by `binding` may not run, with how
/// many such agents: a PERSONAL model runs in the chats of its creator's agents only. An
/// administrator's agent may run any when the edit is an administrator's (they may bind any
/// model); put there by anyone else, a PERSONAL model would take the chats of everyone who
/// talks to that agent to its creator's endpoint.
pub async fn bound_agents_barred(
    db: impl PgExecutor<'_>,
    binding: Binding,
    model_ids: &[i64],
    editor_is_admin: bool,
) -> sqlx::Result<Vec<(i64, i64)>> {
    let (column, id) = match binding {
        Binding::MemoryConfig(id) => ("a.memory_config_id", id),
        Binding::KnowledgeBase(id) => ("a.rag_id", id),
    };
    let mut qb = QueryBuilder::<Postgres>::new(
        "SELECT m.id, count(*) FROM agents a JOIN users u ON u.id = a.creator_id
         JOIN model_configs m ON m.id = ANY(",
    );
    qb.push_bind(model_ids)
        .push(") WHERE ")
        .push(column)
        .push(" = ")
        .push_bind(id)
        .push(" AND m.scope = 'PERSONAL' AND m.creator_id <> a.creator_id AND (u.role <> ")
        .push_bind(crate::domain::Role::Admin.code())
        .push(" OR NOT ")
        .push_bind(editor_is_admin)
        .push(") GROUP BY m.id");
    qb.build_query_as().fetch_all(db).await
}
