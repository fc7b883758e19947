//! `/ui/runs`: the run list, and one run's page — its state, live output, pending question with
//! a reply form, cancel, and its folder's files.

use askama::Template;
use axum::Form;
use axum::extract::{Path, Query, State};
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use skill_runner_web::question::{self, Question};

use super::skills::{FilePath, PreviewFragment};
use super::{ConsoleError, Lang, Page, render};
use crate::api::error::ApiError;
use crate::api::run_views::RunState;
use crate::browse::TreeEntry;
use crate::jobs::Scope;
use crate::jobs::interaction::Reply;
use crate::skill::ExecutionMode;
use crate::state::AppState;

/// The console sees jobs and temporary runs alike, as `/v1/management/runs` does.
pub(super) const SCOPE: Scope = Scope::Management;

/// How many runs the list shows.
const LIST_LIMIT: u32 = 200;

#[derive(Template)]
#[template(path = "runs.html")]
struct RunsPage {
    l: Lang,
    section: &'static str,
    runs: Vec<RunState>,
    polling: bool,
}

#[derive(Template)]
#[template(path = "partials/runs_table.html")]
struct RunsTable {
    l: Lang,
    runs: Vec<RunState>,
    polling: bool,
}

#[derive(Template)]
#[template(path = "run.html")]
struct RunPage {
    l: Lang,
    section: &'static str,
    run: RunState,
    error: Option<String>,
    /// What to do about the error's code.
    hint: Option<String>,
    interactive: bool,
}

#[derive(Template)]
#[template(path = "partials/run_info.html")]
struct RunInfo {
    l: Lang,
    run: RunState,
    error: Option<String>,
    hint: Option<String>,
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

/// The run's error as one line: `CODE: message`.
/// The hint of a failed run's error.
fn hint_line(run: &RunState) -> Option<String> {
    run.status.error.as_ref()?["hint"]
        .as_str()
        .map(str::to_owned)
}

fn error_line(run: &RunState) -> Option<String> {
    let error = run.status.error.as_ref()?;
    let message = error["message"].as_str().unwrap_or_default();
    Some(match error["code"].as_str() {
        Some(code) => format!("{code}: {message}"),
        None => message.to_owned(),
    })
}

async fn runs(state: &AppState) -> Result<(Vec<RunState>, bool), ConsoleError> {
    let runs: Vec<RunState> = state
        .jobs
        .recent(LIST_LIMIT)
        .await
        .map_err(ApiError::from)?
        .into_iter()
        .map(|(request, run)| RunState::of(request, run))
        .collect();
    let polling = runs.iter().any(|r| r.poll_logs);
    Ok((runs, polling))
}

/// `GET /ui/runs`.
pub async fn page(l: Lang, State(state): State<AppState>) -> Page {
    let (runs, polling) = runs(&state).await?;
    render(&RunsPage {
        l,
        section: "runs",
        runs,
        polling,
    })
}

/// `GET /ui/management/runs/table`: refreshes itself while any run may still change.
pub async fn table(l: Lang, State(state): State<AppState>) -> Page {
    let (runs, polling) = runs(&state).await?;
    render(&RunsTable { l, runs, polling })
}

async fn run_state(state: &AppState, request_id: &str) -> Result<(RunState, bool), ConsoleError> {
    let (request, run) = state
        .jobs
        .request_and_run(SCOPE, request_id)
        .await
        .map_err(ApiError::from)?;
    let interactive = request.runtime_options.execution_mode == ExecutionMode::Interactive;
    Ok((RunState::of(request, run), interactive))
}

/// `GET /ui/runs/{request_id}`.
pub async fn detail(
    l: Lang,
    State(state): State<AppState>,
    Path(request_id): Path<String>,
) -> Page {
    let (run, interactive) = run_state(&state, &request_id).await?;
    render(&RunPage {
        l,
        section: "runs",
        error: error_line(&run),
        hint: hint_line(&run),
        run,
        interactive,
    })
}

/// `GET /ui/management/runs/{request_id}/view`: the run's state, refreshing itself while the
/// run may change.
pub async fn info(l: Lang, State(state): State<AppState>, Path(request_id): Path<String>) -> Page {
    let (run, _) = run_state(&state, &request_id).await?;
    render(&RunInfo {
        l,
        error: error_line(&run),
        hint: hint_line(&run),
        run,
    })
}

/// `POST /ui/runs/{request_id}/cancel`: answers the run's state after the cancel.
pub async fn cancel(
    l: Lang,
    State(state): State<AppState>,
    Path(request_id): Path<String>,
) -> Page {
    state
        .jobs
        .cancel(SCOPE, &request_id)
        .await
        .map_err(ApiError::from)?;
    info(l, State(state), Path(request_id)).await
}

/// `GET /ui/management/runs/{request_id}/files`.
pub async fn files(l: Lang, State(state): State<AppState>, Path(request_id): Path<String>) -> Page {
    let (_, files) = state
        .jobs
        .run_files(SCOPE, &request_id)
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
    Path(request_id): Path<String>,
    Query(query): Query<FilePath>,
) -> Page {
    let raw = query.required()?;
    let (_, path, preview) = state
        .jobs
        .run_file(SCOPE, &request_id, &raw)
        .await
        .map_err(ApiError::from)?;
    render(&PreviewFragment { l, path, preview })
}

/// `GET /ui/management/runs/{request_id}/question`: the pending question's form, or nothing.
pub async fn question(
    l: Lang,
    State(state): State<AppState>,
    Path(request_id): Path<String>,
) -> Page {
    let pending = state
        .jobs
        .pending(SCOPE, &request_id)
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
    Path(request_id): Path<String>,
    Form(form): Form<Vec<(String, String)>>,
) -> Result<Response, ConsoleError> {
    let (interaction_id, response) = question::reply_of(&form).map_err(ApiError::bad_request)?;
    state
        .jobs
        .reply(
            SCOPE,
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
