//! Runs an agent's model calls on its app's client nodes: picks the online nodes in the app's
//! routeStrategy order, leaves out the full ones, and fails over to the next node while a node
//! does not accept the call.

use std::sync::Arc;

use async_trait::async_trait;
use sha2::{Digest, Sha256};

use super::node_client::{self, Credentials};
use super::{node_repo, node_wire, repo, NodeRow};
use crate::models::client::{ChatRequest, ChatStream, Endpoint, ModelError};
use crate::models::gateway::ChatTransport;
use crate::AppState;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    RoundRobin,
    Random,
    Hash,
}

impl Strategy {
    pub fn parse(value: &str) -> Self {
        match value {
            "RANDOM" => Self::Random,
            "HASH" => Self::Hash,
            _ => Self::RoundRobin,
        }
    }
}

/// Rendezvous score of a node for a conversation: the highest score takes it, so a
/// conversation stays on its node, and only the conversations of a node that leaves move.
fn score(conversation: &str, host_id: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(conversation.as_bytes());
    h.update([0]);
    h.update(host_id.as_bytes());
    h.finalize().into()
}

/// The order to try the online nodes in, full ones left out. `ticket` is the ROUND_ROBIN cursor
/// or a random number; `conversation` keys HASH; `load` is a node's running calls.
pub fn order(
    mut online: Vec<NodeRow>,
    strategy: Strategy,
    ticket: u64,
    conversation: &str,
    load: impl Fn(&NodeRow) -> usize,
) -> Vec<NodeRow> {
    online.sort_by(|a, b| a.host_id.cmp(&b.host_id));
    match strategy {
        Strategy::Hash => online.sort_by_cached_key(|n| std::cmp::Reverse(score(conversation, &n.host_id))),
        Strategy::RoundRobin | Strategy::Random => {
            if !online.is_empty() {
                let start = (ticket % online.len() as u64) as usize;
                online.rotate_left(start);
            }
        }
    }
    online.retain(|n| load(n) < n.max_concurrent.max(0) as usize);
    online
}

/// A node's running calls: what it last reported, or what this process knows it has started
/// since, whichever is more.
fn load(node: &NodeRow) -> usize {
    (node.active_chats.max(0) as usize).max(node_client::in_flight(node))
}

/// Nodes that did not take a call, by why.
#[derive(Default)]
struct Missed {
    busy: usize,
    failed: usize,
    too_large: usize,
}

/// The message of a call no node took, told to whoever is chatting (a partner's user, too):
/// counts only. What each node answered, with its address, is in the log.
fn unavailable(app_id: &str, online: usize, missed: &Missed) -> ModelError {
    let Missed {
        busy,
        failed,
        too_large,
    } = *missed;
    if online == 0 {
        return ModelError::no_client_node(app_id, |app| format!("no client node of {app} is online"));
    }
    let mut why = vec![];
    if busy > 0 {
        why.push(format!("{busy} at maxConcurrent"));
    }
    if failed > 0 {
        why.push(format!("{failed} did not answer"));
    }
    if too_large > 0 {
        why.push(format!(
            "{too_large} refused the request as too large (a node must take {} MiB; check its gRPC server's maximum message size)",
            node_wire::MAX_REQUEST_BYTES >> 20
        ));
    }
    let why = why.join(", ");
    ModelError::no_client_node(app_id, |app| {
        format!("no client node of {app} is available: of {online} online, {why}")
    })
}

/// The chat calls of one conversation of an agent bound to an app.
pub struct NodeRoute {
    state: AppState,
    app_id: String,
    conversation: String,
}

impl std::fmt::Debug for NodeRoute {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeRoute")
            .field("app_id", &self.app_id)
            .field("conversation", &self.conversation)
            .finish_non_exhaustive()
    }
}

impl NodeRoute {
    pub fn for_conversation(state: &AppState, app_id: &str, conversation: &str) -> Arc<dyn ChatTransport> {
        Arc::new(Self {
            state: state.clone(),
            app_id: app_id.to_owned(),
            conversation: conversation.to_owned(),
        })
    }

    /// A failure to look the nodes up, logged in full and told without detail.
    fn lookup_failed(&self, e: impl std::fmt::Display) -> ModelError {
        tracing::error!(app_id = %self.app_id, error = %e, "looking up client nodes failed");
        ModelError::no_client_node(&self.app_id, |app| {
            format!("the client nodes of {app} could not be looked up")
        })
    }
}

