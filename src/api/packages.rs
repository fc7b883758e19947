//! `POST /v1/skill-packages/install` and `GET /v1/skill-packages/{request_id}`.

use crate::api::auth::Acting;
use axum::Json;
use axum::extract::multipart::{Multipart, MultipartRejection};
use axum::extract::{Path, State};
use serde::Serialize;
use serde_json::json;
use skill_runner_core::tenants::Caller;
use uuid::Uuid;

use super::auth::Admin;
use super::upload::{FileField, save_file_fields};
use crate::api::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::store::{InstallRequest, TaskStatus};

/// Answer to an accepted upload.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct InstallCreated {
    pub request_id: String,
    /// Always `queued`: the install runs in the background.
    pub status: TaskStatus,
}

/// The multipart form of an install.
#[derive(utoipa::ToSchema)]
#[allow(dead_code, reason = "only describes the form in the OpenAPI document")]
pub struct PackageForm {
    /// The skill package: a zip with exactly one top-level folder named after the skill.
    #[schema(value_type = String, format = Binary)]
    file: Vec<u8>,
}

/// Uploads a skill package; it is validated and installed (or updated) in the background.
#[utoipa::path(post, path = "/v1/skill-packages/install", tag = "skill-packages",
    request_body(content = PackageForm, content_type = "multipart/form-data"),
    responses(
        (status = 200, description = "Accepted and queued", body = InstallCreated),
        (status = 400, description = "Empty upload or not a multipart body"),
        (status = 401, description = "Basic Auth is on and the request lacks it"),
        (status = 413, description = "Package larger than the configured limit"),
        (status = 422, description = "No `file` field"),
    ))]
pub async fn install_package(
    _: Admin,
    State(state): State<AppState>,
    Acting(caller): Acting,
    multipart: Result<Multipart, MultipartRejection>,
) -> ApiResult<Json<InstallCreated>> {
    let request_id = receive_package(&state, &caller, multipart).await?;
    Ok(Json(InstallCreated {
        request_id,
        status: TaskStatus::Queued,
    }))
}

/// Saves the uploaded package (the multipart `file` field) and queues its install (an audit
/// row of `caller`'s); returns the install request id. An upload refused here leaves nothing
/// behind.
pub async fn receive_package(
    state: &AppState,
    caller: &Caller,
    multipart: Result<Multipart, MultipartRejection>,
) -> ApiResult<String> {
    let mut multipart = multipart.map_err(|e| {
        ApiError::bad_request(format!(
            "expected a multipart/form-data body with a 'file' field: {e}"
        ))
    })?;
    // A full volume would cut the package short: refused before a byte is stored.
    state.jobs.has_room()?;
    let installer = &state.installer;
    let request_id = Uuid::new_v4().to_string();
    let field = FileField {
        name: "file",
        dest: installer.package_path(&request_id),
        max_bytes: installer.limits().max_compressed_bytes,
    };
    let saved = save_file_fields(&mut multipart, &[field])
        .await
        .map(|sizes| sizes[0]);
    let accepted = match saved {
        Ok(Some(0)) => Err(ApiError::bad_request(
            "Empty upload: the 'file' field holds no bytes",
        )),
        Ok(Some(_)) => installer.accept(&request_id).await.map_err(ApiError::from),
        Ok(None) => Err(ApiError::missing_field("body", "file")),
        Err(e) => Err(e),
    };
    if let Err(e) = accepted {
        installer.discard_upload(&request_id).await;
        return Err(e);
    }
    state
        .tenants
        .record(caller, "skill.install_requested", &request_id, json!({}))
        .await;
    Ok(request_id)
}

/// Where an install request stands.
#[utoipa::path(get, path = "/v1/skill-packages/{request_id}", tag = "skill-packages",
    params(("request_id" = String, Path, description = "Id returned by the install call")),
    responses(
        (status = 200, description = "The request", body = InstallRequest),
        (status = 401, description = "Basic Auth is on and the request lacks it"),
        (status = 404, description = "Unknown request id"),
    ))]
pub async fn install_status(
    _: Admin,
    State(state): State<AppState>,
    Path(request_id): Path<String>,
) -> ApiResult<Json<InstallRequest>> {
    state
        .installer
        .status(&request_id)
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::not_found("Install request not found"))
}
