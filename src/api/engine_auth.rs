//! Engine login without a terminal ([`skill_runner_core::engine_login`]): import login files,
//! API-key auth sessions and log-out under `/v1/management/engines/{engine}/auth` (Basic Auth
//! when on), the reference's `/v1/engines/auth/sessions*` forms of the sessions, and the run
//! side: `GET /v1/jobs/{request_id}/auth/session` and
//! `POST /v1/jobs/{request_id}/interaction/auth/import` for a run in `waiting_auth`.

use crate::engines::login::{ImportFile, Imported, MAX_FILE_BYTES};
use axum::Json;
use axum::extract::multipart::{Multipart, MultipartRejection};
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use skill_runner_core::engine_login::{AuthSession, RunAuth};

use super::auth::Admin;
use super::engines::agent_engine;
use super::jobs::{Kind, bad_json, to_completion};
use crate::api::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::store::RunStatus;

/// Login files one import takes at most.
const MAX_FILES: usize = 8;

/// `GET .../auth/import/spec`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ImportSpec {
    pub engine: String,
    /// Accepted for the reference's clients; each engine here has one set of login files.
    pub provider_id: Option<String>,
    pub supported: bool,
    /// The files, as the reference's `upload_files` question shows them.
    pub ask_user: serde_json::Value,
}

/// The login files `engine`'s CLI reads, for an import dialog.
#[utoipa::path(get, path = "/v1/management/engines/{engine}/auth/import/spec", tag = "management",
    params(("engine" = String, Path)),
    responses(
        (status = 200, body = ImportSpec, example = json!({"engine": "codex", "provider_id": null,
            "supported": true, "ask_user": {"kind": "upload_files",
            "prompt": "Upload credential files to complete authentication.",
            "files": [{"name": "auth.json", "target_relpath": ".codex/auth.json",
                "required": true, "hint": "$HOME/.codex/auth.json", "accept": ".json"}]}})),
        (status = 401, description = "Basic Auth is on and the request lacks it"),
        (status = 404, description = "Unknown engine, or `script`"),
    ))]
pub async fn import_spec(
    _: Admin,
    State(state): State<AppState>,
    Path(engine): Path<String>,
) -> ApiResult<Json<ImportSpec>> {
    let engine = agent_engine(&engine)?;
    let files: Vec<ImportFile> = state.logins.import_spec(engine)?;
    Ok(Json(ImportSpec {
        engine: engine.to_string(),
        provider_id: None,
        supported: true,
        ask_user: serde_json::json!({
            "kind": "upload_files",
            "prompt": "Upload credential files to complete authentication.",
            "hint": "Select the files and submit to continue.",
            "files": files,
            "ui_hints": {"risk_notice_required": false},
        }),
    }))
}

/// `POST .../auth/import`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ImportResult {
    pub engine: String,
    pub provider_id: Option<String>,
    pub imported_files: Vec<Imported>,
    pub risk_notice_required: bool,
    /// Runs that waited for this login and are queued again.
    pub resumed_runs: usize,
}

/// Imports `engine`'s login files (`multipart/form-data`: repeated `files` parts named as the
/// CLI names them, e.g. `auth.json`; an optional `provider_id` field is accepted and ignored).
/// Each is checked (a login file of this CLI, sent once, none missing, not empty, at most
/// 1 MiB, a JSON object when `.json`) before any is written into the agent home, owner-only;
/// runs get copies. Runs waiting for the login are queued again.
#[utoipa::path(post, path = "/v1/management/engines/{engine}/auth/import", tag = "management",
    params(("engine" = String, Path)),
    request_body(content = crate::api::openapi::AuthImportForm, content_type = "multipart/form-data"),
    responses(
        (status = 200, body = ImportResult, example = json!({"engine": "codex",
            "provider_id": null, "imported_files": [{"source": "auth.json",
            "target_relpath": ".codex/auth.json",
            "target_path": "/root/.local/share/skill-runner/agent-cache/agent-home/.codex/auth.json"}],
            "risk_notice_required": false, "resumed_runs": 1})),
        (status = 400, description = "Not a multipart body"),
        (status = 401, description = "Basic Auth is on and the request lacks it"),
        (status = 404, description = "Unknown engine, or `script`"),
        (status = 413, description = "More than 8 files, or a file over 1 MiB"),
        (status = 422, description = "A file that is not one of the CLI's login files, sent twice, missing, empty or not a JSON object"),
    ))]
