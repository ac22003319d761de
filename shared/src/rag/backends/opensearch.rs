//! OpenSearch through the official client (`opensearch`, rustls): BM25 full text and kNN
//! vectors, each in an index of its own per base, with the chunk id as document id.

use std::time::Duration;

use async_trait::async_trait;
use opensearch::auth::Credentials;
use opensearch::http::request::JsonBody;
use opensearch::http::response::Response;
use opensearch::http::transport::{SingleNodeConnectionPool, TransportBuilder};
use opensearch::http::{StatusCode, Url};
use opensearch::indices::{IndicesCreateParts, IndicesDeleteParts, IndicesExistsParts};
use opensearch::params::Refresh;
use opensearch::{BulkParts, OpenSearch, SearchParts};
use serde_json::{json, Value};
use sqlx::{PgConnection, PgPool};

use super::{Entry, IndexWrites, TextIndex, VectorIndex};
use crate::rag::bases::KbRow;
use crate::rag::search::fusion::Hit;
use crate::rag::segment;
use crate::stores::StoreRow;
use crate::{AppError, AppResult, AppState};

enum Kind {
    /// BM25 over the segmented chunk text.
    Text,
    /// kNN (HNSW, cosine) over the chunk vectors.
    Vectors { dimension: i32 },
}

pub struct OpenSearchIndex {
    client: OpenSearch,
    index: String,
    kind: Kind,
}

/// The indexes of a base, `agent-platform-kb-{id}_{created micros}-text` and `-vectors`.
pub fn index_name(kb: &KbRow, suffix: &str) -> String {
    format!("agent-platform-kb-{}-{suffix}", super::base_key(kb))
}

impl OpenSearchIndex {
    pub fn text(state: &AppState, row: &StoreRow, kb: &KbRow) -> AppResult<Self> {
        Self::new(state, row, index_name(kb, "text"), Kind::Text)
    }

    pub fn vectors(state: &AppState, row: &StoreRow, kb: &KbRow) -> AppResult<Self> {
        let kind = Kind::Vectors {
            dimension: kb.dimension,
        };
        Self::new(state, row, index_name(kb, "vectors"), kind)
    }

    fn new(state: &AppState, row: &StoreRow, index: String, kind: Kind) -> AppResult<Self> {
        let conn = super::connection(state, row)?;
        let url = Url::parse(&super::base_url(&conn))
            .map_err(|e| AppError::business(format!("store instance {}: bad address: {e}", row.id)))?;
        let mut transport = TransportBuilder::new(SingleNodeConnectionPool::new(url))
            .disable_proxy()
            .timeout(Duration::from_secs(30));
        if let Some(user) = &conn.username {
            transport = transport.auth(Credentials::Basic(
                user.clone(),
                conn.password.clone().unwrap_or_default(),
            ));
        }
        let transport = transport
            .build()
            .map_err(|e| AppError::Internal(anyhow::anyhow!("OpenSearch client: {e}")))?;
        Ok(Self {
            client: OpenSearch::new(transport),
            index,
            kind,
        })
    }

    fn mapping(&self) -> Value {
        let ids = json!({ "chunk_id": { "type": "long" }, "document_id": { "type": "long" } });
        match self.kind {
            // Text arrives already cut into words (jieba for CJK): split on spaces only.
            Kind::Text => json!({
                "settings": { "analysis": { "analyzer": { "words": {
                    "type": "custom", "tokenizer": "whitespace", "filter": ["lowercase"] } } } },
                "mappings": { "properties": merge(ids, json!({ "content": { "type": "text", "analyzer": "words" } })) }
            }),
            Kind::Vectors { dimension } => json!({
                "settings": { "index": { "knn": true } },
                "mappings": { "properties": merge(ids, json!({ "embedding": {
                    "type": "knn_vector", "dimension": dimension,
                    "method": { "name": "hnsw", "space_type": "cosinesimil", "engine": "lucene" } } })) }
            }),
        }
    }

    /// Creates the index with its mapping on the first write.
    async fn ensure(&self) -> anyhow::Result<()> {
        let exists = self
            .client
            .indices()
            .exists(IndicesExistsParts::Index(&[&self.index]))
            .send()
            .await?;
        if exists.status_code() == StatusCode::OK {
            return Ok(());
        }
        let created = self
            .client
            .indices()
            .create(IndicesCreateParts::Index(&self.index))
            .body(self.mapping())
            .send()
            .await?;
        let status = created.status_code();
        let body = body(created).await?;
        // Another writer may have created it a moment ago.
        if status.is_success() || body["error"]["type"] == "resource_already_exists_exception" {
            return Ok(());
        }
        anyhow::bail!("creating index {} failed: HTTP {status}: {}", self.index, told(&body))
    }

    fn document(&self, e: &Entry<'_>) -> Value {
        match self.kind {
            Kind::Text => json!({
                "chunk_id": e.chunk_id, "document_id": e.document_id, "content": segment::for_index(e.content)
            }),
            Kind::Vectors { .. } => {
                json!({ "chunk_id": e.chunk_id, "document_id": e.document_id, "embedding": e.vector })
            }
        }
    }

