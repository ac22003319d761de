//! One chat call to one client node over gRPC: connect, wait for the node to accept the call,
//! then relay its deltas as model events. Also counts the calls this process has running on
//! each node, which routing adds to what the node last reported.

use std::collections::{HashMap, VecDeque};
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use tonic::metadata::MetadataValue;
use tonic::transport::Endpoint as GrpcEndpoint;

use super::node_proto::{self as pb, chat_delta::Kind, client_node_client::ClientNodeClient};
use super::node_wire::{DeltaDecoder, MAX_REQUEST_BYTES};
use super::NodeRow;
use crate::models::client::{ChatEvent, ChatStream, ModelError, MAX_STREAM_BYTES};

/// How long a node has to connect and accept a call before the next node gets it.
pub const ACCEPT_WITHIN: Duration = Duration::from_secs(5);

/// Calls this process has running, by node address.
static IN_FLIGHT: LazyLock<Mutex<HashMap<String, usize>>> = LazyLock::new(Default::default);

/// `ip:port` of a node (IPv6 addresses bracketed).
pub fn address(node: &NodeRow) -> String {
    match node.host_ip.contains(':') && !node.host_ip.starts_with('[') {
        true => format!("[{}]:{}", node.host_ip, node.grpc_port),
        false => format!("{}:{}", node.host_ip, node.grpc_port),
    }
}

/// Calls this process has running on the node.
pub fn in_flight(node: &NodeRow) -> usize {
    let map = IN_FLIGHT.lock().unwrap_or_else(|p| p.into_inner());
    map.get(&address(node)).copied().unwrap_or(0)
}

/// One running call; counted from the first attempt until its stream is dropped.
struct Slot(String);

impl Slot {
    fn take(addr: String) -> Self {
        *IN_FLIGHT
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(addr.clone())
            .or_default() += 1;
        Self(addr)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut map = IN_FLIGHT.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = map.get_mut(&self.0) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                map.remove(&self.0);
            }
        }
    }
}

/// The app credentials a node checks on every call.
pub struct Credentials<'a> {
    pub app_id: &'a str,
    pub token: &'a str,
}

/// Why a node did not take a call.
#[derive(Debug)]
pub struct NotTaken {
    pub why: String,
    /// It refused the request as larger than it takes (gRPC's OUT_OF_RANGE).
    pub too_large: bool,
}

impl From<String> for NotTaken {
    fn from(why: String) -> Self {
        Self { why, too_large: false }
    }
}

/// Starts the call on `node`; an error (the node cannot be reached, refused, or did not accept
/// within [`ACCEPT_WITHIN`]) means nothing was generated and another node may be tried.
pub async fn open(
    node: &NodeRow,
    creds: &Credentials<'_>,
    request: pb::ChatRequest,
    idle: Duration,
) -> Result<ChatStream, NotTaken> {
    let addr = address(node);
    let slot = Slot::take(addr.clone());
    let accepted = tokio::time::timeout(ACCEPT_WITHIN, accept(&addr, creds, request))
        .await
        .map_err(|_| NotTaken::from(format!("did not accept the call within {ACCEPT_WITHIN:?}")))??;
    let relay = Relay {
        inner: accepted,
        decoder: DeltaDecoder::default(),
        pending: VecDeque::new(),
        host: node.host_id.clone(),
        idle,
        received: 0,
        done: false,
        _slot: slot,
    };
    Ok(Box::pin(futures::stream::unfold(relay, |mut r| async move {
        let item = r.next_event().await?;
        Some((item, r))
    })))
}

