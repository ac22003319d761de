//! The real function binaries under a Lambda runtime emulator: API Gateway proxy events in,
//! responses out (one of them streamed), an SQS batch with a bad message through a worker, and
//! the traces both send to a real Phoenix before Lambda may freeze them.

use std::time::Duration;

use api_tests::chat::{joined, kinds, ndjson, ChatSetup};
use api_tests::lambda_emulator::{binary, function_env, rest_event, sqs_event, with_traceparent, Answer, Emulator};
use api_tests::phoenix::{self, is_below, names, trace_id};
use api_tests::{KbSetup, Store, TestApp};
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

/// Behind API Gateway the links the service hands out carry the address clients call, the
/// stage included: a path from the host's root would miss it (403 from API Gateway).
#[tokio::test]
async fn links_under_lambda_carry_the_api_gateway_stage() {
    let s = ChatSetup::new().await;
    let uploaded = s.app.upload_resource(&s.admin, "a.txt", b"text".to_vec(), None).await;
    let id = uploaded.assert_ok()["id"].as_i64().unwrap();
    let f = Emulator::start(binary("resource-api"), &function_env(&s.app)).await;
    let page = rest_event("GET", "/api/resource/page", &[("svc-auth", &s.admin)], None);
    let (status, body) = json_answer(f.invoke(page).await);
    assert_eq!(status, 200, "{body}");
    let domain = api_tests::lambda_emulator::API_DOMAIN;
    assert_eq!(
        body["data"]["data"][0]["accessUrl"],
        format!("https://{domain}/prod/api/resource/{id}/preview"),
        "{body}"
    );
}

/// A custom domain mapping the API under a base path leaves that path in the event's (API
/// Gateway strips only the stage): routes are still found, and links carry the base path.
#[tokio::test]
async fn a_custom_domain_with_a_base_path_reaches_the_routes_and_its_links_keep_it() {
    let s = ChatSetup::new().await;
    let uploaded = s.app.upload_resource(&s.admin, "a.txt", b"text".to_vec(), None).await;
    let id = uploaded.assert_ok()["id"].as_i64().unwrap();
    let f = Emulator::start(binary("resource-api"), &function_env(&s.app)).await;
    let mut page = rest_event("GET", "/v1/api/resource/page", &[("svc-auth", &s.admin)], None);
    page["requestContext"]["domainName"] = json!("api.example.com");
    page["requestContext"]["path"] = json!("/v1/api/resource/page");
    page["queryStringParameters"] = json!({ "page": "1" });
    page["multiValueQueryStringParameters"] = json!({ "page": ["1"] });
    let (status, body) = json_answer(f.invoke(page).await);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["data"]["data"][0]["accessUrl"],
        format!("https://api.example.com/v1/api/resource/{id}/preview"),
        "{body}"
    );
    // A base path named `api`.
    let mut page = rest_event("GET", "/api/api/resource/page", &[("svc-auth", &s.admin)], None);
    page["requestContext"]["domainName"] = json!("api.example.com");
    let (status, body) = json_answer(f.invoke(page).await);
    assert_eq!(status, 200, "{body}");
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

/// One chat with a new agent through the real `agent-chat` binary started with `env(app)`:
/// the function (still running) and its answer's prelude and lines.
async fn chat_on_lambda(
    s: &ChatSetup,
    env: Vec<(String, String)>,
    conversation: &str,
) -> (Emulator, Value, Vec<Value>) {
    let model = s.chat_model("chat-think", json!({})).await;
    let agent = s
        .agent(&s.admin, json!({ "name": "Lambda", "chatModelId": model }))
        .await;
    let f = Emulator::start(binary("agent-chat"), &env).await;
    let body = json!({ "conversationId": conversation, "content": "hi from lambda" });
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
    let lines = ndjson(&String::from_utf8_lossy(&body));
    (f, prelude, lines)
}

