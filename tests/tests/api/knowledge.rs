//! Knowledge bases: settings, stores, upload with dedup, the ingestion pipeline end to end,
//! faults, chunks by hand, and deletion that leaves nothing behind.

use api_tests::{KbSetup, Store};
use serde_json::{json, Value};

const GUIDE_MD: &str = "# Install\n\nDownload the package and unpack it.\n\n## Linux\n\nRun the installer as root.\n\n# Use\n\nStart the service with the start command.\n";
const NOTES_TXT: &str = "The quick brown fox jumps over the lazy dog.\n\nPack my box with five dozen liquor jugs.";
const PEOPLE_CSV: &str = "name,city\nAda,London\nGrace,New York\n";
const PAGE_HTML: &str = "<html><head><script>evil()</script></head><body><h1>Title</h1><p>First paragraph here.</p><p>Second one.</p></body></html>";

async fn doc_ids(reply: &api_tests::Reply) -> Vec<i64> {
    reply.assert_ok()["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["id"].as_i64())
        .collect()
}

#[tokio::test]
async fn knowledge_base_settings_and_validation() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let (app, t) = (&s.app, Some(s.admin.as_str()));
    let id = s
        .kb(
            "Handbook",
            json!({ "description": "all about us", "chunkMode": "delimiter", "customDelimiter": "\\n\\n" }),
        )
        .await;
    let kb = app.get(&format!("/rag/{id}"), t).await.assert_ok().clone();
    assert_eq!(kb["dimensionOfVectorModel"], 8, "probed from the embedding model");
    assert_eq!(
        (
            kb["documentCount"].as_i64(),
            kb["chunkCount"].as_i64(),
            kb["status"].as_str()
        ),
        (Some(0), Some(0), Some("active"))
    );
    assert_eq!(
        (kb["chunkMode"].as_str(), kb["delimiter"].as_str()),
        (Some("delimiter"), Some("\\n\\n"))
    );
    assert_eq!(kb["embeddingModelName"], "emb-8 model");
    assert!(kb["vectorStoreInstanceId"].as_i64().is_some() && kb["searchEngineInstanceId"].as_i64().is_some());
    let index: Option<String> = sqlx::query_scalar("SELECT indexdef FROM pg_indexes WHERE indexname = $1")
        .bind(format!("chunks_hnsw_kb_{id}"))
        .fetch_optional(&app.db)
        .await
        .unwrap();
    let index = index.expect("the base's own HNSW index");
    assert!(
        index.contains("hnsw") && index.contains("vector(8)") && index.contains(&format!("rag_id = {id}")),
        "{index}"
    );

    let page = app.get("/rag/page?page=1&size=5", t).await;
    assert_eq!(page.assert_ok()["total"], 1);

    app.put(
        &format!("/rag/{id}"),
        t,
        &json!({ "name": "Handbook 2", "maxChunkTokens": 256, "dedupAction": 1 }),
    )
    .await
    .assert_ok();
    let config = json!({
        "chunkParams": { "mode": "regex", "chunkRegex": "^## " },
        "searchParams": { "resultCount": 7, "fusionStrategy": "WEIGHTED_SUM" },
        "modelParams": { "prompt": "Context: {context}\nQuestion: {query}", "nearbySliceCount": 1 },
        "parseParams": { "saveImages": true, "maxImageCount": 5 }
    });
    app.put(&format!("/rag/{id}/config"), t, &config).await.assert_ok();
    let kb = app.get(&format!("/rag/{id}"), t).await.assert_ok().clone();
    assert_eq!(
        (
            kb["name"].as_str(),
            kb["maxChunkTokens"].as_i64(),
            kb["dedupAction"].as_i64()
        ),
        (Some("Handbook 2"), Some(256), Some(1))
    );
    // A documented size under 129 sent alone brings the default overlap of 64 under its half.
    app.put(&format!("/rag/{id}"), t, &json!({ "maxChunkTokens": 100 }))
        .await
        .assert_ok();
    let small = app.get(&format!("/rag/{id}"), t).await.assert_ok().clone();
    assert_eq!(
        (small["maxChunkTokens"].as_i64(), small["chunkOverlap"].as_i64()),
        (Some(100), Some(12))
    );
    app.put(&format!("/rag/{id}"), t, &json!({ "maxChunkTokens": 256 }))
        .await
        .assert_ok();
    assert_eq!(
        (kb["chunkMode"].as_str(), kb["chunkRegex"].as_str()),
        (Some("regex"), Some("^## "))
    );
    assert_eq!(
        (
            kb["searchParams"]["resultCount"].as_i64(),
            kb["extparseSaveImages"].as_bool()
        ),
        (Some(7), Some(true))
    );
    assert_eq!(kb["modelParams"]["nearbySliceCount"], 1);
    assert_eq!(kb["description"], "all about us");

    // Sent blank, the description is cleared (null, as a base created without one); trimmed
    // otherwise; left out, kept.
    app.put(&format!("/rag/{id}"), t, &json!({ "description": "  " }))
        .await
        .assert_ok();
    assert_eq!(
        app.get(&format!("/rag/{id}"), t).await.assert_ok()["description"],
        Value::Null
    );
    app.put(&format!("/rag/{id}"), t, &json!({ "description": "  ours \n" }))
        .await
        .assert_ok();
    app.put(&format!("/rag/{id}"), t, &json!({ "name": "Handbook 2" }))
        .await
        .assert_ok();
    assert_eq!(
        app.get(&format!("/rag/{id}"), t).await.assert_ok()["description"],
        "ours"
    );

    let before = app.count("knowledge_bases").await;
    for (body, needle) in [
        (json!({ "embeddingModelId": s.embedding_model }), "name is required"),
        (json!({ "name": "x" }), "embeddingModelId is required"),
        (
            json!({ "name": "x", "embeddingModelId": 999 }),
            "embeddingModelId: model 999 does not exist",
        ),
        (
            json!({ "name": "x", "embeddingModelId": s.embedding_model, "chunkMode": "magic" }),
            "chunkMode must be",
        ),
        (
            json!({ "name": "x", "embeddingModelId": s.embedding_model, "chunkMode": "delimiter" }),
            "customDelimiter is required",
        ),
        (
            json!({ "name": "x", "embeddingModelId": s.embedding_model, "chunkMode": "regex", "chunkRegex": "(" }),
            "chunkRegex",
        ),
        (
            json!({ "name": "x", "embeddingModelId": s.embedding_model, "maxChunkTokens": 1 }),
            "maxChunkTokens",
        ),
        (
            json!({ "name": "x", "embeddingModelId": s.embedding_model, "dedupStrategy": 5 }),
            "dedupStrategy must be between 0 and 3",
        ),
        (
            json!({ "name": "x", "embeddingModelId": s.embedding_model, "parseEngine": "magic" }),
            "parseEngine must be",
        ),
        (
            json!({ "name": "x", "embeddingModelId": s.embedding_model, "vectorStoreInstanceId": 999 }),
            "vectorStoreInstanceId: store instance 999",
        ),
        (
            json!({ "name": "x", "embeddingModelId": s.embedding_model, "rerankModelId": s.embedding_model }),
            "rerankModelId",
        ),
    ] {
        app.post("/rag", t, &body).await.assert_error(400, 0, needle);
    }
    for (body, needle) in [
        (
            json!({ "searchParams": { "fusionStrategy": "MAX" } }),
            "searchParams.fusionStrategy",
        ),
        (
            json!({ "searchParams": { "resultCount": "ten" } }),
            "searchParams.resultCount",
        ),
        (
            json!({ "modelParams": { "prompt": "no placeholders" } }),
            "modelParams.prompt must contain",
        ),
        (
            json!({ "parseParams": { "maxImageCount": -1 } }),
            "parseParams.maxImageCount",
        ),
        (json!({ "chunkParams": [] }), "chunkParams must be a JSON object"),
        // Named as this request writes them, not as the flat fields of POST and PUT /rag.
        (
            json!({ "chunkParams": { "mode": "x" } }),
            "chunkParams.mode must be default, delimiter, regex or smart",
        ),
        (
            json!({ "chunkParams": { "maxChunkTokens": 100, "chunkOverlap": 60 } }),
            "chunkParams.chunkOverlap must be less than half of chunkParams.maxChunkTokens",
        ),
        (
            json!({ "parseParams": { "engine": "x" } }),
            "parseParams.engine must be default or extparse",
        ),
        (
            json!({ "searchParams": { "rerankEnabled": true } }),
            "searchParams.rerankModelId is required when searchParams.rerankEnabled is true",
        ),
        (
            json!({ "searchParams": { "rerankEnabled": true, "rerankModelId": 1, "enterRerankCount": 2, "resultCount": 5 } }),
            "searchParams.enterRerankCount must be at least searchParams.resultCount",
        ),
        (
            json!({ "searchParams": { "enterRerankCount": 201 } }),
            "searchParams.enterRerankCount must be between 1 and 200",
        ),
        (
            json!({ "parseParams": { "ocrLang": ["en", "x; rm -rf"] } }),
            "parseParams.ocrLang[1] must be a language code",
        ),
        (
            json!({ "parseParams": { "ocrLang": vec!["en"; 11] } }),
            "parseParams.ocrLang may hold at most 10",
        ),
        (
            json!({ "modelParams": { "prompt": format!("{{context}} {{query}} {}", "x".repeat(8000)) } }),
            "modelParams.prompt must be",
        ),
        (
            json!({ "chunkParams": { "customDelimiter": "-".repeat(201) } }),
            "chunkParams.customDelimiter must be",
        ),
    ] {
        app.put(&format!("/rag/{id}/config"), t, &body)
            .await
            .assert_error(400, 0, needle);
    }
    assert_eq!(app.count("knowledge_bases").await, before);
    assert_eq!(
        app.get(&format!("/rag/{id}"), t).await.assert_ok()["searchParams"]["resultCount"],
        7,
        "unchanged"
    );
    // A section takes the values in any case, as the flat fields do, and stores them as named.
    let cased = json!({ "chunkParams": { "mode": "Regex" }, "parseParams": { "engine": "DEFAULT" } });
    app.put(&format!("/rag/{id}/config"), t, &cased).await.assert_ok();
    let kb = app.get(&format!("/rag/{id}"), t).await.assert_ok().clone();
    assert_eq!(
        (kb["chunkMode"].as_str(), kb["parseEngine"].as_str()),
        (Some("regex"), Some("default"))
    );

    let (_, other) = app.regular_user("outsider").await;
    app.get(&format!("/rag/{id}"), Some(&other))
        .await
        .assert_error(404, 404, "knowledge base not found");
    app.put(&format!("/rag/{id}"), Some(&other), &json!({ "name": "mine" }))
        .await
        .assert_error(404, 404, "not found");
    app.delete(&format!("/rag/{id}"), Some(&other))
        .await
        .assert_error(404, 404, "not found");
    assert_eq!(app.get("/rag/page", Some(&other)).await.assert_ok()["total"], 0);
}

/// A base saved when `enterRerankCount` went up to 500 stays editable: the migration that
/// narrowed it brings stored values to 200, which search already used.
#[tokio::test]
async fn bases_saved_under_the_old_rerank_limit_stay_editable() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let t = Some(s.admin.as_str());
    let kb = s.kb("old", json!({})).await;
    sqlx::query("UPDATE knowledge_bases SET search_params = search_params || '{\"enterRerankCount\": 500}'")
        .execute(&s.app.db)
        .await
        .unwrap();
    let edit = json!({ "chunkParams": { "maxChunkTokens": 400 } });
    let refused = s.app.put(&format!("/rag/{kb}/config"), t, &edit).await;
    refused.assert_error(400, 0, "searchParams.enterRerankCount must be between 1 and 200");
    sqlx::raw_sql(include_str!("../../../migrations/0026_kb_enter_rerank_count_limit.sql"))
        .execute(&s.app.db)
        .await
        .unwrap();
    s.app.put(&format!("/rag/{kb}/config"), t, &edit).await.assert_ok();
    let base = s.app.get(&format!("/rag/{kb}"), t).await;
    assert_eq!(base.assert_ok()["searchParams"]["enterRerankCount"], 200);
}

/// Two instances made the default of one category at the same moment, a third being it: both
/// requests succeed and the category has one default. Each switch cleared the default it saw
/// (the third), and the second's write then broke the one-default index (a 500).
#[tokio::test]
async fn simultaneous_default_switches_of_store_instances_both_succeed() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let (app, t) = (&s.app, Some(s.admin.as_str()));
    let builtin = app.get("/store-instance?category=1", t).await.assert_ok()[0]["id"]
        .as_i64()
        .unwrap();
    let mut paths = Vec::new();
    for name in ["Second", "Third"] {
        let id = app
            .post(
                "/store-instance",
                t,
                &json!({ "name": name, "category": 1, "type": 1, "config": { "host": "127.0.0.1" } }),
            )
            .await
            .assert_ok()
            .as_i64()
            .unwrap();
        paths.push(format!("/store-instance/{id}"));
    }
    let make_default = json!({ "isDefault": true });
    for _ in 0..10 {
        app.put(&format!("/store-instance/{builtin}"), t, &make_default)
            .await
            .assert_ok();
        let (a, b) = tokio::join!(
            app.put(&paths[0], t, &make_default),
            app.put(&paths[1], t, &make_default)
        );
        a.assert_ok();
        b.assert_ok();
        let defaults: i64 =
            sqlx::query_scalar("SELECT count(*) FROM store_instances WHERE category = 1 AND is_default")
                .fetch_one(&app.db)
                .await
                .unwrap();
        assert_eq!(defaults, 1);
    }
}

/// An instance made the default while another edit moves it to the other category: one of the
/// two goes first and the other is checked against what it left, so a category never ends with
/// two defaults (a 500) or none.
#[tokio::test]
async fn a_default_switch_and_a_category_change_at_once_keep_one_default_a_category() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let (app, t) = (&s.app, Some(s.admin.as_str()));
    let id = app
        .post(
            "/store-instance",
            t,
            &json!({ "name": "Mover", "category": 1, "type": 1, "config": { "host": "127.0.0.1" } }),
        )
        .await
        .assert_ok()
        .as_i64()
        .unwrap();
    let path = format!("/store-instance/{id}");
    let (make_default, move_it) = (json!({ "isDefault": true }), json!({ "category": 2, "type": 3 }));
    for _ in 0..10 {
        sqlx::query("UPDATE store_instances SET category = 1, store_type = 1, is_default = FALSE WHERE id = $1")
            .bind(id)
            .execute(&app.db)
            .await
            .unwrap();
        sqlx::query("UPDATE store_instances SET is_default = TRUE WHERE builtin")
            .execute(&app.db)
            .await
            .unwrap();
        let (a, b) = tokio::join!(app.put(&path, t, &make_default), app.put(&path, t, &move_it));
        for r in [&a, &b] {
            assert!(r.status == 200 || r.body["code"] == 0, "{:?}", r.body);
        }
        let defaults: Vec<i64> = sqlx::query_scalar(
            "SELECT count(*) FILTER (WHERE is_default) FROM store_instances GROUP BY category ORDER BY category",
        )
        .fetch_all(&app.db)
        .await
        .unwrap();
        assert_eq!(defaults, [1, 1]);
    }
}

