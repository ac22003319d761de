//! Streamed question answering over a knowledge base: retrieve, build the prompt from the
//! base's template, stream the chat model's answer, remember the turn.

use futures::stream::BoxStream;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tracing::Instrument as _;
use utoipa::ToSchema;

use crate::domain::spawn_stream;
use crate::domain::CurrentUser;
use crate::models::client::{check_answer_size, ChatEvent, ChatMessage, ChatRequest};
use crate::models::gateway::{self, Billing, ModelHandle};
use crate::models::quota::Hold;
use crate::models::usage::PendingUsage;
use crate::models::ModelType;
use crate::rag::bases::KbRow;
use crate::rag::search::{self, SearchResult};
use crate::{AppError, AppResult, AppState};

const DEFAULT_PROMPT: &str = "Answer the question using only the context below. If the context does not contain \
the answer, say that you do not know.\n\nContext:\n{context}\n\nQuestion: {query}";
const HISTORY_TURNS: i64 = 10;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct QaRequest {
    #[schema(required = true)]
    pub rag_id: Option<i64>,
    #[schema(required = true)]
    pub query: Option<String>,
    /// Keeps multi-turn context when reused.
    pub conversation_id: Option<String>,
}

/// One line of the Q&A stream.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum QaEvent {
    Text { data: String },
    Done { references: Vec<Reference> },
    Error { message: String },
}

#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Reference {
    pub chunk_id: i64,
    pub document_id: i64,
    pub document_name: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ReferenceImage>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReferenceImage {
    pub image_url: String,
    pub source_page: Option<i32>,
    pub match_type: String,
    pub match_reason: String,
}

/// Validates and prepares everything that can fail with a plain error before the stream
/// starts; what fails later becomes an `error` event.
pub async fn answer(state: &AppState, user: &CurrentUser, req: QaRequest) -> AppResult<BoxStream<'static, QaEvent>> {
    let (kb, query) = search::resolve(state, user, req.rag_id, req.query).await?;
    let conversation = crate::validate::optional(req.conversation_id);
    if let Some(c) = &conversation {
        crate::validate::length("conversationId", c, 1, 128)?;
    }
    // The answer's tokens are held before the stream starts: a user whose quota cannot pay
    // for an answer is refused with the module's envelope (403), as every streamed route
    // refuses, not by an error line inside a 200 stream. A base with no usable chat model is
    // told on the stream, as documented.
    let billing = Billing::of(user);
    let asked = match chat_model(state, &kb).await {
        Ok(model) => {
            let hold = gateway::hold_turn(state, &model, billing, &query).await?;
            Ok(Asked {
                model,
                hold,
                user_id: user.id,
                billing,
            })
        }
        Err(e) if e.is_server_side() => return Err(e),
        Err(e) => Err(e.to_string()),
    };
    let state = state.clone();
    Ok(spawn_stream(move |tx: Sender| {
        async move {
            let limit = state.config().qa_timeout;
            // The answer's call settles here, before the stream ends, however it ends: dropped
            // (the client gone, the time limit), its hold went back in a task of its own, which
            // under Lambda may never run once the stream has ended, and the tokens stayed spent.
            let usage = PendingUsage::new(state.db().clone());
            let answered = match asked {
                Ok(asked) => tokio::time::timeout(
                    limit,
                    run(&state, &kb, asked, &query, conversation.as_deref(), (&tx, &usage)),
                )
                .await
                .unwrap_or_else(|_| {
                    Err(format!(
                        "the answer took longer than {} s (QA_TIMEOUT_SECS) and was stopped",
                        limit.as_secs()
                    ))
                }),
                Err(message) => Err(message),
            };
            usage.store().await;
            if let Err(message) = answered {
                // The response said 200 long ago: this line is the failure's trace in the log.
                tracing::warn!(error = %message, "the answer ended with an error");
                let _ = tx.send(QaEvent::Error { message }).await;
            }
        }
        .in_current_span()
    }))
}

type Sender = tokio::sync::mpsc::Sender<QaEvent>;

/// Who asks, with what, paid how: the answer's model, the tokens held for it, the asker.
struct Asked {
    model: ModelHandle,
    hold: Hold,
    user_id: i64,
    billing: Billing,
}

async fn chat_model(state: &AppState, kb: &KbRow) -> AppResult<ModelHandle> {
    match kb.model_params.0.model_id {
        Some(id) => gateway::load(state, id, ModelType::Chat)
            .await
            .map_err(|e| e.refusal(|told| format!("the Q&A model cannot be used: {told}"))),
        None => gateway::default_model(state, ModelType::Chat).await.map_err(|e| {
            e.refusal(|_| {
                "no chat model is configured for this knowledge base (modelParams.modelId) and there is no default CHAT model".to_owned()
            })
        }),
    }
}

