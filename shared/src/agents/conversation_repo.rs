//! SQL of conversations and their messages.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgConnection, PgExecutor, PgPool, Postgres, QueryBuilder};

use crate::domain::Owner;
use crate::models::usage::{self, UsageRecord};

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ConversationRow {
    pub id: i64,
    pub conversation_key: String,
    pub agent_id: i64,
    pub title: String,
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SummaryRow {
    pub conversation_key: String,
    pub user_id: Option<i64>,
    pub external_user_id: Option<i64>,
    pub title: String,
    pub user_name: String,
    pub message_count: i64,
    pub tool_call_count: i64,
    pub create_dt: DateTime<Utc>,
    pub last_message_dt: DateTime<Utc>,
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct MessageRow {
    pub id: i64,
    pub role: String,
    pub content: String,
    pub thinking: Option<String>,
    pub attachments: Value,
    pub tool_calls: Value,
    pub status: i16,
    pub create_dt: DateTime<Utc>,
}

/// A message of a turn's short-term history: what the model is shown again.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct HistoryMessage {
    pub role: String,
    pub content: String,
}

fn push_owner(qb: &mut QueryBuilder<'_, Postgres>, owner: Owner) {
    match owner {
        Owner::User(id) => qb.push(" AND c.user_id = ").push_bind(id),
        Owner::External(id) => qb.push(" AND c.external_user_id = ").push_bind(id),
    };
}

/// The owner's conversation with this key.
pub async fn find(
    db: impl PgExecutor<'_>,
    agent_id: i64,
    owner: Owner,
    key: &str,
) -> sqlx::Result<Option<ConversationRow>> {
    let mut qb = QueryBuilder::new(
        "SELECT c.id, c.conversation_key, c.agent_id, c.title FROM conversations c WHERE c.agent_id = ",
    );
    qb.push_bind(agent_id).push(" AND c.conversation_key = ").push_bind(key);
    push_owner(&mut qb, owner);
    qb.build_query_as().fetch_optional(db).await
}

/// Up to two owners' conversations with this key (for the agent's managers): a key is the
/// client's choice, unique per owner only, so two mean the caller must say whose.
pub async fn find_any(db: &PgPool, agent_id: i64, key: &str) -> sqlx::Result<Vec<ConversationRow>> {
    sqlx::query_as(
        "SELECT c.id, c.conversation_key, c.agent_id, c.title FROM conversations c
         WHERE c.agent_id = $1 AND c.conversation_key = $2 LIMIT 2",
    )
    .bind(agent_id)
    .bind(key)
    .fetch_all(db)
    .await
}

/// The owner's conversation with this key, created (empty) when new; `true` when created.
/// A conversation deleted between the insert that found it and the read is created anew.
pub async fn ensure(db: &PgPool, agent_id: i64, owner: Owner, key: &str) -> sqlx::Result<(ConversationRow, bool)> {
    for _ in 0..crate::db::ENSURE_TRIES {
        let inserted: Option<ConversationRow> = sqlx::query_as(
            "INSERT INTO conversations (agent_id, user_id, external_user_id, conversation_key) VALUES ($1, $2, $3, $4)
             ON CONFLICT DO NOTHING RETURNING id, conversation_key, agent_id, title",
        )
        .bind(agent_id)
        .bind(owner.user_id())
        .bind(owner.external_user_id())
        .bind(key)
        .fetch_optional(db)
        .await?;
        if let Some(row) = inserted {
            return Ok((row, true));
        }
        if let Some(row) = find(db, agent_id, owner, key).await? {
            return Ok((row, false));
        }
    }
    Err(sqlx::Error::RowNotFound)
}

pub struct SummaryFilter {
    pub agent_id: i64,
    /// Only this owner's conversations; `None` for all of the agent's.
    pub owner: Option<Owner>,
    pub active: Option<(DateTime<Utc>, DateTime<Utc>)>,
}

fn push_summary_filter(qb: &mut QueryBuilder<'_, Postgres>, f: &SummaryFilter) {
    qb.push(" WHERE c.agent_id = ").push_bind(f.agent_id);
    if let Some(owner) = f.owner {
        push_owner(qb, owner);
    }
    if let Some((start, end)) = f.active {
        qb.push(" AND c.last_message_dt BETWEEN ")
            .push_bind(start)
            .push(" AND ")
            .push_bind(end);
    }
}

pub async fn page(db: &PgPool, f: &SummaryFilter, limit: i64, offset: i64) -> sqlx::Result<(Vec<SummaryRow>, i64)> {
    let mut count = QueryBuilder::new("SELECT count(*) FROM conversations c");
    push_summary_filter(&mut count, f);
    let total: i64 = count.build_query_scalar().fetch_one(db).await?;
    // The page is chosen first and its messages counted after: counted in the same scan, every
    // conversation an OFFSET skips had its messages counted too, all of an agent's on a late page.
    let mut rows = QueryBuilder::new(
        "SELECT c.conversation_key, c.user_id, c.external_user_id, c.title,
           COALESCE(u.username, NULLIF(e.nickname, ''), e.open_id, '') AS user_name,
           COALESCE(s.message_count, 0) AS message_count, COALESCE(s.tool_call_count, 0) AS tool_call_count,
           c.create_dt, c.last_message_dt
         FROM (SELECT c.* FROM conversations c",
    );
    push_summary_filter(&mut rows, f);
    rows.push(" ORDER BY c.last_message_dt DESC, c.id DESC LIMIT ")
        .push_bind(limit)
        .push(" OFFSET ")
        .push_bind(offset)
        .push(
            ") c
         LEFT JOIN users u ON u.id = c.user_id
         LEFT JOIN external_users e ON e.id = c.external_user_id
         LEFT JOIN LATERAL (SELECT count(*) AS message_count, sum(m.tool_call_count)::BIGINT AS tool_call_count
                            FROM messages m WHERE m.conversation_id = c.id) s ON TRUE
         ORDER BY c.last_message_dt DESC, c.id DESC",
        );
    Ok((rows.build_query_as().fetch_all(db).await?, total))
}

const MESSAGE_COLUMNS: &str = "id, role, content, thinking, attachments, tool_calls, status, create_dt";

/// The conversation's messages, oldest first: all of them, or the newest `limit` before the
/// message `before_id` (the `(conversation_id, id)` index read backwards, then turned round).
pub async fn messages(
    db: &PgPool,
    conversation_id: i64,
    before_id: Option<i64>,
    limit: Option<i64>,
) -> sqlx::Result<Vec<MessageRow>> {
    sqlx::query_as(&format!(
        "SELECT {MESSAGE_COLUMNS} FROM (
           SELECT {MESSAGE_COLUMNS} FROM messages
           WHERE conversation_id = $1 AND ($2::bigint IS NULL OR id < $2)
           ORDER BY id DESC LIMIT $3) m
         ORDER BY id"
    ))
    .bind(conversation_id)
    .bind(before_id)
    .bind(limit)
    .fetch_all(db)
    .await
}

/// Images already sent in the conversation.
pub async fn image_count(db: impl PgExecutor<'_>, conversation_id: i64) -> sqlx::Result<i64> {
    sqlx::query_scalar(
        "SELECT COALESCE(sum(jsonb_array_length(attachments)), 0)::BIGINT FROM messages WHERE conversation_id = $1",
    )
    .bind(conversation_id)
    .fetch_one(db)
    .await
}

pub async fn delete(db: impl PgExecutor<'_>, conversation_id: i64) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM conversations WHERE id = $1")
        .bind(conversation_id)
        .execute(db)
        .await?;
    Ok(())
}

/// Asks the answers the conversation is still generating to stop; whether there was one.
pub async fn ask_stop(db: &PgPool, conversation_id: i64) -> sqlx::Result<bool> {
    let asked = sqlx::query(
        "UPDATE messages SET stop_asked = TRUE WHERE conversation_id = $1 AND role = 'assistant' AND status = 0",
    )
    .bind(conversation_id)
    .execute(db)
    .await?;
    Ok(asked.rows_affected() > 0)
}

/// Whether a stop was asked for the answer `message_id` (false once it is gone).
pub async fn stop_asked(db: &PgPool, message_id: i64) -> sqlx::Result<bool> {
    let asked = sqlx::query_scalar("SELECT stop_asked FROM messages WHERE id = $1")
        .bind(message_id)
        .fetch_optional(db)
        .await?;
    Ok(asked.unwrap_or(false))
}

/// Replaces the title only while it is still `placeholder`, so a title someone chose stays.
pub async fn replace_title(db: &PgPool, conversation_id: i64, placeholder: &str, title: &str) -> sqlx::Result<()> {
    sqlx::query("UPDATE conversations SET title = $3 WHERE id = $1 AND title = $2")
        .bind(conversation_id)
        .bind(placeholder)
        .bind(title)
        .execute(db)
        .await?;
    Ok(())
}

pub async fn set_title(db: impl PgExecutor<'_>, conversation_id: i64, title: &str) -> sqlx::Result<()> {
    sqlx::query("UPDATE conversations SET title = $2 WHERE id = $1")
        .bind(conversation_id)
        .bind(title)
        .execute(db)
        .await?;
    Ok(())
}

/// A chat turn as it starts: the user's message and the assistant's row (status 0).
pub struct NewTurn<'a> {
    pub agent_id: i64,
    pub owner: Owner,
    pub conversation_key: &'a str,
    /// Used only when the conversation is new.
    pub title: &'a str,
    pub content: &'a str,
    pub attachments: Value,
    pub model_id: i64,
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StartedTurn {
    pub conversation_id: i64,
    /// This is the conversation's first turn (it may have been created empty before).
    pub created: bool,
    pub user_message_id: i64,
    pub assistant_message_id: i64,
}

/// Makes the owner's turns in this conversation take turns until the caller's transaction ends.
pub async fn lock_conversation(conn: &mut PgConnection, agent_id: i64, owner: Owner, key: &str) -> sqlx::Result<()> {
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('conversation:' || $1 || ':' || $2 || ':' || $3))")
        .bind(agent_id.to_string())
        .bind(owner.key())
        .bind(key)
        .execute(conn)
        .await?;
    Ok(())
}

