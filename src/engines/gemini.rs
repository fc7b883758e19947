//! The `gemini` engine: Gemini CLI (`@google/gemini-cli`), `gemini -p <prompt> -o stream-json`.
//!
//! Its settings (`<run>/.agent-home/.gemini/settings.json`) choose API-key auth (without it a
//! base URL switches the CLI to "gateway" auth, which headless mode refuses), turn off usage
//! statistics, telemetry and update checks, and bound the model attempts. With
//! `SKILL_RUNNER_GEMINI_BASE_URL` / `_API_KEY` set it uses that endpoint
//! (`GOOGLE_GEMINI_BASE_URL` / `GEMINI_API_KEY`) and [`ENDPOINT_MODEL`] unless the job names a
//! model (without one the CLI first asks a router model). The session id is pinned with
//! `--session-id` and resumed with `--resume` from the same folder. The skill is copied to
//! `<run>/.gemini/skills/<id>`.

use std::sync::Arc;

use serde_json::{Value, json};

use super::agent::{self, events};
use super::{Cli, Engine, EngineAdapter, Prepared, Reading, Said, Transcriber, Turn};
use crate::config::AgentConfig;

pub const PACKAGE: &str = "@google/gemini-cli";
/// The Google login the CLI leaves in `~/.gemini`.
pub const CREDENTIALS: &[&str] = &[".gemini/oauth_creds.json", ".gemini/google_accounts.json"];
pub const CLI: Cli = Cli {
    program: "gemini",
    package: PACKAGE,
    credentials: CREDENTIALS,
    hosts: &[
        "generativelanguage.googleapis.com:443",
        "cloudcode-pa.googleapis.com:443",
        "oauth2.googleapis.com:443",
    ],
};
/// The model used with a configured endpoint when the job names none.
pub const ENDPOINT_MODEL: &str = "gemini-2.5-flash";

#[derive(Debug)]
pub struct Gemini {
    pub config: Arc<AgentConfig>,
}

impl EngineAdapter for Gemini {
    fn engine(&self) -> Engine {
        Engine::Gemini
    }

    fn cli(&self) -> Option<Cli> {
        Some(CLI)
    }

    fn prepare(&self, turn: &Turn<'_>) -> anyhow::Result<Prepared> {
        let setup = agent::setup(&self.config, self, turn, ".gemini/skills", false)?;
        let home = &setup.home;
        // A Google login lent from the agent home, else an API key.
        let auth_type = if setup.login.is_empty() {
            "gemini-api-key"
        } else {
            "oauth-personal"
        };
        let settings = json!({
            "privacy": {"usageStatisticsEnabled": false},
            "telemetry": {"enabled": false},
            "general": {"disableAutoUpdate": true, "disableUpdateNag": true,
                        "maxAttempts": self.config.max_retries + 1},
            "security": {"auth": {"selectedType": auth_type}},
        });
        agent::write_config(&home.join(".gemini/settings.json"), &settings.to_string())?;

        let model = agent::model(&self.config, self.engine(), turn, ENDPOINT_MODEL);
        let mut argv: Vec<String> = vec![
            setup.program.clone(),
            "-p".into(),
            setup.prompt.clone(),
            "-o".into(),
            "stream-json".into(),
            "--skip-trust".into(),
            "-y".into(),
        ];
        if let Some(model) = model {
            argv.extend(["-m".into(), model.to_owned()]);
        }
        let session = agent::pin_session(turn, &mut argv);
        let mut env = agent::base_env(home, &self.config);
        agent::endpoint_env(
            &self.config,
            self.engine(),
            "GOOGLE_GEMINI_BASE_URL",
            "GEMINI_API_KEY",
            &mut env,
        );
        Ok(setup.prepared(turn, argv, env, session))
    }

    fn read(&self, stdout: &str, _stderr: &str) -> Reading {
        let mut reading = Reading::default();
        // Assistant text arrives in deltas; a tool call ends one message and starts the next.
        let (mut message, mut last_message, mut error) = (String::new(), String::new(), None);
        for event in events(stdout) {
            let text = |key: &str| event.get(key).and_then(Value::as_str).map(str::to_owned);
            match event.get("type").and_then(Value::as_str) {
                Some("init") => reading.session = text("session_id").or(reading.session),
                Some("message") if event.get("role") == Some(&json!("assistant")) => {
                    message.push_str(&text("content").unwrap_or_default());
                }
                Some("tool_use") | Some("tool_result") if !message.is_empty() => {
                    last_message = std::mem::take(&mut message);
                }
                Some("result") if event.get("status") != Some(&json!("success")) => {
                    error = event
                        .get("error")
                        .and_then(|e| e.get("message").or(Some(e)))
                        .map(|e| e.as_str().map_or_else(|| e.to_string(), str::to_owned))
                        .or(Some("the CLI reported an error".into()));
                }
                Some("error") => error = text("message"),
                _ => {}
            }
        }
        if !message.is_empty() {
            last_message = message;
        }
        agent::conclude(reading, "gemini", Some(&last_message), error)
    }

    fn transcriber(&self) -> Box<dyn Transcriber> {
        Box::new(transcribe)
    }
}

/// What one line of `-o stream-json` says: assistant text (in deltas), tool calls and their
/// results.
fn transcribe(line: &str, said: &mut Vec<Said>) {
    let Some(event) = agent::event(line) else {
        return;
    };
    let text = |key: &str| {
        event
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let id = event
        .get("tool_id")
        .and_then(Value::as_str)
        .map(str::to_owned);
    match event.get("type").and_then(Value::as_str) {
        Some("message") if event.get("role") == Some(&json!("assistant")) => {
            said.push(Said::Text {
                text: text("content"),
                continues: event.get("delta") == Some(&json!(true)),
            });
        }
        Some("tool_use") => said.push(Said::ToolCall {
            id,
            name: text("tool_name"),
            arguments: event.get("parameters").cloned().unwrap_or(Value::Null),
        }),
        Some("tool_result") => said.push(Said::ToolResult {
            id,
            output: agent::text_of(event.get("output").or(event.get("error"))),
            is_error: event.get("status") != Some(&json!("success")),
        }),
        _ => {}
    }
}
