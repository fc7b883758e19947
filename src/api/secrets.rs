//! `/v1/management/secrets`: the tenants' secrets, bound to hosts, which a skill's turns get as
//! placeholders (`runner.json` `"secrets"`) and the egress puts in on requests to those hosts;
//! `/v1/management/egress/ca.pem`: the certificate of the CA the egress shows those hosts'
//! certificates under. A value is write-only: a listing shows its last 4 characters.
//!
//! An operator manages its own tenant's secrets; an admin any tenant's (`tenant_id`). Another
//! tenant's secret answers 404, as a name that does not exist.

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::header;
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};
use skill_runner_core::secrets::SecretInput;
use skill_runner_core::tenants::Caller;

use super::auth::Acting;
use super::jobs::{bad_json, bad_query};
use crate::api::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::store::StoredSecret;

/// `GET /v1/management/secrets`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SecretList {
    pub secrets: Vec<StoredSecret>,
}

/// Whose secrets a request names.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub struct SecretQuery {
    /// One tenant's (an admin's choice; everyone else: their own, the default).
    pub tenant_id: Option<String>,
}

/// The tenant a caller acts for: its own, or (an admin) the one it names, which must exist.
pub(crate) async fn tenant_of(
    state: &AppState,
    caller: &Caller,
    asked: Option<&str>,
) -> ApiResult<String> {
    match asked {
        None => Ok(caller.tenant_id.to_string()),
        Some(tenant) => Ok(state.tenants.tenant(caller, tenant).await?.tenant_id),
    }
}

/// Creates a secret. The value is never returned.
#[utoipa::path(post, path = "/v1/management/secrets", tag = "secrets",
    request_body(content = SecretInput, example = json!({"name": "GITHUB_TOKEN",
        "value": "ghp_…", "hosts": ["api.github.com"], "header": "Authorization",
        "prefix": "Bearer "})),
    responses(
        (status = 200, body = StoredSecret),
        (status = 400, description = "A field is not valid (which one, why, what to do)"),
        (status = 404, description = "No such tenant"),
        (status = 409, description = "The tenant has a secret of that name"),
        (status = 422, description = "Not JSON of this shape"),
    ))]
pub async fn create_secret(
    State(state): State<AppState>,
    Acting(caller): Acting,
    body: Result<Json<SecretInput>, JsonRejection>,
) -> ApiResult<Json<StoredSecret>> {
    let Json(body) = body.map_err(bad_json)?;
    let tenant = tenant_of(&state, &caller, body.tenant_id.as_deref()).await?;
    let made = state.jobs.tenant_secrets().create(&tenant, body).await?;
    audit(&state, &caller, "secret.created", &made).await;
    Ok(Json(made))
}

/// Records a change of `secret` in the audit log: its name, tenant and hosts, never its value.
pub(crate) async fn audit(state: &AppState, caller: &Caller, action: &str, secret: &StoredSecret) {
    let target = format!("{}/{}", secret.tenant_id, secret.name);
    let detail = serde_json::json!({"hosts": secret.hosts, "header": secret.header,
                                    "last4": secret.last4});
    state.tenants.record(caller, action, &target, detail).await;
}

/// The secrets: names, hosts, header and the value's last 4 characters, never the value.
#[utoipa::path(get, path = "/v1/management/secrets", tag = "secrets",
    params(SecretQuery), responses((status = 200, body = SecretList)))]
pub async fn list_secrets(
    State(state): State<AppState>,
    Acting(caller): Acting,
    query: Result<Query<SecretQuery>, QueryRejection>,
) -> ApiResult<Json<SecretList>> {
    let Query(query) = query.map_err(bad_query)?;
    let tenant = match (&query.tenant_id, caller.visible_tenant()) {
        (None, None) => None,
        (asked, _) => Some(tenant_of(&state, &caller, asked.as_deref()).await?),
    };
    let secrets = state.jobs.tenant_secrets().list(tenant.as_deref()).await?;
    Ok(Json(SecretList { secrets }))
}

/// Rotates a secret: a new value (and binding); a running turn's next request carries it.
#[utoipa::path(put, path = "/v1/management/secrets/{name}", tag = "secrets",
    params(("name" = String, Path), SecretQuery),
    request_body(content = SecretInput, example = json!({"value": "ghp_…",
        "hosts": ["api.github.com"]})),
    responses(
        (status = 200, body = StoredSecret),
        (status = 400, description = "A field is not valid"),
        (status = 404, description = "No such secret"),
        (status = 422, description = "Not JSON of this shape"),
    ))]
pub async fn rotate_secret(
    State(state): State<AppState>,
    Acting(caller): Acting,
    Path(name): Path<String>,
    query: Result<Query<SecretQuery>, QueryRejection>,
    body: Result<Json<SecretInput>, JsonRejection>,
) -> ApiResult<Json<StoredSecret>> {
    let Query(query) = query.map_err(bad_query)?;
    let Json(body) = body.map_err(bad_json)?;
    let asked = query.tenant_id.as_deref().or(body.tenant_id.as_deref());
    let tenant = tenant_of(&state, &caller, asked).await?;
    let rotated = state
        .jobs
        .tenant_secrets()
        .rotate(&tenant, &name, body)
        .await?;
    audit(&state, &caller, "secret.rotated", &rotated).await;
    Ok(Json(rotated))
}

/// Deletes a secret; a turn that holds its placeholder gets it sent on unchanged.
#[utoipa::path(delete, path = "/v1/management/secrets/{name}", tag = "secrets",
    params(("name" = String, Path), SecretQuery),
    responses((status = 200, description = "Deleted"), (status = 404, description = "No such secret")))]
pub async fn delete_secret(
    State(state): State<AppState>,
    Acting(caller): Acting,
    Path(name): Path<String>,
    query: Result<Query<SecretQuery>, QueryRejection>,
) -> ApiResult<Json<serde_json::Value>> {
    let Query(query) = query.map_err(bad_query)?;
    let tenant = tenant_of(&state, &caller, query.tenant_id.as_deref()).await?;
    delete_audited(&state, &caller, &tenant, &name).await?;
    Ok(Json(serde_json::json!({"deleted": name})))
}

/// Deletes `tenant`'s secret `name` and records it in the audit log.
pub(crate) async fn delete_audited(
    state: &AppState,
    caller: &Caller,
    tenant: &str,
    name: &str,
) -> ApiResult<()> {
    state.jobs.tenant_secrets().delete(tenant, name).await?;
    let target = format!("{tenant}/{name}");
    state
        .tenants
        .record(caller, "secret.deleted", &target, serde_json::json!({}))
        .await;
    Ok(())
}

/// The certificate (PEM) of the CA the egress signs the certificates of hosts a secret is
/// bound to with; turns trust it already.
#[utoipa::path(get, path = "/v1/management/egress/ca.pem", tag = "secrets",
    responses((status = 200, content_type = "application/x-pem-file"),
              (status = 404, description = "Turns are not confined: the egress has no CA")))]
pub async fn egress_ca(State(state): State<AppState>) -> ApiResult<impl IntoResponse> {
    let pem = state.jobs.egress_ca().ok_or_else(|| {
        ApiError::not_found(
            "Turns are not confined (SKILL_RUNNER_SANDBOX=off): the egress has no CA",
        )
    })?;
    Ok(([(header::CONTENT_TYPE, "application/x-pem-file")], pem))
}
