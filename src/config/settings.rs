//! Every setting of `skill-runner serve` as one clap command: its variable, its flag, its
//! default and its documentation in one place (`skill-runner serve --help` prints them).
//!
//! clap reads an `env` value from the process environment only, and the service keeps no
//! variable there: they arrive in a memory file (see `process::handover`). So each variable
//! found in the handed-over environment is given to clap as the flag it stands for (`PORT=9000`
//! as `--port=9000`), placed before the real arguments, and a flag given on the command line
//! wins (`args_override_self`). The command parsed this way carries no `env` of its own, so what
//! the process environment holds never leaks into a parse. Secrets (a password, tokens, API
//! keys) and the per-engine families (`SKILL_RUNNER_<ENGINE>_BASE_URL`, …) have no flag and are
//! read from the environment by [`super::Config::load`]: an argument is readable by every
//! process through `/proc/<pid>/cmdline`.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::parser::ValueSource;
use clap::{ArgAction, CommandFactory, FromArgMatches, Parser};
use skill_runner_types::engine::Engine;
use skill_runner_web::connections::ConnectionLimits;
use skill_runner_web::stream_caps::StreamLimits;

use super::effective::{Effective, Source};
use super::{ConfigError, InvokeConfig, JobLimits, LogFormat, OtlpProtocol, PackageLimits};
use crate::egress::HostPattern;
use crate::process::limits::Limits;
use crate::process::run_uids::RunUids;
use crate::process::sandbox::SandboxMode;

