//! `/app`: app management, tokens, and client nodes registered by heartbeat.

use api_tests::{spawn, Store, TestApp};
use serde_json::json;

async fn setup() -> (TestApp, String) {
    let app = spawn(Store::Filesystem).await;
    let admin = app.admin_token().await;
    (app, admin)
}

#[tokio::test]
async fn create_page_list_update_toggle_and_delete() {
    let (app, admin) = setup().await;
    let body = json!({ "appId": "crm-prod", "appName": "CRM", "description": "the CRM", "routeStrategy": "hash" });
    let created = app.post("/app", Some(&admin), &body).await.assert_ok().clone();
    assert_eq!(created["appId"], "crm-prod");
    assert_eq!(created["routeStrategy"], "HASH");
    assert_eq!(created["status"], 1);
    assert_eq!(created["onlineNodes"], 0);
    let token = created["token"].as_str().unwrap().to_owned();
    assert!(token.len() >= 40, "a strong token: {token}");
    let id = created["id"].as_i64().unwrap();

    // The token is stored encrypted, never in the clear.
    let sealed: String = sqlx::query_scalar("SELECT token_enc FROM apps WHERE id = $1")
        .bind(id)
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert!(sealed.starts_with("v1:") && !sealed.contains(&token), "{sealed}");

    let other = app.create_app(&admin, "erp").await;
    assert_ne!(other.token, token);

    let page = app.get("/app/page?page=1&size=10", Some(&admin)).await;
    let page = page.assert_ok();
    assert_eq!(page["total"], 2);
    assert_eq!(page["data"][0]["appId"], "erp", "newest first");
    assert_eq!(page["data"][1]["token"], token.as_str());
    let found = app.get("/app/page?keyword=CRM", Some(&admin)).await;
    assert_eq!(found.assert_ok()["total"], 1);
    let unset = app.get("/app/page?keyword=&status=", Some(&admin)).await;
    assert_eq!(unset.assert_ok()["total"], 2, "empty filters filter nothing");
    let range = "datetimeRange=2000-01-01%2000:00:00&datetimeRange=2000-01-02%2000:00:00";
    let old = app.get(&format!("/app/page?{range}"), Some(&admin)).await;
    assert_eq!(old.assert_ok()["total"], 0);
    app.get("/app/page?datetimeRange=yesterday", Some(&admin))
        .await
        .assert_error(400, 0, "datetimeRange");

    let changed = app
        .put(
            &format!("/app/{id}"),
            Some(&admin),
            &json!({ "appName": "CRM 2", "routeStrategy": "RANDOM" }),
        )
        .await;
    let changed = changed.assert_ok();
    assert_eq!(changed["appName"], "CRM 2");
    assert_eq!(changed["routeStrategy"], "RANDOM");
    assert_eq!(changed["description"], "the CRM", "unsent fields are kept");

    app.post(&format!("/app/{id}/toggle-status"), Some(&admin), &json!({}))
        .await
        .assert_ok();
    let list = app.get("/app/list", Some(&admin)).await;
    let list = list.assert_ok().as_array().unwrap().clone();
    assert_eq!(list.len(), 1, "only enabled apps: {list:?}");
    assert_eq!(list[0]["appId"], "erp");
    let disabled = app.get("/app/page?status=0", Some(&admin)).await;
    assert_eq!(disabled.assert_ok()["data"][0]["appId"], "crm-prod");
    app.post(&format!("/app/{id}/toggle-status"), Some(&admin), &json!({}))
        .await
        .assert_ok();
    assert_eq!(
        app.get("/app/list", Some(&admin))
            .await
            .assert_ok()
            .as_array()
            .unwrap()
            .len(),
        2
    );

    app.delete(&format!("/app/{id}"), Some(&admin)).await.assert_ok();
    assert_eq!(app.count("apps").await, 1);
    app.delete(&format!("/app/{id}"), Some(&admin))
        .await
        .assert_error(404, 404, "app");
}

