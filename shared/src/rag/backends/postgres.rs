//! The service's own PostgreSQL: vectors in `chunks.embedding` (one partial HNSW index per
//! base), full text in `chunks.tsv`. The entries are columns of the chunk rows, so removing
//! a row removes them; `remove` has nothing left to do.

use async_trait::async_trait;
use sqlx::{PgConnection, PgPool};

use super::{Entry, IndexWrites, TextIndex, VectorIndex};
use crate::rag::bases::{self, KbRow};
use crate::rag::pipeline::vector_literal;
use crate::rag::search::fusion::Hit;
use crate::rag::segment;

pub struct PgVectors {
    rag_id: i64,
    dimension: i32,
}

impl PgVectors {
    pub fn new(kb: &KbRow) -> Self {
        Self {
            rag_id: kb.id,
            dimension: kb.dimension,
        }
    }
}

#[async_trait]
impl IndexWrites for PgVectors {
    fn backend(&self) -> &'static str {
        "PostgreSQL"
    }

    async fn put(&self, tx: &mut PgConnection, entries: &[Entry<'_>]) -> anyhow::Result<()> {
        let ids: Vec<i64> = entries.iter().map(|e| e.chunk_id).collect();
        let vectors: Vec<String> = entries.iter().map(|e| vector_literal(e.vector)).collect();
        sqlx::query(
            "UPDATE chunks SET embedding = u.e::vector FROM unnest($1::bigint[], $2::text[]) AS u(id, e)
             WHERE chunks.id = u.id",
        )
        .bind(&ids)
        .bind(&vectors)
        .execute(tx)
        .await?;
        Ok(())
    }

    async fn remove(&self, _tx: &mut PgConnection, _chunk_ids: &[i64]) -> anyhow::Result<()> {
        Ok(())
    }

    async fn drop_all(&self, tx: &mut PgConnection) -> anyhow::Result<()> {
        bases::repo::drop_index(tx, self.rag_id).await?;
        Ok(())
    }
}

#[async_trait]
impl VectorIndex for PgVectors {
    async fn search(&self, db: &PgPool, vector: &[f32], limit: usize) -> anyhow::Result<Vec<Hit>> {
        Ok(vector_hits(db, self.rag_id, self.dimension, vector, limit).await?)
    }
}

pub struct PgText {
    rag_id: i64,
}

impl PgText {
    pub fn new(kb: &KbRow) -> Self {
        Self { rag_id: kb.id }
    }
}

#[async_trait]
impl IndexWrites for PgText {
    fn backend(&self) -> &'static str {
        "PostgreSQL"
    }

    async fn put(&self, tx: &mut PgConnection, entries: &[Entry<'_>]) -> anyhow::Result<()> {
        let ids: Vec<i64> = entries.iter().map(|e| e.chunk_id).collect();
        let words: Vec<String> = entries.iter().map(|e| segment::for_index(e.content)).collect();
        sqlx::query(
            "UPDATE chunks SET tsv = to_tsvector('simple', u.s) FROM unnest($1::bigint[], $2::text[]) AS u(id, s)
             WHERE chunks.id = u.id",
        )
        .bind(&ids)
        .bind(&words)
        .execute(tx)
        .await?;
        Ok(())
    }

    async fn remove(&self, _tx: &mut PgConnection, _chunk_ids: &[i64]) -> anyhow::Result<()> {
        Ok(())
    }

    async fn drop_all(&self, _tx: &mut PgConnection) -> anyhow::Result<()> {
        Ok(())
    }
}

#[async_trait]
impl TextIndex for PgText {
    async fn search(&self, db: &PgPool, query: &str, limit: usize) -> anyhow::Result<Vec<Hit>> {
        Ok(text_hits(db, self.rag_id, query, limit).await?)
    }
}

/// Nearest chunks of base `rag_id` by cosine similarity. The base id and dimension are written
/// into the SQL (integers from our own row) so the planner can use the base's partial HNSW
/// index. Public so the search benchmark runs the very statement the service runs.
pub async fn vector_hits(db: &PgPool, rag_id: i64, dimension: i32, vector: &[f32], limit: usize) -> sqlx::Result<Vec<Hit>> {
    let expr = bases::repo::vector_expr(dimension);
    let cast = if dimension > 2000 {
        format!("halfvec({dimension})")
    } else {
        format!("vector({dimension})")
    };
    let sql = format!(
        "SELECT id, (1 - ({expr} <=> $1::{cast}))::float8 AS score FROM chunks
         WHERE rag_id = {rag_id} AND embedding IS NOT NULL ORDER BY {expr} <=> $1::{cast} LIMIT $2"
    );
    let rows: Vec<(i64, f64)> = sqlx::query_as(&sql)
        .bind(vector_literal(vector))
        .bind(limit as i64)
        .fetch_all(db)
        .await?;
    Ok(hits(rows))
}

/// Chunks of base `rag_id` matching any word of `query`, ranked by cover density. Public so
/// the search benchmark and the retrieval-quality test run the very statement the service runs.
pub async fn text_hits(db: &PgPool, rag_id: i64, query: &str, limit: usize) -> sqlx::Result<Vec<Hit>> {
    let Some(tsquery) = segment::or_query(query) else {
        return Ok(vec![]);
    };
    let rows: Vec<(i64, f64)> = sqlx::query_as(
        "SELECT c.id, ts_rank_cd(c.tsv, q)::float8 FROM chunks c, to_tsquery('simple', $2) q
         WHERE c.rag_id = $1 AND c.tsv @@ q ORDER BY 2 DESC, c.id LIMIT $3",
    )
    .bind(rag_id)
    .bind(tsquery)
    .bind(limit as i64)
    .fetch_all(db)
    .await?;
    Ok(hits(rows))
}

fn hits(rows: Vec<(i64, f64)>) -> Vec<Hit> {
    rows.into_iter()
        .map(|(chunk_id, score)| Hit { id: chunk_id, score })
        .collect()
}
