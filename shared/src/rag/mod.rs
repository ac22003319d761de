//! Knowledge bases: documents, parsing, chunking, embeddings and retrieval.

pub mod backends;
pub mod bases;
pub mod chunk;
pub mod chunks;
pub mod document;
pub mod documents;
pub mod extparse;
pub mod fetch;
pub mod parse;
pub mod pipeline;
pub mod qa;
pub mod search;
pub mod segment;
pub mod smart;
pub mod vision;
