//! The permission matrix: every route the OpenAPI document lists has an auth class here, and
//! each class is enforced -- no credentials, forged, expired, tampered and garbled tokens are
//! 401 everywhere; regular users get 403 on administrator routes; one user cannot read or
//! change another's private things, one app cannot reach another app's agents, users or
//! conversations, and an embed token stays inside its openId and agent. Every refusal leaves
//! the database and the store exactly as they were.

use std::collections::BTreeSet;
use std::time::Duration;

use api_tests::apps::Creds;
use api_tests::chat::{say, ChatSetup};
use api_tests::{Reply, TestApp, PNG};
use jsonwebtoken::{encode, EncodingKey, Header};
use serde_json::{json, Value};
use shared::auth::{AccessClaims, JwtKeys};

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// No credentials: login, refresh, the embed page, signed direct uploads.
    Public,
    /// Any signed-in user (`Svc-Auth`).
    User,
    /// Administrators only (`Svc-Auth` with role 1).
    Admin,
    /// App credentials (`Svc-App-Id` + `Svc-Token`).
    App,
    /// App credentials or an embed token in `Svc-Auth`.
    AppOrEmbed,
}

use Class::*;

/// Every route of the service and who may call it. A route the OpenAPI document lists but
/// this table does not fails `every_route_has_an_auth_class`.
const ROUTES: &[(&str, &str, Class)] = &[
    // users and auth
    ("POST", "/user/login", Public),
    ("POST", "/auth/refreshToken", Public),
    ("GET", "/user", User),
    ("PUT", "/user/password", User),
    ("POST", "/user", Admin),
    ("GET", "/user/page/list", Admin),
    ("PUT", "/user/{id}", Admin),
    ("PUT", "/user/{id}/password", Admin),
    ("PUT", "/user/{id}/role", Admin),
    ("POST", "/user/authorize/code", Admin),
    // apps
    ("POST", "/app", Admin),
    ("GET", "/app/page", Admin),
    ("GET", "/app/list", Admin),
    ("GET", "/app/all-nodes", Admin),
    ("PUT", "/app/{id}", Admin),
    ("DELETE", "/app/{id}", Admin),
    ("POST", "/app/{id}/toggle-status", Admin),
    ("POST", "/app/{id}/token", Admin),
    ("GET", "/app/{id}/nodes", Admin),
    ("DELETE", "/app/{id}/nodes/{hostId}", Admin),
    // models
    ("GET", "/ai-model/providers", User),
    ("GET", "/ai-model/all-providers", User),
    ("GET", "/ai-model/provider/{id}", User),
    ("POST", "/ai-model/provider", Admin),
    ("PUT", "/ai-model/provider/{id}", Admin),
    ("DELETE", "/ai-model/provider/{id}", Admin),
    ("PUT", "/ai-model/provider/{id}/enable", Admin),
    ("PUT", "/ai-model/provider/{id}/disable", Admin),
    ("GET", "/ai-model/adapters", User),
    ("GET", "/ai-model/configs", User),
    ("GET", "/ai-model/config/{id}", User),
    ("POST", "/ai-model/config", User),
    ("PUT", "/ai-model/config/{id}", User),
    ("DELETE", "/ai-model/config/{id}", User),
    ("PUT", "/ai-model/config/{id}/enable", User),
    ("PUT", "/ai-model/config/{id}/disable", User),
    ("POST", "/ai-model/config/{id}/test", User),
    ("GET", "/ai-model/by-type/{modelType}", User),
    ("GET", "/ai-model/by-provider-type", User),
    ("GET", "/ai-model/default", User),
    ("GET", "/ai-model/default/{modelType}", User),
    ("PUT", "/ai-model/switch-default/{modelId}", Admin),
    ("GET", "/ai-model/usage/stat/{modelId}", User),
    ("GET", "/ai-model/usage/user-stats", User),
    ("GET", "/ai-model/usage/global-stats", Admin),
    // MCP servers
    ("POST", "/mcp-server", User),
    ("GET", "/mcp-server/list", User),
    ("GET", "/mcp-server/page", User),
    ("GET", "/mcp-server/{id}", User),
    ("PUT", "/mcp-server/{id}", User),
    ("DELETE", "/mcp-server/{id}", User),
    ("POST", "/mcp-server/{id}/test", User),
    ("GET", "/mcp-server/{id}/tools", User),
    // knowledge bases, documents, chunks, store instances
    ("GET", "/rag/page", User),
    ("POST", "/rag", User),
    ("GET", "/rag/{id}", User),
    ("PUT", "/rag/{id}", User),
    ("DELETE", "/rag/{id}", User),
    ("PUT", "/rag/{id}/config", User),
    ("POST", "/rag/search", User),
    ("POST", "/rag/qa/stream", User),
    ("POST", "/open-api/rag/search", User),
    ("POST", "/open-api/rag/qa/stream", User),
    ("GET", "/document/page", User),
    ("GET", "/document/{id}", User),
    ("DELETE", "/document/{id}", User),
    ("POST", "/document/upload/preview", User),
    ("POST", "/document/upload/preview-from-resources", User),
    ("POST", "/document/upload/commit", User),
    ("DELETE", "/document/upload/preview/{token}", User),
    ("POST", "/document/import/url", User),
    ("POST", "/document/{id}/reprocess", User),
    ("GET", "/document/{id}/preview", User),
    ("GET", "/document/{id}/download", User),
    ("GET", "/document/{id}/images", User),
    ("GET", "/document/image/{id}", User),
    ("GET", "/chunk/page", User),
    ("POST", "/chunk", User),
    ("PUT", "/chunk/{id}", User),
    ("DELETE", "/chunk/{id}", User),
    ("GET", "/store-instance", User),
    ("GET", "/store-instance/page", User),
    ("GET", "/store-instance/{id}", User),
    ("POST", "/store-instance", Admin),
    ("PUT", "/store-instance/{id}", Admin),
    ("DELETE", "/store-instance/{id}", Admin),
    ("POST", "/store-instance/test", Admin),
    // memory
    ("GET", "/memory/conversation/{conversationId}", User),
    ("GET", "/memory/agent/{agentId}", User),
    ("GET", "/memory/agent/{agentId}/recent", User),
    ("GET", "/memory/agent/{agentId}/stats", User),
    (
        "POST",
        "/memory/agent/{agentId}/conversations/{conversationId}/extract",
        User,
    ),
    (
        "GET",
        "/memory/agent/{agentId}/conversations/{conversationId}/context-preview",
        User,
    ),
    ("POST", "/memory/search", User),
    ("GET", "/memory/{memoryId}", User),
    ("PUT", "/memory/{memoryId}", User),
    ("DELETE", "/memory/{memoryId}", User),
    ("POST", "/memory/{memoryId}/archive", User),
    ("POST", "/memory/{memoryId}/suppress", User),
    ("POST", "/memory/{memoryId}/activate", User),
    ("GET", "/memory/config", User),
    ("POST", "/memory/config", User),
    ("GET", "/memory/config/{id}", User),
    ("PUT", "/memory/config/{id}", User),
    ("DELETE", "/memory/config/{id}", User),
    ("POST", "/memory/config/{id}/debug", User),
    // skills
    ("GET", "/skill/page", User),
    ("GET", "/skill/list", User),
    ("POST", "/skill", User),
    ("POST", "/skill/upload", User),
    ("POST", "/skill/{id}/upload", User),
    ("POST", "/skill/ai/generate", User),
    ("GET", "/skill/{id}", User),
    ("PUT", "/skill/{id}", User),
    ("DELETE", "/skill/{id}", User),
    ("POST", "/skill/{id}/ai/optimize", User),
    ("GET", "/skill/{id}/download", User),
    ("GET", "/skill/{id}/files", User),
    ("POST", "/skill/{id}/files", User),
    ("DELETE", "/skill/{id}/files", User),
    ("GET", "/skill/{id}/files/content", User),
    ("PUT", "/skill/{id}/files/content", User),
    ("PUT", "/skill/{id}/files/rename", User),
    // agents
    ("GET", "/agent/page", User),
    ("POST", "/agent", User),
    ("GET", "/agent/market", User),
    ("GET", "/agent/my", User),
    ("GET", "/agent/chat-models", User),
    ("POST", "/agent/create/stream", User),
    ("GET", "/agent/{id}", User),
    ("PUT", "/agent/{id}", User),
    ("DELETE", "/agent/{id}", User),
    ("POST", "/agent/{id}/subscribe", User),
    ("DELETE", "/agent/{id}/subscribe", User),
    ("GET", "/agent/{id}/analytics", User),
    ("GET", "/agent/{id}/usage-detail", User),
    ("GET", "/agent/{id}/conversations", User),
    ("POST", "/agent/{agentId}/chat", User),
    ("GET", "/agent/{agentId}/conversation/{conversationId}/messages", User),
    ("DELETE", "/agent/{agentId}/conversation/{conversationId}", User),
    ("POST", "/agent/{agentId}/conversation/{conversationId}/stop", User),
    // resources
    ("POST", "/resource/upload", User),
    ("POST", "/resource/upload-url", User),
    ("POST", "/resource/upload/complete", User),
    ("PUT", "/resource/direct-upload", Public),
    ("GET", "/resource/page", User),
    ("GET", "/resource/{id}/preview", User),
    ("GET", "/resource/{id}/download", User),
    ("DELETE", "/resource/{id}", User),
    // external API
    ("GET", "/openapi/v1/agents", App),
    ("GET", "/openapi/v1/agent", AppOrEmbed),
    ("POST", "/openapi/v1/agent/chat", AppOrEmbed),
    ("POST", "/openapi/v1/agent/chat/sync", AppOrEmbed),
    ("POST", "/openapi/v1/user/register", App),
    ("GET", "/openapi/v1/user", App),
    ("GET", "/openapi/v1/user/agents", App),
    ("POST", "/openapi/v1/user/agent", App),
    ("DELETE", "/openapi/v1/user/agent", App),
    ("GET", "/openapi/v1/agent/conversations", App),
    ("POST", "/openapi/v1/agent/conversations", App),
    ("DELETE", "/openapi/v1/agent/conversations", App),
    ("GET", "/openapi/v1/agent/conversations/messages", App),
    ("POST", "/openapi/v1/agent/conversations/stop", App),
    ("POST", "/openapi/v1/resource/upload", App),
    ("POST", "/openapi/v1/resource/upload-url", App),
    ("POST", "/openapi/v1/resource/upload/complete", App),
    ("GET", "/openapi/v1/embed-token", App),
    ("POST", "/openapi/v1/embed-token", App),
    ("POST", "/openapi/v1/node/heartbeat", App),
    ("GET", "/embed/{agentId}", Public),
];

