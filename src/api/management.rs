//! `/v1/management/*`: what an operator's console needs about skills and runs. The run routes
//! are the jobs routes' own implementation, reached by request id for jobs and temporary runs
//! alike; only the skill summaries, file trees and file previews are specific to this family.

use std::path::{Path as FsPath, PathBuf};

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse as _, Response};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::jobs::{Kind, bad_query};
use crate::api::error::{ApiError, ApiResult};
use crate::api::run_views::{RunFilePreview, RunFiles, RunState};
use crate::browse::{self, TreeEntry};
use crate::clock::Timestamp;
use crate::engines::Engine;
use crate::skill::{ExecutionMode, SkillEntry, SkillFormat};
use crate::state::AppState;
use crate::store::{RunCursor, RunFilter, RunStatus};

/// One skill in the console's list.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SkillSummary {
    pub id: String,
    /// How the skill is written (`null` for a degraded skill).
    pub format: Option<SkillFormat>,
    /// The manifest's name, else the id.
    pub name: String,
    pub version: Option<String>,
    pub engines: Vec<Engine>,
    pub unsupport_engine: Vec<Engine>,
    pub effective_engines: Vec<Engine>,
    /// The engine a job that names none runs on (`null` for a degraded skill).
    pub default_engine: Option<Engine>,
    pub execution_modes: Vec<ExecutionMode>,
    /// When the skill folder last changed (an install or an update).
    pub installed_at: Option<Timestamp>,
    /// `healthy`, or `degraded` when the folder is not a valid skill.
    pub health: &'static str,
    pub health_error: Option<String>,
    /// What is odd but tolerated (e.g. a hand-placed skill without a version, listed as 1.0.0).
    pub warnings: Vec<String>,
}

/// One skill with its schemas, entrypoint and files.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SkillDetail {
    #[serde(flatten)]
    pub summary: SkillSummary,
    /// Schema file paths by role (`input`, `parameter`, `output`).
    #[schema(value_type = Object)]
    pub schemas: Value,
    /// `runner.json`'s `entrypoint`.
    #[schema(value_type = Object)]
    pub entrypoints: Value,
    pub files: Vec<TreeEntry>,
}

/// `GET /v1/management/skills/{skill_id}/schemas`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SkillSchemas {
    pub skill_id: String,
    #[schema(value_type = Object)]
    pub input: Value,
    #[schema(value_type = Object)]
    pub parameter: Value,
    #[schema(value_type = Object)]
    pub output: Value,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SkillList {
    pub skills: Vec<SkillSummary>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RunList {
    pub runs: Vec<RunState>,
    /// Pass as `cursor` for the next page; `null` on the last.
    pub next_cursor: Option<String>,
}

pub(crate) fn folder_of(entry: &SkillEntry) -> &FsPath {
    match entry {
        SkillEntry::Healthy(m) => &m.path,
        SkillEntry::Degraded { path, .. } => path,
    }
}

pub(crate) fn summary(entry: &SkillEntry) -> SkillSummary {
    let installed_at = std::fs::metadata(folder_of(entry))
        .and_then(|m| m.modified())
        .ok()
        .map(Timestamp::from);
    match entry {
        SkillEntry::Healthy(m) => SkillSummary {
            id: m.id.clone(),
            format: Some(m.format),
            name: m.name.clone().unwrap_or_else(|| m.id.clone()),
            version: m.version.clone(),
            engines: m.engines.clone(),
            unsupport_engine: m.unsupport_engine.clone(),
            effective_engines: m.effective_engines.clone(),
            default_engine: Some(m.default_engine()),
            execution_modes: m.execution_modes.clone(),
            installed_at,
            health: "healthy",
            health_error: None,
            warnings: m.warnings.clone(),
        },
        SkillEntry::Degraded { id, error, .. } => SkillSummary {
            id: id.clone(),
            format: None,
            name: id.clone(),
            version: None,
            engines: Vec::new(),
            unsupport_engine: Vec::new(),
            effective_engines: Vec::new(),
            default_engine: None,
            execution_modes: Vec::new(),
            installed_at,
            health: "degraded",
            health_error: Some(error.clone()),
            warnings: Vec::new(),
        },
    }
}

/// Skill `skill_id`, looked for among other nodes' installs when this node lacks it.
pub(crate) async fn skill_entry(state: &AppState, skill_id: &str) -> ApiResult<SkillEntry> {
    state
        .installer
        .skill(skill_id)
        .await
        .ok_or_else(|| ApiError::not_found("Skill not found"))
}

/// Every skill folder with its health.
#[utoipa::path(get, path = "/v1/management/skills", tag = "management",
    responses((status = 200, body = SkillList)))]