#[tokio::test]
async fn store_instances() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let (app, t) = (&s.app, Some(s.admin.as_str()));
    let vectors = app.get("/store-instance?category=1", t).await;
    let v = vectors.assert_ok()[0].clone();
    assert_eq!(
        (
            v["type"].as_str(),
            v["category"].as_str(),
            v["status"].as_str(),
            v["isDefault"].as_bool()
        ),
        (Some("PGVECTOR"), Some("VECTOR_STORE"), Some("ACTIVE"), Some(true))
    );
    assert_eq!(
        app.get("/store-instance?category=2", t).await.assert_ok()[0]["type"],
        "PG_FULLTEXT"
    );

    let pg_port = reqwest::Url::parse(&std::env::var("DATABASE_URL").unwrap())
        .unwrap()
        .port()
        .unwrap_or(5432);
    let config = json!({ "host": "127.0.0.1", "port": pg_port, "database": "postgres", "username": "postgres", "password": "sekret-password-1" });
    let id = app
        .post(
            "/store-instance",
            t,
            &json!({ "name": "Analytics PG", "category": 1, "type": 1, "config": config, "status": 1 }),
        )
        .await
        .assert_ok()
        .as_i64()
        .unwrap();
    let got = app.get(&format!("/store-instance/{id}"), t).await.assert_ok().clone();
    assert_eq!(got["config"]["password"], "****rd-1");
    let raw: String = sqlx::query_scalar("SELECT password_enc FROM store_instances WHERE id = $1")
        .bind(id)
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert!(raw.starts_with("v1:") && !raw.contains("sekret"));
    assert!(!got["config"].to_string().contains("sekret"));
    // Where a store lives, and as whom, is for administrators: others see what to choose.
    let (_, user) = app.regular_user("chooser").await;
    for path in [format!("/store-instance/{id}"), "/store-instance?category=1".to_owned()] {
        let seen = app.get(&path, Some(&user)).await;
        let text = seen.assert_ok().to_string();
        assert!(!text.contains("127.0.0.1") && !text.contains("rd-1"), "{path}: {text}");
    }
    let listed = app.get("/store-instance/page?size=100", Some(&user)).await;
    let listed = listed.assert_ok()["data"].as_array().unwrap().clone();
    let mine = listed.iter().find(|v| v["id"] == id).unwrap();
    assert_eq!(
        (mine["name"].as_str(), mine["config"].clone()),
        (Some("Analytics PG"), json!({}))
    );

    let ok = app.post("/store-instance/test", t, &json!({ "type": "PGVECTOR", "config": { "host": "127.0.0.1", "port": pg_port, "username": "postgres", "database": "postgres" } })).await;
    assert_eq!(ok.assert_ok(), &json!(true));
    app.post(
        "/store-instance/test",
        t,
        &json!({ "type": "PG_FULLTEXT", "config": { "host": "127.0.0.1", "port": 9 } }),
    )
    .await
    .assert_error(400, 0, "connection test failed");
    app.post(
        "/store-instance/test",
        t,
        &json!({ "type": "OPENSEARCH", "config": { "host": "127.0.0.1", "port": 9 } }),
    )
    .await
    .assert_error(400, 0, "connection test failed");
    app.post(
        "/store-instance/test",
        t,
        &json!({ "type": "MILVUS", "config": { "host": "127.0.0.1", "port": 9 } }),
    )
    .await
    .assert_error(400, 0, "connection test failed");
    app.post("/store-instance/test", t, &json!({ "type": "NOPE", "config": {} }))
        .await
        .assert_error(400, 0, "type must be");
    app.post(
        "/store-instance/test",
        t,
        &json!({ "type": "MILVUS", "config": { "port": 1 } }),
    )
    .await
    .assert_error(400, 0, "config.host is required");

    let page = app
        .get(
            "/store-instance/page?category=1&keyword=analytics&type=PGVECTOR&status=ACTIVE",
            t,
        )
        .await;
    assert_eq!(page.assert_ok()["total"], 1);
    app.get("/store-instance/page?status=maybe", t)
        .await
        .assert_error(400, 0, "status must be");

    let before = app.count("store_instances").await;
    for (body, needle) in [
        (json!({ "category": 1, "type": 1, "config": {} }), "name is required"),
        (json!({ "name": "x", "type": 1, "config": {} }), "category is required"),
        (
            json!({ "name": "x", "category": 3, "type": 1, "config": {} }),
            "category must be",
        ),
        (
            json!({ "name": "x", "category": 2, "type": 2, "config": { "host": "h" } }),
            "type MILVUS cannot serve as SEARCH_ENGINE",
        ),
        (json!({ "name": "x", "category": 1, "type": 1 }), "config is required"),
        (
            json!({ "name": "x", "category": 1, "type": 1, "config": { "host": "h", "port": 70000 } }),
            "config.port",
        ),
        // A value of another type was read as absent: `"tls": "true"` connected without TLS,
        // a number as password was dropped, and the create succeeded.
        (
            json!({ "name": "x", "category": 1, "type": 1, "config": { "host": "h", "tls": "true" } }),
            "config.tls must be true or false",
        ),
        (
            json!({ "name": "x", "category": 1, "type": 1, "config": { "host": "h", "password": 12345 } }),
            "config.password must be a string",
        ),
        (
            json!({ "name": "x", "category": 1, "type": 1, "config": { "host": 123 } }),
            "config.host must be a string",
        ),
        (
            json!({ "name": "x", "category": 1, "type": 1, "config": { "host": "h".repeat(254) } }),
            "config.host must be 0 to 253 characters long",
        ),
        (
            json!({ "name": "x", "category": 1, "type": 1, "config": { "host": "h", "username": "u".repeat(256) } }),
            "config.username must be 0 to 255 characters long",
        ),
        (
            json!({ "name": "x", "category": 1, "type": 1, "config": { "host": "h", "note": "n".repeat(17 * 1024) } }),
            "config must be at most 16 KiB besides caCert",
        ),
    ] {
        app.post("/store-instance", t, &body).await.assert_error(400, 0, needle);
    }
    let (_, user) = app.regular_user("reader").await;
    app.post(
        "/store-instance",
        Some(&user),
        &json!({ "name": "x", "category": 1, "type": 1, "config": { "host": "h" } }),
    )
    .await
    .assert_error(403, 403, "administrator");
    assert_eq!(app.count("store_instances").await, before);

    // The masked password sent back keeps the stored one.
    app.put(
        &format!("/store-instance/{id}"),
        t,
        &json!({ "name": "Renamed", "config": got["config"] }),
    )
    .await
    .assert_ok();
    let after: String = sqlx::query_scalar("SELECT password_enc FROM store_instances WHERE id = $1")
        .bind(id)
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(after, raw);
    // It goes only where it was set up: another host, port or type sends it again.
    let mut moved = got["config"].clone();
    moved["host"] = json!("elsewhere.example");
    for edit in [json!({ "config": moved }), json!({ "type": 2 })] {
        app.put(&format!("/store-instance/{id}"), t, &edit).await.assert_error(
            400,
            0,
            "config.password: send the password again",
        );
    }
    moved["password"] = json!("another-password-2");
    let mut back = moved.clone();
    back["host"] = json!("127.0.0.1");
    for edit in [json!({ "config": moved }), json!({ "config": back })] {
        app.put(&format!("/store-instance/{id}"), t, &edit).await.assert_ok();
    }
    let builtin = v["id"].as_i64().unwrap();

    // A default keeps its category; an instance in use keeps its category and type.
    let path = format!("/store-instance/{id}");
    let stored = |app: &api_tests::TestApp| {
        let db = app.db.clone();
        async move {
            sqlx::query_as::<_, (i16, i16, bool)>(
                "SELECT category, store_type, is_default FROM store_instances WHERE id = $1",
            )
            .bind(id)
            .fetch_one(&db)
            .await
            .unwrap()
        }
    };
    app.put(&path, t, &json!({ "status": 0, "isDefault": true }))
        .await
        .assert_error(400, 0, "status: the default instance of its category stays active");
    let inactive_default = json!({ "name": "x", "category": 1, "type": 2, "config": { "host": "h" },
                                   "status": 0, "isDefault": true });
    app.post("/store-instance", t, &inactive_default).await.assert_error(
        400,
        0,
        "status: the default instance of its category stays active",
    );
    app.put(&path, t, &json!({ "isDefault": true })).await.assert_ok();
    app.put(&path, t, &json!({ "category": 2, "type": 3 }))
        .await
        .assert_error(400, 0, "category: the default instance");
    // Every base made without naming a store gets the default: it stays, and stays active.
    app.put(&path, t, &json!({ "status": 0 })).await.assert_error(
        400,
        0,
        "status: the default instance of its category stays active",
    );
    app.delete(&path, t)
        .await
        .assert_error(400, 0, "the default instance of its category cannot be deleted");
    assert_eq!(stored(app).await, (1, 1, true));
    app.put(&format!("/store-instance/{builtin}"), t, &json!({ "isDefault": true }))
        .await
        .assert_ok();
    let kb = s.kb("On analytics", json!({})).await;
    sqlx::query("UPDATE knowledge_bases SET vector_store_instance_id = $2 WHERE id = $1")
        .bind(kb)
        .bind(id)
        .execute(&app.db)
        .await
        .unwrap();
    app.put(&path, t, &json!({ "type": 3 })).await.assert_error(
        400,
        0,
        "type: 1 knowledge bases use this store instance",
    );
    app.put(&path, t, &json!({ "category": 2, "type": 3 }))
        .await
        .assert_error(400, 0, "category: 1 knowledge bases use this store instance");
    assert_eq!(stored(app).await, (1, 1, false));
    sqlx::query("UPDATE knowledge_bases SET vector_store_instance_id = $2 WHERE id = $1")
        .bind(kb)
        .bind(builtin)
        .execute(&app.db)
        .await
        .unwrap();

    app.delete(&format!("/store-instance/{builtin}"), t)
        .await
        .assert_error(400, 0, "cannot be deleted");
    app.delete(&format!("/store-instance/{id}"), t).await.assert_ok();
    app.get(&format!("/store-instance/{id}"), t)
        .await
        .assert_error(404, 404, "not found");
}

async fn ingest_every_text_type(store: Store, extra: &[(&str, &str)]) {
    let s = KbSetup::new(store, extra).await;
    let (app, t) = (&s.app, Some(s.admin.as_str()));
    let kb = s.kb("Docs", json!({})).await;
    let files = [
        ("guide.md", GUIDE_MD.as_bytes().to_vec()),
        ("notes.txt", NOTES_TXT.as_bytes().to_vec()),
        ("people.csv", PEOPLE_CSV.as_bytes().to_vec()),
        ("page.html", PAGE_HTML.as_bytes().to_vec()),
    ];
    let preview = s.preview(kb, &files, None).await;
    let p = preview.assert_ok().clone();
    assert_eq!(p["ragId"], kb);
    let items = p["items"].as_array().unwrap();
    assert_eq!(items.len(), 4);
    for (item, (name, bytes)) in items.iter().zip(&files) {
        assert_eq!(
            (
                item["fileName"].as_str(),
                item["decision"].as_str(),
                item["matchType"].as_str()
            ),
            (Some(*name), Some("NEW"), Some("NONE"))
        );
        assert_eq!(item["fileSize"].as_u64(), Some(bytes.len() as u64));
        let hash = format!("sha256:{}", hex::encode(<sha2::Sha256 as sha2::Digest>::digest(bytes)));
        assert_eq!(item["contentHash"], hash);
        assert!(item["conflictDocumentId"].is_null());
    }
    assert_eq!(app.count("resources").await, 4, "temporary resources, one per file");
    // A pending upload's file is not deleted apart from its preview: the commit needs it.
    app.delete(&format!("/resource/{}", items[0]["tempResourceId"]), t)
        .await
        .assert_error(400, 0, "belongs to a pending knowledge-base upload");
    assert_eq!(app.count("resources").await, 4);

    let commit = json!({ "previewToken": p["previewToken"], "items": items.iter().map(|i| json!({ "tempResourceId": i["tempResourceId"], "decision": "NEW" })).collect::<Vec<_>>() });
    let committed = app.post("/document/upload/commit", t, &commit).await;
    assert_eq!(committed.assert_ok()["conflictChanged"], false);
    let ids = doc_ids(&committed).await;
    assert_eq!(ids.len(), 4);
    assert_eq!(app.count("resources").await, 0, "temporary resources become documents");

    for (id, (name, bytes)) in ids.iter().zip(&files) {
        let d = s.settled(*id).await;
        assert_eq!(
            (d["status"].as_str(), d["progress"].as_i64()),
            (Some("success"), Some(100)),
            "{name}: {d}"
        );
        assert!(d["chunkCount"].as_i64().unwrap() >= 1);
        for stage in ["parseMs", "chunkMs", "embedMs", "indexMs", "totalMs"] {
            assert!(d["timings"][stage].as_u64().is_some(), "{name} timing {stage}: {d}");
        }
        let original = app.get(&format!("/document/{id}/download"), t).await;
        assert_eq!(&original.bytes[..], &bytes[..], "{name} downloads unchanged");
        assert!(original.headers["content-disposition"].to_str().unwrap().contains(name));
    }
    let setup = &s;
    let text = |id: i64| async move { setup.chunk_texts(id).await.join("\n") };
    let md = text(ids[0]).await;
    for needle in [
        "Download the package and unpack it.",
        "Run the installer as root.",
        "Start the service with the start command.",
    ] {
        assert!(md.contains(needle), "{needle:?} in {md:?}");
    }
    let title: Option<String> =
        sqlx::query_scalar("SELECT title FROM chunks WHERE document_id = $1 AND content LIKE '%installer%'")
            .bind(ids[0])
            .fetch_one(&app.db)
            .await
            .unwrap();
    assert_eq!(title.as_deref(), Some("Install > Linux"));
    let txt = text(ids[1]).await;
    assert!(
        txt.contains("The quick brown fox jumps over the lazy dog.")
            && txt.contains("Pack my box with five dozen liquor jugs.")
    );
    let csv = text(ids[2]).await;
    assert!(
        csv.contains("Ada") && csv.contains("London") && csv.contains("Grace") && csv.contains("New York"),
        "{csv}"
    );
    let html = text(ids[3]).await;
    assert!(
        html.contains("First paragraph here.") && !html.contains("evil"),
        "{html}"
    );

    // Vectors and text index are written for every chunk.
    let (missing_vectors, missing_tsv): (i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE embedding IS NULL), count(*) FILTER (WHERE tsv IS NULL) FROM chunks WHERE rag_id = $1",
    )
    .bind(kb)
    .fetch_one(&app.db)
    .await
    .unwrap();
    assert_eq!((missing_vectors, missing_tsv), (0, 0));
    let kb_view = app.get(&format!("/rag/{kb}"), t).await.assert_ok().clone();
    let chunks: i64 = sqlx::query_scalar("SELECT count(*) FROM chunks WHERE rag_id = $1")
        .bind(kb)
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(
        (kb_view["documentCount"].as_i64(), kb_view["chunkCount"].as_i64()),
        (Some(4), Some(chunks))
    );
    let docs = app.get(&format!("/document/page?ragId={kb}&size=2"), t).await;
    let d = docs.assert_ok().clone();
    assert_eq!((d["total"].as_i64(), d["data"].as_array().unwrap().len()), (Some(4), 2));
    assert!(d["data"][0]["fileSize"].as_str().unwrap().ends_with('B'));
    let chunk_page = app.get(&format!("/chunk/page?documentId={}", ids[1]), t).await;
    let c = chunk_page.assert_ok()["data"][0].clone();
    assert_eq!(
        (
            c["documentName"].as_str(),
            c["vectorStatus"].as_str(),
            c["type"].as_str()
        ),
        (Some("notes.txt"), Some("success"), Some("text"))
    );
    assert!(c["tokenCount"].as_i64().unwrap() > 0);
}

#[tokio::test]
async fn upload_to_indexed_chunks_through_the_in_process_queue() {
    ingest_every_text_type(Store::Filesystem, &[]).await;
}

#[tokio::test]
async fn upload_to_indexed_chunks_through_sqs_and_s3() {
    let queue = api_tests::fresh_sqs_queue(5).await.url;
    // Its own memory queue: the memory worker polls it and would take ingest messages.
    let memory_queue = api_tests::fresh_sqs_queue(5).await.url;
    ingest_every_text_type(
        Store::S3,
        &[
            ("QUEUE_BACKEND", "sqs"),
            ("SQS_INGEST_QUEUE_URL", &queue),
            ("SQS_MEMORY_QUEUE_URL", &memory_queue),
        ],
    )
    .await;
}

