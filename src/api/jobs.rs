//! `/v1/jobs/*` and `/v1/temp-skill-runs/*`. Both families share these handlers: which one a
//! request came through is read from its path ([`Kind`]), and a request id of one family is
//! unknown to the other.

use axum::Json;
use axum::body::Body;
use axum::extract::multipart::{Multipart, MultipartRejection};
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use tokio_util::io::ReaderStream;

use super::streams::{Opener, sse};
use super::upload::{FileField, save_file_fields};
use crate::api::auth::Acting;
use crate::api::error::{ApiError, ApiResult};
use crate::api::run_views::{
    CancelResponse, CreateJob, CreateTemp, Created, LogRange, LogRangeQuery, NewRequest,
    PendingInteraction, ReplyAccepted, ReplyBody, RequestStatus, RunLogs, Uploaded, WaitQuery,
    ignored_fields, request_status,
};
use crate::jobs::create::UploadFiles;
use crate::jobs::events::Offsets;
use crate::jobs::fcmp::Fcmp;
use crate::jobs::idempotency::Idempotent;
use crate::jobs::{Family, Scope};
use crate::state::AppState;
use crate::store::{CleanupCounts, RequestKind, RunStatus};
use skill_runner_core::tenants::Caller;

/// Prefix of the temporary-skill routes: a deprecated alias of `/v1/jobs` (with
/// `skill_source: "temp_upload"`), which the reference removed in v0.4.0 and we keep for the
/// clients written before.
pub const TEMP_PREFIX: &str = "/v1/temp-skill-runs";

/// Says on every answer of the deprecated temporary-run routes since when they are deprecated
/// (RFC 9745: the reference's v0.4.0, 2026-03-06), when they may go (RFC 8594) and what
/// replaces them.
pub async fn deprecated_alias(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let deprecated = request.uri().path().starts_with(TEMP_PREFIX);
    let mut response = next.run(request).await;
    if deprecated {
        let headers = response.headers_mut();
        headers.insert("deprecation", HeaderValue::from_static("@1772755200"));
        headers.insert(
            "sunset",
            HeaderValue::from_static("Wed, 30 Jun 2027 00:00:00 GMT"),
        );
        headers.insert(
            header::LINK,
            HeaderValue::from_static("</v1/jobs>; rel=\"successor-version\""),
        );
    }
    response
}

/// Prefix of the management routes, which see requests of both families.
pub const MANAGEMENT_PREFIX: &str = "/v1/management";

/// Which requests a route may see: those of its API family (read from its path), of the
/// caller's tenant (every tenant's for an admin).
#[derive(Debug, Clone)]
pub struct Kind(pub Scope);

impl<S: Send + Sync> FromRequestParts<S> for Kind {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let caller = crate::api::auth::caller_of(parts)?;
        let path = parts.uri.path();
        let family = if path.starts_with(TEMP_PREFIX) {
            Family::Temp
        } else if path.starts_with(MANAGEMENT_PREFIX) {
            Family::Management
        } else {
            Family::Jobs
        };
        Ok(Kind(Scope {
            family,
            tenant: caller.visible_tenant(),
        }))
    }
}

/// The address of the client's connection as the service sees it (a proxy's, behind one),
/// when the connection is known.
pub struct ClientAddress(pub Option<String>);

impl<S: Send + Sync> FromRequestParts<S> for ClientAddress {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Self(
            parts
                .extensions
                .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
                .map(|info| info.0.ip().to_string()),
        ))
    }
}

/// A JSON body that could not be read: 413 when it is over the body limit, 415 when it is
/// not declared JSON, otherwise a FastAPI-style 422.
pub fn bad_json(e: JsonRejection) -> ApiError {
    match e.status() {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "The request body is over the {} MiB ({} bytes) a JSON body may be: send large \
                 inputs as files (a job's upload) instead",
                super::DEFAULT_BODY_LIMIT >> 20,
                super::DEFAULT_BODY_LIMIT
            ),
        ),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => {
            ApiError::new(StatusCode::UNSUPPORTED_MEDIA_TYPE, e.body_text())
        }
        _ => ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            serde_json::json!([{"loc": ["body"], "msg": e.body_text(), "type": "json_invalid"}]),
        ),
    }
}

