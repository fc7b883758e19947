//! `SKILL.md` skills by progressive disclosure: `GET /v1/skill-docs` (level 1: name,
//! description, location), `GET /v1/skill-docs/{name}` (level 2: the body and what surrounds
//! it), `GET /v1/skill-docs/{name}/files/{path}` (level 3: one file of the skill),
//! `GET /v1/skill-docs:catalog` (the `<available_skills>` block) and `POST
//! /v1/skill-docs:validate`.

use std::io::Read as _;
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{FromRequest, Multipart, Path, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use skill_runner_types::RelPath;

use crate::api::error::{ApiError, ApiResult, blocking};
use crate::skill::docs::document::{Document, Finding, Profile, check};
use crate::skill::docs::index::{Entry, Problem, resources};
use crate::state::AppState;

/// A skill as level 1 lists it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SkillDocSummary {
    pub name: String,
    pub description: String,
    /// The `SKILL.md` file.
    pub location: String,
}

/// The indexed skills.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SkillDocList {
    pub skills: Vec<SkillDocSummary>,
    /// Files not indexed, shadowed duplicates, scans cut short: `{location, message}`.
    #[schema(value_type = Vec<Object>)]
    pub problems: Vec<Problem>,
    /// A root had more folders than the scan reads.
    pub truncated: bool,
    /// The roots searched, strongest first.
    pub roots: Vec<String>,
}

/// Level 1: every indexed skill, by name.
#[utoipa::path(get, path = "/v1/skill-docs", tag = "skill-docs",
    responses((status = 200, body = SkillDocList)))]
pub async fn list(State(state): State<AppState>) -> Json<SkillDocList> {
    let index = state.skill_docs.index().await;
    Json(SkillDocList {
        skills: index
            .skills
            .values()
            .map(|e| SkillDocSummary {
                name: e.name.clone(),
                description: e.description.clone(),
                location: e.location.display().to_string(),
            })
            .collect(),
        problems: index.problems.clone(),
        truncated: index.truncated,
        roots: state
            .skill_docs
            .roots()
            .iter()
            .map(|r| r.display().to_string())
            .collect(),
    })
}

/// The `<available_skills>` block a model is given (`text/plain`; empty when there are none).
#[utoipa::path(get, path = "/v1/skill-docs:catalog", tag = "skill-docs",
    responses((status = 200, description = "The block", content_type = "text/plain")))]
pub async fn catalog(State(state): State<AppState>) -> Response {
    let xml = state.skill_docs.index().await.catalog();
    ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], xml).into_response()
}

/// A skill as level 2 shows it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SkillDocDetail {
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub document: Document,
    pub location: String,
    pub base_dir: String,
    pub root: String,
    /// The skill's other files, relative to `base_dir` (level 3 serves them).
    pub resources: Vec<String>,
    /// What the `lenient` profile noticed.
    #[schema(value_type = Vec<Object>)]
    pub warnings: Vec<Finding>,
}

async fn entry(state: &AppState, name: &str) -> ApiResult<Arc<Entry>> {
    state
        .skill_docs
        .index()
        .await
        .skills
        .get(name)
        .cloned()
        .ok_or_else(|| ApiError::not_found(format!("no skill document named '{name}'")))
}

/// Level 2: the skill's body (without frontmatter), summary, checklist, fields and files.
#[utoipa::path(get, path = "/v1/skill-docs/{name}", tag = "skill-docs",
    params(("name" = String, Path)),
    responses((status = 200, body = SkillDocDetail), (status = 404, description = "No such skill")))]
pub async fn detail(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<Json<SkillDocDetail>> {
    let entry = entry(&state, &name).await?;
    let base_dir = entry.base_dir.clone();
    let resources = blocking(move || resources(&base_dir)).await?;
    Ok(Json(SkillDocDetail {
        document: entry.checked.document.clone(),
        location: entry.location.display().to_string(),
        base_dir: entry.base_dir.display().to_string(),
        root: entry.root.display().to_string(),
        resources,
        warnings: entry.checked.warnings.clone(),
    }))
}

/// The largest file level 3 serves.
const MAX_FILE_BYTES: u64 = 5 * 1024 * 1024;

/// Level 3: one file of the skill, by its path relative to the skill's folder. Absolute paths,
/// `..`, links on the way and files over 5 MiB are refused; text is served as `text/plain`,
/// anything else as `application/octet-stream` (never as a page of this site).
#[utoipa::path(get, path = "/v1/skill-docs/{name}/files/{path}", tag = "skill-docs",
    params(("name" = String, Path), ("path" = String, Path, description = "Relative to the skill's folder")),
    responses(
        (status = 200, description = "The file"),
        (status = 400, description = "The path leaves the folder, or passes a link"),
        (status = 404, description = "No such skill or file"),
        (status = 413, description = "Larger than 5 MiB"),
    ))]
pub async fn file(
    State(state): State<AppState>,
    Path((name, path)): Path<(String, String)>,
) -> ApiResult<Response> {
    let entry = entry(&state, &name).await?;
    let Ok(rel) = RelPath::parse(&path) else {
        return Err(ApiError::bad_request(format!(
            "path: '{path}' must be relative to the skill's folder, without '..'"
        )));
    };
    let base_dir = entry.base_dir.clone();
    let read = blocking(move || -> std::io::Result<Option<Vec<u8>>> {
        let file = crate::run_folder::open_beneath(&base_dir, rel.as_ref())?;
        if file.metadata()?.len() > MAX_FILE_BYTES {
            return Ok(None);
        }
        let mut bytes = Vec::new();
        file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes)?;
        Ok(Some(bytes))
    })
    .await?;
    let bytes = match read {
        Ok(Some(bytes)) => bytes,
        Ok(None) => {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("path: '{path}' is larger than {MAX_FILE_BYTES} bytes"),
            ));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ApiError::not_found(format!(
                "path: '{path}' is not a file of skill '{name}'"
            )));
        }
        Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => {
            return Err(ApiError::bad_request(format!(
                "path: '{path}' is refused ({e})"
            )));
        }
        Err(e) => return Err(ApiError::Internal(e.into())),
    };
    let content_type = if std::str::from_utf8(&bytes).is_ok() {
        "text/plain; charset=utf-8"
    } else {
        "application/octet-stream"
    };
    let mut response = bytes.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    Ok(response)
}

