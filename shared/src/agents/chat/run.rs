//! One chat turn, streamed: gather context, call the model with tools until it answers
//! (bounded steps), store the assistant's message however the turn ends.

use std::time::Instant;

use futures::future::Shared;
use futures::StreamExt;
use serde_json::{json, Value};
use tokio::sync::mpsc::Sender;
use tokio::sync::oneshot;
use tracing::{Instrument, Span};

use super::attachments::{self, Image};
use super::events::{StreamEvent, TokenUsage};
use super::prompt::{self, Context};
use super::tools::{Disabled, ToolOutput, Toolbox};
use super::{context, title, Caller};
use crate::agents::conversation_repo::{self as repo, FinishedAnswer, HistoryMessage, StartedTurn};
use crate::agents::AgentRow;
use crate::domain::Owner;
use crate::models::client::{check_answer_size, ChatEvent, ChatMessage, ChatRequest, ModelError, ToolCall};
use crate::models::gateway::{self, CallError, ModelHandle};
use crate::models::quota::Hold;
use crate::models::usage::PendingUsage;
use crate::{AppError, AppState};

/// Model calls in one turn; the last one is offered no tools, so the turn always ends.
pub const MAX_STEPS: usize = 8;

/// Tool calls run for one model answer. Models ask for a few at once; the ones past this are
/// answered "not run" (every call needs its answer), so one answer cannot keep the turn busy
/// on hundreds of calls until its time limit ends it with nothing stored as complete.
pub const MAX_TOOL_CALLS_PER_STEP: usize = 16;

pub use crate::models::client::MAX_ANSWER_BYTES;

/// What became of the answer's final statement.
enum Stored {
    Yes,
    /// The message was deleted with its conversation meanwhile; the usage was stored.
    Gone,
    /// The statement failed: nothing of it was written.
    Failed,
}

pub(super) struct Turn {
    /// The request's span, taken into the parts of the turn that open spans, log or call out,
    /// not into the relay of tokens: the turn's task is polled at every token.
    pub span: Span,
    pub state: AppState,
    pub caller: Caller,
    pub agent: AgentRow,
    pub model: ModelHandle,
    /// Tokens held for the first model call when the turn was accepted.
    pub hold: Option<Hold>,
    /// The usage of the turn's model calls, stored with the answer.
    pub usage: PendingUsage,
    /// The turn's rows, stored while the turn starts (`super::start`); an error when they were
    /// not: the request failed, and the turn stops and stores nothing.
    pub rows: Shared<oneshot::Receiver<StartedTurn>>,
    pub conversation_key: String,
    /// The conversation's short-term history before this turn, read with the agent.
    pub history: Vec<HistoryMessage>,
    pub content: String,
    pub images: Vec<Image>,
    pub disabled: Disabled,
}

/// How a turn ended.
enum Outcome {
    Complete,
    /// The `error` line's code (500 but for a refusal of the service's own, such as a quota
    /// used up between two model calls: 403), what the person chatting is told, and what the
    /// stored message keeps (the same but for failed model calls: see `Turn::model_failed`).
    Failed {
        code: i64,
        told: String,
        kept: String,
    },
    /// The client went away.
    Stopped,
    /// A stop was asked for (`POST .../stop`); the client may still be reading.
    StopAsked,
}

impl Outcome {
    fn failed(message: String) -> Self {
        Self::Failed {
            code: 500,
            told: message.clone(),
            kept: message,
        }
    }

    /// A refusal of the service's own, told with its code.
    fn refused(e: &AppError) -> Self {
        let told = e.told();
        Self::Failed {
            code: e.code(),
            told: told.clone(),
            kept: told,
        }
    }
}

#[derive(Default)]
struct Answer {
    text: String,
    thinking: String,
    tool_calls: Vec<Value>,
    usage: TokenUsage,
}

impl Answer {
    fn check_size(&self) -> Result<(), Outcome> {
        check_answer_size(self.text.len() + self.thinking.len()).map_err(Outcome::failed)
    }
}

/// The stream's sending side; a failed send means the client is gone.
struct Out {
    tx: Sender<StreamEvent>,
}

impl Out {
    /// Gathered context, or nothing with a `warning` line saying why.
    async fn or_warn(
        &self,
        source: &'static str,
        gathered: Result<Vec<String>, String>,
    ) -> Result<Vec<String>, Outcome> {
        match gathered {
            Ok(lines) => Ok(lines),
            Err(message) => {
                self.send(StreamEvent::Warning { source, message }).await?;
                Ok(vec![])
            }
        }
    }

