//! The store: the only crate that speaks SQL, with two backends behind one [`Backend`] trait.
//!
//! By default one SQLite database file (`<data>/skill_runner.db`) in WAL mode is the source of
//! truth for every request the service accepted; with `SKILL_RUNNER_DATABASE_URL=postgres://…`
//! it is a PostgreSQL database ([`Postgres`]). Each part's trait, its rows and the SQLite SQL
//! live in the part's file (`jobs.rs`, …), PostgreSQL's beside them in `postgres/`; migrations
//! are in `migrations/sqlite` and `migrations/postgres`. Queries use runtime binding (no compile-time database), and every
//! state change is a guarded `UPDATE ... WHERE status IN (...)`, so a late or repeated writer can
//! never move a finished request back.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use serde::{Deserialize, Serialize};
use skill_runner_types::engine::Engine;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

mod arrivals;
mod background;
mod checkpoint;
mod engines;
mod grouped_creates;
mod installs;
mod interactions;
mod jobs;
mod postgres;
mod recent;
mod repairs;
mod schedules;
mod secrets;
mod tenants;
mod watch;
mod webhooks;

pub use arrivals::{ArrivalStore, Remembered, RetriedAttempt};
pub use engines::{
    EngineStore, StoredMcpServer, StoredProvider, StoredSnapshot, Upgrade, UpgradeResult,
};
pub use installs::{InstallPhase, InstallRequest, InstallStore};
pub use interactions::*;
pub use jobs::*;
pub use postgres::{ClusterLock, Postgres, Signal, Signals};
pub use repairs::{RepairRound, RepairStore};
pub use schedules::{Schedule, ScheduleStore, Ticked};
pub use secrets::{NewSecret, SecretStore, StoredSecret};
pub use tenants::{
    ApiKey, AuditEntry, DEFAULT_TENANT, NewAudit, NewKey, Quotas, Role, Tenant, TenantDeletion,
    TenantStore,
};
pub use webhooks::{
    Attempt as WebhookAttempt, Claimed as ClaimedDelivery, Delivery, EVENTS as WEBHOOK_EVENTS,
    NewWebhook, Next as AfterTry, TryRecord, Webhook, WebhookStore,
};

/// Lifecycle of a background task: a package install, an engine upgrade (and each engine in it).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, sqlx::Type, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
#[sqlx(type_name = "TEXT", rename_all = "lowercase")]
#[derive(strum::IntoStaticStr)]
#[strum(serialize_all = "lowercase")]
pub enum TaskStatus {
    Queued,
    Running,
    Succeeded,
    Failed,
}

impl TaskStatus {
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    pub fn is_active(self) -> bool {
        matches!(self, Self::Queued | Self::Running)
    }
}

/// A run not queued because the queue is full: PostgreSQL's bound on the queued runs of every
/// node together, checked where the run is written, under one lock (SQLite's single node
/// bounds its queue in memory before it writes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueFull;

impl std::fmt::Display for QueueFull {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the queue of queued runs is full")
    }
}

impl std::error::Error for QueueFull {}

/// The database cannot take writes now: its file was deleted or replaced under the service,
/// cannot be written, or failed to (the reason, for the log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable(pub String);

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the database is unavailable: {}", self.0)
    }
}

impl std::error::Error for Unavailable {}

/// The SQLite file is open in another process: a running service holds it alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held(pub PathBuf);

impl std::fmt::Display for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the database {} is in use by another process (a running skill-runner holds it alone)",
            self.0.display()
        )
    }
}

impl std::error::Error for Held {}

/// Whether `cause` is the database failing under the service rather than the request:
/// [`Unavailable`], SQLite's I/O errors (`SQLITE_IOERR`, `SQLITE_READONLY`,
/// `SQLITE_CANTOPEN`), PostgreSQL's lost or refused connections and read-only transactions.
pub fn is_unavailable(cause: &(dyn std::error::Error + 'static)) -> bool {
    if cause.downcast_ref::<Unavailable>().is_some() {
        return true;
    }
    match cause.downcast_ref::<sqlx::Error>() {
        Some(sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut) => true,
        Some(sqlx::Error::Database(db)) => {
            let code = db.code().unwrap_or_default();
            if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
                // An extended code keeps its primary code in its low byte.
                matches!(code.parse::<u32>().map(|c| c & 0xff), Ok(8 | 10 | 14))
            } else {
                code.starts_with("08") || matches!(&*code, "25006" | "57P01" | "57P02" | "57P03")
            }
        }
        _ => false,
    }
}

