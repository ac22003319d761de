//! Extraction: the new messages of a conversation -> the extraction model -> validated,
//! typed memories; restatements update the memory they restate. Idempotent: each
//! conversation remembers the last message it was extracted up to.

use serde_json::Value;
use tokio::time::Instant;

use super::config_repo;
use super::model::{MemoryRow, MEMORY_TYPES};
use super::recall::{self, Strategy};
use super::repo::{self, Content, Embedding, Origin};
use crate::db::vector_literal;
use crate::domain::Owner;
use crate::json::{first_value, NoValue};
use crate::models::client::{ChatMessage, ChatRequest, InputKind};
use crate::models::gateway::{self, CallError};
use crate::models::ModelType;
use crate::rag::chunk::count_tokens;
use crate::text::prefix_chars;
use crate::{AppError, AppResult, AppState};

/// A new memory whose embedding is at least this close (cosine) to an existing memory of the
/// same owner, agent and type restates it and updates it instead.
pub const RESTATEMENT_SIMILARITY: f64 = 0.92;
/// Messages read per extraction; later ones wait for the next extraction.
const MAX_MESSAGES: i64 = 200;

/// Characters of one message read for a transcript: an answer may be megabytes (4 MiB), and
/// 200 of them read whole ran the worker out of memory; the transcript keeps far less anyway.
const MAX_MESSAGE_CHARS: i32 = 32_000;
const MAX_TITLE: usize = 200;
const MAX_CONTENT: usize = 4000;
const MAX_TAGS: usize = 10;

pub const DEFAULT_PROMPT: &str = "You maintain the long-term memory of an AI assistant about one user. \
From the conversation below, extract what is worth remembering in later conversations: facts about the user \
or their work (FACT), decisions taken (DECISION), the user's preferences (PREFERENCE), progress of ongoing tasks \
(TASK_PROGRESS) and documents, links or sources referred to (REFERENCE). Skip small talk and anything only \
relevant to this moment. Give each memory a short title naming its subject, so that a later restatement of the \
same subject gets the same title.";

/// Appended to every prompt, the custom one too: the output contract the service validates.
const OUTPUT_CONTRACT: &str = "Answer with JSON only, no prose, in this shape: \
{\"memories\": [{\"memoryType\": \"FACT|DECISION|PREFERENCE|TASK_PROGRESS|REFERENCE\", \"title\": \"...\", \
\"content\": \"...\", \"category\": \"...\", \"tags\": [\"...\"], \"confidence\": 0.0-1.0}]}. \
Return at most {max} memories; return {\"memories\": []} when nothing is worth remembering.";

/// Why an extraction wrote nothing, and whether running it again could change that: a
/// model that timed out or a database that failed may answer next time; a model disabled or
/// gone, a spent quota or an endpoint refusing the key will not, and a queued extraction
/// retried for them paid, and failed, on every delivery.
#[derive(Debug)]
pub struct Unextracted {
    pub error: AppError,
    pub passing: bool,
}

impl From<AppError> for Unextracted {
    fn from(error: AppError) -> Self {
        let passing = error.may_pass();
        Self { error, passing }
    }
}

impl From<sqlx::Error> for Unextracted {
    fn from(error: sqlx::Error) -> Self {
        AppError::from(error).into()
    }
}

impl From<CallError> for Unextracted {
    fn from(error: CallError) -> Self {
        let passing = error.may_pass();
        Self {
            error: error.into(),
            passing,
        }
    }
}

impl From<Unextracted> for AppError {
    fn from(u: Unextracted) -> Self {
        u.error
    }
}

/// A conversation as extraction needs it.
#[derive(Debug, Clone)]
pub struct Conversation {
    pub id: i64,
    pub key: String,
    pub agent_id: i64,
    pub owner: Owner,
}

#[derive(sqlx::FromRow)]
struct ConversationRow {
    id: i64,
    conversation_key: String,
    agent_id: i64,
    user_id: Option<i64>,
    external_user_id: Option<i64>,
}

