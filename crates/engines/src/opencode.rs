//! The `opencode` engine, opencode (`opencode-ai`, `opencode run --format json`), and the
//! `kilo` engine, Kilo Code's CLI (`@kilocode/cli`, `kilo run --format json --auto`), a fork of
//! opencode that prints the same events: one adapter, two [`Flavor`]s.
//!
//! The configuration (opencode's `$XDG_CONFIG_HOME/opencode/opencode.json` in the run's home;
//! Kilo's `$XDG_CONFIG_HOME/kilo/kilo.json`, named by `KILO_CONFIG`) turns off auto-update,
//! sharing and snapshots (a headless turn has no use for them, and they copy the workspace),
//! allows edits, shell commands and loading skills without asking, and denies the CLI's own `question` tool:
//! the reference saw it wait, headless, for an answer that never comes (the pinned versions'
//! `run` answers it at once either way; the run asks its user through the service instead). With `SKILL_RUNNER_<ENGINE>_BASE_URL` / `_API_KEY` set it declares an
//! OpenAI-compatible provider `skill_runner` for that endpoint, whose model is the job's (or
//! [`ENDPOINT_MODEL`]). The session is the `sessionID` of its events; a reply resumes it with
//! `-s`. The skill is copied to `<run>/.opencode/skills/<id>` (`.kilo/skills/<id>`).

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Value, json};

use super::cli::{self, Line};
use super::mcp;
use super::{Cli, Engine, EngineAdapter, Prepared, Reading, Said, Transcriber, Turn};
use crate::config::EngineConfig;

/// What tells opencode and Kilo apart.
#[derive(Debug)]
pub struct Flavor {
    pub engine: Engine,
    pub cli: Cli,
    /// The configuration file, relative to the run's home.
    config_file: &'static str,
    /// The variable naming that file, for a CLI that reads one.
    config_var: Option<&'static str>,
    /// Where the skill is copied, relative to the workspace.
    skills_dir: &'static str,
    /// The variable the provider's `{env:...}` key reference reads.
    key_var: &'static str,
    /// Extra `run` arguments.
    run_args: &'static [&'static str],
    /// Variables set for every turn.
    env: &'static [(&'static str, &'static str)],
    /// For an npm launcher that starts the real program as its child, that program beside it.
    native: Option<fn(&std::path::Path) -> Option<std::path::PathBuf>>,
}

pub const OPENCODE: Flavor = Flavor {
    engine: Engine::Opencode,
    cli: Cli {
        program: "opencode",
        package: "opencode-ai",
        pinned: Some("1.18.33"),
        // The provider keys and logins of `opencode auth login`.
        credentials: &[".local/share/opencode/auth.json"],
        hosts: &[
            "opencode.ai:443",
            "models.dev:443",
            "api.openai.com:443",
            "api.anthropic.com:443",
        ],
        default_base: None,
    },
    config_file: ".config/opencode/opencode.json",
    config_var: None,
    skills_dir: ".opencode/skills",
    key_var: "SKILL_RUNNER_OPENCODE_API_KEY",
    run_args: &[],
    env: &[
        ("OPENCODE_DISABLE_MODELS_FETCH", "1"),
        ("OPENCODE_DISABLE_AUTOUPDATE", "1"),
        ("OPENCODE_DISABLE_LSP_DOWNLOAD", "1"),
        ("OPENCODE_DISABLE_SHARE", "1"),
    ],
    native: None,
};

