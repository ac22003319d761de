//! Chunks by hand: list, add, edit (re-embedded) and delete.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::PgConnection;
use utoipa::{IntoParams, ToSchema};

use crate::domain::{CurrentUser, Page, PageQuery};
use crate::models::client::InputKind;
use crate::models::gateway::{self, Billing};
use crate::models::ModelType;
use crate::rag::backends::{store_error, Entry, Indexes};
use crate::rag::bases::{self, KbRow};
use crate::{validate, AppError, AppResult, AppState};

#[derive(Debug, sqlx::FromRow)]
struct ChunkRow {
    id: i64,
    rag_id: i64,
    document_id: i64,
    document_name: String,
    paragraph_index: i32,
    chunk_index: i32,
    token_count: i32,
    content: String,
    vector_status: String,
    chunk_type: String,
    created_dt: DateTime<Utc>,
    update_dt: DateTime<Utc>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChunkView {
    pub id: i64,
    pub rag_id: i64,
    pub document_id: i64,
    pub document_name: String,
    pub paragraph_index: i32,
    pub chunk_index: i32,
    pub token_count: i32,
    pub content: String,
    /// Where the vector lives in the store: the chunk id (row for pgvector, primary key in
    /// Milvus, document id in OpenSearch).
    pub vector_id: String,
    pub vector_status: String,
    #[serde(rename = "type")]
    pub chunk_type: String,
    pub created_dt: String,
    pub update_dt: String,
}

impl From<ChunkRow> for ChunkView {
    fn from(c: ChunkRow) -> Self {
        Self {
            vector_id: c.id.to_string(),
            id: c.id,
            rag_id: c.rag_id,
            document_id: c.document_id,
            document_name: c.document_name,
            paragraph_index: c.paragraph_index,
            chunk_index: c.chunk_index,
            token_count: c.token_count,
            content: c.content,
            vector_status: c.vector_status,
            chunk_type: c.chunk_type,
            created_dt: crate::time::datetime(c.created_dt),
            update_dt: crate::time::datetime(c.update_dt),
        }
    }
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct ChunkFilter {
    pub rag_id: Option<i64>,
    pub document_id: Option<i64>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct NewChunkRequest {
    #[schema(required = true)]
    pub rag_id: Option<i64>,
    #[schema(required = true)]
    pub document_id: Option<i64>,
    #[schema(required = true)]
    pub content: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct EditChunkRequest {
    #[schema(required = true)]
    pub content: Option<String>,
}

const SELECT: &str = "SELECT c.id, c.rag_id, c.document_id, d.name AS document_name, c.paragraph_index, c.chunk_index,
    c.token_count, c.content, c.vector_status, c.chunk_type, c.created_dt, c.update_dt
    FROM chunks c JOIN documents d ON d.id = c.document_id JOIN knowledge_bases k ON k.id = c.rag_id";

/// Which of `ids` are chunks still.
pub async fn existing(db: &sqlx::PgPool, ids: &[i64]) -> sqlx::Result<std::collections::HashSet<i64>> {
    let found: Vec<i64> = sqlx::query_scalar("SELECT id FROM chunks WHERE id = ANY($1)")
        .bind(ids)
        .fetch_all(db)
        .await?;
    Ok(found.into_iter().collect())
}

pub async fn page(
    state: &AppState,
    user: &CurrentUser,
    f: ChunkFilter,
    paging: PageQuery,
) -> AppResult<Page<ChunkView>> {
    // Another user's base or document is 404 here as everywhere, not an empty page.
    if let Some(id) = f.rag_id {
        bases::service::owned(state, user, id).await?;
    }
    if let Some(id) = f.document_id {
        crate::rag::documents::service::owned(state, user, id).await?;
    }
    let owner = (!user.is_admin()).then_some(user.id);
    const WHERE: &str = " WHERE ($1::bigint IS NULL OR k.creator_id = $1) AND ($2::bigint IS NULL OR c.rag_id = $2)
        AND ($3::bigint IS NULL OR c.document_id = $3)";
    let total: i64 = sqlx::query_scalar(&format!(
        "SELECT count(*) FROM chunks c JOIN knowledge_bases k ON k.id = c.rag_id{WHERE}"
    ))
    .bind(owner)
    .bind(f.rag_id)
    .bind(f.document_id)
    .fetch_one(state.db())
    .await?;
    let rows: Vec<ChunkRow> = sqlx::query_as(&format!(
        "{SELECT}{WHERE} ORDER BY c.document_id, c.chunk_index, c.id LIMIT $4 OFFSET $5"
    ))
    .bind(owner)
    .bind(f.rag_id)
    .bind(f.document_id)
    .bind(paging.size())
    .bind(paging.offset())
    .fetch_all(state.db())
    .await?;
    Ok(Page::new(
        rows.into_iter().map(ChunkView::from).collect(),
        paging,
        total,
    ))
}

/// One embedding of `content` with the base's model, and its token count. Content longer than
/// `max_tokens` is refused before the paid call: the base's chunker never makes such a chunk,
/// and an embedding model cut it short, or failed with an error that did not name the field.
async fn embed_one(
    state: &AppState,
    user: &CurrentUser,
    kb: &KbRow,
    content: &str,
    max_tokens: i64,
) -> AppResult<(Vec<f32>, i32)> {
    let tokens = crate::rag::chunk::count_tokens(content);
    if tokens as i64 > max_tokens {
        return Err(AppError::validation(format!(
            "content is {tokens} tokens; this knowledge base's chunks hold at most {max_tokens} (maxChunkTokens)"
        )));
    }
    // Under API Gateway's 29 s: past it the client gets a 504 while the chunk may still be
    // written, and a retry writes it twice.
    let model = gateway::load(state, kb.embedding_model_id, ModelType::Embedding)
        .await?
        .within(state.config().buffered_model_timeout);
    let out = gateway::embed(
        state,
        &model,
        Billing::of(user),
        &[content.to_owned()],
        InputKind::Document,
        Some(kb.dimension as usize),
    )
    .await?;
    let vector = out
        .vectors
        .into_iter()
        .next()
        .ok_or_else(|| AppError::business("the embedding model returned no vector"))?;
    Ok((vector, tokens as i32))
}

fn content(value: Option<String>) -> AppResult<String> {
    let content = validate::required("content", value)?;
    validate::length("content", &content, 1, 100_000)?;
    Ok(content)
}

pub async fn create(state: &AppState, user: &CurrentUser, req: NewChunkRequest) -> AppResult<ChunkView> {
    let rag_id = validate::present("ragId", req.rag_id)?;
    let document_id = validate::present("documentId", req.document_id)?;
    let content = content(req.content)?;
    let kb = bases::service::owned(state, user, rag_id).await?;
    let doc = crate::rag::documents::service::owned(state, user, document_id).await?;
    if doc.rag_id != rag_id {
        return Err(AppError::validation(format!(
            "documentId: document {document_id} is not in knowledge base {rag_id}"
        )));
    }
    finished(document_id, &doc.status)?;
    let max_tokens = kb.chunk_params.0.max_chunk_tokens;
    let (vector, tokens) = embed_one(state, user, &kb, &content, max_tokens).await?;
    let indexes = Indexes::of(state, &kb).await?;
    let mut tx = state.db().begin().await?;
    hold_document(
        &mut tx,
        "SELECT id, status FROM documents WHERE id = $1 FOR NO KEY UPDATE",
        document_id,
        "document",
    )
    .await?;
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO chunks (rag_id, document_id, paragraph_index, chunk_index, content, token_count, vector_status)
         SELECT $1, $2, 0, COALESCE(max(chunk_index) + 1, 0), $3, $4, 'success'
         FROM chunks WHERE document_id = $2 RETURNING id",
    )
    .bind(rag_id)
    .bind(document_id)
    .bind(&content)
    .bind(tokens)
    .fetch_one(&mut *tx)
    .await?;
    sqlx::query("UPDATE documents SET chunk_count = chunk_count + 1, updated_at = now() WHERE id = $1")
        .bind(document_id)
        .execute(&mut *tx)
        .await?;
    let entry = Entry {
        chunk_id: id,
        document_id,
        content: &content,
        vector: &vector,
    };
    indexes.put(&mut tx, &[entry]).await.map_err(store_error)?;
    if let Err(e) = tx.commit().await {
        indexes.undo(&mut *state.db().acquire().await?, &[id]).await;
        return Err(e.into());
    }
    get(state, id).await
}

/// The document of a chunk, by the chunk's id, held as an edit of the chunk's text holds it
/// (the document's row is not written); only the document, as its deletion takes it before
/// the chunks.
const OF_CHUNK: &str =
    "SELECT d.id, d.status FROM chunks c JOIN documents d ON d.id = c.document_id WHERE c.id = $1 FOR SHARE OF d";

/// The same, held as an addition or a removal holds it: they write the document's chunk count
/// next, and two holding it shared would each wait for the other to let go of it.
const OF_CHUNK_COUNTED: &str =
    "SELECT d.id, d.status FROM chunks c JOIN documents d ON d.id = c.document_id WHERE c.id = $1 FOR NO KEY UPDATE OF d";

/// Holds the document `select` finds by `id` for the rest of the transaction,
/// or answers that `what` does not exist. A document's deletion takes its row first and then
/// removes the store entries of the chunks it finds: a chunk written meanwhile would keep an
/// entry in Milvus or OpenSearch that no row names. Held, the edit lands before the deletion
/// (whose removal then includes it) or finds the document gone.
/// The document must have finished processing (`finished`), checked again under the hold.
async fn hold_document(tx: &mut PgConnection, select: &str, id: i64, what: &str) -> AppResult<i64> {
    let (document_id, status): (i64, String) = sqlx::query_as(select)
        .bind(id)
        .fetch_optional(tx)
        .await?
        .ok_or_else(|| AppError::not_found(what))?;
    finished(document_id, &status)?;
    Ok(document_id)
}

/// Chunks are edited by hand only once their document's run has ended: a run's final write
/// replaces all of the document's chunks, and one added or edited meanwhile was answered,
/// charged for its embedding, and then silently gone.
fn finished(document_id: i64, status: &str) -> AppResult<()> {
    match status {
        "success" | "failed" => Ok(()),
        _ => Err(AppError::Conflict(format!(
            "document {document_id} is being processed ({status}); edit its chunks once it has finished, \
             as processing replaces them"
        ))),
    }
}

async fn get(state: &AppState, id: i64) -> AppResult<ChunkView> {
    let row: ChunkRow = sqlx::query_as(&format!("{SELECT} WHERE c.id = $1"))
        .bind(id)
        .fetch_optional(state.db())
        .await?
        .ok_or_else(|| AppError::not_found("chunk"))?;
    Ok(row.into())
}

/// A chunk the caller may edit.
struct OwnedChunk {
    kb: KbRow,
    document_id: i64,
    document_status: String,
    token_count: i64,
}

/// The chunk's base, when the caller owns it, its document's id and status, and its size.
async fn owned_kb(state: &AppState, user: &CurrentUser, id: i64) -> AppResult<OwnedChunk> {
    let (rag_id, document_id, document_status, token_count): (i64, i64, String, i64) = sqlx::query_as(
        "SELECT c.rag_id, d.id, d.status, c.token_count::bigint FROM chunks c JOIN documents d ON d.id = c.document_id
         WHERE c.id = $1",
    )
    .bind(id)
    .fetch_optional(state.db())
    .await?
    .ok_or_else(|| AppError::not_found("chunk"))?;
    let kb = bases::service::owned(state, user, rag_id)
        .await
        .map_err(|_| AppError::not_found("chunk"))?;
    Ok(OwnedChunk {
        kb,
        document_id,
        document_status,
        token_count,
    })
}

pub async fn update(state: &AppState, user: &CurrentUser, id: i64, req: EditChunkRequest) -> AppResult<ChunkView> {
    let content = content(req.content)?;
    let OwnedChunk {
        kb,
        document_id,
        document_status,
        token_count,
    } = owned_kb(state, user, id).await?;
    // Checked before the paid embedding, and again under the document's hold.
    finished(document_id, &document_status)?;
    // A chunk made before its base's maxChunkTokens was lowered may stay as long as it was.
    let max_tokens = kb.chunk_params.0.max_chunk_tokens.max(token_count);
    let (vector, tokens) = embed_one(state, user, &kb, &content, max_tokens).await?;
    let indexes = Indexes::of(state, &kb).await?;
    let mut tx = state.db().begin().await?;
    let document_id = hold_document(&mut tx, OF_CHUNK, id, "chunk").await?;
    let updated = sqlx::query(
        "UPDATE chunks SET content = $2, token_count = $3, vector_status = 'success', update_dt = now() WHERE id = $1",
    )
    .bind(id)
    .bind(&content)
    .bind(tokens)
    .execute(&mut *tx)
    .await?;
    if updated.rows_affected() == 0 {
        return Err(AppError::not_found("chunk"));
    }
    let entry = Entry {
        chunk_id: id,
        document_id,
        content: &content,
        vector: &vector,
    };
    indexes.replace(&mut tx, &[entry]).await.map_err(store_error)?;
    tx.commit().await?;
    get(state, id).await
}

pub async fn delete(state: &AppState, user: &CurrentUser, id: i64) -> AppResult<()> {
    let kb = owned_kb(state, user, id).await?.kb;
    let indexes = Indexes::of(state, &kb).await?;
    let mut tx = state.db().begin().await?;
    hold_document(&mut tx, OF_CHUNK_COUNTED, id, "chunk").await?;
    let doc: i64 = sqlx::query_scalar("DELETE FROM chunks WHERE id = $1 RETURNING document_id")
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| AppError::not_found("chunk"))?;
    sqlx::query("UPDATE documents SET chunk_count = GREATEST(chunk_count - 1, 0), updated_at = now() WHERE id = $1")
        .bind(doc)
        .execute(&mut *tx)
        .await?;
    indexes.remove(&mut tx, &[id]).await.map_err(store_error)?;
    tx.commit().await?;
    Ok(())
}
