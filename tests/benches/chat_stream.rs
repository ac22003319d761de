//! Agent chat through the service against the raw scripted upstream and a LiteLLM proxy on the
//! same upstream, in one run:
//! - added time to first token: service (or LiteLLM) minus raw upstream, sequential, p50/p99;
//! - sustained streams: CONCURRENCY streams in flight for DURATION, completed streams per
//!   second and per CPU-second of the server process (`/proc/<pid>/stat`).
//!
//! The service is the `agent-platform` binary (SERVER_BIN, built with the bench-local profile)
//! on a fresh database of DATABASE_URL's server; LiteLLM runs from LITELLM_BIN (skipped when
//! unset). Every service chat does its real work: agent and model lookups, quota, history (20
//! messages), the stored user and assistant messages.
//!
//! Run with `make bench` (it builds the server, installs LiteLLM and sets the variables).

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use api_tests::model_server::{ModelServer, GOOD_KEY};
use api_tests::percentile::percentile;
use api_tests::{free_port, fresh_database};
use futures::StreamExt;
use serde_json::{json, Value};

const TOKENS: usize = 50;
const WARMUP: usize = 30;
const ROUNDS: usize = 300;
const CONCURRENCY: usize = 32;
const DURATION: Duration = Duration::from_secs(15);

fn env(key: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| panic!("{key} must be set (run `make bench`)"))
}

/// CPU seconds (user + system) a process has used.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("process stat");
    let after_name = &stat[stat.rfind(')').expect("stat format") + 2..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap_or(0.0) + fields[12].parse::<f64>().unwrap_or(0.0);
    ticks / 100.0
}

/// Sum over the process and its children (LiteLLM may fork workers).
fn tree_cpu_seconds(pid: u32) -> f64 {
    let mut total = cpu_seconds(pid);
    if let Ok(children) = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")) {
        for child in children.split_whitespace().filter_map(|c| c.parse().ok()) {
            total += tree_cpu_seconds(child);
        }
    }
    total
}

