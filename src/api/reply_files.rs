//! `POST /v1/jobs/{request_id}/interaction/reply/files`: files as the answer to a question
//! (what becomes of them: [`skill_runner_core::jobs::reply_files`]).

use axum::Json;
use axum::extract::multipart::{Multipart, MultipartError, MultipartRejection};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::Value;
use skill_runner_core::jobs::reply_files::{
    FILE_REPLY_LIMITS, FileReply, FileReplyLimits, ReceivedFile,
};
use tokio::io::AsyncWriteExt as _;

use super::jobs::{Kind, to_completion};
use super::run_views::ReplyAccepted;
use crate::api::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::store::RunStatus;

/// The most bytes of the `metadata` part.
const METADATA_BYTES: usize = 64 * 1024;

/// Answers a pending `upload_files` question with files (the reference's
/// `skillrunner.interaction-files.v1`). `multipart/form-data`: a `metadata` part holding JSON
/// `{interaction_id, idempotency_key, message?, bindings: [{slot, file_index}]}` and one or more
/// `files` parts, numbered from 0 in the order sent. Every file is bound to exactly one slot of
/// the question's `ui_hints.files`, every required slot gets one, and no file is empty. The
/// next turn reads `{kind: "interaction_files", message, files: [{slot, name, path, size_bytes,
/// sha256}]}` (`path` in its workspace). Also under
/// `/v1/temp-skill-runs/{request_id}/interaction/reply/files` and
/// `/v1/management/runs/{request_id}/reply/files`.
#[utoipa::path(post, path = "/v1/jobs/{request_id}/interaction/reply/files", tag = "jobs",
    params(("request_id" = String, Path)),
    request_body(content = crate::api::openapi::ReplyFilesForm, content_type = "multipart/form-data"),
    responses(
        (status = 200, body = ReplyAccepted, example = json!({"request_id": "6f1c…",
            "status": "queued", "accepted": true})),
        (status = 400, description = "Not multipart, no `metadata` part, metadata not JSON, or the request is not interactive"),
        (status = 404, description = "Unknown request or no run yet"),
        (status = 409, description = "Not waiting, stale interaction_id, a question that wants no files, or idempotency_key reused with other files"),
        (status = 413, description = "More than 8 files, a file over 32 MiB or more than 64 MiB in all"),
        (status = 422, description = "Metadata fields, bindings or an empty file"),
    ))]
pub async fn reply_files(
    State(state): State<AppState>,
    Kind(scope): Kind,
    Path(request_id): Path<String>,
    multipart: Result<Multipart, MultipartRejection>,
) -> ApiResult<Json<ReplyAccepted>> {
    let mut multipart =
        multipart.map_err(|e| ApiError::bad_request(format!("not a multipart body: {e}")))?;
    let dir = state
        .jobs
        .upload_dir(crate::store::RequestKind::Job, ".reply-files")
        .join(uuid::Uuid::new_v4().simple().to_string());
    let received = receive(&mut multipart, &dir, FILE_REPLY_LIMITS).await;
    let outcome = match received {
        Ok((metadata, files)) => {
            to_completion(async move {
                let reply = read_metadata(&metadata)?;
                state
                    .jobs
                    .reply_with_files(&scope, &request_id, reply, files)
                    .await?;
                Ok::<_, ApiError>(Json(ReplyAccepted {
                    request_id,
                    status: RunStatus::Queued,
                    accepted: true,
                }))
            })
            .await
        }
        Err(e) => Err(e),
    };
    let _ = tokio::fs::remove_dir_all(&dir).await;
    outcome
}

/// The `metadata` text and the `files` saved under `dir`, within `limits`.
async fn receive(
    multipart: &mut Multipart,
    dir: &std::path::Path,
    limits: FileReplyLimits,
) -> ApiResult<(String, Vec<ReceivedFile>)> {
    let malformed =
        |e: MultipartError| ApiError::bad_request(format!("malformed multipart body: {e}"));
    let too_large = |what: String| ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, what);
    let (mut metadata, mut files) = (None, Vec::new());
    let mut total = 0u64;
    while let Some(mut field) = multipart.next_field().await.map_err(malformed)? {
        match field.name() {
            Some("metadata") => {
                let mut text = Vec::new();
                while let Some(chunk) = field.chunk().await.map_err(malformed)? {
                    text.extend_from_slice(&chunk);
                    if text.len() > METADATA_BYTES {
                        return Err(too_large(format!(
                            "'metadata' is over {METADATA_BYTES} bytes"
                        )));
                    }
                }
                let text = String::from_utf8(text)
                    .map_err(|_| ApiError::bad_request("'metadata' is not UTF-8 text"))?;
                metadata = Some(text);
            }
            Some("files") => {
                if files.len() == limits.max_files {
                    return Err(too_large(format!(
                        "more than {} files; send at most that many",
                        limits.max_files
                    )));
                }
                let name = field.file_name().unwrap_or("file").to_owned();
                tokio::fs::create_dir_all(dir).await?;
                let path = dir.join(files.len().to_string());
                let mut file = tokio::fs::File::create(&path).await?;
                let mut size = 0u64;
                while let Some(chunk) = field.chunk().await.map_err(malformed)? {
                    size += chunk.len() as u64;
                    total += chunk.len() as u64;
                    if size > limits.max_file_bytes {
                        return Err(too_large(format!(
                            "file '{name}' is over {} bytes",
                            limits.max_file_bytes
                        )));
                    }
                    if total > limits.max_total_bytes {
                        return Err(too_large(format!(
                            "the files are over {} bytes in all",
                            limits.max_total_bytes
                        )));
                    }
                    file.write_all(&chunk).await?;
                }
                file.flush().await?;
                files.push(ReceivedFile { name, path, size });
            }
            _ => {}
        }
    }
    let metadata =
        metadata.ok_or_else(|| ApiError::bad_request("the form has no 'metadata' part"))?;
    Ok((metadata, files))
}

/// `metadata` read: 400 when it is not JSON, 422 naming the field that is wrong.
fn read_metadata(text: &str) -> ApiResult<FileReply> {
    let value: Value = serde_json::from_str(text)
        .map_err(|e| ApiError::bad_request(format!("'metadata' is not JSON: {e}")))?;
    let field =
        |name: &str, why: &str| ApiError::invalid_field(name, format!("metadata.{name} {why}"));
    let interaction_id = value["interaction_id"]
        .as_u64()
        .ok_or_else(|| field("interaction_id", "must be a positive integer"))?;
    let idempotency_key = value["idempotency_key"]
        .as_str()
        .filter(|k| !k.trim().is_empty())
        .ok_or_else(|| field("idempotency_key", "must be a non-empty string"))?
        .to_owned();
    let message = match &value["message"] {
        Value::Null => None,
        Value::String(m) => Some(m.clone()),
        _ => return Err(field("message", "must be a string or null")),
    };
    let bindings = value["bindings"]
        .as_array()
        .ok_or_else(|| field("bindings", "must be an array of {slot, file_index}"))?
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let slot = b["slot"].as_str().filter(|s| !s.is_empty());
            let index = b["file_index"]
                .as_u64()
                .and_then(|n| usize::try_from(n).ok());
            match (slot, index) {
                (Some(slot), Some(index)) => Ok((slot.to_owned(), index)),
                _ => Err(field(
                    "bindings",
                    &format!("[{i}] must be {{slot: non-empty string, file_index: integer}}"),
                )),
            }
        })
        .collect::<ApiResult<Vec<_>>>()?;
    Ok(FileReply {
        interaction_id,
        idempotency_key,
        message,
        bindings,
    })
}
