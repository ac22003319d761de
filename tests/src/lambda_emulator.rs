//! A Lambda runtime emulator for tests and benchmarks: serves the Runtime API
//! (`/2018-06-01/runtime/invocation/next`, `.../response`, `.../error`, `init/error`) to a real
//! function binary, hands it events and collects its answers, buffered or streamed.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use futures::StreamExt;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

/// What the function answered to one invocation.
#[derive(Debug)]
pub enum Answer {
    /// A buffered response (`/response` without streaming).
    Json(Value),
    /// A streamed response: the metadata prelude and the body after the 8-byte separator.
    Streamed { prelude: Value, body: Vec<u8> },
    /// `/error`.
    Error(Value),
}

type Pending = Arc<Mutex<HashMap<String, oneshot::Sender<Answer>>>>;

/// An event handed to the function: its request id, the event, and how long the function has.
type Invocation = (String, Value, Duration);

/// The time an invocation is given unless a test says otherwise.
const INVOCATION_TIME: Duration = Duration::from_secs(300);

#[derive(Clone)]
struct Runtime {
    events: Arc<tokio::sync::Mutex<mpsc::Receiver<Invocation>>>,
    pending: Pending,
    /// When the function first asked for an event.
    first_poll: Arc<Mutex<Option<Instant>>>,
    init_error: Arc<Mutex<Option<Value>>>,
}

pub struct Emulator {
    sender: mpsc::Sender<Invocation>,
    pending: Pending,
    first_poll: Arc<Mutex<Option<Instant>>>,
    init_error: Arc<Mutex<Option<Value>>>,
    started: Instant,
    child: Mutex<Child>,
    /// The function's log output, shown when something goes wrong.
    log: tempfile::NamedTempFile,
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let child = self.child.get_mut().unwrap_or_else(|p| p.into_inner());
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// The built function binary `name`, next to the test executable's `deps` directory.
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target profile directory");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: build the function binaries first (`cargo build --bins`)",
        path.display()
    );
    path
}

