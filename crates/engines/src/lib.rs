//! Engines: the ways a skill can run, each an adapter behind [`EngineAdapter`].
//!
//! An adapter only describes a turn (the process to start) and reads its answer; starting,
//! supervising, timing out and validating are the job core's, the same for every engine.

pub mod answer;
pub mod claude;
pub mod cli;
pub mod codebuddy;
pub mod codex;
pub mod config;
pub mod gemini;
pub mod iflow;
pub mod login;
pub mod mcp;
pub mod models;
pub mod opencode;
pub mod qwen;
pub mod script;
pub mod stream_json;
pub mod upgrades;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

pub use skill_runner_types::engine::Engine;

use skill_runner_process as process;
use skill_runner_process::{egress, run_folder};
use skill_runner_skill as skill;
use skill_runner_store as store;
use skill_runner_types::clock;

use crate::answer::RepairLevel;
use crate::config::EngineConfig;
use crate::process::ProcessSpec;
use crate::run_folder::RunFolder;
use crate::skill::{ExecutionMode, SkillManifest};
use crate::store::Store;

/// Everything an adapter needs to describe one turn of a run.
#[derive(Debug, Clone)]
pub struct Turn<'a> {
    pub skill: &'a SkillManifest,
    /// The other skills the request named (`skills`), delivered beside the main one for the
    /// agent to choose from.
    pub extra_skills: &'a [std::sync::Arc<SkillManifest>],
    /// The caller's `runtime_options.output_schema` (a standard skill's answer as JSON).
    pub output_schema: Option<&'a Value>,
    /// The request asked for a note on the skill (`collect_skill_run_feedback`): the first
    /// prompt tells the agent to write one at [`RunFolder::feedback_note`] when it succeeds.
    pub feedback: bool,
    /// A repair round of the turn: the prompt that tells the agent, in the session it
    /// answered in, what was wrong with its answer.
    pub repair: Option<&'a str>,
    pub request_id: &'a str,
    /// The run's folders; the turn works in its workspace.
    pub folder: &'a RunFolder,
    /// Inline inputs plus file inputs as absolute paths.
    pub input: &'a Value,
    pub parameter: &'a Value,
    pub execution_mode: ExecutionMode,
    /// 1 for the first turn; grows with each resumed turn.
    pub number: u32,
    pub reply: Option<&'a Value>,
    pub history: &'a [Value],
    /// The engine session an earlier turn started, which this turn resumes.
    pub session: Option<&'a str>,
    /// The model asked for at create, as the engine spells it.
    pub model: Option<&'a str>,
    /// The reasoning effort asked of the model.
    pub effort: Option<&'a str>,
    /// The operator's provider the job named: its endpoint and key replace the engine's own.
    pub provider: Option<&'a config::Endpoint>,
    /// The client's `preamble_prompt`, told on the first turn.
    pub preamble: Option<&'a str>,
    /// The MCP servers the turn gets ([`mcp::resolve`]).
    pub mcp: &'a [mcp::TurnServer],
    /// Where a model door keeps what the turn's model calls came to (a fresh record when
    /// `None`, which nobody reads).
    pub model_calls: Option<&'a std::sync::Arc<crate::process::egress::ModelCalls>>,
}

impl Turn<'_> {
    /// Where the turn works: its working directory, `artifacts/` and `uploads/` are there.
    pub fn workspace(&self) -> std::path::PathBuf {
        self.folder.workspace()
    }

    /// Whether the turn continues the engine session of an earlier one (a reply, or a repair
    /// round) rather than starting one.
    pub fn resumes(&self) -> bool {
        self.number > 1 || self.repair.is_some()
    }

    /// The skills the turn gets: the main one, then the others named.
    pub fn skills(&self) -> impl Iterator<Item = &SkillManifest> {
        std::iter::once(self.skill).chain(self.extra_skills.iter().map(|s| s.as_ref()))
    }

    /// Whether the turn's answer is the agent's final message as text (a standard skill
    /// asked for no `output_schema`), not a JSON object.
    pub fn answers_in_text(&self) -> bool {
        self.skill.format == crate::skill::SkillFormat::AgentSkill && self.output_schema.is_none()
    }
}

