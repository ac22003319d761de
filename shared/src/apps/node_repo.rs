//! SQL of client nodes and the kicks waiting to be told.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgConnection, PgExecutor, PgPool};

use super::model::NodeRow;

const SELECT: &str = "SELECT n.id, a.app_id, a.app_name, n.host_id, n.host_ip, n.grpc_port, n.max_concurrent,
       n.active_chats, n.labels, n.expire_dt
     FROM client_nodes n JOIN apps a ON a.id = n.app_id";
/// `SELECT` with the labels left out (JSON null), for routing.
const SELECT_FOR_ROUTING: &str =
    "SELECT n.id, a.app_id, a.app_name, n.host_id, n.host_ip, n.grpc_port, n.max_concurrent,
       n.active_chats, 'null'::jsonb AS labels, n.expire_dt
     FROM client_nodes n JOIN apps a ON a.id = n.app_id";

pub async fn of_app(db: &PgPool, app: i64) -> sqlx::Result<Vec<NodeRow>> {
    sqlx::query_as(&format!("{SELECT} WHERE n.app_id = $1 ORDER BY n.host_id"))
        .bind(app)
        .fetch_all(db)
        .await
}

/// The nodes whose lease has not run out, by hostId, for routing a call: their labels are left
/// out (JSON null). Routing does not read them, and every routed model call read up to 500
/// nodes' 4 KiB of them.
pub async fn online_of_app(db: &PgPool, app: i64) -> sqlx::Result<Vec<NodeRow>> {
    sqlx::query_as(&format!(
        "{SELECT_FOR_ROUTING} WHERE n.app_id = $1 AND n.expire_dt > now() ORDER BY n.host_id"
    ))
    .bind(app)
    .fetch_all(db)
    .await
}

pub async fn all(db: &PgPool) -> sqlx::Result<Vec<NodeRow>> {
    sqlx::query_as(&format!("{SELECT} ORDER BY a.app_id, n.host_id"))
        .fetch_all(db)
        .await
}

pub struct Beat<'a> {
    pub app: i64,
    pub host_id: &'a str,
    pub host_ip: &'a str,
    pub grpc_port: i32,
    pub max_concurrent: i32,
    pub active_chats: i32,
    pub labels: Value,
    pub expire_dt: DateTime<Utc>,
}

/// Whether the app may register one more node than it has: a known host always may; a new one
/// when the app holds fewer than `max` nodes, after the longest-lapsed ones give way (nodes
/// with made-up names, restarted pods say, would otherwise fill the list for the week lapsed
/// nodes are kept). New hosts of one app take turns (after their own node's lock, as every
/// heartbeat): counted at once, two could pass the cap, or pick the same lapsed node and one
/// be refused with room left.
pub async fn room_for(conn: &mut PgConnection, app: i64, host_id: &str, max: i64) -> sqlx::Result<bool> {
    if count_beside(conn, app, host_id).await?.1 {
        return Ok(true);
    }
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('client-nodes:' || $1::text))")
        .bind(app)
        .execute(&mut *conn)
        .await?;
    let (others, known) = count_beside(conn, app, host_id).await?;
    if known || others < max {
        return Ok(true);
    }
    // Lapsed rechecked on the row itself: a node that beat again while this waited for its
    // row is online, and stays.
    let evicted = sqlx::query(
        "DELETE FROM client_nodes WHERE expire_dt < now() AND id IN (
           SELECT id FROM client_nodes WHERE app_id = $1 AND expire_dt < now() ORDER BY expire_dt LIMIT $2)",
    )
    .bind(app)
    .bind(others - max + 1)
    .execute(&mut *conn)
    .await?
    .rows_affected();
    Ok(others - i64::try_from(evicted).unwrap_or(0) < max)
}

