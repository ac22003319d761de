//! Lambda entry point of the external chat routes (`/openapi/v1/agent/chat`, `.../chat/sync`)
//! with response streaming; the STREAM integration also lifts API Gateway's 29 s limit off
//! the synchronous chat.

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    shared::http::lambda::run_http_streaming(external_api::stream_router()).await
}
