//! `/agent`: management, permissions, market, subscriptions, chat models and the creation stream.

use api_tests::chat::ChatSetup;
use serde_json::{json, Value};

#[tokio::test]
async fn agents_are_created_read_changed_and_deleted() {
    let s = ChatSetup::new().await;
    let t = Some(s.admin.as_str());
    let model = s.chat_model("chat-echo", json!({})).await;
    let id = s
        .agent(
            &s.admin,
            json!({ "name": " Helper ", "description": "Helps", "instruction": "Be brief.", "greeting": "Hi!",
                    "presetQuestions": ["What can you do?"], "chatModelId": model, "avatar": "🦊" }),
        )
        .await;

    let a = s.app.get(&format!("/agent/{id}"), t).await;
    let a = a.assert_ok();
    assert_eq!(a["name"], "Helper", "trimmed");
    assert_eq!(a["chatModel"], "chat-echo");
    assert_eq!(a["presetQuestions"], json!(["What can you do?"]));
    assert_eq!(a["shortTermMemorySize"], 20, "default window");
    assert_eq!(a["status"], 1);
    assert_eq!(a["viewCount"], 1, "a detail view counts");
    assert_eq!(a["mcpServers"], json!([]));
    assert_eq!(a["skills"], json!([]));
    assert_eq!(a["creator"], "admin");
    let again = s.app.get(&format!("/agent/{id}"), t).await;
    assert_eq!(again.assert_ok()["viewCount"], 2);

    let all = json!({ "name": "Helper 2", "description": "d", "instruction": "i", "greeting": "g",
        "presetQuestions": ["a", "b"], "avatar": "🐼", "chatModelId": model, "mcpEnabled": true, "skillEnabled": true,
        "webSearchEnabled": true, "ragEnabled": true, "memoryEnabled": true, "shortTermMemorySize": 4,
        "isFeatured": true, "status": 0 });
    let u = s.app.put(&format!("/agent/{id}"), t, &all).await;
    let u = u.assert_ok();
    for (k, v) in all.as_object().unwrap() {
        assert_eq!(&u[k], v, "field {k} updated");
    }
    // Absent fields are kept; an explicit null clears a reference.
    let u = s
        .app
        .put(&format!("/agent/{id}"), t, &json!({ "chatModelId": null }))
        .await;
    assert_eq!(u.assert_ok()["chatModelId"], Value::Null);
    assert_eq!(u.assert_ok()["name"], "Helper 2");
    // A null list is cleared too, as by [].
    let u = s
        .app
        .put(
            &format!("/agent/{id}"),
            t,
            &json!({ "presetQuestions": null, "mcpServerIds": null, "skillIds": null }),
        )
        .await;
    let u = u.assert_ok();
    assert_eq!(
        (&u["presetQuestions"], &u["mcpServerIds"], &u["skillIds"]),
        (&json!([]), &json!([]), &json!([]))
    );

    let d = s.app.delete(&format!("/agent/{id}"), t).await;
    d.assert_ok();
    s.app
        .get(&format!("/agent/{id}"), t)
        .await
        .assert_error(404, 404, "agent not found");
}

/// What an agent already points at is not judged again by an edit of something else: a model
/// disabled since blocked renaming the agent. Named anew, it is refused.
#[tokio::test]
async fn an_edit_is_not_refused_for_a_reference_it_does_not_change() {
    let s = ChatSetup::new().await;
    let t = Some(s.admin.as_str());
    let model = s.chat_model("chat-echo", json!({})).await;
    let id = s.agent(&s.admin, json!({ "name": "Kept", "chatModelId": model })).await;
    s.app
        .put(&format!("/ai-model/config/{model}/disable"), t, &json!({}))
        .await
        .assert_status_ok();
    let renamed = s
        .app
        .put(&format!("/agent/{id}"), t, &json!({ "name": "Renamed" }))
        .await;
    assert_eq!(
        (
            renamed.assert_ok()["name"].as_str(),
            renamed.data()["chatModelId"].as_i64()
        ),
        (Some("Renamed"), Some(model))
    );
    let other = s.agent(&s.admin, json!({ "name": "Other" })).await;
    s.app
        .put(&format!("/agent/{other}"), t, &json!({ "chatModelId": model }))
        .await
        .assert_error(400, 0, "chatModelId");
}