/// A turn ready to start: its process, its session when the engine lets the runner pick it up
/// front, the login lent to it (held until the turn is over) and its prompt.
#[derive(Debug)]
pub struct Prepared {
    pub spec: ProcessSpec,
    pub session: Option<String>,
    pub login: cli::Login,
    /// What an agent CLI is told this turn; kept in the run's `logs/prompt.txt`.
    pub prompt: Option<String>,
}

/// What a turn's output says.
#[derive(Debug, Default)]
pub struct Reading {
    /// The JSON answer, if any.
    pub answer: Option<(Map<String, Value>, RepairLevel)>,
    /// The agent's final message, as it said it.
    pub text: Option<String>,
    /// The session the engine reported, for the next turn to resume.
    pub session: Option<String>,
    /// Why the engine failed, when it said so.
    pub failure: Option<Failure>,
}

/// An agent CLI: its program name, npm package, and the files a login leaves in its home.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cli {
    pub program: &'static str,
    pub package: &'static str,
    /// The version this build is tested with, which an upgrade installs unless
    /// `SKILL_RUNNER_<ENGINE>_NPM_PACKAGE` names another; `None` when the package is not on the
    /// public npm registry (only an operator's spec installs it).
    pub pinned: Option<&'static str>,
    /// Paths relative to a home (`~`), e.g. `.codex/auth.json`.
    pub credentials: &'static [&'static str],
    /// The `host:port`s the CLI talks to by default (its provider's model API and login);
    /// a configured `SKILL_RUNNER_<ENGINE>_BASE_URL` replaces them with that one endpoint.
    pub hosts: &'static [&'static str],
    /// The model API a key goes to when no base URL is configured, where the CLI takes another
    /// base URL by a variable (so the service can hold the key behind a model door); `None`:
    /// without a configured base URL the key is lent.
    pub default_base: Option<&'static str>,
}

impl Cli {
    /// The npm spec an upgrade installs: the operator's, else the pinned version; `None` when
    /// neither exists.
    pub fn install_spec(&self, config: &EngineConfig, engine: Engine) -> Option<String> {
        config
            .packages
            .get(engine.as_str())
            .cloned()
            .or_else(|| self.pinned.map(|v| format!("{}@{v}", self.package)))
    }
}

/// Every agent CLI.
pub const AGENT_CLIS: [Cli; 8] = [
    codex::CLI,
    gemini::CLI,
    iflow::CLI,
    claude::CLI,
    opencode::OPENCODE.cli,
    qwen::CLI,
    opencode::KILO.cli,
    codebuddy::CLI,
];

/// A failure the engine reported, with a code when it is one clients act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub code: Option<&'static str>,
    pub message: String,
}

/// Something a turn's output says, in conversation terms (the run's conversation is built from
/// these, see the job core's `conversation`).
#[derive(Debug, Clone, PartialEq)]
pub enum Said {
    /// Assistant text. `continues`: a streamed piece of the message being said, not a new one.
    Text {
        text: String,
        continues: bool,
    },
    Reasoning(String),
    /// A tool the assistant called, with its arguments.
    ToolCall {
        id: Option<String>,
        name: String,
        arguments: Value,
    },
    /// What a tool call returned.
    ToolResult {
        id: Option<String>,
        output: String,
        is_error: bool,
    },
    /// A shell command the assistant ran, with its output.
    Command {
        command: String,
        output: String,
        exit_code: Option<i64>,
    },
}

/// Reads a turn's stdout one line at a time (without its line end) into what it says. Most
/// engines need no state between lines; a plain `fn` is one.
pub trait Transcriber: Send {
    fn line(&mut self, line: &str, said: &mut Vec<Said>);
}

impl<F: FnMut(&str, &mut Vec<Said>) + Send> Transcriber for F {
    fn line(&mut self, line: &str, said: &mut Vec<Said>) {
        self(line, said);
    }
}

/// One way of running a skill.
pub trait EngineAdapter: Send + Sync + std::fmt::Debug {
    fn engine(&self) -> Engine;

    /// The CLI this engine drives, if it drives one.
    fn cli(&self) -> Option<Cli> {
        None
    }

