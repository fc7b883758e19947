//! `GET /v1/engines` and `GET /v1/engines/{engine}/models`.

use axum::Json;
use axum::extract::{Path, State};
use serde::Serialize;

use crate::engines::Engine;
use crate::engines::models::ModelList;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

/// An agent engine and the version of its CLI found on this server.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct EngineInfo {
    pub engine: Engine,
    /// `null` when the CLI is not installed (or does not say).
    pub cli_version_detected: Option<String>,
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
    for engine in Engine::ALL.into_iter().filter(|e| *e != Engine::Script) {
        list.push(EngineInfo {
            engine,
            cli_version_detected: engines.version(engine).await,
        });
    }
    Json(EnginesResponse { engines: list })
}

/// The models of an engine: the pinned snapshot for its CLI version (highest not above it,
/// else the highest with `fallback_reason`).
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
    state
        .jobs
        .engines()
        .models(engine)
        .await
        .map(Json)
        .ok_or_else(|| ApiError::not_found(format!("Engine '{engine}' has no model list")))
}
