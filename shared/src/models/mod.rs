//! Model providers and configs, the client layer every other module calls models through,
//! usage accounting and token quotas.

pub mod adapters;
pub mod client;
pub mod gateway;
pub mod model;
pub mod probe;
pub mod quota;
pub mod repo;
pub mod service;
mod trace_content;
pub mod usage;

pub use model::*;

/// CHAT, EMBEDDING or RERANKER.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum ModelType {
    Chat,
    Embedding,
    Reranker,
}

impl ModelType {
    pub const ALL: [ModelType; 3] = [Self::Chat, Self::Embedding, Self::Reranker];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Chat => "CHAT",
            Self::Embedding => "EMBEDDING",
            Self::Reranker => "RERANKER",
        }
    }

    /// Parses a client-supplied type (case-insensitive), naming the field on failure.
    pub fn parse(field: &str, value: &str) -> Result<Self, crate::AppError> {
        match value.trim().to_ascii_uppercase().as_str() {
            "CHAT" => Ok(Self::Chat),
            "EMBEDDING" => Ok(Self::Embedding),
            "RERANKER" => Ok(Self::Reranker),
            _ => Err(crate::AppError::validation(format!(
                "{field} must be CHAT, EMBEDDING or RERANKER"
            ))),
        }
    }
}
