//! Slow context gathered after the stream has started: knowledge-base retrieval and, with
//! memory on, the owner's long-term memories.

use tracing::field::Empty;
use tracing::Instrument;

use super::{prompt, Caller};
use crate::agents::conversation_repo::HistoryMessage;
use crate::agents::AgentRow;
use crate::models::client::ChatMessage;
use crate::models::gateway::{Billing, ModelHandle};
use crate::rag::{bases, qa, search};
use crate::AppState;

/// What knowledge retrieval asks with: the question, and with the base's `questionRewrite` the
/// conversation before it and the model that rewrites a follow-up into a standalone question.
pub struct Asked<'a> {
    pub query: &'a str,
    pub history: &'a [HistoryMessage],
    pub model: &'a ModelHandle,
}

/// Passages of the agent's knowledge base for this question. A failing retrieval is logged and
/// its reason returned: the turn goes on without it and tells the client so. Its model calls are
/// billed like the turn's own.
pub async fn knowledge(
    state: &AppState,
    agent: &AgentRow,
    asked: Asked<'_>,
    billing: Billing,
) -> Result<Vec<String>, String> {
    let (true, Some(rag_id)) = (agent.rag_enabled, agent.rag_id) else {
        return Ok(vec![]);
    };
    let span = tracing::info_span!(
        "knowledge_retrieval",
        rag.id = rag_id,
        rag.result_count = Empty,
        rag.search_ms = Empty
    );
    let passages = async {
        let kb = bases::repo::find_to_use(state.db(), rag_id)
            .await?
            .ok_or_else(|| crate::AppError::not_found("knowledge base"))?;
        let started = std::time::Instant::now();
        // The conversation is copied out for the rewrite only: a turn's history may be
        // 128 KB, and most bases do not rewrite.
        let query = match kb.search_params.0.question_rewrite && !asked.history.is_empty() {
            true => {
                let (mut conversation, last) = prompt::turns(asked.history.to_vec(), asked.query);
                conversation.push(ChatMessage::user(last));
                qa::retrieval_query(state, asked.model, &kb, billing, conversation, asked.query).await
            }
            false => asked.query.to_owned(),
        };
        let (results, _) = search::retrieve(state, &kb, &query, billing, None).await?;
        let current = tracing::Span::current();
        current.record("rag.result_count", results.len() as i64);
        current.record("rag.search_ms", started.elapsed().as_millis() as i64);
        search::with_neighbours(state.db(), &results, kb.model_params.0.nearby_slice_count).await
    };
    passages.instrument(span).await.map_err(|e| {
        tracing::warn!(agent_id = agent.id, rag_id, error = %e, "knowledge retrieval failed; answering without it");
        format!(
            "the knowledge base could not be searched, so this answer does not use it: {}",
            e.told()
        )
    })
}

/// The owner's memories that bear on this message, as prompt lines. A failing recall is logged
/// and its reason returned: the turn goes on without it and tells the client so.
pub async fn memories(state: &AppState, agent: &AgentRow, caller: Caller, query: &str) -> Result<Vec<String>, String> {
    if !agent.memory_enabled {
        return Ok(vec![]);
    }
    let span = tracing::info_span!("memory_recall", agent.id = agent.id, memory.recalled = Empty);
    let who = crate::memory::Recall {
        agent_id: agent.id,
        owner: caller.owner,
        billing: caller.billing,
        config_id: agent.memory_config_id,
    };
    let recalled = crate::memory::recall(state, who, query, true)
        .instrument(span.clone())
        .await;
    if let Ok(found) = &recalled {
        span.record("memory.recalled", found.len() as i64);
    }
    match recalled {
        Ok(found) => Ok(found
            .into_iter()
            // One line each: a memory's text comes from what was said in chats, and its own
            // line breaks could open what reads as a new section of the system prompt.
            .map(|m| {
                let line = format!("[{}] {}: {}", m.memory_type, m.title, m.content);
                line.split_whitespace().collect::<Vec<_>>().join(" ")
            })
            .collect()),
        Err(e) => {
            tracing::warn!(agent_id = agent.id, error = %e, "memory recall failed; answering without it");
            Err(format!(
                "long-term memories could not be recalled, so this answer does not use them: {}",
                e.told()
            ))
        }
    }
}
