//! `/openapi/v1`: app credentials, external users, subscriptions, conversations, uploads,
//! streamed and synchronous chat, embed tokens and the embeddable chat page.

use std::time::Duration;

use api_tests::apps::Creds;
use api_tests::browser::Browser;
use api_tests::chat::{joined, kinds, ndjson, ChatSetup};
use api_tests::{Reply, Store, TestApp, PNG};
use base64::Engine as _;
use serde_json::{json, Value};

const GIF: &[u8] = b"GIF89a\x01\x00\x01\x00\x00\x00\x00;";

struct Ext {
    s: ChatSetup,
    crm: Creds,
    erp: Creds,
    /// Enabled, bound to no app.
    open_agent: i64,
}

impl Ext {
    async fn new() -> Self {
        Self::with(Store::Filesystem, &[]).await
    }

    async fn with(store: Store, vars: &[(&str, &str)]) -> Self {
        let s = ChatSetup::with(store, vars).await;
        let model = s.chat_model("chat-echo", json!({})).await;
        let crm = s.app.create_app(&s.admin, "crm").await;
        let erp = s.app.create_app(&s.admin, "erp").await;
        let open_agent = s
            .agent(
                &s.admin,
                json!({ "name": "Helper", "chatModelId": model, "greeting": "Hi!" }),
            )
            .await;
        Self {
            s,
            crm,
            erp,
            open_agent,
        }
    }

    fn app(&self) -> &TestApp {
        &self.s.app
    }

    async fn chat(&self, creds: &Creds, body: Value) -> Result<Vec<Value>, Reply> {
        let resp = self
            .app()
            .client
            .post(self.app().url("/openapi/v1/agent/chat"))
            .header("Svc-App-Id", &creds.app_id)
            .header("Svc-Token", &creds.token)
            .json(&body)
            .send()
            .await
            .unwrap();
        read_chat(resp).await
    }

    /// Rows a refused request must not have written.
    async fn written(&self) -> Vec<i64> {
        let mut counts = vec![];
        for table in [
            "external_users",
            "external_subscriptions",
            "conversations",
            "messages",
            "resources",
            "external_resources",
            "client_nodes",
        ] {
            counts.push(self.app().count(table).await);
        }
        counts
    }
}

async fn read_chat(resp: reqwest::Response) -> Result<Vec<Value>, Reply> {
    let streamed = resp
        .headers()
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"application/x-ndjson"));
    if streamed {
        Ok(ndjson(&resp.text().await.unwrap()))
    } else {
        Err(Reply::read(resp).await)
    }
}

fn say(agent: i64, open_id: &str, conversation: &str, content: &str) -> Value {
    json!({ "agentId": agent, "openId": open_id, "conversationId": conversation, "content": content })
}

fn image(open_id: &str, bytes: &[u8]) -> Value {
    json!({ "openId": open_id, "originalName": "pic.png", "fileSize": bytes.len(),
            "content": base64::engine::general_purpose::STANDARD.encode(bytes) })
}

#[tokio::test]
async fn every_endpoint_refuses_missing_wrong_and_disabled_credentials() {
    let e = Ext::new().await;
    let agent = e.open_agent;
    e.app()
        .ext_post(&e.crm, "/user/register", &json!({ "openId": "u1" }))
        .await
        .assert_ok();
    let before = e.written().await;
    let gets = [
        "/agents".to_owned(),
        format!("/agent?agentId={agent}"),
        "/user?openId=u1".to_owned(),
        "/user/agents?openId=u1".to_owned(),
        format!("/agent/conversations?agentId={agent}&openId=u1"),
        format!("/agent/conversations/messages?agentId={agent}&openId=u1&conversationId=c"),
        "/embed-token?openId=u1".to_owned(),
    ];
    let posts = [
        ("/user/register", json!({ "openId": "u2" })),
        ("/user/agent", json!({ "agentId": agent, "openId": "u2" })),
        ("/agent/conversations", json!({ "agentId": agent, "openId": "u2" })),
        ("/resource/upload", image("u2", PNG)),
        ("/agent/chat", say(agent, "u2", "c", "hi")),
        ("/agent/chat/sync", say(agent, "u2", "c", "hi")),
        ("/embed-token", json!({ "openId": "u2" })),
        (
            "/node/heartbeat",
            json!({ "hostId": "n", "hostIp": "10.0.0.1", "grpcPort": 9000 }),
        ),
    ];
    let deletes = [
        format!("/user/agent?agentId={agent}&openId=u1"),
        format!("/agent/conversations?agentId={agent}&openId=u1"),
    ];
    let wrong = e.crm.token.replace(|c: char| c.is_ascii_alphabetic(), "x");
    let cases: [(Option<(&str, &str)>, &str); 5] = [
        (None, "send Svc-App-Id and Svc-Token"),
        (Some(("crm", "")), "app credentials"),
        (Some(("crm", &wrong)), "invalid"),
        (Some(("crm", &e.erp.token)), "invalid"),
        (Some(("nobody", &e.crm.token)), "invalid"),
    ];
    for (creds, needle) in cases {
        for path in &gets {
            e.app().ext_get_as(creds, path).await.assert_error(401, 401, needle);
        }
        for (path, body) in &posts {
            e.app()
                .ext_post_as(creds, path, body)
                .await
                .assert_error(401, 401, needle);
        }
        for path in &deletes {
            e.app().ext_delete_as(creds, path).await.assert_error(401, 401, needle);
        }
    }
    // A disabled app is refused with its right token.
    e.app()
        .post(
            &format!("/app/{}/toggle-status", e.crm.id),
            Some(&e.s.admin),
            &json!({}),
        )
        .await
        .assert_ok();
    let creds = Some((e.crm.app_id.as_str(), e.crm.token.as_str()));
    for path in &gets {
        e.app().ext_get_as(creds, path).await.assert_error(401, 401, "disabled");
    }
    for (path, body) in &posts {
        e.app()
            .ext_post_as(creds, path, body)
            .await
            .assert_error(401, 401, "disabled");
    }
    for path in &deletes {
        e.app()
            .ext_delete_as(creds, path)
            .await
            .assert_error(401, 401, "disabled");
    }
    assert_eq!(e.written().await, before);
}

