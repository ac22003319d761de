//! Agents, their conversations and chat.

pub mod analytics;
pub mod chat;
pub mod conversation_repo;
pub mod conversations;
pub mod create_stream;
mod draft_scanner;
pub mod model;
pub mod period;
pub mod references;
pub mod repo;
pub mod service;
pub mod web_search;

pub use model::*;