#[tokio::test]
async fn every_dedup_strategy_and_action() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let t = Some(s.admin.as_str());
    let kb = s.kb("Dedup", json!({})).await;
    let first = s.upload(kb, &[("a.txt", b"original content".to_vec())]).await;
    let existing = doc_ids(&first).await[0];
    s.settled(existing).await;
    // Same name with new content, and new name with the same content.
    let files = [
        ("A.TXT", b"changed content".to_vec()),
        ("b.txt", b"original content".to_vec()),
    ];
    let expect = |strategy: i64, action: i64| -> [(&'static str, &'static str); 2] {
        let hit = match action {
            0 => "REJECT",
            1 => "SKIP",
            _ => "OVERWRITE",
        };
        match strategy {
            0 => [("NEW", "NONE"), ("NEW", "NONE")],
            1 => [(hit, "BY_NAME"), ("NEW", "NONE")],
            2 => [("NEW", "NONE"), (hit, "BY_CONTENT")],
            // The document the first file overwrites is the first file's: the second, matching
            // it too, is the first one's duplicate (two documents would take its place).
            _ if action == 2 => [(hit, "BY_NAME"), ("SKIP", "BY_CONTENT")],
            _ => [(hit, "BY_NAME"), (hit, "BY_CONTENT")],
        }
    };
    for strategy in 0..=3 {
        for action in 0..=2 {
            let reply = s.preview(kb, &files, Some((strategy, action))).await;
            let p = reply.assert_ok().clone();
            let items = p["items"].as_array().unwrap();
            for (index, (item, (decision, match_type))) in items.iter().zip(expect(strategy, action)).enumerate() {
                assert_eq!(
                    (item["decision"].as_str(), item["matchType"].as_str()),
                    (Some(decision), Some(match_type)),
                    "strategy {strategy} action {action}: {item}"
                );
                if match_type == "NONE" {
                    assert!(item["conflictDocumentId"].is_null());
                } else if (strategy, action, index) == (3, 2, 1) {
                    assert_eq!(
                        (&item["conflictDocumentId"], item["conflictDocumentName"].as_str()),
                        (&Value::Null, Some("A.TXT"))
                    );
                } else {
                    assert_eq!(
                        (
                            item["conflictDocumentId"].as_i64(),
                            item["conflictDocumentName"].as_str()
                        ),
                        (Some(existing), Some("a.txt"))
                    );
                }
                assert_eq!(item["rejectReason"].is_string(), decision == "REJECT", "{item}");
            }
            let token = p["previewToken"].as_str().unwrap();
            s.app
                .delete(&format!("/document/upload/preview/{token}"), t)
                .await
                .assert_ok();
        }
    }
    assert_eq!(
        s.app.count("resources").await,
        0,
        "cancelled previews leave no temporary files"
    );
    assert_eq!(s.app.count("upload_previews").await, 0);

    // OVERWRITE replaces the old document and its chunks.
    let reply = s
        .preview(kb, &[("b.txt", b"original content".to_vec())], Some((2, 2)))
        .await;
    let p = reply.assert_ok().clone();
    let item = &p["items"][0];
    let body = json!({ "previewToken": p["previewToken"], "items": [{ "tempResourceId": item["tempResourceId"], "decision": "OVERWRITE" }] });
    let committed = s.app.post("/document/upload/commit", t, &body).await;
    let c = committed.assert_ok().clone();
    assert_eq!(
        (c["items"][0]["decision"].as_str(), c["items"][0]["matchType"].as_str()),
        (Some("OVERWRITE"), Some("BY_CONTENT"))
    );
    let new_id = c["items"][0]["id"].as_i64().unwrap();
    s.settled(new_id).await;
    s.app
        .get(&format!("/document/{existing}"), t)
        .await
        .assert_error(404, 404, "document not found");
    let old_chunks: i64 = sqlx::query_scalar("SELECT count(*) FROM chunks WHERE document_id = $1")
        .bind(existing)
        .fetch_one(&s.app.db)
        .await
        .unwrap();
    assert_eq!(old_chunks, 0);
    assert_eq!(s.app.count("documents").await, 1);

    // Files of one upload collide with each other too; a rejected file cannot be committed.
    let reply = s
        .preview(
            kb,
            &[("c.txt", b"twin".to_vec()), ("d.txt", b"twin".to_vec())],
            Some((2, 0)),
        )
        .await;
    let p = reply.assert_ok().clone();
    assert_eq!(
        (p["items"][0]["decision"].as_str(), p["items"][1]["decision"].as_str()),
        (Some("NEW"), Some("REJECT"))
    );
    assert!(p["items"][1]["rejectReason"]
        .as_str()
        .unwrap()
        .contains("another file in this upload"));
    let body = json!({ "previewToken": p["previewToken"], "items": [{ "tempResourceId": p["items"][1]["tempResourceId"], "decision": "NEW" }] });
    s.app
        .post("/document/upload/commit", t, &body)
        .await
        .assert_error(400, 0, "was rejected");
    assert_eq!(s.app.count("documents").await, 1, "nothing committed");

    // Two copies of a stored document in one upload: the first overwrites it, the second is
    // the first's duplicate (skipped), so one document with that content remains.
    let twins = [
        ("e.txt", b"original content".to_vec()),
        ("f.txt", b"original content".to_vec()),
    ];
    let p = s.preview(kb, &twins, Some((2, 2))).await.assert_ok().clone();
    assert_eq!(api_tests::preview_decisions(&p), ["OVERWRITE", "SKIP"]);
    assert_eq!(commit_as_previewed(&s, &p).await["conflictChanged"], false);
    assert_eq!(document_names(&s).await, ["e.txt"]);

    // By name or content: one file matches the stored document by name, another by content.
    // The first claims it, the second is its duplicate; one document stays in its place.
    let pair = [
        ("e.txt", b"changed content".to_vec()),
        ("g.txt", b"original content".to_vec()),
    ];
    let p = s.preview(kb, &pair, Some((3, 2))).await.assert_ok().clone();
    assert_eq!(api_tests::preview_decisions(&p), ["OVERWRITE", "SKIP"]);
    commit_as_previewed(&s, &p).await;
    assert_eq!(document_names(&s).await, ["e.txt"]);

    // Names of one upload are the same whatever the case of their letters, ASCII or not.
    let cased = [("Äpfel.txt", b"one".to_vec()), ("äPFEL.txt", b"two".to_vec())];
    let p = s.preview(kb, &cased, Some((1, 0))).await.assert_ok().clone();
    assert_eq!(api_tests::preview_decisions(&p), ["NEW", "REJECT"]);
}

/// Uploads `bytes` as `token`'s resource through a presigned PUT, registered with `bizType`
/// document; returns the resource.
async fn presigned_document(app: &api_tests::TestApp, token: &str, name: &str, bytes: &[u8]) -> Value {
    let ask = json!({ "originalName": name, "fileSize": bytes.len() });
    let presigned = app
        .post("/resource/upload-url", Some(token), &ask)
        .await
        .assert_ok()
        .clone();
    let url = presigned["uploadUrl"].as_str().unwrap();
    let url = match url.starts_with('/') {
        true => format!("{}{url}", app.origin),
        false => url.to_owned(),
    };
    let mut put = app.client.put(&url).body(bytes.to_vec());
    for (header, value) in presigned["headers"].as_object().expect("headers") {
        put = put.header(header, value.as_str().expect("header value"));
    }
    assert!(put.send().await.unwrap().status().is_success());
    let complete = json!({ "storageKey": presigned["storageKey"], "originalName": name, "bizType": "document" });
    app.post("/resource/upload/complete", Some(token), &complete)
        .await
        .assert_ok()
        .clone()
}

fn sha256(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// On AWS a request carries at most about 4.5 MB of file: larger documents reach a base as
/// resources sent through a presigned PUT, then previewed from there. Bad requests move
/// nothing; another user's resource or base answers as an unknown one.
#[tokio::test]
async fn documents_previewed_from_presigned_uploads() {
    let s = KbSetup::new(Store::Filesystem, &[("MAX_UPLOAD_BYTES", "4096")]).await;
    let (app, t) = (&s.app, Some(s.admin.as_str()));
    let kb = s.kb("Large files", json!({})).await;
    let rows: String = (0..60).map(|i| format!("person {i},city {i}\n")).collect();
    let csv = format!("{PEOPLE_CSV}{rows}");
    let presigned = presigned_document(app, &s.admin, "people.csv", csv.as_bytes()).await;
    let direct = app
        .upload_resource(
            &s.admin,
            "notes.txt",
            NOTES_TXT.as_bytes().to_vec(),
            Some(("Document", "7")),
        )
        .await
        .assert_ok()
        .clone();
    let avatar = app
        .upload_resource(&s.admin, "me.txt", b"not for a base".to_vec(), Some(("avatar", "1")))
        .await
        .assert_ok()
        .clone();
    let too_big = presigned_document(app, &s.admin, "big.txt", &[b'x'; 5000]).await;
    let (_, other) = app.regular_user("other").await;
    let others = app
        .upload_resource(
            &other,
            "theirs.txt",
            b"someone else's".to_vec(),
            Some(("document", "1")),
        )
        .await
        .assert_ok()
        .clone();
    let resources = || async {
        sqlx::query_as::<_, (i64, Option<String>)>("SELECT id, biz_type FROM resources ORDER BY id")
            .fetch_all(&app.db)
            .await
            .unwrap()
    };
    let before = resources().await;

    let ask = |body: Value| async move { app.post("/document/upload/preview-from-resources", t, &body).await };
    let (p, d) = (presigned["id"].clone(), direct["id"].clone());
    ask(json!({ "resourceIds": [p] }))
        .await
        .assert_error(400, 0, "ragId is required");
    ask(json!({ "ragId": kb, "resourceIds": [] }))
        .await
        .assert_error(400, 0, "resourceIds is required");
    ask(json!({ "ragId": kb, "resourceIds": [p, d, p] }))
        .await
        .assert_error(400, 0, &format!("resourceIds[2]: resource {p} is listed twice"));
    ask(json!({ "ragId": kb, "resourceIds": [p], "dedupStrategy": 9 }))
        .await
        .assert_error(400, 0, "dedupStrategy");
    ask(json!({ "ragId": kb, "resourceIds": [p, avatar["id"]] }))
        .await
        .assert_error(400, 0, "resourceIds[1]: resource");
    ask(json!({ "ragId": kb, "resourceIds": [too_big["id"]] }))
        .await
        .assert_error(413, 413, "resourceIds[0]: big.txt exceeds the limit of 4096 bytes");
    let unknown = ask(json!({ "ragId": kb, "resourceIds": [p, 987_654] })).await;
    unknown.assert_error(404, 404, "resource");
    let hidden = ask(json!({ "ragId": kb, "resourceIds": [p, others["id"]] })).await;
    hidden.assert_error(404, 404, "resource");
    assert_eq!(hidden.msg(), unknown.msg());
    let theirs = json!({ "ragId": kb, "resourceIds": [others["id"]] });
    let not_theirs = app
        .post("/document/upload/preview-from-resources", Some(&other), &theirs)
        .await;
    let no_base = json!({ "ragId": 987_654, "resourceIds": [others["id"]] });
    let no_base = app
        .post("/document/upload/preview-from-resources", Some(&other), &no_base)
        .await;
    not_theirs.assert_error(404, 404, "knowledge base");
    assert_eq!(not_theirs.msg(), no_base.msg());
    assert_eq!(resources().await, before, "refusals move nothing");
    assert_eq!(app.count("upload_previews").await, 0);

    let preview = ask(json!({ "ragId": kb, "resourceIds": [p, d] }))
        .await
        .assert_ok()
        .clone();
    let items = preview["items"].as_array().unwrap();
    assert_eq!(api_tests::preview_decisions(&preview), ["NEW", "NEW"]);
    assert_eq!(
        (items[0]["tempResourceId"].clone(), items[1]["tempResourceId"].clone()),
        (p.clone(), d.clone())
    );
    assert_eq!(
        items[0]["contentHash"],
        sha256(csv.as_bytes()),
        "hashed from the stored file"
    );
    assert_eq!(items[1]["contentHash"], sha256(NOTES_TXT.as_bytes()));
    assert_eq!(
        (items[0]["fileType"].as_str(), items[0]["fileSize"].as_u64()),
        (Some("csv"), Some(csv.len() as u64))
    );
    ask(json!({ "ragId": kb, "resourceIds": [d] }))
        .await
        .assert_error(400, 0, "already part of an upload preview");

    let committed = commit_as_previewed(&s, &preview).await;
    let ids: Vec<i64> = committed["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_i64().unwrap())
        .collect();
    for id in &ids {
        assert_eq!(s.settled(*id).await["status"], "success");
    }
    assert!(s.chunk_texts(ids[0]).await.join("\n").contains("person 59"));
    let key: String = sqlx::query_scalar("SELECT storage_key FROM documents WHERE id = $1")
        .bind(ids[0])
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(key, presigned["storageKey"].as_str().unwrap(), "moved, not copied");
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM resources WHERE id = ANY($1)")
        .bind(vec![p.as_i64().unwrap(), d.as_i64().unwrap()])
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(left, 0, "the preview's files became the documents'");

    // A cancelled preview deletes the file, as any preview's.
    let dropped = presigned_document(app, &s.admin, "dropped.md", GUIDE_MD.as_bytes()).await;
    let preview = ask(json!({ "ragId": kb, "resourceIds": [dropped["id"]] }))
        .await
        .assert_ok()
        .clone();
    app.delete(
        &format!("/document/upload/preview/{}", preview["previewToken"].as_str().unwrap()),
        t,
    )
    .await
    .assert_ok();
    let dropped_key = dropped["storageKey"].as_str().unwrap();
    assert_eq!(app.state.storage().head(dropped_key).await.unwrap(), None);
    assert_eq!(app.count("documents").await, 2);
}

/// The worker's log lines for a document name the request that queued it (its `x-request-id`),
/// so an upload's failure can be found from the request, with traces off too.
#[tokio::test]
async fn worker_log_lines_name_the_request_that_queued_the_document() {
    let logs = api_tests::mcp_servers::LogCapture::start();
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let kb = s.kb("Logged", json!({})).await;
    let broken = [("broken.xlsx", b"this is not a spreadsheet".to_vec())];
    let p = s.preview(kb, &broken, None).await.assert_ok().clone();
    let body = json!({ "previewToken": p["previewToken"], "items": [{ "tempResourceId": p["items"][0]["tempResourceId"], "decision": "NEW" }] });
    let commit = s
        .app
        .client
        .post(s.app.url("/document/upload/commit"))
        .header("Svc-Auth", &s.admin)
        .header("x-request-id", "commit-7f3a")
        .json(&body);
    let reply = s.app.send(commit).await;
    let id = reply.assert_ok()["items"][0]["id"].as_i64().unwrap();
    assert_eq!(s.settled(id).await["status"], "failed");
    let text = logs.text();
    let failed = text
        .lines()
        .find(|line| line.contains("document failed") && line.contains(&format!("document_id={id}")))
        .unwrap_or_else(|| panic!("no failure logged for document {id}:\n{text}"));
    assert!(
        failed.contains("process_message") && failed.contains("request_id=commit-7f3a"),
        "{failed}"
    );
}

/// Commits every file of the preview `p` with the decision the preview proposed.
async fn commit_as_previewed(s: &KbSetup, p: &Value) -> Value {
    let items: Vec<Value> = p["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| json!({ "tempResourceId": i["tempResourceId"], "decision": i["decision"] }))
        .collect();
    let body = json!({ "previewToken": p["previewToken"], "items": items });
    s.app
        .post("/document/upload/commit", Some(&s.admin), &body)
        .await
        .assert_ok()
        .clone()
}

async fn document_names(s: &KbSetup) -> Vec<String> {
    sqlx::query_scalar("SELECT name FROM documents ORDER BY id")
        .fetch_all(&s.app.db)
        .await
        .unwrap()
}

#[tokio::test]
async fn commit_reports_conflicts_that_changed_since_the_preview() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let t = Some(s.admin.as_str());
    let kb = s.kb("Race", json!({ "dedupStrategy": 2, "dedupAction": 0 })).await;
    let file = [("x.txt", b"same bytes".to_vec())];
    let first = s.preview(kb, &file, None).await.assert_ok().clone();
    let second = s.preview(kb, &file, None).await.assert_ok().clone();
    assert_eq!(first["items"][0]["decision"], "NEW");
    let commit = |p: &Value| json!({ "previewToken": p["previewToken"], "items": [{ "tempResourceId": p["items"][0]["tempResourceId"], "decision": "NEW" }] });
    let done = s.app.post("/document/upload/commit", t, &commit(&second)).await;
    assert_eq!(done.assert_ok()["conflictChanged"], false);
    let stale = s.app.post("/document/upload/commit", t, &commit(&first)).await;
    let r = stale.assert_ok().clone();
    assert_eq!(r["conflictChanged"], true);
    assert_eq!(
        (r["items"][0]["decision"].as_str(), r["items"][0]["matchType"].as_str()),
        (Some("REJECT"), Some("BY_CONTENT"))
    );
    assert!(r["items"][0]["id"].is_null());
    assert_eq!(
        s.app.count("documents").await,
        1,
        "nothing committed on a changed picture"
    );
    s.app
        .post(
            "/document/upload/commit",
            t,
            &json!({ "previewToken": "nope", "items": [] }),
        )
        .await
        .assert_error(404, 404, "previewToken not found");
    s.app
        .post("/document/upload/commit", t, &json!({ "items": [] }))
        .await
        .assert_error(400, 0, "previewToken is required");
    let bad =
        json!({ "previewToken": first["previewToken"], "items": [{ "tempResourceId": 424242, "decision": "NEW" }] });
    s.app.post("/document/upload/commit", t, &bad).await.assert_error(
        400,
        0,
        "items[0].tempResourceId 424242 is not part of this preview",
    );
    let bad = json!({ "previewToken": first["previewToken"], "items": [{ "tempResourceId": 1, "decision": "MAYBE" }] });
    s.app
        .post("/document/upload/commit", t, &bad)
        .await
        .assert_error(400, 0, "items[0].decision must be");
}

/// A preview may override the base's dedup rules; its commit re-checks with those rules, so
/// nothing changed in between means nothing to confirm.
#[tokio::test]
async fn commit_rechecks_with_the_rules_of_its_preview() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let t = Some(s.admin.as_str());
    // The base's own rules: by content, reject.
    let kb = s.kb("Rules", json!({ "dedupStrategy": 2, "dedupAction": 0 })).await;
    let twins = [("b.txt", b"same passage".to_vec()), ("c.txt", b"same passage".to_vec())];
    let p = s.preview(kb, &twins, Some((0, 0))).await.assert_ok().clone();
    let verdicts: Vec<(&str, &str)> = p["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["decision"].as_str().unwrap(), i["matchType"].as_str().unwrap()))
        .collect();
    assert_eq!(verdicts, [("NEW", "NONE"), ("NEW", "NONE")]);
    let items: Vec<Value> = p["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| json!({ "tempResourceId": i["tempResourceId"], "decision": "NEW" }))
        .collect();
    let body = json!({ "previewToken": p["previewToken"], "items": items });
    let done = s.app.post("/document/upload/commit", t, &body).await;
    let r = done.assert_ok().clone();
    assert_eq!(r["conflictChanged"], false, "{r}");
    assert!(r["items"].as_array().unwrap().iter().all(|i| i["id"].is_i64()), "{r}");
    assert_eq!(s.app.count("documents").await, 2);

    // A real change still counts under the preview's rules: by name, and another upload
    // takes the name in between.
    let one = [("d.txt", b"first".to_vec())];
    let stale = s.preview(kb, &one, Some((1, 0))).await.assert_ok().clone();
    let other = s.preview(kb, &[("d.txt", b"second".to_vec())], Some((0, 0))).await;
    let other = other.assert_ok().clone();
    let commit = |p: &Value| json!({ "previewToken": p["previewToken"], "items": [{ "tempResourceId": p["items"][0]["tempResourceId"], "decision": "NEW" }] });
    let c = s.app.post("/document/upload/commit", t, &commit(&other)).await;
    assert_eq!(c.assert_ok()["conflictChanged"], false);
    let c = s.app.post("/document/upload/commit", t, &commit(&stale)).await;
    let r = c.assert_ok().clone();
    assert_eq!(r["conflictChanged"], true, "{r}");
    assert_eq!(
        (r["items"][0]["decision"].as_str(), r["items"][0]["matchType"].as_str()),
        (Some("REJECT"), Some("BY_NAME"))
    );
    assert_eq!(s.app.count("documents").await, 3, "the stale commit committed nothing");
}

#[tokio::test]
async fn failures_are_precise_and_leave_nothing_half_indexed() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let t = Some(s.admin.as_str());
    let kb = s.kb("Faults", json!({})).await;
    // An unparseable file: failed at parsing, with the reason, and no chunks.
    let reply = s
        .upload(
            kb,
            &[
                ("broken.xlsx", b"this is not a spreadsheet".to_vec()),
                ("virus.exe", b"MZ".to_vec()),
            ],
        )
        .await;
    let r = reply.assert_ok().clone();
    assert_eq!(
        r["items"][1]["decision"], "SKIP",
        "unsupported types are rejected at preview"
    );
    let id = r["items"][0]["id"].as_i64().unwrap();
    let d = s.settled(id).await;
    assert_eq!(
        (d["status"].as_str(), d["errorStage"].as_str()),
        (Some("failed"), Some("parsing")),
        "{d}"
    );
    assert!(d["errorMessage"].as_str().unwrap().contains("xlsx"), "{d}");
    assert!(s.chunk_texts(id).await.is_empty());

    // The embedding endpoint down: retried, then failed after the last delivery with the reason.
    let dead = s
        .app
        .unreachable_embedding_model(&s.admin, json!({ "maxRetries": 0 }))
        .await;
    let kb2 = s
        .kb("Down", json!({ "embeddingModelId": dead, "dimensionOfVectorModel": 8 }))
        .await;
    let reply = s.upload(kb2, &[("n.txt", NOTES_TXT.as_bytes().to_vec())]).await;
    let id = doc_ids(&reply).await[0];
    let d = s.settled(id).await;
    assert_eq!(
        (d["status"].as_str(), d["errorStage"].as_str()),
        (Some("failed"), Some("embedding")),
        "{d}"
    );
    assert!(d["errorMessage"].as_str().unwrap().contains("cannot be reached"), "{d}");
    // What failed, not what the network or the endpoint said (the model may be someone else's).
    assert!(!d["errorMessage"].as_str().unwrap().contains("127.0.0.1"), "{d}");
    assert!(s.chunk_texts(id).await.is_empty(), "nothing half-indexed");

    // Fix the endpoint and reprocess: the same document completes.
    let url = s.models.base_url.clone();
    s.app
        .put(&format!("/ai-model/config/{dead}"), t, &json!({ "apiEndpoint": url }))
        .await
        .assert_status_ok();
    let again = s.app.post(&format!("/document/{id}/reprocess"), t, &json!({})).await;
    // A new run has started (the worker may already have picked it up).
    let status = again.assert_ok()["status"].as_str().unwrap_or_default().to_owned();
    assert!(
        ["pending", "parsing", "chunking", "embedding", "success"].contains(&status.as_str()),
        "{status}"
    );
    let d = s.settled(id).await;
    assert_eq!(d["status"], "success", "{d}");
    assert!(d["errorMessage"].is_null());
    // A document deleted between the reprocess's check and its restart is not found (404),
    // not a failed statement (500).
    let gone = shared::rag::documents::repo::restart(&s.app.db, id + 1000, 1)
        .await
        .unwrap();
    assert!(gone.is_none());
}

#[tokio::test]
async fn redelivery_and_duplicates_yield_one_set_of_chunks() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let kb = s.kb("Once", json!({})).await;
    let reply = s.upload(kb, &[("guide.md", GUIDE_MD.as_bytes().to_vec())]).await;
    let id = doc_ids(&reply).await[0];
    s.settled(id).await;
    let first = s.chunk_texts(id).await;
    let (run_id,): (uuid::Uuid,) = sqlx::query_as("SELECT run_id FROM documents WHERE id = $1")
        .bind(id)
        .fetch_one(&s.app.db)
        .await
        .unwrap();
    let message = json!({ "documentId": id, "runId": run_id }).to_string();

    // The same message delivered twice more, at once.
    let handler = shared::rag::pipeline::handler(s.app.state.clone());
    let event = shared::queue::event(vec![
        shared::queue::message("m1", &message, 1, None),
        shared::queue::message("m2", &message, 1, None),
    ]);
    let answer = handler(event, None).await.unwrap();
    assert!(answer.batch_item_failures.is_empty());
    assert_eq!(s.chunk_texts(id).await, first);

    // A worker that died mid-document: the run is still leased and half way; once the lease
    // runs out, redelivery finishes it with exactly one set of chunks.
    sqlx::query("UPDATE documents SET status = 'embedding', progress = 60, lease_until = now() - interval '1 second' WHERE id = $1")
        .bind(id)
        .execute(&s.app.db)
        .await
        .unwrap();
    sqlx::query("DELETE FROM chunks WHERE document_id = $1 AND chunk_index > 0")
        .bind(id)
        .execute(&s.app.db)
        .await
        .unwrap();
    let answer = handler(
        shared::queue::event(vec![shared::queue::message("m3", &message, 2, None)]),
        None,
    )
    .await
    .unwrap();
    assert!(answer.batch_item_failures.is_empty());
    assert_eq!(s.chunk_texts(id).await, first);
    // A leased run is not processed twice at the same time: the second delivery is retried.
    sqlx::query("UPDATE documents SET status = 'parsing', lease_until = now() + interval '1 minute' WHERE id = $1")
        .bind(id)
        .execute(&s.app.db)
        .await
        .unwrap();
    let answer = handler(
        shared::queue::event(vec![shared::queue::message("m4", &message, 1, None)]),
        None,
    )
    .await
    .unwrap();
    assert_eq!(answer.batch_item_failures.len(), 1);
    // A poison message is reported failed (and so reaches the DLQ after its receives).
    let answer = handler(
        shared::queue::event(vec![shared::queue::message("m5", "not json", 1, None)]),
        None,
    )
    .await
    .unwrap();
    assert_eq!(answer.batch_item_failures[0].item_identifier, "m5");
}

/// A worker that died while parsing (out of memory on a hostile file, a crashed parser) left
/// its lease to run out: the next delivery fails the document at parsing instead of parsing it
/// again, while one that died at a later stage is taken up again (above).
#[tokio::test]
async fn a_document_whose_worker_died_while_parsing_is_failed_not_parsed_again() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let kb = s.kb("Fatal", json!({})).await;
    let id = doc_ids(&s.upload(kb, &[("n.txt", NOTES_TXT.as_bytes().to_vec())]).await).await[0];
    s.settled(id).await;
    let (run_id,): (uuid::Uuid,) = sqlx::query_as("SELECT run_id FROM documents WHERE id = $1")
        .bind(id)
        .fetch_one(&s.app.db)
        .await
        .unwrap();
    sqlx::query("UPDATE documents SET status = 'parsing', progress = 5, lease_until = now() - interval '1 second' WHERE id = $1")
        .bind(id)
        .execute(&s.app.db)
        .await
        .unwrap();
    let message = json!({ "documentId": id, "runId": run_id }).to_string();
    let handler = shared::rag::pipeline::handler(s.app.state.clone());
    let answer = handler(
        shared::queue::event(vec![shared::queue::message("m1", &message, 2, None)]),
        None,
    )
    .await
    .unwrap();
    assert!(answer.batch_item_failures.is_empty());
    let (status, stage, error, lease): (
        String,
        Option<String>,
        Option<String>,
        Option<chrono::DateTime<chrono::Utc>>,
    ) = sqlx::query_as("SELECT status, error_stage, error_message, lease_until FROM documents WHERE id = $1")
        .bind(id)
        .fetch_one(&s.app.db)
        .await
        .unwrap();
    assert_eq!(
        (status.as_str(), stage.as_deref(), lease),
        ("failed", Some("parsing"), None)
    );
    assert!(error.unwrap_or_default().contains("stopped while parsing"));
}

