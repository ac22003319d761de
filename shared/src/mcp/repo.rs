//! SQL of MCP servers.

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgExecutor, PgPool, Postgres, QueryBuilder};

use super::{McpOption, McpRow, McpServerBrief};
use crate::users::repo::escape_like;

const COLUMNS: &str = "id, name, description, transport_type, endpoint, command, args, env_vars_enc, auth_type, \
     auth_config_enc, COALESCE(secret_set_by, creator_id) AS secret_set_by, status, last_error, last_connect_dt, \
     tool_count, creator_id, create_dt, update_dt, creator_id IN (SELECT id FROM users WHERE role = 1) AS by_operator";

/// Who is asking: administrators see every server, others their own and administrators' ones.
#[derive(Debug, Clone, Copy)]
pub struct Viewer {
    pub user_id: i64,
    pub admin: bool,
}

fn push_visible(qb: &mut QueryBuilder<'_, Postgres>, viewer: Viewer) {
    if !viewer.admin {
        qb.push(" AND (creator_id = ")
            .push_bind(viewer.user_id)
            .push(" OR creator_id IN (SELECT id FROM users WHERE role = 1))");
    }
}

pub async fn find(db: impl PgExecutor<'_>, id: i64) -> sqlx::Result<Option<McpRow>> {
    sqlx::query_as(&format!("SELECT {COLUMNS} FROM mcp_servers WHERE id = $1"))
        .bind(id)
        .fetch_optional(db)
        .await
}

pub async fn page(
    db: &PgPool,
    viewer: Viewer,
    keyword: Option<&str>,
    limit: i64,
    offset: i64,
) -> sqlx::Result<(Vec<McpRow>, i64)> {
    let filter = |qb: &mut QueryBuilder<'_, Postgres>| {
        qb.push(" WHERE TRUE");
        push_visible(qb, viewer);
        if let Some(k) = keyword {
            let pattern = format!("%{}%", escape_like(k));
            qb.push(" AND (name ILIKE ")
                .push_bind(pattern.clone())
                .push(" OR description ILIKE ")
                .push_bind(pattern)
                .push(")");
        }
    };
    let mut count = QueryBuilder::new("SELECT count(*) FROM mcp_servers");
    filter(&mut count);
    let total: i64 = count.build_query_scalar().fetch_one(db).await?;
    let mut rows = QueryBuilder::new(format!("SELECT {COLUMNS} FROM mcp_servers"));
    filter(&mut rows);
    rows.push(" ORDER BY id DESC LIMIT ")
        .push_bind(limit)
        .push(" OFFSET ")
        .push_bind(offset);
    Ok((rows.build_query_as().fetch_all(db).await?, total))
}

/// The most servers a selection list holds. An administrator's list holds every user's, and
/// unbounded it grew with them past what a response may carry.
pub const OPTIONS_MAX: i64 = 1000;

/// The viewer's own servers first, then administrators', then the rest, each by name.
pub async fn options(db: &PgPool, viewer: Viewer) -> sqlx::Result<Vec<McpOption>> {
    let mut qb = QueryBuilder::new("SELECT id, name FROM mcp_servers WHERE TRUE");
    push_visible(&mut qb, viewer);
    qb.push(" ORDER BY creator_id <> ")
        .push_bind(viewer.user_id)
        .push(", creator_id NOT IN (SELECT id FROM users WHERE role = 1), lower(name), id LIMIT ")
        .push_bind(OPTIONS_MAX);
    qb.build_query_as().fetch_all(db).await
}

/// Whether a server other than `except` named `name` (any case) is one the viewer can see or
/// one of `creator_id`'s (the owner of the server being named: names are unique per creator).
pub async fn visible_name_taken(
    db: &mut PgConnection,
    viewer: Viewer,
    creator_id: i64,
    name: &str,
    except: Option<i64>,
) -> sqlx::Result<bool> {
    let mut qb = QueryBuilder::new("SELECT EXISTS (SELECT 1 FROM mcp_servers WHERE lower(name) = lower(");
    qb.push_bind(name.to_owned()).push(")");
    if let Some(id) = except {
        qb.push(" AND id <> ").push_bind(id);
    }
    // push_visible appends "AND (...)" (nothing for administrators) to the TRUE.
    qb.push(" AND (creator_id = ").push_bind(creator_id).push(" OR (TRUE");
    push_visible(&mut qb, viewer);
    qb.push(")))");
    qb.build_query_scalar().fetch_one(db).await
}

/// Those of `ids` that exist and that the viewer may use, in the order given.
pub async fn visible_ids(db: &PgPool, viewer: Viewer, ids: &[i64]) -> sqlx::Result<Vec<i64>> {
    let mut qb = QueryBuilder::new("SELECT id FROM mcp_servers WHERE id = ANY(");
    qb.push_bind(ids.to_vec()).push(")");
    push_visible(&mut qb, viewer);
    let found: Vec<i64> = qb.build_query_scalar().fetch_all(db).await?;
    Ok(ids.iter().copied().filter(|id| found.contains(id)).collect())
}

/// Of `ids`, those the user `user_id` may use with their role as it is now (`visible_ids`),
/// in their order; none for a user who no longer exists.
pub async fn usable_by(db: &PgPool, user_id: i64, ids: &[i64]) -> sqlx::Result<Vec<i64>> {
    let role: Option<i16> = sqlx::query_scalar("SELECT role FROM users WHERE id = $1")
        .bind(user_id)
        .fetch_optional(db)
        .await?;
    let Some(role) = role else {
        return Ok(vec![]);
    };
    visible_ids(
        db,
        Viewer {
            user_id,
            admin: role == 1,
        },
        ids,
    )
    .await
}