#[tokio::test]
async fn bad_input_is_refused_and_changes_nothing() {
    let (app, admin) = setup().await;
    let existing = app.create_app(&admin, "crm").await;
    for (body, needle) in [
        (json!({ "appName": "x" }), "appId is required"),
        (json!({ "appId": "x" }), "appName is required"),
        (json!({ "appId": "has space", "appName": "x" }), "appId may only hold"),
        (json!({ "appId": "..", "appName": "x" }), "appId may not be '.' or '..'"),
        (
            json!({ "appId": "a".repeat(65), "appName": "x" }),
            "appId must be 1 to 64",
        ),
        (
            json!({ "appId": "ok", "appName": "x", "routeStrategy": "LEAST" }),
            "routeStrategy must be one of",
        ),
        (
            json!({ "appId": "crm", "appName": "again" }),
            "appId crm is already taken",
        ),
        (json!({ "appId": 5, "appName": "x" }), "appId"),
    ] {
        app.post("/app", Some(&admin), &body).await.assert_error(400, 0, needle);
    }
    let update = |body| {
        let app = &app;
        let admin = &admin;
        async move { app.put(&format!("/app/{}", existing.id), Some(admin), &body).await }
    };
    update(json!({ "appId": "renamed" }))
        .await
        .assert_error(400, 0, "appId cannot be changed");
    update(json!({ "appName": "" }))
        .await
        .assert_error(400, 0, "appName is required");
    update(json!({ "routeStrategy": "NOPE" }))
        .await
        .assert_error(400, 0, "routeStrategy");
    app.put("/app/9999", Some(&admin), &json!({ "appName": "x" }))
        .await
        .assert_error(404, 404, "app");
    app.post("/app/9999/toggle-status", Some(&admin), &json!({}))
        .await
        .assert_error(404, 404, "app");
    app.get("/app/page?status=7", Some(&admin))
        .await
        .assert_error(400, 0, "status");

    let row: (String, String, i16) = sqlx::query_as("SELECT app_id, app_name, status FROM apps")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(row, ("crm".to_owned(), "crm app".to_owned(), 1));
    assert_eq!(app.count("apps").await, 1);
}

#[tokio::test]
async fn only_administrators_manage_apps() {
    let (app, admin) = setup().await;
    let creds = app.create_app(&admin, "crm").await;
    app.heartbeat(&creds, "node-1").await.assert_ok();
    let (_, user) = app.regular_user("bob").await;
    let id = creds.id;
    let attempts: Vec<(&str, String)> = vec![
        ("GET", "/app/page".into()),
        ("GET", "/app/list".into()),
        ("POST", "/app".into()),
        ("PUT", format!("/app/{id}")),
        ("DELETE", format!("/app/{id}")),
        ("POST", format!("/app/{id}/toggle-status")),
        ("GET", "/app/crm/nodes".into()),
        ("GET", "/app/all-nodes".into()),
        ("DELETE", "/app/crm/nodes/node-1".into()),
    ];
    for (token, status) in [(None, 401), (Some(user.as_str()), 403)] {
        for (method, path) in &attempts {
            let body = json!({ "appId": "new", "appName": "new" });
            let reply = match *method {
                "GET" => app.get(path, token).await,
                "POST" => app.post(path, token, &body).await,
                "PUT" => app.put(path, token, &body).await,
                _ => app.delete(path, token).await,
            };
            assert_eq!(
                (reply.status, reply.code()),
                (status, status as i64),
                "{method} {path}: {:?}",
                reply.body
            );
        }
    }
    let row: (String, i16) = sqlx::query_as("SELECT app_name, status FROM apps")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(row, ("crm app".to_owned(), 1));
    assert_eq!(app.count("apps").await, 1);
    assert_eq!(app.count("client_nodes").await, 1);
    assert_eq!(app.count("client_node_kicks").await, 0);
}

