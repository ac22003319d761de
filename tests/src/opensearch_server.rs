//! A scripted OpenSearch for tests: no OpenSearch server installs here, so this one speaks
//! the REST shapes our client uses, recorded from OpenSearch 2.x: `HEAD /{index}`,
//! `PUT /{index}` (mapping), `POST /{index}/_bulk` (NDJSON index/delete lines),
//! `POST /{index}/_search` (`match` on `content`, or `knn` on `embedding`), `DELETE /{index}`,
//! with OpenSearch's response bodies (`acknowledged`, bulk `items`, `hits.hits[]._score`,
//! `index_not_found_exception`). It keeps what was indexed so searches answer from it, and
//! records every request for the tests to check.
//!
//! Scores: `match` counts query words found (each word once per chunk, a stand-in for BM25's
//! ranking); `knn` answers the lucene engine's `(1 + cosine) / 2`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use serde_json::{json, Value};

/// One request as received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub query: String,
    pub body: String,
}

impl Recorded {
    /// The body's NDJSON lines (bulk) or its one JSON document.
    pub fn lines(&self) -> Vec<Value> {
        self.body
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).expect("JSON line"))
            .collect()
    }
}

#[derive(Default)]
struct Data {
    /// index -> (mapping, documents by _id)
    indexes: HashMap<String, (Value, BTreeMap<String, Value>)>,
    requests: Vec<Recorded>,
}

#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Data>>);

pub struct OpenSearchServer {
    pub port: u16,
    shared: Shared,
}

impl OpenSearchServer {
    pub async fn start() -> Self {
        let shared = Shared::default();
        let app = Router::new().fallback(handle).with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind OpenSearch stand-in");
        let port = listener.local_addr().expect("addr").port();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { port, shared }
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.0.lock().expect("lock").requests.clone()
    }

    /// The ids of the documents an index holds, or None when it does not exist.
    pub fn ids(&self, index: &str) -> Option<Vec<i64>> {
        let data = self.shared.0.lock().expect("lock");
        data.indexes
            .get(index)
            .map(|(_, docs)| docs.keys().map(|k| k.parse().expect("numeric _id")).collect())
    }

    /// The mapping an index was created with.
    pub fn mapping(&self, index: &str) -> Option<Value> {
        let data = self.shared.0.lock().expect("lock");
        data.indexes.get(index).map(|(m, _)| m.clone())
    }
}

fn not_found(index: &str) -> Response {
    let reason = format!("no such index [{index}]");
    let cause = json!({ "type": "index_not_found_exception", "reason": reason, "index": index,
        "resource.type": "index_or_alias", "resource.id": index });
    let mut error = cause.clone();
    error["root_cause"] = json!([cause]);
    (StatusCode::NOT_FOUND, Json(json!({ "error": error, "status": 404 }))).into_response()
}

