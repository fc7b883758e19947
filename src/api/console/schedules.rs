//! The console's schedules page (`/ui/schedules`): the tenant's schedules with their cron, time
//! zone, next ticks and latest outcome, and per schedule a pause (or resume), a trigger that
//! makes its job now and opens the run, and a delete that asks first. Schedules are made from a
//! skill's run form ("Schedule instead").

use askama::Template;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};

use super::{ConsoleError, Lang, Page, render};
use crate::api::auth::Acting;
use crate::api::error::ApiError;
use crate::jobs::schedules::{ScheduleInput, Shown};
use crate::state::AppState;

#[derive(Template)]
#[template(path = "schedules.html")]
struct SchedulesPage {
    l: Lang,
    section: &'static str,
    schedules: Vec<Shown>,
}

/// `GET /ui/schedules`.
pub async fn page(l: Lang, State(state): State<AppState>, Acting(caller): Acting) -> Page {
    let schedules = state
        .jobs
        .schedules(&caller)
        .await
        .map_err(ApiError::from)?;
    render(&SchedulesPage {
        l,
        section: "schedules",
        schedules,
    })
}

/// `POST /ui/schedules/{id}/pause` and `/resume`.
pub async fn pause(
    State(state): State<AppState>,
    Acting(caller): Acting,
    Path((schedule_id, action)): Path<(String, String)>,
) -> Result<Response, ConsoleError> {
    let paused = match action.as_str() {
        "pause" => true,
        "resume" => false,
        other => {
            return Err(
                ApiError::bad_request(format!("'{other}' is neither pause nor resume")).into(),
            );
        }
    };
    let input = ScheduleInput {
        paused: Some(paused),
        ..ScheduleInput::default()
    };
    state
        .jobs
        .update_schedule(&caller, &schedule_id, input)
        .await
        .map_err(ApiError::from)?;
    Ok(Redirect::to("/ui/schedules").into_response())
}

/// `POST /ui/schedules/{id}/trigger`: makes the job now and opens its run.
pub async fn trigger(
    State(state): State<AppState>,
    Acting(caller): Acting,
    Path(schedule_id): Path<String>,
) -> Result<Response, ConsoleError> {
    let request_id = state
        .jobs
        .trigger_schedule(&caller, &schedule_id)
        .await
        .map_err(ApiError::from)?;
    Ok(Redirect::to(&format!("/ui/runs/{request_id}")).into_response())
}

/// `POST /ui/schedules/{id}/delete` (the page asked first).
pub async fn delete(
    State(state): State<AppState>,
    Acting(caller): Acting,
    Path(schedule_id): Path<String>,
) -> Result<Response, ConsoleError> {
    state
        .jobs
        .delete_schedule(&caller, &schedule_id)
        .await
        .map_err(ApiError::from)?;
    Ok(Redirect::to("/ui/schedules").into_response())
}
