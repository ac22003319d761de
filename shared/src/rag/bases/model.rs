//! Wire shapes of knowledge bases.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::settings::*;
use crate::time;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct KbRow {
    pub id: i64,
    pub name: String,
    pub description: Option<String>,
    pub icon: Option<String>,
    pub embedding_model_id: i64,
    pub embedding_model_name: Option<String>,
    pub dimension: i32,
    pub vector_store_instance_id: i64,
    /// Whether the vector store is the service's own database, so search needs no second
    /// lookup for it.
    pub vector_store_builtin: Option<bool>,
    pub rerank_model_id: Option<i64>,
    pub search_engine_enable: bool,
    pub search_engine_instance_id: Option<i64>,
    /// Whether the search engine is the service's own database, for the same reason.
    pub search_engine_builtin: Option<bool>,
    pub status: String,
    pub chunk_params: sqlx::types::Json<ChunkSettings>,
    pub parse_params: sqlx::types::Json<ParseSettings>,
    pub search_params: sqlx::types::Json<SearchSettings>,
    pub model_params: sqlx::types::Json<ModelSettings>,
    pub dedup_strategy: i16,
    pub dedup_action: i16,
    pub upload_confirm: bool,
    pub creator_id: i64,
    /// Counted by `repo::find` and the page only; 0 from `repo::find_to_use`.
    pub document_count: i64,
    pub chunk_count: i64,
    /// Whether any document of the base has finished with chunks (search answers an empty base
    /// without calling a model).
    pub has_chunks: bool,
    /// Whether any document of the base has saved images (search skips image evidence if not).
    pub has_images: bool,
    pub create_dt: DateTime<Utc>,
    pub update_dt: DateTime<Utc>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct KbView {
    pub id: i64,
    pub name: String,
    pub description: Option<String>,
    pub icon: Option<String>,
    pub embedding_model_id: i64,
    pub embedding_model_name: Option<String>,
    pub dimension_of_vector_model: i32,
    pub vector_store_instance_id: i64,
    pub rerank_model_id: Option<i64>,
    pub search_engine_enable: bool,
    pub search_engine_instance_id: Option<i64>,
    pub delimiter: String,
    pub document_count: i64,
    pub chunk_count: i64,
    pub status: String,
    pub chunk_mode: String,
    pub max_chunk_tokens: i64,
    pub chunk_overlap: i64,
    pub custom_delimiter: Option<String>,
    pub chunk_regex: Option<String>,
    pub chunk_model_id: Option<i64>,
    pub merge_short_segments: bool,
    pub image_ocr: bool,
    pub parse_engine: String,
    pub extparse_do_ocr: bool,
    pub extparse_do_table_structure: bool,
    pub extparse_save_images: bool,
    pub parse_params: ParseSettings,
    pub search_params: SearchSettings,
    pub model_params: ModelSettings,
    /// 0 none, 1 by name, 2 by content, 3 by name or content.
    pub dedup_strategy: i16,
    /// 0 reject, 1 skip, 2 overwrite.
    pub dedup_action: i16,
    pub upload_confirm: bool,
    pub creator_id: i64,
    pub created_dt: String,
    pub update_dt: String,
}

impl From<KbRow> for KbView {
    fn from(r: KbRow) -> Self {
        let chunk = r.chunk_params.0;
        let parse = r.parse_params.0;
        Self {
            id: r.id,
            name: r.name,
            description: r.description,
            icon: r.icon,
            embedding_model_id: r.embedding_model_id,
            embedding_model_name: r.embedding_model_name,
            dimension_of_vector_model: r.dimension,
            vector_store_instance_id: r.vector_store_instance_id,
            rerank_model_id: r.rerank_model_id,
            search_engine_enable: r.search_engine_enable,
            search_engine_instance_id: r.search_engine_instance_id,
            delimiter: chunk.custom_delimiter.clone().unwrap_or_else(|| "\n\n".to_owned()),
            document_count: r.document_count,
            chunk_count: r.chunk_count,
            status: r.status,
            chunk_mode: chunk.mode,
            max_chunk_tokens: chunk.max_chunk_tokens,
            chunk_overlap: chunk.chunk_overlap,
            custom_delimiter: chunk.custom_delimiter,
            chunk_regex: chunk.chunk_regex,
            chunk_model_id: chunk.chunk_model_id,
            merge_short_segments: chunk.merge_short_segments,
            image_ocr: chunk.image_ocr,
            parse_engine: parse.engine.clone(),
            extparse_do_ocr: parse.do_ocr,
            extparse_do_table_structure: parse.do_table_structure,
            extparse_save_images: parse.save_images,
            parse_params: parse,
            search_params: r.search_params.0,
            model_params: r.model_params.0,
            dedup_strategy: r.dedup_strategy,
            dedup_action: r.dedup_action,
            upload_confirm: r.upload_confirm,
            creator_id: r.creator_id,
            created_dt: time::datetime(r.create_dt),
            update_dt: time::datetime(r.update_dt),
        }
    }
}

/// Create (name and embeddingModelId required) or update (all optional).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct KbRequest {
    pub name: Option<String>,
    pub description: Option<String>,
    pub icon: Option<String>,
    pub embedding_model_id: Option<i64>,
    /// Probed from the embedding model when not given.
    pub dimension_of_vector_model: Option<i64>,
    pub vector_store_instance_id: Option<i64>,
    pub rerank_model_id: Option<i64>,
    pub search_engine_enable: Option<bool>,
    pub search_engine_instance_id: Option<i64>,
    pub chunk_mode: Option<String>,
    pub max_chunk_tokens: Option<i64>,
    pub chunk_overlap: Option<i64>,
    pub custom_delimiter: Option<String>,
    pub chunk_regex: Option<String>,
    pub chunk_model_id: Option<i64>,
    pub merge_short_segments: Option<bool>,
    pub image_ocr: Option<bool>,
    pub parse_engine: Option<String>,
    pub extparse_do_ocr: Option<bool>,
    pub extparse_do_table_structure: Option<bool>,
    pub extparse_save_images: Option<bool>,
    #[schema(value_type = Option<ParseSettings>)]
    pub parse_params: Option<Value>,
    pub dedup_strategy: Option<i64>,
    pub dedup_action: Option<i64>,
    pub upload_confirm: Option<bool>,
}

/// `PUT /rag/{id}/config`: every section optional; given fields replace stored ones.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct KbConfigRequest {
    #[schema(value_type = Option<ChunkSettings>)]
    pub chunk_params: Option<Value>,
    #[schema(value_type = Option<ParseSettings>)]
    pub parse_params: Option<Value>,
    #[schema(value_type = Option<SearchSettings>)]
    pub search_params: Option<Value>,
    #[schema(value_type = Option<ModelSettings>)]
    pub model_params: Option<Value>,
}
