//! What the job core, the invoke host and the agent are configured with; the service reads it
//! from its environment at start-up (the server's `config`) and hands each its part.

use std::path::{Path, PathBuf};
use std::time::Duration;

pub use skill_runner_skill::archive::PackageLimits;

/// The layout of the service's data dir: every file and folder of its state is named here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataDir(PathBuf);

impl DataDir {
    /// What the service keeps in its data dir, whether or not it exists yet.
    pub const ENTRIES: [&str; 13] = [
        "skill_runner.db",
        "skill_runner.db-wal",
        "skill_runner.db-shm",
        "runs",
        "requests",
        "temp_skill_runs",
        "skill_installs",
        "invocations",
        "sessions",
        "upgrades",
        ".disk-reserve",
        ".storage-scratch",
        "run_secrets",
    ];

    pub fn new(root: PathBuf) -> Self {
        Self(root)
    }

    pub fn root(&self) -> &Path {
        &self.0
    }

    /// The SQLite database file.
    pub fn database(&self) -> PathBuf {
        self.0.join("skill_runner.db")
    }

    /// Run folders (`<data>/runs/<run_id>`).
    /// Archives on their way to or from shared storage.
    pub fn storage_scratch(&self) -> PathBuf {
        self.0.join(".storage-scratch")
    }

    pub fn runs(&self) -> PathBuf {
        self.0.join("runs")
    }

    /// The secrets of requests whose runs have not ended (`<data>/run_secrets/<request_id>.json`,
    /// readable by the service's user only).
    pub fn run_secrets(&self) -> PathBuf {
        self.0.join("run_secrets")
    }

    /// Upload staging of requests that wait for their inputs (`<data>/requests/<request_id>`).
    pub fn requests(&self) -> PathBuf {
        self.0.join("requests")
    }

    /// Scratch folders of invoke calls (`<data>/invocations/<call id>`), removed after each call.
    pub fn invocations(&self) -> PathBuf {
        self.0.join("invocations")
    }

    /// Agent chat sessions (`<data>/sessions/<session id>`).
    pub fn sessions(&self) -> PathBuf {
        self.0.join("sessions")
    }

    /// Package installs under way (`<data>/skill_installs/requests/<request_id>`).
    pub fn installs(&self) -> PathBuf {
        self.0.join("skill_installs")
    }

    /// npm's output of each engine upgrade (`<data>/upgrades/<request_id>/`).
    pub fn upgrades(&self) -> PathBuf {
        self.0.join("upgrades")
    }

    /// The room set aside for recording runs once the volume is full (see
    /// [`crate::disk_space`]).
    pub fn disk_reserve(&self) -> PathBuf {
        self.0.join(".disk-reserve")
    }

    /// Temporary skill packages (`<data>/temp_skill_runs/<request_id>`).
    pub fn temp_runs(&self) -> PathBuf {
        self.0.join("temp_skill_runs")
    }
}

/// What the job core is configured with.
#[derive(Debug, Clone)]
pub struct JobsConfig {
    /// This service's name among the nodes sharing its store, in its run transition logs
    /// (`SKILL_RUNNER_NODE_ID`).
    pub node_id: String,
    pub data: DataDir,
    pub limits: JobLimits,
    /// The bounds of an uploaded skill package.
    pub package_limits: PackageLimits,
    /// Engines with a bound of their own on turns at once, on this node and, among nodes, in
    /// the whole cluster (`SKILL_RUNNER_ENGINE_LIMITS`).
    pub engine_limits: crate::jobs::queue::EngineLimits,
    /// Where settled run folders are copied for the other nodes (`SKILL_RUNNER_STORAGE_URL`);
    /// only ever set among nodes sharing a database.
    pub storage: Option<crate::storage::Storage>,
    /// The quotas of a tenant that sets none of its own (`SKILL_RUNNER_TENANT_*`).
    pub tenant_quotas: crate::store::Quotas,
    /// Webhook targets allowed despite the address rules (`SKILL_RUNNER_WEBHOOK_ALLOW`).
    pub webhook_allow: crate::webhooks::Allowed,
}

