//! Request rate limits: per admin-API user, per external app (embed tokens included) and per
//! embed token's end user,
//! shared by every instance through Postgres; 429 with Retry-After in the module's envelope.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use api_tests::chat::{say, ChatSetup};
use api_tests::{spawn_with, Reply, Store, TestApp};
use serde_json::json;

/// Long enough for a burst of a dozen requests to fall into one window on a busy machine.
const WINDOW: u64 = 6;

const LIMITS: [(&str, &str); 3] = [
    ("RATE_LIMIT_WINDOW_SECS", "6"),
    ("RATE_LIMIT_USER_REQUESTS", "5"),
    ("RATE_LIMIT_APP_REQUESTS", "4"),
];

async fn limited() -> TestApp {
    spawn_with(Store::Filesystem, &LIMITS).await
}

/// Waits for the start of the next window, so a short burst falls into one window.
async fn next_window() {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let into = now.as_millis() as u64 % (WINDOW * 1000);
    tokio::time::sleep(Duration::from_millis(WINDOW * 1000 - into + 50)).await;
}

#[track_caller]
fn assert_limited(r: &Reply, noun: &str) {
    r.assert_error(429, 429, &format!("this {noun} may send"));
    let retry: u64 = r.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=WINDOW).contains(&retry), "Retry-After {retry}");
}

#[tokio::test]
async fn each_user_has_its_own_limit_on_every_instance_and_may_retry_after_the_window() {
    let app = limited().await;
    let admin = app.admin_token().await;
    let (_, alice) = app.regular_user("alice").await;
    let other = app.second_instance().await;

    next_window().await;
    // Five requests spread over two instances fill the admin's window; the sixth is refused on both.
    for i in 0..5 {
        let base = if i % 2 == 0 { &app.base } else { &other };
        let r = app
            .send(app.client.get(format!("{base}/user")).header("Svc-Auth", &admin))
            .await;
        r.assert_ok();
    }
    let refused = app.get("/user", Some(&admin)).await;
    assert_limited(&refused, "user");
    assert!(refused.msg().contains("5 requests per 6 seconds"), "{}", refused.msg());
    let on_other = app
        .send(app.client.get(format!("{other}/user")).header("Svc-Auth", &admin))
        .await;
    assert_limited(&on_other, "user");
    // The `/ai-model` module answers in its own envelope.
    let model = app.get("/ai-model/providers", Some(&admin)).await;
    assert_eq!(model.status, 429);
    assert_eq!(model.body["status"], 429);
    assert!(model.body["message"].as_str().unwrap().contains("too many requests"));
    assert!(model.body["data"].is_null() && model.headers.contains_key("retry-after"));
    // Another user is not affected, and a refused request changed nothing.
    app.get("/user", Some(&alice)).await.assert_ok();
    let refused_create = app
        .post(
            "/user",
            Some(&admin),
            &json!({ "username": "bob", "password": "bob-password-1", "role": 2 }),
        )
        .await;
    assert_eq!(refused_create.status, 429);
    assert_eq!(app.count("users").await, 2);

    // Late in the window, Retry-After is the time left (under a second, so 1), not the window.
    let start = window_start();
    let late = start + Duration::from_millis(WINDOW * 1000 - 700);
    if let Ok(ahead) = late.duration_since(SystemTime::now()) {
        tokio::time::sleep(ahead).await;
    }
    let late_refusal = app.get("/user", Some(&admin)).await;
    if late_refusal.status == 429 {
        assert_eq!(late_refusal.headers["retry-after"], "1", "0.7 s or less was left");
    } else {
        // Only a request answered after the window ended may pass.
        assert!(
            SystemTime::now() >= start + Duration::from_secs(WINDOW),
            "{:?}",
            late_refusal.body
        );
    }
    let wait: u64 = refused.headers["retry-after"].to_str().unwrap().parse().unwrap();
    tokio::time::sleep(Duration::from_secs(wait)).await;
    app.get("/user", Some(&admin)).await.assert_ok();
    // The count restarts: a whole new budget of five, then refused again.
    next_window().await;
    for _ in 0..5 {
        app.get("/user", Some(&admin)).await.assert_ok();
    }
    assert_limited(&app.get("/user", Some(&admin)).await, "user");
}