/// Runs a state-changing operation as its own task, so a client that disconnects cannot cut
/// it in half (a run recorded but never queued, an upload left half-received, a cancel that
/// stopped the process but recorded nothing). The task stays in the request's span.
pub(super) async fn to_completion<T: Send + 'static, E: Into<ApiError> + Send + 'static>(
    work: impl Future<Output = Result<T, E>> + Send + 'static,
) -> ApiResult<T> {
    use tracing::Instrument as _;
    match tokio::spawn(work.in_current_span()).await {
        Ok(result) => result.map_err(Into::into),
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(ApiError::Internal(e.into())),
    }
}

/// Query parameters that could not be read, as a FastAPI-style 422.
pub fn bad_query(e: QueryRejection) -> ApiError {
    ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        serde_json::json!([{"loc": ["query"], "msg": e.body_text(), "type": "value_error"}]),
    )
}

/// Creates a job. Without file inputs it is queued at once (or bound to a cached result);
/// with file inputs, or with `skill_source: "temp_upload"` (the skill package comes with the
/// upload as `skill_package`), it waits for `/upload` and `status` is `queued`. Fields it does
/// not know are ignored and named in `warnings` (beside `detail` when it is refused). With an
/// `Idempotency-Key` header, the same key and body within a day answer the first create's
/// answer again (the same `request_id`).
#[utoipa::path(post, path = "/v1/jobs", tag = "jobs", request_body = CreateJob,
    params(("Idempotency-Key" = Option<String>, Header,
            description = "The same key with the same body answers the first create's answer for 24 h")),
    responses(
        (status = 200, description = "Created", body = Created),
        (status = 400, description = "Engine, execution mode, runtime options, model, input or parameter refused; `detail` says which"),
        (status = 404, description = "Unknown skill"),
        (status = 409, description = "A create with the same Idempotency-Key is still under way"),
        (status = 422, description = "Body is not valid JSON of this shape, or the Idempotency-Key came with another body"),
        (status = 429, description = "Job queue is full (see Retry-After)"),
    ))]
pub async fn create_job(
    State(state): State<AppState>,
    Acting(caller): Acting,
    ClientAddress(client): ClientAddress,
    headers: HeaderMap,
    body: Result<Json<CreateJob>, JsonRejection>,
) -> Response {
    let Json(body) = match body {
        Ok(body) => body,
        Err(e) => return bad_json(e).into_response(),
    };
    let ignored = ignored_fields(body.unknown.keys());
    match create(state, caller, client, headers, body, ignored.clone()).await {
        Ok(answer) => Json(answer).into_response(),
        Err(e) => e.with_warnings(ignored),
    }
}

/// Creates the request of `body`; an `Idempotency-Key` answers a repeat as the first time.
async fn create(
    state: AppState,
    caller: Caller,
    client: Option<String>,
    headers: HeaderMap,
    body: CreateJob,
    warnings: Vec<String>,
) -> ApiResult<Value> {
    let key = match headers.get("idempotency-key") {
        Some(value) => Some(
            value
                .to_str()
                .map_err(|_| {
                    ApiError::from(crate::error::Error::invalid(
                        "The Idempotency-Key header must be visible ASCII characters",
                    ))
                })?
                .to_owned(),
        ),
        None => None,
    };
    let tenant = caller.tenant_id.to_string();
    if let Some(key) = &key {
        let fingerprint = serde_json::to_value(&body).map_err(|e| ApiError::Internal(e.into()))?;
        if let Idempotent::Answered(answer) =
            state.jobs.idempotent(&tenant, key, &fingerprint).await?
        {
            return Ok(answer);
        }
    }
    let new = match NewRequest::of(body, client, caller) {
        Ok(new) => new,
        Err(e) => {
            if let Some(key) = &key {
                state.jobs.forget_key(&tenant, key).await;
            }
            return Err(e);
        }
    };
    to_completion(async move {
        let created = match new {
            NewRequest::Job(job) => state.jobs.create_job(job).await,
            NewRequest::Temp(temp) => state.jobs.create_temp(temp).await,
        };
        let answer = created.map(|admitted| {
            let created = Created {
                warnings,
                ..Created::from(admitted)
            };
            serde_json::to_value(created).expect("an answer serializes")
        });
        if let Some(key) = &key {
            match &answer {
                Ok(answer) => state.jobs.keep_answer(&tenant, key, answer).await?,
                Err(_) => state.jobs.forget_key(&tenant, key).await,
            }
        }
        answer
    })
    .await
}

