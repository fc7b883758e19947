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

use serde::Deserialize;
use serde_json::{Value, json};

use super::{Cli, Engine, EngineAdapter, Prepared, Reading, Said, Transcriber, Turn};
use super::{cli, mcp};
use crate::config::EngineConfig;

pub const PACKAGE: &str = "@google/gemini-cli";
/// The Google login the CLI leaves in `~/.gemini`.
pub const CREDENTIALS: &[&str] = &[".gemini/oauth_creds.json", ".gemini/google_accounts.json"];
pub const CLI: Cli = Cli {
    program: "gemini",
    package: PACKAGE,
    pinned: Some("0.61.0"),
    credentials: CREDENTIALS,
    hosts: &[
        "generativelanguage.googleapis.com:443",
        "cloudcode-pa.googleapis.com:443",
        "oauth2.googleapis.com:443",
    ],
    default_base: Some("https://generativelanguage.googleapis.com"),
};
/// The model used with a configured endpoint when the job names none.
pub const ENDPOINT_MODEL: &str = "gemini-2.5-flash";

#[derive(Debug)]
pub struct Gemini {
    pub config: Arc<EngineConfig>,
}

impl EngineAdapter for Gemini {
    fn engine(&self) -> Engine {
        Engine::Gemini
    }

    fn cli(&self) -> Option<Cli> {
        Some(CLI)
    }

    fn prepare(&self, turn: &Turn<'_>) -> anyhow::Result<Prepared> {
        let mut setup = cli::setup(&self.config, self, turn, ".gemini/skills", false)?;
        let home = &setup.home.clone();
        // A Google login lent from the agent home, else an API key.
        let auth_type = if setup.login.is_empty() {
            "gemini-api-key"
        } else {
            "oauth-personal"
        };
        let mut settings = json!({
            "privacy": {"usageStatisticsEnabled": false},
            "telemetry": {"enabled": false},
            "general": {"disableAutoUpdate": true, "disableUpdateNag": true,
                        "maxAttempts": self.config.max_retries + 1},
            "security": {"auth": {"selectedType": auth_type}},
        });
        if !turn.mcp.is_empty() {
            settings["mcpServers"] = mcp::gemini_servers(turn.mcp);
        }
        let path = home.join(".gemini/settings.json");
        setup.write_config(turn, &path, &settings.to_string())?;

        let model = cli::model(&self.config, self.engine(), turn, ENDPOINT_MODEL);
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
        let session = cli::pin_session(turn, &mut argv);
        let mut env = cli::base_env(home, &self.config);
        cli::endpoint_env(&setup, "GOOGLE_GEMINI_BASE_URL", "GEMINI_API_KEY", &mut env);
        Ok(setup.prepared(turn, argv, env, session))
    }

    fn read(&self, stdout: &str, _stderr: &str) -> Reading {
        let mut reading = Reading::default();
        // Assistant text arrives in deltas; a tool call ends one message and starts the next.
        let (mut message, mut last_message, mut error) = (String::new(), String::new(), None);
        for event in cli::typed_events(stdout) {
            match event {
                Event::Init { session_id } => reading.session = session_id.or(reading.session),
                Event::Message { role, content, .. } if role.as_deref() == Some("assistant") => {
                    message.push_str(&content);
                }
                Event::ToolUse { .. } | Event::ToolResult { .. } if !message.is_empty() => {
                    last_message = std::mem::take(&mut message);
                }
                Event::Result {
                    status,
                    error: failed,
                } if status.as_deref() != Some("success") => {
                    let failed = failed.map(|e| e.get("message").cloned().unwrap_or(e));
                    error = Some(failed.map_or_else(
                        || "the CLI reported an error".to_owned(),
                        |e| e.as_str().map_or_else(|| e.to_string(), str::to_owned),
                    ));
                }
                Event::Error { message } => error = message,
                _ => {}
            }
        }
        if !message.is_empty() {
            last_message = message;
        }
        cli::conclude(reading, "gemini", Some(&last_message), error)
    }

    fn transcriber(&self) -> Box<dyn Transcriber> {
        Box::new(transcribe)
    }
}

/// The lines of `-o stream-json` read here; a line of any other type is skipped.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Event {
    Init {
        session_id: Option<String>,
    },
    Message {
        role: Option<String>,
        #[serde(default)]
        content: String,
        delta: Option<bool>,
    },
    ToolUse {
        tool_id: Option<String>,
        #[serde(default)]
        tool_name: String,
        #[serde(default)]
        parameters: Value,
    },
    ToolResult {
        tool_id: Option<String>,
        status: Option<String>,
        output: Option<Value>,
        error: Option<Value>,
    },
    Result {
        status: Option<String>,
        error: Option<Value>,
    },
    Error {
        message: Option<String>,
    },
    #[serde(other)]
    Other,
}

/// What one line of `-o stream-json` says: assistant text (in deltas), tool calls and their
/// results.
fn transcribe(line: &str, said: &mut Vec<Said>) {
    match cli::typed(line) {
        Some(Event::Message {
            role,
            content,
            delta,
        }) if role.as_deref() == Some("assistant") => said.push(Said::Text {
            text: content,
            continues: delta == Some(true),
        }),
        Some(Event::ToolUse {
            tool_id,
            tool_name,
            parameters,
        }) => said.push(Said::ToolCall {
            id: tool_id,
            name: tool_name,
            arguments: parameters,
        }),
        Some(Event::ToolResult {
            tool_id,
            status,
            output,
            error,
        }) => said.push(Said::ToolResult {
            id: tool_id,
            output: cli::text_of(output.or(error).as_ref()),
            is_error: status.as_deref() != Some("success"),
        }),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn gemini() -> Gemini {
        Gemini {
            config: Arc::new(EngineConfig::for_tests()),
        }
    }

    #[test]
    fn reads_deltas_tool_calls_and_failures() {
        let out = r#"{"type":"init","session_id":"g-1","model":"m"}
{"type":"message","role":"user","content":"the prompt"}
{"type":"message","role":"assistant","content":"Let me","delta":true}
{"type":"message","role":"assistant","content":" look.","delta":true}
{"type":"tool_use","tool_name":"run_shell_command","tool_id":"t1","parameters":{"command":"ls"}}
{"type":"tool_result","tool_id":"t1","status":"success","output":"a.txt"}
{"type":"message","role":"assistant","content":"Done: {\"ok\": true}","delta":true}
{"type":"result","status":"success","stats":{}}"#;
        let reading = gemini().read(out, "");
        assert_eq!(reading.session.as_deref(), Some("g-1"));
        assert_eq!(reading.answer.unwrap().0["ok"], true);
        let mut said = Vec::new();
        out.lines().for_each(|line| transcribe(line, &mut said));
        assert_eq!(said.len(), 5, "{said:?}");
        assert_eq!(
            said[2],
            Said::ToolCall {
                id: Some("t1".into()),
                name: "run_shell_command".into(),
                arguments: json!({"command": "ls"}),
            }
        );
        assert_eq!(
            said[3],
            Said::ToolResult {
                id: Some("t1".into()),
                output: "a.txt".into(),
                is_error: false,
            }
        );
        let out = r#"{"type":"result","status":"error","error":{"type":"api","message":"[API Error: 500] boom"}}"#;
        let failure = gemini().read(out, "").failure.unwrap();
        assert!(failure.message.contains("500] boom"), "{failure:?}");
        let out = r#"{"type":"result","status":"error"}"#;
        let failure = gemini().read(out, "").failure.unwrap();
        assert!(
            failure.message.contains("the CLI reported an error"),
            "{failure:?}"
        );
    }
}
