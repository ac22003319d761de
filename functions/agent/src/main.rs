//! Lambda entry point of the agents module (everything but the chat stream).

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    shared::http::lambda::run_http(agent_api::router()).await
}
