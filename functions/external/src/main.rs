//! Lambda entry point of the external API (everything but the chat routes) and the embed page.

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    shared::lambda::run_http(external_api::router()).await
}
