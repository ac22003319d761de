//! OpenAI-compatible `/embeddings`: batched, order-preserving, dimension-checked.

use futures::{StreamExt, TryStreamExt};
use serde_json::{json, Value};

use super::{Endpoint, ModelClient, ModelError};

/// Whether texts are search queries or stored documents; endpoints such as e5, Cohere, Jina,
/// Voyage and NVIDIA embed the two differently. Sent as `input_type` when the config names
/// a value (`queryInputType`, `documentInputType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    Query,
    Document,
}

#[derive(Debug, Clone, Default)]
pub struct Embeddings {
    pub vectors: Vec<Vec<f32>>,
    pub prompt_tokens: u64,
}

impl Embeddings {
    pub fn dimension(&self) -> Option<usize> {
        self.vectors.first().map(Vec::len)
    }
}

const PARALLEL_BATCHES: usize = 4;

impl ModelClient {
    /// Embeds `texts` in order. `expected_dim`, when given, must match every vector.
    pub async fn embed(
        &self,
        ep: &Endpoint,
        texts: &[String],
        kind: InputKind,
        expected_dim: Option<usize>,
    ) -> Result<Embeddings, ModelError> {
        let batch = ep.option_u64("batchSize").unwrap_or(32).clamp(1, 2048) as usize;
        let input_type = match kind {
            InputKind::Query => ep.option_str("queryInputType"),
            InputKind::Document => ep.option_str("documentInputType"),
        };
        // Owned chunks keep the futures free of borrowed-slice lifetimes, so they stay Send.
        let chunks: Vec<Vec<String>> = texts.chunks(batch).map(<[String]>::to_vec).collect();
        let batches: Vec<Embeddings> = futures::stream::iter(chunks)
            .map(|chunk| async move { self.embed_batch(ep, &chunk, input_type).await })
            .buffered(PARALLEL_BATCHES)
            .try_collect()
            .await?;
        let mut out = Embeddings::default();
        for b in batches {
            out.prompt_tokens += b.prompt_tokens;
            out.vectors.extend(b.vectors);
        }
        let dim = expected_dim.or(out.dimension());
        if let Some(dim) = dim {
            if let Some(bad) = out.vectors.iter().find(|v| v.len() != dim) {
                return Err(ModelError::Protocol(format!(
                    "expected {dim}-dimensional vectors, got {}",
                    bad.len()
                )));
            }
        }
        Ok(out)
    }

    async fn embed_batch(
        &self,
        ep: &Endpoint,
        texts: &[String],
        input_type: Option<&str>,
    ) -> Result<Embeddings, ModelError> {
        let mut body = json!({ "model": ep.model, "input": texts, "encoding_format": "float" });
        if let Some(t) = input_type {
            body["input_type"] = json!(t);
        }
        let v = self.post_json(ep, "embeddings", &body).await?;
        let data = v
            .get("data")
            .and_then(Value::as_array)
            .ok_or_else(|| ModelError::Protocol("the answer has no data array".into()))?;
        if data.len() != texts.len() {
            return Err(ModelError::Protocol(format!(
                "asked for {} embeddings, got {}",
                texts.len(),
                data.len()
            )));
        }
        let mut indexed: Vec<(usize, Vec<f32>)> = Vec::with_capacity(data.len());
        for (pos, item) in data.iter().enumerate() {
            let index = item
                .get("index")
                .and_then(Value::as_u64)
                .map(|i| i as usize)
                .unwrap_or(pos);
            let vector = item
                .get("embedding")
                .and_then(Value::as_array)
                .ok_or_else(|| ModelError::Protocol("an item has no embedding array".into()))?
                .iter()
                .map(|x| x.as_f64().map(|f| f as f32))
                .collect::<Option<Vec<f32>>>()
                .ok_or_else(|| ModelError::Protocol("an embedding holds a non-number".into()))?;
            comparable(&vector)?;
            indexed.push((index, vector));
        }
        indexed.sort_by_key(|(i, _)| *i);
        if indexed.iter().enumerate().any(|(pos, (i, _))| pos != *i) {
            return Err(ModelError::Protocol("embedding indexes do not match the inputs".into()));
        }
        Ok(Embeddings {
            vectors: indexed.into_iter().map(|(_, v)| v).collect(),
            prompt_tokens: super::reported_tokens(v.pointer("/usage/prompt_tokens").and_then(Value::as_u64)),
        })
    }
}

/// A vector every store can hold and compare: pgvector refuses infinite components (a number
/// past f32 becomes one), and a zero vector has no direction, so its cosine distance to every
/// vector is NaN, which ranked every stored chunk equal and first.
fn comparable(vector: &[f32]) -> Result<(), ModelError> {
    if vector.iter().any(|x| !x.is_finite()) {
        return Err(ModelError::Protocol(
            "an embedding holds a number that is not a finite 32-bit float".into(),
        ));
    }
    if vector.iter().all(|x| *x == 0.0) {
        return Err(ModelError::Protocol("an embedding is empty or all zeros".into()));
    }
    Ok(())
}
