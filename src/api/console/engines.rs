//! `/ui/engines`: the agent engines with their CLI versions, logins and confinement; upgrades
//! (all, or one engine) followed until they end; and an engine's models with the form that adds
//! a snapshot for the detected CLI version.

use askama::Template;
use axum::Form;
use axum::extract::{Path, State};
use serde::Deserialize;

use super::{ConsoleError, Lang, Page, render};
use crate::api::engines::{self as api, EngineSummary};
use crate::api::error::ApiError;
use crate::engines::models::{ManifestView, Model};
use crate::engines::{Engine, upgrades};
use crate::state::AppState;
use crate::store::Upgrade;

#[derive(Template)]
#[template(path = "engines.html")]
struct EnginesPage {
    l: Lang,
    section: &'static str,
    engines: Vec<EngineSummary>,
}

#[derive(Template)]
#[template(path = "partials/engines_table.html")]
struct EnginesTable {
    l: Lang,
    engines: Vec<EngineSummary>,
}

#[derive(Template)]
#[template(path = "partials/upgrade_status.html")]
struct UpgradeStatus {
    l: Lang,
    upgrade: Upgrade,
}

#[derive(Template)]
#[template(path = "engine_models.html")]
struct ModelsPage {
    l: Lang,
    section: &'static str,
    engine: String,
    view: ManifestView,
}

#[derive(Template)]
#[template(path = "partials/engine_models.html")]
struct ModelsFragment {
    l: Lang,
    view: ManifestView,
}

/// `GET /ui/engines`.
pub async fn page(l: Lang, State(state): State<AppState>) -> Page {
    render(&EnginesPage {
        l,
        section: "engines",
        engines: api::summaries(&state).await,
    })
}

/// `GET /ui/management/engines/table`.
pub async fn table(l: Lang, State(state): State<AppState>) -> Page {
    render(&EnginesTable {
        l,
        engines: api::summaries(&state).await,
    })
}

/// The upgrade form: `mode=all`, or `mode=single` with `engine`.
#[derive(Debug, Deserialize)]
pub struct UpgradeForm {
    mode: String,
    engine: Option<String>,
}

/// `POST /ui/engines/upgrades`: starts the upgrade and answers its status, which polls itself
/// until the upgrade ends.
pub async fn upgrade(
    l: Lang,
    State(state): State<AppState>,
    Form(form): Form<UpgradeForm>,
) -> Page {
    let scope = upgrades::scope(&form.mode, form.engine.as_deref())
        .map_err(|(field, problem)| ApiError::bad_request(format!("{field} {problem}")))?;
    let upgrade = api::start_upgrade(&state, scope).await?;
    render(&UpgradeStatus { l, upgrade })
}

/// `GET /ui/engines/upgrades/{request_id}/status`: each engine's status, npm output and error.
/// Once the upgrade is over the answer tells the page (`HX-Trigger: engines-changed`), whose
/// engines table then shows the new versions.
pub async fn upgrade_status(
    l: Lang,
    State(state): State<AppState>,
    Path(request_id): Path<String>,
) -> Result<impl axum::response::IntoResponse, ConsoleError> {
    let upgrade = state
        .store
        .upgrade(&request_id)
        .await
        .map_err(ApiError::from)?
        .ok_or_else(|| ApiError::not_found("Upgrade request not found"))?;
    let over = !upgrade.status.is_active();
    let page = render(&UpgradeStatus { l, upgrade })?;
    let trigger = over.then_some([("HX-Trigger", "engines-changed")]);
    Ok((
        axum::response::AppendHeaders(trigger.into_iter().flatten()),
        page,
    ))
}

async fn manifest(state: &AppState, engine: Engine) -> Result<ManifestView, ApiError> {
    state
        .jobs
        .engines()
        .manifest(engine)
        .await
        .ok_or_else(|| ApiError::not_found(format!("Engine '{engine}' has no model list")))
}

/// `GET /ui/engines/{engine}/models`.
pub async fn models(l: Lang, State(state): State<AppState>, Path(engine): Path<String>) -> Page {
    let engine = api::agent_engine(&engine)?;
    render(&ModelsPage {
        l,
        section: "engines",
        engine: engine.to_string(),
        view: manifest(&state, engine).await?,
    })
}

/// The snapshot form: one model per line, `id` or `id, display name`.
#[derive(Debug, Deserialize)]
pub struct SnapshotForm {
    models: String,
}

/// `POST /ui/engines/{engine}/models/snapshots`: adds the snapshot (add-only) and answers the
/// models as they are now.
pub async fn add_snapshot(
    l: Lang,
    State(state): State<AppState>,
    Path(engine): Path<String>,
    Form(form): Form<SnapshotForm>,
) -> Page {
    let engine = api::agent_engine(&engine)?;
    let models = form
        .models
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .map(|line| {
            let (id, name) = line.split_once(',').unwrap_or((line, ""));
            Model {
                id: id.trim().to_owned(),
                display_name: name.trim().to_owned(),
                deprecated: false,
                notes: String::new(),
                supported_effort: None,
            }
        })
        .collect();
    let view = api::add_models(&state, engine, models).await?;
    render(&ModelsFragment { l, view })
}
