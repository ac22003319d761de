//! Wire shapes and rows of the model module.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use super::ModelType;
use crate::crypto::{mask_secret, SecretBox};
use crate::domain::CurrentUser;
use crate::time;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ProviderRow {
    pub id: i64,
    pub provider_name: String,
    pub provider_key: String,
    pub description: Option<String>,
    pub icon_url: Option<String>,
    pub is_enabled: bool,
    pub created_dt: DateTime<Utc>,
    pub updated_dt: DateTime<Utc>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderView {
    pub id: i64,
    pub provider_name: String,
    pub provider_key: String,
    pub description: Option<String>,
    pub icon_url: Option<String>,
    pub is_enabled: bool,
    pub created_dt: String,
    pub updated_dt: String,
}

impl From<ProviderRow> for ProviderView {
    fn from(p: ProviderRow) -> Self {
        Self {
            id: p.id,
            provider_name: p.provider_name,
            provider_key: p.provider_key,
            description: p.description,
            icon_url: p.icon_url,
            is_enabled: p.is_enabled,
            created_dt: time::datetime(p.created_dt),
            updated_dt: time::datetime(p.updated_dt),
        }
    }
}

/// Create (providerName and providerKey required) or partial update.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderRequest {
    pub provider_name: Option<String>,
    pub provider_key: Option<String>,
    pub description: Option<String>,
    pub icon_url: Option<String>,
    pub is_enabled: Option<bool>,
}

/// Also read as JSON, where it comes with another row (an agent's chat model).
#[derive(Debug, Clone, sqlx::FromRow, Deserialize)]
pub struct ModelConfigRow {
    pub id: i64,
    pub provider_id: i64,
    pub provider_name: String,
    pub model_name: String,
    pub model_key: String,
    pub model_type: String,
    pub adapter_key: String,
    pub api_key_enc: String,
    /// Who stored the key (its creator, or an administrator who sent one).
    pub key_set_by: i64,
    pub api_endpoint: String,
    pub description: Option<String>,
    pub config_json: Value,
    pub scope: String,
    pub is_default: bool,
    pub is_enabled: bool,
    pub creator_id: i64,
    pub created_dt: DateTime<Utc>,
    pub updated_dt: DateTime<Utc>,
    /// Its provider is enabled: a disabled provider takes all of its models out of use.
    pub provider_enabled: bool,
    /// Its creator is an administrator now: its endpoint may reach the operator's networks.
    pub by_operator: bool,
}

impl ModelConfigRow {
    /// The config and its provider are both enabled.
    pub fn is_usable(&self) -> bool {
        self.is_enabled && self.provider_enabled
    }

    /// Administrators manage every config, others their own PERSONAL ones: a user's config
    /// an administrator made GLOBAL (with a key of the operator's) is no longer its creator's.
    pub fn managed_by(&self, user: &CurrentUser) -> bool {
        user.is_admin() || (self.scope == "PERSONAL" && self.creator_id == user.id)
    }

    pub fn reach(&self) -> crate::outbound::Reach {
        crate::outbound::Reach::of_admin(self.by_operator)
    }

    pub fn model_type(&self) -> ModelType {
        ModelType::parse("modelType", &self.model_type).unwrap_or(ModelType::Chat)
    }

    /// The CHAT model accepts images (`configJson.capabilities` contains `vision`).
    pub fn has_capability(&self, capability: &str) -> bool {
        capabilities(&self.config_json).iter().any(|c| c == capability)
    }
}