/// Chunks of one document added and removed at once all go through: each holds the
/// document's row the way it writes its chunk count, so none waits for another's hold while
/// holding its own (a deadlock Postgres ends with 409).
#[tokio::test]
async fn chunks_of_one_document_are_added_and_removed_at_once() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let t = Some(s.admin.as_str());
    let kb = s.kb("Busy", json!({})).await;
    let id = doc_ids(&s.upload(kb, &[("n.txt", NOTES_TXT.as_bytes().to_vec())]).await).await[0];
    s.settled(id).await;
    let body = json!({ "ragId": kb, "documentId": id, "content": "Added at the same time." });
    let mut chunks = Vec::new();
    for _ in 0..4 {
        let added = s.app.post("/chunk", t, &body).await;
        chunks.push(added.assert_ok()["id"].as_i64().unwrap());
    }
    let before = s.chunk_texts(id).await.len();
    let paths: Vec<String> = chunks.iter().map(|c| format!("/chunk/{c}")).collect();
    let removals = futures::future::join_all(paths.iter().map(|p| s.app.delete(p, t)));
    let additions = futures::future::join_all((0..4).map(|_| s.app.post("/chunk", t, &body)));
    let (removed, added) = tokio::join!(removals, additions);
    for reply in removed.iter().chain(&added) {
        reply.assert_ok();
    }
    assert_eq!(s.chunk_texts(id).await.len(), before);
    let count = s.app.get(&format!("/document/{id}"), t).await.assert_ok()["chunkCount"].clone();
    assert_eq!(count, before as i64);
}

/// An upload that is stored while its base is deleted answers as if the base had been gone
/// when it came (404), not with a server error over the base's foreign key.
#[tokio::test]
async fn an_upload_into_a_base_being_deleted_is_not_found() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let kb = s.kb("Going", json!({})).await;
    let files = [("guide.md", GUIDE_MD.as_bytes().to_vec())];
    let upload = s.app.preview_documents(&s.admin, kb, &files, None);
    let reply = api_tests::while_deleted(&s.app.db, "knowledge_bases", kb, upload).await;
    reply.assert_error(404, 404, "knowledge base not found");
    assert_eq!(
        (s.app.count("documents").await, s.app.count("upload_previews").await),
        (0, 0)
    );
}

/// A redelivered message that reads its run as still working, and takes the lease just after
/// the run finished (its lease ended with it), does not run it again: that would embed the
/// document once more, paid, and replace its chunks, edits among them.
#[tokio::test]
async fn a_run_that_finishes_as_its_redelivery_starts_is_not_run_again() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let kb = s.kb("Redelivered", json!({})).await;
    let id = doc_ids(&s.upload(kb, &[("guide.md", GUIDE_MD.as_bytes().to_vec())]).await).await[0];
    s.settled(id).await;
    let chunks = || async {
        sqlx::query_scalar::<_, Vec<i64>>("SELECT array_agg(id ORDER BY id) FROM chunks WHERE document_id = $1")
            .bind(id)
            .fetch_one(&s.app.db)
            .await
            .unwrap()
    };
    let before = chunks().await;
    let run_id: uuid::Uuid = sqlx::query_scalar(
        "UPDATE documents SET status = 'embedding', lease_until = now() - interval '1 second' WHERE id = $1
         RETURNING run_id",
    )
    .bind(id)
    .fetch_one(&s.app.db)
    .await
    .unwrap();
    // The first delivery's worker finishing, past its lease: its last write, not yet committed
    // (the redelivery's lease waits for it, then reads the row as it left it).
    let mut finishing = s.app.db.begin().await.unwrap();
    sqlx::query("UPDATE documents SET status = 'success', lease_until = NULL WHERE id = $1")
        .bind(id)
        .execute(&mut *finishing)
        .await
        .unwrap();
    let message = json!({ "documentId": id, "runId": run_id }).to_string();
    let handler = shared::rag::pipeline::handler(s.app.state.clone());
    let redelivered = handler(
        shared::queue::event(vec![shared::queue::message("m1", &message, 2, None)]),
        None,
    );
    let finish = async {
        api_tests::until_a_statement_waits_for_a_lock(&s.app.db).await;
        finishing.commit().await.unwrap();
    };
    let (answer, ()) = tokio::join!(redelivered, finish);
    answer.unwrap();
    let d = s.app.get(&format!("/document/{id}"), Some(&s.admin)).await;
    assert_eq!(d.assert_ok()["status"], "success");
    assert_eq!(chunks().await, before, "the chunks the run wrote");
}

/// A run whose document is reprocessed (or deleted) while it works stops at its next stage
/// instead of embedding, and paying for, chunks nobody will keep.
#[tokio::test]
async fn a_superseded_run_stops_before_its_model_calls() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let kb = s.kb("Superseded", json!({})).await;
    let reply = s.upload(kb, &[("guide.md", GUIDE_MD.as_bytes().to_vec())]).await;
    let id = doc_ids(&reply).await[0];
    s.settled(id).await;
    let before = usage_count(&s, "%").await;
    run_replaced_at_chunking(&s, id).await;
    assert_eq!(
        usage_count(&s, "%").await,
        before,
        "no embedding call for the superseded run"
    );
}

/// Model calls recorded of the kinds `like` matches.
async fn usage_count(s: &KbSetup, like: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM model_usage WHERE call_kind LIKE $1")
        .bind(like)
        .fetch_one(&s.app.db)
        .await
        .unwrap()
}

/// Runs the ingestion of the settled document `id` again, its run replaced (as a reprocess
/// does) the moment it reaches chunking.
async fn run_replaced_at_chunking(s: &KbSetup, id: i64) {
    let (run_id,): (uuid::Uuid,) = sqlx::query_as("SELECT run_id FROM documents WHERE id = $1")
        .bind(id)
        .fetch_one(&s.app.db)
        .await
        .unwrap();
    for sql in [
        "UPDATE documents SET status = 'pending', lease_until = NULL WHERE id = $1",
        "CREATE FUNCTION reprocess_now() RETURNS trigger LANGUAGE plpgsql AS
           $$ BEGIN NEW.run_id := gen_random_uuid(); RETURN NEW; END $$",
        "CREATE TRIGGER reprocess_now BEFORE UPDATE ON documents FOR EACH ROW
           WHEN (NEW.status = 'chunking') EXECUTE FUNCTION reprocess_now()",
    ] {
        sqlx::query(sql).bind(id).execute(&s.app.db).await.unwrap();
    }
    let message = json!({ "documentId": id, "runId": run_id }).to_string();
    let handler = shared::rag::pipeline::handler(s.app.state.clone());
    let answer = handler(
        shared::queue::event(vec![shared::queue::message("m1", &message, 1, None)]),
        None,
    )
    .await
    .unwrap();
    assert!(answer.batch_item_failures.is_empty());
}

#[tokio::test]
async fn chunks_by_hand_are_embedded() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let t = Some(s.admin.as_str());
    let kb = s.kb("Hand", json!({})).await;
    let id = doc_ids(&s.upload(kb, &[("n.txt", NOTES_TXT.as_bytes().to_vec())]).await).await[0];
    s.settled(id).await;
    let before = s.chunk_texts(id).await.len();
    let created = s
        .app
        .post(
            "/chunk",
            t,
            &json!({ "ragId": kb, "documentId": id, "content": "A hand-written fact about foxes." }),
        )
        .await;
    let c = created.assert_ok().clone();
    let chunk = c["id"].as_i64().unwrap();
    assert_eq!(
        (c["vectorStatus"].as_str(), c["chunkIndex"].as_i64()),
        (Some("success"), Some(before as i64))
    );
    let vector = |app: &api_tests::TestApp| {
        let db = app.db.clone();
        async move {
            sqlx::query_scalar::<_, Option<String>>("SELECT embedding::text FROM chunks WHERE id = $1")
                .bind(chunk)
                .fetch_one(&db)
                .await
                .unwrap()
        }
    };
    let v1 = vector(&s.app).await.expect("embedded");
    s.app
        .put(
            &format!("/chunk/{chunk}"),
            t,
            &json!({ "content": "Completely different words now." }),
        )
        .await
        .assert_ok();
    let v2 = vector(&s.app).await.expect("embedded again");
    assert_ne!(v1, v2);
    assert_eq!(s.word_count_drift().await, 0, "word counts follow an edited chunk");
    assert_eq!(
        s.app.get(&format!("/document/{id}"), t).await.assert_ok()["chunkCount"],
        before as i64 + 1
    );
    s.app
        .post("/chunk", t, &json!({ "ragId": kb, "documentId": id }))
        .await
        .assert_error(400, 0, "content is required");
    s.app
        .post(
            "/chunk",
            t,
            &json!({ "ragId": kb, "documentId": 999999, "content": "x" }),
        )
        .await
        .assert_error(404, 404, "document not found");
    s.app
        .put(&format!("/chunk/{chunk}"), t, &json!({ "content": "  " }))
        .await
        .assert_error(400, 0, "content is required");
    // Longer than the base's chunks may be: refused before the paid embedding call.
    let (calls, chunks) = (s.app.count("model_usage").await, s.app.count("chunks").await);
    let long = "fox ".repeat(5000);
    s.app
        .post("/chunk", t, &json!({ "ragId": kb, "documentId": id, "content": long }))
        .await
        .assert_error(400, 0, "(maxChunkTokens)");
    s.app
        .put(&format!("/chunk/{chunk}"), t, &json!({ "content": long }))
        .await
        .assert_error(400, 0, "tokens; this knowledge base's chunks hold at most");
    assert_eq!(
        (s.app.count("model_usage").await, s.app.count("chunks").await),
        (calls, chunks)
    );
    assert_eq!(
        s.chunk_texts(id).await.last().map(String::as_str),
        Some("Completely different words now.")
    );
    // While its document is processed, no chunk is written by hand: the run's final write
    // replaces them all, and one written meanwhile was answered, charged, and then gone.
    let set_status = |status: &'static str| {
        let db = s.app.db.clone();
        async move {
            sqlx::query("UPDATE documents SET status = $2 WHERE id = $1")
                .bind(id)
                .bind(status)
                .execute(&db)
                .await
                .unwrap();
        }
    };
    set_status("embedding").await;
    let untouched = s.app.snapshot().await;
    let late = json!({ "ragId": kb, "documentId": id, "content": "late" });
    for refused in [
        s.app.post("/chunk", t, &late).await,
        s.app.put(&format!("/chunk/{chunk}"), t, &late).await,
        s.app.delete(&format!("/chunk/{chunk}"), t).await,
    ] {
        refused.assert_error(409, 409, &format!("document {id} is being processed (embedding)"));
    }
    assert_eq!(s.app.snapshot().await, untouched, "nothing written, nothing charged");
    set_status("success").await;
    s.app.delete(&format!("/chunk/{chunk}"), t).await.assert_ok();
    assert_eq!(s.chunk_texts(id).await.len(), before);
    assert_eq!(s.word_count_drift().await, 0, "word counts follow a deleted chunk");
    s.app
        .delete(&format!("/chunk/{chunk}"), t)
        .await
        .assert_error(404, 404, "chunk not found");

    use futures::FutureExt;
    // Edits sent while a document's deletion is under way wait for it and find the document
    // gone (404); before, they wrote past its removal of the chunks' store entries, or failed
    // with 500.
    let files: Vec<(&str, Vec<u8>)> = ["p.txt", "q.txt", "r.txt"]
        .iter()
        .map(|name| (*name, format!("{name}: {NOTES_TXT}").into_bytes()))
        .collect();
    let docs = doc_ids(&s.upload(kb, &files).await).await;
    for (method, doc) in ["PUT", "DELETE", "POST"].into_iter().zip(docs) {
        s.settled(doc).await;
        let chunk: i64 = sqlx::query_scalar("SELECT min(id) FROM chunks WHERE document_id = $1")
            .bind(doc)
            .fetch_one(&s.app.db)
            .await
            .unwrap();
        let mut deleting = s.app.db.begin().await.unwrap();
        sqlx::query("DELETE FROM documents WHERE id = $1")
            .bind(doc)
            .execute(&mut *deleting)
            .await
            .unwrap();
        let path = format!("/chunk/{chunk}");
        let late = json!({ "content": "late" });
        let added = json!({ "ragId": kb, "documentId": doc, "content": "late" });
        let (edit, told) = match method {
            "PUT" => (s.app.put(&path, t, &late).boxed(), "chunk not found"),
            "DELETE" => (s.app.delete(&path, t).boxed(), "chunk not found"),
            _ => (s.app.post("/chunk", t, &added).boxed(), "document not found"),
        };
        let deleted = async {
            api_tests::until_a_statement_waits_for_a_lock(&s.app.db).await;
            deleting.commit().await.unwrap();
        };
        let (edited, ()) = tokio::join!(edit, deleted);
        edited.assert_error(404, 404, told);
        assert_eq!(s.chunk_texts(doc).await.len(), 0, "{method}");
    }
}

