//! `/v1/management/engines/{engine}/custom-providers`: the operator's model providers of an
//! engine ([`skill_runner_core::providers`]), in the reference's shapes and statuses, keys
//! write-only.

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use serde::Serialize;
use skill_runner_core::providers::{self, ProviderInput, ProviderView};
use skill_runner_types::engine::Engine;

use super::auth::Admin;
use super::jobs::bad_json;
use crate::api::error::{ApiError, ApiResult};
use crate::state::AppState;

/// `GET .../custom-providers`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ProviderList {
    /// As in the path.
    pub engine: String,
    /// Whether the engine takes providers.
    pub supported: bool,
    pub providers: Vec<ProviderView>,
}

/// The providers of an engine, by id (`supported: false` and none for an engine that takes
/// none, as the reference). Keys are never shown: `api_key_configured` says one is stored.
#[utoipa::path(get, path = "/v1/management/engines/{engine}/custom-providers", tag = "management",
    params(("engine" = String, Path)),
    responses(
        (status = 200, body = ProviderList, example = json!({"engine": "codex", "supported": true,
            "providers": [{"provider_id": "gateway", "base_url": "https://llm.example.com/v1",
                "models": ["gpt-5.5", "gpt-5.5-mini"], "supported_effort": {"gpt-5.5": ["low", "high"]},
                "default_model": "gpt-5.5", "api_key_configured": true,
                "updated_at": "2026-11-28T10:00:00.000000Z"}]})),
        (status = 401, description = "Basic Auth is on and the request lacks it"),
    ))]
pub async fn list(
    _: Admin,
    State(state): State<AppState>,
    Path(engine): Path<String>,
) -> ApiResult<Json<ProviderList>> {
    let known = Engine::parse(&engine).filter(|e| providers::supported(*e));
    let listed = match known {
        Some(e) => providers::list(&state.store, e).await?,
        None => Vec::new(),
    };
    Ok(Json(ProviderList {
        engine,
        supported: known.is_some(),
        providers: listed,
    }))
}

/// Creates or replaces a provider: `base_url` (http or https), `api_key` (write-only; left
/// out of an update, the stored one is kept), `models` (names, or `{id, supported_effort}`),
/// `default_model` (default: the first). Jobs name it with `provider_id` (or a model
/// `<provider_id>/<model>`) and reach its endpoint with its key.
#[utoipa::path(put, path = "/v1/management/engines/{engine}/custom-providers/{provider_id}",
    tag = "management",
    params(("engine" = String, Path), ("provider_id" = String, Path)),
    request_body(content = ProviderInput, example = json!({"provider_id": "gateway",
        "base_url": "https://llm.example.com/v1", "api_key": "sk-…",
        "models": ["gpt-5.5-mini", {"id": "gpt-5.5", "supported_effort": ["low", "high"]}],
        "default_model": "gpt-5.5"})),
    responses(
        (status = 200, body = ProviderView),
        (status = 400, description = "Not JSON, or `provider_id` of the path and the body differ"),
        (status = 401, description = "Basic Auth is on and the request lacks it"),
        (status = 422, description = "An engine that takes no providers, or a field refused (which, and why)"),
    ))]
pub async fn put(
    _: Admin,
    State(state): State<AppState>,
    Path((engine, provider_id)): Path<(String, String)>,
    body: Result<Json<ProviderInput>, JsonRejection>,
) -> ApiResult<Json<ProviderView>> {
    let Json(body) = body.map_err(bad_json)?;
    let (view, _) = providers::put(&state.store, &engine, &provider_id, body).await?;
    Ok(Json(view))
}

/// `DELETE .../custom-providers/{provider_id}`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ProviderDeleted {
    pub engine: String,
    pub provider_id: String,
    pub deleted: bool,
}

/// Removes a provider (`deleted: false` when there was none, as the reference). Jobs that
/// named it and have not started fail `PROVIDER_NOT_FOUND`.
#[utoipa::path(delete, path = "/v1/management/engines/{engine}/custom-providers/{provider_id}",
    tag = "management",
    params(("engine" = String, Path), ("provider_id" = String, Path)),
    responses(
        (status = 200, body = ProviderDeleted, example = json!({"engine": "codex",
            "provider_id": "gateway", "deleted": true})),
        (status = 401, description = "Basic Auth is on and the request lacks it"),
        (status = 422, description = "An engine that takes no providers"),
    ))]
pub async fn delete(
    _: Admin,
    State(state): State<AppState>,
    Path((engine, provider_id)): Path<(String, String)>,
) -> ApiResult<Json<ProviderDeleted>> {
    let (provider_id, deleted) = providers::delete(&state.store, &engine, &provider_id).await?;
    Ok(Json(ProviderDeleted {
        engine,
        provider_id,
        deleted,
    }))
}

/// `DELETE .../auth/credentials/{provider_id}`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CredentialDeleted {
    pub engine: String,
    pub provider_id: String,
    pub deleted: bool,
    /// `missing` once deleted.
    pub credential_state: &'static str,
}

/// Removes the credential of a provider: here a provider's key lives with the provider, so
/// this removes the provider (the reference clears a CodeBuddy provider's login file; other
/// engines answer 404 there, as here an engine that takes no providers).
#[utoipa::path(delete, path = "/v1/management/engines/{engine}/auth/credentials/{provider_id}",
    tag = "management",
    params(("engine" = String, Path), ("provider_id" = String, Path)),
    responses(
        (status = 200, body = CredentialDeleted, example = json!({"engine": "codex",
            "provider_id": "gateway", "deleted": true, "credential_state": "missing"})),
        (status = 401, description = "Basic Auth is on and the request lacks it"),
        (status = 404, description = "An engine that takes no providers"),
    ))]
pub async fn delete_credential(
    _: Admin,
    State(state): State<AppState>,
    Path((engine, provider_id)): Path<(String, String)>,
) -> ApiResult<Json<CredentialDeleted>> {
    if !Engine::parse(&engine).is_some_and(providers::supported) {
        return Err(ApiError::not_found(
            "Credential deletion is unsupported for this engine: it takes no providers",
        ));
    }
    let (provider_id, deleted) = providers::delete(&state.store, &engine, &provider_id).await?;
    Ok(Json(CredentialDeleted {
        engine,
        provider_id,
        deleted,
        credential_state: "missing",
    }))
}
