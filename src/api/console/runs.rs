//! `/ui/runs`: the run list, and one run's page — its state, live output, pending question with
//! a reply form, cancel, and its folder's files.

use crate::api::auth::Acting;
use crate::api::jobs::Kind;
use crate::jobs::Scope;
use askama::Template;
use axum::Form;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use skill_runner_web::question::{self, Question};

use super::run_result;
use super::skills::{FilePath, PreviewFragment};
use super::timeline;
use super::{ConsoleError, Lang, Page, render};
use crate::api::error::ApiError;
use crate::api::jobs::ClientAddress;
use crate::api::management::RunListQuery;
use crate::api::run_views::RunState;
use crate::browse::TreeEntry;
use crate::clock::Timestamp;
use crate::engines::Engine;
use crate::jobs::create::NewJob;
use crate::jobs::interaction::Reply;
use crate::skill::ExecutionMode;
use crate::state::AppState;
use crate::store::{Request, RequestKind, Run, RunFilter, RunStatus, UploadState};

/// How many runs a page of the list shows.
const PAGE_SIZE: u32 = 50;

/// The run list's filters as the console's form sends them: the API's, with the time as a
/// window back from now (`within`: `1h`, `24h`, `7d` or `30d`) instead of a moment.
#[derive(Debug, Default, Clone, Deserialize)]
pub struct ListQuery {
    status: Option<String>,
    skill_id: Option<String>,
    engine: Option<String>,
    within: Option<String>,
    q: Option<String>,
    cursor: Option<String>,
}

/// The windows the form offers, with how far back each reaches.
const WINDOWS: [(&str, u64); 4] = [
    ("1h", 3600),
    ("24h", 86_400),
    ("7d", 7 * 86_400),
    ("30d", 30 * 86_400),
];

impl ListQuery {
    fn filter(&self) -> Result<RunFilter, ApiError> {
        let since = match self.within.as_deref().filter(|w| !w.is_empty()) {
            None => None,
            Some(window) => {
                let (_, seconds) = WINDOWS.iter().find(|(w, _)| *w == window).ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "within must be one of 1h, 24h, 7d, 30d, not '{window}'"
                    ))
                })?;
                Some(Timestamp::before(std::time::Duration::from_secs(*seconds)).to_string())
            }
        };
        RunListQuery {
            limit: Some(PAGE_SIZE),
            status: self.status.clone(),
            skill_id: self.skill_id.clone(),
            engine: self.engine.clone(),
            since,
            q: self.q.clone(),
            cursor: self.cursor.clone(),
            tenant_id: None,
        }
        .filter(PAGE_SIZE)
    }

    /// The query string of these filters with another cursor (none: the first page).
    fn with_cursor(&self, cursor: Option<&str>) -> String {
        let mut query = form_urlencoded::Serializer::new(String::new());
        for (name, value) in [
            ("status", &self.status),
            ("skill_id", &self.skill_id),
            ("engine", &self.engine),
            ("within", &self.within),
            ("q", &self.q),
        ] {
            if let Some(value) = value.as_deref().filter(|v| !v.is_empty()) {
                query.append_pair(name, value);
            }
        }
        if let Some(cursor) = cursor {
            query.append_pair("cursor", cursor);
        }
        query.finish()
    }

    /// Whether filter `name` is set to `value` (the option the form shows selected).
    fn is(&self, name: &str, value: &str) -> bool {
        let chosen = match name {
            "status" => &self.status,
            "skill_id" => &self.skill_id,
            "engine" => &self.engine,
            "within" => &self.within,
            _ => return false,
        };
        chosen.as_deref() == Some(value)
    }
}

/// A run as a row of the list.
pub(super) struct RunRow {
    pub run: RunState,
    /// "3 min ago", in the page's language.
    pub started: String,
    /// The exact time, shown on hover.
    pub started_exact: String,
    pub duration: String,
    /// The request id's last eight characters, its random end (its start is the time, the same
    /// for every request of a minute); the whole id is in the link's title.
    pub short_id: String,
}

impl RunRow {
    pub(super) fn of(l: Lang, run: RunState) -> Self {
        let at = run.started_at.unwrap_or(run.status.created_at);
        Self {
            started: super::time::ago(l, at),
            started_exact: at.to_string(),
            short_id: {
                let id = &run.status.request_id;
                let from = id.char_indices().rev().nth(7).map_or(0, |(i, _)| i);
                id[from..].to_owned()
            },
            duration: run
                .duration_ms
                .map_or_else(|| "—".to_owned(), super::time::span),
            run,
        }
    }
}

