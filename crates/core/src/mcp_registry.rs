//! The operator's registry of MCP servers (`/v1/management/mcp/servers`), kept in the store so
//! every node sees it, and the servers a job's turn gets from it ([`crate::engines::mcp`]).
//!
//! Secret values are write-only: an upsert that names a secret without a value keeps the one
//! stored; the views say whether each is configured, never what it is.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::json;
use skill_runner_types::engine::Engine;

use crate::clock::Timestamp;
use crate::engines::mcp::{
    self, Activation, McpServer, SecretSlot, SecretSlots, SecretValues, Transport, TurnServer,
};
use crate::error::{Error, Result};
use crate::skill::SkillManifest;
use crate::store::{Store, StoredMcpServer};

/// A secret slot in an upsert: its name, and its value (absent: keep the stored one).
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretInput {
    pub name: String,
    #[serde(default)]
    pub prefix: String,
    #[serde(default)]
    pub value: Option<String>,
}

/// The secrets of an upsert.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AuthInput {
    #[serde(default)]
    pub env: Vec<SecretInput>,
    #[serde(default)]
    pub headers: Vec<SecretInput>,
}

/// `PUT /v1/management/mcp/servers/{server_id}`, the reference's shape.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct McpServerUpsert {
    pub activation: Activation,
    #[serde(default)]
    pub engines: Option<Vec<Engine>>,
    #[serde(default)]
    pub unsupported_engines: Vec<Engine>,
    pub scope: String,
    pub transport: Transport,
    #[serde(default)]
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub auth: AuthInput,
}

/// A secret as the views show it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct SecretView {
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub prefix: String,
    pub configured: bool,
    /// `********` when configured, else empty: the value is never shown.
    pub masked_value: &'static str,
}

/// The secrets of a server as the views show them.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct AuthView {
    pub env: Vec<SecretView>,
    pub headers: Vec<SecretView>,
}

/// A server of the registry, its secrets masked.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct McpServerView {
    pub id: String,
    pub activation: Activation,
    pub engines: Option<Vec<Engine>>,
    pub unsupported_engines: Vec<Engine>,
    pub effective_engines: Vec<Engine>,
    pub scope: String,
    pub transport: Transport,
    pub command: Option<String>,
    pub args: Vec<String>,
    pub url: Option<String>,
    pub auth: AuthView,
    pub updated_at: Timestamp,
}

fn view(server: &McpServer, secrets: &SecretValues, updated_at: Timestamp) -> McpServerView {
    let shown = |slots: &[SecretSlot], kind: &str| {
        slots
            .iter()
            .map(|slot| {
                let configured = secrets.contains_key(&mcp::secret_key(kind, &slot.name));
                SecretView {
                    name: slot.name.clone(),
                    prefix: slot.prefix.clone(),
                    configured,
                    masked_value: if configured { "********" } else { "" },
                }
            })
            .collect()
    };
    McpServerView {
        id: server.id.clone(),
        activation: server.activation,
        engines: server.engines.clone(),
        unsupported_engines: server.unsupported_engines.clone(),
        effective_engines: server.effective_engines(),
        scope: server.scope.clone(),
        transport: server.transport,
        command: server.command.clone(),
        args: server.args.clone(),
        url: server.url.clone(),
        auth: AuthView {
            env: shown(&server.auth.env, "env"),
            headers: shown(&server.auth.headers, "header"),
        },
        updated_at,
    }
}

/// The MCP server registry.
#[derive(Debug, Clone)]
pub struct McpRegistry {
    store: Store,
}

impl McpRegistry {
    pub fn new(store: Store) -> Self {
        Self { store }
    }

    /// Every server with its secret values.
    async fn load(&self) -> Result<Vec<(TurnServer, Timestamp)>> {
        let mut servers = Vec::new();
        for row in self.store.mcp_servers().await? {
            let server: McpServer = serde_json::from_str(&row.definition).map_err(|e| {
                Error::Internal(anyhow::anyhow!("MCP server {}: {e}", row.server_id))
            })?;
            let secrets: SecretValues = serde_json::from_str(&row.secrets).map_err(|e| {
                Error::Internal(anyhow::anyhow!("MCP server {}: {e}", row.server_id))
            })?;
            servers.push((TurnServer { server, secrets }, row.updated_at));
        }
        Ok(servers)
    }

    /// Every server, secrets masked.
    pub async fn list(&self) -> Result<Vec<McpServerView>> {
        Ok(self
            .load()
            .await?
            .iter()
            .map(|(s, at)| view(&s.server, &s.secrets, *at))
            .collect())
    }

