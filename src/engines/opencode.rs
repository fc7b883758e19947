//! The `opencode` engine: opencode (`opencode-ai`), `opencode run --format json`.
//!
//! Its configuration (`$XDG_CONFIG_HOME/opencode/opencode.json` in the run's home) turns off
//! auto-update and sharing and allows edits and shell commands without asking. With
//! `SKILL_RUNNER_OPENCODE_BASE_URL` / `_API_KEY` set it declares an OpenAI-compatible provider
//! `skill_runner` for that endpoint, whose model is the job's (or [`ENDPOINT_MODEL`]). The
//! session is the `sessionID` of its events; a reply resumes it with `-s`. The skill is copied
//! to `<run>/.opencode/skills/<id>`.

use std::sync::Arc;

use serde_json::{Value, json};

use super::agent::{self, events};
use super::{Cli, Engine, EngineAdapter, Prepared, Reading, Said, Transcriber, Turn};
use crate::config::AgentConfig;

pub const PACKAGE: &str = "opencode-ai";
/// The provider keys and logins of `opencode auth login`.
pub const CREDENTIALS: &[&str] = &[".local/share/opencode/auth.json"];
pub const CLI: Cli = Cli {
    program: "opencode",
    package: PACKAGE,
    credentials: CREDENTIALS,
    hosts: &[
        "opencode.ai:443",
        "models.dev:443",
        "api.openai.com:443",
        "api.anthropic.com:443",
    ],
};
/// The model used with a configured endpoint when the job names none.
pub const ENDPOINT_MODEL: &str = "gpt-5.5";
const PROVIDER: &str = "skill_runner";

#[derive(Debug)]
pub struct Opencode {
    pub config: Arc<AgentConfig>,
}

impl Opencode {
    /// The configuration file and the `-m` argument, if any.
    fn configuration(&self, model: Option<&str>) -> (Value, Option<String>) {
        let mut config = json!({
            "autoupdate": false,
            "share": "disabled",
            "permission": {"edit": "allow", "bash": "allow", "webfetch": "allow",
                           "external_directory": "allow"},
        });
        let endpoint = agent::endpoint(&self.config, "opencode");
        let Some(url) = endpoint.and_then(|e| e.base_url.as_ref()) else {
            return (config, model.map(str::to_owned));
        };
        // A job's model may name the provider already (`skill_runner/x`).
        let name = model
            .map(|m| m.strip_prefix(&format!("{PROVIDER}/")).unwrap_or(m))
            .unwrap_or(ENDPOINT_MODEL);
        let qualified = format!("{PROVIDER}/{name}");
        let mut options = json!({"baseURL": url});
        if endpoint.is_some_and(|e| e.api_key.is_some()) {
            // A reference the CLI resolves from its environment: the key itself never lands in
            // the run folder, which clients can browse and download.
            options["apiKey"] = json!("{env:SKILL_RUNNER_OPENCODE_API_KEY}");
        }
        config["model"] = json!(qualified);
        config["small_model"] = json!(qualified);
        config["provider"] = json!({PROVIDER: {
            "npm": "@ai-sdk/openai-compatible",
            "name": "skill-runner endpoint",
            "options": options,
            "models": {name: {"name": name, "tool_call": true}},
        }});
        (config, Some(qualified))
    }
}

impl EngineAdapter for Opencode {
    fn engine(&self) -> Engine {
        Engine::Opencode
    }

    fn cli(&self) -> Option<Cli> {
        Some(CLI)
    }

