//! Recall: the memory config's strategy over one scope of memories. Query embedding ->
//! vector and (optionally) full-text hits -> RRF or weighted fusion -> optional rerank ->
//! threshold -> top `maxRecall`, with the knowledge-base fusion code.

use std::collections::HashMap;

use serde::Serialize;
use utoipa::ToSchema;

use super::config_model::ConfigRow;
use super::config_repo;
use super::repo::{self, Scope};
use crate::domain::Owner;
use crate::models::client::{ChatMessage, ChatRequest, InputKind};
use crate::models::gateway::{self, Billing, CallError, ModelHandle};
use crate::models::ModelType;
use crate::rag::search::fusion::{self, Hit};
use crate::{AppError, AppResult, AppState};

/// The most of a question that is embedded: the input size of the common embedding models
/// (e5, bge, MiniLM). A chat message may hold 32,000 characters, and an endpoint without
/// auto-truncation refused it whole, failing the recall; full text searches all of it.
pub const MAX_QUERY_TOKENS: usize = 512;

/// The part of `query` that is embedded.
pub fn embedded_part(query: &str) -> &str {
    crate::rag::chunk::prefix_within(query, MAX_QUERY_TOKENS)
}

/// A memory recalled for a chat turn.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecalledMemory {
    pub id: i64,
    pub memory_type: String,
    pub title: String,
    pub content: String,
    /// 0-1, higher is more relevant (fused, or reranked, score).
    pub score: f64,
}

/// A memory config ready to run: its settings and its embedding model.
#[derive(Debug, Clone)]
pub struct Strategy {
    pub config: ConfigRow,
    pub embedding: ModelHandle,
}

/// The strategy of config `config_id`, or of the built-in defaults (default EMBEDDING model).
pub async fn strategy(state: &AppState, config_id: Option<i64>) -> AppResult<Strategy> {
    strategy_of(state, config_repo::effective(state.db(), config_id).await?).await
}

/// The strategy of a config already read (and checked) by the caller.
pub async fn strategy_of(state: &AppState, config: ConfigRow) -> AppResult<Strategy> {
    let embedding = match config.embedding_model_id {
        Some(id) => gateway::load(state, id, ModelType::Embedding).await?,
        None => gateway::default_model(state, ModelType::Embedding).await?,
    };
    Ok(Strategy { config, embedding })
}

/// Who is billed for memory work on an owner's behalf: the admin-API user, or nobody's quota
/// for an app's external user (the call is still recorded).
pub fn billing(owner: Owner, charge: bool) -> Billing {
    match (owner, charge) {
        (Owner::User(id), true) => Billing::User(id),
        (Owner::User(id), false) => Billing::RecordOnly(Some(id)),
        (Owner::External(_), _) => Billing::RecordOnly(None),
    }
}

/// Embeds texts with the strategy's model, as queries or as stored passages.
pub async fn embed(
    state: &AppState,
    s: &Strategy,
    billing: Billing,
    texts: &[String],
    kind: InputKind,
) -> Result<Vec<Vec<f32>>, CallError> {
    if texts.is_empty() {
        return Ok(vec![]);
    }
    let dim = s.config.dimension.map(|d| d as usize);
    let out = gateway::embed(state, &s.embedding, billing, texts, kind, dim).await?;
    if out.vectors.len() != texts.len() {
        return Err(AppError::business("the embedding model returned the wrong number of vectors").into());
    }
    if let (None, Some(id), Some(first)) = (s.config.dimension, s.config.id, out.vectors.first()) {
        hold_to_one_length(state, id, first.len()).await?;
    }
    Ok(out.vectors)
}

