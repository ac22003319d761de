//! Agent chat: checks everything that can be refused, stores the user's message (meanwhile the
//! answer's task, `run`, already gathers context and calls the model), then streams what the
//! task sends; the task stores the assistant's message however the turn ends.

pub mod attachments;
mod context;
pub mod events;
mod prompt;
mod run;
pub mod title;
pub mod tools;

use futures::stream::BoxStream;
use futures::FutureExt;
use serde::Deserialize;
use tokio::sync::oneshot;
use utoipa::ToSchema;

use self::attachments::{AttachmentIn, Image, ResourceOwner};
pub use self::events::{StreamEvent, TokenUsage};
pub use self::prompt::alternating;
pub use self::run::{MAX_ANSWER_BYTES, MAX_TOOL_CALLS_PER_STEP};
use self::tools::Disabled;
use super::conversation_repo::{self as repo, NewTurn, StartedTurn};
use super::repo::ChatAgentRow;
use super::AgentRow;
use crate::admission::UserAdmission;
use crate::apps::routing::NodeRoute;
use crate::domain::Owner;
use crate::domain::{spawn_joined_stream, spawn_stream};
use crate::models::gateway::{self, Billing, ModelHandle};
use crate::models::usage::PendingUsage;
use crate::models::{ModelConfigRow, ModelType};
use crate::resources::repo::Reader;
use crate::{validate, AppError, AppResult, AppState};

pub const MAX_CONTENT_CHARS: usize = 32_000;
/// More than an agent can have of either.
const MAX_DISABLED_IDS: usize = 500;

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChatRequest {
    /// Chosen by the client (a UUID is generated when absent and returned in `done`).
    pub conversation_id: Option<String>,
    #[schema(required = true)]
    pub content: Option<String>,
    /// `[{type: IMAGE, resourceId}]`.
    pub attachments: Option<Vec<AttachmentIn>>,
    pub disabled_mcp_server_ids: Option<Vec<i64>>,
    pub disabled_skill_ids: Option<Vec<i64>>,
}

/// Who is chatting and who pays.
#[derive(Debug, Clone, Copy)]
pub struct Caller {
    pub owner: Owner,
    pub billing: Billing,
    /// Whose uploads may be attached.
    pub resources: ResourceOwner,
}

/// The agent's chat model (its own or the default one), from the config read with the agent.
fn chat_model(state: &AppState, agent: &AgentRow, config: Option<ModelConfigRow>) -> AppResult<ModelHandle> {
    let model = match agent.chat_model_id {
        Some(id) => gateway::checked(state, id, config, ModelType::Chat),
        None => gateway::checked_default(state, config, ModelType::Chat),
    };
    model.map_err(|e| e.refusal(|told| format!("this agent has no usable chat model: {told}")))
}

/// The conversation a request continues, as `conversation_key` will read it: the chat's first
/// read looks its history up.
pub fn continued(conversation_id: &Option<String>) -> Option<&str> {
    conversation_id.as_deref().map(str::trim).filter(|k| !k.is_empty())
}

fn conversation_key(value: Option<String>) -> AppResult<String> {
    match validate::optional(value) {
        Some(key) => {
            validate::length("conversationId", &key, 1, 128)?;
            Ok(key)
        }
        None => Ok(uuid::Uuid::new_v4().to_string()),
    }
}

/// An admin-API user's chat with an agent they may see (`/agent/{id}/chat`), paid from their
/// quota, with their own uploads as attachments.
pub async fn start_as_user(
    state: &AppState,
    caller: UserAdmission,
    agent_id: i64,
    req: ChatRequest,
) -> AppResult<BoxStream<'static, StreamEvent>> {
    let continued = continued(&req.conversation_id);
    let (user, chat_agent) = super::service::visible_for_chat(state, caller, agent_id, continued).await?;
    let caller = Caller {
        owner: Owner::User(user.id),
        billing: Billing::of(&user),
        resources: ResourceOwner::User(Reader {
            user_id: user.id,
            admin: user.is_admin(),
        }),
    };
    start(state, caller, chat_agent, req).await
}

fn check_disabled_ids(mcp_server_ids: &Option<Vec<i64>>, skill_ids: &Option<Vec<i64>>) -> AppResult<()> {
    for (field, ids) in [
        ("disabledMcpServerIds", mcp_server_ids),
        ("disabledSkillIds", skill_ids),
    ] {
        if ids.as_ref().is_some_and(|ids| ids.len() > MAX_DISABLED_IDS) {
            return Err(AppError::validation(format!(
                "{field} may hold at most {MAX_DISABLED_IDS} ids"
            )));
        }
    }
    Ok(())
}