/// Routes of the OpenAPI document the app serves, as (METHOD, path without the API prefix).
async fn documented_routes(app: &TestApp) -> BTreeSet<(String, String)> {
    let doc: Value = app
        .client
        .get(format!("{}/api-docs/openapi.json", app.origin))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let prefix = app.base.trim_start_matches(&app.origin).to_owned();
    let mut routes = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in item.as_object().expect("path item").keys() {
            let path = path.strip_prefix(&prefix).unwrap_or(path);
            routes.insert((method.to_uppercase(), path.to_owned()));
        }
    }
    routes
}

/// A concrete path for a route template: ids that exist nowhere and plausible values for the
/// rest, so a request can only fail on who sent it.
fn concrete(template: &str) -> String {
    let mut out = String::new();
    for segment in template.split('/').skip(1) {
        out.push('/');
        match segment {
            "{modelType}" => out.push_str("CHAT"),
            "{conversationId}" | "{token}" | "{hostId}" => out.push_str("absent"),
            s if s.starts_with('{') => out.push_str("987654"),
            s => out.push_str(s),
        }
    }
    out
}

async fn call(app: &TestApp, method: &str, path: &str, headers: &[(&str, &str)], body: Option<&Value>) -> Reply {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut req = app.client.request(method.clone(), app.url(path));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    if let Some(b) = body {
        req = req.json(b);
    } else if method == reqwest::Method::POST || method == reqwest::Method::PUT {
        req = req.json(&json!({}));
    }
    app.send(req).await
}

/// The envelope code of either envelope (`code` or the model and skill modules' `status`).
fn any_code(r: &Reply) -> Option<i64> {
    r.body["code"].as_i64().or_else(|| r.body["status"].as_i64())
}

#[track_caller]
fn assert_refused(r: &Reply, status: u16, what: &str) {
    assert_eq!(
        (r.status, any_code(r)),
        (status, Some(i64::from(status))),
        "{what}: {:?}",
        r.body
    );
    assert!(r.body["data"].is_null(), "{what}: failures carry data: null");
}

#[tokio::test]
async fn every_route_has_an_auth_class() {
    let app = api_tests::spawn(api_tests::Store::Filesystem).await;
    let documented = documented_routes(&app).await;
    let listed: BTreeSet<(String, String)> = ROUTES
        .iter()
        .map(|(m, p, _)| ((*m).to_owned(), (*p).to_owned()))
        .collect();
    assert_eq!(listed.len(), ROUTES.len(), "a route is listed twice");
    let missing: Vec<_> = documented.difference(&listed).collect();
    assert!(
        missing.is_empty(),
        "routes without an auth class in permissions::ROUTES: {missing:?}"
    );
    let stale: Vec<_> = listed.difference(&documented).collect();
    assert!(
        stale.is_empty(),
        "ROUTES lists routes the app no longer serves: {stale:?}"
    );
}

