//! Hybrid retrieval: query embedding -> vector search and full-text search in parallel ->
//! fusion (RRF or weighted) -> optional rerank -> threshold -> top N, each stage timed.

pub mod bm25;
pub mod evidence;
pub mod fusion;
pub mod model;

use std::time::Instant;

use serde_json::json;
use sqlx::PgPool;

pub use model::*;

use self::fusion::Hit;
use crate::domain::CurrentUser;
use crate::models::client::InputKind;
use crate::models::gateway::{self, Billing};
use crate::models::ModelType;
use crate::rag::backends::{store_error, Indexes};
use crate::rag::bases::{self, KbRow};
use crate::rag::documents::repo::images_of_chunks;
use crate::{AppError, AppResult, AppState};

/// Checks the request and loads the base; failures are code-0 business errors, as the
/// spec has them for knowledge-base queries.
pub async fn resolve(
    state: &AppState,
    user: &CurrentUser,
    rag_id: Option<i64>,
    query: Option<String>,
) -> AppResult<(KbRow, String)> {
    let rag_id = rag_id.ok_or_else(|| AppError::validation("ragId is required"))?;
    let query = query
        .map(|q| q.trim().to_owned())
        .filter(|q| !q.is_empty())
        .ok_or_else(|| AppError::validation("query must not be empty"))?;
    crate::validate::length("query", &query, 1, 4000)?;
    let missing = || AppError::business(format!("knowledge base {rag_id} does not exist"));
    let kb = bases::repo::find_to_use(state.db(), rag_id)
        .await?
        .ok_or_else(missing)?;
    if !user.can_manage(kb.creator_id) {
        return Err(missing());
    }
    Ok((kb, query))
}

pub async fn search(state: &AppState, user: &CurrentUser, req: SearchRequest) -> AppResult<SearchResponse> {
    let (kb, query) = resolve(state, user, req.rag_id, req.query).await?;
    // API Gateway answers 504 at 29 s while the function goes on paying for the calls.
    let deadline = tokio::time::Instant::now() + state.config().buffered_model_timeout;
    let (results, metrics) = retrieve(state, &kb, &query, Billing::of(user), Some(deadline)).await?;
    Ok(SearchResponse {
        results,
        metrics: req.debug.unwrap_or(false).then_some(metrics),
    })
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1000.0
}

/// Runs the retrieval stages for `query` on `kb`.
/// `deadline`: when a client waiting for the whole answer must have it (the model calls are cut
/// then); none in a streamed answer.
pub async fn retrieve(
    state: &AppState,
    kb: &KbRow,
    query: &str,
    billing: Billing,
    deadline: Option<tokio::time::Instant>,
) -> AppResult<(Vec<SearchResult>, Metrics)> {
    let total = Instant::now();
    let mut m = Metrics::default();
    if !kb.has_chunks {
        m.total_ms = ms(total);
        return Ok((vec![], m));
    }
    let settings = &kb.search_params.0;
    let result_count = settings.result_count.clamp(1, 100) as usize;
    let rerank_model = settings
        .rerank_model_id
        .or(kb.rerank_model_id)
        .filter(|_| settings.rerank_enabled);
    let candidates = (result_count * 4)
        .max(if rerank_model.is_some() {
            settings.enter_rerank_count as usize
        } else {
            0
        })
        .clamp(10, 200);

    let t = Instant::now();
    let model = gateway::load(state, kb.embedding_model_id, ModelType::Embedding)
        .await?
        .until(deadline);
    // Cut to the size the base's chunks are embedded at, which the model takes: a long question
    // (a pasted chat message) failed on an endpoint that refuses longer input. Full text
    // searches the whole question.
    let max_tokens = usize::try_from(kb.chunk_params.0.max_chunk_tokens).unwrap_or(usize::MAX);
    let embedded = gateway::embed(
        state,
        &model,
        billing,
        &[crate::rag::chunk::prefix_within(query, max_tokens).to_owned()],
        InputKind::Query,
        Some(kb.dimension as usize),
    )
    .await?;
    let vector = embedded
        .vectors
        .into_iter()
        .next()
        .ok_or_else(|| AppError::business("the embedding model returned no vector"))?;
    m.embedding_ms = ms(t);

    let indexes = Indexes::of(state, kb).await?;
    let dense = timed(indexes.vector.search(state.db(), &vector, candidates));
    let sparse = timed(async {
        if kb.search_engine_enable {
            indexes.text.search(state.db(), query, candidates).await
        } else {
            Ok(vec![])
        }
    });
    let ((dense, dense_ms), (sparse, sparse_ms)) = tokio::join!(dense, sparse);
    let failed =
        |backend: &'static str| move |e: anyhow::Error| store_error(e.context(format!("{backend} could not search")));
    let dense = dense.map_err(failed(indexes.vector.backend()))?;
    let sparse = sparse.map_err(failed(indexes.text.backend()))?;
    (
        m.vector_search_ms,
        m.bm25_search_ms,
        m.vector_hit_count,
        m.bm25_hit_count,
    ) = (dense_ms, sparse_ms, dense.len(), sparse.len());

    let t = Instant::now();
    let mut fused = fusion::fuse(
        &settings.fusion_strategy,
        &dense,
        &sparse,
        settings.rrf_k as f64,
        settings.dense_weight,
    );
    m.fusion_ms = ms(t);

    if let Some(rerank_id) = rerank_model {
        let t = Instant::now();
        fused.truncate(settings.enter_rerank_count.max(1) as usize);
        let rows = load(state.db(), kb.id, &fused).await?;
        let docs: Vec<String> = rows.iter().map(|r| r.content.clone()).collect();
        let reranker = gateway::load(state, rerank_id, ModelType::Reranker)
            .await?
            .until(deadline);
        let ranked = gateway::rerank(state, &reranker, billing, query, &docs, docs.len()).await?;
        fused = ranked
            .iter()
            .map(|h| Hit {
                id: rows[h.index].chunk_id,
                score: h.score.clamp(0.0, 1.0),
            })
            .collect();
        m.rerank_ms = ms(t);
    }
    if settings.threshold_enabled {
        fusion::keep_similar(&mut fused, &dense, rerank_model.is_some(), settings.threshold);
    }
    fused.truncate(result_count);
    // The rows and their documents' images are read at once, on two connections; a base
    // without images skips the second read.
    let ids: Vec<i64> = fused.iter().map(|h| h.id).collect();
    let images = async {
        match kb.has_images {
            true => images_of_chunks(state.db(), kb.id, &ids).await,
            false => Ok(vec![]),
        }
    };
    let (results, images) = tokio::join!(load(state.db(), kb.id, &fused), images);
    let mut results = results?;
    evidence::attach(state, query, &images?, &mut results);
    m.final_count = results.len();
    m.total_ms = ms(total);
    Ok((results, m))
}

