//! `GET /v1/skills` and `GET /v1/skills/{skill_id}`.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::api::error::ApiResult;
use crate::skill::SkillManifest;
use crate::state::AppState;

/// Every folder of the skills dir: valid skills with `health: "healthy"` and their manifest
/// (including `effective_engines`), broken ones with `health: "degraded"` and `health_error`.
#[utoipa::path(get, path = "/v1/skills", tag = "skills",
    responses((status = 200, description = "Installed skills", body = [SkillManifest])))]
pub async fn list_skills(State(state): State<AppState>) -> Response {
    let snapshot = state.registry.snapshot().await;
    (
        [(header::CONTENT_TYPE, "application/json")],
        snapshot.list_json.clone(),
    )
        .into_response()
}

/// One skill by id.
#[utoipa::path(get, path = "/v1/skills/{skill_id}", tag = "skills",
    params(("skill_id" = String, Path, description = "Skill id (its folder name)")),
    responses(
        (status = 200, description = "The skill", body = SkillManifest),
        (status = 404, description = "No such skill"),
    ))]
pub async fn get_skill(
    State(state): State<AppState>,
    Path(skill_id): Path<String>,
) -> ApiResult<Json<Value>> {
    let entry = super::management::skill_entry(&state, &skill_id).await?;
    Ok(Json(entry.to_json()))
}
