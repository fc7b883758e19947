//! `/ui`: the installed skills with a package upload whose install is followed until it ends,
//! and one skill's page: what it does (`SKILL.md` rendered), its schemas, versions, latest runs
//! and files, and the form that runs it — generated from its input and parameter schemas,
//! offering the engines it supports that are logged in.

use crate::api::auth::Acting;
use crate::api::jobs::Kind;
use crate::jobs::schedules::ScheduleInput;
use crate::jobs::{Family, Scope};
use askama::Template;
use axum::extract::multipart::{Multipart, MultipartRejection};
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use skill_runner_core::tenants::{Caller, Role};
use skill_runner_types::RelPath;
use skill_runner_web::form::{self, FormView, Schema, Section};
use skill_runner_web::markdown;

use super::drafts;
use super::runs::{RunRow, RunsTable, urlencoding};
use super::{ConsoleError, Lang, Page, render};
use crate::api::error::ApiError;
use crate::api::jobs::ClientAddress;
use crate::api::management::{self, SkillSummary};
use crate::api::packages;
use crate::api::run_views::RunState;
use crate::browse::{self, Preview, TreeEntry};
use crate::engines::Engine;
use crate::jobs::create::{NewJob, UploadFiles};
use crate::skill::SkillFormat;
use crate::state::AppState;
use crate::store::{Request, RunFilter};

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
    /// A package of several skills: how each went.
    skills: Vec<SkillOutcome>,
}

/// One skill of a package of several, as its install status shows it.
#[derive(Debug, Deserialize)]
struct SkillOutcome {
    path: String,
    skill_id: Option<String>,
    status: String,
    action: Option<String>,
    error: Option<String>,
}

#[derive(Template)]
#[template(path = "skill.html")]
struct SkillPage {
    l: Lang,
    section: &'static str,
    skill: SkillSummary,
    description: Option<String>,
    /// A standard Agent Skills skill (no runner.json): its task is a prompt.
    agent_skill: bool,
    /// The `SKILL.md` frontmatter's `license`.
    license: Option<String>,
    /// `SKILL.md`, rendered and sanitised.
    instructions: Option<String>,
    /// The input, parameter and output schemas (role, pretty JSON).
    schemas: Vec<(&'static str, String)>,
    /// Versions updates replaced, newest first.
    versions: Vec<String>,
    /// The skill's latest runs (a list without pages of its own).
    table: RunsTable,
    files: Vec<TreeEntry>,
    /// Where a file's preview is fetched, the path appended (skill ids need no escaping).
    preview_url: String,
    /// The run form: absent for a degraded skill.
    form: FormView,
    runnable: bool,
    /// Whether the caller may start runs (not with a `read` key).
    may_run: bool,
    engines: Vec<String>,
    unready: Vec<String>,
    modes: Vec<String>,
    models: Vec<(String, Vec<String>)>,
    /// The run whose request fills the form ("Run with changes").
    from: Option<String>,
    /// Whether the form has file inputs (which a repeated run cannot carry over).
    has_files: bool,
    /// Why the service refused the last submission, if it did.
    refused: Option<String>,
}

/// How many of the skill's latest runs its page lists.
const RECENT_RUNS: u32 = 10;

#[derive(Template)]
#[template(path = "partials/preview.html")]
pub(super) struct PreviewFragment {
    pub l: Lang,
    pub path: String,
    pub preview: Preview,
    /// A Markdown file rendered (sanitised).
    pub rendered: Option<String>,
    /// A JSON file pretty-printed.
    pub pretty: Option<String>,
    /// Where a raster image is shown from.
    pub image: Option<String>,
}

impl PreviewFragment {
    /// The preview of `path`; `image_url` serves it inline when it is a raster image.
    pub fn of(l: Lang, path: String, preview: Preview, image_url: Option<String>) -> Self {
        let lower = path.to_ascii_lowercase();
        let content = preview.content.as_deref();
        let rendered = content
            .filter(|_| lower.ends_with(".md") || lower.ends_with(".markdown"))
            .map(markdown::to_html);
        let pretty = content
            .filter(|_| lower.ends_with(".json"))
            .and_then(|text| serde_json::from_str::<serde_json::Value>(text).ok())
            .and_then(|value| serde_json::to_string_pretty(&value).ok());
        Self {
            l,
            path,
            preview,
            rendered,
            pretty,
            image: image_url,
        }
    }
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
    Acting(caller): Acting,
    multipart: Result<Multipart, MultipartRejection>,
) -> Page {
    let request_id = packages::receive_package(&state, &caller, multipart).await?;
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
        skills: request
            .skills
            .as_deref()
            .and_then(|report| serde_json::from_str(report).ok())
            .unwrap_or_default(),
    })
}

