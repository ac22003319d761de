//! Milvus over its gRPC interface: one collection per base with the chunk id as primary key,
//! the document id and the vector (cosine, AUTOINDEX). The client is the service's own, over
//! the few calls it needs, rather than the Milvus SDK: the SDK's gRPC stack brings a server
//! framework into every function that indexes, the queue workers included.

mod client;
mod proto;

use std::time::Duration;

use async_trait::async_trait;
use sqlx::{PgConnection, PgPool};

use self::client::Client;
use self::proto as pb;
use super::{Entry, IndexWrites, VectorIndex};
use crate::rag::bases::KbRow;
use crate::rag::search::fusion::Hit;
use crate::stores::{Connection, StoreRow};
use crate::{AppResult, AppState};

const CHUNK_ID: &str = "chunk_id";
const DOCUMENT_ID: &str = "document_id";
const VECTOR: &str = "embedding";
const COSINE: &str = "COSINE";
/// How long a search waits for a collection it asked Milvus to load again.
const LOAD_WAIT: Duration = Duration::from_secs(10);
const INDEX: [(&str, &str); 3] = [("index_type", "AUTOINDEX"), ("metric_type", COSINE), ("params", "{}")];

pub struct MilvusIndex {
    conn: Connection,
    collection: String,
    dimension: usize,
}

/// The collection of a base, `agent_platform_kb_{id}_{created micros}`.
pub fn collection_name(kb: &KbRow) -> String {
    format!("agent_platform_kb_{}", super::base_key(kb))
}

impl MilvusIndex {
    pub fn new(state: &AppState, row: &StoreRow, kb: &KbRow) -> AppResult<Self> {
        Ok(Self {
            conn: super::connection(state, row)?,
            collection: collection_name(kb),
            dimension: kb.dimension as usize,
        })
    }

    /// A connection per operation: a cached client would hold a gRPC channel bound to the
    /// runtime that opened it.
    async fn client(&self) -> anyhow::Result<Client> {
        Client::connect(&self.conn).await
    }

    /// Creates, indexes and loads the base's collection on its first write.
    async fn ensure(&self, client: &mut Client) -> anyhow::Result<()> {
        if client.has_collection(&self.collection).await? {
            return Ok(());
        }
        let field = |name: &str, data_type: pb::DataType| pb::FieldSchema {
            name: name.to_owned(),
            is_primary_key: name == CHUNK_ID,
            data_type: data_type.into(),
            type_params: vec![],
        };
        let mut vector = field(VECTOR, pb::DataType::FloatVector);
        vector.type_params.push(pb::KeyValuePair {
            key: "dim".into(),
            value: self.dimension.to_string(),
        });
        let schema = pb::CollectionSchema {
            name: self.collection.clone(),
            fields: vec![
                field(CHUNK_ID, pb::DataType::Int64),
                field(DOCUMENT_ID, pb::DataType::Int64),
                vector,
            ],
        };
        if let Err(e) = client.create_collection(&self.collection, schema).await {
            // Another writer may have created it a moment ago; it indexes and loads it too.
            if client.has_collection(&self.collection).await? {
                return Ok(());
            }
            return Err(e);
        }
        self.index_and_load(client).await
    }

    async fn index_and_load(&self, client: &mut Client) -> anyhow::Result<()> {
        client.create_index(&self.collection, VECTOR, &INDEX).await?;
        client.load_collection(&self.collection).await
    }

