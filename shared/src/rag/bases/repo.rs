//! SQL of knowledge bases, including the per-base vector index.

use chrono::{DateTime, Utc};
use sqlx::pool::PoolConnection;
use sqlx::{PgConnection, PgExecutor, PgPool, Postgres, QueryBuilder};

use super::{ChunkSettings, KbRow, ModelSettings, ParseSettings, SearchSettings};
use sqlx::types::Json;

/// A base's row, with `counts` for its document and chunk counts (or 0 for both).
fn select(counts: &str) -> String {
    format!(
        "SELECT k.id, k.name, k.description, k.icon, k.embedding_model_id, m.model_name AS embedding_model_name,
        k.dimension, k.vector_store_instance_id, k.rerank_model_id, k.search_engine_enable, k.search_engine_instance_id,
        k.status, k.chunk_params, k.parse_params, k.search_params, k.model_params, k.dedup_strategy, k.dedup_action,
        k.upload_confirm, k.creator_id, {counts},
        EXISTS (SELECT 1 FROM documents d WHERE d.rag_id = k.id AND d.chunk_count > 0) AS has_chunks,
        EXISTS (SELECT 1 FROM document_images i WHERE i.rag_id = k.id) AS has_images,
        (SELECT s.builtin FROM store_instances s WHERE s.id = k.vector_store_instance_id) AS vector_store_builtin,
        (SELECT s.builtin FROM store_instances s WHERE s.id = k.search_engine_instance_id) AS search_engine_builtin,
        k.create_dt, k.update_dt
        FROM knowledge_bases k LEFT JOIN model_configs m ON m.id = k.embedding_model_id"
    )
}

// The counts come from the documents (each keeps its chunk count, written with its chunks):
// counting a large base's chunks on every lookup cost a search milliseconds.
const COUNTED: &str = "(SELECT count(*) FROM documents d WHERE d.rag_id = k.id) AS document_count,
    (SELECT coalesce(sum(d.chunk_count), 0)::int8 FROM documents d WHERE d.rag_id = k.id) AS chunk_count";

pub async fn find(db: impl PgExecutor<'_>, id: i64) -> sqlx::Result<Option<KbRow>> {
    sqlx::query_as(&format!("{} WHERE k.id = $1", select(COUNTED)))
        .bind(id)
        .fetch_optional(db)
        .await
}

/// A base to search or to index into: `find` without the document and chunk counts (both read
/// as 0), which only a base's views and edits use. Counted, every chat turn of an agent with
/// knowledge, every search and every ingest run read all of the base's documents.
pub async fn find_to_use(db: impl PgExecutor<'_>, id: i64) -> sqlx::Result<Option<KbRow>> {
    let uncounted = select("0::int8 AS document_count, 0::int8 AS chunk_count");
    sqlx::query_as(&format!("{uncounted} WHERE k.id = $1"))
        .bind(id)
        .fetch_optional(db)
        .await
}

/// A page of bases: all of them for administrators (`owner` None), else the owner's.
pub async fn page(db: &PgPool, owner: Option<i64>, limit: i64, offset: i64) -> sqlx::Result<(Vec<KbRow>, i64)> {
    let total: i64 =
        sqlx::query_scalar("SELECT count(*) FROM knowledge_bases WHERE $1::bigint IS NULL OR creator_id = $1")
            .bind(owner)
            .fetch_one(db)
            .await?;
    let rows = sqlx::query_as(&format!(
        "{} WHERE $1::bigint IS NULL OR k.creator_id = $1 ORDER BY k.id DESC LIMIT $2 OFFSET $3",
        select(COUNTED)
    ))
    .bind(owner)
    .bind(limit)
    .bind(offset)
    .fetch_all(db)
    .await?;
    Ok((rows, total))
}

pub struct KbFields<'a> {
    pub name: &'a str,
    pub description: Option<&'a str>,
    pub icon: Option<&'a str>,
    pub embedding_model_id: i64,
    pub dimension: i32,
    pub vector_store_instance_id: i64,
    pub rerank_model_id: Option<i64>,
    pub search_engine_enable: bool,
    pub search_engine_instance_id: Option<i64>,
    pub chunk: &'a ChunkSettings,
    pub parse: &'a ParseSettings,
    pub search: &'a SearchSettings,
    pub model: &'a ModelSettings,
    pub dedup_strategy: i16,
    pub dedup_action: i16,
    pub upload_confirm: bool,
}

