//! The operator's system routes under `/v1/management/system`: the settings that may change
//! while the service runs, the query of its latest log records, and the reset of its data.
//! All are administrative (Basic Auth, when on).

use crate::api::auth::Acting;
use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Query, State};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use skill_runner_core::tenants::Caller;

use super::auth::Admin;
use super::jobs::{bad_json, bad_query, to_completion};
use crate::api::error::{ApiError, ApiResult};
use crate::clock::Timestamp;
use crate::log_book;
use crate::state::AppState;

/// What a reset must be confirmed with (the reference's text).
pub const RESET_CONFIRMATION: &str = "CONFIRM RESET";

/// `GET` and `PUT /v1/management/system/settings`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SystemSettings {
    /// `{level, server_level, runtime_level}`: the log filter in force (`LOG_LEVEL` at start);
    /// `server_level` and `runtime_level` are the reference's names of the same one level.
    #[schema(value_type = Object)]
    pub logging: Value,
    /// What `POST .../reset-data` must be sent as `confirmation`.
    pub reset_confirmation_text: &'static str,
    /// This service keeps no logs of engine login sessions.
    pub engine_auth_session_log_persistence_enabled: bool,
    /// What the service runs with, for the operator's eyes; set by its environment at start.
    #[schema(value_type = Object)]
    pub fixed: Value,
}

/// The settings in force (`GET .../system/settings`).
pub fn settings(state: &AppState) -> SystemSettings {
    let filter = crate::telemetry::log_filter();
    let level = shown_level(&filter);
    let limits = &state.config.jobs;
    SystemSettings {
        logging: json!({"level": filter, "server_level": level, "runtime_level": level}),
        reset_confirmation_text: RESET_CONFIRMATION,
        engine_auth_session_log_persistence_enabled: false,
        fixed: json!({
            "max_concurrent": limits.max_concurrent,
            "max_queue_size": limits.max_queue_size,
            "hard_timeout_seconds": limits.hard_timeout.as_secs(),
            "retention_seconds": limits.retention.as_secs(),
            "store": state.store.kind(),
            "node_id": state.config.node_id,
        }),
    }
}

/// A plain level as the reference spells it (`WARNING`); any other filter as it is.
fn shown_level(filter: &str) -> String {
    match filter.trim().to_ascii_lowercase().as_str() {
        "warn" => "WARNING".to_owned(),
        level @ ("trace" | "debug" | "info" | "error") => level.to_ascii_uppercase(),
        _ => filter.to_owned(),
    }
}

/// The settings in force.
#[utoipa::path(get, path = "/v1/management/system/settings", tag = "management",
    responses((status = 200, body = SystemSettings, example = json!({
        "logging": {"level": "info", "server_level": "INFO", "runtime_level": "INFO"},
        "reset_confirmation_text": "CONFIRM RESET",
        "engine_auth_session_log_persistence_enabled": false,
        "fixed": {"max_concurrent": 8, "max_queue_size": 128, "hard_timeout_seconds": 1200,
                  "retention_seconds": 604800,
                  "store": "sqlite", "node_id": "node-a"}}))))]
pub async fn get_settings(_: Admin, State(state): State<AppState>) -> Json<SystemSettings> {
    Json(settings(&state))
}

/// `PUT /v1/management/system/settings` body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct SettingsUpdate {
    /// `{level}` (a level or a `tracing` filter such as `info,sqlx=warn`), or the reference's
    /// `{server_level, runtime_level}` (`DEBUG`, `INFO`, `WARNING`, `ERROR`, `CRITICAL`).
    #[schema(value_type = Object)]
    pub logging: Value,
}

/// Changes the log level while the service runs; the next start takes `LOG_LEVEL` again.
/// Nothing else may change at run time (`fixed` shows what the environment set).
#[utoipa::path(put, path = "/v1/management/system/settings", tag = "management",
    request_body(content = SettingsUpdate, example = json!({"logging": {"server_level": "WARNING"}})),
    responses(
        (status = 200, body = SystemSettings),
        (status = 400, description = "A level that is not one, or two that differ"),
    ))]
pub async fn put_settings(
    _: Admin,
    State(state): State<AppState>,
    Acting(caller): Acting,
    body: Result<Json<SettingsUpdate>, JsonRejection>,
) -> ApiResult<Json<SystemSettings>> {
    let Json(body) = body.map_err(bad_json)?;
    change_log_level(&state, &caller, &body.logging)
        .await
        .map(Json)
}

