//! A run as a conversation: `GET /v1/jobs/{request_id}/chat` (live, Server-Sent Events) and
//! `.../chat/history`, and as FCMP events: `.../events/history` (the live stream is
//! `.../events?cursor=`, in [`super::jobs::events`]); all also under
//! `/v1/temp-skill-runs/{request_id}` and `/v1/management/runs/{request_id}`. What the items
//! are: [`crate::jobs::conversation`]; the events: [`crate::jobs::fcmp`].

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::jobs::{Kind, bad_query};
use super::streams::{Opener, sse};
use crate::api::error::{ApiError, ApiResult};
use crate::clock::Timestamp;
use crate::jobs::Scope;
use crate::jobs::chat::{Items, MAX_PAGE_ITEMS, Projection, Range};
use crate::jobs::fcmp::Fcmp;
use crate::state::AppState;
use crate::store::RunStatus;

/// Where a conversation stream resumes.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ChatQuery {
    /// The `seq` of the last item received; the stream sends the items after it (default 0).
    pub cursor: Option<u64>,
}

/// The part of a conversation to return; every bound is inclusive.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ChatHistoryQuery {
    /// The first `seq` to return.
    pub from_seq: Option<u64>,
    /// The last `seq` to return.
    pub to_seq: Option<u64>,
    /// The earliest time to return (RFC 3339; without an offset, UTC). An item without a
    /// time (chat items read from the log) passes the time bounds.
    #[param(value_type = Option<String>, format = DateTime)]
    pub from_ts: Option<Timestamp>,
    /// The latest time to return.
    #[param(value_type = Option<String>, format = DateTime)]
    pub to_ts: Option<Timestamp>,
    /// Items per page, at most 1000 (the default); a page also ends before 1 MiB of JSON
    /// past its first item, with `has_more`.
    pub limit: Option<usize>,
}

/// A page of a run's conversation, as chat items or FCMP events.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ChatHistoryResponse {
    pub request_id: String,
    pub run_id: String,
    #[schema(value_type = String)]
    pub status: RunStatus,
    /// How many items `events` holds.
    pub count: usize,
    /// The items or events in `seq` order. Chat items: `{protocol_version: "chat-replay/1.0",
    /// run_id, seq, attempt, role: assistant | user | system, kind: assistant_message |
    /// assistant_process | assistant_final | user_input_required | interaction_reply |
    /// orchestration_notice, text, created_at, correlation, raw_ref}`. FCMP events:
    /// `{protocol_version: "fcmp/1.0", run_id, seq, ts, engine, type, data, meta: {attempt,
    /// local_seq}, raw_ref}`.
    #[schema(value_type = Vec<Object>)]
    pub events: Vec<Value>,
    /// `live` while the run may still add to it, `audit` once it ended.
    pub source: &'static str,
    /// `seq` of the first and the last item of the whole conversation (0 when it has none);
    /// with `has_more`, or when `to_seq` cut the reading short, the last item read so far.
    pub cursor_floor: u64,
    pub cursor_ceiling: u64,
    /// More items of the asked range follow: ask again from `next_from_seq`.
    pub has_more: bool,
    pub next_from_seq: Option<u64>,
}

/// Where a conversation or FCMP stream resumes: `Last-Event-ID` (a `seq`), else `cursor`.
pub(super) fn cursor(headers: &HeaderMap, cursor: Option<u64>) -> ApiResult<u64> {
    match headers.get("last-event-id") {
        Some(id) => id
            .to_str()
            .ok()
            .and_then(|id| id.trim().parse().ok())
            .ok_or_else(|| {
                ApiError::bad_request(
                    "Last-Event-ID must be the seq of an item, as sent in an event id",
                )
            }),
        None => Ok(cursor.unwrap_or(0)),
    }
}

/// The run's conversation as Server-Sent Events: `snapshot {status, cursor}`, each item as
/// `chat_event` (its `id` is the item's `seq`), `heartbeat {ts}` when idle, and `end {reason:
/// waiting_user | terminal}` after the question or the closing notice. Items are the run's
/// messages, reasoning, tool calls and results, commands with their output, final answer,
/// questions and replies, read from the engine's own output. `Last-Event-ID` (a `seq`) takes
/// precedence over `cursor`. Also under `/v1/temp-skill-runs/{request_id}/chat` and
/// `/v1/management/runs/{request_id}/chat`.
#[utoipa::path(get, path = "/v1/jobs/{request_id}/chat", tag = "jobs",
    params(("request_id" = String, Path), ChatQuery,
        ("Last-Event-ID" = Option<String>, Header, description = "`seq` of the last item received")),
    responses(
        (status = 200, description = "The conversation stream", content_type = "text/event-stream"),
        (status = 400, description = "Malformed Last-Event-ID"),
        (status = 404, description = "Unknown request or no run yet"),
        (status = 422, description = "`cursor` is not a non-negative integer"),
    ))]