#[tokio::test]
async fn apps_see_unbound_agents_and_their_own_but_not_others_or_disabled_ones() {
    let e = Ext::new().await;
    let a = |body| e.s.agent(&e.s.admin, body);
    let crm_only = a(json!({ "name": "CRM bot", "appId": "crm" })).await;
    let erp_only = a(json!({ "name": "ERP bot", "appId": "erp" })).await;
    let off = a(json!({ "name": "Off", "status": 0 })).await;

    let names = |r: Reply| -> Vec<String> {
        r.assert_ok()
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let mut crm_names = names(e.app().ext_get(&e.crm, "/agents").await);
    crm_names.sort();
    assert_eq!(crm_names, ["CRM bot", "Helper"]);
    let mut erp_names = names(e.app().ext_get(&e.erp, "/agents").await);
    erp_names.sort();
    assert_eq!(erp_names, ["ERP bot", "Helper"]);
    // Not paged, so bounded: every user's agents could otherwise fill it past Lambda's answer.
    // The app's own come first, however popular the platform's others are.
    sqlx::query(
        "INSERT INTO agents (name, creator_id, is_featured, view_count)
         SELECT 'filler ' || n, 1, true, 1000 + n FROM generate_series(1, 300) n",
    )
    .execute(&e.app().db)
    .await
    .unwrap();
    let listed = names(e.app().ext_get(&e.crm, "/agents").await);
    assert_eq!(listed.len(), shared::external::repo::AGENTS_MAX as usize);
    assert_eq!(listed[0], "CRM bot");
    sqlx::query("DELETE FROM agents WHERE name LIKE 'filler %'")
        .execute(&e.app().db)
        .await
        .unwrap();

    let detail = e
        .app()
        .ext_get(&e.crm, &format!("/agent?agentId={}", e.open_agent))
        .await;
    let detail = detail.assert_ok();
    assert_eq!(detail["greeting"], "Hi!");
    assert_eq!(detail["subscribed"], false);
    assert!(
        detail.get("instruction").is_none(),
        "no system prompt for partners: {detail}"
    );
    assert!(
        detail.get("creator").is_none(),
        "nor the creator's login name (an embed token reads this too): {detail}"
    );
    assert_eq!(
        e.app()
            .ext_get(&e.crm, &format!("/agent?agentId={crm_only}"))
            .await
            .assert_ok()["appId"],
        "crm"
    );
    for hidden in [erp_only, off, 999_999] {
        e.app()
            .ext_get(&e.crm, &format!("/agent?agentId={hidden}"))
            .await
            .assert_error(400, 0, "agent does not exist or is disabled");
    }
    e.app()
        .ext_get(&e.crm, "/agent")
        .await
        .assert_error(400, 0, "agentId is required");
}

#[tokio::test]
async fn external_users_register_sync_and_read() {
    let e = Ext::new().await;
    let body = json!({ "openId": "u-1", "nickname": "Ann", "avatar": "https://x/a.png", "extra": { "tier": "gold" } });
    let user = e.app().ext_post(&e.crm, "/user/register", &body).await;
    let user = user.assert_ok().clone();
    assert_eq!(user["openId"], "u-1");
    assert_eq!(user["nickname"], "Ann");
    assert_eq!(user["extra"], json!({ "tier": "gold" }));
    // Sync: sent fields change, others are kept.
    let synced = e
        .app()
        .ext_post(
            &e.crm,
            "/user/register",
            &json!({ "openId": "u-1", "nickname": "Annie" }),
        )
        .await;
    let synced = synced.assert_ok();
    assert_eq!(synced["createDt"], user["createDt"]);
    assert!(
        synced.get("id").is_none(),
        "the service's row id counts every app's users"
    );
    assert_eq!(
        (synced["nickname"].clone(), synced["avatar"].clone()),
        (json!("Annie"), json!("https://x/a.png"))
    );
    let info = e.app().ext_get(&e.crm, "/user?openId=u-1").await;
    assert_eq!(info.assert_ok()["nickname"], "Annie");
    // Users are per app: erp does not know crm's u-1.
    e.app()
        .ext_get(&e.erp, "/user?openId=u-1")
        .await
        .assert_error(404, 404, "u-1");
    assert_eq!(e.app().count("external_users").await, 1);

    for (bad, needle) in [
        (json!({}), "openId is required"),
        (json!({ "openId": "x".repeat(129) }), "openId must be 1 to 128"),
        (json!({ "openId": "u-2", "extra": [1] }), "extra must be a JSON object"),
        (json!({ "openId": "u-2", "nickname": "n".repeat(101) }), "nickname"),
    ] {
        e.app()
            .ext_post(&e.crm, "/user/register", &bad)
            .await
            .assert_error(400, 0, needle);
    }
    e.app()
        .ext_get(&e.crm, "/user")
        .await
        .assert_error(400, 0, "openId is required");
    assert_eq!(e.app().count("external_users").await, 1);
}

#[tokio::test]
async fn subscriptions_of_external_users() {
    let e = Ext::new().await;
    let agent = e.open_agent;
    let erp_only =
        e.s.agent(&e.s.admin, json!({ "name": "ERP bot", "appId": "erp" }))
            .await;
    let sub = json!({ "agentId": agent, "openId": "u-1" });
    e.app().ext_post(&e.crm, "/user/agent", &sub).await.assert_ok();
    e.app().ext_post(&e.crm, "/user/agent", &sub).await.assert_ok();
    let mine = e.app().ext_get(&e.crm, "/user/agents?openId=u-1").await;
    let mine = mine.assert_ok().as_array().unwrap().clone();
    assert_eq!(mine.len(), 1);
    assert_eq!(mine[0]["subscribed"], true);
    let listed = e.app().ext_get(&e.crm, "/agents?openId=u-1").await;
    assert_eq!(listed.assert_ok()[0]["subscribed"], true);
    let other = e.app().ext_get(&e.crm, "/user/agents?openId=u-2").await;
    assert_eq!(other.assert_ok(), &json!([]));
    assert_eq!(e.app().count("external_users").await, 1, "reads never create users");
    // Never set, or cleared with "", a field is null: unset, not empty.
    let bare = e
        .app()
        .ext_post(&e.crm, "/user/register", &json!({ "openId": "u-9" }))
        .await;
    let bare = bare.assert_ok();
    assert_eq!((&bare["nickname"], &bare["avatar"]), (&Value::Null, &Value::Null));
    let cleared = e
        .app()
        .ext_post(&e.crm, "/user/register", &json!({ "openId": "u-1", "avatar": "" }))
        .await;
    assert_eq!(cleared.assert_ok()["avatar"], Value::Null);

    let before = e.written().await;
    e.app()
        .ext_post(&e.crm, "/user/agent", &json!({ "agentId": erp_only, "openId": "u-3" }))
        .await
        .assert_error(400, 0, "agent does not exist or is disabled");
    e.app()
        .ext_post(&e.crm, "/user/agent", &json!({ "openId": "u-3" }))
        .await
        .assert_error(400, 0, "agentId is required");
    assert_eq!(e.written().await, before);

    e.app()
        .ext_delete(&e.crm, &format!("/user/agent?agentId={agent}&openId=u-1"))
        .await
        .assert_ok();
    assert_eq!(
        e.app().ext_get(&e.crm, "/user/agents?openId=u-1").await.assert_ok(),
        &json!([])
    );
    assert_eq!(e.app().count("external_subscriptions").await, 0);
}

/// An agent disabled since (or bound to another app) still answers for what an end user
/// already said to it: the partner can read and erase it. Another user, who never talked to
/// it, gets the unknown agent's answer, as before.
#[tokio::test]
async fn an_end_users_conversations_with_a_disabled_agent_can_be_read_and_erased() {
    let e = Ext::new().await;
    let agent = e.open_agent;
    e.chat(&e.crm, say(agent, "ann", "topic", "remember this"))
        .await
        .unwrap();
    e.app()
        .put(&format!("/agent/{agent}"), Some(&e.s.admin), &json!({ "status": 0 }))
        .await
        .assert_ok();
    e.chat(&e.crm, say(agent, "ann", "topic", "more"))
        .await
        .unwrap_err()
        .assert_error(400, 0, "agent does not exist or is disabled");
    let list = e
        .app()
        .ext_get(&e.crm, &format!("/agent/conversations?agentId={agent}&openId=ann"))
        .await;
    assert_eq!(list.assert_ok()["data"][0]["conversationId"], "topic");
    let messages = format!("/agent/conversations/messages?agentId={agent}&openId=ann&conversationId=topic");
    let said = e.app().ext_get(&e.crm, &messages).await;
    assert_eq!(said.assert_ok()[0]["content"], "remember this");
    e.app()
        .ext_get(&e.crm, &format!("/agent/conversations?agentId={agent}&openId=bob"))
        .await
        .assert_error(400, 0, "agent does not exist or is disabled");
    let erased = e
        .app()
        .ext_delete(&e.crm, &format!("/agent/conversations?agentId={agent}&openId=ann"))
        .await;
    assert_eq!(erased.assert_ok()["deleted"], 1);
    assert_eq!(e.app().count("messages").await, 0);
}

#[tokio::test]
async fn conversations_belong_to_one_open_id() {
    let e = Ext::new().await;
    let agent = e.open_agent;
    let made = e
        .app()
        .ext_post(
            &e.crm,
            "/agent/conversations",
            &json!({ "agentId": agent, "openId": "ann", "conversationId": "topic", "title": "Plans" }),
        )
        .await;
    let made = made.assert_ok();
    assert_eq!(
        (made["conversationId"].clone(), made["created"].clone()),
        (json!("topic"), json!(true))
    );
    let generated = e
        .app()
        .ext_post(
            &e.crm,
            "/agent/conversations",
            &json!({ "agentId": agent, "openId": "ann" }),
        )
        .await;
    assert_eq!(generated.assert_ok()["conversationId"].as_str().unwrap().len(), 36);

    // Ann and Bob both talk in a conversation called "topic"; each sees only their own.
    e.chat(&e.crm, say(agent, "ann", "topic", "ann's secret"))
        .await
        .unwrap();
    e.chat(&e.crm, say(agent, "bob", "topic", "bob's secret"))
        .await
        .unwrap();
    let r = &e;
    let msgs = move |who: &str| {
        let path = format!("/agent/conversations/messages?agentId={agent}&openId={who}&conversationId=topic");
        async move { r.app().ext_get(&r.crm, &path).await }
    };
    let ann = msgs("ann").await;
    let ann = ann.assert_ok().as_array().unwrap().clone();
    assert_eq!(ann.len(), 2);
    assert_eq!(ann[0]["content"], "ann's secret");
    assert_eq!(ann[1]["content"], "You said: ann's secret");
    // A window of them: the newest one, then the one before it.
    let base = format!("/agent/conversations/messages?agentId={agent}&openId=ann&conversationId=topic");
    let last = e.app().ext_get(&e.crm, &format!("{base}&limit=1")).await;
    assert_eq!(last.assert_ok().as_array().unwrap()[..], ann[1..]);
    let before = format!("{base}&limit=1&beforeId={}", ann[1]["id"]);
    let first = e.app().ext_get(&e.crm, &before).await;
    assert_eq!(first.assert_ok().as_array().unwrap()[..], ann[..1]);
    let bob = msgs("bob").await;
    assert!(bob.assert_ok().to_string().contains("bob's secret") && !bob.assert_ok().to_string().contains("ann"));
    msgs("carol").await.assert_error(404, 404, "conversation");
    // A stop: nothing under way in ann's conversation, and bob's "topic" is not carol's.
    let stop = |who: &str| format!("/agent/conversations/stop?agentId={agent}&openId={who}&conversationId=topic");
    let idle = e.app().ext_post(&e.crm, &stop("ann"), &json!({})).await;
    assert_eq!(idle.assert_ok()["stopped"], false);
    e.app()
        .ext_post(&e.crm, &stop("carol"), &json!({}))
        .await
        .assert_error(404, 404, "conversation");
    e.app()
        .ext_post(&e.erp, &stop("ann"), &json!({}))
        .await
        .assert_error(404, 404, "conversation");
    // The same openId in another app is another person.
    e.app()
        .ext_get(
            &e.erp,
            &format!("/agent/conversations/messages?agentId={agent}&openId=ann&conversationId=topic"),
        )
        .await
        .assert_error(404, 404, "conversation");

    let list = e
        .app()
        .ext_get(&e.crm, &format!("/agent/conversations?agentId={agent}&openId=ann"))
        .await;
    let list = list.assert_ok();
    assert_eq!(list["total"], 2);
    assert_eq!(list["data"][0]["conversationId"], "topic");
    assert_eq!(list["data"][0]["title"], "Plans");
    let fields: Vec<&String> = list["data"][0].as_object().unwrap().keys().collect();
    assert!(
        !fields
            .iter()
            .any(|f| f.as_str() == "userId" || f.as_str() == "externalUserId"),
        "the service's own user ids stay inside: {fields:?}"
    );
    let bob_list = e
        .app()
        .ext_get(&e.crm, &format!("/agent/conversations?agentId={agent}&openId=bob"))
        .await;
    assert_eq!(bob_list.assert_ok()["total"], 1);
    let nobody = e
        .app()
        .ext_get(&e.crm, &format!("/agent/conversations?agentId={agent}&openId=zed"))
        .await;
    assert_eq!(nobody.assert_ok()["total"], 0);

    // Bob cannot delete Ann's conversation; Ann deletes one, then clears the rest.
    let del = move |who: &str, one: &str| {
        let path = format!("/agent/conversations?agentId={agent}&openId={who}{one}");
        async move { r.app().ext_delete(&r.crm, &path).await }
    };
    del("carol", "&conversationId=topic")
        .await
        .assert_error(404, 404, "conversation");
    assert_eq!(e.app().count("conversations").await, 3);
    assert_eq!(del("ann", "&conversationId=topic").await.assert_ok()["deleted"], 1);
    // An id sent blank (a client filling it from an unset variable) is refused, not read as
    // "all of them".
    for blank in ["&conversationId=", "&conversationId=%20"] {
        del("ann", blank)
            .await
            .assert_error(400, 0, "conversationId must not be blank; leave it out");
    }
    // So is one misspelt, or sent in a body, which the query would read as absent.
    for misspelt in ["&conversation_id=other", "&conversationID=other"] {
        del("ann", misspelt)
            .await
            .assert_error(400, 0, "unknown query parameter");
    }
    let with_body = |query: &str, body: Value| {
        let path = format!("/agent/conversations?agentId={agent}&openId=ann{query}");
        async move { r.app().ext_delete_with_body(&r.crm, &path, &body).await }
    };
    with_body("", json!({ "conversationId": "other" }))
        .await
        .assert_error(400, 0, "this request takes no body");
    // A body that says nothing, as some clients send on DELETE, is no body.
    with_body("&conversationId=nope", json!({}))
        .await
        .assert_error(404, 404, "conversation");
    assert_eq!(e.app().count("conversations").await, 2, "nothing deleted");
    assert_eq!(del("ann", "").await.assert_ok()["deleted"], 1);
    assert_eq!(e.app().count("conversations").await, 1, "bob's remains");
    assert!(msgs("bob").await.assert_ok().as_array().unwrap().len() == 2);

    let before = e.written().await;
    for (body, needle) in [
        (json!({ "openId": "ann" }), "agentId is required"),
        (json!({ "agentId": agent }), "openId is required"),
        (
            json!({ "agentId": agent, "openId": "ann", "conversationId": "x".repeat(129) }),
            "conversationId must be 1 to 128",
        ),
        (
            json!({ "agentId": 999_999, "openId": "new" }),
            "agent does not exist or is disabled",
        ),
    ] {
        e.app()
            .ext_post(&e.crm, "/agent/conversations", &body)
            .await
            .assert_error(400, 0, needle);
    }
    e.app()
        .ext_get(
            &e.crm,
            &format!("/agent/conversations/messages?agentId={agent}&openId=ann"),
        )
        .await
        .assert_error(400, 0, "conversationId is required");
    assert_eq!(e.written().await, before);
}

/// The history a turn sends is read from its own user's conversation only: another openId of
/// the app, or the same openId of another app, with the same conversationId starts afresh.
/// With the request counted by the chat's first read, and with rate limits off.
#[tokio::test]
async fn a_turn_reads_its_history_only_from_its_own_users_conversation() {
    for vars in [&[][..], &[("RATE_LIMIT_APP_REQUESTS", "0")][..]] {
        let e = Ext::with(Store::Filesystem, vars).await;
        let agent = e.open_agent;
        for (creds, open_id, content) in [
            (&e.crm, "ann", "ann's secret"),
            (&e.crm, "bob", "bob asks"),
            (&e.erp, "ann", "erp's ann asks"),
            (&e.crm, "ann", "ann again"),
        ] {
            e.chat(creds, say(agent, open_id, "topic", content)).await.unwrap();
        }
        let asked = |q: &str| e.s.asked_with(q).unwrap();
        for other in ["bob asks", "erp's ann asks"] {
            assert!(!asked(other).contains("secret"), "{vars:?}: {}", asked(other));
        }
        assert!(asked("ann again").contains("ann's secret"), "{vars:?}");
    }
}

#[tokio::test]
async fn streamed_and_sync_chat_store_messages_under_the_external_user() {
    let e = Ext::new().await;
    let agent = e.open_agent;
    let events = e.chat(&e.crm, say(agent, "ann", "c-1", "hello there")).await.unwrap();
    assert_eq!(joined(&events, "text"), "You said: hello there");
    assert_eq!(kinds(&events).last().unwrap(), "done");
    assert_eq!(events.last().unwrap()["conversationId"], "c-1");

    let sync = e
        .app()
        .ext_post(&e.crm, "/agent/chat/sync", &say(agent, "ann", "c-1", "again"))
        .await;
    let sync = sync.assert_ok();
    assert_eq!(sync["conversationId"], "c-1");
    assert_eq!(sync["content"], "You said: again");
    assert_eq!(sync["thinking"], "");
    assert!(sync["durationMs"].is_u64());
    assert!(sync["usage"]["promptTokens"].as_u64().unwrap() > 0);
    assert!(sync["usage"]["completionTokens"].as_u64().unwrap() > 0);

    // Stored under the external user of (crm, ann), never under an admin-API user.
    let owner: (Option<i64>, String, String) = sqlx::query_as(
        "SELECT c.user_id, e.open_id, a.app_id FROM conversations c
         JOIN external_users e ON e.id = c.external_user_id JOIN apps a ON a.id = e.app_id",
    )
    .fetch_one(&e.app().db)
    .await
    .unwrap();
    assert_eq!(owner, (None, "ann".to_owned(), "crm".to_owned()));
    let stored: Vec<(String, String, i16)> = sqlx::query_as("SELECT role, content, status FROM messages ORDER BY id")
        .fetch_all(&e.app().db)
        .await
        .unwrap();
    assert_eq!(
        stored,
        [
            ("user".to_owned(), "hello there".to_owned(), 1),
            ("assistant".to_owned(), "You said: hello there".to_owned(), 1),
            ("user".to_owned(), "again".to_owned(), 1),
            ("assistant".to_owned(), "You said: again".to_owned(), 1),
        ]
    );
    // The second turn carried the first as history.
    let sent = e.s.models.requests();
    let last = sent
        .iter()
        .rev()
        .find(|r| r["messages"].to_string().contains("again"))
        .unwrap();
    assert!(last["messages"].to_string().contains("hello there"), "{last}");

    // A new conversation has the model's title by the time the sync answer is out: the turn's
    // work after its answer runs before the call returns (under Lambda, after it might never).
    e.app()
        .ext_post(&e.crm, "/agent/chat/sync", &say(agent, "ann", "c-2", "name this"))
        .await
        .assert_ok();
    let title: String = sqlx::query_scalar("SELECT title FROM conversations WHERE conversation_key = 'c-2'")
        .fetch_one(&e.app().db)
        .await
        .unwrap();
    assert!(title.starts_with("You said"), "the model's title: {title}");
}

#[tokio::test]
async fn first_chats_at_once_create_one_user_and_later_chats_only_read_it() {
    let e = Ext::new().await;
    let agent = e.open_agent;
    let chats = (0..8).map(|i| e.chat(&e.crm, say(agent, "zed", &format!("c-{i}"), "hi")));
    for events in futures::future::join_all(chats).await {
        assert_eq!(kinds(&events.unwrap()).last().unwrap(), "done");
    }
    let owners: Vec<(String, i64)> = sqlx::query_as(
        "SELECT e.open_id, count(c.id) FROM external_users e JOIN conversations c ON c.external_user_id = e.id
         GROUP BY e.open_id",
    )
    .fetch_all(&e.app().db)
    .await
    .unwrap();
    assert_eq!(owners, [("zed".to_owned(), 8)], "one user owns the eight conversations");

    // A known user's chat writes no new version of its row (no upsert on every chat).
    let version = || async {
        sqlx::query_scalar::<_, String>("SELECT xmin::text FROM external_users WHERE open_id = 'zed'")
            .fetch_one(&e.app().db)
            .await
            .unwrap()
    };
    let before = version().await;
    e.chat(&e.crm, say(agent, "zed", "c-0", "again")).await.unwrap();
    assert_eq!(version().await, before);
}

#[tokio::test]
async fn chat_refusals_name_the_rule_and_store_nothing() {
    let e = Ext::new().await;
    let agent = e.open_agent;
    let off = e.s.agent(&e.s.admin, json!({ "name": "Off", "status": 0 })).await;
    let erp_only =
        e.s.agent(&e.s.admin, json!({ "name": "ERP bot", "appId": "erp" }))
            .await;
    let before = e.written().await;
    let four = "agentId, openId, conversationId and content are required";
    for path in ["/agent/chat", "/agent/chat/sync"] {
        for (body, needle) in [
            (
                json!({}),
                format!("{four} (missing: agentId, openId, conversationId, content)"),
            ),
            (
                json!({ "agentId": agent, "openId": "ann", "conversationId": "c" }),
                format!("{four} (missing: content)"),
            ),
            (
                json!({ "agentId": agent, "conversationId": "c", "content": "hi" }),
                format!("{four} (missing: openId)"),
            ),
            (
                json!({ "openId": "ann", "conversationId": "c", "content": "hi" }),
                format!("{four} (missing: agentId)"),
            ),
            (
                json!({ "agentId": agent, "openId": "ann", "content": "hi" }),
                format!("{four} (missing: conversationId)"),
            ),
            (
                say(off, "ann", "c", "hi"),
                "agent does not exist or is disabled".to_owned(),
            ),
            (
                say(erp_only, "ann", "c", "hi"),
                "agent does not exist or is disabled".to_owned(),
            ),
            (
                say(999_999, "ann", "c", "hi"),
                "agent does not exist or is disabled".to_owned(),
            ),
            (
                say(agent, "ann", &"c".repeat(129), "hi"),
                "conversationId must be 1 to 128".to_owned(),
            ),
            (
                say(agent, "ann", "c", &"x".repeat(32_001)),
                "content must be".to_owned(),
            ),
            (
                json!({ "agentId": agent, "openId": "ann", "conversationId": "c", "content": "hi",
                        "attachments": [{ "type": "IMAGE", "resourceId": 12345 }] }),
                "attachments[0].resourceId: resource 12345 does not exist".to_owned(),
            ),
        ] {
            e.app()
                .ext_post(&e.crm, path, &body)
                .await
                .assert_error(400, 0, &needle);
        }
    }
    assert_eq!(e.written().await, before);
    // The user a refused first chat created and removed is not remembered: the next chat creates
    // it again and is answered.
    let events = e.chat(&e.crm, say(agent, "ann", "c", "hi")).await.unwrap();
    assert_eq!(kinds(&events).last().unwrap(), "done");
}

#[tokio::test]
async fn images_upload_as_base64_and_only_their_uploader_may_attach_them() {
    let e = Ext::new().await;
    let up = e.app().ext_post(&e.crm, "/resource/upload", &image("ann", PNG)).await;
    let up = up.assert_ok().clone();
    assert_eq!(up["mimeType"], "image/png");
    assert_eq!(up["fileSize"], PNG.len());
    let id = up["resourceId"].as_i64().unwrap();
    let biz: String = sqlx::query_scalar("SELECT biz_type FROM resources WHERE id = $1")
        .bind(id)
        .fetch_one(&e.app().db)
        .await
        .unwrap();
    assert_eq!(biz, "ATTACHMENT");
    let data_uri = json!({ "openId": "ann", "originalName": "b.png", "fileSize": PNG.len(),
        "content": format!("data:image/png;base64,{}", base64::engine::general_purpose::STANDARD.encode(PNG)) });
    e.app()
        .ext_post(&e.crm, "/resource/upload", &data_uri)
        .await
        .assert_ok();

    let before = e.written().await;
    // Every stored object, at any depth (uploads land under resources/).
    let files_before = e.app().snapshot().await.files;
    let mut wrong_size = image("ann", PNG);
    wrong_size["fileSize"] = json!(PNG.len() + 1);
    let mut too_big = image("ann", PNG);
    too_big["fileSize"] = json!(10 * 1024 * 1024 + 1);
    let mut reserved = image("ann", PNG);
    reserved["bizType"] = json!("rag_upload_preview");
    for (body, needle) in [
        (
            reserved,
            "bizType RAG_UPLOAD_PREVIEW is reserved for knowledge-base uploads".to_owned(),
        ),
        (
            wrong_size,
            format!(
                "fileSize {} does not match the content ({} bytes)",
                PNG.len() + 1,
                PNG.len()
            ),
        ),
        (too_big, "fileSize must be between 1 and 10485760".to_owned()),
        (image("ann", GIF), "only JPG, PNG and WEBP".to_owned()),
        (
            json!({ "openId": "ann", "originalName": "a.png", "fileSize": 3, "content": "%%%" }),
            "content must be base64".to_owned(),
        ),
        (
            json!({ "originalName": "a.png", "fileSize": 3, "content": "AAAA" }),
            "openId is required".to_owned(),
        ),
        (
            json!({ "openId": "ann", "fileSize": 3, "content": "AAAA" }),
            "originalName is required".to_owned(),
        ),
        (
            json!({ "openId": "ann", "originalName": "a.png", "content": "AAAA" }),
            "fileSize is required".to_owned(),
        ),
        (
            json!({ "openId": "ann", "originalName": "a.png", "fileSize": 3 }),
            "content is required".to_owned(),
        ),
        (
            json!({ "openId": "ann", "originalName": "a.png", "fileSize": 3, "content": "AAAA", "bizId": 0 }),
            "bizId must be a positive whole number".to_owned(),
        ),
    ] {
        e.app()
            .ext_post(&e.crm, "/resource/upload", &body)
            .await
            .assert_error(400, 0, &needle);
    }
    assert_eq!(e.written().await, before);
    assert_eq!(e.app().snapshot().await.files, files_before);
    // A first upload that fails once its user was created leaves neither the user nor the file
    // (the database refuses the resource's row here).
    let db = &e.app().db;
    for ddl in [
        "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refused'; END $$",
        "CREATE TRIGGER refuse BEFORE INSERT ON external_resources FOR EACH ROW EXECUTE FUNCTION refuse()",
    ] {
        sqlx::query(ddl).execute(db).await.unwrap();
    }
    let failed = e.app().ext_post(&e.crm, "/resource/upload", &image("zed", PNG)).await;
    failed.assert_error(500, 500, "internal server error");
    assert_eq!(e.written().await, before);
    assert_eq!(e.app().snapshot().await.files, files_before);
    sqlx::query("DROP TRIGGER refuse ON external_resources")
        .execute(db)
        .await
        .unwrap();

    // Bob cannot attach Ann's image; Ann can (the model then decides on vision support).
    let with_image = |who: &str| {
        json!({ "agentId": e.open_agent, "openId": who, "conversationId": "c", "content": "see",
                "attachments": [{ "type": "IMAGE", "resourceId": id }] })
    };
    e.chat(&e.crm, with_image("bob")).await.unwrap_err().assert_error(
        400,
        0,
        &format!("attachments[0].resourceId: resource {id} does not exist"),
    );
    e.chat(&e.crm, with_image("ann"))
        .await
        .unwrap_err()
        .assert_error(400, 0, "does not accept images");
    assert_eq!(e.app().count("messages").await, 0);
}

/// Images a request body on Lambda cannot carry go through a presigned PUT: asked for, sent,
/// then registered as the external user's, checked from their bytes like a base64 upload.
async fn presigned_image_upload(store: Store) {
    let e = Ext::with(store, &[]).await;
    let app = e.app();
    let ask_for = |size: usize, content_type: &str| json!({ "fileSize": size, "contentType": content_type });
    let ask = |content_type: &str| ask_for(PNG.len(), content_type);
    let presigned = app.ext_post(&e.crm, "/resource/upload-url", &ask("image/png")).await;
    let presigned = presigned.assert_ok().clone();
    let put = |presigned: &Value, body: &'static [u8]| {
        let url = presigned["uploadUrl"].as_str().unwrap();
        let url = match url.starts_with('/') {
            true => format!("{}{url}", app.origin),
            false => url.to_owned(),
        };
        let mut put = app.client.put(url).body(body);
        for (name, value) in presigned["headers"].as_object().expect("headers") {
            put = put.header(name, value.as_str().expect("header value"));
        }
        put.send()
    };
    let complete = |presigned: &Value, who: &str| json!({ "openId": who, "storageKey": presigned["storageKey"], "originalName": "big.png" });
    let before = e.written().await;
    app.ext_post(&e.crm, "/resource/upload/complete", &complete(&presigned, "ann"))
        .await
        .assert_error(400, 0, "storageKey: nothing was uploaded there yet");
    let mut negative = complete(&presigned, "ann");
    negative["bizId"] = json!(-3);
    app.ext_post(&e.crm, "/resource/upload/complete", &negative)
        .await
        .assert_error(400, 0, "bizId must be a positive whole number");
    assert_eq!(e.written().await, before, "no user or row before the image is sent");
    assert!(put(&presigned, PNG).await.unwrap().status().is_success());
    app.ext_post(&e.erp, "/resource/upload/complete", &complete(&presigned, "ann"))
        .await
        .assert_error(403, 403, "storageKey was not issued to this app");
    let done = app
        .ext_post(&e.crm, "/resource/upload/complete", &complete(&presigned, "ann"))
        .await;
    let done = done.assert_ok().clone();
    assert_eq!(
        (done["mimeType"].as_str(), done["fileSize"].as_u64()),
        (Some("image/png"), Some(PNG.len() as u64))
    );
    app.ext_post(&e.crm, "/resource/upload/complete", &complete(&presigned, "ann"))
        .await
        .assert_error(400, 0, "already registered");
    // Only its uploader may attach it (the model then refuses images at all).
    let id = done["resourceId"].as_i64().unwrap();
    let with_image = |who: &str| {
        json!({ "agentId": e.open_agent, "openId": who, "conversationId": "c", "content": "see",
                "attachments": [{ "type": "IMAGE", "resourceId": id }] })
    };
    e.chat(&e.crm, with_image("bob"))
        .await
        .unwrap_err()
        .assert_error(400, 0, "does not exist");
    e.chat(&e.crm, with_image("ann"))
        .await
        .unwrap_err()
        .assert_error(400, 0, "does not accept images");

    // Bytes that are not an image are refused on completion and removed; nothing is written.
    let before = e.written().await;
    let files_before = app.snapshot().await.files;
    let gif = app
        .ext_post(&e.crm, "/resource/upload-url", &ask_for(GIF.len(), "image/png"))
        .await;
    let gif = gif.assert_ok().clone();
    assert!(put(&gif, GIF).await.unwrap().status().is_success());
    app.ext_post(&e.crm, "/resource/upload/complete", &complete(&gif, "cy"))
        .await
        .assert_error(400, 0, "storageKey: only JPG, PNG and WEBP images are accepted");
    assert_eq!(e.written().await, before);
    assert_eq!(app.snapshot().await.files, files_before);
    let key = gif["storageKey"].as_str().unwrap();
    assert!(
        app.state.storage().head(key).await.unwrap().is_none(),
        "the refused file is removed"
    );

    for (body, needle) in [
        (
            ask("image/gif"),
            "contentType: only JPG, PNG and WEBP images are accepted",
        ),
        (json!({ "contentType": "image/png" }), "fileSize is required"),
        (
            json!({ "fileSize": 10 * 1024 * 1024 + 1, "contentType": "image/png" }),
            "fileSize must be between 1 and 10485760",
        ),
        (json!({ "fileSize": 5 }), "contentType is required"),
    ] {
        app.ext_post(&e.crm, "/resource/upload-url", &body)
            .await
            .assert_error(400, 0, needle);
    }
}