#[tokio::test]
async fn every_bad_field_is_refused_by_name_and_nothing_changes() {
    let s = ChatSetup::new().await;
    let t = Some(s.admin.as_str());
    let embedding = s.embedding_model("emb-8").await;
    let id = s.agent(&s.admin, json!({ "name": "Stable" })).await;
    let before = s.app.get(&format!("/agent/{id}"), t).await.assert_ok().clone();
    let cases = [
        (json!({ "name": "  " }), "name must be 1 to 100"),
        (json!({ "name": "x".repeat(101) }), "name must be 1 to 100"),
        (json!({ "chatModelId": embedding }), "chatModelId"),
        (json!({ "chatModelId": 999_999 }), "chatModelId"),
        (
            json!({ "ragId": 999_999 }),
            "ragId: knowledge base 999999 does not exist",
        ),
        (json!({ "appId": "nope" }), "appId: app nope does not exist"),
        (
            json!({ "presetQuestions": vec!["q"; 11] }),
            "presetQuestions may hold at most 10",
        ),
        (json!({ "presetQuestions": ["ok", " "] }), "presetQuestions[1]"),
        (
            json!({ "shortTermMemorySize": 500 }),
            "shortTermMemorySize must be between 0 and 200",
        ),
        (json!({ "status": 2 }), "status must be 1"),
        (json!({ "description": "d".repeat(1001) }), "description must be"),
        (json!({ "name": "a\u{1}b" }), "name must not contain control characters"),
        (
            json!({ "avatar": "a\nb" }),
            "avatar must not contain control characters",
        ),
        (
            json!({ "description": "a\u{1b}[31m" }),
            "description must not contain control characters other than line breaks and tabs",
        ),
        (
            json!({ "presetQuestions": ["a\u{7}"] }),
            "presetQuestions[0] must not contain",
        ),
        (json!({ "shortTermMemorySize": "many" }), "shortTermMemorySize"),
        (
            json!({ "mcpServerIds": (1..=21).collect::<Vec<i64>>() }),
            "mcpServerIds may hold at most 20 ids, not 21",
        ),
        (
            json!({ "skillIds": (1..=51).collect::<Vec<i64>>() }),
            "skillIds may hold at most 50 ids, not 51",
        ),
    ];
    for (body, needle) in cases {
        let r = s.app.put(&format!("/agent/{id}"), t, &body).await;
        r.assert_error(400, 0, needle);
    }
    // The view count moved by the reads only.
    let mut after = s.app.get(&format!("/agent/{id}"), t).await.assert_ok().clone();
    after["viewCount"] = before["viewCount"].clone();
    assert_eq!(after, before);

    let agents = s.app.count("agents").await;
    s.app
        .post("/agent", t, &json!({ "description": "no name" }))
        .await
        .assert_error(400, 0, "name is required");
    s.app
        .post("/agent", t, &json!({ "name": "x", "chatModelId": embedding }))
        .await
        .assert_error(400, 0, "chatModelId");
    assert_eq!(s.app.count("agents").await, agents);
}

#[tokio::test]
async fn users_see_enabled_agents_and_change_only_their_own() {
    let s = ChatSetup::new().await;
    let (_, alice) = s.app.regular_user("alice").await;
    let (_, bob) = s.app.regular_user("bob").await;
    let public = s.agent(&s.admin, json!({ "name": "Public" })).await;
    let hidden = s.agent(&s.admin, json!({ "name": "Hidden", "status": 0 })).await;
    let mine = s.agent(&alice, json!({ "name": "Alice's", "status": 0 })).await;

    s.app.get(&format!("/agent/{public}"), Some(&alice)).await.assert_ok();
    s.app
        .get(&format!("/agent/{hidden}"), Some(&alice))
        .await
        .assert_error(404, 404, "agent");
    s.app.get(&format!("/agent/{mine}"), Some(&alice)).await.assert_ok();
    s.app
        .get(&format!("/agent/{mine}"), Some(&bob))
        .await
        .assert_error(404, 404, "agent");
    s.app.get(&format!("/agent/{mine}"), Some(&s.admin)).await.assert_ok();

    let r = s
        .app
        .put(
            &format!("/agent/{public}"),
            Some(&alice),
            &json!({ "name": "Mine now" }),
        )
        .await;
    r.assert_error(403, 403, "creator or an administrator");
    s.app
        .delete(&format!("/agent/{public}"), Some(&alice))
        .await
        .assert_error(403, 403, "creator");
    let r = s
        .app
        .put(&format!("/agent/{mine}"), Some(&alice), &json!({ "isFeatured": true }))
        .await;
    r.assert_error(403, 403, "only administrators may feature");
    s.app
        .put(&format!("/agent/{mine}"), Some(&alice), &json!({ "name": "Renamed" }))
        .await
        .assert_ok();

    let page = s.app.get("/agent/page?size=50", Some(&alice)).await;
    let names: Vec<&str> = page.assert_ok()["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Renamed", "Public"], "enabled agents and her own, newest first");
    let page = s.app.get("/agent/page", Some(&s.admin)).await;
    assert_eq!(page.assert_ok()["total"], 3, "administrators see all");
    // A user's PERSONAL chat model is not usable by another user.
    let personal = s.chat_model("chat-echo", json!({ "scope": "PERSONAL" })).await;
    let r = s
        .app
        .put(
            &format!("/agent/{mine}"),
            Some(&alice),
            &json!({ "chatModelId": personal }),
        )
        .await;
    r.assert_error(400, 0, "chatModelId");
}