async fn handle(State(shared): State<Shared>, method: Method, uri: Uri, body: Bytes) -> Response {
    let text = String::from_utf8_lossy(&body).into_owned();
    let path = uri.path().to_owned();
    let mut data = shared.0.lock().expect("lock");
    data.requests.push(Recorded {
        method: method.to_string(),
        path: path.clone(),
        query: uri.query().unwrap_or_default().to_owned(),
        body: text.clone(),
    });
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let index = parts[0].to_owned();
    match (method.as_str(), parts.get(1).copied()) {
        ("HEAD", None) => {
            let status = if data.indexes.contains_key(&index) {
                StatusCode::OK
            } else {
                StatusCode::NOT_FOUND
            };
            status.into_response()
        }
        ("PUT", None) => {
            if data.indexes.contains_key(&index) {
                let cause = json!({ "type": "resource_already_exists_exception",
                    "reason": format!("index [{index}] already exists"), "index": index });
                let mut error = cause.clone();
                error["root_cause"] = json!([cause]);
                return (StatusCode::BAD_REQUEST, Json(json!({ "error": error, "status": 400 }))).into_response();
            }
            let mapping: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            data.indexes.insert(index.clone(), (mapping, BTreeMap::new()));
            Json(json!({ "acknowledged": true, "shards_acknowledged": true, "index": index })).into_response()
        }
        ("DELETE", None) => {
            if data.indexes.remove(&index).is_none() {
                return not_found(&index);
            }
            Json(json!({ "acknowledged": true })).into_response()
        }
        ("POST" | "PUT", Some("_bulk")) => {
            let Some((mapping, docs)) = data.indexes.get_mut(&index) else {
                return not_found(&index);
            };
            let dimension = mapping["mappings"]["properties"]["embedding"]["dimension"].as_u64();
            let lines: Vec<Value> = text
                .lines()
                .filter(|l| !l.trim().is_empty())
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect();
            let mut items = Vec::new();
            let mut i = 0;
            while i < lines.len() {
                let (op, meta) = lines[i]
                    .as_object()
                    .and_then(|o| o.iter().next())
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .unwrap_or_default();
                let id = meta["_id"].as_str().unwrap_or_default().to_owned();
                let shards = json!({ "total": 2, "successful": 1, "failed": 0 });
                let vector_length = lines
                    .get(i + 1)
                    .and_then(|l| l["embedding"].as_array())
                    .map(|v| v.len() as u64);
                let item = if op == "index" && vector_length.is_some() && vector_length != dimension {
                    i += 2;
                    let reason = format!(
                        "The number of dimensions for field [embedding] should be [{}] but found [{}]",
                        dimension.unwrap_or_default(),
                        vector_length.unwrap_or_default()
                    );
                    json!({ "index": { "_index": index, "_id": id, "status": 400,
                        "error": { "type": "mapper_parsing_exception", "reason": reason } } })
                } else if op == "index" {
                    let created = docs.insert(id.clone(), lines[i + 1].clone()).is_none();
                    i += 2;
                    let (result, status) = if created { ("created", 201) } else { ("updated", 200) };
                    json!({ "index": { "_index": index, "_id": id, "_version": 1, "result": result,
                        "_shards": shards, "_seq_no": 0, "_primary_term": 1, "status": status } })
                } else {
                    let found = docs.remove(&id).is_some();
                    i += 1;
                    let (result, status) = if found { ("deleted", 200) } else { ("not_found", 404) };
                    json!({ "delete": { "_index": index, "_id": id, "_version": 2, "result": result,
                        "_shards": shards, "_seq_no": 1, "_primary_term": 1, "status": status } })
                };
                items.push(item);
            }
            let errors = items
                .iter()
                .any(|i| i["delete"]["status"] == 404 || i["index"]["status"] == 400);
            Json(json!({ "took": 3, "errors": errors, "items": items })).into_response()
        }
        ("POST" | "GET", Some("_search")) => {
            let Some((_, docs)) = data.indexes.get(&index) else {
                return not_found(&index);
            };
            let q: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            // A clause per word: OpenSearch's default `indices.query.bool.max_clause_count`.
            let words = q["query"]["match"]["content"]["query"]
                .as_str()
                .map_or(0, |m| m.split_whitespace().count());
            if words > 1024 {
                let error = json!({ "error": { "type": "search_phase_execution_exception",
                    "caused_by": { "type": "too_many_clauses", "reason": "maxClauseCount is set to 1024" } },
                    "status": 400 });
                return (StatusCode::BAD_REQUEST, Json(error)).into_response();
            }
            let size = q["size"].as_u64().unwrap_or(10) as usize;
            let mut scored: Vec<(f64, &String, &Value)> = docs
                .iter()
                .filter_map(|(id, doc)| score(&q["query"], doc).map(|s| (s, id, doc)))
                .collect();
            scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)));
            scored.truncate(size);
            let hits: Vec<Value> = scored
                .iter()
                .map(|(s, id, doc)| {
                    json!({ "_index": index, "_id": id, "_score": s,
                    "_source": { "chunk_id": doc["chunk_id"] } })
                })
                .collect();
            let max = scored.first().map(|s| s.0);
            Json(json!({ "took": 2, "timed_out": false,
                "_shards": { "total": 1, "successful": 1, "skipped": 0, "failed": 0 },
                "hits": { "total": { "value": hits.len(), "relation": "eq" }, "max_score": max, "hits": hits } }))
            .into_response()
        }
        _ => (StatusCode::BAD_REQUEST, format!("unexpected {method} {path}")).into_response(),
    }
}

/// A document's score for a `match` or `knn` query; None when it does not match.
fn score(query: &Value, doc: &Value) -> Option<f64> {
    if let Some(m) = query["match"]["content"]["query"].as_str() {
        let words: Vec<String> = doc["content"]
            .as_str()?
            .split_whitespace()
            .map(str::to_lowercase)
            .collect();
        let found = m
            .split_whitespace()
            .filter(|w| words.contains(&w.to_lowercase()))
            .count();
        return (found > 0).then_some(found as f64);
    }
    let q: Vec<f64> = query["knn"]["embedding"]["vector"]
        .as_array()?
        .iter()
        .filter_map(Value::as_f64)
        .collect();
    let v: Vec<f64> = doc["embedding"].as_array()?.iter().filter_map(Value::as_f64).collect();
    let dot: f64 = q.iter().zip(&v).map(|(a, b)| a * b).sum();
    let norm = |x: &[f64]| x.iter().map(|a| a * a).sum::<f64>().sqrt();
    let cos = dot / (norm(&q) * norm(&v)).max(f64::MIN_POSITIVE);
    Some((1.0 + cos) / 2.0)
}
