//! `agent-platform`: runs the whole API locally on 127.0.0.1:$PORT.

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let state = shared::startup::start().await?;
    let port: u16 = std::env::var("PORT").ok().and_then(|p| p.parse().ok()).unwrap_or(8080);
    let bind = std::env::var("BIND_ADDRESS").unwrap_or_else(|_| "127.0.0.1".to_owned());
    let listener = tokio::net::TcpListener::bind((bind.as_str(), port))
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {bind}:{port}: {e} (set PORT to another port)"))?;
    let base = format!("http://{}/{}", listener.local_addr()?, state.config().api_prefix);
    let app = local_server::build_app(state.clone());
    local_server::start_workers(&state);
    local_server::start_housekeeping(&state);
    tracing::info!(%base, "agent platform listening");
    println!("Agent platform API: {base}");
    println!("OpenAPI:            http://{}/api-docs", listener.local_addr()?);
    if let (Some(user), Some(_)) = (&state.config().admin_username, &state.config().admin_password) {
        println!("Admin login:        {user} (password from ADMIN_PASSWORD)");
    }
    local_server::serve(listener, app, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    // Stdio MCP servers run in process groups of their own, out of the terminal's reach.
    state.mcp().close_all(std::time::Duration::from_secs(10)).await;
    Ok(())
}
