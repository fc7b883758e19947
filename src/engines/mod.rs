//! Engines: the ways a skill can run, each an adapter behind [`EngineAdapter`].
//!
//! An adapter only describes a turn (the process to start) and reads its answer; starting,
//! supervising, timing out and validating are the job core's, the same for every engine.

pub mod script;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::output::RepairLevel;
use crate::process::ProcessSpec;
use crate::skill::{ExecutionMode, SkillManifest};

/// Everything an adapter needs to describe one turn of a run.
#[derive(Debug)]
pub struct Turn<'a> {
    pub skill: &'a SkillManifest,
    pub request_id: &'a str,
    pub run_dir: &'a Path,
    /// Inline inputs plus file inputs as absolute paths.
    pub input: &'a Value,
    pub parameter: &'a Value,
    pub execution_mode: ExecutionMode,
    /// 1 for the first turn; grows with each resumed turn.
    pub number: u32,
    pub reply: Option<&'a Value>,
    pub history: &'a [Value],
}

/// One way of running a skill.
pub trait EngineAdapter: Send + Sync + std::fmt::Debug {
    fn engine(&self) -> Engine;

    /// The process for `turn`, with its logs under `<run_dir>/logs/`. An error fails the run
    /// with its message.
    fn command(&self, turn: &Turn<'_>) -> anyhow::Result<ProcessSpec>;

    /// The JSON answer in the turn's stdout, if any.
    fn answer(&self, stdout: &str) -> Option<(Map<String, Value>, RepairLevel)>;
}

/// The adapters this server has.
#[derive(Debug, Clone)]
pub struct Engines {
    adapters: BTreeMap<Engine, Arc<dyn EngineAdapter>>,
}

impl Engines {
    /// Every adapter built so far.
    pub fn available() -> Self {
        let adapters: [Arc<dyn EngineAdapter>; 1] = [Arc::new(script::ScriptEngine)];
        Self {
            adapters: adapters.into_iter().map(|a| (a.engine(), a)).collect(),
        }
    }

    pub fn get(&self, engine: Engine) -> Option<&Arc<dyn EngineAdapter>> {
        self.adapters.get(&engine)
    }
}

/// An engine a skill may declare in `runner.json`.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    Codex,
    Gemini,
    Iflow,
    Claude,
    Opencode,
    Qwen,
    /// Runs the skill's own `entrypoint.script`; no model involved.
    Script,
}

impl Engine {
    /// Every engine, in the order they are listed to clients.
    pub const ALL: [Engine; 7] = [
        Engine::Codex,
        Engine::Gemini,
        Engine::Iflow,
        Engine::Claude,
        Engine::Opencode,
        Engine::Qwen,
        Engine::Script,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Engine::Codex => "codex",
            Engine::Gemini => "gemini",
            Engine::Iflow => "iflow",
            Engine::Claude => "claude",
            Engine::Opencode => "opencode",
            Engine::Qwen => "qwen",
            Engine::Script => "script",
        }
    }

    pub fn parse(name: &str) -> Option<Engine> {
        Engine::ALL.into_iter().find(|e| e.as_str() == name)
    }
}

impl std::fmt::Display for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