/// A config saved before its model's dimension was kept takes the first length its model gives
/// and holds it from then on: recall compares a query only with memories of its own length, so
/// a config whose endpoint changed lengths would lose the older memories from recall without a
/// word. The built-in defaults (no id) follow the default model, which only administrators
/// set; lengths past what an index holds are left as they come.
async fn hold_to_one_length(state: &AppState, config_id: i64, length: usize) -> AppResult<()> {
    let Ok(length) = i32::try_from(length) else {
        return Ok(());
    };
    if length > crate::validate::MAX_VECTOR_DIMENSION {
        return Ok(());
    }
    match config_repo::adopt_dimension(state.db(), config_id, length).await? {
        Some(kept) if kept != length => Err(AppError::business(format!(
            "the embedding model returned {length}-dimensional vectors, but memory config {config_id} holds {kept}"
        ))),
        _ => Ok(()),
    }
}

/// The query as a standalone search phrase when the config asks for rewriting; the original
/// query when rewriting is off or fails (recall must not fail a chat turn over it).
pub async fn rewrite(state: &AppState, s: &Strategy, billing: Billing, query: &str) -> String {
    if !s.config.rewrite_enabled {
        return query.to_owned();
    }
    let model = match s.config.extraction_model_id {
        Some(id) => gateway::load(state, id, ModelType::Chat).await,
        None => gateway::default_model(state, ModelType::Chat).await,
    };
    let req = ChatRequest {
        messages: vec![
            ChatMessage::system(
                "Rewrite the user's message as one short standalone search query for facts, preferences and \
                 decisions remembered about this user. Answer with the query only.",
            ),
            ChatMessage::user(query),
        ],
        temperature: Some(0.0),
        ..ChatRequest::default()
    };
    let answer = match model {
        Ok(m) => gateway::chat(state, &m, billing, "memory-rewrite", &req)
            .await
            .map_err(AppError::from),
        Err(e) => Err(e),
    };
    match answer {
        Ok(r) if !r.content.trim().is_empty() => r.content.trim().to_owned(),
        Ok(_) => query.to_owned(),
        Err(e) => {
            tracing::warn!(error = %e, "query rewrite failed; recalling with the original query");
            query.to_owned()
        }
    }
}

/// Ranks the scope's memories for `query` whose embedding is `vector`.
pub async fn rank(
    state: &AppState,
    scope: &Scope,
    s: &Strategy,
    vector: &[f32],
    query: &str,
    billing: Billing,
) -> AppResult<Vec<Hit>> {
    let c = &s.config;
    let max_recall = c.max_recall.clamp(1, 100) as usize;
    let rerank_id = c.rerank_model_id.filter(|_| c.rerank_enabled);
    let candidates = (max_recall * 4)
        .max(if rerank_id.is_some() {
            c.enter_rerank_count as usize
        } else {
            0
        })
        .clamp(10, 200);
    let db = state.db();
    let dense = repo::vector_hits(db, scope, s.embedding.row.id, vector, candidates);
    let sparse = async {
        match c.search_engine_enable {
            true => repo::text_hits(db, scope, query, candidates).await,
            false => Ok(vec![]),
        }
    };
    let (dense, sparse) = tokio::join!(dense, sparse);
    let (dense, sparse) = (dense?, sparse?);
    let mut fused = fusion::fuse(&c.fusion_strategy, &dense, &sparse, c.rrf_k as f64, c.dense_weight);
    if let Some(rerank_id) = rerank_id {
        fused.truncate(c.enter_rerank_count.max(1) as usize);
        let ids: Vec<i64> = fused.iter().map(|h| h.id).collect();
        let rows = repo::load(db, &ids).await?;
        let docs: Vec<String> = rows.iter().map(|r| format!("{}\n{}", r.title, r.content)).collect();
        let reranker = gateway::load(state, rerank_id, ModelType::Reranker).await?;
        let ranked = gateway::rerank(state, &reranker, billing, query, &docs, docs.len()).await?;
        fused = ranked
            .iter()
            .filter_map(|h| {
                rows.get(h.index).map(|r| Hit {
                    id: r.id,
                    score: h.score.clamp(0.0, 1.0),
                })
            })
            .collect();
    }
    if c.threshold_enabled {
        fusion::keep_similar(&mut fused, &dense, rerank_id.is_some(), c.similarity_threshold);
    }
    fused.truncate(max_recall);
    Ok(fused)
}

