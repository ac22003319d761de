//! Writing a document's chunks (one statement per batch) and their index entries.

use sqlx::PgConnection;

use crate::rag::backends::{Entry, Indexes};
use crate::rag::chunk::Chunk;

const ROWS_PER_STATEMENT: usize = 1000;

/// Replaces the document's chunks with `chunks` and their `vectors` (same order), in the rows
/// and in the base's indexes; returns the replaced chunks' ids. Their rows are deleted, but
/// their index entries are for the caller to remove last before its commit
/// (`Indexes::remove`): an engine of its own (Milvus, OpenSearch) does not take a removal back
/// when the transaction rolls back. Run inside the caller's transaction so readers see either
/// the old set or the new one. The ids of the new chunks whose entries were written are added
/// to `written` as they are, for the caller to take out of the engines again (`Indexes::undo`)
/// when its transaction does not commit, whichever statement failed.
pub async fn write_chunks(
    conn: &mut PgConnection,
    indexes: &Indexes,
    rag_id: i64,
    document_id: i64,
    chunks: &[Chunk],
    vectors: &[Vec<f32>],
    written: &mut Vec<i64>,
) -> anyhow::Result<Vec<i64>> {
    let replaced: Vec<i64> = sqlx::query_scalar("DELETE FROM chunks WHERE document_id = $1 RETURNING id")
        .bind(document_id)
        .fetch_all(&mut *conn)
        .await?;
    for (start, batch) in chunks
        .chunks(ROWS_PER_STATEMENT)
        .enumerate()
        .map(|(i, b)| (i * ROWS_PER_STATEMENT, b))
    {
        let paragraph: Vec<i32> = batch.iter().map(|c| c.paragraph_index as i32).collect();
        let index: Vec<i32> = (start..start + batch.len()).map(|i| i as i32).collect();
        let content: Vec<&str> = batch.iter().map(|c| c.content.as_str()).collect();
        let tokens: Vec<i32> = batch.iter().map(|c| c.token_count as i32).collect();
        let titles: Vec<Option<&str>> = batch.iter().map(|c| c.title.as_deref()).collect();
        let pages: Vec<Option<i32>> = batch.iter().map(|c| c.page.map(|p| p as i32)).collect();
        let batch_ids: Vec<i64> = sqlx::query_scalar(
            "INSERT INTO chunks (rag_id, document_id, paragraph_index, chunk_index, content, token_count, title, page,
             vector_status)
             SELECT $1, $2, u.p, u.i, u.c, u.t, u.ti, u.pg, 'success'
             FROM unnest($3::int[], $4::int[], $5::text[], $6::int[], $7::text[], $8::int[])
                  AS u(p, i, c, t, ti, pg)
             RETURNING id",
        )
        .bind(rag_id)
        .bind(document_id)
        .bind(&paragraph)
        .bind(&index)
        .bind(&content)
        .bind(&tokens)
        .bind(&titles)
        .bind(&pages)
        .fetch_all(&mut *conn)
        .await?;
        let entries: Vec<Entry<'_>> = batch_ids
            .iter()
            .zip(batch)
            .zip(&vectors[start..start + batch.len()])
            .map(|((&chunk_id, c), v)| Entry {
                chunk_id,
                document_id,
                content: &c.content,
                vector: v,
            })
            .collect();
        indexes.put(conn, &entries).await?;
        written.extend(batch_ids);
    }
    Ok(replaced)
}