pub async fn import(
    _: Admin,
    State(state): State<AppState>,
    Path(engine): Path<String>,
    multipart: Result<Multipart, MultipartRejection>,
) -> ApiResult<Json<ImportResult>> {
    let engine = agent_engine(&engine)?;
    let (provider_id, files) = receive(multipart).await?;
    to_completion(async move {
        let (imported_files, resumed_runs) = state.logins.import_files(engine, files).await?;
        Ok::<_, ApiError>(Json(ImportResult {
            engine: engine.to_string(),
            provider_id,
            imported_files,
            risk_notice_required: false,
            resumed_runs,
        }))
    })
    .await
}

/// `DELETE .../auth`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct LoggedOut {
    pub engine: String,
    /// What was removed from the agent home.
    pub removed: Vec<String>,
}

/// Logs `engine` out: removes its imported API key and its CLI's login files from the agent
/// home (a key in `SKILL_RUNNER_<ENGINE>_API_KEY` stays).
#[utoipa::path(delete, path = "/v1/management/engines/{engine}/auth", tag = "management",
    params(("engine" = String, Path)),
    responses(
        (status = 200, body = LoggedOut, example = json!({"engine": "codex",
            "removed": [".codex/auth.json"]})),
        (status = 401, description = "Basic Auth is on and the request lacks it"),
        (status = 404, description = "Unknown engine, or `script`"),
    ))]
pub async fn log_out(
    _: Admin,
    State(state): State<AppState>,
    Path(engine): Path<String>,
) -> ApiResult<Json<LoggedOut>> {
    let engine = agent_engine(&engine)?;
    let removed = state.logins.log_out(engine).await?;
    Ok(Json(LoggedOut {
        engine: engine.to_string(),
        removed,
    }))
}

/// `POST .../auth/sessions`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct StartSession {
    /// Only on `/v1/engines/auth/sessions`, where the path names no engine.
    pub engine: Option<String>,
    /// `api_key`, or for an OpenAI account (codex, opencode, kilo) `callback` or
    /// `auth_code_or_url` (as `/v1/engines/auth/oauth-proxy/sessions`).
    pub auth_method: Option<String>,
    /// The reference's older name of `auth_method`.
    pub method: Option<String>,
    /// `oauth_proxy` or `cli_delegate`, echoed.
    pub transport: Option<String>,
    /// The vendor account of an engine that has several (`openai`).
    pub provider_id: Option<String>,
}

/// Starts an auth session for `engine`. `api_key` waits for the key through `.../input`
/// (`{"kind": "api_key", "value": "..."}`); the session then ends `succeeded` and the runs
/// waiting for the login are queued again. `callback` and `auth_code_or_url` sign an OpenAI
/// account in (see `POST /v1/engines/auth/oauth-proxy/sessions`). Sessions wait 15 minutes,
/// then end `expired`.
#[utoipa::path(post, path = "/v1/management/engines/{engine}/auth/sessions", tag = "management",
    params(("engine" = String, Path)),
    request_body(content = StartSession, example = json!({"auth_method": "api_key"})),
    responses(
        (status = 200, body = AuthSession, example = json!({"session_id": "0b5e…",
            "engine": "qwen", "auth_method": "api_key", "transport": "api_key",
            "status": "waiting_user_input", "input_kind": "api_key",
            "created_at": "2026-11-27T03:00:00.000000Z", "updated_at": "2026-11-27T03:00:00.000000Z",
            "expires_at": "2026-11-27T03:15:00.000000Z", "resumed_runs": 0})),
        (status = 401, description = "Basic Auth is on and the request lacks it"),
        (status = 404, description = "Unknown engine, or `script`"),
        (status = 422, description = "auth_method missing or unknown, or a sign-in the engine has not here"),
    ))]
pub async fn start_session(
    _: Admin,
    State(state): State<AppState>,
    Path(engine): Path<String>,
    body: Result<Json<StartSession>, JsonRejection>,
) -> ApiResult<Json<AuthSession>> {
    let Json(body) = body.map_err(bad_json)?;
    start(&state, Some(engine), body).await
}

/// `POST /v1/engines/auth/sessions` (the reference's form; `engine` in the body).
pub async fn start_session_by_body(
    _: Admin,
    State(state): State<AppState>,
    body: Result<Json<StartSession>, JsonRejection>,
) -> ApiResult<Json<AuthSession>> {
    let Json(body) = body.map_err(bad_json)?;
    start(&state, None, body).await
}