/// The word counts full-text search plans with stay exact through every way chunks change:
/// documents indexed at once (writers of one base take turns, so none deadlocks), reprocessed,
/// deleted.
#[tokio::test]
async fn word_counts_follow_every_chunk_write() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let t = Some(s.admin.as_str());
    let kb = s
        .kb("Counted", json!({ "maxChunkTokens": 16, "chunkOverlap": 0 }))
        .await;
    let other = s.kb("Other", json!({})).await;
    let files: Vec<(String, Vec<u8>)> = (0..6)
        .map(|i| {
            (
                format!("d{i}.txt"),
                format!("{NOTES_TXT}\n\nDocument number {i} about foxes.").into_bytes(),
            )
        })
        .collect();
    let named: Vec<(&str, Vec<u8>)> = files.iter().map(|(n, b)| (n.as_str(), b.clone())).collect();
    let ids = doc_ids(&s.upload(kb, &named).await).await;
    let theirs = doc_ids(&s.upload(other, &[("g.md", GUIDE_MD.as_bytes().to_vec())]).await).await;
    for id in ids.iter().chain(&theirs) {
        assert_eq!(s.settled(*id).await["status"], "success");
    }
    assert_eq!(s.word_count_drift().await, 0);
    let count = |term: &'static str, rag: i64| {
        let db = s.app.db.clone();
        async move {
            sqlx::query_scalar::<_, i32>("SELECT chunks FROM rag_terms WHERE rag_id = $1 AND term = $2")
                .bind(rag)
                .bind(term)
                .fetch_optional(&db)
                .await
                .unwrap()
        }
    };
    let chunks: i64 = sqlx::query_scalar("SELECT count(*) FROM chunks WHERE rag_id = $1")
        .bind(kb)
        .fetch_one(&s.app.db)
        .await
        .unwrap();
    assert_eq!(count("", kb).await, Some(chunks as i32), "the base's chunk count");
    assert_eq!(count("foxes", kb).await, Some(6));
    assert_eq!(count("foxes", other).await, None, "counts are per base");

    s.app
        .post(&format!("/document/{}/reprocess", ids[0]), t, &json!({}))
        .await
        .assert_ok();
    assert_eq!(s.settled(ids[0]).await["status"], "success");
    assert_eq!(s.word_count_drift().await, 0, "after reprocessing");
    s.app.delete(&format!("/document/{}", ids[1]), t).await.assert_ok();
    assert_eq!(s.word_count_drift().await, 0, "after deleting a document");
    assert_eq!(count("foxes", kb).await, Some(5));

    s.app.delete(&format!("/rag/{kb}"), t).await.assert_ok();
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM rag_terms WHERE rag_id = $1")
        .bind(kb)
        .fetch_one(&s.app.db)
        .await
        .unwrap();
    assert_eq!(left, 0, "a deleted base leaves no counts");
    assert_eq!(s.word_count_drift().await, 0, "the other base is untouched");
}

async fn deleting_leaves_nothing(store: Store) {
    let s = KbSetup::new(store, &[]).await;
    let t = Some(s.admin.as_str());
    let kb = s.kb("Gone", json!({})).await;
    let reply = s
        .upload(
            kb,
            &[
                ("guide.md", GUIDE_MD.as_bytes().to_vec()),
                ("n.txt", NOTES_TXT.as_bytes().to_vec()),
            ],
        )
        .await;
    for id in doc_ids(&reply).await {
        s.settled(id).await;
    }
    s.preview(kb, &[("pending.txt", b"waiting".to_vec())], None)
        .await
        .assert_ok();
    let keys: Vec<String> = sqlx::query_scalar(
        "SELECT storage_key FROM documents WHERE rag_id = $1 UNION ALL SELECT storage_key FROM resources",
    )
    .bind(kb)
    .fetch_all(&s.app.db)
    .await
    .unwrap();
    assert_eq!(keys.len(), 3);
    s.app.delete(&format!("/rag/{kb}"), t).await.assert_ok();
    for table in [
        "knowledge_bases",
        "documents",
        "chunks",
        "document_images",
        "upload_previews",
        "resources",
        "rag_terms",
    ] {
        assert_eq!(s.app.count(table).await, 0, "{table} emptied");
    }
    let index: Option<String> = sqlx::query_scalar("SELECT indexname::text FROM pg_indexes WHERE indexname = $1")
        .bind(format!("chunks_hnsw_kb_{kb}"))
        .fetch_optional(&s.app.db)
        .await
        .unwrap();
    assert!(index.is_none(), "the base's index is dropped");
    // The documents' files and the pending upload's.
    for key in &keys {
        assert!(
            s.app.state.storage().head(key).await.unwrap().is_none(),
            "{key} removed from storage"
        );
    }
}

#[tokio::test]
async fn deleting_a_knowledge_base_leaves_nothing_on_disk() {
    deleting_leaves_nothing(Store::Filesystem).await;
}

#[tokio::test]
async fn deleting_a_knowledge_base_leaves_nothing_in_s3() {
    deleting_leaves_nothing(Store::S3).await;
}

#[tokio::test]
async fn import_by_url_refuses_internal_addresses() {
    // Each path its own content, so that two imports are two documents, not duplicates.
    let files = axum::Router::new().route(
        "/docs/{name}",
        axum::routing::get(|axum::extract::Path(name): axum::extract::Path<String>| async move {
            format!("{GUIDE_MD}\n{}", name.replace('\0', ""))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/docs/readme.md", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, files).await });

    let closed = KbSetup::new(Store::Filesystem, &[]).await;
    let kb = closed.kb("Web", json!({})).await;
    let t = Some(closed.admin.as_str());
    let long = format!("https://example.com/{}", "a".repeat(2048));
    for (body, needle) in [
        (
            json!({ "ragId": kb, "url": url }),
            "resolves to an address imports may not reach",
        ),
        (
            json!({ "ragId": kb, "url": url.replace("127.0.0.1", "localhost") }),
            "url: localhost is unknown or resolves to an address imports may not reach",
        ),
        // Word for word what an internal name gets: whoever imports learns no internal names.
        (
            json!({ "ragId": kb, "url": "http://no-such-host.invalid/readme.md" }),
            "url: no-such-host.invalid is unknown or resolves to an address imports may not reach",
        ),
        (json!({ "ragId": kb, "url": "file:///etc/passwd" }), "http or https"),
        (json!({ "ragId": kb }), "url is required"),
        (
            json!({ "ragId": kb, "url": long }),
            "url must be 1 to 2048 characters long",
        ),
        // Kept as the document's source and shown with it: no password goes in.
        (
            json!({ "ragId": kb, "url": "https://alice:s3cret@mirror.example.com/h.md" }),
            "url must not hold credentials (user:password@)",
        ),
    ] {
        closed
            .app
            .post("/document/import/url", t, &body)
            .await
            .assert_error(400, 0, needle);
    }
    assert_eq!(closed.app.count("documents").await, 0);

    // The operator's outbound lists bind imports too: a range only a list names (here a
    // documentation range standing for a VPC's global IPv6 one) is refused before any
    // connection, and a host allowed for imports still obeys the list every call obeys.
    let listed = KbSetup::new(
        Store::Filesystem,
        &[
            ("OUTBOUND_USER_DENY_CIDRS", "198.51.100.0/24"),
            ("OUTBOUND_DENY_CIDRS", "127.0.0.2/32"),
            ("IMPORT_URL_ALLOW_HOSTS", "127.0.0.2"),
            ("URL_IMPORT_TIMEOUT_SECS", "2"),
        ],
    )
    .await;
    let kb = listed.kb("Web", json!({})).await;
    for url in ["http://198.51.100.7/readme.md", "http://127.0.0.2/readme.md"] {
        listed
            .app
            .post(
                "/document/import/url",
                Some(&listed.admin),
                &json!({ "ragId": kb, "url": url }),
            )
            .await
            .assert_error(400, 0, "resolves to an address imports may not reach");
    }
    assert_eq!(listed.app.count("documents").await, 0);

    let open = KbSetup::new(Store::Filesystem, &[("IMPORT_URL_ALLOW_HOSTS", "127.0.0.1")]).await;
    let kb = open.kb("Web", json!({})).await;
    let import = async |body: Value| open.app.post("/document/import/url", Some(&open.admin), &body).await;
    let reply = import(json!({ "ragId": kb, "url": url })).await;
    let d = reply.assert_ok().clone();
    assert_eq!(
        (d["name"].as_str(), d["sourceType"].as_str(), d["sourcePath"].as_str()),
        (Some("readme.md"), Some("url"), Some(url.as_str()))
    );
    assert_eq!(
        (d["decision"].as_str(), d["matchType"].as_str()),
        (Some("NEW"), Some("NONE"))
    );
    let first = d["id"].as_i64().unwrap();
    let done = open.settled(first).await;
    assert_eq!(done["status"], "success");
    // A name taken from the URL is cleaned like one sent in the request.
    let nul = url.replace("readme.md", "guide%00two.md");
    let d = import(json!({ "ragId": kb, "url": nul })).await;
    assert_eq!(d.assert_ok()["name"], "guidetwo.md");
    // A name sent is a title: it takes the URL's type, and may not name another.
    let d = import(json!({ "ragId": kb, "url": url.replace("readme.md", "titled.md"), "name": "Titled guide" })).await;
    assert_eq!(d.assert_ok()["name"], "Titled guide.md");
    assert_eq!(d.data()["fileType"], "md");
    let before = open.app.count("documents").await;
    import(json!({ "ragId": kb, "url": url.replace("readme.md", "other.md"), "name": "other.txt" }))
        .await
        .assert_error(400, 0, "name: other.txt names a .txt file, but the url's file is .md");
    assert_eq!(open.app.count("documents").await, before);
    // What dedup skipped is said to be skipped: the answer is the document already there.
    open.app
        .put(&format!("/rag/{kb}"), Some(&open.admin), &json!({ "dedupAction": 1 }))
        .await
        .assert_ok();
    let again = import(json!({ "ragId": kb, "url": url })).await;
    let again = again.assert_ok();
    assert_eq!(
        (
            again["id"].as_i64(),
            again["decision"].as_str(),
            again["matchType"].as_str()
        ),
        (Some(first), Some("SKIP"), Some("BY_CONTENT"))
    );
    assert_eq!(open.app.count("documents").await, before);
}

/// A download slower than its limit, redirects included, is refused with nothing stored: past
/// API Gateway's 29 s the client got a 504 while the import went on, and a retry imported the
/// document twice.
#[tokio::test]
async fn a_slow_import_by_url_is_refused_within_its_limit() {
    let files = axum::Router::new()
        .route(
            "/hop",
            axum::routing::get(|| async {
                tokio::time::sleep(std::time::Duration::from_secs(2)).await;
                axum::response::Redirect::temporary("/slow.md")
            }),
        )
        .route(
            "/slow.md",
            axum::routing::get(|| async {
                tokio::time::sleep(std::time::Duration::from_secs(2)).await;
                GUIDE_MD
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, files).await });
    let s = KbSetup::new(
        Store::Filesystem,
        &[
            ("IMPORT_URL_ALLOW_HOSTS", "127.0.0.1"),
            ("URL_IMPORT_TIMEOUT_SECS", "3"),
        ],
    )
    .await;
    let kb = s.kb("Web", json!({})).await;
    let before = s.app.snapshot().await;
    // Each hop is within the limit; the two together are not.
    s.app
        .post(
            "/document/import/url",
            Some(&s.admin),
            &json!({ "ragId": kb, "url": format!("{base}/hop") }),
        )
        .await
        .assert_error(400, 0, "url: the download did not finish within 3 s");
    assert_eq!(s.app.snapshot().await, before, "nothing stored");
    let d = s
        .app
        .post(
            "/document/import/url",
            Some(&s.admin),
            &json!({ "ragId": kb, "url": format!("{base}/slow.md") }),
        )
        .await;
    assert_eq!(d.assert_ok()["name"], "slow.md");
}

#[tokio::test]
async fn office_and_pdf_files_are_indexed_with_structure_pages_and_images() {
    office_and_pdf_files(Store::Filesystem, &[]).await;
}

#[tokio::test]
async fn office_and_pdf_files_are_indexed_through_sqs_and_s3() {
    let queue = api_tests::fresh_sqs_queue(5).await.url;
    // Its own memory queue: the memory worker polls it and would take ingest messages.
    let memory_queue = api_tests::fresh_sqs_queue(5).await.url;
    office_and_pdf_files(
        Store::S3,
        &[
            ("QUEUE_BACKEND", "sqs"),
            ("SQS_INGEST_QUEUE_URL", &queue),
            ("SQS_MEMORY_QUEUE_URL", &memory_queue),
        ],
    )
    .await;
}

async fn office_and_pdf_files(store: Store, extra: &[(&str, &str)]) {
    use shared::rag::parse::fixtures::{self, DocxBlock};
    let s = KbSetup::new(store, extra).await;
    let t = Some(s.admin.as_str());
    let kb = s.kb("Office", json!({ "extparseSaveImages": true })).await;
    let png = fixtures::png();
    let docx = fixtures::docx(&[
        DocxBlock::Heading(1, "Quarterly report"),
        DocxBlock::Paragraph("Revenue grew by twelve percent."),
        DocxBlock::Table(vec![vec!["Region", "Sales"], vec!["North", "120"], vec!["South", "95"]]),
        DocxBlock::Image {
            bytes: &png,
            description: Some("Sales chart"),
        },
    ]);
    let rows = |sheet: &str| -> Vec<Vec<String>> {
        let mut rows = vec![vec!["id".to_owned(), "item".to_owned()]];
        rows.extend((1..=30).map(|i| vec![i.to_string(), format!("{sheet} item {i}")]));
        rows
    };
    let xlsx = fixtures::xlsx(&[("Fruit", rows("fruit")), ("Tools", rows("tool"))]);
    let pdf = fixtures::pdf(&[
        "The first page talks about apples.",
        "The second page talks about pears.",
    ]);
    let reply = s
        .upload(kb, &[("report.docx", docx), ("stock.xlsx", xlsx), ("book.pdf", pdf)])
        .await;
    let ids = doc_ids(&reply).await;
    assert_eq!(ids.len(), 3);
    for id in &ids {
        let d = s.settled(*id).await;
        assert_eq!(d["status"], "success", "{d}");
    }

    let docx_text = s.chunk_texts(ids[0]).await.join("\n");
    assert!(
        docx_text.contains("Revenue grew by twelve percent.") && docx_text.contains("North | 120"),
        "{docx_text}"
    );
    let images = s.app.get(&format!("/document/{}/images", ids[0]), t).await;
    let image = images.assert_ok()[0].clone();
    assert_eq!(
        (
            image["caption"].as_str(),
            image["sectionTitle"].as_str(),
            image["documentName"].as_str()
        ),
        (Some("Sales chart"), Some("Quarterly report"), Some("report.docx"))
    );
    let url = image["imageUrl"]
        .as_str()
        .unwrap()
        .trim_start_matches("/api")
        .to_owned();
    let bytes = s.app.get(&url, t).await;
    assert_eq!(&bytes.bytes[..], &png[..], "the saved image is the embedded one");

    let sheet_titles: Vec<Option<String>> =
        sqlx::query_scalar("SELECT DISTINCT title FROM chunks WHERE document_id = $1 ORDER BY 1")
            .bind(ids[1])
            .fetch_all(&s.app.db)
            .await
            .unwrap();
    assert_eq!(
        sheet_titles,
        vec![Some("Fruit".to_owned()), Some("Tools".to_owned())],
        "every sheet is read"
    );
    let xlsx_text = s.chunk_texts(ids[1]).await.join("\n");
    assert!(
        xlsx_text.contains("fruit item 30") && xlsx_text.contains("tool item 1"),
        "{xlsx_text}"
    );

    let pages: Vec<(Option<i32>, String)> =
        sqlx::query_as("SELECT page, content FROM chunks WHERE document_id = $1 ORDER BY chunk_index")
            .bind(ids[2])
            .fetch_all(&s.app.db)
            .await
            .unwrap();
    let all: String = pages.iter().map(|p| p.1.clone()).collect::<Vec<_>>().join("\n");
    assert!(all.contains("apples") && all.contains("pears"), "{all}");
    assert_eq!(pages[0].0, Some(1), "chunks keep their page number");

    assert_eq!(
        s.app.count("leftover_objects").await,
        0,
        "the indexed images' rows took their notes back"
    );
    // Deleting the document removes its image file too.
    let key: String = sqlx::query_scalar("SELECT storage_key FROM document_images WHERE document_id = $1")
        .bind(ids[0])
        .fetch_one(&s.app.db)
        .await
        .unwrap();
    s.app.delete(&format!("/document/{}", ids[0]), t).await.assert_ok();
    assert!(s.app.state.storage().head(&key).await.unwrap().is_none());
    assert_eq!(s.app.count("document_images").await, 0);
}

/// Images are stored before the transaction that indexes their document: an attempt whose
/// transaction fails deletes its own, so a document that never indexes leaves no files.
#[tokio::test]
async fn an_attempt_that_cannot_index_its_document_leaves_no_image_files() {
    use shared::rag::parse::fixtures::{self, DocxBlock};
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let kb = s.kb("Pictures", json!({ "extparseSaveImages": true })).await;
    // Every attempt fails in its final transaction, after its images were stored.
    sqlx::raw_sql("ALTER TABLE document_images ADD CONSTRAINT refuse_all CHECK (image_index < 0) NOT VALID")
        .execute(&s.app.db)
        .await
        .unwrap();
    let png = fixtures::png();
    let docx = fixtures::docx(&[
        DocxBlock::Paragraph("A chart follows."),
        DocxBlock::Image {
            bytes: &png,
            description: Some("Chart"),
        },
    ]);
    let ids = doc_ids(&s.upload(kb, &[("chart.docx", docx)]).await).await;
    let d = s.settled(ids[0]).await;
    assert_eq!(d["status"], "failed", "{d}");
    let images = s.app.storage_dir.path().join(format!("rag/{kb}/images"));
    let left: Vec<_> = std::fs::read_dir(&images)
        .into_iter()
        .flatten()
        .flatten()
        .flat_map(|doc| std::fs::read_dir(doc.path()).into_iter().flatten().flatten())
        .map(|f| f.path())
        .collect();
    assert!(left.is_empty(), "image files no row holds: {left:?}");
    assert_eq!(s.app.count("chunks").await, 0);
    assert_eq!(s.app.count("leftover_objects").await, 0, "and no note of them");
}

/// A document deleted while a processing run commits its images waits for that commit and
/// deletes those images' files too (it read the keys before the commit and left them behind).
#[tokio::test]
async fn a_delete_during_a_runs_commit_removes_the_images_it_committed() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let t = Some(s.admin.as_str());
    let kb = s.kb("Racing", json!({})).await;
    let doc = doc_ids(&s.upload(kb, &[("notes.txt", NOTES_TXT.as_bytes().to_vec())]).await).await[0];
    assert_eq!(s.settled(doc).await["status"], "success");
    // A run's final transaction, held open: the document's row locked, an image stored.
    let key = format!("rag/{kb}/images/{doc}/late-0.png");
    s.app
        .state
        .storage()
        .put(&key, bytes::Bytes::from_static(b"png"), "image/png")
        .await
        .unwrap();
    let mut run = s.app.db.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM documents WHERE id = $1 FOR UPDATE")
        .bind(doc)
        .execute(&mut *run)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO document_images (rag_id, document_id, image_index, storage_key, mime_type) VALUES ($1, $2, 0, $3, 'image/png')",
    )
    .bind(kb)
    .bind(doc)
    .bind(&key)
    .execute(&mut *run)
    .await
    .unwrap();
    let path = format!("/document/{doc}");
    let delete = s.app.delete(&path, t);
    let commit = async {
        api_tests::until_a_statement_waits_for_a_lock(&s.app.db).await;
        run.commit().await.unwrap();
    };
    let (deleted, ()) = tokio::join!(delete, commit);
    deleted.assert_ok();
    assert_eq!(s.app.count("document_images").await, 0);
    assert!(
        s.app.state.storage().head(&key).await.unwrap().is_none(),
        "the late image's file is gone"
    );
}

/// A base chunked by the scripted `chat-split` model.
async fn smart_base(s: &KbSetup) -> i64 {
    let provider = s.app.provider(&s.admin, "splitter").await;
    let splitter = s
        .app
        .model(&s.admin, provider, "CHAT", "chat-split", &s.models.base_url, json!({}))
        .await;
    s.kb("Smart", json!({ "chunkMode": "smart", "chunkModelId": splitter }))
        .await
}

#[tokio::test]
async fn smart_chunking_follows_the_model_and_falls_back_with_a_reason() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let text = "Apples grow on trees.\n\nThey are red or green.\n\nCars need fuel.\n\nThey drive on roads.";
    let kb = smart_base(&s).await;
    let id = doc_ids(&s.upload(kb, &[("facts.txt", text.as_bytes().to_vec())]).await).await[0];
    assert_eq!(s.settled(id).await["status"], "success");
    let chunks = s.chunk_texts(id).await;
    assert_eq!(
        chunks,
        vec![
            "Apples grow on trees.\n\nThey are red or green.",
            "Cars need fuel.\n\nThey drive on roads."
        ],
        "the model's boundaries"
    );

    let plain = s.kb("Smart without model", json!({ "chunkMode": "smart" })).await;
    let id = doc_ids(&s.upload(plain, &[("facts.txt", text.as_bytes().to_vec())]).await).await[0];
    let d = s.settled(id).await;
    assert_eq!(d["status"], "success");
    assert!(
        d["timings"]["smartChunkingFallback"]
            .as_str()
            .unwrap()
            .contains("chunkModelId is not set"),
        "{d}"
    );
    assert!(!s.chunk_texts(id).await.is_empty());
}

