//! The console's tenant pages: who is logged in (`/ui/me`, in every page's header), and, for
//! admins, the tenants and their keys (`/ui/tenants`): a key made here is shown once, with a
//! copy button; revoking one asks first.

use askama::Template;
use axum::Form;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use skill_runner_core::tenants::Role;

use super::{ConsoleError, Lang, Page, WholePage, render};
use crate::api::auth::Acting;
use crate::api::error::ApiError;
use crate::state::AppState;
use crate::store::{ApiKey, Quotas, Tenant};

#[derive(Template)]
#[template(path = "partials/who.html")]
struct Who {
    l: Lang,
    /// The tenant's name and the key's role, for a caller with a key.
    keyed: Option<(String, &'static str)>,
    admin: bool,
}

/// `GET /ui/me`: the header's note of who is logged in (empty on a service without keys).
pub async fn me(l: Lang, State(state): State<AppState>, Acting(caller): Acting) -> Page {
    let keyed = match &caller.key_id {
        Some(_) => {
            let name = state
                .tenants
                .tenant(&caller, &caller.tenant_id)
                .await
                .map_err(ApiError::from)?
                .name;
            Some((name, caller.role.as_str()))
        }
        None => None,
    };
    render(&Who {
        l,
        keyed,
        admin: caller.may(Role::Admin),
    })
}

#[derive(Template)]
#[template(path = "tenants.html")]
struct TenantsPage {
    l: Lang,
    section: &'static str,
    tenants: Vec<Tenant>,
    error: Option<String>,
}

/// `GET /ui/tenants` (admins).
pub async fn page(l: Lang, State(state): State<AppState>) -> Page {
    tenants_page(l, &state, None).await
}

async fn tenants_page(l: Lang, state: &AppState, error: Option<String>) -> Page {
    render(&TenantsPage {
        l,
        section: "tenants",
        tenants: state.tenants.tenants().await.map_err(ApiError::from)?,
        error,
    })
}

/// The form making a tenant.
#[derive(Debug, Deserialize)]
pub struct NewTenant {
    name: String,
}

/// `POST /ui/tenants`: makes a tenant (the operator's default quotas) and opens its page.
pub async fn create(
    l: Lang,
    State(state): State<AppState>,
    Acting(caller): Acting,
    Form(form): Form<NewTenant>,
) -> Result<Response, ConsoleError> {
    match state
        .tenants
        .create_tenant(&caller, &form.name, Quotas::default())
        .await
    {
        Ok(tenant) => {
            Ok(Redirect::to(&format!("/ui/tenants/{}", tenant.tenant_id)).into_response())
        }
        Err(e) => {
            let (status, message) = ApiError::from(e).into_message();
            let mut page = tenants_page(l, &state, Some(message))
                .await?
                .into_response();
            *page.status_mut() = status;
            // The form with its error, not the error page.
            page.extensions_mut().insert(WholePage);
            Ok(page)
        }
    }
}

#[derive(Template)]
#[template(path = "tenant.html")]
struct TenantPage {
    l: Lang,
    section: &'static str,
    tenant: Tenant,
    keys: Vec<ApiKey>,
    /// A key just made: shown this once.
    issued: Option<String>,
    error: Option<String>,
}

/// `GET /ui/tenants/{tenant_id}`: the tenant's keys.
pub async fn detail(
    l: Lang,
    State(state): State<AppState>,
    Acting(caller): Acting,
    Path(tenant_id): Path<String>,
) -> Page {
    tenant_page(l, &state, &caller, &tenant_id, None, None).await
}

async fn tenant_page(
    l: Lang,
    state: &AppState,
    caller: &skill_runner_core::tenants::Caller,
    tenant_id: &str,
    issued: Option<String>,
    error: Option<String>,
) -> Page {
    let tenant = state
        .tenants
        .tenant(caller, tenant_id)
        .await
        .map_err(ApiError::from)?;
    let keys = state
        .tenants
        .keys(caller, Some(tenant_id))
        .await
        .map_err(ApiError::from)?;
    render(&TenantPage {
        l,
        section: "tenants",
        tenant,
        keys,
        issued,
        error,
    })
}

/// The form making a key.
#[derive(Debug, Deserialize)]
pub struct NewKey {
    role: Role,
    name: String,
}

/// `POST /ui/tenants/{tenant_id}/keys`: makes a key and shows it, this once.
pub async fn create_key(
    l: Lang,
    State(state): State<AppState>,
    Acting(caller): Acting,
    Path(tenant_id): Path<String>,
    Form(form): Form<NewKey>,
) -> Result<Response, ConsoleError> {
    let made = state
        .tenants
        .create_key(&caller, &tenant_id, form.role, &form.name, None)
        .await;
    let (issued, error, status) = match made {
        Ok(issued) => (Some(issued.secret), None, None),
        Err(e) => {
            let (status, message) = ApiError::from(e).into_message();
            (None, Some(message), Some(status))
        }
    };
    let mut page = tenant_page(l, &state, &caller, &tenant_id, issued, error)
        .await?
        .into_response();
    if let Some(status) = status {
        *page.status_mut() = status;
        page.extensions_mut().insert(WholePage);
    }
    Ok(page)
}

/// `POST /ui/keys/{key_id}/revoke`: revokes a key (the page asked first) and goes back to its
/// tenant.
pub async fn revoke_key(
    State(state): State<AppState>,
    Acting(caller): Acting,
    Path(key_id): Path<String>,
) -> Result<Response, ConsoleError> {
    let key = state
        .tenants
        .revoke_key(&caller, &key_id)
        .await
        .map_err(ApiError::from)?;
    Ok(Redirect::to(&format!("/ui/tenants/{}", key.tenant_id)).into_response())
}