/// Tokens that must never pass: another secret, expired, tampered, wrong kind, `alg: none`,
/// garbage, and an embed token (signed with an app's token) on the admin API.
fn bad_tokens(secret: &[u8], real: &str, embed: &str, admin_id: i64) -> Vec<(&'static str, String)> {
    let now = chrono::Utc::now().timestamp();
    let claims = |exp: i64, typ: &str| AccessClaims {
        sub: admin_id,
        role: 1,
        iat: now - 3600,
        exp,
        typ: typ.to_owned(),
        ver: 0,
    };
    let sign = |c: &AccessClaims| encode(&Header::default(), c, &EncodingKey::from_secret(secret)).unwrap();
    let forged = JwtKeys::new(&[7u8; 32], Duration::from_secs(600))
        .issue_access(admin_id, 1, 0)
        .unwrap();
    let mut tampered = real.to_owned();
    let last = tampered.pop().unwrap();
    tampered.push(if last == 'A' { 'B' } else { 'A' });
    let b64 = |v: &Value| {
        use base64::Engine as _;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
    };
    let unsigned = format!(
        "{}.{}.",
        b64(&json!({ "alg": "none", "typ": "JWT" })),
        b64(&serde_json::to_value(claims(now + 600, "access")).unwrap())
    );
    vec![
        ("another secret", forged),
        ("expired", sign(&claims(now - 60, "access"))),
        ("tampered signature", tampered),
        ("wrong kind", sign(&claims(now + 600, "refresh"))),
        ("alg none", unsigned),
        ("garbled", "not-a-jwt".to_owned()),
        ("three garbled parts", "a.b.c".to_owned()),
        ("embed token", embed.to_owned()),
    ]
}

