//! Soak: mixed load on the service for SOAK_SECS (default 600) from SOAK_CLIENTS (default 8)
//! clients on loopback: agent CRUD (create, read, update, list, delete), streamed chats against
//! the scripted model server, and knowledge-base searches. Reports requests, failures, p50/p99
//! per kind, the service's resident memory over time, and then checks the database: every
//! acknowledged write is there once, every deleted agent is gone, every chat stored both turns.
//!
//! The service is the `agent-platform` binary (SERVER_BIN) on a fresh database of
//! DATABASE_URL's server. Rate limits are off: this measures the service, not the limiter.
//! Run with `make soak` (it builds the server and starts what it needs).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use api_tests::bench_server::{percentile_ms, rss_mib, start_service, ADMIN_PASSWORD};
use api_tests::model_server::{ModelServer, GOOD_KEY};
use serde_json::{json, Value};

const SAMPLE_EVERY: Duration = Duration::from_secs(10);

fn setting(key: &str, default: u64) -> u64 {
    std::env::var(key).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Latencies and failures per kind of request.
#[derive(Default)]
struct Tally {
    latencies: BTreeMap<&'static str, Vec<Duration>>,
    failures: BTreeMap<&'static str, Vec<String>>,
    agents_created: Vec<i64>,
    agents_deleted: Vec<i64>,
    chats_done: Vec<String>,
}

struct Client {
    http: reqwest::Client,
    api: String,
    token: String,
    tally: Arc<Mutex<Tally>>,
}

impl Client {
    fn note(&self, kind: &'static str, took: Duration, failure: Option<String>) {
        let mut t = self.tally.lock().expect("tally");
        t.latencies.entry(kind).or_default().push(took);
        if let Some(f) = failure {
            t.failures.entry(kind).or_default().push(f);
        }
    }

    /// One JSON call; the envelope's data on success.
    async fn call(
        &self,
        kind: &'static str,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Option<Value> {
        let started = Instant::now();
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.api))
            .header("Svc-Auth", &self.token);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let outcome = async {
            let resp = req.send().await.map_err(|e| format!("transport: {e}"))?;
            let status = resp.status();
            let body: Value = resp.json().await.map_err(|e| format!("{status}: body: {e}"))?;
            let ok = body["code"] == 1 || body["status"] == 1;
            if status.is_success() && ok {
                Ok(body["data"].clone())
            } else {
                Err(format!("{status}: {body}"))
            }
        }
        .await;
        match outcome {
            Ok(data) => {
                self.note(kind, started.elapsed(), None);
                Some(data)
            }
            Err(e) => {
                self.note(kind, started.elapsed(), Some(e));
                None
            }
        }
    }

    async fn crud(&self, i: usize, model: i64) {
        let name = format!("soak agent {i}");
        let Some(id) = self
            .call(
                "agent create",
                reqwest::Method::POST,
                "/agent",
                Some(json!({ "name": name, "chatModelId": model })),
            )
            .await
            .and_then(|d| d.as_i64())
        else {
            return;
        };
        self.tally.lock().expect("tally").agents_created.push(id);
        self.call("agent read", reqwest::Method::GET, &format!("/agent/{id}"), None)
            .await;
        self.call(
            "agent update",
            reqwest::Method::PUT,
            &format!("/agent/{id}"),
            Some(json!({ "description": format!("updated {i}") })),
        )
        .await;
        self.call(
            "agent page",
            reqwest::Method::GET,
            "/agent/page?pageNum=1&pageSize=20",
            None,
        )
        .await;
        if self
            .call("agent delete", reqwest::Method::DELETE, &format!("/agent/{id}"), None)
            .await
            .is_some()
        {
            self.tally.lock().expect("tally").agents_deleted.push(id);
        }
    }

    async fn chat(&self, agent: i64, conversation: String) {
        let started = Instant::now();
        let outcome = async {
            let resp = self
                .http
                .post(format!("{}/agent/{agent}/chat", self.api))
                .header("Svc-Auth", &self.token)
                .json(&json!({ "conversationId": conversation, "content": "how do workers index documents" }))
                .send()
                .await
                .map_err(|e| format!("transport: {e}"))?;
            let status = resp.status();
            let text = resp.text().await.map_err(|e| format!("{status}: body: {e}"))?;
            let last = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or_default();
            let last: Value = serde_json::from_str(last).map_err(|_| format!("{status}: {text}"))?;
            if status.is_success() && last["type"] == "done" {
                Ok(())
            } else {
                Err(format!("{status}: {last}"))
            }
        }
        .await;
        let failure = outcome.err();
        if failure.is_none() {
            self.tally.lock().expect("tally").chats_done.push(conversation);
        }
        self.note("chat (streamed)", started.elapsed(), failure);
    }

    async fn search(&self, kb: i64, i: usize) {
        let queries = [
            "worker indexes documents",
            "paragraph 7",
            "how are documents embedded",
            "lease renewed",
        ];
        self.call(
            "kb search",
            reqwest::Method::POST,
            "/rag/search",
            Some(json!({ "ragId": kb, "query": queries[i % queries.len()] })),
        )
        .await;
    }
}

