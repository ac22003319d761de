//! `/mcp-server` and the MCP client, against real servers: `server-everything` (npm) over
//! stdio, SSE and Streamable HTTP, the Python SDK with bearer / API-key / JWT checks, and
//! oauth2-mock-server for client credentials.

use std::time::Duration;

use api_tests::free_port;
use api_tests::mcp_servers::{
    everything, everything_on, everything_stdio, guarded, guarded_sse, oauth, LogCapture, GUARDED_TOOLS,
};
use api_tests::{spawn, spawn_with, spawn_with_stdio, Reply, Store, TestApp};
use serde_json::{json, Value};
use shared::domain::Owner;
use shared::mcp;

/// Whose sessions the calls below use: a session is per server and person chatting.
const CHATTER: Owner = Owner::User(1);

/// The whole table as JSON, to prove a refusal changed nothing.
async fn snapshot(app: &TestApp) -> Value {
    sqlx::query_scalar("SELECT COALESCE(json_agg(t ORDER BY id), '[]')::jsonb FROM mcp_servers t")
        .fetch_one(&app.db)
        .await
        .expect("snapshot")
}

async fn create(app: &TestApp, token: &str, body: Value) -> i64 {
    let reply = app.post("/mcp-server", Some(token), &body).await;
    reply.assert_ok().as_i64().expect("id")
}

/// A server's row as stored, with its auth config and environment opened.
async fn stored(app: &TestApp, id: i64) -> (mcp::McpRow, mcp::AuthConfig, std::collections::BTreeMap<String, String>) {
    let row = mcp::repo::find(&app.db, id).await.unwrap().unwrap();
    let (auth, env) = row.open_secrets(app.state.secrets()).unwrap();
    (row, auth, env)
}

fn http_server(name: &str, transport: i64, endpoint: &str) -> Value {
    json!({"name": name, "transportType": transport, "endpoint": endpoint})
}

/// Every response body of a test, to search for secrets at the end.
#[derive(Default)]
struct Seen(String);

impl Seen {
    fn keep(&mut self, reply: Reply) -> Reply {
        self.0.push_str(&String::from_utf8_lossy(&reply.bytes));
        reply
    }
}

/// A regular user creates at most MCP_MAX_PER_USER servers; a refusal writes nothing, deleting
/// one makes room, and administrators are not counted.
#[tokio::test]
async fn a_regular_user_creates_at_most_mcp_max_per_user_servers() {
    let app = spawn_with(Store::Filesystem, &[("MCP_MAX_PER_USER", "2")]).await;
    let admin = app.admin_token().await;
    let (_, user) = app.regular_user("mcp-user").await;
    let first = create(&app, &user, http_server("one", 2, "http://203.0.113.7/mcp")).await;
    create(&app, &user, http_server("two", 2, "http://203.0.113.7/mcp")).await;
    let before = snapshot(&app).await;
    app.post(
        "/mcp-server",
        Some(&user),
        &http_server("three", 2, "http://203.0.113.7/mcp"),
    )
    .await
    .assert_error(400, 0, "limit of 2 MCP servers (MCP_MAX_PER_USER)");
    assert_eq!(snapshot(&app).await, before, "a refusal writes nothing");
    app.delete(&format!("/mcp-server/{first}"), Some(&user))
        .await
        .assert_ok();
    create(&app, &user, http_server("three", 2, "http://203.0.113.7/mcp")).await;
    for name in ["a1", "a2", "a3"] {
        create(&app, &admin, http_server(name, 2, "http://203.0.113.7/mcp")).await;
    }
}

/// Creations and renames ask whether the name is free on the connection of the transaction
/// that holds the name: on a second pooled connection, as many creations as the pool has
/// connections each held one and waited for another until the pool's timeout.
#[tokio::test]
async fn creations_beyond_the_pools_size_do_not_wait_for_each_other() {
    let app = spawn_with(Store::Filesystem, &[("DB_MAX_CONNECTIONS", "2")]).await;
    let admin = app.admin_token().await;
    let created = futures::future::join_all((0..12).map(|i| {
        let body = http_server(&format!("burst-{i}"), 2, "http://203.0.113.7/mcp");
        let app = &app;
        let admin = admin.as_str();
        async move { app.post("/mcp-server", Some(admin), &body).await }
    }))
    .await;
    // Starved, they failed when the pool gave up waiting for a connection (10 s).
    for reply in &created {
        reply.assert_ok();
    }
}

#[tokio::test]
async fn every_validation_rule_is_refused_and_writes_nothing() {
    let app = spawn_with_stdio(Store::Filesystem, &[]).await;
    let admin = app.admin_token().await;
    let (_, user) = app.regular_user("mcp-user").await;
    let long = "n".repeat(101);
    let cases: Vec<(Value, &str)> = vec![
        (
            json!({"transportType": 2, "endpoint": "http://h/mcp"}),
            "name is required",
        ),
        (
            json!({"name": " ", "transportType": 2, "endpoint": "http://h/mcp"}),
            "name is required",
        ),
        (
            json!({"name": long, "transportType": 2, "endpoint": "http://h/mcp"}),
            "name must be 1 to 100 characters long",
        ),
        (
            json!({"name": "a", "description": "d".repeat(1001), "transportType": 2, "endpoint": "http://h/mcp"}),
            "description must be 0 to 1000 characters long",
        ),
        (
            json!({"name": "git\u{7}hub", "transportType": 2, "endpoint": "http://h/mcp"}),
            "name must not contain control characters",
        ),
        (
            json!({"name": "a", "description": "d\u{7}", "transportType": 2, "endpoint": "http://h/mcp"}),
            "description must not contain control characters other than line breaks and tabs",
        ),
        (
            json!({"name": "a", "transportType": 3, "command": "c".repeat(501)}),
            "command must be 1 to 500 characters long",
        ),
        (
            json!({"name": "a", "transportType": 3, "command": "x", "args": ["a".repeat(2001)]}),
            "each of args must be at most 2000 characters",
        ),
        (
            json!({"name": "a", "transportType": 3, "command": "x", "envVars": (0..101).map(|i| (format!("V{i}"), json!("x"))).collect::<serde_json::Map<_, _>>()}),
            "envVars may hold at most 100 variables",
        ),
        (
            json!({"name": "a", "transportType": 3, "command": "x", "envVars": {"K": 5}}),
            "envVars",
        ),
        (
            json!({"name": "a", "transportType": 2, "endpoint": "http://h", "authType": 1, "authConfig": {"key": "X-Key", "value": "line\nbreak"}}),
            "authConfig.value must be a valid HTTP header value",
        ),
        (
            json!({"name": "a", "endpoint": "http://h/mcp"}),
            "transportType is required",
        ),
        (
            json!({"name": "a", "transportType": 4, "endpoint": "http://h"}),
            "transportType must be 1 (SSE), 2 (Streamable HTTP) or 3 (stdio)",
        ),
        (json!({"name": "a", "transportType": "two"}), "transportType"),
        (
            json!({"name": "a", "transportType": 2}),
            "endpoint is required for transportType 1 (SSE) and 2 (Streamable HTTP)",
        ),
        (
            json!({"name": "a", "transportType": 1, "endpoint": "not a url"}),
            "endpoint must be an http:// or https:// URL",
        ),
        (
            json!({"name": "a", "transportType": 2, "endpoint": "ftp://h/mcp"}),
            "endpoint must be an http:// or https:// URL",
        ),
        (
            json!({"name": "a", "transportType": 2, "endpoint": "https://me:secret@h/mcp"}),
            "endpoint must not hold credentials (user:password@)",
        ),
        (
            json!({"name": "a", "transportType": 2, "endpoint": "http://h/mcp", "command": "node"}),
            "command, args and envVars apply to transportType 3 (stdio) only",
        ),
        (
            json!({"name": "a", "transportType": 2, "endpoint": "http://h/mcp", "envVars": {"A": "b"}}),
            "command, args and envVars apply to transportType 3 (stdio) only",
        ),
        (
            json!({"name": "a", "transportType": 3}),
            "command is required for transportType 3 (stdio)",
        ),
        (
            json!({"name": "a", "transportType": 3, "command": "x", "authType": 1, "authConfig": {"key": "X-Key", "value": "v"}}),
            "authType applies to transportType 1 and 2; a stdio (3) server takes its credentials in envVars",
        ),
        (
            json!({"name": "a", "transportType": 3, "command": "x", "endpoint": "http://h"}),
            "endpoint applies to transportType 1 and 2",
        ),
        (
            json!({"name": "a", "transportType": 3, "command": "x", "args": vec!["a"; 101]}),
            "args may hold at most 100 items",
        ),
        (
            json!({"name": "a", "transportType": 3, "command": "x", "envVars": {"1BAD": "v"}}),
            "envVars key \"1BAD\" must be a variable name",
        ),
        (
            json!({"name": "a", "transportType": 3, "command": "x", "envVars": {"K".repeat(257): "v"}}),
            "of at most 256 characters",
        ),
        // The system refuses a variable past 128 KiB when the server starts: named here instead.
        (
            json!({"name": "a", "transportType": 3, "command": "x", "envVars": {"K": "v".repeat(32 * 1024 + 1)}}),
            "envVars.K must be at most 32768 bytes",
        ),
        (
            json!({"name": "a", "transportType": 3, "command": "x", "envVars": {"K": "abcd****wxyz"}}),
            "envVars.K is a masked value",
        ),
        (
            json!({"name": "a", "transportType": 3, "command": "x",
                   "envVars": {"NODE_OPTIONS": "--import=data:text/javascript,process.exit(3)"}}),
            "envVars.NODE_OPTIONS is not allowed",
        ),
        (
            json!({"name": "a", "transportType": 3, "command": "x", "envVars": {"LD_PRELOAD": "/tmp/x.so"}}),
            "envVars.LD_PRELOAD is not allowed",
        ),
        (
            json!({"name": "a", "transportType": 3, "command": "x", "envVars": {"Path": "/tmp"}}),
            "envVars.Path is not allowed",
        ),
        (
            json!({"name": "a", "transportType": 3, "command": "x", "envVars": {"PYTHONSTARTUP": "/tmp/x.py"}}),
            "envVars.PYTHONSTARTUP is not allowed",
        ),
        (
            json!({"name": "a", "transportType": 2, "endpoint": "http://h", "authType": 7}),
            "authType must be 0 (none), 1 (API key header), 2 (bearer token) or 3",
        ),
        (
            json!({"name": "a", "transportType": 2, "endpoint": "http://h", "authType": 1}),
            "authConfig.key, authConfig.value are required for authType 1 (API key header)",
        ),
        (
            json!({"name": "a", "transportType": 2, "endpoint": "http://h", "authType": 1, "authConfig": {"key": "X-Key"}}),
            "authConfig.value is required for authType 1",
        ),
        (
            json!({"name": "a", "transportType": 2, "endpoint": "http://h", "authType": 1, "authConfig": {"key": "bad key", "value": "v"}}),
            "authConfig.key must be a valid HTTP header name",
        ),
        (
            json!({"name": "a", "transportType": 2, "endpoint": "http://h", "authType": 1, "authConfig": {"key": "Content-Type", "value": "v"}}),
            "authConfig.key must not be content-type",
        ),
        (
            json!({"name": "a", "transportType": 2, "endpoint": "http://h", "authType": 2, "authConfig": {}}),
            "authConfig.token is required for authType 2 (bearer token)",
        ),
        (
            json!({"name": "a", "transportType": 2, "endpoint": "http://h", "authType": 2, "authConfig": {"token": "Bearer abc"}}),
            "without the `Bearer ` prefix",
        ),
        (
            json!({"name": "a", "transportType": 2, "endpoint": "http://h", "authType": 2, "authConfig": {"token": "abcd****wxyz"}}),
            "authConfig.token is a masked value",
        ),
        (
            json!({"name": "a", "transportType": 2, "endpoint": "http://h", "authType": 3, "authConfig": {"clientId": "c"}}),
            "authConfig.clientSecret, authConfig.tokenUrl are required for authType 3 (OAuth 2.0 client credentials)",
        ),
        (
            json!({"name": "a", "transportType": 2, "endpoint": "http://h", "authType": 3, "authConfig": {"clientId": "c", "clientSecret": "s", "tokenUrl": "nope"}}),
            "authConfig.tokenUrl must be an http:// or https:// URL",
        ),
        (
            json!({"name": "a", "transportType": 2, "endpoint": "http://h", "authType": 3, "authConfig": {"clientId": "c", "clientSecret": "s", "tokenUrl": "https://c:s@auth/token"}}),
            "authConfig.tokenUrl must not hold credentials",
        ),
        (
            json!({"name": "a", "transportType": 2, "endpoint": "http://h", "authType": 0, "authConfig": {"token": "t"}}),
            "authConfig must be null for authType 0",
        ),
        (
            json!({"name": "a", "transportType": 2, "endpoint": "http://h", "authType": 2, "authConfig": "token"}),
            "authConfig must be an object or null",
        ),
    ];
    for (body, needle) in &cases {
        let reply = app.post("/mcp-server", Some(&admin), body).await;
        reply.assert_error(400, 0, needle);
        assert_eq!(app.count("mcp_servers").await, 0, "nothing written for {body}");
    }

    // A regular user may not run commands on the service host.
    let stdio = json!({"name": "local", "transportType": 3, "command": "node"});
    app.post("/mcp-server", Some(&user), &stdio)
        .await
        .assert_error(403, 403, "only administrators");
    assert_eq!(app.count("mcp_servers").await, 0);

    // Updates: the same rules over the merged record, and a duplicate name.
    let id = create(&app, &admin, http_server("First", 2, "http://h/mcp")).await;
    create(&app, &admin, http_server("Second", 1, "http://h/sse")).await;
    let before = snapshot(&app).await;
    let updates: Vec<(Value, &str)> = vec![
        (
            json!({"name": "second"}),
            "an MCP server named \"second\" already exists",
        ),
        (json!({"name": ""}), "name is required"),
        (
            json!({"endpoint": "mailto:x"}),
            "endpoint must be an http:// or https:// URL",
        ),
        (
            json!({"transportType": 3}),
            "command is required for transportType 3 (stdio)",
        ),
        (json!({"authType": 2}), "authConfig.token is required for authType 2"),
        (
            json!({"authConfig": {"token": "t"}}),
            "authConfig must be null for authType 0",
        ),
        (
            json!({"command": "node"}),
            "command, args and envVars apply to transportType 3 (stdio) only",
        ),
    ];
    for (body, needle) in &updates {
        app.put(&format!("/mcp-server/{id}"), Some(&admin), body)
            .await
            .assert_error(400, 0, needle);
        assert_eq!(snapshot(&app).await, before, "nothing changed by {body}");
    }
    app.post("/mcp-server", Some(&admin), &http_server("FIRST", 2, "http://h/x"))
        .await
        .assert_error(400, 0, "already exists");
    app.get("/mcp-server/999999", Some(&admin))
        .await
        .assert_error(404, 404, "MCP server not found");
    app.get("/mcp-server/page", None).await.assert_error(401, 401, "log in");
    assert_eq!(snapshot(&app).await, before);
}

