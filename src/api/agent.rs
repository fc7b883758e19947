//! The agent's routes: `POST /v1/agent/chat` (also `/agent/chat`, as in the user's documents)
//! and the sessions every chat is kept in, `GET /v1/sessions`, `GET /v1/sessions/{id}`,
//! `GET /v1/sessions/{id}/events` (JSON, or Server-Sent Events that follow a chat under way)
//! and `DELETE /v1/sessions/{id}`.

use crate::api::auth::Acting;
use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use skill_runner_core::tenants::Caller;
use tokio::sync::{broadcast, mpsc};

use super::jobs::{bad_json, bad_query};
use super::streams::{Opener, sse};
use crate::agent::StartError;
use crate::agent::chat::{ChatOutcome, ChatRequest};
use crate::agent::live::Published;
use crate::agent::session::{Event, SessionError, Stored, valid_id};
use crate::api::error::{ApiError, ApiResult, blocking};
use crate::invoke::result;
use crate::jobs::live::EventData;
use crate::state::AppState;

/// A chat request. Unknown fields are ignored.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct ChatBody {
    /// The user's message (not blank).
    pub message: String,
    /// A session id (`GET /v1/sessions`) to continue; a new session when absent.
    pub conversation_id: Option<String>,
    /// `openai`, `dashscope` (or `qwen`), `openai-responses` or `anthropic`; default
    /// `SKILL_RUNNER_AGENT_PROVIDER`.
    pub provider: Option<String>,
    /// The model; default the provider's `SKILL_RUNNER_AGENT_<PROVIDER>_MODEL`.
    pub model: Option<String>,
    /// Rounds of tool calls before one last request without tools, 0 to 10 (default 5).
    #[serde(default = "default_max_tool_calls")]
    pub max_tool_calls: u32,
    /// 1 to 32768 (default 2000).
    #[serde(default = "default_max_tokens")]
    pub max_tokens: u32,
    /// 0 to 2 (default 0.7).
    #[serde(default = "default_temperature")]
    pub temperature: f64,
    /// Tool calls with refused arguments tolerated before the chat fails with
    /// `TOOL_INVOCATION_ERROR`, 0 to 10 (default 3).
    #[serde(default = "default_max_validation_retries")]
    pub max_validation_retries: u32,
    /// The skills offered as tools (default: every invocable skill).
    pub allowed_tools: Option<Vec<String>>,
    /// Answer Server-Sent Events of the session's events as they happen, ending with `result`.
    #[serde(default)]
    pub stream: bool,
}

fn default_max_tool_calls() -> u32 {
    5
}
fn default_max_tokens() -> u32 {
    2000
}
fn default_temperature() -> f64 {
    0.7
}
fn default_max_validation_retries() -> u32 {
    3
}

/// One tool call of a chat.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ToolCallView {
    pub tool: String,
    /// As the model sent them (a string when they were not JSON).
    #[schema(value_type = Object)]
    pub arguments: Value,
    /// The arguments passed the tool's checks and the tool ran.
    pub validated: bool,
    /// The Normalized Skill Result, or `{error: {type, message, problems?}}` for a refused call.
    #[schema(value_type = Object)]
    pub result: Value,
}

/// Figures of a chat.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ChatMeta {
    pub provider: String,
    pub model: String,
    pub total_tokens: u64,
    pub tool_calls_count: usize,
    pub validation_retries: u32,
    pub latency_ms: u64,
    /// `end`, `max_steps` or `error`.
    pub stop_reason: String,
    /// Model requests made.
    pub steps: u32,
}

/// Why a chat failed.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ChatErrorView {
    /// `TOOL_INVOCATION_ERROR`, `PROVIDER_ERROR`, `INTERRUPTED` or `INTERNAL`.
    pub code: String,
    pub message: String,
}

/// How a chat went.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ChatResponse {
    pub success: bool,
    /// The model's answer, or what went wrong.
    pub response: String,
    /// The session id; pass it back to continue the conversation.
    pub conversation_id: String,
    pub trace_id: String,
    pub tool_calls: Vec<ToolCallView>,
    pub meta: ChatMeta,
    /// Null when `success`.
    pub error: Option<ChatErrorView>,
}

