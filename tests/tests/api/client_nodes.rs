//! Client nodes: an app-bound agent's model calls run on the app's nodes (real `client-node`
//! processes, each calling its own scripted model server), by routeStrategy, with failover,
//! kicks, full nodes skipped, and a clear failure when no node can take the call.

use std::collections::BTreeSet;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use api_tests::apps::Creds;
use api_tests::chat::{joined, kinds, say, ChatSetup};
use api_tests::lambda_emulator::binary;
use api_tests::model_server::{ModelServer, GOOD_KEY};
use serde_json::{json, Value};

/// A reference node process and the model server only it calls.
struct Node {
    host_id: String,
    models: ModelServer,
    child: Child,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Node {
    /// The model calls this node served, as the last user text of each (title calls left out).
    fn served(&self) -> Vec<String> {
        self.models
            .requests()
            .iter()
            .filter(|r| {
                !r["messages"][0]["content"]
                    .as_str()
                    .unwrap_or_default()
                    .starts_with("Write a short title")
            })
            .map(|r| {
                let messages = r["messages"].as_array().cloned().unwrap_or_default();
                let user = messages.iter().rev().find(|m| m["role"] == "user");
                user.and_then(|m| m["content"].as_str()).unwrap_or_default().to_owned()
            })
            .collect()
    }

    fn kill(&mut self) {
        self.child.kill().expect("kill node");
        let _ = self.child.wait();
    }

    /// Stops the process where it is (SIGSTOP): it beats no more, and the lease it has runs on.
    fn freeze(&self) {
        let pid = self.child.id().to_string();
        let stopped = Command::new("kill").args(["-STOP", &pid]).status().expect("run kill");
        assert!(stopped.success(), "could not stop node {pid}");
    }

    /// Waits for the process to end by itself (the platform keeps serving meanwhile).
    async fn exited_within(&mut self, limit: Duration) -> bool {
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Ok(Some(_)) = self.child.try_wait() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    }
}

struct Setup {
    s: ChatSetup,
    creds: Creds,
    agent: i64,
    nodes: Vec<Node>,
}

impl Setup {
    /// An app with `strategy`, an agent bound to it on `model`, and nodes `(hostId, maxConcurrent)`.
    async fn new(strategy: &str, model: &str, nodes: &[(&str, u32)]) -> Self {
        Self::with_model(strategy, (model, json!({})), nodes).await
    }

    /// The same, the model config created with `extra` fields.
    async fn with_model(strategy: &str, (model, extra): (&str, Value), nodes: &[(&str, u32)]) -> Self {
        let s = ChatSetup::new().await;
        let creds = s.app.create_app(&s.admin, "shop").await;
        s.app
            .put(
                &format!("/app/{}", creds.id),
                Some(&s.admin),
                &json!({ "appName": "shop app", "routeStrategy": strategy }),
            )
            .await
            .assert_ok();
        let model = s.chat_model(model, extra).await;
        let agent = s
            .agent(
                &s.admin,
                json!({ "name": "Routed", "chatModelId": model, "appId": "shop" }),
            )
            .await;
        let mut setup = Self {
            s,
            creds,
            agent,
            nodes: vec![],
        };
        for (host, max) in nodes {
            setup.start_node(host, *max).await;
        }
        setup
    }

    async fn start_node(&mut self, host_id: &str, max_concurrent: u32) {
        let models = ModelServer::start().await;
        let child = Command::new(binary("client-node"))
            .env("PLATFORM_URL", &self.s.app.base)
            .env("APP_ID", &self.creds.app_id)
            .env("APP_TOKEN", &self.creds.token)
            .env("HOST_ID", host_id)
            .env("HOST_IP", "127.0.0.1")
            .env("GRPC_LISTEN", "127.0.0.1:0")
            .env("MAX_CONCURRENT", max_concurrent.to_string())
            .env("UPSTREAM_URL", &models.base_url)
            .env("UPSTREAM_API_KEY", GOOD_KEY)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .expect("start client-node");
        self.nodes.push(Node {
            host_id: host_id.to_owned(),
            models,
            child,
        });
        self.wait_online(host_id).await;
    }

    async fn nodes_view(&self) -> Vec<Value> {
        let r = self.s.app.get("/app/shop/nodes", Some(&self.s.admin)).await;
        r.assert_ok().as_array().cloned().unwrap_or_default()
    }

