//! Wire shapes of search.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SearchRequest {
    #[schema(required = true)]
    pub rag_id: Option<i64>,
    #[schema(required = true)]
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
    /// Images of the document that answer the query or sit beside the chunk.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ImageEvidence>,
}

/// A document image shown as evidence for a result.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageEvidence {
    pub id: i64,
    pub rag_id: i64,
    pub document_id: i64,
    pub chunk_id: Option<i64>,
    pub resource_id: Option<i64>,
    pub image_index: i32,
    pub image_url: String,
    pub source_page: Option<i32>,
    pub document_name: String,
    pub caption: Option<String>,
    pub figure_title: Option<String>,
    pub ocr_text: Option<String>,
    /// DIRECT_MATCH: the image's text or caption contains query words; CONTEXT_MATCH: the
    /// image sits on the same page or under the same heading as the matched chunk.
    pub match_type: String,
    /// 0-1: the share of query words found in the image's text; 0.5 for context matches.
    pub match_score: f64,
    pub match_reason: String,
    pub matched_terms: Vec<String>,
    pub matched_fields: Vec<String>,
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