#[tokio::test]
async fn images_go_through_a_presigned_put_on_the_filesystem() {
    presigned_image_upload(Store::Filesystem).await;
}

#[tokio::test]
async fn images_go_through_a_presigned_put_on_s3() {
    presigned_image_upload(Store::S3).await;
}

async fn embed_token(e: &Ext, open_id: &str) -> String {
    let t = e
        .app()
        .ext_get(&e.crm, &format!("/embed-token?openId={open_id}&ttlSeconds=600"))
        .await;
    t.assert_ok()["token"].as_str().unwrap().to_owned()
}

async fn chat_with_token(e: &Ext, token: &str, body: Value) -> Result<Vec<Value>, Reply> {
    let resp = e
        .app()
        .client
        .post(e.app().url("/openapi/v1/agent/chat"))
        .header("Svc-Auth", token)
        .json(&body)
        .send()
        .await
        .unwrap();
    read_chat(resp).await
}

/// A new token for an app ends the old one and the embed tokens signed with it, at once; the
/// new one works, and nothing else of the app changes. A leaked token could only be revoked
/// by deleting the app, with its end users' conversations.
#[tokio::test]
async fn a_new_app_token_ends_the_old_one_and_its_embed_tokens() {
    let e = Ext::new().await;
    let page_token = embed_token(&e, "ann").await;
    e.app().ext_get(&e.crm, "/agents").await.assert_ok();
    let path = format!("/app/{}/token", e.crm.id);
    let view = e.app().post(&path, Some(&e.s.admin), &json!({})).await;
    let view = view.assert_ok().clone();
    let token = view["token"].as_str().unwrap().to_owned();
    assert_ne!(token, e.crm.token);
    assert_eq!(
        (view["appId"].as_str(), view["status"].as_i64()),
        (Some("crm"), Some(1))
    );

    e.app()
        .ext_get(&e.crm, "/agents")
        .await
        .assert_error(401, 401, "invalid");
    chat_with_token(&e, &page_token, say(e.open_agent, "ann", "w", "hi"))
        .await
        .unwrap_err()
        .assert_error(401, 401, "embed token invalid");
    let renewed = api_tests::apps::Creds { token, ..e.crm.clone() };
    e.app().ext_get(&renewed, "/agents").await.assert_ok();
    // Only administrators, and only apps that exist.
    let (_, user) = e.app().regular_user("carol").await;
    e.app()
        .post(&path, Some(&user), &json!({}))
        .await
        .assert_error(403, 403, "");
    e.app()
        .post(&format!("/app/{}/token", e.crm.id + 1000), Some(&e.s.admin), &json!({}))
        .await
        .assert_error(404, 404, "app");
}