#[tokio::test]
async fn every_route_refuses_missing_and_bad_credentials() {
    let app = api_tests::spawn(api_tests::Store::Filesystem).await;
    let admin = app.admin_token().await;
    let admin_id = app.get("/user", Some(&admin)).await.assert_ok()["id"].as_i64().unwrap();
    let (_, user) = app.regular_user("mallory").await;
    let crm = app.create_app(&admin, "crm").await;
    let embed = app.ext_get(&crm, "/embed-token?openId=ann").await.assert_ok()["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let secret = app.state.config().jwt_secret.clone();
    let bad = bad_tokens(&secret, &admin, &embed, admin_id);
    let before = app.snapshot().await;

    for (method, template, class) in ROUTES {
        let path = concrete(template);
        let what = |how: &str| format!("{method} {template} {how}");
        match class {
            Public => continue,
            User | Admin => {
                let r = call(&app, method, &path, &[], None).await;
                assert_refused(&r, 401, &what("without a token"));
                for (how, token) in &bad {
                    let r = call(&app, method, &path, &[("Svc-Auth", token)], None).await;
                    assert_refused(&r, 401, &what(how));
                }
                if *class == Admin {
                    let r = call(&app, method, &path, &[("Svc-Auth", &user)], None).await;
                    assert_refused(&r, 403, &what("as a regular user"));
                }
            }
            App | AppOrEmbed => {
                let wrong = crm.token.replace(|c: char| c.is_ascii_alphanumeric(), "0");
                let cases: [(&str, Vec<(&str, &str)>); 5] = [
                    ("without credentials", vec![]),
                    ("with an admin token", vec![("Svc-Auth", &admin)]),
                    (
                        "with a wrong app token",
                        vec![("Svc-App-Id", "crm"), ("Svc-Token", &wrong)],
                    ),
                    (
                        "with an unknown app",
                        vec![("Svc-App-Id", "nobody"), ("Svc-Token", &crm.token)],
                    ),
                    ("with a garbled embed token", vec![("Svc-Auth", "a.b.c")]),
                ];
                for (how, headers) in cases {
                    let r = call(&app, method, &path, &headers, None).await;
                    assert_refused(&r, 401, &what(how));
                }
                if *class == App {
                    let r = call(&app, method, &path, &[("Svc-Auth", &embed)], None).await;
                    assert_refused(&r, 401, &what("with an embed token"));
                }
            }
        }
    }
    app.snapshot()
        .await
        .assert_unchanged_since(&before, "refused credentials");
}

/// User A's private things, made through the API.
struct Owned {
    personal_model: i64,
    agent: i64,
    conversation: String,
    kb: i64,
    document: i64,
    chunk: i64,
    skill: i64,
    mcp: i64,
    memory: i64,
    memory_config: i64,
    resource: i64,
    /// A file of a knowledge-base upload preview that was never committed.
    staged_file: i64,
}

async fn owned_by(s: &ChatSetup, token: &str, user_id: i64) -> Owned {
    let app = &s.app;
    let chat_model = s.chat_model("chat-echo", json!({})).await;
    let embedding = s.embedding_model("emb-8").await;
    let personal_model = app
        .model(
            token,
            s.provider,
            "CHAT",
            "chat-echo",
            &s.models.base_url,
            json!({ "scope": "PERSONAL" }),
        )
        .await;
    let agent = s
        .agent(token, json!({ "name": "Private helper", "chatModelId": chat_model }))
        .await;
    s.chat(token, agent, say("secret-talk", "my secret")).await.events();
    let kb = app
        .post(
            "/rag",
            Some(token),
            &json!({ "name": "diary", "embeddingModelId": embedding }),
        )
        .await
        .assert_ok()["id"]
        .as_i64()
        .unwrap();
    let commit = app
        .upload_documents(token, kb, &[("diary.txt", b"Dear diary, a secret.".to_vec())])
        .await;
    let document = commit.assert_ok()["items"][0]["id"].as_i64().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let chunk = loop {
        let id: Option<i64> = sqlx::query_scalar("SELECT id FROM chunks WHERE document_id = $1 LIMIT 1")
            .bind(document)
            .fetch_optional(&app.db)
            .await
            .unwrap();
        if let Some(id) = id {
            break id;
        }
        assert!(std::time::Instant::now() < deadline, "the document was never chunked");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let skill = app
        .post(
            "/skill",
            Some(token),
            &json!({ "name": "private-skill", "description": "d" }),
        )
        .await
        .assert_status_ok()["id"]
        .as_i64()
        .unwrap();
    let mcp = app
        .post(
            "/mcp-server",
            Some(token),
            &json!({ "name": "private-tools", "transportType": 2, "endpoint": "http://127.0.0.1:9/mcp" }),
        )
        .await
        .assert_ok()
        .as_i64()
        .unwrap();
    let memory = sqlx::query_scalar(
        "INSERT INTO memories (agent_id, user_id, memory_type, title, content, normalized_key, status,
         conversation_key) VALUES ($1, $2, 'FACT', 'secret', 'a secret', 'secret', 'ACTIVE', 'secret-talk') RETURNING id",
    )
    .bind(agent)
    .bind(user_id)
    .fetch_one(&app.db)
    .await
    .unwrap();
    let memory_config = app
        .post(
            "/memory/config",
            Some(token),
            &json!({ "name": "mine", "embeddingModelId": embedding, "extractionModelId": chat_model }),
        )
        .await
        .assert_ok()
        .as_i64()
        .unwrap();
    let resource = app
        .upload_resource(token, "me.png", PNG.to_vec(), None)
        .await
        .assert_ok()["id"]
        .as_i64()
        .unwrap();
    let staged_file = app
        .preview_documents(token, kb, &[("draft.txt", b"An unfinished secret.".to_vec())], None)
        .await
        .assert_ok()["items"][0]["tempResourceId"]
        .as_i64()
        .unwrap();
    Owned {
        staged_file,
        personal_model,
        agent,
        conversation: "secret-talk".to_owned(),
        kb,
        document,
        chunk,
        skill,
        mcp,
        memory,
        memory_config,
        resource,
    }
}

/// Ids like `a`'s that were never issued, but for the things others may see (the agent, the
/// skill, the memory config).
fn unknown_like(a: &Owned) -> Owned {
    let far = 1_000_000_000;
    Owned {
        personal_model: a.personal_model + far,
        agent: a.agent,
        conversation: "no-such-conversation".to_owned(),
        kb: a.kb + far,
        document: a.document + far,
        chunk: a.chunk + far,
        skill: a.skill,
        mcp: a.mcp + far,
        memory: a.memory + far,
        memory_config: a.memory_config,
        resource: a.resource + far,
        staged_file: a.staged_file + far,
    }
}

/// A message with its ids and conversation keys taken out, to compare a refusal of a hidden
/// thing with that of an unknown one.
fn without_ids(msg: &str, keys: &[&str]) -> String {
    let mut msg = msg.to_owned();
    for key in keys {
        msg = msg.replace(key, "#");
    }
    let mut out = String::new();
    for c in msg.chars() {
        match c.is_ascii_digit() {
            true if out.ends_with('#') => {}
            true => out.push('#'),
            false => out.push(c),
        }
    }
    out
}

/// (method, path, body, HTTP status) of requests on `a`'s things: 404 where the thing is
/// private (its id reveals nothing), 403 where others may see it but not change it (agents,
/// skills, memory configs), 400 for the search and Q&A's "does not exist", 200 with nothing
/// for lists that show the caller's own rows only.
fn requests_on(a: &Owned, alice_id: i64) -> Vec<(&'static str, String, Value, u16)> {
    let (m, ag, c, kb, d, ch, sk, mc, me, cf, r, st) = (
        a.personal_model,
        a.agent,
        &a.conversation,
        a.kb,
        a.document,
        a.chunk,
        a.skill,
        a.mcp,
        a.memory,
        a.memory_config,
        a.resource,
        a.staged_file,
    );
    vec![
        ("GET", format!("/ai-model/config/{m}"), json!(null), 404),
        (
            "PUT",
            format!("/ai-model/config/{m}"),
            json!({ "modelName": "mine now" }),
            404,
        ),
        ("DELETE", format!("/ai-model/config/{m}"), json!(null), 404),
        ("PUT", format!("/ai-model/config/{m}/disable"), json!(null), 404),
        ("PUT", format!("/ai-model/config/{m}/enable"), json!(null), 404),
        ("POST", format!("/ai-model/config/{m}/test"), json!(null), 404),
        ("GET", format!("/ai-model/usage/stat/{m}"), json!(null), 404),
        ("PUT", format!("/agent/{ag}"), json!({ "name": "taken" }), 403),
        ("DELETE", format!("/agent/{ag}"), json!(null), 403),
        ("GET", format!("/agent/{ag}/analytics?range=7d"), json!(null), 403),
        ("GET", format!("/agent/{ag}/usage-detail"), json!(null), 403),
        ("GET", format!("/agent/{ag}/conversations"), json!(null), 200),
        (
            "GET",
            format!("/agent/{ag}/conversation/{c}/messages"),
            json!(null),
            404,
        ),
        ("DELETE", format!("/agent/{ag}/conversation/{c}"), json!(null), 404),
        ("POST", format!("/agent/{ag}/conversation/{c}/stop"), json!(null), 404),
        ("GET", format!("/memory/conversation/{c}"), json!(null), 200),
        (
            "POST",
            format!("/memory/agent/{ag}/conversations/{c}/extract"),
            json!(null),
            404,
        ),
        (
            "GET",
            format!("/memory/agent/{ag}/conversations/{c}/context-preview"),
            json!(null),
            404,
        ),
        ("GET", format!("/rag/{kb}"), json!(null), 404),
        ("PUT", format!("/rag/{kb}"), json!({ "name": "mine now" }), 404),
        (
            "PUT",
            format!("/rag/{kb}/config"),
            json!({ "searchParams": { "resultCount": 1 } }),
            404,
        ),
        ("DELETE", format!("/rag/{kb}"), json!(null), 404),
        (
            "POST",
            "/rag/search".into(),
            json!({ "ragId": kb, "query": "secret" }),
            400,
        ),
        (
            "POST",
            "/rag/qa/stream".into(),
            json!({ "ragId": kb, "query": "secret" }),
            400,
        ),
        (
            "POST",
            "/open-api/rag/search".into(),
            json!({ "ragId": kb, "query": "secret" }),
            400,
        ),
        ("GET", format!("/document/page?ragId={kb}"), json!(null), 404),
        ("GET", format!("/document/{d}"), json!(null), 404),
        ("GET", format!("/document/{d}/preview"), json!(null), 404),
        ("GET", format!("/document/{d}/download"), json!(null), 404),
        ("GET", format!("/document/{d}/images"), json!(null), 404),
        ("POST", format!("/document/{d}/reprocess"), json!(null), 404),
        ("DELETE", format!("/document/{d}"), json!(null), 404),
        (
            "POST",
            "/document/import/url".into(),
            json!({ "ragId": kb, "url": "http://example.com/a.txt" }),
            404,
        ),
        (
            "GET",
            format!("/chunk/page?ragId={kb}&documentId={d}"),
            json!(null),
            404,
        ),
        ("GET", format!("/chunk/page?documentId={d}"), json!(null), 404),
        (
            "POST",
            "/chunk".into(),
            json!({ "ragId": kb, "documentId": d, "content": "planted" }),
            404,
        ),
        ("PUT", format!("/chunk/{ch}"), json!({ "content": "changed" }), 404),
        ("DELETE", format!("/chunk/{ch}"), json!(null), 404),
        ("PUT", format!("/skill/{sk}"), json!({ "name": "taken" }), 403),
        ("DELETE", format!("/skill/{sk}"), json!(null), 403),
        (
            "PUT",
            format!("/skill/{sk}/files/content?path=notes.md"),
            json!({ "content": "x" }),
            403,
        ),
        (
            "POST",
            format!("/skill/{sk}/files"),
            json!({ "path": "new.md", "type": "file" }),
            403,
        ),
        ("DELETE", format!("/skill/{sk}/files?path=notes.md"), json!(null), 403),
        (
            "PUT",
            format!("/skill/{sk}/files/rename"),
            json!({ "oldPath": "notes.md", "newPath": "x.md" }),
            403,
        ),
        ("GET", format!("/mcp-server/{mc}"), json!(null), 404),
        (
            "PUT",
            format!("/mcp-server/{mc}"),
            json!({ "description": "mine now" }),
            404,
        ),
        ("DELETE", format!("/mcp-server/{mc}"), json!(null), 404),
        ("POST", format!("/mcp-server/{mc}/test"), json!(null), 404),
        ("GET", format!("/mcp-server/{mc}/tools"), json!(null), 404),
        ("GET", format!("/memory/{me}"), json!(null), 404),
        ("PUT", format!("/memory/{me}"), json!({ "title": "changed" }), 404),
        ("DELETE", format!("/memory/{me}"), json!(null), 404),
        ("POST", format!("/memory/{me}/archive"), json!(null), 404),
        ("POST", format!("/memory/{me}/suppress"), json!(null), 404),
        ("POST", format!("/memory/{me}/activate"), json!(null), 404),
        ("PUT", format!("/memory/config/{cf}"), json!({ "name": "taken" }), 403),
        ("DELETE", format!("/memory/config/{cf}"), json!(null), 403),
        (
            "POST",
            format!("/memory/config/{cf}/debug"),
            json!({ "agentId": ag, "userId": alice_id, "query": "secret" }),
            403,
        ),
        ("GET", format!("/resource/{r}/preview"), json!(null), 404),
        ("GET", format!("/resource/{r}/download"), json!(null), 404),
        ("DELETE", format!("/resource/{r}"), json!(null), 404),
        ("GET", format!("/resource/{st}/preview"), json!(null), 404),
        ("GET", format!("/resource/{st}/download"), json!(null), 404),
        ("DELETE", format!("/resource/{st}"), json!(null), 404),
    ]
}

#[tokio::test]
async fn one_user_cannot_reach_or_change_anothers_private_things() {
    let s = ChatSetup::new().await;
    let app = &s.app;
    let (alice_id, alice) = app.regular_user("alice").await;
    let (_, bob) = app.regular_user("bob").await;
    s.set_quota(alice_id, 100_000).await;
    let a = owned_by(&s, &alice, alice_id).await;
    let unknown = unknown_like(&a);
    let keys = [a.conversation.as_str(), unknown.conversation.as_str()];
    let before = app.snapshot().await;
    let cases = requests_on(&a, alice_id)
        .into_iter()
        .zip(requests_on(&unknown, alice_id));
    for ((method, path, body, status), (_, unknown_path, unknown_body, _)) in cases {
        let body = (!body.is_null()).then_some(&body);
        let r = call(app, method, &path, &[("Svc-Auth", &bob)], body).await;
        let what = format!("bob: {method} {path}");
        match status {
            200 => {
                // Reads that list the caller's own things: bob's are empty.
                let data = r.assert_ok();
                let rows = if data.is_array() { data } else { &data["data"] };
                assert_eq!(rows, &json!([]), "{what}");
            }
            400 => r.assert_error(400, 0, "does not exist"),
            _ => assert_refused(&r, status, &what),
        }
        if matches!(status, 400 | 404) {
            // A thing bob may not see answers as one that does not exist, word for word.
            let unknown_body = (!unknown_body.is_null()).then_some(&unknown_body);
            let u = call(app, method, &unknown_path, &[("Svc-Auth", &bob)], unknown_body).await;
            assert_eq!(
                (r.status, any_code(&r), without_ids(r.msg(), &keys)),
                (u.status, any_code(&u), without_ids(u.msg(), &keys)),
                "{what} against {method} {unknown_path}"
            );
        }
    }
    // Lists and searches show bob nothing of alice's.
    for path in [
        "/ai-model/configs?scope=PERSONAL",
        "/rag/page",
        "/mcp-server/page",
        "/resource/page",
    ] {
        let r = app.get(path, Some(&bob)).await;
        let total = r.body["total"].as_i64().or_else(|| r.body["data"]["total"].as_i64());
        assert_eq!(total, Some(0), "bob: GET {path} lists {:?}", r.body);
    }
    let found = app
        .post("/memory/search", Some(&bob), &json!({ "query": "secret" }))
        .await;
    assert_eq!(found.assert_ok(), &json!([]));
    app.snapshot()
        .await
        .assert_unchanged_since(&before, "bob's attempts on alice's things");
}

/// Two apps, each with an agent, an external user and a conversation of its own.
struct TwoApps {
    s: ChatSetup,
    crm: Creds,
    erp: Creds,
    erp_agent: i64,
    model: i64,
}

async fn two_apps() -> TwoApps {
    let s = ChatSetup::new().await;
    let model = s.chat_model("chat-echo", json!({})).await;
    let crm = s.app.create_app(&s.admin, "crm").await;
    let erp = s.app.create_app(&s.admin, "erp").await;
    let erp_agent = s
        .agent(
            &s.admin,
            json!({ "name": "ERP bot", "chatModelId": model, "appId": "erp" }),
        )
        .await;
    let conversation = json!({ "agentId": erp_agent, "openId": "erp-user", "conversationId": "erp-talk" });
    s.app
        .ext_post(&erp, "/agent/conversations", &conversation)
        .await
        .assert_ok();
    TwoApps {
        s,
        crm,
        erp,
        erp_agent,
        model,
    }
}

#[tokio::test]
async fn one_app_cannot_reach_another_apps_agents_users_or_conversations() {
    let t = two_apps().await;
    let app = &t.s.app;
    let ag = t.erp_agent;
    let gone = "agent does not exist or is disabled";
    let before = app.snapshot().await;
    // erp's user is nobody to crm: no subscriptions, no profile.
    let subscribed = app.ext_get(&t.crm, "/user/agents?openId=erp-user").await;
    assert_eq!(subscribed.assert_ok(), &json!([]));
    let gets: [(String, u16, &str); 4] = [
        (format!("/agent?agentId={ag}"), 400, gone),
        ("/user?openId=erp-user".into(), 404, "external user"),
        (format!("/agent/conversations?agentId={ag}&openId=erp-user"), 400, gone),
        (
            format!("/agent/conversations/messages?agentId={ag}&openId=erp-user&conversationId=erp-talk"),
            400,
            gone,
        ),
    ];
    for (path, status, needle) in gets {
        app.ext_get(&t.crm, &path)
            .await
            .assert_error(status, if status == 400 { 0 } else { 404 }, needle);
    }
    let posts = [
        ("/user/agent", json!({ "agentId": ag, "openId": "erp-user" })),
        (
            "/agent/conversations",
            json!({ "agentId": ag, "openId": "erp-user", "conversationId": "erp-talk" }),
        ),
        (
            "/agent/chat/sync",
            json!({ "agentId": ag, "openId": "erp-user", "conversationId": "erp-talk", "content": "hi" }),
        ),
        (
            "/agent/chat",
            json!({ "agentId": ag, "openId": "erp-user", "conversationId": "erp-talk", "content": "hi" }),
        ),
    ];
    for (path, body) in posts {
        app.ext_post(&t.crm, path, &body).await.assert_error(400, 0, gone);
    }
    // Unsubscribing is lenient (a user may leave an agent that was disabled) but reaches only
    // crm's own users, and erp's user is not one of them.
    app.ext_delete(&t.crm, &format!("/user/agent?agentId={ag}&openId=erp-user"))
        .await
        .assert_ok();
    for path in [
        format!("/agent/conversations?agentId={ag}&openId=erp-user"),
        format!("/agent/conversations?agentId={ag}&openId=erp-user&conversationId=erp-talk"),
    ] {
        app.ext_delete(&t.crm, &path).await.assert_error(400, 0, gone);
    }
    // The other app's embed token cannot be bent to this app's agent either.
    let token = app.ext_get(&t.crm, "/embed-token?openId=erp-user").await.assert_ok()["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = call(
        app,
        "POST",
        "/openapi/v1/agent/chat/sync",
        &[("Svc-Auth", &token)],
        Some(&json!({ "agentId": ag, "conversationId": "erp-talk", "content": "hi" })),
    )
    .await;
    r.assert_error(400, 0, gone);
    app.snapshot()
        .await
        .assert_unchanged_since(&before, "crm's attempts on erp's data");
    // erp itself still reaches all of it.
    app.ext_get(&t.erp, "/user?openId=erp-user").await.assert_ok();
}

#[tokio::test]
async fn an_embed_token_opens_only_its_agent_and_its_open_id() {
    let t = two_apps().await;
    let app = &t.s.app;
    let other_agent =
        t.s.agent(&t.s.admin, json!({ "name": "Other ERP bot", "appId": "erp" }))
            .await;
    // An agent bound to no app (any app may use it): a bound one runs on its app's client
    // nodes, which this test does not start.
    let open_agent =
        t.s.agent(&t.s.admin, json!({ "name": "Open bot", "chatModelId": t.model }))
            .await;
    let issued = app
        .ext_post(
            &t.erp,
            "/embed-token",
            &json!({ "openId": "erp-user", "agentId": open_agent }),
        )
        .await;
    assert_eq!(issued.assert_ok()["agentId"], open_agent);
    let token = issued.data()["token"].as_str().unwrap().to_owned();
    // An agent the app may not use cannot be put into a token.
    app.ext_post(
        &t.crm,
        "/embed-token",
        &json!({ "openId": "u", "agentId": t.erp_agent }),
    )
    .await
    .assert_error(400, 0, "agent does not exist or is disabled");
    let before = app.snapshot().await;
    let with_token = |method: &'static str, path: String, body: Option<Value>| {
        let token = token.clone();
        async move { call(app, method, &path, &[("Svc-Auth", &token)], body.as_ref()).await }
    };
    let refusals = [
        (
            "GET",
            format!("/openapi/v1/agent?agentId={other_agent}"),
            None,
            "another agent",
        ),
        (
            "POST",
            "/openapi/v1/agent/chat/sync".to_owned(),
            Some(json!({ "agentId": other_agent, "conversationId": "x", "content": "hi" })),
            "another agent",
        ),
        (
            "POST",
            "/openapi/v1/agent/chat".to_owned(),
            Some(json!({ "agentId": other_agent, "conversationId": "x", "content": "hi" })),
            "another agent",
        ),
        (
            "POST",
            "/openapi/v1/agent/chat/sync".to_owned(),
            Some(json!({ "agentId": open_agent, "openId": "someone-else", "conversationId": "x", "content": "hi" })),
            "another openId",
        ),
    ];
    for (method, path, body, needle) in refusals {
        with_token(method, path, body).await.assert_error(403, 403, needle);
    }
    app.snapshot()
        .await
        .assert_unchanged_since(&before, "an embed token outside its agent");
    let ok = with_token(
        "POST",
        "/openapi/v1/agent/chat/sync".to_owned(),
        Some(json!({ "agentId": open_agent, "conversationId": "x", "content": "hi" })),
    )
    .await;
    assert_eq!(ok.assert_ok()["content"], "You said: hi");
}

