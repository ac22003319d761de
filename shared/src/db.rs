//! The Postgres pool, the migrations applied at start-up, and SQL text the repositories share.

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgPool, Postgres, QueryBuilder};

use crate::config::Config;

/// The planner's price of a random page read against a sequential one (Postgres's default: 4,
/// for spinning disks). The data lives on SSD storage or in memory, and with the default the
/// planner read a chat's history by walking `messages` in id order (filtering out other
/// conversations) instead of through the `(conversation_id, id)` index once the table had
/// statistics (docs/decisions.md). Sent in the startup packet, so it costs no round trip.
const RANDOM_PAGE_COST: &str = "1.1";

/// A pooled connection used this recently is taken as alive without asking the server. By
/// default the pool pings every connection it hands out, a round trip of its own before every
/// statement: four per chat, three of them before the first token, each waking a server process.
/// One idle longer (after a quiet spell, a frozen function instance, a failover) is still
/// checked first; one that died within the window fails its statement once (503) and is dropped.
const TRUSTED_IF_USED_WITHIN: Duration = Duration::from_secs(1);

/// Connects and applies pending migrations. Applying takes an advisory lock, so several
/// functions starting together apply them once.
pub async fn connect(config: &Config) -> anyhow::Result<PgPool> {
    let options = PgConnectOptions::from_str(&config.database_url)
        .map_err(|e| anyhow::anyhow!("DATABASE_URL is not a Postgres URL: {e}"))?
        .options([("random_page_cost", RANDOM_PAGE_COST)]);
    let pool = PgPoolOptions::new()
        .max_connections(config.db_max_connections)
        .acquire_timeout(Duration::from_secs(10))
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for >= TRUSTED_IF_USED_WITHIN {
                    conn.ping().await?;
                }
                Ok(true)
            })
        })
        .connect_with(options)
        .await
        .map_err(|e| anyhow::anyhow!("cannot connect to the database: {e}"))?;
    migrate(&pool).await?;
    Ok(pool)
}

/// Applies the migrations this build has and the database lacks. A schema already up to date
/// (every start but the first of a release) is only read: sqlx's `run` first takes a blocking
/// advisory lock, so every cold start of every function waited behind the one applying a
/// release's migrations, up to the end of its init time.
async fn migrate(pool: &PgPool) -> anyhow::Result<()> {
    let mut migrator = sqlx::migrate!("../migrations");
    // A rolled-back deployment runs older code on a schema with migrations it does not know;
    // they only ever add, so that is safe and must not stop the service from starting.
    migrator.set_ignore_missing(true);
    if applied_already(pool, &migrator).await {
        return Ok(());
    }
    migrator
        .run(pool)
        .await
        .map_err(|e| anyhow::anyhow!("applying migrations failed: {e}"))
}

/// Whether every migration of this build is applied as it is now written. A changed one is
/// not: `run` then refuses it, naming it.
async fn applied_already(pool: &PgPool, migrator: &sqlx::migrate::Migrator) -> bool {
    // No table yet (a new database) reads as nothing applied.
    let applied: HashMap<i64, Vec<u8>> =
        match sqlx::query_as::<_, (i64, Vec<u8>)>("SELECT version, checksum FROM _sqlx_migrations WHERE success")
            .fetch_all(pool)
            .await
        {
            Ok(rows) => rows.into_iter().collect(),
            Err(_) => return false,
        };
    migrator.iter().filter(|m| m.migration_type.is_up_migration()).all(|m| {
        applied
            .get(&m.version)
            .is_some_and(|sum| sum.as_slice() == m.checksum.as_ref())
    })
}

/// How long a pooled connection to another PostgreSQL may sit unused before it is closed.
const OTHER_IDLE: Duration = Duration::from_secs(60);
/// How long a statement waits for a connection to another PostgreSQL (or for it to answer the
/// handshake) before it fails.
pub const OTHER_ACQUIRE: Duration = Duration::from_secs(5);

/// Pools to PostgreSQL servers other than the service's own (knowledge-base store instances):
/// one per connection setting, made on first use and kept by the process. A connection per
/// operation would put a handshake and a password exchange before every search.
#[derive(Default)]
pub struct OtherPools(Mutex<HashMap<String, PgPool>>);

impl OtherPools {
    /// The pool of the setting `key` names (all of it, the password included, so a changed
    /// instance gets a pool of its own), connecting lazily with `options`.
    pub fn get(&self, key: String, options: impl FnOnce() -> PgConnectOptions) -> PgPool {
        let mut pools = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        pools
            .entry(key)
            .or_insert_with(|| {
                PgPoolOptions::new()
                    .max_connections(4)
                    .acquire_timeout(OTHER_ACQUIRE)
                    .idle_timeout(OTHER_IDLE)
                    .connect_lazy_with(options())
            })
            .clone()
    }
}

/// pgvector's text form, `[0.1,0.2,...]`.
pub fn vector_literal(v: &[f32]) -> String {
    let mut s = String::with_capacity(v.len() * 10 + 2);
    s.push('[');
    for (i, x) in v.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        s.push_str(&x.to_string());
    }
    s.push(']');
    s
}

/// Pushes a partial update's new row for `columns` (a constant list, "a, b"), to follow
/// `UPDATE table t SET (a, b) = `: each column takes the value `values` binds for it (in the
/// order of `columns`), or keeps its own where that is NULL.
pub fn push_sent_or_kept<'a>(
    qb: &mut QueryBuilder<'a, Postgres>,
    columns: &str,
    values: impl FnOnce(&mut QueryBuilder<'a, Postgres>),
) {
    let kept: Vec<String> = columns
        .split(',')
        .map(str::trim)
        .map(|c| format!("COALESCE(f.{c}, t.{c})"))
        .collect();
    qb.push(format!("(SELECT {} FROM (VALUES (", kept.join(", ")));
    values(qb);
    qb.push(format!(")) AS f({columns}))"));
}

/// Tries of an insert-or-read whose row another request may create or remove between the two
/// (a first contact, a conversation created while another request deletes it).
pub const ENSURE_TRIES: usize = 3;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vector_literal_is_pgvector_text() {
        assert_eq!(vector_literal(&[0.5, -1.0, 2.25]), "[0.5,-1,2.25]");
    }
}
