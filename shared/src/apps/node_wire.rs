//! Translation between the model client's chat types and the client-node proto, both ways:
//! the platform encodes requests and decodes deltas, a node does the opposite.

use serde_json::Value;

use super::node_proto::{self as pb, chat_delta::Kind as DeltaKind, error::Kind as ErrorKind};
use crate::models::client::{
    reported_tokens, ChatEvent, ChatMessage, ChatRequest, ContentPart, Endpoint, FunctionCall, ImageUrl,
    MessageContent, ModelError, ToolCallOut, ToolCallParts, ToolSpec, Usage,
};
use crate::text::model_text;

/// The largest request a node must take, and the platform sends. gRPC's usual default (4 MiB,
/// tonic's, grpc-go's and grpc-java's) is passed by a spec-legal chat with images, which travel
/// inline: three of up to 10 MB, base64-encoded, and a history whose answers may reach 4 MiB.
/// A node left at that default refused such calls, and the platform told them as "did not
/// answer" on every node in turn.
pub const MAX_REQUEST_BYTES: usize = 64 << 20;

/// The request a node receives for a chat call to `ep`. Neither its API key nor its base URL
/// leaves the platform: the URL is whatever the model config's author typed, and a node calls
/// its own upstream with its own key.
pub fn encode_request(ep: &Endpoint, req: &ChatRequest, conversation_id: &str) -> pb::ChatRequest {
    pb::ChatRequest {
        model: Some(pb::ModelTarget {
            model: ep.model.clone(),
            options_json: ep.options.to_string(),
        }),
        messages: req.messages.iter().map(encode_message).collect(),
        tools: req
            .tools
            .iter()
            .map(|t| pb::Tool {
                name: t.name.clone(),
                description: t.description.clone(),
                parameters_json: t.parameters.to_string(),
            })
            .collect(),
        temperature: req.temperature,
        max_tokens: req.max_tokens,
        conversation_id: conversation_id.to_owned(),
    }
}

fn encode_message(m: &ChatMessage) -> pb::Message {
    let content = m.content.as_ref().map(|c| pb::Content {
        kind: Some(match c {
            MessageContent::Text(t) => pb::content::Kind::Text(t.clone()),
            MessageContent::Parts(parts) => pb::content::Kind::Parts(pb::Parts {
                parts: parts
                    .iter()
                    .map(|p| pb::Part {
                        kind: Some(match p {
                            ContentPart::Text { text } => pb::part::Kind::Text(text.clone()),
                            ContentPart::ImageUrl { image_url } => pb::part::Kind::ImageUrl(image_url.url.clone()),
                        }),
                    })
                    .collect(),
            }),
        }),
    });
    pb::Message {
        role: m.role.clone(),
        content,
        tool_calls: m
            .tool_calls
            .iter()
            .map(|c| pb::ToolCall {
                id: c.id.clone(),
                name: c.function.name.clone(),
                arguments: c.function.arguments.clone(),
            })
            .collect(),
        tool_call_id: m.tool_call_id.clone().unwrap_or_default(),
    }
}

/// A node's view of a request: the model target and the chat request to send to it.
pub fn decode_request(req: pb::ChatRequest) -> (pb::ModelTarget, ChatRequest) {
    let chat = ChatRequest {
        messages: req.messages.into_iter().map(decode_message).collect(),
        tools: req
            .tools
            .into_iter()
            .map(|t| ToolSpec {
                name: t.name,
                description: t.description,
                parameters: serde_json::from_str(&t.parameters_json).unwrap_or(Value::Null),
            })
            .collect(),
        temperature: req.temperature,
        max_tokens: req.max_tokens,
    };
    (req.model.unwrap_or_default(), chat)
}