    async fn send(&self, event: StreamEvent) -> Result<(), Outcome> {
        self.tx.send(event).await.map_err(|_| Outcome::Stopped)
    }
}

/// What one model call asked for.
#[derive(Default)]
struct Step {
    calls: Vec<ToolCall>,
    /// It stopped at its token limit (finish reason `length`).
    cut_off: bool,
}

/// How often a running turn reads whether a stop was asked for. The first read comes after
/// this long too, so an answer that ends sooner never reads.
const STOP_POLL: std::time::Duration = std::time::Duration::from_secs(1);

/// Resolves once a stop of the turn's answer is asked for: the turn may run on another
/// instance than the request that asks, so the ask is a flag on the answer's row. Never
/// resolves for a turn that was not stored.
async fn stop_asked(state: AppState, rows: Shared<oneshot::Receiver<StartedTurn>>) {
    let Ok(rows) = rows.await else {
        return std::future::pending().await;
    };
    let mut every = tokio::time::interval_at(tokio::time::Instant::now() + STOP_POLL, STOP_POLL);
    // No burst of reads to catch up after a busy spell.
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        match repo::stop_asked(state.db(), rows.assistant_message_id).await {
            Ok(true) => return,
            Ok(false) => {}
            // The next read may pass; the turn goes on meanwhile.
            Err(e) => tracing::warn!(error = %e, "could not read whether a stop was asked for"),
        }
    }
}

impl Turn {
    /// The warning lines for MCP servers whose tools could not be listed. The reasons stay in
    /// the log (they may name internal addresses). The agent's owner is told which servers and
    /// where to look; anyone else chatting with it (a partner's user among them) only that
    /// tools were left out, as server ids are the service's own.
    fn unavailable_tools(&self, ids: &[i64]) -> Vec<String> {
        if self.caller.owner == Owner::User(self.agent.creator_id) {
            return ids
                .iter()
                .map(|id| {
                    format!(
                        "the tools of MCP server {id} could not be listed, so this answer goes on without them \
                         (POST /mcp-server/{id}/test tells why)"
                    )
                })
                .collect();
        }
        match ids.len() {
            0 => vec![],
            n => vec![format!(
                "{n} of this agent's tool servers could not list their tools, so this answer goes on without them"
            )],
        }
    }

    pub async fn run(mut self, tx: Sender<StreamEvent>) {
        let started = Instant::now();
        let out = Out { tx };
        let mut answer = Answer::default();
        let mut hold = self.hold.take();
        let history = std::mem::take(&mut self.history);
        // The turn's large parts are boxed where they are awaited: inline, the turn's future
        // was 57 KB (the model call, every tool, memory and knowledge, the title's own model
        // call), copied whole whenever it moved, and every turn paid for the largest path.
        let limit = self.state.config().chat_turn_timeout;
        // A stop asked for drops the conversation where it is, as a client leaving does: the
        // model stream closes its call and records it, a tool call is cancelled, and what was
        // generated is in `answer`.
        let conversed = tokio::select! {
            biased;
            conversed = tokio::time::timeout(limit, Box::pin(self.converse(&out, &mut answer, &mut hold, history))) => conversed,
            () = stop_asked(self.state.clone(), self.rows.clone()) => Ok(Err(Outcome::StopAsked)),
        };
        // Tokens held for a model call the turn never made (it failed or stopped before one)
        // go back before the stream ends: under Lambda, a task left to run after the answer
        // may never run.
        if let Some(unused) = hold.take() {
            unused.settle(0).await;
        }
        // The turn was not stored: the request answers with that error once this task has
        // ended (or went away before its statement returned), no stream was handed out, and
        // there is no message to finish. A model call it began is recorded before it ends.
        let Ok(rows) = self.rows.clone().await else {
            self.usage.store().await;
            return;
        };
        let outcome = match conversed {
            Ok(Ok(())) => Outcome::Complete,
            Ok(Err(o)) => o,
            Err(_) => Outcome::failed(format!(
                "the turn passed its time limit of {} s and was stopped",
                limit.as_secs()
            )),
        };
        let duration_ms = started.elapsed().as_millis() as u64;
        let stored = self
            .store(rows.assistant_message_id, &answer, &outcome, duration_ms)
            .instrument(self.span.clone())
            .await;
        // An answer the conversation does not keep is not reported complete.
        let outcome = match (outcome, stored) {
            (Outcome::Complete, Stored::Failed) => {
                Outcome::failed("the answer could not be stored; try again".to_owned())
            }
            (Outcome::Complete, Stored::Gone) => {
                Outcome::failed("the conversation was deleted while it was being answered".to_owned())
            }
            (outcome, _) => outcome,
        };
        match &outcome {
            Outcome::Complete => {
                let _ = out
                    .send(StreamEvent::Done {
                        conversation_id: self.conversation_key.clone(),
                        message_id: rows.assistant_message_id,
                        usage: answer.usage,
                        duration_ms,
                    })
                    .await;
                self.remember(rows.conversation_id).instrument(self.span.clone()).await;
                if rows.created {
                    Box::pin(title::generate(
                        &self.state,
                        &self.model,
                        self.caller.billing,
                        rows.conversation_id,
                        &self.content,
                        &answer.text,
                    ))
                    .instrument(self.span.clone())
                    .await;
                }
            }
            Outcome::Failed { code, told, kept } => {
                // The response said 200 long ago: this line is the failure's only trace in
                // the log (a time limit, a too large answer, a model's failure).
                tracing::warn!(
                    parent: &self.span,
                    agent_id = self.agent.id,
                    model_id = self.model.row.id,
                    code,
                    error = %kept,
                    "the answer ended with an error"
                );
                let _ = out
                    .send(StreamEvent::Error {
                        code: *code,
                        message: told.clone(),
                    })
                    .await;
            }
            Outcome::StopAsked => {
                let _ = out
                    .send(StreamEvent::Stopped {
                        conversation_id: self.conversation_key.clone(),
                        message_id: rows.assistant_message_id,
                        usage: answer.usage,
                        duration_ms,
                    })
                    .await;
            }
            Outcome::Stopped => {}
        }
    }

