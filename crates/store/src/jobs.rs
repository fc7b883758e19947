//! Job requests, runs and cache entries.
//!
//! Every change of a run's status is one guarded `UPDATE` whose guard is a [`Move`] of the one
//! transition table (`run_state`), so a late writer (a process that printed valid output after
//! it was canceled or timed out) changes nothing.

use serde::Serialize;
use serde_json::Value;

use super::{Sqlite, recent};
use skill_runner_types::clock::Timestamp;
use skill_runner_types::engine::Engine;
use skill_runner_types::run_options::RuntimeOptions;
use skill_runner_types::run_state::Move;
pub use skill_runner_types::run_state::RunStatus;

/// Which API a request came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::Type)]
#[sqlx(type_name = "TEXT", rename_all = "lowercase")]
pub enum RequestKind {
    /// `/v1/jobs`: an installed skill.
    Job,
    /// `/v1/temp-skill-runs`: a package uploaded for one run.
    Temp,
}

/// Whether a request still waits for its input upload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::Type)]
#[sqlx(type_name = "TEXT", rename_all = "lowercase")]
pub enum UploadState {
    /// The request needed no upload.
    None,
    Awaiting,
    /// An upload is being processed; a second one is refused.
    Receiving,
    Done,
}

/// A client's request, as stored.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Request {
    pub request_id: String,
    pub kind: RequestKind,
    pub skill_id: Option<String>,
    /// `None` for a temporary run that left the choice to its package (chosen at upload).
    pub engine: Option<Engine>,
    pub model: Option<String>,
    #[sqlx(json)]
    pub engine_options: Value,
    #[sqlx(json)]
    pub input: Value,
    #[sqlx(json)]
    pub parameter: Value,
    #[sqlx(json)]
    pub runtime_options: RuntimeOptions,
    pub upload_state: UploadState,
    pub run_id: Option<String>,
    pub cache_hit: bool,
    pub error: Option<String>,
    /// The code of that failure, when it has one (e.g. `SKILL_ENGINE_UNSUPPORTED`).
    pub error_code: Option<String>,
    pub temp_dir: Option<String>,
    /// The address the request came from (the service's view of its connection).
    pub client_address: Option<String>,
    /// The tenant the request belongs to: only its keys (and admins) see it.
    pub tenant_id: String,
    /// The API key that created it, when one did.
    pub key_id: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// A run, as stored.
#[derive(Debug, Clone)]
pub struct Run {
    pub run_id: String,
    pub request_id: String,
    pub skill_id: String,
    pub engine: Engine,
    pub skill_dir: String,
    pub status: RunStatus,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    pub warnings: Vec<String>,
    /// The result envelope as JSON text, once the run ended.
    pub result: Option<String>,
    pub cache_key: Option<String>,
    pub process: Option<ProcessMark>,
    pub recovery_state: String,
    pub recovered_at: Option<Timestamp>,
    pub recovery_reason: Option<String>,
    /// Turns started so far.
    pub turn: u32,
    /// Questions asked so far.
    pub interaction_count: u32,
    pub pending_interaction_id: Option<u64>,
    /// When the wait for a reply times out.
    pub wait_deadline: Option<Timestamp>,
    pub auto_decision_count: u32,
    pub last_auto_decision_at: Option<Timestamp>,
    /// The agent engine's session a resumed turn continues.
    pub engine_session: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub started_at: Option<Timestamp>,
    pub finished_at: Option<Timestamp>,
    /// How its latest turn was confined (`landlock`, `unavailable`, `off`); `None` before one.
    pub sandbox: Option<String>,
    /// Its request's tenant.
    pub tenant_id: String,
    /// 1 (first) to 4.
    pub priority: u8,
    /// It starts no earlier: its request's `run_after`, then the time of its next attempt.
    pub not_before: Option<Timestamp>,
    /// Attempts that failed and were tried again.
    pub retries: u32,
    /// The schedule whose tick made it.
    pub schedule_id: Option<String>,
}

pub use skill_runner_types::ProcessMark;

#[derive(sqlx::FromRow)]
pub(crate) struct RunRow {
    run_id: String,
    request_id: String,
    skill_id: String,
    engine: Engine,
    skill_dir: String,
    status: RunStatus,
    error_code: Option<String>,
    error_message: Option<String>,
    warnings: String,
    result: Option<String>,
    cache_key: Option<String>,
    pgid: Option<i64>,
    pg_boot_id: Option<String>,
    pg_start_ticks: Option<i64>,
    recovery_state: String,
    recovered_at: Option<Timestamp>,
    recovery_reason: Option<String>,
    turn: i64,
    interaction_count: i64,
    pending_interaction_id: Option<i64>,
    wait_deadline: Option<Timestamp>,
    auto_decision_count: i64,
    last_auto_decision_at: Option<Timestamp>,
    engine_session: Option<String>,
    created_at: Timestamp,
    updated_at: Timestamp,
    started_at: Option<Timestamp>,
    finished_at: Option<Timestamp>,
    sandbox: Option<String>,
    tenant_id: String,
    priority: i64,
    not_before: Option<Timestamp>,
    retries: i64,
    schedule_id: Option<String>,
}

impl TryFrom<RunRow> for Run {
    type Error = anyhow::Error;
    fn try_from(r: RunRow) -> anyhow::Result<Self> {
        let process = match (r.pgid, r.pg_boot_id, r.pg_start_ticks) {
            (Some(pgid), Some(boot_id), Some(ticks)) => Some(ProcessMark {
                pgid: i32::try_from(pgid)?,
                boot_id,
                start_ticks: u64::try_from(ticks)?,
            }),
            _ => None,
        };
        Ok(Self {
            status: r.status,
            warnings: serde_json::from_str(&r.warnings)?,
            process,
            run_id: r.run_id,
            request_id: r.request_id,
            skill_id: r.skill_id,
            engine: r.engine,
            skill_dir: r.skill_dir,
            error_code: r.error_code,
            error_message: r.error_message,
            result: r.result,
            cache_key: r.cache_key,
            recovery_state: r.recovery_state,
            recovered_at: r.recovered_at,
            recovery_reason: r.recovery_reason,
            turn: u32::try_from(r.turn)?,
            interaction_count: u32::try_from(r.interaction_count)?,
            pending_interaction_id: r.pending_interaction_id.map(u64::try_from).transpose()?,
            wait_deadline: r.wait_deadline,
            auto_decision_count: u32::try_from(r.auto_decision_count)?,
            last_auto_decision_at: r.last_auto_decision_at,
            engine_session: r.engine_session,
            created_at: r.created_at,
            updated_at: r.updated_at,
            started_at: r.started_at,
            finished_at: r.finished_at,
            sandbox: r.sandbox,
            tenant_id: r.tenant_id,
            priority: u8::try_from(r.priority)?,
            not_before: r.not_before,
            retries: u32::try_from(r.retries)?,
            schedule_id: r.schedule_id,
        })
    }
}

/// A request to record.
#[derive(Debug, Clone)]
pub struct NewRequest {
    pub request_id: String,
    pub kind: RequestKind,
    pub skill_id: Option<String>,
    pub engine: Option<Engine>,
    pub model: Option<String>,
    pub engine_options: Value,
    pub input: Value,
    pub parameter: Value,
    pub runtime_options: RuntimeOptions,
    /// The address the request came from.
    pub client_address: Option<String>,
    /// The tenant it belongs to.
    pub tenant_id: String,
    /// The API key that created it, when one did.
    pub key_id: Option<String>,
}

