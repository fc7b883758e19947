//! The invoke host's routes: `POST /skills/{id}:invoke` (also under `/v1`), `GET /skills` and
//! `POST /v1/route`.
//!
//! `GET /v1/skills` stays the installed-skills list of the jobs API that existing clients call;
//! the invocable skills are listed at `GET /skills`, next to the invoke route of the user's
//! documents.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use super::jobs::bad_json;
use crate::api::error::{ApiError, ApiResult};
use crate::invoke::result::{self, ErrorCode, SkillError, SkillResult};
use crate::invoke::route::{Route, route};
use crate::state::AppState;

const INVOKE_SUFFIX: &str = ":invoke";

/// Runs a skill and answers its Normalized Skill Result. The HTTP status follows `error.code`:
/// 200 success, 400 `INVALID_ARGUMENT`/`INVALID_JSON`, 403 `FORBIDDEN_PATH`, 404 `NOT_FOUND`,
/// 504 `TIMEOUT`, 500 `INTERNAL`. `X-Trace-Id` (1-128 printable characters, else a new UUID) is
/// echoed in the body and the response header. The same route exists without `/v1`.
#[utoipa::path(post, path = "/v1/skills/{skill_id}:invoke", tag = "invoke",
    params(
        ("skill_id" = String, Path, description = "Invocable skill id (`GET /skills`)"),
        ("X-Trace-Id" = Option<String>, Header, description = "Trace id to carry through the call"),
    ),
    request_body(content = crate::api::openapi::InputBody),
    responses(
        (status = 200, description = "The skill succeeded", body = SkillResult),
        (status = 400, description = "INVALID_ARGUMENT or INVALID_JSON", body = SkillResult),
        (status = 403, description = "FORBIDDEN_PATH", body = SkillResult),
        (status = 404, description = "NOT_FOUND", body = SkillResult),
        (status = 500, description = "INTERNAL", body = SkillResult),
        (status = 504, description = "TIMEOUT", body = SkillResult),
    ))]
pub async fn invoke(
    State(state): State<AppState>,
    target: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let trace_id = result::trace_id(headers.get("x-trace-id").map(HeaderValue::as_bytes));
    let target = match target {
        Ok(Path(target)) => target,
        // Not UTF-8 once percent-decoded: no id of ours looks like that.
        Err(_) => String::from("\u{fffd}:invoke"),
    };
    let (skill_id, body) = match target.strip_suffix(INVOKE_SUFFIX) {
        Some(id) => (id.to_owned(), parse_body(body)),
        None => {
            let error = SkillError::new(
                ErrorCode::NotFound,
                format!("no such action; call POST /skills/{target}{INVOKE_SUFFIX}"),
            );
            (target, Err(error))
        }
    };
    call(&state, skill_id, body, trace_id).await
}

/// Runs one call of skill `skill_id` and answers its result (also `POST
/// /v1/tools/{name}:call`). The call runs as its own task; if the client goes away the guard
/// fires and the call's process group is stopped instead of being left to run out its time.
pub(super) async fn call(
    state: &AppState,
    skill_id: String,
    body: Result<Value, SkillError>,
    trace_id: String,
) -> Response {
    let cancel = CancellationToken::new();
    let _guard = cancel.clone().drop_guard();
    let host = state.invoke.clone();
    let (id, trace) = (skill_id.clone(), trace_id.clone());
    let call =
        tokio::spawn(async move { host.invoke(&id, body, trace, &cancel).await }.in_current_span());
    match call.await {
        Ok(result) => respond(result),
        Err(e) => {
            // A bug, not the caller's fault: still the envelope, the header and the log line.
            tracing::error!(error = %e, "an invoke call panicked");
            let failed = Err(SkillError::internal("the call failed unexpectedly"));
            let started = std::time::Instant::now();
            respond(crate::invoke::record(
                &skill_id, trace_id, None, None, failed, started,
            ))
        }
    }
}

