//! Lambda entry point of the document ingestion worker (SQS, partial batch failures).

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    shared::lambda::run_sqs(shared::rag::pipeline::handler).await
}
