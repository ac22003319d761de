//! Writing a document's chunks, vectors and text index in one statement per batch.

use sqlx::PgConnection;

use crate::rag::chunk::Chunk;

const ROWS_PER_STATEMENT: usize = 1000;

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

/// Replaces the document's chunks with `chunks` and their `vectors` (same order). Run inside
/// the caller's transaction so readers see either the old set or the new one.
pub async fn write_chunks(
    conn: &mut PgConnection,
    rag_id: i64,
    document_id: i64,
    chunks: &[Chunk],
    vectors: &[Vec<f32>],
) -> sqlx::Result<Vec<i64>> {
    sqlx::query("DELETE FROM chunks WHERE document_id = $1")
        .bind(document_id)
        .execute(&mut *conn)
        .await?;
    let mut ids = Vec::with_capacity(chunks.len());
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
        let embeddings: Vec<String> = vectors[start..start + batch.len()]
            .iter()
            .map(|v| vector_literal(v))
            .collect();
        let segmented: Vec<String> = batch
            .iter()
            .map(|c| crate::rag::segment::for_index(&c.content))
            .collect();
        let mut batch_ids: Vec<i64> = sqlx::query_scalar(
            "INSERT INTO chunks (rag_id, document_id, paragraph_index, chunk_index, content, token_count, title, page,
             embedding, tsv, vector_status)
             SELECT $1, $2, u.p, u.i, u.c, u.t, u.ti, u.pg, u.e::vector, to_tsvector('simple', u.s), 'success'
             FROM unnest($3::int[], $4::int[], $5::text[], $6::int[], $7::text[], $8::int[], $9::text[], $10::text[])
                  AS u(p, i, c, t, ti, pg, e, s)
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
        .bind(&embeddings)
        .bind(&segmented)
        .fetch_all(&mut *conn)
        .await?;
        ids.append(&mut batch_ids);
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal() {
        assert_eq!(vector_literal(&[0.5, -1.0, 2.25]), "[0.5,-1,2.25]");
    }
}