    async fn wait_online(&self, host_id: &str) {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(20) {
            let online = self.nodes_view().await;
            if online.iter().any(|n| n["hostId"] == host_id && n["online"] == true) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("node {host_id} did not register");
    }

    async fn chat(&self, conversation: &str, content: &str) -> Vec<Value> {
        self.s
            .chat(&self.s.admin, self.agent, say(conversation, content))
            .await
            .events()
    }

    /// Chats and checks the answer; returns the host that served the call.
    async fn served_by(&self, conversation: &str, content: &str) -> String {
        let before: Vec<usize> = self.nodes.iter().map(|n| n.served().len()).collect();
        let events = self.chat(conversation, content).await;
        assert_eq!(kinds(&events).last().map(String::as_str), Some("done"), "{events:?}");
        assert_eq!(joined(&events, "text"), format!("You said: {content}"));
        let grew: Vec<&Node> = self
            .nodes
            .iter()
            .zip(before)
            .filter(|(n, b)| n.served().len() > *b)
            .map(|(n, _)| n)
            .collect();
        assert_eq!(grew.len(), 1, "exactly one node serves a call");
        assert_eq!(grew[0].served().last().map(String::as_str), Some(content));
        grew[0].host_id.clone()
    }

    /// The platform's own model endpoint was never called.
    fn nothing_ran_locally(&self) {
        assert!(
            self.s.models.requests().is_empty(),
            "the platform called the model itself"
        );
    }
}

#[tokio::test]
async fn round_robin_cycles_through_the_nodes() {
    let t = Setup::new("ROUND_ROBIN", "chat-echo", &[("rr-a", 4), ("rr-b", 4), ("rr-c", 4)]).await;
    // The first turn of a conversation also has its title written (one more call in turn).
    t.served_by("rr", "hello").await;
    let mut hosts = vec![];
    for i in 0..6 {
        hosts.push(t.served_by("rr", &format!("turn {i}")).await);
    }
    let first: BTreeSet<&String> = hosts[..3].iter().collect();
    assert_eq!(first.len(), 3, "three turns visit three nodes: {hosts:?}");
    assert_eq!(hosts[..3], hosts[3..], "and then the same cycle again");
    t.nothing_ran_locally();
}

/// Images travel to the node inline: a 5 MB one passes gRPC's usual 4 MiB message limit, which
/// the reference node lifts (every node refused such a chat, and the turn blamed them all).
#[tokio::test]
async fn a_chat_with_a_large_image_runs_on_a_node() {
    let vision = json!({ "configJson": { "capabilities": ["vision"] } });
    let t = Setup::with_model("ROUND_ROBIN", ("chat-echo", vision), &[("big", 2)]).await;
    let mut bytes = api_tests::PNG.to_vec();
    bytes.resize(5 << 20, 0);
    let uploaded = t.s.app.upload_resource(&t.s.admin, "big.png", bytes, None).await;
    let image = uploaded.assert_ok()["id"].as_i64().unwrap();
    let mut body = say("img", "what is this");
    body["attachments"] = json!([{ "type": "IMAGE", "resourceId": image }]);
    let events = t.s.chat(&t.s.admin, t.agent, body).await.events();
    assert_eq!(kinds(&events).last().map(String::as_str), Some("done"), "{events:?}");
    assert_eq!(joined(&events, "text"), "You said: what is this");
    // The node's own model got the whole image (base64: a third longer).
    let inline_image = |m: &Value| {
        m["content"].as_array().is_some_and(|parts| {
            parts
                .iter()
                .any(|p| p["image_url"]["url"].as_str().is_some_and(|u| u.len() > 5 << 20))
        })
    };
    let sent = t.nodes[0].models.requests();
    assert!(sent
        .iter()
        .any(|r| r["messages"].as_array().unwrap().iter().any(inline_image)));
    t.nothing_ran_locally();
}

#[tokio::test]
async fn hash_keeps_a_conversation_on_one_node_and_spreads_conversations() {
    let t = Setup::new("HASH", "chat-echo", &[("h-a", 4), ("h-b", 4), ("h-c", 4)]).await;
    let mut homes = BTreeSet::new();
    for c in 0..8 {
        let conversation = format!("conversation-{c}");
        let first = t.served_by(&conversation, "one").await;
        let second = t.served_by(&conversation, "two").await;
        let third = t.served_by(&conversation, "three").await;
        assert_eq!((&first, &first), (&second, &third), "{conversation} moved");
        homes.insert(first);
    }
    assert!(homes.len() >= 2, "8 conversations all on {homes:?}");
    t.nothing_ran_locally();
}

#[tokio::test]
async fn random_uses_more_than_one_node() {
    let t = Setup::new("RANDOM", "chat-echo", &[("r-a", 4), ("r-b", 4), ("r-c", 4)]).await;
    let mut used = BTreeSet::new();
    for i in 0..12 {
        used.insert(t.served_by("random", &format!("call {i}")).await);
    }
    assert!(used.len() >= 2, "12 calls all on {used:?}");
}

#[tokio::test]
async fn a_killed_node_fails_over_and_with_every_node_gone_the_chat_fails_clearly() {
    let mut t = Setup::new("ROUND_ROBIN", "chat-echo", &[("k-a", 4), ("k-b", 4)]).await;
    t.nodes[0].kill();
    // Its lease still runs: the platform still lists it online and tries it first in turn.
    let view = t.nodes_view().await;
    assert!(view.iter().any(|n| n["hostId"] == "k-a" && n["online"] == true));
    for i in 0..4 {
        assert_eq!(t.served_by("failover", &format!("still there {i}")).await, "k-b");
    }

    t.nodes[1].kill();
    let before_messages = t.s.app.count("messages").await;
    let events = t.chat("failover", "anyone?").await;
    assert_eq!(kinds(&events), ["error"], "{events:?}");
    let message = events[0]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("no client node of app shop is available") && message.contains("did not answer"),
        "{message}"
    );
    // What the nodes answered, and where they are, stays in the log.
    assert!(!message.contains("127.0.0.1") && !message.contains("k-a"), "{message}");
    // Only the user's message and the failed answer were stored.
    assert_eq!(t.s.app.count("messages").await, before_messages + 2);
    let (status, error): (i16, Option<String>) =
        sqlx::query_as("SELECT status, error FROM messages WHERE role = 'assistant' ORDER BY id DESC LIMIT 1")
            .fetch_one(&t.s.app.db)
            .await
            .unwrap();
    assert_eq!(status, 2);
    assert!(error.unwrap_or_default().contains("no client node of app shop"));
    t.nothing_ran_locally();
}

#[tokio::test]
async fn a_kicked_node_gets_no_more_work_and_stops() {
    let mut t = Setup::new("ROUND_ROBIN", "chat-echo", &[("kick-a", 4), ("kick-b", 4)]).await;
    t.s.app
        .delete("/app/shop/nodes/kick-a", Some(&t.s.admin))
        .await
        .assert_ok();
    let served_before = t.nodes[0].served().len();
    for i in 0..4 {
        assert_eq!(t.served_by("kick", &format!("after the kick {i}")).await, "kick-b");
    }
    assert_eq!(t.nodes[0].served().len(), served_before);
    // Told on its next heartbeat (every 10 s), the node stops.
    assert!(
        t.nodes[0].exited_within(Duration::from_secs(25)).await,
        "the kicked node kept running"
    );
    assert!(t.nodes_view().await.iter().all(|n| n["hostId"] != "kick-a"));
}

/// The reference node answers only the platform: a call without its app's token, or with
/// another one of the same length, is refused before it reaches the node's model.
#[tokio::test]
async fn a_node_refuses_a_caller_without_its_apps_token() {
    use shared::apps::node_proto::{client_node_client::ClientNodeClient, ChatRequest};
    let t = Setup::new("ROUND_ROBIN", "chat-echo", &[("guarded", 1)]).await;
    let port = t.nodes_view().await[0]["grpcPort"].as_u64().expect("grpcPort");
    let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .unwrap()
        .connect()
        .await
        .expect("connect to the node");
    let other = "x".repeat(t.creds.token.len());
    for token in [None, Some(other.as_str())] {
        let mut req = tonic::Request::new(ChatRequest::default());
        req.metadata_mut().insert("svc-app-id", t.creds.app_id.parse().unwrap());
        if let Some(token) = token {
            req.metadata_mut().insert("svc-token", token.parse().unwrap());
        }
        let refused = ClientNodeClient::new(channel.clone()).chat(req).await.unwrap_err();
        assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused}");
    }
    assert!(t.nodes[0].served().is_empty(), "the node's model was called");
}

