//! Long-term memory: typed memories extracted from conversations, recalled for chat by the
//! agent's memory config, managed under `/memory`.
//!
//! Chat uses two calls: [`recall`] before answering and [`after_round`] after each round.
//! An agent with `memoryEnabled` but no `memoryConfigId` runs on the built-in defaults
//! ([`config_model::ConfigRow::builtin`]): the default EMBEDDING model for recall, the default CHAT
//! model for extraction.

pub mod config;
pub mod config_model;
pub mod config_repo;
pub mod config_service;
pub mod context;
pub mod extract;
pub mod lifecycle;
pub mod model;
pub mod queue;
pub mod recall;
pub mod repo;
pub mod service;
pub mod worker;

pub use model::*;
pub use recall::RecalledMemory;

use crate::domain::Owner;
use crate::models::gateway::Billing;
use crate::{AppError, AppResult, AppState};

/// Who recalls for whom: the owner's memories of the agent, the model calls paid by `billing`
/// (the chat turn's payer), by the strategy of `config_id` (built-in defaults when None).
pub struct Recall {
    pub agent_id: i64,
    pub owner: Owner,
    pub billing: Billing,
    pub config_id: Option<i64>,
}

/// The owner's ACTIVE memories of the agent most relevant to `query`; their access count and
/// time are updated when `counted` (a chat's recall, not a preview of it). The caller checks
/// the agent's `memoryEnabled`. A disabled config (status 0) or a blank query recalls nothing;
/// a missing config or model is an error.
pub async fn recall(state: &AppState, r: Recall, query: &str, counted: bool) -> AppResult<Vec<RecalledMemory>> {
    if query.trim().is_empty() {
        return Ok(vec![]);
    }
    // The status first: a disabled config's models are not loaded, so one gone or disabled
    // meanwhile does not warn on every turn of an agent whose memory is off.
    let config = config_repo::effective(state.db(), r.config_id).await?;
    if config.status == 0 {
        return Ok(vec![]);
    }
    let strategy = recall::strategy_of(state, config).await?;
    let scope = repo::Scope::recall(r.agent_id, r.owner, strategy.config.memory_expiration_days);
    recall::run(state, &scope, &strategy, r.billing, query, counted).await
}

/// Called by chat after each completed round of conversation `conversation_pk`
/// (conversations.id): queues an extraction on the memory queue once `extractionInterval`
/// rounds (user messages) have accumulated since the last one. Cheap otherwise (two queries).
pub async fn after_round(
    state: &AppState,
    agent_id: i64,
    owner: Owner,
    conversation_pk: i64,
    memory_config_id: Option<i64>,
) -> AppResult<()> {
    let conv = extract::conversation(state.db(), conversation_pk)
        .await?
        .filter(|c| c.agent_id == agent_id && c.owner == owner)
        .ok_or_else(|| AppError::not_found("conversation"))?;
    extract::after_round(state, &conv, memory_config_id).await
}
