//! The engines a skill may run on: the agent CLIs and the skill's own script.

use serde::{Deserialize, Serialize};

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
    strum::IntoStaticStr,
)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(
    feature = "sqlx",
    derive(sqlx::Type),
    sqlx(type_name = "TEXT", rename_all = "lowercase")
)]
#[strum(serialize_all = "lowercase")]
pub enum Engine {
    Codex,
    Gemini,
    Iflow,
    Claude,
    Opencode,
    Qwen,
    /// Kilo Code's CLI, an opencode fork.
    Kilo,
    /// Tencent's CodeBuddy Code CLI, a Claude Code derivative.
    Codebuddy,
    /// Runs the skill's own `entrypoint.script`; no model involved.
    Script,
}

impl Engine {
    /// Every engine, in the order they are listed to clients.
    pub const ALL: [Engine; 9] = [
        Engine::Codex,
        Engine::Gemini,
        Engine::Iflow,
        Engine::Claude,
        Engine::Opencode,
        Engine::Qwen,
        Engine::Kilo,
        Engine::Codebuddy,
        Engine::Script,
    ];

    pub fn as_str(self) -> &'static str {
        self.into()
    }

    pub fn parse(name: &str) -> Option<Engine> {
        Engine::ALL.into_iter().find(|e| e.as_str() == name)
    }

    /// Engines the reference marks legacy (v0.7): kept readable, left out of the active lists,
    /// and given no new run unless an operator still allows it (`SKILL_RUNNER_LEGACY_ENGINES`).
    pub fn is_legacy(self) -> bool {
        matches!(self, Engine::Gemini | Engine::Iflow)
    }
}

impl std::fmt::Display for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