/// Creates a temporary skill run; the package comes with `/upload`.
#[utoipa::path(post, path = "/v1/temp-skill-runs", tag = "temp-skill-runs", request_body = CreateTemp,
    responses(
        (status = 200, description = "Created", body = Created),
        (status = 400, description = "Unknown engine or bad runtime options"),
        (status = 422, description = "Body is not valid JSON of this shape"),
    ))]
pub async fn create_temp(
    State(state): State<AppState>,
    Acting(caller): Acting,
    ClientAddress(client): ClientAddress,
    body: Result<Json<CreateTemp>, JsonRejection>,
) -> ApiResult<Json<Created>> {
    let Json(body) = body.map_err(bad_json)?;
    to_completion(async move { state.jobs.create_temp(body.into_run(client, caller)).await })
        .await
        .map(|admitted| Json(admitted.into()))
}

/// The multipart form of an upload.
#[derive(utoipa::ToSchema)]
#[allow(dead_code, reason = "only describes the form in the OpenAPI document")]
pub struct UploadForm {
    /// Zip of input files, each named after its input key. Required when the skill has
    /// required file inputs.
    #[schema(value_type = Option<String>, format = Binary)]
    file: Vec<u8>,
    /// Temporary runs only: the skill package zip.
    #[schema(value_type = Option<String>, format = Binary)]
    skill_package: Vec<u8>,
}

/// Uploads the inputs (and for temporary runs the package) and starts the run. The same
/// route exists under `/v1/temp-skill-runs/{request_id}/upload`.
#[utoipa::path(post, path = "/v1/jobs/{request_id}/upload", tag = "jobs",
    params(("request_id" = String, Path)),
    request_body(content = UploadForm, content_type = "multipart/form-data"),
    responses(
        (status = 200, description = "Run queued or bound to a cached result", body = Uploaded),
        (status = 400, description = "Bad zip, missing required file input, invalid package"),
        (status = 404, description = "Unknown request"),
        (status = 409, description = "The request already received its upload"),
        (status = 413, description = "Upload larger than the limit"),
        (status = 429, description = "Job queue is full (see Retry-After)"),
    ))]
pub async fn upload(
    State(state): State<AppState>,
    Kind(scope): Kind,
    Path(request_id): Path<String>,
    multipart: Result<Multipart, MultipartRejection>,
) -> ApiResult<Json<Uploaded>> {
    let multipart = multipart
        .map_err(|e| ApiError::bad_request(format!("expected a multipart/form-data body: {e}")))?;
    to_completion(receive_upload(state, scope, request_id, multipart))
        .await
        .map(Json)
}

/// Claims the request's upload, saves the files (a temporary run's package too) and starts
/// the run; a body cut short gives the upload slot back.
async fn receive_upload(
    state: AppState,
    scope: Scope,
    request_id: String,
    mut multipart: Multipart,
) -> ApiResult<Uploaded> {
    let jobs = &state.jobs;
    let request = jobs.claim_upload(&scope, &request_id).await?;
    let kind = request.kind;
    let dir = jobs.upload_dir(kind, &request_id);
    let mut fields = vec![FileField {
        name: "file",
        dest: dir.join("inputs.zip"),
        max_bytes: state.config.package_limits.max_compressed_bytes,
    }];
    if kind == RequestKind::Temp {
        fields.push(FileField {
            name: "skill_package",
            dest: dir.join("package.zip"),
            max_bytes: state.config.jobs.temp_package_max_bytes,
        });
    }
    // The tenant's upload_bytes bounds the whole upload, each field first.
    let allowed = match jobs.quotas_of(&request.tenant_id).await {
        Ok(quotas) => quotas.upload_bytes,
        Err(e) => {
            jobs.release_upload(&request).await;
            return Err(e.into());
        }
    };
    if let Some(allowed) = allowed {
        for field in &mut fields {
            field.max_bytes = field.max_bytes.min(allowed);
        }
    }
    let sizes = match save_file_fields(&mut multipart, &fields).await {
        Ok(sizes) => sizes,
        Err(e) => {
            jobs.release_upload(&request).await;
            return Err(e);
        }
    };
    let total: u64 = sizes.iter().flatten().sum();
    if let Some(allowed) = allowed.filter(|allowed| total > *allowed) {
        jobs.release_upload(&request).await;
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "The upload carries {total} bytes, over this tenant's upload_bytes quota of \
                 {allowed}: send smaller files"
            ),
        ));
    }
    let path_of = |i: usize| {
        sizes
            .get(i)
            .copied()
            .flatten()
            .map(|_| fields[i].dest.clone())
    };
    let files = UploadFiles {
        inputs: path_of(0),
        package: path_of(1),
    };
    Ok(jobs.accept_upload(request, files).await?.into())
}

