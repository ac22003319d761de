//! SQL of memories. Every list and search goes through a [`Scope`], so the owner filter that
//! keeps one user's memories from another is written once.

use chrono::{DateTime, Utc};
use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, OnceLock};

use sqlx::{PgConnection, PgExecutor, PgPool, Postgres, QueryBuilder};

use super::model::MemoryRow;
use crate::db::vector_literal;
use crate::domain::Owner;
use crate::models::ModelConfigRow;
use crate::rag::bases::repo::{ops, vector_cast, vector_expr};
use crate::rag::search::bm25;
use crate::rag::search::fusion::Hit;
use crate::rag::segment;

pub const COLUMNS: &str = "id, agent_id, user_id, external_user_id, conversation_id, conversation_key, memory_type,
    category, title, content, tags, relevance_score, confidence_score, status, access_count, accessed_at, create_dt,
    update_dt";

/// Which memories a query may see.
#[derive(Debug, Clone, Default)]
pub struct Scope {
    pub agent_id: Option<i64>,
    /// None: every owner (administrators only).
    pub owner: Option<Owner>,
    /// Recall for chat sees ACTIVE memories only; lists and search see every status.
    pub active_only: bool,
    pub types: Vec<String>,
    pub since: Option<DateTime<Utc>>,
    pub conversation_key: Option<String>,
    /// Recall leaves out memories unused for longer than this many days (the config's
    /// `memoryExpirationDays`): the daily job archives them, and recalled before it ran they
    /// were touched again and never expired.
    pub unused_within_days: Option<i32>,
}

impl Scope {
    /// Recall for chat: one owner's ACTIVE, unexpired memories of one agent.
    pub fn recall(agent_id: i64, owner: Owner, expiration_days: Option<i32>) -> Self {
        Self {
            agent_id: Some(agent_id),
            owner: Some(owner),
            active_only: true,
            unused_within_days: expiration_days,
            ..Self::default()
        }
    }

    /// Appends ` AND ...` conditions on table alias `m`.
    fn push(&self, q: &mut QueryBuilder<'_, Postgres>) {
        if let Some(a) = self.agent_id {
            q.push(" AND m.agent_id = ").push_bind(a);
        }
        match self.owner {
            Some(Owner::User(id)) => q.push(" AND m.user_id = ").push_bind(id),
            Some(Owner::External(id)) => q.push(" AND m.external_user_id = ").push_bind(id),
            None => q,
        };
        if self.active_only {
            q.push(" AND m.status = 'ACTIVE'");
        }
        if !self.types.is_empty() {
            q.push(" AND m.memory_type = ANY(")
                .push_bind(self.types.clone())
                .push(")");
        }
        if let Some(since) = self.since {
            q.push(" AND m.create_dt >= ").push_bind(since);
        }
        if let Some(key) = &self.conversation_key {
            q.push(" AND m.conversation_key = ").push_bind(key.clone());
        }
        // The predicate of `lifecycle::archive_expired`, the other way round.
        if let Some(days) = self.unused_within_days {
            q.push(
                " AND GREATEST(m.update_dt, COALESCE(m.accessed_at, m.update_dt)) >= now() - make_interval(days => ",
            )
            .push_bind(days)
            .push(")");
        }
    }

    fn select(&self, columns: &str) -> QueryBuilder<'static, Postgres> {
        let mut q = QueryBuilder::new(format!("SELECT {columns} FROM memories m WHERE TRUE"));
        self.push(&mut q);
        q
    }
}

pub async fn find(db: impl PgExecutor<'_>, id: i64) -> sqlx::Result<Option<MemoryRow>> {
    sqlx::query_as(&format!("SELECT {COLUMNS} FROM memories WHERE id = $1"))
        .bind(id)
        .fetch_optional(db)
        .await
}

/// Newest first.
pub async fn list(db: &PgPool, scope: &Scope, limit: i64) -> sqlx::Result<Vec<MemoryRow>> {
    let mut q = scope.select(COLUMNS);
    q.push(" ORDER BY m.create_dt DESC, m.id DESC LIMIT ").push_bind(limit);
    q.build_query_as().fetch_all(db).await
}

fn index_name(model_id: i64, dimension: i32) -> String {
    format!("memories_hnsw_m{model_id}_d{dimension}")
}

