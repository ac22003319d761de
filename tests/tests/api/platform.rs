use api_tests::{spawn, spawn_with, Store};

/// The service's OpenAPI document, as a client generator reads it.
async fn openapi_document() -> serde_json::Value {
    let app = spawn(Store::Filesystem).await;
    let reply = app
        .send(app.client.get(format!("{}/api-docs/openapi.json", app.origin)))
        .await;
    assert_eq!(reply.status, 200);
    reply.body
}

#[tokio::test]
async fn health_reports_every_part() {
    let app = spawn(Store::S3).await;
    let reply = app.send(app.client.get(format!("{}/health", app.origin))).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.body["status"], "ok");
    for part in ["db", "storage", "queue"] {
        assert_eq!(reply.body[part], "ok", "{part}");
    }
}

#[tokio::test]
async fn multipart_forms_are_documented_with_the_field_names_the_handlers_read() {
    let doc = openapi_document().await;
    let fields = |path: &str| -> Vec<String> {
        let schema = &doc["paths"][path]["post"]["requestBody"]["content"]["multipart/form-data"]["schema"];
        let name = schema["$ref"]
            .as_str()
            .expect("a named form")
            .rsplit('/')
            .next()
            .unwrap();
        let mut names: Vec<String> = doc["components"]["schemas"][name]["properties"]
            .as_object()
            .expect("form properties")
            .keys()
            .cloned()
            .collect();
        names.sort();
        names
    };
    // What each handler reads from the form (`read_form` ... `text`, `number`, `take_files`).
    assert_eq!(
        fields("/api/document/upload/preview"),
        ["dedupAction", "dedupStrategy", "files", "ragId"]
    );
    assert_eq!(fields("/api/resource/upload"), ["bizId", "bizType", "file"]);
    assert_eq!(fields("/api/skill/upload"), ["file"]);
}

/// Request fields are `Option` so a missing one is a 400 naming it; the document must still
/// list the contract's required ones as required, or client generators make them optional.
#[tokio::test]
async fn the_openapi_document_marks_the_contracts_required_request_fields() {
    let doc = openapi_document().await;
    let required = |name: &str| -> Vec<String> {
        let mut fields: Vec<String> = doc["components"]["schemas"][name]["required"]
            .as_array()
            .unwrap_or_else(|| panic!("{name} lists no required fields"))
            .iter()
            .map(|f| f.as_str().expect("a field name").to_owned())
            .collect();
        fields.sort();
        fields
    };
    for (schema, fields) in [
        (
            "ExternalChatRequest",
            &["agentId", "content", "conversationId", "openId"][..],
        ),
        ("UploadRequest", &["content", "fileSize", "openId", "originalName"][..]),
        ("CreateUserRequest", &["password", "role", "username"][..]),
        ("NewChunkRequest", &["content", "documentId", "ragId"][..]),
        ("QaRequest", &["query", "ragId"][..]),
        ("SearchRequest", &["query", "ragId"][..]),
        ("MemorySearchRequest", &["query"][..]),
        ("StoreTestRequest", &["config", "type"][..]),
    ] {
        assert_eq!(required(schema), fields, "{schema}");
    }
    // The admin chat generates a conversationId when none is sent (docs/decisions.md).
    assert_eq!(required("ChatRequest"), ["content"]);
}

