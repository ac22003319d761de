//! Sessions reused per server and person chatting within a process, and each session's tool
//! list cached briefly.
//!
//! A session is replaced when its server's configuration changed (its `update_dt`, so other
//! processes notice too), when its OAuth2 token is due for renewal, when it failed or timed
//! out (a stdio child dies with its session), and when the server is updated or deleted here.
//! One unused for `session_idle` is closed: a server deleted in another process, or no longer
//! chatted with, would otherwise keep its connection (or its stdio child) for the life of the
//! process; past `sessions_per_server` of one server, the one unused longest is closed.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};
use tracing::Instrument;

use rmcp::model::{CallToolRequestParams, CallToolResult, PaginatedRequestParams, Tool};
use tokio::sync::Mutex as AsyncMutex;

use super::oauth::TokenCache;
use super::session::{self, Client, Clients, Failure, Party, Target, Transport};
use super::stdio::StdioPolicy;
use super::streamable::StreamableClient;
use crate::outbound::{DenyList, Outbound, PerReach, Reach};

pub struct Limits {
    pub connect_timeout: Duration,
    pub call_timeout: Duration,
    pub tools_ttl: Duration,
    pub session_idle: Duration,
    pub sessions_per_server: usize,
}

struct Live {
    version: chrono::DateTime<chrono::Utc>,
    /// The networks it was opened to reach: its creator's role may have changed since.
    reach: Reach,
    client: Client,
    renew_at: Option<Instant>,
    tools: Mutex<Option<(Instant, Arc<Vec<Tool>>)>>,
    /// When a request last took the session.
    used: Mutex<Instant>,
}

impl Live {
    fn usable_for(&self, target: &Target) -> bool {
        self.version == target.version
            && self.reach == target.reach
            && !self.client.is_closed()
            && self.renew_at.is_none_or(|at| Instant::now() < at)
    }

    fn idle_for(&self) -> Duration {
        self.used.lock().unwrap_or_else(PoisonError::into_inner).elapsed()
    }

    fn take(&self) {
        *self.used.lock().unwrap_or_else(PoisonError::into_inner) = Instant::now();
    }
}

type Slot = Arc<AsyncMutex<Option<Arc<Live>>>>;

/// A server's session for one party (`Target::party`).
type Key = (i64, Option<Party>);

fn key(target: &Target) -> Key {
    (target.id, target.party)
}

/// The HTTP clients of one reach.
#[derive(Default)]
struct ReachClients {
    deny: DenyList,
    http: reqwest::Client,
    /// Built at its first use: its TLS verifier reads the system's certificate store, which
    /// would otherwise be part of every cold start, whether the function calls MCP or not.
    streamable: OnceLock<StreamableClient>,
}

#[derive(Default)]
pub struct McpPool {
    slots: Mutex<HashMap<Key, Slot>>,
    /// When idle sessions were last looked for.
    swept: Mutex<Option<Instant>>,
    tokens: TokenCache,
    clients: PerReach<ReachClients>,
    outbound: Outbound,
    stdio: StdioPolicy,
}

impl McpPool {
    /// A pool whose HTTP calls (SSE, Streamable HTTP, OAuth tokens) connect only to addresses
    /// the server's reach allows, and which starts only the stdio servers `stdio` allows.
    pub fn guarded(outbound: &Outbound, stdio: StdioPolicy) -> Self {
        let clients = PerReach::new(|reach| {
            let deny = outbound.deny(reach);
            ReachClients {
                deny: deny.clone(),
                http: deny
                    .guard_credentialed(reqwest::Client::builder())
                    .build()
                    .unwrap_or_default(),
                streamable: OnceLock::new(),
            }
        });
        Self {
            slots: Mutex::default(),
            swept: Mutex::default(),
            tokens: TokenCache::default(),
            clients,
            outbound: outbound.clone(),
            stdio,
        }
    }