/// Where a request stands. The same route exists under `/v1/temp-skill-runs/{request_id}`.
#[utoipa::path(get, path = "/v1/jobs/{request_id}", tag = "jobs",
    params(("request_id" = String, Path)),
    responses((status = 200, body = RequestStatus), (status = 404, description = "Unknown request")))]
pub async fn status(
    State(state): State<AppState>,
    Kind(scope): Kind,
    Path(request_id): Path<String>,
) -> ApiResult<Json<RequestStatus>> {
    let (request, run) = state.jobs.status(&scope, &request_id).await?;
    let retried = match &run {
        Some(run) if run.retries > 0 => state.jobs.retried_attempts(&run.run_id).await?,
        _ => Vec::new(),
    };
    let mut status = request_status(request, run);
    status.retried_attempts = retried.into_iter().map(Into::into).collect();
    Ok(Json(status))
}

/// The result envelope: `{request_id, result: {status, data, artifacts, repair_level,
/// validation_warnings, warnings, error}}`. With `?wait=<seconds>` (at most 120) a run still
/// under way is waited for, so a script can ask right after its create or upload.
#[utoipa::path(get, path = "/v1/jobs/{request_id}/result", tag = "jobs",
    params(("request_id" = String, Path), WaitQuery),
    responses((status = 200, body = Object), (status = 404, description = "Unknown request or no result yet"),
        (status = 422, description = "`wait` out of range")))]
pub async fn result(
    State(state): State<AppState>,
    Kind(scope): Kind,
    Path(request_id): Path<String>,
    query: Result<Query<WaitQuery>, QueryRejection>,
) -> ApiResult<Json<Value>> {
    let Query(query) = query.map_err(bad_query)?;
    Ok(Json(
        state
            .jobs
            .result(&scope, &request_id, query.wait()?)
            .await?,
    ))
}

/// `{request_id, artifacts: ["artifacts/..."]}`.
#[utoipa::path(get, path = "/v1/jobs/{request_id}/artifacts", tag = "jobs",
    params(("request_id" = String, Path)),
    responses((status = 200, body = Object), (status = 404, description = "Unknown request")))]
pub async fn artifacts(
    State(state): State<AppState>,
    Kind(scope): Kind,
    Path(request_id): Path<String>,
) -> ApiResult<Json<Value>> {
    Ok(Json(state.jobs.artifacts(&scope, &request_id).await?))
}

/// Downloads one artifact; the path must start with `artifacts/`.
#[utoipa::path(get, path = "/v1/jobs/{request_id}/artifacts/{artifact_path}", tag = "jobs",
    params(("request_id" = String, Path), ("artifact_path" = String, Path)),
    responses(
        (status = 200, description = "The file, as an attachment"),
        (status = 400, description = "The path escapes artifacts/"),
        (status = 404, description = "No such artifact"),
    ))]
pub async fn artifact(
    State(state): State<AppState>,
    Kind(scope): Kind,
    Path((request_id, path)): Path<(String, String)>,
) -> ApiResult<Response> {
    let (file, name) = state.jobs.artifact_file(&scope, &request_id, &path).await?;
    send_file(file.into(), &name, "application/octet-stream").await
}

