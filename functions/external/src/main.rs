//! Lambda entry point of the external API (everything but the chat routes) and the embed page.

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    shared::http::lambda::run_http(external_api::router()).await
}
