//! Lambda entry point of the streamed knowledge-base Q&A (`/rag/qa/stream`,
//! `/open-api/rag/qa/stream`) with response streaming.

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    shared::http::lambda::run_http_streaming(knowledge_api::qa_router()).await
}
