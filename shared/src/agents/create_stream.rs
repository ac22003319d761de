//! `POST /agent/create/stream`: a chat model drafts an agent from a description; each field
//! is announced as it completes, then the agent is created.
//!
//! Lines: `[START]`, `[FIELD_DONE]<field>:<value>`, `[DONE]<agentId>` or `[ERROR]<message>`.
//! One signal per line, so values are escaped: `\` as `\\`, a newline as `\n`, a carriage
//! return as `\r`.

use std::collections::HashMap;
use tracing::Instrument as _;

use futures::stream::BoxStream;
use futures::StreamExt;
use tokio::sync::mpsc::Sender;

use super::draft_scanner::FieldScanner;
use super::model::AgentFields;
use super::service;
use crate::creation_cap::{self, Created};
use crate::domain::spawn_stream;
use crate::domain::CurrentUser;
use crate::models::client::{ChatEvent, ChatMessage, ChatRequest};
use crate::models::gateway::{self, Billing, ModelHandle};
use crate::models::quota::Hold;
use crate::models::usage::PendingUsage;
use crate::models::ModelType;
use crate::{validate, AppError, AppResult, AppState};

pub const FIELDS: [&str; 5] = ["name", "description", "instruction", "greeting", "avatar"];

const DRAFT_PROMPT: &str = "You design AI assistants. From the user's description, write one JSON object with \
the string fields name (at most 40 characters), description (one or two sentences), instruction (the assistant's \
system prompt), greeting (its first message to a user) and avatar (one emoji), in that order. Answer with the JSON \
object only.";

pub fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('\n', "\\n").replace('\r', "\\r")
}

/// One emoji-like avatar: short and without letters, digits or control characters, else the
/// default.
fn avatar(value: &str) -> String {
    let v = value.trim();
    if v.is_empty() || v.chars().count() > 8 || v.chars().any(|c| c.is_ascii_alphanumeric() || c.is_control()) {
        "🤖".to_owned()
    } else {
        v.to_owned()
    }
}

/// A drafted value as the agent can hold it: the model writes what it likes, and a value past
/// the field's limit, or holding a control character the field refuses, failed the creation
/// at the end of a paid draft. A name's line breaks and tabs become spaces; the other texts
/// keep theirs.
fn clean(field: &str, value: String) -> String {
    if field == "avatar" {
        return avatar(&value);
    }
    let (limit, layout) = match field {
        "name" => (service::MAX_NAME, false),
        "description" => (service::MAX_DESCRIPTION, true),
        "greeting" => (service::MAX_GREETING, true),
        _ => (service::MAX_INSTRUCTION, true),
    };
    let value: String = value
        .trim()
        .chars()
        .filter_map(|c| match validate::unprintable(c, layout) {
            true if matches!(c, '\n' | '\r' | '\t') => Some(' '),
            true => None,
            false => Some(c),
        })
        .take(limit)
        .collect();
    value.trim_end().to_owned()
}

pub async fn start(
    state: &AppState,
    user: &CurrentUser,
    description: Option<String>,
) -> AppResult<BoxStream<'static, String>> {
    let description = validate::required("description", description)?;
    validate::length("description", &description, 1, 2000)?;
    // The draft is a paid model call: a user the cap refuses is refused before it (and counted
    // again when the agent is created).
    creation_cap::check_early(state, user, Created::Agent).await?;
    // Only "none usable" is reworded: a database that failed stays a 503 a client retries.
    let model = gateway::default_model(state, ModelType::Chat)
        .await
        .map_err(|e| e.refusal(|_| "no default CHAT model is configured to draft the agent".to_owned()))?;
    // Held now so that a user without quota is refused before the stream starts.
    let billing = Billing::of(user);
    let hold = gateway::hold_turn(state, &model, billing, &description).await?;
    let (state, user) = (state.clone(), user.clone());
    Ok(spawn_stream(move |tx: Sender<String>| {
        async move {
            let _ = tx.send("[START]\n".to_owned()).await;
            let line = match draft_and_create(&state, &user, &model, hold, &description, &tx).await {
                Ok(id) => format!("[DONE]{id}\n"),
                Err(message) => {
                    // The response said 200 long ago: this line is the failure's trace in the log.
                    tracing::warn!(error = %message, "the agent draft ended with an error");
                    format!("[ERROR]{}\n", escape(&message))
                }
            };
            let _ = tx.send(line).await;
        }
        .in_current_span()
    }))
}