/// Stores the user's message and the assistant's placeholder with the checked images. A turn
/// with images counts those the conversation holds and stores its own under one lock: two such
/// turns at once would each count before the other stored, and together pass the limit. The
/// images are looked up before the lock's transaction: looked up inside, on a second pooled
/// connection, turns holding one connection each and waiting for another could take the
/// whole pool.
async fn store_turn_with_images<'n>(
    state: &AppState,
    caller: Caller,
    (agent_id, key): (i64, &str),
    images: Vec<Image>,
    new_turn: impl Fn(&[Image]) -> AppResult<NewTurn<'n>>,
) -> AppResult<(StartedTurn, Vec<Image>)> {
    let mut tx = state.db().begin().await?;
    repo::lock_conversation(&mut tx, agent_id, caller.owner, key).await?;
    let images_so_far = match repo::find(&mut *tx, agent_id, caller.owner, key).await? {
        Some(c) => repo::image_count(&mut *tx, c.id).await?,
        None => 0,
    };
    attachments::check_count(images_so_far, images.len())?;
    let started = repo::start_turn(&mut *tx, &new_turn(&images)?).await?;
    tx.commit().await?;
    Ok((started, images))
}

/// Starts a chat turn: refusals come back as errors with nothing stored; once the user's
/// message is stored, everything else is reported on the stream.
pub async fn start(
    state: &AppState,
    caller: Caller,
    chat_agent: ChatAgentRow,
    req: ChatRequest,
) -> AppResult<BoxStream<'static, StreamEvent>> {
    let ChatAgentRow {
        agent,
        chat_model_config,
        history,
    } = chat_agent;
    let content = validate::required("content", req.content)?;
    validate::length("content", &content, 1, MAX_CONTENT_CHARS)?;
    check_disabled_ids(&req.disabled_mcp_server_ids, &req.disabled_skill_ids)?;
    let key = conversation_key(req.conversation_id)?;
    // The tokens of the first model call are held now, so a chat the quota cannot pay for is
    // refused before anything is stored; the call itself tops them up to its real size.
    let model = chat_model(state, &agent, chat_model_config.map(|c| c.0))?;
    let model = match &agent.app_id {
        Some(app_id) => model.via(NodeRoute::for_conversation(state, app_id, &key)),
        None => model,
    };
    // The images are checked before anything is held: a refused attachment must leave the
    // quota as it was, and a spent quota must not hide which attachment is wrong.
    let images = match req.attachments.unwrap_or_default() {
        items if items.is_empty() => None,
        items => Some(attachments::check(state, items, &model.row, caller.resources).await?),
    };
    let hold = gateway::hold_turn(state, &model, caller.billing, &content).await?;
    let title = title::fallback(&content);
    let (agent_id, model_id) = (agent.id, model.row.id);
    let new_turn = |images: &[Image]| -> AppResult<NewTurn<'_>> {
        Ok(NewTurn {
            agent_id,
            owner: caller.owner,
            conversation_key: &key,
            title: &title,
            content: &content,
            attachments: serde_json::to_value(images).map_err(|e| AppError::Internal(e.into()))?,
            model_id,
        })
    };
    let (stored, rows) = oneshot::channel();
    let mut turn = run::Turn {
        span: tracing::Span::current(),
        state: state.clone(),
        caller,
        agent,
        model,
        hold: Some(hold),
        usage: PendingUsage::new(state.db().clone()),
        rows: rows.shared(),
        conversation_key: key.clone(),
        history: history.0,
        content: content.clone(),
        images: vec![],
        disabled: Disabled {
            mcp_server_ids: req.disabled_mcp_server_ids.unwrap_or_default(),
            skill_ids: req.disabled_skill_ids.unwrap_or_default(),
        },
    };
    if let Some(images) = images {
        let (started, images) = match store_turn_with_images(state, caller, (agent_id, &key), images, new_turn).await {
            Ok(stored) => stored,
            Err(e) => {
                // Given back before the answer: dropped, the hold went back in a task that
                // may never run under Lambda, and a retry sent at once met a smaller quota.
                if let Some(hold) = turn.hold.take() {
                    hold.settle(0).await;
                }
                return Err(e);
            }
        };
        turn.images = images;
        let _ = stored.send(started);
        return Ok(spawn_stream(move |tx| turn.run(tx)));
    }
    // Nothing but the database can refuse a turn without images now, so its context is
    // gathered and the model called while it is stored, one round trip sooner (tools wait for
    // it). The stream is handed out only once the turn is stored: what the task sends waits in
    // it until then. If storing fails, the dropped stream stops the task, which stores nothing
    // but the usage of a model call it began, and the request answers with that error once
    // the task has ended: under Lambda nothing may run after the answer.
    let new = new_turn(&[])?;
    let (events, task) = spawn_joined_stream(move |tx| turn.run(tx));
    match repo::start_turn(state.db(), &new).await {
        Ok(started) => {
            let _ = stored.send(started);
            Ok(events)
        }
        Err(e) => {
            drop((events, stored));
            let _ = task.await;
            Err(e.into())
        }
    }
}