#[async_trait]
impl ChatTransport for NodeRoute {
    async fn chat_stream(&self, ep: &Endpoint, req: &ChatRequest) -> Result<ChatStream, ModelError> {
        let db = self.state.db();
        let app = repo::route_ticket(db, &self.app_id)
            .await
            .map_err(|e| self.lookup_failed(e))?
            // A disabled app's nodes get no more chats, though their leases still run.
            .ok_or_else(|| {
                ModelError::no_client_node(&self.app_id, |app| format!("{app} does not exist or is disabled"))
            })?;
        let token = self
            .state
            .secrets()
            .open(&app.token_enc)
            .map_err(|e| self.lookup_failed(e))?;
        let online = node_repo::online_of_app(db, app.id)
            .await
            .map_err(|e| self.lookup_failed(e))?;
        let total = online.len();
        let strategy = Strategy::parse(&app.route_strategy);
        let ticket = match strategy {
            Strategy::RoundRobin => app.cursor.unsigned_abs(),
            Strategy::Random => rand::random(),
            Strategy::Hash => 0,
        };
        let candidates = order(online, strategy, ticket, &self.conversation, load);
        let mut missed = Missed {
            busy: total - candidates.len(),
            ..Missed::default()
        };
        let request = node_wire::encode_request(ep, req, &self.conversation);
        let creds = Credentials {
            app_id: &self.app_id,
            token: &token,
        };
        for node in &candidates {
            match node_client::open(node, &creds, request.clone(), ep.timeout()).await {
                Ok(stream) => {
                    tracing::debug!(app_id = %self.app_id, host_id = %node.host_id, "client node took the call");
                    return Ok(stream);
                }
                Err(not) => {
                    tracing::warn!(app_id = %self.app_id, host_id = %node.host_id, why = %not.why, "client node did not take the call");
                    match not.too_large {
                        true => missed.too_large += 1,
                        false => missed.failed += 1,
                    }
                }
            }
        }
        Err(unavailable(&self.app_id, total, &missed))
    }
}

#[cfg(test)]
mod tests {
    use chrono::Utc;
    use serde_json::json;

    use super::*;

    fn node(host: &str, max: i32, active: i32) -> NodeRow {
        NodeRow {
            id: 1,
            app_id: "app".into(),
            app_name: "App".into(),
            host_id: host.into(),
            host_ip: "10.0.0.1".into(),
            grpc_port: 9000,
            max_concurrent: max,
            active_chats: active,
            labels: json!({}),
            expire_dt: Utc::now(),
        }
    }

    fn hosts(nodes: &[NodeRow]) -> Vec<&str> {
        nodes.iter().map(|n| n.host_id.as_str()).collect()
    }

    fn three() -> Vec<NodeRow> {
        vec![node("c", 2, 0), node("a", 2, 0), node("b", 2, 0)]
    }

    fn reported(n: &NodeRow) -> usize {
        n.active_chats as usize
    }

    #[test]
    fn round_robin_cycles_in_host_order_and_skips_full_nodes() {
        let firsts: Vec<String> = (0..6)
            .map(|t| order(three(), Strategy::RoundRobin, t, "", reported)[0].host_id.clone())
            .collect();
        assert_eq!(firsts, ["a", "b", "c", "a", "b", "c"]);
        assert_eq!(
            hosts(&order(three(), Strategy::RoundRobin, 1, "", reported)),
            ["b", "c", "a"]
        );
        let with_full_b = vec![node("a", 2, 0), node("b", 2, 2), node("c", 2, 1)];
        assert_eq!(
            hosts(&order(with_full_b, Strategy::RoundRobin, 1, "", reported)),
            ["c", "a"]
        );
        assert!(order(vec![], Strategy::RoundRobin, 7, "", reported).is_empty());
    }

    #[test]
    fn hash_keeps_a_conversation_on_its_node_and_spreads_conversations() {
        let home = |conv: &str| order(three(), Strategy::Hash, 0, conv, reported)[0].host_id.clone();
        assert_eq!(home("conv-1"), home("conv-1"));
        let homes: std::collections::BTreeSet<String> = (0..30).map(|i| home(&format!("conv-{i}"))).collect();
        assert_eq!(homes.len(), 3, "30 conversations over 3 nodes use them all");
        // A node leaving moves only its own conversations.
        for i in 0..30 {
            let conv = format!("conv-{i}");
            let before = home(&conv);
            let without_a: Vec<NodeRow> = three().into_iter().filter(|n| n.host_id != "a").collect();
            let after = order(without_a, Strategy::Hash, 0, &conv, reported)[0].host_id.clone();
            if before != "a" {
                assert_eq!(before, after);
            }
        }
        // The next in line takes a conversation whose node is full.
        let full_home: Vec<NodeRow> = three()
            .into_iter()
            .map(|n| match n.host_id == home("conv-1") {
                true => node(&n.host_id, 2, 2),
                false => n,
            })
            .collect();
        let order_full = order(full_home, Strategy::Hash, 0, "conv-1", reported);
        assert_eq!(order_full.len(), 2);
        assert_ne!(order_full[0].host_id, home("conv-1"));
    }

    #[test]
    fn the_no_node_message_names_the_app_and_why_and_its_brief_only_why() {
        let none = unavailable("shop", 0, &Missed::default());
        assert_eq!(none.to_string(), "no client node of app shop is online");
        assert_eq!(none.brief(), "no client node of this agent's app is online");
        let missed = Missed {
            busy: 1,
            failed: 1,
            too_large: 1,
        };
        let why = "of 3 online, 1 at maxConcurrent, 1 did not answer, 1 refused the request as too large \
                   (a node must take 64 MiB; check its gRPC server's maximum message size)";
        let some = unavailable("shop", 3, &missed);
        assert_eq!(
            some.to_string(),
            format!("no client node of app shop is available: {why}")
        );
        assert_eq!(
            some.brief(),
            format!("no client node of this agent's app is available: {why}")
        );
    }
}