/// The partial HNSW index over the memories of one embedding model and dimension, built
/// without blocking writes. DDL takes no bind parameters: the numbers are our own ids and a
/// vector length, never client text.
fn index_sql(model_id: i64, dimension: i32) -> String {
    format!(
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS {} ON memories USING hnsw ({} {})
         WHERE embedding_model_id = {model_id} AND vector_dims(embedding) = {dimension}",
        index_name(model_id, dimension),
        vector_expr(dimension),
        ops(dimension)
    )
}

/// Creates the index for a model's memories when the catalog has no valid one, the first time
/// this process writes such a memory. A plain `CREATE INDEX`, even of an index that exists,
/// takes a lock on `memories` that waits for any open writer and holds up every later one.
///
/// Vectors longer than an index can hold (`MAX_VECTOR_DIMENSION`) get none: a config names its
/// model's dimension and is refused such a model when saved, but the built-in defaults follow
/// whichever embedding model is the default. Their memories are stored all the same, and
/// recall compares them one by one within the owner's memories (which the owner index finds):
/// failing there would fail every extraction after its paid model calls, and retry it.
pub async fn ensure_vector_index(db: &PgPool, model_id: i64, dimension: i32) -> sqlx::Result<()> {
    static DONE: OnceLock<Mutex<HashSet<(i64, i32)>>> = OnceLock::new();
    let done = DONE.get_or_init(Mutex::default);
    let known = |d: &Mutex<HashSet<(i64, i32)>>| d.lock().map(|s| s.contains(&(model_id, dimension))).unwrap_or(false);
    if known(done) {
        return Ok(());
    }
    if dimension > crate::validate::MAX_VECTOR_DIMENSION {
        tracing::warn!(
            model_id,
            dimension,
            "memories of this embedding model are longer than an index holds: recall compares them without one"
        );
        if let Ok(mut d) = done.lock() {
            d.insert((model_id, dimension));
        }
        return Ok(());
    }
    let name = index_name(model_id, dimension);
    let build = match crate::rag::bases::repo::index_validity(db, &name).await? {
        Some(true) => vec![],
        None => vec![index_sql(model_id, dimension)],
        // A build in progress, or one that failed half way (which `IF NOT EXISTS` would keep):
        // looked at again under the build lock, and rebuilt only if still not valid.
        Some(false) => vec![
            format!("DROP INDEX CONCURRENTLY IF EXISTS {name}"),
            index_sql(model_id, dimension),
        ],
    };
    if !build.is_empty() {
        let mut conn = db.acquire().await?;
        crate::rag::bases::repo::concurrently(&mut conn, &build, Some(&name)).await?;
    }
    if let Ok(mut d) = done.lock() {
        d.insert((model_id, dimension));
    }
    Ok(())
}

/// The index a model's memories are searched through, built for GLOBAL models only. A
/// PERSONAL model's endpoint is its owner's, who could answer each call with another length
/// (and make one model after another) to have an index built on the shared table for each;
/// its memories are compared one by one within their owner's, as vectors too long for an index
/// are.
pub async fn ensure_index_for(db: &PgPool, model: &ModelConfigRow, dimension: i32) -> sqlx::Result<()> {
    match model.scope.as_str() {
        "GLOBAL" => ensure_vector_index(db, model.id, dimension).await,
        _ => Ok(()),
    }
}

/// Nearest memories by cosine similarity among those embedded by `model_id`, through that
/// model's partial HNSW index (the model id and dimension are written into the SQL so the
/// planner can match the index predicate). Iterative index scans keep returning candidates
/// until the owner filter has let enough through, in exact distance order; for an owner with
/// few memories the planner takes the owner index and sorts exactly instead.
pub async fn vector_hits(
    db: &PgPool,
    scope: &Scope,
    model_id: i64,
    vector: &[f32],
    limit: usize,
) -> sqlx::Result<Vec<Hit>> {
    let dimension = vector.len() as i32;
    let (expr, cast) = (vector_expr(dimension), vector_cast(dimension));
    let literal = vector_literal(vector);
    let mut q = QueryBuilder::new(format!("SELECT m.id, (1 - ({expr} <=> "));
    q.push_bind(literal.clone())
        .push(format!(
            "::{cast}))::float8 FROM memories m WHERE m.embedding_model_id = {model_id}"
        ))
        .push(format!(" AND vector_dims(m.embedding) = {dimension}"));
    scope.push(&mut q);
    q.push(format!(" ORDER BY {expr} <=> "))
        .push_bind(literal)
        .push(format!("::{cast} LIMIT "))
        .push_bind(limit as i64);
    let mut tx = db.begin().await?;
    sqlx::query("SET LOCAL hnsw.iterative_scan = strict_order")
        .execute(&mut *tx)
        .await?;
    let rows: Vec<(i64, f64)> = q.build_query_as().fetch_all(&mut *tx).await?;
    tx.commit().await?;
    Ok(rows.into_iter().map(|(id, score)| Hit { id, score }).collect())
}

