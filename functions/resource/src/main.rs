//! Lambda entry point of the resources module.

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    shared::lambda::run_http(resource_api::router()).await
}
