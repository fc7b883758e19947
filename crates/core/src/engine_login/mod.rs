//! Logging engines in through the API: login files imported into the agent home, API keys
//! entered in an auth session, an OpenAI account signed in through the browser or a device code
//! ([`oauth`]), logging out; and the run-side view of a run waiting for its engine's login
//! (`waiting_auth`). Every login that arrives queues the engine's waiting runs.
//!
//! Auth sessions follow the reference's shape (start, status, input, cancel). `api_key` takes
//! the key as input; `callback` and `auth_code_or_url` sign an OpenAI account in for codex,
//! opencode and kilo (provider `openai`), and `auth_code_or_url` a Claude account for claude,
//! the service being the OAuth client. The other vendors' logins are the CLIs' own: import the
//! login file such a login left on another machine.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde_json::json;
use skill_runner_types::engine::Engine;

use crate::clock::Timestamp;
use crate::engines::login::{self, ImportError, ImportFile, Imported};
use crate::error::{Error, Result};
use crate::jobs::{Jobs, Scope};
use crate::store::RunStatus;

mod delegate;
mod oauth;

pub use delegate::login_args;
pub use oauth::sign_in_methods;

/// An auth session waiting for input is dropped after this long.
const SESSION_TTL: Duration = Duration::from_secs(15 * 60);

/// Sessions kept at once; the oldest finished ones go first.
const MAX_SESSIONS: usize = 256;

/// An engine login under way, or how it ended.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct AuthSession {
    pub session_id: String,
    pub engine: Engine,
    /// `api_key`, `callback` or `auth_code_or_url`.
    pub auth_method: String,
    /// As the client sent it (`oauth_proxy`, `cli_delegate`), else `api_key`.
    pub transport: String,
    /// The vendor account signed in (`openai`); `null` for a key.
    pub provider_id: Option<String>,
    /// `waiting_user_input` (a key), `waiting_user` (a sign-in under way, as the reference's
    /// OAuth sessions), `succeeded`, `failed`, `canceled` or `expired`.
    pub status: String,
    /// What `input` takes while waiting (`api_key`; `text`: the address the browser ended on,
    /// or the code); `null` when nothing is to be typed (a device code) or once ended.
    pub input_kind: Option<String>,
    /// Where the user signs in: the authorization page, or the device page where
    /// `user_code` is entered.
    pub auth_url: Option<String>,
    pub user_code: Option<String>,
    /// Why the sign-in failed.
    pub error: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub expires_at: Timestamp,
    /// Runs of the engine queued again when the login arrived.
    pub resumed_runs: usize,
}

impl AuthSession {
    fn waiting(&self) -> bool {
        matches!(self.status.as_str(), "waiting_user_input" | "waiting_user")
    }
}

/// What a run waiting for its engine's login needs (`GET /v1/jobs/{id}/auth/session`).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct RunAuth {
    pub engine: Engine,
    /// `waiting_auth`.
    pub status: RunStatus,
    /// The ways to log the engine in: `import` (its login files), `api_key`, and for an
    /// OpenAI account `callback` and `auth_code_or_url` (`POST
    /// /v1/engines/auth/oauth-proxy/sessions`).
    pub auth_methods: Vec<&'static str>,
    /// The console page that logs the engine in.
    pub login_page: String,
    /// The files `import` takes.
    pub import_files: Vec<ImportFile>,
    /// When the run fails `AUTH_WAIT_TIMEOUT` unless a login arrives.
    pub expires_at: Option<Timestamp>,
    pub message: String,
}

/// The service's engine logins and auth sessions.
#[derive(Debug)]
pub struct EngineLogins {
    jobs: Arc<Jobs>,
    sessions: Mutex<HashMap<String, AuthSession>>,
    /// The secrets of the sign-ins under way (PKCE verifier, state, device code), by session.
    flows: Mutex<HashMap<String, oauth::Flow>>,
}

impl EngineLogins {
    pub fn new(jobs: Arc<Jobs>) -> Self {
        Self {
            jobs,
            sessions: Mutex::default(),
            flows: Mutex::default(),
        }
    }

    fn cli(&self, engine: Engine) -> Result<crate::engines::Cli> {
        self.jobs
            .engines()
            .cli(engine)
            .ok_or_else(|| Error::not_found(format!("Engine '{engine}' has no CLI to log in")))
    }

    /// The login files `engine`'s CLI reads.
    pub fn import_spec(&self, engine: Engine) -> Result<Vec<ImportFile>> {
        Ok(login::import_spec(self.cli(engine)?))
    }

