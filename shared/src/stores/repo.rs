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

/// The columns of `Fields`, in its order.
const WRITTEN: &str = "name, category, store_type, config, password_enc, status";

/// The values of `WRITTEN`.
fn push_values<'a>(qb: &mut QueryBuilder<'a, Postgres>, f: &Fields<'a>) {
    qb.separated(", ")
        .push_bind(f.name)
        .push_bind(f.category)
        .push_bind(f.store_type)
        .push_bind(f.config)
        .push_bind(f.password_enc)
        .push_bind(f.status);
}

/// A new instance; enabled unless `f` says otherwise.
pub async fn insert(db: impl PgExecutor<'_>, f: &Fields<'_>) -> sqlx::Result<i64> {
    let f = Fields {
        status: Some(f.status.unwrap_or(1)),
        ..*f
    };
    let mut qb = QueryBuilder::new(format!("INSERT INTO store_instances ({WRITTEN}) VALUES ("));
    push_values(&mut qb, &f);
    qb.push(") RETURNING id");
    qb.build_query_scalar().fetch_one(db).await
}

/// Writes the fields `f` holds; the others keep their values.
pub async fn update(db: impl PgExecutor<'_>, id: i64, f: &Fields<'_>) -> sqlx::Result<()> {
    let mut qb = QueryBuilder::new(format!("UPDATE store_instances t SET ({WRITTEN}) = "));
    crate::db::push_sent_or_kept(&mut qb, WRITTEN, |qb| push_values(qb, f));
    qb.push(", update_dt = now() WHERE t.id = ").push_bind(id);
    qb.build().execute(db).await?;
    Ok(())
}

/// Makes default switches take turns until the caller's transaction ends. Taken first, before
/// the instance's own row: two switches at once each cleared the other default as it was before
/// either, and the second's write then broke the one-default index (a 500); a switch that
/// locked its row before this lock deadlocked with one that did the reverse.
pub async fn lock_default_switches(conn: &mut sqlx::PgConnection) -> sqlx::Result<()> {
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('store-default'))")
        .execute(conn)
        .await?;
    Ok(())
}

/// Makes `id` the default of its category, inside the caller's transaction, which holds
/// `lock_default_switches`.
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

pub async fn users_count(db: impl PgExecutor<'_>, id: i64) -> sqlx::Result<i64> {
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
