//! Requests, runs and cache entries in PostgreSQL: the guarded moves of `crate::jobs`, each one
//! statement (or one transaction where a request and its run appear together).

use serde_json::Value;
use sqlx::types::Json;

use super::Postgres;
use crate::QueueFull;
use crate::jobs::{
    Binding, CleanupCounts, Ended, Ending, JobStore, NewRequest, NewRun, ProcessMark, RUN_COUNTS,
    Removed, Request, Run, RunCount, RunCursor, RunFilter, RunRow, UploadState, ended_columns,
    request_columns, run_columns, with_runs,
};
use skill_runner_types::clock::Timestamp;
use skill_runner_types::engine::Engine;
use skill_runner_types::run_state::{Move, RunStatus};

type Tx<'a> = sqlx::Transaction<'a, sqlx::Postgres>;

/// Records a queued run; `node` holds its folder already (its uploads), or `None`.
async fn insert_run(
    tx: &mut Tx<'_>,
    request_id: &str,
    run: &NewRun,
    now: Timestamp,
    node: Option<&str>,
) -> anyhow::Result<()> {
    sqlx::query(
        "INSERT INTO runs (run_id, request_id, skill_id, engine, skill_dir, status, cache_key,
                           created_at, updated_at, node, tenant_id, priority, not_before,
                           schedule_id, callback_url)
         VALUES ($1, $2, $3, $4, $5, 'queued', $6, $7, $7, $8, $9, $10, $11, $12, $13)",
    )
    .bind(&run.run_id)
    .bind(request_id)
    .bind(&run.skill_id)
    .bind(run.engine)
    .bind(&run.skill_dir)
    .bind(&run.cache_key)
    .bind(now)
    .bind(node)
    .bind(&run.tenant_id)
    .bind(i64::from(run.priority))
    .bind(run.not_before)
    .bind(&run.schedule_id)
    .bind(&run.callback_url)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// The advisory lock that orders the writes of queued runs across nodes (`sk-queue`).
const QUEUE_LOCK: i64 = 0x736b_2d71_7565_7565;

