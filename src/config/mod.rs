//! Service configuration, read once from the environment at start-up.
//!
//! Every problem is reported as one line that names the variable and says what is wrong, so a
//! misconfigured deployment stops before it binds a port or touches the data directory.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
use skill_runner_types::engine::Engine;

pub use skill_runner_skill::archive::{DEFAULT_PACKAGE_MAX_BYTES, PackageLimits};

pub use skill_runner_engines::config::{Endpoint, EngineConfig};

use crate::egress::HostPattern;
use crate::process::ChildEnv;
use crate::process::sandbox::SandboxMode;

pub mod effective;
mod settings;

use effective::{Effective, Source};
pub use settings::{Refused, Settings};
pub use skill_runner_agent::config::{ChatConfig, ModelEndpoint};
pub use skill_runner_core::config::{DataDir, InvokeConfig, JobLimits};

/// A configuration problem: the variable that carries it and what is wrong with its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The variable (or, for a flag given on the command line, the flag).
    pub variable: String,
    pub problem: String,
}

impl ConfigError {
    pub fn new(variable: impl Into<String>, problem: impl Into<String>) -> Self {
        Self {
            variable: variable.into(),
            problem: problem.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.variable, self.problem)
    }
}

impl std::error::Error for ConfigError {}

/// How traces are sent to the collector (`OTEL_EXPORTER_OTLP_PROTOCOL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpProtocol {
    HttpProtobuf,
    HttpJson,
}

/// Where and how traces are exported; none unless a collector is named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceExport {
    /// The full URL traces are posted to (`…/v1/traces`).
    pub url: String,
    pub protocol: OtlpProtocol,
    /// `service.name` on every span (`OTEL_SERVICE_NAME`).
    pub service_name: String,
    /// Longest wait before finished spans are sent (`OTEL_BSP_SCHEDULE_DELAY`).
    pub delay: Duration,
}

/// Log output format (`LOG_FORMAT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// Everything the service needs to start.
#[derive(Debug, Clone)]
pub struct Config {
    pub bind: SocketAddr,
    pub data_dir: PathBuf,
    pub skills_dir: PathBuf,
    /// This node's name (`SKILL_RUNNER_NODE_ID`).
    pub node_id: String,
    /// Where the other nodes reach this one (`SKILL_RUNNER_NODE_URL`); `None`: derived from
    /// the listener ([`Config::node_url`]).
    pub node_url: Option<String>,
    /// `SKILL_RUNNER_ENGINE_LIMITS`: engines with a bound of their own on turns at once.
    pub engine_limits: Vec<(Engine, usize)>,
    /// `SKILL_RUNNER_TENANT_*`: the quotas of a tenant that sets none of its own.
    pub tenant_quotas: skill_runner_store::Quotas,
    /// `SKILL_RUNNER_STORAGE_URL`: shared storage for settled run folders, among nodes.
    pub storage_url: Option<String>,
    /// The storage provider's variables (`AWS_*`, `GOOGLE_*`, `AZURE_*`) as the service was
    /// started with them: its own environment no longer holds them (see `process::handover`).
    pub storage_env: Vec<(String, String)>,
    /// `SKILL_RUNNER_DATABASE_URL`: the PostgreSQL database (`postgres://…`) holding the
    /// store instead of the data dir's SQLite file. Read from the environment only: it may
    /// carry a password.
    pub database_url: Option<SecretString>,
    pub log_format: LogFormat,
    /// A `tracing` filter directive (`LOG_LEVEL`, or `RUST_LOG` when set).
    pub log_filter: String,
    /// OpenTelemetry trace export (`OTEL_EXPORTER_OTLP_ENDPOINT`, `…_TRACES_ENDPOINT`).
    pub traces: Option<TraceExport>,
    pub package_limits: PackageLimits,
    pub jobs: JobLimits,
    pub invoke: InvokeConfig,
    pub engines: EngineConfig,
    /// The agent chat's model providers.
    pub chat: ChatConfig,
    /// Where `SKILL.md` skills are indexed, strongest first (`SKILL_RUNNER_SKILL_DOC_ROOTS`).
    pub skill_doc_roots: Vec<PathBuf>,
    /// Basic Auth for the administrative routes (`UI_BASIC_AUTH_ENABLED`, `_USERNAME`,
    /// `_PASSWORD`); `None` when disabled.
    pub admin_auth: Option<BasicAuth>,
    /// Bearer tokens every route but `/v1/system/ping` requires (`SKILL_RUNNER_API_TOKENS`,
    /// `SKILL_RUNNER_API_TOKENS_FILE`); `None` when neither is set.
    pub api_tokens: Option<ApiTokens>,
    /// The service's own executable, started as the group reaper (`skill-runner reaper`) and
    /// as the forkserver that forks every turn leader (`skill-runner forkserver`); set by `main`.
    pub self_exe: Option<PathBuf>,
    /// `SKILL_RUNNER_SANDBOX`: whether turns are confined with Landlock.
    pub sandbox: SandboxMode,
    /// `SKILL_RUNNER_SANDBOX_READ_PATHS` (`:`-separated): more folders every confined process
    /// may read and execute, e.g. an interpreter manager's root (`~/.pyenv`).
    pub sandbox_read_paths: Vec<PathBuf>,
    /// `SKILL_RUNNER_NAMESPACES`: whether turns may get namespaces of their own.
    pub namespaces: bool,
    /// `SKILL_RUNNER_ALLOWED_HOSTS`: names the service answers to besides its address.
    pub allowed_hosts: Vec<String>,
    /// `SKILL_RUNNER_MAX_CONNECTIONS`, `SKILL_RUNNER_MAX_CONNECTIONS_PER_ADDRESS`,
    /// `SKILL_RUNNER_HEADER_TIMEOUT_SECONDS`, `SKILL_RUNNER_BODY_MIN_BYTES_PER_SECOND`,
    /// `SKILL_RUNNER_BODY_TIMEOUT_SECONDS`.
    pub connections: skill_runner_web::connections::ConnectionLimits,
    /// `SKILL_RUNNER_MAX_STREAMS_PER_RUN`, `_PER_ADDRESS`, `_PER_TENANT`.
    pub streams: skill_runner_web::stream_caps::StreamLimits,
    /// `SKILL_RUNNER_EGRESS_ALLOW`: which hosts a skill's `network.allow` may name.
    pub egress_allow: Vec<HostPattern>,
    /// `SKILL_RUNNER_WEBHOOK_ALLOW`: webhook targets allowed despite the address rules.
    pub webhook_allow: crate::webhooks::Allowed,
    /// `SKILL_RUNNER_EGRESS_CA_BUNDLE`: more roots the egress trusts upstream.
    pub egress_ca_bundle: Option<PathBuf>,
    /// `SKILL_RUNNER_RUN_*`: the caps on one turn's resources.
    pub run_limits: crate::process::limits::Limits,
    /// `SKILL_RUNNER_RUN_UIDS`: the uids turns run under; `None`: the service's.
    pub run_uids: Option<crate::process::run_uids::RunUids>,
    /// The environment child processes start from (the allow-list plus
    /// `SKILL_RUNNER_CHILD_ENV_PASSTHROUGH`).
    pub child_env: ChildEnv,
    /// The console's legacy data routes.
    pub legacy_ui: LegacyUi,
    /// Every setting as it is in effect, secrets masked (the console's Settings page).
    pub effective: Vec<Effective>,
}

