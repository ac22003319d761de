//! Lambda entry point of the apps module.

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    shared::http::lambda::run_http(app_api::router()).await
}
