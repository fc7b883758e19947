//! `/v1/management/tenants`, `/v1/management/keys` and `/v1/management/audit`: tenants and
//! their quotas (admins), API keys (admins, and operators for their own tenant's keys), the
//! audit log (admins). What a tenant and a key are: [`skill_runner_core::tenants`].

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use serde::{Deserialize, Serialize};
use serde_json::json;
use skill_runner_core::tenants::Role;
use skill_runner_core::tenants::manage::IssuedKey;
use skill_runner_types::clock::Timestamp;

use super::auth::Acting;
use super::jobs::{bad_json, bad_query};
use crate::api::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::store::{ApiKey, AuditEntry, Quotas, Tenant};

/// `POST /v1/management/tenants`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTenant {
    /// Unique, 1 to 100 characters.
    pub name: String,
    #[serde(default)]
    pub quotas: Quotas,
}

/// `PATCH /v1/management/tenants/{tenant_id}`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateTenant {
    /// Replaces the tenant's quotas; an absent field is the operator's default.
    pub quotas: Quotas,
}

/// `GET /v1/management/tenants`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TenantList {
    pub tenants: Vec<Tenant>,
}

/// A key just made or rotated: `key` is shown this once and cannot be read again.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct IssuedKeyView {
    /// The whole key, to send as `Authorization: Bearer <key>`.
    pub key: String,
    #[serde(flatten)]
    pub view: ApiKey,
}

impl From<IssuedKey> for IssuedKeyView {
    fn from(issued: IssuedKey) -> Self {
        Self {
            key: issued.secret,
            view: issued.key,
        }
    }
}

/// `POST /v1/management/tenants/{tenant_id}/keys`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateKey {
    /// `admin`, `operator`, `submit` or `read`; no wider than the key making it.
    pub role: Role,
    /// What the key is for, 1 to 100 characters.
    pub name: String,
    /// When it stops opening anything (RFC 3339); never when absent.
    #[serde(default)]
    pub expires_at: Option<Timestamp>,
}

/// `GET /v1/management/keys`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub struct KeyQuery {
    /// One tenant's keys (operators: their own, the default).
    pub tenant_id: Option<String>,
}

/// `GET /v1/management/keys`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct KeyList {
    pub keys: Vec<ApiKey>,
}

/// `GET /v1/management/audit`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub struct AuditQuery {
    /// A page's `next_before`: the rows before it.
    pub before: Option<i64>,
    /// Rows per page, 1 to 1000 (100 when absent).
    pub limit: Option<u32>,
}

/// `GET /v1/management/audit`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AuditPage {
    /// Newest first.
    pub entries: Vec<AuditEntry>,
    /// Pass as `before` for the next page; `null` on the last.
    pub next_before: Option<i64>,
}

/// Creates a tenant.
#[utoipa::path(post, path = "/v1/management/tenants", tag = "tenants",
    request_body(content = CreateTenant, example = json!({"name": "research",
        "quotas": {"max_running": 2, "max_queued": 100}})),
    responses(
        (status = 200, body = Tenant),
        (status = 400, description = "A name that is empty, too long or has control characters"),
        (status = 403, description = "Not an admin key"),
        (status = 409, description = "The name is taken"),
        (status = 422, description = "Not JSON of this shape (an unknown quota, say)"),
    ))]
pub async fn create_tenant(
    State(state): State<AppState>,
    Acting(caller): Acting,
    body: Result<Json<CreateTenant>, JsonRejection>,
) -> ApiResult<Json<Tenant>> {
    let Json(body) = body.map_err(bad_json)?;
    check_quotas(&body.quotas)?;
    let tenant = state
        .tenants
        .create_tenant(&caller, &body.name, body.quotas)
        .await?;
    Ok(Json(tenant))
}

/// Every tenant, oldest first (`default` first).
#[utoipa::path(get, path = "/v1/management/tenants", tag = "tenants",
    responses((status = 200, body = TenantList), (status = 403, description = "Not an admin key")))]