/// A run to create.
#[derive(Debug, Clone)]
pub struct NewRun {
    pub run_id: String,
    /// Its request's tenant.
    pub tenant_id: String,
    pub skill_id: String,
    pub skill_dir: String,
    pub engine: Engine,
    pub cache_key: Option<String>,
    /// 1 (first) to 4.
    pub priority: u8,
    /// It starts no earlier.
    pub not_before: Option<Timestamp>,
    pub schedule_id: Option<String>,
    /// Told of the run's moves as the tenant's webhooks are.
    pub callback_url: Option<String>,
}

/// What a request is bound to once its inputs are complete.
#[derive(Debug, Clone)]
pub enum Binding {
    /// A fresh run, queued.
    Run(NewRun),
    /// An earlier succeeded run with the same cache key.
    CacheHit(String),
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct Ending {
    pub status: RunStatus,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    pub warnings: Vec<String>,
    /// The result envelope; `None` when the run produced none (input validation failed).
    pub result: Option<Value>,
}

/// What is left to do after a run ended: its temporary skill (returned by the write that
/// ended it, so the clean-up reads nothing back).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Ended {
    pub request_id: String,
    pub engine: Engine,
    /// Whether the run's request brought a temporary skill.
    pub temp_skill: bool,
}

macro_rules! ended_columns {
    () => {
        " RETURNING request_id, engine, EXISTS (SELECT 1 FROM requests q
             WHERE q.request_id = runs.request_id AND q.temp_dir IS NOT NULL) AS temp_skill"
    };
}
pub(crate) use ended_columns;

/// How many runs of one tenant are in one state, by engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunCount {
    pub status: RunStatus,
    pub engine: Engine,
    pub tenant_id: String,
    pub runs: u64,
}

/// The runs by state, engine and tenant; the same SQL in both databases.
pub(crate) const RUN_COUNTS: &str = "SELECT status, engine, tenant_id, COUNT(*) FROM runs
    GROUP BY status, engine, tenant_id";

impl RunCount {
    pub(crate) fn of(rows: Vec<(RunStatus, Engine, String, i64)>) -> Vec<Self> {
        rows.into_iter()
            .map(|(status, engine, tenant_id, n)| Self {
                status,
                engine,
                tenant_id,
                runs: n.max(0) as u64,
            })
            .collect()
    }
}

/// What a cleanup removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct CleanupCounts {
    pub runs_deleted: u64,
    pub requests_deleted: u64,
    pub cache_entries_deleted: u64,
}

impl CleanupCounts {
    pub(crate) fn of(runs: i64, requests: i64, cache: i64) -> Self {
        let count = |n: i64| n.max(0) as u64;
        Self {
            runs_deleted: count(runs),
            requests_deleted: count(requests),
            cache_entries_deleted: count(cache),
        }
    }
}

/// The finished runs, the requests that go with them (and failed requests without a run), and
/// their cache entries: what a cleanup of everything finished deletes. The same SQL in both
/// databases.
pub(crate) const FINISHED_COUNTS: &str = "SELECT
    (SELECT COUNT(*) FROM runs WHERE status IN ('succeeded', 'failed', 'canceled')),
    (SELECT COUNT(*) FROM requests q WHERE (q.run_id IS NULL AND q.error IS NOT NULL)
        OR q.run_id IN (SELECT run_id FROM runs WHERE status IN ('succeeded', 'failed', 'canceled'))),
    (SELECT COUNT(*) FROM cache_entries c
        WHERE c.run_id IN (SELECT run_id FROM runs WHERE status IN ('succeeded', 'failed', 'canceled')))";

/// How many request ids ending with a run list's search are looked up one by one; more make
/// the list walk the newest requests and compare each id's end.
const ENDS_LOOKED_UP: i64 = if cfg!(test) { 3 } else { 1000 };

/// A run removed by a cleanup, with the folders that go with it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Removed {
    pub run_id: Option<String>,
    pub temp_dir: Option<String>,
    pub request_id: Option<String>,
}

macro_rules! request_columns {
    () => {
        "request_id, kind, skill_id, NULLIF(engine, '') AS engine, model, engine_options, input, \
         parameter, \
         runtime_options, upload_state, run_id, cache_hit, error, error_code, temp_dir, \
         client_address, tenant_id, key_id, created_at, updated_at"
    };
}
pub(crate) use request_columns;

macro_rules! run_columns {
    () => {
        "run_id, request_id, skill_id, engine, skill_dir, status, error_code, error_message, \
         warnings, result, cache_key, pgid, pg_boot_id, pg_start_ticks, recovery_state, \
         recovered_at, recovery_reason, turn, interaction_count, pending_interaction_id, \
         wait_deadline, auto_decision_count, last_auto_decision_at, engine_session, created_at, \
         updated_at, started_at, finished_at, sandbox, tenant_id, priority, not_before, retries, \
         schedule_id"
    };
}
pub(crate) use run_columns;

type Tx<'a> = sqlx::Transaction<'a, sqlx::Sqlite>;
pub(crate) type Statement<'q> = sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments>;

/// A fresh run's row; its arguments are [`bind_run`]'s.
macro_rules! insert_run {
    () => {
        "INSERT INTO runs (run_id, request_id, skill_id, engine, skill_dir, status, cache_key,
                           created_at, updated_at, tenant_id, priority, not_before, schedule_id,
                           callback_url)
         VALUES (?, ?, ?, ?, ?, 'queued', ?, ?, ?, ?, ?, ?, ?, ?)"
    };
}
pub(crate) use insert_run;

/// A request's row; `grouped_creates` binds its arguments.
macro_rules! insert_request {
    () => {
        "INSERT INTO requests (request_id, kind, skill_id, engine, model, engine_options, input,
                               parameter, runtime_options, upload_state, run_id, cache_hit,
                               client_address, tenant_id, key_id, created_at, updated_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    };
}
pub(crate) use insert_request;

pub(crate) fn bind_run<'q>(
    query: Statement<'q>,
    request_id: &'q str,
    run: &'q NewRun,
    now: Timestamp,
) -> Statement<'q> {
    query
        .bind(&run.run_id)
        .bind(request_id)
        .bind(&run.skill_id)
        .bind(run.engine)
        .bind(&run.skill_dir)
        .bind(&run.cache_key)
        .bind(now)
        .bind(now)
        .bind(&run.tenant_id)
        .bind(i64::from(run.priority))
        .bind(run.not_before)
        .bind(&run.schedule_id)
        .bind(&run.callback_url)
}

async fn insert_run_in(
    tx: &mut Tx<'_>,
    request_id: &str,
    run: &NewRun,
    now: &Timestamp,
) -> anyhow::Result<()> {
    bind_run(sqlx::query(insert_run!()), request_id, run, *now)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// `requests` in their order, each with its run (one missing meanwhile leaves its request out).
/// Which runs a list shows, newest first. Every condition given must hold.
#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    pub status: Option<RunStatus>,
    pub skill_id: Option<String>,
    pub engine: Option<Engine>,
    /// Requests created at or after this moment.
    pub since: Option<Timestamp>,
    /// The start or the end of a request id, or the start of a skill id.
    pub search: Option<String>,
    /// Only this tenant's requests (`None`: every tenant's).
    pub tenant_id: Option<String>,
    /// Only requests listed after this one: where the previous page ended.
    pub after: Option<RunCursor>,
    pub limit: u32,
}

/// A place in the run list: a request's creation time and its insertion order (which breaks
/// ties between requests created in the same microsecond).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunCursor {
    pub created_at: Timestamp,
    pub seq: i64,
}

impl RunCursor {
    /// The cursor as a client passes it back: `<created_at>~<seq>`.
    pub fn encode(&self) -> String {
        format!("{}~{}", self.created_at, self.seq)
    }

    pub fn decode(text: &str) -> Option<Self> {
        let (at, seq) = text.rsplit_once('~')?;
        Some(Self {
            created_at: Timestamp::parse(at).ok()?,
            seq: seq.parse().ok()?,
        })
    }
}

