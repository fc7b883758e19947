//! The example client (`skill-runner-example-client`): a separate front end that knows the
//! service only through its public HTTP API, as a real front end would, so operators and
//! front-end authors can see a whole run from form to result.
//!
//! It runs as its own process on its own port (default 8011). Settings, each also a flag:
//! `SKILL_RUNNER_E2E_CLIENT_PORT` (an invalid value falls back to 8011 with a warning, as the
//! reference does), `SKILL_RUNNER_E2E_CLIENT_HOST` (127.0.0.1),
//! `SKILL_RUNNER_E2E_CLIENT_BACKEND_BASE_URL` (`http://127.0.0.1:8000`),
//! `SKILL_RUNNER_E2E_CLIENT_RECORDINGS_DIR` (`<SKILL_RUNNER_DATA_DIR or ./data>/e2e_client_recordings`),
//! and, when the backend asks for Basic Auth, `SKILL_RUNNER_E2E_CLIENT_BACKEND_USERNAME` and
//! `SKILL_RUNNER_E2E_CLIENT_BACKEND_PASSWORD` (no flag: command lines are world-readable).

pub mod backend;
mod pages;
pub mod recordings;
mod results;
mod runs;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};
use tokio::net::TcpListener;

use self::backend::Backend;

/// The port when none (or an invalid one) is configured.
pub const DEFAULT_PORT: u16 = 8011;

/// `skill-runner-example-client` settings.
#[derive(Debug, clap::Args)]
pub struct ClientArgs {
    /// The port to serve on; an invalid value falls back to 8011 with a warning.
    #[arg(long, env = "SKILL_RUNNER_E2E_CLIENT_PORT", default_value = "8011")]
    port: String,
    /// The address to serve on.
    #[arg(
        long,
        env = "SKILL_RUNNER_E2E_CLIENT_HOST",
        default_value = "127.0.0.1"
    )]
    host: IpAddr,
    /// The service the client drives.
    #[arg(
        long,
        env = "SKILL_RUNNER_E2E_CLIENT_BACKEND_BASE_URL",
        default_value = "http://127.0.0.1:8000"
    )]
    backend: reqwest::Url,
    /// Where run recordings are kept.
    #[arg(long, env = "SKILL_RUNNER_E2E_CLIENT_RECORDINGS_DIR")]
    recordings_dir: Option<PathBuf>,
    /// The service's data folder, under which recordings go by default.
    #[arg(long, env = "SKILL_RUNNER_DATA_DIR", default_value = "data")]
    data_dir: PathBuf,
    /// The backend's Basic Auth user (the password is `SKILL_RUNNER_E2E_CLIENT_BACKEND_PASSWORD`).
    #[arg(long, env = "SKILL_RUNNER_E2E_CLIENT_BACKEND_USERNAME")]
    backend_username: Option<String>,
}

/// The example client's configuration.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    pub bind: SocketAddr,
    pub backend: reqwest::Url,
    pub recordings: PathBuf,
    pub auth: Option<(String, String)>,
    /// What was odd but tolerated (a bad port), for the log.
    pub warnings: Vec<String>,
}

impl ClientArgs {
    /// The configuration; `password` is the backend password from the environment.
    pub fn config(self, password: Option<String>) -> Result<ClientConfig, String> {
        let mut warnings = Vec::new();
        let port = self.port.trim().parse::<u16>().unwrap_or_else(|_| {
            warnings.push(format!(
                "SKILL_RUNNER_E2E_CLIENT_PORT: '{}' is not a port number; using {DEFAULT_PORT}",
                self.port
            ));
            DEFAULT_PORT
        });
        if !matches!(self.backend.scheme(), "http" | "https") {
            return Err(format!(
                "SKILL_RUNNER_E2E_CLIENT_BACKEND_BASE_URL: '{}' is not an http(s) URL",
                self.backend
            ));
        }
        let auth = match (self.backend_username, password) {
            (Some(user), Some(password)) => Some((user, password)),
            (None, None) => None,
            _ => {
                return Err("SKILL_RUNNER_E2E_CLIENT_BACKEND_USERNAME and \
                            SKILL_RUNNER_E2E_CLIENT_BACKEND_PASSWORD go together"
                    .into());
            }
        };
        Ok(ClientConfig {
            bind: SocketAddr::new(self.host, port),
            backend: self.backend,
            recordings: self
                .recordings_dir
                .unwrap_or_else(|| self.data_dir.join("e2e_client_recordings")),
            auth,
            warnings,
        })
    }
}