async fn accept(
    addr: &str,
    creds: &Credentials<'_>,
    request: pb::ChatRequest,
) -> Result<tonic::Streaming<pb::ChatDelta>, NotTaken> {
    let channel = GrpcEndpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| format!("bad address {addr}: {e}"))?
        .connect_timeout(ACCEPT_WITHIN)
        .tcp_nodelay(true)
        .connect()
        .await
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
    let mut call = tonic::Request::new(request);
    let header = |v: &str| MetadataValue::try_from(v).map_err(|_| "the app credentials are not ASCII".to_owned());
    call.metadata_mut().insert("svc-app-id", header(creds.app_id)?);
    call.metadata_mut().insert("svc-token", header(creds.token)?);
    if let Some(value) = crate::telemetry::traceparent().and_then(|v| MetadataValue::try_from(v).ok()) {
        call.metadata_mut().insert(crate::telemetry::TRACEPARENT, value);
    }
    let mut stream = ClientNodeClient::new(channel)
        .max_encoding_message_size(MAX_REQUEST_BYTES)
        .chat(call)
        .await
        .map_err(|s| NotTaken {
            why: format!("refused the call: {:?} {}", s.code(), s.message()),
            too_large: refused_as_too_large(&s),
        })?
        .into_inner();
    match stream.message().await {
        Ok(Some(pb::ChatDelta {
            kind: Some(Kind::Accepted(_)),
        })) => Ok(stream),
        Ok(Some(_)) => Err("answered without accepting the call first".to_owned().into()),
        Ok(None) => Err("closed the call without accepting it".to_owned().into()),
        Err(s) => Err(format!("failed before accepting: {:?} {}", s.code(), s.message()).into()),
    }
}

/// Whether a node refused the request for its size. tonic answers OUT_OF_RANGE; grpc-go,
/// grpc-java and the C core (Python, Node) answer RESOURCE_EXHAUSTED, which also means a busy
/// node, so only with their words for a message past the limit.
fn refused_as_too_large(s: &tonic::Status) -> bool {
    match s.code() {
        tonic::Code::OutOfRange => true,
        tonic::Code::ResourceExhausted => {
            let said = s.message().to_ascii_lowercase();
            said.contains("larger than max") || said.contains("exceeds maximum size")
        }
        _ => false,
    }
}

struct Relay {
    inner: tonic::Streaming<pb::ChatDelta>,
    decoder: DeltaDecoder,
    pending: VecDeque<Result<ChatEvent, ModelError>>,
    host: String,
    idle: Duration,
    /// Bytes of the deltas read so far, bounded as a model endpoint's stream is
    /// (`MAX_STREAM_BYTES`): a node streaming tool-call fragments without end grew them in
    /// memory until the process was killed.
    received: usize,
    /// Nothing more will be read from the node.
    done: bool,
    _slot: Slot,
}

impl Relay {
    async fn next_event(&mut self) -> Option<Result<ChatEvent, ModelError>> {
        loop {
            if let Some(ev) = self.pending.pop_front() {
                return Some(ev);
            }
            if self.done {
                return None;
            }
            match tokio::time::timeout(self.idle, self.inner.message()).await {
                Err(_) => self.fail(ModelError::Timeout(format!(
                    "client node {} sent nothing for {:?}",
                    self.host, self.idle
                ))),
                Ok(Err(status)) => self.fail(ModelError::Network(format!(
                    "client node {} broke off the answer: {}",
                    self.host,
                    status.message()
                ))),
                Ok(Ok(None)) if self.decoder.finished() => self.done = true,
                Ok(Ok(None)) => self.fail(ModelError::Protocol(format!(
                    "client node {} ended the answer before the model finished",
                    self.host
                ))),
                Ok(Ok(Some(delta))) => {
                    self.received += prost::Message::encoded_len(&delta);
                    if self.received > MAX_STREAM_BYTES {
                        self.fail(ModelError::Protocol(format!(
                            "client node {} sent more than {} MiB and was cut off there",
                            self.host,
                            MAX_STREAM_BYTES >> 20
                        )));
                        continue;
                    }
                    for ev in self.decoder.decode(delta) {
                        // A node's error is the last thing it says.
                        self.done |= ev.is_err();
                        self.pending.push_back(ev);
                    }
                }
            }
        }
    }

    fn fail(&mut self, err: ModelError) {
        self.pending.extend(self.decoder.failed(err));
        self.done = true;
    }
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;

    use futures::{Stream, StreamExt};
    use tonic::{Request, Response, Status};

    use super::*;
    use crate::apps::node_proto::client_node_server::{ClientNode, ClientNodeServer};

    /// A node that accepts the call, then streams reasoning well past the stream limit before
    /// it finishes (a tool call's arguments stop at their own limit first).
    struct Flood;

    const FRAGMENT: usize = 64 * 1024;

