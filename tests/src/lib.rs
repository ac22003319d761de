//! Test harness: each test gets the real application on a random port, backed by a fresh
//! Postgres database and either the filesystem store or S3 on LocalStack.

pub mod apps;
pub mod beir;
pub mod bench_server;
pub mod browser;
pub mod chat;
pub mod corpus;
pub mod lambda_emulator;
pub mod mcp_servers;
pub mod model_server;
pub mod opensearch_server;
pub mod percentile;
pub mod phoenix;
pub mod snapshot;

use std::collections::HashMap;

use base64::Engine as _;
use serde_json::Value;
use shared::config::Config;
use shared::AppState;
use sqlx::PgPool;

pub const ADMIN_USERNAME: &str = "admin";
pub const ADMIN_PASSWORD: &str = "admin-password-1";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Store {
    Filesystem,
    S3,
}

pub struct TestApp {
    /// `http://127.0.0.1:PORT`
    pub origin: String,
    /// `http://127.0.0.1:PORT/api`
    pub base: String,
    pub client: reqwest::Client,
    pub db: PgPool,
    pub state: AppState,
    pub storage_dir: tempfile::TempDir,
}

fn env(key: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| panic!("{key} must be set: run the tests with `make test`"))
}

/// The first bytes of a PNG file: enough for the service to sniff `image/png`.
pub const PNG: &[u8] = &[
    0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 13, b'I', b'H', b'D', b'R', 1, 2, 3, 4,
];

/// A free loopback port for a server a test starts.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// A loopback port that refuses every connection for the rest of the run: bound, never
/// listening. A port `free_port` found free may be taken by another test's server before it
/// is used, and that server then answered what was meant to find nobody.
pub fn refused_port() -> u16 {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.bind(([127, 0, 0, 1], 0).into()).expect("bind");
    let port = socket.local_addr().expect("address").port();
    // Kept bound until the process ends: closed, the port could be handed out again.
    std::mem::forget(socket);
    port
}

/// A loopback address that takes connections and never answers: an endpoint that hangs
/// before its headers.
pub async fn silent_listener() -> std::net::SocketAddr {
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = silent.local_addr().expect("address");
    tokio::spawn(async move {
        let mut held = vec![];
        while let Ok((s, _)) = silent.accept().await {
            held.push(s);
        }
    });
    addr
}

/// A fresh database on the test Postgres server, named uniquely.
pub async fn fresh_database() -> String {
    database_created_with("").await
}

/// `url` (a database of the test server) reached on the server's Unix socket instead of TCP:
/// how the service run on the stack's machine connects (`DATABASE_SOCKET_URL`).
pub fn on_unix_socket(url: &str) -> String {
    let socket = env("DATABASE_SOCKET_URL");
    let (base, _) = socket
        .rsplit_once('/')
        .expect("DATABASE_SOCKET_URL has a database name");
    let (_, name) = url.rsplit_once('/').expect("a database URL has a database name");
    format!("{base}/{name}")
}

/// Another PostgreSQL, as an administrator registers it for a store instance: a new database
/// on the test server, its store-instance config and a pool to look into it.
pub async fn other_postgres() -> (Value, PgPool) {
    let url = fresh_database().await;
    let u = reqwest::Url::parse(&url).expect("database URL");
    let config = serde_json::json!({
        "host": u.host_str().expect("host"), "port": u.port().unwrap_or(5432),
        "database": u.path().trim_start_matches('/'), "username": u.username(),
        "password": u.password().unwrap_or_default(),
    });
    (
        config,
        PgPool::connect(&url).await.expect("connect to the other database"),
    )
}

/// A fresh database whose `lower` folds by Unicode's rules (`lower('İ')` is `i`), as a
/// database created with a UTF-8 locale does; the test server's own C locale folds ASCII only.
pub async fn fresh_unicode_database() -> String {
    database_created_with("TEMPLATE template0 LOCALE_PROVIDER builtin BUILTIN_LOCALE 'C.UTF-8'").await
}

