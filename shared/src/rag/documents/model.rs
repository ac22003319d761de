//! Wire shapes of documents and uploads.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use super::dedup::{Decision, MatchType};
use crate::time;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DocRow {
    pub id: i64,
    pub rag_id: i64,
    pub name: String,
    pub file_type: String,
    pub source_type: String,
    pub source_path: String,
    pub storage_key: String,
    pub mime_type: String,
    pub file_size: i64,
    pub content_hash: String,
    pub status: String,
    pub progress: i32,
    pub error_stage: Option<String>,
    pub error_message: Option<String>,
    pub timings: Value,
    pub chunk_count: i32,
    pub run_id: uuid::Uuid,
    pub creator_id: i64,
    /// Who asked for the current run when it is not the uploader's first (`payer`).
    pub payer_id: Option<i64>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl DocRow {
    /// Who pays for the current run's model calls: whoever asked for it to run again, or the
    /// uploader.
    pub fn payer(&self) -> i64 {
        self.payer_id.unwrap_or(self.creator_id)
    }
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DocView {
    pub id: i64,
    pub rag_id: i64,
    pub name: String,
    pub file_type: String,
    /// local or url.
    pub source_type: String,
    pub source_path: String,
    /// pending, parsing, chunking, embedding, success or failed.
    pub status: String,
    /// 0-100.
    pub progress: i32,
    pub chunk_count: i32,
    /// Human-readable size, e.g. "12.4 KB".
    pub file_size: String,
    pub file_size_bytes: i64,
    pub mime_type: String,
    /// `sha256:<hex>`.
    pub content_hash: String,
    /// The stage that failed, when status is failed.
    pub error_stage: Option<String>,
    pub error_message: Option<String>,
    /// Milliseconds per stage of the last run.
    #[schema(value_type = StageTimings)]
    pub timings: Value,
    pub created_at: String,
    pub updated_at: String,
}

/// `1536` -> "1.5 KB".
pub fn human_size(bytes: i64) -> String {
    const UNITS: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    let mut size = bytes.max(0) as f64;
    let mut unit = 0;
    while size >= 1024.0 && unit < UNITS.len() - 1 {
        size /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{size:.1} {}", UNITS[unit])
    }
}

impl From<DocRow> for DocView {
    fn from(d: DocRow) -> Self {
        Self {
            id: d.id,
            rag_id: d.rag_id,
            name: d.name,
            file_type: d.file_type,
            source_type: d.source_type,
            source_path: d.source_path,
            status: d.status,
            progress: d.progress,
            chunk_count: d.chunk_count,
            file_size: human_size(d.file_size),
            file_size_bytes: d.file_size,
            mime_type: d.mime_type,
            content_hash: d.content_hash,
            error_stage: d.error_stage,
            error_message: d.error_message,
            timings: d.timings,
            created_at: time::datetime(d.created_at),
            updated_at: time::datetime(d.updated_at),
        }
    }
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct DocFilter {
    pub rag_id: Option<i64>,
}

/// One file of an upload preview.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PreviewItem {
    pub temp_resource_id: i64,
    pub file_name: String,
    pub file_type: String,
    pub file_size: i64,
    pub content_hash: String,
    pub decision: Decision,
    pub match_type: MatchType,
    pub conflict_document_id: Option<i64>,
    pub conflict_document_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reject_reason: Option<String>,
}

/// A preview item as kept server-side, with where its temporary file is.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredItem {
    #[serde(flatten)]
    pub item: PreviewItem,
    pub key: String,
    pub mime: String,
}

/// An upload preview of files already stored as resources: sent through a presigned PUT
/// (`POST /resource/upload-url`, then `/resource/upload/complete` with `bizType` document),
/// which is how a file larger than an API Gateway request (about 4.5 MB) reaches a base.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreviewResourcesRequest {
    pub rag_id: Option<i64>,
    /// The caller's own resources of `bizType` document, at most 20. They become the
    /// preview's files (`bizType` RAG_UPLOAD_PREVIEW, as the files of a multipart preview) and
    /// go with it: a commit makes them documents' files; a cancel, an expiry or a skip
    /// deletes them.
    pub resource_ids: Option<Vec<i64>>,
    /// 0 none, 1 by name, 2 by content, 3 by name or content (default: the base's).
    pub dedup_strategy: Option<i64>,
    /// 0 reject, 1 skip, 2 overwrite (default: the base's).
    pub dedup_action: Option<i64>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreviewResult {
    pub preview_token: String,
    pub rag_id: i64,
    pub items: Vec<PreviewItem>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CommitRequest {
    pub preview_token: Option<String>,
    pub items: Option<Vec<CommitItem>>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CommitItem {
    pub temp_resource_id: Option<i64>,
    /// NEW, SKIP or OVERWRITE.
    pub decision: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CommitResult {
    /// True when another change to the knowledge base altered a file's match since the
    /// preview; nothing was committed and `items` show the new picture to confirm again.
    pub conflict_changed: bool,
    pub items: Vec<CommittedItem>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CommittedItem {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rag_id: Option<i64>,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file_type: Option<String>,
    pub decision: Decision,
    pub match_type: MatchType,
}

/// A URL import's document and what the base's dedup rules made of it: `NEW`, `OVERWRITE`
/// (the document replaced another) or `SKIP` (nothing was imported; the document is the one
/// already there).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Imported {
    #[serde(flatten)]
    pub document: DocView,
    pub decision: Decision,
    pub match_type: MatchType,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImportUrlRequest {
    #[schema(required = true)]
    pub rag_id: Option<i64>,
    #[schema(required = true)]
    pub url: Option<String>,
    pub name: Option<String>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DocImageView {
    pub id: i64,
    pub rag_id: i64,
    pub document_id: i64,
    pub chunk_id: Option<i64>,
    pub resource_id: Option<i64>,
    pub image_index: i32,
    pub image_url: String,
    pub caption: Option<String>,
    pub figure_no: Option<String>,
    pub figure_title: Option<String>,
    pub section_title: Option<String>,
    pub document_name: String,
    pub ocr_text: Option<String>,
    pub source_page: Option<i32>,
    pub create_dt: String,
    pub update_dt: String,
}

/// The timings of a document's last run, for the API document (`{}` before its first).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StageTimings {
    pub parse_ms: Option<f64>,
    pub chunk_ms: Option<f64>,
    pub embed_ms: Option<f64>,
    pub image_ocr_ms: Option<f64>,
    pub index_ms: Option<f64>,
    pub total_ms: Option<f64>,
    /// Why smart chunking fell back to the default cut, when it did.
    pub smart_chunking_fallback: Option<String>,
}
