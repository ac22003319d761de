//! Jina/Cohere-shaped `/rerank`: `query`, `documents`, `top_n` -> `results[{index, relevance_score}]`.

use serde_json::{json, Value};

use super::{Endpoint, ModelClient, ModelError};

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RerankHit {
    /// Position in the documents sent.
    pub index: usize,
    pub score: f64,
}

/// A ranking and the tokens the endpoint says it took, when it says.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reranking {
    pub hits: Vec<RerankHit>,
    pub reported_tokens: Option<u64>,
}

/// Tokens a rerank answer reports: `usage.total_tokens` (Jina, vLLM, Xinference) or
/// `usage.prompt_tokens`, or Cohere's `meta.tokens.input_tokens`; capped as every reported
/// count is (a count near 2^63 stored as it was made every usage statistic of the model fail).
fn reported_tokens(v: &Value) -> Option<u64> {
    v.pointer("/usage/total_tokens")
        .or_else(|| v.pointer("/usage/prompt_tokens"))
        .or_else(|| v.pointer("/meta/tokens/input_tokens"))
        .and_then(Value::as_u64)
        .map(|count| super::reported_tokens(Some(count)))
}

impl ModelClient {
    /// Scores `documents` against `query`, best first, at most `top_n`.
    pub async fn rerank(
        &self,
        ep: &Endpoint,
        query: &str,
        documents: &[String],
        top_n: usize,
    ) -> Result<Reranking, ModelError> {
        if documents.is_empty() {
            return Ok(Reranking::default());
        }
        let body = json!({ "model": ep.model, "query": query, "documents": documents, "top_n": top_n, "return_documents": false });
        let v = self.post_json(ep, "rerank", &body).await?;
        let results = v
            .get("results")
            .or_else(|| v.get("data"))
            .and_then(Value::as_array)
            .ok_or_else(|| ModelError::Protocol("the answer has no results array".into()))?;
        let mut hits = Vec::with_capacity(results.len());
        for r in results {
            let index = r
                .get("index")
                .and_then(Value::as_u64)
                .ok_or_else(|| ModelError::Protocol("a result has no index".into()))? as usize;
            if index >= documents.len() {
                return Err(ModelError::Protocol(format!("result index {index} is out of range")));
            }
            // A document ranked twice would take two of the result's places and leave it
            // short once the repeat is dropped.
            if hits.iter().any(|h: &RerankHit| h.index == index) {
                return Err(ModelError::Protocol(format!("document {index} is ranked twice")));
            }
            let score = r
                .get("relevance_score")
                .or_else(|| r.get("score"))
                .and_then(Value::as_f64)
                .ok_or_else(|| ModelError::Protocol("a result has no relevance_score".into()))?;
            hits.push(RerankHit { index, score });
        }
        as_probabilities(&mut hits, ep.option_str("rerankScores"));
        hits.sort_by(|a, b| b.score.total_cmp(&a.score));
        hits.truncate(top_n);
        Ok(Reranking {
            hits,
            reported_tokens: reported_tokens(&v),
        })
    }
}

/// Scores on 0-1, which thresholds and fusion take them on. A reranker answering raw logits
/// (some servers of bge-reranker do) has every score put through the logistic function:
/// clamped, a negative logit fell under any threshold and every score above 1 read as 1. The
/// config's `rerankScores` says which it answers ("logits" or "probabilities"); unsaid, an
/// answer with a score off 0-1 (beyond rounding) is taken for logits, so one whose logits all
/// fall inside it is read as probabilities, query by query: set it for such a model.
fn as_probabilities(hits: &mut [RerankHit], said: Option<&str>) {
    const ROUNDING: f64 = 1e-6;
    let logits = match said {
        Some("logits") => true,
        Some("probabilities") => false,
        _ => hits.iter().any(|h| !(-ROUNDING..=1.0 + ROUNDING).contains(&h.score)),
    };
    for h in hits {
        h.score = match logits {
            true => 1.0 / (1.0 + (-h.score).exp()),
            false => h.score.clamp(0.0, 1.0),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logits_become_probabilities_and_keep_their_order() {
        let hit = |index, score| RerankHit { index, score };
        let mut probabilities = vec![hit(0, 0.9), hit(1, 0.1), hit(2, 1.000_000_1)];
        as_probabilities(&mut probabilities, None);
        let scores: Vec<f64> = probabilities.iter().map(|h| h.score).collect();
        assert_eq!(scores, [0.9, 0.1, 1.0], "rounding past 1 is not a logit");
        // Logits that happen to fall in 0-1, said to be logits.
        let mut said = vec![hit(0, 0.8)];
        as_probabilities(&mut said, Some("logits"));
        assert!((said[0].score - 0.689).abs() < 0.001, "{}", said[0].score);
        let mut logits = vec![hit(0, 4.2), hit(1, -1.5), hit(2, 0.0)];
        as_probabilities(&mut logits, None);
        let scores: Vec<f64> = logits.iter().map(|h| h.score).collect();
        assert!(scores[0] > 0.98 && scores[0] < 1.0, "{scores:?}");
        assert!(scores[1] > 0.15 && scores[1] < 0.2, "{scores:?}");
        assert_eq!(scores[2], 0.5);
    }

    #[test]
    fn reported_tokens_are_read_where_endpoints_put_them() {
        let tokens = |v: Value| reported_tokens(&v);
        assert_eq!(tokens(json!({ "usage": { "total_tokens": 42 } })), Some(42));
        assert_eq!(tokens(json!({ "usage": { "prompt_tokens": 7 } })), Some(7));
        assert_eq!(tokens(json!({ "meta": { "tokens": { "input_tokens": 9 } } })), Some(9));
        assert_eq!(
            tokens(json!({ "meta": { "billed_units": { "search_units": 1 } } })),
            None
        );
        assert_eq!(tokens(json!({ "usage": { "total_tokens": "many" } })), None);
        assert_eq!(
            tokens(json!({ "usage": { "total_tokens": u64::MAX } })),
            Some(crate::models::client::MAX_REPORTED_TOKENS)
        );
    }
}
