//! Milvus through the official SDK (`milvus-sdk-rust`, gRPC): one collection per base with
//! the chunk id as primary key, the document id and the vector (cosine, AUTOINDEX).

use std::time::Duration;

use async_trait::async_trait;
use milvus::v2::prelude::*;
use sqlx::{PgConnection, PgPool};

use super::{Entry, IndexWrites, VectorIndex};
use crate::rag::bases::KbRow;
use crate::rag::search::fusion::Hit;
use crate::stores::{Connection, StoreRow};
use crate::{AppResult, AppState};

const CHUNK_ID: &str = "chunk_id";
const DOCUMENT_ID: &str = "document_id";
const VECTOR: &str = "embedding";

pub struct MilvusIndex {
    config: ConnectConfig,
    collection: String,
    dimension: u32,
}

/// The collection of a base, `agent_platform_kb_{id}_{created micros}`.
pub fn collection_name(kb: &KbRow) -> String {
    format!("agent_platform_kb_{}", super::base_key(kb))
}

impl MilvusIndex {
    pub fn new(state: &AppState, row: &StoreRow, kb: &KbRow) -> AppResult<Self> {
        let conn = super::connection(state, row)?;
        Ok(Self {
            config: config(&conn),
            collection: collection_name(kb),
            dimension: kb.dimension as u32,
        })
    }

    /// A connection per operation: a cached client would hold a gRPC channel bound to the
    /// runtime that opened it.
    async fn client(&self) -> anyhow::Result<ClientV2> {
        Ok(ClientV2::new(&self.config).await?)
    }

    async fn exists(&self, client: &ClientV2) -> anyhow::Result<bool> {
        let reply = client
            .has_collection(
                HasCollectionRequest::builder()
                    .collection_name(&self.collection)
                    .build()?,
            )
            .await?;
        Ok(reply.exists())
    }

    /// Creates and loads the base's collection on its first write.
    async fn ensure(&self, client: &ClientV2) -> anyhow::Result<()> {
        if self.exists(client).await? {
            return Ok(());
        }
        let schema = CollectionSchema::new()
            .add_field(
                FieldSchema::new()
                    .name(CHUNK_ID)
                    .data_type(DataType::Int64)
                    .primary_key(true),
            )
            .add_field(FieldSchema::new().name(DOCUMENT_ID).data_type(DataType::Int64))
            .add_field(
                FieldSchema::new()
                    .name(VECTOR)
                    .data_type(DataType::FloatVector)
                    .dimension(self.dimension),
            );
        let created = client
            .create_collection(
                CreateCollectionRequest::builder()
                    .collection_name(&self.collection)
                    .schema(schema)
                    .build()?,
            )
            .await;
        if let Err(e) = created {
            // Another writer may have created it a moment ago; it indexes and loads it too.
            if self.exists(client).await? {
                return Ok(());
            }
            return Err(e.into());
        }
        client
            .create_index(
                CreateIndexRequest::builder()
                    .collection_name(&self.collection)
                    .index_param(
                        IndexParam::new()
                            .field_name(VECTOR)
                            .index_type(IndexType::AutoIndex)
                            .metric_type(MetricType::Cosine),
                    )
                    .build()?,
            )
            .await?;
        client
            .load_collection(
                LoadCollectionRequest::builder()
                    .collection_name(&self.collection)
                    .build()?,
            )
            .await?;
        Ok(())
    }
}

fn config(conn: &Connection) -> ConnectConfig {
    let mut config = ConnectConfig::new()
        .uri(super::base_url(conn))
        .connect_timeout(Duration::from_secs(5))
        .rpc_timeout(Duration::from_secs(30))
        .retry(RetryConfig::new().max_attempts(2))
        .telemetry(TelemetryConfig::new().enabled(false));
    if let (Some(user), Some(password)) = (&conn.username, &conn.password) {
        config = config.username_password(user, password);
    }
    if let Some(db) = &conn.database {
        config = config.database(db);
    }
    config
}

/// Connects and lists the collections: the store instance connection test.
pub async fn ping(conn: &Connection) -> anyhow::Result<()> {
    let client = ClientV2::new(&config(conn)).await?;
    client
        .list_collections(ListCollectionsRequest::builder().build()?)
        .await?;
    Ok(())
}

fn id_list(ids: &[i64]) -> String {
    let list: Vec<String> = ids.iter().map(i64::to_string).collect();
    format!("{CHUNK_ID} in [{}]", list.join(","))
}

#[async_trait]
impl IndexWrites for MilvusIndex {
    fn backend(&self) -> &'static str {
        "Milvus"
    }

    async fn put(&self, _tx: &mut PgConnection, entries: &[Entry<'_>]) -> anyhow::Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        let client = self.client().await?;
        self.ensure(&client).await?;
        let rows: Vec<serde_json::Value> = entries
            .iter()
            .map(|e| serde_json::json!({ CHUNK_ID: e.chunk_id, DOCUMENT_ID: e.document_id, VECTOR: e.vector }))
            .collect();
        let insert = InsertRequest::builder()
            .collection_name(&self.collection)
            .rows(rows)
            .build()?;
        client.upsert(UpsertRequest::builder().insert(insert).build()?).await?;
        Ok(())
    }

    async fn remove(&self, _tx: &mut PgConnection, chunk_ids: &[i64]) -> anyhow::Result<()> {
        let client = self.client().await?;
        if chunk_ids.is_empty() || !self.exists(&client).await? {
            return Ok(());
        }
        client
            .delete(
                DeleteRequest::builder()
                    .collection_name(&self.collection)
                    .filter(id_list(chunk_ids))
                    .build()?,
            )
            .await?;
        Ok(())
    }

    async fn drop_all(&self, _tx: &mut PgConnection) -> anyhow::Result<()> {
        let client = self.client().await?;
        if self.exists(&client).await? {
            client
                .drop_collection(
                    DropCollectionRequest::builder()
                        .collection_name(&self.collection)
                        .build()?,
                )
                .await?;
        }
        Ok(())
    }
}

#[async_trait]
impl VectorIndex for MilvusIndex {
    async fn search(&self, _db: &PgPool, vector: &[f32], limit: usize) -> anyhow::Result<Vec<Hit>> {
        let client = self.client().await?;
        if !self.exists(&client).await? {
            return Ok(vec![]);
        }
        let reply = client
            .search(
                SearchRequest::builder()
                    .collection_name(&self.collection)
                    .vector_field(VECTOR)
                    .vectors(SearchVectors::Float(vec![vector.to_vec()]))
                    .output_fields([CHUNK_ID])
                    .limit(limit as i64)
                    .metric_type(MetricType::Cosine)
                    .consistency_level(ConsistencyLevel::Strong)
                    .build()?,
            )
            .await?;
        let mut hits = Vec::new();
        for result in reply.results().iter() {
            for row in result.rows()? {
                let (ResultValue::Int64(chunk_id), score) = (row.get(CHUNK_ID)?, row.get("score")?) else {
                    anyhow::bail!("Milvus returned a hit without a chunk id");
                };
                let score = match score {
                    ResultValue::Float(s) => f64::from(s),
                    ResultValue::Double(s) => s,
                    _ => 0.0,
                };
                hits.push(Hit { id: chunk_id, score });
            }
        }
        Ok(hits)
    }
}