#[tokio::test]
async fn openapi_documents_every_route() {
    let app = spawn(Store::Filesystem).await;
    let reply = app
        .send(app.client.get(format!("{}/api-docs/openapi.json", app.origin)))
        .await;
    assert_eq!(reply.status, 200);
    let paths = reply.body["paths"].as_object().expect("paths");
    for (path, method) in [
        ("/api/user/login", "post"),
        ("/api/auth/refreshToken", "post"),
        ("/api/user", "get"),
        ("/api/user", "post"),
        ("/api/user/page/list", "get"),
        ("/api/user/{id}", "put"),
        ("/api/user/{id}/role", "put"),
        ("/api/user/{id}/password", "put"),
        ("/api/user/password", "put"),
        ("/api/user/authorize/code", "post"),
        ("/api/resource/upload", "post"),
        ("/api/resource/page", "get"),
        ("/api/resource/{id}/preview", "get"),
        ("/api/resource/{id}/download", "get"),
        ("/api/resource/{id}", "delete"),
        ("/api/resource/upload-url", "post"),
        ("/api/resource/upload/complete", "post"),
        ("/api/ai-model/providers", "get"),
        ("/api/ai-model/all-providers", "get"),
        ("/api/ai-model/provider/{id}", "get"),
        ("/api/ai-model/provider", "post"),
        ("/api/ai-model/provider/{id}", "put"),
        ("/api/ai-model/provider/{id}", "delete"),
        ("/api/ai-model/provider/{id}/enable", "put"),
        ("/api/ai-model/provider/{id}/disable", "put"),
        ("/api/ai-model/adapters", "get"),
        ("/api/ai-model/configs", "get"),
        ("/api/ai-model/config/{id}", "get"),
        ("/api/ai-model/config", "post"),
        ("/api/ai-model/config/{id}", "put"),
        ("/api/ai-model/config/{id}", "delete"),
        ("/api/ai-model/config/{id}/enable", "put"),
        ("/api/ai-model/config/{id}/disable", "put"),
        ("/api/ai-model/config/{id}/test", "post"),
        ("/api/ai-model/by-type/{modelType}", "get"),
        ("/api/ai-model/by-provider-type", "get"),
        ("/api/ai-model/default", "get"),
        ("/api/ai-model/default/{modelType}", "get"),
        ("/api/ai-model/switch-default/{modelId}", "put"),
        ("/api/ai-model/usage/stat/{modelId}", "get"),
        ("/api/ai-model/usage/user-stats", "get"),
        ("/api/ai-model/usage/global-stats", "get"),
        ("/api/rag/page", "get"),
        ("/api/rag", "post"),
        ("/api/rag/{id}", "get"),
        ("/api/rag/{id}", "put"),
        ("/api/rag/{id}", "delete"),
        ("/api/rag/{id}/config", "put"),
        ("/api/store-instance", "get"),
        ("/api/store-instance", "post"),
        ("/api/store-instance/page", "get"),
        ("/api/store-instance/{id}", "get"),
        ("/api/store-instance/{id}", "put"),
        ("/api/store-instance/{id}", "delete"),
        ("/api/store-instance/test", "post"),
        ("/api/document/page", "get"),
        ("/api/document/{id}", "get"),
        ("/api/document/{id}", "delete"),
        ("/api/document/upload/preview", "post"),
        ("/api/document/upload/commit", "post"),
        ("/api/document/upload/preview/{token}", "delete"),
        ("/api/document/import/url", "post"),
        ("/api/document/{id}/reprocess", "post"),
        ("/api/document/{id}/preview", "get"),
        ("/api/document/{id}/download", "get"),
        ("/api/document/{id}/images", "get"),
        ("/api/chunk/page", "get"),
        ("/api/chunk", "post"),
        ("/api/chunk/{id}", "put"),
        ("/api/chunk/{id}", "delete"),
        ("/api/rag/search", "post"),
        ("/api/rag/qa/stream", "post"),
        ("/api/open-api/rag/search", "post"),
        ("/api/open-api/rag/qa/stream", "post"),
    ] {
        assert!(
            paths.get(path).and_then(|p| p.get(method)).is_some(),
            "{method} {path} missing from the OpenAPI document"
        );
    }
    // The browsable page and every asset it loads come from the service itself (it must work
    // inside a VPC without internet), and it points at the service's own document.
    let page = app.send(app.client.get(format!("{}/api-docs", app.origin))).await;
    assert_eq!(page.status, 200);
    let html = String::from_utf8_lossy(&page.bytes).into_owned();
    assert!(!html.contains("://"), "external asset in the docs page: {html}");
    let assets: Vec<&str> = html
        .split(['"', '\''])
        .filter(|s| s.starts_with("./") && (s.ends_with(".js") || s.ends_with(".css")))
        .collect();
    assert!(assets.len() >= 3, "{assets:?}");
    for asset in assets {
        let got = app
            .send(app.client.get(format!("{}/api-docs/{}", app.origin, &asset[2..])))
            .await;
        assert_eq!(got.status, 200, "{asset}");
    }
    let init = app
        .send(
            app.client
                .get(format!("{}/api-docs/swagger-initializer.js", app.origin)),
        )
        .await;
    assert!(String::from_utf8_lossy(&init.bytes).contains("/api-docs/openapi.json"));
    let info = &reply.body["info"];
    assert!(info.get("contact").is_none() && info.get("license").is_none(), "{info}");
}