/// The console's legacy data routes (`SKILL_RUNNER_UI_LEGACY_API_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LegacyUi {
    /// Announced in their `Sunset` header.
    pub sunset: chrono::NaiveDate,
    /// Answered 410 instead of served.
    pub gone: bool,
}

/// The one user and password the administrative routes accept; the password never reaches a
/// log (`Debug` shows it redacted).
#[derive(Debug, Clone)]
pub struct BasicAuth {
    pub username: String,
    password: SecretString,
}

impl BasicAuth {
    pub fn new(username: String, password: String) -> Self {
        Self {
            username,
            password: password.into(),
        }
    }

    /// Whether `username` and `password` are this pair; compared in constant time, so the
    /// answer's timing says nothing about how much matched.
    pub fn accepts(&self, username: &str, password: &str) -> bool {
        use subtle::ConstantTimeEq as _;
        let given = format!("{username}:{password}");
        let wanted = format!("{}:{}", self.username, self.password.expose_secret());
        given.as_bytes().ct_eq(wanted.as_bytes()).into()
    }
}

/// The bearer tokens the API accepts, kept only as SHA-256 digests.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiTokens(Vec<[u8; 32]>);

impl ApiTokens {
    /// Whether `token` is one of them. Every digest is compared, in constant time, so the
    /// answer's timing says nothing about which or how much matched.
    pub fn accepts(&self, token: &str) -> bool {
        use sha2::Digest as _;
        use subtle::ConstantTimeEq as _;
        let digest = sha2::Sha256::digest(token.as_bytes());
        let found = self.0.iter().fold(subtle::Choice::from(0), |found, known| {
            found | known.as_slice().ct_eq(digest.as_slice())
        });
        found.into()
    }

    /// One entry: `sha256:<64 hex digits>` (the digest of the token), or the token itself (at
    /// least 16 characters, no spaces). The error never repeats the entry.
    fn digest_of(entry: &str) -> Result<[u8; 32], String> {
        use sha2::Digest as _;
        if let Some(hex) = entry.strip_prefix("sha256:") {
            let bytes: Option<Vec<u8>> = (hex.len() == 64 && hex.is_ascii())
                .then(|| {
                    (0..32)
                        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok())
                        .collect()
                })
                .flatten();
            return bytes
                .and_then(|b| b.try_into().ok())
                .ok_or_else(|| "a 'sha256:' entry needs 64 hex digits after it".to_owned());
        }
        if entry.chars().count() < MIN_TOKEN_CHARS || entry.chars().any(char::is_whitespace) {
            return Err(format!(
                "a token must have at least {MIN_TOKEN_CHARS} characters and no spaces \
                 (or be given as sha256:<hex digest>)"
            ));
        }
        Ok(sha2::Sha256::digest(entry.as_bytes()).into())
    }
}

impl fmt::Debug for ApiTokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ApiTokens({} set)", self.0.len())
    }
}

/// Tokens shorter than this are refused: they could be guessed.
const MIN_TOKEN_CHARS: usize = 16;

/// The filter of `LOG_LEVEL`: the level for the service, with the libraries that would drown
/// it at `debug` and `trace` (every SQL statement, every HTTP frame) kept at `warn` and `info`.
fn level_filter(level: &str) -> String {
    match level {
        "debug" | "trace" => {
            format!("{level},sqlx=warn,hyper=info,hyper_util=info,h2=info,rustls=info,reqwest=info")
        }
        _ => level.to_owned(),
    }
}

/// Engines whose endpoint can be configured (`SKILL_RUNNER_<ENGINE>_BASE_URL`): the agents.
fn agent_engines() -> impl Iterator<Item = &'static str> {
    crate::engines::Engine::ALL
        .into_iter()
        .filter(|e| *e != crate::engines::Engine::Script)
        .map(crate::engines::Engine::as_str)
}

impl Config {
    /// The configuration given by `args` (the words after `serve`) over `vars` (the
    /// environment the service was started with); tests supply both without touching the
    /// process. Each setting is parsed by [`Settings`]; what has no flag (secrets, per-engine
    /// families, the child environment) is read from `vars` here.
    pub fn load(args: &[OsString], vars: &BTreeMap<String, String>) -> Result<Self, Refused> {
        Self::load_for("serve", args, vars)
    }

    /// [`Self::load`] for the subcommand `name` (`serve` or `mcp`), whose help it shows.
    pub fn load_for(
        name: &str,
        args: &[OsString],
        vars: &BTreeMap<String, String>,
    ) -> Result<Self, Refused> {
        let settings = Settings::parse(name, args, vars)?;
        Self::from_settings(settings, vars).map_err(Refused::Invalid)
    }

