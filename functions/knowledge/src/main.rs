//! Lambda entry point of the knowledge-base modules.

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    shared::http::lambda::run_http(knowledge_api::router()).await
}
