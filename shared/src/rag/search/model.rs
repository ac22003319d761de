//! Wire shapes of search.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SearchRequest {
    pub rag_id: Option<i64>,
    pub query: Option<String>,
    /// Adds stage timings and hit counts as `metrics`.
    pub debug: Option<bool>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SearchResult {
    pub chunk_id: i64,
    pub content: String,
    /// 0-1, higher is better.
    pub score: f64,
    pub document_id: i64,
    pub document_name: String,
    /// title, page, chunkIndex, paragraphIndex.
    pub metadata: Value,
}

#[derive(Debug, Clone, Default, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Metrics {
    pub embedding_ms: f64,
    pub vector_search_ms: f64,
    pub bm25_search_ms: f64,
    pub fusion_ms: f64,
    pub rerank_ms: f64,
    pub total_ms: f64,
    pub vector_hit_count: usize,
    pub bm25_hit_count: usize,
    pub final_count: usize,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SearchResponse {
    pub results: Vec<SearchResult>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics: Option<Metrics>,
}