/// When the current window began (windows start at multiples of WINDOW since the epoch).
fn window_start() -> SystemTime {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
    UNIX_EPOCH + Duration::from_millis(now - now % (WINDOW * 1000))
}

#[tokio::test]
async fn each_app_has_its_own_limit_and_its_embed_tokens_count_to_it() {
    let app = limited().await;
    let admin = app.admin_token().await;
    let crm = app.create_app(&admin, "crm").await;
    let erp = app.create_app(&admin, "erp").await;
    let token = app.ext_get(&crm, "/embed-token?openId=ann").await.assert_ok()["token"]
        .as_str()
        .unwrap()
        .to_owned();

    next_window().await;
    for _ in 0..2 {
        app.ext_get(&crm, "/agents").await.assert_ok();
    }
    // Two requests with the app's embed token use up the rest of the app's window.
    for _ in 0..2 {
        let r = app
            .send(
                app.client
                    .get(app.url("/openapi/v1/agent?openId=ann"))
                    .header("Svc-Auth", &token),
            )
            .await;
        // Counted, then refused by the handler for its own reason (no agentId), not the limiter.
        r.assert_error(400, 0, "agentId is required");
    }
    assert_limited(&app.ext_get(&crm, "/agents").await, "app");
    let embed = app
        .send(
            app.client
                .get(app.url("/openapi/v1/agent?openId=ann"))
                .header("Svc-Auth", &token),
        )
        .await;
    assert_limited(&embed, "app");
    // The app's nodes still beat: their window is their own, or the app's other traffic
    // would let every node's lease run out. An embed token sent to the heartbeat route counts
    // to its end user's window and the app's, not the nodes': however many, the nodes still
    // beat.
    let beat = json!({ "hostId": "n", "hostIp": "10.0.0.1", "grpcPort": 9000 });
    for _ in 0..5 {
        let flood = app
            .send(
                app.client
                    .post(app.url("/openapi/v1/node/heartbeat"))
                    .header("Svc-Auth", &token)
                    .json(&beat),
            )
            .await;
        flood.assert_error(429, 429, "may send");
    }
    app.ext_post(&crm, "/node/heartbeat", &beat).await.assert_ok();
    // The other app, and the admin API, are not affected; wrong credentials are refused by
    // authentication, not counted.
    app.ext_get(&erp, "/agents").await.assert_ok();
    app.get("/user", Some(&admin)).await.assert_ok();
    app.ext_get_as(Some(("crm", "wrong-token")), "/agents")
        .await
        .assert_error(401, 401, "invalid");
}

/// An embed token, which anyone visiting the partner's page holds, has its end user's window
/// (of a user's size) before the app's: one visitor cannot fill the app's window and lock the
/// partner's own backend out, and a request refused there is not counted to the app.
#[tokio::test]
async fn one_embed_token_cannot_fill_its_apps_window() {
    let limits = [
        ("RATE_LIMIT_WINDOW_SECS", "6"),
        ("RATE_LIMIT_USER_REQUESTS", "2"),
        ("RATE_LIMIT_APP_REQUESTS", "6"),
    ];
    let app = spawn_with(Store::Filesystem, &limits).await;
    let admin = app.admin_token().await;
    let crm = app.create_app(&admin, "crm").await;
    let token = app.ext_get(&crm, "/embed-token?openId=ann").await.assert_ok()["token"]
        .as_str()
        .unwrap()
        .to_owned();
    next_window().await;
    let visit = || {
        app.client
            .get(app.url("/openapi/v1/agent?openId=ann"))
            .header("Svc-Auth", &token)
    };
    for _ in 0..2 {
        // Counted, then refused by the handler for its own reason (no agentId).
        app.send(visit()).await.assert_error(400, 0, "agentId is required");
    }
    for _ in 0..5 {
        assert_limited(&app.send(visit()).await, "embed token's end user");
    }
    // The app's window holds the visitor's two requests only: four more for the partner.
    for _ in 0..4 {
        app.ext_get(&crm, "/agents").await.assert_ok();
    }
    assert_limited(&app.ext_get(&crm, "/agents").await, "app");
}