#[tokio::test]
async fn nodes_register_by_heartbeat_expire_and_can_be_kicked() {
    let (app, admin) = setup().await;
    let crm = app.create_app(&admin, "crm").await;
    let erp = app.create_app(&admin, "erp").await;

    let beat = app.heartbeat(&crm, "node-1").await;
    let beat = beat.assert_ok();
    assert_eq!(beat["registered"], true);
    assert_eq!(beat["kicked"], false);
    assert!(beat["expireDt"].is_string());
    app.heartbeat(&crm, "node-2").await.assert_ok();
    app.heartbeat(&erp, "node-1").await.assert_ok();

    let nodes = app.get("/app/crm/nodes", Some(&admin)).await;
    let nodes = nodes.assert_ok().as_array().unwrap().clone();
    assert_eq!(nodes.len(), 2);
    let n = &nodes[0];
    assert_eq!(n["hostId"], "node-1");
    assert_eq!(n["appId"], "crm");
    assert_eq!(n["appName"], "crm app");
    assert_eq!(n["hostIp"], "10.0.0.7");
    assert_eq!(n["grpcPort"], 9090);
    assert_eq!(n["maxConcurrent"], 4);
    assert_eq!(n["activeChats"], 1);
    assert_eq!(n["labels"], json!({ "zone": "a" }));
    assert_eq!(n["online"], true);
    // The lease is 30 s from the beat.
    let lease: f64 = sqlx::query_scalar(
        "SELECT extract(epoch FROM expire_dt - now())::float8 FROM client_nodes WHERE host_id = 'node-1' LIMIT 1",
    )
    .fetch_one(&app.db)
    .await
    .unwrap();
    assert!((25.0..=30.5).contains(&lease), "lease {lease}");

    let all = app.get("/app/all-nodes", Some(&admin)).await;
    assert_eq!(all.assert_ok().as_array().unwrap().len(), 3);
    let list = app.get("/app/list", Some(&admin)).await;
    let crm_entry = list
        .assert_ok()
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["appId"] == "crm")
        .unwrap()
        .clone();
    assert_eq!(crm_entry["onlineNodes"], 2);

    // A missed lease: offline, and no longer counted.
    sqlx::query("UPDATE client_nodes SET expire_dt = now() - interval '1 second' WHERE host_id = 'node-2'")
        .execute(&app.db)
        .await
        .unwrap();
    let nodes = app.get("/app/crm/nodes", Some(&admin)).await;
    assert_eq!(nodes.assert_ok()[1]["online"], false);
    let page = app.get("/app/page?keyword=crm", Some(&admin)).await;
    assert_eq!(page.assert_ok()["data"][0]["onlineNodes"], 1);

    // Kick: removed at once, told on the next beat, registered again on the one after.
    app.delete("/app/crm/nodes/node-1", Some(&admin)).await.assert_ok();
    let nodes = app.get("/app/crm/nodes", Some(&admin)).await;
    assert_eq!(nodes.assert_ok().as_array().unwrap().len(), 1);
    let told = app.heartbeat(&crm, "node-1").await;
    let told = told.assert_ok();
    assert_eq!(
        (told["kicked"].clone(), told["registered"].clone()),
        (json!(true), json!(false))
    );
    assert_eq!(
        app.get("/app/crm/nodes", Some(&admin))
            .await
            .assert_ok()
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(app.heartbeat(&crm, "node-1").await.assert_ok()["registered"], true);
    // erp's node of the same host id was never touched.
    assert_eq!(
        app.get("/app/erp/nodes", Some(&admin))
            .await
            .assert_ok()
            .as_array()
            .unwrap()
            .len(),
        1
    );

    app.delete("/app/crm/nodes/ghost", Some(&admin))
        .await
        .assert_error(404, 404, "node ghost");
    app.get("/app/nope/nodes", Some(&admin))
        .await
        .assert_error(404, 404, "app nope");

    // Deleting the app takes its nodes with it, and its credentials, just used, stop working at once.
    app.delete(&format!("/app/{}", crm.id), Some(&admin)).await.assert_ok();
    app.heartbeat(&crm, "node-1").await.assert_error(401, 401, "invalid");
    assert_eq!(
        app.get("/app/all-nodes", Some(&admin))
            .await
            .assert_ok()
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test]
async fn heartbeats_need_valid_credentials_and_input() {
    let (app, admin) = setup().await;
    let crm = app.create_app(&admin, "crm").await;
    let body = json!({ "hostId": "n", "hostIp": "10.0.0.1", "grpcPort": 9000 });
    for creds in [None, Some(("crm", "wrong-token")), Some(("nope", crm.token.as_str()))] {
        app.ext_post_as(creds, "/node/heartbeat", &body)
            .await
            .assert_error(401, 401, "app credentials");
    }
    for (bad, needle) in [
        (json!({ "hostIp": "10.0.0.1", "grpcPort": 9000 }), "hostId is required"),
        (json!({ "hostId": "n", "grpcPort": 9000 }), "hostIp is required"),
        (
            json!({ "hostId": "n", "hostIp": "node.internal; rm", "grpcPort": 9000 }),
            "hostIp must be an IP address",
        ),
        (
            json!({ "hostId": "n", "hostIp": "169.254.169.254", "grpcPort": 9000 }),
            "hostIp: 169.254.169.254 is in a network the service may not call",
        ),
        // The app's token would cross the internet in the clear.
        (
            json!({ "hostId": "n", "hostIp": "203.0.113.10", "grpcPort": 9000 }),
            "hostIp: 203.0.113.10 is outside the networks client nodes may use (CLIENT_NODE_CIDRS)",
        ),
        (
            json!({ "hostId": "n", "hostIp": "2001:db8::1", "grpcPort": 9000 }),
            "hostIp: 2001:db8::1 is outside the networks",
        ),
        (json!({ "hostId": "n", "hostIp": "10.0.0.1" }), "grpcPort is required"),
        (
            json!({ "hostId": "n", "hostIp": "10.0.0.1", "grpcPort": 70000 }),
            "grpcPort must be between 1 and 65535",
        ),
        (
            json!({ "hostId": "n", "hostIp": "10.0.0.1", "grpcPort": 9000, "maxConcurrent": 0 }),
            "maxConcurrent",
        ),
        (
            json!({ "hostId": "n", "hostIp": "10.0.0.1", "grpcPort": 9000, "labels": { "a": 1 } }),
            "labels",
        ),
        (
            json!({
                "hostId": "n", "hostIp": "10.0.0.1", "grpcPort": 9000,
                "labels": (0..32).map(|i| (format!("k{i}"), json!("😀".repeat(100)))).collect::<serde_json::Map<_, _>>()
            }),
            "labels may hold at most 4096 bytes of JSON",
        ),
        (
            json!({ "hostId": "..", "hostIp": "10.0.0.1", "grpcPort": 9000 }),
            "hostId may not be",
        ),
        (
            json!({ "hostId": "a/b", "hostIp": "10.0.0.1", "grpcPort": 9000 }),
            "hostId may not be",
        ),
        (
            json!({ "hostId": "node\nforged line", "hostIp": "10.0.0.1", "grpcPort": 9000 }),
            "hostId must not contain control characters",
        ),
    ] {
        app.ext_post(&crm, "/node/heartbeat", &bad)
            .await
            .assert_error(400, 0, needle);
    }
    app.post(&format!("/app/{}/toggle-status", crm.id), Some(&admin), &json!({}))
        .await
        .assert_ok();
    app.ext_post(&crm, "/node/heartbeat", &body)
        .await
        .assert_error(401, 401, "disabled");
    assert_eq!(app.count("client_nodes").await, 0);

    // An app deleted while its credentials are still cached (5 s): its node is refused as
    // its callers are, not with a 500 on the node's foreign key.
    let erp = app.create_app(&admin, "erp").await;
    app.ext_post(&erp, "/node/heartbeat", &body).await.assert_ok();
    sqlx::query("DELETE FROM apps WHERE app_id = 'erp'")
        .execute(&app.db)
        .await
        .unwrap();
    app.ext_post(&erp, "/node/heartbeat", &body)
        .await
        .assert_error(401, 401, "app credentials");
    // So are its other calls that store something for its end users.
    app.ext_post(&erp, "/user/register", &json!({ "openId": "late" }))
        .await
        .assert_error(401, 401, "app credentials");
}

/// An app holds at most MAX_NODES_PER_APP nodes: a new hostId past it takes the place of the
/// longest-lapsed node, and is refused while all are online (a partner naming new hosts without
/// end filled the table and the admin lists, which are not paged).
#[tokio::test]
async fn an_app_holds_a_bounded_number_of_nodes() {
    use shared::apps::nodes::MAX_NODES_PER_APP as MAX;
    let (app, admin) = setup().await;
    let crm = app.create_app(&admin, "crm").await;
    let app_pk: i64 = sqlx::query_scalar("SELECT id FROM apps WHERE app_id = 'crm'")
        .fetch_one(&app.db)
        .await
        .unwrap();
    // One lapsed node and the rest online.
    sqlx::query(
        "INSERT INTO client_nodes (app_id, host_id, host_ip, grpc_port, max_concurrent, expire_dt)
         SELECT $1, 'h-' || i, '10.0.0.1', 9000, 1,
                CASE WHEN i = 1 THEN now() - interval '1 hour' ELSE now() + interval '1 hour' END
         FROM generate_series(1, $2) i",
    )
    .bind(app_pk)
    .bind(MAX)
    .execute(&app.db)
    .await
    .unwrap();
    let beat = |host: &str| json!({ "hostId": host, "hostIp": "10.0.0.2", "grpcPort": 9000 });
    app.ext_post(&crm, "/node/heartbeat", &beat("new-1")).await.assert_ok();
    app.ext_post(&crm, "/node/heartbeat", &beat("new-2"))
        .await
        .assert_error(400, 0, "hostId: the app has 500 nodes online already");
    // A known node still beats.
    app.ext_post(&crm, "/node/heartbeat", &beat("h-2")).await.assert_ok();
    let hosts: Vec<String> = sqlx::query_scalar("SELECT host_id FROM client_nodes WHERE app_id = $1")
        .bind(app_pk)
        .fetch_all(&app.db)
        .await
        .unwrap();
    assert_eq!(hosts.len() as i64, MAX);
    assert!(hosts.contains(&"new-1".to_owned()) && !hosts.contains(&"h-1".to_owned()));

    // New hosts at once take turns: one gets the last place, the others are refused.
    sqlx::query("DELETE FROM client_nodes WHERE app_id = $1 AND host_id = 'h-3'")
        .bind(app_pk)
        .execute(&app.db)
        .await
        .unwrap();
    let burst = (0..5).map(|i| {
        let (app, crm, body) = (&app, &crm, beat(&format!("burst-{i}")));
        async move { app.ext_post(crm, "/node/heartbeat", &body).await.status }
    });
    let statuses = futures::future::join_all(burst).await;
    assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 1, "{statuses:?}");
    assert_eq!(app.count("client_nodes").await, MAX);
}