pub const KILO: Flavor = Flavor {
    engine: Engine::Kilo,
    cli: Cli {
        program: "kilo",
        package: "@kilocode/cli",
        // 7.8.1 ships no linux-x64 program on the registry.
        pinned: Some("7.7.7"),
        credentials: &[".local/share/kilo/auth.json"],
        hosts: &[
            "api.kilo.ai:443",
            "models.dev:443",
            "api.openai.com:443",
            "api.anthropic.com:443",
        ],
        default_base: None,
    },
    config_file: ".config/kilo/kilo.json",
    config_var: Some("KILO_CONFIG"),
    skills_dir: ".kilo/skills",
    key_var: "SKILL_RUNNER_KILO_API_KEY",
    // Without it, a permission not allowed by the configuration waits for an answer.
    run_args: &["--auto"],
    env: &[
        ("KILO_DISABLE_MODELS_FETCH", "1"),
        ("KILO_DISABLE_AUTOUPDATE", "1"),
        ("KILO_DISABLE_LSP_DOWNLOAD", "1"),
        ("KILO_DISABLE_SHARE", "1"),
        ("KILO_DISABLE_SESSION_INGEST", "1"),
        ("KILO_DISABLE_CODEBASE_INDEXING", "1"),
        ("KILO_DISABLE_CLAUDE_CODE", "1"),
        ("KILO_DISABLE_EXTERNAL_SKILLS", "1"),
        ("KILO_NO_DAEMON", "1"),
        ("KILO_TELEMETRY_LEVEL", "off"),
    ],
    native: Some(kilo_native),
};

/// Kilo's native program for this machine, which its npm launcher (a Node script) would start
/// as a child: started directly, it is the turn's own process, whose `/proc/self` the sandbox
/// lets it read (the runtime reads its cgroup there, and aborts when it cannot).
fn kilo_native(launcher: &std::path::Path) -> Option<std::path::PathBuf> {
    let package = launcher
        .canonicalize()
        .ok()?
        .parent()?
        .parent()?
        .to_path_buf();
    let arch = match std::env::consts::ARCH {
        "x86_64" => "x64",
        "aarch64" => "arm64",
        other => other,
    };
    let base = format!("cli-linux-{arch}");
    [
        base.clone(),
        format!("{base}-baseline"),
        format!("{base}-musl"),
        format!("{base}-baseline-musl"),
    ]
    .into_iter()
    .map(|name| {
        package
            .join("node_modules/@kilocode")
            .join(name)
            .join("bin/kilo")
    })
    .find(|path| path.is_file())
}

/// The model used with a configured endpoint when the job names none.
pub const ENDPOINT_MODEL: &str = "gpt-5.5";
const PROVIDER: &str = "skill_runner";

#[derive(Debug)]
pub struct Opencode {
    pub config: Arc<EngineConfig>,
    pub flavor: &'static Flavor,
}

impl Opencode {
    /// The configuration file and the `-m` argument, if any.
    /// `endpoint`: what the turn is told ([`cli::Setup::endpoint`]).
    fn configuration(
        &self,
        endpoint: Option<&crate::config::Endpoint>,
        model: Option<&str>,
        effort: Option<&str>,
    ) -> (Value, Option<String>) {
        let mut config = json!({
            "autoupdate": false,
            "share": "disabled",
            "snapshot": false,
            "permission": {"edit": "allow", "bash": "allow", "webfetch": "allow",
                           "external_directory": "allow", "question": "deny", "skill": "allow"},
        });
        let Some(url) = endpoint.and_then(|e| e.base_url.as_ref()) else {
            return (config, model.map(str::to_owned));
        };
        // A job's model may name the provider already (`skill_runner/x`).
        let name = model
            .map(|m| m.strip_prefix(&format!("{PROVIDER}/")).unwrap_or(m))
            .unwrap_or(ENDPOINT_MODEL);
        let qualified = format!("{PROVIDER}/{name}");
        // No client-side timeout: the service's hard timeout bounds the turn.
        let mut options = json!({"baseURL": url, "timeout": false});
        if endpoint.is_some_and(|e| e.api_key.is_some()) {
            // A reference the CLI resolves from its environment: the key itself never lands in
            // the run folder, which clients can browse and download.
            options["apiKey"] = json!(format!("{{env:{}}}", self.flavor.key_var));
        }
        config["model"] = json!(qualified);
        config["small_model"] = json!(qualified);
        config["provider"] = json!({PROVIDER: {
            "npm": "@ai-sdk/openai-compatible",
            "name": "skill-runner endpoint",
            "options": options,
            "models": {name: {"name": name, "tool_call": true}},
        }});
        if let Some(effort) = effort {
            config["provider"][PROVIDER]["models"][name]["options"] =
                json!({"reasoningEffort": effort});
        }
        (config, Some(qualified))
    }
}

