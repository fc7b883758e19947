//! `/v1/engines/auth/oauth-proxy/*`: the reference's sign-in sessions with the service as the
//! OAuth client ([`skill_runner_core::engine_login`]), and the callback routes the browser
//! comes back to. The callbacks need no credential (a browser redirect carries none): the
//! one-time `state` of a sign-in under way is what admits them.

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use serde::{Deserialize, Serialize};
use skill_runner_core::engine_login::AuthSession;

use super::auth::Admin;
use super::engines::agent_engine;
use super::jobs::{bad_json, to_completion};
use crate::api::error::{ApiError, ApiResult};
use crate::state::AppState;

/// The callback routes, open to a browser without credentials.
pub const CALLBACK_PATHS: [&str; 2] = [
    "/v1/engines/auth/oauth-proxy/callback/openai",
    "/v1/engines/auth/callback/openai",
];

/// `POST /v1/engines/auth/oauth-proxy/sessions` (and `.../cli-delegate/sessions`) body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct StartSignIn {
    pub engine: String,
    /// The route's own: `oauth_proxy` or `cli_delegate`.
    pub transport: String,
    /// `callback` or `auth_code_or_url`; left out: `callback` for an OpenAI account here, the
    /// device login for a delegated one.
    pub auth_method: Option<String>,
    /// `openai` or `anthropic` (optional: each engine signs one kind of account in).
    pub provider_id: Option<String>,
}

/// Starts signing an account in for an engine. `callback`: `auth_url` is the sign-in page;
/// the browser comes back to `/v1/engines/auth/callback/openai` when
/// `SKILL_RUNNER_OAUTH_CALLBACK_BASE_URL` names the service, else the user posts the address it
/// ended on as `input` (`kind: text`). `auth_code_or_url`: enter `user_code` at `auth_url`;
/// the service polls until it is approved. Either way the session ends `succeeded` with the
/// engine logged in and its waiting runs queued.
#[utoipa::path(post, path = "/v1/engines/auth/oauth-proxy/sessions", tag = "engines",
    request_body(content = StartSignIn, example = json!({"engine": "codex",
        "transport": "oauth_proxy", "auth_method": "callback"})),
    responses(
        (status = 200, body = AuthSession, example = json!({"session_id": "3c1f…",
            "engine": "codex", "auth_method": "callback", "transport": "oauth_proxy",
            "provider_id": "openai", "status": "waiting_user", "input_kind": "text",
            "auth_url": "https://auth.openai.com/oauth/authorize?response_type=code&…",
            "user_code": null, "error": null,
            "created_at": "2026-11-28T10:00:00.000000Z", "updated_at": "2026-11-28T10:00:00.000000Z",
            "expires_at": "2026-11-28T10:15:00.000000Z", "resumed_runs": 0})),
        (status = 401, description = "Basic Auth is on and the request lacks it"),
        (status = 404, description = "Unknown engine"),
        (status = 422, description = "Another transport, a method or engine without such a sign-in, or the issuer refused a device code"),
    ))]
pub async fn start(
    _: Admin,
    State(state): State<AppState>,
    body: Result<Json<StartSignIn>, JsonRejection>,
) -> ApiResult<Json<AuthSession>> {
    let Json(body) = body.map_err(bad_json)?;
    if body.transport.trim() != "oauth_proxy" {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "transport must be oauth_proxy",
        ));
    }
    let engine = agent_engine(&body.engine)?;
    let method = body.auth_method.unwrap_or_else(|| "callback".into());
    let session = state
        .logins
        .start(
            engine,
            &method,
            Some("oauth_proxy"),
            body.provider_id.as_deref(),
        )
        .await?;
    Ok(Json(session))
}

/// A sign-in session's state.
#[utoipa::path(get, path = "/v1/engines/auth/oauth-proxy/sessions/{session_id}", tag = "engines",
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

/// `POST .../sessions/{session_id}/input` body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct SignInInput {
    /// `text` or `code` (or `api_key` for a key session).
    pub kind: String,
    pub value: String,
}

/// The answer to an input: the session, and whether the input was taken.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct InputTaken {
    pub session: AuthSession,
    pub accepted: bool,
}

