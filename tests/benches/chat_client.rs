//! Overhead of the chat client over the raw upstream, against the scripted server with zero
//! delay: time to first token and time per token, p50 and p99.
//!
//! Raw = `reqwest` POST and reading body chunks; client = `ModelClient::chat_stream` (SSE
//! decoding, JSON parsing, typed events). Both run the same request, interleaved, on one
//! connection pool each, after a warm-up.
//!
//! Run: `cargo bench -p api-tests --bench chat_client`.

use std::time::{Duration, Instant};

use api_tests::model_server::{ModelServer, GOOD_KEY};
use api_tests::percentile::percentile;
use futures::StreamExt;
use serde_json::json;
use shared::models::client::{ChatEvent, ChatMessage, ChatRequest, Endpoint, ModelClient};

const TOKENS: usize = 200;
const WARMUP: usize = 50;
const ROUNDS: usize = 500;

struct Sample {
    first: Duration,
    per_token: Duration,
}

async fn raw(http: &reqwest::Client, url: &str, body: &serde_json::Value) -> Sample {
    let start = Instant::now();
    let resp = http
        .post(url)
        .bearer_auth(GOOD_KEY)
        .json(body)
        .send()
        .await
        .expect("raw request");
    let mut stream = resp.bytes_stream();
    let mut first = None;
    let mut bytes = 0usize;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.expect("raw chunk");
        bytes += chunk.len();
        // The first chunk that carries answer text, as a raw consumer would look for it.
        if first.is_none() && chunk.windows(10).any(|w| w == b"\"content\":") && chunk.windows(4).any(|w| w == b"tok ")
        {
            first = Some(start.elapsed());
        }
    }
    assert!(bytes > 0);
    let total = start.elapsed();
    let first = first.unwrap_or(total);
    Sample {
        first,
        per_token: (total - first) / TOKENS as u32,
    }
}

async fn client(client: &ModelClient, ep: &Endpoint, req: &ChatRequest) -> Sample {
    let start = Instant::now();
    let mut stream = client.chat_stream(ep, req).await.expect("client stream");
    let mut first = None;
    let mut texts = 0usize;
    while let Some(ev) = stream.next().await {
        if let ChatEvent::Text(_) = ev.expect("client event") {
            texts += 1;
            first.get_or_insert_with(|| start.elapsed());
        }
    }
    assert_eq!(texts, TOKENS);
    let total = start.elapsed();
    let first = first.unwrap_or(total);
    Sample {
        first,
        per_token: (total - first) / TOKENS as u32,
    }
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    shared::telemetry::install_crypto_provider();
    let server = ModelServer::start().await;
    let model = format!("chat-bench-{TOKENS}");
    let url = format!("{}/chat/completions", server.base_url);
    let body = json!({ "model": model, "stream": true, "stream_options": { "include_usage": true },
        "messages": [{ "role": "user", "content": "benchmark" }] });
    let ep = Endpoint {
        base_url: server.base_url.clone(),
        api_key: GOOD_KEY.into(),
        model,
        options: json!({}),
        reach: shared::outbound::Reach::Operator,
    };
    let req = ChatRequest {
        messages: vec![ChatMessage::user("benchmark")],
        ..Default::default()
    };
    let http = reqwest::Client::new();
    let models = ModelClient::new();

    for _ in 0..WARMUP {
        raw(&http, &url, &body).await;
        client(&models, &ep, &req).await;
    }
    let (mut raw_first, mut raw_tok, mut cli_first, mut cli_tok) = (vec![], vec![], vec![], vec![]);
    let (mut first_overhead, mut token_overhead) = (vec![], vec![]);
    for _ in 0..ROUNDS {
        let r = raw(&http, &url, &body).await;
        let c = client(&models, &ep, &req).await;
        first_overhead.push(c.first.saturating_sub(r.first));
        token_overhead.push(c.per_token.saturating_sub(r.per_token));
        raw_first.push(r.first);
        raw_tok.push(r.per_token);
        cli_first.push(c.first);
        cli_tok.push(c.per_token);
    }
    println!("chat client vs raw upstream: {ROUNDS} streams of {TOKENS} tokens, zero upstream delay");
    println!("| measure | raw p50 | client p50 | raw p99 | client p99 | added p50 | added p99 |");
    println!("|---|---|---|---|---|---|---|");
    for (name, raw, cli, added) in [
        (
            "time to first token (us)",
            &mut raw_first,
            &mut cli_first,
            &mut first_overhead,
        ),
        ("time per token (us)", &mut raw_tok, &mut cli_tok, &mut token_overhead),
    ] {
        println!(
            "| {name} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |",
            micros(percentile(raw, 0.5)),
            micros(percentile(cli, 0.5)),
            micros(percentile(raw, 0.99)),
            micros(percentile(cli, 0.99)),
            micros(percentile(added, 0.5)),
            micros(percentile(added, 0.99)),
        );
    }
}