/// Each window of a long document is a paid call: a run replaced while it chunks stops before
/// its next window, not after the last.
#[tokio::test]
async fn smart_chunking_stops_when_its_run_is_replaced() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let kb = smart_base(&s).await;
    let text: Vec<String> = (0..130).map(|i| format!("Paragraph {i} about a topic.")).collect();
    let id = doc_ids(&s.upload(kb, &[("long.txt", text.join("\n\n").into_bytes())]).await).await[0];
    assert_eq!(s.settled(id).await["status"], "success");
    let windows = usage_count(&s, "smart-chunk").await;
    assert_eq!(windows, 3, "130 paragraphs are three windows");
    run_replaced_at_chunking(&s, id).await;
    assert_eq!(
        usage_count(&s, "smart-chunk").await,
        windows,
        "no window of the replaced run"
    );
}

#[tokio::test]
async fn extparse_converts_through_a_docling_compatible_endpoint() {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let record = seen.clone();
    let converter = axum::Router::new().route(
        "/v1/convert/file",
        axum::routing::post(move |mut form: axum::extract::Multipart| {
            let record = record.clone();
            async move {
                let (mut broken, mut embedded) = (false, false);
                while let Ok(Some(field)) = form.next_field().await {
                    let name = field.name().unwrap_or_default().to_owned();
                    let text = field.text().await.unwrap_or_default();
                    broken |= text.contains("broken");
                    embedded |= name == "image_export_mode" && text == "embedded";
                    let value = if name == "files" { "<file>".to_owned() } else { text };
                    record.lock().unwrap().push(format!("{name}={value}"));
                }
                if broken {
                    // A converter that says too much, over several lines.
                    let said = format!("page 1 unreadable\n{}", "x".repeat(5000));
                    return axum::Json(json!({ "status": "failure", "errors": [said] }));
                }
                // Asked to embed images, Docling writes them into the Markdown as data URIs.
                let figure = match embedded {
                    true => format!(
                        "\n\n![Figure 1](data:image/png;base64,{})",
                        base64::Engine::encode(
                            &base64::engine::general_purpose::STANDARD,
                            shared::rag::parse::fixtures::png()
                        )
                    ),
                    false => String::new(),
                };
                let md = format!("# Scanned\n\nText recognised by OCR.{figure}");
                axum::Json(json!({ "status": "success", "document": { "md_content": md } }))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, converter).await });

    let s = KbSetup::new(Store::Filesystem, &[("EXTPARSE_URL", &url)]).await;
    let kb = s
        .kb(
            "OCR",
            json!({ "parseEngine": "extparse", "extparseDoOcr": true, "parseParams": { "ocrLang": ["en", "de"] } }),
        )
        .await;
    let id = doc_ids(
        &s.upload(kb, &[("scan.pdf", b"%PDF-1.4 scanned image only".to_vec())])
            .await,
    )
    .await[0];
    let d = s.settled(id).await;
    assert_eq!(d["status"], "success", "{d}");
    assert!(s.chunk_texts(id).await.join("\n").contains("Text recognised by OCR."));
    let fields = seen.lock().unwrap().clone();
    for expected in [
        "files=<file>",
        "to_formats=md",
        "do_ocr=true",
        "ocr_lang=en",
        "ocr_lang=de",
        "image_export_mode=placeholder",
    ] {
        assert!(fields.contains(&expected.to_owned()), "{expected} in {fields:?}");
    }
    assert!(s
        .app
        .get(&format!("/document/{id}/images"), Some(&s.admin))
        .await
        .assert_ok()
        .as_array()
        .unwrap()
        .is_empty());

    // A base that saves images has them embedded, and keeps them as the document's images.
    let saving = s
        .kb(
            "OCR images",
            json!({ "parseEngine": "extparse", "extparseSaveImages": true }),
        )
        .await;
    let with_images = doc_ids(&s.upload(saving, &[("figure.pdf", b"%PDF-1.4 a figure".to_vec())]).await).await[0];
    assert_eq!(s.settled(with_images).await["status"], "success");
    assert!(seen.lock().unwrap().contains(&"image_export_mode=embedded".to_owned()));
    let images = s
        .app
        .get(&format!("/document/{with_images}/images"), Some(&s.admin))
        .await;
    let images = images.assert_ok().as_array().unwrap().clone();
    assert_eq!(images.len(), 1, "{images:?}");
    assert_eq!(images[0]["caption"], "Figure 1", "{images:?}");

    // A file the converter refuses fails with the converter's reason: one line, bounded.
    let id = doc_ids(&s.upload(kb, &[("broken.pdf", b"%PDF-1.4 broken".to_vec())]).await).await[0];
    let d = s.settled(id).await;
    assert_eq!(
        (d["status"].as_str(), d["errorStage"].as_str()),
        (Some("failed"), Some("parsing")),
        "{d}"
    );
    let said = d["errorMessage"].as_str().unwrap();
    assert!(
        said.contains("could not convert the file") && said.contains("page 1 unreadable"),
        "{said}"
    );
    assert!(
        !said.contains('\n') && said.ends_with('…') && said.chars().count() < 700,
        "{said}"
    );

    // Without a converter configured the document fails and says what to do.
    let other = KbSetup::new(Store::Filesystem, &[]).await;
    let kb = other.kb("OCR", json!({ "parseEngine": "extparse" })).await;
    let id = doc_ids(&other.upload(kb, &[("scan.pdf", b"%PDF-1.4".to_vec())]).await).await[0];
    let d = other.settled(id).await;
    assert_eq!(
        (d["status"].as_str(), d["errorStage"].as_str()),
        (Some("failed"), Some("parsing"))
    );
    assert!(d["errorMessage"].as_str().unwrap().contains("EXTPARSE_URL"), "{d}");
}

#[tokio::test]
async fn image_ocr_reads_document_images_with_the_vision_model() {
    use shared::rag::parse::fixtures::{self, DocxBlock};
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let vision = json!({ "configJson": { "capabilities": ["vision"], "defaultVisionModel": true } });
    // The marked model of a provider switched off is passed over for one that can be called.
    let off = s.app.provider(&s.admin, "vision-off").await;
    s.app
        .model(&s.admin, off, "CHAT", "chat-echo", &s.models.base_url, vision)
        .await;
    s.app
        .put(&format!("/ai-model/provider/{off}/disable"), Some(&s.admin), &json!({}))
        .await
        .assert_status_ok();
    let provider = s.app.provider(&s.admin, "vision").await;
    let capable = json!({ "configJson": { "capabilities": ["vision"] } });
    s.app
        .model(&s.admin, provider, "CHAT", "chat-echo", &s.models.base_url, capable)
        .await;
    let kb = s.kb("Pictures", json!({ "imageOcr": true })).await;
    let png = fixtures::png();
    let docx = fixtures::docx(&[
        DocxBlock::Paragraph("A picture follows."),
        DocxBlock::Image {
            bytes: &png,
            description: None,
        },
    ]);
    let id = doc_ids(&s.upload(kb, &[("pic.docx", docx)]).await).await[0];
    assert_eq!(s.settled(id).await["status"], "success");
    let images = s.app.get(&format!("/document/{id}/images"), Some(&s.admin)).await;
    let ocr = images.assert_ok()[0]["ocrText"].as_str().unwrap_or_default().to_owned();
    assert!(ocr.starts_with("You said: Transcribe all text"), "{ocr}");
    let sent = s
        .models
        .requests()
        .into_iter()
        .find(|r| r["model"] == "chat-echo")
        .unwrap();
    assert!(sent["messages"][0]["content"][1]["image_url"]["url"]
        .as_str()
        .unwrap()
        .starts_with("data:image/png;base64,"));
}

#[tokio::test]
async fn expired_previews_are_cleaned_up_with_their_files() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let kb = s.kb("Expiry", json!({})).await;
    let old = s
        .preview(kb, &[("old.txt", b"forgotten upload".to_vec())], None)
        .await
        .assert_ok()
        .clone();
    let key: String = sqlx::query_scalar("SELECT storage_key FROM resources")
        .fetch_one(&s.app.db)
        .await
        .unwrap();
    assert!(s.app.state.storage().head(&key).await.unwrap().is_some());
    sqlx::query("UPDATE upload_previews SET expires_at = now() - interval '1 second'")
        .execute(&s.app.db)
        .await
        .unwrap();

    // The next preview sweeps the expired one away, files included.
    s.preview(kb, &[("new.txt", b"fresh upload".to_vec())], None)
        .await
        .assert_ok();
    assert_eq!(s.app.count("upload_previews").await, 1);
    assert_eq!(s.app.count("resources").await, 1);
    assert!(
        s.app.state.storage().head(&key).await.unwrap().is_none(),
        "the expired temporary file is deleted"
    );
    let body = json!({ "previewToken": old["previewToken"], "items": [] });
    s.app
        .post("/document/upload/commit", Some(&s.admin), &body)
        .await
        .assert_error(404, 404, "expired");

    // A preview expires a few others on its way, not all of them: the rest is the daily
    // housekeeping's, not a partner's upload's.
    for i in 0..7 {
        s.preview(kb, &[(&format!("{i}.txt"), format!("upload {i}").into_bytes())], None)
            .await
            .assert_ok();
    }
    sqlx::query("UPDATE upload_previews SET expires_at = now() - interval '1 second'")
        .execute(&s.app.db)
        .await
        .unwrap();
    s.preview(kb, &[("last.txt", b"last upload".to_vec())], None)
        .await
        .assert_ok();
    assert_eq!(s.app.count("upload_previews").await, 1 + 8 - 5);
    assert_eq!(
        shared::rag::documents::upload::expire_previews(&s.app.state)
            .await
            .unwrap(),
        3
    );
}

/// Creating a base builds its vector index without blocking other tenants' writes to the
/// shared chunks table: a build waiting for a writer's transaction does not hold up the next
/// writer, as a plain `CREATE INDEX` queued for its share lock would.
#[tokio::test]
async fn building_a_bases_index_does_not_block_writers_of_other_bases() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let body = json!({ "name": "new", "embeddingModelId": s.embedding_model, "dimensionOfVectorModel": 8 });
    let created = while_a_writer_is_open(&s, "CREATE INDEX%", s.app.post("/rag", Some(&s.admin), &body)).await;
    let id = created.assert_ok()["id"].as_i64().unwrap();
    let index = shared::rag::bases::repo::index_name(id);
    let validity = || shared::rag::bases::repo::index_validity(&s.app.db, &index);
    let valid = validity().await.unwrap();
    assert_eq!(valid, Some(true), "the base's index is built and valid");

    // Deleting the base drops its index as it was built: a plain DROP INDEX took the table
    // whole, and other tenants' searches and writes queued behind it.
    let deleted = while_a_writer_is_open(&s, "DROP INDEX%", s.app.delete(&format!("/rag/{id}"), Some(&s.admin))).await;
    deleted.assert_ok();
    assert_eq!(validity().await.unwrap(), None, "the deleted base's index is gone");
}