    fn clients(&self, reach: Reach) -> Clients<'_> {
        let c = self.clients.get(reach);
        let streamable = c.streamable.get_or_init(|| {
            StreamableClient::new(
                c.deny
                    .guard_mcp(reqwest13::Client::builder())
                    .build()
                    .unwrap_or_default(),
            )
        });
        Clients {
            http: &c.http,
            streamable,
        }
    }

    /// The rule for stdio servers this pool starts, for checking a server when it is saved.
    pub fn stdio_policy(&self) -> &StdioPolicy {
        &self.stdio
    }

    fn slots(&self) -> MutexGuard<'_, HashMap<Key, Slot>> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn slot(&self, key: Key) -> Slot {
        self.slots().entry(key).or_default().clone()
    }

    /// Ends the server's sessions (killing stdio children) and forgets their tools: the server
    /// changed or went away.
    pub fn invalidate(&self, id: i64) {
        self.end_sessions(|(server, _)| *server == id);
    }

    /// Ends `target`'s own session only (its party's), and forgets its tools: the next use
    /// connects afresh while everyone else's calls on their sessions go on.
    pub fn reconnect(&self, target: &Target) {
        let mine = key(target);
        self.end_sessions(|k| *k == mine);
    }

    fn end_sessions(&self, which: impl Fn(&Key) -> bool) {
        let mut slots = self.slots();
        let keys: Vec<Key> = slots.keys().filter(|k| which(k)).copied().collect();
        for key in keys {
            if let Some(slot) = slots.remove(&key) {
                if let Ok(mut live) = slot.try_lock() {
                    if let Some(live) = live.take() {
                        live.client.cancellation_token().cancel();
                    }
                }
            }
        }
    }

    /// Ends every session and waits, up to `within`, for each to finish, stdio children
    /// killed: a process that exits without this leaves them running (their kill is a task on
    /// the runtime being shut down, and a terminal's Ctrl-C does not reach their own process
    /// group).
    pub async fn close_all(&self, within: Duration) {
        let slots: Vec<Slot> = self.slots().drain().map(|(_, slot)| slot).collect();
        let mut ending = Vec::new();
        for slot in slots {
            let Some(live) = slot.lock().await.take() else {
                continue;
            };
            live.client.cancellation_token().cancel();
            if let Ok(live) = Arc::try_unwrap(live) {
                ending.push(live.client.waiting());
            }
        }
        let _ = tokio::time::timeout(within, futures::future::join_all(ending)).await;
    }

    /// Closes the sessions unused for `idle`, looking at most every `idle / 4` (and at most
    /// once a second): a session a request is using is skipped, as is one whose slot a request
    /// holds.
    fn close_idle(&self, idle: Duration) {
        {
            let mut swept = self.swept.lock().unwrap_or_else(PoisonError::into_inner);
            let every = (idle / 4).max(Duration::from_secs(1));
            if swept.is_some_and(|at| at.elapsed() < every) {
                return;
            }
            *swept = Some(Instant::now());
        }
        // An empty slot goes too (slots are per server and person, so they would add up), but
        // only one the map alone holds: a request that took a slot from the map may be about to
        // open a session in it, which must stay where the next sweep sees it. Slots are taken
        // from the map under its lock, which this holds.
        self.slots().retain(|_, slot| {
            let Ok(mut current) = slot.try_lock() else {
                return true;
            };
            if current
                .as_ref()
                .is_some_and(|live| live.idle_for() >= idle && Arc::strong_count(live) == 1)
            {
                if let Some(live) = current.take() {
                    live.client.cancellation_token().cancel();
                }
            }
            current.is_some() || Arc::strong_count(slot) > 1
        });
    }

    /// Closes the server's sessions unused longest while it has `most` or more open besides
    /// `opening`'s, so that one more fits: many people chatting with one stdio server would
    /// otherwise each keep a child process until their session went idle. Sessions in use are
    /// left; a slot another request holds counts as open.
    fn make_room(&self, opening: Key, most: usize) {
        let slots: Vec<Slot> = self
            .slots()
            .iter()
            .filter(|(key, _)| key.0 == opening.0 && **key != opening)
            .map(|(_, slot)| slot.clone())
            .collect();
        let mut open: usize = 0;
        let mut unused = Vec::new();
        for slot in &slots {
            let Ok(current) = slot.try_lock() else {
                open += 1;
                continue;
            };
            if let Some(live) = current.as_ref() {
                open += 1;
                if Arc::strong_count(live) == 1 {
                    unused.push((live.idle_for(), slot));
                }
            }
        }
        unused.sort_by_key(|(idle, _)| std::cmp::Reverse(*idle));
        for (_, slot) in unused.into_iter().take((open + 1).saturating_sub(most)) {
            // Looked at again under the lock: a request may have taken the session since.
            let Ok(mut current) = slot.try_lock() else {
                continue;
            };
            if current.as_ref().is_some_and(|live| Arc::strong_count(live) == 1) {
                if let Some(live) = current.take() {
                    live.client.cancellation_token().cancel();
                }
            }
        }
    }

    /// Drops `live` if it is still the session of `target`'s party.
    async fn discard(&self, target: &Target, live: &Arc<Live>) {
        let slot = self.slot(key(target));
        let mut current = slot.lock().await;
        if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, live)) {
            current.take();
        }
        live.client.cancellation_token().cancel();
    }

    async fn session(&self, target: &Target, limits: &Limits) -> Result<Arc<Live>, Failure> {
        self.close_idle(limits.session_idle);
        let slot = self.slot(key(target));
        let mut current = slot.lock().await;
        if let Some(live) = current.as_ref().filter(|l| l.usable_for(target)) {
            live.take();
            return Ok(live.clone());
        }
        if let Some(old) = current.take() {
            old.client.cancellation_token().cancel();
        }
        self.make_room(key(target), limits.sessions_per_server);
        // Refused here with the reason in words; the clients' resolvers refuse the same
        // addresses at connection time, whatever a name resolves to by then.
        let deny = self.outbound.deny(target.reach);
        if let Transport::StreamableHttp(url) | Transport::Sse(url) = &target.transport {
            deny.check_url("endpoint", url)
                .await
                .map_err(|e| Failure::new(e.to_string()))?;
        }
        if let Some(creds) = target.oauth() {
            deny.check_url("authConfig.tokenUrl", creds.token_url)
                .await
                .map_err(|e| Failure::new(e.to_string()))?;
        }
        // A server saved before stdio was turned off, its command unlisted or its variables
        // refused must not start.
        if let Transport::Stdio { command, env, .. } = &target.transport {
            self.stdio.check(command).map_err(|e| Failure::new(e.to_string()))?;
            for key in env.keys() {
                super::stdio::check_env(key).map_err(|e| Failure::new(e.to_string()))?;
            }
        }
        // A pooled session outlives the request that opened it: its tasks get a span of their
        // own, or they would keep that request's span (and trace) open for as long as they run.
        let session_span = tracing::info_span!(parent: None, "mcp_session", mcp.server.id = target.id);
        let opened = tokio::time::timeout(
            limits.connect_timeout,
            session::open(target, self.clients(target.reach), &self.tokens, limits.call_timeout)
                .instrument(session_span),
        )
        .await
        .map_err(|_| Failure::timed_out(format!("no MCP session within {} s", limits.connect_timeout.as_secs())))??;
        let live = Arc::new(Live {
            version: target.version,
            reach: target.reach,
            client: opened.client,
            renew_at: opened.renew_at,
            tools: Mutex::new(None),
            used: Mutex::new(Instant::now()),
        });
        *current = Some(live.clone());
        Ok(live)
    }

    /// Runs `op` on the server's session. A failed session is dropped; a refusal of OAuth2
    /// credentials is retried once with a newly fetched token.
    async fn with_session<T, F, Fut>(&self, target: &Target, limits: &Limits, op: F) -> Result<T, Failure>
    where
        F: Fn(Arc<Live>) -> Fut,
        Fut: Future<Output = Result<T, Failure>>,
    {
        let mut retried = false;
        loop {
            // Which token the refused session used (its renewal time tells tokens apart).
            let mut token_used = None;
            let result = match self.session(target, limits).await {
                Ok(live) => {
                    token_used = live.renew_at;
                    let result = op(live.clone()).await;
                    // A call that only ran out of time leaves a session other requests are
                    // using (held by the slot, this call and them): a slow tool is not a broken
                    // session, and dropping it cut every call in flight on it. The last call
                    // out drops it.
                    let others_on_it = Arc::strong_count(&live) > 2;
                    let failed = result.as_ref().err().filter(|f| !f.protocol);
                    if failed.is_some_and(|f| !(f.timed_out && others_on_it)) {
                        self.discard(target, &live).await;
                    }
                    result
                }
                Err(f) => Err(f),
            };
            match (result, target.oauth()) {
                (Err(f), Some(creds)) if f.unauthorized && !retried => {
                    tracing::info!(
                        server_id = target.id,
                        "MCP server refused the OAuth2 token; fetching a new one"
                    );
                    // The token is the server's, but only this session is opened again now:
                    // other parties' calls in flight on theirs go on. The token is forgotten
                    // only if it is still the one this session used: a party refused later on
                    // the old token would otherwise drop the one fetched since, and each party
                    // would fetch its own. A session refused while opening is taken to have
                    // used the cached one (a token fetched meanwhile is fetched again).
                    self.tokens.forget_if_current(&creds, token_used);
                    self.reconnect(target);
                    retried = true;
                }
                (result, _) => return result,
            }
        }
    }

    /// The server's tools, from the cache while it is younger than `tools_ttl`.
    pub async fn tools(&self, target: &Target, limits: &Limits) -> Result<Arc<Vec<Tool>>, Failure> {
        self.with_session(target, limits, |live| async move {
            let cached = live
                .tools
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .as_ref()
                .filter(|(at, _)| at.elapsed() < limits.tools_ttl)
                .map(|(_, tools)| tools.clone());
            if let Some(tools) = cached {
                return Ok(tools);
            }
            let listed = tokio::time::timeout(limits.call_timeout, list_tools(&live.client))
                .await
                .map_err(|_| {
                    Failure::timed_out(format!(
                        "tools/list took longer than {} s",
                        limits.call_timeout.as_secs()
                    ))
                })??;
            let tools = Arc::new(listed);
            *live.tools.lock().unwrap_or_else(PoisonError::into_inner) = Some((Instant::now(), tools.clone()));
            Ok(tools)
        })
        .await
    }

    pub async fn call(
        &self,
        target: &Target,
        limits: &Limits,
        params: CallToolRequestParams,
    ) -> Result<CallToolResult, Failure> {
        self.with_session(target, limits, |live| {
            let params = params.clone();
            async move {
                tokio::time::timeout(limits.call_timeout, live.client.call_tool(params))
                    .await
                    .map_err(|_| {
                        Failure::timed_out(format!(
                            "the tool did not answer within {} s (MCP_CALL_TIMEOUT_SECS)",
                            limits.call_timeout.as_secs()
                        ))
                    })?
                    .map_err(|e| Failure::from_service("tools/call failed", &e))
            }
        })
        .await
    }
}