    /// Prepares the run's workspace for `turn` and describes its process
    /// ([`RunFolder::process`]). An error fails the run with its message.
    fn prepare(&self, turn: &Turn<'_>) -> anyhow::Result<Prepared>;

    /// Reads the turn's output (the end of its stdout and stderr).
    fn read(&self, stdout: &str, stderr: &str) -> Reading;

    /// A reader of this engine's stdout for the run's conversation, fresh for each turn.
    fn transcriber(&self) -> Box<dyn Transcriber>;
}

/// The adapters this server has, with the model snapshots and the CLI versions found.
#[derive(Debug, Clone)]
pub struct Engines {
    adapters: BTreeMap<Engine, Arc<dyn EngineAdapter>>,
    config: Arc<EngineConfig>,
    /// Bundled snapshots plus those operators added (read from the store at start-up).
    snapshots: Arc<RwLock<Vec<models::Snapshot>>>,
    /// `--version` of each CLI, refreshed after [`VERSION_TTL`].
    versions: Arc<Mutex<BTreeMap<Engine, Detected>>>,
}

/// A CLI version as detected at an instant (`None`: not installed or not saying).
type Detected = (Instant, Option<String>);

/// How long a detected CLI version is trusted (an upgrade may change it).
const VERSION_TTL: Duration = Duration::from_secs(60);

impl Engines {
    /// Every adapter built so far.
    pub fn new(agent_config: &EngineConfig) -> Self {
        let config = Arc::new(agent_config.clone());
        let adapters: [Arc<dyn EngineAdapter>; 9] = [
            Arc::new(script::ScriptEngine),
            Arc::new(codex::Codex {
                config: config.clone(),
            }),
            Arc::new(gemini::Gemini {
                config: config.clone(),
            }),
            Arc::new(iflow::Iflow {
                config: config.clone(),
            }),
            Arc::new(claude::Claude {
                config: config.clone(),
            }),
            Arc::new(codebuddy::CodeBuddy {
                config: config.clone(),
            }),
            Arc::new(opencode::Opencode {
                config: config.clone(),
                flavor: &opencode::OPENCODE,
            }),
            Arc::new(opencode::Opencode {
                config: config.clone(),
                flavor: &opencode::KILO,
            }),
            Arc::new(qwen::Qwen { config }),
        ];
        Self {
            adapters: adapters.into_iter().map(|a| (a.engine(), a)).collect(),
            config: Arc::new(agent_config.clone()),
            snapshots: Arc::new(RwLock::new(models::bundled())),
            versions: Arc::default(),
        }
    }

    pub fn get(&self, engine: Engine) -> Option<&Arc<dyn EngineAdapter>> {
        self.adapters.get(&engine)
    }

    /// Whether `engine` takes new runs: any but a legacy one the operator did not allow.
    pub fn active(&self, engine: Engine) -> bool {
        !engine.is_legacy() || self.config.legacy_allowed.contains(&engine)
    }

    /// Where `engine`'s CLI is, or what is missing and how to install it; `Ok(None)` for an
    /// engine without a CLI.
    pub fn locate(&self, engine: Engine) -> Result<Option<PathBuf>, String> {
        let Some(cli) = self.adapters.get(&engine).and_then(|a| a.cli()) else {
            return Ok(None);
        };
        cli::find_cli(&self.config, cli.program)
            .map(Some)
            .ok_or_else(|| cli::missing_cli(engine, cli.program, cli.package, &self.config))
    }

    /// The version of `engine`'s CLI, if it is installed and says.
    pub async fn version(&self, engine: Engine) -> Option<String> {
        if let Some((at, version)) = self.versions.lock().expect("versions lock").get(&engine)
            && at.elapsed() < VERSION_TTL
        {
            return version.clone();
        }
        let version = match self.locate(engine) {
            Ok(Some(program)) => cli::cli_version(&program).await,
            _ => None,
        };
        self.versions
            .lock()
            .expect("versions lock")
            .insert(engine, (Instant::now(), version.clone()));
        version
    }

    /// The [`cli::AuthStatus`] of `engine`'s CLI; `None` for an engine without one.
    pub fn auth_status(&self, engine: Engine) -> Option<cli::AuthStatus> {
        let cli = self.adapters.get(&engine)?.cli()?;
        Some(cli::auth_status(&self.config, engine, cli))
    }