    /// `hold` goes to the first model call; left unused (the turn failed or stopped before
    /// one), `run` gives it back.
    async fn converse(
        &self,
        out: &Out,
        answer: &mut Answer,
        hold: &mut Option<Hold>,
        history: Vec<HistoryMessage>,
    ) -> Result<(), Outcome> {
        // Recall and retrieval pay for their calls first; the first model call takes what is
        // left when it starts.
        let retrieves = self.agent.memory_enabled || (self.agent.rag_enabled && self.agent.rag_id.is_some());
        let asked = context::Asked {
            query: &self.content,
            history: &history,
            model: &self.model,
        };
        let recalled = async {
            if let (true, Some(hold)) = (retrieves, hold.as_mut()) {
                hold.lend_above(gateway::question_estimate(&self.content)).await;
            }
            tokio::join!(
                context::memories(&self.state, &self.agent, self.caller, &self.content),
                context::knowledge(&self.state, &self.agent, asked, self.caller.billing),
            )
        };
        // Independent reads, side by side: each one waited for in turn would add its round
        // trip to the time before the first token.
        let gathered = async {
            tokio::join!(
                attachments::data_uris(&self.state, &self.images),
                Toolbox::for_agent(&self.state, &self.agent, &self.disabled, self.caller.owner),
                recalled,
            )
        };
        // A client that leaves while the context is gathered (recall and retrieval embed the
        // question, MCP servers list their tools) is noticed at once: no model call follows.
        let (images, toolbox, (memories, knowledge)) = tokio::select! {
            _ = out.tx.closed() => return Err(Outcome::Stopped),
            gathered = Box::pin(gathered).instrument(self.span.clone()) => gathered,
        };
        let images = images.map_err(Outcome::failed)?;
        let ctx = Context {
            tool_notes: toolbox.prompt_notes.clone(),
            memories: out.or_warn("memory", memories).await?,
            knowledge: out.or_warn("knowledge", knowledge).await?,
        };
        for message in self.unavailable_tools(&toolbox.unavailable) {
            out.send(StreamEvent::Warning { source: "mcp", message }).await?;
        }
        let system = prompt::system_prompt(&self.agent.instruction, &ctx);
        let mut messages = prompt::messages(system, history, &self.content, images);

        // Tools start only in the first half of the turn's time, so a turn whose tools hang
        // (16 calls of a minute each pass the limit) still has time left to answer.
        let tools_until = Instant::now() + self.state.config().chat_turn_timeout / 2;
        for step in 0..MAX_STEPS {
            let tools = match step + 1 < MAX_STEPS && Instant::now() < tools_until {
                true => toolbox.specs().to_vec(),
                false => vec![],
            };
            let offered = !tools.is_empty();
            let req = ChatRequest {
                messages: messages.clone(),
                tools,
                ..Default::default()
            };
            let Step { calls, cut_off } = self.model_step(out, &req, answer, hold.take()).await?;
            if calls.is_empty() {
                return Ok(());
            }
            // Running them would give a model (or an endpoint) that ignores the offer more
            // rounds than MAX_STEPS, and end the turn with no answer stored as complete.
            if !offered {
                return Err(Outcome::failed(
                    "the model asked for tools it was not offered; the turn was stopped".to_owned(),
                ));
            }
            // Tools act outside the turn (an MCP server's may change things elsewhere): they run
            // only for a turn that is stored, not for one whose request failed meanwhile and
            // may be sent again.
            self.stored(out).await?;
            messages.push(ChatMessage::assistant_tool_calls(&calls));
            let last = calls.len() - 1;
            for (i, call) in calls.into_iter().enumerate() {
                // Its arguments may have ended where the limit fell, even as valid JSON ("").
                let result = if cut_off && i == last {
                    "not run: your answer reached its token limit while asking for this call; ask again".to_owned()
                } else if i >= MAX_TOOL_CALLS_PER_STEP {
                    format!(
                        "not run: at most {MAX_TOOL_CALLS_PER_STEP} tool calls are run per answer; ask again for the ones still needed"
                    )
                } else if Instant::now() >= tools_until {
                    "not run: this turn's time for tools is spent; answer with what you have".to_owned()
                } else {
                    Box::pin(self.run_tool(out, &toolbox, &call, answer)).await?
                };
                messages.push(ChatMessage::tool_result(call.id, result));
            }
        }
        Ok(())
    }

