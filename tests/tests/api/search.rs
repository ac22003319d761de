//! Hybrid search, rerank, streamed Q&A and the external knowledge-base API.

use api_tests::{KbSetup, Store};
use futures::StreamExt;
use serde_json::{json, Value};

const GUIDE_MD: &str = "# Install\n\nDownload the package and unpack it.\n\n## Linux\n\nRun the installer as root.\n\n# Use\n\nStart the service with the start command.\n";
const ANIMALS: &str = "Foxes are small omnivorous mammals.\n\nOwls hunt at night with silent wings.";
const CHINESE: &str = "我们使用向量数据库进行检索。\n\n今天的天气非常好。";

/// A base with three documents indexed; returns (setup, base id).
async fn indexed(extra: Value) -> (KbSetup, i64) {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let kb = s.kb("Search", extra).await;
    let reply = s
        .upload(
            kb,
            &[
                ("guide.md", GUIDE_MD.as_bytes().to_vec()),
                ("animals.txt", ANIMALS.as_bytes().to_vec()),
                ("zh.txt", CHINESE.as_bytes().to_vec()),
            ],
        )
        .await;
    for id in reply.assert_ok()["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["id"].as_i64())
    {
        assert_eq!(s.settled(id).await["status"], "success");
    }
    (s, kb)
}

fn contents(v: &Value) -> Vec<String> {
    v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["content"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn hybrid_search_ranks_and_reports_stages() {
    let (s, kb) = indexed(json!({ "maxChunkTokens": 16, "chunkOverlap": 0, "mergeShortSegments": false })).await;
    let t = Some(s.admin.as_str());
    let reply = s
        .app
        .post(
            "/rag/search",
            t,
            &json!({ "ragId": kb, "query": "installer root", "debug": true }),
        )
        .await;
    let r = reply.assert_ok().clone();
    let results = r["results"].as_array().unwrap();
    assert!(!results.is_empty());
    assert!(
        results[0]["content"].as_str().unwrap().contains("installer as root"),
        "{r}"
    );
    let scores: Vec<f64> = results.iter().map(|x| x["score"].as_f64().unwrap()).collect();
    assert!(
        scores.windows(2).all(|w| w[0] >= w[1]) && scores.iter().all(|s| (0.0..=1.0).contains(s)),
        "{scores:?}"
    );
    let first = &results[0];
    assert_eq!(first["documentName"], "guide.md");
    assert!(first["chunkId"].as_i64().is_some() && first["documentId"].as_i64().is_some());
    assert_eq!(first["metadata"]["title"], "Install > Linux");
    let m = &r["metrics"];
    for key in [
        "embeddingMs",
        "vectorSearchMs",
        "bm25SearchMs",
        "fusionMs",
        "rerankMs",
        "totalMs",
    ] {
        assert!(m[key].as_f64().is_some(), "metrics.{key}: {m}");
    }
    assert!(
        m["vectorHitCount"].as_u64().unwrap() > 0 && m["bm25HitCount"].as_u64().unwrap() > 0,
        "{m}"
    );
    assert_eq!(m["finalCount"].as_u64(), Some(results.len() as u64));
    let plain = s
        .app
        .post("/rag/search", t, &json!({ "ragId": kb, "query": "installer" }))
        .await;
    assert!(plain.assert_ok().get("metrics").is_none(), "metrics only with debug");

    // A two-character Chinese word inside a sentence is found by full-text search (alone: the
    // toy embedding model of these tests cannot tell Chinese sentences apart, and the default
    // fusion leans on vectors).
    s.app
        .put(
            &format!("/rag/{kb}/config"),
            t,
            &json!({ "searchParams": { "fusionStrategy": "WEIGHTED_SUM", "denseWeight": 0.0 } }),
        )
        .await
        .assert_ok();
    let zh = s
        .app
        .post(
            "/rag/search",
            t,
            &json!({ "ragId": kb, "query": "向量", "debug": true }),
        )
        .await;
    let z = zh.assert_ok().clone();
    assert_eq!(z["metrics"]["bm25HitCount"], 1, "{z}");
    assert!(contents(&z)[0].contains("向量数据库"), "{z}");

    // resultCount keeps the best results, in order, not any two.
    let all = contents(
        s.app
            .post("/rag/search", t, &json!({ "ragId": kb, "query": "the" }))
            .await
            .assert_ok(),
    );
    assert!(all.len() > 2, "{all:?}");
    s.app
        .put(
            &format!("/rag/{kb}/config"),
            t,
            &json!({ "searchParams": { "resultCount": 2 } }),
        )
        .await
        .assert_ok();
    let two = contents(
        s.app
            .post("/rag/search", t, &json!({ "ragId": kb, "query": "the" }))
            .await
            .assert_ok(),
    );
    assert_eq!(two, all[..2].to_vec());
    // The threshold is a similarity: each hit's own vector similarity to the query, not its
    // fused score, which is rescaled per query (the best hit of any query scores 1). The
    // similarities are read from the base's vectors as the service compares them.
    let similarities = |query: &str| {
        let db = s.app.db.clone();
        let vector = format!("{:?}", api_tests::model_server::toy_embedding(query));
        async move {
            sqlx::query_as::<_, (i64, f64)>(
                "SELECT id, (1 - (embedding::vector(8) <=> $2::vector(8)))::float8 FROM chunks WHERE rag_id = $1",
            )
            .bind(kb)
            .bind(vector)
            .fetch_all(&db)
            .await
            .unwrap()
        }
    };
    let ids = |r: &Value| -> std::collections::BTreeSet<i64> {
        r["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["chunkId"].as_i64().unwrap())
            .collect()
    };
    let owls = similarities("owls").await;
    let mut ranked: Vec<f64> = owls.iter().map(|(_, s)| *s).collect();
    ranked.sort_by(|a, b| b.total_cmp(a));
    // Between the best and the rest, so that some chunks pass and some do not.
    let threshold = (ranked[0] + ranked[ranked.len() - 1]) / 2.0;
    let strict = json!({ "searchParams": { "thresholdEnabled": true, "threshold": threshold, "resultCount": 100 } });
    s.app.put(&format!("/rag/{kb}/config"), t, &strict).await.assert_ok();
    let kept = s
        .app
        .post("/rag/search", t, &json!({ "ragId": kb, "query": "owls" }))
        .await;
    let kept = kept.assert_ok().clone();
    let expected: std::collections::BTreeSet<i64> = owls
        .iter()
        .filter(|(_, s)| *s >= threshold)
        .map(|(id, _)| *id)
        .collect();
    assert!(
        !expected.is_empty() && expected.len() < owls.len(),
        "{owls:?} at {threshold}"
    );
    assert_eq!(ids(&kept), expected, "kept: the chunks at least {threshold} similar");
    // A question nothing in the base is close to finds nothing, though its best hit's fused
    // score is 1 (the threshold let it through when it was held to that score).
    let far = "zebra quartz violin";
    let best = similarities(far)
        .await
        .into_iter()
        .map(|(_, s)| s)
        .fold(f64::MIN, f64::max);
    assert!(best < 0.99, "{best}");
    let above = json!({ "searchParams": { "threshold": (best + 1.0) / 2.0 } });
    s.app.put(&format!("/rag/{kb}/config"), t, &above).await.assert_ok();
    let none = s
        .app
        .post("/rag/search", t, &json!({ "ragId": kb, "query": far }))
        .await;
    assert_eq!(ids(none.assert_ok()).len(), 0, "{:?}", none.body);

    // RRF scores every hit above zero; the weighted sum left over (dense weight 0) would give
    // the vector-only hits 0, so this fails if the strategy setting were ignored.
    let rrf = json!({ "searchParams": { "thresholdEnabled": false, "fusionStrategy": "RRF", "resultCount": 100 } });
    s.app.put(&format!("/rag/{kb}/config"), t, &rrf).await.assert_ok();
    let w = s
        .app
        .post("/rag/search", t, &json!({ "ragId": kb, "query": "owls hunt at night" }))
        .await;
    let r = w.assert_ok();
    assert!(contents(r)[0].contains("Owls"), "{r}");
    let scores: Vec<f64> = r["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["score"].as_f64().unwrap())
        .collect();
    assert!(
        scores.len() > 1 && scores.iter().all(|s| *s > 0.0),
        "RRF scores every hit: {r}"
    );
}

/// A question longer than the base's chunks is embedded cut to their size, which the model
/// takes; full text searches all of it.
#[tokio::test]
async fn a_long_question_is_embedded_at_the_size_of_the_chunks() {
    let (s, kb) = indexed(json!({ "maxChunkTokens": 16, "chunkOverlap": 0, "mergeShortSegments": false })).await;
    let question = format!("{} installer root", "please tell me more about ".repeat(40));
    let reply = s
        .app
        .post(
            "/rag/search",
            Some(&s.admin),
            &json!({ "ragId": kb, "query": question, "debug": true }),
        )
        .await;
    let r = reply.assert_ok();
    assert!(r["metrics"]["bm25HitCount"].as_u64().unwrap() > 0, "{r}");
    let embedded: Vec<String> = s
        .models
        .requests()
        .iter()
        .filter_map(|q| q["input"].as_array().cloned())
        .flatten()
        .filter_map(|i| i.as_str().map(str::to_owned))
        .filter(|i| i.starts_with("please tell me"))
        .collect();
    assert_eq!(embedded.len(), 1, "{embedded:?}");
    let tokens = shared::rag::chunk::count_tokens(&embedded[0]);
    assert!((1..=16).contains(&tokens), "{tokens} tokens: {}", embedded[0]);
}

/// A search, which a client waits for whole, ends its model calls before API Gateway's 29 s
/// (`BUFFERED_MODEL_TIMEOUT_SECS`): an embedding endpoint that does not answer fails it as
/// timed out, where the gateway answered 504 while the call went on.
#[tokio::test]
async fn a_search_stops_its_model_calls_within_its_time_limit() {
    let s = KbSetup::new(Store::Filesystem, &[("BUFFERED_MODEL_TIMEOUT_SECS", "1")]).await;
    let kb = s.kb("Slow", json!({})).await;
    let reply = s.upload(kb, &[("guide.md", GUIDE_MD.as_bytes().to_vec())]).await;
    let doc = reply.assert_ok()["items"][0]["id"].as_i64().unwrap();
    assert_eq!(s.settled(doc).await["status"], "success");
    let silent = s.app.silent_model(&s.admin, "EMBEDDING", "emb-8", json!({})).await;
    sqlx::query(
        "UPDATE model_configs SET api_endpoint = (SELECT api_endpoint FROM model_configs WHERE id = $1)
         WHERE id = (SELECT embedding_model_id FROM knowledge_bases WHERE id = $2)",
    )
    .bind(silent)
    .bind(kb)
    .execute(&s.app.db)
    .await
    .unwrap();
    let started = std::time::Instant::now();
    s.app
        .post(
            "/rag/search",
            Some(&s.admin),
            &json!({ "ragId": kb, "query": "installer" }),
        )
        .await
        .assert_error(400, 0, "timed out");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn search_rules_of_the_spec() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let t = Some(s.admin.as_str());
    let kb = s.kb("Empty", json!({})).await;
    let probed = s.models.requests().len();
    let empty = s
        .app
        .post("/rag/search", t, &json!({ "ragId": kb, "query": "anything" }))
        .await;
    assert_eq!(
        empty.assert_ok()["results"],
        json!([]),
        "a base without documents answers code 1 with no results"
    );
    assert_eq!(s.models.requests().len(), probed, "no model was called for it");
    s.app
        .post("/rag/search", t, &json!({ "ragId": kb, "query": "   " }))
        .await
        .assert_error(400, 0, "query must not be empty");
    s.app
        .post("/rag/search", t, &json!({ "ragId": kb }))
        .await
        .assert_error(400, 0, "query must not be empty");
    s.app
        .post("/rag/search", t, &json!({ "ragId": 424242, "query": "x" }))
        .await
        .assert_error(400, 0, "does not exist");
    s.app
        .post("/rag/search", t, &json!({ "query": "x" }))
        .await
        .assert_error(400, 0, "ragId is required");
    s.app
        .post("/rag/search", None, &json!({ "ragId": kb, "query": "x" }))
        .await
        .assert_error(401, 401, "log in");
    let (_, other) = s.app.regular_user("nosy").await;
    s.app
        .post("/rag/search", Some(&other), &json!({ "ragId": kb, "query": "x" }))
        .await
        .assert_error(400, 0, "does not exist");
}

/// In a large base, a word in more than half of the chunks is a stop word there: alone it
/// finds nothing by full text, and next to a rare word it does not drown it. A common word that
/// is not a stop word still finds chunks.
#[tokio::test]
async fn common_words_of_a_large_base() {
    let (s, kb) = indexed(json!({})).await;
    let t = Some(s.admin.as_str());
    let doc: i64 = sqlx::query_scalar("SELECT id FROM documents WHERE rag_id = $1 LIMIT 1")
        .bind(kb)
        .fetch_one(&s.app.db)
        .await
        .unwrap();
    // 12,000 chunks written straight into the table, as the search benchmark does: all hold
    // "filler", every second one "even", three of them "needle".
    sqlx::query(
        "INSERT INTO chunks (rag_id, document_id, chunk_index, content, token_count, tsv, vector_status)
         SELECT $1, $2, 1000 + g, x.text, 3, to_tsvector('simple', x.text), 'success'
         FROM generate_series(1, 12000) g,
              LATERAL (SELECT 'filler ' || CASE WHEN g % 2 = 0 THEN 'even ' ELSE '' END
                              || CASE WHEN g % 4000 = 0 THEN 'needle ' ELSE '' END || g AS text) x",
    )
    .bind(kb)
    .bind(doc)
    .execute(&s.app.db)
    .await
    .unwrap();
    assert_eq!(s.word_count_drift().await, 0);
    s.app
        .put(
            &format!("/rag/{kb}/config"),
            t,
            &json!({ "searchParams": { "resultCount": 10 } }),
        )
        .await
        .assert_ok();
    let search = |query: &'static str| {
        let app = &s.app;
        async move {
            app.post("/rag/search", t, &json!({ "ragId": kb, "query": query, "debug": true }))
                .await
                .assert_ok()
                .clone()
        }
    };
    let stop = search("filler").await;
    assert_eq!(stop["metrics"]["bm25HitCount"], 0, "{stop}");
    assert!(!contents(&stop).is_empty(), "vector search still answers: {stop}");
    let rare = search("filler needle").await;
    assert_eq!(rare["metrics"]["bm25HitCount"], 3, "{rare}");
    let found = contents(&rare);
    for n in ["4000", "8000", "12000"] {
        assert!(
            found.iter().any(|c| c == &format!("filler even needle {n}")),
            "{n}: {found:?}"
        );
    }
    let common = search("even").await;
    assert!(common["metrics"]["bm25HitCount"].as_u64().unwrap() > 0, "{common}");
    assert!(contents(&common).iter().any(|c| c.contains("even")), "{common}");
}

#[tokio::test]
async fn rerank_reorders_the_candidates() {
    let (s, kb) = indexed(json!({ "maxChunkTokens": 16, "chunkOverlap": 0, "mergeShortSegments": false })).await;
    let t = Some(s.admin.as_str());
    let provider = s.app.provider(&s.admin, "rr").await;
    let reranker = s
        .app
        .model(&s.admin, provider, "RERANKER", "rerank", &s.models.base_url, json!({}))
        .await;
    let config = json!({ "searchParams": { "rerankEnabled": true, "rerankModelId": reranker, "enterRerankCount": 10, "resultCount": 3 } });
    s.app.put(&format!("/rag/{kb}/config"), t, &config).await.assert_ok();
    let reply = s
        .app
        .post(
            "/rag/search",
            t,
            &json!({ "ragId": kb, "query": "small omnivorous mammals", "debug": true }),
        )
        .await;
    let r = reply.assert_ok().clone();
    assert!(contents(&r)[0].contains("Foxes"), "{r}");
    assert!(
        (r["results"][0]["score"].as_f64().unwrap() - 1.0).abs() < 1e-9,
        "the reranker's relevance score is shown"
    );
    assert!(r["metrics"]["rerankMs"].as_f64().unwrap() > 0.0);
    let rerank_calls = s.models.requests().iter().filter(|q| q["model"] == "rerank").count();
    assert_eq!(rerank_calls, 1);
    // Charged what it read: the endpoint reports no usage, so 4 characters a token.
    let sent = s
        .models
        .requests()
        .into_iter()
        .find(|q| q["model"] == "rerank")
        .unwrap();
    let documents = sent["documents"].as_array().unwrap();
    let bytes =
        sent["query"].as_str().unwrap().len() + documents.iter().map(|d| d.as_str().unwrap().len()).sum::<usize>();
    let recorded: Vec<i64> = sqlx::query_scalar("SELECT prompt_tokens FROM model_usage WHERE model_id = $1")
        .bind(reranker)
        .fetch_all(&s.app.db)
        .await
        .unwrap();
    assert_eq!(recorded, [bytes.div_ceil(4) as i64]);
}

/// A reranker and a chat model a base names in its settings may be deleted: the base falls
/// back to no reranking and the default chat model, and stays searchable and editable (the
/// dead ids failed every search, and the next config edit answered 500).
#[tokio::test]
async fn deleting_models_a_base_names_in_its_settings_leaves_it_usable() {
    let (s, kb) = indexed(json!({})).await;
    let t = Some(s.admin.as_str());
    let provider = s.app.provider(&s.admin, "gone").await;
    let url = &s.models.base_url;
    let reranker = s
        .app
        .model(&s.admin, provider, "RERANKER", "rerank", url, json!({}))
        .await;
    let chat = s
        .app
        .model(&s.admin, provider, "CHAT", "chat-echo", url, json!({}))
        .await;
    let config = json!({ "searchParams": { "rerankEnabled": true, "rerankModelId": reranker, "enterRerankCount": 10,
        "resultCount": 3 }, "modelParams": { "modelId": chat } });
    s.app.put(&format!("/rag/{kb}/config"), t, &config).await.assert_ok();
    let changed = || async {
        sqlx::query_scalar::<_, chrono::DateTime<chrono::Utc>>("SELECT update_dt FROM knowledge_bases WHERE id = $1")
            .bind(kb)
            .fetch_one(&s.app.db)
            .await
            .unwrap()
    };
    let before = changed().await;
    for id in [reranker, chat] {
        s.app
            .delete(&format!("/ai-model/config/{id}"), t)
            .await
            .assert_status_ok();
    }
    // The base counts as changed: an edit that read it before the deletes is answered 409
    // rather than writing the ids back.
    assert!(changed().await > before);
    // A write that names a deleted model after all (read before the delete, written after) is
    // refused as a conflict, not a 500.
    let stale = sqlx::query("UPDATE knowledge_bases SET rerank_model_id = $2 WHERE id = $1")
        .bind(kb)
        .bind(reranker)
        .execute(&s.app.db)
        .await
        .unwrap_err();
    let refused = shared::AppError::from(stale);
    assert!(
        matches!(&refused, shared::AppError::Conflict(m) if m.contains("was deleted while this request ran")),
        "{refused:?}"
    );
    let base = s.app.get(&format!("/rag/{kb}"), t).await.assert_ok().clone();
    assert_eq!(base["searchParams"]["rerankEnabled"], false, "{base}");
    assert!(base["searchParams"]["rerankModelId"].is_null(), "{base}");
    assert!(base["modelParams"]["modelId"].is_null(), "{base}");
    let query = json!({ "ragId": kb, "query": "small omnivorous mammals" });
    let found = s.app.post("/rag/search", t, &query).await;
    assert!(!contents(found.assert_ok()).is_empty());
    let edit = json!({ "chunkParams": { "maxChunkTokens": 400 } });
    s.app.put(&format!("/rag/{kb}/config"), t, &edit).await.assert_ok();
}

/// A base given a reranker by an edit that holds it while the reranker is deleted: the delete
/// waits for the edit and then clears the id from the base's settings too. Cleared by a
/// statement whose snapshot predated the edit's commit, the settings kept the deleted id, and
/// every search with reranking failed.
#[tokio::test]
async fn a_model_deleted_while_an_edit_gives_it_to_a_base_is_cleared_from_that_base() {
    let (s, kb) = indexed(json!({})).await;
    let t = Some(s.admin.as_str());
    let provider = s.app.provider(&s.admin, "raced").await;
    let reranker = s
        .app
        .model(&s.admin, provider, "RERANKER", "rerank", &s.models.base_url, json!({}))
        .await;
    // The edit, as the service writes one: the model held, then the base written.
    let mut edit = s.app.db.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM model_configs WHERE id = $1 FOR SHARE")
        .bind(reranker)
        .execute(&mut *edit)
        .await
        .unwrap();
    sqlx::query(
        "UPDATE knowledge_bases SET rerank_model_id = $2,
           search_params = search_params || jsonb_build_object('rerankEnabled', true, 'rerankModelId', $2)
         WHERE id = $1",
    )
    .bind(kb)
    .bind(reranker)
    .execute(&mut *edit)
    .await
    .unwrap();
    let path = format!("/ai-model/config/{reranker}");
    let delete = s.app.delete(&path, t);
    let commit = async {
        // Once the delete waits for the edit's hold on the model.
        api_tests::until_a_statement_waits_for_a_lock(&s.app.db).await;
        edit.commit().await.unwrap();
    };
    let (deleted, ()) = tokio::join!(delete, commit);
    deleted.assert_status_ok();
    let base = s.app.get(&format!("/rag/{kb}"), t).await.assert_ok().clone();
    assert!(base["searchParams"]["rerankModelId"].is_null(), "{base}");
    assert_eq!(base["searchParams"]["rerankEnabled"], false, "{base}");
}

/// The text lines of a Q&A stream, joined.
fn answer_text(events: &[Value]) -> String {
    events
        .iter()
        .filter(|e| e["type"] == "text")
        .map(|e| e["data"].as_str().unwrap())
        .collect()
}

fn ndjson(bytes: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(bytes)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("NDJSON line"))
        .collect()
}

/// Makes Q&A on `kb` answer with the scripted `chat-echo` model ("You said: <last message>"),
/// with more `modelParams` and `searchParams`.
async fn answer_with_echo(s: &KbSetup, kb: i64, mut model_params: Value, search_params: Value) {
    let provider = s.app.provider(&s.admin, "chat").await;
    let chat = s
        .app
        .model(&s.admin, provider, "CHAT", "chat-echo", &s.models.base_url, json!({}))
        .await;
    model_params["modelId"] = json!(chat);
    let sections = json!({ "modelParams": model_params, "searchParams": search_params });
    s.app
        .put(&format!("/rag/{kb}/config"), Some(&s.admin), &sections)
        .await
        .assert_ok();
}

/// A user with less left than a full answer's reserve (8,192 tokens) still gets one, with
/// the base's context: the answer held its whole reserve first, and retrieval's query
/// embedding found the quota empty.
#[tokio::test]
async fn qa_answers_a_user_with_less_left_than_a_full_answer() {
    let (s, kb) = indexed(json!({})).await;
    answer_with_echo(&s, kb, json!({ "prompt": "CONTEXT<{context}> Q<{query}>" }), json!({})).await;
    let (bob_id, bob) = s.app.regular_user("bob").await;
    sqlx::query("UPDATE knowledge_bases SET creator_id = $1 WHERE id = $2")
        .bind(bob_id)
        .bind(kb)
        .execute(&s.app.db)
        .await
        .unwrap();
    sqlx::query("UPDATE users SET tokens = 6000, totals = 6000 WHERE id = $1")
        .bind(bob_id)
        .execute(&s.app.db)
        .await
        .unwrap();
    let ask = json!({ "ragId": kb, "query": "how do I install it" });
    let reply = s.app.post("/rag/qa/stream", Some(&bob), &ask).await;
    let events = ndjson(&reply.bytes);
    assert_eq!(events.last().unwrap()["type"], "done", "{events:?}");
    let text = answer_text(&events);
    assert!(text.contains("Download the package"), "{text}");
}

/// An answer past `QA_TIMEOUT_SECS` is stopped with an error line, before the function's own
/// time limit would end the process with none (and the tokens held never settled).
#[tokio::test]
async fn a_qa_answer_past_its_time_limit_ends_with_an_error_line() {
    let s = KbSetup::new(Store::Filesystem, &[("QA_TIMEOUT_SECS", "1")]).await;
    let kb = s.kb("Slow", json!({})).await;
    let reply = s.upload(kb, &[("guide.md", GUIDE_MD.as_bytes().to_vec())]).await;
    let doc = reply.assert_ok()["items"][0]["id"].as_i64().unwrap();
    assert_eq!(s.settled(doc).await["status"], "success");
    answer_with(&s, kb, "chat-slow").await;
    let ask = json!({ "ragId": kb, "query": "how do I install it" });
    let reply = s.app.post("/rag/qa/stream", Some(&s.admin), &ask).await;
    let events = ndjson(&reply.bytes);
    let last = events.last().unwrap();
    assert_eq!(last["type"], "error", "{events:?}");
    assert!(last["message"].as_str().unwrap().contains("QA_TIMEOUT_SECS"), "{last}");
}

/// Makes `kb` answer with the scripted chat model `key`.
async fn answer_with(s: &KbSetup, kb: i64, key: &str) {
    let provider = s.app.provider(&s.admin, key).await;
    let model = s
        .app
        .model(&s.admin, provider, "CHAT", key, &s.models.base_url, json!({}))
        .await;
    let config = json!({ "modelParams": { "modelId": model } });
    s.app
        .put(&format!("/rag/{kb}/config"), Some(&s.admin), &config)
        .await
        .assert_ok();
}

/// An endpoint that ignores max_tokens: the answer stops at MAX_ANSWER_BYTES with an `error`
/// line, and the turn is not kept (stored whole, each filled the database for the few tokens
/// its endpoint reported).
#[tokio::test]
async fn a_qa_answer_past_its_size_limit_ends_with_an_error_line() {
    let (s, kb) = indexed(json!({})).await;
    answer_with(&s, kb, "chat-flood").await;
    let ask = json!({ "ragId": kb, "query": "how do I install it", "conversationId": "flood" });
    let reply = s.app.post("/rag/qa/stream", Some(&s.admin), &ask).await;
    let events = ndjson(&reply.bytes);
    let last = events.last().unwrap();
    assert_eq!(last["type"], "error", "{last}");
    assert!(
        last["message"]
            .as_str()
            .unwrap()
            .contains("passed 4 MiB and was cut off"),
        "{last}"
    );
    assert_eq!(s.app.count("qa_messages").await, 0);
}

/// A Q&A stream of `kb` asked "how do I install it", its body left to the caller.
async fn open_qa(s: &KbSetup, kb: i64) -> reqwest::Response {
    s.app
        .client
        .post(s.app.url("/rag/qa/stream"))
        .header("Svc-Auth", &s.admin)
        .json(&json!({ "ragId": kb, "query": "how do I install it" }))
        .send()
        .await
        .unwrap()
}

/// A client that leaves while the context is gathered (here a second-long query embedding)
/// gets no answer asked for: the answer's prompt, the costliest call, was paid for nobody.
#[tokio::test]
async fn a_client_gone_before_the_answer_costs_no_answer_call() {
    let (s, kb) = indexed(json!({})).await;
    answer_with_echo(&s, kb, json!({}), json!({})).await;
    s.embed_slowly(kb).await;
    let response = open_qa(&s, kb).await;
    assert_eq!(response.status(), 200);
    drop(response);
    // The embedding answers after a second; the answer would be asked for right after.
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    let answers = s.models.requests().iter().filter(|q| q["model"] == "chat-echo").count();
    assert_eq!(answers, 0, "no answer was asked for");
}

/// A document deleted while the answer streams is not cited in `done`: its chunk ids are gone.
#[tokio::test]
async fn qa_cites_only_documents_still_there_when_it_ends() {
    let (s, kb) = indexed(json!({})).await;
    answer_with(&s, kb, "chat-slow-brief").await;
    let response = open_qa(&s, kb).await;
    let mut body = response.bytes_stream();
    let mut read = body.next().await.unwrap().unwrap().to_vec();
    assert!(String::from_utf8_lossy(&read).contains("\"text\""));
    s.delete_documents(kb).await;
    while let Some(chunk) = body.next().await {
        read.extend_from_slice(&chunk.unwrap());
    }
    let events = ndjson(&read);
    let done = events.last().unwrap();
    assert_eq!(done["type"], "done", "{events:?}");
    assert_eq!(done["references"], json!([]), "{done}");
}

#[tokio::test]
async fn qa_streams_text_then_references_and_keeps_the_conversation() {
    let (s, kb) = indexed(json!({})).await;
    let t = Some(s.admin.as_str());
    answer_with_echo(&s, kb, json!({ "prompt": "CONTEXT<{context}> Q<{query}>" }), json!({})).await;

    let ask = |query: &str| json!({ "ragId": kb, "query": query, "conversationId": "conv-1" });
    let reply = s.app.post("/rag/qa/stream", t, &ask("how do I install it")).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.headers["content-type"], "application/x-ndjson");
    let events = ndjson(&reply.bytes);
    let text = answer_text(&events);
    assert!(
        text.starts_with("You said: CONTEXT<") && text.contains("Q<how do I install it>"),
        "{text}"
    );
    assert!(
        text.contains("Download the package"),
        "the retrieved context is in the prompt: {text}"
    );
    let done = events.last().unwrap();
    assert_eq!(done["type"], "done");
    let refs = done["references"].as_array().unwrap();
    assert!(
        !refs.is_empty() && refs[0]["chunkId"].as_i64().is_some() && refs[0]["documentName"].is_string(),
        "{done}"
    );

    // The second turn carries the first one.
    s.app.post("/rag/qa/stream", t, &ask("and then?")).await;
    let last = s
        .models
        .requests()
        .into_iter()
        .rfind(|r| r["model"] == "chat-echo")
        .unwrap();
    let messages = last["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3, "{last}");
    assert!(messages[0]["content"].as_str().unwrap().contains("how do I install it"));
    assert_eq!(messages[1]["role"], "assistant");

    // A conversation keeps the turns a turn reads back, the last ten, not every one.
    for i in 0..11 {
        s.app.post("/rag/qa/stream", t, &ask(&format!("question {i}"))).await;
    }
    let kept: Vec<String> = sqlx::query_scalar(
        "SELECT content FROM qa_messages WHERE conversation_id = 'conv-1' AND role = 'user' ORDER BY id",
    )
    .fetch_all(&s.app.db)
    .await
    .unwrap();
    assert_eq!(kept.len(), 10);
    assert_eq!((kept[0].as_str(), kept[9].as_str()), ("question 1", "question 10"));

    // External API: the same answer as raw text.
    let raw = s
        .app
        .post(
            "/open-api/rag/qa/stream",
            t,
            &json!({ "ragId": kb, "query": "how do I install it" }),
        )
        .await;
    assert!(raw.headers["content-type"].to_str().unwrap().starts_with("text/plain"));
    let raw_text = String::from_utf8_lossy(&raw.bytes).into_owned();
    assert!(
        raw_text.starts_with("You said: CONTEXT<") && !raw_text.contains("\"type\""),
        "{raw_text}"
    );
    let open = s
        .app
        .post("/open-api/rag/search", t, &json!({ "ragId": kb, "query": "installer" }))
        .await;
    assert!(!open.assert_ok()["results"].as_array().unwrap().is_empty());
    s.app
        .post(
            "/open-api/rag/search",
            None,
            &json!({ "ragId": kb, "query": "installer" }),
        )
        .await
        .assert_error(401, 401, "log in");
}

/// With `questionRewrite`, a follow-up is rewritten by the model into a standalone question
/// (from the conversation so far) and that is what the base is searched with; a first
/// question, with no history, is searched as asked.
#[tokio::test]
async fn qa_with_question_rewrite_searches_with_the_rewritten_follow_up() {
    const REWRITE: &str = "Rewrite the user's last question";
    let (s, kb) = indexed(json!({})).await;
    let t = Some(s.admin.as_str());
    answer_with_echo(&s, kb, json!({}), json!({ "questionRewrite": true })).await;
    let is_rewrite = |r: &Value| {
        r["messages"][0]["content"]
            .as_str()
            .is_some_and(|c| c.starts_with(REWRITE))
    };
    let embedded = |r: &Value, text: &str| r["model"] == "emb-8" && r["input"].to_string().contains(text);
    let ask = |query: &str| json!({ "ragId": kb, "query": query, "conversationId": "conv-r" });

    let first = s.app.post("/rag/qa/stream", t, &ask("how do I install it")).await;
    assert_eq!(first.status, 200);
    assert!(
        !s.models.requests().iter().any(is_rewrite),
        "a first question is not rewritten"
    );

    let before = s.models.requests().len();
    s.app.post("/rag/qa/stream", t, &ask("and then?")).await;
    let turn: Vec<Value> = s.models.requests()[before..].to_vec();
    let rewrite = turn
        .iter()
        .find(|r| is_rewrite(r))
        .expect("the follow-up was rewritten");
    let history = rewrite["messages"].to_string();
    assert!(
        history.contains("how do I install it")
            && rewrite["messages"].as_array().unwrap().last().unwrap()["content"] == "and then?",
        "{rewrite}"
    );
    // The scripted model answers "You said: <question>": that is what was searched.
    assert!(turn.iter().any(|r| embedded(r, "You said: and then?")), "{turn:?}");
    assert!(!turn
        .iter()
        .any(|r| r["model"] == "emb-8" && r["input"] == json!(["and then?"])));
}

#[tokio::test]
async fn qa_without_a_chat_model_says_so_in_an_error_event() {
    let (s, kb) = indexed(json!({})).await;
    let t = Some(s.admin.as_str());
    let reply = s
        .app
        .post("/rag/qa/stream", t, &json!({ "ragId": kb, "query": "hello" }))
        .await;
    assert_eq!(reply.status, 200);
    let events = ndjson(&reply.bytes);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["type"], "error");
    assert!(
        events[0]["message"]
            .as_str()
            .unwrap()
            .contains("no chat model is configured"),
        "{events:?}"
    );
    // As raw text: the error is a line of its own, with nothing before it.
    let raw = s
        .app
        .post("/open-api/rag/qa/stream", t, &json!({ "ragId": kb, "query": "hello" }))
        .await;
    let raw = String::from_utf8_lossy(&raw.bytes).into_owned();
    assert!(
        raw.starts_with("[ERROR] ") && raw.ends_with('\n') && raw.contains("no chat model is configured"),
        "{raw:?}"
    );
    s.app
        .post("/rag/qa/stream", t, &json!({ "ragId": kb, "query": "" }))
        .await
        .assert_error(400, 0, "query must not be empty");
    s.app
        .post("/rag/qa/stream", t, &json!({ "ragId": 999999, "query": "x" }))
        .await
        .assert_error(400, 0, "does not exist");

    // A model failing mid-answer ends the stream with an error event after the text so far.
    let provider = s.app.provider(&s.admin, "cut").await;
    let cut = s
        .app
        .model(&s.admin, provider, "CHAT", "chat-cut", &s.models.base_url, json!({}))
        .await;
    s.app
        .put(
            &format!("/rag/{kb}/config"),
            t,
            &json!({ "modelParams": { "modelId": cut } }),
        )
        .await
        .assert_ok();
    let events = ndjson(
        &s.app
            .post("/rag/qa/stream", t, &json!({ "ragId": kb, "query": "hello" }))
            .await
            .bytes,
    );
    assert_eq!(events.first().unwrap()["type"], "text");
    assert_eq!(events.last().unwrap()["type"], "error");
}

#[tokio::test]
async fn results_carry_image_evidence() {
    use shared::rag::parse::fixtures::{self, DocxBlock};
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let t = Some(s.admin.as_str());
    let kb = s.kb("Figures", json!({ "extparseSaveImages": true })).await;
    let png = fixtures::png();
    let docx = fixtures::docx(&[
        DocxBlock::Heading(1, "Regional results"),
        DocxBlock::Paragraph("Revenue in the north region grew strongly this quarter."),
        DocxBlock::Image {
            bytes: &png,
            description: Some("Bar chart of quarterly revenue"),
        },
    ]);
    let reply = s.upload(kb, &[("results.docx", docx)]).await;
    let id = reply.assert_ok()["items"][0]["id"].as_i64().unwrap();
    assert_eq!(s.settled(id).await["status"], "success");

    let direct = s
        .app
        .post("/rag/search", t, &json!({ "ragId": kb, "query": "bar chart" }))
        .await;
    let image = direct.assert_ok()["results"][0]["images"][0].clone();
    assert_eq!(image["matchType"], "DIRECT_MATCH", "{image}");
    assert_eq!(
        (image["matchedFields"][0].as_str(), image["documentName"].as_str()),
        (Some("caption"), Some("results.docx"))
    );
    assert_eq!(image["matchedTerms"], json!(["bar", "chart"]));
    assert!((image["matchScore"].as_f64().unwrap() - 1.0).abs() < 1e-9);
    let repeated = s
        .app
        .post("/rag/search", t, &json!({ "ragId": kb, "query": "chart chart bar" }))
        .await;
    let image = repeated.assert_ok()["results"][0]["images"][0].clone();
    assert!((image["matchScore"].as_f64().unwrap() - 1.0).abs() < 1e-9, "{image}");
    assert!(image["imageUrl"].as_str().unwrap().contains("/document/image/"));

    let context = s
        .app
        .post(
            "/rag/search",
            t,
            &json!({ "ragId": kb, "query": "north region revenue" }),
        )
        .await;
    let image = context.assert_ok()["results"][0]["images"][0].clone();
    assert_eq!(
        image["matchType"], "DIRECT_MATCH",
        "'revenue' is in the caption too: {image}"
    );
    let context = s
        .app
        .post("/rag/search", t, &json!({ "ragId": kb, "query": "grew strongly" }))
        .await;
    let image = context.assert_ok()["results"][0]["images"][0].clone();
    assert_eq!(
        (image["matchType"].as_str(), image["matchScore"].as_f64()),
        (Some("CONTEXT_MATCH"), Some(0.5)),
        "{image}"
    );
    assert!(image["matchReason"].as_str().unwrap().contains("same heading"));
}

/// `nearbySliceCount` gives each result its neighbours in its document, in document order and
/// without repeats, as the context an answer is written from.
#[tokio::test]
async fn an_answer_reads_each_result_with_its_neighbouring_chunks() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let kb = s
        .kb(
            "Neighbours",
            json!({ "maxChunkTokens": 16, "chunkOverlap": 0, "mergeShortSegments": false }),
        )
        .await;
    let text = "Alpha apples grow in green orchards on the northern hills every summer.\n\nBravo bridges span wide rivers between the old towns of the valley.\n\nCharlie cheetahs sprint across savannas faster than any other land animal.\n\nDelta dolphins swim in warm seas and play near the fishing boats.\n\nEcho eagles soar above mountains and nest on the highest cliffs.";
    let reply = s.upload(kb, &[("five.txt", text.as_bytes().to_vec())]).await;
    let id = reply.assert_ok()["items"][0]["id"].as_i64().unwrap();
    assert_eq!(s.settled(id).await["status"], "success");
    let chunks = s.chunk_texts(id).await;
    assert!(chunks.len() >= 5, "{chunks:?}");
    answer_with_echo(
        &s,
        kb,
        json!({ "prompt": "CONTEXT<{context}> Q<{query}>", "nearbySliceCount": 1 }),
        json!({ "resultCount": 1 }),
    )
    .await;
    let ask = json!({ "ragId": kb, "query": "cheetahs sprint across savannas" });
    let reply = s.app.post("/rag/qa/stream", Some(&s.admin), &ask).await;
    let events = ndjson(&reply.bytes);
    assert_eq!(events.last().unwrap()["type"], "done", "{events:?}");
    let answer = answer_text(&events);
    // The hit (a chunk of the cheetahs' paragraph) with one chunk on each side, in order.
    let read = (1..chunks.len() - 1).any(|hit| {
        chunks[hit].contains("cheetahs")
            && answer.contains(&format!("CONTEXT<[1] {}>", chunks[hit - 1..=hit + 1].join("\n")))
    });
    assert!(read, "{answer}\n{chunks:?}");

    // Results next to each other: each still has its own numbered passage, holding its chunk,
    // so that [n] is the n-th reference.
    s.app
        .put(
            &format!("/rag/{kb}/config"),
            Some(&s.admin),
            &json!({ "searchParams": { "resultCount": 5 } }),
        )
        .await
        .assert_ok();
    let ask = json!({ "ragId": kb, "query": "cheetahs dolphins eagles bridges apples" });
    let reply = s.app.post("/rag/qa/stream", Some(&s.admin), &ask).await;
    let events = ndjson(&reply.bytes);
    let done = events.last().unwrap();
    assert_eq!(done["type"], "done", "{events:?}");
    let references = done["references"].as_array().unwrap();
    assert!(references.len() >= 3, "{done}");
    let answer = answer_text(&events);
    for (k, reference) in references.iter().enumerate() {
        let content: String = sqlx::query_scalar("SELECT content FROM chunks WHERE id = $1")
            .bind(reference["chunkId"].as_i64().unwrap())
            .fetch_one(&s.app.db)
            .await
            .unwrap();
        let start = answer
            .find(&format!("[{}] ", k + 1))
            .unwrap_or_else(|| panic!("no passage [{}] in {answer}", k + 1));
        let end = answer.find(&format!("[{}] ", k + 2)).unwrap_or(answer.len());
        assert!(
            answer[start..end].contains(&content),
            "passage [{}] lacks its reference's chunk {content:?}: {answer}",
            k + 1
        );
    }
}
