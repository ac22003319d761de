//! `smart` chunking: a chat model proposes where chunks should start, between paragraphs;
//! the chunks it outlines are then bounded by `maxChunkTokens` like any other. Anything
//! unusable in the answer falls back to the structure-aware rules, with the reason logged.

use std::future::Future;

use serde_json::Value;

use crate::json::NoValue;
use crate::models::client::{ChatMessage, ChatRequest};
use crate::models::gateway::{self, Billing};
use crate::models::ModelType;
use crate::rag::chunk::{self, Chunk, ChunkParams};
use crate::rag::document::ParsedDocument;
use crate::{AppError, AppState};

/// Paragraphs shown to the model at once.
const WINDOW: usize = 60;

const SYSTEM: &str = "You split documents into coherent chunks for retrieval. You get numbered paragraphs. \
Reply with JSON only, like {\"boundaries\": [1, 4, 9]}: the numbers of the paragraphs that start a new chunk. \
Start a new chunk where the topic changes.";

/// Why a document was not chunked by its model.
pub enum NotChunked<E> {
    /// The reason to fall back to the structure-aware rules.
    Fallback(String),
    /// `before_window` stopped it.
    Stopped(E),
}

impl<E> From<String> for NotChunked<E> {
    fn from(reason: String) -> Self {
        Self::Fallback(reason)
    }
}

/// Chunks `doc` with boundaries from `model_id`. `before_window` runs before each window's
/// paid call, and its Err stops the chunking: a replaced run's remaining windows would go on
/// at its uploader's cost.
pub async fn chunk<E, F: Future<Output = Result<(), E>>>(
    state: &AppState,
    (model_id, user_id): (Option<i64>, i64),
    doc: &ParsedDocument,
    params: &ChunkParams,
    mut before_window: impl FnMut() -> F,
) -> Result<Vec<Chunk>, NotChunked<E>> {
    let model_id = model_id.ok_or_else(|| "chunkModelId is not set".to_owned())?;
    let model = gateway::load(state, model_id, ModelType::Chat)
        .await
        .map_err(|e| format!("the chunk model cannot be used: {}", e.told()))?;
    let sections = &doc.sections;
    let mut starts = Vec::new();
    for window_start in (0..sections.len()).step_by(WINDOW) {
        before_window().await.map_err(NotChunked::Stopped)?;
        let window = &sections[window_start..(window_start + WINDOW).min(sections.len())];
        let numbered: Vec<String> = window
            .iter()
            .enumerate()
            .map(|(i, s)| format!("[{}] {}", i + 1, s.text))
            .collect();
        let req = ChatRequest {
            messages: vec![ChatMessage::system(SYSTEM), ChatMessage::user(numbered.join("\n\n"))],
            temperature: Some(0.0),
            ..Default::default()
        };
        let answer = gateway::chat(state, &model, Billing::User(user_id), "smart-chunk", &req)
            .await
            // Shown to the base's owner, who may not own the model: what its endpoint
            // answered stays in the log (see ModelError::brief).
            .map_err(|e| format!("chunk model: {}", AppError::from(e).told()))?;
        let bounds = boundaries(&answer.content, window.len())?;
        starts.extend(bounds.into_iter().map(|b| window_start + b - 1));
    }
    let mut chunks = Vec::new();
    for (i, &start) in starts.iter().enumerate() {
        let end = starts.get(i + 1).copied().unwrap_or(sections.len());
        let group = &sections[start..end];
        let text = group.iter().map(|s| s.text.as_str()).collect::<Vec<_>>().join("\n\n");
        for mut c in chunk::chunk_text(&text, params).map_err(|e| e.to_string())? {
            c.title = group[0].title.clone();
            c.page = group[0].page;
            c.paragraph_index = start;
            chunks.push(c);
        }
    }
    Ok(chunks)
}

/// Reads `{"boundaries": [...]}` from the answer (code fences and prose around it allowed):
/// sorted, unique, in 1..=n, and always starting at 1.
fn boundaries(answer: &str, n: usize) -> Result<Vec<usize>, String> {
    let v = crate::json::first_value(answer, &['{'], |v| v["boundaries"].is_array()).map_err(|e| match e {
        NoValue::NoJson => "the chunk model gave no JSON".to_owned(),
        NoValue::Invalid(e) => format!("the chunk model's JSON is invalid: {e}"),
        NoValue::Unfit => "the chunk model's JSON has no boundaries array".to_owned(),
    })?;
    let list = v["boundaries"].as_array().map(Vec::as_slice).unwrap_or_default();
    let mut out: Vec<usize> = list
        .iter()
        .filter_map(Value::as_u64)
        .map(|b| b as usize)
        .filter(|b| (1..=n).contains(b))
        .collect();
    out.push(1);
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boundaries_are_cleaned() {
        assert_eq!(
            boundaries("```json\n{\"boundaries\": [3, 1, 3, 9, 0]}\n```", 5).unwrap(),
            vec![1, 3]
        );
        assert_eq!(boundaries("{\"boundaries\": []}", 5).unwrap(), vec![1]);
        assert!(boundaries("no idea", 5).is_err());
        // Braces the wrong way round, as a cut or confused answer has them.
        assert!(boundaries("} {", 5).is_err());
        assert!(boundaries("note: } then {\"boundaries\": [1, 4", 5).is_err());
        assert!(boundaries("{\"b\": 1}", 5).is_err());
    }
}