    /// Sends bulk lines; refreshed before it answers so the next search sees the change.
    async fn bulk(&self, lines: Vec<JsonBody<Value>>) -> anyhow::Result<()> {
        let reply = self
            .client
            .bulk(BulkParts::Index(&self.index))
            .refresh(Refresh::WaitFor)
            .body(lines)
            .send()
            .await?;
        let status = reply.status_code();
        let body = body(reply).await?;
        if !status.is_success() {
            anyhow::bail!("bulk request failed: HTTP {status}: {}", told(&body));
        }
        if body["errors"] == true {
            let failed = body["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|i| i.as_object()?.values().next())
                // Deleting an id that is not there is fine.
                .find(|r| r["error"].is_object() && r["status"] != 404);
            if let Some(item) = failed {
                anyhow::bail!("bulk item failed: {}", told(&item["error"]));
            }
        }
        Ok(())
    }

    /// The hits of a search body; a base that never indexed anything has no index yet.
    async fn hits(&self, query: Value) -> anyhow::Result<Vec<(i64, f64)>> {
        let reply = self
            .client
            .search(SearchParts::Index(&[&self.index]))
            .body(query)
            .send()
            .await?;
        let status = reply.status_code();
        let body = body(reply).await?;
        if status == StatusCode::NOT_FOUND {
            return Ok(vec![]);
        }
        if !status.is_success() {
            anyhow::bail!("search failed: HTTP {status}: {}", told(&body));
        }
        Ok(body["hits"]["hits"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|h| Some((h["_source"]["chunk_id"].as_i64()?, h["_score"].as_f64()?)))
            .collect())
    }
}

fn merge(mut a: Value, b: Value) -> Value {
    if let (Some(a), Value::Object(b)) = (a.as_object_mut(), b) {
        a.extend(b);
    }
    a
}

/// An error answer, as it goes into an error and the log: its `error.type` and the start of
/// its `reason`, on one line. The whole body may quote a query (the user's question) or a
/// document's field, and has no bound.
fn told(body: &Value) -> String {
    let error = body.get("error").unwrap_or(body);
    let kind = error.get("type").and_then(Value::as_str);
    let reason = error.get("reason").and_then(Value::as_str);
    match (kind, reason) {
        (Some(kind), Some(reason)) => format!("{kind}: {}", crate::text::excerpt(reason, 200)),
        (Some(kind), None) => kind.to_owned(),
        _ => crate::text::excerpt(&error.to_string(), 200),
    }
}

async fn body(reply: Response) -> anyhow::Result<Value> {
    let text = reply.text().await?;
    Ok(serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

#[async_trait]
impl IndexWrites for OpenSearchIndex {
    fn backend(&self) -> &'static str {
        "OpenSearch"
    }

    fn in_transaction(&self) -> bool {
        false
    }

    async fn put(&self, _tx: &mut PgConnection, entries: &[Entry<'_>]) -> anyhow::Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        self.ensure().await?;
        let mut lines = Vec::with_capacity(entries.len() * 2);
        for e in entries {
            lines.push(JsonBody::new(json!({ "index": { "_id": e.chunk_id.to_string() } })));
            lines.push(JsonBody::new(self.document(e)));
        }
        self.bulk(lines).await
    }

    async fn remove(&self, _tx: &mut PgConnection, chunk_ids: &[i64]) -> anyhow::Result<()> {
        if chunk_ids.is_empty() {
            return Ok(());
        }
        let lines = chunk_ids
            .iter()
            .map(|id| JsonBody::new(json!({ "delete": { "_id": id.to_string() } })))
            .collect();
        self.bulk(lines).await
    }

    async fn drop_all(&self, _tx: &mut PgConnection) -> anyhow::Result<()> {
        let reply = self
            .client
            .indices()
            .delete(IndicesDeleteParts::Index(&[&self.index]))
            .send()
            .await?;
        let status = reply.status_code();
        if status.is_success() || status == StatusCode::NOT_FOUND {
            return Ok(());
        }
        anyhow::bail!(
            "deleting index {} failed: HTTP {status}: {}",
            self.index,
            told(&body(reply).await?)
        )
    }
}

/// Words of a full-text query sent at most: under OpenSearch's default clause limit (1,024).
const MAX_QUERY_WORDS: usize = 1000;

#[async_trait]
impl TextIndex for OpenSearchIndex {
    async fn search(&self, _db: &PgPool, query: &str, limit: usize) -> anyhow::Result<Vec<Hit>> {
        // Each word is a clause of the query, and OpenSearch refuses more than 1,024 by
        // default (`too_many_clauses`): a long question's repeats are sent once, and its
        // words past the limit not at all.
        let mut words = segment::distinct(query);
        words.truncate(MAX_QUERY_WORDS);
        if words.is_empty() {
            return Ok(vec![]);
        }
        let words = words.join(" ");
        let body = json!({
            "size": limit, "_source": ["chunk_id"],
            "query": { "match": { "content": { "query": words, "operator": "or" } } }
        });
        let hits = self.hits(body).await?;
        Ok(hits
            .into_iter()
            .map(|(chunk_id, score)| Hit { id: chunk_id, score })
            .collect())
    }
}

#[async_trait]
impl VectorIndex for OpenSearchIndex {
    /// The lucene engine scores cosine as (1 + cos) / 2; mapped back to the cosine.
    async fn search(&self, _db: &PgPool, vector: &[f32], limit: usize) -> anyhow::Result<Vec<Hit>> {
        let body = json!({
            "size": limit, "_source": ["chunk_id"],
            "query": { "knn": { "embedding": { "vector": vector, "k": limit } } }
        });
        let hits = self.hits(body).await?;
        Ok(hits
            .into_iter()
            .map(|(chunk_id, score)| Hit {
                id: chunk_id,
                score: 2.0 * score - 1.0,
            })
            .collect())
    }
}