#[tokio::test]
async fn embed_tokens_speak_for_one_open_id_of_one_app() {
    let e = Ext::new().await;
    let agent = e.open_agent;
    let got = e.app().ext_get(&e.crm, "/embed-token?openId=ann").await;
    let got = got.assert_ok().clone();
    assert_eq!(got["tokenType"], "Svc-Auth");
    assert_eq!(got["ttlSeconds"], 3600);
    assert_eq!(got["openId"], "ann");
    assert!(got["expiresAt"].is_string());
    let posted = e
        .app()
        .ext_post(&e.crm, "/embed-token", &json!({ "openId": "ann", "ttlSeconds": 60 }))
        .await;
    assert_eq!(posted.assert_ok()["ttlSeconds"], 60);
    for (q, needle) in [
        ("", "openId is required"),
        ("openId=a&ttlSeconds=59", "ttlSeconds must be between 60 and 86400"),
    ] {
        e.app()
            .ext_get(&e.crm, &format!("/embed-token?{q}"))
            .await
            .assert_error(400, 0, needle);
    }
    e.app()
        .ext_post(&e.crm, "/embed-token", &json!({ "openId": "a", "ttlSeconds": 86_401 }))
        .await
        .assert_error(400, 0, "ttlSeconds");

    let token = got["token"].as_str().unwrap().to_owned();
    // The openId may be omitted (the token's is used) or repeated; another one is refused.
    let events = chat_with_token(
        &e,
        &token,
        json!({ "agentId": agent, "conversationId": "w", "content": "from the page" }),
    )
    .await
    .unwrap();
    assert_eq!(joined(&events, "text"), "You said: from the page");
    let sync = e
        .app()
        .send(
            e.app()
                .client
                .post(e.app().url("/openapi/v1/agent/chat/sync"))
                .header("Svc-Auth", &token)
                .json(&say(agent, "ann", "w", "sync too")),
        )
        .await;
    assert_eq!(sync.assert_ok()["content"], "You said: sync too");
    let detail = e
        .app()
        .send(
            e.app()
                .client
                .get(e.app().url(&format!("/openapi/v1/agent?agentId={agent}")))
                .header("Svc-Auth", &token),
        )
        .await;
    assert_eq!(detail.assert_ok()["name"], "Helper");
    let before = e.written().await;
    chat_with_token(&e, &token, say(agent, "bob", "w", "impersonate"))
        .await
        .unwrap_err()
        .assert_error(403, 403, "another openId");
    // An embed token opens only the chat routes, not the app's other endpoints.
    e.app()
        .send(
            e.app()
                .client
                .get(e.app().url("/openapi/v1/agents"))
                .header("Svc-Auth", &token),
        )
        .await
        .assert_error(401, 401, "Svc-App-Id");
    // Forged, tampered and foreign tokens are refused.
    let mut tampered = token.clone();
    tampered.pop();
    tampered.push(if token.ends_with('A') { 'B' } else { 'A' });
    // Claims this service never issues: an app id holding a NUL (unsigned: read before the
    // signature is checked), an openId holding one signed with the app's own token.
    let b64 = |v: Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    let nul_app = format!(
        "{}.{}.x",
        b64(json!({ "alg": "HS256", "typ": "JWT" })),
        b64(json!({ "app": "\u{0}", "sub": "ann", "iat": 0, "exp": 4_000_000_000_i64, "typ": "embed" }))
    );
    let nul_sub = jsonwebtoken::encode(
        &jsonwebtoken::Header::default(),
        &json!({ "app": e.crm.app_id, "sub": "ann\u{0}", "iat": 0, "exp": 4_000_000_000_i64, "typ": "embed" }),
        &jsonwebtoken::EncodingKey::from_secret(e.crm.token.as_bytes()),
    )
    .unwrap();
    // Signed with the app's token but living longer than any token this service issues
    // (a day), or issued in the future: never expiring, or kept for later, it would outlast
    // everything but a rotation of the app's token.
    let now = chrono::Utc::now().timestamp();
    let signed = |iat: i64, exp: i64| {
        jsonwebtoken::encode(
            &jsonwebtoken::Header::default(),
            &json!({ "app": e.crm.app_id, "sub": "ann", "iat": iat, "exp": exp, "typ": "embed" }),
            &jsonwebtoken::EncodingKey::from_secret(e.crm.token.as_bytes()),
        )
        .unwrap()
    };
    let (forever, later) = (signed(now, now + 10 * 365 * 86_400), signed(now + 3600, now + 7200));
    let a_day = e
        .app()
        .send(
            e.app()
                .client
                .get(e.app().url(&format!("/openapi/v1/agent?agentId={agent}")))
                .header("Svc-Auth", signed(now, now + 86_400)),
        )
        .await;
    assert_eq!(
        a_day.assert_ok()["name"],
        "Helper",
        "a day is the longest a token lives"
    );
    for bad in [
        tampered.as_str(),
        "not.a.jwt",
        "x",
        &nul_app,
        &nul_sub,
        &forever,
        &later,
    ] {
        chat_with_token(&e, bad, say(agent, "ann", "w", "hi"))
            .await
            .unwrap_err()
            .assert_error(401, 401, "embed token invalid");
    }
    // Disabling the app ends its tokens.
    e.app()
        .post(
            &format!("/app/{}/toggle-status", e.crm.id),
            Some(&e.s.admin),
            &json!({}),
        )
        .await
        .assert_ok();
    chat_with_token(&e, &token, say(agent, "ann", "w", "hi"))
        .await
        .unwrap_err()
        .assert_error(401, 401, "embed token invalid");
    assert_eq!(e.written().await, before);
    // Everything the page said is ann's.
    let owners: Vec<String> = sqlx::query_scalar(
        "SELECT DISTINCT e.open_id FROM conversations c JOIN external_users e ON e.id = c.external_user_id",
    )
    .fetch_all(&e.app().db)
    .await
    .unwrap();
    assert_eq!(owners, ["ann"]);
}