/// Gives a browser sign-in the address the browser ended on (or the code): the code is
/// traded for tokens at once.
#[utoipa::path(post, path = "/v1/engines/auth/oauth-proxy/sessions/{session_id}/input",
    tag = "engines",
    params(("session_id" = String, Path)),
    request_body(content = SignInInput, example = json!({"kind": "text",
        "value": "http://localhost:1455/auth/callback?code=…&state=…"})),
    responses(
        (status = 200, body = InputTaken),
        (status = 401, description = "Basic Auth is on and the request lacks it"),
        (status = 404, description = "Unknown session"),
        (status = 409, description = "The session ended"),
        (status = 422, description = "Not an address or code of this sign-in, or the issuer refused the code"),
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

/// Gives session `session_id` its input (both transports' `.../input`).
pub(crate) async fn take_input(
    state: AppState,
    session_id: String,
    body: SignInInput,
) -> ApiResult<InputTaken> {
    to_completion(async move {
        let session = state
            .logins
            .input(&session_id, None, &body.kind, body.value)
            .await?;
        let accepted = session.status == "succeeded";
        Ok::<_, ApiError>(InputTaken { session, accepted })
    })
    .await
}

/// The answer to a cancel.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Canceled {
    pub session: AuthSession,
    pub canceled: bool,
}

/// Cancels a sign-in under way (an ended one is returned as it is).
#[utoipa::path(post, path = "/v1/engines/auth/oauth-proxy/sessions/{session_id}/cancel",
    tag = "engines",
    params(("session_id" = String, Path)),
    responses(
        (status = 200, body = Canceled),
        (status = 401, description = "Basic Auth is on and the request lacks it"),
        (status = 404, description = "Unknown session"),
    ))]
pub async fn cancel(
    _: Admin,
    State(state): State<AppState>,
    Path(session_id): Path<String>,
) -> ApiResult<Json<Canceled>> {
    cancel_session(&state, &session_id).map(Json)
}

/// Cancels session `session_id` (both transports' `.../cancel`): a delegated login's CLI is
/// stopped with it.
pub(crate) fn cancel_session(state: &AppState, session_id: &str) -> ApiResult<Canceled> {
    let session = state.logins.cancel(session_id, None)?;
    let canceled = session.status == "canceled";
    let its_cli = state
        .terminal
        .current()
        .is_some_and(|t| t.live && t.engine == session.engine.as_str());
    if canceled && session.transport == "cli_delegate" && its_cli {
        state.terminal.stop();
    }
    Ok(Canceled { session, canceled })
}

/// The callback's query.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct CallbackQuery {
    pub state: Option<String>,
    pub code: Option<String>,
    pub error: Option<String>,
}

/// Where the browser comes back from the OpenAI sign-in page: a page saying whether the
/// engine is now logged in (the window may be closed).
#[utoipa::path(get, path = "/v1/engines/auth/callback/openai", tag = "engines",
    params(CallbackQuery),
    responses(
        (status = 200, description = "Signed in (HTML)"),
        (status = 400, description = "No or an unknown state, a refusal, or a code the issuer did not take (HTML)"),
    ))]
pub async fn callback(
    State(state): State<AppState>,
    Query(query): Query<CallbackQuery>,
) -> Response {
    complete(state, query).await
}

/// The same callback under the reference's oauth-proxy prefix.
#[utoipa::path(get, path = "/v1/engines/auth/oauth-proxy/callback/openai", tag = "engines",
    params(CallbackQuery),
    responses(
        (status = 200, description = "Signed in (HTML)"),
        (status = 400, description = "No or an unknown state, a refusal, or a code the issuer did not take (HTML)"),
    ))]
pub async fn proxy_callback(
    State(state): State<AppState>,
    Query(query): Query<CallbackQuery>,
) -> Response {
    complete(state, query).await
}

async fn complete(state: AppState, query: CallbackQuery) -> Response {
    let Some(sign_in) = query.state.filter(|s| !s.is_empty()) else {
        return page(StatusCode::BAD_REQUEST, "Missing state.");
    };
    let done = to_completion(async move {
        Ok::<_, ApiError>(
            state
                .logins
                .callback(&sign_in, query.code.as_deref(), query.error.as_deref())
                .await,
        )
    })
    .await;
    match done {
        Ok(Ok(session)) => page(
            StatusCode::OK,
            &format!(
                "Engine '{}' is signed in. You can close this page.",
                session.engine
            ),
        ),
        Ok(Err(why)) => page(StatusCode::BAD_REQUEST, &why),
        Err(e) => e.into_response(),
    }
}

/// A small page for the browser, the message escaped.
fn page(status: StatusCode, message: &str) -> Response {
    let title = if status.is_success() {
        "Signed in"
    } else {
        "Sign-in failed"
    };
    let escaped = message
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    let body = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title}</title>\
         </head><body><main><h1>{title}</h1><p id=\"callback-detail\">{escaped}</p></main>\
         </body></html>"
    );
    (status, Html(body)).into_response()
}