/// What the handlers share.
#[derive(Debug)]
struct Client {
    backend: Backend,
    recordings: PathBuf,
}

type Shared = Arc<Client>;

/// Serves the client on `listener` until `shutdown`.
pub async fn serve(
    config: ClientConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(&config.recordings)?;
    for warning in &config.warnings {
        tracing::warn!("{warning}");
    }
    let client = Arc::new(Client {
        backend: Backend::new(config.backend.clone(), config.auth.clone())?,
        recordings: config.recordings.clone(),
    });
    let app = router(client).layer(axum::middleware::from_fn_with_state(
        Arc::new(skill_runner_web::allowed_hosts::AllowedHosts::new(
            config.bind,
            &[],
        )),
        skill_runner_web::allowed_hosts::guard,
    ));
    let addr = listener.local_addr()?;
    tracing::info!(backend = %config.backend, "example client listening on http://{addr}");
    eprintln!("example client listening on http://{addr}");
    let limits = skill_runner_web::connections::ConnectionLimits::default();
    skill_runner_web::connections::serve(listener, app, limits, shutdown).await?;
    Ok(())
}

fn router(client: Shared) -> Router {
    Router::new()
        .route("/", get(pages::skills))
        .route(
            "/skills/{skill_id}/run",
            get(pages::run_form).post(pages::create_run),
        )
        .route("/runs/{request_id}", get(runs::run_page))
        .route("/runs/{request_id}/info", get(runs::run_info))
        .route("/runs/{request_id}/question", get(runs::question))
        .route("/runs/{request_id}/cancel", post(runs::cancel))
        .route("/runs/{request_id}/result", get(results::result))
        .route(
            "/runs/{request_id}/artifacts/{*path}",
            get(results::artifact),
        )
        .route("/runs/{request_id}/bundle", get(results::bundle))
        .route("/recordings", get(results::list))
        .route("/recordings/{request_id}", get(results::replay))
        .route("/api/recordings/{request_id}", get(results::recording_json))
        .route("/api/runs/{request_id}/events", get(runs::events))
        .route("/api/runs/{request_id}/reply", post(runs::reply))
        .route("/static/{*path}", get(skill_runner_web::assets::file))
        .layer(axum::extract::DefaultBodyLimit::max(64 * 1024 * 1024))
        // The console's own defences: no change on behalf of another site, and pages held to
        // this origin.
        .layer(skill_runner_web::assets::policy_layer())
        .layer(axum::middleware::from_fn(
            skill_runner_web::same_origin::guard,
        ))
        .with_state(client)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Command {
        #[command(flatten)]
        args: ClientArgs,
    }

    fn config(args: &[&str], password: Option<&str>) -> Result<ClientConfig, String> {
        let mut argv = vec!["example-client"];
        argv.extend_from_slice(args);
        Command::try_parse_from(argv)
            .map_err(|e| e.to_string())?
            .args
            .config(password.map(str::to_owned))
    }

    #[test]
    fn a_bad_port_falls_back_with_a_warning_and_other_mistakes_are_refused() {
        let fell_back = config(&["--port", "eighty", "--backend", "http://svc:9"], None).unwrap();
        assert_eq!(fell_back.bind.port(), DEFAULT_PORT);
        assert_eq!(
            fell_back.warnings,
            ["SKILL_RUNNER_E2E_CLIENT_PORT: 'eighty' is not a port number; using 8011"]
        );
        let good = config(
            &[
                "--port",
                "9000",
                "--backend",
                "https://svc/base/",
                "--backend-username",
                "op",
            ],
            Some("pw"),
        )
        .unwrap();
        assert_eq!(good.bind.port(), 9000);
        assert!(good.warnings.is_empty());
        assert_eq!(good.auth, Some(("op".into(), "pw".into())));
        assert!(
            config(&["--backend", "ftp://svc"], None)
                .unwrap_err()
                .contains("is not an http(s) URL")
        );
        assert!(
            config(&["--backend-username", "op"], None)
                .unwrap_err()
                .contains("go together")
        );
    }
}