#[derive(Template)]
#[template(path = "runs.html")]
struct RunsPage {
    l: Lang,
    section: &'static str,
    table: RunsTable,
    query: ListQuery,
    skills: Vec<String>,
    statuses: Vec<&'static str>,
    engines: Vec<&'static str>,
    windows: Vec<&'static str>,
}

/// One page of the list: the table and the links to the pages beside it.
#[derive(Template)]
#[template(path = "partials/runs_table.html")]
struct RunsFragment {
    l: Lang,
    table: RunsTable,
}

pub(super) struct RunsTable {
    pub rows: Vec<RunRow>,
    /// The query string of this page (its filters and cursor), for its live refresh.
    pub this_page: String,
    /// The query string of the next page, if there is one.
    pub next_page: Option<String>,
    /// The query string of the first page, when this is not it.
    pub first_page: Option<String>,
    /// Refreshes itself: the first page, where new runs appear.
    pub live: bool,
}

#[derive(Template)]
#[template(path = "run.html")]
struct RunPage {
    l: Lang,
    section: &'static str,
    request_id: String,
    engine: String,
    interactive: bool,
    /// The facts section and what the run ended with, rendered: each refreshes itself.
    info: String,
    result: String,
    /// What the run was started with: its inline input, its parameter, its uploaded files
    /// (as paths in its folder).
    input: Vec<(String, String)>,
    parameter: Vec<(String, String)>,
    uploads: Vec<String>,
}

/// An input or parameter object's fields as text: strings as they are, the rest as JSON.
fn given(value: &serde_json::Value) -> Vec<(String, String)> {
    value
        .as_object()
        .into_iter()
        .flatten()
        .map(|(key, v)| {
            let text = v.as_str().map_or_else(
                || serde_json::to_string_pretty(v).unwrap_or_default(),
                str::to_owned,
            );
            (key.clone(), text)
        })
        .collect()
}

#[derive(Template)]
#[template(path = "partials/run_info.html")]
struct RunInfo {
    l: Lang,
    run: RunState,
    /// The skill a finished job can be run again with (temporary runs' packages are gone).
    again: Option<String>,
    timeline: Vec<timeline::Step>,
}

#[derive(Template)]
#[template(path = "partials/run_files.html")]
struct RunFiles {
    l: Lang,
    files: Vec<TreeEntry>,
    /// Where a file's preview is fetched, the path appended.
    preview_url: String,
}

#[derive(Template)]
#[template(path = "partials/question.html")]
struct QuestionFragment {
    l: Lang,
    /// Where the section reloads itself from, and where its form posts.
    question_url: String,
    reply_url: String,
    question: Option<Question>,
}

impl RunInfo {
    fn span(&self, ms: &u64) -> String {
        super::time::span(*ms)
    }

    fn ago(&self, at: &Timestamp) -> String {
        super::time::ago(self.l, *at)
    }

    fn label(&self, step: &timeline::Step) -> String {
        step.label(self.l)
    }
}

impl QuestionFragment {
    fn of(l: Lang, request_id: &str, question: Option<Question>) -> Self {
        Self {
            l,
            question_url: format!("/ui/management/runs/{request_id}/question"),
            reply_url: format!("/ui/runs/{request_id}/reply"),
            question,
        }
    }
}

async fn runs_table(
    l: Lang,
    state: &AppState,
    scope: &Scope,
    query: &ListQuery,
) -> Result<RunsTable, ConsoleError> {
    let (rows, next) = state
        .jobs
        .list(scope, &query.filter()?)
        .await
        .map_err(ApiError::from)?;
    let first = query.cursor.as_deref().is_none_or(str::is_empty);
    Ok(RunsTable {
        rows: rows
            .into_iter()
            .map(|(request, run)| RunRow::of(l, RunState::of(request, run)))
            .collect(),
        this_page: query.with_cursor(query.cursor.as_deref().filter(|c| !c.is_empty())),
        next_page: next.map(|c| query.with_cursor(Some(&c.encode()))),
        first_page: (!first).then(|| query.with_cursor(None)),
        live: first,
    })
}