    fn from_settings(
        mut s: Settings,
        vars: &BTreeMap<String, String>,
    ) -> Result<Self, ConfigError> {
        let effective = std::mem::take(&mut s.effective);
        let (max_concurrent, max_concurrent_agents) =
            slots(s.max_concurrent, s.max_concurrent_agents)?;
        let traces = trace_export(&s);
        let get = |name: &str| vars.get(name).filter(|v| !v.trim().is_empty()).cloned();
        let seconds = Duration::from_secs;
        let cache_dir = s.agent_cache_dir.unwrap_or_else(|| {
            let home = vars.get("HOME").cloned().unwrap_or_else(|| "/root".into());
            PathBuf::from(home).join(".local/share/skill-runner/agent-cache")
        });
        let per_engine = |engine: &str, suffix: &str| {
            get(&format!(
                "SKILL_RUNNER_{}_{suffix}",
                engine.to_ascii_uppercase()
            ))
        };
        let engines = EngineConfig {
            npm_prefix: s.npm_prefix.unwrap_or_else(|| cache_dir.join("npm")),
            agent_home: s.agent_home.unwrap_or_else(|| cache_dir.join("agent-home")),
            cache_dir,
            max_retries: s.engine_max_retries,
            endpoints: agent_engines()
                .filter_map(|engine| {
                    let endpoint = Endpoint {
                        base_url: per_engine(engine, "BASE_URL"),
                        api_key: per_engine(engine, "API_KEY").map(SecretString::from),
                    };
                    (endpoint.base_url.is_some() || endpoint.api_key.is_some())
                        .then(|| (engine.to_owned(), endpoint))
                })
                .collect(),
            packages: agent_engines()
                .filter_map(|engine| Some((engine.to_owned(), per_engine(engine, "NPM_PACKAGE")?)))
                .collect(),
            legacy_allowed: s.legacy_engines.unwrap_or_default(),
            model_door: None,
            openai_auth_issuer: s.openai_auth_issuer,
            anthropic_auth_issuer: s.anthropic_auth_issuer,
            oauth_callback_base: s.oauth_callback_base_url,
        };
        let chat = ChatConfig {
            provider: s.agent_provider,
            endpoints: skill_runner_agent::config::PRESETS
                .iter()
                .filter_map(|preset| {
                    let var =
                        |suffix: &str| get(&format!("SKILL_RUNNER_AGENT_{}_{suffix}", preset.var));
                    let endpoint = Endpoint {
                        base_url: var("BASE_URL"),
                        api_key: var("API_KEY").map(SecretString::from),
                    };
                    (endpoint.base_url.is_some() || endpoint.api_key.is_some()).then(|| {
                        let model = var("MODEL");
                        (preset.name.to_owned(), ModelEndpoint { endpoint, model })
                    })
                })
                .collect(),
            max_retries: s.agent_max_retries,
            timeout: seconds(s.agent_timeout_seconds),
        };
        let skill_doc_roots = s.skill_doc_roots.unwrap_or_else(|| {
            let home = PathBuf::from(get("HOME").unwrap_or_else(|| "/root".into()));
            let sdk_home = get("OPENAGENTIC_SDK_HOME")
                .map_or_else(|| home.join(".openagentic-sdk"), PathBuf::from);
            let agents_home =
                get("OPENAGENTIC_AGENTS_HOME").map_or_else(|| home.join(".agents"), PathBuf::from);
            vec![
                PathBuf::from(".claude/skills"),
                PathBuf::from(".claude/skill"),
                PathBuf::from(".agents/skills"),
                s.skills_dir.clone(),
                PathBuf::from("skill"),
                sdk_home.join("skills"),
                sdk_home.join("skill"),
                agents_home.join("skills"),
                agents_home.join("skill"),
            ]
        });
        let admin_auth = if s.ui_basic_auth_enabled {
            let required = |variable: &str, value: Option<String>| {
                value.ok_or_else(|| {
                    ConfigError::new(variable, "must be set when UI_BASIC_AUTH_ENABLED is true")
                })
            };
            Some(BasicAuth::new(
                required("UI_BASIC_AUTH_USERNAME", s.ui_basic_auth_username)?,
                required("UI_BASIC_AUTH_PASSWORD", get("UI_BASIC_AUTH_PASSWORD"))?,
            ))
        } else {
            None
        };
        let mut config = Self {
            bind: s.bind.unwrap_or_else(|| {
                SocketAddr::new(s.host.unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST)), s.port)
            }),
            data_dir: s.data_dir,
            skills_dir: s.skills_dir,
            node_id: s.node_id.unwrap_or_else(default_node_id),
            node_url: s.node_url.map(|u| u.trim_end_matches('/').to_owned()),
            storage_url: s.storage_url,
            storage_env: vars
                .iter()
                .filter(|(name, _)| {
                    ["AWS_", "GOOGLE_", "AZURE_"]
                        .iter()
                        .any(|provider| name.starts_with(provider))
                })
                .map(|(name, value)| (name.clone(), value.clone()))
                .collect(),
            engine_limits: s.engine_limits.map(|l| l.0).unwrap_or_default(),
            tenant_quotas: skill_runner_store::Quotas {
                max_running: s.tenant_max_running.map(saturate),
                max_queued: s.tenant_max_queued.map(saturate),
                runs_per_minute: s.tenant_runs_per_minute.map(saturate),
                upload_bytes: s.tenant_upload_bytes,
            },
            database_url: database_url(get("SKILL_RUNNER_DATABASE_URL"))?,
            traces,
            log_format: s.log_format,
            log_filter: s.log_filter.unwrap_or_else(|| level_filter(&s.log_level)),
            package_limits: PackageLimits {
                max_compressed_bytes: s.package_max_bytes,
                max_uncompressed_bytes: s.package_max_uncompressed_bytes,
                max_entries: s.package_max_entries as usize,
                max_compression_ratio: s.package_max_compression_ratio,
            },
            jobs: JobLimits {
                max_queue_size: s.max_queue_size as usize,
                max_concurrent,
                max_concurrent_agents,
                hard_timeout: seconds(s.engine_hard_timeout_seconds),
                kill_grace: seconds(s.kill_grace_seconds),
                temp_package_max_bytes: s.temp_skill_package_max_bytes,
                run_skills_max_bytes: s.run_skills_max_bytes,
                retention: seconds(s.run_retention_seconds),
                failed_retention: seconds(s.failed_run_retention_seconds),
                cleanup_interval: seconds(s.cleanup_interval_seconds),
                reconcile_interval: seconds(s.reconcile_interval_seconds),
                auth_wait: seconds(s.auth_wait_seconds),
                node_timeout: seconds(s.node_timeout_seconds),
                sse_heartbeat: seconds(s.sse_heartbeat_seconds),
                max_log_bytes: s.run_max_log_mb.saturating_mul(1 << 20),
                max_served_bytes: s.serve_max_mb.saturating_mul(1 << 20),
                disk_reserve_bytes: s.disk_reserve_mb.saturating_mul(1 << 20),
            },
            invoke: InvokeConfig {
                allowed_root: s.openskill_allowed_root,
                cli_dir: s.openskill_cli_dir,
                manifest_dir: s.openskill_manifest_dir,
                timeout: Duration::from_millis(s.openskill_timeout_ms),
                debug: s.openskill_debug,
                max_processes: s.openskill_max_processes as usize,
            },
            engines,
            chat,
            skill_doc_roots,
            admin_auth,
            api_tokens: parse_api_tokens(
                get("SKILL_RUNNER_API_TOKENS"),
                s.api_tokens_file.as_deref(),
            )?,
            self_exe: None,
            sandbox: s.sandbox,
            sandbox_read_paths: s.sandbox_read_paths.unwrap_or_default(),
            egress_allow: s.egress_allow.unwrap_or_default(),
            webhook_allow: s.webhook_allow.unwrap_or_default(),
            egress_ca_bundle: s.egress_ca_bundle,
            allowed_hosts: s.allowed_hosts.unwrap_or_default(),
            connections: skill_runner_web::connections::ConnectionLimits {
                max: usize::try_from(s.max_connections).unwrap_or(usize::MAX),
                max_per_address: usize::try_from(s.max_connections_per_address)
                    .unwrap_or(usize::MAX),
                header_read_timeout: seconds(s.header_timeout_seconds),
                body: skill_runner_web::connections::BodyLimits {
                    min_rate: s.body_min_bytes_per_second,
                    timeout: seconds(s.body_timeout_seconds),
                    ..Default::default()
                },
            },
            streams: skill_runner_web::stream_caps::StreamLimits {
                per_run: usize::try_from(s.max_streams_per_run).unwrap_or(usize::MAX),
                per_address: usize::try_from(s.max_streams_per_address).unwrap_or(usize::MAX),
                per_tenant: usize::try_from(s.max_streams_per_tenant).unwrap_or(usize::MAX),
            },
            namespaces: s.namespaces,
            run_limits: crate::process::limits::Limits {
                memory_mb: s.run_memory_mb,
                pids: s.run_pids,
                cpu_seconds: s.run_cpu_seconds,
                file_mb: s.run_file_mb,
                disk_mb: s.run_max_disk_mb,
                open_files: s.run_open_files,
            },
            run_uids: s.run_uids,
            child_env: ChildEnv::from_vars(vars, &s.child_env_passthrough.unwrap_or_default()),
            legacy_ui: LegacyUi {
                sunset: s.ui_legacy_api_sunset,
                gone: s.ui_legacy_api_gone,
            },
            effective: Vec::new(),
        };
        config.effective = config.in_effect(effective, vars);
        Ok(config)
    }

    /// The parsed settings with what was worked out in place of the unset ones, then what is
    /// read from the environment only: the secrets (always listed, set or not) and the
    /// per-engine and per-provider variables that are set.
    fn in_effect(
        &self,
        mut settings: Vec<Effective>,
        vars: &BTreeMap<String, String>,
    ) -> Vec<Effective> {
        let paths = |paths: &[PathBuf]| {
            let paths: Vec<_> = paths.iter().map(|p| p.display().to_string()).collect();
            paths.join(":")
        };
        let derived = [
            ("SKILL_RUNNER_NODE_ID", self.node_id.clone()),
            (
                "SKILL_RUNNER_MAX_CONCURRENT",
                self.jobs.max_concurrent.to_string(),
            ),
            (
                "SKILL_RUNNER_MAX_CONCURRENT_AGENTS",
                self.jobs.max_concurrent_agents.to_string(),
            ),
            (
                "SKILL_RUNNER_AGENT_CACHE_DIR",
                self.engines.cache_dir.display().to_string(),
            ),
            (
                "SKILL_RUNNER_NPM_PREFIX",
                self.engines.npm_prefix.display().to_string(),
            ),
            (
                "SKILL_RUNNER_AGENT_HOME",
                self.engines.agent_home.display().to_string(),
            ),
            ("SKILL_RUNNER_SKILL_DOC_ROOTS", paths(&self.skill_doc_roots)),
        ];
        for setting in &mut settings {
            let worked_out = derived.iter().find(|(v, _)| *v == setting.variable);
            if let (Source::Unset, Some((_, value))) = (setting.source, worked_out) {
                setting.value = Some(value.clone());
                setting.source = Source::Derived;
            }
        }
        let set = |name: &str| vars.get(name).filter(|v| !v.trim().is_empty());
        let mut env_only = |name: String, help: &str, always: bool| {
            let value = set(&name);
            if always || value.is_some() {
                let source = match value {
                    Some(_) => Source::Environment,
                    None => Source::Unset,
                };
                settings.push(Effective::new(
                    &name,
                    None,
                    value.map(String::as_str),
                    source,
                    help,
                ));
            }
        };
        for (name, help) in [
            ("UI_BASIC_AUTH_PASSWORD", "The Basic Auth password."),
            (
                "SKILL_RUNNER_API_TOKENS",
                "Bearer tokens every route but /v1/system/ping requires, comma-separated.",
            ),
            (
                "SKILL_RUNNER_DATABASE_URL",
                "The PostgreSQL database holding the store instead of the data dir's SQLite file.",
            ),
        ] {
            env_only(name.to_owned(), help, true);
        }
        for engine in agent_engines() {
            let upper = engine.to_ascii_uppercase();
            for (suffix, help) in [
                ("BASE_URL", "The model API this engine's CLI talks to."),
                (
                    "API_KEY",
                    "The key this engine's CLI presents to its model API.",
                ),
                (
                    "NPM_PACKAGE",
                    "The npm package an upgrade installs instead of the pinned one.",
                ),
            ] {
                env_only(format!("SKILL_RUNNER_{upper}_{suffix}"), help, false);
            }
        }
        for preset in skill_runner_agent::config::PRESETS {
            for (suffix, help) in [
                ("BASE_URL", "The agent chat's model API of this provider."),
                ("API_KEY", "The agent chat's key for this provider."),
                ("MODEL", "The agent chat's model of this provider."),
            ] {
                env_only(
                    format!("SKILL_RUNNER_AGENT_{}_{suffix}", preset.var),
                    help,
                    false,
                );
            }
        }
        settings
    }

    /// Creates the data and skills directories and proves both are writable, turning relative
    /// paths into absolute ones so later moves and child processes never depend on the cwd.
    pub fn prepare_dirs(&mut self) -> Result<(), ConfigError> {
        self.data_dir = ensure_writable_dir("SKILL_RUNNER_DATA_DIR", &self.data_dir)?;
        let given_skills_dir = self.skills_dir.clone();
        self.skills_dir = ensure_writable_dir("SKILL_RUNNER_SKILLS_DIR", &self.skills_dir)?;
        for root in &mut self.skill_doc_roots {
            *root = if *root == given_skills_dir {
                self.skills_dir.clone()
            } else {
                std::path::absolute(&*root).unwrap_or_else(|_| root.clone())
            };
        }
        // Checked before the folder is created, so a refused root leaves nothing behind.
        self.check_allowed_root(&resolve(&self.invoke.allowed_root))?;
        self.invoke.allowed_root =
            ensure_writable_dir("OPENSKILL_ALLOWED_ROOT", &self.invoke.allowed_root)?;
        // Again on the real path, in case `..` hid where the folder landed.
        self.check_allowed_root(&self.invoke.allowed_root)
    }

    /// The file skills may read and write anything under the allowed root, so it must not hold
    /// the service's own state, nor lie inside it.
    fn check_allowed_root(&self, root: &Path) -> Result<(), ConfigError> {
        // The data dir itself may hold the root (`./data/files`, the default), but not inside
        // the state it keeps there.
        let inside_state = DataDir::ENTRIES
            .iter()
            .map(|name| self.data_dir.join(name))
            .chain([self.skills_dir.clone()])
            .find(|state| root.starts_with(state));
        let clash = [&self.data_dir, &self.skills_dir]
            .into_iter()
            .find(|state| state.starts_with(root))
            .cloned()
            .or(inside_state);
        match clash {
            Some(path) => Err(ConfigError::new(
                "OPENSKILL_ALLOWED_ROOT",
                format!(
                    "'{}' must not contain or lie inside the service's own state ('{}'); \
                     use a folder of its own, e.g. <data dir>/files",
                    root.display(),
                    path.display()
                ),
            )),
            None => Ok(()),
        }
    }

    /// The data dir's layout.
    pub fn data(&self) -> DataDir {
        DataDir::new(self.data_dir.clone())
    }
}

