//! Lambda entry point of the model module.

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    shared::http::lambda::run_http(model_api::router()).await
}