async fn database_created_with(options: &str) -> String {
    let admin_url = env("DATABASE_URL");
    let name = format!("test_{}", uuid::Uuid::new_v4().simple());
    let admin = PgPool::connect(&admin_url).await.expect("connect to the test Postgres");
    sqlx::query(&format!("CREATE DATABASE {name} {options}"))
        .execute(&admin)
        .await
        .expect("create test database");
    admin.close().await;
    let (base, _) = admin_url.rsplit_once('/').expect("DATABASE_URL has a database name");
    format!("{base}/{name}")
}

/// The networks regular users' endpoints may not reach in tests: the production list
/// (`shared::outbound::DEFAULT_USER_DENY`) but loopback, where the tests' scripted model
/// servers and MCP servers stand in for endpoints on the internet that users register.
/// `ssrf.rs` tests the production list itself.
pub const TEST_USER_DENY: &str = "10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,100.64.0.0/10,198.18.0.0/15,\
224.0.0.0/4,240.0.0.0/4,::/128,fc00::/7,ff00::/8";

pub async fn spawn(store: Store) -> TestApp {
    spawn_with(store, &[]).await
}

/// Spawns the app with extra configuration variables.
pub async fn spawn_with(store: Store, extra: &[(&str, &str)]) -> TestApp {
    shared::telemetry::install_crypto_provider();
    if std::env::var("TEST_LOG").is_ok() {
        shared::telemetry::init();
    }
    let storage_dir = tempfile::tempdir().expect("temp dir");
    let key = base64::engine::general_purpose::STANDARD.encode(rand_bytes());
    let mut vars: HashMap<String, String> = HashMap::from([
        ("DATABASE_URL".into(), fresh_database().await),
        ("DB_MAX_CONNECTIONS".into(), "5".into()),
        ("JWT_SECRET".into(), hex::encode(rand_bytes())),
        ("ENCRYPTION_KEY".into(), key),
        ("ADMIN_USERNAME".into(), ADMIN_USERNAME.into()),
        ("ADMIN_PASSWORD".into(), ADMIN_PASSWORD.into()),
        ("STORAGE_DIR".into(), storage_dir.path().display().to_string()),
        (
            "STORAGE_BACKEND".into(),
            if store == Store::S3 { "s3" } else { "fs" }.into(),
        ),
        ("OUTBOUND_USER_DENY_CIDRS".into(), TEST_USER_DENY.into()),
    ]);
    // Counted on every request like in production, but never reached by a test that does not
    // set its own limits: some tests and benchmarks send thousands of requests a minute.
    for key in ["RATE_LIMIT_USER_REQUESTS", "RATE_LIMIT_APP_REQUESTS"] {
        vars.insert(key.into(), "1000000".into());
    }
    if store == Store::S3 {
        vars.insert("S3_BUCKET".into(), env("S3_BUCKET"));
    }
    for (k, v) in extra {
        vars.insert((*k).into(), (*v).into());
    }
    let config = Config::from_lookup(|k| vars.get(k).cloned()).expect("test config");
    let state = AppState::build(config).await.expect("app state");
    shared::users::service::ensure_first_admin(state.db(), Some(ADMIN_USERNAME), Some(ADMIN_PASSWORD))
        .await
        .expect("first admin");

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let app = local_server::build_app(state.clone());
    local_server::start_workers(&state);
    tokio::spawn(async move {
        let _ = local_server::serve(listener, app, std::future::pending()).await;
    });
    let origin = format!("http://{addr}");
    TestApp {
        base: format!("{origin}/api"),
        origin,
        // A hung request fails its test with a clear error instead of running into CI's limit;
        // the bound is per read, so long streams that keep sending are not cut.
        client: reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(10))
            .read_timeout(std::time::Duration::from_secs(120))
            .build()
            .expect("test HTTP client"),
        db: state.db().clone(),
        state,
        storage_dir,
    }
}

/// Spawns the app with stdio MCP servers turned on for the commands tests use, plus `extra`
/// (stdio is off unless configured).
pub async fn spawn_with_stdio(store: Store, extra: &[(&str, &str)]) -> TestApp {
    let commands = mcp_servers::stdio_commands();
    spawn_with(store, &mcp_servers::with_stdio(&commands, extra)).await
}