/// The settings of the service, each read from its variable or its flag.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "skill-runner serve",
    about = "Serve the API. Each setting is an environment variable or, for all but secrets, the flag \
             shown (a flag wins).",
    after_long_help = "Read from the environment only (no flag, so they never show in a process \
                       list): UI_BASIC_AUTH_PASSWORD, SKILL_RUNNER_API_TOKENS, SKILL_RUNNER_DATABASE_URL \
                       (postgres://…: the store in PostgreSQL instead of SQLite), and per engine \
                       (CODEX, GEMINI, IFLOW, CLAUDE, OPENCODE, QWEN) SKILL_RUNNER_<ENGINE>_BASE_URL, \
                       SKILL_RUNNER_<ENGINE>_API_KEY and SKILL_RUNNER_<ENGINE>_NPM_PACKAGE, and per \
                       agent chat provider (OPENAI, DASHSCOPE, OPENAI_RESPONSES, ANTHROPIC) \
                       SKILL_RUNNER_AGENT_<PROVIDER>_BASE_URL, _API_KEY and _MODEL. A blank \
                       variable counts as unset.",
    args_override_self = true
)]
pub struct Settings {
    /// Address to listen on, HOST:PORT (a bare address listens on port 8000); wins over PORT.
    #[arg(long, env = "SKILL_RUNNER_BIND", value_parser = bind)]
    pub bind: Option<SocketAddr>,
    /// Port to listen on, on 127.0.0.1 (or --host).
    #[arg(long, env = "PORT", default_value_t = 8000, value_parser = port)]
    pub port: u16,
    /// Address to listen on with --port (default 127.0.0.1; 0.0.0.0 for every interface);
    /// SKILL_RUNNER_BIND wins over both.
    #[arg(long, env = "SKILL_RUNNER_HOST", value_parser = host)]
    pub host: Option<IpAddr>,
    /// Where the database, runs and caches live.
    #[arg(long, env = "SKILL_RUNNER_DATA_DIR", default_value = "./data")]
    pub data_dir: PathBuf,
    /// Where installed skills live.
    #[arg(long, env = "SKILL_RUNNER_SKILLS_DIR", default_value = "./skills")]
    pub skills_dir: PathBuf,
    /// This node's name among those sharing a store, in logs and `/v1/system/version`
    /// (default: the host name and the process id, `host-1234`).
    #[arg(long, env = "SKILL_RUNNER_NODE_ID", value_parser = node_id)]
    pub node_id: Option<String>,
    /// Where the other nodes sharing the database reach this one (`http://10.0.0.5:8000`): a
    /// node asked for a run whose files this one holds forwards the read here (default: the
    /// listener's address; on 0.0.0.0 or ::, the host name with the port).
    #[arg(long, env = "SKILL_RUNNER_NODE_URL", value_parser = http_url)]
    pub node_url: Option<String>,
    /// Shared storage for the run folders of several nodes: `file:///mnt/shared`,
    /// `s3://bucket/prefix`, `gs://bucket/prefix` or `az://container/prefix` (credentials from
    /// the provider's usual variables). Unset: a run's files stay where it ran.
    #[arg(long, env = "SKILL_RUNNER_STORAGE_URL", value_parser = storage_url)]
    pub storage_url: Option<String>,
    /// Log lines as `text` (or `plain`) or `json`.
    #[arg(long, env = "LOG_FORMAT", default_value = "text", value_parser = log_format)]
    pub log_format: LogFormat,
    /// Export traces over OTLP to this collector (`http://host:4318`; `/v1/traces` is added).
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT", value_parser = http_url)]
    pub otel_exporter_otlp_endpoint: Option<String>,
    /// Export traces over OTLP to exactly this URL (wins over OTEL_EXPORTER_OTLP_ENDPOINT).
    #[arg(long, env = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", value_parser = http_url)]
    pub otel_exporter_otlp_traces_endpoint: Option<String>,
    /// How traces are sent: http/protobuf or http/json.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_PROTOCOL", default_value = "http/protobuf",
          value_parser = otlp_protocol)]
    pub otel_exporter_otlp_protocol: OtlpProtocol,
    /// The service name on exported traces.
    #[arg(long, env = "OTEL_SERVICE_NAME", default_value = "skill-runner")]
    pub otel_service_name: String,
    /// Longest wait, in milliseconds, before finished spans are sent.
    #[arg(long, env = "OTEL_BSP_SCHEDULE_DELAY", default_value_t = 5000, value_parser = positive)]
    pub otel_bsp_schedule_delay: u64,
    /// Log level: error, warn, info, debug, trace or off.
    #[arg(long, env = "LOG_LEVEL", default_value = "info", value_parser = log_level)]
    pub log_level: String,
    /// A full `tracing` filter; wins over LOG_LEVEL.
    #[arg(long, env = "RUST_LOG")]
    pub log_filter: Option<String>,

    /// Largest uploaded skill package, compressed bytes.
    #[arg(long, env = "SKILL_RUNNER_PACKAGE_MAX_BYTES", value_parser = positive,
          default_value_t = PackageLimits::default().max_compressed_bytes)]
    pub package_max_bytes: u64,
    /// Largest uploaded skill package, uncompressed bytes.
    #[arg(long, env = "SKILL_RUNNER_PACKAGE_MAX_UNCOMPRESSED_BYTES", value_parser = positive,
          default_value_t = PackageLimits::default().max_uncompressed_bytes)]
    pub package_max_uncompressed_bytes: u64,
    /// Most entries in an uploaded skill package.
    #[arg(long, env = "SKILL_RUNNER_PACKAGE_MAX_ENTRIES", value_parser = positive,
          default_value_t = PackageLimits::default().max_entries as u64)]
    pub package_max_entries: u64,
    /// Largest ratio of uncompressed to compressed size of any package entry.
    #[arg(long, env = "SKILL_RUNNER_PACKAGE_MAX_COMPRESSION_RATIO", value_parser = positive,
          default_value_t = PackageLimits::default().max_compression_ratio)]
    pub package_max_compression_ratio: u64,
    /// Largest temporary skill package, bytes.
    #[arg(long, env = "TEMP_SKILL_PACKAGE_MAX_BYTES", value_parser = positive,
          default_value_t = JobLimits::default().temp_package_max_bytes)]
    pub temp_skill_package_max_bytes: u64,
    /// Largest total size of the skills one run gets (its skill and the others it names).
    #[arg(long, env = "SKILL_RUNNER_RUN_SKILLS_MAX_BYTES", value_parser = positive,
          default_value_t = JobLimits::default().run_skills_max_bytes)]
    pub run_skills_max_bytes: u64,

    /// Runs admitted but not started; beyond it a create answers 429.
    #[arg(long, env = "SKILL_RUNNER_MAX_QUEUE_SIZE", value_parser = positive,
          default_value_t = JobLimits::default().max_queue_size as u64)]
    pub max_queue_size: u64,
    /// Runs executing at once, whatever their engine (default: four per CPU, 4 to 64, and at
    /// least SKILL_RUNNER_MAX_CONCURRENT_AGENTS).
    #[arg(long, env = "SKILL_RUNNER_MAX_CONCURRENT", value_parser = positive)]
    pub max_concurrent: Option<u64>,
    /// Of those, runs of an agent engine (default: SKILL_RUNNER_MAX_CONCURRENT when that is
    /// set, else the number of CPUs, at most 16).
    #[arg(long, env = "SKILL_RUNNER_MAX_CONCURRENT_AGENTS", value_parser = positive)]
    pub max_concurrent_agents: Option<u64>,
    /// Each tenant's runs running at once, unless its own quota says otherwise (unbounded
    /// when unset).
    #[arg(long, env = "SKILL_RUNNER_TENANT_MAX_RUNNING", value_parser = positive)]
    pub tenant_max_running: Option<u64>,
    /// Each tenant's runs queued at once, unless its own quota says otherwise; beyond it a
    /// create answers 429 (unbounded when unset).
    #[arg(long, env = "SKILL_RUNNER_TENANT_MAX_QUEUED", value_parser = positive)]
    pub tenant_max_queued: Option<u64>,
    /// Requests each tenant may create in each calendar minute (UTC), unless its own quota
    /// says otherwise;
    /// beyond it a create answers 429 (unbounded when unset).
    #[arg(long, env = "SKILL_RUNNER_TENANT_RUNS_PER_MINUTE", value_parser = positive)]
    pub tenant_runs_per_minute: Option<u64>,
    /// Bytes one upload of each tenant may carry, unless its own quota says otherwise (the
    /// upload caps alone when unset).
    #[arg(long, env = "SKILL_RUNNER_TENANT_UPLOAD_BYTES", value_parser = positive)]
    pub tenant_upload_bytes: Option<u64>,
    /// Engines with a bound of their own on turns at once, as `engine=count,…`
    /// (`codex=2,claude=1`): on this node, and among nodes in the whole cluster.
    #[arg(long, env = "SKILL_RUNNER_ENGINE_LIMITS", value_parser = engine_limits)]
    pub engine_limits: Option<EngineLimits>,
    /// Hard limit on one engine turn, seconds.
    #[arg(long, env = "SKILL_RUNNER_ENGINE_HARD_TIMEOUT_SECONDS", value_parser = positive,
          default_value_t = JobLimits::default().hard_timeout.as_secs())]
    pub engine_hard_timeout_seconds: u64,
    /// From SIGTERM to SIGKILL when a turn is stopped, seconds.
    #[arg(long, env = "SKILL_RUNNER_KILL_GRACE_SECONDS", value_parser = positive,
          default_value_t = JobLimits::default().kill_grace.as_secs())]
    pub kill_grace_seconds: u64,
    /// Most memory of one turn, MiB (a skill's runner.json limits may ask for less).
    #[arg(long, env = "SKILL_RUNNER_RUN_MEMORY_MB", value_parser = positive,
          default_value_t = Limits::default().memory_mb)]
    pub run_memory_mb: u64,
    /// Most processes of one turn at once.
    #[arg(long, env = "SKILL_RUNNER_RUN_PIDS", value_parser = positive,
          default_value_t = Limits::default().pids)]
    pub run_pids: u64,
    /// Most CPU time of one turn's processes, each, seconds.
    #[arg(long, env = "SKILL_RUNNER_RUN_CPU_SECONDS", value_parser = positive,
          default_value_t = Limits::default().cpu_seconds)]
    pub run_cpu_seconds: u64,
    /// Largest file a turn may write, MiB.
    #[arg(long, env = "SKILL_RUNNER_RUN_FILE_MB", value_parser = positive,
          default_value_t = Limits::default().file_mb)]
    pub run_file_mb: u64,
    /// Largest total size of a turn's workspace, MiB.
    #[arg(long, env = "SKILL_RUNNER_RUN_MAX_DISK_MB", value_parser = positive,
          default_value_t = Limits::default().disk_mb)]
    pub run_max_disk_mb: u64,
    /// Most open files of one turn's process.
    #[arg(long, env = "SKILL_RUNNER_RUN_OPEN_FILES", value_parser = positive,
          default_value_t = Limits::default().open_files)]
    pub run_open_files: u64,
    /// The uids confined turns run under when the service runs as root: `A-B` (`A` for turns
    /// that write `OPENSKILL_ALLOWED_ROOT`, one of the rest for each other turn) or one uid;
    /// unset: the service's own.
    #[arg(long, env = "SKILL_RUNNER_RUN_UIDS", value_parser = RunUids::parse)]
    pub run_uids: Option<RunUids>,
    /// Most of a turn's stdout, and of its stderr, stored, MiB; past it the run fails
    /// `RESOURCE_OUTPUT`.
    #[arg(long, env = "SKILL_RUNNER_RUN_MAX_LOG_MB", value_parser = positive,
          default_value_t = JobLimits::default().max_log_bytes >> 20)]
    pub run_max_log_mb: u64,
    /// Largest artifact served, and most artifact bytes one bundle holds, MiB.
    #[arg(long, env = "SKILL_RUNNER_SERVE_MAX_MB", value_parser = positive,
          default_value_t = JobLimits::default().max_served_bytes >> 20)]
    pub serve_max_mb: u64,
    /// Room set aside on the data volume, MiB: given up when it fills so runs can still be
    /// recorded; new work is refused (507) until it can be set aside again.
    #[arg(long, env = "SKILL_RUNNER_DISK_RESERVE_MB", value_parser = positive,
          default_value_t = JobLimits::default().disk_reserve_bytes >> 20)]
    pub disk_reserve_mb: u64,
    /// How long succeeded and canceled runs are kept, seconds.
    #[arg(long, env = "SKILL_RUNNER_RUN_RETENTION_SECONDS", value_parser = positive,
          default_value_t = JobLimits::default().retention.as_secs())]
    pub run_retention_seconds: u64,
    /// How long failed runs are kept, seconds.
    #[arg(long, env = "SKILL_RUNNER_FAILED_RUN_RETENTION_SECONDS", value_parser = positive,
          default_value_t = JobLimits::default().failed_retention.as_secs())]
    pub failed_run_retention_seconds: u64,
    /// Time between retention sweeps, seconds.
    #[arg(long, env = "SKILL_RUNNER_CLEANUP_INTERVAL_SECONDS", value_parser = positive,
          default_value_t = JobLimits::default().cleanup_interval.as_secs())]
    pub cleanup_interval_seconds: u64,
    /// Time between passes of the reconciler (runs marked running that no turn owns), seconds.
    #[arg(long, env = "SKILL_RUNNER_RECONCILE_INTERVAL_SECONDS", value_parser = positive,
          default_value_t = JobLimits::default().reconcile_interval.as_secs())]
    pub reconcile_interval_seconds: u64,
    /// Seconds a run whose engine is not logged in waits for a login (`waiting_auth`); 0
    /// refuses such runs at create.
    #[arg(long, env = "SKILL_RUNNER_AUTH_WAIT_SECONDS",
          default_value_t = JobLimits::default().auth_wait.as_secs())]
    pub auth_wait_seconds: u64,
    /// Among nodes sharing a PostgreSQL database: seconds of silence after which a node is
    /// lost and its turns end NODE_LOST (heartbeats every sixth of it).
    #[arg(long, env = "SKILL_RUNNER_NODE_TIMEOUT_SECONDS", value_parser = positive,
          default_value_t = JobLimits::default().node_timeout.as_secs())]
    pub node_timeout_seconds: u64,
    /// An event stream with nothing to say sends a heartbeat after this many seconds.
    #[arg(long, env = "SKILL_RUNNER_SSE_HEARTBEAT_SECONDS", value_parser = positive,
          default_value_t = JobLimits::default().sse_heartbeat.as_secs())]
    pub sse_heartbeat_seconds: u64,

    /// The only folder the `:invoke` file skills may read or write.
    #[arg(long, env = "OPENSKILL_ALLOWED_ROOT", default_value_os_t = InvokeConfig::default().allowed_root)]
    pub openskill_allowed_root: PathBuf,
    /// Every `{id}.py` here is a `cli:python` skill of `:invoke`.
    #[arg(long, env = "OPENSKILL_CLI_DIR", default_value_os_t = InvokeConfig::default().cli_dir)]
    pub openskill_cli_dir: PathBuf,
    /// `:invoke` skill manifests (`*.yaml`, `*.yml`, `*.json`).
    #[arg(long, env = "OPENSKILL_MANIFEST_DIR", default_value_os_t = InvokeConfig::default().manifest_dir)]
    pub openskill_manifest_dir: PathBuf,
    /// Per-call time limit of `:invoke` skills whose manifest sets none, milliseconds.
    #[arg(long, env = "OPENSKILL_TIMEOUT_MS", value_parser = positive,
          default_value_t = InvokeConfig::default().timeout.as_millis() as u64)]
    pub openskill_timeout_ms: u64,
    /// Skill programs of `:invoke` running at once; more calls wait within their time limit.
    #[arg(long, env = "OPENSKILL_MAX_PROCESSES", value_parser = positive,
          default_value_t = InvokeConfig::default().max_processes as u64)]
    pub openskill_max_processes: u64,
    /// Keep each `:invoke` call's scratch folder and add stderr to error details (true/false).
    #[arg(long, env = "OPENSKILL_DEBUG", action = ArgAction::Set, value_parser = switch,
          default_value_t = false)]
    pub openskill_debug: bool,

    /// Where the agent CLIs and their logins are kept
    /// [default: ~/.local/share/skill-runner/agent-cache].
    #[arg(long, env = "SKILL_RUNNER_AGENT_CACHE_DIR")]
    pub agent_cache_dir: Option<PathBuf>,
    /// The npm prefix the agent CLIs are installed into [default: <agent cache>/npm].
    #[arg(long, env = "SKILL_RUNNER_NPM_PREFIX")]
    pub npm_prefix: Option<PathBuf>,
    /// Where users log the agent CLIs in [default: <agent cache>/agent-home].
    #[arg(long, env = "SKILL_RUNNER_AGENT_HOME")]
    pub agent_home: Option<PathBuf>,
    /// Retries an agent CLI makes against a failing model before it gives up.
    #[arg(long, env = "SKILL_RUNNER_ENGINE_MAX_RETRIES", default_value_t = 1, value_parser = count)]
    pub engine_max_retries: u32,
    /// Legacy engines still given new runs, comma-separated: gemini, iflow (by default none,
    /// as the reference's v0.7 has it).
    #[arg(long, env = "SKILL_RUNNER_LEGACY_ENGINES", value_parser = legacy_engines)]
    pub legacy_engines: Option<::std::vec::Vec<Engine>>,
    /// The OpenAI authorization server codex, opencode and kilo sign accounts in at.
    #[arg(long, env = "SKILL_RUNNER_OPENAI_AUTH_ISSUER", value_parser = http_url,
          default_value = skill_runner_engines::config::OPENAI_AUTH_ISSUER)]
    pub openai_auth_issuer: String,
    /// The Anthropic authorization server claude signs accounts in at.
    #[arg(long, env = "SKILL_RUNNER_ANTHROPIC_AUTH_ISSUER", value_parser = http_url,
          default_value = skill_runner_engines::config::ANTHROPIC_AUTH_ISSUER)]
    pub anthropic_auth_issuer: String,
    /// The service's address as users' browsers reach it (e.g. https://runner.example.com): a
    /// browser sign-in comes back to its /v1/engines/auth/callback/openai. Unset: the user
    /// pastes the address the browser ended on.
    #[arg(long, env = "SKILL_RUNNER_OAUTH_CALLBACK_BASE_URL", value_parser = http_url)]
    pub oauth_callback_base_url: Option<String>,

    /// The model provider of `POST /v1/agent/chat` unless a chat names another: openai,
    /// dashscope (or qwen), openai-responses or anthropic.
    #[arg(long, env = "SKILL_RUNNER_AGENT_PROVIDER", default_value = "openai",
          value_parser = agent_provider)]
    pub agent_provider: String,
    /// Retries of a model request of the agent chat after a transient failure.
    #[arg(long, env = "SKILL_RUNNER_AGENT_MAX_RETRIES", default_value_t = 2, value_parser = count)]
    pub agent_max_retries: u32,
    /// How long the agent chat waits for a model provider to connect or to send more, seconds.
    #[arg(long, env = "SKILL_RUNNER_AGENT_TIMEOUT_SECONDS", value_parser = positive,
          default_value_t = 120)]
    pub agent_timeout_seconds: u64,

    /// Basic Auth on the administrative routes (true/false); needs a user and a password.
    #[arg(long, env = "UI_BASIC_AUTH_ENABLED", action = ArgAction::Set, value_parser = switch,
          default_value_t = false)]
    pub ui_basic_auth_enabled: bool,
    /// The Basic Auth user (the password is UI_BASIC_AUTH_PASSWORD, environment only).
    #[arg(long, env = "UI_BASIC_AUTH_USERNAME", value_parser = basic_auth_user)]
    pub ui_basic_auth_username: Option<String>,
    /// A file of bearer tokens, one per line (`#` comments; `sha256:<hex>` digests allowed).
    #[arg(long, env = "SKILL_RUNNER_API_TOKENS_FILE")]
    pub api_tokens_file: Option<PathBuf>,

    /// The day the console's legacy data routes (`/ui/skills/table`, …) go away, announced in
    /// their `Sunset` header (YYYY-MM-DD).
    #[arg(long, env = "SKILL_RUNNER_UI_LEGACY_API_SUNSET", default_value = "2026-06-30",
          value_parser = date)]
    pub ui_legacy_api_sunset: chrono::NaiveDate,
    /// The legacy data routes: `deprecated` (served, with Deprecation, Sunset and Link headers)
    /// or `gone` (410).
    #[arg(long = "ui-legacy-api-mode", env = "SKILL_RUNNER_UI_LEGACY_API_MODE",
          default_value = "deprecated", action = ArgAction::Set, value_parser = legacy_gone)]
    pub ui_legacy_api_gone: bool,

    /// Turn confinement with Landlock: auto, required or off.
    #[arg(long, env = "SKILL_RUNNER_SANDBOX", default_value = "auto", value_parser = sandbox)]
    pub sandbox: SandboxMode,
    /// More names the service answers to (`Host`), comma-separated: exact, `*.domain` or `*`;
    /// besides its bind address (and `localhost`, `127.0.0.1`, `::1` on loopback).
    #[arg(long, env = "SKILL_RUNNER_ALLOWED_HOSTS", value_parser = host_list)]
    pub allowed_hosts: Option<::std::vec::Vec<String>>,
    /// Open HTTP connections at most; past it a new one is answered 503 and closed.
    #[arg(long, env = "SKILL_RUNNER_MAX_CONNECTIONS", value_parser = positive,
          default_value_t = ConnectionLimits::default().max as u64)]
    pub max_connections: u64,
    /// Open HTTP connections from one client address at most; past it a new one is answered
    /// 503 (a probe is served all the same).
    #[arg(long, env = "SKILL_RUNNER_MAX_CONNECTIONS_PER_ADDRESS", value_parser = positive,
          default_value_t = ConnectionLimits::default().max_per_address as u64)]
    pub max_connections_per_address: u64,
    /// Open event streams of one run (or agent session) at most; past it opening one is 429.
    #[arg(long, env = "SKILL_RUNNER_MAX_STREAMS_PER_RUN", value_parser = positive,
          default_value_t = StreamLimits::default().per_run as u64)]
    pub max_streams_per_run: u64,
    /// Open event streams from one client address at most.
    #[arg(long, env = "SKILL_RUNNER_MAX_STREAMS_PER_ADDRESS", value_parser = positive,
          default_value_t = StreamLimits::default().per_address as u64)]
    pub max_streams_per_address: u64,
    /// Open event streams of one tenant's callers at most.
    #[arg(long, env = "SKILL_RUNNER_MAX_STREAMS_PER_TENANT", value_parser = positive,
          default_value_t = StreamLimits::default().per_tenant as u64)]
    pub max_streams_per_tenant: u64,
    /// Bytes per second a request body must come at on average, once its first 10 s passed.
    #[arg(long, env = "SKILL_RUNNER_BODY_MIN_BYTES_PER_SECOND", value_parser = positive,
          default_value_t = ConnectionLimits::default().body.min_rate)]
    pub body_min_bytes_per_second: u64,
    /// Seconds a whole request body may take.
    #[arg(long, env = "SKILL_RUNNER_BODY_TIMEOUT_SECONDS", value_parser = positive,
          default_value_t = ConnectionLimits::default().body.timeout.as_secs())]
    pub body_timeout_seconds: u64,
    /// Seconds a client has to send a request's headers, from its connection's start or the
    /// end of its previous response (a keep-alive connection's idle time).
    #[arg(long, env = "SKILL_RUNNER_HEADER_TIMEOUT_SECONDS", value_parser = positive,
          default_value_t = ConnectionLimits::default().header_read_timeout.as_secs())]
    pub header_timeout_seconds: u64,
    /// Hosts a skill's `runner.json` `network.allow` may name (comma-separated `host[:port]`,
    /// `*.domain[:port]` or `*`); unset: none. Internal addresses (loopback, private,
    /// link-local, metadata) only for an entry naming the exact `host:port`.
    #[arg(long, env = "SKILL_RUNNER_EGRESS_ALLOW", value_parser = egress_allow)]
    pub egress_allow: Option<::std::vec::Vec<HostPattern>>,
    /// Webhook targets allowed despite the address rules (comma-separated `host[:port]`):
    /// webhooks and callbacks otherwise go only to public addresses, never to loopback,
    /// private, link-local, carrier-grade NAT or metadata ones.
    #[arg(long, env = "SKILL_RUNNER_WEBHOOK_ALLOW", value_parser = webhook_allow)]
    pub webhook_allow: Option<crate::webhooks::Allowed>,
    /// Extra CA certificates (a PEM file) the egress trusts, besides the system's roots, when it
    /// connects to a host for a turn whose secret it puts in (a private gateway; tests).
    #[arg(long, env = "SKILL_RUNNER_EGRESS_CA_BUNDLE")]
    pub egress_ca_bundle: Option<PathBuf>,
    /// Whether confined turns get pid, network and mount namespaces of their own where the
    /// kernel allows them (`auto`), or never (`off`: they share the service's network, bounded
    /// by Landlock's TCP rules).
    #[arg(long, env = "SKILL_RUNNER_NAMESPACES", default_value = "auto", action = ArgAction::Set,
          value_parser = namespaces)]
    pub namespaces: bool,
    /// More folders (`:`-separated) every confined process may read and execute.
    #[arg(long, env = "SKILL_RUNNER_SANDBOX_READ_PATHS", value_parser = read_paths)]
    pub sandbox_read_paths: Option<::std::vec::Vec<PathBuf>>,
    /// Where `SKILL.md` skills are indexed (`/v1/skill-docs`), `:`-separated, strongest first
    /// [default: ./.claude/skills, ./.claude/skill, ./.agents/skills, the skills dir, ./skill,
    /// $OPENAGENTIC_SDK_HOME (~/.openagentic-sdk)/skills and /skill,
    /// $OPENAGENTIC_AGENTS_HOME (~/.agents)/skills and /skill].
    #[arg(long, env = "SKILL_RUNNER_SKILL_DOC_ROOTS", value_parser = read_paths)]
    pub skill_doc_roots: Option<::std::vec::Vec<PathBuf>>,
    /// More variables (comma-separated names) child processes inherit.
    #[arg(long, env = "SKILL_RUNNER_CHILD_ENV_PASSTHROUGH",
          value_parser = crate::process::env::parse_passthrough)]
    pub child_env_passthrough: Option<::std::vec::Vec<String>>,

    /// Every setting above as it came out of the parse, for the console's Settings page.
    #[arg(skip)]
    pub effective: Vec<Effective>,
}