/// Sends `request` while a writer of `chunks` holds its transaction open; once the request's
/// DDL (`ddl`, a pattern of its statement) waits for that writer, another writer must get
/// through before the open one ends.
async fn while_a_writer_is_open(
    s: &KbSetup,
    ddl: &str,
    request: impl std::future::Future<Output = api_tests::Reply>,
) -> api_tests::Reply {
    let writer = |pool: sqlx::PgPool| async move {
        let mut conn = pool.acquire().await.unwrap();
        sqlx::query("SET lock_timeout = '5s'")
            .execute(&mut *conn)
            .await
            .unwrap();
        sqlx::query("DELETE FROM chunks WHERE id = -1")
            .execute(&mut *conn)
            .await
    };
    let mut open = s.app.db.begin().await.unwrap();
    sqlx::query("DELETE FROM chunks WHERE id = -1")
        .execute(&mut *open)
        .await
        .unwrap();
    let meanwhile = async {
        let mut waiting = false;
        for _ in 0..200 {
            waiting = sqlx::query_scalar(
                "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE query ILIKE $1 AND wait_event_type = 'Lock')",
            )
            .bind(ddl)
            .fetch_one(&s.app.db)
            .await
            .unwrap();
            if waiting {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert!(waiting, "{ddl} never waited for the open writer");
        writer(s.app.db.clone())
            .await
            .unwrap_or_else(|e| panic!("a write to chunks was blocked by {ddl}: {e}"));
        open.commit().await.unwrap();
    };
    let (response, ()) = tokio::join!(request, meanwhile);
    response
}

#[tokio::test]
async fn a_regular_user_owns_at_most_kb_max_per_user_bases() {
    let s = KbSetup::new(Store::Filesystem, &[("KB_MAX_PER_USER", "2")]).await;
    let (_, bob) = s.app.regular_user("bob").await;
    let body = json!({ "name": "b", "embeddingModelId": s.embedding_model, "dimensionOfVectorModel": 8 });
    for _ in 0..2 {
        s.app.post("/rag", Some(&bob), &body).await.assert_ok();
    }
    let before = s.app.snapshot().await;
    s.app
        .post("/rag", Some(&bob), &body)
        .await
        .assert_error(400, 0, "limit of 2 knowledge bases (KB_MAX_PER_USER)");
    // Without a dimension the base would probe its model, a paid call: refused before it.
    let probing = json!({ "name": "b", "embeddingModelId": s.embedding_model });
    s.app
        .post("/rag", Some(&bob), &probing)
        .await
        .assert_error(400, 0, "limit of 2 knowledge bases (KB_MAX_PER_USER)");
    s.app
        .snapshot()
        .await
        .assert_unchanged_since(&before, "a base over the cap");
    // Administrators are not capped.
    for _ in 0..3 {
        s.app.post("/rag", Some(&s.admin), &body).await.assert_ok();
    }
}

/// A dimension given with a model is checked with the model, as a memory config's is: a base
/// of another length would pay for each document's embeddings, then fail it. Refused, nothing
/// is made or changed.
#[tokio::test]
async fn a_dimension_given_must_be_the_models() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let t = Some(s.admin.as_str());
    let body = json!({ "name": "Wrong", "embeddingModelId": s.embedding_model, "dimensionOfVectorModel": 16 });
    s.app.post("/rag", t, &body).await.assert_error(
        400,
        0,
        "dimensionOfVectorModel: the model's vectors have 8 dimensions, not 16",
    );
    assert_eq!(s.app.count("knowledge_bases").await, 0, "no base");

    let kb = s.kb("Right", json!({ "dimensionOfVectorModel": 8 })).await;
    let wide = s.embedding_model("emb-384").await;
    let path = format!("/rag/{kb}");
    let before = s.app.get(&path, t).await.assert_ok().clone();
    for edit in [
        json!({ "embeddingModelId": wide, "dimensionOfVectorModel": 8 }),
        json!({ "dimensionOfVectorModel": 16 }),
    ] {
        let told = s.app.put(&path, t, &edit).await;
        told.assert_error(400, 0, "dimensionOfVectorModel: the model's vectors have");
    }
    let after = s.app.get(&path, t).await.assert_ok().clone();
    assert_eq!(after, before, "the base is as it was");
    let edit = json!({ "embeddingModelId": wide, "dimensionOfVectorModel": 384 });
    s.app.put(&path, t, &edit).await.assert_ok();
    let read = s.app.get(&path, t).await;
    assert_eq!(read.assert_ok()["dimensionOfVectorModel"], 384);
}

/// The check of a given dimension waits for the model as long as a connectivity test does, not
/// the config's own timeout and retries (minutes): past it, the dimension is taken at its word
/// and the base made, before API Gateway's 29 s would have answered 504 while the base was
/// made anyway, for a client to make it again.
#[tokio::test]
async fn a_given_dimension_is_taken_at_its_word_when_the_model_does_not_answer_in_time() {
    let s = KbSetup::new(Store::Filesystem, &[("MODEL_TEST_TIMEOUT_SECS", "1")]).await;
    let model = s.app.silent_model(&s.admin, "EMBEDDING", "emb-8", json!({})).await;
    let started = std::time::Instant::now();
    let body = json!({ "name": "Slow", "embeddingModelId": model, "dimensionOfVectorModel": 8 });
    let made = s.app.post("/rag", Some(&s.admin), &body).await;
    assert_eq!(made.assert_ok()["dimensionOfVectorModel"], 8);
    assert!(started.elapsed() < std::time::Duration::from_secs(29));
}

/// A base whose model no longer makes vectors of its dimension (its endpoint changed since the
/// base was made, or the model could not answer then) fails each document at embedding, at
/// once and naming both lengths (it was taken for a passing failure and retried at its
/// uploader's cost, with a message that said only "something unexpected").
#[tokio::test]
async fn a_dimension_the_model_does_not_make_fails_the_document_by_name() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let kb = s.kb("Wrong", json!({})).await;
    sqlx::query("UPDATE knowledge_bases SET dimension = 16 WHERE id = $1")
        .bind(kb)
        .execute(&s.app.db)
        .await
        .unwrap();
    let told = "makes 8-dimensional vectors, but the knowledge base's dimensionOfVectorModel is 16";
    fails_at_embedding_after_one_call(&s, kb, told).await;
}

/// Uploads a document to `kb` and expects it failed at embedding, its message holding `told`,
/// after one embedding call: the failure answers the same on every delivery.
async fn fails_at_embedding_after_one_call(s: &KbSetup, kb: i64, told: &str) {
    let embeddings = || s.models.requests().iter().filter(|r| r.get("input").is_some()).count();
    let before = embeddings();
    let reply = s.upload(kb, &[("n.txt", NOTES_TXT.as_bytes().to_vec())]).await;
    let d = s.settled(doc_ids(&reply).await[0]).await;
    assert_eq!(
        (d["status"].as_str(), d["errorStage"].as_str()),
        (Some("failed"), Some("embedding")),
        "{d}"
    );
    assert!(d["errorMessage"].as_str().unwrap().contains(told), "{d}");
    assert_eq!(embeddings() - before, 1, "one call, not retried");
}

/// An embedding endpoint that refuses the base's key answers the same on every delivery: the
/// document fails at embedding at once, naming what was refused, after one call (it was
/// retried, each delivery paying the groups before it, and failed with its last).
#[tokio::test]
async fn an_embedding_key_refused_fails_the_document_at_once() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let t = Some(s.admin.as_str());
    let model = s.embedding_model("emb-8").await;
    let kb = s
        .kb(
            "Refused",
            json!({ "embeddingModelId": model, "dimensionOfVectorModel": 8 }),
        )
        .await;
    s.app
        .put(
            &format!("/ai-model/config/{model}"),
            t,
            &json!({ "apiKey": "sk-revoked-key-0000" }),
        )
        .await
        .assert_status_ok();
    fails_at_embedding_after_one_call(&s, kb, "the model endpoint rejected the API key").await;
}

/// An edit naming a new embedding model asks it for its dimension, a paid call, only once
/// every other field passed: one refused for another field writes nothing and calls nothing.
#[tokio::test]
async fn an_edit_refused_for_any_field_makes_no_dimension_probe() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let kb = s.kb("Probe", json!({})).await;
    let other = s.embedding_model("emb-8").await;
    let before = (s.app.snapshot().await, s.models.requests().len());
    for (body, needle) in [
        (
            json!({ "embeddingModelId": other, "dedupStrategy": 9 }),
            "dedupStrategy",
        ),
        (
            json!({ "embeddingModelId": other, "rerankModelId": 999_999 }),
            "rerankModelId",
        ),
        (
            json!({ "embeddingModelId": other, "description": "d".repeat(1001) }),
            "description",
        ),
    ] {
        s.app
            .put(&format!("/rag/{kb}"), Some(&s.admin), &body)
            .await
            .assert_error(400, 0, needle);
    }
    s.app
        .snapshot()
        .await
        .assert_unchanged_since(&before.0, "refused edits");
    assert_eq!(s.models.requests().len(), before.1, "no probe was made");
    s.app
        .put(
            &format!("/rag/{kb}"),
            Some(&s.admin),
            &json!({ "embeddingModelId": other }),
        )
        .await
        .assert_ok();
    assert_eq!(
        s.models.requests().len(),
        before.1 + 1,
        "the probe of an edit that passed"
    );
}

/// A base saved back as it was read keeps its reranker even when that model was disabled since:
/// ids sent unchanged are not checked again, as the embedding model's are not; a new one is.
#[tokio::test]
async fn an_edit_sending_back_a_disabled_reranker_is_saved() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let provider = s.app.provider(&s.admin, "rerank").await;
    let reranker = s
        .app
        .model(&s.admin, provider, "RERANKER", "rerank", &s.models.base_url, json!({}))
        .await;
    let kb = s.kb("Reranked", json!({ "rerankModelId": reranker })).await;
    s.app
        .put(
            &format!("/ai-model/config/{reranker}/disable"),
            Some(&s.admin),
            &json!({}),
        )
        .await
        .assert_status_ok();
    let read = s.app.get(&format!("/rag/{kb}"), Some(&s.admin)).await;
    let read = read.assert_ok().clone();
    assert_eq!(read["rerankModelId"], reranker, "{read}");
    let mut sent = json!({ "name": "Renamed" });
    for field in [
        "embeddingModelId",
        "rerankModelId",
        "vectorStoreInstanceId",
        "searchEngineInstanceId",
    ] {
        sent[field] = read[field].clone();
    }
    s.app
        .put(&format!("/rag/{kb}"), Some(&s.admin), &sent)
        .await
        .assert_ok();
    let other = s
        .app
        .model(&s.admin, provider, "RERANKER", "rerank", &s.models.base_url, json!({}))
        .await;
    s.app
        .put(&format!("/ai-model/config/{other}/disable"), Some(&s.admin), &json!({}))
        .await
        .assert_status_ok();
    s.app
        .put(
            &format!("/rag/{kb}"),
            Some(&s.admin),
            &json!({ "rerankModelId": other }),
        )
        .await
        .assert_error(400, 0, "rerankModelId");
}

/// Naming a reranker on a base turns reranking on, on creation or where the base had none;
/// switching rerankers keeps what the base's config says. Left off, the named reranker showed
/// in every read and never ran.
#[tokio::test]
async fn a_reranker_named_on_a_base_reranks_its_searches() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let t = Some(s.admin.as_str());
    let provider = s.app.provider(&s.admin, "rerank").await;
    let reranker = s
        .app
        .model(&s.admin, provider, "RERANKER", "rerank", &s.models.base_url, json!({}))
        .await;
    let enabled = |kb: i64| {
        let app = &s.app;
        async move {
            let read = app.get(&format!("/rag/{kb}"), t).await;
            read.assert_ok()["searchParams"]["rerankEnabled"].as_bool()
        }
    };
    let named = s.kb("Reranked", json!({ "rerankModelId": reranker })).await;
    assert_eq!(enabled(named).await, Some(true));
    let files = [("animals.txt", b"Foxes are small omnivorous mammals.".to_vec())];
    let doc = s.upload(named, &files).await.assert_ok()["items"][0]["id"]
        .as_i64()
        .unwrap();
    assert_eq!(s.settled(doc).await["status"], "success");
    let r = s
        .app
        .post(
            "/rag/search",
            t,
            &json!({ "ragId": named, "query": "foxes", "debug": true }),
        )
        .await;
    let r = r.assert_ok();
    assert!(r["metrics"]["rerankMs"].as_f64().unwrap() > 0.0, "{r}");

    let later = s.kb("Reranker later", json!({})).await;
    assert_eq!(enabled(later).await, Some(false));
    // More results than the default 20 candidates, valid while reranking is off.
    let many = json!({ "searchParams": { "resultCount": 50 } });
    s.app.put(&format!("/rag/{later}/config"), t, &many).await.assert_ok();
    let edit = json!({ "rerankModelId": reranker });
    s.app.put(&format!("/rag/{later}"), t, &edit).await.assert_ok();
    assert_eq!(enabled(later).await, Some(true));
    let read = s.app.get(&format!("/rag/{later}"), t).await;
    assert_eq!(
        read.assert_ok()["searchParams"]["enterRerankCount"],
        50,
        "as many candidates as results"
    );
    let prompt = json!({ "modelParams": { "prompt": "C<{context}> Q<{query}>" } });
    s.app.put(&format!("/rag/{later}/config"), t, &prompt).await.assert_ok();
    let off = json!({ "searchParams": { "rerankEnabled": false } });
    s.app.put(&format!("/rag/{later}/config"), t, &off).await.assert_ok();
    let other = s
        .app
        .model(&s.admin, provider, "RERANKER", "rerank", &s.models.base_url, json!({}))
        .await;
    let edit = json!({ "rerankModelId": other });
    s.app.put(&format!("/rag/{later}"), t, &edit).await.assert_ok();
    assert_eq!(enabled(later).await, Some(false), "switched, it stays off");
}

/// Delimiter and regex chunking cut a document where the base says, through the real upload
/// and ingestion: each piece is its own chunk (pieces are long enough that two never fit one
/// chunk), where the default mode would cut at sentences.
#[tokio::test]
async fn delimiter_and_regex_bases_cut_documents_at_their_rule() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let piece = |word: &str| (0..15).map(|i| format!("{word}{i}")).collect::<Vec<_>>().join(" ");
    let (a, b, c) = (piece("alpha"), piece("beta"), piece("gamma"));
    let s = &s;
    let chunks_of = |doc: i64| async move {
        let page = s
            .app
            .get(&format!("/chunk/page?documentId={doc}&size=100"), Some(&s.admin))
            .await;
        let mut rows: Vec<Value> = page.assert_ok()["data"].as_array().unwrap().clone();
        rows.sort_by_key(|r| r["chunkIndex"].as_i64());
        rows.iter()
            .map(|r| r["content"].as_str().unwrap().trim().to_owned())
            .collect::<Vec<_>>()
    };
    // A piece is 30-45 tokens (two or three a word): one fits a chunk, two do not.
    let settings = json!({ "maxChunkTokens": 50, "chunkOverlap": 0 });
    let mut delimiter = settings.clone();
    delimiter["chunkMode"] = json!("delimiter");
    delimiter["customDelimiter"] = json!("|");
    let rag = s.kb("pipes", delimiter).await;
    let reply = s
        .upload(rag, &[("pipes.txt", format!("{a}|{b}|{c}").into_bytes())])
        .await;
    let doc = doc_ids(&reply).await[0];
    assert_eq!(s.settled(doc).await["status"], "success");
    assert_eq!(chunks_of(doc).await, [a.clone(), b.clone(), c.clone()]);

    let mut regex = settings.clone();
    regex["chunkMode"] = json!("regex");
    regex["chunkRegex"] = json!("(?m)^## ");
    let rag = s.kb("headings", regex).await;
    let text = format!("## A\n{a}\n## B\n{b}\n## C\n{c}\n");
    let reply = s.upload(rag, &[("headings.txt", text.into_bytes())]).await;
    let doc = doc_ids(&reply).await[0];
    assert_eq!(s.settled(doc).await["status"], "success");
    let chunks = chunks_of(doc).await;
    assert_eq!(chunks.len(), 3, "{chunks:?}");
    for (chunk, (title, body)) in chunks.iter().zip([("## A", &a), ("## B", &b), ("## C", &c)]) {
        assert!(chunk.starts_with(title), "{chunk}");
        let words: Vec<&str> = chunk.split_whitespace().skip(2).collect();
        assert_eq!(words.join(" "), *body, "{chunk}");
    }
}

