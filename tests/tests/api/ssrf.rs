//! Server-side request forgery: URL fields the service calls on a client's behalf (model
//! endpoints, MCP endpoints, OAuth token URLs) may not point into the denied networks --
//! cloud metadata and link-local by default, more by `OUTBOUND_DENY_CIDRS` -- whether written
//! as an address, in disguise, or behind a host name that resolves there later.

use api_tests::model_server::ModelServer;
use api_tests::{spawn_with, Store, TestApp};
use serde_json::json;

/// The metadata service, however it is spelled.
const METADATA: &[&str] = &[
    "http://169.254.169.254/latest/meta-data/",
    "http://2852039166/v1",
    "http://0xA9FEA9FE/v1",
    "http://[fd00:ec2::254]/v1",
    "http://[::ffff:169.254.169.254]/v1",
    "http://100.100.100.200/v1",
    "http://0.0.0.0:8080/v1",
];

/// Every URL field the service calls refuses `url` from `token`'s user, naming the field: a new
/// and an updated model config (`config`), a new MCP server over SSE and over Streamable HTTP,
/// an updated one (`mcp`), and an OAuth2 token URL.
async fn refused_everywhere(app: &TestApp, token: &str, provider: i64, config: i64, mcp: i64, url: &str) {
    let t = Some(token);
    let body = json!({ "providerId": provider, "modelName": "m", "modelKey": "m", "modelType": "CHAT",
                       "apiKey": "k", "apiEndpoint": url, "scope": "PERSONAL" });
    app.post("/ai-model/config", t, &body)
        .await
        .assert_status_error(400, 0, "apiEndpoint: ");
    app.put(&format!("/ai-model/config/{config}"), t, &json!({ "apiEndpoint": url }))
        .await
        .assert_status_error(400, 0, "may not call");
    for transport in [1, 2] {
        app.post(
            "/mcp-server",
            t,
            &json!({ "name": "evil", "transportType": transport, "endpoint": url }),
        )
        .await
        .assert_error(400, 0, "endpoint: ");
    }
    app.put(&format!("/mcp-server/{mcp}"), t, &json!({ "endpoint": url }))
        .await
        .assert_error(400, 0, "may not call");
    let oauth = json!({ "name": "evil", "transportType": 2, "endpoint": "http://203.0.113.7/mcp", "authType": 3,
                        "authConfig": { "clientId": "c", "clientSecret": "s", "tokenUrl": url } });
    app.post("/mcp-server", t, &oauth)
        .await
        .assert_error(400, 0, "authConfig.tokenUrl: ");
}

#[tokio::test]
async fn url_fields_refuse_metadata_addresses_and_change_nothing() {
    let app = spawn_with(Store::Filesystem, &[]).await;
    let models = ModelServer::start().await;
    let admin = app.admin_token().await;
    let t = Some(admin.as_str());
    let provider = app.provider(&admin, "p").await;
    // Loopback and private networks stay reachable: self-hosted model servers live there.
    let config = app
        .model(&admin, provider, "CHAT", "chat-echo", &models.base_url, json!({}))
        .await;
    let mcp = app
        .post(
            "/mcp-server",
            t,
            &json!({ "name": "tools", "transportType": 2, "endpoint": "http://10.1.2.3/mcp" }),
        )
        .await
        .assert_ok()
        .as_i64()
        .unwrap();
    let before = app.snapshot().await;
    for url in METADATA {
        refused_everywhere(&app, &admin, provider, config, mcp, url).await;
    }
    app.snapshot().await.assert_unchanged_since(&before, "SSRF refusals");
}