/// Whether `cause` is the database finding no room for a write (SQLite's `SQLITE_FULL`,
/// PostgreSQL's `disk_full`).
pub fn is_storage_full(cause: &(dyn std::error::Error + 'static)) -> bool {
    matches!(cause.downcast_ref::<sqlx::Error>(), Some(sqlx::Error::Database(db))
        if matches!(db.code().as_deref(), Some("13" | "53100")))
}

/// Everything the service keeps about what it accepted, whatever holds it: a backend
/// implements each part ([`JobStore`], [`ArrivalStore`], [`InteractionStore`], [`RepairStore`],
/// [`InstallStore`], [`EngineStore`], [`TenantStore`], [`SecretStore`]): [`Sqlite`] or
/// [`Postgres`].
#[async_trait::async_trait]
pub trait Backend:
    JobStore
    + ArrivalStore
    + InteractionStore
    + RepairStore
    + InstallStore
    + EngineStore
    + TenantStore
    + SecretStore
    + WebhookStore
    + ScheduleStore
    + std::fmt::Debug
    + Send
    + Sync
{
    /// Waits for open connections to finish and closes them.
    async fn close(&self);

    /// Whether the store answers and holds every migration this build knows (readiness).
    async fn check(&self) -> anyhow::Result<()>;

    /// Which database this is (`sqlite` or `postgres`).
    fn kind(&self) -> &'static str;

    /// `Ok` while what was written is where a restart will find it: an error once the SQLite
    /// file was deleted or replaced under the service (see `watch`).
    fn in_place(&self) -> Result<(), Unavailable> {
        Ok(())
    }

    /// The coordination of the nodes sharing this database; `None` for SQLite (one node).
    fn cluster(&self) -> Option<&dyn Cluster> {
        None
    }
}

/// What the nodes sharing one database agree on (PostgreSQL): who is alive, who runs which
/// run, and the signals they send each other. A node runs only runs it claimed; every write
/// about a turn checks the claim (fencing), and a node declared lost finds its claims gone.
#[async_trait::async_trait]
pub trait Cluster: Send + Sync {
    /// This node's id (`SKILL_RUNNER_NODE_ID`).
    fn node_id(&self) -> &str;

    /// The credential the nodes present to each other when one forwards a read to another.
    fn secret(&self) -> &str;

    /// The live node whose data dir holds `run_id`'s folder, if one does.
    async fn holder(&self, run_id: &str) -> anyhow::Result<Option<NodeAddress>>;

    /// Renews this node's heartbeat; false when the node had been declared lost (it is
    /// entered again, but its claims are gone: its turns must stop).
    async fn heartbeat(&self) -> anyhow::Result<bool>;

    /// Claims a queued run this node may run: unclaimed, its folder nowhere else, of an agent
    /// engine only when `agents`, of an engine in `limits` only while fewer of its runs than
    /// its bound are claimed or running in the whole cluster, and of a tenant only while fewer
    /// of its runs than its `max_running` (its own, else `max_running`) are (exactly: such
    /// claims take turns). Of those, the oldest run of the tenant holding the fewest places,
    /// so tenants share the slots evenly.
    async fn claim(
        &self,
        agents: bool,
        limits: &[(Engine, usize)],
        max_running: Option<u32>,
    ) -> anyhow::Result<Option<Claimed>>;

    /// Runs queued in the whole cluster (the admission bound).
    async fn queued(&self) -> anyhow::Result<u64>;

    /// The earliest time a queued run put off until later (`run_after`, a retry) may start.
    async fn next_ready_at(&self) -> anyhow::Result<Option<skill_runner_types::clock::Timestamp>>;

    /// Tells every node that a run became claimable.
    async fn announce(&self) -> anyhow::Result<()>;

    /// Tells every node that the shared skills dir changed.
    async fn announce_installed(&self) -> anyhow::Result<()>;

    /// Asks the node running `run_id`'s turn to stop it.
    async fn request_cancel(&self, run_id: &str) -> anyhow::Result<()>;

    /// A subscription to the other nodes' signals.
    async fn signals(&self) -> anyhow::Result<Signals>;

    /// This node's runs in `status`: claimed (queued, running) or held in its data dir
    /// (waiting), in FIFO order.
    async fn held(&self, status: RunStatus) -> anyhow::Result<Vec<Run>>;

    /// Gives back this node's claims of runs not started; how many.
    async fn release_claims(&self) -> anyhow::Result<u64>;

    /// Waits until no other node installs a skill, and holds the others off until dropped.
    async fn install_lock(&self) -> anyhow::Result<ClusterLock>;

    /// Waits until no other node admits a run of `tenant_id`, and holds them off until
    /// dropped (a tenant's quotas are counted and kept exactly across nodes).
    async fn tenant_lock(&self, tenant_id: &str) -> anyhow::Result<ClusterLock>;

    /// Records that `run_id`'s folder, as its last turn left it, is in shared storage.
    async fn mark_stored(&self, run_id: &str) -> anyhow::Result<()>;

    /// Takes over the runs of lost nodes whose folders are in shared storage: a waiting run
    /// becomes this node's (it keeps waiting, here), a queued one anyone's. Each run is taken
    /// by one node. Returns the runs taken.
    async fn adopt_stored(&self) -> anyhow::Result<Vec<Run>>;

    /// As the leader (one node at a time; `None` when another one is), removes the nodes
    /// silent for `silent`, gives their claims of runs not started back to the queue, reopens
    /// the uploads they were receiving, and returns the runs their turns left `running`, for
    /// the caller to end.
    async fn settle_lost(&self, silent: std::time::Duration) -> anyhow::Result<Option<Vec<Run>>>;
}

/// A run a node claimed.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Claimed {
    pub run_id: String,
    pub engine: Engine,
    pub tenant_id: String,
    #[sqlx(try_from = "i64")]
    pub priority: u8,
}

/// How the other nodes know one: its id and the base URL it answers on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeAddress {
    /// `SKILL_RUNNER_NODE_ID`.
    pub id: String,
    /// `http://host:port`, without a trailing slash.
    pub url: String,
}

/// The service's handle to its store; cheap to clone. Every part's methods are called on it
/// directly (`store.run(id)`).
#[derive(Clone, Debug)]
pub struct Store(Arc<dyn Backend>);

impl std::ops::Deref for Store {
    type Target = dyn Backend;

    fn deref(&self) -> &(dyn Backend + 'static) {
        &*self.0
    }
}

impl Store {
    /// The SQLite store at `path` (see [`Sqlite::open`]).
    pub async fn open(path: &Path) -> anyhow::Result<Self> {
        Ok(Self(Arc::new(Sqlite::open(path).await?)))
    }

    /// The store at `database_url` (`postgres://…`, see [`Postgres::connect`]), joined as
    /// `node` with at most `queue_bound` runs queued in the cluster, when there is one, else
    /// the SQLite store at `sqlite_path`.
    pub async fn connect(
        database_url: Option<&str>,
        sqlite_path: &Path,
        node: &NodeAddress,
        queue_bound: usize,
    ) -> anyhow::Result<Self> {
        match database_url {
            Some(url) => Ok(Self(Arc::new(
                Postgres::connect(url, node, queue_bound).await?,
            ))),
            None => Self::open(sqlite_path).await,
        }
    }
}

