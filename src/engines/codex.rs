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

use serde_json::{Value, json};

use super::agent::{self, events};
use super::{Cli, Engine, EngineAdapter, Prepared, Reading, Said, Transcriber, Turn};
use crate::config::AgentConfig;

pub const PACKAGE: &str = "@openai/codex";
/// The login `codex login` leaves in `~/.codex` (the run's `CODEX_HOME`).
pub const CREDENTIALS: &[&str] = &[".codex/auth.json"];
pub const CLI: Cli = Cli {
    program: "codex",
    package: PACKAGE,
    credentials: CREDENTIALS,
    hosts: &[
        "api.openai.com:443",
        "chatgpt.com:443",
        "auth.openai.com:443",
    ],
};
/// The model used with a configured endpoint when the job names none.
pub const ENDPOINT_MODEL: &str = "gpt-5.5";

#[derive(Debug)]
pub struct Codex {
    pub config: Arc<AgentConfig>,
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
}

impl Codex {
    fn config_toml(&self, model: Option<&str>) -> String {
        let endpoint = agent::endpoint(&self.config, "codex");
        let base_url = endpoint.and_then(|e| e.base_url.as_deref());
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
                    let provider = Provider {
                        name: "skill-runner endpoint",
                        base_url: url,
                        wire_api: "responses",
                        request_max_retries: retries,
                        stream_max_retries: retries,
                        env_key: endpoint
                            .is_some_and(|e| e.api_key.is_some())
                            .then_some("SKILL_RUNNER_CODEX_API_KEY"),
                    };
                    ("skill_runner", provider)
                })
                .into_iter()
                .collect(),
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
        // User-level skills of the run's CODEX_HOME: a `.codex` folder in the run folder would be
        // untrusted project configuration.
        let setup = agent::setup(&self.config, self, turn, ".codex/skills", true)?;
        let home = &setup.home;
        let codex_home = home.join(".codex");
        // `name@effort` picks the reasoning effort too.
        let (model, effort) = match turn.model.map(|m| m.split_once('@').unwrap_or((m, ""))) {
            Some((name, effort)) => (Some(name), Some(effort).filter(|e| !e.is_empty())),
            None => (None, None),
        };
        agent::write_config(&codex_home.join("config.toml"), &self.config_toml(model))?;

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
            Some(thread) if turn.number > 1 => {
                argv.extend(["resume".into(), thread.to_owned(), prompt]);
            }
            _ => argv.push(prompt),
        }
        let mut env = agent::base_env(home, &self.config);
        // The provider's `env_key`.
        agent::key_env(
            &self.config,
            self.engine(),
            "SKILL_RUNNER_CODEX_API_KEY",
            &mut env,
        );
        env.push((
            "CODEX_HOME".into(),
            codex_home.to_string_lossy().into_owned(),
        ));
        Ok(setup.prepared(turn, argv, env, None))
    }

    fn read(&self, stdout: &str, _stderr: &str) -> Reading {
        let mut reading = Reading::default();
        let (mut last_text, mut error) = (None, None);
        for event in events(stdout) {
            let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
            match event.get("type").and_then(Value::as_str) {
                Some("thread.started") => reading.session = text(event.get("thread_id")),
                Some("item.completed") => {
                    let item = event.get("item");
                    if item.and_then(|i| i.get("type")).and_then(Value::as_str)
                        == Some("agent_message")
                    {
                        last_text = text(item.and_then(|i| i.get("text")));
                    }
                }
                Some("turn.failed") => {
                    error = text(event.get("error").and_then(|e| e.get("message"))).or(error);
                }
                Some("error") => error = text(event.get("message")),
                _ => {}
            }
        }
        agent::conclude(reading, "codex", last_text.as_deref(), error)
    }

    fn transcriber(&self) -> Box<dyn Transcriber> {
        Box::new(transcribe)
    }
}

/// What one line of `codex exec --json` says: each completed item (a message, reasoning, a
/// command with its output, a tool call, a file change, a web search).
fn transcribe(line: &str, said: &mut Vec<Said>) {
    let Some(event) = agent::event(line) else {
        return;
    };
    if event.get("type").and_then(Value::as_str) != Some("item.completed") {
        return;
    }
    let Some(item) = event.get("item") else {
        return;
    };
    let text = |key: &str| {
        item.get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let id = item.get("id").and_then(Value::as_str).map(str::to_owned);
    let mut call = |name: String, arguments: Value| {
        said.push(Said::ToolCall {
            id: id.clone(),
            name,
            arguments,
        });
    };
    match item.get("type").and_then(Value::as_str) {
        Some("agent_message") => said.push(Said::Text {
            text: text("text"),
            continues: false,
        }),
        Some("reasoning") => said.push(Said::Reasoning(text("text"))),
        Some("command_execution") => said.push(Said::Command {
            command: text("command"),
            output: text("aggregated_output"),
            exit_code: item.get("exit_code").and_then(Value::as_i64),
        }),
        Some("mcp_tool_call") => {
            let name = format!("{}.{}", text("server"), text("tool"));
            call(name, item.get("arguments").cloned().unwrap_or(Value::Null));
            let error = item.get("error").filter(|e| !e.is_null());
            if let Some(output) = error.or(item.get("result")).filter(|r| !r.is_null()) {
                said.push(Said::ToolResult {
                    id,
                    output: agent::text_of(Some(output)),
                    is_error: error.is_some(),
                });
            }
        }
        Some("file_change") => call(
            "file_change".into(),
            item.get("changes").cloned().unwrap_or(Value::Null),
        ),
        Some("web_search") => call("web_search".into(), json!({"query": text("query")})),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Endpoint;

    fn codex(endpoint: Option<Endpoint>) -> Codex {
        let mut config = AgentConfig::for_tests();
        if let Some(e) = endpoint {
            config.endpoints.insert("codex".into(), e);
        }
        Codex {
            config: Arc::new(config),
        }
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
        let toml = codex(Some(Endpoint {
            base_url: Some("http://127.0.0.1:18080/v1".into()),
            api_key: Some("sk".into()),
        }))
        .config_toml(Some("gpt-5.5"));
        for line in [
            "model = \"gpt-5.5\"",
            "model_provider = \"skill_runner\"",
            "plugins = false",
            "enabled = false",
            "base_url = \"http://127.0.0.1:18080/v1\"",
            "request_max_retries = 0",
            "env_key = \"SKILL_RUNNER_CODEX_API_KEY\"",
        ] {
            assert!(toml.contains(line), "{line} missing in\n{toml}");
        }
        assert!(!codex(None).config_toml(None).contains("model"));
    }
}