#[tokio::test]
async fn page_filters_and_sorts_and_the_market_puts_featured_first() {
    let s = ChatSetup::new().await;
    let t = Some(s.admin.as_str());
    let a = s
        .agent(&s.admin, json!({ "name": "Alpha writer", "description": "writes" }))
        .await;
    let b = s
        .agent(&s.admin, json!({ "name": "Beta", "description": "a coding helper" }))
        .await;
    let c = s.agent(&s.admin, json!({ "name": "Gamma", "isFeatured": true })).await;
    for _ in 0..3 {
        s.app.get(&format!("/agent/{b}"), t).await.assert_ok();
    }
    s.app.get(&format!("/agent/{a}"), t).await.assert_ok();

    let ids = |r: &api_tests::Reply| -> Vec<i64> {
        r.assert_ok()["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["id"].as_i64().unwrap())
            .collect()
    };
    assert_eq!(ids(&s.app.get("/agent/page", t).await), [c, b, a]);
    assert_eq!(ids(&s.app.get("/agent/page?sort=popular", t).await), [b, a, c]);
    assert_eq!(ids(&s.app.get("/agent/page?keyword=CODING", t).await), [b]);
    assert_eq!(ids(&s.app.get("/agent/page?featured=true", t).await), [c]);
    let paged = s.app.get("/agent/page?page=2&size=2", t).await;
    assert_eq!(paged.assert_ok()["total"], 3);
    assert_eq!(ids(&paged), [a]);
    s.app
        .get("/agent/page?sort=oldest", t)
        .await
        .assert_error(400, 0, "sort");

    let market = s.app.get("/agent/market", t).await;
    let m: Vec<i64> = market
        .assert_ok()
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_i64().unwrap())
        .collect();
    assert_eq!(m, [c, b, a], "featured first, then the most viewed");
    let first = &market.assert_ok()[0];
    for key in [
        "id",
        "name",
        "description",
        "avatar",
        "creator",
        "viewCount",
        "subscribed",
    ] {
        assert!(first.get(key).is_some(), "market entries carry {key}");
    }

    // Not paged, so bounded: the first 500 in its order, whoever made the rest.
    sqlx::query("INSERT INTO agents (name, creator_id) SELECT 'filler ' || n, 1 FROM generate_series(1, 500) n")
        .execute(&s.app.db)
        .await
        .unwrap();
    let market = s.app.get("/agent/market", t).await;
    let listed = market.assert_ok().as_array().unwrap();
    assert_eq!(listed.len(), shared::agents::repo::MARKET_MAX as usize);
    assert_eq!(
        listed[..2]
            .iter()
            .map(|a| a["id"].as_i64().unwrap())
            .collect::<Vec<_>>(),
        [c, b]
    );
}