#[tokio::test]
async fn the_embed_page_is_self_contained() {
    let e = Ext::new().await;
    let page = e
        .app()
        .client
        .get(e.app().url(&format!("/embed/{}", e.open_agent)))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    // Its own inline script and style by hash, calls to this origin, nothing else.
    let policy = page.headers()["content-security-policy"].to_str().unwrap().to_owned();
    let html = page.text().await.unwrap();
    assert!(html.contains("<script>") && html.contains("/openapi/v1/agent/chat"));
    let hash = |tag: &str| {
        use base64::Engine as _;
        use sha2::Digest as _;
        let body = html
            .split(&format!("<{tag}>"))
            .nth(1)
            .unwrap()
            .split(&format!("</{tag}>"))
            .next()
            .unwrap();
        format!(
            "'sha256-{}'",
            base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(body))
        )
    };
    for part in [
        "default-src 'none'".to_owned(),
        format!("script-src {}", hash("script")),
        format!("style-src {}", hash("style")),
        "connect-src 'self'".to_owned(),
        "frame-ancestors *".to_owned(),
    ] {
        assert!(policy.contains(&part), "{part} not in {policy}");
    }
    assert!(!policy.contains("unsafe"), "{policy}");
    assert!(
        !html.contains("src=\"http") && !html.contains("href=\"http"),
        "no external assets"
    );
    let missing = e
        .app()
        .client
        .get(e.app().url("/embed/not-a-number"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 400);
}

