//! Knowledge bases on Milvus (a real milvus-lite server, `MILVUS_URL`) and OpenSearch (the
//! scripted stand-in of `opensearch_server`, checking the requests our client sends).

use api_tests::opensearch_server::OpenSearchServer;
use api_tests::{KbSetup, Store};
use milvus::v2::prelude::*;
use serde_json::{json, Value};

pub(crate) const GUIDE_MD: &str = "# Install\n\nDownload the package and unpack it.\n\n## Linux\n\nRun the installer as root.\n\n# Use\n\nStart the service with the start command.\n";
pub(crate) const ANIMALS: &str = "Foxes are small omnivorous mammals.\n\nOwls hunt at night with silent wings.";

fn milvus_url() -> String {
    std::env::var("MILVUS_URL").expect("MILVUS_URL must be set: run the tests with `make test`")
}

fn milvus_port() -> u16 {
    reqwest::Url::parse(&milvus_url())
        .expect("MILVUS_URL")
        .port()
        .expect("MILVUS_URL port")
}

async fn milvus() -> ClientV2 {
    ClientV2::new(&ConnectConfig::new().uri(milvus_url()))
        .await
        .expect("connect to milvus-lite")
}

/// How the service names a base in a shared store: id and creation time in microseconds.
pub(crate) async fn base_key(s: &KbSetup, kb: i64) -> String {
    let created: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("SELECT create_dt FROM knowledge_bases WHERE id = $1")
            .bind(kb)
            .fetch_one(&s.app.db)
            .await
            .unwrap();
    format!("{kb}_{}", created.timestamp_micros())
}

/// Chunk ids Milvus holds for a base (all, or of one document), sorted.
async fn milvus_ids(collection: &str, document: Option<i64>) -> Vec<i64> {
    let client = milvus().await;
    let exists = client
        .has_collection(
            HasCollectionRequest::builder()
                .collection_name(collection)
                .build()
                .unwrap(),
        )
        .await
        .unwrap()
        .exists();
    if !exists {
        return vec![];
    }
    let filter = match document {
        Some(d) => format!("document_id == {d}"),
        None => "chunk_id >= 0".to_owned(),
    };
    let reply = client
        .query(
            QueryRequest::builder()
                .collection_name(collection)
                .filter(filter)
                .output_fields(["chunk_id"])
                .consistency_level(ConsistencyLevel::Strong)
                .build()
                .unwrap(),
        )
        .await
        .unwrap();
    let mut ids: Vec<i64> = reply
        .results()
        .rows()
        .unwrap()
        .map(|r| match r.get("chunk_id").unwrap() {
            ResultValue::Int64(id) => id,
            other => panic!("chunk_id is {other:?}"),
        })
        .collect();
    ids.sort();
    ids
}

async fn store(s: &KbSetup, category: i64, kind: i64, port: u16) -> i64 {
    s.app
        .post(
            "/store-instance",
            Some(&s.admin),
            &json!({ "name": format!("store {kind} on {port}"), "category": category, "type": kind,
                     "config": { "host": "127.0.0.1", "port": port }, "status": 1 }),
        )
        .await
        .assert_ok()
        .as_i64()
        .expect("store id")
}

pub(crate) async fn chunk_ids(s: &KbSetup, sql_filter: &str, id: i64) -> Vec<i64> {
    sqlx::query_scalar(&format!("SELECT id FROM chunks WHERE {sql_filter} = $1 ORDER BY id"))
        .bind(id)
        .fetch_all(&s.app.db)
        .await
        .unwrap()
}

/// How many of the base's chunk rows meet `condition` (SQL over `chunks`).
pub(crate) async fn chunks_holding(s: &KbSetup, kb: i64, condition: &str) -> i64 {
    sqlx::query_scalar(&format!(
        "SELECT count(*) FROM chunks WHERE rag_id = $1 AND ({condition})"
    ))
    .bind(kb)
    .fetch_one(&s.app.db)
    .await
    .unwrap()
}

/// Uploads a new document into a base whose store is down: it fails at indexing with a message
/// naming the store (`backend`), and leaves no chunks.
pub(crate) async fn fails_at_indexing(s: &KbSetup, kb: i64, backend: &str) {
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
    assert!(d["errorMessage"].as_str().unwrap().contains(backend), "{d}");
    assert!(s.chunk_texts(id).await.is_empty(), "nothing half-written");
}