/// The OTLP endpoint for traces, as the OpenTelemetry variables name it: a signal's own
/// endpoint is used as given, the generic one gets `/v1/traces`.
fn trace_export(s: &Settings) -> Option<TraceExport> {
    let url = s.otel_exporter_otlp_traces_endpoint.clone().or_else(|| {
        let base = s.otel_exporter_otlp_endpoint.as_deref()?;
        Some(format!("{}/v1/traces", base.trim_end_matches('/')))
    })?;
    Some(TraceExport {
        url,
        protocol: s.otel_exporter_otlp_protocol,
        service_name: s.otel_service_name.clone(),
        delay: Duration::from_millis(s.otel_bsp_schedule_delay),
    })
}

/// The host name and this process's id: unique among nodes on one host, and readable.
/// Only PostgreSQL is served by URL; SQLite is the data dir's file when none is given.
fn database_url(value: Option<String>) -> Result<Option<SecretString>, ConfigError> {
    let Some(url) = value else { return Ok(None) };
    let url = url.trim();
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err(ConfigError::new(
            "SKILL_RUNNER_DATABASE_URL",
            "must be a postgres:// URL (leave it unset for SQLite in the data dir)",
        ));
    }
    Ok(Some(SecretString::from(url.to_owned())))
}

fn host_name() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "node".into())
}

fn default_node_id() -> String {
    format!("{}-{}", host_name(), std::process::id())
}