impl ConversationRow {
    fn into_conversation(self) -> Option<Conversation> {
        let owner = match (self.user_id, self.external_user_id) {
            (Some(u), _) => Owner::User(u),
            (None, Some(e)) => Owner::External(e),
            (None, None) => return None,
        };
        Some(Conversation {
            id: self.id,
            key: self.conversation_key,
            agent_id: self.agent_id,
            owner,
        })
    }
}

const CONVERSATION_COLUMNS: &str = "id, conversation_key, agent_id, user_id, external_user_id";

pub async fn conversation(db: &sqlx::PgPool, id: i64) -> sqlx::Result<Option<Conversation>> {
    let row: Option<ConversationRow> = sqlx::query_as(&format!(
        "SELECT {CONVERSATION_COLUMNS} FROM conversations WHERE id = $1"
    ))
    .bind(id)
    .fetch_optional(db)
    .await?;
    Ok(row.and_then(ConversationRow::into_conversation))
}

/// The memory config the agent uses now, or None when its memory is off or the agent is gone.
/// A queued extraction runs as the agent is when it runs: rebound to another config meanwhile,
/// the old one's models (possibly someone else's endpoint) must not read the conversation.
pub async fn current_config(db: &sqlx::PgPool, agent_id: i64) -> sqlx::Result<Option<Option<i64>>> {
    // A disabled config (status 0) is memory off: it recalls nothing, and extracting for it
    // would charge for memories nothing reads.
    let agent: Option<(bool, Option<i64>)> = sqlx::query_as(
        "SELECT a.memory_enabled AND COALESCE(c.status, 1) = 1, a.memory_config_id
         FROM agents a LEFT JOIN memory_configs c ON c.id = a.memory_config_id WHERE a.id = $1",
    )
    .bind(agent_id)
    .fetch_optional(db)
    .await?;
    Ok(agent.filter(|(enabled, _)| *enabled).map(|(_, config)| config))
}

/// The owner's conversation with the agent under the client's conversation id.
pub async fn by_key(db: &sqlx::PgPool, agent_id: i64, owner: Owner, key: &str) -> sqlx::Result<Option<Conversation>> {
    let row = crate::agents::conversation_repo::find(db, agent_id, owner, key).await?;
    Ok(row.map(|r| Conversation {
        id: r.id,
        key: r.conversation_key,
        agent_id: r.agent_id,
        owner,
    }))
}

/// Extracts the messages added since the last extraction; returns the memories written
/// (created or updated). A second run over the same messages writes nothing. With a
/// `deadline`, the model calls end by then (as timed out, and the run writes nothing).
pub async fn extract(
    state: &AppState,
    conv: &Conversation,
    config_id: Option<i64>,
    deadline: Option<Deadline>,
) -> Result<Vec<MemoryRow>, Unextracted> {
    let db = state.db();
    sqlx::query("INSERT INTO memory_extractions (conversation_id) VALUES ($1) ON CONFLICT DO NOTHING")
        .bind(conv.id)
        .execute(db)
        .await?;
    let leased: Option<(i64, Lease)> = sqlx::query_as(
        "UPDATE memory_extractions SET lease_until = now() + interval '5 minutes', update_dt = now()
         WHERE conversation_id = $1 AND (lease_until IS NULL OR lease_until < now())
         RETURNING last_message_id, lease_until",
    )
    .bind(conv.id)
    .fetch_optional(db)
    .await?;
    let Some((after, lease)) = leased else {
        // The run under way may have begun before the newest messages.
        return Err(Unextracted {
            error: AppError::business(format!(
                "conversation {} is being extracted right now; try again shortly",
                conv.key
            )),
            passing: true,
        });
    };
    let outcome = run(state, conv, config_id, (after, lease), deadline).await;
    if outcome.is_err() {
        sqlx::query("UPDATE memory_extractions SET lease_until = NULL WHERE conversation_id = $1 AND lease_until = $2")
            .bind(conv.id)
            .bind(lease)
            .execute(db)
            .await?;
    }
    outcome
}