/// `GET /ui/runs`: the list with its filters (also the form's target, so a filtered list has
/// its own address).
pub async fn page(
    l: Lang,
    State(state): State<AppState>,
    Kind(scope): Kind,
    Query(query): Query<ListQuery>,
) -> Page {
    let table = runs_table(l, &state, &scope, &query).await?;
    let skills = state
        .registry
        .snapshot()
        .await
        .skills
        .keys()
        .cloned()
        .collect();
    render(&RunsPage {
        l,
        section: "runs",
        table,
        query,
        skills,
        statuses: RunStatus::ALL.iter().map(|s| s.as_str()).collect(),
        engines: Engine::ALL.iter().map(|e| e.as_str()).collect(),
        windows: WINDOWS.iter().map(|(w, _)| *w).collect(),
    })
}

/// `GET /ui/management/runs/table`: one page of the list, which refreshes itself when it is
/// the first (where new runs appear).
pub async fn table(
    l: Lang,
    State(state): State<AppState>,
    Kind(scope): Kind,
    Query(query): Query<ListQuery>,
) -> Page {
    render(&RunsFragment {
        table: runs_table(l, &state, &scope, &query).await?,
        l,
    })
}

/// A run's state box: its facts, its timeline and the skill it can be run again with.
async fn run_info(
    l: Lang,
    state: &AppState,
    request: Request,
    run: Run,
) -> Result<RunInfo, ConsoleError> {
    let interactions = state
        .store
        .interactions(&run.run_id)
        .await
        .map_err(ApiError::from)?;
    let repairs = state
        .store
        .repair_rounds(&run.run_id)
        .await
        .map_err(ApiError::from)?;
    let retried = match run.retries {
        0 => Vec::new(),
        _ => state
            .store
            .retried_attempts(&run.run_id)
            .await
            .map_err(ApiError::from)?,
    };
    let timeline = timeline::of(&run, &interactions, &repairs, &retried, Timestamp::now());
    let again = request
        .skill_id
        .clone()
        .filter(|_| request.kind == RequestKind::Job && run.status.is_terminal());
    Ok(RunInfo {
        l,
        run: RunState::of(request, run),
        again,
        timeline,
    })
}

/// `GET /ui/runs/{request_id}`.
pub async fn detail(
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
    let result = render(&run_result::of(l, &state, &request, &run).await)?.0;
    // Another node's run folder is not listed here: its files pane says where it is.
    let uploads = state
        .jobs
        .run_uploads(&scope, &request_id)
        .await
        .unwrap_or_default();
    let (input, parameter) = (given(&request.input), given(&request.parameter));
    let interactive = request.runtime_options.execution_mode == ExecutionMode::Interactive;
    let engine = run.engine.as_str().to_owned();
    let info = render(&run_info(l, &state, request, run).await?)?.0;
    render(&RunPage {
        l,
        section: "runs",
        request_id,
        engine,
        interactive,
        info,
        result,
        input,
        parameter,
        uploads,
    })
}

/// `GET /ui/management/runs/{request_id}/view`: the run's state, refreshing itself while the
/// run may change.
pub async fn info(
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
    render(&run_info(l, &state, request, run).await?)
}

/// `POST /ui/runs/{request_id}/rerun`: the same request again — skill, engine, model, inputs,
/// parameters, execution mode and debug — run afresh (`no_cache`: a re-run that answered
/// the cached result would repeat nothing), then its page. A request that came with files
/// goes to the skill's form instead, filled in, where the files are chosen again (the
/// service keeps what a run extracted, not what the user sent).
pub async fn rerun(
    State(state): State<AppState>,
    Kind(scope): Kind,
    Acting(caller): Acting,
    ClientAddress(client): ClientAddress,
    Path(request_id): Path<String>,
) -> Result<Response, ConsoleError> {
    let (request, run) = state
        .jobs
        .request_and_run(&scope, &request_id)
        .await
        .map_err(ApiError::from)?;
    let skill_id = match &request.skill_id {
        Some(id) if request.kind == RequestKind::Job => id.clone(),
        _ => {
            return Err(ApiError::bad_request(
                "A temporary skill run cannot run again: its package is not kept. Upload it again.",
            )
            .into());
        }
    };
    if !run.status.is_terminal() {
        return Err(ApiError::new(StatusCode::CONFLICT, "The run has not finished yet").into());
    }
    if request.upload_state != UploadState::None {
        return Ok(Redirect::to(&format!(
            "/ui/skills/{}?from={request_id}",
            urlencoding(&skill_id)
        ))
        .into_response());
    }
    let options = &request.runtime_options;
    let mut runtime_options = serde_json::json!({
        "execution_mode": options.execution_mode.as_str(),
        "debug": options.debug,
        "no_cache": true,
    });
    if let Some(schema) = &options.output_schema {
        runtime_options["output_schema"] = schema.clone();
    }
    let option = |name: &str| request.engine_options[name].as_str().map(str::to_owned);
    let job = NewJob {
        skill_id,
        engine: request.engine.map(|e| e.as_str().to_owned()),
        input: request.input.clone(),
        parameter: request.parameter.clone(),
        model: request.model.clone(),
        provider_id: option("provider_id"),
        effort: option("model_reasoning_effort"),
        runtime_options: Some(runtime_options),
        skills: options.skills.clone(),
        arrival: Default::default(),
        request_id: None,
        client_address: client,
        caller,
    };
    let request_id = super::skills::start(&state, job, &[]).await?;
    Ok(Redirect::to(&format!("/ui/runs/{request_id}")).into_response())
}

