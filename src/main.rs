//! The `skill-runner` binary: configuration, logging, the listener, then [`skill_runner::serve`].
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use skill_runner::config::{Config, ConfigError, Refused};

#[derive(Parser)]
#[command(
    name = "skill-runner",
    version,
    about = "Runs skills behind a REST API",
    after_help = "Serving (the default command) takes its settings first:\n  \
                  skill-runner --port <PORT>   Port to listen on [env: PORT] [default: 8000]\n  \
                  skill-runner --host <HOST>   Address to listen on [env: SKILL_RUNNER_HOST] \
                  [default: 127.0.0.1]\n\
                  Every setting: skill-runner serve --help"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the API (the default). Every setting is an environment variable or a flag:
    /// `skill-runner serve --help` lists them.
    #[command(disable_help_flag = true)]
    Serve {
        /// Settings as flags.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
    /// Serve the invocable skills as an MCP server over stdin and stdout (for MCP clients that
    /// start their servers); configured like `serve`, logs on stderr.
    #[command(disable_help_flag = true)]
    Mcp {
        /// Settings as flags, as for `serve`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
    /// Checks a skill folder, a SKILL.md, a skill package (folder or zip) or a tool definition
    /// file: findings one per line, exit code 1 on errors.
    Validate {
        /// A skill folder, a `SKILL.md`, a skill package (folder or zip) or a tool definition
        /// file.
        path: PathBuf,
        /// For a `SKILL.md`: strict (default), lenient or anthropic-upload. For a tool
        /// definition: strict (default) or compat.
        #[arg(long)]
        profile: Option<String>,
    },
    /// API keys, in the store these settings name: `keys create --role admin --name ops`
    /// prints a new key (shown this once); `keys list`; `keys revoke <key_id>`.
    Keys {
        #[command(subcommand)]
        action: KeysAction,
    },
    /// Exits 0 when the service that these settings (`SKILL_RUNNER_BIND`, `PORT`) describe
    /// answers `/readyz` with 200, else 1 with the reason: the container image's health check.
    Health,
    /// Internal: the group reaper the service starts for itself (see `process::reaper`).
    #[command(hide = true)]
    Reaper,
    /// Internal: forks the leader of each supervised process tree (see `process::forkserver`).
    #[command(hide = true)]
    Forkserver,
}

#[derive(Subcommand)]
enum KeysAction {
    /// Makes a key and prints it on stdout (shown this once: only its hash is kept).
    Create {
        /// `admin`, `operator`, `submit` or `read`.
        #[arg(long)]
        role: skill_runner::store::Role,
        /// What the key is for.
        #[arg(long)]
        name: String,
        /// The tenant's id.
        #[arg(long, default_value = skill_runner::store::DEFAULT_TENANT)]
        tenant: String,
        /// When it stops opening anything (RFC 3339).
        #[arg(long, value_parser = parse_time)]
        expires_at: Option<skill_runner::clock::Timestamp>,
    },
    /// Lists the keys (never their secrets): id, prefix, tenant, role, name, state.
    List {
        /// Only this tenant's.
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Revokes a key: it opens nothing from then on, and is kept as a record.
    Revoke { key_id: String },
}

fn parse_time(text: &str) -> Result<skill_runner::clock::Timestamp, String> {
    skill_runner::clock::Timestamp::parse(text)
        .map_err(|e| format!("an RFC 3339 time such as 2027-01-31T00:00:00Z ({e})"))
}

fn main() -> ExitCode {
    // Settings before any subcommand are `serve`'s, the default (`skill-runner --port 9000`).
    let argv: Vec<OsString> = std::env::args_os().collect();
    let setting_first = argv
        .get(1)
        .and_then(|a| a.to_str())
        .is_some_and(|a| a.starts_with("--") && !matches!(a, "--help" | "--version"));
    let command = if setting_first {
        Command::Serve {
            args: argv[1..].to_vec(),
        }
    } else {
        Cli::parse()
            .command
            .unwrap_or(Command::Serve { args: Vec::new() })
    };
    match command {
        Command::Serve { args } => serve(&args),
        Command::Mcp { args } => mcp(&args),
        Command::Reaper => {
            skill_runner::process::reaper::run(std::io::stdin().lock());
            ExitCode::SUCCESS
        }
        Command::Forkserver => skill_runner::process::forkserver::serve(),
        Command::Health => health(),
        Command::Keys { action } => keys(action),
        Command::Validate { path, profile } => {
            match skill_runner::validate::check(&path, profile.as_deref()) {
                Ok(outcome) => {
                    for line in outcome.lines() {
                        println!("{line}");
                    }
                    if outcome.errors.is_empty() {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::from(1)
                    }
                }
                Err(problem) => {
                    eprintln!("skill-runner validate: {problem}");
                    ExitCode::from(2)
                }
            }
        }
    }
}

/// The environment handed over to this process (see `handover`), and the configuration it
/// gives with `args`; the exit code when the process must stop instead.
fn prepare(name: &str, args: &[OsString]) -> Result<(BTreeMap<String, String>, Config), ExitCode> {
    use skill_runner::process::handover;
    // First start: drop the environment and come back with it handed over (see `handover`).
    let vars = match handover::receive() {
        Ok(Some(vars)) => vars,
        Ok(None) => {
            let e = handover::reexec();
            eprintln!("skill-runner: cannot re-execute itself without its environment: {e}");
            return Err(ExitCode::FAILURE);
        }
        Err(e) => {
            eprintln!(
                "skill-runner: cannot read the environment handed over in {}: {e}",
                handover::FD_VARIABLE
            );
            return Err(ExitCode::FAILURE);
        }
    };
    if let Err(e) = handover::seal() {
        eprintln!("skill-runner: cannot mark itself non-dumpable: {e}");
        return Err(ExitCode::FAILURE);
    }
    skill_runner_types::faults::configure(vars.get("SKILL_RUNNER_TEST_FAULTS").map(String::as_str));
    let config = match configure(name, args, &vars) {
        Ok(config) => config,
        Err(Refused::Help(text)) => {
            println!("{text}");
            return Err(ExitCode::SUCCESS);
        }
        Err(Refused::Invalid(e)) => {
            eprintln!("skill-runner: configuration error: {e}");
            return Err(ExitCode::from(2));
        }
    };
    Ok((vars, config))
}

fn serve(args: &[OsString]) -> ExitCode {
    skill_runner::process::return_large_allocations();
    // Every HTTPS client of the service (shared storage, webhooks, model lists, traces) uses
    // the process-wide crypto provider: installed before any is built.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (vars, config) = match prepare("serve", args) {
        Ok(prepared) => prepared,
        Err(code) => return code,
    };
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime starts");
    let outcome = runtime.block_on(async {
        let listener = match tokio::net::TcpListener::bind(config.bind).await {
            Ok(l) => l,
            Err(e) => {
                let variable = if vars.contains_key("SKILL_RUNNER_BIND") {
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
    skill_runner::telemetry::flush();
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(code) => code,
    }
}

fn keys(action: KeysAction) -> ExitCode {
    use skill_runner::keys_cli::KeysCommand;
    let vars: BTreeMap<String, String> = std::env::vars().collect();
    let config = match Config::load(&[], &vars) {
        Ok(config) => config,
        Err(Refused::Help(text)) => {
            eprintln!("{text}");
            return ExitCode::from(2);
        }
        Err(Refused::Invalid(e)) => {
            eprintln!("skill-runner keys: configuration error: {e}");
            return ExitCode::from(2);
        }
    };
    let command = match action {
        KeysAction::Create {
            role,
            name,
            tenant,
            expires_at,
        } => KeysCommand::Create {
            tenant,
            role,
            name,
            expires_at,
        },
        KeysAction::List { tenant } => KeysCommand::List { tenant },
        KeysAction::Revoke { key_id } => KeysCommand::Revoke { key_id },
    };
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime starts");
    match runtime.block_on(skill_runner::keys_cli::run(&config, command)) {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("skill-runner keys: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn health() -> ExitCode {
    let vars: BTreeMap<String, String> = std::env::vars().collect();
    let bind = match Config::load(&[], &vars) {
        Ok(config) => config.bind,
        Err(Refused::Help(text)) => {
            eprintln!("{text}");
            return ExitCode::from(2);
        }
        Err(Refused::Invalid(e)) => {
            eprintln!("skill-runner health: configuration error: {e}");
            return ExitCode::from(2);
        }
    };
    match skill_runner::health_check::check(bind) {
        Ok(()) => {
            println!("ready");
            ExitCode::SUCCESS
        }
        Err(why) => {
            eprintln!("skill-runner health: {why}");
            ExitCode::FAILURE
        }
    }
}

fn mcp(args: &[OsString]) -> ExitCode {
    let (_, config) = match prepare("mcp", args) {
        Ok(prepared) => prepared,
        Err(code) => return code,
    };
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime starts");
    match runtime.block_on(skill_runner::server::mcp_stdio(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("skill-runner mcp: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn configure(
    name: &str,
    args: &[OsString],
    vars: &BTreeMap<String, String>,
) -> Result<Config, Refused> {
    let mut config = Config::load_for(name, args, vars)?;
    config.prepare_dirs().map_err(Refused::Invalid)?;
    config.self_exe = std::env::current_exe().ok();
    let landlock = skill_runner::process::sandbox::landlock_supported();
    skill_runner::process::sandbox::decide(config.sandbox, landlock)
        .map_err(|problem| Refused::Invalid(ConfigError::new("SKILL_RUNNER_SANDBOX", problem)))?;
    skill_runner::telemetry::init(&config).map_err(Refused::Invalid)?;
    Ok(config)
}
