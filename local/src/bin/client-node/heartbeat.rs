//! Registers the node and keeps its lease: one beat at once, then one every
//! heartbeatIntervalSeconds; returns when the platform says the node was kicked.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::config::Config;

/// Until the platform has said how often to beat (and after a failed beat).
const FIRST_INTERVAL: Duration = Duration::from_secs(10);

pub async fn run(config: Arc<Config>, grpc_port: u16, active: Arc<AtomicUsize>) {
    let http = reqwest::Client::new();
    let url = format!("{}/openapi/v1/node/heartbeat", config.platform_url);
    let mut every = FIRST_INTERVAL;
    loop {
        let body = json!({
            "hostId": config.host_id,
            "hostIp": config.host_ip,
            "grpcPort": grpc_port,
            "maxConcurrent": config.max_concurrent,
            "activeChats": active.load(Ordering::SeqCst),
            "labels": config.labels,
        });
        match beat(&http, &url, &config, &body).await {
            Ok(reply) if reply["kicked"] == true => {
                tracing::warn!(host_id = %config.host_id, "kicked by an administrator of the platform; stopping");
                return;
            }
            Ok(reply) => {
                if let Some(secs) = reply["heartbeatIntervalSeconds"].as_u64().filter(|s| *s > 0) {
                    every = Duration::from_secs(secs);
                }
                tracing::debug!(expire_dt = %reply["expireDt"], "heartbeat accepted");
            }
            Err(e) => tracing::warn!(error = %e, "heartbeat failed; trying again"),
        }
        tokio::time::sleep(every).await;
    }
}

/// One beat; the `data` of the platform's answer.
async fn beat(http: &reqwest::Client, url: &str, config: &Config, body: &Value) -> anyhow::Result<Value> {
    let resp = http
        .post(url)
        .header("Svc-App-Id", &config.app_id)
        .header("Svc-Token", &config.app_token)
        .json(body)
        .timeout(Duration::from_secs(10))
        .send()
        .await?;
    let envelope: Value = resp.json().await?;
    if envelope["code"] != 1 {
        anyhow::bail!("the platform refused the heartbeat: {}", envelope["msg"]);
    }
    Ok(envelope["data"].clone())
}