/// Another user's PERSONAL model cannot be put to work anywhere a model id is taken (it would
/// spend its owner's API key), and the refusal reads exactly like an unknown id's or a wrong
/// type's, so it does not even tell that the model exists. The owner may use it everywhere.
#[tokio::test]
async fn another_users_personal_model_is_refused_everywhere_like_an_unknown_id() {
    let s = ChatSetup::new().await;
    let app = &s.app;
    let (alice_id, alice) = app.regular_user("alice").await;
    let (bob_id, bob) = app.regular_user("bob").await;
    let url = s.models.base_url.clone();
    let personal = |token: &str, model_type: &'static str, key: &'static str| {
        let (token, url) = (token.to_owned(), url.clone());
        async move {
            app.model(
                &token,
                s.provider,
                model_type,
                key,
                &url,
                json!({ "scope": "PERSONAL" }),
            )
            .await
        }
    };
    let chat = personal(&alice, "CHAT", "chat-echo").await;
    let embedding = personal(&alice, "EMBEDDING", "emb-8").await;
    let reranker = personal(&alice, "RERANKER", "rerank").await;
    let global_embedding = s.embedding_model("emb-8").await;
    let global_chat = s.chat_model("chat-echo", json!({})).await;
    let bobs_kb = app
        .post(
            "/rag",
            Some(&bob),
            &json!({ "name": "bob's", "embeddingModelId": global_embedding, "dimensionOfVectorModel": 8 }),
        )
        .await
        .assert_ok()["id"]
        .as_i64()
        .unwrap();
    let kb_body = move |field: &str, id: i64| {
        let mut body = json!({ "name": "x", "embeddingModelId": global_embedding, "dimensionOfVectorModel": 8 });
        body[field] = json!(id);
        body
    };
    let memory_body = move |field: &str, id: i64| {
        let mut body = json!({ "name": "x", "embeddingModelId": global_embedding });
        body[field] = json!(id);
        body
    };
    // (method, path, body with the model id, field named in the answer, model type)
    type Place = (
        &'static str,
        String,
        Box<dyn Fn(i64) -> Value>,
        &'static str,
        &'static str,
    );
    let places: Vec<Place> = vec![
        (
            "POST",
            "/rag".into(),
            Box::new(move |id| kb_body("embeddingModelId", id)),
            "embeddingModelId",
            "EMBEDDING",
        ),
        (
            "POST",
            "/rag".into(),
            Box::new(move |id| kb_body("chunkModelId", id)),
            "chunkModelId",
            "CHAT",
        ),
        (
            "POST",
            "/rag".into(),
            Box::new(move |id| kb_body("rerankModelId", id)),
            "rerankModelId",
            "RERANKER",
        ),
        (
            "PUT",
            format!("/rag/{bobs_kb}"),
            Box::new(|id| json!({ "chunkModelId": id })),
            "chunkModelId",
            "CHAT",
        ),
        (
            "PUT",
            format!("/rag/{bobs_kb}/config"),
            Box::new(|id| json!({ "modelParams": { "modelId": id } })),
            "modelParams.modelId",
            "CHAT",
        ),
        (
            "PUT",
            format!("/rag/{bobs_kb}/config"),
            Box::new(|id| json!({ "searchParams": { "rerankModelId": id } })),
            "searchParams.rerankModelId",
            "RERANKER",
        ),
        (
            "PUT",
            format!("/rag/{bobs_kb}/config"),
            Box::new(|id| json!({ "chunkParams": { "chunkModelId": id } })),
            "chunkParams.chunkModelId",
            "CHAT",
        ),
        (
            "POST",
            "/memory/config".into(),
            Box::new(move |id| memory_body("embeddingModelId", id)),
            "embeddingModelId",
            "EMBEDDING",
        ),
        (
            "POST",
            "/memory/config".into(),
            Box::new(move |id| memory_body("extractionModelId", id)),
            "extractionModelId",
            "CHAT",
        ),
        (
            "POST",
            "/memory/config".into(),
            Box::new(move |id| memory_body("rerankModelId", id)),
            "rerankModelId",
            "RERANKER",
        ),
        (
            "POST",
            "/agent".into(),
            Box::new(|id| json!({ "name": "x", "chatModelId": id })),
            "chatModelId",
            "CHAT",
        ),
    ];
    let of_type = |t: &str| match t {
        "CHAT" => chat,
        "EMBEDDING" => embedding,
        _ => reranker,
    };
    let before = app.snapshot().await;
    for (method, path, body, field, model_type) in &places {
        let expected =
            |id: i64| format!("{field}: model {id} does not exist or is not an enabled {model_type} model you can use");
        // Alice's model of the right type, a visible model of the wrong type, an unknown id.
        let wrong_type = if *model_type == "EMBEDDING" {
            global_chat
        } else {
            global_embedding
        };
        for id in [of_type(model_type), wrong_type, 987_654] {
            let r = call(app, method, path, &[("Svc-Auth", &bob)], Some(&body(id))).await;
            assert_eq!(
                (r.status, any_code(&r), r.body["msg"].as_str()),
                (400, Some(0), Some(expected(id).as_str())),
                "bob: {method} {path} with {field} {id}"
            );
        }
    }
    app.snapshot()
        .await
        .assert_unchanged_since(&before, "bob's attempts with alice's models");

    // Alice herself may use her models everywhere.
    let kb = app
        .post(
            "/rag",
            Some(&alice),
            &json!({ "name": "mine", "embeddingModelId": embedding, "chunkModelId": chat,
                     "rerankModelId": reranker, "dimensionOfVectorModel": 8 }),
        )
        .await;
    let kb = kb.assert_ok()["id"].as_i64().unwrap();
    app.put(
        &format!("/rag/{kb}/config"),
        Some(&alice),
        &json!({ "modelParams": { "modelId": chat }, "searchParams": { "rerankModelId": reranker } }),
    )
    .await
    .assert_ok();
    let config = app
        .post(
            "/memory/config",
            Some(&alice),
            &json!({ "name": "mine", "embeddingModelId": embedding, "extractionModelId": chat, "rerankModelId": reranker }),
        )
        .await
        .assert_ok()
        .as_i64()
        .unwrap();
    let agent = s
        .agent(&alice, json!({ "name": "Alice's own", "chatModelId": chat }))
        .await;
    // Alice's memory config runs her models: bob cannot give it to his agent either (nor any
    // config of another user's, whatever its models).
    let r = app
        .post(
            "/agent",
            Some(&bob),
            &json!({ "name": "x", "memoryEnabled": true, "memoryConfigId": config }),
        )
        .await;
    r.assert_error(
        400,
        0,
        &format!("memoryConfigId: memory config {config} is another user's"),
    );

    // Bob chatting with alice's agent runs on her model; his usage stats do not name it.
    s.set_quota(alice_id, 100_000).await;
    s.set_quota(bob_id, 100_000).await;
    s.chat(&bob, agent, say("bob-talk", "hello")).await.events();
    let used: i64 = sqlx::query_scalar("SELECT count(*) FROM model_usage WHERE user_id = $1 AND model_id = $2")
        .bind(bob_id)
        .bind(chat)
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert!(used > 0, "bob's chat ran on alice's model");
    let stats = app.get("/ai-model/usage/user-stats", Some(&bob)).await;
    let listed: Vec<i64> = stats
        .assert_status_ok()
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["modelId"].as_i64().unwrap())
        .collect();
    assert!(
        !listed.contains(&chat),
        "bob's stats list alice's model: {:?}",
        stats.body
    );
    assert_eq!(stats.body["total"].as_i64(), Some(listed.len() as i64));
}