pub(crate) fn with_runs(
    requests: Vec<Request>,
    runs: Vec<RunRow>,
) -> anyhow::Result<Vec<(Request, Run)>> {
    let runs: std::collections::HashMap<String, Run> = runs
        .into_iter()
        .map(|r| Run::try_from(r).map(|r| (r.run_id.clone(), r)))
        .collect::<anyhow::Result<_>>()?;
    Ok(requests
        .into_iter()
        .filter_map(|request| {
            let run = runs.get(request.run_id.as_deref()?)?.clone();
            Some((request, run))
        })
        .collect())
}

/// A pooled connection running one batch (`BEGIN IMMEDIATE; …; COMMIT`, sent at once). Unlike
/// sqlx's own transactions a batch has no rollback of its own, so a batch that did not end well
/// (a statement failed, or its future was dropped mid-way because a client went away) closes
/// its connection instead of returning it to the pool, and closing rolls back what it began.
pub(crate) struct Batch {
    conn: sqlx::pool::PoolConnection<sqlx::Sqlite>,
    ended_well: bool,
}

impl Batch {
    pub(crate) async fn start(pool: &sqlx::SqlitePool) -> Result<Self, sqlx::Error> {
        Ok(Self {
            conn: pool.acquire().await?,
            ended_well: false,
        })
    }

    pub(crate) fn conn(&mut self) -> &mut sqlx::SqliteConnection {
        &mut self.conn
    }

    /// Passes the batch's outcome on, noting whether its connection may be used again.
    pub(crate) fn end<T>(mut self, outcome: Result<T, sqlx::Error>) -> Result<T, sqlx::Error> {
        self.ended_well = outcome.is_ok();
        outcome
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        if !self.ended_well {
            self.conn.close_on_drop();
        }
    }
}

/// Requests, their runs and the result cache.
#[async_trait::async_trait]
pub trait JobStore: Send + Sync {
    /// Records a request, bound to a fresh run or a cached one, or awaiting its upload
    /// (`binding` = `None`). The request and its run appear together: both rows are written
    /// in one transaction sent as one batch, a single round trip to the connection's thread
    /// (every create takes the writer's turn, so each trip saved shortens everyone's wait).
    async fn create_request(
        &self,
        request: &NewRequest,
        binding: Option<&Binding>,
    ) -> anyhow::Result<()>;

    /// The request, from memory when nothing was written since it was last read.
    async fn request(&self, request_id: &str) -> anyhow::Result<Option<Request>>;

    /// The run, from memory when nothing was written since it was last read.
    async fn run(&self, run_id: &str) -> anyhow::Result<Option<Run>>;

    /// Takes the request's upload slot; false when it is not awaiting one.
    async fn claim_upload(&self, request_id: &str) -> anyhow::Result<bool>;

    /// Gives a claimed upload slot back after an upload that was refused.
    async fn release_upload(&self, request_id: &str) -> anyhow::Result<()>;

    /// Ends a claimed upload by binding the request; for a temporary run also records the
    /// skill it carried. Among nodes, a new run runs on this node, where its files are, unless
    /// `anywhere` (its folder is in shared storage).
    async fn complete_upload(
        &self,
        request_id: &str,
        binding: &Binding,
        temp_skill: Option<(&str, &str)>,
        anywhere: bool,
    ) -> anyhow::Result<()>;

    /// Requests whose upload was cut short by a crash wait for it again; returns how many.
    async fn reopen_interrupted_uploads(&self) -> anyhow::Result<u64>;

    /// Ends a claimed upload with a failure recorded on the request (no run is created).
    async fn fail_upload(
        &self,
        request_id: &str,
        code: Option<&str>,
        error: &str,
    ) -> anyhow::Result<()>;

    /// [`Move::Start`], counting the turn: the started run, or `None` when it is no longer
    /// queued (canceled meanwhile).
    async fn start_run(&self, run_id: &str, sandbox: &str) -> anyhow::Result<Option<Run>>;

    /// Records (or clears) the process group of the turn under way.
    async fn set_run_process(&self, run_id: &str, mark: Option<&ProcessMark>)
    -> anyhow::Result<()>;

    /// Records the engine session a later turn of the run resumes.
    async fn set_run_session(&self, run_id: &str, session: &str) -> anyhow::Result<()>;

    /// Ends a run by `by` (with `asked`, only while it still waits on its `asked`-th question);
    /// `None` when another writer moved it first. A run that succeeded with a cache key becomes
    /// its key's cache entry in the same transaction, sent with the end as one batch.
    async fn finish_run(
        &self,
        run_id: &str,
        by: Move,
        asked: Option<u32>,
        ending: &Ending,
    ) -> anyhow::Result<Option<Ended>>;

    /// Ends a run found in `from` at start-up as failed and reconciled ([`Move::Reconcile`]).
    async fn reconcile_interrupted(
        &self,
        run_id: &str,
        from: RunStatus,
        ending: &Ending,
        reason: &str,
    ) -> anyhow::Result<Option<Ended>>;

    /// The requests that have a run and match `filter`, with their runs, newest first: at
    /// most `filter.limit`, after `filter.after`.
    async fn list_runs(&self, filter: &RunFilter) -> anyhow::Result<Vec<(Request, Run)>>;

    /// Where the page that ends with `request_id` ends, for [`RunFilter::after`].
    async fn run_cursor(&self, request_id: &str) -> anyhow::Result<Option<RunCursor>>;

    /// Runs in `status`, in FIFO order.
    async fn runs_with_status(&self, status: RunStatus) -> anyhow::Result<Vec<Run>>;

    /// How many runs there are in each status, by engine (no row for none).
    async fn run_counts(&self) -> anyhow::Result<Vec<RunCount>>;

    /// What [`JobStore::delete_finished`] would delete of everything finished now.
    async fn finished_counts(&self) -> anyhow::Result<CleanupCounts>;

    /// The succeeded run stored under `cache_key`, if any.
    async fn cached_run(&self, cache_key: &str) -> anyhow::Result<Option<String>>;

    /// Deletes finished runs (failed ones finished before `failed_before`, the others before
    /// `finished_before`; RFC 3339 UTC strings compare in time order), the requests bound to
    /// them, their cache entries, and requests that failed before getting a run. Returns the
    /// counts and what was removed, so the caller can delete the folders.
    async fn delete_finished(
        &self,
        failed_before: Timestamp,
        finished_before: Timestamp,
    ) -> anyhow::Result<(CleanupCounts, Vec<Removed>)>;
}

#[async_trait::async_trait]
impl JobStore for Sqlite {
    async fn create_request(
        &self,
        request: &NewRequest,
        binding: Option<&Binding>,
    ) -> anyhow::Result<()> {
        self.creates.create(request, binding).await
    }

    async fn request(&self, request_id: &str) -> anyhow::Result<Option<Request>> {
        let read = async {
            let request = sqlx::query_as(concat!(
                "SELECT ",
                request_columns!(),
                " FROM requests WHERE request_id = ?"
            ))
            .bind(request_id)
            .fetch_optional(&self.pool)
            .await?;
            Ok(request)
        };
        let weight = |request: &Request| {
            [&request.input, &request.parameter, &request.engine_options]
                .into_iter()
                .map(recent::json_weight)
                .sum()
        };
        let recent = &self.recent;
        (recent.requests)
            .read_through(&recent.generation, request_id, read, weight)
            .await
    }

    async fn run(&self, run_id: &str) -> anyhow::Result<Option<Run>> {
        let read = async {
            let row: Option<RunRow> = sqlx::query_as(concat!(
                "SELECT ",
                run_columns!(),
                " FROM runs WHERE run_id = ?"
            ))
            .bind(run_id)
            .fetch_optional(&self.pool)
            .await?;
            row.map(Run::try_from).transpose()
        };
        let weight = |run: &Run| {
            run.result.as_ref().map_or(0, String::len)
                + run.error_message.as_ref().map_or(0, String::len)
                + run.warnings.iter().map(String::len).sum::<usize>()
        };
        let recent = &self.recent;
        (recent.runs)
            .read_through(&recent.generation, run_id, read, weight)
            .await
    }