/// Why no settings came out of a parse.
#[derive(Debug)]
pub enum Refused {
    /// `--help` (or `--version`) was asked for: the text to print, then exit with success.
    Help(String),
    Invalid(ConfigError),
}

impl Settings {
    /// The settings given by `args` (the words after `serve`) over the variables in `vars`.
    /// The settings of the subcommand `name` (`serve` or `mcp`, which take the same ones), from
    /// `vars` and then `args`; its help when `args` asks for it.
    pub fn parse(
        name: &str,
        args: &[OsString],
        vars: &BTreeMap<String, String>,
    ) -> Result<Self, Refused> {
        // Values are never shown: the process environment holds none of them, and some are secret.
        let mut documented = Self::command().mut_args(|arg| arg.hide_env_values(true));
        if name == "mcp" {
            documented = documented.name("skill-runner mcp").about(
                "Serve the invocable skills as an MCP server over stdin and stdout (for MCP \
                 clients that start their servers), logging on stderr. It takes the settings of \
                 `serve`: each an environment variable or, for all but secrets, the flag shown.",
            );
        }
        let mut argv: Vec<OsString> = vec!["skill-runner serve".into()];
        let mut from_vars = BTreeMap::new();
        for arg in documented.get_arguments() {
            let (Some(variable), Some(long)) = (arg.get_env(), arg.get_long()) else {
                continue;
            };
            let variable = variable.to_string_lossy();
            if let Some(value) = vars.get(variable.as_ref()).filter(|v| !v.trim().is_empty()) {
                argv.push(format!("--{long}={value}").into());
                from_vars.insert(long.to_owned(), variable.into_owned());
            }
        }
        argv.extend(args.iter().cloned());
        // Strip the `env` links so a variable of this process never stands in for a missing one.
        let command = Self::command().mut_args(|arg| arg.env(None));
        let given_later = |long: &str| {
            args.iter().any(|a| {
                let a = a.to_string_lossy();
                a == format!("--{long}") || a.starts_with(&format!("--{long}="))
            })
        };
        let parsed = command.try_get_matches_from(argv).and_then(|matches| {
            let mut settings = Self::from_arg_matches(&matches)?;
            settings.effective = documented
                .get_arguments()
                .filter_map(|arg| {
                    let (variable, long) = (arg.get_env()?.to_string_lossy(), arg.get_long()?);
                    let id = arg.get_id().as_str();
                    let value = matches.get_raw(id).map(|values| {
                        let values: Vec<_> = values.map(|v| v.to_string_lossy()).collect();
                        values.join(",")
                    });
                    let source = match matches.value_source(id) {
                        None => Source::Unset,
                        Some(ValueSource::DefaultValue) => Source::Default,
                        Some(_) if from_vars.contains_key(long) && !given_later(long) => {
                            Source::Environment
                        }
                        Some(_) => Source::Flag,
                    };
                    let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
                    let value = value.as_deref();
                    Some(Effective::new(&variable, Some(long), value, source, &help))
                })
                .collect();
            Ok(settings)
        });
        parsed.map_err(|e| match e.kind() {
            ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
                Refused::Help(documented.clone().render_long_help().to_string())
            }
            _ => Refused::Invalid(refusal(&e, |long| {
                from_vars
                    .get(long)
                    .filter(|_| !given_later(long))
                    .cloned()
                    .unwrap_or_else(|| format!("--{long}"))
            })),
        })
    }
}

