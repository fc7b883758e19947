//! The `qwen` engine: Qwen Code (`@qwen-code/qwen-code`), `qwen "<prompt>" -o stream-json -y`.
//!
//! Its settings (`<run>/.agent-home/.qwen/settings.json`) select OpenAI-compatible auth and turn
//! off usage statistics, telemetry and the background "managed memory" calls (which would also
//! talk to the model). With `SKILL_RUNNER_QWEN_BASE_URL` / `_API_KEY` set it uses that endpoint
//! (`OPENAI_BASE_URL` / `OPENAI_API_KEY`), with [`ENDPOINT_MODEL`] unless the job names a model.
//! The session id is pinned with `--session-id` and resumed with `--resume`; the output is
//! Claude-Code-style stream-json. The skill is copied to `<run>/.qwen/skills/<id>`.

use std::sync::Arc;

use anyhow::Context;
use serde_json::json;

use super::agent;
use super::{Cli, Engine, EngineAdapter, Prepared, Reading, Turn};
use crate::config::AgentConfig;

pub const PACKAGE: &str = "@qwen-code/qwen-code";
const PROGRAM: &str = "qwen";
/// The model used with a configured endpoint when the job names none.
pub const ENDPOINT_MODEL: &str = "qwen3-coder-plus";

#[derive(Debug)]
pub struct Qwen {
    pub config: Arc<AgentConfig>,
}

impl EngineAdapter for Qwen {
    fn engine(&self) -> Engine {
        Engine::Qwen
    }

    fn cli(&self) -> Option<Cli> {
        Some(Cli {
            program: PROGRAM,
            package: PACKAGE,
        })
    }

    fn prepare(&self, turn: &Turn<'_>) -> anyhow::Result<Prepared> {
        let program = agent::find_cli(&self.config, PROGRAM)
            .with_context(|| agent::missing_cli(Engine::Qwen, PROGRAM, PACKAGE, &self.config))?;
        let home = agent::run_home(turn.run_dir)?;
        let skill_copy = turn.run_dir.join(".qwen/skills").join(&turn.skill.id);
        agent::materialize(&turn.skill.path, &skill_copy)?;
        let settings = json!({
            "security": {"auth": {"selectedType": "openai"}},
            "privacy": {"usageStatisticsEnabled": false},
            "telemetry": {"enabled": false},
            "memory": {"enableManagedAutoMemory": false, "enableManagedAutoDream": false,
                       "enableAutoSkill": false},
            "model": {"generationConfig": {"maxRetries": self.config.max_retries}},
            "general": {"disableAutoUpdate": true, "disableUpdateNag": true},
        });
        std::fs::create_dir_all(home.join(".qwen"))?;
        std::fs::write(home.join(".qwen/settings.json"), settings.to_string())?;

        let endpoint = agent::endpoint(&self.config, "qwen");
        let model = turn.model.or(endpoint
            .and_then(|e| e.base_url.as_ref())
            .map(|_| ENDPOINT_MODEL));
        let mut argv: Vec<String> = vec![
            program.to_string_lossy().into_owned(),
            agent::prompt(turn, &skill_copy),
            "-o".into(),
            "stream-json".into(),
            "-y".into(),
            "--auth-type".into(),
            "openai".into(),
        ];
        if let Some(model) = model {
            argv.extend(["-m".into(), model.to_owned()]);
        }
        let session = match turn.session {
            Some(session) if turn.number > 1 => {
                argv.extend(["--resume".into(), session.to_owned()]);
                None
            }
            _ => {
                let session = uuid::Uuid::new_v4().to_string();
                argv.extend(["--session-id".into(), session.clone()]);
                Some(session)
            }
        };
        let mut env = agent::base_env(&home, &self.config);
        env.push(("QWEN_CODE_SUPPRESS_YOLO_WARNING".into(), "1".into()));
        if let Some(endpoint) = endpoint {
            if let Some(url) = &endpoint.base_url {
                env.push(("OPENAI_BASE_URL".into(), url.clone()));
            }
            if let Some(key) = &endpoint.api_key {
                env.push(("OPENAI_API_KEY".into(), key.clone()));
            }
        }
        Ok(Prepared {
            spec: agent::spec(turn, argv, env),
            session,
        })
    }

    fn read(&self, stdout: &str, _stderr: &str) -> Reading {
        agent::read_stream_json(stdout, "qwen")
    }
}