pub async fn list_skills(State(state): State<AppState>) -> Json<SkillList> {
    Json(SkillList {
        skills: summaries(&state).await,
    })
}

/// Every skill's summary, in id order.
pub(crate) async fn summaries(state: &AppState) -> Vec<SkillSummary> {
    let snapshot = state.registry.snapshot().await;
    let entries: Vec<SkillEntry> = snapshot.skills.values().cloned().collect();
    tokio::task::spawn_blocking(move || entries.iter().map(summary).collect())
        .await
        .unwrap_or_default()
}

/// One skill: the summary plus schema paths, entrypoint and file tree.
#[utoipa::path(get, path = "/v1/management/skills/{skill_id}", tag = "management",
    params(("skill_id" = String, Path)),
    responses((status = 200, body = SkillDetail), (status = 404, description = "No such skill")))]
pub async fn get_skill(
    State(state): State<AppState>,
    Path(skill_id): Path<String>,
) -> ApiResult<Json<SkillDetail>> {
    let entry = skill_entry(&state, &skill_id).await?;
    let detail = tokio::task::spawn_blocking(move || -> ApiResult<SkillDetail> {
        let folder: PathBuf = folder_of(&entry).to_path_buf();
        let files =
            browse::tree(&folder, &[]).map_err(|_| ApiError::not_found("Skill path not found"))?;
        let (schemas, entrypoints) = match &entry {
            SkillEntry::Healthy(m) => (
                serde_json::to_value(&m.schemas).map_err(anyhow::Error::from)?,
                m.entrypoint.clone(),
            ),
            SkillEntry::Degraded { .. } => (json!({}), json!({})),
        };
        Ok(SkillDetail {
            summary: summary(&entry),
            schemas,
            entrypoints,
            files,
        })
    })
    .await
    .map_err(anyhow::Error::from)??;
    Ok(Json(detail))
}

/// The skill's three schemas, parsed.
#[utoipa::path(get, path = "/v1/management/skills/{skill_id}/schemas", tag = "management",
    params(("skill_id" = String, Path)),
    responses(
        (status = 200, body = SkillSchemas),
        (status = 404, description = "No such skill"),
        (status = 422, description = "The skill is degraded: its schemas cannot be read"),
    ))]
pub async fn get_skill_schemas(
    State(state): State<AppState>,
    Path(skill_id): Path<String>,
) -> ApiResult<Json<SkillSchemas>> {
    match skill_entry(&state, &skill_id).await? {
        SkillEntry::Healthy(m) => Ok(Json(SkillSchemas {
            skill_id,
            input: m.schema_docs.input.clone(),
            parameter: m.schema_docs.parameter.clone(),
            output: m.schema_docs.output.clone(),
        })),
        SkillEntry::Degraded { error, .. } => Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("Invalid schemas: {error}"),
        )),
    }
}

/// The run list's query. Empty values count as absent (what an HTML form sends for a filter
/// left unset).
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RunListQuery {
    /// 1 to 1000; default 200.
    pub limit: Option<u32>,
    /// Only runs in this state: `queued`, `running`, `waiting_user`, `waiting_auth`,
    /// `succeeded`, `failed` or `canceled`.
    pub status: Option<String>,
    /// Only runs of this skill.
    pub skill_id: Option<String>,
    /// Only runs on this engine.
    pub engine: Option<String>,
    /// Only requests created at or after this RFC 3339 time.
    pub since: Option<String>,
    /// The start of a request id or of a skill id.
    pub q: Option<String>,
    /// The previous page's `next_cursor`: the page after it.
    pub cursor: Option<String>,
    /// Admins only: one tenant's runs (other keys always see their own tenant's).
    pub tenant_id: Option<String>,
}