impl From<ChatOutcome> for ChatResponse {
    fn from(o: ChatOutcome) -> Self {
        Self {
            success: o.success,
            response: o.response,
            conversation_id: o.conversation_id,
            trace_id: o.trace_id,
            meta: ChatMeta {
                provider: o.provider,
                model: o.model,
                total_tokens: o.usage.total(),
                tool_calls_count: o.tool_calls.len(),
                validation_retries: o.validation_retries,
                latency_ms: o.latency_ms,
                stop_reason: o.stop_reason,
                steps: o.steps,
            },
            tool_calls: o
                .tool_calls
                .into_iter()
                .map(|c| ToolCallView {
                    tool: c.tool,
                    arguments: c.arguments,
                    validated: c.validated,
                    result: c.result,
                })
                .collect(),
            error: o
                .error
                .map(|(code, message)| ChatErrorView { code, message }),
        }
    }
}

impl ChatBody {
    fn into_request(self, trace_id: String, caller: Caller) -> ApiResult<ChatRequest> {
        if self.message.trim().is_empty() {
            return Err(ApiError::invalid_field("message", "must not be blank"));
        }
        let ranges = [
            ("max_tool_calls", self.max_tool_calls, 0, 10),
            ("max_tokens", self.max_tokens, 1, 32_768),
            ("max_validation_retries", self.max_validation_retries, 0, 10),
        ];
        for (field, value, low, high) in ranges {
            if !(low..=high).contains(&value) {
                return Err(ApiError::invalid_field(
                    field,
                    format!("must be between {low} and {high}, got {value}"),
                ));
            }
        }
        if !(0.0..=2.0).contains(&self.temperature) {
            return Err(ApiError::invalid_field(
                "temperature",
                format!("must be between 0 and 2, got {}", self.temperature),
            ));
        }
        if let Some(id) = &self.conversation_id
            && !valid_id(id)
        {
            return Err(ApiError::bad_request(format!(
                "conversation_id: '{id}' is not a session id (32 lower-case hex digits)"
            )));
        }
        Ok(ChatRequest {
            message: self.message,
            conversation_id: self.conversation_id,
            provider: self.provider,
            model: self.model.filter(|m| !m.trim().is_empty()),
            max_tool_calls: self.max_tool_calls,
            max_tokens: self.max_tokens,
            temperature: self.temperature,
            max_validation_retries: self.max_validation_retries,
            allowed_tools: self.allowed_tools,
            trace_id,
            caller,
        })
    }
}

impl From<StartError> for ApiError {
    fn from(e: StartError) -> Self {
        match e {
            StartError::Provider(e) => ApiError::bad_request(e.to_string()),
            StartError::Tools(e) => ApiError::bad_request(e.to_string()),
            StartError::Session(e) => e.into(),
        }
    }
}

impl From<SessionError> for ApiError {
    fn from(e: SessionError) -> Self {
        match e {
            SessionError::BadId(_) => ApiError::bad_request(e.to_string()),
            SessionError::NotFound(_) => ApiError::not_found(e.to_string()),
            SessionError::Busy(_) | SessionError::Corrupt { .. } => {
                ApiError::new(StatusCode::CONFLICT, e.to_string())
            }
            SessionError::Io(e) => ApiError::Internal(e.into()),
        }
    }
}

/// Chats with the model, which may call the invocable skills as tools; the chat is kept as a
/// session (`conversation_id`). A chat on a session another chat holds waits for it to end.
/// `success: false` (with `error`) when the chat failed: the model's tool arguments were refused
/// more than `max_validation_retries` times (`TOOL_INVOCATION_ERROR`) or the provider failed
/// beyond its retries (`PROVIDER_ERROR`). With `stream: true`, Server-Sent Events: each session
/// event as it happens (its `type` as the event name, its `seq` as the id), the model's text as
/// `assistant.delta` (not stored), ending with `result`. `X-Trace-Id` is carried through the
/// tool calls and echoed. Also `POST /agent/chat`.
#[utoipa::path(post, path = "/v1/agent/chat", tag = "agent", request_body = ChatBody,
    params(("X-Trace-Id" = Option<String>, Header, description = "Trace id to carry through the chat")),
    responses(
        (status = 200, description = "The chat ran (see `success`)", body = ChatResponse),
        (status = 400, description = "Unknown or unconfigured provider, unknown allowed tool, or a malformed conversation_id"),
        (status = 404, description = "No session has that conversation_id"),
        (status = 409, description = "The session's log is damaged"),
        (status = 422, description = "Body is not valid JSON of this shape, or a value out of range"),
    ))]