/// Serves the app of `state` on a free port; returns its base URL.
async fn serve(state: AppState) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let app = local_server::build_app(state);
    tokio::spawn(async move {
        let _ = local_server::serve(listener, app, std::future::pending()).await;
    });
    format!("http://{addr}/api")
}

fn rand_bytes() -> [u8; 32] {
    let mut b = [0u8; 32];
    for (i, x) in uuid::Uuid::new_v4()
        .as_bytes()
        .iter()
        .chain(uuid::Uuid::new_v4().as_bytes())
        .enumerate()
    {
        b[i] = *x;
    }
    b
}

/// A response read whole: status, headers and the JSON body (Null when not JSON).
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
    pub bytes: bytes::Bytes,
}

impl Reply {
    pub async fn read(resp: reqwest::Response) -> Self {
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let bytes = resp.bytes().await.expect("body");
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Self {
            status,
            headers,
            body,
            bytes,
        }
    }

    /// The envelope's `code`.
    pub fn code(&self) -> i64 {
        self.body["code"].as_i64().unwrap_or(i64::MIN)
    }

    pub fn msg(&self) -> &str {
        self.body["msg"].as_str().unwrap_or_default()
    }

    pub fn data(&self) -> &Value {
        &self.body["data"]
    }

    /// Asserts a failure envelope: HTTP status, code, `data: null`, and a message containing `needle`.
    #[track_caller]
    pub fn assert_error(&self, status: u16, code: i64, needle: &str) {
        assert_eq!(self.status, status, "status of {:?}", self.body);
        assert_eq!(self.code(), code, "code of {:?}", self.body);
        assert!(self.data().is_null(), "failures carry data: null: {:?}", self.body);
        assert!(
            self.msg().contains(needle),
            "message {:?} should mention {needle:?}",
            self.msg()
        );
    }

    #[track_caller]
    pub fn assert_ok(&self) -> &Value {
        assert_eq!(
            (self.status, self.code()),
            (200, 1),
            "expected success, got {:?}",
            self.body
        );
        self.data()
    }
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub async fn send(&self, req: reqwest::RequestBuilder) -> Reply {
        Reply::read(req.send().await.expect("request")).await
    }

    pub async fn get(&self, path: &str, token: Option<&str>) -> Reply {
        self.send(with_token(self.client.get(self.url(path)), token)).await
    }

    pub async fn delete(&self, path: &str, token: Option<&str>) -> Reply {
        self.send(with_token(self.client.delete(self.url(path)), token)).await
    }

    pub async fn post(&self, path: &str, token: Option<&str>, body: &Value) -> Reply {
        self.send(with_token(self.client.post(self.url(path)).json(body), token))
            .await
    }

    pub async fn put(&self, path: &str, token: Option<&str>, body: &Value) -> Reply {
        self.send(with_token(self.client.put(self.url(path)).json(body), token))
            .await
    }

    /// Logs in and returns the whole login result.
    pub async fn login(&self, username: &str, password: &str) -> Reply {
        self.post(
            "/user/login",
            None,
            &serde_json::json!({ "username": username, "password": password }),
        )
        .await
    }

    pub async fn admin_token(&self) -> String {
        let reply = self.login(ADMIN_USERNAME, ADMIN_PASSWORD).await;
        reply.assert_ok()["token"].as_str().expect("token").to_owned()
    }

    /// Creates a regular user and returns (id, access token).
    pub async fn regular_user(&self, username: &str) -> (i64, String) {
        let admin = self.admin_token().await;
        let password = "user-password-1";
        let body = serde_json::json!({ "username": username, "password": password, "role": 2, "email": format!("{username}@example.com") });
        self.post("/user", Some(&admin), &body).await.assert_ok();
        let login = self.login(username, password).await;
        let token = login.assert_ok()["token"].as_str().expect("token").to_owned();
        let me = self.get("/user", Some(&token)).await;
        (me.assert_ok()["id"].as_i64().expect("id"), token)
    }