impl Postgres {
    /// Takes the queue's lock for the rest of `tx` and refuses ([`QueueFull`]) when the nodes
    /// together hold their bound of queued runs: counted and written under one lock, so no
    /// burst of creates on several nodes passes the bound.
    pub(super) async fn make_room(&self, tx: &mut Tx<'_>) -> anyhow::Result<()> {
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(QUEUE_LOCK)
            .execute(&mut **tx)
            .await?;
        let (queued,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM runs WHERE status = 'queued'")
            .fetch_one(&mut **tx)
            .await?;
        if usize::try_from(queued).unwrap_or(usize::MAX) >= self.queue_bound {
            return Err(QueueFull.into());
        }
        Ok(())
    }
}

/// A guard on a run's status: `status` is one of the JSON array's names (a [`Move`]'s `from`).
macro_rules! status_in {
    ($n:literal) => {
        concat!(
            "status IN (SELECT json_array_elements_text($",
            $n,
            "::json))"
        )
    };
}

#[async_trait::async_trait]
impl JobStore for Postgres {
    async fn create_request(
        &self,
        request: &NewRequest,
        binding: Option<&Binding>,
    ) -> anyhow::Result<()> {
        let now = Timestamp::now();
        let (run_id, cache_hit, upload_state) = match binding {
            Some(Binding::Run(run)) => (Some(run.run_id.as_str()), false, UploadState::None),
            Some(Binding::CacheHit(run_id)) => (Some(run_id.as_str()), true, UploadState::None),
            None => (None, false, UploadState::Awaiting),
        };
        let mut tx = self.pool.begin().await?;
        if let Some(Binding::Run(run)) = binding {
            self.make_room(&mut tx).await?;
            // The secrets of a request stay in the data dir of the node that received them.
            let node = request
                .runtime_options
                .has_secrets()
                .then_some(self.node.id.as_str());
            insert_run(&mut tx, &request.request_id, run, now, node).await?;
        }
        sqlx::query(
            "INSERT INTO requests (request_id, kind, skill_id, engine, model, engine_options,
                                   input, parameter, runtime_options, upload_state, run_id,
                                   cache_hit, created_at, updated_at, client_address,
                                   tenant_id, key_id)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $13, $14, $15, $16)",
        )
        .bind(&request.request_id)
        .bind(request.kind)
        .bind(&request.skill_id)
        .bind(request.engine.map_or("", Engine::as_str))
        .bind(&request.model)
        .bind(Json(&request.engine_options))
        .bind(Json(&request.input))
        .bind(Json(&request.parameter))
        .bind(Json(&request.runtime_options))
        .bind(upload_state)
        .bind(run_id)
        .bind(cache_hit)
        .bind(now)
        .bind(&request.client_address)
        .bind(&request.tenant_id)
        .bind(&request.key_id)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn request(&self, request_id: &str) -> anyhow::Result<Option<Request>> {
        let request = sqlx::query_as(concat!(
            "SELECT ",
            request_columns!(),
            " FROM requests WHERE request_id = $1"
        ))
        .bind(request_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(request)
    }

    async fn run(&self, run_id: &str) -> anyhow::Result<Option<Run>> {
        let row: Option<RunRow> = sqlx::query_as(concat!(
            "SELECT ",
            run_columns!(),
            " FROM runs WHERE run_id = $1"
        ))
        .bind(run_id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(Run::try_from).transpose()
    }

    async fn claim_upload(&self, request_id: &str) -> anyhow::Result<bool> {
        let done = sqlx::query(
            "UPDATE requests SET upload_state = 'receiving', upload_node = $3, updated_at = $1
             WHERE request_id = $2 AND upload_state = 'awaiting'",
        )
        .bind(Timestamp::now())
        .bind(request_id)
        .bind(&self.node.id)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn release_upload(&self, request_id: &str) -> anyhow::Result<()> {
        sqlx::query(
            "UPDATE requests SET upload_state = 'awaiting', updated_at = $1
             WHERE request_id = $2 AND upload_state = 'receiving'",
        )
        .bind(Timestamp::now())
        .bind(request_id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn complete_upload(
        &self,
        request_id: &str,
        binding: &Binding,
        temp_skill: Option<(&str, &str)>,
        anywhere: bool,
    ) -> anyhow::Result<()> {
        let now = Timestamp::now();
        let mut tx = self.pool.begin().await?;
        let (run_id, cache_hit) = match binding {
            // The uploads are in this node's data dir (its turns run here), or in shared
            // storage (any node's may).
            Binding::Run(run) => {
                self.make_room(&mut tx).await?;
                let node = (!anywhere).then_some(self.node.id.as_str());
                insert_run(&mut tx, request_id, run, now, node).await?;
                (run.run_id.as_str(), false)
            }
            Binding::CacheHit(run_id) => (run_id.as_str(), true),
        };
        let (skill_id, temp_dir) = temp_skill.unzip();
        let done = sqlx::query(
            "UPDATE requests SET upload_state = 'done', run_id = $1, cache_hit = $2,
                 skill_id = COALESCE($3, skill_id), temp_dir = COALESCE($4, temp_dir),
                 updated_at = $5
             WHERE request_id = $6 AND upload_state = 'receiving'",
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
        let done = sqlx::query(
            "UPDATE requests SET upload_state = 'awaiting', upload_node = NULL, updated_at = $1
             WHERE upload_state = 'receiving' AND upload_node = $2",
        )
        .bind(Timestamp::now())
        .bind(&self.node.id)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }

    async fn fail_upload(
        &self,
        request_id: &str,
        code: Option<&str>,
        error: &str,
    ) -> anyhow::Result<()> {
        sqlx::query(
            "UPDATE requests SET upload_state = 'done', error_code = $1, error = $2,
                 updated_at = $3
             WHERE request_id = $4 AND upload_state = 'receiving'",
        )
        .bind(code)
        .bind(error)
        .bind(Timestamp::now())
        .bind(request_id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn start_run(&self, run_id: &str, sandbox: &str) -> anyhow::Result<Option<Run>> {
        skill_runner_types::faults::check("store-start-run")?;
        let now = Timestamp::now();
        let row: Option<RunRow> = sqlx::query_as(concat!(
            "UPDATE runs SET status = $1, turn = turn + 1, sandbox = $2,
                 started_at = COALESCE(started_at, $3), updated_at = $3,
                 node = COALESCE(node, $6), stored = FALSE
             WHERE run_id = $4 AND lease_node = $6 AND ",
            status_in!("5"),
            " RETURNING ",
            run_columns!()
        ))
        .bind(RunStatus::Running)
        .bind(sandbox)
        .bind(now)
        .bind(run_id)
        .bind(Move::Start.from_json())
        .bind(&self.node.id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(Run::try_from).transpose()
    }

    async fn set_run_process(
        &self,
        run_id: &str,
        mark: Option<&ProcessMark>,
    ) -> anyhow::Result<()> {
        sqlx::query(
            "UPDATE runs SET pgid = $1, pg_boot_id = $2, pg_start_ticks = $3 WHERE run_id = $4",
        )
        .bind(mark.map(|m| i64::from(m.pgid)))
        .bind(mark.map(|m| m.boot_id.as_str()))
        .bind(mark.map(|m| m.start_ticks as i64))
        .bind(run_id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn set_run_session(&self, run_id: &str, session: &str) -> anyhow::Result<()> {
        sqlx::query("UPDATE runs SET engine_session = $1 WHERE run_id = $2")
            .bind(session)
            .bind(run_id)
            .execute(&self.pool)
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
        by.check_target(ending.status)?;
        skill_runner_types::faults::check("store-finish")?;
        let now = Timestamp::now();
        let mut tx = self.pool.begin().await?;
        // Only the writer whose UPDATE moved the run adds its cache entry and its deliveries.
        let ended: Option<Ended> = sqlx::query_as(concat!(
            "WITH ended AS (
                 UPDATE runs SET status = $1, error_code = $2, error_message = $3, warnings = $4,
                     result = $5, pgid = NULL, pg_boot_id = NULL, pg_start_ticks = NULL,
                     pending_interaction_id = NULL, wait_deadline = NULL, lease_node = NULL,
                     updated_at = $6, finished_at = $6
                 WHERE run_id = $7 AND ",
            status_in!("8"),
            " AND ($9::BIGINT IS NULL OR interaction_count = $9)",
            ended_columns!(),
            ", status, cache_key, run_id
             ), cached AS (
                 INSERT INTO cache_entries (cache_key, run_id, created_at)
                     SELECT cache_key, run_id, $6 FROM ended
                     WHERE status = 'succeeded' AND cache_key IS NOT NULL
                 ON CONFLICT (cache_key) DO UPDATE SET run_id = excluded.run_id,
                     created_at = excluded.created_at
             )
             SELECT request_id, engine, temp_skill FROM ended"
        ))
        .bind(ending.status)
        .bind(&ending.error_code)
        .bind(&ending.error_message)
        .bind(serde_json::to_string(&ending.warnings)?)
        .bind(ending.result.as_ref().map(Value::to_string))
        .bind(now)
        .bind(run_id)
        .bind(by.from_json())
        .bind(asked.map(i64::from))
        .fetch_optional(&mut *tx)
        .await?;
        if ended.is_some() {
            super::webhooks::tell(&mut tx, run_id, now).await?;
        }
        tx.commit().await?;
        Ok(ended)
    }

    async fn reconcile_interrupted(
        &self,
        run_id: &str,
        from: RunStatus,
        ending: &Ending,
        reason: &str,
    ) -> anyhow::Result<Option<Ended>> {
        anyhow::ensure!(
            Move::Reconcile.allows(from, ending.status),
            "cannot reconcile a run from '{}' to '{}'",
            from.as_str(),
            ending.status.as_str()
        );
        let now = Timestamp::now();
        let mut tx = self.pool.begin().await?;
        let ended: Option<Ended> = sqlx::query_as(concat!(
            "UPDATE runs SET status = $1, error_code = $2, error_message = $3, result = $4,
                 recovery_state = 'failed_reconciled', recovered_at = $5, recovery_reason = $6,
                 pgid = NULL, pg_boot_id = NULL, pg_start_ticks = NULL,
                 pending_interaction_id = NULL, wait_deadline = NULL, lease_node = NULL,
                 updated_at = $5, finished_at = $5
             WHERE run_id = $7 AND status = $8",
            ended_columns!()
        ))
        .bind(ending.status)
        .bind(&ending.error_code)
        .bind(&ending.error_message)
        .bind(ending.result.as_ref().map(Value::to_string))
        .bind(now)
        .bind(reason)
        .bind(run_id)
        .bind(from)
        .fetch_optional(&mut *tx)
        .await?;
        if ended.is_some() {
            super::webhooks::tell(&mut tx, run_id, now).await?;
        }
        tx.commit().await?;
        Ok(ended)
    }

    async fn list_runs(&self, filter: &RunFilter) -> anyhow::Result<Vec<(Request, Run)>> {
        // As SQLite's: only the conditions given, so the planner picks the index that serves.
        let mut query = sqlx::QueryBuilder::<sqlx::Postgres>::new(concat!(
            "SELECT ",
            request_columns!(),
            " FROM requests WHERE run_id IS NOT NULL"
        ));
        if let Some(status) = filter.status {
            query
                .push(" AND run_id IN (SELECT run_id FROM runs WHERE status = ")
                .push_bind(status)
                .push(")");
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
            query
                .push(" AND (starts_with(request_id, ")
                .push_bind(search.clone())
                .push(") OR right(request_id, char_length(")
                .push_bind(search.clone())
                .push(")) = ")
                .push_bind(search.clone())
                .push(" OR starts_with(skill_id, ")
                .push_bind(search.clone())
                .push("))");
        }
        if let Some(after) = &filter.after {
            query
                .push(" AND (created_at, seq) < (")
                .push_bind(after.created_at)
                .push(", ")
                .push_bind(after.seq)
                .push(")");
        }
        query
            .push(" ORDER BY created_at DESC, seq DESC LIMIT ")
            .push_bind(i64::from(filter.limit));
        let requests: Vec<Request> = query.build_query_as().fetch_all(&self.pool).await?;
        let run_ids: Vec<&str> = requests
            .iter()
            .filter_map(|r| r.run_id.as_deref())
            .collect();
        let runs: Vec<RunRow> = sqlx::query_as(concat!(
            "SELECT ",
            run_columns!(),
            " FROM runs WHERE run_id = ANY($1)"
        ))
        .bind(&run_ids)
        .fetch_all(&self.pool)
        .await?;
        with_runs(requests, runs)
    }

    async fn run_cursor(&self, request_id: &str) -> anyhow::Result<Option<RunCursor>> {
        let row: Option<(Timestamp, i64)> =
            sqlx::query_as("SELECT created_at, seq FROM requests WHERE request_id = $1")
                .bind(request_id)
                .fetch_optional(&self.pool)
                .await?;
        Ok(row.map(|(created_at, seq)| RunCursor { created_at, seq }))
    }

    async fn runs_with_status(&self, status: RunStatus) -> anyhow::Result<Vec<Run>> {
        let rows: Vec<RunRow> = sqlx::query_as(concat!(
            "SELECT ",
            run_columns!(),
            " FROM runs WHERE status = $1 ORDER BY seq"
        ))
        .bind(status)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(Run::try_from).collect()
    }

    async fn finished_counts(&self) -> anyhow::Result<CleanupCounts> {
        let (runs, requests, cache): (i64, i64, i64) = sqlx::query_as(crate::jobs::FINISHED_COUNTS)
            .fetch_one(&self.pool)
            .await?;
        Ok(CleanupCounts::of(runs, requests, cache))
    }

    async fn run_counts(&self) -> anyhow::Result<Vec<RunCount>> {
        let rows = sqlx::query_as(RUN_COUNTS).fetch_all(&self.pool).await?;
        Ok(RunCount::of(rows))
    }

    async fn cached_run(&self, cache_key: &str) -> anyhow::Result<Option<String>> {
        let row: Option<(String,)> = sqlx::query_as(
            "SELECT c.run_id FROM cache_entries c JOIN runs r ON r.run_id = c.run_id
             WHERE c.cache_key = $1 AND r.status = 'succeeded'",
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
        let mut tx = self.pool.begin().await?;
        // Locked, so a node finishing the same sweep at once waits and then finds them gone.
        // A run whose folder another live node holds is left to that node's sweep, which
        // removes the folder with the row.
        let doomed: Vec<(String,)> = sqlx::query_as(
            "SELECT run_id FROM runs
             WHERE ((status = 'failed' AND finished_at < $1)
                    OR (status IN ('succeeded', 'canceled') AND finished_at < $2))
               AND (node IS NULL OR node = $3
                    OR NOT EXISTS (SELECT 1 FROM nodes n WHERE n.node_id = runs.node))
             FOR UPDATE",
        )
        .bind(failed_before)
        .bind(finished_before)
        .bind(&self.node.id)
        .fetch_all(&mut *tx)
        .await?;
        let doomed: Vec<String> = doomed.into_iter().map(|(id,)| id).collect();
        let mut removed: Vec<Removed> = sqlx::query_as(
            "SELECT d AS run_id, q.temp_dir AS temp_dir, q.request_id AS request_id
             FROM UNNEST($1::TEXT[]) AS d LEFT JOIN requests q ON q.run_id = d",
        )
        .bind(&doomed)
        .fetch_all(&mut *tx)
        .await?;
        let orphans: Vec<Removed> = sqlx::query_as(
            "SELECT NULL::TEXT AS run_id, temp_dir, request_id FROM requests
             WHERE run_id IS NULL AND error IS NOT NULL AND updated_at < $1",
        )
        .bind(failed_before)
        .fetch_all(&mut *tx)
        .await?;
        removed.extend(orphans);
        let cache = sqlx::query("DELETE FROM cache_entries WHERE run_id = ANY($1)")
            .bind(&doomed)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        let requests = sqlx::query(
            "DELETE FROM requests WHERE run_id = ANY($1)
                OR (run_id IS NULL AND error IS NOT NULL AND updated_at < $2)",
        )
        .bind(&doomed)
        .bind(failed_before)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        let runs = sqlx::query("DELETE FROM runs WHERE run_id = ANY($1)")
            .bind(&doomed)
            .execute(&mut *tx)
            .await?
            .rows_affected();
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
