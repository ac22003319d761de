//! Adapters: how a model config's endpoint is spoken to.

use serde::Serialize;
use utoipa::ToSchema;

use super::ModelType;

#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Adapter {
    pub adapter_key: &'static str,
    pub name: &'static str,
    pub model_type: ModelType,
    pub is_default: bool,
}

/// OpenAI-compatible `/chat/completions` and `/embeddings`.
pub const GENERIC_COMPATIBLE: &str = "generic-compatible";
/// Jina/Cohere-shaped `/rerank`.
pub const GENERIC_RERANK: &str = "generic-rerank";

const ADAPTERS: [Adapter; 3] = [
    Adapter {
        adapter_key: GENERIC_COMPATIBLE,
        name: "OpenAI-compatible chat",
        model_type: ModelType::Chat,
        is_default: true,
    },
    Adapter {
        adapter_key: GENERIC_COMPATIBLE,
        name: "OpenAI-compatible embeddings",
        model_type: ModelType::Embedding,
        is_default: true,
    },
    Adapter {
        adapter_key: GENERIC_RERANK,
        name: "Jina/Cohere-compatible rerank",
        model_type: ModelType::Reranker,
        is_default: true,
    },
];

pub fn for_type(model_type: ModelType) -> Vec<Adapter> {
    ADAPTERS
        .iter()
        .filter(|a| a.model_type == model_type)
        .cloned()
        .collect()
}

pub fn default_for(model_type: ModelType) -> &'static str {
    ADAPTERS
        .iter()
        .find(|a| a.model_type == model_type && a.is_default)
        .map(|a| a.adapter_key)
        .unwrap_or(GENERIC_COMPATIBLE)
}

pub fn supports(adapter_key: &str, model_type: ModelType) -> bool {
    ADAPTERS
        .iter()
        .any(|a| a.adapter_key == adapter_key && a.model_type == model_type)
}