/// Binding an agent to an app sends its chats (and its model config's settings) to the app's
/// client nodes: only administrators bind, and a regular user naming a real app gets the
/// answer of an unknown one. An owner may still edit an agent an administrator bound.
#[tokio::test]
async fn only_administrators_bind_agents_to_apps_and_app_ids_stay_unknown_to_others() {
    let s = ChatSetup::new().await;
    let app = &s.app;
    app.create_app(&s.admin, "crm").await;
    let (_, bob) = app.regular_user("bob").await;
    let agent = s.agent(&bob, json!({ "name": "Bob's bot" })).await;
    let before = app.snapshot().await;
    for app_id in ["crm", "nope"] {
        let expected = format!("appId: app {app_id} does not exist");
        for (method, path) in [("POST", "/agent".to_owned()), ("PUT", format!("/agent/{agent}"))] {
            let body = json!({ "name": "Bound", "appId": app_id });
            let r = call(app, method, &path, &[("Svc-Auth", &bob)], Some(&body)).await;
            assert_eq!(
                (r.status, any_code(&r), r.body["msg"].as_str()),
                (400, Some(0), Some(expected.as_str())),
                "bob: {method} {path} with appId {app_id}"
            );
        }
    }
    app.snapshot()
        .await
        .assert_unchanged_since(&before, "bob binding agents to apps");

    // An administrator binds bob's agent; bob still edits the rest of it.
    let bound = app
        .put(&format!("/agent/{agent}"), Some(&s.admin), &json!({ "appId": "crm" }))
        .await;
    assert_eq!(bound.assert_ok()["appId"], "crm");
    let renamed = app
        .put(
            &format!("/agent/{agent}"),
            Some(&bob),
            &json!({ "name": "Renamed", "appId": "crm" }),
        )
        .await;
    assert_eq!(
        (renamed.assert_ok()["name"].as_str(), renamed.data()["appId"].as_str()),
        (Some("Renamed"), Some("crm"))
    );
    // Others who may chat with the agent are not told its app.
    let (_, carol) = app.regular_user("carol").await;
    let seen = app.get(&format!("/agent/{agent}"), Some(&carol)).await;
    assert_eq!(
        (seen.assert_ok()["name"].as_str(), &seen.data()["appId"]),
        (Some("Renamed"), &Value::Null)
    );
    let listed = app.get("/agent/page?size=100", Some(&carol)).await;
    let listed = listed.assert_ok()["data"].as_array().unwrap().clone();
    let entry = listed.iter().find(|a| a["id"] == agent).expect("listed");
    assert_eq!(entry["appId"], Value::Null);
    let admin_sees = app.get(&format!("/agent/{agent}"), Some(&s.admin)).await;
    assert_eq!(admin_sees.assert_ok()["appId"], "crm");
    // Nor does he take it out of the app, which would open it to every app's partners.
    let before = app.snapshot().await;
    for unbind in [json!({ "appId": null }), json!({ "appId": "" })] {
        app.put(&format!("/agent/{agent}"), Some(&bob), &unbind)
            .await
            .assert_error(403, 403, "appId: only administrators take an agent out of its app");
    }
    app.snapshot()
        .await
        .assert_unchanged_since(&before, "bob unbinding his agent");
    let unbound = app
        .put(&format!("/agent/{agent}"), Some(&s.admin), &json!({ "appId": null }))
        .await;
    assert!(unbound.assert_ok()["appId"].is_null());
}

