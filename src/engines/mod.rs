//! Engines: the ways a skill can run. Adapters behind one trait join this module as they land.

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
