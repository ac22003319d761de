//! Reading back traces from the Arize Phoenix that `make test` starts (PHOENIX_URL), through
//! its REST API: one project per test, spans as Phoenix returns them.

use std::time::{Duration, Instant};

use serde_json::Value;

/// Phoenix's base URL, also the OTLP/HTTP endpoint to export to.
pub fn url() -> String {
    std::env::var("PHOENIX_URL").expect("PHOENIX_URL must be set: run the tests with `make test`")
}

/// A project name no other test uses (`openinference.project.name` picks it).
pub fn new_project(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}

/// The project's spans once one named `name` has arrived, polling for `wait`.
pub async fn spans_once(project: &str, name: &str, wait: Duration) -> Vec<Value> {
    let phoenix = url();
    let client = reqwest::Client::new();
    let deadline = Instant::now() + wait;
    loop {
        let reply = client
            .get(format!("{phoenix}/v1/projects/{project}/spans?limit=1000"))
            .timeout(Duration::from_secs(10))
            .send()
            .await;
        if let Ok(reply) = reply {
            if reply.status().is_success() {
                let body: Value = reply.json().await.expect("spans JSON");
                let spans = body["data"].as_array().cloned().unwrap_or_default();
                if spans.iter().any(|s| s["name"] == name) {
                    return spans;
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "Phoenix at {phoenix} has no span {name:?} in project {project} after {wait:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

pub fn span_id(s: &Value) -> &str {
    s["context"]["span_id"].as_str().expect("span id")
}

pub fn trace_id(s: &Value) -> &str {
    s["context"]["trace_id"].as_str().expect("trace id")
}

/// Whether `ancestor` is on the parent chain of `span`.
pub fn is_below(all: &[Value], span: &Value, ancestor: &Value) -> bool {
    let mut at = span;
    while let Some(parent) = at["parent_id"].as_str() {
        if parent == span_id(ancestor) {
            return true;
        }
        match all.iter().find(|s| span_id(s) == parent) {
            Some(p) => at = p,
            None => return false,
        }
    }
    false
}

/// The spans' names, for failure messages.
pub fn names(spans: &[Value]) -> String {
    spans
        .iter()
        .map(|s| s["name"].as_str().unwrap_or("?"))
        .collect::<Vec<_>>()
        .join(", ")
}