async fn start(
    state: &AppState,
    engine: Option<String>,
    body: StartSession,
) -> ApiResult<Json<AuthSession>> {
    let name = engine.or(body.engine).ok_or_else(|| {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "engine: required (the engine to log in)",
        )
    })?;
    let engine = agent_engine(&name)?;
    let method = body.auth_method.or(body.method).ok_or_else(|| {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "auth_method: required; 'api_key' is the method offered here",
        )
    })?;
    Ok(Json(
        state
            .logins
            .start(
                engine,
                &method,
                body.transport.as_deref(),
                body.provider_id.as_deref(),
            )
            .await?,
    ))
}

/// A session's path: by engine (management) or alone (the reference's form).
#[derive(Debug, Deserialize)]
pub struct SessionPath {
    engine: Option<String>,
    session_id: String,
}

impl SessionPath {
    fn engine(&self) -> ApiResult<Option<crate::engines::Engine>> {
        self.engine.as_deref().map(agent_engine).transpose()
    }
}

/// An auth session's state.
#[utoipa::path(get, path = "/v1/management/engines/{engine}/auth/sessions/{session_id}",
    tag = "management",
    params(("engine" = String, Path), ("session_id" = String, Path)),
    responses(
        (status = 200, body = AuthSession),
        (status = 401, description = "Basic Auth is on and the request lacks it"),
        (status = 404, description = "Unknown engine or session"),
    ))]
pub async fn get_session(
    _: Admin,
    State(state): State<AppState>,
    Path(path): Path<SessionPath>,
) -> ApiResult<Json<AuthSession>> {
    Ok(Json(
        state.logins.session(&path.session_id, path.engine()?)?,
    ))
}

/// `POST .../sessions/{session_id}/input`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct SessionInput {
    /// `api_key`.
    pub kind: String,
    pub value: String,
}

/// Gives a waiting session its input; with an API key the engine is logged in.
#[utoipa::path(post, path = "/v1/management/engines/{engine}/auth/sessions/{session_id}/input",
    tag = "management",
    params(("engine" = String, Path), ("session_id" = String, Path)),
    request_body(content = SessionInput, example = json!({"kind": "api_key", "value": "sk-…"})),
    responses(
        (status = 200, body = AuthSession),
        (status = 401, description = "Basic Auth is on and the request lacks it"),
        (status = 404, description = "Unknown engine or session"),
        (status = 409, description = "The session ended (succeeded, canceled, expired)"),
        (status = 422, description = "A kind the session does not take, or a key that is empty or not one word"),
    ))]
pub async fn session_input(
    _: Admin,
    State(state): State<AppState>,
    Path(path): Path<SessionPath>,
    body: Result<Json<SessionInput>, JsonRejection>,
) -> ApiResult<Json<AuthSession>> {
    let Json(body) = body.map_err(bad_json)?;
    let engine = path.engine()?;
    to_completion(async move {
        let session = state
            .logins
            .input(&path.session_id, engine, &body.kind, body.value)
            .await?;
        Ok::<_, ApiError>(Json(session))
    })
    .await
}

/// Cancels a waiting session (an ended one is returned as it is).
#[utoipa::path(post, path = "/v1/management/engines/{engine}/auth/sessions/{session_id}/cancel",
    tag = "management",
    params(("engine" = String, Path), ("session_id" = String, Path)),
    responses(
        (status = 200, body = AuthSession),
        (status = 401, description = "Basic Auth is on and the request lacks it"),
        (status = 404, description = "Unknown engine or session"),
    ))]
pub async fn cancel_session(
    _: Admin,
    State(state): State<AppState>,
    Path(path): Path<SessionPath>,
) -> ApiResult<Json<AuthSession>> {
    Ok(Json(state.logins.cancel(&path.session_id, path.engine()?)?))
}

/// `GET /v1/jobs/{request_id}/auth/session`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RunAuthSession {
    pub request_id: String,
    /// `null` unless the run waits for its engine's login.
    pub auth_session: Option<RunAuth>,
}

/// What a run in `waiting_auth` needs: its engine, the ways to log it in (the login files
/// `POST .../interaction/auth/import` takes, or an API key through the management auth
/// sessions) and when the wait ends. `null` when the run does not wait for a login.
#[utoipa::path(get, path = "/v1/jobs/{request_id}/auth/session", tag = "jobs",
    params(("request_id" = String, Path)),
    responses(
        (status = 200, body = RunAuthSession, example = json!({"request_id": "6f1c…",
            "auth_session": {"engine": "opencode", "status": "waiting_auth",
                "auth_methods": ["import", "api_key"],
                "import_files": [{"name": "auth.json",
                    "target_relpath": ".local/share/opencode/auth.json", "required": true,
                    "hint": "$HOME/.local/share/opencode/auth.json", "accept": ".json"}],
                "expires_at": "2026-11-27T03:15:00.000000Z",
                "message": "Engine 'opencode' is not logged in: …"}})),
        (status = 404, description = "Unknown request, or no run yet"),
    ))]