impl RunListQuery {
    /// The store's filter; a value it cannot take is a 422 naming the parameter.
    pub fn filter(&self, default_limit: u32) -> ApiResult<RunFilter> {
        fn given(value: &Option<String>) -> Option<&str> {
            value.as_deref().map(str::trim).filter(|v| !v.is_empty())
        }
        let refused = |name: &str, msg: String| {
            ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                json!([{"loc": ["query", name], "msg": msg, "type": "value_error"}]),
            )
        };
        let limit = self.limit.unwrap_or(default_limit);
        if !(1..=1000).contains(&limit) {
            return Err(refused(
                "limit",
                format!("limit must be between 1 and 1000, got {limit}"),
            ));
        }
        let status = given(&self.status)
            .map(|text| {
                RunStatus::ALL
                    .into_iter()
                    .find(|s| s.as_str() == text)
                    .ok_or_else(|| {
                        let known: Vec<&str> = RunStatus::ALL.iter().map(|s| s.as_str()).collect();
                        refused(
                            "status",
                            format!("unknown status '{text}'; one of {}", known.join(", ")),
                        )
                    })
            })
            .transpose()?;
        let engine = given(&self.engine)
            .map(|text| {
                Engine::parse(text).ok_or_else(|| {
                    let known: Vec<&str> = Engine::ALL.iter().map(|e| e.as_str()).collect();
                    refused(
                        "engine",
                        format!("unknown engine '{text}'; one of {}", known.join(", ")),
                    )
                })
            })
            .transpose()?;
        let since = given(&self.since)
            .map(|text| {
                Timestamp::parse(text).map_err(|e| {
                    refused(
                        "since",
                        format!(
                            "since must be an RFC 3339 time such as 2026-01-31T08:00:00Z ({e})"
                        ),
                    )
                })
            })
            .transpose()?;
        let after = given(&self.cursor)
            .map(|text| {
                RunCursor::decode(text).ok_or_else(|| {
                    refused(
                        "cursor",
                        "cursor is not one this list gave out: pass a page's next_cursor as it came".into(),
                    )
                })
            })
            .transpose()?;
        Ok(RunFilter {
            status,
            skill_id: given(&self.skill_id).map(str::to_owned),
            engine,
            since,
            search: given(&self.q).map(str::to_owned),
            tenant_id: given(&self.tenant_id).map(str::to_owned),
            after,
            limit,
        })
    }
}

/// The requests that have a run (jobs and temporary runs), newest first, filtered and paged:
/// `next_cursor` asks for the page after this one (`null` on the last).
#[utoipa::path(get, path = "/v1/management/runs", tag = "management",
    params(RunListQuery),
    responses((status = 200, body = RunList), (status = 422, description = "A parameter it cannot take; `detail` names it")))]
pub async fn list_runs(
    State(state): State<AppState>,
    Kind(scope): Kind,
    query: Result<Query<RunListQuery>, QueryRejection>,
) -> ApiResult<Json<RunList>> {
    let Query(query) = query.map_err(bad_query)?;
    let (rows, next) = state.jobs.list(&scope, &query.filter(200)?).await?;
    Ok(Json(RunList {
        runs: rows
            .into_iter()
            .map(|(request, run)| RunState::of(request, run))
            .collect(),
        next_cursor: next.map(|c| c.encode()),
    }))
}

/// One run's state: the fields of `GET /v1/jobs/{request_id}` plus `poll_logs`.
#[utoipa::path(get, path = "/v1/management/runs/{request_id}", tag = "management",
    params(("request_id" = String, Path)),
    responses((status = 200, body = RunState), (status = 404, description = "Unknown request or no run yet")))]
pub async fn get_run(
    State(state): State<AppState>,
    Kind(scope): Kind,
    Path(request_id): Path<String>,
) -> ApiResult<Json<RunState>> {
    let (request, run) = state.jobs.request_and_run(&scope, &request_id).await?;
    Ok(Json(RunState::of(request, run)))
}