#[tokio::test]
async fn a_node_at_max_concurrent_is_skipped() {
    let t = Setup::new("ROUND_ROBIN", "chat-echo", &[("full-a", 2), ("full-b", 2)]).await;
    // full-a reports it is serving as many calls as it may; its own beats, which would say 0
    // again, are stopped first, however slowly the test runs.
    assert_eq!(t.nodes[0].host_id, "full-a");
    t.nodes[0].freeze();
    let port = t.nodes_view().await.iter().find(|n| n["hostId"] == "full-a").unwrap()["grpcPort"].clone();
    let beat = json!({ "hostId": "full-a", "hostIp": "127.0.0.1", "grpcPort": port,
                       "maxConcurrent": 2, "activeChats": 2 });
    t.s.app.ext_post(&t.creds, "/node/heartbeat", &beat).await.assert_ok();
    for i in 0..4 {
        assert_eq!(t.served_by("busy", &format!("call {i}")).await, "full-b");
    }
    assert!(t.nodes[0].served().is_empty(), "the full node got work");
    let view = t.nodes_view().await;
    let a = view.iter().find(|n| n["hostId"] == "full-a").unwrap();
    assert_eq!(
        a["activeChats"], 2,
        "full-a beat again during the test; it proves nothing"
    );
}

#[tokio::test]
async fn a_call_running_on_a_node_counts_against_its_max_concurrent() {
    // One call at a time per node; HASH sends the conversation's second call to the same node,
    // which is still busy with the first (a slow answer), so the other node takes it.
    let t = Setup::new("HASH", "chat-slow", &[("one-a", 1), ("one-b", 1)]).await;
    let slow = "a b c d e f g h i j";
    let (first, second) = tokio::join!(t.chat("busy-conversation", slow), async {
        // Once the first question is stored and its node is answering it (slowly).
        api_tests::wait_for(Duration::from_secs(30), async || {
            let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM messages WHERE role = 'user' AND content = $1")
                .bind(slow)
                .fetch_one(&t.s.app.db)
                .await
                .unwrap();
            stored == 1 && t.nodes.iter().any(|n| n.served().contains(&slow.to_owned()))
        })
        .await;
        t.chat("busy-conversation", "quick").await
    });
    assert_eq!(joined(&first, "text"), format!("You said: {slow}"));
    // The first question, still unanswered in the history, goes with the second as one user
    // message (roles take turns).
    let both = format!("{slow}\n\nquick");
    assert_eq!(joined(&second, "text"), format!("You said: {both}"));
    let home = t.nodes.iter().find(|n| n.served().contains(&slow.to_owned())).unwrap();
    let other = t.nodes.iter().find(|n| n.served().contains(&both)).unwrap();
    assert_ne!(home.host_id, other.host_id);
}

