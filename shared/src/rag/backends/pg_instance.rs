//! A PostgreSQL store instance of its own (a PGVECTOR or PG_FULLTEXT instance other than the
//! built-in one): a base keeps its entries there in a table per kind,
//! `agent_platform_kb_{id}_{created micros}_vectors` (pgvector, an HNSW index, cosine) and
//! `..._text` (a `tsvector` of the segmented words, a GIN index, ranked by `ts_rank`), keyed by
//! chunk id, made on the first write and dropped with the base.
//!
//! The instance's errors leave here as text, not as `sqlx::Error`: callers take a `sqlx::Error`
//! for a failure of the service's own database (`crate::error::database_failed`).

use async_trait::async_trait;
use sqlx::{PgConnection, PgPool};

use super::{Entry, IndexWrites, TextIndex, VectorIndex};
use crate::db::{vector_literal, OTHER_ACQUIRE};
use crate::rag::bases::{self, KbRow};
use crate::rag::search::fusion::Hit;
use crate::rag::segment;
use crate::stores::StoreRow;
use crate::{AppResult, AppState};

enum Kind {
    Vectors { dimension: i32 },
    Text,
}

pub struct PgInstanceIndex {
    pool: PgPool,
    /// `host:port`, for the error of an instance that does not answer.
    address: String,
    /// A quoted identifier made of the base's key (digits and `_`).
    table: String,
    kind: Kind,
}

/// The table of a base's entries of one kind (`vectors` or `text`) in a store instance.
pub fn table_name(kb: &KbRow, suffix: &str) -> String {
    format!("agent_platform_kb_{}_{suffix}", super::base_key(kb))
}

impl PgInstanceIndex {
    pub fn vectors(state: &AppState, row: &StoreRow, kb: &KbRow) -> AppResult<Self> {
        let kind = Kind::Vectors {
            dimension: kb.dimension,
        };
        Self::new(state, row, table_name(kb, "vectors"), kind)
    }

    pub fn text(state: &AppState, row: &StoreRow, kb: &KbRow) -> AppResult<Self> {
        Self::new(state, row, table_name(kb, "text"), Kind::Text)
    }

    fn new(state: &AppState, row: &StoreRow, table: String, kind: Kind) -> AppResult<Self> {
        let conn = super::connection(state, row)?;
        Ok(Self {
            pool: state.pg_pools().get(conn.pg_key(), || conn.pg_options()),
            address: format!("{}:{}", conn.host, conn.port),
            table: format!("\"{table}\""),
            kind,
        })
    }

    /// The entry's column type and what an entry's value is cast from text to.
    fn column(&self) -> String {
        match self.kind {
            Kind::Vectors { dimension } => bases::repo::vector_cast(dimension),
            Kind::Text => "tsvector".into(),
        }
    }

    /// Creates the table and its index. One advisory lock serialises the service's DDL in that
    /// database: two first writes at once would both try to create the table (and the
    /// extension), and one of them would fail on the catalog's unique keys.
    async fn ensure(&self) -> Result<(), sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock(hashtext('agent_platform_kb ddl'))")
            .execute(&mut *tx)
            .await?;
        let exists: bool = sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
            .bind(&self.table)
            .fetch_one(&mut *tx)
            .await?;
        if !exists {
            let (table, column) = (&self.table, self.column());
            let index = match self.kind {
                Kind::Vectors { dimension } => {
                    sqlx::query("CREATE EXTENSION IF NOT EXISTS vector")
                        .execute(&mut *tx)
                        .await?;
                    format!("hnsw (entry {})", bases::repo::ops(dimension))
                }
                Kind::Text => "gin (entry)".into(),
            };
            sqlx::query(&format!(
                "CREATE TABLE {table} (chunk_id bigint PRIMARY KEY, document_id bigint NOT NULL, entry {column} NOT NULL)"
            ))
            .execute(&mut *tx)
            .await?;
            sqlx::query(&format!("CREATE INDEX ON {table} USING {index}"))
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await
    }

