//! The `/memory` endpoints' logic. A regular user sees and changes only their own memories;
//! administrators see and change everyone's (external users' memories included).

use crate::models::gateway::Billing;
use chrono::{Duration, Utc};

use super::extract;
use super::model::*;
use super::recall;
use super::repo::{self, Content, Embedding, Scope};
use crate::db::vector_literal;
use crate::domain::CurrentUser;
use crate::domain::Owner;
use crate::models::client::InputKind;
use crate::models::service::usable_model;
use crate::rag::search::fusion::{self, Hit};
use crate::validate;
use crate::{AppError, AppResult, AppState};

/// The memory settings of an agent.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AgentMemory {
    pub id: i64,
    pub instruction: String,
    pub memory_enabled: bool,
    pub memory_config_id: Option<i64>,
    pub short_term_memory_size: i32,
}

/// The agent's memory settings when the caller may see the agent (as `/agent` decides); an
/// agent they may not see answers as an unknown one.
pub async fn visible_agent(state: &AppState, user: &CurrentUser, id: i64) -> AppResult<AgentMemory> {
    let a = crate::agents::service::visible(state, user, id).await?;
    Ok(AgentMemory {
        id: a.id,
        instruction: a.instruction,
        memory_enabled: a.memory_enabled,
        memory_config_id: a.memory_config_id,
        short_term_memory_size: a.short_term_memory_size,
    })
}

/// The memory settings of a memory's own agent, read without a caller's view of it.
async fn agent(state: &AppState, id: i64) -> AppResult<AgentMemory> {
    sqlx::query_as(
        "SELECT id, instruction, memory_enabled, memory_config_id, short_term_memory_size FROM agents WHERE id = $1",
    )
    .bind(id)
    .fetch_optional(state.db())
    .await?
    .ok_or_else(|| AppError::not_found("agent"))
}

/// The vector of an edited memory's text, by the agent's embedding model: only one the editor
/// may use (as `search`), since the agent's config may be built on its creator's PERSONAL model
/// (their key). Otherwise none, and the memory keeps the vector it had.
async fn embed_as_edited(
    state: &AppState,
    user: &CurrentUser,
    s: &recall::Strategy,
    text: String,
) -> AppResult<Option<(i64, String)>> {
    let model_id = s.embedding.row.id;
    let embedding = crate::models::ModelType::Embedding;
    if usable_model(state, user, "embeddingModelId", model_id, embedding)
        .await
        .is_err()
    {
        return Ok(None);
    }
    let v = recall::embed(state, s, Billing::of(user), &[text], InputKind::Document).await?;
    if let Some(v) = v.first() {
        repo::ensure_index_for(state.db(), &s.embedding.row, v.len() as i32).await?;
    }
    Ok(v.first().map(|v| (model_id, vector_literal(v))))
}

/// Everything the caller may see: their own memories, or everyone's for administrators.
pub fn visible(user: &CurrentUser) -> Scope {
    Scope {
        owner: (!user.is_admin()).then_some(Owner::User(user.id)),
        ..Scope::default()
    }
}

fn limit(value: Option<i64>, default: i64) -> AppResult<i64> {
    let v = value.unwrap_or(default);
    validate::range("limit", v, 1, 100)?;
    Ok(v)
}

fn days(value: Option<i64>, default: i64) -> AppResult<i64> {
    let v = value.unwrap_or(default);
    validate::range("days", v, 1, 3650)?;
    Ok(v)
}

fn views(rows: Vec<MemoryRow>) -> Vec<MemoryView> {
    rows.into_iter().map(MemoryView::from).collect()
}

pub async fn by_conversation(
    state: &AppState,
    user: &CurrentUser,
    key: String,
    q: ConversationMemoriesQuery,
) -> AppResult<Vec<MemoryView>> {
    let scope = Scope {
        conversation_key: Some(key),
        agent_id: q.agent_id,
        ..visible(user)
    };
    Ok(views(repo::list(state.db(), &scope, limit(q.limit, 10)?).await?))
}

pub async fn by_agent(
    state: &AppState,
    user: &CurrentUser,
    agent_id: i64,
    q: AgentMemoriesQuery,
) -> AppResult<Vec<MemoryView>> {
    let types = match validate::optional(q.memory_type) {
        Some(t) => vec![memory_type("type", &t)?],
        None => vec![],
    };
    let scope = Scope {
        agent_id: Some(agent_id),
        types,
        ..visible(user)
    };
    Ok(views(repo::list(state.db(), &scope, limit(q.limit, 20)?).await?))
}

pub async fn recent(state: &AppState, user: &CurrentUser, agent_id: i64, q: RecentQuery) -> AppResult<Vec<MemoryView>> {
    let scope = Scope {
        agent_id: Some(agent_id),
        since: Some(Utc::now() - Duration::days(days(q.days, 7)?)),
        ..visible(user)
    };
    Ok(views(repo::list(state.db(), &scope, limit(q.limit, 10)?).await?))
}