/// A run's lease, told apart from its successor's by its end: a run that outlives its lease
/// (a slow model) must neither clear the lease of the run that took over nor write what that
/// run writes too.
type Lease = chrono::DateTime<chrono::Utc>;

fn lease_lost(conv: &Conversation) -> AppError {
    AppError::Conflict(format!(
        "the extraction of conversation {} ran past its lease and another run took over; nothing was written",
        conv.key
    ))
}

async fn run(
    state: &AppState,
    conv: &Conversation,
    config_id: Option<i64>,
    (after, lease): (i64, Lease),
    deadline: Option<Deadline>,
) -> Result<Vec<MemoryRow>, Unextracted> {
    let db = state.db();
    // Up to the turn still being answered, if any: its answer (and any later turn's message)
    // is read by a later run, not skipped for good by moving past it now.
    let messages: Vec<(i64, String, String)> = sqlx::query_as(
        "WITH answering AS (
           SELECT max(u.id) AS from_id FROM messages u
           WHERE u.conversation_id = $1 AND u.role = 'user' AND u.id < (
             SELECT min(a.id) FROM messages a WHERE a.conversation_id = $1 AND a.id > $2 AND a.status = 0))
         SELECT m.id, m.role, left(m.content, $4) FROM messages m, answering
         WHERE m.conversation_id = $1 AND m.id > $2 AND m.status = 1 AND m.role IN ('user', 'assistant')
           AND m.id < COALESCE(answering.from_id, 9223372036854775807)
         ORDER BY m.id LIMIT $3",
    )
    .bind(conv.id)
    .bind(after)
    .bind(MAX_MESSAGES)
    .bind(MAX_MESSAGE_CHARS)
    .fetch_all(db)
    .await?;
    let fetched = messages.len() as i64;
    let (messages, cut_short) = within_transcript(messages);
    let Some(last_id) = messages.last().map(|m| m.0) else {
        return match finish(db, (conv.id, lease), after).await? {
            true => Ok(vec![]),
            false => Err(lease_lost(conv).into()),
        };
    };
    let mut strategy = recall::strategy(state, config_id).await?;
    let found = match ask_model(state, &strategy, conv.owner, &messages, deadline).await? {
        Ok(found) => found,
        Err(why) => return Err(unusable_answer(db, conv, (last_id, lease), why).await?),
    };
    let texts: Vec<String> = found.iter().map(|c| format!("{}\n{}", c.title, c.content)).collect();
    strategy.embedding = strategy.embedding.until(deadline.map(|d| d.all));
    let vectors = recall::embed(
        state,
        &strategy,
        recall::billing(conv.owner, false),
        &texts,
        InputKind::Document,
    )
    .await?;
    if let Some(v) = vectors.first() {
        repo::ensure_index_for(db, &strategy.embedding.row, v.len() as i32).await?;
    }
    let origin = Origin {
        agent_id: conv.agent_id,
        owner: conv.owner,
        conversation_id: conv.id,
        conversation_key: conv.key.clone(),
    };
    let mut tx = db.begin().await?;
    // Extractions of the owner's other conversations with the agent look for the same
    // restatements: without taking turns, two would each find none and insert the same memory.
    repo::lock_owner_memories(&mut tx, conv.agent_id, conv.owner).await?;
    let mut written = Vec::new();
    for (content, vector) in found.iter().zip(&vectors) {
        let literal = vector_literal(vector);
        let embedding = Embedding {
            model_id: strategy.embedding.row.id,
            vector: &literal,
        };
        let existing = repo::restated(
            &mut *tx,
            conv.agent_id,
            conv.owner,
            content,
            Some(&embedding),
            RESTATEMENT_SIMILARITY,
        )
        .await?;
        let id = match existing {
            Some(id) => {
                repo::write_content(&mut *tx, id, content, Some(embedding)).await?;
                repo::restated_in(&mut *tx, id, &origin).await?;
                id
            }
            None => repo::insert(&mut *tx, &origin, content, Some(embedding)).await?,
        };
        if !written.contains(&id) {
            written.push(id);
        }
    }
    if !finish(&mut *tx, (conv.id, lease), last_id).await? {
        return Err(lease_lost(conv).into());
    }
    tx.commit().await?;
    // A full window may have left messages behind: rounds queue the next extraction only
    // every `extractionInterval`, which at more rounds than a window holds fell further behind
    // with each run.
    if cut_short || fetched == MAX_MESSAGES {
        if let Err(e) = super::queue::enqueue(state, conv.id, (conv.owner, conv.agent_id)).await {
            tracing::warn!(conversation_id = conv.id, error = %e, "the rest of a conversation was not queued for extraction");
        }
    }
    Ok(repo::load(db, &written).await?)
}