async fn history(
    state: &AppState,
    kb: &KbRow,
    user_id: i64,
    conversation: Option<&str>,
) -> Result<Vec<ChatMessage>, String> {
    let Some(conversation) = conversation else {
        return Ok(vec![]);
    };
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT role, content FROM (SELECT id, role, content FROM qa_messages
           WHERE rag_id = $1 AND user_id = $2 AND conversation_id = $3 ORDER BY id DESC LIMIT $4) t ORDER BY id",
    )
    .bind(kb.id)
    .bind(user_id)
    .bind(conversation)
    .bind(HISTORY_TURNS * 2)
    .fetch_all(state.db())
    .await
    .map_err(|e| format!("loading the conversation failed: {}", AppError::from(e).told()))?;
    Ok(rows
        .into_iter()
        .map(|(role, content)| ChatMessage::said_by(&role, content))
        .collect())
}

/// With history and `questionRewrite`, the model first turns the follow-up into a standalone
/// question for retrieval (Q&A, and agent chat over the base). `conversation` is what it is
/// shown: the history and, last, the follow-up (as the answering call is sent them); `query`
/// is searched as asked when there is nothing to rewrite or the rewrite fails.
pub async fn retrieval_query(
    state: &AppState,
    model: &ModelHandle,
    kb: &KbRow,
    billing: Billing,
    conversation: Vec<ChatMessage>,
    query: &str,
) -> String {
    if conversation.len() < 2 || !kb.search_params.0.question_rewrite {
        return query.to_owned();
    }
    let mut messages = vec![ChatMessage::system(
        "Rewrite the user's last question as one standalone search query. Answer with the query only.",
    )];
    messages.extend(conversation);
    let req = ChatRequest {
        messages,
        max_tokens: Some(100),
        ..Default::default()
    };
    match gateway::chat(state, model, billing, "rewrite", &req).await {
        Ok(r) if !r.content.trim().is_empty() => r.content.trim().to_owned(),
        _ => query.to_owned(),
    }
}

fn prompt(kb: &KbRow, context: &[String], query: &str) -> String {
    let numbered: Vec<String> = context
        .iter()
        .enumerate()
        .map(|(i, c)| format!("[{}] {c}", i + 1))
        .collect();
    let template = kb
        .model_params
        .0
        .prompt
        .clone()
        .unwrap_or_else(|| DEFAULT_PROMPT.to_owned());
    fill(&template, &[("{context}", &numbered.join("\n\n")), ("{query}", query)])
}

/// The template with each placeholder replaced, in one pass over the template only: replaced
/// one after the other, a `{query}` inside a retrieved passage (a document about prompts) was
/// replaced too, and the model read the question spliced into the source.
fn fill(template: &str, values: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len() + values.iter().map(|(_, v)| v.len()).sum::<usize>());
    let mut rest = template;
    while let Some((at, placeholder, value)) = values
        .iter()
        .filter_map(|(p, v)| rest.find(p).map(|at| (at, *p, *v)))
        .min_by_key(|(at, ..)| *at)
    {
        out.push_str(&rest[..at]);
        out.push_str(value);
        rest = &rest[at + placeholder.len()..];
    }
    out.push_str(rest);
    out
}

/// Retrieves, answers with the held tokens, and stores the exchange in `conversation` if one is named.
async fn run(
    state: &AppState,
    kb: &KbRow,
    asked: Asked,
    query: &str,
    conversation: Option<&str>,
    (tx, usage): (&Sender, &PendingUsage),
) -> Result<(), String> {
    let Asked {
        model,
        mut hold,
        user_id,
        billing,
    } = asked;
    // Retrieval pays for its calls first (a rewrite, the query's embedding, a rerank); the
    // answer takes what is left when it starts.
    hold.lend_above(gateway::question_estimate(query)).await;
    let gathered = async {
        let past = history(state, kb, user_id, conversation).await?;
        let asked = past.iter().cloned().chain([ChatMessage::user(query)]).collect();
        let search_query = retrieval_query(state, &model, kb, billing, asked, query).await;
        let (results, _) = search::retrieve(state, kb, &search_query, billing, None)
            .await
            .map_err(|e| format!("retrieval failed: {}", e.told()))?;
        let context = search::with_neighbours(state.db(), &results, kb.model_params.0.nearby_slice_count)
            .await
            .map_err(|e| format!("retrieval failed: {}", e.told()))?;
        Ok::<_, String>((past, results, context))
    }
    .await;
    // The client left while the context was gathered (the answer, the costliest call, is not
    // asked for), or it could not be gathered: the hold goes back before the stream ends, as
    // a dropped one goes back in a task that may never run under Lambda once it has.
    let (past, results, context) = match gathered {
        Ok(gathered) if !tx.is_closed() => gathered,
        ended => {
            hold.settle(0).await;
            return ended.map(|_| ());
        }
    };
    let mut messages = past;
    messages.push(ChatMessage::user(prompt(kb, &context, query)));
    let req = ChatRequest {
        messages,
        ..Default::default()
    };
    // The call's opening (a slow first response, retries after a 429) is raced with the client
    // too, as a chat turn's is.
    let opened = gateway::chat_stream_held(state, &model, billing, hold, "qa", &req, Some(usage));
    let mut stream = tokio::select! {
        _ = tx.closed() => return Ok(()),
        opened = opened => opened.map_err(|e| AppError::from(e).told())?,
    };
    let mut answer = String::new();
    loop {
        // A client that left is noticed at once (a reasoning model sends no text for a while),
        // and the model call, paid for, stops with it.
        let event = tokio::select! {
            _ = tx.closed() => return Ok(()),
            event = stream.next() => event,
        };
        let Some(event) = event else { break };
        match event {
            Ok(ChatEvent::Text(t)) => {
                answer.push_str(&t);
                check_answer_size(answer.len())?;
                if tx.send(QaEvent::Text { data: t }).await.is_err() {
                    return Ok(()); // the client went away
                }
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(rag_id = kb.id, error = %e, "Q&A answer failed");
                return Err(format!("the model call failed: {}", e.brief()));
            }
        }
    }
    if let Some(c) = conversation {
        remember(state, kb.id, user_id, c, query, &answer).await;
    }
    let results = still_indexed(state, results).await;
    let _ = tx
        .send(QaEvent::Done {
            references: references(&results),
        })
        .await;
    Ok(())
}

