//! The example client's run page and the proxies it uses: the backend's event stream and the
//! reply to a question, both recorded.

use askama::Template;
use axum::Form;
use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use futures_util::StreamExt;
use reqwest::Method;
use serde_json::{Value, json};

use super::Shared;
use super::pages::{Page, PageError, html, text};
use super::recordings;
use skill_runner_web::i18n::Lang;
use skill_runner_web::question::{Question, reply_of};

/// The facts the run page and its info section show.
#[derive(Template)]
#[template(path = "client/run_info.html")]
struct RunInfo {
    request_id: String,
    status: String,
    skill_id: String,
    engine: String,
    error: Option<String>,
    terminal: bool,
}

#[derive(Template)]
#[template(path = "client/run.html")]
struct RunPage {
    request_id: String,
    /// Rendered in place; it refreshes itself.
    info: RunInfo,
}

/// The run's state from the backend.
async fn info(client: &Shared, request_id: &str) -> Result<RunInfo, PageError> {
    let status = client
        .backend
        .get(&format!("/v1/jobs/{request_id}"))
        .await?;
    let state = text(&status, "status");
    let error = status.get("error").filter(|e| !e.is_null()).map(|e| {
        let message = text(e, "message");
        match e.get("code").and_then(Value::as_str) {
            Some(code) => format!("{code}: {message}"),
            None => message,
        }
    });
    Ok(RunInfo {
        request_id: request_id.to_owned(),
        terminal: matches!(state.as_str(), "succeeded" | "failed" | "canceled"),
        status: state,
        skill_id: text(&status, "skill_id"),
        engine: text(&status, "engine"),
        error,
    })
}

/// `GET /runs/{request_id}`: the run's state, its question, and its output live.
pub async fn run_page(State(client): State<Shared>, Path(request_id): Path<String>) -> Page {
    let info = info(&client, &request_id).await?;
    html(&RunPage { request_id, info })
}

/// `GET /runs/{request_id}/info`: the facts section, refreshed when the run changes.
pub async fn run_info(State(client): State<Shared>, Path(request_id): Path<String>) -> Page {
    html(&info(&client, &request_id).await?)
}

/// The question section, the console's own partial pointed at the client's routes.
#[derive(Template)]
#[template(path = "partials/question.html")]
struct QuestionSection {
    l: Lang,
    question_url: String,
    reply_url: String,
    question: Option<Question>,
}

impl QuestionSection {
    fn of(request_id: &str, question: Option<Question>) -> Self {
        Self {
            l: Lang::En,
            question_url: format!("/runs/{request_id}/question"),
            reply_url: format!("/api/runs/{request_id}/reply"),
            question,
        }
    }
}

/// `GET /runs/{request_id}/question`: the pending question as a form (empty when none waits or
/// the run is not interactive).
pub async fn question(State(client): State<Shared>, Path(request_id): Path<String>) -> Page {
    let pending = client
        .backend
        .get(&format!("/v1/jobs/{request_id}/interaction/pending"))
        .await;
    let question = match pending {
        Ok(pending) => pending.get("pending").and_then(Question::of),
        Err(super::backend::BackendError::Refused { status, .. })
            if status == StatusCode::BAD_REQUEST =>
        {
            None
        }
        Err(e) => return Err(e.into()),
    };
    html(&QuestionSection::of(&request_id, question))
}

/// `POST /api/runs/{request_id}/reply`: the question form as the reply its kind calls for,
/// sent to the backend and recorded; answers the emptied section and tells the page the run
/// resumed.
pub async fn reply(
    State(client): State<Shared>,
    Path(request_id): Path<String>,
    Form(form): Form<Vec<(String, String)>>,
) -> Page {
    let (interaction_id, response) = reply_of(&form).map_err(|message| PageError {
        status: StatusCode::BAD_REQUEST,
        message,
    })?;
    let body = json!({"interaction_id": interaction_id, "response": response});
    client
        .backend
        .json(
            client
                .backend
                .request(
                    Method::POST,
                    &format!("/v1/jobs/{request_id}/interaction/reply"),
                )
                .json(&body),
        )
        .await?;
    if let Err(e) = recordings::append(&client.recordings, &request_id, "reply", &body) {
        tracing::warn!(request_id, error = %e, "cannot record the reply");
    }
    let mut answer = html(&QuestionSection::of(&request_id, None))?;
    answer
        .headers_mut()
        .insert("hx-trigger", HeaderValue::from_static("run-resumed"));
    Ok(answer)
}

/// `POST /runs/{request_id}/cancel`: cancels the run, then shows it again.
pub async fn cancel(State(client): State<Shared>, Path(request_id): Path<String>) -> Page {
    client
        .backend
        .json(
            client
                .backend
                .request(Method::POST, &format!("/v1/jobs/{request_id}/cancel")),
        )
        .await?;
    Ok(Redirect::to(&format!("/runs/{request_id}")).into_response())
}

/// `GET /api/runs/{request_id}/events`: the backend's event stream of the run
/// (`/v1/management/runs/{request_id}/events`, with the same query and `Last-Event-ID`), passed
/// through as it comes; each event is recorded on the way.
pub async fn events(
    State(client): State<Shared>,
    Path(request_id): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Page {
    let mut path = format!("/v1/management/runs/{request_id}/events");
    if let Some(query) = query {
        path = format!("{path}?{query}");
    }
    let mut request = client.backend.request(Method::GET, &path);
    if let Some(id) = headers.get("last-event-id") {
        request = request.header("last-event-id", id);
    }
    let upstream = client.backend.send(request).await?;
    let recordings = client.recordings.clone();
    let mut frames = skill_runner_web::sse::Frames::default();
    let body = upstream.bytes_stream().map(move |chunk| {
        let chunk = chunk.map_err(std::io::Error::other)?;
        for (name, data) in frames.push(&chunk) {
            let event = json!({"event": name, "data": data});
            if let Err(e) = recordings::append(&recordings, &request_id, "event", &event) {
                tracing::warn!(request_id, error = %e, "cannot record an event");
            }
        }
        Ok::<Bytes, std::io::Error>(chunk)
    });
    let mut response = Response::new(Body::from_stream(body));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(response)
}