    /// `POST /resource/upload` of one file, with an optional (bizType, bizId).
    pub async fn upload_resource(&self, token: &str, name: &str, bytes: Vec<u8>, biz: Option<(&str, &str)>) -> Reply {
        let mut form = reqwest::multipart::Form::new().part(
            "file",
            reqwest::multipart::Part::bytes(bytes).file_name(name.to_owned()),
        );
        if let Some((t, id)) = biz {
            form = form.text("bizType", t.to_owned()).text("bizId", id.to_owned());
        }
        self.send(
            self.client
                .post(self.url("/resource/upload"))
                .header("Svc-Auth", token)
                .multipart(form),
        )
        .await
    }

    /// Another instance of the service on its own port, with its own connection pool, over the
    /// same database and storage (as two Lambda instances of one function); returns its base URL.
    pub async fn second_instance(&self) -> String {
        self.instance_with(|_| {}).await
    }

    /// Another instance over the same database and storage whose configuration `change`
    /// altered (an operator changed a setting and redeployed); returns its base URL.
    pub async fn instance_with(&self, change: impl FnOnce(&mut Config)) -> String {
        let mut config = self.state.config().clone();
        change(&mut config);
        let state = AppState::build(config).await.expect("instance state");
        serve(state).await
    }

    /// Another instance over the same database whose object store is `storage` (one that is
    /// unreachable, say); returns its base URL.
    pub async fn instance_with_storage(&self, storage: std::sync::Arc<dyn shared::storage::ObjectStore>) -> String {
        let queue = std::sync::Arc::new(shared::queue::InProcessQueue::default());
        serve(AppState::from_parts(
            self.state.config().clone(),
            self.db.clone(),
            storage,
            queue,
        ))
        .await
    }

    /// A new active store instance of `category` and type `kind` (codes as the API takes them)
    /// at `config`; its id.
    pub async fn store_instance(&self, token: &str, category: i64, kind: i64, config: &Value) -> i64 {
        let body = serde_json::json!({ "name": format!("store {kind} of category {category}"),
            "category": category, "type": kind, "config": config, "status": 1 });
        self.post("/store-instance", Some(token), &body)
            .await
            .assert_ok()
            .as_i64()
            .expect("store id")
    }

    /// The id of the built-in store instance (the service's own PostgreSQL) of `category`
    /// (1 vector store, 2 search engine).
    pub async fn builtin_store(&self, token: &str, category: i64) -> i64 {
        let list = self
            .get(&format!("/store-instance?category={category}"), Some(token))
            .await;
        let list = list.assert_ok().as_array().expect("instances").clone();
        list.into_iter()
            .find(|v| v["builtin"] == true)
            .and_then(|v| v["id"].as_i64())
            .expect("a built-in instance")
    }

    pub async fn count(&self, table: &str) -> i64 {
        sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
            .fetch_one(&self.db)
            .await
            .expect("count")
    }
}