pub fn capabilities(config_json: &Value) -> Vec<String> {
    config_json
        .get("capabilities")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|c| c.as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelConfigView {
    pub id: i64,
    pub provider_id: i64,
    pub provider_name: String,
    pub model_name: String,
    pub model_key: String,
    pub model_type: String,
    pub adapter_key: String,
    /// Masked, e.g. `****wxyz`; `****` for viewers who do not manage the config.
    pub api_key: String,
    /// For those who manage the config (its creator, administrators); `null` for others: an
    /// administrator's endpoint may be an address in the operator's own network.
    pub api_endpoint: Option<String>,
    pub description: Option<String>,
    #[schema(value_type = ModelOptions)]
    pub config_json: Value,
    pub scope: String,
    pub is_default: bool,
    pub is_enabled: bool,
    /// Enabled, and so is its provider: whether chats, searches and drafts can use it. A
    /// default whose provider is off showed `isEnabled: true` and answered nothing.
    pub usable: bool,
    pub creator_id: i64,
    pub created_dt: String,
    pub updated_dt: String,
}

impl ModelConfigView {
    /// The config as `viewer` sees it: where it calls, and the tail of its key, only when they
    /// manage it.
    pub fn new(row: ModelConfigRow, secrets: &SecretBox, viewer: &CurrentUser) -> Self {
        let manages = row.managed_by(viewer);
        let api_key = match manages {
            true => secrets
                .open(&row.api_key_enc)
                .map(|k| mask_secret(&k))
                .unwrap_or_else(|_| "****".to_owned()),
            false => "****".to_owned(),
        };
        let usable = row.is_usable();
        Self {
            id: row.id,
            provider_id: row.provider_id,
            provider_name: row.provider_name,
            model_name: row.model_name,
            model_key: row.model_key,
            model_type: row.model_type,
            adapter_key: row.adapter_key,
            api_key,
            api_endpoint: manages.then_some(row.api_endpoint),
            description: row.description,
            config_json: row.config_json,
            scope: row.scope,
            is_default: row.is_default,
            is_enabled: row.is_enabled,
            usable,
            creator_id: row.creator_id,
            created_dt: time::iso_local(row.created_dt),
            updated_dt: time::iso_local(row.updated_dt),
        }
    }
}

/// Create (providerId, modelName, modelKey, modelType, apiKey, apiEndpoint required) or
/// partial update. An apiKey sent back masked keeps the stored key.
#[derive(Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelConfigRequest {
    pub provider_id: Option<i64>,
    pub model_name: Option<String>,
    pub model_key: Option<String>,
    pub model_type: Option<String>,
    pub adapter_key: Option<String>,
    pub api_key: Option<String>,
    pub api_endpoint: Option<String>,
    pub description: Option<String>,
    #[schema(value_type = Option<ModelOptions>)]
    pub config_json: Option<Value>,
    /// GLOBAL or PERSONAL.
    pub scope: Option<String>,
    pub is_default: Option<bool>,
    pub is_enabled: Option<bool>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelListItem {
    pub id: i64,
    pub provider_id: i64,
    pub model_name: String,
    pub model_key: String,
    pub model_type: String,
    pub is_enabled: bool,
}

impl From<ModelConfigRow> for ModelListItem {
    fn from(r: ModelConfigRow) -> Self {
        Self {
            id: r.id,
            provider_id: r.provider_id,
            model_name: r.model_name,
            model_key: r.model_key,
            model_type: r.model_type,
            is_enabled: r.is_enabled,
        }
    }
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct ConfigFilter {
    pub provider_key: Option<String>,
    /// CHAT, EMBEDDING or RERANKER.
    pub model_type: Option<String>,
    /// GLOBAL or PERSONAL.
    pub scope: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TestResult {
    pub success: bool,
    pub message: String,
    pub response_time_ms: i64,
}

/// The default model of each type (null where none is set).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "UPPERCASE")]
pub struct DefaultModels {
    pub chat: Option<ModelConfigView>,
    pub embedding: Option<ModelConfigView>,
    pub reranker: Option<ModelConfigView>,
}

#[derive(Debug, Serialize, ToSchema, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct UsageStat {
    /// The model config id.
    pub id: i64,
    pub model_id: i64,
    pub model_name: String,
    pub model_type: String,
    pub provider_id: Option<i64>,
    pub provider_name: Option<String>,
    pub total_calls: i64,
    pub success_calls: i64,
    pub failed_calls: i64,
    /// 0 to 1.
    pub success_rate: f64,
    pub total_tokens_used: i64,
    pub total_cost: f64,
    /// Seconds.
    pub avg_response_time: f64,
}

/// The documented keys of a model config's `configJson`, for the API document: every key is
/// optional, and keys not listed here are kept as they are.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelOptions {
    /// 0 to 2.
    pub temperature: Option<f64>,
    /// Longest answer, 1 to 1,000,000 tokens; also caps a regular user's quota hold.
    pub max_tokens: Option<u64>,
    /// `vision` marks a CHAT model that takes images.
    pub capabilities: Option<Vec<String>>,
    /// The CHAT model that reads images in documents (image OCR).
    pub default_vision_model: Option<bool>,
    /// Seconds to wait for the first byte and between streamed chunks, 1 to 600 (default 60).
    pub timeout_secs: Option<u64>,
    /// Retries before the first byte, 0 to 5 (default 2).
    pub max_retries: Option<u64>,
    /// EMBEDDING: texts per request, 1 to 2048.
    pub batch_size: Option<u64>,
    /// EMBEDDING: the `input_type` sent with queries (e.g. `query`).
    pub query_input_type: Option<String>,
    /// EMBEDDING: the `input_type` sent with stored passages (e.g. `passage`).
    pub document_input_type: Option<String>,
    /// Prices for the usage statistics' `totalCost`.
    pub input_price_per1k: Option<f64>,
    pub output_price_per1k: Option<f64>,
}