/// Full-text matches of any word of `query` (text analysed like knowledge-base chunks), best
/// first by BM25 with the statistics of the scope itself: its memory count, average length and
/// how many of its memories hold each word. A scope is one owner's memories, small enough to
/// count on every recall.
pub async fn text_hits(db: &PgPool, scope: &Scope, query: &str, limit: usize) -> sqlx::Result<Vec<Hit>> {
    let words = segment::distinct(query);
    let Some(tsquery) = segment::or_query(&words) else {
        return Ok(vec![]);
    };
    let mut q = QueryBuilder::new(
        "SELECT m.id, tsvector_token_count(m.tsv) AS len,
                coalesce(array_agg(u.lexeme) FILTER (WHERE u.lexeme = ANY(",
    );
    q.push_bind(words.clone())
        .push(")), '{}') AS words, coalesce(array_agg(cardinality(u.positions)) FILTER (WHERE u.lexeme = ANY(")
        .push_bind(words)
        .push(")), '{}') AS counts FROM memories m, unnest(m.tsv) AS u WHERE m.tsv @@ ")
        .push_bind(tsquery)
        .push("::tsquery");
    scope.push(&mut q);
    q.push(" GROUP BY m.id");
    let matches: Vec<bm25::Candidate> = q.build_query_as().fetch_all(db).await?;
    if matches.is_empty() {
        return Ok(vec![]);
    }
    let mut q = scope.select("count(*)::float8, coalesce(avg(tsvector_token_count(m.tsv)), 0)::float8");
    q.push(" AND m.tsv IS NOT NULL");
    let (docs, avg_len): (f64, f64) = q.build_query_as().fetch_one(db).await?;
    let mut df: HashMap<&str, f64> = HashMap::new();
    for word in matches.iter().flat_map(|m| &m.words) {
        *df.entry(word).or_default() += 1.0;
    }
    let weights: HashMap<String, f64> = df
        .into_iter()
        .map(|(w, n)| (w.to_owned(), bm25::idf(docs, n)))
        .collect();
    Ok(bm25::rank(&weights, avg_len, &matches, limit))
}

/// Embedding models that the scope's memories were embedded with (a search embeds the query
/// once per model).
pub async fn embedding_models(db: &PgPool, scope: &Scope) -> sqlx::Result<Vec<i64>> {
    let mut q = scope.select("DISTINCT m.embedding_model_id");
    q.push(" AND m.embedding_model_id IS NOT NULL LIMIT 5");
    q.build_query_scalar().fetch_all(db).await
}

/// The rows of `ids`, in that order.
pub async fn load(db: &PgPool, ids: &[i64]) -> sqlx::Result<Vec<MemoryRow>> {
    let rows: Vec<MemoryRow> = sqlx::query_as(&format!("SELECT {COLUMNS} FROM memories WHERE id = ANY($1)"))
        .bind(ids)
        .fetch_all(db)
        .await?;
    let mut by_id: std::collections::HashMap<i64, MemoryRow> = rows.into_iter().map(|r| (r.id, r)).collect();
    Ok(ids.iter().filter_map(|id| by_id.remove(id)).collect())
}

/// Counts a recall: access count and time, and the score it was recalled with.
pub async fn touch(db: &PgPool, hits: &[Hit]) -> sqlx::Result<()> {
    let ids: Vec<i64> = hits.iter().map(|h| h.id).collect();
    let scores: Vec<f64> = hits.iter().map(|h| h.score).collect();
    sqlx::query(
        "UPDATE memories m SET access_count = m.access_count + 1, accessed_at = now(), relevance_score = h.score
         FROM unnest($1::bigint[], $2::float8[]) AS h(id, score) WHERE m.id = h.id",
    )
    .bind(ids)
    .bind(scores)
    .execute(db)
    .await
    .map(|_| ())
}

/// Moves a memory from `from` to `to` only if it is still in `from`; false when it was not.
pub async fn set_status(db: &PgPool, id: i64, from: &str, to: &str) -> sqlx::Result<bool> {
    let n = sqlx::query("UPDATE memories SET status = $3, update_dt = now() WHERE id = $1 AND status = $2")
        .bind(id)
        .bind(from)
        .bind(to)
        .execute(db)
        .await?;
    Ok(n.rows_affected() == 1)
}

pub async fn delete(db: &PgPool, id: i64) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM memories WHERE id = $1")
        .bind(id)
        .execute(db)
        .await
        .map(|_| ())
}

/// Text fields of a memory as written by an edit or an extraction.
#[derive(Debug, Clone)]
pub struct Content {
    pub memory_type: String,
    pub category: String,
    pub title: String,
    pub content: String,
    pub tags: Vec<String>,
    pub confidence_score: f64,
}

impl Content {
    /// Type + lower-cased title words: the key under which a restatement is recognised.
    pub fn normalized_key(&self) -> String {
        let words: Vec<String> = crate::rag::segment::tokens(&self.title);
        format!("{}:{}", self.memory_type, words.join(" "))
    }

    /// The `tsvector` literal of what full-text recall searches.
    fn index_text(&self) -> String {
        crate::rag::segment::tsvector(&format!(
            "{} {} {} {}",
            self.title,
            self.content,
            self.category,
            self.tags.join(" ")
        ))
    }
}

/// Makes writers of one owner's memories with one agent take turns until the caller's
/// transaction ends.
pub async fn lock_owner_memories(conn: &mut sqlx::PgConnection, agent_id: i64, owner: Owner) -> sqlx::Result<()> {
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('memories:' || $1 || ':' || $2))")
        .bind(agent_id.to_string())
        .bind(owner.key())
        .execute(conn)
        .await?;
    Ok(())
}

/// An embedding and the model it came from.
pub struct Embedding<'a> {
    pub model_id: i64,
    pub vector: &'a str,
}