impl<'a> KbFields<'a> {
    /// The fields as `row` holds them, for an edit that changes some of them.
    pub fn of(row: &'a KbRow) -> Self {
        Self {
            name: &row.name,
            description: row.description.as_deref(),
            icon: row.icon.as_deref(),
            embedding_model_id: row.embedding_model_id,
            dimension: row.dimension,
            vector_store_instance_id: row.vector_store_instance_id,
            rerank_model_id: row.search_params.0.rerank_model_id,
            search_engine_enable: row.search_engine_enable,
            search_engine_instance_id: row.search_engine_instance_id,
            chunk: &row.chunk_params.0,
            parse: &row.parse_params.0,
            search: &row.search_params.0,
            model: &row.model_params.0,
            dedup_strategy: row.dedup_strategy,
            dedup_action: row.dedup_action,
            upload_confirm: row.upload_confirm,
        }
    }
}

const FIELD_COLUMNS: &str = "name, description, icon, embedding_model_id, dimension, vector_store_instance_id,
    rerank_model_id, search_engine_enable, search_engine_instance_id, chunk_params, parse_params, search_params,
    model_params, dedup_strategy, dedup_action, upload_confirm";

/// The values of `FIELD_COLUMNS`, in that order.
fn push_fields<'a>(qb: &mut QueryBuilder<'a, Postgres>, f: &KbFields<'a>) {
    let mut v = qb.separated(", ");
    v.push_bind(f.name)
        .push_bind(f.description)
        .push_bind(f.icon)
        .push_bind(f.embedding_model_id)
        .push_bind(f.dimension)
        .push_bind(f.vector_store_instance_id)
        .push_bind(f.rerank_model_id)
        .push_bind(f.search_engine_enable)
        .push_bind(f.search_engine_instance_id)
        .push_bind(Json(f.chunk))
        .push_bind(Json(f.parse))
        .push_bind(Json(f.search))
        .push_bind(Json(f.model))
        .push_bind(f.dedup_strategy)
        .push_bind(f.dedup_action)
        .push_bind(f.upload_confirm);
}

pub async fn insert(db: impl PgExecutor<'_>, f: &KbFields<'_>, creator_id: i64) -> sqlx::Result<i64> {
    let mut qb = QueryBuilder::new(format!(
        "INSERT INTO knowledge_bases ({FIELD_COLUMNS}, creator_id) VALUES ("
    ));
    push_fields(&mut qb, f);
    qb.push(", ").push_bind(creator_id).push(") RETURNING id");
    qb.build_query_scalar().fetch_one(db).await
}

/// `UPDATE` of every field to `f`, when the base is still as of `read` (its `update_dt`): made
/// from an older row, `f` would undo what changed since. For the caller to end.
fn write_fields<'a>(id: i64, read: DateTime<Utc>, f: &KbFields<'a>) -> QueryBuilder<'a, Postgres> {
    let mut qb = QueryBuilder::new(format!(
        "UPDATE knowledge_bases SET ({FIELD_COLUMNS}, update_dt) = ROW("
    ));
    push_fields(&mut qb, f);
    qb.push(", now()) WHERE id = ")
        .push_bind(id)
        .push(" AND update_dt = ")
        .push_bind(read);
    qb
}

/// Writes the fields when the base is still as of `read`; the time it wrote, or `None` when
/// the base changed meanwhile (nothing written).
pub async fn update(
    db: impl PgExecutor<'_>,
    id: i64,
    read: DateTime<Utc>,
    f: &KbFields<'_>,
) -> sqlx::Result<Option<DateTime<Utc>>> {
    let mut qb = write_fields(id, read, f);
    qb.push(" RETURNING update_dt");
    qb.build_query_scalar().fetch_optional(db).await
}

/// Name of the base's own HNSW index.
pub fn index_name(id: i64) -> String {
    format!("chunks_hnsw_kb_{id}")
}

/// Puts every field of the base back as it was read (an edit whose index could not be built is
/// undone whole, not only its dimension), unless the base moved on since the edit `wrote`: an
/// edit since, or a document added under the new shape. False when it did.
pub async fn restore(db: &PgPool, id: i64, wrote: DateTime<Utc>, f: &KbFields<'_>) -> sqlx::Result<bool> {
    let mut qb = write_fields(id, wrote, f);
    qb.push(" AND NOT EXISTS (SELECT 1 FROM documents WHERE rag_id = ")
        .push_bind(id)
        .push(")");
    Ok(qb.build().execute(db).await?.rows_affected() == 1)
}

/// The vector expression the index is built on: pgvector indexes need a fixed dimension,
/// and HNSW on `vector` stops at 2000, so larger models use `halfvec`.
pub fn vector_expr(dimension: i32) -> String {
    if dimension > 2000 {
        format!("(embedding::halfvec({dimension}))")
    } else {
        format!("(embedding::vector({dimension}))")
    }
}

