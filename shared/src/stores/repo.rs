//! SQL of store instances.

use serde_json::Value;
use sqlx::{PgConnection, PgExecutor, PgPool, Postgres, QueryBuilder};

use super::StoreRow;
use crate::users::repo::escape_like;

const COLUMNS: &str =
    "id, name, category, store_type, config, password_enc, status, is_default, builtin, create_dt, update_dt";

pub async fn find(db: impl PgExecutor<'_>, id: i64) -> sqlx::Result<Option<StoreRow>> {
    sqlx::query_as(&format!("SELECT {COLUMNS} FROM store_instances WHERE id = $1"))
        .bind(id)
        .fetch_optional(db)
        .await
}

pub async fn default_of(db: &PgPool, category: i16) -> sqlx::Result<Option<StoreRow>> {
    sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM store_instances WHERE category = $1 AND is_default"
    ))
    .bind(category)
    .fetch_optional(db)
    .await
}

#[derive(Debug, Default)]
pub struct Filter<'a> {
    pub category: Option<i16>,
    pub keyword: Option<&'a str>,
    pub store_type: Option<i16>,
    pub status: Option<i16>,
}

fn push_filter<'a>(qb: &mut QueryBuilder<'a, Postgres>, f: &'a Filter<'a>) {
    qb.push(" WHERE TRUE");
    if let Some(c) = f.category {
        qb.push(" AND category = ").push_bind(c);
    }
    if let Some(k) = f.keyword {
        qb.push(" AND name ILIKE ").push_bind(format!("%{}%", escape_like(k)));
    }
    if let Some(t) = f.store_type {
        qb.push(" AND store_type = ").push_bind(t);
    }
    if let Some(s) = f.status {
        qb.push(" AND status = ").push_bind(s);
    }
}

pub async fn list(db: &PgPool, f: &Filter<'_>, page: Option<(i64, i64)>) -> sqlx::Result<(Vec<StoreRow>, i64)> {
    let mut count = QueryBuilder::new("SELECT count(*) FROM store_instances");
    push_filter(&mut count, f);
    let total: i64 = count.build_query_scalar().fetch_one(db).await?;
    let mut rows = QueryBuilder::new(format!("SELECT {COLUMNS} FROM store_instances"));
    push_filter(&mut rows, f);
    rows.push(" ORDER BY id");
    if let Some((limit, offset)) = page {
        rows.push(" LIMIT ").push_bind(limit).push(" OFFSET ").push_bind(offset);
    }
    Ok((rows.build_query_as().fetch_all(db).await?, total))
}

pub struct Fields<'a> {
    pub name: Option<&'a str>,
    pub category: Option<i16>,
    pub store_type: Option<i16>,
    pub config: Option<&'a Value>,
    pub password_enc: Option<&'a str>,
    pub status: Option<i16>,
}

pub async fn insert(db: impl PgExecutor<'_>, f: &Fields<'_>) -> sqlx::Result<i64> {
    sqlx::query_scalar(
        "INSERT INTO store_instances (name, category, store_type, config, password_enc, status)
         VALUES ($1, $2, $3, $4, $5, COALESCE($6, 1)) RETURNING id",
    )
    .bind(f.name)
    .bind(f.category)
    .bind(f.store_type)
    .bind(f.config)
    .bind(f.password_enc)
    .bind(f.status)
    .fetch_one(db)
    .await
}

pub async fn update(db: impl PgExecutor<'_>, id: i64, f: &Fields<'_>) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE store_instances SET name = COALESCE($2, name), category = COALESCE($3, category),
         store_type = COALESCE($4, store_type), config = COALESCE($5, config), password_enc = COALESCE($6, password_enc),
         status = COALESCE($7, status), update_dt = now() WHERE id = $1",
    )
    .bind(id)
    .bind(f.name)
    .bind(f.category)
    .bind(f.store_type)
    .bind(f.config)
    .bind(f.password_enc)
    .bind(f.status)
    .execute(db)
    .await?;
    Ok(())
}

/// Makes `id` the default of its category; run inside the caller's transaction.
pub async fn make_default(conn: &mut sqlx::PgConnection, id: i64, category: i16) -> sqlx::Result<()> {
    sqlx::query("UPDATE store_instances SET is_default = FALSE WHERE category = $1 AND is_default AND id <> $2")
        .bind(category)
        .bind(id)
        .execute(&mut *conn)
        .await?;
    sqlx::query("UPDATE store_instances SET is_default = TRUE WHERE id = $1")
        .bind(id)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Holds the instance until the transaction ends, when it still is an active one of
/// `category`: a base written under this hold keeps an instance whose kind an edit (which
/// takes the row for update, then counts its bases) cannot change meanwhile.
pub async fn hold(conn: &mut PgConnection, id: i64, category: i16) -> sqlx::Result<bool> {
    let held: Option<i64> =
        sqlx::query_scalar("SELECT id FROM store_instances WHERE id = $1 AND category = $2 AND status = 1 FOR SHARE")
            .bind(id)
            .bind(category)
            .fetch_optional(conn)
            .await?;
    Ok(held.is_some())
}

/// Takes the instance for update (see `hold`).
pub async fn lock_for_edit(conn: &mut PgConnection, id: i64) -> sqlx::Result<()> {
    sqlx::query("SELECT 1 FROM store_instances WHERE id = $1 FOR UPDATE")
        .bind(id)
        .execute(conn)
        .await
        .map(|_| ())
}

pub async fn users_count(db: &PgPool, id: i64) -> sqlx::Result<i64> {
    sqlx::query_scalar(
        "SELECT count(*) FROM knowledge_bases WHERE vector_store_instance_id = $1 OR search_engine_instance_id = $1",
    )
    .bind(id)
    .fetch_one(db)
    .await
}

pub async fn delete(db: &PgPool, id: i64) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM store_instances WHERE id = $1")
        .bind(id)
        .execute(db)
        .await?;
    Ok(())
}
