//! Everything a handler needs, built once per process (per Lambda instance).

use std::sync::Arc;

use sqlx::PgPool;

use crate::auth::verified_apps::VerifiedApps;
use crate::auth::JwtKeys;
use crate::config::{Config, QueueBackend, StorageBackend};
use crate::crypto::SecretBox;
use crate::db::OtherPools;
use crate::mcp::stdio::StdioPolicy;
use crate::mcp::McpPool;
use crate::models::client::ModelClient;
use crate::queue::{InProcessQueue, Queue, SqsQueue};
use crate::storage::{FsStore, ObjectStore, S3Store};

#[derive(Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

struct Inner {
    config: Config,
    db: PgPool,
    storage: Arc<dyn ObjectStore>,
    queue: Arc<dyn Queue>,
    secrets: SecretBox,
    jwt: JwtKeys,
    models: ModelClient,
    mcp: McpPool,
    verified_apps: VerifiedApps,
    other_pools: OtherPools,
    /// Where clients reach the API, learned from a request when PUBLIC_BASE_URL is not set.
    learned_base_url: std::sync::OnceLock<String>,
}

impl AppState {
    /// Connects the pool (running migrations), the object store and the queue the config names.
    pub async fn build(config: Config) -> anyhow::Result<Self> {
        crate::time::set_utc_offset(config.utc_offset_secs);
        // The database start (connect, migrations check) waits on the network; the AWS
        // clients read their configuration meanwhile, part of every cold start.
        let (db, clients) = tokio::join!(crate::db::connect(&config), Self::storage_and_queue(&config));
        let (storage, queue) = clients?;
        Ok(Self::from_parts(config, db?, storage, queue))
    }

    async fn storage_and_queue(config: &Config) -> anyhow::Result<(Arc<dyn ObjectStore>, Arc<dyn Queue>)> {
        // One AWS configuration for both clients: loading it reads the environment and the
        // profile files.
        let aws = tokio::sync::OnceCell::new();
        let aws = || aws.get_or_init(aws_config::load_from_env);
        let storage: Arc<dyn ObjectStore> = match &config.storage {
            StorageBackend::S3 { bucket } => Arc::new(S3Store::new(aws().await, bucket.clone())),
            StorageBackend::Filesystem { root } => Arc::new(FsStore::new(root.into(), config)?),
        };
        let queue: Arc<dyn Queue> = match &config.queue {
            QueueBackend::Sqs { ingest_url, memory_url } => {
                Arc::new(SqsQueue::new(aws().await, ingest_url.clone(), memory_url.clone()))
            }
            QueueBackend::InProcess => Arc::new(InProcessQueue::default()),
        };
        Ok((storage, queue))
    }

    pub fn from_parts(config: Config, db: PgPool, storage: Arc<dyn ObjectStore>, queue: Arc<dyn Queue>) -> Self {
        let secrets = SecretBox::new(&config.encryption_key);
        let jwt = JwtKeys::new(&config.jwt_secret, config.access_token_ttl);
        let (models, mcp) = (
            ModelClient::guarded(&config.outbound),
            McpPool::guarded(&config.outbound, StdioPolicy::from_config(&config)),
        );
        Self {
            inner: Arc::new(Inner {
                config,
                db,
                storage,
                queue,
                secrets,
                jwt,
                models,
                mcp,
                verified_apps: VerifiedApps::default(),
                other_pools: OtherPools::default(),
                learned_base_url: std::sync::OnceLock::new(),
            }),
        }
    }

    pub fn config(&self) -> &Config {
        &self.inner.config
    }
    pub fn db(&self) -> &PgPool {
        &self.inner.db
    }
    pub fn storage(&self) -> &dyn ObjectStore {
        self.inner.storage.as_ref()
    }
    pub fn queue(&self) -> &Arc<dyn Queue> {
        &self.inner.queue
    }
    pub fn secrets(&self) -> &SecretBox {
        &self.inner.secrets
    }
    pub fn jwt(&self) -> &JwtKeys {
        &self.inner.jwt
    }
    /// The process-wide model client (one connection pool).
    pub fn models(&self) -> &ModelClient {
        &self.inner.models
    }

    /// MCP sessions and tool lists of this process.
    pub fn mcp(&self) -> &McpPool {
        &self.inner.mcp
    }

    /// App credentials and external users verified in the last few seconds.
    pub fn verified_apps(&self) -> &VerifiedApps {
        &self.inner.verified_apps
    }

    /// Pools to the PostgreSQL store instances other than the service's own database.
    pub fn pg_pools(&self) -> &OtherPools {
        &self.inner.other_pools
    }

    /// The path under which the API is served, e.g. `/api`.
    pub fn base_path(&self) -> String {
        format!("/{}", self.inner.config.api_prefix)
    }

    /// A link to a path of this API: absolute when PUBLIC_BASE_URL is set or the address was
    /// learned from a request (`learn_base_url`), else from the host's root.
    pub fn link(&self, path: &str) -> String {
        let base = self
            .inner
            .config
            .public_base_url
            .as_deref()
            .or_else(|| self.inner.learned_base_url.get().map(String::as_str))
            .unwrap_or("");
        format!("{base}{}{path}", self.base_path())
    }

    /// Takes `base` as the address clients reach the API at, unless PUBLIC_BASE_URL says it
    /// or one was learned already: behind API Gateway a path from the host's root misses the
    /// stage the API is deployed at.
    pub fn learn_base_url(&self, base: impl FnOnce() -> Option<String>) {
        if self.inner.config.public_base_url.is_some() || self.inner.learned_base_url.get().is_some() {
            return;
        }
        if let Some(base) = base() {
            let _ = self.inner.learned_base_url.set(base);
        }
    }
}
