use api_tests::model_server::{ModelServer, GOOD_KEY};
use api_tests::{spawn, spawn_with, Store, TestApp};
use serde_json::{json, Value};

async fn setup() -> (TestApp, ModelServer, String) {
    let app = spawn(Store::Filesystem).await;
    let server = ModelServer::start().await;
    let admin = app.admin_token().await;
    (app, server, admin)
}

#[tokio::test]
async fn providers_lifecycle() {
    let (app, _server, admin) = setup().await;
    let t = Some(admin.as_str());
    let id = app.provider(&admin, "openai").await;
    let other = app.provider(&admin, "local").await;

    let dup = app
        .post(
            "/ai-model/provider",
            t,
            &json!({ "providerName": "x", "providerKey": "openai" }),
        )
        .await;
    dup.assert_status_error(400, 0, "providerKey is already used");
    app.post("/ai-model/provider", t, &json!({ "providerKey": "k" }))
        .await
        .assert_status_error(400, 0, "providerName is required");
    app.post("/ai-model/provider", t, &json!({ "providerName": "n" }))
        .await
        .assert_status_error(400, 0, "providerKey is required");
    app.post(
        "/ai-model/provider",
        t,
        &json!({ "providerName": "n", "providerKey": "bad key" }),
    )
    .await
    .assert_status_error(400, 0, "providerKey may contain");
    for (body, refusal) in [
        (
            json!({ "providerName": "n", "providerKey": "k", "iconUrl": "javascript:alert(1)" }),
            "iconUrl must be an http(s) URL",
        ),
        (
            json!({ "providerName": "n\u{1b}[2J", "providerKey": "k" }),
            "providerName must not contain control characters",
        ),
    ] {
        app.post("/ai-model/provider", t, &body)
            .await
            .assert_status_error(400, 0, refusal);
    }
    for icon in [
        "https://cdn.example.com/openai.svg",
        "/icons/openai.svg",
        "data:image/png;base64,AAAA",
    ] {
        let body = json!({ "iconUrl": icon });
        app.put(&format!("/ai-model/provider/{other}"), t, &body)
            .await
            .assert_status_ok();
    }
    assert_eq!(app.count("model_providers").await, 2);

    let (_, user) = app.regular_user("ursula").await;
    app.post(
        "/ai-model/provider",
        Some(&user),
        &json!({ "providerName": "n", "providerKey": "u" }),
    )
    .await
    .assert_status_error(403, 403, "administrator");
    app.get("/ai-model/providers", None)
        .await
        .assert_status_error(401, 401, "log in");

    let one = app.get(&format!("/ai-model/provider/{id}"), Some(&user)).await;
    let p = one.assert_status_ok();
    assert_eq!(
        (p["providerKey"].as_str(), p["isEnabled"].as_bool()),
        (Some("openai"), Some(true))
    );
    assert_eq!(p["createdDt"].as_str().unwrap().len(), 19);

    app.put(&format!("/ai-model/provider/{id}/disable"), t, &json!({}))
        .await
        .assert_status_ok();
    let enabled = app.get("/ai-model/providers", t).await;
    let keys = |v: &serde_json::Value| {
        v.as_array()
            .unwrap()
            .iter()
            .map(|p| p["providerKey"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(keys(enabled.assert_status_ok()), vec!["local"]);
    let all = app.get("/ai-model/all-providers", t).await;
    assert_eq!(keys(all.assert_status_ok()), vec!["openai", "local"]);
    app.put(&format!("/ai-model/provider/{id}/enable"), t, &json!({}))
        .await
        .assert_status_ok();
    assert_eq!(
        keys(app.get("/ai-model/providers", t).await.assert_status_ok()).len(),
        2
    );

    app.put(
        &format!("/ai-model/provider/{id}"),
        t,
        &json!({ "description": "OpenAI", "providerKey": "local" }),
    )
    .await
    .assert_status_error(400, 0, "already used");
    app.put(
        &format!("/ai-model/provider/{id}"),
        t,
        &json!({ "description": "OpenAI" }),
    )
    .await
    .assert_status_ok();
    assert_eq!(
        app.get(&format!("/ai-model/provider/{id}"), t).await.assert_status_ok()["description"],
        "OpenAI"
    );
    // A blank one clears it: null, as on creation, never "".
    app.put(&format!("/ai-model/provider/{id}"), t, &json!({ "description": "  " }))
        .await
        .assert_status_ok();
    let cleared = app.get(&format!("/ai-model/provider/{id}"), t).await;
    assert_eq!(cleared.assert_status_ok()["description"], Value::Null);
    app.put("/ai-model/provider/9999", t, &json!({ "description": "x" }))
        .await
        .assert_status_error(404, 404, "provider not found");

    app.model(&admin, other, "CHAT", "chat-echo", "http://127.0.0.1:9/v1", json!({}))
        .await;
    app.delete(&format!("/ai-model/provider/{other}"), t)
        .await
        .assert_status_error(400, 0, "still has 1 model configs");
    app.delete(&format!("/ai-model/provider/{id}"), t)
        .await
        .assert_status_ok();
    app.get(&format!("/ai-model/provider/{id}"), t)
        .await
        .assert_status_error(404, 404, "provider not found");
    assert_eq!(app.count("model_providers").await, 1);
}

#[tokio::test]
async fn configs_keys_are_encrypted_masked_and_kept() {
    let (app, server, admin) = setup().await;
    let t = Some(admin.as_str());
    let p = app.provider(&admin, "scripted").await;
    let id = app
        .model(
            &admin,
            p,
            "CHAT",
            "chat-echo",
            &server.base_url,
            json!({ "configJson": { "temperature": 0.2, "capabilities": ["vision"] } }),
        )
        .await;

    let raw: String = sqlx::query_scalar("SELECT api_key_enc FROM model_configs WHERE id = $1")
        .bind(id)
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert!(
        raw.starts_with("v1:") && !raw.contains(GOOD_KEY),
        "stored encrypted: {raw}"
    );

    let got = app.get(&format!("/ai-model/config/{id}"), t).await;
    let c = got.assert_status_ok().clone();
    assert_eq!(c["apiKey"], "****1234");
    assert_eq!(
        (c["modelType"].as_str(), c["adapterKey"].as_str(), c["scope"].as_str()),
        (Some("CHAT"), Some("generic-compatible"), Some("GLOBAL"))
    );
    assert_eq!(c["providerName"], "Provider scripted");
    assert_eq!(c["configJson"]["capabilities"][0], "vision");
    let created = c["createdDt"].as_str().unwrap();
    assert_eq!((created.len(), &created[10..11]), (19, "T"), "ISO local form");

    // Sending the masked key back keeps the real key: the probe still authenticates.
    let update = json!({ "apiKey": c["apiKey"], "modelName": "Echo", "description": "renamed" });
    app.put(&format!("/ai-model/config/{id}"), t, &update)
        .await
        .assert_status_ok();
    let probe = app.post(&format!("/ai-model/config/{id}/test"), t, &json!({})).await;
    assert_eq!(probe.assert_status_ok()["success"], true, "{:?}", probe.body);
    // Regular users' calls ask for the quota's reserve, which a small model refuses: said.
    let said = probe.body["data"]["message"].as_str().unwrap_or_default().to_owned();
    assert!(
        said.contains("up to 8192 answer tokens") && said.contains("configJson.maxTokens"),
        "{said}"
    );
    // A new key replaces it.
    app.put(
        &format!("/ai-model/config/{id}"),
        t,
        &json!({ "apiKey": "sk-wrong-key-0000" }),
    )
    .await
    .assert_status_ok();
    let probe = app.post(&format!("/ai-model/config/{id}/test"), t, &json!({})).await;
    let r = probe.assert_status_ok();
    assert_eq!(r["success"], false);
    assert!(r["message"].as_str().unwrap().contains("API key"), "{r}");
    assert!(r["responseTimeMs"].as_i64().is_some());
    assert_eq!(
        app.get(&format!("/ai-model/config/{id}"), t).await.assert_status_ok()["apiKey"],
        "****0000"
    );
    // A blank description clears it: null, never "".
    app.put(&format!("/ai-model/config/{id}"), t, &json!({ "description": " " }))
        .await
        .assert_status_ok();
    let cleared = app.get(&format!("/ai-model/config/{id}"), t).await;
    assert_eq!(cleared.assert_status_ok()["description"], Value::Null);
}

#[tokio::test]
async fn config_validation_names_the_field_and_writes_nothing() {
    let (app, server, admin) = setup().await;
    let t = Some(admin.as_str());
    let p = app.provider(&admin, "scripted").await;
    let ok = json!({ "providerId": p, "modelName": "m", "modelKey": "k", "modelType": "CHAT", "apiKey": "sk-123456789", "apiEndpoint": server.base_url });
    let with = |k: &str, v: serde_json::Value| {
        let mut b = ok.clone();
        b[k] = v;
        b
    };
    let without = |k: &str| {
        let mut b = ok.clone();
        b.as_object_mut().unwrap().remove(k);
        b
    };
    for (body, needle) in [
        (without("providerId"), "providerId is required"),
        (without("modelName"), "modelName is required"),
        (without("modelKey"), "modelKey is required"),
        (without("modelType"), "modelType is required"),
        (without("apiKey"), "apiKey is required"),
        (without("apiEndpoint"), "apiEndpoint is required"),
        (
            with("modelType", json!("VIDEO")),
            "modelType must be CHAT, EMBEDDING or RERANKER",
        ),
        (
            with("apiEndpoint", json!("ftp://x")),
            "apiEndpoint must be an http(s) URL",
        ),
        (
            with("apiEndpoint", json!("not a url")),
            "apiEndpoint must be an http(s) URL",
        ),
        (
            with("apiEndpoint", json!("http://bob:s3cret@127.0.0.1:9/v1")),
            "apiEndpoint must not hold credentials",
        ),
        (
            with("apiEndpoint", json!(format!("http://127.0.0.1:9/{}", "v".repeat(2100)))),
            "apiEndpoint must be 1 to 2048",
        ),
        (
            with("configJson", json!({ "capabilities": ["x".repeat(17 * 1024)] })),
            "configJson may hold at most 16384 bytes of JSON",
        ),
        (
            with("providerId", json!(999)),
            "providerId: provider 999 does not exist",
        ),
        (
            with("adapterKey", json!("generic-rerank")),
            "adapterKey generic-rerank does not support CHAT",
        ),
        (with("scope", json!("TEAM")), "scope must be GLOBAL or PERSONAL"),
        (
            with("apiKey", json!("sk-12345\nX-Injected: 1")),
            "apiKey must be visible ASCII",
        ),
        (with("apiKey", json!("k".repeat(5000))), "apiKey must be"),
        (with("configJson", json!([1])), "configJson must be a JSON object"),
        (
            with("configJson", json!({ "temperature": 5 })),
            "configJson.temperature must be",
        ),
        (
            with("configJson", json!({ "maxTokens": -1 })),
            "configJson.maxTokens must be",
        ),
        (
            with("configJson", json!({ "capabilities": "vision" })),
            "configJson.capabilities must be",
        ),
        (with("apiKey", json!("sk-a****wxyz")), "apiKey must be the real key"),
        (with("providerId", json!("one")), "providerId: invalid type"),
    ] {
        app.post("/ai-model/config", t, &body)
            .await
            .assert_status_error(400, 0, needle);
    }
    assert_eq!(app.count("model_configs").await, 0);
    app.get("/ai-model/config/abc", t)
        .await
        .assert_status_error(400, 0, "invalid path parameter");
    app.get("/ai-model/config/12345", t)
        .await
        .assert_status_error(404, 404, "model config not found");
    app.post("/ai-model/config/12345/test", t, &json!({}))
        .await
        .assert_status_error(404, 404, "model config not found");
}

#[tokio::test]
async fn paging_filters_adapters_and_lists() {
    let (app, server, admin) = setup().await;
    let t = Some(admin.as_str());
    let a = app.provider(&admin, "alpha").await;
    let b = app.provider(&admin, "beta").await;
    let url = server.base_url.as_str();
    app.model(&admin, a, "CHAT", "chat-echo", url, json!({})).await;
    app.model(&admin, a, "EMBEDDING", "emb-8", url, json!({})).await;
    let disabled = app
        .model(&admin, b, "CHAT", "chat-think", url, json!({ "isEnabled": false }))
        .await;
    app.model(&admin, b, "RERANKER", "rerank", url, json!({})).await;

    let page = app.get("/ai-model/configs?pageNum=1&pageSize=3", t).await;
    assert_eq!(page.assert_status_ok().as_array().unwrap().len(), 3);
    assert_eq!(
        (
            page.body["page"].as_i64(),
            page.body["size"].as_i64(),
            page.body["total"].as_i64()
        ),
        (Some(1), Some(3), Some(4))
    );
    let second = app.get("/ai-model/configs?pageNum=2&pageSize=3", t).await;
    assert_eq!(second.assert_status_ok().as_array().unwrap().len(), 1);
    let chats = app.get("/ai-model/configs?modelType=chat&providerKey=beta", t).await;
    assert_eq!(chats.body["total"], 1);
    assert_eq!(app.get("/ai-model/configs?scope=PERSONAL", t).await.body["total"], 0);
    app.get("/ai-model/configs?modelType=x", t)
        .await
        .assert_status_error(400, 0, "modelType must be");
    app.get("/ai-model/configs?pageNum=x", t)
        .await
        .assert_status_error(400, 0, "pageNum");

    let adapters = app.get("/ai-model/adapters?modelType=RERANKER", t).await;
    let ad = adapters.assert_status_ok()[0].clone();
    assert_eq!(
        (
            ad["adapterKey"].as_str(),
            ad["modelType"].as_str(),
            ad["isDefault"].as_bool()
        ),
        (Some("generic-rerank"), Some("RERANKER"), Some(true))
    );
    assert_eq!(
        app.get("/ai-model/adapters?modelType=CHAT", t).await.assert_status_ok()[0]["adapterKey"],
        "generic-compatible"
    );
    app.get("/ai-model/adapters", t)
        .await
        .assert_status_error(400, 0, "modelType is required");

    let by_type = app.get("/ai-model/by-type/CHAT", t).await;
    let items = by_type.assert_status_ok().as_array().unwrap().clone();
    assert_eq!(items.len(), 1, "disabled models are not offered");
    assert_eq!(items[0]["modelKey"], "chat-echo");
    for key in ["id", "providerId", "modelName", "modelKey", "modelType", "isEnabled"] {
        assert!(items[0].get(key).is_some(), "{key}");
    }
    app.put(&format!("/ai-model/config/{disabled}/enable"), t, &json!({}))
        .await
        .assert_status_ok();
    assert_eq!(
        app.get("/ai-model/by-provider-type?providerKey=beta&modelType=CHAT", t)
            .await
            .assert_status_ok()
            .as_array()
            .unwrap()
            .len(),
        1
    );
    app.put(&format!("/ai-model/config/{disabled}/disable"), t, &json!({}))
        .await
        .assert_status_ok();
    assert_eq!(
        app.get("/ai-model/by-provider-type?providerKey=beta&modelType=CHAT", t)
            .await
            .assert_status_ok()
            .as_array()
            .unwrap()
            .len(),
        0
    );
    app.get("/ai-model/by-provider-type?modelType=CHAT", t)
        .await
        .assert_status_error(400, 0, "providerKey is required");
    app.get("/ai-model/by-type/IMAGE", t)
        .await
        .assert_status_error(400, 0, "modelType must be");
    // A disabled provider hides its models too.
    app.put(&format!("/ai-model/provider/{a}/disable"), t, &json!({}))
        .await
        .assert_status_ok();
    assert_eq!(
        app.get("/ai-model/by-type/CHAT", t)
            .await
            .assert_status_ok()
            .as_array()
            .unwrap()
            .len(),
        0
    );
}

#[tokio::test]
async fn switch_default_leaves_exactly_one() {
    let (app, server, admin) = setup().await;
    let t = Some(admin.as_str());
    let p = app.provider(&admin, "scripted").await;
    let url = server.base_url.as_str();
    let a = app
        .model(&admin, p, "CHAT", "chat-echo", url, json!({ "isDefault": true }))
        .await;
    let b = app.model(&admin, p, "CHAT", "chat-think", url, json!({})).await;
    let e = app
        .model(&admin, p, "EMBEDDING", "emb-8", url, json!({ "isDefault": true }))
        .await;
    let defaults = |app: &TestApp| {
        let db = app.db.clone();
        async move {
            sqlx::query_scalar::<_, i64>("SELECT id FROM model_configs WHERE is_default ORDER BY id")
                .fetch_all(&db)
                .await
                .unwrap()
        }
    };
    assert_eq!(defaults(&app).await, vec![a, e]);
    let switched = app.put(&format!("/ai-model/switch-default/{b}"), t, &json!({})).await;
    assert_eq!(switched.assert_status_ok(), &json!(true));
    assert_eq!(defaults(&app).await, vec![b, e]);
    app.put(&format!("/ai-model/switch-default/{b}"), t, &json!({}))
        .await
        .assert_status_ok();
    assert_eq!(defaults(&app).await, vec![b, e], "idempotent");

    let all = app.get("/ai-model/default", t).await;
    let d = all.assert_status_ok();
    assert_eq!(
        (d["CHAT"]["id"].as_i64(), d["EMBEDDING"]["id"].as_i64()),
        (Some(b), Some(e))
    );
    assert!(d["RERANKER"].is_null());
    assert_eq!(app.get("/ai-model/default/CHAT", t).await.assert_status_ok()["id"], b);
    assert!(app
        .get("/ai-model/default/RERANKER", t)
        .await
        .assert_status_ok()
        .is_null());

    // Concurrent switches still leave one default.
    let (path_a, path_b, empty) = (
        format!("/ai-model/switch-default/{a}"),
        format!("/ai-model/switch-default/{b}"),
        json!({}),
    );
    let (r1, r2) = tokio::join!(app.put(&path_a, t, &empty), app.put(&path_b, t, &empty));
    r1.assert_status_ok();
    r2.assert_status_ok();
    let d = defaults(&app).await;
    assert_eq!(d.len(), 2);
    assert!(d.contains(&e));

    app.put("/ai-model/switch-default/999", t, &json!({}))
        .await
        .assert_status_error(404, 404, "not found");
    app.put(&format!("/ai-model/config/{a}/disable"), t, &json!({}))
        .await
        .assert_status_ok();
    app.put(&format!("/ai-model/switch-default/{a}"), t, &json!({}))
        .await
        .assert_status_error(400, 0, "disabled model");
    let (_, user) = app.regular_user("nina").await;
    app.put(&format!("/ai-model/switch-default/{b}"), Some(&user), &json!({}))
        .await
        .assert_status_error(403, 403, "administrator");
    // Nor one of a disabled provider (chat would not take it); and such a config, or a disabled
    // one, is tested by administrators only, not on their key by anyone.
    let q = app.provider(&admin, "switched-off").await;
    let off = app.model(&admin, q, "CHAT", "chat-echo", url, json!({})).await;
    app.put(&format!("/ai-model/provider/{q}/disable"), t, &json!({}))
        .await
        .assert_status_ok();
    let before = defaults(&app).await;
    app.put(&format!("/ai-model/switch-default/{off}"), t, &json!({}))
        .await
        .assert_status_error(400, 0, "a model of a disabled provider cannot be the default");
    app.put(&format!("/ai-model/config/{off}"), t, &json!({ "isDefault": true }))
        .await
        .assert_status_error(400, 0, "isDefault: only an enabled GLOBAL model of an enabled provider");
    assert_eq!(defaults(&app).await, before);
    let asked = server.requests().len();
    for disabled in [off, a] {
        app.post(&format!("/ai-model/config/{disabled}/test"), Some(&user), &json!({}))
            .await
            .assert_status_error(400, 0, "is disabled (or its provider is)");
    }
    assert_eq!(server.requests().len(), asked, "no call on the administrator's key");
    let tested = app.post(&format!("/ai-model/config/{off}/test"), t, &json!({})).await;
    assert_eq!(tested.assert_status_ok()["success"], true);

    // A default whose type changes leaves the old type without a default, and is the new
    // type's only when asked (then in place of the one there was).
    app.put(&format!("/ai-model/switch-default/{b}"), t, &json!({}))
        .await
        .assert_status_ok();
    let config = format!("/ai-model/config/{b}");
    app.put(&config, t, &json!({ "modelType": "EMBEDDING" }))
        .await
        .assert_status_ok();
    assert_eq!(defaults(&app).await, vec![e]);
    app.put(&config, t, &json!({ "modelType": "CHAT", "isDefault": true }))
        .await
        .assert_status_ok();
    assert_eq!(defaults(&app).await, vec![b, e]);
    app.put(&config, t, &json!({ "modelType": "EMBEDDING", "isDefault": true }))
        .await
        .assert_status_ok();
    assert_eq!(defaults(&app).await, vec![b]);
    let d = app.get("/ai-model/default", t).await;
    assert_eq!(d.assert_status_ok()["EMBEDDING"]["id"], b);
    app.put(&config, t, &json!({ "modelName": "n".repeat(201) }))
        .await
        .assert_status_error(400, 0, "modelName");
}

#[tokio::test]
async fn personal_configs_belong_to_their_owner() {
    let (app, server, admin) = setup().await;
    let p = app.provider(&admin, "scripted").await;
    let (alice_id, alice) = app.regular_user("alice").await;
    let (_, bob) = app.regular_user("bob").await;
    let url = server.base_url.as_str();
    let global = app.model(&admin, p, "CHAT", "chat-echo", url, json!({})).await;
    let mine = app.model(&alice, p, "CHAT", "chat-think", url, json!({})).await;
    let c = app.get(&format!("/ai-model/config/{mine}"), Some(&alice)).await;
    assert_eq!(
        c.assert_status_ok()["scope"],
        "PERSONAL",
        "regular users default to PERSONAL"
    );

    let body = json!({ "providerId": p, "modelName": "m", "modelKey": "k", "modelType": "CHAT", "apiKey": "sk-123456789",
        "apiEndpoint": url, "scope": "GLOBAL" });
    app.post("/ai-model/config", Some(&alice), &body)
        .await
        .assert_status_error(403, 403, "only administrators");

    app.get(&format!("/ai-model/config/{mine}"), Some(&bob))
        .await
        .assert_status_error(404, 404, "not found");
    assert_eq!(
        app.get("/ai-model/configs", Some(&bob)).await.body["total"],
        1,
        "bob sees only the GLOBAL one"
    );
    assert_eq!(app.get("/ai-model/configs", Some(&alice)).await.body["total"], 2);
    assert_eq!(app.get("/ai-model/configs", Some(&admin)).await.body["total"], 2);
    app.put(
        &format!("/ai-model/config/{mine}"),
        Some(&bob),
        &json!({ "modelName": "x" }),
    )
    .await
    .assert_status_error(404, 404, "not found");
    app.delete(&format!("/ai-model/config/{mine}"), Some(&bob))
        .await
        .assert_status_error(404, 404, "not found");
    app.put(
        &format!("/ai-model/config/{global}"),
        Some(&alice),
        &json!({ "modelName": "x" }),
    )
    .await
    .assert_status_error(403, 403, "only administrators");
    app.put(&format!("/ai-model/config/{global}/disable"), Some(&alice), &json!({}))
        .await
        .assert_status_error(403, 403, "only administrators");
    app.put(
        &format!("/ai-model/config/{mine}"),
        Some(&alice),
        &json!({ "scope": "GLOBAL" }),
    )
    .await
    .assert_status_error(403, 403, "only administrators");
    app.put(
        &format!("/ai-model/config/{mine}"),
        Some(&alice),
        &json!({ "isDefault": true }),
    )
    .await
    .assert_status_error(403, 403, "administrator");
    // Her key goes where she says: an administrator pointing her config elsewhere sends a key
    // of their own; she may move it herself.
    let elsewhere = format!("{url}/elsewhere");
    let config = format!("/ai-model/config/{mine}");
    app.put(&config, Some(&admin), &json!({ "apiEndpoint": elsewhere }))
        .await
        .assert_status_error(400, 0, "apiKey: send the key again to change apiEndpoint");
    app.put(
        &config,
        Some(&admin),
        &json!({ "apiEndpoint": elsewhere, "apiKey": "****7890" }),
    )
    .await
    .assert_status_error(400, 0, "apiKey: send the key again");
    app.put(
        &config,
        Some(&admin),
        &json!({ "apiEndpoint": elsewhere, "apiKey": "sk-admins-own-key" }),
    )
    .await
    .assert_status_ok();
    // The key is his now: she may not send it elsewhere either, but with a key of her own.
    app.put(&config, Some(&alice), &json!({ "apiEndpoint": url }))
        .await
        .assert_status_error(
            400,
            0,
            "apiKey: send the key again to change apiEndpoint; the stored key is not yours",
        );
    app.put(
        &config,
        Some(&alice),
        &json!({ "apiEndpoint": url, "apiKey": "sk-alices-key-2" }),
    )
    .await
    .assert_status_ok();
    app.put(&config, Some(&alice), &json!({ "apiEndpoint": elsewhere }))
        .await
        .assert_status_ok();
    // Nor does her key serve everyone: made GLOBAL only with a key of the administrator's.
    app.put(&config, Some(&admin), &json!({ "scope": "GLOBAL" }))
        .await
        .assert_status_error(400, 0, "apiKey: send a key of your own to make this config GLOBAL");
    let (scope, setter): (String, i64) = sqlx::query_as("SELECT scope, key_set_by FROM model_configs WHERE id = $1")
        .bind(mine)
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!((scope.as_str(), setter), ("PERSONAL", alice_id));
    let name: String = sqlx::query_scalar("SELECT model_name FROM model_configs WHERE id = $1")
        .bind(mine)
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(name, "chat-think model", "nothing changed");

    app.put(
        &format!("/ai-model/config/{mine}"),
        Some(&alice),
        &json!({ "modelName": "Mine" }),
    )
    .await
    .assert_status_ok();
    app.delete(&format!("/ai-model/config/{mine}"), Some(&alice))
        .await
        .assert_status_ok();
    assert_eq!(app.count("model_configs").await, 1);
}

/// An endpoint that takes connections and never answers.
async fn silent_endpoint() -> String {
    format!("http://{}/v1", api_tests::silent_listener().await)
}

/// A config's own timeout and retries are a chat's (60 s, three tries): the test stops at its
/// own limit and says so, where API Gateway would have answered 504 after 29 s.
#[tokio::test]
async fn the_connectivity_test_answers_within_its_own_time_limit() {
    let app = spawn_with(Store::Filesystem, &[("MODEL_TEST_TIMEOUT_SECS", "1")]).await;
    let admin = app.admin_token().await;
    let p = app.provider(&admin, "scripted").await;
    let id = app
        .model(&admin, p, "CHAT", "chat-echo", &silent_endpoint().await, json!({}))
        .await;
    let started = std::time::Instant::now();
    let r = app
        .post(&format!("/ai-model/config/{id}/test"), Some(&admin), &json!({}))
        .await;
    let r = r.assert_status_ok();
    assert_eq!(r["success"], false, "{r}");
    assert!(
        r["message"]
            .as_str()
            .unwrap()
            .contains("timed out: no answer within 1 s, retries included"),
        "{r}"
    );
    let took = r["responseTimeMs"].as_i64().unwrap();
    // Under API Gateway's 29 s, not the config's three tries of 60 s; a busy machine may add
    // seconds to the 1 s limit.
    assert!((1000..29_000).contains(&took), "{took} ms");
    assert!(started.elapsed() < std::time::Duration::from_secs(29));
    // A real call, recorded as every test is: failed, and charged the prompt it was sent, as
    // every call cut at its time limit is (the endpoint may be at work on it still).
    let recorded: Vec<(String, Option<String>, i64)> = sqlx::query_as(
        "SELECT call_kind, error, prompt_tokens + completion_tokens FROM model_usage WHERE model_id = $1",
    )
    .bind(id)
    .fetch_all(&app.db)
    .await
    .unwrap();
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert!(
        recorded[0].1.as_deref().is_some_and(|e| e.contains("timed out")),
        "{recorded:?}"
    );
    assert_eq!(recorded[0].0, "test");
    assert!(recorded[0].2 > 0, "{recorded:?}");
}

/// An endpoint that reports no usage is charged an estimate, as a stream is: taken as 0, a
/// buffered call was free.
#[tokio::test]
async fn a_call_whose_endpoint_reports_no_usage_is_charged_an_estimate() {
    let (app, server, admin) = setup().await;
    let p = app.provider(&admin, "scripted").await;
    let id = app
        .model(&admin, p, "CHAT", "chat-no-usage", &server.base_url, json!({}))
        .await;
    let r = app
        .post(&format!("/ai-model/config/{id}/test"), Some(&admin), &json!({}))
        .await;
    assert_eq!(r.assert_status_ok()["success"], true);
    let (prompt, completion): (i64, i64) =
        sqlx::query_as("SELECT prompt_tokens, completion_tokens FROM model_usage WHERE model_id = $1")
            .bind(id)
            .fetch_one(&app.db)
            .await
            .unwrap();
    // "Hello" with a message's framing (5 + 8 characters) and "You said: Hello" (15), at four
    // characters a token.
    assert_eq!((prompt, completion), (4, 4));
}

/// The same for an embedding endpoint that reports no usage (some self-hosted servers): its
/// calls were free, every document, chunk edit and search of a base on it.
#[tokio::test]
async fn an_embedding_whose_endpoint_reports_no_usage_is_charged_an_estimate() {
    let (app, server, admin) = setup().await;
    let p = app.provider(&admin, "scripted").await;
    let id = app
        .model(&admin, p, "EMBEDDING", "emb-8-no-usage", &server.base_url, json!({}))
        .await;
    let r = app
        .post(&format!("/ai-model/config/{id}/test"), Some(&admin), &json!({}))
        .await;
    assert_eq!(r.assert_status_ok()["success"], true);
    let prompt: i64 = sqlx::query_scalar("SELECT prompt_tokens FROM model_usage WHERE model_id = $1")
        .bind(id)
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert!(prompt > 0, "charged {prompt}");
}

#[tokio::test]
async fn connectivity_probe_per_type_and_failures() {
    let (app, server, admin) = setup().await;
    let t = Some(admin.as_str());
    let p = app.provider(&admin, "scripted").await;
    let url = server.base_url.as_str();
    let probe = |id: i64| {
        let app = &app;
        async move {
            app.post(&format!("/ai-model/config/{id}/test"), t, &json!({}))
                .await
                .assert_status_ok()
                .clone()
        }
    };
    let chat = app.model(&admin, p, "CHAT", "chat-echo", url, json!({})).await;
    let r = probe(chat).await;
    assert_eq!(r["success"], true, "{r}");
    assert!(r["message"].as_str().unwrap().contains("You said: Hello"), "{r}");
    let emb = app.model(&admin, p, "EMBEDDING", "emb-8", url, json!({})).await;
    let r = probe(emb).await;
    assert!(
        r["success"] == true && r["message"].as_str().unwrap().contains("8-dimensional"),
        "{r}"
    );
    let rr = app.model(&admin, p, "RERANKER", "rerank", url, json!({})).await;
    let r = probe(rr).await;
    assert!(
        r["success"] == true && r["message"].as_str().unwrap().contains("scored the test document"),
        "{r}"
    );
    let sent = server.requests();
    let rerank_req = sent.iter().find(|r| r["model"] == "rerank").unwrap();
    assert_eq!(
        (
            rerank_req["top_n"].as_u64(),
            rerank_req["documents"].as_array().map(Vec::len)
        ),
        (Some(1), Some(1))
    );

    // Each failure is status 1 with success=false and a message that says what to fix.
    let no_retry = json!({ "configJson": { "maxRetries": 0 } });
    for (kind, key, endpoint, extra, needle) in [
        ("CHAT", "gpt-nope", url, json!({}), "does not exist"),
        (
            "EMBEDDING",
            "emb-8",
            "http://127.0.0.1:9/v1",
            no_retry.clone(),
            "cannot be reached",
        ),
        (
            "CHAT",
            "chat-echo",
            "http://no-such-host.invalid/v1",
            no_retry.clone(),
            "cannot be reached",
        ),
        (
            "CHAT",
            "chat-500",
            url,
            json!({ "configJson": { "maxRetries": 1 } }),
            "HTTP 500",
        ),
    ] {
        let id = app.model(&admin, p, kind, key, endpoint, extra).await;
        let r = probe(id).await;
        assert!(
            r["success"] == false && r["message"].as_str().unwrap().contains(needle),
            "{key} at {endpoint}: {r}"
        );
    }
    let timeout = app
        .model(
            &admin,
            p,
            "CHAT",
            "chat-echo",
            &silent_endpoint().await,
            json!({ "configJson": { "timeoutSecs": 1, "maxRetries": 0 } }),
        )
        .await;
    let r = probe(timeout).await;
    assert!(
        r["success"] == false && r["message"].as_str().unwrap().contains("timed out"),
        "{r}"
    );
    assert!(r["responseTimeMs"].as_i64().unwrap() >= 1000);
}

#[tokio::test]
async fn usage_stats_add_up() {
    let (app, server, admin) = setup().await;
    let t = Some(admin.as_str());
    let p = app.provider(&admin, "scripted").await;
    let url = server.base_url.as_str();
    let id = app
        .model(
            &admin,
            p,
            "CHAT",
            "chat-echo",
            url,
            json!({ "configJson": { "inputPricePer1k": 1.0, "outputPricePer1k": 2.0 } }),
        )
        .await;
    for _ in 0..3 {
        assert_eq!(
            app.post(&format!("/ai-model/config/{id}/test"), t, &json!({}))
                .await
                .assert_status_ok()["success"],
            true
        );
    }
    app.put(
        &format!("/ai-model/config/{id}"),
        t,
        &json!({ "apiKey": "sk-broken-key-9999" }),
    )
    .await
    .assert_status_ok();
    for _ in 0..2 {
        assert_eq!(
            app.post(&format!("/ai-model/config/{id}/test"), t, &json!({}))
                .await
                .assert_status_ok()["success"],
            false
        );
    }
    let stat = app.get(&format!("/ai-model/usage/stat/{id}"), t).await;
    let s = stat.assert_status_ok().clone();
    assert_eq!(
        (
            s["totalCalls"].as_i64(),
            s["successCalls"].as_i64(),
            s["failedCalls"].as_i64()
        ),
        (Some(5), Some(3), Some(2))
    );
    assert!((s["successRate"].as_f64().unwrap() - 0.6).abs() < 1e-9);
    let (prompt, completion): (i64, i64) = sqlx::query_as(
        "SELECT sum(prompt_tokens)::bigint, sum(completion_tokens)::bigint FROM model_usage WHERE model_id = $1 AND success",
    )
    .bind(id)
    .fetch_one(&app.db)
    .await
    .unwrap();
    assert!(prompt > 0 && completion > 0);
    assert_eq!(s["totalTokensUsed"].as_i64(), Some(prompt + completion));
    let cost = prompt as f64 / 1000.0 + completion as f64 * 2.0 / 1000.0;
    assert!((s["totalCost"].as_f64().unwrap() - cost).abs() < 1e-9);
    assert!(s["avgResponseTime"].as_f64().unwrap() >= 0.0);
    assert_eq!(
        (s["modelName"].as_str(), s["providerName"].as_str()),
        (Some("chat-echo model"), Some("Provider scripted"))
    );
    // Renamed and moved to another provider, the config is shown as it is now (its calls
    // were recorded under the old names), the provider's id and name from one provider.
    let other = app.provider(&admin, "other").await;
    app.put(
        &format!("/ai-model/config/{id}"),
        t,
        &json!({ "modelName": "a renamed echo", "providerId": other }),
    )
    .await
    .assert_status_ok();
    let moved = app.get(&format!("/ai-model/usage/stat/{id}"), t).await;
    let moved = moved.assert_status_ok();
    assert_eq!(
        (
            moved["modelName"].as_str(),
            moved["providerId"].as_i64(),
            moved["providerName"].as_str(),
            moved["totalCalls"].as_i64()
        ),
        (Some("a renamed echo"), Some(other), Some("Provider other"), Some(5))
    );

    let mine = app.get("/ai-model/usage/user-stats?pageNum=1&pageSize=10", t).await;
    assert_eq!(mine.assert_status_ok()[0]["totalCalls"], 5);
    assert_eq!(mine.body["total"], 1);
    let (_, user) = app.regular_user("vic").await;
    let theirs = app.get("/ai-model/usage/user-stats", Some(&user)).await;
    assert_eq!(theirs.assert_status_ok().as_array().unwrap().len(), 0);
    // A GLOBAL model's totals are every tenant's traffic: a regular user sees their own calls.
    let stat = app.get(&format!("/ai-model/usage/stat/{id}"), Some(&user)).await;
    assert_eq!(
        (
            stat.assert_status_ok()["totalCalls"].as_i64(),
            stat.body["data"]["modelName"].as_str()
        ),
        (Some(0), Some("a renamed echo"))
    );
    app.get("/ai-model/usage/global-stats", Some(&user))
        .await
        .assert_status_error(403, 403, "administrator");
    let global = app.get("/ai-model/usage/global-stats", t).await;
    assert_eq!(global.assert_status_ok()[0]["failedCalls"], 2);
    let fresh = app.model(&admin, p, "CHAT", "chat-think", url, json!({})).await;
    let zero = app.get(&format!("/ai-model/usage/stat/{fresh}"), t).await;
    assert_eq!(zero.assert_status_ok()["totalCalls"], 0);
}

/// A config in use keeps its type: a knowledge base's embedding model turned CHAT would fail
/// every search and ingest of the base, which could not swap it while it has documents.
#[tokio::test]
async fn a_config_in_use_keeps_its_model_type() {
    let s = api_tests::KbSetup::new(api_tests::Store::Filesystem, &[]).await;
    let t = Some(s.admin.as_str());
    s.kb("Embeds", json!({})).await;
    let config = format!("/ai-model/config/{}", s.embedding_model);
    s.app
        .put(&config, t, &json!({ "modelType": "CHAT" }))
        .await
        .assert_status_error(400, 0, "modelType cannot change while 1 knowledge bases");
    let now = s.app.get(&config, t).await;
    assert_eq!(now.assert_status_ok()["modelType"], "EMBEDDING");
    // Other changes of a config in use are not refused.
    s.app
        .put(&config, t, &json!({ "description": "still embeds" }))
        .await
        .assert_status_ok();
}

/// A binding checked while a retype of its model is in flight: an agent, a knowledge base's
/// settings and a memory config hold the models they name in the transaction that writes
/// them, so each waits for the retype and then sees the new type (refused, naming the field,
/// nothing written). Checked apart, each read the old type and bound a RERANKER as a chat model.
#[tokio::test]
async fn a_binding_waits_for_a_retype_in_flight_and_sees_it() {
    let s = api_tests::KbSetup::new(api_tests::Store::Filesystem, &[]).await;
    let t = Some(s.admin.as_str());
    let provider = s.app.provider(&s.admin, "retyped").await;
    let kb = s.kb("Base", json!({})).await;
    let kb_config = format!("/rag/{kb}/config");
    for case in ["agent", "knowledge base", "memory config"] {
        let chat = s
            .app
            .model(&s.admin, provider, "CHAT", "chat-echo", &s.models.base_url, json!({}))
            .await;
        let (field, path, body) = match case {
            "agent" => ("chatModelId", "/agent", json!({ "name": "bound", "chatModelId": chat })),
            "knowledge base" => (
                "modelParams.modelId",
                kb_config.as_str(),
                json!({ "modelParams": { "modelId": chat } }),
            ),
            _ => (
                "extractionModelId",
                "/memory/config",
                json!({ "name": "bound", "embeddingModelId": s.embedding_model, "dimensionOfVectorModel": 8,
                    "extractionModelId": chat }),
            ),
        };
        let request = async {
            match case {
                "knowledge base" => s.app.put(path, t, &body).await,
                _ => s.app.post(path, t, &body).await,
            }
        };
        // The retype, as the model service writes it: the row locked, not committed.
        let mut retype = s.app.db.begin().await.unwrap();
        sqlx::query("SELECT 1 FROM model_configs WHERE id = $1 FOR UPDATE")
            .bind(chat)
            .execute(&mut *retype)
            .await
            .unwrap();
        let retyped = async {
            api_tests::until_a_statement_waits_for_a_lock(&s.app.db).await;
            sqlx::query("UPDATE model_configs SET model_type = 'RERANKER' WHERE id = $1")
                .bind(chat)
                .execute(&mut *retype)
                .await
                .unwrap();
            retype.commit().await.unwrap();
        };
        let (answer, ()) = tokio::join!(request, retyped);
        answer.assert_error(
            400,
            0,
            &format!("{field}: model {chat} does not exist or is not an enabled CHAT model"),
        );
        let (agents, kbs, configs): (i64, i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM agents WHERE chat_model_id = $1),
                    (SELECT count(*) FROM knowledge_bases WHERE (model_params->>'modelId')::bigint = $1),
                    (SELECT count(*) FROM memory_configs WHERE extraction_model_id = $1)",
        )
        .bind(chat)
        .fetch_one(&s.app.db)
        .await
        .unwrap();
        assert_eq!(
            (agents, kbs, configs),
            (0, 0, 0),
            "{case}: nothing bound to the retyped model"
        );
    }
}

/// A binding and an administrator's change that take the same model configs in opposite
/// orders (here: an agent holding its chat model, then its memory config's model; the other
/// side those two the other way round, as a default switch does): Postgres ends one of them,
/// and the request it ended answers 409 "try again" with nothing written, not 500.
#[tokio::test]
async fn a_deadlock_between_a_binding_and_another_change_is_a_conflict() {
    let s = api_tests::KbSetup::new(api_tests::Store::Filesystem, &[]).await;
    let t = Some(s.admin.as_str());
    let provider = s.app.provider(&s.admin, "locked").await;
    let url = &s.models.base_url;
    let chat = s
        .app
        .model(&s.admin, provider, "CHAT", "chat-echo", url, json!({}))
        .await;
    let extraction = s
        .app
        .model(&s.admin, provider, "CHAT", "mem-extract", url, json!({}))
        .await;
    let config = json!({ "name": "m", "embeddingModelId": s.embedding_model, "dimensionOfVectorModel": 8,
        "extractionModelId": extraction });
    let config = s
        .app
        .post("/memory/config", t, &config)
        .await
        .assert_ok()
        .as_i64()
        .unwrap();

    let mut other = s.app.db.begin().await.unwrap();
    // This side waits long enough for the request's side to find the deadlock first.
    sqlx::query("SET LOCAL deadlock_timeout = '20s'")
        .execute(&mut *other)
        .await
        .unwrap();
    sqlx::query("SELECT 1 FROM model_configs WHERE id = $1 FOR UPDATE")
        .bind(extraction)
        .execute(&mut *other)
        .await
        .unwrap();
    let body = json!({ "name": "bound", "chatModelId": chat, "memoryEnabled": true, "memoryConfigId": config });
    let create = s.app.post("/agent", t, &body);
    let cross = async {
        api_tests::until_a_statement_waits_for_a_lock(&s.app.db).await;
        sqlx::query("SELECT 1 FROM model_configs WHERE id = $1 FOR UPDATE")
            .bind(chat)
            .execute(&mut *other)
            .await
            .unwrap();
        other.rollback().await.unwrap();
    };
    let (created, ()) = tokio::join!(create, cross);
    created.assert_error(409, 409, "try again");
    let agents: i64 = sqlx::query_scalar("SELECT count(*) FROM agents WHERE name = 'bound'")
        .fetch_one(&s.app.db)
        .await
        .unwrap();
    assert_eq!(agents, 0);
}

/// A default switch, by its route or by a config's update, takes the old and the new default
/// in id order, as a binding takes the models it names: a binding that holds the old default
/// and takes the new one next is waited for, where before the two deadlocked and Postgres ended
/// the switch (409).
#[tokio::test]
async fn a_default_switch_waits_for_a_binding_instead_of_deadlocking() {
    let (app, server, admin) = setup().await;
    let t = Some(admin.as_str());
    let provider = app.provider(&admin, "ordered").await;
    let url = server.base_url.as_str();
    let old = app
        .model(&admin, provider, "CHAT", "chat-echo", url, json!({ "isDefault": true }))
        .await;
    let new = app.model(&admin, provider, "CHAT", "chat-think", url, json!({})).await;
    for (case, path, body) in [
        ("switch", format!("/ai-model/switch-default/{new}"), json!({})),
        (
            "update",
            format!("/ai-model/config/{new}"),
            json!({ "isDefault": true }),
        ),
    ] {
        app.put(&format!("/ai-model/switch-default/{old}"), t, &json!({}))
            .await
            .assert_status_ok();
        let mut binder = app.db.begin().await.unwrap();
        // The switch's side would find a deadlock first.
        sqlx::query("SET LOCAL deadlock_timeout = '20s'")
            .execute(&mut *binder)
            .await
            .unwrap();
        let hold = |id: i64| sqlx::query("SELECT 1 FROM model_configs WHERE id = $1 FOR SHARE").bind(id);
        hold(old).execute(&mut *binder).await.unwrap();
        let switch = app.put(&path, t, &body);
        let bind = async {
            api_tests::until_a_statement_waits_for_a_lock(&app.db).await;
            hold(new).execute(&mut *binder).await.unwrap();
            binder.commit().await.unwrap();
        };
        let (switched, ()) = tokio::join!(switch, bind);
        switched.assert_status_ok();
        let default: i64 = sqlx::query_scalar("SELECT id FROM model_configs WHERE model_type = 'CHAT' AND is_default")
            .fetch_one(&app.db)
            .await
            .unwrap();
        assert_eq!(default, new, "{case}");
    }
}

/// A provider deleted while a config is created under it, either way round: the one that
/// comes second gets a precise refusal, not an internal error, and the other stands.
#[tokio::test]
async fn a_provider_and_a_config_created_under_it_meanwhile() {
    let (app, server, admin) = setup().await;
    let t = Some(admin.as_str());
    let admin_id: i64 = app.get("/user", t).await.assert_ok()["id"].as_i64().unwrap();
    let url = &server.base_url;
    let body = |provider: i64| {
        json!({ "providerId": provider, "modelName": "m", "modelKey": "chat-echo", "modelType": "CHAT",
            "apiKey": GOOD_KEY, "apiEndpoint": url })
    };

    // A config being written under the provider when the provider's deletion comes.
    let provider = app.provider(&admin, "first").await;
    let mut creating = app.db.begin().await.unwrap();
    sqlx::query(
        "INSERT INTO model_configs (provider_id, model_name, model_key, model_type, adapter_key, api_key_enc,
           api_endpoint, creator_id)
         VALUES ($1, 'm', 'k', 'CHAT', 'openai', 'sealed', 'http://127.0.0.1:9/v1', $2)",
    )
    .bind(provider)
    .bind(admin_id)
    .execute(&mut *creating)
    .await
    .unwrap();
    let path = format!("/ai-model/provider/{provider}");
    let delete = app.delete(&path, t);
    let commit = async {
        api_tests::until_a_statement_waits_for_a_lock(&app.db).await;
        creating.commit().await.unwrap();
    };
    let (deleted, ()) = tokio::join!(delete, commit);
    deleted.assert_status_error(400, 0, "a model config was created under the provider meanwhile");
    app.get(&path, t).await.assert_status_ok();

    // The provider being deleted when a config is created under it.
    let provider = app.provider(&admin, "second").await;
    let config = body(provider);
    let create = app.post("/ai-model/config", t, &config);
    let created = api_tests::while_deleted(&app.db, "model_providers", provider, create).await;
    created.assert_status_error(400, 0, &format!("providerId: provider {provider} does not exist"));
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM model_configs WHERE provider_id = $1")
        .bind(provider)
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(left, 0);

    // The provider being deleted when a config is moved under it (it was a 500).
    let target = app.provider(&admin, "third").await;
    let first = app.provider(&admin, "fourth").await;
    let config = app
        .post("/ai-model/config", t, &body(first))
        .await
        .assert_status_ok()
        .as_i64()
        .unwrap();
    let moved = json!({ "providerId": target });
    let path = format!("/ai-model/config/{config}");
    let update = app.put(&path, t, &moved);
    let updated = api_tests::while_deleted(&app.db, "model_providers", target, update).await;
    updated.assert_status_error(400, 0, &format!("providerId: provider {target} does not exist"));
    let kept = app.get(&path, t).await;
    assert_eq!(kept.assert_status_ok()["providerId"], first);
}

/// Where a config calls, and its key's tail, are for those who manage it: a GLOBAL model's
/// endpoint may be an address in the operator's network.
#[tokio::test]
async fn only_managers_see_where_a_config_calls() {
    let (app, server, admin) = setup().await;
    let p = app.provider(&admin, "scripted").await;
    let url = server.base_url.as_str();
    let global = app.model(&admin, p, "CHAT", "chat-echo", url, json!({})).await;
    app.put(&format!("/ai-model/switch-default/{global}"), Some(&admin), &json!({}))
        .await
        .assert_status_ok();
    let (_, user) = app.regular_user("reader").await;
    let path = format!("/ai-model/config/{global}");
    let seen = app.get(&path, Some(&user)).await;
    let seen = seen.assert_status_ok();
    assert_eq!(
        (seen["apiEndpoint"].clone(), seen["apiKey"].clone()),
        (json!(null), json!("****"))
    );
    for listed in [
        app.get("/ai-model/configs?pageSize=100", Some(&user))
            .await
            .body
            .to_string(),
        app.get("/ai-model/default", Some(&user)).await.body.to_string(),
        app.get("/ai-model/default/CHAT", Some(&user)).await.body.to_string(),
    ] {
        assert!(!listed.contains(url) && listed.contains("chat-echo"), "{listed}");
    }
    let managed = app.get(&path, Some(&admin)).await;
    assert_eq!(managed.assert_status_ok()["apiEndpoint"], url);

    // A user's own config made GLOBAL by an administrator, with the operator's key, is no
    // longer theirs to manage, nor to see where it calls or the tail of that key.
    let (_, owner) = app.regular_user("owner").await;
    let own = app
        .model(&owner, p, "CHAT", "chat-echo", url, json!({ "scope": "PERSONAL" }))
        .await;
    let path = format!("/ai-model/config/{own}");
    let promoted = json!({ "scope": "GLOBAL", "apiKey": "sk-operator-key-9f8e7d6c" });
    app.put(&path, Some(&admin), &promoted).await.assert_status_ok();
    let seen = app.get(&path, Some(&owner)).await;
    let seen = seen.assert_status_ok();
    assert_eq!(
        (seen["apiEndpoint"].clone(), seen["apiKey"].clone()),
        (json!(null), json!("****"))
    );

    // Nor is it handed back while another user's agent chats with it: made PERSONAL again,
    // its creator could point it, and that agent's conversations, at an endpoint of theirs.
    let (_, other) = app.regular_user("other").await;
    let agent = app
        .post(
            "/agent",
            Some(&other),
            &json!({ "name": "borrower", "chatModelId": own }),
        )
        .await;
    let agent = agent.assert_ok().as_i64().unwrap();
    let before: Value = sqlx::query_scalar("SELECT to_jsonb(c) FROM model_configs c WHERE id = $1")
        .bind(own)
        .fetch_one(&app.db)
        .await
        .unwrap();
    let back = app.put(&path, Some(&admin), &json!({ "scope": "PERSONAL" })).await;
    assert_eq!(back.status, 400, "{}", back.body);
    let msg = back.body["message"].as_str().unwrap();
    assert!(msg.starts_with("scope cannot become PERSONAL while 1 "), "{msg}");
    let after: Value = sqlx::query_scalar("SELECT to_jsonb(c) FROM model_configs c WHERE id = $1")
        .bind(own)
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(before, after, "a refused change changes nothing");
    // Its creator's own agents do not hold it back.
    app.delete(&format!("/agent/{agent}"), Some(&other)).await.assert_ok();
    app.post("/agent", Some(&owner), &json!({ "name": "mine", "chatModelId": own }))
        .await
        .assert_ok();
    app.put(&path, Some(&admin), &json!({ "scope": "PERSONAL" }))
        .await
        .assert_status_ok();
}

/// Two marks at once still leave one: marks take turns. Without that, each took the mark off
/// the other configs before either committed, saw none, and both marks stayed. A trigger
/// makes every update of a config (the mark, then taking it off the others) last half a
/// second, so that the two requests overlap.
#[tokio::test]
async fn two_vision_marks_at_once_leave_one() {
    let (app, server, admin) = setup().await;
    let t = Some(admin.as_str());
    let provider = app.provider(&admin, "vision").await;
    let ids = [
        app.model(&admin, provider, "CHAT", "chat-echo", &server.base_url, json!({}))
            .await,
        app.model(&admin, provider, "CHAT", "chat-echo", &server.base_url, json!({}))
            .await,
    ];
    sqlx::raw_sql(
        "CREATE FUNCTION slow_mark() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN PERFORM pg_sleep(0.5); RETURN NEW; END $$;
         CREATE TRIGGER slow_mark AFTER UPDATE ON model_configs FOR EACH STATEMENT
         EXECUTE FUNCTION slow_mark();",
    )
    .execute(&app.db)
    .await
    .unwrap();
    let marked = json!({ "configJson": { "defaultVisionModel": true } });
    let paths = ids.map(|id| format!("/ai-model/config/{id}"));
    let (a, b) = tokio::join!(app.put(&paths[0], t, &marked), app.put(&paths[1], t, &marked));
    assert_eq!((a.status, b.status), (200, 200), "{} {}", a.body, b.body);
    let marks: Vec<i64> = sqlx::query_scalar(
        "SELECT id FROM model_configs WHERE config_json->>'defaultVisionModel' = 'true' ORDER BY id",
    )
    .fetch_all(&app.db)
    .await
    .unwrap();
    assert_eq!(marks.len(), 1, "marked: {marks:?}");
}

/// Only a GLOBAL CHAT model can be the default vision model, the one that reads documents'
/// images; a mark anywhere else is refused by name, and marking one takes the mark off the
/// last. Taken before, a PERSONAL model's mark showed as in force and read nothing, and of two
/// marks the older config's won.
#[tokio::test]
async fn one_global_chat_model_is_the_default_vision_model() {
    let (app, server, admin) = setup().await;
    let t = Some(admin.as_str());
    let provider = app.provider(&admin, "vision").await;
    let marked = json!({ "configJson": { "defaultVisionModel": true } });
    let first = app
        .model(&admin, provider, "CHAT", "chat-echo", &server.base_url, marked.clone())
        .await;
    let refusal = "configJson.defaultVisionModel: only a GLOBAL CHAT model can be the default vision model";
    let before = app.count("model_configs").await;
    for (kind, scope) in [("EMBEDDING", "GLOBAL"), ("CHAT", "PERSONAL")] {
        let body = json!({
            "providerId": provider, "modelName": "m", "modelKey": "chat-echo", "modelType": kind,
            "scope": scope, "apiKey": GOOD_KEY, "apiEndpoint": server.base_url, "configJson": marked["configJson"],
        });
        app.post("/ai-model/config", t, &body)
            .await
            .assert_status_error(400, 0, refusal);
    }
    assert_eq!(app.count("model_configs").await, before);
    let to_personal = json!({ "scope": "PERSONAL" });
    app.put(&format!("/ai-model/config/{first}"), t, &to_personal)
        .await
        .assert_status_error(400, 0, refusal);

    let mark = |id: i64| {
        let app = &app;
        async move {
            let got = app.get(&format!("/ai-model/config/{id}"), t).await;
            got.assert_status_ok()["configJson"]["defaultVisionModel"].clone()
        }
    };
    let second = app
        .model(&admin, provider, "CHAT", "chat-echo", &server.base_url, json!({}))
        .await;
    app.put(&format!("/ai-model/config/{second}"), t, &marked)
        .await
        .assert_status_ok();
    assert_eq!((mark(first).await, mark(second).await), (Value::Null, json!(true)));

    // Two marks at once take turns: one stays. The second may find its config unmarked by
    // the first since it was read, and is then refused as changed meanwhile (409), as a
    // default switch is.
    let (first_path, second_path) = (
        format!("/ai-model/config/{first}"),
        format!("/ai-model/config/{second}"),
    );
    for _ in 0..5 {
        let (a, b) = tokio::join!(app.put(&first_path, t, &marked), app.put(&second_path, t, &marked));
        let statuses = [a.status, b.status];
        assert!(
            statuses.contains(&200) && statuses.iter().all(|s| [200, 409].contains(s)),
            "{statuses:?}"
        );
        let marks = [mark(first).await, mark(second).await];
        assert_eq!(marks.iter().filter(|m| **m == json!(true)).count(), 1, "{marks:?}");
    }

    // A mark stored on a PERSONAL config before marks were checked does not keep its owner
    // from rotating the key; sending configJson again asks for the mark to be taken off.
    let personal = app
        .model(
            &admin,
            provider,
            "CHAT",
            "chat-echo",
            &server.base_url,
            json!({ "scope": "PERSONAL" }),
        )
        .await;
    sqlx::query("UPDATE model_configs SET config_json = '{\"defaultVisionModel\": true}' WHERE id = $1")
        .bind(personal)
        .execute(&app.db)
        .await
        .unwrap();
    let rotate = json!({ "apiKey": GOOD_KEY });
    app.put(&format!("/ai-model/config/{personal}"), t, &rotate)
        .await
        .assert_status_ok();
    app.put(&format!("/ai-model/config/{personal}"), t, &marked)
        .await
        .assert_status_error(400, 0, refusal);
}
