//! Search latency on 100,000 chunks (384 dimensions) in one knowledge base: the service's
//! search over HTTP (embedding call excluded) against the same two retrievals run as bare SQL
//! (the service's own statements, straight on a pool), in the same run.
//!
//! The chunk texts follow real word statistics (`api_tests::corpus`: Zipf over 5,000 words,
//! 100-300 words a chunk), so full text matches a realistic share of the chunks: a query with
//! a stop word matches nearly all of them, one with only rare words a few hundred.
//!
//! Run: `make bench` (or `cargo bench -p api-tests --profile bench-local --bench search` with
//! the test stack's DATABASE_URL).

use std::time::{Duration, Instant};

use api_tests::corpus::Corpus;
use api_tests::model_server::{wide_embedding, ModelServer};
use api_tests::percentile::percentile;
use api_tests::{spawn, Store};
use serde_json::json;
use shared::rag::backends::postgres::{text_hits, vector_hits};

const CHUNKS: i64 = 100_000;
const BATCH: i64 = 5_000;
const QUERIES: usize = 300;
const WARMUP: usize = 20;
const SEED: u64 = 20_261_122;
/// The service's candidate count for `resultCount` 5 (4 x resultCount).
const CANDIDATES: usize = 20;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[derive(Default)]
struct Series(Vec<f64>);

