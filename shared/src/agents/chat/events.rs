//! The lines of the chat stream (NDJSON, discriminated by `type`).

use serde::Serialize;
use serde_json::{json, Value};
use utoipa::ToSchema;

#[derive(Debug, Clone, Copy, Default, Serialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct TokenUsage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

#[derive(Debug, Clone, Serialize, ToSchema, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamEvent {
    /// Reasoning text.
    Thinking { content: String },
    /// An answer fragment; the client concatenates them in order.
    Text { content: String },
    /// The model asked for a tool.
    #[serde(rename_all = "camelCase")]
    ToolCall {
        name: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        server_id: Option<i64>,
        arguments: Value,
    },
    /// The tool answered (`ok`) or failed.
    ToolResult { name: String, ok: bool },
    /// The answer is complete and stored.
    #[serde(rename_all = "camelCase")]
    Done {
        conversation_id: String,
        message_id: i64,
        usage: TokenUsage,
        duration_ms: u64,
    },
    /// The answer was stopped on request (`POST .../stop`); what was generated is stored.
    #[serde(rename_all = "camelCase")]
    Stopped {
        conversation_id: String,
        message_id: i64,
        usage: TokenUsage,
        duration_ms: u64,
    },
    /// Context the answer goes on without: `source` is `knowledge` (the agent's knowledge base
    /// could not be searched), `memory` (long-term memories could not be recalled) or `mcp`
    /// (an MCP server's tools could not be listed).
    Warning { source: &'static str, message: String },
    /// The last line of a failed stream.
    Error { code: i64, message: String },
}

impl StreamEvent {
    pub fn ndjson(&self) -> String {
        let mut line = serde_json::to_string(self)
            .unwrap_or_else(|_| json!({ "type": "error", "code": 500, "message": "encoding failed" }).to_string());
        line.push('\n');
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_have_the_wire_shape() {
        let done = StreamEvent::Done {
            conversation_id: "c1".into(),
            message_id: 7,
            usage: TokenUsage {
                prompt_tokens: 3,
                completion_tokens: 4,
            },
            duration_ms: 12,
        };
        let v: Value = serde_json::from_str(done.ndjson().trim_end()).unwrap();
        assert_eq!(v["type"], "done");
        assert_eq!(v["conversationId"], "c1");
        assert_eq!(v["usage"]["promptTokens"], 3);
        let call = StreamEvent::ToolCall {
            name: "echo".into(),
            server_id: Some(2),
            arguments: json!({"a": 1}),
        };
        assert_eq!(
            call.ndjson(),
            "{\"type\":\"tool_call\",\"name\":\"echo\",\"serverId\":2,\"arguments\":{\"a\":1}}\n"
        );
        assert!(StreamEvent::Text { content: "a\nb".into() }.ndjson().ends_with("}\n"));
    }
}
