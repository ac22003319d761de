//! Token quotas under concurrent chats: tokens are held before each model call and settled to
//! what it used, so concurrent turns can never spend more than the quota.

use api_tests::chat::{say, ChatReply, ChatSetup};
use futures::future::join_all;
use serde_json::json;

#[tokio::test]
async fn concurrent_chats_never_spend_more_than_the_quota_and_the_refused_store_nothing() {
    const QUOTA: i64 = 400;
    const CHATS: usize = 12;
    let s = ChatSetup::new().await;
    // Slow answers keep every turn's tokens held while the others arrive.
    let model = s
        .chat_model("chat-slow", json!({ "configJson": { "maxTokens": 40 } }))
        .await;
    let agent = s.agent(&s.admin, json!({ "name": "Slow", "chatModelId": model })).await;
    let (alice_id, alice) = s.app.regular_user("alice").await;
    s.set_quota(alice_id, QUOTA).await;

    let replies = join_all((0..CHATS).map(|i| {
        let (s, alice) = (&s, &alice);
        async move {
            (
                i,
                s.chat(alice, agent, say(&format!("q-{i}"), "tell me four words")).await,
            )
        }
    }))
    .await;

    let mut answered = vec![];
    let mut refused = vec![];
    for (i, reply) in replies {
        match reply {
            ChatReply::Events(events) => answered.push((i, events)),
            ChatReply::Refused(r) => {
                r.assert_error(403, 403, "token quota is used up");
                refused.push(i);
            }
        }
    }
    assert!(
        !answered.is_empty() && !refused.is_empty(),
        "answered {} refused {}",
        answered.len(),
        refused.len()
    );
    // The answered ones ran to the end (their hold covered the whole turn).
    for (i, events) in &answered {
        assert_eq!(events.last().unwrap()["type"], "done", "chat {i}: {events:?}");
    }
    // Every model call was capped at what it held.
    assert!(s
        .models
        .requests()
        .iter()
        .all(|r| r["max_tokens"].as_u64().is_some_and(|m| m <= 40)));
    // Refused chats stored nothing: no conversation, no message.
    let keys: Vec<String> = sqlx::query_scalar("SELECT conversation_key FROM conversations ORDER BY conversation_key")
        .fetch_all(&s.app.db)
        .await
        .unwrap();
    let mut expected: Vec<String> = answered.iter().map(|(i, _)| format!("q-{i}")).collect();
    expected.sort();
    assert_eq!(keys, expected);
    assert_eq!(s.app.count("messages").await, 2 * answered.len() as i64);

    // Background settling (titles, stream meters) finishes within moments; on a loaded
    // machine it can take seconds, so wait up to 15 s for it (the assertions are unchanged).
    let mut last = (i64::MIN, i64::MIN);
    for _ in 0..150 {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let now = s.tokens_left_and_used(alice_id).await;
        if now == last && now.0 + now.1 == QUOTA {
            break;
        }
        last = now;
    }
    let (left, used) = last;
    assert!(left >= 0, "tokens left {left}");
    assert!(used <= QUOTA, "the model calls used {used} tokens of a {QUOTA} quota");
    assert_eq!(
        QUOTA - left,
        used,
        "charged exactly what the calls used, every hold settled"
    );
    println!(
        "quota {QUOTA}: {} of {CHATS} concurrent chats answered, {} refused, {used} tokens used, {left} left",
        answered.len(),
        refused.len()
    );
}

