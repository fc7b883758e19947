//! The console's secrets page (`/ui/secrets`, operators): the tenant's secrets by name, hosts,
//! header and the value's last 4 characters (an admin sees every tenant's), a form to create
//! one, and per secret a form to rotate its value and a delete that asks first. A value goes in
//! through a password field and is never shown.

use askama::Template;
use axum::Form;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use skill_runner_core::secrets::SecretInput;
use skill_runner_core::tenants::Caller;

use super::{ConsoleError, Lang, Page, WholePage, render};
use crate::api::auth::Acting;
use crate::api::error::ApiError;
use crate::api::secrets::{audit, delete_audited, tenant_of};
use crate::state::AppState;
use crate::store::StoredSecret;

#[derive(Template)]
#[template(path = "secrets.html")]
struct SecretsPage {
    l: Lang,
    section: &'static str,
    secrets: Vec<StoredSecret>,
    /// Whether the list holds every tenant's (an admin's): then each row names its tenant.
    every_tenant: bool,
    error: Option<String>,
}

/// `GET /ui/secrets`.
pub async fn page(l: Lang, State(state): State<AppState>, Acting(caller): Acting) -> Page {
    secrets_page(l, &state, &caller, None).await
}

async fn secrets_page(l: Lang, state: &AppState, caller: &Caller, error: Option<String>) -> Page {
    let visible = caller.visible_tenant();
    let secrets = state
        .jobs
        .tenant_secrets()
        .list(visible.as_deref())
        .await
        .map_err(ApiError::from)?;
    render(&SecretsPage {
        l,
        section: "secrets",
        secrets,
        every_tenant: visible.is_none(),
        error,
    })
}

/// The forms' fields; `hosts` is comma- or line-separated, an empty field is absent.
#[derive(Debug, Deserialize)]
pub struct SecretForm {
    #[serde(default)]
    name: String,
    value: String,
    hosts: String,
    #[serde(default)]
    header: String,
    #[serde(default)]
    prefix: String,
    #[serde(default)]
    tenant_id: String,
}

impl SecretForm {
    fn into_input(self) -> (Option<String>, SecretInput) {
        let some = |text: String| Some(text).filter(|t| !t.trim().is_empty());
        let tenant = some(self.tenant_id);
        let input = SecretInput {
            name: some(self.name).map(|n| n.trim().to_owned()),
            value: self.value,
            hosts: self
                .hosts
                .split([',', '\n'])
                .map(str::trim)
                .filter(|h| !h.is_empty())
                .map(str::to_owned)
                .collect(),
            header: some(self.header),
            // A prefix keeps its spaces (`Bearer `).
            prefix: Some(self.prefix).filter(|p| !p.is_empty()),
            tenant_id: None,
        };
        (tenant, input)
    }
}

/// `POST /ui/secrets`: creates a secret of the caller's tenant and shows the list again.
pub async fn create(
    l: Lang,
    State(state): State<AppState>,
    Acting(caller): Acting,
    Form(form): Form<SecretForm>,
) -> Result<Response, ConsoleError> {
    let (tenant, input) = form.into_input();
    let made = async {
        let tenant = tenant_of(&state, &caller, tenant.as_deref()).await?;
        Ok::<_, ApiError>(state.jobs.tenant_secrets().create(&tenant, input).await?)
    }
    .await;
    answer(l, &state, &caller, made, "secret.created").await
}

/// `POST /ui/secrets/{name}/rotate`: a new value (and hosts) for the secret.
pub async fn rotate(
    l: Lang,
    State(state): State<AppState>,
    Acting(caller): Acting,
    Path(name): Path<String>,
    Form(form): Form<SecretForm>,
) -> Result<Response, ConsoleError> {
    let (tenant, input) = form.into_input();
    let rotated = async {
        let tenant = tenant_of(&state, &caller, tenant.as_deref()).await?;
        Ok::<_, ApiError>(
            state
                .jobs
                .tenant_secrets()
                .rotate(&tenant, &name, input)
                .await?,
        )
    }
    .await;
    answer(l, &state, &caller, rotated, "secret.rotated").await
}

/// The list again after a change (audited), or with the change's error.
async fn answer(
    l: Lang,
    state: &AppState,
    caller: &Caller,
    changed: Result<StoredSecret, ApiError>,
    action: &str,
) -> Result<Response, ConsoleError> {
    match changed {
        Ok(secret) => {
            audit(state, caller, action, &secret).await;
            Ok(Redirect::to("/ui/secrets").into_response())
        }
        Err(e) => {
            let (status, message) = e.into_message();
            let mut page = secrets_page(l, state, caller, Some(message))
                .await?
                .into_response();
            *page.status_mut() = status;
            page.extensions_mut().insert(WholePage);
            Ok(page)
        }
    }
}

/// Whose secret a delete names.
#[derive(Debug, Deserialize)]
pub struct Owner {
    #[serde(default)]
    tenant_id: String,
}

/// `POST /ui/secrets/{name}/delete`: deletes the secret (the page asked first).
pub async fn delete(
    State(state): State<AppState>,
    Acting(caller): Acting,
    Path(name): Path<String>,
    Form(owner): Form<Owner>,
) -> Result<Response, ConsoleError> {
    let asked = Some(owner.tenant_id).filter(|t| !t.is_empty());
    let tenant = tenant_of(&state, &caller, asked.as_deref()).await?;
    delete_audited(&state, &caller, &tenant, &name).await?;
    Ok(Redirect::to("/ui/secrets").into_response())
}
