//! Lambda entry point of the memory expiry job (an EventBridge schedule).

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    shared::lambda::run_scheduled(shared::memory::lifecycle::job).await
}