/// Headless Chromium loads the page with an embed token, greets with the agent, and a message
/// typed and sent streams back and is rendered as markdown (the model's HTML escaped).
#[tokio::test]
async fn the_embed_page_chats_in_a_real_browser() {
    let e = Ext::new().await;
    let token = embed_token(&e, "browser-user").await;
    let page = e.app().url(&format!("/embed/{}", e.open_agent));
    let browser = Browser::start().await;
    // Without its token's app in the address (whose frameAncestors decide who may frame it),
    // or with another app's, the page does not start: any site could frame it otherwise.
    for query in [String::new(), format!("?app={}", e.erp.app_id)] {
        browser.goto(&format!("{page}{query}#token={token}")).await;
        browser
            .wait_for(
                "return document.body.dataset.status === 'error'",
                Duration::from_secs(20),
            )
            .await;
        let said = browser.eval("return document.getElementById('log').textContent").await;
        assert!(said.as_str().unwrap_or_default().contains("needs ?app="), "{said}");
    }
    let url = format!("{page}?app={}#token={token}", e.crm.app_id);
    browser.goto(&url).await;
    browser
        .wait_for(
            "return document.body.dataset.status === 'idle'",
            Duration::from_secs(20),
        )
        .await;
    assert_eq!(browser.eval("return document.title").await, "Helper");
    assert_eq!(
        browser
            .eval("return document.getElementById('greeting').textContent")
            .await,
        "Hi!"
    );

    // The policy holds in the browser: a script injected into the page does not run.
    assert_eq!(
        browser
            .eval(
                "var s = document.createElement('script'); s.textContent = 'window.injected = 1'; \
                 document.body.appendChild(s); return String(window.injected)"
            )
            .await,
        "undefined"
    );

    browser.type_into("#input", "hello **bold** <b>raw</b>").await;
    browser.click("#send").await;
    browser
        .wait_for(
            "return !!document.querySelector('.msg.assistant[data-state=done]') && document.body.dataset.status === 'idle'",
            Duration::from_secs(30),
        )
        .await;
    let answer = browser
        .eval("return document.querySelector('.msg.assistant').innerHTML")
        .await;
    assert_eq!(
        answer,
        "<p>You said: hello <strong>bold</strong> &lt;b&gt;raw&lt;/b&gt;</p>"
    );
    assert_eq!(
        browser
            .eval("return document.querySelector('.msg.user').textContent")
            .await,
        "hello **bold** <b>raw</b>"
    );
    assert_eq!(
        browser
            .eval("return document.querySelectorAll('.msg.error').length")
            .await,
        0
    );

    // A second message continues the same conversation.
    browser.type_into("#input", "and more").await;
    browser.click("#send").await;
    browser
        .wait_for(
            "return document.querySelectorAll('.msg.assistant[data-state=done]').length === 2",
            Duration::from_secs(30),
        )
        .await;
    drop(browser);

    let stored: Vec<(String, String)> = sqlx::query_as(
        "SELECT c.conversation_key, m.content FROM messages m JOIN conversations c ON c.id = m.conversation_id
         JOIN external_users u ON u.id = c.external_user_id WHERE u.open_id = 'browser-user' ORDER BY m.id",
    )
    .fetch_all(&e.app().db)
    .await
    .unwrap();
    let contents: Vec<&str> = stored.iter().map(|(_, c)| c.as_str()).collect();
    assert_eq!(
        contents,
        [
            "hello **bold** <b>raw</b>",
            "You said: hello **bold** <b>raw</b>",
            "and more",
            "You said: and more"
        ]
    );
    assert!(
        stored.iter().all(|(k, _)| *k == stored[0].0),
        "one conversation: {stored:?}"
    );
}

