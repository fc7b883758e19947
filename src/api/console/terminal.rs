//! The engine terminal in the console: `GET /ui/engines/tui/session` (the current session),
//! `POST .../start` `{engine}`, `POST .../stop`, and the session itself over a WebSocket on the
//! same port and behind the same Basic Auth (`GET .../ws`): binary frames carry the terminal's
//! output, text frames from the page carry `{"type": "input", "data": "…"}` or
//! `{"type": "resize", "cols": …, "rows": …}`, and a last text frame `{"type": "exit", "code":
//! …}` tells the page the CLI ended. The reference's `.../input` and `.../resize` routes are
//! retired (410): the WebSocket carries both.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;

use crate::api::engines::agent_engine;
use crate::api::error::{ApiError, ApiResult};
use crate::api::jobs::bad_json;
use crate::process::terminal::{Launch, SessionInfo, Viewer};
use crate::state::AppState;

/// `GET /ui/engines/tui/session`.
#[derive(Debug, Serialize)]
pub struct SessionState {
    /// The live session, or the last one (with `live: false`); `null` before the first.
    pub session: Option<SessionInfo>,
}

/// `GET /ui/engines/tui/session`.
pub async fn current(State(state): State<AppState>) -> Json<SessionState> {
    Json(SessionState {
        session: state.terminal.current(),
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartBody {
    engine: String,
}

/// `POST /ui/engines/tui/session/start {engine}`: the engine's CLI with no arguments (its own
/// TUI), `HOME` and the working folder at the agent home, `TERM=xterm-256color`. 409 while
/// another session is live; 422 when the CLI is not installed; 403 when the service listens
/// beyond loopback with no credentials configured.
pub async fn start(
    State(state): State<AppState>,
    body: Result<Json<StartBody>, JsonRejection>,
) -> ApiResult<Json<SessionInfo>> {
    let Json(body) = body.map_err(bad_json)?;
    let config = &state.config;
    if config.admin_auth.is_none() && config.api_tokens.is_none() && !config.bind.ip().is_loopback()
    {
        // A terminal is a shell in all but name: never open to anyone who can reach the port.
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "The engine terminal needs UI_BASIC_AUTH_ENABLED (or SKILL_RUNNER_API_TOKENS) when \
             the service listens beyond loopback",
        ));
    }
    let engine = agent_engine(&body.engine)?;
    let info = launch(&state, engine, &[]).await?;
    tracing::info!(engine = %engine, session_id = info.session_id, "terminal session started");
    Ok(Json(info))
}

/// Starts `engine`'s CLI with `args` in the terminal, `HOME` at the agent home, from the
/// allow-listed environment: the operator's terminal, or a CLI's own login.
pub(crate) async fn launch(
    state: &AppState,
    engine: crate::engines::Engine,
    args: &[String],
) -> ApiResult<SessionInfo> {
    let engines = state.jobs.engines();
    let program = engines
        .locate(engine)
        .map_err(|problem| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, problem))?
        .ok_or_else(|| ApiError::not_found(format!("Engine '{engine}' has no CLI")))?;
    let home = state.config.engines.agent_home.clone();
    tokio::fs::create_dir_all(&home)
        .await
        .map_err(|e| ApiError::Internal(e.into()))?;
    let bin = state.config.engines.npm_prefix.join("bin");
    let mut env: Vec<(String, String)> = state
        .config
        .child_env
        .base
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "HOME" | "TERM" | "PATH"))
        .cloned()
        .collect();
    let path = match state.config.child_env.path() {
        Some(path) => format!("{}:{path}", bin.display()),
        None => bin.display().to_string(),
    };
    env.extend([
        ("HOME".to_owned(), home.display().to_string()),
        ("PATH".to_owned(), path),
        ("TERM".to_owned(), "xterm-256color".to_owned()),
        ("COLORTERM".to_owned(), "truecolor".to_owned()),
    ]);
    Ok(state
        .terminal
        .start(Launch {
            engine: engine.as_str(),
            program: &program,
            args,
            env,
            cwd: &home,
        })
        .map_err(crate::error::Error::from)?)
}

/// `POST /ui/engines/tui/session/stop`: hangs the live session up.
pub async fn stop(State(state): State<AppState>) -> Json<serde_json::Value> {
    Json(json!({"stopped": state.terminal.stop()}))
}

/// `POST /ui/engines/tui/session/input` and `.../resize`: retired.
pub async fn retired() -> ApiError {
    ApiError::new(
        StatusCode::GONE,
        "Retired: input and resizes travel over the WebSocket GET /ui/engines/tui/session/ws",
    )
}

/// `GET /ui/engines/tui/session/ws`: attaches to the current session (404 when there is none).
pub async fn socket(State(state): State<AppState>, upgrade: WebSocketUpgrade) -> Response {
    match state.terminal.attach() {
        Some(viewer) => upgrade.on_upgrade(move |socket| pump(socket, viewer)),
        None => ApiError::not_found("No terminal session: start one first").into_response(),
    }
}

/// What the page sends.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum FromPage {
    Input { data: String },
    Resize { cols: u16, rows: u16 },
}

/// How the session ended: its exit code (`None` when a signal ended it).
pub(crate) async fn ended(
    ended: &mut tokio::sync::watch::Receiver<Option<Option<i32>>>,
) -> Option<i32> {
    ended
        .wait_for(Option::is_some)
        .await
        .ok()
        .and_then(|e| *e)
        .flatten()
}

/// Writes to the terminal off the async threads: a CLI that stops reading fills the terminal's
/// buffer and blocks the write. Awaited, so keystrokes keep their order.
async fn type_into(viewer: &Viewer, bytes: Vec<u8>) {
    let session = Arc::clone(&viewer.session);
    let _ = tokio::task::spawn_blocking(move || session.write(&bytes)).await;
}

async fn pump(mut socket: WebSocket, mut viewer: Viewer) {
    if !viewer.replay.is_empty()
        && socket
            .send(Message::Binary(std::mem::take(&mut viewer.replay).into()))
            .await
            .is_err()
    {
        return;
    }
    loop {
        tokio::select! {
            chunk = viewer.output.recv() => match chunk {
                Ok(bytes) => {
                    if socket.send(Message::Binary(bytes.into())).await.is_err() {
                        return;
                    }
                }
                // A viewer too slow for the output misses some of it, like a terminal would.
                Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => return,
            },
            code = ended(&mut viewer.ended) => {
                // What the reader sent before it recorded the end is already in the channel.
                while let Ok(bytes) = viewer.output.try_recv() {
                    let _ = socket.send(Message::Binary(bytes.into())).await;
                }
                let _ = socket
                    .send(Message::Text(json!({"type": "exit", "code": code}).to_string().into()))
                    .await;
                let _ = socket.send(Message::Close(None)).await;
                return;
            },
            message = socket.recv() => match message {
                Some(Ok(Message::Text(text))) => match serde_json::from_str::<FromPage>(&text) {
                    Ok(FromPage::Input { data }) => type_into(&viewer, data.into_bytes()).await,
                    Ok(FromPage::Resize { cols, rows }) => {
                        let _ = viewer.session.resize(cols, rows);
                    }
                    Err(e) => tracing::debug!(error = %e, "ignored a terminal message"),
                },
                Some(Ok(Message::Binary(bytes))) => type_into(&viewer, bytes.to_vec()).await,
                Some(Ok(_)) => {}
                Some(Err(_)) | None => return,
            },
        }
    }
}