/// The most of one earlier message a turn sends back, in characters: an answer may be stored
/// at up to `MAX_ANSWER_BYTES`.
pub const HISTORY_MESSAGE_CHARS: i64 = 32_000;
/// The most of the history a turn sends back, in bytes (about 32,000 tokens of English): the
/// newest messages that fit, each counted at up to `HISTORY_MESSAGE_CHARS`. Bounded only by a
/// count of messages, a conversation of long stored answers made every turn read hundreds of
/// megabytes into the database's memory and the function's.
pub const HISTORY_BYTES: i64 = 128_000;

/// The history of the conversation whose id is the SQL expression `conversation`, as a jsonb
/// array of `{role, content}`, oldest first: of the newest `limit` messages with text (another
/// SQL expression), those that fit `HISTORY_BYTES`, each cut to `HISTORY_MESSAGE_CHARS`. The
/// sizes come from the stored values' headers (`octet_length` reads no TOASTed text), and only
/// the messages kept are read, as far as they are kept.
///
/// The filter says `role <> 'system'`, not `role IN ('user', 'assistant')` (the same rows: the
/// column allows only those three). Before a table's first ANALYZE the planner takes an IN list
/// for about 1% of the rows, expects fewer rows than the limit and reads every message of the
/// conversation through a bitmap scan and a sort, a cost that grows with the conversation
/// (0.26 ms at 500 messages and rising); with `<>` it walks the `(conversation_id, id)` index
/// backwards and stops after the limit, stats or not.
pub fn history_sql(conversation: &str, limit: &str) -> String {
    format!(
        "(SELECT COALESCE(jsonb_agg(jsonb_build_object('role', h.role, 'content', left(h.content, {HISTORY_MESSAGE_CHARS}))
                                   ORDER BY h.id), '[]'::jsonb)
          FROM (SELECT w.id, w.role, w.content,
                       sum(least(octet_length(w.content), {HISTORY_MESSAGE_CHARS})) OVER (ORDER BY w.id DESC) AS used
                FROM (SELECT m.id, m.role, m.content FROM messages m
                      WHERE m.conversation_id = {conversation} AND m.role <> 'system' AND m.content <> ''
                      ORDER BY m.id DESC LIMIT {limit}) w) h
          WHERE h.used <= {HISTORY_BYTES})"
    )
}

