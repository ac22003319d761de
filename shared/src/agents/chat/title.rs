//! Conversation titles: the first words of the first message at once, then a model-written
//! title once the first answer is complete.

use crate::agents::conversation_repo as repo;
use crate::models::client::{ChatMessage, ChatRequest};
use crate::models::gateway::{self, Billing, ModelHandle};
use crate::text::prefix_chars;
use crate::AppState;

const MAX_TITLE_CHARS: usize = 50;
/// The longest the title's model call may take, retries included. It runs after the answer,
/// outside the turn's own limit, on the agent's config, whose timeout and retries (up to 600 s
/// and 5) its creator sets: unbounded, it could outlast the function's invocation, which ended
/// it mid-call with the stream still open.
const TIME_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);

fn clip(text: &str) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let trimmed = one_line.trim_matches(|c: char| c == '"' || c == '\'' || c == '“' || c == '”' || c.is_whitespace());
    let kept = prefix_chars(trimmed, MAX_TITLE_CHARS);
    if kept.len() < trimmed.len() {
        format!("{kept}…")
    } else {
        kept.to_owned()
    }
}

/// The title a new conversation gets before any model has answered.
pub fn fallback(first_message: &str) -> String {
    clip(first_message)
}

/// Asks the chat model for a short title of the first exchange; keeps the fallback on failure
/// and never replaces a title that is not the fallback (one the client chose).
pub async fn generate(
    state: &AppState,
    model: &ModelHandle,
    billing: Billing,
    conversation_id: i64,
    question: &str,
    answer: &str,
) {
    let req = ChatRequest {
        messages: vec![
            ChatMessage::system(
                "Write a short title (at most 8 words) for the conversation below. Answer with the title only.",
            ),
            ChatMessage::user(format!(
                "User: {}\nAssistant: {}",
                prefix_chars(question, 1000),
                prefix_chars(answer, 1000)
            )),
        ],
        max_tokens: Some(30),
        ..Default::default()
    };
    let model = model.clone().within(TIME_LIMIT);
    let title = match gateway::chat(state, &model, billing, "title", &req).await {
        Ok(r) => clip(&r.content),
        Err(e) => {
            tracing::warn!(conversation_id, error = %e, "title generation failed; keeping the first words");
            return;
        }
    };
    if title.is_empty() {
        return;
    }
    if let Err(e) = repo::replace_title(state.db(), conversation_id, &fallback(question), &title).await {
        tracing::error!(conversation_id, error = %e, "saving the conversation title failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_are_one_short_line() {
        assert_eq!(fallback("  \"Hello\n  world\"  "), "Hello world");
        let long = "word ".repeat(30);
        let t = fallback(&long);
        assert_eq!(t.chars().count(), MAX_TITLE_CHARS + 1);
        assert!(t.ends_with('…'));
    }
}
