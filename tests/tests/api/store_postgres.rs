//! Knowledge bases on PostgreSQL store instances other than the service's own: a database of
//! their own on the test server, reached as an administrator registers it (host, port,
//! database, user, password), holding the base's tables.

use api_tests::KbSetup;
use api_tests::Store;
use serde_json::{json, Value};
use sqlx::PgPool;

use crate::store_backends::{
    base_key, chunk_ids, chunks_holding, fails_at_indexing, first_content, found_by_new_words, search, upload_ok,
    ANIMALS, GUIDE_MD,
};

async fn instance(s: &KbSetup, category: i64, kind: i64, config: &Value) -> i64 {
    s.app.store_instance(&s.admin, category, kind, config).await
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

/// A fresh service and another PostgreSQL, with a base on it holding two documents.
async fn based_on_other() -> (KbSetup, Value, PgPool, OnOther) {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let (config, other) = api_tests::other_postgres().await;
    let base = on_other(&s, &config).await;
    (s, config, other, base)
}

#[tokio::test]
async fn a_base_on_another_postgres_keeps_its_vectors_and_words_there() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let t = Some(s.admin.as_str());
    let (config, other) = api_tests::other_postgres().await;
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
    assert_eq!(
        chunks_holding(&s, kb, "embedding IS NOT NULL OR tsv IS NOT NULL").await,
        0,
        "the entries live in the other database only"
    );

    // Both sides find the chunk, from the other database.
    let r = search(&s, kb, "owls hunt at night").await;
    assert!(first_content(&r).contains("Owls hunt"), "{r}");
    assert!(r["metrics"]["vectorHitCount"].as_u64().unwrap() > 0, "{r}");
    assert!(r["metrics"]["bm25HitCount"].as_u64().unwrap() > 0, "{r}");

    // An edited chunk's new words and vector replace its entries there.
    let owl = r["results"][0]["chunkId"].as_i64().unwrap();
    found_by_new_words(&s, kb, owl).await;
    let words: String = sqlx::query_scalar(&format!("SELECT entry::text FROM \"{text}\" WHERE chunk_id = $1"))
        .bind(owl)
        .fetch_one(&other)
        .await
        .unwrap();
    assert!(words.contains("badgers") && !words.contains("owls"), "{words}");

    // A deleted chunk and a deleted document leave both tables; the other document stays.
    s.app.delete(&format!("/chunk/{owl}"), t).await.assert_ok();
    s.app.delete(&format!("/document/{}", docs[0]), t).await.assert_ok();
    let left = chunk_ids(&s, "rag_id", kb).await;
    assert!(!left.is_empty() && !left.contains(&owl));
    assert_eq!(entry_ids(&other, &vectors, None).await, left);
    assert_eq!(entry_ids(&other, &text, None).await, left);

    // Deleting the base drops its tables.
    s.app.delete(&format!("/rag/{kb}"), t).await.assert_ok();
    assert_eq!(
        tables(&other, [&vectors, &text]).await,
        0,
        "the base's tables are dropped with it"
    );
}