/// Sets the log level `logging` names (`{level}` or `{server_level, runtime_level}`), as
/// `caller` asked; the settings then in force.
pub async fn change_log_level(
    state: &AppState,
    caller: &Caller,
    logging: &Value,
) -> ApiResult<SystemSettings> {
    let asked: Vec<(&str, String)> = ["level", "server_level", "runtime_level"]
        .into_iter()
        .filter_map(|key| Some((key, logging.get(key)?.as_str()?.to_owned())))
        .collect();
    let Some((_, first)) = asked.first() else {
        return Err(ApiError::bad_request(
            "logging must set level (or server_level / runtime_level)",
        ));
    };
    let filter = filter_of(first)?;
    if let Some((key, _)) = asked
        .iter()
        .find(|(_, v)| filter_of(v).ok() != Some(filter.clone()))
    {
        return Err(ApiError::bad_request(format!(
            "logging.{key} differs from the other level given: this service has one log level"
        )));
    }
    crate::telemetry::set_log_filter(&filter)
        .map_err(|e| ApiError::bad_request(format!("logging.level '{first}': {e}")))?;
    tracing::info!(filter, "log filter changed");
    state
        .tenants
        .record(
            caller,
            "settings.changed",
            "logging.level",
            serde_json::json!({"filter": filter}),
        )
        .await;
    Ok(settings(state))
}

/// A level as the reference names it, or a filter, as a `tracing` filter.
fn filter_of(level: &str) -> ApiResult<String> {
    let filter = match level.trim().to_ascii_uppercase().as_str() {
        "WARNING" | "WARN" => "warn".to_owned(),
        "CRITICAL" | "ERROR" => "error".to_owned(),
        l @ ("TRACE" | "DEBUG" | "INFO") => l.to_ascii_lowercase(),
        // A bare word would read as a target to log everything of: only real filters pass.
        _ if !level.contains(['=', ',']) => {
            return Err(ApiError::bad_request(format!(
                "'{level}' is not a log level (DEBUG, INFO, WARNING, ERROR, CRITICAL) or a \
                 filter such as 'info,sqlx=warn'"
            )));
        }
        _ => level.trim().to_owned(),
    };
    tracing_subscriber::EnvFilter::try_new(&filter)
        .map(|_| filter)
        .map_err(|e| ApiError::bad_request(format!("'{level}' is not a log level or filter: {e}")))
}

/// `GET /v1/management/system/logs/query` parameters.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LogQuery {
    /// `system` (the default) or `bootstrap` (records logged before the service served).
    pub source: Option<String>,
    /// Matches to skip (the `next_cursor` of the page before).
    #[serde(default)]
    pub cursor: usize,
    /// Records per page, 1 to 1000 (default 200).
    pub limit: Option<usize>,
    /// Text the record's line holds (any case).
    pub q: Option<String>,
    /// Exactly this level: `DEBUG`, `INFO`, `WARNING`, `ERROR` (`CRITICAL` reads as `ERROR`).
    pub level: Option<String>,
    #[param(value_type = Option<String>, format = DateTime)]
    pub from_ts: Option<Timestamp>,
    #[param(value_type = Option<String>, format = DateTime)]
    pub to_ts: Option<Timestamp>,
    /// Only the records of this run (logged in its turn, or naming it).
    pub run_id: Option<String>,
    /// Only the records of this request.
    pub request_id: Option<String>,
}

/// One page of the query.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct LogPage {
    pub source: String,
    /// `{ts, level, message, raw, source, file, line_no, target, fields}`: `line_no` is the
    /// record's number since the service started; `file` is `null` (the records are kept in
    /// memory).
    #[schema(value_type = Vec<Object>)]
    pub items: Vec<Value>,
    /// Where the next page starts; `null` on the last.
    pub next_cursor: Option<usize>,
    pub total_matched: usize,
}

/// This node's latest log records (the last 10,000 its filter let through), filtered by
/// source, level, time, text and run or request, oldest first.
#[utoipa::path(get, path = "/v1/management/system/logs/query", tag = "management",
    params(LogQuery),
    responses(
        (status = 200, body = LogPage, example = json!({"source": "system", "items": [{
            "ts": "2026-11-26T10:00:00.000000Z", "level": "INFO",
            "message": "run moved", "raw": "2026-11-26T10:00:00.000000Z INFO skill_runner_core::jobs: run moved run_id=9a2e… status=succeeded",
            "source": "system", "file": null, "line_no": 42, "target": "skill_runner_core::jobs",
            "fields": {"run_id": "9a2e…", "status": "succeeded"}}],
            "next_cursor": null, "total_matched": 1})),
        (status = 400, description = "Unknown source or level, or limit out of range"),
        (status = 422, description = "A parameter of the wrong type"),
    ))]
pub async fn query_logs(
    _: Admin,
    query: Result<Query<LogQuery>, QueryRejection>,
) -> ApiResult<Json<LogPage>> {
    let Query(query) = query.map_err(bad_query)?;
    log_page(query).map(Json)
}