async fn next(State(rt): State<Runtime>) -> Response {
    rt.first_poll
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_or_insert_with(Instant::now);
    let Some((id, event, time)) = rt.events.lock().await.recv().await else {
        return StatusCode::GONE.into_response();
    };
    let deadline = chrono::Utc::now().timestamp_millis() + i64::try_from(time.as_millis()).unwrap_or(i64::MAX);
    Response::builder()
        .header("lambda-runtime-aws-request-id", id)
        .header("lambda-runtime-deadline-ms", deadline.to_string())
        .header(
            "lambda-runtime-invoked-function-arn",
            "arn:aws:lambda:us-east-1:000000000000:function:test",
        )
        .header("content-type", "application/json")
        .body(Body::from(event.to_string()))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

fn finish(rt: &Runtime, id: &str, answer: Answer) {
    if let Some(tx) = rt.pending.lock().unwrap_or_else(|p| p.into_inner()).remove(id) {
        let _ = tx.send(answer);
    }
}

async fn response(State(rt): State<Runtime>, Path(id): Path<String>, headers: HeaderMap, body: Body) -> StatusCode {
    let streaming = headers
        .get("lambda-runtime-function-response-mode")
        .is_some_and(|v| v == "streaming");
    let mut bytes = Vec::new();
    let mut stream = body.into_data_stream();
    while let Some(Ok(chunk)) = stream.next().await {
        bytes.extend_from_slice(&chunk);
    }
    let answer = if streaming {
        let split = bytes.windows(8).position(|w| w == [0u8; 8]).unwrap_or(bytes.len());
        let prelude = serde_json::from_slice(&bytes[..split]).unwrap_or(Value::Null);
        let body = bytes.get(split + 8..).unwrap_or_default().to_vec();
        Answer::Streamed { prelude, body }
    } else {
        Answer::Json(serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    };
    finish(&rt, &id, answer);
    StatusCode::ACCEPTED
}

async fn error(State(rt): State<Runtime>, Path(id): Path<String>, body: Bytes) -> StatusCode {
    finish(
        &rt,
        &id,
        Answer::Error(serde_json::from_slice(&body).unwrap_or(Value::Null)),
    );
    StatusCode::ACCEPTED
}

async fn init_error(State(rt): State<Runtime>, body: Bytes) -> StatusCode {
    *rt.init_error.lock().unwrap_or_else(|p| p.into_inner()) =
        Some(serde_json::from_slice(&body).unwrap_or(Value::Null));
    StatusCode::ACCEPTED
}

impl Emulator {
    /// Starts the runtime API and the function binary with `env` (plus the Lambda variables).
    pub async fn start(binary: PathBuf, env: &[(String, String)]) -> Self {
        let (sender, events) = mpsc::channel(16);
        let rt = Runtime {
            events: Arc::new(tokio::sync::Mutex::new(events)),
            pending: Pending::default(),
            first_poll: Arc::default(),
            init_error: Arc::default(),
        };
        let app = Router::new()
            .route("/2018-06-01/runtime/invocation/next", get(next))
            .route("/2018-06-01/runtime/invocation/{id}/response", post(response))
            .route("/2018-06-01/runtime/invocation/{id}/error", post(error))
            .route("/2018-06-01/runtime/init/error", post(init_error))
            .with_state(rt.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind runtime API");
        let addr = listener.local_addr().expect("runtime API address");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let name = binary
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let log = tempfile::NamedTempFile::new().expect("log file");
        let stderr = log.reopen().expect("log file handle");
        let started = Instant::now();
        let child = Command::new(&binary)
            .envs(env.iter().cloned())
            .env("AWS_LAMBDA_RUNTIME_API", addr.to_string())
            .env("AWS_LAMBDA_FUNCTION_NAME", &name)
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "512")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .env("AWS_LAMBDA_LOG_STREAM_NAME", "test")
            .env("AWS_LAMBDA_LOG_GROUP_NAME", format!("/aws/lambda/{name}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(stderr))
            .spawn()
            .expect("start the function binary");
        Self {
            sender,
            pending: rt.pending,
            first_poll: rt.first_poll,
            init_error: rt.init_error,
            started,
            child: Mutex::new(child),
            log,
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }

    /// Time from process start to the function's first request for an event.
    pub async fn init_time(&self) -> Duration {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Some(at) = *self.first_poll.lock().unwrap_or_else(|p| p.into_inner()) {
                return at - self.started;
            }
            if let Some(err) = self.init_error.lock().unwrap_or_else(|p| p.into_inner()).clone() {
                panic!("the function failed to start: {err}\n{}", self.log_text());
            }
            let exited = self.child.lock().unwrap_or_else(|p| p.into_inner()).try_wait();
            if let Ok(Some(status)) = exited {
                panic!(
                    "the function exited ({status}) before asking for an event:\n{}",
                    self.log_text()
                );
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        panic!("the function never asked for an event:\n{}", self.log_text());
    }

    /// Kills the function process at once, as a Lambda timeout or crash would.
    pub fn kill(&self) {
        let mut child = self.child.lock().unwrap_or_else(|p| p.into_inner());
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Stops the function process where it is (SIGSTOP), as Lambda freezes an execution
    /// environment once an invocation has returned: whatever it had not sent yet stays unsent.
    pub fn freeze(&self) {
        let pid = self.child.lock().unwrap_or_else(|p| p.into_inner()).id();
        let stopped = Command::new("kill")
            .args(["-STOP", &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(stopped.success(), "could not stop the function process {pid}");
    }

    /// Invokes the function with `event` and waits for its answer.
    pub async fn invoke(&self, event: Value) -> Answer {
        self.invoke_for(event, INVOCATION_TIME).await
    }

    /// Invokes the function with `event`, its deadline `time` from now, and waits for its answer.
    pub async fn invoke_for(&self, event: Value, time: Duration) -> Answer {
        let id = uuid::Uuid::new_v4().to_string();
        let (tx, rx) = oneshot::channel();
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.clone(), tx);
        self.sender.send((id, event, time)).await.expect("queue the event");
        match tokio::time::timeout(Duration::from_secs(60), rx).await {
            Ok(Ok(answer)) => answer,
            _ => panic!("the function gave no answer within 60 s:\n{}", self.log_text()),
        }
    }
}

/// An SQS event as Lambda delivers a batch: one record per (message id, body).
pub fn sqs_event(messages: &[(&str, String)]) -> Value {
    let records: Vec<Value> = messages
        .iter()
        .map(|(id, body)| {
            serde_json::json!({ "messageId": id, "receiptHandle": format!("rh-{id}"), "body": body,
                "attributes": { "ApproximateReceiveCount": "1", "SentTimestamp": "0", "SenderId": "x",
                                "ApproximateFirstReceiveTimestamp": "0" },
                "messageAttributes": {}, "md5OfBody": "", "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:000000000000:ingest", "awsRegion": "us-east-1" })
        })
        .collect();
    serde_json::json!({ "Records": records })
}

/// `event` (from `sqs_event`) with every message carrying `traceparent` as its message
/// attribute, as SQS delivers what the service sent.
pub fn with_traceparent(mut event: Value, traceparent: &str) -> Value {
    for record in event["Records"].as_array_mut().into_iter().flatten() {
        record["messageAttributes"] = serde_json::json!({
            "traceparent": { "stringValue": traceparent, "dataType": "String",
                             "stringListValues": [], "binaryListValues": [] }
        });
    }
    event
}

/// The API's default endpoint the emulated events come through.
pub const API_DOMAIN: &str = "api1.execute-api.us-east-1.amazonaws.com";

/// An API Gateway REST proxy event for `method path` on stage `prod`.
pub fn rest_event(method: &str, path: &str, headers: &[(&str, &str)], body: Option<&Value>) -> Value {
    let headers: serde_json::Map<String, Value> = headers
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Value::String((*v).to_owned())))
        .collect();
    let multi: serde_json::Map<String, Value> = headers
        .iter()
        .map(|(k, v)| (k.clone(), Value::Array(vec![v.clone()])))
        .collect();
    serde_json::json!({
        "resource": "/api/{proxy+}", "path": path, "httpMethod": method,
        "headers": headers, "multiValueHeaders": multi,
        "queryStringParameters": null, "multiValueQueryStringParameters": null,
        "pathParameters": { "proxy": path.trim_start_matches("/api/") }, "stageVariables": null,
        "requestContext": { "accountId": "000000000000", "resourceId": "abc", "stage": "prod", "requestId": "req-1",
            "domainName": API_DOMAIN,
            "identity": { "sourceIp": "203.0.113.7", "userAgent": "test" }, "resourcePath": "/api/{proxy+}",
            "httpMethod": method, "apiId": "api1", "path": format!("/prod{path}"), "protocol": "HTTP/1.1" },
        "body": body.map(Value::to_string), "isBase64Encoded": false
    })
}

/// The environment a function binary needs to share `app`'s database, secrets and files, with
/// the settings the SAM template gives every function.
pub fn function_env(app: &crate::TestApp) -> Vec<(String, String)> {
    use base64::Engine as _;
    let config = app.state.config();
    vec![
        ("DATABASE_URL".into(), config.database_url.clone()),
        ("DB_MAX_CONNECTIONS".into(), "2".into()),
        (
            "JWT_SECRET".into(),
            String::from_utf8_lossy(&config.jwt_secret).into_owned(),
        ),
        (
            "ENCRYPTION_KEY".into(),
            base64::engine::general_purpose::STANDARD.encode(config.encryption_key),
        ),
        ("STORAGE_BACKEND".into(), "fs".into()),
        ("STORAGE_DIR".into(), app.storage_dir.path().display().to_string()),
        ("QUEUE_BACKEND".into(), "memory".into()),
        ("API_PREFIX".into(), "api".into()),
        ("AWS_LAMBDA_HTTP_IGNORE_STAGE_IN_PATH".into(), "true".into()),
        ("RUST_LOG".into(), "warn".into()),
    ]
}