#[tokio::test]
async fn a_name_that_resolves_into_a_denied_network_is_refused_when_saved_and_when_called() {
    // This deployment also denies loopback, so `localhost` plays the metadata host.
    let app = spawn_with(
        Store::Filesystem,
        &[("OUTBOUND_DENY_CIDRS", "169.254.0.0/16,127.0.0.0/8,::1/128")],
    )
    .await;
    let models = ModelServer::start().await;
    let admin = app.admin_token().await;
    let t = Some(admin.as_str());
    let provider = app.provider(&admin, "p").await;
    let port = models.base_url.rsplit(':').next().unwrap().to_owned();
    let by_name = format!("http://localhost:{port}");
    let body = json!({ "providerId": provider, "modelName": "m", "modelKey": "chat-echo", "modelType": "CHAT",
                       "apiKey": api_tests::model_server::GOOD_KEY, "apiEndpoint": by_name });
    app.post("/ai-model/config", t, &body).await.assert_status_error(
        400,
        0,
        "localhost resolves into a network the service may not call",
    );
    // A config saved before the name moved (or before the list grew) is refused at call time.
    let mut allowed = body.clone();
    allowed["apiEndpoint"] = json!("http://10.9.9.9/v1");
    let id = app
        .post("/ai-model/config", t, &allowed)
        .await
        .assert_status_ok()
        .as_i64()
        .unwrap();
    sqlx::query("UPDATE model_configs SET api_endpoint = $1 WHERE id = $2")
        .bind(&by_name)
        .bind(id)
        .execute(&app.db)
        .await
        .unwrap();
    let r = app.post(&format!("/ai-model/config/{id}/test"), t, &json!({})).await;
    let data = r.assert_status_ok();
    assert_eq!(data["success"], false, "{data}");
    assert!(
        data["message"].as_str().unwrap_or_default().contains("may not call"),
        "{data}"
    );
    assert!(models.requests().is_empty(), "the model server was reached");
    let mcp = json!({ "name": "tools", "transportType": 2, "endpoint": format!("http://localhost:{port}/mcp") });
    let refused = app.post("/mcp-server", t, &mcp).await;
    refused.assert_error(
        400,
        0,
        "endpoint: localhost resolves into a network the service may not call",
    );
    assert!(
        !refused.msg().contains("127.0.0.1"),
        "a name's address is not told: {}",
        refused.msg()
    );
}

/// A TCP listener standing for a service inside the deployment's network; counts connections.
async fn internal_service() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = seen.clone();
    tokio::spawn(async move {
        while let Ok((_socket, _)) = listener.accept().await {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    });
    (port, seen)
}