/// A `SKILL.md` to check, given as text.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct ValidateBody {
    pub skill_md: String,
    /// The folder it would live in (its name must equal the skill's under `strict`).
    pub dir_name: Option<String>,
    /// `strict` (default), `lenient` or `anthropic-upload`.
    pub profile: Option<String>,
}

/// What a profile found.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Validation {
    pub valid: bool,
    pub profile: String,
    #[schema(value_type = Object)]
    pub document: Document,
    #[schema(value_type = Vec<Object>)]
    pub errors: Vec<Finding>,
    #[schema(value_type = Vec<Object>)]
    pub warnings: Vec<Finding>,
}

/// The largest `SKILL.md` or skill zip checked.
pub const MAX_VALIDATE_BYTES: usize = 50 * 1024 * 1024;

/// Checks a `SKILL.md` under a profile: JSON `{skill_md, dir_name?, profile?}`, or a multipart
/// form with `file` (a zip of the skill folder: `SKILL.md` at its top or in its one top
/// folder, whose name is the folder name) and an optional `profile` field. Nothing is stored.
#[utoipa::path(post, path = "/v1/skill-docs:validate", tag = "skill-docs",
    request_body(content = ValidateBody, description = "JSON, or multipart with `file` (zip) and `profile`"),
    responses(
        (status = 200, body = Validation),
        (status = 400, description = "Unknown profile, or a zip without SKILL.md"),
        (status = 422, description = "Not JSON of this shape"),
    ))]
pub async fn validate(
    State(state): State<AppState>,
    request: Request,
) -> ApiResult<Json<Validation>> {
    let multipart = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("multipart/form-data"));
    let (text, dir_name, profile) = if multipart {
        let form = Multipart::from_request(request, &state)
            .await
            .map_err(|e| ApiError::bad_request(e.body_text()))?;
        read_form(form).await?
    } else {
        let Json(body) = Json::<ValidateBody>::from_request(request, &state)
            .await
            .map_err(super::jobs::bad_json)?;
        (body.skill_md, body.dir_name, body.profile)
    };
    let profile_name = profile.unwrap_or_else(|| "strict".into());
    let profile = Profile::parse(&profile_name).ok_or_else(|| {
        ApiError::bad_request(format!(
            "profile: '{profile_name}' is not one of {}",
            Profile::NAMES
        ))
    })?;
    let checked = check(&text, dir_name.as_deref(), profile);
    Ok(Json(Validation {
        valid: checked.valid(),
        profile: profile_name,
        document: checked.document,
        errors: checked.errors,
        warnings: checked.warnings,
    }))
}

/// The `SKILL.md` text, folder name and profile of a multipart form.
async fn read_form(mut form: Multipart) -> ApiResult<(String, Option<String>, Option<String>)> {
    let (mut zip, mut profile, mut dir_name) = (None, None, None);
    while let Some(field) = form
        .next_field()
        .await
        .map_err(|e| ApiError::bad_request(e.body_text()))?
    {
        let name = field.name().unwrap_or_default().to_owned();
        let bytes: Bytes = field
            .bytes()
            .await
            .map_err(|e| ApiError::bad_request(e.body_text()))?;
        match name.as_str() {
            "file" => zip = Some(bytes),
            "profile" => profile = Some(String::from_utf8_lossy(&bytes).trim().to_owned()),
            "dir_name" => dir_name = Some(String::from_utf8_lossy(&bytes).trim().to_owned()),
            _ => {}
        }
    }
    let zip = zip.ok_or_else(|| ApiError::missing_field("body", "file"))?;
    let (text, folder) = blocking(move || skill_md_of_zip(&zip)).await??;
    Ok((text, dir_name.or(folder), profile))
}

/// `SKILL.md` of a zipped skill folder and the folder's name (none when it sits at the top).
fn skill_md_of_zip(bytes: &[u8]) -> ApiResult<(String, Option<String>)> {
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(bytes))
        .map_err(|e| ApiError::bad_request(format!("file: not a zip archive ({e})")))?;
    let names: Vec<String> = archive
        .file_names()
        .filter_map(Result::ok)
        .map(|name| name.into_owned())
        .collect();
    let found = names.iter().find_map(|name| {
        let parts: Vec<&str> = name.split('/').collect();
        match parts.as_slice() {
            ["SKILL.md"] => Some((name.clone(), None)),
            [folder, "SKILL.md"] => Some((name.clone(), Some((*folder).to_owned()))),
            _ => None,
        }
    });
    let Some((entry, folder)) = found else {
        return Err(ApiError::bad_request(
            "file: the zip has no SKILL.md at its top or in its top folder",
        ));
    };
    let file = archive
        .by_name(&entry)
        .map_err(|e| ApiError::bad_request(format!("file: {e}")))?;
    let mut text = String::new();
    file.take(1024 * 1024)
        .read_to_string(&mut text)
        .map_err(|_| ApiError::bad_request("file: SKILL.md is not UTF-8 text"))?;
    Ok((text, folder))
}
