//! The `skill-runner` binary: configuration, logging, the listener, then [`skill_runner::serve`].
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use skill_runner::config::{Config, ConfigError};

#[derive(Parser)]
#[command(
    name = "skill-runner",
    version,
    about = "Runs skills behind a REST API"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the API (the default). Configured by environment variables; see the README.
    Serve,
    /// Internal: the group reaper the service starts for itself (see `process::reaper`).
    #[command(hide = true)]
    Reaper,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => serve(),
        Command::Reaper => {
            skill_runner::process::reaper::run(std::io::stdin().lock());
            ExitCode::SUCCESS
        }
    }
}

fn serve() -> ExitCode {
    let config = match configure() {
        Ok(config) => config,
        Err(e) => {
            eprintln!("skill-runner: configuration error: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime starts");
    let outcome = runtime.block_on(async {
        let listener = match tokio::net::TcpListener::bind(config.bind).await {
            Ok(l) => l,
            Err(e) => {
                let variable = if std::env::var_os("SKILL_RUNNER_BIND").is_some() {
                    "SKILL_RUNNER_BIND"
                } else {
                    "PORT"
                };
                eprintln!(
                    "skill-runner: configuration error: {variable}: cannot listen on {}: {e}",
                    config.bind
                );
                return Err(ExitCode::from(2));
            }
        };
        skill_runner::serve(config, listener, skill_runner::shutdown_signal())
            .await
            .map_err(|e| {
                tracing::error!(error = format!("{e:#}"), "the service stopped on an error");
                eprintln!("skill-runner: {e:#}");
                ExitCode::FAILURE
            })
    });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(code) => code,
    }
}

fn configure() -> Result<Config, ConfigError> {
    let mut config = Config::from_env()?;
    config.prepare_dirs()?;
    config.reaper_exe = std::env::current_exe().ok();
    skill_runner::telemetry::init(&config)?;
    Ok(config)
}