#[tokio::test]
async fn a_regular_users_endpoints_may_not_reach_the_services_own_networks() {
    let app = spawn_with(
        Store::Filesystem,
        &[("OUTBOUND_USER_DENY_CIDRS", shared::outbound::DEFAULT_USER_DENY)],
    )
    .await;
    let admin = app.admin_token().await;
    let (bob_id, bob) = app.regular_user("bob").await;
    // Connectivity tests are charged like any model call.
    sqlx::query("UPDATE users SET tokens = 100000, totals = 100000 WHERE id = $1")
        .bind(bob_id)
        .execute(&app.db)
        .await
        .unwrap();
    let b = Some(bob.as_str());
    let provider = app.provider(&admin, "p").await;
    let (port, seen) = internal_service().await;
    let login = format!("{}/user/login?x=", app.base);
    let internal = [
        login.clone(),
        format!("http://127.0.0.1:{port}/v1"),
        format!("http://localhost:{port}/v1"),
        "http://10.0.0.5/v1".to_owned(),
        "http://172.16.3.4/v1".to_owned(),
        "http://192.168.1.1/v1".to_owned(),
        "http://100.64.0.1/v1".to_owned(),
        "http://[::1]:8080/v1".to_owned(),
        "http://[fd00::1]/v1".to_owned(),
        "http://[::ffff:127.0.0.1]/v1".to_owned(),
    ];
    let public = json!({ "providerId": provider, "modelName": "m", "modelKey": "m", "modelType": "CHAT",
                         "apiKey": "k", "apiEndpoint": "http://203.0.113.7/v1", "scope": "PERSONAL" });
    let mine = app
        .post("/ai-model/config", b, &public)
        .await
        .assert_status_ok()
        .as_i64()
        .unwrap();
    let mcp = app
        .post(
            "/mcp-server",
            b,
            &json!({ "name": "tools", "transportType": 2, "endpoint": "http://203.0.113.7/mcp" }),
        )
        .await
        .assert_ok()
        .as_i64()
        .unwrap();
    let before = app.snapshot().await;
    for url in &internal {
        refused_everywhere(&app, &bob, provider, mine, mcp, url).await;
    }
    app.snapshot()
        .await
        .assert_unchanged_since(&before, "refused user endpoints");

    // A name is not resolved when a user saves it: refusing the internal ones there, and
    // accepting those that do not exist, told users which internal names exist.
    app.put(
        &format!("/ai-model/config/{mine}"),
        b,
        &json!({ "apiEndpoint": "http://db.no-such-host.invalid/v1" }),
    )
    .await
    .assert_status_ok();

    // Saved before this rule (or changed behind the API): refused when called, by name or
    // by address, and nothing connects. A name inside and a name nowhere read alike.
    let mut by_name = Vec::new();
    for url in [
        format!("http://127.0.0.1:{port}/v1"),
        format!("http://localhost:{port}/v1"),
        format!("http://db.no-such-host.invalid:{port}/v1"),
    ] {
        sqlx::query("UPDATE model_configs SET api_endpoint = $1 WHERE id = $2")
            .bind(&url)
            .bind(mine)
            .execute(&app.db)
            .await
            .unwrap();
        let data = app
            .post(&format!("/ai-model/config/{mine}/test"), b, &json!({}))
            .await
            .assert_status_ok()
            .clone();
        assert_eq!(data["success"], false, "{data}");
        let message = data["message"].as_str().unwrap();
        assert!(message.contains("may not call"), "{url}: {data}");
        if let Some(host) = ["localhost", "db.no-such-host.invalid"]
            .into_iter()
            .find(|h| url.contains(h))
        {
            by_name.push(message.replace(host, "<host>"));
        }
    }
    assert_eq!(by_name[0], by_name[1]);
    for transport in [1, 2] {
        sqlx::query("UPDATE mcp_servers SET endpoint = $1, transport_type = $2, update_dt = now() WHERE id = $3")
            .bind(format!("http://localhost:{port}/mcp"))
            .bind(transport)
            .bind(mcp)
            .execute(&app.db)
            .await
            .unwrap();
        let data = app
            .post(&format!("/mcp-server/{mcp}/test"), b, &json!({}))
            .await
            .assert_ok()
            .clone();
        assert_eq!(data["success"], false, "{data}");
        assert!(data["message"].as_str().unwrap().contains("may not call"), "{data}");
    }
    assert_eq!(
        seen.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the internal service was reached"
    );

    // Administrators keep their reach, but what an internal service answers goes back only to
    // them and the config's owner: a user testing a GLOBAL config sees no upstream text.
    let global = app
        .model(
            &admin,
            provider,
            "CHAT",
            "chat-echo",
            &login,
            json!({ "maxRetries": 0 }),
        )
        .await;
    let t = Some(admin.as_str());
    let to_admin = app
        .post(&format!("/ai-model/config/{global}/test"), t, &json!({}))
        .await
        .assert_status_ok()
        .clone();
    let to_bob = app
        .post(&format!("/ai-model/config/{global}/test"), b, &json!({}))
        .await
        .assert_status_ok()
        .clone();
    assert_eq!(
        (&to_admin["success"], &to_bob["success"]),
        (&json!(false), &json!(false))
    );
    let (admin_msg, bob_msg) = (
        to_admin["message"].as_str().unwrap(),
        to_bob["message"].as_str().unwrap(),
    );
    assert!(
        admin_msg.len() > bob_msg.len() && admin_msg.starts_with(bob_msg),
        "{admin_msg} / {bob_msg}"
    );
    // The service's own 404 (the call's path goes before the endpoint's query), whose body
    // only the administrator reads.
    assert_eq!(bob_msg, "the model or endpoint path was not found", "{to_bob}");
}