/// Whose conversation a chat's first read looks up for its history: a partner's end user is
/// named by app and openId, as the request names them, so that the read need not wait for the
/// user's row.
#[derive(Debug, Clone, Copy)]
pub enum HistoryOwner<'a> {
    User(i64),
    External { app_id: i64, open_id: &'a str },
}

/// The conversation a turn continues, when the request names one.
#[derive(Debug, Clone, Copy)]
pub struct HistoryOf<'a> {
    pub owner: HistoryOwner<'a>,
    pub key: &'a str,
}

/// The select-list column `history` of a chat's first read (agents `a`): the short-term history
/// (`history_sql`, the agent's `short_term_memory_size` messages) of the conversation `of`
/// names, `[]` when there is none. `push_history_join` adds the lookup after the FROM list.
pub const HISTORY_COLUMN: &str = ", COALESCE(h.history, '[]'::jsonb) AS history";

pub fn push_history_join(qb: &mut QueryBuilder<'_, Postgres>, of: Option<HistoryOf<'_>>) {
    let Some(of) = of else {
        qb.push(" LEFT JOIN (SELECT NULL::jsonb AS history) h ON TRUE");
        return;
    };
    qb.push(format!(
        " LEFT JOIN LATERAL (SELECT {} AS history FROM conversations hc WHERE hc.agent_id = a.id AND ",
        history_sql("hc.id", "a.short_term_memory_size")
    ));
    match of.owner {
        HistoryOwner::User(id) => qb.push("hc.user_id = ").push_bind(id),
        HistoryOwner::External { app_id, open_id } => qb
            .push("hc.external_user_id = (SELECT e.id FROM external_users e WHERE e.app_id = ")
            .push_bind(app_id)
            .push(" AND e.open_id = ")
            .push_bind(open_id.to_owned())
            .push(")"),
    };
    qb.push(" AND hc.conversation_key = ")
        .push_bind(of.key.to_owned())
        .push(") h ON TRUE");
}

