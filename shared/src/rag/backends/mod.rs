//! Where a base keeps its vectors and its full-text entries: the service's PostgreSQL
//! (pgvector, `tsvector`), another PostgreSQL, Milvus or OpenSearch, chosen by the base's store
//! instances. The
//! pipeline, the chunk editor and search talk to the two traits only; fusion, rerank and
//! threshold stay in `rag::search` and work the same for every backend.
//!
//! Chunk rows (content, titles, pages) always live in PostgreSQL; a backend holds the entries
//! that find them, keyed by chunk id. Writes happen inside the transaction that writes the
//! rows, before it commits: when a backend fails the transaction rolls back and what the other
//! backends already took is removed again, so nothing is half-written.

pub mod milvus;
mod opensearch;
pub mod pg_instance;
pub mod postgres;
mod word_plan;

use async_trait::async_trait;
use sqlx::{PgConnection, PgPool};

use crate::rag::bases::KbRow;
use crate::rag::search::fusion::Hit;
use crate::stores::{self, StoreRow, StoreType};
use crate::{AppError, AppResult, AppState};

/// One chunk as an index sees it.
pub struct Entry<'a> {
    pub chunk_id: i64,
    pub document_id: i64,
    pub content: &'a str,
    pub vector: &'a [f32],
}

/// Writes shared by both kinds of index. `tx` is the transaction writing the chunk rows.
#[async_trait]
pub trait IndexWrites: Send + Sync {
    /// What the errors name, e.g. "Milvus".
    fn backend(&self) -> &'static str;
    /// Whether its writes are part of `tx`, so a rollback undoes them (the service's own
    /// Postgres), or go to an engine of their own at once (Milvus, OpenSearch).
    fn in_transaction(&self) -> bool;
    /// Adds or replaces the entries of these chunks.
    async fn put(&self, tx: &mut PgConnection, entries: &[Entry<'_>]) -> anyhow::Result<()>;
    /// Removes the entries of these chunks (ids without entries are ignored).
    async fn remove(&self, tx: &mut PgConnection, chunk_ids: &[i64]) -> anyhow::Result<()>;
    /// Removes everything of the base.
    async fn drop_all(&self, tx: &mut PgConnection) -> anyhow::Result<()>;
}

#[async_trait]
pub trait VectorIndex: IndexWrites {
    /// Nearest chunks by cosine similarity (higher is better), best first.
    async fn search(&self, db: &PgPool, vector: &[f32], limit: usize) -> anyhow::Result<Vec<Hit>>;
}

#[async_trait]
pub trait TextIndex: IndexWrites {
    /// Chunks matching any word of `query`, best first; raw scores of the engine.
    async fn search(&self, db: &PgPool, query: &str, limit: usize) -> anyhow::Result<Vec<Hit>>;
}

/// One of a base's two indexes.
#[derive(Debug, Clone, Copy)]
pub enum Side {
    Vectors,
    Text,
}

/// The vector index and the full-text index of one base.
pub struct Indexes {
    /// The base's id, for the logs.
    pub rag_id: i64,
    pub vector: Box<dyn VectorIndex>,
    pub text: Box<dyn TextIndex>,
}

impl Indexes {
    /// The indexes of `kb`'s store instances.
    pub async fn of(state: &AppState, kb: &KbRow) -> AppResult<Self> {
        Self::read_on(&mut *state.db().acquire().await?, state, kb).await
    }

    /// `of`, reading the store instances on `conn`: a caller in a transaction that read them
    /// on a pooled connection of its own held two at once.
    pub async fn read_on(conn: &mut PgConnection, state: &AppState, kb: &KbRow) -> AppResult<Self> {
        // The built-in stores need no row: that they are came with the base.
        let vector_row = match kb.vector_store_builtin {
            Some(true) => None,
            _ => stores::repo::find(&mut *conn, kb.vector_store_instance_id).await?,
        };
        let text_row = match kb.search_engine_instance_id {
            Some(id) if kb.search_engine_builtin != Some(true) => stores::repo::find(&mut *conn, id).await?,
            _ => None,
        };
        let vector: Box<dyn VectorIndex> = match vector_row.as_ref().map(|r| (r.store_type(), r)) {
            Some((StoreType::Milvus, row)) => Box::new(milvus::MilvusIndex::new(state, row, kb)?),
            Some((StoreType::OpenSearch, row)) => Box::new(opensearch::OpenSearchIndex::vectors(state, row, kb)?),
            Some((StoreType::PgVector, row)) => Box::new(pg_instance::PgInstanceIndex::vectors(state, row, kb)?),
            _ => Box::new(postgres::PgVectors::new(kb)),
        };
        let text: Box<dyn TextIndex> = match text_row.as_ref().map(|r| (r.store_type(), r)) {
            Some((StoreType::OpenSearch, row)) => Box::new(opensearch::OpenSearchIndex::text(state, row, kb)?),
            Some((StoreType::PgFullText, row)) => Box::new(pg_instance::PgInstanceIndex::text(state, row, kb)?),
            _ => Box::new(postgres::PgText::new(kb)),
        };
        Ok(Self {
            rag_id: kb.id,
            vector,
            text,
        })
    }

    fn side(&self, side: Side) -> &dyn IndexWrites {
        match side {
            Side::Vectors => self.vector.as_ref(),
            Side::Text => self.text.as_ref(),
        }
    }

    /// Both indexes, those inside the transaction first: when an engine of its own fails
    /// after them, the rollback undoes their part.
    fn all(&self) -> [&dyn IndexWrites; 2] {
        let mut all = [
            self.vector.as_ref() as &dyn IndexWrites,
            self.text.as_ref() as &dyn IndexWrites,
        ];
        all.sort_by_key(|index| !index.in_transaction());
        all
    }

    /// Writes the entries of new chunks to both indexes; on a failure, what was written is
    /// removed again.
    pub async fn put(&self, tx: &mut PgConnection, entries: &[Entry<'_>]) -> anyhow::Result<()> {
        let all = self.all();
        for (i, index) in all.into_iter().enumerate() {
            if let Err(e) = index.put(tx, entries).await {
                let ids: Vec<i64> = entries.iter().map(|e| e.chunk_id).collect();
                for written in &all[..i] {
                    if let Err(undo) = written.remove(tx, &ids).await {
                        self.undo_failed(*written, &undo, &ids);
                    }
                }
                return Err(indexing_failed(index, e));
            }
        }
        Ok(())
    }

    /// Writes new entries of existing chunks to both indexes. On a failure an engine already
    /// written keeps the new entry: removing it would take the chunk out of that engine (its
    /// old entry is gone, and Milvus holds the only copy of its vector), while the same edit
    /// sent again makes both agree.
    pub async fn replace(&self, tx: &mut PgConnection, entries: &[Entry<'_>]) -> anyhow::Result<()> {
        for index in self.all() {
            index.put(tx, entries).await.map_err(|e| indexing_failed(index, e))?;
        }
        Ok(())
    }

    /// Removes what a failed transaction had written (its rows are rolled back).
    pub async fn undo(&self, tx: &mut PgConnection, chunk_ids: &[i64]) {
        for index in self.all() {
            if let Err(e) = index.remove(tx, chunk_ids).await {
                self.undo_failed(index, &e, chunk_ids);
            }
        }
    }

    /// An engine kept entries of chunks that do not exist: what an operator needs to remove
    /// them (search skips them meanwhile, as no chunk row matches).
    fn undo_failed(&self, index: &dyn IndexWrites, e: &anyhow::Error, chunk_ids: &[i64]) {
        const SHOWN: usize = 100;
        let shown = &chunk_ids[..chunk_ids.len().min(SHOWN)];
        tracing::warn!(
            error = %e,
            backend = index.backend(),
            rag_id = self.rag_id,
            chunks = chunk_ids.len(),
            chunk_ids = ?shown,
            "could not undo an index write; the entries of these chunks are left in it"
        );
    }

    pub async fn remove(&self, tx: &mut PgConnection, chunk_ids: &[i64]) -> anyhow::Result<()> {
        if chunk_ids.is_empty() {
            return Ok(());
        }
        for index in self.all() {
            index
                .remove(tx, chunk_ids)
                .await
                .map_err(|e| e.context(format!("{} could not remove the chunks", index.backend())))?;
        }
        Ok(())
    }

    pub async fn drop_all(&self, tx: &mut PgConnection) -> anyhow::Result<()> {
        for index in self.all() {
            drop_index(index, tx).await?;
        }
        Ok(())
    }

    /// Removes everything of the base from one of its indexes.
    pub async fn drop_side(&self, tx: &mut PgConnection, side: Side) -> anyhow::Result<()> {
        drop_index(self.side(side), tx).await
    }

    /// Removes the entries of every chunk of these documents (their rows go with them).
    pub async fn remove_documents(&self, tx: &mut PgConnection, document_ids: &[i64]) -> anyhow::Result<()> {
        let ids = chunk_ids_of(tx, document_ids).await?;
        self.remove(tx, &ids).await
    }
}

/// Takes the entries of replaced documents' chunks out of the base's stores. Callers run it
/// last before their commit: a document whose entries went while its rows stayed (a later
/// statement refused) would no longer be found by search.
pub async fn remove_replaced(state: &AppState, kb: &KbRow, tx: &mut PgConnection, chunk_ids: &[i64]) -> AppResult<()> {
    if chunk_ids.is_empty() {
        return Ok(());
    }
    let indexes = Indexes::read_on(&mut *tx, state, kb).await?;
    indexes.remove(tx, chunk_ids).await.map_err(store_error)
}

/// What `store_error` shows is the outermost context: it names the store and the step, never
/// the engine's own words (an address, a login name).
async fn drop_index(index: &dyn IndexWrites, tx: &mut PgConnection) -> anyhow::Result<()> {
    index
        .drop_all(tx)
        .await
        .map_err(|e| e.context(format!("{} could not drop the base's index", index.backend())))
}

fn indexing_failed(index: &dyn IndexWrites, e: anyhow::Error) -> anyhow::Error {
    e.context(format!("{} could not index the chunks", index.backend()))
}

/// The chunks of these documents: what their entries in the stores are named by.
pub async fn chunk_ids_of(conn: &mut PgConnection, document_ids: &[i64]) -> sqlx::Result<Vec<i64>> {
    sqlx::query_scalar("SELECT id FROM chunks WHERE document_id = ANY($1)")
        .bind(document_ids)
        .fetch_all(conn)
        .await
}

/// A backend failure as callers see it: a business error (code 0) saying which store failed
/// at what (the outermost context). The rest of the chain, addresses and what the engine
/// answered, goes to the log: the base's owner need not be whoever configured the store. A
/// failure of the service's own database is not the store's: an internal error.
pub fn store_error(e: anyhow::Error) -> AppError {
    if crate::error::database_failed(&e) {
        return AppError::Internal(e);
    }
    tracing::warn!(error = format!("{e:#}"), "knowledge base store failed");
    AppError::business(format!("the knowledge base's store failed: {e}"))
}

/// The store row's connection settings, with the sealed password opened.
fn connection(state: &AppState, row: &StoreRow) -> AppResult<stores::Connection> {
    let mut conn = stores::Connection::from_config(&row.config, row.store_type().default_port())?;
    if let Some(sealed) = &row.password_enc {
        conn.password = Some(state.secrets().open(sealed)?);
    }
    Ok(conn)
}

/// Names a base in a store that other deployments (or test databases) may share: its id plus
/// its creation time in microseconds, as ids alone repeat across databases.
pub fn base_key(kb: &KbRow) -> String {
    format!("{}_{}", kb.id, kb.create_dt.timestamp_micros())
}

fn base_url(conn: &stores::Connection) -> String {
    let scheme = if conn.use_tls { "https" } else { "http" };
    format!("{scheme}://{}:{}", conn.host, conn.port)
}
