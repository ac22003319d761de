//! OpenAI-compatible `/chat/completions`, streamed and not, as typed events.

use std::collections::{BTreeMap, VecDeque};
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use serde::Serialize;
use serde_json::Value;

use super::chunk::Chunk;
use super::error::upstream_message;
use super::{reported_tokens, snippet, Endpoint, ModelClient, ModelError};
use crate::text::model_text;
use crate::upstream::SseDecoder;

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ChatMessage {
    pub role: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<MessageContent>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    fn text(role: &str, text: impl Into<String>) -> Self {
        Self {
            role: role.to_owned(),
            content: Some(MessageContent::Text(text.into())),
            tool_calls: vec![],
            tool_call_id: None,
        }
    }
    pub fn system(text: impl Into<String>) -> Self {
        Self::text("system", text)
    }
    pub fn user(text: impl Into<String>) -> Self {
        Self::text("user", text)
    }
    pub fn assistant(text: impl Into<String>) -> Self {
        Self::text("assistant", text)
    }
    /// A stored turn of a conversation: the user's, or else the assistant's.
    pub fn said_by(role: &str, text: impl Into<String>) -> Self {
        match role {
            "user" => Self::user(text),
            _ => Self::assistant(text),
        }
    }
    /// A user turn with images, given as URLs or `data:` URIs.
    pub fn user_with_images(text: impl Into<String>, image_urls: Vec<String>) -> Self {
        let mut parts = vec![ContentPart::Text { text: text.into() }];
        parts.extend(image_urls.into_iter().map(|url| ContentPart::ImageUrl {
            image_url: ImageUrl { url },
        }));
        Self {
            role: "user".to_owned(),
            content: Some(MessageContent::Parts(parts)),
            tool_calls: vec![],
            tool_call_id: None,
        }
    }
    /// The assistant turn that asked for tools, to send back with their results.
    pub fn assistant_tool_calls(calls: &[ToolCall]) -> Self {
        let tool_calls = calls
            .iter()
            .map(|c| ToolCallOut {
                id: c.id.clone(),
                kind: "function".to_owned(),
                function: FunctionCall {
                    name: c.name.clone(),
                    arguments: c.arguments.clone(),
                },
            })
            .collect();
        Self {
            role: "assistant".to_owned(),
            content: None,
            tool_calls,
            tool_call_id: None,
        }
    }
    pub fn tool_result(call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            tool_call_id: Some(call_id.into()),
            ..Self::text("tool", content)
        }
    }
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(untagged)]
pub enum MessageContent {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    Text { text: String },
    ImageUrl { image_url: ImageUrl },
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ImageUrl {
    pub url: String,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ToolCallOut {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub function: FunctionCall,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FunctionCall {
    pub name: String,
    pub arguments: String,
}

/// A tool the model may call: name, description and JSON-schema parameters.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: Value,
}

#[derive(Debug, Clone, Default)]
pub struct ChatRequest {
    pub messages: Vec<ChatMessage>,
    pub tools: Vec<ToolSpec>,
    /// Overrides the config's temperature.
    pub temperature: Option<f64>,
    /// Overrides the config's maxTokens.
    pub max_tokens: Option<u64>,
}

/// A complete tool call requested by the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// JSON text, as the model wrote it.
    pub arguments: String,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

impl Usage {
    /// The tokens a call used, prompt and completion: what a quota hold is settled to.
    pub fn total(self) -> u64 {
        self.prompt_tokens.saturating_add(self.completion_tokens)
    }

    /// What a call whose endpoint reported none is taken to have used: four characters a token.
    pub fn estimated(prompt_chars: usize, completion_chars: usize) -> Self {
        Self {
            prompt_tokens: prompt_chars.div_ceil(4) as u64,
            completion_tokens: completion_chars.div_ceil(4) as u64,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum ChatEvent {
    /// Reasoning text (`reasoning_content` / `reasoning` deltas).
    Reasoning(String),
    /// Answer text.
    Text(String),
    /// Tool calls, assembled from their streamed fragments, emitted when the choice finishes.
    ToolCalls(Vec<ToolCall>),
    Usage(Usage),
    /// Why the model stopped: `stop`, `length`, `tool_calls` ...
    Finish(String),
    /// Characters of tool calls the stream read but handed to no one, because it failed while
    /// they were in progress (over a limit, or cut off). Shown nowhere; a usage estimate counts
    /// them, or a refused answer's tool calls would be free.
    Dropped(usize),
}

/// A non-streamed answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChatResponse {
    pub content: String,
    pub reasoning: String,
    pub tool_calls: Vec<ToolCall>,
    pub usage: Usage,
    pub finish_reason: String,
}

pub type ChatStream = Pin<Box<dyn Stream<Item = Result<ChatEvent, ModelError>> + Send>>;

/// The body of a `chat/completions` request, serialized straight from the request: no JSON tree
/// in between (the history's every message was copied into one, then written out).
#[derive(Serialize)]
struct RequestBody<'a> {
    model: &'a str,
    messages: &'a [ChatMessage],
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<ToolBody<'a>>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
struct ToolBody<'a> {
    r#type: &'static str,
    function: &'a ToolSpec,
}

fn request_body<'a>(ep: &'a Endpoint, req: &'a ChatRequest, stream: bool) -> RequestBody<'a> {
    RequestBody {
        model: &ep.model,
        messages: &req.messages,
        stream,
        stream_options: stream.then_some(StreamOptions { include_usage: true }),
        temperature: req.temperature.or_else(|| ep.option_f64("temperature")),
        max_tokens: req.max_tokens.or_else(|| ep.option_u64("maxTokens")),
        tools: req
            .tools
            .iter()
            .map(|function| ToolBody {
                r#type: "function",
                function,
            })
            .collect(),
    }
}

fn usage_of(v: &Value) -> Option<Usage> {
    v.get("usage").filter(|u| u.is_object()).map(usage_from)
}

/// The token counts of a `usage` object.
fn usage_from(u: &Value) -> Usage {
    Usage {
        prompt_tokens: reported_tokens(u.get("prompt_tokens").and_then(Value::as_u64)),
        completion_tokens: reported_tokens(u.get("completion_tokens").and_then(Value::as_u64)),
    }
}

/// An error an upstream reported in a body that answered 200: `body` is the whole JSON.
fn reported_error(body: &str, err: &Value) -> ModelError {
    let message = upstream_message(body).unwrap_or_else(|| snippet(&err.to_string()));
    ModelError::Upstream { status: 200, message }
}

impl ModelClient {
    /// One complete answer.
    pub async fn chat(&self, ep: &Endpoint, req: &ChatRequest) -> Result<ChatResponse, ModelError> {
        let v = self
            .post_json(ep, "chat/completions", &request_body(ep, req, false))
            .await?;
        // Some endpoints send `"error": null` with every answer, as the streamed chunks do.
        if let Some(err) = v.get("error").filter(|e| !e.is_null()) {
            return Err(reported_error(&v.to_string(), err));
        }
        let choice = v
            .pointer("/choices/0")
            .ok_or_else(|| ModelError::Protocol("the answer has no choices".into()))?;
        let message = &choice["message"];
        let text = |key: &str| model_text(message.get(key).and_then(Value::as_str).unwrap_or_default());
        let tool_calls = message
            .get("tool_calls")
            .and_then(Value::as_array)
            .map(|calls| {
                calls
                    .iter()
                    .map(|c| ToolCall {
                        id: model_text(c["id"].as_str().unwrap_or_default()),
                        name: model_text(c.pointer("/function/name").and_then(Value::as_str).unwrap_or_default()),
                        arguments: model_text(c.pointer("/function/arguments").and_then(Value::as_str).unwrap_or("{}")),
                    })
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        if tool_calls.len() > MAX_TOOL_CALLS {
            return Err(too_many_calls());
        }
        for call in &tool_calls {
            check_call(&call.name, &call.arguments)?;
        }
        let reasoning = if message.get("reasoning_content").is_some() {
            text("reasoning_content")
        } else {
            text("reasoning")
        };
        Ok(ChatResponse {
            content: text("content"),
            reasoning,
            tool_calls,
            usage: usage_of(&v).unwrap_or_default(),
            finish_reason: choice["finish_reason"].as_str().unwrap_or("stop").to_owned(),
        })
    }

    /// A streamed answer. Dropping the stream closes the upstream connection.
    pub async fn chat_stream(&self, ep: &Endpoint, req: &ChatRequest) -> Result<ChatStream, ModelError> {
        let resp = self.post(ep, "chat/completions", &request_body(ep, req, true)).await?;
        let state = StreamState {
            body: Box::pin(resp.bytes_stream()),
            decoder: SseDecoder::default(),
            pending: VecDeque::new(),
            tools: ToolCallParts::default(),
            finished: false,
            done: false,
            idle: ep.timeout(),
            received: 0,
        };
        // Boxed: `unfold` moves its state into a new future at every item, one pointer then.
        Ok(Box::pin(futures::stream::unfold(
            Box::new(state),
            |mut st| async move {
                let item = st.next_event().await?;
                Some((item, st))
            },
        )))
    }
}

/// Reads a whole streamed answer into one, for calls that want it at once.
pub async fn collect(mut stream: ChatStream) -> Result<ChatResponse, ModelError> {
    let mut answer = ChatResponse::default();
    while let Some(event) = stream.next().await {
        match event? {
            ChatEvent::Reasoning(t) => answer.reasoning.push_str(&t),
            ChatEvent::Text(t) => answer.content.push_str(&t),
            ChatEvent::ToolCalls(c) => answer.tool_calls.extend(c),
            ChatEvent::Usage(u) => answer.usage = u,
            ChatEvent::Finish(reason) => answer.finish_reason = reason,
            ChatEvent::Dropped(_) => {}
        }
    }
    Ok(answer)
}

type ByteStream = Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>;

/// One tool call as its fragments arrive.
#[derive(Default)]
pub struct PartialCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// Tool calls one answer may ask for: a few are usual. Uncounted, an endpoint's millions of
/// empty calls each got an answer of their own, until the chat's process ran out of memory.
pub const MAX_TOOL_CALLS: usize = 64;
/// A tool call's arguments: tools take a few fields. Parsed, 30 MiB of `[0,0,...]` took
/// half a gigabyte, and a call's arguments are kept with its answer.
pub const MAX_TOOL_ARGUMENT_BYTES: usize = 64 * 1024;
/// A tool's name (MCP tools are named `mcp<id>__<tool>`).
const MAX_TOOL_NAME_BYTES: usize = 256;

fn too_many_calls() -> ModelError {
    ModelError::Protocol(format!(
        "the model asked for more than {MAX_TOOL_CALLS} tool calls in one answer"
    ))
}

/// A call within `MAX_TOOL_ARGUMENT_BYTES` of arguments and `MAX_TOOL_NAME_BYTES` of name.
fn check_call(name: &str, arguments: &str) -> Result<(), ModelError> {
    if arguments.len() > MAX_TOOL_ARGUMENT_BYTES || name.len() > MAX_TOOL_NAME_BYTES {
        return Err(ModelError::Protocol(format!(
            "a tool call passed {} KiB of arguments or {MAX_TOOL_NAME_BYTES} bytes of name",
            MAX_TOOL_ARGUMENT_BYTES >> 10
        )));
    }
    Ok(())
}

impl PartialCall {
    /// `check_call` on what has come so far: a call over a limit is refused as it grows.
    pub fn check(&self) -> Result<(), ModelError> {
        check_call(&self.name, &self.arguments)
    }
}

/// Tool-call fragments assembled by index, handed out whole when the model finishes.
#[derive(Default)]
pub struct ToolCallParts {
    parts: BTreeMap<u64, PartialCall>,
    /// Calls handed out already: the limit is the answer's, however many times it says it
    /// finished (each finish hands out what came, and the stream may go on).
    handed_out: usize,
}

impl ToolCallParts {
    /// The call at `index`, new or in progress; refused past `MAX_TOOL_CALLS` calls in the
    /// whole answer.
    pub fn part(&mut self, index: u64) -> Result<&mut PartialCall, ModelError> {
        if self.handed_out + self.parts.len() >= MAX_TOOL_CALLS && !self.parts.contains_key(&index) {
            return Err(too_many_calls());
        }
        Ok(self.parts.entry(index).or_default())
    }

    /// The calls in progress when their answer failed, as `ChatEvent::Dropped`, if any came.
    pub fn drop_unfinished(&mut self) -> Option<ChatEvent> {
        let parts = std::mem::take(&mut self.parts);
        let chars: usize = parts.values().map(|p| p.name.len() + p.arguments.len()).sum();
        (chars > 0).then_some(ChatEvent::Dropped(chars))
    }

    /// The assembled calls, if any came; empty arguments become `{}`.
    pub fn take(&mut self) -> Option<ChatEvent> {
        if self.parts.is_empty() {
            return None;
        }
        self.handed_out += self.parts.len();
        let calls = std::mem::take(&mut self.parts)
            .into_values()
            .map(|p| ToolCall {
                id: p.id,
                name: p.name,
                arguments: if p.arguments.trim().is_empty() {
                    "{}".to_owned()
                } else {
                    p.arguments
                },
            })
            .collect();
        Some(ChatEvent::ToolCalls(calls))
    }
}

/// The most one streamed answer may send, chunks' JSON included. Its text, reasoning and tool
/// calls are gathered by whoever reads it, and `max_tokens` binds only an endpoint that keeps
/// to it: one that streamed without end would otherwise grow them until the process ran out of
/// memory. Far above any answer a model's context allows.
pub const MAX_STREAM_BYTES: usize = 32 << 20;

struct StreamState {
    body: ByteStream,
    decoder: SseDecoder,
    pending: VecDeque<Result<ChatEvent, ModelError>>,
    tools: ToolCallParts,
    /// A finish_reason was seen.
    finished: bool,
    /// Nothing more will be emitted.
    done: bool,
    idle: Duration,
    /// Bytes of event data so far.
    received: usize,
}

impl StreamState {
    async fn next_event(&mut self) -> Option<Result<ChatEvent, ModelError>> {
        loop {
            if let Some(ev) = self.pending.pop_front() {
                return Some(ev);
            }
            if self.done {
                return None;
            }
            match tokio::time::timeout(self.idle, self.body.next()).await {
                Err(_) => self.fail(ModelError::Timeout(format!(
                    "no data for {:?} in the middle of the answer",
                    self.idle
                ))),
                Ok(Some(Ok(bytes))) => match self.decoder.feed(&bytes) {
                    Ok(events) => events.iter().for_each(|event| self.on_data(&event.data)),
                    Err(e) => self.fail(ModelError::Protocol(e.to_string())),
                },
                Ok(Some(Err(e))) => self.fail(ModelError::Network(format!(
                    "the answer stream broke: {}",
                    e.without_url()
                ))),
                Ok(None) => {
                    match self.decoder.finish() {
                        Ok(Some(event)) => self.on_data(&event.data),
                        Ok(None) => {}
                        Err(e) => self.fail(ModelError::Protocol(e.to_string())),
                    }
                    if !self.done {
                        if self.finished {
                            self.done = true;
                        } else {
                            self.fail(ModelError::Protocol(
                                "the answer stream ended before the model finished".into(),
                            ));
                        }
                    }
                }
            }
        }
    }

    fn fail(&mut self, err: ModelError) {
        self.pending.extend(self.tools.drop_unfinished().map(Ok));
        self.pending.push_back(Err(err));
        self.done = true;
    }

    fn on_data(&mut self, data: &str) {
        if self.done {
            return;
        }
        if data.trim() == "[DONE]" {
            self.flush_tools();
            self.done = true;
            return;
        }
        self.received += data.len();
        if self.received > MAX_STREAM_BYTES {
            return self.fail(ModelError::Protocol(format!(
                "the answer passed {} MiB and was cut off there",
                MAX_STREAM_BYTES >> 20
            )));
        }
        let Some(chunk) = Chunk::parse(data) else {
            return self.fail(ModelError::Protocol(format!(
                "a stream chunk is not JSON: {}",
                snippet(data)
            )));
        };
        if let Some(err) = chunk.error() {
            return self.fail(reported_error(data, err));
        }
        if let Some(choice) = chunk.choice() {
            if let Some(r) = choice.reasoning() {
                self.pending.push_back(Ok(ChatEvent::Reasoning(model_text(r))));
            }
            if let Some(t) = choice.text() {
                self.pending.push_back(Ok(ChatEvent::Text(model_text(t))));
            }
            if let Err(e) = self.collect_tools(choice.tool_calls()) {
                return self.fail(e);
            }
            if let Some(reason) = &choice.finish_reason {
                self.flush_tools();
                self.finished = true;
                self.pending.push_back(Ok(ChatEvent::Finish(reason.clone())));
            }
        }
        if let Some(u) = chunk.usage() {
            self.pending.push_back(Ok(ChatEvent::Usage(usage_from(u))));
        }
    }

    fn collect_tools(&mut self, calls: &[Value]) -> Result<(), ModelError> {
        for (pos, c) in calls.iter().enumerate() {
            let index = c.get("index").and_then(Value::as_u64).unwrap_or(pos as u64);
            let slot = self.tools.part(index)?;
            if let Some(id) = c.get("id").and_then(Value::as_str) {
                slot.id = model_text(id);
            }
            if let Some(name) = c.pointer("/function/name").and_then(Value::as_str) {
                slot.name.push_str(&model_text(name));
            }
            if let Some(args) = c.pointer("/function/arguments").and_then(Value::as_str) {
                slot.arguments.push_str(&model_text(args));
            }
            slot.check()?;
        }
        Ok(())
    }

    fn flush_tools(&mut self) {
        if let Some(calls) = self.tools.take() {
            self.pending.push_back(Ok(calls));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream reading `chunks` as an endpoint's body.
    fn reading(chunks: impl Stream<Item = Result<Bytes, reqwest::Error>> + Send + 'static) -> StreamState {
        StreamState {
            body: Box::pin(chunks),
            decoder: SseDecoder::default(),
            pending: VecDeque::new(),
            tools: ToolCallParts::default(),
            finished: false,
            done: false,
            idle: Duration::from_secs(5),
            received: 0,
        }
    }

    /// An endpoint that streams text without end (and never finishes) is cut off at
    /// MAX_STREAM_BYTES with an error, after about that much data and no more.
    #[tokio::test]
    async fn an_endless_answer_is_cut_off_at_the_limit() {
        let chunk = format!(
            "data: {}\n\n",
            serde_json::json!({ "choices": [{ "index": 0, "delta": { "content": "x".repeat(64 * 1024) } }] })
        );
        let mut state = reading(futures::stream::repeat_with(move || Ok(Bytes::from(chunk.clone()))));
        let mut text = 0;
        let failure = loop {
            match state.next_event().await {
                Some(Ok(ChatEvent::Text(t))) => text += t.len(),
                Some(Ok(_)) => {}
                Some(Err(e)) => break e,
                None => panic!("the stream ended without the error"),
            }
        };
        assert!(failure.to_string().contains("passed 32 MiB"), "{failure}");
        assert!(
            (MAX_STREAM_BYTES - 64 * 1024..=MAX_STREAM_BYTES).contains(&text),
            "{text}"
        );
        assert!(state.next_event().await.is_none(), "nothing after the error");
    }

    /// A stream of tool-call fragments, ended with `tool_calls`.
    fn calling(deltas: Vec<serde_json::Value>) -> StreamState {
        let mut events: Vec<Result<Bytes, reqwest::Error>> = deltas
            .into_iter()
            .map(|calls| {
                let chunk = serde_json::json!({ "choices": [{ "index": 0, "delta": { "tool_calls": calls } }] });
                Ok(Bytes::from(format!("data: {chunk}\n\n")))
            })
            .collect();
        let finish = serde_json::json!({ "choices": [{ "index": 0, "delta": {}, "finish_reason": "tool_calls" }] });
        events.push(Ok(Bytes::from(format!("data: {finish}\n\n"))));
        reading(futures::stream::iter(events))
    }

    async fn outcome(mut state: StreamState) -> Result<Vec<ToolCall>, ModelError> {
        let mut calls = vec![];
        while let Some(event) = state.next_event().await {
            if let ChatEvent::ToolCalls(c) = event? {
                calls.extend(c);
            }
        }
        Ok(calls)
    }

    /// The characters an answer refused over a limit dropped just before its error.
    async fn dropped_before_error(mut state: StreamState) -> usize {
        let mut dropped = 0;
        while let Some(event) = state.next_event().await {
            match event {
                Ok(ChatEvent::Dropped(chars)) => dropped = chars,
                Ok(_) => assert_eq!(dropped, 0, "the drop comes last, with the error"),
                Err(_) => return dropped,
            }
        }
        panic!("the answer did not fail")
    }

    /// Tool calls are bounded as they arrive: in number per answer, and in the size of each
    /// one's arguments, however the endpoint splits them.
    #[tokio::test]
    async fn tool_calls_past_their_limits_end_the_answer() {
        let call = |index: usize, args: &str| serde_json::json!([{ "index": index, "id": format!("c{index}"), "function": { "name": "web_search", "arguments": args } }]);
        let fine = outcome(calling((0..MAX_TOOL_CALLS).map(|i| call(i, "{}")).collect())).await;
        assert_eq!(fine.unwrap().len(), MAX_TOOL_CALLS);
        let many = outcome(calling((0..=MAX_TOOL_CALLS).map(|i| call(i, "{}")).collect())).await;
        assert!(many.unwrap_err().to_string().contains("more than 64 tool calls"));
        // Counted over the whole answer, however many times it says it finished.
        let batch = serde_json::json!({ "choices": [{ "index": 0, "delta": {
            "tool_calls": (0..40).map(|i| serde_json::json!({ "index": i })).collect::<Vec<_>>()
        }, "finish_reason": "tool_calls" }] });
        let events: Vec<Result<Bytes, reqwest::Error>> =
            (0..2).map(|_| Ok(Bytes::from(format!("data: {batch}\n\n")))).collect();
        let again = outcome(reading(futures::stream::iter(events))).await;
        assert!(again.unwrap_err().to_string().contains("more than 64 tool calls"));
        let piece = "0,".repeat(16 * 1024);
        let long = outcome(calling((0..3).map(|_| call(0, &piece)).collect())).await;
        assert!(long.unwrap_err().to_string().contains("passed 64 KiB of arguments"));

        // What the refused answer's calls in progress took counts in its usage estimate.
        let many = calling((0..=MAX_TOOL_CALLS).map(|i| call(i, "{}")).collect());
        assert_eq!(dropped_before_error(many).await, MAX_TOOL_CALLS * "web_search{}".len());
        let long = calling((0..3).map(|_| call(0, &piece)).collect());
        assert_eq!(dropped_before_error(long).await, 3 * ("web_search".len() + piece.len()));
    }
}