/// A clap error as one configuration line naming the variable (or flag) that carries it.
fn refusal(e: &clap::Error, name_of: impl Fn(&str) -> String) -> ConfigError {
    let long = match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(arg)) => arg
            .split_whitespace()
            .next()
            .and_then(|a| a.strip_prefix("--"))
            .map(|a| a.split('=').next().unwrap_or(a).to_owned()),
        _ => None,
    };
    let problem = match (e.kind(), std::error::Error::source(e)) {
        (ErrorKind::ValueValidation, Some(cause)) => cause.to_string(),
        _ => {
            let rendered = e.render().to_string();
            let first = rendered.lines().next().unwrap_or_default();
            first.trim_start_matches("error: ").to_owned()
        }
    };
    match long {
        Some(long) if e.kind() == ErrorKind::ValueValidation => {
            ConfigError::new(name_of(&long), problem)
        }
        _ => ConfigError::new("command line", problem),
    }
}

fn bind(raw: &str) -> Result<SocketAddr, String> {
    let raw = raw.trim();
    raw.parse::<SocketAddr>()
        .or_else(|_| raw.parse::<IpAddr>().map(|ip| SocketAddr::new(ip, 8000)))
        .map_err(|_| format!("'{raw}' is not an address (expected HOST:PORT, e.g. 127.0.0.1:8000)"))
}