impl EngineAdapter for Opencode {
    fn engine(&self) -> Engine {
        self.flavor.engine
    }

    fn cli(&self) -> Option<Cli> {
        Some(self.flavor.cli)
    }

    fn prepare(&self, turn: &Turn<'_>) -> anyhow::Result<Prepared> {
        let flavor = self.flavor;
        let mut setup = cli::setup(&self.config, self, turn, flavor.skills_dir, false)?;
        let home = &setup.home.clone();
        let (mut config, model) =
            self.configuration(setup.endpoint.as_ref(), turn.model, turn.effort);
        if !turn.mcp.is_empty() {
            config["mcp"] = mcp::opencode_servers(turn.mcp);
        }
        let config_file = home.join(flavor.config_file);
        setup.write_config(turn, &config_file, &config.to_string())?;

        let native = flavor
            .native
            .and_then(|find| find(std::path::Path::new(&setup.program)));
        let program = native.as_ref().map_or_else(
            || setup.program.clone(),
            |p| p.to_string_lossy().into_owned(),
        );
        let mut argv: Vec<String> = vec![
            program,
            "run".into(),
            "--format".into(),
            "json".into(),
            "--dir".into(),
            turn.workspace().to_string_lossy().into_owned(),
        ];
        argv.extend(flavor.run_args.iter().map(|a| (*a).to_owned()));
        if let Some(model) = model {
            argv.extend(["-m".into(), model]);
        }
        if let Some(session) = turn.session.filter(|_| turn.resumes()) {
            argv.extend(["-s".into(), session.to_owned()]);
        }
        argv.push(setup.prompt.clone());
        let mut env = cli::base_env(home, &self.config);
        // What the provider's `{env:...}` reference reads.
        cli::key_env(&setup, flavor.key_var, &mut env);
        if let Some(var) = flavor.config_var {
            env.push((var.into(), config_file.to_string_lossy().into_owned()));
        }
        // What the launcher would have told the program: where its parsers are.
        if let Some(dir) = native
            .as_ref()
            .and_then(|p| Some(p.parent()?.join("tree-sitter")))
            .filter(|d| d.is_dir())
        {
            env.push((
                "KILO_TREE_SITTER_WASM_DIR".into(),
                dir.to_string_lossy().into_owned(),
            ));
        }
        env.extend(
            flavor
                .env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        Ok(setup.prepared(turn, argv, env, None))
    }

    fn read(&self, stdout: &str, _stderr: &str) -> Reading {
        let mut reading = Reading::default();
        let (mut last_text, mut error) = (None, None);
        for Line::<Event> { session_id, event } in cli::typed_events(stdout) {
            if session_id.is_some() {
                reading.session = session_id;
            }
            match event {
                Event::Text { part } if part.text.is_some() => last_text = part.text,
                Event::Error { error: failed } => {
                    let failed = failed.unwrap_or_default();
                    error = Some(
                        failed
                            .data
                            .and_then(|d| d.message)
                            .or(failed.name)
                            .unwrap_or_else(|| "the CLI reported an error".into()),
                    );
                }
                _ => {}
            }
        }
        cli::conclude(
            reading,
            self.flavor.engine.as_str(),
            last_text.as_deref(),
            error,
        )
    }

    fn transcriber(&self) -> Box<dyn Transcriber> {
        Box::new(transcribe)
    }
}

/// The events read here; a line of any other type (`step_start`, `step_finish`) is skipped.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Event {
    Text {
        part: Part,
    },
    Reasoning {
        part: Part,
    },
    ToolUse {
        part: Part,
    },
    Error {
        error: Option<ErrorBody>,
    },
    #[serde(other)]
    Other,
}

/// A message part: text, or a tool use with its state.
#[derive(Debug, Deserialize)]
struct Part {
    text: Option<String>,
    #[serde(default)]
    tool: String,
    #[serde(rename = "callID")]
    call_id: Option<String>,
    #[serde(default)]
    state: ToolState,
}

