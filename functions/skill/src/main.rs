//! Lambda entry point of the skill module.

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    shared::http::lambda::run_http(skill_api::router()).await
}
