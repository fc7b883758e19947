//! `/v1/schedules`: jobs made at each tick of a cron expression. Every route sees the caller's
//! tenant's schedules only; another tenant's is answered 404 like one that does not exist.

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::api::auth::Acting;
use crate::api::error::{ApiError, ApiResult};
use crate::api::jobs::bad_json;
use crate::clock::Timestamp;
use crate::jobs::schedules::{ScheduleInput, Shown};
use crate::state::AppState;

/// A schedule as shown.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ScheduleView {
    pub schedule_id: String,
    /// The next ticks (UTC), the first being when the next job is made; empty while paused.
    pub next_runs: Vec<Timestamp>,
    pub tenant_id: String,
    /// The job each tick makes: `skill_id`, `engine`, `input`, `parameter`, `runtime_options`,
    /// `model`, `skills`, `retry`, `priority`.
    #[schema(value_type = Object)]
    pub job: Value,
    pub cron: String,
    pub timezone: String,
    /// `skip`, `queue` or `cancel_previous`.
    pub overlap: String,
    pub catch_up_seconds: u64,
    pub paused: bool,
    pub last_tick_at: Option<Timestamp>,
    /// `run`, `skipped_overlap`, `skipped_late` or `failed: <why>`.
    pub last_outcome: Option<String>,
    pub last_request_id: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

impl From<Shown> for ScheduleView {
    fn from(shown: Shown) -> Self {
        let s = shown.schedule;
        Self {
            schedule_id: s.schedule_id,
            next_runs: shown.next_runs,
            tenant_id: s.tenant_id,
            job: s.job,
            cron: s.cron,
            timezone: s.timezone,
            overlap: s.overlap,
            catch_up_seconds: s.catch_up_seconds,
            paused: s.paused,
            last_tick_at: s.last_tick_at,
            last_outcome: s.last_outcome,
            last_request_id: s.last_request_id,
            created_at: s.created_at,
            updated_at: s.updated_at,
        }
    }
}

/// The caller's tenant's schedules.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ScheduleList {
    pub schedules: Vec<ScheduleView>,
}

/// A body's fields as a schedule's settings (`cron`, `timezone`, `overlap`,
/// `catch_up_seconds`, `paused`) and its job's (the others).
fn input_of(body: Map<String, Value>) -> Result<ScheduleInput, ApiError> {
    let invalid = |why: String| ApiError::from(crate::error::Error::invalid(why));
    let mut input = ScheduleInput::default();
    let mut job = Map::new();
    for (key, value) in body {
        match key.as_str() {
            "cron" | "timezone" | "overlap" => {
                let text = value
                    .as_str()
                    .ok_or_else(|| invalid(format!("{key} must be a string, got {value}")))?
                    .to_owned();
                match key.as_str() {
                    "cron" => input.cron = Some(text),
                    "timezone" => input.timezone = Some(text),
                    _ => input.overlap = Some(text),
                }
            }
            "catch_up_seconds" => {
                input.catch_up_seconds = Some(value.as_u64().ok_or_else(|| {
                    invalid(format!(
                        "catch_up_seconds must be a number of seconds (0 or more), got {value}"
                    ))
                })?);
            }
            "paused" => {
                input.paused = Some(value.as_bool().ok_or_else(|| {
                    invalid(format!("paused must be true or false, got {value}"))
                })?);
            }
            _ => {
                job.insert(key, value);
            }
        }
    }
    if !job.is_empty() {
        input.job = Some(job);
    }
    Ok(input)
}

/// Makes a schedule: `{skill_id, engine?, input?, parameter?, runtime_options?, model?, skills?,
/// retry?, priority?, cron, timezone?, overlap?, catch_up_seconds?, paused?}`.
#[utoipa::path(post, path = "/v1/schedules", tag = "schedules", request_body = crate::api::openapi::ScheduleBody,
    responses(
        (status = 200, body = ScheduleView),
        (status = 400, description = "A field is refused (which, why)"),
        (status = 404, description = "Unknown skill"),
        (status = 422, description = "Not a JSON object"),
    ))]