/// `Svc-App-Id` is a header any client can add: with a user's token it must not take the
/// requests out of the user's window, whether the app header names no app or a real one
/// with a wrong token.
#[tokio::test]
async fn an_app_header_does_not_take_a_user_out_of_the_user_limit() {
    let app = limited().await;
    let admin = app.admin_token().await;
    app.create_app(&admin, "crm").await;
    next_window().await;
    let as_user_with = |app_id: &'static str| {
        app.client
            .get(app.url("/user"))
            .header("Svc-Auth", &admin)
            .header("Svc-App-Id", app_id)
            .header("Svc-Token", "not-the-token")
    };
    for i in 0..5 {
        let r = app.send(as_user_with(if i % 2 == 0 { "nope" } else { "crm" })).await;
        r.assert_ok();
    }
    assert_limited(&app.send(as_user_with("nope")).await, "user");
    assert_limited(&app.send(as_user_with("crm")).await, "user");
    assert_limited(&app.get("/user", Some(&admin)).await, "user");
}

/// A revoked token (its user changed the password) is refused without using up its user's
/// window: whoever still holds it cannot keep the user locked out.
#[tokio::test]
async fn a_revoked_token_does_not_use_up_its_users_window() {
    let app = limited().await;
    let (_, stolen) = app.regular_user("carol").await;
    app.put(
        "/user/password",
        Some(&stolen),
        &json!({ "oldPassword": "user-password-1", "newPassword": "fresh-password-2" }),
    )
    .await
    .assert_ok();
    let login = app.login("carol", "fresh-password-2").await;
    let fresh = login.assert_ok()["token"].as_str().unwrap().to_owned();
    next_window().await;
    for _ in 0..8 {
        app.get("/user", Some(&stolen)).await.assert_error(401, 401, "");
    }
    app.get("/user", Some(&fresh)).await.assert_ok();
}

/// A limited app with an agent that answers.
async fn limited_chat() -> (ChatSetup, i64) {
    let s = ChatSetup::with(Store::Filesystem, &LIMITS).await;
    let model = s.chat_model("chat-echo", json!({})).await;
    let agent = s
        .agent(&s.admin, json!({ "name": "Helper", "chatModelId": model }))
        .await;
    (s, agent)
}

/// The chats count a request in the statement that reads their agent (one round trip where
/// there were two, before the first token): limited like every other route, a refused chat
/// stores nothing, a revoked token is refused without being counted, and a chat refused
/// before its agent is read is counted all the same.
#[tokio::test]
async fn an_admin_chat_is_counted_by_its_agent_read_and_a_refused_one_stores_nothing() {
    let (s, agent) = limited_chat().await;
    let (_, stolen) = s.app.regular_user("carol").await;
    s.app
        .put(
            "/user/password",
            Some(&stolen),
            &json!({ "oldPassword": "user-password-1", "newPassword": "fresh-password-2" }),
        )
        .await
        .assert_ok();

    next_window().await;
    for _ in 0..6 {
        let revoked = s.chat(&stolen, agent, say("c-0", "hi")).await.refused();
        revoked.assert_error(401, 401, "revoked");
    }
    // Five of the administrator's: refused after the read (blank content, an unknown agent),
    // and answered.
    s.chat(&s.admin, agent, say("c-1", " "))
        .await
        .refused()
        .assert_error(400, 0, "content is required");
    s.chat(&s.admin, 999_999, say("c-1", "hi"))
        .await
        .refused()
        .assert_error(404, 404, "agent");
    for _ in 0..3 {
        let events = s.chat(&s.admin, agent, say("c-1", "hello")).await.events();
        assert_eq!(events.last().unwrap()["type"], "done");
    }
    let before = (s.app.count("conversations").await, s.app.count("messages").await);
    let refused = s.chat(&s.admin, agent, say("c-2", "hello")).await.refused();
    assert_limited(&refused, "user");
    assert_eq!(
        (s.app.count("conversations").await, s.app.count("messages").await),
        before
    );
    assert_limited(&s.app.get("/user", Some(&s.admin)).await, "user");
}

