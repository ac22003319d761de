//! Process start-up shared by every binary, HTTP function or worker.

use crate::config::Config;
use crate::AppState;

/// Process start-up shared by every binary: logging, crypto provider, config, state (pool,
/// migrations, clients) and the first administrator.
pub async fn start() -> anyhow::Result<AppState> {
    // Before logging is set up: RUST_LOG, LOG_FORMAT and OTEL_* in `.env` were read after it.
    let _ = dotenvy::dotenv();
    crate::telemetry::init();
    crate::telemetry::install_crypto_provider();
    let config = Config::from_env()?;
    if config.mcp_stdio_enabled {
        crate::mcp::stdio::hide_environment_from_children()
            .map_err(|e| anyhow::anyhow!("MCP_STDIO_ENABLED: cannot keep the environment from stdio servers: {e}"))?;
    }
    let state = AppState::build(config).await?;
    let cfg = state.config();
    crate::users::service::ensure_first_admin(state.db(), cfg.admin_username.as_deref(), cfg.admin_password.as_deref())
        .await?;
    Ok(state)
}
