//! `/ui`: the installed skills with a package upload whose install is followed until it ends,
//! and one skill's details with its files and a read-only preview.

use askama::Template;
use axum::extract::multipart::{Multipart, MultipartRejection};
use axum::extract::{Path, Query, State};
use serde::Deserialize;

use super::{Lang, Page, render};
use crate::api::error::ApiError;
use crate::api::management::{self, SkillSummary};
use crate::api::packages;
use crate::browse::{self, Preview, TreeEntry};
use crate::state::AppState;

#[derive(Template)]
#[template(path = "skills.html")]
struct SkillsPage {
    l: Lang,
    section: &'static str,
    skills: Vec<SkillSummary>,
    highlight: Option<String>,
}

#[derive(Template)]
#[template(path = "partials/skills_table.html")]
struct SkillsTable {
    l: Lang,
    skills: Vec<SkillSummary>,
    highlight: Option<String>,
}

#[derive(Template)]
#[template(path = "partials/install_status.html")]
struct InstallStatus {
    l: Lang,
    request_id: String,
    status: &'static str,
    finished: bool,
    skill_id: Option<String>,
    error: Option<String>,
}

#[derive(Template)]
#[template(path = "skill.html")]
struct SkillPage {
    l: Lang,
    section: &'static str,
    skill: SkillSummary,
    files: Vec<TreeEntry>,
    /// Where a file's preview is fetched, the path appended (skill ids need no escaping).
    preview_url: String,
}

#[derive(Template)]
#[template(path = "partials/preview.html")]
pub(super) struct PreviewFragment {
    pub l: Lang,
    pub path: String,
    pub preview: Preview,
}

/// `?highlight_skill_id=`: the row to mark (the skill an install just brought).
#[derive(Debug, Deserialize)]
pub struct Highlight {
    highlight_skill_id: Option<String>,
}

/// `GET /ui`.
pub async fn page(l: Lang, State(state): State<AppState>) -> Page {
    render(&SkillsPage {
        l,
        section: "skills",
        skills: management::summaries(&state).await,
        highlight: None,
    })
}

/// `GET /ui/management/skills/table`.
pub async fn table(l: Lang, State(state): State<AppState>, Query(query): Query<Highlight>) -> Page {
    render(&SkillsTable {
        l,
        skills: management::summaries(&state).await,
        highlight: query.highlight_skill_id,
    })
}

/// `POST /ui/skill-packages/install`: the upload, answered with its status fragment, which
/// polls until the install ends.
pub async fn install(
    l: Lang,
    State(state): State<AppState>,
    multipart: Result<Multipart, MultipartRejection>,
) -> Page {
    let request_id = packages::receive_package(&state, multipart).await?;
    status_fragment(l, &state, request_id).await
}

/// `GET /ui/skill-packages/{request_id}/status`.
pub async fn install_status(
    l: Lang,
    State(state): State<AppState>,
    Path(request_id): Path<String>,
) -> Page {
    status_fragment(l, &state, request_id).await
}

async fn status_fragment(l: Lang, state: &AppState, request_id: String) -> Page {
    let request = state
        .installer
        .status(&request_id)
        .await
        .map_err(ApiError::from)?
        .ok_or_else(|| ApiError::not_found("Install request not found"))?;
    render(&InstallStatus {
        l,
        request_id,
        status: request.status.as_str(),
        finished: !request.status.is_active(),
        skill_id: request.skill_id,
        error: request.error,
    })
}

/// `GET /ui/skills/{skill_id}`.
pub async fn detail(l: Lang, State(state): State<AppState>, Path(skill_id): Path<String>) -> Page {
    let entry = management::skill_entry(&state, &skill_id).await?;
    let (skill, files) = tokio::task::spawn_blocking(move || {
        let files = browse::tree(management::folder_of(&entry), &[])
            .map_err(|_| ApiError::not_found("Skill path not found"))?;
        Ok::<_, ApiError>((management::summary(&entry), files))
    })
    .await
    .map_err(|e| ApiError::Internal(e.into()))??;
    render(&SkillPage {
        l,
        section: "skills",
        preview_url: format!("/ui/skills/{}/view?path=", skill.id),
        skill,
        files,
    })
}

/// `?path=` of a file preview.
#[derive(Debug, Deserialize)]
pub struct FilePath {
    path: Option<String>,
}

impl FilePath {
    /// The path; 400 naming the parameter when it is missing.
    pub fn required(self) -> Result<String, ApiError> {
        self.path
            .ok_or_else(|| ApiError::bad_request("Query parameter 'path' is required"))
    }
}

/// `GET /ui/skills/{skill_id}/view?path=`: text, "binary" or "too large"; absolute paths,
/// `..` and links out of the skill folder are refused.
pub async fn view(
    l: Lang,
    State(state): State<AppState>,
    Path(skill_id): Path<String>,
    Query(query): Query<FilePath>,
) -> Page {
    let raw = query.required()?;
    let path = browse::relative_path(&raw).map_err(ApiError::from)?;
    let entry = management::skill_entry(&state, &skill_id).await?;
    let folder = management::folder_of(&entry).to_path_buf();
    let rel = path.clone();
    let preview = tokio::task::spawn_blocking(move || browse::preview(&folder, &rel, &[]))
        .await
        .map_err(|e| ApiError::Internal(e.into()))?
        .map_err(ApiError::from)?;
    let path = path.to_string();
    render(&PreviewFragment { l, path, preview })
}
