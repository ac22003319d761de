//! SQL of apps.

use chrono::{DateTime, Utc};
use sqlx::{PgExecutor, PgPool, Postgres, QueryBuilder};

use super::model::{AppFilter, AppRow};
use crate::users::repo::escape_like;

const SELECT: &str = "SELECT a.id, a.app_id, a.app_name, a.description, a.token_enc, a.route_strategy, a.status,
       a.creator_id, a.frame_ancestors, a.create_dt, a.update_dt,
       (SELECT count(*) FROM client_nodes n WHERE n.app_id = a.id AND n.expire_dt > now()) AS online_nodes
     FROM apps a";

pub struct NewApp<'a> {
    pub app_id: &'a str,
    pub app_name: &'a str,
    pub description: Option<&'a str>,
    pub token_enc: &'a str,
    pub route_strategy: &'a str,
    pub frame_ancestors: &'a [String],
    pub creator_id: i64,
}

pub async fn insert(db: impl PgExecutor<'_>, a: &NewApp<'_>) -> sqlx::Result<i64> {
    sqlx::query_scalar(
        "INSERT INTO apps (app_id, app_name, description, token_enc, route_strategy, frame_ancestors, creator_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
    )
    .bind(a.app_id)
    .bind(a.app_name)
    .bind(a.description)
    .bind(a.token_enc)
    .bind(a.route_strategy)
    .bind(a.frame_ancestors)
    .bind(a.creator_id)
    .fetch_one(db)
    .await
}

pub async fn find(db: &PgPool, id: i64) -> sqlx::Result<Option<AppRow>> {
    sqlx::query_as(&format!("{SELECT} WHERE a.id = $1"))
        .bind(id)
        .fetch_optional(db)
        .await
}

pub async fn find_by_app_id(db: &PgPool, app_id: &str) -> sqlx::Result<Option<AppRow>> {
    sqlx::query_as(&format!("{SELECT} WHERE a.app_id = $1"))
        .bind(app_id)
        .fetch_optional(db)
        .await
}

/// What routing a model call needs of an app; `cursor` is this call's ROUND_ROBIN ticket.
#[derive(Debug, sqlx::FromRow)]
pub struct RouteTicket {
    pub id: i64,
    pub route_strategy: String,
    pub token_enc: String,
    pub cursor: i64,
}

/// Loads the app, if enabled, and, for ROUND_ROBIN, takes the next cursor value in the same
/// statement.
pub async fn route_ticket(db: &PgPool, app_id: &str) -> sqlx::Result<Option<RouteTicket>> {
    sqlx::query_as(
        "WITH a AS (SELECT id, route_strategy, token_enc FROM apps WHERE app_id = $1 AND status = 1),
              c AS (UPDATE apps SET route_cursor = route_cursor + 1
                    WHERE id = (SELECT id FROM a) AND route_strategy = 'ROUND_ROBIN' RETURNING route_cursor)
         SELECT a.id, a.route_strategy, a.token_enc, COALESCE((SELECT route_cursor FROM c), 0) AS cursor FROM a",
    )
    .bind(app_id)
    .fetch_optional(db)
    .await
}

pub struct PageFilter<'a> {
    pub filter: &'a AppFilter,
    pub created: Option<(DateTime<Utc>, DateTime<Utc>)>,
}

fn push_filter<'a>(qb: &mut QueryBuilder<'a, Postgres>, f: &PageFilter<'a>) {
    qb.push(" WHERE TRUE");
    if let Some(k) = f.filter.keyword.as_deref().map(str::trim).filter(|k| !k.is_empty()) {
        let pattern = format!("%{}%", escape_like(k));
        qb.push(" AND (a.app_id ILIKE ")
            .push_bind(pattern.clone())
            .push(" OR a.app_name ILIKE ")
            .push_bind(pattern.clone())
            .push(" OR a.description ILIKE ")
            .push_bind(pattern)
            .push(")");
    }
    if let Some(status) = f.filter.status {
        qb.push(" AND a.status = ").push_bind(status);
    }
    if let Some((start, end)) = f.created {
        qb.push(" AND a.create_dt BETWEEN ")
            .push_bind(start)
            .push(" AND ")
            .push_bind(end);
    }
}

pub async fn page(db: &PgPool, f: &PageFilter<'_>, limit: i64, offset: i64) -> sqlx::Result<(Vec<AppRow>, i64)> {
    let mut count = QueryBuilder::new("SELECT count(*) FROM apps a");
    push_filter(&mut count, f);
    let total: i64 = count.build_query_scalar().fetch_one(db).await?;
    let mut rows = QueryBuilder::new(SELECT);
    push_filter(&mut rows, f);
    rows.push(" ORDER BY a.create_dt DESC, a.id DESC LIMIT ")
        .push_bind(limit)
        .push(" OFFSET ")
        .push_bind(offset);
    Ok((rows.build_query_as().fetch_all(db).await?, total))
}