/// The app's nodes other than `host_id`, and whether `host_id` is one of its nodes.
async fn count_beside(conn: &mut PgConnection, app: i64, host_id: &str) -> sqlx::Result<(i64, bool)> {
    sqlx::query_as(
        "SELECT count(*) FILTER (WHERE host_id <> $2), COALESCE(bool_or(host_id = $2), FALSE)
         FROM client_nodes WHERE app_id = $1",
    )
    .bind(app)
    .bind(host_id)
    .fetch_one(conn)
    .await
}

pub async fn upsert(db: impl PgExecutor<'_>, b: &Beat<'_>) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO client_nodes (app_id, host_id, host_ip, grpc_port, max_concurrent, active_chats, labels, expire_dt)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
         ON CONFLICT (app_id, host_id) DO UPDATE SET host_ip = EXCLUDED.host_ip, grpc_port = EXCLUDED.grpc_port,
           max_concurrent = EXCLUDED.max_concurrent, active_chats = EXCLUDED.active_chats,
           labels = EXCLUDED.labels, expire_dt = EXCLUDED.expire_dt, update_dt = now()",
    )
    .bind(b.app)
    .bind(b.host_id)
    .bind(b.host_ip)
    .bind(b.grpc_port)
    .bind(b.max_concurrent)
    .bind(b.active_chats)
    .bind(&b.labels)
    .bind(b.expire_dt)
    .execute(db)
    .await?;
    Ok(())
}

/// Removes the node and remembers the kick; false when no such node was registered.
pub async fn kick(db: &PgPool, app: i64, host_id: &str) -> sqlx::Result<bool> {
    let mut tx = db.begin().await?;
    lock_node(&mut tx, app, host_id).await?;
    let removed = sqlx::query("DELETE FROM client_nodes WHERE app_id = $1 AND host_id = $2")
        .bind(app)
        .bind(host_id)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    if removed == 0 {
        return Ok(false);
    }
    sqlx::query(
        "INSERT INTO client_node_kicks (app_id, host_id) VALUES ($1, $2)
         ON CONFLICT (app_id, host_id) DO UPDATE SET kicked_dt = now()",
    )
    .bind(app)
    .bind(host_id)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(true)
}

/// Consumes a pending kick of this node; true when there was one.
/// Takes the node's kick, if one waits; the caller's transaction then holds the node until it
/// ends (see `lock_node`).
pub async fn take_kick(conn: &mut PgConnection, app: i64, host_id: &str) -> sqlx::Result<bool> {
    lock_node(conn, app, host_id).await?;
    let done = sqlx::query("DELETE FROM client_node_kicks WHERE app_id = $1 AND host_id = $2")
        .bind(app)
        .bind(host_id)
        .execute(conn)
        .await?;
    Ok(done.rows_affected() == 1)
}

/// A heartbeat and a kick of one node take turns: a heartbeat that found no kick and then
/// registered the node would otherwise bring back a node kicked in between.
async fn lock_node(conn: &mut PgConnection, app: i64, host_id: &str) -> sqlx::Result<()> {
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('client-node:' || $1::text || ':' || $2))")
        .bind(app)
        .bind(host_id)
        .execute(conn)
        .await
        .map(|_| ())
}

/// Deletes nodes whose lease lapsed more than `kept` ago: they stay listed as offline for that
/// long, then go.
pub async fn purge_lapsed(db: &PgPool, kept: std::time::Duration) -> sqlx::Result<u64> {
    let done = sqlx::query("DELETE FROM client_nodes WHERE expire_dt < now() - make_interval(secs => $1)")
        .bind(kept.as_secs_f64())
        .execute(db)
        .await?;
    Ok(done.rows_affected())
}

/// Deletes kicks older than `kept` that no heartbeat came to collect; a node back after that
/// registers afresh.
pub async fn purge_stale_kicks(db: &PgPool, kept: std::time::Duration) -> sqlx::Result<u64> {
    let done = sqlx::query("DELETE FROM client_node_kicks WHERE kicked_dt < now() - make_interval(secs => $1)")
        .bind(kept.as_secs_f64())
        .execute(db)
        .await?;
    Ok(done.rows_affected())
}
