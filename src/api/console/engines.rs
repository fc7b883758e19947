//! `/ui/engines`: the agent engines with their CLI versions, logins and confinement; upgrades
//! (all, or one engine) followed until they end; and an engine's models with the form that adds
//! a snapshot for the detected CLI version.

use askama::Template;
use axum::Form;
use axum::extract::multipart::{Multipart, MultipartRejection};
use axum::extract::{Path, State};
use serde::Deserialize;

use super::{ConsoleError, Lang, Page, render};
use crate::api::engines::{self as api, EngineSummary};
use crate::api::error::ApiError;
use crate::engines::cli::AuthStatus;
use crate::engines::login::ImportFile;
use crate::engines::models::{ManifestView, Model};
use crate::engines::{Engine, upgrades};
use crate::state::AppState;
use crate::store::Upgrade;
use skill_runner_core::engine_login::{AuthSession, sign_in_methods};
use skill_runner_core::providers::{self, ModelInput, ProviderInput, ProviderView};

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
    takes_providers: bool,
    providers: Vec<ProviderView>,
    error: Option<String>,
    status: AuthStatus,
    files: Vec<ImportFile>,
    /// The sign-in methods of the engine (none: it signs no account in here).
    sign_in: &'static [&'static str],
    notice: Option<String>,
}

#[derive(Template)]
#[template(path = "partials/engine_login.html")]
struct LoginFragment {
    l: Lang,
    engine: String,
    status: AuthStatus,
    files: Vec<ImportFile>,
    /// The sign-in methods of the engine (none: it signs no account in here).
    sign_in: &'static [&'static str],
    notice: Option<String>,
    error: Option<String>,
}

#[derive(Template)]
#[template(path = "partials/sign_in.html")]
struct SignInFragment {
    l: Lang,
    engine: String,
    /// `None` when it could not start.
    session: Option<AuthSession>,
    error: Option<String>,
}

impl SignInFragment {
    fn waiting(&self) -> bool {
        self.session
            .as_ref()
            .is_some_and(|s| s.status == "waiting_user")
    }

    /// A device code is approved elsewhere: the page asks until the sign-in ends.
    fn polls(&self) -> bool {
        self.waiting() && self.session.as_ref().is_some_and(|s| s.user_code.is_some())
    }
}

#[derive(Template)]
#[template(path = "partials/engine_providers.html")]
struct ProvidersFragment {
    l: Lang,
    engine: String,
    providers: Vec<ProviderView>,
    /// Why the form's provider was refused.
    error: Option<String>,
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
        takes_providers: providers::supported(engine),
        providers: providers::list(&state.store, engine)
            .await
            .map_err(ApiError::from)?,
        error: None,
        status: auth_status(&state, engine)?,
        files: state.logins.import_spec(engine).map_err(ApiError::from)?,
        sign_in: sign_in_methods(engine),
        notice: None,
    })
}

fn auth_status(state: &AppState, engine: Engine) -> Result<AuthStatus, ApiError> {
    state
        .jobs
        .engines()
        .auth_status(engine)
        .ok_or_else(|| ApiError::not_found(format!("Engine '{engine}' has no CLI to log in")))
}

/// The login section as it is now, with what the last action said.
fn login_fragment(
    l: Lang,
    state: &AppState,
    engine: Engine,
    said: Result<String, skill_runner_core::error::Error>,
) -> Page {
    let (notice, error) = match said {
        Ok(notice) => (Some(notice).filter(|n| !n.is_empty()), None),
        Err(e) => (None, Some(ApiError::from(e).into_message().1)),
    };
    render(&LoginFragment {
        l,
        engine: engine.to_string(),
        status: auth_status(state, engine)?,
        files: state.logins.import_spec(engine).map_err(ApiError::from)?,
        sign_in: sign_in_methods(engine),
        notice,
        error,
    })
}