/// A regular user's call is capped (`max_tokens`) by what its config asks for, else by the
/// quota's reserve, and by what is left when that is less: an answer's length is what a quota
/// holds, so it is always sent.
#[tokio::test]
async fn a_regular_users_call_is_capped_by_its_config_the_reserve_or_what_is_left() {
    let s = ChatSetup::new().await;
    let plain = s.chat_model("chat-echo", json!({})).await;
    let capped = s
        .chat_model("chat-echo", json!({ "configJson": { "maxTokens": 300 } }))
        .await;
    let (alice_id, alice) = s.app.regular_user("alice").await;
    let max_tokens_sent = |model: i64, quota: i64| {
        let (s, alice) = (&s, &alice);
        async move {
            s.set_quota(alice_id, quota).await;
            let agent = s
                .agent(
                    &s.admin,
                    json!({ "name": format!("A{model}-{quota}"), "chatModelId": model }),
                )
                .await;
            let before = s.models.requests().len();
            let events = s
                .chat(alice, agent, say(&format!("c-{model}-{quota}"), "hello"))
                .await
                .events();
            assert_eq!(events.last().unwrap()["type"], "done", "{events:?}");
            let sent = s.models.requests()[before..]
                .iter()
                .find(|r| r["model"] == "chat-echo" && r["stream"] == true)
                .cloned()
                .expect("the turn's call");
            sent.get("max_tokens").and_then(|m| m.as_u64())
        }
    };
    assert_eq!(max_tokens_sent(plain, 1_000_000).await, Some(8192), "the reserve");
    let left = max_tokens_sent(plain, 3_000).await.expect("capped by what is left");
    assert!((1..3_000).contains(&left), "{left}");
    assert_eq!(
        max_tokens_sent(capped, 1_000_000).await,
        Some(300),
        "the config's own cap"
    );
}

/// Every model call of a knowledge base is charged (security review item 12): they used to
/// be recorded only, so a user at zero quota spent the operator's GLOBAL models by uploading,
/// searching and testing. Now nothing runs on an empty quota, and with tokens each call costs.
#[tokio::test]
async fn knowledge_base_model_calls_are_charged_and_an_empty_quota_spends_nothing() {
    let s = api_tests::KbSetup::new(api_tests::Store::Filesystem, &[]).await;
    let app = &s.app;
    let (bob_id, bob) = app.regular_user("bob").await;
    let b = Some(bob.as_str());
    let tokens = || async {
        sqlx::query_scalar::<_, i64>("SELECT tokens FROM users WHERE id = $1")
            .bind(bob_id)
            .fetch_one(&app.db)
            .await
            .unwrap()
    };
    let model = s.embedding_model;
    // At zero: no dimension probe, no connectivity test, and nothing reached the model.
    let before = app.snapshot().await;
    app.post("/rag", b, &json!({ "name": "probe", "embeddingModelId": model }))
        .await
        .assert_error(400, 0, "the dimension could not be probed (your token quota is used up");
    app.post(&format!("/ai-model/config/{model}/test"), b, &json!({}))
        .await
        .assert_status_error(403, 403, "token quota is used up");
    app.snapshot()
        .await
        .assert_unchanged_since(&before, "refused model calls");
    assert!(s.models.requests().is_empty(), "the model was called");
    // A base whose dimension is given is made without the model when the quota cannot pay for
    // the dimension's check; its documents need the model.
    let rag = app
        .post(
            "/rag",
            b,
            &json!({ "name": "b", "embeddingModelId": model, "dimensionOfVectorModel": 8 }),
        )
        .await
        .assert_ok()["id"]
        .as_i64()
        .unwrap();
    let committed = app
        .upload_documents(&bob, rag, &[("a.txt", b"Quotas pay for embeddings too.".to_vec())])
        .await;
    let doc = committed.assert_ok()["items"][0]["id"].as_i64().unwrap();
    failed_for_quota(&app.settled_document(&bob, doc).await);
    assert!(s.models.requests().is_empty(), "the model was called");
    // Q&A on the base is refused before its stream starts, with the envelope's 403.
    let provider = app.provider(&s.admin, "answers").await;
    let chat = app
        .model(&s.admin, provider, "CHAT", "chat-echo", &s.models.base_url, json!({}))
        .await;
    app.put(
        &format!("/rag/{rag}/config"),
        b,
        &json!({ "modelParams": { "modelId": chat } }),
    )
    .await
    .assert_ok();
    app.post("/rag/qa/stream", b, &json!({ "ragId": rag, "query": "embeddings" }))
        .await
        .assert_error(403, 403, "token quota is used up");
    assert!(s.models.requests().is_empty(), "the model was called");

    // With tokens, the same document indexes and its embeddings cost; so does a search.
    sqlx::query("UPDATE users SET tokens = 10000, totals = 10000 WHERE id = $1")
        .bind(bob_id)
        .execute(&app.db)
        .await
        .unwrap();
    app.post(&format!("/document/{doc}/reprocess"), b, &json!({}))
        .await
        .assert_ok();
    assert_eq!(app.settled_document(&bob, doc).await["status"], "success");
    let after_ingest = tokens().await;
    assert!(after_ingest < 10_000, "ingestion charged nothing");
    app.post("/rag/search", b, &json!({ "ragId": rag, "query": "embeddings" }))
        .await
        .assert_ok();
    assert!(
        tokens().await < after_ingest,
        "the search's query embedding charged nothing"
    );

    // A call that cannot be capped (an embedding) is refused when what is left cannot cover it
    // whole: taking the little left, it ran whole and cost at most twice that.
    sqlx::query("UPDATE users SET tokens = 5 WHERE id = $1")
        .bind(bob_id)
        .execute(&app.db)
        .await
        .unwrap();
    let calls = s.models.requests().len();
    let long = "embeddings ".repeat(300);
    app.post("/rag/search", b, &json!({ "ragId": rag, "query": long }))
        .await
        .assert_error(403, 403, "5 tokens left");
    assert_eq!(s.models.requests().len(), calls, "the model was called");
    // Given back before the answer: a task of its own may never run under Lambda once the
    // refusal is answered.
    assert_eq!(tokens().await, 5);
}