fn decode_message(m: pb::Message) -> ChatMessage {
    let content = m.content.and_then(|c| c.kind).map(|k| match k {
        pb::content::Kind::Text(t) => MessageContent::Text(t),
        pb::content::Kind::Parts(p) => MessageContent::Parts(
            p.parts
                .into_iter()
                .filter_map(|p| p.kind)
                .map(|k| match k {
                    pb::part::Kind::Text(text) => ContentPart::Text { text },
                    pb::part::Kind::ImageUrl(url) => ContentPart::ImageUrl {
                        image_url: ImageUrl { url },
                    },
                })
                .collect(),
        ),
    });
    ChatMessage {
        role: m.role,
        content,
        tool_calls: m
            .tool_calls
            .into_iter()
            .map(|c| ToolCallOut {
                id: c.id,
                kind: "function".to_owned(),
                function: FunctionCall {
                    name: c.name,
                    arguments: c.arguments,
                },
            })
            .collect(),
        tool_call_id: Some(m.tool_call_id).filter(|id| !id.is_empty()),
    }
}

fn delta(kind: DeltaKind) -> pb::ChatDelta {
    pb::ChatDelta { kind: Some(kind) }
}

/// The deltas a node sends for one event of its model's stream (tool calls go whole).
pub fn encode_event(event: Result<ChatEvent, ModelError>) -> Vec<pb::ChatDelta> {
    let kinds = match event {
        Ok(ChatEvent::Text(t)) => vec![DeltaKind::Text(t)],
        Ok(ChatEvent::Reasoning(t)) => vec![DeltaKind::Reasoning(t)],
        Ok(ChatEvent::ToolCalls(calls)) => calls
            .into_iter()
            .enumerate()
            .map(|(index, c)| {
                DeltaKind::ToolCall(pb::ToolCallDelta {
                    index: index as u32,
                    id: c.id,
                    name: c.name,
                    arguments: c.arguments,
                })
            })
            .collect(),
        Ok(ChatEvent::Usage(u)) => vec![DeltaKind::Usage(pb::Usage {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
        })],
        Ok(ChatEvent::Finish(reason)) => vec![DeltaKind::Finish(reason)],
        // The platform sees only whole calls from a node, and so none of these.
        Ok(ChatEvent::Dropped(_)) => vec![],
        Err(e) => return vec![failed(&e)],
    };
    kinds.into_iter().map(delta).collect()
}

/// The last message of a failed answer.
pub fn failed(e: &ModelError) -> pb::ChatDelta {
    delta(DeltaKind::Error(encode_error(e)))
}

/// The first message of every answer.
pub fn accepted(host_id: &str) -> pb::ChatDelta {
    delta(DeltaKind::Accepted(pb::Accepted {
        host_id: host_id.to_owned(),
    }))
}

fn encode_error(e: &ModelError) -> pb::Error {
    let (kind, status, message) = match e {
        ModelError::Auth(m) => (ErrorKind::Auth, 0, m),
        ModelError::NotFound(m) => (ErrorKind::NotFound, 0, m),
        ModelError::RateLimited(m) => (ErrorKind::RateLimited, 0, m),
        ModelError::Timeout(m) => (ErrorKind::Timeout, 0, m),
        ModelError::Network(m) => (ErrorKind::Network, 0, m),
        ModelError::Upstream { status, message } => (ErrorKind::Upstream, u32::from(*status), message),
        ModelError::BadRequest(m) => (ErrorKind::BadRequest, 0, m),
        ModelError::Protocol(m) | ModelError::NoClientNode { brief: m, .. } => (ErrorKind::Protocol, 0, m),
    };
    pb::Error {
        kind: kind as i32,
        message: message.clone(),
        status,
    }
}

/// What a failure a node reported says in place of the node's own words.
const NODE_REPORTED: &str = "as reported by the app's client node (its words are in the service's log)";