/// Ranks, loads and (when `count_access`) records the recall on the memories.
pub async fn recall_with_vector(
    state: &AppState,
    scope: &Scope,
    s: &Strategy,
    vector: &[f32],
    query: &str,
    billing: Billing,
    count_access: bool,
) -> AppResult<Vec<RecalledMemory>> {
    let hits = rank(state, scope, s, vector, query, billing).await?;
    if hits.is_empty() {
        return Ok(vec![]);
    }
    let ids: Vec<i64> = hits.iter().map(|h| h.id).collect();
    let rows = repo::load(state.db(), &ids).await?;
    let scores: HashMap<i64, f64> = hits.iter().map(|h| (h.id, h.score)).collect();
    let recalled = within_budget(rows.into_iter().map(|r| RecalledMemory {
        score: (scores.get(&r.id).copied().unwrap_or(0.0) * 10_000.0).round() / 10_000.0,
        id: r.id,
        memory_type: r.memory_type,
        title: r.title,
        content: r.content,
    }));
    if count_access {
        let kept: Vec<Hit> = hits
            .into_iter()
            .filter(|h| recalled.iter().any(|m| m.id == h.id))
            .collect();
        repo::touch(state.db(), &kept).await?;
    }
    Ok(recalled)
}

/// The most text of recalled memories one turn's prompt takes, in characters (about 4,000
/// tokens). `maxRecall` reaches 100 and a memory 4,000 characters: without a bound, recall
/// alone could pass a model's context, where the history is bounded.
pub const RECALL_MAX_CHARS: usize = 16_000;

/// The memories, best first, while their titles and contents fit [`RECALL_MAX_CHARS`]; the
/// best one always goes.
fn within_budget(ranked: impl Iterator<Item = RecalledMemory>) -> Vec<RecalledMemory> {
    let mut used = 0;
    ranked
        .take_while(|m| {
            let first = used == 0;
            used += m.title.chars().count() + m.content.chars().count();
            first || used <= RECALL_MAX_CHARS
        })
        .collect()
}

/// The whole recall for `query`: rewrite, embed, rank, load; the model calls paid by `billing`.
pub async fn run(
    state: &AppState,
    scope: &Scope,
    s: &Strategy,
    billing: Billing,
    query: &str,
    count_access: bool,
) -> AppResult<Vec<RecalledMemory>> {
    let query = rewrite(state, s, billing, query).await;
    let vector = embed(state, s, billing, &[embedded_part(&query).to_owned()], InputKind::Query)
        .await?
        .pop()
        .ok_or_else(|| AppError::business("the embedding model returned no vector"))?;
    recall_with_vector(state, scope, s, &vector, &query, billing, count_access).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory(id: i64, chars: usize) -> RecalledMemory {
        RecalledMemory {
            id,
            memory_type: "FACT".into(),
            title: String::new(),
            content: "x".repeat(chars),
            score: 1.0,
        }
    }

    #[test]
    fn recalled_memories_stop_at_the_prompts_budget_in_rank_order() {
        let ids = |v: Vec<RecalledMemory>| v.into_iter().map(|m| m.id).collect::<Vec<_>>();
        let ranked = [memory(1, 9_000), memory(2, 7_000), memory(3, 10), memory(4, 10)];
        // The third would fit after the second, but a lower rank never passes a higher one.
        assert_eq!(ids(within_budget(ranked.clone().into_iter())), [1, 2]);
        assert_eq!(ids(within_budget([memory(1, 20_000), memory(2, 1)].into_iter())), [1]);
        assert_eq!(ids(within_budget([memory(1, 10), memory(2, 10)].into_iter())), [1, 2]);
    }
}
