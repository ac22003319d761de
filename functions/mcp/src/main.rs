//! Lambda entry point of the MCP server module.

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    shared::http::lambda::run_http(mcp_api::router()).await
}
