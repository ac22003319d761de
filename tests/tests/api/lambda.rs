//! The real function binaries under a Lambda runtime emulator: API Gateway proxy events in,
//! responses out (one of them streamed), and an SQS batch with a bad message through a worker.

use api_tests::chat::{joined, kinds, ndjson, ChatSetup};
use api_tests::lambda_emulator::{binary, function_env, rest_event, sqs_event, Answer, Emulator};
use api_tests::{KbSetup, Store};
use serde_json::{json, Value};

fn json_answer(answer: Answer) -> (u16, Value) {
    let Answer::Json(v) = answer else {
        panic!("expected a buffered answer, got {answer:?}");
    };
    let status = v["statusCode"].as_u64().expect("statusCode") as u16;
    let body = v["body"]
        .as_str()
        .map(|b| serde_json::from_str(b).expect("JSON body"))
        .unwrap_or(Value::Null);
    (status, body)
}

#[tokio::test]
async fn the_template_keeps_the_stage_out_of_request_paths() {
    let template = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../infra/template.yaml")).unwrap();
    assert!(
        template.contains("AWS_LAMBDA_HTTP_IGNORE_STAGE_IN_PATH: \"true\""),
        "routes are matched without the stage name, as the emulated functions run"
    );
}

#[tokio::test]
async fn api_gateway_events_reach_the_user_function() {
    let s = ChatSetup::new().await;
    let f = Emulator::start(binary("user-api"), &function_env(&s.app)).await;
    f.init_time().await;
    let login = json!({ "username": api_tests::ADMIN_USERNAME, "password": api_tests::ADMIN_PASSWORD });
    let (status, body) = json_answer(
        f.invoke(rest_event(
            "POST",
            "/api/user/login",
            &[("content-type", "application/json")],
            Some(&login),
        ))
        .await,
    );
    assert_eq!(status, 200, "{body}");
    let token = body["data"]["token"].as_str().expect("token").to_owned();
    let (status, me) = json_answer(
        f.invoke(rest_event("GET", "/api/user", &[("svc-auth", &token)], None))
            .await,
    );
    assert_eq!(status, 200);
    assert_eq!(me["data"]["username"], "admin");
    let (status, body) = json_answer(f.invoke(rest_event("GET", "/api/user", &[], None)).await);
    assert_eq!((status, body["code"].as_i64()), (401, Some(401)));
}

/// Under Lambda the login throttle counts by API Gateway's source IP, whatever
/// `X-Forwarded-For` says: five failures lock that address for the account, another address
/// still logs in.
#[tokio::test]
async fn logins_are_throttled_by_the_api_gateway_source_ip() {
    let s = ChatSetup::new().await;
    let f = Emulator::start(binary("user-api"), &function_env(&s.app)).await;
    f.init_time().await;
    let login = |password: &str, forwarded: &str| {
        let body = json!({ "username": api_tests::ADMIN_USERNAME, "password": password });
        rest_event(
            "POST",
            "/api/user/login",
            &[("content-type", "application/json"), ("x-forwarded-for", forwarded)],
            Some(&body),
        )
    };
    for i in 0..5 {
        let (status, body) = json_answer(f.invoke(login("wrong", &format!("192.0.2.{i}"))).await);
        assert_eq!(status, 401, "{body}");
    }
    let (status, body) = json_answer(f.invoke(login(api_tests::ADMIN_PASSWORD, "192.0.2.99")).await);
    assert_eq!(status, 429, "{body}");
    let mut elsewhere = login(api_tests::ADMIN_PASSWORD, "192.0.2.99");
    elsewhere["requestContext"]["identity"]["sourceIp"] = json!("198.51.100.1");
    let (status, body) = json_answer(f.invoke(elsewhere).await);
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn a_chat_streams_through_the_streaming_function() {
    let s = ChatSetup::new().await;
    let model = s.chat_model("chat-think", json!({})).await;
    let agent = s
        .agent(&s.admin, json!({ "name": "Lambda", "chatModelId": model }))
        .await;
    let f = Emulator::start(binary("agent-chat"), &function_env(&s.app)).await;
    let body = json!({ "conversationId": "lambda-1", "content": "hi from lambda" });
    // API Gateway invokes the streaming function with the same REST proxy event as any other.
    let event = rest_event(
        "POST",
        &format!("/api/agent/{agent}/chat"),
        &[("svc-auth", &s.admin), ("content-type", "application/json")],
        Some(&body),
    );
    let Answer::Streamed { prelude, body } = f.invoke(event).await else {
        panic!("the chat answer is streamed");
    };
    assert_eq!(prelude["statusCode"], 200);
    assert_eq!(prelude["headers"]["content-type"], "application/x-ndjson");
    let events = ndjson(&String::from_utf8_lossy(&body));
    assert_eq!(kinds(&events).last().map(String::as_str), Some("done"));
    assert_eq!(joined(&events, "text"), "You said: hi from lambda");
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM messages WHERE status = 1")
        .fetch_one(&s.app.db)
        .await
        .unwrap();
    assert_eq!(stored, 2);
}

#[tokio::test]
async fn the_ingest_worker_reports_the_bad_message_of_a_batch_and_does_the_good_one() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let kb = s.kb("Lambda KB", json!({})).await;
    let commit = s
        .upload(kb, &[("notes.txt", b"Lambda functions run the pipeline.".to_vec())])
        .await;
    let doc = commit.assert_ok()["items"][0]["id"].as_i64().expect("document id");
    s.settled(doc).await;
    let run = s.requeue(doc).await;

    let f = Emulator::start(binary("ingest-worker"), &function_env(&s.app)).await;
    let event = sqs_event(&[
        ("good", json!({ "documentId": doc, "runId": run }).to_string()),
        ("bad", "not a message".to_owned()),
    ]);
    let Answer::Json(answer) = f.invoke(event).await else {
        panic!("the worker answers with a batch response");
    };
    assert_eq!(answer, json!({ "batchItemFailures": [{ "itemIdentifier": "bad" }] }));
    let status: String = sqlx::query_scalar("SELECT status FROM documents WHERE id = $1")
        .bind(doc)
        .fetch_one(&s.app.db)
        .await
        .unwrap();
    assert_eq!(status, "success");
    assert!(
        !s.chunk_texts(doc).await.is_empty(),
        "the worker indexed the document again"
    );
}
