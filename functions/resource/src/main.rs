//! Lambda entry point of the resources module.

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    shared::http::lambda::run_http(resource_api::router()).await
}