    /// Loads the collection again, indexing it first when it has no index, and waits for the
    /// load (Milvus loads in the background) up to `LOAD_WAIT`. A first write cut between
    /// Milvus's three calls leaves a collection that exists, so later writes take it as
    /// ready, but that Milvus will not search; an operator's release does the same.
    async fn make_searchable(&self, client: &mut Client) -> anyhow::Result<()> {
        if client.load_collection(&self.collection).await.is_err() {
            self.index_and_load(client).await?;
        }
        let deadline = tokio::time::Instant::now() + LOAD_WAIT;
        while client.load_state(&self.collection).await? != pb::LoadState::Loaded {
            if tokio::time::Instant::now() >= deadline {
                anyhow::bail!("Milvus is still loading the collection; search again shortly");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(())
    }
}

/// Connects and lists the collections: the store instance connection test.
pub async fn ping(conn: &Connection) -> anyhow::Result<()> {
    Client::connect(conn).await?.list_collections().await?;
    Ok(())
}

fn id_list(ids: &[i64]) -> String {
    let list: Vec<String> = ids.iter().map(i64::to_string).collect();
    format!("{CHUNK_ID} in [{}]", list.join(","))
}

fn int64_column(name: &str, data: Vec<i64>) -> pb::FieldData {
    pb::FieldData {
        r#type: pb::DataType::Int64.into(),
        field_name: name.to_owned(),
        field: Some(pb::field_data::Field::Scalars(pb::ScalarField {
            data: Some(pb::scalar_field::Data::LongData(pb::LongArray { data })),
        })),
    }
}

fn vector_column(name: &str, dimension: usize, data: Vec<f32>) -> pb::FieldData {
    pb::FieldData {
        r#type: pb::DataType::FloatVector.into(),
        field_name: name.to_owned(),
        field: Some(pb::field_data::Field::Vectors(pb::VectorField {
            dim: dimension as i64,
            data: Some(pb::vector_field::Data::FloatVector(pb::FloatArray { data })),
        })),
    }
}

#[async_trait]
impl IndexWrites for MilvusIndex {
    fn backend(&self) -> &'static str {
        "Milvus"
    }

    fn in_transaction(&self) -> bool {
        false
    }

    async fn put(&self, _tx: &mut PgConnection, entries: &[Entry<'_>]) -> anyhow::Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        if let Some(e) = entries.iter().find(|e| e.vector.len() != self.dimension) {
            anyhow::bail!(
                "chunk {} has {} dimensions, the collection {}",
                e.chunk_id,
                e.vector.len(),
                self.dimension
            );
        }
        let mut client = self.client().await?;
        self.ensure(&mut client).await?;
        let columns = vec![
            int64_column(CHUNK_ID, entries.iter().map(|e| e.chunk_id).collect()),
            int64_column(DOCUMENT_ID, entries.iter().map(|e| e.document_id).collect()),
            vector_column(
                VECTOR,
                self.dimension,
                entries.iter().flat_map(|e| e.vector.iter().copied()).collect(),
            ),
        ];
        client.upsert(&self.collection, columns, entries.len()).await
    }

    async fn remove(&self, _tx: &mut PgConnection, chunk_ids: &[i64]) -> anyhow::Result<()> {
        let mut client = self.client().await?;
        if chunk_ids.is_empty() || !client.has_collection(&self.collection).await? {
            return Ok(());
        }
        client.delete(&self.collection, id_list(chunk_ids)).await
    }

    async fn drop_all(&self, _tx: &mut PgConnection) -> anyhow::Result<()> {
        let mut client = self.client().await?;
        if client.has_collection(&self.collection).await? {
            client.drop_collection(&self.collection).await?;
        }
        Ok(())
    }
}

#[async_trait]
impl VectorIndex for MilvusIndex {
    async fn search(&self, _db: &PgPool, vector: &[f32], limit: usize) -> anyhow::Result<Vec<Hit>> {
        let mut client = self.client().await?;
        if !client.has_collection(&self.collection).await? {
            return Ok(vec![]);
        }
        let top_k = limit.to_string();
        let params = [
            ("anns_field", VECTOR),
            ("topk", &top_k),
            ("metric_type", COSINE),
            ("params", "{}"),
        ];
        let results = match client.search(&self.collection, vector, &params).await {
            Ok(results) => results,
            // Only when Milvus answered (an unreachable or slow one would only wait twice), and
            // once: a collection that cannot be made searchable keeps the search's own error,
            // which says more than the repair's.
            Err(e) if e.downcast_ref::<tonic::Status>().is_none() => match self.make_searchable(&mut client).await {
                Ok(()) => client.search(&self.collection, vector, &params).await?,
                Err(_) => return Err(e),
            },
            Err(e) => return Err(e),
        };
        let ids = match results.ids.and_then(|ids| ids.id_field) {
            Some(pb::i_ds::IdField::IntId(ids)) => ids.data,
            None => vec![],
        };
        if ids.len() != results.scores.len() {
            anyhow::bail!("Milvus returned {} ids with {} scores", ids.len(), results.scores.len());
        }
        let hits = ids.into_iter().zip(results.scores).map(|(id, score)| Hit {
            id,
            score: f64::from(score),
        });
        Ok(hits.collect())
    }
}