/// Locks the memory for the rest of the transaction; whether it is still as of `read` (false
/// also when it is gone).
pub async fn lock_unchanged(conn: &mut PgConnection, id: i64, read: DateTime<Utc>) -> sqlx::Result<bool> {
    let same: Option<bool> = sqlx::query_scalar("SELECT update_dt = $2 FROM memories WHERE id = $1 FOR UPDATE")
        .bind(id)
        .bind(read)
        .fetch_optional(conn)
        .await?;
    Ok(same == Some(true))
}

/// The columns `push_content` binds, in its order.
const CONTENT_COLUMNS: &str = "memory_type, category, title, content, tags, confidence_score, normalized_key, tsv";

fn push_content<'a>(qb: &mut QueryBuilder<'a, Postgres>, c: &'a Content) {
    let mut v = qb.separated(", ");
    v.push_bind(&c.memory_type)
        .push_bind(&c.category)
        .push_bind(&c.title)
        .push_bind(&c.content)
        .push_bind(&c.tags)
        .push_bind(c.confidence_score)
        .push_bind(c.normalized_key())
        .push_bind(c.index_text())
        .push_unseparated("::tsvector");
}

/// Writes the text, its index and (when given) its embedding; a memory with no embedding
/// keeps the one it had.
pub async fn write_content(
    db: impl PgExecutor<'_>,
    id: i64,
    c: &Content,
    embedding: Option<Embedding<'_>>,
) -> sqlx::Result<()> {
    let mut qb = QueryBuilder::new(format!("UPDATE memories SET ({CONTENT_COLUMNS}) = ("));
    push_content(&mut qb, c);
    qb.push("), embedding = COALESCE(")
        .push_bind(embedding.as_ref().map(|e| e.vector))
        .push("::vector, embedding), embedding_model_id = COALESCE(")
        .push_bind(embedding.as_ref().map(|e| e.model_id))
        .push(", embedding_model_id), update_dt = now() WHERE id = ")
        .push_bind(id);
    qb.build().execute(db).await.map(|_| ())
}

/// A memory stated again in `o`'s conversation: that conversation lists it from now on, and an
/// ARCHIVED one (archived by hand or by expiry as unused) is ACTIVE again, since its subject is
/// current once more; recall would never read the update otherwise. SUPPRESSED stays: the
/// owner said not to use it.
pub async fn restated_in(db: impl PgExecutor<'_>, id: i64, o: &Origin) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE memories SET conversation_id = $2, conversation_key = $3, \
         status = CASE WHEN status = 'ARCHIVED' THEN 'ACTIVE' ELSE status END WHERE id = $1",
    )
    .bind(id)
    .bind(o.conversation_id)
    .bind(&o.conversation_key)
    .execute(db)
    .await
    .map(|_| ())
}