    /// Waits until the turn's rows are stored; a turn that was not stops.
    async fn stored(&self, out: &Out) -> Result<StartedTurn, Outcome> {
        tokio::select! {
            _ = out.tx.closed() => Err(Outcome::Stopped),
            rows = self.rows.clone() => rows.map_err(|_| Outcome::Stopped),
        }
    }

    /// One streamed model call; returns the tools it asked for (none: the answer is complete).
    async fn model_step(
        &self,
        out: &Out,
        req: &ChatRequest,
        answer: &mut Answer,
        hold: Option<Hold>,
    ) -> Result<Step, Outcome> {
        let (state, model, billing) = (&self.state, &self.model, self.caller.billing);
        let usage = Some(&self.usage);
        // The call's own span (and the hold's) opens below the request's; the stream then
        // records on it without being entered.
        let opened = async {
            match hold {
                Some(hold) => gateway::chat_stream_held(state, model, billing, hold, "chat", req, usage).await,
                None => gateway::chat_stream(state, model, billing, "chat", req, usage).await,
            }
        };
        let stream = tokio::select! {
            _ = out.tx.closed() => return Err(Outcome::Stopped),
            stream = opened.instrument(self.span.clone()) => stream,
        };
        let mut stream = stream.map_err(|e| match e {
            CallError::Model(e) => self.model_failed(&e),
            CallError::Refused(e) => Outcome::refused(&e),
        })?;
        let mut step = Step::default();
        // An endpoint may report a call's usage more than once, each a running total (vLLM's
        // continuous usage stats): the call's last report counts, as the gateway records it.
        let before = answer.usage;
        loop {
            let event = tokio::select! {
                // Dropping the model stream closes the upstream connection.
                _ = out.tx.closed() => return Err(Outcome::Stopped),
                event = stream.next() => event,
            };
            match event {
                None => return Ok(step),
                Some(Ok(ChatEvent::Reasoning(t))) => {
                    answer.thinking.push_str(&t);
                    answer.check_size()?;
                    out.send(StreamEvent::Thinking { content: t }).await?;
                }
                Some(Ok(ChatEvent::Text(t))) => {
                    answer.text.push_str(&t);
                    answer.check_size()?;
                    out.send(StreamEvent::Text { content: t }).await?;
                }
                Some(Ok(ChatEvent::ToolCalls(c))) => step.calls.extend(c),
                Some(Ok(ChatEvent::Usage(u))) if u.total() > 0 => {
                    answer.usage.prompt_tokens = before.prompt_tokens + u.prompt_tokens;
                    answer.usage.completion_tokens = before.completion_tokens + u.completion_tokens;
                }
                Some(Ok(ChatEvent::Usage(_))) => {}
                Some(Ok(ChatEvent::Finish(reason))) => step.cut_off = reason == "length",
                Some(Ok(ChatEvent::Dropped(_))) => {}
                Some(Err(e)) => return Err(self.model_failed(&e)),
            }
        }
    }

