//! Web search for agents: one provider interface and a SearXNG-compatible JSON implementation
//! (`GET {url}/search?q=..&format=json`), configured by `WEB_SEARCH_URL` / `WEB_SEARCH_API_KEY`.

use async_trait::async_trait;
use serde::Serialize;
use serde_json::Value;

use crate::upstream::{read_body, MAX_BODY_BYTES};

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct WebResult {
    pub title: String,
    pub url: String,
    pub snippet: String,
}

#[async_trait]
pub trait WebSearch: Send + Sync {
    async fn search(&self, query: &str, limit: usize) -> Result<Vec<WebResult>, String>;
}

pub struct Searxng {
    pub base_url: String,
    pub api_key: Option<String>,
    pub http: reqwest::Client,
}

#[async_trait]
impl WebSearch for Searxng {
    async fn search(&self, query: &str, limit: usize) -> Result<Vec<WebResult>, String> {
        let mut req = self
            .http
            .get(format!("{}/search", self.base_url))
            .query(&[("q", query), ("format", "json")])
            .timeout(std::time::Duration::from_secs(15));
        if let Some(key) = &self.api_key {
            req = req.bearer_auth(key);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| format!("web search is unreachable: {}", e.without_url()))?;
        if !resp.status().is_success() {
            return Err(format!("web search answered HTTP {}", resp.status().as_u16()));
        }
        let bytes = read_body(resp, MAX_BODY_BYTES)
            .await
            .map_err(|e| format!("web search: {e}"))?;
        let body: Value = serde_json::from_slice(&bytes)
            .map_err(|e| format!("web search answered something other than JSON: {e}"))?;
        Ok(parse_results(&body, limit))
    }
}

fn parse_results(body: &Value, limit: usize) -> Vec<WebResult> {
    let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
    body.get("results")
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter(|r| r.get("url").is_some())
                .take(limit)
                .map(|r| WebResult {
                    title: text(r, "title"),
                    url: text(r, "url"),
                    snippet: text(r, "content"),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The configured provider, if any.
pub fn provider(state: &crate::AppState) -> Option<Searxng> {
    let config = state.config();
    config.web_search_url.as_ref().map(|url| Searxng {
        base_url: url.clone(),
        api_key: config.web_search_api_key.clone(),
        http: state.models().http().clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_searxng_results() {
        let body = json!({ "results": [
            { "title": "A", "url": "https://a.example", "content": "alpha" },
            { "title": "no url" },
            { "title": "B", "url": "https://b.example", "content": "beta" },
            { "title": "C", "url": "https://c.example" }
        ]});
        let r = parse_results(&body, 2);
        assert_eq!(r.len(), 2);
        assert_eq!(r[1].snippet, "beta");
        assert!(parse_results(&json!({}), 5).is_empty());
    }
}