    async fn claim_upload(&self, request_id: &str) -> anyhow::Result<bool> {
        let writing = self.writing().await?;
        let done = sqlx::query(
            "UPDATE requests SET upload_state = 'receiving', updated_at = ?
             WHERE request_id = ? AND upload_state = 'awaiting'",
        )
        .bind(Timestamp::now())
        .bind(request_id)
        .execute(writing.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn release_upload(&self, request_id: &str) -> anyhow::Result<()> {
        let writing = self.writing().await?;
        sqlx::query(
            "UPDATE requests SET upload_state = 'awaiting', updated_at = ?
             WHERE request_id = ? AND upload_state = 'receiving'",
        )
        .bind(Timestamp::now())
        .bind(request_id)
        .execute(writing.pool())
        .await?;
        Ok(())
    }

    async fn complete_upload(
        &self,
        request_id: &str,
        binding: &Binding,
        temp_skill: Option<(&str, &str)>,
        _anywhere: bool,
    ) -> anyhow::Result<()> {
        let writing = self.writing().await?;
        let now = Timestamp::now();
        let mut tx = writing.pool().begin().await?;
        let (run_id, cache_hit) = match binding {
            Binding::Run(run) => {
                insert_run_in(&mut tx, request_id, run, &now).await?;
                (run.run_id.as_str(), false)
            }
            Binding::CacheHit(run_id) => (run_id.as_str(), true),
        };
        let (skill_id, temp_dir) = temp_skill.unzip();
        let done = sqlx::query(
            "UPDATE requests SET upload_state = 'done', run_id = ?, cache_hit = ?,
                 skill_id = COALESCE(?, skill_id), temp_dir = COALESCE(?, temp_dir), updated_at = ?
             WHERE request_id = ? AND upload_state = 'receiving'",
        )
        .bind(run_id)
        .bind(cache_hit)
        .bind(skill_id)
        .bind(temp_dir)
        .bind(now)
        .bind(request_id)
        .execute(&mut *tx)
        .await?;
        anyhow::ensure!(
            done.rows_affected() == 1,
            "request {request_id} was not receiving an upload"
        );
        tx.commit().await?;
        Ok(())
    }

    async fn reopen_interrupted_uploads(&self) -> anyhow::Result<u64> {
        let writing = self.writing().await?;
        let done = sqlx::query(
            "UPDATE requests SET upload_state = 'awaiting', updated_at = ?
             WHERE upload_state = 'receiving'",
        )
        .bind(Timestamp::now())
        .execute(writing.pool())
        .await?;
        Ok(done.rows_affected())
    }

    async fn fail_upload(
        &self,
        request_id: &str,
        code: Option<&str>,
        error: &str,
    ) -> anyhow::Result<()> {
        let writing = self.writing().await?;
        sqlx::query(
            "UPDATE requests SET upload_state = 'done', error_code = ?, error = ?, updated_at = ?
             WHERE request_id = ? AND upload_state = 'receiving'",
        )
        .bind(code)
        .bind(error)
        .bind(Timestamp::now())
        .bind(request_id)
        .execute(writing.pool())
        .await?;
        Ok(())
    }

    async fn start_run(&self, run_id: &str, sandbox: &str) -> anyhow::Result<Option<Run>> {
        let writing = self.writing().await?;
        skill_runner_types::faults::check("store-start-run")?;
        let now = Timestamp::now();
        let row: Option<RunRow> = sqlx::query_as(concat!(
            "UPDATE runs SET status = ?, turn = turn + 1, sandbox = ?,
                 started_at = COALESCE(started_at, ?), updated_at = ?
             WHERE run_id = ? AND status IN (SELECT value FROM json_each(?))
             RETURNING ",
            run_columns!()
        ))
        .bind(RunStatus::Running)
        .bind(sandbox)
        .bind(now)
        .bind(now)
        .bind(run_id)
        .bind(Move::Start.from_json())
        .fetch_optional(writing.pool())
        .await?;
        row.map(Run::try_from).transpose()
    }

    async fn set_run_process(
        &self,
        run_id: &str,
        mark: Option<&ProcessMark>,
    ) -> anyhow::Result<()> {
        let writing = self.writing().await?;
        sqlx::query(
            "UPDATE runs SET pgid = ?, pg_boot_id = ?, pg_start_ticks = ? WHERE run_id = ?",
        )
        .bind(mark.map(|m| m.pgid))
        .bind(mark.map(|m| m.boot_id.as_str()))
        .bind(mark.map(|m| m.start_ticks as i64))
        .bind(run_id)
        .execute(writing.pool())
        .await?;
        Ok(())
    }

    async fn set_run_session(&self, run_id: &str, session: &str) -> anyhow::Result<()> {
        let writing = self.writing().await?;
        sqlx::query("UPDATE runs SET engine_session = ? WHERE run_id = ?")
            .bind(session)
            .bind(run_id)
            .execute(writing.pool())
            .await?;
        Ok(())
    }

    async fn finish_run(
        &self,
        run_id: &str,
        by: Move,
        asked: Option<u32>,
        ending: &Ending,
    ) -> anyhow::Result<Option<Ended>> {
        let writing = self.writing().await?;
        by.check_target(ending.status)?;
        skill_runner_types::faults::check("store-finish")?;
        let now = Timestamp::now();
        let mut batch = Batch::start(writing.pool()).await?;
        // `changes()` is the UPDATE's: only the writer that ended the run adds its entry.
        let ended = sqlx::query_as(concat!(
            "BEGIN IMMEDIATE;
             UPDATE runs SET status = ?, error_code = ?, error_message = ?, warnings = ?,
                 result = ?, pgid = NULL, pg_boot_id = NULL, pg_start_ticks = NULL,
                 pending_interaction_id = NULL, wait_deadline = NULL,
                 updated_at = ?, finished_at = ?
             WHERE run_id = ? AND status IN (SELECT value FROM json_each(?))
               AND (? IS NULL OR interaction_count = ?)",
            ended_columns!(),
            ";
             INSERT INTO cache_entries (cache_key, run_id, created_at)
                 SELECT cache_key, run_id, ? FROM runs
                 WHERE changes() = 1 AND run_id = ? AND status = 'succeeded'
                   AND cache_key IS NOT NULL
             ON CONFLICT (cache_key) DO UPDATE SET run_id = excluded.run_id,
                 created_at = excluded.created_at;",
            crate::webhooks::tell_sqlite!(),
            crate::webhooks::told!(),
            ";
             COMMIT"
        ))
        .bind(ending.status)
        .bind(&ending.error_code)
        .bind(&ending.error_message)
        .bind(serde_json::to_string(&ending.warnings)?)
        .bind(ending.result.as_ref().map(Value::to_string))
        .bind(now)
        .bind(now)
        .bind(run_id)
        .bind(by.from_json())
        .bind(asked)
        .bind(asked)
        .bind(now)
        .bind(run_id)
        .bind(run_id)
        .bind(now)
        // Every statement must run (`fetch_optional` would stop at the first row, before the
        // COMMIT): the UPDATE's row, if any, is the only one.
        .fetch_all(batch.conn())
        .await;
        Ok(batch.end(ended)?.pop())
    }

    async fn reconcile_interrupted(
        &self,
        run_id: &str,
        from: RunStatus,
        ending: &Ending,
        reason: &str,
    ) -> anyhow::Result<Option<Ended>> {
        let writing = self.writing().await?;
        anyhow::ensure!(
            Move::Reconcile.allows(from, ending.status),
            "cannot reconcile a run from '{}' to '{}'",
            from.as_str(),
            ending.status.as_str()
        );
        let now = Timestamp::now();
        let mut tx = writing.pool().begin().await?;
        let ended: Option<Ended> = sqlx::query_as(concat!(
            "UPDATE runs SET status = ?, error_code = ?, error_message = ?, result = ?,
                 recovery_state = 'failed_reconciled', recovered_at = ?, recovery_reason = ?,
                 pgid = NULL, pg_boot_id = NULL, pg_start_ticks = NULL,
                 pending_interaction_id = NULL, wait_deadline = NULL,
                 updated_at = ?, finished_at = ?
             WHERE run_id = ? AND status = ?",
            ended_columns!()
        ))
        .bind(ending.status)
        .bind(&ending.error_code)
        .bind(&ending.error_message)
        .bind(ending.result.as_ref().map(Value::to_string))
        .bind(now)
        .bind(reason)
        .bind(now)
        .bind(now)
        .bind(run_id)
        .bind(from)
        .fetch_optional(&mut *tx)
        .await?;
        if ended.is_some() {
            crate::webhooks::tell(&mut tx, run_id, now).await?;
        }
        tx.commit().await?;
        Ok(ended)
    }

    async fn list_runs(&self, filter: &RunFilter) -> anyhow::Result<Vec<(Request, Run)>> {
        // Only the conditions given are written, so the planner sees which index serves: the
        // newest requests (`requests_listed`, or `requests_listed_by_skill`) walked until the
        // page is full, or the few active runs (`runs_active`) and their requests.
        let mut query = sqlx::QueryBuilder::<sqlx::Sqlite>::new(concat!(
            "SELECT ",
            request_columns!(),
            " FROM requests WHERE run_id IS NOT NULL"
        ));
        if let Some(status) = filter.status {
            if status.is_terminal() {
                query
                    .push(" AND (SELECT status FROM runs WHERE runs.run_id = requests.run_id) = ")
                    .push_bind(status);
            } else {
                // The partial index's own condition, written out: SQLite uses a partial
                // index only where the query repeats it.
                query
                    .push(" AND run_id IN (SELECT run_id FROM runs WHERE status = ")
                    .push_bind(status)
                    .push(" AND status IN ('queued', 'running', 'waiting_user', 'waiting_auth'))");
            }
        }
        if let Some(tenant_id) = &filter.tenant_id {
            query.push(" AND tenant_id = ").push_bind(tenant_id.clone());
        }
        if let Some(skill_id) = &filter.skill_id {
            query.push(" AND skill_id = ").push_bind(skill_id.clone());
        }
        if let Some(engine) = filter.engine {
            query.push(" AND engine = ").push_bind(engine.as_str());
        }
        if let Some(since) = filter.since {
            query.push(" AND created_at >= ").push_bind(since);
        }
        if let Some(search) = &filter.search {
            // A start as a range, which an index serves (`LIKE` would not: it folds case).
            // Most searches are a whole request id (a start) or the end the console shows, and
            // name no skill. So the skills are asked first (one index seek) and the ends next:
            // no index keeps ids by their end (one would put each create's entry on a random
            // page), but a scan of the primary key's own index finds them at a few tenths of a
            // µs a request, and a search as long as an id can only be the id. The few ids found
            // join the start's range in one lookup each; only a skill or an end shared by many
            // makes the query walk the newest requests.
            let end = format!("{search}\u{10FFFF}");
            let names_a_skill: Option<i64> = sqlx::query_scalar(
                "SELECT 1 FROM requests WHERE run_id IS NOT NULL AND skill_id >= ? AND skill_id < ? LIMIT 1",
            )
            .bind(search)
            .bind(&end)
            .fetch_optional(&self.pool)
            .await?;
            let from_end = -i64::try_from(search.chars().count())?;
            let ending: Vec<String> = if search.len() < uuid::fmt::Hyphenated::LENGTH {
                sqlx::query_scalar(
                    "SELECT request_id FROM requests WHERE substr(request_id, ?) = ? LIMIT ?",
                )
                .bind(from_end)
                .bind(search)
                .bind(ENDS_LOOKED_UP + 1)
                .fetch_all(&self.pool)
                .await?
            } else {
                Vec::new()
            };
            query
                .push(" AND ((request_id >= ")
                .push_bind(search.clone())
                .push(" AND request_id < ")
                .push_bind(end.clone())
                .push(")");
            if ending.len() > ENDS_LOOKED_UP as usize {
                query
                    .push(" OR substr(request_id, ")
                    .push_bind(from_end)
                    .push(") = ")
                    .push_bind(search.clone());
            } else if !ending.is_empty() {
                query
                    .push(" OR request_id IN (SELECT value FROM json_each(")
                    .push_bind(serde_json::to_string(&ending)?)
                    .push("))");
            }
            if names_a_skill.is_some() {
                query
                    .push(" OR (skill_id >= ")
                    .push_bind(search.clone())
                    .push(" AND skill_id < ")
                    .push_bind(end)
                    .push(")");
            }
            query.push(")");
        }
        if let Some(after) = &filter.after {
            query
                .push(" AND created_at <= ")
                .push_bind(after.created_at)
                .push(" AND (created_at < ")
                .push_bind(after.created_at)
                .push(" OR rowid < ")
                .push_bind(after.seq)
                .push(")");
        }
        query
            .push(" ORDER BY created_at DESC, rowid DESC LIMIT ")
            .push_bind(filter.limit);
        let requests: Vec<Request> = query.build_query_as().fetch_all(&self.pool).await?;
        let run_ids: Vec<&str> = requests
            .iter()
            .filter_map(|r| r.run_id.as_deref())
            .collect();
        let runs: Vec<RunRow> = sqlx::query_as(concat!(
            "SELECT ",
            run_columns!(),
            " FROM runs WHERE run_id IN (SELECT value FROM json_each(?))"
        ))
        .bind(serde_json::to_string(&run_ids)?)
        .fetch_all(&self.pool)
        .await?;
        with_runs(requests, runs)
    }

    async fn run_cursor(&self, request_id: &str) -> anyhow::Result<Option<RunCursor>> {
        let row: Option<(Timestamp, i64)> =
            sqlx::query_as("SELECT created_at, rowid FROM requests WHERE request_id = ?")
                .bind(request_id)
                .fetch_optional(&self.pool)
                .await?;
        Ok(row.map(|(created_at, seq)| RunCursor { created_at, seq }))
    }

    async fn runs_with_status(&self, status: RunStatus) -> anyhow::Result<Vec<Run>> {
        let rows: Vec<RunRow> = sqlx::query_as(concat!(
            "SELECT ",
            run_columns!(),
            " FROM runs WHERE status = ? ORDER BY rowid"
        ))
        .bind(status)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(Run::try_from).collect()
    }

    async fn run_counts(&self) -> anyhow::Result<Vec<RunCount>> {
        let rows = sqlx::query_as(RUN_COUNTS).fetch_all(&self.pool).await?;
        Ok(RunCount::of(rows))
    }

    async fn finished_counts(&self) -> anyhow::Result<CleanupCounts> {
        let (runs, requests, cache): (i64, i64, i64) = sqlx::query_as(FINISHED_COUNTS)
            .fetch_one(&self.pool)
            .await?;
        Ok(CleanupCounts::of(runs, requests, cache))
    }

    async fn cached_run(&self, cache_key: &str) -> anyhow::Result<Option<String>> {
        let row: Option<(String,)> = sqlx::query_as(
            "SELECT c.run_id FROM cache_entries c JOIN runs r ON r.run_id = c.run_id
             WHERE c.cache_key = ? AND r.status = 'succeeded'",
        )
        .bind(cache_key)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|r| r.0))
    }