    #[tonic::async_trait]
    impl ClientNode for Flood {
        type ChatStream = Pin<Box<dyn Stream<Item = Result<pb::ChatDelta, Status>> + Send>>;

        async fn chat(&self, _: Request<pb::ChatRequest>) -> Result<Response<Self::ChatStream>, Status> {
            let accepted = pb::ChatDelta {
                kind: Some(Kind::Accepted(pb::Accepted {
                    host_id: "flood".into(),
                })),
            };
            let fragment = || pb::ChatDelta {
                kind: Some(Kind::Reasoning("x".repeat(FRAGMENT))),
            };
            let finish = pb::ChatDelta {
                kind: Some(Kind::Finish("stop".into())),
            };
            let fragments = futures::stream::repeat_with(fragment).take(MAX_STREAM_BYTES / FRAGMENT + 64);
            let deltas = futures::stream::once(async move { accepted })
                .chain(fragments)
                .chain(futures::stream::once(async move { finish }));
            Ok(Response::new(Box::pin(deltas.map(Ok))))
        }
    }

    /// A node serving `Flood` with gRPC's default limits, and the platform's credentials.
    async fn flood_node() -> (NodeRow, Credentials<'static>, tokio::task::JoinHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("address").port();
        let serving = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(ClientNodeServer::new(Flood))
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
                .await;
        });
        let node = NodeRow {
            id: 1,
            app_id: "app".into(),
            app_name: "app".into(),
            host_id: "flood".into(),
            host_ip: "127.0.0.1".into(),
            grpc_port: i32::from(port),
            max_concurrent: 1,
            active_chats: 0,
            labels: serde_json::Value::Null,
            expire_dt: chrono::Utc::now(),
        };
        let creds = Credentials {
            app_id: "app",
            token: "token",
        };
        (node, creds, serving)
    }

    #[test]
    fn every_stacks_refusal_of_a_large_message_is_told_apart_from_a_busy_node() {
        use tonic::{Code, Status};
        for (code, said, too_large) in [
            (Code::OutOfRange, "Error, decoded message length too large", true),
            (
                Code::ResourceExhausted,
                "grpc: received message larger than max (5242880 vs. 4194304)",
                true,
            ),
            (
                Code::ResourceExhausted,
                "gRPC message exceeds maximum size 4194304: 5242880",
                true,
            ),
            (
                Code::ResourceExhausted,
                "Received message larger than max (5242880 vs. 4194304)",
                true,
            ),
            (Code::ResourceExhausted, "node at maxConcurrent", false),
            (Code::Unavailable, "message larger than max", false),
        ] {
            assert_eq!(refused_as_too_large(&Status::new(code, said)), too_large, "{said}");
        }
    }

    /// A node left at gRPC's usual 4 MiB refuses a larger request (an image inline): told as
    /// too large, not as a node that did not answer.
    #[tokio::test]
    async fn a_request_past_a_nodes_limit_is_told_as_too_large() {
        let (node, creds, serving) = flood_node().await;
        let large = pb::ChatRequest {
            conversation_id: "x".repeat(5 << 20),
            ..Default::default()
        };
        let refused = open(&node, &creds, large, Duration::from_secs(30)).await;
        serving.abort();
        let not = refused.err().expect("refused");
        assert!(not.too_large, "{}", not.why);
    }

    #[tokio::test]
    async fn a_node_streaming_past_the_limit_is_cut_off_there() {
        let (node, creds, serving) = flood_node().await;
        let stream = open(&node, &creds, pb::ChatRequest::default(), Duration::from_secs(30))
            .await
            .expect("the node accepts the call");
        let events: Vec<_> = stream.collect().await;
        serving.abort();

        // Reasoning up to the limit, then the cut, and nothing after it.
        let oks = events.iter().filter(|e| e.is_ok()).count();
        assert_eq!(oks, events.len() - 1, "only the last event is an error");
        assert!(oks <= MAX_STREAM_BYTES / FRAGMENT, "{oks} pieces");
        match events.last().expect("events") {
            Err(ModelError::Protocol(message)) => assert!(message.contains("more than 32 MiB"), "{message}"),
            other => panic!("expected the cut, got {other:?}"),
        }
        assert_eq!(in_flight(&node), 0, "the call's slot is released with its stream");
    }
}