#[tokio::test]
async fn secrets_are_sealed_masked_and_kept_when_sent_back_masked() {
    let logs = LogCapture::start();
    let app = spawn_with_stdio(Store::Filesystem, &[]).await;
    let admin = app.admin_token().await;
    let secret = "client-secret-0123456789";
    let id = create(
        &app,
        &admin,
        json!({"name": "oauth", "description": "d", "transportType": 2, "endpoint": "https://mcp.example.com/mcp",
               "authType": 3, "authConfig": {"clientId": "cid", "clientSecret": secret, "tokenUrl": "https://id.example.com/token"}}),
    )
    .await;
    let stdio = create(
        &app,
        &admin,
        json!({"name": "tool", "transportType": 3, "command": "node", "args": ["server.js", "--flag"],
               "envVars": {"API_TOKEN": "env-secret-abcdefgh", "MODE": "x"}}),
    )
    .await;
    let detail = app.get(&format!("/mcp-server/{id}"), Some(&admin)).await;
    let d = detail.assert_ok();
    assert_eq!(
        d["authConfig"],
        json!({"clientId": "cid", "clientSecret": "****6789", "tokenUrl": "https://id.example.com/token"})
    );
    assert_eq!(
        (
            d["status"].as_str(),
            d["toolCount"].as_i64(),
            d["lastConnectDt"].is_null()
        ),
        (Some("unknown"), Some(0), true)
    );
    assert_eq!(
        (d["transportType"].as_i64(), d["authType"].as_i64()),
        (Some(2), Some(3))
    );
    let s = app.get(&format!("/mcp-server/{stdio}"), Some(&admin)).await;
    let s = s.assert_ok();
    assert_eq!(s["envVars"], json!({"API_TOKEN": "****efgh", "MODE": "****"}));
    assert_eq!(
        (s["command"].as_str(), s["args"].clone()),
        (Some("node"), json!(["server.js", "--flag"]))
    );
    assert!(s["authConfig"].is_null());

    // Stored sealed: no column holds either secret.
    let raw = snapshot(&app).await.to_string();
    assert!(!raw.contains(secret) && !raw.contains("env-secret-abcdefgh"), "{raw}");

    // The masked values sent back keep the stored secrets; a new value replaces one.
    let mut masked = d.clone();
    masked["name"] = json!("oauth renamed");
    app.put(&format!("/mcp-server/{id}"), Some(&admin), &masked)
        .await
        .assert_ok();
    app.put(
        &format!("/mcp-server/{stdio}"),
        Some(&admin),
        &json!({"envVars": {"API_TOKEN": "****efgh", "MODE": "y"}}),
    )
    .await
    .assert_ok();
    let (row, auth, _) = stored(&app, id).await;
    assert_eq!(
        auth,
        mcp::AuthConfig::OAuth2 {
            client_id: "cid".into(),
            client_secret: secret.into(),
            token_url: "https://id.example.com/token".into()
        }
    );
    assert_eq!(row.name, "oauth renamed");
    let (_, _, env) = stored(&app, stdio).await;
    assert_eq!(
        (env["API_TOKEN"].as_str(), env["MODE"].as_str()),
        ("env-secret-abcdefgh", "y")
    );
    app.put(&format!("/mcp-server/{id}"), Some(&admin), &json!({"authConfig": {"clientId": "cid", "clientSecret": "new-secret-value", "tokenUrl": "https://id.example.com/token"}}))
        .await
        .assert_ok();
    let (_, auth, _) = stored(&app, id).await;
    assert!(matches!(auth, mcp::AuthConfig::OAuth2 { client_secret, .. } if client_secret == "new-secret-value"));
    // A new secret that holds stars is a new secret, not a mask sent back.
    app.put(&format!("/mcp-server/{id}"), Some(&admin), &json!({"authConfig": {"clientId": "cid", "clientSecret": "abc****xyz-new1", "tokenUrl": "https://id.example.com/token"}}))
        .await
        .assert_ok();
    let (_, auth, _) = stored(&app, id).await;
    assert!(
        matches!(auth, mcp::AuthConfig::OAuth2 { ref client_secret, .. } if client_secret == "abc****xyz-new1"),
        "{auth:?}"
    );
    app.put(&format!("/mcp-server/{id}"), Some(&admin), &json!({"authConfig": {"clientId": "cid", "clientSecret": "new-secret-value", "tokenUrl": "https://id.example.com/token"}}))
        .await
        .assert_ok();

    // The same authType without authConfig keeps the stored config.
    app.put(&format!("/mcp-server/{id}"), Some(&admin), &json!({"authType": 3}))
        .await
        .assert_ok();
    let (_, auth, _) = stored(&app, id).await;
    assert!(matches!(auth, mcp::AuthConfig::OAuth2 { client_secret, .. } if client_secret == "new-secret-value"));
    // `null` clears the config, which the stored type refuses: it answered 200 and kept the
    // credentials in force.
    let before = snapshot(&app).await;
    app.put(&format!("/mcp-server/{id}"), Some(&admin), &json!({"authConfig": null}))
        .await
        .assert_error(400, 0, "authConfig.");
    assert_eq!(snapshot(&app).await, before);
    // Switching the auth type to none drops the stored secret.
    app.put(&format!("/mcp-server/{id}"), Some(&admin), &json!({"authType": 0}))
        .await
        .assert_ok();
    let row = mcp::repo::find(&app.db, id).await.unwrap().unwrap();
    assert_eq!((row.auth_type, row.auth_config_enc.is_none()), (0, true));
    let page = app.get("/mcp-server/page?keyword=RENAMED&size=5", Some(&admin)).await;
    let p = page.assert_ok();
    assert_eq!(
        (p["total"].as_i64(), p["page"].as_i64(), p["size"].as_i64()),
        (Some(1), Some(1), Some(5))
    );
    assert_eq!(p["data"][0]["id"].as_i64(), Some(id));
    let all = app.get("/mcp-server/page", Some(&admin)).await;
    let shown = String::from_utf8_lossy(&all.bytes);
    assert!(shown.contains("****efgh"), "{shown}");
    let logged = logs.text();
    assert!(logged.contains("/mcp-server"), "the capture works: {logged}");
    for secret in [secret, "env-secret-abcdefgh", "new-secret-value"] {
        assert!(!shown.contains(secret) && !logged.contains(secret), "{secret} leaked");
    }
    // A stdio server's `null` args and envVars clear them, as [] and {} do.
    app.put(
        &format!("/mcp-server/{stdio}"),
        Some(&admin),
        &json!({"args": null, "envVars": null}),
    )
    .await
    .assert_ok();
    let (row, _, env) = stored(&app, stdio).await;
    assert!(row.args.is_empty() && env.is_empty(), "{:?} {env:?}", row.args);
}

