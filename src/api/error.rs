//! The one error type of the HTTP API, and the one place a domain [`Error`] gets its status.
//!
//! Every `/v1` error answers `{"detail": ...}` (a string or an object), the shape clients of the
//! reference service already parse. Server-side failures are logged with their cause chain and
//! answered with a fixed message, so internals never leak into a response.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::error::Error;
use skill_runner_store::NodeAddress;

/// Runs `work` on a blocking thread; a panic there is a server error.
pub async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ApiError::Internal(e.into()))
}

/// An error answered to an API client.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// A client-side problem: the status and the `detail` payload to send.
    #[error("{status}: {detail}")]
    Client { status: StatusCode, detail: Value },
    /// 429: the caller's tenant is over a quota; `Retry-After` says when to try again.
    #[error("429: {detail}")]
    Throttled {
        detail: Value,
        retry_after_secs: u64,
    },
    /// The answer is another node's: [`super::forward`] sends the read there.
    #[error("held by node {}", .0.id)]
    Elsewhere(NodeAddress),
    /// A server-side failure; the cause is logged, never returned.
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

impl ApiError {
    pub fn new(status: StatusCode, detail: impl Into<Value>) -> Self {
        Self::Client {
            status,
            detail: detail.into(),
        }
    }

    pub fn bad_request(detail: impl Into<Value>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, detail)
    }

    pub fn not_found(detail: impl Into<Value>) -> Self {
        Self::new(StatusCode::NOT_FOUND, detail)
    }

    /// A body field whose value is refused, in the list shape FastAPI clients expect.
    pub fn invalid_field(field: &str, message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            json!([{"loc": ["body", field], "msg": message.into(), "type": "value_error"}]),
        )
    }

    /// A required form or body field is absent, in the list shape FastAPI clients expect.
    pub fn missing_field(location: &str, field: &str) -> Self {
        Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            json!([{
                "loc": [location, field],
                "msg": format!("Field required: '{field}' is missing from the {location}"),
                "type": "missing",
            }]),
        )
    }
}

impl ApiError {
    /// The answer, with `warnings` (what the request named that was ignored) beside a client
    /// error's `detail`, whose shape stays the reference's.
    pub fn with_warnings(self, warnings: Vec<String>) -> Response {
        match self {
            Self::Client { status, detail } if !warnings.is_empty() => (
                status,
                axum::Json(json!({"detail": detail, "warnings": warnings})),
            )
                .into_response(),
            other => other.into_response(),
        }
    }
}

/// Gives the router's bare 405 a body: `{"detail": "Method Not Allowed", "allowed_methods":
/// [...]}` (FastAPI's detail, the methods of its `Allow` header beside it).
pub async fn explain_not_allowed(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let response = next.run(request).await;
    if response.status() != StatusCode::METHOD_NOT_ALLOWED
        || response.headers().contains_key(header::CONTENT_TYPE)
    {
        return response;
    }
    let allowed: Vec<&str> = response
        .headers()
        .get(header::ALLOW)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|m| !m.is_empty())
                .collect()
        })
        .unwrap_or_default();
    let mut answer = (
        StatusCode::METHOD_NOT_ALLOWED,
        axum::Json(json!({"detail": "Method Not Allowed", "allowed_methods": allowed})),
    )
        .into_response();
    if let Some(allow) = response.headers().get(header::ALLOW) {
        answer.headers_mut().insert(header::ALLOW, allow.clone());
    }
    answer
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        let (status, detail) = match e {
            Error::Invalid(d) => (StatusCode::BAD_REQUEST, d),
            Error::Unprocessable(d) => (StatusCode::UNPROCESSABLE_ENTITY, d),
            Error::Forbidden(d) => (StatusCode::FORBIDDEN, d),
            Error::NotFound(d) => (StatusCode::NOT_FOUND, d),
            Error::Conflict(d) => (StatusCode::CONFLICT, d),
            Error::TooLarge(d) => (StatusCode::PAYLOAD_TOO_LARGE, d),
            Error::StorageFull => (
                StatusCode::INSUFFICIENT_STORAGE,
                Value::String(Error::StorageFull.to_string()),
            ),
            Error::QueueFull => (
                StatusCode::TOO_MANY_REQUESTS,
                Value::String(Error::QueueFull.to_string()),
            ),
            Error::TooMany {
                detail,
                retry_after,
            } => {
                return Self::Throttled {
                    detail,
                    retry_after_secs: retry_after.as_secs_f64().ceil() as u64,
                };
            }
            Error::Missing { location, field } => return Self::missing_field(location, field),
            Error::HeldElsewhere(node) => return Self::Elsewhere(node),
            Error::Internal(cause) => return Self::Internal(cause),
        };
        Self::new(status, detail)
    }
}

