//! The HTTP pieces both front ends of skill-runner share — the service (API and console) and
//! the example client, which drives the service only over HTTP: embedded front-end files, the
//! `Host` and same-origin guards, how connections are taken, the console's two languages, the
//! question form, the run form generated from a skill's schemas, and reading Server-Sent Events.
//!
//! The embedded files come from the repository's `static/` folder, which both front ends serve.

pub mod allowed_hosts;
pub mod assets;
pub mod body_deadline;
pub mod connections;
pub mod form;
pub mod i18n;
pub mod markdown;
pub mod question;
pub mod same_origin;
pub mod sse;
pub mod stream_caps;
pub mod tally;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// The routes load balancers, container health checks and an orchestrator's probes call: open
/// without a token and under any `Host` (a probe names the address it dialled, which an
/// operator's list of names need not hold). They tell nothing but whether the node works.
pub const PROBES: [&str; 3] = ["/v1/system/ping", "/healthz", "/readyz"];

/// An error answer in the shape every route of the service uses: `{"detail": ...}`.
pub fn detail(status: StatusCode, detail: impl Into<serde_json::Value>) -> Response {
    (
        status,
        axum::Json(serde_json::json!({ "detail": detail.into() })),
    )
        .into_response()
}
