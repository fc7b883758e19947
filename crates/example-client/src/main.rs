//! `skill-runner-example-client`: the example client on its own port, driving a skill-runner
//! service over HTTP. Every setting is an environment variable or a flag (`--help`).

use std::process::ExitCode;

use clap::Parser;
use skill_runner_example_client::ClientArgs;

/// The example client of a skill-runner service.
#[derive(Parser)]
#[command(name = "skill-runner-example-client", version)]
struct Cli {
    #[command(flatten)]
    args: ClientArgs,
}

fn main() -> ExitCode {
    let args = Cli::parse().args;
    let password = std::env::var("SKILL_RUNNER_E2E_CLIENT_BACKEND_PASSWORD").ok();
    let config = match args.config(password) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("skill-runner-example-client: configuration error: {e}");
            return ExitCode::from(2);
        }
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime starts");
    let served = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(config.bind)
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", config.bind))?;
        let shutdown = skill_runner_web::connections::shutdown_signal();
        skill_runner_example_client::serve(config, listener, shutdown).await
    });
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("skill-runner-example-client: {e:#}");
            ExitCode::FAILURE
        }
    }
}
