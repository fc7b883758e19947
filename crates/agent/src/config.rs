//! The agent chat's model providers as the operator configures them: the presets the service
//! knows (their variables, defaults and wire formats) and the endpoints set for them. The chat
//! itself (`agent::provider`) speaks to them; the configuration needs the table to read and
//! check the variables at start-up.

use std::collections::BTreeMap;
use std::time::Duration;

use skill_runner_engines::config::Endpoint;

/// The model providers of the agent chat (`POST /v1/agent/chat`).
#[derive(Debug, Clone)]
pub struct ChatConfig {
    /// `SKILL_RUNNER_AGENT_PROVIDER`: the provider a chat uses unless it names another.
    pub provider: String,
    /// `SKILL_RUNNER_AGENT_<PROVIDER>_BASE_URL`, `_API_KEY`, `_MODEL`, by provider name; a
    /// provider is configured when its key or its base URL is set.
    pub endpoints: BTreeMap<String, ModelEndpoint>,
    /// `SKILL_RUNNER_AGENT_MAX_RETRIES`: retries of a model request after a transient failure.
    pub max_retries: u32,
    /// `SKILL_RUNNER_AGENT_TIMEOUT_SECONDS`: the longest wait to connect or for more of an answer.
    pub timeout: Duration,
}

/// A model endpoint and the model to ask there.
#[derive(Debug, Clone)]
pub struct ModelEndpoint {
    pub endpoint: Endpoint,
    pub model: Option<String>,
}

/// The wire format a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    ChatCompletions,
    Responses,
    Anthropic,
}

/// A provider the service knows: its name, the infix of its variables
/// (`SKILL_RUNNER_AGENT_<VAR>_BASE_URL`, `_API_KEY`, `_MODEL`) and its defaults.
#[derive(Debug)]
pub struct Preset {
    pub name: &'static str,
    pub var: &'static str,
    pub wire: Wire,
    pub base_url: &'static str,
    pub model: &'static str,
}

/// The providers, in the order they are listed.
pub const PRESETS: [Preset; 4] = [
    Preset {
        name: "openai",
        var: "OPENAI",
        wire: Wire::ChatCompletions,
        base_url: "https://api.openai.com/v1",
        model: "gpt-4o-mini",
    },
    Preset {
        name: "dashscope",
        var: "DASHSCOPE",
        wire: Wire::ChatCompletions,
        base_url: "https://dashscope.aliyuncs.com/compatible-mode/v1",
        model: "qwen-plus",
    },
    Preset {
        name: "openai-responses",
        var: "OPENAI_RESPONSES",
        wire: Wire::Responses,
        base_url: "https://api.openai.com/v1",
        model: "gpt-4o-mini",
    },
    Preset {
        name: "anthropic",
        var: "ANTHROPIC",
        wire: Wire::Anthropic,
        base_url: "https://api.anthropic.com/v1",
        model: "claude-sonnet-4-5",
    },
];

/// The preset called `name`; `qwen` (the name the user's documents use) is `dashscope`.
pub fn preset(name: &str) -> Option<&'static Preset> {
    let name = if name == "qwen" { "dashscope" } else { name };
    PRESETS.iter().find(|p| p.name == name)
}