/// The results whose chunks are still there when the answer ends: a document deleted or
/// reprocessed while a long answer streamed is not cited by chunk ids it no longer has. Kept
/// whole if the check fails: the answer was given, and its sources are what it was given from.
async fn still_indexed(state: &AppState, results: Vec<SearchResult>) -> Vec<SearchResult> {
    let ids: Vec<i64> = results.iter().map(|r| r.chunk_id).collect();
    match crate::rag::chunks::existing(state.db(), &ids).await {
        Ok(kept) => results.into_iter().filter(|r| kept.contains(&r.chunk_id)).collect(),
        Err(e) => {
            tracing::warn!(error = %e, "checking the Q&A references failed; sent as retrieved");
            results
        }
    }
}

fn references(results: &[SearchResult]) -> Vec<Reference> {
    results
        .iter()
        .map(|r| Reference {
            chunk_id: r.chunk_id,
            document_id: r.document_id,
            document_name: r.document_name.clone(),
            images: r
                .images
                .iter()
                .map(|i| ReferenceImage {
                    image_url: i.image_url.clone(),
                    source_page: i.source_page,
                    match_type: i.match_type.clone(),
                    match_reason: i.match_reason.clone(),
                })
                .collect(),
        })
        .collect()
}

/// Stores the turn and forgets the conversation's turns before the last `HISTORY_TURNS`, the
/// most a turn reads back: kept for ever, a conversation grew without end.
async fn remember(state: &AppState, rag_id: i64, user_id: i64, conversation: &str, query: &str, answer: &str) {
    let saved = sqlx::query(
        "INSERT INTO qa_messages (rag_id, user_id, conversation_id, role, content) VALUES ($1, $2, $3, 'user', $4), ($1, $2, $3, 'assistant', $5)",
    )
    .bind(rag_id)
    .bind(user_id)
    .bind(conversation)
    .bind(query)
    .bind(answer)
    .execute(state.db())
    .await;
    if let Err(e) = saved {
        tracing::error!(error = %e, "saving a Q&A turn failed");
        return;
    }
    let forgotten = sqlx::query(
        "DELETE FROM qa_messages WHERE rag_id = $1 AND user_id = $2 AND conversation_id = $3 AND id <=
           (SELECT id FROM qa_messages WHERE rag_id = $1 AND user_id = $2 AND conversation_id = $3
            ORDER BY id DESC OFFSET $4 LIMIT 1)",
    )
    .bind(rag_id)
    .bind(user_id)
    .bind(conversation)
    .bind(HISTORY_TURNS * 2)
    .execute(state.db())
    .await;
    if let Err(e) = forgotten {
        tracing::warn!(error = %e, "forgetting a Q&A conversation's old turns failed");
    }
}

/// NDJSON line of an event.
pub fn ndjson(event: &QaEvent) -> String {
    let mut line = serde_json::to_string(event)
        .unwrap_or_else(|_| json!({ "type": "error", "message": "encoding failed" }).to_string());
    line.push('\n');
    line
}

#[cfg(test)]
mod tests {
    use super::fill;

    #[test]
    fn placeholders_are_filled_from_the_template_only() {
        let values = [
            ("{context}", "[1] templates use {context} and {query}"),
            ("{query}", "what is X?"),
        ];
        assert_eq!(
            fill("Context:\n{context}\nQ: {query} ({query})", &values),
            "Context:\n[1] templates use {context} and {query}\nQ: what is X? (what is X?)"
        );
        assert_eq!(fill("no placeholders", &values), "no placeholders");
        assert_eq!(
            fill("{query}{context}", &values),
            "what is X?[1] templates use {context} and {query}"
        );
    }
}
