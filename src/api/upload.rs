//! Streaming multipart file fields to disk under size caps.

use std::path::PathBuf;

use axum::extract::multipart::{Field, Multipart, MultipartError};
use axum::http::StatusCode;
use tokio::io::AsyncWriteExt;

use crate::api::error::{ApiError, ApiResult};

fn malformed(e: MultipartError) -> ApiError {
    ApiError::bad_request(format!("malformed multipart body: {e}"))
}

/// A file field to save.
#[derive(Debug, Clone)]
pub struct FileField {
    pub name: &'static str,
    pub dest: PathBuf,
    pub max_bytes: u64,
}

/// Streams each of `fields` found in the form to its `dest`; the sizes come back in the same
/// order (`None` for a field the form lacks). A field over its cap is refused with 413 and
/// nothing is kept.
pub async fn save_file_fields(
    multipart: &mut Multipart,
    fields: &[FileField],
) -> ApiResult<Vec<Option<u64>>> {
    let mut sizes = vec![None; fields.len()];
    let saved = async {
        while let Some(field) = multipart.next_field().await.map_err(malformed)? {
            let Some(i) = fields.iter().position(|f| field.name() == Some(f.name)) else {
                continue;
            };
            if sizes[i].is_some() {
                return Err(ApiError::bad_request(format!(
                    "the form has more than one '{}' field",
                    fields[i].name
                )));
            }
            sizes[i] = Some(save_field(field, &fields[i]).await?);
        }
        Ok(())
    }
    .await;
    if let Err(e) = saved {
        for f in fields {
            let _ = tokio::fs::remove_file(&f.dest).await;
        }
        return Err(e);
    }
    Ok(sizes)
}

async fn save_field(mut field: Field<'_>, spec: &FileField) -> ApiResult<u64> {
    if let Some(parent) = spec.dest.parent() {
        tokio::fs::create_dir_all(parent).await?;
    }
    let mut file = tokio::fs::File::create(&spec.dest).await?;
    let mut size = 0u64;
    while let Some(chunk) = field.chunk().await.map_err(malformed)? {
        size += chunk.len() as u64;
        if size > spec.max_bytes {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "'{}' exceeds the limit of {} bytes",
                    spec.name, spec.max_bytes
                ),
            ));
        }
        file.write_all(&chunk).await?;
    }
    file.sync_all().await?;
    Ok(size)
}
