//! Memory recall latency with 10,000 memories of one user (384 dimensions), beside 10,000 of
//! another user of the same agent: the service's recall (rank, load, access update) with a
//! precomputed query vector, so the embedding call is excluded. Vector-only and hybrid
//! (vector + full text, RRF) strategies, measured in the same run.
//!
//! Run: `cargo bench -p api-tests --profile bench-local --bench memory_recall` with the test
//! stack's DATABASE_URL (or `make bench`).

use std::time::Instant;

use api_tests::model_server::{wide_embedding, ModelServer};
use api_tests::percentile::percentile;
use api_tests::{spawn, Store};
use serde_json::json;
use shared::domain::Owner;
use shared::memory::recall;
use shared::memory::repo::Scope;

const MEMORIES: i64 = 10_000;
const QUERIES: usize = 300;
const WARMUP: usize = 20;
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
const TYPES: &[&str] = &["FACT", "DECISION", "PREFERENCE", "TASK_PROGRESS", "REFERENCE"];

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
    let user: i64 = sqlx::query_scalar("SELECT id FROM users LIMIT 1")
        .fetch_one(&app.db)
        .await
        .unwrap();
    let (other, _) = app.regular_user("other").await;
    let mut configs = Vec::new();
    for (name, hybrid) in [("vector", false), ("hybrid", true)] {
        let body = json!({ "name": name, "embeddingModelId": model, "dimensionOfVectorModel": 384,
            "maxRecall": 5, "searchEngineEnable": hybrid });
        let id = app.post("/memory/config", t, &body).await.assert_ok().as_i64().unwrap();
        configs.push((name, id));
    }
    let agent: i64 = sqlx::query_scalar(
        "INSERT INTO agents (name, creator_id, memory_enabled) VALUES ('bench', $1, TRUE) RETURNING id",
    )
    .bind(user)
    .fetch_one(&app.db)
    .await
    .unwrap();

    let started = Instant::now();
    for owner in [user, other] {
        for batch in 0..(MEMORIES / 2_000) {
            let range = batch * 2_000..(batch + 1) * 2_000;
            let contents: Vec<String> = range
                .clone()
                .map(|i| {
                    format!(
                        "{} {} {} note {i} of user {owner}",
                        WORDS[(i % 20) as usize],
                        WORDS[(i * 7 % 20) as usize],
                        WORDS[(i * 13 % 20) as usize]
                    )
                })
                .collect();
            let vectors: Vec<String> = contents
                .iter()
                .map(|c| shared::db::vector_literal(&wide_embedding(c)))
                .collect();
            let types: Vec<&str> = range.clone().map(|i| TYPES[(i % 5) as usize]).collect();
            let words: Vec<String> = contents.iter().map(|c| shared::rag::segment::tsvector(c)).collect();
            sqlx::query(
                "INSERT INTO memories (agent_id, user_id, memory_type, title, content, normalized_key, tsv, embedding,
                 embedding_model_id, conversation_key)
                 SELECT $1, $2, u.t, left(u.c, 30), u.c, u.t || ':' || u.c, u.w::tsvector, u.e::vector, $3, 'bench'
                 FROM unnest($4::text[], $5::text[], $6::text[], $7::text[]) AS u(c, e, t, w)",
            )
            .bind(agent)
            .bind(owner)
            .bind(model)
            .bind(&contents)
            .bind(&vectors)
            .bind(&types)
            .bind(&words)
            .execute(&app.db)
            .await
            .unwrap();
        }
    }
    // As the extraction path does when it writes a model's first memory.
    shared::memory::repo::ensure_vector_index(&app.db, model, 384)
        .await
        .unwrap();
    sqlx::query("ANALYZE memories").execute(&app.db).await.unwrap();
    println!(
        "loaded {} memories ({MEMORIES} for the measured user) in {:.1} s",
        2 * MEMORIES,
        started.elapsed().as_secs_f64()
    );

    let owner = Owner::User(user);
    let scope = Scope::recall(agent, owner, None);
    let billing = recall::billing(owner, false);
    let queries: Vec<(String, Vec<f32>)> = (0..QUERIES + WARMUP)
        .map(|i| {
            let q = format!("{} {}", WORDS[i % 20], WORDS[(i * 3 + 1) % 20]);
            let v = wide_embedding(&q);
            (q, v)
        })
        .collect();
    println!("| strategy | queries | p50 ms | p95 ms | p99 ms | mean ms |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (name, config) in configs {
        let strategy = recall::strategy(&app.state, Some(config)).await.unwrap();
        let mut times = Vec::new();
        let mut stage = Vec::new();
        for (i, (q, v)) in queries.iter().enumerate() {
            // The vector search stage alone (index scan, in its transaction).
            let begin = Instant::now();
            let hits = shared::memory::repo::vector_hits(&app.db, &scope, model, v, 20)
                .await
                .unwrap();
            if i >= WARMUP && name == "vector" {
                stage.push(begin.elapsed().as_secs_f64() * 1000.0);
            }
            assert_eq!(hits.len(), 20);
            let begin = Instant::now();
            let got = recall::recall_with_vector(&app.state, &scope, &strategy, v, q, billing, true)
                .await
                .unwrap();
            let ms = begin.elapsed().as_secs_f64() * 1000.0;
            assert_eq!(got.len(), 5);
            if i >= WARMUP {
                times.push(ms);
            }
        }
        let mean = times.iter().sum::<f64>() / times.len() as f64;
        println!(
            "| {name} | {} | {:.2} | {:.2} | {:.2} | {:.2} |",
            times.len(),
            percentile(&mut times, 0.5),
            percentile(&mut times, 0.95),
            percentile(&mut times, 0.99),
            mean
        );
        if !stage.is_empty() {
            let mean = stage.iter().sum::<f64>() / stage.len() as f64;
            println!(
                "| vector search stage only | {} | {:.2} | {:.2} | {:.2} | {:.2} |",
                stage.len(),
                percentile(&mut stage, 0.5),
                percentile(&mut stage, 0.95),
                percentile(&mut stage, 0.99),
                mean
            );
        }
    }
}
