//! One chunk of an OpenAI-compatible streamed answer: the parts the service reads from it.

use serde::Deserialize;
use serde_json::Value;

/// A streamed answer is read one chunk per token, so chunks are read straight into these types:
/// a `Value` tree per chunk cost about three times as much CPU. A chunk whose fields have other types than these is read leniently instead
/// (`Chunk::lenient`): a field of an unexpected type counts as absent, as it always did.
#[derive(Debug, Default, Deserialize)]
pub(super) struct Chunk {
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<Value>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct Choice {
    #[serde(default)]
    delta: Option<Delta>,
    #[serde(default)]
    pub finish_reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    /// Reasoning text: `reasoning_content` (DeepSeek, vLLM, Qwen) or `reasoning` (others).
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    reasoning: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<Value>>,
}

impl Chunk {
    /// The chunk on one `data:` line; None when the line is not JSON.
    pub fn parse(data: &str) -> Option<Self> {
        serde_json::from_str(data)
            .ok()
            .or_else(|| serde_json::from_str::<Value>(data).ok().map(|v| Self::lenient(&v)))
    }

    /// The same parts from any JSON, each taken only where it has the expected type.
    fn lenient(v: &Value) -> Self {
        let text =
            |from: Option<&Value>, key: &str| from.and_then(|o| o.get(key)).and_then(Value::as_str).map(str::to_owned);
        let choice = v.pointer("/choices/0");
        let delta = choice.and_then(|c| c.get("delta"));
        Self {
            choices: choice
                .map(|_| Choice {
                    delta: Some(Delta {
                        content: text(delta, "content"),
                        reasoning_content: text(delta, "reasoning_content"),
                        reasoning: text(delta, "reasoning"),
                        tool_calls: delta
                            .and_then(|d| d.get("tool_calls"))
                            .and_then(Value::as_array)
                            .cloned(),
                    }),
                    finish_reason: text(choice, "finish_reason"),
                })
                .into_iter()
                .collect(),
            usage: v.get("usage").cloned(),
            error: v.get("error").cloned(),
        }
    }

    /// The first choice: the only one the service asks for.
    pub fn choice(&self) -> Option<&Choice> {
        self.choices.first()
    }

    /// The token counts, which providers send in a chunk of their own at the end.
    pub fn usage(&self) -> Option<&Value> {
        self.usage.as_ref().filter(|u| u.is_object())
    }

    /// The upstream's error, when the chunk reports one instead of an answer.
    pub fn error(&self) -> Option<&Value> {
        self.error.as_ref().filter(|e| !e.is_null())
    }
}

impl Choice {
    pub fn text(&self) -> Option<&str> {
        non_empty(self.delta.as_ref()?.content.as_deref())
    }

    pub fn reasoning(&self) -> Option<&str> {
        let delta = self.delta.as_ref()?;
        non_empty(delta.reasoning_content.as_deref()).or_else(|| non_empty(delta.reasoning.as_deref()))
    }

    pub fn tool_calls(&self) -> &[Value] {
        self.delta
            .as_ref()
            .and_then(|d| d.tool_calls.as_deref())
            .unwrap_or_default()
    }
}

fn non_empty(text: Option<&str>) -> Option<&str> {
    text.filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_usual_chunk_is_read_typed() {
        let line = r#"{"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}"#;
        let chunk: Chunk = serde_json::from_str(line).unwrap();
        let choice = chunk.choice().unwrap();
        assert_eq!(choice.text(), Some("Hel"));
        assert!(choice.finish_reason.is_none() && chunk.error().is_none() && chunk.usage().is_none());
    }

    #[test]
    fn escaped_text_and_reasoning_are_read_whole() {
        let line = r#"{"choices":[{"delta":{"content":"a\n\"b\"","reasoning_content":null,"reasoning":"why"}}]}"#;
        let chunk = Chunk::parse(line).unwrap();
        let choice = chunk.choice().unwrap();
        assert_eq!(choice.text(), Some("a\n\"b\""));
        assert_eq!(
            choice.reasoning(),
            Some("why"),
            "a null reasoning_content gives way to reasoning"
        );
    }

    #[test]
    fn fields_of_other_types_count_as_absent() {
        for (line, text, finish) in [
            (
                r#"{"choices":[{"delta":{"content":7},"finish_reason":"stop"}]}"#,
                None,
                Some("stop"),
            ),
            (r#"{"choices":null,"usage":{"prompt_tokens":3}}"#, None, None),
            (r#"{"choices":[{"delta":"x","finish_reason":1}]}"#, None, None),
            (
                r#"{"choices":[{"delta":{"content":"ok","tool_calls":{}}}]}"#,
                Some("ok"),
                None,
            ),
        ] {
            let chunk = Chunk::parse(line).unwrap_or_else(|| panic!("{line}"));
            let choice = chunk.choice();
            assert_eq!(choice.and_then(Choice::text), text, "{line}");
            assert_eq!(choice.and_then(|c| c.finish_reason.as_deref()), finish, "{line}");
            assert!(choice.is_none_or(|c| c.tool_calls().is_empty()), "{line}");
        }
        assert!(Chunk::parse(r#"{"choices":null,"usage":{"prompt_tokens":3}}"#)
            .unwrap()
            .usage()
            .is_some());
        assert!(Chunk::parse(r#"{"usage":5}"#).unwrap().usage().is_none());
        assert!(Chunk::parse("not json").is_none());
    }

    #[test]
    fn an_error_is_reported_unless_null() {
        assert!(Chunk::parse(r#"{"error":{"message":"overloaded"}}"#)
            .unwrap()
            .error()
            .is_some());
        assert!(Chunk::parse(r#"{"error":null,"choices":[]}"#)
            .unwrap()
            .error()
            .is_none());
    }
}
