//! External chat: the admin chat's stream, owned by the external user of (app, openId), paid
//! by nobody (usage is recorded against the app's creator), and its synchronous form.

use std::time::Duration;

use futures::stream::BoxStream;
use futures::StreamExt;

use super::model::{ExternalChatRequest, SyncAnswer};
use super::{agents, users, ExternalCaller};
use crate::admission::Pending;
use crate::agents::chat::attachments::ResourceOwner;
use crate::agents::chat::{self, Caller, ChatRequest, StreamEvent};
use crate::agents::conversation_repo::{HistoryOf, HistoryOwner};
use crate::domain::Owner;
use crate::models::gateway::Billing;
use crate::{AppError, AppResult, AppState};

/// How long the synchronous chat waits for the whole answer.
pub const SYNC_TIMEOUT: Duration = Duration::from_secs(120);

/// The four required parameters, named together whenever any is missing; the agent id and openId.
fn required(req: &ExternalChatRequest, open_id: Option<String>) -> AppResult<(i64, String)> {
    let blank = |v: &Option<String>| v.as_deref().is_none_or(|s| s.trim().is_empty());
    let mut missing = vec![];
    if req.agent_id.is_none() {
        missing.push("agentId");
    }
    if blank(&open_id) {
        missing.push("openId");
    }
    if blank(&req.conversation_id) {
        missing.push("conversationId");
    }
    if blank(&req.content) {
        missing.push("content");
    }
    if let (true, Some(agent_id), Some(open_id)) = (missing.is_empty(), req.agent_id, open_id) {
        return Ok((agent_id, open_id));
    }
    Err(AppError::business(format!(
        "agentId, openId, conversationId and content are required (missing: {})",
        missing.join(", ")
    )))
}

/// `count`: the request's rate-limit count, when it was left to the chat's first read.
pub async fn start(
    state: &AppState,
    caller: &ExternalCaller,
    mut req: ExternalChatRequest,
    count: Option<Pending>,
) -> AppResult<BoxStream<'static, StreamEvent>> {
    let open_id = caller.open_id(req.open_id.take())?;
    let (agent_id, open_id) = required(&req, open_id)?;
    caller.check_agent(agent_id)?;
    let open_id = users::check_open_id(Some(open_id))?;
    let history = chat::continued(&req.conversation_id).map(|key| HistoryOf {
        owner: HistoryOwner::External {
            app_id: caller.app.id,
            open_id: &open_id,
        },
        key,
    });
    let usable = agents::usable_for_chat(state, &caller.app, agent_id, history, count.as_ref());
    let (agent, ensured) = match count {
        // The count first: a request it refuses must not register its user. The user is
        // usually known to this process by then, without a round trip.
        Some(_) => {
            let agent = usable.await?;
            (Ok(agent), users::ensure(state, &caller.app, &open_id).await)
        }
        // Side by side, not one after the other: a refusal of the agent removes the user again
        // below, as any later refusal does.
        None => tokio::join!(usable, users::ensure(state, &caller.app, &open_id)),
    };
    let (user, created) = ensured?;
    let started = async {
        let agent = agent?;
        let chat_caller = Caller {
            owner: Owner::External(user),
            billing: Billing::RecordOnly(Some(caller.app.creator_id)),
            resources: ResourceOwner::External(user),
        };
        let chat_req = ChatRequest {
            conversation_id: req.conversation_id,
            content: req.content,
            attachments: req.attachments,
            disabled_mcp_server_ids: req.disabled_mcp_server_ids,
            disabled_skill_ids: req.disabled_skill_ids,
        };
        chat::start(state, chat_caller, agent, chat_req).await
    }
    .await;
    if started.is_err() && created {
        users::remove_created(state, &caller.app, &open_id, user).await?;
    }
    started
}

/// Collects the stream into one answer; an `error` line or the timeout fails the call. The
/// stream is read to its end, past `done`: the turn's work after its answer (a new
/// conversation's title, queueing memory extraction) runs before the answer is sent, as the
/// streamed chat keeps its body open for it. Under Lambda, work left after the response may
/// never run.
pub async fn sync(
    state: &AppState,
    caller: &ExternalCaller,
    req: ExternalChatRequest,
    count: Option<Pending>,
) -> AppResult<SyncAnswer> {
    let mut events = start(state, caller, req, count).await?;
    let mut answer = SyncAnswer {
        conversation_id: String::new(),
        content: String::new(),
        thinking: String::new(),
        duration_ms: 0,
        usage: Default::default(),
        warnings: Vec::new(),
    };
    let collect = async {
        let mut done = false;
        while let Some(event) = events.next().await {
            match event {
                StreamEvent::Text { content } => answer.content.push_str(&content),
                StreamEvent::Thinking { content } => answer.thinking.push_str(&content),
                StreamEvent::Done {
                    conversation_id,
                    usage,
                    duration_ms,
                    ..
                } => {
                    answer.conversation_id = conversation_id;
                    answer.usage = usage;
                    answer.duration_ms = duration_ms;
                    done = true;
                }
                StreamEvent::Error { message, .. } if !done => {
                    return Err(AppError::business(format!("the answer failed: {message}")))
                }
                StreamEvent::Stopped { .. } if !done => {
                    return Err(AppError::business(
                        "the answer was stopped on request (POST /openapi/v1/agent/conversations/stop)",
                    ))
                }
                StreamEvent::Warning { message, .. } if !done => answer.warnings.push(message),
                _ => {}
            }
        }
        match done {
            true => Ok(()),
            false => Err(AppError::business("the answer ended before it was complete")),
        }
    };
    match tokio::time::timeout(SYNC_TIMEOUT, collect).await {
        Ok(result) => result.map(|()| answer),
        // The answer is complete and stored (`done` names its conversation); only the work
        // after it outlasted the limit, and goes on in the turn's task.
        Err(_) if !answer.conversation_id.is_empty() => Ok(answer),
        Err(_) => Err(AppError::business(format!(
            "the answer took longer than {} s; use the streamed chat for long answers",
            SYNC_TIMEOUT.as_secs()
        ))),
    }
}
