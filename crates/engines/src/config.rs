//! Where the agent CLIs live and which model endpoints they talk to; read from the
//! environment by the service's configuration.

use std::path::PathBuf;

use secrecy::SecretString;

/// Where the agent CLIs live and which model endpoints they talk to.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// `SKILL_RUNNER_AGENT_CACHE_DIR` (default `~/.local/share/skill-runner/agent-cache`).
    pub cache_dir: PathBuf,
    /// The managed npm prefix the CLIs are installed into (`SKILL_RUNNER_NPM_PREFIX`, default
    /// `<cache>/npm`); `<prefix>/bin` is searched before `PATH`.
    pub npm_prefix: PathBuf,
    /// Where users log the CLIs in (`SKILL_RUNNER_AGENT_HOME`, default `<cache>/agent-home`,
    /// e.g. `HOME=<agent home> codex login`): the login files found there are lent to each run's
    /// own home for the length of a turn.
    pub agent_home: PathBuf,
    /// Retries a CLI makes against a failing model before it gives up
    /// (`SKILL_RUNNER_ENGINE_MAX_RETRIES`).
    pub max_retries: u32,
    /// `SKILL_RUNNER_<ENGINE>_BASE_URL` / `_API_KEY`, by engine name.
    pub endpoints: std::collections::BTreeMap<String, Endpoint>,
    /// `SKILL_RUNNER_<ENGINE>_NPM_PACKAGE`: the npm spec an upgrade installs instead of
    /// `<package>@latest` (a pinned version, a tarball, a URL), by engine name.
    pub packages: std::collections::BTreeMap<String, String>,
    /// `SKILL_RUNNER_LEGACY_ENGINES`: the legacy engines ([`Engine::is_legacy`]) still given new
    /// runs.
    pub legacy_allowed: Vec<skill_runner_types::engine::Engine>,
    /// Where a turn's model door listens when the service holds the engines' keys (turns run
    /// in network namespaces of their own): a CLI is pointed there with a placeholder for its
    /// key. `None`: the key is lent to the turn.
    pub model_door: Option<std::net::SocketAddr>,
    /// The OpenAI authorization server accounts sign in at (`SKILL_RUNNER_OPENAI_AUTH_ISSUER`).
    pub openai_auth_issuer: String,
    /// The Anthropic one (`SKILL_RUNNER_ANTHROPIC_AUTH_ISSUER`).
    pub anthropic_auth_issuer: String,
    /// The service's address as the user's browser reaches it
    /// (`SKILL_RUNNER_OAUTH_CALLBACK_BASE_URL`): a sign-in comes back to its callback route.
    /// `None`: the user pastes the address the browser ended on.
    pub oauth_callback_base: Option<String>,
}

/// The issuer of OpenAI accounts, as the CLIs sign in.
pub const OPENAI_AUTH_ISSUER: &str = "https://auth.openai.com";
/// The issuer of Claude accounts, as the reference signs claude in.
pub const ANTHROPIC_AUTH_ISSUER: &str = "https://platform.claude.com";

impl EngineConfig {
    /// A configuration with no CLI, login or endpoint: what an adapter sees on a machine where
    /// nothing is installed (the unit tests of the engines and of the job core build adapters
    /// with it).
    pub fn for_tests() -> Self {
        Self {
            cache_dir: "/nonexistent".into(),
            npm_prefix: "/nonexistent/npm".into(),
            agent_home: "/nonexistent/agent-home".into(),
            max_retries: 0,
            endpoints: Default::default(),
            packages: Default::default(),
            legacy_allowed: Vec::new(),
            model_door: None,
            openai_auth_issuer: OPENAI_AUTH_ISSUER.into(),
            anthropic_auth_issuer: ANTHROPIC_AUTH_ISSUER.into(),
            oauth_callback_base: None,
        }
    }
}

/// A model endpoint an engine is pointed at: a gateway, a self-hosted model, or a fake. Its key
/// never reaches a log (`Debug` shows it redacted).
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub base_url: Option<String>,
    pub api_key: Option<SecretString>,
}