/// The run's bundle zip (`run_bundle.zip`, or `run_bundle_debug.zip` when the request had
/// `runtime_options.debug`), with `bundle/manifest[_debug].json` listing every file's size
/// and SHA-256.
#[utoipa::path(get, path = "/v1/jobs/{request_id}/bundle", tag = "jobs",
    params(("request_id" = String, Path)),
    responses(
        (status = 200, description = "The zip", content_type = "application/zip"),
        (status = 404, description = "Unknown request"),
        (status = 409, description = "The run has not ended"),
    ))]
pub async fn bundle(
    State(state): State<AppState>,
    Kind(scope): Kind,
    Path(request_id): Path<String>,
) -> ApiResult<Response> {
    send_bundle(&state, &scope, &request_id, false).await
}

/// The run's debug bundle (`run_bundle_debug.zip`) whatever the request asked: every file of
/// the run folder but the bundles and the agent's home, the artifacts run-relative
/// (`artifacts/...`), the request as `request.json`, the logs and prompt under `logs/`, and
/// `bundle/manifest_debug.json`. Built once the run is terminal. The same route exists under
/// `/v1/temp-skill-runs/{request_id}/bundle/debug`.
#[utoipa::path(get, path = "/v1/jobs/{request_id}/bundle/debug", tag = "jobs",
    params(("request_id" = String, Path)),
    responses(
        (status = 200, description = "The zip", content_type = "application/zip"),
        (status = 404, description = "Unknown request, or no run yet"),
        (status = 409, description = "The run is not finished"),
    ))]
pub async fn debug_bundle(
    State(state): State<AppState>,
    Kind(scope): Kind,
    Path(request_id): Path<String>,
) -> ApiResult<Response> {
    send_bundle(&state, &scope, &request_id, true).await
}

pub(super) async fn send_bundle(
    state: &AppState,
    scope: &Scope,
    request_id: &str,
    debug: bool,
) -> ApiResult<Response> {
    let bundle = state.jobs.bundle(scope, request_id, debug).await?;
    let file = tokio::fs::File::open(&bundle.path).await?;
    send_file(file, bundle.file_name, "application/zip").await
}

/// `{request_id, prompt, stdout, stderr}`.
#[utoipa::path(get, path = "/v1/jobs/{request_id}/logs", tag = "jobs",
    params(("request_id" = String, Path)),
    responses((status = 200, body = RunLogs), (status = 404, description = "Unknown request")))]
pub async fn logs(
    State(state): State<AppState>,
    Kind(scope): Kind,
    Path(request_id): Path<String>,
) -> ApiResult<Json<RunLogs>> {
    let logs = state.jobs.logs(&scope, &request_id).await?;
    Ok(Json(RunLogs::of(&request_id, logs)))
}

/// Bytes of one log of the run, from any offset: `stream` (`stdout`, `stderr`, `prompt`),
/// `byte_from`, `byte_to` (exclusive; at most 1 MiB after `byte_from`, clamped to the log's
/// size). The same route exists under `/v1/temp-skill-runs/{request_id}/logs/range`.
#[utoipa::path(get, path = "/v1/jobs/{request_id}/logs/range", tag = "jobs",
    params(("request_id" = String, Path), LogRangeQuery),
    responses(
        (status = 200, body = LogRange,
         example = json!({"request_id": "3f2c…", "stream": "stdout", "byte_from": 0, "byte_to": 8, "size": 12, "chunk": "working\n"})),
        (status = 400, description = "`byte_to` before `byte_from`"),
        (status = 404, description = "Unknown request, or no run yet"),
        (status = 422, description = "Unknown `stream` or a bad number"),
    ))]
pub async fn log_range(
    State(state): State<AppState>,
    Kind(scope): Kind,
    Path(request_id): Path<String>,
    query: Result<Query<LogRangeQuery>, QueryRejection>,
) -> ApiResult<Json<LogRange>> {
    let Query(q) = query.map_err(bad_query)?;
    let span = state
        .jobs
        .log_range(&scope, &request_id, q.stream.into(), q.byte_from, q.byte_to)
        .await?;
    Ok(Json(LogRange::of(&request_id, q.stream, span)))
}

