//! SQL of providers and model configs.

use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use sqlx::{PgExecutor, PgPool, Postgres, QueryBuilder};

use super::{ModelConfigRow, ProviderRow};

const PROVIDER_COLUMNS: &str =
    "id, provider_name, provider_key, description, icon_url, is_enabled, created_dt, updated_dt";

pub async fn providers(db: &PgPool, enabled_only: bool) -> sqlx::Result<Vec<ProviderRow>> {
    sqlx::query_as(&format!(
        "SELECT {PROVIDER_COLUMNS} FROM model_providers WHERE is_enabled OR NOT $1 ORDER BY id"
    ))
    .bind(enabled_only)
    .fetch_all(db)
    .await
}

pub async fn provider(db: impl PgExecutor<'_>, id: i64) -> sqlx::Result<Option<ProviderRow>> {
    sqlx::query_as(&format!("SELECT {PROVIDER_COLUMNS} FROM model_providers WHERE id = $1"))
        .bind(id)
        .fetch_optional(db)
        .await
}

pub struct ProviderFields<'a> {
    pub name: Option<&'a str>,
    pub key: Option<&'a str>,
    pub description: Option<&'a str>,
    pub icon_url: Option<&'a str>,
    pub is_enabled: Option<bool>,
}

pub async fn insert_provider(db: &PgPool, f: &ProviderFields<'_>) -> sqlx::Result<i64> {
    sqlx::query_scalar(
        "INSERT INTO model_providers (provider_name, provider_key, description, icon_url, is_enabled)
         VALUES ($1, $2, $3, $4, COALESCE($5, TRUE)) RETURNING id",
    )
    .bind(f.name)
    .bind(f.key)
    .bind(f.description)
    .bind(f.icon_url)
    .bind(f.is_enabled)
    .fetch_one(db)
    .await
}

/// Changes the given fields; returns false when the provider does not exist.
pub async fn update_provider(db: &PgPool, id: i64, f: &ProviderFields<'_>) -> sqlx::Result<bool> {
    let n = sqlx::query(
        "UPDATE model_providers SET provider_name = COALESCE($2, provider_name), provider_key = COALESCE($3, provider_key),
         description = NULLIF(COALESCE($4, description), ''), icon_url = NULLIF(COALESCE($5, icon_url), ''),
         is_enabled = COALESCE($6, is_enabled), updated_dt = now() WHERE id = $1",
    )
    .bind(id)
    .bind(f.name)
    .bind(f.key)
    .bind(f.description)
    .bind(f.icon_url)
    .bind(f.is_enabled)
    .execute(db)
    .await?;
    Ok(n.rows_affected() == 1)
}

pub async fn delete_provider(db: &PgPool, id: i64) -> sqlx::Result<bool> {
    Ok(sqlx::query("DELETE FROM model_providers WHERE id = $1")
        .bind(id)
        .execute(db)
        .await?
        .rows_affected()
        == 1)
}

/// Knowledge bases, agents and memory configs that name the config, in a column or in their
/// settings: each uses it as a model of the type it has now.
pub async fn users_count(db: impl PgExecutor<'_>, id: i64) -> sqlx::Result<i64> {
    others_users_count(db, id, None).await
}

/// `users_count` of what is not `owner`'s (all of it when `owner` is None).
pub async fn others_users_count(db: impl PgExecutor<'_>, id: i64, owner: Option<i64>) -> sqlx::Result<i64> {
    sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM knowledge_bases
                 WHERE (embedding_model_id = $1 OR rerank_model_id = $1
                    OR (chunk_params->>'chunkModelId')::bigint = $1 OR (model_params->>'modelId')::bigint = $1
                    OR (search_params->>'rerankModelId')::bigint = $1)
                   AND creator_id IS DISTINCT FROM $2)
              + (SELECT count(*) FROM agents WHERE chat_model_id = $1 AND creator_id IS DISTINCT FROM $2)
              + (SELECT count(*) FROM memory_configs
                 WHERE (embedding_model_id = $1 OR rerank_model_id = $1 OR extraction_model_id = $1)
                   AND creator_id IS DISTINCT FROM $2)",
    )
    .bind(id)
    .bind(owner)
    .fetch_one(db)
    .await
}

