//! Knowledge bases on PostgreSQL store instances other than the service's own: a database of
//! their own on the test server, reached as an administrator registers it (host, port,
//! database, user, password), holding the base's tables.

use api_tests::KbSetup;
use api_tests::Store;
use serde_json::{json, Value};
use sqlx::PgPool;

use crate::store_backends::{base_key, chunk_ids, first_content, search, upload_ok, ANIMALS, GUIDE_MD};

/// Another PostgreSQL: a new database on the test server, its store-instance config and a
/// pool to look into it.
async fn other_postgres() -> (Value, PgPool) {
    let url = api_tests::fresh_database().await;
    let u = reqwest::Url::parse(&url).expect("database URL");
    let config = json!({
        "host": u.host_str().expect("host"), "port": u.port().unwrap_or(5432),
        "database": u.path().trim_start_matches('/'), "username": u.username(),
        "password": u.password().unwrap_or_default(),
    });
    (
        config,
        PgPool::connect(&url).await.expect("connect to the other database"),
    )
}

async fn instance(s: &KbSetup, category: i64, kind: i64, config: &Value) -> i64 {
    s.app
        .post(
            "/store-instance",
            Some(&s.admin),
            &json!({ "name": format!("other postgres {kind}"), "category": category, "type": kind,
                     "config": config, "status": 1 }),
        )
        .await
        .assert_ok()
        .as_i64()
        .expect("store id")
}

/// The chunk ids a table of the other database holds (all, or of one document), sorted; none
/// when the table is not there.
async fn entry_ids(other: &PgPool, table: &str, document: Option<i64>) -> Vec<i64> {
    let exists: bool = sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
        .bind(format!("\"{table}\""))
        .fetch_one(other)
        .await
        .unwrap();
    if !exists {
        return vec![];
    }
    sqlx::query_scalar(&format!(
        "SELECT chunk_id FROM \"{table}\" WHERE $1::int8 IS NULL OR document_id = $1 ORDER BY chunk_id"
    ))
    .bind(document)
    .fetch_all(other)
    .await
    .unwrap()
}

/// A base on two instances of the other database, its two tables' names, and its documents.
struct OnOther {
    kb: i64,
    vectors: String,
    text: String,
    docs: Vec<i64>,
    instances: (i64, i64),
}

async fn on_other(s: &KbSetup, config: &Value) -> OnOther {
    let vector_store = instance(s, 1, 1, config).await;
    let text_store = instance(s, 2, 4, config).await;
    let kb = s
        .kb(
            "On another PostgreSQL",
            json!({ "vectorStoreInstanceId": vector_store, "searchEngineEnable": true,
                    "searchEngineInstanceId": text_store,
                    "maxChunkTokens": 16, "chunkOverlap": 0, "mergeShortSegments": false }),
        )
        .await;
    let key = base_key(s, kb).await;
    let docs = upload_ok(s, kb, &[("guide.md", GUIDE_MD), ("animals.txt", ANIMALS)]).await;
    OnOther {
        kb,
        vectors: format!("agent_platform_kb_{key}_vectors"),
        text: format!("agent_platform_kb_{key}_text"),
        docs,
        instances: (vector_store, text_store),
    }
}