#[tokio::test]
async fn a_chat_streams_through_the_streaming_function() {
    let s = ChatSetup::new().await;
    let (_f, prelude, events) = chat_on_lambda(&s, function_env(&s.app), "lambda-1").await;
    assert_eq!(prelude["statusCode"], 200);
    assert_eq!(prelude["headers"]["content-type"], "application/x-ndjson");
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

/// A document whose stages do not finish within its invocation fails for good, saying so, and
/// its message is not handed back: a second invocation of the same length would stop there
/// again. The worker keeps 65 s of an invocation (5 s to answer, 60 s for the final write), so
/// one of 68 s leaves 3 s, and the document's 400 sections take seven embedding calls of a
/// second each.
#[tokio::test]
async fn an_ingest_run_out_of_time_fails_its_document_and_is_not_retried() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let kb = s.kb("Slow KB", json!({})).await;
    let text: String = (0..400)
        .map(|i| format!("# Part {i}\n\nSection {i} of the notes.\n\n"))
        .collect();
    let commit = s.upload(kb, &[("notes.md", text.into_bytes())]).await;
    let doc = commit.assert_ok()["items"][0]["id"].as_i64().expect("document id");
    s.settled(doc).await;
    let run = s.requeue(doc).await;
    s.embed_slowly(kb).await;

    let f = Emulator::start(binary("ingest-worker"), &function_env(&s.app)).await;
    let event = sqs_event(&[("late", json!({ "documentId": doc, "runId": run }).to_string())]);
    let Answer::Json(answer) = f.invoke_for(event, Duration::from_secs(68)).await else {
        panic!("the worker answers with a batch response");
    };
    assert_eq!(answer, json!({ "batchItemFailures": [] }));
    let (status, stage, message): (String, Option<String>, Option<String>) =
        sqlx::query_as("SELECT status, error_stage, error_message FROM documents WHERE id = $1")
            .bind(doc)
            .fetch_one(&s.app.db)
            .await
            .unwrap();
    assert_eq!((status.as_str(), stage.as_deref()), ("failed", Some("embedding")));
    let message = message.unwrap_or_default();
    assert!(
        message.starts_with("processing did not finish in the ")
            && message.contains(" s one worker run may take; split the document"),
        "{message}"
    );
    assert!(s.chunk_texts(doc).await.is_empty(), "nothing was indexed");
}

/// `function_env` exporting traces to the test Phoenix, into `project`.
fn traced_env(app: &TestApp, project: &str) -> Vec<(String, String)> {
    let mut env = function_env(app);
    env.push(("OTEL_EXPORTER_OTLP_ENDPOINT".into(), phoenix::url()));
    env.push((
        "OTEL_RESOURCE_ATTRIBUTES".into(),
        format!("openinference.project.name={project}"),
    ));
    env
}

/// Lambda may freeze a function as soon as an invocation has returned, and so does this test
/// (SIGSTOP): the spans can reach Phoenix afterwards only if they were sent before the answer
/// ended. The exporter's own schedule would wait five seconds.
#[tokio::test]
async fn a_streamed_chat_on_lambda_has_sent_its_trace_when_the_invocation_returns() {
    let s = ChatSetup::new().await;
    let project = phoenix::new_project("lambda-chat");
    let (f, prelude, events) = chat_on_lambda(&s, traced_env(&s.app, &project), "lambda-trace").await;
    assert_eq!(prelude["statusCode"], 200);
    assert_eq!(kinds(&events).last().map(String::as_str), Some("done"));
    f.freeze();

    let route = "POST /api/agent/{agentId}/chat";
    let spans = phoenix::spans_once(&project, route, Duration::from_secs(30)).await;
    let root = spans.iter().find(|s| s["name"] == route).unwrap();
    assert_eq!(root["attributes"]["http.response.status_code"], 200);
    let chat = spans
        .iter()
        .find(|s| s["name"] == "chat chat-think" && s["attributes"]["call.kind"] == "chat")
        .unwrap_or_else(|| panic!("no model call among {}", names(&spans)));
    assert!(
        is_below(&spans, chat, root),
        "the model call is not below the request span"
    );
    assert!(
        chat["attributes"]["gen_ai.usage.output_tokens"].as_i64().unwrap() > 0,
        "{chat}"
    );
}