pub async fn provider_config_count(db: &PgPool, id: i64) -> sqlx::Result<i64> {
    sqlx::query_scalar("SELECT count(*) FROM model_configs WHERE provider_id = $1")
        .bind(id)
        .fetch_one(db)
        .await
}

const CONFIG_SELECT: &str =
    "SELECT c.id, c.provider_id, p.provider_name, c.model_name, c.model_key, c.model_type, c.adapter_key,
    c.api_key_enc, COALESCE(c.key_set_by, c.creator_id) AS key_set_by, c.api_endpoint, c.description, c.config_json, c.scope, c.is_default, c.is_enabled,
    c.creator_id,
    c.created_dt, c.updated_dt, p.is_enabled AS provider_enabled,
    EXISTS (SELECT 1 FROM users u WHERE u.id = c.creator_id AND u.role = 1) AS by_operator
    FROM model_configs c JOIN model_providers p ON p.id = c.provider_id";

/// The config an agent row `a` chats with (its own model or the default chat model) as one
/// JSON object, or NULL: a column for statements that read an agent for a chat. Built once:
/// it is part of every chat's first statement.
pub static CHAT_CONFIG_OF_AGENT: LazyLock<String> = LazyLock::new(|| {
    format!(
        ", (SELECT to_jsonb(mc) FROM ({CONFIG_SELECT} WHERE c.id = COALESCE(a.chat_model_id,
           (SELECT d.id FROM model_configs d WHERE d.model_type = 'CHAT' AND d.is_default LIMIT 1))) mc)
         AS chat_model_config"
    )
});

/// Who may see which configs: everyone sees GLOBAL ones, owners their PERSONAL ones,
/// administrators everything.
#[derive(Debug, Clone, Copy)]
pub struct Visibility {
    pub user_id: i64,
    pub is_admin: bool,
}

fn push_visibility(qb: &mut QueryBuilder<'_, Postgres>, v: Visibility) {
    if !v.is_admin {
        qb.push(" AND (c.scope = 'GLOBAL' OR c.creator_id = ")
            .push_bind(v.user_id)
            .push(")");
    }
}

pub async fn config(db: impl PgExecutor<'_>, id: i64) -> sqlx::Result<Option<ModelConfigRow>> {
    sqlx::query_as(&format!("{CONFIG_SELECT} WHERE c.id = $1"))
        .bind(id)
        .fetch_optional(db)
        .await
}

/// The configs, locked (`FOR SHARE`, in id order) until the transaction ends.
pub async fn configs_held(conn: &mut sqlx::PgConnection, ids: &[i64]) -> sqlx::Result<Vec<ModelConfigRow>> {
    sqlx::query_as(&format!(
        "{CONFIG_SELECT} WHERE c.id = ANY($1) ORDER BY c.id FOR SHARE OF c"
    ))
    .bind(ids)
    .fetch_all(conn)
    .await
}

#[derive(Debug, Default)]
pub struct ConfigQuery<'a> {
    pub provider_key: Option<&'a str>,
    pub model_type: Option<&'a str>,
    pub scope: Option<&'a str>,
    pub enabled_only: bool,
}

fn push_config_filter<'a>(qb: &mut QueryBuilder<'a, Postgres>, q: &'a ConfigQuery<'a>, v: Visibility) {
    qb.push(" WHERE TRUE");
    push_visibility(qb, v);
    if let Some(k) = q.provider_key {
        qb.push(" AND p.provider_key = ").push_bind(k);
    }
    if let Some(t) = q.model_type {
        qb.push(" AND c.model_type = ").push_bind(t);
    }
    if let Some(s) = q.scope {
        qb.push(" AND c.scope = ").push_bind(s);
    }
    if q.enabled_only {
        qb.push(" AND c.is_enabled AND p.is_enabled");
    }
}

