//! Client-node heartbeats: a lease of 30 s renewed by every beat; a kicked node is told so.

use std::time::Duration;

use chrono::Utc;

use super::model::{Heartbeat, HeartbeatReply};
use super::node_repo::{self, Beat};
use crate::domain::AppCaller;
use crate::outbound::Reach;
use crate::{time, validate, AppError, AppResult, AppState};

pub const LEASE: Duration = Duration::from_secs(30);
pub const BEAT_EVERY: Duration = Duration::from_secs(10);
const MAX_LABELS: usize = 32;
/// The labels' JSON, all together: 32 keys and values at their character limits, in four-byte
/// characters, made 77 KB a node, and an app's 500 nodes passed Lambda's 6 MB answer in the
/// admin API's node lists.
const MAX_LABELS_BYTES: usize = 4096;

fn int(field: &str, value: Option<i64>, default: Option<i64>, min: i64, max: i64) -> AppResult<i32> {
    let v = value
        .or(default)
        .ok_or_else(|| AppError::validation(format!("{field} is required")))?;
    validate::range(field, v, min, max)?;
    Ok(v as i32)
}

/// Nodes one app may hold, online or lapsed: each heartbeat with a new hostId adds one, and the
/// admin API lists them whole.
pub const MAX_NODES_PER_APP: i64 = 500;

pub async fn heartbeat(state: &AppState, app: &AppCaller, beat: Heartbeat) -> AppResult<HeartbeatReply> {
    let host_id = validate::required("hostId", beat.host_id)?;
    validate::length("hostId", &host_id, 1, 128)?;
    // Logged with every call routed to it: a line break would forge a log line.
    validate::printable("hostId", &host_id, false)?;
    // The admin API names a node by its id in a path: `.`, `..` or a `/` there is collapsed or
    // split by clients and proxies, and the node could never be kicked.
    if matches!(host_id.as_str(), "." | "..") || host_id.contains('/') {
        return Err(AppError::validation("hostId may not be '.', '..' or hold a '/'"));
    }
    let host_ip = validate::required("hostIp", beat.host_ip)?;
    // The platform connects to this address with the node's work: it must be an address, and
    // not one outbound calls may never reach (cloud metadata, link-local).
    let ip: std::net::IpAddr = host_ip
        .trim_matches(['[', ']'])
        .parse()
        .map_err(|_| AppError::validation(format!("hostIp must be an IP address, got {host_ip:?}")))?;
    if state.config().outbound.deny(Reach::Operator).denies(ip) {
        return Err(AppError::validation(format!(
            "hostIp: {ip} is in a network the service may not call (OUTBOUND_DENY_CIDRS)"
        )));
    }
    // The node is sent the app's token in the clear: not across the internet. A deployment
    // that narrows the list drops nodes outside it within a lease (30 s), as their beats fail.
    if !state.config().node_networks.allow(ip) {
        return Err(AppError::validation(format!(
            "hostIp: {ip} is outside the networks client nodes may use (CLIENT_NODE_CIDRS): the service \
             talks to nodes over plaintext gRPC, with the app's token, so they belong on a private network or a tunnel"
        )));
    }
    let grpc_port = int("grpcPort", beat.grpc_port, None, 1, 65_535)?;
    let max_concurrent = int("maxConcurrent", beat.max_concurrent, Some(1), 1, 10_000)?;
    let active_chats = int("activeChats", beat.active_chats, Some(0), 0, 100_000)?;
    let labels = beat.labels.unwrap_or_default();
    if labels.len() > MAX_LABELS {
        return Err(AppError::validation(format!(
            "labels may hold at most {MAX_LABELS} entries"
        )));
    }
    for (key, value) in &labels {
        validate::length("labels (a key)", key, 1, 100)?;
        validate::length(&format!("labels.{key}"), value, 0, 500)?;
    }
    let labels = serde_json::to_value(labels).map_err(|e| AppError::Internal(e.into()))?;
    if labels.to_string().len() > MAX_LABELS_BYTES {
        return Err(AppError::validation(format!(
            "labels may hold at most {MAX_LABELS_BYTES} bytes of JSON"
        )));
    }
    // Stored as parsed: `[10.0.0.7]` or `10.0.0.7]` would make an address no call could use.
    let host_ip = ip.to_string();

    let mut tx = state.db().begin().await?;
    if node_repo::take_kick(&mut tx, app.id, &host_id).await? {
        tx.commit().await?;
        return Ok(HeartbeatReply {
            registered: false,
            kicked: true,
            expire_dt: None,
            heartbeat_interval_seconds: BEAT_EVERY.as_secs(),
        });
    }
    let expire_dt = Utc::now() + LEASE;
    let row = Beat {
        app: app.id,
        host_id: &host_id,
        host_ip: &host_ip,
        grpc_port,
        max_concurrent,
        active_chats,
        labels,
        expire_dt,
    };
    if !node_repo::room_for(&mut tx, app.id, &host_id, MAX_NODES_PER_APP).await? {
        return Err(AppError::validation(format!(
            "hostId: the app has {MAX_NODES_PER_APP} nodes online already; a new one is taken once one lapses"
        )));
    }
    // An app deleted since its credentials were checked (they are cached for 5 s) fails the
    // foreign key: its nodes are refused as its callers are (`error::GONE_APP_KEYS`).
    node_repo::upsert(&mut *tx, &row).await?;
    tx.commit().await?;
    Ok(HeartbeatReply {
        registered: true,
        kicked: false,
        expire_dt: Some(time::datetime(expire_dt)),
        heartbeat_interval_seconds: BEAT_EVERY.as_secs(),
    })
}
