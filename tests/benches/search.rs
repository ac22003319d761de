//! Search latency on 100,000 chunks (384 dimensions) in one knowledge base: the service's
//! retrieval (embedding call excluded, as reported by its own debug metrics) against the same
//! two retrievals run as bare SQL, in the same run.
//!
//! Run: `make bench` (or `cargo bench -p api-tests --profile bench-local --bench search` with
//! the test stack's DATABASE_URL).

use std::time::{Duration, Instant};

use api_tests::model_server::{wide_embedding, ModelServer};
use api_tests::{spawn, Store};
use serde_json::json;

const CHUNKS: i64 = 100_000;
const QUERIES: usize = 300;
const WORDS: &[&str] = &[
    "invoice",
    "router",
    "battery",
    "meeting",
    "policy",
    "tyre",
    "solar",
    "bread",
    "leave",
    "backup",
    "printer",
    "passport",
    "coffee",
    "tea",
    "running",
    "plant",
    "wifi",
    "tax",
    "earthquake",
    "puppy",
];

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn literal(v: &[f32]) -> String {
    shared::rag::pipeline::vector_literal(v)
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

    // 100k chunks written straight into the table (the pipeline is benchmarked elsewhere):
    // random unit vectors and a few words each for the text index.
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
    for batch in 0..(CHUNKS / 10_000) {
        let start = batch * 10_000;
        let contents: Vec<String> = (start..start + 10_000)
            .map(|i| {
                format!(
                    "{} {} {} item {i}",
                    WORDS[(i % 20) as usize],
                    WORDS[(i * 7 % 20) as usize],
                    WORDS[(i * 13 % 20) as usize]
                )
            })
            .collect();
        let vectors: Vec<String> = contents.iter().map(|c| literal(&wide_embedding(c))).collect();
        sqlx::query(
            "INSERT INTO chunks (rag_id, document_id, chunk_index, content, token_count, embedding, tsv, vector_status)
             SELECT $1, $2, u.i, u.c, 8, u.e::vector, to_tsvector('simple', u.c), 'success'
             FROM unnest($3::int[], $4::text[], $5::text[]) AS u(i, c, e)",
        )
        .bind(kb)
        .bind(doc_id)
        .bind((start as i32..(start + 10_000) as i32).collect::<Vec<i32>>())
        .bind(&contents)
        .bind(&vectors)
        .execute(&app.db)
        .await
        .unwrap();
    }
    sqlx::query("ANALYZE chunks").execute(&app.db).await.unwrap();
    println!(
        "loaded {CHUNKS} chunks with the HNSW index in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let queries: Vec<String> = (0..QUERIES)
        .map(|i| format!("{} {}", WORDS[i % 20], WORDS[(i * 3 + 1) % 20]))
        .collect();
    let mut service = Vec::new();
    let mut bare = Vec::new();
    let dim_expr = "(embedding::vector(384))";
    for (i, q) in queries.iter().enumerate() {
        let r = app
            .post("/rag/search", t, &json!({ "ragId": kb, "query": q, "debug": true }))
            .await;
        let m = r.assert_ok()["metrics"].clone();
        if i >= 20 {
            service.push(m["totalMs"].as_f64().unwrap() - m["embeddingMs"].as_f64().unwrap());
        }
        let vector = literal(&wide_embedding(q));
        let tsq = shared::rag::segment::or_query(q).unwrap();
        let vector_sql = format!(
            "SELECT id, (1 - ({dim_expr} <=> $1::vector(384)))::float8 FROM chunks WHERE rag_id = {kb} AND embedding IS NOT NULL
             ORDER BY {dim_expr} <=> $1::vector(384) LIMIT 20"
        );
        let begin = Instant::now();
        let (a, b) = tokio::join!(
            sqlx::query_as::<_, (i64, f64)>(&vector_sql)
                .bind(&vector)
                .fetch_all(&app.db),
            sqlx::query_as::<_, (i64, f64)>(
                "SELECT c.id, ts_rank_cd(c.tsv, q)::float8 FROM chunks c, to_tsquery('simple', $2) q
                 WHERE c.rag_id = $1 AND c.tsv @@ q ORDER BY 2 DESC, c.id LIMIT $3",
            )
            .bind(kb)
            .bind(&tsq)
            .bind(20i64)
            .fetch_all(&app.db)
        );
        let elapsed = begin.elapsed();
        assert!(!a.unwrap().is_empty() && !b.unwrap().is_empty());
        if i >= 20 {
            bare.push(elapsed.as_secs_f64() * 1000.0);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let (s50, s99, b50, b99) = (
        pct(&mut service, 0.5),
        pct(&mut service, 0.99),
        pct(&mut bare, 0.5),
        pct(&mut bare, 0.99),
    );
    println!(
        "{} searches after 20 warm-up, {CHUNKS} chunks x 384 dims, resultCount 5, RRF",
        QUERIES - 20
    );
    println!("| measure | p50 ms | p99 ms |");
    println!("|---|---|---|");
    println!("| service search (embedding excluded) | {s50:.2} | {s99:.2} |");
    println!("| bare SQL: vector + full text in parallel | {b50:.2} | {b99:.2} |");
    println!("| ratio service / bare at p50 | {:.2} | |", s50 / b50);
}
