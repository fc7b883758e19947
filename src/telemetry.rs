//! Structured logs with `tracing`: human-readable by default, JSON with `LOG_FORMAT=json`.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::{Config, ConfigError, LogFormat};

/// Installs the global subscriber (logs go to stderr). Fails on an unparsable filter.
pub fn init(config: &Config) -> Result<(), ConfigError> {
    let filter = EnvFilter::try_new(&config.log_filter).map_err(|e| {
        ConfigError::new(
            "LOG_LEVEL",
            format!("'{}' is not a log level or filter: {e}", config.log_filter),
        )
    })?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let installed = match config.log_format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
    };
    // A second init (tests in one process) keeps the first subscriber.
    drop(installed);
    Ok(())
}