/// A path segment with everything but unreserved characters percent-encoded.
pub(super) fn urlencoding(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

/// `POST /ui/runs/{request_id}/cancel`: answers the run's state after the cancel.
pub async fn cancel(
    l: Lang,
    State(state): State<AppState>,
    Kind(scope): Kind,
    Path(request_id): Path<String>,
) -> Page {
    state
        .jobs
        .cancel(&scope, &request_id)
        .await
        .map_err(ApiError::from)?;
    info(l, State(state), Kind(scope), Path(request_id)).await
}

/// `GET /ui/management/runs/{request_id}/files`.
pub async fn files(
    l: Lang,
    State(state): State<AppState>,
    Kind(scope): Kind,
    Path(request_id): Path<String>,
) -> Page {
    let (_, files) = state
        .jobs
        .run_files(&scope, &request_id)
        .await
        .map_err(ApiError::from)?;
    render(&RunFiles {
        l,
        // A request id that named a run is a UUID: nothing to escape.
        preview_url: format!("/ui/runs/{request_id}/file?path="),
        files,
    })
}

/// `GET /ui/runs/{request_id}/file?path=`: a file of the run folder.
pub async fn view(
    l: Lang,
    State(state): State<AppState>,
    Kind(scope): Kind,
    Path(request_id): Path<String>,
    Query(query): Query<FilePath>,
) -> Page {
    let raw = query.required()?;
    let (_, path, preview) = state
        .jobs
        .run_file(&scope, &request_id, &raw)
        .await
        .map_err(ApiError::from)?;
    let image = run_result::artifact_of(&path)
        .filter(|artifact| run_result::image_type(artifact).is_some())
        .map(|artifact| {
            format!(
                "/ui/runs/{request_id}/image?path={}",
                form_urlencoded::byte_serialize(artifact.as_bytes()).collect::<String>()
            )
        });
    render(&PreviewFragment::of(l, path, preview, image))
}

/// `GET /ui/management/runs/{request_id}/question`: the pending question's form, or nothing.
pub async fn question(
    l: Lang,
    State(state): State<AppState>,
    Kind(scope): Kind,
    Path(request_id): Path<String>,
) -> Page {
    let pending = state
        .jobs
        .pending(&scope, &request_id, std::time::Duration::ZERO)
        .await
        .map_err(ApiError::from)?;
    let question = pending.question.as_ref().and_then(Question::of);
    render(&QuestionFragment::of(l, &request_id, question))
}

/// `POST /ui/runs/{request_id}/reply`: the form of a question, turned into the response its
/// kind calls for — `choose_one`: the option's value; `confirm`: `true`/`false`;
/// `fill_fields`: `{field: text}`; `risk_ack`: `true`; `open_text`: the text. Answers the
/// (now empty) question and tells the page the run resumed.
pub async fn reply(
    l: Lang,
    State(state): State<AppState>,
    Kind(scope): Kind,
    Path(request_id): Path<String>,
    Form(form): Form<Vec<(String, String)>>,
) -> Result<Response, ConsoleError> {
    let (interaction_id, response) = question::reply_of(&form).map_err(ApiError::bad_request)?;
    state
        .jobs
        .reply(
            &scope,
            &request_id,
            Reply {
                interaction_id,
                response,
                idempotency_key: None,
            },
        )
        .await
        .map_err(ApiError::from)?;
    let mut answer = render(&QuestionFragment::of(l, &request_id, None))?.into_response();
    answer
        .headers_mut()
        .insert("hx-trigger", HeaderValue::from_static("run-resumed"));
    Ok(answer)
}