#[tokio::test]
async fn subscriptions_are_idempotent_and_fill_my_agents() {
    let s = ChatSetup::new().await;
    let (_, alice) = s.app.regular_user("alice").await;
    let t = Some(alice.as_str());
    let shared = s.agent(&s.admin, json!({ "name": "Shared" })).await;
    let disabled = s.agent(&s.admin, json!({ "name": "Off", "status": 0 })).await;
    let own = s.agent(&alice, json!({ "name": "Own" })).await;

    for _ in 0..2 {
        s.app
            .post(&format!("/agent/{shared}/subscribe"), t, &json!({}))
            .await
            .assert_ok();
    }
    assert_eq!(s.app.count("agent_subscriptions").await, 1);
    let my = s.app.get("/agent/my", t).await;
    let names: Vec<&str> = my
        .assert_ok()
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 2);
    assert!(names.contains(&"Shared") && names.contains(&"Own"));
    let market = s.app.get("/agent/market", t).await;
    let entry = market
        .assert_ok()
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == shared)
        .cloned()
        .unwrap();
    assert_eq!(entry["subscribed"], true);

    s.app
        .post(&format!("/agent/{disabled}/subscribe"), Some(&s.admin), &json!({}))
        .await
        .assert_error(400, 0, "disabled");
    s.app
        .post(&format!("/agent/{disabled}/subscribe"), t, &json!({}))
        .await
        .assert_error(404, 404, "agent");
    for _ in 0..2 {
        s.app.delete(&format!("/agent/{shared}/subscribe"), t).await.assert_ok();
    }
    assert_eq!(s.app.count("agent_subscriptions").await, 0);
    let my = s.app.get("/agent/my", t).await;
    assert_eq!(my.assert_ok().as_array().unwrap()[0]["id"], own);
}

/// A subscriber no longer sees an agent its creator disabled, in its detail or among their
/// agents (whose entries carry the instruction and every reference); it comes back when
/// enabled again, and an administrator sees it throughout.
#[tokio::test]
async fn my_agents_hide_a_subscribed_agent_while_it_is_disabled() {
    let s = ChatSetup::new().await;
    let (_, alice) = s.app.regular_user("alice").await;
    let t = Some(alice.as_str());
    let shared = s.agent(&s.admin, json!({ "name": "Shared" })).await;
    for token in [t, Some(s.admin.as_str())] {
        s.app
            .post(&format!("/agent/{shared}/subscribe"), token, &json!({}))
            .await
            .assert_ok();
    }
    async fn listed_for(app: &api_tests::TestApp, token: Option<&str>, id: i64) -> bool {
        let my = app.get("/agent/my", token).await;
        my.assert_ok().as_array().unwrap().iter().any(|a| a["id"] == id)
    }
    let listed = |token| listed_for(&s.app, token, shared);
    assert!(listed(t).await);
    let set_status = |status: i64| {
        let app = &s.app;
        let admin = s.admin.clone();
        async move {
            app.put(&format!("/agent/{shared}"), Some(&admin), &json!({ "status": status }))
                .await
                .assert_ok();
        }
    };
    set_status(0).await;
    s.app
        .get(&format!("/agent/{shared}"), t)
        .await
        .assert_error(404, 404, "agent");
    assert!(!listed(t).await, "hidden from the subscriber");
    assert!(listed(Some(&s.admin)).await, "administrators see every agent");
    set_status(1).await;
    assert!(listed(t).await, "the subscription was kept");
}

/// A disabled agent is hidden from its subscribers, but not their own part of it: they can
/// unsubscribe, and list, read and delete their conversations with it (all answered 404, and
/// the subscription came back with the agent).
#[tokio::test]
async fn a_subscriber_leaves_a_disabled_agent_and_keeps_their_conversations() {
    let s = ChatSetup::new().await;
    let model = s.chat_model("chat-echo", json!({})).await;
    let (alice_id, alice) = s.app.regular_user("alice").await;
    s.set_quota(alice_id, 100_000).await;
    let t = Some(alice.as_str());
    let shared = s
        .agent(&s.admin, json!({ "name": "Shared", "chatModelId": model }))
        .await;
    let path = |p: &str| format!("/agent/{shared}{p}");
    s.app.post(&path("/subscribe"), t, &json!({})).await.assert_ok();
    s.chat(&alice, shared, api_tests::chat::say("mine", "hello"))
        .await
        .events();
    let status = |status: i64| json!({ "status": status });
    let admin = Some(s.admin.as_str());
    s.app.put(&path(""), admin, &status(0)).await.assert_ok();

    s.app.delete(&path("/subscribe"), t).await.assert_ok();
    let list = s.app.get(&path("/conversations"), t).await;
    assert_eq!(list.assert_ok()["total"], 1);
    let later = s
        .app
        .get(&path("/conversations?start=2999-01-01&end=2999-12-31"), t)
        .await;
    assert_eq!(
        later.assert_ok()["total"],
        0,
        "none in the period, not an unknown agent"
    );
    let messages = s.app.get(&path("/conversation/mine/messages"), t).await;
    assert_eq!(messages.assert_ok().as_array().unwrap().len(), 2);
    s.app.delete(&path("/conversation/mine"), t).await.assert_ok();
    s.app
        .get(&path("/conversations"), t)
        .await
        .assert_error(404, 404, "agent");

    s.app.put(&path(""), admin, &status(1)).await.assert_ok();
    let my = s.app.get("/agent/my", t).await;
    assert!(
        !my.assert_ok().as_array().unwrap().iter().any(|a| a["id"] == shared),
        "the subscription ended"
    );
}

