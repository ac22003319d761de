//! One gRPC connection to Milvus: the credentials and database every call carries as metadata
//! (as Milvus's own SDKs send them), and the calls the vector index makes, each turning a
//! failed `Status` into an error that says what Milvus answered.

use std::time::Duration;

use anyhow::Context;
use base64::Engine;
use prost::Message;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

use super::proto::{self as pb, milvus_service_client::MilvusServiceClient};
use crate::stores::Connection;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

pub struct Client {
    grpc: MilvusServiceClient<Channel>,
    /// `authorization` (`base64(user:password)`) and `dbname`, when set.
    metadata: Vec<(&'static str, MetadataValue<Ascii>)>,
    database: String,
}

impl Client {
    pub async fn connect(conn: &Connection) -> anyhow::Result<Self> {
        let url = super::super::base_url(conn);
        let mut endpoint = Endpoint::from_shared(url.clone())?
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(CALL_TIMEOUT);
        if conn.use_tls {
            endpoint = endpoint.tls_config(ClientTlsConfig::new().with_native_roots())?;
        }
        let channel = endpoint
            .connect()
            .await
            .with_context(|| format!("could not connect to Milvus at {url}"))?;
        let mut metadata = Vec::new();
        if let (Some(user), Some(password)) = (&conn.username, &conn.password) {
            let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
            metadata.push(("authorization", token.parse()?));
        }
        let database = conn.database.clone().unwrap_or_default();
        if !database.is_empty() {
            let value = database
                .parse()
                .context("the Milvus database name is not valid metadata")?;
            metadata.push(("dbname", value));
        }
        Ok(Self {
            grpc: MilvusServiceClient::new(channel),
            metadata,
            database,
        })
    }

    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        for (key, value) in &self.metadata {
            request.metadata_mut().insert(*key, value.clone());
        }
        request
    }

    pub async fn list_collections(&mut self) -> anyhow::Result<Vec<String>> {
        let message = pb::ShowCollectionsRequest {
            db_name: self.database.clone(),
        };
        let reply = self.grpc.show_collections(self.request(message)).await?.into_inner();
        check(reply.status)?;
        Ok(reply.collection_names)
    }

    pub async fn has_collection(&mut self, collection: &str) -> anyhow::Result<bool> {
        let message = pb::HasCollectionRequest {
            db_name: self.database.clone(),
            collection_name: collection.to_owned(),
        };
        let reply = self.grpc.has_collection(self.request(message)).await?.into_inner();
        check(reply.status)?;
        Ok(reply.value)
    }

    pub async fn create_collection(&mut self, collection: &str, schema: pb::CollectionSchema) -> anyhow::Result<()> {
        let message = pb::CreateCollectionRequest {
            db_name: self.database.clone(),
            collection_name: collection.to_owned(),
            schema: schema.encode_to_vec(),
            shards_num: 1,
            consistency_level: pb::ConsistencyLevel::Bounded.into(),
        };
        check(Some(
            self.grpc.create_collection(self.request(message)).await?.into_inner(),
        ))
    }

    pub async fn create_index(&mut self, collection: &str, field: &str, params: &[(&str, &str)]) -> anyhow::Result<()> {
        let message = pb::CreateIndexRequest {
            db_name: self.database.clone(),
            collection_name: collection.to_owned(),
            field_name: field.to_owned(),
            extra_params: pairs(params),
            index_name: String::new(),
        };
        check(Some(self.grpc.create_index(self.request(message)).await?.into_inner()))
    }

    pub async fn load_collection(&mut self, collection: &str) -> anyhow::Result<()> {
        let message = pb::LoadCollectionRequest {
            db_name: self.database.clone(),
            collection_name: collection.to_owned(),
            replica_number: 1,
        };
        check(Some(
            self.grpc.load_collection(self.request(message)).await?.into_inner(),
        ))
    }

    pub async fn load_state(&mut self, collection: &str) -> anyhow::Result<pb::LoadState> {
        let message = pb::GetLoadStateRequest {
            db_name: self.database.clone(),
            collection_name: collection.to_owned(),
        };
        let reply = self.grpc.get_load_state(self.request(message)).await?.into_inner();
        let state = reply.state();
        check(reply.status)?;
        Ok(state)
    }

    pub async fn drop_collection(&mut self, collection: &str) -> anyhow::Result<()> {
        let message = pb::DropCollectionRequest {
            db_name: self.database.clone(),
            collection_name: collection.to_owned(),
        };
        check(Some(
            self.grpc.drop_collection(self.request(message)).await?.into_inner(),
        ))
    }

    pub async fn upsert(&mut self, collection: &str, columns: Vec<pb::FieldData>, rows: usize) -> anyhow::Result<()> {
        let message = pb::UpsertRequest {
            db_name: self.database.clone(),
            collection_name: collection.to_owned(),
            fields_data: columns,
            num_rows: u32::try_from(rows)?,
        };
        check(self.grpc.upsert(self.request(message)).await?.into_inner().status)
    }

    pub async fn delete(&mut self, collection: &str, filter: String) -> anyhow::Result<()> {
        let message = pb::DeleteRequest {
            db_name: self.database.clone(),
            collection_name: collection.to_owned(),
            expr: filter,
            consistency_level: pb::ConsistencyLevel::Strong.into(),
        };
        check(self.grpc.delete(self.request(message)).await?.into_inner().status)
    }

    /// Searches one float vector; `params` are the search parameters (field, metric, top k).
    pub async fn search(
        &mut self,
        collection: &str,
        vector: &[f32],
        params: &[(&str, &str)],
    ) -> anyhow::Result<pb::SearchResultData> {
        let group = pb::PlaceholderGroup {
            placeholders: vec![pb::PlaceholderValue {
                tag: "$0".into(),
                r#type: pb::PlaceholderType::FloatVectorPlaceholder.into(),
                values: vec![vector.iter().flat_map(|x| x.to_le_bytes()).collect()],
            }],
        };
        let message = pb::SearchRequest {
            db_name: self.database.clone(),
            collection_name: collection.to_owned(),
            dsl: String::new(),
            placeholder_group: group.encode_to_vec(),
            dsl_type: pb::DslType::BoolExprV1.into(),
            search_params: pairs(params),
            nq: 1,
            consistency_level: pb::ConsistencyLevel::Strong.into(),
            use_default_consistency: false,
        };
        let reply = self.grpc.search(self.request(message)).await?.into_inner();
        check(reply.status)?;
        Ok(reply.results.unwrap_or_default())
    }
}

fn pairs(params: &[(&str, &str)]) -> Vec<pb::KeyValuePair> {
    params
        .iter()
        .map(|(key, value)| pb::KeyValuePair {
            key: (*key).to_owned(),
            value: (*value).to_owned(),
        })
        .collect()
}

/// Milvus answers most failures with a status in a successful gRPC reply.
fn check(status: Option<pb::Status>) -> anyhow::Result<()> {
    match status {
        Some(s) if s.code != 0 || s.error_code != 0 => {
            anyhow::bail!("Milvus answered code {}: {}", s.code.max(s.error_code), s.reason)
        }
        _ => Ok(()),
    }
}
