//! What the chat model would be given for the next turn of a conversation: the short-term
//! window of messages, the recalled memories, and their size in tokens.

use super::model::{ContextPreview, PreviewMemory, PreviewMessage};
use super::{extract, service};
use crate::agents::chat::alternating;
use crate::agents::conversation_repo::{history_sql, HistoryMessage};
use crate::domain::CurrentUser;
use crate::domain::Owner;
use crate::models::gateway::Billing;
use crate::rag::chunk::count_tokens;
use crate::{AppError, AppResult, AppState};

/// Per-message framing tokens of the chat format (role markers, separators).
const MESSAGE_OVERHEAD: usize = 4;

pub async fn preview(state: &AppState, user: &CurrentUser, agent_id: i64, key: String) -> AppResult<ContextPreview> {
    let agent = service::visible_agent(state, user, agent_id).await?;
    let owner = Owner::User(user.id);
    let conv = extract::by_key(state.db(), agent_id, owner, &key)
        .await?
        .ok_or_else(|| AppError::not_found("conversation"))?;
    let window = agent.short_term_memory_size.max(0) as i64;
    // The messages a turn reads back as its history (`conversation_repo::history_sql`): every
    // one with text, a stopped or failed answer's part included.
    let total: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM messages WHERE conversation_id = $1 AND role <> 'system' AND content <> ''",
    )
    .bind(conv.id)
    .fetch_one(state.db())
    .await?;
    let history: sqlx::types::Json<Vec<HistoryMessage>> =
        sqlx::query_scalar(&format!("SELECT {}", history_sql("$1", "$2")))
            .bind(conv.id)
            .bind(window)
            .fetch_one(state.db())
            .await?;
    // Older messages left out, past the agent's window or the history's size (not those
    // joined so that roles take turns).
    let compression_applied = total > history.0.len() as i64;
    // The last question as stored, not joined with earlier unanswered ones.
    let last_user = history
        .0
        .iter()
        .rev()
        .find(|m| m.role == "user")
        .map(|m| m.content.clone());
    let history = alternating(history.0);
    let mut warnings = vec![];
    let memories = match (agent.memory_enabled, last_user) {
        (true, Some(query)) => {
            let who = super::Recall {
                agent_id,
                owner,
                billing: Billing::of(user),
                config_id: agent.memory_config_id,
            };
            // What the chat would recall (nothing with a disabled config), but not counted as
            // a recall: access counts stay as they are. A model that cannot be used now recalls
            // nothing, and says why, as the chat's `warning` line does.
            match super::recall(state, who, &query, false).await {
                Ok(memories) => memories,
                Err(e) if !e.is_server_side() => {
                    warnings.push(format!(
                        "long-term memories could not be recalled, so the next turn would not use them: {}",
                        e.told()
                    ));
                    vec![]
                }
                Err(e) => return Err(e),
            }
        }
        _ => vec![],
    };
    let mut tokens = count_tokens(&agent.instruction);
    tokens += history
        .iter()
        .map(|m| count_tokens(&m.role) + count_tokens(&m.content) + MESSAGE_OVERHEAD)
        .sum::<usize>();
    tokens += memories
        .iter()
        .map(|m| count_tokens(&m.title) + count_tokens(&m.content) + MESSAGE_OVERHEAD)
        .sum::<usize>();
    Ok(ContextPreview {
        compression_applied,
        estimated_tokens: tokens,
        messages: history
            .into_iter()
            .map(|m| PreviewMessage {
                role: m.role,
                content: m.content,
            })
            .collect(),
        memories: memories
            .into_iter()
            .map(|m| PreviewMemory {
                id: m.id,
                title: m.title,
                content: m.content,
                memory_type: m.memory_type,
            })
            .collect(),
        warnings,
    })
}