/// Cancels a queued or running run (`CANCELED_BY_USER`); a finished run answers
/// `accepted: false`.
#[utoipa::path(post, path = "/v1/jobs/{request_id}/cancel", tag = "jobs",
    params(("request_id" = String, Path)),
    responses((status = 200, body = CancelResponse), (status = 404, description = "Unknown request or no run yet")))]
pub async fn cancel(
    State(state): State<AppState>,
    Kind(scope): Kind,
    Path(request_id): Path<String>,
) -> ApiResult<Json<CancelResponse>> {
    to_completion(async move {
        let canceled = state.jobs.cancel(&scope, &request_id).await?;
        Ok::<_, crate::error::Error>(Json(CancelResponse::of(&request_id, canceled)))
    })
    .await
}

/// Where an event stream starts: byte offsets into the logs (the seed's stream), or a `cursor`
/// (the FCMP stream of the reference's later versions).
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Byte offset in `logs/stdout.txt` to start from (the last `to` received).
    pub stdout_from: Option<u64>,
    /// Byte offset in `logs/stderr.txt` to start from.
    pub stderr_from: Option<u64>,
    /// Asks for FCMP/1.0 events instead: the `seq` of the last event received (0 for all).
    pub cursor: Option<u64>,
}

/// Live events of the run as Server-Sent Events, in one of two protocols.
///
/// Without `cursor` (the seed's stream): `snapshot`, `stdout` / `stderr` chunks `{from, to,
/// chunk}` (byte offsets into the logs), `status`, `heartbeat`, and `end {reason: waiting_user
/// | terminal}`. Every event has `id: <stdout_offset>:<stderr_offset>`; a `Last-Event-ID`
/// header resumes from it and takes precedence over the query parameters.
///
/// With `cursor` (FCMP/1.0, as the reference's v0.7 clients ask): `snapshot {status, cursor,
/// pending_interaction_id}`, then each event as `chat_event` with its envelope `{protocol_version:
/// "fcmp/1.0", run_id, seq, ts, engine, type, data, meta: {attempt, local_seq}, raw_ref}` (its SSE
/// `id` is its `seq`; a numeric `Last-Event-ID` resumes after it), `heartbeat`, and `end`. The
/// events are those of `.../events/history`.
///
/// The same route exists under `/v1/temp-skill-runs/{request_id}/events` and
/// `/v1/management/runs/{request_id}/events`.
#[utoipa::path(get, path = "/v1/jobs/{request_id}/events", tag = "jobs",
    params(("request_id" = String, Path), EventsQuery,
        ("Last-Event-ID" = Option<String>, Header, description = "`<stdout_offset>:<stderr_offset>` of the last event received, or its `seq` on the FCMP stream")),
    responses(
        (status = 200, description = "The event stream", content_type = "text/event-stream"),
        (status = 400, description = "Malformed Last-Event-ID"),
        (status = 404, description = "Unknown request or no run yet"),
        (status = 422, description = "Offsets or cursor are not non-negative integers, or both are given"),
    ))]
pub async fn events(
    State(state): State<AppState>,
    Kind(scope): Kind,
    opener: Opener,
    Path(request_id): Path<String>,
    query: Result<Query<EventsQuery>, QueryRejection>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let Query(query) = query.map_err(bad_query)?;
    let offsets = query.stdout_from.is_some() || query.stderr_from.is_some();
    if offsets && query.cursor.is_some() {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            serde_json::json!([{"loc": ["query", "cursor"], "type": "value_error",
                "msg": "cursor asks for the FCMP stream, stdout_from/stderr_from for the byte \
                        stream: give one or the other"}]),
        ));
    }
    let last_id = headers.get("last-event-id");
    let numeric_id = last_id
        .and_then(|id| id.to_str().ok())
        .is_some_and(|id| id.trim().parse::<u64>().is_ok());
    if query.cursor.is_some() || (numeric_id && !offsets) {
        let cursor = super::chat::cursor(&headers, query.cursor)?;
        let stream = state
            .jobs
            .conversation_stream::<Fcmp>(&scope, &request_id, cursor)
            .await?;
        let slot = opener.open(&state, &request_id)?;
        return Ok(sse(slot, stream, |e| (e.name, e.id, e.data)));
    }
    let from = match last_id {
        Some(id) => id
            .to_str()
            .ok()
            .and_then(Offsets::from_event_id)
            .ok_or_else(|| {
                ApiError::bad_request(
                    "Last-Event-ID must be '<stdout_offset>:<stderr_offset>' as sent in an event id",
                )
            })?,
        None => Offsets {
            stdout: query.stdout_from.unwrap_or(0),
            stderr: query.stderr_from.unwrap_or(0),
        },
    };
    let stream = state.jobs.events(&scope, &request_id, from).await?;
    let slot = opener.open(&state, &request_id)?;
    Ok(sse(slot, stream, |e| (e.name, e.id, e.data)))
}