/// A disabled app's nodes get no more chats, though their leases still run.
#[tokio::test]
async fn a_disabled_apps_nodes_get_no_chats() {
    let t = Setup::new("ROUND_ROBIN", "chat-echo", &[("off-a", 4)]).await;
    t.served_by("on", "hello").await;
    let served = t.nodes[0].served().len();
    sqlx::query("UPDATE apps SET status = 0 WHERE app_id = 'shop'")
        .execute(&t.s.app.db)
        .await
        .unwrap();
    let events = t.chat("off", "anyone there?").await;
    assert_eq!(kinds(&events), ["error"], "{events:?}");
    assert!(
        events[0]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("is disabled"),
        "{events:?}"
    );
    assert_eq!(t.nodes[0].served().len(), served, "the node got nothing");
}

/// The error names the app to whoever configured the agent's model; anyone else chatting, to
/// whom an agent's app is not shown, reads "this agent's app".
#[tokio::test]
async fn with_no_node_online_the_chat_ends_with_an_error_naming_the_app() {
    let t = Setup::new("ROUND_ROBIN", "chat-echo", &[]).await;
    let events = t.chat("nobody", "hello?").await;
    assert_eq!(kinds(&events), ["error"], "{events:?}");
    assert!(
        events[0]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("no client node of app shop is online"),
        "{events:?}"
    );
    let rows: Vec<(String, i16)> = sqlx::query_as("SELECT role, status FROM messages ORDER BY id")
        .fetch_all(&t.s.app.db)
        .await
        .unwrap();
    assert_eq!(rows, [("user".to_owned(), 1), ("assistant".to_owned(), 2)]);

    let (alice_id, alice) = t.s.app.regular_user("alice").await;
    t.s.set_quota(alice_id, 100_000).await;
    let events = t.s.chat(&alice, t.agent, say("alone", "hello?")).await.events();
    let message = events[0]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("no client node of this agent's app is online") && !message.contains("shop"),
        "{events:?}"
    );
    t.nothing_ran_locally();
}

/// The reference node calls only its own upstream with its own key: without `UPSTREAM_URL` it
/// refuses to start (it used to call whatever URL the platform named, and model configs, whose
/// URL that was, are written by users).
#[tokio::test]
async fn the_reference_node_refuses_to_start_without_its_own_upstream() {
    let t = Setup::new("ROUND_ROBIN", "chat-echo", &[]).await;
    let mut child = Command::new(binary("client-node"))
        .env("PLATFORM_URL", &t.s.app.base)
        .env("APP_ID", &t.creds.app_id)
        .env("APP_TOKEN", &t.creds.token)
        .env("HOST_ID", "no-upstream")
        .env("HOST_IP", "127.0.0.1")
        .env("GRPC_LISTEN", "127.0.0.1:0")
        .env("UPSTREAM_API_KEY", GOOD_KEY)
        .env_remove("UPSTREAM_URL")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start client-node");
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("node status") {
            break Some(status);
        }
        if start.elapsed() > Duration::from_secs(15) {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let Some(status) = status else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("a node without UPSTREAM_URL started and kept running");
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr).unwrap();
    assert!(!status.success(), "exit status {status}");
    assert!(stderr.contains("--upstream-url (UPSTREAM_URL) is required"), "{stderr}");
    assert!(t.nodes_view().await.is_empty(), "it never registered");
}