#[tokio::test]
async fn unknown_routes_and_request_ids() {
    let app = spawn(Store::Filesystem).await;
    let reply = app
        .send(app.client.get(app.url("/user")).header("x-request-id", "req-123"))
        .await;
    assert_eq!(reply.headers["x-request-id"], "req-123");
    // Without one, each request gets a fresh UUID.
    let id_of = |r: &api_tests::Reply| r.headers["x-request-id"].to_str().unwrap().to_owned();
    // So does one sent that could not be found again in the logs: too long, empty, not text.
    let long = "r".repeat(129);
    for unusable in [long.as_str(), "", "a b", "é"] {
        let reply = app
            .send(app.client.get(app.url("/user")).header("x-request-id", unusable))
            .await;
        assert!(uuid::Uuid::parse_str(&id_of(&reply)).is_ok(), "{unusable:?}");
    }
    let (a, b) = (
        id_of(&app.get("/user", None).await),
        id_of(&app.get("/user", None).await),
    );
    assert!(
        uuid::Uuid::parse_str(&a).is_ok() && uuid::Uuid::parse_str(&b).is_ok() && a != b,
        "{a} {b}"
    );
    // An unknown route answers 404 in the envelope, with a request id too.
    let unknown = app.get("/no-such-route", None).await;
    unknown.assert_error(404, 404, "no such route");
    assert!(uuid::Uuid::parse_str(&id_of(&unknown)).is_ok());
    // A known path with a method it does not take: 405 in the envelope, saying which it takes.
    let token = app.admin_token().await;
    let wrong = app.send(app.client.delete(app.url("/user/login"))).await;
    wrong.assert_error(405, 405, "does not take that method");
    assert_eq!(wrong.headers["allow"], "POST");
    app.post("/agent/market", Some(&token), &serde_json::json!({}))
        .await
        .assert_error(405, 405, "method");
    // Under the modules with the other envelope, the router's own answers use it too.
    app.get("/ai-model/no-such-route", Some(&token))
        .await
        .assert_status_error(404, 404, "no such route");
    app.get("/ai-model/provider", Some(&token))
        .await
        .assert_status_error(405, 405, "method");
    app.send(app.client.patch(app.url("/skill")).header("Svc-Auth", &token))
        .await
        .assert_status_error(405, 405, "method");
}

/// A rolled-back deployment (older code, newer schema) still starts.
#[tokio::test]
async fn the_service_starts_on_a_schema_with_migrations_it_does_not_know() {
    let app = spawn(Store::Filesystem).await;
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
         VALUES (99999999, 'from a newer release', TRUE, '\\x00', 1)",
    )
    .execute(&app.db)
    .await
    .unwrap();
    let pool = shared::db::connect(app.state.config()).await.expect("starts anyway");
    let users: i64 = sqlx::query_scalar("SELECT count(*) FROM users")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(users, 1);
}

/// A start on an up-to-date schema only reads it; a migration changed since it was applied is
/// still refused by name, not taken as applied.
#[tokio::test]
async fn a_migration_changed_since_it_was_applied_stops_the_start() {
    let app = spawn(Store::Filesystem).await;
    shared::db::connect(app.state.config())
        .await
        .expect("an up-to-date schema starts");
    sqlx::query(
        "UPDATE _sqlx_migrations SET checksum = '\\x00' WHERE version = (SELECT min(version) FROM _sqlx_migrations)",
    )
    .execute(&app.db)
    .await
    .unwrap();
    let refused = shared::db::connect(app.state.config()).await.unwrap_err().to_string();
    assert!(refused.contains("applying migrations failed"), "{refused}");
    assert!(refused.contains("modified"), "{refused}");
}

/// `make run` and the benchmarks connect the service to the stack's Postgres on its Unix socket
/// (a percent-encoded directory as the URL's host): that form must reach the database.
#[tokio::test]
async fn the_service_reaches_its_database_on_a_unix_socket() {
    let database = api_tests::on_unix_socket(&api_tests::fresh_database().await);
    assert!(database.contains("@%2F"), "{database}");
    let app = spawn_with(Store::Filesystem, &[("DATABASE_URL", &database)]).await;
    let over_socket: bool = sqlx::query_scalar("SELECT inet_server_addr() IS NULL")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert!(over_socket, "the service's pool connected over TCP");
    let token = app.admin_token().await;
    let me = app.get("/user", Some(&token)).await;
    assert_eq!(me.assert_ok()["username"], api_tests::ADMIN_USERNAME);
}

