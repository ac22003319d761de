//! Traces, exported over OTLP to a real Arize Phoenix and read back through its REST API.
//!
//! Its own test binary: the process's tracing subscriber (and so its exporter) is installed
//! once, from the environment this test sets before anything else runs.

use std::time::Duration;

use api_tests::chat::{joined, kinds, say, ChatSetup};
use api_tests::phoenix::{self, is_below, names, span_id, trace_id};
use serde_json::{json, Value};

const CHAT_ROUTE: &str = "POST /api/agent/{agentId}/chat";

/// A streamed chat with a knowledge base, memory and an MCP tool is one trace: the request's
/// server span, and below it the retrieval, the recall, each model call with the GenAI
/// attributes and the tool call, with token counts equal to the stored usage.
#[tokio::test]
async fn a_streamed_chat_is_one_trace_of_retrieval_recall_model_and_tool_spans() {
    let endpoint = phoenix::url();
    let project = phoenix::new_project("chat-trace");
    // Set before the subscriber is built (the first and only test of this binary).
    std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint);
    std::env::set_var("OTEL_SERVICE_NAME", "agent-platform");
    std::env::set_var(
        "OTEL_RESOURCE_ATTRIBUTES",
        format!("openinference.project.name={project}"),
    );
    std::env::set_var("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true");
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
    // An MCP server over HTTP that answers the traceparent each call carried in its `_meta`.
    let echo = api_tests::mcp_servers::guarded(&["none"]).await;
    let echo_server = s
        .mcp_server(json!({ "name": "trace echo", "transportType": 2, "endpoint": echo.url("/mcp") }))
        .await;
    let agent = s
        .agent(
            &s.admin,
            json!({ "name": "Traced", "chatModelId": chat, "ragEnabled": true, "ragId": kb,
                    "memoryEnabled": true, "memoryConfigId": memory, "mcpEnabled": true,
                    "mcpServerIds": [server, echo_server] }),
        )
        .await;

    let events = s
        .chat(&s.admin, agent, say("trace-1", "CALL get-sum {\"a\": 19, \"b\": 23}"))
        .await
        .events();
    assert_eq!(kinds(&events)[..2], ["tool_call", "tool_result"], "{events:?}");
    assert!(joined(&events, "text").contains("42"), "{events:?}");
    // What the first chat's calls stored, before the second chat adds its own.
    let stored: i64 = sqlx::query_scalar(
        "SELECT sum(prompt_tokens + completion_tokens)::BIGINT FROM model_usage WHERE model_id = $1 AND call_kind = 'chat'",
    )
    .bind(chat)
    .fetch_one(&s.app.db)
    .await
    .unwrap();
    let echoed = s
        .chat(&s.admin, agent, say("trace-2", "CALL trace_parent {}"))
        .await
        .events();
    let echoed = joined(&echoed, "text");
    shared::telemetry::flush().await;

    let all = phoenix::spans_once(&project, CHAT_ROUTE, Duration::from_secs(60)).await;
    let root = all
        .iter()
        .filter(|s| s["name"] == CHAT_ROUTE)
        .min_by_key(|s| s["start_time"].as_str().unwrap_or_default().to_owned())
        .unwrap_or_else(|| panic!("no server span of the chat among {}", names(&all)));
    // The chat's trace (the set-up requests before it have traces of their own).
    let spans: Vec<Value> = all.iter().filter(|s| trace_id(s) == trace_id(root)).cloned().collect();
    let attr = |s: &Value, key: &str| s["attributes"][key].clone();
    assert_eq!(attr(root, "http.route"), "/api/agent/{agentId}/chat");
    assert_eq!(attr(root, "http.response.status_code"), 200);
    assert!(attr(root, "user.id").is_number(), "{root}");
    // Every span hangs below the server span.
    for s in spans.iter().filter(|s| span_id(s) != span_id(root)) {
        assert!(is_below(&spans, s, root), "{} is not below the request span", s["name"]);
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
    assert_eq!(traced, stored);

    // Prompt and answer text, turned on for this process: the question in the first call's
    // input, the tool's sum in the answering call's output.
    let content = |c: &Value, key: &str| attr(c, key).as_str().unwrap_or_default().to_owned();
    assert!(
        chats
            .iter()
            .any(|c| content(c, "gen_ai.input.messages").contains("CALL get-sum")),
        "{chats:?}"
    );
    assert!(
        chats
            .iter()
            .any(|c| content(c, "gen_ai.output.messages").contains("42")),
        "{chats:?}"
    );

    // The MCP server got the trace in the call's `_meta`: this chat's trace, the tool span as parent.
    let echo_chat = all
        .iter()
        .filter(|s| s["name"] == CHAT_ROUTE && trace_id(s) != trace_id(root))
        .map(trace_id)
        .next()
        .unwrap_or_else(|| panic!("no second chat among {}", names(&all)));
    let echo_tool = all
        .iter()
        .find(|s| s["name"] == "execute_tool trace_parent" && trace_id(s) == echo_chat)
        .unwrap_or_else(|| panic!("no trace_parent tool span among {}", names(&all)));
    assert!(
        echoed.contains(&format!("00-{echo_chat}-{}-", span_id(echo_tool))),
        "the MCP server saw {echoed:?}, not trace {echo_chat} with parent {}",
        span_id(echo_tool)
    );

    // Ingestion, queued by the commit of the upload, worked in the commit's trace: the worker's
    // span below the commit's server span, the document's embeddings below the worker's span.
    let process = all
        .iter()
        .find(|s| s["name"] == "process_message")
        .unwrap_or_else(|| panic!("no queue worker span among {}", names(&all)));
    let queued_by = all
        .iter()
        .find(|s| trace_id(s) == trace_id(process) && s["parent_id"].is_null())
        .unwrap_or_else(|| panic!("the worker's trace has no root among {}", names(&all)));
    assert_eq!(queued_by["name"], "POST /api/document/upload/commit");
    assert!(
        all.iter()
            .any(|s| s["name"] == "embeddings emb-8" && is_below(&all, s, process)),
        "no embeddings call below the worker's span"
    );
}