impl Config {
    /// Lets requests naming `url`'s host in `Host` through, where the names are limited at
    /// all (bound to every interface with no list, the service answers any name).
    pub fn admit_host_of(&mut self, url: &str) {
        if self.bind.ip().is_unspecified() && self.allowed_hosts.is_empty() {
            return;
        }
        let host = url
            .parse::<axum::http::Uri>()
            .ok()
            .and_then(|u| u.host().map(str::to_owned));
        if let Some(host) = host.filter(|h| !self.allowed_hosts.contains(h)) {
            self.allowed_hosts.push(host);
        }
    }

    /// Where the other nodes reach this one, listening on `bound`: `SKILL_RUNNER_NODE_URL`,
    /// else the bound address, or the host name when bound to every interface (other
    /// machines cannot reach 0.0.0.0; in a container the host name is the container's).
    pub fn node_url(&self, bound: SocketAddr) -> String {
        if let Some(url) = &self.node_url {
            return url.clone();
        }
        if bound.ip().is_unspecified() {
            format!("http://{}:{}", host_name(), bound.port())
        } else {
            format!("http://{bound}")
        }
    }
}

/// The slots: all runs at once, and of those the agent turns. An operator who set only
/// `SKILL_RUNNER_MAX_CONCURRENT` keeps its old meaning for agent turns too; only both set
/// can disagree.
fn slots(all: Option<u64>, agents: Option<u64>) -> Result<(usize, usize), ConfigError> {
    let defaults = JobLimits::default();
    let agents = (agents.or(all)).map_or(defaults.max_concurrent_agents, |n| n as usize);
    let all = all.map_or(defaults.max_concurrent.max(agents), |n| n as usize);
    if agents > all {
        return Err(ConfigError::new(
            "SKILL_RUNNER_MAX_CONCURRENT_AGENTS",
            format!(
                "{agents} agent turns at once cannot fit in SKILL_RUNNER_MAX_CONCURRENT ({all}) \
                 slots: lower it, or raise SKILL_RUNNER_MAX_CONCURRENT"
            ),
        ));
    }
    Ok((all, agents))
}

/// `path` made absolute with symlinks resolved, also when its last components do not exist
/// yet (the existing part is canonicalised, the rest appended).
fn resolve(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut existing = absolute.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = std::fs::canonicalize(existing) {
            return rest.iter().rev().fold(real, |p, c| p.join(c));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                existing = parent;
            }
            _ => return absolute,
        }
    }
}

fn ensure_writable_dir(variable: &'static str, dir: &Path) -> Result<PathBuf, ConfigError> {
    let fail = |problem: String| ConfigError::new(variable, problem);
    std::fs::create_dir_all(dir)
        .map_err(|e| fail(format!("cannot create directory '{}': {e}", dir.display())))?;
    let dir = std::fs::canonicalize(dir)
        .map_err(|e| fail(format!("cannot resolve directory '{}': {e}", dir.display())))?;
    let probe = dir.join(format!(".write-probe-{}", std::process::id()));
    std::fs::write(&probe, b"")
        .and_then(|()| std::fs::remove_file(&probe))
        .map_err(|e| {
            fail(format!(
                "directory '{}' is not writable: {e}",
                dir.display()
            ))
        })?;
    Ok(dir)
}