pub(crate) async fn upload_ok(s: &KbSetup, kb: i64, files: &[(&str, &str)]) -> Vec<i64> {
    let files: Vec<(&str, Vec<u8>)> = files.iter().map(|(n, c)| (*n, c.as_bytes().to_vec())).collect();
    let reply = s.upload(kb, &files).await;
    let ids: Vec<i64> = reply.assert_ok()["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["id"].as_i64())
        .collect();
    for id in &ids {
        let d = s.settled(*id).await;
        assert_eq!(d["status"], "success", "{d}");
    }
    ids
}

pub(crate) async fn search(s: &KbSetup, kb: i64, query: &str) -> Value {
    s.app
        .post(
            "/rag/search",
            Some(&s.admin),
            &json!({ "ragId": kb, "query": query, "debug": true }),
        )
        .await
        .assert_ok()
        .clone()
}

pub(crate) fn first_content(r: &Value) -> String {
    r["results"][0]["content"].as_str().unwrap_or_default().to_owned()
}

/// Rewrites a chunk as "Badgers dig deep burrows." and checks that search finds it first by
/// its new words.
pub(crate) async fn found_by_new_words(s: &KbSetup, kb: i64, chunk: i64) {
    s.app
        .put(
            &format!("/chunk/{chunk}"),
            Some(&s.admin),
            &json!({ "content": "Badgers dig deep burrows." }),
        )
        .await
        .assert_ok();
    let r = search(s, kb, "badgers dig burrows").await;
    assert_eq!(r["results"][0]["chunkId"], chunk, "{r}");
    assert!(first_content(&r).contains("Badgers"), "{r}");
}

#[tokio::test]
async fn a_base_on_milvus_indexes_searches_and_answers_from_milvus() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let t = Some(s.admin.as_str());
    let probe = json!({ "type": "MILVUS", "config": { "host": "127.0.0.1", "port": milvus_port() } });
    let reached = s.app.post("/store-instance/test", t, &probe).await;
    assert_eq!(
        reached.assert_ok(),
        &json!(true),
        "the connection test reaches milvus-lite"
    );
    let milvus_store = store(&s, 1, 2, milvus_port()).await;
    // Vector search only: every hit must come from Milvus.
    let kb = s
        .kb(
            "On Milvus",
            json!({ "vectorStoreInstanceId": milvus_store, "searchEngineEnable": false,
                    "maxChunkTokens": 16, "chunkOverlap": 0, "mergeShortSegments": false }),
        )
        .await;
    let coll = format!("agent_platform_kb_{}", base_key(&s, kb).await);
    let docs = upload_ok(&s, kb, &[("guide.md", GUIDE_MD), ("animals.txt", ANIMALS)]).await;

    // Milvus holds one vector per chunk row; the rows keep none.
    let rows = chunk_ids(&s, "rag_id", kb).await;
    assert!(rows.len() >= 4, "{rows:?}");
    assert_eq!(milvus_ids(&coll, None).await, rows);
    assert_eq!(
        milvus_ids(&coll, Some(docs[0])).await,
        chunk_ids(&s, "document_id", docs[0]).await
    );
    assert_eq!(
        chunks_holding(&s, kb, "embedding IS NOT NULL").await,
        0,
        "vectors live in Milvus only"
    );

    // The store cannot change under indexed documents.
    let builtin = s.app.builtin_store(&s.admin, 1).await;
    s.app
        .put(&format!("/rag/{kb}"), t, &json!({ "vectorStoreInstanceId": builtin }))
        .await
        .assert_error(400, 0, "cannot change while the knowledge base has documents");

    let r = search(&s, kb, "owls hunt at night").await;
    assert!(first_content(&r).contains("Owls hunt"), "{r}");
    assert!(r["metrics"]["vectorHitCount"].as_u64().unwrap() > 0, "{r}");
    assert_eq!(r["metrics"]["bm25HitCount"], 0);
    let score = r["results"][0]["score"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&score), "{r}");

    // Q&A retrieves through Milvus too.
    let provider = s.app.provider(&s.admin, "chat").await;
    let chat = s
        .app
        .model(&s.admin, provider, "CHAT", "chat-echo", &s.models.base_url, json!({}))
        .await;
    s.app
        .put(
            &format!("/rag/{kb}/config"),
            t,
            &json!({ "modelParams": { "modelId": chat, "prompt": "CONTEXT<{context}> Q<{query}>" } }),
        )
        .await
        .assert_ok();
    let reply = s
        .app
        .post(
            "/rag/qa/stream",
            t,
            &json!({ "ragId": kb, "query": "owls hunt at night" }),
        )
        .await;
    let events: Vec<Value> = String::from_utf8_lossy(&reply.bytes)
        .lines()
        .map(|l| serde_json::from_str(l).expect("NDJSON line"))
        .collect();
    let text: String = events.iter().filter_map(|e| e["data"].as_str()).collect();
    assert!(
        text.contains("Owls hunt at night"),
        "the context came from Milvus: {text}"
    );
    let done = events.last().unwrap();
    assert_eq!(done["type"], "done", "{text}");
    assert!(!done["references"].as_array().unwrap().is_empty(), "{done}");

    // An edited chunk is re-embedded into Milvus: the new words find it.
    let owl = r["results"][0]["chunkId"].as_i64().unwrap();
    found_by_new_words(&s, kb, owl).await;

    // A chunk added by hand goes to Milvus and is found.
    let added = s
        .app
        .post(
            "/chunk",
            t,
            &json!({ "ragId": kb, "documentId": docs[1], "content": "Otters float on their backs." }),
        )
        .await
        .assert_ok()["id"]
        .as_i64()
        .unwrap();
    assert!(milvus_ids(&coll, Some(docs[1])).await.contains(&added));
    let found = search(&s, kb, "otters float").await;
    assert!(
        found["results"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["chunkId"] == added),
        "{found}"
    );

    // A deleted chunk leaves Milvus.
    s.app.delete(&format!("/chunk/{owl}"), t).await.assert_ok();
    assert!(!milvus_ids(&coll, None).await.contains(&owl));
    assert_eq!(milvus_ids(&coll, None).await, chunk_ids(&s, "rag_id", kb).await);

    // A deleted document takes its vectors along; the other document's stay.
    s.app.delete(&format!("/document/{}", docs[0]), t).await.assert_ok();
    assert!(milvus_ids(&coll, Some(docs[0])).await.is_empty());
    assert_eq!(milvus_ids(&coll, None).await, chunk_ids(&s, "rag_id", kb).await);
    assert!(!milvus_ids(&coll, None).await.is_empty());

    // Deleting the base drops its collection.
    s.app.delete(&format!("/rag/{kb}"), t).await.assert_ok();
    let gone = milvus()
        .await
        .has_collection(HasCollectionRequest::builder().collection_name(&coll).build().unwrap())
        .await
        .unwrap()
        .exists();
    assert!(!gone, "the collection is dropped with the base");
}