/// Creates or touches the conversation and writes both messages in one statement: a turn is
/// stored whole or not at all. The first turn is told by the conversation's count of turns,
/// not by asking whether it has messages: Postgres answered that `EXISTS` with a scan of
/// `messages` from its start whenever statistics said conversations were few and long (2.5 ms
/// a turn on a benchmark database of 30,000 messages, and growing with the table).
pub async fn start_turn(db: impl PgExecutor<'_>, t: &NewTurn<'_>) -> sqlx::Result<StartedTurn> {
    // The conflict target must name the partial unique index of the owner's kind.
    let conflict = match t.owner {
        Owner::User(_) => "(agent_id, user_id, conversation_key) WHERE user_id IS NOT NULL",
        Owner::External(_) => "(agent_id, external_user_id, conversation_key) WHERE external_user_id IS NOT NULL",
    };
    // The assistant's insert reads the user's, so the user's message gets the lower id.
    sqlx::query_as(&format!(
        "WITH c AS (
           INSERT INTO conversations (agent_id, user_id, external_user_id, conversation_key, title, turns)
           VALUES ($1, $2, $3, $4, $5, 1)
           ON CONFLICT {conflict} DO UPDATE SET last_message_dt = now(), turns = conversations.turns + 1,
             title = CASE WHEN conversations.title = '' THEN EXCLUDED.title ELSE conversations.title END
           RETURNING id, turns = 1 AS created),
         u AS (
           INSERT INTO messages (conversation_id, agent_id, role, content, attachments)
           SELECT c.id, $1, 'user', $6, $7 FROM c RETURNING id, conversation_id),
         a AS (
           INSERT INTO messages (conversation_id, agent_id, role, status, model_id)
           SELECT u.conversation_id, $1, 'assistant', 0, $8 FROM u RETURNING id)
         SELECT c.id AS conversation_id, c.created, u.id AS user_message_id, a.id AS assistant_message_id
         FROM c, u, a"
    ))
    .bind(t.agent_id)
    .bind(t.owner.user_id())
    .bind(t.owner.external_user_id())
    .bind(t.conversation_key)
    .bind(t.title)
    .bind(t.content)
    .bind(&t.attachments)
    .bind(t.model_id)
    .fetch_one(db)
    .await
}

