//! `client-node`: the reference client node. It serves the platform's model calls for one app
//! over gRPC (shared/proto/client_node.proto) by calling an OpenAI-compatible endpoint, and
//! keeps itself registered by heartbeat until an administrator kicks it.

mod config;
mod heartbeat;
mod service;

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use shared::apps::node_proto::client_node_server::ClientNodeServer;
use shared::apps::node_wire::MAX_REQUEST_BYTES;
use shared::models::client::ModelClient;
use tonic::transport::server::TcpIncoming;

use crate::config::{Config, USAGE};
use crate::service::Node;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return Ok(());
    }
    let config = Arc::new(Config::load(args)?);
    let listener = tokio::net::TcpListener::bind(config.grpc_listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", config.grpc_listen))?;
    let port = listener.local_addr()?.port();
    let active = Arc::new(AtomicUsize::new(0));
    let node = Node {
        config: config.clone(),
        models: ModelClient::new(),
        active: active.clone(),
    };
    let server = tonic::transport::Server::builder()
        .add_service(ClientNodeServer::new(node).max_decoding_message_size(MAX_REQUEST_BYTES))
        .serve_with_incoming(TcpIncoming::from(listener));
    tracing::info!(host_id = %config.host_id, port, app_id = %config.app_id, "client node serving gRPC");
    tokio::select! {
        served = server => served?,
        () = heartbeat::run(config.clone(), port, active) => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    Ok(())
}