/// Returns once `check` holds, looking every 20 ms; fails the test when it does not within
/// `limit`.
pub async fn wait_for(limit: std::time::Duration, mut check: impl AsyncFnMut() -> bool) {
    let start = std::time::Instant::now();
    while !check().await {
        assert!(start.elapsed() < limit, "condition not reached within {limit:?}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Returns once some statement on the test's database waits for a lock (a request blocked
/// behind a transaction the test holds open); fails the test when none does within a minute.
/// A fixed sleep instead let a slow machine commit before the request had read anything.
pub async fn until_a_statement_waits_for_a_lock(db: &sqlx::PgPool) {
    until_statements_wait_for_locks(db, 1).await;
}

/// `until_a_statement_waits_for_a_lock`, for `count` statements (two requests racing each
/// other behind the test's lock).
pub async fn until_statements_wait_for_locks(db: &sqlx::PgPool, count: i64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(db)
        .await
        .expect("pg_stat_activity");
        if waiting >= count {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("fewer than {count} statement(s) waited for a lock within a minute");
}

/// Runs `request` while the row `id` of `table` is being deleted: the delete is held open until
/// the request waits for it, then committed. Returns the request's answer.
pub async fn while_deleted<F: std::future::Future>(
    db: &sqlx::PgPool,
    table: &'static str,
    id: i64,
    request: F,
) -> F::Output {
    let mut deleting = db.begin().await.expect("begin");
    sqlx::query(&format!("DELETE FROM {table} WHERE id = $1"))
        .bind(id)
        .execute(&mut *deleting)
        .await
        .expect("delete the row");
    let commit = async {
        until_a_statement_waits_for_a_lock(db).await;
        deleting.commit().await.expect("commit");
    };
    tokio::join!(request, commit).0
}

pub fn with_token(req: reqwest::RequestBuilder, token: Option<&str>) -> reqwest::RequestBuilder {
    match token {
        Some(t) => req.header("Svc-Auth", t),
        None => req,
    }
}

/// An S3 client for LocalStack, to look at the bucket directly.
pub async fn s3_client() -> aws_sdk_s3::Client {
    let sdk = aws_config::load_from_env().await;
    let conf = aws_sdk_s3::config::Builder::from(&sdk).force_path_style(true).build();
    aws_sdk_s3::Client::from_conf(conf)
}

pub fn bucket() -> String {
    env("S3_BUCKET")
}

/// A new, empty bucket on LocalStack named `<prefix>-<uuid>`, for a test that lists what it
/// stored: the shared bucket also holds the objects of the tests running beside it.
pub async fn own_bucket(prefix: &str) -> String {
    let name = format!("{prefix}-{}", uuid::Uuid::new_v4().simple());
    s3_client()
        .await
        .create_bucket()
        .bucket(&name)
        .send()
        .await
        .expect("create bucket");
    name
}

/// The keys of every object in `bucket`.
pub async fn bucket_keys(bucket: &str) -> Vec<String> {
    let listed = s3_client()
        .await
        .list_objects_v2()
        .bucket(bucket)
        .send()
        .await
        .expect("list bucket");
    listed
        .contents()
        .iter()
        .filter_map(|o| o.key().map(str::to_owned))
        .collect()
}

impl Reply {
    /// Asserts a success in the `{status, message, data}` envelope.
    #[track_caller]
    pub fn assert_status_ok(&self) -> &Value {
        assert_eq!(
            (self.status, self.body["status"].as_i64()),
            (200, Some(1)),
            "expected success, got {:?}",
            self.body
        );
        &self.body["data"]
    }

    /// Asserts a failure in the `{status, message, data}` envelope.
    #[track_caller]
    pub fn assert_status_error(&self, http: u16, status: i64, needle: &str) {
        assert_eq!(self.status, http, "HTTP status of {:?}", self.body);
        assert_eq!(self.body["status"].as_i64(), Some(status), "status of {:?}", self.body);
        assert!(
            self.body["data"].is_null(),
            "failures carry data: null: {:?}",
            self.body
        );
        assert!(
            self.body.get("code").is_none(),
            "no admin envelope fields: {:?}",
            self.body
        );
        let message = self.body["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(needle),
            "message {message:?} should mention {needle:?}"
        );
    }
}

impl TestApp {
    /// `POST /document/upload/preview` with `files` (name, bytes) as `token`.
    pub async fn preview_documents(
        &self,
        token: &str,
        rag_id: i64,
        files: &[(&str, Vec<u8>)],
        dedup: Option<(i64, i64)>,
    ) -> Reply {
        let mut form = reqwest::multipart::Form::new().text("ragId", rag_id.to_string());
        for (name, bytes) in files {
            form = form.part(
                "files",
                reqwest::multipart::Part::bytes(bytes.clone()).file_name((*name).to_owned()),
            );
        }
        if let Some((s, a)) = dedup {
            form = form
                .text("dedupStrategy", s.to_string())
                .text("dedupAction", a.to_string());
        }
        let req = self
            .client
            .post(self.url("/document/upload/preview"))
            .header("Svc-Auth", token)
            .multipart(form);
        self.send(req).await
    }

    /// Previews and commits every file with its previewed decision (rejected ones skipped);
    /// returns the commit reply.
    pub async fn upload_documents(&self, token: &str, rag_id: i64, files: &[(&str, Vec<u8>)]) -> Reply {
        let preview = self.preview_documents(token, rag_id, files, None).await;
        let data = preview.assert_ok().clone();
        let items: Vec<Value> = data["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|i| {
                let decision = if i["decision"] == "REJECT" {
                    Value::from("SKIP")
                } else {
                    i["decision"].clone()
                };
                serde_json::json!({ "tempResourceId": i["tempResourceId"], "decision": decision })
            })
            .collect();
        let body = serde_json::json!({ "previewToken": data["previewToken"], "items": items });
        self.post("/document/upload/commit", Some(token), &body).await
    }

    /// Creates a provider (as `token`, an administrator) and returns its id.
    pub async fn provider(&self, token: &str, key: &str) -> i64 {
        let body = serde_json::json!({ "providerName": format!("Provider {key}"), "providerKey": key });
        self.post("/ai-model/provider", Some(token), &body)
            .await
            .assert_status_ok()
            .as_i64()
            .expect("provider id")
    }

    /// Creates a model config and returns its id; `extra` fields are merged into the body.
    /// An EMBEDDING config (as `token`, an administrator) at an address nobody answers at, under
    /// a provider of its own, with `configJson` `config`.
    /// The tokens `user_id` has left.
    pub async fn tokens_of(&self, user_id: i64) -> i64 {
        sqlx::query_scalar("SELECT tokens FROM users WHERE id = $1")
            .bind(user_id)
            .fetch_one(&self.db)
            .await
            .expect("tokens")
    }

    /// Gives `user_id` `tokens` to spend.
    pub async fn set_tokens(&self, user_id: i64, tokens: i64) {
        sqlx::query("UPDATE users SET tokens = $2 WHERE id = $1")
            .bind(user_id)
            .bind(tokens)
            .execute(&self.db)
            .await
            .expect("set tokens");
    }

    /// A model config whose endpoint takes connections and never answers.
    pub async fn silent_model(&self, token: &str, model_type: &str, model_key: &str, extra: Value) -> i64 {
        let provider = self.provider(token, "silent").await;
        let endpoint = format!("http://{}/v1", silent_listener().await);
        self.model(token, provider, model_type, model_key, &endpoint, extra)
            .await
    }

    pub async fn unreachable_embedding_model(&self, token: &str, config: Value) -> i64 {
        let provider = self.provider(token, "unreachable").await;
        let extra = serde_json::json!({ "configJson": config });
        self.model(token, provider, "EMBEDDING", "emb-8", "http://127.0.0.1:9/v1", extra)
            .await
    }

    pub async fn model(
        &self,
        token: &str,
        provider_id: i64,
        model_type: &str,
        model_key: &str,
        endpoint: &str,
        extra: Value,
    ) -> i64 {
        let mut body = serde_json::json!({
            "providerId": provider_id, "modelName": format!("{model_key} model"), "modelKey": model_key,
            "modelType": model_type, "apiKey": model_server::GOOD_KEY, "apiEndpoint": endpoint,
        });
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                b.insert(k.clone(), v.clone());
            }
        }
        self.post("/ai-model/config", Some(token), &body)
            .await
            .assert_status_ok()
            .as_i64()
            .expect("config id")
    }

    /// Waits (as `token`) until document `doc_id` leaves the pipeline; returns it.
    pub async fn settled_document(&self, token: &str, doc_id: i64) -> Value {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let doc = self.get(&format!("/document/{doc_id}"), Some(token)).await;
            let d = doc.assert_ok().clone();
            if d["status"] == "success" || d["status"] == "failed" {
                return d;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "document {doc_id} still {} after 60 s",
                d["status"]
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    /// An EMBEDDING config (as `token`, an administrator, under `provider_id`) for the real
    /// multilingual-e5-small server at `endpoint`, with e5's query and passage input types and
    /// the entries of `config` added to its `configJson`.
    pub async fn e5_model(&self, token: &str, provider_id: i64, endpoint: &str, config: Value) -> i64 {
        let mut config_json = serde_json::json!({ "queryInputType": "query", "documentInputType": "passage" });
        if let (Some(c), Some(extra)) = (config_json.as_object_mut(), config.as_object()) {
            c.extend(extra.clone());
        }
        let extra = serde_json::json!({ "configJson": config_json });
        self.model(
            token,
            provider_id,
            "EMBEDDING",
            "multilingual-e5-small",
            endpoint,
            extra,
        )
        .await
    }
}

/// The decision of each item of an upload preview, in order.
pub fn preview_decisions(preview: &Value) -> Vec<String> {
    preview["items"]
        .as_array()
        .expect("preview items")
        .iter()
        .map(|i| i["decision"].as_str().expect("a decision").to_owned())
        .collect()
}

/// A knowledge-base test setup: the app, the scripted model server, an admin token and an
/// EMBEDDING model (8 dimensions) to build bases on.
pub struct KbSetup {
    pub app: TestApp,
    pub models: model_server::ModelServer,
    pub admin: String,
    pub embedding_model: i64,
}

impl KbSetup {
    pub async fn new(store: Store, extra: &[(&str, &str)]) -> Self {
        let app = spawn_with(store, extra).await;
        let models = model_server::ModelServer::start().await;
        let admin = app.admin_token().await;
        let provider = app.provider(&admin, "scripted").await;
        let embedding_model = app
            .model(
                &admin,
                provider,
                "EMBEDDING",
                "emb-8",
                &models.base_url,
                serde_json::json!({}),
            )
            .await;
        Self {
            app,
            models,
            admin,
            embedding_model,
        }
    }

    /// Another embedding model of the scripted server (`emb-8-slow`...), under a provider of
    /// its own; returns its id.
    pub async fn embedding_model(&self, model_key: &str) -> i64 {
        let provider = self.app.provider(&self.admin, model_key).await;
        self.app
            .model(
                &self.admin,
                provider,
                "EMBEDDING",
                model_key,
                &self.models.base_url,
                serde_json::json!({}),
            )
            .await
    }

    /// Makes `kb` embed with `emb-8-slow` from now on: the same vectors as `emb-8`, each call
    /// answered after a second.
    pub async fn embed_slowly(&self, kb: i64) {
        let slow = self.embedding_model("emb-8-slow").await;
        sqlx::query("UPDATE knowledge_bases SET embedding_model_id = $2 WHERE id = $1")
            .bind(kb)
            .bind(slow)
            .execute(&self.app.db)
            .await
            .expect("switch the base's embedding model");
    }

    /// Deletes every document of `kb` through the API.
    pub async fn delete_documents(&self, kb: i64) {
        let docs: Vec<i64> = sqlx::query_scalar("SELECT id FROM documents WHERE rag_id = $1")
            .bind(kb)
            .fetch_all(&self.app.db)
            .await
            .expect("the base's documents");
        for doc in docs {
            self.app
                .delete(&format!("/document/{doc}"), Some(&self.admin))
                .await
                .assert_ok();
        }
    }

    /// Creates a base with extra settings merged in; returns its id.
    pub async fn kb(&self, name: &str, extra: Value) -> i64 {
        let mut body = serde_json::json!({ "name": name, "embeddingModelId": self.embedding_model });
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                b.insert(k.clone(), v.clone());
            }
        }
        self.app.post("/rag", Some(&self.admin), &body).await.assert_ok()["id"]
            .as_i64()
            .expect("kb id")
    }

    /// Puts a processed document back in the queue's hands as a new run with no chunks, as if
    /// its message were waiting for a worker; returns the run id the message must carry.
    pub async fn requeue(&self, doc: i64) -> uuid::Uuid {
        let run = sqlx::query_scalar(
            "UPDATE documents SET status = 'pending', progress = 0, run_id = gen_random_uuid(), lease_until = NULL
             WHERE id = $1 RETURNING run_id",
        )
        .bind(doc)
        .fetch_one(&self.app.db)
        .await
        .expect("requeue the document");
        sqlx::query("DELETE FROM chunks WHERE document_id = $1")
            .bind(doc)
            .execute(&self.app.db)
            .await
            .expect("drop its chunks");
        run
    }

    /// Uploads files for preview: (file name, bytes).
    pub async fn preview(&self, rag_id: i64, files: &[(&str, Vec<u8>)], dedup: Option<(i64, i64)>) -> Reply {
        self.app.preview_documents(&self.admin, rag_id, files, dedup).await
    }

    /// Previews and commits every file with its previewed decision; returns the commit reply.
    pub async fn upload(&self, rag_id: i64, files: &[(&str, Vec<u8>)]) -> Reply {
        self.app.upload_documents(&self.admin, rag_id, files).await
    }

    /// Waits until the document leaves the pipeline; returns it.
    pub async fn settled(&self, doc_id: i64) -> Value {
        self.app.settled_document(&self.admin, doc_id).await
    }

    /// Rows where the base word counts and lengths (`rag_terms`) differ from a count over the
    /// chunks as they are now: 0 when the triggers kept them exact.
    pub async fn word_count_drift(&self) -> i64 {
        sqlx::query_scalar(
            "WITH actual AS (
                 SELECT c.rag_id, w.term, count(*)::int AS chunks, sum(w.tokens)::int8 AS tokens
                 FROM chunks c, LATERAL (SELECT '' AS term, tsvector_token_count(c.tsv) AS tokens
                                         UNION ALL SELECT unnest(tsvector_to_array(c.tsv)), 0) w
                 WHERE c.tsv IS NOT NULL GROUP BY 1, 2
             )
             SELECT count(*) FROM ((SELECT * FROM actual EXCEPT SELECT * FROM rag_terms)
                                   UNION ALL (SELECT * FROM rag_terms EXCEPT SELECT * FROM actual)) d",
        )
        .fetch_one(&self.app.db)
        .await
        .expect("compare word counts")
    }

    /// Chunk texts of a document in order, read from the database.
    pub async fn chunk_texts(&self, doc_id: i64) -> Vec<String> {
        sqlx::query_scalar("SELECT content FROM chunks WHERE document_id = $1 ORDER BY chunk_index")
            .bind(doc_id)
            .fetch_all(&self.app.db)
            .await
            .expect("chunks")
    }
}