#[tokio::test]
async fn a_base_on_another_postgres_keeps_its_vectors_and_words_there() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let t = Some(s.admin.as_str());
    let (config, other) = other_postgres().await;
    let probe = json!({ "type": "PGVECTOR", "config": config });
    assert_eq!(
        s.app.post("/store-instance/test", t, &probe).await.assert_ok(),
        &json!(true)
    );
    let OnOther {
        kb,
        vectors,
        text,
        docs,
        ..
    } = on_other(&s, &config).await;

    // Both tables hold an entry per chunk row; the rows in the service's database hold none.
    let rows = chunk_ids(&s, "rag_id", kb).await;
    assert!(rows.len() >= 4, "{rows:?}");
    assert_eq!(entry_ids(&other, &vectors, None).await, rows);
    assert_eq!(entry_ids(&other, &text, None).await, rows);
    assert_eq!(
        entry_ids(&other, &vectors, Some(docs[0])).await,
        chunk_ids(&s, "document_id", docs[0]).await
    );
    let in_service: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM chunks WHERE rag_id = $1 AND (embedding IS NOT NULL OR tsv IS NOT NULL)",
    )
    .bind(kb)
    .fetch_one(&s.app.db)
    .await
    .unwrap();
    assert_eq!(in_service, 0, "the entries live in the other database only");

    // Both sides find the chunk, from the other database.
    let r = search(&s, kb, "owls hunt at night").await;
    assert!(first_content(&r).contains("Owls hunt"), "{r}");
    assert!(r["metrics"]["vectorHitCount"].as_u64().unwrap() > 0, "{r}");
    assert!(r["metrics"]["bm25HitCount"].as_u64().unwrap() > 0, "{r}");

    // An edited chunk's new words and vector replace its entries there.
    let owl = r["results"][0]["chunkId"].as_i64().unwrap();
    s.app
        .put(
            &format!("/chunk/{owl}"),
            t,
            &json!({ "content": "Badgers dig deep burrows." }),
        )
        .await
        .assert_ok();
    let words: String = sqlx::query_scalar(&format!("SELECT entry::text FROM \"{text}\" WHERE chunk_id = $1"))
        .bind(owl)
        .fetch_one(&other)
        .await
        .unwrap();
    assert!(words.contains("badgers") && !words.contains("owls"), "{words}");
    let r = search(&s, kb, "badgers dig burrows").await;
    assert_eq!(r["results"][0]["chunkId"], owl, "{r}");

    // A deleted chunk and a deleted document leave both tables; the other document stays.
    s.app.delete(&format!("/chunk/{owl}"), t).await.assert_ok();
    s.app.delete(&format!("/document/{}", docs[0]), t).await.assert_ok();
    let left = chunk_ids(&s, "rag_id", kb).await;
    assert!(!left.is_empty() && !left.contains(&owl));
    assert_eq!(entry_ids(&other, &vectors, None).await, left);
    assert_eq!(entry_ids(&other, &text, None).await, left);

    // Deleting the base drops its tables.
    s.app.delete(&format!("/rag/{kb}"), t).await.assert_ok();
    let tables: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_tables WHERE tablename = ANY($1)")
        .bind([&vectors, &text])
        .fetch_one(&other)
        .await
        .unwrap();
    assert_eq!(tables, 0, "the base's tables are dropped with it");
}

#[tokio::test]
async fn another_postgres_down_fails_clearly_and_writes_nothing() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let t = Some(s.admin.as_str());
    let (config, other) = other_postgres().await;
    let OnOther {
        kb,
        vectors,
        text,
        docs,
        instances,
    } = on_other(&s, &config).await;
    let before = entry_ids(&other, &vectors, None).await;
    assert_eq!(entry_ids(&other, &text, None).await, before);

    // Both instances now point at a closed port.
    let mut closed = config.clone();
    closed["port"] = json!(api_tests::free_port());
    for id in [instances.0, instances.1] {
        s.app
            .put(&format!("/store-instance/{id}"), t, &json!({ "config": closed }))
            .await
            .assert_ok();
    }
    s.app
        .post("/rag/search", t, &json!({ "ragId": kb, "query": "owls" }))
        .await
        .assert_error(
            400,
            0,
            "the knowledge base's store failed: PostgreSQL (store instance) could not search",
        );
    let chunk = chunk_ids(&s, "rag_id", kb).await[0];
    s.app.delete(&format!("/chunk/{chunk}"), t).await.assert_error(
        400,
        0,
        "PostgreSQL (store instance) could not remove",
    );
    assert!(chunk_ids(&s, "rag_id", kb).await.contains(&chunk), "the row stays");
    s.app
        .delete(&format!("/document/{}", docs[1]), t)
        .await
        .assert_error(400, 0, "PostgreSQL (store instance)");
    s.app
        .delete(&format!("/rag/{kb}"), t)
        .await
        .assert_error(400, 0, "PostgreSQL (store instance) could not drop");

    // A new document fails at indexing with the reason and leaves no chunks.
    let files = [("more.txt", b"Herons stand still in shallow water.".to_vec())];
    let id = s.upload(kb, &files).await.assert_ok()["items"][0]["id"]
        .as_i64()
        .unwrap();
    let d = s.settled(id).await;
    assert_eq!(
        (d["status"].as_str(), d["errorStage"].as_str()),
        (Some("failed"), Some("indexing")),
        "{d}"
    );
    assert!(
        d["errorMessage"]
            .as_str()
            .unwrap()
            .contains("PostgreSQL (store instance) could not index"),
        "{d}"
    );
    assert!(s.chunk_texts(id).await.is_empty(), "nothing half-written");

    // Back up: nothing was lost or added meanwhile.
    for id in [instances.0, instances.1] {
        s.app
            .put(&format!("/store-instance/{id}"), t, &json!({ "config": config }))
            .await
            .assert_ok();
    }
    assert_eq!(entry_ids(&other, &vectors, None).await, before);
    assert_eq!(entry_ids(&other, &text, None).await, before);
    let r = search(&s, kb, "owls hunt at night").await;
    assert!(first_content(&r).contains("Owls"), "{r}");
}