/// A document its payer's quota could not pay to embed.
fn failed_for_quota(doc: &serde_json::Value) {
    assert_eq!(
        (doc["status"].as_str(), doc["errorStage"].as_str()),
        (Some("failed"), Some("embedding")),
        "{doc}"
    );
    let told = doc["errorMessage"].as_str().unwrap();
    assert!(told.contains("token quota is used up"), "{doc}");
}

/// A document run again is paid for by whoever asks for it: billed to the uploader, a base's
/// owner could reprocess, as often as they liked, a document an administrator had uploaded into
/// their base, on the administrator's unlimited quota.
#[tokio::test]
async fn a_reprocess_is_paid_for_by_whoever_asks() {
    let s = api_tests::KbSetup::new(api_tests::Store::Filesystem, &[]).await;
    let app = &s.app;
    let (bob_id, bob) = app.regular_user("bob").await;
    let base = json!({ "name": "b", "embeddingModelId": s.embedding_model, "dimensionOfVectorModel": 8 });
    let rag = app.post("/rag", Some(&bob), &base).await.assert_ok()["id"]
        .as_i64()
        .unwrap();
    // The administrator's upload into bob's base is the administrator's to pay.
    let committed = app
        .upload_documents(&s.admin, rag, &[("a.txt", b"Reprocessing is paid for.".to_vec())])
        .await;
    let doc = committed.assert_ok()["items"][0]["id"].as_i64().unwrap();
    assert_eq!(app.settled_document(&bob, doc).await["status"], "success");
    // bob, at zero tokens, asks for it again: his to pay, and he cannot.
    app.post(&format!("/document/{doc}/reprocess"), Some(&bob), &json!({}))
        .await
        .assert_ok();
    failed_for_quota(&app.settled_document(&bob, doc).await);
    let charged: Vec<Option<i64>> =
        sqlx::query_scalar("SELECT user_id FROM model_usage WHERE call_kind = 'embedding' ORDER BY id")
            .fetch_all(&app.db)
            .await
            .unwrap();
    assert!(
        !charged.contains(&Some(bob_id)),
        "bob's refused run made no call: {charged:?}"
    );
    // The administrator asking again pays again.
    app.post(&format!("/document/{doc}/reprocess"), Some(&s.admin), &json!({}))
        .await
        .assert_ok();
    assert_eq!(app.settled_document(&bob, doc).await["status"], "success");
}