impl From<std::io::Error> for ApiError {
    fn from(e: std::io::Error) -> Self {
        Self::Internal(e.into())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match self.by_cause() {
            Self::Client { status, detail } => {
                let mut response = skill_runner_web::detail(status, detail);
                if status == StatusCode::TOO_MANY_REQUESTS {
                    // Queue places free up as runs start; a second is a fair first retry.
                    response
                        .headers_mut()
                        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                }
                response
            }
            Self::Throttled {
                detail,
                retry_after_secs,
            } => {
                let mut response = skill_runner_web::detail(StatusCode::TOO_MANY_REQUESTS, detail);
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs));
                response
            }
            Self::Elsewhere(node) => {
                // Answered as is only where nothing forwards it (a read forwarded already).
                let mut response =
                    skill_runner_web::detail(StatusCode::CONFLICT, Value::String(held_by(&node)));
                response.extensions_mut().insert(node);
                response
            }
            Self::Internal(cause) => {
                log_cause(&cause);
                internal_error_response()
            }
        }
    }
}

fn held_by(node: &NodeAddress) -> String {
    format!(
        "The run's files are kept by node {}; ask that node",
        node.id
    )
}

impl ApiError {
    /// The status and one line for a person reading a page (the console): a string detail as
    /// it is, an object's `message`, else the detail as JSON. A server-side cause is logged here
    /// and not shown.
    pub fn into_message(self) -> (StatusCode, String) {
        match self.by_cause() {
            Self::Throttled { detail, .. } => Self::Client {
                status: StatusCode::TOO_MANY_REQUESTS,
                detail,
            }
            .into_message(),
            Self::Client { status, detail } => {
                let message = match &detail {
                    Value::String(s) => s.clone(),
                    Value::Object(o) => match o.get("message") {
                        Some(Value::String(m)) => m.clone(),
                        _ => detail.to_string(),
                    },
                    _ => detail.to_string(),
                };
                (status, message)
            }
            Self::Elsewhere(node) => (StatusCode::CONFLICT, held_by(&node)),
            Self::Internal(cause) => {
                log_cause(&cause);
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "Internal server error".to_owned(),
                )
            }
        }
    }
}

/// What a client reads when the database under the service fails (the cause is logged).
pub const DATABASE_UNAVAILABLE: &str = "The service's database is unavailable: nothing was \
    kept. Retry once an operator has restored it";

impl ApiError {
    /// A failure for want of disk space, or of the database's volume, is not a bug of the
    /// service but a state of its machine the client should know of: `507` or `503` with what
    /// to do, instead of `500`.
    fn by_cause(self) -> Self {
        match self {
            Self::Internal(cause) if crate::disk_space::is_storage_full(&cause) => {
                tracing::warn!(error = format!("{cause:#}"), "request failed: storage full");
                Error::StorageFull.into()
            }
            Self::Internal(cause) if cause.chain().any(skill_runner_store::is_unavailable) => {
                tracing::error!(
                    error = format!("{cause:#}"),
                    "request failed: the database is unavailable"
                );
                Self::new(StatusCode::SERVICE_UNAVAILABLE, DATABASE_UNAVAILABLE)
            }
            other => other,
        }
    }
}

fn log_cause(cause: &anyhow::Error) {
    tracing::error!(error = format!("{cause:#}"), "request failed");
}

/// The body of every 5xx answer, also used for a handler that panicked.
pub fn internal_error_response() -> Response {
    let mut response =
        skill_runner_web::detail(StatusCode::INTERNAL_SERVER_ERROR, "Internal server error");
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// Result type of API handlers.
pub type ApiResult<T> = Result<T, ApiError>;