fn host(raw: &str) -> Result<IpAddr, String> {
    raw.trim()
        .parse()
        .map_err(|_| format!("'{raw}' is not an IP address (e.g. 127.0.0.1, 0.0.0.0 or ::1)"))
}

fn port(raw: &str) -> Result<u16, String> {
    raw.trim()
        .parse()
        .map_err(|_| format!("'{raw}' is not a port number (expected 0-65535)"))
}

fn node_id(raw: &str) -> Result<String, String> {
    let ok = |c: char| c.is_ascii_alphanumeric() || "-_.:".contains(c);
    match raw.trim() {
        id if !id.is_empty() && id.len() <= 64 && id.chars().all(ok) => Ok(id.to_owned()),
        _ => Err(format!(
            "'{raw}' is not a node id: 1 to 64 letters, digits, '-', '_', '.' or ':'"
        )),
    }
}

fn positive(raw: &str) -> Result<u64, String> {
    match raw.trim().parse::<u64>() {
        Ok(v) if v > 0 => Ok(v),
        _ => Err(format!("'{raw}' is not a positive whole number")),
    }
}

fn agent_provider(raw: &str) -> Result<String, String> {
    match skill_runner_agent::config::preset(raw.trim()) {
        Some(preset) => Ok(preset.name.to_owned()),
        None => {
            let known: Vec<&str> = skill_runner_agent::config::PRESETS
                .iter()
                .map(|p| p.name)
                .collect();
            Err(format!(
                "'{raw}' is not a provider (expected one of {})",
                known.join(", ")
            ))
        }
    }
}