/// The newest migration applied, in either backend's `_sqlx_migrations`.
const APPLIED_MIGRATION: &str = "SELECT MAX(version) FROM _sqlx_migrations WHERE success";

/// Ready only when the database holds every migration of `migrations` (`applied` is the newest
/// it holds).
fn check_migrations(
    migrations: &sqlx::migrate::Migrator,
    applied: Option<i64>,
) -> anyhow::Result<()> {
    let latest = migrations.iter().map(|m| m.version).max().unwrap_or(0);
    anyhow::ensure!(
        applied == Some(latest),
        "the database holds migration {applied:?}, this build expects {latest}"
    );
    Ok(())
}

/// The SQLite backend: one database file in WAL mode, held by this process alone.
///
/// Through SQLite's `unix-excl` VFS the process takes the file's lock at its first connection
/// and its connections share the WAL index in heap memory: with the default VFS that index is
/// the `-shm` file mapped into memory, and a volume that stops taking writes (a file made
/// immutable, a disk remounted read-only after I/O errors) turned a write to the mapping into
/// `SIGBUS`, which killed the service without a word. Now such a write fails, and answers 503.
/// The price: no other process opens the database while the service runs (`keys create`
/// says so, and the API makes keys).
#[derive(Debug)]
pub struct Sqlite {
    pool: SqlitePool,
    /// The one connection the jobs' and interactions' writes use ([`WriteTurn::pool`]):
    /// SQLite drops a connection's page cache whenever another connection wrote, so writes
    /// spread over the pooled connections each began by reading their pages again. (The
    /// rare writes of installs and engine tasks share `pool` with reads, under the same turn.)
    writes: SqlitePool,
    recent: Arc<RecentRows>,
    /// Where new requests go to be written (see `grouped_creates`).
    creates: grouped_creates::GroupedCreates,
    /// Taken when the store closes.
    checkpoints: std::sync::Mutex<Option<background::Background>>,
    /// The database's files, looked at before each write (see `watch`).
    watch: Arc<watch::Watch>,
    /// Taken when the store closes.
    watching: std::sync::Mutex<Option<background::Background>>,
}

/// The read cache of requests and runs (see `recent`), and the one writer's turn.
#[derive(Debug, Default)]
struct RecentRows {
    generation: recent::Generation,
    requests: recent::Recent<Request>,
    runs: recent::Recent<Run>,
    /// Writes take turns here, first come first served, instead of meeting in SQLite, whose
    /// busy handler makes a writer that finds the database locked sleep in growing steps (up
    /// to 100 ms each): under load that sleep, not the work, was a create's p99.
    writer: tokio::sync::Mutex<()>,
}

/// A write under way: the writer's turn, and the end that invalidates earlier reads.
pub(crate) struct WriteTurn<'a> {
    pool: &'a SqlitePool,
    // Dropped first: the generation moves on while the turn is still held.
    _writing: recent::Writing<'a>,
    _turn: tokio::sync::MutexGuard<'a, ()>,
}

impl RecentRows {
    /// Held by every method that writes, for the whole write.
    async fn writing<'a>(&'a self, pool: &'a SqlitePool) -> WriteTurn<'a> {
        let turn = self.writer.lock().await;
        WriteTurn {
            pool,
            _writing: self.generation.writing(),
            _turn: turn,
        }
    }
}

impl Sqlite {
    /// [`RecentRows::writing`], refused while a write would not be kept (see `watch`).
    async fn writing(&self) -> Result<WriteTurn<'_>, Unavailable> {
        let turn = self.recent.writing(&self.writes).await;
        self.watch.writable()?;
        Ok(turn)
    }

    /// The WAL of the database at `path`.
    fn wal(path: &Path) -> PathBuf {
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        wal.into()
    }
}

impl WriteTurn<'_> {
    /// The writer's connection.
    pub(crate) fn pool(&self) -> &SqlitePool {
        self.pool
    }
}

impl Sqlite {
    /// Opens (creating if needed) the database, applies pending migrations and starts its
    /// checkpointer (see `checkpoint`).
    pub async fn open(path: &Path) -> anyhow::Result<Self> {
        Self::open_tuned(path, checkpoint::Tuning::default()).await
    }

    async fn open_tuned(path: &Path, checkpoints: checkpoint::Tuning) -> anyhow::Result<Self> {
        let options = Self::options(path)?;
        let opening = || format!("opening database {}", path.display());
        // Taken without waiting: a file another process holds is an error at once.
        use sqlx::{ConnectOptions as _, Connection as _};
        let claim = match options.clone().busy_timeout(Duration::ZERO).connect().await {
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("5") => {
                return Err(Held(path.to_owned()).into());
            }
            claim => claim.with_context(opening)?,
        };
        // Reads on two connections at most, beside the one for writes. Each connection is
        // a thread every statement is handed to and answered from, and with eight, a run's
        // statements woke a different thread each time: fewer gave 5–10 % more finished
        // jobs/s on two cores.
        let pooled = options.clone().pragma("wal_autocheckpoint", "0");
        let db = path.to_owned();
        let connect = |connections, opened_at_once| {
            let db = db.clone();
            SqlitePoolOptions::new()
                .max_connections(connections)
                .min_connections(opened_at_once)
                // A connection to a local file cannot drop, and the check before each use is
                // one more round trip to the connection's thread for every statement.
                .test_before_acquire(false)
                // A connection opened while the file cannot be written is read-only for its
                // whole life, and would refuse writes once the fault has cleared: so they are
                // kept for good, and none is made then (the pool tries again).
                .idle_timeout(None)
                .max_lifetime(None)
                .after_connect(move |_, _| {
                    let db = db.clone();
                    Box::pin(async move {
                        nix::unistd::access(&db, nix::unistd::AccessFlags::W_OK)
                            .map_err(|e| sqlx::Error::Io(e.into()))
                    })
                })
                .connect_with(pooled.clone())
        };
        // Both read connections now, while the file can be written; the writer's (closed
        // after a failed batch) when the next write, having found the file writable, asks.
        let pool = connect(2, 2).await.with_context(opening)?;
        MIGRATIONS
            .run(&pool)
            .await
            .context("applying database migrations")?;
        let writes = connect(1, 0).await.with_context(opening)?;
        let recent = Arc::new(RecentRows::default());
        let watch = Arc::new(watch::Watch::new(path).with_context(opening)?);
        let checkpointer =
            checkpoint::Checkpointer::connect(&options, recent.clone(), watch.clone(), checkpoints)
                .await
                .with_context(opening)?;
        claim.close().await.with_context(opening)?;
        Ok(Self {
            creates: grouped_creates::GroupedCreates::start(
                writes.clone(),
                recent.clone(),
                watch.clone(),
            ),
            pool,
            writes,
            recent,
            checkpoints: std::sync::Mutex::new(Some(checkpointer.spawn())),
            watching: std::sync::Mutex::new(Some(watch.clone().spawn())),
            watch,
        })
    }