pub async fn run_session(
    State(state): State<AppState>,
    Kind(scope): Kind,
    Path(request_id): Path<String>,
) -> ApiResult<Json<RunAuthSession>> {
    let auth_session = state.logins.run_auth(&scope, &request_id).await?;
    Ok(Json(RunAuthSession {
        request_id,
        auth_session,
    }))
}

/// `POST /v1/jobs/{request_id}/interaction/auth/import`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AuthImported {
    pub request_id: String,
    /// `queued`: the run waits for a slot.
    pub status: RunStatus,
    pub accepted: bool,
    /// `auth`.
    pub mode: &'static str,
}

/// Logs the engine of a run in `waiting_auth` in with its login files (as
/// `POST /v1/management/engines/{engine}/auth/import`; the login then serves every run of the
/// engine), and queues the run again.
#[utoipa::path(post, path = "/v1/jobs/{request_id}/interaction/auth/import", tag = "jobs",
    params(("request_id" = String, Path)),
    request_body(content = crate::api::openapi::AuthImportForm, content_type = "multipart/form-data"),
    responses(
        (status = 200, body = AuthImported, example = json!({"request_id": "6f1c…",
            "status": "queued", "accepted": true, "mode": "auth"})),
        (status = 400, description = "Not a multipart body"),
        (status = 404, description = "Unknown request, or no run yet"),
        (status = 409, description = "The run does not wait for a login"),
        (status = 413, description = "More than 8 files, or a file over 1 MiB"),
        (status = 422, description = "The files are not the engine's login files (see the import spec)"),
    ))]
pub async fn run_import(
    State(state): State<AppState>,
    Kind(scope): Kind,
    Path(request_id): Path<String>,
    multipart: Result<Multipart, MultipartRejection>,
) -> ApiResult<Json<AuthImported>> {
    let (_, files) = receive(multipart).await?;
    to_completion(async move {
        state
            .logins
            .import_for_run(&scope, &request_id, files)
            .await?;
        Ok::<_, ApiError>(Json(AuthImported {
            request_id,
            status: RunStatus::Queued,
            accepted: true,
            mode: "auth",
        }))
    })
    .await
}

/// The `provider_id` field and the `files` parts of an import, in memory (login files are
/// small: at most [`MAX_FILES`] of [`MAX_FILE_BYTES`]).
pub(crate) async fn receive(
    multipart: Result<Multipart, MultipartRejection>,
) -> ApiResult<(Option<String>, Vec<(String, Vec<u8>)>)> {
    let mut multipart =
        multipart.map_err(|e| ApiError::bad_request(format!("not a multipart body: {e}")))?;
    let (mut provider_id, mut files) = (None, Vec::new());
    let broken = |e: axum::extract::multipart::MultipartError| {
        ApiError::bad_request(format!("unreadable multipart body: {e}"))
    };
    while let Some(mut field) = multipart.next_field().await.map_err(broken)? {
        match field.name() {
            Some("provider_id") => {
                provider_id = Some(field.text().await.map_err(broken)?).filter(|p| !p.is_empty());
            }
            Some("files" | "file") => {
                if files.len() == MAX_FILES {
                    return Err(ApiError::new(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        format!("files: at most {MAX_FILES} login files per import"),
                    ));
                }
                let name = field.file_name().unwrap_or_default().to_owned();
                if name.is_empty() {
                    return Err(ApiError::new(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        "files: each part needs a filename (the login file's name, e.g. auth.json)",
                    ));
                }
                let mut bytes = Vec::new();
                while let Some(chunk) = field.chunk().await.map_err(broken)? {
                    if bytes.len() + chunk.len() > MAX_FILE_BYTES {
                        return Err(ApiError::new(
                            StatusCode::PAYLOAD_TOO_LARGE,
                            format!(
                                "files: '{name}' is over {MAX_FILE_BYTES} bytes; a login file is a \
                             few KiB"
                            ),
                        ));
                    }
                    bytes.extend_from_slice(&chunk);
                }
                files.push((name, bytes));
            }
            // Other fields are the reference's extras.
            _ => {}
        }
    }
    Ok((provider_id, files))
}
