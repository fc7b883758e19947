//! The Normalized Skill Result: the one body every invoke call answers with.

use serde::Serialize;
use serde_json::{Value, json};

/// The error codes of the invoke host; the HTTP status follows the code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[derive(strum::IntoStaticStr)]
#[strum(serialize_all = "SCREAMING_SNAKE_CASE")]
pub enum ErrorCode {
    InvalidArgument,
    InvalidJson,
    NotFound,
    ForbiddenPath,
    Timeout,
    Internal,
    ToolInvocationError,
}

impl ErrorCode {
    pub const ALL: [ErrorCode; 7] = [
        ErrorCode::InvalidArgument,
        ErrorCode::InvalidJson,
        ErrorCode::NotFound,
        ErrorCode::ForbiddenPath,
        ErrorCode::Timeout,
        ErrorCode::Internal,
        ErrorCode::ToolInvocationError,
    ];

    pub fn as_str(self) -> &'static str {
        self.into()
    }

    pub fn parse(code: &str) -> Option<ErrorCode> {
        ErrorCode::ALL.into_iter().find(|c| c.as_str() == code)
    }
}

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct SkillError {
    pub code: ErrorCode,
    pub message: String,
    /// Which field, what was expected, previews of unreadable output.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}

impl SkillError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            details: None,
        }
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// An input problem in `field`.
    pub fn invalid(field: &str, message: impl Into<String>) -> Self {
        let message = message.into();
        Self::new(ErrorCode::InvalidArgument, format!("{field}: {message}"))
            .with_details(json!({"field": field, "reason": message}))
    }

    pub fn forbidden(field: &str, path: &str, reason: &str) -> Self {
        Self::new(
            ErrorCode::ForbiddenPath,
            format!("{field} '{path}' is not allowed: {reason}"),
        )
        .with_details(json!({"field": field, "path": path, "reason": reason}))
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Internal, message)
    }
}

/// `meta` of a result.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Meta {
    pub latency_ms: u64,
    /// The skill's version, or the host's when the skill has none (or was not found).
    pub version: String,
    /// Set when the skill cut its answer short (a limit was reached).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truncated: Option<bool>,
    /// `inproc`, `cli:python`, `cli:exec`, `http` or `script`; null when no skill was resolved.
    pub runner_type: Option<String>,
}

/// The Normalized Skill Result: `success` ⇒ `error` is null, failure ⇒ `data` is null.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct SkillResult {
    pub success: bool,
    pub skill_id: String,
    pub trace_id: String,
    pub data: Option<Value>,
    pub error: Option<SkillError>,
    pub meta: Meta,
}

/// What a runner produced: data and whether it was cut short, or an error.
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    pub data: Value,
    pub truncated: Option<bool>,
}

impl From<Value> for Output {
    fn from(data: Value) -> Self {
        Self {
            data,
            truncated: None,
        }
    }
}

/// The longest trace id taken from a client.
pub const MAX_TRACE_ID: usize = 128;

/// The client's `X-Trace-Id`, trimmed, when it is usable (1–128 printable ASCII characters);
/// otherwise a new UUID.
pub fn trace_id(header: Option<&[u8]>) -> String {
    header
        .and_then(|raw| std::str::from_utf8(raw).ok())
        .map(str::trim)
        .filter(|t| !t.is_empty() && t.len() <= MAX_TRACE_ID)
        .filter(|t| t.bytes().all(|b| (0x20..0x7f).contains(&b)))
        .map_or_else(|| uuid::Uuid::new_v4().to_string(), str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names are derived twice (serde for JSON, strum for `as_str`): they must agree.
    #[test]
    fn code_names_are_the_same_in_json_and_as_str() {
        for c in ErrorCode::ALL {
            assert_eq!(serde_json::to_value(c).unwrap(), c.as_str());
        }
    }

    #[test]
    fn trace_ids_are_kept_or_replaced() {
        assert_eq!(trace_id(Some(b"  demo-123 ")), "demo-123");
        assert_eq!(trace_id(Some(&[b'a'; 128])), "a".repeat(128));
        for bad in [
            &b""[..],
            b"   ",
            &[b'a'; 129],
            b"bad\x01id",
            "caf\u{e9}".as_bytes(),
            b"\xff\xfe",
        ] {
            let id = trace_id(Some(bad));
            assert!(uuid::Uuid::parse_str(&id).is_ok(), "{bad:?} -> {id}");
        }
        assert_ne!(trace_id(None), trace_id(None));
    }
}
