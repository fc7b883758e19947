//! MCP servers for the agent CLIs: the operator's registry (`/v1/management/mcp/servers`), which
//! of its servers a turn gets, and how each CLI is told about them.
//!
//! A `default` server is given to every turn of the engines it applies to; a `declared` one only
//! to the runs of skills that name it in `runner.json` `mcp.required_servers`. Secret values
//! (an env variable of a `stdio` server, a header of an `http`/`sse` one) are written into the
//! turn's own configuration, which is removed when the turn ends, and masked in what the turn
//! prints; the registry's views never show them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use skill_runner_types::engine::Engine;

/// The engines whose CLIs take MCP servers from the service.
pub const MCP_ENGINES: [Engine; 7] = [
    Engine::Codex,
    Engine::Gemini,
    Engine::Claude,
    Engine::Opencode,
    Engine::Qwen,
    Engine::Kilo,
    Engine::Codebuddy,
];

/// When a server is given to a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Activation {
    /// Every turn of its engines.
    Default,
    /// The turns of skills that require it.
    Declared,
}

/// How the CLI reaches a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// A program the CLI starts (`command`, `args`).
    Stdio,
    /// Streamable HTTP at `url`.
    Http,
    /// Server-sent events at `url`.
    Sse,
}

/// A secret a server needs: an env variable (`stdio`) or a header (`http`, `sse`, its value
/// after `prefix`, e.g. `Bearer `).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SecretSlot {
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub prefix: String,
}

/// The secrets of a server, by kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SecretSlots {
    #[serde(default)]
    pub env: Vec<SecretSlot>,
    #[serde(default)]
    pub headers: Vec<SecretSlot>,
}

/// A server of the registry, as stored (without its secret values).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct McpServer {
    pub id: String,
    pub activation: Activation,
    /// The engines it applies to (all that take MCP servers when absent).
    #[serde(default)]
    pub engines: Option<Vec<Engine>>,
    #[serde(default)]
    pub unsupported_engines: Vec<Engine>,
    /// `run-local` (the reference's `agent-home` is taken as `run-local`: every turn gets its
    /// own configuration here).
    pub scope: String,
    pub transport: Transport,
    #[serde(default)]
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub auth: SecretSlots,
}

/// The secret values of a server, by `env:<NAME>` or `header:<Name>`.
pub type SecretValues = BTreeMap<String, String>;

/// The key of a secret slot in [`SecretValues`].
pub fn secret_key(kind: &str, name: &str) -> String {
    format!("{kind}:{name}")
}

impl McpServer {
    /// The engines whose turns may get it, in [`MCP_ENGINES`] order.
    pub fn effective_engines(&self) -> Vec<Engine> {
        MCP_ENGINES
            .into_iter()
            .filter(|e| self.engines.as_ref().is_none_or(|only| only.contains(e)))
            .filter(|e| !self.unsupported_engines.contains(e))
            .collect()
    }

