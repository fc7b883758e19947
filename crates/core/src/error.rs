//! The errors of the service's operations, by kind of problem.
//!
//! Core modules (`jobs`, `browse`, …) answer with these; only `api::error` decides which HTTP
//! status each kind becomes. A `detail` is the payload a client reads: a message, or an object
//! with a `code` and a `message` where clients of the reference service expect one.

use serde_json::Value;

/// Why an operation did not happen.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The caller's request is wrong; the detail names the field and why.
    #[error("invalid request: {0}")]
    Invalid(Value),
    /// A required field of the request is absent.
    #[error("'{field}' is missing from the {location}")]
    Missing {
        location: &'static str,
        field: &'static str,
    },
    /// The request is well formed, but what it says does not fit what it refers to (a file
    /// reply's bindings against the question's slots).
    #[error("unprocessable: {0}")]
    Unprocessable(Value),
    /// The caller's key does not allow the operation (a role too narrow, a key wider than
    /// the one making it).
    #[error("forbidden: {0}")]
    Forbidden(Value),
    /// The named thing does not exist (or not in the caller's scope).
    #[error("not found: {0}")]
    NotFound(Value),
    /// The thing exists, but its state does not allow the operation now.
    #[error("conflict: {0}")]
    Conflict(Value),
    /// What was asked for is larger than a configured bound; the detail names the bound and
    /// its variable.
    #[error("too large: {0}")]
    TooLarge(Value),
    /// The data volume is full: nothing was changed.
    #[error(
        "The service's storage is full: nothing was changed. Retry once an operator has freed space on its data volume"
    )]
    StorageFull,
    /// The caller's tenant is over one of its quotas; a retry after `retry_after` may
    /// succeed.
    #[error("too many: {detail}")]
    TooMany {
        detail: Value,
        retry_after: std::time::Duration,
    },
    /// The job queue has no free place; a retry after runs start may succeed.
    #[error("Job queue is full")]
    QueueFull,
    /// The run's files are in another node's data dir (several nodes on one database): the
    /// read is that node's to answer.
    #[error("The run's files are kept by node {}", .0.id)]
    HeldElsewhere(crate::store::NodeAddress),
    /// A failure of the service itself; its cause is logged, never shown to a client.
    #[error(transparent)]
    Internal(anyhow::Error),
}

impl From<anyhow::Error> for Error {
    /// The store's refusals that are the caller's to retry keep their kind.
    fn from(e: anyhow::Error) -> Self {
        if e.downcast_ref::<crate::store::QueueFull>().is_some() {
            // Counted as the in-memory queue counts its refusals.
            metrics::counter!(crate::jobs::telemetry::QUEUE_FULL).increment(1);
            return Self::QueueFull;
        }
        Self::Internal(e)
    }
}

impl Error {
    pub fn invalid(detail: impl Into<Value>) -> Self {
        Self::Invalid(detail.into())
    }

    pub fn not_found(detail: impl Into<Value>) -> Self {
        Self::NotFound(detail.into())
    }

    pub fn conflict(detail: impl Into<Value>) -> Self {
        Self::Conflict(detail.into())
    }

    pub fn forbidden(detail: impl Into<Value>) -> Self {
        Self::Forbidden(detail.into())
    }

    /// The human message of a client-side error (a string detail, or an object's `message`);
    /// `None` for an internal failure, whose cause is not for clients.
    pub fn message(&self) -> Option<String> {
        let detail = match self {
            Self::Invalid(d)
            | Self::Unprocessable(d)
            | Self::Forbidden(d)
            | Self::NotFound(d)
            | Self::Conflict(d)
            | Self::TooLarge(d)
            | Self::TooMany { detail: d, .. } => d,
            Self::Internal(_) => return None,
            other => return Some(other.to_string()),
        };
        Some(match detail {
            Value::String(s) => s.clone(),
            Value::Object(m) => match m.get("message") {
                Some(Value::String(s)) => s.clone(),
                _ => detail.to_string(),
            },
            other => other.to_string(),
        })
    }

    /// The machine-readable code of an object detail (`SKILL_ENGINE_UNSUPPORTED`, …).
    pub fn code(&self) -> Option<&str> {
        match self {
            Self::Invalid(d)
            | Self::NotFound(d)
            | Self::Conflict(d)
            | Self::TooLarge(d)
            | Self::TooMany { detail: d, .. } => d.get("code")?.as_str(),
            _ => None,
        }
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Self::Internal(e.into())
    }
}

/// Result of a service operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<crate::process::terminal::StartError> for Error {
    fn from(e: crate::process::terminal::StartError) -> Self {
        use crate::process::terminal::StartError;
        match e {
            StartError::Busy(message) => Self::conflict(message),
            StartError::Spawn(e) => Self::Internal(e.into()),
        }
    }
}