pub async fn enabled(db: &PgPool) -> sqlx::Result<Vec<AppRow>> {
    sqlx::query_as(&format!("{SELECT} WHERE a.status = 1 ORDER BY a.app_name, a.id"))
        .fetch_all(db)
        .await
}

/// The fields an update sets (`app_id` never changes).
pub struct AppChange<'a> {
    pub app_name: &'a str,
    pub description: Option<&'a str>,
    pub route_strategy: &'a str,
    pub frame_ancestors: &'a [String],
}

/// Writes the app's settings as `c`, made from the row read at `read` (its `update_dt`); false
/// when the row changed since, and nothing was written: `c` would undo that change.
pub async fn update(db: impl PgExecutor<'_>, id: i64, read: DateTime<Utc>, c: &AppChange<'_>) -> sqlx::Result<bool> {
    let done = sqlx::query(
        "UPDATE apps SET app_name = $2, description = $3, route_strategy = $4, frame_ancestors = $5, update_dt = now()
         WHERE id = $1 AND update_dt = $6",
    )
    .bind(id)
    .bind(c.app_name)
    .bind(c.description)
    .bind(c.route_strategy)
    .bind(c.frame_ancestors)
    .bind(read)
    .execute(db)
    .await?;
    Ok(done.rows_affected() == 1)
}

pub async fn toggle_status(db: impl PgExecutor<'_>, id: i64) -> sqlx::Result<bool> {
    let done = sqlx::query("UPDATE apps SET status = 1 - status, update_dt = now() WHERE id = $1")
        .bind(id)
        .execute(db)
        .await?;
    Ok(done.rows_affected() == 1)
}

/// Replaces the app's sealed token; false when there is no such app.
pub async fn set_token(db: impl PgExecutor<'_>, id: i64, token_enc: &str) -> sqlx::Result<bool> {
    let done = sqlx::query("UPDATE apps SET token_enc = $2, update_dt = now() WHERE id = $1")
        .bind(id)
        .bind(token_enc)
        .execute(db)
        .await?;
    Ok(done.rows_affected() == 1)
}

/// What deleting an app did.
pub enum Deleted {
    /// Gone, with the keys of its users' images (for the caller to delete).
    Gone(Vec<String>),
    Missing,
    /// Kept: this many agents are bound to it (by its `appId`).
    Bound {
        app_id: String,
        agents: i64,
    },
}

/// Deletes the app (its nodes, external users and their conversations go with it) and the
/// rows of the images its external users uploaded: left behind, they would be ordinary uploads
/// of the app's creator, listed and served through `/resource`. Nothing is deleted while
/// agents are bound to it.
pub async fn delete(db: &PgPool, id: i64) -> sqlx::Result<Deleted> {
    let mut tx = db.begin().await?;
    // The app's row first: a user being added to it (its first upload) holds the row's key
    // until it commits, and is waited for here, so the lock below sees that user; one added
    // later waits, and finds the app gone. Taken after the users' lock, the new user's image
    // was missed by it and left to the app's creator when the cascade took the user. An agent
    // being bound to it holds the key too, so the count below sees every binding.
    let app_id: Option<String> = sqlx::query_scalar("SELECT app_id FROM apps WHERE id = $1 FOR UPDATE")
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
    let Some(app_id) = app_id else {
        return Ok(Deleted::Missing);
    };
    // Unbound by the delete (the foreign key sets null), its agents would be open to every
    // app: its instructions, knowledge and tools, meant for one partner, served to all.
    let agents: i64 = sqlx::query_scalar("SELECT count(*) FROM agents WHERE app_id = $1")
        .bind(&app_id)
        .fetch_one(&mut *tx)
        .await?;
    if agents > 0 {
        return Ok(Deleted::Bound { app_id, agents });
    }
    // An upload of one of them in flight holds its user's row (its foreign key): waited for
    // here, so the statement below, run after, sees its image. Uploads later than this lock
    // wait, and find their user gone.
    sqlx::query("SELECT 1 FROM external_users WHERE app_id = $1 ORDER BY id FOR UPDATE")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    let images: Vec<String> = sqlx::query_scalar(
        "DELETE FROM resources r USING external_resources e, external_users u
         WHERE e.resource_id = r.id AND u.id = e.external_user_id AND u.app_id = $1
         RETURNING r.storage_key",
    )
    .bind(id)
    .fetch_all(&mut *tx)
    .await?;
    let done = sqlx::query("DELETE FROM apps WHERE id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    if done.rows_affected() != 1 {
        return Ok(Deleted::Missing);
    }
    crate::resources::leftovers::going(&mut tx, &images).await?;
    tx.commit().await?;
    Ok(Deleted::Gone(images))
}