pub async fn configs(
    db: &PgPool,
    q: &ConfigQuery<'_>,
    v: Visibility,
    page: Option<(i64, i64)>,
) -> sqlx::Result<(Vec<ModelConfigRow>, i64)> {
    let mut count =
        QueryBuilder::new("SELECT count(*) FROM model_configs c JOIN model_providers p ON p.id = c.provider_id");
    push_config_filter(&mut count, q, v);
    let total: i64 = count.build_query_scalar().fetch_one(db).await?;
    let mut rows = QueryBuilder::new(CONFIG_SELECT);
    push_config_filter(&mut rows, q, v);
    rows.push(" ORDER BY c.id DESC");
    if let Some((limit, offset)) = page {
        rows.push(" LIMIT ").push_bind(limit).push(" OFFSET ").push_bind(offset);
    }
    Ok((rows.build_query_as().fetch_all(db).await?, total))
}

pub async fn default_config(db: &PgPool, model_type: &str) -> sqlx::Result<Option<ModelConfigRow>> {
    sqlx::query_as(&format!("{CONFIG_SELECT} WHERE c.model_type = $1 AND c.is_default"))
        .bind(model_type)
        .fetch_optional(db)
        .await
}

pub struct ConfigFields<'a> {
    pub provider_id: Option<i64>,
    pub model_name: Option<&'a str>,
    pub model_key: Option<&'a str>,
    pub model_type: Option<&'a str>,
    pub adapter_key: Option<&'a str>,
    pub api_key_enc: Option<&'a str>,
    /// Who sent `api_key_enc`: set with it.
    pub key_set_by: Option<i64>,
    pub api_endpoint: Option<&'a str>,
    /// Written apart from the others: on an update a blank one clears it (`NULL`, never `''`).
    pub description: Option<&'a str>,
    pub config_json: Option<&'a serde_json::Value>,
    pub scope: Option<&'a str>,
    pub is_enabled: Option<bool>,
}

/// The columns of `ConfigFields` but `description`, in its order.
const CONFIG_COLUMNS: &str = "provider_id, model_name, model_key, model_type, adapter_key, api_key_enc, key_set_by,
    api_endpoint, config_json, scope, is_enabled";

/// The values of `CONFIG_COLUMNS`.
fn push_config_values<'a>(qb: &mut QueryBuilder<'a, Postgres>, f: &ConfigFields<'a>) {
    qb.separated(", ")
        .push_bind(f.provider_id)
        .push_bind(f.model_name)
        .push_bind(f.model_key)
        .push_bind(f.model_type)
        .push_bind(f.adapter_key)
        .push_bind(f.api_key_enc)
        .push_bind(f.key_set_by)
        .push_bind(f.api_endpoint)
        .push_bind(f.config_json)
        .push_bind(f.scope)
        .push_bind(f.is_enabled);
}

/// A new config; options it leaves out take their defaults (no settings, GLOBAL, enabled).
pub async fn insert_config(db: impl PgExecutor<'_>, f: &ConfigFields<'_>, creator_id: i64) -> sqlx::Result<i64> {
    let no_settings = serde_json::json!({});
    let f = ConfigFields {
        config_json: Some(f.config_json.unwrap_or(&no_settings)),
        scope: Some(f.scope.unwrap_or("GLOBAL")),
        is_enabled: Some(f.is_enabled.unwrap_or(true)),
        key_set_by: Some(f.key_set_by.unwrap_or(creator_id)),
        ..*f
    };
    let mut qb = QueryBuilder::new(format!(
        "INSERT INTO model_configs ({CONFIG_COLUMNS}, description, creator_id) VALUES ("
    ));
    push_config_values(&mut qb, &f);
    qb.push(", ")
        .push_bind(f.description)
        .push(", ")
        .push_bind(creator_id)
        .push(") RETURNING id");
    qb.build_query_scalar().fetch_one(db).await
}

