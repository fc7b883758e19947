//! `/ui/engines/mcp`: the operator's MCP server registry ([`McpRegistry`]) as a page: the
//! servers with their secrets masked, a form that adds or replaces one, an import of the JSON
//! the CLIs' own configurations hold (`{"mcpServers": {...}}`) or of one server of the API, and
//! a delete per server. Each change goes through the same checks as
//! `PUT /v1/management/mcp/servers/{server_id}`.

use askama::Template;
use axum::Form;
use axum::extract::{Path, State};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use skill_runner_core::mcp_registry::{McpRegistry, McpServerUpsert, McpServerView};

use super::{Lang, Page, render};
use crate::api::error::ApiError;
use crate::state::AppState;

#[derive(Template)]
#[template(path = "mcp_servers.html")]
struct McpPage {
    l: Lang,
    section: &'static str,
    servers: Vec<McpServerView>,
    notice: Option<String>,
    error: Option<String>,
}

#[derive(Template)]
#[template(path = "partials/mcp_servers.html")]
struct McpServers {
    l: Lang,
    servers: Vec<McpServerView>,
    notice: Option<String>,
    error: Option<String>,
}

/// How a server's fields read in the table.
trait Shown {
    fn transport(&self, server: &McpServerView) -> String {
        json!(server.transport)
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    fn activation(&self, server: &McpServerView) -> String {
        json!(server.activation)
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }
}

impl Shown for McpPage {}
impl Shown for McpServers {}

fn registry(state: &AppState) -> McpRegistry {
    McpRegistry::new(state.store.clone())
}

/// `GET /ui/engines/mcp`.
pub async fn page(l: Lang, State(state): State<AppState>) -> Page {
    render(&McpPage {
        l,
        section: "engines",
        servers: registry(&state).list().await.map_err(ApiError::from)?,
        notice: None,
        error: None,
    })
}

/// The servers as they are now, with what the last change said.
async fn servers(l: Lang, state: &AppState, said: Result<String, String>) -> Page {
    let (notice, error) = match said {
        Ok(notice) => (Some(notice).filter(|n| !n.is_empty()), None),
        Err(error) => (None, Some(error)),
    };
    render(&McpServers {
        l,
        servers: registry(state).list().await.map_err(ApiError::from)?,
        notice,
        error,
    })
}

/// The server form; secrets and arguments one per line.
#[derive(Debug, Deserialize)]
pub struct ServerForm {
    id: String,
    transport: String,
    activation: String,
    #[serde(default)]
    command: String,
    #[serde(default)]
    args: String,
    #[serde(default)]
    url: String,
    #[serde(default)]
    env: String,
    #[serde(default)]
    headers: String,
}

/// `NAME=value` lines as secret inputs (a name alone keeps the stored value).
fn secrets(lines: &str) -> Vec<Value> {
    lines
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .map(|line| match line.split_once('=') {
            Some((name, value)) => json!({"name": name.trim(), "value": value.trim()}),
            None => json!({"name": line}),
        })
        .collect()
}

/// Saves server `id` from its definition in the API's shape, through the registry's checks.
async fn save(state: &AppState, id: &str, definition: Value) -> Result<String, String> {
    let upsert: McpServerUpsert =
        serde_json::from_value(definition).map_err(|e| format!("server '{id}': {e}"))?;
    registry(state)
        .put(id, upsert)
        .await
        .map(|(view, _)| view.id)
        .map_err(|e| format!("server '{id}': {}", ApiError::from(e).into_message().1))
}

/// `POST /ui/engines/mcp/servers`.
pub async fn put(l: Lang, State(state): State<AppState>, Form(form): Form<ServerForm>) -> Page {
    let given = |v: &str| Some(v.trim().to_owned()).filter(|v| !v.is_empty());
    let definition = json!({
        "activation": form.activation,
        "scope": "run-local",
        "transport": form.transport,
        "command": given(&form.command),
        "args": form.args.lines().map(str::trim).filter(|a| !a.is_empty()).collect::<Vec<_>>(),
        "url": given(&form.url),
        "auth": {"env": secrets(&form.env), "headers": secrets(&form.headers)},
    });
    let said = save(&state, form.id.trim(), definition).await;
    let said = said.map(|id| l.tr("mcp.saved").replace("{ids}", &id));
    servers(l, &state, said).await
}

/// The import form.
#[derive(Debug, Deserialize)]
pub struct ImportForm {
    json: String,
    activation: String,
}

/// One server of a CLI's `mcpServers` object in the API's shape: `command`/`args`/`env`, or
/// `url`/`headers` with `type` `sse` or else Streamable HTTP.
fn from_cli_entry(entry: &Map<String, Value>, activation: &str) -> Value {
    let pairs = |field: &str| -> Vec<Value> {
        entry
            .get(field)
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .map(|(name, value)| json!({"name": name, "value": value}))
                    .collect()
            })
            .unwrap_or_default()
    };
    let url = entry.get("url").or_else(|| entry.get("httpUrl"));
    let transport = match (url, entry.get("type").and_then(Value::as_str)) {
        (None, _) => "stdio",
        (Some(_), Some("sse")) => "sse",
        (Some(_), _) => "http",
    };
    json!({
        "activation": activation,
        "scope": "run-local",
        "transport": transport,
        "command": entry.get("command"),
        "args": entry.get("args").cloned().unwrap_or(json!([])),
        "url": url,
        "auth": {"env": pairs("env"), "headers": pairs("headers")},
    })
}