    /// Imports `files` (name, bytes) as `engine`'s login ([`login::import_files`]) and queues
    /// the runs that waited for it.
    pub async fn import_files(
        &self,
        engine: Engine,
        files: Vec<(String, Vec<u8>)>,
    ) -> Result<(Vec<Imported>, usize)> {
        let cli = self.cli(engine)?;
        let config = self.jobs.engines().config().clone();
        let imported =
            tokio::task::spawn_blocking(move || login::import_files(&config, cli, &files))
                .await
                .map_err(|e| Error::Internal(e.into()))?
                .map_err(import_error)?;
        tracing::info!(%engine, files = imported.len(), "engine login files imported");
        let resumed = self.jobs.login_arrived(engine).await?;
        self.complete_sessions(engine, resumed);
        Ok((imported, resumed))
    }

    /// Imports `key` as `engine`'s API key and queues the runs that waited for it (the
    /// sessions waiting for the engine end `succeeded`); how many were queued.
    pub async fn import_api_key(&self, engine: Engine, key: String) -> Result<usize> {
        self.cli(engine)?;
        let config = self.jobs.engines().config().clone();
        tokio::task::spawn_blocking(move || login::import_api_key(&config, engine, &key))
            .await
            .map_err(|e| Error::Internal(e.into()))?
            .map_err(import_error)?;
        tracing::info!(%engine, "engine API key imported");
        let resumed = self.jobs.login_arrived(engine).await?;
        self.complete_sessions(engine, resumed);
        Ok(resumed)
    }

    /// Removes `engine`'s imported key and login files; what was removed.
    pub async fn log_out(&self, engine: Engine) -> Result<Vec<String>> {
        let cli = self.cli(engine)?;
        let config = self.jobs.engines().config().clone();
        let removed = tokio::task::spawn_blocking(move || login::log_out(&config, engine, cli))
            .await
            .map_err(|e| Error::Internal(e.into()))??;
        tracing::info!(%engine, removed = removed.len(), "engine logged out");
        Ok(removed)
    }

    /// Starts an auth session for `engine` by `auth_method` (`provider_id` names the vendor
    /// account of an engine that has several).
    pub async fn start(
        self: &Arc<Self>,
        engine: Engine,
        auth_method: &str,
        transport: Option<&str>,
        provider_id: Option<&str>,
    ) -> Result<AuthSession> {
        self.cli(engine)?;
        match auth_method {
            "api_key" => {}
            "callback" | "auth_code_or_url" => {
                return self
                    .start_sign_in(engine, auth_method, transport, provider_id)
                    .await;
            }
            other => {
                return Err(Error::Unprocessable(json!(format!(
                    "auth_method: '{other}' is not a login method; use 'api_key', 'callback' or \
                     'auth_code_or_url', or import login files with POST \
                     /v1/management/engines/{engine}/auth/import"
                ))));
            }
        }
        let session = self.new_session(engine, auth_method, transport);
        self.keep(session)
    }

    /// A session of `engine` waiting for its key.
    fn new_session(
        &self,
        engine: Engine,
        auth_method: &str,
        transport: Option<&str>,
    ) -> AuthSession {
        let now = Timestamp::now();
        AuthSession {
            session_id: uuid::Uuid::new_v4().to_string(),
            engine,
            auth_method: auth_method.to_owned(),
            transport: transport.unwrap_or(auth_method).to_owned(),
            provider_id: None,
            status: "waiting_user_input".into(),
            input_kind: Some("api_key".into()),
            auth_url: None,
            user_code: None,
            error: None,
            created_at: now,
            updated_at: now,
            expires_at: Timestamp::after(SESSION_TTL),
            resumed_runs: 0,
        }
    }

    /// Keeps `session`, making room among the finished ones.
    fn keep(&self, session: AuthSession) -> Result<AuthSession> {
        let mut sessions = self.sessions.lock().expect("sessions lock");
        expire(&mut sessions);
        if sessions.len() >= MAX_SESSIONS {
            let oldest = sessions
                .values()
                .filter(|s| !s.waiting())
                .min_by_key(|s| s.updated_at)
                .map(|s| s.session_id.clone());
            match oldest {
                Some(id) => {
                    sessions.remove(&id);
                }
                None => {
                    return Err(Error::conflict(
                        "Too many auth sessions are waiting for input: cancel one or let it expire",
                    ));
                }
            }
        }
        sessions.insert(session.session_id.clone(), session.clone());
        Ok(session)
    }

