//! Lambda entry point of the memory extraction worker (SQS, partial batch failures).

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    shared::lambda::run_sqs(shared::memory::worker::handler).await
}
