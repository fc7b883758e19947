//! `/v1/engines/*`: the engines, their CLIs (auth status, upgrades) and model snapshots; and
//! the engine summaries of `/v1/management/engines`. Auth status, upgrades, the manifest and
//! snapshot routes take Basic Auth when it is on.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};

use super::auth::Admin;
use super::jobs::{bad_json, to_completion};
use crate::api::error::{ApiError, ApiResult};
use crate::engines::cli::AuthStatus;
use crate::engines::models::{ManifestView, Model, ModelList};
use crate::engines::upgrades::{self, StartError};
use crate::engines::{Engine, SnapshotRefused};
use crate::state::AppState;
use crate::store::{TaskStatus, Upgrade};

/// An agent engine and the version of its CLI found on this server.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct EngineInfo {
    pub engine: Engine,
    /// `null` when the CLI is not installed (or does not say).
    pub cli_version_detected: Option<String>,
    /// The CLI is installed and logged in (an API key, or every login file); runs of an
    /// engine that is not wait in `waiting_auth` for a login.
    pub auth_ready: bool,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct EnginesResponse {
    pub engines: Vec<EngineInfo>,
}

/// The agent engines (every engine but `script`), with their detected CLI versions.
#[utoipa::path(get, path = "/v1/engines", tag = "engines",
    responses((status = 200, description = "Agent engines", body = EnginesResponse)))]
pub async fn list_engines(State(state): State<AppState>) -> Json<EnginesResponse> {
    let engines = state.jobs.engines();
    let mut list = Vec::new();
    // The active list: legacy engines only while allowed (the management list shows all).
    let active = Engine::ALL
        .into_iter()
        .filter(|e| *e != Engine::Script && engines.active(*e));
    for engine in active {
        list.push(EngineInfo {
            engine,
            cli_version_detected: engines.version(engine).await,
            auth_ready: engines.auth_status(engine).is_some_and(|a| a.auth_ready),
        });
    }
    Json(EnginesResponse { engines: list })
}

/// The models of an engine: the pinned snapshot for its CLI version (highest not above it,
/// else the highest with `fallback_reason`), then each model of the operator's providers as
/// `<provider_id>/<model>` with its `provider_id`.
#[utoipa::path(get, path = "/v1/engines/{engine}/models", tag = "engines",
    params(("engine" = String, Path, description = "Engine name")),
    responses(
        (status = 200, description = "The model list", body = ModelList),
        (status = 404, description = "Unknown engine, or one without models (`script`)"),
    ))]
pub async fn engine_models(
    State(state): State<AppState>,
    Path(engine): Path<String>,
) -> ApiResult<Json<ModelList>> {
    let engine = Engine::parse(&engine).ok_or_else(|| ApiError::not_found("Unknown engine"))?;
    let mut list = state
        .jobs
        .engines()
        .models(engine)
        .await
        .ok_or_else(|| ApiError::not_found(format!("Engine '{engine}' has no model list")))?;
    for provider in skill_runner_core::providers::all(&state.store, engine).await? {
        for model in provider.models {
            list.models.push(Model {
                id: format!("{}/{}", provider.id, model.id),
                display_name: model.id,
                deprecated: false,
                notes: format!(
                    "provider {} ({})",
                    provider.id,
                    provider.endpoint.base_url.as_deref().unwrap_or_default()
                ),
                supported_effort: model.supported_effort,
                provider_id: Some(provider.id.clone()),
            });
        }
    }
    Ok(Json(list))
}

/// `GET /v1/engines/auth-status`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AuthStatusResponse {
    /// By engine.
    pub engines: BTreeMap<String, AuthStatus>,
}

/// Where each engine's CLI comes from and whether it can authenticate (static checks: no model
/// is called). Login files are looked for in the agent home (`SKILL_RUNNER_AGENT_HOME`).
#[utoipa::path(get, path = "/v1/engines/auth-status", tag = "engines",
    responses(
        (status = 200, description = "Per engine", body = AuthStatusResponse),
        (status = 401, description = "Basic Auth is on and the request lacks it"),
    ))]
pub async fn auth_status(_: Admin, State(state): State<AppState>) -> Json<AuthStatusResponse> {
    let engines = state.jobs.engines();
    Json(AuthStatusResponse {
        engines: Engine::ALL
            .into_iter()
            .filter_map(|e| Some((e.to_string(), engines.auth_status(e)?)))
            .collect(),
    })
}

pub(crate) fn agent_engine(name: &str) -> ApiResult<Engine> {
    Engine::parse(name)
        .filter(|e| *e != Engine::Script)
        .ok_or_else(|| ApiError::not_found(format!("Unknown engine '{name}'")))
}

/// Every model snapshot of an engine (bundled and added) and the one its CLI resolves to.
#[utoipa::path(get, path = "/v1/engines/{engine}/models/manifest", tag = "engines",
    params(("engine" = String, Path, description = "Engine name")),
    responses(
        (status = 200, description = "The manifest", body = ManifestView),
        (status = 401, description = "Basic Auth is on and the request lacks it"),
        (status = 404, description = "Unknown engine, or `script`"),
    ))]