#[tokio::test]
async fn an_external_chat_is_counted_by_its_agent_read_and_a_refused_one_registers_nobody() {
    let (s, agent) = limited_chat().await;
    let crm = s.app.create_app(&s.admin, "crm").await;
    let chat = async |open_id: &str, content: &str, sync: bool| {
        let path = if sync { "/agent/chat/sync" } else { "/agent/chat" };
        let body = json!({ "agentId": agent, "openId": open_id, "conversationId": "c", "content": content });
        s.app.ext_post(&crm, path, &body).await
    };

    next_window().await;
    // Four of the app's: refused before its agent is read (no content), and answered, the
    // first for a new user.
    chat("ann", "", false).await.assert_error(400, 0, "missing: content");
    chat("ann", "hello", true).await.assert_ok();
    let streamed = chat("ann", "again", false).await;
    assert_eq!(streamed.status, 200);
    chat("bob", "hello", true).await.assert_ok();
    let before = (s.app.count("external_users").await, s.app.count("messages").await);
    for sync in [false, true] {
        assert_limited(&chat("zed", "hello", sync).await, "app");
    }
    assert_eq!(
        (s.app.count("external_users").await, s.app.count("messages").await),
        before
    );
    assert_limited(&s.app.ext_get(&crm, "/agents").await, "app");
}

/// A refresh carries no access token, but its owner is known: a live token's refresh counts to
/// the user's window like the user's other requests, and a refused refresh leaves its token
/// unused. Dead tokens (here revoked by a password change) are refused without being counted:
/// whoever still held one could otherwise keep the user locked out.
#[tokio::test]
async fn refreshes_count_to_their_users_window_and_a_refused_one_spends_nothing() {
    let app = limited().await;
    let (_, access) = app.regular_user("dave").await;
    let stolen = app.login("dave", "user-password-1").await;
    let stolen = stolen.assert_ok()["refreshToken"].as_str().unwrap().to_owned();
    let change = json!({ "oldPassword": "user-password-1", "newPassword": "fresh-password-2" });
    app.put("/user/password", Some(&access), &change).await.assert_ok();
    let login = app.login("dave", "fresh-password-2").await;
    let mut refresh = login.assert_ok()["refreshToken"].as_str().unwrap().to_owned();

    next_window().await;
    for _ in 0..8 {
        let dead = app
            .post("/auth/refreshToken", None, &json!({ "refreshToken": stolen }))
            .await;
        dead.assert_error(401, 401, "revoked");
    }
    let mut access = String::new();
    for _ in 0..5 {
        let r = app
            .post("/auth/refreshToken", None, &json!({ "refreshToken": refresh }))
            .await;
        let pair = r.assert_ok();
        refresh = pair["refreshToken"].as_str().unwrap().to_owned();
        access = pair["token"].as_str().unwrap().to_owned();
    }
    let refused = app
        .post("/auth/refreshToken", None, &json!({ "refreshToken": refresh }))
        .await;
    assert_limited(&refused, "user");
    assert_limited(&app.get("/user", Some(&access)).await, "user");
    // Unknown tokens have no owner to count to: refused as invalid.
    app.post("/auth/refreshToken", None, &json!({ "refreshToken": "nope" }))
        .await
        .assert_error(401, 401, "invalid");

    next_window().await;
    let r = app
        .post("/auth/refreshToken", None, &json!({ "refreshToken": refresh }))
        .await;
    r.assert_ok();
}

/// A limit past what the window's counter column holds (someone meaning "as many as you
/// like") lets requests through: compared as a negative number, it refused every one.
#[tokio::test]
async fn the_largest_limit_lets_requests_through() {
    let most = u32::MAX.to_string();
    let app = spawn_with(Store::Filesystem, &[("RATE_LIMIT_USER_REQUESTS", most.as_str())]).await;
    let (_, token) = app.regular_user("dave").await;
    app.get("/user", Some(&token)).await.assert_ok();
}
