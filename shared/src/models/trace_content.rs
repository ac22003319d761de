//! Prompt and answer text on model-call spans, in the shape of OpenTelemetry's GenAI
//! conventions (`gen_ai.input.messages`, `gen_ai.output.messages`: JSON arrays of messages made
//! of typed parts). Only when the operator turns it on (`telemetry::capture_content`): prompts
//! hold what users wrote and what knowledge bases and memories returned.

use serde_json::{json, Value};
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::client::{ChatMessage, ContentPart, MessageContent, ToolCall};

pub const INPUT: &str = "gen_ai.input.messages";
pub const OUTPUT: &str = "gen_ai.output.messages";

/// Puts the text on the span as an OpenTelemetry attribute only, not as a field of the tracing
/// span: the JSON log lines print the fields of the span they are logged in, and the text is
/// for the trace store, not for the logs.
pub fn record_content(span: &Span, key: &'static str, text: String) {
    span.set_attribute(key, text);
}

/// The request's messages as `gen_ai.input.messages`. Images are named, not copied: a data URI
/// would make the span megabytes long.
pub fn input_messages(messages: &[ChatMessage]) -> String {
    let messages: Vec<Value> = messages
        .iter()
        .map(|m| {
            let mut parts: Vec<Value> = match &m.content {
                None => vec![],
                Some(MessageContent::Text(text)) => vec![text_part(&m.role, m.tool_call_id.as_deref(), text)],
                Some(MessageContent::Parts(parts)) => parts
                    .iter()
                    .map(|p| match p {
                        ContentPart::Text { text } => text_part(&m.role, m.tool_call_id.as_deref(), text),
                        ContentPart::ImageUrl { .. } => json!({ "type": "image" }),
                    })
                    .collect(),
            };
            parts.extend(m.tool_calls.iter().map(|c| {
                json!({ "type": "tool_call", "id": c.id, "name": c.function.name, "arguments": c.function.arguments })
            }));
            json!({ "role": m.role, "parts": parts })
        })
        .collect();
    Value::Array(messages).to_string()
}

fn text_part(role: &str, tool_call_id: Option<&str>, text: &str) -> Value {
    match (role, tool_call_id) {
        ("tool", Some(id)) => json!({ "type": "tool_call_response", "id": id, "response": text }),
        _ => json!({ "type": "text", "content": text }),
    }
}

/// What the model answered as `gen_ai.output.messages`.
pub fn output_messages(text: &str, tool_calls: &[ToolCall], finish_reason: Option<&str>) -> String {
    let mut parts = vec![];
    if !text.is_empty() {
        parts.push(json!({ "type": "text", "content": text }));
    }
    parts.extend(
        tool_calls
            .iter()
            .map(|c| json!({ "type": "tool_call", "id": c.id, "name": c.name, "arguments": c.arguments })),
    );
    json!([{ "role": "assistant", "parts": parts, "finish_reason": finish_reason.unwrap_or("stop") }]).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_become_typed_parts() {
        let messages = vec![ChatMessage::system("Be brief."), ChatMessage::user("Hi")];
        let input: Value = serde_json::from_str(&input_messages(&messages)).unwrap();
        assert_eq!(
            input,
            json!([
                { "role": "system", "parts": [{ "type": "text", "content": "Be brief." }] },
                { "role": "user", "parts": [{ "type": "text", "content": "Hi" }] },
            ])
        );
        let call = ToolCall {
            id: "c1".into(),
            name: "get-sum".into(),
            arguments: "{}".into(),
        };
        let output: Value = serde_json::from_str(&output_messages("", &[call], Some("tool_calls"))).unwrap();
        assert_eq!(
            output,
            json!([{ "role": "assistant", "finish_reason": "tool_calls",
                     "parts": [{ "type": "tool_call", "id": "c1", "name": "get-sum", "arguments": "{}" }] }])
        );
    }
}