/// A base on milvus-lite, vector search only: its store instance, its id and its collection.
async fn milvus_base(s: &KbSetup, name: &str) -> (i64, i64, String) {
    let instance = store(s, 1, 2, milvus_port()).await;
    let body = json!({ "vectorStoreInstanceId": instance, "searchEngineEnable": false });
    let kb = s.kb(name, body).await;
    let coll = format!("agent_platform_kb_{}", base_key(s, kb).await);
    (instance, kb, coll)
}

#[tokio::test]
async fn a_milvus_collection_left_unloaded_is_loaded_again_by_search() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let (_, kb, coll) = milvus_base(&s, "Unloaded Milvus").await;
    upload_ok(&s, kb, &[("animals.txt", ANIMALS)]).await;
    // What a first write cut between Milvus's calls leaves, or a release by an operator:
    // the collection and its vectors exist, but Milvus will not search it.
    milvus()
        .await
        .release_collection(
            ReleaseCollectionRequest::builder()
                .collection_name(&coll)
                .build()
                .unwrap(),
        )
        .await
        .unwrap();

    let r = search(&s, kb, "owls hunt at night").await;
    assert!(first_content(&r).contains("Owls hunt"), "{r}");
    assert!(r["metrics"]["vectorHitCount"].as_u64().unwrap() > 0, "{r}");
}