/// `?from=`: the run whose request fills the form; `?draft=`: a form sent back to show again.
#[derive(Debug, Deserialize)]
pub struct From {
    from: Option<String>,
    draft: Option<String>,
}

/// The skill page without its form's state: what the skill is, its runs, and what its form
/// offers.
async fn skill_page(
    l: Lang,
    state: &AppState,
    caller: &Caller,
    scope: &Scope,
    skill_id: &str,
) -> Result<SkillPage, ConsoleError> {
    let entry = management::skill_entry(state, skill_id).await?;
    let manifest = entry.manifest().cloned();
    let (skill, files, instructions, schemas, fields) = tokio::task::spawn_blocking({
        let manifest = manifest.clone();
        move || {
            let folder = management::folder_of(&entry);
            let files = browse::tree(folder, &[])
                .map_err(|_| ApiError::not_found("Skill path not found"))?;
            // Read with the same care as any preview: the folder is the service's own, but
            // a package chose its contents.
            let text = |rel: &str| {
                browse::preview(folder, &RelPath::parse(rel).ok()?, &[])
                    .ok()?
                    .content
            };
            let instructions = text("SKILL.md").map(|md| markdown::to_html(&md));
            let (schemas, fields) = match &manifest {
                Some(m) => {
                    // Read from the file, which keeps the order its properties are written
                    // in; a standard skill's contract has no file.
                    let schema = |rel: Option<&String>, doc: &serde_json::Value| match rel {
                        Some(rel) => text(rel).and_then(|t| Schema::parse(&t).ok()),
                        None => Schema::parse(&doc.to_string()).ok(),
                    };
                    let paths = m.schemas.as_ref();
                    let (input, parameter) = (
                        schema(paths.and_then(|p| p.input.as_ref()), &m.schema_docs.input),
                        schema(
                            paths.and_then(|p| p.parameter.as_ref()),
                            &m.schema_docs.parameter,
                        ),
                    );
                    let shown = [
                        ("input", &m.schema_docs.input),
                        ("parameter", &m.schema_docs.parameter),
                        ("output", &m.schema_docs.output),
                    ]
                    .into_iter()
                    .map(|(role, doc)| {
                        (role, serde_json::to_string_pretty(doc).unwrap_or_default())
                    })
                    .collect();
                    let fields = match m.format {
                        SkillFormat::AgentSkill => {
                            form::task_fields(l.tr("form.task"), l.tr("form.task_files"))
                        }
                        SkillFormat::RunnerJson => form::fields(input.as_ref(), parameter.as_ref()),
                    };
                    (shown, fields)
                }
                None => (Vec::new(), Vec::new()),
            };
            Ok::<_, ApiError>((
                management::summary(&entry),
                files,
                instructions,
                schemas,
                fields,
            ))
        }
    })
    .await
    .map_err(|e| ApiError::Internal(e.into()))??;

    let engines_admin = state.jobs.engines();
    let mut engines = Vec::new();
    let mut unready = Vec::new();
    let mut models = Vec::new();
    if let Some(m) = &manifest {
        let mut offered = m.effective_engines.clone();
        offered.sort_by_key(|e| *e != m.default_engine);
        for engine in offered {
            let ready = engine == Engine::Script
                || engines_admin
                    .auth_status(engine)
                    .is_some_and(|a| a.auth_ready);
            if !ready {
                unready.push(engine.as_str().to_owned());
                continue;
            }
            engines.push(engine.as_str().to_owned());
            if engine != Engine::Script
                && let Some(list) = engines_admin.models(engine).await
            {
                models.push((
                    engine.as_str().to_owned(),
                    list.models.into_iter().map(|m| m.id).collect(),
                ));
            }
        }
    }
    let (rows, _) = state
        .jobs
        .list(
            scope,
            &RunFilter {
                skill_id: Some(skill_id.to_owned()),
                limit: RECENT_RUNS,
                ..RunFilter::default()
            },
        )
        .await
        .map_err(ApiError::from)?;
    let has_files = fields.iter().any(|f| f.section == Section::File);
    Ok(SkillPage {
        l,
        section: "skills",
        description: manifest.as_ref().and_then(|m| m.description.clone()),
        agent_skill: manifest
            .as_ref()
            .is_some_and(|m| m.format == SkillFormat::AgentSkill),
        license: manifest.as_ref().and_then(|m| m.license.clone()),
        instructions,
        schemas,
        versions: state.installer.archived_versions(skill_id),
        table: RunsTable {
            rows: rows
                .into_iter()
                .map(|(request, run)| RunRow::of(l, RunState::of(request, run)))
                .collect(),
            this_page: String::new(),
            next_page: None,
            first_page: None,
            live: false,
        },
        preview_url: format!("/ui/skills/{}/view?path=", skill.id),
        files,
        runnable: manifest.is_some() && !engines.is_empty(),
        may_run: caller.may(Role::Submit),
        form: FormView {
            lang: l,
            ..FormView::new(fields)
        },
        modes: manifest
            .iter()
            .flat_map(|m| {
                m.execution_modes
                    .iter()
                    .map(|mode| mode.as_str().to_owned())
            })
            .collect(),
        engines,
        unready,
        models,
        from: None,
        has_files,
        refused: None,
        skill,
    })
}

