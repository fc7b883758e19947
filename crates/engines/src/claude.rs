//! The `claude` engine: Claude Code (`@anthropic-ai/claude-code`), `claude -p` with
//! `--output-format stream-json`.
//!
//! The session id is chosen up front (`--session-id`) and resumed with `--resume`. Non-essential
//! traffic, telemetry, error reports and auto-update are off; `CLAUDE_CODE_MAX_RETRIES` bounds
//! retries. With `SKILL_RUNNER_CLAUDE_BASE_URL` / `_API_KEY` set, the CLI talks to that
//! Anthropic-compatible endpoint. `IS_SANDBOX=1` lets it skip permission prompts as root (the
//! run folder is its sandbox). The skill is copied to `<run>/.claude/skills/<id>`.

use std::sync::Arc;

use super::{Cli, Engine, EngineAdapter, Prepared, Reading, Transcriber, Turn};
use super::{cli, mcp, stream_json};
use crate::config::EngineConfig;

pub const PACKAGE: &str = "@anthropic-ai/claude-code";
/// The login `claude /login` leaves in the home.
pub const CREDENTIALS: &[&str] = &[".claude/.credentials.json"];
pub const CLI: Cli = Cli {
    program: "claude",
    package: PACKAGE,
    pinned: Some("2.1.329"),
    credentials: CREDENTIALS,
    hosts: &["api.anthropic.com:443", "console.anthropic.com:443"],
    default_base: Some("https://api.anthropic.com"),
};

#[derive(Debug)]
pub struct Claude {
    pub config: Arc<EngineConfig>,
}

impl EngineAdapter for Claude {
    fn engine(&self) -> Engine {
        Engine::Claude
    }

    fn cli(&self) -> Option<Cli> {
        Some(CLI)
    }

    fn prepare(&self, turn: &Turn<'_>) -> anyhow::Result<Prepared> {
        let mut setup = cli::setup(&self.config, self, turn, ".claude/skills", false)?;
        let home = &setup.home.clone();
        let mut argv: Vec<String> = vec![
            setup.program.clone(),
            "-p".into(),
            setup.prompt.clone(),
            "--output-format".into(),
            "stream-json".into(),
            "--verbose".into(),
            "--dangerously-skip-permissions".into(),
        ];
        if let Some(model) = turn.model {
            argv.extend(["--model".into(), model.to_owned()]);
        }
        if let Some(effort) = turn.effort {
            argv.extend(["--effort".into(), effort.to_owned()]);
        }
        if !turn.mcp.is_empty() {
            // Only the service's servers: none of a project `.mcp.json` or the user's own.
            let path = home.join(".skill-runner-mcp.json");
            let servers = mcp::claude_config(turn.mcp).to_string();
            setup.write_config(turn, &path, &servers)?;
            argv.extend([
                "--mcp-config".into(),
                path.to_string_lossy().into_owned(),
                "--strict-mcp-config".into(),
            ]);
        }
        let session = cli::pin_session(turn, &mut argv);
        let mut env = cli::base_env(home, &self.config);
        for (name, value) in [
            ("IS_SANDBOX", "1"),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
            ("DISABLE_TELEMETRY", "1"),
            ("DISABLE_AUTOUPDATER", "1"),
            ("DISABLE_ERROR_REPORTING", "1"),
        ] {
            env.push((name.into(), value.into()));
        }
        env.push((
            "CLAUDE_CODE_MAX_RETRIES".into(),
            self.config.max_retries.to_string(),
        ));
        cli::endpoint_env(&setup, "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", &mut env);
        Ok(setup.prepared(turn, argv, env, session))
    }

    fn read(&self, stdout: &str, _stderr: &str) -> Reading {
        stream_json::read(stdout, "claude")
    }

    fn transcriber(&self) -> Box<dyn Transcriber> {
        Box::new(stream_json::transcribe)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claude() -> Claude {
        Claude {
            config: Arc::new(EngineConfig::for_tests()),
        }
    }

    #[test]
    fn reads_session_result_and_errors() {
        let out = r#"{"type":"system","subtype":"init","session_id":"s-1"}
{"type":"assistant","message":{"content":[{"type":"text","text":"thinking"}]},"session_id":"s-1"}
{"type":"result","subtype":"success","is_error":false,"result":"ok {\"a\": 1}","session_id":"s-1"}"#;
        let r = claude().read(out, "");
        assert_eq!(r.session.as_deref(), Some("s-1"));
        assert_eq!(r.answer.unwrap().0["a"], 1);
        let out = r#"{"type":"result","subtype":"success","is_error":true,"result":"API Error: 500 {\"error\":\"boom\"}","session_id":"s-2"}"#;
        let failure = claude().read(out, "").failure.unwrap();
        assert!(failure.message.contains("500"), "{failure:?}");
        let out =
            r#"{"type":"result","is_error":true,"result":"Invalid API key · Please run /login"}"#;
        assert_eq!(
            claude().read(out, "").failure.unwrap().code,
            Some("AUTH_REQUIRED")
        );
    }
}
