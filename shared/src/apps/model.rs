//! Wire shapes and rows of the apps module.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use crate::time;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AppRow {
    pub id: i64,
    pub app_id: String,
    pub app_name: String,
    pub description: Option<String>,
    pub token_enc: String,
    pub route_strategy: String,
    pub status: i16,
    pub creator_id: i64,
    pub frame_ancestors: Vec<String>,
    pub online_nodes: i64,
    pub create_dt: DateTime<Utc>,
    pub update_dt: DateTime<Utc>,
}

impl AppRow {
    pub fn is_enabled(&self) -> bool {
        self.status == 1
    }
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppView {
    pub id: i64,
    /// The string identifier sent as `Svc-App-Id`.
    pub app_id: String,
    pub app_name: String,
    pub description: Option<String>,
    /// The `Svc-Token` (administrators copy it from here).
    pub token: String,
    /// ROUND_ROBIN, RANDOM or HASH.
    pub route_strategy: String,
    /// 1 enabled, 0 disabled.
    pub status: i16,
    /// The pages that may frame the embedded chat page (`/embed/{agentId}?app=<appId>`), as
    /// CSP `frame-ancestors` sources; empty: any page.
    pub frame_ancestors: Vec<String>,
    pub online_nodes: i64,
    pub create_dt: String,
    pub update_dt: String,
}

impl AppView {
    pub fn new(r: AppRow, token: String) -> Self {
        Self {
            id: r.id,
            app_id: r.app_id,
            app_name: r.app_name,
            description: r.description,
            token,
            route_strategy: r.route_strategy,
            status: r.status,
            frame_ancestors: r.frame_ancestors,
            online_nodes: r.online_nodes,
            create_dt: time::datetime(r.create_dt),
            update_dt: time::datetime(r.update_dt),
        }
    }
}

/// An entry of `GET /app/list`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppOption {
    pub id: i64,
    pub app_id: String,
    pub app_name: String,
    pub status: i16,
    pub online_nodes: i64,
}

impl From<AppRow> for AppOption {
    fn from(r: AppRow) -> Self {
        Self {
            id: r.id,
            app_id: r.app_id,
            app_name: r.app_name,
            status: r.status,
            online_nodes: r.online_nodes,
        }
    }
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppInput {
    /// Required on create, fixed afterwards: 1-64 of A-Z a-z 0-9 _ - .
    pub app_id: Option<String>,
    /// Required on create.
    pub app_name: Option<String>,
    pub description: Option<String>,
    /// ROUND_ROBIN (default), RANDOM or HASH.
    pub route_strategy: Option<String>,
    /// At most 16 CSP sources (`https://partner.example`, `https://*.example.com`, `'self'`,
    /// `https:`); empty (the default): any page may frame the embedded chat page.
    pub frame_ancestors: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct AppFilter {
    /// Substring of appId, appName or description.
    pub keyword: Option<String>,
    /// 1 enabled, 0 disabled.
    pub status: Option<i16>,
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct NodeRow {
    pub id: i64,
    pub app_id: String,
    pub app_name: String,
    pub host_id: String,
    pub host_ip: String,
    pub grpc_port: i32,
    pub max_concurrent: i32,
    pub active_chats: i32,
    pub labels: Value,
    pub expire_dt: DateTime<Utc>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClientNode {
    pub id: i64,
    pub app_id: String,
    pub app_name: String,
    pub host_id: String,
    pub host_ip: String,
    pub grpc_port: i32,
    pub max_concurrent: i32,
    pub active_chats: i32,
    pub labels: BTreeMap<String, String>,
    pub expire_dt: String,
    /// expireDt is in the future.
    pub online: bool,
}

impl From<NodeRow> for ClientNode {
    fn from(r: NodeRow) -> Self {
        Self {
            id: r.id,
            app_id: r.app_id,
            app_name: r.app_name,
            host_id: r.host_id,
            host_ip: r.host_ip,
            grpc_port: r.grpc_port,
            max_concurrent: r.max_concurrent,
            active_chats: r.active_chats,
            labels: serde_json::from_value(r.labels).unwrap_or_default(),
            online: r.expire_dt > Utc::now(),
            expire_dt: time::datetime(r.expire_dt),
        }
    }
}

/// A node's heartbeat: registers it on the first beat, refreshes it on every later one.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Heartbeat {
    /// Required, 1-128 characters, unique within the app.
    pub host_id: Option<String>,
    /// Required: the address the service reaches the node on.
    pub host_ip: Option<String>,
    /// Required, 1-65535.
    pub grpc_port: Option<i64>,
    /// Default 1, 1-10000.
    pub max_concurrent: Option<i64>,
    /// Default 0, 0-100000.
    pub active_chats: Option<i64>,
    /// String labels: at most 32, keys up to 100 and values up to 500 characters, 4,096 bytes
    /// of JSON in all.
    pub labels: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeartbeatReply {
    /// The node is registered until expireDt.
    pub registered: bool,
    /// An administrator removed the node; it is not registered by this beat.
    pub kicked: bool,
    pub expire_dt: Option<String>,
    /// How often to beat (well inside the 30 s lease).
    pub heartbeat_interval_seconds: u64,
}
