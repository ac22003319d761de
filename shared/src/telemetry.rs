//! Logging set-up: JSON lines by default (CloudWatch), human-readable with LOG_FORMAT=pretty.

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber; later calls are ignored (tests build many apps).
pub fn init() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn"));
    let pretty = std::env::var("LOG_FORMAT").map(|v| v == "pretty").unwrap_or(false);
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_target(false);
    let _ = if pretty {
        builder.try_init()
    } else {
        builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .try_init()
    };
}

/// Installs the process-wide rustls crypto provider. Two providers get linked (AWS SDK and
/// sqlx) and rustls refuses to guess between them.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}
