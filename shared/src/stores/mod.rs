//! Store instances: where a knowledge base keeps its vectors and its full-text index.

pub mod model;
pub mod probe;
pub mod repo;
pub mod service;

pub use model::*;

/// The four store types: codes as the API sends them, names as it shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreType {
    PgVector,
    Milvus,
    OpenSearch,
    PgFullText,
}

impl StoreType {
    pub fn from_code(code: i64) -> Option<Self> {
        match code {
            1 => Some(Self::PgVector),
            2 => Some(Self::Milvus),
            3 => Some(Self::OpenSearch),
            4 => Some(Self::PgFullText),
            _ => None,
        }
    }
    pub fn from_name(name: &str) -> Option<Self> {
        [Self::PgVector, Self::Milvus, Self::OpenSearch, Self::PgFullText]
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(name.trim()))
    }
    pub fn code(self) -> i16 {
        match self {
            Self::PgVector => 1,
            Self::Milvus => 2,
            Self::OpenSearch => 3,
            Self::PgFullText => 4,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Self::PgVector => "PGVECTOR",
            Self::Milvus => "MILVUS",
            Self::OpenSearch => "OPENSEARCH",
            Self::PgFullText => "PG_FULLTEXT",
        }
    }
    /// Whether the type can serve a category (1 = vector store, 2 = search engine).
    pub fn serves(self, category: i16) -> bool {
        match category {
            VECTOR_STORE => matches!(self, Self::PgVector | Self::Milvus | Self::OpenSearch),
            SEARCH_ENGINE => matches!(self, Self::OpenSearch | Self::PgFullText),
            _ => false,
        }
    }
}

pub const VECTOR_STORE: i16 = 1;
pub const SEARCH_ENGINE: i16 = 2;

pub fn category_name(category: i16) -> &'static str {
    if category == VECTOR_STORE {
        "VECTOR_STORE"
    } else {
        "SEARCH_ENGINE"
    }
}

impl StoreType {
    /// The port a store of this type listens on when the config names none.
    pub fn default_port(self) -> u16 {
        match self {
            StoreType::PgVector | StoreType::PgFullText => 5432,
            StoreType::Milvus => 19530,
            StoreType::OpenSearch => 9200,
        }
    }
}