pub async fn models_manifest(
    _: Admin,
    State(state): State<AppState>,
    Path(engine): Path<String>,
) -> ApiResult<Json<ManifestView>> {
    let engine = agent_engine(&engine)?;
    state
        .jobs
        .engines()
        .manifest(engine)
        .await
        .map(Json)
        .ok_or_else(|| ApiError::not_found(format!("Engine '{engine}' has no model list")))
}

/// `POST /v1/engines/{engine}/models/snapshots`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewSnapshot {
    /// `display_name` defaults to the id.
    pub models: Vec<Model>,
}

/// Adds a model snapshot for the engine's detected CLI version. Add-only: a version that has
/// a snapshot (shipped or added) is never overwritten. Takes effect at once.
#[utoipa::path(post, path = "/v1/engines/{engine}/models/snapshots", tag = "engines",
    params(("engine" = String, Path, description = "Engine name")),
    request_body = NewSnapshot,
    responses(
        (status = 200, description = "Added; the manifest as it is now", body = ManifestView),
        (status = 401, description = "Basic Auth is on and the request lacks it"),
        (status = 404, description = "Unknown engine, or `script`"),
        (status = 409, description = "The detected CLI version has a snapshot, or no CLI version is detected"),
        (status = 422, description = "Body is not a list of valid models; `detail` says which field"),
    ))]
pub async fn add_snapshot(
    _: Admin,
    State(state): State<AppState>,
    Path(engine): Path<String>,
    body: Result<Json<NewSnapshot>, JsonRejection>,
) -> ApiResult<Json<ManifestView>> {
    let engine = agent_engine(&engine)?;
    let Json(body) = body.map_err(bad_json)?;
    to_completion(async move { add_models(&state, engine, body.models).await.map(Json) }).await
}

/// Adds a snapshot of `models` for the engine's detected CLI version (422 invalid, 409 taken).
pub(crate) async fn add_models(
    state: &AppState,
    engine: Engine,
    models: Vec<Model>,
) -> ApiResult<ManifestView> {
    match state
        .jobs
        .engines()
        .add_snapshot(&state.store, engine, models)
        .await
    {
        Ok(view) => Ok(view),
        Err(SnapshotRefused::Invalid(problem)) => {
            Err(ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, problem))
        }
        Err(SnapshotRefused::Conflict(problem)) => {
            Err(ApiError::new(StatusCode::CONFLICT, problem))
        }
        Err(SnapshotRefused::Store(e)) => Err(e.into()),
    }
}

/// `POST /v1/engines/upgrades`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewUpgrade {
    /// `single` (one engine) or `all` (every agent engine, `engine` left out).
    pub mode: String,
    pub engine: Option<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct UpgradeCreated {
    pub request_id: String,
    /// Always `queued`.
    pub status: TaskStatus,
}

/// Installs the engines' CLIs (`npm install` of each package into the managed prefix, one
/// engine after another) in the background; poll `GET /v1/engines/upgrades/{request_id}`.
#[utoipa::path(post, path = "/v1/engines/upgrades", tag = "engines", request_body = NewUpgrade,
    responses(
        (status = 200, description = "Queued", body = UpgradeCreated),
        (status = 401, description = "Basic Auth is on and the request lacks it"),
        (status = 409, description = "An upgrade is already queued or running"),
        (status = 422, description = "Invalid mode or engine; `detail` names the field"),
    ))]
pub async fn create_upgrade(
    _: Admin,
    State(state): State<AppState>,
    body: Result<Json<NewUpgrade>, JsonRejection>,
) -> ApiResult<Json<UpgradeCreated>> {
    let Json(body) = body.map_err(bad_json)?;
    let scope = upgrades::scope(&body.mode, body.engine.as_deref())
        .map_err(|(field, msg)| ApiError::invalid_field(field, format!("{field} {msg}")))?;
    to_completion(async move {
        let upgrade = start_upgrade(&state, scope).await?;
        Ok::<_, ApiError>(Json(UpgradeCreated {
            request_id: upgrade.request_id,
            status: upgrade.status,
        }))
    })
    .await
}

/// Starts an upgrade (409 while another is queued or running).
pub(crate) async fn start_upgrade(state: &AppState, scope: upgrades::Scope) -> ApiResult<Upgrade> {
    match state.upgrades.start(scope).await {
        Ok(upgrade) => Ok(upgrade),
        Err(e @ StartError::Busy) => Err(ApiError::new(StatusCode::CONFLICT, e.to_string())),
        Err(StartError::Store(e)) => Err(e.into()),
    }
}

/// An upgrade with each engine's status, npm output and error.
#[utoipa::path(get, path = "/v1/engines/upgrades/{request_id}", tag = "engines",
    params(("request_id" = String, Path, description = "From the create response")),
    responses(
        (status = 200, description = "The upgrade", body = Upgrade),
        (status = 401, description = "Basic Auth is on and the request lacks it"),
        (status = 404, description = "Unknown request"),
    ))]