    /// Checks a definition: which field is wrong, and why.
    pub fn check(&self) -> Result<(), String> {
        let id_ok = !self.id.is_empty()
            && self.id.len() <= 64
            && self
                .id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !id_ok {
            return Err(format!(
                "server_id: '{}' must be 1-64 letters, digits, '-' or '_'",
                self.id
            ));
        }
        if !matches!(self.scope.as_str(), "run-local" | "agent-home") {
            return Err(format!(
                "scope: '{}' must be 'run-local' or 'agent-home'",
                self.scope
            ));
        }
        for e in self
            .engines
            .iter()
            .flatten()
            .chain(&self.unsupported_engines)
        {
            if !MCP_ENGINES.contains(e) {
                return Err(format!(
                    "engines: '{e}' takes no MCP servers from the service (these do: {})",
                    names(&MCP_ENGINES)
                ));
            }
        }
        if let Some(both) = self
            .unsupported_engines
            .iter()
            .find(|e| self.engines.iter().flatten().any(|d| d == *e))
        {
            return Err(format!("unsupported_engines: '{both}' is also in engines"));
        }
        if self.effective_engines().is_empty() {
            return Err("engines: no engine is left to give this server to".into());
        }
        match self.transport {
            Transport::Stdio => {
                if self.command.as_deref().is_none_or(|c| c.trim().is_empty()) {
                    return Err("command: a stdio server needs the program to start".into());
                }
                if self.url.is_some() || !self.auth.headers.is_empty() {
                    return Err(
                        "url, auth.headers: a stdio server has none (use command, args, auth.env)"
                            .into(),
                    );
                }
            }
            Transport::Http | Transport::Sse => {
                let url = self.url.as_deref().unwrap_or_default();
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(format!(
                        "url: an {} server needs an http(s) URL",
                        self.transport_name()
                    ));
                }
                if self.command.is_some() || !self.args.is_empty() || !self.auth.env.is_empty() {
                    return Err(format!(
                        "command, args, auth.env: an {} server has none (use url, auth.headers)",
                        self.transport_name()
                    ));
                }
            }
        }
        let mut seen = Vec::new();
        for (kind, slot) in self.slots() {
            let ok = !slot.name.is_empty()
                && slot.name.len() <= 128
                && slot
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if !ok {
                return Err(format!(
                    "auth.{kind}: '{}' is not a variable or header name",
                    slot.name
                ));
            }
            let key = secret_key(kind, &slot.name);
            if seen.contains(&key) {
                return Err(format!("auth.{kind}: '{}' is named twice", slot.name));
            }
            seen.push(key);
        }
        Ok(())
    }

    fn transport_name(&self) -> &'static str {
        match self.transport {
            Transport::Stdio => "stdio",
            Transport::Http => "http",
            Transport::Sse => "sse",
        }
    }

    /// Every secret slot with its kind (`env`, `headers`).
    pub fn slots(&self) -> impl Iterator<Item = (&'static str, &SecretSlot)> {
        self.auth
            .env
            .iter()
            .map(|s| ("env", s))
            .chain(self.auth.headers.iter().map(|s| ("headers", s)))
    }

    /// The key of `slot` (of `kind`) in [`SecretValues`].
    pub fn slot_key(kind: &str, slot: &SecretSlot) -> String {
        secret_key(if kind == "env" { "env" } else { "header" }, &slot.name)
    }
}