/// Pages of a tool list read at most: a server answering with a next page forever would
/// otherwise be read until the call's time limit, every page kept.
const MAX_TOOL_PAGES: usize = 20;
/// Tools and bytes of their descriptions and schemas one server may list: every chat step
/// sends them all to the model, paid by whoever is chatting.
const MAX_TOOLS: usize = 256;
const MAX_TOOL_BYTES: usize = 1024 * 1024;

/// The server's tools, page after page, within the bounds above.
async fn list_tools(client: &Client) -> Result<Vec<Tool>, Failure> {
    let mut tools = Vec::new();
    let mut bytes = 0;
    let mut cursor = None;
    for _ in 0..MAX_TOOL_PAGES {
        let page = client
            .list_tools(Some(PaginatedRequestParams::default().with_cursor(cursor)))
            .await
            .map_err(|e| Failure::from_service("tools/list failed", &e))?;
        for tool in page.tools {
            bytes += serde_json::to_vec(&tool).map_or(0, |b| b.len());
            tools.push(tool);
        }
        if tools.len() > MAX_TOOLS || bytes > MAX_TOOL_BYTES {
            return Err(Failure::new(format!(
                "the server lists more than {MAX_TOOLS} tools or {} KiB of tool descriptions; the service takes at most that many",
                MAX_TOOL_BYTES / 1024
            )));
        }
        cursor = page.next_cursor;
        if cursor.is_none() {
            return Ok(tools);
        }
    }
    Err(Failure::new(format!(
        "the server's tool list goes on past {MAX_TOOL_PAGES} pages"
    )))
}
