//! The example client's pages: the skills, a skill's run form and its submission.

use askama::Template;
use axum::extract::{Multipart, Path, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Redirect, Response};
use reqwest::Method;
use serde_json::{Map, Value, json};

use super::Shared;
use super::backend::BackendError;
use super::recordings::{self, Upload};
use skill_runner_web::form::{self, FormView, Schema};
use skill_runner_web::i18n::Lang;

/// A page, or the error page with the status that goes with it.
pub(super) type Page = Result<Response, PageError>;

/// Something a page could not do, shown as a page (never a stack trace).
#[derive(Debug)]
pub struct PageError {
    pub(super) status: StatusCode,
    pub(super) message: String,
}

impl From<BackendError> for PageError {
    fn from(e: BackendError) -> Self {
        let status = match &e {
            BackendError::Unreachable { .. } => StatusCode::BAD_GATEWAY,
            BackendError::Refused { status, .. } if status.is_client_error() => *status,
            BackendError::Refused { .. } => StatusCode::BAD_GATEWAY,
        };
        Self {
            status,
            message: e.to_string(),
        }
    }
}

#[derive(Template)]
#[template(path = "client/error.html")]
struct ErrorPage<'a> {
    message: &'a str,
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let body = ErrorPage {
            message: &self.message,
        }
        .render()
        .unwrap_or_else(|_| self.message.clone());
        (self.status, Html(body)).into_response()
    }
}

pub(super) fn html(template: &impl Template) -> Page {
    let body = template.render().map_err(|e| PageError {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        message: format!("the page cannot be rendered: {e}"),
    })?;
    Ok(Html(body).into_response())
}

/// One skill as the list shows it.
struct SkillRow {
    id: String,
    name: String,
    version: String,
    engines: String,
    healthy: bool,
}

#[derive(Template)]
#[template(path = "client/skills.html")]
struct SkillsPage {
    backend: String,
    skills: Vec<SkillRow>,
}

pub(super) fn text(value: &Value, key: &str) -> String {
    value
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

fn strings(value: &Value, key: &str) -> Vec<String> {
    value
        .get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

/// `GET /`: the service's skills.
pub async fn skills(State(client): State<Shared>) -> Page {
    let list = client.backend.get("/v1/management/skills").await?;
    let skills = list
        .get("skills")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|s| SkillRow {
            id: text(s, "id"),
            name: text(s, "name"),
            version: text(s, "version"),
            engines: strings(s, "effective_engines").join(", "),
            healthy: s.get("health") == Some(&json!("healthy")),
        })
        .collect();
    html(&SkillsPage {
        backend: client.backend.base().to_string(),
        skills,
    })
}

/// Everything the run form shows.
#[derive(Template)]
#[template(path = "client/run_form.html")]
struct RunForm {
    l: Lang,
    skill_id: String,
    name: String,
    /// The skill's engines, its default first (what the form selects).
    engines: Vec<String>,
    /// The client does not ask which engines are logged in (the service's runs wait for a
    /// login), so it names none here.
    unready: Vec<String>,
    modes: Vec<String>,
    /// Each agent engine's models (`engine`, model ids).
    models: Vec<(String, Vec<String>)>,
    form: FormView,
}

/// The skill's facts and form fields.
async fn form_for(client: &Shared, skill_id: &str) -> Result<RunForm, PageError> {
    let skill = client
        .backend
        .get(&format!("/v1/management/skills/{skill_id}"))
        .await?;
    let response = client
        .backend
        .send(client.backend.request(
            Method::GET,
            &format!("/v1/management/skills/{skill_id}/schemas"),
        ))
        .await?;
    let body = response.text().await.unwrap_or_default();
    let schemas = read_schemas(&body).map_err(|e| PageError {
        status: StatusCode::BAD_GATEWAY,
        message: format!("the service sent schemas the client cannot read: {e}"),
    })?;
    let mut engines = strings(&skill, "effective_engines");
    let default = text(&skill, "default_engine");
    engines.sort_by_key(|e| *e != default);
    let mut models = Vec::new();
    for engine in engines.iter().filter(|e| *e != "script") {
        // An engine without a model list (or a CLI) simply offers none.
        if let Ok(list) = client
            .backend
            .get(&format!("/v1/engines/{engine}/models"))
            .await
        {
            let ids = list
                .get("models")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|m| text(m, "id"))
                .collect();
            models.push((engine.clone(), ids));
        }
    }
    // A standard Agent Skills skill takes a prompt and files under their own names.
    let fields = if text(&skill, "format") == "agent-skill" {
        form::task_fields(
            "The task, in your words.",
            "Files for the task, under their own names.",
        )
    } else {
        form::fields(schemas.0.as_ref(), schemas.1.as_ref())
    };
    Ok(RunForm {
        skill_id: skill_id.to_owned(),
        name: text(&skill, "name"),
        engines,
        modes: strings(&skill, "execution_modes"),
        models,
        form: FormView::new(fields),
        l: Lang::En,
        unready: Vec::new(),
    })
}