/// Writes the fields `f` holds; the others keep their values.
pub async fn update_config(db: impl PgExecutor<'_>, id: i64, f: &ConfigFields<'_>) -> sqlx::Result<()> {
    let mut qb = QueryBuilder::new(format!("UPDATE model_configs t SET ({CONFIG_COLUMNS}) = "));
    crate::db::push_sent_or_kept(&mut qb, CONFIG_COLUMNS, |qb| push_config_values(qb, f));
    qb.push(", description = NULLIF(COALESCE(")
        .push_bind(f.description)
        .push(", t.description), ''), updated_dt = now() WHERE t.id = ")
        .push_bind(id);
    qb.build().execute(db).await?;
    Ok(())
}

pub async fn set_enabled(db: &PgPool, table: EnableTarget, id: i64, enabled: bool) -> sqlx::Result<bool> {
    let sql = match table {
        EnableTarget::Provider => "UPDATE model_providers SET is_enabled = $2, updated_dt = now() WHERE id = $1",
        EnableTarget::Config => "UPDATE model_configs SET is_enabled = $2, updated_dt = now() WHERE id = $1",
    };
    Ok(sqlx::query(sql)
        .bind(id)
        .bind(enabled)
        .execute(db)
        .await?
        .rows_affected()
        == 1)
}

#[derive(Debug, Clone, Copy)]
pub enum EnableTarget {
    Provider,
    Config,
}

/// Deletes the config; its usage records and the messages it answered keep their rows and the
/// config's id (nothing reads the answers' id, and clearing it read the whole table).
/// Deletes the config and clears what names it in a column (by their foreign keys) or in a
/// knowledge base's settings: a base falls back to the default chat model and to no reranking,
/// as an agent falls back to the default chat model. A memory config whose reranker it was
/// reranks no more (left on with no model, its every later edit was refused). Left in the settings, the id failed every
/// search and Q&A of the base, and its next config edit wrote it back into a column (500). A
/// base cleared here counts as changed (`update_dt`): an edit that read it before would write
/// the id back, and is answered 409 instead. The config is locked first, in a statement of its
/// own: edits that name it hold it until they commit, and the clearing statement, which
/// starts after the lock, then sees what they wrote (in one statement its snapshot was taken
/// before, and a base given the config meanwhile kept it in its settings).
pub async fn delete_config(db: &PgPool, id: i64) -> sqlx::Result<()> {
    let mut tx = db.begin().await?;
    sqlx::query("SELECT 1 FROM model_configs WHERE id = $1 FOR UPDATE")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "WITH memory AS (
                UPDATE memory_configs SET rerank_model_id = NULL, rerank_enabled = FALSE, update_dt = now()
                WHERE rerank_model_id = $1),
              bases AS (
                UPDATE knowledge_bases SET
                  update_dt = now(),
                  search_params = CASE WHEN (search_params->>'rerankModelId')::bigint = $1
                    THEN search_params - 'rerankModelId' || '{\"rerankEnabled\": false}' ELSE search_params END,
                  model_params = CASE WHEN (model_params->>'modelId')::bigint = $1
                    THEN model_params - 'modelId' ELSE model_params END,
                  chunk_params = CASE WHEN (chunk_params->>'chunkModelId')::bigint = $1
                    THEN chunk_params - 'chunkModelId' ELSE chunk_params END
                WHERE (search_params->>'rerankModelId')::bigint = $1 OR (model_params->>'modelId')::bigint = $1
                   OR (chunk_params->>'chunkModelId')::bigint = $1)
         DELETE FROM model_configs WHERE id = $1",
    )
    .bind(id)
    .execute(&mut *tx)
    .await?;
    tx.commit().await
}