    async fn delete_finished(
        &self,
        failed_before: Timestamp,
        finished_before: Timestamp,
    ) -> anyhow::Result<(CleanupCounts, Vec<Removed>)> {
        let writing = self.writing().await?;
        let mut tx = writing.pool().begin().await?;
        sqlx::query("CREATE TEMP TABLE IF NOT EXISTS doomed_runs (run_id TEXT PRIMARY KEY)")
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM doomed_runs")
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO doomed_runs SELECT run_id FROM runs
             WHERE (status = 'failed' AND finished_at < ?)
                OR (status IN ('succeeded', 'canceled') AND finished_at < ?)",
        )
        .bind(failed_before)
        .bind(finished_before)
        .execute(&mut *tx)
        .await?;
        let mut removed: Vec<Removed> = sqlx::query_as(
            "SELECT d.run_id AS run_id, q.temp_dir AS temp_dir, q.request_id AS request_id
             FROM doomed_runs d LEFT JOIN requests q ON q.run_id = d.run_id",
        )
        .fetch_all(&mut *tx)
        .await?;
        let orphans: Vec<Removed> = sqlx::query_as(
            "SELECT NULL AS run_id, temp_dir, request_id FROM requests
             WHERE run_id IS NULL AND error IS NOT NULL AND updated_at < ?",
        )
        .bind(failed_before)
        .fetch_all(&mut *tx)
        .await?;
        removed.extend(orphans);
        let cache = sqlx::query(
            "DELETE FROM cache_entries WHERE run_id IN (SELECT run_id FROM doomed_runs)",
        )
        .execute(&mut *tx)
        .await?
        .rows_affected();
        let requests = sqlx::query(
            "DELETE FROM requests WHERE run_id IN (SELECT run_id FROM doomed_runs)
                OR (run_id IS NULL AND error IS NOT NULL AND updated_at < ?)",
        )
        .bind(failed_before)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        let runs = sqlx::query("DELETE FROM runs WHERE run_id IN (SELECT run_id FROM doomed_runs)")
            .execute(&mut *tx)
            .await?
            .rows_affected();
        sqlx::query("DELETE FROM doomed_runs")
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok((
            CleanupCounts {
                runs_deleted: runs,
                requests_deleted: requests,
                cache_entries_deleted: cache,
            },
            removed,
        ))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use serde_json::json;