async fn draft_and_create(
    state: &AppState,
    user: &CurrentUser,
    model: &ModelHandle,
    hold: Hold,
    description: &str,
    tx: &Sender<String>,
) -> Result<i64, String> {
    let req = ChatRequest {
        messages: vec![ChatMessage::system(DRAFT_PROMPT), ChatMessage::user(description)],
        ..Default::default()
    };
    // Drafting, the model call's opening and its retries included, stops before the function's
    // own limit (the chat's turn limit, the same function): a slow or reasoning model, each of
    // whose lines restarts the idle timeout, otherwise ran until Lambda ended the stream with
    // neither [DONE] nor [ERROR].
    let limit = state.config().chat_turn_timeout;
    let mut fields: HashMap<&'static str, String> = HashMap::new();
    const GONE: &str = "the client went away";
    // The call settles before the stream ends, however it ends (see `rag::qa`).
    let usage = PendingUsage::new(state.db().clone());
    let drafted = tokio::time::timeout(limit, async {
        // The call's opening is raced with the client too, as a chat turn's is.
        let opened =
            gateway::chat_stream_held(state, model, Billing::of(user), hold, "agent-draft", &req, Some(&usage));
        let mut stream = tokio::select! {
            _ = tx.closed() => return Err(GONE.into()),
            opened = opened => opened.map_err(|e| AppError::from(e).told())?,
        };
        let mut scanner = FieldScanner::default();
        loop {
            // A client that left is noticed at once, not at the next line sent: the model call
            // (paid for) stops with it.
            let event = tokio::select! {
                _ = tx.closed() => return Err(GONE.into()),
                event = stream.next() => event,
            };
            let Some(event) = event else { break };
            let text = match event {
                Ok(ChatEvent::Text(t)) => t,
                Ok(_) => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "drafting an agent: the model call failed");
                    let own = user.id == model.row.creator_id;
                    return Err(format!("the model call failed: {}", e.told_to(own)));
                }
            };
            for (key, value) in scanner.feed(&text) {
                let Some(field) = FIELDS.iter().find(|f| **f == key) else {
                    continue;
                };
                let value = clean(field, value);
                if tx
                    .send(format!("[FIELD_DONE]{field}:{}\n", escape(&value)))
                    .await
                    .is_err()
                {
                    return Err(GONE.into());
                }
                fields.insert(field, value);
            }
        }
        Ok::<(), String>(())
    })
    .await;
    usage.store().await;
    match drafted {
        Ok(drafted) => drafted?,
        Err(_) => {
            return Err(format!(
                "drafting passed its time limit of {} s and was stopped",
                limit.as_secs()
            ))
        }
    }
    // Nobody would learn the new agent's id.
    if tx.is_closed() {
        return Err(GONE.into());
    }
    let name = fields.remove("name").filter(|n| !n.is_empty());
    let Some(name) = name else {
        return Err("the model's draft has no name; try a more specific description".into());
    };
    let mut take = |f: &str| fields.remove(f);
    let agent = AgentFields {
        name: Some(name),
        description: take("description"),
        instruction: take("instruction"),
        greeting: take("greeting"),
        avatar: take("avatar"),
        chat_model_id: Some(Some(model.row.id)),
        ..Default::default()
    };
    service::create(state, user, agent).await.map_err(|e| e.told())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_stay_on_one_line() {
        assert_eq!(escape("a\\b\nc\rd"), "a\\\\b\\nc\\rd");
        assert_eq!(avatar("robot"), "🤖");
        assert_eq!(avatar(" 🧭 "), "🧭");
        assert_eq!(clean("greeting", " Hi\0 there ".into()), "Hi there");
        assert_eq!(clean("name", "n".repeat(150)).len(), service::MAX_NAME);
        assert_eq!(clean("description", "d".repeat(1500)).len(), service::MAX_DESCRIPTION);
        // What an agent's fields refuse never reaches the creation at the end of the draft.
        assert_eq!(clean("name", "Trip\tPlanner\nPro".into()), "Trip Planner Pro");
        assert_eq!(
            clean("description", "Plans\u{1b}[1m trips.\nFast.".into()),
            "Plans[1m trips.\nFast."
        );
        assert_eq!(avatar("🧭\u{7}"), "🤖");
        for (field, layout) in [("name", false), ("description", true), ("instruction", true)] {
            let drafted = clean(field, "a\u{0}\u{1}\t\r\n\u{85}b".into());
            assert!(
                validate::printable(field, &drafted, layout).is_ok(),
                "{field}: {drafted:?}"
            );
        }
    }
}