/// `GET /ui/engines/{engine}/login`: the login section as it is now.
pub async fn login(l: Lang, State(state): State<AppState>, Path(engine): Path<String>) -> Page {
    let engine = api::agent_engine(&engine)?;
    login_fragment(l, &state, engine, Ok(String::new()))
}

/// The sign-in form: `callback` or `auth_code_or_url`.
#[derive(Debug, Deserialize)]
pub struct SignInForm {
    method: String,
}

/// `POST /ui/engines/{engine}/login/sign-in`: starts signing an OpenAI account in.
pub async fn sign_in(
    l: Lang,
    State(state): State<AppState>,
    Path(engine): Path<String>,
    Form(form): Form<SignInForm>,
) -> Page {
    let engine = api::agent_engine(&engine)?;
    let started = state
        .logins
        .start(engine, &form.method, Some("oauth_proxy"), None)
        .await;
    let (session, error) = match started {
        Ok(session) => (Some(session), None),
        Err(e) => (None, Some(ApiError::from(e).into_message().1)),
    };
    render(&SignInFragment {
        l,
        engine: engine.to_string(),
        session,
        error,
    })
}

/// `POST /ui/engines/{engine}/login/delegate`: runs the CLI's own device login in the
/// terminal; the page shows its code and notices the end by itself.
pub async fn delegate(l: Lang, State(state): State<AppState>, Path(engine): Path<String>) -> Page {
    let engine = api::agent_engine(&engine)?;
    let (session, error) =
        match crate::api::cli_delegate::delegate(&state, engine, "auth_code_or_url").await {
            Ok(session) => (Some(session), None),
            Err(e) => (None, Some(e.into_message().1)),
        };
    render(&SignInFragment {
        l,
        engine: engine.to_string(),
        session,
        error,
    })
}

/// `GET /ui/engines/{engine}/login/sign-in/{session_id}`: where a sign-in stands.
pub async fn sign_in_status(
    l: Lang,
    State(state): State<AppState>,
    Path((engine, session_id)): Path<(String, String)>,
) -> Page {
    let engine = api::agent_engine(&engine)?;
    let session = state
        .logins
        .session(&session_id, Some(engine))
        .map_err(ApiError::from)?;
    render(&SignInFragment {
        l,
        engine: engine.to_string(),
        session: Some(session),
        error: None,
    })
}

/// The address the browser ended on.
#[derive(Debug, Deserialize)]
pub struct PastedForm {
    value: String,
}

/// `POST /ui/engines/{engine}/login/sign-in/{session_id}/input`: finishes a browser sign-in
/// with the address pasted; a refusal is said under the form, which stays.
pub async fn sign_in_input(
    l: Lang,
    State(state): State<AppState>,
    Path((engine, session_id)): Path<(String, String)>,
    Form(form): Form<PastedForm>,
) -> Page {
    let engine = api::agent_engine(&engine)?;
    let done = state
        .logins
        .input(&session_id, Some(engine), "text", form.value)
        .await;
    let error = done.err().map(|e| ApiError::from(e).into_message().1);
    let session = state
        .logins
        .session(&session_id, Some(engine))
        .map_err(ApiError::from)?;
    render(&SignInFragment {
        l,
        engine: engine.to_string(),
        session: Some(session),
        error,
    })
}

/// The API key form.
#[derive(Debug, Deserialize)]
pub struct KeyForm {
    api_key: String,
}

/// `POST /ui/engines/{engine}/login/api-key`: the key becomes the engine's login; the runs
/// that waited for one are queued.
pub async fn log_in_with_key(
    l: Lang,
    State(state): State<AppState>,
    Path(engine): Path<String>,
    Form(form): Form<KeyForm>,
) -> Page {
    let engine = api::agent_engine(&engine)?;
    let said = state
        .logins
        .import_api_key(engine, form.api_key)
        .await
        .map(|n| l.tr("engine_login.saved").replace("{n}", &n.to_string()));
    login_fragment(l, &state, engine, said)
}