impl Series {
    fn row(&mut self, name: &str) -> f64 {
        let p50 = percentile(&mut self.0, 0.5);
        let p99 = percentile(&mut self.0, 0.99);
        println!("| {name} | {p50:.2} | {p99:.2} |");
        p50
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let models = ModelServer::start().await;
    let app = spawn(Store::Filesystem).await;
    let admin = app.admin_token().await;
    let t = Some(admin.as_str());
    let provider = app.provider(&admin, "bench").await;
    let model = app
        .model(&admin, provider, "EMBEDDING", "emb-384", &models.base_url, json!({}))
        .await;
    let kb = app
        .post("/rag", t, &json!({ "name": "100k", "embeddingModelId": model }))
        .await
        .assert_ok()["id"]
        .as_i64()
        .unwrap();
    app.put(
        &format!("/rag/{kb}/config"),
        t,
        &json!({ "searchParams": { "resultCount": 5 } }),
    )
    .await
    .assert_ok();

    // 100k chunks written straight into the table (the pipeline is benchmarked elsewhere),
    // with the text index the pipeline writes and random unit vectors. The base's HNSW index
    // is built once after the load, with the service's own DDL: maintaining it row by row
    // took 430 s and measures nothing here.
    let started = Instant::now();
    let user: i64 = sqlx::query_scalar("SELECT id FROM users LIMIT 1")
        .fetch_one(&app.db)
        .await
        .unwrap();
    let doc_id: i64 = sqlx::query_scalar(
        "INSERT INTO documents (rag_id, name, file_type, source_path, storage_key, mime_type, file_size, content_hash, status, creator_id)
         VALUES ($1, 'bulk.txt', 'txt', 'bulk.txt', 'none', 'text/plain', 0, 'sha256:0', 'success', $2) RETURNING id",
    )
    .bind(kb)
    .bind(user)
    .fetch_one(&app.db)
    .await
    .unwrap();
    let mut conn = app.db.acquire().await.unwrap();
    shared::rag::bases::repo::drop_index(&mut conn, kb).await.unwrap();
    let mut corpus = Corpus::new(SEED);
    for batch in 0..(CHUNKS / BATCH) {
        let start = batch * BATCH;
        let contents: Vec<String> = (start..start + BATCH)
            .map(|_| {
                let len = corpus.rng().between(100..=300);
                corpus.text(len)
            })
            .collect();
        let words: Vec<String> = contents.iter().map(|c| shared::rag::segment::tsvector(c)).collect();
        let vectors: Vec<String> = contents
            .iter()
            .map(|c| shared::db::vector_literal(&wide_embedding(c)))
            .collect();
        sqlx::query(
            "INSERT INTO chunks (rag_id, document_id, chunk_index, content, token_count, embedding, tsv, vector_status)
             SELECT $1, $2, u.i, u.c, 300, u.e::vector, u.w::tsvector, 'success'
             FROM unnest($3::int[], $4::text[], $5::text[], $6::text[]) AS u(i, c, w, e)",
        )
        .bind(kb)
        .bind(doc_id)
        .bind((start as i32..(start + BATCH) as i32).collect::<Vec<i32>>())
        .bind(&contents)
        .bind(&words)
        .bind(&vectors)
        .execute(&mut *conn)
        .await
        .unwrap();
    }
    sqlx::query("UPDATE documents SET chunk_count = $2 WHERE id = $1")
        .bind(doc_id)
        .bind(CHUNKS as i32)
        .execute(&mut *conn)
        .await
        .unwrap();
    sqlx::query("SET maintenance_work_mem = '1GB'")
        .execute(&mut *conn)
        .await
        .unwrap();
    shared::rag::bases::repo::build_index(&mut conn, kb).await.unwrap();
    sqlx::query("VACUUM ANALYZE chunks").execute(&mut *conn).await.unwrap();
    drop(conn);
    println!(
        "loaded {CHUNKS} chunks and built the HNSW index in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let queries: Vec<String> = (0..QUERIES)
        .map(|_| {
            let len = corpus.rng().between(2..=6);
            corpus.query(len)
        })
        .collect();
    let mut matched = Vec::new();
    for q in &queries {
        let tsq = shared::rag::segment::or_query(&shared::rag::segment::distinct(q)).unwrap();
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM chunks WHERE rag_id = $1 AND tsv @@ $2::tsquery")
            .bind(kb)
            .bind(tsq)
            .fetch_one(&app.db)
            .await
            .unwrap();
        matched.push(n as f64 / CHUNKS as f64 * 100.0);
    }

    let (mut http, mut internal) = (Series::default(), Series::default());
    let (mut vector, mut text, mut both) = (Series::default(), Series::default(), Series::default());
    // Queries of the base's stop words only: full text finds nothing for them (by design).
    let mut stop_only = 0;
    for (i, q) in queries.iter().enumerate() {
        let embedding = wide_embedding(q);
        // Alternate which side runs first, so neither always finds the other's pages cached.
        for side in [i % 2, 1 - i % 2] {
            if side == 0 {
                let begin = Instant::now();
                let r = app
                    .post("/rag/search", t, &json!({ "ragId": kb, "query": q, "debug": true }))
                    .await;
                let elapsed = ms(begin.elapsed());
                let m = r.assert_ok()["metrics"].clone();
                let embedding_ms = m["embeddingMs"].as_f64().unwrap();
                assert_eq!(m["finalCount"], 5, "{m}");
                if i >= WARMUP {
                    http.0.push(elapsed - embedding_ms);
                    internal.0.push(m["totalMs"].as_f64().unwrap() - embedding_ms);
                }
                continue;
            }
            // Both at once first: it is what the service is compared with, so it must meet the
            // query's pages as cold as the service does when it goes first. The two alone run
            // after it, warm.
            let begin = Instant::now();
            let (a, b) = tokio::join!(
                vector_hits(&app.db, kb, 384, &embedding, CANDIDATES),
                text_hits(&app.db, kb, q, CANDIDATES)
            );
            let both_ms = ms(begin.elapsed());
            let begin = Instant::now();
            let v = vector_hits(&app.db, kb, 384, &embedding, CANDIDATES).await.unwrap();
            let v_ms = ms(begin.elapsed());
            let begin = Instant::now();
            let f = text_hits(&app.db, kb, q, CANDIDATES).await.unwrap();
            let f_ms = ms(begin.elapsed());
            assert_eq!(v.len(), CANDIDATES);
            stop_only += usize::from(f.is_empty() && i >= WARMUP);
            assert_eq!((a.unwrap().len(), b.unwrap().len()), (v.len(), f.len()));
            if i >= WARMUP {
                vector.0.push(v_ms);
                text.0.push(f_ms);
                both.0.push(both_ms);
            }
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }

    let mut shares = matched.clone();
    println!(
        "{} searches after {WARMUP} warm-up, {CHUNKS} chunks x 384 dims, resultCount 5 ({CANDIDATES} candidates a side), the default fusion",
        QUERIES - WARMUP
    );
    println!(
        "chunks matching a query's full text: median {:.1}%, p10 {:.2}%, p90 {:.1}%, min {:.2}%",
        percentile(&mut shares, 0.5),
        percentile(&mut shares, 0.1),
        percentile(&mut shares, 0.9),
        percentile(&mut shares, 0.0)
    );
    println!("queries of stop words only (full text finds nothing): {stop_only}");
    println!("| measure | p50 ms | p99 ms |");
    println!("|---|---|---|");
    let s50 = http.row("service: POST /rag/search over HTTP, minus embeddingMs");
    internal.row("service: its own totalMs - embeddingMs");
    vector.row("bare SQL: vector");
    text.row("bare SQL: full text");
    let b50 = both.row("bare SQL: vector + full text in parallel");
    println!("| ratio service (HTTP) / bare both at p50 | {:.2} | |", s50 / b50);
}
