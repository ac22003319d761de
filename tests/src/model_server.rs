//! A scripted OpenAI-compatible model server for tests and benchmarks: SSE chunking,
//! `[DONE]`, usage chunks, reasoning deltas, tool-call deltas, embeddings, rerank, and the
//! failures real endpoints produce (401, 404, 429, 500, errors and cuts mid-stream, slowness).
//!
//! Behaviour is chosen by the model name:
//! - `chat-echo`: answers "You said: <last user text>", one word per chunk
//! - `chat-think`: reasoning deltas, then the answer
//! - `chat-tools`: asks for `get_weather` (arguments split across chunks) until a tool result
//!   is in the conversation, then answers with it
//! - `chat-cut`: two chunks, then the connection ends without finishing
//! - `chat-error`: one chunk, then an `error` event
//! - `chat-garbage`: two chunks, then a line that is not JSON
//! - `chat-flaky`: 429 on the first call, then like `chat-echo`
//! - `chat-429`: always HTTP 429
//! - `chat-500`: always HTTP 500
//! - `chat-slow`: waits 300 ms before each chunk; `chat-slow-brief` the same, answering
//!   "One moment, please." whatever it was asked
//! - `chat-bench-N`: N one-token chunks as fast as possible
//! - `chat-agent`: follows a directive in the last user message, `CALL <tool> <json arguments>`
//!   (with a `CUT` line, the answer ends with finish_reason `length` after its calls):
//!   calls the offered tool whose name is `<tool>` or ends in `__<tool>` (or answers that the
//!   tool is not available); once a tool result follows the user message it answers
//!   "Tool said: <result>"; without a directive it echoes like `chat-echo`
//! - `chat-drafter`: streams a JSON agent draft in 7-character pieces; `chat-drafter-bad`
//!   answers prose with no JSON; `chat-drafter-long` a draft whose description passes the
//!   agent's limit and whose greeting holds a NUL
//! - `chat-nul`: answers like `chat-echo`, with NUL characters in its thinking and text
//! - `chat-no-usage`: answers like `chat-echo`, reporting no `usage`; `chat-zero-usage`
//!   reports a usage of 0 tokens; `chat-running-usage` reports it twice, a running total
//!   (half, then all of it), as servers with continuous usage stats do
//! - `chat-split`: answers `{"boundaries": [1, m]}` for a prompt of numbered paragraphs
//!   `[1] .. [n]`, with m the middle one
//! - `mem-extract`: memory extraction JSON (in a code fence, as models often answer): one
//!   memory for every transcript line `user: TYPE: title | content`, confidence 0.9
//! - `emb-8`: 8-dimensional bag-of-words embeddings; `emb-8-slow` the same after 1 s
//! - `emb-384`: 384-dimensional pseudo-random unit vectors (benchmarks)
//! - `emb-4096`: `emb-8`'s vectors padded with zeros to 4,096 dimensions, more than pgvector
//!   indexes (as some open models make); with any embedding model, a text holding `<zero>` gets a zero vector and one holding `<huge>` a
//!   first component of 1e39 (past f32)
//! - `rerank`: word-overlap relevance scores; `rerank-twice` lists every result twice
//! - `GET /search?q=..&format=json`: a SearXNG-shaped web search answering three results
//!   about the query
//!
//! Every request needs `Authorization: Bearer sk-scripted-good-key-1234`.
//!
//! Every chat answer stops at the request's `max_tokens` pieces (finish reason `length`), as
//! real servers do.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::extract::{DefaultBodyLimit, Query};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;
use futures::StreamExt;
use serde_json::{json, Value};

pub const GOOD_KEY: &str = "sk-scripted-good-key-1234";

#[derive(Clone, Default)]
struct Script {
    requests: Arc<Mutex<Vec<Value>>>,
    flaky_calls: Arc<AtomicUsize>,
    /// SSE chunks actually handed to clients; stops growing when a client hangs up.
    chunks_sent: Arc<AtomicUsize>,
}

pub struct ModelServer {
    /// `http://127.0.0.1:PORT/v1`
    pub base_url: String,
    /// `http://127.0.0.1:PORT`, the web search's base URL.
    pub origin: String,
    script: Script,
}

