//! What a run ended with, as its page shows it: a failure's code, message and what to do; a
//! result's fields in its output schema's order (text as sanitised Markdown, artifacts as
//! downloads with a preview, the rest as JSON); and the run's downloads. Also the artifact
//! downloads and the image previews it links to.

use crate::api::jobs::Kind;
use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::Value;
use skill_runner_types::RelPath;
use skill_runner_web::form::Schema;
use skill_runner_web::markdown;

use super::skills::FilePath;
use super::{ConsoleError, Lang, Page, render};
use crate::api::error::ApiError;
use crate::browse;
use crate::state::AppState;
use crate::store::{Request, Run, RunStatus};

/// One field of a result.
pub(super) enum Shown {
    /// A file under `artifacts/`, by its run-relative path.
    Artifact(String),
    /// Text, rendered from Markdown.
    Text(String),
    /// Anything else, as pretty JSON.
    Json(String),
}

pub(super) struct Field {
    pub key: String,
    pub title: String,
    pub shown: Shown,
}

/// The failure a run ended with.
pub(super) struct Failure {
    pub code: Option<String>,
    pub message: String,
    /// The end of the turn's stderr, when the message does not already end with it.
    pub stderr_tail: Option<String>,
    pub hint: Option<String>,
}

/// The end of `stderr` as a failure quotes it, unless `message` already ends with it.
fn stderr_tail(stderr: Option<&str>, message: &str) -> Option<String> {
    crate::runner::stderr_tail(stderr?).filter(|tail| !message.ends_with(tail.as_str()))
}

#[derive(Template)]
#[template(path = "partials/run_result.html")]
pub(super) struct RunResult {
    pub l: Lang,
    pub request_id: String,
    pub status: &'static str,
    pub terminal: bool,
    pub failure: Option<Failure>,
    pub fields: Vec<Field>,
    pub warnings: Vec<String>,
    pub artifacts: Vec<String>,
}

impl RunResult {
    /// An artifact's path (`artifacts/...`) as the download route takes it.
    pub fn encoded(&self, path: &str) -> String {
        form_urlencoded::byte_serialize(path.as_bytes()).collect()
    }

    /// An artifact's path as the preview of the run folder takes it.
    pub fn in_folder(&self, path: &str) -> String {
        self.encoded(&format!("{}/{path}", crate::run_folder::WORKSPACE))
    }
}

/// The result section of a request's run.
pub(super) async fn of(l: Lang, state: &AppState, request: &Request, run: &Run) -> RunResult {
    let envelope: Value = run
        .result
        .as_deref()
        .and_then(|r| serde_json::from_str(r).ok())
        .unwrap_or(Value::Null);
    let failure = (run.status.is_terminal() && run.status != RunStatus::Succeeded).then(|| {
        let error = envelope.get("error").filter(|e| !e.is_null());
        let text = |key: &str| error.and_then(|e| e[key].as_str()).map(str::to_owned);
        let message = text("message")
            .or_else(|| run.error_message.clone())
            .unwrap_or_default();
        Failure {
            code: text("code").or_else(|| run.error_code.clone()),
            stderr_tail: stderr_tail(text("stderr").as_deref(), &message),
            message,
            hint: text("hint")
                .or_else(|| crate::hints::for_code(run.error_code.as_deref()?).map(str::to_owned)),
        }
    });
    let output = match &request.skill_id {
        Some(id) => output_schema(state, id).await,
        None => None,
    };
    let fields = match envelope.get("data") {
        Some(Value::Object(data)) => fields(data, output.as_ref()),
        _ => Vec::new(),
    };
    let list = |key: &str| -> Vec<String> {
        envelope[key]
            .as_array()
            .into_iter()
            .flatten()
            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
            .collect()
    };
    RunResult {
        l,
        request_id: request.request_id.clone(),
        status: run.status.as_str(),
        terminal: run.status.is_terminal(),
        failure,
        fields,
        warnings: [list("validation_warnings"), list("warnings")].concat(),
        artifacts: list("artifacts"),
    }
}

/// The installed skill's output schema, with its properties in the order written.
async fn output_schema(state: &AppState, skill_id: &str) -> Option<Schema> {
    let manifest = state.installer.skill(skill_id).await?.manifest()?.clone();
    tokio::task::spawn_blocking(move || {
        let rel = RelPath::parse(&manifest.schemas.as_ref()?.output).ok()?;
        let text = browse::preview(&manifest.path, &rel, &[]).ok()?.content?;
        Schema::parse(&text).ok()
    })
    .await
    .ok()
    .flatten()
}