pub async fn upgrade_status(
    _: Admin,
    State(state): State<AppState>,
    Path(request_id): Path<String>,
) -> ApiResult<Json<Upgrade>> {
    state
        .store
        .upgrade(&request_id)
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::not_found("Upgrade request not found"))
}

/// One engine in the console's list.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct EngineSummary {
    pub engine: Engine,
    /// `null` when the CLI is not installed.
    pub cli_version: Option<String>,
    /// The npm spec an upgrade installs: the version this build is tested with
    /// (`@openai/codex@0.169.0`) unless `SKILL_RUNNER_<ENGINE>_NPM_PACKAGE` names another;
    /// `null` when neither exists (iFlow is not on the npm registry).
    pub upgrade_target: Option<String>,
    pub auth_ready: bool,
    /// How turns are confined: `landlock` (the service's own sandbox, which replaces the
    /// CLIs' own, switched off because they cannot prompt headless), `unavailable` (the kernel
    /// lacks Landlock under `SKILL_RUNNER_SANDBOX=auto`) or `off`.
    pub sandbox_status: &'static str,
    /// Which mechanism holds each barrier around a turn on this host.
    pub barriers: crate::process::sandbox::Barriers,
    pub models_count: usize,
    /// A legacy engine (`gemini`, `iflow`, as the reference marks them).
    pub legacy: bool,
    /// Whether it takes new runs (a legacy engine only while `SKILL_RUNNER_LEGACY_ENGINES`
    /// names it).
    pub active: bool,
}

impl EngineSummary {
    /// Whether the installed CLI is not the version an upgrade installs (an operator's
    /// package, which names no version, always differs).
    pub fn target_differs(&self) -> bool {
        match (&self.cli_version, &self.upgrade_target) {
            (Some(version), Some(target)) => !target.ends_with(&format!("@{version}")),
            _ => false,
        }
    }
}

/// One engine with its models and its latest upgrade.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct EngineDetail {
    #[serde(flatten)]
    pub summary: EngineSummary,
    pub models: Vec<Model>,
    /// This engine's status in the latest upgrade that covered it; `null` if none did.
    pub upgrade_status: Option<TaskStatus>,
    /// That upgrade's error for this engine, if it failed.
    pub last_error: Option<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct EngineList {
    pub engines: Vec<EngineSummary>,
}

pub(crate) async fn summary(state: &AppState, engine: Engine) -> (EngineSummary, Vec<Model>) {
    let engines = state.jobs.engines();
    let models = engines
        .models(engine)
        .await
        .map(|l| l.models)
        .unwrap_or_default();
    let summary = EngineSummary {
        engine,
        cli_version: engines.version(engine).await,
        // An operator's package may be a URL with a credential in it.
        upgrade_target: engines
            .cli(engine)
            .and_then(|cli| cli.install_spec(engines.config(), engine))
            .map(|spec| crate::config::effective::without_credentials(&spec)),
        auth_ready: engines.auth_status(engine).is_some_and(|a| a.auth_ready),
        sandbox_status: state.jobs.sandbox().as_str(),
        barriers: crate::process::sandbox::Barriers {
            secret: match engines.holds_key(engine) {
                true => "egress",
                false => "lent",
            },
            ..state.jobs.barriers()
        },
        legacy: engine.is_legacy(),
        active: engines.active(engine),
        models_count: models.len(),
    };
    (summary, models)
}

/// The agent engines for an operator's console.
#[utoipa::path(get, path = "/v1/management/engines", tag = "management",
    responses((status = 200, description = "Agent engines", body = EngineList)))]
pub async fn management_engines(State(state): State<AppState>) -> Json<EngineList> {
    Json(EngineList {
        engines: summaries(&state).await,
    })
}

/// The summary of every agent engine (the management list and the console's table).
pub async fn summaries(state: &AppState) -> Vec<EngineSummary> {
    let mut engines = Vec::new();
    for engine in Engine::ALL.into_iter().filter(|e| *e != Engine::Script) {
        engines.push(summary(state, engine).await.0);
    }
    engines
}

/// One agent engine for an operator's console.
#[utoipa::path(get, path = "/v1/management/engines/{engine}", tag = "management",
    params(("engine" = String, Path, description = "Engine name")),
    responses(
        (status = 200, description = "The engine", body = EngineDetail),
        (status = 404, description = "Unknown engine, or `script`"),
    ))]
pub async fn management_engine(
    State(state): State<AppState>,
    Path(engine): Path<String>,
) -> ApiResult<Json<EngineDetail>> {
    let engine = agent_engine(&engine)?;
    let (summary, models) = summary(&state, engine).await;
    let latest = state.store.latest_upgrade_of(engine.as_str()).await?;
    let result = latest.and_then(|mut u| u.results.remove(engine.as_str()));
    Ok(Json(EngineDetail {
        summary,
        models,
        upgrade_status: result.as_ref().map(|r| r.status),
        last_error: result.and_then(|r| r.error),
    }))
}