pub async fn chat(
    State(state): State<AppState>,
    Acting(caller): Acting,
    opener: Opener,
    headers: HeaderMap,
    body: Result<Json<ChatBody>, JsonRejection>,
) -> ApiResult<Response> {
    let Json(body) = body.map_err(bad_json)?;
    let trace_id = result::trace_id(headers.get("x-trace-id").map(HeaderValue::as_bytes));
    let streamed = body.stream;
    let request = body.into_request(trace_id.clone(), caller.clone())?;
    let prepared = state.agent.prepare(request).await?;
    let trace_header =
        HeaderValue::from_str(&trace_id).map_err(|e| ApiError::Internal(e.into()))?;
    let mut response = if streamed {
        let session_id = prepared.session_id().to_owned();
        let slot = opener.open(&state, &session_id)?;
        let (sender, mut receiver) = mpsc::channel(crate::agent::chat::STREAM_BEHIND);
        let chat = state.agent.start(prepared, Some(sender));
        let heartbeat = state.config.jobs.sse_heartbeat;
        let stream = async_stream::stream! {
            let (mut seen, mut ended) = (0, false);
            loop {
                match tokio::time::timeout(heartbeat, receiver.recv()).await {
                    Ok(Some(published)) => {
                        seen = seen.max(published.stored.seq);
                        ended |= matches!(published.stored.event, Event::Result { .. });
                        yield Out::Event(published);
                    }
                    Ok(None) => break,
                    Err(_) => yield Out::Heartbeat(seen),
                }
            }
            if !ended {
                // This client fell behind the chat and was let go: the rest is in the log.
                let live = state.agent.follow(&session_id);
                if let Ok((_, stored)) = read_session(&state, &caller, &session_id, seen).await {
                    let rest = follow(state, caller, session_id, seen, stored, live);
                    for await out in rest {
                        if !matches!(out, Out::End(_)) {
                            yield out;
                        }
                    }
                }
            }
            // The chat has ended; its task is done.
            drop(chat);
        };
        sse(slot, stream, Out::parts)
    } else {
        let outcome = state
            .agent
            .start(prepared, None)
            .await
            .map_err(|e| ApiError::Internal(e.into()))?;
        Json(ChatResponse::from(outcome)).into_response()
    };
    response.headers_mut().insert("x-trace-id", trace_header);
    Ok(response)
}

/// An item of a session event stream.
enum Out {
    Event(Published),
    /// Nothing happened for a while; the last `seq` sent.
    Heartbeat(u64),
    /// The stream is over: the last `seq` sent.
    End(u64),
}

impl Out {
    fn parts(self) -> (&'static str, String, EventData) {
        match self {
            Out::Event(p) => {
                // A delta carries the seq of the stored event it follows, for Last-Event-ID.
                let id = if p.stored.seq > 0 {
                    p.stored.seq
                } else {
                    p.after_seq
                };
                (
                    p.stored.event.kind(),
                    id.to_string(),
                    p.stored.redacted().into(),
                )
            }
            Out::Heartbeat(seq) => (
                "heartbeat",
                seq.to_string(),
                json!({"ts": crate::clock::unix_now()}).into(),
            ),
            Out::End(seq) => ("end", seq.to_string(), json!({"last_seq": seq}).into()),
        }
    }
}

/// Paging of the session list.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SessionListQuery {
    /// 1 to 200; default 50.
    pub limit: Option<usize>,
    /// Sessions to skip; default 0.
    pub offset: Option<usize>,
}

/// A session as listed.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SessionSummary {
    pub session_id: String,
    pub created_at: String,
    /// When its log last changed (RFC 3339), null before its first event.
    pub updated_at: Option<String>,
    /// `{title, provider, model}` of the chat that created it.
    #[schema(value_type = Object)]
    pub metadata: Value,
}

/// A page of sessions, newest first.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SessionList {
    pub sessions: Vec<SessionSummary>,
    pub total: usize,
    pub limit: usize,
    pub offset: usize,
}

/// The sessions, newest first.
#[utoipa::path(get, path = "/v1/sessions", tag = "agent", params(SessionListQuery),
    responses((status = 200, body = SessionList), (status = 422, description = "limit outside 1..=200")))]
