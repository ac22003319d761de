//! Slow context gathered after the stream has started: knowledge-base retrieval (and, with
//! memory on, the user's long-term memories).

use crate::agents::AgentRow;
use crate::rag::{bases, search};
use crate::AppState;

/// Passages of the agent's knowledge base for this question; a failing retrieval is logged and
/// the turn goes on without it.
pub async fn knowledge(state: &AppState, agent: &AgentRow, query: &str, user_id: Option<i64>) -> Vec<String> {
    let (true, Some(rag_id)) = (agent.rag_enabled, agent.rag_id) else {
        return vec![];
    };
    let passages = async {
        let kb = bases::repo::find(state.db(), rag_id)
            .await?
            .ok_or_else(|| crate::AppError::not_found("knowledge base"))?;
        let (results, _) = search::retrieve(state, &kb, query, user_id.unwrap_or(agent.creator_id)).await?;
        search::with_neighbours(state.db(), &results, kb.model_params.0.nearby_slice_count).await
    };
    match passages.await {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(agent_id = agent.id, rag_id, error = %e, "knowledge retrieval failed; answering without it");
            vec![]
        }
    }
}
