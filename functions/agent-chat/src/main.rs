//! Lambda entry point of the streamed agent routes (`/agent/{agentId}/chat`,
//! `/agent/create/stream`) with response streaming.

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    shared::http::lambda::run_http_streaming(agent_api::stream_router()).await
}
