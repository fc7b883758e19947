//! A run as a conversation: `GET /v1/jobs/{request_id}/chat` (live, Server-Sent Events) and
//! `.../chat/history`, also under `/v1/temp-skill-runs/{request_id}` and
//! `/v1/management/runs/{request_id}`. What the items are: [`crate::conversation`].

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::jobs::{Kind, bad_query, sse};
use crate::api::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::store::RunStatus;

/// Where a conversation stream resumes.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ChatQuery {
    /// The `seq` of the last item received; the stream sends the items after it (default 0).
    pub cursor: Option<u64>,
}

/// The part of a conversation to return.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ChatHistoryQuery {
    /// The first `seq` to return (inclusive).
    pub from_seq: Option<u64>,
    /// The last `seq` to return (inclusive).
    pub to_seq: Option<u64>,
    /// Items per page, at most 1000 (the default).
    pub limit: Option<usize>,
}

/// A run's conversation so far.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ChatHistoryResponse {
    pub request_id: String,
    pub run_id: String,
    #[schema(value_type = String)]
    pub status: RunStatus,
    /// How many items `events` holds.
    pub count: usize,
    /// The items in `seq` order: `{protocol_version: "chat-replay/1.0", run_id, seq, attempt,
    /// role: assistant | user | system, kind: assistant_message | assistant_process |
    /// assistant_final | user_input_required | interaction_reply | orchestration_notice, text,
    /// created_at, correlation, raw_ref}`.
    #[schema(value_type = Vec<Object>)]
    pub events: Vec<Value>,
    /// `seq` of the first and the last item of the whole conversation (0 when it has none);
    /// with `has_more`, or when `to_seq` cut the reading short, the last item read so far.
    pub cursor_floor: u64,
    pub cursor_ceiling: u64,
    /// More items of the asked range follow: ask again from `next_from_seq`.
    pub has_more: bool,
    pub next_from_seq: Option<u64>,
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
    Path(request_id): Path<String>,
    query: Result<Query<ChatQuery>, QueryRejection>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let Query(query) = query.map_err(bad_query)?;
    let cursor = match headers.get("last-event-id") {
        Some(id) => id
            .to_str()
            .ok()
            .and_then(|id| id.trim().parse().ok())
            .ok_or_else(|| {
                ApiError::bad_request(
                    "Last-Event-ID must be the seq of an item, as sent in an event id",
                )
            })?,
        None => query.cursor.unwrap_or(0),
    };
    let stream = state.jobs.chat(scope, &request_id, cursor).await?;
    Ok(sse(stream, |e| (e.name, e.id, e.data)))
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
    let Query(query) = query.map_err(bad_query)?;
    let history = state
        .jobs
        .chat_history(
            scope,
            &request_id,
            query.from_seq,
            query.to_seq,
            query.limit.unwrap_or(crate::jobs::chat::MAX_PAGE_ITEMS),
        )
        .await?;
    let next_from_seq = history
        .has_more
        .then(|| history.items.last().map(|i| i.seq + 1))
        .flatten();
    let events: Vec<Value> = history
        .items
        .iter()
        .map(|item| serde_json::to_value(item).unwrap_or_default())
        .collect();
    Ok(Json(ChatHistoryResponse {
        request_id,
        run_id: history.run_id,
        status: history.status,
        count: events.len(),
        events,
        cursor_floor: history.first_seq,
        cursor_ceiling: history.last_seq,
        has_more: history.has_more,
        next_from_seq,
    }))
}