pub async fn list_tenants(State(state): State<AppState>) -> ApiResult<Json<TenantList>> {
    let tenants = state.tenants.tenants().await?;
    Ok(Json(TenantList { tenants }))
}

/// One tenant.
#[utoipa::path(get, path = "/v1/management/tenants/{tenant_id}", tag = "tenants",
    params(("tenant_id" = String, Path)),
    responses((status = 200, body = Tenant), (status = 404, description = "No such tenant")))]
pub async fn get_tenant(
    State(state): State<AppState>,
    Acting(caller): Acting,
    Path(tenant_id): Path<String>,
) -> ApiResult<Json<Tenant>> {
    Ok(Json(state.tenants.tenant(&caller, &tenant_id).await?))
}

/// Replaces a tenant's quotas.
#[utoipa::path(patch, path = "/v1/management/tenants/{tenant_id}", tag = "tenants",
    params(("tenant_id" = String, Path)),
    request_body(content = UpdateTenant, example = json!({"quotas": {"max_running": 4,
        "max_queued": 200, "runs_per_minute": 600, "upload_bytes": 104857600}})),
    responses(
        (status = 200, body = Tenant),
        (status = 400, description = "A quota below 1"),
        (status = 404, description = "No such tenant"),
        (status = 422, description = "Not JSON of this shape"),
    ))]
pub async fn update_tenant(
    State(state): State<AppState>,
    Acting(caller): Acting,
    Path(tenant_id): Path<String>,
    body: Result<Json<UpdateTenant>, JsonRejection>,
) -> ApiResult<Json<Tenant>> {
    let Json(body) = body.map_err(bad_json)?;
    check_quotas(&body.quotas)?;
    let tenant = state
        .tenants
        .set_quotas(&caller, &tenant_id, body.quotas)
        .await?;
    Ok(Json(tenant))
}

/// Deletes a tenant; refused (409) while it has runs or keys that are not revoked, and for
/// the default tenant.
#[utoipa::path(delete, path = "/v1/management/tenants/{tenant_id}", tag = "tenants",
    params(("tenant_id" = String, Path)),
    responses(
        (status = 200, description = "Deleted: `{\"tenant_id\", \"deleted\": true}`"),
        (status = 404, description = "No such tenant"),
        (status = 409, description = "It still has runs or keys (which, and what to do)"),
    ))]
pub async fn delete_tenant(
    State(state): State<AppState>,
    Acting(caller): Acting,
    Path(tenant_id): Path<String>,
) -> ApiResult<Json<serde_json::Value>> {
    state.tenants.delete_tenant(&caller, &tenant_id).await?;
    Ok(Json(json!({"tenant_id": tenant_id, "deleted": true})))
}

/// Makes a key of the tenant; the answer's `key` is shown this once.
#[utoipa::path(post, path = "/v1/management/tenants/{tenant_id}/keys", tag = "tenants",
    params(("tenant_id" = String, Path)),
    request_body(content = CreateKey, example = json!({"role": "submit", "name": "ci"})),
    responses(
        (status = 200, body = IssuedKeyView),
        (status = 400, description = "A name that is empty or too long, an expiry in the past"),
        (status = 403, description = "The key would be wider than the one making it"),
        (status = 404, description = "No such tenant (or another tenant's, for an operator)"),
        (status = 422, description = "Not JSON of this shape (an unknown role, say)"),
    ))]
pub async fn create_key(
    State(state): State<AppState>,
    Acting(caller): Acting,
    Path(tenant_id): Path<String>,
    body: Result<Json<CreateKey>, JsonRejection>,
) -> ApiResult<Json<IssuedKeyView>> {
    let Json(body) = body.map_err(bad_json)?;
    let issued = state
        .tenants
        .create_key(&caller, &tenant_id, body.role, &body.name, body.expires_at)
        .await?;
    Ok(Json(issued.into()))
}