/// The type a query vector is cast to, to be compared with [`vector_expr`].
pub fn vector_cast(dimension: i32) -> String {
    if dimension > 2000 {
        format!("halfvec({dimension})")
    } else {
        format!("vector({dimension})")
    }
}

/// The operator class of [`vector_expr`] for cosine distance.
pub fn ops(dimension: i32) -> &'static str {
    if dimension > 2000 {
        "halfvec_cosine_ops"
    } else {
        "vector_cosine_ops"
    }
}

/// Key of the session lock that lets one index build run at a time: two concurrent builds
/// on `chunks` wait for each other's snapshots and one of them fails as a deadlock.
const INDEX_BUILD_LOCK: i64 = 0x6b62_5f69_6478; // "kb_idx"

/// (Re)builds the partial HNSW index of one base without blocking anyone's writes to the
/// shared `chunks` table: `CONCURRENTLY`, which cannot run inside a transaction. A build that
/// failed half way leaves an invalid index behind, so the name is always dropped first. The
/// shape is the base's dimension as it is once builds take turns (a base gone by then keeps no
/// index): two edits of the dimension in a row start their builds in either order, and one
/// given its caller's dimension could leave the first edit's index on the second's base, which
/// then refused every chunk. DDL takes no bind parameters; `id` and the dimension are integers
/// from our own rows, never client text.
pub async fn build_index(conn: &mut PoolConnection<Postgres>, id: i64) -> sqlx::Result<()> {
    let lock = BuildLock::take(conn).await?;
    let conn = &mut **lock.conn;
    let ran = async {
        let dimension: Option<i32> = sqlx::query_scalar("SELECT dimension FROM knowledge_bases WHERE id = $1")
            .bind(id)
            .fetch_optional(&mut *conn)
            .await?;
        sqlx::query(&drop_statement(id)).execute(&mut *conn).await?;
        if let Some(dimension) = dimension {
            let create = format!(
                "CREATE INDEX CONCURRENTLY {} ON chunks USING hnsw ({} {}) WHERE rag_id = {id}",
                index_name(id),
                vector_expr(dimension),
                ops(dimension)
            );
            sqlx::query(&create).execute(&mut *conn).await?;
        }
        Ok(())
    }
    .await;
    lock.release(ran).await
}

/// Drops a deleted base's index, as concurrently as it was built: a plain `DROP INDEX` takes
/// `chunks` whole, and every tenant's search and write queues behind it.
pub async fn drop_index(conn: &mut PoolConnection<Postgres>, id: i64) -> sqlx::Result<()> {
    concurrently(conn, &[drop_statement(id)], None).await
}

fn drop_statement(id: i64) -> String {
    format!("DROP INDEX CONCURRENTLY IF EXISTS {}", index_name(id))
}

/// Whether the index `name` is valid; None when there is no such index. A build in progress,
/// or one that failed half way, is not.
pub async fn index_validity(db: impl PgExecutor<'_>, name: &str) -> sqlx::Result<Option<bool>> {
    sqlx::query_scalar(
        "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = $1",
    )
    .bind(name)
    .fetch_optional(db)
    .await
}

/// Runs index DDL that cannot run in a transaction (`CONCURRENTLY`) holding the index build
/// lock: builds on any table take turns. Given `unless_valid`, nothing runs when that index is
/// valid once the lock is held: a build seen in progress before it has finished meanwhile.
pub async fn concurrently(
    conn: &mut PoolConnection<Postgres>,
    statements: &[String],
    unless_valid: Option<&str>,
) -> sqlx::Result<()> {
    let lock = BuildLock::take(conn).await?;
    let conn = &mut **lock.conn;
    let ran = async {
        if let Some(name) = unless_valid {
            if index_validity(&mut *conn, name).await? == Some(true) {
                return Ok(());
            }
        }
        for sql in statements {
            sqlx::query(sql).execute(&mut *conn).await?;
        }
        Ok::<_, sqlx::Error>(())
    }
    .await;
    lock.release(ran).await
}

/// How long a session holding the index build lock may sit idle before it is taken for one
/// whose process is gone (a Lambda instance frozen or reaped with its connection open): a build
/// runs its statements back to back and leaves none idle for more than moments.
pub const ABANDONED_BUILD_LOCK_AFTER_SECS: i32 = 30;

/// The index build lock, held by one pooled connection's session.
struct BuildLock<'c> {
    conn: &'c mut PoolConnection<Postgres>,
    /// Whether the session may hold the lock: from its first try until it is released.
    held: bool,
}

