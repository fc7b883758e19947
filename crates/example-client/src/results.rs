//! The example client's result page, downloads (passed through from the backend) and
//! recordings.

use askama::Template;
use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use reqwest::Method;
use serde_json::Value;

use super::Shared;
use super::pages::{Page, PageError, html, text};
use super::recordings::{self, Listed};

#[derive(Template)]
#[template(path = "client/result.html")]
struct ResultPage {
    request_id: String,
    status: String,
    data: String,
    error: Option<String>,
    /// What to do about the error's code.
    hint: Option<String>,
    warnings: Vec<String>,
    artifacts: Vec<String>,
}

/// `GET /runs/{request_id}/result`: the result's data, warnings, artifacts and bundle; the
/// result goes into the run's recording the first time it is shown.
pub async fn result(State(client): State<Shared>, Path(request_id): Path<String>) -> Page {
    let body = client
        .backend
        .get(&format!("/v1/jobs/{request_id}/result"))
        .await?;
    let result = &body["result"];
    let recorded = recordings::read(&client.recordings, &request_id)
        .ok()
        .flatten()
        .is_some_and(|r| {
            r["log"]
                .as_array()
                .is_some_and(|log| log.iter().any(|entry| entry["kind"] == "result"))
        });
    if !recorded
        && let Err(e) = recordings::append(&client.recordings, &request_id, "result", result)
    {
        tracing::debug!(request_id, error = %e, "result not recorded");
    }
    let failure = result.get("error").filter(|e| !e.is_null());
    let error = failure.map(|e| {
        let message = text(e, "message");
        match e.get("code").and_then(Value::as_str) {
            Some(code) => format!("{code}: {message}"),
            None => message,
        }
    });
    let hint = failure
        .and_then(|e| e.get("hint"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let list = |key: &str| -> Vec<String> {
        result[key]
            .as_array()
            .into_iter()
            .flatten()
            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
            .collect()
    };
    html(&ResultPage {
        status: text(result, "status"),
        data: serde_json::to_string_pretty(&result["data"]).unwrap_or_default(),
        error,
        hint,
        warnings: [list("validation_warnings"), list("warnings")].concat(),
        artifacts: list("artifacts"),
        request_id,
    })
}

/// `GET /runs/{request_id}/artifacts/{*path}`: one artifact, from the backend.
pub async fn artifact(
    State(client): State<Shared>,
    Path((request_id, path)): Path<(String, String)>,
) -> Page {
    download(
        &client,
        &format!("/v1/jobs/{request_id}/artifacts/artifacts/{path}"),
    )
    .await
}

/// `GET /runs/{request_id}/bundle`: the run's bundle, from the backend.
pub async fn bundle(State(client): State<Shared>, Path(request_id): Path<String>) -> Page {
    download(&client, &format!("/v1/jobs/{request_id}/bundle")).await
}

/// The backend's answer to `path`, streamed through with its type and file name.
async fn download(client: &Shared, path: &str) -> Page {
    let upstream = client
        .backend
        .send(client.backend.request(Method::GET, path))
        .await?;
    let headers: Vec<(header::HeaderName, HeaderValue)> =
        [header::CONTENT_TYPE, header::CONTENT_DISPOSITION]
            .into_iter()
            .filter_map(|name| {
                let value = upstream.headers().get(name.as_str())?;
                Some((name, HeaderValue::from_bytes(value.as_bytes()).ok()?))
            })
            .collect();
    let mut response = Response::new(Body::from_stream(upstream.bytes_stream()));
    response.headers_mut().extend(headers);
    Ok(response)
}

#[derive(Template)]
#[template(path = "client/recordings.html")]
struct RecordingsPage {
    recordings: Vec<Listed>,
}

/// `GET /recordings`: every run made through the client.
pub async fn list(State(client): State<Shared>) -> Page {
    let dir = client.recordings.clone();
    let recordings = tokio::task::spawn_blocking(move || recordings::list(&dir))
        .await
        .map_err(|e| internal(e.to_string()))?
        .map_err(|e| internal(format!("the recordings cannot be read: {e}")))?;
    html(&RecordingsPage { recordings })
}

#[derive(Template)]
#[template(path = "client/replay.html")]
struct ReplayPage {
    request_id: String,
}

/// `GET /recordings/{request_id}`: steps through a recording one entry at a time.
pub async fn replay(State(client): State<Shared>, Path(request_id): Path<String>) -> Page {
    recording(&client, &request_id).await?;
    html(&ReplayPage { request_id })
}

/// `GET /api/recordings/{request_id}`: the recording as JSON.
pub async fn recording_json(State(client): State<Shared>, Path(request_id): Path<String>) -> Page {
    Ok(Json(recording(&client, &request_id).await?).into_response())
}

async fn recording(client: &Shared, request_id: &str) -> Result<Value, PageError> {
    let (dir, id) = (client.recordings.clone(), request_id.to_owned());
    tokio::task::spawn_blocking(move || recordings::read(&dir, &id))
        .await
        .map_err(|e| internal(e.to_string()))?
        .map_err(|e| internal(format!("the recording cannot be read: {e}")))?
        .ok_or_else(|| PageError {
            status: StatusCode::NOT_FOUND,
            message: format!("There is no recording of '{request_id}'."),
        })
}

fn internal(message: String) -> PageError {
    PageError {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        message,
    }
}