#[derive(Debug, Default, Deserialize)]
struct ToolState {
    #[serde(default)]
    input: Value,
    output: Option<Value>,
    error: Option<Value>,
    status: Option<String>,
    #[serde(default)]
    metadata: ToolMetadata,
}

#[derive(Debug, Default, Deserialize)]
struct ToolMetadata {
    exit: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
struct ErrorBody {
    name: Option<String>,
    data: Option<ErrorData>,
}

#[derive(Debug, Default, Deserialize)]
struct ErrorData {
    message: Option<String>,
}

/// What one line of `run --format json` says: text, reasoning, and each finished tool use (a
/// `bash` one as a command with its output).
fn transcribe(line: &str, said: &mut Vec<Said>) {
    let Some(Line::<Event> { event, .. }) = cli::typed(line) else {
        return;
    };
    match event {
        Event::Text { part } => said.push(Said::Text {
            text: part.text.unwrap_or_default(),
            continues: false,
        }),
        Event::Reasoning { part } => said.push(Said::Reasoning(part.text.unwrap_or_default())),
        Event::ToolUse { part } => {
            let Part {
                tool,
                call_id,
                state,
                ..
            } = part;
            let output = cli::text_of(state.output.or(state.error).as_ref());
            let command = state.input.get("command").and_then(Value::as_str);
            match command.filter(|_| tool == "bash") {
                Some(command) => said.push(Said::Command {
                    command: command.to_owned(),
                    output,
                    exit_code: state.metadata.exit,
                }),
                None => {
                    said.push(Said::ToolCall {
                        id: call_id.clone(),
                        name: tool,
                        arguments: state.input,
                    });
                    said.push(Said::ToolResult {
                        id: call_id,
                        output,
                        is_error: state.status.as_deref() == Some("error"),
                    });
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn opencode() -> Opencode {
        Opencode {
            config: Arc::new(EngineConfig::for_tests()),
            flavor: &OPENCODE,
        }
    }

    #[test]
    fn reads_parts_tool_uses_and_errors() {
        let out = r#"{"type":"step_start","sessionID":"ses_1","part":{"type":"step-start"}}
{"type":"reasoning","sessionID":"ses_1","part":{"type":"reasoning","text":"plan"}}
{"type":"tool_use","sessionID":"ses_1","part":{"type":"tool","tool":"bash","callID":"c1","state":{"status":"completed","input":{"command":"ls"},"output":"a.txt\n","metadata":{"exit":0}}}}
{"type":"tool_use","sessionID":"ses_1","part":{"type":"tool","tool":"read","callID":"c2","state":{"status":"error","input":{"filePath":"x"},"error":"no such file"}}}
{"type":"text","sessionID":"ses_1","part":{"type":"text","text":"Done: {\"ok\": true}"}}
{"type":"step_finish","sessionID":"ses_1","part":{"type":"step-finish"}}"#;
        let reading = opencode().read(out, "");
        assert_eq!(reading.session.as_deref(), Some("ses_1"));
        assert_eq!(reading.answer.unwrap().0["ok"], true);
        let mut said = Vec::new();
        out.lines().for_each(|line| transcribe(line, &mut said));
        assert_eq!(
            said[..4],
            [
                Said::Reasoning("plan".into()),
                Said::Command {
                    command: "ls".into(),
                    output: "a.txt\n".into(),
                    exit_code: Some(0),
                },
                Said::ToolCall {
                    id: Some("c2".into()),
                    name: "read".into(),
                    arguments: json!({"filePath": "x"}),
                },
                Said::ToolResult {
                    id: Some("c2".into()),
                    output: "no such file".into(),
                    is_error: true,
                },
            ]
        );
        let out = r#"{"type":"error","sessionID":"ses_2","error":{"name":"APIError","data":{"message":"Unauthorized: 401"}}}"#;
        let failure = opencode().read(out, "").failure.unwrap();
        assert!(failure.message.contains("Unauthorized: 401"), "{failure:?}");
        let out = r#"{"type":"error","sessionID":"ses_2","error":{"name":"UnknownError"}}"#;
        assert!(
            opencode()
                .read(out, "")
                .failure
                .unwrap()
                .message
                .contains("UnknownError")
        );
    }
}