#[tokio::test]
async fn milvus_down_fails_clearly_and_writes_nothing() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let t = Some(s.admin.as_str());
    let (good, kb, coll) = milvus_base(&s, "Flaky Milvus").await;
    let docs = upload_ok(&s, kb, &[("animals.txt", ANIMALS)]).await;
    let before = milvus_ids(&coll, None).await;
    assert!(!before.is_empty());

    // The instance now points at a closed port.
    s.app
        .put(
            &format!("/store-instance/{good}"),
            t,
            &json!({ "config": { "host": "127.0.0.1", "port": 9 } }),
        )
        .await
        .assert_ok();
    s.app
        .post("/rag/search", t, &json!({ "ragId": kb, "query": "owls" }))
        .await
        .assert_error(400, 0, "Milvus");
    let chunk = chunk_ids(&s, "rag_id", kb).await[0];
    s.app
        .delete(&format!("/chunk/{chunk}"), t)
        .await
        .assert_error(400, 0, "Milvus could not remove");
    assert!(chunk_ids(&s, "rag_id", kb).await.contains(&chunk), "the row stays");
    s.app
        .put(&format!("/chunk/{chunk}"), t, &json!({ "content": "Changed words." }))
        .await
        .assert_error(400, 0, "Milvus could not index");
    assert_ne!(
        s.chunk_texts(docs[0]).await[0],
        "Changed words.",
        "the edit rolled back"
    );
    s.app
        .delete(&format!("/document/{}", docs[0]), t)
        .await
        .assert_error(400, 0, "Milvus");
    assert_eq!(s.chunk_texts(docs[0]).await.len(), before.len(), "the document stays");
    s.app
        .delete(&format!("/rag/{kb}"), t)
        .await
        .assert_error(400, 0, "Milvus could not drop");
    s.app.get(&format!("/rag/{kb}"), t).await.assert_ok();
    // An empty base on it taking another embedding model drops its collection first: refused,
    // naming the store and the step, never the address it could not reach.
    let empty = s
        .kb(
            "Empty on Milvus",
            json!({ "vectorStoreInstanceId": good, "searchEngineEnable": false }),
        )
        .await;
    let provider = s.app.provider(&s.admin, "wider").await;
    let wider = s
        .app
        .model(
            &s.admin,
            provider,
            "EMBEDDING",
            "emb-384",
            &s.models.base_url,
            json!({}),
        )
        .await;
    let refused = s
        .app
        .put(&format!("/rag/{empty}"), t, &json!({ "embeddingModelId": wider }))
        .await;
    refused.assert_error(
        400,
        0,
        "the knowledge base's store failed: Milvus could not drop the base's index",
    );
    assert!(
        !refused.body["msg"].as_str().unwrap().contains("127.0.0.1"),
        "{:?}",
        refused.body
    );
    let kept = s.app.get(&format!("/rag/{empty}"), t).await;
    assert_eq!(kept.assert_ok()["embeddingModelId"], s.embedding_model);

    // A new document fails at indexing with the reason and leaves no chunks.
    fails_at_indexing(&s, kb, "Milvus").await;

    // Back up: nothing was lost or added meanwhile.
    s.app
        .put(
            &format!("/store-instance/{good}"),
            t,
            &json!({ "config": { "host": "127.0.0.1", "port": milvus_port() } }),
        )
        .await
        .assert_ok();
    assert_eq!(milvus_ids(&coll, None).await, before);
    assert!(first_content(&search(&s, kb, "owls hunt").await).contains("Owls"));
}

fn of<'a>(
    requests: &'a [api_tests::opensearch_server::Recorded],
    method: &str,
    path: &str,
) -> Vec<&'a api_tests::opensearch_server::Recorded> {
    requests
        .iter()
        .filter(|r| r.method == method && r.path == path)
        .collect()
}

/// An edit of a chunk that Milvus took and OpenSearch then refused keeps the chunk in Milvus
/// (with the new vector, until the edit is sent again): removing it there, as for a new chunk,
/// took the chunk out of vector search.
#[tokio::test]
async fn a_chunk_edit_refused_by_the_second_engine_keeps_the_chunk_in_the_first() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let t = Some(s.admin.as_str());
    let os = OpenSearchServer::start().await;
    let engine = store(&s, 2, 3, os.port).await;
    let vectors = store(&s, 1, 2, milvus_port()).await;
    let kb = s
        .kb(
            "Two engines",
            json!({ "vectorStoreInstanceId": vectors, "searchEngineInstanceId": engine, "searchEngineEnable": true }),
        )
        .await;
    let coll = format!("agent_platform_kb_{}", base_key(&s, kb).await);
    upload_ok(&s, kb, &[("animals.txt", ANIMALS)]).await;
    let chunk = chunk_ids(&s, "rag_id", kb).await[0];
    assert!(milvus_ids(&coll, None).await.contains(&chunk));
    s.app
        .put(
            &format!("/store-instance/{engine}"),
            t,
            &json!({ "config": { "host": "127.0.0.1", "port": 9 } }),
        )
        .await
        .assert_ok();
    s.app
        .put(&format!("/chunk/{chunk}"), t, &json!({ "content": "Changed words." }))
        .await
        .assert_error(400, 0, "OpenSearch could not index");
    assert!(
        milvus_ids(&coll, None).await.contains(&chunk),
        "the chunk is still in Milvus"
    );
    assert_ne!(s.chunk_texts(chunk_doc(&s, chunk).await).await[0], "Changed words.");
}

