//! Process start-up shared by every binary, HTTP function or worker.

use crate::config::Config;
use crate::AppState;

/// Process start-up shared by every binary: logging, crypto provider, config, state (pool,
/// migrations, clients) and the first administrator.
pub async fn start() -> anyhow::Result<AppState> {
    crate::telemetry::init();
    crate::telemetry::install_crypto_provider();
    let config = Config::from_env()?;
    let state = AppState::build(config).await?;
    let cfg = state.config();
    crate::users::service::ensure_first_admin(state.db(), cfg.admin_username.as_deref(), cfg.admin_password.as_deref())
        .await?;
    Ok(state)
}