#[tokio::test]
async fn users_see_their_own_and_administrators_servers_and_change_only_their_own() {
    let app = spawn(Store::Filesystem).await;
    let admin = app.admin_token().await;
    let (a_id, alice) = app.regular_user("alice").await;
    let (_, bob) = app.regular_user("bob").await;
    let shared_id = create(&app, &admin, http_server("shared", 2, "http://h/mcp")).await;
    let own = create(&app, &alice, json!({"name": "alice's", "transportType": 1, "endpoint": "http://h/sse", "authType": 2, "authConfig": {"token": "alice-token-123456"}})).await;

    let list = app.get("/mcp-server/list", Some(&bob)).await;
    assert_eq!(list.assert_ok(), &json!([{"id": shared_id, "name": "shared"}]));
    // Yours first, then administrators', then the rest: an administrator's list holds everyone's.
    let list = app.get("/mcp-server/list", Some(&alice)).await;
    assert_eq!(
        list.assert_ok(),
        &json!([{"id": own, "name": "alice's"}, {"id": shared_id, "name": "shared"}])
    );
    let list = app.get("/mcp-server/list", Some(&admin)).await;
    assert_eq!(
        list.assert_ok(),
        &json!([{"id": shared_id, "name": "shared"}, {"id": own, "name": "alice's"}])
    );
    let page = app.get("/mcp-server/page", Some(&alice)).await;
    assert_eq!(page.assert_ok()["total"].as_i64(), Some(2));
    assert_eq!(
        app.get("/mcp-server/page", Some(&admin)).await.assert_ok()["total"].as_i64(),
        Some(2)
    );

    // Bob cannot see Alice's server at all, and may look at but not change the shared one.
    let before = snapshot(&app).await;
    app.get(&format!("/mcp-server/{own}"), Some(&bob))
        .await
        .assert_error(404, 404, "not found");
    app.put(&format!("/mcp-server/{own}"), Some(&bob), &json!({"name": "x"}))
        .await
        .assert_error(404, 404, "not found");
    app.delete(&format!("/mcp-server/{own}"), Some(&bob))
        .await
        .assert_error(404, 404, "not found");
    app.post(&format!("/mcp-server/{own}/test"), Some(&bob), &json!({}))
        .await
        .assert_error(404, 404, "not found");
    app.get(&format!("/mcp-server/{shared_id}"), Some(&bob))
        .await
        .assert_ok();
    app.put(&format!("/mcp-server/{shared_id}"), Some(&bob), &json!({"name": "x"}))
        .await
        .assert_error(403, 403, "only the creator");
    app.delete(&format!("/mcp-server/{shared_id}"), Some(&alice))
        .await
        .assert_error(403, 403, "only the creator");
    assert_eq!(snapshot(&app).await, before);

    // Alice changes her own; the administrator may change anyone's.
    app.put(
        &format!("/mcp-server/{own}"),
        Some(&alice),
        &json!({"description": "mine"}),
    )
    .await
    .assert_ok();
    app.put(
        &format!("/mcp-server/{own}"),
        Some(&admin),
        &json!({"description": "checked"}),
    )
    .await
    .assert_ok();
    let detail = app.get(&format!("/mcp-server/{own}"), Some(&alice)).await;
    assert_eq!(
        (
            detail.assert_ok()["creatorId"].as_i64(),
            detail.data()["description"].as_str()
        ),
        (Some(a_id), Some("checked"))
    );
    // Her token goes where she says: the administrator pointing her server elsewhere sends a
    // token of their own (the masked one sent back is not enough). That token then goes where
    // the administrator said: she moves it only with a token of her own.
    let path = format!("/mcp-server/{own}");
    app.put(&path, Some(&admin), &json!({"endpoint": "http://elsewhere/sse"}))
        .await
        .assert_error(
            400,
            0,
            "authConfig: send the secret again to point this server elsewhere",
        );
    let masked = detail.data()["authConfig"].clone();
    app.put(
        &path,
        Some(&admin),
        &json!({"endpoint": "http://elsewhere/sse", "authConfig": masked}),
    )
    .await
    .assert_error(400, 0, "authConfig: send the secret again");
    app.put(
        &path,
        Some(&admin),
        &json!({"endpoint": "http://elsewhere/sse", "authConfig": {"token": "admins-token-123456"}}),
    )
    .await
    .assert_ok();
    let before = snapshot(&app).await;
    for moved in [
        json!({"endpoint": "http://h/sse"}),
        json!({"endpoint": "http://h/sse", "authConfig": masked}),
    ] {
        app.put(&path, Some(&alice), &moved).await.assert_error(
            400,
            0,
            "authConfig: send the secret again to point this server elsewhere; the stored one was set by another user",
        );
    }
    assert_eq!(snapshot(&app).await, before);
    // The administrator's token may stay where the administrator pointed it.
    app.put(&path, Some(&alice), &json!({"description": "checked"}))
        .await
        .assert_ok();
    app.put(
        &path,
        Some(&alice),
        &json!({"endpoint": "http://h/sse", "authConfig": {"token": "alices-token-654321"}}),
    )
    .await
    .assert_ok();
    // Hers again: she may move it without sending it.
    app.put(&path, Some(&alice), &json!({"endpoint": "http://h2/sse"}))
        .await
        .assert_ok();

    // What agent updates use.
    let user = |id, role| shared::http::CurrentUser {
        id,
        username: String::new(),
        role,
    };
    let bob_user = user(a_id + 1, shared::domain::Role::User);
    assert_eq!(
        mcp::usable_ids(&app.db, &bob_user, &[own, shared_id, 424242])
            .await
            .unwrap(),
        vec![shared_id]
    );
    let alice_user = user(a_id, shared::domain::Role::User);
    assert_eq!(
        mcp::usable_ids(&app.db, &alice_user, &[own, shared_id]).await.unwrap(),
        vec![own, shared_id]
    );
    let briefs = mcp::briefs(&app.db, &[own, 424242, shared_id]).await.unwrap();
    assert_eq!(
        serde_json::to_value(&briefs).unwrap(),
        json!([{"id": own, "name": "alice's", "description": "checked", "transportType": 1, "status": "unknown"},
               {"id": shared_id, "name": "shared", "description": "", "transportType": 2, "status": "unknown"}])
    );
}

/// A server deleted while an agent is being bound to it is taken out of that agent too: the
/// deletion waits for the binding (which holds the server's row) and then sees it. It read
/// the agents before and left the agent naming a server that no longer exists.
#[tokio::test]
async fn a_server_deleted_while_an_agent_is_bound_to_it_leaves_no_reference() {
    let app = spawn(Store::Filesystem).await;
    let admin = app.admin_token().await;
    let gone = create(&app, &admin, http_server("gone", 2, "http://h/mcp")).await;
    let agent: i64 = sqlx::query_scalar(
        "INSERT INTO agents (name, mcp_enabled, creator_id)
         VALUES ('helper', TRUE, (SELECT id FROM users WHERE username = 'admin')) RETURNING id",
    )
    .fetch_one(&app.db)
    .await
    .unwrap();
    // The agent's write, as the agent service makes it: the server held, not yet committed.
    let mut binding = app.db.begin().await.unwrap();
    sqlx::query("SELECT id FROM mcp_servers WHERE id = ANY($1) FOR SHARE")
        .bind(vec![gone])
        .execute(&mut *binding)
        .await
        .unwrap();
    sqlx::query("UPDATE agents SET mcp_server_ids = $2 WHERE id = $1")
        .bind(agent)
        .bind(vec![gone])
        .execute(&mut *binding)
        .await
        .unwrap();
    let path = format!("/mcp-server/{gone}");
    let delete = app.delete(&path, Some(&admin));
    let bind = async {
        api_tests::until_a_statement_waits_for_a_lock(&app.db).await;
        binding.commit().await.unwrap();
    };
    let (deleted, ()) = tokio::join!(delete, bind);
    deleted.assert_ok();
    let ids: Vec<i64> = sqlx::query_scalar("SELECT mcp_server_ids FROM agents WHERE id = $1")
        .bind(agent)
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert!(ids.is_empty(), "{ids:?}");
}

#[tokio::test]
async fn deleting_a_server_takes_it_out_of_agents() {
    let app = spawn(Store::Filesystem).await;
    let admin = app.admin_token().await;
    let gone = create(&app, &admin, http_server("gone", 2, "http://h/mcp")).await;
    let kept = create(&app, &admin, http_server("kept", 2, "http://h/mcp2")).await;
    let agent: i64 = sqlx::query_scalar(
        "INSERT INTO agents (name, mcp_enabled, mcp_server_ids, creator_id)
         VALUES ('helper', TRUE, $1, (SELECT id FROM users WHERE username = 'admin')) RETURNING id",
    )
    .bind(vec![gone, kept])
    .fetch_one(&app.db)
    .await
    .unwrap();
    app.delete(&format!("/mcp-server/{gone}"), Some(&admin))
        .await
        .assert_ok();
    let ids: Vec<i64> = sqlx::query_scalar("SELECT mcp_server_ids FROM agents WHERE id = $1")
        .bind(agent)
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(ids, vec![kept]);
    app.get(&format!("/mcp-server/{gone}"), Some(&admin))
        .await
        .assert_error(404, 404, "not found");
    let tools = mcp::tools_of_servers(&app.state, CHATTER, &[gone]).await.unwrap();
    assert_eq!(
        tools[0].1.as_ref().unwrap_err(),
        &format!("MCP server {gone} no longer exists")
    );
    let outcome = mcp::call_tool(&app.state, CHATTER, gone, "echo", json!({}))
        .await
        .unwrap();
    assert!(
        outcome.is_error && outcome.text.contains("no longer exists"),
        "{outcome:?}"
    );
}