/// Tokens of messages one extraction reads: a model's context, and the quota paying for it,
/// hold only so much. A few long pastes passed both, and every later run asked again for the
/// same, larger, window.
const MAX_TRANSCRIPT_TOKENS: usize = 24_000;

/// What a first message longer than that keeps: characters, at most about 1.5 tokens each
/// even in CJK text.
const FIRST_MESSAGE_CHARS: usize = 16_000;

/// The first messages that fit in one transcript (the first always, cut to fit), and whether
/// some were left for the next run.
fn within_transcript(messages: Vec<(i64, String, String)>) -> (Vec<(i64, String, String)>, bool) {
    let total = messages.len();
    let mut used = 0;
    let mut kept = Vec::new();
    for (id, role, content) in messages {
        let tokens = count_tokens(&content);
        if !kept.is_empty() && used + tokens > MAX_TRANSCRIPT_TOKENS {
            break;
        }
        used += tokens.min(MAX_TRANSCRIPT_TOKENS);
        let content = match tokens > MAX_TRANSCRIPT_TOKENS {
            true => cut(&content, FIRST_MESSAGE_CHARS),
            false => content,
        };
        kept.push((id, role, content));
    }
    let left = kept.len() < total;
    (kept, left)
}

/// Records how far the conversation is extracted and releases the lease; false when the lease
/// is no longer this run's.
async fn finish(
    db: impl sqlx::PgExecutor<'_>,
    (conversation_id, lease): (i64, Lease),
    last_id: i64,
) -> sqlx::Result<bool> {
    let done = sqlx::query(
        "UPDATE memory_extractions SET last_message_id = GREATEST(last_message_id, $2), lease_until = NULL,
         unusable_answers = 0, update_dt = now() WHERE conversation_id = $1 AND lease_until = $3",
    )
    .bind(conversation_id)
    .bind(last_id)
    .bind(lease)
    .execute(db)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Unusable answers for the same messages after which they are passed over: a model that
/// cannot answer them in the contract's shape would otherwise be asked, and paid, again at
/// every later turn of the conversation, never moving on.
const MAX_UNUSABLE_ANSWERS: i32 = 3;

/// The error of an answer that broke the output contract, counted; the last one allowed moves
/// the extraction past the messages (up to `last_id`) it was about.
async fn unusable_answer(
    db: &sqlx::PgPool,
    conv: &Conversation,
    (last_id, lease): (i64, Lease),
    why: String,
) -> Result<Unextracted, sqlx::Error> {
    let count: Option<i32> = sqlx::query_scalar(
        "UPDATE memory_extractions SET unusable_answers = unusable_answers + 1
         WHERE conversation_id = $1 AND lease_until = $2 RETURNING unusable_answers",
    )
    .bind(conv.id)
    .bind(lease)
    .fetch_optional(db)
    .await?;
    let Some(count) = count else {
        return Ok(lease_lost(conv).into());
    };
    let told = format!("the extraction model's answer was not usable: {why}");
    if count < MAX_UNUSABLE_ANSWERS {
        // Asked again, the model may answer in the contract's shape.
        return Ok(Unextracted {
            error: AppError::business(told),
            passing: true,
        });
    }
    tracing::warn!(conversation_id = conv.id, last_id, %why, "memory extraction passed over messages no answer fitted");
    if !finish(db, (conv.id, lease), last_id).await? {
        return Ok(lease_lost(conv).into());
    }
    Ok(AppError::business(format!(
        "{told}; after {count} such answers these messages are passed over"
    ))
    .into())
}

/// When an extraction a client waits for must be done: the model's answer by `answer`, the
/// memories' embeddings by `all`.
#[derive(Debug, Clone, Copy)]
pub struct Deadline {
    answer: Instant,
    all: Instant,
}

impl Deadline {
    /// `budget` from now, a fifth of it kept for the embeddings: an answer that took it all
    /// would be paid for, then stored nowhere, and paid for again by the next try.
    pub fn within(budget: std::time::Duration) -> Self {
        let now = Instant::now();
        Self {
            answer: now + budget * 4 / 5,
            all: now + budget,
        }
    }
}

/// The memories the model found; `Ok(Err(why))` when it answered outside the output contract.
async fn ask_model(
    state: &AppState,
    s: &Strategy,
    owner: Owner,
    messages: &[(i64, String, String)],
    deadline: Option<Deadline>,
) -> Result<Result<Vec<Content>, String>, Unextracted> {
    let model = match s.config.extraction_model_id {
        Some(id) => gateway::load(state, id, ModelType::Chat).await?,
        None => gateway::default_model(state, ModelType::Chat).await?,
    };
    let model = model.until(deadline.map(|d| d.answer));
    let max = s.config.max_memories_per_extraction.clamp(1, 50) as usize;
    let instructions = s.config.custom_extraction_prompt.as_deref().unwrap_or(DEFAULT_PROMPT);
    let system = format!(
        "{instructions}\n\n{}",
        OUTPUT_CONTRACT.replace("{max}", &max.to_string())
    );
    let transcript: Vec<String> = messages
        .iter()
        .map(|(_, role, content)| format!("{role}: {content}"))
        .collect();
    let req = ChatRequest {
        messages: vec![
            ChatMessage::system(system),
            ChatMessage::user(format!("Conversation:\n{}", transcript.join("\n"))),
        ],
        temperature: Some(0.0),
        ..ChatRequest::default()
    };
    let answer = gateway::chat(state, &model, recall::billing(owner, true), "memory-extraction", &req).await?;
    Ok(parse(&answer.content, max))
}

/// The memories in the model's answer. The answer must hold a JSON object with a `memories`
/// array (or be that array), possibly inside a code fence; items that break the contract
/// (unknown type, empty title or content) are dropped, the rest trimmed to the limits.
pub fn parse(answer: &str, max: usize) -> Result<Vec<Content>, String> {
    // A list with memories first: an empty one in the prose ("else I return {"memories": []}")
    // is an example, the answer itself only when there is no other.
    let opens = ['{', '['];
    let value = first_value(answer, &opens, |v| memory_items(v).is_some_and(|m| !m.is_empty()))
        .or_else(|_| first_value(answer, &opens, |v| memory_items(v).is_some()))
        .map_err(|e| match e {
            NoValue::NoJson => "it holds no JSON object or array".to_owned(),
            NoValue::Invalid(e) => format!("invalid JSON ({e})"),
            NoValue::Unfit => {
                "its JSON is neither an object with a `memories` array nor an array of memories".to_owned()
            }
        })?;
    let items = memory_items(&value).unwrap_or_default();
    let mut out = Vec::new();
    for item in items {
        match item_content(item) {
            Ok(c) => out.push(c),
            // The item is what the model read in someone's conversation: its reason only.
            Err(why) => tracing::warn!(%why, "extracted memory dropped"),
        }
    }
    out.truncate(max);
    Ok(out)
}

/// The memories of an answer's JSON: `{"memories": [...]}` or the array itself, empty or
/// holding objects (a stray item among them is dropped later, as any item off the contract).
fn memory_items(value: &Value) -> Option<&[Value]> {
    let items = match value {
        Value::Array(a) => a,
        Value::Object(o) => o.get("memories")?.as_array()?,
        _ => return None,
    };
    (items.is_empty() || items.iter().any(Value::is_object)).then_some(items.as_slice())
}

fn text(item: &Value, keys: &[&str]) -> String {
    keys.iter()
        .find_map(|k| item.get(*k).and_then(Value::as_str))
        .map(storable)
        .unwrap_or_default()
}

/// A model's string as Postgres stores text: without NUL, which fails the whole write (and
/// every later extraction of the conversation, asked the same messages again).
fn storable(s: &str) -> String {
    s.replace('\0', "").trim().to_owned()
}

fn cut(s: &str, max: usize) -> String {
    prefix_chars(s, max).to_owned()
}

fn item_content(item: &Value) -> Result<Content, String> {
    let memory_type = text(item, &["memoryType", "type"]).to_uppercase();
    if !MEMORY_TYPES.contains(&memory_type.as_str()) {
        return Err(format!(
            "memoryType {memory_type:?} is not one of {}",
            MEMORY_TYPES.join(", ")
        ));
    }
    let title = cut(&text(item, &["title"]), MAX_TITLE);
    let content = cut(&text(item, &["content"]), MAX_CONTENT);
    if title.is_empty() || content.is_empty() {
        return Err("title and content must not be empty".to_owned());
    }
    let category = match text(item, &["category"]) {
        c if c.is_empty() => memory_type.to_lowercase(),
        c => cut(&c, 100),
    };
    let mut tags: Vec<String> = item
        .get("tags")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(|t| cut(&storable(t), 50))
                .filter(|t| !t.is_empty())
                .collect()
        })
        .unwrap_or_default();
    tags.dedup();
    tags.truncate(MAX_TAGS);
    let confidence = ["confidence", "confidenceScore"]
        .iter()
        .find_map(|k| item.get(*k).and_then(Value::as_f64))
        .unwrap_or(0.8)
        .clamp(0.0, 1.0);
    Ok(Content {
        memory_type,
        category,
        title,
        content,
        tags,
        confidence_score: confidence,
    })
}

