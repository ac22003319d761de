//! The service's own PostgreSQL: vectors in `chunks.embedding` (one partial HNSW index per
//! base), full text in `chunks.tsv`. The entries are columns of the chunk rows, so removing
//! a row removes them; `remove` has nothing left to do.

use async_trait::async_trait;
use sqlx::postgres::PgArguments;
use sqlx::query::QueryAs;
use sqlx::{PgConnection, PgPool, Postgres};

use super::{word_plan, Entry, IndexWrites, TextIndex, VectorIndex};
use crate::db::vector_literal;
use crate::rag::bases::{self, KbRow};
use crate::rag::search::bm25;
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

    fn in_transaction(&self) -> bool {
        true
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

    /// The chunks go with the base's rows; their index after them (`bases::service::delete`).
    async fn drop_all(&self, _tx: &mut PgConnection) -> anyhow::Result<()> {
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

    fn in_transaction(&self) -> bool {
        true
    }

    async fn put(&self, tx: &mut PgConnection, entries: &[Entry<'_>]) -> anyhow::Result<()> {
        let ids: Vec<i64> = entries.iter().map(|e| e.chunk_id).collect();
        let words: Vec<String> = entries.iter().map(|e| segment::tsvector(e.content)).collect();
        sqlx::query(
            "UPDATE chunks SET tsv = u.s::tsvector FROM unnest($1::bigint[], $2::text[]) AS u(id, s)
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

/// pgvector's default `hnsw.ef_search`.
const DEFAULT_EF_SEARCH: usize = 40;

/// Nearest chunks of base `rag_id` by cosine similarity. The base id and dimension are written
/// into the SQL (integers from our own row) so the planner can use the base's partial HNSW
/// index. Public so the search benchmark runs the very statement the service runs.
pub async fn vector_hits(
    db: &PgPool,
    rag_id: i64,
    dimension: i32,
    vector: &[f32],
    limit: usize,
) -> sqlx::Result<Vec<Hit>> {
    let expr = bases::repo::vector_expr(dimension);
    let cast = bases::repo::vector_cast(dimension);
    let sql = format!(
        "SELECT id, (1 - ({expr} <=> $1::{cast}))::float8 AS score FROM chunks
         WHERE rag_id = {rag_id} AND embedding IS NOT NULL ORDER BY {expr} <=> $1::{cast} LIMIT $2"
    );
    let query = sqlx::query_as(&sql).bind(vector_literal(vector)).bind(limit as i64);
    Ok(hits(nearest(db, limit, query).await?))
}

/// Runs an HNSW nearest-neighbour `query` for `limit` rows of `(id, score)`. An HNSW scan
/// returns at most `hnsw.ef_search` rows (40 unless configured); only a larger candidate count
/// (rerank) pays for the transaction that raises it. For the service's own database and for
/// another PostgreSQL alike.
pub(super) async fn nearest(
    db: &PgPool,
    limit: usize,
    query: QueryAs<'_, Postgres, (i64, f64), PgArguments>,
) -> sqlx::Result<Vec<(i64, f64)>> {
    if limit <= DEFAULT_EF_SEARCH {
        return query.fetch_all(db).await;
    }
    let mut tx = db.begin().await?;
    sqlx::query("SELECT set_config('hnsw.ef_search', $1, true)")
        .bind(limit.to_string())
        .execute(&mut *tx)
        .await?;
    let rows = query.fetch_all(&mut *tx).await?;
    tx.commit().await?;
    Ok(rows)
}

/// Candidate rows all listed words may take together: a word's list is `CANDIDATE_ROWS / words`
/// rows, kept within `PER_WORD`. A word matching fewer chunks contributes all of them.
const CANDIDATE_ROWS: usize = 1_200;
const PER_WORD: std::ops::RangeInclusive<usize> = 100..=400;

/// Chunks of base `rag_id` matching words of `query`, ranked by Okapi BM25 (`bm25`), without
/// scoring every match: with common words in the query nearly every chunk matches, and reading
/// a `tsvector` costs microseconds.
///
/// The base's word statistics decide which words' GIN lists are read (`word_plan`: short
/// lists only, stop words of the base never). Candidates are each listed word's matches (at
/// most a per-word share of rows) plus the chunks holding every word; a chunk's bound is the
/// summed weight (IDF) of the lists it is in, or of every word. The best `5 x limit` (at least
/// 100) by that bound are scored by BM25 over every query word, which only then reads their
/// `tsvector`s: a word's count in a chunk is its number of positions, the chunk's length the
/// sum of them.
///
/// Public so the search benchmark and the retrieval-quality test run the very statements the
/// service runs.
pub async fn text_hits(db: &PgPool, rag_id: i64, query: &str, limit: usize) -> sqlx::Result<Vec<Hit>> {
    let words = segment::distinct(query);
    if words.is_empty() {
        return Ok(vec![]);
    }
    let Some(plan) = word_plan::plan(&word_plan::lookup(db, rag_id, &words).await?) else {
        return Ok(vec![]);
    };
    let per_word = (CANDIDATE_ROWS / plan.listed.len()).clamp(*PER_WORD.start(), *PER_WORD.end());
    let operands: Vec<&str> = plan.listed.iter().map(|l| l.operand.as_str()).collect();
    let weights: Vec<f64> = plan.listed.iter().map(|l| l.weight).collect();
    let (every, every_weight) = plan.every.unzip();
    let scored: Vec<&str> = plan.ranked.keys().map(String::as_str).collect();
    let candidates: Vec<bm25::Candidate> = sqlx::query_as(
        "WITH lists AS (
             SELECT x.ids, t.w
             FROM unnest($2::text[], $3::float8[]) AS t(term, w),
             LATERAL (SELECT array_agg(m.id) AS ids FROM (SELECT c.id FROM chunks c
                      WHERE c.rag_id = $1 AND c.tsv @@ t.term::tsquery LIMIT $4) m) x
             WHERE x.ids IS NOT NULL
         ),
         hits AS (
             SELECT id, w, false AS every FROM lists, unnest(lists.ids) AS id
             UNION ALL
             SELECT m.id, $6, true FROM (SELECT c.id FROM chunks c
                 WHERE $5::text IS NOT NULL AND c.rag_id = $1 AND c.tsv @@ $5::tsquery
                 LIMIT $4) m
         ),
         best AS (
             SELECT id, greatest(sum(w) FILTER (WHERE NOT every), max(w) FILTER (WHERE every)) AS bound
             FROM hits GROUP BY id ORDER BY bound DESC, id LIMIT $7
         )
         SELECT c.id, sum(greatest(cardinality(u.positions), 1))::int8 AS len,
                coalesce(array_agg(u.lexeme) FILTER (WHERE u.lexeme = ANY($8)), '{}') AS words,
                coalesce(array_agg(cardinality(u.positions)) FILTER (WHERE u.lexeme = ANY($8)), '{}') AS counts
         FROM best JOIN chunks c ON c.id = best.id, unnest(c.tsv) AS u
         GROUP BY c.id",
    )
    .bind(rag_id)
    .bind(&operands)
    .bind(&weights)
    .bind(per_word as i64)
    .bind(every)
    .bind(every_weight)
    .bind((limit * 5).max(100) as i64)
    .bind(&scored)
    .fetch_all(db)
    .await?;
    Ok(bm25::rank(&plan.ranked, plan.avg_len, &candidates, limit))
}

fn hits(rows: Vec<(i64, f64)>) -> Vec<Hit> {
    rows.into_iter()
        .map(|(chunk_id, score)| Hit { id: chunk_id, score })
        .collect()
}