struct Server {
    child: Child,
    base: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn wait_ready(http: &reqwest::Client, url: &str, child: &mut Child) {
    for _ in 0..600 {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{url}: the process exited with {status}");
        }
        if http.get(url).send().await.is_ok_and(|r| r.status().is_success()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("{url} did not become ready");
}

async fn start_service(http: &reqwest::Client, storage: &std::path::Path) -> Server {
    let port = free_port();
    let mut child = Command::new(env("SERVER_BIN"))
        .env("PORT", port.to_string())
        .env("DATABASE_URL", fresh_database().await)
        .env("JWT_SECRET", "b".repeat(64))
        .env("ENCRYPTION_KEY", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")
        .env("ADMIN_USERNAME", "admin")
        .env("ADMIN_PASSWORD", "bench-password")
        .env("STORAGE_BACKEND", "fs")
        .env("STORAGE_DIR", storage)
        .env("QUEUE_BACKEND", "memory")
        .env("DB_MAX_CONNECTIONS", "20")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the service");
    let base = format!("http://127.0.0.1:{port}");
    wait_ready(http, &format!("{base}/health"), &mut child).await;
    Server { child, base }
}

async fn start_litellm(http: &reqwest::Client, upstream: &str, model: &str, dir: &std::path::Path) -> Option<Server> {
    let bin = std::env::var("LITELLM_BIN").ok()?;
    let config = dir.join("litellm.yaml");
    std::fs::write(
        &config,
        format!(
            "model_list:\n  - model_name: {model}\n    litellm_params:\n      model: openai/{model}\n      api_base: {upstream}\n      api_key: {GOOD_KEY}\n"
        ),
    )
    .expect("write LiteLLM config");
    let port = free_port();
    let mut child = Command::new(bin)
        .arg("--config")
        .arg(&config)
        .args(["--host", "127.0.0.1", "--port", &port.to_string(), "--num_workers", "1"])
        .env("LITELLM_LOG", "ERROR")
        .env("LITELLM_MASTER_KEY", GOOD_KEY)
        // With a DATABASE_URL LiteLLM would try to use it for its own tables.
        .env_remove("DATABASE_URL")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start LiteLLM");
    let base = format!("http://127.0.0.1:{port}");
    wait_ready(http, &format!("{base}/health/liveliness"), &mut child).await;
    Some(Server { child, base })
}

async fn json_post(http: &reqwest::Client, url: &str, token: Option<&str>, body: Value) -> Value {
    let mut req = http.post(url).json(&body);
    if let Some(t) = token {
        req = req.header("Svc-Auth", t);
    }
    req.send().await.expect("request").json().await.expect("json")
}

/// One way of asking for the same answer.
#[derive(Clone)]
enum Target {
    Raw { url: String, body: Value },
    Service { url: String, token: String },
    Litellm { url: String, body: Value },
}

impl Target {
    /// Streams one answer; returns the time to its first answer token.
    async fn stream(&self, http: &reqwest::Client, conversation: &str) -> Duration {
        let start = Instant::now();
        let resp = match self {
            Target::Raw { url, body } | Target::Litellm { url, body } => {
                http.post(url).bearer_auth(GOOD_KEY).json(body).send().await
            }
            Target::Service { url, token } => {
                http.post(url)
                    .header("Svc-Auth", token)
                    .json(&json!({ "conversationId": conversation, "content": "benchmark" }))
                    .send()
                    .await
            }
        }
        .expect("stream request");
        assert!(resp.status().is_success(), "status {}", resp.status());
        let mut body = resp.bytes_stream();
        let mut first = None;
        let mut tokens = 0usize;
        while let Some(chunk) = body.next().await {
            let chunk = chunk.expect("chunk");
            let n = chunk.windows(4).filter(|w| w == b"tok ").count();
            if n > 0 && first.is_none() {
                first = Some(start.elapsed());
            }
            tokens += n;
        }
        assert_eq!(tokens, TOKENS, "a whole answer");
        first.expect("a first token")
    }
}

/// The percentile in milliseconds.
fn pct_ms(values: &mut [Duration], p: f64) -> f64 {
    percentile(values, p).as_secs_f64() * 1000.0
}

/// Streams completed in DURATION with CONCURRENCY in flight, and the server's CPU seconds.
async fn sustained(http: &reqwest::Client, target: &Target, pid: u32) -> (usize, f64) {
    let done = Arc::new(AtomicUsize::new(0));
    let cpu_before = tree_cpu_seconds(pid);
    let deadline = Instant::now() + DURATION;
    let workers: Vec<_> = (0..CONCURRENCY)
        .map(|i| {
            let (http, target, done) = (http.clone(), target.clone(), done.clone());
            tokio::spawn(async move {
                let conversation = format!("load-{i}");
                while Instant::now() < deadline {
                    target.stream(&http, &conversation).await;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for w in workers {
        w.await.expect("worker");
    }
    (done.load(Ordering::Relaxed), tree_cpu_seconds(pid) - cpu_before)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    shared::telemetry::install_crypto_provider();
    let dir = tempfile::tempdir().expect("temp dir");
    let upstream = ModelServer::start().await;
    let model = format!("chat-bench-{TOKENS}");
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .build()
        .expect("client");

    let service = start_service(&http, dir.path()).await;
    let api = format!("{}/api", service.base);
    let login = json_post(
        &http,
        &format!("{api}/user/login"),
        None,
        json!({ "username": "admin", "password": "bench-password" }),
    )
    .await;
    let token = login["data"]["token"].as_str().expect("token").to_owned();
    let provider = json_post(
        &http,
        &format!("{api}/ai-model/provider"),
        Some(&token),
        json!({ "providerName": "Bench", "providerKey": "bench" }),
    )
    .await;
    let config = json_post(
        &http,
        &format!("{api}/ai-model/config"),
        Some(&token),
        json!({
        "providerId": provider["data"], "modelName": "bench", "modelKey": model, "modelType": "CHAT",
        "apiKey": GOOD_KEY, "apiEndpoint": upstream.base_url }),
    )
    .await;
    let agent = json_post(
        &http,
        &format!("{api}/agent"),
        Some(&token),
        json!({ "name": "Bench", "chatModelId": config["data"] }),
    )
    .await;
    let agent_id = agent["data"].as_i64().expect("agent id");

    let openai_body =
        json!({ "model": model, "stream": true, "messages": [{ "role": "user", "content": "benchmark" }] });
    let raw = Target::Raw {
        url: format!("{}/chat/completions", upstream.base_url),
        body: openai_body.clone(),
    };
    let svc = Target::Service {
        url: format!("{api}/agent/{agent_id}/chat"),
        token,
    };
    let litellm = start_litellm(&http, &upstream.base_url, &model, dir.path()).await;
    let lite = litellm.as_ref().map(|l| Target::Litellm {
        url: format!("{}/v1/chat/completions", l.base),
        body: openai_body,
    });

    for _ in 0..WARMUP {
        raw.stream(&http, "ttfb").await;
        svc.stream(&http, "ttfb").await;
        if let Some(l) = &lite {
            l.stream(&http, "ttfb").await;
        }
    }
    let (mut raw_t, mut svc_t, mut lite_t, mut svc_added, mut lite_added) = (vec![], vec![], vec![], vec![], vec![]);
    for _ in 0..ROUNDS {
        let r = raw.stream(&http, "ttfb").await;
        let s = svc.stream(&http, "ttfb").await;
        raw_t.push(r);
        svc_t.push(s);
        svc_added.push(s.saturating_sub(r));
        if let Some(l) = &lite {
            let t = l.stream(&http, "ttfb").await;
            lite_t.push(t);
            lite_added.push(t.saturating_sub(r));
        }
    }
    println!("agent chat: {ROUNDS} sequential streams of {TOKENS} tokens each, zero upstream delay (ms)");
    println!("| path | first token p50 | first token p99 | added over raw p50 | added over raw p99 |");
    println!("|---|---|---|---|---|");
    println!(
        "| raw upstream | {:.2} | {:.2} | - | - |",
        pct_ms(&mut raw_t, 0.5),
        pct_ms(&mut raw_t, 0.99)
    );
    println!(
        "| service `/agent/{{id}}/chat` | {:.2} | {:.2} | {:.2} | {:.2} |",
        pct_ms(&mut svc_t, 0.5),
        pct_ms(&mut svc_t, 0.99),
        pct_ms(&mut svc_added, 0.5),
        pct_ms(&mut svc_added, 0.99)
    );
    if !lite_t.is_empty() {
        println!(
            "| LiteLLM proxy | {:.2} | {:.2} | {:.2} | {:.2} |",
            pct_ms(&mut lite_t, 0.5),
            pct_ms(&mut lite_t, 0.99),
            pct_ms(&mut lite_added, 0.5),
            pct_ms(&mut lite_added, 0.99)
        );
    }

    println!(
        "\nsustained: {CONCURRENCY} streams in flight for {}s",
        DURATION.as_secs()
    );
    println!("| server | streams/s | server CPU s | streams per CPU-second |");
    println!("|---|---|---|---|");
    let (n, cpu) = sustained(&http, &svc, service.child.id()).await;
    let secs = DURATION.as_secs_f64();
    println!(
        "| service | {:.1} | {cpu:.2} | {:.1} |",
        n as f64 / secs,
        n as f64 / cpu.max(0.01)
    );
    if let (Some(server), Some(target)) = (&litellm, &lite) {
        let (n, cpu) = sustained(&http, target, server.child.id()).await;
        println!(
            "| LiteLLM proxy | {:.1} | {cpu:.2} | {:.1} |",
            n as f64 / secs,
            n as f64 / cpu.max(0.01)
        );
    } else {
        println!("(LITELLM_BIN unset: LiteLLM not measured)");
    }
}
