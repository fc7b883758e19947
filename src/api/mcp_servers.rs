//! `/v1/management/mcp/servers`: the operator's MCP server registry (Basic Auth when on);
//! what the servers are and which turns get them: [`skill_runner_core::mcp_registry`].

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use serde::Serialize;
use skill_runner_core::mcp_registry::{McpRegistry, McpServerUpsert, McpServerView};

use super::auth::Admin;
use super::jobs::bad_json;
use crate::api::error::ApiResult;
use crate::state::AppState;

/// `GET /v1/management/mcp/servers`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct McpServerList {
    pub servers: Vec<McpServerView>,
}

fn registry(state: &AppState) -> McpRegistry {
    McpRegistry::new(state.store.clone())
}

/// Every MCP server of the registry, secrets masked.
#[utoipa::path(get, path = "/v1/management/mcp/servers", tag = "management",
    responses(
        (status = 200, body = McpServerList, example = json!({"servers": [{"id": "papers",
            "activation": "declared", "engines": null, "unsupported_engines": [],
            "effective_engines": ["codex", "gemini", "claude", "opencode", "qwen", "kilo", "codebuddy"],
            "scope": "run-local", "transport": "stdio", "command": "npx",
            "args": ["-y", "papers-mcp"], "url": null,
            "auth": {"env": [{"name": "PAPERS_TOKEN", "configured": true, "masked_value": "********"}],
                     "headers": []},
            "updated_at": "2026-11-27T03:00:00.000000Z"}]})),
        (status = 401, description = "Basic Auth is on and the request lacks it"),
    ))]
pub async fn list(_: Admin, State(state): State<AppState>) -> ApiResult<Json<McpServerList>> {
    Ok(Json(McpServerList {
        servers: registry(&state).list().await?,
    }))
}

/// Creates or replaces an MCP server. `activation`: `default` (every turn of its engines) or
/// `declared` (the runs of skills naming it in `runner.json` `mcp.required_servers`);
/// `transport` `stdio` (`command`, `args`, `auth.env`) or `http`/`sse` (`url`,
/// `auth.headers`). Secret values are write-only: one named without `value` keeps the stored
/// value. Runs created later get the new definition.
#[utoipa::path(put, path = "/v1/management/mcp/servers/{server_id}", tag = "management",
    params(("server_id" = String, Path)),
    request_body(content = McpServerUpsert, example = json!({"activation": "declared",
        "scope": "run-local", "transport": "stdio", "command": "npx",
        "args": ["-y", "papers-mcp"],
        "auth": {"env": [{"name": "PAPERS_TOKEN", "value": "…"}]}})),
    responses(
        (status = 200, body = McpServerView),
        (status = 400, description = "Not JSON, or a field of the wrong type"),
        (status = 401, description = "Basic Auth is on and the request lacks it"),
        (status = 422, description = "A field the definition refuses (which, and why)"),
    ))]
pub async fn put(
    _: Admin,
    State(state): State<AppState>,
    Path(server_id): Path<String>,
    body: Result<Json<McpServerUpsert>, JsonRejection>,
) -> ApiResult<Json<McpServerView>> {
    let Json(body) = body.map_err(bad_json)?;
    let (view, _) = registry(&state).put(&server_id, body).await?;
    Ok(Json(view))
}

/// `DELETE /v1/management/mcp/servers/{server_id}`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct McpServerDeleted {
    pub server_id: String,
    pub deleted: bool,
}

/// Removes an MCP server (`deleted: false` when there was none). Skills that require it are
/// refused at create from then on.
#[utoipa::path(delete, path = "/v1/management/mcp/servers/{server_id}", tag = "management",
    params(("server_id" = String, Path)),
    responses(
        (status = 200, body = McpServerDeleted, example = json!({"server_id": "papers", "deleted": true})),
        (status = 401, description = "Basic Auth is on and the request lacks it"),
    ))]
pub async fn delete(
    _: Admin,
    State(state): State<AppState>,
    Path(server_id): Path<String>,
) -> ApiResult<Json<McpServerDeleted>> {
    let deleted = registry(&state).delete(&server_id).await?;
    Ok(Json(McpServerDeleted {
        server_id: server_id.trim().to_owned(),
        deleted,
    }))
}
