//! The `iflow` engine: iFlow CLI (`@iflow-ai/iflow-cli`, a Gemini CLI fork),
//! `iflow -p <prompt> -y [-m <model>] [--resume <session>]`.
//!
//! The CLI is not published on the npm registry, so this adapter is built from iFlow's
//! documentation and tested against recorded output in that format (`tests/fixtures/iflow/`),
//! never against the CLI itself. Headless, iFlow prints the assistant's final text on stdout and
//! an `<Execution Info>` block (JSON with `session-id`, `conversation-id`, `assistantRounds`,
//! `executionTimeMs`, `tokenUsage`) on stderr; versions before 0.5 print that block on stdout.
//! Errors go to stderr (`Error when talking to iFlow API …`, `[API Error: …]`).
//!
//! Settings go to `<run>/.agent-home/.iflow/settings.json` (yolo approval, no sandbox, no
//! telemetry or update checks). With `SKILL_RUNNER_IFLOW_BASE_URL` / `_API_KEY` set, the auth
//! type is `openai-compatible` and the endpoint and key reach the CLI as `IFLOW_baseUrl` /
//! `IFLOW_apiKey` (iFlow reads any setting from an `IFLOW_<key>` variable), so the key is
//! written nowhere. Without them the CLI uses the login copied from the agent home
//! (`iflow_accounts.json`, `oauth_creds.json`; see [`cli::credentials`]). The session cannot be
//! pinned up front; it is read from the execution info and resumed with `--resume`.

use std::sync::Arc;

use serde_json::{Value, json};

use super::cli;
use super::{Cli, Engine, EngineAdapter, Prepared, Reading, Said, Transcriber, Turn};
use crate::answer;
use crate::config::EngineConfig;

pub const PACKAGE: &str = "@iflow-ai/iflow-cli";
pub const CLI: Cli = Cli {
    program: "iflow",
    package: PACKAGE,
    pinned: None,
    credentials: CREDENTIALS,
    hosts: &["apis.iflow.cn:443", "iflow.cn:443"],
    default_base: None,
};
/// The model used with a configured endpoint when the job names none.
pub const ENDPOINT_MODEL: &str = "qwen3-coder-plus";
/// The login files of an iFlow account under `~/.iflow`.
pub const CREDENTIALS: &[&str] = &[".iflow/iflow_accounts.json", ".iflow/oauth_creds.json"];

const INFO_OPEN: &str = "<Execution Info>";
const INFO_CLOSE: &str = "</Execution Info>";

#[derive(Debug)]
pub struct Iflow {
    pub config: Arc<EngineConfig>,
}

impl EngineAdapter for Iflow {
    fn engine(&self) -> Engine {
        Engine::Iflow
    }

    fn cli(&self) -> Option<Cli> {
        Some(CLI)
    }

    fn prepare(&self, turn: &Turn<'_>) -> anyhow::Result<Prepared> {
        let setup = cli::setup(&self.config, self, turn, ".iflow/skills", false)?;
        let home = &setup.home;
        let endpoint = setup.endpoint.as_ref();
        let custom = endpoint.as_ref().is_some_and(|e| e.base_url.is_some());
        let mut settings = json!({
            "approvalMode": "yolo",
            "autoAccept": true,
            "sandbox": false,
            "checkpointing": {"enabled": false},
            "usageStatisticsEnabled": false,
            "telemetry": {"enabled": false},
            "disableAutoUpdate": true,
            "maxSessionTurns": -1,
        });
        // An endpoint of the user's, else iFlow's platform with a key, else a lent login.
        settings["selectedAuthType"] = json!(if custom {
            "openai-compatible"
        } else if endpoint.is_some_and(|e| e.api_key.is_some()) {
            "iflow"
        } else {
            "oauth-iflow"
        });
        cli::write_config(&home.join(".iflow/settings.json"), &settings.to_string())?;

        let model = cli::model(&self.config, self.engine(), turn, ENDPOINT_MODEL);
        let mut argv: Vec<String> = vec![
            setup.program.clone(),
            "-p".into(),
            setup.prompt.clone(),
            "-y".into(),
        ];
        if let Some(model) = model {
            argv.extend(["-m".into(), model.to_owned()]);
        }
        if turn.resumes() {
            // Without the session the reply would start a new conversation that lacks the task.
            let session = turn.session.ok_or_else(|| {
                anyhow::anyhow!(
                    "iflow: the first turn reported no session id, so the reply cannot resume it"
                )
            })?;
            argv.extend(["--resume".into(), session.to_owned()]);
        }
        let mut env = cli::base_env(home, &self.config);
        cli::endpoint_env(&setup, "IFLOW_baseUrl", "IFLOW_apiKey", &mut env);
        Ok(setup.prepared(turn, argv, env, None))
    }

    fn read(&self, stdout: &str, stderr: &str) -> Reading {
        let (text, stdout_info) = split_info(stdout);
        let (errors, stderr_info) = split_info(stderr);
        let session = [stderr_info, stdout_info]
            .into_iter()
            .flatten()
            .find_map(|info| {
                info.get("session-id")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            });
        let answer = answer::extract(&text);
        let failure = match answer {
            None => first_error(&errors).map(|line| cli::failure("iflow", line)),
            Some(_) => None,
        };
        Reading {
            answer,
            text: Some(text).filter(|t| !t.trim().is_empty()),
            session,
            failure,
        }
    }

