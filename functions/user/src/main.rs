//! Lambda entry point of the users module.

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    shared::lambda::run_http(user_api::router()).await
}