/// A worker continues the trace of whoever queued the message (its `traceparent` attribute)
/// and has sent its spans when the invocation returns.
#[tokio::test]
async fn a_queued_message_on_lambda_continues_the_trace_that_queued_it() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let kb = s.kb("Traced KB", json!({})).await;
    let commit = s
        .upload(kb, &[("notes.txt", b"Traces follow the message.".to_vec())])
        .await;
    let doc = commit.assert_ok()["items"][0]["id"].as_i64().expect("document id");
    s.settled(doc).await;
    let run = s.requeue(doc).await;

    let project = phoenix::new_project("lambda-queue");
    let f = Emulator::start(binary("ingest-worker"), &traced_env(&s.app, &project)).await;
    // A trace of its own (Phoenix files a trace id under the first project that sent it).
    let sender_trace = uuid::Uuid::new_v4().simple().to_string();
    let sender_span = &uuid::Uuid::new_v4().simple().to_string()[..16];
    let event = with_traceparent(
        sqs_event(&[("traced", json!({ "documentId": doc, "runId": run }).to_string())]),
        &format!("00-{sender_trace}-{sender_span}-01"),
    );
    let Answer::Json(answer) = f.invoke(event).await else {
        panic!("the worker answers with a batch response");
    };
    assert_eq!(answer, json!({ "batchItemFailures": [] }));
    f.freeze();

    let spans = phoenix::spans_once(&project, "process_message", Duration::from_secs(30)).await;
    let process = spans.iter().find(|s| s["name"] == "process_message").unwrap();
    assert_eq!(trace_id(process), sender_trace);
    assert_eq!(process["parent_id"], sender_span);
    assert_eq!(process["attributes"]["messaging.message.id"], "traced");
    let embedded = spans
        .iter()
        .any(|s| s["name"].as_str().is_some_and(|n| n.starts_with("embeddings")) && is_below(&spans, s, process));
    assert!(
        embedded,
        "no embeddings call below the worker's span: {}",
        names(&spans)
    );
    assert!(spans.iter().all(|s| trace_id(s) == sender_trace), "{}", names(&spans));
}

/// A buffered function's answer past what one Lambda answer holds (6 MB, its body escaped into
/// a JSON string) is refused with 413 saying so, where API Gateway would answer a bare 502
/// after the work was done: a page of a hundred agents with 20,000-character instructions of
/// four bytes a character (8 MB).
#[tokio::test]
async fn a_page_past_one_lambda_answer_is_refused_with_a_smaller_one_answered() {
    let s = ChatSetup::new().await;
    let instruction = "😀".repeat(20_000);
    for i in 0..100 {
        s.agent(
            &s.admin,
            json!({ "name": format!("Long {i}"), "instruction": instruction }),
        )
        .await;
    }
    let f = Emulator::start(binary("agent-api"), &function_env(&s.app)).await;
    let page = |size: &str| {
        let mut event = rest_event("GET", "/api/agent/page", &[("svc-auth", &s.admin)], None);
        event["queryStringParameters"] = json!({ "size": size });
        event["multiValueQueryStringParameters"] = json!({ "size": [size] });
        event
    };
    let (status, body) = json_answer(f.invoke(page("100")).await);
    assert_eq!((status, body["code"].as_i64()), (413, Some(413)), "{body}");
    assert!(body["msg"].as_str().unwrap().contains("fewer items a page"), "{body}");
    let (status, body) = json_answer(f.invoke(page("50")).await);
    assert_eq!(status, 200);
    assert_eq!(body["data"]["data"].as_array().unwrap().len(), 50);
    // A HEAD of the large page answers nothing, which fits.
    let mut head = page("100");
    head["httpMethod"] = json!("HEAD");
    head["requestContext"]["httpMethod"] = json!("HEAD");
    let Answer::Json(v) = f.invoke(head).await else {
        panic!("expected a buffered answer");
    };
    assert_eq!(v["statusCode"], 200, "{v}");
}