/// Semantic + full-text search over the caller's memories of every status. The query is
/// embedded once per embedding model the memories were stored with; the rankings are fused
/// with the default weights of recall. Searching is not a recall: access counts stay as they are.
pub async fn search(state: &AppState, user: &CurrentUser, req: SearchRequest) -> AppResult<Vec<MemoryHit>> {
    let query = validate::required("query", req.query)?;
    validate::length("query", &query, 1, 2000)?;
    let types = req
        .types
        .unwrap_or_default()
        .iter()
        .map(|t| memory_type("types", t))
        .collect::<AppResult<Vec<_>>>()?;
    let limit = limit(req.limit, 10)?;
    let since = match req.days {
        Some(d) => Some(Utc::now() - Duration::days(days(Some(d), d)?)),
        None => None,
    };
    let scope = Scope {
        agent_id: req.agent_id,
        types,
        since,
        ..visible(user)
    };
    let db = state.db();
    let candidates = (limit as usize * 4).clamp(10, 200);
    let mut dense: Vec<Vec<Hit>> = Vec::new();
    // Every embedding of the query within API Gateway's 29 s.
    let deadline = tokio::time::Instant::now() + state.config().buffered_model_timeout;
    let embedded = recall::embedded_part(&query).to_owned();
    for model_id in repo::embedding_models(db, &scope).await? {
        // Only a model the caller may use embeds their query: memories stored through an
        // agent's config may have been embedded with its creator's PERSONAL model (their key).
        let embedding = crate::models::ModelType::Embedding;
        let handle = usable_model(state, user, "embeddingModelId", model_id, embedding).await;
        let Ok(handle) = handle else {
            tracing::warn!(
                model_id,
                "memories of an embedding model the caller cannot use searched by full text only"
            );
            continue;
        };
        let handle = handle.until(Some(deadline));
        let billing = crate::models::gateway::Billing::of(user);
        let out = crate::models::gateway::embed(
            state,
            &handle,
            billing,
            std::slice::from_ref(&embedded),
            InputKind::Query,
            None,
        )
        .await?;
        if let Some(v) = out.vectors.first() {
            dense.push(repo::vector_hits(db, &scope, model_id, v, candidates).await?);
        }
    }
    let sparse = repo::text_hits(db, &scope, &query, candidates).await?;
    // Memories of several embedding models have rankings that cannot be compared by score:
    // those are joined by rank first.
    let dense = match dense.len() {
        0 | 1 => dense.pop().unwrap_or_default(),
        _ => fusion::rrf(&dense.iter().map(Vec::as_slice).collect::<Vec<_>>(), 60.0),
    };
    let mut fused = fusion::weighted(&dense, &sparse, fusion::DEFAULT_DENSE_WEIGHT);
    fused.truncate(limit as usize);
    let scores: std::collections::HashMap<i64, f64> = fused.iter().map(|h| (h.id, h.score)).collect();
    let ids: Vec<i64> = fused.iter().map(|h| h.id).collect();
    Ok(repo::load(db, &ids)
        .await?
        .into_iter()
        .map(|r| MemoryHit {
            relevance_score: (scores.get(&r.id).copied().unwrap_or(0.0) * 10_000.0).round() / 10_000.0,
            id: r.id,
            memory_type: r.memory_type,
            title: r.title,
            content: r.content,
            confidence_score: r.confidence_score,
            status: r.status,
        })
        .collect())
}

/// The memory, if the caller may see it (404 otherwise, so ids of others stay unknown).
pub async fn own(state: &AppState, user: &CurrentUser, id: i64) -> AppResult<MemoryRow> {
    repo::find(state.db(), id)
        .await?
        .filter(|m| user.is_admin() || m.user_id == Some(user.id))
        .ok_or_else(|| AppError::not_found("memory"))
}

pub async fn detail(state: &AppState, user: &CurrentUser, id: i64) -> AppResult<MemoryView> {
    own(state, user, id).await.map(MemoryView::from)
}