/// The model error a node reported, as if the platform had called the model itself, in the
/// platform's words: what the node said (its upstream's address and answer, a partner's
/// network) goes to the log, not to whoever configured the agent's model, who is told the
/// endpoint's own words when the platform calls it.
fn decode_error(e: pb::Error) -> ModelError {
    tracing::warn!(node_error = %e.message, kind = e.kind, status = e.status, "a client node reported a failed model call");
    let m = NODE_REPORTED.to_owned();
    match ErrorKind::try_from(e.kind).unwrap_or(ErrorKind::Unspecified) {
        ErrorKind::Auth => ModelError::Auth(m),
        ErrorKind::NotFound => ModelError::NotFound(m),
        ErrorKind::RateLimited => ModelError::RateLimited(m),
        ErrorKind::Timeout => ModelError::Timeout(m),
        ErrorKind::Network => ModelError::Network(m),
        ErrorKind::Upstream => ModelError::Upstream {
            status: u16::try_from(e.status).unwrap_or(502),
            message: m,
        },
        ErrorKind::BadRequest => ModelError::BadRequest(m),
        ErrorKind::Protocol | ErrorKind::Unspecified => ModelError::Protocol(m),
    }
}

/// Turns a node's deltas back into model events; tool-call fragments are assembled by index
/// and emitted whole when the model finishes, as the model client does.
#[derive(Default)]
pub struct DeltaDecoder {
    tools: ToolCallParts,
    finished: bool,
}

impl DeltaDecoder {
    /// A model finish was seen, so the answer is complete.
    pub fn finished(&self) -> bool {
        self.finished
    }

    pub fn decode(&mut self, d: pb::ChatDelta) -> Vec<Result<ChatEvent, ModelError>> {
        match d.kind {
            None | Some(DeltaKind::Accepted(_)) => vec![],
            // A node relays a model's text: held to what the service can store, as the model
            // client holds an endpoint's (`text::model_text`).
            Some(DeltaKind::Text(t)) => vec![Ok(ChatEvent::Text(model_text(&t)))],
            Some(DeltaKind::Reasoning(t)) => vec![Ok(ChatEvent::Reasoning(model_text(&t)))],
            Some(DeltaKind::ToolCall(c)) => {
                let slot = match self.tools.part(c.index.into()) {
                    Ok(slot) => slot,
                    Err(e) => return self.failed(e),
                };
                if slot.id.is_empty() {
                    slot.id = model_text(&c.id);
                }
                if slot.name.is_empty() {
                    slot.name = model_text(&c.name);
                }
                slot.arguments.push_str(&model_text(&c.arguments));
                match slot.check() {
                    Ok(()) => vec![],
                    Err(e) => self.failed(e),
                }
            }
            Some(DeltaKind::Usage(u)) => vec![Ok(ChatEvent::Usage(Usage {
                prompt_tokens: reported_tokens(Some(u.prompt_tokens)),
                completion_tokens: reported_tokens(Some(u.completion_tokens)),
            }))],
            Some(DeltaKind::Finish(reason)) => {
                self.finished = true;
                let mut events = self.flush_tools();
                events.push(Ok(ChatEvent::Finish(reason)));
                events
            }
            Some(DeltaKind::Error(e)) => self.failed(decode_error(e)),
        }
    }

    /// The answer's last events: the tool calls in progress, dropped (so that an estimate of
    /// its usage counts them), then the error.
    pub fn failed(&mut self, e: ModelError) -> Vec<Result<ChatEvent, ModelError>> {
        let dropped = self.tools.drop_unfinished().map(Ok);
        dropped.into_iter().chain([Err(e)]).collect()
    }