/// How an answer ended and what it held.
pub struct FinishedAnswer<'a> {
    pub content: &'a str,
    pub thinking: &'a str,
    pub tool_calls: Value,
    pub tool_call_count: i32,
    /// 1 complete, 2 failed, 3 stopped.
    pub status: i16,
    pub error: Option<&'a str>,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub duration_ms: i64,
}

/// Only the message changes: the conversation's `last_message_dt` was set when the turn started,
/// the time its two messages carry. Touching the conversation again would be a second update of
/// its row per turn, never HOT because that column is indexed. The usage of the turn's model
/// calls is stored by the same statement: one round trip and one transaction after the answer,
/// not two. False when the message is gone (its conversation was deleted meanwhile); the usage
/// is stored all the same, as the calls were made. Run again after it committed, or while it
/// commits (its reply lost with its connection, and the caller retrying), it finds the message
/// finished and writes nothing: the answer and its usage were stored once.
pub async fn finish_assistant_message(
    db: &PgPool,
    id: i64,
    a: &FinishedAnswer<'_>,
    usage: &[UsageRecord],
) -> sqlx::Result<bool> {
    // The message as it is once no other statement holds it (a locking read waits, then reads
    // the newest version): finished by a first try of this statement, or deleted with its
    // conversation, it is seen so, where the statement's snapshot still showed it generating.
    let mut qb = QueryBuilder::new("WITH now AS (SELECT id, status FROM messages WHERE id = ");
    qb.push_bind(id).push(" FOR UPDATE), answer AS (");
    qb.push("UPDATE messages SET content = ")
        .push_bind(a.content)
        .push(", thinking = NULLIF(")
        .push_bind(a.thinking)
        .push(", ''), tool_calls = ")
        .push_bind(&a.tool_calls)
        .push(", tool_call_count = ")
        .push_bind(a.tool_call_count)
        .push(", status = ")
        .push_bind(a.status)
        .push(", error = ")
        .push_bind(a.error)
        .push(", prompt_tokens = ")
        .push_bind(a.prompt_tokens)
        .push(", completion_tokens = ")
        .push_bind(a.completion_tokens)
        .push(", duration_ms = ")
        .push_bind(a.duration_ms)
        // Only a message still generating: a try whose first committed writes nothing.
        .push(" FROM now WHERE messages.id = now.id AND now.status = 0 RETURNING messages.id)");
    if !usage.is_empty() {
        qb.push(", usage AS (");
        usage::push_insert(&mut qb, usage);
        qb.push(" WHERE EXISTS (SELECT 1 FROM answer) OR NOT EXISTS (SELECT 1 FROM now))");
    }
    qb.push(" SELECT EXISTS (SELECT 1 FROM now)");
    qb.build_query_scalar().fetch_one(db).await
}

/// Marks failed the assistant messages still generating (status 0) that began more than
/// `older_than` ago: their turn's process ended before storing them. Returns how many. A daily
/// job: `messages` has no index on `status` on purpose (one would make every answer's final
/// update a non-HOT one), so this reads the table once a day.
pub async fn fail_abandoned(db: &PgPool, older_than: std::time::Duration) -> sqlx::Result<u64> {
    let done = sqlx::query(
        "UPDATE messages SET status = 2, error = 'the turn ended without storing its answer (its process stopped)'
         WHERE status = 0 AND role = 'assistant' AND create_dt < now() - make_interval(secs => $1)",
    )
    .bind(older_than.as_secs_f64())
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}