async fn chunk_doc(s: &KbSetup, chunk: i64) -> i64 {
    sqlx::query_scalar("SELECT document_id FROM chunks WHERE id = $1")
        .bind(chunk)
        .fetch_one(&s.app.db)
        .await
        .unwrap()
}

#[tokio::test]
async fn opensearch_full_text_sends_the_recorded_shapes_and_fuses_its_hits() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let t = Some(s.admin.as_str());
    let os = OpenSearchServer::start().await;
    let engine = store(&s, 2, 3, os.port).await;
    let kb = s
        .kb(
            "On OpenSearch",
            json!({ "searchEngineInstanceId": engine, "searchEngineEnable": true,
                    "maxChunkTokens": 16, "chunkOverlap": 0, "mergeShortSegments": false }),
        )
        .await;
    let index = format!("agent-platform-kb-{}-text", base_key(&s, kb).await);
    let path = format!("/{index}");
    let docs = upload_ok(&s, kb, &[("guide.md", GUIDE_MD), ("animals.txt", ANIMALS)]).await;
    let rows = chunk_ids(&s, "rag_id", kb).await;

    // The index was created with the word analyzer, then filled by bulk requests.
    let reqs = os.requests();
    // Two documents indexed at once may both find no index; the second create is told it exists.
    let puts = of(&reqs, "PUT", &path).len();
    assert!((1..=2).contains(&puts), "{reqs:?}");
    let mapping = os.mapping(&index).unwrap();
    assert_eq!(mapping["mappings"]["properties"]["content"]["analyzer"], "words");
    assert_eq!(
        mapping["settings"]["analysis"]["analyzer"]["words"]["tokenizer"],
        "whitespace"
    );
    assert_eq!(mapping["mappings"]["properties"]["chunk_id"]["type"], "long");
    let bulks = of(&reqs, "POST", &format!("{path}/_bulk"));
    assert_eq!(bulks.len(), 2, "one bulk per document: {reqs:?}");
    assert!(bulks.iter().all(|b| b.query.contains("refresh=wait_for")));
    let lines = bulks[0].lines();
    assert_eq!(lines.len() % 2, 0);
    let id = lines[0]["index"]["_id"].as_str().unwrap().parse::<i64>().unwrap();
    assert_eq!(lines[1]["chunk_id"], id);
    assert!(lines[1]["document_id"].as_i64().is_some() && lines[1]["content"].is_string());
    assert_eq!(os.ids(&index).unwrap(), rows, "every chunk is in OpenSearch");
    assert_eq!(
        chunks_holding(&s, kb, "tsv IS NOT NULL").await,
        0,
        "full text lives in OpenSearch only"
    );

    // Search asks OpenSearch with a match query and fuses its BM25 hits with the vectors.
    let r = search(&s, kb, "installer root").await;
    let sent = os.requests();
    let query = of(&sent, "POST", &format!("{path}/_search"))
        .last()
        .map(|r| r.lines()[0].clone())
        .unwrap();
    assert_eq!(query["query"]["match"]["content"]["query"], "installer root", "{query}");
    assert_eq!(query["query"]["match"]["content"]["operator"], "or");
    assert_eq!(query["_source"], json!(["chunk_id"]));
    assert!(query["size"].as_u64().unwrap() >= 10);
    assert_eq!(r["metrics"]["bm25HitCount"], 1, "{r}");
    assert!(r["metrics"]["vectorHitCount"].as_u64().unwrap() > 1, "{r}");
    assert!(first_content(&r).contains("installer as root"), "{r}");
    let top = r["results"][0]["score"].as_f64().unwrap();
    let next = r["results"][1]["score"].as_f64().unwrap();
    assert!(top > next, "the BM25 hit is lifted by fusion: {r}");
    // A long question within the query limit: each word sent once, at most 1,000 of them.
    let long = format!("{}installer root", "a b ".repeat(520));
    let r = search(&s, kb, &long).await;
    assert!(first_content(&r).contains("installer as root"), "{r}");
    let symbols: Vec<char> = ('a'..='z').chain('0'..='9').collect();
    let many: String = (0..1100)
        .map(|i| format!("{}{} ", symbols[i / 36], symbols[i % 36]))
        .collect();
    let r = search(&s, kb, &many).await;
    assert!(r["results"].as_array().is_some_and(|a| !a.is_empty()), "{r}");

    // Chunk edit re-indexes one document; chunk and document deletes send delete lines.
    let chunk = rows[0];
    s.app
        .put(
            &format!("/chunk/{chunk}"),
            t,
            &json!({ "content": "Kestrels hover over fields." }),
        )
        .await
        .assert_ok();
    let r = search(&s, kb, "kestrels").await;
    assert_eq!(r["metrics"]["bm25HitCount"], 1, "{r}");
    assert_eq!(r["results"][0]["chunkId"], chunk, "{r}");
    s.app.delete(&format!("/chunk/{chunk}"), t).await.assert_ok();
    let last = os.requests().last().unwrap().clone();
    assert_eq!(
        (last.method.as_str(), last.lines()),
        ("POST", vec![json!({ "delete": { "_id": chunk.to_string() } })])
    );
    s.app.delete(&format!("/document/{}", docs[1]), t).await.assert_ok();
    assert_eq!(os.ids(&index).unwrap(), chunk_ids(&s, "rag_id", kb).await);

    // Deleting the base deletes its index.
    s.app.delete(&format!("/rag/{kb}"), t).await.assert_ok();
    assert_eq!(of(&os.requests(), "DELETE", &path).len(), 1);
    assert!(os.ids(&index).is_none());
}

