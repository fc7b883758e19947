//! `/v1/engines/auth/cli-delegate/*`: the reference's sign-ins the CLI does itself
//! ([`skill_runner_core::engine_login::login_args`]). The CLI's own login runs in the engine
//! terminal (one session at a time, as the reference's auth sessions and terminal exclude each
//! other), with `HOME` at the agent home; the session shows the page and the code it prints,
//! and ends with it.

use std::time::Duration;

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use skill_runner_core::engine_login::{AuthSession, login_args};
use tokio::sync::broadcast::error::RecvError;

use super::auth::Admin;
use super::console::terminal::{ended, launch};
use super::engines::agent_engine;
use super::jobs::bad_json;
use super::oauth_proxy::{
    Canceled, InputTaken, SignInInput, StartSignIn, cancel_session, take_input,
};
use crate::api::error::{ApiError, ApiResult};
use crate::engines::config::OPENAI_AUTH_ISSUER;
use crate::state::AppState;

/// The most of the CLI's output kept to read the page and code from.
const PRINTED: usize = 64 * 1024;
/// How long a start waits for the CLI to print its page and code.
const FIRST_WORDS: Duration = Duration::from_secs(15);

/// Starts the CLI's own login (`codex login --device-auth`) in the engine terminal: the session
/// shows the page (`auth_url`) and the code (`user_code`) it prints, and ends `succeeded` when
/// the CLI exits logged in, queueing the engine's waiting runs; `failed` with its last lines
/// otherwise. 409 while the terminal is in use.
#[utoipa::path(post, path = "/v1/engines/auth/cli-delegate/sessions", tag = "engines",
    request_body(content = StartSignIn, example = json!({"engine": "codex",
        "transport": "cli_delegate", "auth_method": "auth_code_or_url"})),
    responses(
        (status = 200, body = AuthSession),
        (status = 401, description = "Basic Auth is on and the request lacks it"),
        (status = 404, description = "Unknown engine"),
        (status = 409, description = "The engine terminal is in use"),
        (status = 422, description = "Another transport, or an engine or method without a login of its own here"),
    ))]
pub async fn start(
    _: Admin,
    State(state): State<AppState>,
    body: Result<Json<StartSignIn>, JsonRejection>,
) -> ApiResult<Json<AuthSession>> {
    let Json(body) = body.map_err(bad_json)?;
    if body.transport.trim() != "cli_delegate" {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "transport must be cli_delegate",
        ));
    }
    let engine = agent_engine(&body.engine)?;
    let method = body
        .auth_method
        .unwrap_or_else(|| "auth_code_or_url".into());
    delegate(&state, engine, &method).await.map(Json)
}

/// Starts `engine`'s own login by `method` in the terminal (see [`start`]); the session once
/// the CLI printed its page and code.
pub(crate) async fn delegate(
    state: &AppState,
    engine: crate::engines::Engine,
    method: &str,
) -> ApiResult<AuthSession> {
    let issuer = &state.config.engines.openai_auth_issuer;
    let custom = (issuer.trim_end_matches('/') != OPENAI_AUTH_ISSUER).then_some(issuer.as_str());
    let args = login_args(engine, method, custom)?;
    let terminal = launch(state, engine, &args).await?;
    let session = match state.logins.start_delegated(engine, method) {
        Ok(session) => session,
        Err(e) => {
            state.terminal.stop();
            return Err(e.into());
        }
    };
    let Some(mut viewer) = state
        .terminal
        .attach()
        .filter(|v| v.session.info().session_id == terminal.session_id)
    else {
        return Err(ApiError::Internal(anyhow::anyhow!(
            "the login's terminal session is gone"
        )));
    };
    let (logins, id) = (state.logins.clone(), session.session_id.clone());
    tokio::spawn(async move {
        let mut printed = String::from_utf8_lossy(&viewer.replay).into_owned();
        logins.delegate_printed(&id, &printed);
        loop {
            tokio::select! {
                chunk = viewer.output.recv() => match chunk {
                    Ok(bytes) => {
                        if printed.len() < PRINTED {
                            printed.push_str(&String::from_utf8_lossy(&bytes));
                        }
                        logins.delegate_printed(&id, &printed);
                    }
                    Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => break,
                },
                code = ended(&mut viewer.ended) => {
                    while let Ok(bytes) = viewer.output.try_recv() {
                        printed.push_str(&String::from_utf8_lossy(&bytes));
                    }
                    if let Err(e) = logins.delegate_exited(&id, code, &printed).await {
                        tracing::error!(session_id = id, error = format!("{e:#}"), "cannot end a delegated login");
                    }
                    break;
                }
            }
        }
    });
    // The answer shows the page and code, once printed.
    let deadline = tokio::time::Instant::now() + FIRST_WORDS;
    loop {
        let now = state.logins.session(&session.session_id, None)?;
        let shown = now.user_code.is_some() && now.auth_url.is_some();
        if shown || now.status != "waiting_user" || tokio::time::Instant::now() > deadline {
            return Ok(now);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A delegated login's state.
#[utoipa::path(get, path = "/v1/engines/auth/cli-delegate/sessions/{session_id}", tag = "engines",
    params(("session_id" = String, Path)),
    responses(
        (status = 200, body = AuthSession),
        (status = 401, description = "Basic Auth is on and the request lacks it"),
        (status = 404, description = "Unknown session"),
    ))]
pub async fn get(
    _: Admin,
    State(state): State<AppState>,
    Path(session_id): Path<String>,
) -> ApiResult<Json<AuthSession>> {
    Ok(Json(state.logins.session(&session_id, None)?))
}

/// A device login takes no input: the code is entered on the vendor's page (422 says where).
#[utoipa::path(post, path = "/v1/engines/auth/cli-delegate/sessions/{session_id}/input",
    tag = "engines",
    params(("session_id" = String, Path)),
    request_body(content = SignInInput),
    responses(
        (status = 200, body = InputTaken),
        (status = 404, description = "Unknown session"),
        (status = 409, description = "The session ended"),
        (status = 422, description = "The session takes no input"),
    ))]
pub async fn input(
    _: Admin,
    State(state): State<AppState>,
    Path(session_id): Path<String>,
    body: Result<Json<SignInInput>, JsonRejection>,
) -> ApiResult<Json<InputTaken>> {
    let Json(body) = body.map_err(bad_json)?;
    take_input(state, session_id, body).await.map(Json)
}

/// Cancels a delegated login: the CLI is stopped.
#[utoipa::path(post, path = "/v1/engines/auth/cli-delegate/sessions/{session_id}/cancel",
    tag = "engines",
    params(("session_id" = String, Path)),
    responses(
        (status = 200, body = Canceled),
        (status = 404, description = "Unknown session"),
    ))]
pub async fn cancel(
    _: Admin,
    State(state): State<AppState>,
    Path(session_id): Path<String>,
) -> ApiResult<Json<Canceled>> {
    cancel_session(&state, &session_id).map(Json)
}
