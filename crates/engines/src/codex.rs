//! The `codex` engine: OpenAI Codex CLI (`@openai/codex`), `codex exec --json`.
//!
//! Each run has its own `CODEX_HOME` (`<run>/.agent-home/.codex`) with a `config.toml` that
//! turns off plugins sync, analytics and update checks (each phones home), never asks for
//! approval, and bounds the model retries. With `SKILL_RUNNER_CODEX_BASE_URL` set, a model
//! provider of that URL (Responses API, key from `SKILL_RUNNER_CODEX_API_KEY`) is used. The
//! session is the `thread_id` of the first event; a reply resumes it with `exec resume`.
//! Against such an endpoint the model defaults to [`ENDPOINT_MODEL`]: codex offers no tools to a
//! model it has no metadata for, and its own default changes between versions.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Value, json};

use super::{Cli, Engine, EngineAdapter, Prepared, Reading, Said, Transcriber, Turn};
use super::{cli, mcp};
use crate::config::EngineConfig;

pub const PACKAGE: &str = "@openai/codex";
/// The login `codex login` leaves in `~/.codex` (the run's `CODEX_HOME`).
pub const CREDENTIALS: &[&str] = &[".codex/auth.json"];
pub const CLI: Cli = Cli {
    program: "codex",
    package: PACKAGE,
    pinned: Some("0.169.0"),
    credentials: CREDENTIALS,
    hosts: &[
        "api.openai.com:443",
        "chatgpt.com:443",
        "auth.openai.com:443",
    ],
    default_base: None,
};
/// The model used with a configured endpoint when the job names none.
pub const ENDPOINT_MODEL: &str = "gpt-5.5";

#[derive(Debug)]
pub struct Codex {
    pub config: Arc<EngineConfig>,
}

/// The run's `config.toml`: no approvals, no sandbox of Codex's own (the turn is confined by
/// the service), nothing phoned home, and the configured endpoint as the model provider.
#[derive(serde::Serialize)]
struct Config<'a> {
    approval_policy: &'a str,
    sandbox_mode: &'a str,
    check_for_update_on_startup: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    model_provider: Option<&'a str>,
    features: Features,
    analytics: Analytics,
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    model_providers: std::collections::BTreeMap<&'a str, Provider<'a>>,
    /// The MCP servers of the turn; a table comes after the plain keys in TOML.
    #[serde(skip_serializing_if = "toml::Table::is_empty")]
    mcp_servers: toml::Table,
}

#[derive(serde::Serialize)]
struct Features {
    plugins: bool,
}

#[derive(serde::Serialize)]
struct Analytics {
    enabled: bool,
}

#[derive(serde::Serialize)]
struct Provider<'a> {
    name: &'a str,
    base_url: &'a str,
    wire_api: &'a str,
    request_max_retries: u32,
    stream_max_retries: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    env_key: Option<&'a str>,
    /// Without a key, the login lent to the run (`auth.json`: an API key or a ChatGPT login)
    /// authenticates to the endpoint.
    requires_openai_auth: bool,
}

impl Codex {
    /// `endpoint`: what the turn is told ([`cli::Setup::endpoint`]).
    fn config_toml(
        &self,
        endpoint: Option<&crate::config::Endpoint>,
        model: Option<&str>,
        servers: &[mcp::TurnServer],
    ) -> String {
        let base_url = endpoint.as_ref().and_then(|e| e.base_url.as_deref());
        let retries = self.config.max_retries;
        let config = Config {
            approval_policy: "never",
            sandbox_mode: "danger-full-access",
            check_for_update_on_startup: false,
            model: model.or(base_url.map(|_| ENDPOINT_MODEL)),
            model_provider: base_url.map(|_| "skill_runner"),
            features: Features { plugins: false },
            analytics: Analytics { enabled: false },
            model_providers: base_url
                .map(|url| {
                    let keyed = endpoint.is_some_and(|e| e.api_key.is_some());
                    let provider = Provider {
                        name: "skill-runner endpoint",
                        base_url: url,
                        wire_api: "responses",
                        request_max_retries: retries,
                        stream_max_retries: retries,
                        env_key: keyed.then_some("SKILL_RUNNER_CODEX_API_KEY"),
                        requires_openai_auth: !keyed,
                    };
                    ("skill_runner", provider)
                })
                .into_iter()
                .collect(),
            mcp_servers: mcp::codex_servers(servers),
        };
        toml::to_string(&config).expect("the configuration serialises")
    }
}

/// A TOML string, for `-c key=value`.
fn toml_string(text: &str) -> String {
    toml::Value::String(text.to_owned()).to_string()
}

impl EngineAdapter for Codex {
    fn engine(&self) -> Engine {
        Engine::Codex
    }

    fn cli(&self) -> Option<Cli> {
        Some(CLI)
    }

