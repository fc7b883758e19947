//! The console's legacy data routes, kept for clients of the reference's older console:
//! `/ui/skills/table`, `/ui/engines/table`, `/ui/runs/table`, `/ui/runs/{id}/view` and
//! `/ui/runs/{id}/logs/tail`. Each answers what its successor answers, with `Deprecation: true`,
//! `Sunset` (`SKILL_RUNNER_UI_LEGACY_API_SUNSET`) and a `Link` to the successor; with
//! `SKILL_RUNNER_UI_LEGACY_API_MODE=gone` each answers 410 naming the successor.

use crate::api::jobs::Kind;
use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::{ConsoleError, Lang, Page, engines, render, runs, skills};
use crate::api::error::ApiError;
use crate::state::AppState;

/// Serves `page` as a legacy route whose successor is `successor`, or 410 when they are gone.
async fn legacy(state: &AppState, successor: String, page: impl Future<Output = Page>) -> Response {
    let legacy = state.config.legacy_ui;
    if legacy.gone {
        return ConsoleError(ApiError::new(
            StatusCode::GONE,
            format!("This route was retired; use {successor}"),
        ))
        .into_response();
    }
    let mut response = page.await.into_response();
    let sunset = legacy
        .sunset
        .and_hms_opt(0, 0, 0)
        .map(|t| t.and_utc().format("%a, %d %b %Y %H:%M:%S GMT").to_string());
    let headers = response.headers_mut();
    headers.insert("deprecation", HeaderValue::from_static("true"));
    if let Some(Ok(value)) = sunset.map(|s| HeaderValue::from_str(&s)) {
        headers.insert("sunset", value);
    }
    if let Ok(value) = HeaderValue::from_str(&format!("<{successor}>; rel=\"successor-version\"")) {
        headers.insert(header::LINK, value);
    }
    response
}

/// `GET /ui/skills/table`.
pub async fn skills_table(
    l: Lang,
    State(state): State<AppState>,
    query: Query<skills::Highlight>,
) -> Response {
    let page = skills::table(l, State(state.clone()), query);
    legacy(&state, "/ui/management/skills/table".to_owned(), page).await
}

/// `GET /ui/engines/table`.
pub async fn engines_table(l: Lang, State(state): State<AppState>) -> Response {
    let page = engines::table(l, State(state.clone()));
    legacy(&state, "/ui/management/engines/table".to_owned(), page).await
}

/// `GET /ui/runs/table`.
pub async fn runs_table(l: Lang, State(state): State<AppState>, kind: Kind) -> Response {
    let page = runs::table(l, State(state.clone()), kind, Query(Default::default()));
    legacy(&state, "/ui/management/runs/table".to_owned(), page).await
}

/// `GET /ui/runs/{request_id}/view`.
pub async fn run_view(
    l: Lang,
    State(state): State<AppState>,
    kind: Kind,
    Path(request_id): Path<String>,
) -> Response {
    let successor = format!("/ui/management/runs/{request_id}/view");
    let page = runs::info(l, State(state.clone()), kind, Path(request_id));
    legacy(&state, successor, page).await
}

#[derive(Template)]
#[template(path = "partials/log_tail.html")]
struct LogTail {
    stdout: String,
    stderr: String,
}

/// `GET /ui/runs/{request_id}/logs/tail`: the ends of the run's stdout and stderr; its successor
/// is the run's event stream.
pub async fn logs_tail(
    State(state): State<AppState>,
    Kind(scope): Kind,
    Path(request_id): Path<String>,
) -> Response {
    let successor = format!("/v1/management/runs/{request_id}/events");
    let page = async {
        let logs = state
            .jobs
            .logs(&scope, &request_id)
            .await
            .map_err(ApiError::from)?;
        render(&LogTail {
            stdout: logs.stdout.text,
            stderr: logs.stderr.text,
        })
    };
    legacy(&state, successor, page).await
}
