//! Every model call of the service goes through here: resolve the config, hold tokens of the
//! caller's quota, call (capped at what is held), record usage, settle the hold to what was used.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use tracing::field::Empty;
use tracing::{Instrument, Span};

use super::client::{
    self, ChatEvent, ChatRequest, ChatResponse, ChatStream, ContentPart, Embeddings, Endpoint, InputKind,
    MessageContent, ModelError, RerankHit, ToolCall, Usage,
};
use super::quota::{self, Hold};
use super::trace_content::{input_messages, output_messages, record_content, INPUT, OUTPUT};
use super::usage::{self, PendingUsage, UsageRecord};
use super::{repo, ModelConfigRow, ModelType};
use crate::domain::CurrentUser;
use crate::{AppError, AppResult, AppState};

/// A model config ready to call.
#[derive(Debug, Clone)]
pub struct ModelHandle {
    pub row: ModelConfigRow,
    pub endpoint: Endpoint,
    /// Where chat calls run when not in this process (an app's client nodes).
    pub via: Option<Arc<dyn ChatTransport>>,
    /// The longest a buffered call may take, retries included, whatever the config's own
    /// timeout and retries; past it the call fails as timed out, and is recorded so.
    pub time_limit: Option<Duration>,
}

impl ModelHandle {
    pub fn new(row: ModelConfigRow, endpoint: Endpoint) -> Self {
        Self {
            row,
            endpoint,
            via: None,
            time_limit: None,
        }
    }

    /// The same model with its buffered calls cut at `limit`.
    pub fn within(self, limit: Duration) -> Self {
        Self {
            time_limit: Some(limit),
            ..self
        }
    }

    /// The same model with its buffered calls cut at what is left before `deadline`, if any.
    pub fn until(self, deadline: Option<tokio::time::Instant>) -> Self {
        match deadline {
            Some(deadline) => self.within(deadline.saturating_duration_since(tokio::time::Instant::now())),
            None => self,
        }
    }

    /// The same model with its chat calls run by `via`.
    pub fn via(self, via: Arc<dyn ChatTransport>) -> Self {
        Self { via: Some(via), ..self }
    }

    async fn open_chat_stream(&self, state: &AppState, req: &ChatRequest) -> Result<ChatStream, ModelError> {
        match &self.via {
            Some(via) => via.chat_stream(&self.endpoint, req).await,
            None => state.models().chat_stream(&self.endpoint, req).await,
        }
    }
}

/// Runs streamed chat calls somewhere else; metering and quota stay with the gateway.
#[async_trait]
pub trait ChatTransport: Send + Sync + std::fmt::Debug {
    async fn chat_stream(&self, endpoint: &Endpoint, req: &ChatRequest) -> Result<ChatStream, ModelError>;
}

/// Who pays for a call.
#[derive(Debug, Clone, Copy)]
pub enum Billing {
    /// Checked against and deducted from this user's quota.
    User(i64),
    /// Recorded for statistics only (an app's external users, memory upkeep).
    RecordOnly(Option<i64>),
}

impl Billing {
    /// How `user`'s own calls are paid: administrators have no quota, so their calls are only
    /// recorded (the quota check would read their row to learn just that).
    pub fn of(user: &CurrentUser) -> Self {
        match user.is_admin() {
            true => Self::RecordOnly(Some(user.id)),
            false => Self::User(user.id),
        }
    }