impl<'c> BuildLock<'c> {
    /// Takes the lock once no other build holds it. Tried, not waited for: a session blocked
    /// in pg_advisory_lock holds a snapshot that the running build would wait for in turn.
    /// Every few seconds of waiting, a holder abandoned (`ABANDONED_BUILD_LOCK_AFTER_SECS`)
    /// is ended, which frees the lock.
    async fn take(conn: &'c mut PoolConnection<Postgres>) -> sqlx::Result<Self> {
        let lock = Self { conn, held: true };
        let mut tries: u32 = 0;
        while !sqlx::query_scalar::<_, bool>("SELECT pg_try_advisory_lock($1)")
            .bind(INDEX_BUILD_LOCK)
            .fetch_one(&mut **lock.conn)
            .await?
        {
            tries += 1;
            if tries % 100 == 0 {
                // Not being allowed to end it (another role's session) leaves waiting as before.
                if let Err(e) = end_abandoned_holder(lock.conn).await {
                    tracing::warn!(error = %e, "could not end an idle holder of the index build lock");
                }
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        Ok(lock)
    }

    /// Releases the lock after the work that held it `ran`, answering that outcome.
    async fn release(mut self, ran: sqlx::Result<()>) -> sqlx::Result<()> {
        let unlocked = sqlx::query("SELECT pg_advisory_unlock($1)")
            .bind(INDEX_BUILD_LOCK)
            .execute(&mut **self.conn)
            .await;
        // Not released: the connection is closed on drop, which is what releases a session
        // lock it could not release itself.
        self.held = unlocked.is_err();
        ran?;
        unlocked?;
        Ok(())
    }
}

impl Drop for BuildLock<'_> {
    /// Dropped while it may hold the lock (its future cancelled: a worker stopped at its
    /// deadline, a client gone), the connection is closed, not returned to the pool, where its
    /// session would keep the lock and stop every later build, on every instance.
    fn drop(&mut self) {
        if self.held {
            self.conn.close_on_drop();
        }
    }
}

/// Ends the session holding the index build lock in this database if it has sat idle past
/// `ABANDONED_BUILD_LOCK_AFTER_SECS`.
async fn end_abandoned_holder(conn: &mut PgConnection) -> sqlx::Result<()> {
    // Ended in the select list, which runs only for the rows the filter kept.
    let ended: Vec<(i32, bool)> = sqlx::query_as(
        "SELECT a.pid, pg_terminate_backend(a.pid) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
         WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
           AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
           AND l.classid = ($1 >> 32)::oid AND l.objid = ($1 & 4294967295)::oid
           AND a.pid <> pg_backend_pid() AND a.state = 'idle'
           AND a.state_change < now() - make_interval(secs => $2)",
    )
    .bind(INDEX_BUILD_LOCK)
    .bind(f64::from(ABANDONED_BUILD_LOCK_AFTER_SECS))
    .fetch_all(conn)
    .await?;
    if !ended.is_empty() {
        tracing::warn!(pids = ?ended, "ended a database session that held the index build lock while idle");
    }
    Ok(())
}

/// Ids of the bases whose index outlived them (its drop after the base's deletion failed).
pub async fn orphan_indexes(db: &PgPool) -> sqlx::Result<Vec<i64>> {
    sqlx::query_scalar(
        "SELECT m.id
         FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid,
              LATERAL (SELECT (regexp_match(c.relname, '^chunks_hnsw_kb_([0-9]+)$'))[1]::bigint AS id) m
         WHERE i.indrelid = 'chunks'::regclass AND m.id IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM knowledge_bases k WHERE k.id = m.id)",
    )
    .fetch_all(db)
    .await
}

/// Storage keys of everything stored for a base's documents and images. The documents' rows
/// are locked first, as for one document's keys (see there): images a processing run commits
/// meanwhile are read too.
pub async fn object_keys(conn: &mut PgConnection, id: i64) -> sqlx::Result<Vec<String>> {
    sqlx::query("SELECT 1 FROM documents WHERE rag_id = $1 ORDER BY id FOR UPDATE")
        .bind(id)
        .execute(&mut *conn)
        .await?;
    sqlx::query_scalar(
        "SELECT storage_key FROM documents WHERE rag_id = $1 UNION ALL SELECT storage_key FROM document_images WHERE rag_id = $1",
    )
    .bind(id)
    .fetch_all(conn)
    .await
}

pub async fn delete(db: impl PgExecutor<'_>, id: i64) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM knowledge_bases WHERE id = $1")
        .bind(id)
        .execute(db)
        .await?;
    Ok(())
}