    fn options(path: &Path) -> anyhow::Result<SqliteConnectOptions> {
        Ok(SqliteConnectOptions::from_str("sqlite://")?
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true)
            // No memory map of the WAL index (see [`Sqlite`]) nor of the file.
            .vfs("unix-excl")
            .pragma("mmap_size", "0"))
    }
}

/// The schema this build expects.
static MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");

#[async_trait::async_trait]
impl Backend for Sqlite {
    async fn close(&self) {
        let watching = self.watching.lock().unwrap().take();
        if let Some(watching) = watching {
            watching.stop().await;
        }
        let checkpoints = self.checkpoints.lock().unwrap().take();
        if let Some(running) = checkpoints {
            running.stop().await;
        }
        self.writes.close().await;
        self.pool.close().await;
    }

    fn kind(&self) -> &'static str {
        "sqlite"
    }

    fn in_place(&self) -> Result<(), Unavailable> {
        self.watch.in_place()
    }

    async fn check(&self) -> anyhow::Result<()> {
        self.watch.writable()?;
        let (applied,): (Option<i64>,) = sqlx::query_as(APPLIED_MIGRATION)
            .fetch_one(&self.pool)
            .await
            .context("reading the applied migrations")?;
        check_migrations(&MIGRATIONS, applied)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use skill_runner_types::run_state::Move;

    pub(crate) async fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("db.sqlite")).await.unwrap();
        (dir, store)
    }

    /// A node's address as tests name it.
    pub(crate) fn node(id: &str) -> NodeAddress {
        NodeAddress {
            id: id.into(),
            url: format!("http://{id}.test:8000"),
        }
    }

    /// A store on a fresh database of the PostgreSQL test cluster.
    pub(crate) async fn postgres_store() -> Store {
        let url = skill_runner_test_support::postgres::fresh_database().await;
        Store(Arc::new(
            Postgres::connect(&url, &node("node-a"), 1000)
                .await
                .unwrap(),
        ))
    }

    /// [`Backend::start_run`] as a node would call it: on a cluster's store, after claiming
    /// what it may run (the claim is what a start checks).
    pub(crate) async fn start(
        store: &Store,
        run_id: &str,
        sandbox: &str,
    ) -> anyhow::Result<Option<Run>> {
        if let Some(cluster) = store.cluster() {
            while cluster.claim(true, &[], None).await?.is_some() {}
        }
        store.start_run(run_id, sandbox).await
    }

    /// The store suite runs on both backends: each named `async fn(Store)` becomes a module
    /// of two tests, `sqlite` (a fresh file) and `postgres` (a fresh database).
    macro_rules! on_both_backends {
        ($($test:ident),* $(,)?) => {$(
            mod $test {
                #[tokio::test]
                async fn sqlite() {
                    let (_dir, store) = crate::tests::store().await;
                    super::$test(store).await;
                }

                #[tokio::test]
                async fn postgres() {
                    super::$test(crate::tests::postgres_store().await).await;
                }
            }
        )*};
    }
    pub(crate) use on_both_backends;

    /// Names are derived twice (serde or sqlx, and strum for `as_str`): they must agree.
    #[test]
    fn names_are_the_same_in_json_and_as_str() {
        for t in [
            TaskStatus::Queued,
            TaskStatus::Running,
            TaskStatus::Succeeded,
            TaskStatus::Failed,
        ] {
            assert_eq!(serde_json::to_value(t).unwrap(), t.as_str());
        }
        assert_eq!(
            Resolution::AutoDecideTimeout.as_str(),
            "auto_decide_timeout"
        );
    }

    #[tokio::test]
    async fn the_check_wants_every_migration_of_this_build() {
        let dir = tempfile::tempdir().unwrap();
        let store = Sqlite::open(&dir.path().join("db.sqlite")).await.unwrap();
        store.check().await.unwrap();
        sqlx::query("DELETE FROM _sqlx_migrations WHERE version = (SELECT MAX(version) FROM _sqlx_migrations)")
            .execute(&store.pool)
            .await
            .unwrap();
        let e = store.check().await.unwrap_err().to_string();
        assert!(e.contains("this build expects"), "{e}");
        store.close().await;
        assert!(store.check().await.is_err(), "a closed store is not ready");
    }

    /// The migration that lets runs wait for a login rebuilds `runs`: a database of the
    /// version before keeps every run (in its queue order), and the rows that refer to them
    /// (the request's run, a question, a cache entry) still do.
    #[tokio::test]
    async fn the_waiting_auth_rebuild_keeps_runs_and_what_refers_to_them() {
        let dir = tempfile::tempdir().unwrap();
        let earlier = dir.path().join("migrations");
        std::fs::create_dir(&earlier).unwrap();
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/sqlite");
        for entry in std::fs::read_dir(&source).unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.as_str() < "0010" {
                std::fs::copy(entry.path(), earlier.join(&name)).unwrap();
            }
        }
        let path = dir.path().join("db.sqlite");
        let options = SqliteConnectOptions::from_str("sqlite://")
            .unwrap()
            .filename(&path)
            .create_if_missing(true)
            .foreign_keys(true);
        let pool = SqlitePool::connect_with(options).await.unwrap();
        sqlx::migrate::Migrator::new(earlier.as_path())
            .await
            .unwrap()
            .run(&pool)
            .await
            .unwrap();
        let now = skill_runner_types::clock::Timestamp::now().to_string();
        for (id, status) in [("r2", "queued"), ("r1", "waiting_user")] {
            sqlx::query(
                "INSERT INTO runs (run_id, request_id, skill_id, engine, skill_dir, status,
                                   created_at, updated_at)
                 VALUES (?, ?, 's', 'codex', '/s', ?, ?4, ?4)",
            )
            .bind(id)
            .bind(format!("q-{id}"))
            .bind(status)
            .bind(&now)
            .execute(&pool)
            .await
            .unwrap();
            sqlx::query(
                "INSERT INTO requests (request_id, kind, engine, upload_state, run_id,
                                       created_at, updated_at)
                 VALUES (?, 'job', 'codex', 'done', ?, ?3, ?3)",
            )
            .bind(format!("q-{id}"))
            .bind(id)
            .bind(&now)
            .execute(&pool)
            .await
            .unwrap();
        }
        sqlx::query(
            "INSERT INTO interactions (run_id, seq, interaction_id, turn, question, asked_at)
             VALUES ('r1', 1, 7, 1, '{}', ?)",
        )
        .bind(&now)
        .execute(&pool)
        .await
        .unwrap();
        sqlx::query(
            "INSERT INTO cache_entries (cache_key, run_id, created_at) VALUES ('k', 'r2', ?)",
        )
        .bind(&now)
        .execute(&pool)
        .await
        .unwrap();
        pool.close().await;

        let store = Sqlite::open(&path).await.unwrap();
        store.check().await.unwrap();
        let order: Vec<(String,)> = sqlx::query_as("SELECT run_id FROM runs ORDER BY rowid")
            .fetch_all(&store.pool)
            .await
            .unwrap();
        assert_eq!(order, [("r2".to_owned(),), ("r1".to_owned(),)]);
        let linked: Vec<(String, Option<String>)> =
            sqlx::query_as("SELECT request_id, run_id FROM requests ORDER BY request_id")
                .fetch_all(&store.pool)
                .await
                .unwrap();
        assert_eq!(
            linked,
            [
                ("q-r1".to_owned(), Some("r1".to_owned())),
                ("q-r2".to_owned(), Some("r2".to_owned()))
            ]
        );
        assert_eq!(store.interactions("r1").await.unwrap().len(), 1);
        let (entries,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM cache_entries")
            .fetch_one(&store.pool)
            .await
            .unwrap();
        assert_eq!(entries, 1);
        let (fk_ok,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM pragma_foreign_key_check")
            .fetch_one(&store.pool)
            .await
            .unwrap();
        assert_eq!(fk_ok, 0);
        assert!(
            store
                .await_auth("r2", skill_runner_types::clock::Timestamp::now(), 0)
                .await
                .unwrap()
        );
        assert_eq!(
            store.run("r2").await.unwrap().unwrap().status,
            RunStatus::WaitingAuth
        );
        // Foreign keys are on again: deleting a run takes its question with it.
        sqlx::query("DELETE FROM runs WHERE run_id = 'r1'")
            .execute(&store.pool)
            .await
            .unwrap();
        assert!(store.interactions("r1").await.unwrap().is_empty());
    }

    /// Two nodes of one database, and a run of each kind: `r1` (script), `r2` (an agent's),
    /// `r3` (script, its uploads received by node a).
    async fn two_nodes() -> (Postgres, Postgres) {
        let url = skill_runner_test_support::postgres::fresh_database().await;
        let a = Postgres::connect(&url, &node("node-a"), 1000)
            .await
            .unwrap();
        let b = Postgres::connect(&url, &node("node-b"), 1000)
            .await
            .unwrap();
        let run = |id: &str, engine| NewRun {
            run_id: id.into(),
            tenant_id: crate::DEFAULT_TENANT.into(),
            skill_id: "demo".into(),
            skill_dir: "/skills/demo".into(),
            engine,
            cache_key: None,
            priority: 2,
            not_before: None,
            schedule_id: None,
            callback_url: None,
        };
        let request = |id: &str| NewRequest {
            request_id: id.into(),
            kind: RequestKind::Job,
            skill_id: Some("demo".into()),
            engine: Some(Engine::Script),
            model: None,
            engine_options: serde_json::json!({}),
            input: serde_json::json!({}),
            parameter: serde_json::json!({}),
            runtime_options: Default::default(),
            client_address: None,
            tenant_id: crate::DEFAULT_TENANT.into(),
            key_id: None,
        };
        for (q, r, engine) in [("q1", "r1", Engine::Script), ("q2", "r2", Engine::Codex)] {
            let binding = Binding::Run(run(r, engine));
            a.create_request(&request(q), Some(&binding)).await.unwrap();
        }
        a.create_request(&request("q3"), None).await.unwrap();
        assert!(a.claim_upload("q3").await.unwrap());
        let binding = Binding::Run(run("r3", Engine::Script));
        a.complete_upload("q3", &binding, None, false)
            .await
            .unwrap();
        (a, b)
    }

    /// A turn's plain success.
    fn succeeded() -> Ending {
        Ending {
            status: RunStatus::Succeeded,
            error_code: None,
            error_message: None,
            warnings: vec![],
            result: None,
        }
    }

    fn claimed(claim: Option<Claimed>) -> Option<String> {
        claim.map(|c| c.run_id)
    }

    /// Claims share the slots among tenants: the oldest run of the tenant holding the fewest
    /// places, a tenant at its max_running passed over.
    #[tokio::test]
    async fn claims_go_to_the_tenant_holding_the_fewest_places_within_its_bound() {
        let url = skill_runner_test_support::postgres::fresh_database().await;
        let store = Postgres::connect(&url, &node("node-a"), 1000)
            .await
            .unwrap();
        let now = skill_runner_types::clock::Timestamp::now();
        let capped = Tenant {
            tenant_id: "c".into(),
            name: "capped".into(),
            quotas: Quotas {
                max_running: Some(1),
                ..Quotas::default()
            },
            created_at: now,
            updated_at: now,
        };
        assert!(store.create_tenant(&capped).await.unwrap());
        for (n, tenant) in ["a", "a", "a", "b", "c", "c"].into_iter().enumerate() {
            let request = NewRequest {
                tenant_id: tenant.into(),
                ..jobs::tests::new_request(&format!("q{n}"))
            };
            let run = NewRun {
                tenant_id: tenant.into(),
                ..jobs::tests::new_run(&format!("{tenant}{n}"))
            };
            store
                .create_request(&request, Some(&Binding::Run(run)))
                .await
                .unwrap();
        }
        let mut order = Vec::new();
        while let Some(claimed) = store.claim(true, &[], None).await.unwrap() {
            order.push(claimed.run_id);
        }
        assert_eq!(
            order,
            ["a0", "b3", "c4", "a1", "a2"],
            "a, b and c take turns; c holds its one place, so c5 waits"
        );
        let run = store.run("c4").await.unwrap().unwrap();
        assert_eq!(run.tenant_id, "c");
    }

    #[tokio::test]
    async fn a_node_runs_what_it_claimed_and_runs_with_files_stay_where_they_are() {
        let (a, b) = two_nodes().await;
        assert_eq!(a.kind(), "postgres");
        assert_eq!(
            b.queued().await.unwrap(),
            3,
            "the bound counts every node's"
        );
        assert_eq!(
            claimed(b.claim(false, &[], None).await.unwrap()).as_deref(),
            Some("r1")
        );
        assert!(
            a.start_run("r1", "off").await.unwrap().is_none(),
            "another node's claim"
        );
        assert!(b.start_run("r1", "off").await.unwrap().is_some());
        // Reads of a run's files go to the node holding its folder, with the nodes' secret.
        assert_eq!(a.holder("r1").await.unwrap(), Some(node("node-b")));
        assert_eq!(b.holder("r3").await.unwrap(), Some(node("node-a")));
        assert_eq!(a.holder("r2").await.unwrap(), None, "not started anywhere");
        assert_eq!(a.secret(), b.secret());
        assert!(a.secret().len() >= 64);
        assert_eq!(
            claimed(b.claim(false, &[], None).await.unwrap()),
            None,
            "no agent run without an agent place; r3's uploads are on node a"
        );
        assert_eq!(
            claimed(b.claim(true, &[], None).await.unwrap()).as_deref(),
            Some("r2")
        );
        assert_eq!(
            claimed(a.claim(true, &[], None).await.unwrap()).as_deref(),
            Some("r3")
        );
        let ids = |runs: Vec<Run>| runs.into_iter().map(|r| r.run_id).collect::<Vec<_>>();
        assert_eq!(ids(b.held(RunStatus::Running).await.unwrap()), ["r1"]);
        assert_eq!(ids(b.held(RunStatus::Queued).await.unwrap()), ["r2"]);
        assert_eq!(b.release_claims().await.unwrap(), 1);
        assert_eq!(
            claimed(a.claim(true, &[], None).await.unwrap()).as_deref(),
            Some("r2")
        );

        // A turn's end gives its claim back; its next turn runs where its folder is.
        let mut signals = b.signals().await.unwrap();
        b.announce().await.unwrap();
        assert_eq!(signals.next().await.unwrap(), Signal::Queued);
        a.request_cancel("r1").await.unwrap();
        assert_eq!(signals.next().await.unwrap(), Signal::Cancel("r1".into()));
        a.announce_installed().await.unwrap();
        assert_eq!(signals.next().await.unwrap(), Signal::Installed);
        let ending = succeeded();
        assert!(
            b.finish_run("r1", Move::End, None, &ending)
                .await
                .unwrap()
                .is_some()
        );
        assert!(b.held(RunStatus::Running).await.unwrap().is_empty());
        // The subscription holds a pooled connection, which a close waits for.
        drop(signals);
        a.close().await;
        b.close().await;
    }

    #[tokio::test]
    async fn an_engines_bound_holds_across_nodes() {
        let (a, b) = two_nodes().await;
        let limits = [(Engine::Codex, 1), (Engine::Script, 1)];
        assert_eq!(
            claimed(a.claim(true, &limits, None).await.unwrap()).as_deref(),
            Some("r1")
        );
        assert_eq!(
            claimed(a.claim(true, &limits, None).await.unwrap()).as_deref(),
            Some("r2"),
            "a's uploads wait: one script run at a time in the cluster"
        );
        assert_eq!(claimed(b.claim(true, &limits, None).await.unwrap()), None);
        assert_eq!(claimed(a.claim(true, &limits, None).await.unwrap()), None);
        assert_eq!(a.release_claims().await.unwrap(), 2);
        assert_eq!(
            claimed(a.claim(true, &[], None).await.unwrap()).as_deref(),
            Some("r1"),
            "without bounds, anything"
        );
        a.close().await;
        b.close().await;
    }

    #[tokio::test]
    async fn a_node_sweeps_the_finished_runs_it_holds_and_those_no_live_node_holds() {
        let (a, b) = two_nodes().await;
        assert_eq!(
            claimed(b.claim(true, &[], None).await.unwrap()).as_deref(),
            Some("r1")
        );
        assert!(b.start_run("r1", "off").await.unwrap().is_some());
        let ending = succeeded();
        b.finish_run("r1", Move::End, None, &ending).await.unwrap();
        let later = skill_runner_types::clock::Timestamp::after(Duration::from_secs(60));
        let (counts, _) = a.delete_finished(later, later).await.unwrap();
        assert_eq!(counts.runs_deleted, 0, "r1's folder is node b's to remove");
        b.close().await;
        let (counts, removed) = a.delete_finished(later, later).await.unwrap();
        assert_eq!(
            counts.runs_deleted, 1,
            "node b left: its runs are anyone's to sweep"
        );
        assert_eq!(removed[0].run_id.as_deref(), Some("r1"));
        a.close().await;
    }

    #[tokio::test]
    async fn installs_take_turns_across_nodes() {
        let (a, b) = two_nodes().await;
        let held = a.install_lock().await.unwrap();
        let waiting = tokio::spawn(async move {
            let lock = b.install_lock().await.unwrap();
            (b, lock)
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiting.is_finished(), "b waits while a installs");
        drop(held);
        let (b, lock) = tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .expect("b's turn comes once a's lock is dropped")
            .unwrap();
        drop(lock);
        a.close().await;
        b.close().await;
    }

    #[tokio::test]
    async fn a_lost_nodes_claims_go_back_and_its_turns_are_handed_to_the_leader() {
        let (a, b) = two_nodes().await;
        assert_eq!(
            claimed(a.claim(true, &[], None).await.unwrap()).as_deref(),
            Some("r1")
        );
        assert!(a.start_run("r1", "off").await.unwrap().is_some());
        assert_eq!(
            claimed(a.claim(true, &[], None).await.unwrap()).as_deref(),
            Some("r2")
        );
        let silent = Duration::from_millis(300);
        tokio::time::sleep(silent * 2).await;
        assert!(b.heartbeat().await.unwrap(), "b is alive");
        let orphaned = b.settle_lost(silent).await.unwrap().expect("b leads");
        let ids: Vec<_> = orphaned.iter().map(|r| r.run_id.as_str()).collect();
        assert_eq!(ids, ["r1"], "the lost node's turn, for the leader to end");
        assert_eq!(
            claimed(b.claim(true, &[], None).await.unwrap()).as_deref(),
            Some("r2"),
            "the lost node's claim went back to the queue"
        );
        assert!(
            !a.heartbeat().await.unwrap(),
            "a node back from the dead learns it was lost"
        );
        assert!(a.start_run("r2", "off").await.unwrap().is_none());
        a.close().await;
        b.close().await;
    }

    /// A node frozen inside a transaction holding the leader's lock keeps it only until
    /// PostgreSQL ends that transaction: then another node leads and settles it.
    #[tokio::test]
    async fn a_node_frozen_inside_a_transaction_lets_go_of_the_leaders_lock() {
        use crate::postgres::{STALLED_TRANSACTION, cluster::LEADER};
        let (a, b) = two_nodes().await;
        let mut frozen = a.pool.begin().await.unwrap();
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(LEADER)
            .execute(&mut *frozen)
            .await
            .unwrap();
        let silent = Duration::from_secs(60);
        assert!(
            b.settle_lost(silent).await.unwrap().is_none(),
            "a leads while its transaction lasts"
        );
        tokio::time::sleep(STALLED_TRANSACTION + Duration::from_secs(1)).await;
        assert!(
            b.settle_lost(silent).await.unwrap().is_some(),
            "b leads once the frozen transaction was ended"
        );
        assert!(
            frozen.commit().await.is_err(),
            "the frozen node learns its transaction was ended"
        );
        a.close().await;
        b.close().await;
    }

    /// Managed PostgreSQL services want TLS (`?sslmode=require`): the connection is encrypted.
    #[tokio::test]
    async fn a_postgres_url_asking_for_tls_gets_it() {
        let url = skill_runner_test_support::postgres::fresh_database().await;
        let base = url.split_once('?').map_or(url.as_str(), |(base, _)| base);
        let url = format!("{base}?sslmode=require");
        let store = Postgres::connect(&url, &node("node-a"), 1000)
            .await
            .unwrap();
        let (encrypted,): (bool,) =
            sqlx::query_as("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
                .fetch_one(&store.pool)
                .await
                .unwrap();
        assert!(encrypted);
        store.close().await;
    }

    /// The process holds the file alone and maps none of it: no `-shm` file, no mapping of the
    /// database's files, and its own connections still see each other's writes.
    #[tokio::test]
    async fn the_database_is_held_alone_and_never_mapped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        let store = Sqlite::open(&path).await.unwrap();
        store.insert_install_request("r1").await.unwrap();
        assert!(store.install_request("r1").await.unwrap().is_some());
        let mut files: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        files.sort();
        assert_eq!(files, ["db.sqlite", "db.sqlite-wal"]);
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        assert!(
            !maps.contains(dir.path().to_str().unwrap()),
            "a database file is mapped: {maps}"
        );
        store.close().await;
    }

    /// A database file deleted under the store: from then on every write is refused as
    /// unavailable, and so is readiness, even for a file put back at the path.
    #[tokio::test]
    async fn a_database_deleted_while_open_takes_no_more_writes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        let store = Sqlite::open(&path).await.unwrap();
        store.insert_install_request("r1").await.unwrap();
        store.check().await.unwrap();
        assert!(store.in_place().is_ok());
        std::fs::remove_file(&path).unwrap();
        let refused = store.insert_install_request("r2").await.unwrap_err();
        assert!(is_unavailable(refused.root_cause()), "{refused:#}");
        let refused = store
            .create_request(&jobs::tests::new_request("q1"), None)
            .await
            .unwrap_err();
        assert!(is_unavailable(refused.root_cause()), "{refused:#}");
        assert!(store.in_place().is_err());
        std::fs::write(&path, b"").unwrap();
        let not_ready = store.check().await.unwrap_err();
        assert!(
            format!("{not_ready:#}").contains("deleted or replaced"),
            "{not_ready:#}"
        );
        assert!(store.insert_install_request("r3").await.is_err());
        store.close().await;
    }

    /// A database file replaced under the store (a copy moved over it, as a restore does) is
    /// not the one it writes: writes are refused as for a deleted one.
    #[tokio::test]
    async fn a_database_replaced_while_open_takes_no_more_writes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        let store = Sqlite::open(&path).await.unwrap();
        store.insert_install_request("r1").await.unwrap();
        let copy = dir.path().join("copy");
        std::fs::copy(&path, &copy).unwrap();
        std::fs::rename(&copy, &path).unwrap();
        let refused = store.insert_install_request("r2").await.unwrap_err();
        assert!(is_unavailable(refused.root_cause()), "{refused:#}");
        let not_ready = store.check().await.unwrap_err();
        assert!(
            format!("{not_ready:#}").contains("deleted or replaced"),
            "{not_ready:#}"
        );
        store.close().await;
    }

    /// Files made immutable under the store (as a volume turned read-only leaves them): a
    /// write that reaches SQLite fails as unavailable (no signal: nothing is mapped), the
    /// store's own writes and readiness are refused, and a checkpoint that cannot write is
    /// retried until it can. Writable again, the same connections write and readiness is back.
    #[tokio::test]
    async fn immutable_files_fail_writes_until_they_can_be_written_again() {
        use skill_runner_test_support::immutable::Immutable;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        let tuning = checkpoint::Tuning {
            every: Duration::from_millis(20),
            ..Default::default()
        };
        let store = Sqlite::open_tuned(&path, tuning).await.unwrap();
        store.insert_install_request("r1").await.unwrap();
        /// A write past the store's own checks.
        async fn raw_write(pool: &SqlitePool, id: &str) -> Result<(), sqlx::Error> {
            sqlx::query(
                "INSERT INTO install_requests (request_id, status, phase, created_at, updated_at)
                 VALUES (?, 'queued', 'received', ?, ?)",
            )
            .bind(id)
            .bind(skill_runner_types::clock::Timestamp::now())
            .bind(skill_runner_types::clock::Timestamp::now())
            .execute(pool)
            .await
            .map(drop)
        }
        let wait_for = |failing: bool| {
            let watch = store.watch.clone();
            async move {
                for _ in 0..250 {
                    if watch.checkpoint_failing() == failing {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                panic!("the checkpointer never found failing = {failing}");
            }
        };

        // The database file alone: the WAL takes the write, its checkpoint cannot.
        let Some(held) = Immutable::set(std::slice::from_ref(&path), "store immutable files")
        else {
            return;
        };
        raw_write(&store.writes, "r2").await.unwrap();
        drop(store.recent.generation.writing());
        wait_for(true).await;
        let not_ready = store.check().await.unwrap_err();
        assert!(is_unavailable(not_ready.root_cause()), "{not_ready:#}");
        drop(held);
        wait_for(false).await;
        store.check().await.unwrap();

        // Every file: a write through SQLite fails as unavailable; reads go on.
        let files = [path.clone(), Sqlite::wal(&path)];
        let held = Immutable::set(&files, "store immutable files").unwrap();
        let failed = raw_write(&store.writes, "r3").await.unwrap_err();
        assert!(is_unavailable(&failed), "{failed:#}");
        let refused = store.insert_install_request("r4").await.unwrap_err();
        assert!(is_unavailable(refused.root_cause()), "{refused:#}");
        assert!(store.check().await.is_err());
        assert!(store.install_request("r2").await.unwrap().is_some());
        drop(held);
        store.check().await.unwrap();
        raw_write(&store.writes, "r5").await.unwrap();
        raw_write(&store.pool, "r6").await.unwrap();
        store.insert_install_request("r7").await.unwrap();
        store.close().await;
        let store = Sqlite::open(&path).await.unwrap();
        for (id, kept) in [
            ("r2", true),
            ("r3", false),
            ("r4", false),
            ("r5", true),
            ("r7", true),
        ] {
            assert_eq!(
                store.install_request(id).await.unwrap().is_some(),
                kept,
                "{id}"
            );
        }
        store.close().await;
    }

    /// Which failures are the database's: I/O and read-only errors and the watch's refusal;
    /// not a refused row, nor a full disk (507, not 503).
    #[tokio::test]
    async fn io_errors_are_the_databases_and_constraint_errors_are_not() {
        let (_dir, store) = store().await;
        store.insert_install_request("r1").await.unwrap();
        let taken = store.insert_install_request("r1").await.unwrap_err();
        assert!(!taken.chain().any(is_unavailable), "{taken:#}");
        assert!(is_unavailable(&Unavailable("gone".into())));
        assert!(is_unavailable(&sqlx::Error::PoolTimedOut));
        assert!(!is_unavailable(&sqlx::Error::RowNotFound));
    }

    #[tokio::test]
    async fn database_survives_reopen_in_wal_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        let store = Sqlite::open(&path).await.unwrap();
        store.insert_install_request("r1").await.unwrap();
        let mode: (String,) = sqlx::query_as("PRAGMA journal_mode")
            .fetch_one(&store.pool)
            .await
            .unwrap();
        assert_eq!(mode.0, "wal");
        store.close().await;
        let store = Store::open(&path).await.unwrap();
        assert!(store.install_request("r1").await.unwrap().is_some());
    }
}