    /// The text the CLI prints is one message; its `<Execution Info>` block is left out.
    fn transcriber(&self) -> Box<dyn Transcriber> {
        let mut in_info = false;
        Box::new(move |line: &str, said: &mut Vec<Said>| {
            if line.trim_start().starts_with(INFO_OPEN) {
                in_info = true;
            }
            if in_info {
                in_info = !line.contains(INFO_CLOSE);
                return;
            }
            said.push(Said::Text {
                text: format!("{line}\n"),
                continues: true,
            });
        })
    }
}

/// `text` without its `<Execution Info>` block, and the block's JSON.
fn split_info(text: &str) -> (String, Option<Value>) {
    let Some(start) = text.rfind(INFO_OPEN) else {
        return (text.to_owned(), None);
    };
    let body_start = start + INFO_OPEN.len();
    let (body, rest) = match text[body_start..].find(INFO_CLOSE) {
        Some(end) => (
            &text[body_start..body_start + end],
            &text[body_start + end + INFO_CLOSE.len()..],
        ),
        None => (&text[body_start..], ""),
    };
    let info: Option<Value> = serde_json::from_str(body.trim()).ok();
    if info.is_none() && rest.is_empty() && !text[body_start..].contains(INFO_CLOSE) {
        // Not a block (an answer that merely mentions the tag): the text stays whole.
        return (text.to_owned(), None);
    }
    (format!("{}{rest}", &text[..start]), info)
}

/// The line of stderr that says what went wrong: `[API Error: <status> …]` (the line before it
/// only names a report file), else the first line that starts with `Error` or says `error:` or
/// `fetch failed`.
fn first_error(stderr: &str) -> Option<String> {
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let error = |l: &&&str| {
        let lower = l.to_ascii_lowercase();
        lower.starts_with("error") || lower.contains("error:") || lower.contains("fetch failed")
    };
    let line = lines
        .iter()
        .find(|l| l.starts_with("[API Error"))
        .or_else(|| lines.iter().find(error))?;
    Some(line.chars().take(500).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adapter() -> Iflow {
        Iflow {
            config: Arc::new(EngineConfig::for_tests()),
        }
    }

    fn fixture(name: &str) -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/iflow")
            .join(name);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    #[test]
    fn the_transcript_is_the_text_without_the_execution_info() {
        let mut transcriber = adapter().transcriber();
        let mut said = Vec::new();
        for line in fixture("legacy.stdout").lines() {
            transcriber.line(line, &mut said);
        }
        let text: String = said
            .iter()
            .map(|s| match s {
                Said::Text {
                    text,
                    continues: true,
                } => text.as_str(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            text.trim(),
            "Done.\n\n{\"summary\": \"old\", \"report\": \"artifacts/report.txt\"}"
        );
    }

    #[test]
    fn answer_and_session_from_a_recorded_turn() {
        let reading = adapter().read(&fixture("auto.stdout"), &fixture("auto.stderr"));
        let (answer, _) = reading.answer.expect("an answer");
        assert_eq!(answer["summary"], "wrote it");
        assert_eq!(
            reading.session.as_deref(),
            Some("session-5c1d2f0e-8a7b-4e3c-9d21-6f0a1b2c3d4e")
        );
        assert!(reading.failure.is_none());
    }

    #[test]
    fn older_layout_prints_the_info_on_stdout() {
        let reading = adapter().read(&fixture("legacy.stdout"), "");
        assert_eq!(reading.answer.expect("an answer").0["summary"], "old");
        assert_eq!(reading.session.as_deref(), Some("session-legacy-0001"));
    }

    #[test]
    fn a_question_keeps_its_session() {
        let reading = adapter().read(&fixture("ask.stdout"), &fixture("ask.stderr"));
        assert_eq!(reading.answer.expect("an answer").0["outcome"], "ask_user");
        assert_eq!(
            reading.session.as_deref(),
            Some("session-7e0c4b1a-2d3f-4a5b-8c6d-9e0f1a2b3c4d")
        );
    }

    #[test]
    fn api_errors_fail_with_their_status() {
        let reading = adapter().read("", &fixture("api-error.stderr"));
        let failure = reading.failure.expect("a failure");
        assert!(
            failure
                .message
                .starts_with("iflow: the model request failed: [API Error: 500"),
            "{}",
            failure.message
        );
        assert_eq!(failure.code, None);

        let reading = adapter().read("", &fixture("auth-error.stderr"));
        let failure = reading.failure.expect("a failure");
        assert_eq!(failure.code, Some("AUTH_REQUIRED"), "{}", failure.message);
    }

    #[test]
    fn a_broken_info_block_is_not_an_answer() {
        let (text, info) = split_info("hello\n<Execution Info>\n{not json");
        assert_eq!(text, "hello\n<Execution Info>\n{not json");
        assert_eq!(info, None);
        let answer = "The CLI prints <Execution Info> last. {\"summary\": \"x\"}";
        assert_eq!(split_info(answer).0, answer);
        let (text, info) = split_info("ok\n<Execution Info>\n{\"session-id\": \"s\"}\n");
        assert_eq!(
            (text.as_str(), info.unwrap()["session-id"].as_str()),
            ("ok\n", Some("s"))
        );
        assert_eq!(first_error("0 errors found\nall good"), None);
        assert_eq!(
            first_error("retrying\nTypeError: fetch failed").as_deref(),
            Some("TypeError: fetch failed")
        );
        let reading = adapter().read("no json here", "");
        assert!(reading.answer.is_none() && reading.failure.is_none());
    }
}