    /// Whether the service holds `engine`'s key at the egress, so its turns see a placeholder
    /// (else its key or login is lent to each turn).
    pub fn holds_key(&self, engine: Engine) -> bool {
        self.adapters
            .get(&engine)
            .and_then(|a| a.cli())
            .is_some_and(|cli| cli::holds_key(&self.config, engine, cli))
    }

    /// Whether `engine`'s CLI is installed but not logged in (no API key, not every login
    /// file): its runs wait for a login.
    pub fn needs_login(&self, engine: Engine) -> bool {
        self.auth_status(engine)
            .is_some_and(|s| s.effective_cli_path.is_some() && !s.auth_ready)
    }

    /// The CLI of `engine`, if it drives one.
    pub fn cli(&self, engine: Engine) -> Option<Cli> {
        self.adapters.get(&engine)?.cli()
    }

    /// The agent configuration the adapters share.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Forgets the detected CLI versions (after an upgrade changed them).
    pub fn forget_versions(&self) {
        self.versions.lock().expect("versions lock").clear();
    }

    /// The model list that applies to `engine`'s CLI, if the engine has one.
    pub async fn models(&self, engine: Engine) -> Option<models::ModelList> {
        let detected = self.version(engine).await;
        let snapshots = self.snapshots.read().expect("snapshots lock");
        models::resolve(&snapshots, engine.as_str(), detected.as_deref())
    }

    /// Every snapshot of `engine` and the one that applies, if the engine has any.
    pub async fn manifest(&self, engine: Engine) -> Option<models::ManifestView> {
        let detected = self.version(engine).await;
        let snapshots = self.snapshots.read().expect("snapshots lock");
        models::manifest(&snapshots, engine.as_str(), detected.as_deref())
    }

    /// Adds the snapshots operators added earlier.
    pub async fn load_added_snapshots(&self, store: &Store) -> anyhow::Result<()> {
        let mut added = Vec::new();
        for row in store.model_snapshots().await? {
            added.push(models::Snapshot {
                models: serde_json::from_str(&row.models)?,
                engine: row.engine,
                cli_version: row.cli_version,
                added_at: Some(row.created_at),
            });
        }
        self.snapshots
            .write()
            .expect("snapshots lock")
            .extend(added);
        Ok(())
    }

    /// Adds a snapshot of `engine` for the CLI version installed now: refused when that
    /// version is unknown or already has a snapshot (bundled or added).
    pub async fn add_snapshot(
        &self,
        store: &Store,
        engine: Engine,
        models: Vec<models::Model>,
    ) -> Result<models::ManifestView, SnapshotRefused> {
        let models = models::check_new_models(models).map_err(SnapshotRefused::Invalid)?;
        let Some(version) = self.version(engine).await else {
            return Err(SnapshotRefused::Conflict(format!(
                "The version of the {engine} CLI is not known (is it installed?): a snapshot is \
                 recorded for the detected CLI version"
            )));
        };
        let exists = |snapshots: &[models::Snapshot]| {
            snapshots
                .iter()
                .any(|s| s.engine == engine.as_str() && s.cli_version == version)
        };
        let conflict = || {
            SnapshotRefused::Conflict(format!(
                "A model snapshot of {engine} for CLI version {version} exists already; \
                 snapshots are never overwritten"
            ))
        };
        if exists(&self.snapshots.read().expect("snapshots lock")) {
            return Err(conflict());
        }
        let text = serde_json::to_string(&models).expect("models serialise");
        let Some(added_at) = store
            .insert_model_snapshot(engine.as_str(), &version, &text)
            .await
            .map_err(SnapshotRefused::Store)?
        else {
            return Err(conflict());
        };
        {
            let mut snapshots = self.snapshots.write().expect("snapshots lock");
            if !exists(&snapshots) {
                snapshots.push(models::Snapshot {
                    engine: engine.as_str().to_owned(),
                    cli_version: version,
                    models,
                    added_at: Some(added_at),
                });
            }
        }
        Ok(self
            .manifest(engine)
            .await
            .expect("an engine with a snapshot has a manifest"))
    }
}

/// Why a model snapshot was not added.
#[derive(Debug)]
pub enum SnapshotRefused {
    /// The models are not acceptable (which field, why).
    Invalid(String),
    /// The version has a snapshot already, or is unknown.
    Conflict(String),
    Store(anyhow::Error),
}
