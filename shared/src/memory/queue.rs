//! The memory queue's messages: one per conversation to extract memories from. Produced after
//! a chat round (and by an extraction whose window was full), consumed by `worker`.

use serde::{Deserialize, Serialize};

use crate::queue::QueueName;
use crate::{AppError, AppResult, AppState};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExtractMessage {
    /// conversations.id; the config is the agent's when the message is handled.
    pub conversation_id: i64,
}

/// Queues the extraction of a conversation's memories.
pub async fn enqueue(state: &AppState, conversation_id: i64) -> AppResult<()> {
    let body = serde_json::json!(ExtractMessage { conversation_id }).to_string();
    state
        .queue()
        .send(QueueName::Memory, body)
        .await
        .map_err(|e| AppError::Internal(e.context("queueing a memory extraction failed")))
}