/// `GET /ui/skills/{skill_id}[?from=<request_id>]`: the skill, its latest runs and its run
/// form; with `from`, the form holds that run's request to change and start again.
pub async fn detail(
    l: Lang,
    State(state): State<AppState>,
    Acting(caller): Acting,
    Kind(scope): Kind,
    Path(skill_id): Path<String>,
    Query(query): Query<From>,
) -> Page {
    let mut page = skill_page(l, &state, &caller, &scope, &skill_id).await?;
    if let Some(from) = query.from.filter(|f| !f.is_empty()) {
        let (request, _) = state
            .jobs
            .request_and_run(&scope, &from)
            .await
            .map_err(ApiError::from)?;
        page.form.values = repeated(&page.form.fields, &request);
        page.from = Some(from);
    }
    if let Some(draft) = query
        .draft
        .and_then(|token| drafts::shown(caller.tenant_id.as_ref(), &token))
    {
        page.form.values = draft.values;
        page.form.errors = draft.errors;
        page.refused = draft.refused;
        page.from = draft.from;
    }
    render(&page)
}

/// `GET /ui/skills/{skill_id}/run`: the form's own page (an address kept from before the
/// form answered with redirects, or typed).
pub async fn run_form(Path(skill_id): Path<String>) -> Redirect {
    Redirect::to(&format!("/ui/skills/{}#run-form", urlencoding(&skill_id)))
}

/// The form's values that repeat `request`.
fn repeated(fields: &[form::Field], request: &Request) -> Vec<(String, String)> {
    let mut values = form::values_of(fields, &request.input, &request.parameter);
    if let Some(engine) = request.engine {
        values.push(("engine".into(), engine.as_str().into()));
    }
    if let Some(model) = &request.model {
        values.push(("model".into(), model.clone()));
    }
    let options = &request.runtime_options;
    values.push((
        "execution_mode".into(),
        options.execution_mode.as_str().into(),
    ));
    if options.debug {
        values.push(("debug".into(), "true".into()));
    }
    values
}