/// The run folder's file tree (its home left out). Also `/v1/jobs/{request_id}/files` (and
/// under `/v1/temp-skill-runs`).
#[utoipa::path(get, path = "/v1/management/runs/{request_id}/files", tag = "management",
    params(("request_id" = String, Path)),
    responses((status = 200, body = RunFiles), (status = 404, description = "Unknown request or no run yet")))]
pub async fn run_files(
    State(state): State<AppState>,
    Kind(scope): Kind,
    Path(request_id): Path<String>,
) -> ApiResult<Json<RunFiles>> {
    let (run, entries) = state.jobs.run_files(&scope, &request_id).await?;
    Ok(Json(RunFiles::of(&request_id, run, entries)))
}

/// `?path=` of a file, and whether to download it rather than preview it.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct FileQuery {
    /// Path relative to the run folder, e.g. `logs/stdout.txt`.
    pub path: String,
    /// `true`: the file itself as an attachment (at most `SKILL_RUNNER_SERVE_MAX_MB`), not its
    /// preview.
    #[serde(default)]
    pub download: bool,
}

/// A preview of one file of the run folder: `text` (up to 256 KiB), `binary` or `too_large`;
/// with `download=true`, the file itself. Also `/v1/jobs/{request_id}/file` (and under
/// `/v1/temp-skill-runs`).
#[utoipa::path(get, path = "/v1/management/runs/{request_id}/file", tag = "management",
    params(("request_id" = String, Path), FileQuery),
    responses(
        (status = 200, body = RunFilePreview),
        (status = 400, description = "Blank, absolute, `..` or escaping path"),
        (status = 404, description = "Unknown request, no run yet, or no such plain file"),
        (status = 413, description = "A download larger than is served"),
        (status = 422, description = "path is missing"),
    ))]
pub async fn run_file(
    State(state): State<AppState>,
    Kind(scope): Kind,
    Path(request_id): Path<String>,
    query: Result<Query<FileQuery>, QueryRejection>,
) -> ApiResult<Response> {
    let Query(query) = query.map_err(|_| ApiError::missing_field("query", "path"))?;
    if query.download {
        let (file, name) = state
            .jobs
            .run_file_download(&scope, &request_id, &query.path)
            .await?;
        return super::jobs::send_file(file.into(), &name, "application/octet-stream").await;
    }
    let found = state
        .jobs
        .run_file(&scope, &request_id, &query.path)
        .await?;
    Ok(Json(RunFilePreview::of(&request_id, found)).into_response())
}

/// `GET /v1/management/runtime-options`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RuntimeOptionsInfo {
    /// What a run gets when its request does not say.
    #[schema(value_type = Object)]
    pub service_defaults: Value,
    /// Every `runtime_options` key a request may send (`*_wait_timeout_sec` too, as
    /// `session_timeout_sec`).
    pub options: Vec<&'static str>,
}

/// The run options a request may send, and the service's defaults for them.
#[utoipa::path(get, path = "/v1/management/runtime-options", tag = "management",
    responses((status = 200, body = RuntimeOptionsInfo, example = json!({
        "service_defaults": {"hard_timeout_seconds": 1200, "session_timeout_sec": 1200,
                             "execution_mode": "auto", "interactive_require_user_reply": true},
        "options": ["verbose", "execution_mode", "session_timeout_sec", "…"]}))))]
pub async fn runtime_options(State(state): State<AppState>) -> Json<RuntimeOptionsInfo> {
    let defaults = skill_runner_types::run_options::RuntimeOptions::default();
    Json(RuntimeOptionsInfo {
        service_defaults: json!({
            "hard_timeout_seconds": state.config.jobs.hard_timeout.as_secs(),
            "session_timeout_sec": defaults.session_timeout_sec,
            "execution_mode": defaults.execution_mode,
            "interactive_require_user_reply": defaults.interactive_require_user_reply,
        }),
        options: skill_runner_types::run_options::RuntimeOptions::names().collect(),
    })
}