#[tokio::test]
async fn opensearch_knn_vectors_and_a_down_engine() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let t = Some(s.admin.as_str());
    let os = OpenSearchServer::start().await;
    let vectors = store(&s, 1, 3, os.port).await;
    let kb = s
        .kb(
            "kNN",
            json!({ "vectorStoreInstanceId": vectors, "searchEngineEnable": false }),
        )
        .await;
    upload_ok(&s, kb, &[("animals.txt", ANIMALS)]).await;
    let index = format!("agent-platform-kb-{}-vectors", base_key(&s, kb).await);
    let mapping = os.mapping(&index).unwrap();
    let field = &mapping["mappings"]["properties"]["embedding"];
    assert_eq!(
        (field["type"].as_str(), field["dimension"].as_i64()),
        (Some("knn_vector"), Some(8))
    );
    assert_eq!(field["method"]["space_type"], "cosinesimil");
    assert_eq!(mapping["settings"]["index"]["knn"], true);
    let r = search(&s, kb, "owls hunt at night").await;
    assert!(first_content(&r).contains("Owls"), "{r}");
    let sent = os.requests();
    let knn = of(&sent, "POST", &format!("/{index}/_search")).last().unwrap().lines()[0].clone();
    assert_eq!(
        knn["query"]["knn"]["embedding"]["vector"].as_array().unwrap().len(),
        8,
        "{knn}"
    );
    assert!(knn["query"]["knn"]["embedding"]["k"].as_u64().is_some());

    // Emptied, the base takes a model of another dimension: the store's index is made again
    // for it (kept, it refused every vector of the new length, and the base could not index).
    s.delete_documents(kb).await;
    let wider = s.embedding_model("emb-384").await;
    s.app
        .put(&format!("/rag/{kb}"), t, &json!({ "embeddingModelId": wider }))
        .await
        .assert_ok();
    upload_ok(&s, kb, &[("animals.txt", ANIMALS)]).await;
    let field = &os.mapping(&index).unwrap()["mappings"]["properties"]["embedding"];
    assert_eq!(field["dimension"].as_i64(), Some(384));
    // Emptied again, it moves to another store (its index here dropped), changes its length
    // there, and comes back: nothing of its first stay is met again.
    s.delete_documents(kb).await;
    let other = OpenSearchServer::start().await;
    let elsewhere = store(&s, 1, 3, other.port).await;
    let edits = [
        json!({ "vectorStoreInstanceId": elsewhere }),
        json!({ "embeddingModelId": s.embedding_model }),
        json!({ "vectorStoreInstanceId": vectors }),
    ];
    for edit in edits {
        s.app.put(&format!("/rag/{kb}"), t, &edit).await.assert_ok();
        if edit.get("vectorStoreInstanceId") == Some(&json!(elsewhere)) {
            assert!(os.mapping(&index).is_none(), "left behind");
        }
    }
    upload_ok(&s, kb, &[("animals.txt", ANIMALS)]).await;
    let field = &os.mapping(&index).unwrap()["mappings"]["properties"]["embedding"];
    assert_eq!(field["dimension"].as_i64(), Some(8));

    // A full-text engine that is down: the document fails at indexing, nothing is kept.
    let down = store(&s, 2, 3, 9).await;
    let kb2 = s
        .kb(
            "Down",
            json!({ "searchEngineInstanceId": down, "searchEngineEnable": true }),
        )
        .await;
    fails_at_indexing(&s, kb2, "OpenSearch").await;
    // Search on a base whose engine is down is a code-0 error naming it.
    s.app
        .put(
            &format!("/store-instance/{vectors}"),
            t,
            &json!({ "config": { "host": "127.0.0.1", "port": 9 } }),
        )
        .await
        .assert_ok();
    s.app
        .post("/rag/search", t, &json!({ "ragId": kb, "query": "owls" }))
        .await
        .assert_error(400, 0, "store failed");
}