/// What others' MCP servers give away: a regular user sees an administrator's shared server as
/// a catalogue entry (not its endpoint, arguments or credentials), and a name used by another
/// user's private server is free to take, so a refused name never tells that one exists.
#[tokio::test]
async fn mcp_servers_show_others_no_configuration_and_their_names_tell_nothing() {
    let app = &api_tests::spawn_with_stdio(api_tests::Store::Filesystem, &[]).await;
    let admin = app.admin_token().await;
    let (_, alice) = app.regular_user("alice").await;
    let (_, bob) = app.regular_user("bob").await;
    let create = |token: &str, body: Value| {
        let token = token.to_owned();
        async move {
            app.post("/mcp-server", Some(&token), &body)
                .await
                .assert_ok()
                .as_i64()
                .unwrap()
        }
    };
    let endpoint = "http://10.1.2.3:3001/mcp?key=endpoint-secret";
    let http = create(
        &admin,
        json!({ "name": "shared-http", "transportType": 2, "endpoint": endpoint,
                "authType": 2, "authConfig": { "token": "bearer-secret-123456" } }),
    )
    .await;
    let args = json!(["server.js", "--token", "arg-secret"]);
    let stdio = create(
        &admin,
        json!({ "name": "shared-stdio", "transportType": 3, "command": "node", "args": args,
                "envVars": { "API_TOKEN": "env-secret-abcdefgh" } }),
    )
    .await;
    let alices = create(
        &alice,
        json!({ "name": "alice-private", "transportType": 2, "endpoint": "http://127.0.0.1:9/mcp" }),
    )
    .await;

    for id in [http, stdio] {
        let r = app.get(&format!("/mcp-server/{id}"), Some(&bob)).await;
        let d = r.assert_ok();
        assert_eq!(
            (
                &d["endpoint"],
                &d["command"],
                &d["args"],
                &d["envVars"],
                &d["authConfig"]
            ),
            (&Value::Null, &Value::Null, &json!([]), &json!({}), &Value::Null),
            "bob: GET /mcp-server/{id}"
        );
    }
    let page = app.get("/mcp-server/page", Some(&bob)).await;
    assert_eq!(page.assert_ok()["total"].as_i64(), Some(2));
    let shown = String::from_utf8_lossy(&page.bytes);
    for hidden in ["endpoint-secret", "10.1.2.3", "arg-secret", "****"] {
        assert!(!shown.contains(hidden), "bob's page shows {hidden}: {shown}");
    }
    // Their creator (and any administrator) still sees the whole configuration.
    let d = app.get(&format!("/mcp-server/{http}"), Some(&admin)).await;
    assert_eq!(d.assert_ok()["endpoint"], endpoint);
    let d = app.get(&format!("/mcp-server/{stdio}"), Some(&admin)).await;
    assert_eq!(d.assert_ok()["args"], args);

    // Alice's private name is free for bob; a name he can see is not.
    let http_body = |name: &str| json!({ "name": name, "transportType": 2, "endpoint": "http://127.0.0.1:9/mcp" });
    create(&bob, http_body("Alice-Private")).await;
    app.post("/mcp-server", Some(&bob), &http_body("SHARED-HTTP"))
        .await
        .assert_error(400, 0, "name: an MCP server named \"SHARED-HTTP\" already exists");
    app.post("/mcp-server", Some(&bob), &http_body("alice-PRIVATE"))
        .await
        .assert_error(400, 0, "name: an MCP server named \"alice-PRIVATE\" already exists");
    // An administrator, who sees both private servers of that name, can still edit alice's,
    // and rename it to a name only bob's servers hold.
    for body in [json!({ "description": "fixed" }), json!({ "name": "SHARED-stdio-2" })] {
        app.put(&format!("/mcp-server/{alices}"), Some(&admin), &body)
            .await
            .assert_ok();
    }
    create(&bob, http_body("shared-stdio-2")).await;
    app.put(
        &format!("/mcp-server/{alices}"),
        Some(&admin),
        &json!({ "name": "shared-http" }),
    )
    .await
    .assert_error(400, 0, "name: an MCP server named \"shared-http\" already exists");
}
