//! The gRPC `Chat` of a client node: checks the caller's app credentials and the node's
//! capacity, accepts the call, then streams the upstream model's answer back as deltas.

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use futures::{Stream, StreamExt};
use serde_json::Value;
use shared::apps::node_proto::client_node_server::ClientNode;
use shared::apps::node_proto::{ChatDelta, ChatRequest};
use shared::apps::node_wire;
use shared::crypto::constant_time_eq;
use shared::models::client::{Endpoint, ModelClient};
use tokio::sync::mpsc;
use tonic::{Request, Response, Status};

use crate::config::Config;

pub struct Node {
    pub config: Arc<Config>,
    pub models: ModelClient,
    /// Calls being served, reported in heartbeats.
    pub active: Arc<AtomicUsize>,
}

/// One call being served; released when its answer ends or the platform hangs up.
struct Busy(Arc<AtomicUsize>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Node {
    /// The caller sent this node's app credentials (the token compared in constant time, as
    /// the platform compares it).
    fn is_platform<T>(&self, req: &Request<T>) -> bool {
        let header = |name: &str| req.metadata().get(name).and_then(|v| v.to_str().ok());
        let token = header("svc-token").unwrap_or_default();
        header("svc-app-id") == Some(self.config.app_id.as_str())
            && constant_time_eq(token.as_bytes(), self.config.app_token.as_bytes())
    }

    /// A slot for one more call, unless the node is serving its maximum already.
    fn take_slot(&self) -> Option<Busy> {
        let max = self.config.max_concurrent;
        self.active
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < max).then_some(n + 1))
            .ok()?;
        Some(Busy(self.active.clone()))
    }

    /// Always the node's own upstream and key; the platform only names the model.
    fn endpoint(&self, target: &shared::apps::node_proto::ModelTarget) -> Endpoint {
        Endpoint {
            base_url: self.config.upstream_url.clone(),
            api_key: self.config.upstream_api_key.clone(),
            model: self
                .config
                .upstream_model
                .clone()
                .unwrap_or_else(|| target.model.clone()),
            options: serde_json::from_str(&target.options_json).unwrap_or(Value::Null),
            // The node's operator set this upstream.
            reach: shared::outbound::Reach::Operator,
        }
    }
}

type DeltaStream = Pin<Box<dyn Stream<Item = Result<ChatDelta, Status>> + Send>>;

#[tonic::async_trait]
impl ClientNode for Node {
    type ChatStream = DeltaStream;

    async fn chat(&self, req: Request<ChatRequest>) -> Result<Response<DeltaStream>, Status> {
        if !self.is_platform(&req) {
            return Err(Status::unauthenticated(
                "svc-app-id and svc-token must be this node's app credentials",
            ));
        }
        let busy = self.take_slot().ok_or_else(|| {
            Status::resource_exhausted(format!(
                "this node serves at most {} calls at once",
                self.config.max_concurrent
            ))
        })?;
        let (target, chat) = node_wire::decode_request(req.into_inner());
        let endpoint = self.endpoint(&target);
        let (tx, rx) = mpsc::channel::<Result<ChatDelta, Status>>(32);
        let relay = relay(self.models.clone(), endpoint, chat, self.config.host_id.clone(), tx);
        // The slot is the relay's until it ends.
        tokio::spawn(async move {
            let _busy = busy;
            relay.await;
        });
        let out = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|d| (d, rx)) });
        Ok(Response::new(Box::pin(out)))
    }
}

/// Sends the platform the node's acceptance, then the model's answer as it streams, or the
/// reason it failed; stops when the platform hangs up (dropping the model's stream closes the
/// upstream call).
async fn relay(
    models: ModelClient,
    endpoint: Endpoint,
    chat: shared::models::client::ChatRequest,
    host_id: String,
    tx: mpsc::Sender<Result<ChatDelta, Status>>,
) {
    if tx.send(Ok(node_wire::accepted(&host_id))).await.is_err() {
        return;
    }
    let mut stream = match models.chat_stream(&endpoint, &chat).await {
        Ok(s) => s,
        Err(e) => {
            let _ = tx.send(Ok(node_wire::failed(&e))).await;
            return;
        }
    };
    loop {
        let event = tokio::select! {
            _ = tx.closed() => return,
            event = stream.next() => event,
        };
        let Some(event) = event else { return };
        for delta in node_wire::encode_event(event) {
            if tx.send(Ok(delta)).await.is_err() {
                return;
            }
        }
    }
}
