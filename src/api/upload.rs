//! Streaming a multipart file field to disk under a size cap.

use std::path::Path;

use axum::extract::multipart::{Field, Multipart, MultipartError};
use axum::http::StatusCode;
use tokio::io::AsyncWriteExt;

use crate::error::{ApiError, ApiResult};

fn malformed(e: MultipartError) -> ApiError {
    ApiError::bad_request(format!("malformed multipart body: {e}"))
}

/// Finds the field called `name` and streams it to `dest`; `None` when the form has no such
/// field. A body over `max_bytes` is refused with 413 and nothing is kept.
pub async fn save_file_field(
    multipart: &mut Multipart,
    name: &str,
    dest: &Path,
    max_bytes: u64,
) -> ApiResult<Option<u64>> {
    while let Some(field) = multipart.next_field().await.map_err(malformed)? {
        if field.name() == Some(name) {
            let saved = save_field(field, dest, max_bytes).await;
            if saved.is_err() {
                let _ = tokio::fs::remove_file(dest).await;
            }
            return saved.map(Some);
        }
    }
    Ok(None)
}

async fn save_field(mut field: Field<'_>, dest: &Path, max_bytes: u64) -> ApiResult<u64> {
    if let Some(parent) = dest.parent() {
        tokio::fs::create_dir_all(parent).await?;
    }
    let mut file = tokio::fs::File::create(dest).await?;
    let mut size = 0u64;
    while let Some(chunk) = field.chunk().await.map_err(malformed)? {
        size += chunk.len() as u64;
        if size > max_bytes {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("upload exceeds the limit of {max_bytes} bytes"),
            ));
        }
        file.write_all(&chunk).await?;
    }
    file.sync_all().await?;
    Ok(size)
}