    /// Creates or replaces the server `id`: the view, and whether it was created. A secret
    /// named without a value keeps the stored one (an error when there is none).
    pub async fn put(&self, id: &str, body: McpServerUpsert) -> Result<(McpServerView, bool)> {
        let (row, view) = self.checked(id, body).await?;
        let created = self.store.put_mcp_server(&row).await?;
        tracing::info!(server_id = row.server_id, created, "MCP server saved");
        Ok((view, created))
    }

    /// Creates or replaces several servers, once each of them passed the checks of [`Self::put`]:
    /// one refused changes nothing.
    pub async fn put_all(
        &self,
        servers: Vec<(String, McpServerUpsert)>,
    ) -> Result<Vec<McpServerView>> {
        let mut checked = Vec::new();
        for (id, body) in servers {
            checked.push(self.checked(&id, body).await?);
        }
        let mut views = Vec::new();
        for (row, view) in checked {
            let created = self.store.put_mcp_server(&row).await?;
            tracing::info!(server_id = row.server_id, created, "MCP server saved");
            views.push(view);
        }
        Ok(views)
    }

    /// Server `id` as it would be stored, and its view; refused when a field does not fit.
    async fn checked(
        &self,
        id: &str,
        body: McpServerUpsert,
    ) -> Result<(StoredMcpServer, McpServerView)> {
        let unprocessable = |m: String| Error::Unprocessable(json!(m));
        let id = id.trim();
        let slots = |inputs: &[SecretInput]| {
            inputs
                .iter()
                .map(|i| SecretSlot {
                    name: i.name.trim().to_owned(),
                    prefix: i.prefix.clone(),
                })
                .collect()
        };
        let server = McpServer {
            id: id.to_owned(),
            activation: body.activation,
            engines: body.engines,
            unsupported_engines: body.unsupported_engines,
            scope: body.scope,
            transport: body.transport,
            command: body.command.filter(|c| !c.trim().is_empty()),
            args: body.args,
            url: body.url.filter(|u| !u.trim().is_empty()),
            auth: SecretSlots {
                env: slots(&body.auth.env),
                headers: slots(&body.auth.headers),
            },
        };
        server.check().map_err(unprocessable)?;
        let stored: BTreeMap<String, SecretValues> = self
            .load()
            .await?
            .into_iter()
            .map(|(s, _)| (s.server.id, s.secrets))
            .collect();
        let before = stored.get(id);
        let mut secrets = SecretValues::new();
        for (kind, inputs) in [("env", &body.auth.env), ("header", &body.auth.headers)] {
            for input in inputs {
                let key = mcp::secret_key(kind, input.name.trim());
                let value = match &input.value {
                    Some(v) if !v.is_empty() => v.clone(),
                    _ => before.and_then(|b| b.get(&key)).cloned().ok_or_else(|| {
                        unprocessable(format!(
                            "auth.{kind}{}: '{}' has no value yet; send one",
                            if kind == "env" { "" } else { "s" },
                            input.name
                        ))
                    })?,
                };
                secrets.insert(key, value);
            }
        }
        let updated_at = Timestamp::now();
        let row = StoredMcpServer {
            server_id: id.to_owned(),
            definition: serde_json::to_string(&server).map_err(|e| Error::Internal(e.into()))?,
            secrets: serde_json::to_string(&secrets).map_err(|e| Error::Internal(e.into()))?,
            updated_at,
        };
        Ok((row, view(&server, &secrets, updated_at)))
    }

    /// Removes the server `id`; whether it was there.
    pub async fn delete(&self, id: &str) -> Result<bool> {
        Ok(self.store.delete_mcp_server(id.trim()).await?)
    }

    /// The servers a turn of `skill` on `engine` gets; `Err` says why the skill's required
    /// servers cannot be given.
    pub async fn for_turn(
        &self,
        skill: &SkillManifest,
        engine: Engine,
    ) -> Result<std::result::Result<Vec<TurnServer>, String>> {
        if !mcp::MCP_ENGINES.contains(&engine) {
            return Ok(if skill.mcp_required_servers.is_empty() {
                Ok(Vec::new())
            } else {
                Err(format!(
                    "engine '{engine}' takes no MCP servers from the service"
                ))
            });
        }
        let registry: Vec<TurnServer> = self.load().await?.into_iter().map(|(s, _)| s).collect();
        Ok(mcp::resolve(&registry, &skill.mcp_required_servers, engine))
    }
}