/// A node's address is stored as parsed: a stray bracket would make an address no call to the
/// node could use.
#[tokio::test]
async fn a_node_address_is_stored_as_parsed() {
    let (app, admin) = setup().await;
    let crm = app.create_app(&admin, "crm").await;
    for (sent, stored) in [("10.0.0.9]", "10.0.0.9"), ("[fd00::7]", "fd00::7")] {
        let beat = json!({ "hostId": sent, "hostIp": sent, "grpcPort": 9000 });
        app.ext_post(&crm, "/node/heartbeat", &beat).await.assert_ok();
        let nodes = app.get("/app/crm/nodes", Some(&admin)).await;
        let nodes = nodes.assert_ok().as_array().unwrap().clone();
        let node = nodes.iter().find(|n| n["hostId"] == sent).unwrap();
        assert_eq!(node["hostIp"], stored);
    }
}

#[tokio::test]
async fn openapi_documents_the_app_and_external_routes() {
    let app = spawn(Store::Filesystem).await;
    let reply = app
        .send(app.client.get(format!("{}/api-docs/openapi.json", app.origin)))
        .await;
    let paths = reply.body["paths"].as_object().expect("paths");
    for (path, method) in [
        ("/api/app/page", "get"),
        ("/api/app/list", "get"),
        ("/api/app", "post"),
        ("/api/app/{id}", "put"),
        ("/api/app/{id}", "delete"),
        ("/api/app/{id}/toggle-status", "post"),
        ("/api/app/{id}/nodes", "get"),
        ("/api/app/all-nodes", "get"),
        ("/api/app/{id}/nodes/{hostId}", "delete"),
        ("/api/openapi/v1/agents", "get"),
        ("/api/openapi/v1/agent", "get"),
        ("/api/openapi/v1/user/register", "post"),
        ("/api/openapi/v1/user", "get"),
        ("/api/openapi/v1/user/agents", "get"),
        ("/api/openapi/v1/user/agent", "post"),
        ("/api/openapi/v1/user/agent", "delete"),
        ("/api/openapi/v1/agent/conversations", "get"),
        ("/api/openapi/v1/agent/conversations", "post"),
        ("/api/openapi/v1/agent/conversations", "delete"),
        ("/api/openapi/v1/agent/conversations/messages", "get"),
        ("/api/openapi/v1/resource/upload", "post"),
        ("/api/openapi/v1/resource/upload-url", "post"),
        ("/api/openapi/v1/resource/upload/complete", "post"),
        ("/api/openapi/v1/agent/chat", "post"),
        ("/api/openapi/v1/agent/chat/sync", "post"),
        ("/api/openapi/v1/embed-token", "get"),
        ("/api/openapi/v1/embed-token", "post"),
        ("/api/openapi/v1/node/heartbeat", "post"),
        ("/api/embed/{agentId}", "get"),
    ] {
        assert!(
            paths.get(path).and_then(|p| p.get(method)).is_some(),
            "{method} {path} missing from the OpenAPI document"
        );
    }
}

