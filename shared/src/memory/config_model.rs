//! Memory configs as stored and as the API reads and shows them, and the built-in defaults.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::rag::search::fusion;
use crate::time;

pub const FUSION_STRATEGIES: [&str; 2] = ["RRF", "WEIGHTED_SUM"];

/// The stored settings; also the shape of the built-in defaults (`id` None).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ConfigRow {
    pub id: Option<i64>,
    pub name: String,
    pub status: i16,
    pub vector_store_instance_id: Option<i64>,
    pub embedding_model_id: Option<i64>,
    pub dimension: Option<i32>,
    pub max_recall: i32,
    pub rerank_model_id: Option<i64>,
    pub enter_rerank_count: i32,
    pub extraction_interval: i32,
    pub max_memories_per_extraction: i32,
    pub extraction_model_id: Option<i64>,
    pub memory_expiration_days: Option<i32>,
    pub rrf_k: i32,
    pub search_engine_enable: bool,
    pub search_engine_instance_id: Option<i64>,
    pub rewrite_enabled: bool,
    pub rerank_enabled: bool,
    pub threshold_enabled: bool,
    pub similarity_threshold: f64,
    pub dense_weight: f64,
    pub fusion_strategy: String,
    pub custom_extraction_prompt: Option<String>,
    pub creator_id: i64,
    pub create_dt: DateTime<Utc>,
    pub update_dt: DateTime<Utc>,
}

impl ConfigRow {
    /// What an agent with `memoryEnabled` but no `memoryConfigId` gets: the default EMBEDDING
    /// model, the default CHAT model for extraction, vector-only recall of 5, an extraction
    /// every 5 rounds of at most 5 memories, no expiry. The same values are the column
    /// defaults of a new config.
    pub fn builtin() -> Self {
        let now = Utc::now();
        Self {
            id: None,
            name: "built-in defaults".to_owned(),
            status: 1,
            vector_store_instance_id: None,
            embedding_model_id: None,
            dimension: None,
            max_recall: 5,
            rerank_model_id: None,
            enter_rerank_count: 20,
            extraction_interval: 5,
            max_memories_per_extraction: 5,
            extraction_model_id: None,
            memory_expiration_days: None,
            rrf_k: 60,
            search_engine_enable: false,
            search_engine_instance_id: None,
            rewrite_enabled: false,
            rerank_enabled: false,
            threshold_enabled: false,
            similarity_threshold: 0.5,
            dense_weight: fusion::DEFAULT_DENSE_WEIGHT,
            fusion_strategy: fusion::DEFAULT_STRATEGY.to_owned(),
            custom_extraction_prompt: None,
            creator_id: 0,
            create_dt: now,
            update_dt: now,
        }
    }
}

/// Body of POST and PUT /memory/config: every field optional on update; `name` and
/// `embeddingModelId` required on create. The optional references and settings are cleared by
/// an explicit `null` on update.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigRequest {
    pub name: Option<String>,
    /// 1 enabled (default), 0 disabled.
    pub status: Option<i16>,
    /// The built-in VECTOR_STORE instance, or none: memories are kept in the service's own
    /// database.
    #[serde(default, deserialize_with = "crate::json::nullable")]
    #[schema(value_type = Option<i64>)]
    pub vector_store_instance_id: Option<Option<i64>>,
    pub embedding_model_id: Option<i64>,
    #[serde(default, deserialize_with = "crate::json::nullable")]
    #[schema(value_type = Option<i32>)]
    pub dimension_of_vector_model: Option<Option<i32>>,
    pub max_recall: Option<i32>,
    #[serde(default, deserialize_with = "crate::json::nullable")]
    #[schema(value_type = Option<i64>)]
    pub rerank_model_id: Option<Option<i64>>,
    pub enter_rerank_count: Option<i32>,
    /// Rounds (user messages) between two extractions.
    pub extraction_interval: Option<i32>,
    pub max_memories_per_extraction: Option<i32>,
    #[serde(default, deserialize_with = "crate::json::nullable")]
    #[schema(value_type = Option<i64>)]
    pub extraction_model_id: Option<Option<i64>>,
    #[serde(default, deserialize_with = "crate::json::nullable")]
    #[schema(value_type = Option<i32>)]
    pub memory_expiration_days: Option<Option<i32>>,
    pub rrf_k: Option<i32>,
    pub search_engine_enable: Option<bool>,
    pub rewrite_enabled: Option<bool>,
    pub rerank_enabled: Option<bool>,
    pub threshold_enabled: Option<bool>,
    pub similarity_threshold: Option<f64>,
    pub dense_weight: Option<f64>,
    /// RRF or WEIGHTED_SUM.
    pub fusion_strategy: Option<String>,
    /// The built-in SEARCH_ENGINE instance, or none, as `vectorStoreInstanceId`.
    #[serde(default, deserialize_with = "crate::json::nullable")]
    #[schema(value_type = Option<i64>)]
    pub search_engine_instance_id: Option<Option<i64>>,
    /// Blank or null: the built-in prompt.
    #[serde(default, deserialize_with = "crate::json::nullable")]
    #[schema(value_type = Option<String>)]
    pub custom_extraction_prompt: Option<Option<String>>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigView {
    pub id: i64,
    pub name: String,
    pub status: i16,
    pub vector_store_instance_id: Option<i64>,
    pub embedding_model_id: Option<i64>,
    pub dimension_of_vector_model: Option<i32>,
    pub max_recall: i32,
    pub rerank_model_id: Option<i64>,
    pub enter_rerank_count: i32,
    pub extraction_interval: i32,
    pub max_memories_per_extraction: i32,
    pub extraction_model_id: Option<i64>,
    pub memory_expiration_days: Option<i32>,
    pub rrf_k: i32,
    pub search_engine_enable: bool,
    pub rewrite_enabled: bool,
    pub rerank_enabled: bool,
    pub threshold_enabled: bool,
    pub similarity_threshold: f64,
    pub dense_weight: f64,
    pub fusion_strategy: String,
    pub search_engine_instance_id: Option<i64>,
    pub custom_extraction_prompt: Option<String>,
    pub creator_id: i64,
    pub create_dt: String,
    pub update_dt: String,
}

impl From<ConfigRow> for ConfigView {
    fn from(r: ConfigRow) -> Self {
        Self {
            id: r.id.unwrap_or_default(),
            name: r.name,
            status: r.status,
            vector_store_instance_id: r.vector_store_instance_id,
            embedding_model_id: r.embedding_model_id,
            dimension_of_vector_model: r.dimension,
            max_recall: r.max_recall,
            rerank_model_id: r.rerank_model_id,
            enter_rerank_count: r.enter_rerank_count,
            extraction_interval: r.extraction_interval,
            max_memories_per_extraction: r.max_memories_per_extraction,
            extraction_model_id: r.extraction_model_id,
            memory_expiration_days: r.memory_expiration_days,
            rrf_k: r.rrf_k,
            search_engine_enable: r.search_engine_enable,
            rewrite_enabled: r.rewrite_enabled,
            rerank_enabled: r.rerank_enabled,
            threshold_enabled: r.threshold_enabled,
            similarity_threshold: r.similarity_threshold,
            dense_weight: r.dense_weight,
            fusion_strategy: r.fusion_strategy,
            search_engine_instance_id: r.search_engine_instance_id,
            custom_extraction_prompt: r.custom_extraction_prompt,
            creator_id: r.creator_id,
            create_dt: time::datetime(r.create_dt),
            update_dt: time::datetime(r.update_dt),
        }
    }
}