/// `SKILL_RUNNER_API_TOKENS` (comma-separated) and the lines of `SKILL_RUNNER_API_TOKENS_FILE`
/// (blank lines and `#` comments skipped), together. Set but naming no token is an error: an
/// operator who set it meant to close the API.
/// A count as a quota holds it.
fn saturate(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn parse_api_tokens(
    list: Option<String>,
    file: Option<&Path>,
) -> Result<Option<ApiTokens>, ConfigError> {
    const LIST: &str = "SKILL_RUNNER_API_TOKENS";
    const FILE: &str = "SKILL_RUNNER_API_TOKENS_FILE";
    let mut entries: Vec<(&str, String)> = Vec::new();
    if let Some(list) = &list {
        entries.extend(list.split(',').map(|e| (LIST, e.trim().to_owned())));
    }
    if let Some(path) = file {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigError::new(FILE, format!("cannot read '{}': {e}", path.display()))
        })?;
        entries.extend(text.lines().map(|line| (FILE, line.trim().to_owned())));
    }
    if list.is_none() && file.is_none() {
        return Ok(None);
    }
    let mut digests = Vec::new();
    for (variable, entry) in entries {
        if entry.is_empty() || entry.starts_with('#') {
            continue;
        }
        let digest =
            ApiTokens::digest_of(&entry).map_err(|problem| ConfigError::new(variable, problem))?;
        digests.push(digest);
    }
    if digests.is_empty() {
        let variable = if list.is_some() { LIST } else { FILE };
        return Err(ConfigError::new(variable, "names no token"));
    }
    Ok(Some(ApiTokens(digests)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        load(&[], vars)
    }

    fn load(args: &[&str], vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        let vars = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Config::load(&args, &vars).map_err(|refused| match refused {
            Refused::Invalid(e) => e,
            Refused::Help(text) => panic!("help instead of a configuration: {text}"),
        })
    }

    #[test]
    fn the_settings_in_effect_say_where_each_came_from_and_hide_secrets() {
        let c = load(
            &["--run-pids", "64"],
            &[
                ("PORT", "9000"),
                ("SKILL_RUNNER_RUN_PIDS", "32"),
                ("SKILL_RUNNER_API_TOKENS", "token-aaaaaaaaaaaaaaaa"),
                ("SKILL_RUNNER_CODEX_API_KEY", "sk-secret"),
                ("SKILL_RUNNER_CODEX_BASE_URL", "http://127.0.0.1:18080/v1"),
                (
                    "SKILL_RUNNER_DATABASE_URL",
                    "postgres://runner:pw-secret@127.0.0.1:5432/runs",
                ),
            ],
        )
        .unwrap();
        let find = |variable: &str| {
            let found = c.effective.iter().find(|e| e.variable == variable);
            let e = found.unwrap_or_else(|| panic!("{variable} is not listed"));
            (e.value.as_deref(), e.source)
        };
        assert_eq!(find("PORT"), (Some("9000"), Source::Environment));
        assert_eq!(find("SKILL_RUNNER_RUN_PIDS"), (Some("64"), Source::Flag));
        assert_eq!(find("LOG_LEVEL"), (Some("info"), Source::Default));
        assert_eq!(find("SKILL_RUNNER_STORAGE_URL"), (None, Source::Unset));
        let slots = c.jobs.max_concurrent.to_string();
        assert_eq!(
            find("SKILL_RUNNER_MAX_CONCURRENT"),
            (Some(slots.as_str()), Source::Derived)
        );
        assert_eq!(
            find("SKILL_RUNNER_API_TOKENS"),
            (Some(effective::HIDDEN), Source::Environment)
        );
        assert_eq!(find("UI_BASIC_AUTH_PASSWORD"), (None, Source::Unset));
        assert_eq!(
            find("SKILL_RUNNER_CODEX_API_KEY"),
            (Some(effective::HIDDEN), Source::Environment)
        );
        assert_eq!(
            find("SKILL_RUNNER_DATABASE_URL"),
            (
                Some("postgres://****:****@127.0.0.1:5432/runs"),
                Source::Environment
            )
        );
        assert_eq!(find("SKILL_RUNNER_RUN_PIDS").0, Some("64"));
        assert!(
            c.effective
                .iter()
                .all(|e| e.variable != "SKILL_RUNNER_QWEN_API_KEY"),
            "unset per-engine variables are not listed"
        );
        let shown = format!("{:?}", c.effective);
        for secret in ["token-aaaa", "sk-secret", "pw-secret"] {
            assert!(!shown.contains(secret), "{secret} shown");
        }
    }

    #[test]
    fn defaults_serve_loopback_8000() {
        let c = config(&[]).unwrap();
        assert_eq!(c.bind, "127.0.0.1:8000".parse().unwrap());
        assert_eq!(c.data_dir, PathBuf::from("./data"));
        assert_eq!(c.skills_dir, PathBuf::from("./skills"));
        assert_eq!(c.log_format, LogFormat::Text);
        assert_eq!(c.package_limits, PackageLimits::default());
    }

    #[test]
    fn api_tokens_come_as_a_list_a_file_or_digests() {
        assert_eq!(config(&[]).unwrap().api_tokens, None);
        let plain = "tok-0123456789abcdef";
        let digest = "sha256:bb02b4d0457547291dcad5ffcf74722842767c51faaf24ad48c2049c83473bd4";
        let c = config(&[("SKILL_RUNNER_API_TOKENS", &format!(" {plain} ,{digest}"))]).unwrap();
        let tokens = c.api_tokens.unwrap();
        assert!(tokens.accepts(plain));
        assert!(
            tokens.accepts("some-other-token-value"),
            "given by its digest"
        );
        assert!(!tokens.accepts("tok-0123456789abcde"));
        assert!(!tokens.accepts(""));

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("tokens");
        std::fs::write(&file, format!("# operators\n\n{plain}\n")).unwrap();
        let c = config(&[("SKILL_RUNNER_API_TOKENS_FILE", file.to_str().unwrap())]).unwrap();
        assert!(c.api_tokens.unwrap().accepts(plain));

        for (vars, variable) in [
            (
                vec![("SKILL_RUNNER_API_TOKENS", "short")],
                "SKILL_RUNNER_API_TOKENS",
            ),
            (
                vec![("SKILL_RUNNER_API_TOKENS", "sha256:abc")],
                "SKILL_RUNNER_API_TOKENS",
            ),
            (
                vec![("SKILL_RUNNER_API_TOKENS", " , ")],
                "SKILL_RUNNER_API_TOKENS",
            ),
            (
                vec![("SKILL_RUNNER_API_TOKENS_FILE", "/nonexistent/tokens")],
                "SKILL_RUNNER_API_TOKENS_FILE",
            ),
        ] {
            let e = config(&vars).unwrap_err();
            assert_eq!(e.variable, variable, "{vars:?}");
            assert!(!e.problem.contains("short"), "{e}");
        }
    }

    #[test]
    fn basic_auth_needs_both_credentials() {
        assert!(config(&[]).unwrap().admin_auth.is_none());
        assert!(
            config(&[("UI_BASIC_AUTH_ENABLED", "false")])
                .unwrap()
                .admin_auth
                .is_none()
        );
        let e = config(&[("UI_BASIC_AUTH_ENABLED", "true")]).unwrap_err();
        assert_eq!(e.variable, "UI_BASIC_AUTH_USERNAME");
        let e = config(&[
            ("UI_BASIC_AUTH_ENABLED", "true"),
            ("UI_BASIC_AUTH_USERNAME", "admin"),
        ])
        .unwrap_err();
        assert_eq!(e.variable, "UI_BASIC_AUTH_PASSWORD");
        let e = config(&[("UI_BASIC_AUTH_ENABLED", "maybe")]).unwrap_err();
        assert_eq!(e.variable, "UI_BASIC_AUTH_ENABLED");
        let c = config(&[
            ("UI_BASIC_AUTH_ENABLED", "TRUE"),
            ("UI_BASIC_AUTH_USERNAME", "admin"),
            ("UI_BASIC_AUTH_PASSWORD", "s3cret"),
        ])
        .unwrap();
        let auth = c.admin_auth.unwrap();
        assert!(auth.accepts("admin", "s3cret"));
        assert!(!auth.accepts("admin", "s3cre"));
        assert!(!format!("{auth:?}").contains("s3cret"));
    }

    #[test]
    fn agent_settings_per_engine() {
        let c = config(&[
            ("SKILL_RUNNER_AGENT_CACHE_DIR", "/cache"),
            ("SKILL_RUNNER_CODEX_NPM_PACKAGE", "/tmp/codex.tgz"),
            ("SKILL_RUNNER_QWEN_API_KEY", "k"),
        ])
        .unwrap();
        assert_eq!(c.engines.agent_home, PathBuf::from("/cache/agent-home"));
        assert_eq!(c.engines.npm_prefix, PathBuf::from("/cache/npm"));
        assert_eq!(c.engines.packages["codex"], "/tmp/codex.tgz");
        assert_eq!(c.engines.packages.len(), 1);
        let key = c.engines.endpoints["qwen"].api_key.as_ref();
        assert_eq!(key.map(ExposeSecret::expose_secret), Some("k"));
        assert!(!format!("{:?}", c.engines.endpoints["qwen"]).contains("\"k\""));
        assert!(!format!("{:?}", c.engines).contains("\"k\""));
    }

    #[test]
    fn bind_overrides_port() {
        let c = config(&[("PORT", "9000"), ("SKILL_RUNNER_BIND", "0.0.0.0:7000")]).unwrap();
        assert_eq!(c.bind, "0.0.0.0:7000".parse().unwrap());
        let c = config(&[("PORT", "9000")]).unwrap();
        assert_eq!(c.bind.port(), 9000);
    }

    #[test]
    fn bad_values_name_the_variable() {
        let e = config(&[("PORT", "eighty")]).unwrap_err();
        assert_eq!(e.variable, "PORT");
        assert!(
            e.to_string()
                .starts_with("PORT: 'eighty' is not a port number")
        );
        let e = config(&[("SKILL_RUNNER_BIND", "nowhere")]).unwrap_err();
        assert_eq!(e.variable, "SKILL_RUNNER_BIND");
        let e = config(&[("LOG_FORMAT", "xml")]).unwrap_err();
        assert_eq!(e.variable, "LOG_FORMAT");
        // A word that is not a level would be a filter enabling one unknown target only: no
        // log at all.
        let e = config(&[("LOG_LEVEL", "loud")]).unwrap_err();
        assert_eq!(e.variable, "LOG_LEVEL");
        assert!(e.to_string().contains("not a log level"), "{e}");
        assert_eq!(config(&[("LOG_LEVEL", "WARN")]).unwrap().log_filter, "warn");
        let debug = config(&[("LOG_LEVEL", "debug")]).unwrap().log_filter;
        assert!(
            debug.starts_with("debug,") && debug.contains("sqlx=warn"),
            "{debug}"
        );
        let own = config(&[("LOG_LEVEL", "debug"), ("RUST_LOG", "skill_runner=trace")]);
        assert_eq!(own.unwrap().log_filter, "skill_runner=trace");
        let e = config(&[("SKILL_RUNNER_PACKAGE_MAX_BYTES", "0")]).unwrap_err();
        assert_eq!(e.variable, "SKILL_RUNNER_PACKAGE_MAX_BYTES");
        let e = config(&[("SKILL_RUNNER_LEGACY_ENGINES", "gemini, codex")]).unwrap_err();
        assert_eq!(e.variable, "SKILL_RUNNER_LEGACY_ENGINES");
        assert!(
            e.to_string().contains("'codex' is not a legacy engine"),
            "{e}"
        );
        let c = config(&[("SKILL_RUNNER_LEGACY_ENGINES", " iflow,gemini ")]).unwrap();
        assert_eq!(c.engines.legacy_allowed, [Engine::Iflow, Engine::Gemini]);
    }

    #[test]
    fn a_flag_wins_over_its_variable_and_errors_name_the_source() {
        let c = load(&["--host", "0.0.0.0", "--port", "9100"], &[]).unwrap();
        assert_eq!(c.bind.to_string(), "0.0.0.0:9100");
        let c = load(&["--port", "9100"], &[("PORT", "9000")]).unwrap();
        assert_eq!(c.bind.port(), 9100);
        let c = load(&[], &[("PORT", " "), ("SKILL_RUNNER_MAX_QUEUE_SIZE", "7")]).unwrap();
        assert_eq!(c.bind.port(), 8000, "a blank variable is unset");
        assert_eq!(c.jobs.max_queue_size, 7);
        let e = load(&["--port=x"], &[("PORT", "9000")]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--port: 'x' is not a port number (expected 0-65535)"
        );
        let e = load(
            &["--port=9100"],
            &[("SKILL_RUNNER_KILL_GRACE_SECONDS", "soon")],
        )
        .unwrap_err();
        assert_eq!(e.variable, "SKILL_RUNNER_KILL_GRACE_SECONDS");
        let e = load(&["--unheard-of"], &[]).unwrap_err();
        assert_eq!(e.variable, "command line");
        // Secrets have no flag: argv is readable by every process.
        assert!(load(&["--ui-basic-auth-password=x"], &[]).is_err());
        assert!(load(&["--api-tokens=x"], &[]).is_err());
    }

    #[test]
    fn lists_and_switches_are_one_value_each() {
        let c = load(
            &[],
            &[
                ("SKILL_RUNNER_SANDBOX_READ_PATHS", "/opt/a::/opt/b"),
                ("SKILL_RUNNER_CHILD_ENV_PASSTHROUGH", "LANGUAGE, FOO_BAR"),
                ("UI_BASIC_AUTH_ENABLED", "on"),
                ("UI_BASIC_AUTH_USERNAME", "admin"),
                ("UI_BASIC_AUTH_PASSWORD", "pw"),
                ("OPENSKILL_DEBUG", "false"),
            ],
        )
        .unwrap();
        assert_eq!(
            c.sandbox_read_paths,
            [PathBuf::from("/opt/a"), PathBuf::from("/opt/b")]
        );
        assert!(c.admin_auth.is_some());
        assert!(!c.invoke.debug);
        let e = config(&[("SKILL_RUNNER_CHILD_ENV_PASSTHROUGH", "OK,9BAD")]).unwrap_err();
        assert_eq!(e.variable, "SKILL_RUNNER_CHILD_ENV_PASSTHROUGH");
        let e = config(&[("UI_BASIC_AUTH_USERNAME", "a:b")]).unwrap_err();
        assert_eq!(e.variable, "UI_BASIC_AUTH_USERNAME");
    }

    #[test]
    fn legacy_console_routes_settings() {
        let c = config(&[]).unwrap();
        assert_eq!(c.legacy_ui.sunset.to_string(), "2026-06-30");
        assert!(!c.legacy_ui.gone);
        let c = config(&[
            ("SKILL_RUNNER_UI_LEGACY_API_MODE", "gone"),
            ("SKILL_RUNNER_UI_LEGACY_API_SUNSET", "2027-01-15"),
        ])
        .unwrap();
        assert!(c.legacy_ui.gone);
        assert_eq!(c.legacy_ui.sunset.to_string(), "2027-01-15");
        for (variable, bad) in [
            ("SKILL_RUNNER_UI_LEGACY_API_MODE", "retired"),
            ("SKILL_RUNNER_UI_LEGACY_API_SUNSET", "30/06/2026"),
        ] {
            assert_eq!(config(&[(variable, bad)]).unwrap_err().variable, variable);
        }
    }

    #[test]
    fn help_names_every_variable() {
        let Err(Refused::Help(text)) = Config::load(&["--help".into()], &BTreeMap::new()) else {
            panic!("--help gives the help");
        };
        for variable in [
            "PORT",
            "SKILL_RUNNER_DATA_DIR",
            "SKILL_RUNNER_MAX_CONCURRENT",
            "OPENSKILL_DEBUG",
            "SKILL_RUNNER_SANDBOX",
            "SKILL_RUNNER_<ENGINE>_API_KEY",
        ] {
            assert!(text.contains(variable), "{variable}");
        }
    }

    #[test]
    fn engine_limits_and_shared_storage_are_read() {
        let c = config(&[
            ("SKILL_RUNNER_ENGINE_LIMITS", " codex=2, claude=1 "),
            ("SKILL_RUNNER_STORAGE_URL", "s3://bucket/runs"),
            ("SKILL_RUNNER_NODE_URL", "http://10.0.0.5:8000/"),
        ])
        .unwrap();
        assert_eq!(c.engine_limits, [(Engine::Codex, 2), (Engine::Claude, 1)]);
        assert_eq!(c.storage_url.as_deref(), Some("s3://bucket/runs"));
        let bound = "0.0.0.0:8000".parse().unwrap();
        assert_eq!(c.node_url(bound), "http://10.0.0.5:8000");
        let c = config(&[]).unwrap();
        assert!(c.engine_limits.is_empty());
        assert_eq!(
            c.node_url("127.0.0.1:9000".parse().unwrap()),
            "http://127.0.0.1:9000"
        );
    }

    #[test]
    fn traces_follow_the_opentelemetry_variables() {
        assert_eq!(config(&[]).unwrap().traces, None);
        let c = config(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")]).unwrap();
        assert_eq!(
            c.traces,
            Some(TraceExport {
                url: "http://collector:4318/v1/traces".into(),
                protocol: OtlpProtocol::HttpProtobuf,
                service_name: "skill-runner".into(),
                delay: Duration::from_secs(5),
            })
        );
        let c = config(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "https://traces.example/ingest",
            ),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
            ("OTEL_SERVICE_NAME", "runner-eu"),
        ])
        .unwrap()
        .traces
        .unwrap();
        assert_eq!(
            (c.url.as_str(), c.protocol, c.service_name.as_str()),
            (
                "https://traces.example/ingest",
                OtlpProtocol::HttpJson,
                "runner-eu"
            )
        );
        for (variable, bad, says) in [
            (
                "OTEL_EXPORTER_OTLP_PROTOCOL",
                "grpc",
                "grpc is not built in",
            ),
            (
                "OTEL_EXPORTER_OTLP_PROTOCOL",
                "thrift",
                "not an OTLP protocol",
            ),
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                "collector:4318",
                "not an http:// or https:// URL",
            ),
            ("SKILL_RUNNER_NODE_ID", "a b", "not a node id"),
            (
                "SKILL_RUNNER_ENGINE_LIMITS",
                "codex=0",
                "positive whole number",
            ),
            (
                "SKILL_RUNNER_ENGINE_LIMITS",
                "gpt=1",
                "'gpt' is not an engine",
            ),
            ("SKILL_RUNNER_ENGINE_LIMITS", "codex", "not engine=count"),
            (
                "SKILL_RUNNER_ENGINE_LIMITS",
                "codex=1,codex=2",
                "given twice",
            ),
            (
                "SKILL_RUNNER_STORAGE_URL",
                "/mnt/shared",
                "not a storage URL",
            ),
            (
                "SKILL_RUNNER_DATABASE_URL",
                "mysql://db/skills",
                "must be a postgres:// URL",
            ),
        ] {
            let e = config(&[(variable, bad)]).unwrap_err();
            assert_eq!(e.variable, variable);
            assert!(e.problem.contains(says), "{e}");
        }
    }

    #[test]
    fn the_database_url_names_postgres_and_stays_out_of_debug_output() {
        assert!(
            config(&[]).unwrap().database_url.is_none(),
            "SQLite by default"
        );
        assert!(
            config(&[("SKILL_RUNNER_DATABASE_URL", " ")])
                .unwrap()
                .database_url
                .is_none()
        );
        let url = "postgres://runner:hunter2@db:5432/skills";
        let c = config(&[("SKILL_RUNNER_DATABASE_URL", url)]).unwrap();
        assert_eq!(
            c.database_url.as_ref().map(ExposeSecret::expose_secret),
            Some(url)
        );
        assert!(!format!("{c:?}").contains("hunter2"));
    }

    #[test]
    fn agent_slots_default_to_the_cpus_or_to_every_slot_an_operator_set() {
        let defaults = JobLimits::default();
        let slots = |vars: &[(&str, &str)]| {
            config(vars).map(|c| (c.jobs.max_concurrent, c.jobs.max_concurrent_agents))
        };
        assert_eq!(
            slots(&[]).unwrap(),
            (defaults.max_concurrent, defaults.max_concurrent_agents)
        );
        assert!(defaults.max_concurrent >= defaults.max_concurrent_agents);
        assert_eq!(
            slots(&[("SKILL_RUNNER_MAX_CONCURRENT", "3")]).unwrap(),
            (3, 3)
        );
        assert_eq!(
            slots(&[("SKILL_RUNNER_MAX_CONCURRENT_AGENTS", "100")]).unwrap(),
            (100, 100),
            "the slots make room for the agent turns asked for"
        );
        assert_eq!(
            slots(&[
                ("SKILL_RUNNER_MAX_CONCURRENT", "9"),
                ("SKILL_RUNNER_MAX_CONCURRENT_AGENTS", "2")
            ])
            .unwrap(),
            (9, 2)
        );
        let e = slots(&[
            ("SKILL_RUNNER_MAX_CONCURRENT", "2"),
            ("SKILL_RUNNER_MAX_CONCURRENT_AGENTS", "3"),
        ])
        .unwrap_err();
        assert_eq!(e.variable, "SKILL_RUNNER_MAX_CONCURRENT_AGENTS");
        assert!(
            e.problem.contains("raise SKILL_RUNNER_MAX_CONCURRENT"),
            "{e}"
        );
    }

    #[test]
    fn unwritable_data_dir_is_reported() {
        let file = tempfile::NamedTempFile::new().unwrap();
        let mut c = config(&[]).unwrap();
        c.data_dir = file.path().join("sub");
        let e = c.prepare_dirs().unwrap_err();
        assert_eq!(e.variable, "SKILL_RUNNER_DATA_DIR");
        assert!(e.problem.contains("cannot create directory"), "{e}");
    }

    fn prepared(root: &Path, allowed: &str) -> Result<Config, ConfigError> {
        let mut c = config(&[]).unwrap();
        c.data_dir = root.join("data");
        c.skills_dir = root.join("skills");
        c.invoke.allowed_root = root.join(allowed);
        c.prepare_dirs().map(|()| c)
    }

    #[test]
    fn allowed_root_must_not_hold_or_sit_in_state() {
        let tmp = tempfile::tempdir().unwrap();
        for ok in ["data/files", "files", "data/other/files"] {
            let c = prepared(tmp.path(), ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
            assert!(c.invoke.allowed_root.is_absolute());
        }
        for bad in [
            ".",
            "data",
            "data/runs/x",
            "data/requests",
            "data/upgrades/x",
            "skills",
            "skills/x",
        ] {
            let e = prepared(tmp.path(), bad).unwrap_err();
            assert_eq!(e.variable, "OPENSKILL_ALLOWED_ROOT", "{bad}");
            assert!(e.problem.contains("service's own state"), "{bad}: {e}");
        }
        assert!(
            !tmp.path().join("data/runs/x").exists(),
            "a refused root is not created"
        );
    }

    #[test]
    fn openskill_variables_are_read() {
        let c = config(&[
            ("OPENSKILL_ALLOWED_ROOT", "/srv/files"),
            ("OPENSKILL_CLI_DIR", "/srv/cli"),
            ("OPENSKILL_TIMEOUT_MS", "250"),
            ("OPENSKILL_DEBUG", "1"),
        ])
        .unwrap();
        assert_eq!(c.invoke.allowed_root, PathBuf::from("/srv/files"));
        assert_eq!(c.invoke.cli_dir, PathBuf::from("/srv/cli"));
        assert_eq!(c.invoke.timeout, Duration::from_millis(250));
        assert!(c.invoke.debug);
        assert_eq!(config(&[]).unwrap().invoke, InvokeConfig::default());
        let e = config(&[("OPENSKILL_DEBUG", "maybe")]).unwrap_err();
        assert_eq!(e.variable, "OPENSKILL_DEBUG");
        let e = config(&[("OPENSKILL_TIMEOUT_MS", "0")]).unwrap_err();
        assert_eq!(e.variable, "OPENSKILL_TIMEOUT_MS");
    }

    #[test]
    fn agent_endpoints_and_cache() {
        let c = config(&[
            ("HOME", "/home/u"),
            ("SKILL_RUNNER_CODEX_BASE_URL", "http://127.0.0.1:18080/v1"),
            ("SKILL_RUNNER_CODEX_API_KEY", "sk-secret"),
            ("SKILL_RUNNER_CLAUDE_API_KEY", "sk-2"),
            ("SKILL_RUNNER_ENGINE_MAX_RETRIES", "0"),
        ])
        .unwrap();
        let a = &c.engines;
        assert_eq!(
            a.cache_dir,
            PathBuf::from("/home/u/.local/share/skill-runner/agent-cache")
        );
        assert_eq!(a.npm_prefix, a.cache_dir.join("npm"));
        assert_eq!(a.max_retries, 0);
        assert_eq!(
            a.endpoints["codex"].base_url.as_deref(),
            Some("http://127.0.0.1:18080/v1")
        );
        assert_eq!(a.endpoints["claude"].base_url, None);
        assert!(!a.endpoints.contains_key("gemini"));
        assert!(
            !format!("{a:?}").contains("sk-secret"),
            "keys stay out of logs"
        );
        let e = config(&[("SKILL_RUNNER_ENGINE_MAX_RETRIES", "-1")]).unwrap_err();
        assert_eq!(e.variable, "SKILL_RUNNER_ENGINE_MAX_RETRIES");
    }
}