async fn ok_data(resp: reqwest::Response) -> Value {
    let body: Value = resp.json().await.expect("json");
    assert!(body["code"] == 1 || body["status"] == 1, "setup call failed: {body}");
    body["data"].clone()
}

/// Models, a knowledge base with one indexed document, and an agent to chat with.
async fn setup(http: &reqwest::Client, api: &str, token: &str, models: &ModelServer) -> (i64, i64, i64) {
    let post = |path: &str, body: Value| {
        http.post(format!("{api}{path}"))
            .header("Svc-Auth", token)
            .json(&body)
            .send()
    };
    let provider = ok_data(
        post(
            "/ai-model/provider",
            json!({ "providerName": "Scripted", "providerKey": "scripted" }),
        )
        .await
        .expect("provider"),
    )
    .await;
    let provider = provider.as_i64().expect("provider id");
    let model = |kind: &str, key: &str| {
        post(
            "/ai-model/config",
            json!({ "providerId": provider, "modelName": key, "modelKey": key, "modelType": kind,
                    "apiKey": GOOD_KEY, "apiEndpoint": models.base_url }),
        )
    };
    let chat_model = ok_data(model("CHAT", "chat-echo").await.expect("chat model"))
        .await
        .as_i64()
        .expect("chat model id");
    let embedding = ok_data(model("EMBEDDING", "emb-8").await.expect("embedding model"))
        .await
        .as_i64()
        .expect("embedding model id");
    let kb = ok_data(
        post("/rag", json!({ "name": "Soak", "embeddingModelId": embedding }))
            .await
            .expect("kb"),
    )
    .await["id"]
        .as_i64()
        .expect("kb id");
    let text = (1..=200)
        .map(|i| format!("Paragraph {i}: worker {i} indexes documents, renews its lease and embeds chunks."))
        .collect::<Vec<_>>()
        .join("\n\n");
    let form = reqwest::multipart::Form::new().text("ragId", kb.to_string()).part(
        "files",
        reqwest::multipart::Part::bytes(text.into_bytes()).file_name("soak.txt"),
    );
    let preview = ok_data(
        http.post(format!("{api}/document/upload/preview"))
            .header("Svc-Auth", token)
            .multipart(form)
            .send()
            .await
            .expect("preview"),
    )
    .await;
    let items: Vec<Value> = preview["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| json!({ "tempResourceId": i["tempResourceId"], "decision": i["decision"] }))
        .collect();
    let commit = ok_data(
        post(
            "/document/upload/commit",
            json!({ "previewToken": preview["previewToken"], "items": items }),
        )
        .await
        .expect("commit"),
    )
    .await;
    let doc = commit["items"][0]["id"].as_i64().expect("document id");
    for _ in 0..600 {
        let d = ok_data(
            http.get(format!("{api}/document/{doc}"))
                .header("Svc-Auth", token)
                .send()
                .await
                .expect("document"),
        )
        .await;
        if d["status"] == "success" {
            break;
        }
        assert_ne!(d["status"], "failed", "the soak document failed: {d}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let agent = ok_data(
        post(
            "/agent",
            json!({ "name": "Soak chat", "chatModelId": chat_model, "ragEnabled": true, "ragId": kb }),
        )
        .await
        .expect("agent"),
    )
    .await
    .as_i64()
    .expect("agent id");
    (chat_model, kb, agent)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    shared::telemetry::install_crypto_provider();
    let duration = Duration::from_secs(setting("SOAK_SECS", 600));
    let clients = setting("SOAK_CLIENTS", 8) as usize;
    let dir = tempfile::tempdir().expect("temp dir");
    let models = ModelServer::start().await;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .build()
        .expect("client");
    let limits_off = [("RATE_LIMIT_USER_REQUESTS", "0"), ("RATE_LIMIT_APP_REQUESTS", "0")];
    let (service, database) = start_service(&http, dir.path(), &limits_off).await;
    let pid = service.child.id();
    let api = format!("{}/api", service.base);
    let login: Value = http
        .post(format!("{api}/user/login"))
        .json(&json!({ "username": "admin", "password": ADMIN_PASSWORD }))
        .send()
        .await
        .expect("login")
        .json()
        .await
        .expect("login json");
    let token = login["data"]["token"].as_str().expect("token").to_owned();
    let (chat_model, kb, agent) = setup(&http, &api, &token, &models).await;

    let tally = Arc::new(Mutex::new(Tally::default()));
    let started = Instant::now();
    let deadline = started + duration;
    let rss = Arc::new(Mutex::new(vec![(0u64, rss_mib(pid))]));
    let sampler = {
        let rss = rss.clone();
        tokio::spawn(async move {
            while Instant::now() < deadline {
                tokio::time::sleep(SAMPLE_EVERY).await;
                let at = started.elapsed().as_secs();
                rss.lock().expect("rss").push((at, rss_mib(pid)));
            }
        })
    };
    let workers: Vec<_> = (0..clients)
        .map(|w| {
            let client = Client {
                http: http.clone(),
                api: api.clone(),
                token: token.clone(),
                tally: tally.clone(),
            };
            tokio::spawn(async move {
                let mut i = 0usize;
                while Instant::now() < deadline {
                    match i % 4 {
                        0 => client.crud(w * 1_000_000 + i, chat_model).await,
                        1 => client.chat(agent, format!("soak-{w}-{}", i / 4 % 50)).await,
                        _ => client.search(kb, i).await,
                    }
                    i += 1;
                }
            })
        })
        .collect();
    for w in workers {
        w.await.expect("client");
    }
    sampler.await.expect("sampler");
    let elapsed = started.elapsed().as_secs_f64();

    let mut t = Arc::try_unwrap(tally)
        .ok()
        .expect("every client is done")
        .into_inner()
        .expect("tally");
    let total: usize = t.latencies.values().map(Vec::len).sum();
    let failed: usize = t.failures.values().map(Vec::len).sum();
    println!(
        "soak: {:.0} s, {clients} clients, {total} requests ({:.1}/s), {failed} failed ({:.3}%)",
        elapsed,
        total as f64 / elapsed,
        100.0 * failed as f64 / total.max(1) as f64
    );
    println!("| request | count | failed | p50 ms | p99 ms |");
    println!("|---|---|---|---|---|");
    for (kind, lat) in t.latencies.iter_mut() {
        let failures = t.failures.get(kind).map_or(0, Vec::len);
        println!(
            "| {kind} | {} | {failures} | {:.1} | {:.1} |",
            lat.len(),
            percentile_ms(lat, 0.50),
            percentile_ms(lat, 0.99)
        );
    }
    for (kind, f) in &t.failures {
        println!("first failures of {kind}: {:?}", f.iter().take(3).collect::<Vec<_>>());
    }
    let rss = rss.lock().expect("rss").clone();
    let warm = rss
        .iter()
        .find(|(at, _)| *at >= 60)
        .or(rss.first())
        .map_or(0.0, |r| r.1);
    let last = rss.last().map_or(0.0, |r| r.1);
    let peak = rss.iter().map(|r| r.1).fold(0.0, f64::max);
    println!(
        "service RSS: start {:.1} MiB, after 60 s {warm:.1} MiB, end {last:.1} MiB, peak {peak:.1} MiB; growth after warm-up {:+.1} MiB",
        rss[0].1,
        last - warm
    );
    println!(
        "rss samples (s, MiB): {}",
        rss.iter()
            .map(|(at, m)| format!("{at}:{m:.1}"))
            .collect::<Vec<_>>()
            .join(" ")
    );

    // Nothing lost, nothing duplicated.
    let db = sqlx::PgPool::connect(&database).await.expect("database");
    let deleted_left: i64 = sqlx::query_scalar("SELECT count(*) FROM agents WHERE id = ANY($1)")
        .bind(&t.agents_deleted)
        .fetch_one(&db)
        .await
        .expect("count");
    let kept: Vec<i64> = t
        .agents_created
        .iter()
        .filter(|id| !t.agents_deleted.contains(id))
        .copied()
        .collect();
    let kept_there: i64 = sqlx::query_scalar("SELECT count(*) FROM agents WHERE id = ANY($1)")
        .bind(&kept)
        .fetch_one(&db)
        .await
        .expect("count");
    let soak_agents: i64 = sqlx::query_scalar("SELECT count(*) FROM agents WHERE name LIKE 'soak agent %'")
        .fetch_one(&db)
        .await
        .expect("count");
    let turns: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM messages m JOIN conversations c ON c.id = m.conversation_id WHERE c.agent_id = $1",
    )
    .bind(agent)
    .fetch_one(&db)
    .await
    .expect("count");
    let complete: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM messages m JOIN conversations c ON c.id = m.conversation_id
         WHERE c.agent_id = $1 AND m.role = 'assistant' AND m.status = 1",
    )
    .bind(agent)
    .fetch_one(&db)
    .await
    .expect("count");
    let chats = t.chats_done.len() as i64;
    println!(
        "data: agents created {}, deleted {} (left in the database: {deleted_left}), kept {} (there: {kept_there}; soak agents in the database: {soak_agents}); chats done {chats}, messages stored {turns} (expected {}), complete assistant messages {complete}",
        t.agents_created.len(),
        t.agents_deleted.len(),
        kept.len(),
        2 * chats
    );
    assert_eq!(deleted_left, 0, "a deleted agent is still there");
    assert_eq!(kept_there, kept.len() as i64, "an acknowledged agent is missing");
    assert_eq!(
        soak_agents,
        kept.len() as i64,
        "an agent exists that no one was told about"
    );
    assert!(
        turns >= 2 * chats && complete >= chats,
        "a finished chat is missing a message"
    );
}
