//! The `qwen` engine: Qwen Code (`@qwen-code/qwen-code`), `qwen "<prompt>" -o stream-json -y`.
//!
//! Its settings (`<run>/.agent-home/.qwen/settings.json`) select OpenAI-compatible auth and turn
//! off usage statistics, telemetry and the background "managed memory" calls (which would also
//! talk to the model). With `SKILL_RUNNER_QWEN_BASE_URL` / `_API_KEY` set it uses that endpoint
//! (`OPENAI_BASE_URL` / `OPENAI_API_KEY`), with [`ENDPOINT_MODEL`] unless the job names a model.
//! The session id is pinned with `--session-id` and resumed with `--resume`; the output is
//! Claude-Code-style stream-json. The skill is copied to `<run>/.qwen/skills/<id>`.

use std::sync::Arc;

use serde_json::json;

use super::{Cli, Engine, EngineAdapter, Prepared, Reading, Transcriber, Turn};
use super::{cli, mcp, stream_json};
use crate::config::EngineConfig;

pub const PACKAGE: &str = "@qwen-code/qwen-code";
/// The Qwen OAuth login the CLI leaves in `~/.qwen`.
pub const CREDENTIALS: &[&str] = &[".qwen/oauth_creds.json"];
pub const CLI: Cli = Cli {
    program: "qwen",
    package: PACKAGE,
    pinned: Some("0.24.4"),
    credentials: CREDENTIALS,
    hosts: &[
        "dashscope.aliyuncs.com:443",
        "portal.qwen.ai:443",
        "chat.qwen.ai:443",
    ],
    default_base: None,
};
/// The model used with a configured endpoint when the job names none.
pub const ENDPOINT_MODEL: &str = "qwen3-coder-plus";

#[derive(Debug)]
pub struct Qwen {
    pub config: Arc<EngineConfig>,
}

impl EngineAdapter for Qwen {
    fn engine(&self) -> Engine {
        Engine::Qwen
    }

    fn cli(&self) -> Option<Cli> {
        Some(CLI)
    }

    fn prepare(&self, turn: &Turn<'_>) -> anyhow::Result<Prepared> {
        let mut setup = cli::setup(&self.config, self, turn, ".qwen/skills", false)?;
        let home = &setup.home.clone();
        // A Qwen OAuth login lent from the agent home, else an OpenAI-compatible key.
        let auth_type = if setup.login.is_empty() {
            "openai"
        } else {
            "qwen-oauth"
        };
        let mut settings = json!({
            "security": {"auth": {"selectedType": auth_type}},
            "privacy": {"usageStatisticsEnabled": false},
            "telemetry": {"enabled": false},
            "memory": {"enableManagedAutoMemory": false, "enableManagedAutoDream": false,
                       "enableAutoSkill": false},
            "model": {"generationConfig": {"maxRetries": self.config.max_retries}},
            "general": {"disableAutoUpdate": true, "disableUpdateNag": true},
        });
        if let Some(effort) = turn.effort {
            settings["model"]["reasoningEffort"] = json!(effort);
            // Verbatim in the request body of an OpenAI-compatible endpoint, whose model the
            // CLI knows no capabilities of.
            settings["model"]["generationConfig"]["extra_body"] =
                json!({"reasoning_effort": effort});
        }
        if !turn.mcp.is_empty() {
            settings["mcpServers"] = mcp::gemini_servers(turn.mcp);
        }
        let path = home.join(".qwen/settings.json");
        setup.write_config(turn, &path, &settings.to_string())?;

        let model = cli::model(&self.config, self.engine(), turn, ENDPOINT_MODEL);
        let mut argv: Vec<String> = vec![
            setup.program.clone(),
            setup.prompt.clone(),
            "-o".into(),
            "stream-json".into(),
            "-y".into(),
            "--auth-type".into(),
            auth_type.into(),
        ];
        if let Some(model) = model {
            argv.extend(["-m".into(), model.to_owned()]);
        }
        let session = cli::pin_session(turn, &mut argv);
        let mut env = cli::base_env(home, &self.config);
        env.push(("QWEN_CODE_SUPPRESS_YOLO_WARNING".into(), "1".into()));
        cli::endpoint_env(&setup, "OPENAI_BASE_URL", "OPENAI_API_KEY", &mut env);
        Ok(setup.prepared(turn, argv, env, session))
    }

    fn read(&self, stdout: &str, _stderr: &str) -> Reading {
        stream_json::read(stdout, "qwen")
    }

    fn transcriber(&self) -> Box<dyn Transcriber> {
        Box::new(stream_json::transcribe)
    }
}