    /// The user the call is recorded under, if any.
    pub fn user_id(self) -> Option<i64> {
        match self {
            Self::User(id) => Some(id),
            Self::RecordOnly(id) => id,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// Refused before calling (quota, missing model ...).
    #[error(transparent)]
    Refused(#[from] AppError),
    #[error(transparent)]
    Model(#[from] ModelError),
}

/// A failed call as an answer: what failed, without the endpoint's own words, which may come
/// from a service inside the operator's network that the caller must not read (see
/// [`ModelError::brief`]); the log keeps them. Connectivity tests and chat tell the config's
/// owner the whole error themselves.
impl CallError {
    /// Worth another delivery of queued work (`ModelError::may_pass`, `AppError::may_pass`).
    pub fn may_pass(&self) -> bool {
        match self {
            Self::Model(m) => m.may_pass(),
            Self::Refused(e) => e.may_pass(),
        }
    }
}

impl From<CallError> for AppError {
    fn from(err: CallError) -> Self {
        match err {
            CallError::Refused(e) => e,
            CallError::Model(e) => {
                tracing::warn!(error = %e, "model call failed");
                AppError::business(format!("the model call failed: {}", e.brief()))
            }
        }
    }
}

impl From<sqlx::Error> for CallError {
    fn from(err: sqlx::Error) -> Self {
        Self::Refused(err.into())
    }
}

pub fn endpoint_of(state: &AppState, row: &ModelConfigRow) -> AppResult<Endpoint> {
    Ok(Endpoint {
        base_url: row.api_endpoint.clone(),
        api_key: state.secrets().open(&row.api_key_enc)?,
        model: row.model_key.clone(),
        options: row.config_json.clone(),
        reach: row.reach(),
    })
}

/// An enabled model config (of an enabled provider) of the expected type.
pub async fn load(state: &AppState, id: i64, expected: ModelType) -> AppResult<ModelHandle> {
    checked(state, id, repo::config(state.db(), id).await?, expected)
}

/// Model `id`'s config, already read with something else (None: there is no such config),
/// refused as `load` refuses it.
pub fn checked(state: &AppState, id: i64, row: Option<ModelConfigRow>, expected: ModelType) -> AppResult<ModelHandle> {
    let row = row.ok_or_else(|| AppError::not_found("model config"))?;
    if row.model_type() != expected {
        return Err(AppError::validation(format!(
            "model {id} is a {} model, not {}",
            row.model_type,
            expected.as_str()
        )));
    }
    if !row.is_enabled {
        return Err(AppError::business(format!("model {} is disabled", row.model_name)));
    }
    if !row.provider_enabled {
        return Err(AppError::business(format!(
            "model {} is disabled with its provider {}",
            row.model_name, row.provider_name
        )));
    }
    let endpoint = endpoint_of(state, &row)?;
    Ok(ModelHandle::new(row, endpoint))
}

/// The default model of a type, or a message saying none is configured.
pub async fn default_model(state: &AppState, model_type: ModelType) -> AppResult<ModelHandle> {
    checked_default(
        state,
        repo::default_config(state.db(), model_type.as_str()).await?,
        model_type,
    )
}

/// The default model's config, already read with something else (None: none is set), refused
/// as `default_model` refuses it.
pub fn checked_default(state: &AppState, row: Option<ModelConfigRow>, model_type: ModelType) -> AppResult<ModelHandle> {
    let t = model_type.as_str();
    let row = match row {
        None => return Err(AppError::business(format!("no default {t} model is configured"))),
        // Said as it is: "none is configured" sent an administrator looking for a default that
        // `/ai-model/default` showed them.
        Some(r) if !r.is_usable() => {
            return Err(AppError::business(format!(
                "no default {t} model is configured that can be used: the default, model config {}, \
                 is disabled (or its provider is)",
                r.id
            )))
        }
        Some(r) => r,
    };
    let endpoint = endpoint_of(state, &row)?;
    Ok(ModelHandle::new(row, endpoint))
}

/// Holds up to `want` tokens for `billing`'s user (refused when none are left); unlimited for
/// administrators and record-only calls. Only a real hold gets a `quota_hold` span: an
/// unlimited one asks nothing of the database, and its span would say nothing but cost a
/// span's export in every administrator's and every external chat.
pub async fn hold(state: &AppState, billing: Billing, want: u64) -> AppResult<Hold> {
    match billing {
        Billing::User(id) => {
            let span = tracing::info_span!("quota_hold", user.id = id, want);
            Hold::take(state.db(), id, want).instrument(span).await
        }
        Billing::RecordOnly(_) => Ok(Hold::unlimited(state.db())),
    }
}

/// Holds all that a call which cannot be capped (an embedding, a rerank) is estimated to use:
/// a quota that cannot cover it is refused, as a chat whose prompt it cannot cover is. Taking
/// the little left, the call ran whole and was charged at most twice what it held.
async fn hold_whole(state: &AppState, billing: Billing, want: u64) -> AppResult<Hold> {
    let hold = hold(state, billing, want).await?;
    match hold.limit() {
        Some(held) if held < want => Err(given_back(hold, quota::too_small(held, want)).await),
        _ => Ok(hold),
    }
}

/// `refusal`, once `hold` is given back. Dropped, a hold goes back in a task of its own, which
/// may never run under Lambda once the refusal is answered: the user's last tokens stayed
/// held, and the next request met a quota used up.
async fn given_back<E>(hold: Hold, refusal: E) -> E {
    hold.settle(0).await;
    refusal
}

/// What a turn (a chat's, a Q&A question's, an agent's draft) holds before anything is stored:
/// the question and a full answer; the first model call tops it up to the size of its real
/// request. A quota that cannot pay even for the question is refused here, with nothing stored:
/// taking the little left, the turn was stored and then ended with the quota's error.
pub async fn hold_turn(state: &AppState, model: &ModelHandle, billing: Billing, question: &str) -> AppResult<Hold> {
    // The prompt is the question alone: `question_estimate`.
    let (question_tokens, answer) = chat_size(state, model, billing.user_id(), &asking(question));
    let hold = hold(state, billing, question_tokens + answer).await?;
    match hold.limit() {
        Some(held) if held < question_tokens => Err(given_back(hold, quota::too_small(held, question_tokens)).await),
        _ => Ok(hold),
    }
}

/// The question's share of `hold_turn`'s hold: what a turn keeps held while its retrieval runs.
pub fn question_estimate(question: &str) -> u64 {
    prompt_bound(&asking(question))
}

fn asking(question: &str) -> ChatRequest {
    ChatRequest {
        messages: vec![super::client::ChatMessage::user(question)],
        ..Default::default()
    }
}

/// Tokens per image when holding quota: a data URI's size says little about what a model charges.
const IMAGE_TOKENS: u64 = 1_500;

/// An upper estimate of tokens for `bytes` of text: one per 3 bytes (English runs about 4 per
/// token, CJK about 3 bytes per token), so a hold rarely falls short.
fn text_tokens(bytes: usize) -> u64 {
    bytes.div_ceil(3) as u64
}

/// An upper estimate of a chat request's prompt tokens, for holding quota.
fn prompt_bound(req: &ChatRequest) -> u64 {
    let (bytes, images) = prompt_size(req);
    text_tokens(bytes) + images * IMAGE_TOKENS
}

/// A chat request's prompt as the model reads it: the bytes of its text (messages, earlier tool
/// calls, the tools offered) and its images, each counted apart (a data URI's size says little
/// about what a model charges for the picture).
fn prompt_size(req: &ChatRequest) -> (usize, u64) {
    let mut bytes = match req.tools.is_empty() {
        true => 0,
        false => serde_json::to_string(&req.tools).map(|s| s.len()).unwrap_or(0),
    };
    let mut images = 0;
    for m in &req.messages {
        bytes += 8 + m
            .tool_calls
            .iter()
            .map(|c| c.function.name.len() + c.function.arguments.len())
            .sum::<usize>();
        match &m.content {
            Some(MessageContent::Text(t)) => bytes += t.len(),
            Some(MessageContent::Parts(parts)) => {
                for part in parts {
                    match part {
                        ContentPart::Text { text } => bytes += text.len(),
                        ContentPart::ImageUrl { .. } => images += 1,
                    }
                }
            }
            None => {}
        }
    }
    (bytes, images)
}

/// The tokens a chat call may need: its prompt (estimated from above) and its longest answer.
/// The config's `maxTokens` sizes the answer beyond `QUOTA_COMPLETION_RESERVE_TOKENS` only
/// for a payer who could change it (a GLOBAL config, which administrators keep, or their own):
/// another user's config behind their agent, set to a million, held and could charge a whole
/// quota on each call.
fn chat_size(state: &AppState, model: &ModelHandle, payer: Option<i64>, req: &ChatRequest) -> (u64, u64) {
    let reserve = state.config().quota_completion_reserve;
    let trusted = model.row.scope == "GLOBAL" || Some(model.row.creator_id) == payer;
    let configured = model
        .endpoint
        .option_u64("maxTokens")
        .map(|n| if trusted { n } else { n.min(reserve) });
    let answer = req.max_tokens.or(configured).unwrap_or(reserve);
    (prompt_bound(req), answer)
}

/// Tops `hold` up for `req` and caps the answer at what is held; refuses when the hold cannot
/// even cover the prompt, the hold given back.
async fn fit(
    state: &AppState,
    model: &ModelHandle,
    mut hold: Hold,
    req: &ChatRequest,
) -> Result<(Hold, ChatRequest), CallError> {
    let mut req = req.clone();
    if hold.limit().is_none() {
        return Ok((hold, req));
    }
    let (prompt, answer) = chat_size(state, model, hold.payer(), &req);
    if let Err(e) = hold.top_up(prompt + answer).await {
        return Err(given_back(hold, e.into()).await);
    }
    let held = hold.limit().unwrap_or(0);
    if held <= prompt {
        return Err(given_back(hold, quota::too_small(held, prompt + 1).into()).await);
    }
    // Always sent, the reserve included when nobody asked for a length: a quota is a promise,
    // and an answer left uncapped is charged at most `quota::MAX_OVERRUN` holds whatever it
    // used. A model that takes fewer tokens needs its config's `maxTokens` (the connectivity
    // test says so).
    req.max_tokens = Some(answer.min(held - prompt));
    Ok((hold, req))
}

/// Holds what a chat call may need and fits the request to the hold.
async fn hold_chat(
    state: &AppState,
    model: &ModelHandle,
    billing: Billing,
    req: &ChatRequest,
) -> Result<(Hold, ChatRequest), CallError> {
    let (prompt, answer) = chat_size(state, model, billing.user_id(), req);
    let hold = hold(state, billing, prompt + answer).await?;
    fit(state, model, hold, req).await
}

/// Records the call and settles the hold: to its tokens when `charge`, to nothing otherwise.
/// Failures to record are logged, never returned, so bookkeeping cannot fail a user's answer.
#[tracing::instrument(name = "quota_settle", skip_all, fields(charged = charge))]
async fn after_call(state: &AppState, model: &ModelConfigRow, hold: Hold, mut record: UsageRecord, charge: bool) {
    record.cost = usage::cost(model, record.usage);
    let (db, model_id) = (state.db().clone(), model.id);
    // A task of its own, for the reason `Hold::settle` gives: dropped while the usage was
    // written, the hold went back whole and the call was free.
    let bookkeeping = async move {
        if let Err(e) = usage::record(&db, std::slice::from_ref(&record)).await {
            tracing::error!(error = %e, model_id, "recording model usage failed");
        }
        let used = record.usage.total();
        hold.settle(if charge { used } else { 0 }).await;
    };
    let _ = tokio::spawn(bookkeeping.in_current_span()).await;
}

fn start(model: &ModelHandle, billing: Billing, kind: &'static str) -> (UsageRecord, Instant) {
    (UsageRecord::new(&model.row, billing.user_id(), kind), Instant::now())
}

/// The span of one model call, named and attributed after OpenTelemetry's GenAI semantic
/// conventions; its usage, finish reason and error are recorded when the call ends.
fn call_span(model: &ModelHandle, operation: &'static str, kind: &'static str) -> Span {
    tracing::info_span!(
        "gen_ai",
        otel.name = %format_args!("{operation} {}", model.row.model_key),
        otel.kind = "client",
        otel.status_code = Empty,
        otel.status_message = Empty,
        gen_ai.operation.name = operation,
        gen_ai.provider.name = %model.row.provider_name,
        gen_ai.request.model = %model.row.model_key,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        gen_ai.response.finish_reasons = Empty,
        gen_ai.response.time_to_first_chunk_ms = Empty,
        error.type = Empty,
        model.config_id = model.row.id,
        call.kind = kind,
    )
}

/// Puts what a call used, or why it failed, on its span.
fn end_span(span: &Span, record: &UsageRecord) {
    // Signed: OpenTelemetry has no unsigned integers, and an unsigned value would be sent as text.
    span.record("gen_ai.usage.input_tokens", record.usage.prompt_tokens as i64);
    span.record("gen_ai.usage.output_tokens", record.usage.completion_tokens as i64);
    if let Some(error) = &record.error {
        span.record("error.type", record.error_type.unwrap_or("_OTHER"));
        span.record("otel.status_code", "ERROR");
        span.record("otel.status_message", error.as_str());
    }
}

/// Runs one non-streamed call on its hold, and settles the hold after it. A call cut at the
/// model's time limit is charged `sent`, the input it was sent: the endpoint read it, and may
/// have gone on writing an answer nobody sees. Charged nothing, a call made to run past the
/// limit (a long prompt, an answer asked to be long) was free, as often as a user cared to
/// repeat it.
async fn metered<T>(
    state: &AppState,
    model: &ModelHandle,
    (billing, hold, sent): (Billing, Hold, Usage),
    (operation, kind): (&'static str, &'static str),
    call: impl std::future::Future<Output = Result<T, ModelError>>,
    usage_of: impl Fn(&T) -> Usage,
) -> Result<T, CallError> {
    let (mut record, started) = start(model, billing, kind);
    let mut dropped = Dropped {
        state: state.clone(),
        row: model.row.clone(),
        hold: Some(hold),
        record: Some(record.clone()),
        sent,
        started,
    };
    let span = call_span(model, operation, kind);
    let mut cut = false;
    let outcome = match model.time_limit {
        Some(limit) => match tokio::time::timeout(limit, call.instrument(span.clone())).await {
            Ok(outcome) => outcome,
            Err(_) => {
                cut = true;
                Err(ModelError::Timeout(format!(
                    "no answer within {} s, retries included",
                    limit.as_secs()
                )))
            }
        },
        None => call.instrument(span.clone()).await,
    };
    record.latency_ms = started.elapsed().as_millis() as i64;
    match &outcome {
        Ok(v) => record.usage = usage_of(v),
        Err(e) => record.fail_with(e),
    }
    if cut {
        record.usage = sent;
    }
    end_span(&span, &record);
    let charge = record.error.is_none() || cut;
    dropped.record = None;
    if let Some(hold) = dropped.hold.take() {
        after_call(state, &model.row, hold, record, charge).await;
    }
    Ok(outcome?)
}

/// A buffered call whose future is dropped before it ends (by a deadline of its caller's: a
/// worker's invocation, an ingest stage, a chat turn) is recorded as such and charged its
/// input, as one cut at its own time limit is. Dropped with its hold alone, the hold went back
/// whole, nothing was recorded, and the call was free, once per delivery of its message.
struct Dropped {
    state: AppState,
    row: ModelConfigRow,
    hold: Option<Hold>,
    /// The call's record while it runs; taken when it ends.
    record: Option<UsageRecord>,
    sent: Usage,
    started: Instant,
}

impl Drop for Dropped {
    fn drop(&mut self) {
        let (Some(hold), Some(mut record)) = (self.hold.take(), self.record.take()) else {
            return;
        };
        // Without a runtime the hold's own drop gives it back.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        record.usage = self.sent;
        record.latency_ms = self.started.elapsed().as_millis() as i64;
        record.fail(
            "cancelled",
            "the call was given up before it ended (its caller's time ran out)".to_owned(),
        );
        let (state, row) = (self.state.clone(), self.row.clone());
        runtime.spawn(async move { after_call(&state, &row, hold, record, true).await }.in_current_span());
    }
}

pub async fn chat(
    state: &AppState,
    model: &ModelHandle,
    billing: Billing,
    kind: &'static str,
    req: &ChatRequest,
) -> Result<ChatResponse, CallError> {
    let (hold, req) = hold_chat(state, model, billing, req).await?;
    let call = async {
        // Runs in the call's span.
        let capture = crate::telemetry::capture_content();
        if capture {
            record_content(&Span::current(), INPUT, input_messages(&req.messages));
        }
        let answer = match &model.via {
            Some(_) => client::collect(model.open_chat_stream(state, &req).await?).await,
            None => state.models().chat(&model.endpoint, &req).await,
        }?;
        if capture {
            let output = output_messages(&answer.content, &answer.tool_calls, Some(&answer.finish_reason));
            record_content(&Span::current(), OUTPUT, output);
        }
        Ok(answer)
    };
    let sent = Usage::estimated(prompt_chars(&req), 0);
    metered(state, model, (billing, hold, sent), ("chat", kind), call, |r| {
        reported_or_estimated(r, &req)
    })
    .await
}

/// The characters of a request's prompt, for an estimate (four a token) of what an endpoint
/// that reports no usage used: its tools and earlier tool calls included, an image as
/// `IMAGE_TOKENS`. Counted from the messages' JSON alone, a tool step's schemas were free and
/// an image's base64 cost hundreds of thousands of tokens.
fn prompt_chars(req: &ChatRequest) -> usize {
    let (bytes, images) = prompt_size(req);
    bytes + images as usize * IMAGE_TOKENS as usize * 4
}

/// An answer's usage as its endpoint reported it, or, reported as none, an estimate at four
/// characters a token, as a stream's is: taken as 0, the whole hold went back and the call was
/// free, for as long as a user cared to repeat it.
fn reported_or_estimated(r: &ChatResponse, req: &ChatRequest) -> Usage {
    if r.usage.total() > 0 {
        return r.usage;
    }
    let tools: usize = r.tool_calls.iter().map(|c| c.arguments.len() + c.name.len()).sum();
    Usage::estimated(prompt_chars(req), r.content.len() + r.reasoning.len() + tools)
}

pub async fn embed(
    state: &AppState,
    model: &ModelHandle,
    billing: Billing,
    texts: &[String],
    input: InputKind,
    expected_dim: Option<usize>,
) -> Result<Embeddings, CallError> {
    let bytes = texts.iter().map(String::len).sum();
    let hold = hold_whole(state, billing, text_tokens(bytes)).await?;
    let call = state.models().embed(&model.endpoint, texts, input, expected_dim);
    let sent = Usage::estimated(bytes, 0);
    metered(
        state,
        model,
        (billing, hold, sent),
        ("embeddings", "embedding"),
        call,
        |e| Usage {
            prompt_tokens: reported_or_estimated_input(Some(e.prompt_tokens), bytes),
            completion_tokens: 0,
        },
    )
    .await
}

/// The input tokens an embedding or rerank endpoint reported, or, reported as none (or as 0
/// for texts that are not empty), 4 characters a token as for a chat without usage: taken as
/// 0, the whole hold went back and a self-hosted endpoint's calls were free without end.
fn reported_or_estimated_input(reported: Option<u64>, bytes: usize) -> u64 {
    reported
        .filter(|&tokens| tokens > 0)
        .unwrap_or(bytes.div_ceil(4) as u64)
}

pub async fn rerank(
    state: &AppState,
    model: &ModelHandle,
    billing: Billing,
    query: &str,
    documents: &[String],
    top_n: usize,
) -> Result<Vec<RerankHit>, CallError> {
    // Nothing to rank calls nothing, and is charged nothing.
    if documents.is_empty() {
        return Ok(vec![]);
    }
    let bytes = query.len() + documents.iter().map(String::len).sum::<usize>();
    let hold = hold_whole(state, billing, text_tokens(bytes)).await?;
    let call = state.models().rerank(&model.endpoint, query, documents, top_n);
    let sent = Usage::estimated(bytes, 0);
    let ranked = metered(state, model, (billing, hold, sent), ("rerank", "rerank"), call, |r| {
        Usage {
            prompt_tokens: reported_or_estimated_input(r.reported_tokens, bytes),
            completion_tokens: 0,
        }
    })
    .await?;
    Ok(ranked.hits)
}

/// A streamed answer whose usage is recorded when it ends, fails, or is dropped by a client
/// that went away: stored then, or handed to `pending` for the caller to store with its own
/// result. Without a usage chunk, tokens are estimated at 4 characters each.
pub async fn chat_stream(
    state: &AppState,
    model: &ModelHandle,
    billing: Billing,
    kind: &'static str,
    req: &ChatRequest,
    pending: Option<&PendingUsage>,
) -> Result<ChatStream, CallError> {
    let (hold, req) = hold_chat(state, model, billing, req).await?;
    stream_on(state, model, (billing, hold), kind, &req, pending).await
}

/// `chat_stream` on tokens held beforehand (topped up as the request needs), so a caller can
/// refuse before it stores anything.
pub async fn chat_stream_held(
    state: &AppState,
    model: &ModelHandle,
    billing: Billing,
    hold: Hold,
    kind: &'static str,
    req: &ChatRequest,
    pending: Option<&PendingUsage>,
) -> Result<ChatStream, CallError> {
    let (hold, req) = fit(state, model, hold, req).await?;
    stream_on(state, model, (billing, hold), kind, &req, pending).await
}

async fn stream_on(
    state: &AppState,
    model: &ModelHandle,
    (billing, hold): (Billing, Hold),
    kind: &'static str,
    req: &ChatRequest,
    pending: Option<&PendingUsage>,
) -> Result<ChatStream, CallError> {
    let (record, started) = start(model, billing, kind);
    let prompt_chars = prompt_chars(req);
    let mut meter = Meter {
        state: state.clone(),
        model: model.row.clone(),
        hold: Some(hold),
        pending: pending.cloned(),
        record,
        started,
        prompt_chars,
        completion_chars: 0,
        reported: false,
        done: false,
        span: call_span(model, "chat", kind),
        first_chunk: false,
        output: crate::telemetry::capture_content().then(Output::default),
    };
    if meter.output.is_some() {
        record_content(&meter.span, INPUT, input_messages(&req.messages));
    }
    let inner = match model.open_chat_stream(state, req).instrument(meter.span.clone()).await {
        Ok(s) => s,
        Err(e) => {
            meter.record.fail_with(&e);
            // Nothing was generated: record the failure with no tokens, settled before the
            // failure is told (see the stream's end below).
            meter.reported = true;
            if let Some(settle) = meter.end() {
                settle.await;
            }
            return Err(e.into());
        }
    };
    // Boxed: `unfold` moves its state into a new future at every item, and a meter is large.
    Ok(Box::pin(futures::stream::unfold(
        Box::new((inner, meter)),
        |mut metered| async move {
            let (inner, meter) = &mut *metered;
            match inner.next().await {
                Some(ev) => {
                    meter.observe(&ev);
                    // A failed stream is settled before its failure is told, as an ended one
                    // is: whoever reads it may end the response (and Lambda the process) next.
                    if ev.is_err() {
                        if let Some(settle) = meter.end() {
                            settle.await;
                        }
                    }
                    Some((ev, metered))
                }
                None => {
                    // Settled before the stream ends: whoever reads the end (the chat turn, a
                    // Lambda function flushing its spans) finds the usage stored and the
                    // call's span, a child of the request's, ended.
                    if let Some(settle) = meter.end() {
                        settle.await;
                    }
                    None
                }
            }
        },
    )))
}

struct Meter {
    state: AppState,
    model: ModelConfigRow,
    hold: Option<Hold>,
    /// Where the record goes when the caller stores it (None: stored when the call ends).
    pending: Option<PendingUsage>,
    record: UsageRecord,
    started: Instant,
    prompt_chars: usize,
    completion_chars: usize,
    reported: bool,
    done: bool,
    /// The call's span: ended when the stream ends, not when the meter is dropped.
    span: Span,
    first_chunk: bool,
    /// What the model answered, kept only when prompt and answer text go on spans.
    output: Option<Output>,
}

#[derive(Default)]
struct Output {
    text: String,
    tool_calls: Vec<ToolCall>,
    finish_reason: Option<String>,
}

impl Meter {
    fn observe(&mut self, ev: &Result<ChatEvent, ModelError>) {
        match ev {
            // A usage chunk of zeros (or `{}`) is no report, as for a buffered answer: taken as
            // one, the stream was free.
            Ok(ChatEvent::Usage(u)) if u.total() > 0 => {
                self.record.usage = *u;
                self.reported = true;
            }
            Ok(ChatEvent::Usage(_)) => {}
            Ok(ChatEvent::Text(t)) | Ok(ChatEvent::Reasoning(t)) => {
                self.first_chunk();
                self.completion_chars += t.len();
                if let (Some(out), Ok(ChatEvent::Text(_))) = (&mut self.output, ev) {
                    out.text.push_str(t);
                }
            }
            Ok(ChatEvent::ToolCalls(calls)) => {
                self.first_chunk();
                self.completion_chars += calls.iter().map(|c| c.arguments.len() + c.name.len()).sum::<usize>();
                if let Some(out) = &mut self.output {
                    out.tool_calls.extend(calls.iter().cloned());
                }
            }
            Ok(ChatEvent::Dropped(chars)) => self.completion_chars += chars,
            Ok(ChatEvent::Finish(reason)) => {
                self.span.record("gen_ai.response.finish_reasons", reason.as_str());
                if let Some(out) = &mut self.output {
                    out.finish_reason = Some(reason.clone());
                }
            }
            Err(e) => self.record.fail_with(e),
        }
    }

    fn first_chunk(&mut self) {
        if !self.first_chunk {
            self.first_chunk = true;
            let ms = self.started.elapsed().as_millis() as i64;
            self.span.record("gen_ai.response.time_to_first_chunk_ms", ms);
        }
    }

    /// Ends the call: records its usage on the span, and returns the bookkeeping still to do
    /// (usage stored, hold settled) in the call's span, which ends with it.
    fn end(&mut self) -> Option<BoxFuture<'static, ()>> {
        if self.done {
            return None;
        }
        self.done = true;
        if !self.reported {
            self.record.usage = Usage::estimated(self.prompt_chars, self.completion_chars);
        }
        self.record.latency_ms = self.started.elapsed().as_millis() as i64;
        end_span(&self.span, &self.record);
        if let Some(out) = self.output.take() {
            let output = output_messages(&out.text, &out.tool_calls, out.finish_reason.as_deref());
            record_content(&self.span, OUTPUT, output);
        }
        // The call's span ends with its settlement, not with whoever holds the stream.
        let span = std::mem::replace(&mut self.span, Span::none());
        let hold = self.hold.take()?;
        let (state, model, mut record) = (self.state.clone(), self.model.clone(), self.record.clone());
        // A failed or abandoned stream is charged for what it produced before it stopped.
        if let Some(pending) = &self.pending {
            // Handed over now, not in the task below: a dropped stream's task may run after
            // the caller has stored its result.
            record.cost = usage::cost(&model, record.usage);
            let used = record.usage.total();
            pending.push(record);
            return Some(async move { hold.settle(used).await }.instrument(span).boxed());
        }
        Some(
            async move { after_call(&state, &model, hold, record, true).await }
                .instrument(span)
                .boxed(),
        )
    }

    /// `end`, its bookkeeping left to run on its own (a dropped stream cannot wait for it);
    /// a caller storing the usage can wait for it through `pending`.
    fn close(&mut self) {
        let Some(task) = self.end() else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                let task = handle.spawn(task);
                if let Some(pending) = &self.pending {
                    pending.settling(task);
                }
            }
            Err(_) => tracing::warn!("stream usage not recorded: no runtime"),
        }
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        if !self.done && self.record.error.is_none() {
            let gone = "the client went away before the answer finished".to_owned();
            self.record.fail("cancelled", gone);
        }
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::client::{ChatMessage, ToolSpec};

    /// What an endpoint that reports no usage is charged for: the tools offered count, and an
    /// image counts as its tokens, not as the length of its base64.
    #[test]
    fn an_estimated_prompt_counts_tools_and_images_as_read() {
        let image = format!("data:image/png;base64,{}", "A".repeat(1_000_000));
        let plain = ChatRequest {
            messages: vec![ChatMessage::user_with_images("what is this?", vec![image])],
            ..Default::default()
        };
        let chars = prompt_chars(&plain);
        // The message's text and framing, and the image's tokens.
        assert_eq!(chars, "what is this?".len() + 8 + IMAGE_TOKENS as usize * 4);
        let with_tools = ChatRequest {
            tools: vec![ToolSpec {
                name: "web_search".into(),
                description: "d".repeat(4000),
                parameters: serde_json::json!({}),
            }],
            ..plain
        };
        assert!(prompt_chars(&with_tools) > chars + 4000);
    }
}