/// Queue, timeouts and retention of job runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobLimits {
    /// Runs admitted but not started; beyond it creates get 429 (`SKILL_RUNNER_MAX_QUEUE_SIZE`).
    pub max_queue_size: usize,
    /// Runs executing at once, whatever their engine (`SKILL_RUNNER_MAX_CONCURRENT`).
    pub max_concurrent: usize,
    /// Of those, runs of an agent engine (`SKILL_RUNNER_MAX_CONCURRENT_AGENTS`): each CLI
    /// takes about a core, where a `script` turn is a short program under its own limits.
    pub max_concurrent_agents: usize,
    /// Hard limit on one engine turn (`SKILL_RUNNER_ENGINE_HARD_TIMEOUT_SECONDS`).
    pub hard_timeout: Duration,
    /// SIGTERM to SIGKILL (`SKILL_RUNNER_KILL_GRACE_SECONDS`).
    pub kill_grace: Duration,
    /// Largest temporary skill package (`TEMP_SKILL_PACKAGE_MAX_BYTES`).
    pub temp_package_max_bytes: u64,
    /// Largest total size of the skills one run gets (`SKILL_RUNNER_RUN_SKILLS_MAX_BYTES`).
    pub run_skills_max_bytes: u64,
    /// Succeeded and canceled runs are kept this long (`SKILL_RUNNER_RUN_RETENTION_SECONDS`).
    pub retention: Duration,
    /// Failed runs are kept this long (`SKILL_RUNNER_FAILED_RUN_RETENTION_SECONDS`).
    pub failed_retention: Duration,
    /// Time between retention sweeps (`SKILL_RUNNER_CLEANUP_INTERVAL_SECONDS`).
    pub cleanup_interval: Duration,
    /// Time between reconciler passes (`SKILL_RUNNER_RECONCILE_INTERVAL_SECONDS`).
    pub reconcile_interval: Duration,
    /// How long a run whose engine is not logged in waits (`waiting_auth`) for a login before
    /// it fails; zero refuses such runs at create instead (`SKILL_RUNNER_AUTH_WAIT_SECONDS`).
    pub auth_wait: Duration,
    /// Among nodes sharing a PostgreSQL database: a node silent this long is lost, its turns
    /// end `NODE_LOST`; each node renews its heartbeat every sixth of it
    /// (`SKILL_RUNNER_NODE_TIMEOUT_SECONDS`).
    pub node_timeout: Duration,
    /// An event stream with nothing to say sends a heartbeat after this long
    /// (`SKILL_RUNNER_SSE_HEARTBEAT_SECONDS`).
    pub sse_heartbeat: Duration,
    /// Most bytes of a run's stdout, and of its stderr, stored; a turn past it fails
    /// `RESOURCE_OUTPUT` (`SKILL_RUNNER_RUN_MAX_LOG_MB`).
    pub max_log_bytes: u64,
    /// Largest artifact served, and most bytes of artifacts one bundle holds
    /// (`SKILL_RUNNER_SERVE_MAX_MB`).
    pub max_served_bytes: u64,
    /// Room set aside on the data volume for recording runs once it is full
    /// (`SKILL_RUNNER_DISK_RESERVE_MB`, see [`crate::disk_space`]).
    pub disk_reserve_bytes: u64,
}

/// The synchronous invoke host (`OPENSKILL_*`, the names of the user's documents).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvokeConfig {
    /// The only folder the file skills may read or write (`OPENSKILL_ALLOWED_ROOT`); absolute
    /// once [`Config::prepare_dirs`] has run.
    pub allowed_root: PathBuf,
    /// Every `{id}.py` here is a `cli:python` skill (`OPENSKILL_CLI_DIR`).
    pub cli_dir: PathBuf,
    /// Skill manifests, `*.yaml`, `*.yml` or `*.json` (`OPENSKILL_MANIFEST_DIR`).
    pub manifest_dir: PathBuf,
    /// Per-call time limit of skills whose manifest sets none (`OPENSKILL_TIMEOUT_MS`).
    pub timeout: Duration,
    /// Keeps each call's scratch folder and adds stderr to error details (`OPENSKILL_DEBUG`).
    pub debug: bool,
    /// Skill programs (`cli:*`, `script`) running at once; more calls wait, within their time
    /// limit (`OPENSKILL_MAX_PROCESSES`).
    pub max_processes: usize,
}

impl Default for InvokeConfig {
    fn default() -> Self {
        Self {
            allowed_root: PathBuf::from("./data/files"),
            cli_dir: PathBuf::from("./skills_cli"),
            manifest_dir: PathBuf::from("./skills_manifests"),
            timeout: Duration::from_millis(15_000),
            debug: false,
            max_processes: std::thread::available_parallelism()
                .map_or(2, |n| n.get())
                .saturating_mul(4)
                .clamp(4, 64),
        }
    }
}

impl Default for JobLimits {
    fn default() -> Self {
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        Self {
            max_queue_size: 128,
            // Script turns wait on the kernel between short bursts of CPU (their set-up and
            // teardown): with one slot per core the cores sit partly idle (docs/benchmarks.md).
            max_concurrent: cpus.saturating_mul(4).clamp(4, 64),
            max_concurrent_agents: cpus.clamp(1, 16),
            hard_timeout: Duration::from_secs(1200),
            kill_grace: Duration::from_secs(5),
            temp_package_max_bytes: 20 * 1024 * 1024,
            run_skills_max_bytes: 64 * 1024 * 1024,
            retention: Duration::from_secs(7 * 24 * 3600),
            failed_retention: Duration::from_secs(12 * 3600),
            cleanup_interval: Duration::from_secs(12 * 3600),
            reconcile_interval: Duration::from_secs(30),
            auth_wait: Duration::from_secs(900),
            node_timeout: Duration::from_secs(30),
            sse_heartbeat: Duration::from_secs(5),
            max_log_bytes: 256 << 20,
            max_served_bytes: 1 << 30,
            disk_reserve_bytes: 16 << 20,
        }
    }
}