fn count(raw: &str) -> Result<u32, String> {
    raw.trim()
        .parse()
        .map_err(|_| format!("'{raw}' is not a whole number"))
}

/// One rule for every on/off variable.
fn switch(raw: &str) -> Result<bool, String> {
    match raw.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(format!("'{raw}' is not a switch (expected true or false)")),
    }
}

fn http_url(raw: &str) -> Result<String, String> {
    let url = raw.trim();
    match url.split_once("://") {
        Some(("http" | "https", rest)) if !rest.is_empty() => Ok(url.to_owned()),
        _ => Err(format!("'{raw}' is not an http:// or https:// URL")),
    }
}

/// `engine=count` pairs, each engine once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineLimits(pub Vec<(Engine, usize)>);

fn engine_limits(raw: &str) -> Result<EngineLimits, String> {
    let mut limits: Vec<(Engine, usize)> = Vec::new();
    for pair in raw.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, count) = pair
            .split_once('=')
            .ok_or_else(|| format!("'{pair}' is not engine=count (as in codex=2)"))?;
        let engine = Engine::parse(name.trim()).ok_or_else(|| {
            let known: Vec<&str> = Engine::ALL.iter().map(|e| e.as_str()).collect();
            format!(
                "'{}' is not an engine (expected one of {})",
                name.trim(),
                known.join(", ")
            )
        })?;
        let count = match count.trim().parse::<usize>() {
            Ok(n) if n > 0 => n,
            _ => {
                return Err(format!(
                    "'{pair}': the count must be a positive whole number"
                ));
            }
        };
        if limits.iter().any(|(e, _)| *e == engine) {
            return Err(format!("'{engine}' is given twice"));
        }
        limits.push((engine, count));
    }
    Ok(EngineLimits(limits))
}