/// Edits a memory. Changed text is embedded again (with the agent's current memory config)
/// so that recall matches what the memory now says; `status` is set as given (the spec's
/// "any -> the given status" row).
pub async fn update(state: &AppState, user: &CurrentUser, id: i64, req: UpdateRequest) -> AppResult<MemoryView> {
    let m = own(state, user, id).await?;
    let mut c = Content {
        memory_type: m.memory_type.clone(),
        category: m.category.clone(),
        title: m.title.clone(),
        content: m.content.clone(),
        tags: m.tags.clone(),
        confidence_score: m.confidence_score,
    };
    if let Some(t) = req.title {
        c.title = validate::required("title", Some(t))?;
        validate::length("title", &c.title, 1, 200)?;
    }
    if let Some(t) = req.content {
        c.content = validate::required("content", Some(t))?;
        validate::length("content", &c.content, 1, 4000)?;
    }
    if let Some(t) = req.memory_type {
        c.memory_type = memory_type("memoryType", &t)?;
    }
    if let Some(t) = req.category {
        c.category = t.trim().to_owned();
        validate::length("category", &c.category, 0, 100)?;
    }
    if let Some(tags) = req.tags {
        if tags.len() > 20 {
            return Err(AppError::validation("tags must have at most 20 entries"));
        }
        c.tags = tags.iter().map(|t| t.trim().to_owned()).collect();
        for t in &c.tags {
            validate::length("tags", t, 1, 50)?;
        }
    }
    if let Some(s) = req.relevance_score {
        if !(0.0..=1.0).contains(&s) {
            return Err(AppError::validation("relevanceScore must be between 0 and 1"));
        }
    }
    let status = req.status.map(|s| Status::parse("status", &s)).transpose()?;
    let text_changed = c.title != m.title || c.content != m.content;
    let embedding = match text_changed {
        true => {
            let a = agent(state, m.agent_id).await?;
            match recall::strategy(state, a.memory_config_id).await {
                Ok(s) => embed_as_edited(state, user, &s, format!("{}\n{}", c.title, c.content)).await?,
                // The model cannot be used now (disabled, or no default set): the edit is kept
                // with the vector the memory had, as when the editor may not use the model.
                Err(e) if !e.is_server_side() => None,
                Err(e) => return Err(e),
            }
        }
        false => None,
    };
    let mut tx = state.db().begin().await?;
    // Written over the memory as read: over an edit or a restatement made since, this would
    // undo it, and could pair its text with the other one's vector.
    if !repo::lock_unchanged(&mut tx, id, m.update_dt).await? {
        return Err(AppError::changed_meanwhile("memory"));
    }
    let emb = embedding.as_ref().map(|(model_id, vector)| Embedding {
        model_id: *model_id,
        vector,
    });
    repo::write_content(&mut *tx, id, &c, emb).await?;
    if let Some(s) = status {
        sqlx::query("UPDATE memories SET status = $2 WHERE id = $1")
            .bind(id)
            .bind(s.as_str())
            .execute(&mut *tx)
            .await?;
    }
    if let Some(score) = req.relevance_score {
        repo::set_relevance(&mut *tx, id, score).await?;
    }
    tx.commit().await?;
    detail(state, user, id).await
}

pub async fn delete(state: &AppState, user: &CurrentUser, id: i64) -> AppResult<()> {
    own(state, user, id).await?;
    repo::delete(state.db(), id).await?;
    Ok(())
}

/// Archive, suppress or activate, as the state table allows; anything else is refused and
/// changes nothing.
pub async fn transition(state: &AppState, user: &CurrentUser, id: i64, t: Transition) -> AppResult<()> {
    let m = own(state, user, id).await?;
    let from = Status::parse("status", &m.status)?;
    let to = t.apply(from)?;
    if !repo::set_status(state.db(), id, from.as_str(), to.as_str()).await? {
        return Err(AppError::changed_meanwhile("memory"));
    }
    Ok(())
}

/// Extracts the caller's conversation now (synchronously) with the agent's memory config. As
/// for the extractions chat turns queue, an agent with memory off (or a disabled config) is
/// refused before anything is charged: its memories would be read by nothing.
pub async fn extract_now(state: &AppState, user: &CurrentUser, agent_id: i64, key: String) -> AppResult<ExtractResult> {
    visible_agent(state, user, agent_id).await?;
    let conv = extract::by_key(state.db(), agent_id, Owner::User(user.id), &key)
        .await?
        .ok_or_else(|| AppError::not_found("conversation"))?;
    let config_id = extract::current_config(state.db(), agent_id).await?.ok_or_else(|| {
        AppError::validation("memory is off for this agent (memoryEnabled is false, or its memory config is disabled)")
    })?;
    // Past API Gateway's limit the client would get its 504 while the calls go on, paid for.
    let deadline = extract::Deadline::within(state.config().buffered_model_timeout);
    let rows = extract::extract(state, &conv, config_id, Some(deadline)).await?;
    Ok(ExtractResult {
        extracted_count: rows.len(),
        memories: views(rows),
    })
}

pub async fn stats(state: &AppState, user: &CurrentUser, agent_id: i64, q: StatsQuery) -> AppResult<Stats> {
    let end = Utc::now();
    let start = end - Duration::days(days(q.days, 30)?);
    let scope = Scope {
        agent_id: Some(agent_id),
        since: Some(start),
        ..visible(user)
    };
    let (counts, used, most_used) = repo::stats(state.db(), &scope).await?;
    let mut by_type: std::collections::BTreeMap<String, i64> =
        MEMORY_TYPES.iter().map(|t| ((*t).to_owned(), 0)).collect();
    by_type.extend(counts);
    let total: i64 = by_type.values().sum();
    let effectiveness = if total > 0 {
        (used as f64 / total as f64 * 10_000.0).round() / 10_000.0
    } else {
        0.0
    };
    Ok(Stats {
        total_memories: total,
        by_type,
        most_used,
        retrieval_effectiveness: effectiveness,
        date_range: DateRange {
            start: crate::time::datetime(start),
            end: crate::time::datetime(end),
        },
    })
}