    use super::*;
    use crate::Store;
    use crate::tests::on_both_backends;

    pub(crate) fn new_request(id: &str) -> NewRequest {
        NewRequest {
            request_id: id.into(),
            kind: RequestKind::Job,
            skill_id: Some("demo".into()),
            engine: Some(Engine::Script),
            model: None,
            engine_options: json!({}),
            input: json!({"text": "hi"}),
            parameter: json!({}),
            runtime_options: Default::default(),
            client_address: None,
            tenant_id: crate::DEFAULT_TENANT.into(),
            key_id: None,
        }
    }

    pub(crate) fn new_run(id: &str) -> NewRun {
        NewRun {
            run_id: id.into(),
            tenant_id: crate::DEFAULT_TENANT.into(),
            skill_id: "demo".into(),
            skill_dir: "/skills/demo".into(),
            engine: Engine::Script,
            cache_key: Some("k1".into()),
            priority: 2,
            not_before: None,
            schedule_id: None,
            callback_url: None,
        }
    }

    async fn only_the_end_that_wins_with_a_success_becomes_the_cache_entry(store: Store) {
        let end = |run: &'static str, by: Move, status: RunStatus| {
            let store = store.clone();
            async move {
                store
                    .finish_run(run, by, None, &ending(status))
                    .await
                    .unwrap()
            }
        };
        for (q, r) in [("q1", "r1"), ("q2", "r2"), ("q3", "r3")] {
            store
                .create_request(&new_request(q), Some(&Binding::Run(new_run(r))))
                .await
                .unwrap();
            crate::tests::start(&store, r, "off").await.unwrap();
        }
        assert!(end("r1", Move::End, RunStatus::Failed).await.is_some());
        assert_eq!(store.cached_run("k1").await.unwrap(), None, "a failure");
        assert!(end("r2", Move::End, RunStatus::Succeeded).await.is_some());
        assert_eq!(store.cached_run("k1").await.unwrap().as_deref(), Some("r2"));
        assert!(end("r3", Move::End, RunStatus::Succeeded).await.is_some());
        assert_eq!(store.cached_run("k1").await.unwrap().as_deref(), Some("r3"));
        // A late end of a run that already succeeded changes nothing, its entry included.
        assert!(end("r2", Move::End, RunStatus::Succeeded).await.is_none());
        assert_eq!(store.cached_run("k1").await.unwrap().as_deref(), Some("r3"));
    }

    /// A create whose caller goes away mid-batch (a client that disconnects) must not leave
    /// its transaction open on a pooled connection, holding the database's write lock.
    async fn a_create_dropped_mid_batch_leaves_both_rows_or_none_and_the_lock_free(store: Store) {
        for n in 0..40 {
            let (q, r) = (format!("q{n}"), format!("r{n}"));
            let (request, binding) = (new_request(&q), Binding::Run(new_run(&r)));
            let create = store.create_request(&request, Some(&binding));
            // Polled once and dropped: wherever it stood, the batch is cut off there.
            let _ = tokio::time::timeout(std::time::Duration::ZERO, create).await;
        }
        for n in 40..50 {
            let (q, r) = (format!("q{n}"), format!("r{n}"));
            store
                .create_request(&new_request(&q), Some(&Binding::Run(new_run(&r))))
                .await
                .expect("a later create writes (no open transaction holds the lock)");
        }
        for n in 0..50 {
            let request = store.request(&format!("q{n}")).await.unwrap();
            let run = store.run(&format!("r{n}")).await.unwrap();
            assert_eq!(request.is_some(), run.is_some(), "create {n}");
        }
    }

    async fn a_create_that_fails_halfway_leaves_nothing_and_the_store_usable(store: Store) {
        store
            .create_request(&new_request("q1"), Some(&Binding::Run(new_run("r1"))))
            .await
            .unwrap();
        // The run row goes in first; the request row then breaks its primary key.
        let again = store
            .create_request(&new_request("q1"), Some(&Binding::Run(new_run("r2"))))
            .await;
        assert!(again.is_err());
        assert!(
            store.run("r2").await.unwrap().is_none(),
            "the run of the refused request was rolled back"
        );
        // Every pooled connection is out of the transaction: the next writes all land.
        for n in 3..12 {
            let (q, r) = (format!("q{n}"), format!("r{n}"));
            store
                .create_request(&new_request(&q), Some(&Binding::Run(new_run(&r))))
                .await
                .unwrap();
            assert_eq!(store.run(&r).await.unwrap().unwrap().request_id, q);
        }
    }

    pub(crate) fn ending(status: RunStatus) -> Ending {
        Ending {
            status,
            error_code: None,
            error_message: None,
            warnings: vec![],
            result: Some(json!({"status": "success"})),
        }
    }

    async fn runs_are_counted_by_status_and_engine_and_an_end_names_its_engine(store: Store) {
        assert!(store.run_counts().await.unwrap().is_empty());
        for (q, r) in [("q1", "r1"), ("q2", "r2"), ("q3", "r3")] {
            let mut run = new_run(r);
            run.engine = if r == "r3" {
                Engine::Codex
            } else {
                Engine::Script
            };
            run.cache_key = None;
            store
                .create_request(&new_request(q), Some(&Binding::Run(run)))
                .await
                .unwrap();
        }
        crate::tests::start(&store, "r1", "off")
            .await
            .unwrap()
            .unwrap();
        let ended = store
            .finish_run("r1", Move::End, None, &ending(RunStatus::Failed))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (ended.request_id.as_str(), ended.engine),
            ("q1", Engine::Script)
        );
        let mut counts: Vec<_> = store
            .run_counts()
            .await
            .unwrap()
            .into_iter()
            .map(|c| (c.status, c.engine, c.tenant_id, c.runs))
            .collect();
        counts.sort_by_key(|(s, e, _, _)| (s.as_str(), e.as_str()));
        let default = || crate::DEFAULT_TENANT.to_owned();
        assert_eq!(
            counts,
            vec![
                (RunStatus::Failed, Engine::Script, default(), 1),
                (RunStatus::Queued, Engine::Codex, default(), 1),
                (RunStatus::Queued, Engine::Script, default(), 1),
            ]
        );
    }

    async fn a_late_result_never_overwrites_a_terminal_state(store: Store) {
        store
            .create_request(&new_request("q1"), Some(&Binding::Run(new_run("r1"))))
            .await
            .unwrap();
        let started = crate::tests::start(&store, "r1", "off")
            .await
            .unwrap()
            .unwrap();
        assert_eq!((started.status, started.turn), (RunStatus::Running, 1));
        assert!(
            crate::tests::start(&store, "r1", "off")
                .await
                .unwrap()
                .is_none()
        );
        let mut canceled = ending(RunStatus::Canceled);
        canceled.error_code = Some("CANCELED_BY_USER".into());
        let ended = store
            .finish_run("r1", Move::Cancel, None, &canceled)
            .await
            .unwrap()
            .expect("the cancel ended the run");
        assert_eq!(ended.request_id, "q1");
        assert!(!ended.temp_skill);
        assert!(
            store
                .finish_run("r1", Move::End, None, &ending(RunStatus::Succeeded))
                .await
                .unwrap()
                .is_none()
        );
        // A move that may not end a run that way writes nothing.
        assert!(
            store
                .finish_run("r1", Move::Expire, None, &ending(RunStatus::Succeeded))
                .await
                .is_err()
        );
        let run = store.run("r1").await.unwrap().unwrap();
        assert_eq!(run.status, RunStatus::Canceled);
        assert_eq!(run.error_code.as_deref(), Some("CANCELED_BY_USER"));
        assert!(run.finished_at.is_some());
    }

    async fn a_read_after_a_write_sees_it_although_reads_are_kept(store: Store) {
        store
            .create_request(&new_request("q1"), Some(&Binding::Run(new_run("r1"))))
            .await
            .unwrap();
        // Read twice: the second answer comes from memory.
        for _ in 0..2 {
            assert_eq!(
                store.run("r1").await.unwrap().unwrap().status,
                RunStatus::Queued
            );
            assert!(store.request("q1").await.unwrap().is_some());
        }
        assert!(
            crate::tests::start(&store, "r1", "off")
                .await
                .unwrap()
                .is_some()
        );
        assert_eq!(
            store.run("r1").await.unwrap().unwrap().status,
            RunStatus::Running
        );
        store
            .finish_run("r1", Move::End, None, &ending(RunStatus::Succeeded))
            .await
            .unwrap();
        assert_eq!(
            store.run("r1").await.unwrap().unwrap().status,
            RunStatus::Succeeded
        );
        // A cleanup forgets the rows it deletes.
        store
            .delete_finished(
                Timestamp::after(std::time::Duration::from_secs(60)),
                Timestamp::after(std::time::Duration::from_secs(60)),
            )
            .await
            .unwrap();
        assert!(store.run("r1").await.unwrap().is_none());
        assert!(store.request("q1").await.unwrap().is_none());
    }

    async fn uploads_are_claimed_once_and_cache_hits_need_success(store: Store) {
        store
            .create_request(&new_request("q1"), None)
            .await
            .unwrap();
        let q = store.request("q1").await.unwrap().unwrap();
        assert_eq!(q.upload_state, UploadState::Awaiting);
        assert!(q.run_id.is_none());
        assert!(store.claim_upload("q1").await.unwrap());
        assert!(!store.claim_upload("q1").await.unwrap());
        store.release_upload("q1").await.unwrap();
        assert!(store.claim_upload("q1").await.unwrap());
        store
            .complete_upload("q1", &Binding::Run(new_run("r1")), None, false)
            .await
            .unwrap();
        assert!(!store.claim_upload("q1").await.unwrap());

        assert_eq!(
            store.cached_run("k1").await.unwrap(),
            None,
            "queued runs are no hit"
        );
        crate::tests::start(&store, "r1", "off").await.unwrap();
        store
            .finish_run("r1", Move::End, None, &ending(RunStatus::Succeeded))
            .await
            .unwrap();
        assert_eq!(store.cached_run("k1").await.unwrap().as_deref(), Some("r1"));
        store
            .create_request(&new_request("q2"), Some(&Binding::CacheHit("r1".into())))
            .await
            .unwrap();
        let q2 = store.request("q2").await.unwrap().unwrap();
        assert!(q2.cache_hit);
        assert_eq!(q2.run_id.as_deref(), Some("r1"));

        let (counts, removed) = store
            .delete_finished(
                Timestamp::parse("9999-01-01T00:00:00Z").unwrap(),
                Timestamp::parse("9999-01-01T00:00:00Z").unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(
            counts,
            CleanupCounts {
                runs_deleted: 1,
                requests_deleted: 2,
                cache_entries_deleted: 1
            }
        );
        assert_eq!(removed.len(), 2);
        assert!(store.request("q2").await.unwrap().is_none());
        assert!(store.run("r1").await.unwrap().is_none());
    }

    async fn runs_are_listed_in_order_reconciled_once_and_uploads_reopened(store: Store) {
        for n in 1..=3 {
            store
                .create_request(
                    &new_request(&format!("q{n}")),
                    Some(&Binding::Run(new_run(&format!("r{n}")))),
                )
                .await
                .unwrap();
        }
        let ids = |runs: Vec<Run>| runs.into_iter().map(|r| r.run_id).collect::<Vec<_>>();
        let queued = store.runs_with_status(RunStatus::Queued).await.unwrap();
        assert_eq!(ids(queued), ["r1", "r2", "r3"], "first in, first out");
        let started = crate::tests::start(&store, "r2", "landlock")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (started.turn, started.sandbox.as_deref()),
            (1, Some("landlock"))
        );
        let mark = ProcessMark {
            pgid: 4242,
            boot_id: "boot".into(),
            start_ticks: 77,
        };
        store.set_run_process("r2", Some(&mark)).await.unwrap();
        store.set_run_session("r2", "thread-1").await.unwrap();
        let r2 = store.run("r2").await.unwrap().unwrap();
        assert_eq!(r2.process, Some(mark));
        assert_eq!(r2.engine_session.as_deref(), Some("thread-1"));
        let running = store.runs_with_status(RunStatus::Running).await.unwrap();
        assert_eq!(ids(running), ["r2"]);

        let recent = store
            .list_runs(&RunFilter {
                limit: 2,
                ..RunFilter::default()
            })
            .await
            .unwrap();
        let pairs: Vec<_> = recent
            .iter()
            .map(|(q, r)| (q.request_id.as_str(), r.run_id.as_str()))
            .collect();
        assert_eq!(pairs, [("q3", "r3"), ("q2", "r2")], "newest first");

        let reconciled = store
            .reconcile_interrupted(
                "r2",
                RunStatus::Running,
                &ending(RunStatus::Failed),
                "crash",
            )
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (reconciled.request_id.as_str(), reconciled.temp_skill),
            ("q2", false)
        );
        let r2 = store.run("r2").await.unwrap().unwrap();
        assert_eq!(
            (
                r2.status,
                r2.recovery_state.as_str(),
                r2.recovery_reason.as_deref()
            ),
            (RunStatus::Failed, "failed_reconciled", Some("crash"))
        );
        assert_eq!(r2.process, None);
        assert!(r2.finished_at.is_some());
        assert!(
            store
                .reconcile_interrupted(
                    "r2",
                    RunStatus::Running,
                    &ending(RunStatus::Failed),
                    "again"
                )
                .await
                .unwrap()
                .is_none(),
            "only once"
        );

        // An upload cut short by a crash waits again; a refused one is an orphan to clean up.
        for q in ["q4", "q5"] {
            store.create_request(&new_request(q), None).await.unwrap();
            assert!(store.claim_upload(q).await.unwrap());
        }
        store
            .fail_upload("q5", Some("SKILL_INVALID"), "no runner.json")
            .await
            .unwrap();
        assert_eq!(store.reopen_interrupted_uploads().await.unwrap(), 1);
        assert_eq!(
            store.request("q4").await.unwrap().unwrap().upload_state,
            UploadState::Awaiting
        );
        let q5 = store.request("q5").await.unwrap().unwrap();
        assert_eq!(
            (
                q5.upload_state,
                q5.error_code.as_deref(),
                q5.error.as_deref()
            ),
            (
                UploadState::Done,
                Some("SKILL_INVALID"),
                Some("no runner.json")
            )
        );

        // Only what finished before the bounds goes: the failed run and the orphan here.
        let past = Timestamp::parse("2000-01-01T00:00:00Z").unwrap();
        let future = Timestamp::parse("9999-01-01T00:00:00Z").unwrap();
        let (counts, _) = store.delete_finished(past, past).await.unwrap();
        assert_eq!(counts, CleanupCounts::default());
        let (counts, removed) = store.delete_finished(future, past).await.unwrap();
        assert_eq!(
            counts,
            CleanupCounts {
                runs_deleted: 1,
                requests_deleted: 2,
                cache_entries_deleted: 0
            }
        );
        let mut removed: Vec<_> = removed
            .iter()
            .map(|r| (r.run_id.as_deref(), r.request_id.as_deref()))
            .collect();
        removed.sort();
        assert_eq!(removed, [(None, Some("q5")), (Some("r2"), Some("q2"))]);
        assert!(store.run("r1").await.unwrap().is_some(), "queued runs stay");
        assert!(
            store.request("q4").await.unwrap().is_some(),
            "waiting uploads stay"
        );
    }

    /// Filters combine, the search matches starts and an id's end (its wildcards taken
    /// literally), and pages follow each other without gaps or repeats.
    async fn the_run_list_filters_searches_and_pages(store: Store) {
        // Ids "q1_ax" to "q7_mn"; the lists below name them by their start.
        let ends = ["ax", "cd", "ex", "gx", "ij", "kx", "mn"];
        let whole =
            |start: &str| format!("{start}_{}", ends[start[1..].parse::<usize>().unwrap() - 1]);
        for n in 1..=7 {
            let mut request = new_request(&format!("q{n}_{}", ends[n - 1]));
            if n % 2 == 0 {
                request.skill_id = Some("other_skill".into());
                request.engine = Some(Engine::Codex);
            }
            let mut run = new_run(&format!("r{n}"));
            run.cache_key = None;
            store
                .create_request(&request, Some(&Binding::Run(run)))
                .await
                .unwrap();
        }
        crate::tests::start(&store, "r3", "off").await.unwrap();
        crate::tests::start(&store, "r4", "off").await.unwrap();
        crate::tests::start(&store, "r5", "off").await.unwrap();
        store
            .finish_run("r5", Move::End, None, &ending(RunStatus::Failed))
            .await
            .unwrap();
        let ids = |rows: Vec<(Request, Run)>| {
            rows.into_iter()
                .map(|(q, _)| q.request_id[..2].to_owned())
                .collect::<Vec<_>>()
        };
        let list = |filter: RunFilter| {
            let store = store.clone();
            async move { ids(store.list_runs(&filter).await.unwrap()) }
        };
        let all = RunFilter {
            limit: 100,
            ..RunFilter::default()
        };
        assert_eq!(
            list(all.clone()).await,
            ["q7", "q6", "q5", "q4", "q3", "q2", "q1"]
        );
        let running = RunFilter {
            status: Some(RunStatus::Running),
            ..all.clone()
        };
        assert_eq!(list(running.clone()).await, ["q4", "q3"]);
        let failed = RunFilter {
            status: Some(RunStatus::Failed),
            ..all.clone()
        };
        assert_eq!(list(failed).await, ["q5"], "a status a run ended in");
        assert_eq!(
            list(RunFilter {
                engine: Some(Engine::Codex),
                ..running.clone()
            })
            .await,
            ["q4"]
        );
        assert_eq!(
            list(RunFilter {
                skill_id: Some("demo".into()),
                ..all.clone()
            })
            .await,
            ["q7", "q5", "q3", "q1"]
        );
        let search = |text: &str| RunFilter {
            search: Some(text.into()),
            ..all.clone()
        };
        assert_eq!(list(search("q3")).await, ["q3"], "a request id's start");
        assert_eq!(
            list(search("other")).await,
            ["q6", "q4", "q2"],
            "a skill id's start"
        );
        assert_eq!(list(search("_ex")).await, ["q3"], "a request id's end");
        assert_eq!(list(search("q3_ex")).await, ["q3"], "a whole id");
        assert_eq!(
            list(search("x")).await,
            ["q6", "q4", "q3", "q1"],
            "an end more ids share than are looked up one by one"
        );
        assert_eq!(
            list(RunFilter {
                status: Some(RunStatus::Running),
                ..search("gx")
            })
            .await,
            ["q4"],
            "an end with a filter"
        );
        assert!(list(search("3")).await.is_empty(), "not an id's middle");
        assert!(list(search("3_e")).await.is_empty(), "nor its middle");
        assert!(
            list(search("q3_ex_")).await.is_empty(),
            "nor more than an id"
        );
        assert!(list(search("her_sk")).await.is_empty(), "nor a skill id's");
        assert!(
            list(search("%")).await.is_empty(),
            "wildcards are taken literally"
        );
        assert!(list(search("%ex")).await.is_empty(), "at the end too");
        assert!(list(search("demo_")).await.is_empty());
        assert!(
            list(RunFilter {
                since: Some(Timestamp::after(std::time::Duration::from_secs(60))),
                ..all.clone()
            })
            .await
            .is_empty()
        );

        // Pages of two: the cursor of each page's last row starts the next.
        let mut seen = Vec::new();
        let mut after = None;
        loop {
            let page = list(RunFilter {
                limit: 2,
                after: after.clone(),
                ..all.clone()
            })
            .await;
            let Some(last) = page.last() else { break };
            after = Some(store.run_cursor(&whole(last)).await.unwrap().unwrap());
            let cursor = after.clone().unwrap();
            assert_eq!(RunCursor::decode(&cursor.encode()), Some(cursor));
            seen.extend(page);
        }
        assert_eq!(seen, list(all.clone()).await);
        assert_eq!(RunCursor::decode("nonsense"), None);
        assert_eq!(store.run_cursor("missing").await.unwrap(), None);
    }

    on_both_backends!(
        the_run_list_filters_searches_and_pages,
        only_the_end_that_wins_with_a_success_becomes_the_cache_entry,
        a_create_dropped_mid_batch_leaves_both_rows_or_none_and_the_lock_free,
        a_create_that_fails_halfway_leaves_nothing_and_the_store_usable,
        runs_are_counted_by_status_and_engine_and_an_end_names_its_engine,
        a_late_result_never_overwrites_a_terminal_state,
        a_read_after_a_write_sees_it_although_reads_are_kept,
        uploads_are_claimed_once_and_cache_hits_need_success,
        runs_are_listed_in_order_reconciled_once_and_uploads_reopened
    );
}