fn storage_url(raw: &str) -> Result<String, String> {
    let url = raw.trim();
    match url.split_once("://") {
        Some(("file" | "s3" | "s3a" | "gs" | "az" | "abfs" | "abfss" | "azure", rest))
            if !rest.is_empty() =>
        {
            Ok(url.to_owned())
        }
        _ => Err(format!(
            "'{raw}' is not a storage URL (file:///path, s3://bucket, gs://bucket or \
             az://container)"
        )),
    }
}

fn otlp_protocol(raw: &str) -> Result<OtlpProtocol, String> {
    match raw.trim() {
        "http/protobuf" => Ok(OtlpProtocol::HttpProtobuf),
        "http/json" => Ok(OtlpProtocol::HttpJson),
        "grpc" => Err("grpc is not built in: use http/protobuf (port 4318)".into()),
        _ => Err(format!(
            "'{raw}' is not an OTLP protocol (expected http/protobuf or http/json)"
        )),
    }
}

fn log_level(raw: &str) -> Result<String, String> {
    let level = raw.trim().to_ascii_lowercase();
    match level.as_str() {
        "error" | "warn" | "info" | "debug" | "trace" | "off" => Ok(level),
        _ => Err(format!(
            "'{raw}' is not a log level (expected error, warn, info, debug, trace or off; a \
             full filter goes in RUST_LOG)"
        )),
    }
}