/// PostgreSQL cannot store a NUL character in text; every entry point refuses one by name
/// before anything is written.
#[tokio::test]
async fn nul_characters_are_refused_by_name_and_change_nothing() {
    let app = spawn(Store::Filesystem).await;
    let admin = app.admin_token().await;
    let t = Some(admin.as_str());
    let id = app.provider(&admin, "openai").await;
    let before = app.get(&format!("/ai-model/provider/{id}"), t).await;

    app.post(
        "/ai-model/provider",
        t,
        &serde_json::json!({ "providerName": "a\u{0}b", "providerKey": "nul" }),
    )
    .await
    .assert_status_error(400, 0, "providerName: must not contain NUL characters");
    app.put(
        &format!("/ai-model/provider/{id}"),
        t,
        &serde_json::json!({ "providerName": "renamed", "description": "x\u{0}" }),
    )
    .await
    .assert_status_error(400, 0, "description: must not contain NUL characters");
    app.get("/agent/page?keyword=a%00b", t)
        .await
        .assert_error(400, 0, "keyword: must not contain NUL characters");
    app.delete("/agent/1%00", t)
        .await
        .assert_error(400, 0, "must not contain NUL characters");

    app.upload_resource(&admin, "a.txt", b"hello".to_vec(), Some(("avatar", "x\u{0}")))
        .await
        .assert_error(400, 0, "bizId: must not contain NUL characters");

    assert_eq!(app.count("model_providers").await, 1);
    assert_eq!(app.count("resources").await, 0);
    let after = app.get(&format!("/ai-model/provider/{id}"), t).await;
    assert_eq!(after.assert_status_ok(), before.assert_status_ok());
}

/// Every property of the document has a schema a generated client can build, but for the few
/// that are free-form by nature: an external user's `extra`, a tool's `inputSchema` and a tool
/// call's `arguments` (whatever the tool takes), a search result's `metadata`.
#[tokio::test]
async fn every_property_of_the_api_document_has_a_schema_but_the_free_form_ones() {
    const FREE_FORM: &[&str] = &["extra", "inputSchema", "arguments", "metadata"];
    let doc = openapi_document().await;
    let mut untyped = vec![];
    for (name, schema) in doc["components"]["schemas"].as_object().expect("schemas") {
        for (prop, s) in schema["properties"].as_object().into_iter().flatten() {
            // Nullable fields come as oneOf [null, X] or a type list: look at the X.
            let inner = s["oneOf"]
                .as_array()
                .and_then(|alts| alts.iter().find(|a| a["type"] != "null"))
                .unwrap_or(s);
            let described = ["type", "$ref", "oneOf", "anyOf", "allOf", "items", "properties", "enum"]
                .iter()
                .any(|k| inner.get(*k).is_some());
            let bare_object = inner["type"] == "object"
                && inner.get("properties").is_none()
                && inner.get("additionalProperties").is_none();
            if (!described || bare_object) && !FREE_FORM.contains(&prop.as_str()) {
                untyped.push(format!("{name}.{prop}"));
            }
        }
    }
    assert!(untyped.is_empty(), "properties without a schema: {untyped:?}");
}

/// A JSON body is recognised whatever the case of its media type (RFC 9110: media types
/// compare case-insensitively); anything else is refused by name.
#[tokio::test]
async fn json_bodies_are_recognised_whatever_the_case_of_their_media_type() {
    let app = spawn(Store::Filesystem).await;
    let body = serde_json::json!({ "username": api_tests::ADMIN_USERNAME, "password": api_tests::ADMIN_PASSWORD });
    let login = |content_type: &'static str| {
        app.send(
            app.client
                .post(app.url("/user/login"))
                .header("Content-Type", content_type)
                .body(body.to_string()),
        )
    };
    let reply = login("APPLICATION/JSON; charset=utf-8").await;
    assert!(reply.assert_ok()["token"].is_string());
    login("text/plain")
        .await
        .assert_error(400, 0, "request body must be JSON");
}