pub async fn chat(
    State(state): State<AppState>,
    Kind(scope): Kind,
    opener: Opener,
    Path(request_id): Path<String>,
    query: Result<Query<ChatQuery>, QueryRejection>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let Query(query) = query.map_err(bad_query)?;
    let cursor = cursor(&headers, query.cursor)?;
    let stream = state
        .jobs
        .conversation_stream::<Items>(&scope, &request_id, cursor)
        .await?;
    let slot = opener.open(&state, &request_id)?;
    Ok(sse(slot, stream, |e| (e.name, e.id, e.data)))
}

/// The run's conversation so far, items `from_seq` to `to_seq` (inclusive; either may be left
/// out), the same items in the same order as [`chat`] sends. Also under
/// `/v1/temp-skill-runs/{request_id}/chat/history` and
/// `/v1/management/runs/{request_id}/chat/history`.
#[utoipa::path(get, path = "/v1/jobs/{request_id}/chat/history", tag = "jobs",
    params(("request_id" = String, Path), ChatHistoryQuery),
    responses(
        (status = 200, body = ChatHistoryResponse),
        (status = 404, description = "Unknown request or no run yet"),
        (status = 422, description = "`from_seq` or `to_seq` is not a non-negative integer"),
    ))]
pub async fn chat_history(
    State(state): State<AppState>,
    Kind(scope): Kind,
    Path(request_id): Path<String>,
    query: Result<Query<ChatHistoryQuery>, QueryRejection>,
) -> ApiResult<Json<ChatHistoryResponse>> {
    page::<Items>(state, scope, request_id, query).await
}

/// The run's FCMP/1.0 events so far, `from_seq` to `to_seq` and `from_ts` to `to_ts`
/// (inclusive; any may be left out): the events `.../events?cursor=` streams, in the same
/// order with the same `seq`. Also under `/v1/temp-skill-runs/{request_id}/events/history` and
/// `/v1/management/runs/{request_id}/events/history`.
#[utoipa::path(get, path = "/v1/jobs/{request_id}/events/history", tag = "jobs",
    params(("request_id" = String, Path), ChatHistoryQuery),
    responses(
        (status = 200, body = ChatHistoryResponse, example = json!({
            "request_id": "6f1c…", "run_id": "9a2e…", "status": "succeeded", "count": 2,
            "events": [
                {"protocol_version": "fcmp/1.0", "run_id": "9a2e…", "seq": 1,
                 "ts": "2026-11-26T10:00:00.000000Z", "engine": "codex",
                 "type": "conversation.state.changed",
                 "data": {"from": "queued", "to": "running", "trigger": "turn.started",
                          "updated_at": "2026-11-26T10:00:00.000000Z",
                          "pending_interaction_id": null},
                 "meta": {"attempt": 1, "local_seq": 1}, "raw_ref": null},
                {"protocol_version": "fcmp/1.0", "run_id": "9a2e…", "seq": 2,
                 "ts": "2026-11-26T10:00:00.000000Z", "engine": "codex",
                 "type": "assistant.message.final",
                 "data": {"message_id": "m1", "summary": "Done.", "classification": "final",
                          "details": {}, "text": "Done."},
                 "meta": {"attempt": 1, "local_seq": 2},
                 "raw_ref": {"attempt_number": 1, "stream": "stdout", "byte_from": 0,
                             "byte_to": 120, "encoding": "utf-8"}}],
            "source": "audit", "cursor_floor": 1, "cursor_ceiling": 3, "has_more": false,
            "next_from_seq": null})),
        (status = 404, description = "Unknown request or no run yet"),
        (status = 422, description = "A bound is not a non-negative integer or a time"),
    ))]
pub async fn events_history(
    State(state): State<AppState>,
    Kind(scope): Kind,
    Path(request_id): Path<String>,
    query: Result<Query<ChatHistoryQuery>, QueryRejection>,
) -> ApiResult<Json<ChatHistoryResponse>> {
    page::<Fcmp>(state, scope, request_id, query).await
}

async fn page<P: Projection>(
    state: AppState,
    scope: Scope,
    request_id: String,
    query: Result<Query<ChatHistoryQuery>, QueryRejection>,
) -> ApiResult<Json<ChatHistoryResponse>> {
    let Query(query) = query.map_err(bad_query)?;
    let range = Range {
        from_seq: query.from_seq,
        to_seq: query.to_seq,
        from_ts: query.from_ts,
        to_ts: query.to_ts,
    };
    let limit = query.limit.unwrap_or(MAX_PAGE_ITEMS);
    let history = state
        .jobs
        .conversation_page::<P>(&scope, &request_id, range, limit)
        .await?;
    let next_from_seq = history
        .has_more
        .then(|| history.items.last().map(|i| P::seq(i) + 1))
        .flatten();
    let events: Vec<Value> = history
        .items
        .iter()
        .map(|item| serde_json::to_value(item).unwrap_or_default())
        .collect();
    Ok(Json(ChatHistoryResponse {
        request_id,
        run_id: history.run_id,
        source: if history.status.is_terminal() {
            "audit"
        } else {
            "live"
        },
        status: history.status,
        count: events.len(),
        events,
        cursor_floor: history.first_seq,
        cursor_ceiling: history.last_seq,
        has_more: history.has_more,
        next_from_seq,
    }))
}