/// An app lists the pages that may frame its embedded chat page; the page names the app in its
/// URL and answers with that list as its `frame-ancestors`. A list entry that could end the
/// directive or add another is refused, naming the field, and changes nothing.
#[tokio::test]
async fn an_app_chooses_the_pages_that_may_frame_its_chat_page() {
    let e = Ext::new().await;
    let (app, admin) = (e.app(), e.s.admin.as_str());
    let policy = |query: String| async move {
        let page = app
            .client
            .get(app.url(&format!("/embed/{}{query}", e.open_agent)))
            .send()
            .await
            .unwrap();
        assert_eq!(page.status(), 200);
        page.headers()["content-security-policy"].to_str().unwrap().to_owned()
    };
    let framing = |p: &str| {
        p.split("; ")
            .find(|d| d.starts_with("frame-ancestors"))
            .unwrap()
            .to_owned()
    };
    // By default any page may frame it, app named or not.
    assert_eq!(framing(&policy(String::new()).await), "frame-ancestors *");
    assert_eq!(
        framing(&policy(format!("?app={}", e.crm.app_id)).await),
        "frame-ancestors *"
    );

    let list = json!({ "frameAncestors": ["https://crm.example", "https://*.crm.example:8443"] });
    let updated = app.put(&format!("/app/{}", e.crm.id), Some(admin), &list).await;
    assert_eq!(updated.assert_ok()["frameAncestors"], list["frameAncestors"]);
    assert_eq!(
        framing(&policy(format!("?app={}", e.crm.app_id)).await),
        "frame-ancestors https://crm.example https://*.crm.example:8443"
    );
    // Another app's page, an unknown app and no app keep the default.
    assert_eq!(
        framing(&policy(format!("?app={}", e.erp.app_id)).await),
        "frame-ancestors *"
    );
    assert_eq!(framing(&policy("?app=nobody".to_owned()).await), "frame-ancestors *");

    let before = app.snapshot().await;
    for bad in [
        "https://x.example; script-src *",
        "*",
        "'unsafe-inline'",
        "https://a.example b.example",
    ] {
        app.put(
            &format!("/app/{}", e.crm.id),
            Some(admin),
            &json!({ "frameAncestors": [bad] }),
        )
        .await
        .assert_error(400, 0, "frameAncestors: ");
        app.post(
            "/app",
            Some(admin),
            &json!({ "appId": "new", "appName": "New", "frameAncestors": [bad] }),
        )
        .await
        .assert_error(400, 0, "frameAncestors: ");
    }
    app.snapshot()
        .await
        .assert_unchanged_since(&before, "refused frame ancestors");
}

/// A partner turns an agent's MCP servers and skills off for one call, as the admin chat can:
/// the model is then told the tool is not there, and with nothing disabled it runs.
#[tokio::test]
async fn external_chat_can_turn_off_mcp_servers_and_skills_for_one_call() {
    let e = Ext::new().await;
    let (app, admin) = (e.app(), e.s.admin.as_str());
    let tools = api_tests::mcp_servers::everything("streamableHttp").await;
    let server = app
        .post(
            "/mcp-server",
            Some(admin),
            &json!({ "name": "everything", "transportType": 2, "endpoint": tools.url("/mcp") }),
        )
        .await
        .assert_ok()
        .as_i64()
        .unwrap();
    let skill = app
        .post(
            "/skill",
            Some(admin),
            &json!({ "name": "pirate", "description": "Talk like a pirate." }),
        )
        .await
        .assert_status_ok()["id"]
        .as_i64()
        .unwrap();
    let model = e.s.chat_model("chat-agent", json!({})).await;
    let agent =
        e.s.agent(
            admin,
            json!({ "name": "Tooled", "chatModelId": model, "mcpEnabled": true, "mcpServerIds": [server],
                    "skillEnabled": true, "skillIds": [skill] }),
        )
        .await;
    let call = |conversation: &str, content: &str, off: Value| {
        let mut body = json!({ "agentId": agent, "openId": "ann", "conversationId": conversation, "content": content });
        if let (Some(b), Some(o)) = (body.as_object_mut(), off.as_object()) {
            b.extend(o.clone());
        }
        body
    };
    let echo = "CALL echo {\"message\": \"ahoy\"}";
    let load = "CALL load_skill {\"name\": \"pirate\"}";

    let on = e.chat(&e.crm, call("t-1", echo, json!({}))).await.unwrap();
    assert!(joined(&on, "text").contains("ahoy"), "{on:?}");
    let on = e.chat(&e.crm, call("t-2", load, json!({}))).await.unwrap();
    assert_eq!(kinds(&on)[..2], ["tool_call", "tool_result"], "{on:?}");
    assert_eq!(on[1]["ok"], true, "{on:?}");

    let off = e
        .chat(&e.crm, call("t-3", echo, json!({ "disabledMcpServerIds": [server] })))
        .await
        .unwrap();
    assert_eq!(joined(&off, "text"), "Tool echo is not available");
    let off = e
        .chat(&e.crm, call("t-4", load, json!({ "disabledSkillIds": [skill] })))
        .await
        .unwrap();
    assert_eq!(joined(&off, "text"), "Tool load_skill is not available");
}