/// Creates, tests and uses `server-everything` through one transport.
async fn exercise_everything(app: &TestApp, admin: &str, body: Value) -> i64 {
    let id = create(app, admin, body).await;
    let test = app
        .post(&format!("/mcp-server/{id}/test"), Some(admin), &json!({}))
        .await;
    let t = test.assert_ok();
    assert_eq!(t["success"], true, "{t}");
    let names: Vec<&str> = t["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|x| x["name"].as_str())
        .collect();
    assert!(names.contains(&"echo") && names.contains(&"get-sum"), "{names:?}");
    let echo = t["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "echo")
        .unwrap();
    assert_eq!(echo["inputSchema"]["type"], "object");
    assert!(t["responseTimeMs"].is_u64());
    let detail = app.get(&format!("/mcp-server/{id}"), Some(admin)).await;
    let d = detail.assert_ok();
    assert_eq!(
        (d["status"].as_str(), d["toolCount"].as_u64()),
        (Some("connected"), Some(names.len() as u64))
    );
    assert!(d["lastConnectDt"].is_string() && d["lastError"].is_null(), "{d}");
    let listed = app.get(&format!("/mcp-server/{id}/tools"), Some(admin)).await;
    assert_eq!(listed.assert_ok().as_array().unwrap().len(), names.len());

    let echo = mcp::call_tool(&app.state, CHATTER, id, "echo", json!({"message": "hello 世界"}))
        .await
        .unwrap();
    assert_eq!(
        echo,
        mcp::ToolOutcome {
            text: "Echo: hello 世界".into(),
            is_error: false
        }
    );
    let sum = mcp::call_tool(&app.state, CHATTER, id, "get-sum", json!({"a": 1, "b": 2}))
        .await
        .unwrap();
    assert_eq!(sum.text, "The sum of 1 and 2 is 3.");
    let bad = mcp::call_tool(&app.state, CHATTER, id, "get-sum", json!({"a": "one"}))
        .await
        .unwrap();
    assert!(bad.is_error, "{bad:?}");
    let not_object = mcp::call_tool(&app.state, CHATTER, id, "echo", json!([1]))
        .await
        .unwrap();
    assert!(not_object.is_error && not_object.text.contains("must be a JSON object"));
    id
}

#[tokio::test]
async fn server_everything_over_stdio_sse_and_streamable_http() {
    let app = spawn_with_stdio(Store::Filesystem, &[]).await;
    let admin = app.admin_token().await;
    let sse = everything("sse").await;
    let http = everything("streamableHttp").await;
    let (command, args) = everything_stdio();
    let stdio_id = exercise_everything(
        &app,
        &admin,
        json!({"name": "stdio", "transportType": 3, "command": command, "args": args, "envVars": {"GREETING": "from-env-vars"}}),
    )
    .await;
    let sse_id = exercise_everything(&app, &admin, http_server("sse", 1, &sse.url("/sse"))).await;
    let http_id = exercise_everything(&app, &admin, http_server("http", 2, &http.url("/mcp"))).await;

    // The stdio child sees its envVars but none of the service's own environment.
    let env = mcp::call_tool(&app.state, CHATTER, stdio_id, "get-env", json!({}))
        .await
        .unwrap();
    assert!(env.text.contains("from-env-vars"), "{}", env.text);
    assert!(
        !env.text.contains("DATABASE_URL") && !env.text.contains("ENCRYPTION_KEY"),
        "{}",
        env.text
    );

    // Chat's view: every server's tools, and the broken one named with its reason.
    let broken = create(
        &app,
        &admin,
        http_server(
            "broken",
            2,
            &format!("http://127.0.0.1:{}/mcp", api_tests::refused_port()),
        ),
    )
    .await;
    let all = mcp::tools_of_servers(&app.state, CHATTER, &[stdio_id, sse_id, http_id, broken])
        .await
        .unwrap();
    assert_eq!(
        all.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        vec![stdio_id, sse_id, http_id, broken]
    );
    for (id, tools) in &all[..3] {
        let tools = tools.as_ref().unwrap();
        assert!(tools.iter().all(|t| t.server_id == *id) && tools.iter().any(|t| t.name == "get-sum"));
    }
    assert_eq!(all[1].1.as_ref().unwrap()[0].server_name, "sse");
    let reason = all[3].1.as_ref().unwrap_err();
    assert!(reason.starts_with("MCP server \"broken\" is unusable"), "{reason}");
    app.get(&format!("/mcp-server/{broken}/tools"), Some(&admin))
        .await
        .assert_error(400, 0, "is unusable");
    let test = app
        .post(&format!("/mcp-server/{broken}/test"), Some(&admin), &json!({}))
        .await;
    assert_eq!(test.assert_ok()["success"], false);
    let d = app.get(&format!("/mcp-server/{broken}"), Some(&admin)).await;
    assert_eq!(d.assert_ok()["status"], "error");
    assert!(d.data()["lastError"].as_str().is_some_and(|e| !e.is_empty()));
}

/// A server that takes connections and never answers is reported by its test and tool list
/// within MCP_TEST_TIMEOUT_SECS, and the test records it, not after the chat's limits (a
/// session within 30 s), past API Gateway's 29 s.
#[tokio::test]
async fn a_silent_server_is_reported_within_the_test_limit() {
    let app = spawn_with(Store::Filesystem, &[("MCP_TEST_TIMEOUT_SECS", "1")]).await;
    let admin = app.admin_token().await;
    let addr = api_tests::silent_listener().await;
    let silent = create(&app, &admin, http_server("silent", 2, &format!("http://{addr}/mcp"))).await;
    let test = app
        .post(&format!("/mcp-server/{silent}/test"), Some(&admin), &json!({}))
        .await;
    let test = test.assert_ok();
    assert_eq!(test["success"], false);
    assert_eq!(test["message"], "the server did not list its tools within 1 s");
    let d = app.get(&format!("/mcp-server/{silent}"), Some(&admin)).await;
    assert_eq!(d.assert_ok()["status"], "error");
    app.get(&format!("/mcp-server/{silent}/tools"), Some(&admin))
        .await
        .assert_error(400, 0, "did not list its tools within 1 s");
}

/// The processes whose environment holds `mark` (a stdio server's child, by its envVars).
fn processes_with(mark: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|p| {
            std::fs::read(p.path().join("environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|var| var == mark.as_bytes()))
        })
        .count()
}

/// A `server-everything` stdio server whose processes carry a variable of their own, and that
/// variable (`NAME=value`) for `processes_with`.
async fn marked_everything(app: &TestApp, admin: &str, name: &str) -> (i64, String) {
    let (command, args) = everything_stdio();
    let mark = format!("MCP_CHILD_MARK={}", uuid::Uuid::new_v4());
    let (key, value) = mark.split_once('=').unwrap();
    let id = create(
        app,
        admin,
        json!({"name": name, "transportType": 3, "command": command, "args": args, "envVars": {key: value}}),
    )
    .await;
    (id, mark)
}

/// How many processes carry `mark` once they are `count`, or after 5 s.
async fn processes_settled_at(mark: &str, count: usize) -> usize {
    let mut running = processes_with(mark);
    for _ in 0..50 {
        if running == count {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        running = processes_with(mark);
    }
    running
}

/// A session nobody used for MCP_SESSION_IDLE_SECS is closed (its stdio child ends) when the
/// pool is next used; the server opens a new one when it is called again.
#[tokio::test]
async fn sessions_unused_for_their_idle_time_are_closed() {
    let app = spawn_with_stdio(Store::Filesystem, &[("MCP_SESSION_IDLE_SECS", "1")]).await;
    let admin = app.admin_token().await;
    let (idle, mark) = marked_everything(&app, &admin, "idle").await;
    let (command, args) = everything_stdio();
    let busy = create(
        &app,
        &admin,
        json!({"name": "busy", "transportType": 3, "command": command, "args": args}),
    )
    .await;
    let add = json!({"a": 1, "b": 2});
    mcp::call_tool(&app.state, CHATTER, idle, "get-sum", add.clone())
        .await
        .unwrap();
    assert!(processes_with(&mark) > 0, "the idle server's child runs");

    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    mcp::call_tool(&app.state, CHATTER, busy, "get-sum", add.clone())
        .await
        .unwrap();
    assert_eq!(
        processes_settled_at(&mark, 0).await,
        0,
        "the idle session's child ended"
    );
    let again = mcp::call_tool(&app.state, CHATTER, idle, "get-sum", add).await.unwrap();
    assert!(again.text.contains('3'), "{}", again.text);
    assert!(processes_with(&mark) > 0, "a new session was opened");
}

#[tokio::test]
async fn tool_results_are_capped_in_size() {
    let app = spawn_with_stdio(Store::Filesystem, &[("MCP_RESULT_MAX_BYTES", "16")]).await;
    let admin = app.admin_token().await;
    let (command, args) = everything_stdio();
    let id = create(
        &app,
        &admin,
        json!({"name": "stdio", "transportType": 3, "command": command, "args": args}),
    )
    .await;
    let long = mcp::call_tool(
        &app.state,
        CHATTER,
        id,
        "echo",
        json!({"message": "a long message past the limit"}),
    )
    .await
    .unwrap();
    assert_eq!(
        long,
        mcp::ToolOutcome {
            text: "Echo: a long mes\n[truncated: the tool returned 35 bytes, the limit is 16]".into(),
            is_error: false
        }
    );
}

/// How many processes carry `MCP_TEST_MARKER=<marker>` in their environment.
fn processes_marked(marker: &str) -> usize {
    let needle = format!("MCP_TEST_MARKER={marker}");
    std::fs::read_dir("/proc")
        .map(|dir| {
            dir.flatten()
                .filter_map(|e| std::fs::read(e.path().join("environ")).ok())
                .filter(|env| env.split(|b| *b == 0).any(|var| var == needle.as_bytes()))
                .count()
        })
        .unwrap_or(0)
}

async fn until_marked(marker: &str, count: usize) -> bool {
    for _ in 0..100 {
        if processes_marked(marker) == count {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

#[tokio::test]
async fn a_tool_call_that_runs_too_long_is_cut_off_and_its_child_killed() {
    let app = spawn_with_stdio(Store::Filesystem, &[("MCP_CALL_TIMEOUT_SECS", "2")]).await;
    let admin = app.admin_token().await;
    let (command, args) = everything_stdio();
    let marker = uuid::Uuid::new_v4().to_string();
    let id = create(
        &app,
        &admin,
        json!({"name": "stdio", "transportType": 3, "command": command, "args": args,
        "envVars": {"MCP_TEST_MARKER": marker}}),
    )
    .await;
    let sum = mcp::call_tool(&app.state, CHATTER, id, "get-sum", json!({"a": 1, "b": 1}))
        .await
        .unwrap();
    assert_eq!(sum.text, "The sum of 1 and 1 is 2.");
    assert_eq!(processes_marked(&marker), 1, "one child for the session");
    let started = std::time::Instant::now();
    let slow = ten_second_operation(&app, id).await;
    assert!(
        slow.is_error && slow.text.contains("did not answer within 2 s"),
        "{slow:?}"
    );
    // Stopped at its limit, not after the operation's 10 s (a busy machine may add seconds).
    assert!(started.elapsed() < Duration::from_secs(9));
    assert!(
        until_marked(&marker, 0).await,
        "the timed-out session's child is killed"
    );
    // The next call starts a fresh session and child.
    let again = mcp::call_tool(&app.state, CHATTER, id, "get-sum", json!({"a": 2, "b": 2}))
        .await
        .unwrap();
    assert_eq!(again.text, "The sum of 2 and 2 is 4.");
    assert_eq!(processes_marked(&marker), 1);
    // Deleting the server ends its session and its child.
    app.delete(&format!("/mcp-server/{id}"), Some(&admin)).await.assert_ok();
    assert!(until_marked(&marker, 0).await, "a deleted server's child is killed");
}

/// One call running out of time leaves the session to the calls still running on it: it was
/// dropped, and every call in flight on it failed with it.
#[tokio::test]
async fn a_timed_out_call_leaves_the_session_to_the_calls_still_on_it() {
    // The session is open first, so the long call's limit counts from the call alone.
    let (app, _, id) = everything_with_a_session(&[("MCP_CALL_TIMEOUT_SECS", "5")]).await;
    let started = std::time::Instant::now();
    let long = async {
        let answer = mcp::call_tool(
            &app.state,
            CHATTER,
            id,
            "trigger-long-running-operation",
            json!({"duration": 10, "steps": 2}),
        )
        .await;
        (answer, started.elapsed())
    };
    let short = async {
        // Starts two seconds before the long call's limit and ends two seconds after it.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let from = started.elapsed();
        let answer = mcp::call_tool(
            &app.state,
            CHATTER,
            id,
            "trigger-long-running-operation",
            json!({"duration": 4, "steps": 1}),
        )
        .await;
        (answer, from, started.elapsed())
    };
    let ((long, long_ended), (short, short_from, short_ended)) = tokio::join!(long, short);
    // Otherwise the test says nothing: the short call must have been on the session when
    // the long one was given up.
    assert!(
        short_from < long_ended && long_ended < short_ended,
        "the short call ran {short_from:?}..{short_ended:?}, the long one ended at {long_ended:?}"
    );
    let long = long.unwrap();
    assert!(
        long.is_error && long.text.contains("did not answer within 5 s"),
        "{long:?}"
    );
    let short = short.unwrap();
    assert!(
        !short.is_error,
        "the call still running on the session was cut: {short:?}"
    );
}

/// A connection test opens a session of its own: it ended every session of the server, and a
/// chat's call in flight failed with "transport closed".
#[tokio::test]
async fn a_connection_test_leaves_the_chats_calls_in_flight_alone() {
    let (app, admin, id) = everything_with_a_session(&[]).await;
    let started = std::time::Instant::now();
    let long = async {
        let args = json!({"duration": 4, "steps": 1});
        let answer = mcp::call_tool(&app.state, CHATTER, id, "trigger-long-running-operation", args).await;
        (answer, started.elapsed())
    };
    let test = async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let reply = app
            .post(&format!("/mcp-server/{id}/test"), Some(&admin), &json!({}))
            .await;
        (reply, started.elapsed())
    };
    let ((long, long_ended), (tested, tested_at)) = tokio::join!(long, test);
    assert_eq!(tested.assert_ok()["success"], true, "{:?}", tested.body);
    // Otherwise the test says nothing: the test must have run while the call was in flight.
    assert!(
        tested_at < long_ended,
        "tested at {tested_at:?}, the call ended at {long_ended:?}"
    );
    let long = long.unwrap();
    assert!(!long.is_error, "the call in flight was cut: {long:?}");
}

/// The app (with `extra` settings), its administrator's token, and server-everything over
/// stdio with the chatter's session already open.
async fn everything_with_a_session(extra: &[(&str, &str)]) -> (TestApp, String, i64) {
    let app = spawn_with_stdio(Store::Filesystem, extra).await;
    let admin = app.admin_token().await;
    let (command, args) = everything_stdio();
    let id = create(
        &app,
        &admin,
        json!({"name": "shared", "transportType": 3, "command": command, "args": args}),
    )
    .await;
    let warm = mcp::call_tool(&app.state, CHATTER, id, "echo", json!({"message": "warm"}))
        .await
        .unwrap();
    assert!(!warm.is_error, "{warm:?}");
    (app, admin, id)
}

/// server-everything's operation of 10 s, past the tests' call time limit (2 s).
async fn ten_second_operation(app: &TestApp, id: i64) -> mcp::ToolOutcome {
    let args = json!({"duration": 10, "steps": 2});
    mcp::call_tool(&app.state, CHATTER, id, "trigger-long-running-operation", args)
        .await
        .unwrap()
}

/// A stdio server run through a wrapper (a shell here, `npx` or `uvx` in use) that starts a
/// helper in the background and becomes `(command, args)`: the helper is the kind of process
/// a wrapper leaves behind. Returns the server's id, once both run.
async fn wrapped(app: &TestApp, admin: &str, name: &str, (command, args): (String, Vec<String>), marker: &str) -> i64 {
    let mut sh_args = vec![json!("-c"), json!("sleep 600 & exec \"$0\" \"$@\""), json!(command)];
    sh_args.extend(args.into_iter().map(Value::from));
    let id = create(
        app,
        admin,
        json!({"name": name, "transportType": 3, "command": "/bin/sh", "args": sh_args,
        "envVars": {"MCP_TEST_MARKER": marker}}),
    )
    .await;
    let tools = mcp::tools_of_servers(&app.state, CHATTER, &[id]).await.unwrap();
    assert!(tools[0].1.is_ok(), "{name} lists its tools");
    assert_eq!(processes_marked(marker), 2, "the server and its helper");
    id
}

async fn gone(marker: &str) {
    assert!(
        until_marked(marker, 0).await,
        "the server and its helper are gone: {} left",
        processes_marked(marker)
    );
}

/// A wrapped server is killed with what the wrapper started: the command's own process is
/// not the server.
#[tokio::test]
async fn a_timed_out_stdio_server_is_killed_with_the_processes_it_started() {
    let app = spawn_with(
        Store::Filesystem,
        &api_tests::mcp_servers::with_stdio("/bin/sh", &[("MCP_CALL_TIMEOUT_SECS", "2")]),
    )
    .await;
    let admin = app.admin_token().await;
    let marker = uuid::Uuid::new_v4().to_string();
    let id = wrapped(&app, &admin, "wrapped", everything_stdio(), &marker).await;
    let slow = ten_second_operation(&app, id).await;
    assert!(slow.is_error, "{slow:?}");
    gone(&marker).await;
}

/// A wrapped server that ends when its stdin closes (the graceful end of a session: here the
/// server's deletion) takes what the wrapper started with it: the kill of the group came only
/// when the leader outlived the wait.
#[tokio::test]
async fn a_wrapped_stdio_server_that_exits_on_its_own_takes_its_group_along() {
    let app = spawn_with(Store::Filesystem, &api_tests::mcp_servers::with_stdio("/bin/sh", &[])).await;
    let admin = app.admin_token().await;
    let marker = uuid::Uuid::new_v4().to_string();
    let python = api_tests::mcp_servers::python_stdio;
    let id = wrapped(&app, &admin, "plain", python(), &marker).await;
    let sum = mcp::call_tool(&app.state, CHATTER, id, "add", json!({"a": 2, "b": 3}))
        .await
        .unwrap();
    assert_eq!(sum.text, "5");
    app.delete(&format!("/mcp-server/{id}"), Some(&admin)).await.assert_ok();
    gone(&marker).await;

    // A process that ends (the local server on Ctrl-C) closes every session first, and waits
    // for their children to be killed (a signalled process takes a moment to leave /proc).
    wrapped(&app, &admin, "plain 2", python(), &marker).await;
    app.state.mcp().close_all(Duration::from_secs(10)).await;
    gone(&marker).await;
}

/// The status after a test, and the whole detail.
async fn test_status(app: &TestApp, token: &str, id: i64, seen: &mut Seen) -> (bool, Value) {
    let t = seen.keep(
        app.post(&format!("/mcp-server/{id}/test"), Some(token), &json!({}))
            .await,
    );
    let success = t.assert_ok()["success"].as_bool().unwrap();
    let d = seen.keep(app.get(&format!("/mcp-server/{id}"), Some(token)).await);
    (success, d.assert_ok().clone())
}

#[tokio::test]
async fn bearer_and_api_key_servers_need_the_right_credentials() {
    let logs = LogCapture::start();
    let app = spawn(Store::Filesystem).await;
    let admin = app.admin_token().await;
    let mut seen = Seen::default();
    let token = "bearer-secret-7f3a9c2e";
    let key_value = "apikey-secret-41d8e0b6";
    let bearer = guarded(&["bearer", token]).await;
    let keyed = guarded(&["apikey", "X-Api-Key", key_value]).await;

    // Bearer: none, then a wrong token, then the right one.
    let id = create(&app, &admin, http_server("bearer", 2, &bearer.url("/mcp"))).await;
    let (ok, d) = test_status(&app, &admin, id, &mut seen).await;
    assert!(!ok && d["status"] == "error", "{d}");
    assert!(
        d["lastError"].as_str().unwrap().contains("authentication failed"),
        "{d}"
    );
    seen.keep(
        app.put(
            &format!("/mcp-server/{id}"),
            Some(&admin),
            &json!({"authType": 2, "authConfig": {"token": "wrong-token-000000"}}),
        )
        .await,
    )
    .assert_ok();
    let (ok, d) = test_status(&app, &admin, id, &mut seen).await;
    assert!(
        !ok && d["status"] == "error" && d["lastError"].as_str().unwrap().contains("authentication failed"),
        "{d}"
    );
    seen.keep(
        app.put(
            &format!("/mcp-server/{id}"),
            Some(&admin),
            &json!({"authConfig": {"token": token}}),
        )
        .await,
    )
    .assert_ok();
    let (ok, d) = test_status(&app, &admin, id, &mut seen).await;
    assert!(
        ok && d["status"] == "connected" && d["toolCount"] == GUARDED_TOOLS && d["lastError"].is_null(),
        "{d}"
    );
    // The credential goes with every request, tool calls included.
    let sum = mcp::call_tool(&app.state, CHATTER, id, "add", json!({"a": 20, "b": 22}))
        .await
        .unwrap();
    assert_eq!(
        sum,
        mcp::ToolOutcome {
            text: "42".into(),
            is_error: false
        }
    );
    assert!(bearer.count("TOKEN-OK") >= 2);

    // API key header: a wrong value, then the right one.
    let kid = create(
        &app,
        &admin,
        json!({"name": "keyed", "transportType": 2, "endpoint": keyed.url("/mcp"),
        "authType": 1, "authConfig": {"key": "X-Api-Key", "value": "wrong-value-000000"}}),
    )
    .await;
    let (ok, d) = test_status(&app, &admin, kid, &mut seen).await;
    assert!(!ok && d["status"] == "error", "{d}");
    assert_eq!(d["authConfig"]["key"], "X-Api-Key", "the header name as it was sent");
    let mut fixed = d.clone();
    fixed["authConfig"]["value"] = json!(key_value);
    seen.keep(app.put(&format!("/mcp-server/{kid}"), Some(&admin), &fixed).await)
        .assert_ok();
    let (ok, d) = test_status(&app, &admin, kid, &mut seen).await;
    assert!(ok && d["status"] == "connected", "{d}");
    let shout = mcp::call_tool(&app.state, CHATTER, kid, "shout", json!({"text": "quiet"}))
        .await
        .unwrap();
    assert_eq!(shout.text, "QUIET");
    seen.keep(app.get("/mcp-server/page", Some(&admin)).await).assert_ok();
    seen.keep(app.get(&format!("/mcp-server/{kid}/tools"), Some(&admin)).await)
        .assert_ok();

    let logged = logs.text();
    assert!(
        logged.contains("MCP connection test failed"),
        "the capture works: {logged}"
    );
    for secret in [token, key_value] {
        assert!(!seen.0.contains(secret), "{secret} in a response");
        assert!(!logged.contains(secret), "{secret} in the log");
    }
}

#[tokio::test]
async fn sse_servers_get_the_credentials_on_the_stream_and_every_message() {
    let app = spawn(Store::Filesystem).await;
    let admin = app.admin_token().await;
    let mut seen = Seen::default();
    let bearer = guarded_sse(&["bearer", "sse-bearer-secret-1234"]).await;
    let keyed = guarded_sse(&["apikey", "X-Api-Key", "sse-key-secret-5678"]).await;
    let servers = [
        (
            bearer.url("/sse"),
            json!({"authType": 2, "authConfig": {"token": "sse-bearer-secret-1234"}}),
        ),
        (
            keyed.url("/sse"),
            json!({"authType": 1, "authConfig": {"key": "X-Api-Key", "value": "sse-key-secret-5678"}}),
        ),
    ];
    for (i, (url, auth)) in servers.iter().enumerate() {
        let id = create(&app, &admin, http_server(&format!("sse {i}"), 1, url)).await;
        let (ok, d) = test_status(&app, &admin, id, &mut seen).await;
        assert!(
            !ok && d["status"] == "error" && d["lastError"].as_str().unwrap().contains("authentication failed"),
            "{d}"
        );
        seen.keep(app.put(&format!("/mcp-server/{id}"), Some(&admin), auth).await)
            .assert_ok();
        let (ok, d) = test_status(&app, &admin, id, &mut seen).await;
        assert!(
            ok && d["status"] == "connected" && d["toolCount"] == GUARDED_TOOLS,
            "{d}"
        );
        let sum = mcp::call_tool(&app.state, CHATTER, id, "add", json!({"a": 40, "b": 2}))
            .await
            .unwrap();
        assert_eq!(
            sum,
            mcp::ToolOutcome {
                text: "42".into(),
                is_error: false
            }
        );
    }
    assert!(!seen.0.contains("sse-bearer-secret-1234") && !seen.0.contains("sse-key-secret-5678"));
}

/// The guarded fixture (no credentials) as an administrator's server, whose `session_id` tool
/// names the session it was called in; the fixture lives as long as what is returned.
async fn session_naming_server(app: &TestApp, admin: &str) -> (api_tests::mcp_servers::Fixture, i64) {
    let server = guarded(&["none"]).await;
    let body = json!({"name": "sessions", "transportType": 2, "endpoint": server.url("/mcp")});
    let id = create(app, admin, body).await;
    (server, id)
}

/// The session `party`'s calls to server `id` go through.
async fn session_of(app: &TestApp, party: Owner, id: i64) -> String {
    mcp::call_tool(&app.state, party, id, "session_id", json!({}))
        .await
        .unwrap()
        .text
}

/// Each person chatting has a session of their own: what a stateful server keeps in a session
/// is never another's.
#[tokio::test]
async fn each_person_chatting_has_a_session_of_their_own() {
    let app = spawn(Store::Filesystem).await;
    let admin = app.admin_token().await;
    let (_server, id) = session_naming_server(&app, &admin).await;
    let session = |party| session_of(&app, party, id);
    let alice = session(Owner::User(1)).await;
    let bob = session(Owner::User(2)).await;
    let partners_user = session(Owner::External(1)).await;
    assert_ne!(alice, bob);
    assert_ne!(alice, partners_user);
    assert_ne!(bob, partners_user);
    assert_eq!(session(Owner::User(1)).await, alice, "reused by the same person");
    assert_eq!(session(Owner::User(2)).await, bob);
}

/// Past MCP_SESSIONS_PER_SERVER sessions of one server, the one unused longest is closed: a
/// stdio server many people chat with keeps that many children, not one per person.
#[tokio::test]
async fn a_server_keeps_its_sessions_per_server_at_most() {
    let app = spawn_with_stdio(Store::Filesystem, &[("MCP_SESSIONS_PER_SERVER", "2")]).await;
    let admin = app.admin_token().await;
    let (stdio, mark) = marked_everything(&app, &admin, "children").await;
    let add = json!({"a": 1, "b": 2});
    let sum = |user| mcp::call_tool(&app.state, Owner::User(user), stdio, "get-sum", add.clone());
    assert!(sum(1).await.unwrap().text.contains('3'));
    let per_session = processes_with(&mark);
    assert!(per_session > 0, "the first child runs");
    assert!(sum(2).await.unwrap().text.contains('3'));
    assert_eq!(processes_with(&mark), 2 * per_session, "a child per person");
    assert!(sum(3).await.unwrap().text.contains('3'));
    assert_eq!(
        processes_settled_at(&mark, 2 * per_session).await,
        2 * per_session,
        "the third person's session closed another"
    );

    // The one closed is the one unused longest.
    let (_server, http) = session_naming_server(&app, &admin).await;
    let session = |user| session_of(&app, Owner::User(user), http);
    let first = session(1).await;
    let second = session(2).await;
    let third = session(3).await;
    assert_eq!(session(3).await, third, "the newest is kept");
    assert_eq!(session(2).await, second, "the second is kept");
    assert_ne!(session(1).await, first, "the first, unused longest, was closed");
    assert_eq!(session(2).await, second, "the one used since the third is kept");
}

#[tokio::test]
async fn sessions_are_reused_until_the_server_changes() {
    let app = spawn(Store::Filesystem).await;
    let admin = app.admin_token().await;
    let server = guarded(&["bearer", "reuse-token-abcdef"]).await;
    let id = create(
        &app,
        &admin,
        json!({"name": "reused", "transportType": 2, "endpoint": server.url("/mcp"),
        "authType": 2, "authConfig": {"token": "reuse-token-abcdef"}}),
    )
    .await;
    let session = || async {
        mcp::call_tool(&app.state, CHATTER, id, "session_id", json!({}))
            .await
            .unwrap()
            .text
    };
    let first = session().await;
    assert_eq!(session().await, first, "one session per server in a process");
    let tools = mcp::tools_of_servers(&app.state, CHATTER, &[id]).await.unwrap();
    assert_eq!(tools[0].1.as_ref().unwrap().len(), GUARDED_TOOLS);
    assert_eq!(session().await, first, "listing tools used the same session");
    let someone_elses = session_of(&app, Owner::User(2), id).await;

    app.put(
        &format!("/mcp-server/{id}"),
        Some(&admin),
        &json!({"description": "changed"}),
    )
    .await
    .assert_ok();
    let second = session().await;
    assert_ne!(second, first, "an update ends the session");
    assert_ne!(
        session_of(&app, Owner::User(2), id).await,
        someone_elses,
        "and everyone else's"
    );
    // Another process notices a change by the row's updateDt, without this process's invalidation.
    sqlx::query("UPDATE mcp_servers SET update_dt = now() + interval '1 second' WHERE id = $1")
        .bind(id)
        .execute(&app.db)
        .await
        .unwrap();
    assert_ne!(session().await, second, "a newer configuration replaces the session");

    app.delete(&format!("/mcp-server/{id}"), Some(&admin)).await.assert_ok();
    let gone = mcp::call_tool(&app.state, CHATTER, id, "session_id", json!({}))
        .await
        .unwrap();
    assert!(gone.is_error && gone.text.contains("no longer exists"));
}

#[tokio::test]
async fn oauth2_tokens_are_fetched_reused_refreshed_and_refusals_reported() {
    let logs = LogCapture::start();
    let app = spawn(Store::Filesystem).await;
    let admin = app.admin_token().await;
    let mut seen = Seen::default();
    let secret = "oauth-client-secret-93e1";
    // Tokens live 10 s (renewed after 9): the test and two calls to a Node server fit in that
    // on a busy machine, and the wait for expiry below stays short.
    let issuer_server = oauth("platform", secret, 10, 10).await;
    let issuer = format!("http://localhost:{}", issuer_server.port);
    let resource = guarded(&["jwt", &issuer]).await;
    let token_url = issuer_server.url("/token");
    let body = |client_secret: &str, token_url: &str| {
        json!({"name": "oauth", "transportType": 2, "endpoint": resource.url("/mcp"), "authType": 3,
               "authConfig": {"clientId": "platform", "clientSecret": client_secret, "tokenUrl": token_url}})
    };

    // A client the token endpoint refuses: error status naming the token endpoint, without
    // its query (some endpoints take a key there).
    let with_query = format!("{token_url}?key=query-secret-77");
    let id = create(&app, &admin, body("not-the-secret-1234", &with_query)).await;
    let (ok, d) = test_status(&app, &admin, id, &mut seen).await;
    assert!(!ok && d["status"] == "error", "{d}");
    let err = d["lastError"].as_str().unwrap();
    assert!(
        err.contains("token endpoint")
            && err.contains("refused the client credentials")
            && err.contains("invalid_client")
            && !err.contains("query-secret-77"),
        "{err}"
    );
    assert_eq!(issuer_server.count("TOKEN-REFUSED"), 1);

    // An unreachable token endpoint is a clear error too.
    let dead = format!("http://127.0.0.1:{}/token", api_tests::refused_port());
    seen.keep(
        app.put(&format!("/mcp-server/{id}"), Some(&admin), &body(secret, &dead))
            .await,
    )
    .assert_ok();
    let (ok, d) = test_status(&app, &admin, id, &mut seen).await;
    assert!(
        !ok && d["lastError"].as_str().unwrap().contains("is unreachable"),
        "{d}"
    );

    // The right client: one token, reused while fresh.
    seen.keep(
        app.put(&format!("/mcp-server/{id}"), Some(&admin), &body(secret, &token_url))
            .await,
    )
    .assert_ok();
    let (ok, d) = test_status(&app, &admin, id, &mut seen).await;
    assert!(ok && d["status"] == "connected", "{d}");
    let call = || mcp::call_tool(&app.state, CHATTER, id, "add", json!({"a": 1, "b": 1}));
    assert_eq!(call().await.unwrap().text, "2");
    assert_eq!(call().await.unwrap().text, "2");
    assert_eq!(issuer_server.count("TOKEN-ISSUED"), 1, "the token is reused");
    // After it expires, a new one is fetched before the server would refuse it.
    tokio::time::sleep(Duration::from_millis(10_200)).await;
    assert_eq!(call().await.unwrap().text, "2");
    assert_eq!(issuer_server.count("TOKEN-ISSUED"), 2, "refreshed after expiry");
    assert!(resource.count("TOKEN-OK") >= 4);
    seen.keep(app.get(&format!("/mcp-server/{id}"), Some(&admin)).await)
        .assert_ok();

    let logged = logs.text();
    assert!(
        !seen.0.contains(secret) && !logged.contains(secret),
        "client secret leaked"
    );
    assert!(!logged.contains("not-the-secret-1234"));
}

#[tokio::test]
async fn a_token_the_server_refuses_is_replaced_once() {
    let app = spawn(Store::Filesystem).await;
    let admin = app.admin_token().await;
    // Tokens live 2 s but are advertised for an hour: the client keeps one the server refuses.
    let issuer_server = oauth("platform", "secret-abcdef-123", 2, 3600).await;
    let resource = guarded(&["jwt", &format!("http://localhost:{}", issuer_server.port)]).await;
    let id = create(&app, &admin, json!({"name": "oauth", "transportType": 2, "endpoint": resource.url("/mcp"), "authType": 3,
        "authConfig": {"clientId": "platform", "clientSecret": "secret-abcdef-123", "tokenUrl": issuer_server.url("/token")}})).await;
    assert_eq!(
        mcp::call_tool(&app.state, CHATTER, id, "add", json!({"a": 2, "b": 3}))
            .await
            .unwrap()
            .text,
        "5"
    );
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let after = mcp::call_tool(&app.state, CHATTER, id, "add", json!({"a": 3, "b": 3}))
        .await
        .unwrap();
    assert_eq!(
        after,
        mcp::ToolOutcome {
            text: "6".into(),
            is_error: false
        }
    );
    assert!(
        resource.count("TOKEN-REJECTED expired") >= 1,
        "the server refused the old token"
    );
    assert_eq!(issuer_server.count("TOKEN-ISSUED"), 2, "one new token after the 401");
}

/// A stdio server saved with OAuth2 credentials before a program's credentials were refused
/// (an HTTP server turned into one) starts without them: no token is fetched at its start,
/// whose failure would otherwise stop the program from starting.
#[tokio::test]
async fn a_stdio_server_saved_with_oauth2_credentials_starts_without_fetching_a_token() {
    let app = spawn_with_stdio(Store::Filesystem, &[]).await;
    let admin = app.admin_token().await;
    let issuer = oauth("platform", "secret-abcdef-123", 3600, 3600).await;
    let unused = format!("http://127.0.0.1:{}/mcp", api_tests::refused_port());
    let id = create(
        &app,
        &admin,
        json!({"name": "was-http", "transportType": 2, "endpoint": unused, "authType": 3,
        "authConfig": {"clientId": "platform", "clientSecret": "secret-abcdef-123", "tokenUrl": issuer.url("/token")}}),
    )
    .await;
    let (command, args) = everything_stdio();
    sqlx::query(
        "UPDATE mcp_servers SET transport_type = 3, endpoint = NULL, command = $2, args = $3, update_dt = now()
         WHERE id = $1",
    )
    .bind(id)
    .bind(&command)
    .bind(&args)
    .execute(&app.db)
    .await
    .unwrap();
    assert_eq!(
        stored(&app, id).await.0.auth_type,
        3,
        "the old credentials are still stored"
    );

    let issued = issuer.count("TOKEN-ISSUED");
    let env = mcp::call_tool(&app.state, CHATTER, id, "get-env", json!({}))
        .await
        .unwrap();
    assert!(!env.is_error, "{}", env.text);
    assert_eq!(
        issuer.count("TOKEN-ISSUED"),
        issued,
        "a token was fetched for a program"
    );
}

/// stdio servers run a command on the service's host as the service's user: off unless the
/// operator turns them on, then only for listed commands; a server saved while allowed does
/// not start on an instance where stdio is off.
#[tokio::test]
async fn stdio_servers_are_off_by_default_and_run_only_listed_commands() {
    let (command, args) = everything_stdio();
    let stdio = json!({"name": "local", "transportType": 3, "command": command, "args": args});

    let off = spawn(Store::Filesystem).await;
    let admin = off.admin_token().await;
    off.post("/mcp-server", Some(&admin), &stdio)
        .await
        .assert_error(400, 0, "transportType 3 (stdio) is disabled");
    assert_eq!(off.count("mcp_servers").await, 0);

    let only_node = spawn_with(
        Store::Filesystem,
        &[("MCP_STDIO_ENABLED", "true"), ("MCP_STDIO_COMMANDS", "node")],
    )
    .await;
    let admin = only_node.admin_token().await;
    for refused in [command.as_str(), "/bin/sh", "/tmp/elsewhere/node"] {
        let body = json!({"name": "local", "transportType": 3, "command": refused});
        only_node
            .post("/mcp-server", Some(&admin), &body)
            .await
            .assert_error(400, 0, "command");
    }
    let id = create(
        &only_node,
        &admin,
        json!({"name": "n", "transportType": 3, "command": "node"}),
    )
    .await;
    only_node
        .put(&format!("/mcp-server/{id}"), Some(&admin), &json!({"command": "bash"}))
        .await
        .assert_error(400, 0, "command \"bash\" is not allowed");
    assert_eq!(stored(&only_node, id).await.0.command.as_deref(), Some("node"));

    // Saved while allowed, then stdio is turned off: the server is not started, and says why.
    let on = api_tests::spawn_with_stdio(Store::Filesystem, &[]).await;
    let admin = on.admin_token().await;
    let id = create(&on, &admin, stdio.clone()).await;
    let disabled = on.instance_with(|c| c.mcp_stdio_enabled = false).await;
    let tools = on
        .send(
            on.client
                .get(format!("{disabled}/mcp-server/{id}/tools"))
                .header("Svc-Auth", &admin),
        )
        .await;
    tools.assert_error(400, 0, "stdio) is disabled");
    let test = on
        .send(
            on.client
                .post(format!("{disabled}/mcp-server/{id}/test"))
                .header("Svc-Auth", &admin)
                .json(&json!({})),
        )
        .await;
    let t = test.assert_ok();
    assert_eq!(t["success"], false, "{t}");
    assert!(t["message"].as_str().unwrap().contains("stdio) is disabled"), "{t}");

    // Its creator's variables go only to the program its creator named: another administrator
    // changing the command or its arguments sends them again.
    let secret = create(
        &on,
        &admin,
        json!({"name": "secret", "transportType": 3, "command": command, "args": args,
               "envVars": {"TOKEN": "creators-token"}}),
    )
    .await;
    let other_admin = on
        .post(
            "/user",
            Some(&admin),
            &json!({"username": "root2", "password": "password-2", "role": 1}),
        )
        .await;
    other_admin.assert_ok();
    let other = on.login("root2", "password-2").await.assert_ok()["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = format!("/mcp-server/{secret}");
    let masked = on.get(&path, Some(&admin)).await.assert_ok()["envVars"].clone();
    for body in [
        json!({"args": ["elsewhere.js"]}),
        json!({"args": ["elsewhere.js"], "envVars": masked}),
    ] {
        on.put(&path, Some(&other), &body).await.assert_error(
            400,
            0,
            "envVars: send the values again to change command or args",
        );
    }
    on.put(&path, Some(&other), &json!({"description": "only words"}))
        .await
        .assert_ok();
    on.put(
        &path,
        Some(&other),
        &json!({"args": ["elsewhere.js"], "envVars": {"TOKEN": "their-own"}}),
    )
    .await
    .assert_ok();

    // Saved with a variable that makes the command run other code (before the rule): not
    // started either.
    let steered = serde_json::to_string(&json!({ "NODE_OPTIONS": "--require=/tmp/x.js" })).unwrap();
    sqlx::query("UPDATE mcp_servers SET env_vars_enc = $2 WHERE id = $1")
        .bind(id)
        .bind(on.state.secrets().seal(&steered).unwrap())
        .execute(&on.db)
        .await
        .unwrap();
    on.get(&format!("/mcp-server/{id}/tools"), Some(&admin))
        .await
        .assert_error(400, 0, "envVars.NODE_OPTIONS is not allowed");
}

/// A Streamable HTTP server that restarted has forgotten its sessions: server-everything
/// answers the old session id with HTTP 400 (not the 404 the MCP specification asks for).
/// The call must not wait out MCP_CALL_TIMEOUT_SECS for an answer that already came: the
/// session is opened again and the call retried once, in the same call.
#[tokio::test]
async fn a_restarted_streamable_http_server_gets_a_new_session_within_the_same_call() {
    let app = spawn_with(Store::Filesystem, &[("MCP_CALL_TIMEOUT_SECS", "20")]).await;
    let admin = app.admin_token().await;
    let port = free_port();
    let server = everything_on("streamableHttp", port).await;
    let id = create(&app, &admin, http_server("restarts", 2, &server.url("/mcp"))).await;
    let first = mcp::call_tool(&app.state, CHATTER, id, "echo", json!({"message": "one"}))
        .await
        .unwrap();
    assert_eq!(first.text, "Echo: one");
    drop(server);
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _restarted = everything_on("streamableHttp", port).await;
    let second = mcp::call_tool(&app.state, CHATTER, id, "echo", json!({"message": "two"})).await;
    assert_eq!(second.unwrap().text, "Echo: two");
}

/// A connection test records its outcome only for the configuration it tested: one that
/// finishes after the server was changed leaves the change's `unknown` in place.
#[tokio::test]
async fn a_test_of_an_older_configuration_does_not_overwrite_the_status() {
    let app = spawn(Store::Filesystem).await;
    let admin = app.admin_token().await;
    let id = create(&app, &admin, http_server("changing", 2, "http://127.0.0.1:9/mcp")).await;
    let (tested, _, _) = stored(&app, id).await;
    app.put(
        &format!("/mcp-server/{id}"),
        Some(&admin),
        &json!({ "endpoint": "http://127.0.0.1:10/mcp" }),
    )
    .await
    .assert_ok();
    mcp::repo::mark_connected(&app.db, id, tested.update_dt, 3, chrono::Utc::now())
        .await
        .unwrap();
    mcp::repo::mark_error(&app.db, id, tested.update_dt, "refused")
        .await
        .unwrap();
    let (now, _, _) = stored(&app, id).await;
    assert_eq!((now.status.as_str(), now.tool_count), ("unknown", 0));
    mcp::repo::mark_error(&app.db, id, now.update_dt, "refused")
        .await
        .unwrap();
    assert_eq!(
        stored(&app, id).await.0.status,
        "error",
        "a test of the current one is recorded"
    );
}

/// The stored fields of `row` under another name.
fn renamed<'a>(row: &'a mcp::McpRow, name: &'a str) -> mcp::repo::Fields<'a> {
    mcp::repo::Fields {
        name,
        description: &row.description,
        transport_type: row.transport_type,
        endpoint: row.endpoint.as_deref(),
        command: row.command.as_deref(),
        args: &row.args,
        env_vars_enc: row.env_vars_enc.as_deref(),
        auth_type: row.auth_type,
        auth_config_enc: row.auth_config_enc.as_deref(),
        secret_set_by: row.secret_set_by,
    }
}

/// A server is written as it was read: an edit made from a row that changed meanwhile writes
/// nothing instead of undoing that change, and the API answers 409.
#[tokio::test]
async fn an_edit_made_from_a_stale_read_writes_nothing() {
    let app = spawn(Store::Filesystem).await;
    let admin = app.admin_token().await;
    let id = create(&app, &admin, http_server("before", 2, "http://127.0.0.1:9/mcp")).await;
    let (read, _, _) = stored(&app, id).await;
    let mut change = http_server("before", 2, "http://127.0.0.1:9/mcp");
    change["description"] = json!("changed");
    app.put(&format!("/mcp-server/{id}"), Some(&admin), &change)
        .await
        .assert_ok();
    let written = mcp::repo::update(&app.db, id, read.update_dt, &renamed(&read, "stale"))
        .await
        .unwrap();
    assert!(!written, "a write from a stale read is refused");
    let (now, _, _) = stored(&app, id).await;
    assert_eq!(
        (now.name.as_str(), now.description.as_str()),
        ("before", "changed"),
        "the other edit stands"
    );
    assert!(mcp::repo::update(&app.db, id, now.update_dt, &renamed(&now, "fresh"))
        .await
        .unwrap());
}

/// A Streamable HTTP server whose tool list never ends (every page names a next one) or is
/// too long: it is read within bounds and refused with a reason, not read until the call's
/// time limit with every page kept, nor sent whole to the model in every chat step.
#[tokio::test]
async fn a_tool_list_past_the_bounds_is_refused() {
    use axum::{routing::post, Json, Router};
    let app = spawn(Store::Filesystem).await;
    let admin = app.admin_token().await;
    // tools/list pages of `per_page` tools, each page naming the next.
    let serve = |per_page: usize| async move {
        let answer = move |Json(req): Json<Value>| async move {
            let id = req["id"].clone();
            let result = match req["method"].as_str() {
                Some("initialize") => json!({ "protocolVersion": "2025-03-26", "capabilities": { "tools": {} },
                    "serverInfo": { "name": "endless", "version": "1" } }),
                Some("tools/list") => {
                    let page = req["params"]["cursor"]
                        .as_str()
                        .unwrap_or("0")
                        .parse::<usize>()
                        .unwrap();
                    let tools: Vec<Value> = (0..per_page)
                        .map(|i| json!({ "name": format!("t{page}_{i}"), "inputSchema": { "type": "object" } }))
                        .collect();
                    json!({ "tools": tools, "nextCursor": (page + 1).to_string() })
                }
                _ => return axum::http::StatusCode::ACCEPTED.into_response(),
            };
            Json(json!({ "jsonrpc": "2.0", "id": id, "result": result })).into_response()
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        let router = Router::new().route("/mcp", post(answer));
        tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
        url
    };
    use axum::response::IntoResponse;
    for (per_page, told) in [(1, "past 20 pages"), (100, "more than 256 tools")] {
        let url = serve(per_page).await;
        let id = create(&app, &admin, http_server(&format!("endless-{per_page}"), 2, &url)).await;
        app.get(&format!("/mcp-server/{id}/tools"), Some(&admin))
            .await
            .assert_error(400, 0, told);
    }
}

/// A server's error quoted in the test's answer and its `lastError` may hold a NUL: the test
/// still answers success:false with the server marked in error, not a 500 with nothing stored.
#[tokio::test]
async fn a_servers_error_with_a_nul_is_recorded() {
    use axum::{routing::post, Json, Router};
    let app = spawn(Store::Filesystem).await;
    let admin = app.admin_token().await;
    let answer = |Json(req): Json<Value>| async move {
        Json(json!({ "jsonrpc": "2.0", "id": req["id"], "error": { "code": -1, "message": "bad\0 day" } }))
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move {
        axum::serve(listener, Router::new().route("/mcp", post(answer)))
            .await
            .unwrap()
    });
    let id = create(&app, &admin, http_server("nul", 2, &url)).await;
    let tested = app
        .post(&format!("/mcp-server/{id}/test"), Some(&admin), &json!({}))
        .await;
    let r = tested.assert_ok();
    assert_eq!(r["success"], false, "{r}");
    let told = r["message"].as_str().unwrap();
    assert!(told.contains("bad day") && !told.contains('\0'), "{told}");
    let (status, last_error): (String, String) =
        sqlx::query_as("SELECT status, last_error FROM mcp_servers WHERE id = $1")
            .bind(id)
            .fetch_one(&app.db)
            .await
            .unwrap();
    assert_eq!((status.as_str(), last_error.as_str()), ("error", told));
}

/// A server's reach follows its creator's role now, not when its session was opened: a session
/// opened while its creator was an administrator (reaching the service's own networks) is not
/// used again once they are demoted.
#[tokio::test]
async fn a_demoted_creators_open_session_is_not_used_beyond_their_new_reach() {
    let app = spawn_with(
        Store::Filesystem,
        &[("OUTBOUND_USER_DENY_CIDRS", shared::outbound::DEFAULT_USER_DENY)],
    )
    .await;
    let (bob_id, bob) = app.regular_user("bob").await;
    let role = |role: i16| {
        sqlx::query("UPDATE users SET role = $2 WHERE id = $1")
            .bind(bob_id)
            .bind(role)
            .execute(&app.db)
    };
    role(1).await.unwrap();
    let tools = guarded(&["none"]).await;
    let id = create(&app, &bob, http_server("internal", 2, &tools.url("/mcp"))).await;
    let path = format!("/mcp-server/{id}/tools");
    let listed = app.get(&path, Some(&bob)).await;
    assert_eq!(listed.assert_ok().as_array().unwrap().len(), GUARDED_TOOLS);

    role(2).await.unwrap();
    let refused = app.get(&path, Some(&bob)).await;
    assert!(refused.body.to_string().contains("may not call"), "{}", refused.body);
    let call = mcp::call_tool(&app.state, CHATTER, id, "add", json!({"a": 1, "b": 2}))
        .await
        .unwrap();
    assert!(
        call.is_error && call.text.contains("could not be reached"),
        "{}",
        call.text
    );
}