/// The page of this node's log records `query` asks for.
pub fn log_page(query: LogQuery) -> ApiResult<LogPage> {
    let source = query
        .source
        .as_deref()
        .unwrap_or("system")
        .trim()
        .to_ascii_lowercase();
    let bootstrap = match source.as_str() {
        "system" => false,
        "bootstrap" => true,
        _ => {
            return Err(ApiError::bad_request(
                "source must be one of: system, bootstrap",
            ));
        }
    };
    let level = match query
        .level
        .as_deref()
        .map(|l| l.trim().to_ascii_uppercase())
    {
        None => None,
        Some(l) if l.is_empty() => None,
        Some(l) => Some(match l.as_str() {
            "TRACE" => tracing::Level::TRACE,
            "DEBUG" => tracing::Level::DEBUG,
            "INFO" => tracing::Level::INFO,
            "WARNING" | "WARN" => tracing::Level::WARN,
            "ERROR" | "CRITICAL" => tracing::Level::ERROR,
            _ => {
                return Err(ApiError::bad_request(
                    "level must be one of: DEBUG, INFO, WARNING, ERROR, CRITICAL",
                ));
            }
        }),
    };
    let limit = query.limit.unwrap_or(200);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::bad_request("limit must be from 1 to 1000"));
    }
    let mut fields = Vec::new();
    fields.extend(query.run_id.map(|id| ("run_id", id)));
    fields.extend(query.request_id.map(|id| ("request_id", id)));
    let asked = log_book::Query {
        bootstrap,
        level,
        text: query.q.filter(|q| !q.is_empty()),
        from: query.from_ts,
        to: query.to_ts,
        fields,
    };
    let (records, total) = log_book::book().query(&asked, query.cursor, limit);
    let shown = records.len();
    let items = records
        .into_iter()
        .map(|r| {
            json!({
                "ts": r.ts,
                "level": match r.level {
                    tracing::Level::WARN => "WARNING".to_owned(),
                    other => other.to_string(),
                },
                "message": r.message,
                "raw": r.raw(),
                "source": source,
                "file": null,
                "line_no": r.seq,
                "target": r.target,
                "fields": r.fields,
            })
        })
        .collect();
    let next = query.cursor + shown;
    Ok(LogPage {
        source,
        items,
        next_cursor: (next < total).then_some(next),
        total_matched: total,
    })
}

/// `POST /v1/management/system/reset-data` body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct ResetRequest {
    /// Must be `CONFIRM RESET`.
    pub confirmation: String,
    /// Also forget the kept log records.
    #[serde(default)]
    pub include_logs: bool,
    /// Count what would be deleted; delete nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// Accepted for the reference's clients: the engine catalogue (model snapshots) and login
    /// sessions are configuration here, never reset.
    #[serde(default)]
    pub include_engine_catalog: bool,
    #[serde(default)]
    pub include_engine_auth_sessions: bool,
}

/// What a reset deleted (or, with `dry_run`, would delete).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ResetDone {
    pub dry_run: bool,
    pub runs_deleted: u64,
    pub requests_deleted: u64,
    pub cache_entries_deleted: u64,
    pub log_records_deleted: usize,
    pub engine_catalog_reset: bool,
    pub engine_auth_sessions_deleted: u64,
}

/// Deletes every run with its folder, request and cache entry, once nothing is active.
/// Refused while a run is queued, running or waiting for a reply, or while another reset runs
/// (409), and without the confirmation text (400). Installed skills, engines and their logins
/// stay.
#[utoipa::path(post, path = "/v1/management/system/reset-data", tag = "management",
    request_body(content = ResetRequest, example = json!({"confirmation": "CONFIRM RESET",
        "include_logs": true, "dry_run": true})),
    responses(
        (status = 200, body = ResetDone),
        (status = 400, description = "The confirmation is not `CONFIRM RESET`"),
        (status = 409, description = "Runs are active, or another reset is under way"),
    ))]
pub async fn reset_data(
    _: Admin,
    State(state): State<AppState>,
    Acting(caller): Acting,
    body: Result<Json<ResetRequest>, JsonRejection>,
) -> ApiResult<Json<ResetDone>> {
    let Json(body) = body.map_err(bad_json)?;
    reset(&state, &caller, body).await.map(Json)
}

/// Deletes every run as `caller` asked (see [`reset_data`]), or counts them (`dry_run`).
pub async fn reset(state: &AppState, caller: &Caller, body: ResetRequest) -> ApiResult<ResetDone> {
    if body.confirmation.trim() != RESET_CONFIRMATION {
        return Err(ApiError::bad_request(format!(
            "confirmation must equal '{RESET_CONFIRMATION}'"
        )));
    }
    let dry_run = body.dry_run;
    let jobs = state.jobs.clone();
    let counts = to_completion(async move { jobs.reset_data(dry_run).await }).await?;
    if !dry_run {
        state
            .tenants
            .record(
                caller,
                "data.reset",
                "runs",
                serde_json::json!({"runs_deleted": counts.runs_deleted}),
            )
            .await;
    }
    let log_records_deleted = match (body.include_logs, dry_run) {
        (false, _) => 0,
        (true, true) => log_book::book().count(),
        (true, false) => log_book::book().clear(),
    };
    tracing::warn!(?counts, dry_run, log_records_deleted, "data reset");
    Ok(ResetDone {
        dry_run,
        runs_deleted: counts.runs_deleted,
        requests_deleted: counts.requests_deleted,
        cache_entries_deleted: counts.cache_entries_deleted,
        log_records_deleted,
        engine_catalog_reset: false,
        engine_auth_sessions_deleted: 0,
    })
}