/// A new SQS queue with its dead-letter queue (after 3 receives) on LocalStack, so parallel
/// tests never consume each other's messages.
pub struct TestQueue {
    pub url: String,
    pub dlq_url: String,
}

pub async fn fresh_sqs_queue(visibility_secs: u32) -> TestQueue {
    use aws_sdk_sqs::types::QueueAttributeName;
    shared::telemetry::install_crypto_provider();
    let sdk = aws_config::load_from_env().await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let name = format!("test-{}", uuid::Uuid::new_v4().simple());
    let dlq_url = sqs
        .create_queue()
        .queue_name(format!("{name}-dlq"))
        .send()
        .await
        .expect("dlq")
        .queue_url
        .unwrap_or_default();
    let arn = sqs
        .get_queue_attributes()
        .queue_url(&dlq_url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .expect("dlq arn")
        .attributes
        .and_then(|a| a.get(&QueueAttributeName::QueueArn).cloned())
        .unwrap_or_default();
    let redrive = format!(
        r#"{{"deadLetterTargetArn":"{arn}","maxReceiveCount":"{}"}}"#,
        shared::queue::MAX_RECEIVES
    );
    let url = sqs
        .create_queue()
        .queue_name(name)
        .attributes(QueueAttributeName::VisibilityTimeout, visibility_secs.to_string())
        .attributes(QueueAttributeName::RedrivePolicy, redrive)
        .send()
        .await
        .expect("queue")
        .queue_url
        .unwrap_or_default();
    TestQueue { url, dlq_url }
}
