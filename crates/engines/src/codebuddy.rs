//! The `codebuddy` engine: Tencent's CodeBuddy Code CLI (`@tencent-ai/codebuddy-code`), a
//! Claude Code derivative driven the way the reference's v0.7 adapter drives it:
//! `codebuddy -p --output-format stream-json --permission-mode bypassPermissions [-r <session>]
//! --settings <home>/.codebuddy/settings.json --setting-sources project --mcp-config
//! <home>/.codebuddy/mcp.json --strict-mcp-config [--model <model>] <prompt>`.
//!
//! Its output is Claude Code's stream-json ([`stream_json`]); the session is the one the output
//! reports (the CLI takes no session id up front), resumed with `-r`. Only the run's own
//! settings apply (`--setting-sources project`), with auto-update, memory and prompt
//! suggestions off, and only the MCP servers the service gives it (`--strict-mcp-config`).
//! With `SKILL_RUNNER_CODEBUDDY_BASE_URL` / `_API_KEY` set the CLI talks to that endpoint
//! (`CODEBUDDY_BASE_URL`, `CODEBUDDY_API_KEY`); the CLI has no login file the service knows, so
//! it logs in with an API key only. The skill is copied to `<run>/.codebuddy/skills/<id>`.
//!
//! The CLI is not published on the public npm registry: the tests drive a stand-in that replays
//! its documented output (`crates/engines/tests/fixtures/codebuddy`).

use std::sync::Arc;

use serde_json::json;

use super::{Cli, Engine, EngineAdapter, Prepared, Reading, Transcriber, Turn};
use super::{cli, mcp, stream_json};
use crate::config::EngineConfig;

pub const PACKAGE: &str = "@tencent-ai/codebuddy-code";
pub const CLI: Cli = Cli {
    program: "codebuddy",
    package: PACKAGE,
    pinned: None,
    credentials: &[],
    hosts: &["www.codebuddy.ai:443", "copilot.tencent.com:443"],
    default_base: None,
};
/// The model used with a configured endpoint when the job names none.
pub const ENDPOINT_MODEL: &str = "gpt-5.5";

#[derive(Debug)]
pub struct CodeBuddy {
    pub config: Arc<EngineConfig>,
}

impl EngineAdapter for CodeBuddy {
    fn engine(&self) -> Engine {
        Engine::Codebuddy
    }

    fn cli(&self) -> Option<Cli> {
        Some(CLI)
    }

    fn prepare(&self, turn: &Turn<'_>) -> anyhow::Result<Prepared> {
        let mut setup = cli::setup(&self.config, self, turn, ".codebuddy/skills", false)?;
        let home = &setup.home.clone();
        let config_dir = home.join(".codebuddy");
        let settings = config_dir.join("settings.json");
        cli::write_config(
            &settings,
            &json!({
                "autoUpdates": false,
                "promptSuggestionEnabled": false,
                "memory": false,
                "permissions": {"defaultMode": "bypassPermissions",
                                "subagentPermissionMode": "bypassPermissions"},
            })
            .to_string(),
        )?;
        let mcp_file = config_dir.join("mcp.json");
        setup.write_config(turn, &mcp_file, &mcp::claude_config(turn.mcp).to_string())?;
        let text = |p: &std::path::Path| p.to_string_lossy().into_owned();
        let mut argv: Vec<String> = vec![
            setup.program.clone(),
            "-p".into(),
            "--output-format".into(),
            "stream-json".into(),
            "--permission-mode".into(),
            "bypassPermissions".into(),
        ];
        if let Some(session) = turn.session.filter(|_| turn.resumes()) {
            argv.extend(["-r".into(), session.to_owned()]);
        }
        argv.extend([
            "--settings".into(),
            text(&settings),
            "--setting-sources".into(),
            "project".into(),
            "--mcp-config".into(),
            text(&mcp_file),
            "--strict-mcp-config".into(),
        ]);
        if let Some(model) = cli::model(&self.config, self.engine(), turn, ENDPOINT_MODEL) {
            argv.extend(["--model".into(), model.to_owned()]);
        }
        argv.push(setup.prompt.clone());
        let mut env = cli::base_env(home, &self.config);
        env.push(("CODEBUDDY_CONFIG_DIR".into(), text(&config_dir)));
        for (name, value) in [
            ("IS_SANDBOX", "1"),
            ("DISABLE_TELEMETRY", "1"),
            ("DISABLE_AUTOUPDATER", "1"),
            ("DISABLE_ERROR_REPORTING", "1"),
        ] {
            env.push((name.into(), value.into()));
        }
        cli::endpoint_env(&setup, "CODEBUDDY_BASE_URL", "CODEBUDDY_API_KEY", &mut env);
        Ok(setup.prepared(turn, argv, env, None))
    }

    fn read(&self, stdout: &str, _stderr: &str) -> Reading {
        stream_json::read(stdout, "codebuddy")
    }

    fn transcriber(&self) -> Box<dyn Transcriber> {
        Box::new(stream_json::transcribe)
    }
}
