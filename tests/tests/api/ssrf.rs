//! Server-side request forgery: URL fields the service calls on a client's behalf (model
//! endpoints, MCP endpoints, OAuth token URLs) may not point into the denied networks --
//! cloud metadata and link-local by default, more by `OUTBOUND_DENY_CIDRS` -- whether written
//! as an address, in disguise, or behind a host name that resolves there later.

use api_tests::model_server::ModelServer;
use api_tests::{spawn_with, Store};
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
        let body = json!({ "providerId": provider, "modelName": "m", "modelKey": "m", "modelType": "CHAT",
                           "apiKey": "k", "apiEndpoint": url });
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
        let oauth = json!({ "name": "evil", "transportType": 2, "endpoint": "http://10.1.2.3/mcp", "authType": 3,
                            "authConfig": { "clientId": "c", "clientSecret": "s", "tokenUrl": url } });
        app.post("/mcp-server", t, &oauth)
            .await
            .assert_error(400, 0, "authConfig.tokenUrl: ");
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
        "is in a network the service may not call",
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
    app.post("/mcp-server", t, &mcp).await.assert_error(
        400,
        0,
        "endpoint: 127.0.0.1 is in a network the service may not call",
    );
}