/// `GET /document/{id}/preview` serves the original file inline with its type, in ranges too,
/// to the base's owner only; anyone else gets the unknown-id answer.
#[tokio::test]
async fn a_documents_preview_is_the_original_file_inline_for_its_owner_only() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let rag = s.kb("notes", json!({})).await;
    let reply = s.upload(rag, &[("notes.txt", NOTES_TXT.as_bytes().to_vec())]).await;
    let doc = doc_ids(&reply).await[0];
    assert_eq!(s.settled(doc).await["status"], "success");
    let path = format!("/document/{doc}/preview");
    let whole = s.app.get(&path, Some(&s.admin)).await;
    assert_eq!(whole.status, 200);
    assert_eq!(&whole.bytes[..], NOTES_TXT.as_bytes());
    let header = |r: &api_tests::Reply, name: &str| r.headers[name].to_str().unwrap().to_owned();
    assert!(
        header(&whole, "content-type").starts_with("text/plain"),
        "{:?}",
        whole.headers
    );
    assert!(
        header(&whole, "content-disposition").starts_with("inline"),
        "{:?}",
        whole.headers
    );
    let part = s
        .app
        .send(
            s.app
                .client
                .get(s.app.url(&path))
                .header("Svc-Auth", &s.admin)
                .header("Range", "bytes=4-8"),
        )
        .await;
    assert_eq!((part.status, &part.bytes[..]), (206, &NOTES_TXT.as_bytes()[4..=8]));
    let (_, bob) = s.app.regular_user("bob").await;
    s.app.get(&path, Some(&bob)).await.assert_error(404, 404, "not found");
    s.app
        .get(&format!("/document/{}/preview", doc + 1000), Some(&s.admin))
        .await
        .assert_error(404, 404, "not found");
}

/// A knowledge base's stored vectors are its embedding model's: that model cannot be deleted
/// from under it (a clear refusal, nothing changed), and can once the base is gone.
#[tokio::test]
async fn the_embedding_model_of_a_base_is_not_deleted_from_under_it() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let kb = s.kb("kept", json!({})).await;
    let t = Some(s.admin.as_str());
    s.app
        .delete(&format!("/ai-model/config/{}", s.embedding_model), t)
        .await
        .assert_status_error(400, 0, "is the embedding model of a knowledge base");
    assert_eq!(s.app.count("model_configs").await, 1);
    s.app.delete(&format!("/rag/{kb}"), t).await.assert_ok();
    s.app
        .delete(&format!("/ai-model/config/{}", s.embedding_model), t)
        .await
        .assert_status_ok();
    assert_eq!(s.app.count("model_configs").await, 0);
}

/// A base's new dimension is kept only with an index built for it: when the build fails, the
/// base keeps the dimension it had (the index is built outside any transaction, so the change
/// is undone by hand).
#[tokio::test]
async fn a_dimension_change_whose_index_cannot_be_built_is_undone() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let t = Some(s.admin.as_str());
    let kb = s.kb("Shape", json!({ "dimensionOfVectorModel": 8 })).await;
    // Something that is not an index under the index's name makes every build fail.
    let name = format!("chunks_hnsw_kb_{kb}");
    sqlx::raw_sql(&format!("DROP INDEX {name}; CREATE TABLE {name} (x int)"))
        .execute(&s.app.db)
        .await
        .unwrap();
    // Every field of a refused edit is undone; only the time of the undo moves.
    let read = |r: api_tests::Reply| {
        let mut v = r.assert_ok().clone();
        v.as_object_mut().unwrap().remove("updateDt");
        v
    };
    let before = read(s.app.get(&format!("/rag/{kb}"), t).await);
    let wide = s.embedding_model("emb-384").await;
    let edit = json!({ "name": "Renamed", "description": "new", "dedupAction": 2, "embeddingModelId": wide });
    // The service's own failure, told without the database's words.
    s.app
        .put(&format!("/rag/{kb}"), t, &edit)
        .await
        .assert_error(500, 500, "internal server error");
    let after = read(s.app.get(&format!("/rag/{kb}"), t).await);
    assert_eq!(after["dimensionOfVectorModel"], 8, "the old dimension stands");
    assert_eq!(after, before);
}

/// Two dimension changes in a row whose index builds wait for another build: whichever build
/// runs last, the index has the shape the base has. Built with the dimension its edit wrote,
/// the first edit's build could run last and leave an index of its shape, which refused every
/// chunk of the base.
#[tokio::test]
async fn two_dimension_changes_in_a_row_leave_the_index_of_the_last() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let t = Some(s.admin.as_str());
    let kb = s.kb("Reshaped", json!({ "dimensionOfVectorModel": 8 })).await;
    let path = format!("/rag/{kb}");
    // Another build in progress: builds take turns under one session lock.
    let mut other = s.app.db.acquire().await.unwrap();
    sqlx::query("SELECT pg_advisory_lock(x'6b625f696478'::bigint)")
        .execute(&mut *other)
        .await
        .unwrap();
    // The first edit answers only once its build has run, after the release below: an answer
    // before is a refusal, told as such rather than as a dimension that never came.
    let first_answer = std::cell::RefCell::new(None::<String>);
    let dimension_is = |d: i32| {
        let db = s.app.db.clone();
        let first_answer = &first_answer;
        // A minute: the whole suite shares two cores with this test's server.
        api_tests::wait_for(std::time::Duration::from_secs(60), async move || {
            let now: i32 = sqlx::query_scalar("SELECT dimension FROM knowledge_bases WHERE id = $1")
                .bind(kb)
                .fetch_one(&db)
                .await
                .unwrap();
            if now != d {
                if let Some(answer) = first_answer.borrow().as_deref() {
                    panic!("the first edit answered before the base got dimension {d}: {answer}");
                }
            }
            now == d
        })
    };
    let (narrow, wide) = (s.embedding_model, s.embedding_model("emb-384").await);
    let to_wide = json!({ "embeddingModelId": wide });
    let first = async {
        let reply = s.app.put(&path, t, &to_wide).await;
        *first_answer.borrow_mut() = Some(format!("{} {}", reply.status, reply.body));
        reply
    };
    let second = async {
        dimension_is(384).await;
        s.app.put(&path, t, &json!({ "embeddingModelId": narrow })).await
    };
    let release = async {
        dimension_is(384).await;
        dimension_is(8).await;
        // Both edits are committed and their builds wait (trying the build lock in turns,
        // which no lock wait shows).
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        sqlx::query("SELECT pg_advisory_unlock(x'6b625f696478'::bigint)")
            .execute(&mut *other)
            .await
            .unwrap();
    };
    let (first, second, ()) = tokio::join!(first, second, release);
    first.assert_ok();
    second.assert_ok();
    let index: String = sqlx::query_scalar(&format!("SELECT pg_get_indexdef('chunks_hnsw_kb_{kb}'::regclass)"))
        .fetch_one(&s.app.db)
        .await
        .unwrap();
    assert!(index.contains("vector(8)"), "{index}");
    let read = s.app.get(&path, t).await;
    assert_eq!(read.assert_ok()["dimensionOfVectorModel"], 8);
}

/// A new embedding model sent without a dimension brings its own, asked as on creation: the
/// old length would refuse every vector the new model makes.
#[tokio::test]
async fn a_new_embedding_model_brings_its_own_dimension() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let t = Some(s.admin.as_str());
    let kb = s.kb("Re-embedded", json!({})).await;
    let before = s.app.get(&format!("/rag/{kb}"), t).await;
    assert_eq!(before.assert_ok()["dimensionOfVectorModel"], 8);
    let wide = s.embedding_model("emb-384").await;
    s.app
        .put(&format!("/rag/{kb}"), t, &json!({ "embeddingModelId": wide }))
        .await
        .assert_ok();
    let after = s.app.get(&format!("/rag/{kb}"), t).await;
    assert_eq!(after.assert_ok()["dimensionOfVectorModel"], 384);
    let doc = doc_ids(&s.upload(kb, &[("notes.txt", NOTES_TXT.as_bytes().to_vec())]).await).await[0];
    assert_eq!(s.settled(doc).await["status"], "success", "the new model's vectors fit");
}

/// Two commits of the same file into a base that refuses duplicates, sent at once: they take
/// turns, so exactly one adds the document and the other is told the base changed.
#[tokio::test]
async fn concurrent_commits_of_one_file_add_it_once() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let t = Some(s.admin.as_str());
    let kb = s.kb("Twice", json!({ "dedupStrategy": 2, "dedupAction": 0 })).await;
    for round in 0..5 {
        let file = [(format!("r{round}.txt"), format!("round {round} bytes").into_bytes())];
        let file: Vec<(&str, Vec<u8>)> = file.iter().map(|(n, b)| (n.as_str(), b.clone())).collect();
        let first = s.preview(kb, &file, None).await.assert_ok().clone();
        let second = s.preview(kb, &file, None).await.assert_ok().clone();
        let commit = |p: &Value| json!({ "previewToken": p["previewToken"], "items": [{ "tempResourceId": p["items"][0]["tempResourceId"], "decision": "NEW" }] });
        let (body_a, body_b) = (commit(&first), commit(&second));
        let (a, b) = tokio::join!(
            s.app.post("/document/upload/commit", t, &body_a),
            s.app.post("/document/upload/commit", t, &body_b),
        );
        let changed: Vec<bool> = [a, b]
            .iter()
            .map(|r| r.assert_ok()["conflictChanged"].as_bool().unwrap())
            .collect();
        assert_eq!(changed.iter().filter(|c| !**c).count(), 1, "round {round}: {changed:?}");
        let copies: i64 = sqlx::query_scalar("SELECT count(*) FROM documents WHERE rag_id = $1 AND name = $2")
            .bind(kb)
            .bind(format!("r{round}.txt"))
            .fetch_one(&s.app.db)
            .await
            .unwrap();
        assert_eq!(copies, 1, "round {round}");
    }
}

/// A base is written as it was read: an edit made from a row that changed meanwhile (here its
/// settings, changed by another request) writes nothing instead of undoing that change, and the
/// API answers 409.
#[tokio::test]
async fn an_edit_made_from_a_stale_read_writes_nothing() {
    use shared::rag::bases::repo::{self, KbFields};
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let id = s.kb("Handbook", json!({})).await;
    let read = repo::find(&s.app.db, id).await.unwrap().unwrap();
    s.app
        .put(
            &format!("/rag/{id}/config"),
            Some(&s.admin),
            &json!({ "searchParams": { "resultCount": 7 } }),
        )
        .await
        .assert_ok();
    let stale = KbFields {
        name: "Stale",
        ..KbFields::of(&read)
    };
    let written = repo::update(&s.app.db, id, read.update_dt, &stale).await.unwrap();
    assert!(written.is_none(), "a write from a stale read is refused");
    let now = repo::find(&s.app.db, id).await.unwrap().unwrap();
    assert_eq!(now.name, "Handbook");
    assert_eq!(
        now.search_params.0.result_count, 7,
        "the settings changed by the other request stand"
    );
    let fresh = KbFields {
        name: "Fresh",
        ..KbFields::of(&now)
    };
    let wrote = repo::update(&s.app.db, id, now.update_dt, &fresh).await.unwrap();
    assert!(wrote.is_some_and(|t| t > now.update_dt), "the time it wrote: {wrote:?}");
}

/// Changing a base's shape (here its dimension) is decided under the lock that upload commits
/// and URL imports add documents under: a document added after the edit read the base, while
/// the edit waited for that lock, refuses the edit instead of being left in a base of another
/// shape.
#[tokio::test]
async fn a_shape_change_waits_for_additions_and_counts_again() {
    use shared::rag::documents::repo::{self as docs, NewDoc};
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let id = s.kb("Handbook", json!({})).await;
    let creator: i64 = sqlx::query_scalar("SELECT creator_id FROM knowledge_bases WHERE id = $1")
        .bind(id)
        .fetch_one(&s.app.db)
        .await
        .unwrap();
    // An addition in progress holds the lock.
    let mut adding = s.app.db.begin().await.unwrap();
    docs::lock_additions(&mut adding, id).await.unwrap();
    let wide = s.embedding_model("emb-384").await;
    let (path, body) = (format!("/rag/{id}"), json!({ "embeddingModelId": wide }));
    let edit = s.app.put(&path, Some(&s.admin), &body);
    let add = async {
        // The edit has read the base (no documents) and waits for the lock.
        api_tests::until_a_statement_waits_for_a_lock(&s.app.db).await;
        let doc = NewDoc {
            rag_id: id,
            name: "added.txt",
            file_type: "txt",
            source_type: "upload",
            source_path: "added.txt",
            storage_key: "kb/added.txt",
            mime_type: "text/plain",
            file_size: 5,
            content_hash: "h",
            creator_id: creator,
        };
        docs::insert(&mut *adding, &doc).await.unwrap();
        adding.commit().await.unwrap();
    };
    let (reply, ()) = tokio::join!(edit, add);
    reply.assert_error(400, 0, "documents were added meanwhile");
    let dimension: i32 = sqlx::query_scalar("SELECT dimension FROM knowledge_bases WHERE id = $1")
        .bind(id)
        .fetch_one(&s.app.db)
        .await
        .unwrap();
    assert_eq!(dimension, 8, "the base keeps the shape its document is indexed in");
}

/// The agents bound to a base embed their questions with its model and rerank with its
/// reranker. Its owner may not put a PERSONAL model of hers there while someone else's agent
/// (here an administrator's, which everyone may chat with) is bound to it: everyone's questions
/// would go to her endpoint. The administrator, who may bind any model, may.
#[tokio::test]
async fn a_base_bound_to_others_agents_takes_no_personal_model_of_its_owner() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let app = &s.app;
    let (_, alice) = app.regular_user("alice").await;
    // Her quota is empty: the dimension is given, not asked of the model.
    let body = json!({ "name": "hers", "embeddingModelId": s.embedding_model, "dimensionOfVectorModel": 8 });
    let kb = app.post("/rag", Some(&alice), &body).await.assert_ok()["id"]
        .as_i64()
        .unwrap();
    let provider = app.provider(&s.admin, "alices").await;
    let personal = json!({ "scope": "PERSONAL" });
    let reranker = app
        .model(&alice, provider, "RERANKER", "rr", &s.models.base_url, personal.clone())
        .await;
    let embedder = app
        .model(&alice, provider, "EMBEDDING", "emb-8", &s.models.base_url, personal)
        .await;
    let agent = json!({ "name": "Helpdesk", "ragEnabled": true, "ragId": kb });
    app.post("/agent", Some(&s.admin), &agent).await.assert_ok();

    let before = app.get(&format!("/rag/{kb}"), Some(&alice)).await.assert_ok().clone();
    let config = json!({ "searchParams": { "rerankEnabled": true, "rerankModelId": reranker } });
    let refused = |field: &str, model: i64| {
        format!("{field}: model {model} is not available to the creators of 1 agent(s) using this knowledge base")
    };
    for (path, body, needle) in [
        (
            format!("/rag/{kb}/config"),
            config.clone(),
            refused("searchParams.rerankModelId", reranker),
        ),
        (
            format!("/rag/{kb}"),
            json!({ "rerankModelId": reranker }),
            refused("rerankModelId", reranker),
        ),
        (
            format!("/rag/{kb}"),
            json!({ "embeddingModelId": embedder, "dimensionOfVectorModel": 8 }),
            refused("embeddingModelId", embedder),
        ),
    ] {
        app.put(&path, Some(&alice), &body).await.assert_error(400, 0, &needle);
    }
    let after = app.get(&format!("/rag/{kb}"), Some(&alice)).await.assert_ok().clone();
    assert_eq!(after, before, "nothing written");

    app.put(&format!("/rag/{kb}/config"), Some(&s.admin), &config)
        .await
        .assert_ok();
    let now = app.get(&format!("/rag/{kb}"), Some(&alice)).await;
    assert_eq!(now.assert_ok()["searchParams"]["rerankModelId"], reranker);
}

/// Uploads beyond the pool's size do not wait for each other: a preview expires old previews
/// on its way (their files' rows went one pooled connection each, up to eight, while its
/// transaction held another) and a commit decided its files through the pool while its
/// transaction held a connection. Starved, they failed with 503 when the pool gave up (10 s).
#[tokio::test]
async fn uploads_beyond_the_pools_size_do_not_wait_for_each_other() {
    let s = KbSetup::new(Store::Filesystem, &[("DB_MAX_CONNECTIONS", "2")]).await;
    let kb = s.kb("Busy", json!({})).await;
    let t = Some(s.admin.as_str());
    // Expired previews of several files each, for the next previews to expire on their way.
    for i in 0..5 {
        let files: Vec<(String, Vec<u8>)> = (0..4)
            .map(|j| (format!("old-{i}-{j}.txt"), format!("old {i} {j}").into_bytes()))
            .collect();
        let files: Vec<(&str, Vec<u8>)> = files.iter().map(|(n, b)| (n.as_str(), b.clone())).collect();
        s.preview(kb, &files, None).await.assert_ok();
    }
    sqlx::query("UPDATE upload_previews SET expires_at = now() - interval '1 minute'")
        .execute(&s.app.db)
        .await
        .unwrap();
    let s = &s;
    let previews = futures::future::join_all((0..6).map(|i| async move {
        let name = format!("new-{i}.txt");
        let body = format!("new document {i}").into_bytes();
        s.preview(kb, &[(name.as_str(), body)], None).await
    }))
    .await;
    let commits: Vec<Value> = previews
        .iter()
        .map(|p| {
            let p = p.assert_ok();
            json!({ "previewToken": p["previewToken"], "items": [{ "tempResourceId": p["items"][0]["tempResourceId"], "decision": "NEW" }] })
        })
        .collect();
    let committed = futures::future::join_all(
        commits
            .iter()
            .map(|body| s.app.post("/document/upload/commit", t, body)),
    )
    .await;
    for reply in &committed {
        reply.assert_ok();
    }
    assert_eq!(s.app.count("documents").await, 6);
}