fn names(engines: &[Engine]) -> String {
    engines
        .iter()
        .map(|e| e.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A server as a turn gets it: its definition and secret values.
#[derive(Debug, Clone)]
pub struct TurnServer {
    pub server: McpServer,
    pub secrets: SecretValues,
}

impl TurnServer {
    /// The env variables of a stdio server, values filled in.
    fn env(&self) -> BTreeMap<String, String> {
        self.filled(&self.server.auth.env, "env")
    }

    /// The headers of a remote server, values filled in after their prefixes.
    fn headers(&self) -> BTreeMap<String, String> {
        self.filled(&self.server.auth.headers, "header")
    }

    fn filled(&self, slots: &[SecretSlot], kind: &str) -> BTreeMap<String, String> {
        slots
            .iter()
            .filter_map(|slot| {
                let value = self.secrets.get(&secret_key(kind, &slot.name))?;
                Some((slot.name.clone(), format!("{}{value}", slot.prefix)))
            })
            .collect()
    }

    /// Every secret value, to mask in what the turn prints.
    pub fn secret_values(&self) -> impl Iterator<Item = &String> {
        self.secrets.values()
    }
}

/// Which servers of `registry` a turn on `engine` gets: every `default` one for the engine,
/// then those `required` (each must be `declared`, there, and for the engine); else why not,
/// naming the server.
pub fn resolve(
    registry: &[TurnServer],
    required: &[String],
    engine: Engine,
) -> Result<Vec<TurnServer>, String> {
    let mut chosen: Vec<TurnServer> = registry
        .iter()
        .filter(|s| {
            s.server.activation == Activation::Default
                && s.server.effective_engines().contains(&engine)
        })
        .cloned()
        .collect();
    for id in required {
        let Some(found) = registry.iter().find(|s| &s.server.id == id) else {
            return Err(format!(
                "the skill requires MCP server '{id}', which the registry does not have \
                 (PUT /v1/management/mcp/servers/{id})"
            ));
        };
        if found.server.activation != Activation::Declared {
            return Err(format!(
                "the skill requires MCP server '{id}', which is a 'default' server (given to \
                 every turn); a skill may only require 'declared' ones"
            ));
        }
        if !found.server.effective_engines().contains(&engine) {
            return Err(format!(
                "the skill requires MCP server '{id}', which is not for engine '{engine}' \
                 (it is for {})",
                names(&found.server.effective_engines())
            ));
        }
        chosen.push(found.clone());
    }
    Ok(chosen)
}

/// The servers as Claude Code and CodeBuddy read them (`--mcp-config`): `{"mcpServers": …}`.
pub fn claude_config(servers: &[TurnServer]) -> Value {
    let entries: serde_json::Map<String, Value> = servers
        .iter()
        .map(|s| {
            let v = match s.server.transport {
                Transport::Stdio => json!({"type": "stdio",
                    "command": s.server.command, "args": s.server.args, "env": s.env()}),
                Transport::Http => {
                    json!({"type": "http", "url": s.server.url, "headers": s.headers()})
                }
                Transport::Sse => {
                    json!({"type": "sse", "url": s.server.url, "headers": s.headers()})
                }
            };
            (s.server.id.clone(), v)
        })
        .collect();
    json!({"mcpServers": entries})
}

/// The servers as Gemini CLI and Qwen Code read them (`mcpServers` of `settings.json`).
pub fn gemini_servers(servers: &[TurnServer]) -> Value {
    let entries: serde_json::Map<String, Value> = servers
        .iter()
        .map(|s| {
            let v = match s.server.transport {
                Transport::Stdio => {
                    json!({"command": s.server.command, "args": s.server.args, "env": s.env()})
                }
                Transport::Http => json!({"httpUrl": s.server.url, "headers": s.headers()}),
                Transport::Sse => json!({"url": s.server.url, "headers": s.headers()}),
            };
            (s.server.id.clone(), v)
        })
        .collect();
    Value::Object(entries)
}

/// The servers as opencode and Kilo read them (`mcp` of their configuration).
pub fn opencode_servers(servers: &[TurnServer]) -> Value {
    let entries: serde_json::Map<String, Value> = servers
        .iter()
        .map(|s| {
            let v = match s.server.transport {
                Transport::Stdio => {
                    let command: Vec<&str> = s
                        .server
                        .command
                        .iter()
                        .map(String::as_str)
                        .chain(s.server.args.iter().map(String::as_str))
                        .collect();
                    json!({"type": "local", "command": command, "environment": s.env(),
                           "enabled": true})
                }
                Transport::Http | Transport::Sse => json!({"type": "remote",
                    "url": s.server.url, "headers": s.headers(), "enabled": true}),
            };
            (s.server.id.clone(), v)
        })
        .collect();
    Value::Object(entries)
}

/// The servers as Codex reads them (`[mcp_servers.<id>]` of `config.toml`).
pub fn codex_servers(servers: &[TurnServer]) -> toml::Table {
    servers
        .iter()
        .map(|s| {
            let mut entry = toml::Table::new();
            match s.server.transport {
                Transport::Stdio => {
                    entry.insert(
                        "command".into(),
                        s.server.command.clone().unwrap_or_default().into(),
                    );
                    entry.insert("args".into(), s.server.args.clone().into());
                    let env: toml::Table =
                        s.env().into_iter().map(|(k, v)| (k, v.into())).collect();
                    entry.insert("env".into(), env.into());
                }
                Transport::Http | Transport::Sse => {
                    entry.insert(
                        "url".into(),
                        s.server.url.clone().unwrap_or_default().into(),
                    );
                    let headers: toml::Table = s
                        .headers()
                        .into_iter()
                        .map(|(k, v)| (k, v.into()))
                        .collect();
                    entry.insert("http_headers".into(), headers.into());
                }
            }
            (s.server.id.clone(), toml::Value::Table(entry))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(id: &str, activation: Activation, transport: Transport) -> TurnServer {
        let stdio = transport == Transport::Stdio;
        TurnServer {
            server: McpServer {
                id: id.into(),
                activation,
                engines: None,
                unsupported_engines: vec![],
                scope: "run-local".into(),
                transport,
                command: stdio.then(|| "npx".into()),
                args: if stdio {
                    vec!["-y".into(), "srv".into()]
                } else {
                    vec![]
                },
                url: (!stdio).then(|| "https://mcp.example/api".into()),
                auth: SecretSlots {
                    env: if stdio {
                        vec![SecretSlot {
                            name: "TOKEN".into(),
                            prefix: String::new(),
                        }]
                    } else {
                        vec![]
                    },
                    headers: if stdio {
                        vec![]
                    } else {
                        vec![SecretSlot {
                            name: "Authorization".into(),
                            prefix: "Bearer ".into(),
                        }]
                    },
                },
            },
            secrets: [
                (secret_key("env", "TOKEN"), "s3".to_owned()),
                (secret_key("header", "Authorization"), "h4".to_owned()),
            ]
            .into(),
        }
    }

    #[test]
    fn a_turn_gets_the_default_servers_and_the_declared_ones_it_requires() {
        let registry = vec![
            server("everywhere", Activation::Default, Transport::Stdio),
            server("papers", Activation::Declared, Transport::Http),
        ];
        let ids = |v: Vec<TurnServer>| v.into_iter().map(|s| s.server.id).collect::<Vec<_>>();
        assert_eq!(
            ids(resolve(&registry, &[], Engine::Codex).unwrap()),
            ["everywhere"]
        );
        assert_eq!(
            ids(resolve(&registry, &["papers".into()], Engine::Claude).unwrap()),
            ["everywhere", "papers"]
        );
        assert!(
            resolve(&registry, &["nope".into()], Engine::Codex)
                .unwrap_err()
                .contains("does not have")
        );
        assert!(
            resolve(&registry, &["everywhere".into()], Engine::Codex)
                .unwrap_err()
                .contains("'default'")
        );
        let mut narrow = registry.clone();
        narrow[1].server.engines = Some(vec![Engine::Claude]);
        assert!(
            resolve(&narrow, &["papers".into()], Engine::Codex)
                .unwrap_err()
                .contains("not for engine 'codex'")
        );
    }

    #[test]
    fn each_cli_is_told_in_its_own_format() {
        let servers = vec![
            server("local", Activation::Default, Transport::Stdio),
            server("remote", Activation::Default, Transport::Http),
        ];
        assert_eq!(
            claude_config(&servers),
            json!({"mcpServers": {
                "local": {"type": "stdio", "command": "npx", "args": ["-y", "srv"], "env": {"TOKEN": "s3"}},
                "remote": {"type": "http", "url": "https://mcp.example/api", "headers": {"Authorization": "Bearer h4"}}}})
        );
        assert_eq!(
            gemini_servers(&servers)["remote"],
            json!({"httpUrl": "https://mcp.example/api", "headers": {"Authorization": "Bearer h4"}})
        );
        assert_eq!(
            opencode_servers(&servers)["local"],
            json!({"type": "local", "command": ["npx", "-y", "srv"], "environment": {"TOKEN": "s3"}, "enabled": true})
        );
        let codex = toml::to_string(&codex_servers(&servers)).unwrap();
        assert!(
            codex.contains("[local]") && codex.contains("TOKEN = \"s3\""),
            "{codex}"
        );
        assert!(codex.contains("Authorization = \"Bearer h4\""), "{codex}");
    }

    #[test]
    fn definitions_are_checked_field_by_field() {
        let ok = server("ok", Activation::Default, Transport::Stdio).server;
        assert_eq!(ok.check(), Ok(()));
        let mut bad = ok.clone();
        bad.id = "no spaces".into();
        assert!(bad.check().unwrap_err().starts_with("server_id"));
        let mut bad = ok.clone();
        bad.command = None;
        assert!(bad.check().unwrap_err().starts_with("command"));
        let mut bad = ok.clone();
        bad.url = Some("https://x".into());
        assert!(bad.check().unwrap_err().contains("stdio server has none"));
        let mut bad = ok.clone();
        bad.engines = Some(vec![Engine::Iflow]);
        assert!(bad.check().unwrap_err().contains("'iflow'"));
        let mut bad = ok.clone();
        bad.unsupported_engines = MCP_ENGINES.to_vec();
        assert!(bad.check().unwrap_err().contains("no engine is left"));
        let mut bad = server("r", Activation::Declared, Transport::Sse).server;
        bad.url = Some("ftp://x".into());
        assert!(bad.check().unwrap_err().starts_with("url"));
    }
}