/// `POST /ui/engines/{engine}/login/import`: the login files (`files` parts) go to the agent
/// home, as `POST /v1/management/engines/{engine}/auth/import` takes them.
pub async fn import_login(
    l: Lang,
    State(state): State<AppState>,
    Path(engine): Path<String>,
    multipart: Result<Multipart, MultipartRejection>,
) -> Page {
    let engine = api::agent_engine(&engine)?;
    let (_, files) = crate::api::engine_auth::receive(multipart).await?;
    let said = state
        .logins
        .import_files(engine, files)
        .await
        .map(|(_, n)| l.tr("engine_login.saved").replace("{n}", &n.to_string()));
    login_fragment(l, &state, engine, said)
}

/// `POST /ui/engines/{engine}/logout`.
pub async fn log_out(l: Lang, State(state): State<AppState>, Path(engine): Path<String>) -> Page {
    let engine = api::agent_engine(&engine)?;
    let said = state.logins.log_out(engine).await.map(|removed| {
        let files = match removed.is_empty() {
            true => "—".to_owned(),
            false => removed.join(", "),
        };
        l.tr("engine_login.removed").replace("{files}", &files)
    });
    login_fragment(l, &state, engine, said)
}

/// The provider form: `models` one per line, `name` or `name: effort, effort`.
#[derive(Debug, Deserialize)]
pub struct ProviderForm {
    provider_id: String,
    base_url: String,
    #[serde(default)]
    api_key: String,
    models: String,
    #[serde(default)]
    default_model: String,
}

/// The providers as they are now, with `error` under them.
async fn providers_fragment(
    l: Lang,
    state: &AppState,
    engine: Engine,
    error: Option<String>,
) -> Page {
    render(&ProvidersFragment {
        l,
        engine: engine.to_string(),
        providers: providers::list(&state.store, engine)
            .await
            .map_err(ApiError::from)?,
        error,
    })
}

/// `POST /ui/engines/{engine}/providers`: creates or replaces the form's provider; a refusal
/// is shown under the providers, which stay as they were.
pub async fn put_provider(
    l: Lang,
    State(state): State<AppState>,
    Path(engine): Path<String>,
    Form(form): Form<ProviderForm>,
) -> Page {
    let engine = api::agent_engine(&engine)?;
    let models = form
        .models
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .map(|line| match line.split_once(':') {
            None => ModelInput::Name(line.to_owned()),
            Some((id, efforts)) => ModelInput::Model {
                id: id.trim().to_owned(),
                supported_effort: Some(
                    efforts
                        .split(',')
                        .map(str::trim)
                        .filter(|e| !e.is_empty())
                        .map(str::to_owned)
                        .collect(),
                ),
            },
        })
        .collect();
    let given = |v: String| Some(v.trim().to_owned()).filter(|v| !v.is_empty());
    let input = ProviderInput {
        provider_id: form.provider_id.clone(),
        api_key: given(form.api_key),
        base_url: form.base_url,
        models,
        default_model: given(form.default_model),
    };
    let error = match providers::put(&state.store, engine.as_str(), &form.provider_id, input).await
    {
        Ok(_) => None,
        Err(e) => Some(ApiError::from(e).into_message().1),
    };
    providers_fragment(l, &state, engine, error).await
}

/// `POST /ui/engines/{engine}/providers/{provider_id}/delete`.
pub async fn delete_provider(
    l: Lang,
    State(state): State<AppState>,
    Path((engine, provider_id)): Path<(String, String)>,
) -> Page {
    let engine = api::agent_engine(&engine)?;
    providers::delete(&state.store, engine.as_str(), &provider_id)
        .await
        .map_err(ApiError::from)?;
    providers_fragment(l, &state, engine, None).await
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
                provider_id: None,
            }
        })
        .collect();
    let view = api::add_models(&state, engine, models).await?;
    render(&ModelsFragment { l, view })
}
