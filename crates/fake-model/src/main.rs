//! `fake-model`: the fake model server on a loopback port, for driving agent CLIs offline.
//! It prints `fake model listening on http://<address>` on stderr once it accepts requests.

use std::process::ExitCode;

use clap::Parser;

/// A scripted model server (OpenAI, Gemini and Anthropic wire formats) for tests.
#[derive(Parser)]
#[command(name = "fake-model", version)]
struct Args {
    /// Where to listen (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:18080")]
    listen: std::net::SocketAddr,
    /// Appends every request as a JSON line.
    #[arg(long)]
    log: Option<std::path::PathBuf>,
    /// The answer when nothing is scripted.
    #[arg(long, default_value = "Done. {\"ok\": true}")]
    final_text: String,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime starts");
    let served = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(args.listen).await?;
        eprintln!("fake model listening on http://{}", listener.local_addr()?);
        skill_runner_fake_model::serve(listener, args.final_text, args.log).await
    });
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fake-model: {e}");
            ExitCode::FAILURE
        }
    }
}
