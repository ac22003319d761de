//! Lambda entry point of the knowledge-base modules.

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    shared::lambda::run_http(knowledge_api::router()).await
}