pub async fn list_sessions(
    State(state): State<AppState>,
    Acting(caller): Acting,
    query: Result<Query<SessionListQuery>, QueryRejection>,
) -> ApiResult<Json<SessionList>> {
    let Query(query) = query.map_err(bad_query)?;
    let limit = query.limit.unwrap_or(50);
    if !(1..=200).contains(&limit) {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            json!([{"loc": ["query", "limit"], "msg": format!("limit must be between 1 and 200, got {limit}"), "type": "value_error"}]),
        ));
    }
    let offset = query.offset.unwrap_or(0);
    let (total, sessions) = list_all(&state, &caller, offset, limit).await?;
    Ok(Json(SessionList {
        sessions,
        total,
        limit,
        offset,
    }))
}

/// How many sessions `caller` sees, and the page `offset..offset + limit` of them, newest
/// first.
pub(crate) async fn list_all(
    state: &AppState,
    caller: &Caller,
    offset: usize,
    limit: usize,
) -> ApiResult<(usize, Vec<SessionSummary>)> {
    let store = state.agent.sessions().clone();
    let tenant = caller.visible_tenant();
    let mut all = blocking(move || store.list()).await??;
    all.retain(|(meta, _)| meta.visible_to(tenant.as_deref()));
    let total = all.len();
    let sessions = all
        .into_iter()
        .skip(offset)
        .take(limit)
        .map(|(meta, changed)| SessionSummary {
            session_id: meta.session_id,
            created_at: meta.created_at,
            updated_at: changed.map(|t| {
                chrono::DateTime::<chrono::Utc>::from(t)
                    .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
            }),
            metadata: Value::Object(meta.metadata),
        })
        .collect();
    Ok((total, sessions))
}

/// A session: its meta, how many events it holds, and whether a chat is under way on it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SessionView {
    pub session_id: String,
    pub created_at: String,
    #[schema(value_type = Object)]
    pub metadata: Value,
    pub event_count: usize,
    pub last_seq: u64,
    pub live: bool,
}

/// One session.
#[utoipa::path(get, path = "/v1/sessions/{session_id}", tag = "agent",
    params(("session_id" = String, Path, description = "32 lower-case hex digits")),
    responses(
        (status = 200, body = SessionView),
        (status = 400, description = "Not a session id"),
        (status = 404, description = "No such session"),
        (status = 409, description = "The session's log is damaged"),
    ))]
pub async fn get_session(
    State(state): State<AppState>,
    Acting(caller): Acting,
    Path(session_id): Path<String>,
) -> ApiResult<Json<SessionView>> {
    let (meta, events) = read_session(&state, &caller, &session_id, 0).await?;
    Ok(Json(SessionView {
        session_id: meta.session_id,
        created_at: meta.created_at,
        metadata: Value::Object(meta.metadata),
        event_count: events.len(),
        last_seq: events.last().map_or(0, |e| e.seq),
        live: state.agent.follow(&session_id).is_some(),
    }))
}

/// Session `id`'s meta and its stored events after `after_seq`, when `caller` may see it
/// (another tenant's is answered as one that does not exist).
pub(crate) async fn read_session(
    state: &AppState,
    caller: &Caller,
    id: &str,
    after_seq: u64,
) -> ApiResult<(crate::agent::session::Meta, Vec<Stored>)> {
    let store = state.agent.sessions().clone();
    let id = id.to_owned();
    let tenant = caller.visible_tenant();
    blocking(move || {
        let (meta, events) = store.read(&id, after_seq)?;
        if !meta.visible_to(tenant.as_deref()) {
            return Err(SessionError::NotFound(id));
        }
        Ok((meta, events))
    })
    .await?
    .map_err(Into::into)
}

/// Where the event list starts.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Events after this `seq` (default 0: all). `Last-Event-ID` wins for a stream.
    pub after_seq: Option<u64>,
}

/// The session's stored events after `after_seq`, secrets redacted: JSON `{session_id, events}`,
/// or, when the request accepts `text/event-stream`, Server-Sent Events that send them and then
/// follow the chat under way (text deltas included) until its `result`, ending with `end
/// {last_seq}`; `heartbeat` when idle.
#[utoipa::path(get, path = "/v1/sessions/{session_id}/events", tag = "agent",
    params(("session_id" = String, Path, description = "32 lower-case hex digits"), EventsQuery),
    responses(
        (status = 200, description = "`{session_id, events}`, or the event stream", content_type = "application/json"),
        (status = 400, description = "Not a session id"),
        (status = 404, description = "No such session"),
        (status = 409, description = "The session's log is damaged"),
    ))]
