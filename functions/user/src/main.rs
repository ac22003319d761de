//! Lambda entry point of the users module.

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    shared::http::lambda::run_http(user_api::router()).await
}