pub async fn set_relevance(db: impl PgExecutor<'_>, id: i64, score: f64) -> sqlx::Result<()> {
    sqlx::query("UPDATE memories SET relevance_score = $2, update_dt = now() WHERE id = $1")
        .bind(id)
        .bind(score)
        .execute(db)
        .await
        .map(|_| ())
}

/// Where a new memory comes from.
pub struct Origin {
    pub agent_id: i64,
    pub owner: Owner,
    pub conversation_id: i64,
    pub conversation_key: String,
}

pub async fn insert(
    db: impl PgExecutor<'_>,
    o: &Origin,
    c: &Content,
    embedding: Option<Embedding<'_>>,
) -> sqlx::Result<i64> {
    let mut qb = QueryBuilder::new(format!(
        "INSERT INTO memories (agent_id, user_id, external_user_id, conversation_id, conversation_key,
         {CONTENT_COLUMNS}, embedding, embedding_model_id) VALUES ("
    ));
    qb.separated(", ")
        .push_bind(o.agent_id)
        .push_bind(o.owner.user_id())
        .push_bind(o.owner.external_user_id())
        .push_bind(o.conversation_id)
        .push_bind(&o.conversation_key);
    qb.push(", ");
    push_content(&mut qb, c);
    qb.push(", ")
        .push_bind(embedding.as_ref().map(|e| e.vector))
        .push("::vector, ")
        .push_bind(embedding.as_ref().map(|e| e.model_id))
        .push(") RETURNING id");
    qb.build_query_scalar().fetch_one(db).await
}

/// The memory a new one restates, if any: same owner, agent and type, and either the same
/// normalised key or an embedding (same model) at least `min_similarity` close.
pub async fn restated(
    db: impl PgExecutor<'_>,
    agent_id: i64,
    owner: Owner,
    c: &Content,
    embedding: Option<&Embedding<'_>>,
    min_similarity: f64,
) -> sqlx::Result<Option<i64>> {
    let mut q = QueryBuilder::new("SELECT m.id FROM memories m WHERE m.memory_type = ");
    q.push_bind(c.memory_type.clone());
    Scope {
        agent_id: Some(agent_id),
        owner: Some(owner),
        ..Scope::default()
    }
    .push(&mut q);
    q.push(" AND (m.normalized_key = ").push_bind(c.normalized_key());
    match embedding {
        Some(e) => {
            // CASE, not AND: Postgres may evaluate AND operands in any order, and vectors of
            // another model, or of this model before its length changed (its config now names
            // another model), must never reach the distance operator.
            let similarity = |q: &mut QueryBuilder<'_, Postgres>| {
                q.push("(CASE WHEN m.embedding_model_id = ")
                    .push_bind(e.model_id)
                    .push(" AND vector_dims(m.embedding) = vector_dims(")
                    .push_bind(e.vector.to_owned())
                    .push("::vector) THEN 1 - (m.embedding <=> ")
                    .push_bind(e.vector.to_owned())
                    .push("::vector) END)");
            };
            q.push(" OR ");
            similarity(&mut q);
            q.push(" >= ")
                .push_bind(min_similarity)
                .push(") ORDER BY (m.normalized_key = ");
            q.push_bind(c.normalized_key()).push(") DESC, ");
            similarity(&mut q);
            q.push(" DESC NULLS LAST");
        }
        None => {
            q.push(") ORDER BY m.id");
        }
    }
    q.push(" LIMIT 1");
    q.build_query_scalar().fetch_optional(db).await
}

/// (total, per type, recalled at least once) of the memories created in the window, and the
/// most recalled ids.
pub async fn stats(db: &PgPool, scope: &Scope) -> sqlx::Result<(Vec<(String, i64)>, i64, Vec<i64>)> {
    let mut q = scope.select("m.memory_type, count(*)");
    q.push(" GROUP BY m.memory_type");
    let by_type: Vec<(String, i64)> = q.build_query_as().fetch_all(db).await?;
    let mut q = scope.select("count(*)");
    q.push(" AND m.access_count > 0");
    let used: i64 = q.build_query_scalar().fetch_one(db).await?;
    let mut q = scope.select("m.id");
    q.push(" AND m.access_count > 0 ORDER BY m.access_count DESC, m.id LIMIT 5");
    let most_used: Vec<i64> = q.build_query_scalar().fetch_all(db).await?;
    Ok((by_type, used, most_used))
}