/// The input and parameter schemas of a `/schemas` answer, in the order the service wrote them.
fn read_schemas(body: &str) -> serde_json::Result<(Option<Schema>, Option<Schema>)> {
    #[derive(serde::Deserialize)]
    struct Raw<'a> {
        #[serde(borrow)]
        input: Option<&'a serde_json::value::RawValue>,
        #[serde(borrow)]
        parameter: Option<&'a serde_json::value::RawValue>,
    }
    let raw: Raw = serde_json::from_str(body)?;
    let schema = |raw: Option<&serde_json::value::RawValue>| {
        raw.filter(|r| r.get() != "null")
            .map(|r| Schema::parse(r.get()))
            .transpose()
    };
    Ok((schema(raw.input)?, schema(raw.parameter)?))
}

/// `GET /skills/{skill_id}/run`: the form generated from the skill's schemas.
pub async fn run_form(State(client): State<Shared>, Path(skill_id): Path<String>) -> Page {
    html(&form_for(&client, &skill_id).await?)
}

/// `POST /skills/{skill_id}/run`: creates the run (and uploads the chosen files, zipped under
/// their input keys), then goes to its page; a form with mistakes comes back naming each.
pub async fn create_run(
    State(client): State<Shared>,
    Path(skill_id): Path<String>,
    multipart: Multipart,
) -> Page {
    let mut page = form_for(&client, &skill_id).await?;
    let (values, files) = form::receive(multipart)
        .await
        .map_err(|message| PageError {
            status: StatusCode::BAD_REQUEST,
            message,
        })?;
    let value = |name: &str| form::value(&values, name);
    let (form::Submitted { input, parameter }, engine, files) =
        match form::check_files(&page.form.fields, &values, files, &page.engines) {
            Ok(checked) => checked,
            Err(errors) => {
                page.form.errors = errors;
                page.form.values = values;
                let mut response = html(&page)?;
                *response.status_mut() = StatusCode::UNPROCESSABLE_ENTITY;
                return Ok(response);
            }
        };
    let mut options = Map::new();
    if let Some(mode) = value("execution_mode") {
        options.insert("execution_mode".into(), json!(mode));
    }
    for flag in ["no_cache", "debug"] {
        if value(flag).is_some() {
            options.insert(flag.into(), json!(true));
        }
    }
    let mut body = json!({
        "skill_id": skill_id,
        "engine": engine,
        "input": input,
        "parameter": parameter,
        "runtime_options": options,
    });
    if let Some(model) = value("model") {
        body["model"] = json!(model);
    }
    let created = client
        .backend
        .json(client.backend.request(Method::POST, "/v1/jobs").json(&body))
        .await?;
    let request_id = text(&created, "request_id");
    if !files.is_empty() {
        let zip = form::zip_files(&files).map_err(|e| PageError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: format!("the chosen files could not be zipped: {e}"),
        })?;
        let part = reqwest::multipart::Part::bytes(zip)
            .file_name("inputs.zip")
            .mime_str("application/zip")
            .expect("a valid mime type");
        let upload = reqwest::multipart::Form::new().part("file", part);
        client
            .backend
            .json(
                client
                    .backend
                    .request(Method::POST, &format!("/v1/jobs/{request_id}/upload"))
                    .multipart(upload),
            )
            .await?;
    }
    let uploads: Vec<Upload<'_>> = files
        .iter()
        .map(|f| Upload {
            key: &f.key,
            name: &f.name,
            bytes: &f.bytes,
        })
        .collect();
    if let Err(e) = recordings::start(&client.recordings, &request_id, &skill_id, &body, &uploads) {
        // The run goes on; only its recording is missing.
        tracing::warn!(request_id, error = %e, "cannot record the run");
    }
    Ok(Redirect::to(&format!("/runs/{request_id}")).into_response())
}