    fn prepare(&self, turn: &Turn<'_>) -> anyhow::Result<Prepared> {
        let setup = agent::setup(&self.config, self, turn, ".opencode/skills", false)?;
        let home = &setup.home;
        let (config, model) = self.configuration(turn.model);
        agent::write_config(
            &home.join(".config/opencode/opencode.json"),
            &config.to_string(),
        )?;

        let mut argv: Vec<String> = vec![
            setup.program.clone(),
            "run".into(),
            "--format".into(),
            "json".into(),
            "--dir".into(),
            turn.workspace().to_string_lossy().into_owned(),
        ];
        if let Some(model) = model {
            argv.extend(["-m".into(), model]);
        }
        if let Some(session) = turn.session.filter(|_| turn.number > 1) {
            argv.extend(["-s".into(), session.to_owned()]);
        }
        argv.push(setup.prompt.clone());
        let mut env = agent::base_env(home, &self.config);
        // What the provider's `{env:...}` reference reads.
        agent::key_env(
            &self.config,
            self.engine(),
            "SKILL_RUNNER_OPENCODE_API_KEY",
            &mut env,
        );
        for name in [
            "OPENCODE_DISABLE_MODELS_FETCH",
            "OPENCODE_DISABLE_AUTOUPDATE",
            "OPENCODE_DISABLE_LSP_DOWNLOAD",
            "OPENCODE_DISABLE_SHARE",
        ] {
            env.push((name.into(), "1".into()));
        }
        Ok(setup.prepared(turn, argv, env, None))
    }

    fn read(&self, stdout: &str, _stderr: &str) -> Reading {
        let mut reading = Reading::default();
        let (mut last_text, mut error) = (None, None);
        for event in events(stdout) {
            if let Some(id) = event.get("sessionID").and_then(Value::as_str) {
                reading.session = Some(id.to_owned());
            }
            match event.get("type").and_then(Value::as_str) {
                Some("text") => {
                    if let Some(text) = event
                        .get("part")
                        .and_then(|p| p.get("text"))
                        .and_then(Value::as_str)
                    {
                        last_text = Some(text.to_owned());
                    }
                }
                Some("error") => {
                    let e = event.get("error");
                    error = e
                        .and_then(|e| e.get("data"))
                        .and_then(|d| d.get("message"))
                        .or(e.and_then(|e| e.get("name")))
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                        .or(Some("the CLI reported an error".into()));
                }
                _ => {}
            }
        }
        agent::conclude(reading, "opencode", last_text.as_deref(), error)
    }

    fn transcriber(&self) -> Box<dyn Transcriber> {
        Box::new(transcribe)
    }
}

/// What one line of `run --format json` says: text, reasoning, and each finished tool use (a
/// `bash` one as a command with its output).
fn transcribe(line: &str, said: &mut Vec<Said>) {
    let Some(event) = agent::event(line) else {
        return;
    };
    let Some(part) = event.get("part") else {
        return;
    };
    let text = || {
        part.get("text")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    match event.get("type").and_then(Value::as_str) {
        Some("text") => said.push(Said::Text {
            text: text(),
            continues: false,
        }),
        Some("reasoning") => said.push(Said::Reasoning(text())),
        Some("tool_use") => {
            let state = part.get("state");
            let input = state
                .and_then(|s| s.get("input"))
                .cloned()
                .unwrap_or(Value::Null);
            let output = agent::text_of(state.and_then(|s| s.get("output").or(s.get("error"))));
            let name = part.get("tool").and_then(Value::as_str).unwrap_or_default();
            let command = input.get("command").and_then(Value::as_str);
            match command.filter(|_| name == "bash") {
                Some(command) => said.push(Said::Command {
                    command: command.to_owned(),
                    output,
                    exit_code: state
                        .and_then(|s| s.pointer("/metadata/exit"))
                        .and_then(Value::as_i64),
                }),
                None => {
                    let id = part
                        .get("callID")
                        .and_then(Value::as_str)
                        .map(str::to_owned);
                    let is_error = state.and_then(|s| s.get("status")) == Some(&json!("error"));
                    said.push(Said::ToolCall {
                        id: id.clone(),
                        name: name.to_owned(),
                        arguments: input,
                    });
                    said.push(Said::ToolResult {
                        id,
                        output,
                        is_error,
                    });
                }
            }
        }
        _ => {}
    }
}