pub async fn session_events(
    State(state): State<AppState>,
    Acting(caller): Acting,
    opener: Opener,
    Path(session_id): Path<String>,
    query: Result<Query<EventsQuery>, QueryRejection>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let Query(query) = query.map_err(bad_query)?;
    let wants_stream = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"));
    let after_seq = match headers.get("last-event-id").filter(|_| wants_stream) {
        Some(id) => id
            .to_str()
            .ok()
            .and_then(|id| id.trim().parse().ok())
            .ok_or_else(|| ApiError::bad_request("Last-Event-ID must be a seq as sent"))?,
        None => query.after_seq.unwrap_or(0),
    };
    // Followed before the log is read, so nothing falls between the two.
    let live = state.agent.follow(&session_id);
    let (_, stored) = read_session(&state, &caller, &session_id, after_seq).await?;
    if !wants_stream {
        let events: Vec<Value> = stored.iter().map(Stored::redacted).collect();
        return Ok(Json(json!({"session_id": session_id, "events": events})).into_response());
    }
    let slot = opener.open(&state, &session_id)?;
    let stream = follow(state, caller, session_id, after_seq, stored, live);
    Ok(sse(slot, stream, Out::parts))
}

/// A session's `stored` events (those after `seen`), then the chat under way on it (`live`,
/// followed before `stored` was read) until its `result`, catching up from the log whenever
/// it falls behind; `end` last.
fn follow(
    state: AppState,
    caller: Caller,
    session_id: String,
    seen: u64,
    stored: Vec<Stored>,
    live: Option<broadcast::Receiver<Published>>,
) -> impl futures_util::Stream<Item = Out> + Send + 'static {
    let heartbeat = state.config.jobs.sse_heartbeat;
    let closing = state.agent.closing().clone();
    async_stream::stream! {
        let mut seen = seen;
        for event in stored {
            seen = event.seq;
            yield Out::Event(Published { stored: event, after_seq: seen });
        }
        if let Some(mut live) = live {
            loop {
                let next = tokio::select! {
                    next = tokio::time::timeout(heartbeat, live.recv()) => next,
                    () = closing.cancelled() => break,
                };
                let closed = matches!(next, Ok(Err(broadcast::error::RecvError::Closed)));
                let published = match next {
                    Err(_) => {
                        yield Out::Heartbeat(seen);
                        continue;
                    }
                    Ok(Ok(published)) => published,
                    Ok(Err(broadcast::error::RecvError::Lagged(_)))
                    | Ok(Err(broadcast::error::RecvError::Closed)) => {
                        // Fell behind, or the chat ended: the rest is in the log.
                        let caught_up = read_session(&state, &caller, &session_id, seen).await;
                        let Ok((_, rest)) = caught_up else { break };
                        let mut ended = false;
                        for event in rest {
                            seen = event.seq;
                            ended |= matches!(event.event, Event::Result { .. });
                            yield Out::Event(Published { stored: event, after_seq: seen });
                        }
                        if ended || closed {
                            break;
                        }
                        continue;
                    }
                };
                if !published.news_after(seen) {
                    continue;
                }
                if published.stored.seq > 0 {
                    seen = published.stored.seq;
                }
                let ended = matches!(published.stored.event, Event::Result { .. });
                yield Out::Event(published);
                if ended {
                    break;
                }
            }
        }
        yield Out::End(seen);
    }
}

/// Removes a session; 409 while a chat holds it.
#[utoipa::path(delete, path = "/v1/sessions/{session_id}", tag = "agent",
    params(("session_id" = String, Path, description = "32 lower-case hex digits")),
    responses(
        (status = 204, description = "Removed"),
        (status = 400, description = "Not a session id"),
        (status = 404, description = "No such session"),
        (status = 409, description = "A chat holds the session"),
    ))]
pub async fn delete_session(
    State(state): State<AppState>,
    Acting(caller): Acting,
    Path(session_id): Path<String>,
) -> ApiResult<StatusCode> {
    read_session(&state, &caller, &session_id, u64::MAX).await?;
    let store = state.agent.sessions().clone();
    blocking(move || store.delete(&session_id)).await??;
    Ok(StatusCode::NO_CONTENT)
}