    async fn run_tool(
        &self,
        out: &Out,
        toolbox: &Toolbox,
        call: &ToolCall,
        answer: &mut Answer,
    ) -> Result<String, Outcome> {
        // An answer cut short (its token limit) can end inside a call's arguments. Run with
        // none instead, a tool whose arguments are all optional would do what nobody asked.
        let parsed = match call.arguments.trim() {
            "" => Ok(json!({})),
            raw => serde_json::from_str::<Value>(raw),
        };
        // Shown and stored without NUL (escaped in the arguments, it parses into one): the
        // answer's statement would fail on it, and the whole answer would be lost.
        let arguments = crate::json::without_nul(match &parsed {
            Ok(arguments) => arguments.clone(),
            Err(_) => Value::String(call.arguments.clone()),
        });
        let server_id = toolbox.server_of(&call.name);
        out.send(StreamEvent::ToolCall {
            name: call.name.clone(),
            server_id,
            arguments: arguments.clone(),
        })
        .await?;
        let result = match parsed {
            Ok(arguments) => tokio::select! {
                _ = out.tx.closed() => return Err(Outcome::Stopped),
                result = toolbox.call(&self.state, &call.name, &arguments).instrument(self.span.clone()) => result,
            },
            Err(e) => ToolOutput::failed(format!(
                "the arguments of {} are not valid JSON ({e}); the tool was not run",
                call.name
            )),
        };
        answer.tool_calls.push(json!({
            "name": call.name, "serverId": server_id, "arguments": arguments, "ok": result.ok,
        }));
        out.send(StreamEvent::ToolResult {
            name: call.name.clone(),
            ok: result.ok,
        })
        .await?;
        Ok(result.text)
    }

    /// Counts the round for long-term memory (extraction is queued every `extractionInterval`).
    async fn remember(&self, conversation_id: i64) {
        if !self.agent.memory_enabled {
            return;
        }
        let queued = crate::memory::after_round(
            &self.state,
            self.agent.id,
            self.caller.owner,
            conversation_id,
            self.agent.memory_config_id,
        )
        .await;
        if let Err(e) = queued {
            tracing::warn!(agent_id = self.agent.id, error = %e, "queueing memory extraction failed");
        }
    }

    /// A failed model call. The endpoint's own words (an error body, an address) are told only
    /// to the owner of the model's config: anyone else chatting on an administrator's model
    /// would otherwise read what an internal service answers. The stored message and the log
    /// keep the whole error for whoever looks into it.
    fn model_failed(&self, e: &ModelError) -> Outcome {
        let _in_request = self.span.enter();
        // Logged where the turn ends with it, once (in `run`).
        let kept = format!("the model call failed: {e}");
        let own = matches!(self.caller.owner, Owner::User(id) if id == self.model.row.creator_id);
        let told = format!("the model call failed: {}", e.told_to(own));
        Outcome::Failed { code: 500, told, kept }
    }

    /// Whether the answer was stored. The statement is tried twice (a connection the database
    /// closed fails its first one); when it fails, the usage records go back to be stored on
    /// their own, and the message is left to housekeeping, which marks it failed.
    async fn store(&self, message_id: i64, answer: &Answer, outcome: &Outcome, duration_ms: u64) -> Stored {
        let (status, error) = match outcome {
            Outcome::Complete => (1, None),
            Outcome::Failed { kept, .. } => (2, Some(kept.as_str())),
            Outcome::Stopped => (3, Some("the client went away before the answer finished")),
            Outcome::StopAsked => (3, Some("stopped on request")),
        };
        // An endpoint's error body may hold a NUL too.
        let error = error.map(crate::text::model_text);
        let finished = FinishedAnswer {
            content: &answer.text,
            thinking: &answer.thinking,
            tool_calls: Value::Array(answer.tool_calls.clone()),
            tool_call_count: answer.tool_calls.len() as i32,
            status,
            error: error.as_deref(),
            prompt_tokens: answer.usage.prompt_tokens as i64,
            completion_tokens: answer.usage.completion_tokens as i64,
            duration_ms: duration_ms as i64,
        };
        // A call the turn dropped (a stop, a client leaving) settles its hold in a task: its
        // tokens are back before the answer ends, after which under Lambda it might never run.
        self.usage.settled().await;
        let usage = self.usage.take();
        let finish = || repo::finish_assistant_message(self.state.db(), message_id, &finished, &usage);
        let mut stored = finish().await;
        if stored.is_err() {
            stored = finish().await;
        }
        match stored {
            Ok(true) => Stored::Yes,
            Ok(false) => Stored::Gone,
            Err(e) => {
                tracing::error!(message_id, error = %e, "storing the assistant's message failed");
                self.usage.give_back(usage);
                Stored::Failed
            }
        }
    }
}