/// `POST /ui/skills/{skill_id}/run` (the run form, multipart): starts the run and goes to its
/// page; a form with mistakes, or one the service refused, goes back to the skill's page,
/// which shows it again saying why (see [`drafts`]).
pub async fn run(
    l: Lang,
    State(state): State<AppState>,
    Kind(scope): Kind,
    Acting(caller): Acting,
    ClientAddress(client): ClientAddress,
    Path(skill_id): Path<String>,
    multipart: Result<Multipart, MultipartRejection>,
) -> Result<Response, ConsoleError> {
    let page = skill_page(l, &state, &caller, &scope, &skill_id).await?;
    let multipart = multipart
        .map_err(|e| ApiError::bad_request(format!("expected the run form (multipart): {e}")))?;
    let (values, files) = form::receive(multipart)
        .await
        .map_err(ApiError::bad_request)?;
    let named = |name: &str| form::value(&values, name);
    // A form sent back is shown by a redirect to the skill's page (post/redirect/get).
    let tenant = caller.tenant_id.to_string();
    let refuse = |errors: Vec<form::FieldError>, refused: Option<String>| {
        let token = drafts::keep(
            &tenant,
            drafts::Draft {
                values: values.clone(),
                errors,
                refused,
                from: named("from"),
            },
        );
        // The page comes back in the language the form was sent in.
        let to = format!(
            "/ui/skills/{}?draft={token}&lang={}#run-form",
            urlencoding(&skill_id),
            l.code()
        );
        Ok::<_, ConsoleError>(Redirect::to(&to).into_response())
    };
    let (form::Submitted { input, parameter }, engine, files) =
        match form::check_files(&page.form.fields, &values, files, &page.engines) {
            Ok(checked) => checked,
            Err(errors) => return refuse(errors, None),
        };
    let mut options = serde_json::Map::new();
    if let Some(mode) = named("execution_mode") {
        options.insert("execution_mode".into(), mode.into());
    }
    for flag in ["no_cache", "debug"] {
        if named(flag).is_some() {
            options.insert(flag.into(), true.into());
        }
    }
    if named("action").as_deref() == Some("schedule") {
        if !files.is_empty() {
            return refuse(Vec::new(), Some(l.tr("schedules.no_files").to_owned()));
        }
        let mut job = serde_json::Map::new();
        job.insert("skill_id".into(), skill_id.clone().into());
        job.insert("engine".into(), engine.into());
        job.insert("input".into(), input.into());
        job.insert("parameter".into(), parameter.into());
        job.insert("runtime_options".into(), options.into());
        if let Some(model) = named("model") {
            job.insert("model".into(), model.into());
        }
        let schedule = ScheduleInput {
            job: Some(job),
            cron: named("schedule_cron"),
            timezone: named("schedule_timezone"),
            overlap: named("schedule_overlap"),
            ..ScheduleInput::default()
        };
        return match state.jobs.create_schedule(&caller, schedule).await {
            Ok(_) => Ok(Redirect::to("/ui/schedules").into_response()),
            Err(e) => refuse(Vec::new(), Some(ApiError::from(e).into_message().1)),
        };
    }
    let job = NewJob {
        skill_id: skill_id.clone(),
        engine: Some(engine),
        input: input.into(),
        parameter: parameter.into(),
        model: named("model"),
        provider_id: None,
        effort: None,
        runtime_options: Some(options.into()),
        skills: Vec::new(),
        arrival: Default::default(),
        request_id: None,
        client_address: client,
        caller,
    };
    match start(&state, job, &files).await {
        Ok(request_id) => Ok(Redirect::to(&format!("/ui/runs/{request_id}")).into_response()),
        Err(e) => refuse(Vec::new(), Some(e.into_message().1)),
    }
}

/// Creates the job and, for a skill with file inputs, sends its upload: the chosen files
/// zipped under their input keys (as `/upload` takes them), or none. The run's request id.
pub(super) async fn start(
    state: &AppState,
    job: NewJob,
    files: &[form::Chosen],
) -> Result<String, ApiError> {
    // The upload is the new request's own: claimed in its tenant.
    let scope = Scope {
        family: Family::Jobs,
        tenant: Some(job.caller.tenant_id.clone()),
    };
    let admitted = state.jobs.create_job(job).await?;
    let request_id = admitted.request_id;
    if admitted.status.is_some() {
        return Ok(request_id);
    }
    let request = state.jobs.claim_upload(&scope, &request_id).await?;
    let mut upload = UploadFiles::default();
    if !files.is_empty() {
        let dest = state
            .jobs
            .upload_dir(request.kind, &request_id)
            .join("inputs.zip");
        let written = async {
            let zip = form::zip_files(files).map_err(std::io::Error::other)?;
            tokio::fs::create_dir_all(dest.parent().expect("the zip has a folder")).await?;
            tokio::fs::write(&dest, zip).await
        }
        .await;
        if let Err(e) = written {
            state.jobs.release_upload(&request).await;
            return Err(ApiError::Internal(e.into()));
        }
        upload.inputs = Some(dest);
    }
    state.jobs.accept_upload(request, upload).await?;
    Ok(request_id)
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
    render(&PreviewFragment::of(l, path.to_string(), preview, None))
}
