//! Liveness.

use axum::http::StatusCode;

/// Answers 204 while the service is up.
#[utoipa::path(get, path = "/v1/system/ping", tag = "system",
    responses((status = 204, description = "The service is up")))]
pub async fn ping() -> StatusCode {
    StatusCode::NO_CONTENT
}