    fn prepare(&self, turn: &Turn<'_>) -> anyhow::Result<Prepared> {
        // The user's skills (`$HOME/.agents/skills`, the run's home): codex's `$CODEX_HOME/skills`
        // is deprecated, and the project's `.agents/skills` is looked up from the nearest
        // `.git`, which may lie outside the run.
        let mut setup = cli::setup(&self.config, self, turn, ".agents/skills", true)?;
        let home = &setup.home.clone();
        let codex_home = home.join(".codex");
        // A temporary run's `name@effort` picks the reasoning effort too.
        let (model, suffix) = match turn.model.map(|m| m.split_once('@').unwrap_or((m, ""))) {
            Some((name, effort)) => (Some(name), Some(effort).filter(|e| !e.is_empty())),
            None => (None, None),
        };
        let effort = turn.effort.or(suffix);
        let config = self.config_toml(setup.endpoint.as_ref(), model, turn.mcp);
        setup.write_config(turn, &codex_home.join("config.toml"), &config)?;

        let mut argv: Vec<String> = vec![
            setup.program.clone(),
            "exec".into(),
            "--json".into(),
            "--skip-git-repo-check".into(),
            "-C".into(),
            turn.workspace().to_string_lossy().into_owned(),
        ];
        if let Some(effort) = effort {
            argv.extend([
                "-c".into(),
                format!("model_reasoning_effort={}", toml_string(effort)),
            ]);
        }
        let prompt = setup.prompt.clone();
        match turn.session {
            Some(thread) if turn.resumes() => {
                argv.extend(["resume".into(), thread.to_owned(), prompt]);
            }
            _ => argv.push(prompt),
        }
        let mut env = cli::base_env(home, &self.config);
        // The provider's `env_key`.
        cli::key_env(&setup, "SKILL_RUNNER_CODEX_API_KEY", &mut env);
        env.push((
            "CODEX_HOME".into(),
            codex_home.to_string_lossy().into_owned(),
        ));
        Ok(setup.prepared(turn, argv, env, None))
    }

    fn read(&self, stdout: &str, _stderr: &str) -> Reading {
        let mut reading = Reading::default();
        let (mut last_text, mut error) = (None, None);
        for event in cli::typed_events(stdout) {
            match event {
                Event::ThreadStarted { thread_id } => reading.session = thread_id,
                Event::ItemCompleted {
                    item:
                        Item {
                            kind: ItemKind::AgentMessage { text },
                            ..
                        },
                } => last_text = text,
                Event::TurnFailed { error: failed } => {
                    error = failed.and_then(|e| e.message).or(error);
                }
                Event::Error { message } => error = message,
                _ => {}
            }
        }
        cli::conclude(reading, "codex", last_text.as_deref(), error)
    }

    fn transcriber(&self) -> Box<dyn Transcriber> {
        Box::new(transcribe)
    }
}

/// The lines of `codex exec --json` read here; a line of any other type is skipped.
#[derive(Debug, Deserialize)]
#[serde(tag = "type")]
enum Event {
    #[serde(rename = "thread.started")]
    ThreadStarted { thread_id: Option<String> },
    #[serde(rename = "item.completed")]
    ItemCompleted { item: Item },
    #[serde(rename = "turn.failed")]
    TurnFailed { error: Option<ErrorBody> },
    #[serde(rename = "error")]
    Error { message: Option<String> },
    #[serde(other)]
    Other,
}

#[derive(Debug, Deserialize)]
struct ErrorBody {
    message: Option<String>,
}