pub(super) fn parse_body(body: Result<Bytes, BytesRejection>) -> Result<Value, SkillError> {
    let bytes = body.map_err(|e| {
        SkillError::new(
            ErrorCode::InvalidArgument,
            format!("the request body cannot be read: {}", e.body_text()),
        )
    })?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(SkillError::new(
            ErrorCode::InvalidJson,
            "the request body is empty; send {\"input\": {...}}",
        ));
    }
    serde_json::from_slice(&bytes).map_err(|e| {
        SkillError::new(
            ErrorCode::InvalidJson,
            format!("the request body is not valid JSON: {e}"),
        )
    })
}

/// The HTTP status of a result: 200 with data, else the one its error code stands for.
fn status(result: &SkillResult) -> StatusCode {
    match result.error.as_ref().map(|e| e.code) {
        None => StatusCode::OK,
        Some(ErrorCode::InvalidArgument | ErrorCode::InvalidJson) => StatusCode::BAD_REQUEST,
        Some(ErrorCode::ForbiddenPath) => StatusCode::FORBIDDEN,
        Some(ErrorCode::NotFound) => StatusCode::NOT_FOUND,
        Some(ErrorCode::Timeout) => StatusCode::GATEWAY_TIMEOUT,
        Some(ErrorCode::Internal | ErrorCode::ToolInvocationError) => {
            StatusCode::INTERNAL_SERVER_ERROR
        }
    }
}

pub(super) fn respond(result: SkillResult) -> Response {
    let status = status(&result);
    let trace = HeaderValue::from_str(&result.trace_id).ok();
    let mut response = (status, Json(result)).into_response();
    if let Some(trace) = trace {
        response.headers_mut().insert("x-trace-id", trace);
    }
    response
}

/// The invocable skills (`id`, `runner_type`, `version`, `description`, `input_schema`,
/// `output_schema`, `timeout_ms`, `source`) and `problems`: definitions that did not load or
/// are shadowed by another source.
#[utoipa::path(get, path = "/skills", tag = "invoke",
    responses((status = 200, description = "`{\"skills\": [...], \"problems\": [...]}`", body = Value)))]
pub async fn list(State(state): State<AppState>) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        state.invoke.list().await,
    )
        .into_response()
}

/// `POST /v1/route` body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct RouteBody {
    pub text: String,
}

/// Picks a skill for a line of text with the rules of the user's documents.
#[utoipa::path(post, path = "/v1/route", tag = "invoke", request_body = RouteBody,
    responses(
        (status = 200, description = "The chosen skill", body = Route),
        (status = 422, description = "`text` missing, not a string, or blank"),
    ))]
pub async fn route_text(
    body: Result<Json<RouteBody>, axum::extract::rejection::JsonRejection>,
) -> ApiResult<Json<Route>> {
    let Json(body) = body.map_err(bad_json)?;
    if body.text.trim().is_empty() {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            serde_json::json!([{"loc": ["body", "text"], "msg": "text must not be blank", "type": "value_error"}]),
        ));
    }
    let chosen = route(&body.text);
    tracing::info!(
        selected_skill_id = chosen.skill_id,
        routing_reason = chosen.routing_reason,
        "route"
    );
    Ok(Json(chosen))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::invoke::result::{Meta, SkillError};

    #[test]
    fn statuses_follow_codes() {
        let pairs = [
            ("INVALID_ARGUMENT", 400),
            ("INVALID_JSON", 400),
            ("FORBIDDEN_PATH", 403),
            ("NOT_FOUND", 404),
            ("TIMEOUT", 504),
            ("INTERNAL", 500),
            ("TOOL_INVOCATION_ERROR", 500),
        ];
        for (code, expected) in pairs {
            let parsed = ErrorCode::parse(code).unwrap();
            assert_eq!(serde_json::to_value(parsed).unwrap(), code);
            let result = SkillResult {
                success: false,
                skill_id: "s".into(),
                trace_id: "t".into(),
                data: None,
                error: Some(SkillError::new(parsed, "m")),
                meta: Meta {
                    latency_ms: 0,
                    version: "1".into(),
                    truncated: None,
                    runner_type: None,
                },
            };
            assert_eq!(status(&result).as_u16(), expected, "{code}");
        }
    }
}