/// The result's fields: the schema's in its order, then any others it does not name.
fn fields(data: &serde_json::Map<String, Value>, schema: Option<&Schema>) -> Vec<Field> {
    let described: Vec<(&String, &Value)> =
        schema.map(|s| s.properties().collect()).unwrap_or_default();
    let mut keys: Vec<&String> = described
        .iter()
        .map(|(k, _)| *k)
        .filter(|k| data.contains_key(*k))
        .collect();
    keys.extend(
        data.keys()
            .filter(|k| !described.iter().any(|(d, _)| d == k)),
    );
    keys.into_iter()
        .map(|key| {
            let property = described.iter().find(|(k, _)| *k == key).map(|(_, p)| *p);
            let value = &data[key];
            let artifact =
                property.is_some_and(|p| p.get("x-type") == Some(&Value::from("artifact")));
            let shown = match value {
                Value::String(path) if artifact || path.starts_with("artifacts/") => {
                    let path = if path.starts_with("artifacts/") {
                        path.clone()
                    } else {
                        format!("artifacts/{path}")
                    };
                    Shown::Artifact(path)
                }
                Value::String(text) => Shown::Text(markdown::said_to_html(text)),
                other => Shown::Json(serde_json::to_string_pretty(other).unwrap_or_default()),
            };
            Field {
                title: property
                    .and_then(|p| p.get("title"))
                    .and_then(Value::as_str)
                    .unwrap_or(key)
                    .to_owned(),
                key: key.clone(),
                shown,
            }
        })
        .collect()
}

/// `GET /ui/management/runs/{request_id}/result`: the section, refreshed when the run changes.
pub async fn section(
    l: Lang,
    State(state): State<AppState>,
    Kind(scope): Kind,
    Path(request_id): Path<String>,
) -> Page {
    let (request, run) = state
        .jobs
        .request_and_run(&scope, &request_id)
        .await
        .map_err(ApiError::from)?;
    render(&of(l, &state, &request, &run).await)
}

/// `?debug=` of a bundle.
#[derive(Debug, Deserialize)]
pub struct BundleQuery {
    #[serde(default)]
    debug: bool,
}

/// `GET /ui/runs/{request_id}/download?path=artifacts/...`: one artifact, as an attachment.
pub async fn artifact(
    State(state): State<AppState>,
    Kind(scope): Kind,
    Path(request_id): Path<String>,
    Query(query): Query<FilePath>,
) -> Result<Response, ConsoleError> {
    let path = query.required()?;
    let (file, name) = state
        .jobs
        .artifact_file(&scope, &request_id, &path)
        .await
        .map_err(ApiError::from)?;
    Ok(crate::api::jobs::send_file(file.into(), &name, "application/octet-stream").await?)
}

/// `GET /ui/runs/{request_id}/bundle[?debug=true]`: the run's bundle.
pub async fn bundle(
    State(state): State<AppState>,
    Kind(scope): Kind,
    Path(request_id): Path<String>,
    Query(query): Query<BundleQuery>,
) -> Result<Response, ConsoleError> {
    Ok(crate::api::jobs::send_bundle(&state, &scope, &request_id, query.debug).await?)
}

/// The image types a preview shows inline: raster formats only (an SVG could carry script).
const IMAGES: [(&str, &str); 5] = [
    ("png", "image/png"),
    ("jpg", "image/jpeg"),
    ("jpeg", "image/jpeg"),
    ("gif", "image/gif"),
    ("webp", "image/webp"),
];

/// The artifact path (`artifacts/...`) of a run-folder path, if it is one.
pub(super) fn artifact_of(folder_path: &str) -> Option<&str> {
    folder_path
        .strip_prefix(crate::run_folder::WORKSPACE)?
        .strip_prefix('/')
        .filter(|p| p.starts_with("artifacts/"))
}

/// The type an artifact's preview shows it as an image with, by its extension.
pub(super) fn image_type(path: &str) -> Option<&'static str> {
    let extension = path.rsplit_once('.')?.1.to_ascii_lowercase();
    IMAGES
        .iter()
        .find(|(e, _)| *e == extension)
        .map(|(_, t)| *t)
}

/// `GET /ui/runs/{request_id}/image?path=artifacts/...`: a raster artifact inline, for its
/// preview; sandboxed and never sniffed, so a file that is not what its name says stays inert.
pub async fn image(
    State(state): State<AppState>,
    Kind(scope): Kind,
    Path(request_id): Path<String>,
    Query(query): Query<FilePath>,
) -> Result<Response, ConsoleError> {
    let path = query.required()?;
    let kind = image_type(&path).ok_or_else(|| {
        ApiError::bad_request("Only PNG, JPEG, GIF and WebP artifacts preview as images")
    })?;
    let (file, name) = state
        .jobs
        .artifact_file(&scope, &request_id, &path)
        .await
        .map_err(ApiError::from)?;
    let mut response = crate::api::jobs::send_file(file.into(), &name, kind).await?;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_DISPOSITION,
        HeaderValue::from_static("inline"),
    );
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; sandbox"),
    );
    Ok(response.into_response())
}