/// The keys of a tenant (an admin naming none: every tenant's), revoked ones too; never a
/// secret.
#[utoipa::path(get, path = "/v1/management/keys", tag = "tenants", params(KeyQuery),
    responses((status = 200, body = KeyList), (status = 404, description = "Another tenant, for an operator")))]
pub async fn list_keys(
    State(state): State<AppState>,
    Acting(caller): Acting,
    query: Result<Query<KeyQuery>, QueryRejection>,
) -> ApiResult<Json<KeyList>> {
    let Query(query) = query.map_err(bad_query)?;
    let keys = state
        .tenants
        .keys(
            &caller,
            query.tenant_id.as_deref().filter(|t| !t.is_empty()),
        )
        .await?;
    Ok(Json(KeyList { keys }))
}

/// Gives a key a new secret (shown this once); the old one opens nothing from then on.
#[utoipa::path(post, path = "/v1/management/keys/{key_id}/rotate", tag = "tenants",
    params(("key_id" = String, Path)),
    responses(
        (status = 200, body = IssuedKeyView),
        (status = 403, description = "The key is wider than the one rotating it"),
        (status = 404, description = "No such key"),
        (status = 409, description = "The key is revoked"),
    ))]
pub async fn rotate_key(
    State(state): State<AppState>,
    Acting(caller): Acting,
    Path(key_id): Path<String>,
) -> ApiResult<Json<IssuedKeyView>> {
    Ok(Json(
        state.tenants.rotate_key(&caller, &key_id).await?.into(),
    ))
}

/// Revokes a key: it is kept, marked, and opens nothing from then on (on every node within
/// a second or two).
#[utoipa::path(delete, path = "/v1/management/keys/{key_id}", tag = "tenants",
    params(("key_id" = String, Path)),
    responses(
        (status = 200, body = ApiKey),
        (status = 403, description = "The key is wider than the one revoking it"),
        (status = 404, description = "No such key"),
    ))]
pub async fn revoke_key(
    State(state): State<AppState>,
    Acting(caller): Acting,
    Path(key_id): Path<String>,
) -> ApiResult<Json<ApiKey>> {
    Ok(Json(state.tenants.revoke_key(&caller, &key_id).await?))
}

/// What was done with administrative power (keys made, rotated and revoked; tenants made,
/// changed and deleted; installs; setting changes), newest first, by key.
#[utoipa::path(get, path = "/v1/management/audit", tag = "tenants", params(AuditQuery),
    responses((status = 200, body = AuditPage), (status = 403, description = "Not an admin key")))]
pub async fn audit(
    State(state): State<AppState>,
    query: Result<Query<AuditQuery>, QueryRejection>,
) -> ApiResult<Json<AuditPage>> {
    let Query(query) = query.map_err(bad_query)?;
    let limit = query.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::bad_request(format!(
            "limit must be between 1 and 1000, got {limit}"
        )));
    }
    let entries = state.tenants.audit(query.before, limit).await?;
    let next_before = (entries.len() == limit as usize)
        .then(|| entries.last().map(|e| e.seq))
        .flatten();
    Ok(Json(AuditPage {
        entries,
        next_before,
    }))
}

/// Refuses a quota of 0, which would stop the tenant altogether.
fn check_quotas(quotas: &Quotas) -> ApiResult<()> {
    let given = [
        ("max_running", quotas.max_running.map(u64::from)),
        ("max_queued", quotas.max_queued.map(u64::from)),
        ("runs_per_minute", quotas.runs_per_minute.map(u64::from)),
        ("upload_bytes", quotas.upload_bytes),
    ];
    match given.iter().find(|(_, value)| *value == Some(0)) {
        Some((name, _)) => Err(ApiError::bad_request(format!(
            "quotas.{name}: must be at least 1 (leave it out for the operator's default; a \
             tenant to stop has its keys revoked)"
        ))),
        None => Ok(()),
    }
}