/// A completed item: a message, reasoning, a command with its output, a tool call, a file
/// change, a web search.
#[derive(Debug, Deserialize)]
struct Item {
    id: Option<String>,
    #[serde(flatten)]
    kind: ItemKind,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ItemKind {
    AgentMessage {
        text: Option<String>,
    },
    Reasoning {
        #[serde(default)]
        text: String,
    },
    CommandExecution {
        #[serde(default)]
        command: String,
        #[serde(default)]
        aggregated_output: String,
        exit_code: Option<i64>,
    },
    McpToolCall {
        #[serde(default)]
        server: String,
        #[serde(default)]
        tool: String,
        #[serde(default)]
        arguments: Value,
        result: Option<Value>,
        error: Option<Value>,
    },
    FileChange {
        #[serde(default)]
        changes: Value,
    },
    WebSearch {
        #[serde(default)]
        query: String,
    },
    #[serde(other)]
    Other,
}

/// What one line of `codex exec --json` says: each completed item.
fn transcribe(line: &str, said: &mut Vec<Said>) {
    let Some(Event::ItemCompleted { item }) = cli::typed(line) else {
        return;
    };
    let Item { id, kind } = item;
    let call = |name: String, arguments: Value| Said::ToolCall {
        id: id.clone(),
        name,
        arguments,
    };
    match kind {
        ItemKind::AgentMessage { text } => said.push(Said::Text {
            text: text.unwrap_or_default(),
            continues: false,
        }),
        ItemKind::Reasoning { text } => said.push(Said::Reasoning(text)),
        ItemKind::CommandExecution {
            command,
            aggregated_output,
            exit_code,
        } => said.push(Said::Command {
            command,
            output: aggregated_output,
            exit_code,
        }),
        ItemKind::McpToolCall {
            server,
            tool,
            arguments,
            result,
            error,
        } => {
            said.push(call(format!("{server}.{tool}"), arguments));
            let is_error = error.is_some();
            if let Some(output) = error.or(result) {
                said.push(Said::ToolResult {
                    id,
                    output: cli::text_of(Some(&output)),
                    is_error,
                });
            }
        }
        ItemKind::FileChange { changes } => said.push(call("file_change".into(), changes)),
        ItemKind::WebSearch { query } => {
            said.push(call("web_search".into(), json!({ "query": query })));
        }
        ItemKind::Other => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Endpoint;

    fn codex(endpoint: Option<Endpoint>) -> Codex {
        let mut config = EngineConfig::for_tests();
        if let Some(e) = endpoint {
            config.endpoints.insert("codex".into(), e);
        }
        Codex {
            config: Arc::new(config),
        }
    }

    #[test]
    fn transcribes_tool_calls_file_changes_and_searches() {
        let mut said = Vec::new();
        for line in [
            r#"{"type":"item.completed","item":{"id":"i1","type":"mcp_tool_call","server":"fs","tool":"read","arguments":{"p":"a"},"result":{"content":[{"type":"text","text":"body"}]},"error":null}}"#,
            r#"{"type":"item.completed","item":{"id":"i2","type":"mcp_tool_call","server":"fs","tool":"read","arguments":{},"result":null,"error":"denied"}}"#,
            r#"{"type":"item.completed","item":{"id":"i3","type":"file_change","changes":[{"path":"a.txt","kind":"add"}]}}"#,
            r#"{"type":"item.completed","item":{"id":"i4","type":"web_search","query":"rust"}}"#,
            r#"{"type":"item.completed","item":{"id":"i5","type":"todo_list","items":[]}}"#,
            r#"{"type":"item.started","item":{"id":"i6","type":"agent_message","text":"not yet"}}"#,
            "not json",
        ] {
            transcribe(line, &mut said);
        }
        let call = |id: &str, name: &str, arguments: Value| Said::ToolCall {
            id: Some(id.into()),
            name: name.into(),
            arguments,
        };
        assert_eq!(
            said,
            vec![
                call("i1", "fs.read", json!({"p": "a"})),
                Said::ToolResult {
                    id: Some("i1".into()),
                    output: r#"{"content":[{"text":"body","type":"text"}]}"#.into(),
                    is_error: false,
                },
                call("i2", "fs.read", json!({})),
                Said::ToolResult {
                    id: Some("i2".into()),
                    output: "denied".into(),
                    is_error: true,
                },
                call(
                    "i3",
                    "file_change",
                    json!([{"path": "a.txt", "kind": "add"}])
                ),
                call("i4", "web_search", json!({"query": "rust"})),
            ]
        );
    }

    #[test]
    fn reads_thread_answer_and_failures() {
        let out = r#"{"type":"thread.started","thread_id":"t-1"}
{"type":"item.completed","item":{"id":"item_0","type":"agent_message","text":"Done: {\"ok\": true}"}}
{"type":"turn.completed","usage":{}}"#;
        let r = codex(None).read(out, "");
        assert_eq!(r.session.as_deref(), Some("t-1"));
        assert_eq!(r.answer.unwrap().0["ok"], true);
        assert!(r.failure.is_none());
        let out = r#"{"type":"thread.started","thread_id":"t-2"}
{"type":"error","message":"unexpected status 500 Internal Server Error: boom"}
{"type":"turn.failed","error":{"message":"unexpected status 500 Internal Server Error: boom"}}"#;
        let failure = codex(None).read(out, "").failure.unwrap();
        assert_eq!(failure.code, None);
        assert!(failure.message.contains("500"), "{failure:?}");
        let out = r#"{"type":"turn.failed","error":{"message":"unexpected status 401 Unauthorized: no key"}}"#;
        assert_eq!(
            codex(None).read(out, "").failure.unwrap().code,
            Some("AUTH_REQUIRED")
        );
    }

    #[test]
    fn config_points_at_the_endpoint_without_phoning_home() {
        let keyed = Endpoint {
            base_url: Some("http://127.0.0.1:18080/v1".into()),
            api_key: Some("sk".into()),
        };
        let toml = codex(None).config_toml(Some(&keyed), Some("gpt-5.5"), &[]);
        for line in [
            "model = \"gpt-5.5\"",
            "model_provider = \"skill_runner\"",
            "plugins = false",
            "enabled = false",
            "base_url = \"http://127.0.0.1:18080/v1\"",
            "request_max_retries = 0",
            "env_key = \"SKILL_RUNNER_CODEX_API_KEY\"",
            "requires_openai_auth = false",
        ] {
            assert!(toml.contains(line), "{line} missing in\n{toml}");
        }
        // Without a key, the lent login authenticates.
        let unkeyed = Endpoint {
            base_url: Some("http://127.0.0.1:18080/v1".into()),
            api_key: None,
        };
        let toml = codex(None).config_toml(Some(&unkeyed), None, &[]);
        assert!(toml.contains("requires_openai_auth = true"), "{toml}");
        assert!(!toml.contains("env_key"), "{toml}");
        assert!(!codex(None).config_toml(None, None, &[]).contains("model"));
    }
}