    async fn upsert(&self, entries: &[Entry<'_>]) -> Result<(), sqlx::Error> {
        let ids: Vec<i64> = entries.iter().map(|e| e.chunk_id).collect();
        let documents: Vec<i64> = entries.iter().map(|e| e.document_id).collect();
        let values: Vec<String> = entries
            .iter()
            .map(|e| match self.kind {
                Kind::Vectors { .. } => vector_literal(e.vector),
                Kind::Text => segment::tsvector(e.content),
            })
            .collect();
        sqlx::query(&format!(
            "INSERT INTO {} (chunk_id, document_id, entry)
             SELECT u.c, u.d, u.e::{} FROM unnest($1::int8[], $2::int8[], $3::text[]) AS u(c, d, e)
             ON CONFLICT (chunk_id) DO UPDATE SET document_id = EXCLUDED.document_id, entry = EXCLUDED.entry",
            self.table,
            self.column()
        ))
        .bind(&ids)
        .bind(&documents)
        .bind(&values)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The first `limit` entries by `rest` (`WHERE` and `ORDER BY` over `entry` and `$1`), with
    /// `score`; none while the base has written nothing.
    async fn best(&self, score: &str, rest: &str, arg: String, limit: usize) -> anyhow::Result<Vec<Hit>> {
        let sql = format!(
            "SELECT chunk_id, ({score})::float8 AS score FROM {} {rest} LIMIT $2",
            self.table
        );
        let query = sqlx::query_as(&sql).bind(arg).bind(limit as i64);
        let rows = match self.kind {
            Kind::Vectors { .. } => super::postgres::nearest(&self.pool, limit, query).await,
            Kind::Text => query.fetch_all(&self.pool).await,
        };
        match rows {
            Ok(rows) => Ok(rows.into_iter().map(|(id, score)| Hit { id, score }).collect()),
            Err(e) if no_table(&e) => Ok(vec![]),
            Err(e) => Err(self.failed(e)),
        }
    }

    /// The instance's error as text (see the module's note). The pool keeps trying a refused
    /// connection until its wait ends, and then says only that it waited.
    fn failed(&self, e: sqlx::Error) -> anyhow::Error {
        match e {
            sqlx::Error::PoolTimedOut => {
                anyhow::anyhow!("no connection to {} within {} s", self.address, OTHER_ACQUIRE.as_secs())
            }
            e => anyhow::anyhow!("{e}"),
        }
    }
}

/// The table is not there: the base has not written anything yet.
fn no_table(e: &sqlx::Error) -> bool {
    e.as_database_error().and_then(|d| d.code()).as_deref() == Some("42P01")
}

#[async_trait]
impl IndexWrites for PgInstanceIndex {
    fn backend(&self) -> &'static str {
        "PostgreSQL (store instance)"
    }

    fn in_transaction(&self) -> bool {
        false
    }

    async fn put(&self, _tx: &mut PgConnection, entries: &[Entry<'_>]) -> anyhow::Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        match self.upsert(entries).await {
            Err(e) if no_table(&e) => {
                self.ensure().await.map_err(|e| self.failed(e))?;
                self.upsert(entries).await.map_err(|e| self.failed(e))
            }
            done => done.map_err(|e| self.failed(e)),
        }
    }

    async fn remove(&self, _tx: &mut PgConnection, chunk_ids: &[i64]) -> anyhow::Result<()> {
        let done = sqlx::query(&format!("DELETE FROM {} WHERE chunk_id = ANY($1)", self.table))
            .bind(chunk_ids)
            .execute(&self.pool)
            .await;
        match done {
            Err(e) if !no_table(&e) => Err(self.failed(e)),
            _ => Ok(()),
        }
    }

    async fn drop_all(&self, _tx: &mut PgConnection) -> anyhow::Result<()> {
        sqlx::query(&format!("DROP TABLE IF EXISTS {}", self.table))
            .execute(&self.pool)
            .await
            .map_err(|e| self.failed(e))?;
        Ok(())
    }
}

#[async_trait]
impl VectorIndex for PgInstanceIndex {
    async fn search(&self, _db: &PgPool, vector: &[f32], limit: usize) -> anyhow::Result<Vec<Hit>> {
        // Ordered by the distance operator itself, ascending: what the HNSW index answers.
        let distance = format!("entry <=> $1::{}", self.column());
        let order = format!("ORDER BY {distance}");
        self.best(&format!("1 - ({distance})"), &order, vector_literal(vector), limit)
            .await
    }
}

#[async_trait]
impl TextIndex for PgInstanceIndex {
    async fn search(&self, _db: &PgPool, query: &str, limit: usize) -> anyhow::Result<Vec<Hit>> {
        let Some(words) = segment::or_query(&segment::distinct(query)) else {
            return Ok(vec![]);
        };
        let rest = "WHERE entry @@ $1::tsquery ORDER BY score DESC, chunk_id";
        self.best("ts_rank(entry, $1::tsquery)", rest, words, limit).await
    }
}