impl ModelServer {
    pub async fn start() -> Self {
        let script = Script::default();
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .route("/v1/embeddings", post(embeddings))
            .route("/v1/rerank", post(rerank))
            .route("/search", get(web_search))
            // Providers take requests with images of tens of MB inline (OpenAI: 50 MB in all).
            .layer(DefaultBodyLimit::max(64 << 20))
            .with_state(script.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind model server");
        let addr = listener.local_addr().expect("addr");
        // Served like the service (Nagle off): a real provider streams without a delayed-ACK
        // stall, and a stalled reference would hide the service's own in "added" times.
        tokio::spawn(async move {
            let _ = local_server::serve(listener, app, std::future::pending()).await;
        });
        Self {
            origin: format!("http://{addr}"),
            base_url: format!("http://{addr}/v1"),
            script,
        }
    }

    /// Streamed chunks sent so far.
    pub fn chunks_sent(&self) -> usize {
        self.script.chunks_sent.load(Ordering::SeqCst)
    }

    /// Request bodies received so far.
    pub fn requests(&self) -> Vec<Value> {
        self.script.requests.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

fn error(status: StatusCode, message: &str) -> Response {
    (
        status,
        Json(json!({ "error": { "message": message, "type": "invalid_request_error" } })),
    )
        .into_response()
}

impl Script {
    /// Records the request and checks its API key, as every endpoint does first; the refusal
    /// when the key is wrong.
    fn refusal(&self, headers: &HeaderMap, body: &Value) -> Option<Response> {
        self.requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(body.clone());
        let auth = headers.get("authorization").and_then(|v| v.to_str().ok());
        if auth != Some(&format!("Bearer {GOOD_KEY}")) {
            return Some(error(StatusCode::UNAUTHORIZED, "Incorrect API key provided"));
        }
        None
    }
}

fn last_user_text(body: &Value) -> String {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let last = messages
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .cloned()
        .unwrap_or(Value::Null);
    match &last["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    }
}

fn prompt_tokens(body: &Value) -> u64 {
    (body["messages"].to_string().len() as u64).div_ceil(4)
}

fn chunk(model: &str, delta: Value, finish: Option<&str>) -> String {
    let v = json!({ "id": "chatcmpl-1", "object": "chat.completion.chunk", "model": model,
        "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }] });
    format!("data: {v}\n\n")
}

/// The answer cut at the request's `max_tokens` (one piece a token), as a real server stops:
/// the caller holds quota for at most that many, so more would be an answer no server gives.
fn capped(mut p: Plan, body: &Value) -> (Plan, bool) {
    let Some(max) = body["max_tokens"]
        .as_u64()
        .or_else(|| body["max_completion_tokens"].as_u64())
    else {
        return (p, false);
    };
    let max = max as usize;
    if p.reasoning.len() + p.text.len() <= max {
        return (p, false);
    }
    p.reasoning.truncate(max);
    p.text.truncate(max - p.reasoning.len());
    p.tools.clear();
    (p, true)
}

/// The scripted answer: reasoning pieces, text pieces, and tool calls (name, JSON arguments).
struct Plan {
    reasoning: Vec<String>,
    text: Vec<String>,
    tools: Vec<(String, String)>,
}

/// The agent draft `chat-drafter` streams.
pub const DRAFT: &str = r#"{"name": "Trip Planner", "description": "Plans trips \"end to end\".", "instruction": "You plan trips.\nAsk about the budget first.", "greeting": "Where to?", "avatar": "✈️"}"#;

fn tool_results_after_user(body: &Value) -> Option<String> {
    let messages = body["messages"].as_array()?;
    let last_user = messages.iter().rposition(|m| m["role"] == "user")?;
    messages[last_user..]
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
}

fn agent_plan(body: &Value, said: &str, words: impl Fn(&str) -> Vec<String>) -> Plan {
    let text = |t: String| Plan {
        reasoning: vec![],
        text: words(&t),
        tools: vec![],
    };
    if let Some(result) = tool_results_after_user(body) {
        return text(format!("Tool said: {result}"));
    }
    // Every `CALL name {args}` line is one tool call of the same step.
    let directives: Vec<&str> = said.lines().filter_map(|l| l.trim().strip_prefix("CALL ")).collect();
    if directives.is_empty() {
        return text(format!("You said: {said}"));
    }
    let offered: Vec<String> = body["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter_map(|t| t.pointer("/function/name")?.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let mut tools = vec![];
    for directive in directives {
        let (wanted, args) = directive.split_once(' ').unwrap_or((directive, "{}"));
        match offered
            .iter()
            .find(|n| *n == wanted || n.ends_with(&format!("__{wanted}")))
        {
            Some(name) => tools.push((name.clone(), args.trim().to_owned())),
            None => return text(format!("Tool {wanted} is not available")),
        }
    }
    Plan {
        reasoning: vec![],
        text: vec![],
        tools,
    }
}

fn plan(model: &str, body: &Value) -> Plan {
    let said = last_user_text(body);
    let words = |s: &str| s.split_inclusive(' ').map(str::to_owned).collect::<Vec<_>>();
    if let Some(n) = model.strip_prefix("chat-bench-") {
        let n: usize = n.parse().unwrap_or(100);
        return Plan {
            reasoning: vec![],
            text: vec!["tok ".to_owned(); n],
            tools: vec![],
        };
    }
    match model {
        "mem-extract" => Plan {
            reasoning: vec![],
            text: vec![extraction(&said)],
            tools: vec![],
        },
        "chat-split" => {
            let n = (1..).take_while(|i| said.contains(&format!("[{i}]"))).count();
            let answer = json!({ "boundaries": [1, n / 2 + 1] }).to_string();
            Plan {
                reasoning: vec![],
                text: vec![answer],
                tools: vec![],
            }
        }
        "chat-agent" => agent_plan(body, &said, words),
        "chat-slow-brief" => Plan {
            reasoning: vec![],
            text: words("One moment, please."),
            tools: vec![],
        },
        "chat-nul" => Plan {
            reasoning: vec!["Hm\0m. ".to_owned()],
            text: words(&format!("You\0 said: {said}\0")),
            tools: vec![],
        },
        // An endpoint that ignores max_tokens: 5 MiB of text.
        "chat-flood" => Plan {
            reasoning: vec![],
            text: vec!["x".repeat(64 * 1024); 80],
            tools: vec![],
        },
        // An endpoint that asks for a tool whether or not any was offered.
        "chat-loop" => Plan {
            reasoning: vec![],
            text: vec![],
            tools: vec![("get_weather".to_owned(), "{\"city\": \"Paris\"}".to_owned())],
        },
        "chat-drafter" => Plan {
            reasoning: vec![],
            text: DRAFT
                .chars()
                .collect::<Vec<_>>()
                .chunks(7)
                .map(|c| c.iter().collect())
                .collect(),
            tools: vec![],
        },
        "chat-drafter-long" => Plan {
            reasoning: vec![],
            text: vec![format!(
                r#"{{"name": "Verbose", "description": "{}", "greeting": "Hi\u0000 there"}}"#,
                "d".repeat(1500)
            )],
            tools: vec![],
        },
        "chat-drafter-bad" => Plan {
            reasoning: vec![],
            text: words("I would rather not design that."),
            tools: vec![],
        },
        "chat-think" => Plan {
            reasoning: words("Let me think about it. "),
            text: words(&format!("You said: {said}")),
            tools: vec![],
        },
        "chat-tools" => {
            let tool_result = body["messages"]
                .as_array()
                .and_then(|m| m.iter().rev().find(|m| m["role"] == "tool"))
                .cloned();
            match tool_result {
                Some(r) => Plan {
                    reasoning: vec![],
                    text: words(&format!("The weather is {}", r["content"].as_str().unwrap_or(""))),
                    tools: vec![],
                },
                None => Plan {
                    reasoning: vec![],
                    text: vec![],
                    tools: vec![("get_weather".to_owned(), "{\"city\": \"Paris\"}".to_owned())],
                },
            }
        }
        _ => Plan {
            reasoning: vec![],
            text: words(&format!("You said: {said}")),
            tools: vec![],
        },
    }
}

/// The extraction answer for a transcript of `role: text` lines.
fn extraction(transcript: &str) -> String {
    let memories: Vec<Value> = transcript
        .lines()
        .filter_map(|l| l.strip_prefix("user: "))
        .filter_map(|l| {
            let (memory_type, rest) = l.split_once(": ")?;
            let (title, content) = rest.split_once(" | ")?;
            let tags: Vec<String> = title.split_whitespace().map(str::to_lowercase).collect();
            Some(json!({ "memoryType": memory_type, "title": title, "content": content, "tags": tags, "confidence": 0.9 }))
        })
        .collect();
    format!("```json\n{}\n```", json!({ "memories": memories }))
}

async fn chat(State(script): State<Script>, headers: HeaderMap, Json(body): Json<Value>) -> Response {
    if let Some(refused) = script.refusal(&headers, &body) {
        return refused;
    }
    let model = body["model"].as_str().unwrap_or_default().to_owned();
    let known = model.starts_with("chat-bench-")
        || [
            "chat-echo",
            "chat-think",
            "chat-tools",
            "chat-cut",
            "chat-error",
            "chat-garbage",
            "chat-flaky",
            "chat-429",
            "chat-500",
            "chat-slow",
            "chat-slow-brief",
            "chat-split",
            "chat-agent",
            "chat-flood",
            "chat-greedy",
            "chat-loop",
            "chat-drafter",
            "chat-drafter-bad",
            "chat-drafter-long",
            "chat-nul",
            "chat-no-usage",
            "chat-zero-usage",
            "chat-running-usage",
            "mem-extract",
        ]
        .contains(&model.as_str());
    if !known {
        return error(StatusCode::NOT_FOUND, &format!("The model `{model}` does not exist"));
    }
    if model == "chat-500" {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "The server had an error while processing your request",
        );
    }
    if model == "chat-429" || (model == "chat-flaky" && script.flaky_calls.fetch_add(1, Ordering::SeqCst) == 0) {
        return error(StatusCode::TOO_MANY_REQUESTS, "Rate limit reached");
    }
    let (p, cut) = capped(plan(&model, &body), &body);
    let mut usage = json!({ "prompt_tokens": prompt_tokens(&body), "completion_tokens": (p.text.len() + p.reasoning.len()) as u64,
        "total_tokens": prompt_tokens(&body) + (p.text.len() + p.reasoning.len()) as u64 });
    // An endpoint that reports more tokens than an i64 holds (2^64 - 10^9).
    if model == "chat-greedy" {
        usage["prompt_tokens"] = json!(18_446_744_072_709_551_616_u64);
    }
    // An endpoint that reports no usage (some self-hosted servers leave it out).
    if model == "chat-no-usage" {
        usage = Value::Null;
    }
    if model == "chat-zero-usage" {
        usage = json!({ "prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0 });
    }
    if body["stream"] != true {
        return complete(&model, p, usage, cut);
    }
    let mut events: Vec<String> = vec![chunk(&model, json!({ "role": "assistant", "content": "" }), None)];
    events.extend(
        p.reasoning
            .iter()
            .map(|r| chunk(&model, json!({ "reasoning_content": r }), None)),
    );
    let text = p.text.iter().map(|t| chunk(&model, json!({ "content": t }), None));
    match model.as_str() {
        "chat-cut" => {
            events.extend(text.take(2));
            return sse(events, Duration::ZERO, &script);
        }
        "chat-garbage" => {
            events.extend(text.take(2));
            events.push("data: {\"choices\": [{\"delta\": <html>502 Bad Gateway</html>\n\n".to_owned());
            return sse(events, Duration::ZERO, &script);
        }
        "chat-error" => {
            events.extend(text.take(1));
            events.push(format!(
                "data: {}\n\n",
                json!({ "error": { "message": "The model is overloaded" } })
            ));
            return sse(events, Duration::ZERO, &script);
        }
        _ => events.extend(text),
    }
    let finish = if !p.tools.is_empty() {
        let call = |delta: Value| chunk(&model, json!({ "tool_calls": [delta] }), None);
        for (index, (name, args)) in p.tools.iter().enumerate() {
            let id = format!("call_{}", index + 1);
            events.push(call(
                json!({ "index": index, "id": id, "type": "function", "function": { "name": name, "arguments": "" } }),
            ));
            let middle = args.char_indices().nth(args.chars().count() / 2).map_or(0, |(i, _)| i);
            events.push(call(
                json!({ "index": index, "function": { "arguments": &args[..middle] } }),
            ));
            events.push(call(
                json!({ "index": index, "function": { "arguments": &args[middle..] } }),
            ));
        }
        // A `CUT` line: the answer stopped at its token limit just after its calls.
        match last_user_text(&body).lines().any(|l| l.trim() == "CUT") {
            true => "length",
            false => "tool_calls",
        }
    } else if cut {
        "length"
    } else {
        "stop"
    };
    events.push(chunk(&model, json!({}), Some(finish)));
    if body.pointer("/stream_options/include_usage") == Some(&Value::Bool(true)) {
        if model == "chat-running-usage" {
            let half = json!({ "prompt_tokens": usage["prompt_tokens"], "completion_tokens": 1 });
            events.push(format!(
                "data: {}\n\n",
                json!({ "id": "chatcmpl-1", "choices": [], "usage": half })
            ));
        }
        events.push(format!(
            "data: {}\n\n",
            json!({ "id": "chatcmpl-1", "choices": [], "usage": usage })
        ));
    }
    events.push("data: [DONE]\n\n".to_owned());
    let delay = if model.starts_with("chat-slow") {
        Duration::from_millis(300)
    } else {
        Duration::ZERO
    };
    sse(events, delay, &script)
}

fn complete(model: &str, p: Plan, usage: Value, cut: bool) -> Response {
    let mut message = json!({ "role": "assistant", "content": p.text.concat() });
    if !p.reasoning.is_empty() {
        message["reasoning_content"] = json!(p.reasoning.concat());
    }
    let finish = if !p.tools.is_empty() {
        message["content"] = Value::Null;
        let calls: Vec<Value> = p
            .tools
            .iter()
            .enumerate()
            .map(|(i, (name, args))| {
                json!({ "id": format!("call_{}", i + 1), "type": "function", "function": { "name": name, "arguments": args } })
            })
            .collect();
        message["tool_calls"] = Value::Array(calls);
        "tool_calls"
    } else if cut {
        "length"
    } else {
        "stop"
    };
    // `"error": null` on success, as some OpenAI-compatible servers send it.
    Json(json!({ "id": "chatcmpl-1", "object": "chat.completion", "model": model,
        "choices": [{ "index": 0, "message": message, "finish_reason": finish }], "usage": usage, "error": null }))
    .into_response()
}

fn sse(events: Vec<String>, delay: Duration, script: &Script) -> Response {
    let sent = script.chunks_sent.clone();
    let stream = futures::stream::iter(events).then(move |e| {
        let sent = sent.clone();
        async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            sent.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Infallible>(Bytes::from(e))
        }
    });
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// 8-dimensional bag-of-words vector, normalised: texts sharing words point the same way.
pub fn toy_embedding(text: &str) -> Vec<f32> {
    let mut v = [0f32; 8];
    for word in text
        .to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let h = word
            .bytes()
            .fold(2166136261u32, |h, b| (h ^ b as u32).wrapping_mul(16777619));
        v[(h % 8) as usize] += 1.0;
    }
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
    v.iter().map(|x| x / norm).collect()
}

/// 384 pseudo-random components seeded by the text, normalised.
pub fn wide_embedding(text: &str) -> Vec<f32> {
    let mut state = text
        .bytes()
        .fold(2166136261u32, |h, b| (h ^ b as u32).wrapping_mul(16777619))
        | 1;
    let mut v: Vec<f32> = (0..384)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            (state as f32 / u32::MAX as f32) - 0.5
        })
        .collect();
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
    v.iter_mut().for_each(|x| *x /= norm);
    v
}

async fn embeddings(State(script): State<Script>, headers: HeaderMap, Json(body): Json<Value>) -> Response {
    if let Some(refused) = script.refusal(&headers, &body) {
        return refused;
    }
    let mut model = body["model"].as_str().unwrap_or_default().to_owned();
    if model == "emb-8-slow" {
        tokio::time::sleep(Duration::from_secs(1)).await;
        model = "emb-8".to_owned();
    }
    // As some self-hosted servers answer: no usage at all.
    let reports_usage = model != "emb-8-no-usage";
    if !reports_usage {
        model = "emb-8".to_owned();
    }
    if !["emb-8", "emb-384", "emb-4096"].contains(&model.as_str()) {
        return error(
            StatusCode::NOT_FOUND,
            &format!("The model `{}` does not exist", body["model"].as_str().unwrap_or("")),
        );
    }
    let inputs: Vec<String> = match &body["input"] {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => a.iter().map(|x| x.as_str().unwrap_or_default().to_owned()).collect(),
        _ => return error(StatusCode::BAD_REQUEST, "input must be a string or an array"),
    };
    // Answer in reverse order with explicit indexes, as some servers do.
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .rev()
        .map(|(i, t)| {
            let mut v = match model.as_str() {
                "emb-384" => wide_embedding(t),
                "emb-4096" => {
                    let mut v = toy_embedding(t);
                    v.resize(4096, 0.0);
                    v
                }
                _ => toy_embedding(t),
            };
            if t.contains("<zero>") {
                v.fill(0.0);
            }
            let mut v = json!(v);
            if t.contains("<huge>") {
                v[0] = json!(1e39);
            }
            json!({ "object": "embedding", "index": i, "embedding": v })
        })
        .collect();
    let tokens: u64 = inputs.iter().map(|t| (t.len() as u64).div_ceil(4)).sum();
    let mut answer = json!({ "object": "list", "data": data, "model": model });
    if reports_usage {
        answer["usage"] = json!({ "prompt_tokens": tokens, "total_tokens": tokens });
    }
    Json(answer).into_response()
}

async fn rerank(State(script): State<Script>, headers: HeaderMap, Json(body): Json<Value>) -> Response {
    if let Some(refused) = script.refusal(&headers, &body) {
        return refused;
    }
    if body["model"] != "rerank" && body["model"] != "rerank-twice" {
        return error(StatusCode::NOT_FOUND, "model not found");
    }
    let words = |s: &str| -> std::collections::HashSet<String> {
        s.to_lowercase()
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| w.len() > 2)
            .map(str::to_owned)
            .collect()
    };
    let q = words(body["query"].as_str().unwrap_or_default());
    let docs = body["documents"].as_array().cloned().unwrap_or_default();
    let mut results: Vec<Value> = docs
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let dw = words(d.as_str().unwrap_or_default());
            let overlap = q.intersection(&dw).count() as f64;
            json!({ "index": i, "relevance_score": overlap / (q.len().max(1) as f64) })
        })
        .collect();
    results.sort_by(|a, b| {
        b["relevance_score"]
            .as_f64()
            .unwrap_or(0.0)
            .total_cmp(&a["relevance_score"].as_f64().unwrap_or(0.0))
    });
    let top = body["top_n"].as_u64().unwrap_or(results.len() as u64) as usize;
    results.truncate(top);
    if body["model"] == "rerank-twice" {
        results = results.iter().flat_map(|r| [r.clone(), r.clone()]).collect();
    }
    Json(json!({ "results": results })).into_response()
}

async fn web_search(Query(q): Query<std::collections::HashMap<String, String>>) -> Response {
    let query = q.get("q").cloned().unwrap_or_default();
    if q.get("format").map(String::as_str) != Some("json") {
        return error(StatusCode::FORBIDDEN, "format must be json");
    }
    let results: Vec<Value> = (1..=3)
        .map(|i| {
            json!({ "title": format!("Result {i} for {query}"), "url": format!("https://example.org/{i}"),
            "content": format!("Snippet {i} about {query}") })
        })
        .collect();
    Json(json!({ "query": query, "results": results })).into_response()
}