/// A refused first chat removes the user it created, but not one that another request of the
/// same new user stored something for meanwhile: its conversation, subscription or image would
/// go with it.
#[tokio::test]
async fn removing_a_new_user_again_keeps_one_another_request_used() {
    let app = api_tests::spawn(api_tests::Store::Filesystem).await;
    let admin = app.admin_token().await;
    let admin_id = app.get("/user", Some(&admin)).await.assert_ok()["id"].as_i64().unwrap();
    let png = app
        .upload_resource(&admin, "a.png", PNG.to_vec(), None)
        .await
        .assert_ok()["id"]
        .as_i64()
        .unwrap();
    let (untouched, conversing, subscribed, uploaded): (i64, i64, i64, i64) = sqlx::query_as(
        "WITH a AS (INSERT INTO apps (app_id, app_name, token_enc, creator_id)
                    VALUES ('race', 'Race', 'sealed', $1) RETURNING id),
              g AS (INSERT INTO agents (name, creator_id) VALUES ('helper', $1) RETURNING id),
              u AS (INSERT INTO external_users (app_id, open_id)
                    SELECT a.id, o FROM a, unnest(ARRAY['u1', 'u2', 'u3', 'u4']) o RETURNING id, open_id),
              c AS (INSERT INTO conversations (agent_id, external_user_id, conversation_key)
                    SELECT g.id, u.id, 'c' FROM g, u WHERE u.open_id = 'u2' RETURNING 1),
              s AS (INSERT INTO external_subscriptions (agent_id, external_user_id)
                    SELECT g.id, u.id FROM g, u WHERE u.open_id = 'u3' RETURNING 1),
              r AS (INSERT INTO external_resources (resource_id, external_user_id)
                    SELECT $2, u.id FROM u WHERE u.open_id = 'u4' RETURNING 1)
         SELECT max(id) FILTER (WHERE open_id = 'u1'), max(id) FILTER (WHERE open_id = 'u2'),
                max(id) FILTER (WHERE open_id = 'u3'), max(id) FILTER (WHERE open_id = 'u4')
         FROM u",
    )
    .bind(admin_id)
    .bind(png)
    .fetch_one(&app.db)
    .await
    .unwrap();
    // Registered by the partner meanwhile: its nickname and extra are the partner's.
    let app_pk: i64 = sqlx::query_scalar("SELECT id FROM apps WHERE app_id = 'race'")
        .fetch_one(&app.db)
        .await
        .unwrap();
    let (bare, _) = shared::external::repo::ensure_user(&app.db, app_pk, "u5")
        .await
        .unwrap();
    let registration = shared::external::repo::UserData {
        app: app_pk,
        open_id: "u5",
        nickname: Some("Ann"),
        avatar: None,
        extra: None,
    };
    let (registered, created) = shared::external::repo::upsert_user(&app.db, &registration)
        .await
        .unwrap();
    assert_eq!((registered.id, created), (bare, false));
    for id in [untouched, conversing, subscribed, uploaded, registered.id] {
        shared::external::repo::delete_user(&app.db, id).await.unwrap();
    }
    let left: Vec<i64> = sqlx::query_scalar("SELECT id FROM external_users ORDER BY id")
        .fetch_all(&app.db)
        .await
        .unwrap();
    assert_eq!(left, [conversing, subscribed, uploaded, registered.id]);
}

/// An image one of an app's users is uploading while the app is deleted goes with the app: the
/// delete waits for the upload (which holds its user's row) and then sees its image; it read
/// the images before and left this one to the app's creator.
#[tokio::test]
async fn an_image_uploaded_while_its_app_is_deleted_goes_with_it() {
    let e = Ext::new().await;
    let db = e.app().db.clone();
    e.app()
        .ext_post(&e.crm, "/resource/upload", &image("ann", PNG))
        .await
        .assert_ok();
    let late = late_image(&e).await;
    // Ann's second upload, its row linked to her and not yet committed.
    let mut uploading = db.begin().await.unwrap();
    sqlx::query(
        "INSERT INTO external_resources (resource_id, external_user_id)
         SELECT $1, id FROM external_users WHERE open_id = 'ann'",
    )
    .bind(late)
    .execute(&mut *uploading)
    .await
    .unwrap();
    deleted_while_uploading(&e, uploading, late).await;
}

/// An image stored for the test to link to an external user in a transaction of its own.
async fn late_image(e: &Ext) -> i64 {
    let stored = e
        .app()
        .upload_resource(&e.s.admin, "late.png", PNG.to_vec(), None)
        .await;
    stored.assert_ok()["id"].as_i64().unwrap()
}

/// Deletes the app while `uploading` (an image's rows, `late`, not yet committed) is open,
/// commits it once the delete waits for it, and expects the image gone with the app.
async fn deleted_while_uploading(e: &Ext, uploading: sqlx::Transaction<'_, sqlx::Postgres>, late: i64) {
    let db = e.app().db.clone();
    let path = format!("/app/{}", e.crm.id);
    let delete = e.app().delete(&path, Some(&e.s.admin));
    let upload = async {
        api_tests::until_a_statement_waits_for_a_lock(&db).await;
        uploading.commit().await.unwrap();
    };
    let (deleted, ()) = tokio::join!(delete, upload);
    deleted.assert_ok();
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM resources WHERE id = $1")
        .bind(late)
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(left, 0, "the late image is not left to the app's creator");
}

/// The same for a user the upload adds to the app (its first request): the user holds the
/// app's row until it commits, and the delete waits for that before it looks for users. It
/// looked first and missed the new user, whose image the cascade then left behind.
#[tokio::test]
async fn an_image_of_a_user_added_while_its_app_is_deleted_goes_with_it() {
    let e = Ext::new().await;
    let late = late_image(&e).await;
    let mut uploading = e.app().db.begin().await.unwrap();
    sqlx::query(
        "WITH u AS (INSERT INTO external_users (app_id, open_id) VALUES ($1, 'newcomer') RETURNING id)
         INSERT INTO external_resources (resource_id, external_user_id) SELECT $2, id FROM u",
    )
    .bind(e.crm.id)
    .bind(late)
    .execute(&mut *uploading)
    .await
    .unwrap();
    deleted_while_uploading(&e, uploading, late).await;
}

/// An app with agents bound to it is not deleted: the delete would unbind them (the foreign
/// key sets null), and an unbound agent is open to every app, its instructions, knowledge and
/// tools meant for one partner served to all. Refused, it changes nothing; once the agent is
/// bound elsewhere, the app goes.
#[tokio::test]
async fn an_app_with_bound_agents_is_not_deleted_into_opening_them() {
    let e = Ext::new().await;
    let bot =
        e.s.agent(&e.s.admin, json!({ "name": "CRM bot", "appId": "crm" }))
            .await;
    e.chat(&e.crm, say(e.open_agent, "ann", "talk", "hello")).await.unwrap();
    let before = e.written().await;
    let path = format!("/app/{}", e.crm.id);
    e.app()
        .delete(&path, Some(&e.s.admin))
        .await
        .assert_error(400, 0, "app crm has 1 agent(s) bound to it");
    assert_eq!(e.written().await, before);
    assert_eq!(e.app().count("apps").await, 2);
    let erp_sees = |r: Reply| r.assert_ok().as_array().unwrap().iter().any(|a| a["id"] == bot);
    assert!(!erp_sees(e.app().ext_get(&e.erp, "/agents").await));

    e.app()
        .put(&format!("/agent/{bot}"), Some(&e.s.admin), &json!({ "appId": "erp" }))
        .await
        .assert_ok();
    e.app().delete(&path, Some(&e.s.admin)).await.assert_ok();
    assert_eq!(e.app().count("apps").await, 1);
}

/// Deleting an app deletes what its external users uploaded, rows and files: left behind, their
/// images would become ordinary uploads of the app's creator, listed and served by /resource.
/// Their conversations and messages go too.
#[tokio::test]
async fn deleting_an_app_deletes_its_users_images_and_conversations() {
    let e = Ext::new().await;
    for (creds, open_id) in [(&e.crm, "ann"), (&e.erp, "bob")] {
        e.chat(creds, say(e.open_agent, open_id, "talk", "hello"))
            .await
            .unwrap();
    }
    assert_eq!(e.app().count("messages").await, 4);
    let theirs = e.app().ext_post(&e.crm, "/resource/upload", &image("ann", PNG)).await;
    let theirs = theirs.assert_ok()["resourceId"].as_i64().unwrap();
    let others = e.app().ext_post(&e.erp, "/resource/upload", &image("bob", PNG)).await;
    let others = others.assert_ok()["resourceId"].as_i64().unwrap();
    let files = e.app().snapshot().await.files.len();
    e.app()
        .delete(&format!("/app/{}", e.crm.id), Some(&e.s.admin))
        .await
        .assert_ok();
    let left: Vec<i64> = sqlx::query_scalar("SELECT id FROM resources ORDER BY id")
        .fetch_all(&e.app().db)
        .await
        .unwrap();
    assert_eq!(left, [others], "the other app's image stays, {theirs} is gone");
    assert_eq!(e.app().count("conversations").await, 1, "the other app's user's");
    let kept: Vec<String> = sqlx::query_scalar(
        "SELECT m.content FROM messages m JOIN conversations c ON c.id = m.conversation_id ORDER BY m.id",
    )
    .fetch_all(&e.app().db)
    .await
    .unwrap();
    assert_eq!(
        kept,
        ["hello", "You said: hello"],
        "only the other conversation's messages stay"
    );
    assert_eq!(
        e.app().count("messages").await,
        2,
        "no message is left without its conversation"
    );
    assert_eq!(e.app().snapshot().await.files.len(), files - 1, "and so is its file");
    let listed = e.app().get("/resource/page?size=100", Some(&e.s.admin)).await;
    assert_eq!(listed.assert_ok()["total"], 0, "nothing of an external user is listed");
}