#[tokio::test]
async fn chat_models_lists_enabled_chat_models_with_capabilities() {
    let s = ChatSetup::new().await;
    let vision = s
        .chat_model(
            "chat-echo",
            json!({ "configJson": { "capabilities": ["vision", "tools"] } }),
        )
        .await;
    let off = s.chat_model("chat-think", json!({})).await;
    s.app
        .put(&format!("/ai-model/config/{off}/disable"), Some(&s.admin), &json!({}))
        .await;
    s.embedding_model("emb-8").await;
    let r = s.app.get("/agent/chat-models", Some(&s.admin)).await;
    let options = r.assert_ok().as_array().unwrap().clone();
    assert_eq!(options.len(), 1, "{options:?}");
    assert_eq!(options[0]["id"], vision);
    assert_eq!(options[0]["value"], "chat-echo");
    assert_eq!(options[0]["label"], "chat-echo model");
    assert_eq!(options[0]["capabilities"], json!(["vision", "tools"]));
}

async fn create_stream(s: &ChatSetup, body: Value) -> (u16, String) {
    create_stream_as(s, &s.admin, body).await
}

async fn create_stream_as(s: &ChatSetup, token: &str, body: Value) -> (u16, String) {
    let resp = s
        .app
        .client
        .post(s.app.url("/agent/create/stream"))
        .header("Svc-Auth", token)
        .json(&body)
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

/// An agent saved while its knowledge base is being deleted waits for the deletion and is
/// refused by name: it wrote the deleted base's id back and failed on the foreign key (500).
#[tokio::test]
async fn an_agent_saved_while_its_knowledge_base_is_deleted_is_refused_by_name() {
    let s = ChatSetup::new().await;
    let t = Some(s.admin.as_str());
    let embedding = s.embedding_model("emb-8").await;
    let body = json!({ "name": "kb", "embeddingModelId": embedding });
    let kb = s.app.post("/rag", t, &body).await.assert_ok()["id"].as_i64().unwrap();
    let agent = s
        .agent(&s.admin, json!({ "name": "Support", "ragEnabled": true, "ragId": kb }))
        .await;
    let (path, renamed) = (format!("/agent/{agent}"), json!({ "name": "Renamed" }));
    let edit = s.app.put(&path, t, &renamed);
    let edited = api_tests::while_deleted(&s.app.db, "knowledge_bases", kb, edit).await;
    edited.assert_error(400, 0, &format!("ragId: {kb} was deleted meanwhile"));
    let a = s.app.get(&format!("/agent/{agent}"), t).await;
    assert_eq!(a.assert_ok()["name"], "Support", "nothing written");
}

#[tokio::test]
async fn the_creation_stream_announces_each_field_then_creates_the_agent() {
    let s = ChatSetup::new().await;
    let model = s.chat_model("chat-drafter", json!({ "isDefault": true })).await;
    let (status, body) = create_stream(&s, json!({ "description": "an assistant that plans trips" })).await;
    assert_eq!(status, 200);
    let lines: Vec<&str> = body.lines().collect();
    assert_eq!(lines[0], "[START]");
    assert_eq!(lines[1], "[FIELD_DONE]name:Trip Planner");
    assert_eq!(lines[2], "[FIELD_DONE]description:Plans trips \"end to end\".");
    assert_eq!(
        lines[3], "[FIELD_DONE]instruction:You plan trips.\\nAsk about the budget first.",
        "a newline in a value is escaped so each signal stays on one line"
    );
    assert_eq!(lines[4], "[FIELD_DONE]greeting:Where to?");
    assert_eq!(lines[5], "[FIELD_DONE]avatar:✈️");
    let id: i64 = lines[6].strip_prefix("[DONE]").expect("done line").parse().unwrap();
    assert_eq!(lines.len(), 7);
    let a = s.app.get(&format!("/agent/{id}"), Some(&s.admin)).await;
    let a = a.assert_ok();
    assert_eq!(a["instruction"], "You plan trips.\nAsk about the budget first.");
    assert_eq!(a["avatar"], "✈️");
    assert_eq!(a["chatModelId"], model);
}

/// A draft whose values the agent cannot hold as written (too long, a NUL) is fitted to it:
/// the creation failed at the end of the paid draft.
#[tokio::test]
async fn a_draft_past_the_agents_limits_is_fitted_to_them() {
    let s = ChatSetup::new().await;
    s.chat_model("chat-drafter-long", json!({ "isDefault": true })).await;
    let (status, body) = create_stream(&s, json!({ "description": "a talkative assistant" })).await;
    assert_eq!(status, 200);
    let last = body.lines().last().unwrap_or_default();
    let id: i64 = last.strip_prefix("[DONE]").expect(&body).parse().unwrap();
    let a = s.app.get(&format!("/agent/{id}"), Some(&s.admin)).await;
    let a = a.assert_ok();
    assert_eq!(a["description"].as_str().unwrap().chars().count(), 1000);
    assert_eq!(a["greeting"], "Hi there");
}

#[tokio::test]
async fn a_failed_draft_ends_with_an_error_and_creates_nothing() {
    let s = ChatSetup::new().await;
    let (status, _) = create_stream(&s, json!({ "description": "anything" })).await;
    assert_eq!(status, 400, "no default chat model is refused before streaming");
    s.chat_model("chat-drafter-bad", json!({ "isDefault": true })).await;
    let (status, body) = create_stream(&s, json!({ "description": "anything" })).await;
    assert_eq!(status, 200);
    let lines: Vec<&str> = body.lines().collect();
    assert_eq!(lines[0], "[START]");
    assert!(
        lines[1].starts_with("[ERROR]") && lines[1].contains("no name"),
        "{body}"
    );
    assert_eq!(s.app.count("agents").await, 0);
    let (status, _) = create_stream(&s, json!({ "description": " " })).await;
    assert_eq!(status, 400);

    // A model failing mid-draft: what its endpoint said is told to whoever configured the
    // model, not to a user drafting with the administrator's default model.
    s.chat_model("chat-error", json!({ "isDefault": true })).await;
    let (alice_id, alice) = s.app.regular_user("alice").await;
    s.set_quota(alice_id, 100_000).await;
    let (_, owner) = create_stream(&s, json!({ "description": "anything" })).await;
    let (_, user) = create_stream_as(&s, &alice, json!({ "description": "anything" })).await;
    assert!(owner.contains("[ERROR]") && owner.contains("overloaded"), "{owner}");
    assert!(
        user.contains("[ERROR]the model call failed: ") && !user.contains("overloaded"),
        "{user}"
    );
    assert_eq!(s.app.count("agents").await, 0);
    let r = s.app.post("/agent/create/stream", Some(&s.admin), &json!({})).await;
    r.assert_error(400, 0, "description is required");
}

/// A draft slower than the turn's limit ends with an [ERROR] saying so: it ran on until Lambda
/// ended the stream with neither [DONE] nor [ERROR].
#[tokio::test]
async fn a_draft_past_its_time_limit_ends_with_an_error() {
    let s = ChatSetup::with(api_tests::Store::Filesystem, &[("CHAT_TURN_TIMEOUT_SECS", "1")]).await;
    s.chat_model("chat-slow", json!({ "isDefault": true })).await;
    let description = "a planner for long weekends of walking in the mountains with friends";
    let (status, body) = create_stream(&s, json!({ "description": description })).await;
    assert_eq!(status, 200);
    let last = body.lines().last().unwrap();
    assert!(
        last.starts_with("[ERROR]") && last.contains("drafting passed its time limit of 1 s"),
        "{body}"
    );
    assert_eq!(s.app.count("agents").await, 0);
    // An endpoint that never sends its headers is within the limit too, its retries included.
    let provider = s.app.provider(&s.admin, "silent").await;
    let url = format!("http://{}/v1", api_tests::silent_listener().await);
    let silent = s
        .app
        .model(
            &s.admin,
            provider,
            "CHAT",
            "chat-echo",
            &url,
            json!({ "timeoutSecs": 600 }),
        )
        .await;
    s.app
        .put(
            &format!("/ai-model/switch-default/{silent}"),
            Some(&s.admin),
            &json!({}),
        )
        .await
        .assert_status_ok();
    let (_, body) = create_stream(&s, json!({ "description": description })).await;
    assert!(body.contains("[ERROR]drafting passed its time limit of 1 s"), "{body}");
}

/// An agent is written as it was read: an edit made from a row that changed meanwhile (a
/// status change, an MCP server or skill taken out of it) writes nothing instead of undoing
/// that change, and the API answers 409.
#[tokio::test]
async fn an_edit_made_from_a_stale_read_writes_nothing() {
    let s = ChatSetup::new().await;
    let id = s.agent(&s.admin, json!({ "name": "Before" })).await;
    let read = shared::agents::repo::find(&s.app.db, id, 0).await.unwrap().unwrap();
    s.app
        .put(&format!("/agent/{id}"), Some(&s.admin), &json!({ "status": 0 }))
        .await
        .assert_ok();
    let mut stale = shared::agents::repo::AgentData::from(&read);
    stale.name = "Stale".to_owned();
    let written = shared::agents::repo::update(&s.app.db, id, read.update_dt, &stale)
        .await
        .unwrap();
    assert!(!written, "a write from a stale read is refused");
    let now = shared::agents::repo::find(&s.app.db, id, 0).await.unwrap().unwrap();
    assert_eq!(
        (now.name.as_str(), now.status),
        ("Before", 0),
        "the status change stands"
    );
    let fresh = shared::agents::repo::AgentData::from(&now);
    assert!(shared::agents::repo::update(&s.app.db, id, now.update_dt, &fresh)
        .await
        .unwrap());
}

/// A regular user creates at most AGENT_MAX_PER_USER agents; a refusal writes nothing, deleting
/// one makes room, and administrators are not counted.
#[tokio::test]
async fn a_regular_user_creates_at_most_agent_max_per_user_agents() {
    let s = ChatSetup::with(api_tests::Store::Filesystem, &[("AGENT_MAX_PER_USER", "2")]).await;
    let (_, alice) = s.app.regular_user("alice").await;
    let first = s.agent(&alice, json!({ "name": "One" })).await;
    s.agent(&alice, json!({ "name": "Two" })).await;
    let agents = s.app.count("agents").await;
    s.app
        .post("/agent", Some(&alice), &json!({ "name": "Three" }))
        .await
        .assert_error(400, 0, "limit of 2 agents (AGENT_MAX_PER_USER)");
    // Before the draft's paid model call.
    s.app
        .post(
            "/agent/create/stream",
            Some(&alice),
            &json!({ "description": "a helper" }),
        )
        .await
        .assert_error(400, 0, "limit of 2 agents");
    assert_eq!(s.app.count("agents").await, agents, "a refusal writes nothing");
    s.app.delete(&format!("/agent/{first}"), Some(&alice)).await.assert_ok();
    s.agent(&alice, json!({ "name": "Three" })).await;
    for name in ["A1", "A2", "A3"] {
        s.agent(&s.admin, json!({ "name": name })).await;
    }
}

/// An edit that finds its agent deleted meanwhile answers 404: the 409 it gave said to reload
/// the agent, and reloading found nothing.
#[tokio::test]
async fn an_edit_of_an_agent_deleted_meanwhile_answers_404() {
    let s = ChatSetup::new().await;
    let id = s.agent(&s.admin, json!({ "name": "Gone" })).await;
    let (path, body) = (format!("/agent/{id}"), json!({ "name": "Renamed" }));
    let edit = s.app.put(&path, Some(&s.admin), &body);
    let reply = api_tests::while_deleted(&s.app.db, "agents", id, edit).await;
    reply.assert_error(404, 404, "agent not found");
}