/// The question the run waits on: `{request_id, status, pending}` (`pending` is `null` when
/// none waits). Interactive requests only; `?wait=<seconds>` (at most 120) waits for a run
/// under way to ask (or end). Also `/v1/management/runs/{request_id}/pending`.
#[utoipa::path(get, path = "/v1/jobs/{request_id}/interaction/pending", tag = "jobs",
    params(("request_id" = String, Path), WaitQuery),
    responses(
        (status = 200, body = PendingInteraction),
        (status = 400, description = "The request is not interactive"),
        (status = 404, description = "Unknown request or no run yet"),
        (status = 422, description = "`wait` out of range"),
    ))]
pub async fn pending(
    State(state): State<AppState>,
    Kind(scope): Kind,
    Path(request_id): Path<String>,
    query: Result<Query<WaitQuery>, QueryRejection>,
) -> ApiResult<Json<PendingInteraction>> {
    let Query(query) = query.map_err(bad_query)?;
    let pending = state
        .jobs
        .pending(&scope, &request_id, query.wait()?)
        .await?;
    Ok(Json(PendingInteraction::of(&request_id, pending)))
}

/// Answers the pending question; the run's next turn is queued. Also
/// `/v1/management/runs/{request_id}/reply`.
#[utoipa::path(post, path = "/v1/jobs/{request_id}/interaction/reply", tag = "jobs",
    params(("request_id" = String, Path)),
    request_body = ReplyBody,
    responses(
        (status = 200, body = ReplyAccepted),
        (status = 400, description = "The request is not interactive"),
        (status = 404, description = "Unknown request or no run yet"),
        (status = 409, description = "Not waiting, stale interaction_id, or idempotency_key reused with another response"),
        (status = 422, description = "Body is not valid JSON of this shape"),
        (status = 429, description = "Job queue is full (see Retry-After)"),
    ))]
pub async fn reply(
    State(state): State<AppState>,
    Kind(scope): Kind,
    Path(request_id): Path<String>,
    body: Result<Json<ReplyBody>, JsonRejection>,
) -> ApiResult<Json<ReplyAccepted>> {
    let Json(body) = body.map_err(bad_json)?;
    to_completion(async move {
        state.jobs.reply(&scope, &request_id, body.into()).await?;
        Ok::<_, crate::error::Error>(Json(ReplyAccepted {
            request_id,
            status: RunStatus::Queued,
            accepted: true,
        }))
    })
    .await
}

/// Deletes every finished run with its requests and cache entries; active runs are kept.
#[utoipa::path(post, path = "/v1/jobs/cleanup", tag = "jobs",
    responses((status = 200, body = CleanupCounts)))]
pub async fn cleanup(State(state): State<AppState>) -> ApiResult<Json<CleanupCounts>> {
    to_completion(async move { state.jobs.cleanup_now().await.map_err(ApiError::Internal) })
        .await
        .map(Json)
}

pub(super) async fn send_file(
    file: tokio::fs::File,
    name: &str,
    content_type: &'static str,
) -> ApiResult<Response> {
    let len = file.metadata().await?.len();
    let disposition = format!(
        "attachment; filename=\"{}\"",
        name.replace(['"', '\\', '\r', '\n'], "_")
    );
    let mut response = Body::from_stream(ReaderStream::new(file)).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    if let Ok(v) = HeaderValue::from_str(&disposition) {
        headers.insert(header::CONTENT_DISPOSITION, v);
    }
    Ok(response)
}