/// A base created while its store instance is being changed to another category waits for
/// that change and is refused: it was checked before, and got a search engine as its vector
/// store.
#[tokio::test]
async fn a_base_is_not_given_a_store_changing_kind_meanwhile() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let t = Some(s.admin.as_str());
    let instance = store(&s, 1, 2, milvus_port()).await;
    let before = s.app.count("knowledge_bases").await;
    // An edit of the instance in flight, as the store service makes it: the row taken.
    let mut editing = s.app.db.begin().await.unwrap();
    sqlx::query("UPDATE store_instances SET category = 2, store_type = 3 WHERE id = $1")
        .bind(instance)
        .execute(&mut *editing)
        .await
        .unwrap();
    let body = json!({ "name": "Racing", "embeddingModelId": s.embedding_model, "dimensionOfVectorModel": 8,
                       "vectorStoreInstanceId": instance, "searchEngineEnable": false });
    let create = s.app.post("/rag", t, &body);
    let edit = async {
        api_tests::until_a_statement_waits_for_a_lock(&s.app.db).await;
        editing.commit().await.unwrap();
    };
    let (created, ()) = tokio::join!(create, edit);
    created.assert_error(400, 0, "is not an active VECTOR_STORE");
    assert_eq!(s.app.count("knowledge_bases").await, before);
}

/// A base on Milvus holding one document (`old`) and its vectors there.
struct OnMilvus {
    kb: i64,
    coll: String,
    old: i64,
    vectors: Vec<i64>,
}

async fn on_milvus(s: &KbSetup, name: &str) -> OnMilvus {
    let milvus_store = store(s, 1, 2, milvus_port()).await;
    let kb = s
        .kb(
            name,
            json!({ "vectorStoreInstanceId": milvus_store, "searchEngineEnable": false }),
        )
        .await;
    let coll = format!("agent_platform_kb_{}", base_key(s, kb).await);
    let old = upload_ok(s, kb, &[("animals.txt", ANIMALS)]).await[0];
    let vectors = milvus_ids(&coll, Some(old)).await;
    assert!(!vectors.is_empty());
    OnMilvus { kb, coll, old, vectors }
}

/// A commit is checked whole before anything is written: an overwrite followed by a choice the
/// preview does not allow is refused with the overwritten document and its vectors in Milvus
/// as they were (a store's removals are not undone when the transaction rolls back).
#[tokio::test]
async fn a_refused_commit_leaves_milvus_as_it_was() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let t = Some(s.admin.as_str());
    let OnMilvus { kb, coll, old, vectors } = on_milvus(&s, "Refused").await;
    let files = [
        ("animals.txt", ANIMALS.as_bytes().to_vec()),
        ("new.txt", b"something else".to_vec()),
    ];
    let p = s.preview(kb, &files, Some((2, 2))).await.assert_ok().clone();
    assert_eq!(api_tests::preview_decisions(&p), ["OVERWRITE", "NEW"]);
    let item =
        |i: usize, decision: &str| json!({ "tempResourceId": p["items"][i]["tempResourceId"], "decision": decision });
    let body = json!({ "previewToken": p["previewToken"], "items": [item(0, "OVERWRITE"), item(1, "OVERWRITE")] });
    s.app.post("/document/upload/commit", t, &body).await.assert_error(
        400,
        0,
        "items[1]: new.txt has no existing document to overwrite",
    );
    assert_eq!(milvus_ids(&coll, Some(old)).await, vectors);
    assert_eq!(
        s.app.get(&format!("/document/{old}"), t).await.assert_ok()["status"],
        "success"
    );
}