/// Takes what a default switch changes: the type's advisory lock (switches of one type take
/// turns), then the config and the type's current default, in id order as bindings hold the
/// configs they name. In another order a binding holding the old default while it waits for
/// the new one, and the switch holding the new one while it waits for the old, deadlock.
pub async fn lock_for_default_switch(conn: &mut sqlx::PgConnection, id: i64, model_type: &str) -> sqlx::Result<()> {
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('model-default:' || $1))")
        .bind(model_type)
        .execute(&mut *conn)
        .await?;
    sqlx::query("SELECT 1 FROM model_configs WHERE id = $1 OR (model_type = $2 AND is_default) ORDER BY id FOR UPDATE")
        .bind(id)
        .bind(model_type)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Makes `id` the only default of its type when, its row locked, it is an enabled GLOBAL config
/// of that type and of an enabled provider; false, with nothing changed, when it is not (changed since the caller read
/// it). Run inside the caller's transaction.
pub async fn switch_default(conn: &mut sqlx::PgConnection, id: i64, model_type: &str) -> sqlx::Result<bool> {
    lock_for_default_switch(conn, id, model_type).await?;
    // Chat takes no default whose provider is off.
    let eligible: Option<i64> = sqlx::query_scalar(
        "SELECT c.id FROM model_configs c JOIN model_providers p ON p.id = c.provider_id
         WHERE c.id = $1 AND c.model_type = $2 AND c.scope = 'GLOBAL' AND c.is_enabled AND p.is_enabled",
    )
    .bind(id)
    .bind(model_type)
    .fetch_optional(&mut *conn)
    .await?;
    if eligible.is_none() {
        return Ok(false);
    }
    sqlx::query("UPDATE model_configs SET is_default = FALSE, updated_dt = now() WHERE model_type = $1 AND is_default AND id <> $2")
        .bind(model_type)
        .bind(id)
        .execute(&mut *conn)
        .await?;
    sqlx::query("UPDATE model_configs SET is_default = TRUE, updated_dt = now() WHERE id = $1")
        .bind(id)
        .execute(&mut *conn)
        .await?;
    Ok(true)
}

/// Locks the config for the rest of the transaction; whether it is still as of `read` (`None`
/// when it is gone).
pub async fn lock_unchanged(conn: &mut sqlx::PgConnection, id: i64, read: DateTime<Utc>) -> sqlx::Result<Option<bool>> {
    sqlx::query_scalar("SELECT updated_dt = $2 FROM model_configs WHERE id = $1 FOR UPDATE")
        .bind(id)
        .bind(read)
        .fetch_optional(conn)
        .await
}

pub async fn clear_default(conn: &mut sqlx::PgConnection, id: i64) -> sqlx::Result<()> {
    sqlx::query("UPDATE model_configs SET is_default = FALSE, updated_dt = now() WHERE id = $1")
        .bind(id)
        .execute(conn)
        .await?;
    Ok(())
}

/// Takes what a `defaultVisionModel` mark changes, as [`lock_for_default_switch`] does: marks
/// take turns (two at once would each find the other unmarked, not yet committed, and both
/// stay), then the config and the marked ones, in id order.
pub async fn lock_for_vision_mark(conn: &mut sqlx::PgConnection, id: i64) -> sqlx::Result<()> {
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('model_configs defaultVisionModel'))")
        .execute(&mut *conn)
        .await?;
    sqlx::query(
        "SELECT 1 FROM model_configs WHERE id = $1 OR config_json->>'defaultVisionModel' = 'true' ORDER BY id FOR UPDATE",
    )
    .bind(id)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Takes the `defaultVisionModel` mark off every config but `id` (locked first with
/// [`lock_for_vision_mark`]): one vision model reads the images, and a second mark would leave
/// which one to the configs' ids.
pub async fn unmark_vision_but(conn: &mut sqlx::PgConnection, id: i64) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE model_configs SET config_json = config_json - 'defaultVisionModel', updated_dt = now()
         WHERE id <> $1 AND config_json->>'defaultVisionModel' = 'true'",
    )
    .bind(id)
    .execute(conn)
    .await?;
    Ok(())
}
