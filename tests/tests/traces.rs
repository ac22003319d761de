//! Traces, exported over OTLP to a real Arize Phoenix and read back through its REST API.
//!
//! Its own test binary: the process's tracing subscriber (and so its exporter) is installed
//! once, from the environment this test sets before anything else runs.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use api_tests::chat::{joined, kinds, say, ChatSetup};
use serde_json::{json, Value};

/// A streamed chat with a knowledge base, memory and an MCP tool is one trace: the request's
/// server span, and below it the retrieval, the recall, each model call with the GenAI
/// attributes and the tool call, with token counts equal to the stored usage.
#[tokio::test]
async fn a_streamed_chat_is_one_trace_of_retrieval_recall_model_and_tool_spans() {
    let phoenix = std::env::var("PHOENIX_URL").expect("PHOENIX_URL must be set: run the tests with `make test`");
    let project = format!("chat-trace-{}", uuid::Uuid::new_v4().simple());
    // Set before the subscriber is built (the first and only test of this binary).
    std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", &phoenix);
    std::env::set_var("OTEL_SERVICE_NAME", "agent-platform");
    std::env::set_var(
        "OTEL_RESOURCE_ATTRIBUTES",
        format!("openinference.project.name={project}"),
    );
    std::env::set_var("RUST_LOG", "info,sqlx=warn");
    shared::telemetry::init();
    assert!(shared::telemetry::tracing_enabled());

    let commands = api_tests::mcp_servers::stdio_commands();
    let s = ChatSetup::with(
        api_tests::Store::Filesystem,
        &api_tests::mcp_servers::with_stdio(&commands, &[]),
    )
    .await;
    let chat = s.chat_model("chat-agent", json!({})).await;
    let embedding = s.embedding_model("emb-8").await;
    let kb = s
        .indexed_base(
            embedding,
            &[("refunds.txt", b"Refunds are accepted within 30 days.".to_vec())],
        )
        .await;
    let memory = s.memory_config(embedding).await;
    let server = s.everything_server().await;
    let agent = s
        .agent(
            &s.admin,
            json!({ "name": "Traced", "chatModelId": chat, "ragEnabled": true, "ragId": kb,
                    "memoryEnabled": true, "memoryConfigId": memory, "mcpEnabled": true, "mcpServerIds": [server] }),
        )
        .await;

    let events = s
        .chat(&s.admin, agent, say("trace-1", "CALL get-sum {\"a\": 19, \"b\": 23}"))
        .await
        .events();
    assert_eq!(kinds(&events)[..2], ["tool_call", "tool_result"], "{events:?}");
    assert!(joined(&events, "text").contains("42"), "{events:?}");
    shared::telemetry::flush().await;

    let all = spans_of_chat(&phoenix, &project).await;
    let root = all
        .iter()
        .find(|s| s["name"] == "POST /api/agent/{agentId}/chat")
        .unwrap_or_else(|| panic!("no server span of the chat among {}", names(&all)));
    // The chat's trace (the set-up requests before it have traces of their own).
    let spans: Vec<Value> = all.iter().filter(|s| trace_id(s) == trace_id(root)).cloned().collect();
    let by_id: HashMap<&str, &Value> = spans.iter().map(|s| (span_id(s), s)).collect();
    let attr = |s: &Value, key: &str| s["attributes"][key].clone();
    assert_eq!(attr(root, "http.route"), "/api/agent/{agentId}/chat");
    assert_eq!(attr(root, "http.response.status_code"), 200);
    assert!(attr(root, "user.id").is_number(), "{root}");
    // Every span hangs below the server span.
    let under_root = |s: &Value| {
        let mut at = s;
        while let Some(parent) = at["parent_id"].as_str() {
            if parent == span_id(root) {
                return true;
            }
            match by_id.get(parent) {
                Some(p) => at = *p,
                None => return false,
            }
        }
        false
    };
    for s in spans.iter().filter(|s| span_id(s) != span_id(root)) {
        assert!(under_root(s), "{} is not below the request span", s["name"]);
    }
    let named = |name: &str| spans.iter().filter(|s| s["name"] == name).collect::<Vec<_>>();
    assert_eq!(named("knowledge_retrieval").len(), 1, "{}", names(&spans));
    assert_eq!(attr(named("knowledge_retrieval")[0], "rag.id"), kb);
    assert_eq!(named("memory_recall").len(), 1, "{}", names(&spans));
    let tool = named("execute_tool get-sum");
    assert_eq!(tool.len(), 1, "{}", names(&spans));
    assert_eq!(attr(tool[0], "mcp.server.id"), server);
    assert_eq!(attr(tool[0], "mcp.transport"), "stdio");
    assert_eq!(attr(tool[0], "tool.outcome"), "ok");
    // Two chat calls of the turn (the one asking for the tool, the one answering; the
    // conversation's title is another kind of call) and the embeddings.
    let chats: Vec<_> = named("chat chat-agent")
        .into_iter()
        .filter(|c| attr(c, "call.kind") == "chat")
        .collect();
    assert_eq!(chats.len(), 2, "{}", names(&spans));
    for c in &chats {
        assert_eq!(attr(c, "gen_ai.operation.name"), "chat");
        assert_eq!(attr(c, "gen_ai.request.model"), "chat-agent");
        assert!(attr(c, "gen_ai.response.time_to_first_chunk_ms").is_number(), "{c}");
    }
    assert!(!named("embeddings emb-8").is_empty(), "{}", names(&spans));
    // Token counts equal what was stored for the model.
    let traced: i64 = chats
        .iter()
        .map(|c| {
            attr(c, "gen_ai.usage.input_tokens").as_i64().unwrap()
                + attr(c, "gen_ai.usage.output_tokens").as_i64().unwrap()
        })
        .sum();
    let stored: i64 = sqlx::query_scalar(
        "SELECT sum(prompt_tokens + completion_tokens)::BIGINT FROM model_usage WHERE model_id = $1 AND call_kind = 'chat'",
    )
    .bind(chat)
    .fetch_one(&s.app.db)
    .await
    .unwrap();
    assert_eq!(traced, stored);
}

/// The project's spans once the chat's server span has arrived (the exporter sends in batches).
async fn spans_of_chat(phoenix: &str, project: &str) -> Vec<Value> {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let reply = client
            .get(format!("{phoenix}/v1/projects/{project}/spans?limit=1000"))
            .timeout(Duration::from_secs(10))
            .send()
            .await;
        if let Ok(reply) = reply {
            if reply.status().is_success() {
                let body: Value = reply.json().await.expect("spans JSON");
                let spans = body["data"].as_array().cloned().unwrap_or_default();
                let done = spans.iter().any(|s| s["name"] == "POST /api/agent/{agentId}/chat");
                if done {
                    return spans;
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "Phoenix at {phoenix} has no chat trace in project {project} after 60 s"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn span_id(s: &Value) -> &str {
    s["context"]["span_id"].as_str().expect("span id")
}

fn trace_id(s: &Value) -> &str {
    s["context"]["trace_id"].as_str().expect("trace id")
}

fn names(spans: &[Value]) -> String {
    spans
        .iter()
        .map(|s| s["name"].as_str().unwrap_or("?"))
        .collect::<Vec<_>>()
        .join(", ")
}