/// An app is written as it was read: an edit made from a row that changed meanwhile writes
/// nothing instead of undoing that change, and the API answers 409.
#[tokio::test]
async fn an_edit_made_from_a_stale_read_writes_nothing() {
    use shared::apps::repo::{self, AppChange};
    let (app, admin) = setup().await;
    let body = json!({ "appId": "crm", "appName": "Before" });
    let id = app.post("/app", Some(&admin), &body).await.assert_ok()["id"]
        .as_i64()
        .unwrap();
    let read = repo::find(&app.db, id).await.unwrap().unwrap();
    app.put(
        &format!("/app/{id}"),
        Some(&admin),
        &json!({ "description": "changed" }),
    )
    .await
    .assert_ok();
    let stale = AppChange {
        app_name: "Stale",
        description: read.description.as_deref(),
        route_strategy: &read.route_strategy,
        frame_ancestors: &read.frame_ancestors,
    };
    assert!(
        !repo::update(&app.db, id, read.update_dt, &stale).await.unwrap(),
        "a write from a stale read is refused"
    );
    let now = repo::find(&app.db, id).await.unwrap().unwrap();
    assert_eq!(
        (now.app_name.as_str(), now.description.as_deref()),
        ("Before", Some("changed")),
        "the other edit stands"
    );
    let fresh = AppChange {
        app_name: "Fresh",
        description: now.description.as_deref(),
        route_strategy: &now.route_strategy,
        frame_ancestors: &now.frame_ancestors,
    };
    assert!(repo::update(&app.db, id, now.update_dt, &fresh).await.unwrap());
}