pub async fn briefs(db: &PgPool, ids: &[i64]) -> sqlx::Result<Vec<McpServerBrief>> {
    let rows: Vec<McpServerBrief> =
        sqlx::query_as("SELECT id, name, description, transport_type, status FROM mcp_servers WHERE id = ANY($1)")
            .bind(ids)
            .fetch_all(db)
            .await?;
    // In the order the agent lists them.
    Ok(ids
        .iter()
        .filter_map(|id| rows.iter().find(|r| r.id == *id).cloned())
        .collect())
}

/// Everything a create or an update writes (an update writes the merged, validated whole).
pub struct Fields<'a> {
    pub name: &'a str,
    pub description: &'a str,
    pub transport_type: i16,
    pub endpoint: Option<&'a str>,
    pub command: Option<&'a str>,
    pub args: &'a [String],
    pub env_vars_enc: Option<&'a str>,
    pub auth_type: i16,
    pub auth_config_enc: Option<&'a str>,
    /// Who stored the secret in `auth_config_enc`.
    pub secret_set_by: i64,
}

/// Creations and renames to one name take turns until their transactions end: a name must be
/// free among every server its creator's viewers see, which no index can say, so two at once
/// would each find it free.
pub async fn lock_name(conn: &mut sqlx::PgConnection, name: &str) -> sqlx::Result<()> {
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('mcp-name:' || lower($1)))")
        .bind(name)
        .execute(conn)
        .await
        .map(|_| ())
}

/// The columns of `Fields`, in its order.
const WRITTEN: &str =
    "name, description, transport_type, endpoint, command, args, env_vars_enc, auth_type, auth_config_enc, secret_set_by";

/// The values of `WRITTEN`.
fn push_values<'a>(qb: &mut QueryBuilder<'a, Postgres>, f: &Fields<'a>) {
    qb.separated(", ")
        .push_bind(f.name)
        .push_bind(f.description)
        .push_bind(f.transport_type)
        .push_bind(f.endpoint)
        .push_bind(f.command)
        .push_bind(f.args)
        .push_bind(f.env_vars_enc)
        .push_bind(f.auth_type)
        .push_bind(f.auth_config_enc)
        .push_bind(f.secret_set_by);
}

pub async fn insert(db: impl PgExecutor<'_>, f: &Fields<'_>, creator_id: i64) -> sqlx::Result<i64> {
    let mut qb = QueryBuilder::new(format!("INSERT INTO mcp_servers ({WRITTEN}, creator_id) VALUES ("));
    push_values(&mut qb, f);
    qb.push(", ").push_bind(creator_id).push(") RETURNING id");
    qb.build_query_scalar().fetch_one(db).await
}

/// A changed configuration makes the last test result stale: the status returns to `unknown`.
/// `f` was made from the row read at `read` (its `update_dt`); false when the row changed since,
/// and nothing was written: `f` would undo that change.
pub async fn update(db: impl PgExecutor<'_>, id: i64, read: DateTime<Utc>, f: &Fields<'_>) -> sqlx::Result<bool> {
    let mut qb = QueryBuilder::new(format!("UPDATE mcp_servers SET ({WRITTEN}) = ROW("));
    push_values(&mut qb, f);
    qb.push("), status = 'unknown', last_error = NULL, update_dt = clock_timestamp() WHERE id = ")
        .push_bind(id)
        .push(" AND update_dt = ")
        .push_bind(read);
    Ok(qb.build().execute(db).await?.rows_affected() == 1)
}

/// Records a test of the configuration of `tested` (its `update_dt`); a test of a configuration
/// changed since then records nothing: the change set the status back to unknown.
pub async fn mark_connected(
    db: &PgPool,
    id: i64,
    tested: DateTime<Utc>,
    tool_count: i32,
    at: DateTime<Utc>,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE mcp_servers SET status = 'connected', last_error = NULL, last_connect_dt = $3, tool_count = $4
         WHERE id = $1 AND update_dt = $2",
    )
    .bind(id)
    .bind(tested)
    .bind(at)
    .bind(tool_count)
    .execute(db)
    .await?;
    Ok(())
}

/// As `mark_connected`, for a failed test.
pub async fn mark_error(db: &PgPool, id: i64, tested: DateTime<Utc>, error: &str) -> sqlx::Result<()> {
    sqlx::query("UPDATE mcp_servers SET status = 'error', last_error = $3 WHERE id = $1 AND update_dt = $2")
        .bind(id)
        .bind(tested)
        .bind(error)
        .execute(db)
        .await?;
    Ok(())
}

/// Deletes the server and takes it out of every agent's list, in the caller's transaction.
/// The row is locked first: an agent being bound to it holds it, and is waited for, so the
/// statement after sees that agent too.
pub async fn delete(conn: &mut sqlx::PgConnection, id: i64) -> sqlx::Result<()> {
    sqlx::query("SELECT 1 FROM mcp_servers WHERE id = $1 FOR UPDATE")
        .bind(id)
        .execute(&mut *conn)
        .await?;
    sqlx::query(
        "UPDATE agents SET mcp_server_ids = array_remove(mcp_server_ids, $1), update_dt = now()
         WHERE $1 = ANY(mcp_server_ids)",
    )
    .bind(id)
    .execute(&mut *conn)
    .await?;
    sqlx::query("DELETE FROM mcp_servers WHERE id = $1")
        .bind(id)
        .execute(&mut *conn)
        .await?;
    Ok(())
}