    /// The session `id` (of `engine`, when given).
    pub fn session(&self, id: &str, engine: Option<Engine>) -> Result<AuthSession> {
        let mut sessions = self.sessions.lock().expect("sessions lock");
        expire(&mut sessions);
        sessions
            .get(id)
            .filter(|s| engine.is_none_or(|e| s.engine == e))
            .cloned()
            .ok_or_else(|| Error::not_found(format!("Auth session not found: '{id}'")))
    }

    /// Gives the waiting session `id` its input: `kind` `api_key` with the key as `value`.
    pub async fn input(
        &self,
        id: &str,
        engine: Option<Engine>,
        kind: &str,
        value: String,
    ) -> Result<AuthSession> {
        let session = self.session(id, engine)?;
        if !session.waiting() {
            return Err(Error::conflict(format!(
                "Auth session '{id}' is {}: it takes no more input",
                session.status
            )));
        }
        if session.auth_method != "api_key" {
            return self.sign_in_input(&session, kind, &value).await;
        }
        if Some(kind) != session.input_kind.as_deref() {
            return Err(Error::Unprocessable(json!(format!(
                "kind: this session takes 'api_key', not '{kind}'"
            ))));
        }
        self.import_api_key(session.engine, value).await?;
        self.session(id, engine)
    }

    /// Cancels the waiting session `id`; an ended one is left as it is.
    pub fn cancel(&self, id: &str, engine: Option<Engine>) -> Result<AuthSession> {
        self.session(id, engine)?;
        let mut sessions = self.sessions.lock().expect("sessions lock");
        let session = sessions.get_mut(id).expect("looked up above");
        if session.waiting() {
            session.status = "canceled".into();
            session.input_kind = None;
            session.updated_at = Timestamp::now();
        }
        let session = session.clone();
        drop(sessions);
        self.flows.lock().expect("flows lock").remove(id);
        Ok(session)
    }

    /// Every waiting session of `engine` ends `succeeded`: the engine is logged in.
    fn complete_sessions(&self, engine: Engine, resumed: usize) {
        let now = Timestamp::now();
        let mut sessions = self.sessions.lock().expect("sessions lock");
        for session in sessions.values_mut() {
            if session.engine == engine && session.waiting() {
                session.status = "succeeded".into();
                session.input_kind = None;
                session.updated_at = now;
                session.resumed_runs = resumed;
                self.flows
                    .lock()
                    .expect("flows lock")
                    .remove(&session.session_id);
            }
        }
    }

    /// What the request's run waits for, if it waits for its engine's login.
    pub async fn run_auth(&self, scope: &Scope, request_id: &str) -> Result<Option<RunAuth>> {
        let (_, run) = self.jobs.request_and_run(scope, request_id).await?;
        if run.status != RunStatus::WaitingAuth {
            return Ok(None);
        }
        let engines = self.jobs.engines();
        let import_files = self.import_spec(run.engine)?;
        Ok(Some(RunAuth {
            engine: run.engine,
            status: run.status,
            auth_methods: {
                let mut methods = Vec::new();
                if !import_files.is_empty() {
                    methods.push("import");
                }
                methods.push("api_key");
                methods.extend(oauth::sign_in_methods(run.engine));
                methods
            },
            login_page: format!("/ui/engines/{}/models", run.engine),
            import_files,
            expires_at: run.wait_deadline,
            message: crate::jobs::validation::not_logged_in(engines, run.engine),
        }))
    }

    /// Imports login files for the engine of a run that waits for them (409 when it does not
    /// wait); the run is queued again.
    pub async fn import_for_run(
        &self,
        scope: &Scope,
        request_id: &str,
        files: Vec<(String, Vec<u8>)>,
    ) -> Result<()> {
        let (_, run) = self.jobs.request_and_run(scope, request_id).await?;
        if run.status != RunStatus::WaitingAuth {
            return Err(Error::conflict(format!(
                "Run is not waiting for its engine's login (status: {})",
                run.status.as_str()
            )));
        }
        self.import_files(run.engine, files).await?;
        Ok(())
    }
}

/// Marks the sessions past their time `expired`, and forgets the ones ended long ago.
fn expire(sessions: &mut HashMap<String, AuthSession>) {
    let now = Timestamp::now();
    for session in sessions.values_mut() {
        if session.waiting() && session.expires_at <= now {
            session.status = "expired".into();
            session.input_kind = None;
            session.updated_at = now;
        }
    }
    sessions.retain(|_, s| s.waiting() || now.duration_since(s.updated_at) < SESSION_TTL);
}

fn import_error(e: ImportError) -> Error {
    match e {
        ImportError::Invalid(message) => Error::Unprocessable(json!(message)),
        ImportError::Io(e) => Error::Internal(e.into()),
    }
}