pub async fn create_schedule(
    State(state): State<AppState>,
    Acting(caller): Acting,
    body: Result<Json<Map<String, Value>>, JsonRejection>,
) -> ApiResult<Json<ScheduleView>> {
    let Json(body) = body.map_err(bad_json)?;
    let input = input_of(body)?;
    let made = state.jobs.create_schedule(&caller, input).await?;
    Ok(Json(made.into()))
}

/// The caller's tenant's schedules, with their next ticks.
#[utoipa::path(get, path = "/v1/schedules", tag = "schedules",
    responses((status = 200, body = ScheduleList)))]
pub async fn list_schedules(
    State(state): State<AppState>,
    Acting(caller): Acting,
) -> ApiResult<Json<ScheduleList>> {
    let schedules = state.jobs.schedules(&caller).await?;
    Ok(Json(ScheduleList {
        schedules: schedules.into_iter().map(Into::into).collect(),
    }))
}

/// One schedule.
#[utoipa::path(get, path = "/v1/schedules/{schedule_id}", tag = "schedules",
    params(("schedule_id" = String, Path)),
    responses((status = 200, body = ScheduleView), (status = 404, description = "No such schedule")))]
pub async fn get_schedule(
    State(state): State<AppState>,
    Acting(caller): Acting,
    Path(schedule_id): Path<String>,
) -> ApiResult<Json<ScheduleView>> {
    Ok(Json(
        state.jobs.schedule(&caller, &schedule_id).await?.into(),
    ))
}

/// Changes the fields sent (a job field replaces the job's fields: send the whole job).
#[utoipa::path(patch, path = "/v1/schedules/{schedule_id}", tag = "schedules",
    params(("schedule_id" = String, Path)), request_body = crate::api::openapi::ScheduleBody,
    responses((status = 200, body = ScheduleView), (status = 400, description = "A field is refused"),
              (status = 404, description = "No such schedule")))]
pub async fn update_schedule(
    State(state): State<AppState>,
    Acting(caller): Acting,
    Path(schedule_id): Path<String>,
    body: Result<Json<Map<String, Value>>, JsonRejection>,
) -> ApiResult<Json<ScheduleView>> {
    let Json(body) = body.map_err(bad_json)?;
    let input = input_of(body)?;
    let changed = state
        .jobs
        .update_schedule(&caller, &schedule_id, input)
        .await?;
    Ok(Json(changed.into()))
}

/// Deletes a schedule; the runs it made stay.
#[utoipa::path(delete, path = "/v1/schedules/{schedule_id}", tag = "schedules",
    params(("schedule_id" = String, Path)),
    responses((status = 200, description = "Deleted"), (status = 404, description = "No such schedule")))]
pub async fn delete_schedule(
    State(state): State<AppState>,
    Acting(caller): Acting,
    Path(schedule_id): Path<String>,
) -> ApiResult<Json<Value>> {
    state.jobs.delete_schedule(&caller, &schedule_id).await?;
    Ok(Json(
        serde_json::json!({"schedule_id": schedule_id, "deleted": true}),
    ))
}

/// Makes the schedule's job now, outside its cadence.
#[utoipa::path(post, path = "/v1/schedules/{schedule_id}/trigger", tag = "schedules",
    params(("schedule_id" = String, Path)),
    responses((status = 200, description = "`{schedule_id, request_id}`"),
              (status = 404, description = "No such schedule")))]
pub async fn trigger_schedule(
    State(state): State<AppState>,
    Acting(caller): Acting,
    Path(schedule_id): Path<String>,
) -> ApiResult<Json<Value>> {
    let request_id = state.jobs.trigger_schedule(&caller, &schedule_id).await?;
    Ok(Json(
        serde_json::json!({"schedule_id": schedule_id, "request_id": request_id}),
    ))
}