#[tokio::test]
async fn another_postgres_down_fails_clearly_and_writes_nothing() {
    let (s, config, other, base) = based_on_other().await;
    let t = Some(s.admin.as_str());
    let OnOther {
        kb,
        vectors,
        text,
        docs,
        instances,
    } = base;
    let before = entry_ids(&other, &vectors, None).await;
    assert_eq!(entry_ids(&other, &text, None).await, before);

    // Both instances now point at a closed port.
    let mut closed = config.clone();
    closed["port"] = json!(api_tests::refused_port());
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
    fails_at_indexing(&s, kb, "PostgreSQL (store instance) could not index").await;

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

/// The stores a base's row names, `(vectorStoreInstanceId, searchEngineInstanceId)`.
async fn stores_of(s: &KbSetup, kb: i64) -> (Option<i64>, Option<i64>) {
    let base = s.app.get(&format!("/rag/{kb}"), Some(&s.admin)).await;
    let base = base.assert_ok();
    (
        base["vectorStoreInstanceId"].as_i64(),
        base["searchEngineInstanceId"].as_i64(),
    )
}

/// A base given another PostgreSQL before that was used kept its entries in the service's
/// database: the migration that started using it points such a base (one with entries in
/// `chunks`, or with a document a worker of the code before is still processing) at the
/// built-in instances, where its entries are or will be, so its search still finds them. An
/// empty one, and one whose entries are in the other database already, keep their instances.
#[tokio::test]
async fn bases_filled_before_another_postgres_was_used_stay_on_the_built_in_store() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let t = Some(s.admin.as_str());
    let (config, _other) = api_tests::other_postgres().await;
    let OnOther {
        kb: remote, instances, ..
    } = on_other(&s, &config).await;
    let filled = s
        .kb("Filled before", json!({ "maxChunkTokens": 16, "chunkOverlap": 0 }))
        .await;
    upload_ok(&s, filled, &[("animals.txt", ANIMALS)]).await;
    let builtin = stores_of(&s, filled).await;
    let in_flight = s.kb("Being filled", json!({})).await;
    upload_ok(&s, in_flight, &[("animals.txt", ANIMALS)]).await;
    let empty = s.kb("Empty before", json!({})).await;
    // How such bases were stored: the other instances named, the entries in `chunks`; the
    // one in flight has a document still embedding, its entries not written yet.
    sqlx::query(
        "UPDATE knowledge_bases SET vector_store_instance_id = $1, search_engine_instance_id = $2
         WHERE id = ANY($3)",
    )
    .bind(instances.0)
    .bind(instances.1)
    .bind([filled, in_flight, empty])
    .execute(&s.app.db)
    .await
    .unwrap();
    sqlx::raw_sql(&format!(
        "UPDATE chunks SET embedding = NULL, tsv = NULL WHERE rag_id = {in_flight};
         UPDATE documents SET status = 'embedding' WHERE rag_id = {in_flight};"
    ))
    .execute(&s.app.db)
    .await
    .unwrap();
    let r = s
        .app
        .post(
            "/rag/search",
            t,
            &json!({ "ragId": filled, "query": "owls hunt at night" }),
        )
        .await;
    assert_eq!(
        r.assert_ok()["results"],
        json!([]),
        "the other database holds nothing of it"
    );

    sqlx::raw_sql(include_str!(
        "../../../migrations/0036_bases_on_other_postgres_before_it_was_used.sql"
    ))
    .execute(&s.app.db)
    .await
    .unwrap();
    assert_eq!(stores_of(&s, filled).await, builtin);
    assert!(first_content(&search(&s, filled, "owls hunt at night").await).contains("Owls hunt"));
    assert_eq!(stores_of(&s, in_flight).await, builtin);
    let others = (Some(instances.0), Some(instances.1));
    assert_eq!(stores_of(&s, empty).await, others);
    assert_eq!(stores_of(&s, remote).await, others, "its entries are there");
    assert!(first_content(&search(&s, remote, "owls hunt at night").await).contains("Owls hunt"));
}

/// With `tls` (or a `caCert`) another PostgreSQL is reached over TLS only: the test server,
/// which offers none, is refused rather than used in the clear. A `caCert` that is not PEM is
/// refused by name, and no instance is stored with it.
#[tokio::test]
async fn tls_to_another_postgres_is_required_when_asked_and_a_ca_must_be_pem() {
    let app = api_tests::spawn(Store::Filesystem).await;
    let admin = app.admin_token().await;
    let t = Some(admin.as_str());
    let (config, _other) = api_tests::other_postgres().await;
    let test = |config: Value| json!({ "type": "PGVECTOR", "config": config });
    app.post("/store-instance/test", t, &test(config.clone()))
        .await
        .assert_ok();
    let mut tls = config.clone();
    tls["tls"] = json!(true);
    app.post("/store-instance/test", t, &test(tls))
        .await
        .assert_error(400, 0, "connection test failed");

    let mut ca = config.clone();
    ca["caCert"] = json!("not a certificate");
    let refusal = "config.caCert must be PEM certificates";
    app.post("/store-instance/test", t, &test(ca.clone()))
        .await
        .assert_error(400, 0, refusal);
    let before = app.count("store_instances").await;
    app.post(
        "/store-instance",
        t,
        &json!({ "name": "bad ca", "category": 1, "type": 1, "config": ca }),
    )
    .await
    .assert_error(400, 0, refusal);
    assert_eq!(app.count("store_instances").await, before);
}

/// How many of these tables the other database holds.
async fn tables(other: &PgPool, names: [&str; 2]) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM pg_tables WHERE tablename = ANY($1)")
        .bind(names)
        .fetch_one(other)
        .await
        .unwrap()
}

/// A base emptied and moved off another PostgreSQL drops its tables there, the full-text one
/// too: nothing else would ever drop a table left on a store the base no longer names.
#[tokio::test]
async fn a_base_moved_off_another_postgres_drops_its_tables_there() {
    let (s, _, other, base) = based_on_other().await;
    let t = Some(s.admin.as_str());
    let OnOther {
        kb,
        vectors,
        text,
        docs,
        ..
    } = base;
    for doc in docs {
        s.app.delete(&format!("/document/{doc}"), t).await.assert_ok();
    }
    assert_eq!(tables(&other, [&vectors, &text]).await, 2, "emptied, the tables stay");
    let moved = json!({ "searchEngineInstanceId": s.app.builtin_store(&s.admin, 2).await });
    s.app.put(&format!("/rag/{kb}"), t, &moved).await.assert_ok();
    assert_eq!(tables(&other, [&vectors, &text]).await, 1, "the text table went");
    let moved = json!({ "vectorStoreInstanceId": s.app.builtin_store(&s.admin, 1).await });
    s.app.put(&format!("/rag/{kb}"), t, &moved).await.assert_ok();
    assert_eq!(tables(&other, [&vectors, &text]).await, 0, "the vector table went");
}