/// A commit that overwrites a document and then fails on a later statement leaves the old
/// document's vectors in Milvus: the store's removals come last, after every statement that
/// can refuse the commit.
#[tokio::test]
async fn a_commit_that_fails_after_its_overwrite_keeps_the_vectors_in_milvus() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let t = Some(s.admin.as_str());
    let OnMilvus { kb, coll, old, vectors } = on_milvus(&s, "Late failure").await;
    let p = s
        .preview(kb, &[("animal-copy.txt", ANIMALS.as_bytes().to_vec())], Some((2, 2)))
        .await
        .assert_ok()
        .clone();
    assert_eq!(api_tests::preview_decisions(&p), ["OVERWRITE"]);
    // The new document's row cannot be written: the commit fails after the old one's delete.
    sqlx::raw_sql("ALTER TABLE documents ADD CONSTRAINT refuse_copy CHECK (name <> 'animal-copy.txt') NOT VALID")
        .execute(&s.app.db)
        .await
        .unwrap();
    let item = json!({ "tempResourceId": p["items"][0]["tempResourceId"], "decision": "OVERWRITE" });
    // The service's own failure, told without the database's words.
    s.app
        .post(
            "/document/upload/commit",
            t,
            &json!({ "previewToken": p["previewToken"], "items": [item] }),
        )
        .await
        .assert_error(500, 500, "internal server error");
    assert_eq!(
        milvus_ids(&coll, Some(old)).await,
        vectors,
        "the old document is still found"
    );
    assert_eq!(
        s.app.get(&format!("/document/{old}"), t).await.assert_ok()["status"],
        "success"
    );
}

/// A reprocessed document whose final write rolls back leaves Milvus as it was: the old chunks'
/// entries are removed last before the commit, and the new ones taken out again (they stayed,
/// found by search under ids no row has, and the old ones were gone).
#[tokio::test]
async fn a_final_write_that_rolls_back_leaves_milvus_as_it_was() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let t = Some(s.admin.as_str());
    let OnMilvus { coll, old, vectors, .. } = on_milvus(&s, "Rolled back").await;
    // The run's last statement cannot be written: every delivery's write rolls back.
    sqlx::raw_sql(&format!(
        "ALTER TABLE documents ADD CONSTRAINT refuse_success CHECK (status <> 'success' OR id <> {old}) NOT VALID"
    ))
    .execute(&s.app.db)
    .await
    .unwrap();
    s.app
        .post(&format!("/document/{old}/reprocess"), t, &json!({}))
        .await
        .assert_ok();
    let d = s.settled(old).await;
    assert_eq!(
        (d["status"].as_str(), d["errorStage"].as_str()),
        (Some("failed"), Some("indexing")),
        "{d}"
    );
    assert_eq!(
        milvus_ids(&coll, Some(old)).await,
        vectors,
        "the old entries, and only them"
    );
}

/// Importing a URL again over the document it overwrites replaces that document's entries in
/// Milvus too: the old vectors would otherwise stay, found by search and crowding out the rest.
#[tokio::test]
async fn a_url_import_that_overwrites_replaces_the_entries_in_milvus() {
    let served = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = served.clone();
    let files = axum::Router::new().route(
        "/docs/notes.md",
        axum::routing::get(move || {
            let n = count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async move { format!("# Notes {n}\n\nVersion {n} of the notes, with its own words.\n") }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/docs/notes.md", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, files).await });

    let s = KbSetup::new(Store::Filesystem, &[("IMPORT_URL_ALLOW_HOSTS", "127.0.0.1")]).await;
    let t = Some(s.admin.as_str());
    let milvus_store = store(&s, 1, 2, milvus_port()).await;
    let kb = s
        .kb(
            "Imported",
            json!({ "vectorStoreInstanceId": milvus_store, "searchEngineEnable": false,
                    "dedupStrategy": 1, "dedupAction": 2 }),
        )
        .await;
    let coll = format!("agent_platform_kb_{}", base_key(&s, kb).await);
    let import = || async {
        let d = s
            .app
            .post("/document/import/url", t, &json!({ "ragId": kb, "url": url }))
            .await
            .assert_ok()["id"]
            .as_i64()
            .unwrap();
        assert_eq!(s.settled(d).await["status"], "success");
        d
    };
    let first = import().await;
    assert!(!milvus_ids(&coll, Some(first)).await.is_empty());
    let second = import().await;
    assert_ne!(first, second);
    assert_eq!(
        milvus_ids(&coll, Some(first)).await,
        Vec::<i64>::new(),
        "the old entries are gone"
    );
    assert_eq!(milvus_ids(&coll, None).await, chunk_ids(&s, "rag_id", kb).await);
}