/// Queues an extraction once `extractionInterval` user messages have arrived since the last
/// extraction (or the last queued one, so later rounds do not queue the same work again).
pub async fn after_round(state: &AppState, conv: &Conversation, config_id: Option<i64>) -> AppResult<()> {
    let db = state.db();
    let interval = config_repo::effective(db, config_id).await?.extraction_interval.max(1);
    let (rounds, newest): (i64, Option<i64>) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE m.role = 'user'), max(m.id) FROM messages m
         WHERE m.conversation_id = $1 AND m.id > COALESCE((SELECT GREATEST(last_message_id, queued_message_id)
         FROM memory_extractions WHERE conversation_id = $1), 0)",
    )
    .bind(conv.id)
    .fetch_one(db)
    .await?;
    let Some(newest) = newest.filter(|_| rounds >= interval as i64) else {
        return Ok(());
    };
    let mut tx = db.begin().await?;
    let claimed: Option<i64> = sqlx::query_scalar(
        "INSERT INTO memory_extractions (conversation_id, queued_message_id) VALUES ($1, $2)
         ON CONFLICT (conversation_id) DO UPDATE SET queued_message_id = EXCLUDED.queued_message_id, update_dt = now()
         WHERE memory_extractions.queued_message_id < EXCLUDED.queued_message_id RETURNING conversation_id",
    )
    .bind(conv.id)
    .bind(newest)
    .fetch_optional(&mut *tx)
    .await?;
    if claimed.is_none() {
        return Ok(()); // another round queued it meanwhile
    }
    super::queue::enqueue(state, conv.id, (conv.owner, conv.agent_id)).await?;
    tx.commit().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_fenced_json_and_drops_bad_items() {
        let answer = "Here you go:\n```json\n{\"memories\": [
            {\"memoryType\": \"preference\", \"title\": \"Editor theme\", \"content\": \"Prefers dark mode\", \"tags\": [\"ui\", \"ui\"], \"confidence\": 1.7},
            {\"memoryType\": \"OPINION\", \"title\": \"x\", \"content\": \"y\"},
            {\"type\": \"FACT\", \"title\": \"\", \"content\": \"no title\"},
            {\"type\": \"FACT\", \"title\": \"Team size\", \"content\": \"Five people\"}
        ]}\n```";
        let got = parse(answer, 5).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].memory_type, "PREFERENCE");
        assert_eq!(got[0].tags, vec!["ui"]);
        assert_eq!(got[0].confidence_score, 1.0);
        assert_eq!(got[1].category, "fact");
        assert_eq!(got[1].confidence_score, 0.8);
        assert_eq!(parse(answer, 1).unwrap().len(), 1);
        assert_eq!(parse("[]", 3).unwrap().len(), 0);
        assert!(parse("no json here", 3).is_err());
        // Brackets in the prose around the JSON, before or after it.
        let wrapped = "[Extraction]\n{\"memories\": [{\"memoryType\": \"FACT\", \"title\": \"Team\", \"content\": \"Five people\"}]}\nNote: skipped {small talk}.";
        assert_eq!(parse(wrapped, 3).unwrap()[0].content, "Five people");
        // JSON in the prose before the answer: a citation, an example restated.
        let cited = "I found 2 memories [1]:\n{\"memories\": [{\"memoryType\": \"FACT\", \"title\": \"Team\", \"content\": \"Five people\"}]}";
        assert_eq!(parse(cited, 3).unwrap().len(), 1);
        let restated = "If nothing matters I return {\"memories\": []}; but: [{\"memoryType\": \"FACT\", \"title\": \"Team\", \"content\": \"Five people\"}]";
        assert_eq!(parse(restated, 3).unwrap().len(), 1);
        assert!(parse("only [1] here", 3).unwrap_err().contains("neither"));
        // A stray item among memories is dropped, not the answer.
        let stray = "{\"memories\": [{\"memoryType\": \"FACT\", \"title\": \"Team\", \"content\": \"Five people\"}, null, \"...\"]}";
        assert_eq!(parse(stray, 3).unwrap().len(), 1);
        assert!(parse("{\"other\": 1}", 3).unwrap_err().contains("memories"));
    }

    #[test]
    fn a_transcript_takes_the_messages_that_fit() {
        // " word" is one token.
        let m = |id: i64, words: usize| (id, "user".to_owned(), " word".repeat(words));
        let (kept, left) = within_transcript(vec![m(1, 15_000), m(2, 8_900), m(3, 200)]);
        assert_eq!((kept.iter().map(|k| k.0).collect::<Vec<_>>(), left), (vec![1, 2], true));
        let (kept, left) = within_transcript(vec![m(1, 30_000), m(2, 1)]);
        assert_eq!(
            (kept.len(), kept[0].2.chars().count(), left),
            (1, FIRST_MESSAGE_CHARS, true)
        );
        let (kept, left) = within_transcript(vec![m(1, 10), m(2, 10)]);
        assert_eq!((kept.len(), left), (2, false));
    }

    #[test]
    fn nul_characters_of_an_answer_are_dropped() {
        let answer = r#"{"memories": [{"memoryType": "FACT", "title": "a\u0000b", "content": "\u0000x",
            "category": "c\u0000", "tags": ["t\u0000", "\u0000"]}]}"#;
        let got = parse(answer, 5).unwrap();
        let c = &got[0];
        assert_eq!(
            (
                c.title.as_str(),
                c.content.as_str(),
                c.category.as_str(),
                c.tags.clone()
            ),
            ("ab", "x", "c", vec!["t".to_owned()])
        );
    }

    #[test]
    fn restatement_key_ignores_case_and_punctuation() {
        let c = |title: &str| Content {
            memory_type: "PREFERENCE".into(),
            category: String::new(),
            title: title.into(),
            content: "x".into(),
            tags: vec![],
            confidence_score: 0.5,
        };
        assert_eq!(c("Editor theme").normalized_key(), c("editor  THEME!").normalized_key());
        assert_ne!(c("Editor theme").normalized_key(), c("Editor font").normalized_key());
    }
}
