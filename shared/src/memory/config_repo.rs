//! Memory configs in the database: read, held, saved, deleted, and who is bound to them.

use sqlx::{PgConnection, PgExecutor, PgPool};

use super::config_model::ConfigRow;
use crate::{AppError, AppResult};

const COLUMNS: &str = "id, name, status, vector_store_instance_id, embedding_model_id, dimension, max_recall,
    rerank_model_id, enter_rerank_count, extraction_interval, max_memories_per_extraction, extraction_model_id,
    memory_expiration_days, rrf_k, search_engine_enable, search_engine_instance_id, rewrite_enabled, rerank_enabled,
    threshold_enabled, similarity_threshold, dense_weight, fusion_strategy, custom_extraction_prompt, creator_id,
    create_dt, update_dt";

pub async fn find(db: &PgPool, id: i64) -> sqlx::Result<Option<ConfigRow>> {
    sqlx::query_as(&format!("SELECT {COLUMNS} FROM memory_configs WHERE id = $1"))
        .bind(id)
        .fetch_optional(db)
        .await
}

/// Whether an administrator created the config.
pub async fn by_operator(conn: &mut PgConnection, id: i64) -> sqlx::Result<bool> {
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM memory_configs c JOIN users u ON u.id = c.creator_id WHERE c.id = $1 AND u.role = 1)",
    )
    .bind(id)
    .fetch_one(conn)
    .await
}

/// The config, held until the transaction ends: an agent bound to it is written under this
/// hold, and an edit of the config takes the row for update before it checks the agents bound
/// to it. Either the edit's check sees the new binding or the binding's check sees the edit.
pub async fn find_held(conn: &mut PgConnection, id: i64) -> sqlx::Result<Option<ConfigRow>> {
    sqlx::query_as(&format!("SELECT {COLUMNS} FROM memory_configs WHERE id = $1 FOR SHARE"))
        .bind(id)
        .fetch_optional(conn)
        .await
}

/// Takes the config for update (see `find_held`).
pub async fn lock_for_edit(conn: &mut PgConnection, id: i64) -> sqlx::Result<()> {
    sqlx::query("SELECT 1 FROM memory_configs WHERE id = $1 FOR UPDATE")
        .bind(id)
        .execute(conn)
        .await
        .map(|_| ())
}

/// Sets the dimension of a config saved without one (before configs kept their model's
/// answer) to `length`, the first its model gave; returns the config's dimension as it now is.
/// None when the config is gone.
pub async fn adopt_dimension(db: &PgPool, id: i64, length: i32) -> sqlx::Result<Option<i32>> {
    sqlx::query_scalar(
        "UPDATE memory_configs SET dimension = COALESCE(dimension, $2) WHERE id = $1 RETURNING dimension",
    )
    .bind(id)
    .bind(length)
    .fetch_optional(db)
    .await
    .map(Option::flatten)
}

/// Configs the list answers at most: any signed-in user may create them, each up to some
/// 9 KB with its extraction prompt, and all of them listed grew past a function's answer for
/// everyone (413) once one user made a few hundred.
pub const LIST_MAX: i64 = 200;

/// The first `LIST_MAX` configs for `user`: their own, then administrators', then the rest,
/// each oldest first.
pub async fn list(db: &PgPool, user: i64) -> sqlx::Result<Vec<ConfigRow>> {
    sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM memory_configs
         ORDER BY creator_id <> $1,
                  NOT EXISTS (SELECT 1 FROM users u WHERE u.id = creator_id AND u.role = $2), id
         LIMIT $3"
    ))
    .bind(user)
    .bind(crate::domain::Role::Admin.code())
    .bind(LIST_MAX)
    .fetch_all(db)
    .await
}

/// The settings an agent's memory runs with: its config, or the built-in defaults when it
/// has none. A config id that no longer exists is an error, not a silent fallback.
pub async fn effective(db: &PgPool, id: Option<i64>) -> AppResult<ConfigRow> {
    match id {
        None => Ok(ConfigRow::builtin()),
        Some(id) => find(db, id)
            .await?
            .ok_or_else(|| AppError::business(format!("memory config {id} does not exist"))),
    }
}

/// The columns `save` writes, in the order it binds them.
const WRITTEN: &str = "name, status, vector_store_instance_id, embedding_model_id, dimension, max_recall,
    rerank_model_id, enter_rerank_count, extraction_interval, max_memories_per_extraction, extraction_model_id,
    memory_expiration_days, rrf_k, search_engine_enable, search_engine_instance_id, rewrite_enabled, rerank_enabled,
    threshold_enabled, similarity_threshold, dense_weight, fusion_strategy, custom_extraction_prompt, creator_id";

/// Writes a new config or every field of an existing one; returns the id. An existing one is
/// written only as it was read (`c.update_dt`): None when it changed since, and nothing was
/// written, since `c` would undo that change.
pub async fn save(db: impl PgExecutor<'_>, c: &ConfigRow) -> sqlx::Result<Option<i64>> {
    let mut q = match c.id {
        None => sqlx::QueryBuilder::new(format!("INSERT INTO memory_configs ({WRITTEN}) VALUES (")),
        Some(_) => sqlx::QueryBuilder::new(format!("UPDATE memory_configs SET update_dt = now(), ({WRITTEN}) = (")),
    };
    let mut s = q.separated(", ");
    s.push_bind(&c.name)
        .push_bind(c.status)
        .push_bind(c.vector_store_instance_id)
        .push_bind(c.embedding_model_id)
        .push_bind(c.dimension)
        .push_bind(c.max_recall)
        .push_bind(c.rerank_model_id)
        .push_bind(c.enter_rerank_count)
        .push_bind(c.extraction_interval)
        .push_bind(c.max_memories_per_extraction)
        .push_bind(c.extraction_model_id)
        .push_bind(c.memory_expiration_days)
        .push_bind(c.rrf_k)
        .push_bind(c.search_engine_enable)
        .push_bind(c.search_engine_instance_id)
        .push_bind(c.rewrite_enabled)
        .push_bind(c.rerank_enabled)
        .push_bind(c.threshold_enabled)
        .push_bind(c.similarity_threshold)
        .push_bind(c.dense_weight)
        .push_bind(&c.fusion_strategy)
        .push_bind(&c.custom_extraction_prompt)
        .push_bind(c.creator_id);
    match c.id {
        None => q.push(") RETURNING id"),
        Some(id) => q
            .push(") WHERE id = ")
            .push_bind(id)
            .push(" AND update_dt = ")
            .push_bind(c.update_dt)
            .push(" RETURNING id"),
    };
    q.build_query_scalar().fetch_optional(db).await
}

pub async fn delete(db: &PgPool, id: i64) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM memory_configs WHERE id = $1")
        .bind(id)
        .execute(db)
        .await
        .map(|_| ())
}

/// Agents bound to the config.
/// Memories of the agents bound to config `id` whose vectors are `model`'s: recall searches
/// with the config's model only, so a new model leaves them unreachable.
pub async fn memories_embedded_by(db: impl PgExecutor<'_>, id: i64, model: i64) -> sqlx::Result<i64> {
    sqlx::query_scalar(
        "SELECT count(*) FROM memories m JOIN agents a ON a.id = m.agent_id
         WHERE a.memory_config_id = $1 AND m.embedding_model_id = $2",
    )
    .bind(id)
    .bind(model)
    .fetch_one(db)
    .await
}

pub async fn agents_using(db: &PgPool, id: i64) -> sqlx::Result<i64> {
    sqlx::query_scalar("SELECT count(*) FROM agents WHERE memory_config_id = $1")
        .bind(id)
        .fetch_one(db)
        .await
}
