//! Lambda entry point of the memory module.

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    shared::http::lambda::run_http(memory_api::router()).await
}