/// A buffered call its caller gives up on (a worker's invocation ending, an ingest stage's or a
/// chat turn's deadline) is recorded and charged its input, as one cut at its own limit is:
/// dropped with its hold alone, it was free and left no record.
#[tokio::test]
async fn a_call_given_up_by_its_caller_is_recorded_and_charged() {
    use shared::models::client::{ChatMessage, ChatRequest};
    use shared::models::gateway::{self, Billing};
    let app = api_tests::spawn(api_tests::Store::Filesystem).await;
    let admin = app.admin_token().await;
    let (id, _) = app.regular_user("cut").await;
    app.set_tokens(id, 100_000).await;
    let model = app
        .silent_model(&admin, "CHAT", "chat-echo", json!({ "scope": "GLOBAL" }))
        .await;
    let handle = gateway::load(&app.state, model, shared::models::ModelType::Chat)
        .await
        .unwrap();
    let req = ChatRequest {
        messages: vec![ChatMessage::user("words ".repeat(700))],
        ..ChatRequest::default()
    };
    let call = gateway::chat(&app.state, &handle, Billing::User(id), "title", &req);
    let given_up = tokio::time::timeout(std::time::Duration::from_millis(300), call).await;
    assert!(given_up.is_err(), "the silent model answered");
    let recorded = || async {
        sqlx::query_as::<_, (Option<String>, i64)>("SELECT error, prompt_tokens FROM model_usage WHERE user_id = $1")
            .bind(id)
            .fetch_optional(&app.db)
            .await
            .unwrap()
    };
    let limit = std::time::Duration::from_secs(10);
    api_tests::wait_for(limit, async || recorded().await.is_some()).await;
    let (error, prompt) = recorded().await.unwrap();
    assert!(error.is_some_and(|e| e.contains("given up")), "recorded as given up");
    assert!(prompt >= 1_000, "{prompt} prompt tokens recorded for 4,200 characters");
    // The hold is settled to what was recorded, after the record.
    api_tests::wait_for(limit, async || app.tokens_of(id).await == 100_000 - prompt).await;
}

/// A call estimated at no tokens is still held one: a user with tokens left is not told the
/// quota is used up, one at zero is.
#[tokio::test]
async fn a_hold_of_nothing_is_refused_only_when_nothing_is_left() {
    use shared::models::quota::Hold;
    let app = api_tests::spawn(api_tests::Store::Filesystem).await;
    let (id, _) = app.regular_user("zed").await;
    sqlx::query("UPDATE users SET tokens = 0 WHERE id = $1")
        .bind(id)
        .execute(&app.db)
        .await
        .unwrap();
    assert!(Hold::take(&app.db, id, 0).await.is_err(), "at zero: refused");
    sqlx::query("UPDATE users SET tokens = 10 WHERE id = $1")
        .bind(id)
        .execute(&app.db)
        .await
        .unwrap();
    assert!(Hold::take(&app.db, id, 0).await.is_ok(), "with tokens left: held");
}

/// A hold's call dropped at any moment (a client leaving mid-turn) leaves the quota whole once
/// its hold is gone: a top-up cut after its statement took tokens and before the answer was
/// read lost them for good. Cut at a spread of moments, so some fall inside that round trip,
/// and once after the answer was sent but before it was read.
#[tokio::test]
async fn holds_cut_at_any_moment_give_every_token_back() {
    use shared::models::quota::Hold;
    use std::time::Duration;
    let app = api_tests::spawn(api_tests::Store::Filesystem).await;
    let (id, _) = app.regular_user("cut").await;
    sqlx::query("UPDATE users SET tokens = 100000 WHERE id = $1")
        .bind(id)
        .execute(&app.db)
        .await
        .unwrap();
    let tokens = || async {
        sqlx::query_scalar::<_, i64>("SELECT tokens FROM users WHERE id = $1")
            .bind(id)
            .fetch_one(&app.db)
            .await
            .unwrap()
    };
    // Whole again, and staying so: a cut call's statement may still be on its way, and gives
    // its tokens back after it lands.
    let whole_again = || async {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        let mut steady = 0;
        while steady < 10 && tokio::time::Instant::now() < deadline {
            steady = if tokens().await == 100000 { steady + 1 } else { 0 };
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        steady == 10
    };
    for micros in (0..3000).step_by(10) {
        let mut hold = Hold::take(&app.db, id, 100).await.unwrap();
        let cut = tokio::time::timeout(Duration::from_micros(micros), hold.top_up(5000)).await;
        let taken = Hold::take(&app.db, id, 10);
        let second = tokio::time::timeout(Duration::from_micros(micros), taken).await;
        drop((hold, cut, second));
    }
    assert!(whole_again().await, "tokens lost: {} left", tokens().await);
    // Polled once, left until its answer was sent, then dropped unread.
    let mut hold = Hold::take(&app.db, id, 100).await.unwrap();
    {
        let mut top_up = Box::pin(hold.top_up(5000));
        assert!(futures::poll!(&mut top_up).is_pending());
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    drop(hold);
    assert!(whole_again().await, "tokens lost: {} left", tokens().await);
}
