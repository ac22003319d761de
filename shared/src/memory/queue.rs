//! The memory queue's messages: one per conversation to extract memories from. Produced after
//! a chat round (and by an extraction whose window was full), consumed by `worker`.

use serde::{Deserialize, Serialize};

use crate::domain::Owner;
use crate::queue::QueueName;
use crate::{AppError, AppResult, AppState};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExtractMessage {
    /// conversations.id; the config is the agent's when the message is handled.
    pub conversation_id: i64,
}

/// Queues the extraction of a conversation's memories, as work of its user, or of its agent for
/// a partner's end user: a partner's traffic comes from many end users at once.
pub async fn enqueue(state: &AppState, conversation_id: i64, (owner, agent_id): (Owner, i64)) -> AppResult<()> {
    let body = serde_json::json!(ExtractMessage { conversation_id }).to_string();
    let tenant = match owner {
        Owner::User(id) => format!("user:{id}"),
        Owner::External(_) => format!("agent:{agent_id}"),
    };
    state
        .queue()
        .send(QueueName::Memory, &tenant, body)
        .await
        .map_err(|e| AppError::Internal(e.context("queueing a memory extraction failed")))
}
