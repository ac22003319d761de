//! Agent chat test setup: the app, the scripted model server (also the web search), an admin
//! token and a provider to hang chat models on.

use serde_json::{json, Value};

use crate::model_server::ModelServer;
use crate::{spawn_with, Reply, Store, TestApp};

pub struct ChatSetup {
    pub app: TestApp,
    pub models: ModelServer,
    pub admin: String,
    pub provider: i64,
}

/// The lines of an NDJSON body.
pub fn ndjson(body: &str) -> Vec<Value> {
    body.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|_| panic!("not an NDJSON line: {l}")))
        .collect()
}

/// The concatenated `content` of the events of one type.
pub fn joined(events: &[Value], kind: &str) -> String {
    events
        .iter()
        .filter(|e| e["type"] == kind)
        .filter_map(|e| e["content"].as_str())
        .collect()
}

pub fn kinds(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// A streamed reply: the envelope when refused, the NDJSON lines otherwise.
pub enum ChatReply {
    Refused(Reply),
    Events(Vec<Value>),
}

impl ChatReply {
    pub fn events(self) -> Vec<Value> {
        match self {
            Self::Events(e) => e,
            Self::Refused(r) => panic!("chat refused: {} {}", r.status, r.body),
        }
    }

    pub fn refused(self) -> Reply {
        match self {
            Self::Refused(r) => r,
            Self::Events(e) => panic!("chat streamed instead of refusing: {e:?}"),
        }
    }
}

impl ChatSetup {
    pub async fn new() -> Self {
        Self::with(Store::Filesystem, &[]).await
    }

    pub async fn with(store: Store, extra: &[(&str, &str)]) -> Self {
        let models = ModelServer::start().await;
        let search = models.origin.clone();
        let mut vars: Vec<(&str, &str)> = vec![("WEB_SEARCH_URL", search.as_str())];
        vars.extend_from_slice(extra);
        let app = spawn_with(store, &vars).await;
        let admin = app.admin_token().await;
        let provider = app.provider(&admin, "scripted").await;
        Self {
            app,
            models,
            admin,
            provider,
        }
    }

    /// A CHAT model config for a scripted model; `extra` merged into the body.
    pub async fn chat_model(&self, key: &str, extra: Value) -> i64 {
        self.app
            .model(&self.admin, self.provider, "CHAT", key, &self.models.base_url, extra)
            .await
    }

    /// An EMBEDDING model config for a scripted model.
    pub async fn embedding_model(&self, key: &str) -> i64 {
        self.app
            .model(
                &self.admin,
                self.provider,
                "EMBEDDING",
                key,
                &self.models.base_url,
                json!({}),
            )
            .await
    }

    /// A user's tokens left and the tokens their recorded model calls used.
    pub async fn tokens_left_and_used(&self, user_id: i64) -> (i64, i64) {
        sqlx::query_as(
            "SELECT (SELECT tokens FROM users WHERE id = $1),
                    (SELECT COALESCE(sum(prompt_tokens + completion_tokens), 0)::bigint FROM model_usage WHERE user_id = $1)",
        )
        .bind(user_id)
        .fetch_one(&self.app.db)
        .await
        .expect("tokens left and used")
    }

    /// The messages (as JSON text) of the first request the model got whose messages hold
    /// `needle`.
    pub fn asked_with(&self, needle: &str) -> Option<String> {
        self.models
            .requests()
            .iter()
            .map(|r| r["messages"].to_string())
            .find(|m| m.contains(needle))
    }

    /// Creates an agent as `token`; returns its id.
    pub async fn agent(&self, token: &str, body: Value) -> i64 {
        self.app
            .post("/agent", Some(token), &body)
            .await
            .assert_ok()
            .as_i64()
            .expect("agent id")
    }

    pub async fn chat(&self, token: &str, agent_id: i64, body: Value) -> ChatReply {
        let resp = self
            .app
            .client
            .post(self.app.url(&format!("/agent/{agent_id}/chat")))
            .header("Svc-Auth", token)
            .json(&body)
            .send()
            .await
            .expect("chat request");
        let ndjson_type = resp
            .headers()
            .get("content-type")
            .is_some_and(|v| v.as_bytes().starts_with(b"application/x-ndjson"));
        if ndjson_type {
            ChatReply::Events(ndjson(&resp.text().await.expect("chat body")))
        } else {
            ChatReply::Refused(Reply::read(resp).await)
        }
    }

    /// A knowledge base embedded by `embedding` holding `files`, every document indexed.
    pub async fn indexed_base(&self, embedding: i64, files: &[(&str, Vec<u8>)]) -> i64 {
        let body = json!({ "name": "Policies", "embeddingModelId": embedding });
        let kb = self.app.post("/rag", Some(&self.admin), &body).await.assert_ok()["id"]
            .as_i64()
            .unwrap();
        let committed = self.app.upload_documents(&self.admin, kb, files).await;
        for id in committed.assert_ok()["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["id"].as_i64().unwrap())
        {
            assert_eq!(self.app.settled_document(&self.admin, id).await["status"], "success");
        }
        kb
    }

    /// A memory config embedding with `embedding`; returns its id.
    pub async fn memory_config(&self, embedding: i64) -> i64 {
        let body = json!({ "name": "memories", "embeddingModelId": embedding });
        self.app
            .post("/memory/config", Some(&self.admin), &body)
            .await
            .assert_ok()
            .as_i64()
            .expect("memory config id")
    }

    /// The reference MCP server "everything" over stdio (the app must allow its command, see
    /// `mcp_servers::with_stdio`); returns its id.
    pub async fn everything_server(&self) -> i64 {
        let (command, args) = crate::mcp_servers::everything_stdio();
        self.mcp_server(json!({ "name": "everything", "transportType": 3, "command": command, "args": args }))
            .await
    }

    /// Creates an MCP server from `body` as the administrator; returns its id.
    pub async fn mcp_server(&self, body: Value) -> i64 {
        self.app
            .post("/mcp-server", Some(&self.admin), &body)
            .await
            .assert_ok()
            .as_i64()
            .expect("server id")
    }

    /// Gives a regular user a token quota.
    pub async fn set_quota(&self, user_id: i64, tokens: i64) {
        sqlx::query("UPDATE users SET tokens = $2, totals = $2 WHERE id = $1")
            .bind(user_id)
            .bind(tokens)
            .execute(&self.app.db)
            .await
            .expect("set quota");
    }
}

/// A chat body with a fixed conversation id.
pub fn say(conversation: &str, content: &str) -> Value {
    json!({ "conversationId": conversation, "content": content })
}