/// `POST /ui/engines/mcp/import`: every server of the JSON, or none when one is refused.
pub async fn import(l: Lang, State(state): State<AppState>, Form(form): Form<ImportForm>) -> Page {
    let said = import_json(&state, &form.json, &form.activation).await;
    let said = said.map(|ids| l.tr("mcp.saved").replace("{ids}", &ids.join(", ")));
    servers(l, &state, said).await
}

async fn import_json(
    state: &AppState,
    text: &str,
    activation: &str,
) -> Result<Vec<String>, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let mut definitions: Vec<(String, Value)> = Vec::new();
    match value.get("mcpServers").and_then(Value::as_object) {
        Some(servers) => {
            for (id, entry) in servers {
                let entry = entry
                    .as_object()
                    .ok_or_else(|| format!("mcpServers.{id} is not an object"))?;
                definitions.push((id.clone(), from_cli_entry(entry, activation)));
            }
        }
        None => {
            let mut server = value
                .as_object()
                .cloned()
                .ok_or("expected an object: {\"mcpServers\": {...}} or one server with its id")?;
            let id = server
                .remove("id")
                .and_then(|id| id.as_str().map(str::to_owned))
                .ok_or("a server of the API's shape names its \"id\"")?;
            for field in ["effective_engines", "updated_at"] {
                server.remove(field);
            }
            definitions.push((id, Value::Object(server)));
        }
    }
    if definitions.is_empty() {
        return Err("mcpServers names no server".into());
    }
    let mut servers = Vec::new();
    for (id, definition) in definitions {
        let upsert = serde_json::from_value::<McpServerUpsert>(definition)
            .map_err(|e| format!("server '{id}': {e}"))?;
        servers.push((id, upsert));
    }
    // Each is checked before any is saved: one refused changes nothing.
    registry(state)
        .put_all(servers)
        .await
        .map(|views| views.into_iter().map(|v| v.id).collect())
        .map_err(|e| ApiError::from(e).into_message().1)
}

/// `POST /ui/engines/mcp/servers/{server_id}/delete`.
pub async fn delete(l: Lang, State(state): State<AppState>, Path(server_id): Path<String>) -> Page {
    registry(&state)
        .delete(&server_id)
        .await
        .map_err(ApiError::from)?;
    servers(l, &state, Ok(String::new())).await
}
