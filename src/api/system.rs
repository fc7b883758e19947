//! Liveness, readiness, version and metrics.

use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Json;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::api::error::ApiError;
use crate::state::AppState;

/// Longest wait for the store in a readiness check: a probe must answer in time.
const STORE_CHECK: Duration = Duration::from_secs(2);

/// Answers 204 while the service is up.
#[utoipa::path(get, path = "/v1/system/ping", tag = "system",
    responses((status = 204, description = "The service is up")))]
pub async fn ping() -> StatusCode {
    StatusCode::NO_CONTENT
}

/// Liveness for an orchestrator's probe: the process answers.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Health {
    /// Always `ok`.
    pub status: &'static str,
}

/// Liveness: 200 while the process answers (no dependency is checked: a restart would not
/// bring back a database that is down).
#[utoipa::path(get, path = "/healthz", tag = "system",
    responses((status = 200, description = "The process answers", body = Health)))]
pub async fn healthz() -> Json<Health> {
    Json(Health { status: "ok" })
}

/// Whether this node should get traffic, and what each check found.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Readiness {
    /// `ready` or `not_ready`.
    pub status: &'static str,
    /// The store answers and holds every migration this build expects: `ok` or `failed`.
    pub store: &'static str,
    /// The data dir can be written, and among nodes the shared storage answers: `ok`,
    /// `failed`, or `full` (the data volume has no room: new work is refused with 507).
    pub storage: &'static str,
    /// A shutdown began: the node takes no new work.
    pub draining: bool,
}

/// Readiness: 200 when the store, the data dir and shared storage work and no shutdown began,
/// else 503. A failed check's cause is logged, not answered.
#[utoipa::path(get, path = "/readyz", tag = "system",
    responses((status = 200, description = "Ready", body = Readiness),
              (status = 503, description = "Not ready: the failed check is named", body = Readiness)))]
pub async fn readyz(State(state): State<AppState>) -> (StatusCode, Json<Readiness>) {
    let store = match tokio::time::timeout(STORE_CHECK, state.store.check()).await {
        Ok(Ok(())) => "ok",
        Ok(Err(e)) => {
            tracing::warn!(
                error = format!("{e:#}"),
                "readiness: the store check failed"
            );
            "failed"
        }
        Err(_) => {
            tracing::warn!("readiness: the store did not answer within {STORE_CHECK:?}");
            "failed"
        }
    };
    let data = &state.config.data_dir;
    let mut storage = match nix::unistd::access(data, nix::unistd::AccessFlags::W_OK) {
        Ok(()) => "ok",
        Err(e) => {
            tracing::warn!(error = %e, path = %data.display(), "readiness: the data dir is unwritable");
            "failed"
        }
    };
    if let Some(shared) = state.jobs.storage() {
        match tokio::time::timeout(STORE_CHECK, shared.check()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = format!("{e:#}"), "readiness: shared storage failed");
                storage = "failed";
            }
            Err(_) => {
                tracing::warn!("readiness: shared storage did not answer within {STORE_CHECK:?}");
                storage = "failed";
            }
        }
    }
    if storage == "ok" && state.jobs.storage_full() {
        tracing::warn!("readiness: the data volume is full");
        storage = "full";
    }
    let draining = state.draining.load(Ordering::Relaxed);
    let ready = store == "ok" && storage == "ok" && !draining;
    let readiness = Readiness {
        status: if ready { "ready" } else { "not_ready" },
        store,
        storage,
        draining,
    };
    let code = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, Json(readiness))
}

/// This build and node.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Version {
    /// `skill-runner`.
    pub service: &'static str,
    /// The service's version.
    pub version: &'static str,
    /// The API's version prefix.
    pub api: &'static str,
    /// This node's id (`SKILL_RUNNER_NODE_ID`).
    pub node_id: String,
    /// The store's database: `sqlite` or `postgres` (`SKILL_RUNNER_DATABASE_URL`).
    pub store: &'static str,
}

/// The service's version and this node.
#[utoipa::path(get, path = "/v1/system/version", tag = "system",
    responses((status = 200, description = "Version and node", body = Version)))]
pub async fn version(State(state): State<AppState>) -> Json<Version> {
    Json(Version {
        service: "skill-runner",
        version: env!("CARGO_PKG_VERSION"),
        api: "v1",
        node_id: state.config.node_id.clone(),
        store: state.store.kind(),
    })
}

/// Which series a scrape wants.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
pub struct MetricsQuery {
    /// Only this tenant's series of the run counts (`skill_runner_runs{tenant=…}`); the
    /// service's own series stay.
    pub tenant_id: Option<String>,
}

/// Prometheus metrics, text format 0.0.4: the runs by state, engine and tenant, and the
/// service's own counters. Behind the API's tokens when they are set; an admin key's with keys
/// (they count every tenant's runs).
#[utoipa::path(get, path = "/metrics", tag = "system", params(MetricsQuery),
    responses((status = 200, description = "The metrics", content_type = "text/plain")))]
