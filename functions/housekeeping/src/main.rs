//! Lambda entry point of the daily clean-up (an EventBridge schedule).

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    shared::lambda::run_scheduled(shared::housekeeping::job).await
}