fn log_format(raw: &str) -> Result<LogFormat, String> {
    match raw.trim().to_ascii_lowercase().as_str() {
        "text" | "plain" => Ok(LogFormat::Text),
        "json" => Ok(LogFormat::Json),
        _ => Err(format!(
            "'{raw}' is not a log format (expected text or json)"
        )),
    }
}

fn sandbox(raw: &str) -> Result<SandboxMode, String> {
    SandboxMode::parse(raw)
        .ok_or_else(|| format!("'{raw}' is not a sandbox mode (expected auto, required or off)"))
}

fn namespaces(raw: &str) -> Result<bool, String> {
    one_of(raw, "a namespaces mode", "auto", "off")
}

/// `true` for `yes`, `false` for `no` (any case), else an error naming `what` was expected.
fn one_of(raw: &str, what: &str, yes: &str, no: &str) -> Result<bool, String> {
    match raw.trim().to_ascii_lowercase() {
        word if word == yes => Ok(true),
        word if word == no => Ok(false),
        _ => Err(format!("'{raw}' is not {what} (expected {yes} or {no})")),
    }
}

fn host_list(raw: &str) -> Result<Vec<String>, String> {
    let names: Vec<String> = raw
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .collect();
    match names.iter().find(|n| n.contains(['/', ' ', '@'])) {
        Some(bad) => Err(format!(
            "'{bad}' is not a host name (expected names like runner.example.com, \
             *.example.com or *)"
        )),
        None => Ok(names),
    }
}

fn legacy_engines(raw: &str) -> Result<Vec<Engine>, String> {
    raw.split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(|name| {
            Engine::parse(name)
                .filter(|e| e.is_legacy())
                .ok_or_else(|| {
                    format!(
                        "'{name}' is not a legacy engine: the legacy engines are gemini and iflow"
                    )
                })
        })
        .collect()
}

fn egress_allow(raw: &str) -> Result<Vec<HostPattern>, String> {
    HostPattern::parse_list(raw)
}

fn webhook_allow(raw: &str) -> Result<crate::webhooks::Allowed, String> {
    crate::webhooks::Allowed::parse(raw)
}

fn date(raw: &str) -> Result<chrono::NaiveDate, String> {
    chrono::NaiveDate::parse_from_str(raw.trim(), "%Y-%m-%d")
        .map_err(|_| format!("'{raw}' is not a date (expected YYYY-MM-DD)"))
}

fn legacy_gone(raw: &str) -> Result<bool, String> {
    one_of(raw, "a mode", "gone", "deprecated")
}

fn read_paths(raw: &str) -> Result<Vec<PathBuf>, String> {
    Ok(std::env::split_paths(raw)
        .filter(|p| !p.as_os_str().is_empty())
        .collect())
}

fn basic_auth_user(raw: &str) -> Result<String, String> {
    if raw.contains(':') {
        return Err("must not contain ':' (Basic Auth separates user and password with it)".into());
    }
    Ok(raw.to_owned())
}