async fn timed<T>(f: impl std::future::Future<Output = T>) -> (T, f64) {
    let t = Instant::now();
    let out = f.await;
    (out, ms(t))
}

#[derive(sqlx::FromRow)]
struct Row {
    chunk_id: i64,
    content: String,
    document_id: i64,
    document_name: String,
    title: Option<String>,
    page: Option<i32>,
    chunk_index: i32,
    paragraph_index: i32,
}

/// The hits' chunks of base `rag_id`, in the hits' order, with their scores. An id of another
/// base is dropped like an orphan: an external store's entries are not trusted to be this
/// base's (a database restored to an earlier point hands their ids out again, to other bases).
async fn load(db: &PgPool, rag_id: i64, hits: &[Hit]) -> AppResult<Vec<SearchResult>> {
    let ids: Vec<i64> = hits.iter().map(|h| h.id).collect();
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT c.id AS chunk_id, c.content, c.document_id, d.name AS document_name, c.title, c.page, c.chunk_index,
         c.paragraph_index FROM chunks c JOIN documents d ON d.id = c.document_id WHERE c.id = ANY($1) AND c.rag_id = $2",
    )
    .bind(&ids)
    .bind(rag_id)
    .fetch_all(db)
    .await?;
    let mut by_id: std::collections::HashMap<i64, Row> = rows.into_iter().map(|r| (r.chunk_id, r)).collect();
    Ok(hits
        .iter()
        .filter_map(|h| {
            by_id.remove(&h.id).map(|r| SearchResult {
                chunk_id: r.chunk_id,
                content: r.content,
                score: (h.score * 10_000.0).round() / 10_000.0,
                document_id: r.document_id,
                document_name: r.document_name,
                metadata: json!({ "title": r.title, "page": r.page, "chunkIndex": r.chunk_index, "paragraphIndex": r.paragraph_index }),
                images: vec![],
            })
        })
        .collect())
}

/// One passage per result, in the results' order, so that the prompt's `[n]` is the answer's
/// n-th reference: the result's chunk with the chunks next to it in its document (`nearby` on
/// each side), in document order. A neighbour an earlier passage holds is left out; the
/// result's own chunk never is (left out, a later result lost its number, and every citation
/// after it pointed at the wrong source).
pub async fn with_neighbours(db: &PgPool, results: &[SearchResult], nearby: i64) -> AppResult<Vec<String>> {
    if nearby <= 0 {
        return Ok(results.iter().map(|r| r.content.clone()).collect());
    }
    // One statement for all results: a statement each was up to a hundred round trips, one
    // after the other, before a chat turn's or a Q&A answer's model call.
    let documents: Vec<i64> = results.iter().map(|r| r.document_id).collect();
    let indexes: Vec<i64> = results
        .iter()
        .map(|r| r.metadata["chunkIndex"].as_i64().unwrap_or(0))
        .collect();
    let rows: Vec<(i64, i64, String, bool)> = sqlx::query_as(
        "SELECT r.ord, c.id, c.content, c.chunk_index = r.chunk_index
         FROM unnest($1::bigint[], $2::bigint[]) WITH ORDINALITY AS r(document_id, chunk_index, ord)
         JOIN chunks c ON c.document_id = r.document_id
          AND c.chunk_index BETWEEN r.chunk_index - $3 AND r.chunk_index + $3
         ORDER BY r.ord, c.chunk_index",
    )
    .bind(&documents)
    .bind(&indexes)
    .bind(nearby)
    .fetch_all(db)
    .await?;
    let mut seen = std::collections::HashSet::new();
    let mut passages: Vec<Vec<String>> = vec![Vec::new(); results.len()];
    for (ord, id, content, own) in rows {
        let passage = usize::try_from(ord - 1).ok().and_then(|i| passages.get_mut(i));
        if let (true, Some(passage)) = (seen.insert(id) || own, passage) {
            passage.push(content);
        }
    }
    // A result whose chunk was deleted since the search keeps the text it was found with.
    Ok(passages
        .into_iter()
        .zip(results)
        .map(|(passage, r)| match passage.is_empty() {
            true => r.content.clone(),
            false => passage.join("\n"),
        })
        .collect())
}