pub async fn metrics(
    State(state): State<AppState>,
    Query(query): Query<MetricsQuery>,
) -> Result<Response, ApiError> {
    let tenant = query.tenant_id.as_deref().filter(|t| !t.is_empty());
    let page = crate::metrics::render(&state.store, tenant).await?;
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        page,
    )
        .into_response())
}

/// `POST /v1/system/handshake` body: which protocols a client means to use.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
pub struct HandshakeRequest {
    /// `zotero-agents.skillrunner-handshake.request.v1` (others are answered alike).
    #[serde(default)]
    pub schema: Option<String>,
    /// The client's own `{name, version}`, for its records.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub client: serde_json::Value,
    /// Protocol ids, such as `skillrunner.job.v1`; left out or empty, the reference's
    /// default: `skillrunner.job.v1` and `skillrunner.sequence.v1`.
    #[serde(default)]
    pub requested_protocols: Vec<String>,
}

/// What a handshake that names no protocol asks about, as in the reference.
const DEFAULT_PROTOCOLS: [&str; 2] = ["skillrunner.job.v1", "skillrunner.sequence.v1"];

/// What the service supports of each protocol asked for.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct HandshakeResponse {
    /// `zotero-agents.skillrunner-handshake.response.v1`.
    pub schema: &'static str,
    #[schema(value_type = Object)]
    pub backend: serde_json::Value,
    /// By protocol id: `{supported}`, with its limits for `skillrunner.interaction-files.v1`.
    #[schema(value_type = Object)]
    pub protocols: serde_json::Map<String, serde_json::Value>,
}

/// Says which of the protocols a client asks about this service supports, as the reference's
/// clients ask before they send work: `skillrunner.job.v1` (jobs), and
/// `skillrunner.interaction-files.v1` (file answers to questions, with the limits uploads are
/// held to); any other id, `skillrunner.sequence.v1` included, is `{supported: false}`.
#[utoipa::path(post, path = "/v1/system/handshake", tag = "system",
    request_body(content = HandshakeRequest, example = json!({
        "schema": "zotero-agents.skillrunner-handshake.request.v1",
        "client": {"name": "zotero-agents", "version": "0.5.4"},
        "requested_protocols": ["skillrunner.job.v1", "skillrunner.interaction-files.v1"]})),
    responses((status = 200, body = HandshakeResponse, example = json!({
        "schema": "zotero-agents.skillrunner-handshake.response.v1",
        "backend": {"name": "skill-runner", "version": "0.1.0"},
        "protocols": {
            "skillrunner.job.v1": {"supported": true},
            "skillrunner.interaction-files.v1": {"supported": true, "max_files": 8,
                "max_file_bytes": 33554432, "max_total_bytes": 67108864}}})),
        (status = 422, description = "`requested_protocols` is given but is not a list of strings")))]
pub async fn handshake(
    body: Result<Json<HandshakeRequest>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<HandshakeResponse>, ApiError> {
    let Json(body) = body.map_err(super::jobs::bad_json)?;
    let limits = skill_runner_core::jobs::reply_files::FILE_REPLY_LIMITS;
    let mut asked = body.requested_protocols;
    if asked.is_empty() {
        asked = DEFAULT_PROTOCOLS.map(str::to_owned).to_vec();
    }
    let protocols = asked
        .into_iter()
        .map(|id| {
            let answer = match id.as_str() {
                "skillrunner.job.v1" => serde_json::json!({"supported": true}),
                "skillrunner.interaction-files.v1" => serde_json::json!({
                    "supported": true,
                    "max_files": limits.max_files,
                    "max_file_bytes": limits.max_file_bytes,
                    "max_total_bytes": limits.max_total_bytes,
                }),
                _ => serde_json::json!({"supported": false}),
            };
            (id, answer)
        })
        .collect();
    Ok(Json(HandshakeResponse {
        schema: "zotero-agents.skillrunner-handshake.response.v1",
        backend: serde_json::json!({"name": "skill-runner", "version": env!("CARGO_PKG_VERSION")}),
        protocols,
    }))
}

/// `GET /v1/runtime/network/client-address`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ClientAddressAnswer {
    /// The caller's IP address as the service sees its connection (a proxy's, behind one).
    pub client_ip: Option<String>,
}

/// The caller's IP address as the service sees it (the reference's network diagnosis); the
/// same address is kept as `client_address` of every request created.
#[utoipa::path(get, path = "/v1/runtime/network/client-address", tag = "system",
    responses((status = 200, body = ClientAddressAnswer, example = json!({"client_ip": "203.0.113.7"}))))]
pub async fn client_address(
    super::jobs::ClientAddress(client_ip): super::jobs::ClientAddress,
) -> Json<ClientAddressAnswer> {
    Json(ClientAddressAnswer { client_ip })
}