    fn flush_tools(&mut self) -> Vec<Result<ChatEvent, ModelError>> {
        self.tools.take().into_iter().map(Ok).collect()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::models::client::ToolCall;

    fn endpoint() -> Endpoint {
        Endpoint {
            base_url: "http://models.example/v1".into(),
            api_key: "sk-secret".into(),
            model: "chat-echo".into(),
            options: json!({ "temperature": 0.2 }),
            reach: crate::outbound::Reach::Operator,
        }
    }

    #[test]
    fn a_request_survives_the_trip_without_its_key_or_endpoint() {
        let call = ToolCall {
            id: "c1".into(),
            name: "get_weather".into(),
            arguments: r#"{"city":"Oslo"}"#.into(),
        };
        let req = ChatRequest {
            messages: vec![
                ChatMessage::system("be brief"),
                ChatMessage::user_with_images("what is this?", vec!["data:image/png;base64,AA==".into()]),
                ChatMessage::assistant_tool_calls(std::slice::from_ref(&call)),
                ChatMessage::tool_result("c1", "sunny"),
            ],
            tools: vec![ToolSpec {
                name: "get_weather".into(),
                description: "Weather".into(),
                parameters: json!({ "type": "object" }),
            }],
            temperature: None,
            max_tokens: Some(30),
        };
        let wire = encode_request(&endpoint(), &req, "conv-1");
        let shown = format!("{wire:?}");
        assert!(
            !shown.contains("sk-secret") && !shown.contains("models.example"),
            "{shown}"
        );
        let (target, back) = decode_request(wire);
        assert_eq!(target.model, "chat-echo");
        assert_eq!(target.options_json, r#"{"temperature":0.2}"#);
        assert_eq!(back.messages, req.messages);
        assert_eq!(back.tools, req.tools);
        assert_eq!(back.max_tokens, Some(30));
    }

    #[test]
    fn tool_call_fragments_are_assembled_at_the_finish() {
        let mut d = DeltaDecoder::default();
        let frag = |id: &str, name: &str, args: &str| pb::ChatDelta {
            kind: Some(DeltaKind::ToolCall(pb::ToolCallDelta {
                index: 0,
                id: id.into(),
                name: name.into(),
                arguments: args.into(),
            })),
        };
        assert!(d.decode(frag("c1", "get_weather", "{\"ci")).is_empty());
        assert!(d.decode(frag("", "", "ty\":\"Oslo\"}")).is_empty());
        assert!(!d.finished());
        let events: Vec<_> = d
            .decode(delta(DeltaKind::Finish("tool_calls".into())))
            .into_iter()
            .map(|e| e.map_err(|e| e.to_string()))
            .collect();
        assert_eq!(
            events,
            vec![
                Ok(ChatEvent::ToolCalls(vec![ToolCall {
                    id: "c1".into(),
                    name: "get_weather".into(),
                    arguments: r#"{"city":"Oslo"}"#.into(),
                }])),
                Ok(ChatEvent::Finish("tool_calls".into())),
            ]
        );
        assert!(d.finished());
    }

    #[test]
    fn node_errors_read_like_model_errors_without_the_nodes_words() {
        let e = ModelError::Upstream {
            status: 503,
            message: "http://10.20.0.5:8000/v1: overloaded".into(),
        };
        let back = decode_error(encode_error(&e));
        assert_eq!(
            back.to_string(),
            format!("the model endpoint failed (HTTP 503): {NODE_REPORTED}")
        );
        let auth = decode_error(encode_error(&ModelError::Auth("bad key".into())));
        assert!(matches!(auth, ModelError::Auth(m) if m == NODE_REPORTED));
    }

    /// A node's answer that fails with a call in progress hands the call's characters to the
    /// usage estimate before the error, over a limit or on the node's own error.
    #[test]
    fn a_failed_answer_drops_its_calls_in_progress_for_the_estimate() {
        let piece = |index: u32, args: String| pb::ChatDelta {
            kind: Some(DeltaKind::ToolCall(pb::ToolCallDelta {
                index,
                id: "c1".into(),
                name: "web_search".into(),
                arguments: args,
            })),
        };
        let half = "0,".repeat(16 * 1024);
        let mut d = DeltaDecoder::default();
        assert!(d.decode(piece(0, half.clone())).is_empty());
        assert!(d.decode(piece(0, half.clone())).is_empty());
        let events = d.decode(piece(0, half.clone()));
        assert!(matches!(events[..], [Ok(ChatEvent::Dropped(n)), Err(_)] if n == 10 + 3 * half.len()));
        let mut d = DeltaDecoder::default();
        assert!(d.decode(piece(0, "{}".into())).is_empty());
        let e = encode_error(&ModelError::Network("gone".into()));
        let events = d.decode(delta(DeltaKind::Error(e)));
        assert!(matches!(
            events[..],
            [Ok(ChatEvent::Dropped(12)), Err(ModelError::Network(_))]
        ));
    }
}
